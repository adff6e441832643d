//! The checks every component passes the same way, generated into each component crate
//! by [`component_conformance!`](crate::component_conformance): its factory's type name
//! and stability, its default config, `testdata/config.yaml` valid, and
//! `testdata/typo.yaml` refused at its misspelt key.

use std::path::Path;

use crate::component::{Kind, Registry, Stability};
use crate::config::{Value, parse_yaml};

/// One component's expectations.
pub struct Conformance {
    pub kind: Kind,
    pub type_name: &'static str,
    pub stability: Stability,
    /// The component's crate folder (`CARGO_MANIFEST_DIR`), which holds `testdata/`.
    pub dir: &'static str,
    /// Where the default config fails validation: keys a user must set (`endpoint`).
    pub default_errors: &'static [&'static str],
}

impl Conformance {
    /// A testdata file: the component's config, or a collector config holding it under
    /// its section and type name (for a crate with two factories).
    fn testdata(&self, name: &str) -> Value {
        let path = Path::new(self.dir).join("testdata").join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let value = parse_yaml(name, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match value
            .get(self.kind.section())
            .and_then(|section| section.get(self.type_name))
        {
            Some(config) => config.clone(),
            None => value,
        }
    }

    fn paths(errors: &[crate::config::ConfigError]) -> Vec<String> {
        errors.iter().map(|e| e.path.clone()).collect()
    }

    /// The registry lists the factory under its type name, kind and stability.
    pub fn names(&self, registry: &Registry) {
        assert_eq!(
            registry.list(),
            vec![(self.kind, self.type_name, self.stability)],
            "the factory's type name, kind or stability"
        );
    }

    /// No config at all is the default config: valid, or failing only at the keys a user
    /// must set.
    pub fn default_config(&self, registry: &Registry) {
        let parsed = registry.parse(self.kind, self.type_name, &Value::Null);
        let errors = parsed.err().unwrap_or_default();
        assert_eq!(
            Self::paths(&errors),
            self.default_errors,
            "the default config's errors: {errors:?}"
        );
    }

    /// `testdata/config.yaml`, a config using the component's keys, is valid.
    pub fn testdata_config(&self, registry: &Registry) {
        if let Err(errors) =
            registry.parse(self.kind, self.type_name, &self.testdata("config.yaml"))
        {
            panic!("testdata/config.yaml is invalid: {errors:?}");
        }
    }

    /// `testdata/typo.yaml`, with one misspelt key, fails there and only there, naming
    /// the key.
    pub fn typo(&self, registry: &Registry) {
        let errors = match registry.parse(self.kind, self.type_name, &self.testdata("typo.yaml")) {
            Ok(_) => panic!("testdata/typo.yaml was accepted"),
            Err(errors) => errors,
        };
        let [error] = errors.as_slice() else {
            panic!("testdata/typo.yaml should fail once, at its typo: {errors:?}");
        };
        let key = error.path.rsplit("::").next().unwrap_or_default();
        assert!(
            !key.is_empty() && error.message.starts_with(&format!("unknown field `{key}`")),
            "the typo's error names its key at its path: {error}"
        );
    }
}

/// The kind a [`component_conformance!`](crate::component_conformance) invocation names.
pub fn kind(name: &str) -> Kind {
    match name {
        "receiver" => Kind::Receiver,
        "processor" => Kind::Processor,
        "exporter" => Kind::Exporter,
        "extension" => Kind::Extension,
        other => panic!("component_conformance!: {other} is no component kind"),
    }
}
