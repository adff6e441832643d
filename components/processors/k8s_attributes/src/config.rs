//! The k8s_attributes processor's config: contrib's keys, meanings and defaults.

use std::time::Duration;

use profcol_core::config::{Compile, ConfigError, duration};
use regex::Regex;
use serde::Deserialize;

use crate::vocabulary::Metadata;

/// The most sources one association rule may have (as contrib allows).
pub const MAX_SOURCES_PER_RULE: usize = 4;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `serviceAccount` (in-cluster), `kubeConfig` (a kubeconfig file) or `none`.
    pub auth_type: String,
    /// With `kubeConfig`: the file; empty means `$KUBECONFIG` or `~/.kube/config`.
    pub kube_config_path: String,
    /// With `kubeConfig`: the context to use; empty means the file's current context.
    pub context: String,
    /// No API access: only `k8s.pod.ip` from the connection's peer address.
    pub passthrough: bool,
    /// Start waits until the caches are filled (and fails after the timeout).
    pub wait_for_metadata: bool,
    #[serde(with = "duration")]
    pub wait_for_metadata_timeout: Duration,
    pub extract: ExtractConfig,
    pub filter: FilterConfig,
    pub pod_association: Vec<AssociationRuleConfig>,
    pub exclude: ExcludeConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            auth_type: "serviceAccount".to_owned(),
            kube_config_path: String::new(),
            context: String::new(),
            passthrough: false,
            wait_for_metadata: false,
            wait_for_metadata_timeout: Duration::from_secs(10),
            extract: ExtractConfig::default(),
            filter: FilterConfig::default(),
            pod_association: Vec::new(),
            exclude: ExcludeConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtractConfig {
    pub metadata: Vec<String>,
    pub labels: Vec<FieldExtractConfig>,
    pub annotations: Vec<FieldExtractConfig>,
    /// Pod annotations `resource.opentelemetry.io/<attr>` become attribute `<attr>`.
    pub otel_annotations: bool,
    /// The deployment name is the ReplicaSet's name less its `pod-template-hash`; no
    /// ReplicaSet watch is needed then.
    pub deployment_name_from_replicaset: bool,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        ExtractConfig {
            metadata: Metadata::DEFAULTS
                .iter()
                .map(|m| m.as_str().to_owned())
                .collect(),
            labels: Vec::new(),
            annotations: Vec::new(),
            otel_annotations: false,
            deployment_name_from_replicaset: false,
        }
    }
}

/// One label or annotation rule.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FieldExtractConfig {
    /// The attribute to write; with `key_regex`, `$1` / `${name}` refer to its groups.
    pub tag_name: String,
    /// An exact label / annotation key.
    pub key: String,
    /// A regular expression matched against the whole key.
    pub key_regex: String,
    /// `pod` (default), `namespace`, `node`, `deployment`, `statefulset`, `daemonset`, `job`.
    pub from: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// Only pods on this node (`spec.nodeName=<node>`).
    pub node: String,
    /// The environment variable holding the node name (the downward API's
    /// `spec.nodeName`); it wins over `node`.
    pub node_from_env_var: String,
    /// Only pods in this namespace.
    pub namespace: String,
    pub fields: Vec<SelectorConfig>,
    pub labels: Vec<SelectorConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelectorConfig {
    pub key: String,
    pub value: String,
    /// `equals` (default) or `not-equals`; for labels also `exists`, `does-not-exist`.
    pub op: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssociationRuleConfig {
    pub sources: Vec<AssociationSourceConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssociationSourceConfig {
    /// `resource_attribute` or `connection`.
    pub from: String,
    /// The attribute's name, for `resource_attribute`.
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExcludeConfig {
    pub pods: Vec<ExcludePodConfig>,
}

impl Default for ExcludeConfig {
    fn default() -> Self {
        ExcludeConfig {
            pods: ["jaeger-agent", "jaeger-collector"]
                .iter()
                .map(|n| ExcludePodConfig {
                    name: (*n).to_owned(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExcludePodConfig {
    /// A regular expression on the pod's name.
    pub name: String,
}

/// How profcol reaches the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthType {
    ServiceAccount,
    KubeConfig,
    None,
}

impl AuthType {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "serviceAccount" => Some(AuthType::ServiceAccount),
            "kubeConfig" => Some(AuthType::KubeConfig),
            "none" => Some(AuthType::None),
            _ => None,
        }
    }
}

/// Where a label or annotation is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldFrom {
    Pod,
    Namespace,
    Node,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
}

impl FieldFrom {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "pod" => Some(FieldFrom::Pod),
            "namespace" => Some(FieldFrom::Namespace),
            "node" => Some(FieldFrom::Node),
            "deployment" => Some(FieldFrom::Deployment),
            "statefulset" => Some(FieldFrom::StatefulSet),
            "daemonset" => Some(FieldFrom::DaemonSet),
            "job" => Some(FieldFrom::Job),
            _ => None,
        }
    }

    /// The word in default tag names: `k8s.<word>.labels.<key>`.
    pub(crate) fn word(self) -> &'static str {
        match self {
            FieldFrom::Pod => "pod",
            FieldFrom::Namespace => "namespace",
            FieldFrom::Node => "node",
            FieldFrom::Deployment => "deployment",
            FieldFrom::StatefulSet => "statefulset",
            FieldFrom::DaemonSet => "daemonset",
            FieldFrom::Job => "job",
        }
    }
}

/// Labels or annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    Label,
    Annotation,
}

impl FieldKind {
    fn plural(self) -> &'static str {
        match self {
            FieldKind::Label => "labels",
            FieldKind::Annotation => "annotations",
        }
    }
}

/// A compiled label / annotation rule.
#[derive(Debug, Clone)]
pub struct FieldRule {
    pub kind: FieldKind,
    pub from: FieldFrom,
    pub matcher: KeyMatcher,
}

#[derive(Debug, Clone)]
pub enum KeyMatcher {
    /// An exact key, written to this attribute.
    Key { key: String, tag: String },
    /// Keys matching the (anchored) expression; the tag is expanded with its captures.
    Regex { regex: Regex, tag: String },
}

impl FieldRule {
    /// The attribute this rule writes for `key`, if the key is one of its own.
    pub fn tag_for(&self, key: &str) -> Option<String> {
        match &self.matcher {
            KeyMatcher::Key { key: k, tag } => (k == key).then(|| tag.clone()),
            KeyMatcher::Regex { regex, tag } => {
                let captures = regex.captures(key)?;
                let mut out = String::new();
                captures.expand(tag, &mut out);
                Some(out)
            }
        }
    }
}

/// One source of an association rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The peer address the receiver saw.
    Connection,
    /// A resource attribute, by name.
    Attribute(String),
}

/// An association rule: every source must be present for it to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub sources: Vec<Source>,
}

/// The attribute names that find a pod by themselves (through an index).
pub const INDEXED_ATTRIBUTES: [&str; 6] = [
    "container.id",
    "k8s.pod.uid",
    "k8s.pod.ip",
    "ip",
    "host.name",
    "k8s.pod.name",
];

/// The rules used when none are configured: the pod's IP from `k8s.pod.ip`, the legacy
/// `ip`, the connection, then `host.name` when it is an IP.
pub fn default_rules() -> Vec<Rule> {
    vec![
        Rule {
            sources: vec![Source::Attribute("k8s.pod.ip".into())],
        },
        Rule {
            sources: vec![Source::Attribute("ip".into())],
        },
        Rule {
            sources: vec![Source::Connection],
        },
        Rule {
            sources: vec![Source::Attribute("host.name".into())],
        },
    ]
}

/// A label / field selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorOp {
    Equals,
    NotEquals,
    Exists,
    DoesNotExist,
}

/// Everything the processor needs, checked and compiled once.
#[derive(Debug, Clone)]
pub struct Settings {
    pub auth_type: AuthType,
    pub passthrough: bool,
    pub metadata: MetadataSet,
    pub labels: Vec<FieldRule>,
    pub annotations: Vec<FieldRule>,
    pub otel_annotations: bool,
    pub deployment_name_from_replicaset: bool,
    pub rules: Vec<Rule>,
    pub exclude: Vec<Regex>,
    pub namespace: Option<String>,
    /// Field selector terms besides the node (`key=value`, `key!=value`).
    pub field_selector: Vec<String>,
    /// Label selector terms (`k=v`, `k!=v`, `k`, `!k`).
    pub label_selector: Vec<String>,
}

/// The requested `extract.metadata` names, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetadataSet(u64);

impl MetadataSet {
    pub fn has(self, m: Metadata) -> bool {
        self.0 & (1 << m as u64) != 0
    }

    pub fn insert(&mut self, m: Metadata) {
        self.0 |= 1 << m as u64;
    }

    pub fn any(self, ms: &[Metadata]) -> bool {
        ms.iter().any(|m| self.has(*m))
    }

    pub fn of(ms: &[Metadata]) -> Self {
        let mut s = MetadataSet::default();
        for m in ms {
            s.insert(*m);
        }
        s
    }
}

impl Settings {
    /// Whether any rule reads labels or annotations from `from`.
    pub fn fields_from(&self, from: FieldFrom) -> bool {
        self.labels
            .iter()
            .chain(&self.annotations)
            .any(|r| r.from == from)
    }
}

fn compile_field_rules(
    rules: &[FieldExtractConfig],
    kind: FieldKind,
    path: &str,
    errors: &mut Vec<ConfigError>,
) -> Vec<FieldRule> {
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let here = format!("extract::{path}[{i}]");
        let Some(from) = FieldFrom::parse(&r.from) else {
            errors.push(ConfigError::new(
                format!("{here}::from"),
                format!(
                    "unknown source {:?}; expected pod, namespace, node, deployment, statefulset, daemonset or job",
                    r.from
                ),
            ));
            continue;
        };
        let default_tag = |key: &str| format!("k8s.{}.{}.{key}", from.word(), kind.plural());
        let matcher = match (r.key.is_empty(), r.key_regex.is_empty()) {
            (false, true) => KeyMatcher::Key {
                key: r.key.clone(),
                tag: if r.tag_name.is_empty() {
                    default_tag(&r.key)
                } else {
                    r.tag_name.clone()
                },
            },
            (true, false) => match Regex::new(&format!("^(?:{})$", r.key_regex)) {
                Ok(regex) => KeyMatcher::Regex {
                    regex,
                    tag: if r.tag_name.is_empty() {
                        default_tag("${0}")
                    } else {
                        r.tag_name.clone()
                    },
                },
                Err(e) => {
                    errors.push(ConfigError::new(
                        format!("{here}::key_regex"),
                        format!("not a valid regular expression: {e}"),
                    ));
                    continue;
                }
            },
            (false, false) => {
                errors.push(ConfigError::new(here, "set key or key_regex, not both"));
                continue;
            }
            (true, true) => {
                errors.push(ConfigError::new(here, "set key or key_regex"));
                continue;
            }
        };
        out.push(FieldRule {
            kind,
            from,
            matcher,
        });
    }
    out
}

fn compile_selectors(
    terms: &[SelectorConfig],
    path: &str,
    labels: bool,
    errors: &mut Vec<ConfigError>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        let here = format!("filter::{path}[{i}]");
        if t.key.is_empty() {
            errors.push(ConfigError::new(format!("{here}::key"), "key is required"));
            continue;
        }
        let op = match t.op.as_str() {
            "" | "equals" => SelectorOp::Equals,
            "not-equals" => SelectorOp::NotEquals,
            "exists" if labels => SelectorOp::Exists,
            "does-not-exist" if labels => SelectorOp::DoesNotExist,
            other => {
                let expected = if labels {
                    "equals, not-equals, exists or does-not-exist"
                } else {
                    "equals or not-equals"
                };
                errors.push(ConfigError::new(
                    format!("{here}::op"),
                    format!("unknown op {other:?}; expected {expected}"),
                ));
                continue;
            }
        };
        out.push(match op {
            SelectorOp::Equals => format!("{}={}", t.key, t.value),
            SelectorOp::NotEquals => format!("{}!={}", t.key, t.value),
            SelectorOp::Exists => t.key.clone(),
            SelectorOp::DoesNotExist => format!("!{}", t.key),
        });
    }
    out
}

fn compile_rules(rules: &[AssociationRuleConfig], errors: &mut Vec<ConfigError>) -> Vec<Rule> {
    if rules.is_empty() {
        return default_rules();
    }
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let here = format!("pod_association[{i}]");
        if r.sources.is_empty() {
            errors.push(ConfigError::new(
                format!("{here}::sources"),
                "a rule needs at least one source",
            ));
            continue;
        }
        if r.sources.len() > MAX_SOURCES_PER_RULE {
            errors.push(ConfigError::new(
                format!("{here}::sources"),
                format!(
                    "{} sources; a rule may have at most {MAX_SOURCES_PER_RULE}",
                    r.sources.len()
                ),
            ));
            continue;
        }
        let mut sources = Vec::new();
        let mut ok = true;
        for (j, s) in r.sources.iter().enumerate() {
            let at = format!("{here}::sources[{j}]");
            match s.from.as_str() {
                "connection" => sources.push(Source::Connection),
                "resource_attribute" if !s.name.is_empty() => {
                    sources.push(Source::Attribute(s.name.clone()));
                }
                "resource_attribute" => {
                    errors.push(ConfigError::new(
                        format!("{at}::name"),
                        "a resource_attribute source needs a name",
                    ));
                    ok = false;
                }
                other => {
                    errors.push(ConfigError::new(
                        format!("{at}::from"),
                        format!(
                            "unknown source {other:?}; expected resource_attribute or connection"
                        ),
                    ));
                    ok = false;
                }
            }
        }
        if !ok {
            continue;
        }
        let indexed = sources.iter().any(|s| match s {
            Source::Connection => true,
            Source::Attribute(name) => INDEXED_ATTRIBUTES.contains(&name.as_str()),
        });
        if !indexed {
            errors.push(ConfigError::new(
                format!("{here}::sources"),
                format!(
                    "a rule needs a source that finds a pod by itself: connection or one of {}",
                    INDEXED_ATTRIBUTES.join(", ")
                ),
            ));
            continue;
        }
        out.push(Rule { sources });
    }
    out
}

/// A k8s_attributes config compiles into the [`Settings`] the processor uses (rules,
/// regexes, selectors), or every error at once.
impl Compile for Config {
    type Compiled = Settings;

    fn compile(&self) -> Result<Settings, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let auth_type = AuthType::parse(&self.auth_type);
        if auth_type.is_none() {
            errors.push(ConfigError::new(
                "auth_type",
                format!(
                    "unknown auth_type {:?}; expected serviceAccount, kubeConfig or none",
                    self.auth_type
                ),
            ));
        }
        if auth_type != Some(AuthType::KubeConfig) {
            for (key, value) in [
                ("kube_config_path", &self.kube_config_path),
                ("context", &self.context),
            ] {
                if !value.is_empty() {
                    errors.push(ConfigError::new(
                        key,
                        "only used with auth_type: kubeConfig",
                    ));
                }
            }
        }
        if self.wait_for_metadata && self.wait_for_metadata_timeout.is_zero() {
            errors.push(ConfigError::new(
                "wait_for_metadata_timeout",
                "must be more than 0 when wait_for_metadata is on",
            ));
        }
        let mut metadata = MetadataSet::default();
        for (i, name) in self.extract.metadata.iter().enumerate() {
            match Metadata::parse(name) {
                Some(m) => metadata.insert(m),
                None => errors.push(ConfigError::new(
                    format!("extract::metadata[{i}]"),
                    format!(
                        "unknown metadata {name:?}; expected one of {}",
                        Metadata::ALL
                            .iter()
                            .map(|m| m.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        let labels = compile_field_rules(
            &self.extract.labels,
            FieldKind::Label,
            "labels",
            &mut errors,
        );
        let annotations = compile_field_rules(
            &self.extract.annotations,
            FieldKind::Annotation,
            "annotations",
            &mut errors,
        );
        let field_selector = compile_selectors(&self.filter.fields, "fields", false, &mut errors);
        let label_selector = compile_selectors(&self.filter.labels, "labels", true, &mut errors);
        if !self.filter.node_from_env_var.is_empty()
            && !self
                .filter
                .node_from_env_var
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            errors.push(ConfigError::new(
                "filter::node_from_env_var",
                format!(
                    "{:?} is not an environment variable name",
                    self.filter.node_from_env_var
                ),
            ));
        }
        let rules = compile_rules(&self.pod_association, &mut errors);
        let mut exclude = Vec::new();
        for (i, p) in self.exclude.pods.iter().enumerate() {
            match Regex::new(&p.name) {
                Ok(r) if !p.name.is_empty() => exclude.push(r),
                Ok(_) => errors.push(ConfigError::new(
                    format!("exclude::pods[{i}]::name"),
                    "name is required",
                )),
                Err(e) => errors.push(ConfigError::new(
                    format!("exclude::pods[{i}]::name"),
                    format!("not a valid regular expression: {e}"),
                )),
            }
        }
        match (auth_type, errors.is_empty()) {
            (Some(auth_type), true) => Ok(Settings {
                auth_type,
                passthrough: self.passthrough,
                metadata,
                labels,
                annotations,
                otel_annotations: self.extract.otel_annotations,
                deployment_name_from_replicaset: self.extract.deployment_name_from_replicaset,
                rules,
                exclude,
                namespace: (!self.filter.namespace.is_empty())
                    .then(|| self.filter.namespace.clone()),
                field_selector,
                label_selector,
            }),
            _ => Err(errors),
        }
    }
}

impl Config {
    /// The node whose pods are watched: `node_from_env_var`'s value, else `node`. A
    /// variable that is named but unset or empty is an error (each said as it is): watching every pod in the cluster
    /// from each node by accident is what it would otherwise mean.
    pub fn node_name(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, String> {
        let var = &self.filter.node_from_env_var;
        if !var.is_empty() {
            return match env(var) {
                Some(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_owned())),
                Some(_) => Err(format!(
                    "filter.node_from_env_var names {var}, which is set but empty; set it to the node's name (downward API spec.nodeName)"
                )),
                None => Err(format!(
                    "filter.node_from_env_var names {var}, which is not set; set it to the node's name (downward API spec.nodeName)"
                )),
            };
        }
        Ok((!self.filter.node.is_empty()).then(|| self.filter.node.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use profcol_core::config::{Value, expand_env, parse_typed, parse_yaml};
    use profcol_core::testkit::config_errors;

    fn load(path: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), path)
    }

    fn parse(text: &str) -> Config {
        parse_typed(&parse_yaml("test", text).expect("yaml")).expect("parses")
    }

    fn errors(text: &str) -> Vec<String> {
        config_errors(&parse(text))
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
        let s = c.compile().expect("valid");
        assert_eq!(s.auth_type, AuthType::ServiceAccount);
        assert_eq!(s.rules, default_rules());
        assert!(s.metadata.has(Metadata::DeploymentName));
        assert!(!s.metadata.has(Metadata::ServiceName));
        assert_eq!(parse("{}"), Config::default());
    }

    #[test]
    fn testdata_config_parses_and_compiles() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(c.wait_for_metadata_timeout, Duration::from_secs(30));
        let s = c.compile().expect("settings");
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
        let e = parse_typed::<Config>(
            &parse_yaml("t", "wait_for_metadata_timeout: soon").expect("yaml"),
        )
        .expect_err("bad duration");
        assert_eq!(e.path, "wait_for_metadata_timeout");
    }

    #[test]
    fn four_sources_are_allowed() {
        let c = parse(
            "pod_association:\n  - sources:\n      - {from: resource_attribute, name: k8s.pod.name}\n      - {from: resource_attribute, name: k8s.namespace.name}\n      - {from: resource_attribute, name: k8s.node.name}\n      - {from: connection}\n",
        );
        assert_eq!(
            c.compile().expect("valid").rules[0].sources.len(),
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
            .compile()
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
}
