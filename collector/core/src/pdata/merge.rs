//! Merging batches into one by re-interning every dictionary entry into a fresh builder,
//! in dependency order: strings → functions, mappings, attributes → locations → stacks →
//! links → profiles and samples. Equal resources, and equal scopes within them, are joined.

use std::collections::HashMap;

use prost::Message;

use super::batch::{ClientInfo, ProfileBatch};
use super::builder::DictionaryBuilder;
use super::types::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ResourceProfiles, Sample,
    ScopeProfiles, ValueType,
};

/// Accumulates batches; [`Merger::finish`] yields one self-contained batch.
#[derive(Debug, Default)]
pub struct Merger {
    builder: DictionaryBuilder,
    resource_profiles: Vec<ResourceProfiles>,
    samples: usize,
    /// None before the first batch; Some(None) once inputs disagree or name no client.
    client: Option<Option<ClientInfo>>,
    /// Where each resource (by its encoding and schema url) is, and within it each scope,
    /// so that joining equal ones hashes instead of scanning: a batch of many resources
    /// must not make merging quadratic.
    resources: HashMap<Vec<u8>, usize>,
    scopes: Vec<HashMap<Vec<u8>, usize>>,
}

/// The identity of a resource or scope: its protobuf encoding, then its schema url.
fn identity(message: Option<&impl Message>, schema_url: &str) -> Vec<u8> {
    let mut key = message.map(Message::encode_to_vec).unwrap_or_default();
    key.push(0xff);
    key.extend_from_slice(schema_url.as_bytes());
    key
}

/// Where each entry of one input dictionary landed in the merged one.
struct Remap {
    strings: Vec<i32>,
    attributes: Vec<i32>,
    stacks: Vec<i32>,
    links: Vec<i32>,
}

fn at(map: &[i32], index: i32) -> i32 {
    // Inputs are validated batches, so every index is in range; 0 stays 0 either way.
    usize::try_from(index)
        .ok()
        .and_then(|i| map.get(i))
        .copied()
        .unwrap_or(0)
}

fn all(map: &[i32], indices: &[i32]) -> Vec<i32> {
    indices.iter().map(|&i| at(map, i)).collect()
}

impl Merger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Samples added so far.
    pub fn sample_count(&self) -> usize {
        self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.resource_profiles.is_empty()
    }

    pub fn add(&mut self, batch: &ProfileBatch) {
        let theirs = batch.client().cloned();
        self.client = match self.client.take() {
            None => Some(theirs),
            Some(ours) => Some(ours.filter(|c| Some(c) == theirs.as_ref())),
        };
        let remap = self.intern_dictionary(batch);
        for rp in batch.resource_profiles() {
            let scopes: Vec<ScopeProfiles> = rp
                .scope_profiles
                .iter()
                .map(|sp| ScopeProfiles {
                    scope: sp.scope.clone(),
                    schema_url: sp.schema_url.clone(),
                    profiles: sp
                        .profiles
                        .iter()
                        .map(|p| remap_profile(&remap, p))
                        .collect(),
                })
                .collect();
            self.samples += scopes
                .iter()
                .flat_map(|s| &s.profiles)
                .map(|p| p.samples.len())
                .sum::<usize>();
            let resource_key = identity(rp.resource.as_ref(), &rp.schema_url);
            match self.resources.get(&resource_key) {
                Some(&r) => {
                    let have = &mut self.resource_profiles[r];
                    let scope_index = &mut self.scopes[r];
                    for scope in scopes {
                        let scope_key = identity(scope.scope.as_ref(), &scope.schema_url);
                        match scope_index.get(&scope_key) {
                            Some(&s) => have.scope_profiles[s].profiles.extend(scope.profiles),
                            None => {
                                scope_index.insert(scope_key, have.scope_profiles.len());
                                have.scope_profiles.push(scope);
                            }
                        }
                    }
                }
                None => {
                    let mut scope_index = HashMap::new();
                    let mut joined: Vec<ScopeProfiles> = Vec::with_capacity(scopes.len());
                    for scope in scopes {
                        let scope_key = identity(scope.scope.as_ref(), &scope.schema_url);
                        match scope_index.get(&scope_key) {
                            Some(&s) => {
                                let into: &mut ScopeProfiles = &mut joined[s];
                                into.profiles.extend(scope.profiles);
                            }
                            None => {
                                scope_index.insert(scope_key, joined.len());
                                joined.push(scope);
                            }
                        }
                    }
                    self.resources
                        .insert(resource_key, self.resource_profiles.len());
                    self.scopes.push(scope_index);
                    self.resource_profiles.push(ResourceProfiles {
                        resource: rp.resource.clone(),
                        schema_url: rp.schema_url.clone(),
                        scope_profiles: joined,
                    });
                }
            }
        }
    }

    fn intern_dictionary(&mut self, batch: &ProfileBatch) -> Remap {
        let d = batch.dictionary();
        let b = &mut self.builder;
        let strings: Vec<i32> = d.string_table.iter().map(|s| b.string(s)).collect();
        let functions: Vec<i32> = d
            .function_table
            .iter()
            .map(|f| {
                b.function(Function {
                    name_strindex: at(&strings, f.name_strindex),
                    system_name_strindex: at(&strings, f.system_name_strindex),
                    filename_strindex: at(&strings, f.filename_strindex),
                    start_line: f.start_line,
                })
            })
            .collect();
        let attributes: Vec<i32> = d
            .attribute_table
            .iter()
            .map(|kv| {
                b.attribute(KeyValueAndUnit {
                    key_strindex: at(&strings, kv.key_strindex),
                    unit_strindex: at(&strings, kv.unit_strindex),
                    value: kv.value.clone(),
                })
            })
            .collect();
        let mappings: Vec<i32> = d
            .mapping_table
            .iter()
            .map(|m| {
                b.mapping(Mapping {
                    filename_strindex: at(&strings, m.filename_strindex),
                    attribute_indices: all(&attributes, &m.attribute_indices),
                    ..m.clone()
                })
            })
            .collect();
        let locations: Vec<i32> = d
            .location_table
            .iter()
            .map(|l| {
                b.location(Location {
                    mapping_index: at(&mappings, l.mapping_index),
                    address: l.address,
                    lines: l
                        .lines
                        .iter()
                        .map(|line| Line {
                            function_index: at(&functions, line.function_index),
                            ..*line
                        })
                        .collect(),
                    attribute_indices: all(&attributes, &l.attribute_indices),
                })
            })
            .collect();
        let mut scratch = Vec::new();
        let stacks: Vec<i32> = d
            .stack_table
            .iter()
            .map(|s| {
                scratch.clear();
                scratch.extend(s.location_indices.iter().map(|&i| at(&locations, i)));
                b.stack(&scratch)
            })
            .collect();
        let links: Vec<i32> = d
            .link_table
            .iter()
            .map(|l| b.link(&l.trace_id, &l.span_id))
            .collect();
        Remap {
            strings,
            attributes,
            stacks,
            links,
        }
    }

    /// The merged batch. It names a client only if every input came from that one client.
    pub fn finish(self) -> ProfileBatch {
        let batch = ProfileBatch::from_valid(self.builder.finish(), self.resource_profiles);
        match self.client {
            Some(Some(c)) => batch.with_client(c),
            _ => batch,
        }
    }
}

fn remap_value_type(remap: &Remap, vt: Option<ValueType>) -> Option<ValueType> {
    vt.map(|vt| ValueType {
        type_strindex: at(&remap.strings, vt.type_strindex),
        unit_strindex: at(&remap.strings, vt.unit_strindex),
    })
}

fn remap_profile(remap: &Remap, p: &Profile) -> Profile {
    Profile {
        sample_type: remap_value_type(remap, p.sample_type),
        period_type: remap_value_type(remap, p.period_type),
        attribute_indices: all(&remap.attributes, &p.attribute_indices),
        samples: p
            .samples
            .iter()
            .map(|s| Sample {
                stack_index: at(&remap.stacks, s.stack_index),
                attribute_indices: all(&remap.attributes, &s.attribute_indices),
                link_index: at(&remap.links, s.link_index),
                values: s.values.clone(),
                timestamps_unix_nano: s.timestamps_unix_nano.clone(),
            })
            .collect(),
        time_unix_nano: p.time_unix_nano,
        duration_nano: p.duration_nano,
        period: p.period,
        profile_id: p.profile_id.clone(),
        dropped_attributes_count: p.dropped_attributes_count,
        original_payload_format: p.original_payload_format.clone(),
        original_payload: p.original_payload.clone(),
    }
}

/// Merges batches into one self-contained batch.
pub fn merge<'a>(batches: impl IntoIterator<Item = &'a ProfileBatch>) -> ProfileBatch {
    let mut m = Merger::new();
    for b in batches {
        m.add(b);
    }
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdata::types::{AnyValue, KeyValue, Resource, Value};

    fn batch(service: &str, function: &str, value: i64) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let name = b.string(function);
        let f = b.function(Function {
            name_strindex: name,
            ..Default::default()
        });
        let loc = b.location(Location {
            lines: vec![Line {
                function_index: f,
                ..Default::default()
            }],
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let attr = b.attribute_kv("thread.name", Value::StringValue(function.into()), "");
        let st = b.string("samples");
        let unit = b.string("count");
        let profile = Profile {
            sample_type: Some(ValueType {
                type_strindex: st,
                unit_strindex: unit,
            }),
            samples: vec![Sample {
                stack_index: stack,
                attribute_indices: vec![attr],
                values: vec![value],
                ..Default::default()
            }],
            ..Default::default()
        };
        ProfileBatch::from_valid(
            b.finish(),
            vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(Value::StringValue(service.into())),
                        }),
                        key_strindex: 0,
                    }],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    /// Resolves a sample to (function names leaf first, thread.name) for comparison.
    fn resolved(b: &ProfileBatch) -> Vec<(String, Vec<String>, i64)> {
        let d = b.dictionary();
        let mut out = Vec::new();
        for rp in b.resource_profiles() {
            let svc = crate::pdata::any_value_to_string(
                rp.resource
                    .as_ref()
                    .and_then(|r| r.attributes[0].value.as_ref())
                    .expect("service"),
            );
            for p in rp.scope_profiles.iter().flat_map(|s| &s.profiles) {
                for s in &p.samples {
                    let names = d.stack_table[s.stack_index as usize]
                        .location_indices
                        .iter()
                        .map(|&l| {
                            let f = d.location_table[l as usize].lines[0].function_index;
                            d.string_table[d.function_table[f as usize].name_strindex as usize]
                                .clone()
                        })
                        .collect();
                    out.push((svc.clone(), names, s.values[0]));
                }
            }
        }
        out
    }

    #[test]
    fn merge_keeps_meaning_and_dedupes_tables() {
        let a = batch("cart", "main.work", 5);
        let b = batch("cart", "main.work", 7);
        let c = batch("checkout", "main.pay", 1);
        let merged = merge([&a, &b, &c]);
        assert_eq!(merged.sample_count(), 3);
        // Equal resources are joined; equal scopes too.
        assert_eq!(merged.resource_profiles().len(), 2);
        assert_eq!(merged.resource_profiles()[0].scope_profiles.len(), 1);
        assert_eq!(
            merged.resource_profiles()[0].scope_profiles[0]
                .profiles
                .len(),
            2
        );
        // main.work and its stack are stored once.
        let d = merged.dictionary();
        assert_eq!(
            d.string_table.iter().filter(|s| *s == "main.work").count(),
            1
        );
        assert_eq!(d.stack_table.len(), 3);
        let mut expected = resolved(&a);
        expected.extend(resolved(&b));
        expected.extend(resolved(&c));
        assert_eq!(resolved(&merged), expected);
        // The result is valid as a wire message.
        ProfileBatch::decode(&merged.encode_to_vec()).expect("valid");
    }

    #[test]
    fn merged_batch_names_a_client_only_if_all_inputs_share_it() {
        let peer = |port| crate::pdata::ClientInfo {
            addr: Some(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        };
        let a = batch("cart", "f", 1).with_client(peer(1));
        let b = batch("cart", "f", 1).with_client(peer(1));
        let c = batch("cart", "f", 1).with_client(peer(2));
        assert_eq!(merge([&a, &b]).client(), Some(&peer(1)));
        assert_eq!(merge([&a, &c]).client(), None);
        assert_eq!(merge([&a, &batch("cart", "f", 1)]).client(), None);
    }

    /// A batch of many distinct resources merges in linear time: resources are found by
    /// hashing, not by scanning those merged so far.
    #[test]
    fn many_resources_merge_without_scanning() {
        let one = batch("svc", "main", 1);
        let mut many = one.clone();
        let template = one.resource_profiles()[0].clone();
        *many.resource_profiles_mut() = (0..30_000)
            .map(|n| {
                let mut rp = template.clone();
                if let Some(r) = rp.resource.as_mut() {
                    r.attributes[0].value = Some(AnyValue {
                        value: Some(Value::StringValue(format!("svc-{n}"))),
                    });
                }
                rp
            })
            .collect();
        let started = std::time::Instant::now();
        let merged = merge([&many, &many]);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(merged.resource_profiles().len(), 30_000);
        assert_eq!(merged.sample_count(), 60_000);
        assert!(
            merged
                .resource_profiles()
                .iter()
                .all(|rp| rp.scope_profiles.len() == 1)
        );
    }
}
