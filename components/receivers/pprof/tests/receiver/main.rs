//! The receiver started through its factory and driven by real peers: a hyper HTTP/1.1
//! client against the push server, a hyper server standing in for Go's net/http/pprof,
//! and files on disk.

mod file;
mod push;
mod remote;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use profcol_core::component::{
    ComponentError, ComponentId, CreateContext, ReceiverContext, ReceiverFactory, ReceiverOutput,
    Started,
};
use profcol_core::pdata::codec::{DEFAULT_MAX_DECOMPRESSED_BYTES, plain_pprof};
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::pdata::types::{Profile, Value};
use profcol_core::pdata::{ProfileBatch, WireBatch};
use profcol_core::telemetry::Telemetry;
use profcol_proto::pprof as pp;
use profcol_receiver_pprof::{Config, PprofReceiverFactory};
use prost::bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// ---- fixtures -------------------------------------------------------------------------

/// A file of the repository's `testdata/pprof`, as stored (gzipped).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../../testdata/pprof/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn fixture_profile(name: &str) -> pp::Profile {
    let plain =
        plain_pprof(&fixture(name), DEFAULT_MAX_DECOMPRESSED_BYTES).expect("fixture is pprof");
    <pp::Profile as prost::Message>::decode(plain.as_slice()).expect("fixture is pprof")
}

/// Samples in the batch a fixture translates to (one per sample and sample type).
pub fn fixture_samples(name: &str) -> usize {
    let plain =
        plain_pprof(&fixture(name), DEFAULT_MAX_DECOMPRESSED_BYTES).expect("fixture is pprof");
    pprof_to_batch(&plain, ToOtlpOptions::default())
        .expect("translates")
        .sample_count()
}

pub use profcol_core::testkit::free_port;

// ---- batch inspection -----------------------------------------------------------------

pub fn string(batch: &WireBatch, index: i32) -> &str {
    batch
        .dictionary()
        .string_table
        .get(usize::try_from(index).expect("index"))
        .map_or("", String::as_str)
}

/// The sample type names of the batch's profiles, in order.
pub fn sample_types(batch: &WireBatch) -> Vec<String> {
    batch
        .profiles()
        .map(|p| {
            string(
                batch,
                p.sample_type.as_ref().map_or(0, |st| st.type_strindex),
            )
            .to_owned()
        })
        .collect()
}

/// The profile of the named sample type.
pub fn profile<'a>(batch: &'a WireBatch, sample_type: &str) -> &'a Profile {
    batch
        .profiles()
        .find(|p| {
            string(
                batch,
                p.sample_type.as_ref().map_or(0, |st| st.type_strindex),
            ) == sample_type
        })
        .unwrap_or_else(|| panic!("no {sample_type} profile in {:?}", sample_types(batch)))
}

/// The resource attributes of resource `i`, as (key, text).
pub fn resource_attributes(batch: &WireBatch, i: usize) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = batch.resource_profiles()[i]
        .resource
        .as_ref()
        .map(|r| {
            r.attributes
                .iter()
                .map(|kv| {
                    let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Value::StringValue(s)) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (kv.key.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = list
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    out.sort();
    out
}

pub fn scope_name(batch: &WireBatch, i: usize) -> String {
    batch.resource_profiles()[i].scope_profiles[0]
        .scope
        .as_ref()
        .map(|s| s.name.clone())
        .unwrap_or_default()
}

// ---- the receiver ---------------------------------------------------------------------

pub struct Running {
    pub addr: Option<SocketAddr>,
    pub rx: mpsc::Receiver<ProfileBatch>,
    /// Another sender into the pipeline, to fill it.
    pub tx: mpsc::Sender<ProfileBatch>,
    pub telemetry: Telemetry,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ComponentError>>,
}

pub fn spawn(config: Config, capacity: usize) -> Running {
    let addr = config
        .server
        .as_ref()
        .and_then(|s| s.endpoint.parse::<SocketAddr>().ok());
    let telemetry = Telemetry::new();
    let receiver = PprofReceiverFactory
        .create(
            profcol_core::config::Checked::check(config).expect("a valid config"),
            &CreateContext {
                id: ComponentId::new("pprof", None),
                telemetry: telemetry.clone(),
                host: Default::default(),
            },
        )
        .expect("create");
    let (tx, rx) = mpsc::channel(capacity);
    let shutdown = CancellationToken::new();
    // This helper is synchronous; the tests wait for the listener themselves.
    let (started, _started_rx) = Started::new();
    let task = tokio::spawn(receiver.run(ReceiverContext {
        id: ComponentId::new("pprof", None),
        output: ReceiverOutput::for_test(vec![tx.clone()]),
        started,
        shutdown: shutdown.clone(),
        telemetry: telemetry.clone(),
    }));
    Running {
        addr,
        rx,
        tx,
        telemetry,
        shutdown,
        task,
    }
}

/// Starts the receiver and, with a server, waits until it accepts connections.
pub async fn start(config: Config, capacity: usize) -> Running {
    let running = spawn(config, capacity);
    if let Some(addr) = running.addr {
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
    /// The next batch, as OTLP's generated types for inspection.
    pub async fn next_batch(&mut self) -> WireBatch {
        let batch: ProfileBatch = tokio::time::timeout(Duration::from_secs(10), self.rx.recv())
            .await
            .expect("a batch in time")
            .expect("channel open");
        batch.to_wire()
    }

    /// Asserts that nothing arrives for `wait`.
    pub async fn assert_quiet(&mut self, wait: Duration) {
        if let Ok(Some(b)) = tokio::time::timeout(wait, self.rx.recv()).await {
            panic!("unexpected batch: {:?}", sample_types(&b.to_wire()));
        }
    }

    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> i64 {
        self.telemetry.value(name, labels).unwrap_or(0)
    }

    /// Cancels shutdown and checks that `run` returns within a second.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(1), self.task)
            .await
            .expect("run returns within 1 s of shutdown")
            .expect("no panic");
        assert!(result.is_ok(), "{:?}", result.err());
    }
}

// ---- an HTTP/1.1 client ----------------------------------------------------------------

pub struct Reply {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request on a fresh connection.
pub async fn call(
    addr: SocketAddr,
    method: http::Method,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut builder = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path_and_query}"))
        .header("host", addr.to_string());
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder.body(Full::new(Bytes::from(body))).expect("request");
    let response = tokio::time::timeout(Duration::from_secs(15), sender.send_request(request))
        .await
        .expect("an answer in time")
        .expect("response");
    let (parts, body) = response.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.expect("body").to_bytes(),
    }
}

pub async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
    call(addr, http::Method::POST, path, headers, body).await
}

/// `create` takes a checked config only, so an invalid one never reaches it: the check
/// refuses it, saying why.
#[test]
fn invalid_config_cannot_reach_create() {
    let errors = profcol_core::config::Checked::check(Config::default())
        .expect_err("an empty config must not create");
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("at least one mode")),
        "{errors:?}"
    );
}
