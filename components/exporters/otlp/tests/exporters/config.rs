//! Parsing, validation and factory behaviour of both configs.

use std::path::PathBuf;
use std::time::Duration;

use profcol_core::client::grpc::GrpcTarget;
use profcol_core::component::{ExporterFactory, Stability};
use profcol_core::config::{ConfigError, Value, parse_typed, parse_yaml};
use profcol_core::testkit::config_errors;

use crate::support::*;
use profcol_exporter_otlp::{
    Compression, Encoding, OtlpExporterConfig, OtlpHttpExporterConfig, TlsClientSettings,
};
use profcol_exporter_otlp::{OtlpExporterFactory, OtlpHttpExporterFactory};

fn testdata(name: &str) -> Value {
    profcol_core::testkit::testdata_value(env!("CARGO_MANIFEST_DIR"), name)
}

fn exporter_section(name: &str) -> Value {
    testdata("config.yaml")["exporters"][name].clone()
}

fn parse_yaml_as<T: serde::de::DeserializeOwned + Default>(text: &str) -> Result<T, ConfigError> {
    parse_typed(&parse_yaml("inline", text).expect("yaml"))
}

fn paths(errors: &[ConfigError]) -> Vec<&str> {
    errors.iter().map(|e| e.path.as_str()).collect()
}

#[test]
fn testdata_config_parses_to_the_expected_values() {
    let otlp: OtlpExporterConfig = parse_typed(&exporter_section("otlp")).expect("otlp");
    assert_eq!(otlp.endpoint, "collector:4317");
    assert_eq!(
        otlp.tls,
        TlsClientSettings {
            insecure: false,
            ca_file: Some(PathBuf::from("/etc/profcol/ca.pem")),
            cert_file: Some(PathBuf::from("/etc/profcol/client.pem")),
            key_file: Some(PathBuf::from("/etc/profcol/client-key.pem")),
            insecure_skip_verify: false,
            server_name_override: Some("collector.internal".into()),
        }
    );
    assert_eq!(otlp.headers, headers(&[("authorization", "Bearer x")]));
    assert_eq!(otlp.compression, Compression::Zstd);
    assert_eq!(otlp.timeout, Duration::from_secs(10));
    assert!(otlp.retry_on_failure.enabled);
    assert_eq!(
        otlp.retry_on_failure.initial_interval,
        Duration::from_secs(1)
    );
    assert_eq!(otlp.retry_on_failure.max_interval, Duration::from_secs(20));
    assert_eq!(
        otlp.retry_on_failure.max_elapsed_time,
        Duration::from_secs(120)
    );
    assert_eq!(otlp.sending_queue.num_consumers, 4);
    assert_eq!(otlp.sending_queue.queue_size, 500);
    assert_eq!(otlp.sending_queue.storage.as_deref(), Some("file_storage"));
    assert!(
        config_errors(&otlp).is_empty(),
        "{:?}",
        config_errors(&otlp)
    );
    let helper = OtlpExporterFactory.helper_settings(&otlp);
    assert_eq!(helper.timeout, Duration::from_secs(10));
    assert_eq!(helper.retry, otlp.retry_on_failure);
    assert_eq!(helper.queue, otlp.sending_queue);

    let http: OtlpHttpExporterConfig =
        parse_typed(&exporter_section("otlphttp")).expect("otlphttp");
    assert_eq!(http.endpoint, "https://collector:4318");
    assert_eq!(
        http.profiles_endpoint.as_deref(),
        Some("https://collector:4318/custom/profiles")
    );
    assert_eq!(http.encoding, Encoding::Json);
    assert_eq!(http.tls, TlsClientSettings::default());
    assert_eq!(http.headers, headers(&[("x-scope-orgid", "team-a")]));
    assert_eq!(http.compression, Compression::None);
    assert_eq!(http.timeout, Duration::from_secs(5));
    assert!(!http.retry_on_failure.enabled);
    assert!(!http.sending_queue.enabled);
    assert!(
        config_errors(&http).is_empty(),
        "{:?}",
        config_errors(&http)
    );
    assert_eq!(
        http.profiles_url().expect("url").to_string(),
        "https://collector:4318/custom/profiles"
    );
    let helper = OtlpHttpExporterFactory.helper_settings(&http);
    assert_eq!(helper.timeout, Duration::from_secs(5));
    assert!(!helper.queue.enabled);
}

#[test]
fn defaults_are_otelcols() {
    let otlp: OtlpExporterConfig = parse_typed(&Value::Null).expect("null");
    assert_eq!(otlp, OtlpExporterConfig::default());
    assert_eq!(otlp.compression, Compression::Gzip);
    assert_eq!(otlp.timeout, Duration::from_secs(5));
    assert!(otlp.retry_on_failure.enabled);
    assert!(otlp.sending_queue.enabled);
    // The endpoint is required.
    assert_eq!(paths(&config_errors(&otlp)), vec!["endpoint"]);

    let http: OtlpHttpExporterConfig =
        parse_yaml_as("endpoint: http://collector:4318\n").expect("http");
    assert_eq!(http.encoding, Encoding::Proto);
    assert_eq!(http.compression, Compression::Gzip);
    assert_eq!(http.timeout, Duration::from_secs(30));
    assert_eq!(
        http.profiles_url().expect("url").to_string(),
        "http://collector:4318/v1development/profiles"
    );
    assert!(config_errors(&http).is_empty());
    let empty: OtlpHttpExporterConfig = parse_typed(&Value::Null).expect("null");
    assert_eq!(paths(&config_errors(&empty)), vec!["endpoint"]);

    assert_eq!(OtlpExporterFactory::TYPE_NAME, "otlp");
    assert_eq!(OtlpHttpExporterFactory::TYPE_NAME, "otlphttp");
    assert_eq!(OtlpExporterFactory::STABILITY, Stability::Alpha);
    assert_eq!(OtlpHttpExporterFactory::STABILITY, Stability::Alpha);
}

#[test]
fn invalid_values_name_their_paths() {
    let e = parse_yaml_as::<OtlpExporterConfig>("compression: brotli\n").expect_err("brotli");
    assert_eq!(e.path, "compression");
    assert!(
        e.message.contains("unknown variant `brotli`"),
        "{}",
        e.message
    );

    let e = parse_yaml_as::<OtlpHttpExporterConfig>("encoding: xml\n").expect_err("xml");
    assert_eq!(e.path, "encoding");

    let e = parse_yaml_as::<OtlpExporterConfig>("timeout: 5 parsecs\n").expect_err("timeout");
    assert_eq!(e.path, "timeout");

    let e =
        parse_yaml_as::<OtlpExporterConfig>("tls:\n  insecure_skip: true\n").expect_err("tls typo");
    assert_eq!(e.path, "tls::insecure_skip");

    let e = parse_yaml_as::<OtlpHttpExporterConfig>("retry_on_failure:\n  enable: true\n")
        .expect_err("retry typo");
    assert_eq!(e.path, "retry_on_failure::enable");

    // `compression: ""` is otelcol's spelling of none.
    let c: OtlpExporterConfig = parse_yaml_as("compression: \"\"\n").expect("empty");
    assert_eq!(c.compression, Compression::None);

    let invalid: OtlpExporterConfig = parse_typed(&testdata("invalid.yaml")).expect("parses");
    let errors = config_errors(&invalid);
    assert_eq!(
        paths(&errors),
        vec![
            "endpoint",
            "tls::key_file",
            "headers::bad header",
            "retry_on_failure::multiplier",
            "sending_queue::queue_size",
        ],
        "{errors:?}"
    );

    let reserved: OtlpExporterConfig =
        parse_yaml_as("endpoint: a:1\nheaders:\n  content-type: text/plain\n  grpc-timeout: 1S\n")
            .expect("parses");
    assert_eq!(
        paths(&config_errors(&reserved)),
        vec!["headers::content-type", "headers::grpc-timeout"]
    );

    let http: OtlpHttpExporterConfig = parse_yaml_as(
        "endpoint: collector:4318\nprofiles_endpoint: ftp://x/y\ntls:\n  key_file: k.pem\n  server_name_override: \"not a name\"\n",
    )
    .expect("parses");
    assert_eq!(
        paths(&config_errors(&http)),
        vec![
            "profiles_endpoint",
            "endpoint",
            "tls::cert_file",
            "tls::server_name_override"
        ]
    );
    let http: OtlpHttpExporterConfig = parse_yaml_as("endpoint: collector:4318\n").expect("parses");
    let errors = config_errors(&http);
    assert_eq!(paths(&errors), vec!["endpoint"]);
    assert!(errors[0].message.contains("needs a scheme"), "{errors:?}");
}

#[test]
fn grpc_endpoint_forms() {
    let t = |endpoint: &str, insecure: bool| GrpcTarget::parse(endpoint, insecure);
    let ok = |endpoint: &str, insecure: bool| {
        let target = t(endpoint, insecure).expect(endpoint);
        (target.uri.to_string(), target.tls)
    };
    assert_eq!(
        ok("collector:4317", false),
        ("https://collector:4317/".into(), true)
    );
    assert_eq!(
        ok("collector:4317", true),
        ("http://collector:4317/".into(), false)
    );
    assert_eq!(
        ok("http://collector:4317", false),
        ("http://collector:4317/".into(), false)
    );
    assert_eq!(
        ok("https://collector:4317/", true),
        ("https://collector:4317/".into(), true)
    );
    assert_eq!(ok("[::1]:4317", true), ("http://[::1]:4317/".into(), false));
    assert_eq!(
        ok("https://collector", false),
        ("https://collector/".into(), true)
    );
    assert!(
        t("collector", false)
            .expect_err("no port")
            .contains("no port")
    );
    assert!(t("unix:///tmp/s", false).is_err());
    assert!(t("http://collector:4317/v1", false).is_err());
    assert!(t("http://", false).is_err());
    assert!(t("collector:port", false).is_err());
}

#[test]
fn create_needs_a_runtime_and_does_no_network() {
    let (ctx, _) = context("otlp");
    let config = OtlpExporterConfig {
        endpoint: "collector.invalid:4317".into(),
        ..Default::default()
    };
    let e = OtlpExporterFactory
        .create(
            profcol_core::config::Checked::check(config.clone()).expect("a valid config"),
            &ctx,
        )
        .err()
        .expect("no runtime");
    let text = profcol_core::errors::error_chain(&e);
    assert!(text.contains("tokio runtime"), "{text}");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // An unresolvable host is fine: nothing is resolved or dialled until export.
        assert!(
            OtlpExporterFactory
                .create(
                    profcol_core::config::Checked::check(config).expect("a valid config"),
                    &ctx
                )
                .is_ok()
        );
        let http = OtlpHttpExporterConfig {
            endpoint: "https://collector.invalid:4318".into(),
            ..Default::default()
        };
        assert!(
            OtlpHttpExporterFactory
                .create(
                    profcol_core::config::Checked::check(http).expect("a valid config"),
                    &ctx
                )
                .is_ok()
        );
    });
}

/// otelcol's snappy spellings: `snappy` on both, `x-snappy-framed` on otlphttp only
/// (gRPC's snappy is framed already); `offline` is checked under its key.
#[test]
fn snappy_spellings_and_the_offline_block() {
    let http: OtlpHttpExporterConfig =
        parse_yaml_as("endpoint: http://localhost:4318\ncompression: x-snappy-framed\n")
            .expect("framed");
    assert_eq!(http.compression, Compression::SnappyFramed);
    assert!(
        config_errors(&http).is_empty(),
        "{:?}",
        config_errors(&http)
    );
    let grpc: OtlpExporterConfig =
        parse_yaml_as("endpoint: localhost:4317\ncompression: snappy\n").expect("snappy");
    assert_eq!(grpc.compression, Compression::Snappy);
    assert!(
        config_errors(&grpc).is_empty(),
        "{:?}",
        config_errors(&grpc)
    );
    let grpc: OtlpExporterConfig = parse_yaml_as(
        "endpoint: localhost:4317\ncompression: x-snappy-framed\noffline:\n  directory: /tmp/x\n  max_size_mib: 0\n",
    )
    .expect("parses");
    assert_eq!(
        paths(&config_errors(&grpc)),
        vec!["compression", "offline::max_size_mib"]
    );
    let e = parse_yaml_as::<OtlpExporterConfig>("offline:\n  dir: /tmp/x\n").expect_err("typo");
    assert_eq!(e.path, "offline::dir");
    assert_eq!(
        grpc.helper_settings().offline.directory,
        Some(PathBuf::from("/tmp/x"))
    );
}
