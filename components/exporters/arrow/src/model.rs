//! A [`ProfileBatch`] flattened into Parca's row model, shared by the v1 and v2 records:
//! one row per OTLP sample (labels, stack, value, profile type, time), plus the distinct
//! label sets, profile types ("series"), stacks, locations and functions they refer to,
//! each deduplicated by content.
//!
//! How the model maps (see also the README):
//! - labels: resource attributes, then sample attributes (which win on a name clash),
//!   names made Prometheus-safe (`service.name` → `service_name`), values as text; an
//!   empty value is no label.
//! - value: the sum of the sample's values, or for a sample with timestamps only, their
//!   count.
//! - profile type: producer, sample type, period type, period and duration as the one
//!   table in [`crate::profile_types`] says (`parca_agent` for CPU and off-CPU, so Parca
//!   shows them as "On-CPU" / "Off-CPU", `memory` for heap types...); types it does not
//!   name keep theirs under `profcol`.
//! - frames (leaf first, as OTLP): native frames carry mapping file, build id and the
//!   file-relative address and no lines unless symbolized; kernel frames
//!   `[kernel.kallsyms]`, no build id, and a line (`UNKNOWN` when unsymbolized).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use profcol_core::pdata::attributes::value_to_string;
use profcol_core::pdata::pprof::{SPAN_ID_LABEL, TRACE_ID_LABEL};
use profcol_core::pdata::types::KeyValue;
use profcol_core::pdata::{
    AnyValueRef, Dictionary, LocationRef, MappingRef, Profile, ProfileBatch, SampleRef,
    any_value_to_string, attribute_value, semconv,
};

use crate::profile_types::{self, DurationRule, Key, PeriodRule, ProfileType};

pub use crate::profile_types::{AGENT_PRODUCER, DEFAULT_PRODUCER, MEMORY_PRODUCER};

/// The kernel's mapping file name.
pub const KERNEL_MAPPING: &str = "[kernel.kallsyms]";
/// Stand-in for a missing name or file, as Parca's agent writes it.
pub const UNKNOWN: &str = "UNKNOWN";
/// The mapping file of the agent's abort frames.
pub const ABORT_MAPPING: &str = "agent-internal-error-frame";

/// One row: a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub labels: u32,
    pub series: u32,
    pub stack: u32,
    pub value: i64,
    pub timestamp: i64,
}

/// The per-profile columns of a row: producer, sample and period types, period,
/// duration and temporality.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Series {
    pub producer: String,
    pub sample_type: String,
    pub sample_unit: String,
    pub period_type: String,
    pub period_unit: String,
    /// The `period` of v2 records.
    pub period: i64,
    /// The `period` of v1 records: the agent writes off-CPU rows' differently.
    pub period_v1: i64,
    /// Nanoseconds; not 0 makes a `:delta` profile type.
    pub duration: u64,
    /// `delta` when `duration` is not 0.
    pub temporality: Option<&'static str>,
}

/// A function, deduplicated by all its fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Func {
    pub name: String,
    pub system_name: String,
    pub filename: Option<String>,
    pub start_line: u64,
}

impl Func {
    /// What Parca's v2 `system_name` holds: the display name, else the system name.
    pub fn display_name(&self) -> &str {
        if self.name.is_empty() {
            &self.system_name
        } else {
            &self.name
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LineRec {
    pub line: u64,
    pub column: u64,
    pub function: u32,
}

/// A location as Parca stores it, deduplicated by content.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Loc {
    pub address: u64,
    pub frame_type: String,
    pub mapping_file: Option<String>,
    pub build_id: Option<String>,
    /// Empty: no lines, the server symbolizes.
    pub lines: Vec<LineRec>,
}

/// A stack: its 16-byte id (a hash of its frames' content) and its locations, leaf first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackRec {
    pub id: [u8; 16],
    pub locations: Vec<u32>,
}

/// A batch in rows.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Sorted.
    pub label_names: Vec<String>,
    /// Per label set, one value per name (`None`: absent).
    pub label_sets: Vec<Vec<Option<String>>>,
    pub series: Vec<Series>,
    pub stacks: Vec<StackRec>,
    pub locations: Vec<Loc>,
    pub functions: Vec<Func>,
    /// Sorted by series, label set, time and stack, so that the run-end encoded columns
    /// have long runs.
    pub rows: Vec<Row>,
}

impl Model {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The distinct build ids of native frames (what debuginfo can be uploaded for).
    pub fn build_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .locations
            .iter()
            .filter_map(|l| l.build_id.clone())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Flattens `batch`.
    pub fn from_batch(batch: &ProfileBatch) -> Model {
        let mut b = Builder::new(batch.dictionary());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        for (ri, rp) in batch.resource_profiles().iter().enumerate() {
            let attributes = rp.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
            let labels = b.resource_labels(attributes);
            let family = family_of(attributes);
            for sp in &rp.scope_profiles {
                let place = Place {
                    resource: ri,
                    labels: &labels,
                    family: family.as_deref(),
                    sampling_period: b.sampling_period(&sp.profiles, family.as_deref()),
                    now,
                };
                for profile in &sp.profiles {
                    b.profile(&place, profile);
                }
            }
        }
        b.finish()
    }
}

/// Where a profile sits: what its rows take from its resource and scope.
struct Place<'p> {
    resource: usize,
    labels: &'p [(u32, u32)],
    family: Option<&'p str>,
    /// The period of a CPU profile in the same scope (1e9 / its frequency).
    sampling_period: Option<i64>,
    now: i64,
}

/// The profile family a resource names ([`profile_types::FAMILY_ATTRIBUTE`]).
fn family_of(attributes: &[KeyValue]) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == profile_types::FAMILY_ATTRIBUTE)
        .and_then(|kv| kv.value.as_ref())
        .map(any_value_to_string)
        .filter(|s| !s.is_empty())
}

/// A sample's value: the sum of its values (one per event when it has timestamps too),
/// else its count of timestamps.
fn sample_value(sample: &SampleRef<'_>) -> i64 {
    if sample.values.is_empty() {
        i64::try_from(sample.timestamps_unix_nano.len().max(1)).unwrap_or(i64::MAX)
    } else {
        sample.values.iter().fold(0i64, i64::saturating_add)
    }
}

/// The columns of a profile of type `given` (sample type and unit, period type and unit)
/// as `row` (from [`profile_types::lookup`]) says, or as given under the default producer.
fn series(
    row: Option<&ProfileType>,
    given: [&str; 4],
    profile: &Profile,
    sampling_period: Option<i64>,
) -> Series {
    let [sample_type, sample_unit, period_type, period_unit] = given;
    let (sample_type, sample_unit) = row
        .and_then(|r| r.parca_sample)
        .unwrap_or((sample_type, sample_unit));
    let (period_type, period_unit) = row
        .and_then(|r| r.parca_period)
        .unwrap_or((period_type, period_unit));
    let (period, period_v1) = match row.map(|r| r.period) {
        Some(PeriodRule::OffCpu) => (
            0,
            sampling_period
                .or(Some(profile.period).filter(|&p| p > 0))
                .unwrap_or(profile_types::DEFAULT_SAMPLING_PERIOD),
        ),
        Some(PeriodRule::AsGiven) | None => (profile.period, profile.period),
    };
    let duration = match (row.map(|r| r.duration), profile.duration_nano) {
        (Some(DurationRule::AgentDefault), 0) => profile_types::AGENT_DURATION_NANOS,
        (_, d) => d,
    };
    Series {
        producer: row.map_or(DEFAULT_PRODUCER, |r| r.producer).to_owned(),
        sample_type: sample_type.to_owned(),
        sample_unit: sample_unit.to_owned(),
        period_type: period_type.to_owned(),
        period_unit: period_unit.to_owned(),
        period,
        period_v1,
        duration,
        temporality: (duration != 0).then_some("delta"),
    }
}

/// Makes a label name Prometheus-safe: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn label_name(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

struct Builder<'a> {
    dict: &'a Dictionary,
    names: Interner,
    values: Interner,
    label_set_ids: HashMap<Vec<(u32, u32)>, u32>,
    label_sets: Vec<Vec<(u32, u32)>>,
    /// Per (resource, link index), sample attribute indices (packed, as the model holds
    /// them) → label set: looked up by the sample's own bytes, so a sample seen before
    /// allocates nothing.
    label_cache: HashMap<(usize, i32), HashMap<Vec<u8>, u32>>,
    sample_attr_cache: HashMap<i32, Option<(u32, u32)>>,
    series_ids: HashMap<Series, u32>,
    series: Vec<Series>,
    function_ids: HashMap<Func, u32>,
    functions: Vec<Func>,
    function_cache: HashMap<(i32, bool), u32>,
    location_ids: HashMap<Loc, u32>,
    locations: Vec<Loc>,
    location_digests: Vec<[u8; 16]>,
    location_cache: HashMap<i32, u32>,
    stack_ids: HashMap<Vec<u32>, u32>,
    stacks: Vec<StackRec>,
    stack_cache: HashMap<i32, u32>,
    rows: Vec<Row>,
}

#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    strings: Vec<String>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }
}

impl<'a> Builder<'a> {
    fn new(dict: &'a Dictionary) -> Self {
        Builder {
            dict,
            names: Interner::default(),
            values: Interner::default(),
            label_set_ids: HashMap::new(),
            label_sets: Vec::new(),
            label_cache: HashMap::new(),
            sample_attr_cache: HashMap::new(),
            series_ids: HashMap::new(),
            series: Vec::new(),
            function_ids: HashMap::new(),
            functions: Vec::new(),
            function_cache: HashMap::new(),
            location_ids: HashMap::new(),
            locations: Vec::new(),
            location_digests: Vec::new(),
            location_cache: HashMap::new(),
            stack_ids: HashMap::new(),
            stacks: Vec::new(),
            stack_cache: HashMap::new(),
            rows: Vec::new(),
        }
    }

    fn string(&self, index: i32) -> &'a str {
        self.dict.string(index)
    }

    fn label(&mut self, key: &str, text: String) -> Option<(u32, u32)> {
        let name = label_name(key);
        if text.is_empty() || name.is_empty() {
            return None;
        }
        Some((self.names.id(&name), self.values.id(&text)))
    }

    fn resource_labels(&mut self, attributes: &[KeyValue]) -> Vec<(u32, u32)> {
        attributes
            .iter()
            .filter_map(|kv| {
                let text = kv
                    .value
                    .as_ref()
                    .map(any_value_to_string)
                    .unwrap_or_default();
                self.label(&kv.key, text)
            })
            .collect()
    }

    fn sample_label(&mut self, index: i32) -> Option<(u32, u32)> {
        if let Some(cached) = self.sample_attr_cache.get(&index) {
            return *cached;
        }
        let dict = self.dict;
        let label = (index > 0).then(|| dict.attribute(index)).and_then(|kv| {
            let key = self.string(kv.key_strindex);
            let text = kv
                .value
                .map(|v| value_to_string(dict, v))
                .unwrap_or_default();
            self.label(key, text)
        });
        self.sample_attr_cache.insert(index, label);
        label
    }

    fn label_set(
        &mut self,
        resource: usize,
        base: &[(u32, u32)],
        attrs: profcol_core::pdata::Indices<'_>,
        link_index: i32,
    ) -> u32 {
        if let Some(&id) = self
            .label_cache
            .get(&(resource, link_index))
            .and_then(|sets| sets.get(attrs.as_bytes()))
        {
            return id;
        }
        // Later entries win: resource first, then the sample's own attributes.
        let mut by_name: HashMap<u32, u32> = HashMap::new();
        for &(n, v) in base {
            by_name.entry(n).or_insert(v);
        }
        for i in attrs.iter() {
            if let Some((n, v)) = self.sample_label(i) {
                by_name.insert(n, v);
            }
        }
        // The span a sample ran under, as the labels pprof carries it by, so that Parca
        // can group and filter by trace.
        if link_index > 0 {
            let link = self.dict.link(link_index);
            for (key, id) in [
                (TRACE_ID_LABEL, &link.trace_id[..]),
                (SPAN_ID_LABEL, &link.span_id[..]),
            ] {
                if id.iter().all(|&b| b == 0) {
                    continue;
                }
                if let Some((n, v)) = self.label(key, hex::encode(id)) {
                    by_name.insert(n, v);
                }
            }
        }
        let mut set: Vec<(u32, u32)> = by_name.into_iter().collect();
        set.sort_unstable();
        let id = match self.label_set_ids.get(&set) {
            Some(&id) => id,
            None => {
                let id = self.label_sets.len() as u32;
                self.label_sets.push(set.clone());
                self.label_set_ids.insert(set, id);
                id
            }
        };
        self.label_cache
            .entry((resource, link_index))
            .or_default()
            .insert(attrs.as_bytes().to_vec(), id);
        id
    }

    /// The names a profile is matched by in [`profile_types::PROFILE_TYPES`].
    fn key<'k>(&self, profile: &Profile, family: Option<&'k str>) -> Key<'k>
    where
        'a: 'k,
    {
        let (st, pt) = (profile.sample_type, profile.period_type);
        // A profile's own family (as a JFR recording's profiles carry it) wins over its
        // resource's.
        let own = profile.attribute_indices.iter().find_map(|&i| {
            let kv = self.dict.attribute(i);
            match (self.string(kv.key_strindex), kv.value) {
                (profile_types::FAMILY_ATTRIBUTE, Some(AnyValueRef::String(f)))
                    if !f.is_empty() =>
                {
                    Some(f)
                }
                _ => None,
            }
        });
        Key {
            sample: (self.string(st.type_strindex), self.string(st.unit_strindex)),
            period_type: self.string(pt.type_strindex),
            family: own.or(family),
        }
    }

    /// The period of the first CPU profile among `profiles` (the sampling frequency's).
    fn sampling_period(&self, profiles: &[Profile], family: Option<&str>) -> Option<i64> {
        profiles
            .iter()
            .filter(|p| p.period > 0)
            .find(|p| {
                profile_types::lookup(&self.key(p, family))
                    .is_some_and(|row| row == profile_types::ON_CPU)
            })
            .map(|p| p.period)
    }

    fn series_of(&mut self, profile: &Profile, place: &Place<'_>) -> u32 {
        let key = self.key(profile, place.family);
        let row = profile_types::lookup(&key);
        let pt = profile.period_type;
        let given = [
            key.sample.0,
            key.sample.1,
            key.period_type,
            self.string(pt.unit_strindex),
        ];
        let series = series(row, given, profile, place.sampling_period);
        if let Some(&id) = self.series_ids.get(&series) {
            return id;
        }
        let id = self.series.len() as u32;
        self.series.push(series.clone());
        self.series_ids.insert(series, id);
        id
    }

    fn profile(&mut self, place: &Place<'_>, profile: &Profile) {
        let series = self.series_of(profile, place);
        let profile_time = match profile.time_unix_nano {
            0 => place.now,
            t => i64::try_from(t).unwrap_or(i64::MAX),
        };
        for sample in profile.samples.iter() {
            let value = sample_value(&sample);
            let timestamp = sample
                .timestamps_unix_nano
                .iter()
                .min()
                .map_or(profile_time, |t| i64::try_from(t).unwrap_or(i64::MAX));
            let labels = self.label_set(
                place.resource,
                place.labels,
                sample.attribute_indices,
                sample.link_index,
            );
            let stack = self.stack(sample.stack_index);
            self.rows.push(Row {
                labels,
                series,
                stack,
                value,
                timestamp,
            });
        }
    }

    fn stack(&mut self, index: i32) -> u32 {
        if let Some(&id) = self.stack_cache.get(&index) {
            return id;
        }
        let dict = self.dict;
        let locations: Vec<u32> = dict
            .stack(index)
            .location_indices
            .iter()
            .map(|l| self.location(l))
            .collect();
        let id = match self.stack_ids.get(&locations) {
            Some(&id) => id,
            None => {
                let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
                for &l in &locations {
                    ctx.update(&self.location_digests[l as usize]);
                }
                let id = self.stacks.len() as u32;
                self.stacks.push(StackRec {
                    id: first16(ctx.finish().as_ref()),
                    locations: locations.clone(),
                });
                self.stack_ids.insert(locations, id);
                id
            }
        };
        self.stack_cache.insert(index, id);
        id
    }

    fn mapping(&self, location: &LocationRef<'_>) -> Option<MappingRef<'a>> {
        (location.mapping_index > 0).then(|| self.dict.mapping(location.mapping_index))
    }

    fn build_id(&self, mapping: &MappingRef<'_>) -> Option<String> {
        [
            semconv::BUILD_ID_GNU,
            semconv::BUILD_ID_GO,
            semconv::BUILD_ID_HTLHASH,
        ]
        .iter()
        .find_map(|key| {
            attribute_value(self.dict, mapping.attribute_indices.iter(), key)
                .map(|v| value_to_string(self.dict, v))
                .filter(|s| !s.is_empty())
        })
    }

    fn location(&mut self, index: i32) -> u32 {
        if let Some(&id) = self.location_cache.get(&index) {
            return id;
        }
        let loc = self.convert_location(&self.dict.location(index));
        let id = match self.location_ids.get(&loc) {
            Some(&id) => id,
            None => {
                let id = self.locations.len() as u32;
                self.location_digests
                    .push(location_digest(&loc, &self.functions));
                self.locations.push(loc.clone());
                self.location_ids.insert(loc, id);
                id
            }
        };
        self.location_cache.insert(index, id);
        id
    }

    fn convert_location(&mut self, l: &LocationRef<'_>) -> Loc {
        let mapping = self.mapping(l);
        let filename = mapping.map_or("", |m| self.string(m.filename_strindex));
        let declared_type =
            attribute_value(self.dict, l.attribute_indices.iter(), semconv::FRAME_TYPE)
                .map(|v| value_to_string(self.dict, v))
                .filter(|s| !s.is_empty());
        let frame_type = match &declared_type {
            Some(t) => t.clone(),
            None if filename == KERNEL_MAPPING => "kernel".to_owned(),
            None => "native".to_owned(),
        };
        // eBPF profilers (which type every frame) send file-relative addresses already;
        // pprof-born data has runtime addresses inside its mapping's range.
        let address = match mapping {
            Some(m)
                if declared_type.is_none()
                    && m.memory_limit > m.memory_start
                    && (m.memory_start..m.memory_limit).contains(&l.address) =>
            {
                l.address - m.memory_start + m.file_offset
            }
            _ => l.address,
        };
        let mut lines: Vec<LineRec> = l
            .lines
            .iter()
            .map(|line| LineRec {
                line: u64::try_from(line.line).unwrap_or(0),
                column: u64::try_from(line.column).unwrap_or(0),
                function: self.function(line.function_index, frame_type == "kernel"),
            })
            .collect();
        let (mapping_file, build_id) = match frame_type.as_str() {
            "kernel" => {
                if lines.is_empty() {
                    let function = self.intern_function(Func {
                        name: UNKNOWN.into(),
                        system_name: String::new(),
                        filename: Some("vmlinux".into()),
                        start_line: 0,
                    });
                    lines.push(LineRec {
                        line: 0,
                        column: 0,
                        function,
                    });
                }
                (Some(KERNEL_MAPPING.to_owned()), None)
            }
            "abort-marker" => (Some(ABORT_MAPPING.to_owned()), None),
            _ => match mapping {
                Some(m) => (
                    Some(if filename.is_empty() {
                        UNKNOWN.to_owned()
                    } else {
                        filename.to_owned()
                    }),
                    self.build_id(&m),
                ),
                None => (None, None),
            },
        };
        Loc {
            address,
            frame_type,
            mapping_file,
            build_id,
            lines,
        }
    }

    fn function(&mut self, index: i32, kernel: bool) -> u32 {
        if let Some(&id) = self.function_cache.get(&(index, kernel)) {
            return id;
        }
        let f = self.dict.function(index);
        let name = self.string(f.name_strindex);
        let system_name = self.string(f.system_name_strindex);
        let filename = self.string(f.filename_strindex);
        let func = Func {
            name: if name.is_empty() && system_name.is_empty() {
                UNKNOWN.to_owned()
            } else {
                name.to_owned()
            },
            system_name: system_name.to_owned(),
            filename: match filename {
                "" if kernel => Some("vmlinux".to_owned()),
                "" => None,
                f => Some(f.to_owned()),
            },
            start_line: u64::try_from(f.start_line).unwrap_or(0),
        };
        let id = self.intern_function(func);
        self.function_cache.insert((index, kernel), id);
        id
    }

    fn intern_function(&mut self, func: Func) -> u32 {
        if let Some(&id) = self.function_ids.get(&func) {
            return id;
        }
        let id = self.functions.len() as u32;
        self.functions.push(func.clone());
        self.function_ids.insert(func, id);
        id
    }

    fn finish(mut self) -> Model {
        // Label names sorted; each set as one optional value per name.
        let mut order: Vec<u32> = (0..self.names.strings.len() as u32).collect();
        order.sort_by(|&a, &b| self.names.strings[a as usize].cmp(&self.names.strings[b as usize]));
        let mut column_of = vec![0usize; order.len()];
        for (column, &name) in order.iter().enumerate() {
            column_of[name as usize] = column;
        }
        let label_names: Vec<String> = order
            .iter()
            .map(|&n| self.names.strings[n as usize].clone())
            .collect();
        let label_sets: Vec<Vec<Option<String>>> = self
            .label_sets
            .iter()
            .map(|set| {
                let mut values = vec![None; label_names.len()];
                for &(n, v) in set {
                    values[column_of[n as usize]] = Some(self.values.strings[v as usize].clone());
                }
                values
            })
            .collect();
        // Rows ordered by series, then by label values (so equal labels are adjacent).
        let mut label_rank = vec![0u32; label_sets.len()];
        let mut by_values: Vec<u32> = (0..label_sets.len() as u32).collect();
        by_values.sort_by(|&a, &b| label_sets[a as usize].cmp(&label_sets[b as usize]));
        for (rank, &set) in by_values.iter().enumerate() {
            label_rank[set as usize] = rank as u32;
        }
        self.rows.sort_by_key(|r| {
            (
                r.series,
                label_rank[r.labels as usize],
                r.timestamp,
                r.stack,
            )
        });
        Model {
            label_names,
            label_sets,
            series: self.series,
            stacks: self.stacks,
            locations: self.locations,
            functions: self.functions,
            rows: self.rows,
        }
    }
}

fn first16(digest: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, d) in out.iter_mut().zip(digest) {
        *o = *d;
    }
    out
}

/// A hash of what a location means (address, mapping, build id, type, lines with their
/// functions), so that equal stacks get equal ids in every batch.
fn location_digest(loc: &Loc, functions: &[Func]) -> [u8; 16] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut text = |s: Option<&str>| {
        match s {
            Some(s) => {
                ctx.update(&[1]);
                ctx.update(&(s.len() as u64).to_le_bytes());
                ctx.update(s.as_bytes());
            }
            None => ctx.update(&[0]),
        };
    };
    text(Some(&loc.frame_type));
    text(loc.mapping_file.as_deref());
    text(loc.build_id.as_deref());
    for line in &loc.lines {
        let f = functions.get(line.function as usize);
        text(f.map(|f| f.name.as_str()));
        text(f.map(|f| f.system_name.as_str()));
        text(f.and_then(|f| f.filename.as_deref()));
    }
    ctx.update(&loc.address.to_le_bytes());
    for line in &loc.lines {
        ctx.update(&line.line.to_le_bytes());
        ctx.update(&line.column.to_le_bytes());
        let start = functions
            .get(line.function as usize)
            .map_or(0, |f| f.start_line);
        ctx.update(&start.to_le_bytes());
    }
    first16(ctx.finish().as_ref())
}
