//! The resource processor's config: otelcol's `attributes` list of actions.

use profcol_core::config::{Compile, ConfigError, Value};
use profcol_core::pdata::types::{AnyValue, Value as Otlp};
use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Applied in order to every resource.
    pub attributes: Vec<AttributeAction>,
}

/// One entry of `attributes`, as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttributeAction {
    pub key: String,
    /// A string, int, double or bool.
    pub value: Option<Value>,
    pub action: Option<Action>,
    /// Takes the value of this other resource attribute instead of `value`.
    pub from_attribute: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Sets the attribute only if it is absent.
    Insert,
    /// Sets the attribute only if it is present.
    Update,
    /// Sets the attribute.
    Upsert,
    /// Removes the attribute.
    Delete,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Insert => "insert",
            Action::Update => "update",
            Action::Upsert => "upsert",
            Action::Delete => "delete",
        }
    }
}

const ACTIONS: &str = "insert, update, upsert or delete";

/// Case-insensitive, as otelcol reads actions.
impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.to_ascii_lowercase().as_str() {
            "insert" => Ok(Action::Insert),
            "update" => Ok(Action::Update),
            "upsert" => Ok(Action::Upsert),
            "delete" => Ok(Action::Delete),
            "hash" | "extract" | "convert" => Err(serde::de::Error::custom(format!(
                "action {text:?} is not supported by profcol; expected {ACTIONS}"
            ))),
            _ => Err(serde::de::Error::custom(format!(
                "unknown action {text:?}; expected {ACTIONS}"
            ))),
        }
    }
}

/// Where a set action takes its value from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Value(AnyValue),
    FromAttribute(String),
}

/// How a set step treats an attribute that is present or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMode {
    /// Only if absent.
    Insert,
    /// Only if present.
    Update,
    /// Either way.
    Upsert,
}

/// One validated action, ready to apply.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Set {
        key: String,
        source: Source,
        mode: SetMode,
    },
    Delete {
        key: String,
    },
}

/// A YAML scalar as an OTLP value.
fn any_value(value: &Value) -> Result<AnyValue, String> {
    let v = match value {
        Value::String(s) => Otlp::StringValue(s.clone()),
        Value::Bool(b) => Otlp::BoolValue(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Otlp::IntValue(i)
            } else if n.is_f64() {
                Otlp::DoubleValue(n.as_f64().unwrap_or_default())
            } else {
                return Err(format!("{n} is out of the int64 range"));
            }
        }
        Value::Null => return Err("must not be null".into()),
        Value::Sequence(_) | Value::Mapping(_) | Value::Tagged(_) => {
            return Err("must be a string, int, double or bool".into());
        }
    };
    Ok(AnyValue { value: Some(v) })
}

impl AttributeAction {
    /// This entry as a step, or what is wrong with it (paths relative to the entry).
    fn step(&self) -> Result<Step, Vec<ConfigError>> {
        let mut errors = Vec::new();
        if self.key.is_empty() {
            errors.push(ConfigError::new("key", "missing key"));
        }
        if self.from_attribute.as_deref() == Some("") {
            errors.push(ConfigError::new("from_attribute", "must not be empty"));
        }
        let Some(action) = self.action else {
            errors.push(ConfigError::new(
                "action",
                format!("missing action; expected {ACTIONS}"),
            ));
            return Err(errors);
        };
        let mode = match action {
            Action::Insert => SetMode::Insert,
            Action::Update => SetMode::Update,
            Action::Upsert => SetMode::Upsert,
            Action::Delete => {
                if self.value.is_some() {
                    errors.push(ConfigError::new("value", "delete takes no value"));
                }
                if self.from_attribute.is_some() {
                    errors.push(ConfigError::new(
                        "from_attribute",
                        "delete takes no from_attribute",
                    ));
                }
                return if errors.is_empty() {
                    Ok(Step::Delete {
                        key: self.key.clone(),
                    })
                } else {
                    Err(errors)
                };
            }
        };
        let name = action.as_str();
        let source = match (&self.value, &self.from_attribute) {
            (Some(value), None) => any_value(value)
                .map(Source::Value)
                .map_err(|message| ConfigError::new("value", message)),
            (None, Some(from)) => Ok(Source::FromAttribute(from.clone())),
            (Some(_), Some(_)) => Err(ConfigError::new(
                "from_attribute",
                format!("{name} takes value or from_attribute, not both"),
            )),
            (None, None) => Err(ConfigError::new(
                "value",
                format!("{name} needs value or from_attribute"),
            )),
        };
        match source {
            Ok(source) if errors.is_empty() => Ok(Step::Set {
                key: self.key.clone(),
                source,
                mode,
            }),
            Ok(_) => Err(errors),
            Err(e) => {
                errors.push(e);
                Err(errors)
            }
        }
    }
}

/// A resource config compiles into its actions as steps, or every error in them.
impl Compile for Config {
    type Compiled = Vec<Step>;

    fn compile(&self) -> Result<Vec<Step>, Vec<ConfigError>> {
        if self.attributes.is_empty() {
            return Err(vec![ConfigError::new(
                "attributes",
                "at least one action is required",
            )]);
        }
        let mut steps = Vec::with_capacity(self.attributes.len());
        let mut errors = Vec::new();
        for (i, entry) in self.attributes.iter().enumerate() {
            match entry.step() {
                Ok(step) => steps.push(step),
                Err(es) => {
                    let prefix = format!("attributes[{i}]");
                    errors.extend(es.into_iter().map(|e| e.under(&prefix)));
                }
            }
        }
        if errors.is_empty() {
            Ok(steps)
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{parse_typed, parse_yaml};
    use profcol_core::testkit::config_errors;

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("test", text).expect("yaml"))
    }

    fn errors(text: &str) -> Vec<String> {
        config_errors(&parse(text).expect("parses"))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn value(v: Otlp) -> Source {
        Source::Value(AnyValue { value: Some(v) })
    }

    #[test]
    fn testdata_config_parses_into_steps() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c.compile().expect("steps"),
            vec![
                Step::Set {
                    key: "deployment.environment".into(),
                    source: value(Otlp::StringValue("prod".into())),
                    mode: SetMode::Insert,
                },
                Step::Set {
                    key: "collector.replicas".into(),
                    source: value(Otlp::IntValue(3)),
                    mode: SetMode::Upsert,
                },
                Step::Set {
                    key: "sampling.ratio".into(),
                    source: value(Otlp::DoubleValue(0.25)),
                    mode: SetMode::Update,
                },
                Step::Set {
                    key: "profiling.enabled".into(),
                    source: value(Otlp::BoolValue(true)),
                    mode: SetMode::Upsert,
                },
                Step::Set {
                    key: "service.namespace".into(),
                    source: Source::FromAttribute("k8s.namespace.name".into()),
                    mode: SetMode::Insert,
                },
                Step::Delete {
                    key: "host.ip".into(),
                },
                Step::Set {
                    key: "service.version".into(),
                    source: value(Otlp::StringValue("42".into())),
                    mode: SetMode::Upsert,
                },
            ]
        );
    }

    #[test]
    fn actions_are_case_insensitive_and_checked() {
        let c = parse("attributes: [{key: a, action: UPSERT, value: x}]\n").expect("parses");
        assert!(c.compile().is_ok());
        let e = parse("attributes:\n  - {key: a, action: delete}\n  - {key: b, action: remove}\n")
            .expect_err("bad action");
        assert_eq!(e.path, "attributes[1]::action");
        assert_eq!(
            e.message,
            "unknown action \"remove\"; expected insert, update, upsert or delete"
        );
        let e = parse("attributes: [{key: a, action: hash}]\n").expect_err("unsupported");
        assert_eq!(e.path, "attributes[0]::action");
        assert!(e.message.contains("not supported"), "{}", e.message);
    }

    #[test]
    fn unsupported_otelcol_keys_are_unknown_fields() {
        for key in ["pattern", "converted_type", "from_context"] {
            let e = parse(&format!(
                "attributes: [{{key: a, action: upsert, value: x, {key}: y}}]\n"
            ))
            .expect_err("unknown");
            assert_eq!(e.path, format!("attributes[0]::{key}"));
        }
    }

    #[test]
    fn every_rule_names_its_path() {
        assert_eq!(
            errors("attributes: []\n"),
            vec!["attributes: at least one action is required"]
        );
        assert_eq!(
            parse_typed::<Config>(&Value::Null)
                .expect("null")
                .compile()
                .expect_err("no actions")
                .len(),
            1
        );
        assert_eq!(
            errors(
                "attributes:
  - {key: a, action: insert, value: 1}
  - {action: upsert, value: 1}
  - {key: c}
  - {key: d, action: insert}
  - {key: e, action: update, value: 1, from_attribute: x}
  - {key: f, action: delete, value: 1}
  - {key: g, action: delete, from_attribute: x}
  - {key: h, action: upsert, value: [1, 2]}
  - {key: i, action: upsert, value: {a: b}}
  - {key: j, action: upsert, value: 18446744073709551615}
  - {key: k, action: upsert, from_attribute: ''}
  - {key: l, action: upsert, value: null}
"
            ),
            vec![
                "attributes[1]::key: missing key",
                "attributes[2]::action: missing action; expected insert, update, upsert or delete",
                "attributes[3]::value: insert needs value or from_attribute",
                "attributes[4]::from_attribute: update takes value or from_attribute, not both",
                "attributes[5]::value: delete takes no value",
                "attributes[6]::from_attribute: delete takes no from_attribute",
                "attributes[7]::value: must be a string, int, double or bool",
                "attributes[8]::value: must be a string, int, double or bool",
                "attributes[9]::value: 18446744073709551615 is out of the int64 range",
                "attributes[10]::from_attribute: must not be empty",
                "attributes[11]::value: upsert needs value or from_attribute",
            ]
        );
    }

    #[test]
    fn scalars_map_to_otlp_values() {
        let c = parse(
            "attributes:
  - {key: s, action: upsert, value: text}
  - {key: q, action: upsert, value: '7'}
  - {key: i, action: upsert, value: -7}
  - {key: d, action: upsert, value: 1.5}
  - {key: b, action: upsert, value: false}
",
        )
        .expect("parses");
        let values: Vec<Source> = c
            .compile()
            .expect("steps")
            .into_iter()
            .filter_map(|s| match s {
                Step::Set { source, .. } => Some(source),
                _ => None,
            })
            .collect();
        assert_eq!(
            values,
            vec![
                value(Otlp::StringValue("text".into())),
                value(Otlp::StringValue("7".into())),
                value(Otlp::IntValue(-7)),
                value(Otlp::DoubleValue(1.5)),
                value(Otlp::BoolValue(false)),
            ]
        );
    }
}
