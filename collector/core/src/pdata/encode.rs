//! Protobuf encoding of a batch that sizes every nested message once.
//!
//! prost sizes a nested message again at every level it is wrapped in, so a sample
//! four levels down (resource → scope → profile → sample) would be sized five times.
//! Here the profile sizes are computed once, bottom up, and reused for every header;
//! the bytes are exactly what prost writes (fields in number order, defaults omitted).

use prost::Message;
use prost::bytes::BufMut;
use prost::encoding::{self, encoded_len_varint, key_len};

use super::types::{Profile, ProfilesDictionary, ResourceProfiles, ScopeProfiles};

/// Sizes of every profile, scope and resource in encounter order.
pub(crate) struct Sizes {
    profiles: Vec<usize>,
    scopes: Vec<usize>,
    resources: Vec<usize>,
}

fn framed(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// A profile's size apart from its samples, which prost can size on its own.
fn profile_len(p: &Profile) -> usize {
    let samples: usize = p.samples.iter().map(|s| framed(2, s.encoded_len())).sum();
    samples + profile_len_without_samples(p)
}

fn profile_len_without_samples(p: &Profile) -> usize {
    let mut len = 0;
    if let Some(vt) = &p.sample_type {
        len += encoding::message::encoded_len(1, vt);
    }
    if p.time_unix_nano != 0 {
        len += encoding::fixed64::encoded_len(3, &p.time_unix_nano);
    }
    if p.duration_nano != 0 {
        len += encoding::uint64::encoded_len(4, &p.duration_nano);
    }
    if let Some(vt) = &p.period_type {
        len += encoding::message::encoded_len(5, vt);
    }
    if p.period != 0 {
        len += encoding::int64::encoded_len(6, &p.period);
    }
    if !p.profile_id.is_empty() {
        len += encoding::bytes::encoded_len(7, &p.profile_id);
    }
    if p.dropped_attributes_count != 0 {
        len += encoding::uint32::encoded_len(8, &p.dropped_attributes_count);
    }
    if !p.original_payload_format.is_empty() {
        len += encoding::string::encoded_len(9, &p.original_payload_format);
    }
    if !p.original_payload.is_empty() {
        len += encoding::bytes::encoded_len(10, &p.original_payload);
    }
    len + encoding::int32::encoded_len_packed(11, &p.attribute_indices)
}

fn encode_profile(p: &Profile, len: usize, buf: &mut impl BufMut) {
    encoding::encode_key(2, encoding::WireType::LengthDelimited, buf);
    encoding::encode_varint(len as u64, buf);
    if let Some(vt) = &p.sample_type {
        encoding::message::encode(1, vt, buf);
    }
    for s in &p.samples {
        encoding::message::encode(2, s, buf);
    }
    if p.time_unix_nano != 0 {
        encoding::fixed64::encode(3, &p.time_unix_nano, buf);
    }
    if p.duration_nano != 0 {
        encoding::uint64::encode(4, &p.duration_nano, buf);
    }
    if let Some(vt) = &p.period_type {
        encoding::message::encode(5, vt, buf);
    }
    if p.period != 0 {
        encoding::int64::encode(6, &p.period, buf);
    }
    if !p.profile_id.is_empty() {
        encoding::bytes::encode(7, &p.profile_id, buf);
    }
    if p.dropped_attributes_count != 0 {
        encoding::uint32::encode(8, &p.dropped_attributes_count, buf);
    }
    if !p.original_payload_format.is_empty() {
        encoding::string::encode(9, &p.original_payload_format, buf);
    }
    if !p.original_payload.is_empty() {
        encoding::bytes::encode(10, &p.original_payload, buf);
    }
    encoding::int32::encode_packed(11, &p.attribute_indices, buf);
}

fn scope_len_without_profiles(sp: &ScopeProfiles) -> usize {
    let mut len = 0;
    if let Some(scope) = &sp.scope {
        len += encoding::message::encoded_len(1, scope);
    }
    if !sp.schema_url.is_empty() {
        len += encoding::string::encoded_len(3, &sp.schema_url);
    }
    len
}

fn resource_len_without_scopes(rp: &ResourceProfiles) -> usize {
    let mut len = 0;
    if let Some(resource) = &rp.resource {
        len += encoding::message::encoded_len(1, resource);
    }
    if !rp.schema_url.is_empty() {
        len += encoding::string::encoded_len(3, &rp.schema_url);
    }
    len
}

impl Sizes {
    pub(crate) fn of(resource_profiles: &[ResourceProfiles]) -> Sizes {
        let mut sizes = Sizes {
            profiles: Vec::new(),
            scopes: Vec::new(),
            resources: Vec::new(),
        };
        for rp in resource_profiles {
            let mut rp_len = resource_len_without_scopes(rp);
            for sp in &rp.scope_profiles {
                let mut sp_len = scope_len_without_profiles(sp);
                for p in &sp.profiles {
                    let len = profile_len(p);
                    sizes.profiles.push(len);
                    sp_len += framed(2, len);
                }
                sizes.scopes.push(sp_len);
                rp_len += framed(2, sp_len);
            }
            sizes.resources.push(rp_len);
        }
        sizes
    }

    /// Length of the whole `ProfilesData` / `ExportProfilesServiceRequest`.
    pub(crate) fn total(&self, dictionary: &ProfilesDictionary) -> usize {
        self.resources.iter().map(|&l| framed(1, l)).sum::<usize>()
            + encoding::message::encoded_len(2, dictionary)
    }
}

pub(crate) fn encode(
    resource_profiles: &[ResourceProfiles],
    dictionary: &ProfilesDictionary,
    sizes: &Sizes,
    buf: &mut impl BufMut,
) {
    let (mut profiles, mut scopes) = (sizes.profiles.iter(), sizes.scopes.iter());
    for (rp, &rp_len) in resource_profiles.iter().zip(&sizes.resources) {
        encoding::encode_key(1, encoding::WireType::LengthDelimited, buf);
        encoding::encode_varint(rp_len as u64, buf);
        if let Some(resource) = &rp.resource {
            encoding::message::encode(1, resource, buf);
        }
        for sp in &rp.scope_profiles {
            let sp_len = scopes.next().copied().unwrap_or(0);
            encoding::encode_key(2, encoding::WireType::LengthDelimited, buf);
            encoding::encode_varint(sp_len as u64, buf);
            if let Some(scope) = &sp.scope {
                encoding::message::encode(1, scope, buf);
            }
            for p in &sp.profiles {
                encode_profile(p, profiles.next().copied().unwrap_or(0), buf);
            }
            if !sp.schema_url.is_empty() {
                encoding::string::encode(3, &sp.schema_url, buf);
            }
        }
        if !rp.schema_url.is_empty() {
            encoding::string::encode(3, &rp.schema_url, buf);
        }
    }
    encoding::message::encode(2, dictionary, buf);
}
