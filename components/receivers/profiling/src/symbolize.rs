//! Symbolization on the host, with [blazesym] for kernel frames (`/proc/kallsyms`) and
//! native frames (ELF symbols, and DWARF lines and inlined functions), and with our own
//! `.gopclntab` reader for Go binaries (which blazesym does not read, and which a
//! stripped Go binary keeps).
//!
//! blazesym's `Symbolizer` is not `Send`, so it lives on a thread of its own; a
//! [`Symbolizer`] handle sends it one request per flush and waits for the answer. Results
//! are cached per file, keyed by GNU build id (or by device and inode when the file has
//! none), so a frame is symbolized once however many processes and flushes it appears in.
//!
//! Addresses are file offsets (`addr - mapping start + mapping offset`), which blazesym
//! turns into virtual addresses through the file's program headers.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use blazesym::MaybeDefault;
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{self as bz, Input};

use crate::BadInputCounters;
use crate::elf::{ElfFile, ProgramHeader, file_offset_to_vaddr};
use crate::gopclntab::{GoFrame, GoTable, GoTableError};
use crate::process::{ExecutableFile, FileKey, MappingKind};
use crate::safe_file::{FileLocation, VerifiedFile};

/// blazesym is rebuilt (dropping every parsed file and the kallsyms copy) this often, or
/// once this many files went through it, so memory stays bounded and kallsyms fresh.
const REBUILD_AFTER: Duration = Duration::from_secs(3600);
const REBUILD_AFTER_FILES: usize = 1024;
/// Above this many cached frames, the result cache starts over.
const MAX_CACHED_FRAMES: usize = 1_000_000;
/// Files that someone but root can change are symbolized by blazesym from a sealed
/// in-memory copy (blazesym maps what it reads, and a file truncated under a mapping
/// faults): at most this large each, and this much all together; past these, such files
/// get Go symbols only.
pub const MAX_COPY_BYTES: u64 = 128 << 20;
pub const MAX_COPIES_BYTES: u64 = 256 << 20;
/// Go function tables kept in memory at most, all files together (each is at most
/// `elf::MAX_SECTION_SIZE`); past it the Go cache starts over.
pub const MAX_GO_TABLE_BYTES: usize = 512 << 20;

/// The name of the pseudo frame that ends a truncated stack.
pub const TRUNCATED_FRAME: &str = "[truncated]";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolizerOptions {
    pub kallsyms: PathBuf,
    /// File names and line numbers from DWARF.
    pub code_info: bool,
    /// Inlined functions from DWARF, as extra lines of a location.
    pub inlined_fns: bool,
    pub demangle: bool,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        SymbolizerOptions {
            kallsyms: PathBuf::from("/proc/kallsyms"),
            code_info: true,
            inlined_fns: true,
            demangle: true,
        }
    }
}

/// `profile.frame.type` of a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    Kernel,
    Native,
    Go,
    /// A CPython frame (the OTel eBPF profiler's name).
    CPython,
    /// The `[truncated]` pseudo frame (the OTel eBPF profiler's value for stacks whose
    /// unwinding stopped early).
    AbortMarker,
}

impl FrameType {
    pub fn as_str(self) -> &'static str {
        match self {
            FrameType::Kernel => "kernel",
            FrameType::Native => "native",
            FrameType::Go => "go",
            FrameType::CPython => "cpython",
            FrameType::AbortMarker => "abort-marker",
        }
    }
}

/// One function of a location: the one the address is in, or one inlined there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SymLine {
    pub function: String,
    pub file: Option<String>,
    /// 0 when unknown.
    pub line: u32,
    /// 0 when unknown.
    pub column: u32,
}

/// A symbolized frame: its functions innermost (inlined callee) first, caller last, as
/// OTLP `Location.lines` wants them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbolized {
    pub lines: Vec<SymLine>,
    pub frame_type: FrameType,
}

pub type Resolved = Option<Arc<Symbolized>>;

/// The addresses of one file (or of the vDSO) to symbolize.
#[derive(Debug, Clone)]
pub struct FileRequest {
    pub kind: MappingKind,
    pub file: Option<Arc<ExecutableFile>>,
    /// Where the file can be opened, best first (`/proc/<pid>/map_files/...`, then the
    /// path inside `/proc/<pid>/root`). The file opened must be the inode first read.
    pub locations: Vec<FileLocation>,
    /// The path on this host, used only when its build id is the file's (the process is
    /// gone, so its `/proc` paths are too).
    pub host_path: Option<PathBuf>,
    /// File offsets.
    pub offsets: Vec<u64>,
}

enum Job {
    Files(Vec<FileRequest>, mpsc::Sender<Vec<Vec<Resolved>>>),
    Kernel(Vec<u64>, mpsc::Sender<Vec<Resolved>>),
}

/// A handle on the symbolizing thread. `Send` and `Sync`; dropping the last handle ends
/// the thread.
///
/// A panic while symbolizing (blazesym or our readers meeting a file made to break
/// them) does not end symbolization: the thread's state is dropped and built again, the
/// file that caused it is never read again, and the restart is counted
/// ([`BadInputCounters::symbolizer_restarts`]). A thread found gone is started again
/// (and counted) on the next request.
#[derive(Debug)]
pub struct Symbolizer {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    options: SymbolizerOptions,
    counters: Arc<BadInputCounters>,
}

impl Symbolizer {
    pub fn new(options: SymbolizerOptions) -> Self {
        Self::with_counters(options, Arc::default())
    }

    /// A symbolizer that counts refused files and restarts in `counters`.
    pub fn with_counters(options: SymbolizerOptions, counters: Arc<BadInputCounters>) -> Self {
        let tx = spawn(options.clone(), counters.clone());
        Symbolizer {
            tx: Mutex::new(tx),
            options,
            counters,
        }
    }

    /// Sends a job, starting the thread again if it is gone. None: no thread.
    fn send<T>(&self, make: impl Fn(mpsc::Sender<T>) -> Job) -> Option<mpsc::Receiver<T>> {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..2 {
            if attempt > 0 || tx.is_none() {
                self.counters
                    .symbolizer_restarts
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!("the symbolizer thread was gone: starting it again");
                *tx = spawn(self.options.clone(), self.counters.clone());
            }
            let (reply, answer) = mpsc::channel();
            if tx.as_ref()?.send(make(reply)).is_ok() {
                return Some(answer);
            }
        }
        None
    }

    /// One answer per offset of every request, in order; `None` where nothing is known.
    pub fn symbolize_files(&self, requests: Vec<FileRequest>) -> Vec<Vec<Resolved>> {
        let empty: Vec<Vec<Resolved>> = requests
            .iter()
            .map(|r| vec![None; r.offsets.len()])
            .collect();
        self.send(|reply| Job::Files(requests.clone(), reply))
            .and_then(|answer| answer.recv().ok())
            .unwrap_or(empty)
    }

    /// Kernel addresses through kallsyms.
    pub fn symbolize_kernel(&self, addrs: Vec<u64>) -> Vec<Resolved> {
        let empty = vec![None; addrs.len()];
        self.send(|reply| Job::Kernel(addrs.clone(), reply))
            .and_then(|answer| answer.recv().ok())
            .unwrap_or(empty)
    }
}

fn spawn(options: SymbolizerOptions, counters: Arc<BadInputCounters>) -> Option<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("profcol-symbolize".into())
        .spawn(move || run(options, counters, rx));
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the symbolizer thread; frames stay unsymbolized");
            None
        }
    }
}

/// The symbolizing thread's loop: every request under `catch_unwind`.
fn run(options: SymbolizerOptions, counters: Arc<BadInputCounters>, rx: mpsc::Receiver<Job>) {
    // Files that made symbolization panic: never read again (kept across restarts).
    let mut poisoned: HashSet<CacheKey> = HashSet::new();
    let mut worker = Worker::new(options.clone(), counters.clone());
    let restart = |worker: &mut Worker, what: &str| {
        counters.symbolizer_restarts.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(what, "the symbolizer panicked: starting it again");
        *worker = Worker::new(options.clone(), counters.clone());
    };
    while let Ok(job) = rx.recv() {
        match job {
            Job::Files(requests, reply) => {
                let mut out = Vec::with_capacity(requests.len());
                for request in &requests {
                    let key = cache_key(request);
                    if key.as_ref().is_some_and(|k| poisoned.contains(k)) {
                        out.push(vec![None; request.offsets.len()]);
                        continue;
                    }
                    match catch_unwind(AssertUnwindSafe(|| worker.file(request))) {
                        Ok(found) => out.push(found),
                        Err(_) => {
                            poisoned.extend(key);
                            counters.files_rejected.fetch_add(1, Ordering::Relaxed);
                            restart(&mut worker, "a file");
                            out.push(vec![None; request.offsets.len()]);
                        }
                    }
                }
                let _ = reply.send(out);
            }
            Job::Kernel(addrs, reply) => {
                match catch_unwind(AssertUnwindSafe(|| worker.kernel(&addrs))) {
                    Ok(found) => {
                        let _ = reply.send(found);
                    }
                    Err(_) => {
                        restart(&mut worker, "kernel symbols");
                        let _ = reply.send(vec![None; addrs.len()]);
                    }
                }
            }
        }
    }
}

/// The key results of a request are cached under; None for what is not symbolized.
fn cache_key(request: &FileRequest) -> Option<CacheKey> {
    match (request.kind, &request.file) {
        (MappingKind::Vdso, _) => Some(CacheKey::Vdso),
        (MappingKind::File, Some(f)) => Some(match &f.build_id_gnu {
            Some(id) => CacheKey::BuildId(id.clone()),
            None => CacheKey::File(f.key.clone()),
        }),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CacheKey {
    BuildId(Vec<u8>),
    File(FileKey),
    Vdso,
}

struct GoFile {
    table: GoTable,
    program_headers: Vec<ProgramHeader>,
}

struct Worker {
    options: SymbolizerOptions,
    counters: Arc<BadInputCounters>,
    /// Bytes of the Go tables in `go`.
    go_bytes: usize,
    /// Sealed copies of files others may change, for blazesym; `None`: too large.
    copies: HashMap<CacheKey, Option<fs::File>>,
    copies_bytes: u64,
    blaze: bz::Symbolizer,
    built_at: Instant,
    files_seen: HashSet<CacheKey>,
    results: HashMap<CacheKey, HashMap<u64, Resolved>>,
    cached_frames: usize,
    go: HashMap<CacheKey, Option<Arc<GoFile>>>,
    kernel: HashMap<u64, Resolved>,
    kallsyms_usable: Option<bool>,
    /// This process's vDSO image (every process of this kernel and ABI maps the same
    /// one), in memory: a memfd, named by its `/proc/self/fd` path (a file on disk would
    /// outlive a profcol that is killed or exits without unwinding this thread, one per
    /// run). `Some(None)` once reading it failed.
    vdso: Option<Option<std::fs::File>>,
}

impl Worker {
    fn new(options: SymbolizerOptions, counters: Arc<BadInputCounters>) -> Self {
        let blaze = build_blazesym(&options);
        Worker {
            options,
            counters,
            go_bytes: 0,
            copies: HashMap::new(),
            copies_bytes: 0,
            blaze,
            built_at: Instant::now(),
            files_seen: HashSet::new(),
            results: HashMap::new(),
            cached_frames: 0,
            go: HashMap::new(),
            kernel: HashMap::new(),
            kallsyms_usable: None,
            vdso: None,
        }
    }

    fn maybe_rebuild(&mut self) {
        if self.built_at.elapsed() >= REBUILD_AFTER || self.files_seen.len() >= REBUILD_AFTER_FILES
        {
            self.blaze = build_blazesym(&self.options);
            self.built_at = Instant::now();
            self.files_seen.clear();
            self.go.clear();
            self.go_bytes = 0;
            // blazesym, which held them, is new: the copies can go.
            self.copies.clear();
            self.copies_bytes = 0;
            self.kernel.clear();
            self.kallsyms_usable = None;
        }
        if self.cached_frames > MAX_CACHED_FRAMES {
            self.results.clear();
            self.cached_frames = 0;
        }
    }

    fn file(&mut self, request: &FileRequest) -> Vec<Resolved> {
        #[cfg(test)]
        if request.offsets.contains(&tests::PANIC_OFFSET) {
            panic!("test: a file that breaks the symbolizer");
        }
        self.maybe_rebuild();
        let Some(key) = cache_key(request) else {
            return vec![None; request.offsets.len()];
        };
        let cached = self.results.entry(key.clone()).or_default();
        let mut out: Vec<Resolved> = Vec::with_capacity(request.offsets.len());
        let mut missing: Vec<u64> = Vec::new();
        for &off in &request.offsets {
            match cached.get(&off) {
                Some(r) => out.push(r.clone()),
                None => {
                    out.push(None);
                    missing.push(off);
                }
            }
        }
        if missing.is_empty() {
            return out;
        }
        missing.sort_unstable();
        missing.dedup();
        let found = self.resolve(&key, request, &missing);
        let cached = self.results.entry(key).or_default();
        for (off, r) in missing.iter().zip(found) {
            cached.insert(*off, r);
            self.cached_frames += 1;
        }
        request
            .offsets
            .iter()
            .map(|off| cached.get(off).cloned().flatten())
            .collect()
    }

    /// Symbolizes `offsets` (sorted, distinct) of one file.
    fn resolve(&mut self, key: &CacheKey, request: &FileRequest, offsets: &[u64]) -> Vec<Resolved> {
        let mut out: Vec<Resolved> = vec![None; offsets.len()];
        // The file is opened once, checked; blazesym reads it through /proc/self/fd, so
        // whatever is put at its path meanwhile is not what it reads.
        let (path, opened) = match request.kind {
            MappingKind::Vdso => match self.vdso_path() {
                Some(p) => (Some(p), None),
                None => return out,
            },
            _ => match self.open_file(request) {
                Some(f) if f.others_may_change() => (self.copy_path(key, &f), Some(f)),
                Some(f) => (Some(f.fd_path()), Some(f)),
                None => return out,
            },
        };
        self.files_seen.insert(key.clone());
        let is_go = request.file.as_ref().is_some_and(|f| f.is_go);
        if is_go
            && let Some(opened) = &opened
            && let Some(go) = self.go_file(key, opened)
        {
            for (slot, &off) in out.iter_mut().zip(offsets) {
                let frame = file_offset_to_vaddr(&go.program_headers, off)
                    .and_then(|vaddr| go.table.lookup(vaddr));
                *slot = frame.map(|f| {
                    Arc::new(Symbolized {
                        lines: lines_from_go(f),
                        frame_type: FrameType::Go,
                    })
                });
            }
        }
        // Whatever Go's table does not hold (all of a native file; C code of a cgo binary).
        let rest: Vec<(usize, u64)> = out
            .iter()
            .zip(offsets)
            .enumerate()
            .filter(|(_, (r, _))| r.is_none())
            .map(|(i, (_, &off))| (i, off))
            .collect();
        let Some(path) = path.filter(|_| !rest.is_empty()) else {
            return out;
        };
        let addrs: Vec<u64> = rest.iter().map(|&(_, off)| off).collect();
        let src = Source::Elf(Elf::new(path));
        match self.blaze.symbolize(&src, Input::FileOffset(&addrs)) {
            Ok(syms) => {
                for ((i, _), sym) in rest.iter().zip(syms) {
                    if let bz::Symbolized::Sym(sym) = sym {
                        out[*i] = Some(Arc::new(Symbolized {
                            lines: lines_from_sym(&sym),
                            frame_type: FrameType::Native,
                        }));
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "symbolization failed"),
        }
        out
    }

    /// The request's file, opened and checked to be the inode first read; else, for a
    /// process gone, the host path when its build id is the file's.
    fn open_file(&self, request: &FileRequest) -> Option<VerifiedFile> {
        let file = request.file.as_ref()?;
        if file.rejected.is_some() {
            return None;
        }
        for location in &request.locations {
            match VerifiedFile::open(location, file.identity) {
                Ok(f) => return Some(f),
                Err(e) if e.is_suspicious() => {
                    self.counters.files_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(path = %location.path().display(), error = %e, "mapped file refused");
                    return None;
                }
                Err(_) => continue,
            }
        }
        let host = request.host_path.as_ref()?;
        let want = file.build_id_gnu.as_ref()?;
        let opened = VerifiedFile::open(&FileLocation::Host(host.clone()), None).ok()?;
        let elf = ElfFile::from_file(opened.try_clone_file().ok()?, opened.size()).ok()?;
        (elf.gnu_build_id().as_ref() == Some(want)).then_some(opened)
    }

    /// `/proc/self/fd/<n>` of a sealed copy of `opened`, made once per file; `None` when
    /// the file or all copies together would pass their caps.
    fn copy_path(&mut self, key: &CacheKey, opened: &VerifiedFile) -> Option<PathBuf> {
        if !self.copies.contains_key(key) {
            let fits = self.copies_bytes.saturating_add(opened.size()) <= MAX_COPIES_BYTES;
            let copy = if fits {
                opened.sealed_copy(MAX_COPY_BYTES).unwrap_or_else(|e| {
                    tracing::debug!(path = %opened.path().display(), error = %e, "cannot copy the file");
                    None
                })
            } else {
                None
            };
            if copy.is_some() {
                self.copies_bytes += opened.size();
            }
            self.copies.insert(key.clone(), copy);
        }
        let copy = self.copies.get(key)?.as_ref()?;
        Some(PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::unix::io::AsRawFd::as_raw_fd(copy)
        )))
    }

    fn go_file(&mut self, key: &CacheKey, opened: &VerifiedFile) -> Option<Arc<GoFile>> {
        if let Some(known) = self.go.get(key) {
            return known.clone();
        }
        let elf = ElfFile::from_file(opened.try_clone_file().ok()?, opened.size()).ok()?;
        let table = match GoTable::from_elf(&elf) {
            Ok(table) => Some(table),
            Err(e) => {
                if matches!(e, GoTableError::Malformed(_)) {
                    self.counters.files_rejected.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(path = %opened.path().display(), error = %e, "no Go function table");
                None
            }
        };
        let go = table.map(|table| {
            if self.go_bytes + table.byte_len() > MAX_GO_TABLE_BYTES {
                self.go.clear();
                self.go_bytes = 0;
            }
            self.go_bytes += table.byte_len();
            Arc::new(GoFile {
                table,
                program_headers: elf.program_headers.clone(),
            })
        });
        self.go.insert(key.clone(), go.clone());
        go
    }

    fn vdso_path(&mut self) -> Option<PathBuf> {
        let file = self.vdso.get_or_insert_with(|| {
            let image = read_own_vdso()?;
            let fd =
                rustix::fs::memfd_create("profcol-vdso", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
            let mut file = std::fs::File::from(fd);
            std::io::Write::write_all(&mut file, &image).ok()?;
            Some(file)
        });
        file.as_ref().map(|f| {
            use std::os::fd::AsRawFd;
            PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
        })
    }

    fn kernel(&mut self, addrs: &[u64]) -> Vec<Resolved> {
        self.maybe_rebuild();
        let usable = *self
            .kallsyms_usable
            .get_or_insert_with(|| kallsyms_has_addresses(&self.options.kallsyms));
        if !usable {
            return vec![None; addrs.len()];
        }
        let mut missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel.contains_key(a))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let src = Source::Kernel(Kernel {
                kallsyms: MaybeDefault::Some(self.options.kallsyms.clone()),
                vmlinux: MaybeDefault::None,
                debug_syms: false,
                ..Kernel::default()
            });
            let found = match self.blaze.symbolize(&src, Input::AbsAddr(&missing)) {
                Ok(syms) => syms
                    .into_iter()
                    .map(|s| match s {
                        bz::Symbolized::Sym(sym) => Some(Arc::new(Symbolized {
                            lines: vec![SymLine {
                                function: sym.name.into_owned(),
                                file: None,
                                line: 0,
                                column: 0,
                            }],
                            frame_type: FrameType::Kernel,
                        })),
                        bz::Symbolized::Unknown(_) => None,
                    })
                    .collect(),
                Err(e) => {
                    tracing::debug!(error = %e, "kernel symbolization failed");
                    vec![None; missing.len()]
                }
            };
            for (a, r) in missing.into_iter().zip(found) {
                self.kernel.insert(a, r);
            }
        }
        addrs
            .iter()
            .map(|a| self.kernel.get(a).cloned().flatten())
            .collect()
    }
}

fn build_blazesym(options: &SymbolizerOptions) -> bz::Symbolizer {
    bz::Symbolizer::builder()
        .enable_code_info(options.code_info)
        .enable_inlined_fns(options.inlined_fns)
        .enable_demangling(options.demangle)
        .build()
}

/// OTLP lines from a blazesym symbol: inlined functions innermost first, then the function
/// the code is compiled into. blazesym lists inlined functions outermost first, each with
/// the location inside it.
pub fn lines_from_sym(sym: &bz::Sym<'_>) -> Vec<SymLine> {
    let line_of = |ci: Option<&bz::CodeInfo<'_>>| SymLine {
        function: String::new(),
        file: ci.map(|c| c.to_path().to_string_lossy().into_owned()),
        line: ci.and_then(|c| c.line).unwrap_or(0),
        column: ci.and_then(|c| c.column).map_or(0, u32::from),
    };
    let mut lines: Vec<SymLine> = sym
        .inlined
        .iter()
        .rev()
        .map(|f| SymLine {
            function: f.name.to_string(),
            ..line_of(f.code_info.as_ref())
        })
        .collect();
    lines.push(SymLine {
        function: sym.name.to_string(),
        ..line_of(sym.code_info.as_deref())
    });
    lines
}

/// OTLP lines from a Go frame: like DWARF's, inlined functions innermost first, then the
/// function the code is compiled into, each at its own file and line (Go records no
/// columns).
pub fn lines_from_go(frame: GoFrame) -> Vec<SymLine> {
    frame
        .lines
        .into_iter()
        .map(|l| SymLine {
            function: l.function,
            file: l.file,
            line: l.line.unwrap_or(0),
            column: 0,
        })
        .collect()
}

/// Whether kallsyms shows addresses (it shows zeros to readers without `CAP_SYSLOG` when
/// `kptr_restrict` is set).
pub fn kallsyms_has_addresses(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    text.lines()
        .take(1000)
        .filter_map(|l| l.split_whitespace().next())
        .any(|a| u64::from_str_radix(a, 16).is_ok_and(|a| a != 0))
}

/// This process's vDSO image, read from `/proc/self/mem`.
pub fn read_own_vdso() -> Option<Vec<u8>> {
    let maps = fs::read_to_string("/proc/self/maps").ok()?;
    let vdso = crate::procfs::parse_maps(&maps)
        .into_iter()
        .find(|m| m.path == crate::procfs::MapsPath::Vdso)?;
    let len = usize::try_from(vdso.end - vdso.start).ok()?;
    let mut mem = fs::File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(vdso.start)).ok()?;
    let mut image = vec![0; len];
    mem.read_exact(&mut image).ok()?;
    Some(image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Filter;
    use crate::process::{Mapping, ProcessTable};
    use crate::procfs::ProcFs;
    use std::borrow::Cow;
    use std::ffi::OsStr;

    /// An offset that makes the worker panic (tests only).
    pub(super) const PANIC_OFFSET: u64 = 0xdead_0ff5_e700_0000;

    #[inline(never)]
    fn profcol_symbolize_marker(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(31).rotate_left(7))
    }

    fn own_mapping(addr: u64) -> (Arc<Mapping>, u32) {
        let pid = std::process::id();
        let mut table = ProcessTable::new(
            ProcFs::default(),
            Duration::from_secs(30),
            Filter::allow_all(),
        );
        let p = table.load(pid, 1);
        (p.find_mapping(addr).expect("mapped").clone(), pid)
    }

    #[test]
    fn own_function_is_symbolized_through_proc_maps() {
        let _ = profcol_symbolize_marker(1);
        let addr = profcol_symbolize_marker as *const () as usize as u64;
        let (m, pid) = own_mapping(addr);
        let request = FileRequest {
            kind: m.kind,
            file: m.file.clone(),
            locations: m.locations(&ProcFs::default(), pid),
            host_path: Some(PathBuf::from(&m.path)),
            offsets: vec![m.file_offset(addr), m.file_offset(addr + 1)],
        };
        let s = Symbolizer::new(SymbolizerOptions::default());
        let out = s.symbolize_files(vec![request.clone()]);
        let frame = out[0][0].as_ref().expect("symbolized");
        assert_eq!(frame.frame_type, FrameType::Native);
        let outer = frame.lines.last().expect("a line");
        assert!(
            outer.function.ends_with("profcol_symbolize_marker"),
            "{frame:?}"
        );
        assert!(
            outer
                .file
                .as_deref()
                .is_some_and(|f| f.ends_with("symbolize.rs")),
            "{frame:?}"
        );
        assert!(outer.line > 0, "DWARF lines: {frame:?}");
        assert!(out[0][1].is_some());
        // Asked again: the same answer, from the cache.
        let again = s.symbolize_files(vec![request]);
        assert!(Arc::ptr_eq(
            again[0][0].as_ref().expect("cached"),
            out[0][0].as_ref().expect("first")
        ));
    }

    /// A stripped Go 1.20+ program, running: a return address inside two inlined calls
    /// becomes one location whose lines are the two inlined functions, innermost first,
    /// then the function they are compiled into, each at the file and line Go's own
    /// `runtime.CallersFrames` gives in that process.
    #[test]
    fn inlined_go_functions_are_lines_of_one_location() {
        use crate::testutil::{GoBuild, go_inline_program};
        for build in [GoBuild::Static, GoBuild::Pie] {
            let Some(program) = go_inline_program(build) else {
                return;
            };
            let mut oracle = program.oracle();
            let pid = oracle.pid();
            let pc = oracle.probe - 1;
            let want = oracle.frames(&[pc]).remove(0);
            assert!(!want.is_empty(), "Go names the pc");
            let mut table = ProcessTable::new(
                ProcFs::default(),
                Duration::from_secs(30),
                Filter::allow_all(),
            );
            let m = table.load(pid, 1).find_mapping(pc).expect("mapped").clone();
            assert!(m.file.as_ref().is_some_and(|f| f.is_go), "seen as Go");
            let s = Symbolizer::new(SymbolizerOptions::default());
            let out = s.symbolize_files(vec![FileRequest {
                kind: m.kind,
                file: m.file.clone(),
                locations: m.locations(&ProcFs::default(), pid),
                host_path: None,
                offsets: vec![m.file_offset(pc)],
            }]);
            let frame = out[0][0].as_ref().expect("symbolized");
            assert_eq!(frame.frame_type, FrameType::Go);
            let got: Vec<(String, String, u32)> = frame
                .lines
                .iter()
                .map(|l| {
                    (
                        l.function.clone(),
                        l.file.clone().unwrap_or_default(),
                        l.line,
                    )
                })
                .collect();
            // Go 1.21's CallersFrames gives the innermost function of a lone pc only.
            assert_eq!(got[..want.len()], want, "{build:?}");
            let names: Vec<&str> = got.iter().map(|l| l.0.as_str()).collect();
            assert_eq!(
                names,
                ["main.probeInner", "main.probeMid", "main.profcolProbe"]
            );
            assert!(
                frame.lines.iter().all(|l| l.column == 0),
                "Go has no columns"
            );
        }
    }

    #[test]
    fn gone_process_falls_back_to_the_host_path_only_with_the_same_build_id() {
        let addr = profcol_symbolize_marker as *const () as usize as u64;
        let (m, _) = own_mapping(addr);
        let s = Symbolizer::new(SymbolizerOptions::default());
        let gone = |host: &str| FileRequest {
            kind: m.kind,
            file: m.file.clone(),
            locations: vec![FileLocation::MapFiles("/proc/0/map_files/none".into())],
            host_path: Some(PathBuf::from(host)),
            offsets: vec![m.file_offset(addr)],
        };
        let out = s.symbolize_files(vec![gone(&m.path)]);
        assert!(out[0][0].is_some(), "same file on the host");
        // Another file at the host path (say the container had another build): refused.
        let mut other = gone("/bin/sh");
        other.file = Some(Arc::new(ExecutableFile {
            key: FileKey::Path("/x".into()),
            readable: true,
            is_elf: true,
            build_id_gnu: Some(vec![1; 20]),
            build_id_go: None,
            is_go: false,
            identity: None,
            python: None,
            rejected: None,
        }));
        assert_eq!(s.symbolize_files(vec![other]), vec![vec![None]]);
    }

    #[test]
    fn unknown_files_give_nothing() {
        let s = Symbolizer::new(SymbolizerOptions::default());
        let r = FileRequest {
            kind: MappingKind::File,
            file: Some(Arc::new(ExecutableFile {
                key: FileKey::Path("/nope".into()),
                readable: false,
                is_elf: false,
                build_id_gnu: None,
                build_id_go: None,
                is_go: false,
                identity: None,
                python: None,
                rejected: None,
            })),
            locations: vec![FileLocation::Host("/nonexistent/binary".into())],
            host_path: None,
            offsets: vec![0x1000, 0x2000],
        };
        assert_eq!(s.symbolize_files(vec![r]), vec![vec![None, None]]);
    }

    #[test]
    fn vdso_is_symbolized_from_our_own_image() {
        let Some(image) = read_own_vdso() else {
            eprintln!("skipping: no vDSO in /proc/self/maps");
            return;
        };
        let elf = ElfFile::from_bytes(image).expect("the vDSO is ELF");
        let text = elf.section(".text").expect("vDSO .text").clone();
        let s = Symbolizer::new(SymbolizerOptions::default());
        let out = s.symbolize_files(vec![FileRequest {
            kind: MappingKind::Vdso,
            file: None,
            locations: Vec::new(),
            host_path: None,
            offsets: vec![text.offset + text.size / 2],
        }]);
        let frame = out[0][0].as_ref().expect("vdso frame symbolized");
        assert!(!frame.lines[0].function.is_empty());
    }

    /// A known kallsyms address symbolizes to its name (as root; kallsyms shows zeros
    /// otherwise).
    #[test]
    fn kernel_symbol_from_kallsyms() {
        let path = Path::new("/proc/kallsyms");
        if !kallsyms_has_addresses(path) {
            eprintln!("skipping: /proc/kallsyms shows no addresses (not root, or kptr_restrict)");
            return;
        }
        let text = fs::read_to_string(path).expect("kallsyms");
        // A text symbol of the core kernel whose address no other symbol shares.
        let mut by_addr: HashMap<u64, Vec<&str>> = HashMap::new();
        let mut candidates = Vec::new();
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(a), Some(t), Some(name), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(a) = u64::from_str_radix(a, 16) else {
                continue;
            };
            by_addr.entry(a).or_default().push(name);
            if t == "T"
                && matches!(
                    name,
                    "vfs_read" | "schedule" | "do_sys_open" | "__x64_sys_getpid"
                )
            {
                candidates.push((a, name));
            }
        }
        let (addr, name) = *candidates
            .iter()
            .find(|(a, _)| by_addr[a].len() == 1)
            .expect("a well-known kernel function");
        let s = Symbolizer::new(SymbolizerOptions::default());
        let out = s.symbolize_kernel(vec![addr, addr + 1, 0x10]);
        let frame = out[0].as_ref().expect("symbolized");
        assert_eq!(frame.frame_type, FrameType::Kernel);
        assert_eq!(frame.lines[0].function, name);
        assert_eq!(
            out[1].as_ref().map(|f| f.lines[0].function.as_str()),
            Some(name)
        );
    }

    #[test]
    fn zeroed_kallsyms_disables_kernel_symbolization() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("kallsyms");
        fs::write(
            &path,
            "0000000000000000 T _stext\n0000000000000000 T schedule\n",
        )
        .expect("write");
        assert!(!kallsyms_has_addresses(&path));
        let s = Symbolizer::new(SymbolizerOptions {
            kallsyms: path,
            ..SymbolizerOptions::default()
        });
        assert_eq!(s.symbolize_kernel(vec![0xffffffff81000010]), vec![None]);
    }

    #[test]
    fn a_fake_kallsyms_resolves_by_nearest_lower_symbol() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("kallsyms");
        fs::write(
            &path,
            "ffffffff81000000 T _stext\nffffffff81001000 T alpha\nffffffff81002000 t beta\nffffffff81003000 T _etext\n",
        )
        .expect("write");
        let s = Symbolizer::new(SymbolizerOptions {
            kallsyms: path,
            ..SymbolizerOptions::default()
        });
        let out = s.symbolize_kernel(vec![0xffffffff81001010, 0xffffffff81002fff]);
        let names: Vec<_> = out
            .iter()
            .map(|r| r.as_ref().map(|f| f.lines[0].function.clone()))
            .collect();
        assert_eq!(names, [Some("alpha".to_owned()), Some("beta".to_owned())]);
    }

    #[test]
    fn inlined_functions_come_innermost_first() {
        let code = |file: &'static str, line| bz::CodeInfo {
            dir: Some(Cow::Borrowed(Path::new("/src"))),
            file: Cow::Borrowed(OsStr::new(file)),
            line: Some(line),
            column: Some(3),
            _non_exhaustive: (),
        };
        // f calls g (inlined) which calls h (inlined), and the address is in h.
        let sym = bz::Sym {
            name: Cow::Borrowed("f"),
            module: None,
            addr: 0x1000,
            offset: 4,
            size: Some(64),
            code_info: Some(Box::new(code("f.c", 10))),
            inlined: vec![
                bz::InlinedFn {
                    name: Cow::Borrowed("g"),
                    code_info: Some(code("g.h", 20)),
                    _non_exhaustive: (),
                },
                bz::InlinedFn {
                    name: Cow::Borrowed("h"),
                    code_info: Some(code("h.h", 30)),
                    _non_exhaustive: (),
                },
            ]
            .into_boxed_slice(),
            _non_exhaustive: (),
        };
        let lines = lines_from_sym(&sym);
        let got: Vec<_> = lines
            .iter()
            .map(|l| (l.function.as_str(), l.file.as_deref(), l.line, l.column))
            .collect();
        assert_eq!(
            got,
            [
                ("h", Some("/src/h.h"), 30, 3),
                ("g", Some("/src/g.h"), 20, 3),
                ("f", Some("/src/f.c"), 10, 3),
            ]
        );
    }

    #[test]
    fn a_panic_restarts_the_symbolizer_counts_it_and_skips_that_file_after() {
        let _ = profcol_symbolize_marker(1);
        let addr = profcol_symbolize_marker as *const () as usize as u64;
        let (m, pid) = own_mapping(addr);
        let counters = Arc::new(BadInputCounters::default());
        let s = Symbolizer::with_counters(SymbolizerOptions::default(), counters.clone());
        let request = |offsets: Vec<u64>| FileRequest {
            kind: m.kind,
            file: m.file.clone(),
            locations: m.locations(&ProcFs::default(), pid),
            host_path: None,
            offsets,
        };
        let out = s.symbolize_files(vec![request(vec![m.file_offset(addr), PANIC_OFFSET])]);
        assert_eq!(
            out,
            vec![vec![None, None]],
            "the panicking file gives nothing"
        );
        assert_eq!(counters.symbolizer_restarts.load(Ordering::Relaxed), 1);
        assert_eq!(counters.files_rejected.load(Ordering::Relaxed), 1);
        // The file is not read again, and the symbolizer still works for others.
        assert_eq!(
            s.symbolize_files(vec![request(vec![m.file_offset(addr)])]),
            vec![vec![None]]
        );
        let kallsyms = tempfile::NamedTempFile::new().expect("tmp");
        fs::write(
            kallsyms.path(),
            "ffffffff81001000 T alpha\nffffffff81002000 T beta\n",
        )
        .expect("write");
        let s2 = Symbolizer::with_counters(
            SymbolizerOptions {
                kallsyms: kallsyms.path().to_path_buf(),
                ..SymbolizerOptions::default()
            },
            counters.clone(),
        );
        let _ = s2.symbolize_files(vec![request(vec![PANIC_OFFSET])]);
        let k = s2.symbolize_kernel(vec![0xffffffff81001010]);
        assert_eq!(
            k[0].as_ref().map(|f| f.lines[0].function.as_str()),
            Some("alpha")
        );
        assert_eq!(counters.symbolizer_restarts.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_symbolizer_thread_found_gone_is_started_again_and_counted() {
        let kallsyms = tempfile::NamedTempFile::new().expect("tmp");
        fs::write(
            kallsyms.path(),
            "ffffffff81001000 T alpha\nffffffff81002000 T beta\n",
        )
        .expect("write");
        let counters = Arc::new(BadInputCounters::default());
        let options = SymbolizerOptions {
            kallsyms: kallsyms.path().to_path_buf(),
            ..SymbolizerOptions::default()
        };
        // A thread that ended: its receiving end is gone.
        let (dead, _) = mpsc::channel::<Job>();
        let s = Symbolizer {
            tx: Mutex::new(Some(dead)),
            options,
            counters: counters.clone(),
        };
        let k = s.symbolize_kernel(vec![0xffffffff81002010]);
        assert_eq!(
            k[0].as_ref().map(|f| f.lines[0].function.as_str()),
            Some("beta")
        );
        assert_eq!(counters.symbolizer_restarts.load(Ordering::Relaxed), 1);
        // Running again: no further restart.
        let _ = s.symbolize_kernel(vec![0xffffffff81001010]);
        assert_eq!(counters.symbolizer_restarts.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_file_swapped_after_it_was_read_is_not_symbolized() {
        let dir = tempfile::tempdir().expect("tmp");
        let exe = std::env::current_exe().expect("exe");
        let copy = dir.path().join("app");
        fs::copy(&exe, &copy).expect("copy");
        let counters = Arc::new(BadInputCounters::default());
        let key = FileKey::Path(copy.display().to_string());
        let location = FileLocation::Host(copy.clone());
        let file = Arc::new(ExecutableFile::read(
            key,
            "",
            std::slice::from_ref(&location),
            None,
        ));
        assert!(file.is_elf && file.identity.is_some());
        let _ = profcol_symbolize_marker(1);
        let addr = profcol_symbolize_marker as *const () as usize as u64;
        let (m, _) = own_mapping(addr);
        let request = FileRequest {
            kind: MappingKind::File,
            file: Some(file),
            locations: vec![location],
            host_path: None,
            offsets: vec![m.file_offset(addr)],
        };
        let s = Symbolizer::with_counters(SymbolizerOptions::default(), counters.clone());
        // A symlink to the same bytes now stands at the path.
        fs::rename(&copy, dir.path().join("moved")).expect("rename");
        std::os::unix::fs::symlink(dir.path().join("moved"), &copy).expect("symlink");
        assert_eq!(s.symbolize_files(vec![request.clone()]), vec![vec![None]]);
        assert_eq!(counters.files_rejected.load(Ordering::Relaxed), 1);
        // Another file (another inode) with the same bytes: refused too.
        fs::remove_file(&copy).expect("rm");
        fs::copy(&exe, &copy).expect("copy");
        let mut fresh = request.clone();
        fresh.offsets.push(m.file_offset(addr) + 1);
        assert_eq!(s.symbolize_files(vec![fresh]), vec![vec![None, None]]);
        assert_eq!(counters.files_rejected.load(Ordering::Relaxed), 2);
    }

    /// A file its owner can change is symbolized from a sealed copy: truncated after the
    /// first request, it still symbolizes (blazesym never maps the file itself, whose
    /// truncation under a mapping would kill the process with SIGBUS).
    #[test]
    fn files_others_can_change_are_symbolized_from_a_sealed_copy() {
        let dir = tempfile::tempdir().expect("tmp");
        let exe = std::env::current_exe().expect("exe");
        let app = dir.path().join("app");
        fs::copy(&exe, &app).expect("copy");
        let euid = std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").expect("proc"));
        if euid == 0 {
            std::os::unix::fs::chown(&app, Some(65534), Some(65534)).expect("chown");
        }
        let location = FileLocation::Host(app.clone());
        let file = Arc::new(ExecutableFile::read(
            FileKey::Path(app.display().to_string()),
            "",
            std::slice::from_ref(&location),
            None,
        ));
        assert!(file.is_elf);
        let _ = profcol_symbolize_marker(1);
        let addr = profcol_symbolize_marker as *const () as usize as u64;
        let (m, _) = own_mapping(addr);
        let request = |off: u64| FileRequest {
            kind: MappingKind::File,
            file: Some(file.clone()),
            locations: vec![location.clone()],
            host_path: None,
            offsets: vec![off],
        };
        let s = Symbolizer::new(SymbolizerOptions::default());
        let first = s.symbolize_files(vec![request(m.file_offset(addr))]);
        let name = |r: &Resolved| {
            r.as_ref()
                .and_then(|f| f.lines.last().map(|l| l.function.clone()))
        };
        if fs::metadata(&app).expect("meta").len() > MAX_COPY_BYTES {
            // Too large to copy: blazesym never sees it (no symbols, no mapping of it).
            assert_eq!(first, vec![vec![None]]);
            return;
        }
        assert!(name(&first[0][0]).is_some_and(|n| n.ends_with("profcol_symbolize_marker")));
        // The owner truncates the file (same inode).
        fs::OpenOptions::new()
            .write(true)
            .open(&app)
            .expect("open")
            .set_len(4096)
            .expect("truncate");
        let caller = a_panic_restarts_the_symbolizer_counts_it_and_skips_that_file_after
            as *const () as usize as u64;
        let after = s.symbolize_files(vec![request(m.file_offset(caller) + 8)]);
        assert!(
            name(&after[0][0]).is_some_and(|n| n.contains("a_panic_restarts_the_symbolizer")),
            "{after:?}"
        );
    }

    #[test]
    fn symbolizer_handle_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Symbolizer>();
    }
}
