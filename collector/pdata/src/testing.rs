//! For tests that write their input as OTLP's generated types: a dictionary builder that
//! takes and gives those types (interning through the model's own builder), and the one
//! door such input goes through into the model, [`batch_from_wire`], which checks it as
//! the receivers do.

use profcol_proto::otlp::common::v1::{AnyValue, any_value::Value};
use profcol_proto::otlp::profiles::v1development as pb;
use prost::Message;

use crate::batch::ProfileBatch;
use crate::dictionary::DictionaryBuilder;
use crate::rows::{Function, Line, Link, Location, Mapping};

/// Interns dictionary entries given as generated types; [`WireDictionaryBuilder::finish`]
/// gives the `ProfilesDictionary`.
#[derive(Debug, Default)]
pub struct WireDictionaryBuilder(DictionaryBuilder);

impl WireDictionaryBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn string(&mut self, s: &str) -> i32 {
        self.0.string(s)
    }

    pub fn function(&mut self, f: pb::Function) -> i32 {
        self.0.function(Function {
            name_strindex: f.name_strindex,
            system_name_strindex: f.system_name_strindex,
            filename_strindex: f.filename_strindex,
            start_line: f.start_line,
        })
    }

    pub fn mapping(&mut self, m: pb::Mapping) -> i32 {
        self.0.mapping(&Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: m.filename_strindex,
            attribute_indices: &m.attribute_indices,
        })
    }

    pub fn location(&mut self, l: pb::Location) -> i32 {
        let lines: Vec<Line> = l
            .lines
            .iter()
            .map(|line| Line {
                function_index: line.function_index,
                line: line.line,
                column: line.column,
            })
            .collect();
        self.0.location(&Location {
            mapping_index: l.mapping_index,
            address: l.address,
            lines: &lines,
            attribute_indices: &l.attribute_indices,
        })
    }

    pub fn stack(&mut self, location_indices: &[i32]) -> i32 {
        self.0.stack(location_indices)
    }

    /// A link; ids of the wrong length read as zero-filled.
    pub fn link(&mut self, trace_id: &[u8], span_id: &[u8]) -> i32 {
        self.0.link(Link {
            trace_id: trace_id.try_into().unwrap_or_default(),
            span_id: span_id.try_into().unwrap_or_default(),
        })
    }

    /// An attribute whose key and unit index this builder's strings.
    pub fn attribute(&mut self, kv: pb::KeyValueAndUnit) -> i32 {
        let value = kv.value.map(|v| v.encode_to_vec());
        self.0
            .attribute_encoded(kv.key_strindex, value.as_deref(), kv.unit_strindex)
    }

    pub fn attribute_kv(&mut self, key: &str, value: Value, unit: &str) -> i32 {
        self.0
            .attribute(key, &AnyValue { value: Some(value) }, unit)
    }

    /// The dictionary as its generated type.
    pub fn finish(self) -> pb::ProfilesDictionary {
        let dictionary = self.0.finish().expect("a test's dictionary fits");
        let bytes = ProfileBatch::from_parts(dictionary, Vec::new()).encode_to_vec();
        pb::ProfilesData::decode(bytes.as_slice())
            .expect("the model's encoding decodes")
            .dictionary
            .unwrap_or_default()
    }
}

/// A batch of generated types, checked as input is checked where it enters.
pub fn batch_from_wire(
    dictionary: pb::ProfilesDictionary,
    resource_profiles: Vec<pb::ResourceProfiles>,
) -> ProfileBatch {
    ProfileBatch::new(pb::ProfilesData {
        dictionary: Some(dictionary),
        resource_profiles,
    })
    .unwrap_or_else(|e| panic!("a test built an invalid batch: {e}"))
}
