//! Attribute helpers: semantic-convention names, finding a value by key, and rendering
//! values as text.

use base64::Engine as _;
use profcol_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};

use crate::dictionary::Dictionary;
use crate::rows::AnyValueRef;
use crate::wire::Reader;

/// Attribute names from the OpenTelemetry semantic conventions used with profiles.
pub mod semconv {
    pub const SERVICE_NAME: &str = "service.name";
    /// Pyroscope's `__name__` label (the profile family: `process_cpu`, `memory`,
    /// `mutex`...), as the `pprof` receiver keeps it and the JFR reader writes it.
    pub const PYROSCOPE_PROFILE_NAME: &str = "pyroscope.profile.name";
    pub const PROCESS_PID: &str = "process.pid";
    pub const PROCESS_EXECUTABLE_NAME: &str = "process.executable.name";
    pub const PROCESS_EXECUTABLE_PATH: &str = "process.executable.path";
    pub const PROCESS_RUNTIME_NAME: &str = "process.runtime.name";
    pub const PROCESS_RUNTIME_VERSION: &str = "process.runtime.version";
    pub const BUILD_ID_GNU: &str = "process.executable.build_id.gnu";
    pub const BUILD_ID_GO: &str = "process.executable.build_id.go";
    pub const BUILD_ID_HTLHASH: &str = "process.executable.build_id.htlhash";
    pub const FRAME_TYPE: &str = "profile.frame.type";
    pub const PPROF_HAS_FUNCTIONS: &str = "pprof.mapping.has_functions";
    pub const PPROF_HAS_FILENAMES: &str = "pprof.mapping.has_filenames";
    pub const PPROF_HAS_LINE_NUMBERS: &str = "pprof.mapping.has_line_numbers";
    pub const PPROF_HAS_INLINE_FRAMES: &str = "pprof.mapping.has_inline_frames";
    pub const PPROF_IS_FOLDED: &str = "pprof.location.is_folded";
    pub const PPROF_COMMENT: &str = "pprof.profile.comment";
    pub const PPROF_DROP_FRAMES: &str = "pprof.profile.drop_frames";
    pub const PPROF_KEEP_FRAMES: &str = "pprof.profile.keep_frames";
    pub const PPROF_DOC_URL: &str = "pprof.profile.doc_url";
    /// Not a semantic convention: where pprof's `default_sample_type` stood among the sample
    /// types, kept on the first profile so that the round trip restores pprof's column order.
    pub const PPROF_DEFAULT_SAMPLE_TYPE_INDEX: &str = "pprof.profile.default_sample_type_index";
}

/// The value of the attribute named `key` among `indices`, if present.
pub fn attribute_value<'a>(
    d: &'a Dictionary,
    indices: impl IntoIterator<Item = i32>,
    key: &str,
) -> Option<AnyValueRef<'a>> {
    indices.into_iter().find_map(|i| {
        let a = d.attribute(i);
        (d.string(a.key_strindex) == key)
            .then_some(a.value)
            .flatten()
    })
}

/// The text of a string value, following a string reference into the dictionary.
pub fn value_str<'a>(d: &'a Dictionary, v: AnyValueRef<'a>) -> Option<&'a str> {
    match v {
        AnyValueRef::String(s) => Some(s),
        AnyValueRef::StringIndex(i) => Some(d.string(i)),
        _ => None,
    }
}

/// The service a resource belongs to, by the semantic conventions' rule: `service.name`
/// when set, else `unknown_service:` + the process executable name, else
/// `unknown_service`.
pub fn service_name(attributes: &[KeyValue]) -> String {
    let text = |key: &str| {
        attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .map(any_value_to_string)
            .filter(|s| !s.is_empty())
    };
    text(semconv::SERVICE_NAME)
        .or_else(|| {
            text(semconv::PROCESS_EXECUTABLE_NAME).map(|exe| format!("unknown_service:{exe}"))
        })
        .unwrap_or_else(|| "unknown_service".to_owned())
}

/// Renders a value as text, the way a label or a log line shows it.
pub fn any_value_to_string(value: &AnyValue) -> String {
    match &value.value {
        None => String::new(),
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => base64::engine::general_purpose::STANDARD.encode(b),
        Some(Value::StringValueStrindex(i)) => format!("strindex:{i}"),
        Some(Value::ArrayValue(a)) => {
            let parts: Vec<String> = a.values.iter().map(any_value_to_string).collect();
            format!("[{}]", parts.join(","))
        }
        Some(Value::KvlistValue(l)) => {
            let parts: Vec<String> = l
                .values
                .iter()
                .map(|kv| {
                    let v = kv
                        .value
                        .as_ref()
                        .map(any_value_to_string)
                        .unwrap_or_default();
                    format!("{}={v}", kv.key)
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// Renders a dictionary attribute value as text (string references followed).
pub fn value_to_string(d: &Dictionary, v: AnyValueRef<'_>) -> String {
    match v {
        AnyValueRef::Empty => String::new(),
        AnyValueRef::String(s) => s.to_owned(),
        AnyValueRef::StringIndex(i) => d.string(i).to_owned(),
        AnyValueRef::Bool(b) => b.to_string(),
        AnyValueRef::Int(i) => i.to_string(),
        AnyValueRef::Double(x) => x.to_string(),
        AnyValueRef::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b),
        AnyValueRef::Array(bytes) => {
            let parts: Vec<String> = array_values(bytes).map(|v| value_to_string(d, v)).collect();
            format!("[{}]", parts.join(","))
        }
        AnyValueRef::KvList(bytes) => {
            let decoded =
                <profcol_proto::otlp::common::v1::KeyValueList as prost::Message>::decode(bytes)
                    .unwrap_or_default();
            let parts: Vec<String> = decoded
                .values
                .iter()
                .map(|kv| {
                    let key = if kv.key.is_empty() && kv.key_strindex != 0 {
                        d.string(kv.key_strindex)
                    } else {
                        kv.key.as_str()
                    };
                    let v = kv
                        .value
                        .as_ref()
                        .map(|v| match &v.value {
                            Some(Value::StringValueStrindex(i)) => d.string(*i).to_owned(),
                            _ => any_value_to_string(v),
                        })
                        .unwrap_or_default();
                    format!("{key}={v}")
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// The values of an encoded `ArrayValue`.
pub fn array_values(bytes: &[u8]) -> impl Iterator<Item = AnyValueRef<'_>> + '_ {
    let mut r = Reader::new(bytes);
    std::iter::from_fn(move || {
        loop {
            let (field, wire) = r.key().ok()?;
            let v = r.len_field(wire).ok()?;
            if field == 1 {
                return Some(crate::rows::any_value(v));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DictionaryBuilder;

    #[test]
    fn service_name_follows_the_semantic_conventions_default() {
        let kv = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(v.into())),
            }),
            key_strindex: 0,
        };
        assert_eq!(service_name(&[kv("service.name", "cart")]), "cart");
        assert_eq!(
            service_name(&[kv("process.executable.name", "java")]),
            "unknown_service:java"
        );
        assert_eq!(service_name(&[]), "unknown_service");
    }

    #[test]
    fn values_are_found_by_key_and_rendered() {
        let mut b = DictionaryBuilder::new();
        let name = b.attribute_str("thread.name", "worker");
        let n = b.attribute_int("thread.id", 7);
        let list = b.attribute(
            "pprof.profile.comment",
            &AnyValue {
                value: Some(Value::ArrayValue(
                    profcol_proto::otlp::common::v1::ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(Value::StringValue("a".into())),
                            },
                            AnyValue {
                                value: Some(Value::IntValue(2)),
                            },
                        ],
                    },
                )),
            },
            "",
        );
        let d = b.finish().expect("dictionary");
        let v = attribute_value(&d, [n, name], "thread.name").expect("found");
        assert_eq!(value_str(&d, v), Some("worker"));
        assert_eq!(attribute_value(&d, [n], "thread.name"), None);
        assert_eq!(
            value_to_string(&d, attribute_value(&d, [n], "thread.id").expect("found")),
            "7"
        );
        let list = attribute_value(&d, [list], "pprof.profile.comment").expect("found");
        assert_eq!(value_to_string(&d, list), "[a,2]");
    }
}
