//! The shared profile model, as components see it through `profcol-core`: the lean model
//! of [`profcol_pdata`], the OTLP wire types it is decoded from and encoded to, and
//! [`codec`], which tells formats apart and undoes compression at the edges.
//!
//! A [`ProfileBatch`] is validated once, where it enters (`ProfileBatch::decode`, the
//! pprof translation, or a builder's `finish`); inside the collector every index is
//! trusted. Cloning one for a second pipeline bumps reference counts; a processor that
//! edits it copies only what is still shared.

pub use profcol_pdata::*;

pub mod codec;

/// The OTLP wire types: what requests and responses are made of, and what tests build
/// inputs from. The model itself holds none of them per sample.
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
