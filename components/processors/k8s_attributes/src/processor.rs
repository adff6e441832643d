//! The k8s_attributes processor: finds each resource's pod and adds its attributes.
//!
//! The hot path takes one read lock on the pod table per batch, decides every resource's
//! additions on the shared tree, and copies the batch only if one has any.

use std::sync::Arc;

use async_trait::async_trait;
use profcol_core::component::{ProcessError, Processor};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::{KeyValue, Resource};

use crate::association::{self, identify};
use crate::config::Settings;
use crate::extract::{ContainerChoice, Emitter, attr_text, extract};
use crate::metrics::Metrics;
use crate::vocabulary::{K8S_CONTAINER_RESTART_COUNT, Metadata};
use crate::watch::Shared;

/// What keeps the watches running: dropped with the last processor that uses them.
pub struct Source {
    pub shared: Arc<Shared>,
    pub _stop: tokio_util::sync::DropGuard,
}

pub struct K8sAttributesProcessor {
    settings: Arc<Settings>,
    /// None in passthrough mode.
    source: Option<Arc<Source>>,
    metrics: Metrics,
}

impl K8sAttributesProcessor {
    pub fn new(settings: Arc<Settings>, source: Option<Arc<Source>>, metrics: Metrics) -> Self {
        K8sAttributesProcessor {
            settings,
            source,
            metrics,
        }
    }

    /// The attributes to add to a resource with `attributes`, sent from `connection`.
    fn additions(
        &self,
        attributes: &[KeyValue],
        connection: Option<&str>,
        shared: Option<(&Shared, &crate::cache::PodTable)>,
    ) -> Vec<KeyValue> {
        let settings = &self.settings;
        let mut out = Emitter::new(attributes);
        let id = identify(&settings.rules, attributes, connection);
        // The peer's address is the pod's when the connection decided (an agent in a
        // pod sending to a gateway).
        if let Some(ip) = id.as_ref().and_then(|i| i.connection_ip())
            && (settings.passthrough || settings.metadata.has(Metadata::PodIp))
        {
            out.put(Metadata::PodIp.as_str(), || Some(ip.to_owned()));
        }
        let Some((shared, table)) = shared else {
            return out.added;
        };
        let found = id.as_ref().and_then(|id| association::lookup(table, id));
        let Some(found) = found else {
            if shared.synced() {
                self.metrics.miss.add(1);
            } else {
                self.metrics.not_synced.add(1);
            }
            return out.added;
        };
        self.metrics.hit.add(1);
        let pod = &found.pod;
        let index = found
            .container
            .or_else(|| {
                attr_text(attributes, Metadata::ContainerId.as_str())
                    .and_then(|id| pod.container_by_id(&id))
            })
            .or_else(|| {
                attr_text(attributes, Metadata::ContainerName.as_str())
                    .and_then(|name| pod.container_by_name(&name))
            })
            .or_else(|| pod.only_container());
        let restart_count = attr_text(attributes, K8S_CONTAINER_RESTART_COUNT)
            .and_then(|v| v.trim().parse::<i64>().ok());
        extract(
            pod,
            ContainerChoice {
                index,
                restart_count,
            },
            settings,
            &shared.stores,
            &mut out,
        );
        out.added
    }

    /// Enriches every resource of `batch`; copies it only if something is added.
    pub fn enrich(&self, mut batch: ProfileBatch) -> ProfileBatch {
        let connection = batch
            .client()
            .and_then(|c| association::connection_ip(c.addr));
        let shared = self.source.as_ref().map(|s| s.shared.as_ref());
        let guard = shared.map(|s| s.table.read().unwrap_or_else(|e| e.into_inner()));
        let lookup = shared.zip(guard.as_deref());
        let additions: Vec<Vec<KeyValue>> = batch
            .resource_profiles()
            .iter()
            .map(|rp| {
                let attributes = rp.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
                self.additions(attributes, connection.as_deref(), lookup)
            })
            .collect();
        drop(guard);
        if additions.iter().all(Vec::is_empty) {
            return batch;
        }
        for (rp, added) in batch.resource_profiles_mut().iter_mut().zip(additions) {
            if added.is_empty() {
                continue;
            }
            let resource = rp.resource.get_or_insert_with(Resource::default);
            for kv in added {
                // An empty value may be there; it is replaced in place.
                match resource.attributes.iter_mut().find(|a| a.key == kv.key) {
                    Some(existing) => existing.value = kv.value,
                    None => resource.attributes.push(kv),
                }
            }
        }
        batch
    }
}

#[async_trait]
impl Processor for K8sAttributesProcessor {
    async fn process(
        &mut self,
        batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        out.push(self.enrich(batch));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use kube::runtime::watcher::Event;
    use profcol_core::pdata::ClientInfo;
    use profcol_core::telemetry::Telemetry;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::meta::{MetaStores, Needs};
    use crate::metrics::{ASSOCIATIONS, TABLE_SIZE};
    use crate::testutil::{attrs, db, get, settings, web};

    use profcol_core::testkit::batch_of_resources as batch;

    fn from(batch: ProfileBatch, peer: &str) -> ProfileBatch {
        let addr: SocketAddr = peer.parse().expect("addr");
        batch.with_client(ClientInfo { addr: Some(addr) })
    }

    fn resource(b: &ProfileBatch, i: usize) -> &[KeyValue] {
        b.resource_profiles()[i]
            .resource
            .as_ref()
            .map_or(&[][..], |r| &r.attributes[..])
    }

    struct Fixture {
        processor: K8sAttributesProcessor,
        shared: Arc<Shared>,
        telemetry: Telemetry,
    }

    fn fixture(yaml: &str) -> Fixture {
        let s = Arc::new(settings(yaml));
        let telemetry = Telemetry::new();
        let metrics = Metrics::new(&telemetry, "k8s_attributes");
        let shared = Arc::new(Shared::new(s.clone(), MetaStores::default(), Needs::of(&s)));
        let source = Arc::new(Source {
            shared: shared.clone(),
            _stop: CancellationToken::new().drop_guard(),
        });
        Fixture {
            processor: K8sAttributesProcessor::new(s, Some(source), metrics),
            shared,
            telemetry,
        }
    }

    impl Fixture {
        /// Feeds a full list, as the watcher's first sync does.
        fn list(&self, pods: Vec<k8s_openapi::api::core::v1::Pod>) {
            let metrics = Metrics::new(&self.telemetry, "k8s_attributes");
            let mut t = self.shared.table.write().expect("lock");
            let now = Instant::now();
            t.handle(Event::Init, &self.shared.settings, now);
            for p in pods {
                let c = t.handle(Event::InitApply(p), &self.shared.settings, now);
                metrics.record(c, t.len());
            }
            t.handle(Event::InitDone, &self.shared.settings, now);
            self.shared
                .pods_synced
                .store(true, std::sync::atomic::Ordering::Release);
        }

        fn count(&self, status: &str) -> i64 {
            self.telemetry
                .value(ASSOCIATIONS, &[("status", status)])
                .unwrap_or(0)
        }

        async fn run(&mut self, b: ProfileBatch) -> ProfileBatch {
            let mut out = Vec::new();
            self.processor.process(b, &mut out).await.expect("process");
            assert_eq!(out.len(), 1);
            out.remove(0)
        }
    }

    const RULES: &str = "
extract:
  metadata: [k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.deployment.name,
    k8s.container.name, container.id, service.name]
pod_association:
  - sources: [{from: resource_attribute, name: container.id}]
  - sources: [{from: resource_attribute, name: k8s.pod.uid}]
  - sources: [{from: resource_attribute, name: k8s.pod.ip}]
  - sources: [{from: connection}]
";

    #[tokio::test]
    async fn resources_are_enriched_by_the_rule_that_applies() {
        let mut f = fixture(RULES);
        f.list(vec![web(), db()]);
        assert_eq!(f.telemetry.value(TABLE_SIZE, &[]), Some(2));
        let b = from(
            batch(vec![
                Some(attrs(&[("container.id", "bbbb")])),
                Some(attrs(&[("k8s.pod.uid", "uid-db")])),
                Some(attrs(&[("container.id", "ffff"), ("process.pid", "7")])),
                Some(attrs(&[("k8s.pod.ip", "10.0.0.9")])),
                None,
            ]),
            "10.0.0.5:40000",
        );
        let out = f.run(b).await;
        let r0 = resource(&out, 0);
        assert_eq!(get(r0, "k8s.pod.name").as_deref(), Some("web-7d4b9c-abcde"));
        assert_eq!(get(r0, "k8s.container.name").as_deref(), Some("proxy"));
        assert_eq!(get(r0, "k8s.deployment.name").as_deref(), Some("web"));
        assert_eq!(get(r0, "service.name").as_deref(), Some("web-app"));
        let r1 = resource(&out, 1);
        assert_eq!(get(r1, "k8s.namespace.name").as_deref(), Some("data"));
        assert_eq!(get(r1, "service.name").as_deref(), Some("orders"));
        // One container: the fallback names it.
        assert_eq!(get(r1, "container.id").as_deref(), Some("dddd"));
        // An unknown container id: untouched, even though the connection would match.
        assert_eq!(
            resource(&out, 2),
            attrs(&[("container.id", "ffff"), ("process.pid", "7")])
        );
        assert_eq!(resource(&out, 3), attrs(&[("k8s.pod.ip", "10.0.0.9")]));
        // No resource at all: the connection finds the pod, and a resource is made for it.
        assert_eq!(
            get(resource(&out, 4), "k8s.pod.uid").as_deref(),
            Some("uid-web")
        );
        assert_eq!(f.count("hit"), 3);
        assert_eq!(f.count("miss"), 2);
        assert_eq!(f.count("not_synced"), 0);
        assert_eq!(out.sample_count(), 5);
    }

    #[tokio::test]
    async fn before_the_first_list_data_passes_and_is_counted() {
        let mut f = fixture(RULES);
        let b = batch(vec![Some(attrs(&[("container.id", "bbbb")]))]);
        let out = f.run(b.clone()).await;
        assert_eq!(out, b);
        assert_eq!(f.count("not_synced"), 1);
        assert_eq!(f.count("miss"), 0);
        f.list(vec![web()]);
        let out = f.run(b).await;
        assert_eq!(
            get(resource(&out, 0), "k8s.pod.uid").as_deref(),
            Some("uid-web")
        );
        assert_eq!(f.count("hit"), 1);
    }

    #[tokio::test]
    async fn a_batch_is_copied_only_when_something_is_added() {
        let mut f = fixture(RULES);
        f.list(vec![web()]);
        let unmatched = batch(vec![Some(attrs(&[("container.id", "ffff")]))]);
        let kept = unmatched.clone();
        let out = f.run(unmatched).await;
        assert!(std::ptr::eq(
            out.resource_profiles().as_ptr(),
            kept.resource_profiles().as_ptr()
        ));
        // Everything already set: nothing to add, no copy either.
        let full = batch(vec![Some(attrs(&[
            ("container.id", "aaaa"),
            ("k8s.namespace.name", "x"),
            ("k8s.pod.name", "x"),
            ("k8s.pod.uid", "x"),
            ("k8s.deployment.name", "x"),
            ("k8s.container.name", "x"),
            ("service.name", "x"),
        ]))]);
        let kept = full.clone();
        let out = f.run(full).await;
        assert!(std::ptr::eq(
            out.resource_profiles().as_ptr(),
            kept.resource_profiles().as_ptr()
        ));
        // A match on a shared batch copies, and the other holder keeps its data.
        let shared = batch(vec![Some(attrs(&[("container.id", "aaaa")]))]);
        let other = shared.clone();
        let out = f.run(shared).await;
        assert_eq!(resource(&other, 0), attrs(&[("container.id", "aaaa")]));
        assert_eq!(
            get(resource(&out, 0), "k8s.container.name").as_deref(),
            Some("web")
        );
        assert!(std::ptr::eq(out.dictionary(), other.dictionary()));
    }

    #[tokio::test]
    async fn an_empty_value_is_replaced_in_place() {
        let mut f = fixture(RULES);
        f.list(vec![web()]);
        let b = batch(vec![Some(attrs(&[
            ("k8s.pod.name", ""),
            ("container.id", "aaaa"),
            ("service.name", "kept"),
        ]))]);
        let out = f.run(b).await;
        let r = resource(&out, 0);
        assert_eq!(r[0].key, "k8s.pod.name");
        assert_eq!(get(r, "k8s.pod.name").as_deref(), Some("web-7d4b9c-abcde"));
        assert_eq!(get(r, "service.name").as_deref(), Some("kept"));
        assert_eq!(r.iter().filter(|kv| kv.key == "k8s.pod.name").count(), 1);
    }

    #[tokio::test]
    async fn deleted_pods_still_enrich_until_swept() {
        let mut f = fixture(RULES);
        f.list(vec![web()]);
        let now = Instant::now();
        f.shared
            .table
            .write()
            .expect("lock")
            .handle(Event::Delete(web()), &f.shared.settings, now);
        let b = batch(vec![Some(attrs(&[("container.id", "aaaa")]))]);
        let out = f.run(b.clone()).await;
        assert_eq!(
            get(resource(&out, 0), "k8s.pod.uid").as_deref(),
            Some("uid-web")
        );
        f.shared
            .table
            .write()
            .expect("lock")
            .sweep(now + crate::cache::DELETE_GRACE_PERIOD);
        let out = f.run(b.clone()).await;
        assert_eq!(out, b);
        assert_eq!(f.count("miss"), 1);
    }

    #[tokio::test]
    async fn passthrough_only_sets_the_pod_ip_from_the_connection() {
        let s = Arc::new(settings("passthrough: true"));
        let telemetry = Telemetry::new();
        let mut p = K8sAttributesProcessor::new(s, None, Metrics::new(&telemetry, "k"));
        let b = from(
            batch(vec![
                Some(attrs(&[("container.id", "aaaa")])),
                Some(attrs(&[("k8s.pod.ip", "10.0.0.9")])),
            ]),
            "[::ffff:10.0.0.5]:4317",
        );
        let mut out = Vec::new();
        p.process(b, &mut out).await.expect("process");
        let out = out.remove(0);
        assert_eq!(
            resource(&out, 0),
            attrs(&[("container.id", "aaaa"), ("k8s.pod.ip", "10.0.0.5")])
        );
        // The k8s.pod.ip rule came first: the connection did not decide.
        assert_eq!(resource(&out, 1), attrs(&[("k8s.pod.ip", "10.0.0.9")]));
        assert_eq!(telemetry.value(ASSOCIATIONS, &[]), Some(0));
        // No connection at all: nothing.
        let b = batch(vec![Some(attrs(&[("process.pid", "1")]))]);
        let mut out = Vec::new();
        p.process(b.clone(), &mut out).await.expect("process");
        assert_eq!(out, vec![b]);
    }

    #[tokio::test]
    async fn a_connection_match_writes_the_pod_ip_when_asked_for() {
        let mut f = fixture("extract:\n  metadata: [k8s.pod.ip, k8s.pod.name]\n");
        f.list(vec![db()]);
        let b = from(batch(vec![Some(attrs(&[]))]), "10.0.0.6:1");
        let out = f.run(b).await;
        assert_eq!(
            resource(&out, 0),
            attrs(&[("k8s.pod.ip", "10.0.0.6"), ("k8s.pod.name", "db-0")])
        );
        // Not found, still written: the peer is the pod (contrib does the same).
        let b = from(batch(vec![Some(attrs(&[]))]), "10.0.0.99:1");
        let out = f.run(b).await;
        assert_eq!(resource(&out, 0), attrs(&[("k8s.pod.ip", "10.0.0.99")]));
    }

    /// service_name runs after k8s_attributes and names the service after what it wrote.
    #[tokio::test]
    async fn service_name_reads_what_this_processor_writes() {
        use profcol_processor_service_name::{Format, K8S_PRECEDENCE, ServiceNameProcessor};
        let mut f = fixture(
            "extract:\n  metadata: [k8s.namespace.name, k8s.pod.name, k8s.deployment.name, k8s.statefulset.name, k8s.daemonset.name, k8s.cronjob.name, k8s.job.name, k8s.container.name]\npod_association:\n  - sources: [{from: resource_attribute, name: k8s.pod.uid}]\n",
        );
        for key in K8S_PRECEDENCE {
            assert!(
                crate::vocabulary::Metadata::parse(key).is_some(),
                "service_name reads {key}, which this processor does not write"
            );
        }
        f.list(vec![web(), db()]);
        let b = batch(vec![
            Some(attrs(&[("k8s.pod.uid", "uid-web")])),
            Some(attrs(&[("k8s.pod.uid", "uid-db")])),
        ]);
        let enriched = f.run(b).await;
        let mut names = ServiceNameProcessor::new(Format::Plain, None);
        let mut out = Vec::new();
        names.process(enriched, &mut out).await.expect("process");
        let service = |i: usize| get(resource(&out[0], i), "service.name");
        assert_eq!(service(0).as_deref(), Some("web"));
        assert_eq!(service(1).as_deref(), Some("db"));
    }
}
