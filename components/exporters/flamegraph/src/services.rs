//! `max_services`: at most so many services have a folder or are being gathered. A
//! service's place is its folder (present from an earlier run too); it is freed when the
//! folder goes (`max_age`, or by hand). Profiles of further services are dropped and
//! counted, with one warning per exporter.

use std::collections::HashSet;

use profcol_core::telemetry::{Counter, Telemetry};

use crate::store::service_dir;

pub(crate) const DROPPED_METRIC: &str = "profcol_exporter_service_cap_dropped_profiles_total";

pub(crate) struct ServiceCap {
    id: String,
    /// 0: no cap.
    max: usize,
    /// Folder names (`service_dir`) holding a place.
    known: HashSet<String>,
    dropped: Counter,
    warned: bool,
}

impl ServiceCap {
    pub fn new(id: &str, max: usize, folders: HashSet<String>, telemetry: &Telemetry) -> Self {
        ServiceCap {
            id: id.to_owned(),
            max,
            known: folders,
            dropped: telemetry.counter(
                DROPPED_METRIC,
                "Profiles dropped because their service was beyond the exporter's max_services.",
                &[("exporter", id)],
            ),
            warned: false,
        }
    }

    /// Whether a profile of `service` may be gathered (else it is counted as dropped).
    pub fn admit(&mut self, service: &str) -> bool {
        if self.max == 0 {
            return true;
        }
        let folder = service_dir(service);
        if self.known.contains(&folder) {
            return true;
        }
        if self.known.len() < self.max {
            self.known.insert(folder);
            return true;
        }
        self.dropped.add(1);
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                exporter = %self.id,
                max_services = self.max,
                service = %service,
                "more distinct services than max_services; profiles of new services are dropped \
                 (counted in {DROPPED_METRIC}; warned once)"
            );
        }
        false
    }

    /// After a flush: the places held are the folders present and the services being
    /// gathered.
    pub fn refresh<'a>(
        &mut self,
        folders: HashSet<String>,
        gathering: impl Iterator<Item = &'a str>,
    ) {
        self.known = folders;
        self.known.extend(gathering.map(service_dir));
    }
}
