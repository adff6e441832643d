//! The BPF walker's algorithm in user space, over a copy of the top of a stack: what a
//! process's first samples carry, taken before its mappings were in BPF. Step for step
//! what `profiler.bpf.c` does (`step`), so a first sample is unwound as a later one is.

use super::maps::{StackCopy, UnwindEnd, UnwindMapping};
use super::row::{Cfa, Fp, Ra, Row};

/// x86_64 user addresses end here.
const USER_ADDRESS_END: u64 = 0x0000_8000_0000_0000;
/// Where the kernel's rt_sigframe keeps rbp..rip, from the stack pointer at the trampoline
/// (its ucontext): rbp, rbx, rdx, rax, rcx, rsp, rip.
const SIGFRAME_REGS_OFFSET: u64 = 40 + 80;

/// The rows of the loaded tables.
pub trait Rows {
    /// How many rows the table in `slot` has, if it is loaded under `generation`.
    fn count(&self, slot: u32, generation: u32) -> Option<u32>;
    /// Row `index` of the table in `slot`.
    fn row(&mut self, slot: u32, index: u32) -> Option<Row>;
}

struct Walk<'a> {
    copy: &'a StackCopy,
    pc: u64,
    sp: u64,
    fp: u64,
    /// `pc` is where the code was, not a return address.
    exact: bool,
}

impl Walk<'_> {
    /// Eight bytes of the copied stack at `addr`.
    fn read(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.copy.sp)?).ok()?;
        let bytes = self.copy.stack.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    fn frame_pointer_step(&mut self) -> Result<(), UnwindEnd> {
        if self.fp == 0 {
            return Err(UnwindEnd::FramePointerChain);
        }
        if self.fp < self.sp || self.fp >= USER_ADDRESS_END - 16 {
            return Err(UnwindEnd::BadFrame);
        }
        let saved_fp = self.read(self.fp).ok_or(UnwindEnd::ReadFault)?;
        let ra = self.read(self.fp + 8).ok_or(UnwindEnd::ReadFault)?;
        if ra == 0 {
            return Err(UnwindEnd::FramePointerChain);
        }
        self.sp = self.fp + 16;
        self.fp = saved_fp;
        self.pc = ra;
        self.exact = false;
        Ok(())
    }

    fn signal_frame_step(&mut self) -> Result<(), UnwindEnd> {
        let at = self.sp.wrapping_add(SIGFRAME_REGS_OFFSET);
        let fp = self.read(at).ok_or(UnwindEnd::ReadFault)?;
        let sp = self.read(at + 40).ok_or(UnwindEnd::ReadFault)?;
        let pc = self.read(at + 48).ok_or(UnwindEnd::ReadFault)?;
        if pc == 0 {
            return Err(UnwindEnd::Outermost);
        }
        (self.fp, self.sp, self.pc, self.exact) = (fp, sp, pc, true);
        Ok(())
    }

    /// Finds the caller of the frame at `pc`.
    fn step(
        &mut self,
        leaf: bool,
        mappings: &[UnwindMapping],
        rows: &mut dyn Rows,
    ) -> Result<(), UnwindEnd> {
        let i = mappings.partition_point(|m| m.start <= self.pc);
        let Some(m) = i
            .checked_sub(1)
            .map(|i| &mappings[i])
            .filter(|m| self.pc < m.end)
        else {
            return self.frame_pointer_step();
        };
        if m.table == 0 {
            return self.frame_pointer_step();
        }
        let Some(count) = rows.count(m.table, m.generation) else {
            return self.frame_pointer_step();
        };
        let rel = self
            .pc
            .wrapping_sub(m.bias)
            .wrapping_sub(u64::from(!self.exact));
        let Some(row) = u32::try_from(rel)
            .ok()
            .and_then(|rel| find_row(rows, m.table, count, rel))
        else {
            return self.frame_pointer_step();
        };
        let mut rule = row.rule;
        let cfa = match rule.cfa {
            Cfa::SpOffset(o) => self.sp.wrapping_add_signed(i64::from(o)),
            Cfa::FpOffset(o) => self.fp.wrapping_add_signed(i64::from(o)),
            Cfa::SignalFrame => return self.signal_frame_step(),
            // A PLT stub (x86_64): only a leaf can be in one.
            Cfa::Unsupported if leaf => {
                rule.fp = Fp::Unchanged;
                rule.ra = Ra::AtCfa(-8);
                self.sp.wrapping_add(8)
            }
            Cfa::Unsupported => return Err(UnwindEnd::Unsupported),
            Cfa::None => return self.frame_pointer_step(),
        };
        let ra_at = match rule.ra {
            Ra::Undefined => return Err(UnwindEnd::Outermost),
            Ra::AtCfa(o) => o,
            Ra::LinkRegister | Ra::Unknown => return Err(UnwindEnd::Unsupported),
        };
        if cfa <= self.sp || cfa >= USER_ADDRESS_END {
            return Err(UnwindEnd::BadFrame);
        }
        let ra = self
            .read(cfa.wrapping_add_signed(i64::from(ra_at)))
            .ok_or(UnwindEnd::ReadFault)?;
        match rule.fp {
            Fp::AtCfa(o) => {
                self.fp = self
                    .read(cfa.wrapping_add_signed(i64::from(o)))
                    .ok_or(UnwindEnd::ReadFault)?;
            }
            Fp::Unchanged => {}
            Fp::Unknown => self.fp = 0,
        }
        if ra == 0 {
            return Err(UnwindEnd::Outermost);
        }
        (self.sp, self.pc, self.exact) = (cfa, ra, false);
        Ok(())
    }
}

/// The last row at or below `pc`.
fn find_row(rows: &mut dyn Rows, slot: u32, count: u32, pc: u32) -> Option<Row> {
    let (mut lo, mut hi) = (0u32, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if rows.row(slot, mid)?.pc <= pc {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    rows.row(slot, lo.checked_sub(1)?)
}

/// Marks a frame whose address is where the code was, not a return address: a signal
/// trampoline and the instruction the signal interrupted (as the BPF walker marks them).
pub const FRAME_EXACT: u64 = 1 << 63;

/// Unwinds a stack copy: the frames (the pc, then return addresses; after a signal
/// frame, the interrupted pc, marked [`FRAME_EXACT`] as the trampoline is) and why the
/// walk ended.
pub fn walk_copy(
    copy: &StackCopy,
    mappings: &[UnwindMapping],
    rows: &mut dyn Rows,
    max_frames: usize,
) -> (Vec<u64>, UnwindEnd) {
    let mut walk = Walk {
        copy,
        pc: copy.pc,
        sp: copy.sp,
        fp: copy.fp,
        exact: true,
    };
    let mut frames = Vec::new();
    if walk.pc == 0 || walk.pc >= USER_ADDRESS_END {
        return (frames, UnwindEnd::NoUserStack);
    }
    loop {
        let exact = walk.exact && !frames.is_empty();
        frames.push(walk.pc | if exact { FRAME_EXACT } else { 0 });
        if let Err(end) = walk.step(frames.len() == 1, mappings, rows) {
            return (frames, end);
        }
        if walk.exact
            && let Some(last) = frames.last_mut()
        {
            *last |= FRAME_EXACT;
        }
        if frames.len() >= max_frames {
            return (frames, UnwindEnd::Depth);
        }
    }
}
