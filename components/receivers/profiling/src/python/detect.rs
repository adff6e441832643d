//! Finding CPython in a mapped file: its version, where its runtime state and code
//! type are, the offsets of its structures, and the address ranges of its evaluator.
//! The file is another user's: every read is bounded by the ELF reader's limits.

use super::offsets::{self, Offsets};
use crate::elf::ElfFile;
use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};

/// Why a file that looked like CPython cannot be walked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PythonError {
    #[error("CPython {0}.{1} is not supported (3.8 to 3.13 are)")]
    Unsupported(u8, u8),
    #[error("CPython's {0} is missing")]
    Missing(&'static str),
    #[error("{0} says another layout than CPython 3.{1}'s")]
    Layout(&'static str, u8),
    #[error("reading the interpreter file: {0}")]
    Elf(String),
    #[error("CPython 3.{0} free-threaded builds are not supported")]
    FreeThreaded(u8),
}

/// A CPython interpreter in one file (`libpython3.X.so` or a `python3.X` executable with
/// the interpreter linked in). Addresses are the file's virtual addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    pub major: u8,
    pub minor: u8,
    /// The micro version where the file says it (`Py_Version`, 3.11+).
    pub micro: Option<u8>,
    pub offsets: Offsets,
    /// `_PyRuntime`.
    pub runtime: u64,
    /// `PyCode_Type`: a code object's `ob_type` is this.
    pub code_type: u64,
    /// `_PyEval_EvalFrameDefault`: its symbol's range, and the cold part the compiler split
    /// off (Debian's build) when there is one.
    pub eval_ranges: Vec<(u64, u64)>,
    /// The code segment's virtual address minus its file offset: a file offset in the
    /// executable mapping plus this is a virtual address.
    pub text_delta: u64,
}

impl Interpreter {
    /// `process.runtime.version`: "3.11.2", or "3.8" where the file names no micro.
    pub fn version(&self) -> String {
        match self.micro {
            Some(micro) => format!("{}.{}.{micro}", self.major, self.minor),
            None => format!("{}.{}", self.major, self.minor),
        }
    }

    /// Whether `vaddr` (in this file) is code of the interpreter's frame evaluator.
    pub fn is_eval(&self, vaddr: u64) -> bool {
        self.eval_ranges
            .iter()
            .any(|&(start, end)| start <= vaddr && vaddr < end)
    }
}

/// The minor version a file name says: `libpython3.11.so.1.0`, `python3.11`,
/// `python3.8d`; `None` for any other name.
pub fn minor_from_name(file_name: &str) -> Option<u8> {
    let base = file_name.rsplit('/').next().unwrap_or(file_name);
    let rest = base
        .strip_prefix("libpython3.")
        .or_else(|| base.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[digits.len()..];
    // `d` debug, `m` pymalloc (3.7 and before), `t` free-threaded (refused in detect).
    let name_ends = after.is_empty()
        || after.starts_with(".so")
        || after.starts_with('d')
        || after.starts_with('m')
        || after.starts_with('t');
    if !name_ends {
        return None;
    }
    digits.parse().ok()
}

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;

/// The bytes of the evaluator read to find its cold part, at most.
const MAX_EVAL_BYTES: u64 = 1 << 20;
/// `.eh_frame` entries looked at, at most.
const MAX_FDES: usize = 1 << 20;

/// The CPython interpreter in `elf` (mapped from a file named `file_name`), `Ok(None)` when
/// the file is not one: it must export `_PyRuntime` and be named like CPython or say its
/// version in `Py_Version`.
pub fn detect(file_name: &str, elf: &ElfFile) -> Result<Option<Interpreter>, PythonError> {
    let named = minor_from_name(file_name);
    let wanted = [
        "_PyRuntime",
        "Py_Version",
        "PyCode_Type",
        "_PyEval_EvalFrameDefault",
    ];
    let symbols = elf
        .dynamic_symbols(&wanted)
        .map_err(|e| PythonError::Elf(e.to_string()))?;
    let symbol = |name: &str| {
        symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, value, size)| (value, size))
    };
    let Some((runtime, _)) = symbol("_PyRuntime") else {
        return Ok(None);
    };
    let version_word = match symbol("Py_Version") {
        Some((at, _)) => {
            let bytes = elf
                .read_vaddr(at, 4)
                .map_err(|e| PythonError::Elf(e.to_string()))?;
            Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        }
        None => None,
    };
    let (major, minor, micro) = match (version_word, named) {
        (Some(v), _) => ((v >> 24) as u8, (v >> 16) as u8, Some((v >> 8) as u8)),
        (None, Some(minor)) => (3, minor, None),
        (None, None) => return Ok(None),
    };
    let table = match (major, offsets::for_minor(minor)) {
        (3, Some(table)) => table,
        _ => return Err(PythonError::Unsupported(major, minor)),
    };
    let (code_type, _) = symbol("PyCode_Type").ok_or(PythonError::Missing("PyCode_Type"))?;
    let (eval, eval_size) = symbol("_PyEval_EvalFrameDefault")
        .ok_or(PythonError::Missing("_PyEval_EvalFrameDefault"))?;
    let mut offsets = table;
    if let Some(version) = version_word.filter(|_| minor >= 13) {
        let bytes = elf
            .read_vaddr(runtime, offsets::DEBUG_OFFSETS_LEN as u64)
            .map_err(|e| PythonError::Elf(e.to_string()))?;
        if bytes
            .get(16..24)
            .is_some_and(|flag| flag.iter().any(|&b| b != 0))
        {
            return Err(PythonError::FreeThreaded(minor));
        }
        offsets = offsets::from_debug_offsets(&bytes, version)
            .ok_or(PythonError::Layout("_Py_DebugOffsets", minor))?;
    }
    if offsets.instruction_is_pointer {
        // The bytecode starts where a code object's fixed part ends: tp_basicsize.
        let basic_at = code_type
            .checked_add(32)
            .ok_or(PythonError::Missing("PyCode_Type"))?;
        let basic = elf
            .read_vaddr(basic_at, 8)
            .map_err(|e| PythonError::Elf(e.to_string()))?;
        let basic = u64::from_le_bytes(basic.try_into().unwrap_or([0; 8]));
        if basic != u64::from(offsets.code_bytecode) {
            return Err(PythonError::Layout("PyCode_Type.tp_basicsize", minor));
        }
    }
    let hot = (eval, eval.saturating_add(eval_size.max(1)));
    let mut eval_ranges = vec![hot];
    if let Some(cold) = cold_part(elf, hot) {
        eval_ranges.push(cold);
    }
    let text_delta = elf
        .program_headers
        .iter()
        .find(|p| p.p_type == PT_LOAD && p.flags & PF_X != 0)
        .map(|p| p.vaddr.wrapping_sub(p.offset))
        .ok_or(PythonError::Missing("an executable segment"))?;
    Ok(Some(Interpreter {
        text_delta,
        major,
        minor,
        micro,
        offsets,
        runtime,
        code_type,
        eval_ranges,
    }))
}

/// The part of the evaluator that the compiler moved out of its symbol (`.cold`), which
/// has no symbol in a stripped file: the call-frame entry most of the function's jumps out
/// of itself land in. Calls made from there have return addresses in it, so it must count
/// as the evaluator.
fn cold_part(elf: &ElfFile, hot: (u64, u64)) -> Option<(u64, u64)> {
    let size = (hot.1 - hot.0).min(MAX_EVAL_BYTES);
    let code = elf.read_vaddr(hot.0, size).ok()?;
    let rel32 = |at: usize| -> Option<i64> {
        let b = code.get(at..at + 4)?;
        Some(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    let mut targets = Vec::new();
    for i in 0..code.len() {
        let (length, rel) = match (code[i], code.get(i + 1)) {
            (0xe9, _) => (5, rel32(i + 1)),
            (0x0f, Some(op)) if op & 0xf0 == 0x80 => (6, rel32(i + 2)),
            _ => continue,
        };
        let Some(rel) = rel else { continue };
        let target = (hot.0 as i64)
            .wrapping_add(i as i64 + length)
            .wrapping_add(rel) as u64;
        if target < hot.0 || target >= hot.1 {
            targets.push(target);
        }
    }
    if targets.is_empty() {
        return None;
    }
    // Sorted, so that each entry counts its targets in two binary searches: a file may
    // hold a million of each.
    targets.sort_unstable();
    let fdes = fde_ranges(elf)?;
    let mut best: Option<((u64, u64), usize)> = None;
    for &(start, end) in &fdes {
        if start < hot.1 && hot.0 < end {
            continue;
        }
        let hits = targets.partition_point(|&t| t < end) - targets.partition_point(|&t| t < start);
        if best.is_none_or(|(_, n)| hits > n) {
            best = Some(((start, end), hits));
        }
    }
    // A handful of stray byte patterns can look like jumps; the real cold part takes
    // hundreds of them.
    best.filter(|&(_, hits)| hits >= 16).map(|(range, _)| range)
}

/// The address ranges of the file's `.eh_frame` entries.
fn fde_ranges(elf: &ElfFile) -> Option<Vec<(u64, u64)>> {
    let header = elf.section(".eh_frame")?;
    let data = elf.section_data(header).ok()?;
    let mut bases = BaseAddresses::default().set_eh_frame(header.addr);
    if let Some(text) = elf.section(".text") {
        bases = bases.set_text(text.addr);
    }
    let mut eh = EhFrame::new(&data, LittleEndian);
    eh.set_address_size(8);
    let mut entries = eh.entries(&bases);
    let mut out = Vec::new();
    while let Ok(Some(entry)) = entries.next() {
        if out.len() >= MAX_FDES {
            break;
        }
        if let CieOrFde::Fde(partial) = entry
            && let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o))
        {
            let start = fde.initial_address();
            out.push((start, start.saturating_add(fde.len())));
        }
    }
    Some(out)
}
