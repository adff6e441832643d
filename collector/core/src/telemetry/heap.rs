//! Memory the process's allocator holds for live objects, as otelcol's memory_limiter and
//! `otelcol_process_runtime_heap_alloc_bytes` judge it (Go's heap in use, not RSS). The
//! binary registers its allocator's reader at start; RSS would keep refusing data long
//! after a burst is freed, since allocators keep freed pages for reuse.

use std::sync::OnceLock;

/// Reads the bytes allocated and not yet freed; `None` when the allocator cannot tell.
pub type HeapReader = fn() -> Option<u64>;

static READER: OnceLock<HeapReader> = OnceLock::new();

/// Registers the allocator's reader once; later calls are ignored (returns whether this
/// one took effect).
pub fn register(reader: HeapReader) -> bool {
    READER.set(reader).is_ok()
}

/// Bytes in use by live allocations, where the binary's allocator reports them.
pub fn in_use_bytes() -> Option<u64> {
    READER.get().and_then(|read| read())
}
