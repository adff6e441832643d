//! The `otlp` exporter against tonic and raw HTTP/2 servers on 127.0.0.1.

use std::io::Read;
use std::time::Duration;

use prost::Message;
use tonic::Code;

use crate::support::*;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::{ExportProfilesPartialSuccess, ExportProfilesServiceResponse};
use profcol_exporter_otlp::rpc;
use profcol_exporter_otlp::{Compression, OtlpExporterConfig, TlsClientSettings};
use profcol_exporter_otlp::{EXPORT_PATH, OtlpExporterFactory, PARTIAL_SUCCESS_METRIC};

fn plaintext(addr: std::net::SocketAddr, compression: Compression) -> OtlpExporterConfig {
    OtlpExporterConfig {
        endpoint: format!("127.0.0.1:{}", addr.port()),
        tls: TlsClientSettings {
            insecure: true,
            ..Default::default()
        },
        compression,
        ..Default::default()
    }
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn delivers_the_batch_with_headers_gzip_by_default() {
    let server = grpc_server(None).await;
    let mut config = plaintext(server.addr, Compression::default());
    config.headers = headers(&[("authorization", "Bearer x"), ("X-Tenant", "team-a")]);
    let (exporter, _) = create(&OtlpExporterFactory, config, "otlp");
    let batch = go_cpu_batch();
    exporter.export(batch.clone()).await.expect("export");

    let received = server.take();
    assert_eq!(received.len(), 1);
    let (metadata, request) = &received[0];
    let delivered = ProfileBatch::decode(&request.encode_to_vec()).expect("valid batch");
    assert_eq!(delivered.sample_count(), batch.sample_count());
    assert_eq!(delivered.profile_count(), batch.profile_count());
    assert_eq!(delivered, batch);
    assert_eq!(header(metadata, "authorization"), Some("Bearer x"));
    assert_eq!(header(metadata, "x-tenant"), Some("team-a"));
    assert_eq!(header(metadata, "grpc-encoding"), Some("gzip"));
    assert!(
        header(metadata, "user-agent").is_some_and(|ua| ua.starts_with("profcol/")),
        "{metadata:?}"
    );
    assert!(header(metadata, "grpc-timeout").is_some(), "{metadata:?}");
}

#[tokio::test]
async fn compression_none_turns_it_off_and_zstd_works() {
    let server = grpc_server(None).await;
    let batch = go_cpu_batch();

    let (none, _) = create(
        &OtlpExporterFactory,
        plaintext(server.addr, Compression::None),
        "otlp/none",
    );
    none.export(batch.clone()).await.expect("export none");
    let (zstd, _) = create(
        &OtlpExporterFactory,
        plaintext(server.addr, Compression::Zstd),
        "otlp/zstd",
    );
    zstd.export(batch.clone()).await.expect("export zstd");

    let received = server.take();
    assert_eq!(received.len(), 2);
    assert_eq!(header(&received[0].0, "grpc-encoding"), None);
    assert_eq!(header(&received[1].0, "grpc-encoding"), Some("zstd"));
    for (_, request) in &received {
        let delivered = ProfileBatch::decode(&request.encode_to_vec()).expect("valid batch");
        assert_eq!(delivered.sample_count(), batch.sample_count());
    }
}

#[tokio::test]
async fn gzip_on_the_wire_is_level_1_with_the_compressed_flag() {
    let (addr, seen) = raw_grpc_server().await;
    let (exporter, _) = create(
        &OtlpExporterFactory,
        plaintext(addr, Compression::Gzip),
        "otlp",
    );
    let batch = go_cpu_batch();
    exporter.export(batch.clone()).await.expect("export");

    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(request.path, EXPORT_PATH);
    assert_eq!(
        header(&request.headers, "content-type"),
        Some("application/grpc")
    );
    assert_eq!(header(&request.headers, "grpc-encoding"), Some("gzip"));
    let body = &request.body;
    assert_eq!(body[0], 1, "compressed-flag byte");
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(len, body.len() - 5, "one length-prefixed message");
    let message = &body[5..];
    assert_eq!(&message[..3], &[0x1f, 0x8b, 8], "gzip magic and deflate");
    assert_eq!(message[8], 4, "gzip XFL 4 = fastest (level 1)");
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(message)
        .read_to_end(&mut plain)
        .expect("gunzip");
    assert_eq!(plain, batch.encode_to_vec());
}

#[tokio::test]
async fn status_codes_map_to_retryable_or_permanent() {
    let server = grpc_server(None).await;
    let (exporter, _) = create(
        &OtlpExporterFactory,
        plaintext(server.addr, Compression::Gzip),
        "otlp",
    );
    let batch = go_cpu_batch();

    server.set_reply(|| Err(tonic::Status::unavailable("pipeline full")));
    let e = exporter
        .export(batch.clone())
        .await
        .expect_err("unavailable");
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains("pipeline full"), "{e}");
    assert_eq!(e.retry_after(), None);

    server.set_reply(|| Err(tonic::Status::invalid_argument("bad profile")));
    let e = exporter.export(batch.clone()).await.expect_err("invalid");
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("bad profile"), "{e}");

    server.set_reply(|| {
        let details = rpc::Status {
            code: Code::ResourceExhausted as i32,
            message: "slow down".into(),
            details: vec![rpc::Any::retry_info(Duration::from_secs(4))],
        };
        Err(tonic::Status::with_details(
            Code::ResourceExhausted,
            "slow down",
            details.encode_to_vec().into(),
        ))
    });
    let e = exporter.export(batch.clone()).await.expect_err("throttled");
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(4)));

    server.set_reply(|| Err(tonic::Status::resource_exhausted("message too large")));
    let e = exporter.export(batch.clone()).await.expect_err("too large");
    assert!(!e.is_retryable(), "{e}");

    server.set_reply(|| Err(tonic::Status::unauthenticated("who are you")));
    assert!(
        !exporter
            .export(batch)
            .await
            .expect_err("auth")
            .is_retryable()
    );
}

#[tokio::test]
async fn partial_success_is_counted_and_the_export_succeeds() {
    let server = grpc_server(None).await;
    server.set_reply(|| {
        Ok(ExportProfilesServiceResponse {
            partial_success: Some(ExportProfilesPartialSuccess {
                rejected_profiles: 3,
                error_message: "3 profiles had no samples".into(),
            }),
        })
    });
    let (exporter, telemetry) = create(
        &OtlpExporterFactory,
        plaintext(server.addr, Compression::Gzip),
        "otlp/partial",
    );
    let value = || telemetry.value(PARTIAL_SUCCESS_METRIC, &[("exporter", "otlp/partial")]);
    assert_eq!(value(), Some(0), "registered at create");
    exporter
        .export(go_cpu_batch())
        .await
        .expect("partial is success");
    exporter
        .export(go_cpu_batch())
        .await
        .expect("partial is success");
    assert_eq!(value(), Some(6));

    // A warning without rejections counts nothing.
    server.set_reply(|| {
        Ok(ExportProfilesServiceResponse {
            partial_success: Some(ExportProfilesPartialSuccess {
                rejected_profiles: 0,
                error_message: "deprecated attribute".into(),
            }),
        })
    });
    exporter.export(go_cpu_batch()).await.expect("warning only");
    assert_eq!(value(), Some(6));
}

#[tokio::test]
async fn connection_refused_is_retryable_and_create_does_not_connect() {
    let addr = closed_port().await;
    // Creating against a closed port succeeds: the channel connects on first use.
    let (exporter, _) = create(
        &OtlpExporterFactory,
        plaintext(addr, Compression::Gzip),
        "otlp",
    );
    let e = exporter.export(go_cpu_batch()).await.expect_err("refused");
    assert!(e.is_retryable(), "{e}");
}

#[tokio::test]
async fn http_scheme_endpoint_means_plaintext() {
    let server = grpc_server(None).await;
    let config = OtlpExporterConfig {
        endpoint: format!("http://127.0.0.1:{}", server.addr.port()),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpExporterFactory, config, "otlp");
    exporter.export(go_cpu_batch()).await.expect("export");
    assert_eq!(server.take().len(), 1);
}
