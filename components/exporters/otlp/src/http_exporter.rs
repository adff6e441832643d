//! `otlphttp`: OTLP profiles over HTTP/1.1, `POST <endpoint>/v1development/profiles`, in
//! protobuf or OTLP/JSON, the body compressed here at level 1.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use http::uri::{Scheme, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use profcol_core::component::{
    BuildError, CreateContext, ExportError, Exporter, ExporterFactory, Stability,
};
use profcol_core::exporterhelper::ExporterHelperSettings;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::otlp_json::read_export_response_json;
use profcol_core::pdata::types::ExportProfilesServiceResponse;
use profcol_core::telemetry::WireBytes;
use prost::Message;

use crate::config::{Compression, Encoding, HttpDestination, OtlpHttpExporterConfig};
use crate::payload::{Encoded, encode_batch};
use crate::reply::{PartialSuccess, error_chain, from_http_status};
use profcol_core::client::grpc::USER_AGENT;
use profcol_core::client::tls::{ClientTls, TlsError};

/// Largest reply body read (the OTLP spec's client recommendation).
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Makes `otlphttp` exporters.
pub struct OtlpHttpExporterFactory;

impl ExporterFactory for OtlpHttpExporterFactory {
    type Config = OtlpHttpExporterConfig;

    const TYPE_NAME: &'static str = "otlphttp";
    const STABILITY: Stability = Stability::Alpha;

    fn helper_settings(&self, config: &OtlpHttpExporterConfig) -> ExporterHelperSettings {
        config.helper_settings()
    }

    fn create(
        &self,
        config: profcol_core::config::Checked<OtlpHttpExporterConfig>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        let (config, destination) = config.into_parts();
        Ok(Box::new(HttpExporter::new(&config, destination, ctx)?))
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub(crate) struct HttpExporter {
    client: HttpClient,
    url: Uri,
    encoding: Encoding,
    compression: Compression,
    headers: HeaderMap,
    partial: PartialSuccess,
    bytes: WireBytes,
}

impl HttpExporter {
    pub(crate) fn new(
        config: &OtlpHttpExporterConfig,
        HttpDestination {
            url,
            headers: configured,
        }: HttpDestination,
        ctx: &CreateContext,
    ) -> Result<Self, BuildError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(config.encoding.content_type()),
        );
        if let Some(token) = config.compression.encoding_token() {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static(token));
        }
        // Configured headers last, so a configured User-Agent wins.
        for (name, value) in configured.iter() {
            headers.insert(name.clone(), value.clone());
        }

        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        if !config.timeout.is_zero() {
            tcp.set_connect_timeout(Some(config.timeout));
        }
        let connector = if url.scheme() == Some(&Scheme::HTTPS) {
            let tls = ClientTls::load(&config.tls)
                .map_err(|e| BuildError::caused_by(&ctx.id, "tls", e))?;
            let rustls = tls
                .rustls_config(&[])
                .map_err(|e| BuildError::caused_by(&ctx.id, "tls", e))?;
            let builder = HttpsConnectorBuilder::new()
                .with_tls_config(rustls)
                .https_only();
            let builder = match tls.server_name.clone() {
                Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name)),
                None => builder,
            };
            builder.enable_http1().wrap_connector(tcp)
        } else {
            if config.tls.ca_file().is_some() || config.tls.cert_file().is_some() {
                tracing::warn!(
                    exporter = %ctx.id,
                    url = %url,
                    "the endpoint is http://; the tls files are not used"
                );
            }
            HttpsConnectorBuilder::new()
                .with_tls_config(
                    plaintext_placeholder_config()
                        .map_err(|e| BuildError::caused_by(&ctx.id, "tls", e))?,
                )
                .https_or_http()
                .enable_http1()
                .wrap_connector(tcp)
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(HttpExporter {
            client,
            url,
            encoding: config.encoding,
            compression: config.compression,
            headers,
            partial: PartialSuccess::new(ctx),
            bytes: WireBytes::sent(&ctx.telemetry, &ctx.id.to_string()),
        })
    }

    /// A 2xx reply: its body, if any, may carry a partial success.
    fn accepted(&self, content_type: Option<&str>, body: &[u8]) {
        if body.is_empty() {
            return;
        }
        let json = match content_type
            .and_then(|c| c.split(';').next())
            .map(str::trim)
        {
            Some(c) if c.eq_ignore_ascii_case("application/json") => true,
            Some(c) if c.eq_ignore_ascii_case("application/x-protobuf") => false,
            _ => self.encoding == Encoding::Json,
        };
        let decoded = if json {
            read_export_response_json(body).map_err(|e| e.to_string())
        } else {
            ExportProfilesServiceResponse::decode(body).map_err(|e| e.to_string())
        };
        match decoded {
            Ok(response) => self.partial.report(response.partial_success.as_ref()),
            // The server took the data (2xx); sending it again would duplicate it.
            Err(e) => tracing::warn!(
                url = %self.url,
                error = %e,
                "export accepted, but the reply body is no ExportProfilesServiceResponse"
            ),
        }
    }
}

/// For http:// URLs the connector never uses TLS; this config reads no file.
fn plaintext_placeholder_config() -> Result<rustls::ClientConfig, TlsError> {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

#[async_trait]
impl Exporter for HttpExporter {
    async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
        let Encoded { body, plain_len } =
            encode_batch(batch, self.encoding, self.compression).await?;
        let wire = body.len();
        let mut request = http::Request::post(self.url.clone())
            .body(Full::new(body))
            .map_err(|e| ExportError::permanent(format!("building the request failed: {e}")))?;
        *request.headers_mut() = self.headers.clone();
        let response = self.client.request(request).await.map_err(|e| {
            let error = ExportError::retryable(format!("POST {}: {}", self.url, error_chain(&e)));
            tracing::debug!(error = %error, "HTTP export failed");
            error
        })?;
        self.bytes.add(wire, plain_len);
        let status = response.status();
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header(CONTENT_TYPE);
        let retry_after = header(RETRY_AFTER);
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes());
        if status.is_success() {
            match body {
                Ok(body) => self.accepted(content_type.as_deref(), &body),
                Err(e) => tracing::warn!(
                    url = %self.url,
                    error = %e,
                    "export accepted, but reading the reply failed"
                ),
            }
            return Ok(());
        }
        let body = body.unwrap_or_default();
        let error = from_http_status(
            status,
            content_type.as_deref(),
            &body,
            retry_after.as_deref(),
        );
        tracing::debug!(url = %self.url, error = %error, "HTTP export failed");
        Err(error)
    }
}
