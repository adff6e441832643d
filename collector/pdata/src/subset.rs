//! Copying part of a batch into a dictionary of its own: entries are copied from the
//! source dictionary on first use, so the new dictionary holds only what the copied
//! profiles and samples refer to. The batch processor cuts large batches this way, so
//! each part is self-contained and no larger than it must be.

use crate::dictionary::{Dictionary, DictionaryBuilder};
use crate::profile::{Profile, ValueType};
use crate::rows::{Function, Line, Mapping, SampleRef};
use crate::samples::Samples;
use crate::table::TableFull;

/// Where entries of the source landed; 0 means not copied yet (index 0, the zero value,
/// maps to 0 without a lookup).
#[derive(Debug, Default)]
struct Landed(Vec<i32>);

impl Landed {
    fn get(&self, i: i32) -> Option<i32> {
        let j = *self.0.get(usize::try_from(i).ok()?)?;
        (j != 0).then_some(j)
    }

    fn set(&mut self, i: i32, j: i32) {
        let Ok(i) = usize::try_from(i) else { return };
        if i >= self.0.len() {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = j;
    }
}

/// Where the entries of one source dictionary landed in a target builder, filled in as
/// they are first copied. Reset when the source changes.
#[derive(Debug, Default)]
pub(crate) struct Landing {
    strings: Landed,
    functions: Landed,
    mappings: Landed,
    locations: Landed,
    stacks: Landed,
    links: Landed,
    attributes: Landed,
    scratch: Vec<i32>,
    attributes_scratch: Vec<i32>,
    lines: Vec<Line>,
}

impl Landing {
    /// Forgets every landing (keeping the memory), for another source.
    pub(crate) fn reset(&mut self) {
        for l in [
            &mut self.strings,
            &mut self.functions,
            &mut self.mappings,
            &mut self.locations,
            &mut self.stacks,
            &mut self.links,
            &mut self.attributes,
        ] {
            l.0.clear();
        }
    }

    pub(crate) fn string(&mut self, src: &Dictionary, dst: &mut DictionaryBuilder, i: i32) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.strings.get(i) {
            return j;
        }
        let j = dst.string(src.string(i));
        self.strings.set(i, j);
        j
    }

    fn function(&mut self, src: &Dictionary, dst: &mut DictionaryBuilder, i: i32) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.functions.get(i) {
            return j;
        }
        let f = src.function(i);
        let f = Function {
            name_strindex: self.string(src, dst, f.name_strindex),
            system_name_strindex: self.string(src, dst, f.system_name_strindex),
            filename_strindex: self.string(src, dst, f.filename_strindex),
            start_line: f.start_line,
        };
        let j = dst.function(f);
        self.functions.set(i, j);
        j
    }

    pub(crate) fn attribute(
        &mut self,
        src: &Dictionary,
        dst: &mut DictionaryBuilder,
        i: i32,
    ) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.attributes.get(i) {
            return j;
        }
        let j = dst.attribute_from(src, i);
        self.attributes.set(i, j);
        j
    }

    pub(crate) fn attribute_list(
        &mut self,
        src: &Dictionary,
        dst: &mut DictionaryBuilder,
        indices: impl Iterator<Item = i32>,
    ) -> Vec<i32> {
        indices.map(|i| self.attribute(src, dst, i)).collect()
    }

    fn mapping(&mut self, src: &Dictionary, dst: &mut DictionaryBuilder, i: i32) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.mappings.get(i) {
            return j;
        }
        let m = src.mapping(i);
        let attributes = self.attribute_list(src, dst, m.attribute_indices.iter());
        let filename = self.string(src, dst, m.filename_strindex);
        let j = dst.mapping(&Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: filename,
            attribute_indices: &attributes,
        });
        self.mappings.set(i, j);
        j
    }

    fn location(&mut self, src: &Dictionary, dst: &mut DictionaryBuilder, i: i32) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.locations.get(i) {
            return j;
        }
        let l = src.location(i);
        let mapping = self.mapping(src, dst, l.mapping_index);
        let attributes = self.attribute_list(src, dst, l.attribute_indices.iter());
        let mut lines = std::mem::take(&mut self.lines);
        lines.clear();
        for line in l.lines.iter() {
            lines.push(Line {
                function_index: self.function(src, dst, line.function_index),
                ..line
            });
        }
        let j = dst.location(&crate::rows::Location {
            mapping_index: mapping,
            address: l.address,
            lines: &lines,
            attribute_indices: &attributes,
        });
        self.lines = lines;
        self.locations.set(i, j);
        j
    }

    fn stack(&mut self, src: &Dictionary, dst: &mut DictionaryBuilder, i: i32) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.stacks.get(i) {
            return j;
        }
        let mut locations = std::mem::take(&mut self.scratch);
        locations.clear();
        for l in src.stack(i).location_indices.iter() {
            locations.push(self.location(src, dst, l));
        }
        let j = dst.stack(&locations);
        self.scratch = locations;
        self.stacks.set(i, j);
        j
    }

    fn link(&mut self, src: &Dictionary, dst: &mut DictionaryBuilder, i: i32) -> i32 {
        if i == 0 {
            return 0;
        }
        if let Some(j) = self.links.get(i) {
            return j;
        }
        let j = dst.link(src.link(i));
        self.links.set(i, j);
        j
    }

    pub(crate) fn value_type(
        &mut self,
        src: &Dictionary,
        dst: &mut DictionaryBuilder,
        vt: ValueType,
    ) -> ValueType {
        ValueType {
            type_strindex: self.string(src, dst, vt.type_strindex),
            unit_strindex: self.string(src, dst, vt.unit_strindex),
        }
    }

    /// Appends sample `s` of `src` to `out`, what it refers to copied into `dst`.
    pub(crate) fn push_sample(
        &mut self,
        src: &Dictionary,
        dst: &mut DictionaryBuilder,
        out: &mut Samples,
        s: &SampleRef<'_>,
    ) {
        let stack = self.stack(src, dst, s.stack_index);
        let link = self.link(src, dst, s.link_index);
        let mut attributes = std::mem::take(&mut self.attributes_scratch);
        attributes.clear();
        for a in s.attribute_indices.iter() {
            attributes.push(self.attribute(src, dst, a));
        }
        out.push_remapped(
            stack,
            attributes.iter().copied(),
            link,
            s.values,
            s.timestamps_unix_nano,
        );
        self.attributes_scratch = attributes;
    }

    /// A copy of profile `p` (of `src`) with the given samples instead of its own, what
    /// they refer to copied into `dst`. `original_payload` goes along only when asked.
    pub(crate) fn profile<'s>(
        &mut self,
        src: &Dictionary,
        dst: &mut DictionaryBuilder,
        p: &Profile,
        samples: impl Iterator<Item = SampleRef<'s>>,
        with_payload: bool,
    ) -> Profile {
        let mut out = Samples::default();
        for s in samples {
            self.push_sample(src, dst, &mut out, &s);
        }
        out.shrink();
        Profile {
            sample_type: self.value_type(src, dst, p.sample_type),
            period_type: self.value_type(src, dst, p.period_type),
            attribute_indices: self.attribute_list(src, dst, p.attribute_indices.iter().copied()),
            samples: out,
            time_unix_nano: p.time_unix_nano,
            duration_nano: p.duration_nano,
            period: p.period,
            profile_id: p.profile_id.clone(),
            dropped_attributes_count: p.dropped_attributes_count,
            original_payload_format: if with_payload {
                p.original_payload_format.clone()
            } else {
                String::new()
            },
            original_payload: if with_payload {
                p.original_payload.clone()
            } else {
                Vec::new()
            },
        }
    }
}

/// Copies entries of `source` into a fresh dictionary on first use.
#[derive(Debug)]
pub struct Subset<'a> {
    source: &'a Dictionary,
    builder: DictionaryBuilder,
    landing: Landing,
}

impl<'a> Subset<'a> {
    pub fn new(source: &'a Dictionary) -> Self {
        Subset {
            source,
            builder: DictionaryBuilder::new(),
            landing: Landing::default(),
        }
    }

    /// The dictionary of everything copied so far.
    pub fn finish(self) -> Result<Dictionary, TableFull> {
        self.builder.finish()
    }

    /// Appends sample `s` of the source to `out`, its indices copied into this subset.
    pub fn push_sample(&mut self, out: &mut Samples, s: &SampleRef<'_>) {
        self.landing
            .push_sample(self.source, &mut self.builder, out, s);
    }

    /// A copy of profile `p` with the given samples (of `p`) and none of its own, its
    /// indices copied into this subset. `original_payload` goes along only when asked.
    pub fn profile<'s>(
        &mut self,
        p: &Profile,
        samples: impl Iterator<Item = SampleRef<'s>>,
        with_payload: bool,
    ) -> Profile {
        self.landing
            .profile(self.source, &mut self.builder, p, samples, with_payload)
    }
}
