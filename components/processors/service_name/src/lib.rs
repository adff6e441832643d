//! `service_name`: gives every resource a `service.name`, never overwriting one that is
//! set. The name comes from the process's own `OTEL_SERVICE_NAME` /
//! `OTEL_RESOURCE_ATTRIBUTES` (as the `profiling` receiver recorded them; this processor
//! reads no `/proc`), then Kubernetes workload names, then the executable.

mod config;
mod environ;
mod processor;

use profcol_core::component::{
    BuildError, Processor, ProcessorCreateContext, ProcessorFactory, Stability,
};

pub use config::{Config, Format};
pub use environ::{parse_resource_attributes_service_name, percent_decode};
pub use processor::{
    K8S_PRECEDENCE, RECORDED_RESOURCE_ATTRIBUTES, RECORDED_SERVICE_NAME, RecordedEnvironment,
    ServiceNameProcessor,
};

pub struct ServiceNameFactory;

impl ProcessorFactory for ServiceNameFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "service_name";
    const STABILITY: Stability = Stability::Development;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        _: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let (config, format) = config.into_parts();
        Ok(Box::new(ServiceNameProcessor::new(
            format,
            config
                .from_process_environment
                .then_some(RecordedEnvironment),
        )))
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
        let f = ServiceNameFactory;
        let bad = parse_yaml("t", "format: fancy").expect("yaml");
        let errors = ErasedProcessorFactory::parse(&f, &bad)
            .err()
            .expect("invalid");
        assert_eq!(errors[0].path, "format");
        let good = parse_yaml("t", "format: semconv").expect("yaml");
        let parsed = ErasedProcessorFactory::parse(&f, &good).expect("valid");
        let ctx = ProcessorCreateContext {
            base: CreateContext {
                id: ComponentId::new("service_name", None),
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

profcol_core::component_conformance!(processor: ServiceNameFactory, "service_name", Development);
