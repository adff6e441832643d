//! The unwind tables loaded into BPF: one per file identity, built once on a thread of
//! its own (so that the thread draining the ring buffer never waits for a large binary),
//! shared by every process that maps the file, evicted least recently used under a
//! memory budget.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Instant;

use super::builder::{Limits, build_with_limits};
use super::maps::UnwindMaps;
use crate::elf::ElfFile;

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
}

#[derive(Debug, Clone)]
enum Entry {
    Loaded(Loaded),
    /// Being built.
    Building,
    /// No table could be built (no CFI, refused, unreadable). Not tried again: the key
    /// names the same bytes. Its frames use the frame pointer.
    NoTable,
    /// Built, but it did not fit beside the tables in use in round `tick`; built again
    /// in a later round, when they may be older.
    NoRoom {
        tick: u64,
    },
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
}

struct Done {
    key: TableKey,
    table: Option<BuiltTable>,
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
    stats: CacheStats,
    requests: Option<mpsc::Sender<Request>>,
    done: mpsc::Receiver<Done>,
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
fn builder_thread(requests: mpsc::Receiver<Request>, done: mpsc::Sender<Done>, limits: Limits) {
    for Request { key, open } in requests {
        let started = Instant::now();
        // A hostile file must not take the thread down with it.
        let table = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            build_table(&key, open, &limits)
        }))
        .unwrap_or_else(|_| {
            tracing::warn!(
                dev = key.dev,
                inode = key.inode,
                "building an unwind table panicked"
            );
            None
        });
        let seconds = started.elapsed().as_secs_f64();
        if done
            .send(Done {
                key,
                table,
                seconds,
            })
            .is_err()
        {
            return;
        }
    }
}

fn build_table(key: &TableKey, open: Opener, limits: &Limits) -> Option<BuiltTable> {
    let elf = open()?;
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
            return None;
        }
    };
    let table = built.table;
    (!table.is_empty()).then(|| BuiltTable {
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
        let (requests, inbox) = mpsc::channel();
        let (outbox, done) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("unwind-tables".into())
            .spawn(move || builder_thread(inbox, outbox, limits));
        if let Err(e) = &spawned {
            tracing::warn!("no unwind table builder thread ({e}): frame pointers only");
        }
        TableCache {
            entries: HashMap::new(),
            slots: HashMap::new(),
            free_slots: (1..=slots).rev().collect(),
            next_generation: 1,
            budget_bytes,
            tick: 0,
            stats: CacheStats::default(),
            requests: spawned.ok().map(|_| requests),
            done,
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Starts a new round of use: tables touched from now on are the most recent.
    pub fn next_tick(&mut self) {
        self.tick += 1;
    }

    /// The file's table for a mapping at `start` of file `offset`; asks the builder for
    /// it (`open` gives the file) the first time.
    pub fn table_for(&mut self, key: &TableKey, start: u64, offset: u64, open: Opener) -> Lookup {
        match self.entries.get_mut(key) {
            Some(Entry::Loaded(t)) => {
                t.last_used = self.tick;
                return match bias(t, start, offset) {
                    Some(bias) => Lookup::Ready(TableRef {
                        slot: t.slot,
                        generation: t.generation,
                        bias,
                    }),
                    None => Lookup::Absent,
                };
            }
            Some(Entry::Building) => return Lookup::Pending,
            Some(Entry::NoTable) => return Lookup::Absent,
            Some(Entry::NoRoom { tick }) if *tick == self.tick => return Lookup::Absent,
            _ => {}
        }
        let sent = self.requests.as_ref().is_some_and(|requests| {
            requests
                .send(Request {
                    key: key.clone(),
                    open,
                })
                .is_ok()
        });
        if sent {
            self.entries.insert(key.clone(), Entry::Building);
            Lookup::Pending
        } else {
            self.requests = None;
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
            table,
            seconds,
        }) = self.done.try_recv()
        {
            self.stats.build_seconds += seconds;
            tracing::debug!(
                inode = key.inode,
                seconds,
                rows = table.as_ref().map_or(0, |t| t.count),
                "unwind table built"
            );
            let entry = match table {
                None => {
                    self.stats.failed += 1;
                    Entry::NoTable
                }
                Some(table) => match self.load(table, maps) {
                    Ok(loaded) => Entry::Loaded(loaded),
                    Err(NotLoaded::NoRoom) => Entry::NoRoom { tick: self.tick },
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

    /// Whether a table is still being built.
    pub fn is_building(&self, key: &TableKey) -> bool {
        matches!(self.entries.get(key), Some(Entry::Building))
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
        })
    }

    /// Evicts least recently used tables until `bytes` more fit the budget and a slot is
    /// free. Tables used in the current round stay: `None` when only they are left.
    fn make_room(&mut self, bytes: usize, maps: &mut dyn UnwindMaps) -> Option<()> {
        while self.stats.bytes + bytes > self.budget_bytes || self.free_slots.is_empty() {
            let victim = self
                .entries
                .iter()
                .filter_map(|(k, e)| match e {
                    Entry::Loaded(t) if t.last_used < self.tick => Some((t.last_used, k)),
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
