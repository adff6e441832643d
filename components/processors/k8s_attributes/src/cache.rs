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
mod tests {
    use std::time::{Duration, Instant};

    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use crate::testutil::{agent, db, pod, settings, web, web_json};

    fn table() -> PodTable {
        PodTable::new(Duration::from_secs(120))
    }

    #[test]
    fn applied_pods_are_found_by_uid_ip_container_id_and_name() {
        let s = settings("{}");
        let mut t = table();
        let now = Instant::now();
        assert_eq!(t.handle(Event::Apply(web()), &s, now).added, 1);
        assert_eq!(t.handle(Event::Apply(db()), &s, now).added, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.by_uid("uid-web").map(|p| p.name.as_str()),
            Some("web-7d4b9c-abcde")
        );
        assert_eq!(t.by_ip("10.0.0.5").map(|p| p.uid.as_str()), Some("uid-web"));
        // Runtime prefixes are stripped; the id from before the restart still finds the pod.
        for id in ["aaaa", "aaa0", "bbbb"] {
            assert_eq!(
                t.by_container_id(id).map(|p| p.uid.as_str()),
                Some("uid-web"),
                "{id}"
            );
        }
        assert!(t.by_container_id("containerd://aaaa").is_none());
        assert_eq!(
            t.by_container_id("dddd").map(|p| p.uid.as_str()),
            Some("uid-db")
        );
        let named: Vec<&str> = t.by_name("db-0").map(|p| p.uid.as_str()).collect();
        assert_eq!(named, ["uid-db"]);
        assert!(t.by_ip("10.9.9.9").is_none());
    }

    #[test]
    fn the_record_keeps_only_what_is_needed() {
        let s = settings(
            "extract:\n  labels:\n    - key: team\n  annotations:\n    - key_regex: no(.*)\n      tag_name: a.$1\n",
        );
        let r = PodRecord::from_pod(&web(), &s).expect("record");
        assert_eq!(r.namespace, "shop");
        assert_eq!(r.node_name, "node-a");
        assert_eq!(r.hostname, "web-7d4b9c-abcde");
        assert_eq!(r.start_time.as_deref(), Some("2024-05-01T10:00:00Z"));
        assert_eq!(r.pod_template_hash.as_deref(), Some("7d4b9c"));
        assert_eq!(r.app_name.as_deref(), Some("web-app"));
        assert_eq!(
            r.otel_annotations,
            [("deployment.environment.name".to_owned(), "prod".to_owned())]
        );
        assert_eq!(
            r.tags,
            [
                ("k8s.pod.labels.team".to_owned(), "checkout".to_owned()),
                ("a.te".to_owned(), "hello".to_owned())
            ]
        );
        let owner = r.owner.as_ref().expect("owner");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ReplicaSet", "web-7d4b9c")
        );
        let names: Vec<&str> = r.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["web", "proxy", "init"]);
        let web = &r.containers[0];
        assert_eq!(web.id(None), Some("aaaa"));
        assert_eq!(web.id(Some(0)), Some("aaa0"));
        assert_eq!(web.id(Some(7)), None);
        assert_eq!(
            web.repo_digest.as_deref(),
            Some("ghcr.io/acme/web@sha256:cafe")
        );
        let image = web.image.as_ref().expect("image");
        assert_eq!(
            (image.name.as_str(), image.tag.as_deref()),
            ("ghcr.io/acme/web", Some("1.4"))
        );
        let proxy = r.containers[1].image.as_ref().expect("image");
        assert_eq!(proxy.name, "registry:5000/envoy");
        assert_eq!(
            (proxy.tag.as_deref(), proxy.digest.as_deref()),
            (None, Some("sha256:feed"))
        );
        assert_eq!(
            r.containers[2]
                .image
                .as_ref()
                .and_then(|i| i.tag.as_deref()),
            Some("latest")
        );
        // Two regular containers: no single-container fallback.
        assert_eq!(r.only_container(), None);
        let db = PodRecord::from_pod(&db(), &s).expect("record");
        assert_eq!(db.only_container(), Some(0));
        assert_eq!(db.hostname, "db-0-host");
        // No startTime: the creation time stands in.
        assert_eq!(db.start_time.as_deref(), Some("2024-05-01T08:00:00Z"));
    }

    #[test]
    fn host_network_pods_are_not_found_by_ip() {
        let s = settings("{}");
        let mut t = table();
        t.handle(Event::Apply(agent()), &s, Instant::now());
        assert!(t.by_ip("192.168.1.10").is_none());
        assert_eq!(
            t.by_container_id("eeee").map(|p| p.uid.as_str()),
            Some("uid-agent")
        );
    }

    #[test]
    fn excluded_pods_are_not_kept() {
        let s = settings("exclude:\n  pods:\n    - name: ^web-\n");
        let mut t = table();
        assert_eq!(
            t.handle(Event::Apply(web()), &s, Instant::now()),
            Changes::default()
        );
        assert!(t.is_empty());
        // The default excludes jaeger's agent.
        let mut j = web_json();
        j["metadata"]["name"] = json!("jaeger-agent");
        let mut t = table();
        t.handle(Event::Apply(pod(j)), &settings("{}"), Instant::now());
        assert!(t.is_empty());
    }

    #[test]
    fn updates_move_the_indexes() {
        let s = settings("{}");
        let mut t = table();
        let now = Instant::now();
        // Scheduled, not started: no IP, no container ids yet.
        let mut pending = web_json();
        pending["status"] = json!({});
        t.handle(Event::Apply(pod(pending)), &s, now);
        assert!(t.by_ip("10.0.0.5").is_none());
        assert!(t.by_container_id("aaaa").is_none());
        assert_eq!(t.by_uid("uid-web").map(|p| p.containers.len()), Some(3));
        let changes = t.handle(Event::Apply(web()), &s, now);
        assert_eq!(changes.updated, 1);
        assert!(t.by_ip("10.0.0.5").is_some());
        assert!(t.by_container_id("aaaa").is_some());
        // A new IP and a restarted container: the old keys go.
        let mut moved = web_json();
        moved["status"]["podIP"] = json!("10.0.0.55");
        moved["status"]["containerStatuses"][1]["containerID"] = json!("cri-o://bbb2");
        t.handle(Event::Apply(pod(moved)), &s, now);
        assert!(t.by_ip("10.0.0.5").is_none());
        assert_eq!(
            t.by_ip("10.0.0.55").map(|p| p.uid.as_str()),
            Some("uid-web")
        );
        assert!(t.by_container_id("bbbb").is_none());
        assert!(t.by_container_id("bbb2").is_some());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn deleted_pods_stay_for_the_grace_period() {
        let s = settings("{}");
        let mut t = PodTable::new(Duration::from_secs(60));
        let t0 = Instant::now();
        t.handle(Event::Apply(web()), &s, t0);
        assert_eq!(t.handle(Event::Delete(web()), &s, t0).deleted, 1);
        // A second delete of the same pod changes nothing.
        assert_eq!(t.handle(Event::Delete(web()), &s, t0).deleted, 0);
        assert!(t.is_deleted("uid-web"));
        assert_eq!(t.sweep(t0 + Duration::from_secs(59)), 0);
        assert!(
            t.by_container_id("aaaa").is_some(),
            "late data still matches"
        );
        assert!(t.by_ip("10.0.0.5").is_some());
        assert_eq!(t.sweep(t0 + Duration::from_secs(60)), 1);
        assert!(t.is_empty());
        assert!(t.by_container_id("aaaa").is_none());
        assert!(t.by_ip("10.0.0.5").is_none());
        assert_eq!(t.by_name("web-7d4b9c-abcde").count(), 0);
    }

    #[test]
    fn a_deleted_pods_ip_goes_to_its_successor_and_stays_there() {
        let s = settings("{}");
        let mut t = PodTable::new(Duration::from_secs(60));
        let t0 = Instant::now();
        t.handle(Event::Apply(web()), &s, t0);
        t.handle(Event::Delete(web()), &s, t0);
        let mut next = web_json();
        next["metadata"]["uid"] = json!("uid-web-2");
        next["metadata"]["name"] = json!("web-7d4b9c-fghij");
        next["metadata"]["creationTimestamp"] = json!("2024-05-01T11:00:00Z");
        next["status"]["containerStatuses"] = json!([]);
        t.handle(Event::Apply(pod(next.clone())), &s, t0);
        assert_eq!(
            t.by_ip("10.0.0.5").map(|p| p.uid.as_str()),
            Some("uid-web-2")
        );
        // A late update of the old pod does not take the IP back, nor does its sweep drop it.
        let mut late = web_json();
        late["metadata"]["resourceVersion"] = json!("9");
        t.handle(Event::Apply(pod(late)), &s, t0);
        t.handle(Event::Delete(web()), &s, t0);
        assert_eq!(
            t.by_ip("10.0.0.5").map(|p| p.uid.as_str()),
            Some("uid-web-2")
        );
        t.sweep(t0 + Duration::from_secs(61));
        assert_eq!(
            t.by_ip("10.0.0.5").map(|p| p.uid.as_str()),
            Some("uid-web-2")
        );
        assert!(t.by_uid("uid-web").is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_restarted_watch_deletes_what_the_relist_no_longer_has() {
        let s = settings("{}");
        let mut t = table();
        let now = Instant::now();
        t.handle(Event::Init, &s, now);
        t.handle(Event::InitApply(web()), &s, now);
        t.handle(Event::InitApply(db()), &s, now);
        assert!(!t.synced());
        assert_eq!(t.handle(Event::InitDone, &s, now), Changes::default());
        assert!(t.synced());
        // The watch restarts (a 410 Gone, an API server restart) and db-0 is gone meanwhile.
        t.handle(Event::Init, &s, now);
        assert_eq!(t.handle(Event::InitApply(web()), &s, now).updated, 1);
        let done = t.handle(Event::InitDone, &s, now);
        assert_eq!(done.deleted, 1);
        assert!(t.is_deleted("uid-db"));
        assert!(!t.is_deleted("uid-web"));
        // Still there for late data, until the sweep.
        assert!(t.by_container_id("dddd").is_some());
        t.sweep(now + DELETE_GRACE_PERIOD);
        assert!(t.by_container_id("dddd").is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_pod_listed_again_after_a_delete_is_live_again() {
        let s = settings("{}");
        let mut t = PodTable::new(Duration::from_secs(1));
        let now = Instant::now();
        t.handle(Event::Apply(web()), &s, now);
        t.handle(Event::Delete(web()), &s, now);
        t.handle(Event::Init, &s, now);
        t.handle(Event::InitApply(web()), &s, now);
        t.handle(Event::InitDone, &s, now);
        assert!(!t.is_deleted("uid-web"));
        assert_eq!(t.sweep(now + Duration::from_secs(5)), 0);
        assert!(t.by_uid("uid-web").is_some());
    }

    #[test]
    fn pods_without_a_uid_are_ignored() {
        let s = settings("{}");
        let mut t = table();
        let mut j = web_json();
        j["metadata"].as_object_mut().map(|m| m.remove("uid"));
        assert_eq!(
            t.handle(Event::Apply(pod(j.clone())), &s, Instant::now()),
            Changes::default()
        );
        assert_eq!(
            t.handle(Event::Delete(pod(j)), &s, Instant::now()),
            Changes::default()
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_recreated_pod_of_the_same_name_is_found_before_the_deleted_one() {
        let s = settings("{}");
        let mut t = table();
        let now = Instant::now();
        t.handle(Event::Apply(db()), &s, now);
        t.handle(Event::Delete(db()), &s, now);
        let mut recreated = db();
        recreated.metadata.uid = Some("uid-db-2".into());
        t.handle(Event::Apply(recreated), &s, now);
        let named: Vec<&str> = t.by_name("db-0").map(|p| p.uid.as_str()).collect();
        assert_eq!(
            named,
            ["uid-db-2", "uid-db"],
            "newest first; the old one kept for late data"
        );
    }
}
