//! `profcol convert`, `inspect` and `wire-size` end to end, judged by independent readers:
//! `go tool pprof -raw` before and after the pprof → OTLP → pprof round trip, and the
//! official Python opentelemetry-proto decoder on profcol's OTLP output.

use std::process::Command;

use profcol_integration::{
    fixture, go_tool_pprof_raw, have_peer, profcol, profcol_ok, python, scratch,
};

const FIXTURES: &[&str] = &[
    "go-cpu.pb.gz",
    "go-heap.pb.gz",
    "go-allocs.pb.gz",
    "go-goroutine.pb.gz",
    "go-mutex.pb.gz",
    "go126-cpu.pb.gz",
    "go126-heap.pb.gz",
    "go126-allocs.pb.gz",
    "go126-goroutine.pb.gz",
    "go126-mutex.pb.gz",
    "node-wall.pb.gz",
];

#[test]
fn go_tool_pprof_sees_the_same_profile_after_the_round_trip() {
    if !have_peer("go", "the round trip as go tool pprof -raw sees it") {
        return;
    }
    let dir = scratch("raw");
    for name in FIXTURES {
        let original = fixture(name);
        let otlp = dir.join(format!("{name}.otlp"));
        let back = dir.join(format!("{name}.back.pb.gz"));
        profcol_ok(&[
            "convert",
            &original.to_string_lossy(),
            "--to",
            "otlp",
            "-o",
            &otlp.to_string_lossy(),
        ]);
        profcol_ok(&[
            "convert",
            &otlp.to_string_lossy(),
            "--to",
            "pprof",
            "-o",
            &back.to_string_lossy(),
        ]);
        let (before, after) = (go_tool_pprof_raw(&original), go_tool_pprof_raw(&back));
        assert!(
            before.contains("Samples:"),
            "{name}: go tool pprof printed no samples:\n{before}"
        );
        assert_eq!(
            after, before,
            "{name}: go tool pprof -raw differs after pprof → OTLP → pprof"
        );
    }
}

#[test]
fn go_tool_pprof_sees_the_same_profile_through_otlp_json() {
    if !have_peer(
        "go",
        "the OTLP/JSON round trip as go tool pprof -raw sees it",
    ) {
        return;
    }
    let dir = scratch("json");
    let original = fixture("go-allocs.pb.gz");
    let json = dir.join("allocs.json");
    let back = dir.join("allocs.back.pb.gz");
    profcol_ok(&[
        "convert",
        &original.to_string_lossy(),
        "--to",
        "otlp-json",
        "-o",
        &json.to_string_lossy(),
    ]);
    profcol_ok(&[
        "convert",
        &json.to_string_lossy(),
        "--to",
        "pprof",
        "-o",
        &back.to_string_lossy(),
    ]);
    assert_eq!(go_tool_pprof_raw(&back), go_tool_pprof_raw(&original));
    // The default sample type survives: go tool pprof marks it [dflt].
    assert!(go_tool_pprof_raw(&back).contains("alloc_space/bytes[dflt]"));
}

#[test]
fn python_opentelemetry_proto_reads_our_otlp() {
    let py = python();
    let probe = Command::new(&py)
        .args([
            "-c",
            "import opentelemetry.proto.profiles.v1development.profiles_pb2",
        ])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        if std::env::var("PROFCOL_REQUIRE_PEERS").is_ok_and(|v| v == "1") {
            panic!("{py} cannot import opentelemetry-proto; run scripts/test");
        }
        eprintln!("SKIP: no Python with opentelemetry-proto at {py} (scripts/test makes one)");
        return;
    }
    let dir = scratch("python");
    let checker = profcol_integration::repo().join("integration/peers/check_otlp.py");
    for name in FIXTURES {
        let otlp = dir.join(format!("{name}.otlp"));
        profcol_ok(&[
            "convert",
            &fixture(name).to_string_lossy(),
            "--to",
            "otlp",
            "-o",
            &otlp.to_string_lossy(),
        ]);
        let out = Command::new(&py)
            .arg(&checker)
            .arg(&otlp)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("checker prints JSON");
        assert_eq!(theirs["problems"], serde_json::json!([]), "{name}");
        let ours: serde_json::Value =
            serde_json::from_slice(&profcol_ok(&["inspect", "--json", &otlp.to_string_lossy()]))
                .expect("inspect JSON");
        let types = ours["sample_types"].as_array().expect("sample types");
        assert_eq!(
            types.len(),
            theirs["sample_types"].as_object().expect("object").len(),
            "{name}"
        );
        for t in types {
            let key = format!(
                "{}/{}",
                t["type"].as_str().unwrap_or(""),
                t["unit"].as_str().unwrap_or("")
            );
            let seen = &theirs["sample_types"][&key];
            assert_eq!(seen["samples"], t["samples"], "{name} {key}");
            assert_eq!(seen["total"], t["total"], "{name} {key}");
            // Every function profcol ranks by self value is a leaf Python found too.
            let leaves: Vec<&str> = seen["leaf_functions"]
                .as_array()
                .expect("leaves")
                .iter()
                .filter_map(|v| v.as_str())
                .collect();
            for top in t["top_self"].as_array().expect("top") {
                let f = top["function"].as_str().unwrap_or("");
                assert!(
                    leaves.contains(&f) || f.starts_with("0x"),
                    "{name}: {f} not a leaf in Python's reading"
                );
            }
        }
    }
}

#[test]
fn inspect_reports_known_functions_of_the_go_cpu_fixture() {
    let out: serde_json::Value = serde_json::from_slice(&profcol_ok(&[
        "inspect",
        "--json",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
    ]))
    .expect("JSON");
    assert_eq!(out["format"], "pprof");
    let first = &out["sample_types"][0];
    assert_eq!(
        (first["type"].as_str(), first["unit"].as_str()),
        (Some("cpu"), Some("nanoseconds"))
    );
    let cumulative: Vec<&str> = first["top_cumulative"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    for f in ["main.main", "main.work", "main.hashLoop"] {
        assert!(cumulative.contains(&f), "{f} missing from {cumulative:?}");
    }
    let text = String::from_utf8(profcol_ok(&[
        "inspect",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
    ]))
    .expect("utf8");
    assert!(text.contains("cpu/nanoseconds: 33 samples"), "{text}");
}

#[test]
fn every_format_converts_to_every_other() {
    let dir = scratch("matrix");
    let src = fixture("go-heap.pb.gz");
    let otlp = dir.join("h.otlp");
    let json = dir.join("h.json");
    profcol_ok(&[
        "convert",
        &src.to_string_lossy(),
        "--to",
        "otlp",
        "-o",
        &otlp.to_string_lossy(),
    ]);
    profcol_ok(&[
        "convert",
        &otlp.to_string_lossy(),
        "--to",
        "otlp-json",
        "-o",
        &json.to_string_lossy(),
    ]);
    let again = dir.join("h2.otlp");
    profcol_ok(&[
        "convert",
        &json.to_string_lossy(),
        "--to",
        "otlp",
        "-o",
        &again.to_string_lossy(),
    ]);
    assert_eq!(
        std::fs::read(&again).expect("read"),
        std::fs::read(&otlp).expect("read"),
        "JSON → OTLP gives the same bytes"
    );
    // A plain (not gzipped) pprof reads too, from stdin.
    let plain = profcol_ok(&["convert", &otlp.to_string_lossy(), "--to", "pprof"]);
    let gunzipped = dir.join("h.plain.pb");
    let mut d = flate_gunzip(&plain);
    std::fs::write(&gunzipped, &mut d).expect("write");
    let a = profcol_ok(&["inspect", "--json", &gunzipped.to_string_lossy()]);
    let b = profcol_ok(&["inspect", "--json", &src.to_string_lossy()]);
    let strip = |v: &[u8]| {
        let mut j: serde_json::Value = serde_json::from_slice(v).expect("json");
        j["file"] = serde_json::Value::Null;
        j
    };
    assert_eq!(strip(&a), strip(&b));
}

/// gunzip with the system's gzip, so the test depends on no crate of ours.
fn flate_gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .args(["-dc"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("write");
    child.wait_with_output().expect("gzip output").stdout
}

/// Runs profcol on `input` and returns (exit code, stderr).
fn fails(args: &[&str]) -> (Option<i32>, String) {
    let out = profcol(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_input_gives_one_clear_line_and_exit_code_2() {
    let dir = scratch("bad");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write");
        p.to_string_lossy().into_owned()
    };
    let good = std::fs::read(fixture("go-cpu.pb.gz")).expect("fixture");
    let plain = flate_gunzip(&good);
    let otlp = profcol_ok(&[
        "convert",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
        "--to",
        "otlp",
    ]);
    let json = String::from_utf8(profcol_ok(&[
        "convert",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
        "--to",
        "otlp-json",
    ]))
    .expect("utf8");

    let cases: Vec<(String, &str)> = vec![
        (write("empty", b""), "input is empty"),
        (
            write("text", b"hello, profiles\n"),
            "neither JSON nor a protobuf message",
        ),
        (
            write("truncated.pb", &plain[..plain.len() / 2]),
            "truncated protobuf",
        ),
        (
            write("truncated.gz", &good[..good.len() / 2]),
            "gzip data is corrupt",
        ),
        (
            write("truncated.otlp", &otlp[..otlp.len() - 3]),
            "truncated protobuf",
        ),
        (
            write(
                "bad.json",
                json.replacen("\"stackIndex\":", "\"stackIndex\":9999", 1)
                    .as_bytes(),
            ),
            "out of range of stack_table",
        ),
        (
            write(
                "sentinel.json",
                json.replacen("\"stringTable\":[\"\",", "\"stringTable\":[", 1)
                    .as_bytes(),
            ),
            "string_table[0] must be the zero value",
        ),
        (
            write("syntax.json", b"{\"resourceProfiles\": [}"),
            "invalid OTLP/JSON",
        ),
    ];
    for (path, expected) in &cases {
        let (code, stderr) = fails(&["inspect", path]);
        assert_eq!(code, Some(2), "{path}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{path}: expected {expected:?} in {stderr:?}"
        );
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{path}: one line, got {stderr:?}"
        );
        assert!(!stderr.contains("panicked"), "{path}: {stderr}");
    }

    // A gzip bomb: 200 MiB of zeros in about 200 KiB stops at the limit.
    let bomb = {
        use std::io::Write;
        let mut child = Command::new("gzip")
            .args(["-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("gzip");
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || {
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..200 {
                stdin.write_all(&zeros).expect("write");
            }
        });
        let out = child.wait_with_output().expect("gzip").stdout;
        writer.join().expect("writer");
        out
    };
    let bomb = write("bomb.gz", &bomb);
    let (code, stderr) = fails(&["inspect", &bomb]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("exceeds the limit of 67108864 bytes"),
        "{stderr}"
    );
    let (code, stderr) = fails(&[
        "convert",
        &bomb,
        "--to",
        "otlp",
        "--max-decompressed-bytes",
        "1048576",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("exceeds the limit of 1048576 bytes"),
        "{stderr}"
    );
}

#[test]
fn millions_of_strings_are_bounded_by_the_input_limit() {
    // A pprof whose string table holds three million one-byte strings: 9 MB plain.
    // It decodes within the limit and is refused under a smaller one.
    let dir = scratch("strings");
    let mut pprof = Vec::with_capacity(9 << 20);
    pprof.extend_from_slice(&[0x32, 0x00]); // string_table[0] = ""
    for _ in 0..3_000_000 {
        pprof.extend_from_slice(&[0x32, 0x01, b'x']);
    }
    pprof.extend_from_slice(&[0x0a, 0x04, 0x08, 0x01, 0x10, 0x01]); // sample_type {1, 1}
    let path = dir.join("strings.pb");
    std::fs::write(&path, &pprof).expect("write");
    let out: serde_json::Value =
        serde_json::from_slice(&profcol_ok(&["inspect", "--json", &path.to_string_lossy()]))
            .expect("json");
    assert_eq!(out["samples"], 0);
    let (code, stderr) = fails(&[
        "inspect",
        &path.to_string_lossy(),
        "--max-decompressed-bytes",
        "1000000",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("exceeds the limit of 1000000 bytes"),
        "{stderr}"
    );
}

#[test]
fn wire_size_measures_every_encoding_of_the_recorded_corpus() {
    let corpus =
        profcol_integration::repo().join("testdata/corpus/ebpf-mixed-4min-unsymbolized.otlp.pb.gz");
    let corpus = corpus.to_string_lossy();
    let figures = |merge: &str| -> serde_json::Value {
        let out = profcol_ok(&["wire-size", &corpus, "--merge", merge, "--json"]);
        serde_json::from_slice(&out).expect("wire-size --json")
    };
    let recorded = figures("1");
    assert_eq!(recorded["batches"], 26);
    assert_eq!(recorded["samples"], 9580);
    assert_eq!(recorded["rows"], 6871);
    let bytes = |v: &serde_json::Value, name: &str| -> f64 {
        v["encodings"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["encoding"] == name))
            .and_then(|e| e["bytes"].as_f64())
            .unwrap_or_else(|| panic!("{name} missing: {v}"))
    };
    // Compression helps, and the uncompressed OTLP is exactly the recorded batches.
    assert!(bytes(&recorded, "OTLP + zstd-3") < bytes(&recorded, "OTLP protobuf") / 2.0);
    assert!(bytes(&recorded, "OTLP + gzip-1") < bytes(&recorded, "OTLP protobuf") / 2.0);
    assert!(bytes(&recorded, "OTLP + snappy") < bytes(&recorded, "OTLP protobuf"));
    assert!(bytes(&recorded, "OTLP + zstd-3") < bytes(&recorded, "OTLP + snappy"));
    assert!(bytes(&recorded, "Arrow v2 + zstd") < bytes(&recorded, "Arrow v2 + lz4"));
    assert!(bytes(&recorded, "Arrow v2 + lz4") < bytes(&recorded, "Arrow v2"));
    // Merging six records into one batch sends the same samples in fewer, cheaper requests.
    let merged = figures("6");
    assert_eq!(merged["batches"], 5);
    assert_eq!(merged["samples"], 9580);
    for name in ["OTLP + zstd-3", "Arrow v2 + zstd"] {
        assert!(bytes(&merged, name) < bytes(&recorded, name), "{name}");
    }
    // Not a length-prefixed record file: one clear line, exit 2.
    let out = profcol(&["wire-size", &fixture("go-cpu.pb.gz").to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a length-prefixed ProfilesData file"),
        "{err}"
    );
}

/// A reader that stops early (`profcol inspect | head -1`) ends the command quietly,
/// with no panic.
#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(profcol_integration::profcol_bin())
        .args(["components"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Close the read end before the command writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}
