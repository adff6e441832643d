//! Process tracking: which executable files each process has mapped where, so that a user
//! space address can be turned into (mapping, file offset), plus the process's identity
//! (executable, container).
//!
//! The [`ProcessTable`] is filled by a scan of `/proc` at start and kept up to date by
//! [`ProcessEvent`]s; a sample from an unknown pid reads `/proc/<pid>` on the spot, so
//! short-lived processes started between events still resolve. An exited process is kept
//! for a grace period, for samples that arrive after its exit. Build ids are read once per
//! file (keyed by device and inode), however many processes map it.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::config::Filter;
use crate::elf::ElfFile;
use crate::procfs::{
    MAX_ENVIRON_BYTES, MapsPath, ProcFs, container_id_from_cgroup, makedev, parse_maps,
    read_capped, read_maps,
};
use crate::safe_file::{FileLocation, Identity, VerifiedFile};
use crate::{BadInputCounters, ProcessEvent};

/// A process whose address misses every mapping gets its maps read again (the dynamic
/// loader, dlopen, JIT), at most this often at first. The wait doubles each time a read
/// finds nothing new, up to [`MAX_MAPS_REFRESH_INTERVAL`]: a process whose stacks hold
/// addresses that are in no mapping (a wrong frame-pointer walk) is not read over and
/// over; a read that finds a new mapping starts again from the shortest wait.
pub const MAPS_REFRESH_INTERVAL: Duration = Duration::from_millis(50);
pub const MAX_MAPS_REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// The shortest wait while a process's maps are young ([`YOUNG_MAPS`] since first read):
/// a process is often first read while its dynamic loader is still mapping its
/// libraries, and its next samples, a few milliseconds later, lie in them.
pub const YOUNG_MAPS_REFRESH_INTERVAL: Duration = Duration::from_millis(1);
pub const YOUNG_MAPS: Duration = Duration::from_secs(1);
/// How long maps that describe another image (an exec whose event has not come) are
/// refused: the event comes within a drain of the ring buffer, unless it was lost.
const REPLACED_IMAGE_WAIT: Duration = Duration::from_millis(100);
/// How often a sampled process's context timestamp is looked at for a new publication.
pub const CONTEXT_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The first wait before a process's maps are looked at again for a context, when the
/// first look found none: SDKs publish as they start, and a process is often read in its
/// first milliseconds (or between fork and exec), before they have.
pub const FIRST_CONTEXT_SCAN_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between looks at a process's maps for a context published late.
pub const MAX_CONTEXT_SCAN_WAIT: Duration = Duration::from_secs(60);
/// Above this many cached files, files no tracked process maps any more are dropped.
const FILE_CACHE_SOFT_LIMIT: usize = 16_384;
/// How a file is recognised across processes: by device and inode, or by path when it has
/// no inode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileKey {
    Inode { dev: u64, inode: u64 },
    Path(String),
}

/// What is known about one mapped file, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutableFile {
    pub key: FileKey,
    /// Whether the file could be opened at all (a file that could not is read again when
    /// another process maps it).
    pub readable: bool,
    /// Whether the file could be read as ELF64 LE.
    pub is_elf: bool,
    pub build_id_gnu: Option<Vec<u8>>,
    pub build_id_go: Option<String>,
    /// Whether it holds Go's function table (`.gopclntab`).
    pub is_go: bool,
    /// The device and inode of the file that was read: symbolization reads a file only
    /// when it is this one.
    pub identity: Option<Identity>,
    /// The CPython interpreter in it, when it is `libpython3.X` or `python3.X` and the
    /// profiler can walk its frames.
    pub python: Option<Arc<crate::python::Interpreter>>,
    /// Why the file was refused when it looked made to mislead (a link, FIFO or device
    /// at its path, another inode than the one mapped, malformed ELF): it is not read
    /// again, not symbolized and not offered for upload.
    pub rejected: Option<String>,
}

impl ExecutableFile {
    pub fn build_id_gnu_hex(&self) -> Option<String> {
        self.build_id_gnu.as_deref().map(hex::encode)
    }

    /// Reads the ids of the first of `locations` that opens, checked
    /// ([`VerifiedFile::open`]; `mapped` is the device and inode `/proc/<pid>/maps`
    /// gives). Headers and notes are read from that one open file, within its size.
    /// `name` is the path it is mapped at, which says whether it may be CPython.
    pub fn read(
        key: FileKey,
        name: &str,
        locations: &[FileLocation],
        mapped: Option<Identity>,
    ) -> Self {
        let mut file = ExecutableFile {
            key,
            readable: false,
            is_elf: false,
            build_id_gnu: None,
            build_id_go: None,
            is_go: false,
            identity: None,
            python: None,
            rejected: None,
        };
        for location in locations {
            let opened = match VerifiedFile::open(location, mapped) {
                Ok(f) => f,
                Err(e) if e.is_suspicious() => {
                    file.readable = true;
                    file.rejected = Some(format!("{}: {e}", location.path().display()));
                    return file;
                }
                Err(_) => continue,
            };
            file.readable = true;
            file.identity = Some(opened.identity());
            let size = opened.size();
            let elf = opened
                .try_clone_file()
                .map_err(crate::elf::ElfError::Io)
                .and_then(|f| ElfFile::from_file(f, size));
            match elf {
                Ok(elf) => {
                    let (gnu, go) = elf.build_ids();
                    file.is_elf = true;
                    file.build_id_gnu = gnu;
                    file.build_id_go = go;
                    file.is_go = elf.gopclntab().is_some();
                    if crate::python::minor_from_name(name).is_some() {
                        match crate::python::detect(name, &elf) {
                            Ok(found) => file.python = found.map(Arc::new),
                            Err(e) => tracing::info!(file = name, "no Python frames: {e}"),
                        }
                    }
                }
                Err(e) if e.is_malformed() => {
                    file.rejected = Some(format!("{}: {e}", location.path().display()));
                }
                // Opened, but not ELF64 LE: another location gives the same file.
                Err(_) => {}
            }
            return file;
        }
        file
    }
}

/// What one mapping maps, for symbolization and the OTLP mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MappingKind {
    File,
    Vdso,
    /// Anonymous executable memory (JIT code): addresses are kept absolute.
    Anonymous,
    /// Another pseudo mapping (`[vsyscall]`).
    Pseudo,
}

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub kind: MappingKind,
    /// The path as the process sees it (in its mount namespace), `[vdso]`, or `[anon]`.
    pub path: String,
    pub deleted: bool,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    pub file: Option<Arc<ExecutableFile>>,
}

impl Mapping {
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// The address relative to the file: `addr - start + offset`, what backends symbolize
    /// with. Anonymous memory has no file; its addresses stay absolute.
    pub fn file_offset(&self, addr: u64) -> u64 {
        match self.kind {
            MappingKind::Anonymous | MappingKind::Pseudo => addr,
            MappingKind::File | MappingKind::Vdso => {
                addr.wrapping_sub(self.start).wrapping_add(self.offset)
            }
        }
    }

    /// Where this mapping's file can be opened from this process, best first:
    /// `/proc/<pid>/map_files/<range>` (the very file mapped, even deleted or in another
    /// mount namespace; needs root), then the path resolved inside `/proc/<pid>/root`.
    pub fn locations(&self, procfs: &ProcFs, pid: u32) -> Vec<FileLocation> {
        if self.kind != MappingKind::File {
            return Vec::new();
        }
        let mut out = vec![FileLocation::MapFiles(
            procfs.pid_path(pid, &format!("map_files/{:x}-{:x}", self.start, self.end)),
        )];
        let relative = self.path.trim_start_matches('/');
        if !self.deleted && !relative.is_empty() {
            out.push(FileLocation::InRoot {
                root: procfs.pid_path(pid, "root"),
                path: PathBuf::from(relative),
            });
        }
        out
    }
}

/// One tracked process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// `/proc/<pid>/comm`: the main thread's name.
    pub comm: String,
    /// The target of `/proc/<pid>/exe`, as the process sees it.
    pub exe_path: Option<String>,
    pub container_id: Option<String>,
    /// Executable mappings, sorted by start address.
    pub mappings: Vec<Arc<Mapping>>,
    /// Whether `/proc/<pid>` could be read. A pid that could not is remembered (so that its
    /// samples do not read `/proc` again and again) but resolves no address.
    pub loaded: bool,
    /// Whether the filter lets its samples through (maps are not read when it does not).
    pub allowed: bool,
    /// When its exit was seen (unix ns); it is dropped a grace period later.
    pub exited_at: Option<u64>,
    /// `/proc/<pid>/stat` start time, to tell a reused pid from the process we knew.
    pub start_time: Option<u64>,
    /// The selected environment variables, read while the process was alive.
    pub env: Vec<(String, String)>,
    /// Known only from its exec or fork event: `/proc` is read at its first sample.
    pub unread: bool,
    /// For a child known only from its fork event: the parent, whose image it runs
    /// until its exec.
    pub forked_from: Option<u32>,
    /// Goes up by one each time `mappings` are read; 0 until they first are.
    pub maps_version: u64,
    maps_read_at: u64,
    /// When `mappings` were first read (unix ns).
    maps_first_read_at: u64,
    /// When a read of the maps first found another image in place of this one.
    image_replaced_at: Option<u64>,
    /// The wait before the maps may be read again ([`MAPS_REFRESH_INTERVAL`]).
    maps_refresh_wait: u64,
    /// Where its process context mapping (OTEP 4719) starts, and what was read there.
    pub context_at: Option<u64>,
    pub context: Option<Arc<crate::process_context::ProcessContext>>,
    /// The publication time last read, taken or refused: not read again.
    context_seen: u64,
    /// When the context (or, with none, the maps for one) was last looked at (unix ns),
    /// and the wait before the maps are looked at again for one published late.
    context_checked_at: u64,
    context_scan_wait: u64,
}

impl Process {
    /// An entry for a pid nothing is known about.
    pub fn unknown(pid: u32) -> Self {
        Process {
            pid,
            comm: String::new(),
            exe_path: None,
            container_id: None,
            env: Vec::new(),
            mappings: Vec::new(),
            loaded: false,
            allowed: true,
            exited_at: None,
            start_time: None,
            unread: false,
            forked_from: None,
            maps_version: 0,
            maps_read_at: 0,
            maps_first_read_at: 0,
            image_replaced_at: None,
            maps_refresh_wait: YOUNG_MAPS_REFRESH_INTERVAL.as_nanos() as u64,
            context_at: None,
            context: None,
            context_seen: 0,
            context_checked_at: 0,
            context_scan_wait: FIRST_CONTEXT_SCAN_WAIT.as_nanos() as u64,
        }
    }

    /// `process.executable.name`: the base name of the executable, or for a process with
    /// no readable executable (a kernel thread) its `comm`.
    pub fn executable_name(&self) -> Option<&str> {
        match &self.exe_path {
            Some(p) => p.rsplit('/').next().filter(|s| !s.is_empty()),
            None => Some(self.comm.as_str()).filter(|s| !s.is_empty()),
        }
    }

    /// The CPython interpreter it runs, from its first executable mapping of a file that
    /// holds one, and that mapping's load bias.
    pub fn python(&self) -> Option<(&Arc<crate::python::Interpreter>, u64)> {
        self.mappings.iter().find_map(|m| {
            let python = m.file.as_ref()?.python.as_ref()?;
            Some((python, python.bias(m.start, m.offset)))
        })
    }

    /// The mapping holding `addr`.
    pub fn find_mapping(&self, addr: u64) -> Option<&Arc<Mapping>> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        i.checked_sub(1)
            .map(|i| &self.mappings[i])
            .filter(|m| m.contains(addr))
    }
}

/// Files read once, shared by every process that maps them.
#[derive(Debug, Default)]
pub struct FileCache {
    files: HashMap<FileKey, Arc<ExecutableFile>>,
    counters: Arc<BadInputCounters>,
}

impl FileCache {
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn get_or_read(
        &mut self,
        key: FileKey,
        name: &str,
        locations: &[FileLocation],
        mapped: Option<Identity>,
    ) -> Arc<ExecutableFile> {
        if let Some(f) = self.files.get(&key).filter(|f| f.readable) {
            return f.clone();
        }
        let file = Arc::new(ExecutableFile::read(key.clone(), name, locations, mapped));
        if let Some(reason) = &file.rejected {
            self.counters.files_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(reason = %reason, "mapped file refused");
        }
        self.files.insert(key, file.clone());
        file
    }

    /// Drops files that nothing else holds, once the cache has grown large.
    pub fn prune(&mut self) {
        if self.files.len() > FILE_CACHE_SOFT_LIMIT {
            self.files.retain(|_, f| Arc::strong_count(f) > 1);
        }
    }
}

/// Every process the receiver knows of.
/// The `NAME=value` pairs of a NUL-separated environ block whose names are in `names`.
fn select_env(raw: &[u8], names: &[String]) -> Vec<(String, String)> {
    raw.split(|&b| b == 0)
        .filter_map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (name, value) = text.split_once('=')?;
            names
                .iter()
                .any(|n| n == name)
                .then(|| (name.to_owned(), value.to_owned()))
        })
        .collect()
}

#[derive(Debug)]
pub struct ProcessTable {
    procfs: ProcFs,
    files: FileCache,
    processes: HashMap<u32, Process>,
    grace_ns: u64,
    filter: Filter,
    /// Environment variables to keep from each process.
    env_vars: Vec<String>,
    /// Where the executables read are recorded for exporters that upload them.
    executables: Option<Arc<profcol_core::host_executables::Registry>>,
}

impl ProcessTable {
    pub fn new(procfs: ProcFs, grace: Duration, filter: Filter) -> Self {
        Self::with_counters(procfs, grace, filter, Arc::default())
    }

    /// A table that counts the files it refuses in `counters`.
    pub fn with_counters(
        procfs: ProcFs,
        grace: Duration,
        filter: Filter,
        counters: Arc<BadInputCounters>,
    ) -> Self {
        ProcessTable {
            procfs,
            files: FileCache {
                files: HashMap::new(),
                counters,
            },
            processes: HashMap::new(),
            grace_ns: u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX),
            filter,
            env_vars: Vec::new(),
            executables: None,
        }
    }

    /// Records in `registry` where each executable read opens from.
    #[must_use]
    pub fn recording_executables(
        mut self,
        registry: Arc<profcol_core::host_executables::Registry>,
    ) -> Self {
        self.executables = Some(registry);
        self
    }

    pub fn procfs(&self) -> &ProcFs {
        &self.procfs
    }

    pub fn len(&self) -> usize {
        self.processes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    pub fn files_cached(&self) -> usize {
        self.files.len()
    }

    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.processes.get(&pid)
    }

    /// Reads every process in `/proc`. Returns how many could be read.
    pub fn scan(&mut self, now: u64) -> usize {
        let mut read = 0;
        for pid in self.procfs.pids() {
            if self.load(pid, now).loaded {
                read += 1;
            }
        }
        read
    }

    /// Reads `/proc/<pid>` (again), replacing what was known about the pid.
    pub fn load(&mut self, pid: u32, now: u64) -> &Process {
        let process = if pid == 0 {
            // Named `swapper`, so that include and exclude lists judge it like any
            // process (only `send_idle_frames` lets its samples this far).
            let mut idle = idle_process();
            idle.allowed = self.filter.allows(&idle);
            idle
        } else {
            self.read_process(pid, now)
        };
        self.processes.insert(pid, process);
        &self.processes[&pid]
    }

    /// Reads the maps of a process known without them (they could not be read when it
    /// was): what its samples need. Returns whether they were read.
    pub fn ensure_maps(&mut self, pid: u32, now: u64) -> bool {
        let Some(p) = self.processes.get(&pid) else {
            return false;
        };
        // The idle task has no maps to read.
        if pid == 0 || p.maps_version != 0 || !p.loaded || !p.allowed {
            return false;
        }
        self.read_mappings(pid, now).is_some()
    }

    /// Reads `/proc/<pid>/maps` into the process's mappings, counting a new version when
    /// they changed. `None` when the file could not be read; else whether they changed.
    fn read_mappings(&mut self, pid: u32, now: u64) -> Option<bool> {
        let maps = read_maps(&self.procfs.pid_path(pid, "maps")).ok()?;
        let mappings = self.mappings_from(pid, &maps);
        let context_at = context_mapping(&maps);
        let (procfs, counters) = (self.procfs.clone(), self.counters());
        let p = self.processes.get_mut(&pid)?;
        if p.context_at != context_at {
            p.context_at = context_at;
            p.context = None;
            p.context_seen = 0;
            p.context_checked_at = now;
            if let Some(at) = context_at {
                take_context(&procfs, &counters, p, at);
            }
        }
        p.maps_read_at = now;
        if p.maps_version != 0 && p.mappings == mappings {
            return Some(false);
        }
        // Not one file mapping left where it was: the process has exec'd, and its exec
        // event, still to come, replaces the entry. Until then its samples are of the
        // image these maps describe; past a short wait the event was lost, and the new
        // maps are taken.
        let is_file = |m: &Mapping| m.kind == MappingKind::File;
        let replaced = p.mappings.iter().any(|m| is_file(m))
            && !p.mappings.iter().any(|old| {
                is_file(old)
                    && mappings
                        .iter()
                        .any(|new| new.start == old.start && new.inode == old.inode)
            });
        if replaced {
            let since = *p.image_replaced_at.get_or_insert(now);
            if now.saturating_sub(since) < REPLACED_IMAGE_WAIT.as_nanos() as u64 {
                return Some(false);
            }
        }
        p.image_replaced_at = None;
        p.mappings = mappings;
        if p.maps_version == 0 {
            p.maps_first_read_at = now;
        }
        p.maps_version += 1;
        Some(true)
    }

    /// Reads an exec event's placeholder for a sample taken inside `execve` after the
    /// event, whose image /proc shows. If /proc names another program than the sample's
    /// thread (`comm`, which exec set before its event), the process has exec'd again
    /// since: the placeholder stays, with the container id, which exec does not change.
    pub fn load_after_exec(&mut self, pid: u32, comm: &str, now: u64) {
        let Some(placeholder) = self.processes.get(&pid).cloned() else {
            return;
        };
        self.get_or_load(pid, now);
        if let Some(p) = self.processes.get_mut(&pid)
            && p.loaded
            && p.comm != comm
        {
            let container_id = p.container_id.take();
            *p = placeholder;
            p.container_id = container_id;
            p.allowed = self.filter.allows(p);
        }
    }

    /// The process, read from `/proc` when it is not known yet (a process started since the
    /// scan whose exec event has not come, or was lost). A pid that cannot be read is
    /// remembered as exited, so that its other samples do not read `/proc` again.
    pub fn get_or_load(&mut self, pid: u32, now: u64) -> &Process {
        match self.processes.get(&pid) {
            None => {
                self.load(pid, now);
            }
            Some(p) if p.unread => {
                let placeholder = p.clone();
                self.load(pid, now);
                let Some(p) = self.processes.get_mut(&pid) else {
                    return &self.processes[&pid];
                };
                if !p.loaded {
                    // Gone already: the path it was exec'd with still names it.
                    (p.exe_path, p.comm) = (placeholder.exe_path, placeholder.comm);
                    p.allowed = self.filter.allows(p);
                } else if placeholder.forked_from.is_some()
                    && placeholder.exe_path.is_some()
                    && p.exe_path != placeholder.exe_path
                {
                    // A fork's sample comes before its exec event, yet /proc shows the
                    // new image: the child has exec'd since. The sample is of the image
                    // it had, its parent's (see `fork_image`), and the exec event that
                    // follows replaces the placeholder.
                    *p = placeholder;
                }
            }
            Some(_) => {}
        }
        &self.processes[&pid]
    }

    pub fn on_event(&mut self, event: &ProcessEvent, now: u64) {
        match *event {
            ProcessEvent::Exec { pid, ref filename } => {
                // Nothing is read at exec: most short processes are never sampled (a
                // build runs thousands a second). Its first sample reads /proc, in the
                // same drain of the ring buffer as this event, while it still lives; the
                // path it was exec'd with names it until then, and if it is gone by then.
                let mut p = Process::unknown(pid);
                p.unread = true;
                if !filename.is_empty() {
                    p.exe_path = Some(filename.clone());
                    p.comm = filename
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(15)
                        .collect();
                }
                p.allowed = self.filter.allows(&p);
                self.processes.insert(pid, p);
            }
            ProcessEvent::Fork {
                parent_pid,
                child_pid,
            } => {
                // Nothing is read either: most forks exec at once (and replace this), and
                // a child that is sampled is read then. Until then it has its parent's
                // name, which is its image.
                let mut child = Process::unknown(child_pid);
                child.unread = true;
                child.forked_from = Some(parent_pid);
                if let Some(parent) = self.processes.get(&parent_pid) {
                    child.exe_path = parent.exe_path.clone();
                    child.comm = parent.comm.clone();
                }
                child.allowed = self.filter.allows(&child);
                self.processes.insert(child_pid, child);
            }
            ProcessEvent::Exit { pid } => {
                // Never sampled: nothing will ask for it.
                if self.processes.get(&pid).is_some_and(|p| p.unread) {
                    self.processes.remove(&pid);
                } else if let Some(p) = self.processes.get_mut(&pid) {
                    p.exited_at.get_or_insert(now);
                }
            }
        }
    }

    /// For a forked child not read yet (its samples came before its exec event, but
    /// `/proc` already shows the image it exec'd): the parent, whose image it ran.
    pub fn fork_image(&self, pid: u32) -> Option<u32> {
        let child = self.processes.get(&pid).filter(|p| p.unread)?;
        let parent = child.forked_from?;
        self.processes
            .get(&parent)
            .is_some_and(|p| p.loaded && !p.unread)
            .then_some(parent)
    }

    /// Reads the maps of a live process again when an address missed them all, after the
    /// wait [`MAPS_REFRESH_INTERVAL`] and [`YOUNG_MAPS_REFRESH_INTERVAL`] describe.
    /// Returns whether they changed.
    pub fn refresh_maps(&mut self, pid: u32, now: u64) -> bool {
        let Some(p) = self.processes.get(&pid) else {
            return false;
        };
        if !p.loaded || !p.allowed || p.exited_at.is_some() || self.maps_refresh_waits(pid, now) {
            return false;
        }
        let Some(changed) = self.read_mappings(pid, now) else {
            return false;
        };
        let max = MAX_MAPS_REFRESH_INTERVAL.as_nanos() as u64;
        if let Some(p) = self.processes.get_mut(&pid) {
            let young = now.saturating_sub(p.maps_first_read_at) < YOUNG_MAPS.as_nanos() as u64;
            let min = if young {
                YOUNG_MAPS_REFRESH_INTERVAL
            } else {
                MAPS_REFRESH_INTERVAL
            }
            .as_nanos() as u64;
            p.maps_refresh_wait = if changed {
                min
            } else {
                p.maps_refresh_wait.saturating_mul(2).clamp(min, max)
            };
        }
        changed
    }

    /// Whether only the wait keeps [`ProcessTable::refresh_maps`] from reading the maps
    /// of `pid` now.
    pub fn maps_refresh_waits(&self, pid: u32, now: u64) -> bool {
        self.processes.get(&pid).is_some_and(|p| {
            p.loaded
                && p.allowed
                && p.exited_at.is_none()
                && now.saturating_sub(p.maps_read_at) < p.maps_refresh_wait
        })
    }

    /// Reads the maps of a live process again now, whatever the wait: for the unwinder,
    /// once per process, when it first gives the walker its mappings (its samples so far
    /// may lie in libraries mapped after its first sample was read). Returns whether
    /// they changed.
    pub fn reread_maps(&mut self, pid: u32, now: u64) -> bool {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.maps_read_at = 0;
        }
        self.refresh_maps(pid, now)
    }

    /// Marks processes gone from `/proc` (an exit event lost) or replaced by another with
    /// the same pid as exited, then drops those whose grace period is over. Returns how
    /// many were dropped.
    pub fn expire(&mut self, now: u64) -> usize {
        for p in self.processes.values_mut() {
            if p.exited_at.is_none() && p.pid != 0 {
                let current = self.procfs.start_time(p.pid);
                if current.is_none() || (p.start_time.is_some() && current != p.start_time) {
                    p.exited_at = Some(now);
                }
            }
        }
        let before = self.processes.len();
        let grace = self.grace_ns;
        self.processes
            .retain(|_, p| p.exited_at.is_none_or(|t| now.saturating_sub(t) < grace));
        self.files.prune();
        before - self.processes.len()
    }

    fn read_process(&mut self, pid: u32, now: u64) -> Process {
        let mut p = Process::unknown(pid);
        p.maps_read_at = now;
        let Ok(comm) = fs::read_to_string(self.procfs.pid_path(pid, "comm")) else {
            // Gone already, or never there: remembered as exited. Only its pid is known,
            // which is all the filter can go by.
            p.exited_at = Some(now);
            p.allowed = self.filter.allows(&p);
            return p;
        };
        p.comm = comm.trim_end_matches('\n').to_owned();
        p.loaded = true;
        p.start_time = self.procfs.start_time(pid);
        p.exe_path = fs::read_link(self.procfs.pid_path(pid, "exe"))
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
            .map(|t| match t.strip_suffix(" (deleted)") {
                Some(s) => s.to_owned(),
                None => t,
            });
        p.container_id = fs::read_to_string(self.procfs.pid_path(pid, "cgroup"))
            .ok()
            .and_then(|c| container_id_from_cgroup(&c));
        p.allowed = self.filter.allows(&p);
        if p.allowed && !self.env_vars.is_empty() {
            p.env = read_capped(&self.procfs.pid_path(pid, "environ"), MAX_ENVIRON_BYTES)
                .map(|raw| select_env(&raw, &self.env_vars))
                .unwrap_or_default();
        }
        if p.allowed
            && let Ok(maps) = read_maps(&self.procfs.pid_path(pid, "maps"))
        {
            p.mappings = self.mappings_from(pid, &maps);
            p.maps_version = 1;
            p.maps_first_read_at = now;
            p.context_at = context_mapping(&maps);
            p.context_checked_at = now;
            if let Some(at) = p.context_at {
                take_context(&self.procfs, &self.counters(), &mut p, at);
            }
        }
        p
    }

    fn counters(&self) -> Arc<crate::BadInputCounters> {
        self.files.counters.clone()
    }

    /// Follows a sampled process's context: once a [`CONTEXT_CHECK_INTERVAL`], its
    /// publication time, and a publication not read yet is read; with no context mapping,
    /// its maps are looked at for one published late, waiting twice as long each time
    /// up to [`MAX_CONTEXT_SCAN_WAIT`].
    pub fn refresh_context(&mut self, pid: u32, now: u64) {
        let Some(p) = self.processes.get(&pid) else {
            return;
        };
        let wait = if p.context_at.is_some() {
            CONTEXT_CHECK_INTERVAL.as_nanos() as u64
        } else {
            p.context_scan_wait
        };
        if !p.loaded || !p.allowed || pid == 0 || now.saturating_sub(p.context_checked_at) < wait {
            return;
        }
        let (procfs, counters) = (self.procfs.clone(), self.counters());
        let Some(p) = self.processes.get_mut(&pid) else {
            return;
        };
        p.context_checked_at = now;
        let Some(at) = p.context_at else {
            p.context_scan_wait =
                (p.context_scan_wait * 2).min(MAX_CONTEXT_SCAN_WAIT.as_nanos() as u64);
            if let Some(at) = read_maps(&procfs.pid_path(pid, "maps"))
                .ok()
                .and_then(|maps| context_mapping(&maps))
            {
                p.context_at = Some(at);
                take_context(&procfs, &counters, p, at);
            }
            return;
        };
        let Ok(memory) = procfs.memory(pid) else {
            return;
        };
        match crate::process_context::published_at(&memory, at) {
            // Unmapped (the SDK shut down): no context, and the maps are looked at again.
            None => {
                p.context_at = None;
                p.context = None;
                p.context_seen = 0;
                p.context_scan_wait = CONTEXT_CHECK_INTERVAL.as_nanos() as u64;
            }
            // Being written, or read already.
            Some(0) => {}
            Some(t) if t == p.context_seen => {}
            Some(_) => take_context_from(&memory, &counters, p, at),
        }
    }

    /// Keeps the named environment variables from now on (read when a process is first seen).
    pub fn with_env_vars(mut self, names: &[String]) -> Self {
        self.env_vars = names.to_vec();
        self
    }

    /// The executable mappings (and the vDSO) of `maps`, with their files' ids.
    fn mappings_from(&mut self, pid: u32, maps: &str) -> Vec<Arc<Mapping>> {
        let mut out = Vec::new();
        for e in parse_maps(maps) {
            if !e.perms.exec && e.path != MapsPath::Vdso {
                continue;
            }
            let (kind, path, deleted) = match e.path {
                MapsPath::File { path, deleted } => (MappingKind::File, path, deleted),
                MapsPath::Vdso => (MappingKind::Vdso, "[vdso]".to_owned(), false),
                MapsPath::Anonymous => (MappingKind::Anonymous, "[anon]".to_owned(), false),
                MapsPath::Pseudo(name) => (MappingKind::Pseudo, name, false),
            };
            let mut mapping = Mapping {
                start: e.start,
                end: e.end,
                offset: e.offset,
                kind,
                path,
                deleted,
                dev_major: e.dev_major,
                dev_minor: e.dev_minor,
                inode: e.inode,
                file: None,
            };
            if kind == MappingKind::File {
                let key = if e.inode != 0 {
                    FileKey::Inode {
                        dev: makedev(e.dev_major, e.dev_minor),
                        inode: e.inode,
                    }
                } else {
                    FileKey::Path(mapping.path.clone())
                };
                let locations = mapping.locations(&self.procfs, pid);
                let mapped = (e.inode != 0).then(|| Identity {
                    dev: Some(makedev(e.dev_major, e.dev_minor)),
                    inode: e.inode,
                });
                let file = self
                    .files
                    .get_or_read(key, &mapping.path, &locations, mapped);
                if let Some(registry) = &self.executables {
                    record_host_executable(registry, &file, &locations);
                }
                mapping.file = Some(file);
            }
            out.push(Arc::new(mapping));
        }
        out.sort_by_key(|m| m.start);
        out
    }
}

/// Where the process context mapping (OTEP 4719) starts in `maps`, if there is one.
fn context_mapping(maps: &str) -> Option<u64> {
    parse_maps(maps)
        .into_iter()
        .find(crate::process_context::is_context_mapping)
        .map(|e| e.start)
}

/// Reads the process context at `at` into `p`, counted. A context that fails its checks
/// (malformed, oversized) is dropped and its publication not read again; one that could
/// not be read (the publisher mid-update, memory gone) is tried again at the next look,
/// keeping the last one taken meanwhile.
fn take_context(procfs: &ProcFs, counters: &crate::BadInputCounters, p: &mut Process, at: u64) {
    if let Ok(memory) = procfs.memory(p.pid) {
        take_context_from(&memory, counters, p, at);
    }
}

/// [`take_context`] from the process's memory, already open.
fn take_context_from(
    memory: &dyn crate::memory::Memory,
    counters: &crate::BadInputCounters,
    p: &mut Process,
    at: u64,
) {
    let published = crate::process_context::published_at(memory, at);
    match crate::process_context::read(memory, at) {
        Ok(context) => {
            counters.contexts_read.fetch_add(1, Ordering::Relaxed);
            p.context_seen = context.published_at;
            if p.context.as_deref() != Some(&context) {
                p.context = Some(Arc::new(context));
            }
        }
        Err(e) if e.is_invalid() => {
            counters.contexts_invalid.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(pid = p.pid, "process context refused: {e}");
            p.context = None;
            p.context_seen = published.unwrap_or(0);
        }
        Err(e) => tracing::debug!(pid = p.pid, "process context not read yet: {e}"),
    }
}

/// Tells exporters that upload debug information (arrow's `debuginfo`) where this file
/// opens from the host, under each build id it has, and installs the checked opener
/// they must open it with. A refused file is not recorded.
fn record_host_executable(
    registry: &profcol_core::host_executables::Registry,
    file: &ExecutableFile,
    locations: &[FileLocation],
) {
    if !file.is_elf || file.rejected.is_some() {
        return;
    }
    registry.set_opener(crate::safe_file::open_recorded);
    let paths: Vec<PathBuf> = locations.iter().map(FileLocation::path).collect();
    for id in file.build_id_gnu_hex().iter().chain(&file.build_id_go) {
        registry.record(id, &paths);
    }
}

/// Pid 0: the idle task of each CPU; kernel frames only, nothing in `/proc`.
fn idle_process() -> Process {
    let mut p = Process::unknown(0);
    p.comm = "swapper".to_owned();
    p.loaded = true;
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_environment_variables_are_kept() {
        let raw = b"PATH=/bin\0OTEL_SERVICE_NAME=checkout\0X=a=b\0\0OTEL_RESOURCE_ATTRIBUTES=service.name=cart\0";
        let names = [
            "OTEL_SERVICE_NAME".to_owned(),
            "X".to_owned(),
            "OTEL_RESOURCE_ATTRIBUTES".to_owned(),
        ];
        assert_eq!(
            select_env(raw, &names),
            [
                ("OTEL_SERVICE_NAME".to_owned(), "checkout".to_owned()),
                ("X".to_owned(), "a=b".to_owned()),
                (
                    "OTEL_RESOURCE_ATTRIBUTES".to_owned(),
                    "service.name=cart".to_owned()
                ),
            ]
        );
    }

    use crate::procfs::MAX_MAPS_BYTES;
    use crate::procfs::tests::ID;
    use std::path::Path;

    #[test]
    fn mapping_lookup_and_file_offsets() {
        let mut p = Process::unknown(1);
        p.mappings = [(0x1000, 0x2000, 0x0), (0x5000, 0x8000, 0x3000)]
            .into_iter()
            .map(|(start, end, offset)| {
                Arc::new(Mapping {
                    start,
                    end,
                    offset,
                    kind: MappingKind::File,
                    path: "/bin/x".into(),
                    deleted: false,
                    dev_major: 0,
                    dev_minor: 0,
                    inode: 1,
                    file: None,
                })
            })
            .collect();
        assert!(p.find_mapping(0xfff).is_none());
        assert_eq!(p.find_mapping(0x1000).map(|m| m.start), Some(0x1000));
        assert!(p.find_mapping(0x2000).is_none());
        let m = p.find_mapping(0x6010).expect("second mapping");
        assert_eq!(m.file_offset(0x6010), 0x4010);
        assert!(p.find_mapping(0x8000).is_none());
    }

    /// This test process, through the real /proc: its own executable is mapped
    /// executable, has a 20-byte GNU build id, and the ids are shared per file.
    #[test]
    fn own_process_resolves_through_real_proc() {
        let pid = std::process::id();
        let mut table = ProcessTable::new(
            ProcFs::default(),
            Duration::from_secs(30),
            Filter::allow_all(),
        );
        let p = table.load(pid, 1).clone();
        assert!(p.loaded && p.allowed);
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(p.exe_path.as_deref(), exe.to_str());
        assert_eq!(
            p.executable_name(),
            exe.file_name().and_then(|n| n.to_str())
        );
        let addr = own_process_resolves_through_real_proc as *const () as usize as u64;
        let m = p.find_mapping(addr).expect("our code is mapped");
        assert_eq!(m.kind, MappingKind::File);
        assert_eq!(Some(m.path.as_str()), exe.to_str());
        let file = m.file.as_ref().expect("file info");
        assert!(file.is_elf);
        assert_eq!(file.build_id_gnu.as_ref().map(Vec::len), Some(20));
        assert_eq!(file.build_id_gnu_hex().map(|h| h.len()), Some(40));
        assert!(!file.is_go);
        // The file offset lies within the mapped part of the file.
        let off = m.file_offset(addr);
        assert!(off >= m.offset && off < m.offset + (m.end - m.start));
        assert!(
            p.mappings.iter().any(|m| m.kind == MappingKind::Vdso),
            "vdso kept"
        );
        // Every executable mapping of the same file shares one file record.
        let same: Vec<_> = p
            .mappings
            .iter()
            .filter(|x| x.path == m.path)
            .filter_map(|x| x.file.clone())
            .collect();
        assert!(same.iter().all(|f| Arc::ptr_eq(f, file)));
        // The scan finds us too, and a fork copies us until the child is read.
        assert!(table.scan(2) >= 1);
        assert!(table.get(pid).is_some_and(|p| p.loaded));
    }

    #[test]
    fn unknown_pids_are_remembered_and_exits_expire_after_grace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut table = ProcessTable::new(
            ProcFs::new(dir.path()),
            Duration::from_secs(30),
            Filter::allow_all(),
        );
        let s = 1_000_000_000u64;
        let p = table.get_or_load(77, 10 * s);
        assert!(!p.loaded);
        assert_eq!(p.exited_at, Some(10 * s));
        assert_eq!(table.expire(39 * s), 0, "kept during the grace period");
        assert_eq!(table.expire(40 * s), 1);
        assert!(table.get(77).is_none());
    }

    #[test]
    fn unknown_pids_go_through_the_filter_by_pid_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let filter = |yaml: &str| {
            let c: crate::Config = profcol_core::config::parse_typed(
                &profcol_core::config::parse_yaml("x", yaml).expect("yaml"),
            )
            .expect("config");
            Filter::new(&c)
        };
        let mut by_name = ProcessTable::new(
            ProcFs::new(dir.path()),
            Duration::from_secs(30),
            filter("include:\n  executable_names: [java]\n"),
        );
        assert!(!by_name.get_or_load(77, 1).allowed, "no name to match");
        let mut by_pid = ProcessTable::new(
            ProcFs::new(dir.path()),
            Duration::from_secs(30),
            filter("include:\n  pids: [77]\n"),
        );
        assert!(by_pid.get_or_load(77, 1).allowed);
        assert!(!by_pid.get_or_load(78, 1).allowed);
    }

    #[test]
    fn unreadable_files_are_read_again_and_readable_ones_once() {
        let mut cache = FileCache::default();
        let key = FileKey::Inode { dev: 1, inode: 2 };
        let host = |p: &Path| [FileLocation::Host(p.to_path_buf())];
        let missing = cache.get_or_read(key.clone(), "", &host(Path::new("/nonexistent/x")), None);
        assert!(!missing.readable && !missing.is_elf);
        let exe = std::env::current_exe().expect("exe");
        let found = cache.get_or_read(key.clone(), "", &host(&exe), None);
        assert!(found.readable && found.is_elf && found.rejected.is_none());
        let again = cache.get_or_read(key, "", &host(Path::new("/nonexistent/x")), None);
        assert!(Arc::ptr_eq(&found, &again), "cached");
        let not_elf = ExecutableFile::read(
            FileKey::Path("/proc/self/status".into()),
            "status",
            &host(Path::new("/proc/self/status")),
            None,
        );
        assert!(not_elf.readable && !not_elf.is_elf && not_elf.rejected.is_none());
        assert_eq!(cache.counters.files_rejected.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn links_fifos_other_inodes_and_malformed_elf_are_refused_and_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let exe = std::env::current_exe().expect("exe");
        std::os::unix::fs::symlink(&exe, d.join("link")).expect("symlink");
        let status = std::process::Command::new("mkfifo")
            .arg(d.join("fifo"))
            .status()
            .expect("mkfifo");
        assert!(status.success());
        // An ELF header claiming 65535 program headers of 65535 bytes each.
        let mut header = vec![0u8; 64];
        header[..6].copy_from_slice(b"\x7fELF\x02\x01");
        header[32..40].copy_from_slice(&64u64.to_le_bytes());
        header[54..56].copy_from_slice(&u16::MAX.to_le_bytes());
        header[56..58].copy_from_slice(&u16::MAX.to_le_bytes());
        fs::write(d.join("huge"), &header).expect("write");
        let counters = Arc::new(BadInputCounters::default());
        let mut cache = FileCache {
            files: HashMap::new(),
            counters: counters.clone(),
        };
        let exe_inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&exe).expect("meta"));
        for (i, (name, inode)) in [
            ("link", 0),
            ("fifo", 0),
            ("huge", 0),
            ("real", exe_inode + 1),
        ]
        .into_iter()
        .enumerate()
        {
            let path = if name == "real" {
                exe.clone()
            } else {
                d.join(name)
            };
            let key = FileKey::Inode {
                dev: 9,
                inode: i as u64,
            };
            let mapped = (inode != 0).then_some(Identity { dev: None, inode });
            let f = cache.get_or_read(key.clone(), "", &[FileLocation::Host(path)], mapped);
            assert!(f.rejected.is_some(), "{name} refused");
            assert!(f.build_id_gnu.is_none() && !f.is_go, "{name}");
            // Not read (nor counted) again.
            let again = cache.get_or_read(key, "", &[], None);
            assert!(Arc::ptr_eq(&f, &again));
        }
        assert_eq!(counters.files_rejected.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn maps_past_the_cap_are_cut_at_a_whole_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("maps");
        let line = "00400000-00500000 r-xp 00000000 00:00 0 /some/long/path/to/a/binary\n";
        let lines = MAX_MAPS_BYTES as usize / line.len() + 10;
        fs::write(&path, line.repeat(lines)).expect("write");
        let text = read_maps(&path).expect("read");
        assert!(text.len() as u64 <= MAX_MAPS_BYTES);
        assert!(text.ends_with('\n'));
        assert_eq!(parse_maps(&text).len(), text.len() / line.len());
    }

    /// A fake /proc tree: comm, exe link, cgroup, maps and stat for one pid.
    fn fake_proc(root: &Path, pid: u32, exe: &Path, cgroup: &str, maps: &str, start: u64) {
        let d = root.join(pid.to_string());
        fs::create_dir_all(&d).expect("mkdir");
        fs::write(d.join("comm"), "app\n").expect("comm");
        let _ = fs::remove_file(d.join("exe"));
        std::os::unix::fs::symlink(exe, d.join("exe")).expect("exe link");
        fs::write(d.join("cgroup"), cgroup).expect("cgroup");
        fs::write(d.join("maps"), maps).expect("maps");
        fs::write(
            d.join("stat"),
            format!("{pid} (app) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
        )
        .expect("stat");
    }

    #[test]
    fn events_update_the_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let exe = std::env::current_exe().expect("exe");
        let maps = format!(
            "00400000-00500000 r-xp 00001000 00:00 0 {}\n7fff0000-7fff2000 r-xp 00000000 00:00 0 [vdso]\n",
            exe.display()
        );
        fake_proc(
            root,
            10,
            &exe,
            &format!("0::/system.slice/docker-{ID}.scope\n"),
            &maps,
            5,
        );
        let mut table = ProcessTable::new(
            ProcFs::new(root),
            Duration::from_secs(1),
            Filter::allow_all(),
        );
        let s = 1_000_000_000u64;
        assert_eq!(table.scan(s), 1);
        let p = table.get(10).expect("scanned");
        assert_eq!(p.comm, "app");
        assert_eq!(p.container_id.as_deref(), Some(ID));
        assert_eq!(p.mappings.len(), 2);
        assert_eq!(p.mappings[0].path, exe.display().to_string());
        // The file is read through <root>/10/root/<path> (no map_files in the fake tree):
        // the symlink chain does not exist, so the file is unknown but the mapping stays.
        assert_eq!(
            p.find_mapping(0x400100).map(|m| m.file_offset(0x400100)),
            Some(0x1100)
        );

        table.on_event(
            &ProcessEvent::Fork {
                parent_pid: 10,
                child_pid: 11,
            },
            2 * s,
        );
        // Nothing read at fork: the child is named by its parent until it is sampled.
        let child = table.get(11).expect("forked");
        assert!(child.unread);
        assert_eq!(child.pid, 11);
        let parent_name = table
            .get(10)
            .and_then(|p| p.executable_name())
            .map(str::to_owned);
        assert_eq!(child.executable_name().map(str::to_owned), parent_name);

        // Exec replaces what was known, without reading /proc: the first sample does.
        fake_proc(root, 11, &exe, "0::/\n", "", 6);
        table.on_event(
            &ProcessEvent::Exec {
                pid: 11,
                filename: "/usr/bin/app".into(),
            },
            3 * s,
        );
        let child = table.get(11).expect("exec'd");
        assert!(child.unread && !child.loaded);
        assert!(child.mappings.is_empty());
        assert_eq!(child.executable_name(), Some("app"));
        let child = table.get_or_load(11, 3 * s);
        assert!(!child.unread && child.loaded);
        assert!(child.mappings.is_empty());
        assert_eq!(child.container_id, None);
        assert_eq!(child.start_time, Some(6));

        table.on_event(&ProcessEvent::Exit { pid: 10 }, 4 * s);
        assert_eq!(table.expire(4 * s + 1), 0);
        assert!(table.get(10).is_some(), "still within grace");
        assert_eq!(table.expire(5 * s), 1);
        assert!(table.get(10).is_none());

        // A pid reused by another process (new start time) counts as an exit.
        fake_proc(root, 11, &exe, "0::/\n", "", 99);
        table.expire(6 * s);
        assert_eq!(table.get(11).and_then(|p| p.exited_at), Some(6 * s));
        // A process gone before its /proc entry was read is named by its exec path.
        table.on_event(
            &ProcessEvent::Exec {
                pid: 12,
                filename: "/tmp/build/shortburn".into(),
            },
            7 * s,
        );
        let gone = table.get_or_load(12, 7 * s);
        assert!(!gone.loaded);
        assert_eq!(gone.executable_name(), Some("shortburn"));
        // One never sampled is dropped at its exit: nothing will ask for it.
        table.on_event(
            &ProcessEvent::Exec {
                pid: 13,
                filename: "/bin/true".into(),
            },
            8 * s,
        );
        table.on_event(&ProcessEvent::Exit { pid: 13 }, 8 * s);
        assert!(table.get(13).is_none());
    }

    #[test]
    fn maps_are_read_again_when_an_address_misses_but_not_too_often() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let exe = std::env::current_exe().expect("exe");
        fake_proc(root, 20, &exe, "", "", 1);
        let mut table = ProcessTable::new(
            ProcFs::new(root),
            Duration::from_secs(1),
            Filter::allow_all(),
        );
        let s = 1_000_000_000u64;
        table.load(20, s);
        assert!(table.get(20).expect("p").mappings.is_empty());
        let maps = format!(
            "00400000-00500000 r-xp 00000000 00:00 0 {}\n",
            exe.display()
        );
        fs::write(root.join("20/maps"), maps).expect("maps");
        assert!(!table.refresh_maps(20, s + 1), "too soon");
        assert!(table.refresh_maps(20, 2 * s));
        assert!(table.get(20).expect("p").find_mapping(0x400000).is_some());
    }

    #[test]
    fn maps_of_an_image_that_replaced_the_known_one_wait_for_its_exec_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let exe = std::env::current_exe().expect("exe");
        let line = |start: u64| {
            format!(
                "{start:08x}-{:08x} r-xp 00000000 00:00 0 {}\n",
                start + 0x1000,
                exe.display()
            )
        };
        fake_proc(root, 22, &exe, "", &line(0x400000), 1);
        let mut table = ProcessTable::new(
            ProcFs::new(root),
            Duration::from_secs(1),
            Filter::allow_all(),
        );
        let s = 1_000_000_000u64;
        table.load(22, s);
        // exec'd: the executable elsewhere, nothing of the old image left.
        fs::write(root.join("22/maps"), line(0x800000)).expect("maps");
        assert!(!table.reread_maps(22, 2 * s));
        let p = table.get(22).expect("p");
        assert!(p.find_mapping(0x400000).is_some() && p.find_mapping(0x800000).is_none());
        // A library added to the same image is taken.
        fs::write(root.join("22/maps"), line(0x400000) + &line(0x800000)).expect("maps");
        assert!(table.reread_maps(22, 3 * s));
        assert!(table.get(22).expect("p").find_mapping(0x800000).is_some());
        // With its exec event lost, another image is taken after a short wait.
        fs::write(root.join("22/maps"), line(0xa00000)).expect("maps");
        assert!(!table.reread_maps(22, 3 * s + 1));
        assert!(!table.reread_maps(22, 3 * s + 50_000_000));
        assert!(table.reread_maps(22, 3 * s + 1 + 100_000_000));
        assert!(table.get(22).expect("p").find_mapping(0xa00000).is_some());
        // The exec event replaces the entry; its first read takes whatever is there.
        table.on_event(
            &ProcessEvent::Exec {
                pid: 22,
                filename: exe.display().to_string(),
            },
            4 * s,
        );
        fs::write(root.join("22/maps"), line(0xc00000)).expect("maps");
        let p = table.get_or_load(22, 4 * s);
        assert!(p.find_mapping(0xc00000).is_some());
    }

    #[test]
    fn young_maps_are_read_again_within_milliseconds_older_ones_wait_longer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let exe = std::env::current_exe().expect("exe");
        fake_proc(root, 21, &exe, "", "", 1);
        let mut table = ProcessTable::new(
            ProcFs::new(root),
            Duration::from_secs(1),
            Filter::allow_all(),
        );
        let (s, ms) = (1_000_000_000u64, 1_000_000u64);
        let mut lines = String::new();
        let mut map_one_more = |n: u64| {
            lines += &format!(
                "{:08x}-{:08x} r-xp 00000000 00:00 0 {}\n",
                0x400000 * n,
                0x400000 * n + 0x1000,
                exe.display()
            );
            fs::write(root.join("21/maps"), &lines).expect("maps");
        };
        // First read while the dynamic loader is still at work.
        table.load(21, s);
        map_one_more(1);
        assert!(table.refresh_maps(21, s + ms), "a millisecond later");
        map_one_more(2);
        assert!(table.refresh_maps(21, s + 2 * ms), "still young");
        // A second on, a change is followed by the longer wait.
        map_one_more(3);
        assert!(table.refresh_maps(21, 2 * s));
        map_one_more(4);
        assert!(!table.refresh_maps(21, 2 * s + 10 * ms), "too soon");
        assert!(table.refresh_maps(21, 2 * s + 50 * ms));
        assert_eq!(table.get(21).expect("p").mappings.len(), 4);
    }
}
