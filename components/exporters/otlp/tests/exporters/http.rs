//! The `otlphttp` exporter against a hyper server on 127.0.0.1.

use std::io::Read;
use std::time::Duration;

use prost::Message;

use crate::support::*;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::otlp_json::{read_profiles_json, write_export_response_json};
use profcol_core::pdata::types::{ExportProfilesPartialSuccess, ExportProfilesServiceResponse};
use profcol_exporter_otlp::rpc;
use profcol_exporter_otlp::{Compression, Encoding, OtlpHttpExporterConfig};
use profcol_exporter_otlp::{OtlpHttpExporterFactory, PARTIAL_SUCCESS_METRIC};

fn config(
    server: &HttpServer,
    encoding: Encoding,
    compression: Compression,
) -> OtlpHttpExporterConfig {
    OtlpHttpExporterConfig {
        endpoint: server.base_url("http", "127.0.0.1"),
        encoding,
        compression,
        ..Default::default()
    }
}

fn header<'a>(request: &'a RawRequest, name: &str) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("gunzip");
    out
}

#[tokio::test]
async fn proto_gzip_body_decodes_to_the_same_batch() {
    let server = http_server(None, None).await;
    let mut config = config(&server, Encoding::Proto, Compression::Gzip);
    config.headers = headers(&[("Authorization", "Bearer x"), ("x-scope-orgid", "team-a")]);
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    let batch = go_cpu_batch();
    exporter.export(batch.clone()).await.expect("export");

    let received = server.take();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.path, "/v1development/profiles");
    assert_eq!(
        header(request, "content-type"),
        Some("application/x-protobuf")
    );
    assert_eq!(header(request, "content-encoding"), Some("gzip"));
    assert_eq!(header(request, "authorization"), Some("Bearer x"));
    assert_eq!(header(request, "x-scope-orgid"), Some("team-a"));
    assert!(header(request, "user-agent").is_some_and(|ua| ua.starts_with("profcol/")));
    assert_eq!(request.body[8], 4, "gzip XFL 4 = fastest (level 1)");
    let plain = gunzip(&request.body);
    assert_eq!(plain, batch.encode_to_vec());
    let decoded = ProfileBatch::decode(&plain).expect("decode");
    assert_eq!(decoded, batch);
    assert_eq!(decoded.sample_count(), batch.sample_count());
}

#[tokio::test]
async fn json_zstd_body_decodes_to_the_same_batch() {
    let server = http_server(None, None).await;
    let (exporter, _) = create(
        &OtlpHttpExporterFactory,
        config(&server, Encoding::Json, Compression::Zstd),
        "otlphttp",
    );
    let batch = go_cpu_batch();
    exporter.export(batch.clone()).await.expect("export");

    let request = server.take().pop().expect("one request");
    assert_eq!(header(&request, "content-type"), Some("application/json"));
    assert_eq!(header(&request, "content-encoding"), Some("zstd"));
    let plain = zstd::decode_all(&request.body[..]).expect("unzstd");
    assert_eq!(plain, batch.to_json());
    let decoded = ProfileBatch::new(read_profiles_json(&plain).expect("json")).expect("valid");
    assert_eq!(decoded, batch);
}

#[tokio::test]
async fn compression_none_sends_the_plain_encoding() {
    let server = http_server(None, None).await;
    let (exporter, _) = create(
        &OtlpHttpExporterFactory,
        config(&server, Encoding::Proto, Compression::None),
        "otlphttp",
    );
    let batch = go_cpu_batch();
    exporter.export(batch.clone()).await.expect("export");
    let request = server.take().pop().expect("one request");
    assert_eq!(header(&request, "content-encoding"), None);
    assert_eq!(request.body.as_ref(), batch.encode_to_vec().as_slice());
}

#[tokio::test]
async fn unavailable_with_retry_after_is_retryable_after_it() {
    let server = http_server(None, None).await;
    server.set_reply(HttpReply {
        status: 503,
        headers: vec![("retry-after", "3".into())],
        body: Vec::new(),
    });
    let (exporter, _) = create(
        &OtlpHttpExporterFactory,
        config(&server, Encoding::Proto, Compression::Gzip),
        "otlphttp",
    );
    let e = exporter.export(go_cpu_batch()).await.expect_err("503");
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));

    server.set_reply(HttpReply {
        status: 429,
        headers: vec![],
        body: Vec::new(),
    });
    let e = exporter.export(go_cpu_batch()).await.expect_err("429");
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.retry_after(), None);
}

#[tokio::test]
async fn bad_request_with_a_status_body_is_permanent_with_its_message() {
    let server = http_server(None, None).await;
    server.set_reply(HttpReply {
        status: 400,
        headers: vec![("content-type", "application/x-protobuf".into())],
        body: rpc::Status {
            code: 3,
            message: "profile 0: stack index 9 out of range".into(),
            details: vec![],
        }
        .encode_to_vec(),
    });
    let (exporter, _) = create(
        &OtlpHttpExporterFactory,
        config(&server, Encoding::Proto, Compression::Gzip),
        "otlphttp",
    );
    let e = exporter.export(go_cpu_batch()).await.expect_err("400");
    assert!(!e.is_retryable(), "{e}");
    assert_eq!(
        e.to_string(),
        "HTTP 400 Bad Request: profile 0: stack index 9 out of range"
    );

    server.set_reply(HttpReply {
        status: 500,
        headers: vec![("content-type", "application/json".into())],
        body: br#"{"code":13,"message":"pipeline failed"}"#.to_vec(),
    });
    let e = exporter.export(go_cpu_batch()).await.expect_err("500");
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("pipeline failed"), "{e}");
}

#[tokio::test]
async fn partial_success_is_counted_in_proto_and_json_replies() {
    let server = http_server(None, None).await;
    let response = ExportProfilesServiceResponse {
        partial_success: Some(ExportProfilesPartialSuccess {
            rejected_profiles: 2,
            error_message: "2 profiles too old".into(),
        }),
    };
    server.set_reply(HttpReply {
        status: 200,
        headers: vec![("content-type", "application/x-protobuf".into())],
        body: response.encode_to_vec(),
    });
    let (exporter, telemetry) = create(
        &OtlpHttpExporterFactory,
        config(&server, Encoding::Proto, Compression::Gzip),
        "otlphttp/partial",
    );
    let value = || telemetry.value(PARTIAL_SUCCESS_METRIC, &[("exporter", "otlphttp/partial")]);
    assert_eq!(value(), Some(0));
    exporter
        .export(go_cpu_batch())
        .await
        .expect("partial is success");
    assert_eq!(value(), Some(2));

    let mut json = Vec::new();
    write_export_response_json(&response, &mut json);
    server.set_reply(HttpReply {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        body: json,
    });
    exporter
        .export(go_cpu_batch())
        .await
        .expect("partial is success");
    assert_eq!(value(), Some(4));

    // A 2xx with a body that is no response is still a success (the data was taken).
    server.set_reply(HttpReply {
        status: 200,
        headers: vec![("content-type", "application/x-protobuf".into())],
        body: vec![0xff, 0xff, 0xff],
    });
    exporter.export(go_cpu_batch()).await.expect("accepted");
    assert_eq!(value(), Some(4));
}

#[tokio::test]
async fn profiles_endpoint_overrides_the_path() {
    let server = http_server(None, None).await;
    let config = OtlpHttpExporterConfig {
        endpoint: "http://ignored.invalid:4318".into(),
        profiles_endpoint: Some(format!(
            "{}/custom/profiles?tenant=a",
            server.base_url("http", "127.0.0.1")
        )),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    exporter.export(go_cpu_batch()).await.expect("export");
    let request = server.take().pop().expect("one request");
    assert_eq!(request.path, "/custom/profiles?tenant=a");

    // A base endpoint with a path keeps it.
    let config = OtlpHttpExporterConfig {
        endpoint: format!("{}/prefix/", server.base_url("http", "127.0.0.1")),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    exporter.export(go_cpu_batch()).await.expect("export");
    let request = server.take().pop().expect("one request");
    assert_eq!(request.path, "/prefix/v1development/profiles");
}

#[tokio::test]
async fn connection_refused_is_retryable() {
    let addr = closed_port().await;
    let config = OtlpHttpExporterConfig {
        endpoint: format!("http://127.0.0.1:{}", addr.port()),
        ..Default::default()
    };
    let (exporter, _) = create(&OtlpHttpExporterFactory, config, "otlphttp");
    let e = exporter.export(go_cpu_batch()).await.expect_err("refused");
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
}
