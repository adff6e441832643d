//! `k8s_attributes` (alias `k8sattributes`): finds the pod each resource came from (by
//! container id, pod uid, pod IP or the sender's address) and adds its Kubernetes
//! attributes: namespace, pod, node, workloads, container, labels and annotations, and
//! `service.*` by the semantic conventions. The pod cache is filled by kube-rs watches;
//! the pipeline never waits on the API server.

mod association;
mod cache;
mod config;
mod extract;
mod listwatch;
mod meta;
mod metrics;
mod pod;
mod processor;
mod quiet;
#[cfg(test)]
mod testutil;
mod vocabulary;
mod watch;

use std::sync::{Arc, Mutex, Weak};

use profcol_core::component::{
    BuildError, Processor, ProcessorCreateContext, ProcessorFactory, Stability,
};
use tokio_util::sync::CancellationToken;

pub use cache::{Changes, DELETE_GRACE_PERIOD, PodTable};
pub use config::{Config, Settings};
pub use metrics::{ASSOCIATIONS, HIT, MISS, NOT_SYNCED, TABLE_SIZE};
pub use pod::PodRecord;
pub use processor::K8sAttributesProcessor;
pub use vocabulary::Metadata;

use metrics::Metrics;
use processor::Source;

/// The type name, and the alias that contrib's older configs use.
pub const TYPE_NAME: &str = "k8s_attributes";
pub const ALIAS: &str = "k8sattributes";

pub struct K8sAttributesFactory;

/// Watches already running, by component id and config: a processor listed in several
/// pipelines is one instance per pipeline, and they share one set of watches.
static RUNNING: Mutex<Vec<(String, Config, Weak<Source>)>> = Mutex::new(Vec::new());

fn running(id: &str, config: &Config) -> Option<Arc<Source>> {
    let mut list = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(_, _, w)| w.strong_count() > 0);
    list.iter()
        .find(|(i, c, _)| i == id && c == config)
        .and_then(|(_, _, w)| w.upgrade())
}

/// Why the watches could not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    /// `filter.node_from_env_var` names a variable that gives no node.
    #[error("{0}")]
    Node(String),
    #[error(transparent)]
    Client(#[from] watch::ClientError),
    /// `wait_for_metadata` gave up; what each watch went through.
    #[error("{0}")]
    NotSynced(String),
}

fn start_watches(
    config: &Config,
    settings: &Arc<Settings>,
    id: &str,
    metrics: &Metrics,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<Source>, StartError> {
    let node = config.node_name(env).map_err(StartError::Node)?;
    let kube_config = watch::client_config(config, settings.auth_type, env)?;
    let url = watch::describe(&kube_config);
    let client = watch::client(kube_config)?;
    tracing::info!(
        processor = id,
        api_server = %url,
        node = node.as_deref().unwrap_or("(all)"),
        watches = ?meta::Needs::of(settings).resources(),
        "watching Kubernetes metadata"
    );
    let cancel = CancellationToken::new();
    let shared = watch::start(
        client,
        settings.clone(),
        node.clone(),
        metrics.clone(),
        cancel.clone(),
    );
    let source = Arc::new(Source {
        shared,
        _stop: cancel.drop_guard(),
    });
    if config.wait_for_metadata {
        let timeout = config.wait_for_metadata_timeout;
        let synced = watch::wait_synced(&source.shared, timeout)?;
        if !synced {
            // Dropping `source` stops the watches.
            return Err(StartError::NotSynced(sync_failure(
                timeout,
                &url,
                &who(config, settings.auth_type),
                &source.shared.health.snapshot(),
            )));
        }
    }
    Ok(source)
}

/// Whose permissions the API server checks, for errors.
fn who(config: &Config, auth: config::AuthType) -> String {
    match auth {
        config::AuthType::ServiceAccount => {
            "the pod's service account (auth_type: serviceAccount)".to_owned()
        }
        config::AuthType::KubeConfig => {
            let file = if config.kube_config_path.is_empty() {
                "the default kubeconfig".to_owned()
            } else {
                format!("kubeconfig {}", config.kube_config_path)
            };
            let context = if config.context.is_empty() {
                "its current context".to_owned()
            } else {
                format!("context {}", config.context)
            };
            format!("the user of {context} in {file} (auth_type: kubeConfig)")
        }
        config::AuthType::None => "anonymous requests (auth_type: none)".to_owned(),
    }
}

/// Why `wait_for_metadata` gave up, from what each watch went through: the refusals
/// (resource, verb and the server's answer), else unreachability, else the watches still
/// listing.
fn sync_failure(
    timeout: std::time::Duration,
    url: &str,
    who: &str,
    health: &[(&'static str, listwatch::WatchHealth)],
) -> String {
    let waited = format!(
        "wait_for_metadata: the Kubernetes metadata did not sync within {timeout:?} from {url}"
    );
    let refused: Vec<(&str, &listwatch::Fault)> = health
        .iter()
        .filter_map(|(what, h)| {
            h.fault
                .as_ref()
                .filter(|f| f.kind == listwatch::FaultKind::Refused)
                .map(|f| (*what, f))
        })
        .collect();
    if !refused.is_empty() {
        let calls: Vec<String> = refused
            .iter()
            .map(|(what, f)| format!("{} {what} ({f})", f.verb))
            .collect();
        let resources: Vec<&str> = refused.iter().map(|(what, _)| *what).collect();
        return format!(
            "{waited}: the API server refused to {}; {who} needs get, list and watch on {}",
            calls.join(", "),
            resources.join(", ")
        );
    }
    let unreachable = health.iter().find_map(|(_, h)| {
        h.fault
            .as_ref()
            .filter(|f| f.kind == listwatch::FaultKind::Unreachable)
    });
    if let Some(f) = unreachable {
        return format!("{waited}: the API server is unreachable ({f})");
    }
    let pending: Vec<&str> = health
        .iter()
        .filter(|(_, h)| !h.listed)
        .map(|(what, _)| *what)
        .collect();
    format!(
        "{waited}: no answer yet to the list of {}; check that the API server is reachable and that {who} may get, list and watch {}",
        pending.join(", "),
        pending.join(", ")
    )
}

impl ProcessorFactory for K8sAttributesFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = TYPE_NAME;
    const STABILITY: Stability = Stability::Development;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let (config, settings) = config.into_parts();
        let settings = Arc::new(settings);
        let id = ctx.base.id.to_string();
        let metrics = Metrics::new(&ctx.base.telemetry, &id);
        if settings.passthrough {
            return Ok(Box::new(K8sAttributesProcessor::new(
                settings, None, metrics,
            )));
        }
        let source = match running(&id, &config) {
            Some(source) => source,
            None => {
                let env = |k: &str| std::env::var(k).ok();
                let source =
                    start_watches(&config, &settings, &id, &metrics, &env).map_err(|e| {
                        BuildError::caused_by(&ctx.base.id, "cannot watch Kubernetes metadata", e)
                    })?;
                RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push((
                    id.clone(),
                    config,
                    Arc::downgrade(&source),
                ));
                source
            }
        };
        Ok(Box::new(K8sAttributesProcessor::new(
            settings,
            Some(source),
            metrics,
        )))
    }
}

profcol_core::component_conformance!(processor: K8sAttributesFactory, "k8s_attributes", Development);

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use profcol_core::component::{ComponentId, CreateContext, ErasedProcessorFactory, PipelineId};
    use profcol_core::config::parse_yaml;
    use profcol_core::errors::error_chain;
    use profcol_core::telemetry::Telemetry;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::testutil::web_json;

    fn ctx(name: Option<&str>) -> ProcessorCreateContext {
        ProcessorCreateContext {
            base: CreateContext {
                id: ComponentId::new(TYPE_NAME, name),
                telemetry: Telemetry::new(),
                host: Default::default(),
            },
            pipeline: PipelineId::parse("profiles").expect("pipeline id"),
        }
    }

    fn create(yaml: &str, name: Option<&str>) -> Result<Box<dyn Processor>, BuildError> {
        let f = K8sAttributesFactory;
        let parsed = ErasedProcessorFactory::parse(&f, &parse_yaml("t", yaml).expect("yaml"))
            .map_err(|e| BuildError::new(&ctx(name).base.id, format!("{e:?}")))?;
        ErasedProcessorFactory::create(&f, &parsed, &ctx(name))
    }

    fn kubeconfig(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
        ),
    )
    .expect("write kubeconfig");
        path
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        profcol_core::testkit::scratch_dir(&format!("k8sattr-{name}"))
    }

    #[tokio::test]
    async fn factory_parses_validates_and_creates_in_passthrough() {
        let f = K8sAttributesFactory;
        assert_eq!(K8sAttributesFactory::TYPE_NAME, "k8s_attributes");
        assert_eq!(ALIAS, "k8sattributes");
        assert_eq!(K8sAttributesFactory::STABILITY, Stability::Development);
        let bad = parse_yaml(
            "t",
            "extract:\n  metadata: [k8s.pod.nam]\npod_association:\n  - sources: []\n",
        )
        .expect("yaml");
        let errors = ErasedProcessorFactory::parse(&f, &bad)
            .err()
            .expect("invalid");
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["extract::metadata[0]", "pod_association[0]::sources"]
        );
        let mut p = create("passthrough: true", None).expect("passthrough needs no cluster");
        let mut out = Vec::new();
        p.process(profcol_core::pdata::ProfileBatch::empty(), &mut out)
            .await
            .expect("process");
        assert_eq!(out, vec![profcol_core::pdata::ProfileBatch::empty()]);
    }

    #[tokio::test]
    async fn create_fails_clearly_without_a_cluster() {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
            let e = create("{}", None).err().expect("no cluster");
            let e = error_chain(&e);
            assert!(e.contains("not running in a cluster"), "{e}");
            let e = create("auth_type: none", None)
                .err()
                .expect("no service env");
            let e = error_chain(&e);
            assert!(e.contains("KUBERNETES_SERVICE_HOST"), "{e}");
        }
        let e = create(
            "auth_type: kubeConfig\nkube_config_path: /nonexistent/kubeconfig",
            None,
        )
        .err()
        .expect("no file");
        let e = error_chain(&e);
        assert!(e.contains("reading the kubeconfig"), "{e}");
        assert!(e.starts_with("k8s_attributes: "), "{e}");
        let e = create(
            "auth_type: kubeConfig\nfilter:\n  node_from_env_var: PROFCOL_TEST_SURELY_UNSET_NODE\n",
            None,
        )
        .err()
        .expect("unset node variable");
        let e = error_chain(&e);
        assert!(
            e.contains("PROFCOL_TEST_SURELY_UNSET_NODE, which is not set"),
            "{e}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_for_metadata_fails_start_after_the_timeout() {
        // Accepts connections and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = silent.local_addr().expect("addr").port();
        let dir = scratch("silent");
        let path = kubeconfig(&dir, port);
        let started = Instant::now();
        let e = create(
        &format!(
            "auth_type: kubeConfig\nkube_config_path: {}\nwait_for_metadata: true\nwait_for_metadata_timeout: 300ms\n",
            path.display()
        ),
        Some("silent"),
    )
    .err()
    .expect("times out");
        let e = error_chain(&e);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert!(e.contains("did not sync within 300ms"), "{e}");
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(e.contains("get, list and watch pods"), "{e}");
        // The failed start left nothing running.
        assert!(running("k8s_attributes/silent", &Config::default()).is_none());
        drop(silent);
    }

    #[tokio::test]
    async fn wait_for_metadata_needs_the_multi_threaded_runtime() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let dir = scratch("current");
        let path = kubeconfig(&dir, silent.local_addr().expect("addr").port());
        let e = create(
            &format!(
                "auth_type: kubeConfig\nkube_config_path: {}\nwait_for_metadata: true\n",
                path.display()
            ),
            Some("current"),
        )
        .err()
        .expect("current-thread runtime");
        let e = error_chain(&e);
        assert!(e.contains("multi-threaded runtime"), "{e}");
    }

    /// Answers every list with `pods` and every watch with an open, silent stream; records
    /// each request line.
    async fn fake_api(listener: TcpListener, pods: String, seen: Arc<Mutex<Vec<String>>>) {
        while let Ok((mut sock, _)) = listener.accept().await {
            let pods = pods.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i;
                        }
                        let mut chunk = [0u8; 4096];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                    buf.drain(..head_end + 4);
                    let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                    seen.lock().expect("lock").push(target.clone());
                    if target.contains("watch=true") {
                        let _ = sock
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .await;
                        std::future::pending::<()>().await;
                    }
                    let body = format!(
                        "{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"5\"}},\"items\":[{pods}]}}"
                    );
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watches_a_kubeconfig_cluster_over_http_and_shares_the_watch() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(fake_api(listener, web_json().to_string(), seen.clone()));
        let dir = scratch("http");
        let path = kubeconfig(&dir, port);
        let yaml = format!(
            "auth_type: kubeConfig\nkube_config_path: {}\nwait_for_metadata: true\nextract:\n  metadata: [k8s.pod.name, k8s.deployment.name]\n  deployment_name_from_replicaset: true\nfilter:\n  node: node-a\n  namespace: shop\n  labels:\n    - key: tier\n      value: front\npod_association:\n  - sources: [{{from: resource_attribute, name: container.id}}]\n",
            path.display()
        );
        let mut a = create(&yaml, Some("http")).expect("syncs");
        let b = create(&yaml, Some("http")).expect("second pipeline");
        let config: Config =
            profcol_core::config::parse_typed(&parse_yaml("t", &yaml).expect("yaml"))
                .expect("config");
        assert!(running("k8s_attributes/http", &config).is_some());
        {
            let requests = seen.lock().expect("lock").clone();
            let pod_requests: Vec<&String> =
                requests.iter().filter(|r| r.contains("/pods")).collect();
            // One set of watches for both pipelines; namespaced, node and label selectors on.
            assert!(!pod_requests.is_empty());
            for r in &pod_requests {
                assert!(r.starts_with("/api/v1/namespaces/shop/pods?"), "{r}");
                assert!(r.contains("fieldSelector=spec.nodeName%3Dnode-a"), "{r}");
                assert!(r.contains("labelSelector=tier%3Dfront"), "{r}");
            }
            // No ReplicaSet watch: the name comes from the ReplicaSet's name.
            assert!(
                !requests.iter().any(|r| r.contains("replicasets")),
                "{requests:?}"
            );
        }
        let mut batch_attrs = crate::testutil::attrs(&[("container.id", "aaaa")]);
        let input = {
            use profcol_core::pdata::testing::{
                WireDictionaryBuilder as DictionaryBuilder, batch_from_wire,
            };
            use profcol_core::pdata::types::{Resource, ResourceProfiles};
            batch_from_wire(
                DictionaryBuilder::new().finish(),
                vec![ResourceProfiles {
                    resource: Some(Resource {
                        attributes: std::mem::take(&mut batch_attrs),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
            )
        };
        let mut out = Vec::new();
        a.process(input, &mut out).await.expect("process");
        let attrs = &out[0].resource_profiles()[0]
            .resource
            .as_ref()
            .expect("resource")
            .attributes;
        assert_eq!(
            crate::testutil::texts(attrs),
            [
                ("container.id".to_owned(), "aaaa".to_owned()),
                ("k8s.pod.name".to_owned(), "web-7d4b9c-abcde".to_owned()),
                ("k8s.deployment.name".to_owned(), "web".to_owned()),
            ]
        );
        drop(a);
        drop(b);
        assert!(running("k8s_attributes/http", &config).is_none());
    }

    /// Answers every request with 403, as an API server does to a user without the RBAC.
    async fn forbidding_api(listener: TcpListener) {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i;
                        }
                        let mut chunk = [0u8; 4096];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let target = head.split(' ').nth(1).unwrap_or_default();
                    let resource = target
                        .split('?')
                        .next()
                        .and_then(|p| p.rsplit('/').next())
                        .unwrap_or_default()
                        .to_owned();
                    let body = format!(
                        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{resource} is forbidden: User \"tester\" cannot list resource \"{resource}\"","reason":"Forbidden","code":403}}"#
                    );
                    let reply = format!(
                        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_for_metadata_names_the_refused_resource_verb_and_auth() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(forbidding_api(listener));
        let dir = scratch("forbidden");
        let path = kubeconfig(&dir, port);
        let e = create(
        &format!(
            "auth_type: kubeConfig\nkube_config_path: {}\nwait_for_metadata: true\nwait_for_metadata_timeout: 1500ms\nextract:\n  metadata: [k8s.pod.name, k8s.deployment.name]\n",
            path.display()
        ),
        Some("forbidden"),
    )
    .err()
    .expect("refused");
        let m = &error_chain(&e);
        assert!(m.contains("did not sync within 1.5s"), "{m}");
        assert!(
        m.contains("refused to list pods (HTTP 403: Forbidden (pods is forbidden: User \"tester\" cannot list resource \"pods\"))"),
        "{m}"
    );
        assert!(m.contains("list replicasets (HTTP 403"), "{m}");
        assert!(
        m.contains(&format!(
            "the user of its current context in kubeconfig {} (auth_type: kubeConfig) needs get, list and watch on pods, replicasets",
            path.display()
        )),
        "{m}"
    );
        assert!(!m.contains("service account"), "{m}");
    }

    #[test]
    fn sync_failures_say_what_went_wrong() {
        use listwatch::{Fault, FaultKind, WatchHealth};
        let t = Duration::from_secs(10);
        let down = WatchHealth {
            listed: false,
            fault: Some(Fault {
                verb: "list",
                kind: FaultKind::Unreachable,
                code: None,
                message: "connection refused".into(),
            }),
        };
        let listed = WatchHealth {
            listed: true,
            fault: None,
        };
        assert_eq!(
            sync_failure(
                t,
                "https://k:6443/",
                "anonymous requests (auth_type: none)",
                &[("pods", down)]
            ),
            "wait_for_metadata: the Kubernetes metadata did not sync within 10s from https://k:6443/: the API server is unreachable (connection refused)"
        );
        assert_eq!(
            sync_failure(
                t,
                "https://k:6443/",
                "the pod's service account (auth_type: serviceAccount)",
                &[("nodes", WatchHealth::default()), ("pods", listed)]
            ),
            "wait_for_metadata: the Kubernetes metadata did not sync within 10s from https://k:6443/: no answer yet to the list of nodes; check that the API server is reachable and that the pod's service account (auth_type: serviceAccount) may get, list and watch nodes"
        );
        assert_eq!(
            who(&Config::default(), config::AuthType::ServiceAccount),
            "the pod's service account (auth_type: serviceAccount)"
        );
        let c: Config = profcol_core::config::parse_typed(
            &parse_yaml("t", "auth_type: kubeConfig\ncontext: dev\n").expect("yaml"),
        )
        .expect("config");
        assert_eq!(
            who(&c, config::AuthType::KubeConfig),
            "the user of context dev in the default kubeconfig (auth_type: kubeConfig)"
        );
    }
}
