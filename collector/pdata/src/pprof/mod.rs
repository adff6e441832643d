//! pprof ↔ OTLP translation that keeps the meaning of a profile both ways, read from and
//! written to pprof's protobuf directly (no per-sample allocation either way).
//!
//! pprof → OTLP: one OTLP `Profile` per pprof sample type, the default sample type first;
//! every sample, in order, in each of them; labels become sample attributes (several values
//! for one key become one array attribute); build ids, mapping flags, folded locations,
//! comments, drop/keep frames and doc url become the semantic-convention attributes;
//! inlined lines keep their order (callee first, caller last); a canonical `trace_id` and
//! `span_id` label pair becomes the sample's link, and links go back out as those labels.

mod links;
mod to_otlp;
mod to_pprof;

pub use links::{SPAN_ID_LABEL, TRACE_ID_LABEL};
pub use to_otlp::{ToOtlpOptions, pprof_into, pprof_to_batch, pprof_to_batch_with};
pub use to_pprof::{PprofOutput, ToPprofOptions, batch_to_pprof, pprof_groups, pprof_output_limit};

use std::collections::HashMap;

use crate::wire::WireError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PprofError {
    #[error("string_table[0] must be the empty string")]
    MissingEmptyString,
    #[error("{field}: string index {index} is out of range (string_table has {len} entries)")]
    StringOutOfRange {
        field: String,
        index: i64,
        len: usize,
    },
    #[error("the profile has no sample types")]
    NoSampleTypes,
    #[error("sample[{sample}] has {got} values but the profile has {want} sample types")]
    ValueCount {
        sample: usize,
        got: usize,
        want: usize,
    },
    #[error("{table} id {id} is referenced by {by} but not defined")]
    UnknownId {
        table: &'static str,
        id: u64,
        by: String,
    },
    #[error("{table} id {id} is defined more than once")]
    DuplicateId { table: &'static str, id: u64 },
    #[error("{table}[{position}] has id 0, which is reserved")]
    ZeroId {
        table: &'static str,
        position: usize,
    },
    #[error("mapping id {id}: memory_start {start:#x} lies above memory_limit {limit:#x}")]
    BadMappingRange { id: u64, start: u64, limit: u64 },
    #[error("sample[{sample}] has {count} {what}; at most {max} are accepted")]
    TooMany {
        sample: usize,
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error(
        "{field}: string copies would exceed {total} bytes (four times the string table plus 1 MiB)"
    )]
    CopiesTooLarge { field: String, total: usize },
    #[error(
        "the pprof of this batch would take about {estimate} bytes, over the limit of {limit} (64 times the batch's size, at least 256 MiB): its samples repeat deep stacks or many labels"
    )]
    OutputTooLarge { estimate: usize, limit: usize },
    #[error("{field}: not a valid protobuf message: {error}")]
    Malformed { field: String, error: WireError },
    #[error("the dictionary outgrew 4 GiB")]
    TooLarge,
}

pub(crate) fn malformed(field: impl FnOnce() -> String) -> impl FnOnce(WireError) -> PprofError {
    move |error| PprofError::Malformed {
        field: field(),
        error,
    }
}

/// Where pprof ids point after translation. Ids are usually 1..n, so a vector serves;
/// sparse ids (addresses, say) fall back to a map.
pub(crate) enum IdMap {
    Dense(Vec<i32>),
    Sparse(HashMap<u64, i32>),
}

impl IdMap {
    /// A map for `len` ids of at most `max`.
    pub(crate) fn with_capacity(len: usize, max: u64) -> Self {
        let dense_ok =
            usize::try_from(max).is_ok_and(|m| m <= len.saturating_mul(4).saturating_add(64));
        if dense_ok {
            IdMap::Dense(vec![-1; usize::try_from(max).unwrap_or(0) + 1])
        } else {
            IdMap::Sparse(HashMap::with_capacity(len))
        }
    }

    /// Records `id` → `index`; refuses id 0 and an id seen before.
    pub(crate) fn insert(
        &mut self,
        table: &'static str,
        position: usize,
        id: u64,
        index: i32,
    ) -> Result<(), PprofError> {
        if id == 0 {
            return Err(PprofError::ZeroId { table, position });
        }
        let fresh = match self {
            IdMap::Dense(v) => match usize::try_from(id).ok().and_then(|i| v.get_mut(i)) {
                Some(slot) => {
                    let fresh = *slot == -1;
                    *slot = index;
                    fresh
                }
                None => false,
            },
            IdMap::Sparse(m) => m.insert(id, index).is_none(),
        };
        if fresh {
            Ok(())
        } else {
            Err(PprofError::DuplicateId { table, id })
        }
    }

    pub(crate) fn get(&self, id: u64) -> Option<i32> {
        match self {
            IdMap::Dense(v) => usize::try_from(id)
                .ok()
                .and_then(|i| v.get(i))
                .copied()
                .filter(|&x| x >= 0),
            IdMap::Sparse(m) => m.get(&id).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Round trips judged by meaning: a pprof is reduced to text that names every sample's
    //! resolved stack, values and labels, and the profile-level fields, but not table ids.

    use std::io::Read as _;

    use super::{PprofError, ToOtlpOptions, ToPprofOptions};
    use crate::ProfileBatch;
    use crate::attributes::semconv;
    use crate::testing::{WireDictionaryBuilder as DictionaryBuilder, batch_from_wire};
    use profcol_proto::otlp::common::v1::{
        AnyValue, InstrumentationScope, KeyValue, any_value::Value,
    };
    use profcol_proto::otlp::profiles::v1development::{
        Function, Line, Location, Profile, ResourceProfiles, Sample, ScopeProfiles, ValueType,
    };
    use profcol_proto::pprof as pp;
    use proptest::prelude::*;
    use prost::Message;

    const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

    /// A pprof file (gzipped or not) as generated types.
    fn decode_pprof(bytes: &[u8], max: usize) -> Result<pp::Profile, String> {
        let mut plain = Vec::new();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            flate2::read::MultiGzDecoder::new(bytes)
                .take(max as u64)
                .read_to_end(&mut plain)
                .map_err(|e| e.to_string())?;
        } else {
            plain = bytes.to_vec();
        }
        pp::Profile::decode(plain.as_slice()).map_err(|e| e.to_string())
    }

    /// The translation of a pprof given as generated types (it reads the pprof's bytes).
    fn pprof_to_batch(p: &pp::Profile, options: ToOtlpOptions) -> Result<ProfileBatch, PprofError> {
        super::pprof_to_batch(&p.encode_to_vec(), options)
    }

    /// A pprof made from OTLP, read back as generated types.
    #[derive(Debug)]
    struct Output {
        profile: pp::Profile,
    }

    fn batch_to_pprof(
        batch: &ProfileBatch,
        options: &ToPprofOptions,
    ) -> Result<Vec<Output>, PprofError> {
        Ok(super::batch_to_pprof(batch, options)?
            .into_iter()
            .map(|o| Output {
                profile: pp::Profile::decode(o.profile.as_slice()).expect("our pprof decodes"),
            })
            .collect())
    }

    /// The meaning of a pprof as text. Stacks are resolved through ids; labels are sorted.
    pub(crate) fn meaning(p: &pp::Profile) -> String {
        use std::fmt::Write;
        let s = |i: i64| p.string_table.get(i as usize).cloned().unwrap_or_default();
        let vt = |v: &Option<pp::ValueType>| {
            v.as_ref().map(|v| format!("{}/{}", s(v.r#type), s(v.unit)))
        };
        let mut out = String::new();
        let types: Vec<String> = p
            .sample_type
            .iter()
            .map(|t| format!("{}/{}", s(t.r#type), s(t.unit)))
            .collect();
        let default = if p.default_sample_type == 0 {
            types.last().cloned().unwrap_or_default()
        } else {
            s(p.default_sample_type)
        };
        let _ = writeln!(
            out,
            "types {types:?} default {default:?} period {:?} {}",
            vt(&p.period_type),
            p.period
        );
        let _ = writeln!(out, "time {} duration {}", p.time_nanos, p.duration_nanos);
        let comments: Vec<String> = p.comment.iter().map(|&c| s(c)).collect();
        let _ = writeln!(
            out,
            "comments {comments:?} drop {:?} keep {:?} doc {:?}",
            s(p.drop_frames),
            s(p.keep_frames),
            s(p.doc_url)
        );
        let mapping = |id: u64| {
            p.mapping
                .iter()
                .find(|m| m.id == id)
                .map(|m| {
                    format!(
                        "[{:#x}-{:#x}@{:#x} {} {} {}{}{}{}]",
                        m.memory_start,
                        m.memory_limit,
                        m.file_offset,
                        s(m.filename),
                        s(m.build_id),
                        m.has_functions as u8,
                        m.has_filenames as u8,
                        m.has_line_numbers as u8,
                        m.has_inline_frames as u8
                    )
                })
                .unwrap_or_default()
        };
        let function = |id: u64| {
            p.function
                .iter()
                .find(|f| f.id == id)
                .map(|f| {
                    format!(
                        "{}|{}|{}|{}",
                        s(f.name),
                        s(f.system_name),
                        s(f.filename),
                        f.start_line
                    )
                })
                .unwrap_or_default()
        };
        for sample in &p.sample {
            let frames: Vec<String> = sample
                .location_id
                .iter()
                .map(|&id| {
                    let l = p
                        .location
                        .iter()
                        .find(|l| l.id == id)
                        .expect("location exists");
                    let lines: Vec<String> = l
                        .line
                        .iter()
                        .map(|ln| format!("{}:{}:{}", function(ln.function_id), ln.line, ln.column))
                        .collect();
                    format!(
                        "{}{:#x}{}{:?}",
                        mapping(l.mapping_id),
                        l.address,
                        if l.is_folded { "F" } else { "" },
                        lines
                    )
                })
                .collect();
            let mut labels: Vec<String> = sample
                .label
                .iter()
                .map(|l| {
                    if l.str != 0 {
                        format!("{}={}", s(l.key), s(l.str))
                    } else {
                        format!("{}={}{}", s(l.key), l.num, s(l.num_unit))
                    }
                })
                .collect();
            labels.sort();
            let _ = writeln!(out, "{:?} {labels:?} {frames:?}", sample.value);
        }
        out
    }

    fn round_trip(p: &pp::Profile) -> pp::Profile {
        let batch = pprof_to_batch(p, ToOtlpOptions::default()).expect("translates");
        // Through the wire too, so that nothing lives only in memory.
        let batch = ProfileBatch::decode(&batch.encode_to_vec()).expect("valid OTLP");
        let mut out = batch_to_pprof(&batch, &ToPprofOptions::default()).expect("translates");
        assert_eq!(out.len(), 1, "one pprof in, one pprof out");
        out.remove(0).profile
    }

    fn fixture(name: &str) -> pp::Profile {
        let path = format!("{}/../../testdata/pprof/{name}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        decode_pprof(&bytes, DEFAULT_MAX_DECOMPRESSED_BYTES).expect("fixture decodes")
    }

    #[test]
    fn real_fixtures_round_trip_with_their_meaning() {
        for name in [
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
        ] {
            let original = fixture(name);
            let back = round_trip(&original);
            assert_eq!(meaning(&back), meaning(&original), "{name}");
            // Sample types keep their pprof order, and ids 1..n survive.
            assert_eq!(back.sample_type.len(), original.sample_type.len(), "{name}");
            for l in &back.location {
                let o = original
                    .location
                    .iter()
                    .find(|o| o.id == l.id)
                    .expect("same id exists");
                assert_eq!(
                    o.address, l.address,
                    "{name}: location {} keeps its id",
                    l.id
                );
            }
        }
    }

    #[test]
    fn default_sample_type_goes_first_and_comes_back() {
        let allocs = fixture("go-allocs.pb.gz");
        let text = |p: &pp::Profile, i: i64| p.string_table[i as usize].clone();
        assert_eq!(text(&allocs, allocs.default_sample_type), "alloc_space");
        let batch = pprof_to_batch(&allocs, ToOtlpOptions::default())
            .expect("translates")
            .to_wire();
        let d = batch.dictionary();
        let first = batch
            .profiles()
            .next()
            .expect("profiles")
            .sample_type
            .expect("type");
        assert_eq!(d.string_table[first.type_strindex as usize], "alloc_space");
        let back = round_trip(&allocs);
        assert_eq!(text(&back, back.default_sample_type), "alloc_space");
        let order = |p: &pp::Profile| {
            p.sample_type
                .iter()
                .map(|t| text(p, t.r#type))
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&back), order(&allocs));

        // Without an explicit default, the last type is the default and is shown first.
        let heap = fixture("go-heap.pb.gz");
        let batch = pprof_to_batch(&heap, ToOtlpOptions::default())
            .expect("translates")
            .to_wire();
        let first = batch
            .profiles()
            .next()
            .expect("profiles")
            .sample_type
            .expect("type");
        assert_eq!(
            batch.dictionary().string_table[first.type_strindex as usize],
            "inuse_space"
        );
        assert_eq!(round_trip(&heap).default_sample_type, 0);
    }

    #[test]
    fn inlined_lines_keep_their_order() {
        let cpu = fixture("go-cpu.pb.gz");
        let inlined = cpu
            .location
            .iter()
            .find(|l| l.line.len() > 1)
            .expect("the Go fixture has inlined frames");
        let back = round_trip(&cpu);
        let same = back
            .location
            .iter()
            .find(|l| l.id == inlined.id)
            .expect("kept");
        let names = |p: &pp::Profile, l: &pp::Location| -> Vec<String> {
            l.line
                .iter()
                .map(|ln| {
                    let f = p
                        .function
                        .iter()
                        .find(|f| f.id == ln.function_id)
                        .expect("function");
                    p.string_table[f.name as usize].clone()
                })
                .collect()
        };
        assert_eq!(names(&back, same), names(&cpu, inlined));
        assert_eq!(names(&cpu, inlined), ["main.mix", "main.hashLoop"]);
    }

    fn s(p: &mut pp::Profile, text: &str) -> i64 {
        if let Some(i) = p.string_table.iter().position(|x| x == text) {
            return i as i64;
        }
        p.string_table.push(text.into());
        (p.string_table.len() - 1) as i64
    }

    /// A small profile that uses every pprof field.
    fn everything() -> pp::Profile {
        let mut p = pp::Profile {
            string_table: vec![String::new()],
            ..Default::default()
        };
        let (cpu, ns, samples, count) = (
            s(&mut p, "cpu"),
            s(&mut p, "nanoseconds"),
            s(&mut p, "samples"),
            s(&mut p, "count"),
        );
        p.sample_type = vec![
            pp::ValueType {
                r#type: samples,
                unit: count,
            },
            pp::ValueType {
                r#type: cpu,
                unit: ns,
            },
        ];
        p.default_sample_type = samples;
        p.period_type = Some(pp::ValueType {
            r#type: cpu,
            unit: ns,
        });
        p.period = 10_000_000;
        p.time_nanos = 1_700_000_000_123_456_789;
        p.duration_nanos = 2_000_000_000;
        p.comment = vec![s(&mut p, "first comment"), s(&mut p, "second")];
        p.drop_frames = s(&mut p, "runtime\\..*");
        p.keep_frames = s(&mut p, "runtime\\.main");
        p.doc_url = s(&mut p, "https://example.com/doc");
        let (bin, bid) = (s(&mut p, "/usr/bin/app"), s(&mut p, "abcdef0123"));
        p.mapping = vec![
            pp::Mapping {
                id: 1,
                memory_start: 0x400000,
                memory_limit: 0x500000,
                file_offset: 0x1000,
                filename: bin,
                build_id: bid,
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: false,
            },
            pp::Mapping {
                id: 2,
                memory_start: 0x7f00,
                memory_limit: 0x8f00,
                filename: s(&mut p, "[vdso]"),
                build_id: s(&mut p, "go-id/with/slashes"),
                ..Default::default()
            },
        ];
        let (f1, f2, file) = (
            s(&mut p, "main.leaf"),
            s(&mut p, "main.caller"),
            s(&mut p, "main.go"),
        );
        let sys = s(&mut p, "_ZN4main4leafE");
        p.function = vec![
            pp::Function {
                id: 1,
                name: f1,
                system_name: sys,
                filename: file,
                start_line: 10,
            },
            pp::Function {
                id: 2,
                name: f2,
                system_name: 0,
                filename: file,
                start_line: 20,
            },
        ];
        p.location = vec![
            pp::Location {
                id: 1,
                mapping_id: 1,
                address: 0x401000,
                line: vec![
                    pp::Line {
                        function_id: 1,
                        line: 12,
                        column: 3,
                    },
                    pp::Line {
                        function_id: 2,
                        line: 25,
                        column: 0,
                    },
                ],
                is_folded: true,
            },
            pp::Location {
                id: 2,
                mapping_id: 2,
                address: 0x7f10,
                line: vec![],
                is_folded: false,
            },
            pp::Location {
                id: 3,
                mapping_id: 0,
                address: 0,
                line: vec![pp::Line {
                    function_id: 2,
                    line: 30,
                    column: 1,
                }],
                is_folded: false,
            },
        ];
        let (thread, worker, bytes_key, bytes_unit) = (
            s(&mut p, "thread"),
            s(&mut p, "worker-1"),
            s(&mut p, "bytes"),
            s(&mut p, "bytes"),
        );
        let tag = s(&mut p, "tag");
        let (a, b) = (s(&mut p, "a"), s(&mut p, "b"));
        p.sample = vec![
            pp::Sample {
                location_id: vec![1, 3],
                value: vec![3, 30_000_000],
                label: vec![
                    pp::Label {
                        key: thread,
                        str: worker,
                        ..Default::default()
                    },
                    pp::Label {
                        key: bytes_key,
                        num: 512,
                        num_unit: bytes_unit,
                        ..Default::default()
                    },
                ],
            },
            pp::Sample {
                location_id: vec![2, 1, 3],
                value: vec![0, 0],
                label: vec![],
            },
            // Several values for one key: legal in pprof, carried as one array attribute.
            pp::Sample {
                location_id: vec![3],
                value: vec![1, 10_000_000],
                label: vec![
                    pp::Label {
                        key: tag,
                        str: a,
                        ..Default::default()
                    },
                    pp::Label {
                        key: tag,
                        str: b,
                        ..Default::default()
                    },
                ],
            },
            pp::Sample {
                location_id: vec![1, 3],
                value: vec![3, 30_000_000],
                label: vec![],
            },
        ];
        p
    }

    #[test]
    fn every_pprof_field_survives() {
        let p = everything();
        let back = round_trip(&p);
        assert_eq!(meaning(&back), meaning(&p));
        let text = |i: i64| back.string_table[i as usize].as_str();
        assert_eq!(text(back.default_sample_type), "samples");
        assert_eq!(
            back.comment.iter().map(|&c| text(c)).collect::<Vec<_>>(),
            ["first comment", "second"]
        );
        assert_eq!(text(back.drop_frames), "runtime\\..*");
        // Samples stay separate and in order, even equal ones.
        assert_eq!(back.sample.len(), 4);
    }

    #[test]
    fn pprof_fields_land_on_their_semantic_convention_attributes() {
        let batch = pprof_to_batch(&everything(), ToOtlpOptions::default())
            .expect("translates")
            .to_wire();
        let d = batch.dictionary();
        let key_of =
            |i: i32| d.string_table[d.attribute_table[i as usize].key_strindex as usize].as_str();
        let m = &d.mapping_table[1];
        let keys: Vec<&str> = m.attribute_indices.iter().map(|&i| key_of(i)).collect();
        assert_eq!(
            keys,
            [
                semconv::BUILD_ID_GNU,
                semconv::PPROF_HAS_FUNCTIONS,
                semconv::PPROF_HAS_FILENAMES,
                semconv::PPROF_HAS_LINE_NUMBERS
            ]
        );
        let go = &d.mapping_table[2];
        assert_eq!(key_of(go.attribute_indices[0]), semconv::BUILD_ID_GO);
        let profile = batch.profiles().next().expect("profile");
        let keys: Vec<&str> = profile
            .attribute_indices
            .iter()
            .map(|&i| key_of(i))
            .collect();
        assert_eq!(
            keys,
            [
                semconv::PPROF_COMMENT,
                semconv::PPROF_DROP_FRAMES,
                semconv::PPROF_KEEP_FRAMES,
                semconv::PPROF_DOC_URL,
                semconv::PPROF_DEFAULT_SAMPLE_TYPE_INDEX
            ]
        );
        assert_eq!(batch.profile_count(), 2);
        assert_eq!(batch.sample_count(), 8);
        // The numeric label keeps its unit.
        let sample = &profile.samples[0];
        let bytes = sample
            .attribute_indices
            .iter()
            .map(|&i| &d.attribute_table[i as usize])
            .find(|kv| d.string_table[kv.key_strindex as usize] == "bytes")
            .expect("bytes label");
        assert_eq!(d.string_table[bytes.unit_strindex as usize], "bytes");
    }

    #[test]
    fn bad_pprof_gives_clear_errors() {
        let mut p = everything();
        p.sample[0].value.pop();
        assert_eq!(
            pprof_to_batch(&p, ToOtlpOptions::default())
                .expect_err("short")
                .to_string(),
            "sample[0] has 1 values but the profile has 2 sample types"
        );
        let mut p = everything();
        p.sample[1].location_id.push(99);
        assert_eq!(
            pprof_to_batch(&p, ToOtlpOptions::default())
                .expect_err("unknown")
                .to_string(),
            "location id 99 is referenced by sample[1] but not defined"
        );
        let mut p = everything();
        p.function[0].name = 9999;
        assert!(
            pprof_to_batch(&p, ToOtlpOptions::default())
                .expect_err("strindex")
                .to_string()
                .starts_with("function[0].name: string index 9999 is out of range")
        );
        let mut p = everything();
        p.location.push(pp::Location {
            id: 1,
            ..Default::default()
        });
        assert_eq!(
            pprof_to_batch(&p, ToOtlpOptions::default())
                .expect_err("dup")
                .to_string(),
            "location id 1 is defined more than once"
        );
        let mut p = everything();
        p.string_table[0] = "x".into();
        assert!(matches!(
            pprof_to_batch(&p, ToOtlpOptions::default()),
            Err(PprofError::MissingEmptyString)
        ));
        let p = pp::Profile {
            string_table: vec![String::new()],
            ..Default::default()
        };
        assert!(matches!(
            pprof_to_batch(&p, ToOtlpOptions::default()),
            Err(PprofError::NoSampleTypes)
        ));
    }

    #[test]
    fn sparse_ids_work() {
        let mut p = everything();
        for l in &mut p.location {
            l.id += 0x7fff_0000_0000;
        }
        for smp in &mut p.sample {
            for id in &mut smp.location_id {
                *id += 0x7fff_0000_0000;
            }
        }
        assert_eq!(meaning(&round_trip(&p)), meaning(&p));
    }

    #[test]
    fn otlp_with_several_resources_splits_and_labels() {
        use profcol_proto::otlp::resource::v1::Resource;
        let cpu = fixture("go-cpu.pb.gz");
        let kv = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(v.into())),
            }),
            key_strindex: 0,
        };
        let a = pprof_to_batch(
            &cpu,
            ToOtlpOptions {
                resource_attributes: vec![kv("service.name", "a")],
                ..Default::default()
            },
        )
        .expect("a");
        let b = pprof_to_batch(
            &cpu,
            ToOtlpOptions {
                resource_attributes: vec![kv("service.name", "b")],
                ..Default::default()
            },
        )
        .expect("b");
        let merged = crate::merge([&a, &b]);
        assert_eq!(merged.resource_profiles().len(), 2);
        let out = batch_to_pprof(&merged, &ToPprofOptions::default()).expect("translates");
        assert_eq!(out.len(), 2);
        for (o, svc) in out.iter().zip(["a", "b"]) {
            let p = &o.profile;
            assert!(p.sample.iter().all(|smp| {
                smp.label.iter().any(|l| {
                    p.string_table[l.key as usize] == "service.name"
                        && p.string_table[l.str as usize] == svc
                })
            }));
            assert_eq!(p.sample.len(), cpu.sample.len());
        }
        let _ = Resource::default();
    }

    #[test]
    fn timestamp_samples_become_counts_and_unaligned_profiles_join_by_identity() {
        let mut b = DictionaryBuilder::new();
        let f = b.string("main.spin");
        let func = b.function(Function {
            name_strindex: f,
            ..Default::default()
        });
        let loc = b.location(Location {
            address: 0x10,
            lines: vec![Line {
                function_index: func,
                ..Default::default()
            }],
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let other = b.stack(&[loc, loc]);
        let vt = |b: &mut DictionaryBuilder, t: &str, u: &str| ValueType {
            type_strindex: b.string(t),
            unit_strindex: b.string(u),
        };
        let samples_vt = vt(&mut b, "samples", "count");
        let bytes_vt = vt(&mut b, "alloc", "bytes");
        let p1 = Profile {
            sample_type: Some(samples_vt),
            samples: vec![Sample {
                stack_index: stack,
                timestamps_unix_nano: vec![1, 2, 3],
                ..Default::default()
            }],
            ..Default::default()
        };
        let p2 = Profile {
            sample_type: Some(bytes_vt),
            samples: vec![
                Sample {
                    stack_index: other,
                    values: vec![7],
                    ..Default::default()
                },
                Sample {
                    stack_index: stack,
                    values: vec![5, 6],
                    timestamps_unix_nano: vec![1, 2],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let batch = batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![p1, p2],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        );
        let out = batch_to_pprof(&batch, &ToPprofOptions::default()).expect("translates");
        assert_eq!(out.len(), 1);
        let p = &out[0].profile;
        // The first profile is the default, so it goes last.
        let types: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(types, ["alloc", "samples"]);
        let rows: Vec<(usize, Vec<i64>)> = p
            .sample
            .iter()
            .map(|smp| (smp.location_id.len(), smp.value.clone()))
            .collect();
        assert_eq!(rows, [(1, vec![11, 3]), (2, vec![7, 0])]);
    }

    /// Generates valid pprof profiles that exercise ids, inlining, labels and defaults.
    fn arb_pprof() -> impl Strategy<Value = pp::Profile> {
        let names = prop::collection::vec("[a-z.]{1,8}", 1..8);
        (
            names,
            1usize..4,
            1usize..6,
            0usize..20,
            any::<u64>(),
            prop::option::of(0usize..4),
            1u64..1000,
        )
            .prop_flat_map(
                |(names, types, n_locations, n_samples, seed, default, id_stride)| {
                    let lines = prop::collection::vec(
                        prop::collection::vec((0..names.len(), 0i64..100), 0..3),
                        n_locations,
                    );
                    let samples = prop::collection::vec(
                        (
                            prop::collection::vec(0..n_locations, 0..6),
                            prop::collection::vec(-5i64..1_000_000, types),
                            prop::collection::vec(
                                (0..names.len(), prop::option::of(0..names.len()), -3i64..3),
                                0..3,
                            ),
                        ),
                        n_samples,
                    );
                    (
                        Just(names),
                        Just(types),
                        lines,
                        samples,
                        Just(seed),
                        Just(default),
                        Just(id_stride),
                    )
                },
            )
            .prop_map(|(names, types, lines, samples, seed, default, stride)| {
                let mut p = pp::Profile {
                    string_table: vec![String::new()],
                    ..Default::default()
                };
                let name_ix: Vec<i64> = names.iter().map(|n| s(&mut p, n)).collect();
                let unit = s(&mut p, "count");
                p.sample_type = (0..types)
                    .map(|t| pp::ValueType {
                        r#type: s(&mut p, &format!("type{t}")),
                        unit,
                    })
                    .collect();
                p.default_sample_type = default
                    .filter(|&d| d < types)
                    .map_or(0, |d| p.sample_type[d].r#type);
                p.time_nanos = (seed % 1_000_000_000) as i64;
                p.mapping = vec![pp::Mapping {
                    id: 7,
                    memory_start: 0x1000,
                    memory_limit: 0x9000,
                    filename: name_ix[0],
                    has_functions: seed % 2 == 0,
                    ..Default::default()
                }];
                p.function = name_ix
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| pp::Function {
                        id: i as u64 + 1,
                        name: n,
                        ..Default::default()
                    })
                    .collect();
                p.location = lines
                    .iter()
                    .enumerate()
                    .map(|(i, ls)| pp::Location {
                        id: (i as u64 + 1) * stride,
                        mapping_id: if i % 2 == 0 { 7 } else { 0 },
                        address: 0x1000 + i as u64,
                        line: ls
                            .iter()
                            .map(|&(f, line)| pp::Line {
                                function_id: f as u64 + 1,
                                line,
                                column: 0,
                            })
                            .collect(),
                        is_folded: i % 3 == 1,
                    })
                    .collect();
                p.sample = samples
                    .into_iter()
                    .map(|(locs, value, labels)| pp::Sample {
                        location_id: locs.iter().map(|&l| (l as u64 + 1) * stride).collect(),
                        value,
                        label: labels
                            .into_iter()
                            .map(|(k, v, num)| match v {
                                Some(v) => pp::Label {
                                    key: name_ix[k],
                                    str: name_ix[v],
                                    ..Default::default()
                                },
                                None => pp::Label {
                                    key: name_ix[k],
                                    num,
                                    num_unit: unit,
                                    ..Default::default()
                                },
                            })
                            .collect(),
                    })
                    .collect();
                p
            })
    }

    /// Mixed string and numeric values under one key lose their kinds' order in an array;
    /// pprof discourages such labels, and the property skips them.
    fn has_mixed_label_kinds(p: &pp::Profile) -> bool {
        p.sample.iter().any(|smp| {
            smp.label.iter().any(|a| {
                smp.label
                    .iter()
                    .any(|b| a.key == b.key && (a.str == 0) != (b.str == 0))
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn generated_pprof_round_trips(p in arb_pprof()) {
            prop_assume!(!has_mixed_label_kinds(&p));
            let back = round_trip(&p);
            prop_assert_eq!(meaning(&back), meaning(&p));
            // And through pprof's own wire form.
            let again = pp::Profile::decode(back.encode_to_vec().as_slice()).expect("decodes");
            prop_assert_eq!(meaning(&again), meaning(&p));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// OTLP made from generated profiles, with resource and scope attributes, survives
        /// protobuf and OTLP/JSON unchanged.
        #[test]
        fn generated_batches_round_trip_through_protobuf_and_json(p in arb_pprof(), pid in any::<i64>(), name in ".{0,12}") {
            prop_assume!(!has_mixed_label_kinds(&p));
            let kv = |k: &str, v: Value| KeyValue { key: k.into(), value: Some(AnyValue { value: Some(v) }), key_strindex: 0 };
            let options = ToOtlpOptions {
                resource_attributes: vec![kv("process.pid", Value::IntValue(pid)), kv("service.name", Value::StringValue(name.clone()))],
                scope: Some(InstrumentationScope { name, version: "1.0".into(), ..Default::default() }),
                original_payload: Some(p.encode_to_vec()),
            };
            let batch = pprof_to_batch(&p, options).expect("translates");
            prop_assert_eq!(&ProfileBatch::decode(&batch.encode_to_vec()).expect("protobuf"), &batch);
            let json = crate::otlp_json::read_profiles_json(&batch.to_json()).expect("json");
            prop_assert_eq!(&ProfileBatch::new(json).expect("valid"), &batch);
        }
    }

    /// Hostile shapes: each is refused or translated in time and memory in proportion to its
    /// bytes, never by what a count in it claims.
    mod hostile {
        use super::*;
        use crate::limits::{MAX_LABELS_PER_SAMPLE, MAX_STACK_DEPTH};

        fn strings(extra: &[&str]) -> Vec<String> {
            std::iter::once("")
                .chain(extra.iter().copied())
                .map(str::to_owned)
                .collect()
        }

        fn translate(p: &pp::Profile) -> Result<ProfileBatch, PprofError> {
            pprof_to_batch(p, ToOtlpOptions::default())
        }

        /// The attack from the field: millions of sample types and millions of empty samples
        /// used to size one column per type by the sample count before any was checked.
        #[test]
        fn many_sample_types_with_empty_samples_are_refused_before_allocation() {
            let p = pp::Profile {
                sample_type: vec![pp::ValueType::default(); 400_000],
                sample: vec![pp::Sample::default(); 400_000],
                string_table: strings(&[]),
                ..Default::default()
            };
            let err = translate(&p).expect_err("value counts do not match");
            assert_eq!(
                err,
                PprofError::ValueCount {
                    sample: 0,
                    got: 0,
                    want: 400_000
                }
            );
        }

        #[test]
        fn stacks_and_label_sets_over_the_caps_are_named() {
            let mut p = pp::Profile {
                sample_type: vec![pp::ValueType::default()],
                sample: vec![pp::Sample {
                    value: vec![1],
                    location_id: vec![1; MAX_STACK_DEPTH + 1],
                    ..Default::default()
                }],
                location: vec![pp::Location {
                    id: 1,
                    ..Default::default()
                }],
                string_table: strings(&["k"]),
                ..Default::default()
            };
            assert_eq!(
                translate(&p).expect_err("too deep").to_string(),
                format!(
                    "sample[0] has {} locations; at most {MAX_STACK_DEPTH} are accepted",
                    MAX_STACK_DEPTH + 1
                )
            );
            p.sample[0].location_id = vec![1];
            p.sample[0].label = vec![
                pp::Label {
                    key: 1,
                    num: 1,
                    ..Default::default()
                };
                MAX_LABELS_PER_SAMPLE + 1
            ];
            assert!(matches!(
                translate(&p),
                Err(PprofError::TooMany { what: "labels", .. })
            ));
        }

        /// One long string named by the labels of many distinct label sets is translated once,
        /// not copied (and hashed) once per set.
        #[test]
        fn a_long_label_string_shared_by_many_label_sets_is_translated_once() {
            let long = "v".repeat(4 << 20);
            let samples = 5_000;
            let p = pp::Profile {
                sample_type: vec![pp::ValueType::default()],
                sample: (0..samples)
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
            let started = std::time::Instant::now();
            let batch = translate(&p).expect("translates");
            // 5000 copies of 4 MiB would be 20 GiB of memcpy and hashing; once is instant.
            assert!(started.elapsed() < std::time::Duration::from_secs(20));
            let long_values = batch
                .to_wire()
                .dictionary
                .attribute_table
                .iter()
                .filter(|kv| {
                    matches!(kv.value.as_ref().and_then(|v| v.value.as_ref()),
                    Some(Value::StringValue(s)) if s.len() == long.len())
                })
                .count();
            assert_eq!(long_values, 1);
            assert_eq!(batch.sample_count(), samples as usize);
        }

        /// A key repeated in one set becomes an array and so a copy; a long string repeated so
        /// hits the copy budget instead of memory.
        #[test]
        fn repeated_keys_copying_a_long_string_hit_the_copy_budget() {
            let long = "v".repeat(1 << 20);
            let p = pp::Profile {
                sample_type: vec![pp::ValueType::default()],
                sample: vec![pp::Sample {
                    value: vec![1],
                    label: vec![
                        pp::Label {
                            key: 1,
                            str: 2,
                            ..Default::default()
                        };
                        MAX_LABELS_PER_SAMPLE
                    ],
                    ..Default::default()
                }],
                string_table: strings(&["k", &long]),
                ..Default::default()
            };
            assert!(matches!(
                translate(&p),
                Err(PprofError::CopiesTooLarge { .. })
            ));
        }

        /// Samples that share one deep stack are cheap in OTLP and huge in pprof, which
        /// repeats the stack per sample: refused before anything is built.
        #[test]
        fn a_pprof_that_would_dwarf_its_batch_is_refused() {
            let mut b = DictionaryBuilder::new();
            let location = b.location(Location {
                address: 1,
                ..Default::default()
            });
            let stack = b.stack(&vec![location; MAX_STACK_DEPTH]);
            let samples = 5_000;
            let profile = Profile {
                samples: (0..samples)
                    .map(|_| Sample {
                        stack_index: stack,
                        values: vec![1],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            let batch = batch_from_wire(
                b.finish(),
                vec![ResourceProfiles {
                    scope_profiles: vec![ScopeProfiles {
                        profiles: vec![profile],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            );
            let err = batch_to_pprof(&batch, &ToPprofOptions::default()).expect_err("too large");
            assert!(
                matches!(err, PprofError::OutputTooLarge { estimate, limit } if estimate > limit && limit == 256 << 20),
                "{err}"
            );
        }

        /// Many profiles of one shape and sample type make one pprof each, found without
        /// scanning the groups made so far.
        #[test]
        fn many_profiles_of_one_type_group_in_linear_time() {
            // Built in memory: on the wire, 20,000 one-sample profiles would be refused by the
            // decoder's 4x bound (each profile's struct outweighs its few bytes).
            let mut b = crate::DictionaryBuilder::new();
            let stack = b.stack(&[]);
            let profiles: Vec<crate::Profile> = (0..20_000)
                .map(|_| {
                    let mut p = crate::Profile::default();
                    p.samples.push(&crate::Sample {
                        stack_index: stack,
                        values: &[1],
                        ..Default::default()
                    });
                    p
                })
                .collect();
            let d = b.finish().expect("fits");
            let started = std::time::Instant::now();
            let groups = crate::pprof::pprof_groups(&d, &profiles);
            assert_eq!(groups.len(), 20_000);
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }

        /// Every sample type copies the sample's attribute list: many labels on a profile of
        /// many types is refused by their product.
        #[test]
        fn labels_times_sample_types_is_capped() {
            let p = pp::Profile {
                sample_type: vec![pp::ValueType::default(); 64],
                sample: vec![pp::Sample {
                    value: vec![1; 64],
                    label: (0..200)
                        .map(|k| pp::Label {
                            key: 1,
                            num: k,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                string_table: strings(&["k"]),
                ..Default::default()
            };
            assert!(matches!(
                translate(&p),
                Err(PprofError::TooMany {
                    what: "labels across its sample types",
                    count: 12_800,
                    ..
                })
            ));
        }

        /// Many distinct keys naming one long value: each is a new attribute, so each copy is
        /// charged, and the budget refuses before memory grows by keys times the value.
        #[test]
        fn many_keys_naming_one_long_value_hit_the_copy_budget() {
            let long = "v".repeat(1 << 20);
            let keys: Vec<String> = (0..100).map(|k| format!("k{k}")).collect();
            let mut table = strings(&[&long]);
            table.extend(keys.iter().cloned());
            let p = pp::Profile {
                sample_type: vec![pp::ValueType::default()],
                sample: (0..100)
                    .map(|k| pp::Sample {
                        value: vec![1],
                        label: vec![pp::Label {
                            key: 2 + k,
                            str: 1,
                            ..Default::default()
                        }],
                        ..Default::default()
                    })
                    .collect(),
                string_table: table,
                ..Default::default()
            };
            assert!(matches!(
                translate(&p),
                Err(PprofError::CopiesTooLarge { .. })
            ));
        }
    }

    /// Span context labels ↔ links: the pprof side as Go's runtime writes it (labels sorted
    /// by key), so that the round trip can be judged byte for byte.
    mod links {
        use super::*;
        use crate::merge::merge;

        const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
        const SPAN: &str = "00f067aa0ba902b7";

        /// A CPU profile of one function whose samples carry `labels[i]` (key, text) pairs.
        fn labelled(samples: &[&[(&str, &str)]]) -> pp::Profile {
            let mut p = pp::Profile {
                string_table: vec![String::new()],
                ..Default::default()
            };
            let (cpu, ns) = (s(&mut p, "cpu"), s(&mut p, "nanoseconds"));
            p.sample_type = vec![pp::ValueType {
                r#type: cpu,
                unit: ns,
            }];
            let name = s(&mut p, "main.work");
            p.function = vec![pp::Function {
                id: 1,
                name,
                ..Default::default()
            }];
            p.location = vec![pp::Location {
                id: 1,
                line: vec![pp::Line {
                    function_id: 1,
                    line: 10,
                    column: 0,
                }],
                ..Default::default()
            }];
            for (i, labels) in samples.iter().enumerate() {
                let label = labels
                    .iter()
                    .map(|&(k, v)| pp::Label {
                        key: s(&mut p, k),
                        str: s(&mut p, v),
                        ..Default::default()
                    })
                    .collect();
                p.sample.push(pp::Sample {
                    location_id: vec![1],
                    value: vec![i as i64 + 1],
                    label,
                });
            }
            p
        }

        /// Each sample's labels as (key, text) in their order on the wire.
        fn sample_labels(p: &pp::Profile) -> Vec<Vec<(String, String)>> {
            let s = |i: i64| p.string_table[i as usize].clone();
            p.sample
                .iter()
                .map(|smp| smp.label.iter().map(|l| (s(l.key), s(l.str))).collect())
                .collect()
        }

        /// Each sample's link as (trace hex, span hex), "" for none, and its attribute keys.
        fn otlp_links(batch: &ProfileBatch) -> Vec<(String, String, Vec<String>)> {
            let d = batch.dictionary();
            batch
                .profiles()
                .flat_map(|p| p.samples.iter())
                .map(|smp| {
                    let keys = smp
                        .attribute_indices
                        .iter()
                        .map(|a| d.string(d.attribute(a).key_strindex).to_owned())
                        .collect();
                    if smp.link_index == 0 {
                        return (String::new(), String::new(), keys);
                    }
                    let l = d.link(smp.link_index);
                    (hex::encode(l.trace_id), hex::encode(l.span_id), keys)
                })
                .collect()
        }

        #[test]
        fn trace_and_span_labels_become_a_link_and_come_back_byte_for_byte() {
            let other_trace = "0af7651916cd43dd8448eb211c80319c";
            let p = labelled(&[
                &[
                    ("endpoint", "/pay"),
                    ("span_id", SPAN),
                    ("trace_id", TRACE),
                    ("zone", "a"),
                ],
                &[("span_id", "b7ad6b7169203331"), ("trace_id", other_trace)],
                &[("endpoint", "/pay")],
                &[("span_id", SPAN), ("trace_id", TRACE)],
            ]);
            let batch = pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates");
            assert_eq!(
                otlp_links(&batch),
                [
                    (
                        TRACE.into(),
                        SPAN.into(),
                        vec!["endpoint".into(), "zone".into()]
                    ),
                    (other_trace.into(), "b7ad6b7169203331".into(), vec![]),
                    (String::new(), String::new(), vec!["endpoint".into()]),
                    (TRACE.into(), SPAN.into(), vec![]),
                ]
            );
            // Two distinct links, interned once each, beside the zero link.
            assert_eq!(batch.dictionary().link_count(), 3);
            let back = round_trip(&p);
            assert_eq!(sample_labels(&back), sample_labels(&p));
            assert_eq!(meaning(&back), meaning(&p));
        }

        #[test]
        fn what_only_looks_like_span_context_stays_a_label() {
            let p = labelled(&[
                // Pyroscope's span profiles: a span id alone.
                &[("span_id", SPAN), ("span_name", "GET /pay")],
                // Upper case, short, zero, repeated, or not hex: kept as they are.
                &[("span_id", "00F067AA0BA902B7"), ("trace_id", TRACE)],
                &[("span_id", SPAN), ("trace_id", &TRACE[..30])],
                &[
                    ("span_id", SPAN),
                    ("trace_id", "00000000000000000000000000000000"),
                ],
                &[
                    ("span_id", SPAN),
                    ("span_id", "b7ad6b7169203331"),
                    ("trace_id", TRACE),
                ],
                &[("span_id", "not-hex-at-all!!"), ("trace_id", TRACE)],
            ]);
            let batch = pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates");
            assert!(
                otlp_links(&batch).iter().all(|(t, _, _)| t.is_empty()),
                "{:?}",
                otlp_links(&batch)
            );
            assert_eq!(batch.dictionary().link_count(), 1, "only the zero link");
            assert_eq!(meaning(&round_trip(&p)), meaning(&p));
        }

        #[test]
        fn a_numeric_trace_id_label_stays_a_label() {
            let mut p = labelled(&[&[("span_id", SPAN)]]);
            let key = s(&mut p, "trace_id");
            p.sample[0].label.push(pp::Label {
                key,
                num: 42,
                ..Default::default()
            });
            let batch = pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates");
            assert_eq!(batch.dictionary().link_count(), 1, "only the zero link");
            assert_eq!(meaning(&round_trip(&p)), meaning(&p));
        }

        #[test]
        fn the_otel_spelling_becomes_a_link_and_comes_back_in_the_canonical_one() {
            let p = labelled(&[&[("otel.span_id", SPAN), ("otel.trace_id", TRACE)]]);
            let batch = pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates");
            assert_eq!(otlp_links(&batch), [(TRACE.into(), SPAN.into(), vec![])]);
            assert_eq!(
                sample_labels(&round_trip(&p)),
                [vec![
                    ("span_id".to_owned(), SPAN.to_owned()),
                    ("trace_id".to_owned(), TRACE.to_owned())
                ]]
            );
        }

        #[test]
        fn links_survive_merging_many_batches() {
            // 200 batches, each its own dictionary: links are re-interned into the merged one,
            // equal links shared.
            let batches: Vec<ProfileBatch> = (0..200u64)
                .map(|i| {
                    let trace = format!("{:032x}", 1 + i % 50);
                    let span = format!("{:016x}", 1 + i);
                    let p = labelled(&[
                        &[("span_id", &span), ("trace_id", &trace)],
                        &[("endpoint", "/pay")],
                    ]);
                    pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates")
                })
                .collect();
            let merged = merge(&batches);
            let mut want: Vec<_> = batches.iter().flat_map(otlp_links).collect();
            let mut got = otlp_links(&merged);
            want.sort();
            got.sort();
            assert_eq!(got, want);
            assert_eq!(
                merged.dictionary().link_count(),
                201,
                "200 distinct links and zero"
            );
            // And back out as labels.
            let out = batch_to_pprof(&merged, &ToPprofOptions::default()).expect("pprof");
            let labels: usize = out
                .iter()
                .flat_map(|o| sample_labels(&o.profile))
                .filter(|l| l.iter().any(|(k, _)| k == "trace_id"))
                .count();
            assert_eq!(labels, 200);
        }

        #[test]
        fn a_link_beside_a_same_named_attribute_or_with_a_zero_id_writes_each_key_once() {
            let mut b = DictionaryBuilder::new();
            let f = b.string("main.work");
            let func = b.function(Function {
                name_strindex: f,
                ..Default::default()
            });
            let loc = b.location(Location {
                lines: vec![Line {
                    function_index: func,
                    ..Default::default()
                }],
                ..Default::default()
            });
            let stack = b.stack(&[loc]);
            let trace = hex::decode(TRACE).expect("hex");
            let span = hex::decode(SPAN).expect("hex");
            let link = b.link(&trace, &span);
            let zero_trace = b.link(&[0; 16], &span);
            let stale =
                b.attribute_kv("span_id", Value::StringValue("b7ad6b7169203331".into()), "");
            let vt = ValueType {
                type_strindex: b.string("samples"),
                unit_strindex: b.string("count"),
            };
            let sample = |link_index, attribute_indices| Sample {
                stack_index: stack,
                link_index,
                attribute_indices,
                values: vec![1],
                ..Default::default()
            };
            let batch = batch_from_wire(
                b.finish(),
                vec![ResourceProfiles {
                    scope_profiles: vec![ScopeProfiles {
                        profiles: vec![Profile {
                            sample_type: Some(vt),
                            samples: vec![sample(link, vec![stale]), sample(zero_trace, vec![])],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            );
            let out = batch_to_pprof(&batch, &ToPprofOptions::default()).expect("translates");
            let mut got = sample_labels(&out[0].profile);
            got.sort();
            assert_eq!(
                got,
                [
                    // The invalid link's zero trace id is not written.
                    vec![("span_id".to_owned(), SPAN.to_owned())],
                    // The link's span id replaces the attribute's.
                    vec![
                        ("span_id".to_owned(), SPAN.to_owned()),
                        ("trace_id".to_owned(), TRACE.to_owned())
                    ],
                ]
            );
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// Generated profiles with span context on some samples round-trip with their
            /// meaning, and every canonical pair became a link.
            #[test]
            fn generated_pprof_with_span_context_round_trips(
                p in arb_pprof(),
                ids in prop::collection::vec(prop::option::of((1u128.., 1u64..)), 0..20),
            ) {
                prop_assume!(!has_mixed_label_kinds(&p));
                let mut p = p;
                let mut linked = 0;
                for (i, id) in ids.iter().enumerate().take(p.sample.len()) {
                    let Some((trace, span)) = id else { continue };
                    let (tk, sk) = (s(&mut p, "trace_id"), s(&mut p, "span_id"));
                    let tv = s(&mut p, &format!("{trace:032x}"));
                    let sv = s(&mut p, &format!("{span:016x}"));
                    let labels = &mut p.sample[i].label;
                    labels.push(pp::Label { key: sk, str: sv, ..Default::default() });
                    labels.push(pp::Label { key: tk, str: tv, ..Default::default() });
                    linked += 1;
                }
                let batch = pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates");
                let with_link = otlp_links(&batch).iter().filter(|(t, _, _)| !t.is_empty()).count();
                prop_assert_eq!(with_link, linked * p.sample_type.len());
                prop_assert_eq!(meaning(&round_trip(&p)), meaning(&p));
            }
        }
    }
}
