//! OTLP protobuf (`ProfilesData` or `ExportProfilesServiceRequest`) into the model, checked
//! as it is read: every index in range, every zero value in place, every sample well
//! shaped, every list within its cap. Rows and samples are written back in canonical
//! form, so what is kept is what the model reads; memory is charged as it is taken and
//! refused past [`DECODE_AMPLIFICATION`] times the input.
//!
//! The dictionary is read first (it may come after the profiles on the wire), so that
//! samples are checked against it as they are read.

use prost::Message;

use profcol_proto::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use profcol_proto::otlp::resource::v1::Resource;

use crate::dictionary::{Dictionary, table_names as names};
use crate::limits::{
    CopyBudget, DECODE_AMPLIFICATION, DECODE_FLOOR_BYTES, MAX_ATTRIBUTES_PER_LIST,
    MAX_LABELS_PER_SAMPLE, MAX_STACK_DEPTH,
};
use crate::profile::{Profile, ResourceProfiles, ScopeProfiles, ValueType};
use crate::rows::{AnyValueRef, AttributeRef, Line, Link};
use crate::samples::Samples;
use crate::table::{RowTable, StringTable};
use crate::wire::{self, Reader, WireError, put_int32, put_uint, put_varint};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    #[error("dictionary.{table}[0] must be the zero value {expected}")]
    MissingZeroValue {
        table: &'static str,
        expected: &'static str,
    },
    #[error("{field}: index {index} is out of range of {table} (length {len})")]
    IndexOutOfRange {
        field: String,
        table: &'static str,
        index: i64,
        len: usize,
    },
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
    #[error("{field}: not protobuf: {error}")]
    Malformed { field: String, error: WireError },
}

type Result<T> = std::result::Result<T, ValidationError>;

fn malformed(field: impl FnOnce() -> String) -> impl FnOnce(WireError) -> ValidationError {
    move |error| ValidationError::Malformed {
        field: field(),
        error,
    }
}

fn check_index(
    index: i64,
    len: usize,
    table: &'static str,
    field: impl FnOnce() -> String,
) -> Result<()> {
    match usize::try_from(index) {
        Ok(i) if i < len => Ok(()),
        _ => Err(ValidationError::IndexOutOfRange {
            field: field(),
            table,
            index,
            len,
        }),
    }
}

/// Decodes and checks `bytes`, taking at most [`DECODE_AMPLIFICATION`] times their size
/// (plus [`DECODE_FLOOR_BYTES`]) in memory.
pub fn decode(bytes: &[u8]) -> Result<(Dictionary, Vec<ResourceProfiles>)> {
    decode_within(
        bytes,
        bytes
            .len()
            .saturating_mul(DECODE_AMPLIFICATION)
            .saturating_add(DECODE_FLOOR_BYTES),
    )
}

/// Decodes and checks `bytes`, taking at most `budget` bytes in memory: for bytes the
/// collector wrote itself, whose batch held a known amount before (a canonical encoding
/// can be smaller than the input it came from, which padding or unknown fields made
/// larger, so the bound relative to its own size may be too tight for it).
pub fn decode_within(bytes: &[u8], budget: usize) -> Result<(Dictionary, Vec<ResourceProfiles>)> {
    let mut d = Decoder {
        budget,
        input: bytes.len(),
        dict: Dictionary::default(),
        scratch: Vec::new(),
        keys: Vec::new(),
        array_attributes: false,
    };
    d.dictionary(bytes)?;
    let resource_profiles = d.resource_profiles(bytes)?;
    Ok((d.dict, resource_profiles))
}

struct Decoder {
    /// Bytes the model may still take.
    budget: usize,
    input: usize,
    dict: Dictionary,
    scratch: Vec<u8>,
    /// For the repeated-key check of long attribute lists.
    keys: Vec<i32>,
    /// Whether any attribute holds an array (each of whose values is a pprof label, so
    /// a sample's labels must be counted value by value).
    array_attributes: bool,
}

/// Rows and bytes of each table, counted before they are read.
#[derive(Default)]
struct TableSizes {
    rows: [usize; 8],
    bytes: [usize; 8],
}

impl Decoder {
    /// Checks that `bytes` allocated for a moment (and freed before anything else is
    /// charged) fit beside what is held.
    fn transient(&self, bytes: usize, field: impl FnOnce() -> String) -> Result<()> {
        if bytes <= self.budget {
            return Ok(());
        }
        Err(ValidationError::Invalid {
            field: field(),
            problem: format!(
                "decoding would take more than {DECODE_AMPLIFICATION} times the input's {} bytes in memory; the input is made of empty or repeated messages",
                self.input
            ),
        })
    }

    fn charge(&mut self, bytes: usize, field: impl FnOnce() -> String) -> Result<()> {
        match self.budget.checked_sub(bytes) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => Err(ValidationError::Invalid {
                field: field(),
                problem: format!(
                    "decoding would take more than {DECODE_AMPLIFICATION} times the input's {} bytes in memory; the input is made of empty or repeated messages",
                    self.input
                ),
            }),
        }
    }

    // ---- The dictionary ----

    fn dictionary(&mut self, bytes: &[u8]) -> Result<()> {
        // Every occurrence of field 2 is one part: protobuf merges them, which for
        // repeated fields appends.
        let top = || "ProfilesData".to_owned();
        let mut sizes = TableSizes::default();
        for_each_field(bytes, top, |field, wire, r| {
            if field != 2 {
                return r.skip(wire).map_err(malformed(top));
            }
            let part = r
                .len_field(wire)
                .map_err(malformed(|| "dictionary".into()))?;
            for_each_field(
                part,
                || "dictionary".into(),
                |table, wire, r| {
                    let path = || "dictionary".to_owned();
                    if !(1..=7).contains(&table) {
                        return r.skip(wire).map_err(malformed(path));
                    }
                    let entry = r.len_field(wire).map_err(malformed(path))?;
                    sizes.rows[table as usize] += 1;
                    sizes.bytes[table as usize] += entry.len();
                    Ok(())
                },
            )
        })?;
        // Exact room: rows cost their canonical bytes (about what they took on the
        // wire) and 4 bytes each.
        let reserve: usize = (1..8).map(|t| sizes.bytes[t] + sizes.rows[t] * 4).sum();
        self.charge(reserve, || "dictionary".into())?;
        let t = |i: usize| RowTable::with_capacity(sizes.rows[i] + 1, sizes.bytes[i] + 32);
        self.dict = Dictionary {
            mappings: t(1),
            locations: t(2),
            functions: t(3),
            links: t(4),
            strings: StringTable::with_capacity(sizes.rows[5] + 1, sizes.bytes[5]),
            attributes: t(6),
            stacks: t(7),
        };
        for_each_field(bytes, top, |field, wire, r| {
            if field != 2 {
                return r.skip(wire).map_err(malformed(top));
            }
            let part = r
                .len_field(wire)
                .map_err(malformed(|| "dictionary".into()))?;
            self.dictionary_part(part)
        })?;
        self.zero_values()?;
        self.check_dictionary()
    }

    fn dictionary_part(&mut self, part: &[u8]) -> Result<()> {
        let mut r = Reader::new(part);
        while !r.is_empty() {
            let (table, wire) = r.key().map_err(malformed(|| "dictionary".into()))?;
            if !(1..=7).contains(&table) {
                r.skip(wire).map_err(malformed(|| "dictionary".into()))?;
                continue;
            }
            let name = table_name(table);
            let index = self.table_len(table);
            let here = || format!("dictionary.{name}[{index}]");
            let entry = r.len_field(wire).map_err(malformed(here))?;
            if table == 6 {
                // prost reads the value to write it canonically; what it allocates for
                // that is freed at once, but must fit beside what is held.
                self.transient(prost_heap(entry, ProstMessage::KeyValueAndUnit, 0), here)?;
            }
            let pushed = match table {
                1 => canonical_row(&mut self.dict.mappings, entry, canonical_mapping),
                2 => canonical_row(&mut self.dict.locations, entry, canonical_location),
                3 => canonical_row(&mut self.dict.functions, entry, canonical_function),
                4 => canonical_row(&mut self.dict.links, entry, |e, out| {
                    canonical_link(e, out, index == 0)
                }),
                5 => std::str::from_utf8(entry)
                    .map_err(|_| EntryError::Wire(WireError::Utf8))
                    .and_then(|s| self.dict.strings.push(s).map_err(|_| EntryError::Full)),
                6 => canonical_row(&mut self.dict.attributes, entry, |e, out| {
                    canonical_attribute(e, out, index == 0)
                }),
                _ => canonical_row(&mut self.dict.stacks, entry, canonical_stack),
            };
            match pushed {
                Ok(_) => {}
                Err(EntryError::Wire(e)) => return Err(malformed(here)(e)),
                Err(EntryError::Invalid(problem)) => {
                    return Err(ValidationError::Invalid {
                        field: here(),
                        problem,
                    });
                }
                Err(EntryError::Full) => {
                    return Err(ValidationError::Invalid {
                        field: here(),
                        problem: "the table outgrew 4 GiB".into(),
                    });
                }
            }
        }
        Ok(())
    }

    fn table_len(&self, table: u32) -> usize {
        match table {
            1 => self.dict.mappings.len(),
            2 => self.dict.locations.len(),
            3 => self.dict.functions.len(),
            4 => self.dict.links.len(),
            5 => self.dict.strings.len(),
            6 => self.dict.attributes.len(),
            _ => self.dict.stacks.len(),
        }
    }

    /// A table that is absent gets its zero value; one that is present must start with it.
    fn zero_values(&mut self) -> Result<()> {
        fn zero(
            table: &mut RowTable,
            zero_row: &[u8],
            name: &'static str,
            expected: &'static str,
        ) -> Result<()> {
            match table.get(0) {
                None => {
                    // Room for it was reserved.
                    table
                        .push(zero_row)
                        .map(drop)
                        .map_err(|_| ValidationError::Invalid {
                            field: format!("dictionary.{name}"),
                            problem: "the table outgrew 4 GiB".into(),
                        })
                }
                Some(first) if first == zero_row => Ok(()),
                Some(_) => Err(ValidationError::MissingZeroValue {
                    table: name,
                    expected,
                }),
            }
        }
        match self.dict.strings.get(0) {
            None => {
                let _ = self.dict.strings.push("");
            }
            Some("") => {}
            Some(_) => {
                return Err(ValidationError::MissingZeroValue {
                    table: names::STRING,
                    expected: "\"\"",
                });
            }
        }
        zero(&mut self.dict.mappings, &[], names::MAPPING, "Mapping{}")?;
        zero(&mut self.dict.locations, &[], names::LOCATION, "Location{}")?;
        zero(&mut self.dict.functions, &[], names::FUNCTION, "Function{}")?;
        zero(
            &mut self.dict.attributes,
            &[],
            names::ATTRIBUTE,
            "KeyValueAndUnit{}",
        )?;
        zero(&mut self.dict.stacks, &[], names::STACK, "Stack{}")?;
        let mut zero_link = Vec::new();
        Link::default().encode(&mut zero_link);
        // A first link that is not zero was refused as it was read.
        zero(
            &mut self.dict.links,
            &zero_link,
            names::LINK,
            "Link{} (empty or zero-filled ids)",
        )
    }

    /// Indices between tables, now that every table's length is known.
    fn check_dictionary(&mut self) -> Result<()> {
        let d = &self.dict;
        self.array_attributes = d
            .attributes()
            .any(|a| matches!(a.value, Some(AnyValueRef::Array(_))));
        let strings = d.string_count();
        for (i, m) in d.mappings().enumerate() {
            check_index(m.filename_strindex.into(), strings, names::STRING, || {
                format!("dictionary.mapping_table[{i}].filename_strindex")
            })?;
            check_attribute_list(
                d,
                &mut self.keys,
                m.attribute_indices.iter(),
                MAX_ATTRIBUTES_PER_LIST,
                || format!("dictionary.mapping_table[{i}].attribute_indices"),
            )?;
            if m.memory_limit != 0 && m.memory_start > m.memory_limit {
                return Err(ValidationError::Invalid {
                    field: format!("dictionary.mapping_table[{i}]"),
                    problem: format!(
                        "memory_start {:#x} lies above memory_limit {:#x}",
                        m.memory_start, m.memory_limit
                    ),
                });
            }
        }
        for (i, f) in d.functions().enumerate() {
            for (name, index) in [
                ("name_strindex", f.name_strindex),
                ("system_name_strindex", f.system_name_strindex),
                ("filename_strindex", f.filename_strindex),
            ] {
                check_index(index.into(), strings, names::STRING, || {
                    format!("dictionary.function_table[{i}].{name}")
                })?;
            }
        }
        let (mappings, functions) = (d.mapping_count(), d.function_count());
        for (i, l) in d.locations().enumerate() {
            check_index(l.mapping_index.into(), mappings, names::MAPPING, || {
                format!("dictionary.location_table[{i}].mapping_index")
            })?;
            for (n, line) in l.lines.iter().enumerate() {
                check_index(
                    line.function_index.into(),
                    functions,
                    names::FUNCTION,
                    || format!("dictionary.location_table[{i}].lines[{n}].function_index"),
                )?;
            }
            check_attribute_list(
                d,
                &mut self.keys,
                l.attribute_indices.iter(),
                MAX_ATTRIBUTES_PER_LIST,
                || format!("dictionary.location_table[{i}].attribute_indices"),
            )?;
        }
        for (i, a) in d.attributes().enumerate() {
            check_index(a.key_strindex.into(), strings, names::STRING, || {
                format!("dictionary.attribute_table[{i}].key_strindex")
            })?;
            check_index(a.unit_strindex.into(), strings, names::STRING, || {
                format!("dictionary.attribute_table[{i}].unit_strindex")
            })?;
            if let Some(bytes) = a.value_bytes {
                check_string_references(bytes, strings, 0, &|| {
                    format!("dictionary.attribute_table[{i}].value")
                })?;
            }
        }
        let locations = d.location_count();
        for (i, s) in d.stacks().enumerate() {
            let depth = s.location_indices.len();
            if depth > MAX_STACK_DEPTH {
                return Err(ValidationError::Invalid {
                    field: format!("dictionary.stack_table[{i}].location_indices"),
                    problem: format!(
                        "has {depth} locations; at most {MAX_STACK_DEPTH} are accepted"
                    ),
                });
            }
            for (n, l) in s.location_indices.iter().enumerate() {
                check_index(l.into(), locations, names::LOCATION, || {
                    format!("dictionary.stack_table[{i}].location_indices[{n}]")
                })?;
            }
        }
        Ok(())
    }

    // ---- Resources, scopes, profiles ----

    fn resource_profiles(&mut self, bytes: &[u8]) -> Result<Vec<ResourceProfiles>> {
        // Lists are counted and charged whole before they are sized, so that growing
        // them never holds more than was charged.
        let n = count_field(bytes, 1);
        self.charge(
            n.saturating_mul(std::mem::size_of::<ResourceProfiles>()),
            || "resource_profiles".into(),
        )?;
        let mut out = Vec::with_capacity(n);
        let mut copies = CopyBudget::new(self.dict.strings.byte_len());
        for_each_field(
            bytes,
            || "ProfilesData".into(),
            |field, wire, r| {
                if field != 1 {
                    return r.skip(wire).map_err(malformed(|| "ProfilesData".into()));
                }
                let at = out.len();
                let here = || format!("resource_profiles[{at}]");
                let body = r.len_field(wire).map_err(malformed(here))?;
                let rp = self.one_resource(body, at, &mut copies)?;
                out.push(rp);
                Ok(())
            },
        )?;
        Ok(out)
    }

    fn one_resource(
        &mut self,
        body: &[u8],
        r_at: usize,
        copies: &mut CopyBudget,
    ) -> Result<ResourceProfiles> {
        let here = || format!("resource_profiles[{r_at}]");
        let mut rp = ResourceProfiles::default();
        let scopes = count_field(body, 2);
        self.charge(
            scopes.saturating_mul(std::mem::size_of::<ScopeProfiles>()),
            here,
        )?;
        rp.scope_profiles = Vec::with_capacity(scopes);
        let mut r = Reader::new(body);
        while !r.is_empty() {
            let (field, wire) = r.key().map_err(malformed(here))?;
            match field {
                1 => {
                    let bytes = r.len_field(wire).map_err(malformed(here))?;
                    let path = || format!("resource_profiles[{r_at}].resource");
                    self.transient(prost_heap(bytes, ProstMessage::Resource, 0), path)?;
                    let mut resource =
                        Resource::decode(bytes).map_err(|e| ValidationError::Invalid {
                            field: path(),
                            problem: format!("not protobuf: {e}"),
                        })?;
                    self.charge(key_values_heap(&resource.attributes), path)?;
                    resolve_key_values(
                        &self.dict.strings,
                        copies,
                        &mut resource.attributes,
                        &|| format!("resource_profiles[{r_at}].resource.attributes"),
                    )?;
                    rp.resource = Some(resource);
                }
                2 => {
                    let s_at = rp.scope_profiles.len();
                    let path = || format!("resource_profiles[{r_at}].scope_profiles[{s_at}]");
                    let bytes = r.len_field(wire).map_err(malformed(path))?;
                    let sp = self.one_scope(bytes, r_at, s_at, copies)?;
                    rp.scope_profiles.push(sp);
                }
                3 => {
                    let url = r.string_field(wire).map_err(malformed(here))?;
                    self.charge(url.len(), here)?;
                    rp.schema_url = url.to_owned();
                }
                _ => r.skip(wire).map_err(malformed(here))?,
            }
        }
        Ok(rp)
    }

    fn one_scope(
        &mut self,
        body: &[u8],
        r_at: usize,
        s_at: usize,
        copies: &mut CopyBudget,
    ) -> Result<ScopeProfiles> {
        let here = || format!("resource_profiles[{r_at}].scope_profiles[{s_at}]");
        let mut sp = ScopeProfiles::default();
        let profiles = count_field(body, 2);
        self.charge(
            profiles.saturating_mul(std::mem::size_of::<Profile>()),
            here,
        )?;
        sp.profiles = Vec::with_capacity(profiles);
        let mut r = Reader::new(body);
        while !r.is_empty() {
            let (field, wire) = r.key().map_err(malformed(here))?;
            match field {
                1 => {
                    let bytes = r.len_field(wire).map_err(malformed(here))?;
                    let path = || format!("{}.scope", here());
                    self.transient(prost_heap(bytes, ProstMessage::Scope, 0), path)?;
                    let mut scope = InstrumentationScope::decode(bytes).map_err(|e| {
                        ValidationError::Invalid {
                            field: path(),
                            problem: format!("not protobuf: {e}"),
                        }
                    })?;
                    self.charge(
                        key_values_heap(&scope.attributes) + scope.name.len() + scope.version.len(),
                        path,
                    )?;
                    resolve_key_values(&self.dict.strings, copies, &mut scope.attributes, &|| {
                        format!("{}.scope.attributes", here())
                    })?;
                    sp.scope = Some(scope);
                }
                2 => {
                    let p_at = sp.profiles.len();
                    let path = || format!("{}.profiles[{p_at}]", here());
                    let bytes = r.len_field(wire).map_err(malformed(path))?;
                    let p = self.one_profile(bytes, &path)?;
                    sp.profiles.push(p);
                }
                3 => {
                    let url = r.string_field(wire).map_err(malformed(here))?;
                    self.charge(url.len(), here)?;
                    sp.schema_url = url.to_owned();
                }
                _ => r.skip(wire).map_err(malformed(here))?,
            }
        }
        Ok(sp)
    }

    fn one_profile(&mut self, body: &[u8], at: &dyn Fn() -> String) -> Result<Profile> {
        let mut p = Profile::default();
        // The samples take at most the profile's bytes (re-encoding a sample never makes
        // it longer than the longest form it could have had, bar negative indices,
        // which are refused).
        let mut sample_bytes = 0usize;
        {
            let mut r = Reader::new(body);
            while !r.is_empty() {
                let (field, wire) = r.key().map_err(malformed(at))?;
                if field == 2 {
                    sample_bytes += r.len_field(wire).map_err(malformed(at))?.len() + 11;
                } else {
                    r.skip(wire).map_err(malformed(at))?;
                }
            }
        }
        self.charge(sample_bytes, at)?;
        p.samples = Samples::with_capacity(sample_bytes);
        let strings = self.dict.string_count();
        let mut r = Reader::new(body);
        while !r.is_empty() {
            let (field, wire) = r.key().map_err(malformed(at))?;
            match field {
                1 | 5 => {
                    let name = if field == 1 {
                        "sample_type"
                    } else {
                        "period_type"
                    };
                    let path = || format!("{}.{name}", at());
                    let bytes = r.len_field(wire).map_err(malformed(path))?;
                    let vt = ValueType::decode(bytes).map_err(|e| ValidationError::Invalid {
                        field: path(),
                        problem: format!("not protobuf: {e}"),
                    })?;
                    check_index(vt.type_strindex.into(), strings, names::STRING, || {
                        format!("{}.type_strindex", path())
                    })?;
                    check_index(vt.unit_strindex.into(), strings, names::STRING, || {
                        format!("{}.unit_strindex", path())
                    })?;
                    if field == 1 {
                        p.sample_type = vt;
                    } else {
                        p.period_type = vt;
                    }
                }
                2 => {
                    let n = p.samples.len();
                    let path = || format!("{}.samples[{n}]", at());
                    let bytes = r.len_field(wire).map_err(malformed(path))?;
                    self.sample(bytes, &mut p.samples, &path)?;
                }
                3 => p.time_unix_nano = r.fixed64_field(wire).map_err(malformed(at))?,
                4 => p.duration_nano = r.uint(wire).map_err(malformed(at))?,
                6 => p.period = r.int64(wire).map_err(malformed(at))?,
                7 => {
                    let id = r.len_field(wire).map_err(malformed(at))?;
                    if !id.is_empty() && (id.len() != 16 || id.iter().all(|&b| b == 0)) {
                        return Err(ValidationError::Invalid {
                            field: format!("{}.profile_id", at()),
                            problem: "must be 16 bytes, not all zero".into(),
                        });
                    }
                    p.profile_id = id.to_vec();
                }
                8 => p.dropped_attributes_count = r.uint(wire).map_err(malformed(at))? as u32,
                9 => {
                    let s = r.string_field(wire).map_err(malformed(at))?;
                    self.charge(s.len(), at)?;
                    p.original_payload_format = s.to_owned();
                }
                10 => {
                    let b = r.len_field(wire).map_err(malformed(at))?;
                    self.charge(b.len(), at)?;
                    p.original_payload = b.to_vec();
                }
                11 => {
                    let mut bad = None;
                    r.repeated_varint(wire, |v| {
                        if p.attribute_indices.len() < MAX_ATTRIBUTES_PER_LIST + 1 {
                            p.attribute_indices.push(v as i32);
                        } else {
                            bad = Some(());
                        }
                    })
                    .map_err(malformed(at))?;
                    if bad.is_some() {
                        return Err(too_many(
                            || format!("{}.attribute_indices", at()),
                            MAX_ATTRIBUTES_PER_LIST + 1,
                            MAX_ATTRIBUTES_PER_LIST,
                        ));
                    }
                }
                _ => r.skip(wire).map_err(malformed(at))?,
            }
        }
        self.charge(p.attribute_indices.len() * 4, at)?;
        check_attribute_list(
            &self.dict,
            &mut self.keys,
            p.attribute_indices.iter().copied(),
            MAX_ATTRIBUTES_PER_LIST,
            || format!("{}.attribute_indices", at()),
        )?;
        p.samples.shrink();
        Ok(p)
    }

    /// Checks one sample and appends its canonical form.
    fn sample(
        &mut self,
        body: &[u8],
        samples: &mut Samples,
        at: &dyn Fn() -> String,
    ) -> Result<()> {
        // What encoders write is almost always the canonical form already: then it is
        // checked as it lies and copied, with no second pass to re-encode it.
        if let Some(sample) = canonical_sample(body) {
            self.check_sample(&sample, at)?;
            samples.push_body(body);
            return Ok(());
        }
        let mut stack_index = 0i32;
        let mut link_index = 0i32;
        let (mut values, mut values_len) = (0usize, 0usize);
        let (mut attrs, mut attrs_len) = (0usize, 0usize);
        let mut times = 0usize;
        let mut r = Reader::new(body);
        while !r.is_empty() {
            let (field, wire) = r.key().map_err(malformed(at))?;
            match field {
                1 => stack_index = r.int32(wire).map_err(malformed(at))?,
                2 => r
                    .repeated_varint(wire, |v| {
                        attrs += 1;
                        attrs_len += wire::varint_len(i64::from(v as i32) as u64);
                    })
                    .map_err(malformed(at))?,
                3 => link_index = r.int32(wire).map_err(malformed(at))?,
                4 => r
                    .repeated_varint(wire, |v| {
                        values += 1;
                        values_len += wire::varint_len(v);
                    })
                    .map_err(malformed(at))?,
                5 => r
                    .repeated_fixed64(wire, |_| times += 1)
                    .map_err(malformed(at))?,
                _ => r.skip(wire).map_err(malformed(at))?,
            }
        }
        // The canonical body (no longer than the body read), then the same checks.
        let scratch = &mut self.scratch;
        scratch.clear();
        put_int32(scratch, 1, stack_index);
        if attrs > 0 {
            wire::put_key(scratch, 2, wire::LEN);
            put_varint(scratch, attrs_len as u64);
            each_repeated(body, 2, |v| put_varint(scratch, i64::from(v as i32) as u64));
        }
        put_int32(scratch, 3, link_index);
        if values > 0 {
            wire::put_key(scratch, 4, wire::LEN);
            put_varint(scratch, values_len as u64);
            each_repeated(body, 4, |v| put_varint(scratch, v));
        }
        if times > 0 {
            wire::put_key(scratch, 5, wire::LEN);
            put_varint(scratch, (times * 8) as u64);
            each_repeated_fixed64(body, 5, |v| scratch.extend_from_slice(&v.to_le_bytes()));
        }
        let body = std::mem::take(&mut self.scratch);
        let checked = self.check_sample(&crate::rows::SampleRef::decode(&body), at);
        self.scratch = body;
        checked?;
        samples.push_body(&self.scratch);
        Ok(())
    }
}

impl Decoder {
    /// The checks of one sample in its canonical form.
    fn check_sample(
        &mut self,
        s: &crate::rows::SampleRef<'_>,
        at: &dyn Fn() -> String,
    ) -> Result<()> {
        check_index(
            s.stack_index.into(),
            self.dict.stack_count(),
            names::STACK,
            || format!("{}.stack_index", at()),
        )?;
        check_index(
            s.link_index.into(),
            self.dict.link_count(),
            names::LINK,
            || format!("{}.link_index", at()),
        )?;
        let (values, times) = (s.values.len(), s.timestamps_unix_nano.len());
        if values == 0 && times == 0 {
            return Err(ValidationError::Invalid {
                field: at(),
                problem: "has neither values nor timestamps".into(),
            });
        }
        if values != 0 && times != 0 && values != times {
            return Err(ValidationError::Invalid {
                field: at(),
                problem: format!("has {values} values but {times} timestamps; they must pair up"),
            });
        }
        let indices = s.attribute_indices;
        if indices.is_empty() {
            return Ok(());
        }
        check_attribute_list(
            &self.dict,
            &mut self.keys,
            indices.iter(),
            MAX_LABELS_PER_SAMPLE,
            || format!("{}.attribute_indices", at()),
        )?;
        if self.array_attributes {
            let labels = label_count(&self.dict, indices.iter());
            if labels > MAX_LABELS_PER_SAMPLE {
                return Err(ValidationError::Invalid {
                    field: format!("{}.attribute_indices", at()),
                    problem: format!(
                        "makes {labels} labels (each array value is one); at most {MAX_LABELS_PER_SAMPLE} are accepted"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The sample as it lies, when its bytes are already the canonical encoding: fields in
/// number order, each at most once, repeated ones packed and not empty, scalars not
/// zero, every varint in its shortest form, indices not negative. Anything else (also
/// what is merely unusual) goes the long way, which re-encodes or refuses it.
fn canonical_sample(body: &[u8]) -> Option<crate::rows::SampleRef<'_>> {
    use crate::rows::{Indices, Timestamps, Values};
    let mut s = crate::rows::SampleRef::default();
    let mut pos = 0usize;
    let mut last_field = 0u8;
    while pos < body.len() {
        let key = body[pos];
        pos += 1;
        let (field, wire_type) = (key >> 3, key & 7);
        if field <= last_field || field > 5 {
            return None;
        }
        last_field = field;
        match (field, wire_type) {
            (1 | 3, 0) => {
                let (v, n) = short_varint(&body[pos..])?;
                if v == 0 || v > i32::MAX as u64 {
                    return None;
                }
                pos += n;
                if field == 1 {
                    s.stack_index = v as i32;
                } else {
                    s.link_index = v as i32;
                }
            }
            (2 | 4 | 5, 2) => {
                let (len, n) = short_varint(&body[pos..])?;
                pos += n;
                let end = pos.checked_add(usize::try_from(len).ok()?)?;
                let packed = body.get(pos..end)?;
                if packed.is_empty() {
                    return None;
                }
                pos = end;
                match field {
                    2 => {
                        every_short_varint(packed, i32::MAX as u64)?;
                        s.attribute_indices = Indices::new(packed);
                    }
                    4 => {
                        every_short_varint(packed, u64::MAX)?;
                        s.values = Values::new(packed);
                    }
                    _ => {
                        if packed.len() % 8 != 0 {
                            return None;
                        }
                        s.timestamps_unix_nano = Timestamps::new(packed);
                    }
                }
            }
            _ => return None,
        }
    }
    Some(s)
}

/// A varint in its shortest form, and its length.
#[inline]
fn short_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            // A last byte of 0 after the first would be a longer form than needed; the
            // tenth byte may hold only the top bit.
            let shortest = i == 0 || b != 0;
            let fits = i < 9 || b <= 1;
            return (shortest && fits).then_some((v, i + 1));
        }
    }
    None
}

/// How many packed varints `bytes` holds, when every one is in its shortest form and at
/// most `max`.
fn every_short_varint(mut bytes: &[u8], max: u64) -> Option<usize> {
    let mut count = 0;
    while !bytes.is_empty() {
        let (v, n) = short_varint(bytes)?;
        if v > max {
            return None;
        }
        bytes = &bytes[n..];
        count += 1;
    }
    Some(count)
}

/// The messages whose prost decoding [`prost_heap`] bounds.
#[derive(Clone, Copy)]
enum ProstMessage {
    Resource,
    Scope,
    KeyValueAndUnit,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
}

/// At most what prost allocates to decode `bytes` as `message`, read from the bytes
/// without decoding them: each element of a repeated message counts three times its
/// size (a vector grown by doubling holds up to twice its length, and the old buffer
/// while it moves), strings and bytes their length. Nesting past prost's own limit is
/// not followed (prost refuses it).
fn prost_heap(bytes: &[u8], message: ProstMessage, depth: usize) -> usize {
    use std::mem::size_of;
    if depth > 100 {
        return 0;
    }
    let element = |n: usize| n.saturating_mul(3);
    let mut total = 0usize;
    let mut r = Reader::new(bytes);
    while let Ok((field, wire)) = r.key() {
        let body = if wire == wire::LEN {
            match r.bytes() {
                Ok(b) => b,
                Err(_) => break,
            }
        } else {
            if r.skip(wire).is_err() {
                break;
            }
            continue;
        };
        let cost = match (message, field) {
            (ProstMessage::Resource, 1)
            | (ProstMessage::Scope, 3)
            | (ProstMessage::KeyValueList, 1) => {
                element(size_of::<KeyValue>()) + prost_heap(body, ProstMessage::KeyValue, depth + 1)
            }
            // Entity references: strings and lists of strings.
            (ProstMessage::Resource, 3) => {
                element(size_of::<profcol_proto::otlp::common::v1::EntityRef>())
                    + body.len().saturating_mul(4)
            }
            (ProstMessage::Scope, 1 | 2) | (ProstMessage::KeyValue, 1) => body.len(),
            (ProstMessage::KeyValue, 2) | (ProstMessage::KeyValueAndUnit, 2) => {
                prost_heap(body, ProstMessage::AnyValue, depth + 1)
            }
            (ProstMessage::AnyValue, 1 | 7) => body.len(),
            (ProstMessage::AnyValue, 5) => prost_heap(body, ProstMessage::ArrayValue, depth + 1),
            (ProstMessage::AnyValue, 6) => prost_heap(body, ProstMessage::KeyValueList, depth + 1),
            (ProstMessage::ArrayValue, 1) => {
                element(size_of::<AnyValue>()) + prost_heap(body, ProstMessage::AnyValue, depth + 1)
            }
            _ => 0,
        };
        total = total.saturating_add(cost);
    }
    total
}

/// How many times field `field` occurs at the top level of `body` (stopping at bytes
/// that do not parse, which the reading that follows reports).
fn count_field(body: &[u8], field: u32) -> usize {
    let mut r = Reader::new(body);
    let mut n = 0;
    while let Ok((f, wire)) = r.key() {
        n += usize::from(f == field);
        if r.skip(wire).is_err() {
            break;
        }
    }
    n
}

fn too_many(field: impl FnOnce() -> String, n: usize, max: usize) -> ValidationError {
    ValidationError::Invalid {
        field: field(),
        problem: format!("has {n} attributes; at most {max} are accepted"),
    }
}

/// Calls `f` for every field of `bytes`.
fn for_each_field<'a>(
    bytes: &'a [u8],
    path: impl Fn() -> String + Copy,
    mut f: impl FnMut(u32, u8, &mut Reader<'a>) -> Result<()>,
) -> Result<()> {
    let mut r = Reader::new(bytes);
    while !r.is_empty() {
        let (field, wire) = r.key().map_err(malformed(path))?;
        f(field, wire, &mut r)?;
    }
    Ok(())
}

/// The values of every occurrence of repeated varint `field` in a body already read once.
fn each_repeated(body: &[u8], field: u32, mut f: impl FnMut(u64)) {
    let mut r = Reader::new(body);
    while let Ok((n, wire)) = r.key() {
        let ok = if n == field {
            r.repeated_varint(wire, &mut f)
        } else {
            r.skip(wire)
        };
        if ok.is_err() {
            break;
        }
    }
}

fn each_repeated_fixed64(body: &[u8], field: u32, mut f: impl FnMut(u64)) {
    let mut r = Reader::new(body);
    while let Ok((n, wire)) = r.key() {
        let ok = if n == field {
            r.repeated_fixed64(wire, &mut f)
        } else {
            r.skip(wire)
        };
        if ok.is_err() {
            break;
        }
    }
}

fn table_name(table: u32) -> &'static str {
    match table {
        1 => names::MAPPING,
        2 => names::LOCATION,
        3 => names::FUNCTION,
        4 => names::LINK,
        5 => names::STRING,
        6 => names::ATTRIBUTE,
        _ => names::STACK,
    }
}

enum EntryError {
    Wire(WireError),
    Invalid(String),
    Full,
}

impl From<WireError> for EntryError {
    fn from(e: WireError) -> Self {
        EntryError::Wire(e)
    }
}

/// Writes the canonical form of `entry` as a new row of `table`.
fn canonical_row(
    table: &mut RowTable,
    entry: &[u8],
    write: impl FnOnce(&[u8], &mut Vec<u8>) -> std::result::Result<(), EntryError>,
) -> std::result::Result<usize, EntryError> {
    let mut outcome = Ok(());
    let pushed = table.push_with(|out| {
        let before = out.len();
        outcome = write(entry, out);
        if outcome.is_err() {
            out.truncate(before);
        }
    });
    outcome?;
    pushed.map_err(|_| EntryError::Full)
}

fn canonical_function(e: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), EntryError> {
    let mut f = crate::rows::Function::default();
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => f.name_strindex = r.int32(wire)?,
            2 => f.system_name_strindex = r.int32(wire)?,
            3 => f.filename_strindex = r.int32(wire)?,
            4 => f.start_line = r.int64(wire)?,
            _ => r.skip(wire)?,
        }
    }
    f.encode(out);
    Ok(())
}

fn canonical_mapping(e: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), EntryError> {
    let (mut start, mut limit, mut offset, mut filename) = (0, 0, 0, 0);
    let (mut attrs, mut attrs_len) = (0usize, 0usize);
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => start = r.uint(wire)?,
            2 => limit = r.uint(wire)?,
            3 => offset = r.uint(wire)?,
            4 => filename = r.int32(wire)?,
            5 => r.repeated_varint(wire, |v| {
                attrs += 1;
                attrs_len += wire::varint_len(i64::from(v as i32) as u64);
            })?,
            _ => r.skip(wire)?,
        }
    }
    if attrs > MAX_ATTRIBUTES_PER_LIST {
        return Err(EntryError::Invalid(format!(
            "attribute_indices has {attrs} attributes; at most {MAX_ATTRIBUTES_PER_LIST} are accepted"
        )));
    }
    put_uint(out, 1, start);
    put_uint(out, 2, limit);
    put_uint(out, 3, offset);
    put_int32(out, 4, filename);
    if attrs > 0 {
        wire::put_key(out, 5, wire::LEN);
        put_varint(out, attrs_len as u64);
        each_repeated(e, 5, |v| put_varint(out, i64::from(v as i32) as u64));
    }
    Ok(())
}

fn canonical_location(e: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), EntryError> {
    let (mut mapping, mut address) = (0i32, 0u64);
    let (mut attrs, mut attrs_len) = (0usize, 0usize);
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => mapping = r.int32(wire)?,
            2 => address = r.uint(wire)?,
            3 => {
                read_line(r.len_field(wire)?)?;
            }
            4 => r.repeated_varint(wire, |v| {
                attrs += 1;
                attrs_len += wire::varint_len(i64::from(v as i32) as u64);
            })?,
            _ => r.skip(wire)?,
        }
    }
    if attrs > MAX_ATTRIBUTES_PER_LIST {
        return Err(EntryError::Invalid(format!(
            "attribute_indices has {attrs} attributes; at most {MAX_ATTRIBUTES_PER_LIST} are accepted"
        )));
    }
    put_int32(out, 1, mapping);
    put_uint(out, 2, address);
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        if field == 3 {
            read_line(r.len_field(wire)?)?.encode_field(out);
        } else {
            r.skip(wire)?;
        }
    }
    if attrs > 0 {
        wire::put_key(out, 4, wire::LEN);
        put_varint(out, attrs_len as u64);
        each_repeated(e, 4, |v| put_varint(out, i64::from(v as i32) as u64));
    }
    Ok(())
}

fn read_line(bytes: &[u8]) -> std::result::Result<Line, WireError> {
    let mut line = Line::default();
    let mut r = Reader::new(bytes);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => line.function_index = r.int32(wire)?,
            2 => line.line = r.int64(wire)?,
            3 => line.column = r.int64(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Ok(line)
}

fn canonical_link(e: &[u8], out: &mut Vec<u8>, first: bool) -> std::result::Result<(), EntryError> {
    let (mut trace, mut span): (&[u8], &[u8]) = (&[], &[]);
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => trace = r.len_field(wire)?,
            2 => span = r.len_field(wire)?,
            _ => r.skip(wire)?,
        }
    }
    let mut link = Link::default();
    if first {
        // Both the empty Link{} (as the eBPF profiler sends) and the zero-filled one are
        // the zero value; inside, the zero-filled one is used.
        let zero = trace.iter().chain(span).all(|&b| b == 0)
            && matches!(trace.len(), 0 | 16)
            && matches!(span.len(), 0 | 8);
        if !zero {
            return Err(EntryError::Invalid(
                "must be the zero value Link{} (empty or zero-filled ids)".into(),
            ));
        }
    } else if trace.len() != 16 || span.len() != 8 {
        return Err(EntryError::Invalid(format!(
            "trace_id must be 16 bytes and span_id 8, got {} and {}",
            trace.len(),
            span.len()
        )));
    } else {
        link.trace_id.copy_from_slice(trace);
        link.span_id.copy_from_slice(span);
    }
    link.encode(out);
    Ok(())
}

fn canonical_attribute(
    e: &[u8],
    out: &mut Vec<u8>,
    zero_row: bool,
) -> std::result::Result<(), EntryError> {
    let (mut key, mut unit) = (0i32, 0i32);
    let mut value: Option<&[u8]> = None;
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => key = r.int32(wire)?,
            2 => value = Some(r.len_field(wire)?),
            3 => unit = r.int32(wire)?,
            _ => r.skip(wire)?,
        }
    }
    put_int32(out, 1, key);
    if let Some(bytes) = value {
        // prost checks it (and bounds its nesting at 100) and writes it canonically.
        let v = AnyValue::decode(bytes)
            .map_err(|e| EntryError::Invalid(format!("value: not protobuf: {e}")))?;
        // Go's pdata writes every attribute's value message, so its attribute_table[0]
        // is `value: {}`: the zero value for every reader, and stored as one.
        if zero_row && key == 0 && unit == 0 && v.value.is_none() {
            return Ok(());
        }
        wire::put_key(out, 2, wire::LEN);
        put_varint(out, v.encoded_len() as u64);
        v.encode_raw(out);
    }
    put_int32(out, 3, unit);
    Ok(())
}

fn canonical_stack(e: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), EntryError> {
    // Already canonical (one packed, non-empty list of short non-negative varints): as is.
    if let [0x0a, rest @ ..] = e
        && let Some((len, n)) = short_varint(rest)
        && rest.len() - n == len as usize
        && let Some(count) = every_short_varint(&rest[n..], i32::MAX as u64)
        && (1..=MAX_STACK_DEPTH).contains(&count)
    {
        out.extend_from_slice(e);
        return Ok(());
    }
    let (mut n, mut len) = (0usize, 0usize);
    let mut r = Reader::new(e);
    while !r.is_empty() {
        let (field, wire) = r.key()?;
        if field == 1 {
            r.repeated_varint(wire, |v| {
                n += 1;
                len += wire::varint_len(i64::from(v as i32) as u64);
            })?;
        } else {
            r.skip(wire)?;
        }
    }
    if n > MAX_STACK_DEPTH {
        return Err(EntryError::Invalid(format!(
            "location_indices has {n} locations; at most {MAX_STACK_DEPTH} are accepted"
        )));
    }
    if n > 0 {
        wire::put_key(out, 1, wire::LEN);
        put_varint(out, len as u64);
        each_repeated(e, 1, |v| put_varint(out, i64::from(v as i32) as u64));
    }
    Ok(())
}

/// Lists up to this long are checked for repeated keys by a scan, longer ones by sorting.
const SHORT_LIST: usize = 16;

/// An attribute list: at most `max` long, every index in range, and each key named once
/// (the spec's MUST). Short lists, the usual case, are scanned; long ones sorted, so a
/// sender cannot make this quadratic.
fn check_attribute_list(
    d: &Dictionary,
    keys: &mut Vec<i32>,
    indices: impl Iterator<Item = i32> + Clone,
    max: usize,
    field: impl Fn() -> String,
) -> Result<()> {
    let n = indices.clone().count();
    if n > max {
        return Err(too_many(&field, n, max));
    }
    let len = d.attribute_count();
    for (i, index) in indices.clone().enumerate() {
        check_index(index.into(), len, names::ATTRIBUTE, || {
            format!("{}[{i}]", field())
        })?;
    }
    let key = |i: i32| d.attribute_key(i);
    let repeated = |a: i32, b: i32| ValidationError::Invalid {
        field: field(),
        problem: format!("attributes {a} and {b} have the same key; a list may name a key once"),
    };
    if n <= SHORT_LIST {
        let mut seen = [(0i32, 0i32); SHORT_LIST];
        for (count, b) in indices.filter(|&i| i != 0).enumerate() {
            let kb = key(b);
            if let Some(&(a, _)) = seen[..count].iter().find(|(_, ka)| *ka == kb) {
                return Err(repeated(a, b));
            }
            seen[count] = (b, kb);
        }
        return Ok(());
    }
    keys.clear();
    keys.extend(indices.filter(|&i| i != 0));
    keys.sort_unstable_by_key(|&i| (key(i), i));
    for pair in keys.windows(2) {
        if key(pair[0]) == key(pair[1]) {
            return Err(repeated(pair[0], pair[1]));
        }
    }
    Ok(())
}

/// How many pprof labels a sample's attributes make: one per value, so an array counts
/// each of its values (an empty one as one).
pub(crate) fn label_count(d: &Dictionary, indices: impl Iterator<Item = i32>) -> usize {
    indices
        .map(|i| match d.attribute(i).value {
            Some(AnyValueRef::Array(bytes)) => array_len(bytes).max(1),
            _ => 1,
        })
        .fold(0usize, usize::saturating_add)
}

/// Entries of an encoded `ArrayValue`.
pub(crate) fn array_len(bytes: &[u8]) -> usize {
    let mut r = Reader::new(bytes);
    let mut n = 0;
    while let Ok((field, wire)) = r.key() {
        if r.skip(wire).is_err() {
            break;
        }
        n += usize::from(field == 1);
    }
    n
}

/// `string_value_strindex` references inside an encoded attribute value must name
/// strings of the table.
fn check_string_references(
    bytes: &[u8],
    strings: usize,
    depth: usize,
    path: &dyn Fn() -> String,
) -> Result<()> {
    if depth > 100 {
        return Err(ValidationError::Invalid {
            field: path(),
            problem: "attribute value nested more than 100 levels deep".into(),
        });
    }
    match crate::rows::any_value(bytes) {
        AnyValueRef::StringIndex(i) => check_index(i.into(), strings, names::STRING, || {
            format!("{}.string_value_strindex", path())
        }),
        AnyValueRef::Array(a) => {
            let mut r = Reader::new(a);
            let mut n = 0;
            while let Ok((field, wire)) = r.key() {
                let Ok(v) = r.len_field(wire) else { break };
                if field == 1 {
                    check_string_references(v, strings, depth + 1, &|| {
                        format!("{}.array_value[{n}]", path())
                    })?;
                    n += 1;
                }
            }
            Ok(())
        }
        AnyValueRef::KvList(l) => {
            let mut r = Reader::new(l);
            let mut n = 0;
            while let Ok((field, wire)) = r.key() {
                let Ok(kv) = r.len_field(wire) else { break };
                if field != 1 {
                    continue;
                }
                let mut kr = Reader::new(kv);
                while let Ok((f, w)) = kr.key() {
                    match (f, w) {
                        (2, wire::LEN) => {
                            let Ok(v) = kr.bytes() else { break };
                            check_string_references(v, strings, depth + 1, &|| {
                                format!("{}.kvlist_value[{n}].value", path())
                            })?;
                        }
                        (3, wire::VARINT) => {
                            let Ok(k) = kr.varint() else { break };
                            check_index(i64::from(k as i32), strings, names::STRING, || {
                                format!("{}.kvlist_value[{n}].key_strindex", path())
                            })?;
                        }
                        _ => {
                            if kr.skip(w).is_err() {
                                break;
                            }
                        }
                    }
                }
                n += 1;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Roughly the heap a list of decoded key-values holds.
fn key_values_heap(kvs: &[KeyValue]) -> usize {
    kvs.iter()
        .map(|kv| {
            std::mem::size_of::<KeyValue>()
                + kv.key.len()
                + kv.value.as_ref().map_or(0, any_value_heap)
        })
        .sum()
}

fn any_value_heap(v: &AnyValue) -> usize {
    use any_value::Value;
    match &v.value {
        Some(Value::StringValue(s)) => s.len(),
        Some(Value::BytesValue(b)) => b.len(),
        Some(Value::ArrayValue(a)) => a
            .values
            .iter()
            .map(|v| std::mem::size_of::<AnyValue>() + any_value_heap(v))
            .sum(),
        Some(Value::KvlistValue(l)) => key_values_heap(&l.values),
        _ => 0,
    }
}

/// Resolves `key_strindex` and `string_value_strindex` in resource and scope attributes
/// to inline strings (components read them by key), each copy charged to `budget`.
fn resolve_key_values(
    strings: &StringTable,
    budget: &mut CopyBudget,
    kvs: &mut [KeyValue],
    path: &dyn Fn() -> String,
) -> Result<()> {
    for (i, kv) in kvs.iter_mut().enumerate() {
        let here = || format!("{}[{i}]", path());
        // An inline key wins over a (possibly stale) reference; index 0 means unset.
        if kv.key.is_empty() && kv.key_strindex != 0 {
            kv.key = copy_string(strings, budget, kv.key_strindex, &|| {
                format!("{}.key_strindex", here())
            })?;
        } else if kv.key_strindex < 0 {
            return Err(ValidationError::IndexOutOfRange {
                field: format!("{}.key_strindex", here()),
                table: names::STRING,
                index: i64::from(kv.key_strindex),
                len: strings.len(),
            });
        }
        kv.key_strindex = 0;
        if let Some(v) = kv.value.as_mut() {
            resolve_any_value(strings, budget, v, &|| format!("{}.value", here()), 0)?;
        }
    }
    Ok(())
}

fn resolve_any_value(
    strings: &StringTable,
    budget: &mut CopyBudget,
    value: &mut AnyValue,
    path: &dyn Fn() -> String,
    depth: usize,
) -> Result<()> {
    use any_value::Value;
    if depth > 100 {
        return Err(ValidationError::Invalid {
            field: path(),
            problem: "attribute value nested more than 100 levels deep".into(),
        });
    }
    match &mut value.value {
        Some(Value::StringValueStrindex(i)) => {
            let s = copy_string(strings, budget, *i, &|| {
                format!("{}.string_value_strindex", path())
            })?;
            value.value = Some(Value::StringValue(s));
        }
        Some(Value::ArrayValue(a)) => {
            for (i, v) in a.values.iter_mut().enumerate() {
                resolve_any_value(
                    strings,
                    budget,
                    v,
                    &|| format!("{}.array_value[{i}]", path()),
                    depth + 1,
                )?;
            }
        }
        Some(Value::KvlistValue(l)) => {
            let p = || format!("{}.kvlist_value", path());
            resolve_key_values(strings, budget, &mut l.values, &p)?;
        }
        _ => {}
    }
    Ok(())
}

fn copy_string(
    strings: &StringTable,
    budget: &mut CopyBudget,
    index: i32,
    path: &dyn Fn() -> String,
) -> Result<String> {
    let s = usize::try_from(index)
        .ok()
        .and_then(|i| strings.get(i))
        .ok_or_else(|| ValidationError::IndexOutOfRange {
            field: path(),
            table: names::STRING,
            index: i64::from(index),
            len: strings.len(),
        })?;
    budget.charge(s.len()).map_err(|total| ValidationError::Invalid {
        field: path(),
        problem: format!(
            "string references would copy more than {total} bytes (four times the string table plus 1 MiB)"
        ),
    })?;
    Ok(s.to_owned())
}

/// The value of an attribute as a string, following a string reference.
pub fn attribute_str<'a>(d: &'a Dictionary, a: &AttributeRef<'a>) -> Option<&'a str> {
    match a.value? {
        AnyValueRef::String(s) => Some(s),
        AnyValueRef::StringIndex(i) => Some(d.string(i)),
        _ => None,
    }
}
