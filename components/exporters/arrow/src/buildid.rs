//! Which build ids an ELF file declares (its `PT_NOTE` segments), so that the file about
//! to be uploaded is checked to be the one a frame's `mapping_build_id` names: a
//! `/proc/<pid>/root/...` path may by now show another file, or another process.
//!
//! Read by offset from the [`HostFile`] the upload then hashes and sends, never past the
//! size it had when opened.

use std::io;

use profcol_core::host_executables::HostFile;

const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;
const NT_GO_BUILD_ID: u32 = 4;
/// Notes read per segment at most.
const MAX_NOTE_BYTES: u64 = 1 << 16;

/// The build ids a file declares.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BuildIds {
    /// GNU build id, lower-case hex.
    pub gnu: Option<String>,
    /// Go build id, as text.
    pub go: Option<String>,
}

impl BuildIds {
    pub fn contains(&self, id: &str) -> bool {
        self.gnu.as_deref() == Some(id) || self.go.as_deref() == Some(id)
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Fills `buf` from `offset` as far as the file goes; the bytes read (fewer than
/// `buf.len()` only at its end).
pub fn read_full(file: &HostFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Whether `buf` was filled whole from `offset`.
fn read_exact(file: &HostFile, buf: &mut [u8], offset: u64) -> io::Result<bool> {
    Ok(read_full(file, buf, offset)? == buf.len())
}

/// Reads the build ids of a 64-bit little-endian ELF file; `None` when it is not one.
pub fn read(file: &HostFile) -> io::Result<Option<BuildIds>> {
    let mut header = [0u8; 64];
    if !read_exact(file, &mut header, 0)? {
        return Ok(None);
    }
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(None);
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (
        u64_at(&header, 0x20),
        u16_at(&header, 0x36),
        u16_at(&header, 0x38),
    ) else {
        return Ok(None);
    };
    let table_len = usize::from(phentsize) * usize::from(phnum);
    if phentsize < 56 || table_len > 1 << 20 {
        return Ok(None);
    }
    let mut table = vec![0u8; table_len];
    if !read_exact(file, &mut table, phoff)? {
        return Ok(None);
    }
    let mut ids = BuildIds::default();
    for entry in table.chunks_exact(usize::from(phentsize)) {
        if u32_at(entry, 0) != Some(PT_NOTE) {
            continue;
        }
        let (Some(offset), Some(size)) = (u64_at(entry, 8), u64_at(entry, 32)) else {
            continue;
        };
        let mut notes = vec![0u8; usize::try_from(size.min(MAX_NOTE_BYTES)).unwrap_or(0)];
        if !read_exact(file, &mut notes, offset)? {
            continue;
        }
        parse_notes(&notes, &mut ids);
    }
    Ok(Some(ids))
}

fn align4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

fn parse_notes(mut b: &[u8], ids: &mut BuildIds) {
    while let (Some(namesz), Some(descsz), Some(kind)) = (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8))
    {
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        let name_end = 12 + namesz;
        let desc_start = 12 + align4(namesz);
        let desc_end = desc_start + descsz;
        let (Some(name), Some(desc)) = (b.get(12..name_end), b.get(desc_start..desc_end)) else {
            return;
        };
        let name_len = name.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
        let name = &name[..name_len];
        match (name, kind) {
            (b"GNU", NT_GNU_BUILD_ID) if ids.gnu.is_none() => ids.gnu = Some(hex::encode(desc)),
            (b"Go", NT_GO_BUILD_ID) if ids.go.is_none() => {
                ids.go = std::str::from_utf8(desc).ok().map(str::to_owned);
            }
            _ => {}
        }
        let next = align4(desc_end);
        if next >= b.len() {
            return;
        }
        b = &b[next..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend((name.len() as u32).to_le_bytes());
        out.extend((desc.len() as u32).to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(name);
        out.resize(align4(out.len()), 0);
        out.extend(desc);
        out.resize(align4(out.len()), 0);
        out
    }

    #[test]
    fn reads_gnu_and_go_notes() {
        let mut notes = note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab, 0x01, 0xff]);
        notes.extend(note(b"Go\0\0", NT_GO_BUILD_ID, b"abc/def"));
        let mut ids = BuildIds::default();
        parse_notes(&notes, &mut ids);
        assert_eq!(ids.gnu.as_deref(), Some("ab01ff"));
        assert_eq!(ids.go.as_deref(), Some("abc/def"));
        assert!(ids.contains("abc/def") && !ids.contains("ab01"));
        let mut truncated = BuildIds::default();
        parse_notes(&notes[..10], &mut truncated);
        assert_eq!(truncated, BuildIds::default());
    }

    #[test]
    fn reads_this_test_binary() {
        let registry = profcol_core::host_executables::Registry::new();
        let open = |path: &std::path::Path| registry.open(path);
        let exe = std::env::current_exe().expect("exe");
        let f = open(&exe).expect("open");
        let ids = read(&f).expect("io").expect("an ELF file");
        // rustc links with a GNU build id on Linux.
        assert!(ids.gnu.as_ref().is_some_and(|g| g.len() >= 16), "{ids:?}");
        let not_elf = open(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/Cargo.toml"
        )))
        .expect("manifest");
        assert_eq!(read(&not_elf).expect("io"), None);
    }
}
