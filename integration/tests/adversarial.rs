//! Hostile inputs against the built binary with its default limits: every receiver gets
//! the shapes that used to crash, starve or stall the collector, and must answer each
//! with 400/413/429 as fits, stay up, keep its peak RSS under a stated bound, and still
//! take good data whole afterwards.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use profcol_integration::collector::{Collector, eventually, free_port, http};
use profcol_integration::{fixture, profcol_ok, samples_in_jsonl, scratch};
use profcol_proto::otlp::collector::profiles::v1development::ExportProfilesServiceRequest;
use profcol_proto::otlp::common::v1::{AnyValue, ArrayValue, any_value::Value};
use profcol_proto::otlp::profiles::v1development::{
    KeyValueAndUnit, Profile, ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack,
};
use profcol_proto::pprof as pp;
use prost::Message;

/// The bound this suite holds the collector's peak RSS to, hostile shapes and the
/// parallel burst included: each receiver's decoding budget (512 MiB by default) plus
/// what the pipeline holds.
const PEAK_RSS_BOUND_MIB: u64 = 1536;

struct Ports {
    otlp_http: u16,
    otlp_grpc: u16,
    pprof: u16,
    health: u16,
    metrics: u16,
}

fn config(p: &Ports, out: &Path) -> String {
    format!(
        "receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
  pprof:
    server:
      endpoint: 127.0.0.1:{pprof}
processors:
  memory_limiter:
    check_interval: 100ms
    limit_mib: 768
exporters:
  file:
    path: {out}
    flush_interval: 100ms
extensions:
  health_check:
    endpoint: 127.0.0.1:{health}
service:
  extensions: [health_check]
  telemetry:
    metrics:
      address: 127.0.0.1:{metrics}
  pipelines:
    profiles:
      receivers: [otlp, pprof]
      processors: [memory_limiter]
      exporters: [file]
",
        grpc = p.otlp_grpc,
        http = p.otlp_http,
        pprof = p.pprof,
        out = out.display(),
        health = p.health,
        metrics = p.metrics,
    )
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

fn strings(extra: &[&str]) -> Vec<String> {
    std::iter::once("")
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// A pprof of `samples` one-frame samples: 8 MB of them is the burst that used to take
/// RSS to several GB.
fn tiny_samples_pprof(samples: usize) -> Vec<u8> {
    pp::Profile {
        sample_type: vec![pp::ValueType { r#type: 1, unit: 2 }],
        sample: (0..samples)
            .map(|n| pp::Sample {
                location_id: vec![1],
                value: vec![n as i64 % 100 + 1],
                ..Default::default()
            })
            .collect(),
        location: vec![pp::Location {
            id: 1,
            address: 0x1000,
            ..Default::default()
        }],
        string_table: strings(&["samples", "count"]),
        ..Default::default()
    }
    .encode_to_vec()
}

/// One hostile request: where it goes, what it is, and the statuses that are right.
struct Hostile {
    name: &'static str,
    port: u16,
    path: String,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
    expect: &'static [u16],
}

fn hostile_inputs(p: &Ports) -> Vec<Hostile> {
    const PPROF: &str = "/v1/pprof";
    const OTLP: &str = "/v1development/profiles";
    let otlp_proto = vec![("Content-Type", "application/x-protobuf")];
    let otlp_json = vec![("Content-Type", "application/json")];
    let gz = |mut h: Vec<(&'static str, &'static str)>| {
        h.push(("Content-Encoding", "gzip"));
        h
    };
    let long = "v".repeat(4 << 20);
    let mut out = Vec::new();

    // The field report: 4 million empty sample types and 4 million empty samples.
    let many_types = pp::Profile {
        sample_type: vec![pp::ValueType::default(); 4_000_000],
        sample: vec![pp::Sample::default(); 4_000_000],
        string_table: strings(&[]),
        ..Default::default()
    };
    out.push(Hostile {
        name: "pprof: millions of sample types and empty samples",
        port: p.pprof,
        path: PPROF.to_owned(),
        headers: Vec::new(),
        body: gzip(&many_types.encode_to_vec()),
        expect: &[400],
    });

    // One sample with far more labels than any profiler writes.
    let many_labels = pp::Profile {
        sample_type: vec![pp::ValueType::default()],
        sample: vec![pp::Sample {
            value: vec![1],
            label: vec![
                pp::Label {
                    key: 1,
                    num: 1,
                    ..Default::default()
                };
                200_000
            ],
            ..Default::default()
        }],
        string_table: strings(&["k"]),
        ..Default::default()
    };
    out.push(Hostile {
        name: "pprof: 200000 labels on one sample",
        port: p.pprof,
        path: PPROF.to_owned(),
        headers: Vec::new(),
        body: gzip(&many_labels.encode_to_vec()),
        expect: &[400],
    });

    // A 4 MiB string named by one key many times in one label set: an array, so copies.
    let repeated_key = pp::Profile {
        sample_type: vec![pp::ValueType::default()],
        sample: vec![pp::Sample {
            value: vec![1],
            label: vec![
                pp::Label {
                    key: 1,
                    str: 2,
                    ..Default::default()
                };
                1000
            ],
            ..Default::default()
        }],
        string_table: strings(&["k", &long]),
        ..Default::default()
    };
    out.push(Hostile {
        name: "pprof: a 4 MiB label value repeated 1000 times under one key",
        port: p.pprof,
        path: PPROF.to_owned(),
        headers: Vec::new(),
        body: gzip(&repeated_key.encode_to_vec()),
        expect: &[400],
    });

    // The same long string in 20000 distinct label sets: legal, and must cost one copy.
    let shared_long = pp::Profile {
        sample_type: vec![pp::ValueType::default()],
        sample: (0..20_000)
            .map(|n| pp::Sample {
                value: vec![1],
                label: vec![
                    pp::Label {
                        key: 1,
                        str: 2,
                        ..Default::default()
                    },
                    pp::Label {
                        key: 3,
                        num: n,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            })
            .collect(),
        string_table: strings(&["k", &long, "n"]),
        ..Default::default()
    };
    out.push(Hostile {
        name: "pprof: a 4 MiB label value shared by 20000 label sets",
        port: p.pprof,
        path: PPROF.to_owned(),
        headers: Vec::new(),
        body: gzip(&shared_long.encode_to_vec()),
        expect: &[204],
    });

    // A gzip bomb: 1 GiB of zeros in about 1 MB.
    let bomb = {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            enc.write_all(&zeros).expect("gzip");
        }
        enc.finish().expect("gzip")
    };
    out.push(Hostile {
        name: "pprof: a gzip bomb",
        port: p.pprof,
        path: PPROF.to_owned(),
        headers: vec![("Content-Encoding", "gzip")],
        body: bomb.clone(),
        expect: &[413],
    });
    out.push(Hostile {
        name: "otlp/http: a gzip bomb",
        port: p.otlp_http,
        path: OTLP.to_owned(),
        headers: gz(otlp_proto.clone()),
        body: bomb,
        expect: &[413],
    });

    // OTLP: one 4 MiB string referenced by a million attribute-table entries.
    let references = ExportProfilesServiceRequest {
        dictionary: Some(ProfilesDictionary {
            string_table: strings(&[&long]),
            attribute_table: (0..1_000_000)
                .map(|_| KeyValueAndUnit {
                    value: Some(AnyValue {
                        value: Some(Value::StringValueStrindex(1)),
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        resource_profiles: Vec::new(),
    };
    out.push(Hostile {
        name: "otlp/http: a 4 MiB string referenced a million times",
        port: p.otlp_http,
        path: OTLP.to_owned(),
        headers: gz(otlp_proto.clone()),
        body: gzip(&references.encode_to_vec()),
        expect: &[400],
    });

    // OTLP: a stack deeper than any real one, and samples with huge label arrays.
    let deep = ExportProfilesServiceRequest {
        dictionary: Some(ProfilesDictionary {
            stack_table: vec![
                Stack::default(),
                Stack {
                    location_indices: vec![0; 100_000],
                },
            ],
            attribute_table: vec![
                KeyValueAndUnit::default(),
                KeyValueAndUnit {
                    key_strindex: 0,
                    value: Some(AnyValue {
                        value: Some(Value::ArrayValue(ArrayValue {
                            values: vec![AnyValue::default(); 100_000],
                        })),
                    }),
                    unit_strindex: 0,
                },
            ],
            ..Default::default()
        }),
        resource_profiles: vec![ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile {
                    samples: vec![Sample {
                        stack_index: 1,
                        values: vec![1],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    out.push(Hostile {
        name: "otlp/http: a 100000-deep stack",
        port: p.otlp_http,
        path: OTLP.to_owned(),
        headers: otlp_proto.clone(),
        body: deep.encode_to_vec(),
        expect: &[400],
    });
    let mut wide = deep.clone();
    if let Some(d) = wide.dictionary.as_mut() {
        d.stack_table.truncate(1);
    }
    if let Some(s) = wide.resource_profiles[0].scope_profiles[0].profiles[0]
        .samples
        .first_mut()
    {
        s.stack_index = 0;
        s.attribute_indices = vec![1];
    }
    out.push(Hostile {
        name: "otlp/http: a sample whose one attribute is a 100000-value array",
        port: p.otlp_http,
        path: OTLP.to_owned(),
        headers: otlp_proto.clone(),
        body: wide.encode_to_vec(),
        expect: &[400],
    });

    // OTLP/JSON nested past any parser's stack.
    let nested = format!(
        "{{\"resourceProfiles\":[{{\"resource\":{{\"attributes\":[{{\"key\":\"a\",\"value\":{}1{}}}]}}}}]}}",
        "{\"arrayValue\":{\"values\":[".repeat(50_000),
        "]}}".repeat(50_000)
    );
    out.push(Hostile {
        name: "otlp/json: values nested 50000 deep",
        port: p.otlp_http,
        path: OTLP.to_owned(),
        headers: otlp_json.clone(),
        body: nested.into_bytes(),
        expect: &[400],
    });
    out.push(Hostile {
        name: "otlp/http: not protobuf at all",
        port: p.otlp_http,
        path: OTLP.to_owned(),
        headers: otlp_proto,
        body: vec![0xff; 4096],
        expect: &[400],
    });

    // Pyroscope: a Connect Push whose one series has 100000 labels.
    let push = {
        let mut series = Vec::new();
        for n in 0..100_000u32 {
            let name = format!("k{n}");
            let mut label = Vec::new();
            label.push(0x0a);
            label.push(name.len() as u8);
            label.extend_from_slice(name.as_bytes());
            label.extend_from_slice(&[0x12, 1, b'v']);
            series.push(0x0a);
            prost::encoding::encode_varint(label.len() as u64, &mut series);
            series.extend_from_slice(&label);
        }
        let mut request = vec![0x0a];
        prost::encoding::encode_varint(series.len() as u64, &mut request);
        request.extend_from_slice(&series);
        request
    };
    out.push(Hostile {
        name: "pyroscope push: a series of 100000 labels",
        port: p.pprof,
        path: "/push.v1.PusherService/Push".to_owned(),
        headers: vec![("Content-Type", "application/proto")],
        body: push,
        expect: &[400],
    });
    out.push(Hostile {
        name: "pyroscope ingest: a form cut short",
        port: p.pprof,
        path: "/ingest?name=app&format=pprof".to_owned(),
        headers: vec![("Content-Type", "multipart/form-data; boundary=XyZ")],
        body: b"--XyZ\r\nContent-Disposition: form-data; name=\"profile\"\r\n\r\nabc".to_vec(),
        expect: &[400],
    });
    let labels: Vec<String> = (0..5000).map(|n| format!("k{n}=v")).collect();
    out.push(Hostile {
        name: "pyroscope ingest: an app name of 5000 labels",
        port: p.pprof,
        path: format!("/ingest?name=app%7B{}%7D&format=pprof", labels.join(",")),
        headers: Vec::new(),
        body: gzip(&tiny_samples_pprof(1)),
        expect: &[400],
    });
    out
}

/// The peak resident set of a process, from /proc.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

#[test]
fn hostile_inputs_to_every_receiver_cost_only_themselves() {
    let dir = scratch("adversarial");
    let out = dir.join("out.jsonl");
    let p = Ports {
        otlp_http: free_port(),
        otlp_grpc: free_port(),
        pprof: free_port(),
        health: free_port(),
        metrics: free_port(),
    };
    let c = Collector::start(&dir, "c", &config(&p, &out), p.health, p.metrics);
    let pid = c.child.id();
    let mut report = Vec::new();
    for h in hostile_inputs(&p) {
        let started = Instant::now();
        let reply = http(h.port, "POST", &h.path, &h.headers, &h.body)
            .unwrap_or_else(|| panic!("{}: no answer (did the collector die?)", h.name));
        let message = String::from_utf8_lossy(&reply.body)
            .chars()
            .take(160)
            .collect::<String>();
        assert!(
            h.expect.contains(&reply.status),
            "{}: got {} ({message}), want one of {:?}",
            h.name,
            reply.status,
            h.expect
        );
        report.push(format!(
            "{:<70} {:>9} B -> {} in {:?}",
            h.name,
            h.body.len(),
            reply.status,
            started.elapsed()
        ));
        assert!(
            http(p.health, "GET", "/", &[], b"").is_some_and(|r| r.status == 200),
            "{}: the collector is not healthy after it",
            h.name
        );
    }
    println!("{}", report.join("\n"));

    // The burst: 16 parallel pushes of 8 MB of tiny samples.
    let burst = gzip(&tiny_samples_pprof(1_000_000));
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    http(
                        p.pprof,
                        "POST",
                        "/v1/pprof",
                        &[("Content-Encoding", "gzip")],
                        &burst,
                    )
                    .map_or(0, |r| r.status)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    println!("burst statuses: {statuses:?}");
    assert!(
        statuses.iter().all(|s| matches!(s, 204 | 429)),
        "every burst request is accepted or refused as retryable: {statuses:?}"
    );
    assert!(
        statuses.contains(&429),
        "the budget refused part of the burst"
    );
    let peak = peak_rss_mib(pid);
    println!("peak RSS after the suite and the burst: {peak} MiB");
    assert!(
        peak < PEAK_RSS_BOUND_MIB,
        "peak RSS {peak} MiB over the bound of {PEAK_RSS_BOUND_MIB} MiB"
    );

    // Good data still arrives whole, within 10 s of the attack.
    let good = profcol_ok(&[
        "convert",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
        "--to",
        "otlp",
    ]);
    let before = samples_in_jsonl(&out);
    let accepted_at = Instant::now();
    let accepted = eventually(Duration::from_secs(10), || {
        http(
            p.otlp_http,
            "POST",
            "/v1development/profiles",
            &[("Content-Type", "application/x-protobuf")],
            &good,
        )
        .is_some_and(|r| r.status == 200)
    });
    assert!(
        accepted,
        "a good push was refused for 10 s after the attack"
    );
    println!(
        "good push accepted {:?} after the attack",
        accepted_at.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(30), || samples_in_jsonl(&out)
            >= before + 66),
        "the good push's 66 samples arrived"
    );
    assert!(c.stop().success(), "clean shutdown");
}
