//! x86_64: the DWARF register numbers and how one CFI row becomes a table row.

use gimli::{CfaRule, Register, RegisterRule, UnwindContextStorage, UnwindTableRow};

use super::row::{Cfa, Fp, Ra, Rule, slot_offset};

/// DWARF register numbers of the x86_64 psABI.
pub const RBP: Register = Register(6);
pub const RSP: Register = Register(7);
/// The return address column.
pub const RA: Register = Register(16);

/// The table rule of one evaluated CFI row.
pub fn rule<S: UnwindContextStorage<usize>>(row: &UnwindTableRow<usize, S>) -> Rule {
    let cfa = match *row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => match i32::try_from(offset) {
            Ok(offset) if register == RSP => Cfa::SpOffset(offset),
            Ok(offset) if register == RBP => Cfa::FpOffset(offset),
            _ => Cfa::Unsupported,
        },
        CfaRule::Expression(_) => Cfa::Unsupported,
    };
    // rbp is callee-saved: with no rule it keeps its value.
    let fp = match row.register(RBP) {
        None | Some(RegisterRule::SameValue) => Fp::Unchanged,
        Some(RegisterRule::Offset(o)) => slot_offset(o).map_or(Fp::Unknown, Fp::AtCfa),
        Some(_) => Fp::Unknown,
    };
    let ra = match row.register(RA) {
        Some(RegisterRule::Offset(o)) => slot_offset(o).map_or(Ra::Unknown, Ra::AtCfa),
        // `.cfi_undefined rip`: glibc's `_start` and `clone`'s child, the outermost frames.
        Some(RegisterRule::Undefined) => Ra::Undefined,
        _ => Ra::Unknown,
    };
    Rule { cfa, fp, ra }.canonical()
}
