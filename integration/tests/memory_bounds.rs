//! The model's worst growth over its input, measured: each shape (real profiles and the
//! adversarial ones, where every message is as small on the wire as it can be) is decoded
//! by the built binary (`profcol convert`, which decodes, validates, translates and
//! re-encodes as a receiver does), and its peak resident set over a run on a tiny input
//! must stay within what the receivers reserve per decompressed input byte before they
//! decode: `DECODE_AMPLIFICATION` (4) for OTLP, plus the input and the re-encoded output
//! that `convert` also holds; `PPROF_DECODE_AMPLIFICATION` (24) for pprof, which grows as
//! it becomes OTLP (one sample per sample type, one attribute per distinct label).

use std::path::Path;
use std::process::Command;

use profcol_integration::{fixture, profcol_bin, scratch};
use profcol_proto::otlp::collector::profiles::v1development::ExportProfilesServiceRequest;
use profcol_proto::otlp::common::v1::{AnyValue, ArrayValue, any_value::Value};
use profcol_proto::otlp::profiles::v1development::{
    KeyValueAndUnit, Line, Location, Profile, ProfilesDictionary, ResourceProfiles, Sample,
    ScopeProfiles, Stack,
};
use profcol_proto::pprof as pp;
use prost::Message;

/// What receivers reserve per decompressed byte of OTLP (profcol-pdata's
/// `DECODE_AMPLIFICATION`), and what `convert` holds besides: its input and its output.
const OTLP_BOUND: u64 = 4 + 2;
/// What the pprof receivers reserve per decompressed byte (`PPROF_DECODE_AMPLIFICATION`).
const PPROF_BOUND: u64 = 24;
/// What the OTLP receiver reserves per byte of OTLP/JSON (`JSON_DECODE_AMPLIFICATION`),
/// and the input and output.
const JSON_BOUND: u64 = 80 + 2;

/// OTLP/JSON whose elements are as small as they can be.
fn json_shapes() -> Vec<(&'static str, Vec<u8>)> {
    let list = |head: &str, element: &str, tail: &str| {
        let n = TARGET_BYTES / (element.len() + 1);
        let mut out = head.as_bytes().to_vec();
        for i in 0..n {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(element.as_bytes());
        }
        out.extend_from_slice(tail.as_bytes());
        out
    };
    vec![
        (
            "otlp-json: one-value samples",
            list(
                r#"{"resourceProfiles":[{"scopeProfiles":[{"profiles":[{"samples":["#,
                r#"{"values":[1]}"#,
                "]}]}]}]}",
            ),
        ),
        (
            "otlp-json: empty strings",
            list(r#"{"dictionary":{"stringTable":["#, r#""""#, "]}}"),
        ),
    ]
}

/// Decompressed size each shape is made to, large enough to dwarf the binary's own RSS.
const TARGET_BYTES: usize = 8 << 20;

/// Peak RSS in bytes of `profcol convert INPUT --to otlp`, through Python's getrusage of
/// its children (the process's own VmHWM is gone once it exits).
fn peak_rss_of_convert(input: &Path, out: &Path) -> u64 {
    let script = "import resource, subprocess, sys\n\
        r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n\
        sys.stderr.write(r.stderr.decode(errors='replace'))\n\
        print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(profcol_bin())
        .args(["convert", &input.to_string_lossy(), "--to", "otlp", "-o"])
        .arg(out)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut fields = text.split_whitespace();
    let code: i32 = fields
        .next()
        .and_then(|c| c.parse().ok())
        .expect("exit code");
    let kib: u64 = fields.next().and_then(|k| k.parse().ok()).expect("maxrss");
    assert_eq!(
        code,
        0,
        "{}: {}",
        input.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    kib * 1024
}

fn strings(extra: &[&str]) -> Vec<String> {
    std::iter::once("")
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// Repeats `one` until the encoding reaches [`TARGET_BYTES`].
fn enough<T: Clone>(one: T, wire_bytes_each: usize) -> Vec<T> {
    vec![one; TARGET_BYTES / wire_bytes_each.max(1)]
}

/// As [`enough`], after the zero value a dictionary table starts with.
fn table<T: Clone + Default>(one: T, wire_bytes_each: usize) -> Vec<T> {
    let mut rows = vec![T::default()];
    rows.extend(enough(one, wire_bytes_each));
    rows
}

fn pprof_shapes() -> Vec<(&'static str, Vec<u8>)> {
    let base = || pp::Profile {
        sample_type: vec![pp::ValueType { r#type: 1, unit: 2 }],
        string_table: strings(&["samples", "count"]),
        ..Default::default()
    };
    let mut shapes = Vec::new();
    // Samples with one zero value and no stack: 4 bytes each on the wire.
    let mut p = base();
    p.sample = enough(
        pp::Sample {
            value: vec![0],
            ..Default::default()
        },
        4,
    );
    shapes.push(("pprof: empty one-value samples", p.encode_to_vec()));
    // Sixteen sample types: each sample becomes sixteen OTLP samples.
    let mut p = base();
    p.sample_type = vec![pp::ValueType { r#type: 1, unit: 2 }; 16];
    p.sample = enough(
        pp::Sample {
            value: vec![0; 16],
            ..Default::default()
        },
        19,
    );
    shapes.push(("pprof: 16 sample types, zero values", p.encode_to_vec()));
    // Samples with distinct numeric label sets.
    let mut p = base();
    p.sample = (0..TARGET_BYTES / 12)
        .map(|n| pp::Sample {
            value: vec![1],
            label: vec![pp::Label {
                key: 1,
                num: n as i64,
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    shapes.push(("pprof: a distinct label on every sample", p.encode_to_vec()));
    // Locations with empty lines, and a string table of empty strings.
    let mut p = base();
    p.location = (1..TARGET_BYTES as u64 / 8)
        .map(|id| pp::Location {
            id,
            line: vec![pp::Line::default(); 2],
            ..Default::default()
        })
        .collect();
    shapes.push(("pprof: locations of empty lines", p.encode_to_vec()));
    let mut p = base();
    p.string_table.extend(enough(String::new(), 2));
    shapes.push(("pprof: empty strings", p.encode_to_vec()));
    shapes
}

fn otlp_shapes() -> Vec<(&'static str, Vec<u8>)> {
    let with = |dictionary: ProfilesDictionary, samples: Vec<Sample>| {
        ExportProfilesServiceRequest {
            dictionary: Some(dictionary),
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    };
    let mut shapes = Vec::new();
    shapes.push((
        "otlp: one-value samples",
        with(
            ProfilesDictionary::default(),
            enough(
                Sample {
                    values: vec![0],
                    ..Default::default()
                },
                5,
            ),
        ),
    ));
    let one = vec![Sample {
        values: vec![1],
        ..Default::default()
    }];
    shapes.push((
        "otlp: locations of empty lines",
        with(
            ProfilesDictionary {
                location_table: table(
                    Location {
                        lines: vec![Line::default(); 2],
                        ..Default::default()
                    },
                    6,
                ),
                ..Default::default()
            },
            one.clone(),
        ),
    ));
    shapes.push((
        "otlp: empty stacks",
        with(
            ProfilesDictionary {
                stack_table: enough(Stack::default(), 2),
                ..Default::default()
            },
            one.clone(),
        ),
    ));
    shapes.push((
        "otlp: attribute entries with empty arrays",
        with(
            ProfilesDictionary {
                attribute_table: table(
                    KeyValueAndUnit {
                        value: Some(AnyValue {
                            value: Some(Value::ArrayValue(ArrayValue {
                                values: vec![AnyValue::default(); 4],
                            })),
                        }),
                        ..Default::default()
                    },
                    14,
                ),
                ..Default::default()
            },
            one.clone(),
        ),
    ));
    shapes.push((
        "otlp: empty strings",
        with(
            ProfilesDictionary {
                string_table: enough(String::new(), 2),
                ..Default::default()
            },
            one,
        ),
    ));
    shapes
}

#[test]
fn decoding_any_shape_stays_within_what_receivers_reserve() {
    let dir = scratch("memory-bounds");
    let out = dir.join("out.otlp");
    let tiny = dir.join("tiny.pprof");
    std::fs::copy(fixture("go-cpu.pb.gz"), &tiny).expect("fixture");
    let floor = peak_rss_of_convert(&tiny, &out);
    let mut report = vec![format!("baseline (a 2 KB profile): {} MiB", floor >> 20)];
    let mut worst = 0.0f64;
    let shapes = pprof_shapes()
        .into_iter()
        .map(|s| (s, PPROF_BOUND))
        .chain(otlp_shapes().into_iter().map(|s| (s, OTLP_BOUND)))
        .chain(json_shapes().into_iter().map(|s| (s, JSON_BOUND)));
    for ((name, bytes), bound) in shapes {
        let input = dir.join("input.bin");
        std::fs::write(&input, &bytes).expect("write shape");
        let peak = peak_rss_of_convert(&input, &out);
        let growth = peak.saturating_sub(floor) as f64 / bytes.len() as f64;
        worst = worst.max(growth);
        report.push(format!(
            "{name:<45} {:>6} KiB in, peak {:>5} MiB: {growth:>5.1} bytes per byte",
            bytes.len() >> 10,
            peak >> 20
        ));
        assert!(
            peak.saturating_sub(floor) <= bound * bytes.len() as u64,
            "{name}: {growth:.1} bytes per input byte, over {bound}\n{}",
            report.join("\n")
        );
    }
    report.push(format!("worst: {worst:.1} bytes per input byte"));
    println!("{}", report.join("\n"));
}
