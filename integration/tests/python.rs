//! CPython stacks from the eBPF `profiling` receiver, as root, for every CPython this
//! machine has: pyenv's 3.8 to 3.13 (libpython, unstripped) and Debian's python3.11
//! (stripped, the interpreter in a non-PIE executable, no debug package).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use profcol_integration::collector::{Collector, eventually, free_port, profiling_config};
use profcol_integration::otlp_json::{Resolved, read_samples};
use profcol_integration::{repo, root, scratch};

/// (label, interpreter) for each CPython installed here.
fn pythons() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for (minor, micro) in [
        ("3.8", "18"),
        ("3.9", "18"),
        ("3.10", "13"),
        ("3.11", "7"),
        ("3.12", "1"),
        ("3.13", "0"),
    ] {
        let path = PathBuf::from(format!(
            "/root/.pyenv/versions/{minor}.{micro}/bin/python{minor}"
        ));
        if path.exists() {
            out.push((format!("pyenv {minor}"), path));
        } else {
            eprintln!("not tested: {} is not installed", path.display());
        }
    }
    let debian = PathBuf::from("/usr/bin/python3.11");
    if debian.exists() {
        out.push(("Debian 3.11".to_owned(), debian));
    } else {
        eprintln!("not tested: /usr/bin/python3.11 is not installed");
    }
    out
}

fn workload() -> PathBuf {
    repo().join("integration/peers/python/workload.py")
}

/// The line of the workload that ends in `# line:NAME`.
fn line_of(name: &str) -> i64 {
    let text = std::fs::read_to_string(workload()).expect("workload.py");
    let tag = format!("# line:{name}");
    text.lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .unwrap_or_else(|| panic!("no {tag}")) as i64
        + 1
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One run of the workload: its pid, its threads' ids, and when all three were burning.
struct Run {
    pid: u32,
    threads: HashMap<String, String>,
    from: u64,
    to: u64,
}

fn run(python: &Path, seconds: &str) -> Run {
    let mut child = Command::new(python)
        .arg(workload())
        .arg(seconds)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ids");
    let from = now_ns() + 20_000_000;
    let ids: HashMap<String, u64> =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    line.clear();
    out.read_line(&mut line).expect("done");
    let to = now_ns().saturating_sub(20_000_000);
    assert_eq!(line.trim(), "done");
    assert!(child.wait().expect("ran").success());
    Run {
        pid: child.id(),
        threads: ids.into_iter().map(|(k, v)| (k, v.to_string())).collect(),
        from,
        to,
    }
}

fn start(dir: &Path, receiver_extra: &str) -> (Collector, PathBuf) {
    let (health, metrics) = (free_port(), free_port());
    let out = dir.join("profiles.jsonl");
    let config = profiling_config(99, receiver_extra, "", &out, health, metrics);
    (
        Collector::start(dir, "profcol", &config, health, metrics),
        out,
    )
}

/// The samples of `run`'s thread `thread` taken while every thread was burning, from
/// `from` on at the latest: each keeps only its observations inside, counted by them, so
/// that a stack seen on both sides of an edge is judged by its share inside.
fn samples_of(all: &[Resolved], run: &Run, thread: &str, from: u64) -> Vec<Resolved> {
    let pid = run.pid.to_string();
    let from = from.max(run.from);
    all.iter()
        .filter(|s| s.resource.get("process.pid") == Some(&pid))
        .filter(|s| s.attributes.get("thread.id") == run.threads.get(thread))
        .filter_map(|s| {
            let timestamps: Vec<u64> = s
                .timestamps
                .iter()
                .copied()
                .filter(|&t| t >= from && t <= run.to)
                .collect();
            (!timestamps.is_empty()).then(|| Resolved {
                count: timestamps.len() as u64,
                timestamps,
                ..s.clone()
            })
        })
        .collect()
}

/// When the profiler first walked `run`'s Python frames. Samples before it carry a
/// stack copy and native frames only: the process was new and its tables not built (the
/// short-process test covers those).
fn python_known_from(all: &[Resolved], run: &Run) -> Option<u64> {
    let pid = run.pid.to_string();
    all.iter()
        .filter(|s| s.resource.get("process.pid") == Some(&pid))
        .filter(|s| s.frame_types.iter().any(|k| k == "cpython"))
        .flat_map(|s| s.timestamps.iter().copied())
        .min()
}

/// The Python frames of a sample, leaf first: (function, file, line).
fn python_frames(s: &Resolved) -> Vec<(&str, &str, i64)> {
    s.frames
        .iter()
        .zip(&s.frame_types)
        .zip(&s.lines)
        .filter(|((_, kind), _)| *kind == "cpython")
        .map(|((name, _), (file, line))| (name.as_str(), file.as_str(), *line))
        .collect()
}

/// Whether the sample's Python frames are `chain` (function, lines allowed), leaf first
/// from the first of them, in the workload's file, each line within 2 of one allowed.
fn shows(s: &Resolved, chain: &[(&str, &[i64])]) -> bool {
    let frames = python_frames(s);
    let file = workload().display().to_string();
    frames.len() >= chain.len()
        && frames
            .iter()
            .zip(chain)
            .all(|((name, f, line), (want, lines))| {
                name == want && *f == file && lines.iter().any(|l| (line - l).abs() <= 2)
            })
}

/// The stacks of the samples that `good` refuses, most frequent first, each with how
/// many milliseconds after the first sample it first came.
fn describe(samples: &[Resolved], good: impl Fn(&Resolved) -> bool) -> String {
    let first = samples
        .iter()
        .flat_map(|s| s.timestamps.iter().copied())
        .min()
        .unwrap_or(0);
    let mut stacks: HashMap<String, (u64, u64)> = HashMap::new();
    for s in samples.iter().filter(|s| !good(s)) {
        let frames: Vec<String> = s
            .frames
            .iter()
            .zip(&s.lines)
            .zip(&s.frame_types)
            .take(12)
            .map(|((n, (_, l)), k)| format!("{n}:{l}[{k}]"))
            .collect();
        let at = s
            .timestamps
            .iter()
            .min()
            .map_or(0, |t| t.saturating_sub(first));
        let entry = stacks.entry(frames.join(" < ")).or_insert((0, u64::MAX));
        entry.0 += s.count;
        entry.1 = entry.1.min(at / 1_000_000);
    }
    let mut list: Vec<_> = stacks.into_iter().collect();
    list.sort_by_key(|entry| std::cmp::Reverse(entry.1.0));
    list.iter()
        .take(8)
        .map(|(s, (n, ms))| format!("  {n} × (from +{ms} ms) {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn share(samples: &[Resolved], good: impl Fn(&Resolved) -> bool) -> (u64, u64) {
    let total: u64 = samples.iter().map(|s| s.count).sum();
    let good: u64 = samples.iter().filter(|s| good(s)).map(|s| s.count).sum();
    (good, total)
}

#[test]
fn every_cpython_shows_its_functions_files_and_lines_mixed_with_native_frames() {
    if !root() {
        eprintln!("skipping: needs root (BPF)");
        return;
    }
    let dir = scratch("ebpf-python");
    let (collector, out) = start(&dir, "");
    let runs: Vec<(String, Run)> = pythons()
        .into_iter()
        .map(|(label, python)| (label, run(&python, "2.5")))
        .collect();
    let last = runs.last().map(|(_, r)| r.pid.to_string());
    assert!(
        eventually(Duration::from_secs(20), || read_samples(&out)
            .iter()
            .any(|s| s.resource.get("process.pid") == last.as_ref())),
        "no samples of the last run:\n{}",
        collector.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    let all = read_samples(&out);

    let body = [line_of("chain_c"), line_of("chain_c_body")];
    let (method, main, module) = ([line_of("method")], [line_of("main")], [line_of("module")]);
    let (chain_b, chain_a) = ([line_of("chain_b")], [line_of("chain_a")]);
    let generator = [line_of("generator_body"), line_of("generator")];
    let consumer = [line_of("gen_consumer")];
    for (label, run) in &runs {
        let known = python_known_from(&all, run)
            .unwrap_or_else(|| panic!("{label}: no sample has Python frames"));
        // Mostly before the window; on a loaded machine up to a few tenths of a second in.
        let late_ms = known.saturating_sub(run.from) / 1_000_000;
        eprintln!("{label}: Python frames {late_ms} ms into the window");
        assert!(
            late_ms < 500,
            "{label}: Python frames came {late_ms} ms after the workload ran"
        );
        let samples_of = |thread| samples_of(&all, run, thread, known);
        let minor: u32 = label.rsplit('.').next().unwrap().parse().unwrap();
        // Qualified names from 3.11 (co_qualname); before, the bare name.
        let method_name = if minor >= 11 {
            "Klass.method"
        } else {
            "method"
        };
        let main_chain: [(&str, &[i64]); 6] = [
            ("chain_c", &body),
            ("chain_b", &chain_b),
            ("chain_a", &chain_a),
            (method_name, &method),
            ("main", &main),
            ("<module>", &module),
        ];
        let main_samples = samples_of("main");
        let whole = |s: &Resolved| shows(s, &main_chain);
        let (good, total) = share(&main_samples, whole);
        eprintln!("{label}: main thread {good} of {total} samples whole");
        assert!(total >= 50, "{label}: {total} samples of the main thread");
        assert!(
            good as f64 >= total as f64 * 0.95,
            "{label}: {good} of {total} main-thread samples show the chain; they were:\n{}",
            describe(&main_samples, whole)
        );

        let gen_chain: [(&str, &[i64]); 2] =
            [("generator", &generator), ("gen_consumer", &consumer)];
        let gen_samples = samples_of("gen");
        let whole = |s: &Resolved| shows(s, &gen_chain);
        let (good, total) = share(&gen_samples, whole);
        eprintln!("{label}: generator thread {good} of {total} samples whole");
        assert!(
            total >= 20 && good as f64 >= total as f64 * 0.95,
            "{label}: {good} of {total} generator-thread samples show it; they were:\n{}",
            describe(&gen_samples, whole)
        );

        // zlib releases the GIL: its thread's Python frames are found all the same, with
        // the C extension's native frames above the Python caller.
        let zlib_samples = samples_of("zlib");
        let zlib_line = [line_of("zlib_caller")];
        let under_zlib = |s: &Resolved| {
            let Some(at) = s.frames.iter().position(|f| f == "zlib_caller") else {
                return false;
            };
            shows(s, &[("zlib_caller", &zlib_line)])
                && s.frames[..at].iter().zip(&s.frame_types).any(|(f, k)| {
                    k == "native" && (f.starts_with("deflate") || f.contains("zlib_compress"))
                })
        };
        let (good, total) = share(&zlib_samples, under_zlib);
        eprintln!("{label}: zlib thread {good} of {total} samples under deflate/zlib_compress");
        assert!(
            total >= 20 && good as f64 >= total as f64 * 0.9,
            "{label}: {good} of {total} zlib-thread samples show zlib's native frames above zlib_caller:\n{}",
            describe(&zlib_samples, under_zlib)
        );

        let resource = &main_samples[0].resource;
        assert_eq!(
            resource.get("process.runtime.name").map(String::as_str),
            Some("cpython"),
            "{label}"
        );
        let version = resource
            .get("process.runtime.version")
            .cloned()
            .unwrap_or_default();
        assert!(
            version.starts_with(&format!("3.{minor}")),
            "{label}: {version}"
        );
    }
    // A process that is not Python has no Python frames, and none has them but Python.
    for s in &all {
        if s.frame_types.iter().any(|k| k == "cpython") {
            assert_eq!(
                s.resource.get("process.runtime.name").map(String::as_str),
                Some("cpython")
            );
        }
    }
    assert!(collector.stop().success());
}

#[test]
fn a_short_python_process_is_named_and_disabling_python_keeps_the_evaluator() {
    if !root() {
        eprintln!("skipping: needs root (BPF)");
        return;
    }
    let Some((label, python)) = pythons().into_iter().last() else {
        eprintln!("skipping: no CPython installed");
        return;
    };
    // Started after profcol, gone within one reporter interval.
    let dir = scratch("ebpf-python-short");
    let (collector, out) = start(&dir, "");
    let short = run(&python, "0.6");
    let pid = short.pid.to_string();
    let of_pid = |all: &[Resolved], pid: &str| -> Vec<Resolved> {
        all.iter()
            .filter(|s| s.resource.get("process.pid").map(String::as_str) == Some(pid))
            .cloned()
            .collect()
    };
    assert!(eventually(Duration::from_secs(20), || !of_pid(
        &read_samples(&out),
        &pid
    )
    .is_empty()));
    std::thread::sleep(Duration::from_secs(2));
    let all = read_samples(&out);
    let main_samples = samples_of(&all, &short, "main", short.from);
    let body = [line_of("chain_c"), line_of("chain_c_body")];
    let in_chain_c = |s: &Resolved| shows(s, &[("chain_c", &body)]);
    let (good, total) = share(&main_samples, in_chain_c);
    eprintln!("{label}, 0.6 s: {good} of {total} main-thread samples in chain_c");
    // A process's first samples come before its tables and carry a stack copy instead
    // of Python frames (a fifth of this one's here, more on a loaded machine); those
    // that have Python frames show them right.
    let with_python: Vec<Resolved> = main_samples
        .iter()
        .filter(|s| s.frame_types.iter().any(|k| k == "cpython"))
        .cloned()
        .collect();
    let (right, walked) = share(&with_python, in_chain_c);
    assert!(
        good >= 5 && good as f64 >= total as f64 * 0.5 && right as f64 >= walked as f64 * 0.95,
        "{label}: {good} of {total} in chain_c, {right} of {walked} with Python frames:\n{}",
        describe(&main_samples, in_chain_c)
    );
    assert!(collector.stop().success());

    let dir = scratch("ebpf-python-off");
    let (collector, out) = start(&dir, "    interpreters: {python: {disabled: true}}\n");
    let off = run(&python, "1.5");
    let pid = off.pid.to_string();
    assert!(eventually(Duration::from_secs(20), || !of_pid(
        &read_samples(&out),
        &pid
    )
    .is_empty()));
    std::thread::sleep(Duration::from_secs(2));
    let samples = of_pid(&read_samples(&out), &pid);
    assert!(
        samples
            .iter()
            .all(|s| !s.frame_types.iter().any(|k| k == "cpython"))
    );
    assert!(
        samples.iter().any(|s| s
            .frames
            .iter()
            .any(|f| f.starts_with("_PyEval_EvalFrameDefault"))),
        "the evaluator's native frames stay when Python is off"
    );
    assert!(collector.stop().success());
}
