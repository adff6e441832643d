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
mod tests {
    use super::wire::ContextMessage;
    use super::*;
    use crate::procfs::parse_maps_line;
    use profcol_core::pdata::types::Resource;
    use profcol_core::pdata::types::{AnyValue, Value};
    use prost::Message;
    use std::cell::Cell;

    /// Memory from `base`, whose timestamp word reads as the next of `stamps` each time
    /// (then the last one again): a publisher updating between reads.
    struct Published {
        base: u64,
        bytes: Vec<u8>,
        stamps: Vec<u64>,
        reads: Cell<usize>,
    }

    impl Memory for Published {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let Some(at) = addr.checked_sub(self.base).map(|a| a as usize) else {
                return false;
            };
            let Some(bytes) = self.bytes.get(at..at + buf.len()) else {
                return false;
            };
            buf.copy_from_slice(bytes);
            if at <= 16 && at + buf.len() >= 24 && !self.stamps.is_empty() {
                let n = self.reads.get();
                self.reads.set(n + 1);
                let stamp = self.stamps[n.min(self.stamps.len() - 1)];
                buf[16 - at..24 - at].copy_from_slice(&stamp.to_ne_bytes());
            }
            true
        }
    }

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.to_owned())),
            }),
            ..Default::default()
        }
    }

    /// A mapping at 0x1000 with the header, and the payload at 0x1100.
    fn published(version: u32, payload: &[u8], stamp: u64) -> Published {
        let mut bytes = vec![0u8; 0x100 + payload.len()];
        bytes[..8].copy_from_slice(b"OTEL_CTX");
        bytes[8..12].copy_from_slice(&version.to_ne_bytes());
        bytes[12..16].copy_from_slice(&(payload.len() as u32).to_ne_bytes());
        bytes[16..24].copy_from_slice(&stamp.to_ne_bytes());
        bytes[24..32].copy_from_slice(&0x1100u64.to_ne_bytes());
        bytes[0x100..].copy_from_slice(payload);
        Published {
            base: 0x1000,
            bytes,
            stamps: Vec::new(),
            reads: Cell::new(0),
        }
    }

    fn context_payload() -> Vec<u8> {
        ContextMessage {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "checkout"),
                    kv("deployment.environment.name", "prod"),
                ],
                ..Default::default()
            }),
            attributes: vec![kv("telemetry.sdk.language", "c")],
        }
        .encode_to_vec()
    }

    #[test]
    fn both_versions_give_their_attributes() {
        let context = read(&published(2, &context_payload(), 7), 0x1000).expect("version 2");
        let keys: Vec<&str> = context.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "service.name",
                "deployment.environment.name",
                "telemetry.sdk.language"
            ]
        );
        assert_eq!(context.published_at, 7);
        let resource = Resource {
            attributes: vec![kv("service.name", "cart")],
            ..Default::default()
        };
        let context = read(&published(1, &resource.encode_to_vec(), 9), 0x1000).expect("version 1");
        assert_eq!(context.attributes, vec![kv("service.name", "cart")]);
    }

    #[test]
    fn a_malformed_or_oversized_context_is_refused_and_called_invalid() {
        let payload = context_payload();
        let mut bad = published(2, &payload, 7);
        bad.bytes[0] = b'X';
        assert_eq!(
            read(&bad, 0x1000),
            Err(ContextError::Invalid(WireError::Signature))
        );
        assert_eq!(
            read(&published(3, &payload, 7), 0x1000),
            Err(ContextError::Invalid(WireError::Version(3)))
        );
        let mut huge = published(2, &payload, 7);
        huge.bytes[12..16].copy_from_slice(&(MAX_PAYLOAD + 1).to_ne_bytes());
        assert_eq!(
            read(&huge, 0x1000),
            Err(ContextError::Invalid(WireError::Size(MAX_PAYLOAD + 1)))
        );
        assert_eq!(
            read(&published(2, &[], 7), 0x1000),
            Err(ContextError::Invalid(WireError::Size(0)))
        );
        let garbage = read(&published(2, &[0xff; 16], 7), 0x1000);
        assert!(
            matches!(garbage, Err(ContextError::Invalid(WireError::Payload(_)))),
            "{garbage:?}"
        );
        for e in [
            WireError::Signature,
            WireError::Version(3),
            WireError::Size(0),
        ] {
            assert!(ContextError::from(e).is_invalid());
        }
        assert_eq!(
            ContextError::from(WireError::Updating),
            ContextError::Updating
        );
        // Not invalid: gone, or busy.
        assert!(!ContextError::Unreadable(1).is_invalid() && !ContextError::Updating.is_invalid());
        assert_eq!(
            read(&published(2, &payload, 7), 0x9000),
            Err(ContextError::Unreadable(0x9000))
        );
        let mut elsewhere = published(2, &payload, 7);
        elsewhere.bytes[24..32].copy_from_slice(&0x9000u64.to_ne_bytes());
        assert_eq!(
            read(&elsewhere, 0x1000),
            Err(ContextError::Unreadable(0x9000))
        );
    }

    #[test]
    fn a_publisher_midway_through_an_update_is_read_again() {
        // Writing (0), then published: the second attempt succeeds.
        let mut updating = published(2, &context_payload(), 5);
        updating.stamps = vec![0, 5, 5];
        let context = read(&updating, 0x1000).expect("read after the update");
        assert_eq!(context.published_at, 5);
        // Published again between the header and the payload's check: read again.
        let mut moved = published(2, &context_payload(), 5);
        moved.stamps = vec![5, 6, 6, 6];
        assert_eq!(read(&moved, 0x1000).map(|c| c.published_at), Ok(6));
        // Always writing: given up after MAX_ATTEMPTS.
        let mut busy = published(2, &context_payload(), 0);
        busy.stamps = vec![0];
        assert_eq!(read(&busy, 0x1000), Err(ContextError::Updating));
        assert_eq!(busy.reads.get(), MAX_ATTEMPTS);
    }

    #[test]
    fn the_mapping_is_found_under_each_of_its_names() {
        for line in [
            "7f0000000000-7f0000001000 rw-s 00000000 00:01 1234 /memfd:OTEL_CTX (deleted)",
            "7f0000000000-7f0000001000 rw-s 00000000 00:01 1234 /memfd:OTEL_CTX",
            "7f0000000000-7f0000001000 rw-s 00000000 00:01 1234 [anon_shmem:OTEL_CTX]",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [anon:OTEL_CTX]",
        ] {
            let entry = parse_maps_line(line).expect(line);
            assert!(is_context_mapping(&entry), "{line}");
        }
        for line in [
            "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [anon:OTEL_CTX]",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [anon:OTHER]",
            "7f0000000000-7f0000001000 rw-p 00000000 08:01 99 /tmp/OTEL_CTX",
        ] {
            let entry = parse_maps_line(line).expect(line);
            assert!(!is_context_mapping(&entry), "{line}");
        }
    }

    #[test]
    fn a_process_names_no_protected_attribute_and_not_too_many() {
        let resource = |attributes: Vec<KeyValue>| {
            ContextMessage {
                resource: Some(Resource {
                    attributes,
                    ..Default::default()
                }),
                attributes: Vec::new(),
            }
            .encode_to_vec()
        };
        let mut indexed = kv("indexed", "x");
        indexed.key_strindex = 3;
        let payload = resource(vec![
            kv("service.name", "checkout"),
            kv("process.pid", "1"),
            kv("container.id", "someone-else"),
            kv("k8s.pod.uid", "someone-else"),
            kv("host.name", "elsewhere"),
            kv("service.name", "again"),
            indexed,
        ]);
        let context = read(&published(2, &payload, 7), 0x1000).expect("read");
        assert_eq!(context.attributes, vec![kv("service.name", "checkout")]);
        let many: Vec<KeyValue> = (0..=MAX_ATTRIBUTES)
            .map(|i| kv(&format!("a{i}"), "v"))
            .collect();
        let refused = read(&published(2, &resource(many), 7), 0x1000);
        assert!(
            matches!(refused, Err(ContextError::Invalid(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn the_same_payload_published_again_is_the_same_context() {
        let first = read(&published(2, &context_payload(), 7), 0x1000).expect("first");
        let again = read(&published(2, &context_payload(), 9), 0x1000).expect("again");
        assert_eq!(first, again);
        let other = ContextMessage {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "other")],
                ..Default::default()
            }),
            attributes: Vec::new(),
        };
        let other = read(&published(2, &other.encode_to_vec(), 9), 0x1000).expect("other");
        assert_ne!(first, other);
    }
}
