//! Tests on real files: /bin/bash, Debian's libc, and a C program compiled here, checked
//! against binutils' own CFI interpreter (`readelf --debug-dump=frames-interp`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::elf::ElfFile;

/// The C program the tests compile: functions with no frame, six pushes, a 64 KiB frame
/// and a frame pointer.
const PROGRAM: &str = include_str!("test_program.c");

/// The rule at every function's first instruction on x86_64.
const ENTRY: Rule = Rule {
    cfa: Cfa::SpOffset(8),
    fp: Fp::Unchanged,
    ra: Ra::AtCfa(-8),
};

fn check_invariants(table: &UnwindTable) {
    let rows = table.rows();
    for pair in rows.windows(2) {
        assert!(pair[0].pc < pair[1].pc, "sorted, strictly: {pair:?}");
        assert_ne!(
            pair[0].rule, pair[1].rule,
            "equal neighbours merged: {pair:?}"
        );
    }
    if let Some(last) = rows.last() {
        assert_eq!(last.rule, Rule::NONE, "the last function is ended");
        assert_ne!(rows[0].rule, Rule::NONE, "no leading gap");
    }
    let bytes = table.encode();
    assert_eq!(bytes.len(), rows.len() * ROW_SIZE);
    for (row, chunk) in rows.iter().zip(bytes.chunks_exact(ROW_SIZE)) {
        let chunk: &[u8; ROW_SIZE] = chunk.try_into().expect("12 bytes");
        assert_eq!(Row::decode(chunk), Some(*row), "encoding round-trips");
    }
}

fn build_path(path: &Path) -> Built {
    let elf = ElfFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let built = build(&elf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check_invariants(&built.table);
    built
}

/// Debian's libc, as this test process maps it.
fn libc_path() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libc.so.6"))
        .map(PathBuf::from)
        .expect("this test links Debian's libc.so.6")
}

/// Defined functions of a symbol table (`.symtab` or `.dynsym`): name, address, size.
fn functions(elf: &ElfFile, symtab: &str, strtab: &str) -> Vec<(String, u64, u64)> {
    let (Some(symtab), Some(strtab)) = (elf.section(symtab), elf.section(strtab)) else {
        return Vec::new();
    };
    let syms = elf.section_data(symtab).expect("symbols");
    let names = elf.section_data(strtab).expect("names");
    syms.chunks_exact(24)
        .filter(|s| s[4] & 0xf == 2 && u16::from_le_bytes([s[6], s[7]]) != 0)
        .map(|s| {
            let word = |at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8"));
            let name_at = u32::from_le_bytes(s[0..4].try_into().expect("4")) as usize;
            let name = &names[name_at..];
            let end = name.iter().position(|&b| b == 0).expect("NUL");
            (
                String::from_utf8_lossy(&name[..end]).into_owned(),
                word(8),
                word(16),
            )
        })
        .collect()
}

fn function(elf: &ElfFile, name: &str) -> (u64, u64) {
    functions(elf, ".symtab", ".strtab")
        .into_iter()
        .chain(functions(elf, ".dynsym", ".dynstr"))
        .find(|(n, _, _)| n == name)
        .map(|(_, addr, size)| (addr, size))
        .unwrap_or_else(|| panic!("no function {name}"))
}

/// The rules of every address range of a function, in order, merged.
fn rules_in(table: &UnwindTable, (addr, size): (u64, u64)) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for a in addr..addr + size {
        let rule = table
            .lookup(a)
            .unwrap_or_else(|| panic!("{a:#x} has a row"));
        if rules.last() != Some(&rule) {
            rules.push(rule);
        }
    }
    rules
}

/// One FDE as `readelf --debug-dump=frames-interp` prints it: its range and its rows.
struct ReadelfFde {
    start: u64,
    end: u64,
    rows: Vec<(u64, Rule)>,
}

fn readelf_rule(columns: &[&str], values: &[&str]) -> Rule {
    let value = |name: &str| {
        columns
            .iter()
            .position(|c| *c == name)
            .and_then(|i| values.get(i))
            .copied()
    };
    let offset = |v: &str, prefix: &str| v.strip_prefix(prefix).and_then(|o| o.parse::<i64>().ok());
    let cfa = value("CFA").unwrap_or("");
    let cfa = match (offset(cfa, "rsp+"), offset(cfa, "rbp+")) {
        (Some(o), _) => Cfa::SpOffset(i32::try_from(o).expect("i32")),
        (_, Some(o)) => Cfa::FpOffset(i32::try_from(o).expect("i32")),
        _ => Cfa::Unsupported,
    };
    let slot = |v: &str| offset(v, "c").and_then(row::slot_offset);
    let fp = match value("rbp") {
        None | Some("u") | Some("s") => Fp::Unchanged,
        Some(v) => slot(v).map_or(Fp::Unknown, Fp::AtCfa),
    };
    let ra = match value("ra") {
        Some("u") => Ra::Undefined,
        Some(v) => slot(v).map_or(Ra::Unknown, Ra::AtCfa),
        None => Ra::Unknown,
    };
    Rule { cfa, fp, ra }.canonical()
}

fn readelf_fdes(path: &Path) -> Vec<ReadelfFde> {
    let out = Command::new("readelf")
        .arg("--debug-dump=frames-interp")
        .arg(path)
        .output()
        .expect("readelf (binutils) runs");
    // readelf exits 1 after warnings about a separate debug file it found (libc's, with
    // NOBITS sections); what it printed of the file itself stands.
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.contains("Contents of the"),
        "readelf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut fdes = Vec::new();
    let mut current: Option<ReadelfFde> = None;
    let mut columns: Vec<&str> = Vec::new();
    // Only sections of the file itself, not of a debug file readelf followed.
    let mut ours = true;
    // CIEs whose augmentation has `S`: their FDEs are signal trampolines.
    let mut signal_cies: Vec<String> = Vec::new();
    let mut signal = false;
    for line in text.lines() {
        // A register rule is printed as `r10 (r10)`: the name in parentheses is no column.
        let words: Vec<&str> = line
            .split_whitespace()
            .filter(|w| !w.starts_with('('))
            .collect();
        if line.starts_with("Contents of the") {
            fdes.extend(current.take());
            ours = line
                .split_once("(loaded from ")
                .is_none_or(|(_, from)| from.trim_end_matches("):") == path.to_string_lossy());
        } else if !ours {
        } else if words.get(3) == Some(&"FDE") {
            fdes.extend(current.take());
            let range = words
                .iter()
                .find_map(|w| w.strip_prefix("pc="))
                .expect("pc=start..end");
            let (start, end) = range.split_once("..").expect("..");
            let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex");
            signal = words
                .iter()
                .find_map(|w| w.strip_prefix("cie="))
                .is_some_and(|cie| signal_cies.iter().any(|c| c == cie));
            current = Some(ReadelfFde {
                start: hex(start),
                end: hex(end),
                rows: Vec::new(),
            });
        } else if words.get(3).is_some_and(|w| *w == "CIE") || words.contains(&"ZERO") {
            fdes.extend(current.take());
            if words
                .get(4)
                .is_some_and(|aug| aug.starts_with("\"z") && aug.contains('S'))
            {
                signal_cies.push(words[0].to_owned());
            }
        } else if words.first() == Some(&"LOC") {
            columns = words;
        } else if let (Some(fde), Some(loc)) = (current.as_mut(), words.first())
            && let Ok(loc) = u64::from_str_radix(loc, 16)
        {
            let rule = if signal {
                Rule::SIGNAL_FRAME
            } else {
                readelf_rule(&columns, &words)
            };
            fde.rows.push((loc, rule));
        }
    }
    fdes.extend(current);
    fdes
}

/// Every row binutils computes is the row our table gives for that address.
fn matches_readelf(path: &Path, table: &UnwindTable) -> usize {
    let fdes = readelf_fdes(path);
    assert!(!fdes.is_empty(), "readelf found FDEs in {}", path.display());
    let mut checked = 0;
    let mut wrong = Vec::new();
    for fde in &fdes {
        for (i, &(loc, rule)) in fde.rows.iter().enumerate() {
            let next = fde.rows.get(i + 1).map_or(fde.end, |r| r.0);
            if loc >= next || loc < fde.start {
                continue;
            }
            for at in [loc, next - 1] {
                checked += 1;
                let ours = table.lookup(at);
                if ours != Some(rule) {
                    wrong.push(format!("{at:#x}: readelf {rule:?}, ours {ours:?}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}: {} of {checked} rows differ from readelf, first: {:#?}",
        path.display(),
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    checked
}

/// Compiles [`PROGRAM`] with `cc` into `dir`.
fn compile(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let source = dir.join("program.c");
    std::fs::write(&source, PROGRAM).expect("write source");
    let out = dir.join(name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc {flags:?}");
    out
}

#[test]
fn rows_encode_in_12_bytes_and_decode_back() {
    let row = Row {
        pc: 0x1234_5678,
        rule: Rule {
            cfa: Cfa::SpOffset(65552),
            fp: Fp::AtCfa(-56),
            ra: Ra::AtCfa(-8),
        },
    };
    let bytes = row.encode();
    assert_eq!(
        bytes,
        [
            0x78, 0x56, 0x34, 0x12, 0x10, 0x00, 0x01, 0x00, 1, 0x01, 0xf9, 0xff
        ]
    );
    assert_eq!(Row::decode(&bytes), Some(row));
    for rule in [
        Rule::NONE,
        Rule::UNSUPPORTED,
        Rule {
            cfa: Cfa::FpOffset(16),
            fp: Fp::Unknown,
            ra: Ra::Undefined,
        },
        Rule {
            cfa: Cfa::SpOffset(8),
            fp: Fp::Unchanged,
            ra: Ra::LinkRegister,
        },
        Rule {
            cfa: Cfa::SpOffset(-8),
            fp: Fp::AtCfa(1016),
            ra: Ra::Unknown,
        },
    ] {
        let row = Row { pc: 7, rule };
        assert_eq!(Row::decode(&row.encode()), Some(row));
    }
    let signal = Row {
        pc: 9,
        rule: Rule::SIGNAL_FRAME,
    };
    assert_eq!(Row::decode(&signal.encode()), Some(signal));
    let mut bad = row.encode();
    bad[8] = 5;
    assert_eq!(Row::decode(&bad), None, "unknown CFA kind");
    assert_eq!(row::slot_offset(-1024), Some(-1024));
    assert_eq!(row::slot_offset(1024), None);
    assert_eq!(row::slot_offset(-12), None);
}

#[test]
fn equal_neighbours_merge_and_a_row_at_the_same_address_replaces() {
    let sp = |o| Rule {
        cfa: Cfa::SpOffset(o),
        ..ENTRY
    };
    let mut table = UnwindTable::new(Arch::X86_64, 0x1000);
    table.push(0, Rule::NONE).expect("in order");
    assert!(table.is_empty(), "no leading gap");
    for (pc, rule) in [
        (0, sp(8)),
        (1, sp(16)),
        (5, sp(16)),
        (9, sp(8)),
        (9, sp(16)),
        (12, Rule::NONE),
    ] {
        table.push(pc, rule).expect("in order");
    }
    assert_eq!(
        table.rows(),
        &[
            Row { pc: 0, rule: sp(8) },
            Row {
                pc: 1,
                rule: sp(16)
            },
            Row {
                pc: 12,
                rule: Rule::NONE
            },
        ]
    );
    assert!(table.push(11, sp(8)).is_err(), "out of order");
    assert_eq!(table.lookup(0x1000), Some(sp(8)));
    assert_eq!(table.lookup(0x100b), Some(sp(16)));
    assert_eq!(table.lookup(0x100c), None, "a gap");
    assert_eq!(table.lookup(0xfff), None, "below the table");
    assert_eq!(table.lookup(u64::MAX), None);
    // Unusable rules carry nothing else, so they merge.
    let odd = Rule {
        cfa: Cfa::Unsupported,
        fp: Fp::AtCfa(-16),
        ra: Ra::AtCfa(-8),
    };
    assert_eq!(odd.canonical(), Rule::UNSUPPORTED);
}

#[test]
fn bash_table_is_sorted_and_every_exported_function_starts_at_rsp_plus_8() {
    let path = Path::new("/bin/bash");
    let built = build_path(path);
    let table = &built.table;
    assert_eq!(table.arch, Arch::X86_64);
    assert!(table.len() > 10_000, "bash has {} rows", table.len());
    let elf = ElfFile::open(path).expect("elf");
    let exported = functions(&elf, ".dynsym", ".dynstr");
    assert!(exported.len() > 1000, "bash exports its functions");
    for (name, addr, _) in &exported {
        let expected = if name == "_start" {
            // The outermost frame: crt1's `.cfi_undefined rip`.
            Rule {
                ra: Ra::Undefined,
                ..ENTRY
            }
        } else {
            ENTRY
        };
        assert_eq!(table.lookup(*addr), Some(expected), "{name} at {addr:#x}");
    }
    // A function with a frame: rows inside it grow the CFA from rsp+8.
    let rules = rules_in(table, function(&elf, "execute_command"));
    assert_eq!(rules[0], ENTRY);
    assert!(
        rules
            .iter()
            .any(|r| matches!(r.cfa, Cfa::SpOffset(o) if o > 8)),
        "{rules:?}"
    );
    let checked = matches_readelf(path, table);
    eprintln!(
        "bash: {} rows ({} bytes), {:?}; {checked} rows agree with readelf",
        table.len(),
        table.encoded_size(),
        built.stats
    );
}

#[test]
fn libc_table_covers_its_functions_and_matches_readelf() {
    let path = libc_path();
    let built = build_path(&path);
    let table = &built.table;
    assert!(table.len() > 5_000, "libc has {} rows", table.len());
    assert_eq!(built.stats.fdes_skipped, 0, "{:?}", built.stats);
    let elf = ElfFile::open(&path).expect("elf");
    for (name, addr, _) in functions(&elf, ".dynsym", ".dynstr") {
        assert_eq!(table.lookup(addr), Some(ENTRY), "{name} at {addr:#x}");
    }
    // The function that calls main: every address of it has a usable rule.
    let start_main = function(&elf, "__libc_start_main");
    let rules = rules_in(table, start_main);
    assert_eq!(rules[0], ENTRY);
    assert!(
        rules.iter().all(|r| matches!(r.cfa, Cfa::SpOffset(_))),
        "{rules:?}"
    );
    assert!(
        rules.iter().any(|r| matches!(r.fp, Fp::AtCfa(_))),
        "it saves rbp: {rules:?}"
    );
    // The PLT's rows are expressions.
    assert!(built.stats.rows_unsupported > 0);
    let checked = matches_readelf(&path, table);
    eprintln!(
        "{}: {} rows ({} bytes), {:?}; {checked} rows agree with readelf",
        path.display(),
        table.len(),
        table.encoded_size(),
        built.stats
    );
}

#[test]
fn a_program_without_frame_pointers_gets_a_row_for_every_push_and_sub() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = compile(dir.path(), "program", &["-O2", "-fomit-frame-pointer"]);
    let built = build_path(&path);
    let table = &built.table;
    let elf = ElfFile::open(&path).expect("elf");
    let rules = |name: &str| rules_in(table, function(&elf, name));

    for name in ["main", "leaf", "fill", "six_live", "big_frame", "with_fp"] {
        assert_eq!(rules(name)[0], ENTRY, "{name} starts at rsp+8");
    }
    assert_eq!(rules("leaf"), vec![ENTRY], "leaf has no frame");

    // Six callee-saved registers pushed one after another: rsp+16, +24, ... +56, and rbp
    // saved on the way.
    let six = rules("six_live");
    let offsets: Vec<i32> = six
        .iter()
        .map(|r| match r.cfa {
            Cfa::SpOffset(o) => o,
            other => panic!("six_live: {other:?}"),
        })
        .collect();
    assert_eq!(&offsets[..7], &[8, 16, 24, 32, 40, 48, 56], "{six:?}");
    assert!(six.iter().all(|r| r.ra == Ra::AtCfa(-8)));
    let saved_rbp = six.iter().find_map(|r| match r.fp {
        Fp::AtCfa(o) => Some(o),
        _ => None,
    });
    assert!(
        saved_rbp.is_some_and(|o| (-56..=-16).contains(&o)),
        "{six:?}"
    );

    // A 64 KiB frame: the CFA offset is past what 16 bits hold.
    let big = rules("big_frame");
    assert!(
        big.iter()
            .any(|r| matches!(r.cfa, Cfa::SpOffset(o) if o > 65536)),
        "{big:?}"
    );

    // With a frame pointer: rbp pushed at CFA-16, then the CFA is rbp+16.
    let fp = rules("with_fp");
    assert!(
        fp.contains(&Rule {
            cfa: Cfa::FpOffset(16),
            fp: Fp::AtCfa(-16),
            ra: Ra::AtCfa(-8)
        }),
        "{fp:?}"
    );

    // `_start` marks the outermost frame (crt1's `.cfi_undefined rip`).
    let (start, _) = function(&elf, "_start");
    assert_eq!(table.lookup(start).map(|r| r.ra), Some(Ra::Undefined));

    matches_readelf(&path, table);
}

#[test]
fn debug_frame_is_read_where_there_is_no_eh_frame_for_the_code() {
    let dir = tempfile::tempdir().expect("tmp");
    // Without unwind tables, gcc writes the CFI of -g into .debug_frame only.
    let path = compile(
        dir.path(),
        "program-debug-frame",
        &[
            "-O2",
            "-fomit-frame-pointer",
            "-g",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let elf = ElfFile::open(&path).expect("elf");
    let debug_frame = elf.section(".debug_frame").expect(".debug_frame");
    assert!(debug_frame.size > 0);
    let built = build_path(&path);
    let table = &built.table;
    let six = rules_in(table, function(&elf, "six_live"));
    assert_eq!(six[0], ENTRY);
    assert!(six.iter().any(|r| r.cfa == Cfa::SpOffset(56)), "{six:?}");
    matches_readelf(&path, table);
}

#[test]
fn a_file_without_call_frame_information_has_an_empty_table() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = compile(dir.path(), "program", &["-O2"]);
    let stripped = dir.path().join("no-eh-frame");
    let status = Command::new("objcopy")
        .args([
            "--remove-section=.eh_frame",
            "--remove-section=.eh_frame_hdr",
        ])
        .arg(&path)
        .arg(&stripped)
        .status()
        .expect("objcopy runs");
    assert!(status.success());
    let built = build_path(&stripped);
    assert!(built.table.is_empty());
    assert_eq!(built.stats.fdes, 0);
}

#[test]
fn a_file_opened_as_another_users_file_builds_the_same_table() {
    use crate::safe_file::{FileLocation, VerifiedFile};
    let path = libc_path();
    let file = VerifiedFile::open(&FileLocation::Host(path.clone()), None).expect("open");
    let size = file.size();
    let elf = ElfFile::from_file(file.try_clone_file().expect("dup"), size).expect("elf");
    let built = build(&elf).expect("table");
    assert_eq!(built.table, build_path(&path).table);
}

/// The compiled program's bytes, and where its `.eh_frame` and its section header are.
fn program_bytes(dir: &Path) -> (Vec<u8>, usize, usize, usize) {
    let path = compile(dir, "program", &["-O2", "-fomit-frame-pointer"]);
    let elf = ElfFile::open(&path).expect("elf");
    let index = elf
        .sections
        .iter()
        .position(|s| s.name == ".eh_frame")
        .expect(".eh_frame");
    let eh = &elf.sections[index];
    let bytes = std::fs::read(&path).expect("read");
    let shoff = u64::from_le_bytes(bytes[40..48].try_into().expect("8")) as usize;
    (
        bytes,
        eh.offset as usize,
        eh.size as usize,
        shoff + index * 64,
    )
}

fn build_bytes(bytes: &[u8]) -> Result<Built, UnwindError> {
    let elf = ElfFile::from_bytes(bytes.to_vec()).expect("still ELF");
    let built = build(&elf)?;
    check_invariants(&built.table);
    Ok(built)
}

#[test]
fn garbage_or_truncated_eh_frame_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tmp");
    let (bytes, offset, size, header) = program_bytes(dir.path());
    assert!(build_bytes(&bytes).is_ok());

    // Garbage: every byte 0xab (the first length points far past the section).
    let mut garbage = bytes.clone();
    garbage[offset..offset + size].fill(0xab);
    let err = build_bytes(&garbage).expect_err("garbage");
    assert!(
        matches!(
            err,
            UnwindError::Cfi {
                section: ".eh_frame",
                ..
            }
        ),
        "{err}"
    );

    // Truncated: the section ends in the middle of its last FDE.
    let mut cut = bytes.clone();
    cut[header + 32..header + 40].copy_from_slice(&(size as u64 - 10).to_le_bytes());
    let err = build_bytes(&cut).expect_err("truncated");
    assert!(matches!(err, UnwindError::Cfi { .. }), "{err}");

    // A section that claims to run past the end of the file.
    let mut past = bytes.clone();
    past[header + 32..header + 40].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    assert!(matches!(build_bytes(&past), Err(UnwindError::Elf(_))));

    // Any one byte changed, anywhere in the section: a table or an error, never a panic.
    let mut errors = 0;
    for at in offset..offset + size {
        for value in [0x00, 0xff, bytes[at] ^ 0x40] {
            let mut changed = bytes.clone();
            changed[at] = value;
            errors += usize::from(build_bytes(&changed).is_err());
        }
    }
    assert!(errors > 0);
}

#[test]
fn caps_refuse_a_file_with_a_clear_error() {
    let path = libc_path();
    let elf = ElfFile::open(&path).expect("elf");
    let defaults = Limits::default();
    let with = |limits: Limits| build_with_limits(&elf, &limits).expect_err("over a cap");
    assert!(matches!(
        with(Limits {
            max_section_size: 4096,
            ..defaults
        }),
        UnwindError::SectionTooLarge {
            section: ".eh_frame",
            ..
        }
    ));
    assert!(matches!(
        with(Limits {
            max_fdes: 100,
            ..defaults
        }),
        UnwindError::TooManyFdes(100)
    ));
    assert!(matches!(
        with(Limits {
            max_rows: 100,
            ..defaults
        }),
        UnwindError::TooManyRows(100)
    ));
    assert!(matches!(
        with(Limits {
            max_steps: 10_000,
            ..defaults
        }),
        UnwindError::BudgetExhausted(10_000)
    ));
    let err = with(Limits {
        max_rows: 100,
        ..defaults
    });
    assert_eq!(err.to_string(), "more than 100 rows");
}

#[test]
fn other_architectures_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut bytes, ..) = program_bytes(dir.path());
    bytes[18..20].copy_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
    assert!(matches!(
        build_bytes(&bytes),
        Err(UnwindError::UnsupportedArch(183))
    ));
}

/// The compiled program with its `.eh_frame` replaced by `eh_frame` (appended to the file;
/// the section header is pointed at it, its address kept).
fn with_eh_frame(dir: &Path, eh_frame: &[u8]) -> Vec<u8> {
    let (mut bytes, _, _, header) = program_bytes(dir);
    let at = bytes.len() as u64;
    bytes.extend_from_slice(eh_frame);
    bytes[header + 24..header + 32].copy_from_slice(&at.to_le_bytes());
    bytes[header + 32..header + 40].copy_from_slice(&(eh_frame.len() as u64).to_le_bytes());
    bytes
}

/// A CIE whose initial instructions are `nops` DW_CFA_nop after the usual entry rules,
/// and `fdes` one-byte FDEs using it, at `text`, `text + 1`, ... (absolute addresses).
fn costly_eh_frame(nops: usize, fdes: u64, text: u64) -> Vec<u8> {
    let mut cie = vec![0, 0, 0, 0, 1]; // CIE id, version 1
    cie.extend_from_slice(b"zR\0");
    cie.extend_from_slice(&[1, 0x78, 16, 1, 0x00]); // code 1, data -8, ra 16, R: absptr
    cie.extend_from_slice(&[0x0c, 7, 8, 0x90, 1]); // def_cfa rsp+8; ra at cfa-8
    cie.resize(cie.len() + nops, 0);
    cie.resize(cie.len().div_ceil(8) * 8 + 4, 0);
    let mut out = (cie.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&cie);
    for i in 0..fdes {
        let start = out.len();
        let mut fde = ((start + 4) as u32).to_le_bytes().to_vec(); // back to the CIE
        fde.extend_from_slice(&(text + i).to_le_bytes());
        fde.extend_from_slice(&1u64.to_le_bytes());
        fde.extend_from_slice(&[0, 0, 0, 0]); // no augmentation data, nops
        out.extend_from_slice(&(fde.len() as u32).to_le_bytes());
        out.extend_from_slice(&fde);
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

#[test]
fn a_costly_cie_shared_by_many_fdes_exhausts_the_budget() {
    let dir = tempfile::tempdir().expect("tmp");
    let elf = ElfFile::open(&compile(dir.path(), "program", &["-O2"])).expect("elf");
    let text = elf.section(".text").expect(".text").addr;
    // Within the budget: 64 one-byte functions, each starting at rsp+8.
    let fine = with_eh_frame(dir.path(), &costly_eh_frame(100, 64, text));
    let built = build_bytes(&fine).expect("a small CIE");
    assert_eq!(built.stats.fdes_used, 64);
    assert_eq!(built.table.lookup(text + 63), Some(ENTRY));
    assert_eq!(built.table.lookup(text + 64), None);
    // Each FDE makes the CIE's 60,000 instructions run again: refused, not run.
    let costly = with_eh_frame(dir.path(), &costly_eh_frame(60_000, 512, text));
    let elf = ElfFile::from_bytes(costly).expect("ELF");
    let limits = Limits {
        max_steps: 16 << 20,
        ..Limits::default()
    };
    assert!(matches!(
        build_with_limits(&elf, &limits),
        Err(UnwindError::BudgetExhausted(_))
    ));
}

#[test]
fn a_compressed_debug_frame_is_left_unread() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = compile(
        dir.path(),
        "program",
        &[
            "-O2",
            "-g",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let compressed = dir.path().join("compressed");
    let status = Command::new("objcopy")
        .arg("--compress-debug-sections=zlib")
        .arg(&path)
        .arg(&compressed)
        .status()
        .expect("objcopy runs");
    assert!(status.success());
    let plain = build_path(&path);
    assert!(!plain.stats.debug_frame_compressed);
    let built = build_path(&compressed);
    assert!(built.stats.debug_frame_compressed);
    assert!(
        built.stats.fdes < plain.stats.fdes,
        "only .eh_frame's (crt's) FDEs"
    );
}
