//! The Parca v2 record: one self-contained record batch per request, thirteen columns in
//! the order and with the exact types Parca's v2 normalizer asserts (see the README).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::types::UInt32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, FixedSizeBinaryArray, Int64Array, ListViewArray, RecordBatch,
    StringArray, StringViewArray, StructArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema};

use crate::arrays::{dict_utf8, ree_of};
use crate::model::Model;

/// Schema metadata key and value every v2 record carries.
pub const SCHEMA_VERSION_KEY: &str = "parca_write_schema_version";
pub const SCHEMA_VERSION_V2: &str = "v2";
/// Field metadata naming the extension type of `stacktrace_id`.
pub const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
pub const UUID_EXTENSION: &str = "arrow.uuid";

/// The thirteen top-level columns, in order.
pub const COLUMNS: [&str; 13] = [
    "labels",
    "stacktrace",
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
];

fn field(name: &str, array: &ArrayRef, nullable: bool) -> Field {
    Field::new(name, array.data_type().clone(), nullable)
}

fn u32_len(n: usize) -> Result<u32, ArrowError> {
    u32::try_from(n).map_err(|_| ArrowError::InvalidArgumentError(format!("{n} is too long")))
}

fn i32_len(n: usize) -> Result<i32, ArrowError> {
    i32::try_from(n).map_err(|_| ArrowError::InvalidArgumentError(format!("{n} is too long")))
}

/// `labels`: a struct with one REE<Int32, Dict<UInt32, Utf8>> child per label name.
fn labels(model: &Model) -> Result<ArrayRef, ArrowError> {
    let mut fields = Vec::with_capacity(model.label_names.len());
    let mut children = Vec::with_capacity(model.label_names.len());
    for (column, name) in model.label_names.iter().enumerate() {
        let child = ree_of(
            model
                .rows
                .iter()
                .map(|r| model.label_sets[r.labels as usize][column].as_deref()),
            dict_utf8,
        )?;
        fields.push(field(name, &child, true));
        children.push(child);
    }
    Ok(Arc::new(StructArray::try_new_with_length(
        Fields::from(fields),
        children,
        None,
        model.rows.len(),
    )?))
}

/// The function dictionary's values: `Struct{system_name: Utf8View, filename:
/// Dict<UInt32, Utf8>, start_line: UInt64}`.
fn functions(model: &Model) -> Result<ArrayRef, ArrowError> {
    let system_name: ArrayRef = Arc::new(StringViewArray::from_iter_values(
        model.functions.iter().map(|f| f.display_name()),
    ));
    let filename = dict_utf8(model.functions.iter().map(|f| f.filename.as_deref()))?;
    let start_line: ArrayRef = Arc::new(UInt64Array::from_iter_values(
        model.functions.iter().map(|f| f.start_line),
    ));
    Ok(Arc::new(StructArray::try_new(
        Fields::from(vec![
            field("system_name", &system_name, false),
            field("filename", &filename, true),
            field("start_line", &start_line, false),
        ]),
        vec![system_name, filename, start_line],
        None,
    )?))
}

/// Each location's `lines`: ListView<Struct{line, column, function}>, null for none.
fn lines(model: &Model) -> Result<ArrayRef, ArrowError> {
    let mut offsets = Vec::with_capacity(model.locations.len());
    let mut sizes = Vec::with_capacity(model.locations.len());
    let mut valid = Vec::with_capacity(model.locations.len());
    let (mut line, mut column, mut function) = (Vec::new(), Vec::new(), Vec::new());
    for loc in &model.locations {
        offsets.push(i32_len(line.len())?);
        sizes.push(i32_len(loc.lines.len())?);
        valid.push(!loc.lines.is_empty());
        for l in &loc.lines {
            line.push(l.line);
            column.push(l.column);
            function.push(l.function);
        }
    }
    let line: ArrayRef = Arc::new(UInt64Array::from(line));
    let column: ArrayRef = Arc::new(UInt64Array::from(column));
    let function: ArrayRef = Arc::new(DictionaryArray::<UInt32Type>::try_new(
        UInt32Array::from(function),
        functions(model)?,
    )?);
    let line_struct: ArrayRef = Arc::new(StructArray::try_new(
        Fields::from(vec![
            field("line", &line, false),
            field("column", &column, false),
            field("function", &function, false),
        ]),
        vec![line, column, function],
        None,
    )?);
    let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
    Ok(Arc::new(ListViewArray::try_new(
        Arc::new(Field::new("item", line_struct.data_type().clone(), true)),
        ScalarBuffer::from(offsets),
        ScalarBuffer::from(sizes),
        line_struct,
        nulls,
    )?))
}

/// The location dictionary's values: `Struct{address, frame_type, mapping_file,
/// mapping_build_id, lines}`.
fn locations(model: &Model) -> Result<ArrayRef, ArrowError> {
    let address: ArrayRef = Arc::new(UInt64Array::from_iter_values(
        model.locations.iter().map(|l| l.address),
    ));
    let frame_type = dict_utf8(model.locations.iter().map(|l| Some(l.frame_type.as_str())))?;
    let mapping_file = dict_utf8(model.locations.iter().map(|l| l.mapping_file.as_deref()))?;
    let build_id = dict_utf8(model.locations.iter().map(|l| l.build_id.as_deref()))?;
    let lines = lines(model)?;
    Ok(Arc::new(StructArray::try_new(
        Fields::from(vec![
            field("address", &address, false),
            field("frame_type", &frame_type, true),
            field("mapping_file", &mapping_file, true),
            field("mapping_build_id", &build_id, true),
            field("lines", &lines, true),
        ]),
        vec![address, frame_type, mapping_file, build_id, lines],
        None,
    )?))
}

/// `stacktrace`: ListView<Dict<UInt32, Location>>; every row of one stack shares one
/// (offset, size) view of the keys.
fn stacktrace(model: &Model) -> Result<ArrayRef, ArrowError> {
    let mut keys: Vec<u32> = Vec::new();
    let mut views: Vec<(i32, i32)> = Vec::with_capacity(model.stacks.len());
    for stack in &model.stacks {
        views.push((i32_len(keys.len())?, i32_len(stack.locations.len())?));
        keys.extend(&stack.locations);
    }
    let dictionary: ArrayRef = Arc::new(DictionaryArray::<UInt32Type>::try_new(
        UInt32Array::from(keys),
        locations(model)?,
    )?);
    let (offsets, sizes): (Vec<i32>, Vec<i32>) =
        model.rows.iter().map(|r| views[r.stack as usize]).unzip();
    Ok(Arc::new(ListViewArray::try_new(
        Arc::new(Field::new("item", dictionary.data_type().clone(), true)),
        ScalarBuffer::from(offsets),
        ScalarBuffer::from(sizes),
        dictionary,
        None,
    )?))
}

/// The v2 record of `model`.
pub fn record(model: &Model) -> Result<RecordBatch, ArrowError> {
    u32_len(model.rows.len())?;
    i32_len(model.rows.len())?;
    let rows = &model.rows;
    let series = |f: fn(&crate::model::Series) -> &str| {
        ree_of(rows.iter().map(|r| r.series), |ids| {
            Ok(Arc::new(StringArray::from_iter_values(
                ids.iter().map(|&i| f(&model.series[i as usize])),
            )) as ArrayRef)
        })
    };
    let labels = labels(model)?;
    let stacktrace = stacktrace(model)?;
    let stacktrace_id: ArrayRef = Arc::new(
        FixedSizeBinaryArray::try_from_iter(rows.iter().map(|r| model.stacks[r.stack as usize].id))
            .or_else(|e| {
                if rows.is_empty() {
                    Ok(FixedSizeBinaryArray::new(16, Default::default(), None))
                } else {
                    Err(e)
                }
            })?,
    );
    let value: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.value)));
    let producer = series(|s| &s.producer)?;
    let sample_type = series(|s| &s.sample_type)?;
    let sample_unit = series(|s| &s.sample_unit)?;
    let period_type = series(|s| &s.period_type)?;
    let period_unit = series(|s| &s.period_unit)?;
    let temporality = ree_of(rows.iter().map(|r| r.series), |ids| {
        Ok(Arc::new(StringArray::from(
            ids.iter()
                .map(|&i| model.series[i as usize].temporality)
                .collect::<Vec<_>>(),
        )) as ArrayRef)
    })?;
    let period = ree_of(rows.iter().map(|r| r.series), |ids| {
        Ok(Arc::new(Int64Array::from_iter_values(
            ids.iter().map(|&i| model.series[i as usize].period),
        )) as ArrayRef)
    })?;
    let duration = ree_of(rows.iter().map(|r| r.series), |ids| {
        Ok(Arc::new(UInt64Array::from_iter_values(
            ids.iter().map(|&i| model.series[i as usize].duration),
        )) as ArrayRef)
    })?;
    let timestamp: ArrayRef = Arc::new(
        TimestampNanosecondArray::from_iter_values(rows.iter().map(|r| r.timestamp))
            .with_timezone("UTC"),
    );
    let uuid_metadata = HashMap::from([(EXTENSION_NAME_KEY.to_owned(), UUID_EXTENSION.to_owned())]);
    let columns = vec![
        labels,
        stacktrace,
        stacktrace_id,
        value,
        producer,
        sample_type,
        sample_unit,
        period_type,
        period_unit,
        temporality,
        period,
        duration,
        timestamp,
    ];
    let fields: Vec<Field> = COLUMNS
        .iter()
        .zip(&columns)
        .map(|(name, array)| {
            let nullable = matches!(*name, "stacktrace" | "temporality");
            let f = field(name, array, nullable);
            if *name == "stacktrace_id" {
                f.with_metadata(uuid_metadata.clone())
            } else {
                f
            }
        })
        .collect();
    let schema = Schema::new(fields).with_metadata(HashMap::from([(
        SCHEMA_VERSION_KEY.to_owned(),
        SCHEMA_VERSION_V2.to_owned(),
    )]));
    debug_assert!(matches!(
        schema.field(2).data_type(),
        DataType::FixedSizeBinary(16)
    ));
    RecordBatch::try_new(Arc::new(schema), columns)
}
