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

use profcol_core::errors::Failed;
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

pub use config::{Compiled, Config, DEFAULT_FILE_NAME, DEFAULT_MAX_FILES, DEFAULT_MAX_SERVICES};
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

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let (config, compiled) = config.into_parts();
        let exporter = PprofExporter::new(&config, compiled, &ctx.id.to_string(), &ctx.telemetry)
            .map_err(|e| BuildError::failed(&ctx.id, e))?;
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
        compiled: Compiled,
        id: &str,
        telemetry: &profcol_core::telemetry::Telemetry,
    ) -> Result<Self, Failed> {
        let template = compiled.file_name;
        let pusher = match compiled.push {
            Some(target) => Some(
                Pusher::new(target, config.timeout, WireBytes::sent(telemetry, id))
                    .map_err(|e| Failed::new("cannot set up the push client", e))?,
            ),
            None => None,
        };
        if config.write_files {
            files::prepare(&config.directory).map_err(|e| {
                Failed::new(format!("cannot make {}", config.directory.display()), e)
            })?;
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

    fn start_flusher(&self) {
        self.flusher.start(
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
    fn start(&self) -> Result<(), profcol_core::component::ComponentError> {
        self.start_flusher();
        Ok(())
    }

    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ExportError::permanent("the pprof exporter is shut down"));
        }
        if self.inner.interval.is_zero() {
            return self.inner.export_now(batch).await;
        }
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

profcol_core::component_conformance!(exporter: PprofExporterFactory, "pprof", Alpha);

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::convert::Infallible;
    use std::io::Read;
    use std::net::SocketAddr;
    use std::path::{Path, PathBuf};

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use profcol_core::component::{ComponentId, CreateContext, Exporter, ExporterFactory};
    use profcol_core::config::{ConfigError, parse_typed, parse_yaml};
    use profcol_core::exporterhelper::{QueueSettings, RetrySettings};
    use profcol_core::pdata::ProfileBatch;
    use profcol_core::pdata::codec::plain_pprof;
    use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
    use profcol_core::pdata::testing::{WireDictionaryBuilder, batch_from_wire};
    use profcol_core::pdata::types as wire;
    use profcol_core::pdata::types::{AnyValue, KeyValue, Value};
    use profcol_core::telemetry::Telemetry;
    use profcol_core::testkit::config_errors;
    use profcol_proto::pprof as pp;
    use prost::Message;
    use tokio::net::TcpListener;

    use super::*;

    // ---- helpers ------------------------------------------------------------------------

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(yaml: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("x", yaml).expect("yaml"))
    }

    fn scratch(name: &str) -> PathBuf {
        profcol_core::testkit::scratch_dir(&format!("pprof-exporter-{name}"))
    }

    fn fixture_dir() -> PathBuf {
        PathBuf::from(format!(
            "{}/../../../testdata/pprof",
            env!("CARGO_MANIFEST_DIR")
        ))
    }

    fn fixture_names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
            .expect("testdata/pprof")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".pb.gz"))
            .collect();
        names.sort();
        assert!(names.len() >= 2, "{names:?}");
        names
    }

    fn fixture(name: &str) -> pp::Profile {
        let bytes = std::fs::read(fixture_dir().join(name)).expect("fixture");
        let plain = plain_pprof(&bytes, 1 << 26).expect("decodes");
        <pp::Profile as prost::Message>::decode(plain.as_slice()).expect("pprof")
    }

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            key_strindex: 0,
        }
    }

    fn batch_of(p: &pp::Profile, service: &str, pid: i64) -> ProfileBatch {
        pprof_to_batch(
            &prost::Message::encode_to_vec(p),
            ToOtlpOptions {
                resource_attributes: vec![
                    kv("service.name", Value::StringValue(service.into())),
                    kv("process.pid", Value::IntValue(pid)),
                    kv("host.name", Value::StringValue("node-1".into())),
                ],
                ..Default::default()
            },
        )
        .expect("translates")
    }

    fn go_cpu(service: &str) -> ProfileBatch {
        batch_of(&fixture("go-cpu.pb.gz"), service, 42)
    }

    fn config(dir: &Path) -> Config {
        Config {
            directory: dir.to_path_buf(),
            ..Config::default()
        }
    }

    fn create(config: Config) -> Box<dyn Exporter> {
        create_with(config, &Telemetry::new())
    }

    fn create_with(config: Config, telemetry: &Telemetry) -> Box<dyn Exporter> {
        let config = profcol_core::config::Checked::check(config)
            .unwrap_or_else(|errors| panic!("not a valid config: {errors:?}"));
        let ctx = CreateContext {
            id: ComponentId::new("pprof", None),
            telemetry: telemetry.clone(),
            host: Default::default(),
        };
        PprofExporterFactory.create(config, &ctx).expect("create")
    }

    /// File names in `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .expect("gzip");
        out
    }

    /// A file as the exporter wrote it: gzip (checked by its magic), then pprof.
    fn read_pprof(path: &Path) -> pp::Profile {
        let bytes = std::fs::read(path).expect("read");
        assert_eq!(bytes.get(..2), Some(&[0x1f, 0x8b][..]), "gzipped");
        pp::Profile::decode(&gunzip(&bytes)[..]).expect("pprof")
    }

    fn text(p: &pp::Profile, i: i64) -> String {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .cloned()
            .unwrap_or_default()
    }

    fn sample_types(p: &pp::Profile) -> Vec<(String, String)> {
        p.sample_type
            .iter()
            .map(|vt| (text(p, vt.r#type), text(p, vt.unit)))
            .collect()
    }

    /// Sum of each value column.
    fn totals(p: &pp::Profile) -> Vec<i64> {
        (0..p.sample_type.len())
            .map(|c| {
                p.sample
                    .iter()
                    .map(|s| s.value.get(c).copied().unwrap_or(0))
                    .sum()
            })
            .collect()
    }

    /// Names of the functions on the samples' stacks.
    fn function_names(p: &pp::Profile) -> BTreeSet<String> {
        let locations: BTreeMap<u64, &pp::Location> =
            p.location.iter().map(|l| (l.id, l)).collect();
        let functions: BTreeMap<u64, &pp::Function> =
            p.function.iter().map(|f| (f.id, f)).collect();
        let mut names = BTreeSet::new();
        for s in &p.sample {
            for id in &s.location_id {
                for line in locations.get(id).map_or(&[][..], |l| &l.line[..]) {
                    if let Some(f) = functions.get(&line.function_id) {
                        names.insert(text(p, f.name));
                    }
                }
            }
        }
        names
    }

    fn default_type(p: &pp::Profile) -> String {
        if p.default_sample_type != 0 {
            text(p, p.default_sample_type)
        } else {
            p.sample_type
                .last()
                .map(|vt| text(p, vt.r#type))
                .unwrap_or_default()
        }
    }

    // ---- a Pyroscope stand-in -----------------------------------------------------------

    #[derive(Debug, Clone)]
    struct Received {
        path: String,
        query: BTreeMap<String, String>,
        headers: http::HeaderMap,
        body: Vec<u8>,
    }

    /// The status and headers the stand-in answers with.
    type Reply = (u16, Vec<(&'static str, String)>);

    #[derive(Clone)]
    struct Ingest {
        addr: SocketAddr,
        received: Arc<Mutex<Vec<Received>>>,
        reply: Arc<Mutex<Reply>>,
    }

    impl Ingest {
        fn url(&self) -> String {
            format!("http://127.0.0.1:{}", self.addr.port())
        }
        fn reply(&self, status: u16, headers: Vec<(&'static str, String)>) {
            *self.reply.lock().expect("lock") = (status, headers);
        }
        fn take(&self) -> Vec<Received> {
            std::mem::take(&mut *self.received.lock().expect("lock"))
        }
    }

    fn percent_decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%'
                && let Some(hex) = s.get(i + 1..i + 3)
                && let Ok(b) = u8::from_str_radix(hex, 16)
            {
                out.push(b);
                i += 3;
            } else {
                out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
                i += 1;
            }
        }
        String::from_utf8(out).expect("utf8")
    }

    async fn ingest_server() -> Ingest {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server = Ingest {
            addr: listener.local_addr().expect("addr"),
            received: Default::default(),
            reply: Arc::new(Mutex::new((200, Vec::new()))),
        };
        let shared = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<Incoming>| {
                        let shared = shared.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.expect("body").to_bytes().to_vec();
                            let query = parts
                                .uri
                                .query()
                                .unwrap_or("")
                                .split('&')
                                .filter_map(|kv| kv.split_once('='))
                                .map(|(k, v)| (k.to_owned(), percent_decode(v)))
                                .collect();
                            shared.received.lock().expect("lock").push(Received {
                                path: parts.uri.path().to_owned(),
                                query,
                                headers: parts.headers,
                                body,
                            });
                            let (status, headers) = shared.reply.lock().expect("lock").clone();
                            let mut response = http::Response::builder().status(status);
                            for (k, v) in headers {
                                response = response.header(k, v);
                            }
                            let text = if status >= 300 { "nope" } else { "" };
                            Ok::<_, Infallible>(
                                response
                                    .body(Full::new(Bytes::from_static(text.as_bytes())))
                                    .expect("response"),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        server
    }

    // ---- config -------------------------------------------------------------------------

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                directory: PathBuf::from("/var/lib/profcol/pprof"),
                file_name: "{service}-{pid}-{type}-{time}-{seq}.pb.gz".into(),
                interval: Duration::from_secs(60),
                endpoint: Some("http://pyroscope:4040".into()),
                write_files: true,
                headers: [("authorization".to_owned(), "Bearer abc".to_owned())]
                    .into_iter()
                    .collect(),
                resource_labels: true,
                max_age: Duration::from_secs(7 * 24 * 3600),
                max_files: 500,
                max_services: 50,
                timeout: Duration::from_secs(10),
                retry_on_failure: RetrySettings {
                    max_elapsed_time: Duration::from_secs(120),
                    ..RetrySettings::default()
                },
                sending_queue: QueueSettings {
                    queue_size: 100,
                    ..QueueSettings::default()
                },
                offline: Default::default(),
            }
        );
        assert!(config_errors(&c).is_empty(), "{:?}", config_errors(&c));
        let s = PprofExporterFactory.helper_settings(&c);
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.retry.max_elapsed_time, Duration::from_secs(120));
        assert_eq!(s.queue.queue_size, 100);
    }

    #[test]
    fn defaults() {
        let c: Config = parse_typed(&profcol_core::config::Value::Null).expect("null");
        assert_eq!(c, Config::default());
        assert_eq!(c.directory, PathBuf::from("./profiles"));
        assert_eq!(c.file_name, "{service}-{type}-{time}.pb.gz");
        assert!(c.interval.is_zero() && c.write_files && !c.resource_labels);
        assert_eq!(
            (c.max_age, c.max_files, c.max_services),
            (Duration::ZERO, 10_000, 1000)
        );
        assert_eq!(c.endpoint(), None);
        assert!(config_errors(&c).is_empty());
        assert_eq!(PprofExporterFactory::TYPE_NAME, "pprof");
        assert_eq!(PprofExporterFactory::STABILITY, Stability::Alpha);
    }

    #[test]
    fn unknown_placeholder_is_a_validation_error_naming_it() {
        let c = parse("file_name: \"{service}-{host}.pb.gz\"\n").expect("parses");
        let errors: Vec<String> = config_errors(&c).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "file_name: unknown placeholder {host} (known: {service}, {type}, {time}, {pid}, {seq})"
            ]
        );
        let c = parse("file_name: \"../{service}.pb.gz\"\n").expect("parses");
        assert_eq!(config_errors(&c)[0].path, "file_name");
    }

    #[test]
    fn validation_names_each_bad_key() {
        let c = parse(
        "write_files: false\nendpoint: pyroscope:4040\nheaders:\n  content-type: x\n  \"bad name\": y\nretry_on_failure:\n  multiplier: 0.5\n",
    )
    .expect("parses");
        let paths: Vec<String> = config_errors(&c).into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "endpoint",
                "headers::bad name",
                "headers::content-type",
                "retry_on_failure::multiplier"
            ]
        );
        let c = parse("write_files: false\n").expect("parses");
        assert_eq!(config_errors(&c)[0].path, "write_files");
        // With files off, the template is not checked.
        let c = parse("write_files: false\nendpoint: http://x:4040\nfile_name: \"{nope}\"\n")
            .expect("parses");
        assert!(config_errors(&c).is_empty());
    }

    // ---- files --------------------------------------------------------------------------

    #[tokio::test]
    async fn every_fixture_round_trips_through_a_file_named_by_the_template() {
        for name in fixture_names() {
            let dir = scratch("fixtures");
            let original = fixture(&name);
            let service = format!("svc-{}", name.trim_end_matches(".pb.gz"));
            let exporter = create(config(&dir));
            exporter
                .export(batch_of(&original, &service, 7))
                .await
                .expect("export");
            exporter.shutdown().await.expect("shutdown");
            let names = names_in(&dir);
            assert_eq!(names.len(), 1, "{name}: {names:?}");
            let start = u64::try_from(original.time_nanos).expect("time");
            assert_eq!(
                names[0],
                format!(
                    "{service}-{}-{}.pb.gz",
                    default_type(&original),
                    utc::compact(start)
                ),
                "{name}"
            );
            let written = read_pprof(&dir.join(&names[0]));
            assert_eq!(sample_types(&written), sample_types(&original), "{name}");
            assert_eq!(totals(&written), totals(&original), "{name}");
            assert_eq!(
                function_names(&written),
                function_names(&original),
                "{name}"
            );
            assert_eq!(default_type(&written), default_type(&original), "{name}");
            assert_eq!(written.time_nanos, original.time_nanos, "{name}");
            // No resource labels by default: the file is one resource's already.
            assert!(
                written
                    .sample
                    .iter()
                    .flat_map(|s| &s.label)
                    .all(|l| text(&written, l.key) != "service.name"),
                "{name}"
            );
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[tokio::test]
    async fn resource_labels_puts_resource_attributes_on_samples() {
        let dir = scratch("labels");
        let exporter = create(Config {
            resource_labels: true,
            ..config(&dir)
        });
        exporter.export(go_cpu("cart")).await.expect("export");
        let names = names_in(&dir);
        let written = read_pprof(&dir.join(&names[0]));
        let labelled = written.sample.iter().all(|s| {
            s.label
                .iter()
                .any(|l| text(&written, l.key) == "service.name" && text(&written, l.str) == "cart")
        });
        assert!(labelled);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn pid_and_seq_placeholders_and_names_never_collide() {
        let dir = scratch("names");
        let exporter = create(Config {
            file_name: "{service}-{pid}-{seq}.pb.gz".into(),
            ..config(&dir)
        });
        for _ in 0..3 {
            exporter.export(go_cpu("cart")).await.expect("export");
        }
        assert_eq!(
            names_in(&dir),
            ["cart-42-0.pb.gz", "cart-42-1.pb.gz", "cart-42-2.pb.gz"]
        );
        // A template with nothing that changes: suffixes keep every file.
        let dir2 = scratch("fixed");
        let exporter = create(Config {
            file_name: "fixed.pb.gz".into(),
            ..config(&dir2)
        });
        for _ in 0..3 {
            exporter.export(go_cpu("cart")).await.expect("export");
        }
        assert_eq!(
            names_in(&dir2),
            ["fixed-1.pb.gz", "fixed-2.pb.gz", "fixed.pb.gz"]
        );
        // A later exporter (a restart) does not replace what is there.
        let exporter = create(Config {
            file_name: "{service}-{pid}-{seq}.pb.gz".into(),
            ..config(&dir)
        });
        exporter.export(go_cpu("cart")).await.expect("export");
        assert_eq!(names_in(&dir).len(), 4);
        assert!(names_in(&dir).contains(&"cart-42-0-1.pb.gz".to_owned()));
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
    }

    #[tokio::test]
    async fn hostile_service_names_stay_in_the_directory() {
        let dir = scratch("hostile");
        let exporter = create(config(&dir));
        exporter
            .export(go_cpu("../../etc/cron.d/x"))
            .await
            .expect("export");
        let names = names_in(&dir);
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].starts_with("____etc_cron.d_x-cpu-"), "{names:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_leave_no_temp_files() {
        let dir = scratch("atomic");
        let exporter: Arc<dyn Exporter> = Arc::from(create(Config {
            file_name: "same.pb.gz".into(),
            ..config(&dir)
        }));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let e = exporter.clone();
                tokio::spawn(async move { e.export(go_cpu("cart")).await })
            })
            .collect();
        for t in tasks {
            t.await.expect("task").expect("export");
        }
        let names = names_in(&dir);
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(
            names
                .iter()
                .all(|n| !n.starts_with('.') && !n.ends_with(".tmp"))
        );
        for n in &names {
            // Every file is whole.
            assert_eq!(
                totals(&read_pprof(&dir.join(n))),
                totals(&fixture("go-cpu.pb.gz"))
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn interval_merges_a_service_into_one_file_with_summed_totals() {
        let dir = scratch("merge");
        let exporter = create(Config {
            interval: Duration::from_secs(3600),
            ..config(&dir)
        });
        let original = fixture("go-cpu.pb.gz");
        let mut later = original.clone();
        later.time_nanos += 10_000_000_000;
        exporter
            .export(batch_of(&original, "cart", 1))
            .await
            .expect("export");
        // Another process of the same service, ten seconds on.
        exporter
            .export(batch_of(&later, "cart", 2))
            .await
            .expect("export");
        assert!(names_in(&dir).is_empty(), "nothing before the flush");
        exporter.shutdown().await.expect("shutdown flushes");
        let names = names_in(&dir);
        assert_eq!(names.len(), 1, "{names:?}");
        let written = read_pprof(&dir.join(&names[0]));
        assert_eq!(sample_types(&written), sample_types(&original));
        let want: Vec<i64> = totals(&original).iter().map(|t| t * 2).collect();
        assert_eq!(totals(&written), want);
        assert_eq!(function_names(&written), function_names(&original));
        // The file spans both profiles.
        assert_eq!(written.time_nanos, original.time_nanos);
        assert_eq!(
            written.duration_nanos,
            original.duration_nanos + 10_000_000_000
        );
        // pid differs between the two: it is left out ({pid} is 0 then).
        assert!(names[0].starts_with("cart-cpu-"), "{names:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn interval_keeps_services_and_sample_types_apart() {
        let dir = scratch("services");
        let exporter = create(Config {
            interval: Duration::from_secs(3600),
            ..config(&dir)
        });
        exporter.export(go_cpu("cart")).await.expect("export");
        exporter.export(go_cpu("checkout")).await.expect("export");
        exporter.export(go_cpu("cart")).await.expect("export");
        exporter
            .export(batch_of(&fixture("go-heap.pb.gz"), "cart", 42))
            .await
            .expect("export");
        exporter.shutdown().await.expect("shutdown");
        let names = names_in(&dir);
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(
            names.iter().filter(|n| n.starts_with("cart-cpu-")).count(),
            1
        );
        assert_eq!(
            names
                .iter()
                .filter(|n| n.starts_with("cart-inuse_space-"))
                .count(),
            1
        );
        assert_eq!(
            names
                .iter()
                .filter(|n| n.starts_with("checkout-cpu-"))
                .count(),
            1
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn two_services_make_two_files() {
        let dir = scratch("two");
        let exporter = create(config(&dir));
        let mut a = go_cpu("cart");
        // One batch holding both services.
        let b = go_cpu("checkout");
        let merged = profcol_core::pdata::merge([&a, &b]);
        a = merged;
        exporter.export(a).await.expect("export");
        let names = names_in(&dir);
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names[0].starts_with("cart-cpu-") && names[1].starts_with("checkout-cpu-"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn the_ticker_flushes_without_waiting_for_shutdown() {
        let dir = scratch("tick");
        let exporter = create(Config {
            interval: Duration::from_millis(50),
            ..config(&dir)
        });
        exporter.start().expect("start");
        exporter.export(go_cpu("cart")).await.expect("export");
        let mut waited = Duration::ZERO;
        while names_in(&dir).is_empty() && waited < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += Duration::from_millis(20);
        }
        assert_eq!(names_in(&dir).len(), 1);
        exporter.shutdown().await.expect("shutdown");
        assert_eq!(names_in(&dir).len(), 1, "nothing more to write");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn export_after_shutdown_is_refused() {
        let dir = scratch("closed");
        let exporter = create(config(&dir));
        exporter.shutdown().await.expect("shutdown");
        exporter.shutdown().await.expect("twice is harmless");
        let e = exporter.export(go_cpu("cart")).await.expect_err("closed");
        assert!(!e.is_retryable());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn create_reports_a_directory_it_cannot_make() {
        let dir = scratch("create");
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").expect("write");
        let ctx = CreateContext {
            id: ComponentId::new("pprof", Some("out")),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let e = PprofExporterFactory
            .create(
                profcol_core::config::Checked::check(config(&file.join("sub")))
                    .expect("a valid config"),
                &ctx,
            )
            .err()
            .expect("not a directory");
        assert!(e.to_string().starts_with("pprof/out: cannot make "), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- on- and off-CPU ----------------------------------------------------------------

    const T0: u64 = 1_700_000_000_000_000_000;
    /// 19 Hz, the `profiling` receiver's default.
    const CPU_PERIOD: i64 = 1_000_000_000 / 19;
    /// What each off-CPU batch below is off CPU for, in all.
    const OFF_CPU_NANOS: i64 = 1_500_000 + 2_500_000 + 3_000_000;

    fn wire_function(b: &mut WireDictionaryBuilder, name: &str) -> i32 {
        let name = b.string(name);
        let function = b.function(wire::Function {
            name_strindex: name,
            ..Default::default()
        });
        let location = b.location(wire::Location {
            lines: vec![wire::Line {
                function_index: function,
                line: 1,
                column: 0,
            }],
            ..Default::default()
        });
        b.stack(&[location])
    }

    fn value_type(b: &mut WireDictionaryBuilder, t: &str, unit: &str) -> Option<wire::ValueType> {
        Some(wire::ValueType {
            type_strindex: b.string(t),
            unit_strindex: b.string(unit),
        })
    }

    /// One process of `service` as the `profiling` receiver emits it: a CPU profile (3
    /// samples, timestamps only, in `compute`) and an off-CPU one (a value per timestamp,
    /// [`OFF_CPU_NANOS`] in all, in `read`), with no period type. `cpu_shaped`: the off-CPU
    /// profile has the CPU profile's period type and period, so that pdata's pprof groups
    /// would put both in one pprof.
    fn cpu_and_off_cpu(service: &str, pid: i64, cpu_shaped: bool) -> ProfileBatch {
        let mut b = WireDictionaryBuilder::new();
        let compute = wire_function(&mut b, "compute");
        let read = wire_function(&mut b, "read");
        let cpu = wire::Profile {
            sample_type: value_type(&mut b, "samples", "count"),
            period_type: value_type(&mut b, "cpu", "nanoseconds"),
            period: CPU_PERIOD,
            time_unix_nano: T0,
            duration_nano: 10_000_000_000,
            samples: vec![wire::Sample {
                stack_index: compute,
                timestamps_unix_nano: vec![T0 + 1, T0 + 2, T0 + 3],
                ..Default::default()
            }],
            ..Default::default()
        };
        let off_cpu = wire::Profile {
            sample_type: value_type(&mut b, "off_cpu", "nanoseconds"),
            period_type: if cpu_shaped { cpu.period_type } else { None },
            period: if cpu_shaped { CPU_PERIOD } else { 0 },
            samples: vec![
                wire::Sample {
                    stack_index: read,
                    values: vec![1_500_000, 2_500_000],
                    timestamps_unix_nano: vec![T0 + 5, T0 + 6],
                    ..Default::default()
                },
                wire::Sample {
                    stack_index: compute,
                    values: vec![3_000_000],
                    timestamps_unix_nano: vec![T0 + 7],
                    ..Default::default()
                },
            ],
            ..cpu.clone()
        };
        batch_from_wire(
            b.finish(),
            vec![wire::ResourceProfiles {
                resource: Some(wire::Resource {
                    attributes: vec![
                        kv("service.name", Value::StringValue(service.into())),
                        kv("process.pid", Value::IntValue(pid)),
                    ],
                    ..Default::default()
                }),
                scope_profiles: vec![wire::ScopeProfiles {
                    profiles: vec![cpu, off_cpu],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    /// The two files of `dir` (CPU, then off-CPU, by name) checked for their sample types,
    /// totals (`times` batches' worth) and functions.
    fn check_cpu_and_off_cpu_files(dir: &Path, cpu: &str, off_cpu: &str, times: i64) {
        let names = names_in(dir);
        assert_eq!(names, [off_cpu, cpu], "one file per sample type");
        let on = read_pprof(&dir.join(cpu));
        assert_eq!(sample_types(&on), [("samples".into(), "count".into())]);
        assert_eq!(totals(&on), [3 * times]);
        assert_eq!(function_names(&on), BTreeSet::from(["compute".to_owned()]));
        let off = read_pprof(&dir.join(off_cpu));
        assert_eq!(
            sample_types(&off),
            [("off_cpu".into(), "nanoseconds".into())]
        );
        // Widths are the off-CPU nanoseconds: the sum of each sample's values.
        assert_eq!(totals(&off), [OFF_CPU_NANOS * times]);
        assert_eq!(
            function_names(&off),
            BTreeSet::from(["compute".to_owned(), "read".to_owned()])
        );
    }

    #[tokio::test]
    async fn cpu_and_off_cpu_of_one_process_make_a_file_per_sample_type() {
        for cpu_shaped in [false, true] {
            let dir = scratch("off-cpu");
            let batch = cpu_and_off_cpu("app", 7, cpu_shaped);
            // Shaped like CPU, pdata alone would make one pprof of both.
            let profiles = &batch.resource_profiles()[0].scope_profiles[0].profiles;
            let groups = profcol_core::pdata::pprof::pprof_groups(batch.dictionary(), profiles);
            assert_eq!(groups.len(), if cpu_shaped { 1 } else { 2 });
            let exporter = create(config(&dir));
            exporter.export(batch).await.expect("export");
            exporter.shutdown().await.expect("shutdown");
            let time = utc::compact(T0);
            check_cpu_and_off_cpu_files(
                &dir,
                &format!("app-samples-{time}.pb.gz"),
                &format!("app-off_cpu-{time}.pb.gz"),
                1,
            );
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[tokio::test]
    async fn interval_merges_each_sample_type_of_a_service_into_its_own_file() {
        let dir = scratch("off-cpu-interval");
        let exporter = create(Config {
            interval: Duration::from_secs(3600),
            ..config(&dir)
        });
        // Two processes of one service; one with off-CPU shaped like its CPU profile.
        for (pid, cpu_shaped) in [(1, false), (2, true)] {
            exporter
                .export(cpu_and_off_cpu("app", pid, cpu_shaped))
                .await
                .expect("export");
        }
        exporter.shutdown().await.expect("shutdown");
        let time = utc::compact(T0);
        check_cpu_and_off_cpu_files(
            &dir,
            &format!("app-samples-{time}.pb.gz"),
            &format!("app-off_cpu-{time}.pb.gz"),
            2,
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_template_without_type_names_off_cpu_files_by_a_suffix() {
        let dir = scratch("off-cpu-names");
        let exporter = create(Config {
            file_name: "{service}-{time}.pb.gz".into(),
            max_files: 2,
            ..config(&dir)
        });
        exporter
            .export(cpu_and_off_cpu("app", 7, false))
            .await
            .expect("export");
        let time = utc::compact(T0);
        check_cpu_and_off_cpu_files(
            &dir,
            &format!("app-{time}.pb.gz"),
            &format!("app-{time}-off_cpu.pb.gz"),
            1,
        );
        // Retention counts off-CPU files as its own: two more files leave the newest two.
        exporter
            .export(cpu_and_off_cpu("app", 7, false))
            .await
            .expect("export");
        assert_eq!(
            names_in(&dir),
            [
                format!("app-{time}-1.pb.gz"),
                format!("app-{time}-off_cpu-1.pb.gz")
            ]
        );
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- push ---------------------------------------------------------------------------

    fn push_config(dir: &Path, server: &Ingest) -> Config {
        Config {
            endpoint: Some(server.url()),
            headers: [("x-scope-orgid".to_owned(), "tenant-1".to_owned())]
                .into_iter()
                .collect(),
            ..config(dir)
        }
    }

    #[tokio::test]
    async fn push_sends_the_name_labels_window_and_a_gzipped_pprof() {
        let dir = scratch("push");
        let server = ingest_server().await;
        let telemetry = Telemetry::new();
        let exporter = create_with(
            Config {
                write_files: false,
                ..push_config(&dir, &server)
            },
            &telemetry,
        );
        exporter.export(go_cpu("cart")).await.expect("export");
        let got = server.take();
        assert_eq!(got.len(), 1);
        let r = &got[0];
        // What went on the wire is the body Pyroscope got; before gzip, the pprof itself.
        let counted = |name| telemetry.value(name, &[("exporter", "pprof")]);
        assert_eq!(
            counted("otelcol_exporter_sent_wire_bytes_total"),
            i64::try_from(r.body.len()).ok()
        );
        assert_eq!(
            counted("otelcol_exporter_sent_uncompressed_bytes_total"),
            i64::try_from(gunzip(&r.body).len()).ok()
        );
        assert_eq!(r.path, "/ingest");
        assert_eq!(
            r.query.get("name").map(String::as_str),
            Some("cart{host_name=node-1,process_pid=42}")
        );
        let original = fixture("go-cpu.pb.gz");
        let from = u64::try_from(original.time_nanos).expect("time") / 1_000_000_000;
        let until = u64::try_from(original.time_nanos + original.duration_nanos).expect("time")
            / 1_000_000_000;
        assert_eq!(r.query.get("from"), Some(&from.to_string()));
        assert_eq!(r.query.get("until"), Some(&until.to_string()));
        assert_eq!(r.query.get("format").map(String::as_str), Some("pprof"));
        assert_eq!(r.query.get("spyName").map(String::as_str), Some("profcol"));
        assert_eq!(
            r.headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/octet-stream")
        );
        assert_eq!(
            r.headers.get("x-scope-orgid").and_then(|v| v.to_str().ok()),
            Some("tenant-1")
        );
        assert_eq!(r.body.get(..2), Some(&[0x1f, 0x8b][..]), "gzipped");
        let pushed = pp::Profile::decode(&gunzip(&r.body)[..]).expect("pprof");
        assert_eq!(sample_types(&pushed), sample_types(&original));
        assert_eq!(totals(&pushed), totals(&original));
        // No files when write_files is false.
        assert!(names_in(&dir).is_empty());
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn unavailable_is_retryable_after_retry_after_and_bad_request_permanent() {
        let dir = scratch("status");
        let server = ingest_server().await;
        let exporter = create(Config {
            write_files: false,
            ..push_config(&dir, &server)
        });
        server.reply(503, vec![("retry-after", "7".into())]);
        let e = exporter.export(go_cpu("cart")).await.expect_err("503");
        assert!(e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert!(
            e.to_string().starts_with("HTTP 503 Service Unavailable"),
            "{e}"
        );
        server.reply(429, Vec::new());
        assert!(
            exporter
                .export(go_cpu("cart"))
                .await
                .expect_err("429")
                .is_retryable()
        );
        server.reply(400, Vec::new());
        let e = exporter.export(go_cpu("cart")).await.expect_err("400");
        assert!(!e.is_retryable());
        assert_eq!(e.to_string(), "HTTP 400 Bad Request: nope");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn connection_refused_is_retryable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let dir = scratch("refused");
        let exporter = create(Config {
            write_files: false,
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            ..config(&dir)
        });
        let e = exporter.export(go_cpu("cart")).await.expect_err("refused");
        assert!(e.is_retryable(), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The helper retries a whole batch; what the failed attempt delivered is not delivered
    /// again.
    #[tokio::test]
    async fn a_retry_does_not_write_or_push_twice() {
        let dir = scratch("retry");
        let server = ingest_server().await;
        let exporter = create(push_config(&dir, &server));
        let batch = go_cpu("cart");
        server.reply(503, Vec::new());
        exporter
            .export(batch.clone())
            .await
            .expect_err("push fails");
        assert_eq!(names_in(&dir).len(), 1, "the file was written");
        server.reply(200, Vec::new());
        exporter.export(batch.clone()).await.expect("retry");
        assert_eq!(names_in(&dir).len(), 1, "and not written again");
        assert_eq!(server.take().len(), 2, "the push was tried again");
        // A new batch (not a retry) is written and pushed as usual.
        exporter.export(batch).await.expect("export");
        assert_eq!(names_in(&dir).len(), 2);
        assert_eq!(server.take().len(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn interval_push_failures_are_reported_at_shutdown() {
        let dir = scratch("interval-push");
        let server = ingest_server().await;
        let exporter = create(Config {
            interval: Duration::from_secs(3600),
            ..push_config(&dir, &server)
        });
        exporter.export(go_cpu("cart")).await.expect("export");
        exporter.export(go_cpu("cart")).await.expect("export");
        server.reply(503, Vec::new());
        let e = exporter.shutdown().await.expect_err("push failed");
        assert!(e.is_retryable());
        assert_eq!(server.take().len(), 1, "one merged push");
        assert_eq!(names_in(&dir).len(), 1, "the file is written regardless");
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- retention and the service cap ----------------------------------------------------

    #[tokio::test]
    async fn max_files_keeps_the_newest_of_its_own_files() {
        let dir = scratch("max-files");
        std::fs::write(dir.join("README.txt"), b"not ours").expect("write");
        std::fs::create_dir_all(dir.join("flamegraphs")).expect("dir");
        let exporter = create(Config {
            max_files: 3,
            file_name: "{service}-{seq}.pb.gz".into(),
            ..config(&dir)
        });
        for _ in 0..5 {
            exporter.export(go_cpu("cart")).await.expect("export");
        }
        assert_eq!(
            names_in(&dir),
            [
                "README.txt",
                "cart-2.pb.gz",
                "cart-3.pb.gz",
                "cart-4.pb.gz",
                "flamegraphs"
            ]
        );
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn max_age_deletes_files_of_an_earlier_run_older_than_it() {
        let dir = scratch("max-age");
        // Left by an earlier run two hours ago; and a file that is not the exporter's.
        for name in ["old-cpu-20261130T000000Z.pb.gz", "notes.txt"] {
            std::fs::File::create(dir.join(name))
                .expect("create")
                .set_modified(std::time::SystemTime::now() - Duration::from_secs(7200))
                .expect("mtime");
        }
        let exporter = create(Config {
            max_age: Duration::from_secs(3600),
            ..config(&dir)
        });
        exporter.export(go_cpu("cart")).await.expect("export");
        let now = names_in(&dir);
        assert_eq!(now.len(), 2, "{now:?}");
        assert!(now[0].starts_with("cart-cpu-"), "{now:?}");
        assert_eq!(now[1], "notes.txt");
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn max_services_drops_new_services_in_both_modes_and_counts_them() {
        for interval in [Duration::ZERO, Duration::from_secs(3600)] {
            let dir = scratch("max-services");
            let config = Config {
                max_services: 2,
                interval,
                ..config(&dir)
            };
            let telemetry = Telemetry::new();
            let ctx = CreateContext {
                id: ComponentId::new("pprof", Some("capped")),
                telemetry: telemetry.clone(),
                host: Default::default(),
            };
            let exporter = PprofExporterFactory
                .create(
                    profcol_core::config::Checked::check(config).expect("a valid config"),
                    &ctx,
                )
                .expect("create");
            for service in ["a", "b", "c", "a", "d"] {
                exporter.export(go_cpu(service)).await.expect("export");
            }
            exporter.shutdown().await.expect("shutdown");
            let services: BTreeSet<String> = names_in(&dir)
                .iter()
                .filter_map(|n| n.split('-').next().map(str::to_owned))
                .collect();
            assert_eq!(
                services,
                ["a", "b"].map(str::to_owned).into_iter().collect(),
                "{interval:?}"
            );
            assert_eq!(
                telemetry.value(
                    "profcol_exporter_service_cap_dropped_profiles_total",
                    &[("exporter", "pprof/capped")]
                ),
                Some(2),
                "{interval:?}"
            );
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    // ---- disk faults ----------------------------------------------------------------------

    /// A real full disk (a filled 64 KiB tmpfs): the write fails retryably and leaves no temp
    /// file; the retry after space is freed writes the file, whole, once.
    #[tokio::test]
    async fn a_full_disk_is_retryable_and_leaves_no_temp_file() {
        use profcol_core::exporterhelper::disk::testing::TinyDisk;
        let Some(tiny) = TinyDisk::mount("pprof", 64) else {
            return;
        };
        let dir = tiny.dir.join("pprof");
        let exporter = create(config(&dir));
        let filler = tiny.dir.join("filler");
        tiny.fill(&filler);
        let batch = go_cpu("cart");
        let e = exporter.export(batch.clone()).await.expect_err("disk full");
        assert!(e.is_retryable(), "{e}");
        assert_eq!(names_in(&dir), Vec::<String>::new(), "no temp file stays");
        std::fs::remove_file(&filler).expect("free the disk");
        exporter.export(batch).await.expect("the retry writes it");
        let names = names_in(&dir);
        assert_eq!(names.len(), 1, "{names:?}");
        assert_eq!(
            totals(&read_pprof(&dir.join(&names[0]))),
            totals(&fixture("go-cpu.pb.gz"))
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn stale_temp_files_are_swept_at_start_and_files_are_private() {
        use profcol_core::exporterhelper::disk::testing::mode;
        let dir = scratch("sweep");
        let stale = ".cpu.pb.gz.99999999-0.tmp";
        // pid 1 is alive: another collector sharing the folder may be writing it.
        let live = ".cpu.pb.gz.1-0.tmp";
        for name in [stale, live, "kept.pb.gz"] {
            std::fs::write(dir.join(name), b"x").expect("write");
        }
        let _exporter = create(config(&dir));
        assert_eq!(names_in(&dir), [live, "kept.pb.gz"]);
        let fresh = dir.join("made/here");
        let exporter = create(config(&fresh));
        exporter.export(go_cpu("cart")).await.expect("export");
        assert_eq!(mode(&dir.join("made")), 0o700);
        assert_eq!(mode(&fresh), 0o700);
        let written = names_in(&fresh);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(mode(&fresh.join(&written[0])), 0o600);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Offline mode only where an export means "Pyroscope took it": a push of each batch.
    #[test]
    fn offline_needs_a_push_of_each_batch() {
        let errors = |yaml: &str| -> Vec<String> {
            config_errors(&parse(yaml).expect("parses"))
                .iter()
                .map(|e| e.path.clone())
                .collect()
        };
        let push = "endpoint: http://pyroscope:4040\nwrite_files: false\ninterval: 0s\noffline:\n  directory: /tmp/o\n";
        assert!(errors(push).is_empty(), "{:?}", errors(push));
        let merged = push.replace("interval: 0s", "interval: 60s");
        assert_eq!(errors(&merged), ["offline"]);
        assert_eq!(
            errors("directory: /tmp/p\noffline:\n  directory: /tmp/o\n"),
            ["offline"]
        );
    }
}
