//! Metadata-only caches of the objects around a pod: its namespace and node, the
//! ReplicaSet between it and its Deployment, the Job between it and its CronJob, and the
//! workloads whose labels or annotations are extracted. Each is a kube-rs reflector
//! store fed by a metadata watch, present only when something needs it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::config::{FieldFrom, Settings};
use crate::pod::Owner;
use crate::vocabulary::Metadata;

/// The reflector stores in use; None where nothing needs that kind.
#[derive(Clone, Default)]
pub struct MetaStores {
    pub namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
    pub nodes: Option<Store<PartialObjectMeta<Node>>>,
    pub replicasets: Option<Store<PartialObjectMeta<ReplicaSet>>>,
    pub deployments: Option<Store<PartialObjectMeta<Deployment>>>,
    pub statefulsets: Option<Store<PartialObjectMeta<StatefulSet>>>,
    pub daemonsets: Option<Store<PartialObjectMeta<DaemonSet>>>,
    pub jobs: Option<Store<PartialObjectMeta<Job>>>,
}

/// Which metadata watches a config needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// All namespaces (their labels or annotations are extracted).
    pub namespaces: bool,
    /// Only `kube-system`, for `k8s.cluster.uid`.
    pub cluster_uid_only: bool,
    pub nodes: bool,
    pub replicasets: bool,
    pub deployments: bool,
    pub statefulsets: bool,
    pub daemonsets: bool,
    pub jobs: bool,
}

impl Needs {
    pub fn of(settings: &Settings) -> Needs {
        let m = settings.metadata;
        let namespaces = settings.fields_from(FieldFrom::Namespace);
        // service.name falls back to the deployment's name, so it needs it too.
        let deployment_names = m.any(&[
            Metadata::DeploymentName,
            Metadata::DeploymentUid,
            Metadata::ServiceName,
        ]);
        Needs {
            namespaces,
            cluster_uid_only: !namespaces && m.has(Metadata::ClusterUid),
            nodes: settings.fields_from(FieldFrom::Node) || m.has(Metadata::NodeUid),
            // The ReplicaSet → Deployment link; none when the name comes from the
            // ReplicaSet's own name (then there is no deployment uid either).
            replicasets: !settings.deployment_name_from_replicaset
                && (deployment_names || settings.fields_from(FieldFrom::Deployment)),
            deployments: settings.fields_from(FieldFrom::Deployment),
            statefulsets: settings.fields_from(FieldFrom::StatefulSet),
            daemonsets: settings.fields_from(FieldFrom::DaemonSet),
            jobs: m.any(&[Metadata::CronJobName, Metadata::CronJobUid])
                || settings.fields_from(FieldFrom::Job),
        }
    }

    /// The RBAC rules these watches need, for error messages.
    pub fn resources(&self) -> Vec<&'static str> {
        let mut out = vec!["pods"];
        if self.namespaces || self.cluster_uid_only {
            out.push("namespaces");
        }
        for (on, name) in [
            (self.nodes, "nodes"),
            (self.replicasets, "replicasets"),
            (self.deployments, "deployments"),
            (self.statefulsets, "statefulsets"),
            (self.daemonsets, "daemonsets"),
            (self.jobs, "jobs"),
        ] {
            if on {
                out.push(name);
            }
        }
        out
    }
}

/// The parts of an object's metadata the processor reads.
#[derive(Debug, Clone, Copy)]
pub struct MetaView<'a> {
    pub uid: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

fn cluster_scoped<K>(
    store: Option<&Store<PartialObjectMeta<K>>>,
    name: &str,
) -> Option<Arc<PartialObjectMeta<K>>>
where
    K: Resource<DynamicType = ()> + Clone,
    PartialObjectMeta<K>: Resource<DynamicType = ()> + Clone,
{
    store?.get(&ObjectRef::new(name))
}

fn namespaced<K>(
    store: Option<&Store<PartialObjectMeta<K>>>,
    namespace: &str,
    owner: &Owner,
) -> Option<Arc<PartialObjectMeta<K>>>
where
    K: Resource<DynamicType = ()> + Clone,
    PartialObjectMeta<K>: Resource<DynamicType = ()> + Clone,
{
    let found = store?.get(&ObjectRef::new(&owner.name).within(namespace))?;
    // A name can be reused after a delete; only the owner the pod points at counts.
    (found.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(found)
}

/// Runs `f` on an object's metadata.
fn view<K, R>(obj: &PartialObjectMeta<K>, f: impl FnOnce(MetaView<'_>) -> R) -> R {
    f(MetaView {
        uid: obj.metadata.uid.as_deref(),
        labels: obj.metadata.labels.as_ref(),
        annotations: obj.metadata.annotations.as_ref(),
    })
}

impl MetaStores {
    pub fn namespace<R>(&self, name: &str, f: impl FnOnce(MetaView<'_>) -> R) -> Option<R> {
        cluster_scoped(self.namespaces.as_ref(), name).map(|o| view(&o, f))
    }

    pub fn node<R>(&self, name: &str, f: impl FnOnce(MetaView<'_>) -> R) -> Option<R> {
        cluster_scoped(self.nodes.as_ref(), name).map(|o| view(&o, f))
    }

    /// The Deployment that controls this ReplicaSet, per the ReplicaSet watch: None if
    /// the ReplicaSet is not known (yet), Some(None) if it has no Deployment.
    pub fn replicaset_owner(&self, namespace: &str, rs: &Owner) -> Option<Option<Owner>> {
        let found = namespaced(self.replicasets.as_ref(), namespace, rs)?;
        Some(
            Owner::controller(found.metadata.owner_references.as_deref())
                .filter(|o| o.kind == "Deployment"),
        )
    }

    /// The CronJob that controls this Job, per the Job watch (None: Job not known).
    pub fn job_owner(&self, namespace: &str, job: &Owner) -> Option<Option<Owner>> {
        let found = namespaced(self.jobs.as_ref(), namespace, job)?;
        Some(
            Owner::controller(found.metadata.owner_references.as_deref())
                .filter(|o| o.kind == "CronJob"),
        )
    }

    /// A workload's metadata, for labels / annotations `from` it.
    pub fn workload<R>(
        &self,
        from: FieldFrom,
        namespace: &str,
        owner: &Owner,
        f: impl FnOnce(MetaView<'_>) -> R,
    ) -> Option<R> {
        match from {
            FieldFrom::Deployment => {
                namespaced(self.deployments.as_ref(), namespace, owner).map(|o| view(&o, f))
            }
            FieldFrom::StatefulSet => {
                namespaced(self.statefulsets.as_ref(), namespace, owner).map(|o| view(&o, f))
            }
            FieldFrom::DaemonSet => {
                namespaced(self.daemonsets.as_ref(), namespace, owner).map(|o| view(&o, f))
            }
            FieldFrom::Job => namespaced(self.jobs.as_ref(), namespace, owner).map(|o| view(&o, f)),
            FieldFrom::Pod | FieldFrom::Namespace | FieldFrom::Node => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::settings;

    #[test]
    fn watches_only_what_the_config_needs() {
        // contrib's defaults: the deployment name needs ReplicaSets, nothing else.
        let n = Needs::of(&settings("{}"));
        assert_eq!(n.resources(), ["pods", "replicasets"]);
        let n = Needs::of(&settings("extract:\n  metadata: [k8s.pod.name]\n"));
        assert_eq!(n.resources(), ["pods"]);
        let n = Needs::of(&settings(
            "extract:\n  metadata: [service.name]\n  deployment_name_from_replicaset: true\n",
        ));
        assert_eq!(n.resources(), ["pods"]);
        let n = Needs::of(&settings(
            "extract:\n  metadata: [k8s.cluster.uid, k8s.node.uid, k8s.cronjob.name]\n",
        ));
        assert!(n.cluster_uid_only && !n.namespaces);
        assert_eq!(n.resources(), ["pods", "namespaces", "nodes", "jobs"]);
        let n = Needs::of(&settings(
            "extract:\n  metadata: [k8s.cluster.uid]\n  labels:\n    - {key: a, from: namespace}\n    - {key: b, from: deployment}\n  annotations:\n    - {key: c, from: statefulset}\n    - {key: d, from: daemonset}\n    - {key: e, from: job}\n    - {key: f, from: node}\n",
        ));
        assert!(n.namespaces && !n.cluster_uid_only);
        assert_eq!(
            n.resources(),
            [
                "pods",
                "namespaces",
                "nodes",
                "replicasets",
                "deployments",
                "statefulsets",
                "daemonsets",
                "jobs"
            ]
        );
    }
}
