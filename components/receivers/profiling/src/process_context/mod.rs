//! The process context that OpenTelemetry SDKs publish for readers outside the process
//! (OTEP 4719): a mapping named `OTEL_CTX` whose 32-byte header points at a protobuf
//! payload with the SDK's resource.
//!
//! Header (native endian, x86-64): `signature` "OTEL_CTX" (8 bytes), `version` u32,
//! `payload_size` u32, `published_at_ns` u64 (CLOCK_BOOTTIME; 0 while the publisher is
//! writing), `payload` u64 (an address in the process). Version 1's payload is an OTLP
//! `Resource`; version 2's a `ProcessContext` (opentelemetry-proto v1.11.0,
//! `processcontext/v1development`): its `resource` (1) and extra `attributes` (2).
//!
//! The process is another user's: its header is checked, its payload bounded, and a read
//! that raced an update (the timestamp 0, or another after the payload) is tried again,
//! at most [`MAX_ATTEMPTS`] times.

pub mod wire;

use crate::process::{MapsEntry, MapsPath};
use crate::python::code::Memory;
use profcol_core::pdata::types::KeyValue;
use wire::{HEADER_LEN, PUBLISHED_AT};
pub use wire::{MAX_PAYLOAD, WireError};

/// The names the mapping shows in `/proc/<pid>/maps`: a memfd (named by prctl, or not),
/// or an anonymous mapping named by prctl.
const MAPPING_NAMES: [&str; 3] = [
    "/memfd:OTEL_CTX",
    "[anon_shmem:OTEL_CTX]",
    "[anon:OTEL_CTX]",
];
/// Reads tried while the publisher keeps updating.
pub const MAX_ATTEMPTS: usize = 3;

/// Whether a line of `/proc/<pid>/maps` is the process context's mapping.
pub fn is_context_mapping(entry: &MapsEntry) -> bool {
    if entry.perms.exec {
        return false;
    }
    match &entry.path {
        MapsPath::File { path, .. } => path == MAPPING_NAMES[0],
        MapsPath::Pseudo(name) => MAPPING_NAMES[1..].contains(&name.as_str()),
        _ => false,
    }
}

/// Why a process context was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("the process context at {0:#x} could not be read")]
    Unreadable(u64),
    #[error("the publisher was updating the process context at every read")]
    Updating,
    #[error(transparent)]
    Invalid(WireError),
}

impl ContextError {
    /// Whether the process published something wrong (as opposed to being in the middle
    /// of an update, or gone).
    pub fn is_invalid(&self) -> bool {
        matches!(self, ContextError::Invalid(_))
    }
}

impl From<WireError> for ContextError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Updating => ContextError::Updating,
            other => ContextError::Invalid(other),
        }
    }
}

/// A process context as read.
#[derive(Debug, Clone)]
pub struct ProcessContext {
    /// When it was published (the publisher's CLOCK_BOOTTIME nanoseconds).
    pub published_at: u64,
    /// The resource's attributes, then the extra ones (version 2).
    pub attributes: Vec<KeyValue>,
    /// The payload as read: what contexts are compared by.
    payload: Vec<u8>,
}

impl PartialEq for ProcessContext {
    fn eq(&self, other: &Self) -> bool {
        self.published_at == other.published_at && self.payload == other.payload
    }
}

impl Eq for ProcessContext {}

impl std::hash::Hash for ProcessContext {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.published_at.hash(state);
        self.payload.hash(state);
    }
}

/// When the context at `addr` was last published; `None` when it cannot be read, 0 while
/// it is being updated.
pub fn published_at(memory: &dyn Memory, addr: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    memory
        .read(addr.checked_add(PUBLISHED_AT)?, &mut word)
        .then(|| u64::from_ne_bytes(word))
}

/// Reads the context whose mapping starts at `addr`.
pub fn read(memory: &dyn Memory, addr: u64) -> Result<ProcessContext, ContextError> {
    for _ in 0..MAX_ATTEMPTS {
        match read_once(memory, addr) {
            Err(ContextError::Updating) => continue,
            other => return other,
        }
    }
    Err(ContextError::Updating)
}

fn read_once(memory: &dyn Memory, addr: u64) -> Result<ProcessContext, ContextError> {
    let mut bytes = [0u8; HEADER_LEN];
    if !memory.read(addr, &mut bytes) {
        return Err(ContextError::Unreadable(addr));
    }
    let header = wire::parse_header(&bytes)?;
    let mut payload = vec![0u8; header.payload_size as usize];
    let read = memory.read(header.payload, &mut payload);
    // The payload is only trusted if nothing was published meanwhile.
    if published_at(memory, addr) != Some(header.published_at) {
        return Err(ContextError::Updating);
    }
    if !read {
        return Err(ContextError::Unreadable(header.payload));
    }
    let attributes = wire::decode_payload(header.version, &payload)?;
    Ok(ProcessContext {
        published_at: header.published_at,
        attributes,
        payload,
    })
}

#[cfg(test)]
mod tests;
