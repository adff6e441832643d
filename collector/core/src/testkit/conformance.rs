//! The checks every component passes the same way, generated into each component crate
//! by [`component_conformance!`](crate::component_conformance): its factory's type name
//! and stability, its default config, `testdata/config.yaml` valid,
//! `testdata/typo.yaml` refused at its misspelt key, a create, start and shutdown from
//! `testdata/lifecycle.yaml`, twice, and for processors and exporters the framework's
//! edge counters accounting for every sample sent through them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::component::{
    ComponentId, CreateContext, ExtensionContext, Kind, PipelineId, ProcessorCreateContext,
    ReceiverContext, ReceiverOutput, Registry, Stability, Started,
};
use crate::config::{Value, parse_yaml};
use crate::service::Status;
use crate::telemetry::Telemetry;

/// In `testdata/lifecycle.yaml`, replaced by a fresh scratch directory.
pub const SCRATCH: &str = "@SCRATCH@";

/// How long a component may take to start, and to stop once told.
const STEP: Duration = Duration::from_secs(20);

/// One component's expectations.
pub struct Conformance {
    pub kind: Kind,
    pub type_name: &'static str,
    pub stability: Stability,
    /// The component's crate folder (`CARGO_MANIFEST_DIR`), which holds `testdata/`.
    pub dir: &'static str,
    /// Where the default config fails validation: keys a user must set (`endpoint`).
    pub default_errors: &'static [&'static str],
}

impl Conformance {
    /// A testdata file: the component's config, or a collector config holding it under
    /// its section and type name (for a crate with two factories).
    fn testdata(&self, name: &str) -> Value {
        self.testdata_in(name, Path::new(""))
    }

    /// [`Conformance::testdata`], with [`SCRATCH`] replaced by `scratch`.
    fn testdata_in(&self, name: &str, scratch: &Path) -> Value {
        let path = Path::new(self.dir).join("testdata").join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .replace(SCRATCH, &scratch.display().to_string());
        let value = parse_yaml(name, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match value
            .get(self.kind.section())
            .and_then(|section| section.get(self.type_name))
        {
            Some(config) => config.clone(),
            None => value,
        }
    }

    fn paths(errors: &[crate::config::ConfigError]) -> Vec<String> {
        errors.iter().map(|e| e.path.clone()).collect()
    }

    /// The registry lists the factory under its type name, kind and stability.
    pub fn names(&self, registry: &Registry) {
        assert_eq!(
            registry.list(),
            vec![(self.kind, self.type_name, self.stability)],
            "the factory's type name, kind or stability"
        );
    }

    /// No config at all is the default config: valid, or failing only at the keys a user
    /// must set.
    pub fn default_config(&self, registry: &Registry) {
        let parsed = registry.parse(self.kind, self.type_name, &Value::Null);
        let errors = parsed.err().unwrap_or_default();
        assert_eq!(
            Self::paths(&errors),
            self.default_errors,
            "the default config's errors: {errors:?}"
        );
    }

    /// `testdata/config.yaml`, a config using the component's keys, is valid.
    pub fn testdata_config(&self, registry: &Registry) {
        if let Err(errors) =
            registry.parse(self.kind, self.type_name, &self.testdata("config.yaml"))
        {
            panic!("testdata/config.yaml is invalid: {errors:?}");
        }
    }

    /// `testdata/typo.yaml`, with one misspelt key, fails there and only there, naming
    /// the key.
    pub fn typo(&self, registry: &Registry) {
        let errors = match registry.parse(self.kind, self.type_name, &self.testdata("typo.yaml")) {
            Ok(_) => panic!("testdata/typo.yaml was accepted"),
            Err(errors) => errors,
        };
        let [error] = errors.as_slice() else {
            panic!("testdata/typo.yaml should fail once, at its typo: {errors:?}");
        };
        let key = error.path.rsplit("::").next().unwrap_or_default();
        assert!(
            !key.is_empty() && error.message.starts_with(&format!("unknown field `{key}`")),
            "the typo's error names its key at its path: {error}"
        );
    }
}

impl Conformance {
    /// Creates, starts and shuts down the component from `testdata/lifecycle.yaml` (a
    /// config that needs nothing outside the test: port 0, [`SCRATCH`] for folders),
    /// twice over, with the same folder, `Host` and telemetry: the second run must not
    /// trip over what the first left there (a lock or a file in its folder, state in the
    /// host, a metric registered again). Fixed ports are not checked: the config uses port
    /// 0. A receiver or extension must keep running until told to stop, and stop when
    /// told.
    pub fn lifecycle_in_a_runtime(&self, registry: &Registry) {
        in_a_runtime(self.lifecycle(registry));
    }

    /// [`Conformance::lifecycle_in_a_runtime`], in the caller's runtime.
    pub async fn lifecycle(&self, registry: &Registry) {
        let scratch = Scratch::new(self.type_name, 1);
        let telemetry = Telemetry::new();
        let host = crate::component::Host::default();
        for run in 1..=2 {
            let value = self.testdata_in("lifecycle.yaml", &scratch.0);
            let config = registry
                .parse(self.kind, self.type_name, &value)
                .unwrap_or_else(|e| panic!("testdata/lifecycle.yaml is invalid: {e:?}"));
            let id = ComponentId::new(self.type_name, Some("conformance"));
            let ctx = CreateContext {
                id: id.clone(),
                telemetry: telemetry.clone(),
                host: host.clone(),
            };
            let what = format!("run {run} of {id}");
            match self.kind {
                Kind::Receiver => {
                    let factory = &registry.receivers[self.type_name];
                    let receiver = factory.create(&config, &ctx).unwrap_or_else(|e| {
                        panic!("{what}: create: {}", crate::errors::error_chain(&e))
                    });
                    let (tx, _rx) = tokio::sync::mpsc::channel(16);
                    let (started, mut ready) = Started::new();
                    let shutdown = CancellationToken::new();
                    let task = tokio::spawn(receiver.run(ReceiverContext {
                        id,
                        output: ReceiverOutput::for_test(vec![tx]),
                        started,
                        shutdown: shutdown.clone(),
                        telemetry: ctx.telemetry.clone(),
                    }));
                    tokio::time::timeout(STEP, ready.wait_for(|ready| *ready))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: not ready within {STEP:?}"))
                        .unwrap_or_else(|_| panic!("{what}: returned before it was ready"));
                    assert!(!task.is_finished(), "{what}: stopped before it was told to");
                    shutdown.cancel();
                    stopped(&what, task).await;
                }
                Kind::Extension => {
                    let factory = &registry.extensions[self.type_name];
                    let extension = factory.create(&config, &ctx).unwrap_or_else(|e| {
                        panic!("{what}: create: {}", crate::errors::error_chain(&e))
                    });
                    let shutdown = CancellationToken::new();
                    let task = tokio::spawn(extension.run(ExtensionContext {
                        id,
                        shutdown: shutdown.clone(),
                        telemetry: ctx.telemetry.clone(),
                        status: Status::new(),
                        graph: Default::default(),
                    }));
                    // Extensions say nothing when they are up: give it a moment to fail.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    assert!(!task.is_finished(), "{what}: stopped before it was told to");
                    shutdown.cancel();
                    stopped(&what, task).await;
                }
                Kind::Processor => {
                    let factory = &registry.processors[self.type_name];
                    let pipeline = PipelineId::parse("profiles").expect("a pipeline id");
                    let mut processor = factory
                        .create(
                            &config,
                            &ProcessorCreateContext {
                                base: ctx,
                                pipeline,
                            },
                        )
                        .unwrap_or_else(|e| {
                            panic!("{what}: create: {}", crate::errors::error_chain(&e))
                        });
                    let mut out = Vec::new();
                    tokio::time::timeout(STEP, processor.shutdown(&mut out))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: shutdown took over {STEP:?}"))
                        .unwrap_or_else(|e| {
                            panic!("{what}: shutdown: {}", crate::errors::error_chain(&e))
                        });
                    assert!(out.is_empty(), "{what}: flushed batches it was never given");
                }
                Kind::Exporter => {
                    let factory = &registry.exporters[self.type_name];
                    let exporter = factory.create(&config, &ctx).unwrap_or_else(|e| {
                        panic!("{what}: create: {}", crate::errors::error_chain(&e))
                    });
                    exporter.start().unwrap_or_else(|e| {
                        panic!("{what}: start: {}", crate::errors::error_chain(&e))
                    });
                    tokio::time::timeout(STEP, exporter.shutdown())
                        .await
                        .unwrap_or_else(|_| panic!("{what}: shutdown took over {STEP:?}"))
                        .unwrap_or_else(|e| {
                            panic!("{what}: shutdown: {}", crate::errors::error_chain(&e))
                        });
                }
            }
        }
    }
}

/// Samples the test source sends through a component in [`Conformance::counters_move`].
const SAMPLES: i64 = 3;

impl Conformance {
    /// [`Conformance::counters_move`] in a runtime of its own.
    pub fn counters_move_in_a_runtime(&self, registry: &Registry) {
        in_a_runtime(self.counters_move(registry));
    }

    /// Runs a collector with the component (configured from `testdata/lifecycle.yaml`)
    /// in a pipeline behind the test source (and before the test sink, for a processor)
    /// and checks that the framework's counters of its edges account for every sample:
    /// a processor's incoming and outgoing items, an exporter's samples sent or failed.
    /// `registry` holds the component's factory and the test components.
    pub async fn counters_move(&self, registry: &Registry) {
        let scratch = Scratch::new(self.type_name, 3);
        let id = format!("{}/conformance", self.type_name);
        let mut root = serde_yaml_ng::Mapping::new();
        let yaml = |text: &str| -> Value { serde_yaml_ng::from_str(text).expect("yaml") };
        root.insert(
            "receivers".into(),
            yaml(&format!(
                "test_source: {{service: conformance, batches: 1, samples_per_batch: {SAMPLES}}}"
            )),
        );
        let mut section = serde_yaml_ng::Mapping::new();
        section.insert(
            id.clone().into(),
            self.testdata_in("lifecycle.yaml", &scratch.0),
        );
        root.insert(self.kind.section().into(), Value::Mapping(section));
        let (processors, exporters, labels, counters) = match self.kind {
            Kind::Processor => {
                let sink = format!("conformance-{}-{}", self.type_name, std::process::id());
                root.insert(
                    "exporters".into(),
                    yaml(&format!("test_sink: {{name: {sink}}}")),
                );
                (
                    format!("[{id}]"),
                    "[test_sink]".to_owned(),
                    vec![
                        ("processor", id.clone()),
                        ("pipeline", "profiles".to_owned()),
                    ],
                    [
                        "otelcol_processor_incoming_items_total",
                        "otelcol_processor_outgoing_items_total",
                    ],
                )
            }
            Kind::Exporter => (
                "[]".to_owned(),
                format!("[{id}]"),
                vec![("exporter", id.clone())],
                [
                    "otelcol_exporter_sent_profile_samples_total",
                    "otelcol_exporter_send_failed_profile_samples_total",
                ],
            ),
            Kind::Receiver | Kind::Extension => {
                panic!(
                    "counters_move: a {} has no edge the test source can feed",
                    self.kind.as_str()
                )
            }
        };
        root.insert(
            "service".into(),
            yaml(&format!(
                "pipelines: {{profiles: {{receivers: [test_source], processors: {processors}, exporters: {exporters}}}}}"
            )),
        );
        let text = serde_yaml_ng::to_string(&Value::Mapping(root)).expect("yaml");
        let config =
            crate::service::load(&[("conformance.yaml".into(), text)], &|_| None, registry)
                .unwrap_or_else(|e| panic!("the conformance collector config is invalid: {e}"));
        let telemetry = Telemetry::new();
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let (telemetry, stop) = (telemetry.clone(), stop.clone());
            async move {
                crate::service::run(
                    config,
                    telemetry,
                    Status::new(),
                    stop,
                    crate::service::ServiceOptions::default(),
                )
                .await
            }
        });
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let read = |name: &str| telemetry.value(name, &labels).unwrap_or(0);
        let accounted = || match self.kind {
            // In and out.
            Kind::Processor => read(counters[0]) == SAMPLES && read(counters[1]) == SAMPLES,
            // Sent or failed (an exporter whose backend is not there).
            _ => read(counters[0]) + read(counters[1]) == SAMPLES,
        };
        let started = std::time::Instant::now();
        while !accounted() && started.elapsed() < STEP {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let seen: Vec<(&str, i64)> = counters.iter().map(|c| (*c, read(c))).collect();
        stop.cancel();
        let result = tokio::time::timeout(STEP, run)
            .await
            .unwrap_or_else(|_| panic!("{id}: the collector did not stop"))
            .expect("the service task");
        if let Err(e) = result {
            panic!(
                "{id}: the collector failed: {}",
                crate::errors::error_chain(&e)
            );
        }
        assert!(
            accounted(),
            "{id}: {SAMPLES} samples went in; the edge counters show {seen:?}"
        );
    }
}

/// Runs a check in a runtime of its own: the generated tests are plain `#[test]`s, so
/// that component crates need no tokio macros.
fn in_a_runtime(check: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(check);
}

/// Waits for a receiver's or extension's task to end, cleanly, once told to stop.
async fn stopped(
    what: &str,
    task: tokio::task::JoinHandle<Result<(), crate::component::ComponentError>>,
) {
    match tokio::time::timeout(STEP, task).await {
        Err(_) => panic!("{what}: still running {STEP:?} after it was told to stop"),
        Ok(Err(e)) => panic!("{what}: panicked: {e}"),
        Ok(Ok(Err(e))) => panic!("{what}: {}", crate::errors::error_chain(&e)),
        Ok(Ok(Ok(()))) => {}
    }
}

/// A folder of its own for one run, removed afterwards.
struct Scratch(PathBuf);

impl Scratch {
    fn new(type_name: &str, run: u32) -> Self {
        Scratch(super::scratch_dir(&format!(
            "conformance-{type_name}-{run}"
        )))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kind a [`component_conformance!`](crate::component_conformance) invocation names.
pub fn kind(name: &str) -> Kind {
    match name {
        "receiver" => Kind::Receiver,
        "processor" => Kind::Processor,
        "exporter" => Kind::Exporter,
        "extension" => Kind::Extension,
        other => panic!("component_conformance!: {other} is no component kind"),
    }
}
