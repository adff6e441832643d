//! Configuration in the OpenTelemetry Collector's shape: YAML files merged in order,
//! `${env:NAME}` expanded in values, the top level of `receivers / processors / exporters /
//! extensions / service`, and typed component configs that each factory parses itself.
//! Errors carry their path (`exporters::otlp::compresion: unknown field ...`) and are all
//! reported at once.

mod checked;
pub mod duration;
mod env;
mod headers;
mod merge;
pub mod nullable;
mod top_level;

use std::fmt;

pub use checked::Checked;
pub use env::expand_env;
pub use headers::header_map;
pub use merge::merge_values;
pub use serde_yaml_ng::Value;
pub use top_level::{
    LogEncoding, LogsConfig, MetricsConfig, PipelineConfig, RawConfig, ServiceConfig,
    TelemetryConfig,
};

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

/// A component config's check, with what it builds on the way: every [`Validate`] config
/// builds nothing (`()`). A config whose check has to build something its component runs
/// with (regexes, a list of steps) implements this instead of [`Validate`], so that
/// [`Checked`] carries the result to the create step and nothing is built twice.
pub trait Compile {
    /// What a valid config compiles into.
    type Compiled: Clone + Send + Sync + 'static;

    /// The compiled form, or every error at once (paths relative to the config's root).
    fn compile(&self) -> Result<Self::Compiled, Vec<ConfigError>>;
}

impl<C: Validate> Compile for C {
    type Compiled = ();

    fn compile(&self) -> Result<(), Vec<ConfigError>> {
        let errors = self.validate();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// Deserializes a component's config sub-tree into `T`. `null` (as in `debug:`) means
/// all defaults. A serde error gives its path, joined with `::`. Stops at the first
/// error; [`parse_typed_all`] finds every one.
pub fn parse_typed<T: serde::de::DeserializeOwned + Default>(
    value: &Value,
) -> Result<T, ConfigError> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_path_to_error::deserialize::<_, T>(value.clone()).map_err(|e| config_error(&e))
}

/// Like [`parse_typed`], but reports every unknown key and every bad value, each with its
/// path, not only the first one serde meets.
pub fn parse_typed_all<T: serde::de::DeserializeOwned + Default>(
    value: &Value,
) -> Result<T, Vec<ConfigError>> {
    match parse_typed_lenient(value) {
        (Some(parsed), errors) if errors.is_empty() => Ok(parsed),
        (_, errors) => Err(errors),
    }
}

/// At most this many errors are collected from one config: each costs one more
/// deserialization of it.
pub const MAX_PARSE_ERRORS: usize = 100;

/// Every error in `value` as `T` sees it, and `T` read from what is left once the keys in
/// error are taken out (`None` when even that does not parse).
///
/// serde stops at the first error (and `deny_unknown_fields` at the first unknown key),
/// which stays as strict as it is: each time deserializing fails, the error is recorded,
/// the key it is at (for an element of a list, the key holding the list) is removed from
/// a copy of the value, and deserializing starts again, at most [`MAX_PARSE_ERRORS`]
/// times. A required key removed that way is not reported missing as well.
pub fn parse_typed_lenient<T: serde::de::DeserializeOwned + Default>(
    value: &Value,
) -> (Option<T>, Vec<ConfigError>) {
    if value.is_null() {
        return (Some(T::default()), Vec::new());
    }
    let original = value;
    let mut value = value.clone();
    // Each error with where it is in the document, to report them in file order (serde
    // does not always meet them in that order).
    let mut errors: Vec<(Vec<usize>, ConfigError)> = Vec::new();
    // (path of the mapping, key) of every key removed so far.
    let mut removed: Vec<(Vec<Step>, String)> = Vec::new();
    loop {
        let e = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(parsed) => return (Some(parsed), in_file_order(errors)),
            Err(e) => e,
        };
        let steps: Vec<Step> = e.path().iter().map(Step::from).collect();
        let error = config_error(&e);
        let consequence = missing_field(&error.message)
            .is_some_and(|field| removed.iter().any(|(at, key)| *at == steps && key == field));
        if consequence {
            return (None, in_file_order(errors));
        }
        errors.push((position(original, &steps), error));
        if errors.len() >= MAX_PARSE_ERRORS {
            return (None, in_file_order(errors));
        }
        match remove_key_at(&mut value, &steps) {
            Some(key) => removed.push(key),
            None => return (None, in_file_order(errors)),
        }
    }
}

fn in_file_order(mut errors: Vec<(Vec<usize>, ConfigError)>) -> Vec<ConfigError> {
    errors.sort_by(|a, b| a.0.cmp(&b.0));
    errors.into_iter().map(|(_, e)| e).collect()
}

/// Where a path leads in the document, as the index of each key in its mapping and of
/// each element in its list, as far as the path can be followed.
fn position(value: &Value, steps: &[Step]) -> Vec<usize> {
    let mut out = Vec::with_capacity(steps.len());
    let mut node = value;
    for step in steps {
        let next = match (step, node) {
            (Step::Key(k) | Step::Variant(k), Value::Mapping(m)) => m
                .iter()
                .enumerate()
                .find(|(_, (mk, _))| key_is(mk, k))
                .map(|(i, (_, v))| (i, v)),
            (Step::Index(i), Value::Sequence(s)) => s.get(*i).map(|v| (*i, v)),
            (Step::Variant(v), Value::Tagged(t)) if t.tag == v.as_str() => Some((0, &t.value)),
            _ => None,
        };
        let Some((i, v)) = next else {
            break;
        };
        out.push(i);
        node = v;
    }
    out
}

fn config_error(e: &serde_path_to_error::Error<serde_yaml_ng::Error>) -> ConfigError {
    let path = e.path().to_string();
    let path = if path == "." {
        String::new()
    } else {
        path.replace('.', "::")
    };
    ConfigError::new(path, clean_serde_message(&e.inner().to_string()))
}

/// One step of a serde path, comparable (serde_path_to_error's is not).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
    Variant(String),
    Unknown,
}

impl From<&serde_path_to_error::Segment> for Step {
    fn from(s: &serde_path_to_error::Segment) -> Self {
        use serde_path_to_error::Segment;
        match s {
            Segment::Map { key } => Step::Key(key.clone()),
            Segment::Seq { index } => Step::Index(*index),
            Segment::Enum { variant } => Step::Variant(variant.clone()),
            Segment::Unknown => Step::Unknown,
        }
    }
}

/// The field serde names in "missing field `x`".
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// Whether a mapping key is the one a serde path names (paths hold keys as text).
fn key_is(key: &Value, name: &str) -> bool {
    match key {
        Value::String(s) => s == name,
        Value::Number(n) => n.to_string() == name,
        Value::Bool(b) => b.to_string() == name,
        _ => false,
    }
}

/// Removes the key that the error at `steps` is at: the last key of the path (the whole
/// list, for an error in one of its elements, so that the indices of later errors stay
/// true). Returns the path of the mapping it was in and the key, or `None` when the path
/// cannot be followed in `value` (the error is at the top, or inside something serde
/// buffered and whose inner path it does not know).
fn remove_key_at(value: &mut Value, steps: &[Step]) -> Option<(Vec<Step>, String)> {
    let last_key = steps.iter().rposition(|s| matches!(s, Step::Key(_)))?;
    let Step::Key(key) = &steps[last_key] else {
        return None;
    };
    let parent = &steps[..last_key];
    let mut node = value;
    for step in parent {
        node = match (step, node) {
            (Step::Key(k), Value::Mapping(m)) => {
                m.iter_mut().find(|(mk, _)| key_is(mk, k)).map(|(_, v)| v)?
            }
            (Step::Index(i), Value::Sequence(s)) => s.get_mut(*i)?,
            // An enum written as `variant: value`, or as a YAML tag.
            (Step::Variant(v), Value::Mapping(m)) => {
                m.iter_mut().find(|(mk, _)| key_is(mk, v)).map(|(_, v)| v)?
            }
            (Step::Variant(v), Value::Tagged(t)) if t.tag == v.as_str() => &mut t.value,
            _ => return None,
        };
    }
    let Value::Mapping(m) = node else {
        return None;
    };
    let found = m.keys().find(|k| key_is(k, key))?.clone();
    m.remove(&found);
    Some((parent.to_vec(), key.clone()))
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

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Target {
        endpoint: String,
        labels: Vec<String>,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Scrape {
        protocols: Protocols,
        targets: Vec<Target>,
        interval_seconds: u32,
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Required {
        endpoint: String,
        port: u16,
    }

    impl Default for Required {
        fn default() -> Self {
            Required {
                endpoint: "x".into(),
                port: 1,
            }
        }
    }

    fn paths(errors: &[ConfigError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn every_unknown_key_is_reported_with_its_path_nested_too() {
        let v = parse_yaml(
            "x",
            "protocols:\n  grpc:\n    endpoitn: a\n    max_recv_msg_size: 4\n  gprc: {}\n\
             targets:\n  - endpoint: b\n    lables: [x]\n  - endpiont: c\n\
             interval: 5\n",
        )
        .expect("yaml");
        let errors = parse_typed_all::<Scrape>(&v).expect_err("typos");
        assert_eq!(
            paths(&errors),
            [
                "protocols::grpc::endpoitn",
                "protocols::grpc::max_recv_msg_size",
                "protocols::gprc",
                "targets[0]::lables",
                "targets[1]::endpiont",
                "interval",
            ]
        );
        assert!(
            errors[0]
                .message
                .starts_with("unknown field `endpoitn`, expected `endpoint` or"),
            "{}",
            errors[0].message
        );
        // The first error is the one parse_typed reports alone.
        assert_eq!(parse_typed::<Scrape>(&v).expect_err("typo"), errors[0]);
        // What is left once the bad keys are out still parses.
        let (parsed, _) = parse_typed_lenient::<Scrape>(&v);
        let parsed = parsed.expect("the rest parses");
        assert_eq!(parsed.targets.len(), 2);
        assert_eq!(parsed.targets[0].endpoint, "b");
    }

    #[test]
    fn bad_values_are_reported_beside_unknown_keys() {
        let v = parse_yaml(
            "x",
            "interval_seconds: soon\ntargets:\n  - endpoint: a\n    labels: [x, [2]]\nprotocls: {}\n",
        )
        .expect("yaml");
        let errors = parse_typed_all::<Scrape>(&v).expect_err("errors");
        assert_eq!(
            paths(&errors),
            ["interval_seconds", "targets[0]::labels[1]", "protocls"]
        );
        assert!(
            errors[0]
                .message
                .starts_with("invalid type: string \"soon\""),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn a_required_key_taken_out_is_not_also_reported_missing() {
        let v = parse_yaml("x", "endpoint: a\nport: many\n").expect("yaml");
        let errors = parse_typed_all::<Required>(&v).expect_err("bad port");
        assert_eq!(paths(&errors), ["port"]);
        // Really missing is still an error.
        let v = parse_yaml("x", "endpoint: a\nprot: 1\n").expect("yaml");
        let errors = parse_typed_all::<Required>(&v).expect_err("typo");
        // (an error about a mapping comes before those about its keys)
        assert_eq!(paths(&errors), ["", "prot"]);
        assert_eq!(errors[0].message, "missing field `port`");
        // A value with nothing to parse is defaults; a good one parses.
        assert_eq!(
            parse_typed_all::<Required>(&Value::Null),
            Ok(Required::default())
        );
        let v = parse_yaml("x", "endpoint: a\nport: 2\n").expect("yaml");
        assert_eq!(
            parse_typed_all::<Required>(&v),
            Ok(Required {
                endpoint: "a".into(),
                port: 2
            })
        );
    }

    #[test]
    fn errors_are_bounded() {
        let text: String = (0..MAX_PARSE_ERRORS + 20)
            .map(|i| format!("typo{i}: 1\n"))
            .collect();
        let v = parse_yaml("x", &text).expect("yaml");
        let errors = parse_typed_all::<Scrape>(&v).expect_err("typos");
        assert_eq!(errors.len(), MAX_PARSE_ERRORS);
        assert_eq!(errors[0].path, "typo0");
    }

    /// Three typos in two components and one in a pipeline, through the whole loader:
    /// all reported, each with its path.
    #[test]
    fn the_loader_reports_every_typo_of_every_component() {
        let yaml = "receivers:\n  test_source:\n    servcie: cart\n    batches: 1\n    sampels_per_batch: 2\n\
                    processors:\n  test_tag:\n    key: k\n    vlaue: v\n\
                    exporters:\n  test_sink: {name: s}\n\
                    service:\n  pipelines:\n    profiles:\n      receivers: [test_source]\n      processors: [test_tag]\n      exporters: [test_sink]\n      exportres: []\n";
        let errors = crate::service::load(
            &[("t.yaml".into(), yaml.into())],
            &|_| None,
            &crate::testkit::registry(),
        )
        .err()
        .expect("typos")
        .0;
        assert_eq!(
            paths(&errors),
            [
                "receivers::test_source::servcie",
                "receivers::test_source::sampels_per_batch",
                "processors::test_tag::vlaue",
                "service::pipelines::profiles::exportres",
            ]
        );
        assert!(
            errors[0].message.starts_with("unknown field `servcie`"),
            "{}",
            errors[0].message
        );
        // A misspelt section is reported with the components' own mistakes.
        let yaml = "recievers: {}\nreceivers:\n  test_source: {servcie: x}\n";
        let errors = crate::service::load(
            &[("t.yaml".into(), yaml.into())],
            &|_| None,
            &crate::testkit::registry(),
        )
        .err()
        .expect("typos")
        .0;
        assert_eq!(
            paths(&errors),
            ["recievers", "receivers::test_source::servcie"]
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
