//! Operating a pipeline: an outage that fills the offline folder and a replay that
//! delivers every sample once; and the byte counters on both ends of a connection
//! against what a counting proxy in between saw.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use profcol_integration::collector::{Collector, eventually, free_port};
use profcol_integration::go_peers::{PeerSummary, summarize_framed_so_far};
use profcol_integration::{profcol, profcol_ok, repo, scratch};
use profcol_pdata::ProfileBatch;

fn fixtures() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo().join("testdata/pprof"))
        .expect("testdata/pprof")
        .filter_map(Result::ok)
        .map(|e| e.path().display().to_string())
        .filter(|p| p.ends_with(".pb.gz"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "fixtures missing: {files:?}");
    files
}

/// The pprof fixtures (real Go and Node producers), read once by the file receiver.
fn fixtures_receiver() -> String {
    let quoted: Vec<String> = fixtures().iter().map(|p| format!("{p:?}")).collect();
    format!(
        "  pprof:\n    file:\n      include: [{}]\n      interval: 1h\n",
        quoted.join(", ")
    )
}

/// What the file receiver makes of the fixtures, as `profcol convert` translates them.
fn fixtures_as_sent(dir: &Path) -> PeerSummary {
    let mut expected = PeerSummary::default();
    let out = dir.join("converted.pb");
    let out_arg = out.to_str().expect("utf-8 path");
    for f in fixtures() {
        profcol_ok(&["convert", "--to", "otlp", "-o", out_arg, &f]);
        let batch = ProfileBatch::decode(&std::fs::read(&out).expect("converted"))
            .expect("profcol reads its own conversion");
        expected.add(&batch);
    }
    expected.content()
}

fn config(health: u16, metrics: u16, receivers: &str, exporters: &str, ids: &str) -> String {
    let receiver_ids: Vec<&str> = receivers
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.trim().trim_end_matches(':'))
        .collect();
    format!(
        "receivers:\n{receivers}exporters:\n{exporters}extensions:\n  health_check:\n    endpoint: 127.0.0.1:{health}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{metrics}\n  pipelines:\n    profiles:\n      receivers: [{}]\n      exporters: [{ids}]\n",
        receiver_ids.join(", ")
    )
}

fn file_exporter(name: &str, path: &Path) -> String {
    format!(
        "  file/{name}:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n",
        path.display()
    )
}

/// A backend: an OTLP receiver on `port` (HTTP, or gRPC on `grpc_port`) into a file.
fn start_backend(dir: &Path, name: &str, http: u16, grpc: u16, out: &Path) -> Collector {
    let (health, metrics) = (free_port(), free_port());
    Collector::start(
        dir,
        name,
        &config(
            health,
            metrics,
            &format!(
                "  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{http}\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\n"
            ),
            &file_exporter("out", out),
            "file/out",
        ),
        health,
        metrics,
    )
}

fn summary(path: &Path) -> PeerSummary {
    summarize_framed_so_far(path).unwrap_or_default().content()
}

fn offline_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".binpb"))
            .count()
    })
}

/// A backend outage (ten minutes in production; `after: 1s` here) sends every batch to
/// the offline folder; once the backend is up, `profcol replay` delivers each sample
/// exactly once, and a second replay has nothing left to send.
#[test]
fn an_outage_fills_the_offline_folder_and_a_replay_delivers_every_sample_once() {
    let dir = scratch("offline-replay");
    let offline = dir.join("offline");
    let (backend_http, backend_grpc) = (free_port(), free_port());
    let expected = fixtures_as_sent(&dir);
    let exporters = format!(
        "  otlphttp:\n    endpoint: http://127.0.0.1:{backend_http}\n    retry_on_failure:\n      initial_interval: 100ms\n      max_interval: 200ms\n      max_elapsed_time: 500ms\n    offline:\n      directory: {}\n      after: 1s\n      probe_interval: 1h\n      replay_on_recovery: false\n",
        offline.display()
    );
    let (health, metrics) = (free_port(), free_port());
    let edge_config = config(
        health,
        metrics,
        &fixtures_receiver(),
        &exporters,
        "otlphttp",
    );
    let edge = Collector::start(&dir, "edge", &edge_config, health, metrics);
    let all_kept = || {
        edge.metric(
            "otelcol_exporter_offline_written_profile_samples_total",
            &[("exporter", "otlphttp")],
        ) as usize
            == expected.samples
    };
    assert!(
        eventually(Duration::from_secs(30), all_kept),
        "the offline folder never held all {} samples:\n{}",
        expected.samples,
        edge.logs()
    );
    assert_eq!(
        edge.metric(
            "otelcol_exporter_send_failed_profile_samples_total",
            &[("exporter", "otlphttp")]
        ),
        0.0,
        "nothing is lost to the outage"
    );
    assert!(
        edge.metric(
            "otelcol_exporter_offline_size_bytes",
            &[("exporter", "otlphttp")]
        ) > 0.0
    );
    assert!(edge.stop().success());
    let kept = offline_files(&offline);
    assert!(kept > 0, "no files in {}", offline.display());

    let received = dir.join("received.pb");
    let backend = start_backend(&dir, "backend", backend_http, backend_grpc, &received);
    let config_path = dir.join("edge.yaml");
    let config_arg = config_path.to_str().expect("utf-8 path");
    let replay = profcol(&["replay", "--config", config_arg]);
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success(),
        "replay failed: {stdout}\n{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "otlphttp: sent {kept} batches ({} samples), dropped 0, left 0",
            expected.samples
        )),
        "{stdout}"
    );
    assert_eq!(offline_files(&offline), 0, "sent files are removed");
    let delivered = || summary(&received) == expected;
    assert!(
        eventually(Duration::from_secs(30), delivered),
        "the backend did not get exactly what was collected:\nexpected {} samples, got {}\n{}",
        expected.samples,
        summary(&received).samples,
        backend.logs()
    );
    // Nothing is left to send twice.
    let again = profcol(&["replay", "--config", config_arg]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("otlphttp: sent 0 batches (0 samples)"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert!(backend.stop().success());
    assert_eq!(summary(&received), expected, "each sample exactly once");
}

/// With the backend down again, a replay stops at the first file, keeps them all and
/// exits 1 naming why; a folder a running collector holds is refused.
#[test]
fn a_replay_against_a_down_backend_keeps_the_files() {
    let dir = scratch("offline-down");
    let offline = dir.join("offline");
    let down = free_port();
    let exporters = format!(
        "  otlp:\n    endpoint: 127.0.0.1:{down}\n    tls: {{insecure: true}}\n    retry_on_failure:\n      initial_interval: 50ms\n      max_elapsed_time: 200ms\n    offline:\n      directory: {}\n      after: 0s\n",
        offline.display()
    );
    let (health, metrics) = (free_port(), free_port());
    let edge = Collector::start(
        &dir,
        "edge",
        &config(health, metrics, &fixtures_receiver(), &exporters, "otlp"),
        health,
        metrics,
    );
    assert!(
        eventually(Duration::from_secs(30), || offline_files(&offline) >= 6),
        "`after: 0s` keeps every batch:\n{}",
        edge.logs()
    );
    let config_path = dir.join("edge.yaml");
    let config_arg = config_path.to_str().expect("utf-8 path");
    let busy = profcol(&["replay", "--config", config_arg]);
    assert_eq!(busy.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("locked by another exporter or process"),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    assert!(edge.stop().success());
    let kept = offline_files(&offline);
    let replay = profcol(&["replay", "--config", config_arg]);
    assert_eq!(replay.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert!(stderr.contains("otlp: stopped with"), "{stderr}");
    assert_eq!(offline_files(&offline), kept, "every file is kept");
}

/// A TCP proxy that counts what the client sent upstream.
struct CountingProxy {
    port: u16,
    upstream_bytes: Arc<AtomicU64>,
}

impl CountingProxy {
    fn start(upstream: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let upstream_bytes = Arc::new(AtomicU64::new(0));
        let counted = upstream_bytes.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().filter_map(Result::ok) {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let counted = counted.clone();
                std::thread::spawn(move || pipe(client, server, Some(&counted)));
                std::thread::spawn(move || pipe(s2, c2, None));
            }
        });
        CountingProxy {
            port,
            upstream_bytes,
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, count: Option<&AtomicU64>) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(c) = count {
            c.fetch_add(n as u64, Ordering::SeqCst);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The exporter's bytes on the wire are the receiver's, byte for byte, and what a proxy
/// between them counted is that plus the requests' headers and framing; uncompressed
/// sizes agree on both ends and exceed the compressed ones.
#[test]
fn byte_counters_match_on_both_ends_and_what_a_proxy_saw() {
    let dir = scratch("wire-bytes");
    let (backend_http, backend_grpc) = (free_port(), free_port());
    let received = dir.join("received.pb");
    let backend = start_backend(&dir, "backend", backend_http, backend_grpc, &received);
    let (http_proxy, grpc_proxy) = (
        CountingProxy::start(backend_http),
        CountingProxy::start(backend_grpc),
    );
    let exporters = format!(
        "  otlphttp:\n    endpoint: http://127.0.0.1:{}\n    compression: gzip\n  otlp:\n    endpoint: 127.0.0.1:{}\n    tls: {{insecure: true}}\n    compression: snappy\n",
        http_proxy.port, grpc_proxy.port
    );
    let (health, metrics) = (free_port(), free_port());
    let edge = Collector::start(
        &dir,
        "edge",
        &config(
            health,
            metrics,
            &fixtures_receiver(),
            &exporters,
            "otlphttp, otlp",
        ),
        health,
        metrics,
    );
    let both_sent = || {
        ["otlphttp", "otlp"].iter().all(|e| {
            edge.metric(
                "otelcol_exporter_sent_profile_samples_total",
                &[("exporter", e)],
            ) > 0.0
        }) && edge.metric("otelcol_exporter_queue_size", &[]) == 0.0
    };
    assert!(
        eventually(Duration::from_secs(30), both_sent),
        "{}",
        edge.logs()
    );
    // The file receiver read everything once; let the last answers land.
    std::thread::sleep(Duration::from_millis(500));
    for (exporter, transport, proxy) in [
        ("otlphttp", "http", &http_proxy),
        ("otlp", "grpc", &grpc_proxy),
    ] {
        let sent = |name| edge.metric(name, &[("exporter", exporter)]);
        let got = |name| backend.metric(name, &[("receiver", "otlp"), ("transport", transport)]);
        let (wire, plain) = (
            sent("otelcol_exporter_sent_wire_bytes_total"),
            sent("otelcol_exporter_sent_uncompressed_bytes_total"),
        );
        assert!(wire > 0.0 && plain > wire, "{exporter}: {wire} / {plain}");
        assert_eq!(
            got("otelcol_receiver_received_wire_bytes_total"),
            wire,
            "{exporter}: the receiver read what the exporter sent"
        );
        assert_eq!(
            got("otelcol_receiver_received_uncompressed_bytes_total"),
            plain,
            "{exporter}: both decompress to the same size"
        );
        let requests = edge.metric(
            "otelcol_exporter_send_duration_seconds_count",
            &[("exporter", exporter)],
        );
        let on_wire = proxy.upstream_bytes.load(Ordering::SeqCst) as f64;
        assert!(
            on_wire >= wire && on_wire <= wire + 2048.0 * requests.max(1.0) + 1024.0,
            "{exporter}: the proxy saw {on_wire} bytes for {wire} bytes of {requests} request bodies"
        );
    }
    // The latency of what was acknowledged is on record, and the queue is empty.
    assert!(
        edge.metric(
            "otelcol_exporter_profile_latency_seconds_count",
            &[("exporter", "otlp")]
        ) > 0.0
    );
    assert_eq!(
        edge.metric(
            "otelcol_exporter_queue_oldest_batch_age_seconds",
            &[("exporter", "otlp")]
        ),
        0.0
    );
    assert!(edge.stop().success());
    assert!(backend.stop().success());
}

/// The example Grafana dashboard is valid JSON, and every metric its queries use is one
/// profcol defines (histograms by their `_bucket` series).
#[test]
fn the_example_dashboard_queries_metrics_profcol_has() {
    let path = repo().join("config/examples/grafana/profcol-pipeline.json");
    let dashboard: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("dashboard")).expect("JSON");
    let mut sources = String::new();
    let mut dirs = vec![repo().join("collector/core/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("source dir")
            .filter_map(Result::ok)
        {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                sources += &std::fs::read_to_string(&p).expect("source");
            }
        }
    }
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    assert!(exprs.len() >= 15, "{exprs:?}");
    let mut names = 0;
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.starts_with("otelcol_") {
                continue;
            }
            let name = word.strip_suffix("_bucket").unwrap_or(word);
            assert!(
                sources.contains(&format!("\"{name}\"")),
                "{name} (in {expr}) is no metric profcol defines"
            );
            names += 1;
        }
    }
    assert!(names >= exprs.len());
}
