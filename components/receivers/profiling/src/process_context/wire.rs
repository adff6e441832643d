//! The process context's bytes: its 32-byte header and its protobuf payload. What
//! another process wrote: checked here before anything is read on its word.

use profcol_core::pdata::types::{KeyValue, Resource};
use prost::Message;

pub const SIGNATURE: &[u8; 8] = b"OTEL_CTX";
pub const HEADER_LEN: usize = 32;
/// Where `published_at_ns` lies in the header.
pub const PUBLISHED_AT: u64 = 16;
/// The largest payload read (the OTEP's readers' bound).
pub const MAX_PAYLOAD: u32 = 64 << 10;

/// Why a header or payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the mapping does not start with the OTEL_CTX signature")]
    Signature,
    #[error("process context version {0} is not one this reader knows (1, 2)")]
    Version(u32),
    #[error("a process context payload of {0} bytes (at most {MAX_PAYLOAD})")]
    Size(u32),
    #[error("the publisher is updating the process context")]
    Updating,
    #[error("the process context payload is not a valid message: {0}")]
    Payload(String),
}

/// A header that passed its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub payload_size: u32,
    pub published_at: u64,
    pub payload: u64,
}

/// Checks a header: its signature, a version this reader knows, a payload of 1 byte to
/// [`MAX_PAYLOAD`], and a timestamp (0 while the publisher writes).
pub fn parse_header(bytes: &[u8; HEADER_LEN]) -> Result<Header, WireError> {
    let u32_at =
        |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    if &bytes[..8] != SIGNATURE {
        return Err(WireError::Signature);
    }
    let header = Header {
        version: u32_at(8),
        payload_size: u32_at(12),
        published_at: u64_at(16),
        payload: u64_at(24),
    };
    if header.published_at == 0 {
        return Err(WireError::Updating);
    }
    if !(1..=2).contains(&header.version) {
        return Err(WireError::Version(header.version));
    }
    if header.payload_size == 0 || header.payload_size > MAX_PAYLOAD {
        return Err(WireError::Size(header.payload_size));
    }
    Ok(header)
}

/// Version 2's payload (`ProcessContext`).
#[derive(Clone, PartialEq, Message)]
pub struct ContextMessage {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub attributes: Vec<KeyValue>,
}

/// The attributes a payload of `version` carries: version 1's `Resource`'s; version 2's
/// resource's, then its extra attributes.
pub fn decode_payload(version: u32, payload: &[u8]) -> Result<Vec<KeyValue>, WireError> {
    // At most 64 KiB: decoded, a few MiB at worst (an empty attribute is two bytes),
    // and only until the reader counts them.
    if version == 1 {
        return Resource::decode(payload)
            .map(|r| r.attributes)
            .map_err(|e| WireError::Payload(e.to_string()));
    }
    let message = ContextMessage::decode(payload).map_err(|e| WireError::Payload(e.to_string()))?;
    let mut attributes = message.resource.map(|r| r.attributes).unwrap_or_default();
    attributes.extend(message.attributes);
    Ok(attributes)
}
