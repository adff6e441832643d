//! The API side: a kube-rs client built the way `auth_type` says, a pod watcher feeding
//! the pod table, and metadata-only watches (with reflector stores) for what the
//! attributes need. Errors are logged and retried with backoff; nothing here ever makes
//! the pipeline wait.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::NamespaceResourceScope;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::cache::{DELETE_GRACE_PERIOD, PodTable, SWEEP_INTERVAL};
use crate::config::{AuthType, Config, Settings};
use crate::listwatch::{self, Health, Reporter, Selectors};
use crate::meta::{MetaStores, Needs};
use crate::metrics::Metrics;
use crate::vocabulary::CLUSTER_UID_NAMESPACE;

/// Why the API side could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error(
        "not running in a cluster ({0}); use auth_type: kubeConfig outside one, or passthrough: true"
    )]
    InCluster(#[source] kube::config::InClusterError),
    #[error("auth_type none needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT")]
    NoServiceEnv,
    #[error("invalid API server address {0:?}: {1}")]
    BadUrl(String, #[source] http::uri::InvalidUri),
    #[error("creating the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("{0}")]
    Runtime(String),
}

/// Runs an async loader to completion from synchronous code that may itself be inside
/// a runtime, on a helper thread with its own small runtime.
fn block_on_side<T: Send>(
    f: impl std::future::Future<Output = T> + Send,
) -> Result<T, ClientError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(f))
                .map_err(|e| ClientError::Runtime(format!("starting a runtime: {e}")))
        })
        .join()
        .map_err(|_| ClientError::Runtime("the kubeconfig loader panicked".into()))?
    })
}

/// The client config for `auth_type`.
pub fn client_config(
    config: &Config,
    auth: AuthType,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<kube::Config, ClientError> {
    match auth {
        AuthType::ServiceAccount => kube::Config::incluster().map_err(ClientError::InCluster),
        AuthType::KubeConfig => {
            let file = if config.kube_config_path.is_empty() {
                Kubeconfig::read()
            } else {
                Kubeconfig::read_from(&config.kube_config_path)
            }
            .map_err(ClientError::Kubeconfig)?;
            let options = KubeConfigOptions {
                context: (!config.context.is_empty()).then(|| config.context.clone()),
                ..KubeConfigOptions::default()
            };
            block_on_side(kube::Config::from_custom_kubeconfig(file, &options))?
                .map_err(ClientError::Kubeconfig)
        }
        AuthType::None => {
            let (Some(host), Some(port)) = (
                env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty()),
                env("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty()),
            ) else {
                return Err(ClientError::NoServiceEnv);
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            let url = format!("https://{host}:{port}");
            let uri = url
                .parse()
                .map_err(|e| ClientError::BadUrl(url.clone(), e))?;
            // No credentials and no CA, as contrib's `none`: for API proxies and tests.
            let mut c = kube::Config::new(uri);
            c.accept_invalid_certs = true;
            Ok(c)
        }
    }
}

pub fn client(config: kube::Config) -> Result<Client, ClientError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ClientError::Runtime(
            "the Kubernetes client needs a Tokio runtime".into(),
        ));
    }
    Client::try_from(config).map_err(ClientError::Client)
}

/// A one-way latch that synchronous code can wait on with a timeout.
#[derive(Default)]
pub struct Latch {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Latch {
    pub fn open(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        *open = true;
        self.cv.notify_all();
    }

    /// True if it opened within `timeout`.
    pub fn wait(&self, timeout: Duration) -> bool {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let (open, _) = self
            .cv
            .wait_timeout_while(open, timeout, |open| !*open)
            .unwrap_or_else(|e| e.into_inner());
        *open
    }
}

/// What the watchers fill and the processors read.
pub struct Shared {
    pub table: RwLock<PodTable>,
    pub stores: MetaStores,
    /// Set once the first full pod list is in; read on the hot path.
    pub pods_synced: AtomicBool,
    /// Opens when the pod table and every metadata store have their first list.
    pub all_synced: Latch,
    pub settings: Arc<Settings>,
    pub needs: Needs,
    /// Each watch's state: listed yet, and its last fault.
    pub health: Arc<Health>,
}

impl Shared {
    pub fn new(settings: Arc<Settings>, stores: MetaStores, needs: Needs) -> Self {
        Shared {
            table: RwLock::new(PodTable::new(DELETE_GRACE_PERIOD)),
            stores,
            pods_synced: AtomicBool::new(false),
            all_synced: Latch::default(),
            settings,
            needs,
            health: Arc::default(),
        }
    }

    pub fn synced(&self) -> bool {
        self.pods_synced.load(Ordering::Acquire)
    }
}

/// The pod watch's selectors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSelectors {
    pub fields: String,
    pub labels: String,
}

pub fn pod_selectors(settings: &Settings, node: Option<&str>) -> PodSelectors {
    let mut fields: Vec<String> = node
        .map(|n| format!("spec.nodeName={n}"))
        .into_iter()
        .collect();
    fields.extend(settings.field_selector.iter().cloned());
    PodSelectors {
        fields: fields.join(","),
        labels: settings.label_selector.join(","),
    }
}

/// An API for a namespaced kind: one namespace (`filter.namespace`) or all.
fn scoped_api<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

fn selectors(fields: &str, labels: &str) -> Selectors {
    Selectors {
        fields: fields.to_owned(),
        labels: labels.to_owned(),
    }
}

fn reporter(what: &'static str, health: &Arc<Health>, metrics: &Metrics) -> Reporter {
    Reporter {
        what,
        health: health.clone(),
        errors: metrics.watch_errors(what),
        policy: listwatch::POLICY,
    }
}

/// Creates the stores the config needs and starts every watch; returns the shared state.
pub fn start(
    client: Client,
    settings: Arc<Settings>,
    node: Option<String>,
    metrics: Metrics,
    cancel: CancellationToken,
) -> Arc<Shared> {
    let needs = Needs::of(&settings);
    let mut stores = MetaStores::default();
    let mut ready: Vec<futures_util::future::BoxFuture<'static, ()>> = Vec::new();
    let ns = settings.namespace.clone();
    let health = Arc::new(Health::default());
    health.register("pods");

    macro_rules! meta_watch {
        ($field:ident, $kind:ty, $api:expr, $fields:expr, $what:expr) => {{
            let (store, writer) = reflector::store::<PartialObjectMeta<$kind>>();
            let api: Api<PartialObjectMeta<$kind>> = $api;
            let reader = store.clone();
            ready.push(Box::pin(async move {
                let _ = reader.wait_until_ready().await;
            }));
            tokio::spawn(run_meta_watch(
                api,
                selectors($fields, ""),
                writer,
                reporter($what, &health, &metrics),
                cancel.clone(),
            ));
            stores.$field = Some(store);
        }};
    }
    if needs.namespaces || needs.cluster_uid_only {
        let fields = if needs.namespaces {
            String::new()
        } else {
            format!("metadata.name={CLUSTER_UID_NAMESPACE}")
        };
        meta_watch!(
            namespaces,
            Namespace,
            Api::all(client.clone()),
            &fields,
            "namespaces"
        );
    }
    if needs.nodes {
        let fields = node
            .as_ref()
            .map(|n| format!("metadata.name={n}"))
            .unwrap_or_default();
        meta_watch!(nodes, Node, Api::all(client.clone()), &fields, "nodes");
    }
    if needs.replicasets {
        meta_watch!(
            replicasets,
            ReplicaSet,
            scoped_api(client.clone(), ns.as_deref()),
            "",
            "replicasets"
        );
    }
    if needs.deployments {
        meta_watch!(
            deployments,
            Deployment,
            scoped_api(client.clone(), ns.as_deref()),
            "",
            "deployments"
        );
    }
    if needs.statefulsets {
        meta_watch!(
            statefulsets,
            StatefulSet,
            scoped_api(client.clone(), ns.as_deref()),
            "",
            "statefulsets"
        );
    }
    if needs.daemonsets {
        meta_watch!(
            daemonsets,
            DaemonSet,
            scoped_api(client.clone(), ns.as_deref()),
            "",
            "daemonsets"
        );
    }
    if needs.jobs {
        meta_watch!(
            jobs,
            Job,
            scoped_api(client.clone(), ns.as_deref()),
            "",
            "jobs"
        );
    }

    let shared = Arc::new(Shared {
        health: health.clone(),
        ..Shared::new(settings.clone(), stores, needs)
    });
    let pod_selectors = pod_selectors(&settings, node.as_deref());
    let pods: Api<Pod> = scoped_api(client, ns.as_deref());
    tokio::spawn(run_pod_watch(
        pods,
        selectors(&pod_selectors.fields, &pod_selectors.labels),
        shared.clone(),
        reporter("pods", &health, &metrics),
        metrics,
        cancel.clone(),
    ));
    let latch_owner = shared.clone();
    tokio::spawn(async move {
        let all = async {
            for r in ready {
                r.await;
            }
            while !latch_owner.synced() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            () = all => {
                tracing::info!(
                    pods = latch_owner.table.read().map(|t| t.len()).unwrap_or_default(),
                    "Kubernetes metadata synced"
                );
                latch_owner.all_synced.open();
            }
            () = cancel.cancelled() => {}
        }
    });
    shared
}

/// Keeps only what lookups read: owners, labels and annotations, name, namespace, uid.
fn strip_meta<K>(obj: &mut PartialObjectMeta<K>) {
    obj.metadata.managed_fields = None;
    obj.metadata.finalizers = None;
}

async fn run_meta_watch<K>(
    api: Api<PartialObjectMeta<K>>,
    selectors: Selectors,
    mut writer: reflector::store::Writer<PartialObjectMeta<K>>,
    reporter: Reporter,
    cancel: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    PartialObjectMeta<K>:
        Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync,
{
    let run = listwatch::run(api, selectors, reporter, move |mut event| {
        match &mut event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
                strip_meta(o);
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        writer.apply_watcher_event(&event);
    });
    tokio::select! {
        () = crate::quiet::quiet(run) => {}
        () = cancel.cancelled() => {}
    }
}

async fn run_pod_watch(
    api: Api<Pod>,
    selectors: Selectors,
    shared: Arc<Shared>,
    reporter: Reporter,
    metrics: Metrics,
    cancel: CancellationToken,
) {
    let sink_shared = shared.clone();
    let sink_metrics = metrics.clone();
    let run = listwatch::run(api, selectors, reporter, move |mut event| {
        // Dropped before anything else looks at the pod: the record keeps far less anyway.
        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = &mut event {
            p.metadata.managed_fields = None;
        }
        let done = matches!(event, watcher::Event::InitDone);
        let mut table = sink_shared.table.write().unwrap_or_else(|e| e.into_inner());
        let changes = table.handle(event, &sink_shared.settings, Instant::now());
        sink_metrics.record(changes, table.len());
        drop(table);
        if done && !sink_shared.pods_synced.swap(true, Ordering::AcqRel) {
            tracing::debug!("pod list complete");
        }
    });
    let sweeper = async {
        let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            sweep.tick().await;
            let mut table = shared.table.write().unwrap_or_else(|e| e.into_inner());
            let swept = table.sweep(Instant::now());
            if swept > 0 {
                tracing::debug!(swept, "deleted pods past their grace period dropped");
            }
            metrics
                .table_size
                .set(i64::try_from(table.len()).unwrap_or(i64::MAX));
        }
    };
    tokio::select! {
        () = crate::quiet::quiet(run) => {}
        () = sweeper => {}
        () = cancel.cancelled() => {}
    }
}

/// Waits until the caches are synced, blocking this thread (start-up only). Inside a
/// multi-threaded runtime the worker hands its other tasks on while it waits.
pub fn wait_synced(shared: &Shared, timeout: Duration) -> Result<bool, ClientError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::CurrentThread) => Err(ClientError::Runtime(
            "wait_for_metadata needs the multi-threaded runtime".into(),
        )),
        Ok(_) => Ok(tokio::task::block_in_place(|| {
            shared.all_synced.wait(timeout)
        })),
        Err(_) => Ok(shared.all_synced.wait(timeout)),
    }
}

/// For logs and errors: where the client points.
pub fn describe(config: &kube::Config) -> String {
    config.cluster_url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{config, settings};

    #[test]
    fn selectors_combine_the_node_and_the_filters() {
        let s = settings(
            "filter:\n  fields:\n    - {key: status.phase, value: Running}\n  labels:\n    - {key: app, value: web}\n    - {key: canary, op: does-not-exist}\n",
        );
        assert_eq!(
            pod_selectors(&s, Some("node-a")),
            PodSelectors {
                fields: "spec.nodeName=node-a,status.phase=Running".into(),
                labels: "app=web,!canary".into(),
            }
        );
        assert_eq!(
            pod_selectors(&settings("{}"), None),
            PodSelectors::default()
        );
    }

    #[test]
    fn auth_none_points_at_the_service_without_credentials() {
        let c = config("auth_type: none");
        let env = |k: &str| match k {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_owned()),
            "KUBERNETES_SERVICE_PORT" => Some("6443".to_owned()),
            _ => None,
        };
        let k = client_config(&c, AuthType::None, &env).expect("config");
        assert_eq!(k.cluster_url.to_string(), "https://[fd00::1]:6443/");
        assert!(k.accept_invalid_certs);
        let missing = |_: &str| None;
        assert!(matches!(
            client_config(&c, AuthType::None, &missing),
            Err(ClientError::NoServiceEnv)
        ));
    }

    #[test]
    fn a_kubeconfig_context_is_honoured() {
        let dir = profcol_core::testkit::scratch_dir("k8sattr-ctx");
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster:\n    server: http://127.0.0.1:1001\n- name: b\n  cluster:\n    server: http://127.0.0.1:1002\ncontexts:\n- name: a\n  context: {cluster: a, user: u}\n- name: b\n  context: {cluster: b, user: u, namespace: team}\ncurrent-context: a\nusers:\n- name: u\n  user: {}\n",
        )
        .expect("write");
        let yaml = format!(
            "auth_type: kubeConfig\nkube_config_path: {}\n",
            path.display()
        );
        let k = client_config(&config(&yaml), AuthType::KubeConfig, &|_| None).expect("current");
        assert_eq!(k.cluster_url.to_string(), "http://127.0.0.1:1001/");
        let k = client_config(
            &config(&format!("{yaml}context: b\n")),
            AuthType::KubeConfig,
            &|_| None,
        )
        .expect("context b");
        assert_eq!(k.cluster_url.to_string(), "http://127.0.0.1:1002/");
        let e = client_config(
            &config(&format!("{yaml}context: nope\n")),
            AuthType::KubeConfig,
            &|_| None,
        )
        .expect_err("unknown context");
        assert!(e.to_string().starts_with("reading the kubeconfig"), "{e}");
    }

    #[test]
    fn the_latch_opens_once_and_times_out_closed() {
        let l = Latch::default();
        assert!(!l.wait(Duration::from_millis(10)));
        l.open();
        assert!(l.wait(Duration::from_millis(10)));
        assert!(l.wait(Duration::ZERO));
    }
}
