//! pprof ↔ OTLP translation that keeps the meaning of a profile both ways, read from and
//! written to pprof's protobuf directly (no per-sample allocation either way).
//!
//! pprof → OTLP: one OTLP `Profile` per pprof sample type, the default sample type first;
//! every sample, in order, in each of them; labels become sample attributes (several values
//! for one key become one array attribute); build ids, mapping flags, folded locations,
//! comments, drop/keep frames and doc url become the semantic-convention attributes;
//! inlined lines keep their order (callee first, caller last); a canonical `trace_id` and
//! `span_id` label pair becomes the sample's link, and links go back out as those labels.

mod links;
mod to_otlp;
mod to_pprof;

#[cfg(test)]
mod tests;

pub use links::{SPAN_ID_LABEL, TRACE_ID_LABEL};
pub use to_otlp::{ToOtlpOptions, pprof_into, pprof_to_batch, pprof_to_batch_with};
pub use to_pprof::{PprofOutput, ToPprofOptions, batch_to_pprof, pprof_groups, pprof_output_limit};

use std::collections::HashMap;

use crate::wire::WireError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PprofError {
    #[error("string_table[0] must be the empty string")]
    MissingEmptyString,
    #[error("{field}: string index {index} is out of range (string_table has {len} entries)")]
    StringOutOfRange {
        field: String,
        index: i64,
        len: usize,
    },
    #[error("the profile has no sample types")]
    NoSampleTypes,
    #[error("sample[{sample}] has {got} values but the profile has {want} sample types")]
    ValueCount {
        sample: usize,
        got: usize,
        want: usize,
    },
    #[error("{table} id {id} is referenced by {by} but not defined")]
    UnknownId {
        table: &'static str,
        id: u64,
        by: String,
    },
    #[error("{table} id {id} is defined more than once")]
    DuplicateId { table: &'static str, id: u64 },
    #[error("{table}[{position}] has id 0, which is reserved")]
    ZeroId {
        table: &'static str,
        position: usize,
    },
    #[error("mapping id {id}: memory_start {start:#x} lies above memory_limit {limit:#x}")]
    BadMappingRange { id: u64, start: u64, limit: u64 },
    #[error("sample[{sample}] has {count} {what}; at most {max} are accepted")]
    TooMany {
        sample: usize,
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error(
        "{field}: string copies would exceed {total} bytes (four times the string table plus 1 MiB)"
    )]
    CopiesTooLarge { field: String, total: usize },
    #[error(
        "the pprof of this batch would take about {estimate} bytes, over the limit of {limit} (64 times the batch's size, at least 256 MiB): its samples repeat deep stacks or many labels"
    )]
    OutputTooLarge { estimate: usize, limit: usize },
    #[error("{field}: not a valid protobuf message: {error}")]
    Malformed { field: String, error: WireError },
    #[error("the dictionary outgrew 4 GiB")]
    TooLarge,
}

pub(crate) fn malformed(field: impl FnOnce() -> String) -> impl FnOnce(WireError) -> PprofError {
    move |error| PprofError::Malformed {
        field: field(),
        error,
    }
}

/// Where pprof ids point after translation. Ids are usually 1..n, so a vector serves;
/// sparse ids (addresses, say) fall back to a map.
pub(crate) enum IdMap {
    Dense(Vec<i32>),
    Sparse(HashMap<u64, i32>),
}

impl IdMap {
    /// A map for `len` ids of at most `max`.
    pub(crate) fn with_capacity(len: usize, max: u64) -> Self {
        let dense_ok =
            usize::try_from(max).is_ok_and(|m| m <= len.saturating_mul(4).saturating_add(64));
        if dense_ok {
            IdMap::Dense(vec![-1; usize::try_from(max).unwrap_or(0) + 1])
        } else {
            IdMap::Sparse(HashMap::with_capacity(len))
        }
    }

    /// Records `id` → `index`; refuses id 0 and an id seen before.
    pub(crate) fn insert(
        &mut self,
        table: &'static str,
        position: usize,
        id: u64,
        index: i32,
    ) -> Result<(), PprofError> {
        if id == 0 {
            return Err(PprofError::ZeroId { table, position });
        }
        let fresh = match self {
            IdMap::Dense(v) => match usize::try_from(id).ok().and_then(|i| v.get_mut(i)) {
                Some(slot) => {
                    let fresh = *slot == -1;
                    *slot = index;
                    fresh
                }
                None => false,
            },
            IdMap::Sparse(m) => m.insert(id, index).is_none(),
        };
        if fresh {
            Ok(())
        } else {
            Err(PprofError::DuplicateId { table, id })
        }
    }

    pub(crate) fn get(&self, id: u64) -> Option<i32> {
        match self {
            IdMap::Dense(v) => usize::try_from(id)
                .ok()
                .and_then(|i| v.get(i))
                .copied()
                .filter(|&x| x >= 0),
            IdMap::Sparse(m) => m.get(&id).copied(),
        }
    }
}
