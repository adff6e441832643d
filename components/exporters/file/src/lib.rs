//! `file`: writes every batch to a file, as otelcol's file exporter does: OTLP/JSON
//! `ProfilesData`, one per line, or protobuf `ProfilesData`, each preceded by its length
//! as 4 bytes big-endian. Writes are buffered and flushed every `flush_interval` and at
//! shutdown; with a `rotation` block the file is rotated by size, lumberjack-style.
//!
//! Errors: an IO error that may pass is retryable: `Interrupted`, `WouldBlock`,
//! `TimedOut`, and a full disk (ENOSPC) or quota (EDQUOT), which free up; the failed
//! message is cut off the file, so the retry writes it once. Every other (permission
//! denied, no such directory, a read-only file system...) is permanent.
//!
//! The file and the folders `create_directory` makes are created 0600 and 0700 (less the
//! umask); otelcol's file exporter has no key to change that. A file that exists keeps
//! its mode.

mod backup;
mod config;
mod framing;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::{ExporterHelperSettings, QueueSettings, disk};
use profcol_core::pdata::ProfileBatch;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

pub use config::{Config, Format, Rotation};
pub use framing::{FramingError, read_proto_messages};
use writer::{FileWriter, RotationLimits};

pub struct FileExporterFactory;

impl ExporterFactory for FileExporterFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "file";
    const STABILITY: Stability = Stability::Alpha;

    /// otelcol's file exporter has no helper blocks. No queue, so batches are written in
    /// the order they arrive; no timeout, since a write under way cannot be called back
    /// and a retry after a timeout would write the batch twice.
    fn helper_settings(&self, _config: &Config) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: Duration::ZERO,
            queue: QueueSettings {
                enabled: false,
                ..QueueSettings::default()
            },
            ..ExporterHelperSettings::default()
        }
    }

    fn create(&self, config: Config, ctx: &CreateContext) -> Result<Box<dyn Exporter>, BuildError> {
        let limits = config.rotation.as_ref().map(|r| RotationLimits {
            max_bytes: r.max_bytes(),
            max_backups: r.max_backups as usize,
            max_age_millis: u64::from(r.max_days) * 86_400_000,
        });
        let exporter = FileExporter::open(&config, limits).map_err(|e| {
            BuildError::new(
                &ctx.id,
                format!("cannot open {}: {e}", config.path.display()),
            )
        })?;
        Ok(Box::new(exporter))
    }
}

/// Why a batch was not written.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("writing {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error(transparent)]
    Framing(#[from] FramingError),
    #[error("the file exporter is shut down")]
    Closed,
    #[error("the write task failed: {0}")]
    Task(String),
}

impl From<WriteError> for ExportError {
    fn from(e: WriteError) -> Self {
        let retryable = matches!(
            &e,
            WriteError::Io { source, .. } if disk::is_retryable_io(source)
        );
        if retryable {
            ExportError::retryable(e.to_string())
        } else {
            ExportError::permanent(e.to_string())
        }
    }
}

/// The background flusher: not yet started, running, or stopped for good.
enum Flusher {
    Idle,
    Running(JoinHandle<()>),
    Stopped,
}

pub(crate) struct FileExporter {
    path: PathBuf,
    format: Format,
    flush_interval: Duration,
    /// `None` once shut down. Held across the whole of a write, so writes never
    /// interleave and a cancelled export cannot tear one.
    writer: Arc<Mutex<Option<FileWriter>>>,
    flusher: StdMutex<Flusher>,
}

impl FileExporter {
    fn open(config: &Config, limits: Option<RotationLimits>) -> io::Result<Self> {
        if config.create_directory
            && let Some(dir) = config.path.parent().filter(|d| !d.as_os_str().is_empty())
        {
            disk::create_private_dir_all(dir)?;
        }
        let writer = FileWriter::open(
            &config.path,
            config.append,
            limits,
            config.flush_interval.is_zero(),
        )?;
        Ok(FileExporter {
            path: config.path.clone(),
            format: config.format,
            flush_interval: config.flush_interval,
            writer: Arc::new(Mutex::new(Some(writer))),
            flusher: StdMutex::new(Flusher::Idle),
        })
    }

    /// Starts the flusher on the first export, where a runtime is sure to exist.
    fn ensure_flusher(&self) {
        if self.flush_interval.is_zero() {
            return;
        }
        let mut state = self.flusher.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*state, Flusher::Idle) {
            *state = Flusher::Running(tokio::spawn(flush_loop(
                Arc::downgrade(&self.writer),
                self.flush_interval,
                self.path.clone(),
            )));
        }
    }

    fn stop_flusher(&self) {
        let mut state = self.flusher.lock().unwrap_or_else(PoisonError::into_inner);
        if let Flusher::Running(handle) = std::mem::replace(&mut *state, Flusher::Stopped) {
            handle.abort();
        }
    }
}

impl Drop for FileExporter {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

/// Encodes and frames a batch as the file holds it.
fn encode(format: Format, batch: &ProfileBatch) -> Result<Vec<u8>, FramingError> {
    let message = match format {
        Format::Json => batch.to_json(),
        Format::Proto => batch.encode_to_vec(),
    };
    framing::frame(format, message)
}

fn io_error(path: &Path, source: io::Error) -> WriteError {
    WriteError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[async_trait]
impl Exporter for FileExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        self.ensure_flusher();
        let guard = self.writer.clone().lock_owned().await;
        let (format, path) = (self.format, self.path.clone());
        // The guard moves into the blocking task: if this future is dropped (a timeout),
        // the write still completes whole before the next one starts.
        let result = tokio::task::spawn_blocking(move || {
            let mut guard = guard;
            let writer = guard.as_mut().ok_or(WriteError::Closed)?;
            let framed = encode(format, &batch)?;
            writer.write(&framed).map_err(|e| io_error(&path, e))
        })
        .await
        .unwrap_or_else(|e| Err(WriteError::Task(e.to_string())));
        result.map_err(ExportError::from)
    }

    async fn shutdown(&self) -> Result<(), ExportError> {
        self.stop_flusher();
        let guard = self.writer.clone().lock_owned().await;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = guard;
            match guard.take() {
                Some(writer) => writer.close().map_err(|e| io_error(&path, e)),
                None => Ok(()),
            }
        })
        .await
        .unwrap_or_else(|e| Err(WriteError::Task(e.to_string())))
        .map_err(ExportError::from)
    }
}

/// Writes out the buffer every `every` until the exporter is gone or shut down.
async fn flush_loop(writer: Weak<Mutex<Option<FileWriter>>>, every: Duration, path: PathBuf) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(writer) = writer.upgrade() else {
            return;
        };
        let guard = writer.lock_owned().await;
        let flushed = tokio::task::spawn_blocking(move || {
            let mut guard = guard;
            guard.as_mut().map_or(Ok(()), FileWriter::flush)
        })
        .await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(file = %path.display(), error = %e, "could not write buffered profiles; will try again");
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "the flush task failed");
            }
        }
    }
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(exporter: FileExporterFactory, "file", Alpha, default_errors: ["path"]);
