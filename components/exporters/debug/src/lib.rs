//! `debug`: writes what reaches it to the collector's own log (tracing, info level, target
//! `profcol::debug`), as otelcol's debug exporter does. `verbosity` picks how much: counts
//! per batch, a line per profile, or every sample with its stack. Sampling keeps a busy
//! pipeline from flooding the log.

mod config;
mod render;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, ComponentId, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::{ExporterHelperSettings, QueueSettings, RetrySettings};
use profcol_core::pdata::ProfileBatch;

pub use config::{Config, Verbosity};
pub use render::render;

/// The tracing target every line is logged under.
pub const TARGET: &str = "profcol::debug";

pub struct DebugExporterFactory;

impl ExporterFactory for DebugExporterFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "debug";
    const STABILITY: Stability = Stability::Development;

    /// Logging cannot fail, so there is nothing to queue or retry.
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
        Ok(Box::new(DebugExporter {
            id: ctx.id.clone(),
            verbosity: config.verbosity,
            sampler: Mutex::new(Sampler::new(
                config.sampling_initial,
                config.sampling_thereafter,
            )),
        }))
    }
}

struct DebugExporter {
    id: ComponentId,
    verbosity: Verbosity,
    sampler: Mutex<Sampler>,
}

#[async_trait]
impl Exporter for DebugExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        // A poisoned lock only means another export panicked mid-count; counting goes on.
        let admitted = self
            .sampler
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(Instant::now());
        if admitted {
            for line in render(&batch, self.verbosity) {
                tracing::info!(target: TARGET, exporter = %self.id, "{line}");
            }
        }
        Ok(())
    }
}

/// otelcol's (zap's) log sampling, per batch: in each one-second window the first
/// `initial` batches are logged, then every `thereafter`th (none when it is 0).
#[derive(Debug)]
struct Sampler {
    initial: u64,
    thereafter: u64,
    window_start: Option<Instant>,
    count: u64,
}

const WINDOW: Duration = Duration::from_secs(1);

impl Sampler {
    fn new(initial: u32, thereafter: u32) -> Self {
        Sampler {
            initial: u64::from(initial),
            thereafter: u64::from(thereafter),
            window_start: None,
            count: 0,
        }
    }

    fn admit(&mut self, now: Instant) -> bool {
        let in_window = self
            .window_start
            .is_some_and(|start| now.saturating_duration_since(start) < WINDOW);
        if !in_window {
            self.window_start = Some(now);
            self.count = 0;
        }
        self.count += 1;
        let n = self.count;
        n <= self.initial
            || (self.thereafter != 0 && (n - self.initial).is_multiple_of(self.thereafter))
    }
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(exporter: DebugExporterFactory, "debug", Development);
