//! The receiver started through its factory on loopback ports and driven by real clients:
//! tonic's gRPC client and a hyper HTTP/1.1 client, in plain text and over TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use profcol_core::component::{
    ComponentError, ComponentId, CreateContext, ReceiverContext, ReceiverFactory, ReceiverOutput,
    Started,
};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{DEFAULT_MAX_DECOMPRESSED_BYTES, gzip_fast, plain_pprof};
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::pdata::types::{ExportProfilesServiceRequest, ExportProfilesServiceResponse};
use profcol_core::telemetry::Telemetry;
use profcol_proto::otlp::collector::profiles::v1development::profiles_service_client::ProfilesServiceClient;
use profcol_receiver_otlp::{
    Config, GrpcConfig, HttpConfig, OtlpReceiverFactory, Protocols, RpcStatus, TlsConfig,
};
use prost::Message;
use prost::bytes::Bytes;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};

// ---- fixtures -------------------------------------------------------------------------

fn go_cpu_batch() -> ProfileBatch {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../testdata/pprof/go-cpu.pb.gz"
    );
    let bytes = std::fs::read(path).expect("testdata/pprof/go-cpu.pb.gz");
    let profile = plain_pprof(&bytes, DEFAULT_MAX_DECOMPRESSED_BYTES).expect("pprof");
    let batch = pprof_to_batch(&profile, ToOtlpOptions::default()).expect("translates");
    assert!(batch.sample_count() > 0);
    batch
}

fn request_of(batch: &ProfileBatch) -> ExportProfilesServiceRequest {
    ExportProfilesServiceRequest::decode(batch.encode_to_vec().as_slice()).expect("request")
}

/// The go-cpu request with its first sample pointing past the stack table.
fn invalid_request() -> ExportProfilesServiceRequest {
    let mut request = request_of(&go_cpu_batch());
    request.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index = 1_000_000;
    request
}

use profcol_core::testkit::free_port;

fn both_protocols() -> Config {
    Config {
        protocols: Protocols {
            grpc: Some(GrpcConfig {
                endpoint: format!("127.0.0.1:{}", free_port()),
                ..GrpcConfig::default()
            }),
            http: Some(HttpConfig {
                endpoint: format!("127.0.0.1:{}", free_port()),
                ..HttpConfig::default()
            }),
        },
        ..Config::default()
    }
}

struct Running {
    grpc: SocketAddr,
    http: SocketAddr,
    rx: mpsc::Receiver<ProfileBatch>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ComponentError>>,
}

fn create_context() -> CreateContext {
    CreateContext {
        id: ComponentId::new("otlp", None),
        telemetry: Telemetry::new(),
        host: Default::default(),
    }
}

fn spawn(config: Config, capacity: usize) -> Running {
    let addr = |endpoint: Option<&String>| {
        endpoint
            .and_then(|e| e.parse().ok())
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    };
    let grpc = addr(config.protocols.grpc.as_ref().map(|g| &g.endpoint));
    let http = addr(config.protocols.http.as_ref().map(|h| &h.endpoint));
    let receiver = OtlpReceiverFactory
        .create(
            profcol_core::config::Checked::check(config).expect("a valid config"),
            &create_context(),
        )
        .expect("create");
    let (tx, rx) = mpsc::channel(capacity);
    let shutdown = CancellationToken::new();
    // This helper is synchronous; the tests wait for the listener themselves.
    let (started, _started_rx) = Started::new();
    let ctx = ReceiverContext {
        id: ComponentId::new("otlp", None),
        output: ReceiverOutput::for_test(vec![tx]),
        started,
        shutdown: shutdown.clone(),
        telemetry: Telemetry::new(),
    };
    let task = tokio::spawn(receiver.run(ctx));
    Running {
        grpc,
        http,
        rx,
        shutdown,
        task,
    }
}

/// Starts the receiver and waits until its ports accept connections.
async fn start(config: Config, capacity: usize) -> Running {
    let running = spawn(config, capacity);
    for addr in [running.grpc, running.http] {
        if addr.port() == 0 {
            continue;
        }
        let t0 = Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(!running.task.is_finished(), "receiver stopped early");
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{addr} never listened"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    running
}

impl Running {
    async fn next_batch(&mut self) -> ProfileBatch {
        tokio::time::timeout(Duration::from_secs(5), self.rx.recv())
            .await
            .expect("a batch in time")
            .expect("channel open")
    }

    async fn grpc_client(&self) -> ProfilesServiceClient<Channel> {
        ProfilesServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("grpc connect")
    }

    /// Cancels shutdown and checks that `run` returns within a second.
    async fn stop(self) {
        self.shutdown.cancel();
        let t0 = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(1), self.task)
            .await
            .expect("run returns within 1 s of shutdown")
            .expect("no panic");
        assert!(result.is_ok(), "{:?}", result.err());
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}

// ---- an HTTP/1.1 client ----------------------------------------------------------------

struct HttpReply {
    status: http::StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl HttpReply {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("json body")
    }
}

async fn try_send<I>(io: I, request: http::Request<Full<Bytes>>) -> Result<HttpReply, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(HttpReply {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

async fn send<I>(io: I, request: http::Request<Full<Bytes>>) -> HttpReply
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    try_send(io, request).await.expect("http exchange")
}

fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> http::Request<Full<Bytes>> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder.body(Full::new(Bytes::from(body))).expect("request")
}

async fn http_call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> HttpReply {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    send(stream, request(method, path, headers, body)).await
}

async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: Vec<u8>) -> HttpReply {
    http_call(addr, "POST", "/v1development/profiles", headers, body).await
}

const PROTOBUF: (&str, &str) = ("content-type", "application/x-protobuf");
const JSON: (&str, &str) = ("content-type", "application/json");

fn assert_from_loopback(batch: &ProfileBatch) {
    let client = batch.client().expect("client info");
    let addr = client.addr.expect("peer address");
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_ne!(addr.port(), 0);
}

// ---- gRPC ------------------------------------------------------------------------------

#[tokio::test]
async fn grpc_export_delivers_the_batch_with_the_peer() {
    let mut running = start(both_protocols(), 8).await;
    let batch = go_cpu_batch();
    let mut client = running.grpc_client().await;
    let response = client
        .export(request_of(&batch))
        .await
        .expect("export ok")
        .into_inner();
    assert_eq!(response, ExportProfilesServiceResponse::default());
    let got = running.next_batch().await;
    assert_eq!(got.sample_count(), batch.sample_count());
    assert_eq!(got.profile_count(), batch.profile_count());
    assert_from_loopback(&got);

    // The same, gzip- and zstd-compressed.
    for encoding in [CompressionEncoding::Gzip, CompressionEncoding::Zstd] {
        let mut compressed = running.grpc_client().await.send_compressed(encoding);
        compressed
            .export(request_of(&batch))
            .await
            .expect("compressed export ok");
        let got = running.next_batch().await;
        assert_eq!(got.sample_count(), batch.sample_count());
        assert_from_loopback(&got);
    }
    running.stop().await;
}

#[tokio::test]
async fn grpc_invalid_request_is_invalid_argument_naming_the_field() {
    let mut running = start(both_protocols(), 8).await;
    let status = running
        .grpc_client()
        .await
        .export(invalid_request())
        .await
        .expect_err("invalid");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index"),
        "{}",
        status.message()
    );
    assert!(running.rx.try_recv().is_err(), "nothing delivered");
    running.stop().await;
}

#[tokio::test]
async fn grpc_full_pipeline_is_resource_exhausted_with_retry_info() {
    let mut running = start(both_protocols(), 1).await;
    let batch = go_cpu_batch();
    let mut client = running.grpc_client().await;
    client
        .export(request_of(&batch))
        .await
        .expect("fills the pipeline");

    let mut second = tonic::Request::new(request_of(&batch));
    // Sent as grpc-timeout: the receiver waits this long for room, then refuses.
    second.set_timeout(Duration::from_millis(300));
    let t0 = Instant::now();
    let status = client.export(second).await.expect_err("refused");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let details = RpcStatus::decode(status.details()).expect("grpc-status-details-bin");
    assert_eq!(details.code, Code::ResourceExhausted as i32);
    assert_eq!(
        details.retry_info(),
        Some(Duration::from_secs(1)),
        "RetryInfo detail"
    );

    // Only the first arrived; draining makes room again.
    assert!(running.rx.recv().await.is_some());
    client.export(request_of(&batch)).await.expect("room again");
    running.stop().await;
}

#[tokio::test]
async fn grpc_oversize_is_resource_exhausted_without_retry_info() {
    let mut config = both_protocols();
    if let Some(g) = config.protocols.grpc.as_mut() {
        g.max_recv_msg_size_mib = 1;
    }
    let running = start(config, 8).await;
    let mut request = request_of(&go_cpu_batch());
    if let Some(d) = request.dictionary.as_mut() {
        d.string_table.push("x".repeat(2 << 20));
    }
    for encoding in [None, Some(CompressionEncoding::Gzip)] {
        let mut client = running.grpc_client().await;
        if let Some(e) = encoding {
            client = client.send_compressed(e);
        }
        let status = client.export(request.clone()).await.expect_err("too large");
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{encoding:?}: {status:?}"
        );
        assert!(
            status.message().contains("too large") || status.message().contains("size limit"),
            "{}",
            status.message()
        );
        let retry = RpcStatus::decode(status.details())
            .ok()
            .and_then(|s| s.retry_info());
        assert!(retry.is_none(), "not retryable");
    }
    running.stop().await;
}

// ---- HTTP ------------------------------------------------------------------------------

#[tokio::test]
async fn http_protobuf_and_json_bodies_are_delivered() {
    let mut running = start(both_protocols(), 8).await;
    let batch = go_cpu_batch();

    let reply = post(running.http, &[PROTOBUF], batch.encode_to_vec()).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.header("content-type"), "application/x-protobuf");
    assert_eq!(
        ExportProfilesServiceResponse::decode(reply.body.clone()).expect("response"),
        ExportProfilesServiceResponse::default()
    );
    let got = running.next_batch().await;
    assert_eq!(got.sample_count(), batch.sample_count());
    assert_from_loopback(&got);

    let reply = post(
        running.http,
        &[("content-type", "application/json; charset=utf-8")],
        batch.to_json(),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.header("content-type"), "application/json");
    assert_eq!(&reply.body[..], b"{}");
    let got = running.next_batch().await;
    assert_eq!(got.sample_count(), batch.sample_count());
    assert_from_loopback(&got);
    running.stop().await;
}

#[tokio::test]
async fn http_gzip_and_zstd_bodies_are_delivered() {
    let mut running = start(both_protocols(), 8).await;
    let batch = go_cpu_batch();
    let gz = gzip_fast(&batch.encode_to_vec());
    let reply = post(running.http, &[PROTOBUF, ("content-encoding", "gzip")], gz).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(
        running.next_batch().await.sample_count(),
        batch.sample_count()
    );

    let zst = zstd::encode_all(batch.to_json().as_slice(), 3).expect("zstd");
    let reply = post(running.http, &[JSON, ("content-encoding", "zstd")], zst).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(
        running.next_batch().await.sample_count(),
        batch.sample_count()
    );
    running.stop().await;
}

/// otelcol's snappy: `snappy` as one raw block (its clients since v0.123) or the framing
/// format (before), told apart by the stream identifier; `x-snappy-framed` framed.
#[tokio::test]
async fn http_snappy_bodies_are_delivered_in_both_forms() {
    use std::io::Write;
    let mut running = start(both_protocols(), 8).await;
    let batch = go_cpu_batch();
    let plain = batch.encode_to_vec();
    let block = snap::raw::Encoder::new()
        .compress_vec(&plain)
        .expect("snappy");
    let mut framed = snap::write::FrameEncoder::new(Vec::new());
    framed.write_all(&plain).expect("frame");
    let framed = framed.into_inner().expect("framed");
    for (coding, body) in [
        ("snappy", block.clone()),
        ("snappy", framed.clone()),
        ("x-snappy-framed", framed),
    ] {
        let reply = post(
            running.http,
            &[PROTOBUF, ("content-encoding", coding)],
            body,
        )
        .await;
        assert_eq!(reply.status, 200, "{coding}: {:?}", reply.body);
        assert_eq!(
            running.next_batch().await.sample_count(),
            batch.sample_count()
        );
    }
    // A raw block is not the framing format.
    let reply = post(
        running.http,
        &[PROTOBUF, ("content-encoding", "x-snappy-framed")],
        block,
    )
    .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    running.stop().await;
}

#[tokio::test]
async fn http_bad_bodies_are_400_with_a_status_in_the_request_encoding() {
    let mut running = start(both_protocols(), 8).await;
    let invalid = invalid_request();

    // JSON: {"code":3,"message":...} naming the field.
    let json_body = {
        let batch_json = ProfileBatch::decode(&go_cpu_batch().encode_to_vec())
            .expect("valid")
            .to_json();
        let mut v: serde_json::Value = serde_json::from_slice(&batch_json).expect("json");
        v["resourceProfiles"][0]["scopeProfiles"][0]["profiles"][0]["samples"][0]["stackIndex"] =
            1_000_000.into();
        serde_json::to_vec(&v).expect("json")
    };
    let reply = post(running.http, &[JSON], json_body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.header("content-type"), "application/json");
    let status = reply.json();
    assert_eq!(status["code"], 3);
    let message = status["message"].as_str().expect("message");
    assert!(message.contains("samples[0].stack_index"), "{message}");

    // Protobuf: a google.rpc.Status message.
    let reply = post(running.http, &[PROTOBUF], invalid.encode_to_vec()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.header("content-type"), "application/x-protobuf");
    let status = RpcStatus::decode(reply.body.clone()).expect("status");
    assert_eq!(status.code, 3);
    assert!(status.message.contains("stack_index"), "{}", status.message);

    // Not protobuf at all, not JSON at all, not gzip though it says so.
    let reply = post(running.http, &[PROTOBUF], b"\x07garbage".to_vec()).await;
    assert_eq!(reply.status, 400);
    let reply = post(running.http, &[JSON], b"{not json".to_vec()).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("JSON"))
    );
    let reply = post(
        running.http,
        &[PROTOBUF, ("content-encoding", "gzip")],
        b"plain".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(running.rx.try_recv().is_err(), "nothing delivered");
    running.stop().await;
}

#[tokio::test]
async fn http_oversize_bodies_are_413() {
    let mut config = both_protocols();
    if let Some(h) = config.protocols.http.as_mut() {
        h.max_request_body_size = 64 << 10;
    }
    let running = start(config, 8).await;
    // As sent.
    let reply = post(running.http, &[PROTOBUF], vec![0u8; 100 << 10]).await;
    assert_eq!(reply.status, 413);
    assert_eq!(
        RpcStatus::decode(reply.body.clone()).expect("status").code,
        8
    );
    // After decompression: a small gzip or zstd body that expands past the cap.
    let zeros = vec![0u8; 1 << 20];
    let gz = gzip_fast(&zeros);
    assert!(gz.len() < 64 << 10);
    let reply = post(running.http, &[PROTOBUF, ("content-encoding", "gzip")], gz).await;
    assert_eq!(reply.status, 413);
    let zst = zstd::encode_all(zeros.as_slice(), 3).expect("zstd");
    let reply = post(running.http, &[JSON, ("content-encoding", "zstd")], zst).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.json()["code"], 8);
    running.stop().await;
}

#[tokio::test]
async fn http_wrong_type_method_path_and_encoding() {
    let running = start(both_protocols(), 8).await;
    let body = go_cpu_batch().encode_to_vec();
    let reply = post(
        running.http,
        &[("content-type", "text/plain")],
        body.clone(),
    )
    .await;
    assert_eq!(reply.status, 415);
    assert!(
        String::from_utf8_lossy(&reply.body).contains("application/x-protobuf"),
        "{:?}",
        reply.body
    );
    let reply = post(running.http, &[], body.clone()).await;
    assert_eq!(reply.status, 415);
    let reply = post(running.http, &[PROTOBUF, ("content-encoding", "br")], body).await;
    assert_eq!(reply.status, 415);

    let reply = http_call(
        running.http,
        "GET",
        "/v1development/profiles",
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("allow"), "POST");
    let reply = http_call(running.http, "POST", "/v1/traces", &[JSON], b"{}".to_vec()).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["code"], 5);
    running.stop().await;
}

#[tokio::test]
async fn http_backpressure_is_429_with_retry_after() {
    let mut running = start(both_protocols(), 1).await;
    let body = go_cpu_batch().encode_to_vec();
    let reply = post(running.http, &[PROTOBUF], body.clone()).await;
    assert_eq!(reply.status, 200);
    // The pipeline is full and not drained: after the 5 s wait for room, 429.
    let reply = post(running.http, &[JSON], go_cpu_batch().to_json()).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.header("retry-after"), "1");
    let status = reply.json();
    assert_eq!(status["code"], 8);
    assert_eq!(status["details"][0]["retryDelay"], "1s");
    assert!(running.rx.recv().await.is_some());
    assert!(
        running.rx.try_recv().is_err(),
        "the refused batch was not delivered"
    );
    running.stop().await;
}

/// While one request holds the whole decoding budget (its batch waits for pipeline room),
/// others are refused at once, before they are decoded, on both protocols; once it is
/// done, requests are accepted again.
#[tokio::test]
async fn a_spent_decoding_budget_refuses_at_once_and_recovers() {
    let mut config = both_protocols();
    config.max_decoding_memory_mib = 1;
    let mut running = start(config, 1).await;
    // Large enough that one request reserves the whole 1 MiB (the receivers reserve
    // DECODE_AMPLIFICATION bytes per input byte).
    let mut padded = request_of(&go_cpu_batch());
    if let Some(d) = padded.dictionary.as_mut() {
        let whole = (1 << 20) / profcol_core::pdata::limits::DECODE_AMPLIFICATION;
        d.string_table.push("x".repeat(whole + 10_000));
    }
    let body = padded.encode_to_vec();
    assert_eq!(
        post(running.http, &[PROTOBUF], body.clone()).await.status,
        200
    );
    // The pipeline is full: this one holds the budget while it waits for room.
    let http = running.http;
    let waiting = tokio::spawn({
        let body = body.clone();
        async move { post(http, &[PROTOBUF], body).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let reply = post(running.http, &[PROTOBUF], body.clone()).await;
    assert_eq!(reply.status, 429, "{:?}", reply.body);
    assert!(t0.elapsed() < Duration::from_secs(2), "refused at once");
    assert_eq!(reply.header("retry-after"), "1");
    let refusal = RpcStatus::decode(reply.body.clone()).expect("a status in protobuf");
    assert_eq!(refusal.code, 8);
    assert!(
        refusal
            .message
            .contains("decoding as much as its memory budget allows"),
        "{}",
        refusal.message
    );
    let status = running
        .grpc_client()
        .await
        .export(padded.clone())
        .await
        .expect_err("busy");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let details = RpcStatus::decode(status.details()).expect("details");
    assert_eq!(details.retry_info(), Some(Duration::from_secs(1)));
    // Draining lets the waiting request finish and release the budget.
    assert!(running.rx.recv().await.is_some());
    assert_eq!(waiting.await.expect("joined").status, 200);
    assert!(running.rx.recv().await.is_some());
    assert_eq!(post(running.http, &[PROTOBUF], body).await.status, 200);
    assert!(running.rx.recv().await.is_some());
    running
        .grpc_client()
        .await
        .export(request_of(&go_cpu_batch()))
        .await
        .expect("accepted again");
    running.stop().await;
}

// ---- shutdown --------------------------------------------------------------------------

#[tokio::test]
async fn shutdown_returns_promptly_and_waiting_requests_get_unavailable() {
    let running = start(both_protocols(), 1).await;
    let body = go_cpu_batch().encode_to_vec();
    assert_eq!(
        post(running.http, &[PROTOBUF], body.clone()).await.status,
        200
    );
    // Both of these wait for room that never comes ...
    let http_addr = running.http;
    let waiting_http = tokio::spawn(async move { post(http_addr, &[PROTOBUF], body).await });
    let mut client = running.grpc_client().await;
    let waiting_grpc =
        tokio::spawn(async move { client.export(request_of(&go_cpu_batch())).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // ... until shutdown, which answers them and stops the servers within a second.
    running.stop().await;
    let reply = waiting_http.await.expect("http task");
    assert_eq!(reply.status, 503);
    let status = waiting_grpc.await.expect("grpc task").expect_err("refused");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test]
async fn a_port_in_use_is_fatal() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let config = Config {
        protocols: Protocols {
            grpc: Some(GrpcConfig {
                endpoint: format!("127.0.0.1:{port}"),
                ..GrpcConfig::default()
            }),
            http: None,
        },
        ..Config::default()
    };
    let running = spawn(config, 1);
    let result = tokio::time::timeout(Duration::from_secs(5), running.task)
        .await
        .expect("returns")
        .expect("no panic");
    match result {
        Err(e) => {
            let m = profcol_core::errors::error_chain(&e);
            assert!(
                m.starts_with(&format!("otlp receiver: cannot listen on 127.0.0.1:{port}")),
                "{m}"
            );
        }
        Ok(()) => panic!("expected a fatal error"),
    }
}

#[tokio::test]
async fn only_the_configured_protocol_is_served() {
    let mut config = both_protocols();
    let http_port: u16 = config
        .protocols
        .http
        .take()
        .and_then(|h| {
            h.endpoint
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
        })
        .expect("port");
    let mut running = start(config, 4).await;
    running
        .grpc_client()
        .await
        .export(request_of(&go_cpu_batch()))
        .await
        .expect("grpc served");
    running.next_batch().await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", http_port))
            .await
            .is_err(),
        "http is not served"
    );
    running.stop().await;
}

// ---- TLS -------------------------------------------------------------------------------

struct Pki {
    dir: PathBuf,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl Pki {
    /// A CA, a server certificate for localhost and a client certificate, written as PEM
    /// files into a fresh directory.
    fn generate(tag: &str) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
            KeyPair,
        };
        let dir = profcol_core::testkit::scratch_dir(&format!("otlp-tls-{tag}"));
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca =
            CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("ca");
        let server_key = KeyPair::generate().expect("key");
        let mut server_params = CertificateParams::new(vec!["localhost".into()]).expect("params");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params
            .signed_by(&server_key, &ca)
            .expect("server cert");
        let client_key = KeyPair::generate().expect("key");
        let mut client_params = CertificateParams::new(vec!["client".into()]).expect("params");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params
            .signed_by(&client_key, &ca)
            .expect("client cert");
        let ca_pem = ca.pem();
        std::fs::write(dir.join("ca.crt"), &ca_pem).expect("write");
        std::fs::write(dir.join("server.crt"), server_cert.pem()).expect("write");
        std::fs::write(dir.join("server.key"), server_key.serialize_pem()).expect("write");
        Pki {
            dir,
            ca_pem,
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    fn server_tls(&self, mutual: bool) -> TlsConfig {
        TlsConfig {
            cert_file: Some(self.dir.join("server.crt")),
            key_file: Some(self.dir.join("server.key")),
            client_ca_file: mutual.then(|| self.dir.join("ca.crt")),
        }
    }

    fn client_config(&self, with_cert: bool, alpn: &[u8]) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(cert.expect("pem")).expect("root");
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
        let mut config = if with_cert {
            let certs =
                rustls::pki_types::CertificateDer::pem_slice_iter(self.client_cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("certs");
            let key =
                rustls::pki_types::PrivateKeyDer::from_pem_slice(self.client_key_pem.as_bytes())
                    .expect("key");
            builder
                .with_client_auth_cert(certs, key)
                .expect("client auth")
        } else {
            builder.with_no_client_auth()
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        config
    }

    /// POSTs over TLS; an error (as text) when the TLS session or the request fails.
    async fn https_post(
        &self,
        addr: SocketAddr,
        with_cert: bool,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<HttpReply, String> {
        let connector =
            tokio_rustls::TlsConnector::from(Arc::new(self.client_config(with_cert, b"http/1.1")));
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        // With TLS 1.3 the client's side of the handshake is done before the server has
        // checked the client's certificate; a refusal shows on the first exchange.
        let stream = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        try_send(
            stream,
            request("POST", "/v1development/profiles", headers, body),
        )
        .await
    }

    async fn grpc_client(&self, addr: SocketAddr) -> ProfilesServiceClient<Channel> {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .domain_name("localhost");
        let channel = Endpoint::from_shared(format!("https://{addr}"))
            .expect("uri")
            .tls_config(tls)
            .expect("tls")
            .connect()
            .await
            .expect("connect over TLS");
        ProfilesServiceClient::new(channel)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn tls_on_both_protocols() {
    let pki = Pki::generate("plain");
    let mut config = both_protocols();
    if let Some(g) = config.protocols.grpc.as_mut() {
        g.tls = Some(pki.server_tls(false));
    }
    if let Some(h) = config.protocols.http.as_mut() {
        h.tls = Some(pki.server_tls(false));
    }
    let mut running = start(config, 8).await;
    let batch = go_cpu_batch();

    pki.grpc_client(running.grpc)
        .await
        .export(request_of(&batch))
        .await
        .expect("export over TLS");
    let got = running.next_batch().await;
    assert_eq!(got.sample_count(), batch.sample_count());
    assert_from_loopback(&got);

    let reply = pki
        .https_post(running.http, false, &[PROTOBUF], batch.encode_to_vec())
        .await
        .expect("https");
    assert_eq!(reply.status, 200);
    let got = running.next_batch().await;
    assert_eq!(got.sample_count(), batch.sample_count());
    assert_from_loopback(&got);

    // Plain text to a TLS port gets no answer.
    let plain = tokio::time::timeout(
        Duration::from_secs(5),
        ProfilesServiceClient::connect(format!("http://{}", running.grpc)),
    )
    .await;
    if let Ok(Ok(mut client)) = plain {
        assert!(client.export(request_of(&batch)).await.is_err());
    }
    running.stop().await;
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate() {
    let pki = Pki::generate("mutual");
    let mut config = both_protocols();
    config.protocols.grpc = None;
    if let Some(h) = config.protocols.http.as_mut() {
        h.tls = Some(pki.server_tls(true));
    }
    let mut running = start(config, 8).await;
    let body = go_cpu_batch().encode_to_vec();
    let reply = pki
        .https_post(running.http, true, &[PROTOBUF], body.clone())
        .await
        .expect("with a client certificate");
    assert_eq!(reply.status, 200);
    running.next_batch().await;
    let refused = pki.https_post(running.http, false, &[PROTOBUF], body).await;
    assert!(refused.is_err(), "served without a client certificate");
    running.stop().await;
}

#[tokio::test]
async fn bad_tls_files_fail_create_with_the_file_name() {
    let missing = Path::new("/nonexistent/profcol/server.crt");
    let mut config = both_protocols();
    if let Some(h) = config.protocols.http.as_mut() {
        h.tls = Some(TlsConfig {
            cert_file: Some(missing.into()),
            key_file: Some("/nonexistent/profcol/server.key".into()),
            client_ca_file: None,
        });
    }
    let e = OtlpReceiverFactory
        .create(
            profcol_core::config::Checked::check(config).expect("a valid config"),
            &create_context(),
        )
        .err()
        .expect("missing file");
    let text = profcol_core::errors::error_chain(&e);
    assert!(
        text.starts_with("otlp: protocols::http: tls cert_file"),
        "{text}"
    );
    assert!(text.contains("/nonexistent/profcol/server.crt"), "{text}");

    // A key that is not a key.
    let pki = Pki::generate("badkey");
    std::fs::write(pki.dir.join("server.key"), "not a key").expect("write");
    let mut config = both_protocols();
    if let Some(g) = config.protocols.grpc.as_mut() {
        g.tls = Some(pki.server_tls(false));
    }
    let e = OtlpReceiverFactory
        .create(
            profcol_core::config::Checked::check(config).expect("a valid config"),
            &create_context(),
        )
        .err()
        .expect("bad key");
    let text = profcol_core::errors::error_chain(&e);
    assert!(text.contains("key_file"), "{text}");
}
