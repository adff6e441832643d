//! Self-telemetry: counters and gauges at the graph's edges, named as otelcol names them,
//! rendered in Prometheus text for /metrics.

mod edges;
pub mod heap;
mod metrics;
mod wire;

pub use edges::{ExporterCounters, ProcessorCounters, ReceiverCounters};
pub use metrics::{ComputedGauge, Counter, Gauge, Histogram, LATENCY_BUCKETS, Telemetry};
pub use wire::WireBytes;
