//! The service_name processor's config.

use profcol_core::config::{Compile, ConfigError};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Name a resource from the `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` the
    /// profiling receiver recorded (`process.environment_variable.*`). No `/proc` is read.
    pub from_process_environment: bool,
    /// `plain` or `semconv`: how names derived from the executable are written.
    pub format: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            from_process_environment: true,
            format: "plain".to_owned(),
        }
    }
}

/// How a name derived from the executable (and the no-name case) is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The executable name as is; `unknown_service` when nothing is known.
    Plain,
    /// `unknown_service:<executable>`; `unknown_service` when nothing is known.
    Semconv,
}

/// A service_name config compiles into its [`Format`].
impl Compile for Config {
    type Compiled = Format;

    fn compile(&self) -> Result<Format, Vec<ConfigError>> {
        match self.format.as_str() {
            "plain" => Ok(Format::Plain),
            "semconv" => Ok(Format::Semconv),
            other => Err(vec![ConfigError::new(
                "format",
                format!("unknown format {other:?}; expected plain or semconv"),
            )]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{Value, parse_typed, parse_yaml};

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("test", text).expect("yaml"))
    }

    #[test]
    fn defaults() {
        let c = parse_typed::<Config>(&Value::Null).expect("null");
        assert!(c.from_process_environment);
        assert_eq!(c.compile().expect("valid"), Format::Plain);
        assert_eq!(parse("{}").expect("empty"), Config::default());
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                from_process_environment: false,
                format: "semconv".into(),
            }
        );
        assert_eq!(c.compile().expect("valid"), Format::Semconv);
    }

    #[test]
    fn format_is_validated() {
        let c = parse("format: Semconv").expect("parses");
        let errors: Vec<String> = c
            .compile()
            .expect_err("not a format")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            vec!["format: unknown format \"Semconv\"; expected plain or semconv"]
        );
        let e = parse("from_process_environment: maybe").expect_err("not a bool");
        assert_eq!(e.path, "from_process_environment");
    }
}
