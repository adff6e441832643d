//! The service: a checked config becomes a graph of components that is built, started
//! and shut down in phases ([`Graph`]).

mod graph;
mod load;
mod pipeline;
mod replay;
mod run;
mod status;

#[cfg(test)]
pub(crate) use graph::open_offline as open_offline_for_test;
pub use graph::{Graph, Running};
pub use load::{CollectorConfig, Node, Pipeline, load};
pub use replay::{ReplayError, ReplayOutcome, ReplayRequest, replay};
pub use run::{ServiceError, ServiceOptions, run};
pub use status::{ComponentStatus, Status};

#[cfg(test)]
mod tests {
    //! Graph tests: configs as a user writes them, run with test components.

    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::telemetry::Telemetry;
    use crate::testkit::{registry, resource_attribute, sink_contents};

    fn env(name: &str) -> Option<String> {
        (name == "SAMPLES").then(|| "3".to_owned())
    }

    fn load_yaml(yaml: &str) -> Result<CollectorConfig, crate::config::ConfigErrors> {
        load(&[("test.yaml".into(), yaml.into())], &env, &registry())
    }

    /// Runs `yaml` until every named sink holds `want` samples (or `wait` passes), then shuts
    /// down and checks the sinks.
    async fn run_until(yaml: &str, want: &[(&str, usize)], wait: Duration) -> Telemetry {
        let config = load_yaml(yaml).expect("valid config");
        let telemetry = Telemetry::new();
        let stop = CancellationToken::new();
        let service = {
            let (t, s) = (telemetry.clone(), stop.clone());
            tokio::spawn(async move {
                run(config, t, Status::new(), s, ServiceOptions::default()).await
            })
        };
        let samples = |name: &str| {
            sink_contents(name)
                .iter()
                .map(|b| b.sample_count())
                .sum::<usize>()
        };
        let deadline = tokio::time::Instant::now() + wait;
        while want.iter().any(|(n, w)| samples(n) < *w) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.cancel();
        service.await.expect("joined").expect("ran");
        for (name, w) in want {
            assert_eq!(samples(name), *w, "sink {name}");
        }
        telemetry
    }

    #[tokio::test]
    async fn a_receiver_shared_by_two_pipelines_feeds_both() {
        let t = run_until(
            r#"
receivers:
  test_source:
    service: cart
    batches: 4
    samples_per_batch: ${env:SAMPLES}
exporters:
  test_sink/a: {name: fanout-a}
  test_sink/b: {name: fanout-b}
service:
  pipelines:
    profiles/a: {receivers: [test_source], exporters: [test_sink/a]}
    profiles/b: {receivers: [test_source], exporters: [test_sink/b]}
"#,
            &[("fanout-a", 12), ("fanout-b", 12)],
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            t.value(
                "otelcol_receiver_accepted_profile_samples_total",
                &[("receiver", "test_source")]
            ),
            Some(12)
        );
        assert_eq!(
            t.value(
                "otelcol_exporter_sent_profile_samples_total",
                &[("exporter", "test_sink/a")]
            ),
            Some(12)
        );
    }

    #[tokio::test]
    async fn an_exporter_fed_by_two_pipelines_gets_both() {
        run_until(
            r#"
receivers:
  test_source/x: {service: x, batches: 2, samples_per_batch: 5}
  test_source/y: {service: y, batches: 3, samples_per_batch: 1}
exporters:
  test_sink: {name: fanin}
service:
  pipelines:
    profiles/x: {receivers: [test_source/x], exporters: [test_sink]}
    profiles/y: {receivers: [test_source/y], exporters: [test_sink]}
"#,
            &[("fanin", 13)],
            Duration::from_secs(5),
        )
        .await;
        let services: Vec<String> = sink_contents("fanin")
            .iter()
            .filter_map(|b| resource_attribute(b, "service.name"))
            .collect();
        assert_eq!(services.iter().filter(|s| *s == "x").count(), 2);
        assert_eq!(services.iter().filter(|s| *s == "y").count(), 3);
    }

    #[tokio::test]
    async fn a_processor_edits_its_own_copy_only() {
        run_until(
        r#"
receivers:
  test_source: {service: cart, batches: 2, samples_per_batch: 2}
processors:
  test_tag: {key: env, value: prod}
exporters:
  test_sink/tagged: {name: cow-tagged}
  test_sink/plain: {name: cow-plain}
service:
  pipelines:
    profiles/tagged: {receivers: [test_source], processors: [test_tag], exporters: [test_sink/tagged]}
    profiles/plain: {receivers: [test_source], exporters: [test_sink/plain]}
"#,
        &[("cow-tagged", 4), ("cow-plain", 4)],
        Duration::from_secs(5),
    )
    .await;
        let tagged = sink_contents("cow-tagged");
        let plain = sink_contents("cow-plain");
        assert!(
            tagged
                .iter()
                .all(|b| resource_attribute(b, "env").as_deref() == Some("prod"))
        );
        assert!(plain.iter().all(|b| resource_attribute(b, "env").is_none()));
        // The dictionary was not edited, so both pipelines still share it.
        assert!(
            std::ptr::eq(tagged[0].dictionary(), plain[0].dictionary())
                || std::ptr::eq(tagged[0].dictionary(), plain[1].dictionary())
        );
    }

    #[tokio::test]
    async fn shutdown_flushes_what_processors_hold() {
        run_until(
            r#"
receivers:
  test_source: {service: held, batches: 3, samples_per_batch: 2}
processors:
  test_hold:
exporters:
  test_sink: {name: held}
service:
  pipelines:
    profiles: {receivers: [test_source], processors: [test_hold], exporters: [test_sink]}
"#,
            // Nothing arrives before shutdown; all 6 after.
            &[("held", 6)],
            Duration::from_millis(300),
        )
        .await;
    }

    #[tokio::test]
    async fn a_receiver_that_ignores_shutdown_is_aborted_and_pipelines_still_flush() {
        let config = load_yaml(
            r#"
receivers:
  test_source: {service: stuck, batches: 2, samples_per_batch: 3, ignore_shutdown: true}
processors:
  test_hold:
exporters:
  test_sink: {name: stubborn}
service:
  pipelines:
    profiles: {receivers: [test_source], processors: [test_hold], exporters: [test_sink]}
"#,
        )
        .expect("valid");
        let stop = CancellationToken::new();
        let options = ServiceOptions {
            shutdown_timeout: Duration::from_millis(300),
            ..ServiceOptions::default()
        };
        let s = stop.clone();
        let service =
            tokio::spawn(
                async move { run(config, Telemetry::new(), Status::new(), s, options).await },
            );
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(2), service)
            .await
            .expect("stops despite the receiver")
            .expect("joined")
            .expect("ran");
        // What the hold processor kept was flushed once the receiver was gone.
        assert_eq!(
            sink_contents("stubborn")
                .iter()
                .map(|b| b.sample_count())
                .sum::<usize>(),
            6
        );
    }

    /// Runs `yaml` for `wait`, then stops it; gives the result and whether it was ever ready.
    async fn run_and_watch_readiness(
        yaml: &str,
        wait: Duration,
    ) -> (Result<(), ServiceError>, bool) {
        let config = load_yaml(yaml).expect("valid");
        let status = Status::new();
        let stop = CancellationToken::new();
        let (s, st) = (stop.clone(), status.clone());
        let service = tokio::spawn(async move {
            run(config, Telemetry::new(), st, s, ServiceOptions::default()).await
        });
        tokio::time::sleep(wait).await;
        let ready = status.ready_since().is_some();
        stop.cancel();
        let result = tokio::time::timeout(Duration::from_secs(2), service)
            .await
            .expect("stops")
            .expect("joined");
        (result, ready)
    }

    #[tokio::test]
    async fn a_receiver_that_fails_to_start_is_reported_and_never_ready() {
        let (result, ready) = run_and_watch_readiness(
            r#"
receivers:
  test_source: {fail_to_start: true}
  test_source/fine: {service: a}
exporters:
  test_sink: {name: never-ready}
service:
  pipelines:
    profiles: {receivers: [test_source, test_source/fine], exporters: [test_sink]}
"#,
            Duration::from_millis(300),
        )
        .await;
        assert!(!ready, "a failed receiver must not be reported ready");
        let err = result.expect_err("the failure ends the run");
        assert!(err.to_string().contains("cannot start"), "{err}");
    }

    #[tokio::test]
    async fn a_receiver_with_nothing_to_do_does_not_hold_readiness_back() {
        let (result, ready) = run_and_watch_readiness(
            r#"
receivers:
  test_source: {return_at_once: true}
exporters:
  test_sink: {name: idle}
service:
  pipelines:
    profiles: {receivers: [test_source], exporters: [test_sink]}
"#,
            Duration::from_millis(300),
        )
        .await;
        assert!(ready);
        result.expect("clean run");
    }

    #[test]
    fn every_config_error_is_reported_with_its_path() {
        let errors = load_yaml(
            r#"
receivers:
  test_source: {service: a, batchs: 1}
  nope: {}
processors:
  test_tag:
exporters:
  test_sink: {name: x}
  test_sink/unused: {name: y}
extensions: {}
service:
  extensions: [health_check]
  pipelines:
    profiles: {receivers: [test_source, test_source], processors: [missing], exporters: []}
    traces: {receivers: [test_source], exporters: [test_sink]}
    profiles/b: {receivers: [test_source], exporters: [test_sink], procesors: []}
"#,
        )
        .err()
        .expect("invalid");
        let text: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "receivers::test_source::batchs: unknown field `batchs`, expected one of `service`, `batches`, `samples_per_batch`, `ignore_shutdown`, `fail_to_start`, `return_at_once`",
                "receivers::nope: unknown receiver type \"nope\"; known types: test_source",
                "service::extensions[0]: references extension \"health_check\", which is not defined under extensions",
                "service::pipelines::profiles::receivers[1]: test_source is listed twice",
                "service::pipelines::profiles::processors[0]: references processor \"missing\", which is not defined under processors",
                "service::pipelines::profiles: must have at least one exporter",
                "service::pipelines::traces: pipeline \"traces\": profcol carries the profiles signal only; use profiles or profiles/NAME",
                "service::pipelines::profiles/b::procesors: unknown field `procesors`, expected one of `receivers`, `processors`, `exporters`",
            ]
        );
    }

    #[test]
    fn unused_components_warn_and_later_files_override() {
        let base = "receivers: {test_source: {service: a}}\nexporters: {test_sink: {name: one}, test_sink/spare: {name: two}}\nservice: {pipelines: {profiles: {receivers: [test_source], exporters: [test_sink]}}}\n";
        let over = "receivers: {test_source: {service: b}}\n";
        let config = load(
            &[
                ("a.yaml".into(), base.into()),
                ("b.yaml".into(), over.into()),
            ],
            &env,
            &registry(),
        )
        .expect("valid");
        assert_eq!(
            config.warnings,
            ["exporter test_sink/spare is defined but no pipeline uses it"]
        );
        assert_eq!(config.pipelines.len(), 1);
    }

    #[test]
    fn top_level_typos_and_env_errors_are_reported() {
        let errors = load_yaml("recievers: {}\n").err().expect("invalid");
        assert!(
            errors
                .to_string()
                .starts_with("recievers: unknown field `recievers`, expected one of `receivers`"),
            "{errors}"
        );
        let errors = load_yaml(
            "receivers:\n  test_source:\n    service: ${env:NOT_SET}\nservice: {pipelines: {}}\n",
        )
        .err()
        .expect("invalid");
        assert!(
            errors.to_string().contains(
                "receivers::test_source::service: environment variable NOT_SET is not set"
            ),
            "{errors}"
        );
    }

    /// Processor type `test_panic`: passes batches on, and panics on the `on_batch`-th.
    mod panicking {
        use async_trait::async_trait;
        use serde::Deserialize;

        use crate::component::{
            BuildError, ProcessError, Processor, ProcessorCreateContext, ProcessorFactory,
            Stability,
        };
        use crate::config::Validate;
        use crate::pdata::ProfileBatch;

        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct PanicConfig {
            pub on_batch: usize,
        }
        impl Validate for PanicConfig {}

        pub struct PanicFactory;

        impl ProcessorFactory for PanicFactory {
            type Config = PanicConfig;
            const TYPE_NAME: &'static str = "test_panic";
            const STABILITY: Stability = Stability::Development;
            fn create(
                &self,
                config: crate::config::Checked<PanicConfig>,
                _: &ProcessorCreateContext,
            ) -> Result<Box<dyn Processor>, BuildError> {
                let config = config.into_inner();
                Ok(Box::new(Panicking {
                    on_batch: config.on_batch,
                    seen: 0,
                }))
            }
        }

        struct Panicking {
            on_batch: usize,
            seen: usize,
        }

        #[async_trait]
        impl Processor for Panicking {
            async fn process(
                &mut self,
                batch: ProfileBatch,
                out: &mut Vec<ProfileBatch>,
            ) -> Result<(), ProcessError> {
                self.seen += 1;
                if self.seen == self.on_batch {
                    panic!("batch {} is cursed", self.seen);
                }
                out.push(batch);
                Ok(())
            }
        }

        /// Exporter type `test_panic_sink`: a queued exporter that panics on its
        /// `on_batch`-th batch and counts the samples of the others.
        pub struct PanicSinkFactory;

        pub static PANIC_SINK_SAMPLES: std::sync::atomic::AtomicUsize =
            std::sync::atomic::AtomicUsize::new(0);

        impl crate::component::ExporterFactory for PanicSinkFactory {
            type Config = PanicConfig;
            const TYPE_NAME: &'static str = "test_panic_sink";
            const STABILITY: Stability = Stability::Development;
            fn helper_settings(
                &self,
                _: &PanicConfig,
            ) -> crate::exporterhelper::ExporterHelperSettings {
                let mut s = crate::exporterhelper::ExporterHelperSettings::default();
                s.queue.num_consumers = 1;
                s
            }
            fn create(
                &self,
                config: crate::config::Checked<PanicConfig>,
                _: &crate::component::CreateContext,
            ) -> Result<Box<dyn crate::component::Exporter>, BuildError> {
                let config = config.into_inner();
                Ok(Box::new(PanicSink {
                    on_batch: config.on_batch,
                    seen: std::sync::atomic::AtomicUsize::new(0),
                }))
            }
        }

        struct PanicSink {
            on_batch: usize,
            seen: std::sync::atomic::AtomicUsize,
        }

        #[async_trait]
        impl crate::component::Exporter for PanicSink {
            async fn export(
                &self,
                batch: ProfileBatch,
            ) -> Result<(), crate::component::ExportError> {
                use std::sync::atomic::Ordering;
                let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
                if seen == self.on_batch {
                    panic!("export {seen} is cursed");
                }
                PANIC_SINK_SAMPLES.fetch_add(batch.sample_count(), Ordering::SeqCst);
                Ok(())
            }
        }

        /// Receiver type `test_panic_source`: says it started, then panics.
        pub struct PanicSourceFactory;

        impl crate::component::ReceiverFactory for PanicSourceFactory {
            type Config = PanicConfig;
            const TYPE_NAME: &'static str = "test_panic_source";
            const STABILITY: Stability = Stability::Development;
            fn create(
                &self,
                _: crate::config::Checked<PanicConfig>,
                _: &crate::component::CreateContext,
            ) -> Result<Box<dyn crate::component::Receiver>, BuildError> {
                Ok(Box::new(PanicSource))
            }
        }

        struct PanicSource;

        #[async_trait]
        impl crate::component::Receiver for PanicSource {
            async fn run(
                self: Box<Self>,
                ctx: crate::component::ReceiverContext,
            ) -> Result<(), crate::component::ComponentError> {
                ctx.started.ready();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                panic!("the receiver tripped");
            }
        }

        pub fn registry() -> crate::component::Registry {
            let mut r = crate::testkit::registry();
            r.receiver(PanicSourceFactory)
                .expect("one test_panic_source");
            r.processor(PanicFactory).expect("one test_panic");
            r.exporter(PanicSinkFactory).expect("one test_panic_sink");
            r
        }
    }

    #[tokio::test]
    async fn a_panicking_processor_fails_its_pipeline_loudly() {
        let reg = panicking::registry();
        let config = load(
            &[(
                "test.yaml".into(),
                r#"
receivers:
  test_source: {service: cart, batches: 4, samples_per_batch: 2}
processors:
  test_panic: {on_batch: 2}
exporters:
  test_sink: {name: doomed}
service:
  pipelines:
    profiles: {receivers: [test_source], processors: [test_panic], exporters: [test_sink]}
"#
                .into(),
            )],
            &env,
            &reg,
        )
        .expect("valid");
        let telemetry = Telemetry::new();
        let status = Status::new();
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            run(
                config,
                telemetry.clone(),
                status.clone(),
                CancellationToken::new(),
                ServiceOptions::default(),
            ),
        )
        .await
        .expect("the panic ends the run without a stop signal");
        let err = result.expect_err("a failure, not a clean stop");
        let text = err.to_string();
        assert!(text.starts_with("pipeline/profiles failed"), "{text}");
        assert!(
            text.contains("processor/test_panic panicked: batch 2 is cursed"),
            "{text}"
        );
        // What health_check reads: not ready, and the pipeline's status says why.
        assert!(!status.is_ready());
        assert!(matches!(
            status.components().get("pipeline/profiles"),
            Some(ComponentStatus::FatalError(m)) if m.contains("batch 2 is cursed")
        ));
        assert_eq!(
            telemetry.value(
                "profcol_component_panics_total",
                &[("component", "processor/test_panic")]
            ),
            Some(1)
        );
        // The batch before the panic was exported.
        assert_eq!(sink_contents("doomed").len(), 1);
    }

    #[test]
    fn deadlines_saturate_instead_of_overflowing() {
        let now = tokio::time::Instant::now();
        let far = run::after(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(365 * 86_400));
        assert_eq!(
            run::after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }

    #[tokio::test]
    async fn a_panicking_exporter_is_counted_and_later_batches_still_flow() {
        use std::sync::atomic::Ordering;
        let reg = panicking::registry();
        let config = load(
            &[(
                "test.yaml".into(),
                r#"
receivers:
  test_source: {service: cart, batches: 4, samples_per_batch: 3}
exporters:
  test_panic_sink: {on_batch: 2}
service:
  pipelines:
    profiles: {receivers: [test_source], exporters: [test_panic_sink]}
"#
                .into(),
            )],
            &env,
            &reg,
        )
        .expect("valid");
        let telemetry = Telemetry::new();
        let status = Status::new();
        let stop = CancellationToken::new();
        let service = {
            let (t, st, s) = (telemetry.clone(), status.clone(), stop.clone());
            tokio::spawn(async move { run(config, t, st, s, ServiceOptions::default()).await })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while panicking::PANIC_SINK_SAMPLES.load(Ordering::SeqCst) < 9
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Batches 1, 3 and 4 arrived: the consumer carried on after the panic on 2.
        assert_eq!(panicking::PANIC_SINK_SAMPLES.load(Ordering::SeqCst), 9);
        assert!(status.is_ready(), "an exporter panic fails nothing");
        assert_eq!(
            telemetry.value(
                "profcol_component_panics_total",
                &[("component", "exporter/test_panic_sink")]
            ),
            Some(1)
        );
        assert_eq!(
            telemetry.value(
                "otelcol_exporter_send_failed_profile_samples_total",
                &[("exporter", "test_panic_sink")]
            ),
            Some(3)
        );
        stop.cancel();
        service.await.expect("joined").expect("a clean stop");
    }

    #[tokio::test]
    async fn a_panicking_receiver_is_a_fatal_error_not_a_silent_death() {
        let reg = panicking::registry();
        let config = load(
            &[(
                "test.yaml".into(),
                r#"
receivers:
  test_panic_source: {}
exporters:
  test_sink: {name: tripped}
service:
  pipelines:
    profiles: {receivers: [test_panic_source], exporters: [test_sink]}
"#
                .into(),
            )],
            &env,
            &reg,
        )
        .expect("valid");
        let telemetry = Telemetry::new();
        let status = Status::new();
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            run(
                config,
                telemetry.clone(),
                status.clone(),
                CancellationToken::new(),
                ServiceOptions::default(),
            ),
        )
        .await
        .expect("the panic ends the run");
        let text = result.expect_err("a failure").to_string();
        assert_eq!(
            text,
            "receiver/test_panic_source failed: panicked: the receiver tripped"
        );
        assert!(!status.is_ready());
        assert_eq!(
            telemetry.value(
                "profcol_component_panics_total",
                &[("component", "receiver/test_panic_source")]
            ),
            Some(1)
        );
    }

    /// Building alone: every component made once per id, in the order they start.
    #[test]
    fn build_makes_each_component_once_in_start_order() {
        let config = load_yaml(
        r#"
receivers:
  test_source: {service: cart, batches: 1}
processors:
  test_tag: {key: a, value: b}
exporters:
  test_sink/a: {name: build-a}
  test_sink/b: {name: build-b}
service:
  pipelines:
    profiles/a: {receivers: [test_source], processors: [test_tag], exporters: [test_sink/b, test_sink/a]}
    profiles/b: {receivers: [test_source], processors: [test_tag], exporters: [test_sink/b]}
"#,
    )
    .expect("valid config");
        let graph =
            Graph::build(&config, &Telemetry::new(), ServiceOptions::default()).expect("builds");
        assert_eq!(
            graph.components(),
            [
                // In the order pipelines first list them.
                "exporter/test_sink/b",
                "exporter/test_sink/a",
                "processor/test_tag in pipeline/profiles/a",
                "processor/test_tag in pipeline/profiles/b",
                "receiver/test_source",
            ]
        );
    }

    /// Receiver type `test_broken`: cannot be made.
    struct BrokenFactory;

    impl crate::component::ReceiverFactory for BrokenFactory {
        type Config = crate::testkit::SinkConfig;
        const TYPE_NAME: &'static str = "test_broken";
        const STABILITY: crate::component::Stability = crate::component::Stability::Development;
        fn create(
            &self,
            _: crate::config::Checked<crate::testkit::SinkConfig>,
            ctx: &crate::component::CreateContext,
        ) -> Result<Box<dyn crate::component::Receiver>, crate::component::BuildError> {
            Err(crate::component::BuildError::new(&ctx.id, "cannot be made"))
        }
    }

    /// A component that cannot be made stops the collector before anything starts: receivers
    /// are made last, yet no exporter, pipeline or receiver ran, nor has a status.
    #[tokio::test]
    async fn a_build_error_starts_nothing() {
        let mut reg = registry();
        let _ = reg.receiver(BrokenFactory);
        let config = load(
            &[(
                "test.yaml".into(),
                r#"
receivers:
  test_source: {service: cart, batches: 3}
  test_broken: {}
exporters:
  test_sink: {name: never-started}
service:
  pipelines:
    profiles/a: {receivers: [test_source], exporters: [test_sink]}
    profiles/b: {receivers: [test_broken], exporters: [test_sink]}
"#
                .into(),
            )],
            &env,
            &reg,
        )
        .expect("valid config");
        let status = Status::new();
        let telemetry = Telemetry::new();
        let result = run(
            config,
            telemetry.clone(),
            status.clone(),
            CancellationToken::new(),
            ServiceOptions::default(),
        )
        .await;
        let Err(ServiceError::Build(e)) = result else {
            panic!("expected a build error, got {result:?}");
        };
        assert!(e.to_string().contains("cannot be made"), "{e}");
        assert!(!status.is_ready());
        assert!(
            status.components().is_empty(),
            "nothing started: {:?}",
            status.components()
        );
        assert!(sink_contents("never-started").is_empty());
        assert_eq!(
            telemetry.value(
                "otelcol_receiver_accepted_profile_samples_total",
                &[("receiver", "test_source")]
            ),
            None
        );
    }
}
