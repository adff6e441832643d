use std::time::Duration;

use super::*;
use profcol_core::config::{Value, expand_env, parse_typed, parse_yaml};

fn load(path: &str) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(format!("{}/testdata/{path}", env!("CARGO_MANIFEST_DIR")))
        .expect("testdata");
    parse_typed(&parse_yaml(path, &text).expect("yaml"))
}

fn parse(text: &str) -> Config {
    parse_typed(&parse_yaml("test", text).expect("yaml")).expect("parses")
}

fn errors(text: &str) -> Vec<String> {
    parse(text)
        .validate()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn defaults_are_contribs() {
    let c = parse_typed::<Config>(&Value::Null).expect("null");
    assert_eq!(c, Config::default());
    assert_eq!(c.auth_type, "serviceAccount");
    assert!(!c.passthrough && !c.wait_for_metadata);
    assert_eq!(c.wait_for_metadata_timeout, Duration::from_secs(10));
    assert_eq!(
        c.extract.metadata,
        [
            "k8s.namespace.name",
            "k8s.pod.name",
            "k8s.pod.uid",
            "k8s.pod.start_time",
            "k8s.deployment.name",
            "k8s.node.name"
        ]
    );
    let names: Vec<&str> = c.exclude.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["jaeger-agent", "jaeger-collector"]);
    let s = c.settings().expect("valid");
    assert_eq!(s.auth_type, AuthType::ServiceAccount);
    assert_eq!(s.rules, default_rules());
    assert!(s.metadata.has(Metadata::DeploymentName));
    assert!(!s.metadata.has(Metadata::ServiceName));
    assert_eq!(parse("{}"), Config::default());
}

#[test]
fn testdata_config_parses_and_compiles() {
    let c = load("config.yaml").expect("valid");
    assert!(c.validate().is_empty(), "{:?}", c.validate());
    assert_eq!(c.wait_for_metadata_timeout, Duration::from_secs(30));
    let s = c.settings().expect("settings");
    assert_eq!(s.auth_type, AuthType::KubeConfig);
    assert_eq!(s.namespace.as_deref(), Some("shop"));
    assert_eq!(s.field_selector, ["status.phase=Running"]);
    assert_eq!(s.label_selector, ["tier!=batch", "profiled"]);
    assert_eq!(s.rules.len(), 3);
    assert_eq!(
        s.rules[1].sources,
        [
            Source::Attribute("k8s.pod.name".into()),
            Source::Attribute("k8s.namespace.name".into())
        ]
    );
    assert_eq!(s.rules[2].sources, [Source::Connection]);
    assert!(s.otel_annotations && s.deployment_name_from_replicaset);
    assert_eq!(s.labels[0].tag_for("team").as_deref(), Some("team"));
    assert_eq!(
        s.labels[1].tag_for("app.kubernetes.io/name").as_deref(),
        Some("app.label.name")
    );
    assert_eq!(s.labels[1].tag_for("xapp.kubernetes.io/name"), None);
    assert_eq!(s.annotations[0].from, FieldFrom::Namespace);
    assert_eq!(
        s.annotations[0].tag_for("owner").as_deref(),
        Some("k8s.namespace.annotations.owner")
    );
    assert!(s.exclude[0].is_match("istio-proxy-1"));
    let env = |k: &str| (k == "K8S_NODE_NAME").then(|| "node-7".to_owned());
    assert_eq!(c.node_name(&env), Ok(Some("node-7".to_owned())));
}

#[test]
fn every_error_is_reported_with_its_path() {
    let got = errors(
        r#"
auth_type: token
context: prod
extract:
  metadata: [k8s.pod.name, k8s.pod.labels]
  labels:
    - key_regex: "("
    - key: a
      key_regex: b
    - {}
    - key: team
      from: service
filter:
  node_from_env_var: "K8S-NODE"
  fields:
    - key: spec.nodeName
      op: exists
  labels:
    - value: x
pod_association:
  - sources:
      - from: resource_attribute
        name: container.id
      - from: resource_attribute
        name: k8s.pod.uid
      - from: resource_attribute
        name: k8s.pod.ip
      - from: resource_attribute
        name: ip
      - from: connection
  - sources: []
  - sources:
      - from: header
  - sources:
      - from: resource_attribute
  - sources:
      - from: resource_attribute
        name: k8s.namespace.name
exclude:
  pods:
    - name: "["
"#,
    );
    let want = [
        "auth_type: unknown auth_type \"token\"; expected serviceAccount, kubeConfig or none",
        "context: only used with auth_type: kubeConfig",
        "extract::metadata[1]: unknown metadata \"k8s.pod.labels\"; expected one of",
        "extract::labels[0]::key_regex: not a valid regular expression",
        "extract::labels[1]: set key or key_regex, not both",
        "extract::labels[2]: set key or key_regex",
        "extract::labels[3]::from: unknown source \"service\"",
        "filter::fields[0]::op: unknown op \"exists\"; expected equals or not-equals",
        "filter::labels[0]::key: key is required",
        "filter::node_from_env_var: \"K8S-NODE\" is not an environment variable name",
        "pod_association[0]::sources: 5 sources; a rule may have at most 4",
        "pod_association[1]::sources: a rule needs at least one source",
        "pod_association[2]::sources[0]::from: unknown source \"header\"",
        "pod_association[3]::sources[0]::name: a resource_attribute source needs a name",
        "pod_association[4]::sources: a rule needs a source that finds a pod by itself",
        "exclude::pods[0]::name: not a valid regular expression",
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g.starts_with(w), "{g:?} should start with {w:?}");
    }
}

#[test]
fn kube_config_path_needs_kube_config_auth() {
    assert_eq!(
        errors("kube_config_path: /x"),
        ["kube_config_path: only used with auth_type: kubeConfig"]
    );
    assert!(errors("auth_type: kubeConfig\nkube_config_path: /x\ncontext: c").is_empty());
    assert!(errors("auth_type: none").is_empty());
}

#[test]
fn wait_timeout_must_be_positive_when_waiting() {
    assert_eq!(
        errors("wait_for_metadata: true\nwait_for_metadata_timeout: 0"),
        ["wait_for_metadata_timeout: must be more than 0 when wait_for_metadata is on"]
    );
    assert!(errors("wait_for_metadata_timeout: 0").is_empty());
    let e =
        parse_typed::<Config>(&parse_yaml("t", "wait_for_metadata_timeout: soon").expect("yaml"))
            .expect_err("bad duration");
    assert_eq!(e.path, "wait_for_metadata_timeout");
}

#[test]
fn four_sources_are_allowed() {
    let c = parse(
        "pod_association:\n  - sources:\n      - {from: resource_attribute, name: k8s.pod.name}\n      - {from: resource_attribute, name: k8s.namespace.name}\n      - {from: resource_attribute, name: k8s.node.name}\n      - {from: connection}\n",
    );
    assert_eq!(
        c.settings().expect("valid").rules[0].sources.len(),
        MAX_SOURCES_PER_RULE
    );
}

#[test]
fn node_comes_from_the_env_var_which_must_be_set() {
    let c = parse("filter:\n  node: fixed\n  node_from_env_var: NODE\n");
    let set = |k: &str| (k == "NODE").then(|| " node-b ".to_owned());
    assert_eq!(c.node_name(&set), Ok(Some("node-b".into())));
    let unset = |_: &str| None;
    let e = c.node_name(&unset).expect_err("unset");
    assert!(e.contains("names NODE, which is not set"), "{e}");
    for empty in ["", "  "] {
        let blank = |_: &str| Some(empty.to_owned());
        let e = c.node_name(&blank).expect_err("empty");
        assert!(e.contains("names NODE, which is set but empty"), "{e}");
        assert!(!e.contains("not set"), "{e}");
    }
    assert_eq!(
        parse("filter:\n  node: fixed\n").node_name(&unset),
        Ok(Some("fixed".into()))
    );
    assert_eq!(Config::default().node_name(&unset), Ok(None));
}

/// `$$1` in a config file is `$1` once env expansion ran, which the regex expands.
#[test]
fn dollar_dollar_capture_references_survive_env_expansion() {
    let mut v = parse_yaml(
        "t",
        "extract:\n  labels:\n    - tag_name: $$1\n      key_regex: (.*)\n    - tag_name: k8s.pod.label.$${name}\n      key_regex: (?P<name>app)\n    - key_regex: tier|team\n",
    )
    .expect("yaml");
    let errs = expand_env(&mut v, &|_| None);
    assert!(errs.is_empty(), "{errs:?}");
    let s = parse_typed::<Config>(&v)
        .expect("parses")
        .settings()
        .expect("valid");
    assert_eq!(s.labels[0].tag_for("team").as_deref(), Some("team"));
    assert_eq!(
        s.labels[1].tag_for("app").as_deref(),
        Some("k8s.pod.label.app")
    );
    // Anchored: `app` alone, not `apps`.
    assert_eq!(s.labels[1].tag_for("apps"), None);
    // No tag_name: contrib's default name with the whole key.
    assert_eq!(
        s.labels[2].tag_for("tier").as_deref(),
        Some("k8s.pod.labels.tier")
    );
    assert_eq!(s.labels[2].tag_for("tiers"), None);
}
