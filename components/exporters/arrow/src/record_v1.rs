//! The Parca v1 records of the `Write` exchange: the samples record (label columns, then
//! eleven fixed columns, strings as Binary dictionaries under Int32 run ends), the id list
//! the server answers with, and the locations record for the ids it asked for.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int64Array, ListArray, RecordBatch, StructArray,
    UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_ipc::reader::StreamReader;
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema};

use crate::arrays::{dict_binary, ree_of};
use crate::model::{Loc, Model, UNKNOWN};
use crate::record_v2::SCHEMA_VERSION_KEY;

pub const SCHEMA_VERSION_V1: &str = "v1";
/// Prefix of the label columns.
pub const LABEL_PREFIX: &str = "labels.";

fn field(name: &str, array: &ArrayRef, nullable: bool) -> Field {
    Field::new(name, array.data_type().clone(), nullable)
}

fn metadata() -> HashMap<String, String> {
    HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), SCHEMA_VERSION_V1.to_owned())])
}

/// REE<Int32, Dict<UInt32, Binary>> of one optional string per row.
fn ree_binary<'a>(
    per_row: impl IntoIterator<Item = Option<&'a str>>,
) -> Result<ArrayRef, ArrowError> {
    ree_of(per_row, |values| {
        dict_binary(values.into_iter().map(|v| v.map(str::as_bytes)))
    })
}

/// The samples record: the first message of the exchange.
pub fn samples_record(model: &Model) -> Result<RecordBatch, ArrowError> {
    let rows = &model.rows;
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (column, name) in model.label_names.iter().enumerate() {
        let array = ree_binary(
            rows.iter()
                .map(|r| model.label_sets[r.labels as usize][column].as_deref()),
        )?;
        fields.push(field(&format!("{LABEL_PREFIX}{name}"), &array, true));
        columns.push(array);
    }
    let mut push = |name: &str, array: ArrayRef, nullable: bool| {
        fields.push(field(name, &array, nullable));
        columns.push(array);
    };
    push(
        "stacktrace_id",
        ree_of(rows.iter().map(|r| r.stack), |stacks| {
            dict_binary(
                stacks
                    .iter()
                    .map(|&s| Some(&model.stacks[s as usize].id[..])),
            )
        })?,
        false,
    );
    push(
        "value",
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.value))),
        false,
    );
    let series = |f: fn(&crate::model::Series) -> Option<&str>| {
        ree_binary(rows.iter().map(|r| f(&model.series[r.series as usize])))
    };
    push("producer", series(|s| Some(&s.producer))?, false);
    push("sample_type", series(|s| Some(&s.sample_type))?, false);
    push("sample_unit", series(|s| Some(&s.sample_unit))?, false);
    push("period_type", series(|s| Some(&s.period_type))?, false);
    push("period_unit", series(|s| Some(&s.period_unit))?, false);
    push("temporality", series(|s| s.temporality)?, true);
    let int64 = |values: Vec<i64>| Ok(Arc::new(Int64Array::from(values)) as ArrayRef);
    push(
        "period",
        ree_of(
            // The agent's v1 off-CPU rows carry the sampling period (v2: 0).
            rows.iter()
                .map(|r| model.series[r.series as usize].period_v1),
            int64,
        )?,
        false,
    );
    push(
        "duration",
        ree_of(
            rows.iter().map(|r| {
                i64::try_from(model.series[r.series as usize].duration).unwrap_or(i64::MAX)
            }),
            int64,
        )?,
        false,
    );
    push(
        "timestamp",
        ree_of(rows.iter().map(|r| r.timestamp), int64)?,
        false,
    );
    let schema = Schema::new(fields).with_metadata(metadata());
    RecordBatch::try_new(Arc::new(schema), columns)
}

/// The stack ids a `WriteResponse` record lists.
pub fn requested_ids(ipc: &[u8]) -> Result<Vec<Vec<u8>>, ArrowError> {
    let reader = StreamReader::try_new(Cursor::new(ipc), None)?;
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch?;
        let column = batch.column_by_name("stacktrace_id").ok_or_else(|| {
            ArrowError::SchemaError("the reply has no stacktrace_id column".into())
        })?;
        match column.data_type() {
            DataType::Binary => ids.extend(
                column
                    .as_binary::<i32>()
                    .iter()
                    .flatten()
                    .map(<[u8]>::to_vec),
            ),
            DataType::FixedSizeBinary(_) => ids.extend(
                column
                    .as_fixed_size_binary()
                    .iter()
                    .flatten()
                    .map(<[u8]>::to_vec),
            ),
            other => {
                return Err(ArrowError::SchemaError(format!(
                    "stacktrace_id is {other}, expected Binary"
                )));
            }
        }
    }
    Ok(ids)
}

/// The lines of `locs`, flattened: List<Struct{line, column, function_name,
/// function_system_name, function_filename, function_start_line}>, null for none.
fn lines(model: &Model, locs: &[&Loc]) -> Result<ArrayRef, ArrowError> {
    let all: Vec<_> = locs.iter().flat_map(|l| l.lines.iter()).collect();
    let function = |i: u32| &model.functions[i as usize];
    let line: ArrayRef = Arc::new(Int64Array::from_iter_values(
        all.iter()
            .map(|l| i64::try_from(l.line).unwrap_or(i64::MAX)),
    ));
    let column: ArrayRef = Arc::new(UInt64Array::from_iter_values(all.iter().map(|l| l.column)));
    let name = dict_binary(
        all.iter()
            .map(|l| Some(function(l.function).name.as_bytes())),
    )?;
    let system_name = dict_binary(
        all.iter()
            .map(|l| Some(function(l.function).system_name.as_bytes())),
    )?;
    let filename = ree_binary(all.iter().map(|l| function(l.function).filename.as_deref()))?;
    let start_line: ArrayRef =
        Arc::new(Int64Array::from_iter_values(all.iter().map(|l| {
            i64::try_from(function(l.function).start_line).unwrap_or(i64::MAX)
        })));
    let line_struct: ArrayRef = Arc::new(StructArray::try_new(
        Fields::from(vec![
            field("line", &line, false),
            field("column", &column, false),
            field("function_name", &name, true),
            field("function_system_name", &system_name, true),
            field("function_filename", &filename, true),
            field("function_start_line", &start_line, false),
        ]),
        vec![line, column, name, system_name, filename, start_line],
        None,
    )?);
    let valid: Vec<bool> = locs.iter().map(|l| !l.lines.is_empty()).collect();
    let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
    Ok(Arc::new(ListArray::try_new(
        Arc::new(Field::new("item", line_struct.data_type().clone(), true)),
        OffsetBuffer::from_lengths(locs.iter().map(|l| l.lines.len())),
        line_struct,
        nulls,
    )?))
}

/// The locations record for the ids the server asked for, in its order. Ids this batch
/// does not hold are skipped (and returned).
pub fn locations_record(
    model: &Model,
    wanted: &[Vec<u8>],
) -> Result<(RecordBatch, Vec<Vec<u8>>), ArrowError> {
    let by_id: HashMap<&[u8], usize> = model
        .stacks
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.id[..], i))
        .collect();
    let mut unknown = Vec::new();
    let mut stacks = Vec::new();
    for id in wanted {
        match by_id.get(id.as_slice()) {
            Some(&i) => stacks.push(i),
            None => unknown.push(id.clone()),
        }
    }
    let locs: Vec<&Loc> = stacks
        .iter()
        .flat_map(|&s| model.stacks[s].locations.iter())
        .map(|&l| &model.locations[l as usize])
        .collect();
    let zeros = |n: usize| {
        ree_of(std::iter::repeat_n(0u64, n), |v| {
            Ok(Arc::new(UInt64Array::from(v)) as ArrayRef)
        })
    };
    let address: ArrayRef = Arc::new(UInt64Array::from_iter_values(
        locs.iter().map(|l| l.address),
    ));
    let frame_type = ree_binary(locs.iter().map(|l| Some(l.frame_type.as_str())))?;
    let mapping_start = zeros(locs.len())?;
    let mapping_limit = zeros(locs.len())?;
    let mapping_offset = zeros(locs.len())?;
    // Parca reads mapping_file without a null check.
    let mapping_file = ree_binary(
        locs.iter()
            .map(|l| Some(l.mapping_file.as_deref().unwrap_or(UNKNOWN))),
    )?;
    let build_id = ree_binary(locs.iter().map(|l| l.build_id.as_deref()))?;
    let lines = lines(model, &locs)?;
    let location_struct: ArrayRef = Arc::new(StructArray::try_new(
        Fields::from(vec![
            field("address", &address, false),
            field("frame_type", &frame_type, true),
            field("mapping_start", &mapping_start, true),
            field("mapping_limit", &mapping_limit, true),
            field("mapping_offset", &mapping_offset, true),
            field("mapping_file", &mapping_file, true),
            field("mapping_build_id", &build_id, true),
            field("lines", &lines, true),
        ]),
        vec![
            address,
            frame_type,
            mapping_start,
            mapping_limit,
            mapping_offset,
            mapping_file,
            build_id,
            lines,
        ],
        None,
    )?);
    let locations: ArrayRef = Arc::new(ListArray::try_new(
        Arc::new(Field::new(
            "item",
            location_struct.data_type().clone(),
            true,
        )),
        OffsetBuffer::from_lengths(stacks.iter().map(|&s| model.stacks[s].locations.len())),
        location_struct,
        None,
    )?);
    let ids: ArrayRef = Arc::new(BinaryArray::from_iter_values(
        stacks.iter().map(|&s| &model.stacks[s].id[..]),
    ));
    let complete: ArrayRef = Arc::new(BooleanArray::from(vec![true; stacks.len()]));
    let schema = Schema::new(vec![
        field("stacktrace_id", &ids, false),
        field("is_complete", &complete, false),
        field("locations", &locations, true),
    ])
    .with_metadata(metadata());
    let batch = RecordBatch::try_new(Arc::new(schema), vec![ids, complete, locations])?;
    Ok((batch, unknown))
}

/// The ids of `model`'s stacks, as a server's `WriteResponse` record would list them
/// (for tests and fakes).
pub fn ids_record(ids: &[&[u8]]) -> Result<RecordBatch, ArrowError> {
    let array: ArrayRef = Arc::new(BinaryArray::from_iter_values(ids.iter().copied()));
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![field("stacktrace_id", &array, false)])),
        vec![array],
    )
}
