//! `pprof` receiver: pprof profiles pushed to a server (`POST /v1/pprof`, Pyroscope's
//! `/ingest` and Connect `Push`), scraped from Go's `net/http/pprof` endpoints, or read
//! from files. The modes are contrib's `pprofreceiver`'s and run in any combination.
//!
//! Every profile is translated with [`pprof_to_batch`] (sample types, period and
//! timestamps kept) and handed to all pipelines or none ([`ReceiverOutput::deliver`]);
//! pushed requests learn of a refusal as 429/503, scrapes and files log it.
//!
//! [`pprof_to_batch`]: profcol_core::pdata::pprof::pprof_to_batch

mod config;
mod delta;
mod endpoint;
mod file;
mod glob;
mod pyroscope;
mod query_and_multipart;
mod scrape;

/// The request decoders, reachable for the fuzz targets in `fuzz/`; not an API.
#[doc(hidden)]
pub mod fuzzing {
    use profcol_core::decode_budget::DecodeBudget;
    use profcol_core::pdata::ProfileBatch;

    /// Decodes a Connect `Push` body as the server does, within `limit` bytes.
    pub fn push(body: &[u8], limit: usize) -> Result<Option<ProfileBatch>, String> {
        let mut permit = DecodeBudget::for_pprof(1024).permit();
        crate::pyroscope::push(body, limit, &mut permit).map_err(|e| e.to_string())
    }

    /// Decodes an `/ingest` request (`query` and `content_type` as sent) as the server does.
    pub fn ingest(
        query: &str,
        content_type: &str,
        body: &[u8],
        limit: usize,
    ) -> Result<ProfileBatch, String> {
        let uri: http::Uri = format!("/ingest?{query}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let mut headers = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(content_type) {
            headers.insert(http::header::CONTENT_TYPE, v);
        }
        let mut permit = DecodeBudget::for_pprof(1024).permit();
        crate::pyroscope::ingest(&uri, &headers, body, limit, &mut permit)
            .map_err(|e| e.to_string())
    }
}

use std::convert::Infallible;

use async_trait::async_trait;
use http::Request;
use hyper::body::Incoming;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Intake, Receiver, ReceiverContext, ReceiverFactory,
    Stability,
};
use profcol_core::decode_budget::DecodeBudget;
use profcol_core::endpoint::listen;
use profcol_core::pdata::types::{AnyValue, InstrumentationScope, KeyValue, Value};
use profcol_core::server::{self, PeerAddr};

pub use config::{
    Config, FileConfig, ProfileKind, ProfileSetting, Profiles, RemoteConfig, ServerConfig, Target,
};
pub use endpoint::{INGEST_PATH, PPROF_PATH, PUSH_PATH, SERVICE_NAME_HEADER};
pub use file::FILE_PATH_ATTRIBUTE;
pub use pyroscope::{
    LabelPair, PROFILE_NAME_ATTRIBUTE, PushRequest, PushResponse, RawProfileSeries, RawSample,
};

/// Scope names, one per way in.
pub const SCOPE_SERVER: &str = "profcol/pprof/server";
pub const SCOPE_INGEST: &str = "profcol/pprof/ingest";
pub const SCOPE_PUSH: &str = "profcol/pprof/push";
pub const SCOPE_SCRAPE: &str = "profcol/pprof/scrape";
pub const SCOPE_FILE: &str = "profcol/pprof/file";

/// Failed scrapes, by `receiver`, `target` and `profile`.
pub const SCRAPE_FAILURES_METRIC: &str = "otelcol_receiver_pprof_scrape_failures_total";
/// Files that could not be read or parsed, by `receiver`.
pub const FILE_FAILURES_METRIC: &str = "otelcol_receiver_pprof_file_failures_total";

/// Creates `pprof` receivers.
pub struct PprofReceiverFactory;

impl ReceiverFactory for PprofReceiverFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "pprof";
    const STABILITY: Stability = Stability::Alpha;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Receiver>, BuildError> {
        let (config, compiled) = config.into_parts();
        let remote = config
            .remote
            .as_ref()
            .map(|remote| scrape::Scraper::new(remote, compiled.scrape_jobs))
            .transpose()
            .map_err(|e| {
                BuildError::caused_by(&ctx.id, "remote: cannot set up the scrape client", e)
            })?;
        let file = config
            .file
            .as_ref()
            .map(|file| file::FileWatcher::new(file, compiled.file_patterns));
        Ok(Box::new(PprofReceiver {
            server: config.server,
            remote,
            file,
        }))
    }
}

struct PprofReceiver {
    server: Option<ServerConfig>,
    remote: Option<scrape::Scraper>,
    file: Option<file::FileWatcher>,
}

#[async_trait]
impl Receiver for PprofReceiver {
    async fn run(self: Box<Self>, ctx: ReceiverContext) -> Result<(), ComponentError> {
        let PprofReceiver {
            server,
            remote,
            file,
        } = *self;
        let id = ctx.id.to_string();
        let intake = Intake::new(ctx.output, ctx.shutdown.clone());
        // Bind before anything runs, so a port in use stops the receiver at once.
        let server = match server {
            Some(config) => {
                let tcp = listen("pprof receiver", &config.endpoint, None).await?;
                match tcp.local_addr() {
                    Ok(addr) => tracing::info!(id, %addr, "pprof receiver listening"),
                    Err(e) => tracing::info!(id, error = %e, "pprof receiver listening"),
                }
                let budget = DecodeBudget::for_pprof(config.max_decoding_memory_mib);
                Some((tcp, config.max_body_size(), budget))
            }
            None => None,
        };
        ctx.started.ready();
        let serving = async {
            if let Some((tcp, limit, budget)) = server {
                let bytes = profcol_core::telemetry::WireBytes::received(
                    &ctx.telemetry,
                    &ctx.id.to_string(),
                    "http",
                );
                let endpoint = endpoint::Endpoint::new(intake.clone(), limit, budget, bytes);
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let endpoint = endpoint.clone();
                    async move {
                        let peer = request.extensions().get::<PeerAddr>().map(|p| p.0);
                        Ok::<_, Infallible>(endpoint.handle(request, peer).await)
                    }
                });
                let listener = server::Listener {
                    tcp,
                    tls: None,
                    http2_only: false,
                    component: "pprof receiver",
                    protocol: "http",
                };
                server::serve(listener, service, ctx.shutdown.clone()).await;
            }
        };
        let scraping = async {
            if let Some(scraper) = remote {
                scraper
                    .run(intake.clone(), &ctx.telemetry, &id, ctx.shutdown.clone())
                    .await;
            }
        };
        let reading = async {
            if let Some(watcher) = file {
                watcher
                    .run(intake.clone(), &ctx.telemetry, &id, ctx.shutdown.clone())
                    .await;
            }
        };
        tokio::join!(serving, scraping, reading);
        tracing::info!(id, "pprof receiver stopped");
        Ok(())
    }
}

pub(crate) fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.to_owned())),
        }),
        key_strindex: 0,
    }
}

/// Our instrumentation scope, `name` at this crate's version.
pub(crate) fn scope(name: &str, attributes: Vec<KeyValue>) -> InstrumentationScope {
    InstrumentationScope {
        name: name.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        attributes,
        ..Default::default()
    }
}

profcol_core::component_conformance!(receiver: PprofReceiverFactory, "pprof", Alpha, default_errors: [""]);
