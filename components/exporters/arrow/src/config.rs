//! `exporters: arrow:`. The client keys are the `otlp` exporter's (`endpoint`, `tls`,
//! `headers`, `timeout`, `retry_on_failure`, `sending_queue`), with the same types; the
//! Arrow keys are `schema` and `compression`, and `debuginfo` turns the upload on.

use std::collections::BTreeMap;
use std::time::Duration;

use profcol_core::client::grpc::{GrpcDestination, grpc_headers, grpc_target};
use profcol_core::client::tls::TlsClientSettings;
use profcol_core::config::{Compile, ConfigError, Validate, duration};
use profcol_core::exporterhelper::{
    ExporterHelperSettings, OfflineSettings, QueueSettings, RetrySettings, validate_helper_blocks,
    validate_offline_block,
};
use serde::Deserialize;

/// Which of Parca's two Arrow write paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schema {
    /// `WriteArrow`: one self-contained record per request (Parca v0.28.0 and later).
    #[default]
    V2,
    /// The bidirectional `Write` exchange (older servers too).
    V1,
}

/// Arrow IPC body compression of the v2 record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// LZ4 frame, as the Parca agent sends.
    #[default]
    Lz4,
    /// zstd at level 3.
    Zstd,
    /// No compression; `""` means the same.
    #[serde(alias = "")]
    None,
}

/// `debuginfo:` — upload the executables behind native frames to Parca's
/// `DebuginfoService`, so the server can symbolize them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DebuginfoSettings {
    /// Where the debuginfo service is; empty: the exporter's `endpoint`, `tls` and
    /// `headers`.
    pub endpoint: String,
    /// Used with `endpoint` only.
    pub tls: TlsClientSettings,
    /// Used with `endpoint` only.
    pub headers: BTreeMap<String, String>,
    /// Deadline of each call of the upload (the upload stream included).
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// When to ask again about a build id whose upload is in progress elsewhere, or that
    /// failed for a reason that may pass.
    #[serde(with = "duration")]
    pub retry_interval: Duration,
    /// Files larger than this are not uploaded (logged once).
    pub max_file_size: u64,
    /// Uploads running at once.
    pub parallel_uploads: usize,
}

impl Default for DebuginfoSettings {
    fn default() -> Self {
        DebuginfoSettings {
            endpoint: String::new(),
            tls: TlsClientSettings::default(),
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(120),
            retry_interval: Duration::from_secs(300),
            max_file_size: 1 << 30,
            parallel_uploads: 2,
        }
    }
}

/// The upload's settings compile into its own endpoint and headers, or `None` when it
/// uses the exporter's.
impl Compile for DebuginfoSettings {
    type Compiled = Option<GrpcDestination>;

    fn compile(&self) -> Result<Option<GrpcDestination>, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let own_endpoint = !self.endpoint.trim().is_empty();
        let target = if own_endpoint {
            grpc_target(&self.endpoint, self.tls.insecure).map(Some)
        } else if self.tls != TlsClientSettings::default() || !self.headers.is_empty() {
            Err(ConfigError::new(
                "endpoint",
                "must be set when tls or headers are (without it the exporter's are used)",
            ))
        } else {
            Ok(None)
        }
        .map_err(|e| errors.push(e));
        errors.extend(self.tls.validate().into_iter().map(|e| e.under("tls")));
        let headers = grpc_headers(&self.headers).map_err(|e| errors.extend(e));
        if self.timeout.is_zero() {
            errors.push(ConfigError::new("timeout", "must be greater than 0"));
        }
        if self.retry_interval.is_zero() {
            errors.push(ConfigError::new("retry_interval", "must be greater than 0"));
        }
        if self.max_file_size == 0 {
            errors.push(ConfigError::new("max_file_size", "must be greater than 0"));
        }
        if !(1..=64).contains(&self.parallel_uploads) {
            errors.push(ConfigError::new("parallel_uploads", "must be from 1 to 64"));
        }
        match (target, headers) {
            (Ok(target), Ok(headers)) if errors.is_empty() => {
                Ok(target.map(|target| GrpcDestination { target, headers }))
            }
            _ => Err(errors),
        }
    }
}

/// `exporters: arrow:` — profiles to Parca as Apache Arrow records over gRPC.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArrowExporterConfig {
    /// `host:port`, or `http://host:port` (plaintext) / `https://host:port` (TLS).
    pub endpoint: String,
    pub tls: TlsClientSettings,
    /// Sent as gRPC metadata with every request (`authorization: Bearer <token>`).
    pub headers: BTreeMap<String, String>,
    pub schema: Schema,
    /// Body compression of the v2 record (v1 records are never compressed, as Parca's
    /// agent sends them).
    pub compression: Compression,
    /// One attempt's deadline (also sent as `grpc-timeout`); 0 means none.
    #[serde(with = "duration")]
    pub timeout: Duration,
    pub retry_on_failure: RetrySettings,
    pub sending_queue: QueueSettings,
    /// Batches kept on local disk while the backend is unreachable (`offline.directory`).
    pub offline: OfflineSettings,
    /// Off unless present; `debuginfo: {}` turns it on with the defaults.
    pub debuginfo: Option<DebuginfoSettings>,
}

impl Default for ArrowExporterConfig {
    fn default() -> Self {
        ArrowExporterConfig {
            endpoint: String::new(),
            tls: TlsClientSettings::default(),
            headers: BTreeMap::new(),
            schema: Schema::V2,
            compression: Compression::Lz4,
            timeout: Duration::from_secs(5),
            retry_on_failure: RetrySettings::default(),
            sending_queue: QueueSettings::default(),
            offline: OfflineSettings::default(),
            debuginfo: None,
        }
    }
}

impl ArrowExporterConfig {
    pub fn helper_settings(&self) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: self.timeout,
            retry: self.retry_on_failure.clone(),
            queue: self.sending_queue.clone(),
            offline: self.offline.clone(),
        }
    }
}

/// Where an arrow exporter writes, and where it uploads when the upload has an endpoint
/// of its own: what its config compiles into.
#[derive(Debug, Clone)]
pub struct ArrowDestinations {
    /// Every write (`endpoint`, `headers`).
    pub store: GrpcDestination,
    /// Every upload call (`debuginfo::endpoint`, `debuginfo::headers`); `None` when the
    /// upload goes to the store's (or there is no `debuginfo` block).
    pub debuginfo: Option<GrpcDestination>,
}

impl Compile for ArrowExporterConfig {
    type Compiled = ArrowDestinations;

    fn compile(&self) -> Result<ArrowDestinations, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let target = grpc_target(&self.endpoint, self.tls.insecure).map_err(|e| errors.push(e));
        errors.extend(self.tls.validate().into_iter().map(|e| e.under("tls")));
        let headers = grpc_headers(&self.headers).map_err(|e| errors.extend(e));
        if self.schema == Schema::V1 && self.compression != Compression::default() {
            errors.push(ConfigError::new(
                "compression",
                "applies to schema v2 only (Parca reads v1 records uncompressed)",
            ));
        }
        errors.extend(validate_helper_blocks(
            &self.retry_on_failure,
            &self.sending_queue,
        ));
        errors.extend(validate_offline_block(&self.offline));
        let debuginfo = match &self.debuginfo {
            None => Ok(None),
            Some(d) => d
                .compile()
                .map_err(|e| errors.extend(e.into_iter().map(|e| e.under("debuginfo")))),
        };
        match (target, headers, debuginfo) {
            (Ok(target), Ok(headers), Ok(debuginfo)) if errors.is_empty() => {
                Ok(ArrowDestinations {
                    store: GrpcDestination { target, headers },
                    debuginfo,
                })
            }
            _ => Err(errors),
        }
    }
}
