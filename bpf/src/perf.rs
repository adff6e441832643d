//! perf_event_open for the sampling clock: one software cpu-clock event per
//! online CPU, in frequency mode, that the BPF program is attached to.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_ATTR_SIZE_VER5`: every kernel since 4.1 takes it.
const PERF_ATTR_SIZE_VER5: u32 = 112;

// perf_event_attr bit-field flags (include/uapi/linux/perf_event.h).
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_FREQ: u64 = 1 << 10;

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5`.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    /// `sample_period`, or `sample_freq` when `ATTR_FREQ` is set.
    sample_period_or_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events_or_watermark: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER5 as usize);

/// Opens a cpu-clock sampling event on `cpu` for all processes, `freq_hz`
/// samples per second, created disabled (libbpf enables it once the program
/// is attached).
pub(crate) fn open_cpu_clock(cpu: u32, freq_hz: u64) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: PERF_ATTR_SIZE_VER5,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period_or_freq: freq_hz,
        flags: ATTR_DISABLED | ATTR_FREQ,
        ..PerfEventAttr::default()
    };
    let cpu =
        libc::c_int::try_from(cpu).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: perf_event_open(2) reads `attr.size` bytes from a valid, initialised
    // attr that outlives the call; pid -1 with a cpu means "every task on that
    // cpu"; no group fd.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1 as libc::pid_t,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Parses a kernel cpu list such as `0-3,5,7-8` (`/sys/devices/system/cpu/online`).
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The online CPUs.
pub(crate) fn online_cpus() -> io::Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(path)?;
    parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot parse {path}: {text:?}"),
        )
    })
}

/// `kernel.perf_event_max_sample_rate`, the highest frequency perf_event_open accepts.
pub(crate) fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-2,4,6-7"), Some(vec![0, 1, 2, 4, 6, 7]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn online_cpus_match_the_machine() {
        let cpus = online_cpus().expect("online cpus");
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        assert!(cpus.len() >= n, "{cpus:?} vs {n}");
    }
}
