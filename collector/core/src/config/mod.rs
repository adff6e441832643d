//! Configuration in the OpenTelemetry Collector's shape: YAML files merged in order,
//! `${env:NAME}` expanded in values, an envelope of `receivers / processors / exporters /
//! extensions / service`, and typed component configs that each factory parses itself.
//! Errors carry their path (`exporters::otlp::compresion: unknown field ...`) and are all
//! reported at once.

pub mod duration;
mod env;
mod envelope;
mod merge;

use std::fmt;

pub use env::expand_env;
pub use envelope::{
    LogEncoding, LogsConfig, MetricsConfig, PipelineConfig, RawConfig, ServiceConfig,
    TelemetryConfig,
};
pub use merge::merge_values;
pub use serde_yaml_ng::Value;

/// One thing wrong with a configuration, at a path like `receivers::otlp::protocols`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error, one level deeper: `prefix::path`.
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = join_path(prefix, &self.path);
        self
    }
}

pub fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (_, true) => prefix.to_owned(),
        _ => format!("{prefix}::{path}"),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every error found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

/// A pure validation step, run after parsing and before anything is created. Paths in
/// the errors are relative to the config's own root.
pub trait Validate {
    fn validate(&self) -> Vec<ConfigError> {
        Vec::new()
    }
}

/// Deserializes a component's config sub-tree into `T`. `null` (as in `debug:`) means
/// all defaults. A serde error gives its path, joined with `::`.
pub fn parse_typed<T: serde::de::DeserializeOwned + Default>(
    value: &Value,
) -> Result<T, ConfigError> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_path_to_error::deserialize::<_, T>(value.clone()).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            String::new()
        } else {
            path.replace('.', "::")
        };
        ConfigError::new(path, clean_serde_message(&e.into_inner().to_string()))
    })
}

/// serde_yaml_ng appends " at line L column C" to messages from a Value, where there is
/// no line to speak of; the path says where instead.
fn clean_serde_message(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// Parses YAML text into a value, with line and column in the error.
pub fn parse_yaml(source_name: &str, text: &str) -> Result<Value, ConfigError> {
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
            .unwrap_or_default();
        ConfigError::new(source_name, format!("not valid YAML{at}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Grpc {
        endpoint: String,
        max_recv_msg_size_mib: u32,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Protocols {
        grpc: Option<Grpc>,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Otlp {
        protocols: Protocols,
    }

    #[test]
    fn typo_names_the_path_and_the_valid_keys() {
        let v =
            parse_yaml("x", "protocols:\n  grpc:\n    endpoitn: localhost:4317\n").expect("yaml");
        let e = parse_typed::<Otlp>(&v)
            .expect_err("typo")
            .under("receivers::otlp");
        assert_eq!(
            e.to_string(),
            "receivers::otlp::protocols::grpc::endpoitn: unknown field `endpoitn`, expected `endpoint` or `max_recv_msg_size_mib`"
        );
    }

    #[test]
    fn null_means_defaults_and_types_are_checked() {
        assert_eq!(
            parse_typed::<Otlp>(&Value::Null).expect("null"),
            Otlp::default()
        );
        let v = parse_yaml(
            "x",
            "protocols:\n  grpc:\n    max_recv_msg_size_mib: lots\n",
        )
        .expect("yaml");
        let e = parse_typed::<Otlp>(&v).expect_err("type");
        assert_eq!(e.path, "protocols::grpc::max_recv_msg_size_mib");
        assert!(
            e.message
                .starts_with("invalid type: string \"lots\", expected u32"),
            "{}",
            e.message
        );
    }

    #[test]
    fn yaml_errors_give_line_and_column() {
        let e = parse_yaml("a.yaml", "receivers:\n  otlp: [\n").expect_err("bad yaml");
        assert!(
            e.to_string().starts_with("a.yaml: not valid YAML (line "),
            "{e}"
        );
    }
}
