//! `resource`: inserts, updates, upserts or deletes attributes of every resource a batch
//! carries, with otelcol's `attributes: [{key, value, action, from_attribute}]`.

mod config;
mod processor;

use profcol_core::component::{
    BuildError, Processor, ProcessorCreateContext, ProcessorFactory, Stability,
};

pub use config::{Action, AttributeAction, Config, SetMode, Source, Step};
pub use processor::ResourceProcessor;

pub struct ResourceFactory;

impl ProcessorFactory for ResourceFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "resource";
    const STABILITY: Stability = Stability::Beta;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        _: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let (_, steps) = config.into_parts();
        Ok(Box::new(ResourceProcessor::new(steps)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::component::{ComponentId, CreateContext, ErasedProcessorFactory, PipelineId};
    use profcol_core::config::parse_yaml;
    use profcol_core::pdata::ProfileBatch;
    use profcol_core::telemetry::Telemetry;

    #[tokio::test]
    async fn factory_parses_validates_and_creates() {
        let f = ResourceFactory;
        let bad =
            parse_yaml("t", "attributes: [{key: a, action: delete, value: 1}]").expect("yaml");
        let errors = ErasedProcessorFactory::parse(&f, &bad)
            .err()
            .expect("invalid");
        assert_eq!(errors[0].path, "attributes[0]::value");
        let good =
            parse_yaml("t", "attributes: [{key: a, action: upsert, value: 1}]").expect("yaml");
        let parsed = ErasedProcessorFactory::parse(&f, &good).expect("valid");
        let ctx = ProcessorCreateContext {
            base: CreateContext {
                id: ComponentId::new("resource", Some("env")),
                telemetry: Telemetry::new(),
                host: Default::default(),
            },
            pipeline: PipelineId::parse("profiles").expect("pipeline id"),
        };
        let mut p = ErasedProcessorFactory::create(&f, &parsed, &ctx).expect("create");
        assert_eq!(p.tick_interval(), None);
        let mut out = Vec::new();
        p.process(ProfileBatch::empty(), &mut out)
            .await
            .expect("process");
        assert_eq!(out, vec![ProfileBatch::empty()]);
    }
}

profcol_core::component_conformance!(processor: ResourceFactory, "resource", Beta, default_errors: ["attributes"]);
