//! `batch`: merges incoming batches into larger ones, re-interned into one dictionary,
//! and sends them when they hold `send_batch_size` samples or when `timeout` passes;
//! `send_batch_max_size` caps the samples in any batch it sends, splitting larger ones.

mod config;
mod processor;
mod split;

use profcol_core::component::{
    BuildError, Processor, ProcessorCreateContext, ProcessorFactory, Stability,
};

pub use config::Config;
pub use processor::BatchProcessor;
pub use split::split_batch;

pub struct BatchFactory;

impl ProcessorFactory for BatchFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "batch";
    const STABILITY: Stability = Stability::Beta;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let config = config.into_inner();
        Ok(Box::new(BatchProcessor::new(
            &config,
            &ctx.base.telemetry,
            &ctx.base.id.to_string(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::component::{ComponentId, CreateContext, ErasedProcessorFactory, PipelineId};
    use profcol_core::config::{Value, parse_yaml};
    use profcol_core::telemetry::Telemetry;

    #[test]
    fn factory_parses_validates_and_creates() {
        let f = BatchFactory;
        let bad = parse_yaml("t", "send_batch_size: 10\nsend_batch_max_size: 5\n").expect("yaml");
        let errors = ErasedProcessorFactory::parse(&f, &bad)
            .err()
            .expect("invalid");
        assert_eq!(errors[0].path, "send_batch_max_size");
        let parsed = ErasedProcessorFactory::parse(&f, &Value::Null).expect("defaults");
        let ctx = ProcessorCreateContext {
            base: CreateContext {
                id: ComponentId::new("batch", None),
                telemetry: Telemetry::new(),
                host: Default::default(),
            },
            pipeline: PipelineId::parse("profiles").expect("pipeline id"),
        };
        let p = ErasedProcessorFactory::create(&f, &parsed, &ctx).expect("create");
        assert_eq!(
            p.tick_interval(),
            Some(std::time::Duration::from_millis(200))
        );
    }
}

profcol_core::component_conformance!(processor: BatchFactory, "batch", Beta);
