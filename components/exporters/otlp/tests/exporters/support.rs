//! Test servers on 127.0.0.1 and shared fixtures.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use profcol_core::component::{ComponentId, CreateContext, Exporter, ExporterFactory};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::plain_pprof;
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::telemetry::Telemetry;
use profcol_proto::otlp::collector::profiles::v1development::profiles_service_server::{
    ProfilesService, ProfilesServiceServer,
};
use profcol_proto::otlp::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub fn go_cpu_batch() -> ProfileBatch {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../testdata/pprof/go-cpu.pb.gz"
    );
    let bytes = std::fs::read(path).expect("testdata/pprof/go-cpu.pb.gz");
    let profile = plain_pprof(&bytes, 64 << 20).expect("pprof");
    let batch = pprof_to_batch(&profile, ToOtlpOptions::default()).expect("translate");
    assert!(batch.sample_count() > 0);
    batch
}

pub fn context(id: &str) -> (CreateContext, Telemetry) {
    let telemetry = Telemetry::new();
    let id = ComponentId::parse(id).expect("id");
    (
        CreateContext {
            id,
            telemetry: telemetry.clone(),
            host: Default::default(),
        },
        telemetry,
    )
}

pub fn create<F: ExporterFactory>(
    factory: &F,
    config: F::Config,
    id: &str,
) -> (Box<dyn Exporter>, Telemetry) {
    let config = profcol_core::config::Checked::check(config)
        .unwrap_or_else(|errors| panic!("not a valid config: {errors:?}"));
    let (ctx, telemetry) = context(id);
    let exporter = factory.create(config, &ctx).expect("create");
    (exporter, telemetry)
}

pub fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A port nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    addr
}

/// A fresh directory under the system temp dir.
pub fn temp_dir() -> PathBuf {
    profcol_core::testkit::scratch_dir("otlp-exporter")
}

/// A self-signed certificate for `names`, written as PEM files.
pub struct TestCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

pub fn self_signed(names: &[&str]) -> TestCert {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let certified = rcgen::generate_simple_self_signed(names).expect("rcgen");
    let cert_pem = certified.cert.pem();
    let key_pem = certified.signing_key.serialize_pem();
    let dir = temp_dir();
    let cert_file = dir.join("cert.pem");
    let key_file = dir.join("key.pem");
    std::fs::write(&cert_file, &cert_pem).expect("write cert");
    std::fs::write(&key_file, &key_pem).expect("write key");
    TestCert {
        cert_pem,
        key_pem,
        cert_file,
        key_file,
    }
}

fn rustls_server_config(
    cert: &TestCert,
    client_ca: Option<&TestCert>,
    alpn: &[&[u8]],
) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("cert pem");
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("key pem");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
                roots.add(c.expect("ca pem")).expect("ca");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).expect("server cert");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

// ---- gRPC: a tonic ProfilesService ----------------------------------------------------

pub type GrpcReply =
    Arc<dyn Fn() -> Result<ExportProfilesServiceResponse, tonic::Status> + Send + Sync>;

#[derive(Clone)]
pub struct GrpcServer {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<(HeaderMap, ExportProfilesServiceRequest)>>>,
    reply: Arc<Mutex<GrpcReply>>,
}

impl GrpcServer {
    pub fn set_reply(
        &self,
        reply: impl Fn() -> Result<ExportProfilesServiceResponse, tonic::Status> + Send + Sync + 'static,
    ) {
        *self.reply.lock().expect("lock") = Arc::new(reply);
    }

    pub fn take(&self) -> Vec<(HeaderMap, ExportProfilesServiceRequest)> {
        std::mem::take(&mut *self.received.lock().expect("lock"))
    }
}

#[derive(Clone)]
struct Service(GrpcServer);

#[tonic::async_trait]
impl ProfilesService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportProfilesServiceRequest>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, tonic::Status> {
        let (metadata, _, message) = request.into_parts();
        self.0
            .received
            .lock()
            .expect("lock")
            .push((metadata.into_headers(), message));
        let reply = self.0.reply.lock().expect("lock").clone();
        reply().map(tonic::Response::new)
    }
}

/// A tonic ProfilesService on 127.0.0.1 that accepts gzip and zstd, optionally over TLS.
pub async fn grpc_server(tls: Option<&TestCert>) -> GrpcServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = GrpcServer {
        addr: listener.local_addr().expect("addr"),
        received: Default::default(),
        reply: Arc::new(Mutex::new(Arc::new(|| {
            Ok(ExportProfilesServiceResponse::default())
        }))),
    };
    let service = ProfilesServiceServer::new(Service(server.clone()))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .accept_compressed(tonic::codec::CompressionEncoding::Zstd)
        .max_decoding_message_size(64 << 20);
    let mut builder = tonic::transport::Server::builder();
    if let Some(cert) = tls {
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&cert.cert_pem, &cert.key_pem),
            ))
            .expect("server tls");
    }
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(builder.add_service(service).serve_with_incoming(incoming));
    server
}

/// One request as a plain HTTP server saw it.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// An HTTP/2 server that records the raw gRPC request and answers an empty
/// ExportProfilesServiceResponse with grpc-status 0: to see the bytes on the wire.
pub async fn raw_grpc_server() -> (SocketAddr, Arc<Mutex<Vec<RawRequest>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Arc<Mutex<Vec<RawRequest>>> = Default::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<Incoming>| {
                    let record = record.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.expect("body").to_bytes();
                        record.lock().expect("lock").push(RawRequest {
                            path: parts.uri.path().to_owned(),
                            headers: parts.headers,
                            body,
                        });
                        let mut trailers = HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        let frames = vec![
                            Ok::<_, Infallible>(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
                            Ok(Frame::trailers(trailers)),
                        ];
                        let body = StreamBody::new(tokio_stream::iter(frames));
                        http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(body)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

// ---- HTTP: a hyper server that records and answers as told ------------------------------

#[derive(Clone)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl HttpReply {
    pub fn ok() -> Self {
        HttpReply {
            status: 200,
            headers: vec![("content-type", "application/x-protobuf".into())],
            body: Vec::new(),
        }
    }
}

#[derive(Clone)]
pub struct HttpServer {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<RawRequest>>>,
    reply: Arc<Mutex<HttpReply>>,
}

impl HttpServer {
    pub fn set_reply(&self, reply: HttpReply) {
        *self.reply.lock().expect("lock") = reply;
    }

    pub fn take(&self) -> Vec<RawRequest> {
        std::mem::take(&mut *self.received.lock().expect("lock"))
    }

    pub fn base_url(&self, scheme: &str, host: &str) -> String {
        format!("{scheme}://{host}:{}", self.addr.port())
    }
}

/// An HTTP/1.1 server on 127.0.0.1, optionally TLS (and mTLS with `client_ca`).
pub async fn http_server(tls: Option<&TestCert>, client_ca: Option<&TestCert>) -> HttpServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = HttpServer {
        addr: listener.local_addr().expect("addr"),
        received: Default::default(),
        reply: Arc::new(Mutex::new(HttpReply::ok())),
    };
    let acceptor = tls.map(|cert| {
        TlsAcceptor::from(Arc::new(rustls_server_config(
            cert,
            client_ca,
            &[b"http/1.1"],
        )))
    });
    let state = server.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<Incoming>| {
                    let state = state.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.expect("body").to_bytes();
                        state.received.lock().expect("lock").push(RawRequest {
                            path: parts
                                .uri
                                .path_and_query()
                                .map(|p| p.as_str().to_owned())
                                .unwrap_or_default(),
                            headers: parts.headers,
                            body,
                        });
                        let reply = state.reply.lock().expect("lock").clone();
                        let mut response = http::Response::builder().status(reply.status);
                        for (k, v) in &reply.headers {
                            response = response.header(*k, v);
                        }
                        response.body(Full::new(Bytes::from(reply.body)))
                    }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(stream).await {
                            let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                        }
                    }
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
        }
    });
    server
}
