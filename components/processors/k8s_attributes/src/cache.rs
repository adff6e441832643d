//! The pod table: pod records by uid, with indexes by IP, container id and name, fed by
//! the pod watcher's events. Deleted pods stay for a grace period, so profiles that
//! arrive after their pod is gone (a profiler reports every few seconds) still match.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;

use crate::config::Settings;
use crate::pod::PodRecord;

/// How long a deleted pod is kept (contrib's is the same).
pub const DELETE_GRACE_PERIOD: Duration = Duration::from_secs(120);
/// How often deleted pods past their grace period are dropped.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// What an event did, for the self-metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: u64,
    pub updated: u64,
    pub deleted: u64,
}

pub struct PodTable {
    pods: HashMap<String, Arc<PodRecord>>,
    by_ip: HashMap<String, String>,
    by_container: HashMap<String, String>,
    /// Pod names are unique per namespace only, so a name may map to several uids.
    by_name: HashMap<String, Vec<String>>,
    /// uid → when its delete was seen.
    deleted: HashMap<String, Instant>,
    /// uids listed since the watch (re)started; None outside a relist.
    relisting: Option<HashSet<String>>,
    grace: Duration,
    synced: bool,
}

impl PodTable {
    pub fn new(grace: Duration) -> Self {
        PodTable {
            pods: HashMap::new(),
            by_ip: HashMap::new(),
            by_container: HashMap::new(),
            by_name: HashMap::new(),
            deleted: HashMap::new(),
            relisting: None,
            grace,
            synced: false,
        }
    }

    /// Pods held, deleted ones in their grace period included.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Whether the first full list has been seen.
    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn is_deleted(&self, uid: &str) -> bool {
        self.deleted.contains_key(uid)
    }

    pub fn by_uid(&self, uid: &str) -> Option<&Arc<PodRecord>> {
        self.pods.get(uid)
    }

    pub fn by_ip(&self, ip: &str) -> Option<&Arc<PodRecord>> {
        self.pods.get(self.by_ip.get(ip)?)
    }

    pub fn by_container_id(&self, id: &str) -> Option<&Arc<PodRecord>> {
        self.pods.get(self.by_container.get(id)?)
    }

    /// Pods of that name, newest first: a StatefulSet's recreated `web-0` comes before the
    /// deleted one that is still kept for its grace period.
    pub fn by_name(&self, name: &str) -> impl Iterator<Item = &Arc<PodRecord>> {
        self.by_name
            .get(name)
            .into_iter()
            .flat_map(|uids| uids.iter().rev())
            .filter_map(|uid| self.pods.get(uid))
    }

    /// Applies one watcher event. `Init` … `InitDone` is a (re)list: pods not listed in it
    /// are gone, and are treated as deleted then.
    pub fn handle(&mut self, event: Event<Pod>, settings: &Settings, now: Instant) -> Changes {
        match event {
            Event::Apply(pod) => self.apply(&pod, settings, now),
            Event::Delete(pod) => match pod.metadata.uid.as_deref() {
                Some(uid) => self.delete(uid, now),
                None => Changes::default(),
            },
            Event::Init => {
                self.relisting = Some(HashSet::new());
                Changes::default()
            }
            Event::InitApply(pod) => {
                if let (Some(seen), Some(uid)) = (&mut self.relisting, &pod.metadata.uid) {
                    seen.insert(uid.clone());
                }
                self.apply(&pod, settings, now)
            }
            Event::InitDone => {
                let mut changes = Changes::default();
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<String> = self
                        .pods
                        .keys()
                        .filter(|uid| !seen.contains(*uid) && !self.deleted.contains_key(*uid))
                        .cloned()
                        .collect();
                    for uid in gone {
                        changes.deleted += self.delete(&uid, now).deleted;
                    }
                }
                self.synced = true;
                changes
            }
        }
    }

    fn apply(&mut self, pod: &Pod, settings: &Settings, now: Instant) -> Changes {
        let Some(record) = PodRecord::from_pod(pod, settings) else {
            // Excluded by name: if it was known under an older spec, it goes.
            return match pod.metadata.uid.as_deref() {
                Some(uid) if self.pods.contains_key(uid) => self.delete(uid, now),
                _ => Changes::default(),
            };
        };
        self.insert(record)
    }

    /// Adds or replaces a record and its index entries.
    pub fn insert(&mut self, record: PodRecord) -> Changes {
        let uid = record.uid.clone();
        let record = Arc::new(record);
        let old = self.pods.insert(uid.clone(), record.clone());
        self.deleted.remove(&uid);
        if let Some(old) = &old {
            self.unindex(old, Some(&record));
        }
        if let Some(ip) = &record.ip {
            self.claim_ip(ip, &record);
        }
        for (_, id) in record.container_ids() {
            // Container ids are unique; the newest report wins.
            self.by_container.insert(id.to_owned(), uid.clone());
        }
        let names = self.by_name.entry(record.name.clone()).or_default();
        if !names.contains(&uid) {
            names.push(uid);
        }
        if old.is_some() {
            Changes {
                updated: 1,
                ..Changes::default()
            }
        } else {
            Changes {
                added: 1,
                ..Changes::default()
            }
        }
    }

    /// An IP goes to the newest live pod that has it: a pod still terminating does not
    /// take it back from its successor.
    fn claim_ip(&mut self, ip: &str, record: &PodRecord) {
        if let Some(holder) = self.by_ip.get(ip)
            && holder != &record.uid
            && !self.deleted.contains_key(holder)
            && let Some(other) = self.pods.get(holder)
            && other.created > record.created
        {
            return;
        }
        self.by_ip.insert(ip.to_owned(), record.uid.clone());
    }

    /// Drops the index entries of `old` that point at it and that `new` (its
    /// replacement, if any) no longer has.
    fn unindex(&mut self, old: &PodRecord, new: Option<&PodRecord>) {
        let uid = &old.uid;
        if let Some(ip) = &old.ip
            && new.is_none_or(|n| n.ip.as_ref() != Some(ip))
            && self.by_ip.get(ip) == Some(uid)
        {
            self.by_ip.remove(ip);
        }
        for (_, id) in old.container_ids() {
            if new.is_none_or(|n| n.container_by_id(id).is_none())
                && self.by_container.get(id) == Some(uid)
            {
                self.by_container.remove(id);
            }
        }
        if new.is_none_or(|n| n.name != old.name)
            && let Some(uids) = self.by_name.get_mut(&old.name)
        {
            uids.retain(|u| u != uid);
            if uids.is_empty() {
                self.by_name.remove(&old.name);
            }
        }
    }

    /// Marks a pod deleted; it stays findable until the grace period ends.
    pub fn delete(&mut self, uid: &str, now: Instant) -> Changes {
        if !self.pods.contains_key(uid) || self.deleted.contains_key(uid) {
            return Changes::default();
        }
        self.deleted.insert(uid.to_owned(), now);
        Changes {
            deleted: 1,
            ..Changes::default()
        }
    }

    /// Drops deleted pods whose grace period has ended; returns how many.
    pub fn sweep(&mut self, now: Instant) -> usize {
        let expired: Vec<String> = self
            .deleted
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) >= self.grace)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &expired {
            self.deleted.remove(uid);
            if let Some(old) = self.pods.remove(uid) {
                self.unindex(&old, None);
            }
        }
        expired.len()
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
