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

fn start_watches(
    config: &Config,
    settings: &Arc<Settings>,
    id: &str,
    metrics: &Metrics,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<Source>, String> {
    let node = config.node_name(env)?;
    let kube_config =
        watch::client_config(config, settings.auth_type, env).map_err(|e| e.to_string())?;
    let url = watch::describe(&kube_config);
    let client = watch::client(kube_config).map_err(|e| e.to_string())?;
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
        let synced = watch::wait_synced(&source.shared, timeout).map_err(|e| e.to_string())?;
        if !synced {
            // Dropping `source` stops the watches.
            return Err(sync_failure(
                timeout,
                &url,
                &who(config, settings.auth_type),
                &source.shared.health.snapshot(),
            ));
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
        config: Config,
        ctx: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let id = ctx.base.id.to_string();
        let settings = Arc::new(config.settings().map_err(|errors| {
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            BuildError::new(&ctx.base.id, text.join("; "))
        })?);
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
                let source = start_watches(&config, &settings, &id, &metrics, &env)
                    .map_err(|e| BuildError::new(&ctx.base.id, e))?;
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

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;

profcol_core::component_conformance!(processor: K8sAttributesFactory, "k8s_attributes", Development);
