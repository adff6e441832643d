//! The top level of a config file, and the `service` section, in otelcol's names.

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

/// The whole file, before component configs are parsed by their factories. Sections keep
/// file order.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub receivers: Mapping,
    pub processors: Mapping,
    pub exporters: Mapping,
    pub extensions: Mapping,
    /// Connectors exist in otelcol; profcol has none yet, but an empty section is fine.
    pub connectors: Mapping,
    pub service: ServiceConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    pub extensions: Vec<String>,
    /// `profiles` or `profiles/NAME` → pipeline; file order kept.
    pub pipelines: Mapping,
    pub telemetry: TelemetryConfig,
}

#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    pub receivers: Vec<String>,
    pub processors: Vec<String>,
    pub exporters: Vec<String>,
}

#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    pub logs: LogsConfig,
    pub metrics: MetricsConfig,
    /// otelcol's resource attributes for its own telemetry; accepted, shown on /metrics as
    /// target info is not supported yet, so only kept.
    pub resource: Mapping,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LogsConfig {
    /// trace, debug, info, warn, error.
    pub level: String,
    pub encoding: LogEncoding,
}

impl Default for LogsConfig {
    fn default() -> Self {
        LogsConfig {
            level: "info".into(),
            encoding: LogEncoding::Console,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogEncoding {
    #[default]
    Console,
    Json,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// none, basic, normal, detailed; `none` turns the endpoint off.
    pub level: String,
    /// Where Prometheus scrapes self-metrics (`host:port`), as older otelcol configs say it.
    pub address: Option<String>,
    /// otelcol's newer form: `readers: [{pull: {exporter: {prometheus: {host, port}}}}]`.
    pub readers: Vec<Value>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            level: "normal".into(),
            address: None,
            readers: Vec::new(),
        }
    }
}

impl MetricsConfig {
    /// The address to serve /metrics on, or None when turned off.
    pub fn listen_address(&self) -> Result<Option<String>, String> {
        if self.level == "none" {
            return Ok(None);
        }
        if let Some(a) = &self.address {
            return Ok(Some(a.clone()));
        }
        for reader in &self.readers {
            let prometheus = reader
                .get("pull")
                .and_then(|p| p.get("exporter"))
                .and_then(|e| e.get("prometheus"));
            if let Some(p) = prometheus {
                let host = p.get("host").and_then(Value::as_str).unwrap_or("localhost");
                let port = p
                    .get("port")
                    .and_then(Value::as_u64)
                    .ok_or("readers: prometheus needs a port")?;
                return Ok(Some(format!("{host}:{port}")));
            }
        }
        Ok(Some("localhost:8888".into()))
    }
}
