//! OTLP/JSON codec for OTLP profiles (opentelemetry-proto v1.11.0, `v1development` packages):
//! `ProfilesData` / `ExportProfilesServiceRequest` and `ExportProfilesServiceResponse`.
//!
//! It follows the OTLP/JSON rules the Go collector applies:
//! - lowerCamelCase field names on output; lowerCamelCase and the original snake_case proto names
//!   accepted on input; unknown fields ignored; `null` means "unset".
//! - `traceId`, `spanId`, `profileId` as lowercase hex (not base64); other bytes
//!   (`originalPayload`, `bytesValue`) as standard base64 (input: padded or not, standard or URL-safe
//!   alphabet).
//! - 64-bit integers written as decimal strings, accepted as strings or JSON numbers; 32-bit
//!   integers written as numbers, accepted as numbers or numeric strings. Non-integral or
//!   out-of-range values are errors that name the JSON path.
//! - Zero / empty fields omitted on output, except `Profile.sampleType` and `Profile.periodType`,
//!   which are always written (`{}` when unset). Dictionary tables are written whole, index-0 zero
//!   entries included.
//! - Doubles as JSON numbers; NaN and the infinities as `"NaN"`, `"Infinity"`, `"-Infinity"`.
//!
//! It is hand-written rather than derived with serde because the serde support of the Rust
//! `opentelemetry-proto` crate is not OTLP-compliant: it writes ids and byte fields as arrays of
//! numbers and 64-bit integers as JSON numbers, and rejects the decimal strings the Go collector
//! sends. Output is streamed straight into the caller's buffer (no intermediate JSON tree), so large
//! exports cost one pass; input is parsed into a `serde_json::Value` and then walked (moving strings
//! out of it rather than copying them). Index fields are not range-checked here.
//!
//! Precision note: serde_json's default float parser is best-effort; a `doubleValue` that needs 17
//! significant digits or an extreme exponent can read back 1-2 ULP off. Enabling serde_json's
//! `float_roundtrip` feature makes doubles round-trip exactly. Integers are always exact.

mod read;
mod write;

pub use read::{read_export_response_json, read_profiles_json};
pub use write::{write_export_response_json, write_profiles_json};

/// Deepest `AnyValue` nesting (array / kvlist inside array / kvlist ...) accepted on input; a
/// top-level attribute value is level 1. Note that serde_json's own nesting limit (128 JSON levels)
/// stops JSON text at roughly 40 `AnyValue` levels already; this cap guards the walker itself.
pub const MAX_ANY_VALUE_DEPTH: usize = 64;

/// Why an OTLP/JSON document could not be decoded. Every variant except [`JsonError::Syntax`]
/// names the offending field by its JSON path, e.g.
/// `resourceProfiles[0].scopeProfiles[1].profiles[0].samples[3].values[2]`.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not well-formed JSON, or nested deeper than serde_json's limit (128 levels).
    #[error("syntax error: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A value of the wrong JSON type or format.
    #[error("{path}: expected {expected}, got {got}")]
    Type {
        /// JSON path of the value.
        path: String,
        /// What the field needs.
        expected: &'static str,
        /// The value found (strings shortened).
        got: String,
    },
    /// An integer outside the range of its protobuf type.
    #[error("{path}: expected {expected}, got {got} (out of range)")]
    OutOfRange {
        /// JSON path of the value.
        path: String,
        /// What the field needs.
        expected: &'static str,
        /// The value found.
        got: String,
    },
    /// More than one member of the `AnyValue` oneof is set.
    #[error("{path}: AnyValue has more than one value set ({first} and {second})")]
    ConflictingOneof {
        /// JSON path of the AnyValue.
        path: String,
        /// One member found.
        first: &'static str,
        /// Another member found.
        second: &'static str,
    },
    /// `AnyValue`s nested deeper than [`MAX_ANY_VALUE_DEPTH`].
    #[error("{path}: AnyValue nested deeper than {limit} levels")]
    TooDeep {
        /// JSON path of the first AnyValue past the limit.
        path: String,
        /// The limit.
        limit: usize,
    },
}

/// Why OTLP/JSON could not become a batch: not OTLP/JSON, or OTLP that fails the checks.
#[derive(Debug, thiserror::Error)]
pub enum FromJsonError {
    #[error(transparent)]
    Json(#[from] JsonError),
    #[error(transparent)]
    Invalid(#[from] crate::decode::ValidationError),
}

#[cfg(test)]
mod tests {
    //! OTLP/JSON codec tests.

    use super::read::*;
    use super::write::*;
    use super::*;
    use serde_json::Value;

    use profcol_proto::otlp::collector::profiles::v1development::{
        ExportProfilesPartialSuccess, ExportProfilesServiceResponse,
    };
    use profcol_proto::otlp::common::v1::any_value::Value as Av;
    use profcol_proto::otlp::common::v1::{
        AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
    };
    use profcol_proto::otlp::profiles::v1development::{
        Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile, ProfilesData,
        ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
    };
    use profcol_proto::otlp::resource::v1::Resource;
    use serde_json::json;

    fn s(x: &str) -> String {
        x.to_owned()
    }

    fn any(v: Av) -> Option<AnyValue> {
        Some(AnyValue { value: Some(v) })
    }

    fn kv(key: &str, v: Av) -> KeyValue {
        KeyValue {
            key: s(key),
            value: any(v),
            key_strindex: 0,
        }
    }

    /// The OTLP/JSON the model writes for `d` (checked on the way in, as input is).
    fn encode(d: &ProfilesData) -> String {
        let batch = crate::ProfileBatch::new(d.clone()).unwrap_or_else(|e| panic!("invalid: {e}"));
        String::from_utf8(batch.to_json()).unwrap_or_else(|e| panic!("output is not UTF-8: {e}"))
    }

    fn decode(text: &str) -> ProfilesData {
        read_profiles_json(text.as_bytes()).unwrap_or_else(|e| panic!("decode failed: {e}"))
    }

    fn decode_err(text: &str) -> JsonError {
        match read_profiles_json(text.as_bytes()) {
            Ok(d) => panic!("expected an error, decoded {d:?}"),
            Err(e) => e,
        }
    }

    /// Puts `profile` (a JSON object text) at resourceProfiles[0].scopeProfiles[0].profiles[0].
    fn in_profile(profile: &str) -> String {
        format!(r#"{{"resourceProfiles":[{{"scopeProfiles":[{{"profiles":[{profile}]}}]}}]}}"#)
    }

    /// Puts an AnyValue JSON text at resourceProfiles[0].resource.attributes[0].value.
    fn in_attr(value: &str) -> String {
        format!(
            r#"{{"resourceProfiles":[{{"resource":{{"attributes":[{{"key":"k","value":{value}}}]}}}}]}}"#
        )
    }

    fn first_attr(d: &ProfilesData) -> Option<AnyValue> {
        d.resource_profiles[0]
            .resource
            .clone()
            .unwrap_or_default()
            .attributes[0]
            .value
            .clone()
    }

    const GO_STYLE: &str = r#"{
  "resourceProfiles": [{
    "resource": {
      "attributes": [
        {"key": "service.name", "value": {"stringValue": "checkout"}},
        {"keyStrindex": 5, "value": {"stringValueStrindex": 6}},
        {"key": "host.cpus", "value": {"intValue": "8"}},
        {"key": "labels", "value": {"kvlistValue": {"values": [
          {"key": "team", "value": {"stringValue": "perf"}},
          {"key": "tiers", "value": {"arrayValue": {"values": [
            {"stringValue": "a"}, {"intValue": "-2"}, {"boolValue": true}, {"doubleValue": 0.5},
            {"bytesValue": "AAEC/w=="}, {}
          ]}}}
        ]}}}
      ],
      "droppedAttributesCount": 1,
      "entityRefs": [{"schemaUrl": "https://opentelemetry.io/schemas/1.37.0", "type": "service",
                      "idKeys": ["service.name"], "descriptionKeys": ["host.cpus"]}]
    },
    "scopeProfiles": [{
      "scope": {"name": "go.opentelemetry.io/ebpf-profiler", "version": "v0.0.202601",
                "attributes": [{"key": "k", "value": {"boolValue": false}}], "droppedAttributesCount": 2},
      "profiles": [{
        "sampleType": {"typeStrindex": 1, "unitStrindex": 2},
        "samples": [
          {"stackIndex": 1, "attributeIndices": [1], "linkIndex": 1, "values": ["3"],
           "timestampsUnixNano": ["1700000000100000000"]},
          {"stackIndex": 1, "timestampsUnixNano": ["1700000000200000000", "1700000000300000000"]}
        ],
        "timeUnixNano": "1700000000000000000",
        "durationNano": "1000000000",
        "periodType": {"typeStrindex": 3, "unitStrindex": 4},
        "period": "10000000",
        "profileId": "0102030405060708090a0b0c0d0e0f10",
        "droppedAttributesCount": 3,
        "originalPayloadFormat": "pprof",
        "originalPayload": "H4sIAAAAAAAA/w==",
        "attributeIndices": [2]
      }],
      "schemaUrl": "https://opentelemetry.io/schemas/1.37.0"
    }],
    "schemaUrl": "https://opentelemetry.io/schemas/1.36.0"
  }],
  "dictionary": {
    "mappingTable": [{}, {"memoryStart": "4194304", "memoryLimit": "8388608", "fileOffset": "4096",
                          "filenameStrindex": 7, "attributeIndices": [3]}],
    "locationTable": [{}, {"mappingIndex": 1, "address": "4198400", "attributeIndices": [1],
                           "lines": [{"functionIndex": 2, "line": "10"},
                                     {"functionIndex": 1, "line": "42", "column": "7"}]}],
    "functionTable": [{}, {"nameStrindex": 8, "systemNameStrindex": 9, "filenameStrindex": 10, "startLine": "40"},
                      {"nameStrindex": 11}],
    "linkTable": [{}, {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331"}],
    "stringTable": ["", "samples", "count", "cpu", "nanoseconds", "process.executable.name",
                    "/usr/bin/checkout", "libc.so.6", "main", "_Z4mainv", "main.c", "inlined",
                    "thread.name", "worker-1", "build.id", "heap.size", "By"],
    "attributeTable": [{}, {"keyStrindex": 12, "value": {"stringValueStrindex": 13}},
                       {"keyStrindex": 15, "value": {"intValue": "4096"}, "unitStrindex": 16},
                       {"keyStrindex": 14, "value": {"stringValue": "abc123"}}],
    "stackTable": [{}, {"locationIndices": [1]}]
  }
}"#;

    fn go_style_expected() -> ProfilesData {
        let schema = s("https://opentelemetry.io/schemas/1.37.0");
        let resource = Resource {
            attributes: vec![
                kv("service.name", Av::StringValue(s("checkout"))),
                KeyValue {
                    key: String::new(),
                    value: any(Av::StringValueStrindex(6)),
                    key_strindex: 5,
                },
                kv("host.cpus", Av::IntValue(8)),
                kv(
                    "labels",
                    Av::KvlistValue(KeyValueList {
                        values: vec![
                            kv("team", Av::StringValue(s("perf"))),
                            kv(
                                "tiers",
                                Av::ArrayValue(ArrayValue {
                                    values: vec![
                                        AnyValue {
                                            value: Some(Av::StringValue(s("a"))),
                                        },
                                        AnyValue {
                                            value: Some(Av::IntValue(-2)),
                                        },
                                        AnyValue {
                                            value: Some(Av::BoolValue(true)),
                                        },
                                        AnyValue {
                                            value: Some(Av::DoubleValue(0.5)),
                                        },
                                        AnyValue {
                                            value: Some(Av::BytesValue(vec![0, 1, 2, 255])),
                                        },
                                        AnyValue { value: None },
                                    ],
                                }),
                            ),
                        ],
                    }),
                ),
            ],
            dropped_attributes_count: 1,
            entity_refs: vec![EntityRef {
                schema_url: schema.clone(),
                r#type: s("service"),
                id_keys: vec![s("service.name")],
                description_keys: vec![s("host.cpus")],
            }],
        };
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: 1,
                unit_strindex: 2,
            }),
            samples: vec![
                Sample {
                    stack_index: 1,
                    attribute_indices: vec![1],
                    link_index: 1,
                    values: vec![3],
                    timestamps_unix_nano: vec![1_700_000_000_100_000_000],
                },
                Sample {
                    stack_index: 1,
                    timestamps_unix_nano: vec![
                        1_700_000_000_200_000_000,
                        1_700_000_000_300_000_000,
                    ],
                    ..Default::default()
                },
            ],
            time_unix_nano: 1_700_000_000_000_000_000,
            duration_nano: 1_000_000_000,
            period_type: Some(ValueType {
                type_strindex: 3,
                unit_strindex: 4,
            }),
            period: 10_000_000,
            profile_id: (1..=16).collect(),
            dropped_attributes_count: 3,
            original_payload_format: s("pprof"),
            original_payload: vec![0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff],
            attribute_indices: vec![2],
        };
        let dictionary = ProfilesDictionary {
            mapping_table: vec![
                Mapping::default(),
                Mapping {
                    memory_start: 0x40_0000,
                    memory_limit: 0x80_0000,
                    file_offset: 4096,
                    filename_strindex: 7,
                    attribute_indices: vec![3],
                },
            ],
            location_table: vec![
                Location::default(),
                Location {
                    mapping_index: 1,
                    address: 0x40_1000,
                    lines: vec![
                        Line {
                            function_index: 2,
                            line: 10,
                            column: 0,
                        },
                        Line {
                            function_index: 1,
                            line: 42,
                            column: 7,
                        },
                    ],
                    attribute_indices: vec![1],
                },
            ],
            function_table: vec![
                Function::default(),
                Function {
                    name_strindex: 8,
                    system_name_strindex: 9,
                    filename_strindex: 10,
                    start_line: 40,
                },
                Function {
                    name_strindex: 11,
                    ..Default::default()
                },
            ],
            link_table: vec![
                Link::default(),
                Link {
                    trace_id: vec![
                        0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21,
                        0x1c, 0x80, 0x31, 0x9c,
                    ],
                    span_id: vec![0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31],
                },
            ],
            string_table: [
                "",
                "samples",
                "count",
                "cpu",
                "nanoseconds",
                "process.executable.name",
                "/usr/bin/checkout",
                "libc.so.6",
                "main",
                "_Z4mainv",
                "main.c",
                "inlined",
                "thread.name",
                "worker-1",
                "build.id",
                "heap.size",
                "By",
            ]
            .iter()
            .map(|x| s(x))
            .collect(),
            attribute_table: vec![
                KeyValueAndUnit::default(),
                KeyValueAndUnit {
                    key_strindex: 12,
                    value: any(Av::StringValueStrindex(13)),
                    unit_strindex: 0,
                },
                KeyValueAndUnit {
                    key_strindex: 15,
                    value: any(Av::IntValue(4096)),
                    unit_strindex: 16,
                },
                KeyValueAndUnit {
                    key_strindex: 14,
                    value: any(Av::StringValue(s("abc123"))),
                    unit_strindex: 0,
                },
            ],
            stack_table: vec![
                Stack::default(),
                Stack {
                    location_indices: vec![1],
                },
            ],
        };
        ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(resource),
                scope_profiles: vec![ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: s("go.opentelemetry.io/ebpf-profiler"),
                        version: s("v0.0.202601"),
                        attributes: vec![kv("k", Av::BoolValue(false))],
                        dropped_attributes_count: 2,
                    }),
                    profiles: vec![profile],
                    schema_url: schema,
                }],
                schema_url: s("https://opentelemetry.io/schemas/1.36.0"),
            }],
            dictionary: Some(dictionary),
        }
    }

    #[test]
    fn go_style_document_decodes_exactly() {
        assert_eq!(decode(GO_STYLE), go_style_expected());
    }

    #[test]
    fn go_style_document_reencodes_to_the_same_json() {
        // Every field of the Go-style document is canonical, so our output must carry exactly
        // the same JSON tree.
        let ours: Value = serde_json::from_str(&encode(&go_style_expected()))
            .unwrap_or_else(|e| panic!("our output is not JSON: {e}"));
        let theirs: Value =
            serde_json::from_str(GO_STYLE).unwrap_or_else(|e| panic!("fixture is not JSON: {e}"));
        // Except that the model resolves string references in resource attributes (those
        // are plain structs for the processors that edit them), so that one comes back
        // spelled out.
        let mut theirs = theirs;
        let attributes = &mut theirs["resourceProfiles"][0]["resource"]["attributes"];
        for kv in attributes.as_array_mut().into_iter().flatten() {
            if kv["keyStrindex"] == 5 {
                *kv = serde_json::json!({
                    "key": "process.executable.name",
                    "value": {"stringValue": "/usr/bin/checkout"}
                });
            }
        }
        assert_eq!(ours, theirs);
    }

    /// Every field set to a non-default value, every AnyValue variant, extreme integers.
    fn rich() -> ProfilesData {
        let nested = Av::KvlistValue(KeyValueList {
            values: vec![
                kv(
                    "s",
                    Av::StringValue(s(
                        "quote \" backslash \\ newline \n tab \t ctl \u{1} é 😀 </script>",
                    )),
                ),
                kv("empty-string", Av::StringValue(String::new())),
                kv("b", Av::BoolValue(true)),
                kv("i-min", Av::IntValue(i64::MIN)),
                kv("i-max", Av::IntValue(i64::MAX)),
                kv("i-zero", Av::IntValue(0)),
                kv("d", Av::DoubleValue(-0.00125)),
                kv("d-big", Av::DoubleValue(6.02214076e23)),
                kv("d-zero", Av::DoubleValue(0.0)),
                kv("bytes", Av::BytesValue(vec![0xfb, 0xff, 0x00, 0x10])),
                kv(
                    "arr",
                    Av::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue::default(),
                            AnyValue {
                                value: Some(Av::ArrayValue(ArrayValue::default())),
                            },
                            AnyValue {
                                value: Some(Av::KvlistValue(KeyValueList::default())),
                            },
                        ],
                    }),
                ),
                KeyValue {
                    key: s("unset"),
                    value: None,
                    key_strindex: 0,
                },
            ],
        });
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: 1,
                unit_strindex: 2,
            }),
            samples: vec![Sample {
                stack_index: 1,
                attribute_indices: vec![1, 2],
                link_index: 1,
                values: vec![i64::MIN, -1, 0, i64::MAX],
                timestamps_unix_nano: vec![0, 1, u64::MAX, 1_700_000_000_000_000_001],
            }],
            time_unix_nano: 1_700_000_000_000_000_000,
            duration_nano: u64::MAX,
            period_type: Some(ValueType {
                type_strindex: 3,
                unit_strindex: 4,
            }),
            period: -10,
            profile_id: (1..=16).collect(),
            dropped_attributes_count: u32::MAX,
            original_payload_format: s("pprof"),
            original_payload: (0..=255).collect(),
            attribute_indices: vec![3, 4],
        };
        let zero_types = Profile {
            sample_type: Some(ValueType::default()),
            period_type: Some(ValueType::default()),
            ..Default::default()
        };
        ProfilesData {
            resource_profiles: vec![
                ResourceProfiles {
                    resource: Some(Resource {
                        attributes: vec![kv("nested", nested)],
                        dropped_attributes_count: 7,
                        entity_refs: vec![EntityRef {
                            schema_url: s("https://example.invalid/schema"),
                            r#type: s("host"),
                            id_keys: vec![s("host.id"), s("host.name")],
                            description_keys: vec![s("host.arch")],
                        }],
                    }),
                    scope_profiles: vec![
                        ScopeProfiles {
                            scope: Some(InstrumentationScope {
                                name: s("profcol"),
                                version: s("1.0"),
                                attributes: vec![kv("x", Av::DoubleValue(1.5))],
                                dropped_attributes_count: 4,
                            }),
                            profiles: vec![profile, zero_types],
                            schema_url: s("scope-schema"),
                        },
                        ScopeProfiles {
                            scope: Some(InstrumentationScope::default()),
                            ..Default::default()
                        },
                    ],
                    schema_url: s("resource-schema"),
                },
                ResourceProfiles {
                    resource: Some(Resource::default()),
                    ..Default::default()
                },
                ResourceProfiles::default(),
            ],
            dictionary: Some(ProfilesDictionary {
                mapping_table: vec![
                    Mapping::default(),
                    Mapping {
                        memory_start: 1,
                        memory_limit: u64::MAX,
                        file_offset: 3,
                        filename_strindex: 4,
                        attribute_indices: vec![5, 6],
                    },
                ],
                location_table: vec![
                    Location::default(),
                    Location {
                        mapping_index: 1,
                        address: 0xffff_ffff_ffff_fff0,
                        lines: vec![Line {
                            function_index: 1,
                            line: -2,
                            column: i64::MAX,
                        }],
                        attribute_indices: vec![7],
                    },
                    Location {
                        mapping_index: 0,
                        address: 0x10,
                        lines: Vec::new(),
                        attribute_indices: Vec::new(),
                    },
                ],
                function_table: vec![
                    Function::default(),
                    Function {
                        name_strindex: 1,
                        system_name_strindex: 2,
                        filename_strindex: 3,
                        start_line: 4,
                    },
                ],
                link_table: vec![
                    Link::default(),
                    Link {
                        trace_id: (0xf0..=0xff).collect(),
                        span_id: (1..=8).collect(),
                    },
                ],
                string_table: vec![s(""), s("a"), s("b\"c"), s("ü"), s("/lib/x.so")],
                attribute_table: vec![
                    KeyValueAndUnit::default(),
                    KeyValueAndUnit {
                        key_strindex: 1,
                        value: any(Av::IntValue(-3)),
                        unit_strindex: 2,
                    },
                    KeyValueAndUnit {
                        key_strindex: 2,
                        value: Some(AnyValue::default()),
                        unit_strindex: 0,
                    },
                    KeyValueAndUnit {
                        key_strindex: 3,
                        value: any(Av::StringValueStrindex(4)),
                        unit_strindex: 0,
                    },
                    KeyValueAndUnit {
                        key_strindex: 4,
                        value: any(Av::IntValue(i64::MIN)),
                        unit_strindex: 0,
                    },
                    KeyValueAndUnit {
                        key_strindex: 1,
                        value: any(Av::BoolValue(false)),
                        unit_strindex: 0,
                    },
                    KeyValueAndUnit {
                        key_strindex: 2,
                        value: any(Av::DoubleValue(-0.5)),
                        unit_strindex: 4,
                    },
                    KeyValueAndUnit {
                        key_strindex: 3,
                        value: None,
                        unit_strindex: 0,
                    },
                ],
                stack_table: vec![
                    Stack::default(),
                    Stack {
                        location_indices: vec![1, 1, 2],
                    },
                ],
            }),
        }
    }

    #[test]
    fn rich_profiles_data_round_trips() {
        let data = rich();
        let text = encode(&data);
        assert_eq!(decode(&text), data);
        // Encoding is deterministic and a fixed point.
        assert_eq!(encode(&decode(&text)), text);
    }

    #[test]
    fn encoded_text_follows_otlp_json_conventions() {
        let text = encode(&rich());
        for needle in [
            r#""timeUnixNano":"1700000000000000000""#,
            r#""durationNano":"18446744073709551615""#,
            r#""period":"-10""#,
            r#""profileId":"0102030405060708090a0b0c0d0e0f10""#,
            // The zero link is written empty, as its protobuf encoding is.
            r#""linkTable":[{},{"traceId":"f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff","spanId":"0102030405060708"}]"#,
            r#""values":["-9223372036854775808","-1","0","9223372036854775807"]"#,
            r#""timestampsUnixNano":["0","1","18446744073709551615","1700000000000000001"]"#,
            r#""attributeIndices":[3,4]"#,
            r#""droppedAttributesCount":4294967295"#,
            r#""memoryLimit":"18446744073709551615""#,
            r#""address":"18446744073709551600""#,
            r#""line":"-2","column":"9223372036854775807""#,
            r#""startLine":"4""#,
            r#"{"key":"i-zero","value":{"intValue":"0"}}"#,
            r#"{"key":"empty-string","value":{"stringValue":""}}"#,
            r#"{"key":"d-zero","value":{"doubleValue":0.0}}"#,
            r#"{"key":"bytes","value":{"bytesValue":"+/8AEA=="}}"#,
            r#"{"keyStrindex":3,"value":{"stringValueStrindex":4}}"#,
            r#"{"keyStrindex":4,"value":{"intValue":"-9223372036854775808"}}"#,
            r#"{"arrayValue":{"values":[{},{"arrayValue":{}},{"kvlistValue":{}}]}}"#,
            r#"{"key":"unset"}"#,
            r#""sampleType":{"typeStrindex":1,"unitStrindex":2}"#,
            // Zero value types are still written.
            r#"{"sampleType":{},"periodType":{}}"#,
            r#""originalPayload":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w==""#,
            r#""stringTable":["","a","b\"c","ü","/lib/x.so"]"#,
            r#""attributeTable":[{},{"keyStrindex":1,"value":{"intValue":"-3"},"unitStrindex":2},{"keyStrindex":2,"value":{}},"#,
            r#""stackTable":[{},{"locationIndices":[1,1,2]}]"#,
            r#""mappingTable":[{},"#,
            r#"{"scope":{}}],"schemaUrl":"resource-schema""#,
            r#"{"resource":{}},{}],"dictionary""#,
        ] {
            assert!(text.contains(needle), "missing {needle}\nin {text}");
        }
        // Compact: no whitespace outside strings.
        assert!(!text.contains(": ") && !text.contains(", ") && !text.contains('\n'));
        assert!(
            text.contains(r#"quote \" backslash \\ newline \n tab \t ctl \u0001 é 😀 </script>"#)
        );
    }

    #[test]
    fn base64_alphabet_in_output_is_standard() {
        // '+' and '/' (standard), never '-' or '_' (URL-safe).
        let mut out = Vec::new();
        write_base64(&mut out, &[0xfb, 0xff, 0xbf]);
        assert_eq!(out, br#""+/+/""#);
    }

    #[test]
    fn exact_output_of_a_small_request() {
        let rp = ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Av::StringValue(s("svc")))],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: None,
                profiles: vec![Profile {
                    sample_type: Some(ValueType {
                        type_strindex: 1,
                        unit_strindex: 2,
                    }),
                    samples: vec![Sample {
                        stack_index: 1,
                        values: vec![-5],
                        timestamps_unix_nano: vec![7],
                        ..Default::default()
                    }],
                    time_unix_nano: 1,
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        };
        // Every index names an entry: the model holds only valid data.
        let dictionary = ProfilesDictionary {
            string_table: vec![s(""), s("samples"), s("count")],
            stack_table: vec![Stack::default(), Stack::default()],
            ..Default::default()
        };
        let out = encode(&ProfilesData {
            dictionary: Some(dictionary),
            resource_profiles: vec![rp],
        });
        assert_eq!(
            out,
            concat!(
                r#"{"resourceProfiles":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},"#,
                r#""scopeProfiles":[{"profiles":[{"sampleType":{"typeStrindex":1,"unitStrindex":2},"#,
                r#""samples":[{"stackIndex":1,"values":["-5"],"timestampsUnixNano":["7"]}],"#,
                r#""timeUnixNano":"1","periodType":{}}]}]}],"dictionary":{"mappingTable":[{}],"#,
                r#""locationTable":[{}],"functionTable":[{}],"linkTable":[{}],"#,
                r#""stringTable":["","samples","count"],"attributeTable":[{}],"stackTable":[{},{}]}}"#
            )
        );
    }

    #[test]
    fn unset_sample_and_period_type_are_written_as_empty_objects() {
        let rp = ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile::default()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = encode(&ProfilesData {
            dictionary: None,
            resource_profiles: vec![rp],
        });
        assert_eq!(
            text,
            concat!(
                r#"{"resourceProfiles":[{"scopeProfiles":[{"profiles":[{"sampleType":{},"periodType":{}}]}]}],"#,
                r#""dictionary":{"mappingTable":[{}],"locationTable":[{}],"functionTable":[{}],"#,
                r#""linkTable":[{}],"stringTable":[""],"attributeTable":[{}],"stackTable":[{}]}}"#
            )
        );
        // They read back as present-but-zero.
        let p = &decode(&text).resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(p.sample_type, Some(ValueType::default()));
        assert_eq!(p.period_type, Some(ValueType::default()));
    }

    #[test]
    fn dictionary_zero_entries_are_written_whole() {
        let dict = ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: vec![Location::default()],
            function_table: vec![Function::default()],
            link_table: vec![Link::default()],
            string_table: vec![String::new()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![Stack::default()],
        };
        let out = encode(&ProfilesData {
            dictionary: Some(dict.clone()),
            resource_profiles: Vec::new(),
        });
        assert_eq!(
            out,
            r#"{"dictionary":{"mappingTable":[{}],"locationTable":[{}],"functionTable":[{}],"linkTable":[{}],"stringTable":[""],"attributeTable":[{}],"stackTable":[{}]}}"#
        );
        let back = decode(&out);
        assert_eq!(back.dictionary, Some(dict));
        assert!(back.resource_profiles.is_empty());
    }

    #[test]
    fn error_message_names_the_json_path() {
        let doc = r#"{"resourceProfiles":[{"scopeProfiles":[{},{"profiles":[{"samples":[{},{},{},
        {"values":["1",2,"abc"]}]}]}]}]}"#;
        let err = decode_err(doc);
        assert!(matches!(err, JsonError::Type { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            r#"resourceProfiles[0].scopeProfiles[1].profiles[0].samples[3].values[2]: expected a 64-bit integer (number or decimal string), got "abc""#
        );
    }

    #[test]
    fn sixty_four_bit_fields_accept_json_numbers() {
        let d = decode(&in_profile(
            r#"{"timeUnixNano":1700000000000000000,"durationNano":18446744073709551615,"period":-9223372036854775808,
           "samples":[{"values":[1,-2,1e3,"4",5.0,"6e1","-7"],"timestampsUnixNano":[0,"18446744073709551615"]}]}"#,
        ));
        let p = &d.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(p.time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(p.duration_nano, u64::MAX);
        assert_eq!(p.period, i64::MIN);
        assert_eq!(p.samples[0].values, vec![1, -2, 1000, 4, 5, 60, -7]);
        assert_eq!(p.samples[0].timestamps_unix_nano, vec![0, u64::MAX]);
        // And on every other 64-bit field.
        let d = decode(
            r#"{"dictionary":{"mappingTable":[{"memoryStart":1,"memoryLimit":2,"fileOffset":3}],
            "locationTable":[{"address":4,"lines":[{"line":5,"column":6}]}],
            "functionTable":[{"startLine":7}]}}"#,
        );
        let dict = d.dictionary.unwrap_or_default();
        assert_eq!(
            (
                dict.mapping_table[0].memory_start,
                dict.mapping_table[0].memory_limit,
                dict.mapping_table[0].file_offset
            ),
            (1, 2, 3)
        );
        assert_eq!(dict.location_table[0].address, 4);
        assert_eq!(
            dict.location_table[0].lines[0],
            Line {
                function_index: 0,
                line: 5,
                column: 6
            }
        );
        assert_eq!(dict.function_table[0].start_line, 7);
        assert_eq!(
            first_attr(&decode(&in_attr(r#"{"intValue":-42}"#))),
            any(Av::IntValue(-42))
        );
    }

    #[test]
    fn thirty_two_bit_fields_accept_numeric_strings() {
        let d = decode(&in_profile(
            r#"{"sampleType":{"typeStrindex":"1","unitStrindex":2},"droppedAttributesCount":"4294967295",
           "attributeIndices":["-1",2],"samples":[{"stackIndex":"3","linkIndex":"4","attributeIndices":["5"]}]}"#,
        ));
        let p = &d.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(
            p.sample_type,
            Some(ValueType {
                type_strindex: 1,
                unit_strindex: 2
            })
        );
        assert_eq!(p.dropped_attributes_count, u32::MAX);
        assert_eq!(p.attribute_indices, vec![-1, 2]);
        assert_eq!((p.samples[0].stack_index, p.samples[0].link_index), (3, 4));
        assert_eq!(p.samples[0].attribute_indices, vec![5]);
    }

    /// (profile JSON, expected full error message)
    const PROFILE_REJECTS: &[(&str, &str)] = &[
        // non-integral
        (
            r#"{"period":1.5}"#,
            r#"period: expected a 64-bit integer (number or decimal string), got 1.5"#,
        ),
        (
            r#"{"period":"1.5"}"#,
            r#"period: expected a 64-bit integer (number or decimal string), got "1.5""#,
        ),
        (
            r#"{"samples":[{"stackIndex":0.5}]}"#,
            r#"samples[0].stackIndex: expected a 32-bit integer (number or decimal string), got 0.5"#,
        ),
        // out of range
        (
            r#"{"timeUnixNano":"-1"}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got "-1" (out of range)"#,
        ),
        (
            r#"{"timeUnixNano":-1}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got -1 (out of range)"#,
        ),
        (
            r#"{"durationNano":18446744073709551616}"#,
            r#"durationNano: expected an unsigned 64-bit integer (number or decimal string), got 1.8446744073709552e+19 (out of range)"#,
        ),
        (
            r#"{"durationNano":"18446744073709551616"}"#,
            r#"durationNano: expected an unsigned 64-bit integer (number or decimal string), got "18446744073709551616" (out of range)"#,
        ),
        (
            r#"{"period":"9223372036854775808"}"#,
            r#"period: expected a 64-bit integer (number or decimal string), got "9223372036854775808" (out of range)"#,
        ),
        (
            r#"{"period":9223372036854775808}"#,
            r#"period: expected a 64-bit integer (number or decimal string), got 9223372036854775808 (out of range)"#,
        ),
        (
            r#"{"period":"1e300"}"#,
            r#"period: expected a 64-bit integer (number or decimal string), got "1e300" (out of range)"#,
        ),
        (
            r#"{"samples":[{"stackIndex":2147483648}]}"#,
            r#"samples[0].stackIndex: expected a 32-bit integer (number or decimal string), got 2147483648 (out of range)"#,
        ),
        (
            r#"{"droppedAttributesCount":-1}"#,
            r#"droppedAttributesCount: expected an unsigned 32-bit integer (number or decimal string), got -1 (out of range)"#,
        ),
        // wrong type / malformed
        (
            r#"{"timeUnixNano":true}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got true"#,
        ),
        (
            r#"{"timeUnixNano":""}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got """#,
        ),
        (
            r#"{"timeUnixNano":" 5"}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got " 5""#,
        ),
        (
            r#"{"timeUnixNano":"NaN"}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got "NaN""#,
        ),
        (
            r#"{"timeUnixNano":[1]}"#,
            r#"timeUnixNano: expected an unsigned 64-bit integer (number or decimal string), got an array"#,
        ),
        (
            r#"{"samples":{}}"#,
            r#"samples: expected an array, got an object"#,
        ),
        (
            r#"{"samples":[1]}"#,
            r#"samples[0]: expected a Sample object, got 1"#,
        ),
        (
            r#"{"samples":[{"values":[null]}]}"#,
            r#"samples[0].values[0]: expected a 64-bit integer (number or decimal string), got null"#,
        ),
        (
            r#"{"sampleType":"cpu"}"#,
            r#"sampleType: expected a ValueType object, got "cpu""#,
        ),
        (
            r#"{"originalPayloadFormat":7}"#,
            r#"originalPayloadFormat: expected a string, got 7"#,
        ),
        // bad hex
        (
            r#"{"profileId":"xyz0"}"#,
            r#"profileId: expected a hex string (even number of hex digits), got "xyz0""#,
        ),
        (
            r#"{"profileId":"abc"}"#,
            r#"profileId: expected a hex string (even number of hex digits), got "abc""#,
        ),
        (
            r#"{"profileId":"AQIDBAUGBwgJCgsMDQ4PEA=="}"#,
            r#"profileId: expected a hex string (even number of hex digits), got "AQIDBAUGBwgJCgsMDQ4PEA==""#,
        ),
        (
            r#"{"profileId":[1,2]}"#,
            r#"profileId: expected a hex string (even number of hex digits), got an array"#,
        ),
        // bad base64
        (
            r#"{"originalPayload":"not base64!"}"#,
            r#"originalPayload: expected a base64 string, got "not base64!""#,
        ),
        (
            r#"{"originalPayload":"QUJD="}"#,
            r#"originalPayload: expected a base64 string, got "QUJD=""#,
        ),
        (
            r#"{"originalPayload":[1,2]}"#,
            r#"originalPayload: expected a base64 string, got an array"#,
        ),
    ];

    #[test]
    fn invalid_profile_fields_are_rejected_with_their_path() {
        const PREFIX: &str = "resourceProfiles[0].scopeProfiles[0].profiles[0].";
        for (profile, want) in PROFILE_REJECTS {
            let err = decode_err(&in_profile(profile));
            assert_eq!(
                err.to_string(),
                format!("{PREFIX}{want}"),
                "input {profile}"
            );
        }
    }

    #[test]
    fn out_of_range_and_type_errors_are_distinct_variants() {
        assert!(matches!(
            decode_err(&in_profile(r#"{"period":1.5}"#)),
            JsonError::Type { .. }
        ));
        assert!(matches!(
            decode_err(&in_profile(r#"{"timeUnixNano":-1}"#)),
            JsonError::OutOfRange { expected: U64, .. }
        ));
    }

    #[test]
    fn invalid_values_elsewhere_are_rejected_with_their_path() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"dictionary":{"linkTable":[{},{"traceId":"zz"}]}}"#,
                r#"dictionary.linkTable[1].traceId: expected a hex string (even number of hex digits), got "zz""#,
            ),
            (
                r#"{"dictionary":{"linkTable":[{"spanId":"0102030405060708090"}]}}"#,
                r#"dictionary.linkTable[0].spanId: expected a hex string (even number of hex digits), got "0102030405060708090""#,
            ),
            (
                r#"{"dictionary":{"stringTable":["",1]}}"#,
                r#"dictionary.stringTable[1]: expected a string, got 1"#,
            ),
            (
                r#"{"dictionary":{"stackTable":[{"locationIndices":[1,"x"]}]}}"#,
                r#"dictionary.stackTable[0].locationIndices[1]: expected a 32-bit integer (number or decimal string), got "x""#,
            ),
            (
                r#"{"dictionary":{"attributeTable":[{"value":{"bytesValue":"***"}}]}}"#,
                r#"dictionary.attributeTable[0].value.bytesValue: expected a base64 string, got "***""#,
            ),
            (
                r#"{"dictionary":{"locationTable":[{"lines":[{"line":"1.25"}]}]}}"#,
                r#"dictionary.locationTable[0].lines[0].line: expected a 64-bit integer (number or decimal string), got "1.25""#,
            ),
            (
                r#"{"dictionary":{"mappingTable":[{"memoryStart":-4096}]}}"#,
                r#"dictionary.mappingTable[0].memoryStart: expected an unsigned 64-bit integer (number or decimal string), got -4096 (out of range)"#,
            ),
            (
                r#"{"dictionary":[]}"#,
                r#"dictionary: expected a ProfilesDictionary object, got an array"#,
            ),
            (
                r#"{"resourceProfiles":{}}"#,
                r#"resourceProfiles: expected an array, got an object"#,
            ),
            (
                r#"{"resourceProfiles":[{"resource":{"entityRefs":[{"idKeys":"a"}]}}]}"#,
                r#"resourceProfiles[0].resource.entityRefs[0].idKeys: expected an array, got "a""#,
            ),
            (
                r#"{"resourceProfiles":[{"scopeProfiles":[{"scope":{"version":1}}]}]}"#,
                r#"resourceProfiles[0].scopeProfiles[0].scope.version: expected a string, got 1"#,
            ),
            (
                &in_attr(r#"{"boolValue":"true"}"#),
                r#"resourceProfiles[0].resource.attributes[0].value.boolValue: expected a boolean, got "true""#,
            ),
            (
                &in_attr(r#"{"intValue":"9223372036854775808"}"#),
                r#"resourceProfiles[0].resource.attributes[0].value.intValue: expected a 64-bit integer (number or decimal string), got "9223372036854775808" (out of range)"#,
            ),
            (
                &in_attr(r#"{"doubleValue":"nan"}"#),
                r#"resourceProfiles[0].resource.attributes[0].value.doubleValue: expected a number (or "NaN", "Infinity", "-Infinity"), got "nan""#,
            ),
            (
                &in_attr(r#"{"doubleValue":"1e999"}"#),
                r#"resourceProfiles[0].resource.attributes[0].value.doubleValue: expected a number (or "NaN", "Infinity", "-Infinity"), got "1e999""#,
            ),
            (
                &in_attr(r#"{"bytesValue":"AAEC/w=x"}"#),
                r#"resourceProfiles[0].resource.attributes[0].value.bytesValue: expected a base64 string, got "AAEC/w=x""#,
            ),
            (
                &in_attr(
                    r#"{"arrayValue":{"values":[{"kvlistValue":{"values":[{"key":"a","value":{"intValue":{}}}]}}]}}"#,
                ),
                r#"resourceProfiles[0].resource.attributes[0].value.arrayValue.values[0].kvlistValue.values[0].value.intValue: expected a 64-bit integer (number or decimal string), got an object"#,
            ),
            (
                &in_attr(r#"{"arrayValue":[]}"#),
                r#"resourceProfiles[0].resource.attributes[0].value.arrayValue: expected an ArrayValue object, got an array"#,
            ),
            (
                &in_attr(r#""plain""#),
                r#"resourceProfiles[0].resource.attributes[0].value: expected an AnyValue object, got "plain""#,
            ),
            (
                &in_attr(r#"{"stringValue":"a","intValue":"1"}"#),
                r#"resourceProfiles[0].resource.attributes[0].value: AnyValue has more than one value set (intValue and stringValue)"#,
            ),
            ("[]", "(root): expected a ProfilesData object, got an array"),
            ("null", "(root): expected a ProfilesData object, got null"),
        ];
        for (doc, want) in cases {
            assert_eq!(decode_err(doc).to_string(), *want, "input {doc}");
        }
    }

    #[test]
    fn long_strings_are_shortened_in_errors() {
        let long = "x".repeat(10_000);
        let msg = decode_err(&in_profile(&format!(r#"{{"period":"{long}"}}"#))).to_string();
        assert!(msg.len() < 300, "{msg}");
        assert!(msg.ends_with("xxx\"…"), "{msg}");
    }

    #[test]
    fn malformed_json_is_a_syntax_error() {
        for doc in [
            "",
            "{",
            r#"{"resourceProfiles":[}"#,
            r#"{"a":1,}"#,
            "\u{feff}{}",
            "{} {}",
        ] {
            assert!(
                matches!(
                    read_profiles_json(doc.as_bytes()),
                    Err(JsonError::Syntax(_))
                ),
                "input {doc:?}"
            );
        }
        assert!(matches!(
            read_profiles_json(b"{\"a\":\"\xff\"}"),
            Err(JsonError::Syntax(_))
        ));
    }

    #[test]
    fn ids_accept_either_hex_case_and_empty() {
        let d = decode(
            r#"{"dictionary":{"linkTable":[{"traceId":"","spanId":""},
            {"traceId":"0AF7651916CD43DD8448EB211C80319C","spanId":"B7aD6b7169203331"}]}}"#,
        );
        let links = d.dictionary.unwrap_or_default().link_table;
        assert_eq!(links[0], Link::default());
        assert_eq!(
            hex::encode(&links[1].trace_id),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(
            links[1].span_id,
            vec![0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]
        );
        let p = decode(&in_profile(
            r#"{"profileId":"0102030405060708090A0B0C0D0E0F10"}"#,
        ));
        assert_eq!(
            p.resource_profiles[0].scope_profiles[0].profiles[0].profile_id,
            (1..=16).collect::<Vec<u8>>()
        );
    }

    #[test]
    fn base64_accepts_missing_padding_and_url_safe_alphabet() {
        for text in [
            r#""+/8AEA==""#,
            r#""+/8AEA""#,
            r#""-_8AEA==""#,
            r#""-_8AEA""#,
        ] {
            let d = decode(&in_profile(&format!(r#"{{"originalPayload":{text}}}"#)));
            assert_eq!(
                d.resource_profiles[0].scope_profiles[0].profiles[0].original_payload,
                vec![0xfb, 0xff, 0x00, 0x10]
            );
        }
        assert_eq!(
            first_attr(&decode(&in_attr(r#"{"bytesValue":""}"#))),
            any(Av::BytesValue(Vec::new()))
        );
    }

    #[test]
    fn doubles_handle_special_values_both_ways() {
        let cases = [
            (f64::NAN, r#"{"doubleValue":"NaN"}"#),
            (f64::INFINITY, r#"{"doubleValue":"Infinity"}"#),
            (f64::NEG_INFINITY, r#"{"doubleValue":"-Infinity"}"#),
            (1.5, r#"{"doubleValue":1.5}"#),
            (-2.0, r#"{"doubleValue":-2.0}"#),
            (1e300, r#"{"doubleValue":1e+300}"#),
            (-0.00125, r#"{"doubleValue":-0.00125}"#),
        ];
        for (v, want) in cases {
            let mut out = Vec::new();
            write_any_value(
                &mut out,
                &AnyValue {
                    value: Some(Av::DoubleValue(v)),
                },
            );
            assert_eq!(String::from_utf8_lossy(&out), want);
            let back = first_attr(&decode(&in_attr(want))).and_then(|a| a.value);
            match back {
                Some(Av::DoubleValue(b)) => assert!(
                    b.to_bits() == v.to_bits() || (b.is_nan() && v.is_nan()),
                    "{want}"
                ),
                other => panic!("{want} decoded as {other:?}"),
            }
        }
        // Numeric strings and integer literals are doubles too.
        assert_eq!(
            first_attr(&decode(&in_attr(r#"{"doubleValue":"2.5e-1"}"#))),
            any(Av::DoubleValue(0.25))
        );
        assert_eq!(
            first_attr(&decode(&in_attr(r#"{"doubleValue":3}"#))),
            any(Av::DoubleValue(3.0))
        );
    }

    #[test]
    fn any_value_forms() {
        let cases: &[(&str, AnyValue)] = &[
            ("{}", AnyValue::default()),
            (
                r#"{"stringValue":"x"}"#,
                AnyValue {
                    value: Some(Av::StringValue(s("x"))),
                },
            ),
            (
                r#"{"stringValue":""}"#,
                AnyValue {
                    value: Some(Av::StringValue(String::new())),
                },
            ),
            (
                r#"{"boolValue":false}"#,
                AnyValue {
                    value: Some(Av::BoolValue(false)),
                },
            ),
            (
                r#"{"intValue":"5"}"#,
                AnyValue {
                    value: Some(Av::IntValue(5)),
                },
            ),
            (
                r#"{"doubleValue":1.5}"#,
                AnyValue {
                    value: Some(Av::DoubleValue(1.5)),
                },
            ),
            (
                r#"{"arrayValue":{"values":[{"intValue":"1"},{}]}}"#,
                AnyValue {
                    value: Some(Av::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(Av::IntValue(1)),
                            },
                            AnyValue::default(),
                        ],
                    })),
                },
            ),
            (
                r#"{"kvlistValue":{"values":[{"key":"a","value":{"boolValue":true}},{"keyStrindex":4}]}}"#,
                AnyValue {
                    value: Some(Av::KvlistValue(KeyValueList {
                        values: vec![
                            kv("a", Av::BoolValue(true)),
                            KeyValue {
                                key: String::new(),
                                value: None,
                                key_strindex: 4,
                            },
                        ],
                    })),
                },
            ),
            (
                r#"{"bytesValue":"AAEC/w=="}"#,
                AnyValue {
                    value: Some(Av::BytesValue(vec![0, 1, 2, 255])),
                },
            ),
            (
                r#"{"stringValueStrindex":3}"#,
                AnyValue {
                    value: Some(Av::StringValueStrindex(3)),
                },
            ),
        ];
        for (text, value) in cases {
            let mut out = Vec::new();
            write_any_value(&mut out, value);
            assert_eq!(String::from_utf8_lossy(&out), *text);
            assert_eq!(
                first_attr(&decode(&in_attr(text))).as_ref(),
                Some(value),
                "{text}"
            );
        }
    }

    /// Converts every object key of a JSON tree from lowerCamelCase to snake_case.
    fn to_snake(v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| {
                        let mut snake = String::new();
                        for c in k.chars() {
                            if c.is_ascii_uppercase() {
                                snake.push('_');
                                snake.push(c.to_ascii_lowercase());
                            } else {
                                snake.push(c);
                            }
                        }
                        (snake, to_snake(v))
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.into_iter().map(to_snake).collect()),
            other => other,
        }
    }

    #[test]
    fn snake_case_field_names_are_accepted() {
        let camel: Value = serde_json::from_str(&encode(&rich())).unwrap_or_else(|e| panic!("{e}"));
        let snake = to_snake(camel).to_string();
        assert!(snake.contains(r#""time_unix_nano":"1700000000000000000""#));
        assert!(snake.contains(r#""string_value_strindex":4"#));
        assert!(!snake.contains("timeUnixNano"));
        assert_eq!(decode(&snake), rich());

        let snake_response = r#"{"partial_success":{"rejected_profiles":3,"error_message":"m"}}"#;
        let resp =
            read_export_response_json(snake_response.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            resp.partial_success,
            Some(ExportProfilesPartialSuccess {
                rejected_profiles: 3,
                error_message: s("m")
            })
        );
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let doc = r#"{
      "future": {"deep": [1, {"x": null}]},
      "resourceProfiles": [{
        "unknown": 1,
        "resource": {"attributes": [{"key": "k", "value": {"stringValue": "v", "futureValue": [1]}, "extra": true}],
                     "what": "ever"},
        "scopeProfiles": [{"scope": {"name": "n", "x": {}}, "profiles": [{
          "sampleType": {"typeStrindex": 1, "aggregationTemporality": 2},
          "samples": [{"values": ["1"], "locationsStartIndex": 3, "value": ["9"]}],
          "commentStrindices": [1, 2],
          "timeUnixNano": "5"
        }]}]
      }],
      "dictionary": {"stringTable": ["", "a"], "attributeUnits": [{}], "mappingTable": [{"hasFunctions": true}],
                     "locationTable": [{"isFolded": true}], "stackTable": [{"x": 1}]}
    }"#;
        let expected = ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![kv("k", Av::StringValue(s("v")))],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: s("n"),
                        ..Default::default()
                    }),
                    profiles: vec![Profile {
                        sample_type: Some(ValueType {
                            type_strindex: 1,
                            unit_strindex: 0,
                        }),
                        samples: vec![Sample {
                            values: vec![1],
                            ..Default::default()
                        }],
                        time_unix_nano: 5,
                        ..Default::default()
                    }],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
            dictionary: Some(ProfilesDictionary {
                string_table: vec![s(""), s("a")],
                mapping_table: vec![Mapping::default()],
                location_table: vec![Location::default()],
                stack_table: vec![Stack::default()],
                ..Default::default()
            }),
        };
        assert_eq!(decode(doc), expected);
    }

    #[test]
    fn null_means_unset() {
        let d = decode(r#"{"resourceProfiles":null,"dictionary":null}"#);
        assert_eq!(d, ProfilesData::default());
        let d = decode(
            r#"{"resourceProfiles":[null,{"resource":null,"schemaUrl":null,"scopeProfiles":[{"scope":{"name":null},
            "profiles":[{"sampleType":null,"timeUnixNano":null,"profileId":null,"samples":[{"values":null}]}]}]}],
           "dictionary":{"stringTable":null,"attributeTable":[{"value":null}]}}"#,
        );
        let expected = ProfilesData {
            resource_profiles: vec![
                ResourceProfiles::default(),
                ResourceProfiles {
                    scope_profiles: vec![ScopeProfiles {
                        scope: Some(InstrumentationScope::default()),
                        profiles: vec![Profile {
                            samples: vec![Sample::default()],
                            ..Default::default()
                        }],
                        schema_url: String::new(),
                    }],
                    ..Default::default()
                },
            ],
            dictionary: Some(ProfilesDictionary {
                attribute_table: vec![KeyValueAndUnit::default()],
                ..Default::default()
            }),
        };
        assert_eq!(d, expected);
        assert_eq!(
            first_attr(&decode(&in_attr(r#"{"stringValue":null,"intValue":"1"}"#))),
            any(Av::IntValue(1))
        );
        assert_eq!(first_attr(&decode(&in_attr("null"))), None);
    }

    /// `levels` AnyValues nested through arrayValue, innermost a string.
    fn nested_any_value(levels: usize) -> Value {
        let mut v = json!({"stringValue": "leaf"});
        for _ in 1..levels {
            v = json!({"arrayValue": {"values": [v]}});
        }
        v
    }

    #[test]
    fn any_value_depth_is_capped() {
        let p = Path::ROOT;
        let at = p.field("value");
        assert!(read_any_value(nested_any_value(MAX_ANY_VALUE_DEPTH), &at, 1).is_ok());
        match read_any_value(nested_any_value(MAX_ANY_VALUE_DEPTH + 1), &at, 1) {
            Err(JsonError::TooDeep { path, limit }) => {
                assert_eq!(limit, MAX_ANY_VALUE_DEPTH);
                assert_eq!(
                    path,
                    format!(
                        "value{}",
                        ".arrayValue.values[0]".repeat(MAX_ANY_VALUE_DEPTH)
                    )
                );
            }
            other => panic!("expected TooDeep, got {other:?}"),
        }
        // Through kvlists too.
        let mut v = json!({"boolValue": true});
        for _ in 0..200 {
            v = json!({"kvlistValue": {"values": [{"key": "k", "value": v}]}});
        }
        assert!(matches!(
            read_any_value(v, &at, 1),
            Err(JsonError::TooDeep { .. })
        ));
    }

    #[test]
    fn depth_bomb_is_an_error_not_a_crash() {
        // Far beyond any limit: serde_json refuses it before the walker runs.
        let depth = 100_000;
        let bomb = format!(
            "{}{}{}",
            r#"{"arrayValue":{"values":["#.repeat(depth),
            r#"{"stringValue":"x"}"#,
            "]}}".repeat(depth)
        );
        let err = decode_err(&in_attr(&bomb));
        assert!(matches!(err, JsonError::Syntax(_)), "{err:?}");
        assert!(err.to_string().contains("recursion limit"), "{err}");
        // Raw nesting without AnyValues as well.
        let raw = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(matches!(
            read_profiles_json(raw.as_bytes()),
            Err(JsonError::Syntax(_))
        ));
        // A moderately deep value that JSON allows still round-trips.
        let rp = ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: s("deep"),
                    value: read_any_value(nested_any_value(30), &Path::ROOT, 1).ok(),
                    key_strindex: 0,
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let data = ProfilesData {
            resource_profiles: vec![rp],
            dictionary: Some(ProfilesDictionary::default()),
        };
        let model = |d: ProfilesData| crate::ProfileBatch::new(d).expect("valid");
        assert_eq!(model(decode(&encode(&data))), model(data));
    }

    #[test]
    fn corrupted_input_never_panics() {
        let text = encode(&rich());
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let _ = read_profiles_json(&bytes[..cut]);
        }
        let mut work = bytes.to_vec();
        for i in 0..work.len() {
            let orig = work[i];
            for b in [b'"', b'1', b'-', b'{', b'[', b'x', b'.', b'e', 0xff] {
                work[i] = b;
                let _ = read_profiles_json(&work);
            }
            work[i] = orig;
        }
    }

    #[test]
    fn doubles_with_many_digits_round_trip_within_two_ulps() {
        // serde_json's default float parser is "best effort" (exact only with its
        // `float_roundtrip` feature): values needing 17 significant digits or extreme exponents
        // can come back 1-2 ULP off. Typical values (0.1, 123.456, 1e-7, pi) are exact.
        let parser_is_exact = serde_json::from_str::<f64>("-1.25e-300").ok() == Some(-1.25e-300);
        for v in [
            -1.25e-300,
            123_456_789.123_456_79,
            0.1,
            123.456,
            1e-7,
            std::f64::consts::PI,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
        ] {
            let data = decode(&in_attr(&{
                let mut out = Vec::new();
                write_any_value(
                    &mut out,
                    &AnyValue {
                        value: Some(Av::DoubleValue(v)),
                    },
                );
                String::from_utf8_lossy(&out).into_owned()
            }));
            let Some(Av::DoubleValue(back)) = first_attr(&data).and_then(|a| a.value) else {
                panic!("{v} did not decode as a double");
            };
            let ulps = (back.to_bits() as i64).abs_diff(v.to_bits() as i64);
            if parser_is_exact || [0.1, 123.456, 1e-7, std::f64::consts::PI].contains(&v) {
                assert_eq!(ulps, 0, "{v} came back as {back}");
            } else {
                assert!(ulps <= 2, "{v} came back as {back} ({ulps} ULP)");
            }
        }
    }

    #[test]
    fn export_response_round_trips() {
        let text = r#"{"partialSuccess":{"rejectedProfiles":"2","errorMessage":"x"}}"#;
        let resp = read_export_response_json(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            resp,
            ExportProfilesServiceResponse {
                partial_success: Some(ExportProfilesPartialSuccess {
                    rejected_profiles: 2,
                    error_message: s("x")
                }),
            }
        );
        let mut out = Vec::new();
        write_export_response_json(&resp, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), text);

        // Full success.
        let mut out = Vec::new();
        write_export_response_json(&ExportProfilesServiceResponse::default(), &mut out);
        assert_eq!(out, b"{}");
        let read = |t: &str| read_export_response_json(t.as_bytes());
        assert!(matches!(
            read("{}"),
            Ok(ExportProfilesServiceResponse {
                partial_success: None
            })
        ));
        assert!(matches!(
            read(r#"{"partialSuccess":null}"#),
            Ok(ExportProfilesServiceResponse {
                partial_success: None
            })
        ));
        // Warning only: rejectedProfiles omitted when zero; number form accepted.
        let warn = ExportProfilesServiceResponse {
            partial_success: Some(ExportProfilesPartialSuccess {
                rejected_profiles: 0,
                error_message: s("w"),
            }),
        };
        let mut out = Vec::new();
        write_export_response_json(&warn, &mut out);
        assert_eq!(out, br#"{"partialSuccess":{"errorMessage":"w"}}"#);
        assert_eq!(
            read(r#"{"partialSuccess":{"rejectedProfiles":7,"other":1}}"#)
                .ok()
                .and_then(|r| r.partial_success),
            Some(ExportProfilesPartialSuccess {
                rejected_profiles: 7,
                error_message: String::new()
            })
        );
        // Errors name the path.
        let err = read(r#"{"partialSuccess":{"rejectedProfiles":"x"}}"#)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                r#"partialSuccess.rejectedProfiles: expected a 64-bit integer (number or decimal string), got "x""#
            )
        );
        let err = read(r#"{"partialSuccess":"no"}"#)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(r#"partialSuccess: expected an ExportProfilesPartialSuccess object, got "no""#)
        );
        assert!(matches!(read("[1]"), Err(JsonError::Type { .. })));
        assert!(matches!(read("{"), Err(JsonError::Syntax(_))));
    }

    #[test]
    fn output_is_appended_to_the_buffer() {
        let mut out = b"prefix:".to_vec();
        write_profiles_json(&crate::Dictionary::zero(), &[], &mut out);
        assert!(out.starts_with(br#"prefix:{"dictionary":{"#), "{out:?}");
    }
}
