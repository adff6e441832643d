//! Running the collector: load and check the config, set up logs and /metrics, run the
//! service until SIGINT/SIGTERM or a fatal component error.

use std::time::Duration;

use anyhow::{Context as _, bail};
use profcol_core::config::{LogEncoding, TelemetryConfig};
use profcol_core::service::{self, CollectorConfig, ServiceOptions, Status};
use profcol_core::telemetry::Telemetry;
use tokio_util::sync::CancellationToken;

/// What `profcol` runs with no `--config`: profile this machine, write pprof files and
/// flame graphs under ./profiles. The same file is in config/examples/.
pub const DEFAULT_CONFIG: &str = include_str!("../../../config/examples/default.yaml");

/// `--config` values: a path, `file:PATH`, or `yaml:INLINE` (a snippet merged over the rest,
/// as otelcol's `--config yaml:...`). None at all means the default config.
pub fn read_sources(configs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    if configs.is_empty() {
        return Ok(vec![(
            "default config".to_owned(),
            DEFAULT_CONFIG.to_owned(),
        )]);
    }
    configs
        .iter()
        .map(|c| {
            if let Some(inline) = c.strip_prefix("yaml:") {
                return Ok((c.clone(), inline.to_owned()));
            }
            let path = c.strip_prefix("file:").unwrap_or(c);
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading config {path}"))?;
            Ok((path.to_owned(), text))
        })
        .collect()
}

/// Loads and checks; on failure prints every error, one per line.
pub fn load(configs: &[String]) -> anyhow::Result<CollectorConfig> {
    let sources = read_sources(configs)?;
    let registry = crate::components::registry()?;
    match service::load(&sources, &|name| std::env::var(name).ok(), &registry) {
        Ok(config) => Ok(config),
        Err(errors) => {
            let n = errors.0.len();
            bail!(
                "invalid configuration ({n} error{}):\n{errors}",
                if n == 1 { "" } else { "s" }
            )
        }
    }
}

fn init_logs(telemetry: &TelemetryConfig) -> anyhow::Result<()> {
    let level: tracing::Level = telemetry.logs.level.parse().map_err(|_| {
        anyhow::anyhow!(
            "service::telemetry::logs::level: {:?} is not one of trace, debug, info, warn, error",
            telemetry.logs.level
        )
    })?;
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    let result = match telemetry.logs.encoding {
        LogEncoding::Json => builder.json().try_init(),
        LogEncoding::Console => builder.try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("setting up logs: {e}"))
}

/// Binds the self-metrics endpoint; called before anything starts, so a port in use
/// stops profcol at once (as otelcol does) instead of leaving it running unobserved.
async fn bind_metrics(address: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = profcol_core::endpoint::bind_listener(address)
        .await
        .with_context(|| format!("self-metrics: cannot listen on {address}"))?;
    let shown = listener
        .local_addr()
        .map_or_else(|_| address.to_owned(), |a| a.to_string());
    tracing::info!(address = %shown, "self-metrics at /metrics");
    Ok(listener)
}

async fn serve_metrics(
    listener: tokio::net::TcpListener,
    telemetry: Telemetry,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let t = telemetry.clone();
            async move { ([("content-type", "text/plain; version=0.0.4")], t.render()) }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await?;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn termination() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// With the pprof extension in `service::extensions`, jemalloc's heap profiler must be on
/// from the allocator's start: this restarts profcol in place once to switch it on (same
/// pid and arguments), before anything has started. Without the extension it stays off.
fn heap_profiling_for(config: &CollectorConfig, configs: &[String]) -> Option<String> {
    let wanted = config
        .service_extensions
        .iter()
        .any(|id| id.type_name() == profcol_extension_pprof::TYPE_NAME);
    if !wanted || profcol_extension_pprof::heap_profiling_on() {
        return None;
    }
    if let Some(source) = configs.iter().find(|c| !rereadable(c)) {
        return Some(format!(
            "the config {source:?} cannot be read a second time by a restart (a pipe or device); start profcol with _RJEM_MALLOC_CONF set as the pprof extension's README says"
        ));
    }
    profcol_extension_pprof::ensure_heap_profiling().err()
}

/// Whether the restarted process can read a config source again: inline YAML, or a
/// regular file. `/dev/stdin` or `<(...)` were read to their end the first time.
fn rereadable(source: &str) -> bool {
    if source.starts_with("yaml:") {
        return true;
    }
    let path = source.strip_prefix("file:").unwrap_or(source);
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

pub fn run(configs: &[String], feature_gates: &[String]) -> anyhow::Result<()> {
    let config = load(configs)?;
    let heap_profiling_off = heap_profiling_for(&config, configs);
    if configs.is_empty() {
        let out = std::env::var("PROFCOL_OUTPUT").unwrap_or_else(|_| "./profiles".into());
        eprintln!(
            "profcol: no --config given, so profiling this machine with the default config.\n  \
             pprof files:  {out}/pprof/ (go tool pprof FILE)\n  \
             flame graphs: {out}/flamegraphs/index.html (open in a browser; first after a minute)\n  \
             stop with Ctrl-C; profcol --help for more"
        );
    }
    init_logs(&config.telemetry)?;
    for gate in feature_gates {
        // otelcol needs +service.profilesSupport for profiles pipelines; profcol always has them.
        tracing::info!(gate = %gate, "feature gates are not needed by profcol; ignoring");
    }
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    if let Some(why) = heap_profiling_off {
        tracing::warn!("pprof extension: no heap profiles: {why}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let telemetry = Telemetry::new();
        let stop = CancellationToken::new();
        let metrics = match config
            .telemetry
            .metrics
            .listen_address()
            .map_err(anyhow::Error::msg)?
        {
            Some(address) => {
                let listener = bind_metrics(&address).await?;
                Some(tokio::spawn(serve_metrics(
                    listener,
                    telemetry.clone(),
                    stop.clone(),
                )))
            }
            None => None,
        };
        let signal_stop = stop.clone();
        tokio::spawn(async move {
            termination().await;
            tracing::info!("signal received");
            signal_stop.cancel();
        });
        let result = service::run(
            config,
            telemetry,
            Status::new(),
            stop.clone(),
            ServiceOptions::default(),
        )
        .await;
        stop.cancel();
        if let Some(m) = metrics
            && let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(2), m).await
        {
            return Err(e);
        }
        result.map_err(anyhow::Error::from)
    })
}
