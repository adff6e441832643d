//! CPython stacks: finding an interpreter in a mapped file, what the BPF walker needs to
//! follow its frames, reading its code objects, and putting its frames in place of the
//! native `_PyEval_EvalFrameDefault` frames they ran in.
//!
//! Everything here reads files and memory of other processes: every size is bounded and
//! every value checked before it is used.

pub mod code;
pub mod detect;
pub mod merge;
pub mod offsets;

use code::CodeInfo;
use std::collections::HashMap;
use std::sync::Arc;

pub use detect::{Interpreter, PythonError, detect, minor_from_name};
pub use offsets::Offsets;

impl Interpreter {
    /// What the BPF walker needs for a process that maps this file with load bias
    /// `bias` (the address minus the file's virtual address).
    pub fn walker_record(&self, bias: u64) -> profcol_bpf::PythonProcess {
        let o = &self.offsets;
        profcol_bpf::PythonProcess {
            runtime: self.runtime.wrapping_add(bias),
            interp_head: o.runtime_interpreters_head,
            interp_next: o.interpreter_next,
            interp_threads: o.interpreter_threads_head,
            thread_next: o.thread_next,
            thread_id: o.thread_id,
            thread_frame: o.thread_frame,
            cframe_frame: o.cframe_current_frame,
            frame_code: o.frame_code,
            frame_back: o.frame_back,
            frame_instruction: o.frame_instruction,
            frame_marker: o.entry_marker.map(|m| (m.offset, m.value)),
            code_bytecode: o.code_bytecode,
            code_firstlineno: o.code_firstlineno,
            code_filename: o.code_filename,
            code_name: o.code_name,
            instruction_is_pointer: o.instruction_is_pointer,
        }
    }

    /// The load bias of a process's executable mapping of this file that starts at
    /// `start` with file offset `offset`.
    pub fn bias(&self, start: u64, offset: u64) -> u64 {
        start.wrapping_sub(offset).wrapping_sub(self.text_delta)
    }
}

/// A code object as sampled: its address, first line and identity.
type CodeKey = (u64, u32, u64);

/// Code objects read out of processes, by process, address and first line; what could
/// not be read is remembered as such. Bounded in bytes: past the budget it starts over.
#[derive(Debug, Default)]
pub struct CodeCache {
    processes: HashMap<u32, HashMap<CodeKey, Arc<CodeInfo>>>,
    bytes: usize,
    unknown: Option<Arc<CodeInfo>>,
    /// Code objects read, and reads that failed, since start.
    pub reads: u64,
    pub failures: u64,
}

/// What the cache holds at most.
const CODE_CACHE_BYTES: usize = 32 << 20;

impl CodeCache {
    /// The code object of `frame` in process `pid`, whose interpreter is `interpreter`
    /// loaded with `bias`; a stand-in named `<unknown Python code>` when it cannot be read.
    pub fn resolve(
        &mut self,
        procfs: &crate::procfs::ProcFs,
        pid: u32,
        interpreter: &Interpreter,
        bias: u64,
        frame: &merge::PyFrame,
    ) -> Arc<CodeInfo> {
        let key = (frame.code, frame.first_line, frame.identity);
        if let Some(found) = self.processes.get(&pid).and_then(|p| p.get(&key)) {
            return found.clone();
        }
        self.reads += 1;
        let read = procfs
            .memory(pid)
            .map_err(|e| (e.to_string(), false))
            .and_then(|memory| {
                code::read_code(
                    &memory,
                    &interpreter.offsets,
                    interpreter.code_type.wrapping_add(bias),
                    code::Sampled {
                        addr: frame.code,
                        first_line: frame.first_line,
                        identity: frame.identity,
                    },
                )
                // What the code object said is remembered; memory that could not be
                // read (a process going away, a page not there yet) is read again.
                .map_err(|e| {
                    let lasting = !matches!(e, code::CodeError::Unreadable(_));
                    (e.to_string(), lasting)
                })
            });
        let info = match read {
            Ok(info) => Arc::new(info),
            Err((e, lasting)) => {
                self.failures += 1;
                tracing::debug!(pid, code = frame.code, "Python code object not read: {e}");
                let unknown = self.unknown_code();
                if !lasting {
                    return unknown;
                }
                unknown
            }
        };
        self.bytes += info.size();
        if self.bytes > CODE_CACHE_BYTES {
            self.processes.clear();
            self.bytes = info.size();
        }
        self.processes
            .entry(pid)
            .or_default()
            .insert(key, info.clone());
        info
    }

    /// The stand-in for a code object that could not be read.
    fn unknown_code(&mut self) -> Arc<CodeInfo> {
        self.unknown
            .get_or_insert_with(|| {
                Arc::new(CodeInfo::new(
                    "<unknown Python code>".to_owned(),
                    String::new(),
                    0,
                    Vec::new(),
                    offsets::LineTable::Lnotab,
                ))
            })
            .clone()
    }

    /// The process's image is gone: so are its code objects.
    pub fn forget(&mut self, pid: u32) {
        if let Some(codes) = self.processes.remove(&pid) {
            let freed: usize = codes.values().map(|c| c.size()).sum();
            self.bytes = self.bytes.saturating_sub(freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::code::{line_at, read_code};
    use super::merge::{Merged, PyFrame, groups, merge};
    use super::offsets::{LineTable, for_minor};
    use super::*;
    use crate::elf::ElfFile;
    use crate::memory::Memory;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    /// Every CPython on this machine: (label, interpreter program, the file holding the
    /// interpreter). Missing ones are left out, saying so.
    pub(crate) fn pythons() -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (version, micro) in [
            ("3.8", "18"),
            ("3.9", "18"),
            ("3.10", "13"),
            ("3.11", "7"),
            ("3.12", "1"),
            ("3.13", "0"),
        ] {
            let root = format!("/root/.pyenv/versions/{version}.{micro}");
            let lib = format!("{root}/lib/libpython{version}.so.1.0");
            if std::path::Path::new(&lib).exists() {
                out.push((
                    format!("pyenv {version}"),
                    format!("{root}/bin/python{version}"),
                    lib,
                ));
            } else {
                eprintln!("skipping pyenv {version}: {lib} is not installed");
            }
        }
        if std::path::Path::new("/usr/bin/python3.11").exists() {
            out.push((
                "Debian 3.11".to_owned(),
                "/usr/bin/python3.11".to_owned(),
                "/usr/bin/python3.11".to_owned(),
            ));
        }
        out
    }

    fn detect_file(path: &str) -> Interpreter {
        let elf = ElfFile::open(std::path::Path::new(path)).expect(path);
        detect(path, &elf).expect(path).expect(path)
    }

    #[test]
    fn names_give_the_minor_version() {
        assert_eq!(minor_from_name("/usr/lib/libpython3.11.so.1.0"), Some(11));
        assert_eq!(minor_from_name("/usr/bin/python3.8"), Some(8));
        assert_eq!(minor_from_name("python3.10d"), Some(10));
        assert_eq!(minor_from_name("/usr/bin/python3"), None);
        assert_eq!(minor_from_name("/opt/python3.11-config"), None);
        assert_eq!(minor_from_name("libc.so.6"), None);
    }

    #[test]
    fn every_cpython_here_is_found_with_its_version_and_layout() {
        for (label, _, file) in pythons() {
            let found = detect_file(&file);
            let minor: u8 = label.rsplit('.').next().unwrap().parse().unwrap();
            assert_eq!((found.major, found.minor), (3, minor), "{label}");
            assert_eq!(found.micro.is_some(), minor >= 11, "{label}");
            // The table's offsets are the binary's own: 3.13 describes itself, and for 3.11+
            // the bytecode start was checked against PyCode_Type.tp_basicsize.
            assert_eq!(Some(found.offsets), for_minor(minor), "{label}");
            assert!(
                found.eval_ranges[0].1 - found.eval_ranges[0].0 > 30_000,
                "{label}"
            );
        }
    }

    #[test]
    fn debians_stripped_python_has_its_cold_evaluator_part() {
        if !std::path::Path::new("/usr/bin/python3.11").exists() {
            eprintln!("skipping: /usr/bin/python3.11 is not installed");
            return;
        }
        let found = detect_file("/usr/bin/python3.11");
        assert_eq!(found.version(), "3.11.2");
        assert_eq!(found.runtime, 0xa5b740);
        assert_eq!(
            found.eval_ranges,
            vec![(0x52b0f0, 0x538a4c), (0x430f05, 0x43455e)]
        );
        assert!(found.is_eval(0x431000) && !found.is_eval(0x430f00));
    }

    #[test]
    fn files_that_are_not_cpython_are_not_found() {
        for path in ["/bin/sh", "/root/.pyenv/versions/3.11.7/bin/python3.11"] {
            if let Ok(elf) = ElfFile::open(std::path::Path::new(path)) {
                // pyenv's launcher only links libpython: the interpreter is found there.
                assert_eq!(detect(path, &elf), Ok(None), "{path}");
            }
        }
    }

    #[test]
    fn line_tables_agree_with_cpython_itself_at_every_instruction() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/python/lines.py");
        for (label, python, _) in pythons() {
            let minor: u8 = label.rsplit('.').next().unwrap().parse().unwrap();
            let format = for_minor(minor).unwrap().line_table;
            let out = Command::new(&python).arg(script).output().expect("python");
            assert!(
                out.status.success(),
                "{label}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let (mut checked, mut codes) = (0, 0);
            for line in String::from_utf8(out.stdout).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let first = v["first"].as_u64().unwrap() as u32;
                let table = hex::decode(v["table"].as_str().unwrap()).unwrap();
                codes += 1;
                for pair in v["lines"].as_array().unwrap() {
                    let position = pair[0].as_i64().unwrap() as i32;
                    let want = pair[1].as_u64().map(|l| l as u32);
                    let got = line_at(format, &table, first, position);
                    assert_eq!(got, want, "{label}: position {position} of {v}");
                    checked += 1;
                }
            }
            assert!(
                codes > 100 && checked > 5000,
                "{label}: {codes} codes, {checked} positions"
            );
        }
    }

    #[test]
    fn malformed_line_tables_give_no_line_and_do_not_panic() {
        for format in [
            LineTable::Lnotab,
            LineTable::Ranges310,
            LineTable::Locations,
        ] {
            for table in [
                &[][..],
                &[0x00][..],
                &[0xff; 9][..],
                &[0xf0, 0xff, 0xff, 0xff][..],
            ] {
                for position in [-1, 0, 1, 1000, i32::MAX] {
                    let _ = line_at(format, table, 10, position);
                }
            }
        }
        // A location entry that is not at an entry start.
        assert_eq!(line_at(LineTable::Locations, &[0x05, 0x05], 1, 0), None);
        assert_eq!(line_at(LineTable::Lnotab, &[], 7, 100), Some(7));
    }

    const NO_MARKER: Option<offsets::EntryMarker> = None;

    fn frame(entry: bool) -> PyFrame {
        PyFrame {
            code: 1,
            position: 0,
            first_line: 1,
            entry,
            identity: 0,
        }
    }

    #[test]
    fn groups_follow_each_versions_rule() {
        let chain = [frame(false), frame(true), frame(false), frame(true)];
        assert_eq!(groups(&chain, NO_MARKER), vec![0..1, 1..2, 2..3, 3..4]);
        let entry = for_minor(11).unwrap().entry_marker;
        assert_eq!(groups(&chain, entry), vec![0..2, 2..4]);
        let shim = for_minor(12).unwrap().entry_marker;
        assert_eq!(groups(&chain, shim), vec![0..1, 2..3]);
        // A shim at the leaf (the evaluator entering): an empty group for its frame.
        let entering = [frame(true), frame(false), frame(true)];
        assert_eq!(groups(&entering, shim), vec![0..0, 1..2]);
        use Merged::*;
        let merged = merge(3, |i| i < 2, &entering, shim);
        assert_eq!(merged, vec![Native(0), Python(1), Native(2)]);
        // A chain cut before its last marker still forms a group.
        assert_eq!(groups(&chain[..3], entry), vec![0..2, 2..3]);
    }

    #[test]
    fn python_groups_replace_evaluator_frames_and_native_frames_stay() {
        // Native, leaf first: zlib, a C call, eval, eval, main.
        let is_eval = |i: usize| i == 2 || i == 3;
        let chain = [frame(false), frame(true), frame(true)];
        let merged = merge(5, is_eval, &chain, for_minor(11).unwrap().entry_marker);
        use Merged::*;
        assert_eq!(
            merged,
            vec![
                Native(0),
                Native(1),
                Python(0),
                Python(1),
                Python(2),
                Native(4)
            ]
        );
        // Fewer groups than evaluator frames: the rest stay native.
        let merged = merge(5, is_eval, &chain[..2], for_minor(11).unwrap().entry_marker);
        assert_eq!(
            merged,
            vec![
                Native(0),
                Native(1),
                Python(0),
                Python(1),
                Native(3),
                Native(4)
            ]
        );
        // A native walk that ended early: the Python frames left go at the root end.
        let merged = merge(1, |_| false, &chain, NO_MARKER);
        assert_eq!(merged, vec![Native(0), Python(0), Python(1), Python(2)]);
    }

    /// Memory in a buffer at a base address.
    struct Buffer(u64, Vec<u8>);

    impl Memory for Buffer {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let Some(at) = addr.checked_sub(self.0) else {
                return false;
            };
            match self.1.get(at as usize..at as usize + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    true
                }
                None => false,
            }
        }
    }

    /// The code object at `addr` as sampled with `first_line`, named by the buffer's
    /// strings at 0x1200 (file name and name alike).
    fn sampled(addr: u64, first_line: u32) -> code::Sampled {
        code::Sampled {
            addr,
            first_line,
            identity: code::identity(0x1200, 0x1200),
        }
    }

    #[test]
    fn hostile_code_objects_are_refused_with_a_reason() {
        let offsets = for_minor(12).unwrap();
        let mut mem = vec![0u8; 4096];
        mem[8..16].copy_from_slice(&0x5000u64.to_le_bytes()); // ob_type
        mem[68..72].copy_from_slice(&7u32.to_le_bytes()); // first line
        // File name, name and qualified name: one string object at 0x1200 (empty for now).
        let string_at = 0x1000 + 512;
        for at in [120usize, 128, 112] {
            mem[at..at + 8].copy_from_slice(&(string_at as u64).to_le_bytes());
        }
        let buffer = |m: &Vec<u8>| Buffer(0x1000, m.clone());
        assert_eq!(
            read_code(&buffer(&mem), &offsets, 0x6000, sampled(0x1000, 7)),
            Err(code::CodeError::NotCode(0x1000))
        );
        assert_eq!(
            read_code(&buffer(&mem), &offsets, 0x5000, sampled(0x1000, 8)),
            Err(code::CodeError::Changed(0x1000))
        );
        // Another code object at the same address and line: its names are others.
        let other = code::Sampled {
            identity: code::identity(0x1200, 0x1300),
            ..sampled(0x1000, 7)
        };
        assert_eq!(
            read_code(&buffer(&mem), &offsets, 0x5000, other),
            Err(code::CodeError::Changed(0x1000))
        );
        assert!(matches!(
            read_code(&buffer(&mem), &offsets, 0x5000, sampled(0x1000, 7)),
            Err(code::CodeError::BadString(..))
        ));
        assert_eq!(
            read_code(&buffer(&mem), &offsets, 0x5000, sampled(0x9000, 7)),
            Err(code::CodeError::Unreadable(0x9000))
        );
        // A name that claims to be a gigabyte long.
        mem[512 + 16..512 + 24].copy_from_slice(&(1u64 << 30).to_le_bytes());
        mem[512 + 32..512 + 36].copy_from_slice(&((1u32 << 2) | (1 << 5) | (1 << 6)).to_le_bytes());
        assert!(matches!(
            read_code(&buffer(&mem), &offsets, 0x5000, sampled(0x1000, 7)),
            Err(code::CodeError::BadString(_, "too long"))
        ));
        // A sane name, and a line table that claims to be huge.
        mem[512 + 16..512 + 24].copy_from_slice(&3u64.to_le_bytes());
        mem[512 + 40..512 + 43].copy_from_slice(b"abc");
        let table_at = 0x1000 + 1024u64;
        mem[136..144].copy_from_slice(&table_at.to_le_bytes());
        mem[1024 + 16..1024 + 24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            read_code(&buffer(&mem), &offsets, 0x5000, sampled(0x1000, 7)),
            Err(code::CodeError::LineTableTooLong(..))
        ));
        mem[1024 + 16..1024 + 24].copy_from_slice(&2u64.to_le_bytes());
        mem[1024 + 32..1024 + 34].copy_from_slice(&[0x80 | (13 << 3), 0x02]);
        let code =
            read_code(&buffer(&mem), &offsets, 0x5000, sampled(0x1000, 7)).expect("a code object");
        assert_eq!(
            (code.name.as_str(), code.filename.as_str(), code.first_line),
            ("abc", "abc", 7)
        );
        assert_eq!(code.line(0), 8);
    }

    #[test]
    fn code_objects_of_a_live_process_are_read_with_names_files_and_lines() {
        let script = [
        "import sys",
        "class Klass:",
        "    def méthode(self):",
        "        return 1",
        "code = Klass.méthode.__code__",
        "print(id(code), id(type(code)), code.co_firstlineno, id(code.co_filename), id(code.co_name), flush=True)",
        "sys.stdin.read()",
    ]
    .join("\n");
        for (label, python, _) in pythons() {
            let minor: u8 = label.rsplit('.').next().unwrap().parse().unwrap();
            let offsets = for_minor(minor).unwrap();
            let mut child = Command::new(&python)
                .args(["-c", &script])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python");
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            let v: Vec<u64> = line
                .split_whitespace()
                .map(|w| w.parse().unwrap())
                .collect();
            let memory = crate::procfs::ProcFs::default()
                .memory(child.id())
                .expect("mem");
            let sampled = code::Sampled {
                addr: v[0],
                first_line: v[2] as u32,
                identity: code::identity(v[3], v[4]),
            };
            let code = read_code(&memory, &offsets, v[1], sampled);
            drop(child.stdin.take());
            let _ = child.wait();
            let code = code.unwrap_or_else(|e| panic!("{label}: {e}"));
            let want = if minor >= 11 {
                "Klass.méthode"
            } else {
                "méthode"
            };
            assert_eq!(
                (code.name.as_str(), code.filename.as_str(), code.first_line),
                (want, "<string>", 3),
                "{label}"
            );
        }
    }
}
