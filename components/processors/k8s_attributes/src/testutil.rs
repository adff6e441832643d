//! Fixtures for the unit tests: configs from YAML, pods and metadata from JSON as the
//! API server would send them.

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use profcol_core::config::{Compile, parse_typed, parse_yaml};
use profcol_core::pdata::types::{AnyValue, KeyValue, Value};
use serde_json::json;

use crate::config::{Config, Settings};

pub fn config(yaml: &str) -> Config {
    parse_typed(&parse_yaml("test", yaml).expect("yaml")).expect("config")
}

pub fn settings(yaml: &str) -> Settings {
    config(yaml).compile().expect("valid settings")
}

pub fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).expect("a pod")
}

/// Two containers (one restarted), owned by ReplicaSet `web-7d4b9c` of Deployment `web`.
pub fn web_json() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c-abcde", "namespace": "shop", "uid": "uid-web",
            "resourceVersion": "1",
            "creationTimestamp": "2024-05-01T09:59:58Z",
            "labels": {"app.kubernetes.io/name": "web-app", "pod-template-hash": "7d4b9c",
                       "team": "checkout", "tier": "front"},
            "annotations": {"resource.opentelemetry.io/deployment.environment.name": "prod",
                            "note": "hello"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": "web-7d4b9c", "uid": "uid-rs-web", "controller": true}],
            "managedFields": [{"manager": "kubectl"}]
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {"name": "web", "image": "ghcr.io/acme/web:1.4"},
                {"name": "proxy", "image": "registry:5000/envoy@sha256:feed"}
            ],
            "initContainers": [{"name": "init", "image": "busybox"}]
        },
        "status": {
            "podIP": "10.0.0.5",
            "startTime": "2024-05-01T10:00:00Z",
            "containerStatuses": [
                {"name": "web", "image": "ghcr.io/acme/web:1.4",
                 "imageID": "ghcr.io/acme/web@sha256:cafe",
                 "containerID": "containerd://aaaa", "restartCount": 1, "ready": true,
                 "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://aaa0"}}},
                {"name": "proxy", "image": "registry:5000/envoy@sha256:feed", "imageID": "",
                 "containerID": "cri-o://bbbb", "restartCount": 0, "ready": true}
            ]
        }
    })
}

pub fn web() -> Pod {
    pod(web_json())
}

/// One container, owned by StatefulSet `db`, with the service.* annotations and labels.
pub fn db() -> Pod {
    pod(json!({
        "metadata": {
            "name": "db-0", "namespace": "data", "uid": "uid-db",
            "creationTimestamp": "2024-05-01T08:00:00Z",
            "labels": {"app.kubernetes.io/instance": "orders-db",
                       "app.kubernetes.io/name": "postgres",
                       "app.kubernetes.io/version": "16.2"},
            "annotations": {"resource.opentelemetry.io/service.name": "orders"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                 "name": "db", "uid": "uid-sts-db", "controller": true}]
        },
        "spec": {"nodeName": "node-a", "hostname": "db-0-host",
                 "containers": [{"name": "postgres", "image": "postgres:16.2"}]},
        "status": {"podIP": "10.0.0.6",
                   "containerStatuses": [{"name": "postgres", "image": "postgres:16.2",
                                          "imageID": "", "containerID": "docker://dddd",
                                          "restartCount": 0, "ready": true}]}
    }))
}

/// A host-network pod: its IP is the node's.
pub fn agent() -> Pod {
    pod(json!({
        "metadata": {"name": "agent-x", "namespace": "kube-system", "uid": "uid-agent",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                          "name": "agent", "uid": "uid-ds", "controller": true}]},
        "spec": {"nodeName": "node-a", "hostNetwork": true,
                 "containers": [{"name": "agent", "image": "agent:2"}]},
        "status": {"podIP": "192.168.1.10",
                   "containerStatuses": [{"name": "agent", "image": "agent:2", "imageID": "",
                                          "containerID": "containerd://eeee",
                                          "restartCount": 0, "ready": true}]}
    }))
}

/// Created by CronJob `report`'s 2024-04-22T00:00 run (Job `report-28562400`).
pub fn cron_pod() -> Pod {
    pod(json!({
        "metadata": {"name": "report-28562400-xyz", "namespace": "batch", "uid": "uid-cron",
                     "creationTimestamp": "2024-04-22T00:00:05Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "report-28562400", "uid": "uid-job",
                                          "controller": true}]},
        "spec": {"containers": [{"name": "report", "image": "report"}]},
        "status": {"podIP": "10.0.0.7"}
    }))
}

pub fn meta<K>(v: serde_json::Value) -> PartialObjectMeta<K> {
    serde_json::from_value(v).expect("metadata")
}

/// A reflector store holding `objects`, as a synced metadata watch leaves it.
pub fn store_of<K>(objects: Vec<PartialObjectMeta<K>>) -> Store<PartialObjectMeta<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone,
    PartialObjectMeta<K>: kube::Resource<DynamicType = ()> + Clone,
{
    let (store, mut writer) = reflector::store::<PartialObjectMeta<K>>();
    writer.apply_watcher_event(&Event::Init);
    for o in objects {
        writer.apply_watcher_event(&Event::InitApply(o));
    }
    writer.apply_watcher_event(&Event::InitDone);
    store
}

pub fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        }),
        key_strindex: 0,
    }
}

pub fn attrs(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
    pairs.iter().map(|(k, v)| kv(k, v)).collect()
}

/// Attributes as (key, text) pairs, for comparing.
pub fn texts(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value
                    .as_ref()
                    .map(profcol_core::pdata::any_value_to_string)
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// The value of `key` among `kvs` as text.
pub fn get(kvs: &[KeyValue], key: &str) -> Option<String> {
    texts(kvs)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}
