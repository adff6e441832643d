//! From a matched pod (and container) to the attributes a resource gets. Nothing that a
//! resource already has with a non-empty value is written, and nothing is even built
//! for it.

use std::borrow::Cow;

use profcol_core::pdata::any_value_to_string;
use profcol_core::pdata::types::{AnyValue, ArrayValue, KeyValue, Value};

use crate::config::{FieldFrom, FieldKind, FieldRule, Settings};
use crate::meta::{MetaStores, MetaView};
use crate::pod::{ContainerRecord, Owner, PodRecord};
use crate::vocabulary::{CLUSTER_UID_NAMESPACE, Metadata};

/// A string attribute's value (other kinds rendered as text); None when absent.
pub fn attr_text<'a>(attributes: &'a [KeyValue], key: &str) -> Option<Cow<'a, str>> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match &value.value {
        Some(Value::StringValue(s)) => Some(Cow::Borrowed(s.as_str())),
        None => None,
        Some(_) => Some(Cow::Owned(any_value_to_string(value))),
    }
}

/// Whether the attribute is missing or an empty string (either may be written).
pub fn absent_or_empty(attributes: &[KeyValue], key: &str) -> bool {
    match attributes.iter().find(|kv| kv.key == key) {
        None => true,
        Some(kv) => match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            None => true,
            Some(Value::StringValue(s)) => s.is_empty(),
            Some(_) => false,
        },
    }
}

pub fn string_value(s: String) -> AnyValue {
    AnyValue {
        value: Some(Value::StringValue(s)),
    }
}

/// Collects the attributes to add to one resource, skipping any it has.
pub struct Emitter<'a> {
    existing: &'a [KeyValue],
    pub added: Vec<KeyValue>,
}

impl<'a> Emitter<'a> {
    pub fn new(existing: &'a [KeyValue]) -> Self {
        Emitter {
            existing,
            added: Vec::new(),
        }
    }

    /// Whether `key` may still be written.
    pub fn wants(&self, key: &str) -> bool {
        absent_or_empty(self.existing, key) && !self.added.iter().any(|kv| kv.key == key)
    }

    /// Writes `key` if it may be and `value` gives a non-empty text.
    pub fn put(&mut self, key: &str, value: impl FnOnce() -> Option<String>) {
        if self.wants(key)
            && let Some(v) = value().filter(|v| !v.is_empty())
        {
            self.added.push(KeyValue {
                key: key.to_owned(),
                value: Some(string_value(v)),
                key_strindex: 0,
            });
        }
    }

    pub fn put_value(&mut self, key: &str, value: impl FnOnce() -> Option<AnyValue>) {
        if self.wants(key)
            && let Some(v) = value()
        {
            self.added.push(KeyValue {
                key: key.to_owned(),
                value: Some(v),
                key_strindex: 0,
            });
        }
    }
}

/// The workloads above a pod, resolved through the metadata stores where watched and
/// from names where not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workloads {
    pub replicaset: Option<Owner>,
    /// Name, and uid when the ReplicaSet watch said it.
    pub deployment: Option<(String, Option<String>)>,
    pub statefulset: Option<Owner>,
    pub daemonset: Option<Owner>,
    pub job: Option<Owner>,
    pub cronjob: Option<(String, Option<String>)>,
}

/// Seconds either side of the pod's creation within which a Job's numeric suffix is
/// taken as its CronJob's scheduled minute.
const CRONJOB_SUFFIX_SLACK_SECONDS: i64 = 24 * 3600;

/// The CronJob name a Job name implies: the CronJob controller names Jobs
/// `<cronjob>-<scheduled time in minutes since the epoch>`.
pub fn cronjob_from_job_name(job: &str, pod_created: Option<i64>) -> Option<String> {
    let (prefix, suffix) = job.rsplit_once('-')?;
    if prefix.is_empty() || suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let minutes: i64 = suffix.parse().ok()?;
    let plausible = match pod_created {
        Some(created) => minutes
            .checked_mul(60)
            .and_then(|s| s.checked_sub(created))
            .and_then(i64::checked_abs)
            .is_some_and(|d| d <= CRONJOB_SUFFIX_SLACK_SECONDS),
        None => suffix.len() >= 8,
    };
    plausible.then(|| prefix.to_owned())
}

/// The Deployment name a ReplicaSet name implies: the name less `-<pod-template-hash>`.
pub fn deployment_from_replicaset_name(rs: &str, hash: Option<&str>) -> Option<String> {
    let hash = hash.filter(|h| !h.is_empty())?;
    rs.strip_suffix(hash)?
        .strip_suffix('-')
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
}

pub fn workloads(pod: &PodRecord, settings: &Settings, stores: &MetaStores) -> Workloads {
    let mut w = Workloads::default();
    let Some(owner) = &pod.owner else {
        return w;
    };
    match owner.kind.as_str() {
        "ReplicaSet" => {
            let from_name = || {
                deployment_from_replicaset_name(&owner.name, pod.pod_template_hash.as_deref())
                    .map(|name| (name, None))
            };
            w.deployment = if settings.deployment_name_from_replicaset {
                from_name()
            } else {
                match stores.replicaset_owner(&pod.namespace, owner) {
                    Some(d) => d.map(|d| (d.name, Some(d.uid))),
                    // Not watched, or not seen yet: the name still tells.
                    None => from_name(),
                }
            };
            w.replicaset = Some(owner.clone());
        }
        "StatefulSet" => w.statefulset = Some(owner.clone()),
        "DaemonSet" => w.daemonset = Some(owner.clone()),
        "Job" => {
            w.cronjob = match stores.job_owner(&pod.namespace, owner) {
                Some(c) => c.map(|c| (c.name, Some(c.uid))),
                None => cronjob_from_job_name(&owner.name, pod.created).map(|n| (n, None)),
            };
            w.job = Some(owner.clone());
        }
        _ => {}
    }
    w
}

/// What the semantic conventions make `service.name` of on Kubernetes, first found:
/// the `resource.opentelemetry.io/service.name` annotation, the labels
/// `app.kubernetes.io/instance` and `app.kubernetes.io/name`, the owning workload
/// (deployment, replicaset, statefulset, daemonset, cronjob, job), the pod, the container.
pub fn service_name(
    pod: &PodRecord,
    workloads: &Workloads,
    container: Option<&ContainerRecord>,
) -> Option<String> {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    pod.otel_annotation("service.name")
        .and_then(non_empty)
        .or_else(|| pod.app_instance.as_deref().and_then(non_empty))
        .or_else(|| pod.app_name.as_deref().and_then(non_empty))
        .or_else(|| workloads.deployment.as_ref().map(|(n, _)| n.clone()))
        .or_else(|| workloads.replicaset.as_ref().map(|o| o.name.clone()))
        .or_else(|| workloads.statefulset.as_ref().map(|o| o.name.clone()))
        .or_else(|| workloads.daemonset.as_ref().map(|o| o.name.clone()))
        .or_else(|| workloads.cronjob.as_ref().map(|(n, _)| n.clone()))
        .or_else(|| workloads.job.as_ref().map(|o| o.name.clone()))
        .or_else(|| non_empty(&pod.name))
        .or_else(|| container.map(|c| c.name.clone()))
}

/// `service.version`: annotation, `app.kubernetes.io/version`, else the image's
/// `<tag>@<digest>`, `<digest>` or `<tag>`.
pub fn service_version(pod: &PodRecord, container: Option<&ContainerRecord>) -> Option<String> {
    if let Some(v) = pod
        .otel_annotation("service.version")
        .filter(|v| !v.is_empty())
    {
        return Some(v.to_owned());
    }
    if let Some(v) = pod.app_version.as_deref().filter(|v| !v.is_empty()) {
        return Some(v.to_owned());
    }
    let image = container?.image.as_ref()?;
    match (&image.tag, &image.digest) {
        (Some(t), Some(d)) => Some(format!("{t}@{d}")),
        (None, Some(d)) => Some(d.clone()),
        (Some(t), None) => Some(t.clone()),
        (None, None) => None,
    }
}

/// Which container of the pod a resource is about, and which of its ids.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContainerChoice {
    pub index: Option<usize>,
    /// `k8s.container.restart_count` from the resource, to pick the instance's id.
    pub restart_count: Option<i64>,
}

/// Adds every configured attribute of `pod` to `out`.
pub fn extract(
    pod: &PodRecord,
    choice: ContainerChoice,
    settings: &Settings,
    stores: &MetaStores,
    out: &mut Emitter<'_>,
) {
    let m = settings.metadata;
    let container = choice.index.and_then(|i| pod.containers.get(i));

    if settings.otel_annotations {
        for (attr, value) in &pod.otel_annotations {
            out.put(attr, || Some(value.clone()));
        }
    }

    let put = |out: &mut Emitter<'_>, md: Metadata, value: &dyn Fn() -> Option<String>| {
        if m.has(md) {
            out.put(md.as_str(), value);
        }
    };
    put(out, Metadata::NamespaceName, &|| {
        Some(pod.namespace.clone())
    });
    put(out, Metadata::PodName, &|| Some(pod.name.clone()));
    put(out, Metadata::PodUid, &|| Some(pod.uid.clone()));
    put(out, Metadata::PodHostname, &|| Some(pod.hostname.clone()));
    put(out, Metadata::PodStartTime, &|| pod.start_time.clone());
    put(out, Metadata::PodIp, &|| pod.ip.clone());
    put(out, Metadata::NodeName, &|| Some(pod.node_name.clone()));
    put(out, Metadata::NodeUid, &|| {
        stores.node(&pod.node_name, |v| v.uid.map(str::to_owned))?
    });
    put(out, Metadata::ClusterUid, &|| {
        stores.namespace(CLUSTER_UID_NAMESPACE, |v| v.uid.map(str::to_owned))?
    });

    let workload_attrs = [
        Metadata::DeploymentName,
        Metadata::DeploymentUid,
        Metadata::ReplicaSetName,
        Metadata::ReplicaSetUid,
        Metadata::DaemonSetName,
        Metadata::DaemonSetUid,
        Metadata::StatefulSetName,
        Metadata::StatefulSetUid,
        Metadata::JobName,
        Metadata::JobUid,
        Metadata::CronJobName,
        Metadata::CronJobUid,
        Metadata::ServiceName,
    ];
    let workload_fields = settings
        .labels
        .iter()
        .chain(&settings.annotations)
        .any(|r| {
            matches!(
                r.from,
                FieldFrom::Deployment
                    | FieldFrom::StatefulSet
                    | FieldFrom::DaemonSet
                    | FieldFrom::Job
            )
        });
    let needs_workloads = (m.any(&workload_attrs)
        && workload_attrs.iter().any(|md| out.wants(md.as_str())))
        || workload_fields;
    let w = if needs_workloads {
        workloads(pod, settings, stores)
    } else {
        Workloads::default()
    };
    let name = |o: &Option<Owner>| o.as_ref().map(|o| o.name.clone());
    let uid = |o: &Option<Owner>| o.as_ref().map(|o| o.uid.clone());
    put(out, Metadata::DeploymentName, &|| {
        w.deployment.as_ref().map(|(n, _)| n.clone())
    });
    put(out, Metadata::DeploymentUid, &|| {
        w.deployment.as_ref().and_then(|(_, u)| u.clone())
    });
    put(out, Metadata::ReplicaSetName, &|| name(&w.replicaset));
    put(out, Metadata::ReplicaSetUid, &|| uid(&w.replicaset));
    put(out, Metadata::DaemonSetName, &|| name(&w.daemonset));
    put(out, Metadata::DaemonSetUid, &|| uid(&w.daemonset));
    put(out, Metadata::StatefulSetName, &|| name(&w.statefulset));
    put(out, Metadata::StatefulSetUid, &|| uid(&w.statefulset));
    put(out, Metadata::JobName, &|| name(&w.job));
    put(out, Metadata::JobUid, &|| uid(&w.job));
    put(out, Metadata::CronJobName, &|| {
        w.cronjob.as_ref().map(|(n, _)| n.clone())
    });
    put(out, Metadata::CronJobUid, &|| {
        w.cronjob.as_ref().and_then(|(_, u)| u.clone())
    });

    if let Some(c) = container {
        put(out, Metadata::ContainerName, &|| Some(c.name.clone()));
        put(out, Metadata::ContainerId, &|| {
            c.id(choice.restart_count).map(str::to_owned)
        });
        put(out, Metadata::ContainerImageName, &|| {
            c.image.as_ref().map(|i| i.name.clone())
        });
        put(out, Metadata::ContainerImageTag, &|| {
            c.image.as_ref().and_then(|i| i.tag.clone())
        });
        if m.has(Metadata::ContainerImageRepoDigests) {
            out.put_value(Metadata::ContainerImageRepoDigests.as_str(), || {
                let digest = c.repo_digest.clone()?;
                Some(AnyValue {
                    value: Some(Value::ArrayValue(ArrayValue {
                        values: vec![string_value(digest)],
                    })),
                })
            });
        }
    }

    put(out, Metadata::ServiceNamespace, &|| {
        pod.otel_annotation("service.namespace")
            .filter(|v| !v.is_empty())
            .map_or_else(|| Some(pod.namespace.clone()), |v| Some(v.to_owned()))
    });
    put(out, Metadata::ServiceName, &|| {
        service_name(pod, &w, container)
    });
    put(out, Metadata::ServiceVersion, &|| {
        service_version(pod, container)
    });
    put(
        out,
        Metadata::ServiceInstanceId,
        &|| match pod.otel_annotation("service.instance.id") {
            Some(v) if !v.is_empty() => Some(v.to_owned()),
            _ => container.map(|c| format!("{}.{}.{}", pod.namespace, pod.name, c.name)),
        },
    );

    for (tag, value) in &pod.tags {
        out.put(tag, || Some(value.clone()));
    }
    let rules = settings.labels.iter().chain(&settings.annotations);
    for rule in rules.filter(|r| r.from != FieldFrom::Pod) {
        let apply = |out: &mut Emitter<'_>, v: MetaView<'_>| apply_rule(rule, v, out);
        match rule.from {
            FieldFrom::Namespace => {
                stores.namespace(&pod.namespace, |v| apply(out, v));
            }
            FieldFrom::Node => {
                stores.node(&pod.node_name, |v| apply(out, v));
            }
            from => {
                let owner = match from {
                    FieldFrom::Deployment => w
                        .deployment
                        .as_ref()
                        .and_then(|(name, uid)| Some((name.clone(), uid.clone()?)))
                        .map(|(name, uid)| Owner {
                            kind: "Deployment".into(),
                            name,
                            uid,
                        }),
                    FieldFrom::StatefulSet => w.statefulset.clone(),
                    FieldFrom::DaemonSet => w.daemonset.clone(),
                    FieldFrom::Job => w.job.clone(),
                    FieldFrom::Pod | FieldFrom::Namespace | FieldFrom::Node => None,
                };
                if let Some(owner) = owner {
                    stores.workload(from, &pod.namespace, &owner, |v| apply(out, v));
                }
            }
        }
    }
}

fn apply_rule(rule: &FieldRule, view: MetaView<'_>, out: &mut Emitter<'_>) {
    let map = match rule.kind {
        FieldKind::Label => view.labels,
        FieldKind::Annotation => view.annotations,
    };
    for (k, v) in map.into_iter().flatten() {
        if let Some(tag) = rule.tag_for(k) {
            out.put(&tag, || Some(v.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::config::Settings;
    use crate::pod::PodRecord;
    use crate::testutil::{
        agent, attrs, cron_pod, db, get, meta, pod, settings, store_of, texts, web, web_json,
    };

    const ALL: &str = "extract:
  metadata: [k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.pod.hostname,
    k8s.pod.start_time, k8s.pod.ip, k8s.deployment.name, k8s.deployment.uid,
    k8s.replicaset.name, k8s.replicaset.uid, k8s.daemonset.name, k8s.daemonset.uid,
    k8s.statefulset.name, k8s.statefulset.uid, k8s.job.name, k8s.job.uid,
    k8s.cronjob.name, k8s.cronjob.uid, k8s.node.name, k8s.node.uid, k8s.cluster.uid,
    k8s.container.name, container.id, container.image.name, container.image.tag,
    container.image.repo_digests, service.namespace, service.name, service.version,
    service.instance.id]
";

    fn record(p: &Pod, s: &Settings) -> PodRecord {
        PodRecord::from_pod(p, s).expect("record")
    }

    /// What extraction adds to a resource with `existing` attributes.
    fn run(
        p: &Pod,
        s: &Settings,
        stores: &MetaStores,
        container: Option<&str>,
        existing: &[(&str, &str)],
    ) -> Vec<KeyValue> {
        let r = record(p, s);
        let index = container.and_then(|c| r.container_by_name(c));
        let existing = attrs(existing);
        let mut out = Emitter::new(&existing);
        extract(
            &r,
            ContainerChoice {
                index,
                restart_count: None,
            },
            s,
            stores,
            &mut out,
        );
        out.added
    }

    fn service_name_of(p: &Pod, stores: &MetaStores) -> Option<String> {
        let s = settings("extract:\n  metadata: [service.name]\n");
        get(&run(p, &s, stores, None, &[]), "service.name")
    }

    #[test]
    fn contribs_default_metadata() {
        let s = settings("{}");
        let got = texts(&run(&web(), &s, &MetaStores::default(), None, &[]));
        let want: Vec<(String, String)> = [
            ("k8s.namespace.name", "shop"),
            ("k8s.pod.name", "web-7d4b9c-abcde"),
            ("k8s.pod.uid", "uid-web"),
            ("k8s.pod.start_time", "2024-05-01T10:00:00Z"),
            ("k8s.node.name", "node-a"),
            // No ReplicaSet watch here: the name less the pod-template-hash.
            ("k8s.deployment.name", "web"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn everything_for_a_container() {
        let s = settings(ALL);
        let stores = MetaStores {
            namespaces: Some(store_of::<Namespace>(vec![meta(
                json!({"metadata": {"name": "kube-system", "uid": "uid-cluster"}}),
            )])),
            nodes: Some(store_of::<Node>(vec![meta(
                json!({"metadata": {"name": "node-a", "uid": "uid-node-a"}}),
            )])),
            replicasets: Some(store_of::<ReplicaSet>(vec![meta(json!({"metadata": {
            "name": "web-7d4b9c", "namespace": "shop", "uid": "uid-rs-web",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": "uid-deploy-web", "controller": true}]}}))])),
            ..MetaStores::default()
        };
        let got = run(&web(), &s, &stores, Some("web"), &[]);
        let want = [
            ("k8s.namespace.name", "shop"),
            ("k8s.pod.name", "web-7d4b9c-abcde"),
            ("k8s.pod.uid", "uid-web"),
            ("k8s.pod.hostname", "web-7d4b9c-abcde"),
            ("k8s.pod.start_time", "2024-05-01T10:00:00Z"),
            ("k8s.pod.ip", "10.0.0.5"),
            ("k8s.node.name", "node-a"),
            ("k8s.node.uid", "uid-node-a"),
            ("k8s.cluster.uid", "uid-cluster"),
            ("k8s.deployment.name", "web"),
            ("k8s.deployment.uid", "uid-deploy-web"),
            ("k8s.replicaset.name", "web-7d4b9c"),
            ("k8s.replicaset.uid", "uid-rs-web"),
            ("k8s.container.name", "web"),
            ("container.id", "aaaa"),
            ("container.image.name", "ghcr.io/acme/web"),
            ("container.image.tag", "1.4"),
            (
                "container.image.repo_digests",
                "[ghcr.io/acme/web@sha256:cafe]",
            ),
            ("service.namespace", "shop"),
            ("service.name", "web-app"),
            ("service.version", "1.4"),
            ("service.instance.id", "shop.web-7d4b9c-abcde.web"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(texts(&got), want);
        // repo_digests is a list, as the semantic conventions have it.
        let digests = got
            .iter()
            .find(|kv| kv.key == "container.image.repo_digests")
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref());
        assert!(matches!(digests, Some(Value::ArrayValue(a)) if a.values.len() == 1));
    }

    #[test]
    fn only_absent_or_empty_attributes_are_written() {
        let s = settings(ALL);
        let got = run(
            &web(),
            &s,
            &MetaStores::default(),
            Some("web"),
            &[
                ("k8s.pod.name", "given"),
                ("k8s.namespace.name", ""),
                ("service.name", "mine"),
                ("container.id", "aaaa"),
            ],
        );
        assert_eq!(get(&got, "k8s.pod.name"), None);
        assert_eq!(get(&got, "service.name"), None);
        assert_eq!(get(&got, "container.id"), None);
        assert_eq!(get(&got, "k8s.namespace.name").as_deref(), Some("shop"));
        assert_eq!(get(&got, "k8s.pod.uid").as_deref(), Some("uid-web"));
        // A non-string value is a value: kept.
        let mut existing = attrs(&[]);
        existing.push(KeyValue {
            key: "k8s.pod.uid".into(),
            value: Some(AnyValue {
                value: Some(Value::IntValue(7)),
            }),
            key_strindex: 0,
        });
        let mut out = Emitter::new(&existing);
        out.put("k8s.pod.uid", || Some("x".into()));
        out.put("k8s.pod.name", || Some(String::new()));
        assert!(out.added.is_empty());
    }

    #[test]
    fn container_attributes_need_a_container() {
        let s = settings(ALL);
        // Two containers and nothing says which: pod-level only.
        let got = run(&web(), &s, &MetaStores::default(), None, &[]);
        for key in [
            "k8s.container.name",
            "container.id",
            "container.image.name",
            "service.instance.id",
        ] {
            assert_eq!(get(&got, key), None, "{key}");
        }
        // A restart count picks that instance's id.
        let r = record(&web(), &s);
        let existing = attrs(&[]);
        let mut out = Emitter::new(&existing);
        extract(
            &r,
            ContainerChoice {
                index: r.container_by_name("web"),
                restart_count: Some(0),
            },
            &s,
            &MetaStores::default(),
            &mut out,
        );
        assert_eq!(get(&out.added, "container.id").as_deref(), Some("aaa0"));
        // A digest-only image: version is the digest.
        let got = run(&web(), &s, &MetaStores::default(), Some("proxy"), &[]);
        assert_eq!(get(&got, "container.image.tag"), None);
        assert_eq!(get(&got, "service.version").as_deref(), Some("sha256:feed"));
        assert_eq!(get(&got, "container.image.repo_digests"), None);
    }

    #[test]
    fn service_name_follows_the_semantic_conventions_order() {
        let none = MetaStores::default();
        // 1. The annotation.
        assert_eq!(service_name_of(&db(), &none).as_deref(), Some("orders"));
        let mut j = serde_json::to_value(db()).expect("json");
        j["metadata"]["annotations"] = json!({});
        // 2. app.kubernetes.io/instance.
        assert_eq!(
            service_name_of(&pod(j.clone()), &none).as_deref(),
            Some("orders-db")
        );
        j["metadata"]["labels"] = json!({"app.kubernetes.io/name": "postgres"});
        // 3. app.kubernetes.io/name.
        assert_eq!(
            service_name_of(&pod(j.clone()), &none).as_deref(),
            Some("postgres")
        );
        j["metadata"]["labels"] = json!({});
        // 4. The workload: statefulset here.
        assert_eq!(
            service_name_of(&pod(j.clone()), &none).as_deref(),
            Some("db")
        );
        // 5. No owner: the pod.
        j["metadata"]["ownerReferences"] = json!([]);
        assert_eq!(service_name_of(&pod(j), &none).as_deref(), Some("db-0"));
    }

    #[test]
    fn service_name_workload_order() {
        let none = MetaStores::default();
        let mut w = web_json();
        w["metadata"]["labels"] = json!({"pod-template-hash": "7d4b9c"});
        // deployment beats its replicaset.
        assert_eq!(
            service_name_of(&pod(w.clone()), &none).as_deref(),
            Some("web")
        );
        // A bare ReplicaSet (no hash, not in a store): the replicaset.
        w["metadata"]["labels"] = json!({});
        assert_eq!(
            service_name_of(&pod(w.clone()), &none).as_deref(),
            Some("web-7d4b9c")
        );
        // A watched ReplicaSet without a Deployment stays a replicaset, hash or not.
        w["metadata"]["labels"] = json!({"pod-template-hash": "7d4b9c"});
        let bare = MetaStores {
            replicasets: Some(store_of::<ReplicaSet>(vec![meta(json!({"metadata": {
            "name": "web-7d4b9c", "namespace": "shop", "uid": "uid-rs-web"}}))])),
            ..MetaStores::default()
        };
        assert_eq!(
            service_name_of(&pod(w), &bare).as_deref(),
            Some("web-7d4b9c")
        );
        assert_eq!(service_name_of(&agent(), &none).as_deref(), Some("agent"));
        // The CronJob from the Job's scheduled-minute suffix.
        assert_eq!(
            service_name_of(&cron_pod(), &none).as_deref(),
            Some("report")
        );
        let mut j = serde_json::to_value(cron_pod()).expect("json");
        j["metadata"]["ownerReferences"][0]["name"] = json!("migrate-7");
        assert_eq!(
            service_name_of(&pod(j), &none).as_deref(),
            Some("migrate-7")
        );
    }

    #[test]
    fn workloads_from_the_stores_and_from_names() {
        let s = settings(ALL);
        let jobs = MetaStores {
            jobs: Some(store_of::<Job>(vec![meta(json!({"metadata": {
            "name": "report-28562400", "namespace": "batch", "uid": "uid-job",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report",
                                 "uid": "uid-cron", "controller": true}]}}))])),
            ..MetaStores::default()
        };
        let got = run(&cron_pod(), &s, &jobs, None, &[]);
        assert_eq!(
            get(&got, "k8s.job.name").as_deref(),
            Some("report-28562400")
        );
        assert_eq!(get(&got, "k8s.job.uid").as_deref(), Some("uid-job"));
        assert_eq!(get(&got, "k8s.cronjob.name").as_deref(), Some("report"));
        assert_eq!(get(&got, "k8s.cronjob.uid").as_deref(), Some("uid-cron"));
        // From the name alone: no uid.
        let got = run(&cron_pod(), &s, &MetaStores::default(), None, &[]);
        assert_eq!(get(&got, "k8s.cronjob.name").as_deref(), Some("report"));
        assert_eq!(get(&got, "k8s.cronjob.uid"), None);
        // A store whose ReplicaSet has another uid (recreated under the same name) is not
        // trusted; the name decides.
        let stale = MetaStores {
            replicasets: Some(store_of::<ReplicaSet>(vec![meta(json!({"metadata": {
            "name": "web-7d4b9c", "namespace": "shop", "uid": "uid-old",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "other",
                                 "uid": "uid-other", "controller": true}]}}))])),
            ..MetaStores::default()
        };
        let got = run(&web(), &s, &stale, None, &[]);
        assert_eq!(get(&got, "k8s.deployment.name").as_deref(), Some("web"));
        assert_eq!(get(&got, "k8s.deployment.uid"), None);
        let got = run(&agent(), &s, &MetaStores::default(), None, &[]);
        assert_eq!(get(&got, "k8s.daemonset.name").as_deref(), Some("agent"));
        assert_eq!(get(&got, "k8s.daemonset.uid").as_deref(), Some("uid-ds"));
        let got = run(&db(), &s, &MetaStores::default(), None, &[]);
        assert_eq!(get(&got, "k8s.statefulset.name").as_deref(), Some("db"));
        assert_eq!(
            get(&got, "k8s.statefulset.uid").as_deref(),
            Some("uid-sts-db")
        );
    }

    #[test]
    fn deployment_name_from_replicaset_ignores_the_store() {
        let s = settings(
            "extract:\n  metadata: [k8s.deployment.name, k8s.deployment.uid]\n  deployment_name_from_replicaset: true\n",
        );
        let stores = MetaStores {
            replicasets: Some(store_of::<ReplicaSet>(vec![meta(json!({"metadata": {
            "name": "web-7d4b9c", "namespace": "shop", "uid": "uid-rs-web",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "webby",
                                 "uid": "uid-d", "controller": true}]}}))])),
            ..MetaStores::default()
        };
        let got = run(&web(), &s, &stores, None, &[]);
        assert_eq!(
            texts(&got),
            [("k8s.deployment.name".to_owned(), "web".to_owned())]
        );
    }

    #[test]
    fn names_from_owner_names() {
        assert_eq!(
            deployment_from_replicaset_name("web-7d4b9c", Some("7d4b9c")).as_deref(),
            Some("web")
        );
        assert_eq!(deployment_from_replicaset_name("web-7d4b9c", None), None);
        assert_eq!(
            deployment_from_replicaset_name("web-7d4b9c", Some("zzz")),
            None
        );
        assert_eq!(
            deployment_from_replicaset_name("-7d4b9c", Some("7d4b9c")),
            None
        );
        let created = Some(1_713_744_005);
        assert_eq!(
            cronjob_from_job_name("report-28562400", created).as_deref(),
            Some("report")
        );
        assert_eq!(
            cronjob_from_job_name("a-b-28562400", created).as_deref(),
            Some("a-b")
        );
        // Far from the pod's creation: a Job that merely ends in digits.
        assert_eq!(cronjob_from_job_name("report-28000000", created), None);
        assert_eq!(cronjob_from_job_name("report-x1", created), None);
        assert_eq!(cronjob_from_job_name("report", created), None);
        assert_eq!(
            cronjob_from_job_name("report-28562400", None).as_deref(),
            Some("report")
        );
        assert_eq!(cronjob_from_job_name("report-7", None), None);
    }

    #[test]
    fn service_attributes_from_annotations_labels_and_image() {
        let s = settings(
            "extract:\n  metadata: [service.namespace, service.name, service.version, service.instance.id]\n",
        );
        let got = run(&db(), &s, &MetaStores::default(), None, &[]);
        assert_eq!(get(&got, "service.namespace").as_deref(), Some("data"));
        assert_eq!(get(&got, "service.version").as_deref(), Some("16.2"));
        // Without a container there is no instance id.
        assert_eq!(get(&got, "service.instance.id"), None);
        let got = run(&db(), &s, &MetaStores::default(), Some("postgres"), &[]);
        assert_eq!(
            get(&got, "service.instance.id").as_deref(),
            Some("data.db-0.postgres")
        );
        let mut j = serde_json::to_value(db()).expect("json");
        j["metadata"]["annotations"] = json!({
        "resource.opentelemetry.io/service.namespace": "team-a",
        "resource.opentelemetry.io/service.version": "v9",
        "resource.opentelemetry.io/service.instance.id": "db-primary"});
        let got = run(
            &pod(j.clone()),
            &s,
            &MetaStores::default(),
            Some("postgres"),
            &[],
        );
        assert_eq!(get(&got, "service.namespace").as_deref(), Some("team-a"));
        assert_eq!(get(&got, "service.version").as_deref(), Some("v9"));
        assert_eq!(
            get(&got, "service.instance.id").as_deref(),
            Some("db-primary")
        );
        // Tag and digest both: <tag>@<digest>.
        j["metadata"]["labels"] = json!({});
        j["metadata"]["annotations"] = json!({});
        j["spec"]["containers"][0]["image"] = json!("postgres:16.2@sha256:beef");
        let got = run(&pod(j), &s, &MetaStores::default(), Some("postgres"), &[]);
        assert_eq!(
            get(&got, "service.version").as_deref(),
            Some("16.2@sha256:beef")
        );
    }

    #[test]
    fn labels_and_annotations_from_every_source() {
        let s = settings(
            r#"extract:
  metadata: []
  otel_annotations: true
  labels:
    - key: team
    - key_regex: (ti.*)
      tag_name: pod.$1
    - key: env
      from: namespace
      tag_name: environment
    - key_regex: topology\.kubernetes\.io/(.*)
      from: node
      tag_name: node.$1
    - key: owner
      from: deployment
  annotations:
    - key_regex: .*
      from: namespace
    - key: schedule
      from: job
"#,
        );
        let stores = MetaStores {
            namespaces: Some(store_of::<Namespace>(vec![meta(json!({"metadata": {
            "name": "shop", "uid": "uid-ns", "labels": {"env": "prod"},
            "annotations": {"contact": "ops@example.com"}}}))])),
            nodes: Some(store_of::<Node>(vec![meta(json!({"metadata": {
            "name": "node-a", "labels": {"topology.kubernetes.io/zone": "eu-1a", "other": "x"}}}))])),
            replicasets: Some(store_of::<ReplicaSet>(vec![meta(json!({"metadata": {
            "name": "web-7d4b9c", "namespace": "shop", "uid": "uid-rs-web",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": "uid-deploy-web", "controller": true}]}}))])),
            deployments: Some(store_of::<Deployment>(vec![meta(json!({"metadata": {
            "name": "web", "namespace": "shop", "uid": "uid-deploy-web",
            "labels": {"owner": "alice"}}}))])),
            ..MetaStores::default()
        };
        let got = texts(&run(&web(), &s, &stores, None, &[]));
        let want: Vec<(String, String)> = [
            ("deployment.environment.name", "prod"),
            ("k8s.pod.labels.team", "checkout"),
            ("pod.tier", "front"),
            ("environment", "prod"),
            ("node.zone", "eu-1a"),
            ("k8s.deployment.labels.owner", "alice"),
            ("k8s.namespace.annotations.contact", "ops@example.com"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(got, want);
        // Job annotations through the Job store.
        let jobs = MetaStores {
            jobs: Some(store_of::<Job>(vec![meta(json!({"metadata": {
            "name": "report-28562400", "namespace": "batch", "uid": "uid-job",
            "annotations": {"schedule": "0 * * * *"}}}))])),
            ..MetaStores::default()
        };
        let got = run(&cron_pod(), &s, &jobs, None, &[]);
        assert_eq!(
            get(&got, "k8s.job.annotations.schedule").as_deref(),
            Some("0 * * * *")
        );
    }
}
