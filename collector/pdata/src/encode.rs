//! The model as OTLP protobuf (`ProfilesData`, which `ExportProfilesServiceRequest`
//! matches field for field), byte for byte what prost writes. Sizes are taken bottom up
//! once, then rows and samples are copied: they are held encoded.

use prost::Message;

use crate::dictionary::Dictionary;
use crate::profile::{Profile, ResourceProfiles, ScopeProfiles, ValueType};
use crate::wire::{
    self, key_len, len_field_len, put_bytes, put_bytes_always, put_fixed64, put_int64, put_key,
    put_uint, put_varint, varint_len,
};

fn value_type_len(v: &ValueType) -> usize {
    v.encoded_len()
}

fn packed_len(values: &[i32]) -> usize {
    values
        .iter()
        .map(|&i| varint_len(i64::from(i) as u64))
        .sum()
}

fn opt_len_field(field: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len_field_len(field, len)
    }
}

fn uint_field(field: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(field) + varint_len(v)
    }
}

pub(crate) fn profile_len(p: &Profile) -> usize {
    len_field_len(1, value_type_len(&p.sample_type))
        + p.samples.wire_bytes().len()
        + if p.time_unix_nano == 0 {
            0
        } else {
            key_len(3) + 8
        }
        + uint_field(4, p.duration_nano)
        + len_field_len(5, value_type_len(&p.period_type))
        + uint_field(6, p.period as u64)
        + opt_len_field(7, p.profile_id.len())
        + uint_field(8, u64::from(p.dropped_attributes_count))
        + opt_len_field(9, p.original_payload_format.len())
        + opt_len_field(10, p.original_payload.len())
        + opt_len_field(11, packed_len(&p.attribute_indices))
}

fn write_profile(out: &mut Vec<u8>, p: &Profile) {
    put_bytes_always(out, 1, &p.sample_type.encode_to_vec());
    out.extend_from_slice(p.samples.wire_bytes());
    put_fixed64(out, 3, p.time_unix_nano);
    put_uint(out, 4, p.duration_nano);
    put_bytes_always(out, 5, &p.period_type.encode_to_vec());
    put_int64(out, 6, p.period);
    put_bytes(out, 7, &p.profile_id);
    put_uint(out, 8, u64::from(p.dropped_attributes_count));
    put_bytes(out, 9, p.original_payload_format.as_bytes());
    put_bytes(out, 10, &p.original_payload);
    wire::put_packed(
        out,
        11,
        p.attribute_indices.iter().map(|&i| i64::from(i) as u64),
    );
}

fn scope_len(sp: &ScopeProfiles, profile_lens: &mut impl Iterator<Item = usize>) -> usize {
    sp.scope
        .as_ref()
        .map_or(0, |s| len_field_len(1, s.encoded_len()))
        + sp.profiles
            .iter()
            .map(|_| len_field_len(2, profile_lens.next().unwrap_or(0)))
            .sum::<usize>()
        + opt_len_field(3, sp.schema_url.len())
}

/// Sizes of every resource, scope and profile message, in encoding order.
pub(crate) struct Sizes {
    resources: Vec<usize>,
    scopes: Vec<usize>,
    profiles: Vec<usize>,
    dictionary: usize,
}

impl Sizes {
    pub(crate) fn of(dictionary: &Dictionary, resource_profiles: &[ResourceProfiles]) -> Self {
        let profiles: Vec<usize> = resource_profiles
            .iter()
            .flat_map(|rp| &rp.scope_profiles)
            .flat_map(|sp| &sp.profiles)
            .map(profile_len)
            .collect();
        let mut profile_lens = profiles.iter().copied();
        let scopes: Vec<usize> = resource_profiles
            .iter()
            .flat_map(|rp| &rp.scope_profiles)
            .map(|sp| scope_len(sp, &mut profile_lens))
            .collect();
        let mut scope_lens = scopes.iter().copied();
        let resources = resource_profiles
            .iter()
            .map(|rp| {
                rp.resource
                    .as_ref()
                    .map_or(0, |r| len_field_len(1, r.encoded_len()))
                    + rp.scope_profiles
                        .iter()
                        .map(|_| len_field_len(2, scope_lens.next().unwrap_or(0)))
                        .sum::<usize>()
                    + opt_len_field(3, rp.schema_url.len())
            })
            .collect();
        Sizes {
            resources,
            scopes,
            profiles,
            dictionary: dictionary_len(dictionary),
        }
    }

    /// The whole message's length.
    pub(crate) fn total(&self) -> usize {
        self.resources
            .iter()
            .map(|&n| len_field_len(1, n))
            .sum::<usize>()
            + len_field_len(2, self.dictionary)
    }
}

pub(crate) fn dictionary_len(d: &Dictionary) -> usize {
    let rows: usize = d
        .row_tables()
        .iter()
        .map(|(field, t)| {
            t.iter()
                .map(|row| len_field_len(*field, row.len()))
                .sum::<usize>()
        })
        .sum();
    let strings: usize = d.strings.iter().map(|s| len_field_len(5, s.len())).sum();
    rows + strings
}

fn write_rows(out: &mut Vec<u8>, field: u32, rows: impl Iterator<Item = impl AsRef<[u8]>>) {
    for row in rows {
        put_bytes_always(out, field, row.as_ref());
    }
}

pub(crate) fn write_dictionary(out: &mut Vec<u8>, d: &Dictionary) {
    write_rows(out, 1, d.mappings.iter());
    write_rows(out, 2, d.locations.iter());
    write_rows(out, 3, d.functions.iter());
    write_rows(out, 4, d.links.iter());
    write_rows(out, 5, d.strings.iter().map(str::as_bytes));
    write_rows(out, 6, d.attributes.iter());
    write_rows(out, 7, d.stacks.iter());
}

/// Appends the encoding of the batch's parts to `out`.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    dictionary: &Dictionary,
    resource_profiles: &[ResourceProfiles],
    sizes: &Sizes,
) {
    out.reserve(sizes.total());
    let (mut scopes, mut profiles) = (sizes.scopes.iter(), sizes.profiles.iter());
    for (rp, &len) in resource_profiles.iter().zip(&sizes.resources) {
        put_key(out, 1, wire::LEN);
        put_varint(out, len as u64);
        if let Some(r) = &rp.resource {
            put_key(out, 1, wire::LEN);
            put_varint(out, r.encoded_len() as u64);
            r.encode_raw(out);
        }
        for sp in &rp.scope_profiles {
            put_key(out, 2, wire::LEN);
            put_varint(out, *scopes.next().unwrap_or(&0) as u64);
            if let Some(s) = &sp.scope {
                put_key(out, 1, wire::LEN);
                put_varint(out, s.encoded_len() as u64);
                s.encode_raw(out);
            }
            for p in &sp.profiles {
                put_key(out, 2, wire::LEN);
                put_varint(out, *profiles.next().unwrap_or(&0) as u64);
                write_profile(out, p);
            }
            put_bytes(out, 3, sp.schema_url.as_bytes());
        }
        put_bytes(out, 3, rp.schema_url.as_bytes());
    }
    put_key(out, 2, wire::LEN);
    put_varint(out, sizes.dictionary as u64);
    write_dictionary(out, dictionary);
}
