//! The unwind tables loaded into BPF: one per file identity, built once, shared by every
//! process that maps the file, evicted least recently used under a memory budget.

use std::collections::HashMap;
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
    /// No table could be built (no CFI, refused, unreadable). Not tried again: the key
    /// names the same bytes. Its frames use the frame pointer.
    NoTable,
    /// The table did not fit beside the tables in use in round `tick`; tried again in a
    /// later round, when they may be older.
    NoRoom {
        tick: u64,
    },
}

enum NotLoaded {
    /// The file has no table this format can hold, or could not be read.
    NoTable,
    /// Only tables in use right now fill the budget.
    NoRoom,
}

/// Where a mapping's frames find their table.
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
    /// Time spent building and loading tables, since start.
    pub build_seconds: f64,
}

/// The tables, and the room they may take.
#[derive(Debug)]
pub struct TableCache {
    entries: HashMap<TableKey, Entry>,
    /// Each loaded slot's generation and rows.
    slots: HashMap<u32, (u32, u32)>,
    free_slots: Vec<u32>,
    next_generation: u32,
    budget_bytes: usize,
    limits: Limits,
    tick: u64,
    stats: CacheStats,
}

impl TableCache {
    /// A cache whose tables take at most `budget_bytes` (rows, as BPF holds them), in at
    /// most `slots` tables (slot numbers 1..=slots).
    pub fn new(budget_bytes: usize, slots: u32) -> Self {
        TableCache {
            entries: HashMap::new(),
            slots: HashMap::new(),
            free_slots: (1..=slots).rev().collect(),
            next_generation: 1,
            budget_bytes,
            limits: Limits {
                // A table never takes more than the whole budget.
                max_rows: Limits::default()
                    .max_rows
                    .min(budget_bytes / super::row::ROW_SIZE),
                ..Limits::default()
            },
            tick: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Starts a new round of use: tables touched from now on are the most recent.
    pub fn next_tick(&mut self) {
        self.tick += 1;
    }

    /// The file's table for a mapping at `start` of file `offset`, built and loaded first
    /// if needed (`open` gives the file). `None`: the mapping's frames use the frame
    /// pointer.
    pub fn table_for(
        &mut self,
        key: &TableKey,
        start: u64,
        offset: u64,
        open: &mut dyn FnMut() -> Option<ElfFile>,
        maps: &mut dyn UnwindMaps,
    ) -> Option<TableRef> {
        match self.entries.get_mut(key) {
            Some(Entry::Loaded(t)) => {
                t.last_used = self.tick;
                return bias(t, start, offset).map(|bias| TableRef {
                    slot: t.slot,
                    generation: t.generation,
                    bias,
                });
            }
            Some(Entry::NoTable) => return None,
            Some(Entry::NoRoom { tick }) if *tick == self.tick => return None,
            _ => {}
        }
        let entry = match self.load(key, open, maps) {
            Ok(t) => Entry::Loaded(t),
            Err(NotLoaded::NoRoom) => Entry::NoRoom { tick: self.tick },
            Err(NotLoaded::NoTable) => {
                self.stats.failed += 1;
                Entry::NoTable
            }
        };
        self.entries.insert(key.clone(), entry);
        match self.entries.get(key) {
            Some(Entry::Loaded(t)) => bias(t, start, offset).map(|bias| TableRef {
                slot: t.slot,
                generation: t.generation,
                bias,
            }),
            _ => None,
        }
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

    fn load(
        &mut self,
        key: &TableKey,
        open: &mut dyn FnMut() -> Option<ElfFile>,
        maps: &mut dyn UnwindMaps,
    ) -> Result<Loaded, NotLoaded> {
        let started = Instant::now();
        let result = self.build_and_load(key, open, maps);
        self.stats.build_seconds += started.elapsed().as_secs_f64();
        result
    }

    fn build_and_load(
        &mut self,
        key: &TableKey,
        open: &mut dyn FnMut() -> Option<ElfFile>,
        maps: &mut dyn UnwindMaps,
    ) -> Result<Loaded, NotLoaded> {
        let elf = open().ok_or(NotLoaded::NoTable)?;
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
        let built = match build_with_limits(&elf, &self.limits) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(dev = key.dev, inode = key.inode, "no unwind table: {e}");
                return Err(NotLoaded::NoTable);
            }
        };
        drop(elf);
        let table = built.table;
        let bytes = table.encoded_size();
        if table.is_empty() || bytes > self.budget_bytes {
            return Err(NotLoaded::NoTable);
        }
        self.make_room(bytes, maps).ok_or(NotLoaded::NoRoom)?;
        let slot = self.free_slots.pop().ok_or(NotLoaded::NoRoom)?;
        let generation = self.next_generation;
        self.next_generation = self.next_generation.checked_add(1).unwrap_or(1);
        if let Err(e) = maps.load_table(slot, generation, &table.encode()) {
            tracing::warn!(
                slot,
                rows = table.len(),
                "loading an unwind table failed: {e}"
            );
            self.free_slots.push(slot);
            return Err(NotLoaded::NoTable);
        }
        self.slots
            .insert(slot, (generation, u32::try_from(table.len()).unwrap_or(0)));
        self.stats.loaded += 1;
        self.stats.tables += 1;
        self.stats.bytes += bytes;
        Ok(Loaded {
            slot,
            generation,
            bytes,
            base: table.base,
            segments,
            last_used: self.tick,
        })
    }

    /// Evicts least recently used tables until `bytes` more fit the budget and a slot is
    /// free. Tables used in the current round stay (they belong to the process being
    /// loaded): `None` when only they are left.
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
