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
use profcol_core::exporterhelper::{ExporterHelperSettings, PeriodicTask};
use profcol_core::pdata::ProfileBatch;
use profcol_core::utc;

pub use config::{Compiled, Config, DEFAULT_MAX_SERVICES};
pub use folded::UNKNOWN_SERVICE;
pub use store::{INDEX_HTML, MANIFEST};
pub use title::TitleError;

use folded::Accumulator;
use profcol_core::config::Checked;
use profcol_core::errors::Failed;
use services::ServiceCap;
use store::Store;

pub struct FlamegraphExporterFactory;

impl ExporterFactory for FlamegraphExporterFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "flamegraph";
    const STABILITY: Stability = Stability::Development;

    /// Exports only add to memory: no queue (batches are taken in order) and nothing to
    /// retry.
    fn helper_settings(&self, _config: &Config) -> ExporterHelperSettings {
        ExporterHelperSettings::passthrough()
    }

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let exporter = FlamegraphExporter::new(config, &ctx.id.to_string(), &ctx.telemetry)
            .map_err(|e| BuildError::failed(&ctx.id, e))?;
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
        config: Checked<Config>,
        id: &str,
        telemetry: &profcol_core::telemetry::Telemetry,
    ) -> Result<Self, Failed> {
        let (config, Compiled { title, trace }) = config.into_parts();
        let store = Store::open(&config.directory, config.keep, config.max_age, title)
            .map_err(|e| Failed::new(format!("cannot open {}", config.directory.display()), e))?;
        let folders = store
            .service_folders()
            .map_err(|e| Failed::new(format!("cannot read {}", config.directory.display()), e))?;
        let services = ServiceCap::new(id, config.max_services, folders, telemetry);
        Ok(FlamegraphExporter {
            inner: Arc::new(Inner {
                id: id.to_owned(),
                interval: config.interval,
                accumulator: StdMutex::new(Accumulator::for_trace(trace)),
                services: StdMutex::new(services),
                store: Arc::new(StdMutex::new(store)),
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
    fn start(&self) -> Result<(), profcol_core::component::ComponentError> {
        self.start_flusher();
        Ok(())
    }

    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ExportError::permanent(
                "the flamegraph exporter is shut down",
            ));
        }
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

profcol_core::component_conformance!(exporter: FlamegraphExporterFactory, "flamegraph", Development);

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use std::time::Duration;

    use profcol_core::component::{ComponentId, CreateContext, Exporter, ExporterFactory};
    use profcol_core::config::{ConfigError, parse_typed, parse_yaml};
    use profcol_core::pdata::ProfileBatch;
    use profcol_core::pdata::codec::plain_pprof;
    use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
    use profcol_core::pdata::testing::{
        WireDictionaryBuilder as DictionaryBuilder, batch_from_wire,
    };
    use profcol_core::pdata::types::{
        AnyValue, Function, KeyValue, Line, Location, Profile, Resource, ResourceProfiles, Sample,
        ScopeProfiles, Value, ValueType,
    };
    use profcol_core::telemetry::Telemetry;
    use profcol_core::testkit::config_errors;
    use profcol_proto::pprof as pp;

    use super::*;

    // ---- helpers ------------------------------------------------------------------------

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(yaml: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("x", yaml).expect("yaml"))
    }

    fn scratch(name: &str) -> PathBuf {
        profcol_core::testkit::scratch_path(&format!("flamegraph-exporter-{name}"))
    }

    fn fixture(name: &str) -> pp::Profile {
        let path = format!(
            "{}/../../../testdata/pprof/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).expect("fixture");
        let plain = plain_pprof(&bytes, 1 << 26).expect("decodes");
        <pp::Profile as prost::Message>::decode(plain.as_slice()).expect("pprof")
    }

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.into())),
            }),
            key_strindex: 0,
        }
    }

    fn batch_of(p: &pp::Profile, service: &str) -> ProfileBatch {
        pprof_to_batch(
            &prost::Message::encode_to_vec(p),
            ToOtlpOptions {
                resource_attributes: vec![kv("service.name", service)],
                ..Default::default()
            },
        )
        .expect("translates")
    }

    fn go_cpu(service: &str) -> ProfileBatch {
        batch_of(&fixture("go-cpu.pb.gz"), service)
    }

    fn config(dir: &Path) -> Config {
        Config {
            directory: dir.to_path_buf(),
            interval: Duration::from_secs(3600),
            ..Config::default()
        }
    }

    fn exporter(config: &Config) -> FlamegraphExporter {
        FlamegraphExporter::new(checked(config.clone()), "flamegraph", &Telemetry::new())
            .expect("create")
    }

    fn checked(config: Config) -> Checked<Config> {
        Checked::check(config).unwrap_or_else(|errors| panic!("not a valid config: {errors:?}"))
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The SVGs of a service folder, without `latest-*`.
    fn svgs_in(dir: &Path) -> Vec<String> {
        names_in(dir)
            .into_iter()
            .filter(|n| n.ends_with(".svg") && !n.starts_with("latest-"))
            .collect()
    }

    /// Checks that `text` is well-formed XML: it parses, every element is closed by its own
    /// end tag, and every entity reference is one XML defines.
    fn assert_well_formed(text: &str) {
        use quick_xml::Reader;
        use quick_xml::events::Event;
        let known_ref = |name: &str| {
            matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
                || name
                    .strip_prefix("#x")
                    .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
                || name
                    .strip_prefix('#')
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        };
        let refs_ok = |raw: &str| {
            let mut rest = raw;
            while let Some(at) = rest.find('&') {
                let Some(end) = rest[at..].find(';') else {
                    return false;
                };
                if !known_ref(&rest[at + 1..at + end]) {
                    return false;
                }
                rest = &rest[at + end + 1..];
            }
            true
        };
        let mut reader = Reader::from_str(text);
        let mut open: Vec<Vec<u8>> = Vec::new();
        let mut elements = 0;
        loop {
            match reader.read_event() {
                Ok(Event::Start(e)) => {
                    for a in e.attributes() {
                        let a = a.expect("a well-formed attribute");
                        let raw = std::str::from_utf8(&a.value).expect("utf8");
                        assert!(refs_ok(raw), "bad reference in {raw:?}");
                    }
                    open.push(e.name().as_ref().to_vec());
                    elements += 1;
                }
                Ok(Event::Empty(e)) => {
                    for a in e.attributes() {
                        a.expect("a well-formed attribute");
                    }
                    elements += 1;
                }
                Ok(Event::End(e)) => {
                    let top = open.pop().expect("an end tag closes an open element");
                    assert_eq!(top, e.name().as_ref(), "end tag matches");
                }
                Ok(Event::GeneralRef(r)) => {
                    let name = r.decode().expect("utf8").into_owned();
                    assert!(known_ref(&name), "unknown entity &{name};");
                }
                Ok(Event::Text(t)) => {
                    assert!(!t.decode().expect("utf8").contains('<'));
                }
                Ok(Event::Eof) => break,
                Ok(_) => {}
                Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
            }
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        assert!(elements > 1);
    }

    /// The `href`s of a page.
    fn hrefs(html: &str) -> Vec<String> {
        html.split("href=\"")
            .skip(1)
            .filter_map(|s| s.split_once('"').map(|(h, _)| h.to_owned()))
            .collect()
    }

    // ---- config -------------------------------------------------------------------------

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                directory: PathBuf::from("/var/lib/profcol/flamegraphs"),
                interval: Duration::from_secs(30),
                keep: 10,
                max_age: Duration::from_secs(7 * 24 * 3600),
                max_services: 50,
                title: "{service}: {type} in {unit}, {start} to {end} ({samples} samples)".into(),
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            }
        );
        assert!(config_errors(&c).is_empty());
    }

    #[test]
    fn defaults_and_helper_settings() {
        let c: Config = parse_typed(&profcol_core::config::Value::Null).expect("null");
        assert_eq!(c.directory, PathBuf::from("./profiles/flamegraphs"));
        assert_eq!(c.interval, Duration::from_secs(60));
        assert_eq!(c.keep, 60);
        assert_eq!(c.max_age, Duration::ZERO);
        assert_eq!(c.max_services, 1000);
        assert_eq!(c.title, "{service} {type} {unit} {start}");
        assert!(config_errors(&c).is_empty());
        let s = FlamegraphExporterFactory.helper_settings(&c);
        assert!(!s.queue.enabled);
        assert!(!s.retry.enabled);
        assert_eq!(FlamegraphExporterFactory::TYPE_NAME, "flamegraph");
        assert_eq!(FlamegraphExporterFactory::STABILITY, Stability::Development);
    }

    #[test]
    fn validation_names_the_unknown_placeholder_and_a_zero_interval() {
        let c = parse("title: \"{service} on {host}\"\ninterval: 0s\n").expect("parses");
        let errors: Vec<String> = config_errors(&c).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "interval: must be above 0 (one flame graph per service and sample type per interval)",
                "title: unknown placeholder {host} (known: {service}, {type}, {unit}, {start}, {end}, {samples})"
            ]
        );
        let e = parse("keep: -1\n").expect_err("negative");
        assert_eq!(e.path, "keep");
    }

    #[test]
    fn create_fails_where_the_directory_cannot_be() {
        let dir = scratch("create");
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").expect("write");
        let ctx = CreateContext {
            id: ComponentId::new("flamegraph", Some("x")),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let e = FlamegraphExporterFactory
            .create(
                profcol_core::config::Checked::check(config(&file.join("sub")))
                    .expect("a valid config"),
                &ctx,
            )
            .err()
            .expect("not a directory");
        assert!(
            e.to_string().starts_with("flamegraph/x: cannot open "),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- rendering ----------------------------------------------------------------------

    #[tokio::test]
    async fn go_cpu_renders_a_well_formed_svg_per_sample_type_and_an_index() {
        let dir = scratch("render");
        let e = exporter(&config(&dir));
        e.export(go_cpu("cart")).await.expect("export");
        e.shutdown().await.expect("shutdown flushes");
        let p = fixture("go-cpu.pb.gz");
        let time = utc::compact(u64::try_from(p.time_nanos).expect("time"));
        let svc = dir.join("cart");
        assert_eq!(
            names_in(&svc),
            [
                format!("cpu-{time}.svg"),
                "latest-cpu.svg".to_owned(),
                "latest-samples.svg".to_owned(),
                format!("samples-{time}.svg"),
            ]
        );
        for name in names_in(&svc) {
            let svg = std::fs::read_to_string(svc.join(&name)).expect("svg");
            assert!(svg.contains("<svg"), "{name}");
            assert_well_formed(&svg);
            assert!(svg.contains("main.hashLoop"), "{name}");
            assert!(svg.contains("main.work"), "{name}");
        }
        let cpu = std::fs::read_to_string(svc.join(format!("cpu-{time}.svg"))).expect("svg");
        // Titled by the template, and counted in the sample type's unit.
        let start = utc::rfc3339_seconds(u64::try_from(p.time_nanos).expect("time"));
        assert!(
            cpu.contains(&format!("cart cpu nanoseconds {start}")),
            "title"
        );
        assert!(cpu.contains(" nanoseconds, "), "unit");
        let samples =
            std::fs::read_to_string(svc.join(format!("samples-{time}.svg"))).expect("svg");
        assert!(samples.contains(" samples, "), "unit");
        assert_eq!(
            std::fs::read(svc.join("latest-cpu.svg")).expect("latest"),
            cpu.as_bytes()
        );

        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        assert!(index.starts_with("<!DOCTYPE html>"));
        assert!(index.contains("<h2 id=\"cart\">cart</h2>"));
        let links: Vec<String> = hrefs(&index)
            .into_iter()
            .filter(|h| !h.starts_with('#'))
            .collect();
        assert_eq!(links.len(), 4, "{links:?}");
        for link in &links {
            assert!(dir.join(link).is_file(), "{link}");
        }
        // The row of the cpu graph shows its sample count and time range.
        let row = index
            .lines()
            .find(|l| l.contains(&format!("cart/cpu-{time}.svg\">")))
            .expect("a row for the cpu graph");
        assert!(
            row.contains(&format!("<td class=\"n\">{}</td>", p.sample.len())),
            "{row}"
        );
        assert!(row.contains(&start), "{row}");
        // No temp files are left.
        assert!(names_in(&dir).iter().all(|n| !n.ends_with(".tmp")));
        assert!(names_in(&svc).iter().all(|n| !n.starts_with('.')));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn every_fixture_renders_well_formed() {
        let dir = scratch("fixtures");
        let e = exporter(&config(&dir));
        for name in [
            "go-allocs.pb.gz",
            "go-goroutine.pb.gz",
            "go-heap.pb.gz",
            "go-mutex.pb.gz",
            "go126-allocs.pb.gz",
            "go126-cpu.pb.gz",
            "go126-goroutine.pb.gz",
            "go126-heap.pb.gz",
            "go126-mutex.pb.gz",
            "node-wall.pb.gz",
        ] {
            e.export(batch_of(&fixture(name), name.trim_end_matches(".pb.gz")))
                .await
                .expect("export");
        }
        e.shutdown().await.expect("shutdown");
        for service in [
            "go-allocs",
            "go-goroutine",
            "go-heap",
            "go-mutex",
            "go126-allocs",
            "go126-cpu",
            "go126-goroutine",
            "go126-heap",
            "go126-mutex",
            "node-wall",
        ] {
            let svc = dir.join(service);
            for name in names_in(&svc) {
                assert_well_formed(&std::fs::read_to_string(svc.join(&name)).expect("svg"));
            }
        }
        assert_well_formed_html_links(&dir);
        let _ = std::fs::remove_dir_all(dir);
    }

    fn assert_well_formed_html_links(dir: &Path) {
        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        for link in hrefs(&index).into_iter().filter(|h| !h.starts_with('#')) {
            assert!(dir.join(&link).is_file(), "{link}");
        }
    }

    #[tokio::test]
    async fn two_services_get_two_folders() {
        let dir = scratch("two");
        let e = exporter(&config(&dir));
        e.export(go_cpu("cart")).await.expect("export");
        e.export(go_cpu("checkout")).await.expect("export");
        e.export(go_cpu("cart")).await.expect("export");
        e.shutdown().await.expect("shutdown");
        assert_eq!(
            names_in(&dir),
            [".index.json", "cart", "checkout", "index.html"]
        );
        assert_eq!(svgs_in(&dir.join("cart")).len(), 2);
        assert_eq!(svgs_in(&dir.join("checkout")).len(), 2);
        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        assert!(index.contains(">cart</h2>") && index.contains(">checkout</h2>"));
        // cart's graph holds both of its batches.
        let p = fixture("go-cpu.pb.gz");
        assert!(index.contains(&format!("<td class=\"n\">{}</td>", 2 * p.sample.len())));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn keep_deletes_the_oldest() {
        let dir = scratch("keep");
        let e = exporter(&Config {
            keep: 2,
            ..config(&dir)
        });
        let mut p = fixture("go-goroutine.pb.gz");
        let mut times = Vec::new();
        for _ in 0..4 {
            p.time_nanos += 60_000_000_000;
            times.push(utc::compact(u64::try_from(p.time_nanos).expect("time")));
            e.export(batch_of(&p, "cart")).await.expect("export");
            e.inner.flush().await.expect("flush");
        }
        let svc = dir.join("cart");
        assert_eq!(
            svgs_in(&svc),
            [
                format!("goroutine-{}.svg", times[2]),
                format!("goroutine-{}.svg", times[3])
            ]
        );
        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        let links: Vec<String> = hrefs(&index)
            .into_iter()
            .filter(|h| h.starts_with("cart/goroutine-"))
            .collect();
        // Newest first.
        assert_eq!(
            links,
            [
                format!("cart/goroutine-{}.svg", times[3]),
                format!("cart/goroutine-{}.svg", times[2])
            ]
        );
        assert_well_formed_html_links(&dir);
        e.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn same_start_twice_gets_a_suffix_and_the_index_survives_a_restart() {
        let dir = scratch("restart");
        let c = config(&dir);
        let p = fixture("go-goroutine.pb.gz");
        let time = utc::compact(u64::try_from(p.time_nanos).expect("time"));
        for _ in 0..2 {
            let e = exporter(&c);
            e.export(batch_of(&p, "cart")).await.expect("export");
            e.shutdown().await.expect("shutdown");
        }
        assert_eq!(
            svgs_in(&dir.join("cart")),
            [
                format!("goroutine-{time}-1.svg"),
                format!("goroutine-{time}.svg")
            ]
        );
        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        let rows = index
            .lines()
            .filter(|l| l.contains(&format!("<td class=\"n\">{}</td>", p.sample.len())))
            .count();
        assert_eq!(rows, 2, "both rows keep their counts: {index}");
        // The suffixed (later) one is listed first.
        let first = hrefs(&index)
            .into_iter()
            .find(|h| h.starts_with("cart/goroutine-"))
            .expect("a link");
        assert_eq!(first, format!("cart/goroutine-{time}-1.svg"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn hostile_names_are_escaped_and_stay_in_the_directory() {
        let dir = scratch("hostile");
        let mut p = fixture("go-cpu.pb.gz");
        for s in &mut p.string_table {
            if s == "main.work" {
                *s = "main.work<T>&\"x\";y 42".into();
            }
        }
        let e = exporter(&config(&dir));
        e.export(batch_of(&p, "../<b>&co")).await.expect("export");
        e.shutdown().await.expect("shutdown");
        let folders: Vec<String> = names_in(&dir)
            .into_iter()
            .filter(|n| dir.join(n).is_dir())
            .collect();
        assert_eq!(folders.len(), 1, "{folders:?}");
        assert!(folders[0].starts_with("___b__co-"), "{folders:?}");
        for name in names_in(&dir.join(&folders[0])) {
            let svg = std::fs::read_to_string(dir.join(&folders[0]).join(&name)).expect("svg");
            assert_well_formed(&svg);
            assert!(
                svg.contains("main.work&lt;T&gt;&amp;"),
                "escaped frame name"
            );
        }
        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        assert!(index.contains("../&lt;b&gt;&amp;co</h2>"));
        assert_well_formed_html_links(&dir);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn the_ticker_renders_without_waiting_for_shutdown() {
        let dir = scratch("tick");
        let e = exporter(&Config {
            interval: Duration::from_millis(50),
            ..config(&dir)
        });
        e.start().expect("start");
        e.export(go_cpu("cart")).await.expect("export");
        let mut waited = Duration::ZERO;
        while !dir.join(INDEX_HTML).exists() && waited < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += Duration::from_millis(20);
        }
        assert_eq!(svgs_in(&dir.join("cart")).len(), 2);
        e.shutdown().await.expect("shutdown");
        assert_eq!(svgs_in(&dir.join("cart")).len(), 2, "nothing new to render");
        let e2 = e.export(go_cpu("cart")).await.expect_err("shut down");
        assert!(!e2.is_retryable());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn nothing_to_draw_writes_nothing() {
        let dir = scratch("empty");
        let e = exporter(&config(&dir));
        e.export(ProfileBatch::empty()).await.expect("export");
        e.shutdown().await.expect("shutdown");
        assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- folding ------------------------------------------------------------------------

    /// main → outer (with `inlined` inlined into it) → leaf, and a sample with no stack.
    fn inlined_batch() -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let function = |b: &mut DictionaryBuilder, name: &str| {
            let name_strindex = b.string(name);
            b.function(Function {
                name_strindex,
                ..Default::default()
            })
        };
        let (f_main, f_outer, f_inlined, f_leaf) = (
            function(&mut b, "main"),
            function(&mut b, "outer"),
            function(&mut b, "inlined"),
            function(&mut b, "leaf"),
        );
        let line = |function_index| Line {
            function_index,
            ..Default::default()
        };
        let l_main = b.location(Location {
            lines: vec![line(f_main)],
            address: 1,
            ..Default::default()
        });
        // Innermost (inlined callee) first, caller last, as OTLP and pprof hold them.
        let l_outer = b.location(Location {
            lines: vec![line(f_inlined), line(f_outer)],
            address: 2,
            ..Default::default()
        });
        let l_leaf = b.location(Location {
            lines: vec![line(f_leaf)],
            address: 3,
            ..Default::default()
        });
        let stack = b.stack(&[l_leaf, l_outer, l_main]);
        let empty = b.stack(&[]);
        let st = ValueType {
            type_strindex: b.string("samples"),
            unit_strindex: b.string("count"),
        };
        batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "cart")],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        sample_type: Some(st),
                        time_unix_nano: 1_700_000_000_000_000_000,
                        duration_nano: 10_000_000_000,
                        samples: vec![
                            Sample {
                                stack_index: stack,
                                values: vec![3],
                                ..Default::default()
                            },
                            Sample {
                                stack_index: stack,
                                values: vec![2],
                                ..Default::default()
                            },
                            Sample {
                                stack_index: empty,
                                values: vec![1],
                                ..Default::default()
                            },
                            Sample {
                                stack_index: stack,
                                values: vec![0],
                                ..Default::default()
                            },
                        ],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    #[test]
    fn stacks_fold_root_first_with_inlined_frames_innermost_last() {
        let mut acc = Accumulator::default();
        acc.add(&inlined_batch(), 0, &mut |_| true);
        let graphs = acc.take();
        assert_eq!(graphs.len(), 1);
        let g = &graphs[0];
        assert_eq!(
            (g.service.as_str(), g.sample_type.as_str(), g.unit.as_str()),
            ("cart", "samples", "count")
        );
        let mut stacks: Vec<(&str, u64)> = g.stacks.iter().map(|(s, v)| (s.as_str(), *v)).collect();
        stacks.sort();
        assert_eq!(stacks, [("[unknown]", 1), ("main;outer;inlined;leaf", 5)]);
        assert_eq!((g.samples, g.total), (4, 6));
        assert_eq!(g.start_nanos, 1_700_000_000_000_000_000);
        assert_eq!(g.end_nanos, 1_700_000_010_000_000_000);
        assert!(acc.is_empty());
    }

    // ---- on- and off-CPU ----------------------------------------------------------------

    const T0: u64 = 1_700_000_000_000_000_000;

    /// `main;<leaf>` as a stack.
    fn main_then(b: &mut DictionaryBuilder, leaf: &str) -> i32 {
        let mut location = |name: &str, address| {
            let name_strindex = b.string(name);
            let function_index = b.function(Function {
                name_strindex,
                ..Default::default()
            });
            b.location(Location {
                lines: vec![Line {
                    function_index,
                    ..Default::default()
                }],
                address,
                ..Default::default()
            })
        };
        let (main, leaf) = (location("main", 1), location(leaf, 2));
        b.stack(&[leaf, main])
    }

    /// A profile of one sample type (`unit`) with these (stack, values, timestamps) samples.
    fn profile_of(
        b: &mut DictionaryBuilder,
        sample_type: (&str, &str),
        samples: Vec<(i32, Vec<i64>, Vec<u64>)>,
    ) -> Profile {
        Profile {
            sample_type: Some(ValueType {
                type_strindex: b.string(sample_type.0),
                unit_strindex: b.string(sample_type.1),
            }),
            time_unix_nano: T0,
            duration_nano: 10_000_000_000,
            samples: samples
                .into_iter()
                .map(|(stack_index, values, timestamps_unix_nano)| Sample {
                    stack_index,
                    values,
                    timestamps_unix_nano,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// A process of `app` as the `profiling` receiver emits it: CPU in `main;compute` (3
    /// timestamps), off-CPU in `main;read` (1.5 + 2.5 ms) and `main;nanosleep` (3 ms), a
    /// value per timestamp.
    fn cpu_and_off_cpu() -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let compute = main_then(&mut b, "compute");
        let read = main_then(&mut b, "read");
        let sleep = main_then(&mut b, "nanosleep");
        let cpu = profile_of(
            &mut b,
            ("samples", "count"),
            vec![(compute, vec![], vec![T0 + 1, T0 + 2, T0 + 3])],
        );
        let off_cpu = profile_of(
            &mut b,
            ("off_cpu", "nanoseconds"),
            vec![
                (read, vec![1_500_000, 2_500_000], vec![T0 + 4, T0 + 5]),
                (sleep, vec![3_000_000], vec![T0 + 6]),
            ],
        );
        batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "app")],
                    ..Default::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![cpu, off_cpu],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    /// (name, unit, folded stacks sorted, samples, total) of each graph.
    type Drawn = (String, String, Vec<(String, u64)>, u64, u64);

    fn drawn(graphs: &[folded::Graph]) -> Vec<Drawn> {
        graphs
            .iter()
            .map(|g| {
                let mut stacks: Vec<(String, u64)> =
                    g.stacks.iter().map(|(s, v)| (s.clone(), *v)).collect();
                stacks.sort();
                (
                    g.sample_type.clone(),
                    g.unit.clone(),
                    stacks,
                    g.samples,
                    g.total,
                )
            })
            .collect()
    }

    #[test]
    fn off_cpu_is_a_graph_of_its_own_as_wide_as_its_values() {
        let mut acc = Accumulator::default();
        acc.add(&cpu_and_off_cpu(), 0, &mut |_| true);
        let s = |t: &str| t.to_owned();
        assert_eq!(
            drawn(&acc.take()),
            [
                (s("samples"), s("count"), vec![(s("main;compute"), 3)], 1, 3),
                (
                    s("off_cpu"),
                    s("nanoseconds"),
                    vec![
                        (s("main;nanosleep"), 3_000_000),
                        (s("main;read"), 4_000_000)
                    ],
                    2,
                    7_000_000
                ),
            ]
        );
    }

    #[test]
    fn a_type_seen_with_another_unit_is_another_graph() {
        let mut b = DictionaryBuilder::new();
        let read = main_then(&mut b, "read");
        let profiles: Vec<Profile> = [
            (("off_cpu", "nanoseconds"), 5),
            (("off_cpu", "count"), 2),
            // A sender's own type named as the second graph is: a graph of its own.
            (("off_cpu_count", "count"), 1),
            (("off_cpu", "nanoseconds"), 5),
            // Both names a third unit would get are taken: numbered.
            (("off_cpu_bytes", "count"), 7),
            (("off_cpu", "bytes"), 9),
        ]
        .into_iter()
        .map(|(t, v)| profile_of(&mut b, t, vec![(read, vec![v], vec![])]))
        .collect();
        let batch = batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        );
        let mut acc = Accumulator::default();
        acc.add(&batch, T0, &mut |_| true);
        let graphs: Vec<(String, String, u64)> = acc
            .take()
            .into_iter()
            .map(|g| (g.sample_type, g.unit, g.total))
            .collect();
        let s = |t: &str| t.to_owned();
        assert_eq!(
            graphs,
            [
                (s("off_cpu"), s("nanoseconds"), 10),
                (s("off_cpu_count"), s("count"), 2),
                (s("off_cpu_count_count"), s("count"), 1),
                (s("off_cpu_bytes"), s("count"), 7),
                (s("off_cpu_bytes_2"), s("bytes"), 9),
            ]
        );
    }

    #[tokio::test]
    async fn on_and_off_cpu_make_two_svgs_titled_by_type_and_unit() {
        let dir = scratch("off-cpu");
        let e = exporter(&config(&dir));
        e.export(cpu_and_off_cpu()).await.expect("export");
        e.shutdown().await.expect("shutdown flushes");
        let time = utc::compact(T0);
        let start = utc::rfc3339_seconds(T0);
        let svc = dir.join("app");
        assert_eq!(
            svgs_in(&svc),
            [format!("off_cpu-{time}.svg"), format!("samples-{time}.svg")]
        );
        let read = |name: &str| std::fs::read_to_string(svc.join(name)).expect("svg");
        let off = read(&format!("off_cpu-{time}.svg"));
        assert_well_formed(&off);
        assert!(
            off.contains(&format!("app off_cpu nanoseconds {start}")),
            "title"
        );
        assert!(
            off.contains("2 samples, 7000000 nanoseconds in total"),
            "subtitle"
        );
        assert!(off.contains("read") && off.contains("nanosleep"));
        assert!(
            !off.contains("compute"),
            "no CPU frame in the off-CPU graph"
        );
        let on = read(&format!("samples-{time}.svg"));
        assert_well_formed(&on);
        assert!(on.contains(&format!("app samples count {start}")), "title");
        assert!(on.contains("1 samples, 3 samples in total"), "subtitle");
        assert!(on.contains("compute") && !on.contains("nanosleep"));
        assert_eq!(read("latest-off_cpu.svg"), off);
        assert_eq!(read("latest-samples.svg"), on);
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- retention and the service cap ----------------------------------------------------

    fn age(path: &Path, by: Duration) {
        let f = std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open");
        f.set_modified(std::time::SystemTime::now() - by)
            .expect("mtime");
    }

    #[tokio::test]
    async fn max_age_deletes_expired_graphs_and_empty_services() {
        let dir = scratch("max-age");
        let e = exporter(&Config {
            max_age: Duration::from_secs(3600),
            ..config(&dir)
        });
        let mut p = fixture("go-goroutine.pb.gz");
        e.export(batch_of(&p, "old")).await.expect("export");
        e.export(batch_of(&p, "cart")).await.expect("export");
        e.inner.flush().await.expect("flush");
        let first = svgs_in(&dir.join("cart"));
        assert_eq!(first.len(), 1);
        // Both services' graphs are two hours old now.
        for svc in ["old", "cart"] {
            for name in names_in(&dir.join(svc)) {
                age(&dir.join(svc).join(name), Duration::from_secs(7200));
            }
        }
        // A new interval for cart only.
        p.time_nanos += 60_000_000_000;
        e.export(batch_of(&p, "cart")).await.expect("export");
        e.inner.flush().await.expect("flush");
        let now = svgs_in(&dir.join("cart"));
        assert_eq!(now.len(), 1, "{now:?}");
        assert_ne!(now, first, "the old one went, the new one stayed");
        assert!(
            !dir.join("old").exists(),
            "a service with no graph left loses its folder: {:?}",
            names_in(&dir)
        );
        let index = std::fs::read_to_string(dir.join(INDEX_HTML)).expect("index");
        assert!(
            !hrefs(&index).iter().any(|h| h.starts_with("old/")),
            "{index}"
        );
        assert_well_formed_html_links(&dir);
        e.shutdown().await.expect("shutdown");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn max_services_drops_new_services_and_counts_them() {
        let dir = scratch("max-services");
        let telemetry = Telemetry::new();
        let c = Config {
            max_services: 2,
            ..config(&dir)
        };
        let e = FlamegraphExporter::new(checked(c.clone()), "flamegraph/capped", &telemetry)
            .expect("create");
        for service in ["a", "b", "c", "a", "d"] {
            e.export(go_cpu(service)).await.expect("export");
        }
        e.inner.flush().await.expect("flush");
        let folders: Vec<String> = names_in(&dir)
            .into_iter()
            .filter(|n| dir.join(n).is_dir())
            .collect();
        assert_eq!(folders, ["a", "b"]);
        let dropped = telemetry.value(
            "profcol_exporter_service_cap_dropped_profiles_total",
            &[("exporter", "flamegraph/capped")],
        );
        // go-cpu is one profile per sample type: two per batch, c and d dropped.
        assert_eq!(dropped, Some(4));
        e.shutdown().await.expect("shutdown");

        // Folders of an earlier run hold their places after a restart.
        let e = FlamegraphExporter::new(checked(c.clone()), "flamegraph/capped", &telemetry)
            .expect("create");
        e.export(go_cpu("c")).await.expect("export");
        e.export(go_cpu("b")).await.expect("export");
        e.shutdown().await.expect("shutdown");
        assert!(!dir.join("c").exists());
        assert_eq!(svgs_in(&dir.join("b")).len(), 4, "two types, two runs");
        let _ = std::fs::remove_dir_all(dir);
    }

    // ---- disk faults ----------------------------------------------------------------------

    /// Every file under `dir`, recursively, relative to it.
    fn all_files(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).expect("dir") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().expect("type").is_dir() {
                found.extend(
                    all_files(&entry.path())
                        .into_iter()
                        .map(|f| format!("{name}/{f}")),
                );
            } else {
                found.push(name);
            }
        }
        found.sort();
        found
    }

    /// A real full disk (a filled 512 KiB tmpfs): the flush fails retryably, leaves no temp
    /// file, and the graphs it could not write are written at the next flush once space is
    /// freed.
    #[tokio::test]
    async fn graphs_a_full_disk_refused_are_written_at_the_next_flush() {
        use profcol_core::exporterhelper::disk::testing::TinyDisk;
        let Some(tiny) = TinyDisk::mount("flamegraph", 512) else {
            return;
        };
        let dir = tiny.dir.join("fg");
        let e = exporter(&config(&dir));
        e.export(go_cpu("cart")).await.expect("export");
        let filler = tiny.dir.join("filler");
        tiny.fill(&filler);
        let err = e.inner.flush().await.expect_err("disk full");
        assert!(err.is_retryable(), "{err}");
        assert!(err.to_string().contains("kept for the next flush"), "{err}");
        let files = all_files(&dir);
        assert!(
            files.iter().all(|f| !f.ends_with(".tmp")),
            "no temp file stays: {files:?}"
        );
        std::fs::remove_file(&filler).expect("free the disk");
        // Nothing new arrived: the shutdown flush writes what was kept.
        e.shutdown().await.expect("written now");
        let svgs = svgs_in(&dir.join("cart"));
        assert_eq!(svgs.len(), 2, "cpu and samples, once each: {svgs:?}");
        let index = std::fs::read_to_string(dir.join(store::INDEX_HTML)).expect("index");
        for svg in &svgs {
            assert!(index.contains(svg.as_str()), "{svg} is listed");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn stale_temp_files_are_swept_at_start_and_files_are_private() {
        use profcol_core::exporterhelper::disk::testing::mode;
        let dir = scratch("sweep");
        std::fs::create_dir_all(dir.join("cart")).expect("dir");
        let stale = ".cpu-x.svg.99999999-0.tmp";
        // pid 1 is alive: another collector sharing the folder may be writing it.
        let live = ".index.html.1-0.tmp";
        std::fs::write(dir.join(stale), b"x").expect("write");
        std::fs::write(dir.join(live), b"x").expect("write");
        std::fs::write(dir.join("cart").join(stale), b"x").expect("write");
        let _e = exporter(&config(&dir));
        assert_eq!(all_files(&dir), [live]);
        let fresh = dir.join("made/here");
        let e = exporter(&config(&fresh));
        e.export(go_cpu("cart")).await.expect("export");
        e.shutdown().await.expect("shutdown");
        assert_eq!(mode(&dir.join("made")), 0o700);
        assert_eq!(mode(&fresh), 0o700);
        assert_eq!(mode(&fresh.join("cart")), 0o700);
        for f in all_files(&fresh) {
            assert_eq!(mode(&fresh.join(&f)), 0o600, "{f}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A pprof of `main` calling each `(function, trace id)` once, the trace given as the
    /// `trace_id`/`span_id` labels that become the sample's link.
    fn traced_batch(calls: &[(&str, Option<&str>)]) -> ProfileBatch {
        let mut p = pp::Profile {
            string_table: vec![String::new()],
            ..Default::default()
        };
        let s = |p: &mut pp::Profile, text: &str| -> i64 {
            p.string_table.push(text.to_owned());
            p.string_table.len() as i64 - 1
        };
        let (samples, count) = (s(&mut p, "samples"), s(&mut p, "count"));
        p.sample_type = vec![pp::ValueType {
            r#type: samples,
            unit: count,
        }];
        let function = |p: &mut pp::Profile, name: &str| -> u64 {
            let name = s(p, name);
            let id = p.function.len() as u64 + 1;
            p.function.push(pp::Function {
                id,
                name,
                ..Default::default()
            });
            p.location.push(pp::Location {
                id,
                line: vec![pp::Line {
                    function_id: id,
                    ..Default::default()
                }],
                ..Default::default()
            });
            id
        };
        let main = function(&mut p, "main");
        let (trace_key, span_key) = (s(&mut p, "trace_id"), s(&mut p, "span_id"));
        let span = s(&mut p, "00f067aa0ba902b7");
        for &(name, trace) in calls {
            let leaf = function(&mut p, name);
            let label = match trace {
                Some(t) => {
                    let t = s(&mut p, t);
                    vec![
                        pp::Label {
                            key: span_key,
                            str: span,
                            ..Default::default()
                        },
                        pp::Label {
                            key: trace_key,
                            str: t,
                            ..Default::default()
                        },
                    ]
                }
                None => vec![],
            };
            p.sample.push(pp::Sample {
                location_id: vec![leaf, main],
                value: vec![1],
                label,
            });
        }
        pprof_to_batch(&prost::Message::encode_to_vec(&p), ToOtlpOptions::default())
            .expect("translates")
    }

    #[test]
    fn a_trace_filter_draws_only_that_traces_samples() {
        const A: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
        const B: &str = "0af7651916cd43dd8448eb211c80319c";
        let batch = traced_batch(&[("a", Some(A)), ("b", Some(B)), ("c", None), ("a2", Some(A))]);
        let config = parse(&format!("directory: /tmp/x\ntrace_id: {A}")).expect("valid");
        let mut acc = Accumulator::for_trace(config.trace_filter().expect("an id"));
        acc.add(&batch, T0, &mut |_| true);
        let s = |t: &str| t.to_owned();
        assert_eq!(
            drawn(&acc.take()),
            [(
                s("samples"),
                s("count"),
                vec![(s("main;a"), 1), (s("main;a2"), 1)],
                2,
                2
            )]
        );
        // A batch with nothing of the trace makes no graph at all.
        acc.add(
            &traced_batch(&[("b", Some(B)), ("c", None)]),
            T0,
            &mut |_| true,
        );
        assert!(acc.is_empty());
        // Without the filter, every sample.
        let mut all = Accumulator::default();
        all.add(&batch, T0, &mut |_| true);
        assert_eq!(all.take()[0].samples, 4);
    }

    #[test]
    fn a_trace_id_that_is_not_one_is_refused() {
        for bad in [
            "abc",
            "4bf92f3577b34da6a3ce929d0e0e473g",
            "00000000000000000000000000000000",
        ] {
            let config = parse(&format!("directory: /tmp/x\ntrace_id: \"{bad}\"")).expect("parses");
            let errors = config_errors(&config);
            assert!(
                errors.iter().any(|e| e.to_string().contains("trace_id")),
                "{bad}: {errors:?}"
            );
        }
    }
}
