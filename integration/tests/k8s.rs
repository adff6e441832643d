//! k8s_attributes end to end: the built profcol, pointed by a kubeconfig at a fake
//! Kubernetes API server on 127.0.0.1, enriches OTLP profiles posted to it while pods come
//! and go.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use profcol_integration::collector::{Collector, eventually, free_port, http};
use profcol_integration::fake_k8s::FakeKube;
use profcol_integration::{fixture, profcol_bin, profcol_ok, scratch};
use serde_json::{Value, json};

/// The Go CPU fixture as OTLP/JSON: one resource, whose profiles each test resource copies.
fn template() -> Value {
    let bytes = profcol_ok(&[
        "convert",
        &fixture("go-cpu.pb.gz").to_string_lossy(),
        "--to",
        "otlp-json",
    ]);
    serde_json::from_slice(&bytes).expect("OTLP/JSON")
}

/// A request with one resource per case; each carries `test.case` plus `attributes`.
fn request(template: &Value, cases: &[(&str, &[(&str, &str)])]) -> Vec<u8> {
    let mut doc = template.clone();
    let base = doc["resourceProfiles"][0].clone();
    let resources: Vec<Value> = cases
        .iter()
        .map(|(case, attributes)| {
            let mut rp = base.clone();
            let mut attrs = vec![json!({"key": "test.case", "value": {"stringValue": case}})];
            attrs.extend(
                attributes
                    .iter()
                    .map(|(k, v)| json!({"key": k, "value": {"stringValue": v}})),
            );
            rp["resource"] = json!({ "attributes": attrs });
            rp
        })
        .collect();
    doc["resourceProfiles"] = Value::Array(resources);
    serde_json::to_vec(&doc).expect("json")
}

fn post(port: u16, body: &[u8]) {
    let status = http(
        port,
        "POST",
        "/v1development/profiles",
        &[("Content-Type", "application/json")],
        body,
    )
    .map_or(0, |r| r.status);
    assert_eq!(status, 200, "OTLP/HTTP post");
}

/// Resource attributes by `test.case`, from the file exporter's JSON lines (the last
/// one seen for a case wins).
fn resources(path: &Path) -> HashMap<String, HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = HashMap::new();
    for line in text.lines() {
        let Ok(doc) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        for rp in doc["resourceProfiles"].as_array().into_iter().flatten() {
            let attrs: HashMap<String, String> = rp["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|kv| {
                    let v = &kv["value"];
                    let text = v["stringValue"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string());
                    (kv["key"].as_str().unwrap_or("").to_owned(), text)
                })
                .collect();
            if let Some(case) = attrs.get("test.case").cloned() {
                out.insert(case, attrs);
            }
        }
    }
    out
}

/// A pod in namespace `shop` with one container, `main`.
struct TestPod<'a> {
    name: &'a str,
    uid: &'a str,
    node: &'a str,
    ip: &'a str,
    container_id: &'a str,
    /// (kind, name, uid) of the controller.
    owner: Option<(&'a str, &'a str, &'a str)>,
    labels: Value,
    annotations: Value,
}

impl TestPod<'_> {
    fn json(&self) -> Value {
        let owners: Vec<Value> = self
            .owner
            .map(|(kind, name, uid)| {
                json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
                       "controller": true})
            })
            .into_iter()
            .collect();
        let cid = format!("containerd://{}", self.container_id);
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": "shop", "uid": self.uid,
                         "creationTimestamp": "2024-05-01T10:00:00Z",
                         "labels": self.labels, "annotations": self.annotations,
                         "ownerReferences": owners},
            "spec": {"nodeName": self.node,
                     "containers": [{"name": "main", "image": "ghcr.io/acme/app:2.1"}]},
            "status": {"podIP": self.ip, "startTime": "2024-05-01T10:00:01Z",
                       "containerStatuses": [{"name": "main", "image": "ghcr.io/acme/app:2.1",
                                              "imageID": "", "ready": true, "restartCount": 0,
                                              "containerID": cid}]}
        })
    }
}

const WEB_CID: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const CART_CID: &str = "c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2";
const OTHER_CID: &str = "0303030303030303030303030303030303030303030303030303030303030303";
const CHECKOUT_CID: &str = "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4";

fn config(kubeconfig: &Path, out: &Path, http_port: u16, health: u16, metrics: u16) -> String {
    format!(
        r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http_port}
processors:
  k8sattributes:
    auth_type: kubeConfig
    kube_config_path: {kubeconfig}
    wait_for_metadata: true
    wait_for_metadata_timeout: 20s
    filter:
      node_from_env_var: K8S_NODE_NAME
    extract:
      metadata: [k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.pod.ip, k8s.node.name,
        k8s.deployment.name, k8s.deployment.uid, k8s.container.name, container.image.name,
        service.namespace, service.name, service.instance.id]
      otel_annotations: true
      labels:
        - tag_name: k8s.pod.label.$$1
          key_regex: (.*)
        - key: team
          from: namespace
          tag_name: team
    pod_association:
      - sources: [{{from: resource_attribute, name: container.id}}]
      - sources: [{{from: resource_attribute, name: k8s.pod.uid}}]
      - sources: [{{from: resource_attribute, name: k8s.pod.ip}}]
      - sources: [{{from: connection}}]
  service_name:
    from_process_environment: false
exporters:
  file:
    path: {out}
    flush_interval: 100ms
extensions:
  health_check:
    endpoint: 127.0.0.1:{health}
service:
  extensions: [health_check]
  telemetry:
    metrics:
      address: 127.0.0.1:{metrics}
  pipelines:
    profiles:
      receivers: [otlp]
      processors: [k8sattributes, service_name]
      exporters: [file]
"#,
        kubeconfig = kubeconfig.display(),
        out = out.display(),
    )
}

fn get<'a>(r: &'a HashMap<String, String>, k: &str) -> Option<&'a str> {
    r.get(k).map(String::as_str)
}

#[test]
fn profiles_get_the_attributes_of_their_pods_as_pods_come_and_go() {
    let dir = scratch("k8s");
    let kube = FakeKube::start();
    kube.apply(
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "shop", "uid": "uid-ns-shop", "labels": {"team": "payments"}}}),
    );
    kube.apply(
        "replicasets",
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "cart-5f6d7", "namespace": "shop", "uid": "uid-rs-cart",
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": "cart", "uid": "uid-deploy-cart",
                                                 "controller": true}]}}),
    );
    kube.apply(
        "pods",
        TestPod {
            name: "web-7d4b9c-abcde",
            uid: "uid-web",
            node: "node-a",
            ip: "10.1.0.5",
            container_id: WEB_CID,
            owner: Some(("ReplicaSet", "web-7d4b9c", "uid-rs-web")),
            labels: json!({"app.kubernetes.io/name": "web-app", "pod-template-hash": "7d4b9c"}),
            annotations: json!({}),
        }
        .json(),
    );
    // No pod-template-hash: only the ReplicaSet watch can name its Deployment.
    kube.apply(
        "pods",
        TestPod {
            name: "cart-5f6d7-xyz12",
            uid: "uid-cart",
            node: "node-a",
            ip: "10.1.0.6",
            container_id: CART_CID,
            owner: Some(("ReplicaSet", "cart-5f6d7", "uid-rs-cart")),
            labels: json!({}),
            annotations: json!({}),
        }
        .json(),
    );
    // On another node: the field selector keeps it out.
    kube.apply(
        "pods",
        TestPod {
            name: "other-0",
            uid: "uid-other",
            node: "node-b",
            ip: "10.2.0.7",
            container_id: OTHER_CID,
            owner: None,
            labels: json!({}),
            annotations: json!({}),
        }
        .json(),
    );

    let (http_port, health, metrics) = (free_port(), free_port(), free_port());
    let out = dir.join("out.jsonl");
    let path = dir.join("k8s.yaml");
    std::fs::write(
        &path,
        config(&kube.kubeconfig(&dir), &out, http_port, health, metrics),
    )
    .expect("config");
    let c = Collector::start_file(
        &dir,
        "k8s",
        &path,
        &[("K8S_NODE_NAME", "node-a".to_owned())],
        health,
        metrics,
    );
    // wait_for_metadata: ready means synced.
    assert_eq!(c.metric("otelcol_otelsvc_k8s_pod_table_size", &[]), 2.0);

    let template = template();
    post(
        http_port,
        &request(
            &template,
            &[
                ("by-container", &[("container.id", WEB_CID)]),
                ("by-uid", &[("k8s.pod.uid", "uid-cart")]),
                ("by-ip", &[("k8s.pod.ip", "10.1.0.5")]),
                ("other-node", &[("container.id", OTHER_CID)]),
                ("unknown", &[("container.id", "ffff")]),
                ("connection-before", &[]),
            ],
        ),
    );
    let want = [
        "by-container",
        "by-uid",
        "by-ip",
        "other-node",
        "unknown",
        "connection-before",
    ];
    assert!(
        eventually(Duration::from_secs(20), || {
            let r = resources(&out);
            want.iter().all(|w| r.contains_key(*w))
        }),
        "not all cases came out:\n{}",
        c.logs()
    );
    let r = resources(&out);
    let web = &r["by-container"];
    assert_eq!(get(web, "k8s.pod.name"), Some("web-7d4b9c-abcde"));
    assert_eq!(get(web, "k8s.pod.uid"), Some("uid-web"));
    assert_eq!(get(web, "k8s.namespace.name"), Some("shop"));
    assert_eq!(get(web, "k8s.node.name"), Some("node-a"));
    assert_eq!(get(web, "k8s.pod.ip"), Some("10.1.0.5"));
    assert_eq!(get(web, "k8s.deployment.name"), Some("web"));
    assert_eq!(get(web, "k8s.container.name"), Some("main"));
    assert_eq!(get(web, "container.image.name"), Some("ghcr.io/acme/app"));
    assert_eq!(
        get(web, "k8s.pod.label.app.kubernetes.io/name"),
        Some("web-app")
    );
    assert_eq!(get(web, "team"), Some("payments"));
    // app.kubernetes.io/name beats the deployment.
    assert_eq!(get(web, "service.name"), Some("web-app"));
    assert_eq!(get(web, "service.namespace"), Some("shop"));
    assert_eq!(
        get(web, "service.instance.id"),
        Some("shop.web-7d4b9c-abcde.main")
    );
    let cart = &r["by-uid"];
    assert_eq!(get(cart, "k8s.pod.name"), Some("cart-5f6d7-xyz12"));
    assert_eq!(get(cart, "k8s.deployment.name"), Some("cart"));
    assert_eq!(get(cart, "k8s.deployment.uid"), Some("uid-deploy-cart"));
    assert_eq!(get(cart, "service.name"), Some("cart"));
    assert_eq!(get(&r["by-ip"], "k8s.pod.uid"), Some("uid-web"));
    // Unmatched: passed on with nothing from Kubernetes (service_name still names them),
    // except that when the connection rule decided, its address is taken as the pod's IP
    // (as contrib does).
    for case in ["other-node", "unknown", "connection-before"] {
        let keys: Vec<&String> = r[case]
            .keys()
            .filter(|k| k.starts_with("k8s.") || k.starts_with("container.image") || *k == "team")
            .collect();
        let want: Vec<&str> = if case == "connection-before" {
            vec!["k8s.pod.ip"]
        } else {
            vec![]
        };
        assert_eq!(keys, want, "{case}");
        assert_eq!(
            get(&r[case], "service.name"),
            Some("unknown_service"),
            "{case}"
        );
    }
    assert_eq!(
        get(&r["connection-before"], "k8s.pod.ip"),
        Some("127.0.0.1")
    );
    assert_eq!(
        r["unknown"].len(),
        3,
        "test.case, container.id, service.name"
    );

    // A pod appears whose IP is the sender's: the connection now finds it.
    kube.apply(
        "pods",
        TestPod {
            name: "checkout-1",
            uid: "uid-checkout",
            node: "node-a",
            ip: "127.0.0.1",
            container_id: CHECKOUT_CID,
            owner: Some(("ReplicaSet", "checkout-66b", "uid-rs-checkout")),
            labels: json!({
                "app.kubernetes.io/instance": "checkout-blue",
                "pod-template-hash": "66b",
            }),
            annotations: json!({
                "resource.opentelemetry.io/service.name": "checkout",
                "resource.opentelemetry.io/deployment.environment.name": "prod",
            }),
        }
        .json(),
    );
    assert!(
        eventually(Duration::from_secs(20), || c
            .metric("otelcol_otelsvc_k8s_pod_table_size", &[])
            == 3.0),
        "the new pod never reached the cache:\n{}",
        c.logs()
    );
    // And a pod goes: late data still matches during the grace period.
    kube.delete("pods", "shop", "cart-5f6d7-xyz12");
    assert!(
        eventually(Duration::from_secs(20), || c
            .metric("otelcol_otelsvc_k8s_pod_deleted_total", &[])
            >= 1.0),
        "the delete never reached the cache:\n{}",
        c.logs()
    );
    post(
        http_port,
        &request(
            &template,
            &[
                ("connection-after", &[]),
                ("new-container", &[("container.id", CHECKOUT_CID)]),
                ("deleted-late", &[("container.id", CART_CID)]),
            ],
        ),
    );
    assert!(
        eventually(Duration::from_secs(20), || {
            let r = resources(&out);
            ["connection-after", "new-container", "deleted-late"]
                .iter()
                .all(|w| r.contains_key(*w))
        }),
        "second batch did not come out:\n{}",
        c.logs()
    );
    let r = resources(&out);
    for case in ["connection-after", "new-container"] {
        let p = &r[case];
        assert_eq!(get(p, "k8s.pod.name"), Some("checkout-1"), "{case}");
        // The annotation beats app.kubernetes.io/instance and the deployment.
        assert_eq!(get(p, "service.name"), Some("checkout"), "{case}");
        assert_eq!(
            get(p, "deployment.environment.name"),
            Some("prod"),
            "{case}"
        );
        assert_eq!(get(p, "k8s.deployment.name"), Some("checkout"), "{case}");
    }
    assert_eq!(get(&r["connection-after"], "k8s.pod.ip"), Some("127.0.0.1"));
    assert_eq!(get(&r["deleted-late"], "k8s.pod.uid"), Some("uid-cart"));
    assert_eq!(get(&r["deleted-late"], "service.name"), Some("cart"));

    let hits = c.metric("otelcol_k8s_pod_association_total", &[("status", "hit")]);
    let misses = c.metric("otelcol_k8s_pod_association_total", &[("status", "miss")]);
    assert_eq!((hits, misses), (6.0, 3.0));
    assert_eq!(
        c.metric(
            "otelcol_k8s_pod_association_total",
            &[("status", "not_synced")]
        ),
        0.0
    );

    // Only this node's pods were asked for; owners and namespaces as metadata.
    let requests = kube.requests();
    let pods: Vec<&String> = requests.iter().filter(|r| r.contains("pods")).collect();
    assert!(!pods.is_empty());
    for r in &pods {
        assert!(
            r.starts_with("/api/v1/pods?") && r.contains("fieldSelector=spec.nodeName%3Dnode-a"),
            "{r}"
        );
    }
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("/apis/apps/v1/replicasets?"))
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("/api/v1/namespaces?"))
    );
    assert!(c.stop().success());
}

#[test]
fn an_api_server_that_is_down_never_holds_profiles_back() {
    let dir = scratch("k8s-down");
    // Nothing listens here: every list fails and is retried with backoff.
    let down = free_port();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster:\n    server: http://127.0.0.1:{down}\ncontexts:\n- name: x\n  context:\n    cluster: x\n    user: x\ncurrent-context: x\nusers:\n- name: x\n  user: {{}}\n"
        ),
    )
    .expect("kubeconfig");
    let (http_port, health, metrics) = (free_port(), free_port(), free_port());
    let out = dir.join("out.jsonl");
    let text = config(&kubeconfig, &out, http_port, health, metrics)
        .replace("    wait_for_metadata: true\n", "");
    let path = dir.join("down.yaml");
    std::fs::write(&path, &text).expect("config");
    let c = Collector::start_file(
        &dir,
        "down",
        &path,
        &[("K8S_NODE_NAME", "node-a".to_owned())],
        health,
        metrics,
    );
    let started = Instant::now();
    post(
        http_port,
        &request(&template(), &[("while-down", &[("container.id", WEB_CID)])]),
    );
    assert!(
        eventually(Duration::from_secs(10), || resources(&out)
            .contains_key("while-down")),
        "{}",
        c.logs()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let r = resources(&out);
    assert!(!r["while-down"].keys().any(|k| k.starts_with("k8s.")));
    assert_eq!(
        c.metric(
            "otelcol_k8s_pod_association_total",
            &[("status", "not_synced")]
        ),
        1.0
    );
    assert!(
        eventually(Duration::from_secs(10), || c.metric(
            "otelcol_otelsvc_k8s_watch_errors_total",
            &[("resource", "pods")]
        ) >= 1.0),
        "{}",
        c.logs()
    );
    assert!(
        c.logs()
            .contains("the Kubernetes API server is unreachable; retrying with backoff"),
        "{}",
        c.logs()
    );
    assert!(c.stop().success());

    // The same with wait_for_metadata: start fails, and says why.
    let waiting = text.replace(
        "    wait_for_metadata_timeout: 20s\n",
        "    wait_for_metadata: true\n    wait_for_metadata_timeout: 1s\n",
    );
    let path = dir.join("waiting.yaml");
    std::fs::write(&path, waiting).expect("config");
    let output = Command::new(profcol_bin())
        .arg("--config")
        .arg(&path)
        .env("K8S_NODE_NAME", "node-a")
        .stdin(Stdio::null())
        .output()
        .expect("profcol runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("did not sync within 1s"), "{stderr}");
}

/// A simple pod of namespace `shop` on node-a.
fn plain_pod(name: &str, uid: &str, cid: &str) -> Value {
    TestPod {
        name,
        uid,
        node: "node-a",
        ip: "10.1.0.9",
        container_id: cid,
        owner: None,
        labels: json!({}),
        annotations: json!({}),
    }
    .json()
}

/// A refused list is retried with exponential backoff (1, 2, 4, 8 s ... capped at 30 s),
/// not about once a second as kube-runtime's watcher did, and the refusal is logged once,
/// not twice per attempt. The start error under wait_for_metadata names what was refused
/// and whose permissions they are.
#[test]
fn a_refused_list_backs_off_and_is_logged_once() {
    let dir = scratch("k8s-refused");
    let kube = FakeKube::start();
    kube.refuse("pods");
    let kubeconfig = kube.kubeconfig(&dir);
    let (http_port, health, metrics) = (free_port(), free_port(), free_port());
    let out = dir.join("out.jsonl");
    let text = config(&kubeconfig, &out, http_port, health, metrics)
        .replace("    wait_for_metadata: true\n", "");
    let path = dir.join("refused.yaml");
    std::fs::write(&path, &text).expect("config");
    let c = Collector::start_file(
        &dir,
        "refused",
        &path,
        &[("K8S_NODE_NAME", "node-a".to_owned())],
        health,
        metrics,
    );
    let pod_lists = || -> Vec<Instant> {
        kube.timed_requests()
            .into_iter()
            .filter(|(_, t)| t.contains("/pods") && !t.contains("watch=true"))
            .map(|(at, _)| at)
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(10), || !pod_lists().is_empty()),
        "{}",
        c.logs()
    );
    let first = pod_lists()[0];
    let window = Duration::from_secs(20);
    std::thread::sleep(window.saturating_sub(first.elapsed()));
    let tried: Vec<Duration> = pod_lists()
        .into_iter()
        .map(|at| at.duration_since(first))
        .filter(|d| *d < window)
        .collect();
    // At 0, 1, 3, 7 and 15 s (each wait + up to 10 %); once a second would be 20.
    assert_eq!(tried.len(), 5, "pod lists at {tried:?}\n{}", c.logs());
    for pair in tried.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(900), "{tried:?}");
    }
    let logs = c.logs();
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("pods"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning for one refusal:\n{logs}");
    assert!(
        warnings[0].contains("refused to list pods") && warnings[0].contains("HTTP 403"),
        "{}",
        warnings[0]
    );
    assert!(
        c.metric(
            "otelcol_otelsvc_k8s_watch_errors_total",
            &[("resource", "pods")]
        ) >= 5.0,
        "every try is counted"
    );
    assert!(c.stop().success());

    // wait_for_metadata: the start error names the refused resource and verb, the
    // server's answer and the auth kind in use (kubeConfig here, not "service account").
    let waiting = text.replace(
        "    wait_for_metadata_timeout: 20s\n",
        "    wait_for_metadata: true\n    wait_for_metadata_timeout: 2s\n",
    );
    let path = dir.join("waiting.yaml");
    std::fs::write(&path, waiting).expect("config");
    let output = Command::new(profcol_bin())
        .arg("--config")
        .arg(&path)
        .env("K8S_NODE_NAME", "node-a")
        .stdin(Stdio::null())
        .output()
        .expect("profcol runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("did not sync within 2s"), "{stderr}");
    assert!(
        stderr.contains("refused to list pods (HTTP 403: Forbidden (pods is forbidden"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(auth_type: kubeConfig) needs get, list and watch on pods"),
        "{stderr}"
    );
    assert!(!stderr.contains("service account"), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("profcol: "))
        .unwrap_or_default();
    assert!(
        !error.contains("replicasets"),
        "only what was refused is named: {error}"
    );

    // An empty K8S_NODE_NAME is reported as empty, not as unset.
    let output = Command::new(profcol_bin())
        .arg("--config")
        .arg(&path)
        .env("K8S_NODE_NAME", "")
        .stdin(Stdio::null())
        .output()
        .expect("profcol runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("K8S_NODE_NAME, which is set but empty"),
        "{stderr}"
    );
}

/// After an API outage long enough for the backoff to reach its cap, with the history
/// compacted meanwhile (so the old watch version is gone: 410), pods created during and
/// right after the outage are matched within a few seconds of the API coming back.
#[test]
fn after_an_api_outage_new_pods_are_matched_within_seconds() {
    let dir = scratch("k8s-outage");
    let kube = FakeKube::start();
    kube.apply("pods", plain_pod("before-0", "uid-before", WEB_CID));
    let kubeconfig = kube.kubeconfig(&dir);
    let (http_port, health, metrics) = (free_port(), free_port(), free_port());
    let out = dir.join("out.jsonl");
    let path = dir.join("outage.yaml");
    std::fs::write(&path, config(&kubeconfig, &out, http_port, health, metrics)).expect("config");
    let c = Collector::start_file(
        &dir,
        "outage",
        &path,
        &[("K8S_NODE_NAME", "node-a".to_owned())],
        health,
        metrics,
    );
    let template = template();
    let matched = |case: &str, cid: &str, pod: &str| {
        post(
            http_port,
            &request(&template, &[(case, &[("container.id", cid)])]),
        );
        eventually(Duration::from_millis(800), || {
            resources(&out)
                .get(case)
                .and_then(|r| get(r, "k8s.pod.name").map(str::to_owned))
                .as_deref()
                == Some(pod)
        })
    };
    assert!(matched("before", WEB_CID, "before-0"), "{}", c.logs());

    kube.set_down(true);
    // Long enough for the backoff to reach its 5 s cap (0.5 + 1 + 2 + 4 s of waits).
    std::thread::sleep(Duration::from_secs(15));
    kube.apply("pods", plain_pod("during-0", "uid-during", CART_CID));
    kube.compact();
    kube.set_down(false);
    let up = Instant::now();
    kube.apply("pods", plain_pod("after-0", "uid-after", CHECKOUT_CID));
    let mut n = 0;
    let found = loop {
        n += 1;
        if matched(&format!("after-{n}"), CHECKOUT_CID, "after-0") {
            break Some(up.elapsed());
        }
        if up.elapsed() > Duration::from_secs(30) {
            break None;
        }
    };
    let took = found.unwrap_or_else(|| panic!("never matched\n{}", c.logs()));
    // The next try comes within the 5 s cap (+10 %), the 410 relists at once: about 6 s
    // at worst, with room for a loaded machine. Before, 30 s + 30 s.
    eprintln!("matched {took:?} after the API came back");
    assert!(
        took < Duration::from_secs(10),
        "matched {took:?} after the API came back"
    );
    assert!(matched("during", CART_CID, "during-0"), "{}", c.logs());
    let logs = c.logs();
    let outage_warnings = logs
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("unreachable"))
        .count();
    assert_eq!(outage_warnings, 1, "one outage, one warning:\n{logs}");
    assert!(
        !logs.contains("failed with error") && !logs.contains("eof in poll"),
        "kube-client's line per try is not shown:\n{logs}"
    );
    assert!(logs.contains("answers again"), "{logs}");
    assert!(c.stop().success());
}

/// A cgroup hierarchy this test may create groups in: the cgroup2 mount, else a v1 one.
fn cgroup_root() -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mounts: Vec<(String, String)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?.to_owned();
            let fstype = right.split(' ').next()?.to_owned();
            Some((point, fstype))
        })
        .collect();
    mounts
        .iter()
        .find(|(_, t)| t == "cgroup2")
        .or_else(|| mounts.iter().find(|(_, t)| t == "cgroup"))
        .map(|(p, _)| std::path::PathBuf::from(p))
}

/// The whole chain on real data: a process in a containerd-shaped cgroup, profiled by the
/// eBPF receiver (which derives `container.id` from the cgroup), matched by
/// `k8s_attributes` to the pod whose container has that id, named by the pod's
/// `service.name` annotation ahead of its executable name in `service_name`.
#[test]
fn ebpf_profiles_of_a_process_in_a_pod_get_the_pods_attributes_and_service() {
    if !profcol_integration::root() {
        return;
    }
    let Some(cgroups) = cgroup_root() else {
        panic!("no cgroup hierarchy mounted to put a process in");
    };
    let dir = scratch("k8s-ebpf");
    let container_id = "e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5";
    let slice = cgroups.join(format!("profcol-test-{}.slice", std::process::id()));
    let scope = slice.join(format!("cri-containerd-{container_id}.scope"));
    std::fs::create_dir_all(&scope).expect("create a cgroup (root)");
    let burner = dir.join("burner");
    let built = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&burner)
        .arg(profcol_integration::repo().join("integration/peers/native/burner.c"))
        .status()
        .expect("gcc");
    assert!(built.success());

    let kube = FakeKube::start();
    kube.apply(
        "pods",
        TestPod {
            name: "checkout-6b8f9-q2w3e",
            uid: "uid-checkout-ebpf",
            node: "node-a",
            ip: "10.1.0.9",
            container_id,
            owner: None,
            labels: json!({}),
            annotations: json!({"resource.opentelemetry.io/service.name": "checkout"}),
        }
        .json(),
    );
    let kubeconfig = kube.kubeconfig(&dir);
    let out = dir.join("out.jsonl");
    let (health, metrics) = (free_port(), free_port());
    let config = format!(
        r#"receivers:
  profiling:
    samples_per_second: 99
    reporter_interval: 1s
    include:
      executable_names: ["^burner$"]
processors:
  k8s_attributes:
    auth_type: kubeConfig
    kube_config_path: {kubeconfig}
    wait_for_metadata: true
    filter:
      node_from_env_var: K8S_NODE_NAME
    extract:
      metadata: [k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.container.name,
        container.image.name, service.name]
      otel_annotations: true
    pod_association:
      - sources: [{{from: resource_attribute, name: container.id}}]
  service_name:
exporters:
  file:
    path: {out}
    flush_interval: 100ms
extensions:
  health_check:
    endpoint: 127.0.0.1:{health}
service:
  extensions: [health_check]
  telemetry:
    metrics:
      address: 127.0.0.1:{metrics}
  pipelines:
    profiles:
      receivers: [profiling]
      processors: [k8s_attributes, service_name]
      exporters: [file]
"#,
        kubeconfig = kubeconfig.display(),
        out = out.display(),
    );
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config).expect("config");
    let c = Collector::start_file(
        &dir,
        "profcol",
        &config_path,
        &[("K8S_NODE_NAME", "node-a".to_owned())],
        health,
        metrics,
    );
    // The shell joins the container's cgroup, then becomes the burner: the exec the
    // receiver sees is already inside the container.
    let procs = scope.join("cgroup.procs");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > '{}' && exec '{}' 2",
            procs.display(),
            burner.display()
        ))
        .status()
        .expect("burner in its cgroup");
    assert!(status.success());
    let burner_samples = || {
        profcol_integration::otlp_json::read_samples(&out)
            .into_iter()
            .filter(|s| {
                s.resource
                    .get("process.executable.name")
                    .map(String::as_str)
                    == Some("burner")
            })
            .collect::<Vec<_>>()
    };
    let arrived = eventually(Duration::from_secs(15), || !burner_samples().is_empty());
    let _ = std::fs::remove_dir(&scope);
    let _ = std::fs::remove_dir(&slice);
    assert!(arrived, "no burner samples:\n{}", c.logs());
    let samples = burner_samples();
    // Every one, those taken late in its execve too (they once kept the exec event's
    // placeholder, without container.id).
    for s in &samples {
        assert_eq!(
            s.resource.get("container.id").map(String::as_str),
            Some(container_id),
            "{:?}",
            s.resource
        );
    }
    let r = &samples[0].resource;
    let get = |k: &str| r.get(k).map(String::as_str);
    assert_eq!(get("container.id"), Some(container_id), "{r:?}");
    assert_eq!(get("k8s.pod.name"), Some("checkout-6b8f9-q2w3e"), "{r:?}");
    assert_eq!(get("k8s.pod.uid"), Some("uid-checkout-ebpf"));
    assert_eq!(get("k8s.namespace.name"), Some("shop"));
    assert_eq!(get("k8s.container.name"), Some("main"));
    assert_eq!(get("container.image.name"), Some("ghcr.io/acme/app"));
    // The pod's annotation, not the executable's name.
    assert_eq!(get("service.name"), Some("checkout"));
    assert!(
        samples
            .iter()
            .any(|s| s.frames.iter().any(|f| f == "burner_leaf")),
        "the burner's own frames"
    );
    assert!(c.stop().success());
}
