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
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::{ExporterHelperSettings, PeriodicTask, RetrySettings, disk};
use profcol_core::pdata::ProfileBatch;
use tokio::sync::Mutex;

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
        // A write may wait on a slow disk, and a failed one is worth another try.
        ExporterHelperSettings {
            timeout: Duration::ZERO,
            retry: RetrySettings::default(),
            ..ExporterHelperSettings::passthrough()
        }
    }

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let config = config.into_inner();
        let limits = config.rotation.as_ref().map(|r| RotationLimits {
            max_bytes: r.max_bytes(),
            max_backups: r.max_backups as usize,
            max_age_millis: u64::from(r.max_days) * 86_400_000,
        });
        let exporter = FileExporter::open(&config, limits).map_err(|e| {
            BuildError::caused_by(&ctx.id, format!("cannot open {}", config.path.display()), e)
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

pub(crate) struct FileExporter {
    path: PathBuf,
    format: Format,
    flush_interval: Duration,
    /// `None` once shut down. Held across the whole of a write, so writes never
    /// interleave and a cancelled export cannot tear one.
    writer: Arc<Mutex<Option<FileWriter>>>,
    /// Writes the buffer out every `flush_interval`.
    flusher: PeriodicTask,
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
            flusher: PeriodicTask::new(),
        })
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
    fn start(&self) -> Result<(), ComponentError> {
        let path = self.path.clone();
        self.flusher
            .start(&self.writer, self.flush_interval, move |writer| {
                flush_buffer(writer, path.clone())
            });
        Ok(())
    }

    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
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
        self.flusher.stop().await;
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

/// Writes out what the writer buffered (one tick of the flusher).
async fn flush_buffer(writer: Arc<Mutex<Option<FileWriter>>>, path: PathBuf) {
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

profcol_core::component_conformance!(exporter: FileExporterFactory, "file", Alpha, default_errors: ["path"]);

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use std::time::Duration;

    use profcol_core::component::{
        ComponentId, CreateContext, ExportError, Exporter, ExporterFactory,
    };
    use profcol_core::config::{ConfigError, Validate, parse_typed, parse_yaml};
    use profcol_core::pdata::ProfileBatch;
    use profcol_core::pdata::otlp_json::read_profiles_json;
    use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
    use profcol_core::pdata::testing::{
        WireDictionaryBuilder as DictionaryBuilder, batch_from_wire,
    };
    use profcol_core::pdata::types::{
        AnyValue, KeyValue, Profile, Resource, ResourceProfiles, Sample, ScopeProfiles, Value,
        ValueType,
    };
    use profcol_core::telemetry::Telemetry;

    use super::*;

    // ---- helpers ------------------------------------------------------------------------

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(yaml: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("x", yaml).expect("yaml"))
    }

    /// A fresh directory per test.
    fn scratch(name: &str) -> PathBuf {
        profcol_core::testkit::scratch_dir(&format!("file-exporter-{name}"))
    }

    fn go_cpu() -> ProfileBatch {
        let path = format!(
            "{}/../../../testdata/pprof/go-cpu.pb.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).expect("fixture");
        let p = profcol_core::pdata::codec::plain_pprof(&bytes, 1 << 26).expect("decodes");
        pprof_to_batch(&p, ToOtlpOptions::default()).expect("translates")
    }

    /// A small batch that says which it is: its one sample's value is `n`.
    fn numbered(n: i64) -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let stack = b.stack(&[]);
        let st = ValueType {
            type_strindex: b.string("samples"),
            unit_strindex: b.string("count"),
        };
        batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(Value::StringValue("cart".into())),
                        }),
                        key_strindex: 0,
                    }],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        sample_type: Some(st),
                        time_unix_nano: 1_700_000_000_000_000_000,
                        samples: vec![Sample {
                            stack_index: stack,
                            values: vec![n],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    fn number_of(batch: &ProfileBatch) -> i64 {
        batch
            .profiles()
            .next()
            .and_then(|p| p.samples.iter().next())
            .and_then(|s| s.values.first())
            .expect("a numbered batch")
    }

    fn config(path: &Path, format: Format) -> Config {
        Config {
            path: path.to_path_buf(),
            format,
            ..Config::default()
        }
    }

    fn json_batches(bytes: &[u8]) -> Vec<ProfileBatch> {
        let text = std::str::from_utf8(bytes).expect("utf8");
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "ends with a newline"
        );
        text.lines()
            .map(|line| {
                let data = read_profiles_json(line.as_bytes()).expect("each line is OTLP/JSON");
                ProfileBatch::new(data).expect("valid")
            })
            .collect()
    }

    fn proto_batches(bytes: &[u8]) -> Vec<ProfileBatch> {
        read_proto_messages(bytes)
            .expect("framed")
            .into_iter()
            .map(|m| ProfileBatch::decode(m).expect("each message is ProfilesData"))
            .collect()
    }

    fn read_batches(format: Format, path: &Path) -> Vec<ProfileBatch> {
        let bytes = std::fs::read(path).expect("read");
        match format {
            Format::Json => json_batches(&bytes),
            Format::Proto => proto_batches(&bytes),
        }
    }

    /// The rotated files oldest first, then the current one.
    fn files_in_order(dir: &Path, current: &str) -> Vec<PathBuf> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n != current)
            .collect();
        names.sort();
        names.push(current.to_owned());
        names.into_iter().map(|n| dir.join(n)).collect()
    }

    // ---- config -------------------------------------------------------------------------

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                path: PathBuf::from("/var/lib/profcol/profiles.pb"),
                format: Format::Proto,
                rotation: Some(Rotation {
                    max_megabytes: 10,
                    max_backups: 3,
                    max_days: 0,
                }),
                flush_interval: Duration::from_millis(200),
                append: true,
                create_directory: false,
            }
        );
        assert!(c.validate().is_empty());
        assert_eq!(c.rotation.expect("rotation").max_bytes(), 10 << 20);
    }

    #[test]
    fn invalid_format_names_the_choices() {
        let e = parse("path: out.json\nformat: xml\n").expect_err("invalid");
        assert_eq!(
            e.to_string(),
            "format: unknown variant `xml`, expected `json` or `proto`"
        );
    }

    #[test]
    fn defaults_and_required_path() {
        let c = parse("path: out.json\n").expect("valid");
        assert_eq!(c.format, Format::Json);
        assert_eq!(c.rotation, None);
        assert_eq!(c.flush_interval, Duration::from_secs(1));
        assert!(!c.append);
        let c = parse("path: out.json\nrotation: {}\n").expect("valid");
        assert_eq!(c.rotation, Some(Rotation::default()));
        let r = c.rotation.expect("rotation");
        assert_eq!((r.max_megabytes, r.max_backups), (100, 100));
        assert_eq!(
            Rotation {
                max_megabytes: 0,
                ..r
            }
            .max_bytes(),
            100 << 20
        );
        let c: Config = parse_typed(&profcol_core::config::Value::Null).expect("null");
        assert_eq!(
            c.validate()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["path: must not be empty"]
        );
        let e = parse("path: out.json\nrotation:\n  max_mb: 5\n").expect_err("typo");
        assert_eq!(e.path, "rotation::max_mb");
    }

    #[test]
    fn helper_settings_have_no_queue_and_no_timeout() {
        let s = FileExporterFactory.helper_settings(&Config::default());
        assert!(!s.queue.enabled);
        assert!(s.timeout.is_zero());
        assert!(s.retry.enabled);
        assert_eq!(FileExporterFactory::TYPE_NAME, "file");
        assert_eq!(FileExporterFactory::STABILITY, Stability::Alpha);
    }

    // ---- writing ------------------------------------------------------------------------

    async fn write_all(config: &Config, limits: Option<RotationLimits>, batches: &[ProfileBatch]) {
        let exporter = FileExporter::open(config, limits).expect("open");
        for b in batches {
            exporter.export(b.clone()).await.expect("export");
        }
        exporter.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn json_lines_read_back_to_the_same_batches() {
        let dir = scratch("json");
        let path = dir.join("profiles.json");
        let batches = vec![go_cpu(), numbered(1), numbered(2)];
        write_all(&config(&path, Format::Json), None, &batches).await;
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 3);
        assert_eq!(
            text.lines().next().map(|l| l.as_bytes()),
            Some(&batches[0].to_json()[..])
        );
        assert_eq!(read_batches(Format::Json, &path), batches);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn proto_messages_read_back_to_the_same_batches() {
        let dir = scratch("proto");
        let path = dir.join("profiles.pb");
        let batches = vec![go_cpu(), numbered(1), numbered(2)];
        write_all(&config(&path, Format::Proto), None, &batches).await;
        let bytes = std::fs::read(&path).expect("read");
        // otelcol's framing: a big-endian u32 length, then the message.
        let first = batches[0].encode_to_vec();
        assert_eq!(bytes[..4], (first.len() as u32).to_be_bytes());
        assert_eq!(bytes[4..4 + first.len()], first[..]);
        assert_eq!(read_batches(Format::Proto, &path), batches);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn truncates_at_start_unless_appending() {
        let dir = scratch("append");
        let path = dir.join("profiles.json");
        std::fs::write(&path, "old line\n").expect("seed");
        let mut c = config(&path, Format::Json);
        write_all(&c, None, &[numbered(1)]).await;
        assert_eq!(read_batches(Format::Json, &path), [numbered(1)]);

        c.append = true;
        write_all(&c, None, &[numbered(2)]).await;
        assert_eq!(
            read_batches(Format::Json, &path),
            [numbered(1), numbered(2)]
        );

        // Truncation happens at start, even if nothing is written.
        c.append = false;
        let exporter = FileExporter::open(&c, None).expect("open");
        assert_eq!(std::fs::read(&path).expect("read"), b"");
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A limit that holds two of the numbered batches but not three.
    fn two_per_file(format: Format, max_backups: usize) -> RotationLimits {
        let one = framing::frame(
            format,
            match format {
                Format::Json => numbered(10).to_json(),
                Format::Proto => numbered(10).encode_to_vec(),
            },
        )
        .expect("frames")
        .len() as u64;
        RotationLimits {
            max_bytes: 2 * one + one / 2,
            max_backups,
            max_age_millis: 0,
        }
    }

    #[tokio::test]
    async fn rotation_keeps_every_message_whole_and_in_order() {
        let dir = scratch("rotate-json");
        let path = dir.join("profiles.json");
        let batches: Vec<ProfileBatch> = (10..20).map(numbered).collect();
        let limits = two_per_file(Format::Json, 100);
        write_all(&config(&path, Format::Json), Some(limits), &batches).await;
        let files = files_in_order(&dir, "profiles.json");
        assert_eq!(files.len(), 5, "{files:?}");
        for f in &files[..4] {
            let name = f.file_name().and_then(|n| n.to_str()).expect("name");
            let time = name
                .strip_prefix("profiles-")
                .and_then(|n| n.strip_suffix(".json"))
                .expect("lumberjack name");
            assert!(backup::parse_time(time).is_some(), "{name}");
        }
        let mut all = Vec::new();
        for f in &files {
            let in_file = read_batches(Format::Json, f);
            assert_eq!(in_file.len(), 2, "{}", f.display());
            all.extend(in_file);
        }
        assert_eq!(all, batches);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn rotation_deletes_the_oldest_beyond_max_backups() {
        let dir = scratch("rotate-proto");
        let path = dir.join("profiles.pb");
        let batches: Vec<ProfileBatch> = (10..21).map(numbered).collect();
        let limits = two_per_file(Format::Proto, 2);
        write_all(&config(&path, Format::Proto), Some(limits), &batches).await;
        let files = files_in_order(&dir, "profiles.pb");
        // 11 batches make 6 files; the current one and the 2 newest backups are kept.
        assert_eq!(files.len(), 3, "{files:?}");
        let numbers: Vec<i64> = files
            .iter()
            .flat_map(|f| read_batches(Format::Proto, f))
            .map(|b| number_of(&b))
            .collect();
        assert_eq!(numbers, [16, 17, 18, 19, 20]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn the_flusher_writes_without_waiting_for_shutdown() {
        let dir = scratch("flush");
        let path = dir.join("profiles.json");
        let c = Config {
            flush_interval: Duration::from_millis(20),
            ..config(&path, Format::Json)
        };
        let exporter = FileExporter::open(&c, None).expect("open");
        exporter.start().expect("start");
        exporter.export(numbered(1)).await.expect("export");
        let mut waited = Duration::ZERO;
        while std::fs::read(&path).expect("read").is_empty() && waited < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += Duration::from_millis(10);
        }
        assert_eq!(read_batches(Format::Json, &path), [numbered(1)]);
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn zero_flush_interval_writes_every_batch_at_once() {
        let dir = scratch("flush0");
        let path = dir.join("profiles.pb");
        let c = Config {
            flush_interval: Duration::ZERO,
            ..config(&path, Format::Proto)
        };
        let exporter = FileExporter::open(&c, None).expect("open");
        exporter.export(numbered(1)).await.expect("export");
        assert_eq!(read_batches(Format::Proto, &path), [numbered(1)]);
        exporter.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_exports_never_interleave() {
        let dir = scratch("concurrent");
        let path = dir.join("profiles.json");
        let c = Config {
            flush_interval: Duration::ZERO,
            ..config(&path, Format::Json)
        };
        let exporter = std::sync::Arc::new(FileExporter::open(&c, None).expect("open"));
        let tasks: Vec<_> = (0..32)
            .map(|n| {
                let e = exporter.clone();
                tokio::spawn(async move { e.export(numbered(n)).await })
            })
            .collect();
        for t in tasks {
            t.await.expect("task").expect("export");
        }
        exporter.shutdown().await.expect("shutdown");
        let mut numbers: Vec<i64> = read_batches(Format::Json, &path)
            .iter()
            .map(number_of)
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..32).collect::<Vec<_>>());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// An export abandoned mid-write (the helper's timeout, were one set) still leaves one
    /// whole message, written before the next write starts.
    #[tokio::test]
    async fn a_cancelled_export_still_writes_whole() {
        let dir = scratch("cancel");
        let path = dir.join("profiles.pb");
        let exporter = FileExporter::open(&config(&path, Format::Proto), None).expect("open");
        let batch = go_cpu();
        let _ = tokio::time::timeout(Duration::ZERO, exporter.export(batch.clone())).await;
        exporter.export(numbered(1)).await.expect("export");
        exporter.shutdown().await.expect("shutdown");
        assert_eq!(read_batches(Format::Proto, &path), [batch, numbered(1)]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn export_after_shutdown_is_refused() {
        let dir = scratch("closed");
        let exporter =
            FileExporter::open(&config(&dir.join("p.json"), Format::Json), None).expect("open");
        exporter.shutdown().await.expect("shutdown");
        exporter
            .shutdown()
            .await
            .expect("a second shutdown is harmless");
        let e = exporter.export(numbered(1)).await.expect_err("closed");
        assert!(!e.is_retryable());
        assert_eq!(e.to_string(), "the file exporter is shut down");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn create_reports_a_missing_directory_unless_asked_to_make_it() {
        let dir = scratch("create");
        let path = dir.join("missing").join("p.json");
        let ctx = CreateContext {
            id: ComponentId::new("file", Some("out")),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let e = FileExporterFactory
            .create(
                profcol_core::config::Checked::check(config(&path, Format::Json))
                    .expect("a valid config"),
                &ctx,
            )
            .err()
            .expect("no directory");
        let text = profcol_core::errors::error_chain(&e);
        assert!(
            text.starts_with(&format!("file/out: cannot open {}: ", path.display())),
            "{text}"
        );
        let c = Config {
            create_directory: true,
            ..config(&path, Format::Json)
        };
        FileExporterFactory
            .create(
                profcol_core::config::Checked::check(c).expect("a valid config"),
                &ctx,
            )
            .expect("made the directory");
        assert!(path.is_file());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn transient_and_disk_full_errors_are_retryable_and_the_rest_permanent() {
        let err = |kind| {
            ExportError::from(WriteError::Io {
                path: "p".into(),
                source: io::Error::new(kind, "x"),
            })
        };
        for kind in [
            io::ErrorKind::Interrupted,
            io::ErrorKind::WouldBlock,
            io::ErrorKind::TimedOut,
            io::ErrorKind::StorageFull,
            io::ErrorKind::QuotaExceeded,
        ] {
            assert!(err(kind).is_retryable(), "{kind:?}");
        }
        for kind in [
            io::ErrorKind::ReadOnlyFilesystem,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::NotFound,
            io::ErrorKind::Other,
        ] {
            assert!(!err(kind).is_retryable(), "{kind:?}");
        }
        assert_eq!(
            err(io::ErrorKind::PermissionDenied).to_string(),
            "writing p: x"
        );
    }

    /// `/dev/full` fails every write with ENOSPC, as a full disk does.
    #[tokio::test]
    async fn a_full_disk_is_a_retryable_error() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let c = Config {
            flush_interval: Duration::ZERO,
            ..config(full, Format::Json)
        };
        let exporter = FileExporter::open(&c, None).expect("open");
        let e = exporter.export(numbered(1)).await.expect_err("disk full");
        assert!(e.is_retryable());
        assert!(e.to_string().starts_with("writing /dev/full: "), "{e}");
        exporter.shutdown().await.expect("nothing left to write");
    }

    /// A real full disk (a filled 64 KiB tmpfs) behind the exporter helper: the batch is
    /// retried, nothing half-written stays in the file, and once space is freed the batch
    /// arrives exactly once.
    #[tokio::test]
    async fn a_batch_refused_by_a_full_disk_arrives_once_space_is_freed() {
        use profcol_core::exporterhelper::{ExporterHandle, RetrySettings, disk, panic_counter};
        let Some(tiny) = disk::testing::TinyDisk::mount("file-exporter", 64) else {
            return;
        };
        let path = tiny.dir.join("out/profiles.json");
        let c = Config {
            flush_interval: Duration::ZERO,
            create_directory: true,
            ..config(&path, Format::Json)
        };
        let mut settings = FileExporterFactory.helper_settings(&c);
        settings.retry = RetrySettings {
            initial_interval: Duration::from_millis(20),
            max_interval: Duration::from_millis(100),
            max_elapsed_time: Duration::from_secs(30),
            ..RetrySettings::default()
        };
        let exporter = Arc::new(FileExporter::open(&c, None).expect("open"));
        let t = Telemetry::new();
        let handle = ExporterHandle::start(
            ComponentId::new("file", None),
            exporter,
            &settings,
            profcol_core::telemetry::ExporterCounters::new(&t, "file"),
            panic_counter(&t, "exporter/file"),
            None,
            None,
        )
        .expect("start");
        handle.consume(numbered(1)).await.expect("written");
        let filler = tiny.dir.join("filler");
        tiny.fill(&filler);
        // go_cpu is tens of KiB as JSON: it cannot fit while the disk is full.
        let big = go_cpu();
        let pending = tokio::spawn({
            let handle = handle.clone();
            let big = big.clone();
            async move { handle.consume(big).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !pending.is_finished(),
            "still retrying while the disk is full"
        );
        assert_eq!(
            read_batches(Format::Json, &path).len(),
            1,
            "no half-written message in the file"
        );
        std::fs::remove_file(&filler).expect("free the disk");
        pending
            .await
            .expect("joined")
            .expect("written once there is room");
        handle.shutdown(Duration::from_secs(5)).await;
        let written = read_batches(Format::Json, &path);
        assert_eq!(written.len(), 2);
        assert_eq!(number_of(&written[0]), 1);
        assert_eq!(written[1].sample_count(), big.sample_count());
    }

    #[cfg(unix)]
    #[test]
    fn the_file_and_the_folders_it_makes_are_private() {
        use profcol_core::exporterhelper::disk::testing::mode;
        let dir = scratch("modes");
        let path = dir.join("made/deeper/p.json");
        let c = Config {
            create_directory: true,
            ..config(&path, Format::Json)
        };
        let _exporter = FileExporter::open(&c, None).expect("open");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.join("made")), 0o700);
        assert_eq!(mode(&dir.join("made/deeper")), 0o700);
        let _ = std::fs::remove_dir_all(dir);
    }
}
