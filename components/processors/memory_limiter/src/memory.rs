//! Where memory use comes from: the allocator's heap in use where the binary reports it,
//! else the process's resident set size from `/proc`, or any other [`MemorySource`]
//! (tests simulate one).

use std::io;

/// Reports the memory the collector uses now, in bytes.
pub trait MemorySource: Send + Sync + 'static {
    fn used_bytes(&self) -> Result<u64, MemoryError>;
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{path} has no readable {field} line")]
    Missing {
        path: &'static str,
        field: &'static str,
    },
}

const STATUS: &str = "/proc/self/status";
const STATM: &str = "/proc/self/statm";
const MEMINFO: &str = "/proc/meminfo";

/// The page size assumed for `/proc/self/statm` when `/proc/self/status` cannot be read
/// (it names its sizes in kB, so it needs none).
const ASSUMED_PAGE_SIZE: u64 = 4096;

fn read(path: &'static str) -> Result<String, MemoryError> {
    std::fs::read_to_string(path).map_err(|source| MemoryError::Read { path, source })
}

/// The value of a `Field:   1234 kB` line, in bytes.
fn kib_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix(field))?;
    let rest = line.strip_prefix(':')?.trim();
    let kib: u64 = rest
        .strip_suffix("kB")
        .unwrap_or(rest)
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The process's resident set size: `VmRSS` of `/proc/self/status`, or, failing that,
/// the resident pages of `/proc/self/statm` times 4096.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessRss;

impl MemorySource for ProcessRss {
    fn used_bytes(&self) -> Result<u64, MemoryError> {
        let status = read(STATUS).and_then(|text| {
            kib_field(&text, "VmRSS").ok_or(MemoryError::Missing {
                path: STATUS,
                field: "VmRSS",
            })
        });
        status.or_else(|first| {
            let text = read(STATM).map_err(|_| first)?;
            text.split_whitespace()
                .nth(1)
                .and_then(|pages| pages.parse::<u64>().ok())
                .and_then(|pages| pages.checked_mul(ASSUMED_PAGE_SIZE))
                .ok_or(MemoryError::Missing {
                    path: STATM,
                    field: "resident",
                })
        })
    }
}

/// The heap in use as the allocator reports it (as otelcol judges Go's heap), where the
/// binary registered its allocator; RSS otherwise. RSS stays high after a burst is freed
/// (allocators keep freed pages), so judging it refused good data long after an attack.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeapInUse;

impl HeapInUse {
    /// What is measured, for the log line at start.
    pub fn kind(&self) -> &'static str {
        if profcol_core::telemetry::heap::in_use_bytes().is_some() {
            "heap in use"
        } else {
            "resident set size"
        }
    }
}

impl MemorySource for HeapInUse {
    fn used_bytes(&self) -> Result<u64, MemoryError> {
        match profcol_core::telemetry::heap::in_use_bytes() {
            Some(bytes) => Ok(bytes),
            None => ProcessRss.used_bytes(),
        }
    }
}

/// Total system memory: `MemTotal` of `/proc/meminfo`.
pub fn total_system_memory() -> Result<u64, MemoryError> {
    kib_field(&read(MEMINFO)?, "MemTotal").ok_or(MemoryError::Missing {
        path: MEMINFO,
        field: "MemTotal",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_in_kib() {
        let text = "Name:\tprofcol\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t4\n";
        assert_eq!(kib_field(text, "VmRSS"), Some(1234 * 1024));
        assert_eq!(kib_field(text, "VmSwap"), None);
        assert_eq!(kib_field("VmRSS:\tlots kB\n", "VmRSS"), None);
        assert_eq!(
            kib_field("MemTotal:       16318480 kB\n", "MemTotal"),
            Some(16_318_480 * 1024)
        );
    }

    #[test]
    fn real_proc_values_are_plausible() {
        let used = ProcessRss.used_bytes().expect("/proc/self/status");
        let total = total_system_memory().expect("/proc/meminfo");
        assert!(used > 0);
        assert!(total > used, "total {total} vs used {used}");
        // The statm fallback agrees within a factor (both are RSS).
        let statm = std::fs::read_to_string(STATM).expect("statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("resident pages");
        assert!(pages > 0);
    }

    #[test]
    fn heap_in_use_is_read_from_the_registered_allocator() {
        profcol_core::telemetry::heap::register(|| Some(42 << 20));
        assert_eq!(HeapInUse.used_bytes().expect("registered"), 42 << 20);
        assert_eq!(HeapInUse.kind(), "heap in use");
    }
}
