//! What the unwinder writes into BPF: the sampler implements it ([`crate::bpf_source`]),
//! tests record it.

pub use profcol_bpf::{StackCopy, UnwindEnd, UnwindMapping};

/// The walker's maps, as the sampler exposes them. Errors are messages: a failed write
/// leaves that process or table to the frame pointer, it stops nothing.
pub trait UnwindMaps {
    /// Loads encoded rows into `slot` under `generation`.
    fn load_table(&mut self, slot: u32, generation: u32, rows: &[u8]) -> Result<(), String>;
    /// Empties `slot`.
    fn unload_table(&mut self, slot: u32) -> Result<(), String>;
    /// Replaces the mappings of `pid` (sorted, disjoint).
    fn set_process(&mut self, pid: u32, mappings: &[UnwindMapping]) -> Result<(), String>;
    /// Forgets `pid`.
    fn remove_process(&mut self, pid: u32) -> Result<(), String>;
    /// Row `index` of the table in `slot`, encoded, as loaded.
    fn read_row(&mut self, slot: u32, index: u32) -> Option<[u8; super::row::ROW_SIZE]>;
    /// Where `pid`'s CPython keeps its frames (`Some`), or that it runs none.
    fn set_python(
        &mut self,
        _pid: u32,
        _python: Option<&profcol_bpf::PythonProcess>,
    ) -> Result<(), String> {
        Ok(())
    }
}
