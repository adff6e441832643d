//! The counters the framework keeps at each edge of the graph, with otelcol's names and
//! labels. Components never touch these.

use super::metrics::{ComputedGauge, Counter, Gauge, Histogram, Telemetry};

#[derive(Clone, Debug, Default)]
pub struct ReceiverCounters {
    accepted_samples: Counter,
    refused_samples: Counter,
    accepted_profiles: Counter,
    refused_profiles: Counter,
}

impl ReceiverCounters {
    pub fn new(t: &Telemetry, receiver: &str) -> Self {
        let l = [("receiver", receiver)];
        ReceiverCounters {
            accepted_samples: t.counter(
                "otelcol_receiver_accepted_profile_samples_total",
                "Profile samples successfully pushed into the pipeline.",
                &l,
            ),
            refused_samples: t.counter(
                "otelcol_receiver_refused_profile_samples_total",
                "Profile samples that could not be pushed into the pipeline.",
                &l,
            ),
            accepted_profiles: t.counter(
                "otelcol_receiver_accepted_profiles_total",
                "Profiles successfully pushed into the pipeline.",
                &l,
            ),
            refused_profiles: t.counter(
                "otelcol_receiver_refused_profiles_total",
                "Profiles that could not be pushed into the pipeline.",
                &l,
            ),
        }
    }

    /// Counters that no registry shows, for tests.
    pub fn detached() -> Self {
        Self::default()
    }

    pub fn accepted(&self, samples: u64, profiles: u64) {
        self.accepted_samples.add(samples);
        self.accepted_profiles.add(profiles);
    }

    pub fn refused(&self, samples: u64, profiles: u64) {
        self.refused_samples.add(samples);
        self.refused_profiles.add(profiles);
    }
}

#[derive(Clone, Debug, Default)]
pub struct ProcessorCounters {
    pub incoming: Counter,
    pub outgoing: Counter,
    pub dropped: Counter,
}

impl ProcessorCounters {
    pub fn new(t: &Telemetry, processor: &str, pipeline: &str) -> Self {
        let l = [
            ("processor", processor),
            ("pipeline", pipeline),
            ("otel_signal", "profiles"),
        ];
        ProcessorCounters {
            incoming: t.counter(
                "otelcol_processor_incoming_items_total",
                "Items passed to the processor.",
                &l,
            ),
            outgoing: t.counter(
                "otelcol_processor_outgoing_items_total",
                "Items emitted by the processor.",
                &l,
            ),
            dropped: t.counter(
                "otelcol_processor_dropped_items_total",
                "Items the processor failed on and dropped.",
                &l,
            ),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ExporterCounters {
    /// Each export attempt's duration, from the call to its answer (or its timeout).
    pub send_duration: Histogram,
    /// How late samples were acknowledged: from each sample's own timestamp (its
    /// profile's time when it has none) to the backend's answer.
    pub latency: Histogram,
    pub sent: Counter,
    pub send_failed: Counter,
    pub enqueue_failed: Counter,
    pub queue_size: Gauge,
    pub queue_capacity: Gauge,
    /// How long the oldest batch in the sending queue has waited; 0 when it is empty.
    pub queue_oldest_age: ComputedGauge,
}

impl ExporterCounters {
    pub fn new(t: &Telemetry, exporter: &str) -> Self {
        let l = [("exporter", exporter)];
        let d = [("exporter", exporter), ("data_type", "profiles")];
        ExporterCounters {
            send_duration: t.histogram(
                "otelcol_exporter_send_duration_seconds",
                "Duration of each export attempt, to the backend's answer or the timeout.",
                &l,
            ),
            latency: t.histogram(
                "otelcol_exporter_profile_latency_seconds",
                "Age of each sample when the backend acknowledged it: from its timestamp (its profile's time without one).",
                &l,
            ),
            sent: t.counter(
                "otelcol_exporter_sent_profile_samples_total",
                "Profile samples successfully sent.",
                &l,
            ),
            send_failed: t.counter(
                "otelcol_exporter_send_failed_profile_samples_total",
                "Profile samples that failed to be sent (after retries, or permanently).",
                &l,
            ),
            enqueue_failed: t.counter(
                "otelcol_exporter_enqueue_failed_profile_samples_total",
                "Profile samples that could not be added to the sending queue.",
                &l,
            ),
            queue_size: t.gauge(
                "otelcol_exporter_queue_size",
                "Batches in the sending queue.",
                &d,
            ),
            queue_capacity: t.gauge(
                "otelcol_exporter_queue_capacity",
                "Capacity of the sending queue.",
                &d,
            ),
            queue_oldest_age: t.computed_gauge(
                "otelcol_exporter_queue_oldest_batch_age_seconds",
                "How long the oldest batch in the sending queue has waited (0 when empty).",
                &d,
            ),
        }
    }
}
