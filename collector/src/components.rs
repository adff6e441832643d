//! The one explicit list of every component this binary carries. Add a factory here and it
//! exists; there is no registration by linker magic.

use profcol_core::component::registry::DuplicateType;
use profcol_core::component::{Kind, Registry};

pub fn registry() -> Result<Registry, DuplicateType> {
    let mut r = Registry::new();
    r.receiver(profcol_receiver_otlp::OtlpReceiverFactory)?
        .receiver(profcol_receiver_pprof::PprofReceiverFactory)?
        .receiver(profcol_receiver_profiling::ProfilingReceiverFactory::new(
            profcol_receiver_profiling::bpf_source::BpfOpener,
        ))?;
    r.processor(profcol_processor_batch::BatchFactory)?
        .processor(profcol_processor_memory_limiter::MemoryLimiterFactory)?
        .processor(profcol_processor_resource::ResourceFactory)?
        .processor(profcol_processor_service_name::ServiceNameFactory)?
        .processor(profcol_processor_k8s_attributes::K8sAttributesFactory)?;
    r.processor_alias(
        profcol_processor_k8s_attributes::ALIAS,
        profcol_processor_k8s_attributes::TYPE_NAME,
    )?;
    r.exporter(profcol_exporter_otlp::OtlpExporterFactory)?
        .exporter(profcol_exporter_otlp::OtlpHttpExporterFactory)?
        .exporter(profcol_exporter_pprof::PprofExporterFactory)?
        .exporter(profcol_exporter_flamegraph::FlamegraphExporterFactory)?
        .exporter(profcol_exporter_debug::DebugExporterFactory)?
        .exporter(profcol_exporter_file::FileExporterFactory)?
        .exporter(profcol_exporter_arrow::ArrowExporterFactory)?;
    // otelcol's current names for its OTLP exporters (in 2026 `otlp` became `otlp_grpc`
    // and `otlphttp` became `otlp_http`; the old names stay there as aliases).
    r.exporter_alias("otlp_grpc", "otlp")?
        .exporter_alias("otlp_http", "otlphttp")?;
    r.extension(profcol_extension_file_storage::FileStorageFactory)?
        .extension(profcol_extension_health_check::HealthCheckFactory)?
        .extension(profcol_extension_pprof::PprofExtensionFactory)?
        .extension(profcol_extension_zpages::ZpagesFactory)?;
    for (kind, type_name, hint) in CONTRIB_HINTS {
        r.unknown_type_hint(*kind, type_name, hint);
    }
    Ok(r)
}

/// otelcol-contrib components a profiles config may name that mean nothing here, and what
/// profcol offers instead. Small on purpose: anything else unknown lists the known types.
const CONTRIB_HINTS: &[(Kind, &str, &str)] = &[
    (
        Kind::Receiver,
        "hostmetrics",
        "host metrics are not profiles; to profile this host use the `profiling` receiver (eBPF, every process)",
    ),
    (
        Kind::Receiver,
        "prometheus",
        "it scrapes metrics; to scrape profiles from /debug/pprof endpoints use the `pprof` receiver with `remote: {targets: [...]}`",
    ),
    (
        Kind::Receiver,
        "jaeger",
        "it receives traces; profiles come in by the `otlp` receiver, or pprof and Pyroscope pushes by the `pprof` receiver",
    ),
    (
        Kind::Receiver,
        "zipkin",
        "it receives traces; profiles come in by the `otlp` receiver, or pprof and Pyroscope pushes by the `pprof` receiver",
    ),
    (
        Kind::Receiver,
        "filelog",
        "it reads logs; to read pprof files use the `pprof` receiver with `file: {include: [...]}`",
    ),
    (
        Kind::Receiver,
        "pyroscope",
        "Pyroscope clients push to the `pprof` receiver with `server:` (its /ingest and Push API)",
    ),
    (
        Kind::Receiver,
        "kafka",
        "profcol reads no Kafka topics; send profiles to the `otlp` receiver",
    ),
    (
        Kind::Processor,
        "attributes",
        "it edits span, log and metric attributes; the `resource` processor inserts, updates, upserts and deletes resource attributes",
    ),
    (
        Kind::Processor,
        "transform",
        "profcol has no OTTL; the `resource` processor edits resource attributes",
    ),
    (
        Kind::Processor,
        "filter",
        "profcol has no OTTL; the `profiling` receiver filters by pid, executable and container (`include`, `exclude`)",
    ),
    (
        Kind::Processor,
        "tail_sampling",
        "profiles are sampled where they are taken: the `profiling` receiver's `samples_per_second` and `probabilistic_threshold`",
    ),
    (
        Kind::Processor,
        "probabilistic_sampler",
        "profiles are sampled where they are taken: the `profiling` receiver's `samples_per_second` and `probabilistic_threshold`",
    ),
    (
        Kind::Processor,
        "resourcedetection",
        "`service_name` sets service.name, `k8s_attributes` adds the pod's Kubernetes attributes, and the `profiling` receiver sets host.name and the process's attributes",
    ),
    (
        Kind::Exporter,
        "prometheus",
        "profiles are not metrics; profcol's own metrics are served as Prometheus text at service::telemetry::metrics",
    ),
    (
        Kind::Exporter,
        "prometheusremotewrite",
        "profiles are not metrics; profcol's own metrics are served as Prometheus text at service::telemetry::metrics",
    ),
    (
        Kind::Exporter,
        "kafka",
        "profcol writes no Kafka topics; send over OTLP with the `otlp` or `otlphttp` exporter",
    ),
    (
        Kind::Exporter,
        "loadbalancing",
        "`otlp` and `otlphttp` send to one endpoint; list several exporters in a pipeline to send to several",
    ),
    (
        Kind::Exporter,
        "logging",
        "otelcol renamed it `debug`, which profcol has",
    ),
    (
        Kind::Extension,
        "basicauth",
        "receivers authenticate clients by mTLS (`tls: {client_ca_file: ...}`), exporters send credentials with `headers:`",
    ),
    (
        Kind::Extension,
        "bearertokenauth",
        "exporters send a token with `headers: {Authorization: Bearer ...}`; receivers authenticate clients by mTLS (`tls: {client_ca_file: ...}`)",
    ),
    (
        Kind::Extension,
        "oidc",
        "receivers authenticate clients by mTLS (`tls: {client_ca_file: ...}`)",
    ),
    (
        Kind::Extension,
        "headers_setter",
        "exporters send fixed headers with `headers:`; headers are not forwarded from requests",
    ),
    (
        Kind::Extension,
        "opamp",
        "profcol has no remote management; it runs the config files it is given",
    ),
    (
        Kind::Extension,
        "memory_ballast",
        "otelcol removed it (it tuned Go's garbage collector); use the `memory_limiter` processor",
    ),
];

#[cfg(test)]
mod tests {
    use profcol_core::config::ConfigErrors;

    use super::*;

    fn example(name: &str) -> String {
        format!("{}/../config/examples/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn validate(files: &[String]) -> anyhow::Result<profcol_core::service::CollectorConfig> {
        crate::commands::run::load(files)
    }

    #[test]
    fn the_contrib_profiles_config_validates_as_profcol_validate_does() {
        let config = validate(&[example("contrib-profiles.yaml")]).expect("valid");
        let names = |ids: &[profcol_core::component::ComponentId]| {
            ids.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(
            names(&config.service_extensions),
            ["pprof", "zpages", "health_check"]
        );
        let p = &config.pipelines[0];
        assert_eq!(names(&p.receivers), ["otlp"]);
        assert_eq!(
            names(&p.processors),
            ["memory_limiter", "k8sattributes", "resource", "batch"]
        );
        assert_eq!(names(&p.exporters), ["otlp", "debug"]);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    fn errors(yaml: &str) -> Vec<String> {
        let registry = registry().expect("registry");
        match profcol_core::service::load(&[("t.yaml".into(), yaml.into())], &|_| None, &registry) {
            Err(ConfigErrors(errors)) => errors.iter().map(ToString::to_string).collect(),
            Ok(_) => panic!("valid: {yaml}"),
        }
    }

    #[test]
    fn contrib_components_without_meaning_here_say_what_profcol_offers() {
        let yaml = "
receivers:
  otlp: {protocols: {grpc: }}
  hostmetrics: {collection_interval: 10s}
  jaeger/legacy:
processors:
  tail_sampling:
  transform: {}
exporters:
  prometheus: {endpoint: 0.0.0.0:8889}
  debug:
extensions:
  bearertokenauth: {token: x}
  nonesuch:
service:
  extensions: [bearertokenauth, nonesuch]
  pipelines:
    profiles:
      receivers: [otlp, hostmetrics, jaeger/legacy]
      processors: [tail_sampling, transform]
      exporters: [debug, prometheus]
";
        let got = errors(yaml);
        let known_receivers = "known receiver types: otlp, pprof, profiling";
        for (i, (path, hint)) in [
            (
                "receivers::hostmetrics",
                "to profile this host use the `profiling` receiver",
            ),
            (
                "receivers::jaeger/legacy",
                "profiles come in by the `otlp` receiver",
            ),
            ("processors::tail_sampling", "`samples_per_second`"),
            ("processors::transform", "profcol has no OTTL"),
            ("exporters::prometheus", "profiles are not metrics"),
            (
                "extensions::bearertokenauth",
                "headers: {Authorization: Bearer ...}",
            ),
        ]
        .iter()
        .enumerate()
        {
            let line = &got[i];
            assert!(line.starts_with(&format!("{path}: unknown ")), "{line}");
            assert!(line.contains("which profcol does not have: "), "{line}");
            assert!(line.contains(hint), "{line}");
        }
        assert!(got[0].ends_with(known_receivers), "{}", got[0]);
        // An unknown type without a hint lists what there is.
        assert_eq!(
            got[6],
            "extensions::nonesuch: unknown extension type \"nonesuch\"; known types: file_storage, health_check, pprof, zpages"
        );
        // Pipelines naming them do not also say "not defined".
        assert_eq!(got.len(), 7, "{got:#?}");
    }

    #[test]
    fn every_hint_names_a_type_profcol_does_not_have() {
        let registry = registry().expect("registry");
        let listed: Vec<(Kind, &str)> = registry.list().iter().map(|(k, n, _)| (*k, *n)).collect();
        for (kind, type_name, _) in CONTRIB_HINTS {
            assert!(
                !listed.contains(&(*kind, type_name)),
                "{type_name} is a profcol {kind:?}"
            );
        }
    }

    #[test]
    fn otelcol_current_otlp_exporter_names_are_profcols_otlp_exporters() {
        let yaml = "
receivers: {otlp: {protocols: {grpc: }}}
exporters:
  otlp_grpc: {endpoint: backend:4317, compression: zstd}
  otlp_http: {endpoint: http://backend:4318, compresion: gzip}
service: {pipelines: {profiles: {receivers: [otlp], exporters: [otlp_grpc, otlp_http]}}}
";
        // otlp_http is otlphttp: its typo is reported with otlphttp's keys.
        let got = errors(yaml);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("exporters::otlp_http::compresion: unknown field `compresion`"),
            "{}",
            got[0]
        );
        let fixed = yaml.replace("compresion", "compression");
        let registry = registry().expect("registry");
        profcol_core::service::load(&[("t.yaml".into(), fixed)], &|_| None, &registry)
            .expect("valid");
    }
}
