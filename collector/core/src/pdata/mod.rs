//! The shared profile model.
//!
//! A [`ProfileBatch`] is an OTLP `ProfilesData` held behind two `Arc`s: cloning it for a
//! second pipeline is two reference-count bumps, and a processor that edits it copies only
//! what is still shared. Batches are validated once, where they enter ([`ProfileBatch::new`]);
//! inside the collector every index is trusted.

mod attributes;
mod batch;
mod builder;
pub mod codec;
mod encode;
pub mod limits;
mod merge;
pub mod otlp_json;
pub mod pprof;
pub mod summary;
mod validate;

pub use attributes::{any_value_to_string, attribute_value, semconv, service_name};
pub use batch::{ClientInfo, ProfileBatch};
pub use builder::DictionaryBuilder;
pub use merge::{Merger, merge};
pub use validate::ValidationError;

/// The OTLP wire types the model is made of.
pub mod types {
    pub use profcol_proto::otlp::collector::profiles::v1development::{
        ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
    };
    pub use profcol_proto::otlp::common::v1::{
        AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
        any_value::Value,
    };
    pub use profcol_proto::otlp::profiles::v1development::{
        Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile, ProfilesData,
        ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
    };
    pub use profcol_proto::otlp::resource::v1::Resource;
}
