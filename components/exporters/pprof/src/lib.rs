//! `pprof`: writes profiles as gzipped pprof files, one per resource, scope and group of
//! profiles (or, with `interval`, one per service and set of sample types per interval),
//! and/or pushes them to a Pyroscope-compatible `/ingest`. Off-CPU profiles always make
//! pprofs of their own, never joined with CPU.
//!
//! Files are written whole (temp file, then linked or renamed to their name) under names
//! that never replace another file. [`Exporter::export`] is one attempt: what an attempt
//! that failed part-way already delivered (a file written, a push accepted) is remembered,
//! so that the helper's retry does not write or push it again.

mod config;
mod files;
mod interval;
mod push;
mod retention;
mod separate;
mod services;
mod template;

use profcol_core::exporterhelper::PeriodicTask;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use profcol_core::component::{
    BuildError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::ExporterHelperSettings;
use profcol_core::pdata::codec::gzip_fast;
use profcol_core::pdata::pprof::{PprofError, ToPprofOptions, batch_to_pprof};
use profcol_core::pdata::types::{KeyValue, Value};
use profcol_core::pdata::{ProfileBatch, semconv};
use profcol_core::telemetry::WireBytes;
use profcol_core::utc;

pub use config::{Config, DEFAULT_FILE_NAME, DEFAULT_MAX_FILES, DEFAULT_MAX_SERVICES};
pub use push::SPY_NAME;
pub use template::TemplateError;

use interval::Window;
use push::{Push, Pusher, labels_from};
use retention::{Kept, Retention};
use services::ServiceCap;
use template::{NameValues, Template};

/// The service of a resource with no `service.name`, as OpenTelemetry names it.
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// Outputs kept for the next flush after a retryable failure at a flush, at most.
const MAX_RETRY_LATER: usize = 64;
/// How long a part-way delivery is remembered for the helper's retry.
const DONE_TTL: Duration = Duration::from_secs(15 * 60);
const MAX_DONE: usize = 4096;

pub struct PprofExporterFactory;

impl ExporterFactory for PprofExporterFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "pprof";
    const STABILITY: Stability = Stability::Alpha;

    fn helper_settings(&self, config: &Config) -> ExporterHelperSettings {
        config.helper_settings()
    }

    fn create(&self, config: Config, ctx: &CreateContext) -> Result<Box<dyn Exporter>, BuildError> {
        let exporter = PprofExporter::new(&config, &ctx.id.to_string(), &ctx.telemetry)
            .map_err(|e| BuildError::new(&ctx.id, e))?;
        Ok(Box::new(exporter))
    }
}

/// One pprof ready to go out.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    pub service: String,
    pub pid: i64,
    /// The default sample type's type.
    pub sample_type: String,
    pub start_nanos: u64,
    pub end_nanos: u64,
    pub labels: std::collections::BTreeMap<String, String>,
    pub gz: Bytes,
    /// The pprof's length before gzip.
    pub plain_len: usize,
    /// Identifies the content, for remembering what a failed attempt delivered.
    pub key: u64,
}

/// Where an output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sink {
    File,
    Push,
}

/// Why an output was not written.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("writing {name} in {dir}: {source}")]
    Io {
        dir: String,
        name: String,
        source: io::Error,
    },
    #[error("the write task failed: {0}")]
    Task(String),
}

impl From<WriteError> for ExportError {
    fn from(e: WriteError) -> Self {
        // A full disk or quota frees up: ENOSPC and EDQUOT are retried.
        let transient = matches!(
            &e,
            WriteError::Io { source, .. }
                if profcol_core::exporterhelper::disk::is_retryable_io(source)
        );
        if transient {
            ExportError::retryable(e.to_string())
        } else {
            ExportError::permanent(e.to_string())
        }
    }
}

/// The service a resource belongs to (semantic-convention default included).
pub(crate) use profcol_core::pdata::service_name;

fn pid(attributes: &[KeyValue]) -> i64 {
    attributes
        .iter()
        .find(|kv| kv.key == semconv::PROCESS_PID)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::IntValue(i)) => Some(*i),
            Some(Value::StringValue(s)) => s.trim().parse().ok(),
            _ => None,
        })
        .unwrap_or(0)
}

/// Translates a batch into the outputs it makes. Groups without samples make none.
pub(crate) fn outputs(
    batch: &ProfileBatch,
    options: &ToPprofOptions,
    now: u64,
) -> Result<Vec<Output>, PprofError> {
    // Off-CPU gets pprofs of its own (scopes split; resources as they were).
    let batch = separate::separated(batch);
    let mut out = Vec::new();
    for o in batch_to_pprof(&batch, options)? {
        if o.sample_count == 0 {
            continue;
        }
        let attributes = batch
            .resource_profiles()
            .get(o.resource_index)
            .and_then(|rp| rp.resource.as_ref())
            .map_or(&[][..], |r| &r.attributes[..]);
        let service = service_name(attributes);
        let sample_type = if o.default_sample_type.is_empty() {
            "unknown".to_owned()
        } else {
            o.default_sample_type.clone()
        };
        let start_nanos = Some(o.time_nanos)
            .filter(|&t| t > 0 && t <= i64::MAX as u64)
            .unwrap_or(now);
        let end_nanos = start_nanos.saturating_add(o.duration_nanos.min(i64::MAX as u64));
        let encoded = o.profile;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        service.hash(&mut hasher);
        encoded.hash(&mut hasher);
        out.push(Output {
            pid: pid(attributes),
            labels: labels_from(attributes),
            sample_type,
            start_nanos,
            end_nanos,
            gz: Bytes::from(gzip_fast(&encoded)),
            plain_len: encoded.len(),
            key: hasher.finish(),
            service,
        });
    }
    Ok(out)
}

/// What attempts that failed part-way delivered, for the retries that follow.
#[derive(Default)]
struct Delivered {
    entries: HashMap<(Sink, u64), Instant>,
}

impl Delivered {
    /// Whether this was delivered by an earlier attempt (and forgets it).
    fn take(&mut self, sink: Sink, key: u64) -> bool {
        self.entries.remove(&(sink, key)).is_some()
    }

    fn remember(&mut self, done: impl IntoIterator<Item = (Sink, u64)>) {
        let now = Instant::now();
        self.entries
            .retain(|_, at| now.saturating_duration_since(*at) < DONE_TTL);
        for d in done {
            if self.entries.len() >= MAX_DONE {
                break;
            }
            self.entries.insert(d, now);
        }
    }
}

/// An output still owed to some sink at the next flush.
struct Owed {
    output: Output,
    file: bool,
    push: bool,
}

struct Inner {
    id: String,
    directory: PathBuf,
    /// `None` when files are not written.
    template: Option<Template>,
    pusher: Option<Pusher>,
    options: ToPprofOptions,
    interval: Duration,
    retention: Retention,
    /// What retention knows of the directory; locked while files are deleted.
    kept: Arc<StdMutex<Kept>>,
    services: StdMutex<ServiceCap>,
    seq: AtomicU64,
    delivered: StdMutex<Delivered>,
    window: StdMutex<Window>,
    retry_later: StdMutex<VecDeque<Owed>>,
    /// Serializes flushes.
    flushing: tokio::sync::Mutex<()>,
    closed: AtomicBool,
}

pub(crate) struct PprofExporter {
    inner: Arc<Inner>,
    flusher: PeriodicTask,
}

impl PprofExporter {
    fn new(
        config: &Config,
        id: &str,
        telemetry: &profcol_core::telemetry::Telemetry,
    ) -> Result<Self, String> {
        let template = if config.write_files {
            Some(Template::parse(&config.file_name).map_err(|e| format!("file_name: {e}"))?)
        } else {
            None
        };
        let pusher = match config.endpoint() {
            Some(endpoint) => Some(Pusher::new(
                endpoint,
                &config.headers,
                config.timeout,
                WireBytes::sent(telemetry, id),
            )?),
            None => None,
        };
        if config.write_files {
            files::prepare(&config.directory)
                .map_err(|e| format!("cannot make {}: {e}", config.directory.display()))?;
        }
        Ok(PprofExporter {
            inner: Arc::new(Inner {
                id: id.to_owned(),
                directory: config.directory.clone(),
                template,
                pusher,
                options: ToPprofOptions {
                    resource_attributes_as_labels: config.resource_labels,
                    ..ToPprofOptions::default()
                },
                interval: config.interval,
                retention: Retention {
                    max_age: config.max_age,
                    max_files: config.max_files,
                },
                kept: Arc::default(),
                services: StdMutex::new(ServiceCap::new(id, config.max_services, telemetry)),
                seq: AtomicU64::new(0),
                delivered: StdMutex::default(),
                window: StdMutex::default(),
                retry_later: StdMutex::default(),
                flushing: tokio::sync::Mutex::new(()),
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
                // Failures are logged and owed to the next flush inside.
                let _ = inner.flush(false).await;
            },
        );
    }

    /// Stops the flusher after the flush it may be doing.
    async fn stop_flusher(&self) {
        self.flusher.stop().await;
    }
}

impl Inner {
    /// Writes one output's file; returns its path.
    async fn write_file(&self, output: &Output) -> Result<PathBuf, ExportError> {
        let Some(template) = &self.template else {
            return Err(ExportError::permanent("files are not written"));
        };
        let name = template.render_output(&NameValues {
            service: &output.service,
            sample_type: &output.sample_type,
            time: &utc::compact(output.start_nanos),
            pid: output.pid,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
        });
        let dir = self.directory.clone();
        let bytes = output.gz.clone();
        let retention = self.retention;
        let kept = self.kept.clone();
        let template = template.clone();
        let id = self.id.clone();
        tokio::task::spawn_blocking(move || {
            let path = files::write_unique(&dir, &name, &bytes).map_err(|source| {
                WriteError::Io {
                    dir: dir.display().to_string(),
                    name,
                    source,
                }
            })?;
            // The file is written whatever retention makes of the others.
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            let now = std::time::SystemTime::now();
            if let Err(e) = retention.apply(&mut kept, &dir, &template, &path, now, Instant::now())
            {
                tracing::warn!(exporter = %id, directory = %dir.display(), error = %e, "could not delete old pprof files");
            }
            Ok(path)
        })
        .await
        .unwrap_or_else(|e| Err(WriteError::Task(e.to_string())))
        .map_err(ExportError::from)
    }

    async fn push(&self, output: &Output) -> Result<(), ExportError> {
        let Some(pusher) = &self.pusher else {
            return Err(ExportError::permanent("no endpoint to push to"));
        };
        pusher
            .push(&Push {
                app: output.service.clone(),
                labels: output.labels.clone(),
                from: output.start_nanos / 1_000_000_000,
                until: output.end_nanos / 1_000_000_000,
                body: output.gz.clone(),
                plain_len: output.plain_len,
            })
            .await
    }

    /// The outputs whose services are within `max_services`.
    fn admitted(&self, mut outputs: Vec<Output>) -> Vec<Output> {
        let now = Instant::now();
        let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        outputs.retain(|o| services.admit(&o.service, now));
        outputs
    }

    /// Sends `output` to the sinks asked for; returns the sinks that failed with why.
    async fn deliver(&self, output: &Output, file: bool, push: bool) -> Vec<(Sink, ExportError)> {
        let mut failed = Vec::new();
        if file {
            match self.write_file(output).await {
                Ok(path) => {
                    tracing::debug!(exporter = %self.id, file = %path.display(), "wrote a pprof file");
                }
                Err(e) => failed.push((Sink::File, e)),
            }
        }
        if push && let Err(e) = self.push(output).await {
            failed.push((Sink::Push, e));
        }
        failed
    }

    /// One export attempt in per-batch mode.
    async fn export_now(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        let options = self.options.clone();
        let outputs =
            tokio::task::spawn_blocking(move || outputs(&batch, &options, utc::now_unix_nanos()))
                .await
                .map_err(|e| ExportError::permanent(format!("the translation task failed: {e}")))?
                .map_err(|e| ExportError::permanent(e.to_string()))?;
        let outputs = self.admitted(outputs);
        let mut done: Vec<(Sink, u64)> = Vec::new();
        let mut errors: Vec<ExportError> = Vec::new();
        for output in &outputs {
            let (mut file, mut push) = (self.template.is_some(), self.pusher.is_some());
            {
                let mut delivered = self
                    .delivered
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if file && delivered.take(Sink::File, output.key) {
                    file = false;
                    done.push((Sink::File, output.key));
                }
                if push && delivered.take(Sink::Push, output.key) {
                    push = false;
                    done.push((Sink::Push, output.key));
                }
            }
            let failed = self.deliver(output, file, push).await;
            for (sink, wanted) in [(Sink::File, file), (Sink::Push, push)] {
                if wanted && !failed.iter().any(|(s, _)| *s == sink) {
                    done.push((sink, output.key));
                }
            }
            errors.extend(failed.into_iter().map(|(_, e)| e));
        }
        if errors.is_empty() {
            return Ok(());
        }
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remember(done);
        Err(combine(errors))
    }

    /// Takes the window, translates it and delivers what it makes, with what earlier
    /// flushes still owe. Retryable failures are owed to the next flush; at the last
    /// flush (`last`), failures are returned.
    async fn flush(self: &Arc<Self>, last: bool) -> Result<(), ExportError> {
        let _serial = self.flushing.lock().await;
        let groups = {
            let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
            if window.is_empty() {
                Vec::new()
            } else {
                window.take()
            }
        };
        let options = self.options.clone();
        let fresh = tokio::task::spawn_blocking(move || {
            let now = utc::now_unix_nanos();
            let mut fresh = Vec::new();
            for (_, batch) in &groups {
                // One batch that cannot become a pprof costs only itself.
                match outputs(batch, &options, now) {
                    Ok(made) => fresh.extend(made),
                    Err(e) => {
                        tracing::warn!(samples = batch.sample_count(), error = %e, "dropping a batch that cannot be written as pprof");
                    }
                }
            }
            fresh
        })
        .await
        .map_err(|e| ExportError::permanent(format!("the translation task failed: {e}")))?;
        let mut owed: Vec<Owed> = self
            .retry_later
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        owed.extend(fresh.into_iter().map(|output| Owed {
            output,
            file: self.template.is_some(),
            push: self.pusher.is_some(),
        }));
        let mut errors = Vec::new();
        let mut again = Vec::new();
        for o in owed {
            let failed = self.deliver(&o.output, o.file, o.push).await;
            let retry = |sink| {
                failed
                    .iter()
                    .any(|(s, e): &(Sink, ExportError)| *s == sink && e.is_retryable())
            };
            let (file, push) = (retry(Sink::File), retry(Sink::Push));
            for (_, e) in &failed {
                tracing::warn!(
                    exporter = %self.id,
                    service = %o.output.service,
                    error = %e,
                    retry = e.is_retryable() && !last,
                    "could not deliver a merged profile"
                );
            }
            errors.extend(failed.into_iter().map(|(_, e)| e));
            if (file || push) && !last {
                again.push(Owed {
                    output: o.output,
                    file,
                    push,
                });
            }
        }
        let mut later = self
            .retry_later
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        later.extend(again);
        while later.len() > MAX_RETRY_LATER {
            if let Some(dropped) = later.pop_front() {
                tracing::warn!(
                    exporter = %self.id,
                    service = %dropped.output.service,
                    "too many profiles waiting to be delivered again; dropped the oldest"
                );
            }
        }
        if errors.is_empty() || !last {
            Ok(())
        } else {
            Err(combine(errors))
        }
    }
}

/// Several failures as one: retryable if any is (after the longest Retry-After).
fn combine(errors: Vec<ExportError>) -> ExportError {
    let retryable = errors.iter().any(ExportError::is_retryable);
    let retry_after = errors
        .iter()
        .filter_map(|e| match e {
            ExportError::Retryable { retry_after, .. } => *retry_after,
            ExportError::Permanent { .. } => None,
        })
        .max();
    let mut messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    messages.dedup();
    let message = messages.join("; ");
    if retryable {
        ExportError::Retryable {
            message,
            retry_after,
        }
    } else {
        ExportError::Permanent { message }
    }
}

#[async_trait]
impl Exporter for PprofExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ExportError::permanent("the pprof exporter is shut down"));
        }
        if self.inner.interval.is_zero() {
            return self.inner.export_now(batch).await;
        }
        self.ensure_flusher();
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let now = Instant::now();
            let mut services = inner
                .services
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            inner
                .window
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .add(&batch, &mut |service| services.admit(service, now));
        })
        .await
        .map_err(|e| ExportError::permanent(format!("the merge task failed: {e}")))
    }

    async fn shutdown(&self) -> Result<(), ExportError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_flusher().await;
        if self.inner.interval.is_zero() {
            return Ok(());
        }
        self.inner.flush(true).await
    }
}

#[cfg(test)]
mod tests;

profcol_core::component_conformance!(exporter: PprofExporterFactory, "pprof", Alpha);
