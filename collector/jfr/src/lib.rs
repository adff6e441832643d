//! JFR (Java Flight Recorder) recordings into the shared profile model.
//!
//! Reads the chunked binary format the JDK (11 and later) and async-profiler (also inside
//! Pyroscope's Java agent) write: each chunk's metadata, its constant pools, and the
//! events profilers emit, which become OTLP profiles named as Pyroscope names them
//! ([`profiles`]). Everything is checked against the bytes: a truncated, corrupted or
//! hostile recording is an error that says where and what, never a panic, and costs time
//! and memory in proportion to its size.

mod chunk;
mod convert;
mod labels;
mod metadata;
mod profiles;
mod reader;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod writer;

pub use chunk::is_jfr;
pub use convert::{JfrOptions, jfr_to_batch};
pub use labels::{Context, LabelsSnapshot};
pub use profiles::PROFILE_NAME_ATTRIBUTE;

/// Most chunks read from one recording (the JDK starts one per 12 MiB or hour by default).
pub const MAX_CHUNKS: usize = 4096;

/// Bytes of memory reading a recording may take per byte of it, for the receivers'
/// decode budget: the recording itself, the chunk's constant-pool index and event list
/// (each entry at least 2 bytes of input), and the one value decoded at a time (at most
/// 65,536 kept). Real recordings take about 2 (`bench/jfr.sh`).
pub const JFR_DECODE_AMPLIFICATION: usize = 32;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JfrError {
    #[error("byte {at}: {what} runs past the end")]
    Truncated { what: String, at: usize },
    #[error("byte {at}: {what}")]
    Invalid { what: String, at: usize },
    /// An error within a chunk; its byte positions count from the chunk's start.
    #[error("chunk {index} (at byte {start} of the file): {error}")]
    InChunk {
        index: usize,
        start: usize,
        error: Box<JfrError>,
    },
    #[error("more than {MAX_CHUNKS} chunks")]
    TooManyChunks,
    #[error("the recording has more distinct entries than a profile's tables hold")]
    TooLarge,
    #[error("{0}")]
    Labels(String),
    #[error("an empty body is not a recording")]
    Empty,
}
