//! The sampler behind the receiver: profcol-bpf's perf-event profiler, whose ring buffer
//! delivers one event per sample and per process start, fork and exit.

use std::time::Duration;

use profcol_bpf::{Event, OffCpuShare, Profiler, ProfilerConfig, monotonic_to_unix_nanos_offset};

use crate::config::{Config, Filter};
use crate::receiver::{SampleSource, SourceError, SourceEvent, SourceOpener};
use crate::unwind::UnwindMaps;
use crate::{ProcessEvent, SampleClock};

/// The BPF ring buffer's size.
const RING_BUFFER_BYTES: usize = 1 << 20;

/// Opens the eBPF sampler with the receiver's frequency, pid filters (applied in BPF,
/// before any stack is taken) and off-CPU share. profcol does not sample itself.
pub struct BpfOpener;

impl SourceOpener for BpfOpener {
    fn open(
        &self,
        config: &Config,
        _filter: &Filter,
    ) -> Result<Box<dyn SampleSource>, SourceError> {
        let settings = ProfilerConfig {
            frequency_hz: u64::from(config.samples_per_second),
            include_pids: config.include.pids.clone(),
            exclude_pids: config.exclude.pids.clone(),
            exclude_self: true,
            // A process's first samples carry 8 KiB of stack each: room for a burst of
            // them (a node's processes at start) while tables are built.
            ring_buffer_bytes: RING_BUFFER_BYTES,
            off_cpu: OffCpuShare::from_probability(config.off_cpu_threshold),
            ..ProfilerConfig::default()
        };
        let mut profiler = Profiler::start(&settings).map_err(|e| SourceError(e.to_string()))?;
        if config.send_idle_frames {
            profiler
                .set_send_idle(true)
                .map_err(|e| SourceError(e.to_string()))?;
        }
        tracing::info!(
            cpus = profiler.cpus().len(),
            hz = config.samples_per_second,
            off_cpu_threshold = config.off_cpu_threshold,
            "eBPF profiler attached"
        );
        Ok(Box::new(BpfSource {
            profiler,
            clock: SampleClock {
                to_unix_nanos: monotonic_to_unix_nanos_offset(),
                off_cpu_share: settings.off_cpu.probability(),
            },
        }))
    }
}

struct BpfSource {
    profiler: Profiler,
    /// The BPF clock (monotonic) to wall time, and the off-CPU share recorded.
    clock: SampleClock,
}

impl SampleSource for BpfSource {
    fn poll(
        &mut self,
        timeout: Duration,
        sink: &mut dyn FnMut(SourceEvent),
    ) -> Result<(), SourceError> {
        self.profiler
            .poll(timeout, &mut |event| {
                let event = match event {
                    Event::Sample(s) => SourceEvent::Sample(s),
                    Event::Exec { pid, filename } => {
                        SourceEvent::Process(ProcessEvent::Exec { pid, filename })
                    }
                    Event::Fork {
                        parent_pid,
                        child_pid,
                    } => SourceEvent::Process(ProcessEvent::Fork {
                        parent_pid,
                        child_pid,
                    }),
                    Event::Exit { pid } => SourceEvent::Process(ProcessEvent::Exit { pid }),
                };
                sink(event);
            })
            .map(|_| ())
            .map_err(|e| SourceError(e.to_string()))
    }

    fn sample_clock(&self) -> SampleClock {
        self.clock
    }

    fn lost_samples(&self) -> u64 {
        self.profiler
            .lost_samples()
            .saturating_add(self.profiler.lost_off_cpu_samples())
    }

    fn lost_process_events(&self) -> u64 {
        self.profiler.lost_process_events()
    }

    fn unwind_maps(&mut self) -> Option<&mut dyn UnwindMaps> {
        Some(self)
    }

    fn unwind_stats(&self) -> Option<profcol_bpf::UnwindStats> {
        Some(self.profiler.unwind_stats())
    }

    fn set_refused(&mut self, pid: u32, refused: bool) -> Result<(), SourceError> {
        self.profiler
            .set_refused(pid, refused)
            .map_err(|e| SourceError(e.to_string()))
    }
}

impl UnwindMaps for BpfSource {
    fn load_table(&mut self, slot: u32, generation: u32, rows: &[u8]) -> Result<(), String> {
        self.profiler
            .load_unwind_table(slot, generation, rows)
            .map_err(|e| e.to_string())
    }

    fn unload_table(&mut self, slot: u32) -> Result<(), String> {
        self.profiler
            .unload_unwind_table(slot)
            .map_err(|e| e.to_string())
    }

    fn set_process(
        &mut self,
        pid: u32,
        mappings: &[profcol_bpf::UnwindMapping],
    ) -> Result<(), String> {
        self.profiler
            .set_process_mappings(pid, mappings)
            .map_err(|e| e.to_string())
    }

    fn read_row(&mut self, slot: u32, index: u32) -> Option<[u8; profcol_bpf::UNWIND_ROW_SIZE]> {
        self.profiler.unwind_row(slot, index)
    }

    fn remove_process(&mut self, pid: u32) -> Result<(), String> {
        self.profiler
            .remove_process_mappings(pid)
            .map_err(|e| e.to_string())
    }

    fn set_python(
        &mut self,
        pid: u32,
        python: Option<&profcol_bpf::PythonProcess>,
    ) -> Result<(), String> {
        self.profiler
            .set_python_process(pid, python)
            .map_err(|e| e.to_string())
    }
}
