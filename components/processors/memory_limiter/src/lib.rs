//! `memory_limiter`: refuses data at the receivers while the collector's memory use (its
//! resident set size) is at or above a soft limit, `limit - spike_limit`, and accepts it
//! again once use falls below. Batches already in the pipeline pass through.

mod config;
mod limiter;
mod memory;

use std::sync::Arc;

use profcol_core::component::{
    BuildError, Processor, ProcessorCreateContext, ProcessorFactory, Stability,
};

pub use config::{Config, Limits};
pub use limiter::MemoryLimiter;
pub use memory::{HeapInUse, MemoryError, MemorySource, ProcessRss, total_system_memory};

pub struct MemoryLimiterFactory;

impl ProcessorFactory for MemoryLimiterFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "memory_limiter";
    const STABILITY: Stability = Stability::Beta;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &ProcessorCreateContext,
    ) -> Result<Box<dyn Processor>, BuildError> {
        let config = config.into_inner();
        let id = &ctx.base.id;
        let limits = config
            .limits(total_system_memory)
            .map_err(|e| BuildError::caused_by(id, "cannot work out the limits", e))?;
        // Fail now, not silently at every check, where memory use cannot be read.
        let used = HeapInUse
            .used_bytes()
            .map_err(|e| BuildError::caused_by(id, "cannot measure memory use", e))?;
        tracing::info!(
            processor = %id,
            pipeline = ctx.pipeline.as_str(),
            used_mib = used >> 20,
            measured = HeapInUse.kind(),
            soft_limit_mib = limits.soft >> 20,
            hard_limit_mib = limits.hard >> 20,
            "memory limiter ready"
        );
        Ok(Box::new(MemoryLimiter::new(
            &id.to_string(),
            limits,
            config.check_interval,
            Arc::new(HeapInUse),
            &ctx.base.telemetry,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::component::{ComponentId, CreateContext, ErasedProcessorFactory, PipelineId};
    use profcol_core::config::{Value, parse_yaml};
    use profcol_core::telemetry::Telemetry;

    #[tokio::test]
    async fn factory_parses_validates_and_creates() {
        let f = MemoryLimiterFactory;
        let errors = ErasedProcessorFactory::parse(&f, &Value::Null)
            .err()
            .expect("defaults are not enough");
        assert_eq!(errors[0].path, "check_interval");
        let good = parse_yaml(
            "t",
            "check_interval: 1s\nlimit_percentage: 100\nspike_limit_percentage: 1\n",
        )
        .expect("yaml");
        let parsed = ErasedProcessorFactory::parse(&f, &good).expect("valid");
        let telemetry = Telemetry::new();
        let ctx = ProcessorCreateContext {
            base: CreateContext {
                id: ComponentId::new("memory_limiter", Some("a")),
                telemetry: telemetry.clone(),
                host: Default::default(),
            },
            pipeline: PipelineId::parse("profiles").expect("pipeline id"),
        };
        let p = ErasedProcessorFactory::create(&f, &parsed, &ctx).expect("create");
        let gate = p.admission().expect("an admission");
        // 99% of system memory is far above what this test uses.
        assert_eq!(gate.admit(), Ok(()));
        assert_eq!(
            telemetry.value(
                "otelcol_processor_memory_limiter_refusing",
                &[("processor", "memory_limiter/a")]
            ),
            Some(0)
        );
    }
}

profcol_core::component_conformance!(processor: MemoryLimiterFactory, "memory_limiter", Beta, default_errors: ["check_interval", ""]);
