//! CPU profiles: pprof-rs samples every thread's stack on SIGPROF (`setitimer`, CPU time of
//! the whole process, 100 Hz as Go's runtime does) and keeps counts per stack; this module
//! turns its raw report into a pprof `Profile` that matches Go's CPU profiles (`samples`
//! count and `cpu` nanoseconds, period 10 ms) with a `thread` label.
//!
//! The profiler is one per process, so so is the right to run it: a [`CpuSlot`].

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use profcol_proto::pprof as pp;

use crate::encode::{ProfileBuilder, own_regions};

/// Samples per second of CPU time, as Go's `runtime/pprof`.
pub const FREQUENCY: i32 = 100;

/// Libraries whose frames pprof-rs does not try to unwind from (their unwind tables are
/// not always complete, and a bad unwind inside a signal handler can crash).
const BLOCKLIST: &[&str] = &["libc", "libgcc", "pthread", "vdso"];

#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error(
        "a CPU profile is already being taken ({0}); profcol takes one at a time, try again when it ends"
    )]
    Busy(&'static str),
    #[error("cannot start the CPU profiler: {0}")]
    Start(String),
    #[error("cannot read the CPU profile: {0}")]
    Report(String),
}

/// Who holds the process's CPU profiler, if anyone.
static HOLDER: Mutex<Option<&'static str>> = Mutex::new(None);

/// The right to run the CPU profiler; released when dropped.
#[derive(Debug)]
pub struct CpuSlot(());

impl CpuSlot {
    /// Claims the profiler for `holder` (named in the refusal another claimant gets).
    pub fn claim(holder: &'static str) -> Result<CpuSlot, CpuError> {
        let mut h = HOLDER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *h {
            Some(other) => Err(CpuError::Busy(other)),
            None => {
                *h = Some(holder);
                Ok(CpuSlot(()))
            }
        }
    }
}

impl Drop for CpuSlot {
    fn drop(&mut self) {
        *HOLDER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// A CPU profile being recorded; dropping it stops the profiler.
pub struct Recording {
    guard: pprof::ProfilerGuard<'static>,
    _slot: CpuSlot,
}

impl Recording {
    /// Starts sampling. Blocking: the first start loads pprof-rs's state (a temporary file
    /// for its overflow buffer) and the unwinder's.
    pub fn start(slot: CpuSlot) -> Result<Recording, CpuError> {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY)
            .blocklist(BLOCKLIST)
            .build()
            .map_err(|e| CpuError::Start(e.to_string()))?;
        // pprof-rs resolves one backtrace as it starts (to set up the unwinder before the
        // signal handler needs it), which loads the executable's DWARF line tables into
        // the backtrace crate's cache: over 100 MiB of heap for profcol. Sampling does not
        // need them, so they are given back at once.
        backtrace::clear_symbol_cache();
        Ok(Recording { guard, _slot: slot })
    }

    /// Stops sampling and writes what was recorded. Blocking: addresses are symbolized here.
    pub fn finish(self) -> Result<pp::Profile, CpuError> {
        let report = self
            .guard
            .report()
            .build_unresolved()
            .map_err(|e| CpuError::Report(e.to_string()))?;
        drop(self.guard);
        let timing = &report.timing;
        let stacks = report.data.iter().map(|(frames, count)| {
            let len = frames.thread_name_length.min(frames.thread_name.len());
            let thread =
                String::from_utf8_lossy(frames.thread_name.get(..len).unwrap_or(&[])).into_owned();
            RawStack {
                ips: frames
                    .frames
                    .iter()
                    .map(|f| f.ip() as usize as u64)
                    .collect(),
                thread,
                count: i64::try_from(*count).unwrap_or(0),
            }
        });
        Ok(encode(
            stacks,
            timing.frequency,
            timing.start_time,
            timing.duration,
        ))
    }
}

/// One stack as the signal handler saw it: instruction pointers from the handler's own
/// frame outwards.
pub(crate) struct RawStack {
    pub ips: Vec<u64>,
    pub thread: String,
    pub count: i64,
}

/// Frames of the sampler itself: the unwinder, pprof-rs and its signal handler.
fn is_sampler_frame(name: &str) -> bool {
    name.contains("perf_signal_handler")
        || name.starts_with("backtrace::")
        || name.starts_with("<backtrace::")
        || name.starts_with("pprof::")
        || name.starts_with("<pprof::")
}

/// The kernel's signal return trampoline (glibc's has no symbol in a stripped libc).
fn is_trampoline(names: &[crate::encode::Symbol]) -> bool {
    names.is_empty()
        || names
            .iter()
            .any(|s| s.name == "__restore_rt" || s.name == "__kernel_rt_sigreturn")
}

/// Where the interrupted code starts in `ips`: past the sampler's own frames and the
/// signal trampoline under them, if found among the first few frames.
fn first_interrupted(b: &mut ProfileBuilder, ips: &[u64]) -> usize {
    let mut start = 0;
    for (i, &ip) in ips.iter().enumerate().take(12) {
        if b.symbols(ip, true)
            .iter()
            .any(|s| is_sampler_frame(&s.name))
        {
            start = i + 1;
        }
    }
    if start > 0
        && let Some(&ip) = ips.get(start)
        && is_trampoline(b.symbols(ip, true))
    {
        start += 1;
    }
    start
}

pub(crate) fn encode(
    stacks: impl Iterator<Item = RawStack>,
    frequency: i32,
    start: SystemTime,
    duration: Duration,
) -> pp::Profile {
    let period = 1_000_000_000 / i64::from(frequency.max(1));
    let mut b = ProfileBuilder::new(
        &[("samples", "count"), ("cpu", "nanoseconds")],
        ("cpu", "nanoseconds"),
        period,
        own_regions(),
    );
    let since_epoch = start
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    b.set_times(
        i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX),
        i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX),
    );
    for stack in stacks {
        if stack.count <= 0 {
            continue;
        }
        let from = first_interrupted(&mut b, &stack.ips);
        let Some(ips) = stack.ips.get(from..).filter(|ips| !ips.is_empty()) else {
            continue;
        };
        // The first frame is where the signal interrupted; the rest are return addresses.
        let locations = ips
            .iter()
            .enumerate()
            .map(|(i, &ip)| b.location(ip, i > 0))
            .collect();
        b.sample(
            locations,
            vec![stack.count, stack.count.saturating_mul(period)],
            &[("thread", &stack.thread)],
        );
    }
    b.finish()
}
