//! Keeps the BPF walker's per-process mappings and per-file tables in step with the
//! processes that get sampled.
//!
//! Nothing happens at exec or fork: a process gets its mappings at its first sample
//! (that sample carries the kernel's frame-pointer walk, flagged `NoProcess`), so the
//! many short processes of a build farm, never sampled, cost nothing here. A sample that
//! met an address outside the mappings (a library loaded since) has the process's maps
//! read again (as often as [`crate::process::MAPS_REFRESH_INTERVAL`] allows) and, when
//! they changed, given again; one that met a table no longer loaded (evicted) has its
//! process given again, at most once per [`RESYNC_INTERVAL`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use profcol_bpf::{MAX_PROCESS_MAPPINGS, MAX_UNWIND_TABLES, UnwindEnd};

use super::cache::{CacheStats, Lookup, TableCache, TableKey};
use super::maps::{UnwindMapping, UnwindMaps};
use crate::elf::ElfFile;
use crate::process::{FileKey, Mapping, MappingKind, Process, ProcessTable};
use crate::procfs::makedev;
use crate::safe_file::{Identity, VerifiedFile};

/// The least time between two loads of one process's mappings.
pub const RESYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The longest a process waits for its tables before it is given without them.
const MAX_TABLE_WAIT: Duration = Duration::from_secs(10);
/// Processes loaded per sync at most: a burst of new processes is spread over polls.
const MAX_LOADS_PER_SYNC: usize = 64;

/// What the sampler said about one sample's walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindStatus {
    /// Why the walk ended; `None` for a sampler that does not say.
    pub end: Option<UnwindEnd>,
    /// A frame was outside every mapping the walker had.
    pub unknown_mapping: bool,
    /// A frame's table was not loaded (evicted).
    pub missing_table: bool,
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UnwinderStats {
    pub cache: CacheStats,
    /// Processes whose mappings the walker has now.
    pub processes: usize,
    /// Mapping loads (first ones and again), since start.
    pub process_loads: u64,
    /// Writes to BPF that failed, since start.
    pub errors: u64,
}

#[derive(Debug)]
struct Given {
    mappings: Vec<UnwindMapping>,
    keys: Vec<TableKey>,
    loaded_at: Instant,
    /// [`Process::maps_version`] of the mappings given.
    maps_version: u64,
    /// Tables of its files are still being built: it is given again when they are.
    waiting: bool,
}

/// Why a process is due to be given (again).
#[derive(Debug, Clone, Copy, Default)]
struct Due {
    /// An address outside its mappings: read the maps again, give them if they changed.
    unknown_mapping: bool,
    /// A table that was not loaded.
    missing_table: bool,
    /// A table it waited for was built.
    tables_ready: bool,
}

/// See the module docs.
#[derive(Debug)]
pub struct Unwinder {
    cache: TableCache,
    given: HashMap<u32, Given>,
    pending: HashMap<u32, Due>,
    removed: Vec<u32>,
    sampled: HashSet<u32>,
    /// Processes waiting for a table that is being built.
    waiting: HashMap<TableKey, HashSet<u32>>,
    /// Processes not given yet because their tables are being built, since when.
    held: HashMap<u32, Instant>,
    process_loads: u64,
    errors: u64,
    /// Whether processes running CPython get their Python frames walked.
    python: bool,
    /// Where each process's CPython keeps its frames, as given: before its mappings and
    /// tables, so that its first samples (walked again from their stack copies) have
    /// their Python frames too.
    pythons: HashMap<u32, profcol_bpf::PythonProcess>,
}

impl Unwinder {
    /// Tables take at most `budget_bytes` in BPF.
    pub fn new(budget_bytes: usize) -> Self {
        Unwinder {
            cache: TableCache::new(budget_bytes, MAX_UNWIND_TABLES - 1),
            given: HashMap::new(),
            pending: HashMap::new(),
            removed: Vec::new(),
            sampled: HashSet::new(),
            waiting: HashMap::new(),
            held: HashMap::new(),
            process_loads: 0,
            errors: 0,
            python: true,
            pythons: HashMap::new(),
        }
    }

    /// Whether CPython's frames are walked (`interpreters: {python: {disabled: true}}`
    /// turns it off).
    pub fn with_python(mut self, on: bool) -> Self {
        self.python = on;
        self
    }

    pub fn stats(&self) -> UnwinderStats {
        UnwinderStats {
            cache: self.cache.stats(),
            processes: self.given.len(),
            process_loads: self.process_loads,
            errors: self.errors,
        }
    }

    /// Notes what a sample's walk met. A process whose samples are dropped (`allowed`
    /// false) is given no mappings at all, only so that its samples stop carrying stack
    /// copies.
    pub fn on_sample(&mut self, pid: u32, status: &UnwindStatus, allowed: bool) {
        if pid == 0 {
            return;
        }
        let given = self.given.contains_key(&pid);
        if status.end == Some(UnwindEnd::NoProcess) && !given {
            self.pending.entry(pid).or_default();
        }
        if !allowed {
            return;
        }
        self.sampled.insert(pid);
        if given && (status.unknown_mapping || status.missing_table) {
            let due = self.pending.entry(pid).or_default();
            due.unknown_mapping |= status.unknown_mapping;
            due.missing_table |= status.missing_table;
        }
    }

    /// The process's image is gone (exec replaced it, or it exited): so are its mappings.
    pub fn forget(&mut self, pid: u32) {
        if self.given.remove(&pid).is_some() || self.pythons.contains_key(&pid) {
            self.removed.push(pid);
        }
        self.pending.remove(&pid);
        self.held.remove(&pid);
    }

    /// Whether `pid` is still to be given (or given again) its mappings: its stack
    /// copies are worth holding until it is.
    pub fn is_waiting(&self, pid: u32) -> bool {
        self.pending.contains_key(&pid)
            || self.held.contains_key(&pid)
            || self.given.get(&pid).is_some_and(|g| g.waiting)
    }

    /// Writes what the samples since the last sync asked for.
    pub fn sync(&mut self, table: &mut ProcessTable, maps: &mut dyn UnwindMaps, now: u64) {
        self.cache.next_round(now);
        for key in self.cache.finish_builds(maps) {
            for pid in self.waiting.remove(&key).unwrap_or_default() {
                if self.given.contains_key(&pid) || self.held.contains_key(&pid) {
                    self.pending.entry(pid).or_default().tables_ready = true;
                }
            }
        }
        // Held past the wait: given with what is there.
        for (&pid, since) in &self.held {
            if since.elapsed() >= MAX_TABLE_WAIT {
                self.pending.entry(pid).or_default().tables_ready = true;
            }
        }
        for pid in std::mem::take(&mut self.removed) {
            if let Err(e) = maps.remove_process(pid) {
                self.error(&e);
            }
            if self.pythons.remove(&pid).is_some()
                && let Err(e) = maps.set_python(pid, None)
            {
                self.error(&e);
            }
        }
        // Tables of processes sampled since the last sync are the recently used ones.
        for pid in std::mem::take(&mut self.sampled) {
            if let Some(given) = self.given.get(&pid) {
                for key in &given.keys {
                    self.cache.touch(key);
                }
            }
        }
        let due: Vec<(u32, Due)> = self
            .pending
            .iter()
            .map(|(&pid, &due)| (pid, due))
            .filter(|(pid, due)| {
                // A held process waits for its tables (or the end of its wait), whatever
                // its samples say meanwhile.
                if self.held.contains_key(pid) {
                    return due.tables_ready;
                }
                // A new mapping whose maps cannot be read again yet: it stays pending,
                // and the stack copies that met the mapping wait with it.
                if due.unknown_mapping
                    && !due.tables_ready
                    && !due.missing_table
                    && table.maps_refresh_waits(*pid, now)
                {
                    return false;
                }
                // A new mapping or a new table is worth giving at once; a missing table
                // waits its turn.
                due.unknown_mapping
                    || due.tables_ready
                    || self
                        .given
                        .get(pid)
                        .is_none_or(|g| g.loaded_at.elapsed() >= RESYNC_INTERVAL)
            })
            .take(MAX_LOADS_PER_SYNC)
            .collect();
        for (pid, due) in due {
            self.pending.remove(&pid);
            if !self.given.contains_key(&pid) && !self.held.contains_key(&pid) {
                // First give: the samples held for it may lie in libraries mapped since
                // its maps were read at its first sample.
                table.reread_maps(pid, now);
            } else if due.unknown_mapping {
                table.refresh_maps(pid, now);
            }
            let Some(process) = table.get(pid) else {
                continue;
            };
            if (!process.loaded || process.exited_at.is_some()) && process.allowed {
                tracing::debug!(
                    pid,
                    loaded = process.loaded,
                    exited = process.exited_at.is_some(),
                    unread = process.unread,
                    "process not given: unread or gone"
                );
                continue;
            }
            let same_maps = self
                .given
                .get(&pid)
                .is_some_and(|g| g.maps_version == process.maps_version);
            if same_maps && !due.missing_table && !due.tables_ready {
                continue;
            }
            let procfs = table.procfs().clone();
            let maps_version = process.maps_version;
            let python = if self.python && process.allowed {
                python_record(process)
            } else {
                None
            };
            if python.as_ref() != self.pythons.get(&pid) {
                let written = maps.set_python(pid, python.as_ref());
                match (written, python) {
                    (Ok(()), Some(python)) => {
                        self.pythons.insert(pid, python);
                    }
                    (Ok(()), None) => {
                        self.pythons.remove(&pid);
                    }
                    // Not given: tried again when the process is given again.
                    (Err(e), _) => self.error(&e),
                }
            }
            let (mappings, keys, waiting) = if process.allowed {
                self.mappings_of(process, &procfs)
            } else {
                // Its samples are dropped: no tables, and no stack copies either.
                (Vec::new(), Vec::new(), false)
            };
            // A process is first given once its tables are built: until then its
            // samples keep their stack copies, to be unwound with them.
            if waiting && !self.given.contains_key(&pid) {
                let since = *self.held.entry(pid).or_insert_with(Instant::now);
                if since.elapsed() < MAX_TABLE_WAIT {
                    continue;
                }
            }
            if let Some(since) = self.held.remove(&pid) {
                tracing::debug!(
                    pid,
                    waited_ms = since.elapsed().as_millis() as u64,
                    waiting,
                    "process held for its tables"
                );
            }
            tracing::debug!(
                pid,
                mappings = mappings.len(),
                tables = keys.len(),
                waiting,
                "giving the walker a process"
            );
            self.process_loads += 1;
            match maps.set_process(pid, &mappings) {
                Ok(()) => {
                    self.given.insert(
                        pid,
                        Given {
                            mappings,
                            keys,
                            loaded_at: Instant::now(),
                            maps_version,
                            waiting,
                        },
                    );
                }
                Err(e) => self.error(&e),
            }
        }
    }

    /// Unwinds a stack copy of `pid` (taken before it had mappings in BPF) with the
    /// mappings and tables it has been given since. `None` when it has none.
    pub fn walk_copy(
        &mut self,
        pid: u32,
        copy: &profcol_bpf::StackCopy,
        maps: &mut dyn UnwindMaps,
        max_frames: usize,
    ) -> Option<(Vec<u64>, UnwindEnd)> {
        let given = self.given.get(&pid)?;
        let mut rows = LoadedRows {
            cache: &self.cache,
            maps,
        };
        Some(super::walk::walk_copy(
            copy,
            &given.mappings,
            &mut rows,
            max_frames,
        ))
    }

    fn error(&mut self, message: &str) {
        if self.errors == 0 {
            tracing::warn!("writing the unwinder's BPF maps failed: {message}");
        }
        self.errors += 1;
    }

    /// The walker's view of a process: every executable mapping (so that none looks
    /// unknown), with its file's table where one is loaded. Also the keys of the tables
    /// used, and whether any is still being built (the process then waits for it).
    fn mappings_of(
        &mut self,
        process: &Process,
        procfs: &crate::procfs::ProcFs,
    ) -> (Vec<UnwindMapping>, Vec<TableKey>, bool) {
        let mut out = Vec::with_capacity(process.mappings.len().min(MAX_PROCESS_MAPPINGS));
        let mut keys = Vec::new();
        let mut waiting = false;
        for m in process.mappings.iter().take(MAX_PROCESS_MAPPINGS) {
            if m.start >= m.end || out.last().is_some_and(|l: &UnwindMapping| l.end > m.start) {
                continue;
            }
            let mut entry = UnwindMapping {
                start: m.start,
                end: m.end,
                bias: 0,
                table: 0,
                generation: 0,
            };
            if let Some(key) = table_key(m) {
                let open = if m.kind == MappingKind::Vdso {
                    vdso_opener()
                } else {
                    opener(m, procfs, process.pid)
                };
                match self
                    .cache
                    .table_for(&key, m.start, m.offset, m.end - m.start, open)
                {
                    Lookup::Ready(t) => {
                        entry.table = t.slot;
                        entry.generation = t.generation;
                        entry.bias = t.bias;
                        keys.push(key);
                    }
                    Lookup::Pending => {
                        waiting = true;
                        self.waiting.entry(key).or_default().insert(process.pid);
                    }
                    Lookup::Absent => {}
                }
            }
            out.push(entry);
        }
        (out, keys, waiting)
    }
}

/// The tables as loaded: counts from the cache, rows read back from BPF.
struct LoadedRows<'a> {
    cache: &'a TableCache,
    maps: &'a mut dyn UnwindMaps,
}

impl super::walk::Rows for LoadedRows<'_> {
    fn count(&self, slot: u32, generation: u32) -> Option<u32> {
        self.cache.rows_in(slot, generation)
    }

    fn row(&mut self, slot: u32, index: u32) -> Option<super::row::Row> {
        super::row::Row::decode(&self.maps.read_row(slot, index)?)
    }
}

/// The vDSO's key: every process has the same one, the running kernel's.
const VDSO_KEY: TableKey = TableKey {
    dev: u64::MAX,
    inode: u64::MAX,
    build_id: None,
};

/// The vDSO's image, read out of profcol's own memory (the same kernel maps the same
/// one into every process).
fn vdso_opener() -> super::cache::Opener {
    Box::new(|| crate::symbolize::read_own_vdso().and_then(|image| ElfFile::from_bytes(image).ok()))
}

/// The table key of a file mapping whose file was read as ELF and not refused, or of
/// the vDSO.
fn table_key(m: &Mapping) -> Option<TableKey> {
    if m.kind == MappingKind::Vdso {
        return Some(VDSO_KEY);
    }
    if m.kind != MappingKind::File {
        return None;
    }
    let file = m.file.as_ref()?;
    if !file.is_elf || file.rejected.is_some() {
        return None;
    }
    let FileKey::Inode { dev, inode } = file.key else {
        return None;
    };
    let build_id = file
        .build_id_gnu
        .clone()
        .or_else(|| file.build_id_go.as_ref().map(|s| s.as_bytes().to_vec()));
    Some(TableKey {
        dev,
        inode,
        build_id,
    })
}

/// Opens the mapped file, checked to be the very inode mapped (on the builder thread).
fn opener(m: &Mapping, procfs: &crate::procfs::ProcFs, pid: u32) -> super::cache::Opener {
    let expected = Identity {
        dev: Some(makedev(m.dev_major, m.dev_minor)),
        inode: m.inode,
    };
    let locations = m.locations(procfs, pid);
    Box::new(move || {
        for location in &locations {
            let Ok(file) = VerifiedFile::open(location, Some(expected)) else {
                continue;
            };
            let size = file.size();
            return file
                .try_clone_file()
                .ok()
                .and_then(|f| ElfFile::from_file(f, size).ok());
        }
        None
    })
}

/// Where the process's CPython keeps its frames: from its first executable mapping of a
/// file that holds an interpreter.
fn python_record(process: &crate::process::Process) -> Option<profcol_bpf::PythonProcess> {
    process
        .python()
        .map(|(interpreter, bias)| interpreter.walker_record(bias))
}
