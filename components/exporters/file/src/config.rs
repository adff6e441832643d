//! The file exporter's config, with otelcol's keys and defaults.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use profcol_core::config::{ConfigError, Validate, duration};

/// How each batch is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One OTLP/JSON `ProfilesData` per line.
    #[default]
    Json,
    /// Protobuf `ProfilesData`, each preceded by its length as 4 bytes big-endian.
    Proto,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The file to write; required.
    pub path: PathBuf,
    pub format: Format,
    /// Size-based rotation; none when the block is absent.
    pub rotation: Option<Rotation>,
    /// How often buffered data is written out; 0 writes on every batch.
    #[serde(with = "duration")]
    pub flush_interval: Duration,
    /// Keep what the file holds and write after it; otherwise it is truncated at start.
    pub append: bool,
    /// Make the file's directory if it is missing (otelcol's `create_directory`).
    pub create_directory: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            path: PathBuf::new(),
            format: Format::Json,
            rotation: None,
            flush_interval: Duration::from_secs(1),
            append: false,
            create_directory: false,
        }
    }
}

/// otelcol's `rotation` block (lumberjack's settings).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rotation {
    /// Size in MiB a file may reach before it is rotated; 0 means the default, 100.
    pub max_megabytes: u32,
    /// Rotated files kept; the oldest beyond this are deleted. 0 keeps all.
    pub max_backups: u32,
    /// Rotated files older than this many days (by the time in their name) are deleted.
    /// 0 keeps them regardless of age.
    pub max_days: u32,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_megabytes: 100,
            max_backups: 100,
            max_days: 0,
        }
    }
}

impl Rotation {
    /// The size limit in bytes.
    pub fn max_bytes(&self) -> u64 {
        let mib = if self.max_megabytes == 0 {
            100
        } else {
            self.max_megabytes
        };
        u64::from(mib) * 1024 * 1024
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self.path.as_os_str().is_empty() {
            errors.push(ConfigError::new("path", "must not be empty"));
        } else if self.path.file_name().is_none() {
            errors.push(ConfigError::new("path", "must name a file"));
        }
        errors
    }
}
