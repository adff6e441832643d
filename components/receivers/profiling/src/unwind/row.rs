//! One row of an unwind table, and its fixed 12-byte encoding (what the BPF walker reads).
//!
//! A row says, for every address from its `pc` up to the next row's, how to find the
//! caller's frame: the CFA (canonical frame address: the stack pointer's value just before
//! the call), where the caller's frame pointer is, and where the return address is. The
//! registers are named by their role (stack pointer, frame pointer, return address), not
//! by an architecture's numbers, so arm64 (sp, x29, the link register x30) fits the same
//! row: on x86_64 "sp" is rsp, "fp" is rbp and the return address is always at CFA-8.

/// The architecture a table is for. Stored with the table (not in each row): the walker
/// needs it to know which registers "sp" and "fp" are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Arch {
    /// x86_64: sp = rsp (DWARF 7), fp = rbp (DWARF 6), return address DWARF 16.
    X86_64 = 1,
    // 2 is reserved for arm64 (sp = 31, fp = x29, return address in x30 or at CFA+n).
}

/// How to compute the CFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cfa {
    /// No unwind information covers these addresses (a gap between functions, or past
    /// the last one): the walker falls back to the frame pointer.
    None,
    /// CFA = sp + offset.
    SpOffset(i32),
    /// CFA = fp + offset.
    FpOffset(i32),
    /// A rule this format does not hold: a DWARF expression (PLT stubs, signal
    /// trampolines) or another base register. The walker needs another way (a known
    /// PLT shape) or stops.
    Unsupported,
    /// A signal trampoline (`__restore_rt`, its CIE marked `S`): the stack pointer
    /// points at the kernel's signal frame, which holds every register of the
    /// interrupted code. Where they are is the architecture's (x86_64: a `ucontext`).
    SignalFrame,
}

/// Where the caller's frame pointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp {
    /// Not changed by this function (yet): the caller's fp is the current one.
    Unchanged,
    /// Saved at CFA + offset (a multiple of 8 in -1024..=1016).
    AtCfa(i16),
    /// Not representable (a register, an expression, an offset out of range): the
    /// caller's fp is unknown.
    Unknown,
}

/// Where the return address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ra {
    /// Saved at CFA + offset (x86_64: always -8).
    AtCfa(i16),
    /// Still in the link register (arm64 leaf code; not produced for x86_64).
    LinkRegister,
    /// Explicitly undefined: this is the outermost frame (`_start`, a thread's start),
    /// the walk is complete.
    Undefined,
    /// Not representable.
    Unknown,
}

/// One row. `pc` is relative to the table's `base` (see [`super::UnwindTable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Row {
    pub pc: u32,
    pub rule: Rule,
}

/// What a row says, all but its address: neighbouring rows with equal rules are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    pub cfa: Cfa,
    pub fp: Fp,
    pub ra: Ra,
}

impl Rule {
    /// A gap: no unwind information.
    pub const NONE: Rule = Rule {
        cfa: Cfa::None,
        fp: Fp::Unchanged,
        ra: Ra::Unknown,
    };
    /// A rule nothing can be done with here.
    pub const UNSUPPORTED: Rule = Rule {
        cfa: Cfa::Unsupported,
        fp: Fp::Unchanged,
        ra: Ra::Unknown,
    };

    /// A signal trampoline: the walker reads the interrupted registers from the frame.
    pub const SIGNAL_FRAME: Rule = Rule {
        cfa: Cfa::SignalFrame,
        fp: Fp::Unchanged,
        ra: Ra::Unknown,
    };

    /// The canonical form: rows with no usable CFA carry nothing else, so that they merge.
    pub fn canonical(self) -> Rule {
        match self.cfa {
            Cfa::None => Rule::NONE,
            Cfa::Unsupported => Rule::UNSUPPORTED,
            Cfa::SignalFrame => Rule::SIGNAL_FRAME,
            Cfa::SpOffset(_) | Cfa::FpOffset(_) => self,
        }
    }
}

/// Bytes per encoded row.
pub const ROW_SIZE: usize = 12;

// Kinds, as encoded.
const CFA_NONE: u8 = 0;
const CFA_SP: u8 = 1;
const CFA_FP: u8 = 2;
const CFA_UNSUPPORTED: u8 = 3;
const CFA_SIGNAL_FRAME: u8 = 4;
const FP_UNCHANGED: u8 = 0;
const FP_AT_CFA: u8 = 1;
const FP_UNKNOWN: u8 = 2;
const RA_AT_CFA: u8 = 0;
const RA_LINK_REGISTER: u8 = 1;
const RA_UNDEFINED: u8 = 2;
const RA_UNKNOWN: u8 = 3;

/// An offset from the CFA that a row can hold: a multiple of 8 that fits an `i8` once
/// divided by 8 (-1024..=1016).
pub fn slot_offset(offset: i64) -> Option<i16> {
    if offset % 8 != 0 {
        return None;
    }
    i8::try_from(offset / 8).ok().map(|o| i16::from(o) * 8)
}

fn encode_slot(offset: i16) -> u8 {
    // Constructed through `slot_offset`, so it fits; anything else encodes as 0.
    i8::try_from(offset / 8).map_or(0, |o| o.to_le_bytes()[0])
}

impl Row {
    /// The row's 12 bytes, little-endian (x86_64 and arm64 are both little-endian):
    ///
    /// | offset | type | field |
    /// |---|---|---|
    /// | 0 | u32 | pc, relative to the table's base |
    /// | 4 | i32 | CFA offset (0 unless the CFA kind is sp or fp) |
    /// | 8 | u8 | CFA kind: 0 none (no unwind info: use the frame pointer), 1 sp+offset, 2 fp+offset, 3 unsupported (expression), 4 signal frame |
    /// | 9 | u8 | bits 0-3: fp kind: 0 unchanged, 1 at CFA+offset, 2 unknown; bits 4-7: return address kind: 0 at CFA+offset, 1 in the link register, 2 undefined (outermost frame), 3 unknown |
    /// | 10 | i8 | fp offset from the CFA, in units of 8 bytes |
    /// | 11 | i8 | return address offset from the CFA, in units of 8 bytes |
    pub fn encode(&self) -> [u8; ROW_SIZE] {
        let (cfa_kind, cfa_offset) = match self.rule.cfa {
            Cfa::None => (CFA_NONE, 0),
            Cfa::SpOffset(o) => (CFA_SP, o),
            Cfa::FpOffset(o) => (CFA_FP, o),
            Cfa::Unsupported => (CFA_UNSUPPORTED, 0),
            Cfa::SignalFrame => (CFA_SIGNAL_FRAME, 0),
        };
        let (fp_kind, fp_offset) = match self.rule.fp {
            Fp::Unchanged => (FP_UNCHANGED, 0),
            Fp::AtCfa(o) => (FP_AT_CFA, encode_slot(o)),
            Fp::Unknown => (FP_UNKNOWN, 0),
        };
        let (ra_kind, ra_offset) = match self.rule.ra {
            Ra::AtCfa(o) => (RA_AT_CFA, encode_slot(o)),
            Ra::LinkRegister => (RA_LINK_REGISTER, 0),
            Ra::Undefined => (RA_UNDEFINED, 0),
            Ra::Unknown => (RA_UNKNOWN, 0),
        };
        let mut out = [0u8; ROW_SIZE];
        out[0..4].copy_from_slice(&self.pc.to_le_bytes());
        out[4..8].copy_from_slice(&cfa_offset.to_le_bytes());
        out[8] = cfa_kind;
        out[9] = fp_kind | (ra_kind << 4);
        out[10] = fp_offset;
        out[11] = ra_offset;
        out
    }

    /// The row back from its bytes; `None` for kinds this format does not define.
    pub fn decode(bytes: &[u8; ROW_SIZE]) -> Option<Row> {
        let pc = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let cfa_offset = i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let fp_offset = i16::from(i8::from_le_bytes([bytes[10]])) * 8;
        let ra_offset = i16::from(i8::from_le_bytes([bytes[11]])) * 8;
        let cfa = match bytes[8] {
            CFA_NONE => Cfa::None,
            CFA_SP => Cfa::SpOffset(cfa_offset),
            CFA_FP => Cfa::FpOffset(cfa_offset),
            CFA_UNSUPPORTED => Cfa::Unsupported,
            CFA_SIGNAL_FRAME => Cfa::SignalFrame,
            _ => return None,
        };
        let fp = match bytes[9] & 0x0f {
            FP_UNCHANGED => Fp::Unchanged,
            FP_AT_CFA => Fp::AtCfa(fp_offset),
            FP_UNKNOWN => Fp::Unknown,
            _ => return None,
        };
        let ra = match bytes[9] >> 4 {
            RA_AT_CFA => Ra::AtCfa(ra_offset),
            RA_LINK_REGISTER => Ra::LinkRegister,
            RA_UNDEFINED => Ra::Undefined,
            RA_UNKNOWN => Ra::Unknown,
            _ => return None,
        };
        Some(Row {
            pc,
            rule: Rule { cfa, fp, ra },
        })
    }
}
