//! Merging batches into one: the entries each batch's samples and profiles refer to are
//! copied into one builder on first use (so a batch that shares a large dictionary costs
//! what it uses, and consecutive batches over one dictionary share the lookups). Equal
//! resources, and equal scopes within them, are joined. Samples are rewritten with their
//! new indices; values and timestamps are copied as the bytes they are.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use profcol_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use prost::Message;

use crate::batch::{ClientInfo, ProfileBatch};
use crate::dictionary::{Dictionary, DictionaryBuilder};
use crate::profile::{ResourceProfiles, ScopeProfiles};
use crate::rows::AnyValueRef;
use crate::subset::Landing;
use crate::wire;

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
    /// Where the entries of the last batch's dictionary landed, kept while the next
    /// batch has the same dictionary.
    landing: Landing,
    source: Option<Weak<Dictionary>>,
    /// The dictionary the builder started from ([`Merger::starting_with`]): batches over
    /// it keep their indices.
    base: Option<Weak<Dictionary>>,
}

/// The identity of a resource or scope: its protobuf encoding, then its schema url.
fn identity(message: Option<&impl Message>, schema_url: &str) -> Vec<u8> {
    let mut key = message.map(Message::encode_to_vec).unwrap_or_default();
    key.push(0xff);
    key.extend_from_slice(schema_url.as_bytes());
    key
}

impl Merger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Continues from `batch`'s dictionary (its indices stay as they are).
    pub fn starting_with(batch: &ProfileBatch) -> Self {
        let mut m = Merger {
            builder: DictionaryBuilder::from_dictionary(batch.dictionary().clone()),
            base: Some(Arc::downgrade(batch.dictionary_arc())),
            ..Merger::default()
        };
        m.add(batch);
        m
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
        let d = batch.dictionary_arc();
        let same = |w: &Option<Weak<Dictionary>>| {
            w.as_ref()
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(d)))
        };
        let keep_indices = same(&self.base);
        if !keep_indices && !same(&self.source) {
            self.landing.reset();
            self.source = Some(Arc::downgrade(d));
        }
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
                        .map(|p| {
                            if keep_indices {
                                p.clone()
                            } else {
                                self.landing.profile(
                                    d,
                                    &mut self.builder,
                                    p,
                                    p.samples.iter(),
                                    true,
                                )
                            }
                        })
                        .collect(),
                })
                .collect();
            self.samples += scopes
                .iter()
                .flat_map(|s| &s.profiles)
                .map(|p| p.samples.len())
                .sum::<usize>();
            self.join(rp, scopes);
        }
    }

    fn join(&mut self, rp: &ResourceProfiles, scopes: Vec<ScopeProfiles>) {
        let resource_key = identity(rp.resource.as_ref(), &rp.schema_url);
        let r = match self.resources.get(&resource_key) {
            Some(&r) => r,
            None => {
                self.resources
                    .insert(resource_key, self.resource_profiles.len());
                self.scopes.push(HashMap::new());
                self.resource_profiles.push(ResourceProfiles {
                    resource: rp.resource.clone(),
                    schema_url: rp.schema_url.clone(),
                    scope_profiles: Vec::new(),
                });
                self.resource_profiles.len() - 1
            }
        };
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

    /// The merged batch. It names a client only if every input came from that one client.
    /// (A merged dictionary that outgrew 4 GiB, which no accepted input comes near, keeps
    /// what fitted: its overflowing entries read as zero values.)
    pub fn finish(self) -> ProfileBatch {
        let dictionary = match self.builder.finish() {
            Ok(d) => d,
            Err(_) => Dictionary::zero(),
        };
        let mut batch = ProfileBatch::from_parts(dictionary, self.resource_profiles);
        if let Some(Some(c)) = self.client {
            batch = batch.with_client(c);
        }
        batch
    }
}

impl DictionaryBuilder {
    /// Copies attribute `i` of `source` into this dictionary: its key, unit and value,
    /// with any string references in the value resolved (they index `source`'s strings).
    pub fn attribute_from(&mut self, source: &Dictionary, i: i32) -> i32 {
        let a = source.attribute(i);
        let key = self.string(source.string(a.key_strindex));
        let unit = self.string(source.string(a.unit_strindex));
        let value = a.value_bytes.map(|v| value_without_references(v, source));
        self.attribute_encoded(key, value.as_deref(), unit)
    }
}

/// An attribute value as bytes with no string references left (they index the input's
/// string table, not the merged one).
fn value_without_references<'a>(bytes: &'a [u8], d: &Dictionary) -> Cow<'a, [u8]> {
    match crate::rows::any_value(bytes) {
        AnyValueRef::StringIndex(i) => {
            let mut out = Vec::new();
            wire::put_bytes_always(&mut out, 1, d.string(i).as_bytes());
            Cow::Owned(out)
        }
        AnyValueRef::Array(_) | AnyValueRef::KvList(_) if has_references(bytes) => {
            let Ok(mut v) = AnyValue::decode(bytes) else {
                return Cow::Borrowed(bytes);
            };
            resolve(&mut v, d, 0);
            Cow::Owned(v.encode_to_vec())
        }
        _ => Cow::Borrowed(bytes),
    }
}

fn has_references(bytes: &[u8]) -> bool {
    let Ok(v) = AnyValue::decode(bytes) else {
        return false;
    };
    fn any(v: &AnyValue) -> bool {
        match &v.value {
            Some(Value::StringValueStrindex(_)) => true,
            Some(Value::ArrayValue(a)) => a.values.iter().any(any),
            Some(Value::KvlistValue(l)) => l.values.iter().any(kv),
            _ => false,
        }
    }
    fn kv(k: &KeyValue) -> bool {
        k.key_strindex != 0 || k.value.as_ref().is_some_and(any)
    }
    any(&v)
}

fn resolve(v: &mut AnyValue, d: &Dictionary, depth: usize) {
    if depth > 100 {
        return;
    }
    match &mut v.value {
        Some(Value::StringValueStrindex(i)) => {
            v.value = Some(Value::StringValue(d.string(*i).to_owned()));
        }
        Some(Value::ArrayValue(a)) => {
            for x in &mut a.values {
                resolve(x, d, depth + 1);
            }
        }
        Some(Value::KvlistValue(l)) => {
            for kv in &mut l.values {
                if kv.key.is_empty() && kv.key_strindex != 0 {
                    kv.key = d.string(kv.key_strindex).to_owned();
                }
                kv.key_strindex = 0;
                if let Some(x) = kv.value.as_mut() {
                    resolve(x, d, depth + 1);
                }
            }
        }
        _ => {}
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
    use crate::profile::{Profile, ValueType};
    use crate::rows::{Function, Line, Location, Sample};
    use crate::samples::Samples;
    use profcol_proto::otlp::resource::v1::Resource;

    fn batch(service: &str, function: &str, value: i64) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let name = b.string(function);
        let f = b.function(Function {
            name_strindex: name,
            ..Default::default()
        });
        let lines = [Line {
            function_index: f,
            ..Default::default()
        }];
        let loc = b.location(&Location {
            lines: &lines,
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let attr = b.attribute_str("thread.name", function);
        let sample_type = ValueType {
            type_strindex: b.string("samples"),
            unit_strindex: b.string("count"),
        };
        let mut samples = Samples::default();
        samples.push(&Sample {
            stack_index: stack,
            attribute_indices: &[attr],
            values: &[value],
            ..Default::default()
        });
        let profile = Profile {
            sample_type,
            samples,
            ..Default::default()
        };
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(Value::StringValue(service.into())),
                }),
                key_strindex: 0,
            }],
            ..Default::default()
        };
        ProfileBatch::from_parts(
            b.finish().expect("dictionary"),
            vec![ResourceProfiles {
                resource: Some(resource),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    fn names(batch: &ProfileBatch) -> Vec<(String, i64)> {
        let d = batch.dictionary();
        let mut out = Vec::new();
        for p in batch.profiles() {
            for s in p.samples.iter() {
                let loc = d.stack(s.stack_index).location_indices.first().unwrap_or(0);
                let f = d
                    .location(loc)
                    .lines
                    .first()
                    .unwrap_or_default()
                    .function_index;
                out.push((
                    d.string(d.function(f).name_strindex).to_owned(),
                    s.values.first().unwrap_or(0),
                ));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn merging_keeps_every_sample_and_joins_equal_resources() {
        let (a, b, c) = (
            batch("cart", "a", 1),
            batch("cart", "b", 2),
            batch("shop", "a", 3),
        );
        let merged = merge([&a, &b, &c]);
        assert_eq!(merged.sample_count(), 3);
        assert_eq!(merged.resource_profiles().len(), 2, "cart joined");
        assert_eq!(
            names(&merged),
            [("a".into(), 1), ("a".into(), 3), ("b".into(), 2)]
        );
        // Shared entries are interned once.
        let d = merged.dictionary();
        assert_eq!(d.strings().iter().filter(|s| *s == "a").count(), 1);
        // The merged batch is valid: it survives its own encoding.
        assert_eq!(
            ProfileBatch::decode(&merged.encode_to_vec()).expect("valid"),
            merged
        );
    }

    #[test]
    fn a_string_reference_in_an_attribute_value_follows_its_string() {
        let mut b = DictionaryBuilder::new();
        let key = b.string("k");
        let target = b.string("referenced");
        let mut value = Vec::new();
        wire::put_int32(&mut value, 8, target);
        let attr = b.attribute_encoded(key, Some(&value), 0);
        let mut samples = Samples::default();
        samples.push(&Sample {
            attribute_indices: &[attr],
            values: &[1],
            ..Default::default()
        });
        let with_reference = ProfileBatch::from_parts(
            b.finish().expect("dictionary"),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        );
        let merged = merge([&batch("x", "y", 1), &with_reference]);
        let d = merged.dictionary();
        let found = d.attributes().any(|a| {
            d.string(a.key_strindex) == "k" && a.value == Some(AnyValueRef::String("referenced"))
        });
        assert!(found);
    }
}
