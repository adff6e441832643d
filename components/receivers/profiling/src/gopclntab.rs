//! A reader of Go's function table (`.gopclntab`), for Go 1.18 and later, so that Go
//! binaries stripped of their symbol table (`-ldflags='-s -w'`) are still symbolized:
//! the linker keeps this table because the Go runtime itself needs it for tracebacks.
//!
//! Layout (little-endian; `ptr` = pointer size from the header):
//!
//! ```text
//! header:   magic u32 (0xfffffff0: Go 1.18–1.19, 0xfffffff1: Go 1.20+), 0, 0,
//!           pc quantum u8, ptr size u8,
//!           nfunc, nfiles, textStart, funcnameOffset, cuOffset, filetabOffset,
//!           pctabOffset, pclnOffset                      (ptr each)
//!           textStart is 0 from Go 1.26 on (and in position-independent binaries):
//!           then the module data's `text` holds it
//! functab:  at pclnOffset, nfunc × {entryoff u32, funcoff u32}, then the end entryoff;
//!           entryoff is relative to textStart, sorted
//! _func:    at pclnOffset + funcoff: entryoff, nameoff, args, deferreturn, pcsp, pcfile,
//!           pcln, npcdata, cuOffset, [startLine, Go 1.20+] (u32 each), funcID u8,
//!           flag u8, pad u8, nfuncdata u8; then pcdata[npcdata] u32 (pctab offsets),
//!           funcdata[nfuncdata] u32 (offsets from the module's `gofunc`, !0 = none)
//! names:    NUL-terminated, at funcnameOffset + nameoff
//! pcln:     a pc-value table at pctabOffset + pcln: varint pairs (zig-zag value delta,
//!           pc delta / quantum), value starting at -1, pc at the function entry
//! files:    pcfile gives a file index; cutab[cuOffset + index] is an offset into filetab
//! inlining: pcdata[2] (PCDATA_InlTreeIndex) gives, per pc, an index into the inline
//!           tree at gofunc + funcdata[3] (FUNCDATA_InlTree), or -1 outside inlined code.
//!           An entry (Go 1.20+: funcID u8, pad 3, nameoff i32, parentPc i32,
//!           startLine i32; Go 1.18–1.19: parent i16, funcID u8, pad, file i32, line i32,
//!           nameoff i32, parentPc i32) names the inlined function; entry + parentPc is
//!           a pc whose position is the call site, in the caller's own frame
//! module:   moduledata (its own `.go.module` section from Go 1.26; before, inside
//!           `.noptrdata`, or `.data.rel.ro` when position-independent) starts with the
//!           address of this table, then six slices; word 20 is minpc, word 22 text,
//!           word 40 gofunc (38 before Go 1.20, which added two words before it)
//! ```
//!
//! A pc inside inlined code gives one line per function, innermost first, the function
//! it is compiled into last, as Go's `runtime.CallersFrames` does: the innermost's file
//! and line are the pc's own, each caller's those at its call site's pc.

use crate::elf::{ElfFile, SectionHeader};

/// `SHT_NOBITS`: a section with no bytes in the file.
const SHT_NOBITS: u32 = 8;

const GO118_MAGIC: u32 = 0xffff_fff0;
const GO120_MAGIC: u32 = 0xffff_fff1;
const OLD_MAGICS: [u32; 2] = [0xffff_fffb, 0xffff_fffa];
/// Bytes of a function or file name at most (Go's longest generic instantiations are a
/// few KiB); a name with no NUL within it is not read, so a lookup never scans the table.
pub const MAX_NAME: usize = 16 << 10;
/// (value, pc) pairs decoded per pc lookup at most, all its tables and inlined levels
/// together: enough for a function of megabytes of code, and a bound on the work one
/// frame can cost.
pub const MAX_PCVALUE_STEPS: usize = 1 << 18;
/// Inlined functions expanded at one pc at most. Go's inliner stops far earlier; a
/// crafted tree whose parents loop stops here.
pub const MAX_INLINE_DEPTH: usize = 64;
/// Bytes of data sections searched for the module data at most, all together.
const MAX_MODULE_SCAN: u64 = 64 << 20;
/// Bytes of funcdata (the inline trees) read when they lie outside `.gopclntab` (before
/// Go 1.22 they sat in `.rodata`): from `gofunc` to its section's end, cut here.
pub const MAX_FUNCDATA_BYTES: u64 = 64 << 20;
/// Data sections the module data may live in, most likely first.
const MODULE_SECTIONS: [&str; 4] = [".go.module", ".noptrdata", ".data.rel.ro", ".data"];

const PCDATA_INL_TREE_INDEX: usize = 2;
const FUNCDATA_INL_TREE: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoTableError {
    /// No `.gopclntab` section: not a Go binary.
    #[error("no .gopclntab section")]
    NotGo,
    /// A table of Go before 1.18.
    #[error("a Go function table older than Go 1.18")]
    TooOld,
    #[error("malformed .gopclntab: {0}")]
    Malformed(&'static str),
    #[error("reading .gopclntab: {0}")]
    Read(String),
}

/// One function at a pc: the one the code is compiled into, or one inlined there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoLine {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// What a pc resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFrame {
    /// The entry address (a link-time virtual address) of the function the code is
    /// compiled into.
    pub entry: u64,
    /// Innermost inlined function first, the function the code is compiled into last;
    /// never empty.
    pub lines: Vec<GoLine>,
}

impl GoFrame {
    /// The function the code is compiled into.
    pub fn function(&self) -> &str {
        self.lines.last().map_or("", |l| l.function.as_str())
    }
}

/// Layout differences between the table versions read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    Go118,
    Go120,
}

impl Version {
    /// Bytes of `_func` before its pcdata offsets: 9 (10 with startLine) u32 fields,
    /// then funcID, flag, a pad byte and nfuncdata.
    fn func_header(self) -> usize {
        match self {
            Version::Go118 => 40,
            Version::Go120 => 44,
        }
    }

    /// (entry size, offset of nameoff, offset of parentPc, offset of funcID) of an
    /// inline tree entry.
    fn inline_entry(self) -> (usize, usize, usize, usize) {
        match self {
            Version::Go118 => (20, 12, 16, 2),
            Version::Go120 => (16, 4, 8, 0),
        }
    }

    /// Module data word holding `gofunc`.
    fn gofunc_word(self) -> usize {
        match self {
            Version::Go118 => 38,
            Version::Go120 => 40,
        }
    }
}

/// Where the funcdata (the inline trees) is.
#[derive(Debug, Clone)]
enum FuncData {
    /// Not found: inlined frames are not expanded.
    None,
    /// Inside the table, at this offset (Go 1.22 and later).
    InTable(usize),
    /// Read from another section, starting at `gofunc`.
    Own(Vec<u8>),
}

/// What the module data says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Module {
    minpc: u64,
    text: u64,
    gofunc: u64,
}

/// A parsed `.gopclntab`.
#[derive(Debug, Clone)]
pub struct GoTable {
    data: Vec<u8>,
    version: Version,
    quantum: u32,
    ptr_size: usize,
    nfunc: usize,
    /// The header's text start (0 from Go 1.26 on).
    header_text: u64,
    text_start: u64,
    funcnametab: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    pcln: usize,
    funcdata: FuncData,
    /// The funcID of wrappers, when known.
    wrapper_id: Option<u8>,
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

/// Callers of inlined code whose function id says "wrapper" (compiler-made pointer
/// receiver, interface, method value and defer wrappers, and a few runtime functions)
/// are left out unless they call a panic function, as Go's `runtime.CallersFrames`
/// leaves them out: stacks then read as in Go's own profiles. The innermost line is
/// always kept.
fn elide_wrappers(lines: Vec<(GoLine, u8)>, wrapper: Option<u8>) -> Vec<GoLine> {
    let mut kept: Vec<GoLine> = Vec::with_capacity(lines.len());
    for (line, id) in lines {
        let elide = kept.last().is_some_and(|callee| {
            Some(id) == wrapper
                && !matches!(
                    callee.function.as_str(),
                    "runtime.gopanic" | "runtime.sigpanic" | "runtime.panicwrap"
                )
        });
        if !elide {
            kept.push(line);
        }
    }
    kept
}

/// The module data in `bytes` (a data section), found by its first words: the table's
/// address, then the function name slice (pointer into the table, length, capacity).
fn find_module(
    bytes: &[u8],
    ptr_size: usize,
    table_addr: u64,
    funcnametab: u64,
    gofunc_word: usize,
) -> Option<Module> {
    let want = table_addr.to_le_bytes();
    let want = &want[..ptr_size];
    let names = table_addr.checked_add(funcnametab)?;
    let mut at = 0;
    while at + ptr_size <= bytes.len() {
        let word =
            |i: usize| uintptr_at(bytes, at.checked_add(i.checked_mul(ptr_size)?)?, ptr_size);
        if bytes.get(at..at + ptr_size) == Some(want)
            && word(1) == Some(names)
            && word(2).is_some_and(|len| word(3) == Some(len))
        {
            return Some(Module {
                minpc: word(20)?,
                text: word(22)?,
                gofunc: word(gofunc_word)?,
            });
        }
        at += ptr_size;
    }
    None
}

impl GoTable {
    /// The table of an opened Go binary, with its text start and inline trees found
    /// through the module data (the header's text start, or, when neither holds one,
    /// the address of `.text`).
    pub fn from_elf(elf: &ElfFile) -> Result<Self, GoTableError> {
        let section = elf.gopclntab().ok_or(GoTableError::NotGo)?;
        let data = elf
            .section_data(section)
            .map_err(|e| GoTableError::Read(e.to_string()))?;
        let text = elf.section(".text");
        let mut table = Self::parse(data, text.map_or(0, |s| s.addr))?;
        let Some(module) = table.module_of(elf, section) else {
            return Ok(table);
        };
        // The module's text is where entry offsets count from; it is not the `.text`
        // section's start when C code was linked in first (cgo).
        if table.header_text == 0
            && module.text <= module.minpc
            && text.is_some_and(|t| module.text >= t.addr && module.text - t.addr < t.size)
        {
            table.text_start = module.text;
        }
        table.funcdata = table.locate_funcdata(elf, section, module.gofunc);
        if table.has_inline_trees() {
            table.wrapper_id = table.find_wrapper_id();
        }
        Ok(table)
    }

    fn module_of(&self, elf: &ElfFile, table: &SectionHeader) -> Option<Module> {
        let funcnametab = u64::try_from(self.funcnametab).ok()?;
        let mut budget = MAX_MODULE_SCAN;
        MODULE_SECTIONS.iter().find_map(|name| {
            let s = elf.section(name).filter(|s| s.size <= budget)?;
            budget -= s.size;
            let bytes = elf.section_data(s).ok()?;
            find_module(
                &bytes,
                self.ptr_size,
                table.addr,
                funcnametab,
                self.version.gofunc_word(),
            )
        })
    }

    fn locate_funcdata(&self, elf: &ElfFile, table: &SectionHeader, gofunc: u64) -> FuncData {
        if gofunc == 0 {
            return FuncData::None;
        }
        if let Some(off) = gofunc.checked_sub(table.addr)
            && let Ok(off) = usize::try_from(off)
            && off < self.data.len()
        {
            return FuncData::InTable(off);
        }
        let Some(section) = elf.sections.iter().find(|s| {
            s.sh_type != SHT_NOBITS && s.addr != 0 && gofunc >= s.addr && gofunc - s.addr < s.size
        }) else {
            return FuncData::None;
        };
        let skip = gofunc - section.addr;
        let Some(offset) = section.offset.checked_add(skip) else {
            return FuncData::None;
        };
        let rest = SectionHeader {
            offset,
            size: (section.size - skip).min(MAX_FUNCDATA_BYTES),
            ..section.clone()
        };
        // Unreadable: frames are named without the functions inlined into them.
        elf.section_data(&rest)
            .map_or(FuncData::None, FuncData::Own)
    }

    /// Parses a table; `text_fallback` is used when the header's text start is 0.
    /// Inlined frames are not expanded until [`GoTable::set_funcdata_offset`] says where
    /// the inline trees are.
    pub fn parse(data: Vec<u8>, text_fallback: u64) -> Result<Self, GoTableError> {
        let magic = u32_at(&data, 0).ok_or(GoTableError::Malformed("shorter than its header"))?;
        if OLD_MAGICS.contains(&magic) {
            return Err(GoTableError::TooOld);
        }
        let version = match magic {
            GO118_MAGIC => Version::Go118,
            GO120_MAGIC => Version::Go120,
            _ => return Err(GoTableError::Malformed("unknown magic")),
        };
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
            version,
            quantum: u32::from(quantum),
            ptr_size,
            nfunc,
            header_text,
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
            funcdata: FuncData::None,
            wrapper_id: None,
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

    /// Says that the funcdata (`gofunc`) starts `offset` bytes into the table, as it does
    /// from Go 1.22 on; `false` (and nothing changes) when that is past its end.
    pub fn set_funcdata_offset(&mut self, offset: usize) -> bool {
        if offset >= self.data.len() {
            return false;
        }
        self.funcdata = FuncData::InTable(offset);
        self.wrapper_id = self.find_wrapper_id();
        true
    }

    /// Whether inlined frames can be expanded (the inline trees were found).
    pub fn has_inline_trees(&self) -> bool {
        !matches!(self.funcdata, FuncData::None)
    }

    pub fn text_start(&self) -> u64 {
        self.text_start
    }

    /// Bytes of the table held in memory.
    pub fn byte_len(&self) -> usize {
        self.data.len()
            + match &self.funcdata {
                FuncData::Own(bytes) => bytes.len(),
                _ => 0,
            }
    }

    pub fn len(&self) -> usize {
        self.nfunc
    }

    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// `entryoff` of function `i` (`i == nfunc` is the end of the last function).
    fn entry_off(&self, i: usize) -> Option<u32> {
        u32_at(&self.data, self.pcln.checked_add(i.checked_mul(8)?)?)
    }

    fn func_off(&self, i: usize) -> Option<usize> {
        let at = self.pcln.checked_add(i.checked_mul(8)?)?.checked_add(4)?;
        self.pcln.checked_add(u32_at(&self.data, at)? as usize)
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
        self.name_at(self.field(func, 1)?)
    }

    fn name_at(&self, nameoff: u32) -> Option<&str> {
        // nameoff is signed in Go: a negative one names nothing.
        if nameoff > i32::MAX as u32 {
            return None;
        }
        cstring_at(&self.data, self.funcnametab.checked_add(nameoff as usize)?)
    }

    /// The function holding `pc` (a link-time virtual address), with its file and line,
    /// and the functions inlined there, innermost first.
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
        let function = self.name(func)?;
        let mut budget = MAX_PCVALUE_STEPS;
        let lines = self
            .inlined_lines(func, function, entry, pc, &mut budget)
            .unwrap_or_else(|| {
                // No inline tree, or one that cannot be read: the function the code is
                // compiled into, at the pc's own position.
                let mut budget = MAX_PCVALUE_STEPS;
                vec![self.position(func, function, entry, pc, &mut budget)]
            });
        Some(GoFrame { entry, lines })
    }

    /// The file and line of `pc` in the `_func` at `func`, named `function`.
    fn position(
        &self,
        func: usize,
        function: &str,
        entry: u64,
        pc: u64,
        budget: &mut usize,
    ) -> GoLine {
        let line = self
            .field(func, 6)
            .and_then(|t| self.pc_value(t, entry, pc, budget))
            .and_then(|l| u32::try_from(l).ok())
            .filter(|&l| l > 0);
        let file = self.file(func, entry, pc, budget);
        GoLine {
            function: function.to_owned(),
            file,
            line,
        }
    }

    /// Every function at `pc` when the function at `func` has inlined code there;
    /// `None` when it has no inline tree, or one that cannot be read.
    fn inlined_lines(
        &self,
        func: usize,
        function: &str,
        entry: u64,
        pc: u64,
        budget: &mut usize,
    ) -> Option<Vec<GoLine>> {
        let tree = self.inline_tree(func)?;
        let index_table = self.pcdata(func, PCDATA_INL_TREE_INDEX)?;
        let (size, name_at, parent_at, id_at) = self.version.inline_entry();
        let mut lines = Vec::new();
        let mut at = pc;
        for _ in 0..MAX_INLINE_DEPTH {
            // No index (or past the table's end) means outside inlined code, as Go reads it.
            let index = self.pc_value(index_table, entry, at, budget).unwrap_or(-1);
            let Ok(index) = usize::try_from(index) else {
                let id = self.func_id(func)?;
                lines.push((self.position(func, function, entry, at, budget), id));
                return Some(elide_wrappers(lines, self.wrapper_id));
            };
            let record = tree.get(index.checked_mul(size)?..)?.get(..size)?;
            let name = self.name_at(u32_at(record, name_at)?)?;
            lines.push((self.position(func, name, entry, at, budget), record[id_at]));
            // parentPc: the call site, as an offset from the entry of the function's own
            // code (a negative one is not).
            let parent = i32::from_le_bytes(record.get(parent_at..parent_at + 4)?.try_into().ok()?);
            at = entry.checked_add(u64::try_from(parent).ok()?)?;
        }
        None
    }

    /// The funcID of the `_func` at `func`.
    fn func_id(&self, func: usize) -> Option<u8> {
        self.data
            .get(func.checked_add(self.version.func_header() - 4)?)
            .copied()
    }

    /// The funcID wrappers have (it moves between Go versions as ids are added before
    /// it): `runtime.deferreturn`'s, which the linker always marks a wrapper.
    fn find_wrapper_id(&self) -> Option<u8> {
        (0..self.nfunc).find_map(|i| {
            let func = self.func_off(i)?;
            (self.name(func)? == "runtime.deferreturn")
                .then(|| self.func_id(func))
                .flatten()
        })
    }

    /// The inline tree of the `_func` at `func`: the funcdata bytes from its start.
    fn inline_tree(&self, func: usize) -> Option<&[u8]> {
        let bytes: &[u8] = match &self.funcdata {
            FuncData::None => return None,
            FuncData::InTable(off) => self.data.get(*off..)?,
            FuncData::Own(bytes) => bytes,
        };
        let header = self.version.func_header();
        let nfuncdata = usize::from(*self.data.get(func.checked_add(header - 1)?)?);
        if nfuncdata <= FUNCDATA_INL_TREE {
            return None;
        }
        let npcdata = self.field(func, 7)? as usize;
        let slot = func
            .checked_add(header)?
            .checked_add(npcdata.checked_mul(4)?)?
            .checked_add(FUNCDATA_INL_TREE * 4)?;
        let off = u32_at(&self.data, slot)?;
        if off == u32::MAX {
            return None;
        }
        bytes.get(off as usize..)
    }

    /// The pctab offset of pcdata table `n` of the `_func` at `func`.
    fn pcdata(&self, func: usize, n: usize) -> Option<u32> {
        let npcdata = self.field(func, 7)? as usize;
        if n >= npcdata {
            return None;
        }
        let slot = func
            .checked_add(self.version.func_header())?
            .checked_add(n * 4)?;
        u32_at(&self.data, slot).filter(|&t| t != 0)
    }

    fn file(&self, func: usize, entry: u64, pc: u64, budget: &mut usize) -> Option<String> {
        let table = self.field(func, 5)?;
        let index = u32::try_from(self.pc_value(table, entry, pc, budget)?).ok()?;
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

    /// Decodes the pc-value table at `pctab + table` for `target`, spending at most
    /// `budget` steps (taken from it).
    fn pc_value(&self, table: u32, entry: u64, target: u64, budget: &mut usize) -> Option<i32> {
        if table == 0 {
            return None;
        }
        let mut at = self.pctab.checked_add(table as usize)?;
        let mut value: i32 = -1;
        let mut pc = entry;
        let mut first = true;
        while *budget > 0 {
            *budget -= 1;
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

    fn words(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    type InlineTree = Vec<(&'static str, i32)>;

    /// A function of a synthetic table.
    struct Func {
        name: &'static str,
        entry: u32,
        line: Vec<(i32, u32)>,
        file: Vec<(i32, u32)>,
        /// PCDATA_InlTreeIndex runs and the inline tree (name, parentPc), when inlined
        /// code is in it.
        inlined: Option<(Vec<(i32, u32)>, InlineTree)>,
    }

    /// A table at text 0x401000 for `version`, its functions ending at `end`; file index
    /// i is `files[i]`, index `files.len()` is marked absent. Returns the table and the
    /// offset of its funcdata (where `gofunc` points, inside the table as from Go 1.22).
    fn build(version: Version, funcs: &[Func], end: u32, files: &[&str]) -> (Vec<u8>, usize) {
        let mut names = Vec::new();
        let mut name_offs = std::collections::HashMap::new();
        let mut name_off = |name: &'static str, names: &mut Vec<u8>| -> u32 {
            *name_offs.entry(name).or_insert_with(|| {
                let at = names.len() as u32;
                names.extend(name.as_bytes());
                names.push(0);
                at
            })
        };
        for f in funcs {
            name_off(f.name, &mut names);
        }
        let mut filetab = Vec::new();
        let mut cutab = Vec::new();
        for file in files {
            cutab.push(filetab.len() as u32);
            filetab.extend(file.as_bytes());
            filetab.push(0);
        }
        cutab.push(u32::MAX);
        let cutab = words(&cutab);
        let mut pctab = vec![0u8]; // offset 0 means "no table"
        let mut table = |runs: &[(i32, u32)]| {
            let at = pctab.len() as u32;
            pctab.extend(pcvalue(runs));
            at
        };
        let (entry_size, name_at, parent_at, _) = version.inline_entry();
        let mut funcdata = Vec::new();
        let mut records = Vec::new();
        for f in funcs {
            let line = table(&f.line);
            let file = table(&f.file);
            let mut record = words(&[f.entry, name_off(f.name, &mut names), 0, 0, 0, file, line]);
            match &f.inlined {
                None => {
                    record.extend(words(&[0, 0]));
                    if version == Version::Go120 {
                        record.extend(words(&[0]));
                    }
                    record.extend([0, 0, 0, 0]);
                }
                Some((index, tree)) => {
                    let index = table(index);
                    record.extend(words(&[3, 0]));
                    if version == Version::Go120 {
                        record.extend(words(&[0]));
                    }
                    record.extend([0, 0, 0, 4]);
                    record.extend(words(&[0, 0, index]));
                    record.extend(words(&[
                        u32::MAX,
                        u32::MAX,
                        u32::MAX,
                        funcdata.len() as u32,
                    ]));
                    for &(name, parent_pc) in tree {
                        let mut entry = vec![0u8; entry_size];
                        let nameoff = name_off(name, &mut names);
                        entry[name_at..name_at + 4].copy_from_slice(&nameoff.to_le_bytes());
                        entry[parent_at..parent_at + 4].copy_from_slice(&parent_pc.to_le_bytes());
                        funcdata.extend(entry);
                    }
                }
            }
            records.push(record);
        }

        let header_len = 8 + 8 * 8;
        let funcname_off = header_len;
        let cu_off = funcname_off + names.len();
        let filetab_off = cu_off + cutab.len();
        let pctab_off = filetab_off + filetab.len();
        let pcln_off = pctab_off + pctab.len();
        let functab_len = funcs.len() * 8 + 4;
        let mut functab = Vec::new();
        let mut record_at = functab_len;
        for (f, r) in funcs.iter().zip(&records) {
            functab.extend(words(&[f.entry, record_at as u32]));
            record_at += r.len();
        }
        functab.extend(end.to_le_bytes());

        let mut out = Vec::new();
        out.extend(
            match version {
                Version::Go118 => GO118_MAGIC,
                Version::Go120 => GO120_MAGIC,
            }
            .to_le_bytes(),
        );
        out.extend([0, 0, 1, 8]);
        for w in [
            funcs.len() as u64,
            files.len() as u64,
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
        out.extend(filetab);
        out.extend(pctab);
        out.extend(functab);
        for r in records {
            out.extend(r);
        }
        let gofunc = out.len();
        out.extend(funcdata);
        (out, gofunc)
    }

    /// Two functions at text 0x401000: `main.alpha` [0x0, 0x40) lines 10 then 11 from
    /// 0x20, and `main.beta` [0x40, 0x90) whose file the cutab marks absent.
    pub(crate) fn synthetic_table() -> Vec<u8> {
        let funcs = [
            Func {
                name: "main.alpha",
                entry: 0,
                line: vec![(10, 0x20), (11, 0x20)],
                file: vec![(0, 0x40)],
                inlined: None,
            },
            Func {
                name: "main.beta",
                entry: 0x40,
                line: vec![(20, 0x50)],
                file: vec![(1, 0x50)],
                inlined: None,
            },
        ];
        build(Version::Go120, &funcs, 0x90, &["/src/main.go"]).0
    }

    /// `main.outer` [0, 0x60) has `main.mid` inlined, which has `main.inner` inlined:
    ///
    /// ```text
    /// 0x00-0x08 main.go:10  outer
    /// 0x08-0x10 main.go:11  outer, the call to mid (mid's parentPc: 0x08)
    /// 0x10-0x18 main.go:31  mid (index 0)
    /// 0x18-0x20 main.go:32  mid, the call to inner (inner's parentPc: 0x18)
    /// 0x20-0x30 inner.go:41 inner (index 1)
    /// 0x30-0x60 main.go:12  outer
    /// ```
    ///
    /// and `main.plain` [0x60, 0x80) has no inline tree.
    fn inlining_table(version: Version) -> (Vec<u8>, usize) {
        let funcs = [
            Func {
                name: "main.outer",
                entry: 0,
                line: vec![(10, 8), (11, 8), (31, 8), (32, 8), (41, 0x10), (12, 0x30)],
                file: vec![(0, 0x20), (1, 0x10), (0, 0x30)],
                inlined: Some((
                    vec![(-1, 0x10), (0, 0x10), (1, 0x10), (-1, 0x30)],
                    vec![("main.mid", 0x08), ("main.inner", 0x18)],
                )),
            },
            Func {
                name: "main.plain",
                entry: 0x60,
                line: vec![(50, 0x20)],
                file: vec![(0, 0x20)],
                inlined: None,
            },
        ];
        build(version, &funcs, 0x80, &["/src/main.go", "/src/inner.go"])
    }

    fn lines(frame: &GoFrame) -> Vec<(&str, Option<&str>, Option<u32>)> {
        frame
            .lines
            .iter()
            .map(|l| (l.function.as_str(), l.file.as_deref(), l.line))
            .collect()
    }

    #[test]
    fn synthetic_table_resolves_names_files_and_lines() {
        let t = GoTable::parse(synthetic_table(), 0).expect("parses");
        assert_eq!(t.len(), 2);
        assert_eq!(t.text_start(), 0x401000);
        let f: Vec<_> = t.functions().collect();
        assert_eq!(f, vec![(0x401000, "main.alpha"), (0x401040, "main.beta")]);
        let a = t.lookup(0x401000).expect("alpha entry");
        assert_eq!(a.entry, 0x401000);
        assert_eq!(lines(&a), [("main.alpha", Some("/src/main.go"), Some(10))]);
        let line = |pc| t.lookup(pc).and_then(|f| f.lines[0].line);
        assert_eq!(line(0x40101f), Some(10));
        assert_eq!(line(0x401020), Some(11));
        let b = t.lookup(0x40108f).expect("beta end");
        assert_eq!(
            lines(&b),
            [("main.beta", None, Some(20))],
            "cutab marks the file as absent"
        );
        assert_eq!(t.lookup(0x401090), None, "past the last function");
        assert_eq!(t.lookup(0x400fff), None, "before text");
    }

    #[test]
    fn inlined_functions_come_innermost_first_each_at_its_own_position() {
        for version in [Version::Go120, Version::Go118] {
            let (data, gofunc) = inlining_table(version);
            let mut t = GoTable::parse(data, 0).expect("parses");
            // Without the funcdata's place, only the function compiled into.
            assert_eq!(
                lines(&t.lookup(0x401024).expect("outer")),
                [("main.outer", Some("/src/inner.go"), Some(41))]
            );
            assert!(t.set_funcdata_offset(gofunc));
            assert!(t.has_inline_trees());
            let at = |pc| t.lookup(pc).expect("resolves");
            assert_eq!(
                lines(&at(0x401024)),
                [
                    ("main.inner", Some("/src/inner.go"), Some(41)),
                    ("main.mid", Some("/src/main.go"), Some(32)),
                    ("main.outer", Some("/src/main.go"), Some(11)),
                ],
                "{version:?}"
            );
            assert_eq!(at(0x401024).entry, 0x401000);
            assert_eq!(at(0x401024).function(), "main.outer");
            assert_eq!(
                lines(&at(0x401012)),
                [
                    ("main.mid", Some("/src/main.go"), Some(31)),
                    ("main.outer", Some("/src/main.go"), Some(11)),
                ]
            );
            for (pc, line) in [(0x401000, 10), (0x40100f, 11), (0x401030, 12)] {
                assert_eq!(
                    lines(&at(pc)),
                    [("main.outer", Some("/src/main.go"), Some(line))],
                    "{pc:#x}: not inlined code"
                );
            }
            assert_eq!(
                lines(&at(0x401070)),
                [("main.plain", Some("/src/main.go"), Some(50))],
                "a function without an inline tree"
            );
        }
    }

    /// Rewrites inline tree entry `index` of [`inlining_table`] (Go 1.20 layout).
    fn with_entry(index: usize, nameoff: i32, parent_pc: i32) -> GoTable {
        let (mut data, gofunc) = inlining_table(Version::Go120);
        let at = gofunc + index * 16;
        data[at + 4..at + 8].copy_from_slice(&nameoff.to_le_bytes());
        data[at + 8..at + 12].copy_from_slice(&parent_pc.to_le_bytes());
        let mut t = GoTable::parse(data, 0).expect("parses");
        assert!(t.set_funcdata_offset(gofunc));
        t
    }

    #[test]
    fn broken_inline_trees_give_the_function_compiled_into() {
        let outer_only = [("main.outer", Some("/src/inner.go"), Some(41))];
        // inner's call site is inner itself: a loop, cut at MAX_INLINE_DEPTH.
        let looping = with_entry(1, 20, 0x20);
        assert_eq!(
            lines(&looping.lookup(0x401024).expect("resolves")),
            outer_only
        );
        // A name past the table, a negative name, a negative call site.
        for t in [
            with_entry(1, 1 << 30, 0x18),
            with_entry(1, -5, 0x18),
            with_entry(1, 11, -8),
        ] {
            assert_eq!(lines(&t.lookup(0x401024).expect("resolves")), outer_only);
        }
        // A call site outside the function: its position there is whatever the tables
        // say past the end (nothing), but the walk still ends.
        let far = with_entry(0, 22, 0x7fff_0000);
        let frame = far.lookup(0x401012).expect("resolves");
        assert_eq!(
            lines(&frame),
            [
                ("main.mid", Some("/src/main.go"), Some(31)),
                ("main.outer", None, None)
            ]
        );

        // An index past the tree's end, and a funcdata offset past the table.
        let (data, gofunc) = inlining_table(Version::Go120);
        let mut t = GoTable::parse(data.clone(), 0).expect("parses");
        assert!(!t.set_funcdata_offset(data.len()));
        assert!(!t.has_inline_trees());
        assert!(t.set_funcdata_offset(data.len() - 16));
        assert_eq!(
            lines(&t.lookup(0x401024).expect("resolves")),
            outer_only,
            "index 1 is past the tree's end"
        );
        // A huge npcdata puts the funcdata slots past the table.
        let mut huge = data;
        let func = GoTable::parse(huge.clone(), 0)
            .expect("parses")
            .func_off(0)
            .expect("outer");
        huge[func + 28..func + 32].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut t = GoTable::parse(huge, 0).expect("parses");
        assert!(t.set_funcdata_offset(gofunc));
        assert_eq!(
            t.lookup(0x401024).map(|f| f.lines.len()),
            Some(1),
            "no readable pcdata or funcdata"
        );
    }

    #[test]
    fn every_cut_of_an_inlining_table_is_refused_or_read_without_panic() {
        let (data, gofunc) = inlining_table(Version::Go120);
        for len in 0..data.len() {
            if let Ok(mut t) = GoTable::parse(data[..len].to_vec(), 0) {
                t.set_funcdata_offset(gofunc);
                for pc in (0x401000..0x401090).step_by(4) {
                    if let Some(f) = t.lookup(pc) {
                        assert!(!f.lines.is_empty() && f.lines.len() <= MAX_INLINE_DEPTH + 1);
                    }
                }
            }
        }
    }

    #[test]
    fn the_module_data_is_found_by_its_first_words() {
        let table_addr = 0x4d99a8u64;
        let mut words = vec![0u64; 48];
        words[0] = table_addr;
        words[1] = table_addr + 0x48;
        words[2] = 0x14510;
        words[3] = 0x14510;
        words[20] = 0x401000;
        words[22] = 0x401000;
        words[40] = 0x55e8d8;
        let module: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // Behind other data, as inside .noptrdata.
        let mut section = vec![0xa8u8; 24];
        section.extend(table_addr.to_le_bytes()); // the address alone is not enough
        section.extend(0u64.to_le_bytes());
        section.extend(&module);
        assert_eq!(
            find_module(&section, 8, table_addr, 0x48, 40),
            Some(Module {
                minpc: 0x401000,
                text: 0x401000,
                gofunc: 0x55e8d8
            })
        );
        assert_eq!(
            find_module(&section, 8, table_addr, 0x48, 38).map(|m| m.gofunc),
            Some(0),
            "Go 1.18's word 38"
        );
        assert_eq!(find_module(&section, 8, table_addr, 0x50, 40), None);
        // Cut inside it: not enough words.
        assert_eq!(
            find_module(&section[..24 + 16 + 8 * 30], 8, table_addr, 0x48, 40),
            None
        );
    }

    /// A section of [`tiny_elf`]: name, address, bytes.
    type Section<'a> = (&'a str, u64, &'a [u8]);

    /// An ELF64 file of `sections` (PROGBITS each, in file order after the header), with
    /// no program headers.
    fn tiny_elf(sections: &[Section<'_>]) -> Vec<u8> {
        let mut names = b"\0.shstrtab\0".to_vec();
        let mut f = vec![0u8; 64];
        let mut headers = vec![[0u64; 8]];
        let strtab_name = 1u64;
        for (name, addr, bytes) in sections {
            let name_at = names.len() as u64;
            names.extend(name.as_bytes());
            names.push(0);
            while !f.len().is_multiple_of(8) {
                f.push(0);
            }
            headers.push([
                name_at | (1 << 32),
                0,
                *addr,
                f.len() as u64,
                bytes.len() as u64,
                0,
                8,
                0,
            ]);
            f.extend(*bytes);
        }
        headers.push([
            strtab_name | (3 << 32),
            0,
            0,
            f.len() as u64,
            names.len() as u64,
            0,
            1,
            0,
        ]);
        f.extend(&names);
        while !f.len().is_multiple_of(8) {
            f.push(0);
        }
        let shoff = f.len() as u64;
        for h in &headers {
            for w in h {
                f.extend(w.to_le_bytes());
            }
        }
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        f[40..48].copy_from_slice(&shoff.to_le_bytes());
        f[58..60].copy_from_slice(&64u16.to_le_bytes());
        f[60..62].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        f[62..64].copy_from_slice(&(headers.len() as u16 - 1).to_le_bytes());
        f
    }

    /// Module data words for a table at `table_addr`, as the Go 1.20+ linker writes them.
    fn module_words(table_addr: u64, text: u64, gofunc: u64) -> Vec<u8> {
        let mut words = vec![0u64; 48];
        words[0] = table_addr;
        words[1] = table_addr + 72; // the synthetic tables' names follow their header
        words[2] = 0x40;
        words[3] = 0x40;
        words[20] = text;
        words[22] = text;
        words[40] = gofunc;
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// [`inlining_table`] with the header's text start 0, as Go 1.26 writes it, at
    /// 0x4d0000, in an ELF whose `.text` starts 0x100 before Go's text (C code first,
    /// as a cgo binary has it): the module data says where Go's text starts and where
    /// the inline trees are, from its own section (Go 1.26), from inside `.noptrdata`
    /// (before), and with the trees in `.rodata` (before Go 1.22).
    fn module_data_elves() -> Vec<(&'static str, Vec<u8>)> {
        let (mut table, gofunc) = inlining_table(Version::Go120);
        table[8 + 16..8 + 24].copy_from_slice(&0u64.to_le_bytes());
        let text = vec![0xccu8; 0x200];
        let table_addr = 0x4d_0000;
        let in_table = module_words(table_addr, 0x401000, table_addr + gofunc as u64);
        let mut noptrdata = vec![0x11u8; 40];
        noptrdata.extend(&in_table);
        let trees = table[gofunc..].to_vec();
        let in_rodata = module_words(table_addr, 0x401000, 0x4a_0010);
        let mut rodata = vec![0u8; 0x10];
        rodata.extend(&trees);
        vec![
            (
                "go.module",
                tiny_elf(&[
                    (".text", 0x400f00, &text),
                    (".gopclntab", table_addr, &table),
                    (".go.module", 0x58_0000, &in_table),
                ]),
            ),
            (
                "noptrdata",
                tiny_elf(&[
                    (".text", 0x400f00, &text),
                    (".gopclntab", table_addr, &table),
                    (".noptrdata", 0x58_0000, &noptrdata),
                ]),
            ),
            (
                "rodata",
                tiny_elf(&[
                    (".text", 0x400f00, &text),
                    (".rodata", 0x4a_0000, &rodata),
                    (".gopclntab", table_addr, &table[..gofunc]),
                    (".go.module", 0x58_0000, &in_rodata),
                ]),
            ),
        ]
    }

    #[test]
    fn the_module_data_gives_the_text_start_and_the_inline_trees() {
        for (name, bytes) in module_data_elves() {
            let elf = ElfFile::from_bytes(bytes).expect("elf");
            let t = GoTable::from_elf(&elf).expect("table");
            assert_eq!(t.text_start(), 0x401000, "{name}: not .text's 0x400f00");
            assert!(t.has_inline_trees(), "{name}");
            assert_eq!(
                lines(&t.lookup(0x401024).expect("resolves")),
                [
                    ("main.inner", Some("/src/inner.go"), Some(41)),
                    ("main.mid", Some("/src/main.go"), Some(32)),
                    ("main.outer", Some("/src/main.go"), Some(11)),
                ],
                "{name}"
            );
        }
        // No module data: `.text`'s start, and no inlined functions.
        let (mut table, _) = inlining_table(Version::Go120);
        table[8 + 16..8 + 24].copy_from_slice(&0u64.to_le_bytes());
        let text = vec![0xccu8; 0x200];
        let bare = tiny_elf(&[
            (".text", 0x401000, &text),
            (".gopclntab", 0x4d_0000, &table),
        ]);
        let t = GoTable::from_elf(&ElfFile::from_bytes(bare).expect("elf")).expect("table");
        assert_eq!(t.text_start(), 0x401000);
        assert!(!t.has_inline_trees());
        assert_eq!(t.lookup(0x401024).map(|f| f.lines.len()), Some(1));
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
            parsed.lookup(0x401000).map(|f| f.function().to_owned()),
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
            version: Version::Go120,
            quantum: 1,
            ptr_size: 8,
            nfunc: 0,
            header_text: 0,
            text_start: 0,
            funcnametab: 0,
            cutab: 0,
            filetab: 0,
            pctab: 0,
            pcln: 0,
            funcdata: FuncData::None,
            wrapper_id: None,
        };
        let mut budget = MAX_PCVALUE_STEPS;
        assert_eq!(g.pc_value(1, 0, 10, &mut budget), None);
        assert_eq!(budget, 0, "the whole budget went");
        let mut short = vec![0u8, 2, 0, 2, 0, 2, 100];
        short.push(0);
        let g = GoTable { data: short, ..g };
        let mut budget = MAX_PCVALUE_STEPS;
        assert_eq!(
            g.pc_value(1, 0, 10, &mut budget),
            Some(2),
            "a short table still resolves"
        );
        assert_eq!(budget, MAX_PCVALUE_STEPS - 3);
        assert_eq!(g.pc_value(1, 0, 10, &mut 2), None, "but not on 2 steps");
    }

    #[test]
    fn zero_text_start_falls_back_to_the_text_section() {
        let mut t = synthetic_table();
        t[8 + 16..8 + 24].copy_from_slice(&0u64.to_le_bytes());
        let t = GoTable::parse(t, 0x500000).expect("parses");
        assert_eq!(
            t.lookup(0x500041).map(|f| f.function().to_owned()),
            Some("main.beta".into())
        );
    }

    /// A name as Go's runtime prints it: a generic instantiation's type list as `[...]`.
    fn for_print(name: &str) -> String {
        match (name.find('['), name.rfind(']')) {
            (Some(i), Some(j)) if j > i => format!("{}[...]{}", &name[..i], &name[j + 1..]),
            _ => name.to_owned(),
        }
    }

    /// What `go tool addr2line` (debug/gosym, another reader than the runtime's) says of
    /// each pc: the function compiled into, and the innermost file and line.
    fn addr2line(binary: &std::path::Path, pcs: &[u64]) -> Vec<(String, String, u32)> {
        use std::io::Write;
        let mut child = std::process::Command::new("go")
            .args(["tool", "addr2line"])
            .arg(binary)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("go tool addr2line");
        let ask: String = pcs.iter().map(|pc| format!("{pc:#x}\n")).collect();
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || stdin.write_all(ask.as_bytes()));
        let out = child.wait_with_output().expect("addr2line ran");
        writer.join().expect("writer").expect("written");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        lines
            .chunks(2)
            .map(|l| {
                let (file, line) = l[1].rsplit_once(':').expect("file:line");
                (l[0].to_owned(), file.to_owned(), line.parse().unwrap_or(0))
            })
            .collect()
    }

    /// `testdata/goinline` built stripped three ways (Go's linker, PIE, cgo through the
    /// system linker), and every pc of its `main.*` functions and every 16th byte of the
    /// rest looked up here and by Go's own `runtime.CallersFrames` inside the running
    /// program: the same functions, inlined ones included, each at the same file and
    /// line. Its hot function's inlined code also matches `go tool addr2line`.
    #[test]
    fn inlined_frames_match_the_go_runtime_on_stripped_binaries() {
        use crate::testutil::{GoBuild, go_inline_program};
        for build in [GoBuild::Static, GoBuild::Pie, GoBuild::Cgo] {
            let Some(program) = go_inline_program(build) else {
                continue;
            };
            let elf = ElfFile::open(&program.binary).expect("elf");
            assert!(elf.section(".symtab").is_none(), "stripped");
            let table = GoTable::from_elf(&elf).expect("table");
            assert!(table.has_inline_trees(), "{build:?}: inline trees found");
            let mut oracle = program.oracle();
            let bias = oracle.load_bias(&program.binary);
            let funcs: Vec<(u64, &str)> = table.functions().collect();
            let mut pcs = Vec::new();
            for (i, &(entry, name)) in funcs.iter().enumerate() {
                // The oracle stops at the sentinel; and it is given pc + 1, which must
                // stay in the function (the last byte is padding anyway).
                let end = funcs.get(i + 1).map_or(entry, |f| f.0.saturating_sub(1));
                let step = if name.starts_with("main.") { 1 } else { 16 };
                if name != "main.profcolSentinel" {
                    pcs.extend((entry..end).step_by(step));
                }
            }
            // Go 1.26's CallersFrames expands a lone pc's inlined callers; Go 1.21's
            // gives the innermost function only, and then only that is compared.
            let expands = oracle.frames(&[oracle.probe - 1])[0].len() > 1;
            let relocated: Vec<u64> = pcs.iter().map(|pc| pc + bias).collect();
            let answers = oracle.frames(&relocated);
            let (mut inlined, mut mismatches) = (0usize, Vec::new());
            for (&pc, want) in pcs.iter().zip(&answers) {
                let got: Vec<(String, String, u32)> = table
                    .lookup(pc)
                    .map(|f| f.lines)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|l| {
                        let file = l.file.unwrap_or_else(|| "?".into());
                        (for_print(&l.function), file, l.line.unwrap_or(0))
                    })
                    .collect();
                // Go's runtime names nothing at name offset 0 (the first function).
                let compared = if expands { got.len() } else { 1 };
                let same = got.len().min(compared) == want.len()
                    && got
                        .iter()
                        .zip(want)
                        .all(|(g, w)| (w.0.is_empty() || g.0 == w.0) && g.1 == w.1 && g.2 == w.2);
                if !same {
                    mismatches.push(format!("{pc:#x}: ours {got:?}, Go's {want:?}"));
                }
                inlined += usize::from(got.len() > 1);
            }
            assert!(
                mismatches.is_empty(),
                "{build:?}: {} of {} pcs differ, first: {:#?}",
                mismatches.len(),
                pcs.len(),
                &mismatches[..mismatches.len().min(10)]
            );
            assert!(inlined > 1000, "{build:?}: {inlined} pcs in inlined code");
            eprintln!(
                "{build:?}: {} pcs match Go's runtime ({}), {inlined} of them in inlined code",
                pcs.len(),
                if expands {
                    "every function"
                } else {
                    "innermost function: this Go's CallersFrames expands no more"
                }
            );

            let main_go = program.main_go();
            let at =
                |name: &str, line: &str| (name.to_owned(), main_go.clone(), program.line(line));
            let probe = table.lookup(oracle.probe - bias - 1).expect("probe");
            let probe: Vec<_> = probe
                .lines
                .into_iter()
                .map(|l| (l.function, l.file.unwrap_or_default(), l.line.unwrap_or(0)))
                .collect();
            assert_eq!(
                probe,
                [
                    at("main.probeInner", "probe-inner"),
                    at("main.probeMid", "probe-mid"),
                    at("main.profcolProbe", "probe"),
                ]
            );

            // The hot function: mix and rotl inlined into it, at their own lines.
            let (entry, end) = funcs
                .iter()
                .position(|f| f.1 == "main.profcolHot")
                .map(|i| (funcs[i].0, funcs[i + 1].0))
                .expect("profcolHot");
            let hot: Vec<u64> = (entry..end).collect();
            let mut shapes = std::collections::BTreeMap::<Vec<String>, usize>::new();
            for &pc in &hot {
                let f = table.lookup(pc).expect("in profcolHot");
                assert_eq!(f.function(), "main.profcolHot");
                let names = f.lines.iter().map(|l| l.function.clone()).collect();
                *shapes.entry(names).or_default() += 1;
                let call = &f.lines[f.lines.len() - 1];
                if f.lines.len() > 1 {
                    assert_eq!(call.line, Some(program.line("hot-mix")), "{f:?}");
                    assert_eq!(f.lines[f.lines.len() - 2].function, "main.mix");
                }
                if f.lines.len() == 3 {
                    assert_eq!(f.lines[0].function, "main.rotl");
                    assert_eq!(f.lines[0].line, Some(program.line("rotl")));
                    let site = f.lines[1].line;
                    assert!(
                        site == Some(program.line("mix-rotl13"))
                            || site == Some(program.line("mix-rotl29")),
                        "{f:?}"
                    );
                }
            }
            let rotl = [
                "main.rotl".to_owned(),
                "main.mix".into(),
                "main.profcolHot".into(),
            ];
            assert!(
                shapes.get(rotl.as_slice()).is_some_and(|&n| n > 0),
                "{shapes:?}"
            );
            eprintln!("{build:?}: bytes of profcolHot by inlined functions: {shapes:?}");
            let text = elf.section(".text").expect(".text").addr;
            if build == GoBuild::Cgo {
                // The system linker put C code first: Go's text starts past `.text`, and
                // only the module data says where (Go 1.26 leaves the header's 0).
                // debug/gosym takes `.text`'s start there, so addr2line is no judge.
                assert!(table.text_start() > text, "{:#x}", table.text_start());
                continue;
            }
            assert_eq!(table.text_start(), text);
            // debug/gosym agrees on the innermost position and the function compiled into.
            for (&pc, (function, file, line)) in hot.iter().zip(addr2line(&program.binary, &hot)) {
                let f = table.lookup(pc).expect("in profcolHot");
                assert_eq!(function, f.function(), "{pc:#x}");
                // Both know nothing of the padding after the code: "" and 0 there.
                assert_eq!(file, f.lines[0].file.as_deref().unwrap_or(""), "{pc:#x}");
                assert_eq!(line, f.lines[0].line.unwrap_or(0), "{pc:#x}");
            }
        }
    }

    /// A real Go binary, stripped with `-ldflags='-s -w'`, built here with the host's `go`.
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
        assert_eq!(frame.function(), crate::testutil::GO_MARKER);
        assert_eq!(frame.entry, marker);
        let line = frame.lines.last().expect("a line");
        assert!(
            line.file.as_deref().is_some_and(|f| f.ends_with("main.go")),
            "{frame:?}"
        );
        // Somewhere in the function's body (the leaf has no prologue at its entry).
        let body = program.marker_line..program.marker_line + 7;
        assert!(line.line.is_some_and(|l| body.contains(&l)), "{frame:?}");
        // The running program reports its function's address: the same as the table's.
        let running = program.start();
        assert_eq!(running.marker_pc, marker);
    }
}
