//! Another process's memory, as the profiler reads it: the CPython walker's code
//! objects, the SDK's process context. Reads that fail are answers, not errors: the
//! process may be gone, or the page not there.

use std::os::unix::fs::FileExt;

/// Another process's memory, read at an address.
pub trait Memory {
    /// Fills `buf` from `addr`; false when any of it cannot be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// `/proc/<pid>/mem`, opened once.
pub struct ProcessMemory(std::fs::File);

impl ProcessMemory {
    /// `path` is the process's `mem` file (`/proc/<pid>/mem`).
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        std::fs::File::open(path).map(ProcessMemory)
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.read_exact_at(buf, addr).is_ok()
    }
}
