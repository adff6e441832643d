//! The `zpages` extension's config: contrib's keys, with its defaults.

use profcol_core::config::{ConfigError, Validate};
use profcol_core::endpoint::check_endpoint;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the pages are served (`host:port`, `:port` for every interface).
    pub endpoint: String,
    /// otelcol's `/debug/expvar` (Go's runtime variables): accepted so contrib configs
    /// load; a Rust process has none, so enabling it only earns a warning.
    pub expvar: Expvar,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Expvar {
    pub enabled: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: "localhost:55679".into(),
            expvar: Expvar::default(),
        }
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        check_endpoint(&self.endpoint, "endpoint", &mut errors);
        errors
    }
}
