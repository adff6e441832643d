//! Code objects read out of a Python process: the function's name, file and first line,
//! and its line table, which turns a frame's instruction position into a line.

use super::offsets::{LineTable, Offsets};
use crate::memory::Memory;

/// Names and file names longer than this (in bytes read) are refused: CPython's own are
/// far shorter, and memory that says otherwise is not a code object.
pub const MAX_STRING_BYTES: usize = 4096;
/// The longest line table read (bytes). A module of 10,000 lines needs about 60 KiB.
pub const MAX_LINE_TABLE_BYTES: usize = 256 << 10;

/// Why a code object could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodeError {
    #[error("memory at {0:#x} could not be read")]
    Unreadable(u64),
    #[error("{0:#x} is not a code object")]
    NotCode(u64),
    #[error("the code object at {0:#x} changed since it was sampled")]
    Changed(u64),
    #[error("a string of the code object at {0:#x} is malformed: {1}")]
    BadString(u64, &'static str),
    #[error("the line table of the code object at {0:#x} is {1} bytes, above the limit")]
    LineTableTooLong(u64, u64),
}

/// What a Python frame shows of its code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_qualname` (3.11+) or `co_name`.
    pub name: String,
    pub filename: String,
    pub first_line: u32,
    line_table: Vec<u8>,
    format: LineTable,
}

impl CodeInfo {
    pub fn new(
        name: String,
        filename: String,
        first_line: u32,
        line_table: Vec<u8>,
        format: LineTable,
    ) -> Self {
        CodeInfo {
            name,
            filename,
            first_line,
            line_table,
            format,
        }
    }

    /// The line being run at `position` (the frame's instruction position as the walker
    /// records it); the first line when the table does not say.
    pub fn line(&self, position: i32) -> u32 {
        line_at(self.format, &self.line_table, self.first_line, position).unwrap_or(self.first_line)
    }

    /// Bytes held, for the cache's budget.
    pub fn size(&self) -> usize {
        self.name.len() + self.filename.len() + self.line_table.len() + 64
    }
}

fn u64_at(b: &[u8], at: u16) -> u64 {
    let at = usize::from(at);
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

fn u32_at(b: &[u8], at: u16) -> u32 {
    let at = usize::from(at);
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
}

/// The walker's identity of a code object whose `co_filename` and `co_name` objects are
/// at `filename` and `name` (as `profiler.bpf.c` mixes them).
pub fn identity(filename: u64, name: u64) -> u64 {
    filename ^ name.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A code object as the walker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampled {
    pub addr: u64,
    /// Its first line, the low 24 bits.
    pub first_line: u32,
    /// [`identity`] of its file name and name.
    pub identity: u64,
}

/// Reads the code object the walker saw. `code_type` is the process's `PyCode_Type`
/// address. A code object freed and another made at the same address since (another
/// first line, file name or name) is refused.
pub fn read_code(
    memory: &dyn Memory,
    offsets: &Offsets,
    code_type: u64,
    sampled: Sampled,
) -> Result<CodeInfo, CodeError> {
    let addr = sampled.addr;
    let mut head = [0u8; 160];
    if !memory.read(addr, &mut head) {
        return Err(CodeError::Unreadable(addr));
    }
    if u64_at(&head, 8) != code_type {
        return Err(CodeError::NotCode(addr));
    }
    let first_line = u32_at(&head, offsets.code_firstlineno);
    let read_identity = identity(
        u64_at(&head, offsets.code_filename),
        u64_at(&head, offsets.code_name),
    );
    if first_line & 0xff_ffff != sampled.first_line || read_identity != sampled.identity {
        return Err(CodeError::Changed(addr));
    }
    let name_at = u64_at(&head, offsets.code_qualname.unwrap_or(offsets.code_name));
    let name = read_unicode(memory, offsets, name_at).map_err(|e| CodeError::BadString(addr, e))?;
    let filename = read_unicode(memory, offsets, u64_at(&head, offsets.code_filename))
        .map_err(|e| CodeError::BadString(addr, e))?;
    let line_table = read_bytes(memory, u64_at(&head, offsets.code_linetable), addr)?;
    Ok(CodeInfo {
        name,
        filename,
        first_line,
        line_table,
        format: offsets.line_table,
    })
}

/// A `str` object: compact ASCII, or compact 1-, 2- or 4-byte characters.
fn read_unicode(memory: &dyn Memory, offsets: &Offsets, addr: u64) -> Result<String, &'static str> {
    let mut head = [0u8; 40];
    if addr == 0 || !memory.read(addr, &mut head) {
        return Err("unreadable");
    }
    let length = u64_at(&head, 16);
    let state = u32_at(&head, 32);
    let kind = (state >> 2) & 7;
    let (compact, ascii) = (state & (1 << 5) != 0, state & (1 << 6) != 0);
    if !compact {
        return Err("not a compact string");
    }
    let width: u64 = match (ascii, kind) {
        (true, 1) => 1,
        (false, 1 | 2 | 4) => u64::from(kind),
        _ => return Err("bad kind"),
    };
    let bytes = length.checked_mul(width).ok_or("too long")?;
    if bytes > MAX_STRING_BYTES as u64 {
        return Err("too long");
    }
    let data_at = if ascii {
        offsets.unicode_ascii_data
    } else {
        offsets.unicode_compact_data
    };
    let mut data = vec![0u8; bytes as usize];
    if !memory.read(addr + u64::from(data_at), &mut data) {
        return Err("unreadable");
    }
    let text = match width {
        1 if ascii => String::from_utf8(data).map_err(|_| "not ASCII")?,
        1 => data.iter().map(|&b| char::from(b)).collect(),
        2 => char::decode_utf16(
            data.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        )
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect(),
        _ => data
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect(),
    };
    Ok(text)
}

/// A `bytes` object's contents (`ob_size` at 16, data at 32 in every version).
fn read_bytes(memory: &dyn Memory, addr: u64, code: u64) -> Result<Vec<u8>, CodeError> {
    let mut head = [0u8; 24];
    if addr == 0 || !memory.read(addr, &mut head) {
        return Err(CodeError::Unreadable(addr));
    }
    let size = u64_at(&head, 16);
    if size > MAX_LINE_TABLE_BYTES as u64 {
        return Err(CodeError::LineTableTooLong(code, size));
    }
    let mut data = vec![0u8; size as usize];
    if !memory.read(addr + 32, &mut data) {
        return Err(CodeError::Unreadable(addr + 32));
    }
    Ok(data)
}

/// The line at instruction `position` in a line table of `format`, counting from
/// `first_line`; `None` where the table gives no line. Linear in the table's length.
pub fn line_at(format: LineTable, table: &[u8], first_line: u32, position: i32) -> Option<u32> {
    if position < 0 {
        return Some(first_line);
    }
    let position = i64::from(position);
    let mut line = i64::from(first_line);
    let result = match format {
        LineTable::Lnotab => {
            // (address delta, line delta) pairs; the line holds up to the next address.
            let mut address = 0i64;
            for pair in table.chunks_exact(2) {
                address += i64::from(pair[0]);
                if address > position {
                    break;
                }
                line = line.saturating_add(i64::from(pair[1] as i8));
            }
            Some(line)
        }
        LineTable::Ranges310 => {
            // Ranges in bytes; the frame's position is in 2-byte code units.
            let target = position * 2;
            let mut end = 0i64;
            let mut found = None;
            for pair in table.chunks_exact(2) {
                let start = end;
                end += i64::from(pair[0]);
                let delta = pair[1] as i8;
                if delta != -128 {
                    line = line.saturating_add(i64::from(delta));
                }
                if start <= target && target < end {
                    found = Some((delta != -128).then_some(line));
                    break;
                }
            }
            found.flatten()
        }
        LineTable::Locations => locations_line(table, line, position),
    };
    result.and_then(|l| u32::try_from(l).ok())
}

/// 3.11+ location table: entries of `1 cccc lll` (code c, lll+1 code units) and their
/// operands.
fn locations_line(table: &[u8], mut line: i64, position: i64) -> Option<i64> {
    let mut at = 0usize;
    let mut address = 0i64;
    let varint = |at: &mut usize| -> Option<u64> {
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let b = *table.get(*at)?;
            *at += 1;
            if shift < 64 {
                value |= u64::from(b & 63) << shift;
            }
            shift += 6;
            if b & 64 == 0 {
                return Some(value);
            }
        }
    };
    let svarint = |at: &mut usize| -> Option<i64> {
        let v = varint(at)?;
        let magnitude = (v >> 1) as i64;
        Some(if v & 1 != 0 { -magnitude } else { magnitude })
    };
    while at < table.len() {
        let first = table[at];
        if first & 0x80 == 0 {
            return None; // not at an entry: a malformed table
        }
        at += 1;
        let code = (first >> 3) & 15;
        let length = i64::from(first & 7) + 1;
        let has_line = match code {
            15 => false,
            14 => {
                line = line.saturating_add(svarint(&mut at)?);
                for _ in 0..3 {
                    varint(&mut at)?;
                }
                true
            }
            13 => {
                line = line.saturating_add(svarint(&mut at)?);
                true
            }
            10..=12 => {
                line = line.saturating_add(i64::from(code) - 10);
                at += 2;
                true
            }
            _ => {
                at += 1;
                true
            }
        };
        // A table that claims a line past any file's is read as one, not overflowed.
        if address <= position && position < address + length {
            return has_line.then_some(line);
        }
        address += length;
    }
    None
}
