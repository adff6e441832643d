//! Off-CPU profiling end to end, as root: a program waits in known places for known
//! times (a pipe read, a mutex another thread holds, nanosleep) while the built profcol
//! records its switches off the CPU; what it writes is checked against what it waited.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use profcol_integration::collector::{Collector, eventually, free_port, profiling_config};
use profcol_integration::otlp_json::{Resolved, read_samples};
use profcol_integration::{build_native, root, scratch};

fn build_blocker(dir: &Path) -> PathBuf {
    // Optimized without frame pointers: the waits are found by the table-driven unwinder.
    build_native(dir, "blocker", "blocker", &["-O2", "-pthread"])
}

fn start(dir: &Path, threshold: &str) -> (Collector, PathBuf) {
    let (health, metrics) = (free_port(), free_port());
    let out = dir.join("profiles.jsonl");
    let receiver = format!(
        "    off_cpu_threshold: {threshold}\n    include:\n      executable_names: [\"^blocker$\"]\n"
    );
    let config = profiling_config(19, &receiver, "", &out, health, metrics);
    (
        Collector::start(dir, "profcol", &config, health, metrics),
        out,
    )
}

/// Runs `blocker ARGS` (a waiting kind): once profcol has walked its warm-up wait to
/// `main`, so that it knows the process and has its unwind tables, the measured waits
/// start. Its pid and the numbers it printed.
fn run(blocker: &Path, out: &Path, args: &[&str]) -> (u32, Vec<u64>) {
    let mut child = Command::new(blocker)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("blocker");
    let pid = child.id();
    let known = eventually(Duration::from_secs(20), || {
        off_cpu_of(out, pid).iter().any(|s| {
            let at = |name: &str| s.frames.iter().position(|f| f == name);
            matches!((at("blocker_warm_up"), at("main")), (Some(w), Some(m)) if w < m)
        })
    });
    assert!(
        known,
        "profcol never walked blocker's warm-up wait (pid {pid}); its off-CPU samples:\n{}",
        describe(&off_cpu_of(out, pid))
    );
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, b"go\n").expect("start blocker");
    }
    finish(child, args)
}

/// Runs `blocker spin SECONDS`: its pid, wall and CPU nanoseconds.
fn run_spin(blocker: &Path, seconds: &str) -> (u32, Vec<u64>) {
    let child = Command::new(blocker)
        .args(["spin", seconds])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("blocker");
    finish(child, &["spin", seconds])
}

fn finish(child: std::process::Child, args: &[&str]) -> (u32, Vec<u64>) {
    let pid = child.id();
    let output = child.wait_with_output().expect("blocker ran");
    assert!(output.status.success(), "blocker {args:?}");
    let numbers = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    (pid, numbers)
}

fn off_cpu_of(out: &Path, pid: u32) -> Vec<Resolved> {
    read_samples(out)
        .into_iter()
        .filter(|s| s.resource.get("process.pid") == Some(&pid.to_string()))
        .filter(|s| s.sample_type == "off_cpu")
        .collect()
}

/// Off-CPU nanoseconds of the samples whose stack has `leaf` and, further out, `caller`.
fn waited_in(samples: &[Resolved], leaf: &str, caller: &str) -> u64 {
    samples
        .iter()
        .filter(|s| {
            let at = |name: &str| s.frames.iter().position(|f| f == name);
            matches!((at(leaf), at(caller)), (Some(l), Some(c)) if l < c)
        })
        .map(|s| s.count)
        .sum()
}

fn describe(samples: &[Resolved]) -> String {
    let mut lines: Vec<String> = samples
        .iter()
        .map(|s| format!("{} {}", s.count, s.frames.join(";")))
        .collect();
    lines.sort();
    lines.truncate(80);
    lines.join("\n")
}

#[test]
fn waits_on_a_pipe_a_mutex_and_a_sleep_are_measured_under_their_callers() {
    if !root() {
        return;
    }
    let dir = scratch("off-cpu");
    let blocker = build_blocker(&dir);
    let (collector, out) = start(&dir, "1");
    for kind in ["pipe", "mutex", "sleep"] {
        let (pid, printed) = run(&blocker, &out, &[kind, "20", "50"]);
        let waited = printed[0];
        let (leaf, caller) = (
            format!("blocker_wait_{kind}"),
            format!("blocker_caller_{kind}"),
        );
        let measured = || waited_in(&off_cpu_of(&out, pid), &leaf, &caller);
        let arrived = eventually(Duration::from_secs(15), || {
            measured() as f64 >= waited as f64 * 0.9
        });
        // Anything still on its way lands within a reporter interval.
        std::thread::sleep(Duration::from_millis(1500));
        let got = measured();
        let samples = off_cpu_of(&out, pid);
        eprintln!("{kind}: {got} ns off the CPU in {leaf}, waited {waited} ns");
        assert!(
            arrived && (got as f64 - waited as f64).abs() <= waited as f64 * 0.1,
            "{kind}: {got} ns off the CPU in {leaf} under {caller}, waited {waited} ns; \
             its off-CPU stacks:\n{}\nlogs:\n{}",
            describe(&samples),
            collector.logs()
        );
        // A wait in the kernel: the off-CPU stack starts in the scheduler, at the frame in
        // `__schedule`, not in the tracing machinery that recorded it (the program,
        // bpf_trace_run4 and, on some kernels, __traceiter_sched_switch: a count of frames
        // that differs between kernels, so it is cut at `__schedule`'s kallsyms range).
        let with_leaf = samples
            .iter()
            .find(|s| s.frames.contains(&leaf))
            .expect("a stack with the wait");
        assert_eq!(
            with_leaf.frame_types.first().map(String::as_str),
            Some("kernel"),
            "{:?}",
            with_leaf.frames
        );
        assert_eq!(
            with_leaf.frames.first().map(String::as_str),
            Some("__schedule"),
            "{:?}",
            with_leaf.frames
        );
        assert!(
            !with_leaf.frames.iter().any(|f| f.starts_with("bpf_")
                || f.contains("traceiter")
                || f.contains("bpf_trace")),
            "tracing machinery on the stack: {:?}",
            with_leaf.frames
        );
    }

    // A program that only computes waits only for a CPU: its off-CPU time is at most the
    // part of its run it was not on one.
    let (pid, printed) = run_spin(&blocker, "1.5");
    let (wall, cpu) = (printed[0], printed[1]);
    std::thread::sleep(Duration::from_millis(2500));
    let off: u64 = off_cpu_of(&out, pid).iter().map(|s| s.count).sum();
    let waiting_for_cpu = wall.saturating_sub(cpu);
    eprintln!("spinner: {off} ns off the CPU, {waiting_for_cpu} ns of {wall} not running");
    assert!(
        off as f64 <= waiting_for_cpu as f64 * 1.25 + 50e6,
        "spinner: {off} ns off the CPU, but only {waiting_for_cpu} ns of {wall} not running"
    );
    // CPU samples still come, as their own profile.
    let cpu_samples: u64 = read_samples(&out)
        .iter()
        .filter(|s| s.resource.get("process.pid") == Some(&pid.to_string()))
        .filter(|s| s.sample_type == "samples")
        .map(|s| s.count)
        .sum();
    assert!(cpu_samples > 0, "no CPU samples of the spinner");
    assert!(collector.stop().success());
}

/// With a tenth of the switches recorded, each recorded wait counts ten times: over 2000
/// short sleeps the scaled total is the time slept, within 25%.
#[test]
fn a_sampled_share_of_switches_scales_to_the_whole_time() {
    if !root() {
        return;
    }
    let dir = scratch("off-cpu-share");
    let blocker = build_blocker(&dir);
    let (collector, out) = start(&dir, "0.1");
    let (pid, printed) = run(&blocker, &out, &["sleep", "2000", "2"]);
    let waited = printed[0];
    let measured = || {
        waited_in(
            &off_cpu_of(&out, pid),
            "blocker_wait_sleep",
            "blocker_caller_sleep",
        )
    };
    eventually(Duration::from_secs(15), || {
        measured() as f64 >= waited as f64 * 0.75
    });
    std::thread::sleep(Duration::from_millis(1500));
    let got = measured();
    let samples = off_cpu_of(&out, pid);
    let recorded = samples
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "blocker_wait_sleep"))
        .map(|s| s.timestamps.len())
        .sum::<usize>();
    eprintln!("share 0.1: {got} ns scaled from {recorded} recorded sleeps, slept {waited} ns");
    assert!(
        (got as f64 - waited as f64).abs() <= waited as f64 * 0.25,
        "{got} ns scaled from {recorded} recorded sleeps, slept {waited} ns"
    );
    // About a tenth of the 2000 sleeps were recorded (binomial: 200 ± 3 sd ≈ 160-240).
    assert!(
        (140..=260).contains(&recorded),
        "{recorded} of 2000 sleeps recorded at 0.1"
    );
    assert!(collector.stop().success());
}
