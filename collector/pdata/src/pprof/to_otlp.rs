//! pprof protobuf → the model, read in place: each table in its own pass over the
//! top-level fields (so their order on the wire does not matter), samples last, written
//! straight into one [`Samples`] per sample type.

use hashbrown::HashMap as FastMap;
use profcol_proto::otlp::common::v1::any_value::Value;
use profcol_proto::otlp::common::v1::{AnyValue, ArrayValue, InstrumentationScope, KeyValue};

use super::links::{self, LinkPart};
use super::{IdMap, PprofError, malformed};
use crate::attributes::semconv;
use crate::batch::ProfileBatch;
use crate::dictionary::DictionaryBuilder;
use crate::limits::{CopyBudget, MAX_LABELS_PER_SAMPLE, MAX_STACK_DEPTH};
use crate::profile::{Profile, ValueType};
use crate::rows::{Function, Line, Location, Mapping, Sample};
use crate::samples::Samples;
use crate::wire::{self, Reader};

/// What to add around the translated profiles.
#[derive(Debug, Clone, Default)]
pub struct ToOtlpOptions {
    pub resource_attributes: Vec<KeyValue>,
    pub scope: Option<InstrumentationScope>,
    /// The bytes the profile was read from, kept as `original_payload` (format `pprof`) on
    /// the first profile.
    pub original_payload: Option<Vec<u8>>,
}

/// Translates one pprof profile (its protobuf, not gzipped) into a batch of its own.
pub fn pprof_to_batch(pprof: &[u8], options: ToOtlpOptions) -> Result<ProfileBatch, PprofError> {
    pprof_to_batch_with(pprof, options, |_, _| {})
}

/// As [`pprof_to_batch`], letting `edit` change the translated profiles (and add to
/// their dictionary) before the batch is made: a receiver's renames or time window.
pub fn pprof_to_batch_with(
    pprof: &[u8],
    options: ToOtlpOptions,
    edit: impl FnOnce(&mut DictionaryBuilder, &mut [Profile]),
) -> Result<ProfileBatch, PprofError> {
    let mut builder = DictionaryBuilder::new();
    let mut profiles = pprof_into(&mut builder, pprof)?;
    edit(&mut builder, &mut profiles);
    if let (Some(payload), Some(first)) = (options.original_payload, profiles.first_mut()) {
        first.original_payload_format = "pprof".into();
        first.original_payload = payload;
    }
    let dictionary = builder.finish().map_err(|_| PprofError::TooLarge)?;
    Ok(ProfileBatch::of_one_scope(
        dictionary,
        options.resource_attributes,
        options.scope,
        profiles,
    ))
}

/// pprof's top-level fields.
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const MAPPING: u32 = 3;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const DROP_FRAMES: u32 = 7;
    pub const KEEP_FRAMES: u32 = 8;
    pub const TIME_NANOS: u32 = 9;
    pub const DURATION_NANOS: u32 = 10;
    pub const PERIOD_TYPE: u32 = 11;
    pub const PERIOD: u32 = 12;
    pub const COMMENT: u32 = 13;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    pub const DOC_URL: u32 = 15;
}

/// The scalars and small lists of a pprof, read in the first pass.
#[derive(Default)]
struct Header {
    /// pprof string index → dictionary string index.
    strings: Vec<i32>,
    string_bytes: usize,
    sample_types: Vec<(i64, i64)>,
    period_type: Option<(i64, i64)>,
    period: i64,
    time_nanos: i64,
    duration_nanos: i64,
    comments: Vec<i64>,
    drop_frames: i64,
    keep_frames: i64,
    default_sample_type: i64,
    doc_url: i64,
    /// Entries and the largest id of mapping, function and location tables.
    counts: [(usize, u64); 3],
    /// Whether any location is folded (its attribute is made before the locations).
    any_folded: bool,
}

/// Calls `f` with each field of `bytes` that is `wanted`, skipping the rest.
fn each<'a>(
    bytes: &'a [u8],
    wanted: u32,
    mut f: impl FnMut(usize, u8, &mut Reader<'a>) -> Result<(), PprofError>,
) -> Result<(), PprofError> {
    let mut r = Reader::new(bytes);
    let mut n = 0;
    while !r.is_empty() {
        let (field, wire) = r.key().map_err(malformed(|| "Profile".into()))?;
        if field == wanted {
            f(n, wire, &mut r)?;
            n += 1;
        } else {
            r.skip(wire).map_err(malformed(|| "Profile".into()))?;
        }
    }
    Ok(())
}

/// A value type message: (type, unit).
fn value_type(bytes: &[u8], at: impl Fn() -> String + Copy) -> Result<(i64, i64), PprofError> {
    let (mut t, mut u) = (0, 0);
    let mut r = Reader::new(bytes);
    while !r.is_empty() {
        let (field, wire) = r.key().map_err(malformed(at))?;
        match field {
            1 => t = r.int64(wire).map_err(malformed(at))?,
            2 => u = r.int64(wire).map_err(malformed(at))?,
            _ => r.skip(wire).map_err(malformed(at))?,
        }
    }
    Ok((t, u))
}

/// The `id` field (1) of a table entry, and for a location whether it is folded (5).
fn entry_id(
    bytes: &[u8],
    location: bool,
    at: impl Fn() -> String + Copy,
) -> Result<(u64, bool), PprofError> {
    let mut r = Reader::new(bytes);
    let (mut id, mut folded) = (0, false);
    while !r.is_empty() {
        let (field, wire) = r.key().map_err(malformed(at))?;
        match field {
            1 => id = r.uint(wire).map_err(malformed(at))?,
            5 if location => folded = r.uint(wire).map_err(malformed(at))? != 0,
            _ => r.skip(wire).map_err(malformed(at))?,
        }
    }
    Ok((id, folded))
}

fn read_header(builder: &mut DictionaryBuilder, bytes: &[u8]) -> Result<Header, PprofError> {
    let mut h = Header::default();
    let top = || "Profile".to_owned();
    let mut r = Reader::new(bytes);
    while !r.is_empty() {
        let (f, wire) = r.key().map_err(malformed(top))?;
        match f {
            field::STRING_TABLE => {
                let n = h.strings.len();
                let s = r
                    .string_field(wire)
                    .map_err(malformed(|| format!("string_table[{n}]")))?;
                if n == 0 && !s.is_empty() {
                    return Err(PprofError::MissingEmptyString);
                }
                h.string_bytes += s.len();
                h.strings.push(builder.string(s));
            }
            field::SAMPLE_TYPE => {
                let n = h.sample_types.len();
                let at = || format!("sample_type[{n}]");
                let b = r.len_field(wire).map_err(malformed(at))?;
                h.sample_types.push(value_type(b, at)?);
            }
            field::PERIOD_TYPE => {
                let at = || "period_type".to_owned();
                let b = r.len_field(wire).map_err(malformed(at))?;
                h.period_type = Some(value_type(b, at)?);
            }
            field::PERIOD => h.period = r.int64(wire).map_err(malformed(top))?,
            field::TIME_NANOS => h.time_nanos = r.int64(wire).map_err(malformed(top))?,
            field::DURATION_NANOS => h.duration_nanos = r.int64(wire).map_err(malformed(top))?,
            field::DROP_FRAMES => h.drop_frames = r.int64(wire).map_err(malformed(top))?,
            field::KEEP_FRAMES => h.keep_frames = r.int64(wire).map_err(malformed(top))?,
            field::DEFAULT_SAMPLE_TYPE => {
                h.default_sample_type = r.int64(wire).map_err(malformed(top))?;
            }
            field::DOC_URL => h.doc_url = r.int64(wire).map_err(malformed(top))?,
            field::COMMENT => {
                let comments = &mut h.comments;
                r.repeated_varint(wire, |v| comments.push(v as i64))
                    .map_err(malformed(|| "comment".into()))?;
            }
            field::MAPPING | field::FUNCTION | field::LOCATION => {
                let slot = match f {
                    field::MAPPING => 0,
                    field::FUNCTION => 1,
                    _ => 2,
                };
                let n = h.counts[slot].0;
                let name = ["mapping", "function", "location"][slot];
                let at = || format!("{name}[{n}]");
                let b = r.len_field(wire).map_err(malformed(at))?;
                let (id, folded) = entry_id(b, slot == 2, at)?;
                h.any_folded |= folded;
                h.counts[slot].0 += 1;
                h.counts[slot].1 = h.counts[slot].1.max(id);
            }
            _ => r.skip(wire).map_err(malformed(top))?,
        }
    }
    Ok(h)
}

impl Header {
    /// The dictionary index of pprof string `index`, naming the referring field when out
    /// of range (an absent table reads as having only "").
    fn str_at(&self, index: i64, field: impl FnOnce() -> String) -> Result<i32, PprofError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.strings.get(i).copied())
            .or((index == 0).then_some(0))
            .ok_or_else(|| PprofError::StringOutOfRange {
                field: field(),
                index,
                len: self.strings.len(),
            })
    }
}

/// GNU build ids are hex; Go's are slash-separated base64 pieces.
fn build_id_key(id: &str) -> &'static str {
    if id.bytes().all(|b| b.is_ascii_hexdigit()) {
        semconv::BUILD_ID_GNU
    } else {
        semconv::BUILD_ID_GO
    }
}

fn bool_attr(builder: &mut DictionaryBuilder, key: &str) -> i32 {
    builder.attribute(
        key,
        &AnyValue {
            value: Some(Value::BoolValue(true)),
        },
        "",
    )
}

fn charge(
    copies: &mut CopyBudget,
    bytes: usize,
    field: impl FnOnce() -> String,
) -> Result<(), PprofError> {
    copies
        .charge(bytes)
        .map_err(|total| PprofError::CopiesTooLarge {
            field: field(),
            total,
        })
}

/// Translates one pprof profile into OTLP profiles whose tables live in `builder`.
pub fn pprof_into(
    builder: &mut DictionaryBuilder,
    bytes: &[u8],
) -> Result<Vec<Profile>, PprofError> {
    let h = read_header(builder, bytes)?;
    if h.sample_types.is_empty() {
        return Err(PprofError::NoSampleTypes);
    }
    let mut copies = CopyBudget::new(h.string_bytes);
    let mappings = translate_mappings(builder, bytes, &h)?;
    let functions = translate_functions(builder, bytes, &h)?;
    let locations = translate_locations(builder, bytes, &h, &mappings, &functions)?;
    let types = h.sample_types.len();
    let mut columns: Vec<Samples> = (0..types).map(|_| Samples::default()).collect();
    translate_samples(builder, bytes, &h, &locations, &mut copies, &mut columns)?;

    let text = |b: &DictionaryBuilder, i: i64| -> String {
        let index = usize::try_from(i)
            .ok()
            .and_then(|i| h.strings.get(i))
            .copied()
            .unwrap_or(0);
        b.dictionary().string(index).to_owned()
    };
    let mut profile_attributes = Vec::new();
    if !h.comments.is_empty() {
        let mut comments = Vec::with_capacity(h.comments.len());
        for (i, &c) in h.comments.iter().enumerate() {
            h.str_at(c, || format!("comment[{i}]"))?;
            let s = text(builder, c);
            charge(&mut copies, s.len(), || format!("comment[{i}]"))?;
            comments.push(AnyValue {
                value: Some(Value::StringValue(s)),
            });
        }
        profile_attributes.push(builder.attribute(
            semconv::PPROF_COMMENT,
            &AnyValue {
                value: Some(Value::ArrayValue(ArrayValue { values: comments })),
            },
            "",
        ));
    }
    for (index, key, field) in [
        (h.drop_frames, semconv::PPROF_DROP_FRAMES, "drop_frames"),
        (h.keep_frames, semconv::PPROF_KEEP_FRAMES, "keep_frames"),
        (h.doc_url, semconv::PPROF_DOC_URL, "doc_url"),
    ] {
        if index != 0 {
            h.str_at(index, || field.to_owned())?;
            let s = text(builder, index);
            profile_attributes.push(builder.attribute_str(key, &s));
        }
    }
    // pprof names its default sample type (unset: the last one); OTLP shows the first
    // profile by default, so the default goes first. An explicit default also records
    // its column so that the way back restores pprof's order.
    let explicit_default = (h.default_sample_type != 0)
        .then(|| {
            let name = text(builder, h.default_sample_type);
            h.sample_types
                .iter()
                .position(|&(t, _)| text(builder, t) == name)
        })
        .flatten();
    let default = explicit_default.unwrap_or(types - 1);
    if let Some(position) = explicit_default {
        profile_attributes.push(builder.attribute_int(
            semconv::PPROF_DEFAULT_SAMPLE_TYPE_INDEX,
            i64::try_from(position).unwrap_or(0),
        ));
    }
    let period_type = match h.period_type {
        Some((t, u)) => ValueType {
            type_strindex: h.str_at(t, || "period_type.type".into())?,
            unit_strindex: h.str_at(u, || "period_type.unit".into())?,
        },
        None => ValueType::default(),
    };
    let mut sample_types = Vec::with_capacity(types);
    for (i, &(t, u)) in h.sample_types.iter().enumerate() {
        sample_types.push(ValueType {
            type_strindex: h.str_at(t, || format!("sample_type[{i}].type"))?,
            unit_strindex: h.str_at(u, || format!("sample_type[{i}].unit"))?,
        });
    }
    let mut columns: Vec<Option<Samples>> = columns.into_iter().map(Some).collect();
    let order = std::iter::once(default).chain((0..types).filter(|&i| i != default));
    Ok(order
        .map(|i| {
            let mut samples = columns[i].take().unwrap_or_default();
            samples.shrink();
            Profile {
                sample_type: sample_types[i],
                samples,
                time_unix_nano: u64::try_from(h.time_nanos).unwrap_or(0),
                duration_nano: u64::try_from(h.duration_nanos).unwrap_or(0),
                period_type,
                period: h.period,
                attribute_indices: profile_attributes.clone(),
                ..Default::default()
            }
        })
        .collect())
}

fn translate_mappings(
    builder: &mut DictionaryBuilder,
    bytes: &[u8],
    h: &Header,
) -> Result<IdMap, PprofError> {
    let (count, max) = h.counts[0];
    let mut ids = IdMap::with_capacity(count, max);
    let mut build_ids: FastMap<i64, i32> = FastMap::new();
    let mut attributes = Vec::new();
    each(bytes, field::MAPPING, |n, wire, r| {
        let at = || format!("mapping[{n}]");
        let entry = r.len_field(wire).map_err(malformed(at))?;
        let mut m = [0u64; 6];
        let mut flags = [false; 4];
        let mut er = Reader::new(entry);
        while !er.is_empty() {
            let (f, w) = er.key().map_err(malformed(at))?;
            match f {
                1..=6 => m[f as usize - 1] = er.uint(w).map_err(malformed(at))?,
                7..=10 => flags[f as usize - 7] = er.uint(w).map_err(malformed(at))? != 0,
                _ => er.skip(w).map_err(malformed(at))?,
            }
        }
        let [id, start, limit, offset, filename, build_id] = m;
        if limit != 0 && start > limit {
            return Err(PprofError::BadMappingRange { id, start, limit });
        }
        attributes.clear();
        if build_id != 0 {
            let b = build_id as i64;
            h.str_at(b, || format!("mapping[{n}].build_id"))?;
            // Mappings often share a build id; translate each string once.
            let attribute = match build_ids.get(&b) {
                Some(&a) => a,
                None => {
                    let text = builder
                        .dictionary()
                        .string(h.str_at(b, String::new)?)
                        .to_owned();
                    let a = builder.attribute_str(build_id_key(&text), &text);
                    build_ids.insert(b, a);
                    a
                }
            };
            attributes.push(attribute);
        }
        for (set, key) in flags.iter().zip([
            semconv::PPROF_HAS_FUNCTIONS,
            semconv::PPROF_HAS_FILENAMES,
            semconv::PPROF_HAS_LINE_NUMBERS,
            semconv::PPROF_HAS_INLINE_FRAMES,
        ]) {
            if *set {
                attributes.push(bool_attr(builder, key));
            }
        }
        let index = builder.mapping(&Mapping {
            memory_start: start,
            memory_limit: limit,
            file_offset: offset,
            filename_strindex: h.str_at(filename as i64, || format!("mapping[{n}].filename"))?,
            attribute_indices: &attributes,
        });
        ids.insert("mapping", n, id, index)
    })?;
    Ok(ids)
}

fn translate_functions(
    builder: &mut DictionaryBuilder,
    bytes: &[u8],
    h: &Header,
) -> Result<IdMap, PprofError> {
    let (count, max) = h.counts[1];
    let mut ids = IdMap::with_capacity(count, max);
    each(bytes, field::FUNCTION, |n, wire, r| {
        let at = || format!("function[{n}]");
        let entry = r.len_field(wire).map_err(malformed(at))?;
        let mut v = [0i64; 5];
        let mut er = Reader::new(entry);
        while !er.is_empty() {
            let (f, w) = er.key().map_err(malformed(at))?;
            match f {
                1..=5 => v[f as usize - 1] = er.int64(w).map_err(malformed(at))?,
                _ => er.skip(w).map_err(malformed(at))?,
            }
        }
        let [id, name, system_name, filename, start_line] = v;
        let index = builder.function(Function {
            name_strindex: h.str_at(name, || format!("function[{n}].name"))?,
            system_name_strindex: h.str_at(system_name, || format!("function[{n}].system_name"))?,
            filename_strindex: h.str_at(filename, || format!("function[{n}].filename"))?,
            start_line,
        });
        ids.insert("function", n, id as u64, index)
    })?;
    Ok(ids)
}

fn translate_locations(
    builder: &mut DictionaryBuilder,
    bytes: &[u8],
    h: &Header,
    mappings: &IdMap,
    functions: &IdMap,
) -> Result<IdMap, PprofError> {
    let (count, max) = h.counts[2];
    let mut ids = IdMap::with_capacity(count, max);
    let mut raw_lines: Vec<(u64, i64, i64)> = Vec::new();
    let mut lines: Vec<Line> = Vec::new();
    let folded_attribute = h
        .any_folded
        .then(|| bool_attr(builder, semconv::PPROF_IS_FOLDED));
    each(bytes, field::LOCATION, |n, wire, r| {
        let at = || format!("location[{n}]");
        let entry = r.len_field(wire).map_err(malformed(at))?;
        let (mut id, mut mapping_id, mut address, mut folded) = (0u64, 0u64, 0u64, false);
        raw_lines.clear();
        let mut er = Reader::new(entry);
        while !er.is_empty() {
            let (f, w) = er.key().map_err(malformed(at))?;
            match f {
                1 => id = er.uint(w).map_err(malformed(at))?,
                2 => mapping_id = er.uint(w).map_err(malformed(at))?,
                3 => address = er.uint(w).map_err(malformed(at))?,
                4 => {
                    let lb = er.len_field(w).map_err(malformed(at))?;
                    let mut v = [0u64; 3];
                    let mut lr = Reader::new(lb);
                    while !lr.is_empty() {
                        let (lf, lw) = lr.key().map_err(malformed(at))?;
                        match lf {
                            1..=3 => v[lf as usize - 1] = lr.uint(lw).map_err(malformed(at))?,
                            _ => lr.skip(lw).map_err(malformed(at))?,
                        }
                    }
                    raw_lines.push((v[0], v[1] as i64, v[2] as i64));
                }
                5 => folded = er.uint(w).map_err(malformed(at))? != 0,
                _ => er.skip(w).map_err(malformed(at))?,
            }
        }
        let mapping_index = match mapping_id {
            0 => 0,
            m => mappings.get(m).ok_or_else(|| PprofError::UnknownId {
                table: "mapping",
                id: m,
                by: format!("location {id}"),
            })?,
        };
        lines.clear();
        for &(function_id, line, column) in &raw_lines {
            let function_index = match function_id {
                0 => 0,
                f => functions.get(f).ok_or_else(|| PprofError::UnknownId {
                    table: "function",
                    id: f,
                    by: format!("location {id}"),
                })?,
            };
            lines.push(Line {
                function_index,
                line,
                column,
            });
        }
        let folded_slot: [i32; 1];
        let folded_attrs: &[i32] = match folded_attribute.filter(|_| folded) {
            Some(a) => {
                folded_slot = [a];
                &folded_slot
            }
            None => &[],
        };
        let index = builder.location(&Location {
            mapping_index,
            address,
            lines: &lines,
            attribute_indices: folded_attrs,
        });
        ids.insert("location", n, id, index)
    })?;
    Ok(ids)
}

/// One pprof label as read: (key, str, num, num_unit).
type Label = (i64, i64, i64, i64);

fn read_label(bytes: &[u8], at: impl Fn() -> String + Copy) -> Result<Label, PprofError> {
    let mut v = [0i64; 4];
    let mut r = Reader::new(bytes);
    while !r.is_empty() {
        let (f, w) = r.key().map_err(malformed(at))?;
        match f {
            1..=4 => v[f as usize - 1] = r.int64(w).map_err(malformed(at))?,
            _ => r.skip(w).map_err(malformed(at))?,
        }
    }
    Ok((v[0], v[1], v[2], v[3]))
}

fn translate_samples(
    builder: &mut DictionaryBuilder,
    bytes: &[u8],
    h: &Header,
    locations: &IdMap,
    copies: &mut CopyBudget,
    columns: &mut [Samples],
) -> Result<(), PprofError> {
    let types = h.sample_types.len();
    let mut stack: Vec<i32> = Vec::new();
    let mut values: Vec<i64> = Vec::new();
    let mut labels: Vec<Label> = Vec::new();
    let mut label_key: Vec<u8> = Vec::new();
    // Samples repeat few label sets: each set is translated once, keyed by its bytes, into
    // a run of attribute indices and a link index.
    let mut label_sets: FastMap<Vec<u8>, (u32, u32, i32)> = FastMap::new();
    let mut attribute_runs: Vec<i32> = Vec::new();
    let mut translator = LabelTranslator::default();
    each(bytes, field::SAMPLE, |n, wire, r| {
        let at = || format!("sample[{n}]");
        let body = r.len_field(wire).map_err(malformed(at))?;
        stack.clear();
        values.clear();
        label_key.clear();
        let mut label_count = 0usize;
        let mut unknown = None;
        let mut sr = Reader::new(body);
        while !sr.is_empty() {
            let (f, w) = sr.key().map_err(malformed(at))?;
            match f {
                1 => sr
                    .repeated_varint(w, |id| {
                        if stack.len() <= MAX_STACK_DEPTH {
                            match locations.get(id) {
                                Some(l) => stack.push(l),
                                None => {
                                    unknown.get_or_insert(id);
                                }
                            }
                        } else {
                            stack.push(0);
                        }
                    })
                    .map_err(malformed(at))?,
                2 => sr
                    .repeated_varint(w, |v| {
                        if values.len() <= types {
                            values.push(v as i64);
                        }
                    })
                    .map_err(malformed(at))?,
                3 => {
                    let l = sr.len_field(w).map_err(malformed(at))?;
                    wire::put_bytes_always(&mut label_key, 3, l);
                    label_count += 1;
                }
                _ => sr.skip(w).map_err(malformed(at))?,
            }
        }
        if values.len() != types {
            return Err(PprofError::ValueCount {
                sample: n,
                got: values.len(),
                want: types,
            });
        }
        // Each sample type gets its own copy of the sample's attribute list, so labels
        // times types is what the sample costs.
        for (what, count, max) in [
            ("locations", stack.len(), MAX_STACK_DEPTH),
            ("labels", label_count, MAX_LABELS_PER_SAMPLE),
            (
                "labels across its sample types",
                label_count.saturating_mul(types),
                8 * MAX_LABELS_PER_SAMPLE,
            ),
        ] {
            if count > max {
                return Err(PprofError::TooMany {
                    sample: n,
                    what,
                    count,
                    max,
                });
            }
        }
        if let Some(id) = unknown {
            return Err(PprofError::UnknownId {
                table: "location",
                id,
                by: format!("sample[{n}]"),
            });
        }
        let stack_index = builder.stack(&stack);
        let (start, len, link_index) = if label_count == 0 {
            (0, 0, 0)
        } else if let Some(&run) = label_sets.get(label_key.as_slice()) {
            run
        } else {
            labels.clear();
            let mut lr = Reader::new(&label_key);
            while !lr.is_empty() {
                let (_, w) = lr.key().map_err(malformed(at))?;
                let l = lr.len_field(w).map_err(malformed(at))?;
                labels.push(read_label(l, at)?);
            }
            let start = attribute_runs.len() as u32;
            let link = translator.translate(builder, h, copies, &labels, n, &mut attribute_runs)?;
            let run = (start, attribute_runs.len() as u32 - start, link);
            label_sets.insert(label_key.clone(), run);
            run
        };
        let attributes = &attribute_runs[start as usize..(start + len) as usize];
        for (column, &value) in columns.iter_mut().zip(values.iter()) {
            column.push(&Sample {
                stack_index,
                attribute_indices: attributes,
                link_index,
                values: &[value],
                ..Sample::default()
            });
        }
        Ok(())
    })
}

/// Turns pprof label sets into attribute indices and a link. A single-valued label
/// becomes the same attribute wherever it appears, so it is translated once per (key,
/// value, unit) and its string is never copied again; only keys with several values in
/// one set make a fresh array, and those copies are charged to the budget. A trace id and
/// span id pair becomes the sample's link instead (see [`super::links`]).
#[derive(Default)]
struct LabelTranslator {
    single: FastMap<Label, i32>,
}

impl LabelTranslator {
    fn translate(
        &mut self,
        builder: &mut DictionaryBuilder,
        h: &Header,
        copies: &mut CopyBudget,
        labels: &[Label],
        sample: usize,
        out: &mut Vec<i32>,
    ) -> Result<i32, PprofError> {
        for (i, &(key, s, _, unit)) in labels.iter().enumerate() {
            h.str_at(key, || format!("sample[{sample}].label[{i}].key"))?;
            if s != 0 {
                h.str_at(s, || format!("sample[{sample}].label[{i}].str"))?;
            } else {
                h.str_at(unit, || format!("sample[{sample}].label[{i}].num_unit"))?;
            }
        }
        let text = |b: &DictionaryBuilder, i: i64| -> String {
            let index = usize::try_from(i)
                .ok()
                .and_then(|i| h.strings.get(i))
                .copied()
                .unwrap_or(0);
            b.dictionary().string(index).to_owned()
        };
        // Group by key text, in order of first appearance (OTLP lets a list name a key
        // once). Label sets are small and translated once each.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        let (link, link_labels) = link_of(builder, h, labels).unwrap_or((0, [usize::MAX; 2]));
        for (i, l) in labels.iter().enumerate() {
            if link_labels.contains(&i) {
                continue;
            }
            let k = text(builder, l.0);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, positions)) => positions.push(i),
                None => groups.push((k, vec![i])),
            }
        }
        for (key, positions) in groups {
            if let [only] = positions[..] {
                let (k, s, num, unit) = labels[only];
                let id = if s != 0 {
                    (k, s, 0, 0)
                } else {
                    (k, 0, num, unit)
                };
                let attribute = match self.single.get(&id) {
                    Some(&a) => a,
                    None => {
                        let a = if s != 0 {
                            // Charged even though the dictionary dedupes: many keys with
                            // one long value would otherwise copy it once per key.
                            let value = text(builder, s);
                            charge(copies, value.len(), || {
                                format!("sample[{sample}].label[{only}].str")
                            })?;
                            builder.attribute_str(&key, &value)
                        } else {
                            let unit = text(builder, unit);
                            builder.attribute(
                                &key,
                                &AnyValue {
                                    value: Some(Value::IntValue(num)),
                                },
                                &unit,
                            )
                        };
                        self.single.insert(id, a);
                        a
                    }
                };
                out.push(attribute);
                continue;
            }
            // One key, several values: an array attribute, with the first unit given.
            let mut values = Vec::with_capacity(positions.len());
            let mut unit = 0;
            for &at in &positions {
                let (_, s, num, num_unit) = labels[at];
                let value = if s != 0 {
                    let v = text(builder, s);
                    charge(copies, v.len(), || {
                        format!("sample[{sample}].label[{at}].str")
                    })?;
                    Value::StringValue(v)
                } else {
                    if unit == 0 {
                        unit = num_unit;
                    }
                    Value::IntValue(num)
                };
                values.push(AnyValue { value: Some(value) });
            }
            let unit = text(builder, unit);
            out.push(builder.attribute(
                &key,
                &AnyValue {
                    value: Some(Value::ArrayValue(ArrayValue { values })),
                },
                &unit,
            ));
        }
        Ok(link)
    }
}

/// The link a label set spells, interned, and the positions of the two labels that spell
/// it; None when the set holds no single canonical trace id and span id pair. Reads the
/// strings in place: with span context nearly every label set is new.
fn link_of(
    builder: &mut DictionaryBuilder,
    h: &Header,
    labels: &[Label],
) -> Option<(i32, [usize; 2])> {
    let text = |b: &DictionaryBuilder, i: i64| -> String {
        let index = usize::try_from(i)
            .ok()
            .and_then(|i| h.strings.get(i))
            .copied();
        b.dictionary().string(index.unwrap_or(0)).to_owned()
    };
    let part = |b: &DictionaryBuilder, i: i64| {
        let index = usize::try_from(i)
            .ok()
            .and_then(|i| h.strings.get(i))
            .copied();
        links::link_part(b.dictionary().string(index.unwrap_or(0)))
    };
    let (mut trace, mut span) = (None, None);
    for (i, &(key, _, _, _)) in labels.iter().enumerate() {
        let slot = match part(builder, key) {
            Some(LinkPart::Trace) => &mut trace,
            Some(LinkPart::Span) => &mut span,
            None => continue,
        };
        if slot.replace(i).is_some() {
            // Given twice: not one span context.
            return None;
        }
    }
    let (t, s) = (trace?, span?);
    let (trace_text, span_text) = (labels[t].1, labels[s].1);
    if trace_text == 0 || span_text == 0 {
        return None;
    }
    let link = links::parse_link(&text(builder, trace_text), &text(builder, span_text))?;
    Some((builder.link(link), [t, s]))
}
