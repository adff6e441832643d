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

use crate::memory::Memory;
use crate::procfs::{MapsEntry, MapsPath};
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

/// Attributes taken from one context, at most; a context with more is refused.
pub const MAX_ATTRIBUTES: usize = 128;

/// Namespaces the receiver owns, or that other components trust to say who a process is
/// (`k8s_attributes` associates by `container.id` and `k8s.pod.uid`): a process does not
/// get to name them for itself.
const PROTECTED: [&str; 4] = ["process.", "container.", "host.", "k8s."];

/// A process context as read.
#[derive(Debug, Clone)]
pub struct ProcessContext {
    /// When it was published (the publisher's CLOCK_BOOTTIME nanoseconds).
    pub published_at: u64,
    /// The resource's attributes, then the extra ones (version 2), those in protected
    /// namespaces left out.
    pub attributes: Vec<KeyValue>,
    /// What contexts are compared by: the version and payload (a context published
    /// again unchanged is the same), and a digest of them, made once.
    version: u32,
    payload: Vec<u8>,
    digest: u64,
}

impl PartialEq for ProcessContext {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.version == other.version
            && self.payload == other.payload
    }
}

impl Eq for ProcessContext {}

impl std::hash::Hash for ProcessContext {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.digest.hash(state);
    }
}

/// The attributes a context may set: not in a protected namespace, with a key of its own
/// (a dictionary index means nothing outside its dictionary), at most one per key.
fn admissible(attributes: Vec<KeyValue>) -> Result<Vec<KeyValue>, ContextError> {
    use profcol_core::pdata::types::Value;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for attribute in attributes {
        let indexed = attribute.key_strindex != 0
            || matches!(
                attribute.value.as_ref().and_then(|v| v.value.as_ref()),
                Some(Value::StringValueStrindex(_))
            );
        if attribute.key.is_empty()
            || indexed
            || PROTECTED.iter().any(|p| attribute.key.starts_with(p))
            || !seen.insert(attribute.key.clone())
        {
            continue;
        }
        out.push(attribute);
    }
    if out.len() > MAX_ATTRIBUTES {
        return Err(ContextError::Invalid(WireError::Payload(format!(
            "{} attributes, at most {MAX_ATTRIBUTES}",
            out.len()
        ))));
    }
    Ok(out)
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
    let attributes = admissible(wire::decode_payload(header.version, &payload)?)?;
    let digest = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        header.version.hash(&mut hasher);
        payload.hash(&mut hasher);
        hasher.finish()
    };
    Ok(ProcessContext {
        published_at: header.published_at,
        attributes,
        version: header.version,
        payload,
        digest,
    })
}

#[cfg(test)]
mod tests;
