//! Running a checked config: [`run`] builds its [`Graph`], starts it and shuts it down.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::graph::Graph;
use super::load::CollectorConfig;
use super::status::{ComponentStatus, Status};
use crate::component::{BuildError, ComponentError, ComponentId, Kind};
use crate::exporterhelper::{CatchUnwind, panic_counter};
use crate::telemetry::Telemetry;

#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// How long exporters may drain their queues once receivers have stopped.
    pub shutdown_timeout: Duration,
    /// Batches a pipeline's entrance holds before receivers are pushed back.
    pub pipeline_capacity: usize,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            shutdown_timeout: Duration::from_secs(10),
            pipeline_capacity: 16,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("{component} failed: {message}")]
    Fatal { component: String, message: String },
}

pub(super) fn label(kind: Kind, id: &ComponentId) -> String {
    format!("{}/{}", kind.as_str(), id)
}

/// Runs the collector until `shutdown` is cancelled or a component fails fatally:
/// builds the graph, starts it, and shuts it down within `options.shutdown_timeout`.
pub async fn run(
    config: CollectorConfig,
    telemetry: Telemetry,
    status: Status,
    shutdown: CancellationToken,
    options: ServiceOptions,
) -> Result<(), ServiceError> {
    let shutdown_timeout = options.shutdown_timeout;
    let graph = Graph::build(&config, &telemetry, options)?;
    let mut running = graph.start(&status).await?;
    let failure = running.until_stopped(&shutdown).await;
    running
        .shutdown(after(Instant::now(), shutdown_timeout))
        .await;
    failure.map_or(Ok(()), Err)
}

/// Runs a component task, keeping its status, and reports a fatal error. A panic is
/// caught, counted and reported as a fatal error, so it is noticed instead of leaving a
/// dead task behind an `Ok` status.
pub(super) fn spawn_component<F>(
    name: String,
    status: Status,
    fatal: mpsc::UnboundedSender<(String, String)>,
    telemetry: Telemetry,
    task: F,
) -> JoinHandle<()>
where
    F: std::future::Future<Output = Result<(), ComponentError>> + Send + 'static,
{
    status.set(&name, ComponentStatus::Ok);
    tokio::spawn(async move {
        let result = CatchUnwind::new(task).await.unwrap_or_else(|message| {
            panic_counter(&telemetry, &name).add(1);
            Err(ComponentError::Fatal(format!("panicked: {message}")))
        });
        match result {
            Ok(()) => status.set(&name, ComponentStatus::Stopped),
            Err(e) => {
                let message = crate::errors::error_chain(&e);
                tracing::error!(component = %name, error = %message, "component failed");
                status.set(&name, ComponentStatus::FatalError(message.clone()));
                let _ = fatal.send((name, message));
            }
        }
    })
}

/// `at + d`, saturating: an interval or timeout too long to add (a config's `1000000000h`)
/// means about thirty years, not a panic.
pub(super) fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(Duration::from_secs(30 * 365 * 86_400)))
        .unwrap_or(at)
}
