//! The `arrow` exporter: profiles to Parca's profile store as Apache Arrow records over
//! gRPC, as Parca's agent sends them.
//!
//! - `schema: v2` (default): one record batch per export, an Arrow IPC stream with LZ4
//!   (default), zstd or no body compression, sent with `WriteArrow`;
//! - `schema: v1`: the `Write` exchange (samples record, the ids the server lacks, the
//!   locations record).
//!
//! The client settings are the `otlp` exporter's (shared through
//! `profcol_core::client`). With `debuginfo:` set, the executables behind native frames
//! that the eBPF receiver saw on this host are uploaded to Parca's `DebuginfoService`.
//! [`encode_v2`] gives the v2 IPC bytes of a batch, for size measurements.

mod arrays;
mod buildid;
mod config;
mod debuginfo;
mod exporter;
pub mod model;
pub mod profile_types;
pub mod record_v1;
pub mod record_v2;

pub use arrays::ZSTD_LEVEL;
pub use config::{ArrowExporterConfig, Compression, DebuginfoSettings, Schema};
pub use debuginfo::{CHUNK_BYTES, UPLOADS_METRIC};
pub use exporter::{ArrowExporterFactory, MAX_MESSAGE_BYTES};

use profcol_core::pdata::ProfileBatch;

/// Why a batch could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("building the Arrow record failed: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

/// The Arrow v2 IPC stream of `batch` (what `WriteArrow` carries), with `compression`.
/// An empty batch gives a stream with an empty record.
pub fn encode_v2(batch: &ProfileBatch, compression: Compression) -> Result<Vec<u8>, EncodeError> {
    let model = model::Model::from_batch(batch);
    let record = record_v2::record(&model)?;
    Ok(arrays::ipc_stream(&record, compression)?)
}

/// The Arrow v1 samples record of `batch` as an IPC stream (the first message of `Write`).
pub fn encode_v1_samples(batch: &ProfileBatch) -> Result<Vec<u8>, EncodeError> {
    let model = model::Model::from_batch(batch);
    let record = record_v1::samples_record(&model)?;
    Ok(arrays::ipc_stream(&record, Compression::None)?)
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(
    exporter: ArrowExporterFactory,
    "arrow",
    Development,
    default_errors: ["endpoint"]
);
