//! profcol's BPF side: a whole-system CPU profiler whose user stacks are walked in BPF
//! with unwind tables user space loads (frame pointers where a frame has none).
//!
//! A `perf_event` BPF program runs on a software cpu-clock event on every
//! online CPU at [`ProfilerConfig::frequency_hz`] and sends each sample
//! (pid, tid, cpu, comm, cgroup, time, kernel and user stack) to user space
//! through a BPF ring buffer; `tp_btf` programs on the scheduler's exec, fork
//! and exit tracepoints report process lifecycle events on the same ring.
//! Pid and cgroup filters are applied in the kernel before any stack is taken.
//!
//! The BPF object is compiled ahead of time (`bpf/build-object.sh`) and
//! committed as `src/bpf/profiler.bpf.o`; it is embedded here and loaded with
//! libbpf (vendored and linked statically), relocated with CO-RE against the
//! running kernel's BTF. Building needs no clang and running needs no
//! libbpf/libelf on the host.
//!
//! Needs Linux ≥ 5.17 (`bpf_loop`) with BTF (`/sys/kernel/btf/vmlinux`) and root or
//! `CAP_BPF` + `CAP_PERFMON` + `CAP_SYS_PTRACE` (+ `CAP_SYS_RESOURCE` before Linux 5.11).
//!
//! ```no_run
//! use std::time::Duration;
//! use profcol_bpf::{Event, Profiler, ProfilerConfig};
//!
//! let mut profiler = Profiler::start(&ProfilerConfig { frequency_hz: 19, ..ProfilerConfig::default() })?;
//! let offset = profcol_bpf::monotonic_to_unix_nanos_offset();
//! profiler.poll(Duration::from_millis(250), &mut |event| {
//!     if let Event::Sample(s) = event {
//!         let unix_ns = i128::from(s.time_ns) + offset;
//!         println!("{unix_ns} {} {} {:x?}", s.pid, s.comm, s.user_stack);
//!     }
//! })?;
//! # Ok::<(), profcol_bpf::BpfError>(())
//! ```

mod clock;
mod event;
mod loader;
mod perf;
mod privileges;
mod switch_stack;
mod unwind;
mod unwind_types;

pub use clock::monotonic_to_unix_nanos_offset;
pub use loader::Profiler;
pub use privileges::check_privileges;
pub use unwind::{
    MAX_PROCESS_MAPPINGS, MAX_TABLE_ROWS, MAX_UNWIND_TABLES, PROCESS_MAPPINGS_BYTES,
    UNWIND_ROW_SIZE, UnwindStats,
};
pub use unwind_types::{StackCopy, UnwindEnd, UnwindMapping};
/// The most stack bytes a [`StackCopy`] holds.
pub const STACK_COPY_BYTES: usize = event::STACK_COPY_BYTES;

/// The most frames kept per stack; a stack that fills them is marked truncated.
pub const MAX_FRAMES: usize = event::MAX_FRAMES;
/// The most pids an include or exclude set can hold.
pub const MAX_PID_FILTER: usize = 16384;
/// The most cgroup ids an include or exclude set can hold.
pub const MAX_CGROUP_FILTER: usize = 4096;

/// What to sample and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilerConfig {
    /// Samples per second on each CPU (19 by default: a prime, to avoid
    /// lockstep with periodic work). At most `kernel.perf_event_max_sample_rate`.
    pub frequency_hz: u64,
    /// Only these processes (tgids) are sampled; empty means all.
    pub include_pids: Vec<u32>,
    /// These processes are never sampled (wins over `include_pids`).
    pub exclude_pids: Vec<u32>,
    /// Only tasks in these cgroups (cgroup v2 ids, the inode number of the
    /// cgroup directory) are sampled; empty means all.
    pub include_cgroups: Vec<u64>,
    /// Tasks in these cgroups are never sampled (wins over `include_cgroups`).
    pub exclude_cgroups: Vec<u64>,
    /// Ring buffer size, rounded up to a power of two of at least one page.
    /// A full ring drops samples, counted by [`Profiler::lost_samples`].
    pub ring_buffer_bytes: usize,
    /// Skip samples of the calling process (the profiler itself).
    pub exclude_self: bool,
    /// Which share of the times a thread leaves the CPU are recorded as off-CPU
    /// samples; [`OffCpuShare::OFF`] (the default) attaches nothing for it.
    pub off_cpu: OffCpuShare,
}

/// The share of switch-outs recorded as off-CPU samples, as the BPF side compares it: a
/// random u32 below it is recorded, and `u32::MAX` records every one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct OffCpuShare(u32);

impl OffCpuShare {
    /// Off-CPU profiling off.
    pub const OFF: OffCpuShare = OffCpuShare(0);
    /// Every switch-out recorded.
    pub const ALL: OffCpuShare = OffCpuShare(u32::MAX);

    /// The share for a probability in [0, 1] (clamped; NaN is off). A probability above 0
    /// never rounds to off.
    pub fn from_probability(p: f64) -> OffCpuShare {
        if p.is_nan() || p <= 0.0 {
            return OffCpuShare::OFF;
        }
        if p >= 1.0 {
            return OffCpuShare::ALL;
        }
        // In (0, 2^32): the cast saturates and cannot wrap.
        OffCpuShare(((p * 4_294_967_296.0) as u32).max(1))
    }

    /// The probability that a switch-out is recorded: what a recorded off-CPU time is
    /// divided by for an unbiased total.
    pub fn probability(self) -> f64 {
        if self == OffCpuShare::ALL {
            1.0
        } else {
            f64::from(self.0) / 4_294_967_296.0
        }
    }

    /// Whether off-CPU profiling is on.
    pub fn is_on(self) -> bool {
        self.0 != 0
    }

    pub(crate) fn raw(self) -> u32 {
        self.0
    }
}

impl Default for ProfilerConfig {
    fn default() -> Self {
        ProfilerConfig {
            frequency_hz: 19,
            include_pids: Vec::new(),
            exclude_pids: Vec::new(),
            include_cgroups: Vec::new(),
            exclude_cgroups: Vec::new(),
            ring_buffer_bytes: 256 * 1024,
            exclude_self: false,
            off_cpu: OffCpuShare::OFF,
        }
    }
}

/// One record from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A CPU or off-CPU sample.
    Sample(Sample),
    /// Process `pid` called execve; `filename` is the path it passed (may be
    /// relative; empty if the kernel could not read it: use `/proc/PID/exe`).
    Exec {
        /// The process (tgid).
        pid: u32,
        /// The path given to execve.
        filename: String,
    },
    /// A new process (not a thread) was created.
    Fork {
        /// The creating process (tgid).
        parent_pid: u32,
        /// The new process.
        child_pid: u32,
    },
    /// The last thread of process `pid` exited.
    Exit {
        /// The process (tgid).
        pid: u32,
    },
}

/// One sample: what was running on a CPU when the sampling clock fired, or (with
/// [`Sample::off_cpu_ns`]) where a thread was when it left the CPU. This one type goes
/// from the ring buffer to the profiling receiver's engine; the default is an empty
/// sample (for samplers other than this one, and tests).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sample {
    /// Process id (tgid), in the initial pid namespace.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The CPU the sample was taken on.
    pub cpu: u32,
    /// The thread's name (`comm`, at most 15 bytes).
    pub comm: String,
    /// The task's cgroup v2 id (`bpf_get_current_cgroup_id`).
    pub cgroup_id: u64,
    /// `bpf_ktime_get_ns`: CLOCK_MONOTONIC nanoseconds (not counting suspend).
    /// Add [`monotonic_to_unix_nanos_offset`] for Unix time.
    pub time_ns: u64,
    /// Kernel return addresses, innermost first; empty when the CPU was in user mode.
    pub kernel_stack: Vec<u64>,
    /// User frames, innermost first: the instruction pointer, then return
    /// addresses (after a signal frame, the interrupted instruction).
    pub user_stack: Vec<u64>,
    /// The kernel stack filled all [`MAX_FRAMES`] slots: outer frames may be missing
    /// (an off-CPU sample's `kernel_stack` is then a few frames shorter, its tracing
    /// frames cut).
    pub kernel_truncated: bool,
    /// The user walk did not reach the outermost frame ([`Sample::unwind_end`]
    /// says why): outer frames are missing.
    pub user_truncated: bool,
    /// Why the user walk ended.
    pub unwind_end: UnwindEnd,
    /// A frame was outside every mapping given with
    /// [`Profiler::set_process_mappings`]: they are out of date (a library
    /// loaded since).
    pub unknown_mapping: bool,
    /// A frame was in a mapping whose table slot no longer holds its table.
    pub missing_table: bool,
    /// For a process with no mappings yet ([`UnwindEnd::NoProcess`]): its user
    /// registers and the top of its stack, to unwind once the tables are there
    /// (`user_stack` holds the kernel's frame-pointer walk meanwhile).
    pub stack_copy: Option<StackCopy>,
    /// An off-CPU sample: nanoseconds between the thread leaving the CPU and running
    /// again (not yet divided by [`OffCpuShare::probability`]); the stacks are where it
    /// waited. `None` for a CPU sample.
    pub off_cpu_ns: Option<u64>,
    /// Python frames of the thread, innermost first, where its process runs CPython
    /// ([`Profiler::set_python_process`]).
    pub python_stack: Vec<PythonFrame>,
    /// Why the Python walk ended.
    pub python_end: PythonEnd,
}

/// One Python frame as the walker read it: which code object ran, and where in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PythonFrame {
    /// The code object's address.
    pub code: u64,
    /// The instruction position: bytes (3.8/3.9) or code units (3.10+); -1 before the
    /// first instruction.
    pub position: i32,
    /// `co_firstlineno` read with the frame (its low 24 bits): with `code`, which code
    /// object it was, since one at the same address may be freed and another made.
    pub first_line: u32,
    /// The frame carries its version's entry mark (3.11 `is_entry`, 3.12+ a C-stack
    /// shim frame).
    pub entry: bool,
    /// The code object's identity as read with the frame: its `co_filename` and
    /// `co_name` pointers, mixed as `filename ^ name * 0x9E3779B97F4A7C15` (wrapping); 0
    /// when it could not be read.
    pub identity: u64,
}

/// Why the Python walk of a sample ended (`enum python_end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PythonEnd {
    /// Not a Python process, or not walked (a sample with a stack copy).
    #[default]
    None,
    /// The thread's first frame was reached.
    Complete,
    /// The thread has no thread state: it does not run Python.
    NoThread,
    /// The interpreter's memory could not be read.
    ReadFault,
    /// The most frames a sample holds were recorded.
    Depth,
}

impl PythonEnd {
    pub(crate) fn from_code(code: u16) -> Self {
        match code {
            1 => PythonEnd::Complete,
            2 => PythonEnd::NoThread,
            3 => PythonEnd::ReadFault,
            4 => PythonEnd::Depth,
            _ => PythonEnd::None,
        }
    }
}

/// Where one process's CPython keeps its threads and frames (`struct python_proc`):
/// the address of `_PyRuntime` and the offsets of its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonProcess {
    /// The address of `_PyRuntime` in the process.
    pub runtime: u64,
    /// `_PyRuntime.interpreters.head`.
    pub interp_head: u16,
    /// `PyInterpreterState.next`.
    pub interp_next: u16,
    /// `PyInterpreterState`'s first thread state.
    pub interp_threads: u16,
    /// `PyThreadState.next`.
    pub thread_next: u16,
    /// `PyThreadState.thread_id`: `pthread_self()`, the thread's fs base.
    pub thread_id: u16,
    /// The thread state's current frame (or `_PyCFrame` pointer, 3.11/3.12).
    pub thread_frame: u16,
    /// Through `_PyCFrame` (3.11/3.12): its `current_frame`.
    pub cframe_frame: Option<u16>,
    /// A frame's code object.
    pub frame_code: u16,
    /// A frame's caller.
    pub frame_back: u16,
    /// A frame's instruction position (`int`), or pointer when `instruction_is_pointer`.
    pub frame_instruction: u16,
    /// The entry mark's byte in a frame, and its value.
    pub frame_marker: Option<(u16, u8)>,
    /// Where a code object's bytecode starts (3.11+).
    pub code_bytecode: u16,
    /// A code object's `co_firstlineno`.
    pub code_firstlineno: u16,
    /// A code object's `co_filename`.
    pub code_filename: u16,
    /// A code object's `co_name`.
    pub code_name: u16,
    /// The frame holds a pointer into the bytecode (3.11+), not an index.
    pub instruction_is_pointer: bool,
}

impl PythonProcess {
    /// The record as `profiler.bpf.c` lays it out (`struct python_proc`).
    pub fn to_bytes(&self) -> [u8; 48] {
        const NONE: u16 = 0xffff;
        let mut b = [0u8; 48];
        b[..8].copy_from_slice(&self.runtime.to_ne_bytes());
        let words = [
            self.interp_head,
            self.interp_next,
            self.interp_threads,
            self.thread_next,
            self.thread_id,
            self.thread_frame,
            self.cframe_frame.unwrap_or(NONE),
            self.frame_code,
            self.frame_back,
            self.frame_instruction,
            self.frame_marker.map_or(NONE, |(at, _)| at),
            self.code_bytecode,
            self.code_firstlineno,
        ];
        for (i, w) in words.iter().enumerate() {
            b[8 + 2 * i..10 + 2 * i].copy_from_slice(&w.to_ne_bytes());
        }
        b[34] = self.frame_marker.map_or(0, |(_, value)| value);
        b[35] = u8::from(self.instruction_is_pointer);
        // What the walker reads at once: the frame up to its last field used, and the
        // code object from its first line to the end of its last field used.
        let instruction = if self.instruction_is_pointer { 8 } else { 4 };
        let frame_len = [
            self.frame_code + 8,
            self.frame_back + 8,
            self.frame_instruction + instruction,
            self.frame_marker.map_or(0, |(at, _)| at + 1),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        let code_start = self
            .code_firstlineno
            .min(self.code_filename)
            .min(self.code_name);
        let code_end = (self.code_firstlineno + 4)
            .max(self.code_filename + 8)
            .max(self.code_name + 8);
        let tail = [
            self.code_filename,
            self.code_name,
            frame_len,
            code_start,
            code_end - code_start,
        ];
        for (i, w) in tail.iter().enumerate() {
            b[36 + 2 * i..38 + 2 * i].copy_from_slice(&w.to_ne_bytes());
        }
        b
    }
}

/// Why the profiler could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The process lacks what the profiler needs; `missing` names each
    /// capability (e.g. `"CAP_BPF"`) or `"readable /proc"`.
    #[error(
        "missing privileges: {}; run as root (CAP_SYS_ADMIN) or grant CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE (and CAP_SYS_RESOURCE before Linux 5.11)",
        missing.join(", ")
    )]
    MissingPrivileges {
        /// What is missing, in a fixed order.
        missing: Vec<&'static str>,
    },
    /// The kernel cannot run the profiler (no BTF, no perf events).
    #[error("unsupported kernel: {0}")]
    Unsupported(String),
    /// The configuration is invalid.
    #[error("invalid profiler config: {0}")]
    Config(String),
    /// Loading the BPF object failed (the message includes libbpf's log, with
    /// the verifier's output when it rejected a program).
    #[error("loading the BPF profiler failed: {0}")]
    Load(String),
    /// Opening perf events or attaching a program failed.
    #[error("attaching the BPF profiler failed: {0}")]
    Attach(String),
    /// Reading the ring buffer failed.
    #[error("polling the BPF ring buffer failed: {0}")]
    Poll(String),
    /// Updating a BPF map (filters) failed.
    #[error("updating BPF map {map} failed: {message}")]
    Map {
        /// The map's name.
        map: &'static str,
        /// What went wrong.
        message: String,
    },
}
