//! Several `--config` files: later files override earlier keys, mappings merge deeply.

use serde_yaml_ng::Value;

/// Merges `over` into `base`: mappings key by key (recursively), anything else replaced.
pub fn merge_values(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge_values(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_files_override_keys_and_keep_the_rest() {
        let mut a: Value = serde_yaml_ng::from_str("exporters:\n  otlp:\n    endpoint: a:4317\n    compression: gzip\nreceivers: {otlp: {}}\n").expect("a");
        let b: Value =
            serde_yaml_ng::from_str("exporters:\n  otlp:\n    endpoint: b:4317\nservice: {}\n")
                .expect("b");
        merge_values(&mut a, b);
        let want: Value = serde_yaml_ng::from_str("exporters:\n  otlp:\n    endpoint: b:4317\n    compression: gzip\nreceivers: {otlp: {}}\nservice: {}\n").expect("want");
        assert_eq!(a, want);
    }
}
