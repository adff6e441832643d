//! [`ProfileBatch`]: what flows between components.

use std::sync::Arc;

use crate::decode::{ValidationError, decode};
use crate::dictionary::Dictionary;
use crate::encode::{self, Sizes};
use crate::profile::{Profile, ResourceProfiles};

/// Who sent a batch, as the receiver saw it; processors that associate data with its
/// source (k8s_attributes' `connection` rule) read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub addr: Option<std::net::SocketAddr>,
}

/// A self-contained set of profiles: its own dictionary plus resource → scope → profile →
/// sample. Cloning is two reference-count bumps; editing copies only what is shared.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileBatch {
    dictionary: Arc<Dictionary>,
    resource_profiles: Arc<Vec<ResourceProfiles>>,
    client: Option<Arc<ClientInfo>>,
}

impl ProfileBatch {
    /// Decodes OTLP protobuf (`ProfilesData` or `ExportProfilesServiceRequest`), checking
    /// it whole: the one door for bytes from outside.
    pub fn decode(bytes: &[u8]) -> Result<Self, ValidationError> {
        let (dictionary, resource_profiles) = decode(bytes)?;
        Ok(Self::from_parts(dictionary, resource_profiles))
    }

    /// Checks OTLP data given as its generated types (read from JSON, or built by a
    /// test) and brings it into the model: it is encoded and decoded, so it passes the
    /// same door as bytes do.
    pub fn new(
        data: profcol_proto::otlp::profiles::v1development::ProfilesData,
    ) -> Result<Self, ValidationError> {
        use prost::Message;
        Self::decode(&data.encode_to_vec())
    }

    /// Reads OTLP/JSON (`ProfilesData` or `ExportProfilesServiceRequest`) and checks it.
    pub fn from_json(bytes: &[u8]) -> Result<Self, crate::otlp_json::FromJsonError> {
        let data = crate::otlp_json::read_profiles_json(bytes)?;
        Ok(Self::new(data)?)
    }

    /// The batch as compact OTLP/JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::new();
        crate::otlp_json::write_profiles_json(&self.dictionary, &self.resource_profiles, &mut out);
        out
    }

    /// Decodes bytes the collector wrote itself, allowing `budget` bytes of memory (see
    /// [`crate::decode::decode_within`]).
    pub fn decode_within(bytes: &[u8], budget: usize) -> Result<Self, ValidationError> {
        let (dictionary, resource_profiles) = crate::decode::decode_within(bytes, budget)?;
        Ok(Self::from_parts(dictionary, resource_profiles))
    }

    /// For data built inside the collector with a [`crate::DictionaryBuilder`], which is
    /// valid by construction.
    pub fn from_parts(dictionary: Dictionary, resource_profiles: Vec<ResourceProfiles>) -> Self {
        ProfileBatch {
            dictionary: Arc::new(dictionary),
            resource_profiles: Arc::new(resource_profiles),
            client: None,
        }
    }

    /// A batch of `profiles` translated from one source (a pprof, a JFR recording): one
    /// resource with `resource_attributes` (none when empty) and one scope.
    pub fn of_one_scope(
        dictionary: Dictionary,
        resource_attributes: Vec<profcol_proto::otlp::common::v1::KeyValue>,
        scope: Option<profcol_proto::otlp::common::v1::InstrumentationScope>,
        profiles: Vec<Profile>,
    ) -> Self {
        let resource = (!resource_attributes.is_empty()).then(|| {
            profcol_proto::otlp::resource::v1::Resource {
                attributes: resource_attributes,
                ..Default::default()
            }
        });
        ProfileBatch::from_parts(
            dictionary,
            vec![ResourceProfiles {
                resource,
                scope_profiles: vec![crate::profile::ScopeProfiles {
                    scope,
                    profiles,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        )
    }

    /// The same batch, marked with who sent it.
    pub fn with_client(mut self, client: ClientInfo) -> Self {
        self.client = Some(Arc::new(client));
        self
    }

    pub fn client(&self) -> Option<&ClientInfo> {
        self.client.as_deref()
    }

    pub fn empty() -> Self {
        Self::from_parts(Dictionary::zero(), Vec::new())
    }

    pub fn dictionary(&self) -> &Dictionary {
        &self.dictionary
    }

    /// The shared dictionary itself (for batches that keep using it).
    pub fn dictionary_arc(&self) -> &Arc<Dictionary> {
        &self.dictionary
    }

    pub fn resource_profiles(&self) -> &[ResourceProfiles] {
        &self.resource_profiles
    }

    /// Mutable access for processors; copies the resource tree only if another holder
    /// still shares it. Indices written here must stay within the dictionary.
    pub fn resource_profiles_mut(&mut self) -> &mut Vec<ResourceProfiles> {
        Arc::make_mut(&mut self.resource_profiles)
    }

    /// Mutable access to the dictionary; copies it only if it is shared.
    pub fn dictionary_mut(&mut self) -> &mut Dictionary {
        Arc::make_mut(&mut self.dictionary)
    }

    /// Whether both parts are shared with no other batch (a mutation would not copy).
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.dictionary) == 1 && Arc::strong_count(&self.resource_profiles) == 1
    }

    /// The number of `Sample` messages, as otelcol counts "profile samples".
    pub fn sample_count(&self) -> usize {
        self.profiles().map(|p| p.samples.len()).sum()
    }

    pub fn profile_count(&self) -> usize {
        self.profiles().count()
    }

    pub fn is_empty(&self) -> bool {
        self.profiles().all(|p| p.samples.is_empty())
    }

    /// Every profile, in resource → scope → profile order.
    pub fn profiles(&self) -> impl Iterator<Item = &Profile> {
        self.resource_profiles
            .iter()
            .flat_map(|rp| rp.scope_profiles.iter())
            .flat_map(|sp| sp.profiles.iter())
    }

    /// Length of the protobuf encoding.
    pub fn encoded_len(&self) -> usize {
        Sizes::of(&self.dictionary, &self.resource_profiles).total()
    }

    /// Appends the protobuf encoding (`ProfilesData`, which is also an
    /// `ExportProfilesServiceRequest`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let sizes = Sizes::of(&self.dictionary, &self.resource_profiles);
        encode::encode(out, &self.dictionary, &self.resource_profiles, &sizes);
    }

    pub fn encode_to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// The batch as OTLP's generated types. It allocates per sample: for tests and tools
    /// that want the wire types whole, never for a hot path.
    pub fn to_profiles_data(&self) -> profcol_proto::otlp::profiles::v1development::ProfilesData {
        use prost::Message;
        // The model's own encoding always decodes; a default stands in rather than a panic.
        profcol_proto::otlp::profiles::v1development::ProfilesData::decode(
            self.encode_to_vec().as_slice(),
        )
        .unwrap_or_default()
    }

    /// The batch as OTLP's generated types, with accessors named as the model's: what
    /// tests and tools inspect when they want plain structs. It allocates per sample.
    pub fn to_wire(&self) -> WireBatch {
        let data = self.to_profiles_data();
        WireBatch {
            dictionary: data.dictionary.unwrap_or_default(),
            resource_profiles: data.resource_profiles,
            client: self.client.as_deref().cloned(),
        }
    }

    /// Heap bytes the batch holds (dictionary, samples, the tree's own structs).
    pub fn heap_bytes(&self) -> usize {
        let tree: usize = self
            .resource_profiles
            .iter()
            .map(|rp| {
                std::mem::size_of::<ResourceProfiles>()
                    + rp.scope_profiles
                        .iter()
                        .map(|sp| {
                            std::mem::size_of_val(sp)
                                + sp.profiles
                                    .iter()
                                    .map(|p| std::mem::size_of::<Profile>() + p.heap_bytes())
                                    .sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum();
        self.dictionary.heap_bytes() + tree
    }
}

/// A batch as OTLP's generated types ([`ProfileBatch::to_wire`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireBatch {
    pub dictionary: profcol_proto::otlp::profiles::v1development::ProfilesDictionary,
    pub resource_profiles: Vec<profcol_proto::otlp::profiles::v1development::ResourceProfiles>,
    pub client: Option<ClientInfo>,
}

impl WireBatch {
    pub fn dictionary(&self) -> &profcol_proto::otlp::profiles::v1development::ProfilesDictionary {
        &self.dictionary
    }

    pub fn resource_profiles(
        &self,
    ) -> &[profcol_proto::otlp::profiles::v1development::ResourceProfiles] {
        &self.resource_profiles
    }

    pub fn profiles(
        &self,
    ) -> impl Iterator<Item = &profcol_proto::otlp::profiles::v1development::Profile> {
        self.resource_profiles
            .iter()
            .flat_map(|rp| &rp.scope_profiles)
            .flat_map(|sp| &sp.profiles)
    }

    pub fn sample_count(&self) -> usize {
        self.profiles().map(|p| p.samples.len()).sum()
    }

    pub fn profile_count(&self) -> usize {
        self.profiles().count()
    }

    /// Whether no profile holds a sample.
    pub fn is_empty(&self) -> bool {
        self.profiles().all(|p| p.samples.is_empty())
    }

    pub fn client(&self) -> Option<&ClientInfo> {
        self.client.as_ref()
    }

    /// The value of the attribute keyed `key` among `indices` of `d`'s attribute table.
    pub fn attribute_value<'a>(
        d: &'a profcol_proto::otlp::profiles::v1development::ProfilesDictionary,
        indices: &[i32],
        key: &str,
    ) -> Option<&'a profcol_proto::otlp::common::v1::AnyValue> {
        indices
            .iter()
            .filter_map(|&i| d.attribute_table.get(usize::try_from(i).ok()?))
            .find(|kv| {
                usize::try_from(kv.key_strindex)
                    .ok()
                    .and_then(|k| d.string_table.get(k))
                    .is_some_and(|k| k == key)
            })?
            .value
            .as_ref()
    }
}
