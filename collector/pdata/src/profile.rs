//! Resource → scope → profile: the tree above the samples. Small and few, so plain
//! owned structs with OTLP's field names; the samples inside are [`Samples`].

pub use profcol_proto::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue};
pub use profcol_proto::otlp::profiles::v1development::ValueType;
pub use profcol_proto::otlp::resource::v1::Resource;

use crate::samples::Samples;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceProfiles {
    pub resource: Option<Resource>,
    pub scope_profiles: Vec<ScopeProfiles>,
    pub schema_url: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScopeProfiles {
    pub scope: Option<InstrumentationScope>,
    pub profiles: Vec<Profile>,
    pub schema_url: String,
}

/// One profile: one sample type, its samples, and when and how they were taken.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub sample_type: ValueType,
    pub samples: Samples,
    pub time_unix_nano: u64,
    pub duration_nano: u64,
    pub period_type: ValueType,
    pub period: i64,
    /// Empty, or 16 bytes not all zero.
    pub profile_id: Vec<u8>,
    pub dropped_attributes_count: u32,
    pub original_payload_format: String,
    pub original_payload: Vec<u8>,
    pub attribute_indices: Vec<i32>,
}

impl Profile {
    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.samples.heap_bytes()
            + self.profile_id.capacity()
            + self.original_payload_format.capacity()
            + self.original_payload.capacity()
            + self.attribute_indices.capacity() * 4
    }
}
