//! Any bytes as Go's function table (`.gopclntab`), raw or inside an ELF file: parsing,
//! finding the module data and the inline trees, and looking up pcs (inlined functions
//! included) never panics and stays within the table, as a crafted Go binary mapped by
//! any user must not stop the profiler's symbolizer.
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
                assert!(!frame.lines.is_empty());
                assert!(frame.lines.len() <= gopclntab::MAX_INLINE_DEPTH + 1);
                for line in &frame.lines {
                    assert!(line.function.len() <= gopclntab::MAX_NAME);
                }
            }
        }
        count += 1;
    }
    assert!(count <= table.len());
    let _ = table.lookup(table.text_start());
    let _ = table.lookup(u64::MAX);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(mut table) = gopclntab::GoTable::parse(data.to_vec(), 0x401000) {
        exercise(&table);
        // Inline trees somewhere in the table, as Go 1.22+ puts them: where the last
        // four bytes say.
        let at = data
            .len()
            .checked_sub(4)
            .and_then(|i| data.get(i..))
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        if table.set_funcdata_offset(at % data.len().max(1)) {
            exercise(&table);
        }
    }
    if let Ok(file) = elf::ElfFile::from_bytes(data.to_vec())
        && let Ok(table) = gopclntab::GoTable::from_elf(&file)
    {
        exercise(&table);
    }
});
