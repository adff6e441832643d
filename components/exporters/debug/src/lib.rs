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
use profcol_core::exporterhelper::ExporterHelperSettings;
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
        ExporterHelperSettings::passthrough()
    }

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let config = config.into_inner();
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

profcol_core::component_conformance!(exporter: DebugExporterFactory, "debug", Development);

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use profcol_core::component::{ComponentId, CreateContext, ExporterFactory};
    use profcol_core::config::{ConfigError, Validate, parse_typed, parse_yaml};
    use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
    use profcol_core::pdata::summary::frame_names;
    use profcol_core::pdata::testing::{
        WireDictionaryBuilder as DictionaryBuilder, batch_from_wire,
    };
    use profcol_core::pdata::types::{
        AnyValue, Function, InstrumentationScope, KeyValue, Line, Location, Mapping, Profile,
        Resource, ResourceProfiles, Sample, ScopeProfiles, Value, ValueType,
    };
    use profcol_core::pdata::{ProfileBatch, semconv};
    use profcol_core::telemetry::Telemetry;

    use super::*;

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
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

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            key_strindex: 0,
        }
    }

    const T0: u64 = 1_700_000_000_123_456_789;

    /// Two resources: an eBPF-profiler-like process with timestamped samples, a link, an
    /// inlined frame and a native frame with no symbol; and a bare resource whose profile has
    /// no samples and no time.
    fn hand_built() -> ProfileBatch {
        let mut b = DictionaryBuilder::new();
        let (main_name, work_name, helper_name) = (
            b.string("main.main"),
            b.string("main.work"),
            b.string("main.helper"),
        );
        let (main_go, util_go) = (b.string("/src/main.go"), b.string("/src/util.go"));
        let f_main = b.function(Function {
            name_strindex: main_name,
            filename_strindex: main_go,
            ..Default::default()
        });
        let f_work = b.function(Function {
            name_strindex: work_name,
            filename_strindex: main_go,
            ..Default::default()
        });
        let f_helper = b.function(Function {
            name_strindex: helper_name,
            filename_strindex: util_go,
            ..Default::default()
        });
        let build_id = b.attribute_kv(
            semconv::BUILD_ID_GNU,
            Value::StringValue("2e5a7c9d".into()),
            "",
        );
        let libc = b.string("/usr/lib/x86_64-linux-gnu/libc.so.6");
        let mapping = b.mapping(Mapping {
            memory_start: 0x7f00_0000_0000,
            memory_limit: 0x7f00_0020_0000,
            file_offset: 0,
            filename_strindex: libc,
            attribute_indices: vec![build_id],
        });
        let native = b.location(Location {
            mapping_index: mapping,
            address: 0x9d4c0,
            ..Default::default()
        });
        let line = |function_index, line| Line {
            function_index,
            line,
            column: 0,
        };
        let work = b.location(Location {
            lines: vec![line(f_helper, 7), line(f_work, 21)],
            ..Default::default()
        });
        let main = b.location(Location {
            lines: vec![line(f_main, 10)],
            ..Default::default()
        });
        let deep = b.stack(&[native, work, main]);
        let shallow = b.stack(&[main]);
        let thread = b.attribute_kv("thread.name", Value::StringValue("worker".into()), "");
        let tid = b.attribute_kv("thread.id", Value::IntValue(7), "");
        let link = b.link(&[0xab; 16], &[0xcd; 8]);
        let vt = |b: &mut DictionaryBuilder, t: &str, u: &str| ValueType {
            type_strindex: b.string(t),
            unit_strindex: b.string(u),
        };
        let samples_count = vt(&mut b, "samples", "count");
        let cpu_ns = vt(&mut b, "cpu", "nanoseconds");
        let profile = Profile {
            sample_type: Some(samples_count),
            period_type: Some(cpu_ns),
            period: 50_000_000,
            time_unix_nano: T0,
            duration_nano: 5_000_000_000,
            profile_id: (1..=16).collect(),
            samples: vec![
                Sample {
                    stack_index: deep,
                    attribute_indices: vec![thread, tid],
                    link_index: link,
                    timestamps_unix_nano: vec![T0 + 1, T0 + 2],
                    ..Default::default()
                },
                Sample {
                    stack_index: shallow,
                    values: vec![3],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let empty = Profile {
            sample_type: Some(cpu_ns),
            ..Default::default()
        };
        batch_from_wire(
            b.finish(),
            vec![
                ResourceProfiles {
                    resource: Some(Resource {
                        attributes: vec![
                            kv(semconv::SERVICE_NAME, Value::StringValue("cart".into())),
                            kv(semconv::PROCESS_PID, Value::IntValue(42)),
                        ],
                        ..Default::default()
                    }),
                    scope_profiles: vec![ScopeProfiles {
                        scope: Some(InstrumentationScope {
                            name: "ebpf-profiler".into(),
                            version: "1.2.0".into(),
                            ..Default::default()
                        }),
                        profiles: vec![profile],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceProfiles {
                    scope_profiles: vec![ScopeProfiles {
                        profiles: vec![empty],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        )
    }

    // ---- config -------------------------------------------------------------------------

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                verbosity: Verbosity::Detailed,
                sampling_initial: 5,
                sampling_thereafter: 200,
            }
        );
        assert!(c.validate().is_empty());
    }

    #[test]
    fn defaults_are_otelcols() {
        let c: Config = parse_typed(&profcol_core::config::Value::Null).expect("null");
        assert_eq!(c, Config::default());
        assert_eq!(
            (c.verbosity, c.sampling_initial, c.sampling_thereafter),
            (Verbosity::Basic, 2, 1)
        );
    }

    #[test]
    fn verbosity_is_case_insensitive_and_checked() {
        let v = parse_yaml("x", "verbosity: Normal\n").expect("yaml");
        assert_eq!(
            parse_typed::<Config>(&v).expect("valid").verbosity,
            Verbosity::Normal
        );
        let v = parse_yaml("x", "verbosity: loud\n").expect("yaml");
        let e = parse_typed::<Config>(&v).expect_err("invalid");
        assert_eq!(
            e.to_string(),
            "verbosity: unknown verbosity \"loud\", expected `basic`, `normal` or `detailed`"
        );
    }

    #[test]
    fn helper_settings_have_no_queue_and_no_retry() {
        let s = DebugExporterFactory.helper_settings(&Config::default());
        assert!(!s.queue.enabled);
        assert!(!s.retry.enabled);
        assert_eq!(DebugExporterFactory::TYPE_NAME, "debug");
        assert_eq!(
            DebugExporterFactory::STABILITY,
            profcol_core::component::Stability::Development
        );
    }

    // ---- sampling -----------------------------------------------------------------------

    #[test]
    fn sampling_logs_the_first_then_every_nth_per_second() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut s = Sampler::new(2, 3);
        let admitted: Vec<bool> = (0..8).map(|i| s.admit(ms(i))).collect();
        // 1, 2 (initial), then the 3rd after them: batch 5, then batch 8.
        assert_eq!(
            admitted,
            [true, true, false, false, true, false, false, true]
        );
        // A new second starts over.
        assert!(s.admit(ms(1000)));
        assert!(s.admit(ms(1001)));
        assert!(!s.admit(ms(1002)));

        let mut every = Sampler::new(2, 1);
        assert!((0..100).all(|i| every.admit(ms(i))));
        let mut none_after = Sampler::new(1, 0);
        assert!(none_after.admit(ms(0)));
        assert!((1..100).all(|i| !none_after.admit(ms(i))));
    }

    // ---- rendering ----------------------------------------------------------------------

    #[test]
    fn go_cpu_basic_and_normal() {
        let batch = go_cpu();
        assert_eq!(
            render(&batch, Verbosity::Basic),
            ["Profiles: resource_profiles=1 profiles=2 samples=66"]
        );
        assert_eq!(
            render(&batch, Verbosity::Normal),
            [
                "Profiles: resource_profiles=1 profiles=2 samples=66",
                "Profile #0: resource={} sample_type=cpu/nanoseconds period=10000000 cpu/nanoseconds samples=33 total=2490000000 time=2026-11-30T04:22:41.478115275Z duration=2.607417819s",
                "Profile #1: resource={} sample_type=samples/count period=10000000 cpu/nanoseconds samples=33 total=249 time=2026-11-30T04:22:41.478115275Z duration=2.607417819s",
            ]
        );
    }

    #[test]
    fn go_cpu_detailed_resolves_every_stack() {
        let batch = go_cpu();
        let lines = render(&batch, Verbosity::Detailed);
        assert_eq!(
            &lines[..11],
            [
                "Profiles: resource_profiles=1 profiles=2 samples=66",
                "Profile #0: resource={} sample_type=cpu/nanoseconds period=10000000 cpu/nanoseconds samples=33 total=2490000000 time=2026-11-30T04:22:41.478115275Z duration=2.607417819s",
                "  Sample #0: values=[1280000000] timestamps=0",
                "    #0 main.mix ./main.go:26 (inlined)",
                "    #1 main.hashLoop ./main.go:36",
                "    #2 main.work ./main.go:53",
                "    #3 main.main.func1 ./main.go:148",
                "    #4 main.write ./main.go:120",
                "    #5 main.main ./main.go:144",
                "    #6 runtime.main runtime/proc.go:250",
                "  Sample #1: values=[900000000] timestamps=0",
            ]
        );
        // One line per sample and one per frame, as frame_names counts them.
        let d = batch.dictionary();
        let frames: usize = batch
            .profiles()
            .flat_map(|p| p.samples.iter())
            .map(|s| {
                d.stack(s.stack_index)
                    .location_indices
                    .iter()
                    .map(|l| frame_names(d, l).len())
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(lines.len(), 1 + 2 + 66 + frames);
        assert_eq!(lines.len(), 1391);
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("  Sample #")).count(),
            66
        );
        // The second profile's header comes after the first profile's 33 samples.
        let second = lines
            .iter()
            .position(|l| l.starts_with("Profile #1: "))
            .expect("second profile");
        assert_eq!(
            lines[..second]
                .iter()
                .filter(|l| l.starts_with("  Sample #"))
                .count(),
            33
        );
        assert_eq!(lines[second + 1], "  Sample #0: values=[128] timestamps=0");
    }

    #[test]
    fn hand_built_batch_at_every_verbosity() {
        let batch = hand_built();
        let basic = "Profiles: resource_profiles=2 profiles=2 samples=2";
        let first = "Profile #0: resource={service.name=cart process.pid=42} scope=ebpf-profiler@1.2.0 sample_type=samples/count period=50000000 cpu/nanoseconds samples=2 total=5 time=2023-11-14T22:13:20.123456789Z duration=5s id=0102030405060708090a0b0c0d0e0f10";
        let second = "Profile #1: resource={} sample_type=cpu/nanoseconds period=0 samples=0 total=0 time=unset duration=0s";
        assert_eq!(render(&batch, Verbosity::Basic), [basic]);
        assert_eq!(render(&batch, Verbosity::Normal), [basic, first, second]);
        assert_eq!(
            render(&batch, Verbosity::Detailed),
            [
                basic,
                first,
                "  Sample #0: values=[] timestamps=2 attributes={thread.name=worker thread.id=7} trace_id=abababababababababababababababab span_id=cdcdcdcdcdcdcdcd",
                "    #0 libc.so.6+0x9d4c0 mapping=/usr/lib/x86_64-linux-gnu/libc.so.6 build_id.gnu=2e5a7c9d",
                "    #1 main.helper /src/util.go:7 (inlined)",
                "    #2 main.work /src/main.go:21",
                "    #3 main.main /src/main.go:10",
                "  Sample #1: values=[3] timestamps=0",
                "    #0 main.main /src/main.go:10",
                second,
            ]
        );
    }

    #[test]
    fn frames_without_a_mapping_are_bare_addresses() {
        let mut b = DictionaryBuilder::new();
        let loc = b.location(Location {
            address: 0x1234,
            ..Default::default()
        });
        let stack = b.stack(&[loc]);
        let st = ValueType {
            type_strindex: b.string("samples"),
            unit_strindex: 0,
        };
        let batch = batch_from_wire(
            b.finish(),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        sample_type: Some(st),
                        samples: vec![Sample {
                            stack_index: stack,
                            values: vec![1],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        );
        assert_eq!(
            render(&batch, Verbosity::Detailed)[1..],
            [
                "Profile #0: resource={} sample_type=samples period=0 samples=1 total=1 time=unset duration=0s",
                "  Sample #0: values=[1] timestamps=0",
                "    #0 0x1234",
            ]
        );
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(render::rfc3339_nanos(T0), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(render::rfc3339_nanos(1), "1970-01-01T00:00:00.000000001Z");
        assert_eq!(
            render::rfc3339_nanos(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    // ---- the exporter -------------------------------------------------------------------

    /// Records every event: (target, level, message).
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<(String, tracing::Level, String)>>>);

    struct MessageVisitor(String);

    impl tracing::field::Visit for MessageVisitor {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut v = MessageVisitor(String::new());
            event.record(&mut v);
            let m = event.metadata();
            self.0
                .lock()
                .expect("capture lock")
                .push((m.target().to_owned(), *m.level(), v.0));
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn exporter_logs_the_rendering_at_info_under_its_target_with_sampling() {
        let capture = Capture::default();
        let ctx = CreateContext {
            id: ComponentId::new("debug", None),
            telemetry: Telemetry::new(),
            host: Default::default(),
        };
        let exporter = DebugExporterFactory
            .create(
                profcol_core::config::Checked::check(Config {
                    verbosity: Verbosity::Normal,
                    sampling_initial: 1,
                    sampling_thereafter: 0,
                })
                .expect("a valid config"),
                &ctx,
            )
            .expect("create");
        let batch = hand_built();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        tracing::subscriber::with_default(capture.clone(), || {
            runtime.block_on(async {
                // The second, within the same second, is sampled out.
                exporter.export(batch.clone()).await.expect("export");
                exporter.export(batch.clone()).await.expect("export");
                exporter.shutdown().await.expect("shutdown");
            });
        });
        let events = capture.0.lock().expect("capture lock").clone();
        let expected: Vec<(String, tracing::Level, String)> = render(&batch, Verbosity::Normal)
            .into_iter()
            .map(|l| (TARGET.to_owned(), tracing::Level::INFO, l))
            .collect();
        assert_eq!(events, expected);
    }
}
