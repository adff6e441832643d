//! Any bytes as what the profiler reads of a Python process: a line table of each
//! CPython version's format, a code object (with its strings and line table) in the
//! process's memory, and an ELF file named like libpython. Reading never panics, never
//! allocates past its bounds, and every line table is decoded in time linear in its size:
//! a process that the profiler samples controls all of it.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/elf.rs"]
mod elf;

#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/memory.rs"]
mod memory;

#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/python"]
mod python {
    pub mod code;
    pub mod detect;
    pub mod offsets;
}

use memory::Memory;
use python::code;
use python::offsets::{self, LineTable};

/// Memory that holds `bytes` from `base` on, and nothing else.
struct Buffer<'a>(u64, &'a [u8]);

impl Memory for Buffer<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(at) = addr.checked_sub(self.0).and_then(|a| usize::try_from(a).ok()) else {
            return false;
        };
        match at.checked_add(buf.len()).and_then(|end| self.1.get(at..end)) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 5 {
        0..=2 => {
            let format = [LineTable::Lnotab, LineTable::Ranges310, LineTable::Locations]
                [usize::from(mode % 5)];
            if rest.len() < 4 {
                return;
            }
            let first_line = u32::from(u16::from_le_bytes([rest[0], rest[1]]));
            let position = i32::from(i16::from_le_bytes([rest[2], rest[3]]));
            let _ = code::line_at(format, &rest[4..], first_line, position);
        }
        3 => {
            let Some((&minor, memory)) = rest.split_first() else {
                return;
            };
            let Some(offsets) = offsets::for_minor(8 + minor % 6) else {
                return;
            };
            let base = 0x1000;
            let code_type = memory
                .get(8..16)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            let first_line = memory
                .get(usize::from(offsets.code_firstlineno)..usize::from(offsets.code_firstlineno) + 4)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
            let word = |at: u16| {
                memory
                    .get(usize::from(at)..usize::from(at) + 8)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            };
            let sampled = code::Sampled {
                addr: base,
                first_line: first_line & 0xff_ffff,
                identity: code::identity(word(offsets.code_filename), word(offsets.code_name)),
            };
            if let Ok(info) = code::read_code(&Buffer(base, memory), &offsets, code_type, sampled) {
                assert!(info.filename.chars().count() <= code::MAX_STRING_BYTES);
                assert!(info.name.chars().count() <= code::MAX_STRING_BYTES);
                for position in [-1, 0, 1, 7, 1000, i32::MAX] {
                    let _ = info.line(position);
                }
            }
        }
        _ => {
            if let Ok(file) = elf::ElfFile::from_bytes(rest.to_vec()) {
                let _ = python::detect::detect("libpython3.11.so.1.0", &file);
                let _ = python::detect::detect("python3.8", &file);
            }
        }
    }
});
