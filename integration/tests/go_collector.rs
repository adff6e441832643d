//! profcol against the real OpenTelemetry Collector: a minimal Go collector built from the
//! upstream v0.165.0 modules (integration/peers/otelcol), and the Go collector's own
//! `pdata/pprofile` reading what profcol writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use profcol_integration::collector::{Collector, eventually, free_port};
use profcol_integration::go_peers::{
    GoCollector, PeerSummary, go_peer, pdatacheck, summarize_framed, summarize_framed_so_far,
};
use profcol_integration::{fixture, go_tool_pprof_raw, profcol_ok, repo, scratch};
use profcol_pdata::ProfileBatch;

/// The pprof fixtures (real Go and Node producers) as profcol translates them, one batch
/// each, with the resource attributes the test's `resource` processor adds.
fn fixtures_as_profcol_sends_them(dir: &Path) -> (Vec<PathBuf>, PeerSummary) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("testdata/pprof"))
        .expect("testdata/pprof")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    files.sort();
    let mut expected = PeerSummary::default();
    for f in &files {
        let out = dir.join("converted.pb");
        profcol_ok(&[
            "convert",
            "--to",
            "otlp",
            "-o",
            out.to_str().expect("utf-8 path"),
            f.to_str().expect("utf-8 path"),
        ]);
        let batch = ProfileBatch::decode(&std::fs::read(&out).expect("converted"))
            .expect("profcol reads its own conversion");
        expected.add(&batch);
        let resources = batch.resource_profiles().len();
        for attribute in RESOURCE_ATTRIBUTES {
            *expected.resource.entry(attribute.into()).or_default() += resources;
        }
    }
    assert!(files.len() >= 6, "fixtures missing: {files:?}");
    assert!(
        expected.samples > 0 && expected.stacks.len() > 10,
        "the fixtures translate to nothing: {expected:?}"
    );
    assert!(fixture("go-cpu.pb.gz").exists());
    (files, expected.content())
}

/// Set on every resource by profcol before it sends, so that the Go marshaler's
/// references (`key_strindex`, `string_value_strindex`) have something to rewrite.
const RESOURCE_ATTRIBUTES: [&str; 2] = ["service.name=checkout", "service.instance.id=7"];

fn resource_processor() -> &'static str {
    "  resource:\n    attributes:\n      - {key: service.name, value: checkout, action: upsert}\n      - {key: service.instance.id, value: 7, action: upsert}\n"
}

/// A Go collector config: one OTLP receiver (`grpc` or `http`) per sink, each in its own
/// pipeline, metrics off (tests run side by side), plus whatever `extra` adds.
fn go_config(sinks: &[(&str, &str, u16)], dir: &Path, extra_exporters: &str) -> String {
    let mut receivers = String::from("receivers:\n");
    let mut exporters = String::from("exporters:\n");
    let mut pipelines = String::new();
    for (name, protocol, port) in sinks {
        receivers += &format!(
            "  otlp/{name}:\n    protocols:\n      {protocol}:\n        endpoint: 127.0.0.1:{port}\n"
        );
        exporters += &format!(
            "  profilesink/{name}:\n    path: {}\n",
            dir.join(format!("{name}.pb")).display()
        );
        pipelines += &format!(
            "    profiles/{name}:\n      receivers: [otlp/{name}]\n      exporters: [profilesink/{name}]\n"
        );
    }
    format!(
        "{receivers}{exporters}{extra_exporters}service:\n  telemetry:\n    metrics:\n      level: none\n    logs:\n      level: warn\n  pipelines:\n{pipelines}"
    )
}

fn profcol_config(
    health: u16,
    metrics: u16,
    receivers: &str,
    exporters: &str,
    ids: &str,
) -> String {
    format!(
        "receivers:\n{receivers}processors:\n{}exporters:\n{exporters}extensions:\n  health_check:\n    endpoint: 127.0.0.1:{health}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{metrics}\n  pipelines:\n    profiles:\n      receivers: [{}]\n      processors: [resource]\n      exporters: [{ids}]\n",
        resource_processor(),
        receivers
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .map(|l| l.trim().trim_end_matches(':'))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn file_receiver(files: &[PathBuf]) -> String {
    let globs: Vec<String> = files
        .iter()
        .map(|f| format!("{:?}", f.display().to_string()))
        .collect();
    format!(
        "  pprof:\n    file:\n      include: [{}]\n      interval: 1h\n",
        globs.join(", ")
    )
}

fn show(s: &PeerSummary) -> String {
    serde_json::to_string_pretty(s).unwrap_or_default()
}

/// Waits until a framed file holds `expected` (profcol's exporters flush on their own time).
fn wait_for(path: &Path, expected: &PeerSummary, what: &str, logs: impl Fn() -> String) {
    assert!(
        expected.samples > 0 && !expected.stacks.is_empty(),
        "nothing to wait for"
    );
    let arrived = || summarize_framed_so_far(path).is_some_and(|s| s.content() == *expected);
    assert!(
        eventually(Duration::from_secs(30), arrived),
        "{what} never held what was sent.\nexpected {}\ngot {}\n{}",
        show(expected),
        show(&summarize_framed_so_far(path).unwrap_or_default().content()),
        logs()
    );
}

#[test]
fn profcol_exporters_deliver_every_sample_to_the_go_collector() {
    let (Some(otelcol), Some(check)) = (go_peer("otelcol-peer"), go_peer("pdatacheck")) else {
        return;
    };
    let dir = scratch("go-collector-in");
    let (fixtures, expected) = fixtures_as_profcol_sends_them(&dir);

    let variants: Vec<(&str, &str, &str, u16)> = vec![
        ("grpc_gzip", "grpc", "gzip", free_port()),
        ("grpc_zstd", "grpc", "zstd", free_port()),
        ("grpc_none", "grpc", "none", free_port()),
        ("http_gzip", "http", "gzip", free_port()),
        ("http_zstd", "http", "zstd", free_port()),
        ("http_none", "http", "none", free_port()),
        // otelcol's own snappy: framed over gRPC, a raw block as `snappy` over HTTP, and
        // the framing format as `x-snappy-framed`.
        ("grpc_snappy", "grpc", "snappy", free_port()),
        ("http_snappy", "http", "snappy", free_port()),
        ("http_snappy_framed", "http", "x-snappy-framed", free_port()),
    ];
    let sinks: Vec<(&str, &str, u16)> = variants
        .iter()
        .map(|(n, p, _, port)| (*n, *p, *port))
        .collect();
    let ports: Vec<u16> = variants.iter().map(|v| v.3).collect();
    let go = GoCollector::start(
        &otelcol,
        &dir,
        "otelcol",
        &go_config(&sinks, &dir, ""),
        &ports,
    );

    let mut exporters = String::new();
    let mut ids = Vec::new();
    for (name, protocol, compression, port) in &variants {
        if *protocol == "grpc" {
            exporters += &format!(
                "  otlp/{name}:\n    endpoint: 127.0.0.1:{port}\n    tls: {{insecure: true}}\n    compression: {compression}\n"
            );
            ids.push(format!("otlp/{name}"));
        } else {
            exporters += &format!(
                "  otlphttp/{name}:\n    endpoint: http://127.0.0.1:{port}\n    compression: {compression}\n"
            );
            ids.push(format!("otlphttp/{name}"));
        }
    }
    let local_proto = dir.join("profcol.pb");
    let local_json = dir.join("profcol.jsonl");
    exporters += &format!(
        "  file/proto:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n  file/json:\n    path: {}\n    format: json\n    flush_interval: 100ms\n",
        local_proto.display(),
        local_json.display()
    );
    ids.extend(["file/proto".into(), "file/json".into()]);
    let (health, metrics) = (free_port(), free_port());
    let profcol = Collector::start(
        &dir,
        "profcol",
        &profcol_config(
            health,
            metrics,
            &file_receiver(&fixtures),
            &exporters,
            &ids.join(", "),
        ),
        health,
        metrics,
    );
    wait_for(
        &local_proto,
        &expected,
        "profcol's own file exporter",
        || profcol.logs(),
    );
    for (name, ..) in &variants {
        wait_for(&dir.join(format!("{name}.pb")), &expected, name, || {
            format!("{}\n{}", profcol.logs(), go.logs())
        });
    }
    assert!(profcol.stop().success());
    let go_logs = go.stop();

    for (name, ..) in &variants {
        let sink = dir.join(format!("{name}.pb"));
        // The Go collector's own reading of what it received and re-marshaled...
        let seen_by_go = pdatacheck(&check, "proto-framed", &sink)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{go_logs}"));
        assert_eq!(
            seen_by_go.content(),
            expected,
            "{name}: the Go collector's view differs"
        );
        // ...and profcol's reading of the Go marshaler's output, whose resource attributes
        // are string-table references.
        let raw = std::fs::read(&sink).expect("sink file");
        assert!(
            raw.windows(b"checkout".len()).any(|w| w == b"checkout"),
            "{name}: the sink holds no resource attribute at all"
        );
        assert_eq!(
            summarize_framed(&sink).content(),
            expected,
            "{name}: profcol's reading of Go's bytes"
        );
    }
    // pdata reads both of profcol's file formats.
    for (format, path) in [("proto-framed", &local_proto), ("json-lines", &local_json)] {
        let seen = pdatacheck(&check, format, path).unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(
            seen.content(),
            expected,
            "pdata's reading of profcol's {format} file"
        );
    }
}

/// How the Go collector in [`chain`] compresses toward the last profcol, per exporter.
#[derive(Clone, Copy)]
struct GoCompression {
    grpc: &'static str,
    http: &'static str,
    json: &'static str,
}

/// otelcol's default, gzip, on all three.
const GO_DEFAULT_COMPRESSION: GoCompression = GoCompression {
    grpc: "gzip",
    http: "gzip",
    json: "gzip",
};

/// profcol's pprof exporter output, as `go tool pprof -raw` prints it, all files joined.
fn pprof_files_raw(dir: &Path) -> String {
    let mut raw = String::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.to_string_lossy().ends_with(".pb.gz"));
    files.sort();
    for f in files {
        raw += &go_tool_pprof_raw(&f);
    }
    raw
}

/// profcol → Go collector → profcol over gRPC, HTTP and HTTP with OTLP/JSON. The Go collector re-marshals
/// what it forwards (its HTTP exporter turns resource attributes into string-table
/// references); profcol's receiver must resolve them, and what arrives must be what left.
fn chain(
    dir: &Path,
    otelcol: &Path,
    first_leg: (&str, &str),
    expected: Option<&PeerSummary>,
    go_compression: GoCompression,
) -> (PathBuf, PathBuf, PathBuf, Collector, GoCollector, Collector) {
    let (go_in, last_grpc, last_http, last_json) =
        (free_port(), free_port(), free_port(), free_port());
    // The last profcol: one receiver per protocol, each into its own file; gRPC also
    // into pprof files.
    let (grpc_out, http_out, json_out, pprof_dir) = (
        dir.join("last-grpc.pb"),
        dir.join("last-http.pb"),
        dir.join("last-json.pb"),
        dir.join("pprof"),
    );
    let (h3, m3) = (free_port(), free_port());
    let last = Collector::start(
        dir,
        "last",
        &format!(
            "receivers:\n  otlp/grpc:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{last_grpc}\n  otlp/http:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{last_http}\n  otlp/json:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{last_json}\nexporters:\n  file/grpc:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n  file/http:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n  file/json:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n  pprof:\n    directory: {}\nextensions:\n  health_check:\n    endpoint: 127.0.0.1:{h3}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{m3}\n  pipelines:\n    profiles/grpc:\n      receivers: [otlp/grpc]\n      exporters: [file/grpc, pprof]\n    profiles/http:\n      receivers: [otlp/http]\n      exporters: [file/http]\n    profiles/json:\n      receivers: [otlp/json]\n      exporters: [file/json]\n",
            grpc_out.display(),
            http_out.display(),
            json_out.display(),
            pprof_dir.display()
        ),
        h3,
        m3,
    );
    // The Go collector between: its otlp_grpc and otlp_http exporters (v0.165.0's names
    // for otlp and otlphttp) both forward everything.
    let go = GoCollector::start(
        otelcol,
        dir,
        "otelcol",
        &format!(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{go_in}\nexporters:\n  otlp_grpc:\n    endpoint: 127.0.0.1:{last_grpc}\n    tls: {{insecure: true}}\n    compression: {}\n  otlp_http:\n    endpoint: http://127.0.0.1:{last_http}\n    compression: {}\n  otlp_http/json:\n    endpoint: http://127.0.0.1:{last_json}\n    encoding: json\n    compression: {}\n  debug:\n    verbosity: basic\nservice:\n  telemetry:\n    metrics:\n      level: none\n    logs:\n      level: warn\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [otlp_grpc, otlp_http, otlp_http/json, debug]\n",
            go_compression.grpc, go_compression.http, go_compression.json
        ),
        &[go_in],
    );
    let (receivers, ids) = first_leg;
    let (h1, m1) = (free_port(), free_port());
    let first = Collector::start(
        dir,
        "first",
        &profcol_config(
            h1,
            m1,
            receivers,
            &format!(
                "  otlp:\n    endpoint: 127.0.0.1:{go_in}\n    tls: {{insecure: true}}\n{}",
                ids
            ),
            "otlp, file",
        ),
        h1,
        m1,
    );
    if let Some(expected) = expected {
        for (what, path) in [
            ("gRPC", &grpc_out),
            ("HTTP", &http_out),
            ("HTTP with JSON", &json_out),
        ] {
            wait_for(
                path,
                expected,
                &format!("the last profcol over {what}"),
                || format!("{}\n{}\n{}", first.logs(), go.logs(), last.logs()),
            );
        }
    }
    (grpc_out, http_out, pprof_dir, first, go, last)
}

#[test]
fn the_go_collector_forwards_to_profcol_over_grpc_and_http_with_references_resolved() {
    let Some(otelcol) = go_peer("otelcol-peer") else {
        return;
    };
    if !profcol_integration::have_peer("go", "reading the chain's pprof files") {
        return;
    }
    let dir = scratch("go-collector-chain");
    let (fixtures, expected) = fixtures_as_profcol_sends_them(&dir);
    let sent = dir.join("first.pb");
    let local = format!(
        "  file:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n",
        sent.display()
    );
    let (_, _, pprof_dir, first, go, last) = chain(
        &dir,
        &otelcol,
        (&file_receiver(&fixtures), &local),
        Some(&expected),
        GO_DEFAULT_COMPRESSION,
    );
    assert_eq!(summarize_framed(&sent).content(), expected);
    assert!(first.stop().success());
    let go_logs = go.stop();
    assert!(last.stop().success(), "{}", go_logs);
    // And what came out at the end is pprof that Go's own tool reads, with the
    // fixtures' functions in it.
    let raw = pprof_files_raw(&pprof_dir);
    for function in ["main.hashLoop", "main.allocLarge", "fib"] {
        assert!(
            raw.contains(function),
            "{function} missing from the chain's pprof:\n{raw}"
        );
    }
}

/// The Go collector's snappy (framed over gRPC, a raw block as `snappy` and the framing
/// format as `x-snappy-framed` over HTTP) reaches profcol whole, and profcol's receivers
/// count the bytes as they came and after decompression.
#[test]
fn the_go_collector_sends_snappy_that_profcol_reads_and_counts() {
    let Some(otelcol) = go_peer("otelcol-peer") else {
        return;
    };
    let dir = scratch("go-collector-snappy");
    let (fixtures, expected) = fixtures_as_profcol_sends_them(&dir);
    let local = format!(
        "  file:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n",
        dir.join("first.pb").display()
    );
    let (.., first, go, last) = chain(
        &dir,
        &otelcol,
        (&file_receiver(&fixtures), &local),
        Some(&expected),
        GoCompression {
            grpc: "snappy",
            http: "snappy",
            json: "x-snappy-framed",
        },
    );
    for (receiver, transport) in [
        ("otlp/grpc", "grpc"),
        ("otlp/http", "http"),
        ("otlp/json", "http"),
    ] {
        let labels = [("receiver", receiver), ("transport", transport)];
        let wire = last.metric("otelcol_receiver_received_wire_bytes_total", &labels);
        let plain = last.metric(
            "otelcol_receiver_received_uncompressed_bytes_total",
            &labels,
        );
        assert!(
            wire > 0.0 && plain > wire,
            "{receiver}: {wire} bytes on the wire, {plain} decompressed"
        );
    }
    assert!(first.stop().success());
    let go_logs = go.stop();
    assert!(last.stop().success(), "{go_logs}");
}

/// The whole way a node's profiles travel: profcol's eBPF profiler → the Go collector as a
/// gateway → profcol → pprof files, which `go tool pprof` reads with the profiled
/// program's own call chain in them. As root.
#[test]
fn ebpf_profiles_cross_the_go_collector_and_end_as_pprof_go_reads() {
    if !profcol_integration::root() {
        return;
    }
    let Some(otelcol) = go_peer("otelcol-peer") else {
        return;
    };
    let dir = scratch("go-collector-ebpf");
    let burner = dir.join("burner");
    let built = std::process::Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&burner)
        .arg(repo().join("integration/peers/native/burner.c"))
        .status()
        .expect("gcc");
    assert!(built.success());
    let sent = dir.join("first.pb");
    let receivers = "  profiling:\n    samples_per_second: 99\n    reporter_interval: 1s\n    include:\n      executable_names: [\"^burner$\"]\n";
    let local = format!(
        "  file:\n    path: {}\n    format: proto\n    flush_interval: 100ms\n",
        sent.display()
    );
    let (grpc_out, http_out, pprof_dir, first, go, last) = chain(
        &dir,
        &otelcol,
        (receivers, &local),
        None,
        GO_DEFAULT_COMPRESSION,
    );
    let status = std::process::Command::new(&burner)
        .arg("2")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("burner");
    assert!(status.success());
    // Everything the first profcol sent arrives at the last, by both ways.
    assert!(
        eventually(Duration::from_secs(20), || {
            summarize_framed_so_far(&sent).is_some_and(|s| s.samples > 0)
        }),
        "the profiler sent nothing:\n{}",
        first.logs()
    );
    assert!(first.stop().success());
    let expected = summarize_framed(&sent).content();
    assert!(
        expected
            .stacks
            .keys()
            .any(|k| k.contains("burner_outer;burner_middle;burner_leaf")),
        "the burner's chain is not in what was sent: {}",
        show(&expected)
    );
    for (what, path) in [("gRPC", &grpc_out), ("HTTP", &http_out)] {
        wait_for(
            path,
            &expected,
            &format!("the last profcol over {what}"),
            || format!("{}\n{}", go.logs(), last.logs()),
        );
    }
    go.stop();
    assert!(last.stop().success());
    let raw = pprof_files_raw(&pprof_dir);
    for function in ["burner_leaf", "burner_middle", "burner_outer"] {
        assert!(
            raw.contains(function),
            "{function} missing from the pprof files:\n{raw}"
        );
    }
}

/// `profcol convert`'s OTLP protobuf and OTLP/JSON, read by Go's pdata, mean what profcol
/// meant, for every fixture.
#[test]
fn go_pdata_reads_profcol_convert_output_as_profcol_does() {
    let Some(check) = go_peer("pdatacheck") else {
        return;
    };
    let dir = scratch("go-pdata-convert");
    let (fixtures, _) = fixtures_as_profcol_sends_them(&dir);
    for f in &fixtures {
        let proto = dir.join("out.pb");
        let json = dir.join("out.json");
        for (to, out) in [("otlp", &proto), ("otlp-json", &json)] {
            profcol_ok(&[
                "convert",
                "--to",
                to,
                "-o",
                out.to_str().expect("utf-8"),
                f.to_str().expect("utf-8"),
            ]);
        }
        let mut ours = PeerSummary::default();
        ours.add(&ProfileBatch::decode(&std::fs::read(&proto).expect("out.pb")).expect("decode"));
        assert!(ours.samples > 0, "{}: no samples", f.display());
        for (format, path) in [("proto", &proto), ("json", &json)] {
            let seen = pdatacheck(&check, format, path)
                .unwrap_or_else(|e| panic!("{}: {format}: {e}", f.display()));
            assert_eq!(seen, ours, "{}: pdata's reading of {format}", f.display());
        }
    }
}
