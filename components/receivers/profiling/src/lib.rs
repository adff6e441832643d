//! `profiling` receiver, user side: raw eBPF CPU samples in, OTLP profiles out.
//!
//! The BPF sampler (`profcol-bpf`, driven by [`bpf_source`]) hands over [`Sample`]s and [`ProcessEvent`]s; the
//! [`Engine`] tracks processes ([`process`]), resolves user addresses to (mapping, file
//! offset), symbolizes on the host ([`symbolize`]: kallsyms, ELF/DWARF through blazesym,
//! Go's `.gopclntab`) and builds one [`ProfileBatch`] per flush ([`profile_builder`]) in the shape
//! the OpenTelemetry eBPF profiler emits.
//!
//! The engine does no threading of its own besides the symbolizer's: the receiver around
//! it calls [`Engine::on_sample`] / [`Engine::on_process_event`] as events come and
//! [`Engine::flush`] every `reporter_interval`. It is `Send`, so it can move to the
//! thread that polls the sampler.

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

/// One sample from the sampler, as the ring buffer gave it: its time on the sampler's
/// clock and its off-CPU time as recorded, which [`SampleClock`] turns into Unix time and
/// an unbiased duration.
pub use profcol_bpf::Sample;

/// How a sampler's sample times and off-CPU durations read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleClock {
    /// Added to [`Sample::time_ns`] for Unix nanoseconds; 0 for a sampler that gives Unix
    /// time. A sample whose time comes out as 0 gets the time it was read.
    pub to_unix_nanos: i128,
    /// The chance a switch-out was recorded: each recorded off-CPU time stands for 1/p.
    pub off_cpu_share: f64,
}

impl Default for SampleClock {
    fn default() -> Self {
        SampleClock {
            to_unix_nanos: 0,
            off_cpu_share: 1.0,
        }
    }
}

impl SampleClock {
    fn unix_nanos(&self, time_ns: u64) -> u64 {
        u64::try_from(i128::from(time_ns) + self.to_unix_nanos).unwrap_or(0)
    }

    /// An off-CPU time scaled to what it stands for (Horvitz-Thompson: the sum of the
    /// scaled times estimates the total without bias).
    pub fn off_cpu_nanos(&self, recorded: u64) -> u64 {
        let p = self.off_cpu_share;
        if p >= 1.0 || p <= 0.0 || p.is_nan() {
            return recorded;
        }
        // Saturates at u64::MAX (float to int casts do), which no real wait reaches.
        (recorded as f64 / p).round() as u64
    }
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
    /// Where the executables read are recorded, for exporters that upload debug
    /// information (the service's, from its [`Host`](profcol_core::component::Host)).
    pub executables: Arc<profcol_core::host_executables::Registry>,
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
            executables: Arc::default(),
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
    deferred: Vec<(Sample, u64)>,
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
    /// How the sampler's times and off-CPU durations read.
    clock: SampleClock,
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
        .with_env_vars(&config.include_env_vars)
        .recording_executables(env.executables.clone());
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
            clock: SampleClock::default(),
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
                sample.unwind_end = end;
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

    /// How the sampler's times and off-CPU durations read (the default: Unix time, every
    /// switch recorded).
    pub fn set_sample_clock(&mut self, clock: SampleClock) {
        self.clock = clock;
    }

    /// Records one sample: resolves its process (reading `/proc/<pid>` if the pid is new),
    /// drops it if the filter refuses the process, and turns its addresses into frames.
    pub fn on_sample(&mut self, sample: Sample) {
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
        if sample.unwind_end == profcol_bpf::UnwindEnd::InExec {
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
            self.unwinder.on_sample(pid, &unwind_status(&sample), false);
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
        self.unwinder
            .on_sample(image, &unwind_status(&sample), true);
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

    /// A sample taken during `execve` has kernel frames only. Before the exec event,
    /// `/proc` describes neither the image being replaced nor the one being loaded, so
    /// the process is read only if nothing at all is known of it, and its unwinding is
    /// left alone: the exec event that follows starts the new image afresh. After the
    /// event (the sample came late in the syscall) the new image is in place: its
    /// placeholder is read, or the sample would carry the placeholder's few attributes
    /// (no `container.id`) as a resource of its own.
    fn on_sample_in_exec(&mut self, sample: Sample, now: u64) {
        match self.table.get(sample.pid) {
            None => {
                self.table.get_or_load(sample.pid, now);
            }
            Some(p) if p.unread && p.forked_from.is_none() => {
                self.table.load_after_exec(sample.pid, &sample.comm, now);
            }
            Some(_) => {}
        }
        let Some(process) = self.table.get(sample.pid) else {
            return;
        };
        if !process.allowed {
            self.stats.samples_filtered += 1;
            return;
        }
        self.add_sample(sample, now);
    }

    /// Turns a sample of an allowed, loaded process into frames for the batch.
    fn add_sample(&mut self, sample: Sample, now: u64) {
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
        let failed = Some(sample.unwind_end).filter(|end| is_unwind_error(*end));
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
        let time = match self.clock.unix_nanos(sample.time_ns) {
            0 => now,
            time => time,
        };
        let kind = match sample.off_cpu_ns {
            Some(recorded) => SampleKind::OffCpu {
                nanos: self.clock.off_cpu_nanos(recorded),
            },
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

/// What the sampler said about a sample's walk, as the unwinder reads it.
fn unwind_status(sample: &Sample) -> unwind::UnwindStatus {
    unwind::UnwindStatus {
        end: Some(sample.unwind_end),
        unknown_mapping: sample.unknown_mapping,
        missing_table: sample.missing_table,
    }
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

profcol_core::component_conformance!(
    receiver: ProfilingReceiverFactory::new(bpf_source::BpfOpener),
    "profiling",
    Development,
    no_lifecycle: "it loads BPF; receiver.rs starts and stops it against a fake sampler, and the eBPF tests for real"
);

#[cfg(test)]
mod tests {
    //! Engine tests, end to end through the real `/proc` of this test process.

    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use profcol_core::pdata::WireBatch;
    use profcol_core::pdata::types::{ProfilesDictionary, Value};

    fn attribute_value<'a>(
        d: &'a ProfilesDictionary,
        indices: &[i32],
        key: &str,
    ) -> Option<&'a profcol_core::pdata::types::AnyValue> {
        WireBatch::attribute_value(d, indices, key)
    }

    use super::*;

    const S: u64 = 1_000_000_000;

    #[derive(Debug, Default)]
    struct ManualClock(AtomicU64);

    impl ManualClock {
        fn set(&self, t: u64) {
            self.0.store(t, Ordering::SeqCst);
        }
    }

    impl Clock for ManualClock {
        fn now_unix_nano(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn env(clock: Arc<ManualClock>) -> Environment {
        Environment {
            host_name: Some("test-host".into()),
            scan_at_start: false,
            clock,
            ..Environment::host()
        }
    }

    fn clock_at(t: u64) -> Arc<ManualClock> {
        let c = Arc::new(ManualClock::default());
        c.set(t);
        c
    }

    #[inline(never)]
    fn engine_marker_leaf(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(7).rotate_left(3))
    }

    #[inline(never)]
    fn engine_marker_caller(x: u64) -> u64 {
        std::hint::black_box(engine_marker_leaf(x) + 1)
    }

    fn sample(pid: u32, t: u64, user: Vec<u64>) -> Sample {
        Sample {
            pid,
            tid: pid,
            cpu: 1,
            comm: "tester".into(),
            cgroup_id: 0,
            time_ns: t,
            kernel_stack: Vec::new(),
            user_stack: user,
            kernel_truncated: false,
            user_truncated: false,
            unwind_end: Default::default(),
            unknown_mapping: false,
            missing_table: false,
            stack_copy: None,
            off_cpu_ns: None,
            python_stack: Vec::new(),
            python_end: Default::default(),
        }
    }

    fn frame_type(d: &ProfilesDictionary, location: i32) -> String {
        let l = &d.location_table[location as usize];
        match attribute_value(d, &l.attribute_indices, "profile.frame.type")
            .and_then(|v| v.value.clone())
        {
            Some(Value::StringValue(s)) => s,
            other => panic!("no frame type: {other:?}"),
        }
    }

    fn names(d: &ProfilesDictionary, location: i32) -> Vec<String> {
        d.location_table[location as usize]
            .lines
            .iter()
            .map(|l| {
                let f = d.function_table[l.function_index as usize];
                d.string_table[f.name_strindex as usize].clone()
            })
            .collect()
    }

    fn stack_of(batch: &WireBatch, sample: usize) -> Vec<i32> {
        let p = batch.profiles().next().expect("a profile");
        batch.dictionary().stack_table[p.samples[sample].stack_index as usize]
            .location_indices
            .clone()
    }

    fn mapping_attr(d: &ProfilesDictionary, location: i32, key: &str) -> Option<String> {
        let m = &d.mapping_table[d.location_table[location as usize].mapping_index as usize];
        match attribute_value(d, &m.attribute_indices, key)?
            .value
            .clone()?
        {
            Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    fn resource_attr(batch: &WireBatch, key: &str) -> Option<Value> {
        batch.resource_profiles()[0]
            .resource
            .as_ref()?
            .attributes
            .iter()
            .find(|kv| kv.key == key)?
            .value
            .clone()?
            .value
    }

    #[test]
    fn own_process_is_profiled_and_symbolized_end_to_end() {
        let _ = engine_marker_caller(1);
        let clock = clock_at(10 * S);
        let mut engine = Engine::new(Config::default(), env(clock.clone()));
        let pid = std::process::id();
        let leaf = engine_marker_leaf as *const () as usize as u64;
        // A "return address" inside the caller: a few bytes into it.
        let caller = engine_marker_caller as *const () as usize as u64 + 8;
        for i in 0..5 {
            engine.on_sample(sample(pid, 10 * S + i, vec![leaf + 4, caller]));
        }
        clock.set(15 * S);
        let batch = engine.flush().expect("a batch");
        let batch = ProfileBatch::decode(&batch.encode_to_vec())
            .expect("valid OTLP")
            .to_wire();
        let d = batch.dictionary();

        assert_eq!(
            resource_attr(&batch, "process.pid"),
            Some(Value::IntValue(i64::from(pid)))
        );
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(
            resource_attr(&batch, "process.executable.path"),
            Some(Value::StringValue(exe.display().to_string()))
        );
        assert_eq!(
            resource_attr(&batch, "host.name"),
            Some(Value::StringValue("test-host".into()))
        );

        let p = batch.profiles().next().expect("profile");
        assert_eq!(p.samples.len(), 1);
        assert_eq!(p.samples[0].timestamps_unix_nano.len(), 5);
        assert_eq!((p.time_unix_nano, p.duration_nano), (10 * S, 5 * S));

        let stack = stack_of(&batch, 0);
        assert_eq!(stack.len(), 2);
        assert!(
            names(d, stack[0])
                .last()
                .is_some_and(|n| n.ends_with("engine_marker_leaf")),
            "{:?}",
            names(d, stack[0])
        );
        assert!(
            names(d, stack[1])
                .last()
                .is_some_and(|n| n.ends_with("engine_marker_caller")),
            "{:?}",
            names(d, stack[1])
        );
        assert_eq!(frame_type(d, stack[0]), "native");
        let build_id =
            mapping_attr(d, stack[0], "process.executable.build_id.gnu").expect("build id");
        assert_eq!(build_id.len(), 40);
        let stats = engine.stats();
        assert_eq!(stats.samples_received, 5);
        assert_eq!(stats.frames_unsymbolized, 0);
        assert_eq!(stats.batches, 1);
        assert!(stats.processes_tracked >= 1);
        // Nothing since: nothing to flush.
        assert!(engine.flush().is_none());
    }

    #[test]
    fn without_symbolization_frames_keep_mapping_and_file_offset() {
        let clock = clock_at(S);
        let config = Config {
            symbolize: false,
            ..Config::default()
        };
        let mut engine = Engine::new(config, env(clock));
        let pid = std::process::id();
        let leaf = engine_marker_leaf as *const () as usize as u64;
        engine.on_sample(sample(pid, S, vec![leaf, 0x10]));
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let stack = stack_of(&batch, 0);
        let loc = &d.location_table[stack[0] as usize];
        assert!(loc.lines.is_empty(), "not symbolized");
        let m = &d.mapping_table[loc.mapping_index as usize];
        assert_eq!(
            loc.address,
            leaf - m.memory_start + m.file_offset,
            "file-relative"
        );
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(
            d.string_table[m.filename_strindex as usize],
            exe.display().to_string()
        );
        assert!(mapping_attr(d, stack[0], "process.executable.build_id.gnu").is_some());
        // 0x10 (minus one: a return address) lies in no mapping.
        let unmapped = &d.location_table[stack[1] as usize];
        assert_eq!((unmapped.mapping_index, unmapped.address), (0, 0xf));
        assert_eq!(engine.stats().frames_unsymbolized, 2);
    }

    #[test]
    fn deep_and_truncated_stacks_end_with_a_marker() {
        let clock = clock_at(S);
        let config = Config {
            symbolize: false,
            max_stack_depth: 3,
            ..Config::default()
        };
        let mut engine = Engine::new(config, env(clock));
        let pid = std::process::id();
        let leaf = engine_marker_leaf as *const () as usize as u64;
        let mut s = sample(pid, S, vec![leaf; 5]);
        s.kernel_stack = vec![0xffffffff81000000, 0xffffffff81000100];
        s.kernel_truncated = true;
        engine.on_sample(s);
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let stack = stack_of(&batch, 0);
        let types: Vec<String> = stack.iter().map(|&l| frame_type(d, l)).collect();
        assert_eq!(
            types,
            [
                "kernel",
                "kernel",
                "abort-marker",
                "native",
                "native",
                "native",
                "abort-marker"
            ]
        );
        assert_eq!(names(d, *stack.last().expect("last")), ["[truncated]"]);
        // The kernel leaf keeps its address; return addresses step back one byte.
        assert_eq!(
            d.location_table[stack[0] as usize].address,
            0xffffffff81000000
        );
        assert_eq!(
            d.location_table[stack[1] as usize].address,
            0xffffffff810000ff
        );
    }

    #[test]
    fn filtered_processes_are_dropped_and_counted() {
        let exe = std::env::current_exe().expect("exe");
        let name = exe.file_name().and_then(|n| n.to_str()).expect("name");
        let yaml = format!(
            "exclude:\n  executable_names: ['^{}$']\n",
            regex::escape(name)
        );
        let config: Config = profcol_core::config::parse_typed(
            &profcol_core::config::parse_yaml("x", &yaml).expect("yaml"),
        )
        .expect("config");
        let mut engine = Engine::new(config, env(clock_at(S)));
        engine.on_sample(sample(std::process::id(), S, vec![0x1000]));
        assert!(engine.flush().is_none());
        let stats = engine.stats();
        assert_eq!((stats.samples_received, stats.samples_filtered), (1, 1));
        assert!(!engine.filter().allows_everything());
        // The sampler is told once to skip the process before taking stacks; an exec (a new
        // name to judge) clears that, and an exit needs no word.
        let pid = std::process::id();
        assert_eq!(engine.take_refusals(), [(pid, true)]);
        engine.on_sample(sample(pid, S + 1, vec![0x1000]));
        assert_eq!(engine.take_refusals(), [], "told once");
        engine.on_process_event(ProcessEvent::Exec {
            pid,
            filename: "/bin/other".into(),
        });
        assert_eq!(engine.take_refusals(), [(pid, false)]);
        engine.on_process_event(ProcessEvent::Exit { pid });
        assert_eq!(engine.take_refusals(), []);
    }

    #[test]
    fn short_lived_process_is_read_lazily_and_kept_through_its_grace_period() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        let clock = clock_at(100 * S);
        let config = Config {
            symbolize: false,
            process_grace_period: Duration::from_secs(30),
            ..Config::default()
        };
        let mut engine = Engine::new(config, env(clock.clone()));
        assert!(engine.processes().get(pid).is_none(), "no scan");
        // Wait until the child has exec'd sleep and its new image is mapped: the exe link
        // changes before the maps are complete, and under load that gap is visible.
        let mut exec = None;
        for _ in 0..500 {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            exec = procfs::parse_maps(&maps).into_iter().find(|m| {
            m.perms.exec
                && matches!(&m.path, procfs::MapsPath::File { path, .. } if path.ends_with("sleep"))
        });
            if exe.file_name().is_some_and(|n| n == "sleep") && exec.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let exec = exec.expect("sleep's executable mapping");
        engine.on_sample(sample(pid, 100 * S, vec![exec.start + 0x10]));
        let p = engine.processes().get(pid).expect("read lazily");
        assert_eq!(p.executable_name(), Some("sleep"));

        child.kill().expect("kill");
        child.wait().expect("wait");
        engine.on_process_event(ProcessEvent::Exit { pid });
        // A late sample of the exited process still resolves its mapping.
        engine.on_sample(sample(pid, 100 * S + 1, vec![exec.start + 0x20]));
        clock.set(101 * S);
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        assert_eq!(
            resource_attr(&batch, "process.executable.name"),
            Some(Value::StringValue("sleep".into()))
        );
        let p = batch.profiles().next().expect("profile");
        for s in &p.samples {
            let loc = d.stack_table[s.stack_index as usize].location_indices[0];
            assert_ne!(
                d.location_table[loc as usize].mapping_index, 0,
                "resolved to a mapping"
            );
        }
        assert_eq!(engine.stats().processes_tracked, engine.processes().len());
        assert!(
            engine.processes().get(pid).is_some(),
            "kept within the grace period"
        );
        clock.set(131 * S);
        assert!(engine.flush().is_none());
        assert!(
            engine.processes().get(pid).is_none(),
            "dropped after the grace period"
        );
    }

    #[test]
    fn stripped_go_program_is_symbolized_end_to_end() {
        let Some(program) = testutil::go_program() else {
            return;
        };
        let running = program.start();
        let mut engine = Engine::new(Config::default(), env(clock_at(S)));
        engine.on_process_event(ProcessEvent::Exec {
            pid: running.pid(),
            filename: String::new(),
        });
        engine.on_sample(sample(running.pid(), S, vec![running.marker_pc + 4]));
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let stack = stack_of(&batch, 0);
        assert_eq!(names(d, stack[0]), [testutil::GO_MARKER]);
        assert_eq!(frame_type(d, stack[0]), "go");
        assert!(mapping_attr(d, stack[0], "process.executable.build_id.go").is_some());
        let line = &d.location_table[stack[0] as usize].lines[0];
        assert!(line.line > 0);
        let f = d.function_table[line.function_index as usize];
        assert!(d.string_table[f.filename_strindex as usize].ends_with("main.go"));
    }

    #[test]
    fn kernel_frames_are_symbolized_when_kallsyms_has_addresses() {
        let kallsyms = std::path::Path::new("/proc/kallsyms");
        if !symbolize::kallsyms_has_addresses(kallsyms) {
            eprintln!("skipping: /proc/kallsyms shows no addresses (not root, or kptr_restrict)");
            return;
        }
        let text = std::fs::read_to_string(kallsyms).expect("kallsyms");
        let addr = text
            .lines()
            .find(|l| l.ends_with(" T vfs_read"))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .expect("vfs_read");
        let mut engine = Engine::new(Config::default(), env(clock_at(S)));
        let mut s = sample(std::process::id(), S, Vec::new());
        s.kernel_stack = vec![addr + 4];
        engine.on_sample(s);
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let stack = stack_of(&batch, 0);
        assert_eq!(names(d, stack[0]), ["vfs_read"]);
        assert_eq!(frame_type(d, stack[0]), "kernel");
        let m = &d.mapping_table[d.location_table[stack[0] as usize].mapping_index as usize];
        assert_eq!(
            d.string_table[m.filename_strindex as usize],
            "[kernel.kallsyms]"
        );
        if std::path::Path::new("/sys/kernel/notes").exists() {
            assert_eq!(
                mapping_attr(d, stack[0], "process.executable.build_id.gnu").map(|s| s.len()),
                Some(40)
            );
        }
    }

    #[test]
    fn idle_samples_need_no_proc_entry() {
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                send_idle_frames: true,
                ..Config::default()
            },
            env(clock_at(S)),
        );
        let mut s = sample(0, S, Vec::new());
        s.comm = "swapper/1".into();
        s.kernel_stack = vec![0xffffffff81000010];
        engine.on_sample(s);
        assert_eq!(engine.stats().samples_idle_dropped, 0);
        let batch = engine.flush().expect("batch").to_wire();
        assert_eq!(
            resource_attr(&batch, "process.pid"),
            Some(Value::IntValue(0))
        );
        assert_eq!(
            resource_attr(&batch, "process.executable.name"),
            Some(Value::StringValue("swapper".into()))
        );
    }

    /// An engine with the default config but symbolization, its clock at one second.
    fn unsymbolized_engine() -> Engine {
        Engine::new(
            Config {
                symbolize: false,
                ..Config::default()
            },
            env(clock_at(S)),
        )
    }

    /// A sample taken inside `execve`: kernel frames, and no user stack to walk.
    fn sample_in_execve(pid: u32, t: u64) -> Sample {
        let mut s = sample(pid, t, Vec::new());
        s.kernel_stack = vec![0xffffffff81000010, 0xffffffff81000020];
        s.unwind_end = profcol_bpf::UnwindEnd::InExec;
        s
    }

    #[test]
    fn a_sample_in_execve_has_kernel_frames_only_and_reads_no_proc() {
        let mut engine = unsymbolized_engine();
        let parent = std::process::id();
        engine.on_sample(sample(
            parent,
            S,
            vec![engine_marker_leaf as *const () as usize as u64],
        ));
        // A child that is no process of this machine: reading /proc for it would mark it
        // gone. Its exec has begun but its exec event is still behind this sample.
        let child = u32::MAX - 7;
        engine.on_process_event(ProcessEvent::Fork {
            parent_pid: parent,
            child_pid: child,
        });
        engine.on_sample(sample_in_execve(child, S + 1));
        let p = engine
            .processes()
            .get(child)
            .expect("the fork's placeholder");
        assert!(p.unread, "/proc was not read for the image in flux");
        assert!(!engine.unwinder.is_waiting(child), "no tables asked for");

        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let rp = batch
            .resource_profiles()
            .iter()
            .find(|rp| {
                rp.resource.as_ref().is_some_and(|r| {
                    r.attributes.iter().any(|kv| {
                        kv.key == "process.pid"
                            && kv.value.as_ref().and_then(|v| v.value.clone())
                                == Some(Value::IntValue(i64::from(child)))
                    })
                })
            })
            .expect("the child's resource");
        let profile = &rp.scope_profiles[0].profiles[0];
        let stack = &d.stack_table[profile.samples[0].stack_index as usize];
        assert_eq!(
            stack.location_indices.len(),
            2,
            "kernel frames, nothing else"
        );
        for &l in &stack.location_indices {
            assert_eq!(frame_type(d, l), "kernel");
        }
    }

    #[test]
    fn a_sample_in_execve_after_its_exec_event_reads_the_new_image() {
        let mut engine = unsymbolized_engine();
        // This process, exec'd: the tracepoint has fired, the syscall not yet returned.
        let pid = std::process::id();
        engine.on_process_event(ProcessEvent::Exec {
            pid,
            filename: "/exec/argument/path".into(),
        });
        // Its thread has the name exec gave it, which /proc shows.
        let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
        let mut s = sample_in_execve(pid, S + 1);
        s.comm = comm.trim_end().to_owned();
        engine.on_sample(s);
        let p = engine.processes().get(pid).expect("read");
        assert!(!p.unread && p.loaded, "read from /proc");
        let batch = engine.flush().expect("batch").to_wire();
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(
            resource_attr(&batch, "process.executable.path"),
            Some(Value::StringValue(exe.display().to_string())),
            "what /proc says, not the placeholder's exec argument"
        );
    }

    #[test]
    fn a_sample_in_execve_of_an_image_gone_since_keeps_its_placeholder() {
        let mut engine = unsymbolized_engine();
        let pid = std::process::id();
        engine.on_process_event(ProcessEvent::Exec {
            pid,
            filename: "/exec/argument/wrapper".into(),
        });
        // Its thread is named for the exec'd program, and /proc for another one: the
        // process has exec'd again since.
        let mut s = sample_in_execve(pid, S + 1);
        s.comm = "wrapper".into();
        engine.on_sample(s);
        let p = engine.processes().get(pid).expect("placeholder");
        assert!(p.unread, "left for the next image's first sample to read");
        assert_eq!(p.exe_path.as_deref(), Some("/exec/argument/wrapper"));
        let batch = engine.flush().expect("batch").to_wire();
        assert_eq!(
            resource_attr(&batch, "process.executable.path"),
            Some(Value::StringValue("/exec/argument/wrapper".into()))
        );
    }

    #[test]
    fn a_forks_sample_from_before_its_exec_is_resolved_with_its_parents_image() {
        let mut engine = unsymbolized_engine();
        let parent = std::process::id();
        let leaf = engine_marker_leaf as *const () as usize as u64;
        engine.on_sample(sample(parent, S, vec![leaf]));
        // The child forked from this process and has exec'd sleep by the time its sample,
        // taken before the exec, is read: its exec event is still behind it.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let child_pid = child.id();
        for _ in 0..500 {
            let exe = std::fs::read_link(format!("/proc/{child_pid}/exe")).unwrap_or_default();
            if exe.file_name().is_some_and(|n| n == "sleep") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        engine.on_process_event(ProcessEvent::Fork {
            parent_pid: parent,
            child_pid,
        });
        engine.on_sample(sample(child_pid, S + 1, vec![leaf]));
        let p = engine.processes().get(child_pid).expect("child");
        assert!(p.unread, "still the fork's placeholder");
        assert_eq!(engine.processes().fork_image(child_pid), Some(parent));

        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let exe = std::env::current_exe().expect("exe");
        let mut child_samples = 0;
        for rp in batch.resource_profiles() {
            let attr = |key: &str| {
                rp.resource
                    .as_ref()?
                    .attributes
                    .iter()
                    .find(|kv| kv.key == key)?
                    .value
                    .clone()?
                    .value
            };
            if attr("process.pid") != Some(Value::IntValue(i64::from(child_pid))) {
                continue;
            }
            assert_eq!(
                attr("process.executable.name"),
                Some(Value::StringValue(
                    exe.file_name()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned()
                )),
                "named after the image it ran"
            );
            for s in &rp.scope_profiles[0].profiles[0].samples {
                child_samples += 1;
                let loc = d.stack_table[s.stack_index as usize].location_indices[0];
                let m = &d.mapping_table[d.location_table[loc as usize].mapping_index as usize];
                assert_eq!(
                    d.string_table[m.filename_strindex as usize],
                    exe.display().to_string(),
                    "the parent's mapping"
                );
            }
        }
        assert_eq!(child_samples, 1);

        // Its exec event replaces the placeholder: the next sample reads the new image.
        engine.on_process_event(ProcessEvent::Exec {
            pid: child_pid,
            filename: "/usr/bin/sleep".into(),
        });
        engine.on_sample(sample(child_pid, S + 2, vec![0x10]));
        let p = engine.processes().get(child_pid).expect("child");
        assert!(!p.unread && p.loaded);
        assert_eq!(p.executable_name(), Some("sleep"));
        assert_eq!(engine.processes().fork_image(child_pid), None);
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    #[test]
    fn samples_held_for_their_stack_copy_are_resolved_with_the_image_an_exec_ends() {
        let mut engine = unsymbolized_engine();
        let pid = std::process::id();
        let leaf = engine_marker_leaf as *const () as usize as u64;
        let mut s = sample(pid, S, vec![leaf]);
        s.unwind_end = profcol_bpf::UnwindEnd::NoProcess;
        s.stack_copy = Some(profcol_bpf::StackCopy {
            pc: leaf,
            sp: 0x7ffd_0000_0000,
            fp: 0,
            stack: vec![0; 64],
        });
        engine.on_sample(s);
        assert_eq!(engine.deferred.len(), 1, "held until the tables are given");
        engine.on_process_event(ProcessEvent::Exec {
            pid,
            filename: "/usr/bin/true".into(),
        });
        assert!(engine.deferred.is_empty());
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let loc = &d.location_table[stack_of(&batch, 0)[0] as usize];
        let m = &d.mapping_table[loc.mapping_index as usize];
        assert_eq!(
            d.string_table[m.filename_strindex as usize],
            std::env::current_exe().expect("exe").display().to_string(),
            "resolved with the image the exec replaced"
        );
    }

    #[test]
    fn engine_is_send() {
        fn check<T: Send>() {}
        check::<Engine>();
    }

    #[test]
    fn start_scan_reads_every_process_of_this_machine() {
        let started = std::time::Instant::now();
        let engine = Engine::new(
            Config {
                symbolize: false,
                ..Config::default()
            },
            Environment::host(),
        );
        let me = engine
            .processes()
            .get(std::process::id())
            .expect("this process was scanned");
        assert!(me.loaded && !me.mappings.is_empty());
        assert!(engine.processes().get(1).is_some(), "pid 1 was scanned");
        eprintln!(
            "scanned {} processes, {} files, in {:?}",
            engine.stats().processes_tracked,
            engine.processes().files_cached(),
            started.elapsed()
        );
    }

    #[test]
    fn the_sample_clock_gives_unix_time_and_unbiased_off_cpu_time() {
        let unix = SampleClock::default();
        assert_eq!(unix.unix_nanos(5 * S), 5 * S);
        assert_eq!(unix.off_cpu_nanos(100), 100);
        let bpf = SampleClock {
            to_unix_nanos: 1_000 * i128::from(S),
            off_cpu_share: 0.25,
        };
        assert_eq!(bpf.unix_nanos(5 * S), 1_005 * S);
        assert_eq!(
            bpf.off_cpu_nanos(100),
            400,
            "each recorded switch stands for four"
        );
        let behind = SampleClock {
            to_unix_nanos: -10 * i128::from(S),
            off_cpu_share: f64::NAN,
        };
        assert_eq!(behind.unix_nanos(5 * S), 0, "before 1970: read as now");
        assert_eq!(
            behind.off_cpu_nanos(100),
            100,
            "a share that is no share scales nothing"
        );
    }

    fn idle_sample() -> Sample {
        let mut s = sample(0, S, Vec::new());
        s.comm = "swapper/0".into();
        s.kernel_stack = vec![0xffffffff81000010];
        s
    }

    #[test]
    fn idle_samples_are_dropped_unless_send_idle_frames() {
        let config = Config {
            symbolize: false,
            ..Config::default()
        };
        assert!(!config.send_idle_frames, "the OTel profiler's default");
        let mut engine = Engine::new(config, env(clock_at(S)));
        engine.on_sample(idle_sample());
        assert!(engine.flush().is_none(), "nothing kept");
        assert_eq!(engine.stats().samples_idle_dropped, 1);
        assert_eq!(engine.stats().samples_received, 1);
        // Kept when asked for (idle_samples_need_no_proc_entry shows what they carry).
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                send_idle_frames: true,
                ..Config::default()
            },
            env(clock_at(S)),
        );
        engine.on_sample(idle_sample());
        assert_eq!(engine.flush().expect("kept").sample_count(), 1);
    }

    /// Idle samples are judged by the include and exclude lists like any process's, by its
    /// name `swapper`: a config naming its services keeps none of them.
    #[test]
    fn idle_samples_obey_the_process_filters() {
        let kept = |filters: &str| {
            let yaml = format!("send_idle_frames: true\nsymbolize: false\n{filters}");
            let config: Config = profcol_core::config::parse_typed(
                &profcol_core::config::parse_yaml("x", &yaml).expect("yaml"),
            )
            .expect("config");
            let mut engine = Engine::new(config, env(clock_at(S)));
            engine.on_sample(idle_sample());
            engine.flush().map_or(0, |b| b.sample_count())
        };
        assert_eq!(kept(""), 1);
        assert_eq!(kept("include:\n  executable_names: ['^myapp$']\n"), 0);
        assert_eq!(kept("exclude:\n  executable_names: ['^swapper$']\n"), 0);
        assert_eq!(kept("include:\n  executable_names: ['^swapper$']\n"), 1);
    }

    /// The last frame of the only stack in a batch from one sample whose user walk failed.
    fn last_frame_of_failed_walk(
        send_error_frames: bool,
        end: profcol_bpf::UnwindEnd,
    ) -> (String, String, u64) {
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                send_error_frames,
                ..Config::default()
            },
            env(clock_at(S)),
        );
        let leaf = engine_marker_leaf as *const () as usize as u64;
        let mut s = sample(std::process::id(), S, vec![leaf, leaf]);
        s.user_truncated = true;
        s.unwind_end = end;
        engine.on_sample(s);
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let stack = stack_of(&batch, 0);
        assert_eq!(stack.len(), 3, "two frames and the marker");
        let last = *stack.last().expect("last");
        let name = names(d, last).join("");
        (
            name,
            frame_type(d, last),
            d.location_table[last as usize].address,
        )
    }

    #[test]
    fn send_error_frames_ends_a_failed_walk_with_an_error_frame() {
        use profcol_bpf::UnwindEnd;
        // Off (the default): the stack is kept, cut, with the marker every cut stack has.
        assert_eq!(
            last_frame_of_failed_walk(false, UnwindEnd::ReadFault),
            ("[truncated]".to_owned(), "abort-marker".to_owned(), 0)
        );
        // On: an abort-marker frame with the error's code as its address, and its name.
        assert_eq!(
            last_frame_of_failed_walk(true, UnwindEnd::ReadFault),
            (
                "[unwinding failed: read_fault]".to_owned(),
                "abort-marker".to_owned(),
                3
            )
        );
        assert_eq!(
            last_frame_of_failed_walk(true, UnwindEnd::BadFrame).0,
            "[unwinding failed: bad_frame]"
        );
        assert_eq!(
            last_frame_of_failed_walk(true, UnwindEnd::Unsupported).0,
            "[unwinding failed: unsupported]"
        );
        // A walk cut at the frame limit did not fail: it stays [truncated].
        assert_eq!(
            last_frame_of_failed_walk(true, UnwindEnd::Depth).0,
            "[truncated]"
        );
    }

    #[test]
    fn a_walk_that_reached_the_end_gets_no_error_frame() {
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                send_error_frames: true,
                ..Config::default()
            },
            env(clock_at(S)),
        );
        let leaf = engine_marker_leaf as *const () as usize as u64;
        let mut s = sample(std::process::id(), S, vec![leaf, leaf]);
        s.unwind_end = profcol_bpf::UnwindEnd::Outermost;
        engine.on_sample(s);
        let batch = engine.flush().expect("batch").to_wire();
        let d = batch.dictionary();
        let types: Vec<String> = stack_of(&batch, 0)
            .iter()
            .map(|&l| frame_type(d, l))
            .collect();
        assert_eq!(types, ["native", "native"]);
    }

    #[test]
    fn probabilistic_threshold_keeps_only_the_intervals_drawn() {
        let clock = clock_at(S);
        // threshold 40: the first interval draws 70 (dropped), the second 20 (kept).
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                probabilistic_threshold: 40,
                probabilistic_interval: Duration::from_secs(60),
                ..Config::default()
            },
            env(clock.clone()),
        )
        .with_random(Box::new(crate::schedule::tests::Fixed(vec![0.70, 0.20], 0)));
        let pid = std::process::id();
        let leaf = engine_marker_leaf as *const () as usize as u64;
        for i in 0..3 {
            engine.on_sample(sample(pid, S + i, vec![leaf]));
        }
        assert!(engine.flush().is_none(), "the first interval was not drawn");
        assert_eq!(engine.stats().samples_probabilistic_dropped, 3);
        clock.set(61 * S);
        for i in 0..2 {
            // Two threads: two samples (one thread's events would share one).
            let mut s = sample(pid, 61 * S + i, vec![leaf]);
            s.tid = pid + i as u32;
            engine.on_sample(s);
        }
        assert_eq!(engine.flush().expect("kept").sample_count(), 2);
        assert_eq!(engine.stats().samples_probabilistic_dropped, 3);
        assert_eq!(engine.stats().samples_received, 5);
    }

    /// A `/proc` of one process, `pid`, started `started_after_boot` after boot, on a machine
    /// up for `uptime`.
    fn fake_proc(dir: &std::path::Path, pid: u32, started_after_boot: Duration, uptime: Duration) {
        let hz = rustix::param::clock_ticks_per_second();
        let ticks = started_after_boot.as_secs() * hz;
        let p = dir.join(pid.to_string());
        std::fs::create_dir_all(&p).expect("mkdir");
        std::fs::write(p.join("comm"), "young\n").expect("comm");
        let zeros = "0 ".repeat(18);
        std::fs::write(
            p.join("stat"),
            format!("{pid} (young (x)) S {zeros}{ticks} 0 0\n"),
        )
        .expect("stat");
        set_uptime(dir, uptime);
    }

    fn set_uptime(dir: &std::path::Path, uptime: Duration) {
        std::fs::write(
            dir.join("uptime"),
            format!("{:.2} 1.00\n", uptime.as_secs_f64()),
        )
        .expect("uptime");
    }

    #[test]
    fn filter_min_process_age_drops_samples_of_young_processes() {
        let dir = tempfile::tempdir().expect("tmp");
        let pid = 4242;
        // Up 100 s; the process started at 95 s: 5 s old.
        fake_proc(
            dir.path(),
            pid,
            Duration::from_secs(95),
            Duration::from_secs(100),
        );
        let clock = clock_at(1000 * S);
        let environment = Environment {
            procfs: ProcFs::new(dir.path()),
            ..env(clock.clone())
        };
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                filter_min_process_age: Duration::from_secs(10),
                ..Config::default()
            },
            environment,
        );
        let mut s = sample(pid, 1000 * S, Vec::new());
        s.kernel_stack = vec![0xffffffff81000010];
        engine.on_sample(s.clone());
        assert_eq!(engine.stats().samples_young_dropped, 1);
        assert!(
            engine.processes().get(pid).is_none(),
            "a young process is not read past its start time"
        );
        assert!(engine.flush().is_none());
        // 6 s later it is 11 s old: profiled.
        clock.set(1006 * S);
        set_uptime(dir.path(), Duration::from_secs(106));
        engine.on_sample(s.clone());
        let batch = engine.flush().expect("old enough").to_wire();
        assert_eq!(batch.sample_count(), 1);
        assert_eq!(
            resource_attr(&batch, "process.pid"),
            Some(Value::IntValue(4242))
        );
        assert_eq!(engine.stats().samples_young_dropped, 1);
        // Without the filter the young process is profiled at once.
        let dir = tempfile::tempdir().expect("tmp");
        fake_proc(
            dir.path(),
            pid,
            Duration::from_secs(99),
            Duration::from_secs(100),
        );
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                ..Config::default()
            },
            Environment {
                procfs: ProcFs::new(dir.path()),
                ..env(clock_at(1000 * S))
            },
        );
        engine.on_sample(s);
        assert_eq!(engine.flush().expect("kept").sample_count(), 1);
    }

    #[test]
    fn a_process_whose_start_is_unknown_is_not_held_back_by_its_age() {
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                filter_min_process_age: Duration::from_secs(3600),
                ..Config::default()
            },
            env(clock_at(S)),
        );
        // No /proc entry at all: its age is unknown, so it is not dropped for it.
        let mut s = sample(u32::MAX - 3, S, Vec::new());
        s.kernel_stack = vec![0xffffffff81000010];
        engine.on_sample(s);
        assert_eq!(engine.stats().samples_young_dropped, 0);
        assert_eq!(engine.flush().expect("kept").sample_count(), 1);
        // This test process, with the real /proc and clock, is younger than an hour.
        let mut engine = Engine::new(
            Config {
                symbolize: false,
                filter_min_process_age: Duration::from_secs(3600),
                ..Config::default()
            },
            Environment {
                scan_at_start: false,
                ..Environment::host()
            },
        );
        let mut s = sample(std::process::id(), 0, Vec::new());
        s.kernel_stack = vec![0xffffffff81000010];
        engine.on_sample(s);
        assert_eq!(engine.stats().samples_young_dropped, 1);
    }

    pub(crate) mod attacker {
        //! A local attacker, as root: a process maps crafted files (an ELF header claiming
        //! 65535 program headers and sections, a Go binary whose `.gopclntab` is 4 bytes), and
        //! between the moment profcol reads its maps and the moment it opens the files, puts a
        //! FIFO, a symbolic link to a root-only file, and another file at their paths. profcol
        //! must keep profiling the other process (this one), never block, record for upload
        //! only files it verified, and count every bad file.
        //!
        //! Two engines see the attacker: one through the real `/proc` (root reads
        //! `/proc/<pid>/map_files`, the very files mapped), and one through a `/proc` whose
        //! `map_files` is hidden, as for a profiler with only `CAP_BPF`, `CAP_PERFMON` and
        //! `CAP_SYS_PTRACE`: files are then opened by path inside `/proc/<pid>/root`, from maps
        //! read before the swap.

        use std::fs;
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::fs::symlink;
        use std::path::{Path, PathBuf};
        use std::process::{Child, Command, Stdio};
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        use profcol_core::pdata::ProfileBatch;
        use profcol_core::pdata::types::Value;

        use crate::elf::ElfFile;
        use crate::procfs::{MapsPath, parse_maps};
        use crate::{Config, Engine, Environment, Sample, SystemClock};

        #[inline(never)]
        fn victim_marker(x: u64) -> u64 {
            std::hint::black_box(x.wrapping_mul(13).rotate_left(5))
        }

        /// An ELF64 header claiming 65535 program headers and 65535 sections.
        pub(crate) fn huge_counts() -> Vec<u8> {
            let mut f = vec![0u8; 4096];
            f[..6].copy_from_slice(b"\x7fELF\x02\x01");
            f[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
            f[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
            f[40..48].copy_from_slice(&64u64.to_le_bytes()); // shoff
            f[54..56].copy_from_slice(&56u16.to_le_bytes());
            f[56..58].copy_from_slice(&u16::MAX.to_le_bytes());
            f[58..60].copy_from_slice(&64u16.to_le_bytes());
            f[60..62].copy_from_slice(&u16::MAX.to_le_bytes());
            f
        }

        /// An ELF64 file with a `.gopclntab` of 4 bytes (a valid Go 1.20 magic) and a `.text`.
        fn four_byte_gopclntab() -> Vec<u8> {
            let names = b"\0.shstrtab\0.gopclntab\0.text\0";
            let mut f = vec![0u8; 4096];
            f[..6].copy_from_slice(b"\x7fELF\x02\x01");
            f[16..18].copy_from_slice(&3u16.to_le_bytes());
            f[40..48].copy_from_slice(&512u64.to_le_bytes()); // shoff
            f[58..60].copy_from_slice(&64u16.to_le_bytes());
            f[60..62].copy_from_slice(&4u16.to_le_bytes()); // shnum
            f[62..64].copy_from_slice(&1u16.to_le_bytes()); // shstrndx
            f[64..64 + names.len()].copy_from_slice(names);
            f[128..132].copy_from_slice(&0xffff_fff1u32.to_le_bytes());
            // (name offset, type, offset, size)
            let sections = [
                (0u32, 0u32, 0u64, 0u64),
                (1, 3, 64, names.len() as u64),
                (11, 1, 128, 4),
                (22, 1, 1024, 1024),
            ];
            for (i, (name, kind, offset, size)) in sections.into_iter().enumerate() {
                let at = 512 + i * 64;
                f[at..at + 4].copy_from_slice(&name.to_le_bytes());
                f[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
                f[at + 16..at + 24].copy_from_slice(&offset.to_le_bytes()); // addr = offset
                f[at + 24..at + 32].copy_from_slice(&offset.to_le_bytes());
                f[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
            }
            f
        }

        /// A process mapping `files` executable; stops when dropped.
        pub(crate) struct Attacker(Child);

        impl Attacker {
            pub(crate) fn spawn(files: &[PathBuf]) -> Self {
                let script = "import mmap, sys\n\
            maps = []\n\
            for p in sys.argv[1:]:\n    \
                f = open(p, 'rb')\n    \
                maps.append(mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC))\n\
            print('ready', flush=True)\n\
            sys.stdin.read()\n";
                let mut child = Command::new("/usr/bin/python3")
                    .arg("-c")
                    .arg(script)
                    .args(files)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("python3");
                let mut line = String::new();
                BufReader::new(child.stdout.as_mut().expect("stdout"))
                    .read_line(&mut line)
                    .expect("ready");
                assert_eq!(line.trim(), "ready");
                Attacker(child)
            }

            pub(crate) fn pid(&self) -> u32 {
                self.0.id()
            }
        }

        impl Drop for Attacker {
            fn drop(&mut self) {
                let _ = self.0.stdin.as_mut().map(|s| s.write_all(b"x"));
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }

        /// The start address of the executable mapping of `path` in `maps`.
        pub(crate) fn mapped_at(maps: &str, path: &Path) -> u64 {
            parse_maps(maps)
                .into_iter()
                .find(|m| {
                    m.perms.exec
                        && matches!(&m.path, MapsPath::File { path: p, .. } if Path::new(p) == path)
                })
                .map(|m| m.start)
                .unwrap_or_else(|| panic!("{} is mapped executable", path.display()))
        }

        fn gnu_build_id_hex(path: &Path) -> String {
            hex::encode(
                ElfFile::open(path)
                    .expect("elf")
                    .gnu_build_id()
                    .expect("build id"),
            )
        }

        /// A `/proc` for `pids` with everything but `map_files`: `maps` as given, `root` a link
        /// to the real `/proc/<pid>/root`.
        fn proc_without_map_files(root: &Path, pids: &[(u32, &str)]) {
            for &(pid, maps) in pids {
                let real = PathBuf::from(format!("/proc/{pid}"));
                let d = root.join(pid.to_string());
                fs::create_dir_all(&d).expect("mkdir");
                for name in ["comm", "stat", "cgroup"] {
                    fs::write(d.join(name), fs::read(real.join(name)).expect(name)).expect("write");
                }
                fs::write(d.join("maps"), maps).expect("maps");
                symlink(fs::read_link(real.join("exe")).expect("exe"), d.join("exe")).expect("exe");
                symlink(real.join("root"), d.join("root")).expect("root");
            }
        }

        /// Every location's function names, by `process.pid`.
        fn names_by_pid(batch: &ProfileBatch) -> Vec<(i64, Vec<Vec<String>>)> {
            let batch = batch.to_wire();
            let d = batch.dictionary();
            batch
                .resource_profiles()
                .iter()
                .map(|rp| {
                    let pid = rp
                        .resource
                        .as_ref()
                        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "process.pid"))
                        .and_then(|kv| kv.value.as_ref()?.value.clone());
                    let Some(Value::IntValue(pid)) = pid else {
                        panic!("a pid");
                    };
                    let mut locations = Vec::new();
                    for p in rp.scope_profiles.iter().flat_map(|s| s.profiles.iter()) {
                        for s in &p.samples {
                            for &l in &d.stack_table[s.stack_index as usize].location_indices {
                                locations.push(
                                    d.location_table[l as usize]
                                        .lines
                                        .iter()
                                        .map(|line| {
                                            let f = d.function_table[line.function_index as usize];
                                            d.string_table[f.name_strindex as usize].clone()
                                        })
                                        .collect(),
                                );
                            }
                        }
                    }
                    (pid, locations)
                })
                .collect()
        }

        fn sample(pid: u32, user: Vec<u64>) -> Sample {
            Sample {
                pid,
                tid: pid,
                comm: "x".into(),
                user_stack: user,
                ..Sample::default()
            }
        }

        #[test]
        fn a_local_attacker_neither_stops_nor_misleads_the_profiler() {
            let euid =
                std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").expect("proc"));
            if euid != 0 {
                eprintln!("skipping: needs root (map_files, other users' files)");
                return;
            }
            let _ = victim_marker(1);
            let dir = tempfile::tempdir().expect("tmp");
            let d = dir.path();
            let secret = d.join("secret");
            fs::create_dir(&secret).expect("mkdir");
            fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .expect("chmod");
            // A root-only ELF whose build id nothing else here has.
            fs::copy("/usr/bin/env", secret.join("tool")).expect("copy");
            let secret_id = gnu_build_id_hex(&secret.join("tool"));
            let files: Vec<PathBuf> = ["huge.so", "go4.so", "swap.so", "link.so", "inode.so"]
                .iter()
                .map(|n| d.join(n))
                .collect();
            fs::write(&files[0], huge_counts()).expect("write");
            fs::write(&files[1], four_byte_gopclntab()).expect("write");
            for f in &files[2..] {
                fs::copy("/usr/bin/true", f).expect("copy");
            }
            let true_id = gnu_build_id_hex(&files[2]);
            assert_ne!(true_id, secret_id);

            let attacker = Attacker::spawn(&files);
            let pid = attacker.pid();
            let own = std::process::id();
            // Maps as the profiler reads them, before the attacker swaps the files.
            let attacker_maps = fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
            let own_maps = fs::read_to_string("/proc/self/maps").expect("maps");
            let addrs: Vec<u64> = files
                .iter()
                .map(|f| mapped_at(&attacker_maps, f) + 0x10)
                .collect();
            let fake = d.join("proc");
            proc_without_map_files(&fake, &[(pid, &attacker_maps), (own, &own_maps)]);

            // The swap: a FIFO, a link to the root-only file, another file with the secret's
            // bytes. The mapped inodes live on under other names.
            fs::rename(&files[2], d.join("swap.keep")).expect("rename");
            let status = Command::new("mkfifo")
                .arg(&files[2])
                .status()
                .expect("mkfifo");
            assert!(status.success());
            fs::rename(&files[3], d.join("link.keep")).expect("rename");
            symlink(secret.join("tool"), &files[3]).expect("symlink");
            fs::rename(&files[4], d.join("inode.keep")).expect("rename");
            fs::copy(secret.join("tool"), &files[4]).expect("copy");

            let victim = victim_marker as *const () as usize as u64 + 4;
            let executables = Arc::new(profcol_core::host_executables::Registry::new());
            let run = |procfs: crate::ProcFs| {
                let env = Environment {
                    procfs,
                    executables: executables.clone(),
                    scan_at_start: false,
                    host_name: None,
                    clock: Arc::new(SystemClock),
                    ..Environment::host()
                };
                let mut engine = Engine::new(Config::default(), env);
                let started = Instant::now();
                engine.on_sample(sample(pid, addrs.clone()));
                engine.on_sample(sample(own, vec![victim]));
                let batch = engine.flush().expect("a batch");
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "nothing blocked ({:?})",
                    started.elapsed()
                );
                (names_by_pid(&batch), engine.stats())
            };
            let check_victim = |by_pid: &[(i64, Vec<Vec<String>>)]| {
                let (_, own_frames) = by_pid
                    .iter()
                    .find(|(p, _)| *p == i64::from(own))
                    .expect("this process is profiled");
                assert!(
                    own_frames[0]
                        .last()
                        .is_some_and(|n| n.ends_with("victim_marker")),
                    "{own_frames:?}"
                );
            };

            // Through the real /proc: map_files gives the mapped files themselves.
            let (by_pid, stats) = run(crate::ProcFs::default());
            check_victim(&by_pid);
            let (_, frames) = by_pid
                .iter()
                .find(|(p, _)| *p == i64::from(pid))
                .expect("the attacker is profiled too");
            assert_eq!(frames.len(), 5);
            assert!(frames[0].is_empty() && frames[1].is_empty(), "{frames:?}");
            assert_eq!(stats.files_rejected, 2, "huge counts, 4-byte .gopclntab");
            assert_eq!(stats.symbolizer_restarts, 0);

            // Through /proc/<pid>/root, from maps read before the swap.
            let (by_pid, stats) = run(crate::ProcFs::new(&fake));
            check_victim(&by_pid);
            let (_, frames) = by_pid
                .iter()
                .find(|(p, _)| *p == i64::from(pid))
                .expect("the attacker is profiled too");
            assert!(frames.iter().all(Vec::is_empty), "{frames:?}");
            assert_eq!(
                stats.files_rejected, 5,
                "huge counts, 4-byte .gopclntab, FIFO, symlink, other inode"
            );
            assert_eq!(stats.symbolizer_restarts, 0);

            // Uploads: the root-only file was never recorded under its build id; the file that
            // was (true's, through map_files) is opened by the checked opener, which refuses the
            // FIFO now at its old path at once, and reads the mapped file through map_files.
            assert_eq!(executables.paths(&secret_id), None);
            let recorded = executables.paths(&true_id).expect("recorded");
            let started = Instant::now();
            let fifo_path = PathBuf::from(format!("/proc/{pid}/root"))
                .join(files[2].strip_prefix("/").expect("absolute"));
            assert!(executables.open(&fifo_path).is_err());
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the FIFO was not opened"
            );
            let opened = recorded
                .iter()
                .filter(|p| p.to_string_lossy().contains(&format!("/{pid}/map_files/")))
                .find_map(|p| executables.open(p).ok())
                .expect("the mapped file opens through map_files");
            assert_eq!(
                opened.size,
                fs::metadata("/usr/bin/true").expect("meta").len()
            );
            drop(attacker);
        }
    }
}
