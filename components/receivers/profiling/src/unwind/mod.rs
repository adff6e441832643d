//! Unwind tables: how to find each frame's caller without frame pointers, built on the
//! host from a file's `.eh_frame` / `.debug_frame`, in a compact form for the BPF stack
//! walker (issue #11; the walker, its maps and the per-file cache are the next step).
//!
//! - [`row`]: the format, one fixed 12-byte row per address range, and [`Arch`];
//! - [`table`]: [`UnwindTable`], the sorted, merged rows of one file, and its lookup;
//! - [`builder`]: [`build`], reading the CFI of a (hostile) ELF file within [`Limits`];
//! - [`x86_64`]: the x86_64 registers and how a CFI row maps to a table row;
//! - [`error`]: the errors, [`UnwindError`];
//! - [`cache`]: [`cache::TableCache`], the tables in BPF, one per file identity, LRU
//!   under a memory budget;
//! - [`manager`]: [`Unwinder`], which gives each sampled process its mappings;
//! - [`maps`]: [`UnwindMaps`], the BPF side as the unwinder sees it;
//! - [`walk`]: the walker's algorithm in user space, for the stack copies of a process's
//!   first samples.

pub mod builder;
pub mod cache;
pub mod error;
pub mod manager;
pub mod maps;
pub mod row;
pub mod table;
pub mod walk;
pub mod x86_64;

#[cfg(test)]
mod runtime_tests;
#[cfg(test)]
mod tests;

// The API the BPF walker's loader will use (next step of #11); tests use it now.
#[allow(unused_imports)]
pub use builder::{BuildStats, Built, Limits, build, build_with_limits};
#[allow(unused_imports)]
pub use error::UnwindError;
pub use manager::{UnwindStatus, Unwinder, UnwinderStats};
pub use maps::UnwindMaps;
#[allow(unused_imports)]
pub use row::{Arch, Cfa, Fp, ROW_SIZE, Ra, Row, Rule};
#[allow(unused_imports)]
pub use table::UnwindTable;
