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
#[path = "processor_tests.rs"]
mod tests;
