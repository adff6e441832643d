//! Self-metrics, named after contrib's (`otelsvc_k8s_*`, `k8s.pod.association`).

use profcol_core::telemetry::{Counter, Gauge, Telemetry};

use crate::cache::Changes;

pub const TABLE_SIZE: &str = "otelcol_otelsvc_k8s_pod_table_size";
pub const PODS_ADDED: &str = "otelcol_otelsvc_k8s_pod_added_total";
pub const PODS_UPDATED: &str = "otelcol_otelsvc_k8s_pod_updated_total";
pub const PODS_DELETED: &str = "otelcol_otelsvc_k8s_pod_deleted_total";
pub const ASSOCIATIONS: &str = "otelcol_k8s_pod_association_total";
pub const WATCH_ERRORS: &str = "otelcol_otelsvc_k8s_watch_errors_total";

/// Association outcomes, the `status` label.
pub const HIT: &str = "hit";
pub const MISS: &str = "miss";
/// Missed while the pod cache had not had its first full list: the data passed as is.
pub const NOT_SYNCED: &str = "not_synced";

#[derive(Clone)]
pub struct Metrics {
    telemetry: Telemetry,
    processor: String,
    pub table_size: Gauge,
    pub added: Counter,
    pub updated: Counter,
    pub deleted: Counter,
    pub hit: Counter,
    pub miss: Counter,
    pub not_synced: Counter,
}

impl Metrics {
    pub fn new(telemetry: &Telemetry, processor: &str) -> Self {
        let labels = [("processor", processor)];
        let association = |status: &str| {
            telemetry.counter(
                ASSOCIATIONS,
                "Resources looked up in the pod cache, by outcome.",
                &[
                    ("processor", processor),
                    ("status", status),
                    ("otelcol_signal", "profiles"),
                ],
            )
        };
        Metrics {
            telemetry: telemetry.clone(),
            processor: processor.to_owned(),
            table_size: telemetry.gauge(
                TABLE_SIZE,
                "Pods in the cache, deleted ones in their grace period included.",
                &labels,
            ),
            added: telemetry.counter(PODS_ADDED, "Pods added to the cache.", &labels),
            updated: telemetry.counter(PODS_UPDATED, "Pod updates applied to the cache.", &labels),
            deleted: telemetry.counter(PODS_DELETED, "Pods deleted from the cache.", &labels),
            hit: association(HIT),
            miss: association(MISS),
            not_synced: association(NOT_SYNCED),
        }
    }

    pub fn record(&self, changes: Changes, table_len: usize) {
        self.added.add(changes.added);
        self.updated.add(changes.updated);
        self.deleted.add(changes.deleted);
        self.table_size
            .set(i64::try_from(table_len).unwrap_or(i64::MAX));
    }

    pub fn watch_errors(&self, resource: &str) -> Counter {
        self.telemetry.counter(
            WATCH_ERRORS,
            "Failed Kubernetes list or watch calls (each retried with backoff).",
            &[("processor", &self.processor), ("resource", resource)],
        )
    }
}
