//! What the cache keeps of a pod: only the fields that become attributes or find the
//! pod, never the whole object (a node runs hundreds of pods; a cluster, many more).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::config::{FieldFrom, FieldKind, Settings};
use crate::vocabulary::{
    LABEL_APP_INSTANCE, LABEL_APP_NAME, LABEL_APP_VERSION, LABEL_POD_TEMPLATE_HASH,
    OTEL_ANNOTATION_PREFIX,
};

/// The controller that owns a pod (or a ReplicaSet / Job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    /// The controlling owner among `refs` (the one with `controller: true`, else the first).
    pub fn controller(refs: Option<&[OwnerReference]>) -> Option<Owner> {
        let refs = refs?;
        refs.iter()
            .find(|r| r.controller == Some(true))
            .or_else(|| refs.first())
            .map(|r| Owner {
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
            })
    }
}

/// An image reference split as `container.image.*` wants it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageRef {
    /// The repository as written (`nginx`, `ghcr.io/org/app`, `registry:5000/app`).
    pub name: String,
    /// The tag; `latest` when neither a tag nor a digest is given.
    pub tag: Option<String>,
    /// `sha256:…` when the reference pins one.
    pub digest: Option<String>,
}

impl ImageRef {
    pub fn parse(image: &str) -> Option<ImageRef> {
        let image = image.trim();
        if image.is_empty() {
            return None;
        }
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, Some(d.to_owned())),
            None => (image, None),
        };
        // A colon after the last slash is a tag; one before it belongs to a registry port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (
                &rest[..last_slash + i],
                Some(rest[last_slash + i + 1..].to_owned()),
            ),
            None => (rest, None),
        };
        let tag = tag.or_else(|| digest.is_none().then(|| "latest".to_owned()));
        Some(ImageRef {
            name: name.to_owned(),
            tag,
            digest,
        })
    }
}

/// A container of a pod, with every id it has had that the API still reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerRecord {
    pub name: String,
    /// An init container: never the pod's only container for the single-container
    /// fallback.
    pub init: bool,
    pub image: Option<ImageRef>,
    /// `repo@sha256:…` from the status' imageID, when the runtime reports one.
    pub repo_digest: Option<String>,
    /// (restart count, container id) pairs, runtime prefix stripped: the current one and
    /// the last terminated one, so late data from before a restart still matches.
    pub ids: Vec<(i32, String)>,
}

impl ContainerRecord {
    /// The id of the instance with this restart count, or the newest one.
    pub fn id(&self, restart_count: Option<i64>) -> Option<&str> {
        match restart_count {
            Some(n) => self
                .ids
                .iter()
                .find(|(r, _)| i64::from(*r) == n)
                .map(|(_, id)| id.as_str()),
            None => self
                .ids
                .iter()
                .max_by_key(|(r, _)| *r)
                .map(|(_, id)| id.as_str()),
        }
    }
}

/// Strips the runtime prefix (`containerd://`, `docker://`, `cri-o://`) from a status'
/// containerID.
pub fn strip_runtime(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

/// The pod as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodRecord {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub node_name: String,
    /// `spec.hostname`, else the pod's name.
    pub hostname: String,
    /// RFC 3339: `status.startTime`, else the creation time.
    pub start_time: Option<String>,
    /// Seconds since the epoch of the creation time, for CronJob names and for which of
    /// two pods sharing an IP is newer.
    pub created: Option<i64>,
    /// None for host-network pods: their IP is the node's, shared with every other one.
    pub ip: Option<String>,
    pub host_network: bool,
    pub owner: Option<Owner>,
    pub pod_template_hash: Option<String>,
    pub app_name: Option<String>,
    pub app_instance: Option<String>,
    pub app_version: Option<String>,
    /// `resource.opentelemetry.io/<attr>` annotations as (attr, value).
    pub otel_annotations: Vec<(String, String)>,
    /// Attributes from the pod's own labels and annotations (`extract.labels/annotations`
    /// with `from: pod`), computed once here.
    pub tags: Vec<(String, String)>,
    pub containers: Vec<ContainerRecord>,
}

impl PodRecord {
    /// The record of `pod`, or None for a pod without a uid or one that is excluded.
    pub fn from_pod(pod: &Pod, settings: &Settings) -> Option<PodRecord> {
        let meta = &pod.metadata;
        let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
        let name = meta.name.clone().unwrap_or_default();
        if settings.exclude.iter().any(|r| r.is_match(&name)) {
            return None;
        }
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
        let empty = BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        let created = meta.creation_timestamp.as_ref().map(|t| t.0.as_second());
        let start_time = status
            .and_then(|s| s.start_time.as_ref())
            .or(meta.creation_timestamp.as_ref())
            .map(|t| t.0.to_string());
        let mut tags = Vec::new();
        for (rules, kind, map) in [
            (&settings.labels, FieldKind::Label, labels),
            (&settings.annotations, FieldKind::Annotation, annotations),
        ] {
            for rule in rules.iter().filter(|r| r.from == FieldFrom::Pod) {
                debug_assert_eq!(rule.kind, kind);
                for (k, v) in map {
                    if let Some(tag) = rule.tag_for(k) {
                        tags.push((tag, v.clone()));
                    }
                }
            }
        }
        let otel_annotations = annotations
            .iter()
            .filter_map(|(k, v)| {
                let attr = k.strip_prefix(OTEL_ANNOTATION_PREFIX)?;
                (!attr.is_empty()).then(|| (attr.to_owned(), v.clone()))
            })
            .collect();
        let mut containers: Vec<ContainerRecord> = Vec::new();
        let specs = spec.into_iter().flat_map(|s| {
            let regular = s.containers.iter().map(|c| (c, false));
            let init = s.init_containers.iter().flatten().map(|c| (c, true));
            regular.chain(init)
        });
        for (c, init) in specs {
            let c: &Container = c;
            containers.push(ContainerRecord {
                name: c.name.clone(),
                init,
                image: c.image.as_deref().and_then(ImageRef::parse),
                ..ContainerRecord::default()
            });
        }
        let statuses = status.into_iter().flat_map(|s| {
            let regular = s.container_statuses.iter().flatten().map(|c| (c, false));
            let init = s
                .init_container_statuses
                .iter()
                .flatten()
                .map(|c| (c, true));
            regular.chain(init)
        });
        for (s, init) in statuses {
            let s: &ContainerStatus = s;
            let idx = match containers.iter().position(|c| c.name == s.name) {
                Some(i) => i,
                None => {
                    containers.push(ContainerRecord {
                        name: s.name.clone(),
                        init,
                        image: ImageRef::parse(&s.image),
                        ..ContainerRecord::default()
                    });
                    containers.len() - 1
                }
            };
            let c = &mut containers[idx];
            if let Some(id) = s.container_id.as_deref().map(strip_runtime)
                && !id.is_empty()
            {
                c.ids.push((s.restart_count, id.to_owned()));
            }
            let previous = s
                .last_state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .and_then(|t| t.container_id.as_deref())
                .map(strip_runtime)
                .filter(|id| !id.is_empty());
            if let Some(id) = previous
                && !c.ids.iter().any(|(_, known)| known == id)
            {
                c.ids
                    .push((s.restart_count.saturating_sub(1), id.to_owned()));
            }
            if s.image_id.contains('@') {
                c.repo_digest = Some(strip_runtime(&s.image_id).to_owned());
            }
        }
        let ip = status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty() && !host_network);
        Some(PodRecord {
            hostname: spec
                .and_then(|s| s.hostname.clone())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| name.clone()),
            uid,
            name,
            namespace: meta.namespace.clone().unwrap_or_default(),
            node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            start_time,
            created,
            ip,
            host_network,
            owner: Owner::controller(meta.owner_references.as_deref()),
            pod_template_hash: labels.get(LABEL_POD_TEMPLATE_HASH).cloned(),
            app_name: labels.get(LABEL_APP_NAME).cloned(),
            app_instance: labels.get(LABEL_APP_INSTANCE).cloned(),
            app_version: labels.get(LABEL_APP_VERSION).cloned(),
            otel_annotations,
            tags,
            containers,
        })
    }

    /// Every container id of the pod, with the container's position.
    pub fn container_ids(&self) -> impl Iterator<Item = (usize, &str)> {
        self.containers
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.ids.iter().map(move |(_, id)| (i, id.as_str())))
    }

    pub fn container_by_id(&self, id: &str) -> Option<usize> {
        self.container_ids().find(|(_, c)| *c == id).map(|(i, _)| i)
    }

    pub fn container_by_name(&self, name: &str) -> Option<usize> {
        self.containers.iter().position(|c| c.name == name)
    }

    /// The pod's one regular container, if it has exactly one.
    pub fn only_container(&self) -> Option<usize> {
        let mut regular = self.containers.iter().enumerate().filter(|(_, c)| !c.init);
        match (regular.next(), regular.next()) {
            (Some((i, _)), None) => Some(i),
            _ => None,
        }
    }

    /// A `resource.opentelemetry.io/<attr>` annotation's value.
    pub fn otel_annotation(&self, attr: &str) -> Option<&str> {
        self.otel_annotations
            .iter()
            .find(|(k, _)| k == attr)
            .map(|(_, v)| v.as_str())
    }
}
