//! Any bytes as an ELF file, as the profiling receiver reads the files processes map:
//! headers, section names, notes and build ids are read within the caps and within the
//! bytes, never panicking, never allocating past the input. Also any bytes as a run of
//! notes (`/sys/kernel/notes`).
#![no_main]

use libfuzzer_sys::fuzz_target;

// The receiver's own reader, compiled in as is: the receiver crate links libbpf and
// blazesym, which a sanitizer build does not need.
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/elf.rs"]
mod elf;

fuzz_target!(|data: &[u8]| {
    for align in [4, 8] {
        let mut notes = Vec::new();
        elf::parse_notes(data, align, &mut notes);
        assert!(notes.len() <= elf::MAX_NOTES);
        let _ = elf::gnu_build_id(&notes);
        let _ = elf::go_build_id(&notes);
    }
    let Ok(file) = elf::ElfFile::from_bytes(data.to_vec()) else {
        return;
    };
    assert!(file.program_headers.len() as u64 <= elf::MAX_PROGRAM_HEADERS);
    assert!(file.sections.len() as u64 <= elf::MAX_SECTIONS);
    let notes = file.notes();
    assert!(notes.len() <= elf::MAX_NOTES);
    let (gnu, go) = file.build_ids();
    assert_eq!(gnu, file.gnu_build_id());
    assert_eq!(go, file.go_build_id());
    for section in &file.sections {
        if let Ok(bytes) = file.section_data(section) {
            assert!(bytes.len() <= data.len());
        }
    }
    let _ = file.gopclntab();
    for p in file.program_headers.iter().take(16) {
        if let Some(vaddr) = file.file_offset_to_vaddr(p.offset) {
            let _ = file.vaddr_to_file_offset(vaddr);
        }
    }
});
