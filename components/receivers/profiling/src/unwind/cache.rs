//! The unwind tables loaded into BPF: one per file identity, built once on a thread of
//! its own (so that the thread draining the ring buffer never waits for a large binary),
//! shared by every process that maps the file, evicted least recently used under a
//! memory budget.

use std::collections::BinaryHeap;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc};
use std::time::Instant;

use super::builder::{Limits, build_with_limits};
use super::maps::UnwindMaps;
use crate::elf::ElfFile;

/// A table used within this long is not evicted for another. Without it, a working set
/// larger than the budget (a build machine's compilers, each mapping a large LLVM) makes
/// the least recently used table the one needed next: every round evicted one and loaded
/// another, and loading is what costs (measured: 320 loads in 22 s, more than half of the
/// profiler's CPU). With it, a file that does not fit is unwound by frame pointer until
/// room frees up.
pub const MIN_IDLE_NANOS: u64 = 10_000_000_000;
/// A table that found no room is built again after this long, not every round.
pub const NO_ROOM_RETRY_NANOS: u64 = 30_000_000_000;

/// What names a file for its table: the device and inode it was mapped from, and its
/// build id. Not the build id alone: any file can claim any build id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableKey {
    pub dev: u64,
    pub inode: u64,
    pub build_id: Option<Vec<u8>>,
}

/// An executable `PT_LOAD` segment: where the file's bytes at `offset` are mapped to
/// `vaddr`. A mapping's bias comes from the segment its file offset falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

/// A table in BPF.
#[derive(Debug, Clone)]
struct Loaded {
    slot: u32,
    generation: u32,
    bytes: usize,
    base: u64,
    segments: Vec<Segment>,
    last_used: u64,
    /// When it was last used (unix nanoseconds, the receiver's clock).
    last_used_at: u64,
}

#[derive(Debug, Clone)]
enum Entry {
    Loaded(Loaded),
    /// Being built; `attempts` earlier tries could not open the file.
    Building {
        attempts: u32,
    },
    /// No table could be built (no CFI, refused, not ELF). Not tried again: the key
    /// names the same bytes. Its frames use the frame pointer.
    NoTable,
    /// Built, but it did not fit beside the tables in use at `at` (unix nanoseconds);
    /// built again once [`NO_ROOM_RETRY_NANOS`] have passed, when they may be idle.
    NoRoom {
        at: u64,
    },
    /// Could not be opened through the process that asked (it exited meanwhile): asked
    /// again through the next process that maps it, up to [`MAX_OPEN_ATTEMPTS`] times.
    Unopened {
        attempts: u32,
    },
}

/// Code this large (bytes mapped executable) is built on the second builder thread.
const LARGE_FILE: u64 = 8 << 20;

/// Times a file that could not be opened is asked for again.
const MAX_OPEN_ATTEMPTS: u32 = 8;

/// What the builder thread made of a request.
enum Outcome {
    Built(BuiltTable),
    /// The file has no table: not ELF, no call frame information, refused.
    NoTable,
    /// The file could not be opened.
    Unopened,
}

/// A built table, on its way from the builder thread.
struct BuiltTable {
    rows: Vec<u8>,
    count: usize,
    base: u64,
    segments: Vec<Segment>,
}

/// Opens the mapped file (on the builder thread).
pub type Opener = Box<dyn FnOnce() -> Option<ElfFile> + Send>;

struct Request {
    key: TableKey,
    open: Opener,
    /// Bytes of the mapping's code: smaller files are built first, so that a process of
    /// small binaries does not wait behind a 100 MB one.
    size: u64,
    /// Order of asking, among equal sizes.
    sequence: u64,
}

impl PartialEq for Request {
    fn eq(&self, other: &Self) -> bool {
        (self.size, self.sequence) == (other.size, other.sequence)
    }
}

impl Eq for Request {}

impl PartialOrd for Request {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Request {
    /// The heap's greatest is built next: the smallest, then the oldest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.size, other.sequence).cmp(&(self.size, self.sequence))
    }
}

/// Requests waiting for the builder thread; `None` once the cache is gone.
#[derive(Default)]
struct Queue {
    requests: Mutex<Option<BinaryHeap<Request>>>,
    ready: Condvar,
}

impl Queue {
    fn push(&self, request: Request) -> bool {
        let mut guard = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(heap) => {
                heap.push(request);
                self.ready.notify_one();
                true
            }
            None => false,
        }
    }

    /// The next request, waiting for one; `None` once closed.
    fn pop(&self) -> Option<Request> {
        let mut guard = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match guard.as_mut() {
                None => return None,
                Some(heap) => {
                    if let Some(request) = heap.pop() {
                        return Some(request);
                    }
                }
            }
            guard = self
                .ready
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn close(&self) {
        *self.requests.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.ready.notify_all();
    }
}

struct Done {
    key: TableKey,
    outcome: Outcome,
    seconds: f64,
}

/// Where a mapping's frames find their table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Loaded: use it.
    Ready(TableRef),
    /// Being built: give the mapping no table for now, and again once
    /// [`TableCache::finish_builds`] names the key.
    Pending,
    /// None: the mapping's frames use the frame pointer.
    Absent,
}

/// A loaded table, for one mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRef {
    pub slot: u32,
    pub generation: u32,
    /// `pc - bias` = row address (wrapping).
    pub bias: u64,
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheStats {
    /// Tables in BPF now, and their rows' bytes.
    pub tables: usize,
    pub bytes: usize,
    /// Tables loaded, evicted to make room, and files with no table, since start.
    pub loaded: u64,
    pub evicted: u64,
    pub failed: u64,
    /// Tables built that found no room beside tables in use (their files are unwound by
    /// frame pointer until a retry finds room).
    pub no_room: u64,
    /// Time the builder thread spent building tables, since start.
    pub build_seconds: f64,
}

/// The tables, and the room they may take.
pub struct TableCache {
    entries: HashMap<TableKey, Entry>,
    /// Each loaded slot's generation and rows.
    slots: HashMap<u32, (u32, u32)>,
    free_slots: Vec<u32>,
    next_generation: u32,
    budget_bytes: usize,
    tick: u64,
    /// The time of the current round (unix nanoseconds).
    now: u64,
    stats: CacheStats,
    /// Small files, and large ones (at least [`LARGE_FILE`] of code), each with a
    /// builder thread: a new process of small binaries never waits behind a 100 MB one.
    queues: Option<[Arc<Queue>; 2]>,
    sequence: u64,
    done: mpsc::Receiver<Done>,
}

impl Drop for TableCache {
    /// Lets the builder thread end.
    fn drop(&mut self) {
        for queue in self.queues.iter().flatten() {
            queue.close();
        }
    }
}

impl std::fmt::Debug for TableCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCache")
            .field("entries", &self.entries.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The builder thread: one file at a time, in the order asked.
fn builder_thread(queue: Arc<Queue>, done: mpsc::Sender<Done>, limits: Limits) {
    while let Some(Request { key, open, .. }) = queue.pop() {
        let started = Instant::now();
        // A hostile file must not take the thread down with it.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            build_table(&key, open, &limits)
        }))
        .unwrap_or_else(|_| {
            tracing::warn!(
                dev = key.dev,
                inode = key.inode,
                "building an unwind table panicked"
            );
            Outcome::NoTable
        });
        let seconds = started.elapsed().as_secs_f64();
        if done
            .send(Done {
                key,
                outcome,
                seconds,
            })
            .is_err()
        {
            return;
        }
    }
}

fn build_table(key: &TableKey, open: Opener, limits: &Limits) -> Outcome {
    let Some(elf) = open() else {
        return Outcome::Unopened;
    };
    let segments: Vec<Segment> = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == 1 && p.flags & 1 != 0)
        .map(|p| Segment {
            offset: p.offset,
            vaddr: p.vaddr,
            filesz: p.filesz,
        })
        .collect();
    let built = match build_with_limits(&elf, limits) {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!(dev = key.dev, inode = key.inode, "no unwind table: {e}");
            return Outcome::NoTable;
        }
    };
    let table = built.table;
    if table.is_empty() {
        return Outcome::NoTable;
    }
    Outcome::Built(BuiltTable {
        rows: table.encode(),
        count: table.len(),
        base: table.base,
        segments,
    })
}

impl TableCache {
    /// A cache whose tables take at most `budget_bytes` (rows, as BPF holds them), in at
    /// most `slots` tables (slot numbers 1..=slots).
    pub fn new(budget_bytes: usize, slots: u32) -> Self {
        let limits = Limits {
            // A table never takes more than the whole budget.
            max_rows: Limits::default()
                .max_rows
                .min(budget_bytes / super::row::ROW_SIZE),
            ..Limits::default()
        };
        let (outbox, done) = mpsc::channel();
        let mut queues = Vec::new();
        for lane in ["unwind-tables", "unwind-tables-large"] {
            let queue = Arc::new(Queue {
                requests: Mutex::new(Some(BinaryHeap::new())),
                ready: Condvar::new(),
            });
            let (inbox, outbox) = (queue.clone(), outbox.clone());
            match std::thread::Builder::new()
                .name(lane.into())
                .spawn(move || builder_thread(inbox, outbox, limits))
            {
                Ok(_) => queues.push(queue),
                Err(e) => {
                    tracing::warn!("no unwind table builder thread ({e}): frame pointers only");
                    queue.close();
                }
            }
        }
        let queues: Option<[Arc<Queue>; 2]> = queues.try_into().ok();
        TableCache {
            entries: HashMap::new(),
            slots: HashMap::new(),
            free_slots: (1..=slots).rev().collect(),
            next_generation: 1,
            budget_bytes,
            tick: 0,
            now: 0,
            stats: CacheStats::default(),
            queues,
            sequence: 0,
            done,
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Starts a new round of use: tables touched from now on are the most recent.
    pub fn next_round(&mut self, now_unix_nanos: u64) {
        self.tick += 1;
        self.now = self.now.max(now_unix_nanos);
    }

    /// The file's table for a mapping at `start` of file `offset`, `size` bytes long;
    /// asks the builder for it (`open` gives the file) the first time.
    pub fn table_for(
        &mut self,
        key: &TableKey,
        start: u64,
        offset: u64,
        size: u64,
        open: Opener,
    ) -> Lookup {
        match self.entries.get_mut(key) {
            Some(Entry::Loaded(t)) => {
                t.last_used = self.tick;
                t.last_used_at = self.now;
                return match bias(t, start, offset) {
                    Some(bias) => Lookup::Ready(TableRef {
                        slot: t.slot,
                        generation: t.generation,
                        bias,
                    }),
                    None => Lookup::Absent,
                };
            }
            Some(Entry::Building { .. }) => return Lookup::Pending,
            Some(Entry::NoTable) => return Lookup::Absent,
            Some(Entry::NoRoom { at }) if self.now.saturating_sub(*at) < NO_ROOM_RETRY_NANOS => {
                return Lookup::Absent;
            }
            Some(Entry::Unopened { attempts }) if *attempts >= MAX_OPEN_ATTEMPTS => {
                return Lookup::Absent;
            }
            _ => {}
        }
        let attempts = match self.entries.get(key) {
            Some(Entry::Unopened { attempts }) => *attempts,
            _ => 0,
        };
        self.sequence += 1;
        let request = Request {
            key: key.clone(),
            open,
            size,
            sequence: self.sequence,
        };
        let lane = usize::from(size >= LARGE_FILE);
        let sent = self
            .queues
            .as_ref()
            .is_some_and(|queues| queues[lane].push(request));
        if sent {
            self.entries
                .insert(key.clone(), Entry::Building { attempts });
            Lookup::Pending
        } else {
            self.queues = None;
            self.entries.insert(key.clone(), Entry::NoTable);
            Lookup::Absent
        }
    }

    /// Loads the tables the builder finished into BPF; returns their keys (loaded or not:
    /// the processes waiting for them can be given their mappings now).
    pub fn finish_builds(&mut self, maps: &mut dyn UnwindMaps) -> Vec<TableKey> {
        let mut finished = Vec::new();
        while let Ok(Done {
            key,
            outcome,
            seconds,
        }) = self.done.try_recv()
        {
            self.stats.build_seconds += seconds;
            let attempts = match self.entries.get(&key) {
                Some(Entry::Building { attempts }) => *attempts,
                _ => 0,
            };
            let entry = match outcome {
                Outcome::NoTable => {
                    self.stats.failed += 1;
                    Entry::NoTable
                }
                Outcome::Unopened => {
                    if attempts + 1 >= MAX_OPEN_ATTEMPTS {
                        self.stats.failed += 1;
                    }
                    Entry::Unopened {
                        attempts: attempts + 1,
                    }
                }
                Outcome::Built(table) => match self.load(table, maps) {
                    Ok(loaded) => Entry::Loaded(loaded),
                    Err(NotLoaded::NoRoom) => {
                        self.stats.no_room += 1;
                        Entry::NoRoom { at: self.now }
                    }
                    Err(NotLoaded::NoTable) => {
                        self.stats.failed += 1;
                        Entry::NoTable
                    }
                },
            };
            self.entries.insert(key.clone(), entry);
            finished.push(key);
        }
        finished
    }

    /// The rows of the table in `slot`, when it holds `generation`.
    pub fn rows_in(&self, slot: u32, generation: u32) -> Option<u32> {
        self.slots
            .get(&slot)
            .filter(|(g, _)| *g == generation)
            .map(|(_, rows)| *rows)
    }

    /// Marks a table as used now (a sample's frame was in it).
    pub fn touch(&mut self, key: &TableKey) {
        if let Some(Entry::Loaded(t)) = self.entries.get_mut(key) {
            t.last_used = self.tick;
            t.last_used_at = self.now;
        }
    }

    fn load(&mut self, table: BuiltTable, maps: &mut dyn UnwindMaps) -> Result<Loaded, NotLoaded> {
        let bytes = table.rows.len();
        if table.count == 0 || bytes > self.budget_bytes {
            return Err(NotLoaded::NoTable);
        }
        self.make_room(bytes, maps).ok_or(NotLoaded::NoRoom)?;
        let slot = self.free_slots.pop().ok_or(NotLoaded::NoRoom)?;
        let generation = self.next_generation;
        self.next_generation = self.next_generation.checked_add(1).unwrap_or(1);
        if let Err(e) = maps.load_table(slot, generation, &table.rows) {
            tracing::warn!(
                slot,
                rows = table.count,
                "loading an unwind table failed: {e}"
            );
            self.free_slots.push(slot);
            return Err(NotLoaded::NoTable);
        }
        self.slots
            .insert(slot, (generation, u32::try_from(table.count).unwrap_or(0)));
        self.stats.loaded += 1;
        self.stats.tables += 1;
        self.stats.bytes += bytes;
        Ok(Loaded {
            slot,
            generation,
            bytes,
            base: table.base,
            segments: table.segments,
            last_used: self.tick,
            last_used_at: self.now,
        })
    }

    /// Evicts least recently used tables until `bytes` more fit the budget and a slot is
    /// free. Tables used in the current round or within [`MIN_IDLE_NANOS`] stay: `None`
    /// when only they are left.
    fn make_room(&mut self, bytes: usize, maps: &mut dyn UnwindMaps) -> Option<()> {
        while self.stats.bytes + bytes > self.budget_bytes || self.free_slots.is_empty() {
            let victim = self
                .entries
                .iter()
                .filter_map(|(k, e)| match e {
                    Entry::Loaded(t)
                        if t.last_used < self.tick
                            && self.now.saturating_sub(t.last_used_at) >= MIN_IDLE_NANOS =>
                    {
                        Some((t.last_used, k))
                    }
                    _ => None,
                })
                .min_by_key(|(used, _)| *used)
                .map(|(_, k)| k.clone())?;
            if let Some(Entry::Loaded(t)) = self.entries.remove(&victim) {
                if let Err(e) = maps.unload_table(t.slot) {
                    tracing::warn!(slot = t.slot, "unloading an unwind table failed: {e}");
                }
                self.free_slots.push(t.slot);
                self.slots.remove(&t.slot);
                self.stats.tables -= 1;
                self.stats.bytes -= t.bytes;
                self.stats.evicted += 1;
            }
        }
        Some(())
    }
}

enum NotLoaded {
    /// The file has no table this format can hold, or could not be read.
    NoTable,
    /// Only tables in use right now fill the budget.
    NoRoom,
}

/// The bias of a mapping of `t`'s file at `start`, of file `offset`: the executable
/// segment holding that offset says which address it is.
fn bias(t: &Loaded, start: u64, offset: u64) -> Option<u64> {
    let segment = t.segments.iter().find(|s| {
        let page_start = s.offset & !0xfff;
        offset >= page_start && offset < s.offset.saturating_add(s.filesz.max(1))
    })?;
    // The address `start` maps: the segment's vaddr moved by how far into it `offset` is.
    let vaddr_at_start = segment
        .vaddr
        .wrapping_sub(segment.offset)
        .wrapping_add(offset);
    Some(start.wrapping_sub(vaddr_at_start).wrapping_add(t.base))
}
