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
mod tests;
