//! Validation of a whole `ProfilesData` at the edge of the collector: every index in range,
//! every zero value in place, every sample well-shaped. Errors name the referring field,
//! the table and the index. Paths are only formatted when something is wrong.

use super::attributes::ReferenceResolver;
use super::builder::zero_link;
use super::limits::{MAX_ATTRIBUTES_PER_LIST, MAX_LABELS_PER_SAMPLE, MAX_STACK_DEPTH};
use super::types::{
    Function, KeyValueAndUnit, Location, Mapping, ProfilesData, ProfilesDictionary,
    ResourceProfiles, Stack, Value,
};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    #[error("dictionary.{table}[0] must be the zero value {expected}")]
    MissingZeroValue {
        table: &'static str,
        expected: &'static str,
    },
    #[error("{field}: index {index} is out of range of {table} (length {len})")]
    IndexOutOfRange {
        field: String,
        table: &'static str,
        index: i64,
        len: usize,
    },
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

fn check_index(
    index: i32,
    len: usize,
    table: &'static str,
    field: impl FnOnce() -> String,
) -> Result<(), ValidationError> {
    match usize::try_from(index) {
        Ok(i) if i < len => Ok(()),
        _ => Err(ValidationError::IndexOutOfRange {
            field: field(),
            table,
            index: i64::from(index),
            len,
        }),
    }
}

fn check_indices(
    indices: &[i32],
    len: usize,
    table: &'static str,
    field: impl Fn() -> String,
) -> Result<(), ValidationError> {
    for (i, &index) in indices.iter().enumerate() {
        check_index(index, len, table, || format!("{}[{i}]", field()))?;
    }
    Ok(())
}

/// Lists up to this long are checked for repeated keys by a scan, longer ones by hashing.
const SHORT_LIST: usize = 16;

/// An attribute list may name each key once (the spec's MUST). Short lists, the usual
/// case, are scanned; long ones hashed, so a sender cannot make this quadratic.
fn check_unique_keys(
    indices: &[i32],
    attributes: &[KeyValueAndUnit],
    field: impl Fn() -> String,
) -> Result<(), ValidationError> {
    let key = |i: i32| attributes.get(i as usize).map_or(0, |kv| kv.key_strindex);
    let repeated = |a: i32, b: i32| ValidationError::Invalid {
        field: field(),
        problem: format!("attributes {a} and {b} have the same key; a list may name a key once"),
    };
    if indices.len() <= SHORT_LIST {
        for (n, &a) in indices.iter().enumerate() {
            if a == 0 {
                continue;
            }
            if let Some(&b) = indices[n + 1..]
                .iter()
                .find(|&&b| b != 0 && key(a) == key(b))
            {
                return Err(repeated(a, b));
            }
        }
        return Ok(());
    }
    let mut first_with_key = std::collections::HashMap::with_capacity(indices.len());
    for &b in indices.iter().filter(|&&i| i != 0) {
        if let Some(&a) = first_with_key.get(&key(b)) {
            return Err(repeated(a, b));
        }
        first_with_key.insert(key(b), b);
    }
    Ok(())
}

/// An attribute list: at most `max` long, every index in range, and each key named once.
fn check_attribute_list(
    indices: &[i32],
    attributes: &[KeyValueAndUnit],
    max: usize,
    field: impl Fn() -> String,
) -> Result<(), ValidationError> {
    if indices.len() > max {
        return Err(ValidationError::Invalid {
            field: field(),
            problem: format!(
                "has {} attributes; at most {max} are accepted",
                indices.len()
            ),
        });
    }
    check_indices(indices, attributes.len(), "attribute_table", &field)?;
    check_unique_keys(indices, attributes, field)
}

/// How many pprof labels a sample's attributes make: one per value, so an array counts
/// each of its values (an empty one as one). Out-of-range indices count as one.
pub(crate) fn label_count(indices: &[i32], attributes: &[KeyValueAndUnit]) -> usize {
    indices
        .iter()
        .map(|&i| {
            match attributes
                .get(i as usize)
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| v.value.as_ref())
            {
                Some(Value::ArrayValue(a)) => a.values.len().max(1),
                _ => 1,
            }
        })
        .fold(0usize, usize::saturating_add)
}

/// A table that is absent gets its zero value; one that is present must start with it.
fn ensure_zero<T: Default + PartialEq>(
    table: &mut Vec<T>,
    name: &'static str,
    expected: &'static str,
) -> Result<(), ValidationError> {
    match table.first() {
        None => {
            table.push(T::default());
            Ok(())
        }
        Some(first) if *first == T::default() => Ok(()),
        Some(_) => Err(ValidationError::MissingZeroValue {
            table: name,
            expected,
        }),
    }
}

/// Checks `data` and brings it to the collector's inner form: every table starts with its
/// zero value, and attribute references are resolved to inline keys and values.
pub(crate) fn validate_and_normalize(data: &mut ProfilesData) -> Result<(), ValidationError> {
    let dict = data
        .dictionary
        .get_or_insert_with(ProfilesDictionary::default);
    normalize_dictionary(dict)?;
    validate_dictionary(dict)?;
    let mut resolver = ReferenceResolver::new(&dict.string_table);
    resolver.attribute_table(&mut dict.attribute_table)?;
    for (r, rp) in data.resource_profiles.iter_mut().enumerate() {
        if let Some(resource) = rp.resource.as_mut() {
            resolver.key_values(&mut resource.attributes, &|| {
                format!("resource_profiles[{r}].resource.attributes")
            })?;
        }
        for (s, sp) in rp.scope_profiles.iter_mut().enumerate() {
            if let Some(scope) = sp.scope.as_mut() {
                resolver.key_values(&mut scope.attributes, &|| {
                    format!("resource_profiles[{r}].scope_profiles[{s}].scope.attributes")
                })?;
            }
        }
    }
    validate_profiles(data)?;
    fill_value_types(&mut data.resource_profiles);
    Ok(())
}

/// Unset value types read as their zero value; holding them as such keeps protobuf and
/// JSON (which always writes both, as Go does) equal after a round trip.
pub(crate) fn fill_value_types(resource_profiles: &mut [ResourceProfiles]) {
    for p in resource_profiles
        .iter_mut()
        .flat_map(|rp| rp.scope_profiles.iter_mut())
        .flat_map(|sp| sp.profiles.iter_mut())
    {
        p.sample_type.get_or_insert_default();
        p.period_type.get_or_insert_default();
    }
}

fn normalize_dictionary(d: &mut ProfilesDictionary) -> Result<(), ValidationError> {
    match d.string_table.first() {
        None => d.string_table.push(String::new()),
        Some(s) if s.is_empty() => {}
        Some(_) => {
            return Err(ValidationError::MissingZeroValue {
                table: "string_table",
                expected: "\"\"",
            });
        }
    }
    ensure_zero::<Mapping>(&mut d.mapping_table, "mapping_table", "Mapping{}")?;
    ensure_zero::<Location>(&mut d.location_table, "location_table", "Location{}")?;
    ensure_zero::<Function>(&mut d.function_table, "function_table", "Function{}")?;
    ensure_zero::<KeyValueAndUnit>(
        &mut d.attribute_table,
        "attribute_table",
        "KeyValueAndUnit{}",
    )?;
    ensure_zero::<Stack>(&mut d.stack_table, "stack_table", "Stack{}")?;
    // Both the empty Link{} (as the eBPF profiler sends) and the zero-filled one are valid
    // zero values; inside, the zero-filled one is used.
    match d.link_table.first() {
        None => d.link_table.push(zero_link()),
        Some(l)
            if l.trace_id.iter().chain(&l.span_id).all(|&b| b == 0)
                && matches!(l.trace_id.len(), 0 | 16)
                && matches!(l.span_id.len(), 0 | 8) =>
        {
            d.link_table[0] = zero_link();
        }
        Some(_) => {
            return Err(ValidationError::MissingZeroValue {
                table: "link_table",
                expected: "Link{} (empty or zero-filled ids)",
            });
        }
    }
    Ok(())
}

fn validate_dictionary(d: &ProfilesDictionary) -> Result<(), ValidationError> {
    let strings = d.string_table.len();
    for (i, m) in d.mapping_table.iter().enumerate() {
        check_index(m.filename_strindex, strings, "string_table", || {
            format!("dictionary.mapping_table[{i}].filename_strindex")
        })?;
        check_attribute_list(
            &m.attribute_indices,
            &d.attribute_table,
            MAX_ATTRIBUTES_PER_LIST,
            || format!("dictionary.mapping_table[{i}].attribute_indices"),
        )?;
        if m.memory_limit != 0 && m.memory_start > m.memory_limit {
            return Err(ValidationError::Invalid {
                field: format!("dictionary.mapping_table[{i}]"),
                problem: format!(
                    "memory_start {:#x} lies above memory_limit {:#x}",
                    m.memory_start, m.memory_limit
                ),
            });
        }
    }
    for (i, f) in d.function_table.iter().enumerate() {
        for (name, index) in [
            ("name_strindex", f.name_strindex),
            ("system_name_strindex", f.system_name_strindex),
            ("filename_strindex", f.filename_strindex),
        ] {
            check_index(index, strings, "string_table", || {
                format!("dictionary.function_table[{i}].{name}")
            })?;
        }
    }
    let mappings = d.mapping_table.len();
    let functions = d.function_table.len();
    for (i, l) in d.location_table.iter().enumerate() {
        check_index(l.mapping_index, mappings, "mapping_table", || {
            format!("dictionary.location_table[{i}].mapping_index")
        })?;
        for (n, line) in l.lines.iter().enumerate() {
            check_index(line.function_index, functions, "function_table", || {
                format!("dictionary.location_table[{i}].lines[{n}].function_index")
            })?;
        }
        check_attribute_list(
            &l.attribute_indices,
            &d.attribute_table,
            MAX_ATTRIBUTES_PER_LIST,
            || format!("dictionary.location_table[{i}].attribute_indices"),
        )?;
    }
    for (i, l) in d.link_table.iter().enumerate().skip(1) {
        if l.trace_id.len() != 16 || l.span_id.len() != 8 {
            return Err(ValidationError::Invalid {
                field: format!("dictionary.link_table[{i}]"),
                problem: format!(
                    "trace_id must be 16 bytes and span_id 8, got {} and {}",
                    l.trace_id.len(),
                    l.span_id.len()
                ),
            });
        }
    }
    for (i, kv) in d.attribute_table.iter().enumerate() {
        check_index(kv.key_strindex, strings, "string_table", || {
            format!("dictionary.attribute_table[{i}].key_strindex")
        })?;
        check_index(kv.unit_strindex, strings, "string_table", || {
            format!("dictionary.attribute_table[{i}].unit_strindex")
        })?;
    }
    let locations = d.location_table.len();
    for (i, s) in d.stack_table.iter().enumerate() {
        if s.location_indices.len() > MAX_STACK_DEPTH {
            return Err(ValidationError::Invalid {
                field: format!("dictionary.stack_table[{i}].location_indices"),
                problem: format!(
                    "has {} locations; at most {MAX_STACK_DEPTH} are accepted",
                    s.location_indices.len()
                ),
            });
        }
        check_indices(&s.location_indices, locations, "location_table", || {
            format!("dictionary.stack_table[{i}].location_indices")
        })?;
    }
    Ok(())
}

fn validate_profiles(data: &ProfilesData) -> Result<(), ValidationError> {
    let Some(d) = data.dictionary.as_ref() else {
        return Ok(());
    };
    validate_resource_profiles(d, &data.resource_profiles)
}

/// Checks data built inside the collector without copying it: every table starts with
/// its zero value and every index is in range (what [`validate_and_normalize`] ensures).
pub(crate) fn check_built(
    d: &ProfilesDictionary,
    resource_profiles: &[ResourceProfiles],
) -> Result<(), ValidationError> {
    fn starts_with_zero<T: Default + PartialEq>(
        table: &[T],
        name: &'static str,
    ) -> Result<(), ValidationError> {
        match table.first() {
            Some(first) if *first == T::default() => Ok(()),
            _ => Err(ValidationError::MissingZeroValue {
                table: name,
                expected: "its zero value",
            }),
        }
    }
    starts_with_zero(&d.string_table, "string_table")?;
    starts_with_zero(&d.mapping_table, "mapping_table")?;
    starts_with_zero(&d.location_table, "location_table")?;
    starts_with_zero(&d.function_table, "function_table")?;
    starts_with_zero(&d.attribute_table, "attribute_table")?;
    starts_with_zero(&d.stack_table, "stack_table")?;
    if d.link_table.first() != Some(&zero_link()) {
        return Err(ValidationError::MissingZeroValue {
            table: "link_table",
            expected: "the zero-filled Link",
        });
    }
    validate_dictionary(d)?;
    validate_resource_profiles(d, resource_profiles)
}

fn validate_resource_profiles(
    d: &ProfilesDictionary,
    resource_profiles: &[ResourceProfiles],
) -> Result<(), ValidationError> {
    let strings = d.string_table.len();
    let stacks = d.stack_table.len();
    let links = d.link_table.len();
    for (r, rp) in resource_profiles.iter().enumerate() {
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            for (p, profile) in sp.profiles.iter().enumerate() {
                let at = || format!("resource_profiles[{r}].scope_profiles[{s}].profiles[{p}]");
                for (name, vt) in [
                    ("sample_type", profile.sample_type),
                    ("period_type", profile.period_type),
                ] {
                    if let Some(vt) = vt {
                        check_index(vt.type_strindex, strings, "string_table", || {
                            format!("{}.{name}.type_strindex", at())
                        })?;
                        check_index(vt.unit_strindex, strings, "string_table", || {
                            format!("{}.{name}.unit_strindex", at())
                        })?;
                    }
                }
                check_attribute_list(
                    &profile.attribute_indices,
                    &d.attribute_table,
                    MAX_ATTRIBUTES_PER_LIST,
                    || format!("{}.attribute_indices", at()),
                )?;
                if !profile.profile_id.is_empty()
                    && (profile.profile_id.len() != 16
                        || profile.profile_id.iter().all(|&b| b == 0))
                {
                    return Err(ValidationError::Invalid {
                        field: format!("{}.profile_id", at()),
                        problem: "must be 16 bytes, not all zero".into(),
                    });
                }
                for (n, sample) in profile.samples.iter().enumerate() {
                    let here = || format!("{}.samples[{n}]", at());
                    check_index(sample.stack_index, stacks, "stack_table", || {
                        format!("{}.stack_index", here())
                    })?;
                    check_index(sample.link_index, links, "link_table", || {
                        format!("{}.link_index", here())
                    })?;
                    check_attribute_list(
                        &sample.attribute_indices,
                        &d.attribute_table,
                        MAX_LABELS_PER_SAMPLE,
                        || format!("{}.attribute_indices", here()),
                    )?;
                    let labels = label_count(&sample.attribute_indices, &d.attribute_table);
                    if labels > MAX_LABELS_PER_SAMPLE {
                        return Err(ValidationError::Invalid {
                            field: format!("{}.attribute_indices", here()),
                            problem: format!(
                                "makes {labels} labels (each array value is one); at most {MAX_LABELS_PER_SAMPLE} are accepted"
                            ),
                        });
                    }
                    let (values, times) = (sample.values.len(), sample.timestamps_unix_nano.len());
                    if values == 0 && times == 0 {
                        return Err(ValidationError::Invalid {
                            field: here(),
                            problem: "has neither values nor timestamps".into(),
                        });
                    }
                    if values != 0 && times != 0 && values != times {
                        return Err(ValidationError::Invalid {
                            field: here(),
                            problem: format!(
                                "has {values} values but {times} timestamps; they must pair up"
                            ),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdata::types::{Profile, ResourceProfiles, Sample, ScopeProfiles};

    fn one_sample(sample: Sample, dict: ProfilesDictionary) -> ProfilesData {
        ProfilesData {
            dictionary: Some(dict),
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples: vec![sample],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn absent_tables_get_their_zero_values() {
        let mut data = one_sample(
            Sample {
                values: vec![1],
                ..Default::default()
            },
            Default::default(),
        );
        validate_and_normalize(&mut data).expect("valid");
        let d = data.dictionary.expect("dictionary");
        assert_eq!(d.string_table, vec![String::new()]);
        assert_eq!(d.link_table, vec![zero_link()]);
        assert_eq!(d.stack_table.len(), 1);
    }

    #[test]
    fn out_of_range_stack_names_sample_table_and_index() {
        let mut data = one_sample(
            Sample {
                stack_index: 4,
                values: vec![1],
                ..Default::default()
            },
            Default::default(),
        );
        let err = validate_and_normalize(&mut data).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index: index 4 is out of range of stack_table (length 1)"
        );
    }

    #[test]
    fn missing_string_sentinel_is_rejected() {
        let dict = ProfilesDictionary {
            string_table: vec!["main".into()],
            ..Default::default()
        };
        let mut data = one_sample(
            Sample {
                values: vec![1],
                ..Default::default()
            },
            dict,
        );
        let err = validate_and_normalize(&mut data).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "dictionary.string_table[0] must be the zero value \"\""
        );
    }

    #[test]
    fn missing_function_sentinel_is_rejected() {
        let dict = ProfilesDictionary {
            function_table: vec![Function {
                name_strindex: 0,
                start_line: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut data = one_sample(
            Sample {
                values: vec![1],
                ..Default::default()
            },
            dict,
        );
        assert!(matches!(
            validate_and_normalize(&mut data),
            Err(ValidationError::MissingZeroValue {
                table: "function_table",
                ..
            })
        ));
    }

    #[test]
    fn empty_link_zero_value_is_accepted_and_made_zero_filled() {
        let dict = ProfilesDictionary {
            link_table: vec![Default::default()],
            ..Default::default()
        };
        let mut data = one_sample(
            Sample {
                values: vec![1],
                ..Default::default()
            },
            dict,
        );
        validate_and_normalize(&mut data).expect("valid");
        assert_eq!(data.dictionary.expect("d").link_table[0], zero_link());
    }

    #[test]
    fn sample_shapes_are_checked() {
        let mut empty = one_sample(Sample::default(), Default::default());
        assert!(
            validate_and_normalize(&mut empty)
                .expect_err("no values")
                .to_string()
                .ends_with("has neither values nor timestamps")
        );
        let mut unpaired = one_sample(
            Sample {
                values: vec![1, 2],
                timestamps_unix_nano: vec![5],
                ..Default::default()
            },
            Default::default(),
        );
        assert!(
            validate_and_normalize(&mut unpaired)
                .expect_err("unpaired")
                .to_string()
                .contains("2 values but 1 timestamps")
        );
        let mut timestamps_only = one_sample(
            Sample {
                timestamps_unix_nano: vec![5, 6],
                ..Default::default()
            },
            Default::default(),
        );
        validate_and_normalize(&mut timestamps_only).expect("timestamps only is valid");
    }

    #[test]
    fn nested_indices_are_checked() {
        let dict = ProfilesDictionary {
            location_table: vec![
                Location::default(),
                Location {
                    lines: vec![
                        Default::default(),
                        crate::pdata::types::Line {
                            function_index: 7,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut data = one_sample(
            Sample {
                values: vec![1],
                ..Default::default()
            },
            dict,
        );
        assert_eq!(
            validate_and_normalize(&mut data)
                .expect_err("bad function")
                .to_string(),
            "dictionary.location_table[1].lines[1].function_index: index 7 is out of range of function_table (length 1)"
        );
    }

    #[test]
    fn duplicate_keys_in_one_list_are_rejected() {
        let dict = ProfilesDictionary {
            string_table: vec!["".into(), "k".into()],
            attribute_table: vec![
                Default::default(),
                KeyValueAndUnit {
                    key_strindex: 1,
                    ..Default::default()
                },
                KeyValueAndUnit {
                    key_strindex: 1,
                    unit_strindex: 0,
                    value: None,
                },
            ],
            ..Default::default()
        };
        let mut data = one_sample(
            Sample {
                values: vec![1],
                attribute_indices: vec![1, 2],
                ..Default::default()
            },
            dict,
        );
        assert!(
            validate_and_normalize(&mut data)
                .expect_err("dup")
                .to_string()
                .contains("same key")
        );
    }

    #[test]
    fn duplicate_keys_on_a_location_are_rejected() {
        let dict = ProfilesDictionary {
            string_table: vec!["".into(), "k".into()],
            attribute_table: vec![
                Default::default(),
                KeyValueAndUnit {
                    key_strindex: 1,
                    ..Default::default()
                },
                KeyValueAndUnit {
                    key_strindex: 1,
                    unit_strindex: 1,
                    value: None,
                },
            ],
            location_table: vec![
                Location::default(),
                Location {
                    attribute_indices: vec![1, 2],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut data = one_sample(
            Sample {
                values: vec![1],
                ..Default::default()
            },
            dict,
        );
        let err = validate_and_normalize(&mut data).expect_err("dup");
        assert!(err.to_string().starts_with("dictionary.location_table[1].attribute_indices: attributes 1 and 2 have the same key"), "{err}");
    }

    #[test]
    fn negative_index_is_out_of_range() {
        let mut data = one_sample(
            Sample {
                values: vec![1],
                link_index: -1,
                ..Default::default()
            },
            Default::default(),
        );
        assert!(
            validate_and_normalize(&mut data)
                .expect_err("negative")
                .to_string()
                .contains("index -1 is out of range of link_table")
        );
    }
}
