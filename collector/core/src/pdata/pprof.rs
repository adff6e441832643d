//! pprof ↔ OTLP translation that keeps the meaning of a profile both ways.
//!
//! pprof → OTLP: one OTLP `Profile` per pprof sample type, the default sample type first;
//! every sample, in order, in each of them; labels become sample attributes (several values
//! for one key become one array attribute); build ids, mapping flags, folded locations,
//! comments, drop/keep frames and doc url become the semantic-convention attributes;
//! inlined lines keep their order (callee first, caller last).
//!
//! OTLP → pprof: one pprof per resource, scope and group of profiles that share period,
//! time window and profile attributes (as one pprof's sample types do). Samples of a
//! group are joined by position when they line up (as they do for pprof-born data) and by
//! identity otherwise; resource attributes become labels. Table ids are the OTLP indices,
//! so a pprof whose ids were 1..n gets the same ids back.

use std::collections::HashMap;

use base64::Engine as _;
use hashbrown::HashMap as FastMap;
use profcol_proto::pprof as pp;

use super::attributes::{any_value_to_string, attribute_value, semconv};
use super::batch::ProfileBatch;
use super::builder::DictionaryBuilder;
use super::limits::{CopyBudget, MAX_LABELS_PER_SAMPLE, MAX_STACK_DEPTH};
use super::types::{
    AnyValue, ArrayValue, Function, InstrumentationScope, KeyValue, Line, Location, Mapping,
    Profile, ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Value, ValueType,
};

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
}

/// Where pprof ids point after translation. Ids are usually 1..n, so a vector serves;
/// sparse ids (addresses, say) fall back to a map.
enum IdMap {
    Dense(Vec<i32>),
    Sparse(HashMap<u64, i32>),
}

impl IdMap {
    fn build(
        table: &'static str,
        entries: impl ExactSizeIterator<Item = (u64, i32)> + Clone,
    ) -> Result<Self, PprofError> {
        let len = entries.len();
        let max = entries.clone().map(|(id, _)| id).max().unwrap_or(0);
        let dense_ok =
            usize::try_from(max).is_ok_and(|m| m <= len.saturating_mul(4).saturating_add(64));
        let mut map = if dense_ok {
            IdMap::Dense(vec![-1; usize::try_from(max).unwrap_or(0) + 1])
        } else {
            IdMap::Sparse(HashMap::with_capacity(len))
        };
        for (position, (id, index)) in entries.enumerate() {
            if id == 0 {
                return Err(PprofError::ZeroId { table, position });
            }
            let fresh = match &mut map {
                IdMap::Dense(v) => {
                    let slot = &mut v[id as usize];
                    let fresh = *slot == -1;
                    *slot = index;
                    fresh
                }
                IdMap::Sparse(m) => m.insert(id, index).is_none(),
            };
            if !fresh {
                return Err(PprofError::DuplicateId { table, id });
            }
        }
        Ok(map)
    }

    fn get(&self, id: u64) -> Option<i32> {
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

/// What to add around the translated profiles.
#[derive(Debug, Clone, Default)]
pub struct ToOtlpOptions {
    pub resource_attributes: Vec<KeyValue>,
    pub scope: Option<InstrumentationScope>,
    /// The bytes the profile was read from, kept as `original_payload` (format `pprof`) on
    /// the first profile.
    pub original_payload: Option<Vec<u8>>,
}

/// Translates one pprof profile into a batch of its own.
pub fn pprof_to_batch(
    profile: &pp::Profile,
    options: ToOtlpOptions,
) -> Result<ProfileBatch, PprofError> {
    let mut builder = DictionaryBuilder::new();
    let mut profiles = pprof_into(&mut builder, profile)?;
    if let (Some(payload), Some(first)) = (options.original_payload, profiles.first_mut()) {
        first.original_payload_format = "pprof".into();
        first.original_payload = payload;
    }
    let resource = (!options.resource_attributes.is_empty()).then(|| super::types::Resource {
        attributes: options.resource_attributes,
        ..Default::default()
    });
    Ok(ProfileBatch::from_valid(
        builder.finish(),
        vec![ResourceProfiles {
            resource,
            scope_profiles: vec![ScopeProfiles {
                scope: options.scope,
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    ))
}

/// Translates one pprof profile into OTLP profiles whose tables live in `builder`.
pub fn pprof_into(
    builder: &mut DictionaryBuilder,
    p: &pp::Profile,
) -> Result<Vec<Profile>, PprofError> {
    if p.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(PprofError::MissingEmptyString);
    }
    if p.sample_type.is_empty() {
        return Err(PprofError::NoSampleTypes);
    }
    let strings: Vec<i32> = p.string_table.iter().map(|s| builder.string(s)).collect();
    let str_at = |index: i64, field: &dyn Fn() -> String| -> Result<i32, PprofError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| strings.get(i).copied())
            .or((index == 0).then_some(0))
            .ok_or_else(|| PprofError::StringOutOfRange {
                field: field(),
                index,
                len: p.string_table.len(),
            })
    };
    let text = |index: i64| -> &str {
        usize::try_from(index)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .map_or("", String::as_str)
    };

    let mut copies = CopyBudget::for_strings(&p.string_table);
    let mut build_ids: FastMap<i64, i32> = FastMap::new();
    let mut mapping_index = Vec::with_capacity(p.mapping.len());
    for (i, m) in p.mapping.iter().enumerate() {
        if m.memory_limit != 0 && m.memory_start > m.memory_limit {
            return Err(PprofError::BadMappingRange {
                id: m.id,
                start: m.memory_start,
                limit: m.memory_limit,
            });
        }
        let mut attributes = Vec::new();
        if m.build_id != 0 {
            str_at(m.build_id, &|| format!("mapping[{i}].build_id"))?;
            // Mappings often share a build id; translate each string once.
            let attribute = match build_ids.get(&m.build_id) {
                Some(&a) => a,
                None => {
                    let id = text(m.build_id);
                    let a = builder.attribute_kv(
                        build_id_key(id),
                        Value::StringValue(id.to_owned()),
                        "",
                    );
                    build_ids.insert(m.build_id, a);
                    a
                }
            };
            attributes.push(attribute);
        }
        for (set, key) in [
            (m.has_functions, semconv::PPROF_HAS_FUNCTIONS),
            (m.has_filenames, semconv::PPROF_HAS_FILENAMES),
            (m.has_line_numbers, semconv::PPROF_HAS_LINE_NUMBERS),
            (m.has_inline_frames, semconv::PPROF_HAS_INLINE_FRAMES),
        ] {
            if set {
                attributes.push(builder.attribute_kv(key, Value::BoolValue(true), ""));
            }
        }
        let mapping = Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: str_at(m.filename, &|| format!("mapping[{i}].filename"))?,
            attribute_indices: attributes,
        };
        mapping_index.push((m.id, builder.mapping(mapping)));
    }
    let mappings = IdMap::build("mapping", mapping_index.iter().copied())?;

    let mut function_index = Vec::with_capacity(p.function.len());
    for (i, f) in p.function.iter().enumerate() {
        let function = Function {
            name_strindex: str_at(f.name, &|| format!("function[{i}].name"))?,
            system_name_strindex: str_at(f.system_name, &|| format!("function[{i}].system_name"))?,
            filename_strindex: str_at(f.filename, &|| format!("function[{i}].filename"))?,
            start_line: f.start_line,
        };
        function_index.push((f.id, builder.function(function)));
    }
    let functions = IdMap::build("function", function_index.iter().copied())?;

    let folded = p
        .location
        .iter()
        .any(|l| l.is_folded)
        .then(|| builder.attribute_kv(semconv::PPROF_IS_FOLDED, Value::BoolValue(true), ""));
    let mut location_index = Vec::with_capacity(p.location.len());
    for l in &p.location {
        let mapping_index = match l.mapping_id {
            0 => 0,
            id => mappings.get(id).ok_or_else(|| PprofError::UnknownId {
                table: "mapping",
                id,
                by: format!("location {}", l.id),
            })?,
        };
        let lines = l
            .line
            .iter()
            .map(|line| {
                let function_index = match line.function_id {
                    0 => Ok(0),
                    id => functions.get(id).ok_or_else(|| PprofError::UnknownId {
                        table: "function",
                        id,
                        by: format!("location {}", l.id),
                    }),
                }?;
                Ok(Line {
                    function_index,
                    line: line.line,
                    column: line.column,
                })
            })
            .collect::<Result<Vec<_>, PprofError>>()?;
        let location = Location {
            mapping_index,
            address: l.address,
            lines,
            attribute_indices: folded.filter(|_| l.is_folded).into_iter().collect(),
        };
        location_index.push((l.id, builder.location(location)));
    }
    let locations = IdMap::build("location", location_index.iter().copied())?;

    let types = p.sample_type.len();
    // Every sample's shape is checked before anything is sized by the sample count.
    for (n, s) in p.sample.iter().enumerate() {
        if s.value.len() != types {
            return Err(PprofError::ValueCount {
                sample: n,
                got: s.value.len(),
                want: types,
            });
        }
        // Each sample type gets its own copy of the sample's attribute list, so labels
        // times types is what the sample costs.
        for (what, count, max) in [
            ("locations", s.location_id.len(), MAX_STACK_DEPTH),
            ("labels", s.label.len(), MAX_LABELS_PER_SAMPLE),
            (
                "labels across its sample types",
                s.label.len().saturating_mul(types),
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
    }
    let mut columns: Vec<Vec<Sample>> = (0..types)
        .map(|_| Vec::with_capacity(p.sample.len()))
        .collect();
    let mut stack = Vec::new();
    // Samples repeat few label sets; translate each set once. Keyed by the labels
    // themselves, so a lookup allocates nothing.
    let mut label_sets: FastMap<Vec<pp::Label>, Vec<i32>> = FastMap::new();
    let mut labels = LabelTranslator::default();
    for (n, s) in p.sample.iter().enumerate() {
        stack.clear();
        for &id in &s.location_id {
            stack.push(locations.get(id).ok_or_else(|| PprofError::UnknownId {
                table: "location",
                id,
                by: format!("sample[{n}]"),
            })?);
        }
        let stack_index = builder.stack(&stack);
        let attributes = if s.label.is_empty() {
            Vec::new()
        } else {
            match label_sets.get(s.label.as_slice()) {
                Some(a) => a.clone(),
                None => {
                    let a = labels.translate(builder, &mut copies, &s.label, &str_at, text, n)?;
                    label_sets.insert(s.label.clone(), a.clone());
                    a
                }
            }
        };
        for (column, &value) in columns.iter_mut().zip(&s.value) {
            column.push(Sample {
                stack_index,
                attribute_indices: attributes.clone(),
                link_index: 0,
                values: vec![value],
                timestamps_unix_nano: Vec::new(),
            });
        }
    }

    let mut profile_attributes = Vec::new();
    if !p.comment.is_empty() {
        let mut comments = Vec::with_capacity(p.comment.len());
        for (i, &c) in p.comment.iter().enumerate() {
            str_at(c, &|| format!("comment[{i}]"))?;
            charge(&mut copies, text(c).len(), || format!("comment[{i}]"))?;
            comments.push(AnyValue {
                value: Some(Value::StringValue(text(c).to_owned())),
            });
        }
        profile_attributes.push(builder.attribute_kv(
            semconv::PPROF_COMMENT,
            Value::ArrayValue(ArrayValue { values: comments }),
            "",
        ));
    }
    for (index, key, field) in [
        (p.drop_frames, semconv::PPROF_DROP_FRAMES, "drop_frames"),
        (p.keep_frames, semconv::PPROF_KEEP_FRAMES, "keep_frames"),
        (p.doc_url, semconv::PPROF_DOC_URL, "doc_url"),
    ] {
        if index != 0 {
            str_at(index, &|| field.to_owned())?;
            profile_attributes.push(builder.attribute_kv(
                key,
                Value::StringValue(text(index).to_owned()),
                "",
            ));
        }
    }
    // pprof names its default sample type (unset: the last one); OTLP shows the first
    // profile by default, so the default goes first. An explicit default also records
    // its column so that the way back restores pprof's order.
    let explicit_default = (p.default_sample_type != 0)
        .then(|| {
            let name = text(p.default_sample_type);
            p.sample_type.iter().position(|st| text(st.r#type) == name)
        })
        .flatten();
    let default = explicit_default.unwrap_or(types - 1);
    if let Some(position) = explicit_default {
        profile_attributes.push(builder.attribute_kv(
            semconv::PPROF_DEFAULT_SAMPLE_TYPE_INDEX,
            Value::IntValue(i64::try_from(position).unwrap_or(0)),
            "",
        ));
    }
    let period_type = match &p.period_type {
        Some(vt) => ValueType {
            type_strindex: str_at(vt.r#type, &|| "period_type.type".into())?,
            unit_strindex: str_at(vt.unit, &|| "period_type.unit".into())?,
        },
        None => ValueType::default(),
    };
    let mut sample_types = Vec::with_capacity(types);
    for (i, st) in p.sample_type.iter().enumerate() {
        sample_types.push(ValueType {
            type_strindex: str_at(st.r#type, &|| format!("sample_type[{i}].type"))?,
            unit_strindex: str_at(st.unit, &|| format!("sample_type[{i}].unit"))?,
        });
    }
    let mut columns: Vec<Option<Vec<Sample>>> = columns.into_iter().map(Some).collect();
    let order = std::iter::once(default).chain((0..types).filter(|&i| i != default));
    Ok(order
        .map(|i| Profile {
            sample_type: Some(sample_types[i]),
            samples: columns[i].take().unwrap_or_default(),
            time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
            duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
            period_type: Some(period_type),
            period: p.period,
            attribute_indices: profile_attributes.clone(),
            ..Default::default()
        })
        .collect())
}

/// GNU build ids are hex; Go's are slash-separated base64 pieces.
fn build_id_key(id: &str) -> &'static str {
    if id.bytes().all(|b| b.is_ascii_hexdigit()) {
        semconv::BUILD_ID_GNU
    } else {
        semconv::BUILD_ID_GO
    }
}

/// Checks a pprof string index, naming the referring field (built only on error).
type StrAt<'f> = dyn Fn(i64, &dyn Fn() -> String) -> Result<i32, PprofError> + 'f;

/// Charges a string copy to the input's copy budget.
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

/// Turns pprof label sets into attribute indices. A single-valued label becomes the same
/// attribute wherever it appears, so it is translated once per (key, value, unit) and
/// its string is never copied again; only keys with several values in one set make a
/// fresh array, and those copies are charged to the budget.
#[derive(Default)]
struct LabelTranslator {
    single: FastMap<(i64, i64, i64, i64), i32>,
}

/// Labels grouped by key in order of first appearance: (key, label positions).
type KeyGroups = Vec<(i64, Vec<usize>)>;

impl LabelTranslator {
    fn translate<'p>(
        &mut self,
        builder: &mut DictionaryBuilder,
        copies: &mut CopyBudget,
        labels: &[pp::Label],
        str_at: &StrAt<'_>,
        text: impl Fn(i64) -> &'p str + Copy,
        sample: usize,
    ) -> Result<Vec<i32>, PprofError> {
        for (i, l) in labels.iter().enumerate() {
            str_at(l.key, &|| format!("sample[{sample}].label[{i}].key"))?;
            if l.str != 0 {
                str_at(l.str, &|| format!("sample[{sample}].label[{i}].str"))?;
            } else {
                str_at(l.num_unit, &|| {
                    format!("sample[{sample}].label[{i}].num_unit")
                })?;
            }
        }
        let groups = group_by_key(labels, text);
        let mut out = Vec::with_capacity(groups.len());
        for (key, positions) in groups {
            if let [only] = positions[..] {
                let l = &labels[only];
                let (num, unit) = if l.str != 0 {
                    (0, 0)
                } else {
                    (l.num, l.num_unit)
                };
                let id = (key, l.str, num, unit);
                let attribute = match self.single.get(&id) {
                    Some(&a) => a,
                    None => {
                        let value = if l.str != 0 {
                            // Charged even though the dictionary dedupes: many keys with
                            // one long value would otherwise copy it once per key.
                            charge(copies, text(l.str).len(), || {
                                format!("sample[{sample}].label[{only}].str")
                            })?;
                            Value::StringValue(text(l.str).to_owned())
                        } else {
                            Value::IntValue(l.num)
                        };
                        let a = builder.attribute_kv(text(key), value, text(unit));
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
                let l = &labels[at];
                let value = if l.str != 0 {
                    charge(copies, text(l.str).len(), || {
                        format!("sample[{sample}].label[{at}].str")
                    })?;
                    Value::StringValue(text(l.str).to_owned())
                } else {
                    if unit == 0 {
                        unit = l.num_unit;
                    }
                    Value::IntValue(l.num)
                };
                values.push(AnyValue { value: Some(value) });
            }
            out.push(builder.attribute_kv(
                text(key),
                Value::ArrayValue(ArrayValue { values }),
                text(unit),
            ));
        }
        Ok(out)
    }
}

/// Groups label positions by key text, in order of first appearance (OTLP lets a list
/// name a key once). Short sets are scanned, long ones hashed.
fn group_by_key<'p>(labels: &[pp::Label], text: impl Fn(i64) -> &'p str) -> KeyGroups {
    let mut groups: KeyGroups = Vec::new();
    if labels.len() <= 16 {
        for (i, l) in labels.iter().enumerate() {
            match groups.iter_mut().find(|(k, _)| text(*k) == text(l.key)) {
                Some((_, positions)) => positions.push(i),
                None => groups.push((l.key, vec![i])),
            }
        }
        return groups;
    }
    let mut by_text: FastMap<&'p str, usize> = FastMap::with_capacity(labels.len());
    for (i, l) in labels.iter().enumerate() {
        match by_text.get(text(l.key)) {
            Some(&g) => groups[g].1.push(i),
            None => {
                by_text.insert(text(l.key), groups.len());
                groups.push((l.key, vec![i]));
            }
        }
    }
    groups
}

/// One pprof made from OTLP, with where it came from.
#[derive(Debug, Clone)]
pub struct PprofOutput {
    pub resource_index: usize,
    pub scope_index: usize,
    pub profile: pp::Profile,
}

#[derive(Debug, Clone)]
pub struct ToPprofOptions {
    /// Adds each resource attribute as a label on every sample that lacks that key.
    pub resource_attributes_as_labels: bool,
    /// Writes the locations and mappings no sample uses when the batch makes one pprof
    /// (`profcol convert`, whose input is one profile). Off in the exporters: a batch
    /// merged from several sources would hand each pprof the others' unused entries.
    pub keep_unused_entries: bool,
}

impl Default for ToPprofOptions {
    fn default() -> Self {
        ToPprofOptions {
            resource_attributes_as_labels: true,
            keep_unused_entries: false,
        }
    }
}

/// Translates a batch into pprof profiles: one per resource, scope and group of profiles
/// that share period, time window and profile attributes.
///
/// pprof repeats each sample's whole stack and labels where OTLP shares them, so the
/// pprof of a small batch can be very large; a batch whose pprof would take more than
/// [`pprof_output_limit`] is refused before anything is built.
pub fn batch_to_pprof(
    batch: &ProfileBatch,
    options: &ToPprofOptions,
) -> Result<Vec<PprofOutput>, PprofError> {
    let d = batch.dictionary();
    let resource_labels_of = |rp: &'_ ResourceProfiles| -> usize {
        match (&rp.resource, options.resource_attributes_as_labels) {
            (Some(res), true) => res.attributes.len(),
            _ => 0,
        }
    };
    let estimate = batch
        .resource_profiles()
        .iter()
        .flat_map(|rp| {
            let extra = resource_labels_of(rp);
            rp.scope_profiles
                .iter()
                .flat_map(|sp| &sp.profiles)
                .flat_map(|p| &p.samples)
                .map(move |s| pprof_sample_bytes(d, s, extra))
        })
        .fold(0usize, usize::saturating_add);
    let limit = pprof_output_limit(batch.encoded_len());
    if estimate > limit {
        return Err(PprofError::OutputTooLarge { estimate, limit });
    }
    let mut groups = Vec::new();
    for (r, rp) in batch.resource_profiles().iter().enumerate() {
        let resource_labels: &[KeyValue] =
            match (&rp.resource, options.resource_attributes_as_labels) {
                (Some(res), true) => &res.attributes,
                _ => &[],
            };
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            for group in group_profiles(d, &sp.profiles) {
                groups.push((r, s, resource_labels, group));
            }
        }
    }
    // Locations no stack refers to and mappings no location refers to (a pprof's vdso
    // or vsyscall, say) belong to the profile as a whole: they can be given back only
    // when the batch makes one pprof.
    let orphans = if options.keep_unused_entries && groups.len() == 1 {
        Orphans::of(d)
    } else {
        Orphans::default()
    };
    Ok(groups
        .into_iter()
        .map(|(r, s, resource_labels, group)| {
            let mut writer = PprofWriter::new(d);
            writer.orphans = &orphans;
            PprofOutput {
                resource_index: r,
                scope_index: s,
                profile: writer.write(&group, resource_labels),
            }
        })
        .collect())
}

/// Table entries (past the zero value) that nothing refers to.
#[derive(Default)]
struct Orphans {
    locations: Vec<i32>,
    mappings: Vec<i32>,
}

impl Orphans {
    fn of(d: &ProfilesDictionary) -> Self {
        let unreferenced = |len: usize, referenced: &mut dyn Iterator<Item = i32>| {
            let mut seen = vec![false; len];
            for i in referenced {
                if let Some(s) = seen.get_mut(i as usize) {
                    *s = true;
                }
            }
            (1..len)
                .filter(|&i| !seen[i])
                .filter_map(|i| i32::try_from(i).ok())
                .collect::<Vec<_>>()
        };
        Orphans {
            locations: unreferenced(
                d.location_table.len(),
                &mut d
                    .stack_table
                    .iter()
                    .flat_map(|s| s.location_indices.iter().copied()),
            ),
            mappings: unreferenced(
                d.mapping_table.len(),
                &mut d.location_table.iter().map(|l| l.mapping_index),
            ),
        }
    }
}

/// The most memory the pprof of a batch may take: 64 times the batch's own encoding, and
/// never less than 256 MiB, which real batches stay far below.
pub fn pprof_output_limit(batch_bytes: usize) -> usize {
    batch_bytes.saturating_mul(64).max(256 << 20)
}

/// What one sample costs as a pprof sample in memory: the message, its location ids,
/// a value, and a label per attribute value and per resource attribute.
fn pprof_sample_bytes(d: &ProfilesDictionary, s: &Sample, resource_labels: usize) -> usize {
    let depth = d
        .stack_table
        .get(s.stack_index as usize)
        .map_or(0, |st| st.location_indices.len());
    let labels = super::validate::label_count(&s.attribute_indices, &d.attribute_table)
        .saturating_add(resource_labels)
        .saturating_add(2 * usize::from(s.link_index != 0));
    let label_size = std::mem::size_of::<pp::Label>();
    std::mem::size_of::<pp::Sample>()
        .saturating_add(depth.saturating_mul(8))
        .saturating_add(8)
        .saturating_add(labels.saturating_mul(label_size))
}

/// Profiles that together make one pprof: same period, window and attributes, distinct
/// sample types.
fn group_profiles<'a>(d: &ProfilesDictionary, profiles: &'a [Profile]) -> Vec<Vec<&'a Profile>> {
    pprof_groups(d, profiles)
        .into_iter()
        .map(|g| g.into_iter().filter_map(|i| profiles.get(i)).collect())
        .collect()
}

/// How [`batch_to_pprof`] groups a scope's profiles into pprofs, as indices into
/// `profiles`: same period, window and attributes, distinct sample types, in order of
/// first appearance. A profile joins the first group of its shape that lacks its sample
/// type; since groups of one shape fill in order, that is the group numbered by how many
/// of them already hold the type, so no group is scanned and the work is linear.
pub fn pprof_groups(d: &ProfilesDictionary, profiles: &[Profile]) -> Vec<Vec<usize>> {
    let text = |i: i32| d.string_table.get(i as usize).map_or("", String::as_str);
    let vt = |v: Option<ValueType>| v.map(|v| (text(v.type_strindex), text(v.unit_strindex)));
    type TypeName<'s> = Option<(&'s str, &'s str)>;
    type Shape<'s> = (TypeName<'s>, i64, u64, u64, &'s [i32]);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_shape: FastMap<Shape<'_>, Vec<usize>> = FastMap::new();
    let mut holding_type: FastMap<(Shape<'_>, TypeName<'_>), usize> = FastMap::new();
    for (i, p) in profiles.iter().enumerate() {
        let shape: Shape<'_> = (
            vt(p.period_type),
            p.period,
            p.time_unix_nano,
            p.duration_nano,
            &p.attribute_indices,
        );
        let held = holding_type.entry((shape, vt(p.sample_type))).or_insert(0);
        let of_shape = by_shape.entry(shape).or_default();
        match of_shape.get(*held) {
            Some(&g) => groups[g].push(i),
            None => {
                of_shape.push(groups.len());
                groups.push(vec![i]);
            }
        }
        *held += 1;
    }
    groups
}

static NO_ORPHANS: Orphans = Orphans {
    locations: Vec::new(),
    mappings: Vec::new(),
};

/// Builds one pprof from a group of OTLP profiles over a shared dictionary.
struct PprofWriter<'a> {
    d: &'a ProfilesDictionary,
    strings: FastMap<String, i64>,
    string_table: Vec<String>,
    /// Locations the samples use, so that only those (and their functions and mappings)
    /// are written; a set, since one batch makes many pprofs over one shared table.
    used_locations: hashbrown::HashSet<i32>,
    /// Locations and mappings to write though no sample uses them (see [`Orphans`]).
    orphans: &'a Orphans,
    /// Labels per attribute index, and the resource's labels with their keys.
    attribute_labels: FastMap<i32, Vec<pp::Label>>,
    resource_labels: Option<Vec<(String, pp::Label)>>,
}

impl<'a> PprofWriter<'a> {
    fn new(d: &'a ProfilesDictionary) -> Self {
        let mut strings = FastMap::new();
        strings.insert(String::new(), 0);
        PprofWriter {
            d,
            strings,
            string_table: vec![String::new()],
            used_locations: hashbrown::HashSet::new(),
            orphans: &NO_ORPHANS,
            attribute_labels: FastMap::new(),
            resource_labels: None,
        }
    }

    fn text(&self, i: i32) -> &'a str {
        self.d
            .string_table
            .get(i as usize)
            .map_or("", String::as_str)
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = i64::try_from(self.string_table.len()).unwrap_or(i64::MAX);
        self.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    /// Index 0 of a table has no pprof id of its own (0 means unset there), so it gets the
    /// first id past the table.
    fn id_of(index: i32, table_len: usize) -> u64 {
        if index == 0 {
            table_len as u64
        } else {
            index as u64
        }
    }

    fn write(mut self, group: &[&Profile], resource_labels: &[KeyValue]) -> pp::Profile {
        let d = self.d;
        let first = group[0];
        let attr = |key| attribute_value(d, &first.attribute_indices, key);
        // Column order: an explicit default goes back to where it stood; otherwise the
        // first (default) profile goes last, as pprof's implicit default.
        let mut columns: Vec<usize> = (1..group.len()).collect();
        let explicit =
            match attr(semconv::PPROF_DEFAULT_SAMPLE_TYPE_INDEX).and_then(|v| v.value.as_ref()) {
                Some(Value::IntValue(i)) => usize::try_from(*i).ok().filter(|&i| i < group.len()),
                _ => None,
            };
        columns.insert(explicit.unwrap_or(group.len() - 1), 0);

        let mut out = pp::Profile::default();
        for &c in &columns {
            let st = group[c].sample_type.unwrap_or_default();
            let vt = pp::ValueType {
                r#type: self.string(self.text(st.type_strindex)),
                unit: self.string(self.text(st.unit_strindex)),
            };
            out.sample_type.push(vt);
        }
        if explicit.is_some() {
            out.default_sample_type = out
                .sample_type
                .get(explicit.unwrap_or(0))
                .map_or(0, |vt| vt.r#type);
        }
        if let Some(pt) = first.period_type.filter(|pt| *pt != ValueType::default()) {
            out.period_type = Some(pp::ValueType {
                r#type: self.string(self.text(pt.type_strindex)),
                unit: self.string(self.text(pt.unit_strindex)),
            });
        }
        out.period = first.period;
        out.time_nanos = i64::try_from(first.time_unix_nano).unwrap_or(i64::MAX);
        out.duration_nanos = i64::try_from(first.duration_nano).unwrap_or(i64::MAX);
        if let Some(Value::ArrayValue(a)) =
            attr(semconv::PPROF_COMMENT).and_then(|v| v.value.as_ref())
        {
            for c in &a.values {
                out.comment.push(self.string(&any_value_to_string(c)));
            }
        }
        for (key, slot) in [
            (semconv::PPROF_DROP_FRAMES, &mut out.drop_frames),
            (semconv::PPROF_KEEP_FRAMES, &mut out.keep_frames),
            (semconv::PPROF_DOC_URL, &mut out.doc_url),
        ] {
            if let Some(v) = attr(key) {
                *slot = self.string(&any_value_to_string(v));
            }
        }

        self.write_samples(group, &columns, resource_labels, &mut out);
        self.write_tables(&mut out);
        out.string_table = std::mem::take(&mut self.string_table);
        out
    }

    fn write_samples(
        &mut self,
        group: &[&Profile],
        columns: &[usize],
        resource_labels: &[KeyValue],
        out: &mut pp::Profile,
    ) {
        let value_of = |s: &Sample| -> i64 {
            if s.values.is_empty() {
                i64::try_from(s.timestamps_unix_nano.len()).unwrap_or(i64::MAX)
            } else {
                s.values.iter().fold(0i64, |a, &v| a.saturating_add(v))
            }
        };
        let same_identity = |a: &Sample, b: &Sample| {
            a.stack_index == b.stack_index
                && a.link_index == b.link_index
                && a.attribute_indices == b.attribute_indices
        };
        let rows = group[0].samples.len();
        let positional = group.iter().all(|p| {
            p.samples.len() == rows
                && p.samples
                    .iter()
                    .zip(&group[0].samples)
                    .all(|(a, b)| same_identity(a, b))
        });
        let mut label_cache: FastMap<(&[i32], i32), Vec<pp::Label>> = FastMap::new();
        let width = columns.len();
        // Where each group profile's values go among pprof's columns.
        let mut column_of = vec![0; width];
        for (col, &g) in columns.iter().enumerate() {
            column_of[g] = col;
        }
        if positional {
            out.sample.reserve(rows);
            for i in 0..rows {
                let head = &group[0].samples[i];
                let mut values = vec![0; width];
                for (g, p) in group.iter().enumerate() {
                    values[column_of[g]] = value_of(&p.samples[i]);
                }
                let sample = self.sample(head, values, resource_labels, &mut label_cache);
                out.sample.push(sample);
            }
        } else {
            let mut rows_by_identity: FastMap<(i32, Vec<i32>, i32), usize> = FastMap::new();
            for (g, p) in group.iter().enumerate() {
                for s in &p.samples {
                    let mut attrs = s.attribute_indices.clone();
                    attrs.sort_unstable();
                    let key = (s.stack_index, attrs, s.link_index);
                    let row = match rows_by_identity.get(&key) {
                        Some(&row) => row,
                        None => {
                            let sample =
                                self.sample(s, vec![0; width], resource_labels, &mut label_cache);
                            out.sample.push(sample);
                            rows_by_identity.insert(key, out.sample.len() - 1);
                            out.sample.len() - 1
                        }
                    };
                    let slot = &mut out.sample[row].value[column_of[g]];
                    *slot = slot.saturating_add(value_of(s));
                }
            }
        }
    }

    fn sample<'s>(
        &mut self,
        s: &'s Sample,
        value: Vec<i64>,
        resource_labels: &[KeyValue],
        cache: &mut FastMap<(&'s [i32], i32), Vec<pp::Label>>,
    ) -> pp::Sample {
        let d = self.d;
        let stack = d
            .stack_table
            .get(s.stack_index as usize)
            .map_or(&[][..], |st| &st.location_indices[..]);
        let location_count = d.location_table.len();
        let location_id = stack
            .iter()
            .map(|&l| {
                self.used_locations.insert(l);
                Self::id_of(l, location_count)
            })
            .collect();
        let label =
            if s.attribute_indices.is_empty() && s.link_index == 0 && resource_labels.is_empty() {
                Vec::new()
            } else if let Some(l) = cache.get(&(&s.attribute_indices[..], s.link_index)) {
                l.clone()
            } else {
                let l = self.labels(s, resource_labels);
                cache.insert((&s.attribute_indices[..], s.link_index), l.clone());
                l
            };
        pp::Sample {
            location_id,
            value,
            label,
        }
    }

    /// The labels of one attribute, made once per writer: many distinct attribute sets
    /// share attributes, and making a label renders and hashes its whole value.
    fn attribute_labels(&mut self, a: i32) -> &[pp::Label] {
        if !self.attribute_labels.contains_key(&a) {
            let d = self.d;
            let mut labels = Vec::new();
            if let Some(kv) = d.attribute_table.get(a as usize) {
                let key = self.text(kv.key_strindex);
                let unit = self.text(kv.unit_strindex);
                match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Value::ArrayValue(arr)) => {
                        for v in &arr.values {
                            labels.push(self.label(key, v, unit));
                        }
                    }
                    Some(_) => {
                        if let Some(v) = kv.value.as_ref() {
                            labels.push(self.label(key, v, unit));
                        }
                    }
                    None => labels.push(self.label(key, &AnyValue::default(), unit)),
                }
            }
            self.attribute_labels.insert(a, labels);
        }
        self.attribute_labels.get(&a).map_or(&[], Vec::as_slice)
    }

    fn labels(&mut self, s: &Sample, resource_labels: &[KeyValue]) -> Vec<pp::Label> {
        let d = self.d;
        let mut labels = Vec::new();
        let mut keys: Vec<&str> = Vec::new();
        for &a in &s.attribute_indices {
            if let Some(kv) = d.attribute_table.get(a as usize) {
                keys.push(self.text(kv.key_strindex));
            }
            labels.extend_from_slice(self.attribute_labels(a));
        }
        if let Some(link) = d
            .link_table
            .get(s.link_index as usize)
            .filter(|_| s.link_index != 0)
        {
            for (key, bytes) in [("trace_id", &link.trace_id), ("span_id", &link.span_id)] {
                let v = AnyValue {
                    value: Some(Value::StringValue(hex::encode(bytes))),
                };
                labels.push(self.label(key, &v, ""));
            }
        }
        if self.resource_labels.is_none() {
            let made: Vec<(String, pp::Label)> = resource_labels
                .iter()
                .filter_map(|kv| {
                    let v = kv.value.as_ref()?;
                    Some((kv.key.clone(), self.label(&kv.key, v, "")))
                })
                .collect();
            self.resource_labels = Some(made);
        }
        let resource = self.resource_labels.as_deref().unwrap_or(&[]);
        // Long lists on both sides are matched by hashing, so that neither count can make
        // this quadratic.
        let hashed: Option<hashbrown::HashSet<&str>> =
            (keys.len() > 16 && resource.len() > 16).then(|| keys.iter().copied().collect());
        for (key, label) in resource {
            let present = match &hashed {
                Some(set) => set.contains(key.as_str()),
                None => keys.contains(&key.as_str()),
            };
            if !present {
                labels.push(*label);
            }
        }
        labels
    }

    fn label(&mut self, key: &str, value: &AnyValue, unit: &str) -> pp::Label {
        let key = self.string(key);
        match &value.value {
            Some(Value::IntValue(n)) => pp::Label {
                key,
                str: 0,
                num: *n,
                num_unit: self.string(unit),
            },
            Some(Value::BytesValue(b)) => {
                let s = base64::engine::general_purpose::STANDARD.encode(b);
                pp::Label {
                    key,
                    str: self.string(&s),
                    num: 0,
                    num_unit: 0,
                }
            }
            _ => pp::Label {
                key,
                str: self.string(&any_value_to_string(value)),
                num: 0,
                num_unit: 0,
            },
        }
    }

    /// Emits the locations the samples used, and the functions and mappings those use, in
    /// table order with the table index as id.
    fn write_tables(&mut self, out: &mut pp::Profile) {
        let d = self.d;
        let mut used_functions = hashbrown::HashSet::new();
        let mut used_mappings: hashbrown::HashSet<i32> =
            self.orphans.mappings.iter().copied().collect();
        let mut used: Vec<i32> = std::mem::take(&mut self.used_locations)
            .into_iter()
            .collect();
        used.extend_from_slice(&self.orphans.locations);
        used.sort_unstable();
        for index in used {
            let Some(l) = d.location_table.get(index as usize) else {
                continue;
            };
            if l.mapping_index != 0 {
                used_mappings.insert(l.mapping_index);
            }
            let line = l
                .lines
                .iter()
                .map(|line| {
                    if line.function_index != 0 {
                        used_functions.insert(line.function_index);
                    }
                    pp::Line {
                        function_id: line.function_index as u64,
                        line: line.line,
                        column: line.column,
                    }
                })
                .collect();
            let is_folded = matches!(
                attribute_value(d, &l.attribute_indices, semconv::PPROF_IS_FOLDED)
                    .and_then(|v| v.value.as_ref()),
                Some(Value::BoolValue(true))
            );
            out.location.push(pp::Location {
                id: Self::id_of(index, d.location_table.len()),
                mapping_id: l.mapping_index as u64,
                address: l.address,
                line,
                is_folded,
            });
        }
        // A location at index 0 was given the id past the table; keep ids ascending.
        out.location.sort_by_key(|l| l.id);
        let mut used_functions: Vec<i32> = used_functions.into_iter().collect();
        used_functions.sort_unstable();
        for index in used_functions {
            let Some(f) = d.function_table.get(index as usize) else {
                continue;
            };
            let function = pp::Function {
                id: index as u64,
                name: self.string(self.text(f.name_strindex)),
                system_name: self.string(self.text(f.system_name_strindex)),
                filename: self.string(self.text(f.filename_strindex)),
                start_line: f.start_line,
            };
            out.function.push(function);
        }
        let mut used_mappings: Vec<i32> = used_mappings.into_iter().collect();
        used_mappings.sort_unstable();
        for index in used_mappings {
            let Some(m) = d.mapping_table.get(index as usize) else {
                continue;
            };
            let flag = |key| {
                matches!(
                    attribute_value(d, &m.attribute_indices, key).and_then(|v| v.value.as_ref()),
                    Some(Value::BoolValue(true))
                )
            };
            let build_id = [
                semconv::BUILD_ID_GNU,
                semconv::BUILD_ID_GO,
                semconv::BUILD_ID_HTLHASH,
            ]
            .into_iter()
            .find_map(|k| attribute_value(d, &m.attribute_indices, k))
            .map(any_value_to_string);
            let mapping = pp::Mapping {
                id: index as u64,
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename: self.string(self.text(m.filename_strindex)),
                build_id: build_id.map_or(0, |b| self.string(&b)),
                has_functions: flag(semconv::PPROF_HAS_FUNCTIONS),
                has_filenames: flag(semconv::PPROF_HAS_FILENAMES),
                has_line_numbers: flag(semconv::PPROF_HAS_LINE_NUMBERS),
                has_inline_frames: flag(semconv::PPROF_HAS_INLINE_FRAMES),
            };
            out.mapping.push(mapping);
        }
    }
}

#[cfg(test)]
#[path = "pprof_tests.rs"]
mod tests;
