//! `${env:NAME}` and `${env:NAME:-default}` in values (never keys). `$$` is a literal `$`.
//! A value that is one whole reference is re-read as a YAML scalar, so `port: ${env:PORT}`
//! is a number; a reference inside other text stays text. The environment is passed in,
//! so tests need not touch the process's.

use serde_yaml_ng::Value;

use super::{ConfigError, join_path};

/// Expands every reference under `value`; returns every error (unset variables, bad
/// syntax) with its path.
pub fn expand_env(value: &mut Value, lookup: &dyn Fn(&str) -> Option<String>) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    walk(value, "", lookup, &mut errors);
    errors
}

fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
    }
}

fn walk(
    value: &mut Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
) {
    match value {
        Value::Mapping(m) => {
            for (k, v) in m.iter_mut() {
                walk(v, &join_path(path, &key_text(k)), lookup, errors);
            }
        }
        Value::Sequence(s) => {
            for (i, v) in s.iter_mut().enumerate() {
                walk(v, &format!("{path}[{i}]"), lookup, errors);
            }
        }
        Value::Tagged(t) => walk(&mut t.value, path, lookup, errors),
        Value::String(s) if s.contains('$') => match expand_string(s, lookup) {
            Ok(Expanded::Whole(text)) => {
                *value = reread_scalar(text);
            }
            Ok(Expanded::Text(text)) => *s = text,
            Err(message) => errors.push(ConfigError::new(path, message)),
        },
        _ => {}
    }
}

/// A whole-value reference becomes the scalar its text reads as; text that would read as
/// a mapping or list stays a string (a variable cannot inject structure).
fn reread_scalar(text: String) -> Value {
    match serde_yaml_ng::from_str::<Value>(&text) {
        Ok(v @ (Value::Bool(_) | Value::Number(_))) => v,
        Ok(Value::Null) if text.trim().is_empty() => Value::String(String::new()),
        _ => Value::String(text),
    }
}

enum Expanded {
    /// The string was exactly one reference.
    Whole(String),
    Text(String),
}

fn expand_string(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Expanded, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut references = 0;
    let mut literal = false;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            literal = true;
            rest = after;
        } else if let Some(after) = rest.strip_prefix("${") {
            let end = after
                .find('}')
                .ok_or_else(|| format!("unterminated reference in {s:?}"))?;
            out.push_str(&resolve(&after[..end], lookup)?);
            references += 1;
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &rest[1..];
            literal = true;
        }
    }
    out.push_str(rest);
    let whole = references == 1
        && !literal
        && s.starts_with("${")
        && s.ends_with('}')
        && s.matches("${").count() == 1;
    Ok(if whole {
        Expanded::Whole(out)
    } else {
        Expanded::Text(out)
    })
}

/// `env:NAME`, `env:NAME:-default`, or a bare `NAME` (env is the default scheme).
fn resolve(reference: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let body = match reference.split_once(':') {
        Some(("env", body)) => body,
        Some((scheme, _))
            if !scheme.contains('-')
                && !scheme.is_empty()
                && scheme.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            return Err(format!(
                "unsupported reference ${{{reference}}}: only the env scheme is known"
            ));
        }
        _ => reference,
    };
    let (name, default) = match body.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (body, None),
    };
    if name.is_empty()
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || name.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(format!(
            "invalid environment variable name {name:?} in ${{{reference}}}"
        ));
    }
    match (lookup(name), default) {
        (Some(v), _) => Ok(v),
        (None, Some(d)) => Ok(d.to_owned()),
        (None, None) => Err(format!(
            "environment variable {name} is not set and ${{{reference}}} gives no default"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("4317".into()),
            "HOST" => Some("collector".into()),
            "FLAG" => Some("true".into()),
            "EMPTY" => Some(String::new()),
            "STRUCT" => Some("{a: 1}".into()),
            _ => None,
        }
    }

    fn expand(yaml: &str) -> (Value, Vec<ConfigError>) {
        let mut v: Value = serde_yaml_ng::from_str(yaml).expect("yaml");
        let errors = expand_env(&mut v, &env);
        (v, errors)
    }

    #[test]
    fn whole_references_become_scalars_and_embedded_ones_text() {
        let (v, errors) = expand(
            "port: ${env:PORT}\nendpoint: ${env:HOST}:${env:PORT}\nflag: ${FLAG}\nd: ${env:UNSET:-9}\nempty: ${env:EMPTY}\nobj: ${env:STRUCT}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let want: Value = serde_yaml_ng::from_str(
            "port: 4317\nendpoint: collector:4317\nflag: true\nd: 9\nempty: ''\nobj: '{a: 1}'\n",
        )
        .expect("want");
        assert_eq!(v, want);
    }

    #[test]
    fn dollar_dollar_is_a_literal_dollar_and_keys_are_untouched() {
        let (v, errors) = expand("${env:PORT}: $$HOME and $${env:PORT} and cost $5\n");
        assert!(errors.is_empty(), "{errors:?}");
        let want: Value =
            serde_yaml_ng::from_str("${env:PORT}: $HOME and ${env:PORT} and cost $5\n")
                .expect("want");
        assert_eq!(v, want);
    }

    #[test]
    fn every_unset_variable_is_an_error_with_its_path() {
        let (_, errors) = expand(
            "exporters:\n  otlp:\n    endpoint: ${env:NOPE}\n    headers:\n      - ${env:ALSO_NOPE}\n",
        );
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "exporters::otlp::endpoint: environment variable NOPE is not set and ${env:NOPE} gives no default",
                "exporters::otlp::headers[0]: environment variable ALSO_NOPE is not set and ${env:ALSO_NOPE} gives no default",
            ]
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        let (_, errors) = expand("a: ${env:PORT\nb: ${file:/x}\nc: ${env:1BAD}\n");
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].message.contains("unterminated"));
        assert!(errors[1].message.contains("only the env scheme"));
        assert!(
            errors[2]
                .message
                .contains("invalid environment variable name")
        );
    }
}
