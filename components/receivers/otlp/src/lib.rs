//! `otlp` receiver: OTLP profiles over gRPC (`ProfilesService/Export`, port 4317) and HTTP
//! (`POST /v1development/profiles`, port 4318, protobuf or JSON), each optionally with TLS.
//! Configured as the OpenTelemetry Collector's otlpreceiver is, so users' configs carry over.
//!
//! Every request is validated at the door ([`ProfileBatch::new`]) and handed to all pipelines
//! or none ([`ReceiverOutput::deliver`]); a refusal reaches the sender as a retryable status
//! (gRPC RESOURCE_EXHAUSTED with RetryInfo / HTTP 429 with `Retry-After`).

mod config;
mod decompress;
mod grpc;
mod http;
mod status;

/// The HTTP body decoder, reachable for the fuzz targets in `fuzz/`; not an API.
#[doc(hidden)]
pub mod fuzzing {
    /// Decodes a body sent with `content_encoding` (as the header says it) and protobuf or
    /// JSON as the server does, within `limit` decompressed bytes.
    pub fn http_body(
        content_encoding: &str,
        json: bool,
        body: &[u8],
        limit: usize,
    ) -> Result<profcol_core::pdata::ProfileBatch, String> {
        crate::http::decode_for_fuzzing(content_encoding, json, body, limit)
    }
}

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Receiver, ReceiverContext, ReceiverFactory,
    Stability,
};
use profcol_core::decode_budget::DecodeBudget;
use profcol_core::endpoint::listen;
use profcol_core::pdata::types::ProfilesData;
use profcol_core::pdata::{ProfileBatch, ValidationError};
use profcol_core::server;
use profcol_core::server::tls::{Alpn, load_acceptor};
use profcol_core::telemetry::WireBytes;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub use config::{Config, GrpcConfig, HttpConfig, Protocols, TlsConfig};
pub use profcol_core::server::tls::TlsError;
pub use status::{ProtoAny, ProtoDuration, RetryInfo, RpcStatus, status_json};

/// The HTTP path profiles are posted to.
pub const PROFILES_HTTP_PATH: &str = http::PROFILES_PATH;

/// Creates `otlp` receivers.
pub struct OtlpReceiverFactory;

impl ReceiverFactory for OtlpReceiverFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "otlp";
    const STABILITY: Stability = Stability::Alpha;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Receiver>, BuildError> {
        let config = config.into_inner();
        let load = |protocol: &str, tls: Option<&TlsConfig>, alpn| {
            tls.map(|t| load_acceptor(t, alpn))
                .transpose()
                .map_err(|e| BuildError::caused_by(&ctx.id, format!("protocols::{protocol}"), e))
        };
        let grpc = match config.protocols.grpc {
            Some(c) => Some(GrpcSetup {
                tls: load("grpc", c.tls.as_ref(), Alpn::H2Only)?,
                config: c,
            }),
            None => None,
        };
        let http = match config.protocols.http {
            Some(c) => Some(HttpSetup {
                tls: load("http", c.tls.as_ref(), Alpn::H2AndHttp1)?,
                config: c,
            }),
            None => None,
        };
        Ok(Box::new(OtlpReceiver {
            grpc,
            http,
            budget: DecodeBudget::new(config.max_decoding_memory_mib),
        }))
    }
}

struct GrpcSetup {
    config: GrpcConfig,
    tls: Option<TlsAcceptor>,
}

struct HttpSetup {
    config: HttpConfig,
    tls: Option<TlsAcceptor>,
}

struct OtlpReceiver {
    grpc: Option<GrpcSetup>,
    http: Option<HttpSetup>,
    budget: DecodeBudget,
}

#[async_trait]
impl Receiver for OtlpReceiver {
    async fn run(self: Box<Self>, ctx: ReceiverContext) -> Result<(), ComponentError> {
        let intake = profcol_core::component::Intake::new(ctx.output, ctx.shutdown.clone());
        let budget = self.budget;
        // Bind both before serving either, so a port in use stops the whole receiver.
        let grpc = match self.grpc {
            Some(g) => {
                let tcp = listen(WHO, &g.config.endpoint, Some("grpc")).await?;
                log_listening(&ctx.id.to_string(), "grpc", &tcp, g.tls.is_some());
                Some((g, tcp))
            }
            None => None,
        };
        let http = match self.http {
            Some(h) => {
                let tcp = listen(WHO, &h.config.endpoint, Some("http")).await?;
                log_listening(&ctx.id.to_string(), "http", &tcp, h.tls.is_some());
                Some((h, tcp))
            }
            None => None,
        };
        ctx.started.ready();
        let grpc = async {
            if let Some((g, tcp)) = grpc {
                let listener = server::Listener {
                    tcp,
                    tls: g.tls,
                    http2_only: true,
                    component: WHO,
                    protocol: "grpc",
                };
                let bytes = WireBytes::received(&ctx.telemetry, &ctx.id.to_string(), "grpc");
                let endpoint = grpc::GrpcEndpoint::new(
                    intake.clone(),
                    budget.clone(),
                    g.config.max_recv_msg_size(),
                    bytes,
                );
                server::serve(listener, endpoint, ctx.shutdown.clone()).await;
            }
        };
        let http = async {
            if let Some((h, tcp)) = http {
                let listener = server::Listener {
                    tcp,
                    tls: h.tls,
                    http2_only: false,
                    component: WHO,
                    protocol: "http",
                };
                let bytes = WireBytes::received(&ctx.telemetry, &ctx.id.to_string(), "http");
                let endpoint = http::HttpEndpoint::new(
                    intake.clone(),
                    budget.clone(),
                    h.config.max_body_size(),
                    bytes,
                );
                server::serve(listener, endpoint, ctx.shutdown.clone()).await;
            }
        };
        tokio::join!(grpc, http);
        tracing::info!(id = %ctx.id, "otlp receiver stopped");
        Ok(())
    }
}

/// How logs and errors name this receiver.
const WHO: &str = "otlp receiver";

fn log_listening(id: &str, protocol: &str, tcp: &TcpListener, tls: bool) {
    match tcp.local_addr() {
        Ok(addr) => tracing::info!(id, protocol, %addr, tls, "otlp receiver listening"),
        Err(e) => tracing::info!(id, protocol, error = %e, tls, "otlp receiver listening"),
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum IntakeError {
    #[error("{0}")]
    Invalid(ValidationError),
    #[error("{0}")]
    Internal(String),
}

/// Validates a request off the async workers (a 64 MiB request takes a while).
pub(crate) async fn validate(data: ProfilesData) -> Result<ProfileBatch, IntakeError> {
    tokio::task::spawn_blocking(move || ProfileBatch::new(data))
        .await
        .map_err(|e| IntakeError::Internal(format!("validation task failed: {e}")))?
        .map_err(IntakeError::Invalid)
}

profcol_core::component_conformance!(receiver: OtlpReceiverFactory, "otlp", Alpha, default_errors: ["protocols"]);
