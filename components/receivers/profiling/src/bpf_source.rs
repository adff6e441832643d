//! The sampler behind the receiver: profcol-bpf's perf-event profiler, whose ring buffer
//! delivers one event per sample and per process start, fork and exit.

use std::time::Duration;

use profcol_bpf::{Event, OffCpuShare, Profiler, ProfilerConfig, monotonic_to_unix_nanos_offset};

use crate::config::{Config, Filter};
use crate::receiver::{SampleSource, SourceError, SourceEvent, SourceOpener};
use crate::unwind::{UnwindMaps, UnwindStatus};
use crate::{ProcessEvent, RawSample};

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
            clock_offset: monotonic_to_unix_nanos_offset(),
            off_cpu_probability: settings.off_cpu.probability(),
        }))
    }
}

struct BpfSource {
    profiler: Profiler,
    /// Added to the BPF clock (monotonic) to get wall time.
    clock_offset: i128,
    /// The chance a switch-out was recorded: each recorded time stands for 1/p of them.
    off_cpu_probability: f64,
}

/// An off-CPU time recorded with probability `p`, scaled to what it stands for
/// (Horvitz-Thompson: the sum of the scaled times estimates the total without bias).
pub fn scale_off_cpu_nanos(nanos: u64, p: f64) -> u64 {
    if p >= 1.0 || p <= 0.0 || p.is_nan() {
        return nanos;
    }
    // Saturates at u64::MAX (float to int casts do), which no real wait reaches.
    (nanos as f64 / p).round() as u64
}

impl SampleSource for BpfSource {
    fn poll(
        &mut self,
        timeout: Duration,
        sink: &mut dyn FnMut(SourceEvent),
    ) -> Result<(), SourceError> {
        let offset = self.clock_offset;
        let p = self.off_cpu_probability;
        self.profiler
            .poll(timeout, &mut |event| {
                let event = match event {
                    Event::Sample(s) => SourceEvent::Sample(RawSample {
                        pid: s.pid,
                        tid: s.tid,
                        cpu: s.cpu,
                        comm: s.comm,
                        cgroup_id: s.cgroup_id,
                        time_unix_nano: u64::try_from(i128::from(s.time_ns) + offset).unwrap_or(0),
                        kernel_stack: s.kernel_stack,
                        user_stack: s.user_stack,
                        kernel_truncated: s.kernel_truncated,
                        user_truncated: s.user_truncated,
                        unwind: UnwindStatus {
                            end: Some(s.unwind_end),
                            unknown_mapping: s.unknown_mapping,
                            missing_table: s.missing_table,
                        },
                        stack_copy: s.stack_copy,
                        off_cpu_ns: s.off_cpu_ns.map(|ns| scale_off_cpu_nanos(ns, p)),
                        python_stack: s.python_stack,
                        python_end: s.python_end,
                    }),
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
