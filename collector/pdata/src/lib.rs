//! The shared profile model: OTLP profiles as every component sees them.
//!
//! Rows of the dictionary and the samples of each profile are held as their canonical
//! protobuf encoding, back to back in one buffer per table or profile: memory close to
//! the wire size whatever the input's shape, no allocation per sample or per row, and
//! encoding that copies. Views ([`rows`]) read them back; builders write them.

pub mod attributes;
pub mod batch;
pub mod decode;
pub mod dictionary;
mod encode;
pub mod limits;
pub mod merge;
pub mod otlp_json;
pub mod pprof;
pub mod profile;
pub mod rows;
pub mod samples;
pub mod subset;
pub mod summary;
pub mod table;
pub mod testing;
pub mod wire;

pub use attributes::{any_value_to_string, attribute_value, semconv, service_name, value_str};
pub use batch::{ClientInfo, ProfileBatch, WireBatch};
pub use decode::{ValidationError, attribute_str};
pub use dictionary::{Dictionary, DictionaryBuilder};
pub use merge::{Merger, merge};
pub use profile::{Profile, ResourceProfiles, ScopeProfiles, ValueType};
pub use rows::{
    AnyValueRef, AttributeRef, Function, Indices, Line, Lines, Link, Location, LocationRef,
    Mapping, MappingRef, Sample, SampleRef, StackRef, Timestamps, Values,
};
pub use samples::Samples;
pub use subset::Subset;
pub use table::{RowTable, StringTable, TableFull};

#[cfg(test)]
mod tests {
    //! The model against prost's own reading of the same bytes: the recorded inputs, hostile
    //! shapes, and what the checks refuse.

    use std::io::Read;
    use std::path::PathBuf;

    use profcol_proto::otlp::profiles::v1development as pb;
    use prost::Message;

    use crate::{Dictionary, ProfileBatch, ValidationError};

    fn repo() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The recorded OTLP inputs: fuzz seeds and the eBPF corpus.
    fn recorded() -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for dir in ["fuzz/seeds/otlp_decode", "testdata/corpus"] {
            let Ok(entries) = std::fs::read_dir(repo().join(dir)) else {
                continue;
            };
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                let raw = std::fs::read(e.path()).expect("read");
                if name.ends_with(".otlp.pb.gz") {
                    // The file exporter's records: a 4-byte big-endian length, then the batch.
                    let mut framed = Vec::new();
                    flate2::read::GzDecoder::new(&raw[..])
                        .read_to_end(&mut framed)
                        .expect("gunzip");
                    let mut rest = &framed[..];
                    let mut n = 0;
                    while rest.len() >= 4 {
                        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                        let record = rest.get(4..4 + len).expect("a whole record");
                        out.push((format!("{name}#{n}"), record.to_vec()));
                        rest = &rest[4 + len..];
                        n += 1;
                    }
                } else if name.ends_with(".otlp") {
                    out.push((name, raw));
                }
            }
        }
        assert!(out.len() >= 4, "recorded inputs: {}", out.len());
        out
    }

    /// Every field of the model equals prost's reading (after the model's normalization:
    /// zero values in place, the zero link zero-filled).
    fn assert_same(name: &str, want: &pb::ProfilesData, got: &ProfileBatch) {
        let d = got.dictionary();
        let wd = want.dictionary.clone().unwrap_or_default();
        let strings: Vec<&str> = d.strings().iter().collect();
        let want_strings: Vec<&str> = wd.string_table.iter().map(String::as_str).collect();
        assert_eq!(strings, want_strings, "{name}: strings");
        assert_eq!(d.function_count(), wd.function_table.len().max(1), "{name}");
        for (f, w) in d.functions().zip(&wd.function_table) {
            assert_eq!(
                (
                    f.name_strindex,
                    f.system_name_strindex,
                    f.filename_strindex,
                    f.start_line
                ),
                (
                    w.name_strindex,
                    w.system_name_strindex,
                    w.filename_strindex,
                    w.start_line
                ),
                "{name}: function"
            );
        }
        for (m, w) in d.mappings().zip(&wd.mapping_table) {
            assert_eq!(
                (
                    m.memory_start,
                    m.memory_limit,
                    m.file_offset,
                    m.filename_strindex
                ),
                (
                    w.memory_start,
                    w.memory_limit,
                    w.file_offset,
                    w.filename_strindex
                ),
                "{name}: mapping"
            );
            assert_eq!(m.attribute_indices.to_vec(), w.attribute_indices, "{name}");
        }
        assert_eq!(d.location_count(), wd.location_table.len().max(1), "{name}");
        for (l, w) in d.locations().zip(&wd.location_table) {
            assert_eq!(
                (l.mapping_index, l.address),
                (w.mapping_index, w.address),
                "{name}"
            );
            let lines: Vec<(i32, i64, i64)> = l
                .lines
                .iter()
                .map(|x| (x.function_index, x.line, x.column))
                .collect();
            let want_lines: Vec<(i32, i64, i64)> = w
                .lines
                .iter()
                .map(|x| (x.function_index, x.line, x.column))
                .collect();
            assert_eq!(lines, want_lines, "{name}: lines");
            assert_eq!(l.attribute_indices.to_vec(), w.attribute_indices, "{name}");
        }
        for (i, (l, w)) in d.links().zip(&wd.link_table).enumerate() {
            if i > 0 {
                assert_eq!(
                    (&l.trace_id[..], &l.span_id[..]),
                    (&w.trace_id[..], &w.span_id[..]),
                    "{name}: link"
                );
            } else {
                assert!(l.is_zero());
            }
        }
        assert_eq!(
            d.attribute_count(),
            wd.attribute_table.len().max(1),
            "{name}"
        );
        for (a, w) in d.attributes().zip(&wd.attribute_table) {
            assert_eq!(
                (a.key_strindex, a.unit_strindex),
                (w.key_strindex, w.unit_strindex),
                "{name}"
            );
            assert_eq!(a.to_any_value(), w.value, "{name}: attribute value");
        }
        assert_eq!(d.stack_count(), wd.stack_table.len().max(1), "{name}");
        for (s, w) in d.stacks().zip(&wd.stack_table) {
            assert_eq!(
                s.location_indices.to_vec(),
                w.location_indices,
                "{name}: stack"
            );
        }
        assert_eq!(
            got.resource_profiles().len(),
            want.resource_profiles.len(),
            "{name}"
        );
        for (rp, wrp) in got.resource_profiles().iter().zip(&want.resource_profiles) {
            assert_eq!(rp.resource, wrp.resource, "{name}: resource");
            assert_eq!(rp.schema_url, wrp.schema_url);
            assert_eq!(rp.scope_profiles.len(), wrp.scope_profiles.len());
            for (sp, wsp) in rp.scope_profiles.iter().zip(&wrp.scope_profiles) {
                assert_eq!(sp.scope, wsp.scope, "{name}: scope");
                assert_eq!(sp.profiles.len(), wsp.profiles.len());
                for (p, wp) in sp.profiles.iter().zip(&wsp.profiles) {
                    assert_eq!(
                        Some(p.sample_type),
                        wp.sample_type.or(Some(Default::default()))
                    );
                    assert_eq!(
                        Some(p.period_type),
                        wp.period_type.or(Some(Default::default()))
                    );
                    assert_eq!(
                        (p.time_unix_nano, p.duration_nano, p.period),
                        (wp.time_unix_nano, wp.duration_nano, wp.period),
                        "{name}"
                    );
                    assert_eq!(p.attribute_indices, wp.attribute_indices);
                    assert_eq!(p.original_payload_format, wp.original_payload_format);
                    assert_eq!(p.original_payload, wp.original_payload);
                    assert_eq!(p.samples.len(), wp.samples.len(), "{name}: samples");
                    for (s, ws) in p.samples.iter().zip(&wp.samples) {
                        assert_eq!(s.stack_index, ws.stack_index, "{name}");
                        assert_eq!(s.link_index, ws.link_index);
                        assert_eq!(s.attribute_indices.to_vec(), ws.attribute_indices);
                        assert_eq!(s.values.to_vec(), ws.values);
                        assert_eq!(
                            s.timestamps_unix_nano.iter().collect::<Vec<_>>(),
                            ws.timestamps_unix_nano
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn recorded_inputs_read_as_prost_reads_them_and_encode_back_the_same() {
        for (name, bytes) in recorded() {
            let want = pb::ProfilesData::decode(&bytes[..]).expect("prost reads it");
            let batch = ProfileBatch::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_same(&name, &want, &batch);
            let encoded = batch.encode_to_vec();
            assert_eq!(encoded.len(), batch.encoded_len(), "{name}");
            let again = pb::ProfilesData::decode(&encoded[..]).expect("prost reads ours");
            assert_same(&name, &again, &batch);
            // prost writes what we write: the same bytes from its reading of ours.
            assert_eq!(again.encode_to_vec(), encoded, "{name}: byte for byte");
            assert_eq!(
                ProfileBatch::decode(&encoded).expect("ours reads ours"),
                batch,
                "{name}"
            );
        }
    }

    #[test]
    fn recorded_inputs_take_less_than_four_times_their_size() {
        for (name, bytes) in recorded() {
            let batch = ProfileBatch::decode(&bytes).expect("valid");
            let ratio = batch.heap_bytes() as f64 / bytes.len() as f64;
            eprintln!(
                "{name}: {} bytes in, {} held: {ratio:.2}x",
                bytes.len(),
                batch.heap_bytes()
            );
            assert!(ratio <= 4.0, "{name}: {ratio:.2}x");
        }
    }

    fn one_profile(samples: Vec<pb::Sample>, dictionary: pb::ProfilesDictionary) -> Vec<u8> {
        pb::ProfilesData {
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
            dictionary: Some(dictionary),
        }
        .encode_to_vec()
    }

    fn err(bytes: &[u8]) -> String {
        ProfileBatch::decode(bytes)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn nothing_at_all_is_an_empty_batch_with_the_zero_values() {
        let batch = ProfileBatch::decode(&[]).expect("empty");
        assert!(batch.resource_profiles().is_empty());
        assert_eq!(*batch.dictionary(), Dictionary::zero());
    }

    #[test]
    fn bad_indices_and_shapes_name_their_path() {
        let dict = pb::ProfilesDictionary {
            string_table: vec![String::new()],
            ..Default::default()
        };
        let sample = |s: pb::Sample| one_profile(vec![s], dict.clone());
        assert_eq!(
            err(&sample(pb::Sample {
                stack_index: 1,
                values: vec![1],
                ..Default::default()
            })),
            "resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index: index 1 is out of range of stack_table (length 1)"
        );
        assert!(err(&sample(pb::Sample::default())).ends_with("has neither values nor timestamps"));
        assert!(
            err(&sample(pb::Sample {
                values: vec![1, 2],
                timestamps_unix_nano: vec![1],
                ..Default::default()
            }))
            .ends_with("has 2 values but 1 timestamps; they must pair up")
        );
        assert!(
            err(&sample(pb::Sample {
                stack_index: -1,
                values: vec![1],
                ..Default::default()
            }))
            .contains("index -1 is out of range")
        );
        let not_zero = pb::ProfilesDictionary {
            string_table: vec!["x".into()],
            ..Default::default()
        };
        assert_eq!(
            err(&one_profile(Vec::new(), not_zero)),
            "dictionary.string_table[0] must be the zero value \"\""
        );
        let bad_stack = pb::ProfilesDictionary {
            stack_table: vec![
                pb::Stack::default(),
                pb::Stack {
                    location_indices: vec![0, 5],
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            err(&one_profile(Vec::new(), bad_stack)),
            "dictionary.stack_table[1].location_indices[1]: index 5 is out of range of location_table (length 1)"
        );
        assert!(err(&[0x0a, 0x05, 0x01]).contains("not protobuf"));
    }

    #[test]
    fn repeated_fields_unpacked_or_split_read_as_one() {
        // values 1, 2 as two unpacked fields and a packed one; stack index as a long varint.
        let body: Vec<u8> = vec![
            0x08, 0x80, 0x00, // stack_index 0, non-minimal varint
            0x20, 0x01, // values: 1 (unpacked)
            0x22, 0x02, 0x02, 0x03, // values: 2, 3 (packed)
        ];
        let mut profile = Vec::new();
        crate::wire::put_bytes_always(&mut profile, 2, &body);
        let mut scope = Vec::new();
        crate::wire::put_bytes_always(&mut scope, 2, &profile);
        let mut resource = Vec::new();
        crate::wire::put_bytes_always(&mut resource, 2, &scope);
        let mut data = Vec::new();
        crate::wire::put_bytes_always(&mut data, 1, &resource);
        let batch = ProfileBatch::decode(&data).expect("valid");
        let p = batch.profiles().next().expect("profile");
        let s = p.samples.iter().next().expect("sample");
        assert_eq!(s.values.to_vec(), [1, 2, 3]);
        assert_eq!(s.stack_index, 0);
        // Held canonically: what prost writes for the same sample.
        let canonical = pb::Sample {
            values: vec![1, 2, 3],
            ..Default::default()
        };
        let mut expected = Vec::new();
        prost::encoding::message::encode(2, &canonical, &mut expected);
        assert_eq!(p.samples.wire_bytes(), &expected[..]);
    }

    #[test]
    fn a_dictionary_in_two_parts_is_one_and_may_follow_the_profiles() {
        let part = |strings: &[&str]| {
            pb::ProfilesDictionary {
                string_table: strings.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }
            .encode_to_vec()
        };
        let mut data = Vec::new();
        let profiles = one_profile(
            vec![pb::Sample {
                values: vec![1],
                ..Default::default()
            }],
            pb::ProfilesDictionary::default(),
        );
        // The resource_profiles field of that message, then two dictionary parts.
        let decoded = pb::ProfilesData::decode(&profiles[..]).expect("prost");
        for rp in &decoded.resource_profiles {
            crate::wire::put_bytes_always(&mut data, 1, &rp.encode_to_vec());
        }
        crate::wire::put_bytes_always(&mut data, 2, &part(&["", "a"]));
        crate::wire::put_bytes_always(&mut data, 2, &part(&["b"]));
        let batch = ProfileBatch::decode(&data).expect("valid");
        assert_eq!(
            batch.dictionary().strings().iter().collect::<Vec<_>>(),
            ["", "a", "b"]
        );
        assert_eq!(batch.sample_count(), 1);
    }

    #[test]
    fn a_flood_of_empty_messages_is_refused_not_held() {
        // 200,000 empty profiles: 400 KB on the wire, far more as structs.
        let mut scope = Vec::new();
        for _ in 0..200_000 {
            crate::wire::put_bytes_always(&mut scope, 2, &[]);
        }
        let mut resource = Vec::new();
        crate::wire::put_bytes_always(&mut resource, 2, &scope);
        let mut data = Vec::new();
        crate::wire::put_bytes_always(&mut data, 1, &resource);
        let e = ProfileBatch::decode(&data).expect_err("refused");
        assert!(
            matches!(&e, ValidationError::Invalid { problem, .. } if problem.contains("times the input")),
            "{e}"
        );
    }

    #[test]
    fn a_flood_of_empty_rows_fits_the_bound() {
        // Empty functions: 2 bytes each on the wire, 4 held.
        let dict = pb::ProfilesDictionary {
            function_table: vec![pb::Function::default(); 100_000],
            ..Default::default()
        };
        let bytes = one_profile(Vec::new(), dict);
        let batch = ProfileBatch::decode(&bytes).expect("valid");
        assert!(batch.heap_bytes() <= 4 * bytes.len() + crate::limits::DECODE_FLOOR_BYTES);
    }

    /// A sample's meaning, with every index resolved: frames (mapping file, address, lines
    /// as function name and line), attributes as key=value unit, link ids, values, times.
    fn resolved_sample(d: &Dictionary, s: &crate::SampleRef<'_>) -> String {
        let frames: Vec<String> = d
            .stack(s.stack_index)
            .location_indices
            .iter()
            .map(|l| {
                let l = d.location(l);
                let m = d.mapping(l.mapping_index);
                let lines: Vec<String> = l
                    .lines
                    .iter()
                    .map(|line| {
                        let f = d.function(line.function_index);
                        format!(
                            "{}|{}|{}:{}",
                            d.string(f.name_strindex),
                            d.string(f.filename_strindex),
                            line.line,
                            line.column
                        )
                    })
                    .collect();
                let attrs: Vec<String> = l
                    .attribute_indices
                    .iter()
                    .chain(m.attribute_indices.iter())
                    .map(|a| resolved_attribute(d, a))
                    .collect();
                format!(
                    "{}@{:#x}+{:#x}{lines:?}{attrs:?}",
                    d.string(m.filename_strindex),
                    l.address,
                    m.memory_start
                )
            })
            .collect();
        let attrs: Vec<String> = s
            .attribute_indices
            .iter()
            .map(|a| resolved_attribute(d, a))
            .collect();
        let link = d.link(s.link_index);
        format!(
            "{frames:?} {attrs:?} {link:?} {:?} {:?}",
            s.values.to_vec(),
            s.timestamps_unix_nano.iter().collect::<Vec<_>>()
        )
    }

    fn resolved_attribute(d: &Dictionary, i: i32) -> String {
        let a = d.attribute(i);
        let value = a
            .value
            .map(|v| crate::attributes::value_to_string(d, v))
            .unwrap_or_default();
        format!(
            "{}={value} {}",
            d.string(a.key_strindex),
            d.string(a.unit_strindex)
        )
    }

    /// A subset keeps every copied sample's meaning and copies only what they refer to.
    #[test]
    fn a_subset_keeps_meaning_and_only_what_it_uses() {
        for (name, bytes) in recorded() {
            let batch = ProfileBatch::decode(&bytes).expect("valid");
            let source = batch.dictionary();
            for profile in batch.profiles() {
                let half = profile.samples.len() / 2;
                let mut subset = crate::Subset::new(source);
                let copy = subset.profile(profile, profile.samples.iter().skip(half), false);
                let d = subset.finish().expect("fits");
                assert_eq!(copy.samples.len(), profile.samples.len() - half, "{name}");
                for (a, b) in profile.samples.iter().skip(half).zip(copy.samples.iter()) {
                    assert_eq!(
                        resolved_sample(source, &a),
                        resolved_sample(&d, &b),
                        "{name}"
                    );
                }
                assert_eq!(
                    source.string(profile.sample_type.type_strindex),
                    d.string(copy.sample_type.type_strindex),
                    "{name}"
                );
                assert!(copy.original_payload.is_empty());
                // Nothing unused: every stack past the zero value is some copied sample's.
                let used: std::collections::HashSet<i32> =
                    copy.samples.iter().map(|s| s.stack_index).collect();
                assert!(d.stack_count() <= used.len() + 1, "{name}");
                assert!(d.location_count() <= source.location_count(), "{name}");
                // And the copy is a valid batch of its own.
                let alone = ProfileBatch::from_parts(
                    d,
                    vec![crate::ResourceProfiles {
                        scope_profiles: vec![crate::ScopeProfiles {
                            profiles: vec![copy],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                );
                ProfileBatch::decode(&alone.encode_to_vec()).expect("the copy is valid OTLP");
            }
        }
    }

    /// The old model's validation cases that the tests above do not already cover, judged
    /// by the same outcomes.
    #[test]
    fn sentinels_links_nested_indices_and_repeated_keys_are_checked() {
        let sample = || pb::Sample {
            values: vec![1],
            ..Default::default()
        };
        // A function table whose first entry is not the zero value.
        let dict = pb::ProfilesDictionary {
            function_table: vec![pb::Function {
                start_line: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(
            matches!(
                ProfileBatch::decode(&one_profile(vec![sample()], dict)),
                Err(ValidationError::MissingZeroValue {
                    table: "function_table",
                    ..
                })
            ),
            "a function sentinel that is not zero"
        );
        // An empty first link is the zero value (and reads as zero-filled ids).
        let dict = pb::ProfilesDictionary {
            link_table: vec![Default::default()],
            ..Default::default()
        };
        let batch = ProfileBatch::decode(&one_profile(vec![sample()], dict)).expect("valid");
        assert!(batch.dictionary().link(0).is_zero());
        // A line's function out of range, named by its path.
        let dict = pb::ProfilesDictionary {
            location_table: vec![
                pb::Location::default(),
                pb::Location {
                    lines: vec![
                        Default::default(),
                        pb::Line {
                            function_index: 7,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            err(&one_profile(vec![sample()], dict)),
            "dictionary.location_table[1].lines[1].function_index: index 7 is out of range of function_table (length 1)"
        );
        // One key twice in a sample's list, and on a location.
        let keyed = |unit_strindex| pb::KeyValueAndUnit {
            key_strindex: 1,
            unit_strindex,
            value: None,
        };
        let dict = pb::ProfilesDictionary {
            string_table: vec!["".into(), "k".into()],
            attribute_table: vec![Default::default(), keyed(0), keyed(1)],
            location_table: vec![
                pb::Location::default(),
                pb::Location {
                    attribute_indices: vec![1, 2],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert!(err(&one_profile(vec![sample()], dict.clone())).starts_with(
            "dictionary.location_table[1].attribute_indices: attributes 1 and 2 have the same key"
        ));
        let dict = pb::ProfilesDictionary {
            location_table: Vec::new(),
            ..dict
        };
        let repeated = pb::Sample {
            attribute_indices: vec![1, 2],
            ..sample()
        };
        assert!(err(&one_profile(vec![repeated], dict)).contains("same key"));
    }

    /// Go's pdata (collector v0.165.0) writes every attribute's value, so its
    /// `attribute_table[0]` arrives as `KeyValueAndUnit{value: AnyValue{}}`: the zero value
    /// for every reader. Elsewhere an empty value and an absent one stay as they came.
    #[test]
    fn an_empty_any_value_is_the_absent_value_as_go_writes_row_zero() {
        use profcol_proto::otlp::common::v1::{AnyValue, any_value};
        let empty = || Some(AnyValue { value: None });
        let dictionary = pb::ProfilesDictionary {
            string_table: vec!["".into(), "k".into(), "v".into()],
            attribute_table: vec![
                pb::KeyValueAndUnit {
                    value: empty(),
                    ..Default::default()
                },
                pb::KeyValueAndUnit {
                    key_strindex: 1,
                    value: empty(),
                    ..Default::default()
                },
                pb::KeyValueAndUnit {
                    key_strindex: 1,
                    value: None,
                    ..Default::default()
                },
                pb::KeyValueAndUnit {
                    key_strindex: 1,
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("v".into())),
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let batch = ProfileBatch::decode(&one_profile(vec![], dictionary)).expect("Go's row zero");
        let d = batch.dictionary();
        assert_eq!(
            d.attributes.get(0),
            Some(&[][..]),
            "row zero is stored as the zero value"
        );
        assert_ne!(
            d.attributes.get(1),
            d.attributes.get(2),
            "kept as they came"
        );
        assert_eq!(d.attributes.len(), 4);
    }
}
