//! The flamegraph exporter's config.

use std::path::PathBuf;
use std::time::Duration;

use profcol_core::config::{ConfigError, Validate, duration};
use serde::Deserialize;

use crate::title::Title;

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
    /// The title template: `{service}`, `{type}`, `{unit}`, `{start}`, `{end}`, `{samples}`.
    pub title: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            directory: PathBuf::from("./profiles/flamegraphs"),
            interval: Duration::from_secs(60),
            keep: 60,
            title: "{service} {type} {start}".to_owned(),
        }
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
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
        if let Err(e) = Title::parse(&self.title) {
            errors.push(ConfigError::new("title", e.to_string()));
        }
        errors
    }
}
