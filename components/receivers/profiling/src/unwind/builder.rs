//! Builds a file's [`UnwindTable`] from its `.eh_frame` and `.debug_frame`.
//!
//! Two passes over the call frame information, each bounded:
//!
//! 1. every entry of both sections is parsed (any malformed entry refuses the file) and
//!    each FDE whose range lies inside an executable `PT_LOAD` segment is noted (its
//!    section, offset and range); FDEs elsewhere (`.debug_frame` keeps FDEs of code the
//!    linker dropped, at address 0 or a tombstone) are skipped;
//! 2. the FDEs are sorted by address (`.eh_frame` first where both describe the same
//!    code) and evaluated in that order, so rows arrive sorted and are merged as they
//!    come; an FDE overlapping the one before is skipped, and a gap between two FDEs gets
//!    a row saying so.
//!
//! The file's owner controls every byte: sections are read within the file (through
//! [`ElfFile`], which checks every range against the size the file had when opened) and
//! at most [`Limits::max_section_size`] each, and FDEs, rows and the evaluation work
//! (bytes of CFI instructions run, a CIE's once per FDE, plus rows produced) are capped.

use gimli::{
    BaseAddresses, CallFrameInstruction, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian,
    Register, RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow,
};

use super::error::UnwindError;
use super::row::{Arch, Rule};
use super::table::UnwindTable;
use super::x86_64;
use crate::elf::{ElfFile, SectionHeader};

/// `EM_X86_64`.
const EM_X86_64: u16 = 62;
/// `PT_LOAD`, and the executable flag of a segment.
const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
/// `SHT_NOBITS`: a section with no bytes in the file.
const SHT_NOBITS: u32 = 8;
/// Table addresses are relative to the first `PT_LOAD` segment's page.
const PAGE: u64 = 4096;

/// Register rules one CFI row can hold at once. gimli's default is 192; x86_64 code
/// describes at most the 16 general registers and the return address (plus xmm6-15 in
/// Windows-ABI functions), and a smaller row is cheaper to copy and search. A file with
/// more is refused (`TooManyRegisterRules`).
const MAX_RULES: usize = 48;
/// Steps charged for an instruction that copies or drops a whole row
/// (`DW_CFA_remember_state`, `DW_CFA_restore_state`): up to [`MAX_RULES`] rules each.
const STATE_STEPS: u64 = MAX_RULES as u64;
/// Steps charged for an instruction that ends a row (`DW_CFA_advance_loc`,
/// `DW_CFA_set_loc`): the row is converted (two searches of its rules) and pushed.
const ROW_STEPS: u64 = 16;

/// gimli's storage for rows, with room for [`MAX_RULES`] rules and 4 remembered rows.
struct Storage;

impl UnwindContextStorage<usize> for Storage {
    type Rules = [(Register, RegisterRule<usize>); MAX_RULES];
    type Stack = Box<[UnwindTableRow<usize, Self>; 4]>;
}

/// Caps on what one file can make the builder do. Real files are far below them (libc:
/// 3,700 FDEs and 28,000 rows; profcol's 409 MiB debug binary: 4.9 MiB of CFI, 190,000
/// FDEs, 740,000 rows, 33 M steps). Memory at the caps: both sections (2 × 64 MiB), 32
/// bytes per FDE noted (32 MiB) and the rows (48 MiB, up to twice that while the vector
/// grows): about 260 MiB for a file made to reach every cap at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of `.eh_frame`, and of `.debug_frame`, read at most.
    pub max_section_size: u64,
    /// FDEs per file, both sections together.
    pub max_fdes: usize,
    /// Rows in the table (12 bytes each: 48 MiB at 4 Mi rows).
    pub max_rows: usize,
    /// Evaluation steps per file, which bound the time (about a second of one core at
    /// the default, measured with the costliest shapes): one per byte of CFI parsed or
    /// run, a CIE's initial instructions again for every FDE that uses it, plus a weight
    /// for each instruction that ends a row or copies one. An FDE is charged before it
    /// is evaluated, so an FDE made to be slow is refused, not run.
    pub max_steps: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_section_size: 64 << 20,
            max_fdes: 1 << 20,
            max_rows: 4 << 20,
            max_steps: 256 << 20,
        }
    }
}

/// What building a table met, for logs and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// FDEs read, both sections.
    pub fdes: usize,
    /// FDEs whose rows are in the table.
    pub fdes_used: usize,
    /// FDEs outside every executable segment, empty, or overlapping another.
    pub fdes_skipped: usize,
    /// CFI rows evaluated (before merging).
    pub rows_evaluated: u64,
    /// Rows whose CFA rule the format cannot hold (expressions: PLT, signal frames).
    pub rows_unsupported: u64,
    /// Evaluation steps spent (see [`Limits::max_steps`]).
    pub steps: u64,
    /// A `.debug_frame` was present but compressed (`SHF_COMPRESSED`), and not read.
    pub debug_frame_compressed: bool,
}

/// A built table and what building it met.
#[derive(Debug, Clone)]
pub struct Built {
    pub table: UnwindTable,
    pub stats: BuildStats,
}

/// Builds the table of `elf` with the default [`Limits`]. Open files of other users with
/// `safe_file::VerifiedFile` and read them with `ElfFile::from_file(file, size)`.
pub fn build(elf: &ElfFile) -> Result<Built, UnwindError> {
    build_with_limits(elf, &Limits::default())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    EhFrame,
    DebugFrame,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::EhFrame => ".eh_frame",
            Source::DebugFrame => ".debug_frame",
        }
    }
}

/// An FDE noted by the first pass: its range, and where to find it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FdeRef {
    start: u64,
    source: Source,
    end: u64,
    offset: usize,
}

/// The steps spent, against the budget.
struct Budget {
    spent: u64,
    max: u64,
}

impl Budget {
    fn spend(&mut self, steps: u64) -> Result<(), UnwindError> {
        self.spent = self.spent.saturating_add(steps);
        if self.spent > self.max {
            return Err(UnwindError::BudgetExhausted(self.max));
        }
        Ok(())
    }
}

/// One section's bytes and the gimli view of it.
enum Section<'a> {
    Eh(EhFrame<EndianSlice<'a, LittleEndian>>),
    Debug(DebugFrame<EndianSlice<'a, LittleEndian>>),
}

pub fn build_with_limits(elf: &ElfFile, limits: &Limits) -> Result<Built, UnwindError> {
    let arch = match elf.machine {
        EM_X86_64 => Arch::X86_64,
        other => return Err(UnwindError::UnsupportedArch(other)),
    };
    let loads = elf.program_headers.iter().filter(|p| p.p_type == PT_LOAD);
    let base = loads.clone().map(|p| p.vaddr).min().unwrap_or(0) & !(PAGE - 1);
    // Executable ranges, whose addresses fit a row's u32 once `base` is taken off.
    let text: Vec<(u64, u64)> = loads
        .filter(|p| p.flags & PF_X != 0)
        .filter_map(|p| Some((p.vaddr, p.vaddr.checked_add(p.memsz)?)))
        .filter_map(|(start, end)| Some((start, end.min(base.checked_add(1 << 32)?))))
        .filter(|(start, end)| start < end)
        .collect();
    let in_text =
        |start: u64, end: u64| start < end && text.iter().any(|&(s, e)| start >= s && end <= e);

    let mut stats = BuildStats::default();
    let mut budget = Budget {
        spent: 0,
        max: limits.max_steps,
    };
    let eh_header = readable(elf, ".eh_frame");
    let eh_data = read_section(elf, eh_header, ".eh_frame", limits)?;
    let debug_header = readable(elf, ".debug_frame");
    let mut debug_data = read_section(elf, debug_header, ".debug_frame", limits)?;
    if looks_compressed(&debug_data) {
        stats.debug_frame_compressed = true;
        debug_data.clear();
    }

    let mut bases = BaseAddresses::default();
    if let Some(h) = eh_header {
        bases = bases.set_eh_frame(h.addr);
    }
    if let Some(h) = readable(elf, ".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(h.addr);
    }
    if let Some(h) = elf.section(".text") {
        bases = bases.set_text(h.addr);
    }
    if let Some(h) = elf.section(".got") {
        bases = bases.set_got(h.addr);
    }
    let mut eh = EhFrame::new(&eh_data, LittleEndian);
    eh.set_address_size(8);
    let mut debug = DebugFrame::new(&debug_data, LittleEndian);
    debug.set_address_size(8);
    let sections = [
        (Source::EhFrame, Section::Eh(eh)),
        (Source::DebugFrame, Section::Debug(debug)),
    ];

    // Pass 1: every entry parsed, FDEs inside the text noted.
    let mut fdes = Vec::new();
    for (source, section) in &sections {
        match section {
            Section::Eh(s) => collect(
                s,
                *source,
                &bases,
                limits,
                &mut budget,
                &mut stats,
                &in_text,
                &mut fdes,
            )?,
            Section::Debug(s) => collect(
                s,
                *source,
                &bases,
                limits,
                &mut budget,
                &mut stats,
                &in_text,
                &mut fdes,
            )?,
        }
    }
    fdes.sort_unstable();

    // Pass 2: evaluated in address order.
    let mut table = UnwindTable::new(arch, base);
    let mut ctx = Box::new(UnwindContext::<usize, Storage>::new_in());
    let mut last_end: Option<u64> = None;
    for fde in &fdes {
        if last_end.is_some_and(|end| fde.start < end) {
            stats.fdes_skipped += 1;
            continue;
        }
        if let Some(end) = last_end.filter(|&end| end < fde.start) {
            push(&mut table, base, end, Rule::NONE, fde, limits)?;
        }
        let (_, section) = &sections[fde.source as usize];
        match section {
            Section::Eh(s) => evaluate(
                s,
                fde,
                &bases,
                &mut ctx,
                &mut table,
                limits,
                &mut budget,
                &mut stats,
            )?,
            Section::Debug(s) => evaluate(
                s,
                fde,
                &bases,
                &mut ctx,
                &mut table,
                limits,
                &mut budget,
                &mut stats,
            )?,
        }
        stats.fdes_used += 1;
        last_end = Some(fde.end);
    }
    if let (Some(end), Some(fde)) = (last_end, fdes.last()) {
        push(&mut table, base, end, Rule::NONE, fde, limits)?;
    }
    table.shrink_to_fit();
    stats.steps = budget.spent;
    Ok(Built { table, stats })
}

/// A section with bytes in the file.
fn readable<'a>(elf: &'a ElfFile, name: &str) -> Option<&'a SectionHeader> {
    elf.section(name).filter(|s| s.sh_type != SHT_NOBITS)
}

fn read_section(
    elf: &ElfFile,
    header: Option<&SectionHeader>,
    name: &'static str,
    limits: &Limits,
) -> Result<Vec<u8>, UnwindError> {
    let Some(header) = header else {
        return Ok(Vec::new());
    };
    if header.size > limits.max_section_size {
        return Err(UnwindError::SectionTooLarge {
            section: name,
            size: header.size,
            max: limits.max_section_size,
        });
    }
    Ok(elf.section_data(header)?)
}

/// Whether a `.debug_frame` starts with an `Elf64_Chdr` (`SHF_COMPRESSED`: `ch_type` 1
/// zlib or 2 zstd, then a reserved 0) rather than an entry: an entry's length of 1 or 2
/// could not hold its own id.
fn looks_compressed(data: &[u8]) -> bool {
    let word = |at: usize| {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    matches!(word(0), Some(1 | 2)) && word(4) == Some(0)
}

fn cfi_error(source: Source, offset: usize, error: gimli::Error) -> UnwindError {
    UnwindError::Cfi {
        section: source.name(),
        offset,
        error,
    }
}

#[allow(clippy::too_many_arguments)]
fn collect<'a, S: UnwindSection<EndianSlice<'a, LittleEndian>>>(
    section: &S,
    source: Source,
    bases: &BaseAddresses,
    limits: &Limits,
    budget: &mut Budget,
    stats: &mut BuildStats,
    in_text: &dyn Fn(u64, u64) -> bool,
    fdes: &mut Vec<FdeRef>,
) -> Result<(), UnwindError> {
    let mut entries = section.entries(bases);
    let mut at = 0usize;
    loop {
        let entry = entries.next().map_err(|e| cfi_error(source, at, e))?;
        let Some(entry) = entry else {
            return Ok(());
        };
        let partial = match entry {
            CieOrFde::Cie(cie) => {
                budget.spend(cie.entry_len() as u64)?;
                at = cie.offset();
                continue;
            }
            CieOrFde::Fde(partial) => partial,
        };
        at = partial.offset();
        let fde = partial
            .parse(|s, b, o| s.cie_from_offset(b, o))
            .map_err(|e| cfi_error(source, at, e))?;
        budget.spend(fde.entry_len() as u64 + fde.cie().entry_len() as u64 + 1)?;
        stats.fdes += 1;
        if stats.fdes > limits.max_fdes {
            return Err(UnwindError::TooManyFdes(limits.max_fdes));
        }
        let start = fde.initial_address();
        match start.checked_add(fde.len()) {
            Some(end) if in_text(start, end) => fdes.push(FdeRef {
                start,
                source,
                end,
                offset: at,
            }),
            _ => stats.fdes_skipped += 1,
        }
    }
}

fn push(
    table: &mut UnwindTable,
    base: u64,
    address: u64,
    rule: Rule,
    fde: &FdeRef,
    limits: &Limits,
) -> Result<(), UnwindError> {
    // Every address pushed lies in the text, which was cut to base + 4 GiB.
    let pc = address
        .checked_sub(base)
        .and_then(|pc| u32::try_from(pc).ok())
        .ok_or(UnwindError::RowsOutOfOrder {
            section: fde.source.name(),
            offset: fde.offset,
        })?;
    table
        .push(pc, rule)
        .map_err(|_| UnwindError::RowsOutOfOrder {
            section: fde.source.name(),
            offset: fde.offset,
        })?;
    if table.len() > limits.max_rows {
        return Err(UnwindError::TooManyRows(limits.max_rows));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn evaluate<'a, S: UnwindSection<EndianSlice<'a, LittleEndian>>>(
    section: &S,
    fde_ref: &FdeRef,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize, Storage>,
    table: &mut UnwindTable,
    limits: &Limits,
    budget: &mut Budget,
    stats: &mut BuildStats,
) -> Result<(), UnwindError> {
    let source = fde_ref.source;
    let at = fde_ref.offset;
    let fde = section
        .fde_from_offset(bases, S::Offset::from(at), |s, b, o| {
            s.cie_from_offset(b, o)
        })
        .map_err(|e| cfi_error(source, at, e))?;
    // Charged before anything runs: the bytes (read twice, here and by gimli) and the
    // costly instructions, the CIE's initial ones included.
    budget.spend(2 * (fde.entry_len() as u64 + fde.cie().entry_len() as u64) + 1)?;
    for mut instructions in [
        fde.cie().instructions(section, bases),
        fde.instructions(section, bases),
    ] {
        let mut steps = 0u64;
        while let Some(instruction) = instructions.next().map_err(|e| cfi_error(source, at, e))? {
            steps += match instruction {
                CallFrameInstruction::RememberState | CallFrameInstruction::RestoreState => {
                    STATE_STEPS
                }
                CallFrameInstruction::AdvanceLoc { .. } | CallFrameInstruction::SetLoc { .. } => {
                    ROW_STEPS
                }
                _ => 1,
            };
        }
        budget.spend(steps)?;
    }
    // A signal trampoline's rows are expressions over the kernel's signal frame, which
    // the walker knows by itself.
    let signal_frame = fde.is_signal_trampoline();
    let mut rows = fde
        .rows(section, bases, ctx)
        .map_err(|e| cfi_error(source, at, e))?;
    while let Some(row) = rows.next_row().map_err(|e| cfi_error(source, at, e))? {
        stats.rows_evaluated += 1;
        let (start, end) = (row.start_address(), row.end_address());
        if start >= end || start < fde_ref.start || start >= fde_ref.end {
            // Holds no address of this FDE.
            continue;
        }
        let rule = match table.arch {
            Arch::X86_64 if signal_frame => Rule::SIGNAL_FRAME,
            Arch::X86_64 => x86_64::rule(row),
        };
        if rule == Rule::UNSUPPORTED {
            stats.rows_unsupported += 1;
        }
        push(table, table.base, start, rule, fde_ref, limits)?;
    }
    Ok(())
}
