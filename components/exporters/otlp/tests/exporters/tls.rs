//! TLS for both exporters against servers with rcgen self-signed certificates.

use crate::support::*;
use profcol_core::component::ExporterFactory;
use profcol_exporter_otlp::{OtlpExporterConfig, OtlpHttpExporterConfig, TlsClientSettings};
use profcol_exporter_otlp::{OtlpExporterFactory, OtlpHttpExporterFactory};

fn ca(cert: &TestCert) -> TlsClientSettings {
    TlsClientSettings {
        ca_file: Some(cert.cert_file.clone()),
        ..Default::default()
    }
}

#[tokio::test]
async fn grpc_over_tls_with_ca_file() {
    let cert = self_signed(&["localhost"]);
    let server = grpc_server(Some(&cert)).await;
    let config = OtlpExporterConfig {
        // No scheme and no `insecure`: TLS.
        endpoint: format!("localhost:{}", server.addr.port()),
        tls: ca(&cert),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpExporterFactory, config, "otlp");
    let batch = go_cpu_batch();
    exporter
        .export(batch.clone())
        .await
        .expect("export over TLS");
    assert_eq!(server.take().len(), 1);

    // Without the CA the self-signed certificate is refused, and that is retryable
    // (it is a connection error).
    let config = OtlpExporterConfig {
        endpoint: format!("https://localhost:{}", server.addr.port()),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpExporterFactory, config, "otlp");
    let e = exporter.export(batch).await.expect_err("unknown issuer");
    assert!(e.is_retryable(), "{e}");
    assert!(server.take().is_empty());
}

#[tokio::test]
async fn grpc_tls_server_name_override_and_skip_verify() {
    let cert = self_signed(&["collector.test"]);
    let server = grpc_server(Some(&cert)).await;
    let config = OtlpExporterConfig {
        endpoint: format!("127.0.0.1:{}", server.addr.port()),
        tls: TlsClientSettings {
            server_name_override: Some("collector.test".into()),
            ..ca(&cert)
        },
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpExporterFactory, config, "otlp");
    exporter.export(go_cpu_batch()).await.expect("override");

    let config = OtlpExporterConfig {
        endpoint: format!("localhost:{}", server.addr.port()),
        tls: TlsClientSettings {
            insecure_skip_verify: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpExporterFactory, config, "otlp");
    exporter.export(go_cpu_batch()).await.expect("skip verify");
    assert_eq!(server.take().len(), 2);
}

#[tokio::test]
async fn http_over_tls_with_ca_file() {
    let cert = self_signed(&["localhost"]);
    let server = http_server(Some(&cert), None).await;
    let config = OtlpHttpExporterConfig {
        endpoint: server.base_url("https", "localhost"),
        tls: ca(&cert),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    let batch = go_cpu_batch();
    exporter
        .export(batch.clone())
        .await
        .expect("export over TLS");
    let request = server.take().pop().expect("one request");
    assert_eq!(request.path, "/v1development/profiles");

    let config = OtlpHttpExporterConfig {
        endpoint: server.base_url("https", "localhost"),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    let e = exporter.export(batch).await.expect_err("unknown issuer");
    assert!(e.is_retryable(), "{e}");
}

#[tokio::test]
async fn http_tls_server_name_override_skip_verify_and_mtls() {
    let cert = self_signed(&["collector.test"]);
    let client = self_signed(&["profcol-agent"]);
    let server = http_server(Some(&cert), Some(&client)).await;

    // mTLS: the server requires a client certificate it trusts.
    let config = OtlpHttpExporterConfig {
        endpoint: server.base_url("https", "127.0.0.1"),
        tls: TlsClientSettings {
            server_name_override: Some("collector.test".into()),
            cert_file: Some(client.cert_file.clone()),
            key_file: Some(client.key_file.clone()),
            ..ca(&cert)
        },
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    exporter
        .export(go_cpu_batch())
        .await
        .expect("mTLS with override");

    // Without the client certificate the server refuses the handshake.
    let config = OtlpHttpExporterConfig {
        endpoint: server.base_url("https", "127.0.0.1"),
        tls: TlsClientSettings {
            insecure_skip_verify: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    let e = exporter
        .export(go_cpu_batch())
        .await
        .expect_err("no client cert");
    assert!(e.is_retryable(), "{e}");

    // Skip-verify with the client certificate gets through.
    let config = OtlpHttpExporterConfig {
        endpoint: server.base_url("https", "localhost"),
        tls: TlsClientSettings {
            insecure_skip_verify: true,
            cert_file: Some(client.cert_file.clone()),
            key_file: Some(client.key_file.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    exporter.export(go_cpu_batch()).await.expect("skip verify");
    assert_eq!(server.take().len(), 2);
}

#[tokio::test]
async fn unreadable_or_bad_tls_files_fail_at_create() {
    let (ctx, _) = context("otlp");
    let missing = OtlpExporterConfig {
        endpoint: "localhost:4317".into(),
        tls: TlsClientSettings {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = OtlpExporterFactory
        .create(
            profcol_core::config::Checked::check(missing).expect("a valid config"),
            &ctx,
        )
        .err()
        .expect("missing ca_file");
    let text = profcol_core::errors::error_chain(&e);
    assert!(text.contains("/nonexistent/ca.pem"), "{text}");

    let dir = temp_dir();
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").expect("write");
    let bad = OtlpHttpExporterConfig {
        endpoint: "https://localhost:4318".into(),
        tls: TlsClientSettings {
            ca_file: Some(garbage.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = OtlpHttpExporterFactory
        .create(
            profcol_core::config::Checked::check(bad).expect("a valid config"),
            &ctx,
        )
        .err()
        .expect("garbage ca_file");
    let text = profcol_core::errors::error_chain(&e);
    assert!(text.contains("garbage.pem"), "{text}");

    let cert = self_signed(&["localhost"]);
    let bad_key = OtlpExporterConfig {
        endpoint: "localhost:4317".into(),
        tls: TlsClientSettings {
            cert_file: Some(cert.cert_file.clone()),
            key_file: Some(garbage),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = OtlpExporterFactory
        .create(
            profcol_core::config::Checked::check(bad_key).expect("a valid config"),
            &ctx,
        )
        .err()
        .expect("garbage key");
    let text = profcol_core::errors::error_chain(&e);
    assert!(text.contains("garbage.pem"), "{text}");
}
