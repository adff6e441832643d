//! From YAML text to a checked collector config: files merged, env expanded, envelope
//! parsed, every component config parsed by its factory, and the pipelines checked
//! against what is defined. Every error is reported at once, in file order.

use serde_yaml_ng::{Mapping, Value};

use crate::component::{ComponentId, Kind, ParsedConfig, PipelineId, Registry};
use crate::config::{
    ConfigError, ConfigErrors, PipelineConfig, RawConfig, TelemetryConfig, expand_env,
    merge_values, parse_yaml,
};

/// One pipeline, with its components resolved to ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    pub id: PipelineId,
    pub receivers: Vec<ComponentId>,
    pub processors: Vec<ComponentId>,
    pub exporters: Vec<ComponentId>,
}

/// A config that parsed, passed every component's check and hangs together.
#[derive(Clone)]
pub struct CollectorConfig {
    pub receivers: Vec<(ComponentId, ParsedConfig)>,
    pub processors: Vec<(ComponentId, ParsedConfig)>,
    pub exporters: Vec<(ComponentId, ParsedConfig)>,
    pub extensions: Vec<(ComponentId, ParsedConfig)>,
    /// Extensions to run (`service.extensions`), in order.
    pub service_extensions: Vec<ComponentId>,
    pub pipelines: Vec<Pipeline>,
    pub telemetry: TelemetryConfig,
    /// Things worth saying that do not stop the collector (components defined but unused).
    pub warnings: Vec<String>,
}

impl CollectorConfig {
    pub(crate) fn config_of(&self, kind: Kind, id: &ComponentId) -> Option<&ParsedConfig> {
        let list = match kind {
            Kind::Receiver => &self.receivers,
            Kind::Processor => &self.processors,
            Kind::Exporter => &self.exporters,
            Kind::Extension => &self.extensions,
        };
        list.iter().find(|(i, _)| i == id).map(|(_, c)| c)
    }
}

fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
    }
}

/// Loads a config from (name, text) sources; later sources override earlier keys.
pub fn load(
    sources: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
    registry: &Registry,
) -> Result<CollectorConfig, ConfigErrors> {
    let mut errors = Vec::new();
    let mut merged = Value::Mapping(Mapping::new());
    for (name, text) in sources {
        match parse_yaml(name, text) {
            Ok(Value::Null) => {}
            Ok(v @ Value::Mapping(_)) => merge_values(&mut merged, v),
            Ok(_) => errors.push(ConfigError::new(
                name.clone(),
                "the top level must be a mapping",
            )),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    errors.extend(expand_env(&mut merged, env));
    // A mistake in the envelope (a misspelt section) still lets the components be
    // checked, so that every mistake is reported at once.
    let (raw, envelope_errors) = crate::config::parse_typed_lenient::<RawConfig>(&merged);
    let envelope_failed = !envelope_errors.is_empty();
    errors.extend(envelope_errors);
    let Some(raw) = raw else {
        return Err(ConfigErrors(errors));
    };
    let receivers = parse_section(registry, Kind::Receiver, &raw.receivers, &mut errors);
    let processors = parse_section(registry, Kind::Processor, &raw.processors, &mut errors);
    let exporters = parse_section(registry, Kind::Exporter, &raw.exporters, &mut errors);
    let extensions = parse_section(registry, Kind::Extension, &raw.extensions, &mut errors);
    if envelope_failed {
        // What the service section says cannot be trusted past its own errors.
        return Err(ConfigErrors(errors));
    }
    if !raw.connectors.is_empty() {
        errors.push(ConfigError::new(
            "connectors",
            "profcol has no connectors yet",
        ));
    }

    let defined = |list: &[(ComponentId, Option<ParsedConfig>)], id: &ComponentId| {
        list.iter().any(|(i, _)| i == id)
    };
    let mut service_extensions = Vec::new();
    for (i, text) in raw.service.extensions.iter().enumerate() {
        let path = format!("service::extensions[{i}]");
        match ComponentId::parse(text) {
            Ok(id) if defined(&extensions, &id) => service_extensions.push(id),
            Ok(id) => errors.push(ConfigError::new(
                path,
                format!("references extension \"{id}\", which is not defined under extensions"),
            )),
            Err(e) => errors.push(ConfigError::new(path, e)),
        }
    }

    let mut pipelines = Vec::new();
    if raw.service.pipelines.is_empty() {
        errors.push(ConfigError::new(
            "service::pipelines",
            "no pipelines: define at least one profiles pipeline",
        ));
    }
    for (key, value) in &raw.service.pipelines {
        let name = key_text(key);
        let path = format!("service::pipelines::{name}");
        let id = match PipelineId::parse(&name) {
            Ok(id) => id,
            Err(e) => {
                errors.push(ConfigError::new(path, e));
                continue;
            }
        };
        let config: PipelineConfig = match crate::config::parse_typed_all(value) {
            Ok(c) => c,
            Err(es) => {
                errors.extend(es.into_iter().map(|e| e.under(&path)));
                continue;
            }
        };
        let mut resolve = |list: &[String],
                           section: &str,
                           pool: &[(ComponentId, Option<ParsedConfig>)],
                           kind: Kind| {
            let mut ids: Vec<ComponentId> = Vec::new();
            for (i, text) in list.iter().enumerate() {
                let at = format!("{path}::{section}[{i}]");
                match ComponentId::parse(text) {
                    Ok(id) if ids.contains(&id) => {
                        errors.push(ConfigError::new(at, format!("{id} is listed twice")))
                    }
                    Ok(id) if defined(pool, &id) => ids.push(id),
                    Ok(id) => errors.push(ConfigError::new(
                        at,
                        format!(
                            "references {} {:?}, which is not defined under {}",
                            kind.as_str(),
                            id.to_string(),
                            kind.section()
                        ),
                    )),
                    Err(e) => errors.push(ConfigError::new(at, e)),
                }
            }
            ids
        };
        let pipeline = Pipeline {
            receivers: resolve(&config.receivers, "receivers", &receivers, Kind::Receiver),
            processors: resolve(
                &config.processors,
                "processors",
                &processors,
                Kind::Processor,
            ),
            exporters: resolve(&config.exporters, "exporters", &exporters, Kind::Exporter),
            id,
        };
        if config.receivers.is_empty() {
            errors.push(ConfigError::new(
                path.clone(),
                "must have at least one receiver",
            ));
        }
        if config.exporters.is_empty() {
            errors.push(ConfigError::new(
                path.clone(),
                "must have at least one exporter",
            ));
        }
        pipelines.push(pipeline);
    }

    let mut warnings = Vec::new();
    for (kind, list) in [
        (Kind::Receiver, &receivers),
        (Kind::Processor, &processors),
        (Kind::Exporter, &exporters),
    ] {
        for (id, _) in list.iter() {
            let used = pipelines.iter().any(|p| match kind {
                Kind::Receiver => p.receivers.contains(id),
                Kind::Processor => p.processors.contains(id),
                _ => p.exporters.contains(id),
            });
            if !used {
                warnings.push(format!(
                    "{} {id} is defined but no pipeline uses it",
                    kind.as_str()
                ));
            }
        }
    }
    for (id, _) in &extensions {
        if !service_extensions.contains(id) {
            warnings.push(format!(
                "extension {id} is defined but not listed in service::extensions"
            ));
        }
    }
    if let Err(e) = raw.service.telemetry.metrics.listen_address() {
        errors.push(ConfigError::new("service::telemetry::metrics", e));
    }

    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let keep = |list: Vec<(ComponentId, Option<ParsedConfig>)>| {
        list.into_iter()
            .filter_map(|(id, c)| c.map(|c| (id, c)))
            .collect()
    };
    Ok(CollectorConfig {
        receivers: keep(receivers),
        processors: keep(processors),
        exporters: keep(exporters),
        extensions: keep(extensions),
        service_extensions,
        pipelines,
        telemetry: raw.service.telemetry,
        warnings,
    })
}

/// Parses one section. An entry whose config is wrong stays in the list (as None) so
/// that pipelines naming it do not also report "not defined".
fn parse_section(
    registry: &Registry,
    kind: Kind,
    section: &Mapping,
    errors: &mut Vec<ConfigError>,
) -> Vec<(ComponentId, Option<ParsedConfig>)> {
    let mut out = Vec::new();
    for (key, value) in section {
        let text = key_text(key);
        let path = format!("{}::{text}", kind.section());
        let id = match ComponentId::parse(&text) {
            Ok(id) => id,
            Err(e) => {
                errors.push(ConfigError::new(path, e));
                continue;
            }
        };
        match registry.parse(kind, id.type_name(), value) {
            Ok(c) => out.push((id, Some(c))),
            Err(es) => {
                errors.extend(es.into_iter().map(|e| e.under(&path)));
                out.push((id, None));
            }
        }
    }
    out
}
