//! The `arrow` exporter: profiles to Parca's profile store as Apache Arrow records over
//! gRPC, as Parca's agent sends them.
//!
//! - `schema: v2` (default): one record batch per export, an Arrow IPC stream with LZ4
//!   (default), zstd or no body compression, sent with `WriteArrow`;
//! - `schema: v1`: the `Write` exchange (samples record, the ids the server lacks, the
//!   locations record).
//!
//! The client settings are the `otlp` exporter's (shared through
//! `profcol_core::client`). With `debuginfo:` set, the executables behind native frames
//! that the eBPF receiver saw on this host are uploaded to Parca's `DebuginfoService`.
//! [`encode_v2`] gives the v2 IPC bytes of a batch, for size measurements.

mod arrays;
mod buildid;
mod config;
mod debuginfo;
mod exporter;
pub mod model;
pub mod profile_types;
pub mod record_v1;
pub mod record_v2;

pub use arrays::ZSTD_LEVEL;
pub use config::{ArrowExporterConfig, Compression, DebuginfoSettings, Schema};
pub use debuginfo::{CHUNK_BYTES, UPLOADS_METRIC};
pub use exporter::{ArrowExporterFactory, MAX_MESSAGE_BYTES};

use profcol_core::pdata::ProfileBatch;

/// Why a batch could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("building the Arrow record failed: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

/// The Arrow v2 IPC stream of `batch` (what `WriteArrow` carries), with `compression`.
/// An empty batch gives a stream with an empty record.
pub fn encode_v2(batch: &ProfileBatch, compression: Compression) -> Result<Vec<u8>, EncodeError> {
    let model = model::Model::from_batch(batch);
    let record = record_v2::record(&model)?;
    Ok(arrays::ipc_stream(&record, compression)?)
}

/// The Arrow v1 samples record of `batch` as an IPC stream (the first message of `Write`).
pub fn encode_v1_samples(batch: &ProfileBatch) -> Result<Vec<u8>, EncodeError> {
    let model = model::Model::from_batch(batch);
    let record = record_v1::samples_record(&model)?;
    Ok(arrays::ipc_stream(&record, Compression::None)?)
}

profcol_core::component_conformance!(
    exporter: ArrowExporterFactory,
    "arrow",
    Development,
    default_errors: ["endpoint"]
);

#[cfg(test)]
mod tests {
    //! Record builders (types, metadata, values, read back with arrow-rs's IPC reader) and
    //! config parsing and validation.

    use std::collections::BTreeMap;
    use std::io::Cursor;
    use std::time::Duration;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, UInt32Type};
    use arrow_array::{Array, ArrayRef, RecordBatch, RunArray};
    use arrow_ipc::reader::StreamReader;
    use arrow_schema::{DataType, TimeUnit};
    use profcol_core::component::ExporterFactory;
    use profcol_core::config::{ConfigError, Value, parse_typed, parse_yaml};
    use profcol_core::pdata::testing::{
        WireDictionaryBuilder as DictionaryBuilder, batch_from_wire,
    };
    use profcol_core::pdata::types::{
        AnyValue, Function, KeyValue, Line, Location, Mapping, Profile, Resource, ResourceProfiles,
        Sample, ScopeProfiles, Value as AttrValue, ValueType,
    };
    use profcol_core::pdata::{ProfileBatch, semconv};
    use profcol_core::testkit::config_errors;

    use crate::config::{ArrowExporterConfig, Compression, Schema};
    use crate::model::Model;
    use crate::record_v2::{COLUMNS, EXTENSION_NAME_KEY, SCHEMA_VERSION_KEY, UUID_EXTENSION};
    use crate::{ArrowExporterFactory, encode_v1_samples, encode_v2, record_v1};

    const BUILD_ID: &str = "aabbccddeeff00112233445566778899aabbccdd";
    const T0: u64 = 1_700_000_000_000_000_000;

    fn kv(key: &str, value: AttrValue) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn cpu_profile(b: &mut DictionaryBuilder, samples: Vec<Sample>) -> Profile {
        Profile {
            sample_type: Some(ValueType {
                type_strindex: b.string("samples"),
                unit_strindex: b.string("count"),
            }),
            period_type: Some(ValueType {
                type_strindex: b.string("cpu"),
                unit_strindex: b.string("nanoseconds"),
            }),
            period: 52_631_578,
            time_unix_nano: T0,
            duration_nano: 5_000_000_000,
            samples,
            ..Default::default()
        }
    }

    /// Two processes as the eBPF receiver emits them: a native unsymbolized frame, a
    /// symbolized one with an inlined function, kernel frames with and without a symbol.
    fn ebpf_batch() -> ProfileBatch {
        ebpf_batch_linking(None)
    }

    /// [`ebpf_batch`], its second sample linked to the span `(trace id, span id)` if given.
    fn ebpf_batch_linking(link: Option<([u8; 16], [u8; 8])>) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let link_index = link.map_or(0, |(trace, span)| b.link(&trace, &span));
        let frame = |b: &mut DictionaryBuilder, t: &str| {
            b.attribute_kv(semconv::FRAME_TYPE, AttrValue::StringValue(t.into()), "")
        };
        let build_id = b.attribute_kv(
            semconv::BUILD_ID_GNU,
            AttrValue::StringValue(BUILD_ID.into()),
            "",
        );
        let app_name = b.string("/usr/bin/app");
        let app = b.mapping(Mapping {
            memory_start: 0x5555_0000_0000,
            memory_limit: 0x5555_0010_0000,
            file_offset: 0x1000,
            filename_strindex: app_name,
            attribute_indices: vec![build_id],
        });
        let kernel_name = b.string("[kernel.kallsyms]");
        let kernel = b.mapping(Mapping {
            filename_strindex: kernel_name,
            ..Default::default()
        });
        let func = |b: &mut DictionaryBuilder, name: &str, file: &str| {
            let name = b.string(name);
            let file = b.string(file);
            b.function(Function {
                name_strindex: name,
                filename_strindex: file,
                ..Default::default()
            })
        };
        let inner = func(&mut b, "inner", "/src/a.c");
        let outer = func(&mut b, "outer", "/src/a.c");
        let syscall = func(&mut b, "do_syscall_64", "");
        let native_t = frame(&mut b, "native");
        let kernel_t = frame(&mut b, "kernel");
        let native = b.location(Location {
            mapping_index: app,
            address: 0x1234,
            lines: vec![],
            attribute_indices: vec![native_t],
        });
        let symbolized = b.location(Location {
            mapping_index: app,
            address: 0x2345,
            lines: vec![
                Line {
                    function_index: inner,
                    line: 10,
                    column: 2,
                },
                Line {
                    function_index: outer,
                    line: 20,
                    column: 0,
                },
            ],
            attribute_indices: vec![native_t],
        });
        let kernel_sym = b.location(Location {
            mapping_index: kernel,
            address: 0xffff_ffff_8100_0000,
            lines: vec![Line {
                function_index: syscall,
                line: 0,
                column: 0,
            }],
            attribute_indices: vec![kernel_t],
        });
        let kernel_unsym = b.location(Location {
            mapping_index: kernel,
            address: 0xffff_ffff_8100_0010,
            lines: vec![],
            attribute_indices: vec![kernel_t],
        });
        let s1 = b.stack(&[kernel_sym, native, symbolized]);
        let s2 = b.stack(&[symbolized]);
        let s3 = b.stack(&[kernel_unsym, native]);
        let worker = b.attribute_kv("thread.name", AttrValue::StringValue("worker".into()), "");
        let main = b.attribute_kv("thread.name", AttrValue::StringValue("main".into()), "");
        let p1 = cpu_profile(
            &mut b,
            vec![
                Sample {
                    stack_index: s1,
                    attribute_indices: vec![worker],
                    timestamps_unix_nano: vec![T0 + 20, T0 + 10],
                    ..Default::default()
                },
                Sample {
                    stack_index: s2,
                    timestamps_unix_nano: vec![T0 + 30],
                    link_index,
                    ..Default::default()
                },
            ],
        );
        let p2 = cpu_profile(
            &mut b,
            // One value per timestamp (the row's value is their sum, its time the earliest).
            vec![Sample {
                stack_index: s3,
                attribute_indices: vec![main],
                values: vec![3, 4],
                timestamps_unix_nano: vec![T0 + 1, T0],
                ..Default::default()
            }],
        );
        let resource = |attrs: Vec<KeyValue>, profile: Profile| ResourceProfiles {
            resource: Some(Resource {
                attributes: attrs,
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![profile],
                ..Default::default()
            }],
            ..Default::default()
        };
        batch_from_wire(
            b.finish(),
            vec![
                resource(
                    vec![
                        kv("service.name", AttrValue::StringValue("cart".into())),
                        kv("process.pid", AttrValue::IntValue(42)),
                    ],
                    p1,
                ),
                resource(
                    vec![kv("service.name", AttrValue::StringValue("db".into()))],
                    p2,
                ),
            ],
        )
    }

    fn read(ipc: &[u8]) -> RecordBatch {
        let reader = StreamReader::try_new(Cursor::new(ipc), None).expect("stream");
        let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
        assert_eq!(batches.len(), 1, "exactly one record batch per stream");
        batches.into_iter().next().expect("one")
    }

    fn dict_utf8() -> DataType {
        DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
    }

    /// REE<Int32, values>: the run-ends type and the values type.
    fn ree_parts(t: &DataType) -> (DataType, DataType) {
        match t {
            DataType::RunEndEncoded(ends, values) => {
                (ends.data_type().clone(), values.data_type().clone())
            }
            other => panic!("{other} is not run-end encoded"),
        }
    }

    /// The string at logical `row` of REE<Int32, Utf8 | Dict<_, Utf8 | Binary>>.
    fn ree_text(column: &ArrayRef, row: usize) -> Option<String> {
        let run = column
            .as_any()
            .downcast_ref::<RunArray<Int32Type>>()
            .expect("REE Int32");
        let physical = run.get_physical_index(row);
        text_at(run.values(), physical)
    }

    fn text_at(values: &ArrayRef, i: usize) -> Option<String> {
        if values.is_null(i) {
            return None;
        }
        match values.data_type() {
            DataType::Utf8 => Some(values.as_string::<i32>().value(i).to_owned()),
            DataType::Utf8View => Some(values.as_string_view().value(i).to_owned()),
            DataType::Binary => {
                Some(String::from_utf8_lossy(values.as_binary::<i32>().value(i)).into())
            }
            DataType::Dictionary(_, _) => {
                let d = values.as_dictionary::<UInt32Type>();
                let key = d.keys().value(i) as usize;
                text_at(d.values(), key)
            }
            other => panic!("no text in {other}"),
        }
    }

    fn ree_i64(column: &ArrayRef, row: usize) -> i64 {
        let run = column
            .as_any()
            .downcast_ref::<RunArray<Int32Type>>()
            .expect("REE Int32");
        let physical = run.get_physical_index(row);
        match run.values().data_type() {
            DataType::Int64 => run
                .values()
                .as_primitive::<arrow_array::types::Int64Type>()
                .value(physical),
            DataType::UInt64 => run
                .values()
                .as_primitive::<arrow_array::types::UInt64Type>()
                .value(physical) as i64,
            other => panic!("{other}"),
        }
    }

    /// A frame read back: address, frame type, mapping file, build id, lines as
    /// (function, file, line, column).
    type Frame = (
        u64,
        String,
        Option<String>,
        Option<String>,
        Vec<(String, Option<String>, u64, u64)>,
    );

    fn v2_stack(record: &RecordBatch, row: usize) -> Vec<Frame> {
        let list = record.column(1).as_list_view::<i32>();
        let dict = list.value(row);
        let dict = dict.as_dictionary::<UInt32Type>();
        let locs = dict.values().as_struct();
        let mut out = Vec::new();
        for k in dict.keys().iter() {
            let i = k.expect("location key") as usize;
            let address = locs
                .column_by_name("address")
                .expect("address")
                .as_primitive::<arrow_array::types::UInt64Type>()
                .value(i);
            let text = |name: &str| text_at(locs.column_by_name(name).expect(name), i);
            let lines_col = locs
                .column_by_name("lines")
                .expect("lines")
                .as_list_view::<i32>();
            let mut lines = Vec::new();
            if !lines_col.is_null(i) {
                let ls = lines_col.value(i);
                let ls = ls.as_struct();
                let funcs = ls.column_by_name("function").expect("function");
                let funcs = funcs.as_dictionary::<UInt32Type>();
                let fvals = funcs.values().as_struct();
                for j in 0..ls.len() {
                    let f = funcs.keys().value(j) as usize;
                    lines.push((
                        text_at(fvals.column_by_name("system_name").expect("sn"), f).expect("name"),
                        text_at(fvals.column_by_name("filename").expect("fn"), f),
                        ls.column_by_name("line")
                            .expect("line")
                            .as_primitive::<arrow_array::types::UInt64Type>()
                            .value(j),
                        ls.column_by_name("column")
                            .expect("column")
                            .as_primitive::<arrow_array::types::UInt64Type>()
                            .value(j),
                    ));
                }
            }
            out.push((
                address,
                text("frame_type").expect("frame type"),
                text("mapping_file"),
                text("mapping_build_id"),
                lines,
            ));
        }
        out
    }

    fn native() -> Frame {
        (
            0x1234,
            "native".into(),
            Some("/usr/bin/app".into()),
            Some(BUILD_ID.into()),
            vec![],
        )
    }

    fn symbolized() -> Frame {
        (
            0x2345,
            "native".into(),
            Some("/usr/bin/app".into()),
            Some(BUILD_ID.into()),
            vec![
                ("inner".into(), Some("/src/a.c".into()), 10, 2),
                ("outer".into(), Some("/src/a.c".into()), 20, 0),
            ],
        )
    }

    fn kernel(address: u64, name: &str) -> Frame {
        (
            address,
            "kernel".into(),
            Some("[kernel.kallsyms]".into()),
            None,
            vec![(name.into(), Some("vmlinux".into()), 0, 0)],
        )
    }

    #[test]
    fn v2_record_has_the_thirteen_columns_with_parcas_types() {
        let record = read(&encode_v2(&ebpf_batch(), Compression::None).expect("encode"));
        let schema = record.schema();
        assert_eq!(
            schema
                .metadata()
                .get(SCHEMA_VERSION_KEY)
                .map(String::as_str),
            Some("v2")
        );
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, COLUMNS);
        // labels: a struct of REE<Int32, Dict<UInt32, Utf8>>, names sorted.
        let DataType::Struct(labels) = schema.field(0).data_type() else {
            panic!("labels is {}", schema.field(0).data_type())
        };
        let label_names: Vec<&str> = labels.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(label_names, ["process_pid", "service_name", "thread_name"]);
        for f in labels.iter() {
            assert!(f.is_nullable());
            assert_eq!(ree_parts(f.data_type()), (DataType::Int32, dict_utf8()));
        }
        // stacktrace: ListView<Dict<UInt32, Struct{address, frame_type, mapping_file,
        // mapping_build_id, lines}>>.
        let DataType::ListView(item) = schema.field(1).data_type() else {
            panic!("stacktrace is {}", schema.field(1).data_type())
        };
        let DataType::Dictionary(key, location) = item.data_type() else {
            panic!("stacktrace item is {}", item.data_type())
        };
        assert_eq!(**key, DataType::UInt32);
        let DataType::Struct(loc) = &**location else {
            panic!("location is {location}")
        };
        let loc_types: Vec<(&str, &DataType)> = loc
            .iter()
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        assert_eq!(loc_types[0], ("address", &DataType::UInt64));
        assert_eq!(loc_types[1], ("frame_type", &dict_utf8()));
        assert_eq!(loc_types[2], ("mapping_file", &dict_utf8()));
        assert_eq!(loc_types[3], ("mapping_build_id", &dict_utf8()));
        let DataType::ListView(line) = loc_types[4].1 else {
            panic!("lines is {}", loc_types[4].1)
        };
        let DataType::Struct(line) = line.data_type() else {
            panic!("line is {}", line.data_type())
        };
        assert_eq!(line[0].data_type(), &DataType::UInt64);
        assert_eq!(line[1].data_type(), &DataType::UInt64);
        let DataType::Dictionary(fkey, function) = line[2].data_type() else {
            panic!("function is {}", line[2].data_type())
        };
        assert_eq!(**fkey, DataType::UInt32);
        let DataType::Struct(function) = &**function else {
            panic!("function is {function}")
        };
        assert_eq!(function[0].name(), "system_name");
        assert_eq!(function[0].data_type(), &DataType::Utf8View);
        assert_eq!(function[1].data_type(), &dict_utf8());
        assert_eq!(function[2].data_type(), &DataType::UInt64);
        // stacktrace_id: arrow.uuid over FixedSizeBinary(16).
        assert_eq!(schema.field(2).data_type(), &DataType::FixedSizeBinary(16));
        assert_eq!(
            schema
                .field(2)
                .metadata()
                .get(EXTENSION_NAME_KEY)
                .map(String::as_str),
            Some(UUID_EXTENSION)
        );
        assert_eq!(schema.field(3).data_type(), &DataType::Int64);
        for i in 4..10 {
            assert_eq!(
                ree_parts(schema.field(i).data_type()),
                (DataType::Int32, DataType::Utf8),
                "{}",
                schema.field(i).name()
            );
        }
        assert_eq!(
            ree_parts(schema.field(10).data_type()),
            (DataType::Int32, DataType::Int64)
        );
        assert_eq!(
            ree_parts(schema.field(11).data_type()),
            (DataType::Int32, DataType::UInt64)
        );
        assert_eq!(
            schema.field(12).data_type(),
            &DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
        );
        for (i, f) in schema.fields().iter().enumerate() {
            assert_eq!(
                f.is_nullable(),
                matches!(i, 1 | 9),
                "{} nullability",
                f.name()
            );
        }
    }

    /// Each row as (labels, stack, value, timestamp, profile type columns).
    type ReadRow = (BTreeMap<String, String>, Vec<Frame>, i64, i64, Vec<String>);

    fn v2_rows(record: &RecordBatch) -> Vec<ReadRow> {
        let labels = record.column(0).as_struct();
        (0..record.num_rows())
            .map(|row| {
                let mut l = BTreeMap::new();
                for (f, c) in labels.fields().iter().zip(labels.columns()) {
                    if let Some(v) = ree_text(c, row) {
                        l.insert(f.name().clone(), v);
                    }
                }
                let types: Vec<String> = (4..10)
                    .map(|c| ree_text(record.column(c), row).unwrap_or_else(|| "null".into()))
                    .chain([
                        ree_i64(record.column(10), row).to_string(),
                        ree_i64(record.column(11), row).to_string(),
                    ])
                    .collect();
                (
                    l,
                    v2_stack(record, row),
                    record
                        .column(3)
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .value(row),
                    record
                        .column(12)
                        .as_primitive::<arrow_array::types::TimestampNanosecondType>()
                        .value(row),
                    types,
                )
            })
            .collect()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn v2_values_labels_and_stacks_equal_what_went_in_for_every_compression() {
        let on_cpu: Vec<String> = [
            "parca_agent",
            "samples",
            "count",
            "cpu",
            "nanoseconds",
            "delta",
            "52631578",
            "5000000000",
        ]
        .map(String::from)
        .to_vec();
        let t0 = T0 as i64;
        let mut want: Vec<ReadRow> = vec![
            (
                labels(&[
                    ("process_pid", "42"),
                    ("service_name", "cart"),
                    ("thread_name", "worker"),
                ]),
                vec![
                    kernel(0xffff_ffff_8100_0000, "do_syscall_64"),
                    native(),
                    symbolized(),
                ],
                2,
                t0 + 10,
                on_cpu.clone(),
            ),
            (
                labels(&[("process_pid", "42"), ("service_name", "cart")]),
                vec![symbolized()],
                1,
                t0 + 30,
                on_cpu.clone(),
            ),
            (
                labels(&[("service_name", "db"), ("thread_name", "main")]),
                vec![kernel(0xffff_ffff_8100_0010, "UNKNOWN"), native()],
                7,
                t0,
                on_cpu,
            ),
        ];
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let mut sizes = Vec::new();
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let ipc = encode_v2(&ebpf_batch(), compression).expect("encode");
            sizes.push(ipc.len());
            let mut got = v2_rows(&read(&ipc));
            got.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(got, want, "{compression:?}");
        }
        // Compressed streams differ from the plain one (their buffers carry a length prefix).
        assert_ne!(sizes[0], sizes[1]);
        assert_ne!(sizes[0], sizes[2]);
    }

    #[test]
    fn a_linked_sample_carries_its_trace_and_span_as_labels() {
        let (trace, span) = ([0xab; 16], [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        let ipc =
            encode_v2(&ebpf_batch_linking(Some((trace, span))), Compression::None).expect("v2");
        let rows = v2_rows(&read(&ipc));
        let linked: Vec<&BTreeMap<String, String>> = rows
            .iter()
            .map(|r| &r.0)
            .filter(|l| l.contains_key("trace_id"))
            .collect();
        assert_eq!(
            linked,
            [&labels(&[
                ("process_pid", "42"),
                ("service_name", "cart"),
                ("span_id", "0123456789abcdef"),
                ("trace_id", "abababababababababababababababab"),
            ])],
            "only the linked sample, beside its resource's labels"
        );
        assert_eq!(rows.len(), 3, "the link does not split or join rows");
    }

    #[test]
    fn equal_stacks_get_equal_ids_and_repeated_stacks_share_one_view() {
        let model = Model::from_batch(&ebpf_batch());
        assert_eq!(model.stacks.len(), 3);
        let ids: std::collections::HashSet<[u8; 16]> = model.stacks.iter().map(|s| s.id).collect();
        assert_eq!(ids.len(), 3);
        // The same content in another batch (other indices) hashes the same.
        let again = Model::from_batch(&ebpf_batch());
        assert_eq!(
            model.stacks.iter().map(|s| s.id).collect::<Vec<_>>(),
            again.stacks.iter().map(|s| s.id).collect::<Vec<_>>()
        );
        assert_eq!(model.build_ids(), vec![BUILD_ID.to_owned()]);
        // Deduplicated: native appears in two stacks but once in the location table.
        assert_eq!(model.locations.len(), 4);
        let record = crate::record_v2::record(&model).expect("record");
        let list = record.column(1).as_list_view::<i32>();
        let ids = record.column(2).as_fixed_size_binary();
        for a in 0..record.num_rows() {
            for b in 0..record.num_rows() {
                if ids.value(a) == ids.value(b) {
                    assert_eq!(list.value_offset(a), list.value_offset(b));
                }
            }
        }
    }

    #[test]
    fn pprof_born_addresses_are_made_file_relative_and_types_keep_their_producer() {
        let mut b = DictionaryBuilder::new();
        let name = b.string("/app/server");
        let m = b.mapping(Mapping {
            memory_start: 0x40_0000,
            memory_limit: 0x80_0000,
            file_offset: 0,
            filename_strindex: name,
            attribute_indices: vec![],
        });
        let loc = b.location(Location {
            mapping_index: m,
            address: 0x40_1234,
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: b.string("inuse_space"),
                unit_strindex: b.string("bytes"),
            }),
            period_type: Some(ValueType {
                type_strindex: b.string("space"),
                unit_strindex: b.string("bytes"),
            }),
            period: 524_288,
            time_unix_nano: T0,
            samples: vec![Sample {
                stack_index: stack,
                values: vec![4096],
                ..Default::default()
            }],
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
        let model = Model::from_batch(&batch);
        assert_eq!(model.locations[0].address, 0x1234);
        assert_eq!(model.locations[0].frame_type, "native");
        assert_eq!(model.locations[0].build_id, None);
        let s = &model.series[0];
        assert_eq!(s.producer, "memory");
        assert_eq!((s.duration, s.temporality), (0, None));
        let record = read(&encode_v2(&batch, Compression::Lz4).expect("encode"));
        // No labels at all is an empty struct.
        let DataType::Struct(fields) = record.schema().field(0).data_type().clone() else {
            panic!("labels")
        };
        assert!(fields.is_empty());
        assert_eq!(record.num_rows(), 1);
        assert!(record.column(9).as_any().is::<RunArray<Int32Type>>());
        assert_eq!(ree_text(record.column(9), 0), None, "temporality null");
    }

    #[test]
    fn an_empty_batch_encodes_to_an_empty_record() {
        let record = read(&encode_v2(&ProfileBatch::empty(), Compression::Lz4).expect("encode"));
        assert_eq!(record.num_rows(), 0);
        assert_eq!(record.num_columns(), 13);
    }

    #[test]
    fn v1_records_have_the_write_exchange_types_and_values() {
        let batch = ebpf_batch();
        let samples = read(&encode_v1_samples(&batch).expect("encode"));
        let schema = samples.schema();
        assert_eq!(
            schema
                .metadata()
                .get(SCHEMA_VERSION_KEY)
                .map(String::as_str),
            Some("v1")
        );
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "labels.process_pid",
                "labels.service_name",
                "labels.thread_name",
                "stacktrace_id",
                "value",
                "producer",
                "sample_type",
                "sample_unit",
                "period_type",
                "period_unit",
                "temporality",
                "period",
                "duration",
                "timestamp",
            ]
        );
        let dict_binary =
            DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Binary));
        for f in schema.fields() {
            let expected = match f.name().as_str() {
                "value" => {
                    assert_eq!(f.data_type(), &DataType::Int64);
                    continue;
                }
                "period" | "duration" | "timestamp" => DataType::Int64,
                _ => dict_binary.clone(),
            };
            assert_eq!(
                ree_parts(f.data_type()),
                (DataType::Int32, expected),
                "{}",
                f.name()
            );
        }
        let model = Model::from_batch(&batch);
        // Every row's id is a stack of the model; the server asks for all of them.
        let ids: Vec<Vec<u8>> = (0..samples.num_rows())
            .map(|r| {
                let run = samples
                    .column(3)
                    .as_any()
                    .downcast_ref::<RunArray<Int32Type>>()
                    .expect("ree");
                let d = run.values().as_dictionary::<UInt32Type>();
                let k = d.keys().value(run.get_physical_index(r)) as usize;
                d.values().as_binary::<i32>().value(k).to_vec()
            })
            .collect();
        assert!(ids.iter().all(|id| id.len() == 16));
        let reply = crate::arrays::ipc_stream(
            &record_v1::ids_record(&ids.iter().map(Vec::as_slice).collect::<Vec<_>>())
                .expect("ids"),
            Compression::None,
        )
        .expect("ipc");
        let mut wanted = record_v1::requested_ids(&reply).expect("parse");
        wanted.push(vec![0; 16]);
        let (locations, unknown) = record_v1::locations_record(&model, &wanted).expect("locations");
        assert_eq!(unknown, vec![vec![0u8; 16]]);
        let names: Vec<String> = locations
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["stacktrace_id", "is_complete", "locations"]);
        assert_eq!(locations.num_rows(), ids.len());
        let list = locations.column(2).as_list::<i32>();
        let first = list.value(0);
        let loc = first.as_struct();
        let DataType::List(lines) = loc.column_by_name("lines").expect("lines").data_type() else {
            panic!("lines")
        };
        let DataType::Struct(line_fields) = lines.data_type() else {
            panic!("line")
        };
        let line_names: Vec<&str> = line_fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            line_names,
            [
                "line",
                "column",
                "function_name",
                "function_system_name",
                "function_filename",
                "function_start_line"
            ]
        );
        assert_eq!(
            ree_parts(loc.column_by_name("mapping_start").expect("ms").data_type()),
            (DataType::Int32, DataType::UInt64)
        );
        // Every location's mapping_file is set (Parca reads it without a null check).
        for r in 0..list.len() {
            let locs = list.value(r);
            let locs = locs.as_struct();
            let files = locs.column_by_name("mapping_file").expect("mf");
            for i in 0..locs.len() {
                assert!(ree_text(files, i).is_some());
            }
        }
    }

    // ---- profile types ------------------------------------------------------------------

    /// A profile to map: its types, period, duration, sample shape and resource family.
    struct TypeCase {
        sample: (&'static str, &'static str),
        period_type: (&'static str, &'static str),
        period: i64,
        duration: u64,
        timestamped: bool,
        family: Option<&'static str>,
    }

    /// The row a case should get: producer, the four names, v2 and v1 period, duration.
    type Expected = (&'static str, [&'static str; 4], i64, i64, u64);

    const fn case(
        sample: (&'static str, &'static str),
        period_type: (&'static str, &'static str),
        period: i64,
    ) -> TypeCase {
        TypeCase {
            sample,
            period_type,
            period,
            duration: 0,
            timestamped: false,
            family: None,
        }
    }

    /// One resource (with the case's family), one scope, one profile of one sample.
    fn case_batch(c: &TypeCase) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let loc = b.location(Location {
            address: 0x10,
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let sample = if c.timestamped {
            Sample {
                stack_index: stack,
                values: vec![5, 6],
                timestamps_unix_nano: vec![T0, T0 + 1],
                ..Default::default()
            }
        } else {
            Sample {
                stack_index: stack,
                values: vec![11],
                ..Default::default()
            }
        };
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: b.string(c.sample.0),
                unit_strindex: b.string(c.sample.1),
            }),
            period_type: Some(ValueType {
                type_strindex: b.string(c.period_type.0),
                unit_strindex: b.string(c.period_type.1),
            }),
            period: c.period,
            time_unix_nano: T0,
            duration_nano: c.duration,
            samples: vec![sample],
            ..Default::default()
        };
        let attributes = c
            .family
            .map(|f| {
                vec![kv(
                    crate::profile_types::FAMILY_ATTRIBUTE,
                    AttrValue::StringValue(f.into()),
                )]
            })
            .unwrap_or_default();
        batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes,
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    /// Every row of the table, with what Parca is sent for it (written out here, not read
    /// from the table).
    fn type_cases() -> Vec<(TypeCase, Expected)> {
        const SAMPLING: i64 = 52_631_578;
        const NS: &str = "nanoseconds";
        let timestamped = |c: TypeCase| TypeCase {
            timestamped: true,
            ..c
        };
        let family = |c: TypeCase, f: &'static str| TypeCase {
            family: Some(f),
            ..c
        };
        let go_cpu = |sample| TypeCase {
            duration: 2_600_000_000,
            ..case(sample, ("cpu", NS), 10_000_000)
        };
        let heap = |sample| case(sample, ("space", "bytes"), 524_288);
        let contention = |sample| case(sample, ("contentions", "count"), 1);
        let wall = |sample| case(sample, ("wall", NS), 10_175_000);
        let as_given = |producer, c: &TypeCase| -> Expected {
            (
                producer,
                [c.sample.0, c.sample.1, c.period_type.0, c.period_type.1],
                c.period,
                c.period,
                c.duration,
            )
        };
        let mut cases = Vec::new();
        let mut push = |c: TypeCase, e: Expected| cases.push((c, e));
        // The CPU of the eBPF receivers: a 1 s delta when the profile has no duration.
        let c = timestamped(case(("samples", "count"), ("cpu", NS), SAMPLING));
        push(
            c,
            (
                "parca_agent",
                ["samples", "count", "cpu", NS],
                SAMPLING,
                SAMPLING,
                1_000_000_000,
            ),
        );
        let off_cpu = (
            "parca_agent",
            ["wallclock", NS, "samples", "count"],
            0,
            SAMPLING,
            1_000_000_000,
        );
        push(timestamped(case(("off_cpu", NS), ("", ""), 0)), off_cpu);
        push(case(("wallclock", NS), ("samples", "count"), 0), off_cpu);
        // Go's CPU pprof: its `samples` column has the eBPF CPU types (and producer).
        let c = go_cpu(("samples", "count"));
        let e = as_given("parca_agent", &c);
        push(c, e);
        let c = go_cpu(("cpu", NS));
        let e = as_given("process_cpu", &c);
        push(c, e);
        for sample in [
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
            ("objects", "count"),
            ("space", "bytes"),
            ("alloc_samples", "count"),
            ("alloc_size", "bytes"),
            ("alloc_in_new_tlab_objects", "count"),
            ("alloc_in_new_tlab_bytes", "bytes"),
            ("alloc_outside_tlab_objects", "count"),
            ("alloc_outside_tlab_bytes", "bytes"),
            ("alloc_sample_objects", "count"),
            ("alloc_sample_bytes", "bytes"),
            ("live", "count"),
            ("malloc_objects", "count"),
            ("malloc_bytes", "bytes"),
        ] {
            let c = heap(sample);
            let e = as_given("memory", &c);
            push(c, e);
        }
        for sample in [("contentions", "count"), ("delay", NS)] {
            for (f, producer) in [
                (Some("mutex"), "mutex"),
                (Some("block"), "block"),
                (None, "contentions"),
                (Some("process_cpu"), "contentions"),
            ] {
                let c = match f {
                    Some(f) => family(contention(sample), f),
                    None => contention(sample),
                };
                let e = as_given(producer, &c);
                push(c, e);
            }
        }
        let c = case(("goroutine", "count"), ("goroutine", "count"), 1);
        let e = as_given("goroutine", &c);
        push(c, e);
        for (sample, producer, written) in [
            (("mutex_count", "count"), "mutex", ["contentions", "count"]),
            (("mutex_duration", NS), "mutex", ["delay", NS]),
            (("block_count", "count"), "block", ["contentions", "count"]),
            (("block_duration", NS), "block", ["delay", NS]),
        ] {
            push(
                contention(sample),
                (
                    producer,
                    [written[0], written[1], "contentions", "count"],
                    1,
                    1,
                    0,
                ),
            );
        }
        for sample in [("sample", "count"), ("wall", NS)] {
            let c = wall(sample);
            let e = as_given("wall", &c);
            push(c, e);
        }
        for (sample, producer) in [
            (("lock_count", "count"), "mutex"),
            (("lock_time", NS), "mutex"),
            (("exception", "count"), "exceptions"),
            (("widgets", "furlongs"), "profcol"),
        ] {
            let c = case(sample, ("tick", "count"), 3);
            let e = as_given(producer, &c);
            push(c, e);
        }
        cases
    }

    #[test]
    fn every_row_of_the_profile_type_table_maps_as_parca_names_it() {
        let mut rows_hit = std::collections::BTreeSet::new();
        for (c, (producer, names, period, period_v1, duration)) in type_cases() {
            let what = format!("{:?} over {:?} ({:?})", c.sample, c.period_type, c.family);
            let model = Model::from_batch(&case_batch(&c));
            assert_eq!(model.series.len(), 1, "{what}");
            let s = &model.series[0];
            assert_eq!(s.producer, producer, "{what}");
            assert_eq!(
                [
                    s.sample_type.as_str(),
                    s.sample_unit.as_str(),
                    s.period_type.as_str(),
                    s.period_unit.as_str()
                ],
                names,
                "{what}"
            );
            assert_eq!((s.period, s.period_v1), (period, period_v1), "{what}");
            assert_eq!(s.duration, duration, "{what}");
            assert_eq!(s.temporality, (duration != 0).then_some("delta"), "{what}");
            assert_eq!(model.rows[0].value, 11, "{what}: the sum of the values");
            let key = crate::profile_types::Key {
                sample: c.sample,
                period_type: c.period_type.0,
                family: c.family,
            };
            if let Some(row) = crate::profile_types::lookup(&key) {
                rows_hit.insert(row.name);
            }
        }
        let all: std::collections::BTreeSet<&str> = crate::profile_types::PROFILE_TYPES
            .iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(rows_hit, all, "a case per row of the table");
        assert_eq!(
            all.len(),
            crate::profile_types::PROFILE_TYPES.len(),
            "row names are unique"
        );
        assert_eq!(crate::profile_types::ON_CPU.name, "on-CPU");
    }

    /// A CPU profile (timestamps only) and an off-CPU one (a value per timestamp) of one
    /// process, as the `profiling` receiver emits them, sampling at `frequency` Hz.
    fn cpu_and_off_cpu_batch(frequency: i64) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let name = b.string("read");
        let read = b.function(Function {
            name_strindex: name,
            ..Default::default()
        });
        let loc = b.location(Location {
            address: 0x20,
            lines: vec![Line {
                function_index: read,
                line: 1,
                column: 0,
            }],
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let mut cpu = cpu_profile(
            &mut b,
            vec![Sample {
                stack_index: stack,
                timestamps_unix_nano: vec![T0 + 1, T0 + 2, T0 + 3],
                ..Default::default()
            }],
        );
        cpu.period = 1_000_000_000 / frequency;
        let off_cpu = Profile {
            sample_type: Some(ValueType {
                type_strindex: b.string("off_cpu"),
                unit_strindex: b.string("nanoseconds"),
            }),
            period_type: None,
            period: 0,
            time_unix_nano: T0,
            duration_nano: 0,
            samples: vec![Sample {
                stack_index: stack,
                values: vec![1_500_000, 2_500_000],
                timestamps_unix_nano: vec![T0 + 7, T0 + 5],
                ..Default::default()
            }],
            ..Default::default()
        };
        batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", AttrValue::StringValue("app".into()))],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![cpu, off_cpu],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    #[test]
    fn off_cpu_goes_to_parca_as_the_agents_wallclock_in_v2() {
        let batch = cpu_and_off_cpu_batch(99);
        let record = read(&encode_v2(&batch, Compression::Lz4).expect("encode"));
        let mut rows = v2_rows(&record);
        rows.sort_by(|a, b| a.4.cmp(&b.4));
        assert_eq!(rows.len(), 2);
        let (on, off) = (&rows[0], &rows[1]);
        let types = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            off.4,
            types(&[
                "parca_agent",
                "wallclock",
                "nanoseconds",
                "samples",
                "count",
                "delta",
                "0",
                "1000000000"
            ])
        );
        // The sum of the per-event values, at the earliest event.
        assert_eq!((off.2, off.3), (4_000_000, T0 as i64 + 5));
        assert_eq!(
            on.4,
            types(&[
                "parca_agent",
                "samples",
                "count",
                "cpu",
                "nanoseconds",
                "delta",
                "10101010",
                "5000000000"
            ])
        );
        assert_eq!((on.2, on.3), (3, T0 as i64 + 1));
        assert_eq!(off.1, on.1, "the same stack");
    }

    /// The v1 samples record's rows as (sample_type, period_type, value, period, duration).
    fn v1_rows(record: &RecordBatch) -> Vec<(String, String, i64, i64, i64)> {
        let column = |name: &str| record.column_by_name(name).expect(name);
        (0..record.num_rows())
            .map(|r| {
                (
                    ree_text(column("sample_type"), r).expect("sample type"),
                    ree_text(column("period_type"), r).expect("period type"),
                    column("value")
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .value(r),
                    ree_i64(column("period"), r),
                    ree_i64(column("duration"), r),
                )
            })
            .collect()
    }

    #[test]
    fn off_cpu_in_v1_carries_the_sampling_period_beside_it_or_the_default() {
        let record = read(&encode_v1_samples(&cpu_and_off_cpu_batch(99)).expect("encode"));
        let mut rows = v1_rows(&record);
        rows.sort();
        assert_eq!(
            rows,
            [
                ("samples".into(), "cpu".into(), 3, 10_101_010, 5_000_000_000),
                (
                    "wallclock".into(),
                    "samples".into(),
                    4_000_000,
                    10_101_010,
                    1_000_000_000
                ),
            ]
        );
        assert_eq!(
            ree_text(record.column_by_name("producer").expect("producer"), 0).as_deref(),
            Some("parca_agent")
        );
        // Off-CPU alone (no CPU profile beside it): 1e9 / 19 Hz, the default frequency.
        let c = TypeCase {
            timestamped: true,
            ..case(("off_cpu", "nanoseconds"), ("", ""), 0)
        };
        let record = read(&encode_v1_samples(&case_batch(&c)).expect("encode"));
        assert_eq!(
            v1_rows(&record),
            [(
                "wallclock".into(),
                "samples".into(),
                11,
                52_631_578,
                1_000_000_000
            )]
        );
    }

    // ---- config ------------------------------------------------------------------------

    fn testdata(name: &str) -> Value {
        profcol_core::testkit::testdata_value(env!("CARGO_MANIFEST_DIR"), name)
    }

    fn parse(text: &str) -> Result<ArrowExporterConfig, ConfigError> {
        parse_typed(&parse_yaml("inline", text).expect("yaml"))
    }

    fn paths(errors: &[ConfigError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn testdata_config_parses_and_validates() {
        let config = testdata("config.yaml");
        let c: ArrowExporterConfig = parse_typed(&config["exporters"]["arrow"]).expect("arrow");
        assert_eq!(c.endpoint, "parca.example:7070");
        assert_eq!(c.headers["authorization"], "Bearer secret-token");
        assert_eq!((c.schema, c.compression), (Schema::V2, Compression::Zstd));
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.sending_queue.queue_size, 200);
        let d = c.debuginfo.clone().expect("debuginfo on");
        assert_eq!(d.retry_interval, Duration::from_secs(30));
        assert_eq!(d.max_file_size, 512 << 20);
        assert_eq!(d.parallel_uploads, 4);
        assert!(config_errors(&c).is_empty(), "{:?}", config_errors(&c));
        let helper = ArrowExporterFactory.helper_settings(&c);
        assert_eq!(helper.timeout, Duration::from_secs(10));
        assert_eq!(helper.retry, c.retry_on_failure);

        let v1: ArrowExporterConfig = parse_typed(&config["exporters"]["arrow/v1"]).expect("v1");
        assert_eq!(v1.schema, Schema::V1);
        assert_eq!(v1.debuginfo, None);
        assert!(config_errors(&v1).is_empty(), "{:?}", config_errors(&v1));
        let other: ArrowExporterConfig =
            parse_typed(&config["exporters"]["arrow/debuginfo_elsewhere"]).expect("elsewhere");
        assert!(
            config_errors(&other).is_empty(),
            "{:?}",
            config_errors(&other)
        );
    }

    #[test]
    fn defaults_are_v2_lz4_and_debuginfo_off() {
        let c = parse("endpoint: parca:7070\n").expect("parse");
        assert_eq!(
            c,
            ArrowExporterConfig {
                endpoint: "parca:7070".into(),
                ..Default::default()
            }
        );
        assert_eq!((c.schema, c.compression), (Schema::V2, Compression::Lz4));
        assert_eq!(c.timeout, Duration::from_secs(5));
        let on = parse("endpoint: parca:7070\ndebuginfo: {}\n").expect("parse");
        let d = on.debuginfo.expect("on");
        assert_eq!(d.retry_interval, Duration::from_secs(300));
        assert_eq!(d.timeout, Duration::from_secs(120));
    }

    #[test]
    fn bad_values_name_their_paths() {
        let e = parse("endpoint: x:1\nschema: v3\n").expect_err("v3");
        assert_eq!(e.path, "schema");
        let e = parse("endpoint: x:1\ncompression: gzip\n").expect_err("gzip");
        assert_eq!(e.path, "compression");
        assert_eq!(
            parse("endpoint: x:1\ncompression: \"\"\n")
                .expect("empty")
                .compression,
            Compression::None
        );
    }

    #[test]
    fn validation_reports_every_error_with_its_path() {
        let c = parse(
        "endpoint: ftp://parca:7070\ntls:\n  cert_file: /c.pem\nheaders:\n  grpc-timeout: 1S\nschema: v1\ncompression: zstd\nsending_queue:\n  queue_size: 0\ndebuginfo:\n  headers:\n    x: y\n  timeout: 0s\n  parallel_uploads: 0\n",
    )
    .expect("parse");
        let errors = config_errors(&c);
        assert_eq!(
            paths(&errors),
            [
                "endpoint",
                "tls::key_file",
                "headers::grpc-timeout",
                "compression",
                "sending_queue::queue_size",
                "debuginfo::endpoint",
                "debuginfo::timeout",
                "debuginfo::parallel_uploads",
            ],
            "{errors:?}"
        );
        let missing = config_errors(&ArrowExporterConfig::default());
        assert_eq!(paths(&missing), ["endpoint"]);
        let c = parse("endpoint: parca\ndebuginfo:\n  endpoint: dbg\n").expect("parse");
        assert_eq!(
            paths(&config_errors(&c)),
            ["endpoint", "debuginfo::endpoint"]
        );
    }

    #[tokio::test]
    async fn the_factory_creates_without_connecting_and_refuses_bad_tls_files() {
        let ctx = profcol_core::component::CreateContext {
            id: profcol_core::component::ComponentId::new("arrow", None),
            telemetry: Default::default(),
            host: Default::default(),
        };
        let c =
            parse("endpoint: 127.0.0.1:1\ntls:\n  insecure: true\ndebuginfo: {}\n").expect("parse");
        let exporter = ArrowExporterFactory
            .create(
                profcol_core::config::Checked::check(c).expect("a valid config"),
                &ctx,
            )
            .expect("created lazily");
        // Nothing listens on port 1: a retryable error, as otlp's.
        let e = exporter.export(ebpf_batch()).await.expect_err("refused");
        assert!(e.is_retryable(), "{e}");
        exporter.shutdown().await.expect("shutdown");
        let bad =
            parse("endpoint: parca:7070\ntls:\n  ca_file: /nonexistent/ca.pem\n").expect("parse");
        let Err(e) = ArrowExporterFactory.create(
            profcol_core::config::Checked::check(bad).expect("a valid config"),
            &ctx,
        ) else {
            panic!("a missing CA file must fail create")
        };
        let text = profcol_core::errors::error_chain(&e);
        assert!(text.contains("/nonexistent/ca.pem"), "{text}");
    }

    #[test]
    fn a_jfr_recordings_profiles_are_named_by_their_own_family() {
        let path = format!(
            "{}/../../../testdata/jfr/jdk17-profile.jfr.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let plain = profcol_core::pdata::codec::maybe_gunzip(&gz, 64 << 20).expect("gunzip");
        let batch = profcol_core::jfr::jfr_to_batch(&plain, Default::default()).expect("jfr");
        let ipc = encode_v2(&batch, Compression::None).expect("v2");
        let mut producers: Vec<(String, String)> = v2_rows(&read(&ipc))
            .into_iter()
            .map(|r| (r.4[0].clone(), r.4[1].clone()))
            .collect();
        producers.sort();
        producers.dedup();
        // The monitor waits are the `mutex` family's (the profile says so, not the resource).
        assert_eq!(
            producers,
            [
                ("memory".to_owned(), "alloc_sample_bytes".to_owned()),
                ("memory".to_owned(), "alloc_sample_objects".to_owned()),
                ("mutex".to_owned(), "contentions".to_owned()),
                ("mutex".to_owned(), "delay".to_owned()),
                ("process_cpu".to_owned(), "cpu".to_owned()),
            ]
        );
    }
}
