//! `flamegraph`: sums folded stacks per service, sample type and unit (so on- and off-CPU
//! are always two graphs) and, every `interval` and at shutdown, renders each as an
//! interactive SVG flame graph (inferno) into
//! `<directory>/<service>/<type>-<UTC time>.svg` and `latest-<type>.svg`, and rewrites
//! `<directory>/index.html`, a page linking every flame graph kept.

mod config;
mod folded;
mod services;
mod store;
mod title;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::{
    ExporterHelperSettings, PeriodicTask, QueueSettings, RetrySettings,
};
use profcol_core::pdata::ProfileBatch;
use profcol_core::utc;

pub use config::{Config, DEFAULT_MAX_SERVICES};
pub use folded::UNKNOWN_SERVICE;
pub use store::{INDEX_HTML, MANIFEST};
pub use title::TitleError;

use folded::Accumulator;
use services::ServiceCap;
use store::Store;
use title::Title;

pub struct FlamegraphExporterFactory;

impl ExporterFactory for FlamegraphExporterFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "flamegraph";
    const STABILITY: Stability = Stability::Development;

    /// Exports only add to memory: no queue (batches are taken in order) and nothing to
    /// retry.
    fn helper_settings(&self, _config: &Config) -> ExporterHelperSettings {
        ExporterHelperSettings {
            retry: RetrySettings {
                enabled: false,
                ..RetrySettings::default()
            },
            queue: QueueSettings {
                enabled: false,
                ..QueueSettings::default()
            },
            ..ExporterHelperSettings::default()
        }
    }

    fn create(&self, config: Config, ctx: &CreateContext) -> Result<Box<dyn Exporter>, BuildError> {
        let exporter = FlamegraphExporter::new(&config, &ctx.id.to_string(), &ctx.telemetry)
            .map_err(|e| BuildError::new(&ctx.id, e))?;
        Ok(Box::new(exporter))
    }
}

struct Inner {
    id: String,
    interval: Duration,
    accumulator: StdMutex<Accumulator>,
    /// Locked after `accumulator` when both are.
    services: StdMutex<ServiceCap>,
    /// Held for a whole flush, so flushes never overlap.
    store: Arc<StdMutex<Store>>,
    closed: AtomicBool,
}

pub(crate) struct FlamegraphExporter {
    inner: Arc<Inner>,
    flusher: PeriodicTask,
}

impl FlamegraphExporter {
    fn new(
        config: &Config,
        id: &str,
        telemetry: &profcol_core::telemetry::Telemetry,
    ) -> Result<Self, String> {
        let title = Title::parse(&config.title).map_err(|e| format!("title: {e}"))?;
        if config.interval.is_zero() {
            return Err("interval: must be above 0".to_owned());
        }
        let store = Store::open(&config.directory, config.keep, config.max_age, title)
            .map_err(|e| format!("cannot open {}: {e}", config.directory.display()))?;
        let folders = store
            .service_folders()
            .map_err(|e| format!("cannot read {}: {e}", config.directory.display()))?;
        let services = ServiceCap::new(id, config.max_services, folders, telemetry);
        Ok(FlamegraphExporter {
            inner: Arc::new(Inner {
                id: id.to_owned(),
                interval: config.interval,
                accumulator: StdMutex::new(Accumulator::for_trace(config.trace_filter()?)),
                services: StdMutex::new(services),
                store: Arc::new(StdMutex::new(store)),
                closed: AtomicBool::new(false),
            }),
            flusher: PeriodicTask::new(),
        })
    }

    fn ensure_flusher(&self) {
        self.flusher.ensure_started(
            &self.inner,
            self.inner.interval,
            |inner: Arc<Inner>| async move {
                let has_data = !inner
                    .accumulator
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_empty()
                    || inner.store.try_lock().is_ok_and(|s| s.has_pending());
                if has_data {
                    // Failures are logged inside; graphs a full disk refused are tried
                    // again at the next interval, the rest start afresh.
                    let _ = inner.flush().await;
                }
            },
        );
    }

    async fn stop_flusher(&self) {
        self.flusher.stop().await;
    }
}

impl Inner {
    /// Renders and writes what the interval gathered. Returns the SVGs written (relative
    /// to the directory) or what failed.
    async fn flush(&self) -> Result<Vec<PathBuf>, ExportError> {
        let store = self.store.clone();
        let graphs = self
            .accumulator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (written, errors, folders, kept) = tokio::task::spawn_blocking(move || {
            let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
            if graphs.is_empty() && !store.has_pending() {
                return (Vec::new(), Vec::new(), None, false);
            }
            let (written, errors) = store.write(&graphs);
            (
                written,
                errors,
                store.service_folders().ok(),
                store.has_pending(),
            )
        })
        .await
        .map_err(|e| ExportError::permanent(format!("the render task failed: {e}")))?;
        if let Some(folders) = folders {
            // Folders that went (max_age) free their places.
            let accumulator = self
                .accumulator
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.services
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .refresh(folders, accumulator.services());
        }
        for path in &written {
            tracing::debug!(exporter = %self.id, file = %path.display(), "wrote a flame graph");
        }
        if errors.is_empty() {
            Ok(written)
        } else {
            for e in &errors {
                tracing::warn!(exporter = %self.id, error = %e, "could not write a flame graph");
            }
            // Graphs a full disk refused are kept for the next flush.
            if kept {
                Err(ExportError::retryable(errors.join("; ")))
            } else {
                Err(ExportError::permanent(errors.join("; ")))
            }
        }
    }
}

#[async_trait]
impl Exporter for FlamegraphExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ExportError::permanent(
                "the flamegraph exporter is shut down",
            ));
        }
        self.ensure_flusher();
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut accumulator = inner
                .accumulator
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut services = inner
                .services
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            accumulator.add(&batch, utc::now_unix_nanos(), &mut |service| {
                services.admit(service)
            });
        })
        .await
        .map_err(|e| ExportError::permanent(format!("the fold task failed: {e}")))
    }

    async fn shutdown(&self) -> Result<(), ExportError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_flusher().await;
        self.inner.flush().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(exporter: FlamegraphExporterFactory, "flamegraph", Development);
