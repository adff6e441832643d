//! The flamegraph exporter's config.

use std::path::PathBuf;
use std::time::Duration;

use profcol_core::config::{Compile, ConfigError, duration};
use serde::Deserialize;

use crate::title::Title;

/// Services with a folder, at most, by default.
pub const DEFAULT_MAX_SERVICES: usize = 1000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the SVGs (one folder per service) and `index.html` go; made if missing.
    pub directory: PathBuf,
    /// One SVG per service and sample type per interval.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// SVGs kept per service, the oldest deleted beyond; 0 keeps all.
    pub keep: usize,
    /// SVGs older than this (by file time) are deleted at each flush, and a service left
    /// with none loses its folder; 0: no age limit.
    #[serde(with = "duration")]
    pub max_age: Duration,
    /// At most this many services have a folder (or are being gathered); profiles of
    /// further services are dropped and counted. 0: no cap.
    pub max_services: usize,
    /// The title template: `{service}`, `{type}`, `{unit}`, `{start}`, `{end}`, `{samples}`.
    pub title: String,
    /// When set (32 hex digits), only samples linked to a span of this trace are drawn:
    /// one graph per service and sample type of what that trace ran. Empty: every sample.
    pub trace_id: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directory: PathBuf::from("./profiles/flamegraphs"),
            interval: Duration::from_secs(60),
            keep: 60,
            max_age: Duration::ZERO,
            max_services: DEFAULT_MAX_SERVICES,
            title: "{service} {type} {unit} {start}".to_owned(),
            trace_id: String::new(),
        }
    }
}

/// What a flamegraph config compiles into: the title template and the trace filter.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub(crate) title: Title,
    pub(crate) trace: Option<[u8; 16]>,
}

impl Compile for Config {
    type Compiled = Compiled;

    fn compile(&self) -> Result<Compiled, Vec<ConfigError>> {
        let mut errors = Vec::new();
        if self.directory.as_os_str().is_empty() {
            errors.push(ConfigError::new("directory", "must not be empty"));
        }
        if self.interval.is_zero() {
            errors.push(ConfigError::new(
                "interval",
                "must be above 0 (one flame graph per service and sample type per interval)",
            ));
        }
        let title = Title::parse(&self.title)
            .map_err(|e| errors.push(ConfigError::new("title", e.to_string())));
        let trace = self
            .trace_filter()
            .map_err(|e| errors.push(ConfigError::new("trace_id", e)));
        match (title, trace) {
            (Ok(title), Ok(trace)) if errors.is_empty() => Ok(Compiled { title, trace }),
            _ => Err(errors),
        }
    }
}

impl Config {
    /// The trace whose samples alone are drawn, if `trace_id` names one.
    pub fn trace_filter(&self) -> Result<Option<[u8; 16]>, String> {
        if self.trace_id.is_empty() {
            return Ok(None);
        }
        let mut id = [0u8; 16];
        if self.trace_id.len() != 32 || hex::decode_to_slice(&self.trace_id, &mut id).is_err() {
            return Err(format!(
                "{:?} is not a trace id (32 hex digits, as in a W3C traceparent)",
                self.trace_id
            ));
        }
        if id == [0; 16] {
            return Err("the all-zero trace id is invalid".to_owned());
        }
        Ok(Some(id))
    }
}
