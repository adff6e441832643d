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
#[path = "extract_tests.rs"]
mod tests;
