//! Array-building helpers both record schemas use: run-end encoding with Int32 run ends,
//! dictionaries with UInt32 keys, and the IPC stream writer.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use arrow_array::types::{Int32Type, UInt32Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, DictionaryArray, Int32Array, RecordBatch, RunArray, StringArray,
    UInt32Array,
};
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::ArrowError;

use crate::config::Compression;

/// The zstd level of IPC body compression: zstd's default, as the `otlp` exporters use.
pub const ZSTD_LEVEL: i32 = 3;

/// Run ends (Int32, 1-based exclusive ends) of `keys` and the value of each run.
pub fn runs<K: PartialEq + Clone>(keys: impl IntoIterator<Item = K>) -> (Vec<i32>, Vec<K>) {
    let mut ends: Vec<i32> = Vec::new();
    let mut values: Vec<K> = Vec::new();
    let mut n: i32 = 0;
    for k in keys {
        n += 1;
        match (values.last(), ends.last_mut()) {
            (Some(last), Some(end)) if *last == k => *end = n,
            _ => {
                values.push(k);
                ends.push(n);
            }
        }
    }
    (ends, values)
}

/// Run-end encodes `values` (one per run) with `ends` as Int32 run ends.
pub fn ree(ends: Vec<i32>, values: &dyn Array) -> Result<ArrayRef, ArrowError> {
    let ends = Int32Array::from(ends);
    Ok(Arc::new(RunArray::<Int32Type>::try_new(&ends, values)?))
}

/// One column per row, run-end encoded: `per_row` gives each row's value, `make` turns
/// the runs' values into the values array.
pub fn ree_of<K: PartialEq + Clone>(
    per_row: impl IntoIterator<Item = K>,
    make: impl FnOnce(Vec<K>) -> Result<ArrayRef, ArrowError>,
) -> Result<ArrayRef, ArrowError> {
    let (ends, values) = runs(per_row);
    let values = make(values)?;
    ree(ends, values.as_ref())
}

/// Dictionary keys (UInt32, null for `None`) and the distinct values in first-seen order.
pub fn dictionary_keys<T: Eq + Hash + Clone>(
    values: impl IntoIterator<Item = Option<T>>,
) -> (UInt32Array, Vec<T>) {
    let mut ids: HashMap<T, u32> = HashMap::new();
    let mut distinct: Vec<T> = Vec::new();
    let keys: UInt32Array = values
        .into_iter()
        .map(|v| {
            v.map(|v| {
                *ids.entry(v.clone()).or_insert_with(|| {
                    distinct.push(v);
                    (distinct.len() - 1) as u32
                })
            })
        })
        .collect();
    (keys, distinct)
}

/// `Dictionary<UInt32, Utf8>` of `values`.
pub fn dict_utf8<'a>(
    values: impl IntoIterator<Item = Option<&'a str>>,
) -> Result<ArrayRef, ArrowError> {
    let (keys, distinct) = dictionary_keys(values);
    let strings: ArrayRef = Arc::new(StringArray::from(distinct));
    Ok(Arc::new(DictionaryArray::<UInt32Type>::try_new(
        keys, strings,
    )?))
}

/// `Dictionary<UInt32, Binary>` of `values`.
pub fn dict_binary<'a>(
    values: impl IntoIterator<Item = Option<&'a [u8]>>,
) -> Result<ArrayRef, ArrowError> {
    let (keys, distinct) = dictionary_keys(values);
    let bytes: ArrayRef = Arc::new(BinaryArray::from(distinct));
    Ok(Arc::new(DictionaryArray::<UInt32Type>::try_new(
        keys, bytes,
    )?))
}

/// The record as an Arrow IPC stream (schema, dictionaries, one record batch, end).
pub fn ipc_stream(batch: &RecordBatch, compression: Compression) -> Result<Vec<u8>, ArrowError> {
    let options = match compression {
        Compression::None => IpcWriteOptions::default(),
        Compression::Lz4 => {
            IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?
        }
        Compression::Zstd => IpcWriteOptions::default()
            .try_with_compression(Some(CompressionType::ZSTD))?
            .try_with_compression_level(Some(ZSTD_LEVEL))?,
    };
    let mut out = Vec::new();
    {
        let mut writer = StreamWriter::try_new_with_options(&mut out, &batch.schema(), options)?;
        writer.write(batch)?;
        writer.finish()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_equal_neighbours_only() {
        assert_eq!(runs([1, 1, 2, 2, 2, 1]), (vec![2, 5, 6], vec![1, 2, 1]));
        assert_eq!(runs(Vec::<u8>::new()), (vec![], vec![]));
        let (keys, distinct) = dictionary_keys([Some("a"), None, Some("b"), Some("a")]);
        assert_eq!(distinct, vec!["a", "b"]);
        assert_eq!(
            keys.iter().collect::<Vec<_>>(),
            vec![Some(0), None, Some(1), Some(0)]
        );
    }
}
