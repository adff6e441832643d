//! The debug exporter's config, with otelcol's keys and defaults.

use serde::Deserialize;

use profcol_core::config::{ConfigError, Validate};

/// How much is written per batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Verbosity {
    /// One line per batch: counts.
    #[default]
    Basic,
    /// Also one line per profile.
    Normal,
    /// Also every sample with its stack.
    Detailed,
}

impl TryFrom<String> for Verbosity {
    type Error = String;

    /// Case-insensitive, as otelcol reads its telemetry levels.
    fn try_from(s: String) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "basic" => Ok(Verbosity::Basic),
            "normal" => Ok(Verbosity::Normal),
            "detailed" => Ok(Verbosity::Detailed),
            _ => Err(format!(
                "unknown verbosity {s:?}, expected `basic`, `normal` or `detailed`"
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub verbosity: Verbosity,
    /// Batches written in full at the start of each second.
    pub sampling_initial: u32,
    /// After those, every Nth batch of the same second is written; 0 writes none.
    pub sampling_thereafter: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            verbosity: Verbosity::Basic,
            sampling_initial: 2,
            sampling_thereafter: 1,
        }
    }
}

/// Every value that parses is valid.
impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        Vec::new()
    }
}
