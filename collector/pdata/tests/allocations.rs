//! What the model's hot paths allocate, counted: decoding takes at most four times its
//! input at its peak, and no path allocates per sample (ten times the samples, the same
//! number of allocations, give or take the growth of a few buffers).

use allocation_counter::measure;
use profcol_pdata::limits::DECODE_FLOOR_BYTES;
use profcol_pdata::pprof::{ToPprofOptions, batch_to_pprof};
use profcol_pdata::{
    DictionaryBuilder, Function, Line, Location, Profile, ProfileBatch, ResourceProfiles, Sample,
    Samples, ScopeProfiles, ValueType, merge,
};

/// A batch of `n` samples over 64 stacks, each with a thread attribute and a timestamp.
fn batch(n: usize) -> ProfileBatch {
    let mut b = DictionaryBuilder::new();
    let mut stacks = Vec::new();
    let mut locations = Vec::new();
    for i in 0..64 {
        let name_strindex = b.string(&format!("function_{i}"));
        let f = b.function(Function {
            name_strindex,
            ..Function::default()
        });
        let lines = [Line {
            function_index: f,
            line: i64::from(i),
            column: 0,
        }];
        locations.push(b.location(&Location {
            address: 0x1000 + u64::from(i as u32),
            lines: &lines,
            ..Location::default()
        }));
        stacks.push(b.stack(&locations));
    }
    let threads: Vec<i32> = (0..8)
        .map(|t| b.attribute_str("thread.name", &format!("worker-{t}")))
        .collect();
    let sample_type = ValueType {
        type_strindex: b.string("samples"),
        unit_strindex: b.string("count"),
    };
    let mut samples = Samples::default();
    for i in 0..n {
        samples.push(&Sample {
            stack_index: stacks[i % stacks.len()],
            attribute_indices: &[threads[i % threads.len()]],
            timestamps_unix_nano: &[1_700_000_000_000_000_000 + i as u64],
            ..Sample::default()
        });
    }
    ProfileBatch::from_parts(
        b.finish().expect("dictionary"),
        vec![ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile {
                    sample_type,
                    samples,
                    ..Profile::default()
                }],
                ..ScopeProfiles::default()
            }],
            ..ResourceProfiles::default()
        }],
    )
}

/// Allocations of `f` on batches of 1,000 and of 10,000 samples.
fn counts(f: impl Fn(&ProfileBatch, &[u8])) -> (u64, u64) {
    let small = batch(1_000);
    let large = batch(10_000);
    let (small_bytes, large_bytes) = (small.encode_to_vec(), large.encode_to_vec());
    let a = measure(|| f(&small, &small_bytes)).count_total;
    let b = measure(|| f(&large, &large_bytes)).count_total;
    (a, b)
}

/// Ten times the samples may add a few buffer growths (log2 of ten is under four), not
/// thousands of allocations.
fn assert_not_per_sample(path: &str, (small, large): (u64, u64)) {
    assert!(
        large <= small + 8,
        "{path}: {small} allocations for 1,000 samples, {large} for 10,000"
    );
}

#[test]
fn decoding_and_encoding_allocate_per_table_not_per_sample() {
    assert_not_per_sample(
        "decode",
        counts(|_, bytes| drop(ProfileBatch::decode(bytes).expect("valid"))),
    );
    assert_not_per_sample("encode", counts(|b, _| drop(b.encode_to_vec())));
    assert_not_per_sample("OTLP/JSON", counts(|b, _| drop(b.to_json())));
}

#[test]
fn merging_and_translating_allocate_per_table_not_per_sample() {
    assert_not_per_sample("merge", counts(|b, _| drop(merge([b, b]))));
    assert_not_per_sample(
        "OTLP to pprof",
        counts(|b, _| drop(batch_to_pprof(b, &ToPprofOptions::default()).expect("fits"))),
    );
    let pprofs = |b: &ProfileBatch| {
        batch_to_pprof(b, &ToPprofOptions::default())
            .expect("fits")
            .remove(0)
            .profile
    };
    let (small, large) = (pprofs(&batch(1_000)), pprofs(&batch(10_000)));
    let options = profcol_pdata::pprof::ToOtlpOptions::default;
    let a = measure(|| drop(profcol_pdata::pprof::pprof_to_batch(&small, options()))).count_total;
    let b = measure(|| drop(profcol_pdata::pprof::pprof_to_batch(&large, options()))).count_total;
    assert_not_per_sample("pprof to OTLP", (a, b));
}

/// The batch processor cuts batches with a `Subset` per part: copying the samples of a
/// profile into a part allocates per dictionary entry copied, not per sample.
#[test]
fn cutting_a_batch_allocates_per_entry_not_per_sample() {
    assert_not_per_sample(
        "subset",
        counts(|b, _| {
            let mut subset = profcol_pdata::Subset::new(b.dictionary());
            for p in b.profiles() {
                drop(subset.profile(p, p.samples.iter(), true));
            }
            drop(subset.finish());
        }),
    );
}

#[test]
fn decoding_peaks_below_four_times_its_input() {
    for n in [1_000, 100_000] {
        let bytes = batch(n).encode_to_vec();
        assert_peak_within_bound(&format!("{n} samples"), &bytes, true);
    }
}

/// Decoding `bytes` allocates at its peak at most 4x them plus the floor; `valid` says
/// whether it must be accepted (hostile shapes may be refused instead, within the bound
/// too).
fn assert_peak_within_bound(name: &str, bytes: &[u8], valid: bool) {
    let mut accepted = false;
    let info = measure(|| accepted = ProfileBatch::decode(bytes).is_ok());
    let bound = 4 * bytes.len() + DECODE_FLOOR_BYTES;
    assert!(
        info.bytes_max as usize <= bound,
        "{name}: {} bytes in, a peak of {} allocated",
        bytes.len(),
        info.bytes_max
    );
    assert!(accepted || !valid, "{name} is valid and was refused");
}

/// The recorded eBPF corpus (the file exporter's records: a 4-byte big-endian length,
/// then the batch) decodes within the bound, each record.
#[test]
fn the_recorded_corpus_peaks_below_four_times_its_input() {
    use std::io::Read as _;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/corpus");
    let mut records = 0;
    for entry in std::fs::read_dir(dir)
        .expect("corpus")
        .filter_map(Result::ok)
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".otlp.pb.gz") {
            continue;
        }
        let raw = std::fs::read(entry.path()).expect("read");
        let mut framed = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut framed)
            .expect("gunzip");
        let mut rest = &framed[..];
        while rest.len() >= 4 {
            let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let record = rest.get(4..4 + len).expect("a whole record");
            assert_peak_within_bound(&format!("{name}#{records}"), record, true);
            rest = &rest[4 + len..];
            records += 1;
        }
    }
    assert!(records >= 4, "{records} records");
}

/// Shapes where every message is as small on the wire as it can be: each decodes, or is
/// refused, within the bound.
#[test]
fn hostile_shapes_peak_below_four_times_their_input() {
    use profcol_proto::otlp::common::v1::{AnyValue, ArrayValue, any_value::Value};
    use profcol_proto::otlp::profiles::v1development as pb;
    use prost::Message;
    let with = |dictionary: pb::ProfilesDictionary, samples: Vec<pb::Sample>| {
        pb::ProfilesData {
            dictionary: Some(dictionary),
            resource_profiles: vec![pb::ResourceProfiles {
                scope_profiles: vec![pb::ScopeProfiles {
                    profiles: vec![pb::Profile {
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
    let n = 200_000;
    let one_value = pb::Sample {
        values: vec![1],
        ..Default::default()
    };
    let shapes = [
        (
            "one-value samples",
            with(Default::default(), vec![one_value; n]),
        ),
        (
            "locations of empty lines",
            with(
                pb::ProfilesDictionary {
                    location_table: vec![
                        pb::Location {
                            lines: vec![pb::Line::default(); 8],
                            ..Default::default()
                        };
                        n / 8
                    ],
                    ..Default::default()
                },
                Vec::new(),
            ),
        ),
        (
            "empty stacks",
            with(
                pb::ProfilesDictionary {
                    stack_table: vec![pb::Stack::default(); n],
                    ..Default::default()
                },
                Vec::new(),
            ),
        ),
        (
            "attributes with empty arrays",
            with(
                pb::ProfilesDictionary {
                    attribute_table: vec![
                        pb::KeyValueAndUnit {
                            value: Some(AnyValue {
                                value: Some(Value::ArrayValue(ArrayValue::default())),
                            }),
                            ..Default::default()
                        };
                        n
                    ],
                    ..Default::default()
                },
                Vec::new(),
            ),
        ),
        (
            "empty strings",
            with(
                pb::ProfilesDictionary {
                    string_table: vec![String::new(); n],
                    ..Default::default()
                },
                Vec::new(),
            ),
        ),
        (
            "empty profiles",
            pb::ProfilesData {
                resource_profiles: vec![pb::ResourceProfiles {
                    scope_profiles: vec![pb::ScopeProfiles {
                        profiles: vec![pb::Profile::default(); n / 4],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .encode_to_vec(),
        ),
    ];
    let resource = |attributes: Vec<profcol_proto::otlp::common::v1::KeyValue>| {
        pb::ProfilesData {
            resource_profiles: vec![pb::ResourceProfiles {
                resource: Some(profcol_proto::otlp::resource::v1::Resource {
                    attributes,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec()
    };
    let more = [
        (
            "a resource of empty attributes",
            resource(vec![Default::default(); n]),
        ),
        (
            "a resource attribute of an array of empty values",
            resource(vec![profcol_proto::otlp::common::v1::KeyValue {
                key: "k".into(),
                value: Some(AnyValue {
                    value: Some(Value::ArrayValue(ArrayValue {
                        values: vec![AnyValue::default(); n],
                    })),
                }),
                ..Default::default()
            }]),
        ),
    ];
    let array_attribute = with(
        pb::ProfilesDictionary {
            attribute_table: vec![pb::KeyValueAndUnit {
                value: Some(AnyValue {
                    value: Some(Value::ArrayValue(ArrayValue {
                        values: vec![AnyValue::default(); n],
                    })),
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        Vec::new(),
    );
    let scope = pb::ProfilesData {
        resource_profiles: vec![pb::ResourceProfiles {
            scope_profiles: vec![pb::ScopeProfiles {
                scope: Some(profcol_proto::otlp::common::v1::InstrumentationScope {
                    attributes: vec![Default::default(); n],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let more = more.into_iter().chain([
        (
            "a dictionary attribute of an array of empty values",
            array_attribute,
        ),
        ("a scope of empty attributes", scope),
    ]);
    for (name, bytes) in shapes.into_iter().chain(more) {
        assert_peak_within_bound(name, &bytes, false);
    }
}
