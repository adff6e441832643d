//! The `otlp` (gRPC) and `otlphttp` exporters: send profile batches to an OTLP endpoint,
//! another collector or a backend.
//!
//! Both share the client config (`tls`, `headers`, `compression`, `timeout`,
//! `retry_on_failure`, `sending_queue`), the encoding and compression of the request (level
//! 1 gzip or zstd) and the mapping of replies to retryable or permanent errors.
//! [`Exporter::export`](profcol_core::component::Exporter::export) is one attempt: the
//! framework's exporter helper queues, retries and times out around it.

mod config;
mod grpc_exporter;
mod http_exporter;
mod payload;
mod reply;
/// The `google.rpc` messages of error replies (shared with the OTLP receiver).
pub use profcol_proto::google_rpc as rpc;

pub use config::{
    Compression, Encoding, HttpDestination, OtlpExporterConfig, OtlpHttpExporterConfig,
    PROFILES_PATH, TlsClientSettings,
};
pub use grpc_exporter::{EXPORT_PATH, OtlpExporterFactory};
pub use http_exporter::OtlpHttpExporterFactory;
pub use payload::{GZIP_LEVEL, ZSTD_LEVEL, compress};
pub use profcol_core::client::tls::TlsError;
pub use reply::PARTIAL_SUCCESS_METRIC;

profcol_core::component_conformance!(exporter: OtlpExporterFactory, "otlp", Alpha, default_errors: ["endpoint"]);
profcol_core::component_conformance!(mod otlphttp_conformance; exporter: OtlpHttpExporterFactory, "otlphttp", Alpha, default_errors: ["endpoint"]);
