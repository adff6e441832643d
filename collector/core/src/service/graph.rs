//! The collector as a graph of components, in three phases, each its own step:
//!
//! - [`Graph::build`] makes every component from the checked config, once per id:
//!   extensions, exporters, each pipeline's processors, receivers. The service starts
//!   nothing yet (a component may hold a background task of its own, which ends when it
//!   is dropped), so one that cannot be made stops the collector before anything ran.
//! - [`Graph::start`] starts them in dependency order (extensions, exporters, pipelines,
//!   receivers) and waits, bounded, until every receiver can take data.
//! - [`Running::shutdown`] stops them in the reverse order within a deadline: receivers
//!   stop, pipelines flush, exporters drain, extensions end.
//!
//! Instances as otelcol makes them: one receiver per id feeding every pipeline that
//! lists it; one processor chain per pipeline; one exporter (with its helper) per id, fed
//! by every pipeline that lists it. A batch crosses two queues: the pipeline's bounded
//! entrance (its fullness is the backpressure receivers see) and each exporter's sending
//! queue.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::load::{CollectorConfig, Node, node};
use super::pipeline::{Panicked, Stage, run_pipeline};
use super::run::{ServiceError, ServiceOptions, label, spawn_component};
use super::status::{ComponentStatus, Status};
use crate::component::{
    BuildError, ComponentId, CreateContext, Exporter, Extension, ExtensionContext, Host, Kind,
    ProcessorCreateContext, Receiver, ReceiverContext, ReceiverOutput, ServiceGraph, Started,
    output::Entrance,
};
use crate::exporterhelper::{
    CatchUnwind, ExporterHandle, ExporterHelperSettings, OfflineCounters, OfflineError,
    OfflineSettings, OfflineStore, panic_counter,
};
use crate::telemetry::{ExporterCounters, ProcessorCounters, ReceiverCounters, Telemetry};

/// How long start-up waits for receivers to report that they can take data.
const RECEIVER_START_LIMIT: Duration = Duration::from_secs(10);

/// An extension, made.
struct ExtensionNode {
    id: ComponentId,
    extension: Box<dyn Extension>,
}

/// An exporter, made, with what its helper needs to start.
struct ExporterNode {
    exporter: Arc<dyn Exporter>,
    settings: ExporterHelperSettings,
    storage_dir: Option<PathBuf>,
}

/// A pipeline: its processors, made, and the exporters it feeds.
struct PipelineNode {
    id: String,
    chain: Vec<Stage>,
    exporters: Vec<ComponentId>,
}

/// A receiver, made, and the pipelines it feeds.
struct ReceiverNode {
    id: ComponentId,
    receiver: Box<dyn Receiver>,
    pipelines: Vec<String>,
}

/// Every component of a config, made and not yet running.
pub struct Graph {
    telemetry: Telemetry,
    options: ServiceOptions,
    service_graph: Arc<ServiceGraph>,
    extensions: Vec<ExtensionNode>,
    /// In the order pipelines first list them.
    exporters: Vec<(ComponentId, ExporterNode)>,
    pipelines: Vec<PipelineNode>,
    receivers: Vec<ReceiverNode>,
}

/// The node of `id`: `load` checked that every id the service and the pipelines list is
/// one.
fn node_of<'c, F: ?Sized>(
    kind: Kind,
    nodes: &'c [Node<F>],
    id: &ComponentId,
) -> Result<&'c Node<F>, BuildError> {
    node(nodes, id).ok_or_else(|| {
        BuildError::new(
            id,
            format!(
                "{} {id} has no config (not defined under {})",
                kind.as_str(),
                kind.section()
            ),
        )
    })
}

impl Graph {
    /// Makes every component of `config`, in the order they will start.
    pub fn build(
        config: &CollectorConfig,
        telemetry: &Telemetry,
        options: ServiceOptions,
    ) -> Result<Graph, BuildError> {
        let mut graph = Graph {
            telemetry: telemetry.clone(),
            options,
            service_graph: Arc::new(ServiceGraph {
                pipelines: config.pipelines.clone(),
                extensions: config.service_extensions.clone(),
            }),
            extensions: Vec::new(),
            exporters: Vec::new(),
            pipelines: Vec::new(),
            receivers: Vec::new(),
        };
        let host = graph.build_extensions(config, Host::default())?;
        graph.build_exporters(config, &host)?;
        graph.build_pipelines(config, &host)?;
        graph.build_receivers(config, &host)?;
        Ok(graph)
    }

    /// Extensions first: exporters may need their storage. Returns `host` with the
    /// storage directories they offer.
    fn build_extensions(
        &mut self,
        config: &CollectorConfig,
        host: Host,
    ) -> Result<Host, BuildError> {
        let mut storage = Vec::new();
        for id in &config.service_extensions {
            let node = node_of(Kind::Extension, &config.extensions, id)?;
            let ctx = CreateContext {
                id: id.clone(),
                telemetry: self.telemetry.clone(),
                host: host.clone(),
            };
            let extension = node.factory.create(&node.config, &ctx)?;
            if let Some(dir) = extension.storage_directory() {
                storage.push((id.clone(), dir));
            }
            self.extensions.push(ExtensionNode {
                id: id.clone(),
                extension,
            });
        }
        Ok(host.with_storage(storage))
    }

    /// One exporter per id that some pipeline uses.
    fn build_exporters(&mut self, config: &CollectorConfig, host: &Host) -> Result<(), BuildError> {
        for id in config.pipelines.iter().flat_map(|p| &p.exporters) {
            if self.exporters.iter().any(|(e, _)| e == id) {
                continue;
            }
            let node = node_of(Kind::Exporter, &config.exporters, id)?;
            let ctx = CreateContext {
                id: id.clone(),
                telemetry: self.telemetry.clone(),
                host: host.clone(),
            };
            let settings = node.factory.helper_settings(&node.config);
            if let Some(dir) = &settings.offline.directory {
                let shared = self
                    .exporters
                    .iter()
                    .find(|(_, node)| node.settings.offline.directory.as_ref() == Some(dir))
                    .map(|(other, _)| format!("exporter {other}'s offline.directory"))
                    .or_else(|| {
                        host.storage()
                            .iter()
                            .find(|(_, s)| s == dir)
                            .map(|(ext, _)| format!("extension {ext}'s directory"))
                    });
                if let Some(other) = shared {
                    return Err(BuildError::new(
                        id,
                        format!(
                            "offline.directory {} is also {other}; give each its own folder",
                            dir.display()
                        ),
                    ));
                }
            }
            let storage_dir = match &settings.queue.storage {
                Some(name) if settings.queue.enabled => {
                    let sid = ComponentId::parse(name).map_err(|e| BuildError::new(id, e))?;
                    Some(host.storage_directory(&sid).map(std::path::Path::to_path_buf).ok_or_else(|| {
                        BuildError::new(id, format!("sending_queue.storage names {sid}, which is not a running storage extension (list it in service::extensions)"))
                    })?)
                }
                _ => None,
            };
            let exporter: Arc<dyn Exporter> = Arc::from(node.factory.create(&node.config, &ctx)?);
            self.exporters.push((
                id.clone(),
                ExporterNode {
                    exporter,
                    settings,
                    storage_dir,
                },
            ));
        }
        Ok(())
    }

    /// Each pipeline's processors, in order.
    fn build_pipelines(&mut self, config: &CollectorConfig, host: &Host) -> Result<(), BuildError> {
        for pipeline in &config.pipelines {
            let mut chain = Vec::new();
            for id in &pipeline.processors {
                let node = node_of(Kind::Processor, &config.processors, id)?;
                let ctx = ProcessorCreateContext {
                    base: CreateContext {
                        id: id.clone(),
                        telemetry: self.telemetry.clone(),
                        host: host.clone(),
                    },
                    pipeline: pipeline.id.clone(),
                };
                chain.push(Stage {
                    id: id.clone(),
                    processor: node.factory.create(&node.config, &ctx)?,
                    counters: ProcessorCounters::new(
                        &self.telemetry,
                        &id.to_string(),
                        pipeline.id.as_str(),
                    ),
                    next_tick: None,
                });
            }
            self.pipelines.push(PipelineNode {
                id: pipeline.id.to_string(),
                chain,
                exporters: pipeline.exporters.clone(),
            });
        }
        Ok(())
    }

    /// One receiver per id, feeding every pipeline that lists it.
    fn build_receivers(&mut self, config: &CollectorConfig, host: &Host) -> Result<(), BuildError> {
        for id in config.pipelines.iter().flat_map(|p| &p.receivers) {
            if self.receivers.iter().any(|r| &r.id == id) {
                continue;
            }
            let node = node_of(Kind::Receiver, &config.receivers, id)?;
            let ctx = CreateContext {
                id: id.clone(),
                telemetry: self.telemetry.clone(),
                host: host.clone(),
            };
            self.receivers.push(ReceiverNode {
                id: id.clone(),
                receiver: node.factory.create(&node.config, &ctx)?,
                pipelines: config
                    .pipelines
                    .iter()
                    .filter(|p| p.receivers.contains(id))
                    .map(|p| p.id.to_string())
                    .collect(),
            });
        }
        Ok(())
    }

    /// The ids made, by kind, in start order (for tests and zpages-like views).
    pub fn components(&self) -> Vec<String> {
        let extensions = self
            .extensions
            .iter()
            .map(|e| label(Kind::Extension, &e.id));
        let exporters = self
            .exporters
            .iter()
            .map(|(id, _)| label(Kind::Exporter, id));
        let processors = self.pipelines.iter().flat_map(|p| {
            p.chain
                .iter()
                .map(move |s| format!("{} in pipeline/{}", label(Kind::Processor, &s.id), p.id))
        });
        let receivers = self.receivers.iter().map(|r| label(Kind::Receiver, &r.id));
        extensions
            .chain(exporters)
            .chain(processors)
            .chain(receivers)
            .collect()
    }

    /// Starts everything: extensions, exporters, pipelines, then receivers; returns once
    /// every receiver can take data (or after [`RECEIVER_START_LIMIT`]).
    pub async fn start(self, status: &Status) -> Result<Running, ServiceError> {
        let Graph {
            telemetry,
            options,
            service_graph,
            extensions,
            exporters,
            pipelines,
            receivers,
        } = self;
        let (fatal_tx, fatal_rx) = mpsc::unbounded_channel::<(String, String)>();

        let extensions_stop = CancellationToken::new();
        let extension_tasks = extensions
            .into_iter()
            .map(|node| {
                let ctx = ExtensionContext {
                    id: node.id.clone(),
                    shutdown: extensions_stop.clone(),
                    telemetry: telemetry.clone(),
                    status: status.clone(),
                    graph: service_graph.clone(),
                };
                let extension = node.extension;
                spawn_component(
                    label(Kind::Extension, &node.id),
                    status.clone(),
                    fatal_tx.clone(),
                    telemetry.clone(),
                    async move { extension.run(ctx).await },
                )
            })
            .collect();

        let mut handles: BTreeMap<ComponentId, ExporterHandle> = BTreeMap::new();
        for (id, node) in exporters {
            let counters = ExporterCounters::new(&telemetry, &id.to_string());
            let started = node
                .exporter
                .start()
                .map_err(|e| BuildError::caused_by(&id, "cannot start", e))
                .and_then(|()| {
                    open_offline(&node.settings.offline, &telemetry, &id)
                        .map_err(|e| BuildError::from_source(&id, e))
                })
                .and_then(|offline| {
                    ExporterHandle::start(
                        id.clone(),
                        node.exporter,
                        &node.settings,
                        counters,
                        panic_counter(&telemetry, &label(Kind::Exporter, &id)),
                        node.storage_dir,
                        offline,
                    )
                    .map_err(|e| BuildError::caused_by(&id, "cannot open its sending queue", e))
                });
            let handle = match started {
                Ok(handle) => handle,
                Err(e) => {
                    // An exporter that cannot start, or a persistent queue or an offline
                    // folder that cannot open: stop what already started.
                    extensions_stop.cancel();
                    for (started_id, handle) in &handles {
                        handle.shutdown(Duration::ZERO).await;
                        status.set(&label(Kind::Exporter, started_id), ComponentStatus::Stopped);
                    }
                    return Err(e.into());
                }
            };
            status.set(&label(Kind::Exporter, &id), ComponentStatus::Ok);
            handles.insert(id, handle);
        }

        let mut entrances: BTreeMap<String, Entrance> = BTreeMap::new();
        let mut pipeline_tasks = Vec::new();
        for node in pipelines {
            let (tx, rx) = mpsc::channel(options.pipeline_capacity.max(1));
            let admission = node
                .chain
                .iter()
                .filter_map(|s| s.processor.admission())
                .collect();
            entrances.insert(node.id.clone(), Entrance { tx, admission });
            let outputs: Vec<ExporterHandle> = node
                .exporters
                .iter()
                .filter_map(|id| handles.get(id).cloned())
                .collect();
            pipeline_tasks.push(spawn_pipeline(
                node.id,
                node.chain,
                rx,
                outputs,
                status.clone(),
                fatal_tx.clone(),
                telemetry.clone(),
            ));
        }

        let receivers_stop = CancellationToken::new();
        let mut receiver_tasks = Vec::new();
        let mut receivers_started = Vec::new();
        for node in receivers {
            let feeds: Vec<Entrance> = node
                .pipelines
                .iter()
                .filter_map(|p| entrances.get(p).cloned())
                .collect();
            let (started, started_rx) = Started::new();
            receivers_started.push(started_rx);
            // A receiver that ends cleanly without saying it started (nothing left to do)
            // must not hold readiness back; one that fails must not be reported ready.
            let started_on_return = started.clone();
            let ctx = ReceiverContext {
                id: node.id.clone(),
                started,
                output: ReceiverOutput::new(
                    feeds,
                    ReceiverCounters::new(&telemetry, &node.id.to_string()),
                ),
                shutdown: receivers_stop.clone(),
                telemetry: telemetry.clone(),
            };
            let span = tracing::info_span!("receiver", receiver = %node.id);
            let receiver = node.receiver;
            receiver_tasks.push(spawn_component(
                label(Kind::Receiver, &node.id),
                status.clone(),
                fatal_tx.clone(),
                telemetry.clone(),
                async move {
                    let result = receiver.run(ctx).instrument(span).await;
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
        wait_until_ready(receivers_started, status).await;
        Ok(Running {
            status: status.clone(),
            fatal_rx,
            receivers_stop,
            receiver_tasks,
            pipeline_tasks,
            exporters: handles,
            extensions_stop,
            extension_tasks,
        })
    }
}

/// The offline folder `settings` names, opened and locked; None without one.
pub fn open_offline(
    settings: &OfflineSettings,
    telemetry: &Telemetry,
    id: &ComponentId,
) -> Result<Option<OfflineStore>, OfflineError> {
    let Some(dir) = &settings.directory else {
        return Ok(None);
    };
    OfflineStore::open(
        dir,
        settings.max_size_mib,
        settings.max_age,
        OfflineCounters::new(telemetry, &id.to_string()),
    )
    .map(Some)
}

/// Ready once every receiver can take data, bounded, so that a receiver that never says
/// so cannot keep the collector unready forever. A receiver that returned before saying so
/// (it failed to start) keeps it unready: its failure is reported instead.
async fn wait_until_ready(
    receivers_started: Vec<tokio::sync::watch::Receiver<bool>>,
    status: &Status,
) {
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
}

/// A pipeline's task; a processor's panic fails the pipeline and stops the collector.
fn spawn_pipeline(
    id: String,
    chain: Vec<Stage>,
    rx: mpsc::Receiver<crate::pdata::ProfileBatch>,
    outputs: Vec<ExporterHandle>,
    status: Status,
    fatal: mpsc::UnboundedSender<(String, String)>,
    telemetry: Telemetry,
) -> JoinHandle<()> {
    let span = tracing::info_span!("pipeline", pipeline = %id);
    let name = format!("pipeline/{id}");
    status.set(&name, ComponentStatus::Ok);
    tokio::spawn(async move {
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
                // pipeline is failed (health_check answers 503) and the collector stops
                // with an error, for its supervisor to restart it.
                panic_counter(&telemetry, &component).add(1);
                let message = format!("{component} panicked: {message}");
                tracing::error!(pipeline = %name, error = %message, "pipeline failed");
                status.set(&name, ComponentStatus::FatalError(message.clone()));
                let _ = fatal.send((name, message));
            }
        }
    })
}

/// The collector running.
pub struct Running {
    status: Status,
    fatal_rx: mpsc::UnboundedReceiver<(String, String)>,
    receivers_stop: CancellationToken,
    receiver_tasks: Vec<JoinHandle<()>>,
    pipeline_tasks: Vec<JoinHandle<()>>,
    exporters: BTreeMap<ComponentId, ExporterHandle>,
    extensions_stop: CancellationToken,
    extension_tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Waits for `shutdown`, or for a component to fail fatally (that failure).
    pub async fn until_stopped(&mut self, shutdown: &CancellationToken) -> Option<ServiceError> {
        tokio::select! {
            () = shutdown.cancelled() => None,
            Some((component, message)) = self.fatal_rx.recv() => {
                Some(ServiceError::Fatal { component, message })
            }
        }
    }

    /// Stops everything by `deadline`: receivers stop (aborted past it), pipelines flush,
    /// exporters drain what time is left, extensions end.
    pub async fn shutdown(self, deadline: Instant) {
        self.status.set_ready(false);
        tracing::info!("shutting down: receivers stop, pipelines flush, exporters drain");
        self.receivers_stop.cancel();
        for task in self.receiver_tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                // A receiver that will not stop holds its pipelines' entrances open;
                // dropping it lets them flush and the exporters drain.
                tracing::warn!("a receiver did not stop within the shutdown timeout; aborting it");
                abort.abort();
            }
        }
        for task in self.pipeline_tasks {
            let _ = tokio::time::timeout_at(deadline, task).await;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        for (id, handle) in &self.exporters {
            self.status
                .set(&label(Kind::Exporter, id), ComponentStatus::Stopping);
            handle.shutdown(left).await;
            self.status
                .set(&label(Kind::Exporter, id), ComponentStatus::Stopped);
        }
        self.extensions_stop.cancel();
        for task in self.extension_tasks {
            let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
        }
    }
}
