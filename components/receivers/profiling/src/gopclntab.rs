//! A reader of Go's function table (`.gopclntab`), for Go 1.18 and later, so that Go
//! binaries stripped of their symbol table (`-ldflags='-s -w'`) are still symbolized:
//! the linker keeps this table because the Go runtime itself needs it for tracebacks.
//!
//! Layout (little-endian; `ptr` = pointer size from the header):
//!
//! ```text
//! header:  magic u32 (0xfffffff0: Go 1.18–1.19, 0xfffffff1: Go 1.20+), 0, 0,
//!          pc quantum u8, ptr size u8,
//!          nfunc, nfiles, textStart, funcnameOffset, cuOffset, filetabOffset,
//!          pctabOffset, pclnOffset                       (ptr each)
//! functab: at pclnOffset, nfunc × {entryoff u32, funcoff u32}, then the end entryoff;
//!          entryoff is relative to textStart, sorted
//! _func:   at pclnOffset + funcoff: entryoff, nameoff, args, deferreturn, pcsp, pcfile,
//!          pcln, npcdata, cuOffset, ... (u32 each)
//! names:   NUL-terminated, at funcnameOffset + nameoff
//! pcln:    a pc-value table at pctabOffset + pcln: varint pairs (zig-zag value delta,
//!          pc delta / quantum), value starting at -1, pc at the function entry
//! files:   pcfile gives a file index; cutab[cuOffset + index] is an offset into filetab
//! ```
//!
//! Inlined Go frames (the `FUNCDATA_InlTree` table) are not read: a Go frame gives the
//! function it is compiled into.

use crate::elf::ElfFile;

const GO118_MAGIC: u32 = 0xffff_fff0;
const GO120_MAGIC: u32 = 0xffff_fff1;
const OLD_MAGICS: [u32; 2] = [0xffff_fffb, 0xffff_fffa];
/// Bytes of a function or file name at most (Go's longest generic instantiations are a
/// few KiB); a name with no NUL within it is not read, so a lookup never scans the table.
pub const MAX_NAME: usize = 16 << 10;
/// (value, pc) pairs decoded per pc-value lookup at most: enough for a function of
/// megabytes of code, and a bound on the work one frame can cost.
pub const MAX_PCVALUE_STEPS: usize = 1 << 18;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoTableError {
    /// No `.gopclntab` section: not a Go binary.
    NotGo,
    /// A table of Go before 1.18.
    TooOld,
    Malformed(&'static str),
    Read(String),
}

impl std::fmt::Display for GoTableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoTableError::NotGo => write!(f, "no .gopclntab section"),
            GoTableError::TooOld => write!(f, "a Go function table older than Go 1.18"),
            GoTableError::Malformed(what) => write!(f, "malformed .gopclntab: {what}"),
            GoTableError::Read(e) => write!(f, "reading .gopclntab: {e}"),
        }
    }
}

impl std::error::Error for GoTableError {}

/// What a pc resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFrame {
    pub function: String,
    /// The function's entry address (a link-time virtual address).
    pub entry: u64,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A parsed `.gopclntab`.
#[derive(Debug, Clone)]
pub struct GoTable {
    data: Vec<u8>,
    quantum: u32,
    nfunc: usize,
    text_start: u64,
    funcnametab: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    pcln: usize,
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn uintptr_at(data: &[u8], at: usize, ptr_size: usize) -> Option<u64> {
    if ptr_size == 4 {
        return u32_at(data, at).map(u64::from);
    }
    let b = data.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes([
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
    ]))
}

fn cstring_at(data: &[u8], at: usize) -> Option<&str> {
    let rest = data.get(at..)?;
    let rest = &rest[..rest.len().min(MAX_NAME)];
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

fn read_uvarint(data: &[u8], at: &mut usize) -> Option<u32> {
    let mut value: u32 = 0;
    let mut shift = 0;
    loop {
        let b = *data.get(*at)?;
        *at += 1;
        value |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

impl GoTable {
    /// The table of an opened Go binary. The text start is the header's, or, when the
    /// header holds 0 (a position-independent binary not yet relocated), the address of
    /// `.text`.
    pub fn from_elf(elf: &ElfFile) -> Result<Self, GoTableError> {
        let section = elf.gopclntab().ok_or(GoTableError::NotGo)?;
        let data = elf
            .section_data(section)
            .map_err(|e| GoTableError::Read(e.to_string()))?;
        let text = elf.section(".text").map_or(0, |s| s.addr);
        Self::parse(data, text)
    }

    /// Parses a table; `text_fallback` is used when the header's text start is 0.
    pub fn parse(data: Vec<u8>, text_fallback: u64) -> Result<Self, GoTableError> {
        let magic = u32_at(&data, 0).ok_or(GoTableError::Malformed("shorter than its header"))?;
        if OLD_MAGICS.contains(&magic) {
            return Err(GoTableError::TooOld);
        }
        if magic != GO118_MAGIC && magic != GO120_MAGIC {
            return Err(GoTableError::Malformed("unknown magic"));
        }
        let [pad1, pad2, quantum, ptr_size] = data
            .get(4..8)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .ok_or(GoTableError::Malformed("shorter than its header"))?;
        if pad1 != 0 || pad2 != 0 || !matches!(quantum, 1 | 2 | 4) || !matches!(ptr_size, 4 | 8) {
            return Err(GoTableError::Malformed("bad header"));
        }
        let ptr_size = usize::from(ptr_size);
        let word = |i: usize| {
            uintptr_at(&data, 8 + i * ptr_size, ptr_size)
                .ok_or(GoTableError::Malformed("shorter than its header"))
        };
        let offset = |i: usize| -> Result<usize, GoTableError> {
            let v = usize::try_from(word(i)?)
                .map_err(|_| GoTableError::Malformed("offset out of range"))?;
            if v > data.len() {
                return Err(GoTableError::Malformed("offset out of range"));
            }
            Ok(v)
        };
        let nfunc = usize::try_from(word(0)?)
            .map_err(|_| GoTableError::Malformed("function count out of range"))?;
        let header_text = word(2)?;
        let table = GoTable {
            quantum: u32::from(quantum),
            nfunc,
            text_start: if header_text != 0 {
                header_text
            } else {
                text_fallback
            },
            funcnametab: offset(3)?,
            cutab: offset(4)?,
            filetab: offset(5)?,
            pctab: offset(6)?,
            pcln: offset(7)?,
            data: Vec::new(),
        };
        // The function table must fit: nfunc pairs plus the end entry.
        let functab_end = nfunc
            .checked_mul(8)
            .and_then(|n| n.checked_add(4 + table.pcln))
            .ok_or(GoTableError::Malformed("function table out of range"))?;
        if functab_end > data.len() {
            return Err(GoTableError::Malformed("function table out of range"));
        }
        Ok(GoTable { data, ..table })
    }

    pub fn text_start(&self) -> u64 {
        self.text_start
    }

    /// Bytes of the table held in memory.
    pub fn byte_len(&self) -> usize {
        self.data.len()
    }

    pub fn len(&self) -> usize {
        self.nfunc
    }

    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// `entryoff` of function `i` (`i == nfunc` is the end of the last function).
    fn entry_off(&self, i: usize) -> Option<u32> {
        u32_at(&self.data, self.pcln + i * 8)
    }

    fn func_off(&self, i: usize) -> Option<usize> {
        u32_at(&self.data, self.pcln + i * 8 + 4).map(|o| self.pcln + o as usize)
    }

    /// Field `n` (u32) of the `_func` at `func`.
    fn field(&self, func: usize, n: usize) -> Option<u32> {
        u32_at(&self.data, func.checked_add(n * 4)?)
    }

    /// Every function as (entry address, name), in address order.
    pub fn functions(&self) -> impl Iterator<Item = (u64, &str)> + '_ {
        (0..self.nfunc).filter_map(|i| {
            let entry = self.text_start.checked_add(u64::from(self.entry_off(i)?))?;
            let name = self.name(self.func_off(i)?)?;
            Some((entry, name))
        })
    }

    fn name(&self, func: usize) -> Option<&str> {
        let nameoff = self.field(func, 1)? as usize;
        cstring_at(&self.data, self.funcnametab.checked_add(nameoff)?)
    }

    /// The function holding `pc` (a link-time virtual address), with its file and line.
    pub fn lookup(&self, pc: u64) -> Option<GoFrame> {
        let off = u32::try_from(pc.checked_sub(self.text_start)?).ok()?;
        if self.nfunc == 0 || off < self.entry_off(0)? || off >= self.entry_off(self.nfunc)? {
            return None;
        }
        // The last function whose entry is at or below the pc.
        let (mut lo, mut hi) = (0usize, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry_off(mid)? <= off {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let func = self.func_off(lo)?;
        let entry = self
            .text_start
            .checked_add(u64::from(self.field(func, 0)?))?;
        let function = self.name(func)?.to_owned();
        let line = self
            .pc_value(self.field(func, 6)?, entry, pc)
            .and_then(|l| u32::try_from(l).ok())
            .filter(|&l| l > 0);
        let file = self.file(func, entry, pc);
        Some(GoFrame {
            function,
            entry,
            file,
            line,
        })
    }

    fn file(&self, func: usize, entry: u64, pc: u64) -> Option<String> {
        let index = u32::try_from(self.pc_value(self.field(func, 5)?, entry, pc)?).ok()?;
        let cu = self.field(func, 8)?;
        let slot = self
            .cutab
            .checked_add((cu.checked_add(index)? as usize).checked_mul(4)?)?;
        let file_off = u32_at(&self.data, slot)?;
        if file_off == u32::MAX {
            return None;
        }
        cstring_at(&self.data, self.filetab.checked_add(file_off as usize)?).map(str::to_owned)
    }

    /// Decodes the pc-value table at `pctab + table` for `target`.
    fn pc_value(&self, table: u32, entry: u64, target: u64) -> Option<i32> {
        if table == 0 {
            return None;
        }
        let mut at = self.pctab.checked_add(table as usize)?;
        let mut value: i32 = -1;
        let mut pc = entry;
        let mut first = true;
        for _ in 0..MAX_PCVALUE_STEPS {
            let uvdelta = read_uvarint(&self.data, &mut at)?;
            if uvdelta == 0 && !first {
                return None;
            }
            first = false;
            let vdelta = if uvdelta & 1 != 0 {
                !(uvdelta >> 1) as i32
            } else {
                (uvdelta >> 1) as i32
            };
            let pcdelta = read_uvarint(&self.data, &mut at)?;
            pc = pc.checked_add(u64::from(pcdelta) * u64::from(self.quantum))?;
            value = value.wrapping_add(vdelta);
            if target < pc {
                return Some(value);
            }
        }
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn zigzag(v: i32) -> u32 {
        ((v << 1) ^ (v >> 31)) as u32
    }

    fn uvarint(mut v: u32, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A pc-value table: (value, length in bytes) runs.
    fn pcvalue(runs: &[(i32, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = -1;
        for &(v, len) in runs {
            uvarint(zigzag(v - prev), &mut out);
            uvarint(len, &mut out);
            prev = v;
        }
        out.push(0);
        out
    }

    /// A Go 1.20-style table with two functions at text 0x401000:
    /// `main.alpha` [0x0, 0x40) lines 10 then 11 from 0x20, and `main.beta` [0x40, 0x90).
    pub(crate) fn synthetic_table() -> Vec<u8> {
        let names = b"main.alpha\0main.beta\0".to_vec();
        let files = b"/src/main.go\0".to_vec();
        let cutab: Vec<u8> = [0u32, u32::MAX]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut pctab = vec![0u8]; // offset 0 means "no table"
        let alpha_line = pctab.len() as u32;
        pctab.extend(pcvalue(&[(10, 0x20), (11, 0x20)]));
        let alpha_file = pctab.len() as u32;
        pctab.extend(pcvalue(&[(0, 0x40)]));
        let beta_line = pctab.len() as u32;
        pctab.extend(pcvalue(&[(20, 0x50)]));
        let beta_file = pctab.len() as u32;
        pctab.extend(pcvalue(&[(1, 0x50)])); // index 1 → cutab says "no file"

        let header_len = 8 + 8 * 8;
        let funcname_off = header_len;
        let cu_off = funcname_off + names.len();
        let filetab_off = cu_off + cutab.len();
        let pctab_off = filetab_off + files.len();
        let pcln_off = pctab_off + pctab.len();
        // functab: 2 pairs + end, then the two _func records.
        let functab_len = 2 * 8 + 4;
        let func = |entryoff: u32, nameoff: u32, pcfile: u32, pcln: u32| -> Vec<u8> {
            [entryoff, nameoff, 0, 0, 0, pcfile, pcln, 0, 0, 0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        };
        let alpha = func(0, 0, alpha_file, alpha_line);
        let beta = func(0x40, 11, beta_file, beta_line);
        let mut functab = Vec::new();
        for (entry, funcoff) in [
            (0u32, functab_len as u32),
            (0x40, (functab_len + alpha.len()) as u32),
        ] {
            functab.extend(entry.to_le_bytes());
            functab.extend(funcoff.to_le_bytes());
        }
        functab.extend(0x90u32.to_le_bytes());

        let mut out = Vec::new();
        out.extend(GO120_MAGIC.to_le_bytes());
        out.extend([0, 0, 1, 8]);
        for w in [
            2u64,
            1,
            0x401000,
            funcname_off as u64,
            cu_off as u64,
            filetab_off as u64,
            pctab_off as u64,
            pcln_off as u64,
        ] {
            out.extend(w.to_le_bytes());
        }
        out.extend(names);
        out.extend(cutab);
        out.extend(files);
        out.extend(pctab);
        out.extend(functab);
        out.extend(alpha);
        out.extend(beta);
        out
    }

    #[test]
    fn synthetic_table_resolves_names_files_and_lines() {
        let t = GoTable::parse(synthetic_table(), 0).expect("parses");
        assert_eq!(t.len(), 2);
        assert_eq!(t.text_start(), 0x401000);
        let f: Vec<_> = t.functions().collect();
        assert_eq!(f, vec![(0x401000, "main.alpha"), (0x401040, "main.beta")]);
        let a = t.lookup(0x401000).expect("alpha entry");
        assert_eq!(a.function, "main.alpha");
        assert_eq!(a.entry, 0x401000);
        assert_eq!(a.line, Some(10));
        assert_eq!(a.file.as_deref(), Some("/src/main.go"));
        assert_eq!(t.lookup(0x40101f).and_then(|f| f.line), Some(10));
        assert_eq!(t.lookup(0x401020).and_then(|f| f.line), Some(11));
        let b = t.lookup(0x40108f).expect("beta end");
        assert_eq!(b.function, "main.beta");
        assert_eq!(b.line, Some(20));
        assert_eq!(b.file, None, "cutab marks the file as absent");
        assert_eq!(t.lookup(0x401090), None, "past the last function");
        assert_eq!(t.lookup(0x400fff), None, "before text");
    }

    #[test]
    fn old_and_broken_tables_are_refused() {
        let mut old = synthetic_table();
        old[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
        assert_eq!(GoTable::parse(old, 0).err(), Some(GoTableError::TooOld));
        let mut bad = synthetic_table();
        bad[6] = 3; // pc quantum
        assert!(matches!(
            GoTable::parse(bad, 0),
            Err(GoTableError::Malformed(_))
        ));
        let cut = synthetic_table()[..100].to_vec();
        assert!(GoTable::parse(cut, 0).is_err());
        assert!(GoTable::parse(vec![1, 2], 0).is_err());
        // Every prefix of a valid table (a 4-byte table with a valid magic among them) is
        // refused or parsed, never a panic.
        let table = synthetic_table();
        for len in 0..table.len() {
            if let Ok(t) = GoTable::parse(table[..len].to_vec(), 0) {
                let _ = t.lookup(0x401010);
                let _ = t.functions().count();
            }
        }
        let four = GO120_MAGIC.to_le_bytes().to_vec();
        assert_eq!(
            GoTable::parse(four, 0).err(),
            Some(GoTableError::Malformed("shorter than its header"))
        );
    }

    #[test]
    fn names_without_an_end_and_endless_pc_tables_are_bounded() {
        let mut t = synthetic_table();
        // main.beta's name runs into MAX_NAME bytes without a NUL: not read.
        let names_at = 8 + 8 * 8;
        let beta = names_at + 11;
        t[beta + 9] = b'x';
        let mut long = t[..beta].to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_NAME + 10));
        let shift = long.len() - (beta + 10);
        long.extend_from_slice(&t[beta + 10..]);
        // Move every header offset past the names by the added bytes.
        for i in 4..8 {
            let at = 8 + i * 8;
            let v = u64::from_le_bytes(long[at..at + 8].try_into().expect("8 bytes"));
            long[at..at + 8].copy_from_slice(&(v + shift as u64).to_le_bytes());
        }
        let parsed = GoTable::parse(long, 0).expect("parses");
        assert_eq!(
            parsed.lookup(0x401000).map(|f| f.function),
            Some("main.alpha".into())
        );
        assert_eq!(
            parsed.lookup(0x401040),
            None,
            "an endless name is not a name"
        );
        // A pc-value table of only (0, 0) steps after the first never ends by itself.
        let mut endless = vec![0u8];
        endless.extend([2, 0]);
        for _ in 0..MAX_PCVALUE_STEPS + 5 {
            endless.extend([2, 0]);
        }
        // Only here would the pc pass the target: too many steps in.
        endless.extend([2, 100]);
        let g = GoTable {
            data: endless,
            quantum: 1,
            nfunc: 0,
            text_start: 0,
            funcnametab: 0,
            cutab: 0,
            filetab: 0,
            pctab: 0,
            pcln: 0,
        };
        assert_eq!(g.pc_value(1, 0, 10), None);
        let mut short = vec![0u8, 2, 0, 2, 0, 2, 100];
        short.push(0);
        let g = GoTable { data: short, ..g };
        assert_eq!(
            g.pc_value(1, 0, 10),
            Some(2),
            "a short table still resolves"
        );
    }

    #[test]
    fn zero_text_start_falls_back_to_the_text_section() {
        let mut t = synthetic_table();
        t[8 + 16..8 + 24].copy_from_slice(&0u64.to_le_bytes());
        let t = GoTable::parse(t, 0x500000).expect("parses");
        assert_eq!(
            t.lookup(0x500041).map(|f| f.function),
            Some("main.beta".into())
        );
    }

    /// A real Go binary, stripped with `-ldflags='-s -w'`, built here with Debian's `go`.
    #[test]
    fn stripped_go_binary_is_symbolized_from_its_pclntab() {
        let Some(program) = crate::testutil::go_program() else {
            return;
        };
        let elf = ElfFile::open(&program.binary).expect("elf");
        assert!(
            elf.section(".symtab").is_none(),
            "stripped of its symbol table"
        );
        assert!(elf.gopclntab().is_some());
        assert!(elf.go_build_id().is_some(), "the Go build id note is kept");
        let table = GoTable::from_elf(&elf).expect("Go 1.18+ table");
        assert!(table.functions().any(|(_, n)| n == "main.main"));
        assert!(table.functions().any(|(_, n)| n == "runtime.main"));
        let marker = table
            .functions()
            .find(|(_, n)| *n == crate::testutil::GO_MARKER)
            .map(|(entry, _)| entry)
            .expect("marker function listed");
        let frame = table.lookup(marker + 4).expect("marker resolves");
        assert_eq!(frame.function, crate::testutil::GO_MARKER);
        assert_eq!(frame.entry, marker);
        assert!(
            frame
                .file
                .as_deref()
                .is_some_and(|f| f.ends_with("main.go")),
            "{frame:?}"
        );
        // Somewhere in the function's body (the leaf has no prologue at its entry).
        let body = program.marker_line..program.marker_line + 7;
        assert!(frame.line.is_some_and(|l| body.contains(&l)), "{frame:?}");
        // The running program reports its function's address: the same as the table's.
        let running = program.start();
        assert_eq!(running.marker_pc, marker);
    }
}
