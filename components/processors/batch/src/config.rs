//! The batch processor's config, with otelcol's keys and defaults.

use std::time::Duration;

use profcol_core::config::{ConfigError, Validate, duration};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Samples after which a batch is sent regardless of the timeout. A trigger, not a
    /// size: the batch sent may be larger (up to `send_batch_max_size`). `0` sends every
    /// incoming batch at once.
    pub send_batch_size: u32,
    /// The most samples one outgoing batch may hold; larger ones are split. `0`: no cap.
    pub send_batch_max_size: u32,
    /// How long samples may wait before they are sent anyway. `0`: no batching at all,
    /// every batch is sent at once (split only by `send_batch_max_size`).
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            send_batch_size: 8192,
            send_batch_max_size: 0,
            timeout: Duration::from_millis(200),
        }
    }
}

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        if self.send_batch_max_size != 0 && self.send_batch_max_size < self.send_batch_size {
            errors.push(ConfigError::new(
                "send_batch_max_size",
                format!(
                    "must be 0 (no cap) or at least send_batch_size ({})",
                    self.send_batch_size
                ),
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{parse_typed, parse_yaml};

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("test", text).expect("yaml"))
    }

    #[test]
    fn defaults_are_otelcols() {
        let c = parse_typed::<Config>(&profcol_core::config::Value::Null).expect("null");
        assert_eq!(c.send_batch_size, 8192);
        assert_eq!(c.send_batch_max_size, 0);
        assert_eq!(c.timeout, Duration::from_millis(200));
        assert!(c.validate().is_empty());
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                send_batch_size: 1000,
                send_batch_max_size: 2000,
                timeout: Duration::from_secs(5),
            }
        );
        assert!(c.validate().is_empty());
    }

    #[test]
    fn metadata_keys_are_not_supported() {
        let e = parse("metadata_keys: [tenant]\n").expect_err("unsupported");
        assert_eq!(e.path, "metadata_keys");
        assert!(e.message.starts_with("unknown field"), "{}", e.message);
    }

    #[test]
    fn max_size_below_size_is_invalid() {
        let c = parse("send_batch_size: 100\nsend_batch_max_size: 99\n").expect("parses");
        let errors = c.validate();
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "send_batch_max_size: must be 0 (no cap) or at least send_batch_size (100)"
        );
        // Equal is fine, and so is no cap.
        assert!(
            parse("send_batch_size: 100\nsend_batch_max_size: 100\n")
                .expect("parses")
                .validate()
                .is_empty()
        );
        assert!(
            parse("send_batch_size: 100\nsend_batch_max_size: 0\n")
                .expect("parses")
                .validate()
                .is_empty()
        );
    }

    #[test]
    fn negative_sizes_and_bad_durations_name_their_path() {
        let e = parse("send_batch_size: -1\n").expect_err("negative");
        assert_eq!(e.path, "send_batch_size");
        let e = parse("timeout: soon\n").expect_err("not a duration");
        assert_eq!(e.path, "timeout");
        assert!(e.message.contains("invalid duration"), "{}", e.message);
        assert_eq!(parse("timeout: 0\n").expect("zero").timeout, Duration::ZERO);
    }
}
