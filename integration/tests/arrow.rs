//! The `arrow` exporter end to end: the built profcol sends to a Parca-like fake
//! (`profcol_integration::parca_fake`), and every record the fake received is read by
//! pyarrow, which checks Parca's type rules and compares stacks, labels and values with
//! what the same collector's file exporter wrote from the same batches.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use profcol_integration::collector::{Collector, eventually, free_port, http};
use profcol_integration::parca_fake::{Options, ParcaFake};
use profcol_integration::{fixture, have_peer, profcol_ok, python, repo, root, scratch};

const TOKEN: &str = "Bearer parca-test-token";
const BUILD_ID: &str = "aabbccddeeff00112233445566778899aabbccdd";

/// eBPF-shaped OTLP/JSON: two processes with labels, a native unsymbolized frame with a
/// build id, a symbolized frame with an inlined function, kernel frames with and without
/// a symbol. 4 observations in 3 samples (2 timestamps, 1 timestamp, value 7 → 10).
fn ebpf_json() -> String {
    let cpu = r#""sampleType":{"typeStrindex":1,"unitStrindex":2},"periodType":{"typeStrindex":3,"unitStrindex":4},"period":"52631578","timeUnixNano":"1700000000000000000","durationNano":"5000000000""#;
    format!(
        r#"{{"resourceProfiles":[
 {{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"cart"}}}},{{"key":"process.pid","value":{{"intValue":"42"}}}}]}},
  "scopeProfiles":[{{"scope":{{"name":"test"}},"profiles":[{{{cpu},
     "samples":[{{"stackIndex":1,"attributeIndices":[4],"timestampsUnixNano":["1700000000000000010","1700000000000000020"]}},
                {{"stackIndex":2,"timestampsUnixNano":["1700000000000000030"]}}]}}]}}]}},
 {{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"db"}}}}]}},
  "scopeProfiles":[{{"profiles":[{{{cpu},"samples":[{{"stackIndex":3,"attributeIndices":[5],"values":["7"]}}]}}]}}]}}],
 "dictionary":{{
  "stringTable":["","samples","count","cpu","nanoseconds","/usr/bin/app","[kernel.kallsyms]","inner","/src/a.c","outer","do_syscall_64","profile.frame.type","native","kernel","process.executable.build_id.gnu","{BUILD_ID}","thread.name","worker","main"],
  "mappingTable":[{{}},{{"memoryStart":"93824992231424","memoryLimit":"93824993280000","fileOffset":"4096","filenameStrindex":5,"attributeIndices":[3]}},{{"filenameStrindex":6}}],
  "functionTable":[{{}},{{"nameStrindex":7,"filenameStrindex":8}},{{"nameStrindex":9,"filenameStrindex":8}},{{"nameStrindex":10}}],
  "locationTable":[{{}},
   {{"mappingIndex":1,"address":"4660","attributeIndices":[1]}},
   {{"mappingIndex":1,"address":"9029","lines":[{{"functionIndex":1,"line":"10","column":"2"}},{{"functionIndex":2,"line":"20"}}],"attributeIndices":[1]}},
   {{"mappingIndex":2,"address":"18446744071578845184","lines":[{{"functionIndex":3}}],"attributeIndices":[2]}},
   {{"mappingIndex":2,"address":"18446744071578845200","attributeIndices":[2]}}],
  "attributeTable":[{{}},{{"keyStrindex":11,"value":{{"stringValue":"native"}}}},{{"keyStrindex":11,"value":{{"stringValue":"kernel"}}}},{{"keyStrindex":14,"value":{{"stringValue":"{BUILD_ID}"}}}},{{"keyStrindex":16,"value":{{"stringValue":"worker"}}}},{{"keyStrindex":16,"value":{{"stringValue":"main"}}}}],
  "stackTable":[{{}},{{"locationIndices":[3,1,2]}},{{"locationIndices":[2]}},{{"locationIndices":[4,1]}}]}}}}"#
    )
}

/// OTLP protobuf of the Go CPU fixture (pprof-born: runtime addresses, symbolized).
fn go_cpu() -> Vec<u8> {
    profcol_ok(&[
        "convert",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
        "--to",
        "otlp",
    ])
}

fn post(port: u16, content_type: &str, body: &[u8]) -> u16 {
    http(
        port,
        "POST",
        "/v1development/profiles",
        &[("Content-Type", content_type)],
        body,
    )
    .map_or(0, |r| r.status)
}

/// Pushes the two inputs (eBPF-shaped JSON, Go CPU protobuf): two batches.
fn push_both(port: u16) {
    assert_eq!(post(port, "application/json", ebpf_json().as_bytes()), 200);
    assert_eq!(post(port, "application/x-protobuf", &go_cpu()), 200);
}

struct Ports {
    http: u16,
    health: u16,
    metrics: u16,
}

fn ports() -> Ports {
    Ports {
        http: free_port(),
        health: free_port(),
        metrics: free_port(),
    }
}

/// An arrow exporter block (`name`, indented) to `port`.
fn arrow_exporter(name: &str, port: u16, extra: &str) -> String {
    format!(
        "  {name}:\n    endpoint: 127.0.0.1:{port}\n    tls:\n      insecure: true\n    headers:\n      authorization: \"{TOKEN}\"\n    retry_on_failure:\n      initial_interval: 200ms\n      max_interval: 1s\n      max_elapsed_time: 60s\n{extra}"
    )
}

/// OTLP/HTTP in; the given arrow exporters and a file exporter (`jsonl`) out.
fn config(p: &Ports, exporters: &[String], names: &[&str], jsonl: &Path) -> String {
    format!(
        "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{}\nexporters:\n{}  file:\n    path: {}\n    flush_interval: 100ms\nextensions:\n  health_check:\n    endpoint: 127.0.0.1:{}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{}\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [{}, file]\n",
        p.http,
        exporters.concat(),
        jsonl.display(),
        p.health,
        p.metrics,
        names.join(", ")
    )
}

/// Runs the pyarrow check; returns its JSON summary.
fn pyarrow_check(mode: &str, jsonl: &Path, files: &[PathBuf]) -> serde_json::Value {
    let out = Command::new(python())
        .arg(repo().join("integration/peers/check_arrow.py"))
        .arg(mode)
        .arg(jsonl)
        .args(files)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check_arrow.py {mode} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("summary JSON")
}

fn have_pyarrow() -> bool {
    let py = python();
    if !have_peer(&py, "the pyarrow check of Arrow records") {
        return false;
    }
    let ok = Command::new(&py)
        .args(["-c", "import pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("PROFCOL_REQUIRE_PEERS").as_deref() != Ok("1"),
            "pyarrow is required; run scripts/test"
        );
        eprintln!("SKIP: pyarrow not installed in the venv (scripts/test installs it)");
    }
    ok
}

fn samples_in(jsonl: &Path) -> usize {
    profcol_integration::otlp_json::read_samples(jsonl).len()
}

#[test]
fn v2_with_each_compression_and_v1_are_read_back_by_pyarrow() {
    if !have_pyarrow() {
        return;
    }
    let dir = scratch("arrow-formats");
    let variants = [
        ("arrow/lz4", "", "v2"),
        ("arrow/zstd", "    compression: zstd\n", "v2"),
        ("arrow/none", "    compression: none\n", "v2"),
        ("arrow/v1", "    schema: v1\n", "v1"),
    ];
    let fakes: Vec<ParcaFake> = variants
        .iter()
        .map(|(name, _, _)| {
            ParcaFake::start(0, &dir.join(name.replace('/', "-")), Options::default())
        })
        .collect();
    let exporters: Vec<String> = variants
        .iter()
        .zip(&fakes)
        .map(|((name, extra, _), fake)| arrow_exporter(name, fake.addr.port(), extra))
        .collect();
    let names: Vec<&str> = variants.iter().map(|v| v.0).collect();
    let p = ports();
    let jsonl = dir.join("in.jsonl");
    let c = Collector::start(
        &dir,
        "profcol",
        &config(&p, &exporters, &names, &jsonl),
        p.health,
        p.metrics,
    );
    push_both(p.http);
    let arrived = eventually(Duration::from_secs(20), || {
        fakes[..3].iter().all(|f| f.received().v2.len() >= 2) && fakes[3].received().v1.len() >= 2
    });
    assert!(arrived, "not every fake got both batches:\n{}", c.logs());
    assert!(eventually(Duration::from_secs(10), || samples_in(&jsonl) > 0));
    assert!(c.stop().success());

    let mut sizes = Vec::new();
    let mut totals = Vec::new();
    for ((name, _, mode), fake) in variants.iter().zip(&fakes) {
        let r = fake.received();
        assert!(
            r.authorization.iter().all(|a| a == TOKEN),
            "{name}: {:?}",
            r.authorization
        );
        assert!(r.v1_errors.is_empty(), "{name}: {:?}", r.v1_errors);
        let files: Vec<PathBuf> = if *mode == "v2" {
            assert_eq!(r.v2.len(), 2, "{name}: one request per batch");
            sizes.push(
                r.v2.iter()
                    .map(|f| std::fs::metadata(f).expect("file").len())
                    .sum::<u64>(),
            );
            r.v2.clone()
        } else {
            assert_eq!(r.v1.len(), 2, "{name}");
            r.v1.iter()
                .flat_map(|(a, b)| [a.clone(), b.clone()])
                .collect()
        };
        let summary = pyarrow_check(mode, &jsonl, &files);
        let labels: Vec<&str> = summary["label_names"]
            .as_array()
            .expect("names")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert!(
            ["process_pid", "service_name", "thread_name"]
                .iter()
                .all(|l| labels.contains(l)),
            "{name}: {summary}"
        );
        totals.push(summary["total_value"].as_i64().expect("total"));
    }
    // The same input everywhere: the same total, and compression makes v2 smaller.
    assert!(totals.windows(2).all(|w| w[0] == w[1]), "{totals:?}");
    let (lz4, zstd, none) = (sizes[0], sizes[1], sizes[2]);
    assert!(
        lz4 < none && zstd < none,
        "lz4 {lz4}, zstd {zstd}, none {none}"
    );
}

#[test]
fn an_unreachable_server_that_comes_up_later_gets_everything() {
    if !have_pyarrow() {
        return;
    }
    let dir = scratch("arrow-outage");
    let port = free_port();
    let p = ports();
    let jsonl = dir.join("in.jsonl");
    let c = Collector::start(
        &dir,
        "profcol",
        &config(&p, &[arrow_exporter("arrow", port, "")], &["arrow"], &jsonl),
        p.health,
        p.metrics,
    );
    push_both(p.http);
    push_both(p.http);
    std::thread::sleep(Duration::from_secs(3));
    let fake = ParcaFake::start(port, &dir.join("fake"), Options::default());
    assert!(
        eventually(Duration::from_secs(30), || fake.received().v2.len() >= 4),
        "{:?}\n{}",
        fake.received(),
        c.logs()
    );
    assert_eq!(
        c.metric("otelcol_exporter_send_failed_profile_samples_total", &[]),
        0.0
    );
    assert!(
        c.logs().contains("retrying"),
        "retried while the server was down"
    );
    assert!(c.stop().success());
    let files = fake.received().v2;
    assert_eq!(files.len(), 4, "nothing lost, nothing twice");
    pyarrow_check("v2", &jsonl, &files);
}

/// Runs the exporter against a fake set up to refuse, pushes one batch (3 samples), and
/// checks the refusal is permanent: counted as failed, one attempt only, and logged with
/// what the server said (`reason`).
fn assert_one_counted_permanent_failure(name: &str, options: Options, reason: &[&str]) {
    let dir = scratch(name);
    let fake = ParcaFake::start(0, &dir.join("fake"), options);
    let p = ports();
    let jsonl = dir.join("in.jsonl");
    let c = Collector::start(
        &dir,
        "profcol",
        &config(
            &p,
            &[arrow_exporter("arrow", fake.addr.port(), "")],
            &["arrow"],
            &jsonl,
        ),
        p.health,
        p.metrics,
    );
    assert_eq!(
        post(p.http, "application/json", ebpf_json().as_bytes()),
        200
    );
    let failed = || {
        c.metric(
            "otelcol_exporter_send_failed_profile_samples_total",
            &[("exporter", "arrow")],
        )
    };
    assert!(
        eventually(Duration::from_secs(10), || failed() == 3.0),
        "failed = {}:\n{}",
        failed(),
        c.logs()
    );
    // Not retried: one attempt only.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(fake.received().refused, 1);
    assert!(fake.received().v2.is_empty());
    let logs = c.logs();
    assert!(reason.iter().all(|r| logs.contains(r)), "{logs}");
    assert!(c.stop().success());
}

#[test]
fn invalid_argument_is_permanent_logged_and_counted() {
    assert_one_counted_permanent_failure(
        "arrow-invalid",
        Options {
            fail_writes: Some(tonic::Code::InvalidArgument),
            ..Default::default()
        },
        &["InvalidArgument", "the fake refuses this write"],
    );
}

/// A Go gRPC server refuses a message over its receive limit with RESOURCE_EXHAUSTED and
/// no RetryInfo: not retried, as the otlp exporter does.
#[test]
fn a_record_over_the_servers_limit_is_a_permanent_counted_failure() {
    assert_one_counted_permanent_failure(
        "arrow-oversize",
        Options {
            max_message_bytes: Some(512),
            ..Default::default()
        },
        &["larger than max"],
    );
}

// ---- debuginfo from the eBPF receiver -------------------------------------------------

/// The GNU build id `readelf -n` shows for `path`.
fn gnu_build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .expect("readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .expect("a GNU build id")
}

/// Every `mapping_build_id` in the v2 streams (read with arrow-rs).
fn build_ids_sent(files: &[PathBuf]) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for f in files {
        let bytes = std::fs::read(f).expect("stream");
        let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .expect("ipc");
        for batch in reader {
            let batch = batch.expect("batch");
            let list = batch.column(1).as_list_view::<i32>();
            let dict = list.values().as_dictionary::<UInt32Type>();
            let locs = dict.values().as_struct();
            let col = locs.column_by_name("mapping_build_id").expect("build id");
            let col = col.as_dictionary::<UInt32Type>();
            let values = col.values().as_string::<i32>();
            ids.extend(values.iter().flatten().map(str::to_owned));
        }
    }
    ids
}

#[test]
fn debuginfo_of_a_profiled_binary_is_uploaded_once_per_build_id() {
    if !root() {
        return;
    }
    let dir = scratch("arrow-debuginfo");
    let burner = dir.join("burner");
    let ok = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&burner)
        .arg(repo().join("integration/peers/native/burner.c"))
        .status()
        .expect("gcc");
    assert!(ok.success());
    let build_id = gnu_build_id(&burner);
    let fake = ParcaFake::start(
        0,
        &dir.join("fake"),
        Options {
            first_upload_in_progress: true,
            ..Default::default()
        },
    );
    let (health, metrics) = (free_port(), free_port());
    let config = format!(
        "receivers:\n  profiling:\n    samples_per_second: 99\n    reporter_interval: 1s\n    symbolize: false\n    include:\n      executable_names: [\"^burner$\"]\nexporters:\n  arrow:\n    endpoint: 127.0.0.1:{}\n    tls:\n      insecure: true\n    headers:\n      authorization: \"{TOKEN}\"\n    debuginfo:\n      retry_interval: 1s\nextensions:\n  health_check:\n    endpoint: 127.0.0.1:{health}\nservice:\n  extensions: [health_check]\n  telemetry:\n    metrics:\n      address: 127.0.0.1:{metrics}\n  pipelines:\n    profiles:\n      receivers: [profiling]\n      exporters: [arrow]\n",
        fake.addr.port()
    );
    let c = Collector::start(&dir, "profcol", &config, health, metrics);
    let mut child = Command::new(&burner)
        .arg("8")
        .stdout(Stdio::null())
        .spawn()
        .expect("burner");
    let uploaded = eventually(Duration::from_secs(15), || {
        fake.received().finished.contains(&build_id)
    });
    let _ = child.wait();
    assert!(uploaded, "{:?}\n{}", fake.received(), c.logs());
    // Later batches reference the same build id; it is not uploaded again.
    std::thread::sleep(Duration::from_secs(2));
    assert!(c.stop().success());
    let r = fake.received();
    let bytes = std::fs::read(&burner).expect("burner bytes");
    let uploads = &r.uploads[&build_id];
    assert_eq!(uploads.len(), 1, "exactly one upload of {build_id}");
    assert!(uploads[0] == bytes, "the uploaded bytes are the binary's");
    assert!(
        r.should_initiate[&build_id] >= 2,
        "asked again after \"in progress\": {:?}",
        r.should_initiate
    );
    for (id, u) in &r.uploads {
        assert_eq!(u.len(), 1, "{id} uploaded {} times", u.len());
    }
    // The uploaded id is the one the frames carry.
    let sent = build_ids_sent(&r.v2);
    assert!(sent.contains(&build_id), "{sent:?}");
    assert!(
        r.uploads.keys().all(|id| sent.contains(id)),
        "{:?} vs {sent:?}",
        r.uploads.keys()
    );
}
