//! [`ProfileBatch`]: what flows between components.

use std::sync::Arc;

use prost::Message;
use prost::bytes::BufMut;

use super::encode::{self, Sizes};
use super::types::{ProfilesData, ProfilesDictionary, ResourceProfiles};
use super::validate::{ValidationError, check_built, fill_value_types, validate_and_normalize};

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
    dictionary: Arc<ProfilesDictionary>,
    resource_profiles: Arc<Vec<ResourceProfiles>>,
    client: Option<Arc<ClientInfo>>,
}

impl ProfileBatch {
    /// Validates `data` and brings it to the inner form (zero values present, attribute
    /// references resolved inline). This is the one door into the collector.
    pub fn new(mut data: ProfilesData) -> Result<Self, ValidationError> {
        validate_and_normalize(&mut data)?;
        Ok(Self::from_valid(
            data.dictionary.unwrap_or_default(),
            data.resource_profiles,
        ))
    }

    /// For data built with [`super::DictionaryBuilder`] inside the collector, which is valid by
    /// construction. Debug builds still check it.
    pub fn from_valid(
        dictionary: ProfilesDictionary,
        mut resource_profiles: Vec<ResourceProfiles>,
    ) -> Self {
        fill_value_types(&mut resource_profiles);
        // Checked in place: a copy would double the memory of every batch built in a
        // debug build, and the tests measure memory on debug builds.
        debug_assert!(
            check_built(&dictionary, &resource_profiles).map_err(|e| e.to_string()) == Ok(()),
            "ProfileBatch::from_valid given invalid data"
        );
        ProfileBatch {
            dictionary: Arc::new(dictionary),
            resource_profiles: Arc::new(resource_profiles),
            client: None,
        }
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
        Self::from_valid(super::DictionaryBuilder::new().finish(), Vec::new())
    }

    pub fn dictionary(&self) -> &ProfilesDictionary {
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

    /// Mutable access to the dictionary; copies it only if it is shared. Entries may be
    /// appended, never removed or reordered.
    pub fn dictionary_mut(&mut self) -> &mut ProfilesDictionary {
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
    pub fn profiles(&self) -> impl Iterator<Item = &super::types::Profile> {
        self.resource_profiles
            .iter()
            .flat_map(|rp| rp.scope_profiles.iter())
            .flat_map(|sp| sp.profiles.iter())
    }

    /// Length of the protobuf encoding, which is the same for `ProfilesData` and
    /// `ExportProfilesServiceRequest` (fields 1 and 2 agree).
    pub fn encoded_len(&self) -> usize {
        Sizes::of(&self.resource_profiles).total(&self.dictionary)
    }

    /// Writes the protobuf encoding straight from the shared parts, with no intermediate
    /// copy, sizing each nested message once.
    pub fn encode(&self, buf: &mut impl BufMut) {
        let sizes = Sizes::of(&self.resource_profiles);
        encode::encode(&self.resource_profiles, &self.dictionary, &sizes, buf);
    }

    pub fn encode_to_vec(&self) -> Vec<u8> {
        let sizes = Sizes::of(&self.resource_profiles);
        let mut out = Vec::with_capacity(sizes.total(&self.dictionary));
        encode::encode(&self.resource_profiles, &self.dictionary, &sizes, &mut out);
        out
    }

    /// Decodes and validates protobuf `ProfilesData` / `ExportProfilesServiceRequest` bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, super::codec::DecodeError> {
        let data = ProfilesData::decode(bytes).map_err(super::codec::DecodeError::Protobuf)?;
        Ok(Self::new(data)?)
    }

    /// A deep copy as the wire message.
    pub fn to_profiles_data(&self) -> ProfilesData {
        ProfilesData {
            dictionary: Some((*self.dictionary).clone()),
            resource_profiles: (*self.resource_profiles).clone(),
        }
    }

    /// The wire message, copying only what another holder still shares.
    pub fn into_profiles_data(self) -> ProfilesData {
        ProfilesData {
            dictionary: Some(Arc::unwrap_or_clone(self.dictionary)),
            resource_profiles: Arc::unwrap_or_clone(self.resource_profiles),
        }
    }

    /// OTLP/JSON text of this batch.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::new();
        super::otlp_json::write_profiles_json(&self.dictionary, &self.resource_profiles, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdata::DictionaryBuilder;
    use crate::pdata::types::{Profile, Sample, ScopeProfiles};
    use profcol_proto::otlp::collector::profiles::v1development::ExportProfilesServiceRequest;

    fn small_batch() -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let stack = b.stack(&[]);
        let samples_type = b.string("samples");
        let profile = Profile {
            sample_type: Some(crate::pdata::types::ValueType {
                type_strindex: samples_type,
                unit_strindex: 0,
            }),
            samples: vec![Sample {
                stack_index: stack,
                values: vec![3],
                ..Default::default()
            }],
            ..Default::default()
        };
        ProfileBatch::from_valid(
            b.finish(),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    #[test]
    fn encoding_matches_prost_for_both_messages() {
        let batch = small_batch();
        let bytes = batch.encode_to_vec();
        assert_eq!(bytes.len(), batch.encoded_len());
        assert_eq!(bytes, batch.to_profiles_data().encode_to_vec());
        let request =
            ExportProfilesServiceRequest::decode(bytes.as_slice()).expect("decodes as request");
        assert_eq!(request.resource_profiles, batch.resource_profiles());
        assert_eq!(ProfileBatch::decode(&bytes).expect("round trip"), batch);
    }

    #[test]
    fn clones_share_until_one_is_edited() {
        let a = small_batch();
        let mut b = a.clone();
        assert!(!b.is_unique());
        b.resource_profiles_mut()[0].schema_url = "x".into();
        assert_eq!(a.resource_profiles()[0].schema_url, "");
        assert_eq!(b.resource_profiles()[0].schema_url, "x");
        // The dictionary was not edited, so it is still shared.
        assert!(std::ptr::eq(a.dictionary(), b.dictionary()));
        assert_eq!(a.sample_count(), 1);
    }
}

#[cfg(test)]
mod reference_form_tests {
    use super::*;
    use crate::pdata::types::Value;

    /// Go's reference marshaler interns resource keys and values into the string table;
    /// the edge resolves them so that everything inside carries inline keys.
    #[test]
    fn references_in_json_input_come_out_inline() {
        let json = br#"{"resourceProfiles":[{"resource":{"attributes":[
            {"keyStrindex":1,"value":{"stringValueStrindex":2}},
            {"key":"host.name","keyStrindex":3,"value":{"stringValue":"node-1"}}]},
          "scopeProfiles":[{"scope":{"name":"s","attributes":[{"keyStrindex":3,"value":{"kvlistValue":{"values":[{"keyStrindex":1,"value":{"stringValueStrindex":2}}]}}}]},
            "profiles":[{"sampleType":{"typeStrindex":4},"samples":[{"timestampsUnixNano":["1700000000000000000"]}]}]}]}],
          "dictionary":{"stringTable":["","service.name","cart","stale","samples"],
            "attributeTable":[{},{"keyStrindex":1,"value":{"stringValueStrindex":2}}]}}"#;
        let data = crate::pdata::otlp_json::read_profiles_json(json).expect("parses");
        let batch = ProfileBatch::new(data).expect("valid");
        let attrs = &batch.resource_profiles()[0]
            .resource
            .as_ref()
            .expect("resource")
            .attributes;
        assert_eq!(attrs[0].key, "service.name");
        assert_eq!(
            attrs[0].value.as_ref().and_then(|v| v.value.clone()),
            Some(Value::StringValue("cart".into()))
        );
        // An inline key wins over a stale reference.
        assert_eq!(attrs[1].key, "host.name");
        assert!(attrs.iter().all(|kv| kv.key_strindex == 0));
        let scope_attr = &batch.resource_profiles()[0].scope_profiles[0]
            .scope
            .as_ref()
            .expect("scope")
            .attributes[0];
        assert_eq!(scope_attr.key, "stale");
        let table_value = batch.dictionary().attribute_table[1]
            .value
            .as_ref()
            .and_then(|v| v.value.clone());
        assert_eq!(table_value, Some(Value::StringValue("cart".into())));
        // Output is inline: resource and scope attributes carry their keys and values,
        // and no value refers to the string table any more.
        let out = String::from_utf8(batch.to_json()).expect("utf8");
        assert!(
            out.contains(r#"{"key":"service.name","value":{"stringValue":"cart"}}"#),
            "{out}"
        );
        assert!(!out.contains("stringValueStrindex"), "{out}");
    }
}
