//! Component and pipeline ids: `type` or `type/name`.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Receiver,
    Processor,
    Exporter,
    Extension,
}

impl Kind {
    /// The config section's name.
    pub fn section(self) -> &'static str {
        match self {
            Kind::Receiver => "receivers",
            Kind::Processor => "processors",
            Kind::Exporter => "exporters",
            Kind::Extension => "extensions",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Receiver => "receiver",
            Kind::Processor => "processor",
            Kind::Exporter => "exporter",
            Kind::Extension => "extension",
        }
    }
}

/// `otlp`, `otlp/backup`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentId {
    type_name: String,
    name: Option<String>,
}

impl ComponentId {
    pub fn new(type_name: &str, name: Option<&str>) -> Self {
        ComponentId {
            type_name: type_name.to_owned(),
            name: name.map(str::to_owned),
        }
    }

    /// Parses `type` or `type/name`; the type is letters, digits and `_`, the name
    /// anything non-empty.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (type_name, name) = match text.split_once('/') {
            Some((t, n)) => (t, Some(n)),
            None => (text, None),
        };
        if type_name.is_empty()
            || !type_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "invalid component id {text:?}: the type must be letters, digits or _"
            ));
        }
        if let Some(n) = name
            && (n.is_empty() || n.chars().any(char::is_whitespace))
        {
            return Err(format!(
                "invalid component id {text:?}: the name after / must be non-empty, without spaces"
            ));
        }
        Ok(Self::new(type_name, name))
    }

    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{}/{n}", self.type_name),
            None => f.write_str(&self.type_name),
        }
    }
}

/// `profiles` or `profiles/NAME`; profcol carries the profiles signal only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipelineId(String);

impl PipelineId {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (signal, name) = match text.split_once('/') {
            Some((s, n)) => (s, Some(n)),
            None => (text, None),
        };
        match signal {
            "profiles" => {}
            "traces" | "metrics" | "logs" => {
                return Err(format!(
                    "pipeline {text:?}: profcol carries the profiles signal only; use profiles or profiles/NAME"
                ));
            }
            _ => {
                return Err(format!(
                    "pipeline {text:?}: unknown signal {signal:?}; use profiles or profiles/NAME"
                ));
            }
        }
        if name.is_some_and(str::is_empty) {
            return Err(format!(
                "pipeline {text:?}: the name after / must not be empty"
            ));
        }
        Ok(PipelineId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_print() {
        assert_eq!(ComponentId::parse("otlp").expect("ok").to_string(), "otlp");
        let id = ComponentId::parse("otlp/backup-1").expect("ok");
        assert_eq!((id.type_name(), id.name()), ("otlp", Some("backup-1")));
        assert!(ComponentId::parse("").is_err());
        assert!(ComponentId::parse("otlp/").is_err());
        assert!(ComponentId::parse("ot lp").is_err());
        assert!(PipelineId::parse("profiles/cpu").is_ok());
        assert!(
            PipelineId::parse("traces")
                .expect_err("signal")
                .contains("profiles signal only")
        );
    }
}
