//! `interval > 0`: what arrives for the same service and set of sample types is merged
//! (profcol_core's `Merger`) and, at each flush, collapsed into one profile per sample type
//! so that it becomes one pprof.

use std::collections::HashMap;

use profcol_core::pdata::pprof::pprof_groups;
use profcol_core::pdata::types::{KeyValue, Resource};
use profcol_core::pdata::{
    Dictionary, Merger, Profile, ProfileBatch, ResourceProfiles, ScopeProfiles, ValueType,
};

use crate::service_name;

/// What one merged file holds: a service and its sorted sample types (`type/unit`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct GroupKey {
    pub service: String,
    pub sample_types: Vec<(String, String)>,
}

/// The mergers of the current interval, in first-seen order.
#[derive(Default)]
pub(crate) struct Window {
    order: Vec<GroupKey>,
    mergers: HashMap<GroupKey, Merger>,
}

impl Window {
    /// Adds what `admit` lets in (asked once per service and group, before it is merged).
    pub fn add(&mut self, batch: &ProfileBatch, admit: &mut dyn FnMut(&str) -> bool) {
        for (key, part) in split(&crate::separate::separated(batch)) {
            if !admit(&key.service) {
                continue;
            }
            let merger = match self.mergers.get_mut(&key) {
                Some(m) => m,
                None => {
                    self.order.push(key.clone());
                    self.mergers.entry(key).or_default()
                }
            };
            merger.add(&part);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Each group's merged batch, collapsed; the window is left empty.
    pub fn take(&mut self) -> Vec<(GroupKey, ProfileBatch)> {
        let mut mergers = std::mem::take(&mut self.mergers);
        std::mem::take(&mut self.order)
            .into_iter()
            .filter_map(|key| {
                let merged = mergers.remove(&key)?.finish();
                Some((key, collapse(merged)))
            })
            .collect()
    }
}

fn type_names(d: &Dictionary, vt: ValueType) -> (String, String) {
    (
        d.string(vt.type_strindex).to_owned(),
        d.string(vt.unit_strindex).to_owned(),
    )
}

/// The batch cut by group key. A batch that is all one group is not copied.
pub(crate) fn split(batch: &ProfileBatch) -> Vec<(GroupKey, ProfileBatch)> {
    let d = batch.dictionary();
    let mut parts: Vec<(GroupKey, Vec<ResourceProfiles>)> = Vec::new();
    // Keys are found by hashing: a batch of many services must not make this quadratic.
    let mut position: HashMap<GroupKey, usize> = HashMap::new();
    for rp in batch.resource_profiles() {
        let attributes = rp.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        let service = service_name(attributes);
        for sp in &rp.scope_profiles {
            for group in pprof_groups(d, &sp.profiles) {
                let profiles: Vec<&Profile> =
                    group.iter().filter_map(|&i| sp.profiles.get(i)).collect();
                if profiles.iter().all(|p| p.samples.is_empty()) {
                    continue;
                }
                let mut sample_types: Vec<(String, String)> = profiles
                    .iter()
                    .map(|p| type_names(d, p.sample_type))
                    .collect();
                sample_types.sort();
                let key = GroupKey {
                    service: service.clone(),
                    sample_types,
                };
                let part = ResourceProfiles {
                    resource: rp.resource.clone(),
                    schema_url: rp.schema_url.clone(),
                    scope_profiles: vec![ScopeProfiles {
                        scope: sp.scope.clone(),
                        schema_url: sp.schema_url.clone(),
                        profiles: profiles.into_iter().cloned().collect(),
                    }],
                };
                match position.get(&key) {
                    Some(&at) => parts[at].1.push(part),
                    None => {
                        position.insert(key.clone(), parts.len());
                        parts.push((key, vec![part]));
                    }
                }
            }
        }
    }
    parts
        .into_iter()
        .map(|(key, list)| {
            let mut part = batch.clone();
            *part.resource_profiles_mut() = list;
            (key, part)
        })
        .collect()
}

/// One resource (the attributes all of them share), one scope and one profile per sample
/// type holding every sample, over the whole time the inputs span; profile attributes are
/// those every input profile has. Such a batch makes one pprof.
pub(crate) fn collapse(mut batch: ProfileBatch) -> ProfileBatch {
    let rps = batch.resource_profiles();
    let Some(first_rp) = rps.first() else {
        return batch;
    };
    let attributes_of = |rp: &ResourceProfiles| -> Vec<KeyValue> {
        rp.resource
            .as_ref()
            .map(|r| r.attributes.clone())
            .unwrap_or_default()
    };
    let mut common = attributes_of(first_rp);
    for rp in &rps[1..] {
        let theirs = rp.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        if common.len().saturating_mul(theirs.len()) <= 256 {
            common.retain(|kv| theirs.contains(kv));
        } else {
            // Long lists on both sides: compare encodings by hashing, not pair by pair.
            let present: std::collections::HashSet<Vec<u8>> =
                theirs.iter().map(prost::Message::encode_to_vec).collect();
            common.retain(|kv| present.contains(&prost::Message::encode_to_vec(kv)));
        }
    }
    let resource = rps
        .iter()
        .any(|rp| rp.resource.is_some())
        .then(|| Resource {
            attributes: common,
            ..Default::default()
        });
    let scopes: Vec<&ScopeProfiles> = rps.iter().flat_map(|rp| &rp.scope_profiles).collect();
    let scope = scopes
        .first()
        .and_then(|s| s.scope.clone())
        .filter(|first| scopes.iter().all(|s| s.scope.as_ref() == Some(first)));
    let profiles: Vec<&Profile> = scopes.iter().flat_map(|s| &s.profiles).collect();
    let Some(&first) = profiles.first() else {
        return batch;
    };
    let start = profiles
        .iter()
        .map(|p| p.time_unix_nano)
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    let end = profiles
        .iter()
        .map(|p| p.time_unix_nano.saturating_add(p.duration_nano))
        .max()
        .unwrap_or(0)
        .max(start);
    let mut shared_attributes = first.attribute_indices.clone();
    for p in &profiles[1..] {
        if shared_attributes
            .len()
            .saturating_mul(p.attribute_indices.len())
            <= 256
        {
            shared_attributes.retain(|a| p.attribute_indices.contains(a));
        } else {
            let present: std::collections::HashSet<i32> =
                p.attribute_indices.iter().copied().collect();
            shared_attributes.retain(|a| present.contains(a));
        }
    }
    let mut merged: Vec<Profile> = Vec::new();
    for p in &profiles {
        match merged.iter_mut().find(|m| m.sample_type == p.sample_type) {
            Some(m) => m.samples.extend(&p.samples),
            None => merged.push(Profile {
                sample_type: p.sample_type,
                period_type: first.period_type,
                period: first.period,
                time_unix_nano: start,
                duration_nano: end - start,
                attribute_indices: shared_attributes.clone(),
                samples: p.samples.clone(),
                ..Default::default()
            }),
        }
    }
    let collapsed = vec![ResourceProfiles {
        resource,
        schema_url: first_rp.schema_url.clone(),
        scope_profiles: vec![ScopeProfiles {
            scope,
            schema_url: scopes
                .first()
                .map(|s| s.schema_url.clone())
                .unwrap_or_default(),
            profiles: merged,
        }],
    }];
    *batch.resource_profiles_mut() = collapsed;
    batch
}
