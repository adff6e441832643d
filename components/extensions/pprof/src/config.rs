//! The `pprof` extension's config: contrib's `pprofextension` keys, with its defaults.

use std::path::PathBuf;

use profcol_core::config::{ConfigError, Validate};
use profcol_core::endpoint::check_endpoint;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where `/debug/pprof/` is served (`host:port`, `:port` for every interface).
    pub endpoint: String,
    /// Go's `runtime.SetBlockProfileRate`: accepted so contrib configs load; Rust has no
    /// runtime that records blocking, so a non-zero value only earns a warning.
    pub block_profile_fraction: i64,
    /// Go's `runtime.SetMutexProfileFraction`: accepted, no equivalent (as above).
    pub mutex_profile_fraction: i64,
    /// Writes a CPU profile of the whole run to this file at shutdown; empty means off.
    pub save_to_file: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: "localhost:1777".into(),
            block_profile_fraction: 0,
            mutex_profile_fraction: 0,
            save_to_file: String::new(),
        }
    }
}

impl Config {
    /// `save_to_file` as a path, if set.
    pub fn save_to(&self) -> Option<PathBuf> {
        (!self.save_to_file.is_empty()).then(|| PathBuf::from(&self.save_to_file))
    }

    /// The Go-only keys that are set, for the one warning that says they do nothing here.
    pub fn go_only_keys_set(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.block_profile_fraction != 0 {
            keys.push("block_profile_fraction");
        }
        if self.mutex_profile_fraction != 0 {
            keys.push("mutex_profile_fraction");
        }
        keys
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        check_endpoint(&self.endpoint, "endpoint", &mut errors);
        for (key, value) in [
            ("block_profile_fraction", self.block_profile_fraction),
            ("mutex_profile_fraction", self.mutex_profile_fraction),
        ] {
            if value < 0 {
                errors.push(ConfigError::new(key, "must be 0 or more"));
            }
        }
        if let Some(path) = self.save_to()
            && path.file_name().is_none()
        {
            errors.push(ConfigError::new(
                "save_to_file",
                format!("{:?} names no file", self.save_to_file),
            ));
        }
        errors
    }
}
