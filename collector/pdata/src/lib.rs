//! The shared profile model: OTLP profiles as every component sees them.
//!
//! Rows of the dictionary and the samples of each profile are held as their canonical
//! protobuf encoding, back to back in one buffer per table or profile: memory close to
//! the wire size whatever the input's shape, no allocation per sample or per row, and
//! encoding that copies. Views ([`rows`]) read them back; builders write them.

pub mod attributes;
pub mod batch;
pub mod decode;
pub mod dictionary;
mod encode;
pub mod limits;
pub mod merge;
pub mod otlp_json;
pub mod pprof;
pub mod profile;
pub mod rows;
pub mod samples;
pub mod subset;
pub mod summary;
pub mod table;
pub mod testing;
pub mod wire;

#[cfg(test)]
mod tests;

pub use attributes::{any_value_to_string, attribute_value, semconv, service_name, value_str};
pub use batch::{ClientInfo, ProfileBatch, WireBatch};
pub use decode::{ValidationError, attribute_str};
pub use dictionary::{Dictionary, DictionaryBuilder};
pub use merge::{Merger, merge};
pub use profile::{Profile, ResourceProfiles, ScopeProfiles, ValueType};
pub use rows::{
    AnyValueRef, AttributeRef, Function, Indices, Line, Lines, Link, Location, LocationRef,
    Mapping, MappingRef, Sample, SampleRef, StackRef, Timestamps, Values,
};
pub use samples::Samples;
pub use subset::Subset;
pub use table::{RowTable, StringTable, TableFull};
