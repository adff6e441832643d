//! Building the graph from a checked config and running it.
//!
//! Instances as otelcol makes them: one receiver per id feeding every pipeline that lists
//! it; one processor chain per pipeline; one exporter (with its helper) per id, fed by every
//! pipeline that lists it. A batch crosses two queues: the pipeline's bounded entrance
//! (its fullness is the backpressure receivers see) and each exporter's sending queue.
//! Start goes exporters → pipelines → receivers; shutdown closes in the reverse order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::load::{CollectorConfig, Pipeline};
use super::status::{ComponentStatus, Status};
use crate::component::{
    BuildError, ComponentError, ComponentId, CreateContext, ExtensionContext, Kind, Processor,
    ProcessorCreateContext, ReceiverContext, ReceiverOutput, Registry, ServiceGraph, Started,
    output::Entrance,
};
use crate::exporterhelper::{CatchUnwind, ExporterHandle, panic_counter};
use crate::pdata::ProfileBatch;
use crate::telemetry::{ExporterCounters, ProcessorCounters, ReceiverCounters, Telemetry};

/// How long start-up waits for receivers to report that they can take data.
const RECEIVER_START_LIMIT: Duration = Duration::from_secs(10);

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

fn label(kind: Kind, id: &ComponentId) -> String {
    format!("{}/{}", kind.as_str(), id)
}

/// Runs the collector until `shutdown` is cancelled or a component fails fatally.
pub async fn run(
    config: CollectorConfig,
    registry: &Registry,
    telemetry: Telemetry,
    status: Status,
    shutdown: CancellationToken,
    options: ServiceOptions,
) -> Result<(), ServiceError> {
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<(String, String)>();

    // Extensions first: exporters may need their storage.
    let extensions_stop = CancellationToken::new();
    let mut extension_tasks = Vec::new();
    let mut storage = Vec::new();
    let graph = Arc::new(ServiceGraph {
        pipelines: config.pipelines.clone(),
        extensions: config.service_extensions.clone(),
    });
    for id in &config.service_extensions {
        let (Some(parsed), Some(factory)) = (
            config.config_of(Kind::Extension, id),
            registry.extensions.get(id.type_name()),
        ) else {
            continue;
        };
        let ctx = CreateContext {
            id: id.clone(),
            telemetry: telemetry.clone(),
            storage: Arc::default(),
        };
        let extension = factory.create(parsed, &ctx)?;
        if let Some(dir) = extension.storage_directory() {
            storage.push((id.clone(), dir));
        }
        let ectx = ExtensionContext {
            id: id.clone(),
            shutdown: extensions_stop.clone(),
            telemetry: telemetry.clone(),
            status: status.clone(),
            graph: graph.clone(),
        };
        extension_tasks.push(spawn_component(
            label(Kind::Extension, id),
            status.clone(),
            fatal_tx.clone(),
            telemetry.clone(),
            async move { extension.run(ectx).await },
        ));
    }
    let storage = Arc::new(storage);

    // Exporters: one per id that some pipeline uses.
    let mut exporters: BTreeMap<ComponentId, ExporterHandle> = BTreeMap::new();
    for pipeline in &config.pipelines {
        for id in &pipeline.exporters {
            if exporters.contains_key(id) {
                continue;
            }
            let (Some(parsed), Some(factory)) = (
                config.config_of(Kind::Exporter, id),
                registry.exporters.get(id.type_name()),
            ) else {
                continue;
            };
            let ctx = CreateContext {
                id: id.clone(),
                telemetry: telemetry.clone(),
                storage: storage.clone(),
            };
            let settings = factory.helper_settings(parsed);
            let storage_dir = match &settings.queue.storage {
                Some(name) if settings.queue.enabled => {
                    let sid = ComponentId::parse(name).map_err(|e| BuildError::new(id, e))?;
                    Some(ctx.storage_directory(&sid).map(std::path::Path::to_path_buf).ok_or_else(|| {
                        BuildError::new(id, format!("sending_queue.storage names {sid}, which is not a running storage extension (list it in service::extensions)"))
                    })?)
                }
                _ => None,
            };
            let exporter: Arc<dyn crate::component::Exporter> =
                Arc::from(factory.create(parsed, &ctx)?);
            let counters = ExporterCounters::new(&telemetry, &id.to_string());
            let handle = ExporterHandle::start(
                id.clone(),
                exporter,
                &settings,
                counters,
                crate::exporterhelper::panic_counter(&telemetry, &label(Kind::Exporter, id)),
                storage_dir,
            )
            .map_err(|e| BuildError::new(id, e))?;
            status.set(&label(Kind::Exporter, id), ComponentStatus::Ok);
            exporters.insert(id.clone(), handle);
        }
    }

    // Pipelines: processors per pipeline, a bounded entrance, one task.
    let mut entrances: BTreeMap<String, Entrance> = BTreeMap::new();
    let mut pipeline_tasks = Vec::new();
    for pipeline in &config.pipelines {
        let mut chain = Vec::new();
        for id in &pipeline.processors {
            let (Some(parsed), Some(factory)) = (
                config.config_of(Kind::Processor, id),
                registry.processors.get(id.type_name()),
            ) else {
                continue;
            };
            let ctx = ProcessorCreateContext {
                base: CreateContext {
                    id: id.clone(),
                    telemetry: telemetry.clone(),
                    storage: storage.clone(),
                },
                pipeline: pipeline.id.clone(),
            };
            let processor = factory.create(parsed, &ctx)?;
            let counters =
                ProcessorCounters::new(&telemetry, &id.to_string(), pipeline.id.as_str());
            chain.push(Stage {
                id: id.clone(),
                processor,
                counters,
                next_tick: None,
            });
        }
        let (tx, rx) = mpsc::channel(options.pipeline_capacity.max(1));
        let admission = chain
            .iter()
            .filter_map(|s| s.processor.admission())
            .collect();
        entrances.insert(pipeline.id.to_string(), Entrance { tx, admission });
        let outputs: Vec<ExporterHandle> = pipeline
            .exporters
            .iter()
            .filter_map(|id| exporters.get(id).cloned())
            .collect();
        let span = tracing::info_span!("pipeline", pipeline = %pipeline.id);
        let name = format!("pipeline/{}", pipeline.id);
        status.set(&name, ComponentStatus::Ok);
        let (status, fatal, telemetry) = (status.clone(), fatal_tx.clone(), telemetry.clone());
        pipeline_tasks.push(tokio::spawn(async move {
            let ran = CatchUnwind::new(run_pipeline(rx, chain, outputs).instrument(span)).await;
            let failure = match ran {
                Ok(Ok(())) => None,
                Ok(Err(Panicked { component, message })) => Some((component, message)),
                Err(message) => Some((name.clone(), message)),
            };
            match failure {
                None => status.set(&name, ComponentStatus::Stopped),
                Some((component, message)) => {
                    // What the processors held is gone and their state is unknown: the
                    // pipeline is failed (health_check answers 503) and the collector
                    // stops with an error, for its supervisor to restart it.
                    panic_counter(&telemetry, &component).add(1);
                    let message = format!("{component} panicked: {message}");
                    tracing::error!(pipeline = %name, error = %message, "pipeline failed");
                    status.set(&name, ComponentStatus::FatalError(message.clone()));
                    let _ = fatal.send((name, message));
                }
            }
        }));
    }

    // Receivers last: one per id, feeding every pipeline that lists it.
    let receivers_stop = CancellationToken::new();
    let mut receiver_tasks = Vec::new();
    let mut receivers_started = Vec::new();
    let mut receiver_ids: Vec<&ComponentId> = Vec::new();
    for pipeline in &config.pipelines {
        for id in &pipeline.receivers {
            if !receiver_ids.contains(&id) {
                receiver_ids.push(id);
            }
        }
    }
    for id in receiver_ids {
        let (Some(parsed), Some(factory)) = (
            config.config_of(Kind::Receiver, id),
            registry.receivers.get(id.type_name()),
        ) else {
            continue;
        };
        let feeds: Vec<Entrance> = config
            .pipelines
            .iter()
            .filter(|p: &&Pipeline| p.receivers.contains(id))
            .filter_map(|p| entrances.get(p.id.as_str()).cloned())
            .collect();
        let ctx = CreateContext {
            id: id.clone(),
            telemetry: telemetry.clone(),
            storage: storage.clone(),
        };
        let receiver = factory.create(parsed, &ctx)?;
        let (started, started_rx) = Started::new();
        receivers_started.push(started_rx);
        // A receiver that ends cleanly without saying it started (nothing left to do) must
        // not hold readiness back; one that fails must not be reported ready.
        let started_on_return = started.clone();
        let rctx = ReceiverContext {
            id: id.clone(),
            started,
            output: ReceiverOutput::new(feeds, ReceiverCounters::new(&telemetry, &id.to_string())),
            shutdown: receivers_stop.clone(),
            telemetry: telemetry.clone(),
        };
        let span = tracing::info_span!("receiver", receiver = %id);
        receiver_tasks.push(spawn_component(
            label(Kind::Receiver, id),
            status.clone(),
            fatal_tx.clone(),
            telemetry.clone(),
            async move {
                let result = receiver.run(rctx).instrument(span).await;
                if result.is_ok() {
                    started_on_return.ready();
                }
                result
            },
        ));
    }
    // Only receivers hold the entrances now, so the pipelines end when they do.
    drop(entrances);
    drop(fatal_tx);
    // Ready once every receiver can take data (bounded, so a receiver that never says so
    // cannot keep the collector unready forever).
    // A receiver that returned before saying so (it failed to start) makes this false:
    // its failure is reported below instead of a readiness that never was.
    let all_started = async {
        let mut all = true;
        for mut rx in receivers_started {
            all &= rx.wait_for(|started| *started).await.is_ok();
        }
        all
    };
    match tokio::time::timeout(RECEIVER_START_LIMIT, all_started).await {
        Ok(true) => {
            status.set_ready(true);
            tracing::info!("everything is ready; profiles are flowing");
        }
        Ok(false) => {}
        Err(_) => {
            tracing::warn!(
                "a receiver has not reported itself started after {RECEIVER_START_LIMIT:?}; reporting ready anyway"
            );
            status.set_ready(true);
        }
    }

    let failure = tokio::select! {
        () = shutdown.cancelled() => None,
        Some((component, message)) = fatal_rx.recv() => Some(ServiceError::Fatal { component, message }),
    };
    status.set_ready(false);
    tracing::info!("shutting down: receivers stop, pipelines flush, exporters drain");

    receivers_stop.cancel();
    let deadline = after(Instant::now(), options.shutdown_timeout);
    for task in receiver_tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            // A receiver that will not stop holds its pipelines' entrances open; dropping
            // it lets them flush and the exporters drain.
            tracing::warn!("a receiver did not stop within the shutdown timeout; aborting it");
            abort.abort();
        }
    }
    for task in pipeline_tasks {
        let _ = tokio::time::timeout_at(deadline, task).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    for (id, handle) in &exporters {
        status.set(&label(Kind::Exporter, id), ComponentStatus::Stopping);
        handle.shutdown(left).await;
        status.set(&label(Kind::Exporter, id), ComponentStatus::Stopped);
    }
    extensions_stop.cancel();
    for task in extension_tasks {
        let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs a component task, keeping its status, and reports a fatal error. A panic is
/// caught, counted and reported as a fatal error, so it is noticed instead of leaving a
/// dead task behind an `Ok` status.
fn spawn_component<F>(
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
            Err(ComponentError::Fatal(message)) => {
                tracing::error!(component = %name, error = %message, "component failed");
                status.set(&name, ComponentStatus::FatalError(message.clone()));
                let _ = fatal.send((name, message));
            }
        }
    })
}

/// One processor in a pipeline's chain.
struct Stage {
    id: ComponentId,
    processor: Box<dyn Processor>,
    counters: ProcessorCounters,
    next_tick: Option<Instant>,
}

enum Event {
    Batch(ProfileBatch),
    Closed,
    Tick,
}

/// A processor that panicked, and what it said.
struct Panicked {
    component: String,
    message: String,
}

/// Runs one processor call, naming the processor if it panics.
async fn guarded<T>(
    id: &ComponentId,
    call: impl std::future::Future<Output = T>,
) -> Result<T, Panicked> {
    CatchUnwind::new(call).await.map_err(|message| Panicked {
        component: label(Kind::Processor, id),
        message,
    })
}

/// A pipeline's task: takes batches from the entrance, runs them through the processors
/// in order, and hands what comes out to every exporter. Ends when all its receivers have
/// stopped, after flushing the processors, or at once when a processor panics.
async fn run_pipeline(
    mut rx: mpsc::Receiver<ProfileBatch>,
    mut chain: Vec<Stage>,
    exporters: Vec<ExporterHandle>,
) -> Result<(), Panicked> {
    let now = Instant::now();
    for stage in &mut chain {
        stage.next_tick = stage
            .processor
            .tick_interval()
            .filter(|d| !d.is_zero())
            .map(|d| after(now, d));
    }
    loop {
        let earliest = chain.iter().filter_map(|s| s.next_tick).min();
        let event = tokio::select! {
            b = rx.recv() => b.map_or(Event::Closed, Event::Batch),
            () = sleep_until_or_forever(earliest) => Event::Tick,
        };
        match event {
            Event::Batch(batch) => {
                let out = process_from(&mut chain, 0, vec![batch]).await?;
                export(&exporters, out).await;
            }
            Event::Tick => {
                let now = Instant::now();
                for i in 0..chain.len() {
                    if chain[i].next_tick.is_some_and(|t| t <= now) {
                        let mut ticked = Vec::new();
                        let stage = &mut chain[i];
                        if let Err(e) =
                            guarded(&stage.id, stage.processor.on_tick(&mut ticked)).await?
                        {
                            tracing::warn!(processor = %stage.id, error = %e, "processor tick failed");
                        }
                        stage.next_tick = stage.processor.tick_interval().map(|d| after(now, d));
                        count_out(&chain[i].counters, &ticked);
                        let out = process_from(&mut chain, i + 1, ticked).await?;
                        export(&exporters, out).await;
                    }
                }
            }
            Event::Closed => break,
        }
    }
    // Flush front to back, so what one processor releases passes through the rest.
    for i in 0..chain.len() {
        let mut flushed = Vec::new();
        let stage = &mut chain[i];
        if let Err(e) = guarded(&stage.id, stage.processor.shutdown(&mut flushed)).await? {
            tracing::warn!(processor = %chain[i].id, error = %e, "processor flush failed");
        }
        count_out(&chain[i].counters, &flushed);
        let out = process_from(&mut chain, i + 1, flushed).await?;
        export(&exporters, out).await;
    }
    Ok(())
}

/// `at + d`, saturating: an interval or timeout too long to add (a config's `1000000000h`)
/// means about thirty years, not a panic.
pub(super) fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(Duration::from_secs(30 * 365 * 86_400)))
        .unwrap_or(at)
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn count_out(counters: &ProcessorCounters, batches: &[ProfileBatch]) {
    counters
        .outgoing
        .add(batches.iter().map(|b| b.sample_count() as u64).sum());
}

/// Runs `batches` through the processors from `start` on; what leaves the last one is
/// returned.
async fn process_from(
    chain: &mut [Stage],
    start: usize,
    mut batches: Vec<ProfileBatch>,
) -> Result<Vec<ProfileBatch>, Panicked> {
    for stage in chain.iter_mut().skip(start) {
        if batches.is_empty() {
            break;
        }
        let mut next = Vec::new();
        for batch in batches {
            let samples = batch.sample_count() as u64;
            stage.counters.incoming.add(samples);
            if let Err(e) = guarded(&stage.id, stage.processor.process(batch, &mut next)).await? {
                stage.counters.dropped.add(samples);
                tracing::warn!(processor = %stage.id, error = %e, "processor dropped a batch");
            }
        }
        count_out(&stage.counters, &next);
        batches = next;
    }
    Ok(batches)
}

async fn export(exporters: &[ExporterHandle], batches: Vec<ProfileBatch>) {
    for batch in batches {
        if batch.is_empty() && batch.profile_count() == 0 {
            continue;
        }
        for exporter in exporters {
            // Failures are logged and counted by the helper.
            let _ = exporter.consume(batch.clone()).await;
        }
    }
}
