//! The blocks every exporter config shares, with otelcol's keys and defaults:
//! `timeout`, `retry_on_failure`, `sending_queue`.

use std::time::Duration;

use serde::Deserialize;

use super::offline::OfflineSettings;
use crate::config::{ConfigError, Validate, duration};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    pub enabled: bool,
    #[serde(with = "duration")]
    pub initial_interval: Duration,
    pub randomization_factor: f64,
    pub multiplier: f64,
    #[serde(with = "duration")]
    pub max_interval: Duration,
    /// Give up after this long in total; 0 means never.
    #[serde(with = "duration")]
    pub max_elapsed_time: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            enabled: true,
            initial_interval: Duration::from_secs(5),
            randomization_factor: 0.5,
            multiplier: 1.5,
            max_interval: Duration::from_secs(30),
            max_elapsed_time: Duration::from_secs(300),
        }
    }
}

impl Validate for RetrySettings {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        // NaN fails every comparison, so each check is written to reject it.
        if !(0.0..=1.0).contains(&self.randomization_factor) {
            errors.push(ConfigError::new(
                "randomization_factor",
                format!("must be between 0 and 1, not {}", self.randomization_factor),
            ));
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            errors.push(ConfigError::new(
                "multiplier",
                format!(
                    "must be a finite number of at least 1, not {}",
                    self.multiplier
                ),
            ));
        }
        if self.enabled && self.initial_interval.is_zero() {
            errors.push(ConfigError::new("initial_interval", "must be above 0"));
        }
        if self.max_interval < self.initial_interval {
            errors.push(ConfigError::new(
                "max_interval",
                "must not be below initial_interval",
            ));
        }
        errors
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSettings {
    pub enabled: bool,
    /// Batches sent at once.
    pub num_consumers: usize,
    /// Batches the queue holds.
    pub queue_size: usize,
    /// When full: wait (pushing back into the pipeline) instead of dropping.
    pub block_on_overflow: bool,
    /// A storage extension (`file_storage`) to keep the queue on disk, so accepted data
    /// survives a crash.
    pub storage: Option<String>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            enabled: true,
            num_consumers: 10,
            queue_size: 1000,
            block_on_overflow: false,
            storage: None,
        }
    }
}

impl Validate for QueueSettings {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self.enabled && self.num_consumers == 0 {
            errors.push(ConfigError::new("num_consumers", "must be at least 1"));
        }
        if self.enabled && self.queue_size == 0 {
            errors.push(ConfigError::new("queue_size", "must be at least 1"));
        }
        if let Some(s) = &self.storage
            && let Err(e) = crate::component::ComponentId::parse(s)
        {
            errors.push(ConfigError::new("storage", e));
        }
        errors
    }
}

/// What the helper needs from an exporter's config.
#[derive(Debug, Clone, PartialEq)]
pub struct ExporterHelperSettings {
    pub timeout: Duration,
    pub retry: RetrySettings,
    pub queue: QueueSettings,
    pub offline: OfflineSettings,
}

impl Default for ExporterHelperSettings {
    fn default() -> Self {
        ExporterHelperSettings {
            timeout: Duration::from_secs(5),
            retry: RetrySettings::default(),
            queue: QueueSettings::default(),
            offline: OfflineSettings::default(),
        }
    }
}

impl ExporterHelperSettings {
    /// For exporters that write where they run (`debug`, `flamegraph`): each batch goes
    /// straight to the exporter, with no queue and no retries; the timeout stays.
    pub fn passthrough() -> Self {
        ExporterHelperSettings {
            retry: RetrySettings {
                enabled: false,
                ..RetrySettings::default()
            },
            queue: QueueSettings {
                enabled: false,
                ..QueueSettings::default()
            },
            ..ExporterHelperSettings::default()
        }
    }
}

/// Validates `offline` under its key, for exporters that offer offline mode.
pub fn validate_offline_block(offline: &OfflineSettings) -> Vec<ConfigError> {
    offline
        .validate()
        .into_iter()
        .map(|e| e.under("offline"))
        .collect()
}

/// Validates the three blocks under their keys, for an exporter config's `validate`.
pub fn validate_helper_blocks(retry: &RetrySettings, queue: &QueueSettings) -> Vec<ConfigError> {
    let mut errors: Vec<ConfigError> = retry
        .validate()
        .into_iter()
        .map(|e| e.under("retry_on_failure"))
        .collect();
    errors.extend(
        queue
            .validate()
            .into_iter()
            .map(|e| e.under("sending_queue")),
    );
    errors
}
