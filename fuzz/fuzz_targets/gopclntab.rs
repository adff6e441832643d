//! Any bytes as Go's function table (`.gopclntab`), raw or inside an ELF file: parsing
//! and looking up pcs never panics and stays within the table, as a crafted Go binary
//! mapped by any user must not stop the profiler's symbolizer.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/elf.rs"]
mod elf;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/gopclntab.rs"]
mod gopclntab;

fn exercise(table: &gopclntab::GoTable) {
    let mut count = 0usize;
    for (entry, name) in table.functions().take(64) {
        assert!(name.len() <= gopclntab::MAX_NAME);
        for pc in [entry, entry.wrapping_add(1), entry.wrapping_add(64)] {
            if let Some(frame) = table.lookup(pc) {
                assert!(frame.function.len() <= gopclntab::MAX_NAME);
            }
        }
        count += 1;
    }
    assert!(count <= table.len());
    let _ = table.lookup(table.text_start());
    let _ = table.lookup(u64::MAX);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(table) = gopclntab::GoTable::parse(data.to_vec(), 0x401000) {
        exercise(&table);
    }
    if let Ok(file) = elf::ElfFile::from_bytes(data.to_vec())
        && let Ok(table) = gopclntab::GoTable::from_elf(&file)
    {
        exercise(&table);
    }
});
