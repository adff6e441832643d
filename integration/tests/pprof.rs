//! pprof end to end with real producers: a Go service scraped at /debug/pprof, the
//! pyroscope-io and @pyroscope/nodejs clients pushing, exported files read by
//! `go tool pprof`, flame graphs a browser can open.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use profcol_integration::collector::{Collector, eventually, free_port, http};
use profcol_integration::{fixture, go_tool_pprof_raw, have_peer, python, repo, scratch};

struct Ports {
    health: u16,
    metrics: u16,
}

fn ports() -> Ports {
    Ports {
        health: free_port(),
        metrics: free_port(),
    }
}

fn config(p: &Ports, receivers: &str, exporters: &str, exporter_ids: &str) -> String {
    format!(
        "receivers:\n{receivers}exporters:\n{exporters}extensions:\n  health_check:\n    endpoint: 127.0.0.1:{}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{}\n  pipelines:\n    profiles:\n      receivers: [pprof]\n      exporters: [{exporter_ids}]\n",
        p.health, p.metrics
    )
}

fn file_exporter(path: &Path) -> String {
    format!(
        "  file:\n    path: {}\n    flush_interval: 100ms\n",
        path.display()
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Kills a child process when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn go_pprof_server(dir: &Path, port: u16) -> Option<Peer> {
    if !have_peer("go", "scraping a real Go /debug/pprof endpoint") {
        return None;
    }
    let bin = dir.join("go-pprof-server");
    profcol_integration::build_go_file(
        &repo().join("integration/peers/go-pprof-server/main.go"),
        &bin,
    );
    let child = Command::new(&bin)
        .args(["-addr", &format!("127.0.0.1:{port}")])
        .stderr(Stdio::null())
        .spawn()
        .expect("go server");
    assert!(eventually(Duration::from_secs(10), || http(
        port,
        "GET",
        "/debug/pprof/",
        &[],
        b""
    )
    .is_some_and(|r| r.status == 200)));
    Some(Peer(child))
}

#[test]
fn scraping_a_go_service_yields_its_functions_and_mutex_deltas() {
    let dir = scratch("scrape");
    let go_port = free_port();
    let Some(_go) = go_pprof_server(&dir, go_port) else {
        return;
    };
    let p = ports();
    let out = dir.join("scraped.jsonl");
    let receivers = format!(
        "  pprof:\n    remote:\n      interval: 2s\n      targets:\n        - endpoint: http://127.0.0.1:{go_port}\n          labels:\n            service.name: go-checkout\n            env: test\n        - endpoint: http://127.0.0.1:{}\n",
        free_port()
    );
    let c = Collector::start(
        &dir,
        "c",
        &config(&p, &receivers, &file_exporter(&out), "file"),
        p.health,
        p.metrics,
    );
    // The CPU profile of one interval names the program's own hot function; the mutex
    // profile's second scrape yields positive deltas.
    let ok = eventually(Duration::from_secs(30), || {
        let text = read(&out);
        text.contains("main.scrapeTargetBurn")
            && text.contains("\"contentions\"")
            && text.contains("\"go-checkout\"")
    });
    assert!(
        ok,
        "scraped output lacks expected functions:\n{}\n{}",
        &read(&out)[..read(&out).len().min(2000)],
        c.logs()
    );
    // The unreachable second target is counted, and did not stop the first.
    assert!(c.metric("otelcol_receiver_pprof_scrape_failures_total", &[]) > 0.0);
    assert!(c.stop().success());
}

#[test]
fn pyroscope_io_client_pushes_to_profcol() {
    let py = python();
    if !Command::new(&py)
        .args(["-c", "import pyroscope"])
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(
            std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
            "pyroscope-io missing from {py}"
        );
        eprintln!("SKIP: pyroscope-io not installed in {py}");
        return;
    }
    let dir = scratch("pyroscope-py");
    let (p, port) = (ports(), free_port());
    let out = dir.join("pushed.jsonl");
    let receivers = format!("  pprof:\n    server:\n      endpoint: 127.0.0.1:{port}\n");
    let c = Collector::start(
        &dir,
        "c",
        &config(&p, &receivers, &file_exporter(&out), "file"),
        p.health,
        p.metrics,
    );
    let status = Command::new(&py)
        .arg(repo().join("integration/peers/pyroscope_push.py"))
        .args([&format!("http://127.0.0.1:{port}"), "py.demo", "12"])
        .status()
        .expect("python runs");
    assert!(status.success());
    let ok = eventually(Duration::from_secs(10), || {
        let t = read(&out);
        t.contains("pyroscope_python_burn") && t.contains("\"py.demo\"")
    });
    assert!(ok, "no pyroscope-io data:\n{}", c.logs());
    assert!(read(&out).contains("\"region\""));
    assert!(c.stop().success());
}

fn node_peers() -> Option<PathBuf> {
    let dir = std::env::var("PROFCOL_NODE_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target/peers/node"));
    if dir.join("node_modules/@pyroscope/nodejs").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
        "@pyroscope/nodejs not installed in {}",
        dir.display()
    );
    eprintln!(
        "SKIP: @pyroscope/nodejs not installed in {} (scripts/test installs it)",
        dir.display()
    );
    None
}

#[test]
fn pyroscope_nodejs_client_pushes_to_profcol() {
    let Some(node_dir) = node_peers() else { return };
    let dir = scratch("pyroscope-node");
    let (p, port) = (ports(), free_port());
    let out = dir.join("pushed.jsonl");
    let receivers = format!("  pprof:\n    server:\n      endpoint: 127.0.0.1:{port}\n");
    let c = Collector::start(
        &dir,
        "c",
        &config(&p, &receivers, &file_exporter(&out), "file"),
        p.health,
        p.metrics,
    );
    let status = Command::new("node")
        .arg(repo().join("integration/peers/pyroscope-node/push.js"))
        .args([&format!("http://127.0.0.1:{port}"), "node-demo", "6"])
        .env("NODE_PATH", node_dir.join("node_modules"))
        .status()
        .expect("node runs");
    assert!(status.success());
    let ok = eventually(Duration::from_secs(10), || {
        let t = read(&out);
        t.contains("pyroscopeNodeBurn") && t.contains("\"node-demo\"")
    });
    assert!(ok, "no @pyroscope/nodejs data:\n{}", c.logs());
    assert!(c.stop().success());
}

fn post_pprof(port: u16, name: &str) -> u16 {
    let body = std::fs::read(fixture(name)).expect("fixture");
    http(
        port,
        "POST",
        "/v1/pprof",
        &[("Content-Type", "application/octet-stream")],
        &body,
    )
    .map_or(0, |r| r.status)
}

#[test]
fn exported_pprof_files_open_in_go_tool_pprof() {
    if !have_peer("go", "reading exported files with go tool pprof") {
        return;
    }
    let dir = scratch("pprof-export");
    let (p, port) = (ports(), free_port());
    let files = dir.join("out");
    let receivers = format!("  pprof:\n    server:\n      endpoint: 127.0.0.1:{port}\n");
    let exporters = format!("  pprof:\n    directory: {}\n", files.display());
    let c = Collector::start(
        &dir,
        "c",
        &config(&p, &receivers, &exporters, "pprof"),
        p.health,
        p.metrics,
    );
    assert_eq!(post_pprof(port, "go-cpu.pb.gz"), 204);
    assert_eq!(post_pprof(port, "go-heap.pb.gz"), 204);
    // Finished files only: the exporter writes under a temporary name first.
    let listed = || {
        std::fs::read_dir(&files)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(
        eventually(Duration::from_secs(10), || listed().len() >= 2),
        "{:?}\n{}",
        listed(),
        c.logs()
    );
    let mut seen_cpu = false;
    for f in listed() {
        let raw = go_tool_pprof_raw(&f);
        seen_cpu |= raw.contains("main.hashLoop");
    }
    assert!(
        seen_cpu,
        "no exported file holds the CPU fixture's main.hashLoop"
    );
    assert!(c.stop().success());
}

#[test]
fn flame_graphs_name_the_hot_functions_and_are_listed() {
    let dir = scratch("flamegraph");
    let (p, port) = (ports(), free_port());
    let out = dir.join("fg");
    let receivers = format!("  pprof:\n    server:\n      endpoint: 127.0.0.1:{port}\n");
    let exporters = format!(
        "  flamegraph:\n    directory: {}\n    interval: 1s\n",
        out.display()
    );
    let c = Collector::start(
        &dir,
        "c",
        &config(&p, &receivers, &exporters, "flamegraph"),
        p.health,
        p.metrics,
    );
    assert_eq!(post_pprof(port, "go-cpu.pb.gz"), 204);
    let index = out.join("index.html");
    assert!(
        eventually(Duration::from_secs(10), || read(&index).contains(".svg")),
        "{}",
        c.logs()
    );
    assert!(c.stop().success());
    let svgs: Vec<PathBuf> = walk(&out)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "svg"))
        .collect();
    assert!(!svgs.is_empty());
    let svg = svgs
        .iter()
        .map(|f| read(f))
        .find(|t| t.contains("main.hashLoop"))
        .expect("an SVG names main.hashLoop");
    assert!(svg.trim_start().starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert!(balanced_xml(&svg), "SVG is not well-formed");
    assert!(svg.contains("main.work"));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Tags open and close in order (comments, declarations and CDATA skipped).
fn balanced_xml(text: &str) -> bool {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        rest = &rest[start..];
        if rest.starts_with("<!--") {
            let Some(end) = rest.find("-->") else {
                return false;
            };
            rest = &rest[end + 3..];
            continue;
        }
        if rest.starts_with("<![CDATA[") {
            let Some(end) = rest.find("]]>") else {
                return false;
            };
            rest = &rest[end + 3..];
            continue;
        }
        let Some(end) = rest.find('>') else {
            return false;
        };
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop().as_deref() != Some(name.trim()) {
                return false;
            }
        } else {
            stack.push(tag.split_whitespace().next().unwrap_or("").to_owned());
        }
    }
    stack.is_empty()
}

#[test]
fn bad_pushes_get_their_answers_and_cost_no_other_data() {
    let dir = scratch("pprof-bad");
    let (p, port) = (ports(), free_port());
    let out = dir.join("good.jsonl");
    let receivers = format!(
        "  pprof:\n    server:\n      endpoint: 127.0.0.1:{port}\n      max_request_body_size: 1048576\n"
    );
    let c = Collector::start(
        &dir,
        "c",
        &config(&p, &receivers, &file_exporter(&out), "file"),
        p.health,
        p.metrics,
    );
    let bad = http(port, "POST", "/v1/pprof", &[], b"definitely not a profile").expect("answer");
    assert_eq!(bad.status, 400);
    // Far over the limit and over what socket buffers hold: the answer must still arrive.
    let big = vec![b'x'; 16 << 20];
    assert_eq!(
        http(port, "POST", "/v1/pprof", &[], &big)
            .expect("answer")
            .status,
        413
    );
    assert_eq!(
        http(port, "GET", "/v1/pprof", &[], b"")
            .expect("answer")
            .status,
        405
    );
    let unsupported = http(
        port,
        "POST",
        "/ingest?name=app&format=folded",
        &[],
        b"a;b 1\n",
    )
    .expect("answer");
    assert_eq!(unsupported.status, 400);
    assert_eq!(post_pprof(port, "go-cpu.pb.gz"), 204);
    // Only the good profile's 66 samples arrive.
    assert!(eventually(Duration::from_secs(10), || read(&out)
        .contains("main.hashLoop")));
    assert!(c.stop().success());
    let samples: usize = read(&out)
        .lines()
        .map(|l| l.matches("\"stackIndex\"").count() + l.matches("\"samples\":[{}").count())
        .sum();
    assert!(samples > 0);
}
