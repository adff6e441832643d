//! The resource processor: applies its steps, in order, to every resource of a batch.

use async_trait::async_trait;
use profcol_core::component::{ProcessError, Processor};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::types::{AnyValue, KeyValue, Resource};

use crate::config::{SetMode, Source, Step};

pub struct ResourceProcessor {
    steps: Vec<Step>,
}

impl ResourceProcessor {
    pub fn new(steps: Vec<Step>) -> Self {
        ResourceProcessor { steps }
    }
}

fn find<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a KeyValue> {
    attributes.iter().find(|kv| kv.key == key)
}

/// The value a set step writes, or None when its `from_attribute` is absent (then the
/// step does nothing, as in otelcol).
fn resolve(source: &Source, attributes: &[KeyValue]) -> Option<Option<AnyValue>> {
    match source {
        Source::Value(v) => Some(Some(v.clone())),
        Source::FromAttribute(from) => find(attributes, from).map(|kv| kv.value.clone()),
    }
}

fn set(attributes: &mut Vec<KeyValue>, key: &str, value: Option<AnyValue>, mode: SetMode) {
    match attributes.iter_mut().find(|kv| kv.key == key) {
        Some(kv) if mode != SetMode::Insert => kv.value = value,
        None if mode != SetMode::Update => attributes.push(KeyValue {
            key: key.to_owned(),
            value,
            key_strindex: 0,
        }),
        _ => {}
    }
}

/// Applies every step to one resource's attributes.
pub(crate) fn apply(steps: &[Step], attributes: &mut Vec<KeyValue>) {
    for step in steps {
        match step {
            Step::Delete { key } => attributes.retain(|kv| kv.key != *key),
            Step::Set { key, source, mode } => {
                if let Some(value) = resolve(source, attributes) {
                    set(attributes, key, value, *mode);
                }
            }
        }
    }
}

#[async_trait]
impl Processor for ResourceProcessor {
    async fn process(
        &mut self,
        mut batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        if !batch.resource_profiles().is_empty() {
            // Copies the resource tree only if another holder (another pipeline) still
            // shares it; the dictionary is untouched and stays shared.
            for rp in batch.resource_profiles_mut() {
                let had_resource = rp.resource.is_some();
                let resource = rp.resource.get_or_insert_with(Resource::default);
                apply(&self.steps, &mut resource.attributes);
                // A resource made only to be written to stays absent if nothing was.
                if !had_resource && *resource == Resource::default() {
                    rp.resource = None;
                }
            }
        }
        out.push(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use profcol_core::config::{Compile, parse_typed, parse_yaml};
    use profcol_core::pdata::types::Value;

    fn s(v: &str) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        })
    }

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: s(value),
            key_strindex: 0,
        }
    }

    use profcol_core::testkit::batch_of_resources as batch;

    fn processor(yaml: &str) -> ResourceProcessor {
        let config: Config = parse_typed(&parse_yaml("test", yaml).expect("yaml")).expect("parses");
        ResourceProcessor::new(config.compile().expect("valid"))
    }

    async fn run(p: &mut ResourceProcessor, b: ProfileBatch) -> ProfileBatch {
        let mut out = Vec::new();
        p.process(b, &mut out).await.expect("process");
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    fn attrs(b: &ProfileBatch) -> Vec<Option<Vec<KeyValue>>> {
        b.resource_profiles()
            .iter()
            .map(|rp| rp.resource.as_ref().map(|r| r.attributes.clone()))
            .collect()
    }

    #[tokio::test]
    async fn insert_sets_only_absent_keys() {
        let mut p = processor("attributes: [{key: env, value: prod, action: insert}]");
        let out = run(
            &mut p,
            batch(vec![
                Some(vec![kv("env", "dev")]),
                Some(vec![kv("service.name", "cart")]),
                None,
            ]),
        )
        .await;
        assert_eq!(
            attrs(&out),
            vec![
                Some(vec![kv("env", "dev")]),
                Some(vec![kv("service.name", "cart"), kv("env", "prod")]),
                Some(vec![kv("env", "prod")]),
            ]
        );
    }

    #[tokio::test]
    async fn update_sets_only_present_keys() {
        let mut p = processor("attributes: [{key: env, value: prod, action: update}]");
        let out = run(
            &mut p,
            batch(vec![
                Some(vec![kv("a", "1"), kv("env", "dev")]),
                Some(vec![kv("a", "1")]),
                None,
            ]),
        )
        .await;
        assert_eq!(
            attrs(&out),
            vec![
                Some(vec![kv("a", "1"), kv("env", "prod")]),
                Some(vec![kv("a", "1")]),
                None,
            ]
        );
    }

    #[tokio::test]
    async fn upsert_sets_always_with_typed_values() {
        let mut p = processor(
            "attributes:
  - {key: env, value: prod, action: upsert}
  - {key: replicas, value: 3, action: upsert}
  - {key: ratio, value: 0.5, action: upsert}
  - {key: on, value: true, action: upsert}
",
        );
        let out = run(&mut p, batch(vec![Some(vec![kv("env", "dev")]), None])).await;
        let typed = |key: &str, v: Value| KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            key_strindex: 0,
        };
        let added = vec![
            typed("replicas", Value::IntValue(3)),
            typed("ratio", Value::DoubleValue(0.5)),
            typed("on", Value::BoolValue(true)),
        ];
        let mut first = vec![kv("env", "prod")];
        first.extend(added.clone());
        let mut second = vec![kv("env", "prod")];
        second.extend(added);
        assert_eq!(attrs(&out), vec![Some(first), Some(second)]);
    }

    #[tokio::test]
    async fn delete_removes_and_leaves_absent_resources_absent() {
        let mut p = processor("attributes: [{key: host.ip, action: delete}]");
        let out = run(
            &mut p,
            batch(vec![
                Some(vec![kv("host.ip", "10.0.0.1"), kv("host.name", "n1")]),
                Some(vec![kv("host.name", "n2")]),
                None,
            ]),
        )
        .await;
        assert_eq!(
            attrs(&out),
            vec![
                Some(vec![kv("host.name", "n1")]),
                Some(vec![kv("host.name", "n2")]),
                None,
            ]
        );
    }

    #[tokio::test]
    async fn from_attribute_copies_another_attribute() {
        let mut p = processor(
            "attributes:
  - {key: service.namespace, from_attribute: k8s.namespace.name, action: insert}
  - {key: owner, from_attribute: team, action: upsert}
",
        );
        let out = run(
            &mut p,
            batch(vec![
                Some(vec![kv("k8s.namespace.name", "shop"), kv("team", "a")]),
                Some(vec![
                    kv("k8s.namespace.name", "shop"),
                    kv("service.namespace", "x"),
                ]),
                Some(vec![kv("owner", "b")]),
            ]),
        )
        .await;
        assert_eq!(
            attrs(&out),
            vec![
                Some(vec![
                    kv("k8s.namespace.name", "shop"),
                    kv("team", "a"),
                    kv("service.namespace", "shop"),
                    kv("owner", "a"),
                ]),
                // Present already: insert leaves it; no team: upsert does nothing.
                Some(vec![
                    kv("k8s.namespace.name", "shop"),
                    kv("service.namespace", "x")
                ]),
                Some(vec![kv("owner", "b")]),
            ]
        );
    }

    #[tokio::test]
    async fn steps_apply_in_order() {
        let mut p = processor(
            "attributes:
  - {key: a, value: '1', action: upsert}
  - {key: b, from_attribute: a, action: insert}
  - {key: a, action: delete}
",
        );
        let out = run(&mut p, batch(vec![None])).await;
        assert_eq!(attrs(&out), vec![Some(vec![kv("b", "1")])]);
    }

    #[tokio::test]
    async fn a_clone_held_elsewhere_is_unchanged() {
        let mut p = processor("attributes: [{key: env, value: prod, action: upsert}]");
        let input = batch(vec![Some(vec![kv("env", "dev")])]);
        let held = input.clone();
        let out = run(&mut p, input).await;
        assert_eq!(attrs(&held), vec![Some(vec![kv("env", "dev")])]);
        assert_eq!(attrs(&out), vec![Some(vec![kv("env", "prod")])]);
        // The dictionary was not touched, so both still share it.
        assert!(std::ptr::eq(held.dictionary(), out.dictionary()));
        assert_eq!(out.sample_count(), 1);
        ProfileBatch::decode(&out.encode_to_vec()).expect("valid");
    }

    #[tokio::test]
    async fn an_unshared_batch_is_edited_in_place() {
        let mut p = processor("attributes: [{key: env, value: prod, action: upsert}]");
        let input = batch(vec![None]);
        let before = input.resource_profiles().as_ptr();
        let out = run(&mut p, input).await;
        assert_eq!(out.resource_profiles().as_ptr(), before);
    }

    #[tokio::test]
    async fn real_pprof_input_gets_attributes() {
        let path = format!(
            "{}/../../../testdata/pprof/go-cpu.pb.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).expect("testdata");
        let profile = profcol_core::pdata::codec::plain_pprof(
            &bytes,
            profcol_core::pdata::codec::DEFAULT_MAX_DECOMPRESSED_BYTES,
        )
        .expect("decodes");
        let input = profcol_core::pdata::pprof::pprof_to_batch(&profile, Default::default())
            .expect("translates");
        let mut p = processor("attributes: [{key: service.name, value: api, action: insert}]");
        let out = run(&mut p, input.clone()).await;
        assert_eq!(attrs(&out), vec![Some(vec![kv("service.name", "api")])]);
        assert_eq!(out.sample_count(), input.sample_count());
        let decoded = ProfileBatch::decode(&out.encode_to_vec()).expect("valid");
        assert_eq!(attrs(&decoded), attrs(&out));
    }
}
