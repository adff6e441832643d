//! The OpenTelemetry process context (OTEP 4719) on eBPF profiles, as root: a C program
//! publishes an `OTEL_CTX` mapping as an SDK does, updates it midway, and its resource
//! carries what it published; malformed and oversized ones are counted, never taken.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use profcol_integration::collector::{Collector, eventually, free_port, profiling_config};
use profcol_integration::otlp_json::{Resolved, read_samples};
use profcol_integration::{build_native, root, scratch};

fn build(dir: &Path) -> PathBuf {
    build_native(
        dir,
        "otel_ctx",
        "otel_ctx",
        &["-O1", "-fno-omit-frame-pointer"],
    )
}

/// Runs the publisher in `mode` for `seconds`, with `OTEL_SERVICE_NAME` set to
/// "from-env"; returns its pid once it has exited.
fn run(program: &Path, mode: &str, seconds: &str) -> u32 {
    let mut child = Command::new(program)
        .args([mode, seconds])
        .env("OTEL_SERVICE_NAME", "from-env")
        .stdout(Stdio::piped())
        .spawn()
        .expect("otel_ctx");
    let lines: Vec<String> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok)
        .collect();
    assert!(child.wait().expect("ran").success());
    assert_eq!(
        lines.first().map(String::as_str),
        Some("published"),
        "{lines:?}"
    );
    child.id()
}

fn of_pid(all: &[Resolved], pid: u32) -> Vec<&Resolved> {
    let pid = pid.to_string();
    all.iter()
        .filter(|s| s.resource.get("process.pid") == Some(&pid))
        .collect()
}

#[test]
fn a_published_context_names_the_process_and_its_update_is_followed() {
    if !root() {
        eprintln!("skipping: needs root (BPF, /proc/PID/mem)");
        return;
    }
    let dir = scratch("process-context");
    let program = build(&dir);
    let (health, metrics) = (free_port(), free_port());
    let out = dir.join("profiles.jsonl");
    // With the service_name processor: what the SDK published comes before the
    // process's OTEL_SERVICE_NAME.
    let config = profiling_config(99, "", "service_name", &out, health, metrics);
    let collector = Collector::start(&dir, "profcol", &config, health, metrics);

    let good = run(&program, "good", "4");
    let late = run(&program, "late", "6");
    let oversized = run(&program, "oversized", "1");
    let garbage = run(&program, "garbage", "1");
    assert!(
        eventually(Duration::from_secs(20), || !of_pid(
            &read_samples(&out),
            garbage
        )
        .is_empty()),
        "no samples of the last run:\n{}",
        collector.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    let all = read_samples(&out);

    let samples = of_pid(&all, good);
    let count = |service: &str| -> u64 {
        samples
            .iter()
            .filter(|s| s.resource.get("service.name").map(String::as_str) == Some(service))
            .map(|s| s.count)
            .sum()
    };
    let (before, after) = (count("otel-ctx-app"), count("otel-ctx-updated"));
    let total: u64 = samples.iter().map(|s| s.count).sum();
    eprintln!("{total} samples: {before} as otel-ctx-app, {after} as otel-ctx-updated");
    // The context is the one in force when a sample is read from the ring, so on a
    // loaded machine a backlog read after the update carries the new name: only the
    // update is required here (the late publisher below shows the first name).
    assert!(after > 20, "{before} / {after} of {total}");
    // The first milliseconds, before the process was read, may have no context (and
    // are named from the environment).
    assert!(
        before + after >= total * 9 / 10,
        "{before} + {after} of {total}; all names: {:?}",
        samples
            .iter()
            .map(|s| (s.resource.get("service.name"), s.count))
            .collect::<Vec<_>>()
    );
    assert!(
        samples
            .iter()
            .filter(|s| s.resource.get("service.name").map(String::as_str) != Some("from-env"))
            .all(|s| s
                .resource
                .get("deployment.environment.name")
                .map(String::as_str)
                == Some("ci"))
    );

    // Published a second after it started: found by a later look at its maps.
    let late_named = of_pid(&all, late)
        .iter()
        .filter(|s| s.resource.get("service.name").map(String::as_str) == Some("otel-ctx-app"))
        .map(|s| s.count)
        .sum::<u64>();
    assert!(
        late_named > 20,
        "{late_named} samples of the late publisher named by it"
    );

    // A malformed context is not taken: the name is the environment's, as without one.
    // A sample taken in the child between fork and exec runs this test's own image, and
    // is rightly named after it.
    let this_test = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    for pid in [oversized, garbage] {
        let samples = of_pid(&all, pid);
        assert!(!samples.is_empty());
        assert!(
            samples.iter().all(|s| {
                let name = s.resource.get("service.name").map(String::as_str);
                (name == Some("from-env") || name == Some(this_test.as_str()))
                    && !s.resource.contains_key("deployment.environment.name")
            }) && samples
                .iter()
                .any(|s| s.resource.get("service.name").map(String::as_str) == Some("from-env")),
            "a malformed context is not taken; pid {pid}'s samples were named {:?}",
            samples
                .iter()
                .map(|s| (
                    s.resource.get("service.name"),
                    s.resource.get("deployment.environment.name"),
                    s.count
                ))
                .collect::<Vec<_>>()
        );
    }
    let metric = |result: &str| {
        collector.metric(
            "otelcol_receiver_profiling_process_contexts_total",
            &[("result", result)],
        )
    };
    // Each bad publication refused once, not read again at every look (each process
    // was looked at more than once); the good ones taken: the first, the update, the
    // late one.
    assert_eq!(metric("invalid"), 2.0);
    assert!(metric("ok") >= 3.0, "ok: {}", metric("ok"));
    assert!(collector.stop().success());
}
