//! Time and memory to build unwind tables (`bench/unwind.sh`).
//!
//! `unwind-table [FILE...]`: each file is measured in a child process of its own (so that
//! peak RSS is that file's): the process's peak RSS (`VmHWM`) after one build is compared
//! with its RSS before it, then the build (open, read `.eh_frame` / `.debug_frame`,
//! evaluate, sort, merge) is timed over five more runs, page cache warm.

use std::fs::File;
use std::process::Command;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/elf.rs"]
mod elf;
// Only the builder's files (the rest of unwind/ talks to BPF and /proc), at the crate
// root: their `super::` is the crate.
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/builder.rs"]
mod builder;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/row.rs"]
mod row;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/table.rs"]
mod table;
#[allow(dead_code)]
#[path = "../../components/receivers/profiling/src/unwind/x86_64.rs"]
mod x86_64;

mod unwind {
    pub use crate::builder::{Limits, build};
}

const RUNS: usize = 5;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn one(path: &str) -> Result<(), String> {
    let rss_before = status_kib("VmRSS:");
    let mut times: Vec<Duration> = Vec::new();
    let mut last = None;
    let mut frames = 0;
    let mut peak = 0;
    for run in 0..=RUNS {
        // The previous run's table is dropped first: one build at a time.
        drop(last.take());
        let started = Instant::now();
        let file = File::open(path).map_err(|e| e.to_string())?;
        let size = file.metadata().map_err(|e| e.to_string())?.len();
        let elf = elf::ElfFile::from_file(file, size).map_err(|e| e.to_string())?;
        let built = unwind::build(&elf).map_err(|e| e.to_string())?;
        if run == 0 {
            peak = status_kib("VmHWM:");
        } else {
            times.push(started.elapsed());
        }
        frames = [".eh_frame", ".debug_frame"]
            .iter()
            .filter_map(|n| elf.section(n))
            .map(|s| s.size)
            .sum::<u64>();
        last = Some((size, built));
    }
    let Some((size, built)) = last else {
        return Err("no run".into());
    };
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{path}\n  file {:.1} MiB, CFI {:.2} MiB; {} FDEs ({} skipped), {} CFI rows -> {} table rows, {:.2} MiB encoded ({} unsupported rows)\n  build: {:.1} ms median, {:.1} ms min of {RUNS}; {} steps of {}\n  peak RSS {:.1} MiB, {:.1} MiB over the {:.1} MiB before building",
        mib(size),
        mib(frames),
        built.stats.fdes,
        built.stats.fdes_skipped,
        built.stats.rows_evaluated,
        built.table.len(),
        mib(built.table.encoded_size() as u64),
        built.stats.rows_unsupported,
        ms(times[RUNS / 2]),
        ms(times[0]),
        built.stats.steps,
        unwind::Limits::default().max_steps,
        peak as f64 / 1024.0,
        peak.saturating_sub(rss_before) as f64 / 1024.0,
        rss_before as f64 / 1024.0,
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice()
        && flag == "--one"
    {
        if let Err(e) = one(path) {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("unwind-table: no path to itself");
        std::process::exit(2);
    };
    let mut failed = false;
    for path in &args {
        let ok = Command::new(&exe)
            .arg("--one")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        failed |= !ok;
    }
    if failed {
        std::process::exit(1);
    }
}
