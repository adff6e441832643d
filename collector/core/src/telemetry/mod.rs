//! Self-telemetry: counters and gauges at the graph's edges, named as otelcol names them,
//! rendered in Prometheus text for /metrics.

mod edges;
pub mod heap;
mod metrics;

pub use edges::{ExporterCounters, ProcessorCounters, ReceiverCounters};
pub use metrics::{Counter, Gauge, Histogram, LATENCY_BUCKETS, Telemetry};
