//! A stack copy (the registers and the top of another process's stack, which that
//! process controls) walked with a table also made of the input: the user-space walk
//! never panics, ends with a reason, takes at most the frames asked for, and a walk
//! marked complete did not stop on a fault.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../bpf/src/unwind_types.rs"]
mod bpf_types;

// The receiver's walker and row format, compiled in as they are, at the crate root:
// their `super::` is the crate.
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/row.rs"]
mod row;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/walk.rs"]
mod walk;

mod maps {
    pub use crate::bpf_types::{StackCopy, UnwindEnd, UnwindMapping};
}

use maps::{StackCopy, UnwindEnd, UnwindMapping};
use row::{ROW_SIZE, Row};
use walk::{FRAME_EXACT, Rows, walk_copy};

const MAX_FRAMES: usize = 127;

/// Rows decoded from the input (sorted, as a built table is), in slot 1.
struct InputRows(Vec<Row>);

impl Rows for InputRows {
    fn count(&self, slot: u32, generation: u32) -> Option<u32> {
        (slot == 1 && generation == 1).then_some(self.0.len() as u32)
    }

    fn row(&mut self, _slot: u32, index: u32) -> Option<Row> {
        self.0.get(index as usize).copied()
    }
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

fuzz_target!(|data: &[u8]| {
    // [pc, sp, fp, bias][row count: 1 byte][rows: 12 bytes each][stack...]
    if data.len() < 33 {
        return;
    }
    let (pc, sp, fp, bias) = (
        u64_at(data, 0),
        u64_at(data, 8),
        u64_at(data, 16),
        u64_at(data, 24) & 0x0000_7fff_ffff_f000,
    );
    let count = usize::from(data[32]).min((data.len() - 33) / ROW_SIZE);
    let mut rows: Vec<Row> = data[33..33 + count * ROW_SIZE]
        .chunks_exact(ROW_SIZE)
        .filter_map(|c| Row::decode(c.try_into().ok()?))
        .collect();
    rows.sort_by_key(|r| r.pc);
    rows.dedup_by_key(|r| r.pc);
    let stack = data[33 + count * ROW_SIZE..].to_vec();
    let mappings = [UnwindMapping {
        start: bias,
        end: bias.saturating_add(1 << 32),
        bias,
        table: 1,
        generation: 1,
    }];
    let copy = StackCopy { pc, sp, fp, stack };
    let (frames, end) = walk_copy(&copy, &mappings, &mut InputRows(rows), MAX_FRAMES);
    assert!(frames.len() <= MAX_FRAMES);
    if end == UnwindEnd::NoUserStack {
        assert!(frames.is_empty());
    } else {
        assert_eq!(frames.first().map(|f| f & !FRAME_EXACT), Some(pc));
    }
    if end == UnwindEnd::Depth {
        assert_eq!(frames.len(), MAX_FRAMES);
    }
});
