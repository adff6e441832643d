//! `profiling` receiver, user side: raw eBPF CPU samples in, OTLP profiles out.
//!
//! The BPF sampler (`profcol-bpf`, driven by [`bpf_source`]) hands over [`RawSample`]s and [`ProcessEvent`]s; the
//! [`Engine`] tracks processes ([`process`]), resolves user addresses to (mapping, file
//! offset), symbolizes on the host ([`symbolize`]: kallsyms, ELF/DWARF through blazesym,
//! Go's `.gopclntab`) and builds one [`ProfileBatch`] per flush ([`profile_builder`]) in the shape
//! the OpenTelemetry eBPF profiler emits.
//!
//! The engine does no threading of its own besides the symbolizer's: the receiver around
//! it calls [`Engine::on_sample`] / [`Engine::on_process_event`] as events come and
//! [`Engine::flush`] every `reporter_interval`. It is `Send`, so it can move to the
//! thread that polls the sampler.

#[cfg(test)]
mod attacker_tests;
pub mod bpf_source;
pub mod config;
pub mod elf;
pub mod gopclntab;
pub mod memory;
pub mod process;
pub mod process_context;
pub mod procfs;
pub mod profile_builder;
pub mod python;
pub mod receiver;
pub mod safe_file;
pub mod schedule;
pub mod symbolize;
#[cfg(test)]
mod testutil;
pub mod unwind;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use profcol_core::pdata::ProfileBatch;

pub use config::{Config, ErrorMode, Filter, NamePattern, ProcessSelector};
pub use process::{Process, ProcessTable};
pub use procfs::ProcFs;
pub use profile_builder::{BatchMeta, Frame, ProfileBuilder, SCOPE_NAME, SampleKind, Symbols};
pub use receiver::{
    ProfilingReceiverFactory, SampleSource, SourceError, SourceEvent, SourceOpener,
};
pub use symbolize::{FrameType, Symbolizer, SymbolizerOptions};

/// One sample from the BPF sampler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawSample {
    /// Thread group id (the process).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    pub cpu: u32,
    /// The thread's name (`comm`).
    pub comm: String,
    /// Not used: the container comes from `/proc/<pid>/cgroup`.
    pub cgroup_id: u64,
    /// Wall-clock time of the sample (unix ns; the sampler converts from boot time). 0
    /// means "now".
    pub time_unix_nano: u64,
    /// Kernel return addresses, leaf first (empty when the sample hit user space).
    pub kernel_stack: Vec<u64>,
    /// User return addresses, leaf first.
    pub user_stack: Vec<u64>,
    /// Whether the sampler cut the kernel stack short.
    pub kernel_truncated: bool,
    /// Whether the sampler cut the user stack short.
    pub user_truncated: bool,
    /// What the sampler's walk of the user stack met.
    pub unwind: unwind::UnwindStatus,
    /// For a process the walker did not know yet: its registers and the top of its
    /// stack, unwound here once its tables are loaded (`user_stack` holds the
    /// frame-pointer walk meanwhile).
    pub stack_copy: Option<profcol_bpf::StackCopy>,
    /// An off-CPU sample: the nanoseconds the thread was off the CPU, already divided by
    /// the share of switches recorded (so that totals are unbiased). `None`: a CPU sample.
    pub off_cpu_ns: Option<u64>,
    /// Python frames of the thread, innermost first, where its process runs CPython:
    /// they take the place of the interpreter's native evaluator frames.
    pub python_stack: Vec<profcol_bpf::PythonFrame>,
    /// Why the sampler's Python walk ended (`Depth`: the outermost Python frames are
    /// missing).
    pub python_end: profcol_bpf::PythonEnd,
}

/// A process lifecycle event from the sampler (pids are thread-group ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// `filename` is the path given to execve: what names the process when it is gone
    /// before its `/proc` entry could be read.
    Exec {
        pid: u32,
        filename: String,
    },
    Fork {
        parent_pid: u32,
        child_pid: u32,
    },
    Exit {
        pid: u32,
    },
}

/// Wall-clock time, replaceable in tests.
pub trait Clock: Send + Sync + 'static {
    fn now_unix_nano(&self) -> u64;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_nano(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// What the engine needs from the host.
#[derive(Clone)]
pub struct Environment {
    /// `host.name` on every resource; `None` leaves it out.
    pub host_name: Option<String>,
    pub procfs: ProcFs,
    /// Kernel symbols.
    pub kallsyms: PathBuf,
    /// The running kernel's notes (its GNU build id).
    pub kernel_notes: PathBuf,
    pub clock: Arc<dyn Clock>,
    /// Whether [`Engine::new`] reads every process in `/proc` (else processes are read as
    /// their events or samples come).
    pub scan_at_start: bool,
    /// The scope version (`profcol/profiling` + this).
    pub scope_version: String,
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("host_name", &self.host_name)
            .field("procfs", &self.procfs)
            .field("kallsyms", &self.kallsyms)
            .field("kernel_notes", &self.kernel_notes)
            .field("scan_at_start", &self.scan_at_start)
            .field("scope_version", &self.scope_version)
            .finish_non_exhaustive()
    }
}

impl Environment {
    /// This host: `/proc`, `/proc/kallsyms`, `/sys/kernel/notes`, the system clock and the
    /// host name from `/proc/sys/kernel/hostname`.
    pub fn host() -> Self {
        let procfs = ProcFs::default();
        Environment {
            host_name: read_host_name(&procfs),
            kallsyms: procfs.root().join("kallsyms"),
            procfs,
            kernel_notes: PathBuf::from("/sys/kernel/notes"),
            clock: Arc::new(SystemClock),
            scan_at_start: true,
            scope_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// `/proc/sys/kernel/hostname`, trimmed; `None` when unreadable or empty.
pub fn read_host_name(procfs: &ProcFs) -> Option<String> {
    std::fs::read_to_string(procfs.root().join("sys/kernel/hostname"))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The kernel's GNU build id (hex) from its notes file.
pub fn read_kernel_build_id(notes: &std::path::Path) -> Option<String> {
    let bytes = std::fs::read(notes).ok()?;
    let mut parsed = Vec::new();
    elf::parse_notes(&bytes, 4, &mut parsed);
    elf::gnu_build_id(&parsed).map(hex::encode)
}

/// Counts of input that was refused or broke something, shared by the process table
/// and the symbolizer thread.
#[derive(Debug, Default)]
pub struct BadInputCounters {
    /// Mapped files refused: a link, FIFO or device at the path, another inode than the
    /// mapped one, a malformed ELF or Go table.
    pub files_rejected: AtomicU64,
    /// Times the symbolizer thread panicked (or was gone) and was started again.
    pub symbolizer_restarts: AtomicU64,
    /// Process contexts (OTEP 4719) read, and those refused as malformed or oversized.
    pub contexts_read: AtomicU64,
    pub contexts_invalid: AtomicU64,
}

/// Counters since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Every sample handed to [`Engine::on_sample`].
    pub samples_received: u64,
    /// Samples dropped because the filter refused their process.
    pub samples_filtered: u64,
    /// Locations emitted without a function name, summed over batches (a location is
    /// counted once per batch however many samples use it).
    pub frames_unsymbolized: u64,
    /// Processes in the table now (including exited ones in their grace period).
    pub processes_tracked: usize,
    /// Batches returned by [`Engine::flush`].
    pub batches: u64,
    /// Mapped files refused ([`BadInputCounters::files_rejected`]).
    pub files_rejected: u64,
    /// Symbolizer thread restarts ([`BadInputCounters::symbolizer_restarts`]).
    pub symbolizer_restarts: u64,
    /// First samples of a process unwound here from their stack copy.
    pub stack_copies_unwound: u64,
    /// Samples of the idle task (pid 0) dropped (`send_idle_frames` off).
    pub samples_idle_dropped: u64,
    /// Samples dropped because their interval was not drawn (`probabilistic_threshold`).
    pub samples_probabilistic_dropped: u64,
    /// Samples of processes younger than `filter_min_process_age`, dropped.
    pub samples_young_dropped: u64,
    /// Samples of CPython processes by why their Python walk ended: complete, no thread
    /// state, a read that failed, the depth limit.
    pub python_walks: [u64; 4],
    /// Code objects read from Python processes, and reads that failed.
    pub python_codes_read: u64,
    pub python_codes_failed: u64,
    /// Process contexts (OTEP 4719) read, and refused as malformed or oversized.
    pub contexts_read: u64,
    pub contexts_invalid: u64,
}

/// Turns samples and process events into batches. See the crate docs.
pub struct Engine {
    config: Config,
    env: Environment,
    table: ProcessTable,
    builder: ProfileBuilder,
    symbolizer: Option<Arc<Symbolizer>>,
    meta: BatchMeta,
    stats: Stats,
    counters: Arc<BadInputCounters>,
    unwinder: unwind::Unwinder,
    /// Samples with a stack copy, waiting for their process's tables, and when they came.
    deferred: Vec<(RawSample, u64)>,
    probabilistic: schedule::Probabilistic,
    random: Box<dyn schedule::Random>,
    /// When the machine booted (unix ns), for process ages; `None` when unknown.
    boot_unix_nano: Option<u64>,
    /// Processes the filter refused that the sampler was told of (until their exec or
    /// exit), and the changes not yet handed to it.
    refused: HashSet<u32>,
    refusals: Vec<(u32, bool)>,
    /// Code objects of the Python processes sampled.
    python_codes: python::CodeCache,
}

/// Samples with stack copies held at most (8 KiB each); more are added with the
/// frame-pointer walk they carry.
const MAX_DEFERRED_SAMPLES: usize = 1024;
/// How long a sample waits at most for its process's tables (they come within
/// milliseconds of a sync; this only bounds what a stuck builder could hold).
const MAX_DEFER_NANOS: u64 = 30_000_000_000;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("env", &self.env)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine for a (validated) config. Reads every process in `/proc` when
    /// `env.scan_at_start`, and starts the symbolizer thread when `symbolize` is on.
    pub fn new(config: Config, env: Environment) -> Self {
        let now = env.clock.now_unix_nano();
        let filter = Filter::new(&config);
        let counters = Arc::new(BadInputCounters::default());
        let mut table = ProcessTable::with_counters(
            env.procfs.clone(),
            config.process_grace_period,
            filter,
            counters.clone(),
        )
        .with_env_vars(&config.include_env_vars);
        if env.scan_at_start {
            let n = table.scan(now);
            tracing::debug!(processes = n, "read /proc");
        }
        let symbolizer = config.symbolize.then(|| {
            Arc::new(Symbolizer::with_counters(
                SymbolizerOptions {
                    kallsyms: env.kallsyms.clone(),
                    ..SymbolizerOptions::default()
                },
                counters.clone(),
            ))
        });
        let meta = BatchMeta {
            host_name: env.host_name.clone(),
            scope_version: env.scope_version.clone(),
            period_nanos: config.period_nanos(),
            kernel_build_id: read_kernel_build_id(&env.kernel_notes),
        };
        let python_off = config
            .interpreters
            .get("python")
            .is_some_and(|python| python.disabled);
        let unwinder =
            unwind::Unwinder::new(config.unwind_tables_max_memory_mib as usize * (1 << 20))
                .with_python(!python_off);
        let probabilistic = schedule::Probabilistic::new(
            config.probabilistic_interval,
            config.probabilistic_threshold,
            now,
        );
        let boot_unix_nano = boot_time(&env.procfs, now);
        Engine {
            unwinder,
            deferred: Vec::new(),
            probabilistic,
            random: Box::new(schedule::XorShift::seeded()),
            boot_unix_nano,
            refused: HashSet::new(),
            refusals: Vec::new(),
            python_codes: python::CodeCache::default(),
            config,
            env,
            table,
            builder: ProfileBuilder::new(now),
            symbolizer,
            meta,
            stats: Stats::default(),
            counters,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Draws the probabilistic intervals from `random` (tests choose the draws).
    pub fn with_random(mut self, random: Box<dyn schedule::Random>) -> Self {
        self.random = random;
        self
    }

    /// The process filter, for the sampler to apply its pid part in BPF
    /// ([`Filter::allows_pid`]).
    pub fn filter(&self) -> Filter {
        Filter::new(&self.config)
    }

    pub fn processes(&self) -> &ProcessTable {
        &self.table
    }

    pub fn on_process_event(&mut self, event: ProcessEvent) {
        let now = self.env.clock.now_unix_nano();
        if let ProcessEvent::Exec { pid, .. } = event
            && self.deferred.iter().any(|(s, _)| s.pid == pid)
        {
            // Samples held for their stack copies ran the image this exec ends: they are
            // resolved with its maps now, with the walk they carry, before the new image
            // replaces it.
            let (ended, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
                .into_iter()
                .partition(|(s, _)| s.pid == pid);
            self.deferred = waiting;
            for (sample, _) in ended {
                self.add_sample(sample, now);
            }
        }
        if let ProcessEvent::Exec { pid, .. } | ProcessEvent::Exit { pid } = event {
            self.unwinder.forget(pid);
            self.python_codes.forget(pid);
            // The kernel side clears its mark at exec and exit by itself; clearing it
            // again after an exec undoes a mark sent for the old image after that exec.
            if self.refused.remove(&pid) && matches!(event, ProcessEvent::Exec { .. }) {
                self.refusals.push((pid, false));
            }
        }
        self.table.on_event(&event, now);
    }

    /// Processes the sampler may skip (`true`) or must sample again (`false`) since the
    /// last call, in order. Call it after each poll of the sampler.
    pub fn take_refusals(&mut self) -> Vec<(u32, bool)> {
        std::mem::take(&mut self.refusals)
    }

    /// Gives the sampler's stack walker the mappings and unwind tables that the samples
    /// since the last call asked for. Call it after each poll of the sampler.
    pub fn sync_unwinding(&mut self, maps: &mut dyn unwind::UnwindMaps) {
        let now = self.env.clock.now_unix_nano();
        self.unwinder.sync(&mut self.table, maps, now);
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|(sample, at)| {
                let image = self.table.fork_image(sample.pid).unwrap_or(sample.pid);
                !self.unwinder.is_waiting(image) || now.saturating_sub(*at) > MAX_DEFER_NANOS
            });
        self.deferred = waiting;
        for (mut sample, _) in ready {
            let image = self.table.fork_image(sample.pid).unwrap_or(sample.pid);
            if let Some(copy) = sample.stack_copy.take()
                && let Some((frames, end)) =
                    self.unwinder
                        .walk_copy(image, &copy, maps, config::MAX_STACK_DEPTH as usize)
                // The frame-pointer walk wins only where it went further than a walk
                // that did not reach the end (frames past the copied 8 KiB).
                && (end.is_complete() || frames.len() >= sample.user_stack.len())
            {
                sample.user_stack = frames;
                sample.user_truncated = !end.is_complete();
                sample.unwind.end = Some(end);
                self.stats.stack_copies_unwound += 1;
            }
            self.add_sample(sample, now);
        }
    }

    /// Adds the samples still waiting for their tables, with the walk they were sent
    /// with: before the last flush, when the receiver stops.
    pub fn drain_deferred(&mut self) {
        let now = self.env.clock.now_unix_nano();
        for (sample, _) in std::mem::take(&mut self.deferred) {
            self.add_sample(sample, now);
        }
    }

    /// The unwinder's counters.
    pub fn unwinder_stats(&self) -> unwind::UnwinderStats {
        self.unwinder.stats()
    }

    /// Records one sample: resolves its process (reading `/proc/<pid>` if the pid is new),
    /// drops it if the filter refuses the process, and turns its addresses into frames.
    pub fn on_sample(&mut self, sample: RawSample) {
        self.stats.samples_received += 1;
        let walk = match sample.python_end {
            profcol_bpf::PythonEnd::None => None,
            profcol_bpf::PythonEnd::Complete => Some(0),
            profcol_bpf::PythonEnd::NoThread => Some(1),
            profcol_bpf::PythonEnd::ReadFault => Some(2),
            profcol_bpf::PythonEnd::Depth => Some(3),
        };
        if let Some(i) = walk {
            self.stats.python_walks[i] += 1;
        }
        let now = self.env.clock.now_unix_nano();
        let pid = sample.pid;
        if !self.probabilistic.is_on(now, self.random.as_mut()) {
            self.stats.samples_probabilistic_dropped += 1;
            return;
        }
        if pid == 0 && !self.config.send_idle_frames {
            self.stats.samples_idle_dropped += 1;
            return;
        }
        if self.is_too_young(pid, now) {
            // Before anything of the process is read: short-lived processes cost no
            // more than their start time.
            self.stats.samples_young_dropped += 1;
            return;
        }
        if sample.unwind.end == Some(profcol_bpf::UnwindEnd::InExec) {
            self.on_sample_in_exec(sample, now);
            return;
        }
        let process = self.table.get_or_load(pid, now);
        if !process.allowed {
            self.stats.samples_filtered += 1;
            // Judged on what /proc said of this image: the sampler can skip it from now
            // on, before taking any stack, until the exec that may change its name.
            if process.loaded && !process.unread && pid != 0 && self.refused.insert(pid) {
                self.refusals.push((pid, true));
            }
            self.unwinder.on_sample(pid, &sample.unwind, false);
            return;
        }
        if let Some(parent) = process.forked_from.filter(|_| process.unread) {
            // A fork that has exec'd since this sample: it ran its parent's image, so
            // its stack is resolved (and its stack copy walked) with the parent's maps.
            self.table.get_or_load(parent, now);
        }
        let image = self.table.fork_image(pid).unwrap_or(pid);
        self.table.ensure_maps(image, now);
        self.table.refresh_context(pid, now);
        self.unwinder.on_sample(image, &sample.unwind, true);
        if sample.stack_copy.is_some() && self.deferred.len() < MAX_DEFERRED_SAMPLES {
            // Unwound at a sync, once the process's tables are loaded.
            self.deferred.push((sample, now));
            return;
        }
        self.add_sample(sample, now);
    }

    /// Whether the process is younger than `filter_min_process_age` at `now`. A process
    /// whose start or the boot time is unknown is not.
    fn is_too_young(&self, pid: u32, now: u64) -> bool {
        let min_age = self.config.filter_min_process_age;
        if min_age.is_zero() || pid == 0 {
            return false;
        }
        let Some(boot) = self.boot_unix_nano else {
            return false;
        };
        let start_ticks = match self.table.get(pid) {
            Some(p) if p.loaded && !p.unread => p.start_time,
            // Known from an event only, or not at all: its start time alone is read.
            _ => self.table.procfs().start_time(pid),
        };
        let Some(ticks) = start_ticks else {
            return false;
        };
        let hz = u128::from(rustix::param::clock_ticks_per_second().max(1));
        let since_boot = u128::from(ticks) * 1_000_000_000 / hz;
        let started = u128::from(boot).saturating_add(since_boot);
        u128::from(now).saturating_sub(started) < min_age.as_nanos()
    }

    /// A sample taken during `execve` has kernel frames only. `/proc` describes neither
    /// the image being replaced nor the one being loaded, so the process is read only if
    /// nothing at all is known of it, and its unwinding is left alone: the exec event
    /// that follows starts the new image afresh.
    fn on_sample_in_exec(&mut self, sample: RawSample, now: u64) {
        let process = match self.table.get(sample.pid) {
            Some(p) => p,
            None => self.table.get_or_load(sample.pid, now),
        };
        if !process.allowed {
            self.stats.samples_filtered += 1;
            return;
        }
        self.add_sample(sample, now);
    }

    /// Turns a sample of an allowed, loaded process into frames for the batch.
    fn add_sample(&mut self, sample: RawSample, now: u64) {
        let max = self
            .config
            .max_stack_depth
            .clamp(1, config::MAX_STACK_DEPTH) as usize;
        let pid = sample.pid;
        // The process whose mappings the user stack lies in: its own, or for a fork
        // before its exec, its parent's.
        let image = self.table.fork_image(pid).unwrap_or(pid);
        let Some(process) = self.table.get(image) else {
            return;
        };
        let user = &sample.user_stack[..sample.user_stack.len().min(max)];
        // An address outside every mapping: a library loaded since maps were read.
        if process.loaded
            && user
                .iter()
                .enumerate()
                .any(|(i, &a)| process.find_mapping(user_address(i, a)).is_none())
        {
            self.table.refresh_maps(image, now);
        }
        let (Some(process), Some(image_process)) = (self.table.get(pid), self.table.get(image))
        else {
            return;
        };
        let mut frames = Vec::with_capacity(sample.kernel_stack.len().min(max) + user.len() + 2);
        for (i, &addr) in sample.kernel_stack.iter().take(max).enumerate() {
            frames.push(Frame::Kernel {
                addr: caller_address(i, addr),
            });
        }
        if sample.kernel_truncated || sample.kernel_stack.len() > max {
            frames.push(Frame::Truncated);
        }
        let mut user_frames = Vec::with_capacity(user.len());
        let mut is_eval = Vec::with_capacity(user.len());
        for (i, &addr) in user.iter().enumerate() {
            let addr = user_address(i, addr);
            let mapping = image_process.find_mapping(addr);
            is_eval.push(mapping.is_some_and(|m| {
                m.file
                    .as_ref()
                    .and_then(|f| f.python.as_ref())
                    .is_some_and(|python| {
                        python.is_eval(m.file_offset(addr).wrapping_add(python.text_delta))
                    })
            }));
            user_frames.push(match mapping {
                Some(m) => Frame::User {
                    mapping: self.builder.mapping(image, m),
                    address: m.file_offset(addr),
                },
                None => Frame::Unmapped { addr },
            });
        }
        // Looked up only for a sample that has Python frames: most have none.
        let interpreter = if sample.python_stack.is_empty() {
            None
        } else {
            image_process
                .python()
                .map(|(python, bias)| (python.clone(), bias))
        };
        // A stack cut by the sampler or by max_stack_depth ends with a [truncated] frame.
        let mut cut = sample.user_stack.len() > max;
        match interpreter {
            Some((python, bias)) => {
                let merged = python::merge::merge(
                    user_frames.len(),
                    |i| is_eval[i],
                    &sample.python_stack,
                    python.offsets.entry_marker,
                );
                // A Python walk cut at its depth leaves the outermost evaluator frames
                // native: the stack is whole, not cut.
                cut |= merged.len() > max;
                for frame in merged.into_iter().take(max) {
                    frames.push(match frame {
                        python::merge::Merged::Native(i) => user_frames[i],
                        python::merge::Merged::Python(i) => {
                            let py = &sample.python_stack[i];
                            let code =
                                self.python_codes
                                    .resolve(&self.env.procfs, pid, &python, bias, py);
                            Frame::Python {
                                line: code.line(py.position),
                                code: self.builder.python_code(&code),
                            }
                        }
                    });
                }
            }
            None => frames.extend(user_frames),
        }
        let failed = sample.unwind.end.filter(|end| is_unwind_error(*end));
        if cut {
            frames.push(Frame::Truncated);
        } else if let Some(end) = failed.filter(|_| self.config.send_error_frames) {
            // The OTel profiler's error frame: the walk could not go on, and why.
            frames.push(Frame::UnwindError { end });
        } else if sample.user_truncated {
            frames.push(Frame::Truncated);
        }
        let resource = self
            .builder
            .resource(profile_builder::ResourceInfo::of(process));
        // A sampler that gives no time gets the time the sample was read.
        let time = if sample.time_unix_nano == 0 {
            now
        } else {
            sample.time_unix_nano
        };
        let kind = match sample.off_cpu_ns {
            Some(nanos) => SampleKind::OffCpu { nanos },
            None => SampleKind::Cpu,
        };
        self.builder.add(
            kind,
            resource,
            frames,
            sample.tid,
            &sample.comm,
            sample.cpu,
            time,
        );
    }

    /// The samples since the last flush as one batch (`None` when there were none), after
    /// dropping processes whose grace period is over. The next window starts now.
    ///
    /// Symbolizing runs here: the first flush that meets a large binary with DWARF may
    /// take a while, so call it where a pause does not lose samples.
    pub fn flush(&mut self) -> Option<ProfileBatch> {
        let pending = self.start_flush()?;
        let (batch, unsymbolized) = pending.finish();
        self.stats.frames_unsymbolized += unsymbolized;
        Some(batch)
    }

    /// The samples since the last flush, taken out to be symbolized and built into a batch
    /// by [`PendingFlush::finish`], which can run on another thread: symbolizing a large
    /// binary's DWARF the first time takes a while, and the thread that drains the
    /// sampler must not wait for it. `None` when there were no samples. The next window
    /// starts now; processes whose grace period is over are dropped first.
    pub fn start_flush(&mut self) -> Option<PendingFlush> {
        let now = self.env.clock.now_unix_nano();
        // Samples whose tables never came go with the walk they were sent with.
        let (stale, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|(_, at)| now.saturating_sub(*at) > MAX_DEFER_NANOS);
        self.deferred = waiting;
        for (sample, _) in stale {
            self.add_sample(sample, now);
        }
        self.table.expire(now);
        // Follows the wall clock if it was set since (process ages are against it).
        if let Some(boot) = boot_time(self.table.procfs(), now) {
            self.boot_unix_nano = Some(boot);
        }
        let builder = std::mem::replace(&mut self.builder, ProfileBuilder::new(now));
        if builder.is_empty() {
            return None;
        }
        self.stats.batches += 1;
        Some(PendingFlush {
            builder,
            symbolizer: self.symbolizer.clone(),
            procfs: self.table.procfs().clone(),
            meta: self.meta.clone(),
            now,
        })
    }

    /// Locations a [`PendingFlush`] finished elsewhere left without a function name.
    pub fn add_unsymbolized(&mut self, frames: u64) {
        self.stats.frames_unsymbolized += frames;
    }

    pub fn stats(&self) -> Stats {
        Stats {
            processes_tracked: self.table.len(),
            files_rejected: self.counters.files_rejected.load(Ordering::Relaxed),
            symbolizer_restarts: self.counters.symbolizer_restarts.load(Ordering::Relaxed),
            contexts_read: self.counters.contexts_read.load(Ordering::Relaxed),
            contexts_invalid: self.counters.contexts_invalid.load(Ordering::Relaxed),
            python_codes_read: self.python_codes.reads,
            python_codes_failed: self.python_codes.failures,
            ..self.stats
        }
    }
}

/// A batch's samples on their way to being symbolized and built ([`Engine::start_flush`]).
pub struct PendingFlush {
    builder: ProfileBuilder,
    symbolizer: Option<Arc<Symbolizer>>,
    procfs: ProcFs,
    meta: BatchMeta,
    now: u64,
}

impl PendingFlush {
    /// Symbolizes (waiting for the symbolizer thread) and builds the batch. Returns it
    /// and the number of locations left without a function name.
    pub fn finish(self) -> (ProfileBatch, u64) {
        let symbols = match &self.symbolizer {
            Some(s) => symbolize(s, &self.builder, &self.procfs),
            None => Symbols::default(),
        };
        self.builder.finish(&symbols, &self.meta, self.now)
    }
}

fn symbolize(symbolizer: &Symbolizer, builder: &ProfileBuilder, procfs: &ProcFs) -> Symbols {
    let mut symbols = Symbols::default();
    let kernel = builder.kernel_addrs();
    if !kernel.is_empty() {
        let found = symbolizer.symbolize_kernel(kernel.clone());
        for (addr, r) in kernel.into_iter().zip(found) {
            if let Some(r) = r {
                symbols.kernel.insert(addr, r);
            }
        }
    }
    // One request per mapping, in mapping order.
    let mut by_mapping: HashMap<profile_builder::MappingId, Vec<u64>> = HashMap::new();
    for (mapping, address) in builder.user_frames() {
        by_mapping.entry(mapping).or_default().push(address);
    }
    let mut ids: Vec<profile_builder::MappingId> = by_mapping.keys().copied().collect();
    ids.sort_unstable();
    let requests: Vec<symbolize::FileRequest> = ids
        .iter()
        .map(|id| {
            let record = builder.mapping_record(*id);
            let m = &record.mapping;
            symbolize::FileRequest {
                kind: m.kind,
                file: m.file.clone(),
                locations: m.locations(procfs, record.pid),
                host_path: (!m.deleted && m.path.starts_with('/')).then(|| PathBuf::from(&m.path)),
                offsets: by_mapping[id].clone(),
            }
        })
        .collect();
    let answers = symbolizer.symbolize_files(requests);
    for (id, found) in ids.iter().zip(answers) {
        for (address, r) in by_mapping[id].iter().zip(found) {
            if let Some(r) = r {
                symbols.user.insert((*id, *address), r);
            }
        }
    }
    symbols
}

/// Walk ends that mean the walker could not go on (rather than reaching the end of the
/// stack, or the frame limit).
fn is_unwind_error(end: profcol_bpf::UnwindEnd) -> bool {
    use profcol_bpf::UnwindEnd;
    matches!(
        end,
        UnwindEnd::ReadFault | UnwindEnd::BadFrame | UnwindEnd::Unsupported
    )
}

/// When the machine booted, on the engine's clock: `now` minus `/proc/uptime` (the boot
/// clock, which `/proc/<pid>/stat` start times count on).
fn boot_time(procfs: &ProcFs, now: u64) -> Option<u64> {
    let text = std::fs::read_to_string(procfs.root().join("uptime")).ok()?;
    let seconds: f64 = text.split_whitespace().next()?.parse().ok()?;
    let uptime = Duration::try_from_secs_f64(seconds).ok()?;
    now.checked_sub(u64::try_from(uptime.as_nanos()).ok()?)
}

/// Frames past the leaf are return addresses, which point after the call; one byte back
/// lies inside the call instruction, so the frame names the calling line.
fn caller_address(index: usize, addr: u64) -> u64 {
    if index == 0 {
        addr
    } else {
        addr.saturating_sub(1)
    }
}

/// A user frame's address: as is where the walker marked it exact (a signal trampoline,
/// an interrupted instruction), else as [`caller_address`] says.
fn user_address(index: usize, frame: u64) -> u64 {
    if frame & unwind::walk::FRAME_EXACT != 0 {
        frame & !unwind::walk::FRAME_EXACT
    } else {
        caller_address(index, frame)
    }
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(
    receiver: ProfilingReceiverFactory::new(bpf_source::BpfOpener),
    "profiling",
    Development
);
