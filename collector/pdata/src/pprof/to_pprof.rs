//! The model → pprof protobuf, written directly: one pprof per resource, scope and group
//! of profiles that share period, time window and profile attributes (as one pprof's
//! sample types do). Samples of a group are joined by position when they line up (as
//! they do for pprof-born data) and by identity otherwise; resource attributes become
//! labels. Table ids are the OTLP indices, so a pprof whose ids were 1..n gets the same
//! ids back. The bytes are what prost writes for the same pprof.

use std::hash::BuildHasher;

use base64::Engine as _;
use hashbrown::{HashMap as FastMap, HashSet};
use profcol_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};

use super::PprofError;
use super::links::{SPAN_ID_LABEL, TRACE_ID_LABEL};
use crate::attributes::{
    any_value_to_string, array_values, attribute_value, semconv, value_to_string,
};
use crate::batch::ProfileBatch;
use crate::decode::label_count;
use crate::dictionary::Dictionary;
use crate::profile::{Profile, ResourceProfiles, ValueType};
use crate::rows::{AnyValueRef, SampleRef};
use crate::wire::{self, put_key, put_varint};

/// One pprof made from OTLP (its protobuf, not gzipped), with where it came from and
/// the facts exporters name it by, so that none has to read the pprof back.
#[derive(Debug, Clone)]
pub struct PprofOutput {
    pub resource_index: usize,
    pub scope_index: usize,
    pub profile: Vec<u8>,
    /// Samples in the pprof.
    pub sample_count: usize,
    /// The default sample type's name: the explicit default, else the last column's.
    pub default_sample_type: String,
    pub time_nanos: u64,
    pub duration_nanos: u64,
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

/// The most a batch's pprof may take: 64 times the batch's own encoding, and never less
/// than 256 MiB, which real batches stay far below.
pub fn pprof_output_limit(batch_bytes: usize) -> usize {
    batch_bytes.saturating_mul(64).max(256 << 20)
}

/// About what one sample takes in the pprof: its location ids, a value per column, and a
/// label per attribute value and per resource attribute.
fn pprof_sample_bytes(
    d: &Dictionary,
    depths: &[u32],
    s: &SampleRef<'_>,
    resource_labels: usize,
    array_attributes: bool,
) -> usize {
    let depth = depths
        .get(usize::try_from(s.stack_index).unwrap_or(0))
        .map_or(0, |&n| n as usize);
    let attribute_labels = if array_attributes {
        label_count(d, s.attribute_indices.iter())
    } else {
        s.attribute_indices.len()
    };
    let labels = attribute_labels
        .saturating_add(resource_labels)
        .saturating_add(2 * usize::from(s.link_index != 0));
    16usize
        .saturating_add(depth.saturating_mul(8))
        .saturating_add(labels.saturating_mul(16))
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
    fn labels_of(rp: &ResourceProfiles, on: bool) -> &[KeyValue] {
        match (&rp.resource, on) {
            (Some(res), true) => &res.attributes,
            _ => &[],
        }
    }
    let resource_labels_of = |rp| labels_of(rp, options.resource_attributes_as_labels);
    // Without array attributes every attribute is one label, counted without reading it.
    let array_attributes = d
        .attributes()
        .any(|a| matches!(a.value, Some(AnyValueRef::Array(_))));
    // Each stack's depth, read once rather than once per sample.
    let depths: Vec<u32> = d
        .stacks()
        .map(|s| u32::try_from(s.location_indices.len()).unwrap_or(u32::MAX))
        .collect();
    let depths = &depths;
    let estimate = batch
        .resource_profiles()
        .iter()
        .flat_map(|rp| {
            let extra = resource_labels_of(rp).len();
            rp.scope_profiles
                .iter()
                .flat_map(|sp| &sp.profiles)
                .flat_map(|p| p.samples.iter())
                .map(move |s| pprof_sample_bytes(d, depths, &s, extra, array_attributes))
        })
        .fold(0usize, usize::saturating_add);
    let limit = pprof_output_limit(batch.encoded_len());
    if estimate > limit {
        return Err(PprofError::OutputTooLarge { estimate, limit });
    }
    let mut groups = Vec::new();
    for (r, rp) in batch.resource_profiles().iter().enumerate() {
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            for group in pprof_groups(d, &sp.profiles) {
                let group: Vec<&Profile> = group
                    .into_iter()
                    .filter_map(|i| sp.profiles.get(i))
                    .collect();
                groups.push((r, s, resource_labels_of(rp), group));
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
            let mut writer = PprofWriter::new(d, &orphans);
            let profile = writer.write(&group, resource_labels);
            PprofOutput {
                resource_index: r,
                scope_index: s,
                profile,
                sample_count: writer.sample_count,
                default_sample_type: std::mem::take(&mut writer.default_sample_type),
                time_nanos: group[0].time_unix_nano,
                duration_nanos: group[0].duration_nano,
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
    fn of(d: &Dictionary) -> Self {
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
                d.location_count(),
                &mut d.stacks().flat_map(|s| s.location_indices.iter()),
            ),
            mappings: unreferenced(
                d.mapping_count(),
                &mut d.locations().map(|l| l.mapping_index),
            ),
        }
    }
}

/// How [`batch_to_pprof`] groups a scope's profiles into pprofs, as indices into
/// `profiles`: same period, window and attributes, distinct sample types, in order of
/// first appearance. A profile joins the first group of its shape that lacks its sample
/// type; since groups of one shape fill in order, that is the group numbered by how many
/// of them already hold the type, so no group is scanned and the work is linear.
pub fn pprof_groups(d: &Dictionary, profiles: &[Profile]) -> Vec<Vec<usize>> {
    let vt = |v: ValueType| (d.string(v.type_strindex), d.string(v.unit_strindex));
    type TypeName<'s> = (&'s str, &'s str);
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

/// Labels per sample identity: by link, then by the packed attribute indices.
type LabelCache = FastMap<i32, FastMap<Vec<u8>, Vec<Label>>>;

/// A pprof label: (key, str, num, num_unit) string indices and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label {
    key: i64,
    str: i64,
    num: i64,
    num_unit: i64,
}

impl Label {
    fn encode(&self, out: &mut Vec<u8>) {
        let body = int_len(1, self.key)
            + int_len(2, self.str)
            + int_len(3, self.num)
            + int_len(4, self.num_unit);
        put_key(out, 3, wire::LEN);
        put_varint(out, body as u64);
        wire::put_int64(out, 1, self.key);
        wire::put_int64(out, 2, self.str);
        wire::put_int64(out, 3, self.num);
        wire::put_int64(out, 4, self.num_unit);
    }
}

fn int_len(field: u32, v: i64) -> usize {
    if v == 0 {
        0
    } else {
        wire::key_len(field) + wire::varint_len(v as u64)
    }
}

/// Builds one pprof from a group of OTLP profiles over a shared dictionary.
struct PprofWriter<'a> {
    d: &'a Dictionary,
    strings: FastMap<&'a str, i64>,
    /// Strings not in the dictionary (rendered values), owned.
    owned: FastMap<String, i64>,
    string_table: Vec<std::borrow::Cow<'a, str>>,
    /// Stacks the samples use, so that only their locations (and those locations'
    /// functions and mappings) are written; a set, since one batch makes many pprofs
    /// over one shared table.
    used_stacks: HashSet<i32>,
    /// The stack of the sample before, which is often the same one.
    last_stack: i32,
    orphans: &'a Orphans,
    /// Labels per attribute index, and the resource's labels with their keys.
    attribute_labels: FastMap<i32, Vec<Label>>,
    resource_labels: Option<Vec<(String, Label)>>,
    /// Facts of the pprof written, for [`PprofOutput`].
    sample_count: usize,
    default_sample_type: String,
}

impl<'a> PprofWriter<'a> {
    fn new(d: &'a Dictionary, orphans: &'a Orphans) -> Self {
        let mut strings = FastMap::new();
        strings.insert("", 0);
        PprofWriter {
            d,
            strings,
            owned: FastMap::new(),
            string_table: vec![std::borrow::Cow::Borrowed("")],
            used_stacks: HashSet::new(),
            last_stack: 0,
            orphans,
            attribute_labels: FastMap::new(),
            resource_labels: None,
            sample_count: 0,
            default_sample_type: String::new(),
        }
    }

    /// A dictionary string's pprof index.
    fn text(&mut self, i: i32) -> i64 {
        let s = self.d.string(i);
        self.string_ref(s)
    }

    fn string_ref(&mut self, s: &'a str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        if let Some(&i) = self.owned.get(s) {
            return i;
        }
        let i = i64::try_from(self.string_table.len()).unwrap_or(i64::MAX);
        self.string_table.push(std::borrow::Cow::Borrowed(s));
        self.strings.insert(s, i);
        i
    }

    fn string_owned(&mut self, s: String) -> i64 {
        if let Some(&i) = self.strings.get(s.as_str()) {
            return i;
        }
        if let Some(&i) = self.owned.get(&s) {
            return i;
        }
        let i = i64::try_from(self.string_table.len()).unwrap_or(i64::MAX);
        self.string_table.push(std::borrow::Cow::Owned(s.clone()));
        self.owned.insert(s, i);
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

    fn write(&mut self, group: &[&Profile], resource_labels: &[KeyValue]) -> Vec<u8> {
        let d = self.d;
        let first = group[0];
        let attr = |key| attribute_value(d, first.attribute_indices.iter().copied(), key);
        // Column order: an explicit default goes back to where it stood; otherwise the
        // first (default) profile goes last, as pprof's implicit default.
        let mut columns: Vec<usize> = (1..group.len()).collect();
        let explicit = match attr(semconv::PPROF_DEFAULT_SAMPLE_TYPE_INDEX) {
            Some(AnyValueRef::Int(i)) => usize::try_from(i).ok().filter(|&i| i < group.len()),
            _ => None,
        };
        columns.insert(explicit.unwrap_or(group.len() - 1), 0);

        let mut sample_types = Vec::with_capacity(columns.len());
        for &c in &columns {
            let st = group[c].sample_type;
            sample_types.push((self.text(st.type_strindex), self.text(st.unit_strindex)));
        }
        let default_sample_type = match explicit {
            Some(e) => sample_types.get(e).map_or(0, |vt| vt.0),
            None => 0,
        };
        let shown_default = match default_sample_type {
            0 => sample_types.last().map_or(0, |vt| vt.0),
            named => named,
        };
        self.default_sample_type = usize::try_from(shown_default)
            .ok()
            .and_then(|i| self.string_table.get(i))
            .map(|s| s.to_string())
            .unwrap_or_default();
        let period_type = (first.period_type != ValueType::default()).then(|| {
            let pt = first.period_type;
            (self.text(pt.type_strindex), self.text(pt.unit_strindex))
        });
        let mut comments = Vec::new();
        if let Some(AnyValueRef::Array(a)) = attr(semconv::PPROF_COMMENT) {
            for c in array_values(a) {
                comments.push(self.string_owned(value_to_string(d, c)));
            }
        }
        let mut frames = [0i64; 3];
        for (key, slot) in [
            semconv::PPROF_DROP_FRAMES,
            semconv::PPROF_KEEP_FRAMES,
            semconv::PPROF_DOC_URL,
        ]
        .into_iter()
        .zip(frames.iter_mut())
        {
            if let Some(v) = attr(key) {
                *slot = self.string_owned(value_to_string(d, v));
            }
        }

        let mut samples = Vec::new();
        self.write_samples(group, &columns, resource_labels, &mut samples);
        let mut tables = Vec::new();
        self.write_tables(&mut tables);

        let mut out = Vec::with_capacity(samples.len() + tables.len() + 1024);
        for &(t, u) in &sample_types {
            put_value_type(&mut out, 1, t, u);
        }
        out.extend_from_slice(&samples);
        out.extend_from_slice(&tables);
        for s in &self.string_table {
            wire::put_bytes_always(&mut out, 6, s.as_bytes());
        }
        wire::put_int64(&mut out, 7, frames[0]);
        wire::put_int64(&mut out, 8, frames[1]);
        wire::put_int64(
            &mut out,
            9,
            i64::try_from(first.time_unix_nano).unwrap_or(i64::MAX),
        );
        wire::put_int64(
            &mut out,
            10,
            i64::try_from(first.duration_nano).unwrap_or(i64::MAX),
        );
        if let Some((t, u)) = period_type {
            put_value_type(&mut out, 11, t, u);
        }
        wire::put_int64(&mut out, 12, first.period);
        wire::put_packed(&mut out, 13, comments.iter().map(|&c| c as u64));
        wire::put_int64(&mut out, 14, default_sample_type);
        wire::put_int64(&mut out, 15, frames[2]);
        out
    }

    fn write_samples(
        &mut self,
        group: &[&Profile],
        columns: &[usize],
        resource_labels: &[KeyValue],
        out: &mut Vec<u8>,
    ) {
        let value_of = |s: &SampleRef<'_>| -> i64 {
            if s.values.is_empty() {
                i64::try_from(s.timestamps_unix_nano.len()).unwrap_or(i64::MAX)
            } else {
                s.values.iter().fold(0i64, |a, v| a.saturating_add(v))
            }
        };
        let rows = group[0].samples.len();
        let positional = group.iter().all(|p| {
            p.samples.len() == rows && p.samples.identities().eq(group[0].samples.identities())
        });
        let width = columns.len();
        // Where each group profile's values go among pprof's columns.
        let mut column_of = vec![0; width];
        for (col, &g) in columns.iter().enumerate() {
            column_of[g] = col;
        }
        let mut label_cache = LabelCache::default();
        let mut values = vec![0i64; width];
        if positional {
            let mut iters: Vec<_> = group.iter().map(|p| p.samples.iter()).collect();
            for _ in 0..rows {
                let mut head = None;
                for (g, it) in iters.iter_mut().enumerate() {
                    if let Some(s) = it.next() {
                        values[column_of[g]] = value_of(&s);
                        if g == 0 {
                            head = Some(s);
                        }
                    }
                }
                if let Some(head) = head {
                    let labels = self.sample_labels(&head, resource_labels, &mut label_cache);
                    self.encode_sample(out, &head, &values, labels);
                }
            }
            return;
        }
        // Rows by (stack, sorted attributes, link), values summed per column; the sorted
        // attributes of every row live in one arena, so finding a row allocates nothing.
        let hasher = hashbrown::DefaultHashBuilder::default();
        let mut index: hashbrown::HashTable<usize> = hashbrown::HashTable::new();
        let mut heads: Vec<SampleRef<'_>> = Vec::new();
        let mut keys: Vec<(usize, usize)> = Vec::new();
        let mut arena: Vec<i32> = Vec::new();
        let mut row_values: Vec<i64> = Vec::new();
        let mut sorted: Vec<i32> = Vec::new();
        for (g, p) in group.iter().enumerate() {
            for s in p.samples.iter() {
                sorted.clear();
                sorted.extend(s.attribute_indices.iter());
                sorted.sort_unstable();
                let hash = hasher.hash_one((s.stack_index, &sorted[..], s.link_index));
                let same = |&row: &usize| {
                    let (at, len) = keys[row];
                    heads[row].stack_index == s.stack_index
                        && heads[row].link_index == s.link_index
                        && arena[at..at + len] == sorted[..]
                };
                let row = match index.find(hash, same) {
                    Some(&row) => row,
                    None => {
                        let row = heads.len();
                        keys.push((arena.len(), sorted.len()));
                        arena.extend_from_slice(&sorted);
                        heads.push(s);
                        row_values.resize(row_values.len() + width, 0);
                        index.insert_unique(hash, row, |&r| {
                            let (at, len) = keys[r];
                            hasher.hash_one((
                                heads[r].stack_index,
                                &arena[at..at + len],
                                heads[r].link_index,
                            ))
                        });
                        row
                    }
                };
                let slot = &mut row_values[row * width + column_of[g]];
                *slot = slot.saturating_add(value_of(&s));
            }
        }
        for (row, head) in heads.iter().enumerate() {
            let labels = self.sample_labels(head, resource_labels, &mut label_cache);
            self.encode_sample(
                out,
                head,
                &row_values[row * width..(row + 1) * width],
                labels,
            );
        }
    }

    fn sample_labels<'c>(
        &mut self,
        s: &SampleRef<'_>,
        resource_labels: &[KeyValue],
        cache: &'c mut LabelCache,
    ) -> &'c [Label] {
        if s.attribute_indices.is_empty() && s.link_index == 0 && resource_labels.is_empty() {
            return &[];
        }
        let by_link = cache.entry(s.link_index).or_default();
        if !by_link.contains_key(s.attribute_indices.as_bytes()) {
            let l = self.labels(s, resource_labels);
            by_link.insert(s.attribute_indices.as_bytes().to_vec(), l);
        }
        by_link
            .get(s.attribute_indices.as_bytes())
            .map_or(&[], Vec::as_slice)
    }

    fn encode_sample(
        &mut self,
        out: &mut Vec<u8>,
        s: &SampleRef<'_>,
        values: &[i64],
        labels: &[Label],
    ) {
        self.sample_count += 1;
        let location_count = self.d.location_count();
        let stack = self.d.stack(s.stack_index).location_indices;
        if s.stack_index != self.last_stack {
            self.used_stacks.insert(s.stack_index);
            self.last_stack = s.stack_index;
        }
        // Location ids are the indices, but for index 0, which takes the id past the
        // table. A packed list in shortest form holds a 0 byte only for a 0 varint, so
        // without one the ids are the list's own bytes.
        let same_bytes = !stack.as_bytes().contains(&0);
        let ids_len: usize = if same_bytes {
            stack.as_bytes().len()
        } else {
            stack
                .iter()
                .map(|l| wire::varint_len(Self::id_of(l, location_count)))
                .sum()
        };
        let values_len: usize = values.iter().map(|&v| wire::varint_len(v as u64)).sum();
        let labels_len: usize = labels
            .iter()
            .map(|l| {
                let body = int_len(1, l.key)
                    + int_len(2, l.str)
                    + int_len(3, l.num)
                    + int_len(4, l.num_unit);
                wire::len_field_len(3, body)
            })
            .sum();
        let packed = |field: u32, len: usize| {
            if len == 0 {
                0
            } else {
                wire::len_field_len(field, len)
            }
        };
        let body = packed(1, ids_len) + packed(2, values_len) + labels_len;
        put_key(out, 2, wire::LEN);
        put_varint(out, body as u64);
        if ids_len > 0 {
            put_key(out, 1, wire::LEN);
            put_varint(out, ids_len as u64);
            if same_bytes {
                out.extend_from_slice(stack.as_bytes());
            } else {
                for l in stack.iter() {
                    put_varint(out, Self::id_of(l, location_count));
                }
            }
        }
        if values_len > 0 {
            put_key(out, 2, wire::LEN);
            put_varint(out, values_len as u64);
            for &v in values {
                put_varint(out, v as u64);
            }
        }
        for l in labels {
            l.encode(out);
        }
    }

    /// The labels of one attribute, made once per writer: many distinct attribute sets
    /// share attributes, and making a label renders and hashes its whole value.
    fn attribute_labels(&mut self, a: i32) -> Vec<Label> {
        if let Some(l) = self.attribute_labels.get(&a) {
            return l.clone();
        }
        let d = self.d;
        let kv = d.attribute(a);
        let key = d.string(kv.key_strindex);
        let unit = d.string(kv.unit_strindex);
        let mut labels = Vec::new();
        match kv.value {
            Some(AnyValueRef::Array(arr)) => {
                for v in array_values(arr) {
                    labels.push(self.label(key, v, unit));
                }
            }
            Some(v) => labels.push(self.label(key, v, unit)),
            None => labels.push(self.label(key, AnyValueRef::Empty, unit)),
        }
        self.attribute_labels.insert(a, labels.clone());
        labels
    }

    fn labels(&mut self, s: &SampleRef<'_>, resource_labels: &[KeyValue]) -> Vec<Label> {
        let d = self.d;
        let mut labels = Vec::new();
        let mut keys: Vec<&str> = Vec::new();
        // The key of each label so far, to place the link's labels by.
        let mut label_keys: Vec<&str> = Vec::new();
        for a in s.attribute_indices.iter() {
            let key = d.string(d.attribute(a).key_strindex);
            keys.push(key);
            let made = self.attribute_labels(a);
            label_keys.extend(std::iter::repeat_n(key, made.len()));
            labels.extend(made);
        }
        if s.link_index != 0 {
            let link = d.link(s.link_index);
            // Each goes before the first label whose key sorts after its own: labels that
            // came in sorted by key (as Go's runtime writes them) go out as they came. A
            // zero id (an invalid link) is not written; the link's keys win over an
            // attribute or resource label of the same name, so each key is given once.
            for (key, bytes) in [
                (SPAN_ID_LABEL, &link.span_id[..]),
                (TRACE_ID_LABEL, &link.trace_id[..]),
            ] {
                if bytes.iter().all(|&b| b == 0) {
                    continue;
                }
                keys.push(key);
                while let Some(at) = label_keys.iter().position(|&k| k == key) {
                    label_keys.remove(at);
                    labels.remove(at);
                }
                let at = label_keys
                    .iter()
                    .position(|&k| k > key)
                    .unwrap_or(label_keys.len());
                let label = Label {
                    key: self.string_ref(key),
                    str: self.string_owned(hex::encode(bytes)),
                    num: 0,
                    num_unit: 0,
                };
                labels.insert(at, label);
                label_keys.insert(at, key);
            }
        }
        if self.resource_labels.is_none() {
            let made: Vec<(String, Label)> = resource_labels
                .iter()
                .filter_map(|kv| {
                    let v = kv.value.as_ref()?;
                    Some((kv.key.clone(), self.label_owned(&kv.key, v)))
                })
                .collect();
            self.resource_labels = Some(made);
        }
        let resource = self.resource_labels.as_deref().unwrap_or(&[]);
        // Long lists on both sides are matched by hashing, so that neither count can make
        // this quadratic.
        let hashed: Option<HashSet<&str>> =
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

    fn label(&mut self, key: &'a str, value: AnyValueRef<'a>, unit: &'a str) -> Label {
        let key = self.string_ref(key);
        match value {
            AnyValueRef::Int(n) => Label {
                key,
                str: 0,
                num: n,
                num_unit: self.string_ref(unit),
            },
            AnyValueRef::Bytes(b) => Label {
                key,
                str: self.string_owned(base64::engine::general_purpose::STANDARD.encode(b)),
                num: 0,
                num_unit: 0,
            },
            AnyValueRef::String(s) => Label {
                key,
                str: self.string_ref(s),
                num: 0,
                num_unit: 0,
            },
            AnyValueRef::StringIndex(i) => Label {
                key,
                str: self.text(i),
                num: 0,
                num_unit: 0,
            },
            other => Label {
                key,
                str: self.string_owned(value_to_string(self.d, other)),
                num: 0,
                num_unit: 0,
            },
        }
    }

    /// A resource attribute's label (resource attributes are owned, not in the dictionary).
    fn label_owned(&mut self, key: &str, value: &AnyValue) -> Label {
        let key = self.string_owned(key.to_owned());
        match &value.value {
            Some(Value::IntValue(n)) => Label {
                key,
                str: 0,
                num: *n,
                num_unit: self.string_ref(""),
            },
            Some(Value::BytesValue(b)) => Label {
                key,
                str: self.string_owned(base64::engine::general_purpose::STANDARD.encode(b)),
                num: 0,
                num_unit: 0,
            },
            _ => Label {
                key,
                str: self.string_owned(any_value_to_string(value)),
                num: 0,
                num_unit: 0,
            },
        }
    }

    /// Emits the locations the samples used, and the functions and mappings those use, in
    /// table order with the table index as id.
    fn write_tables(&mut self, out: &mut Vec<u8>) {
        let d = self.d;
        let location_count = d.location_count();
        let mut used_functions = HashSet::new();
        let mut used_mappings: HashSet<i32> = self.orphans.mappings.iter().copied().collect();
        // The locations of the used stacks, each once: a bit per location, for this
        // pprof only.
        let mut seen = vec![0u64; location_count.div_ceil(64)];
        let mut used: Vec<i32> = Vec::new();
        for &stack in &self.used_stacks {
            for l in d.stack(stack).location_indices.iter() {
                let (word, bit) = (l as usize / 64, 1u64 << (l as usize % 64));
                if let Some(w) = seen.get_mut(word)
                    && *w & bit == 0
                {
                    *w |= bit;
                    used.push(l);
                }
            }
        }
        drop(seen);
        used.extend_from_slice(&self.orphans.locations);
        // A location at index 0 gets the id past the table; keep ids ascending.
        used.sort_unstable_by_key(|&l| Self::id_of(l, location_count));
        used.dedup();
        let mut mappings = Vec::new();
        let mut functions = Vec::new();
        let mut locations = Vec::new();
        let mut body = Vec::new();
        for index in used {
            let l = d.location(index);
            if l.mapping_index != 0 {
                used_mappings.insert(l.mapping_index);
            }
            body.clear();
            wire::put_uint(&mut body, 1, Self::id_of(index, location_count));
            wire::put_uint(&mut body, 2, l.mapping_index as u64);
            wire::put_uint(&mut body, 3, l.address);
            for line in l.lines.iter() {
                if line.function_index != 0 {
                    used_functions.insert(line.function_index);
                }
                let len = int_len(1, i64::from(line.function_index))
                    + int_len(2, line.line)
                    + int_len(3, line.column);
                put_key(&mut body, 4, wire::LEN);
                put_varint(&mut body, len as u64);
                wire::put_uint(&mut body, 1, line.function_index as u64);
                wire::put_int64(&mut body, 2, line.line);
                wire::put_int64(&mut body, 3, line.column);
            }
            let folded = matches!(
                attribute_value(d, l.attribute_indices.iter(), semconv::PPROF_IS_FOLDED),
                Some(AnyValueRef::Bool(true))
            );
            wire::put_uint(&mut body, 5, u64::from(folded));
            wire::put_bytes_always(&mut locations, 4, &body);
        }
        let mut used_functions: Vec<i32> = used_functions.into_iter().collect();
        used_functions.sort_unstable();
        for index in used_functions {
            let f = d.function(index);
            let (name, system_name, filename) = (
                self.text(f.name_strindex),
                self.text(f.system_name_strindex),
                self.text(f.filename_strindex),
            );
            body.clear();
            wire::put_uint(&mut body, 1, index as u64);
            wire::put_int64(&mut body, 2, name);
            wire::put_int64(&mut body, 3, system_name);
            wire::put_int64(&mut body, 4, filename);
            wire::put_int64(&mut body, 5, f.start_line);
            wire::put_bytes_always(&mut functions, 5, &body);
        }
        let mut used_mappings: Vec<i32> = used_mappings.into_iter().collect();
        used_mappings.sort_unstable();
        for index in used_mappings {
            let m = d.mapping(index);
            let flag = |key| {
                matches!(
                    attribute_value(d, m.attribute_indices.iter(), key),
                    Some(AnyValueRef::Bool(true))
                )
            };
            let filename = self.text(m.filename_strindex);
            let build_id = [
                semconv::BUILD_ID_GNU,
                semconv::BUILD_ID_GO,
                semconv::BUILD_ID_HTLHASH,
            ]
            .into_iter()
            .find_map(|k| attribute_value(d, m.attribute_indices.iter(), k))
            .map(|v| value_to_string(d, v));
            let build_id = build_id.map_or(0, |b| self.string_owned(b));
            body.clear();
            wire::put_uint(&mut body, 1, index as u64);
            wire::put_uint(&mut body, 2, m.memory_start);
            wire::put_uint(&mut body, 3, m.memory_limit);
            wire::put_uint(&mut body, 4, m.file_offset);
            wire::put_int64(&mut body, 5, filename);
            wire::put_int64(&mut body, 6, build_id);
            wire::put_uint(&mut body, 7, u64::from(flag(semconv::PPROF_HAS_FUNCTIONS)));
            wire::put_uint(&mut body, 8, u64::from(flag(semconv::PPROF_HAS_FILENAMES)));
            wire::put_uint(
                &mut body,
                9,
                u64::from(flag(semconv::PPROF_HAS_LINE_NUMBERS)),
            );
            wire::put_uint(
                &mut body,
                10,
                u64::from(flag(semconv::PPROF_HAS_INLINE_FRAMES)),
            );
            wire::put_bytes_always(&mut mappings, 3, &body);
        }
        out.extend_from_slice(&mappings);
        out.extend_from_slice(&locations);
        out.extend_from_slice(&functions);
    }
}

fn put_value_type(out: &mut Vec<u8>, field: u32, t: i64, u: i64) {
    let len = int_len(1, t) + int_len(2, u);
    put_key(out, field, wire::LEN);
    put_varint(out, len as u64);
    wire::put_int64(out, 1, t);
    wire::put_int64(out, 2, u);
}
