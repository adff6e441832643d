//! A small reader of 64-bit little-endian ELF files: program headers, section headers and
//! notes, read with positioned reads so that a large binary is never loaded whole.
//!
//! It gives what process tracking and symbolization need: the GNU build id
//! (`NT_GNU_BUILD_ID` in `.note.gnu.build-id`), the Go build id, whether the file is a Go
//! binary, a section's bytes (`.gopclntab`), and file offset → virtual address.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// `PT_LOAD`: a segment mapped into memory.
const PT_LOAD: u32 = 1;
/// `PT_NOTE`: a segment of notes.
const PT_NOTE: u32 = 4;
/// `SHT_NOTE`: a section of notes (used when no `PT_NOTE` segment is present).
const SHT_NOTE: u32 = 7;
/// `SHT_NOBITS`: a section with no bytes in the file (`.bss`).
const SHT_NOBITS: u32 = 8;
/// `NT_GNU_BUILD_ID`, under the note name `GNU`.
pub const NT_GNU_BUILD_ID: u32 = 3;
/// The Go linker's build id note type, under the note name `Go`.
pub const NT_GO_BUILD_ID: u32 = 4;

/// Caps on what one file can make this reader do. A file's owner controls every count
/// and size in it, and this process may be root: every range is checked against the
/// file's size (from `fstat`) before anything is allocated or read, and past these caps
/// the file is refused as malformed (real binaries are far below them).
///
/// Program headers at most (a binary has about 10-15).
pub const MAX_PROGRAM_HEADERS: u64 = 1024;
/// Section headers at most (binaries have about 30-40; `-ffunction-sections` objects
/// linked with `--emit-relocs` a few thousand).
pub const MAX_SECTIONS: u64 = 1 << 16;
/// Largest entry size accepted for program and section headers (ELF64 uses 56 and 64).
const MAX_ENTRY_SIZE: u64 = 256;
/// Bytes of one section name at most.
const MAX_SECTION_NAME: usize = 256;
/// The section name table, at most.
pub const MAX_SECTION_NAMES_SIZE: u64 = 1 << 20;
/// Note bytes read per file at most, all note segments together (a build id note is a
/// few dozen bytes).
pub const MAX_NOTES_SIZE: u64 = 1 << 20;
/// Notes kept per file at most.
pub const MAX_NOTES: usize = 256;
/// Sections larger than this are not read (a big Go binary's `.gopclntab` is tens of MiB).
pub const MAX_SECTION_SIZE: u64 = 256 << 20;

#[derive(Debug)]
pub enum ElfError {
    Io(io::Error),
    /// Not an ELF file, or one this reader does not handle (32-bit, big-endian).
    Unsupported(&'static str),
    /// An ELF file whose headers point outside of it, contradict each other or pass a
    /// cap: a file made to mislead, or broken.
    Malformed(&'static str),
}

impl ElfError {
    /// Whether the file is malformed (counted as a bad file), rather than unreadable or
    /// simply not ELF64 LE.
    pub fn is_malformed(&self) -> bool {
        matches!(self, ElfError::Malformed(_))
    }
}

impl std::fmt::Display for ElfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ElfError::Io(e) => write!(f, "{e}"),
            ElfError::Unsupported(what) => write!(f, "unsupported file: {what}"),
            ElfError::Malformed(what) => write!(f, "malformed ELF: {what}"),
        }
    }
}

impl std::error::Error for ElfError {}

impl From<io::Error> for ElfError {
    fn from(e: io::Error) -> Self {
        ElfError::Io(e)
    }
}

/// Where the bytes come from: a file (read in pieces) or memory (the vDSO image).
#[derive(Debug)]
enum Data {
    /// A file and its size when opened: nothing past it is read.
    File(File, u64),
    Bytes(Vec<u8>),
}

impl Data {
    fn size(&self) -> u64 {
        match self {
            Data::File(_, size) => *size,
            Data::Bytes(b) => b.len() as u64,
        }
    }

    fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, ElfError> {
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(ElfError::Malformed("range lies outside the file"));
        }
        let len = usize::try_from(len).map_err(|_| ElfError::Malformed("size overflows"))?;
        match self {
            Data::File(f, _) => {
                let mut buf = vec![0; len];
                f.read_exact_at(&mut buf, offset)?;
                Ok(buf)
            }
            Data::Bytes(b) => {
                let start =
                    usize::try_from(offset).map_err(|_| ElfError::Malformed("offset overflows"))?;
                start
                    .checked_add(len)
                    .and_then(|end| b.get(start..end))
                    .map(<[u8]>::to_vec)
                    .ok_or(ElfError::Malformed("range lies outside the image"))
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHeader {
    pub p_type: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionHeader {
    pub name: String,
    pub sh_type: u32,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
}

/// One ELF note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub name: Vec<u8>,
    pub n_type: u32,
    pub desc: Vec<u8>,
}

/// An opened ELF64 LE file with its headers parsed.
#[derive(Debug)]
pub struct ElfFile {
    data: Data,
    pub e_type: u16,
    pub machine: u16,
    pub program_headers: Vec<ProgramHeader>,
    pub sections: Vec<SectionHeader>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| {
        u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
    })
}

impl ElfFile {
    /// An opened file, `size` bytes long (its `fstat` size when opened): no read goes
    /// past it. Open files of other users with `safe_file::VerifiedFile`, which checks
    /// what it opens.
    pub fn from_file(file: File, size: u64) -> Result<Self, ElfError> {
        Self::parse(Data::File(file, size))
    }

    /// A file of this process's own (tests): opened plainly, so never for a path that
    /// someone else controls.
    #[cfg(test)]
    pub fn open(path: &std::path::Path) -> Result<Self, ElfError> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(ElfError::Unsupported("not a regular file"));
        }
        Self::from_file(file, meta.len())
    }

    /// An ELF image held in memory (the vDSO read out of a process).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, ElfError> {
        Self::parse(Data::Bytes(bytes))
    }

    fn parse(data: Data) -> Result<Self, ElfError> {
        let header = data
            .read_at(0, 64)
            .map_err(|_| ElfError::Unsupported("shorter than an ELF header"))?;
        if header[..4] != *b"\x7fELF" {
            return Err(ElfError::Unsupported("not an ELF file"));
        }
        if header[4] != 2 {
            return Err(ElfError::Unsupported("not a 64-bit ELF file"));
        }
        if header[5] != 1 {
            return Err(ElfError::Unsupported("not a little-endian ELF file"));
        }
        let e_type = u16_at(&header, 16);
        let machine = u16_at(&header, 18);
        let phoff = u64_at(&header, 32);
        let shoff = u64_at(&header, 40);
        let phentsize = u64::from(u16_at(&header, 54));
        let phnum = u64::from(u16_at(&header, 56));
        let shentsize = u64::from(u16_at(&header, 58));
        let mut shnum = u64::from(u16_at(&header, 60));
        let mut shstrndx = u64::from(u16_at(&header, 62));

        let mut program_headers = Vec::new();
        if phnum > 0 {
            if !(56..=MAX_ENTRY_SIZE).contains(&phentsize) {
                return Err(ElfError::Malformed("bad program header entry size"));
            }
            if phnum > MAX_PROGRAM_HEADERS {
                return Err(ElfError::Malformed("too many program headers"));
            }
            let table = data.read_at(phoff, phentsize * phnum)?;
            for i in 0..phnum {
                let at = usize::try_from(i * phentsize)
                    .map_err(|_| ElfError::Malformed("program header table too large"))?;
                program_headers.push(ProgramHeader {
                    p_type: u32_at(&table, at),
                    flags: u32_at(&table, at + 4),
                    offset: u64_at(&table, at + 8),
                    vaddr: u64_at(&table, at + 16),
                    filesz: u64_at(&table, at + 32),
                    memsz: u64_at(&table, at + 40),
                    align: u64_at(&table, at + 48),
                });
            }
        }

        let mut sections = Vec::new();
        if shoff != 0 {
            if !(64..=MAX_ENTRY_SIZE).contains(&shentsize) {
                return Err(ElfError::Malformed("bad section header entry size"));
            }
            // More than 0xff00 sections: the real count and string table index live in
            // section 0.
            if shnum == 0 || shstrndx == 0xffff {
                let first = data.read_at(shoff, 64)?;
                if shnum == 0 {
                    shnum = u64_at(&first, 32);
                }
                if shstrndx == 0xffff {
                    shstrndx = u64::from(u32_at(&first, 40));
                }
            }
            if shnum > MAX_SECTIONS {
                return Err(ElfError::Malformed("too many sections"));
            }
            let table = data.read_at(shoff, shentsize * shnum)?;
            let mut raw = Vec::new();
            for i in 0..shnum {
                let at = usize::try_from(i * shentsize)
                    .map_err(|_| ElfError::Malformed("section header table too large"))?;
                raw.push((
                    u32_at(&table, at),
                    SectionHeader {
                        name: String::new(),
                        sh_type: u32_at(&table, at + 4),
                        addr: u64_at(&table, at + 16),
                        offset: u64_at(&table, at + 24),
                        size: u64_at(&table, at + 32),
                        align: u64_at(&table, at + 48),
                    },
                ));
            }
            let names = usize::try_from(shstrndx)
                .ok()
                .and_then(|i| raw.get(i))
                .filter(|(_, s)| s.sh_type != SHT_NOBITS)
                .map(|(_, s)| {
                    if s.size > MAX_SECTION_NAMES_SIZE {
                        return Err(ElfError::Malformed("section name table too large"));
                    }
                    data.read_at(s.offset, s.size)
                })
                .transpose()?
                .unwrap_or_default();
            for (name_off, mut s) in raw {
                s.name = usize::try_from(name_off)
                    .ok()
                    .and_then(|o| names.get(o..))
                    .map(|rest| {
                        // Names are short; a name with no end within the cap is cut there
                        // (and matches no name this reader looks for).
                        let rest = &rest[..rest.len().min(MAX_SECTION_NAME)];
                        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                        String::from_utf8_lossy(&rest[..end]).into_owned()
                    })
                    .unwrap_or_default();
                sections.push(s);
            }
        }

        Ok(ElfFile {
            data,
            e_type,
            machine,
            program_headers,
            sections,
        })
    }

    pub fn section(&self, name: &str) -> Option<&SectionHeader> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The bytes of a section as stored in the file.
    pub fn section_data(&self, section: &SectionHeader) -> Result<Vec<u8>, ElfError> {
        if section.sh_type == SHT_NOBITS {
            return Ok(Vec::new());
        }
        if section.size > MAX_SECTION_SIZE {
            return Err(ElfError::Unsupported("section too large"));
        }
        self.data.read_at(section.offset, section.size)
    }

    /// Every note, from the `PT_NOTE` segments, or from `SHT_NOTE` sections when the file
    /// has no note segment (as a separate debug file may not). At most
    /// [`MAX_NOTES_SIZE`] bytes are read and [`MAX_NOTES`] notes kept, all areas
    /// together; an area that lies outside the file is skipped.
    pub fn notes(&self) -> Vec<Note> {
        let mut notes = Vec::new();
        let segments: Vec<(u64, u64, u64)> = self
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_NOTE)
            .map(|p| (p.offset, p.filesz, p.align))
            .collect();
        let areas = if segments.is_empty() {
            self.sections
                .iter()
                .filter(|s| s.sh_type == SHT_NOTE)
                .map(|s| (s.offset, s.size, s.align))
                .collect()
        } else {
            segments
        };
        let mut budget = MAX_NOTES_SIZE;
        for (offset, size, align) in areas {
            if size == 0 {
                continue;
            }
            if size > budget || notes.len() >= MAX_NOTES {
                break;
            }
            budget -= size;
            if let Ok(bytes) = self.data.read_at(offset, size) {
                parse_notes(&bytes, if align == 8 { 8 } else { 4 }, &mut notes);
            }
        }
        notes.truncate(MAX_NOTES);
        notes
    }

    /// The GNU build id (`NT_GNU_BUILD_ID`, usually 20 bytes of SHA-1).
    pub fn gnu_build_id(&self) -> Option<Vec<u8>> {
        gnu_build_id(&self.notes())
    }

    /// The Go build id note (`NT_GO_BUILD_ID` under `Go`), as text.
    pub fn go_build_id(&self) -> Option<String> {
        go_build_id(&self.notes())
    }

    /// Both build ids, from one read of the notes.
    pub fn build_ids(&self) -> (Option<Vec<u8>>, Option<String>) {
        let notes = self.notes();
        (gnu_build_id(&notes), go_build_id(&notes))
    }

    /// The section holding Go's function table, if this is a Go binary.
    pub fn gopclntab(&self) -> Option<&SectionHeader> {
        self.section(".gopclntab")
            .or_else(|| self.section(".data.rel.ro.gopclntab"))
    }

    /// The virtual address that a file offset is loaded at, from the `PT_LOAD` segment
    /// holding it.
    pub fn file_offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        file_offset_to_vaddr(&self.program_headers, offset)
    }

    /// `len` bytes stored in the file at virtual address `vaddr` (within one `PT_LOAD`
    /// segment's file bytes).
    pub fn read_vaddr(&self, vaddr: u64, len: u64) -> Result<Vec<u8>, ElfError> {
        let segment = self
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .find(|p| vaddr >= p.vaddr && vaddr - p.vaddr < p.filesz)
            .ok_or(ElfError::Malformed("address outside the file's segments"))?;
        let within = vaddr - segment.vaddr;
        if within
            .checked_add(len)
            .is_none_or(|end| end > segment.filesz)
        {
            return Err(ElfError::Malformed("range runs past its segment"));
        }
        let offset = segment
            .offset
            .checked_add(within)
            .ok_or(ElfError::Malformed("segment offset overflows"))?;
        self.data.read_at(offset, len)
    }

    /// The defined symbols of `.dynsym` named in `names` (value, size), by name. The
    /// table is read in one piece, within [`MAX_SECTION_SIZE`].
    pub fn dynamic_symbols(&self, names: &[&str]) -> Result<Vec<(String, u64, u64)>, ElfError> {
        let Some(symtab) = self.section(".dynsym") else {
            return Ok(Vec::new());
        };
        let strtab = self
            .section(".dynstr")
            .ok_or(ElfError::Malformed(".dynsym without .dynstr"))?;
        let (symbols, strings) = (self.section_data(symtab)?, self.section_data(strtab)?);
        let mut found = Vec::new();
        for entry in symbols.chunks_exact(24) {
            let (name_at, shndx) = (u32_at(entry, 0) as usize, u16_at(entry, 6));
            if shndx == 0 {
                continue;
            }
            let Some(tail) = strings.get(name_at..) else {
                continue;
            };
            // Compared in place, not measured first: a string table with no NUL would
            // make every symbol scan it to its end.
            let is = |n: &str| {
                tail.get(..n.len()) == Some(n.as_bytes()) && tail.get(n.len()) == Some(&0)
            };
            if let Some(wanted) = names.iter().find(|n| is(n)) {
                found.push(((*wanted).to_owned(), u64_at(entry, 8), u64_at(entry, 16)));
            }
        }
        Ok(found)
    }

    /// The file offset that a virtual address is loaded from.
    pub fn vaddr_to_file_offset(&self, vaddr: u64) -> Option<u64> {
        self.program_headers
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .find(|p| vaddr >= p.vaddr && vaddr - p.vaddr < p.filesz)
            .and_then(|p| (vaddr - p.vaddr).checked_add(p.offset))
    }
}

/// The virtual address that a file offset is loaded at, from the `PT_LOAD` segment
/// holding it.
pub fn file_offset_to_vaddr(program_headers: &[ProgramHeader], offset: u64) -> Option<u64> {
    program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .find(|p| offset >= p.offset && offset - p.offset < p.filesz)
        .and_then(|p| (offset - p.offset).checked_add(p.vaddr))
}

/// The GNU build id among `notes`.
pub fn gnu_build_id(notes: &[Note]) -> Option<Vec<u8>> {
    notes
        .iter()
        .find(|n| n.name == b"GNU" && n.n_type == NT_GNU_BUILD_ID && !n.desc.is_empty())
        .map(|n| n.desc.clone())
}

/// The Go build id among `notes`, as text.
pub fn go_build_id(notes: &[Note]) -> Option<String> {
    notes
        .iter()
        .find(|n| n.name == b"Go" && n.n_type == NT_GO_BUILD_ID)
        .map(|n| String::from_utf8_lossy(&n.desc).into_owned())
        .filter(|s| !s.is_empty())
}

/// Parses a run of notes (`/sys/kernel/notes` is one, with no ELF around it). Names are
/// given without their terminating NUL.
pub fn parse_notes(bytes: &[u8], align: usize, out: &mut Vec<Note>) {
    let align = align.max(1);
    let pad = |n: usize| n.div_ceil(align) * align;
    let mut at = 0usize;
    while at + 12 <= bytes.len() && out.len() < MAX_NOTES {
        let namesz = u32_at(bytes, at) as usize;
        let descsz = u32_at(bytes, at + 4) as usize;
        let n_type = u32_at(bytes, at + 8);
        let name_start = at + 12;
        let Some(desc_start) = name_start.checked_add(pad(namesz)) else {
            return;
        };
        let Some(desc_end) = desc_start.checked_add(descsz) else {
            return;
        };
        let (Some(name), Some(desc)) = (
            name_start
                .checked_add(namesz)
                .and_then(|end| bytes.get(name_start..end)),
            bytes.get(desc_start..desc_end),
        ) else {
            return;
        };
        let name_len = name.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let name = &name[..name_len];
        out.push(Note {
            name: name.to_vec(),
            n_type,
            desc: desc.to_vec(),
        });
        let Some(next) = desc_start.checked_add(pad(descsz)) else {
            return;
        };
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_has_a_20_byte_gnu_build_id() {
        let exe = std::env::current_exe().expect("current exe");
        let elf = ElfFile::open(&exe).expect("our own executable is ELF64 LE");
        assert!(!elf.program_headers.is_empty());
        assert!(elf.section(".text").is_some(), "sections are named");
        // Rust on Linux links with --build-id by default (gcc/clang driver default).
        let id = elf.gnu_build_id().expect("build id note");
        assert_eq!(id.len(), 20, "SHA-1 build id");
        assert!(elf.gopclntab().is_none());
    }

    #[test]
    fn file_offsets_and_addresses_convert_through_load_segments() {
        let exe = std::env::current_exe().expect("current exe");
        let elf = ElfFile::open(&exe).expect("elf");
        let text = elf.section(".text").expect(".text");
        let vaddr = elf
            .file_offset_to_vaddr(text.offset)
            .expect("text is loaded");
        assert_eq!(vaddr, text.addr);
        assert_eq!(elf.vaddr_to_file_offset(text.addr), Some(text.offset));
    }

    #[test]
    fn notes_parse_with_padding_and_stop_at_truncation() {
        // The layout of /sys/kernel/notes: a GNU build id, then a note named "Linux".
        let mut bytes = Vec::new();
        for (name, t, desc) in [
            (&b"GNU\0"[..], 3u32, vec![0xab; 20]),
            (&b"Linux\0"[..], 6u32, vec![1, 2, 3]),
        ] {
            bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&t.to_le_bytes());
            bytes.extend_from_slice(name);
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            bytes.extend_from_slice(&desc);
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        }
        let mut notes = Vec::new();
        parse_notes(&bytes, 4, &mut notes);
        assert_eq!(notes.len(), 2);
        assert_eq!(notes[1].name, b"Linux");
        assert_eq!(notes[1].desc, vec![1, 2, 3]);
        assert_eq!(gnu_build_id(&notes), Some(vec![0xab; 20]));
        let mut cut = Vec::new();
        parse_notes(&bytes[..30], 4, &mut cut);
        assert!(cut.is_empty(), "a note cut short is not returned");
    }

    #[test]
    fn non_elf_input_is_refused() {
        assert!(matches!(
            ElfFile::from_bytes(b"#!/bin/sh\n".repeat(10)),
            Err(ElfError::Unsupported(_))
        ));
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 1; // 32-bit
        assert!(matches!(
            ElfFile::from_bytes(header),
            Err(ElfError::Unsupported("not a 64-bit ELF file"))
        ));
    }
}
