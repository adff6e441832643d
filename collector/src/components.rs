//! The one explicit list of every component this binary carries. Add a factory here and it
//! exists; there is no registration by linker magic.

use profcol_core::component::Registry;
use profcol_core::component::registry::DuplicateType;

pub fn registry() -> Result<Registry, DuplicateType> {
    let mut r = Registry::new();
    r.receiver(profcol_receiver_otlp::OtlpReceiverFactory)?
        .receiver(profcol_receiver_pprof::PprofReceiverFactory)?
        .receiver(profcol_receiver_profiling::ProfilingReceiverFactory::new(
            profcol_receiver_profiling::bpf_source::BpfOpener,
        ))?;
    r.processor(profcol_processor_batch::BatchFactory)?
        .processor(profcol_processor_memory_limiter::MemoryLimiterFactory)?
        .processor(profcol_processor_resource::ResourceFactory)?
        .processor(profcol_processor_service_name::ServiceNameFactory)?
        .processor(profcol_processor_k8s_attributes::K8sAttributesFactory)?;
    r.processor_alias(
        profcol_processor_k8s_attributes::ALIAS,
        profcol_processor_k8s_attributes::TYPE_NAME,
    )?;
    r.exporter(profcol_exporter_otlp::OtlpExporterFactory)?
        .exporter(profcol_exporter_otlp::OtlpHttpExporterFactory)?
        .exporter(profcol_exporter_pprof::PprofExporterFactory)?
        .exporter(profcol_exporter_flamegraph::FlamegraphExporterFactory)?
        .exporter(profcol_exporter_debug::DebugExporterFactory)?
        .exporter(profcol_exporter_file::FileExporterFactory)?
        .exporter(profcol_exporter_arrow::ArrowExporterFactory)?;
    r.extension(profcol_extension_file_storage::FileStorageFactory)?
        .extension(profcol_extension_health_check::HealthCheckFactory)?;
    Ok(r)
}
