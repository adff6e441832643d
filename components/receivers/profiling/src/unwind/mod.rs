//! Unwind tables: how to find each frame's caller without frame pointers, built on the
//! host from a file's `.eh_frame` / `.debug_frame`, in a compact form for the BPF stack
//! walker (issue #11; the walker, its maps and the per-file cache are the next step).
//!
//! - [`row`]: the format, one fixed 12-byte row per address range, and [`Arch`];
//! - [`table`]: [`UnwindTable`], the sorted, merged rows of one file, and its lookup;
//! - [`builder`]: [`build`], reading the CFI of a (hostile) ELF file within [`Limits`];
//! - [`x86_64`]: the x86_64 registers and how a CFI row maps to a table row;
//! - [`error`]: the errors, [`UnwindError`];
//! - [`cache`]: [`cache::TableCache`], the tables in BPF, one per file identity, LRU
//!   under a memory budget;
//! - [`manager`]: [`Unwinder`], which gives each sampled process its mappings;
//! - [`maps`]: [`UnwindMaps`], the BPF side as the unwinder sees it;
//! - [`walk`]: the walker's algorithm in user space, for the stack copies of a process's
//!   first samples.

pub mod builder;
pub mod cache;
pub mod error;
pub mod manager;
pub mod maps;
pub mod row;
pub mod table;
pub mod walk;
pub mod x86_64;

// The API the BPF walker's loader will use (next step of #11); tests use it now.
#[allow(unused_imports)]
pub use builder::{BuildStats, Built, Limits, build, build_with_limits};
#[allow(unused_imports)]
pub use error::UnwindError;
pub use manager::{UnwindStatus, Unwinder, UnwinderStats};
pub use maps::UnwindMaps;
#[allow(unused_imports)]
pub use row::{Arch, Cfa, Fp, ROW_SIZE, Ra, Row, Rule};
#[allow(unused_imports)]
pub use table::UnwindTable;

#[cfg(test)]
mod tests {
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
        let offset =
            |v: &str, prefix: &str| v.strip_prefix(prefix).and_then(|o| o.parse::<i64>().ok());
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

    mod runtime {
        //! The unwinder at run time, without BPF: the user-space walk over stack copies, the
        //! table cache's budget and eviction, and the manager giving processes their mappings,
        //! against a recording stand-in for the BPF maps.

        use std::collections::HashMap;
        use std::path::PathBuf;
        use std::time::{Duration, Instant};

        use profcol_bpf::{StackCopy, UnwindEnd};

        use crate::config::Filter;
        use crate::elf::ElfFile;
        use crate::process::ProcessTable;
        use crate::procfs::ProcFs;
        use crate::unwind::cache::{
            Lookup, MIN_IDLE_NANOS, NO_ROOM_RETRY_NANOS, TableCache, TableKey,
        };
        use crate::unwind::maps::{UnwindMapping, UnwindMaps};
        use crate::unwind::row::{Cfa, Fp, ROW_SIZE, Ra, Row, Rule};
        use crate::unwind::walk::{FRAME_EXACT, Rows, walk_copy};
        use crate::unwind::{UnwindStatus, Unwinder};

        /// BPF's maps as the unwinder writes them.
        #[derive(Default)]
        struct RecordingMaps {
            tables: HashMap<u32, (u32, Vec<u8>)>,
            processes: HashMap<u32, Vec<UnwindMapping>>,
            loads: u32,
            unloads: u32,
        }

        impl UnwindMaps for RecordingMaps {
            fn load_table(
                &mut self,
                slot: u32,
                generation: u32,
                rows: &[u8],
            ) -> Result<(), String> {
                self.loads += 1;
                self.tables.insert(slot, (generation, rows.to_vec()));
                Ok(())
            }

            fn unload_table(&mut self, slot: u32) -> Result<(), String> {
                self.unloads += 1;
                self.tables.remove(&slot);
                Ok(())
            }

            fn set_process(&mut self, pid: u32, mappings: &[UnwindMapping]) -> Result<(), String> {
                self.processes.insert(pid, mappings.to_vec());
                Ok(())
            }

            fn remove_process(&mut self, pid: u32) -> Result<(), String> {
                self.processes.remove(&pid);
                Ok(())
            }

            fn read_row(&mut self, slot: u32, index: u32) -> Option<[u8; ROW_SIZE]> {
                let (_, rows) = self.tables.get(&slot)?;
                let at = index as usize * ROW_SIZE;
                rows.get(at..at + ROW_SIZE)?.try_into().ok()
            }
        }

        /// One table of hand-written rows, in slot 1.
        struct FixedRows(Vec<Row>);

        impl Rows for FixedRows {
            fn count(&self, slot: u32, generation: u32) -> Option<u32> {
                (slot == 1 && generation == 1).then_some(self.0.len() as u32)
            }

            fn row(&mut self, _slot: u32, index: u32) -> Option<Row> {
                self.0.get(index as usize).copied()
            }
        }

        fn rule(cfa: Cfa, fp: Fp, ra: Ra) -> Rule {
            Rule { cfa, fp, ra }
        }

        /// Three functions of a file loaded at 0x40_0000 (bias 0x40_0000):
        /// leaf 0x1000 (no frame), middle 0x2000 (pushes rbp at 0x2001, frame rsp+16 after),
        /// outer 0x3000 (the outermost frame), a signal trampoline at 0x4000, a PLT-like
        /// expression at 0x5000, and a gap after 0x6000.
        fn synthetic() -> (Vec<UnwindMapping>, FixedRows) {
            let entry = rule(Cfa::SpOffset(8), Fp::Unchanged, Ra::AtCfa(-8));
            let rows = vec![
                Row {
                    pc: 0x1000,
                    rule: entry,
                },
                Row {
                    pc: 0x2000,
                    rule: entry,
                },
                Row {
                    pc: 0x2001,
                    rule: rule(Cfa::SpOffset(16), Fp::AtCfa(-16), Ra::AtCfa(-8)),
                },
                Row {
                    pc: 0x3000,
                    rule: rule(Cfa::SpOffset(8), Fp::Unchanged, Ra::Undefined),
                },
                Row {
                    pc: 0x4000,
                    rule: Rule::SIGNAL_FRAME,
                },
                Row {
                    pc: 0x5000,
                    rule: Rule::UNSUPPORTED,
                },
                Row {
                    pc: 0x6000,
                    rule: Rule::NONE,
                },
            ];
            let mapping = UnwindMapping {
                start: 0x40_0000,
                end: 0x41_0000,
                bias: 0x40_0000,
                table: 1,
                generation: 1,
            };
            (vec![mapping], FixedRows(rows))
        }

        const SP: u64 = 0x7ffd_0000_0000;

        /// A stack copy at `SP` holding `words`.
        fn copy(pc: u64, fp: u64, words: &[u64]) -> StackCopy {
            StackCopy {
                pc,
                sp: SP,
                fp,
                stack: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            }
        }

        #[test]
        fn a_stack_copy_is_walked_as_bpf_walks_it() {
            let (mappings, mut rows) = synthetic();
            // leaf at 0x1050: its return address on top. middle's frame (rsp+16): saved rbp,
            // then the return address into outer, the outermost frame.
            let stack = copy(0x40_1050, 0xdead, &[0x40_2010, 0x7ffd_0000_1000, 0x40_3010]);
            let (frames, end) = walk_copy(&stack, &mappings, &mut rows, 127);
            assert_eq!(frames, vec![0x40_1050, 0x40_2010, 0x40_3010]);
            assert_eq!(end, UnwindEnd::Outermost);
            assert!(end.is_complete());

            // The depth limit.
            let (frames, end) = walk_copy(&stack, &mappings, &mut rows, 2);
            assert_eq!((frames.len(), end), (2, UnwindEnd::Depth));
        }

        #[test]
        fn a_signal_frame_gives_the_interrupted_registers_and_marks_both_frames_exact() {
            let (mappings, mut rows) = synthetic();
            // The handler (leaf at 0x1000) returns into the trampoline at 0x4000. The kernel's
            // frame: ucontext at the trampoline's sp, rbp at +120, rsp at +160, rip at +168.
            let mut words = vec![0u64; 40];
            words[0] = 0x40_4001; // the handler's return address: the trampoline (+1: the nop)
            let uc = 1; // the trampoline's sp is SP + 8: word 1
            words[uc + 15] = 0x1234; // rbp
            words[uc + 20] = SP + 8 * 30; // rsp of the interrupted code
            words[uc + 21] = 0x40_3020; // rip: interrupted in outer
            let (frames, end) = walk_copy(&copy(0x40_1000, 0, &words), &mappings, &mut rows, 127);
            assert_eq!(
                frames,
                vec![0x40_1000, 0x40_4001 | FRAME_EXACT, 0x40_3020 | FRAME_EXACT]
            );
            assert_eq!(end, UnwindEnd::Outermost);
        }

        #[test]
        fn hostile_stacks_end_the_walk_with_a_reason() {
            let (mappings, mut rows) = synthetic();
            // A return address past the copy.
            let (_, end) = walk_copy(&copy(0x40_1050, 0, &[]), &mappings, &mut rows, 127);
            assert_eq!(end, UnwindEnd::ReadFault);
            // A frame pointer below the stack pointer, where no table helps (a gap).
            let (_, end) = walk_copy(
                &copy(0x40_6010, SP - 64, &[0; 4]),
                &mappings,
                &mut rows,
                127,
            );
            assert_eq!(end, UnwindEnd::BadFrame);
            // An address in no mapping and a zero frame pointer.
            let (frames, end) = walk_copy(&copy(0x1234, 0, &[0; 4]), &mappings, &mut rows, 127);
            assert_eq!((frames, end), (vec![0x1234], UnwindEnd::FramePointerChain));
            // An expression past the leaf: middle returns into the PLT-like range.
            let (frames, end) = walk_copy(
                &copy(0x40_1050, 0, &[0x40_5010, 0, 0]),
                &mappings,
                &mut rows,
                127,
            );
            assert_eq!(frames.len(), 2);
            assert_eq!(end, UnwindEnd::Unsupported);
            // A frame-pointer loop (fp pointing at itself) cannot spin: the stack pointer must
            // move up, and the walk is bounded anyway.
            let looping = copy(0x40_6010, SP, &[SP, 0x40_6010, SP, 0x40_6010]);
            let (frames, end) = walk_copy(&looping, &mappings, &mut rows, 127);
            assert!(frames.len() <= 127, "{end:?}");
            assert!(
                !end.is_complete() || end == UnwindEnd::FramePointerChain,
                "{end:?}"
            );
            // Registers outside user space.
            let (frames, end) = walk_copy(&copy(u64::MAX, 0, &[]), &mappings, &mut rows, 127);
            assert_eq!((frames.len(), end), (0, UnwindEnd::NoUserStack));
        }

        fn libc() -> PathBuf {
            let out = std::process::Command::new("ldconfig")
                .arg("-p")
                .output()
                .expect("ldconfig");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find(|l| l.contains("libc.so.6 (libc6,x86-64)"))
                .and_then(|l| l.rsplit(' ').next())
                .map(PathBuf::from)
                .expect("libc")
        }

        fn key_of(path: &std::path::Path) -> TableKey {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(path).expect("stat");
            TableKey {
                dev: meta.dev(),
                inode: meta.ino(),
                build_id: None,
            }
        }

        /// The file offset of a file's executable segment: where a mapping of its code starts.
        fn text_offset(path: &std::path::Path) -> u64 {
            let elf = ElfFile::open(path).expect("elf");
            elf.program_headers
                .iter()
                .find(|p| p.p_type == 1 && p.flags & 1 != 0)
                .map(|p| p.offset & !0xfff)
                .expect("an executable segment")
        }

        fn opener(path: PathBuf) -> crate::unwind::cache::Opener {
            Box::new(move || ElfFile::open(&path).ok())
        }

        /// Asks until the builder thread has finished what was asked.
        fn finish(cache: &mut TableCache, maps: &mut RecordingMaps, want: usize) -> Vec<TableKey> {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut done = Vec::new();
            while done.len() < want && Instant::now() < deadline {
                done.extend(cache.finish_builds(maps));
                std::thread::sleep(Duration::from_millis(5));
            }
            done
        }

        #[test]
        fn tables_are_built_once_per_file_and_evicted_least_recently_used() {
            let (libc, bash) = (libc(), PathBuf::from("/bin/bash"));
            let (libc_key, bash_key) = (key_of(&libc), key_of(&bash));
            let (libc_text, bash_text) = (text_offset(&libc), text_offset(&bash));
            let mut maps = RecordingMaps::default();
            // Room for either table, not both (libc's is about 340 KB, bash's about 80 KB).
            let mut cache = TableCache::new(400 << 10, 8);
            let mut round = 0u64;

            round += MIN_IDLE_NANOS;
            cache.next_round(round);
            assert_eq!(
                cache.table_for(
                    &libc_key,
                    0x7f00_0000_0000,
                    libc_text,
                    4096,
                    opener(libc.clone())
                ),
                Lookup::Pending
            );
            // Asked again while building: not built twice.
            assert_eq!(
                cache.table_for(
                    &libc_key,
                    0x7f00_0000_0000,
                    libc_text,
                    4096,
                    opener(libc.clone())
                ),
                Lookup::Pending
            );
            assert_eq!(finish(&mut cache, &mut maps, 1), vec![libc_key.clone()]);
            let Lookup::Ready(first) = cache.table_for(
                &libc_key,
                0x7f00_0000_0000,
                libc_text,
                4096,
                opener(libc.clone()),
            ) else {
                panic!("libc's table is loaded");
            };
            assert_eq!(maps.loads, 1);
            assert!(
                cache
                    .rows_in(first.slot, first.generation)
                    .is_some_and(|n| n > 5000)
            );
            assert_eq!(cache.rows_in(first.slot, first.generation + 1), None);

            // A later round: bash does not fit beside libc, which was not used this round.
            round += MIN_IDLE_NANOS;
            cache.next_round(round);
            cache.table_for(
                &bash_key,
                0x5600_0000_0000,
                bash_text,
                4096,
                opener(bash.clone()),
            );
            finish(&mut cache, &mut maps, 1);
            let stats = cache.stats();
            assert_eq!(
                (stats.tables, stats.loaded, stats.evicted),
                (1, 2, 1),
                "{stats:?}"
            );
            assert!(stats.bytes <= 400 << 10);
            assert_eq!(maps.unloads, 1);
            assert!(matches!(
                cache.table_for(
                    &bash_key,
                    0x5600_0000_0000,
                    bash_text,
                    4096,
                    opener(bash.clone())
                ),
                Lookup::Ready(_)
            ));
            // libc comes back in another slot generation: a mapping naming the old one misses.
            round += MIN_IDLE_NANOS;
            cache.next_round(round);
            cache.table_for(
                &libc_key,
                0x7f00_0000_0000,
                libc_text,
                4096,
                opener(libc.clone()),
            );
            finish(&mut cache, &mut maps, 1);
            let Lookup::Ready(again) =
                cache.table_for(&libc_key, 0x7f00_0000_0000, libc_text, 4096, opener(libc))
            else {
                panic!("libc's table is loaded again");
            };
            assert_ne!(again.generation, first.generation);
            assert_eq!(cache.rows_in(first.slot, first.generation), None);

            // A file that could not be opened (its process exited before the builder got to
            // it) is asked for again, through the next process that maps it.
            let gone = key_of(&bash);
            let gone = TableKey {
                build_id: Some(vec![1]),
                ..gone
            };
            round += MIN_IDLE_NANOS;
            cache.next_round(round);
            assert_eq!(
                cache.table_for(&gone, 0x5600_0000_0000, bash_text, 4096, Box::new(|| None)),
                Lookup::Pending
            );
            finish(&mut cache, &mut maps, 1);
            assert_eq!(
                cache.table_for(
                    &gone,
                    0x5600_0000_0000,
                    bash_text,
                    4096,
                    opener(bash.clone())
                ),
                Lookup::Pending
            );
            finish(&mut cache, &mut maps, 1);
            assert!(matches!(
                cache.table_for(
                    &gone,
                    0x5600_0000_0000,
                    bash_text,
                    4096,
                    opener(bash.clone())
                ),
                Lookup::Ready(_)
            ));

            // A file with no call frame information is not asked for again.
            let dir = tempfile::tempdir().expect("tmp");
            let bare = dir.path().join("bare");
            let stripped = std::process::Command::new("objcopy")
                .args([
                    "--remove-section=.eh_frame",
                    "--remove-section=.eh_frame_hdr",
                ])
                .arg(&bash)
                .arg(&bare)
                .status()
                .expect("objcopy");
            assert!(stripped.success());
            let bare_key = key_of(&bare);
            cache.table_for(&bare_key, 0, bash_text, 4096, opener(bare.clone()));
            finish(&mut cache, &mut maps, 1);
            assert_eq!(
                cache.table_for(&bare_key, 0, bash_text, 4096, opener(bare)),
                Lookup::Absent
            );
            assert_eq!(cache.stats().failed, 1);
        }

        /// Two files whose tables do not fit together, both sampled all the time (a build
        /// machine's compilers): the one loaded first stays, the other is unwound by frame
        /// pointer, and nothing is built or loaded again until the retry is due, instead of
        /// evicting and loading one for the other every round.
        #[test]
        fn a_working_set_larger_than_the_budget_does_not_thrash() {
            let (libc, bash) = (libc(), PathBuf::from("/bin/bash"));
            let (libc_key, bash_key) = (key_of(&libc), key_of(&bash));
            let (libc_text, bash_text) = (text_offset(&libc), text_offset(&bash));
            let mut maps = RecordingMaps::default();
            let mut cache = TableCache::new(400 << 10, 8);
            let second = 1_000_000_000u64;
            let mut now = 1_000 * second;
            // Each round asks for `which`: libc (0), bash (1) or both (2), as a round's samples
            // would; the builder's results are taken first, as `Unwinder::sync` does.
            let ask = |cache: &mut TableCache, maps: &mut RecordingMaps, now: u64, which: u8| {
                cache.next_round(now);
                let mut lookups = (Lookup::Absent, Lookup::Absent);
                if which != 1 {
                    lookups.0 = cache.table_for(
                        &libc_key,
                        0x7f00_0000_0000,
                        libc_text,
                        4096,
                        opener(libc.clone()),
                    );
                }
                if which != 0 {
                    lookups.1 = cache.table_for(
                        &bash_key,
                        0x5600_0000_0000,
                        bash_text,
                        4096,
                        opener(bash.clone()),
                    );
                }
                if lookups.0 == Lookup::Pending || lookups.1 == Lookup::Pending {
                    finish(cache, maps, 1);
                }
                lookups
            };
            // Rounds every 100 ms for 25 s, the two files' processes sampled in turn: the old
            // rule (evict what this round has not used) loaded one table for the other in
            // every round.
            for round in 0..250u32 {
                ask(&mut cache, &mut maps, now, (round % 2) as u8);
                now += second / 10;
            }
            let stats = cache.stats();
            assert_eq!(stats.evicted, 0, "{stats:?}");
            assert_eq!(maps.loads, 1, "only the first table was loaded: {stats:?}");
            assert_eq!(maps.unloads, 0);
            assert!(stats.no_room >= 1, "{stats:?}");
            // The one in place is served; the other is absent (frame pointers) until its retry.
            let (a, b) = ask(&mut cache, &mut maps, now, 2);
            assert!(
                matches!(a, Lookup::Ready(_)) ^ matches!(b, Lookup::Ready(_)),
                "{a:?} {b:?}"
            );
            // Retries come once per NO_ROOM_RETRY_NANOS, not per round.
            assert!(
                stats.no_room <= 1 + 25 * second / NO_ROOM_RETRY_NANOS,
                "{stats:?}"
            );
            // Once the loaded one goes unused for MIN_IDLE_NANOS, the other gets its room at its
            // next retry.
            let (key, path, text, start) = if matches!(a, Lookup::Ready(_)) {
                (&bash_key, &bash, bash_text, 0x5600_0000_0000)
            } else {
                (&libc_key, &libc, libc_text, 0x7f00_0000_0000)
            };
            let deadline = now + MIN_IDLE_NANOS + NO_ROOM_RETRY_NANOS;
            let mut got = Lookup::Absent;
            while now <= deadline && !matches!(got, Lookup::Ready(_)) {
                cache.next_round(now);
                if cache.table_for(key, start, text, 4096, opener(path.clone())) == Lookup::Pending
                {
                    finish(&mut cache, &mut maps, 1);
                }
                got = cache.table_for(key, start, text, 4096, opener(path.clone()));
                now += second;
            }
            assert!(matches!(got, Lookup::Ready(_)), "{:?}", cache.stats());
            assert_eq!((maps.loads, cache.stats().evicted), (2, 1));
        }

        #[test]
        fn a_sampled_process_is_given_its_mappings_with_tables_once_they_are_built() {
            let pid = std::process::id();
            let mut table = ProcessTable::new(
                ProcFs::default(),
                Duration::from_secs(30),
                Filter::allow_all(),
            );
            table.load(pid, 1);
            let mut unwinder = Unwinder::new(32 << 20);
            let mut maps = RecordingMaps::default();
            let first = UnwindStatus {
                end: Some(UnwindEnd::NoProcess),
                ..UnwindStatus::default()
            };
            unwinder.on_sample(pid, &first, true);
            assert!(unwinder.is_waiting(pid));
            let deadline = Instant::now() + Duration::from_secs(30);
            while unwinder.is_waiting(pid) && Instant::now() < deadline {
                unwinder.sync(&mut table, &mut maps, 2);
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(!unwinder.is_waiting(pid), "given within 30 s");
            let given = maps.processes.get(&pid).expect("given").clone();
            let process = table.get(pid).expect("loaded");
            assert_eq!(given.len(), process.mappings.len().min(256));
            assert!(given.windows(2).all(|w| w[0].end <= w[1].start));
            // This test binary and libc have tables; every table named is loaded.
            let with_tables = given.iter().filter(|m| m.table != 0).count();
            assert!(with_tables >= 2, "{given:x?}");
            for m in given.iter().filter(|m| m.table != 0) {
                assert_eq!(maps.tables.get(&m.table).map(|t| t.0), Some(m.generation));
            }
            let stats = unwinder.stats();
            assert_eq!(stats.processes, 1);
            assert!(stats.cache.tables >= 2);

            // The walker reads the rows back as loaded.
            let m = given.iter().find(|m| m.table != 0).expect("a table");
            let mut rows_read = 0;
            for index in 0..4 {
                if maps.read_row(m.table, index).is_some() {
                    rows_read += 1;
                }
            }
            assert_eq!(rows_read, 4);

            // Exec or exit: its mappings go.
            unwinder.forget(pid);
            unwinder.sync(&mut table, &mut maps, 3);
            assert!(!maps.processes.contains_key(&pid));

            // A process whose samples are filtered out gets an empty list, so that its samples
            // stop carrying stack copies; it is not waited for.
            unwinder.on_sample(pid, &first, false);
            let mut filtered = ProcessTable::new(
                ProcFs::default(),
                Duration::from_secs(30),
                Filter::new(&crate::Config {
                    exclude: crate::ProcessSelector {
                        pids: vec![pid],
                        ..Default::default()
                    },
                    ..crate::Config::default()
                }),
            );
            filtered.load(pid, 4);
            unwinder.sync(&mut filtered, &mut maps, 5);
            assert_eq!(maps.processes.get(&pid).map(Vec::len), Some(0));
            assert!(!unwinder.is_waiting(pid));
        }
    }
}
