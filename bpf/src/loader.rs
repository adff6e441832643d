//! Loading, configuring and attaching the BPF object, and reading its ring buffer.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use libbpf_rs::{
    Link, MapCore, MapFlags, Object, ObjectBuilder, PrintLevel, RingBuffer, RingBufferBuilder,
};

use crate::event::{self, DecodeError};
use crate::{
    BpfError, Event, MAX_CGROUP_FILTER, MAX_PID_FILTER, ProfilerConfig, perf, privileges,
    switch_stack,
};

/// The compiled BPF object (`bpf/build-object.sh`), 8-byte aligned for libelf.
static OBJECT: &[u8] = {
    #[repr(C, align(8))]
    struct Aligned<B: ?Sized> {
        bytes: B,
    }
    static ALIGNED: &Aligned<[u8]> = &Aligned {
        bytes: *include_bytes!("bpf/profiler.bpf.o"),
    };
    &ALIGNED.bytes
};

// Names in profiler.bpf.c.
/// Where off-CPU stacks find the scheduler's addresses.
const KALLSYMS: &str = "/proc/kallsyms";
const PROG_SAMPLE: &str = "on_cpu_sample";
const PROGS_TRACEPOINT: [&str; 3] = ["on_exec", "on_fork", "on_exit"];
const PROG_SWITCH: &str = "on_switch";
const MAP_EVENTS: &str = "events";
const MAP_LOST: &str = "lost";
const MAP_CONFIG: &str = "config";
const MAP_INCLUDE_PIDS: &str = "include_pids";
const MAP_EXCLUDE_PIDS: &str = "exclude_pids";
const MAP_INCLUDE_CGROUPS: &str = "include_cgroups";
const MAP_EXCLUDE_CGROUPS: &str = "exclude_cgroups";
const MAP_REFUSED_PIDS: &str = "refused_pids";
const MAP_OFF_CPU_WAITING: &str = "off_cpu_waiting";
const MAP_OFF_CPU_MARKS: &str = "off_cpu_marks";
const MAP_PYTHON_PROCS: &str = "python_procs";
/// `off_cpu_marks`: one bit per thread id below 2^22 (PID_MAX_LIMIT on 64-bit).
const OFF_CPU_MARK_WORDS: u32 = (1 << 22) / 64;
/// Recorded threads off the CPU at once (`off_cpu_waiting`, ~4.3 KiB each, preallocated).
pub(crate) const MAX_OFF_CPU_WAITING: u32 = 4096;

// filter_config.flags
const FILTER_INCLUDE_PIDS: u32 = 1 << 0;
const FILTER_EXCLUDE_PIDS: u32 = 1 << 1;
const FILTER_INCLUDE_CGROUPS: u32 = 1 << 2;
const FILTER_EXCLUDE_CGROUPS: u32 = 1 << 3;
const FILTER_SEND_IDLE: u32 = 1 << 4;

// lost[] slots
const LOST_SAMPLES: u32 = 0;
const LOST_PROCESS_EVENTS: u32 = 1;
const LOST_OFF_CPU: u32 = 2;

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
const MAX_RING_BYTES: usize = 1 << 30;

/// The running profiler: the BPF programs loaded and attached, the sampling
/// events open on every online CPU. Dropping it detaches everything and frees
/// the kernel resources.
///
/// `Send`, so it can live on a dedicated (blocking) thread that calls
/// [`Profiler::poll`] in a loop.
pub struct Profiler {
    // Field order is drop order: stop reading, then detach, then unload.
    ring: RingBuffer<'static>,
    queue: Arc<Mutex<VecDeque<Event>>>,
    malformed: Arc<AtomicU64>,
    links: Vec<Link>,
    /// The unwind tables loaded, by slot (also held by the outer map).
    tables: std::collections::HashMap<u32, libbpf_rs::MapHandle>,
    object: Object,
    cpus: Vec<u32>,
    flags: u32,
    self_tgid: u32,
    off_cpu: crate::OffCpuShare,
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("cpus", &self.cpus)
            .field("links", &self.links.len())
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

/// Rounds a requested ring size to what the kernel accepts: a power of two,
/// at least one page.
fn ring_size(requested: usize, page: usize) -> Result<u32, BpfError> {
    let size = requested
        .max(page)
        .checked_next_power_of_two()
        .filter(|&s| s <= MAX_RING_BYTES);
    size.and_then(|s| u32::try_from(s).ok()).ok_or_else(|| {
        BpfError::Config(format!(
            "ring_buffer_bytes {requested} is over {MAX_RING_BYTES}"
        ))
    })
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones use memcg.
/// Raise it when we may; without CAP_SYS_RESOURCE on a new kernel it does not matter.
fn raise_memlock_rlimit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit that outlives the call. Failure is fine (see above).
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

// libbpf's messages: forwarded to `tracing`, and the latest kept to explain load failures.
static LIBBPF_LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
const LIBBPF_LOG_LINES: usize = 60;

fn libbpf_print(level: PrintLevel, msg: String) {
    let msg = msg.trim_end().to_owned();
    match level {
        PrintLevel::Warn => tracing::warn!(target: "libbpf", "{msg}"),
        PrintLevel::Info | PrintLevel::Debug => tracing::debug!(target: "libbpf", "{msg}"),
    }
    let mut log = LIBBPF_LOG.lock().unwrap_or_else(PoisonError::into_inner);
    for line in msg.lines() {
        if log.len() == LIBBPF_LOG_LINES {
            log.pop_front();
        }
        log.push_back(line.to_owned());
    }
}

fn take_libbpf_log() -> String {
    let mut log = LIBBPF_LOG.lock().unwrap_or_else(PoisonError::into_inner);
    let text = log
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n");
    log.clear();
    text
}

fn with_log(err: &libbpf_rs::Error) -> String {
    let log = take_libbpf_log();
    if log.is_empty() {
        format!("{err:#}")
    } else {
        format!("{err:#}\nlibbpf log:\n{log}")
    }
}

fn dedup<T: Ord + Copy>(items: &[T], max: usize, what: &str) -> Result<Vec<T>, BpfError> {
    let set: BTreeSet<T> = items.iter().copied().collect();
    if set.len() > max {
        return Err(BpfError::Config(format!(
            "{} {what} given, at most {max} supported",
            set.len()
        )));
    }
    Ok(set.into_iter().collect())
}

fn flag_if(nonempty: bool, flag: u32) -> u32 {
    if nonempty { flag } else { 0 }
}

impl Profiler {
    /// Checks privileges and kernel support, loads the BPF object, applies the
    /// filters, attaches the exec/fork/exit tracepoints and one sampling event
    /// per online CPU.
    ///
    /// Errors: [`BpfError::MissingPrivileges`] names what is missing (nothing is
    /// loaded then); [`BpfError::Unsupported`] without kernel BTF;
    /// [`BpfError::Config`] for a frequency of 0 or above
    /// `kernel.perf_event_max_sample_rate`, or oversized filter sets.
    pub fn start(config: &ProfilerConfig) -> Result<Profiler, BpfError> {
        privileges::check_privileges()?;
        if config.frequency_hz == 0 {
            return Err(BpfError::Config("frequency_hz must be at least 1".into()));
        }
        if let Some(max) = perf::max_sample_rate()
            && config.frequency_hz > max
        {
            return Err(BpfError::Config(format!(
                "frequency_hz {} is above kernel.perf_event_max_sample_rate {max}",
                config.frequency_hz
            )));
        }
        let ring_bytes = ring_size(config.ring_buffer_bytes, page_size())?;
        let include_pids = dedup(&config.include_pids, MAX_PID_FILTER, "include_pids")?;
        let exclude_pids = dedup(&config.exclude_pids, MAX_PID_FILTER, "exclude_pids")?;
        let include_cgroups = dedup(
            &config.include_cgroups,
            MAX_CGROUP_FILTER,
            "include_cgroups",
        )?;
        let exclude_cgroups = dedup(
            &config.exclude_cgroups,
            MAX_CGROUP_FILTER,
            "exclude_cgroups",
        )?;
        if !std::path::Path::new(BTF_PATH).exists() {
            return Err(BpfError::Unsupported(format!(
                "{BTF_PATH} is missing: the kernel was built without CONFIG_DEBUG_INFO_BTF, which CO-RE needs"
            )));
        }
        let cpus =
            perf::online_cpus().map_err(|e| BpfError::Unsupported(format!("online CPUs: {e}")))?;

        raise_memlock_rlimit();
        // Both maps are preallocated: nothing is spent on them while off-CPU is off.
        let off_cpu_sizes = if config.off_cpu.is_on() {
            (MAX_OFF_CPU_WAITING, OFF_CPU_MARK_WORDS)
        } else {
            (1, 1)
        };
        let object = load_object(ring_bytes, off_cpu_sizes)?;

        let self_tgid = if config.exclude_self {
            std::process::id()
        } else {
            0
        };
        let queue = Arc::new(Mutex::new(VecDeque::new()));
        let malformed = Arc::new(AtomicU64::new(0));
        let scheduler = if config.off_cpu.is_on() {
            let text = switch_stack::scheduler_text(Path::new(KALLSYMS));
            if text.is_none() {
                tracing::info!(
                    "{KALLSYMS} shows no __schedule: off-CPU kernel stacks may start a frame above the scheduler"
                );
            }
            text
        } else {
            None
        };
        let ring = {
            let events = find_map(&object, MAP_EVENTS)?;
            let mut builder = RingBufferBuilder::new();
            let (queue, malformed) = (Arc::clone(&queue), Arc::clone(&malformed));
            builder
                .add(&events, move |bytes: &[u8]| {
                    match event::decode(bytes) {
                        Ok(mut event) => {
                            if let Event::Sample(sample) = &mut event
                                && sample.off_cpu_ns.is_some()
                            {
                                switch_stack::cut_machinery(
                                    &mut sample.kernel_stack,
                                    scheduler.as_ref(),
                                );
                            }
                            queue
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push_back(event)
                        }
                        Err(err) => note_malformed(&malformed, &err),
                    }
                    0
                })
                .map_err(|e| BpfError::Load(format!("{e:#}")))?;
            builder
                .build()
                .map_err(|e| BpfError::Load(format!("{e:#}")))?
        };

        let mut profiler = Profiler {
            ring,
            queue,
            malformed,
            links: Vec::new(),
            tables: std::collections::HashMap::new(),
            object,
            cpus,
            flags: 0,
            self_tgid,
            off_cpu: config.off_cpu,
        };
        profiler.set_pid_filter(&include_pids, &exclude_pids)?;
        profiler.set_cgroup_filter(&include_cgroups, &exclude_cgroups)?;
        profiler.attach(config.frequency_hz)?;
        if config.off_cpu.is_on() {
            profiler.attach_off_cpu()?;
        }
        Ok(profiler)
    }

    fn attach(&mut self, frequency_hz: u64) -> Result<(), BpfError> {
        // Process tracking first, so no process that gets sampled was missed.
        for name in PROGS_TRACEPOINT {
            let prog = self
                .object
                .progs_mut()
                .find(|p| p.name() == name)
                .ok_or_else(|| BpfError::Load(format!("program {name} not in the object")))?;
            let link = prog
                .attach()
                .map_err(|e| BpfError::Attach(format!("{name}: {}", with_log(&e))))?;
            self.links.push(link);
        }
        let prog = self
            .object
            .progs_mut()
            .find(|p| p.name() == PROG_SAMPLE)
            .ok_or_else(|| BpfError::Load(format!("program {PROG_SAMPLE} not in the object")))?;
        for &cpu in &self.cpus {
            let fd = perf::open_cpu_clock(cpu, frequency_hz).map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOENT) | Some(libc::ENODEV) => " (no cpu-clock software event?)",
                    Some(libc::EACCES) | Some(libc::EPERM) => {
                        " (CAP_PERFMON or kernel.perf_event_paranoid)"
                    }
                    _ => "",
                };
                BpfError::Attach(format!(
                    "perf_event_open(cpu-clock, cpu {cpu}, {frequency_hz} Hz): {e}{hint}"
                ))
            })?;
            let link = prog.attach_perf_event(fd.as_raw_fd()).map_err(|e| {
                BpfError::Attach(format!("{PROG_SAMPLE} on cpu {cpu}: {}", with_log(&e)))
            })?;
            // libbpf's perf link now owns the event fd and closes it on detach.
            let _ = fd.into_raw_fd();
            self.links.push(link);
        }
        Ok(())
    }

    /// Off-CPU: the scheduler's switch tracepoint.
    fn attach_off_cpu(&mut self) -> Result<(), BpfError> {
        let link = self
            .program(PROG_SWITCH)?
            .attach()
            .map_err(|e| BpfError::Attach(format!("{PROG_SWITCH}: {}", with_log(&e))))?;
        self.links.push(link);
        Ok(())
    }

    fn program(&mut self, name: &str) -> Result<libbpf_rs::ProgramMut<'_>, BpfError> {
        self.object
            .progs_mut()
            .find(|p| p.name() == name)
            .ok_or_else(|| BpfError::Load(format!("program {name} not in the object")))
    }

    /// Waits up to `timeout` for records, then hands every record in the ring
    /// buffer to `on_event`, in ring order. Returns how many were handed over
    /// (0 on timeout). A zero timeout only drains what is there.
    pub fn poll(
        &mut self,
        timeout: Duration,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<usize, BpfError> {
        let mut rc = self.ring.poll_raw(timeout);
        if rc == 0 {
            // Process events are written without waking the reader (profiler.bpf.c):
            // a poll that timed out still takes what is there.
            rc = self.ring.consume_raw();
        }
        if rc < 0 && rc != -libc::EINTR {
            return Err(BpfError::Poll(
                std::io::Error::from_raw_os_error(-rc).to_string(),
            ));
        }
        let events =
            std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner));
        let n = events.len();
        events.into_iter().for_each(on_event);
        Ok(n)
    }

    /// Samples dropped because the ring buffer was full, summed over CPUs,
    /// since start.
    pub fn lost_samples(&self) -> u64 {
        self.lost(LOST_SAMPLES)
    }

    /// The recorded threads off the CPU now, whose samples wait for them to run again.
    pub fn off_cpu_waiting(&self) -> Vec<u32> {
        find_map(&self.object, MAP_OFF_CPU_WAITING).map_or_else(
            |_| Vec::new(),
            |map| {
                map.keys()
                    .filter_map(|k| k.get(..4)?.try_into().ok().map(u32::from_ne_bytes))
                    .collect()
            },
        )
    }

    /// Off-CPU samples dropped because the ring buffer was full.
    pub fn lost_off_cpu_samples(&self) -> u64 {
        self.lost(LOST_OFF_CPU)
    }

    /// Exec/fork/exit records dropped because the ring buffer was full.
    pub fn lost_process_events(&self) -> u64 {
        self.lost(LOST_PROCESS_EVENTS)
    }

    /// Records that did not decode (a mismatch between the object and this
    /// crate; 0 unless something is badly wrong).
    pub fn malformed_events(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// The CPUs being sampled.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Loads an unwind table (encoded rows, [`crate::UNWIND_ROW_SIZE`] bytes
    /// each) into `slot` (1..[`crate::MAX_UNWIND_TABLES`]) under `generation`
    /// (not 0; mappings name it, so that a slot given to another file is not
    /// mistaken for the old one).
    pub fn load_unwind_table(
        &mut self,
        slot: u32,
        generation: u32,
        rows: &[u8],
    ) -> Result<(), BpfError> {
        self.tables.remove(&slot);
        let table = crate::unwind::load_table(&self.object, slot, generation, rows)?;
        self.tables.insert(slot, table);
        Ok(())
    }

    /// Empties an unwind table slot.
    pub fn unload_unwind_table(&mut self, slot: u32) -> Result<(), BpfError> {
        self.tables.remove(&slot);
        crate::unwind::unload_table(&self.object, slot)
    }

    /// Row `index` of the table in `slot`, encoded as loaded; `None` past its end or
    /// for an empty slot.
    pub fn unwind_row(&self, slot: u32, index: u32) -> Option<[u8; crate::UNWIND_ROW_SIZE]> {
        crate::unwind::read_row(self.tables.get(&slot)?, index)
    }

    /// Gives the walker the executable mappings of process `pid` (sorted,
    /// disjoint, at most [`crate::MAX_PROCESS_MAPPINGS`]). Until a process has
    /// them, its samples carry the kernel's frame-pointer walk.
    pub fn set_process_mappings(
        &self,
        pid: u32,
        mappings: &[crate::UnwindMapping],
    ) -> Result<(), BpfError> {
        crate::unwind::set_process(&self.object, pid, mappings)
    }

    /// Forgets the mappings of process `pid`.
    pub fn remove_process_mappings(&self, pid: u32) -> Result<(), BpfError> {
        crate::unwind::remove_process(&self.object, pid)
    }

    /// Why user-stack walks ended, and how callers were found, since start.
    pub fn unwind_stats(&self) -> crate::UnwindStats {
        crate::unwind::stats(&self.object)
    }

    fn lost(&self, slot: u32) -> u64 {
        find_map(&self.object, MAP_LOST).map_or(0, |map| sum_per_cpu(&map, slot))
    }

    /// Replaces the pid filters at run time: only `include` processes are
    /// sampled (all when empty), never `exclude` ones.
    pub fn set_pid_filter(&mut self, include: &[u32], exclude: &[u32]) -> Result<(), BpfError> {
        let include = dedup(include, MAX_PID_FILTER, "include pids")?;
        let exclude = dedup(exclude, MAX_PID_FILTER, "exclude pids")?;
        let keys = |v: &[u32]| {
            v.iter()
                .map(|k| k.to_ne_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        let flags = (self.flags & !(FILTER_INCLUDE_PIDS | FILTER_EXCLUDE_PIDS))
            | flag_if(!include.is_empty(), FILTER_INCLUDE_PIDS)
            | flag_if(!exclude.is_empty(), FILTER_EXCLUDE_PIDS);
        self.update_filters(
            flags,
            &[
                (MAP_INCLUDE_PIDS, keys(&include)),
                (MAP_EXCLUDE_PIDS, keys(&exclude)),
            ],
        )
    }

    /// Replaces the cgroup filters at run time (cgroup v2 ids): only tasks in
    /// `include` cgroups are sampled (all when empty), never those in `exclude`.
    pub fn set_cgroup_filter(&mut self, include: &[u64], exclude: &[u64]) -> Result<(), BpfError> {
        let include = dedup(include, MAX_CGROUP_FILTER, "include cgroups")?;
        let exclude = dedup(exclude, MAX_CGROUP_FILTER, "exclude cgroups")?;
        let keys = |v: &[u64]| {
            v.iter()
                .map(|k| k.to_ne_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        let flags = (self.flags & !(FILTER_INCLUDE_CGROUPS | FILTER_EXCLUDE_CGROUPS))
            | flag_if(!include.is_empty(), FILTER_INCLUDE_CGROUPS)
            | flag_if(!exclude.is_empty(), FILTER_EXCLUDE_CGROUPS);
        self.update_filters(
            flags,
            &[
                (MAP_INCLUDE_CGROUPS, keys(&include)),
                (MAP_EXCLUDE_CGROUPS, keys(&exclude)),
            ],
        )
    }

    /// Whether samples of the idle task (pid 0: a CPU with nothing to run) are taken,
    /// as the OTel eBPF profiler's `send_idle_frames`. Off at load.
    pub fn set_send_idle(&mut self, on: bool) -> Result<(), BpfError> {
        let flags = (self.flags & !FILTER_SEND_IDLE) | flag_if(on, FILTER_SEND_IDLE);
        self.write_config(flags)?;
        self.flags = flags;
        Ok(())
    }

    /// Marks process `pid` as refused by the caller's own filters (its samples and
    /// off-CPU switches are then skipped before any stack is taken), or clears the mark.
    /// The kernel side clears it by itself at the process's exec and exit.
    pub fn set_refused(&self, pid: u32, refused: bool) -> Result<(), BpfError> {
        let map = find_map(&self.object, MAP_REFUSED_PIDS)?;
        let key = pid.to_ne_bytes();
        let result = if refused {
            map.update(&key, &[1u8], MapFlags::ANY)
        } else {
            match map.delete(&key) {
                Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        result.map_err(|e| BpfError::Map {
            map: MAP_REFUSED_PIDS,
            message: format!("{e:#}"),
        })
    }

    /// Tells the walker where process `pid`'s CPython keeps its threads and frames
    /// (`Some`), so that its samples carry Python frames, or that it runs none (`None`).
    pub fn set_python_process(
        &self,
        pid: u32,
        python: Option<&crate::PythonProcess>,
    ) -> Result<(), BpfError> {
        let map = find_map(&self.object, MAP_PYTHON_PROCS)?;
        let key = pid.to_ne_bytes();
        let result = match python {
            Some(p) => map.update(&key, &p.to_bytes(), MapFlags::ANY),
            None => match map.delete(&key) {
                Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        };
        result.map_err(|e| BpfError::Map {
            map: MAP_PYTHON_PROCS,
            message: format!("{e:#}"),
        })
    }

    /// Switches filters without a window where a half-written set is in force:
    /// sets being emptied are switched off first, new contents written, then
    /// the new flags.
    fn update_filters(
        &mut self,
        flags: u32,
        sets: &[(&'static str, Vec<Vec<u8>>)],
    ) -> Result<(), BpfError> {
        self.write_config(self.flags & flags)?;
        for (name, keys) in sets {
            replace_set(&self.object, name, keys)?;
        }
        self.write_config(flags)?;
        self.flags = flags;
        Ok(())
    }

    fn write_config(&self, flags: u32) -> Result<(), BpfError> {
        let map = find_map(&self.object, MAP_CONFIG)?;
        // struct filter_config: flags, self_tgid, off_cpu_threshold, reserved.
        let mut value = [0u8; 16];
        value[..4].copy_from_slice(&flags.to_ne_bytes());
        value[4..8].copy_from_slice(&self.self_tgid.to_ne_bytes());
        value[8..12].copy_from_slice(&self.off_cpu.raw().to_ne_bytes());
        map.update(&0u32.to_ne_bytes(), &value, MapFlags::ANY)
            .map_err(|e| BpfError::Map {
                map: MAP_CONFIG,
                message: format!("{e:#}"),
            })
    }
}

/// Opens the embedded object, sizes the ring buffer and loads everything into
/// the kernel (CO-RE relocation, verifier).
/// `off_cpu_sizes`: entries of `off_cpu_waiting` and `off_cpu_marks`.
fn load_object(ring_bytes: u32, off_cpu_sizes: (u32, u32)) -> Result<Object, BpfError> {
    static PRINT: Once = Once::new();
    PRINT.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Info, libbpf_print)));
    });
    let _ = take_libbpf_log(); // only this load's messages explain its failure
    let mut builder = ObjectBuilder::default();
    builder
        .name("profcol_profiler")
        .map_err(|e| BpfError::Load(format!("{e:#}")))?;
    let mut open = builder
        .open_memory(OBJECT)
        .map_err(|e| BpfError::Load(with_log(&e)))?;
    let mut events = open
        .maps_mut()
        .find(|m| m.name() == MAP_EVENTS)
        .ok_or_else(|| BpfError::Load(format!("map {MAP_EVENTS} not in the object")))?;
    events
        .set_max_entries(ring_bytes)
        .map_err(|e| BpfError::Load(format!("{e:#}")))?;
    for (name, entries) in [
        (MAP_OFF_CPU_WAITING, off_cpu_sizes.0),
        (MAP_OFF_CPU_MARKS, off_cpu_sizes.1),
    ] {
        let mut map = open
            .maps_mut()
            .find(|m| m.name() == name)
            .ok_or_else(|| BpfError::Load(format!("map {name} not in the object")))?;
        map.set_max_entries(entries)
            .map_err(|e| BpfError::Load(format!("{e:#}")))?;
    }
    open.load().map_err(|e| BpfError::Load(with_log(&e)))
}

fn note_malformed(counter: &AtomicU64, err: &DecodeError) {
    if counter.fetch_add(1, Ordering::Relaxed) == 0 {
        tracing::warn!("undecodable BPF ring-buffer record: {err:?}");
    }
}

/// Slot `slot` of a per-CPU array of u64 counters, summed over CPUs (0 when unreadable).
pub(crate) fn sum_per_cpu(map: &libbpf_rs::Map<'_>, slot: u32) -> u64 {
    match map.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY) {
        Ok(Some(per_cpu)) => per_cpu
            .iter()
            .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
            .map(u64::from_ne_bytes)
            .fold(0u64, u64::saturating_add),
        _ => 0,
    }
}

pub(crate) fn find_map<'o>(
    object: &'o Object,
    name: &'static str,
) -> Result<libbpf_rs::Map<'o>, BpfError> {
    object
        .maps()
        .find(|m| m.name() == name)
        .ok_or_else(|| BpfError::Map {
            map: name,
            message: "not in the object".into(),
        })
}

/// Makes the hash map `name` hold exactly `keys` (value 1 each): adds first,
/// then removes what is no longer wanted.
fn replace_set(object: &Object, name: &'static str, keys: &[Vec<u8>]) -> Result<(), BpfError> {
    let map = find_map(object, name)?;
    let err = |e: libbpf_rs::Error| BpfError::Map {
        map: name,
        message: format!("{e:#}"),
    };
    let old: Vec<Vec<u8>> = map.keys().collect();
    for key in keys {
        map.update(key, &[1u8], MapFlags::ANY).map_err(err)?;
    }
    let wanted: HashSet<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    for key in old.iter().filter(|k| !wanted.contains(k.as_slice())) {
        if let Err(e) = map.delete(key)
            && e.kind() != libbpf_rs::ErrorKind::NotFound
        {
            return Err(err(e));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_powers_of_two_of_at_least_a_page() {
        assert_eq!(ring_size(0, 4096).ok(), Some(4096));
        assert_eq!(ring_size(4096, 4096).ok(), Some(4096));
        assert_eq!(ring_size(5000, 4096).ok(), Some(8192));
        assert_eq!(ring_size(256 * 1024, 4096).ok(), Some(256 * 1024));
        assert!(ring_size(MAX_RING_BYTES + 1, 4096).is_err());
    }

    #[test]
    fn the_object_is_embedded_and_aligned() {
        assert_eq!(&OBJECT[..4], b"\x7fELF");
        assert_eq!(OBJECT.as_ptr() as usize % 8, 0);
    }

    #[test]
    fn load_failures_carry_libbpf_log() {
        if privileges::check_privileges().is_err() || !std::path::Path::new(BTF_PATH).exists() {
            eprintln!("skipped: needs root (or CAP_BPF + CAP_PERFMON) and kernel BTF");
            return;
        }
        // The kernel refuses an empty ring: libbpf logs why map creation failed.
        let err = load_object(0, (1, 1)).expect_err("a 0-byte ring buffer");
        let text = err.to_string();
        assert!(matches!(err, BpfError::Load(_)), "{text}");
        assert!(
            text.contains("libbpf log:") && text.contains("events"),
            "{text}"
        );
        eprintln!("{text}");
        assert!(load_object(8192, (1, 1)).is_ok());
    }

    #[test]
    fn off_cpu_shares_round_trip_their_probability() {
        use crate::OffCpuShare;
        assert_eq!(OffCpuShare::from_probability(0.0), OffCpuShare::OFF);
        assert_eq!(OffCpuShare::from_probability(f64::NAN), OffCpuShare::OFF);
        assert_eq!(OffCpuShare::from_probability(-1.0), OffCpuShare::OFF);
        assert_eq!(OffCpuShare::from_probability(1.0), OffCpuShare::ALL);
        assert_eq!(OffCpuShare::ALL.probability(), 1.0);
        assert!(
            OffCpuShare::from_probability(1e-12).is_on(),
            "tiny is not off"
        );
        let tenth = OffCpuShare::from_probability(0.1);
        assert!((tenth.probability() - 0.1).abs() < 1e-9);
        assert!(!OffCpuShare::OFF.is_on());
    }

    #[test]
    fn profiler_is_send() {
        fn send<T: Send>() {}
        send::<Profiler>();
    }

    #[test]
    fn filter_sets_are_deduplicated_and_bounded() {
        assert_eq!(dedup(&[3u32, 1, 3], 10, "x").ok(), Some(vec![1, 3]));
        let too_many: Vec<u32> = (0..=MAX_PID_FILTER as u32).collect();
        assert!(matches!(
            dedup(&too_many, MAX_PID_FILTER, "x"),
            Err(BpfError::Config(_))
        ));
    }
}
