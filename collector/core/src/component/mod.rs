//! The component model: ids, the three kinds of pipeline component plus extensions, their
//! factories, and the registry the binary fills with one explicit list.
//!
//! A factory has a typed config (serde, `deny_unknown_fields`, defaults), a pure check
//! ([`crate::config::Validate`], or [`crate::config::Compile`] where checking builds what
//! the component runs with) and a create step that takes the checked config. Components
//! never count what they pass on: the framework counts at every edge.

mod conformance;
mod host;
mod id;
mod intake;
pub(crate) mod output;
pub mod registry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub use host::Host;
pub use id::{ComponentId, Kind, PipelineId};
pub use intake::Intake;
pub use output::{Admission, ReceiverOutput, Refused};
pub(crate) use registry::FactoryKind;
pub use registry::{
    ErasedExporterFactory, ErasedExtensionFactory, ErasedProcessorFactory, ErasedReceiverFactory,
    ParsedConfig, Registry,
};

use crate::config::{Checked, Compile};
use crate::exporterhelper::ExporterHelperSettings;
use crate::pdata::ProfileBatch;
use crate::telemetry::Telemetry;

/// How settled a component is, as otelcol labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stability {
    Development,
    Alpha,
    Beta,
    Stable,
}

impl Stability {
    pub fn as_str(self) -> &'static str {
        match self {
            Stability::Development => "development",
            Stability::Alpha => "alpha",
            Stability::Beta => "beta",
            Stability::Stable => "stable",
        }
    }
}

/// A component's config: deserialized by the factory, then checked (and compiled, where it
/// has something to compile) without side effects.
pub trait ComponentConfig:
    DeserializeOwned + Default + Clone + Compile + Send + Sync + 'static
{
}
impl<T: DeserializeOwned + Default + Clone + Compile + Send + Sync + 'static> ComponentConfig
    for T
{
}

/// An error a component passes on as the cause of its own.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors from creating a component out of a valid config (a file that cannot be opened,
/// a TLS key that does not parse, an endpoint that does not resolve). The text says what
/// failed; the source, when there is one, why ([`crate::errors::error_chain`] joins them).
#[derive(Debug, thiserror::Error)]
#[error("{id}: {message}")]
pub struct BuildError {
    pub id: String,
    pub message: String,
    #[source]
    pub source: Option<BoxError>,
}

impl BuildError {
    pub fn new(id: &ComponentId, message: impl Into<String>) -> Self {
        BuildError {
            id: id.to_string(),
            message: message.into(),
            source: None,
        }
    }

    /// `message` says what failed, `source` why.
    pub fn caused_by(
        id: &ComponentId,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        BuildError {
            id: id.to_string(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An error that says itself what failed (an offline folder locked by another
    /// process): its text is the message, and it is kept as the source.
    pub fn from_source(
        id: &ComponentId,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::caused_by(id, source.to_string(), source)
    }

    /// The step of `id`'s creation that failed, with its cause.
    pub fn failed(id: &ComponentId, failed: crate::errors::Failed) -> Self {
        Self::caused_by(id, failed.what, failed.source)
    }
}

/// Why a running component stopped early. The collector cannot go on without it (a port
/// in use, BPF refused).
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    #[error("{0}")]
    Fatal(String),
    /// `context` says what failed, `source` why.
    #[error("{context}")]
    FatalCausedBy {
        context: String,
        #[source]
        source: BoxError,
    },
}

impl ComponentError {
    /// A fatal error: `context` says what failed, `source` why.
    pub fn caused_by(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        ComponentError::FatalCausedBy {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// What every create step gets.
#[derive(Clone)]
pub struct CreateContext {
    pub id: ComponentId,
    pub telemetry: Telemetry,
    /// What the collector offers beyond the config (storage directories, host executables).
    pub host: Host,
}

// ---- receivers ----------------------------------------------------------------------

/// A source of profiles. It owns itself until shutdown: sockets are bound and BPF loaded
/// in `run`, not in the factory.
#[async_trait]
pub trait Receiver: Send + 'static {
    async fn run(self: Box<Self>, ctx: ReceiverContext) -> Result<(), ComponentError>;
}

pub struct ReceiverContext {
    pub id: ComponentId,
    /// Hands batches to every pipeline that lists this receiver.
    pub output: ReceiverOutput,
    /// Call `ready()` once sockets are bound (or whatever makes the receiver able to take
    /// data); the collector reports itself ready only after every receiver has.
    pub started: Started,
    /// Cancelled when the collector shuts down; `run` should return soon after.
    pub shutdown: CancellationToken,
    pub telemetry: Telemetry,
}

/// A receiver's "I can take data now". A receiver that returns before signalling releases
/// the wait: as started when it returned `Ok`, as failed (the collector is not reported
/// ready) when it returned an error.
#[derive(Clone, Debug)]
pub struct Started(Arc<tokio::sync::watch::Sender<bool>>);

impl Started {
    pub fn new() -> (Self, tokio::sync::watch::Receiver<bool>) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (Started(Arc::new(tx)), rx)
    }

    pub fn ready(&self) {
        self.0.send_replace(true);
    }
}

pub trait ReceiverFactory: Send + Sync + 'static {
    type Config: ComponentConfig;
    /// The type name configs use (`otlp`, `batch`).
    const TYPE_NAME: &'static str;
    /// How settled the component is.
    const STABILITY: Stability;
    fn create(
        &self,
        config: Checked<Self::Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Receiver>, BuildError>;
}

// ---- processors ---------------------------------------------------------------------

/// Why a processor could not handle a batch.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The batch is dropped and counted; the pipeline goes on.
    #[error("{0}")]
    Dropped(String),
}

/// A step inside a pipeline. One instance per (pipeline, id); the pipeline's task calls
/// its processors in order with `&mut self`, so no locks are needed.
#[async_trait]
pub trait Processor: Send + 'static {
    /// Takes one batch; pushes what goes on (none, the same, several) into `out`.
    async fn process(
        &mut self,
        batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError>;

    /// How often `on_tick` runs (the batch processor's timeout), if at all.
    fn tick_interval(&self) -> Option<Duration> {
        None
    }

    async fn on_tick(&mut self, _out: &mut Vec<ProfileBatch>) -> Result<(), ProcessError> {
        Ok(())
    }

    /// Flushes what is held; the pipeline is closing.
    async fn shutdown(&mut self, _out: &mut Vec<ProfileBatch>) -> Result<(), ProcessError> {
        Ok(())
    }

    /// A check run on the receiver's side before data enters the pipeline, so that a
    /// refusal reaches the sender (the memory limiter's).
    fn admission(&self) -> Option<Arc<dyn Admission>> {
        None
    }
}

pub trait ProcessorFactory: Send + Sync + 'static {
    type Config: ComponentConfig;
    /// The type name configs use (`otlp`, `batch`).
    const TYPE_NAME: &'static str;
    /// How settled the component is.
    const STABILITY: Stability;
    fn create(
        &self,
        config: Checked<Self::Config>,
        ctx: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError>;
}

pub struct ProcessorCreateContext {
    pub base: CreateContext,
    pub pipeline: PipelineId,
}

// ---- exporters ----------------------------------------------------------------------

/// The outcome of one export attempt.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Worth trying again (unavailable, throttled, timed out); `retry_after` when the
    /// server said how long to wait.
    #[error("{message}")]
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help (invalid argument, unauthenticated, too large).
    #[error("{message}")]
    Permanent { message: String },
}

impl ExportError {
    pub fn retryable(message: impl Into<String>) -> Self {
        ExportError::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn permanent(message: impl Into<String>) -> Self {
        ExportError::Permanent {
            message: message.into(),
        }
    }
    pub fn is_retryable(&self) -> bool {
        matches!(self, ExportError::Retryable { .. })
    }
    /// How long the server asked to wait before the next attempt, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ExportError::Retryable { retry_after, .. } => *retry_after,
            ExportError::Permanent { .. } => None,
        }
    }
}

/// A destination. `export` is one attempt; queue, retry, backoff and timeout belong to the
/// exporter helper around it.
#[async_trait]
pub trait Exporter: Send + Sync + 'static {
    /// Called once, in the collector's runtime, before the first export: starts what runs
    /// beside exports (a flush timer). An error stops the collector from starting.
    fn start(&self) -> Result<(), ComponentError> {
        Ok(())
    }

    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError>;

    /// Called once after the last export: flush and close.
    async fn shutdown(&self) -> Result<(), ExportError> {
        Ok(())
    }
}

pub trait ExporterFactory: Send + Sync + 'static {
    type Config: ComponentConfig;
    /// The type name configs use (`otlp`, `batch`).
    const TYPE_NAME: &'static str;
    /// How settled the component is.
    const STABILITY: Stability;
    /// The queue, retry and timeout settings in this config (`timeout`, `retry_on_failure`,
    /// `sending_queue` blocks); defaults for exporters that have none.
    fn helper_settings(&self, config: &Self::Config) -> ExporterHelperSettings;
    fn create(
        &self,
        config: Checked<Self::Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError>;
}

// ---- extensions ---------------------------------------------------------------------

#[async_trait]
pub trait Extension: Send + 'static {
    async fn run(self: Box<Self>, ctx: ExtensionContext) -> Result<(), ComponentError>;

    /// A storage extension's directory, for persistent queues.
    fn storage_directory(&self) -> Option<std::path::PathBuf> {
        None
    }
}

pub struct ExtensionContext {
    pub id: ComponentId,
    pub shutdown: CancellationToken,
    pub telemetry: Telemetry,
    /// The collector's health, for the health_check extension.
    pub status: crate::service::Status,
    /// What the service runs, for extensions that show it (zpages).
    pub graph: Arc<ServiceGraph>,
}

/// The running service's shape, as extensions may see it: its pipelines with their
/// components, and its extensions, in config order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceGraph {
    pub pipelines: Vec<crate::service::Pipeline>,
    pub extensions: Vec<ComponentId>,
}

pub trait ExtensionFactory: Send + Sync + 'static {
    type Config: ComponentConfig;
    /// The type name configs use (`otlp`, `batch`).
    const TYPE_NAME: &'static str;
    /// How settled the component is.
    const STABILITY: Stability;
    fn create(
        &self,
        config: Checked<Self::Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Extension>, BuildError>;
}
