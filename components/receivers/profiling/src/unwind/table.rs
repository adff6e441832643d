//! A built unwind table: sorted rows with merged neighbours, for one file.

use super::row::{Arch, ROW_SIZE, Row, Rule};

/// The unwind table of one ELF file.
///
/// Addresses are the file's own virtual addresses (as in its program headers) minus
/// `base`, the lowest `PT_LOAD` address rounded down to 4 KiB (0 for shared libraries and
/// position-independent executables). A pc at run time is `pc - load_bias - base`, where
/// `load_bias` is where the file was loaded minus its own addresses (0 for a fixed-address
/// executable). Rows are sorted by `pc`, strictly increasing, and no two neighbours have
/// the same rule; a row holds up to the next row's `pc`, so the row for an address is the
/// last one whose `pc` is not above it. The last row is always a gap ([`Rule::NONE`]),
/// ending the last function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindTable {
    pub arch: Arch,
    pub base: u64,
    rows: Vec<Row>,
}

impl UnwindTable {
    pub(super) fn new(arch: Arch, base: u64) -> Self {
        UnwindTable {
            arch,
            base,
            rows: Vec::new(),
        }
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Bytes the rows take encoded (what a BPF map would hold).
    pub fn encoded_size(&self) -> usize {
        self.rows.len() * ROW_SIZE
    }

    /// The rows encoded back to back ([`Row::encode`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_size());
        for row in &self.rows {
            out.extend_from_slice(&row.encode());
        }
        out
    }

    /// The rule for a file virtual address: the binary search the BPF walker will do.
    /// `None` where no row holds it (before the first row, or in a gap).
    pub fn lookup(&self, vaddr: u64) -> Option<Rule> {
        let pc = u32::try_from(vaddr.checked_sub(self.base)?).ok()?;
        let after = self.rows.partition_point(|r| r.pc <= pc);
        let row = self.rows.get(after.checked_sub(1)?)?;
        (row.rule != Rule::NONE).then_some(row.rule)
    }

    /// Gives back the room the rows grew into: a table is kept (and cached) as built.
    pub(super) fn shrink_to_fit(&mut self) {
        self.rows.shrink_to_fit();
    }

    /// Appends a row at or after the last one. A row with the last row's rule adds
    /// nothing; a row at the last row's address replaces it (the earlier one held no
    /// address).
    pub(super) fn push(&mut self, pc: u32, rule: Rule) -> Result<(), OutOfOrder> {
        let rule = rule.canonical();
        if let Some(last) = self.rows.last_mut() {
            if pc < last.pc {
                return Err(OutOfOrder);
            }
            if pc == last.pc {
                self.rows.pop();
                return self.push(pc, rule);
            }
            if last.rule == rule {
                return Ok(());
            }
        } else if rule == Rule::NONE {
            // A table does not start with a gap.
            return Ok(());
        }
        self.rows.push(Row { pc, rule });
        Ok(())
    }
}

/// A row was pushed below the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OutOfOrder;
