//! Server mode: `POST /v1/pprof`, Pyroscope `/ingest` and Connect `Push`.

use std::time::Duration;

use profcol_core::component::ComponentError;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{gzip_fast, maybe_gunzip};
use profcol_receiver_pprof::{
    Config, LabelPair, PushRequest, RawProfileSeries, RawSample, SCOPE_INGEST, SCOPE_PUSH,
    SCOPE_SERVER, ServerConfig,
};
use prost::Message;

use crate::*;

fn server_config(max_request_body_size: u64) -> Config {
    Config {
        server: Some(ServerConfig {
            endpoint: format!("127.0.0.1:{}", free_port()),
            max_request_body_size,
            ..ServerConfig::default()
        }),
        ..Config::default()
    }
}

async fn server(capacity: usize) -> Running {
    start(server_config(32 << 20), capacity).await
}

fn plain(name: &str) -> Vec<u8> {
    maybe_gunzip(&fixture(name), 64 << 20)
        .expect("gunzip")
        .into_owned()
}

fn addr(r: &Running) -> std::net::SocketAddr {
    r.addr.expect("server address")
}

// ---- /v1/pprof --------------------------------------------------------------------------

#[tokio::test]
async fn pprof_gzipped_and_plain_bodies_are_204_and_delivered() {
    let mut r = server(8).await;
    let (mut wire, mut plain_total) = (0, 0);
    for name in ["go-cpu.pb.gz", "go-heap.pb.gz", "node-wall.pb.gz"] {
        let expected = fixture_samples(name);
        let gzip_header = [("content-encoding", "gzip")];
        let bodies = [
            ("gzip by magic", fixture(name), &gzip_header[..0]),
            ("plain", plain(name), &gzip_header[..0]),
            (
                "Content-Encoding over plain",
                gzip_fast(&plain(name)),
                &gzip_header[..],
            ),
        ];
        for (how, body, headers) in bodies {
            wire += body.len() as i64;
            // Only a Content-Encoding is undone before counting; a gzipped pprof is data.
            plain_total += if headers.is_empty() {
                body.len()
            } else {
                plain(name).len()
            } as i64;
            let reply = post(addr(&r), "/v1/pprof", headers, body).await;
            assert_eq!(reply.status, 204, "{name} {how}: {}", reply.text());
            let batch = r.next_batch().await;
            assert_eq!(batch.sample_count(), expected, "{name} {how}");
            assert_eq!(scope_name(&batch, 0), SCOPE_SERVER);
            assert!(resource_attributes(&batch, 0).is_empty());
            assert!(batch.client().and_then(|c| c.addr).is_some());
        }
    }
    let labels = [("transport", "http")];
    assert_eq!(
        r.counter("otelcol_receiver_received_wire_bytes_total", &labels),
        wire
    );
    assert_eq!(
        r.counter(
            "otelcol_receiver_received_uncompressed_bytes_total",
            &labels
        ),
        plain_total
    );
    // Sample types, period and time as in the pprof.
    let reply = post(addr(&r), "/v1/pprof", &[], fixture("go-cpu.pb.gz")).await;
    assert_eq!(reply.status, 204);
    let batch = r.next_batch().await;
    assert_eq!(sample_types(&batch), ["cpu", "samples"]);
    let source = fixture_profile("go-cpu.pb.gz");
    let cpu = profile(&batch, "cpu");
    assert_eq!(cpu.period, source.period);
    assert_eq!(cpu.time_unix_nano, source.time_nanos as u64);
    assert_eq!(cpu.duration_nano, source.duration_nanos as u64);
    r.stop().await;
}

#[tokio::test]
async fn pprof_service_name_from_query_or_header() {
    let mut r = server(4).await;
    let reply = post(
        addr(&r),
        "/v1/pprof?service_name=check%20out",
        &[("x-service-name", "ignored")],
        fixture("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 204);
    let batch = r.next_batch().await;
    assert_eq!(
        resource_attributes(&batch, 0),
        pairs(&[("service.name", "check out")])
    );
    let reply = post(
        addr(&r),
        "/v1/pprof",
        &[("X-Service-Name", "billing")],
        fixture("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 204);
    let batch = r.next_batch().await;
    assert_eq!(
        resource_attributes(&batch, 0),
        pairs(&[("service.name", "billing")])
    );
    r.stop().await;
}

#[tokio::test]
async fn pprof_bad_bodies_are_400_with_the_error() {
    let mut r = server(4).await;
    let reply = post(addr(&r), "/v1/pprof", &[], b"\x07garbage".to_vec()).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().contains("not a valid protobuf"),
        "{}",
        reply.text()
    );

    let no_types = pp::Profile {
        string_table: vec![String::new()],
        ..Default::default()
    };
    let reply = post(addr(&r), "/v1/pprof", &[], no_types.encode_to_vec()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.text(),
        "invalid pprof profile: the profile has no sample types"
    );

    let mut truncated = fixture("go-cpu.pb.gz");
    truncated.truncate(truncated.len() / 2);
    let reply = post(addr(&r), "/v1/pprof", &[], truncated).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().starts_with("gzip data is corrupt"),
        "{}",
        reply.text()
    );

    let reply = post(
        addr(&r),
        "/v1/pprof",
        &[("content-encoding", "gzip")],
        plain("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(reply.text().contains("not gzip data"), "{}", reply.text());

    let reply = post(
        addr(&r),
        "/v1/pprof",
        &[("content-encoding", "br")],
        vec![1],
    )
    .await;
    assert_eq!(reply.status, 415);
    r.assert_quiet(Duration::from_millis(100)).await;
    r.stop().await;
}

#[tokio::test]
async fn oversize_bodies_are_413() {
    let plain_cpu = plain("go-cpu.pb.gz");
    let gz = fixture("go-cpu.pb.gz");
    // Between the compressed and the decompressed size.
    let cap = (gz.len() + plain_cpu.len()) / 2;
    assert!(gz.len() < cap && plain_cpu.len() > cap);
    let mut r = start(server_config(cap as u64), 4).await;
    let reply = post(addr(&r), "/v1/pprof", &[], plain_cpu.clone()).await;
    assert_eq!(reply.status, 413, "{}", reply.text());
    let reply = post(addr(&r), "/v1/pprof", &[], gz.clone()).await;
    assert_eq!(
        reply.status,
        413,
        "decompressed over the cap: {}",
        reply.text()
    );
    let reply = post(addr(&r), "/ingest?name=app&format=pprof", &[], gz.clone()).await;
    assert_eq!(reply.status, 413);
    let push = PushRequest {
        series: vec![RawProfileSeries {
            labels: vec![],
            samples: vec![RawSample {
                raw_profile: gz,
                id: String::new(),
            }],
        }],
    };
    let reply = post(
        addr(&r),
        "/push.v1.PusherService/Push",
        &[("content-type", "application/proto")],
        push.encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, 413);
    assert!(
        reply.text().contains("\"code\":\"resource_exhausted\""),
        "{}",
        reply.text()
    );
    r.assert_quiet(Duration::from_millis(100)).await;
    r.stop().await;
}

#[tokio::test]
async fn wrong_method_and_path() {
    let r = server(4).await;
    for path in ["/v1/pprof", "/ingest", "/push.v1.PusherService/Push"] {
        let reply = call(addr(&r), http::Method::GET, path, &[], Vec::new()).await;
        assert_eq!(reply.status, 405, "{path}");
        assert_eq!(reply.header("allow"), "POST");
    }
    let reply = post(addr(&r), "/v1development/profiles", &[], vec![1]).await;
    assert_eq!(reply.status, 404);
    assert!(reply.text().contains("/v1/pprof"), "{}", reply.text());
    r.stop().await;
}

#[tokio::test]
async fn a_full_pipeline_is_429_with_retry_after() {
    let mut r = server(1).await;
    r.tx.send(ProfileBatch::empty()).await.expect("fill");
    // The pipeline is full and not drained: after the 5 s wait for room, 429.
    let (reply, ingest) = tokio::join!(
        post(addr(&r), "/v1/pprof", &[], fixture("go-cpu.pb.gz")),
        post(
            addr(&r),
            "/ingest?name=a&format=pprof",
            &[],
            fixture("go-cpu.pb.gz")
        ),
    );
    for reply in [reply, ingest] {
        assert_eq!(reply.status, 429);
        assert_eq!(reply.header("retry-after"), "1");
        assert_eq!(reply.text(), "the pipeline is full; retry later");
    }
    // Only the filler is in the pipeline.
    assert!(r.next_batch().await.is_empty());
    r.assert_quiet(Duration::from_millis(50)).await;
    r.stop().await;
}

#[tokio::test]
async fn shutdown_answers_waiting_requests_with_503() {
    let r = server(1).await;
    r.tx.send(ProfileBatch::empty()).await.expect("fill");
    let a = addr(&r);
    let waiting =
        tokio::spawn(async move { post(a, "/v1/pprof", &[], fixture("go-cpu.pb.gz")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    r.stop().await;
    let reply = waiting.await.expect("reply");
    assert_eq!(reply.status, 503);
}

#[tokio::test]
async fn a_port_in_use_is_fatal() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut config = server_config(1 << 20);
    if let Some(s) = config.server.as_mut() {
        s.endpoint = format!("127.0.0.1:{port}");
    }
    let r = spawn(config, 1);
    let result = tokio::time::timeout(Duration::from_secs(5), r.task_result())
        .await
        .expect("returns");
    match result {
        Err(e) => {
            let m = profcol_core::errors::error_chain(&e);
            assert!(m.contains("cannot listen"), "{m}");
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
}

impl Running {
    async fn task_result(self) -> Result<(), ComponentError> {
        self.task.await.expect("no panic")
    }
}

// ---- /ingest ----------------------------------------------------------------------------

#[tokio::test]
async fn ingest_raw_body_maps_the_name_and_labels() {
    let mut r = server(4).await;
    let reply = post(
        addr(&r),
        "/ingest?name=app%7Benv%3Dprod%2Cregion%3Deu%7D&from=1700000000&until=1700000010&format=pprof&sampleRate=100&spyName=gospy",
        &[("content-type", "application/octet-stream")],
        fixture("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let batch = r.next_batch().await;
    assert_eq!(batch.sample_count(), fixture_samples("go-cpu.pb.gz"));
    assert_eq!(
        resource_attributes(&batch, 0),
        pairs(&[("service.name", "app"), ("env", "prod"), ("region", "eu")])
    );
    assert_eq!(scope_name(&batch, 0), SCOPE_INGEST);
    // The pprof has its own time: from/until do not override it.
    let source = fixture_profile("go-cpu.pb.gz");
    assert_eq!(
        profile(&batch, "cpu").time_unix_nano,
        source.time_nanos as u64
    );

    // Unencoded braces, as some clients send them; no time in the pprof.
    let mut untimed = fixture_profile("go-heap.pb.gz");
    untimed.time_nanos = 0;
    untimed.duration_nanos = 0;
    let reply = post(
        addr(&r),
        "/ingest?name=my.app.cpu{otel.scope.name=pyroscope-node,service_name=override}&from=1700000000&until=1700000015",
        &[],
        untimed.encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let batch = r.next_batch().await;
    assert_eq!(
        resource_attributes(&batch, 0),
        pairs(&[("service.name", "override")])
    );
    assert_eq!(scope_name(&batch, 0), "pyroscope-node");
    let p = profile(&batch, "inuse_space");
    assert_eq!(p.time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(p.duration_nano, 15_000_000_000);
    r.stop().await;
}

fn multipart(boundary: &str, fields: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, content) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

#[tokio::test]
async fn ingest_multipart_honours_display_names() {
    let mut r = server(4).await;
    let config = br#"{"cpu": {"units": "nanoseconds", "aggregation": "sum", "display-name": "process_cpu_time", "sampled": true, "new-key": 1},
                      "samples": {"units": "samples"}}"#;
    let body = multipart(
        "----pyroscope1234",
        &[
            ("profile", &fixture("go-cpu.pb.gz")),
            ("prev_profile", b"ignored, not even pprof"),
            ("sample_type_config", config),
        ],
    );
    let reply = post(
        addr(&r),
        "/ingest?name=svc&format=pprof",
        &[(
            "content-type",
            "multipart/form-data; boundary=----pyroscope1234",
        )],
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let batch = r.next_batch().await;
    assert_eq!(sample_types(&batch), ["process_cpu_time", "samples"]);
    assert_eq!(batch.sample_count(), fixture_samples("go-cpu.pb.gz"));
    assert_eq!(
        resource_attributes(&batch, 0),
        pairs(&[("service.name", "svc")])
    );

    // A form without the profile field.
    let body = multipart("b", &[("sample_type_config", b"{}")]);
    let reply = post(
        addr(&r),
        "/ingest?name=svc&format=pprof",
        &[("content-type", "multipart/form-data; boundary=b")],
        body,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(reply.text().contains("\"profile\""), "{}", reply.text());
    r.stop().await;
}

#[tokio::test]
async fn ingest_refuses_other_formats_and_bad_names() {
    let mut r = server(4).await;
    for format in ["folded", "lines"] {
        let reply = post(
            addr(&r),
            &format!("/ingest?name=app&format={format}"),
            &[],
            b"foo;bar 1\n".to_vec(),
        )
        .await;
        assert_eq!(reply.status, 400);
        assert_eq!(
            reply.text(),
            format!("format {format} is not supported; send pprof or jfr")
        );
    }
    // A body that is no recording, with format=jfr: one line that says so.
    let reply = post(
        addr(&r),
        "/ingest?name=app&format=jfr",
        &[],
        b"foo;bar 1\n".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().starts_with("invalid JFR recording: ") && reply.text().contains("FLR"),
        "{}",
        reply.text()
    );
    let reply = post(
        addr(&r),
        "/ingest?format=pprof",
        &[],
        fixture("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().contains("name parameter is required"),
        "{}",
        reply.text()
    );
    let reply = post(
        addr(&r),
        "/ingest?name=%7Benv%3Dx%7D",
        &[],
        fixture("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 400);
    let reply = post(
        addr(&r),
        "/ingest?name=app&from=yesterday",
        &[],
        fixture("go-cpu.pb.gz"),
    )
    .await;
    assert_eq!(reply.status, 400);
    // No format and a folded body: Pyroscope's default format is named in the error.
    let reply = post(addr(&r), "/ingest?name=app", &[], b"foo;bar 1\n".to_vec()).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().contains("send format=pprof"),
        "{}",
        reply.text()
    );
    // No format and a pprof body is fine.
    let reply = post(addr(&r), "/ingest?name=app", &[], fixture("go-cpu.pb.gz")).await;
    assert_eq!(reply.status, 200);
    r.next_batch().await;
    r.assert_quiet(Duration::from_millis(50)).await;
    r.stop().await;
}

// ---- Connect Push ------------------------------------------------------------------------

fn label(name: &str, value: &str) -> LabelPair {
    LabelPair {
        name: name.into(),
        value: value.into(),
    }
}

fn push_request() -> PushRequest {
    PushRequest {
        series: vec![
            RawProfileSeries {
                labels: vec![
                    label("__name__", "process_cpu"),
                    label("service_name", "checkout"),
                    label("env", "prod"),
                    label("otel.scope.name", "pyroscope-go"),
                    label("otel.scope.version", "1.4.0"),
                ],
                samples: vec![RawSample {
                    raw_profile: fixture("go-cpu.pb.gz"),
                    id: "a1".into(),
                }],
            },
            RawProfileSeries {
                labels: vec![label("service_name", "billing")],
                samples: vec![
                    RawSample {
                        raw_profile: plain("go-heap.pb.gz"),
                        id: String::new(),
                    },
                    RawSample {
                        raw_profile: plain("go-goroutine.pb.gz"),
                        id: String::new(),
                    },
                ],
            },
        ],
    }
}

#[tokio::test]
async fn push_gzip_and_plain_are_200_with_labels_mapped() {
    let mut r = server(4).await;
    let body = push_request().encode_to_vec();
    let expected = fixture_samples("go-cpu.pb.gz")
        + fixture_samples("go-heap.pb.gz")
        + fixture_samples("go-goroutine.pb.gz");
    for (how, body, headers) in [
        (
            "gzip",
            gzip_fast(&body),
            vec![
                ("content-type", "application/proto"),
                ("content-encoding", "gzip"),
                ("connect-protocol-version", "1"),
            ],
        ),
        (
            "plain",
            body.clone(),
            vec![("content-type", "application/proto")],
        ),
    ] {
        let reply = post(addr(&r), "/push.v1.PusherService/Push", &headers, body).await;
        assert_eq!(reply.status, 200, "{how}: {}", reply.text());
        assert_eq!(reply.header("content-type"), "application/proto");
        assert!(reply.body.is_empty());
        let batch = r.next_batch().await;
        assert_eq!(batch.sample_count(), expected, "{how}");
        assert_eq!(batch.resource_profiles().len(), 2);
        assert_eq!(
            resource_attributes(&batch, 0),
            pairs(&[
                ("service.name", "checkout"),
                ("pyroscope.profile.name", "process_cpu"),
                ("env", "prod"),
            ])
        );
        let scope = batch.resource_profiles()[0].scope_profiles[0]
            .scope
            .clone()
            .expect("scope");
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("pyroscope-go", "1.4.0")
        );
        assert_eq!(
            resource_attributes(&batch, 1),
            pairs(&[("service.name", "billing")])
        );
        assert_eq!(scope_name(&batch, 1), SCOPE_PUSH);
        assert_eq!(
            batch.resource_profiles()[1].scope_profiles[0]
                .profiles
                .len(),
            5
        );
    }
    // Nothing to deliver is still a success.
    let reply = post(
        addr(&r),
        "/push.v1.PusherService/Push",
        &[("content-type", "application/proto")],
        PushRequest::default().encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, 200);
    r.assert_quiet(Duration::from_millis(50)).await;
    r.stop().await;
}

#[tokio::test]
async fn push_errors_are_connect_errors() {
    let mut r = server(4).await;
    let mut bad = push_request();
    bad.series[1].samples[1].raw_profile = b"\x07garbage".to_vec();
    let reply = post(
        addr(&r),
        "/push.v1.PusherService/Push",
        &[("content-type", "application/proto")],
        bad.encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.header("content-type"), "application/json");
    let error: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(error["code"], "invalid_argument");
    let message = error["message"].as_str().expect("message");
    assert!(message.starts_with("series[1].samples[1]: "), "{message}");

    let reply = post(
        addr(&r),
        "/push.v1.PusherService/Push",
        &[("content-type", "application/proto")],
        b"\xff\xff".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().contains("not a valid PushRequest"),
        "{}",
        reply.text()
    );

    let reply = post(
        addr(&r),
        "/push.v1.PusherService/Push",
        &[("content-type", "application/json")],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 415);
    // All or nothing: the valid series of the bad request were not delivered.
    r.assert_quiet(Duration::from_millis(100)).await;
    r.stop().await;
}

/// A file of the repository's `testdata/jfr`, as stored.
fn jfr_fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../../testdata/jfr/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn ingest_takes_the_java_agents_jfr_form_with_its_labels() {
    let mut r = server(4).await;
    // As Pyroscope's Java agent 2.9.2 sends it: both parts gzipped, the labels a
    // LabelsSnapshot protobuf.
    let labels = profcol_core::pdata::codec::gzip_fast(&jfr_fixture("pyroscope-agent-labels.pb"));
    let body = multipart(
        "0b7db1b3-d7e7-4c1a-8b27-8366efdce1e8",
        &[
            ("jfr", &jfr_fixture("pyroscope-agent.jfr.gz")),
            ("labels", &labels),
        ],
    );
    let reply = post(
        addr(&r),
        "/ingest?name=jfr.demo%7Benv%3Dtest%2Cotel.scope.name%3Dcom.grafana.pyroscope%2Fjava%7D&units=samples&aggregationType=sum&from=1796165746&until=1796165748&spyName=javaspy&sampleRate=100&format=jfr",
        &[(
            "content-type",
            "multipart/form-data; boundary=0b7db1b3-d7e7-4c1a-8b27-8366efdce1e8",
        )],
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let batch = r.next_batch().await;
    assert_eq!(
        sample_types(&batch),
        [
            "cpu",
            "alloc_in_new_tlab_objects",
            "alloc_in_new_tlab_bytes",
            "contentions",
            "delay"
        ]
    );
    assert_eq!(
        resource_attributes(&batch, 0),
        pairs(&[("env", "test"), ("service.name", "jfr.demo")])
    );
    let d = batch.dictionary();
    let labelled = batch
        .profiles()
        .flat_map(|p| p.samples.iter())
        .filter(|s| {
            s.attribute_indices.iter().any(|&a| {
                d.attribute_table
                    .get(a as usize)
                    .and_then(|kv| d.string_table.get(kv.key_strindex as usize))
                    .is_some_and(|k| k == "request")
            })
        })
        .count();
    assert!(labelled > 0, "the agent's labels reach the samples");

    // A raw recording body works too; a form without the recording is named.
    let reply = post(
        addr(&r),
        "/ingest?name=raw&format=jfr",
        &[],
        jfr_fixture("jdk17-profile.jfr.gz"),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(r.next_batch().await.sample_count(), 22);
    let body = multipart("b", &[("labels", b"")]);
    let reply = post(
        addr(&r),
        "/ingest?name=svc&format=jfr",
        &[("content-type", "multipart/form-data; boundary=b")],
        body,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(reply.text().contains("\"jfr\""), "{}", reply.text());
    // A truncated recording is a 400 with where it ends.
    let mut cut = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&jfr_fixture("jdk17-profile.jfr.gz")[..]),
        &mut cut,
    )
    .expect("gunzip");
    cut.truncate(cut.len() / 2);
    let reply = post(addr(&r), "/ingest?name=cut&format=jfr", &[], cut).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.text().contains("runs past the end"),
        "{}",
        reply.text()
    );
    r.stop().await;
}
