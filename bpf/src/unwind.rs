//! The user-stack unwinder's maps, as `profiler.bpf.c` lays them out: unwind
//! tables (one inner array map of rows per file, in a slot of `unwind_tables`,
//! with its generation and row count in `table_infos`), each process's
//! executable mappings (`process_mappings`) and the per-CPU counters of why
//! walks ended (`unwind_stats`). What goes into the tables and mappings is
//! decided by the caller (profcol's `profiling` receiver); this module only
//! writes them, in an order that never lets a walk read half of an update.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, Object};

use crate::BpfError;
use crate::loader::{find_map, sum_per_cpu};
use crate::unwind_types::{UnwindEnd, UnwindMapping};

/// Table slots; slot 0 means "no table" and is never used.
pub const MAX_UNWIND_TABLES: u32 = 4096;
/// Mappings one process can have with unwind information; more are left out
/// (their frames fall back to the frame pointer).
pub const MAX_PROCESS_MAPPINGS: usize = 256;
/// Rows one table can hold (the walker's binary search takes at most 23 steps).
pub const MAX_TABLE_ROWS: usize = 1 << 22;
/// Bytes per row (`struct unwind_row`).
pub const UNWIND_ROW_SIZE: usize = 12;
/// Bytes the kernel keeps per process entry (`struct process_mappings`).
pub const PROCESS_MAPPINGS_BYTES: usize = 8 + MAX_PROCESS_MAPPINGS * 32;

const MAP_TABLES: &str = "unwind_tables";
const MAP_TABLE_INFOS: &str = "table_infos";
const MAP_PROCESS_MAPPINGS: &str = "process_mappings";
const MAP_STATS: &str = "unwind_stats";
/// `BPF_F_INNER_MAP`: inner maps of different sizes in one outer map.
const BPF_F_INNER_MAP: u32 = 1 << 12;
/// Rows written per `BPF_MAP_UPDATE_BATCH` call.
const BATCH_ROWS: usize = 1 << 16;

/// The walker's counters, summed over CPUs, since the profiler started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Walks ended, per [`UnwindEnd`] in [`UnwindEnd::ALL`] order.
    pub ends: [u64; UnwindEnd::ALL.len()],
    /// Callers found with a table row.
    pub frames_from_tables: u64,
    /// Callers found with the frame pointer.
    pub frames_from_frame_pointers: u64,
}

impl UnwindStats {
    /// Walks that ended for `end`.
    pub fn ended(&self, end: UnwindEnd) -> u64 {
        let i = UnwindEnd::ALL.iter().position(|&e| e == end).unwrap_or(0);
        self.ends[i]
    }
}

fn map_error(map: &'static str) -> impl Fn(libbpf_rs::Error) -> BpfError {
    move |e| BpfError::Map {
        map,
        message: format!("{e:#}"),
    }
}

fn check_slot(slot: u32) -> Result<(), BpfError> {
    if slot == 0 || slot >= MAX_UNWIND_TABLES {
        return Err(BpfError::Config(format!(
            "unwind table slot {slot} is outside 1..{MAX_UNWIND_TABLES}"
        )));
    }
    Ok(())
}

fn write_info(object: &Object, slot: u32, generation: u32, rows: u32) -> Result<(), BpfError> {
    let mut value = [0u8; 8];
    value[..4].copy_from_slice(&generation.to_ne_bytes());
    value[4..].copy_from_slice(&rows.to_ne_bytes());
    find_map(object, MAP_TABLE_INFOS)?
        .update(&slot.to_ne_bytes(), &value, MapFlags::ANY)
        .map_err(map_error(MAP_TABLE_INFOS))
}

/// Loads `rows` (encoded, [`UNWIND_ROW_SIZE`] bytes each) into `slot` under
/// `generation` (never 0). The slot reads as empty while it changes, so a walk
/// sees either no table or the whole new one.
pub(crate) fn load_table(
    object: &Object,
    slot: u32,
    generation: u32,
    rows: &[u8],
) -> Result<MapHandle, BpfError> {
    check_slot(slot)?;
    let count = rows.len() / UNWIND_ROW_SIZE;
    if generation == 0
        || count == 0
        || count > MAX_TABLE_ROWS
        || !rows.len().is_multiple_of(UNWIND_ROW_SIZE)
    {
        return Err(BpfError::Config(format!(
            "unwind table of {} bytes (generation {generation}): not 1..={MAX_TABLE_ROWS} rows of {UNWIND_ROW_SIZE} bytes",
            rows.len()
        )));
    }
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: BPF_F_INNER_MAP,
        ..Default::default()
    };
    let inner = MapHandle::create(
        MapType::Array,
        Some("unwind_rows"),
        4,
        UNWIND_ROW_SIZE as u32,
        count as u32,
        &opts,
    )
    .map_err(map_error(MAP_TABLES))?;
    let keys: Vec<u8> = (0..count.min(BATCH_ROWS) as u32)
        .flat_map(u32::to_ne_bytes)
        .collect();
    for (i, chunk) in rows.chunks(BATCH_ROWS * UNWIND_ROW_SIZE).enumerate() {
        let n = chunk.len() / UNWIND_ROW_SIZE;
        let first = (i * BATCH_ROWS) as u32;
        let keys: Vec<u8> = if first == 0 {
            keys[..n * 4].to_vec()
        } else {
            (first..first + n as u32)
                .flat_map(u32::to_ne_bytes)
                .collect()
        };
        inner
            .update_batch(&keys, chunk, n as u32, MapFlags::ANY, MapFlags::ANY)
            .map_err(map_error(MAP_TABLES))?;
    }
    write_info(object, slot, 0, 0)?;
    let fd = inner.as_fd().as_raw_fd() as u32;
    find_map(object, MAP_TABLES)?
        .update(&slot.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
        .map_err(map_error(MAP_TABLES))?;
    write_info(object, slot, generation, count as u32)?;
    // Kept to read rows back (unwinding stack copies in user space).
    Ok(inner)
}

/// Row `index` of a table, as loaded.
pub(crate) fn read_row(table: &MapHandle, index: u32) -> Option<[u8; UNWIND_ROW_SIZE]> {
    let value = table
        .lookup(&index.to_ne_bytes(), MapFlags::ANY)
        .ok()
        .flatten()?;
    value.try_into().ok()
}

/// Empties `slot`: walks that meet a mapping pointing at it use the frame
/// pointer (and flag the sample, so that user space loads the table again).
pub(crate) fn unload_table(object: &Object, slot: u32) -> Result<(), BpfError> {
    check_slot(slot)?;
    write_info(object, slot, 0, 0)?;
    match find_map(object, MAP_TABLES)?.delete(&slot.to_ne_bytes()) {
        Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => Err(map_error(MAP_TABLES)(e)),
        _ => Ok(()),
    }
}

/// Replaces the mappings of process `pid` (at most [`MAX_PROCESS_MAPPINGS`],
/// sorted by start and not overlapping, else an error).
pub(crate) fn set_process(
    object: &Object,
    pid: u32,
    mappings: &[UnwindMapping],
) -> Result<(), BpfError> {
    if mappings.len() > MAX_PROCESS_MAPPINGS {
        return Err(BpfError::Config(format!(
            "{} mappings for pid {pid}, at most {MAX_PROCESS_MAPPINGS}",
            mappings.len()
        )));
    }
    if mappings
        .windows(2)
        .any(|w| w[0].end > w[1].start || w[0].start >= w[0].end)
        || mappings.last().is_some_and(|m| m.start >= m.end)
    {
        return Err(BpfError::Config(format!(
            "mappings for pid {pid} are not sorted, non-empty and disjoint"
        )));
    }
    let mut value = vec![0u8; PROCESS_MAPPINGS_BYTES];
    value[..4].copy_from_slice(&(mappings.len() as u32).to_ne_bytes());
    for (i, m) in mappings.iter().enumerate() {
        let at = 8 + i * 32;
        value[at..at + 8].copy_from_slice(&m.start.to_ne_bytes());
        value[at + 8..at + 16].copy_from_slice(&m.end.to_ne_bytes());
        value[at + 16..at + 24].copy_from_slice(&m.bias.to_ne_bytes());
        value[at + 24..at + 28].copy_from_slice(&m.table.to_ne_bytes());
        value[at + 28..at + 32].copy_from_slice(&m.generation.to_ne_bytes());
    }
    find_map(object, MAP_PROCESS_MAPPINGS)?
        .update(&pid.to_ne_bytes(), &value, MapFlags::ANY)
        .map_err(map_error(MAP_PROCESS_MAPPINGS))
}

/// Forgets process `pid` (its samples go back to the kernel's frame-pointer walk).
pub(crate) fn remove_process(object: &Object, pid: u32) -> Result<(), BpfError> {
    match find_map(object, MAP_PROCESS_MAPPINGS)?.delete(&pid.to_ne_bytes()) {
        Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => {
            Err(map_error(MAP_PROCESS_MAPPINGS)(e))
        }
        _ => Ok(()),
    }
}

/// The counters, summed over CPUs.
pub(crate) fn stats(object: &Object) -> UnwindStats {
    let mut out = UnwindStats::default();
    let Ok(map) = find_map(object, MAP_STATS) else {
        return out;
    };
    let read = |slot: u32| sum_per_cpu(&map, slot);
    for (i, slot) in out.ends.iter_mut().enumerate() {
        *slot = read(i as u32);
    }
    // After the ends: `STAT_FRAMES_TABLE` and `STAT_FRAMES_FP`.
    let after_ends = UnwindEnd::ALL.len() as u32;
    out.frames_from_tables = read(after_ends);
    out.frames_from_frame_pointers = read(after_ends + 1);
    out
}
