//! OTLP/JSON codec for OTLP profiles (opentelemetry-proto v1.11.0, `v1development` packages):
//! `ProfilesData` / `ExportProfilesServiceRequest` and `ExportProfilesServiceResponse`.
//!
//! It follows the OTLP/JSON rules the Go collector applies:
//! - lowerCamelCase field names on output; lowerCamelCase and the original snake_case proto names
//!   accepted on input; unknown fields ignored; `null` means "unset".
//! - `traceId`, `spanId`, `profileId` as lowercase hex (not base64); other bytes
//!   (`originalPayload`, `bytesValue`) as standard base64 (input: padded or not, standard or URL-safe
//!   alphabet).
//! - 64-bit integers written as decimal strings, accepted as strings or JSON numbers; 32-bit
//!   integers written as numbers, accepted as numbers or numeric strings. Non-integral or
//!   out-of-range values are errors that name the JSON path.
//! - Zero / empty fields omitted on output, except `Profile.sampleType` and `Profile.periodType`,
//!   which are always written (`{}` when unset). Dictionary tables are written whole, index-0 zero
//!   entries included.
//! - Doubles as JSON numbers; NaN and the infinities as `"NaN"`, `"Infinity"`, `"-Infinity"`.
//!
//! It is hand-written rather than derived with serde because the serde support of the Rust
//! `opentelemetry-proto` crate is not OTLP-compliant: it writes ids and byte fields as arrays of
//! numbers and 64-bit integers as JSON numbers, and rejects the decimal strings the Go collector
//! sends. Output is streamed straight into the caller's buffer (no intermediate JSON tree), so large
//! exports cost one pass; input is parsed into a `serde_json::Value` and then walked (moving strings
//! out of it rather than copying them). Index fields are not range-checked here.
//!
//! Precision note: serde_json's default float parser is best-effort; a `doubleValue` that needs 17
//! significant digits or an extreme exponent can read back 1-2 ULP off. Enabling serde_json's
//! `float_roundtrip` feature makes doubles round-trip exactly. Integers are always exact.

mod read;
mod write;

#[cfg(test)]
mod tests;

pub use read::{read_export_response_json, read_profiles_json};
pub use write::{write_export_response_json, write_profiles_json};

/// Deepest `AnyValue` nesting (array / kvlist inside array / kvlist ...) accepted on input; a
/// top-level attribute value is level 1. Note that serde_json's own nesting limit (128 JSON levels)
/// stops JSON text at roughly 40 `AnyValue` levels already; this cap guards the walker itself.
pub const MAX_ANY_VALUE_DEPTH: usize = 64;

/// Why an OTLP/JSON document could not be decoded. Every variant except [`JsonError::Syntax`]
/// names the offending field by its JSON path, e.g.
/// `resourceProfiles[0].scopeProfiles[1].profiles[0].samples[3].values[2]`.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not well-formed JSON, or nested deeper than serde_json's limit (128 levels).
    #[error("syntax error: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A value of the wrong JSON type or format.
    #[error("{path}: expected {expected}, got {got}")]
    Type {
        /// JSON path of the value.
        path: String,
        /// What the field needs.
        expected: &'static str,
        /// The value found (strings shortened).
        got: String,
    },
    /// An integer outside the range of its protobuf type.
    #[error("{path}: expected {expected}, got {got} (out of range)")]
    OutOfRange {
        /// JSON path of the value.
        path: String,
        /// What the field needs.
        expected: &'static str,
        /// The value found.
        got: String,
    },
    /// More than one member of the `AnyValue` oneof is set.
    #[error("{path}: AnyValue has more than one value set ({first} and {second})")]
    ConflictingOneof {
        /// JSON path of the AnyValue.
        path: String,
        /// One member found.
        first: &'static str,
        /// Another member found.
        second: &'static str,
    },
    /// `AnyValue`s nested deeper than [`MAX_ANY_VALUE_DEPTH`].
    #[error("{path}: AnyValue nested deeper than {limit} levels")]
    TooDeep {
        /// JSON path of the first AnyValue past the limit.
        path: String,
        /// The limit.
        limit: usize,
    },
}

/// Why OTLP/JSON could not become a batch: not OTLP/JSON, or OTLP that fails the checks.
#[derive(Debug, thiserror::Error)]
pub enum FromJsonError {
    #[error(transparent)]
    Json(#[from] JsonError),
    #[error(transparent)]
    Invalid(#[from] crate::decode::ValidationError),
}
