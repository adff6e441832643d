//! Any bytes as an ELF file whose `.eh_frame` / `.debug_frame` the profiling receiver
//! turns into an unwind table: building never panics, stays within its caps, and a table
//! built is sorted, merged and round-trips through its 12-byte encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The receiver's own reader and builder, compiled in as they are: the receiver crate
// links libbpf and blazesym, which a sanitizer build does not need.
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/elf.rs"]
mod elf;
// Only the builder's files (the rest of unwind/ talks to BPF and /proc), at the crate
// root: their `super::` is the crate.
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/builder.rs"]
mod builder;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/row.rs"]
mod row;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/table.rs"]
mod table;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/x86_64.rs"]
mod x86_64;

mod unwind {
    pub use crate::builder::{Limits, build_with_limits};
    pub use crate::row::{ROW_SIZE, Row, Rule};
}

/// Caps small enough that fuzzing meets each of them on inputs of a few KiB.
const LIMITS: unwind::Limits = unwind::Limits {
    max_section_size: 1 << 20,
    max_fdes: 1 << 12,
    max_rows: 1 << 14,
    max_steps: 1 << 20,
};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = elf::ElfFile::from_bytes(data.to_vec()) else {
        return;
    };
    let Ok(built) = unwind::build_with_limits(&file, &LIMITS) else {
        return;
    };
    let table = &built.table;
    assert!(table.len() <= LIMITS.max_rows);
    assert!(built.stats.steps <= LIMITS.max_steps);
    assert!(built.stats.fdes <= LIMITS.max_fdes);
    let rows = table.rows();
    for pair in rows.windows(2) {
        assert!(pair[0].pc < pair[1].pc);
        assert_ne!(pair[0].rule, pair[1].rule);
    }
    if let Some(last) = rows.last() {
        assert_eq!(last.rule, unwind::Rule::NONE);
    }
    let bytes = table.encode();
    assert_eq!(bytes.len(), table.encoded_size());
    for (row, chunk) in rows.iter().zip(bytes.chunks_exact(unwind::ROW_SIZE)) {
        let chunk: &[u8; unwind::ROW_SIZE] = chunk.try_into().expect("row size");
        assert_eq!(unwind::Row::decode(chunk), Some(*row));
    }
    for row in rows.iter().take(64) {
        let at = table.base + u64::from(row.pc);
        let expected = (row.rule != unwind::Rule::NONE).then_some(row.rule);
        assert_eq!(table.lookup(at), expected);
    }
});
