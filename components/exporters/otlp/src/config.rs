//! The two exporters' configs, with otelcol's keys. The client blocks both share (`tls`,
//! `headers`, `compression`, `timeout`, `retry_on_failure`, `sending_queue`) are the same
//! types under the same keys.

use std::collections::BTreeMap;
use std::time::Duration;

use http::header::HeaderMap;
use http::uri::Uri;
use profcol_core::config::{Compile, ConfigError, Validate, duration};
use profcol_core::exporterhelper::{
    ExporterHelperSettings, OfflineSettings, QueueSettings, RetrySettings, validate_helper_blocks,
    validate_offline_block,
};
use serde::Deserialize;

use profcol_core::client::grpc::{GrpcDestination, grpc_headers, grpc_target};
pub use profcol_core::client::tls::TlsClientSettings;

/// The path otelcol's OTLP/HTTP receivers serve profiles on, appended to `endpoint`.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// How request bodies (otlphttp) and gRPC messages (otlp) are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// gzip at level 1 (fastest): the CPU is spent on a node being profiled.
    #[default]
    Gzip,
    /// zstd at level 3.
    Zstd,
    /// Snappy as otelcol sends it: one raw block as `Content-Encoding: snappy` over HTTP
    /// (otelcol since v0.123), the framing format as gRPC's `snappy` encoding.
    Snappy,
    /// Snappy's framing format as `Content-Encoding: x-snappy-framed` (otlphttp only).
    #[serde(rename = "x-snappy-framed")]
    SnappyFramed,
    /// No compression; `""` means the same, as in otelcol.
    #[serde(alias = "")]
    None,
}

impl Compression {
    /// The `Content-Encoding` / `grpc-encoding` token, if any.
    pub fn encoding_token(self) -> Option<&'static str> {
        match self {
            Compression::Gzip => Some("gzip"),
            Compression::Zstd => Some("zstd"),
            Compression::Snappy => Some("snappy"),
            Compression::SnappyFramed => Some("x-snappy-framed"),
            Compression::None => None,
        }
    }
}

/// The otlphttp body encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Binary protobuf, `application/x-protobuf`.
    #[default]
    Proto,
    /// OTLP/JSON, `application/json`.
    Json,
}

impl Encoding {
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Proto => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// `exporters: otlp:` — OTLP over gRPC.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpExporterConfig {
    /// `host:port`, or `http://host:port` (plaintext) / `https://host:port` (TLS).
    pub endpoint: String,
    pub tls: TlsClientSettings,
    /// Sent as gRPC metadata with every request.
    pub headers: BTreeMap<String, String>,
    pub compression: Compression,
    /// One attempt's deadline (also sent as `grpc-timeout`); 0 means none.
    #[serde(with = "duration")]
    pub timeout: Duration,
    pub retry_on_failure: RetrySettings,
    pub sending_queue: QueueSettings,
    /// Batches kept on local disk while the backend is unreachable (`offline.directory`).
    pub offline: OfflineSettings,
}

impl Default for OtlpExporterConfig {
    fn default() -> Self {
        OtlpExporterConfig {
            endpoint: String::new(),
            tls: TlsClientSettings::default(),
            headers: BTreeMap::new(),
            compression: Compression::Gzip,
            timeout: Duration::from_secs(5),
            retry_on_failure: RetrySettings::default(),
            sending_queue: QueueSettings::default(),
            offline: OfflineSettings::default(),
        }
    }
}

impl OtlpExporterConfig {
    pub fn helper_settings(&self) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: self.timeout,
            retry: self.retry_on_failure.clone(),
            queue: self.sending_queue.clone(),
            offline: self.offline.clone(),
        }
    }
}

/// An otlp config compiles into where it sends and the metadata of every call.
impl Compile for OtlpExporterConfig {
    type Compiled = GrpcDestination;

    fn compile(&self) -> Result<GrpcDestination, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let target = grpc_target(&self.endpoint, self.tls.insecure).map_err(|e| errors.push(e));
        if self.compression == Compression::SnappyFramed {
            errors.push(ConfigError::new(
                "compression",
                "x-snappy-framed is an HTTP content coding; gRPC's `snappy` is framed already",
            ));
        }
        errors.extend(self.tls.validate().into_iter().map(|e| e.under("tls")));
        let headers = grpc_headers(&self.headers).map_err(|e| errors.extend(e));
        errors.extend(validate_helper_blocks(
            &self.retry_on_failure,
            &self.sending_queue,
        ));
        errors.extend(validate_offline_block(&self.offline));
        match (target, headers) {
            (Ok(target), Ok(headers)) if errors.is_empty() => {
                Ok(GrpcDestination { target, headers })
            }
            _ => Err(errors),
        }
    }
}

/// `exporters: otlphttp:` — OTLP over HTTP.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpHttpExporterConfig {
    /// Base URL; profiles go to `<endpoint>/v1development/profiles`.
    pub endpoint: String,
    /// The full URL for profiles, instead of the one made from `endpoint`.
    pub profiles_endpoint: Option<String>,
    pub encoding: Encoding,
    pub tls: TlsClientSettings,
    /// Sent as HTTP headers with every request.
    pub headers: BTreeMap<String, String>,
    pub compression: Compression,
    /// One attempt's deadline; 0 means none.
    #[serde(with = "duration")]
    pub timeout: Duration,
    pub retry_on_failure: RetrySettings,
    pub sending_queue: QueueSettings,
    /// Batches kept on local disk while the backend is unreachable (`offline.directory`).
    pub offline: OfflineSettings,
}

impl Default for OtlpHttpExporterConfig {
    fn default() -> Self {
        OtlpHttpExporterConfig {
            endpoint: String::new(),
            profiles_endpoint: None,
            encoding: Encoding::Proto,
            tls: TlsClientSettings::default(),
            headers: BTreeMap::new(),
            compression: Compression::Gzip,
            // otelcol's otlphttp client timeout.
            timeout: Duration::from_secs(30),
            retry_on_failure: RetrySettings::default(),
            sending_queue: QueueSettings::default(),
            offline: OfflineSettings::default(),
        }
    }
}

impl OtlpHttpExporterConfig {
    pub fn helper_settings(&self) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: self.timeout,
            retry: self.retry_on_failure.clone(),
            queue: self.sending_queue.clone(),
            offline: self.offline.clone(),
        }
    }

    fn profiles_endpoint(&self) -> Option<&str> {
        self.profiles_endpoint
            .as_deref()
            .filter(|s| !s.trim().is_empty())
    }

    /// The URL profiles are posted to.
    pub fn profiles_url(&self) -> Result<Uri, ConfigError> {
        if let Some(url) = self.profiles_endpoint() {
            return parse_http_url(url, false)
                .map_err(|e| ConfigError::new("profiles_endpoint", e));
        }
        if self.endpoint.trim().is_empty() {
            return Err(ConfigError::new(
                "endpoint",
                "must be set (a base URL such as https://collector:4318), or profiles_endpoint",
            ));
        }
        parse_http_url(&self.endpoint, true).map_err(|e| ConfigError::new("endpoint", e))
    }
}

/// Where an otlphttp exporter posts, and the headers it adds: what its config compiles
/// into.
#[derive(Debug, Clone)]
pub struct HttpDestination {
    pub url: Uri,
    pub headers: HeaderMap,
}

impl Compile for OtlpHttpExporterConfig {
    type Compiled = HttpDestination;

    fn compile(&self) -> Result<HttpDestination, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let url = self.profiles_url().map_err(|e| errors.push(e));
        // A base endpoint that is overridden is still checked, as otelcol does.
        if self.profiles_endpoint().is_some()
            && !self.endpoint.trim().is_empty()
            && let Err(e) = parse_http_url(&self.endpoint, true)
        {
            errors.push(ConfigError::new("endpoint", e));
        }
        errors.extend(self.tls.validate().into_iter().map(|e| e.under("tls")));
        // The same `headers` block as otlp's: gRPC's own `grpc-*` refused here too.
        let headers = grpc_headers(&self.headers).map_err(|e| errors.extend(e));
        errors.extend(validate_helper_blocks(
            &self.retry_on_failure,
            &self.sending_queue,
        ));
        errors.extend(validate_offline_block(&self.offline));
        match (url, headers) {
            (Ok(url), Ok(headers)) if errors.is_empty() => Ok(HttpDestination { url, headers }),
            _ => Err(errors),
        }
    }
}

/// Parses an http(s) URL; with `append_profiles_path`, adds `/v1development/profiles` to
/// its path.
fn parse_http_url(text: &str, append_profiles_path: bool) -> Result<Uri, String> {
    let text = text.trim();
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a valid URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(other) => {
            return Err(format!(
                "{text:?}: scheme {other:?} is not supported (use http:// or https://)"
            ));
        }
        None => {
            return Err(format!(
                "{text:?} needs a scheme: http://host:port or https://host:port"
            ));
        }
    }
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| format!("{text:?} has no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!("{text:?}: user info is not supported"));
    }
    if !append_profiles_path {
        return Ok(uri);
    }
    if uri.query().is_some() {
        return Err(format!(
            "{text:?}: a base endpoint takes no query (use profiles_endpoint for a full URL)"
        ));
    }
    let path = format!("{}{PROFILES_PATH}", uri.path().trim_end_matches('/'));
    let mut parts = uri.into_parts();
    parts.path_and_query = Some(
        path.parse()
            .map_err(|e| format!("{text:?} is not a valid URL: {e}"))?,
    );
    Uri::from_parts(parts).map_err(|e| format!("{text:?} is not a valid URL: {e}"))
}
