//! Attribute helpers: semantic-convention names, value formatting, and resolving the
//! reference form (`key_strindex`, `string_value_strindex`) into inline keys and values.

use super::limits::CopyBudget;
use super::types::{AnyValue, KeyValue, KeyValueAndUnit, ProfilesDictionary, Value};
use super::validate::ValidationError;

/// Attribute names from the OpenTelemetry semantic conventions used with profiles.
pub mod semconv {
    pub const SERVICE_NAME: &str = "service.name";
    pub const PROCESS_PID: &str = "process.pid";
    pub const PROCESS_EXECUTABLE_NAME: &str = "process.executable.name";
    pub const PROCESS_EXECUTABLE_PATH: &str = "process.executable.path";
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
    dictionary: &'a ProfilesDictionary,
    indices: &[i32],
    key: &str,
) -> Option<&'a AnyValue> {
    indices.iter().find_map(|&i| {
        let kv = dictionary.attribute_table.get(usize::try_from(i).ok()?)?;
        let k = dictionary
            .string_table
            .get(usize::try_from(kv.key_strindex).ok()?)?;
        (k == key).then_some(kv.value.as_ref()).flatten()
    })
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
    use base64::Engine as _;
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

/// Resolves string references against `strings`, so that everything past the edge of the
/// collector carries inline keys and values. `path` names the place for errors. Each
/// copy is charged to a budget proportional to the strings, so that one long string
/// referenced millions of times is refused instead of copied millions of times.
pub(crate) struct ReferenceResolver<'a> {
    strings: &'a [String],
    budget: CopyBudget,
}

impl<'a> ReferenceResolver<'a> {
    pub fn new(strings: &'a [String]) -> Self {
        ReferenceResolver {
            strings,
            budget: CopyBudget::for_strings(strings),
        }
    }

    /// The referenced string, copied and charged to the budget.
    fn copy(&mut self, index: i32, path: &dyn Fn() -> String) -> Result<String, ValidationError> {
        let s = usize::try_from(index)
            .ok()
            .and_then(|i| self.strings.get(i))
            .ok_or_else(|| ValidationError::IndexOutOfRange {
                field: path(),
                table: "string_table",
                index: i64::from(index),
                len: self.strings.len(),
            })?;
        self.budget
            .charge(s.len())
            .map_err(|total| ValidationError::Invalid {
                field: path(),
                problem: format!(
                    "string references would copy more than {total} bytes (four times the string table plus 1 MiB)"
                ),
            })?;
        Ok(s.clone())
    }

    pub fn key_values(
        &mut self,
        kvs: &mut [KeyValue],
        path: &dyn Fn() -> String,
    ) -> Result<(), ValidationError> {
        for (i, kv) in kvs.iter_mut().enumerate() {
            let here = || format!("{}[{i}]", path());
            // An inline key wins over a (possibly stale) reference; index 0 means unset.
            if kv.key.is_empty() && kv.key_strindex != 0 {
                kv.key = self.copy(kv.key_strindex, &|| format!("{}.key_strindex", here()))?;
            } else if kv.key_strindex < 0 {
                return Err(ValidationError::IndexOutOfRange {
                    field: format!("{}.key_strindex", here()),
                    table: "string_table",
                    index: i64::from(kv.key_strindex),
                    len: self.strings.len(),
                });
            }
            kv.key_strindex = 0;
            if let Some(v) = kv.value.as_mut() {
                self.any_value(v, &|| format!("{}.value", here()), 0)?;
            }
        }
        Ok(())
    }

    pub fn any_value(
        &mut self,
        value: &mut AnyValue,
        path: &dyn Fn() -> String,
        depth: usize,
    ) -> Result<(), ValidationError> {
        // prost bounds decode recursion at 100; this guards values built in memory too.
        if depth > 100 {
            return Err(ValidationError::Invalid {
                field: path(),
                problem: "attribute value nested more than 100 levels deep".into(),
            });
        }
        match &mut value.value {
            Some(Value::StringValueStrindex(i)) => {
                let s = self.copy(*i, &|| format!("{}.string_value_strindex", path()))?;
                value.value = Some(Value::StringValue(s));
            }
            Some(Value::ArrayValue(a)) => {
                for (i, v) in a.values.iter_mut().enumerate() {
                    self.any_value(v, &|| format!("{}.array_value[{i}]", path()), depth + 1)?;
                }
            }
            Some(Value::KvlistValue(l)) => {
                let p = || format!("{}.kvlist_value", path());
                self.key_values(&mut l.values, &p)?;
            }
            _ => {}
        }
        Ok(())
    }

    pub fn attribute_table(
        &mut self,
        table: &mut [KeyValueAndUnit],
    ) -> Result<(), ValidationError> {
        for (i, kv) in table.iter_mut().enumerate() {
            if let Some(v) = kv.value.as_mut() {
                self.any_value(v, &|| format!("dictionary.attribute_table[{i}].value"), 0)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdata::types::{ArrayValue, KeyValueList};

    fn strs() -> Vec<String> {
        vec!["".into(), "service.name".into(), "cart".into()]
    }

    #[test]
    fn resolves_references_at_every_depth() {
        let strings = strs();
        let mut r = ReferenceResolver::new(&strings);
        let mut kvs = vec![KeyValue {
            key: String::new(),
            key_strindex: 1,
            value: Some(AnyValue {
                value: Some(Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(Value::KvlistValue(KeyValueList {
                            values: vec![KeyValue {
                                key: String::new(),
                                key_strindex: 2,
                                value: Some(AnyValue {
                                    value: Some(Value::StringValueStrindex(2)),
                                }),
                            }],
                        })),
                    }],
                })),
            }),
        }];
        r.key_values(&mut kvs, &|| "resource.attributes".into())
            .expect("valid");
        assert_eq!(kvs[0].key, "service.name");
        assert_eq!(kvs[0].key_strindex, 0);
        let Some(Value::ArrayValue(a)) = &kvs[0].value.as_ref().and_then(|v| v.value.clone())
        else {
            panic!("array expected")
        };
        let Some(Value::KvlistValue(l)) = &a.values[0].value else {
            panic!("kvlist expected")
        };
        assert_eq!(l.values[0].key, "cart");
        assert_eq!(
            l.values[0].value.as_ref().and_then(|v| v.value.clone()),
            Some(Value::StringValue("cart".into()))
        );
    }

    #[test]
    fn service_name_follows_the_semantic_conventions_default() {
        let kv = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(v.into())),
            }),
            key_strindex: 0,
        };
        assert_eq!(
            service_name(&[
                kv("service.name", "cart"),
                kv("process.executable.name", "java")
            ]),
            "cart"
        );
        assert_eq!(
            service_name(&[kv("process.executable.name", "java")]),
            "unknown_service:java"
        );
        assert_eq!(service_name(&[]), "unknown_service");
    }

    #[test]
    fn inline_key_wins_and_index_zero_is_unset() {
        let strings = strs();
        let mut r = ReferenceResolver::new(&strings);
        let mut kvs = vec![
            KeyValue {
                key: "inline".into(),
                key_strindex: 2,
                value: None,
            },
            KeyValue {
                key: "kept".into(),
                key_strindex: 0,
                value: None,
            },
        ];
        r.key_values(&mut kvs, &|| "x".into()).expect("valid");
        assert_eq!(kvs[0].key, "inline");
        assert_eq!(kvs[1].key, "kept");
    }

    #[test]
    fn out_of_range_reference_names_the_path() {
        let strings = strs();
        let mut r = ReferenceResolver::new(&strings);
        let mut kvs = vec![KeyValue {
            key: String::new(),
            key_strindex: 9,
            value: None,
        }];
        let err = r
            .key_values(&mut kvs, &|| {
                "resource_profiles[0].resource.attributes".into()
            })
            .expect_err("out of range");
        assert_eq!(
            err.to_string(),
            "resource_profiles[0].resource.attributes[0].key_strindex: index 9 is out of range of string_table (length 3)"
        );
    }

    #[test]
    fn one_long_string_referenced_many_times_is_refused_not_copied() {
        let strings = vec![String::new(), "x".repeat(1 << 20)];
        let mut r = ReferenceResolver::new(&strings);
        // Five copies fit the budget (4 × 1 MiB + 1 MiB); the sixth does not.
        let mut table: Vec<KeyValueAndUnit> = (0..1000)
            .map(|_| KeyValueAndUnit {
                value: Some(AnyValue {
                    value: Some(Value::StringValueStrindex(1)),
                }),
                ..Default::default()
            })
            .collect();
        let err = r.attribute_table(&mut table).expect_err("over budget");
        assert_eq!(
            err.to_string(),
            format!(
                "dictionary.attribute_table[5].value.string_value_strindex: string references would copy more than {} bytes (four times the string table plus 1 MiB)",
                5 << 20
            )
        );
    }
}
