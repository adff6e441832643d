//! The registry of factories, filled by the binary with one explicit list. Typed factories
//! are erased here so that configs of any type can sit in one map.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    BuildError, CreateContext, Exporter, ExporterFactory, Extension, ExtensionFactory, Kind,
    Processor, ProcessorCreateContext, ProcessorFactory, Receiver, ReceiverFactory, Stability,
};
use crate::config::{Checked, Compile, ConfigError, Value, parse_typed_all};
use crate::exporterhelper::ExporterHelperSettings;

/// A config parsed and checked by its factory ([`Checked`]), kept until the component is
/// created.
#[derive(Clone)]
pub struct ParsedConfig(Arc<dyn Any + Send + Sync>);

impl ParsedConfig {
    fn get<C: Compile + Clone + 'static>(
        &self,
        id: &super::ComponentId,
    ) -> Result<Checked<C>, BuildError> {
        self.0
            .downcast_ref::<Checked<C>>()
            .cloned()
            .ok_or_else(|| BuildError::new(id, "config of another component type"))
    }
}

fn parse_and_check<C: super::ComponentConfig>(
    value: &Value,
) -> Result<ParsedConfig, Vec<ConfigError>> {
    // Every unknown key and bad value at once, not only the first serde meets.
    let config: C = parse_typed_all(value)?;
    Ok(ParsedConfig(Arc::new(Checked::check(config)?)))
}

/// The erased factories of one kind: where the registry keeps them and how one parses
/// a config, so that loading and listing go through one generic path for all four.
pub(crate) trait FactoryKind: Send + Sync + 'static {
    const KIND: Kind;
    fn registered(registry: &Registry) -> &BTreeMap<&'static str, Arc<Self>>;
    fn parse_config(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>>;
    fn stability_of(&self) -> Stability;
}

/// Declares the object-safe twin of a typed factory trait, over [`ParsedConfig`], and
/// implements it for every typed factory. `$id` names the component id inside `$ctx`;
/// the registry keeps these factories in its `$field` as `$kind`.
macro_rules! erased_factory {
    ($erased:ident, $typed:ident, $component:ident, $ctx:ty, |$c:ident| $id:expr, $kind:ident, $field:ident) => {
        impl FactoryKind for dyn $erased {
            const KIND: Kind = Kind::$kind;
            fn registered(registry: &Registry) -> &BTreeMap<&'static str, Arc<Self>> {
                &registry.$field
            }
            fn parse_config(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>> {
                self.parse(value)
            }
            fn stability_of(&self) -> Stability {
                self.stability()
            }
        }

        pub trait $erased: Send + Sync {
            fn type_name(&self) -> &'static str;
            fn stability(&self) -> Stability;
            fn parse(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>>;
            fn create(
                &self,
                config: &ParsedConfig,
                ctx: &$ctx,
            ) -> Result<Box<dyn $component>, BuildError>;
        }

        impl<F: $typed> $erased for F {
            fn type_name(&self) -> &'static str {
                F::TYPE_NAME
            }
            fn stability(&self) -> Stability {
                F::STABILITY
            }
            fn parse(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>> {
                parse_and_check::<F::Config>(value)
            }
            fn create(
                &self,
                config: &ParsedConfig,
                $c: &$ctx,
            ) -> Result<Box<dyn $component>, BuildError> {
                $typed::create(self, config.get($id)?, $c)
            }
        }
    };
}

erased_factory!(
    ErasedReceiverFactory,
    ReceiverFactory,
    Receiver,
    CreateContext,
    |ctx| &ctx.id,
    Receiver,
    receivers
);
erased_factory!(
    ErasedProcessorFactory,
    ProcessorFactory,
    Processor,
    ProcessorCreateContext,
    |ctx| &ctx.base.id,
    Processor,
    processors
);
erased_factory!(
    ErasedExtensionFactory,
    ExtensionFactory,
    Extension,
    CreateContext,
    |ctx| &ctx.id,
    Extension,
    extensions
);

/// Exporters also hand the exporter helper its settings, so their twin is written out.
pub trait ErasedExporterFactory: Send + Sync {
    fn type_name(&self) -> &'static str;
    fn stability(&self) -> Stability;
    fn parse(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>>;
    fn helper_settings(&self, config: &ParsedConfig) -> ExporterHelperSettings;
    fn create(
        &self,
        config: &ParsedConfig,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError>;
}

impl FactoryKind for dyn ErasedExporterFactory {
    const KIND: Kind = Kind::Exporter;
    fn registered(registry: &Registry) -> &BTreeMap<&'static str, Arc<Self>> {
        &registry.exporters
    }
    fn parse_config(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>> {
        self.parse(value)
    }
    fn stability_of(&self) -> Stability {
        self.stability()
    }
}

impl<F: ExporterFactory> ErasedExporterFactory for F {
    fn type_name(&self) -> &'static str {
        F::TYPE_NAME
    }
    fn stability(&self) -> Stability {
        F::STABILITY
    }
    fn parse(&self, value: &Value) -> Result<ParsedConfig, Vec<ConfigError>> {
        parse_and_check::<F::Config>(value)
    }
    fn helper_settings(&self, config: &ParsedConfig) -> ExporterHelperSettings {
        match config.0.downcast_ref::<Checked<F::Config>>() {
            Some(c) => ExporterFactory::helper_settings(self, c),
            None => ExporterHelperSettings::default(),
        }
    }
    fn create(
        &self,
        config: &ParsedConfig,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Exporter>, BuildError> {
        ExporterFactory::create(self, config.get(&ctx.id)?, ctx)
    }
}

/// Factories by kind and type name.
#[derive(Default, Clone)]
pub struct Registry {
    pub(crate) receivers: BTreeMap<&'static str, Arc<dyn ErasedReceiverFactory>>,
    pub(crate) processors: BTreeMap<&'static str, Arc<dyn ErasedProcessorFactory>>,
    pub(crate) exporters: BTreeMap<&'static str, Arc<dyn ErasedExporterFactory>>,
    pub(crate) extensions: BTreeMap<&'static str, Arc<dyn ErasedExtensionFactory>>,
    /// What to use instead of a type this binary does not carry (otelcol-contrib's), said
    /// when a config names it.
    hints: BTreeMap<(Kind, &'static str), &'static str>,
}

/// Two factories of one kind with one type name is a programming error in the list.
#[derive(Debug, thiserror::Error)]
#[error("{kind} type {type_name:?} is registered twice")]
pub struct DuplicateType {
    pub kind: &'static str,
    pub type_name: &'static str,
}

fn insert<T: ?Sized>(
    map: &mut BTreeMap<&'static str, Arc<T>>,
    kind: Kind,
    name: &'static str,
    factory: Arc<T>,
) -> Result<(), DuplicateType> {
    if map.insert(name, factory).is_some() {
        return Err(DuplicateType {
            kind: kind.as_str(),
            type_name: name,
        });
    }
    Ok(())
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn receiver<F: ReceiverFactory>(&mut self, f: F) -> Result<&mut Self, DuplicateType> {
        let name = F::TYPE_NAME;
        insert(&mut self.receivers, Kind::Receiver, name, Arc::new(f))?;
        Ok(self)
    }

    /// Registers `f` under an extra name too (`k8sattributes` for `k8s_attributes`).
    pub fn receiver_alias(
        &mut self,
        alias: &'static str,
        of: &'static str,
    ) -> Result<&mut Self, DuplicateType> {
        if let Some(f) = self.receivers.get(of).cloned() {
            insert(&mut self.receivers, Kind::Receiver, alias, f)?;
        }
        Ok(self)
    }

    pub fn processor<F: ProcessorFactory>(&mut self, f: F) -> Result<&mut Self, DuplicateType> {
        let name = F::TYPE_NAME;
        insert(&mut self.processors, Kind::Processor, name, Arc::new(f))?;
        Ok(self)
    }

    pub fn processor_alias(
        &mut self,
        alias: &'static str,
        of: &'static str,
    ) -> Result<&mut Self, DuplicateType> {
        if let Some(f) = self.processors.get(of).cloned() {
            insert(&mut self.processors, Kind::Processor, alias, f)?;
        }
        Ok(self)
    }

    pub fn exporter<F: ExporterFactory>(&mut self, f: F) -> Result<&mut Self, DuplicateType> {
        let name = F::TYPE_NAME;
        insert(&mut self.exporters, Kind::Exporter, name, Arc::new(f))?;
        Ok(self)
    }

    /// Registers the exporter `of` under an extra name too (`otlp_grpc` for `otlp`).
    pub fn exporter_alias(
        &mut self,
        alias: &'static str,
        of: &'static str,
    ) -> Result<&mut Self, DuplicateType> {
        if let Some(f) = self.exporters.get(of).cloned() {
            insert(&mut self.exporters, Kind::Exporter, alias, f)?;
        }
        Ok(self)
    }

    /// Says what to use instead when a config names `type_name`, a component of `kind`
    /// this binary does not carry (`hostmetrics` → the `profiling` receiver).
    pub fn unknown_type_hint(
        &mut self,
        kind: Kind,
        type_name: &'static str,
        hint: &'static str,
    ) -> &mut Self {
        self.hints.insert((kind, type_name), hint);
        self
    }

    pub fn extension<F: ExtensionFactory>(&mut self, f: F) -> Result<&mut Self, DuplicateType> {
        let name = F::TYPE_NAME;
        insert(&mut self.extensions, Kind::Extension, name, Arc::new(f))?;
        Ok(self)
    }

    /// (kind, type name, stability) of everything registered, by kind then name.
    pub fn list(&self) -> Vec<(Kind, &'static str, Stability)> {
        fn of<F: FactoryKind + ?Sized>(
            r: &Registry,
        ) -> impl Iterator<Item = (Kind, &'static str, Stability)> + '_ {
            F::registered(r)
                .iter()
                .map(|(n, f)| (F::KIND, *n, f.stability_of()))
        }
        of::<dyn ErasedReceiverFactory>(self)
            .chain(of::<dyn ErasedProcessorFactory>(self))
            .chain(of::<dyn ErasedExporterFactory>(self))
            .chain(of::<dyn ErasedExtensionFactory>(self))
            .collect()
    }

    pub(crate) fn known(&self, kind: Kind) -> Vec<&'static str> {
        self.list()
            .into_iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, name, _)| name)
            .collect()
    }

    /// Parses one component's config with the factory of its type, which comes back with
    /// it; errors name the type if no factory of the kind has it.
    pub(crate) fn parse_as<F: FactoryKind + ?Sized>(
        &self,
        type_name: &str,
        value: &Value,
    ) -> Result<(Arc<F>, ParsedConfig), Vec<ConfigError>> {
        let factory = F::registered(self)
            .get(type_name)
            .ok_or_else(|| vec![self.unknown_type(F::KIND, type_name)])?;
        Ok((Arc::clone(factory), factory.parse_config(value)?))
    }

    /// [`Registry::parse_as`] for a kind known only at run time (the conformance tests').
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn parse(
        &self,
        kind: Kind,
        type_name: &str,
        value: &Value,
    ) -> Result<ParsedConfig, Vec<ConfigError>> {
        let config = match kind {
            Kind::Receiver => {
                self.parse_as::<dyn ErasedReceiverFactory>(type_name, value)?
                    .1
            }
            Kind::Processor => {
                self.parse_as::<dyn ErasedProcessorFactory>(type_name, value)?
                    .1
            }
            Kind::Exporter => {
                self.parse_as::<dyn ErasedExporterFactory>(type_name, value)?
                    .1
            }
            Kind::Extension => {
                self.parse_as::<dyn ErasedExtensionFactory>(type_name, value)?
                    .1
            }
        };
        Ok(config)
    }

    /// The error for a type no factory of `kind` has, with what is known and, for a type
    /// of otelcol-contrib's, what to use instead.
    pub(crate) fn unknown_type(&self, kind: Kind, type_name: &str) -> ConfigError {
        let known = self.known(kind).join(", ");
        let message = match self.hints.get(&(kind, type_name)) {
            Some(hint) => format!(
                "unknown {kind} type {type_name:?}, which profcol does not have: {hint}; known {kind} types: {known}",
                kind = kind.as_str()
            ),
            None => format!(
                "unknown {} type {type_name:?}; known types: {known}",
                kind.as_str()
            ),
        };
        ConfigError::new("", message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: &Registry, kind: Kind, type_name: &str) -> String {
        match r.parse(kind, type_name, &Value::Null) {
            Err(errors) => errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
            Ok(_) => panic!("{type_name} parsed"),
        }
    }

    #[test]
    fn an_unknown_type_with_a_hint_says_what_to_use_instead() {
        let mut r = crate::testkit::registry();
        r.unknown_type_hint(
            Kind::Receiver,
            "hostmetrics",
            "host metrics are not profiles; `test_source` is what this registry has",
        );
        assert_eq!(
            message(&r, Kind::Receiver, "hostmetrics"),
            "unknown receiver type \"hostmetrics\", which profcol does not have: host metrics are not \
             profiles; `test_source` is what this registry has; known receiver types: test_source"
        );
        // A hint is for its kind only; other unknown types list what there is.
        assert_eq!(
            message(&r, Kind::Exporter, "hostmetrics"),
            "unknown exporter type \"hostmetrics\"; known types: test_sink"
        );
    }

    #[test]
    fn an_exporter_alias_parses_as_the_exporter_it_names() {
        let mut r = crate::testkit::registry();
        r.exporter_alias("test_sink_alias", "test_sink")
            .expect("registers");
        assert!(r.known(Kind::Exporter).contains(&"test_sink_alias"));
        let value = serde_yaml_ng::from_str("name: aliased").expect("yaml");
        assert!(r.parse(Kind::Exporter, "test_sink_alias", &value).is_ok());
        assert!(r.exporter_alias("test_sink_alias", "test_sink").is_err());
    }
}
