//! `max_services`: at most so many distinct services at a time. A service counts while it
//! was seen within the last [`SERVICE_IDLE`]; profiles of a new service beyond the cap
//! are dropped and counted, with one warning per exporter.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use profcol_core::telemetry::{Counter, Telemetry};

/// How long a service not seen keeps its place.
pub(crate) const SERVICE_IDLE: Duration = Duration::from_secs(3600);
/// How often, at most, idle services are looked for while at the cap.
const PURGE_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct ServiceCap {
    id: String,
    /// 0: no cap.
    max: usize,
    seen: HashMap<String, Instant>,
    /// When idle services were last let go (at most once a minute, so that a flood of new
    /// names at the cap costs no scan per profile).
    purged: Option<Instant>,
    dropped: Counter,
    warned: bool,
}

impl ServiceCap {
    pub fn new(id: &str, max: usize, telemetry: &Telemetry) -> Self {
        ServiceCap {
            id: id.to_owned(),
            max,
            seen: HashMap::new(),
            purged: None,
            dropped: telemetry.counter(
                "profcol_exporter_service_cap_dropped_profiles_total",
                "Profiles dropped because their service was beyond the exporter's max_services.",
                &[("exporter", id)],
            ),
            warned: false,
        }
    }

    /// Whether a profile of `service` may go on (else it is counted as dropped).
    pub fn admit(&mut self, service: &str, now: Instant) -> bool {
        if self.max == 0 {
            return true;
        }
        if let Some(at) = self.seen.get_mut(service) {
            *at = now;
            return true;
        }
        let purge_due = self
            .purged
            .is_none_or(|at| now.saturating_duration_since(at) >= PURGE_EVERY);
        if self.seen.len() >= self.max && purge_due {
            self.seen
                .retain(|_, at| now.saturating_duration_since(*at) < SERVICE_IDLE);
            self.purged = Some(now);
        }
        if self.seen.len() < self.max {
            self.seen.insert(service.to_owned(), now);
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
                 (counted in profcol_exporter_service_cap_dropped_profiles_total; warned once)"
            );
        }
        false
    }

    #[cfg(test)]
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_new_services_until_old_ones_go_idle() {
        let t = Telemetry::new();
        let mut cap = ServiceCap::new("pprof", 2, &t);
        let t0 = Instant::now();
        assert!(cap.admit("a", t0));
        assert!(cap.admit("b", t0));
        assert!(!cap.admit("c", t0));
        assert!(!cap.admit("d", t0));
        assert!(
            cap.admit("a", t0 + Duration::from_secs(10)),
            "known ones go on"
        );
        assert_eq!(cap.dropped(), 2);
        assert_eq!(
            t.value(
                "profcol_exporter_service_cap_dropped_profiles_total",
                &[("exporter", "pprof")]
            ),
            Some(2)
        );
        // b idles out; c takes its place, a stays.
        let later = t0 + SERVICE_IDLE + Duration::from_secs(1);
        assert!(cap.admit("c", later));
        assert!(!cap.admit("b", later), "a and c hold both places");
        // a is idle too 20 s on, but idle services are looked for once a minute.
        assert!(!cap.admit("e", later + Duration::from_secs(20)));
        assert!(cap.admit("e", later + Duration::from_secs(61)));
        let mut none = ServiceCap::new("x", 0, &t);
        assert!((0..5000).all(|i| none.admit(&i.to_string(), t0)));
    }
}
