//! The `profiling` receiver around the [`Engine`]: a thread polls a [`SampleSource`] (the
//! BPF sampler, implemented elsewhere), feeds the engine and flushes it every
//! `reporter_interval`, handing each batch to the pipelines without waiting
//! ([`ReceiverOutput::try_deliver`]: a sampler must not block).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use profcol_core::component::{
    BuildError, ComponentError, CreateContext, Receiver, ReceiverContext, ReceiverFactory,
    ReceiverOutput, Stability, Started,
};
use profcol_core::telemetry::Telemetry;
use tokio_util::sync::CancellationToken;

use crate::schedule::{XorShift, jittered};
use crate::{
    Config, Engine, Environment, ErrorMode, Filter, ProcessEvent, Sample, SampleClock, Stats,
};

/// The longest a poll waits, so shutdown is seen within it.
const POLL_SLICE: Duration = Duration::from_millis(250);

pub const SAMPLES_METRIC: &str = "otelcol_receiver_profiling_samples_total";
pub const SAMPLES_FILTERED_METRIC: &str = "otelcol_receiver_profiling_samples_filtered_total";
pub const SAMPLES_SKIPPED_METRIC: &str = "otelcol_receiver_profiling_samples_skipped_total";
pub const FRAMES_UNSYMBOLIZED_METRIC: &str = "otelcol_receiver_profiling_frames_unsymbolized_total";
pub const PROCESSES_METRIC: &str = "otelcol_receiver_profiling_processes";
pub const SAMPLES_LOST_METRIC: &str = "otelcol_receiver_profiling_samples_lost_total";
pub const PROCESS_EVENTS_LOST_METRIC: &str = "otelcol_receiver_profiling_process_events_lost_total";
pub const FILES_REJECTED_METRIC: &str = "otelcol_receiver_profiling_files_rejected_total";
pub const SYMBOLIZER_RESTARTS_METRIC: &str = "otelcol_receiver_profiling_symbolizer_restarts_total";
pub const UNWIND_ENDS_METRIC: &str = "otelcol_receiver_profiling_unwind_ends_total";
pub const CONTEXTS_METRIC: &str = "otelcol_receiver_profiling_process_contexts_total";
pub const PYTHON_WALKS_METRIC: &str = "otelcol_receiver_profiling_python_walks_total";
pub const PYTHON_CODES_METRIC: &str = "otelcol_receiver_profiling_python_code_objects_read_total";
pub const UNWIND_FRAMES_METRIC: &str = "otelcol_receiver_profiling_unwind_frames_total";
pub const UNWIND_TABLES_METRIC: &str = "otelcol_receiver_profiling_unwind_tables";
pub const UNWIND_TABLE_BYTES_METRIC: &str = "otelcol_receiver_profiling_unwind_table_bytes";
pub const UNWIND_TABLES_LOADED_METRIC: &str =
    "otelcol_receiver_profiling_unwind_tables_loaded_total";
pub const UNWIND_TABLES_EVICTED_METRIC: &str =
    "otelcol_receiver_profiling_unwind_tables_evicted_total";
pub const UNWIND_TABLES_FAILED_METRIC: &str =
    "otelcol_receiver_profiling_unwind_tables_failed_total";
pub const UNWIND_TABLES_NO_ROOM_METRIC: &str =
    "otelcol_receiver_profiling_unwind_tables_no_room_total";

/// What a sampler reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceEvent {
    Sample(Sample),
    Process(ProcessEvent),
}

/// Why a sampler could not start or stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError(pub String);

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceError {}

/// A source of samples: the BPF sampler. Polled from one thread.
/// What the sampler lost, since start.
#[derive(Debug, Clone, Copy, Default)]
struct Lost {
    samples: u64,
    process_events: u64,
}

pub trait SampleSource: Send + 'static {
    /// Waits at most `timeout` for events and hands every one ready to `sink`. An error
    /// stops the receiver (the collector treats it as fatal).
    fn poll(
        &mut self,
        timeout: Duration,
        sink: &mut dyn FnMut(SourceEvent),
    ) -> Result<(), SourceError>;

    /// How this sampler's sample times and off-CPU durations read; the default: Unix
    /// time, every switch recorded.
    fn sample_clock(&self) -> SampleClock {
        SampleClock::default()
    }

    /// Samples the sampler could not hand over so far (its ring buffer was full).
    fn lost_samples(&self) -> u64 {
        0
    }

    /// Exec, fork and exit events lost because the ring buffer was full, since start.
    fn lost_process_events(&self) -> u64 {
        0
    }

    /// The stack walker's maps, for a sampler that walks user stacks with unwind tables.
    fn unwind_maps(&mut self) -> Option<&mut dyn crate::unwind::UnwindMaps> {
        None
    }

    /// The walker's own counters (why walks ended), for a sampler that has them.
    fn unwind_stats(&self) -> Option<profcol_bpf::UnwindStats> {
        None
    }

    /// Tells a sampler that can filter early that the receiver's filters refuse process
    /// `pid` (`refused`), or no longer know that (its exec). Errors are only logged: the
    /// receiver refuses the samples anyway.
    fn set_refused(&mut self, _pid: u32, _refused: bool) -> Result<(), SourceError> {
        Ok(())
    }
}

/// Starts a [`SampleSource`] for a config (loads and attaches BPF). Called when the
/// receiver runs, not when it is created. The filter's pid part
/// ([`Filter::allows_pid`]) is what BPF may apply itself.
pub trait SourceOpener: Send + Sync + 'static {
    fn open(&self, config: &Config, filter: &Filter) -> Result<Box<dyn SampleSource>, SourceError>;
}

impl<F> SourceOpener for F
where
    F: Fn(&Config, &Filter) -> Result<Box<dyn SampleSource>, SourceError> + Send + Sync + 'static,
{
    fn open(&self, config: &Config, filter: &Filter) -> Result<Box<dyn SampleSource>, SourceError> {
        self(config, filter)
    }
}

/// Creates `profiling` receivers around the sampler that `opener` starts.
#[derive(Clone)]
pub struct ProfilingReceiverFactory {
    opener: Arc<dyn SourceOpener>,
    environment: Arc<dyn Fn() -> Environment + Send + Sync>,
}

impl ProfilingReceiverFactory {
    pub fn new(opener: impl SourceOpener) -> Self {
        ProfilingReceiverFactory {
            opener: Arc::new(opener),
            environment: Arc::new(Environment::host),
        }
    }

    /// Another host view than this machine's (tests).
    pub fn with_environment(
        mut self,
        environment: impl Fn() -> Environment + Send + Sync + 'static,
    ) -> Self {
        self.environment = Arc::new(environment);
        self
    }
}

impl ReceiverFactory for ProfilingReceiverFactory {
    type Config = Config;

    const TYPE_NAME: &'static str = "profiling";
    const STABILITY: Stability = Stability::Development;

    fn create(
        &self,
        config: profcol_core::config::Checked<Config>,
        ctx: &CreateContext,
    ) -> Result<Box<dyn Receiver>, BuildError> {
        let config = config.into_inner();
        let environment = self.environment.clone();
        let executables = ctx.host.executables().clone();
        Ok(Box::new(ProfilingReceiver {
            config,
            opener: self.opener.clone(),
            environment: Arc::new(move || Environment {
                executables: executables.clone(),
                ..environment()
            }),
        }))
    }
}

struct ProfilingReceiver {
    config: Config,
    opener: Arc<dyn SourceOpener>,
    environment: Arc<dyn Fn() -> Environment + Send + Sync>,
}

#[async_trait]
impl Receiver for ProfilingReceiver {
    async fn run(self: Box<Self>, ctx: ReceiverContext) -> Result<(), ComponentError> {
        let ProfilingReceiver {
            config,
            opener,
            environment,
        } = *self;
        let id = ctx.id.to_string();
        let looped = Loop {
            id,
            output: ctx.output,
            started: ctx.started,
            shutdown: ctx.shutdown,
            telemetry: ctx.telemetry,
        };
        tokio::task::spawn_blocking(move || looped.run(config, opener.as_ref(), environment()))
            .await
            .map_err(|e| ComponentError::caused_by("profiling receiver thread failed", e))?
    }
}

/// Symbolizes and delivers batches on a thread of its own, so that the thread draining
/// the sampler keeps draining it (and giving new processes their unwind tables) while a
/// large binary's DWARF is read the first time.
struct Flusher {
    jobs: Option<std::sync::mpsc::SyncSender<crate::PendingFlush>>,
    thread: Option<std::thread::JoinHandle<()>>,
    unsymbolized: Arc<std::sync::atomic::AtomicU64>,
    /// For batches built here when the thread is gone.
    output: ReceiverOutput,
    id: String,
}

impl Flusher {
    /// Batches waiting for the thread at most; past them, the sampler's thread waits.
    const QUEUE: usize = 2;

    fn start(id: &str, output: ReceiverOutput) -> Flusher {
        let (jobs, inbox) = std::sync::mpsc::sync_channel::<crate::PendingFlush>(Self::QUEUE);
        let unsymbolized = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = unsymbolized.clone();
        let (thread_id, thread_output) = (id.to_owned(), output.clone());
        let thread = std::thread::Builder::new()
            .name("profiling-flush".into())
            .spawn(move || {
                for pending in inbox {
                    let (batch, frames) = pending.finish();
                    counted.fetch_add(frames, std::sync::atomic::Ordering::Relaxed);
                    deliver(&thread_id, &thread_output, batch);
                }
            });
        match thread {
            Ok(thread) => Flusher {
                jobs: Some(jobs),
                thread: Some(thread),
                unsymbolized,
                output,
                id: id.to_owned(),
            },
            Err(e) => {
                tracing::warn!("no flush thread ({e}): batches are built on the sampler's thread");
                Flusher {
                    jobs: None,
                    thread: None,
                    unsymbolized,
                    output,
                    id: id.to_owned(),
                }
            }
        }
    }

    fn send(&self, pending: crate::PendingFlush) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(std::sync::mpsc::SendError(pending)) = jobs.send(pending) {
                    // The thread is gone (it panicked): build here.
                    self.finish_here(pending);
                }
            }
            None => self.finish_here(pending),
        }
    }

    fn finish_here(&self, pending: crate::PendingFlush) {
        let (batch, frames) = pending.finish();
        self.unsymbolized
            .fetch_add(frames, std::sync::atomic::Ordering::Relaxed);
        deliver(&self.id, &self.output, batch);
    }

    fn take_unsymbolized(&self) -> u64 {
        self.unsymbolized
            .swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits for the batches sent so far; returns the frames they left unsymbolized.
    fn finish(mut self) -> u64 {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.take_unsymbolized()
    }
}

/// Hands a batch to the pipelines without waiting: a sampler must not block.
fn deliver(id: &str, output: &ReceiverOutput, batch: profcol_core::pdata::ProfileBatch) {
    if let Err(refused) = output.try_deliver(batch) {
        tracing::warn!(id = %id, %refused, "profiles dropped: the pipeline did not take them");
    }
}

/// The unwinding counters as last reported.
#[derive(Default)]
struct Unwinding {
    walker: profcol_bpf::UnwindStats,
    cache: crate::unwind::cache::CacheStats,
}

struct Loop {
    id: String,
    output: ReceiverOutput,
    started: Started,
    shutdown: CancellationToken,
    telemetry: Telemetry,
}

impl Loop {
    fn run(
        self,
        config: Config,
        opener: &dyn SourceOpener,
        env: Environment,
    ) -> Result<(), ComponentError> {
        for warning in config.start_warnings() {
            tracing::warn!(id = %self.id, "{warning}");
        }
        let filter = Filter::new(&config);
        let mut source = match opener.open(&config, &filter) {
            Ok(source) => source,
            Err(e) if config.error_mode == ErrorMode::Ignore => {
                // The OTel profiler's error_mode: ignore: the collector runs on without
                // this receiver.
                tracing::error!(id = %self.id, "cannot start the sampler: {e}; error_mode is ignore, so the collector runs on without this receiver");
                return Ok(());
            }
            Err(e) => {
                return Err(ComponentError::caused_by(
                    format!("{}: cannot start the sampler", self.id),
                    e,
                ));
            }
        };
        let interval = config.reporter_interval.max(Duration::from_millis(1));
        let jitter = config.reporter_jitter;
        let mut random = XorShift::seeded();
        let mut engine = Engine::new(config, env);
        engine.set_sample_clock(source.sample_clock());
        self.started.ready();
        tracing::info!(id = %self.id, processes = engine.stats().processes_tracked, "profiling receiver started");
        let mut reported = Stats::default();
        let mut reported_lost = Lost::default();
        let mut reported_unwinding = Unwinding::default();
        let flusher = Flusher::start(&self.id, self.output.clone());
        let mut next_flush = Instant::now() + jittered(interval, jitter, &mut random);
        let result = loop {
            if self.shutdown.is_cancelled() {
                break Ok(());
            }
            let wait = next_flush
                .saturating_duration_since(Instant::now())
                .min(POLL_SLICE);
            let polled = source.poll(wait, &mut |event| match event {
                SourceEvent::Sample(s) => engine.on_sample(s),
                SourceEvent::Process(p) => engine.on_process_event(p),
            });
            if let Err(e) = polled {
                break Err(ComponentError::caused_by(
                    format!("{}: the sampler stopped", self.id),
                    e,
                ));
            }
            if let Some(maps) = source.unwind_maps() {
                engine.sync_unwinding(maps);
            }
            for (pid, refused) in engine.take_refusals() {
                if let Err(e) = source.set_refused(pid, refused) {
                    tracing::debug!(pid, refused, "could not tell the sampler: {e}");
                }
            }
            let now = Instant::now();
            if now >= next_flush {
                self.flush(&mut engine, &flusher, &mut reported);
                self.report_lost(source.as_ref(), &mut reported_lost);
                self.report_unwinding(&engine, source.as_ref(), &mut reported_unwinding);
                // Each wait jittered afresh, as the OTel profiler's reporter does.
                let wait = jittered(interval, jitter, &mut random);
                next_flush += wait;
                if next_flush <= now {
                    next_flush = now + wait;
                }
            }
        };
        // What was sampled before shutdown still goes out.
        engine.drain_deferred();
        self.flush(&mut engine, &flusher, &mut reported);
        engine.add_unsymbolized(flusher.finish());
        self.report_lost(source.as_ref(), &mut reported_lost);
        self.report_unwinding(&engine, source.as_ref(), &mut reported_unwinding);
        result
    }

    fn report_unwinding(
        &self,
        engine: &Engine,
        source: &dyn SampleSource,
        reported: &mut Unwinding,
    ) {
        let id = self.id.as_str();
        if let Some(walker) = source.unwind_stats() {
            let ends: Vec<(&str, u64, u64)> = profcol_bpf::UnwindEnd::ALL
                .iter()
                .enumerate()
                .map(|(i, end)| (end.name(), walker.ends[i], reported.walker.ends[i]))
                .collect();
            self.add_by(
                UNWIND_ENDS_METRIC,
                "User stack walks, by why they ended (outermost and frame_pointer_chain reached the end of the stack).",
                "reason",
                &ends,
            );
            self.add_by(
                UNWIND_FRAMES_METRIC,
                "Callers found by the BPF stack walker, by how.",
                "method",
                &[
                    (
                        "table",
                        walker.frames_from_tables,
                        reported.walker.frames_from_tables,
                    ),
                    (
                        "frame_pointer",
                        walker.frames_from_frame_pointers,
                        reported.walker.frames_from_frame_pointers,
                    ),
                ],
            );
            reported.walker = walker;
        }
        let now = engine.unwinder_stats().cache;
        let labels = [("receiver", id)];
        let gauge = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.telemetry
            .gauge(
                UNWIND_TABLES_METRIC,
                "Unwind tables loaded in BPF.",
                &labels,
            )
            .set(gauge(now.tables));
        self.telemetry
            .gauge(
                UNWIND_TABLE_BYTES_METRIC,
                "Bytes of unwind tables loaded in BPF (unwind_tables_max_memory_mib bounds them).",
                &labels,
            )
            .set(gauge(now.bytes));
        for (name, help, now, before) in [
            (
                UNWIND_TABLES_LOADED_METRIC,
                "Unwind tables built and loaded into BPF.",
                now.loaded,
                reported.cache.loaded,
            ),
            (
                UNWIND_TABLES_EVICTED_METRIC,
                "Unwind tables evicted, least recently used first, to stay in the memory budget.",
                now.evicted,
                reported.cache.evicted,
            ),
            (
                UNWIND_TABLES_NO_ROOM_METRIC,
                "Unwind tables built that found no room beside tables used in the last 10 s: their files use the frame pointer until a retry 30 s later finds room (raise unwind_tables_max_memory_mib if this grows).",
                now.no_room,
                reported.cache.no_room,
            ),
            (
                UNWIND_TABLES_FAILED_METRIC,
                "Mapped files with no unwind table (no or unreadable .eh_frame, refused, too large): their frames use the frame pointer.",
                now.failed,
                reported.cache.failed,
            ),
        ] {
            self.telemetry
                .counter(name, help, &labels)
                .add(now.saturating_sub(before));
        }
        reported.cache = now;
    }

    fn report_lost(&self, source: &dyn SampleSource, reported: &mut Lost) {
        let labels = [("receiver", self.id.as_str())];
        let now = Lost {
            samples: source.lost_samples(),
            process_events: source.lost_process_events(),
        };
        self.telemetry
            .counter(
                SAMPLES_LOST_METRIC,
                "Samples lost because the sampler's ring buffer was full.",
                &labels,
            )
            .add(now.samples.saturating_sub(reported.samples));
        self.telemetry
            .counter(
                PROCESS_EVENTS_LOST_METRIC,
                "Exec, fork and exit events lost because the sampler's ring buffer was full.",
                &labels,
            )
            .add(now.process_events.saturating_sub(reported.process_events));
        *reported = now;
    }

    /// Adds to counter `metric` by receiver and `label`, one row per value of the label:
    /// (value, count now, count reported before; a count that went back adds nothing).
    fn add_by(
        &self,
        metric: &'static str,
        help: &'static str,
        label: &'static str,
        rows: &[(&str, u64, u64)],
    ) {
        for &(value, now, before) in rows {
            self.telemetry
                .counter(
                    metric,
                    help,
                    &[("receiver", self.id.as_str()), (label, value)],
                )
                .add(now.saturating_sub(before));
        }
    }

    fn flush(&self, engine: &mut Engine, flusher: &Flusher, reported: &mut Stats) {
        if let Some(pending) = engine.start_flush() {
            flusher.send(pending);
        }
        engine.add_unsymbolized(flusher.take_unsymbolized());
        let now = engine.stats();
        let labels = [("receiver", self.id.as_str())];
        self.telemetry
            .counter(
                SAMPLES_METRIC,
                "Samples received from the sampler.",
                &labels,
            )
            .add(now.samples_received - reported.samples_received);
        self.telemetry
            .counter(
                SAMPLES_FILTERED_METRIC,
                "Samples dropped because the process filter refused their process.",
                &labels,
            )
            .add(now.samples_filtered - reported.samples_filtered);
        self.add_by(
            SAMPLES_SKIPPED_METRIC,
            "Samples dropped by send_idle_frames, probabilistic_threshold or filter_min_process_age.",
            "reason",
            &[
                (
                    "idle",
                    now.samples_idle_dropped,
                    reported.samples_idle_dropped,
                ),
                (
                    "probabilistic",
                    now.samples_probabilistic_dropped,
                    reported.samples_probabilistic_dropped,
                ),
                (
                    "min_process_age",
                    now.samples_young_dropped,
                    reported.samples_young_dropped,
                ),
            ],
        );
        self.telemetry
            .counter(
                FRAMES_UNSYMBOLIZED_METRIC,
                "Locations emitted without a function name.",
                &labels,
            )
            .add(now.frames_unsymbolized - reported.frames_unsymbolized);
        self.telemetry
            .counter(
                FILES_REJECTED_METRIC,
                "Mapped files refused: a link, FIFO or device at the path, another inode than the mapped one, malformed ELF or Go table.",
                &labels,
            )
            .add(now.files_rejected - reported.files_rejected);
        self.telemetry
            .counter(
                SYMBOLIZER_RESTARTS_METRIC,
                "Times the symbolizer panicked or was gone and was started again.",
                &labels,
            )
            .add(now.symbolizer_restarts - reported.symbolizer_restarts);
        self.add_by(
            CONTEXTS_METRIC,
            "Process contexts (OTEP 4719) read, and refused as malformed or oversized.",
            "result",
            &[
                ("ok", now.contexts_read, reported.contexts_read),
                ("invalid", now.contexts_invalid, reported.contexts_invalid),
            ],
        );
        let walks: Vec<(&str, u64, u64)> = ["complete", "no_thread_state", "read_fault", "depth"]
            .iter()
            .enumerate()
            .map(|(i, end)| (*end, now.python_walks[i], reported.python_walks[i]))
            .collect();
        self.add_by(
            PYTHON_WALKS_METRIC,
            "Samples of CPython processes, by why their Python walk ended.",
            "end",
            &walks,
        );
        self.add_by(
            PYTHON_CODES_METRIC,
            "Code objects read from Python processes (once per process, address and first line).",
            "result",
            &[
                (
                    "ok",
                    now.python_codes_read - now.python_codes_failed,
                    reported.python_codes_read - reported.python_codes_failed,
                ),
                (
                    "failed",
                    now.python_codes_failed,
                    reported.python_codes_failed,
                ),
            ],
        );
        self.telemetry
            .gauge(PROCESSES_METRIC, "Processes tracked.", &labels)
            .set(i64::try_from(now.processes_tracked).unwrap_or(i64::MAX));
        *reported = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::component::ComponentId;
    use profcol_core::pdata::ProfileBatch;
    use tokio::sync::mpsc;

    /// Emits one sample of this process per poll.
    struct FakeSource;

    impl SampleSource for FakeSource {
        fn poll(
            &mut self,
            timeout: Duration,
            sink: &mut dyn FnMut(SourceEvent),
        ) -> Result<(), SourceError> {
            std::thread::sleep(timeout.min(Duration::from_millis(20)));
            let pid = std::process::id();
            sink(SourceEvent::Sample(Sample {
                pid,
                tid: pid,
                comm: "fake".into(),
                time_ns: crate::SystemClock.now_unix_nano(),
                user_stack: vec![FakeSource::poll as *const () as usize as u64],
                ..Sample::default()
            }));
            Ok(())
        }
    }

    use crate::Clock;

    fn environment() -> Environment {
        Environment {
            scan_at_start: false,
            ..Environment::host()
        }
    }

    fn start(
        factory: &ProfilingReceiverFactory,
        config: Config,
    ) -> (
        tokio::task::JoinHandle<Result<(), ComponentError>>,
        mpsc::Receiver<ProfileBatch>,
        CancellationToken,
        Telemetry,
    ) {
        let telemetry = Telemetry::new();
        let receiver = factory
            .create(
                profcol_core::config::Checked::check(config).expect("a valid config"),
                &CreateContext {
                    id: ComponentId::new("profiling", None),
                    telemetry: telemetry.clone(),
                    host: Default::default(),
                },
            )
            .expect("create");
        let (tx, rx) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let (started, _rx) = Started::new();
        let task = tokio::spawn(receiver.run(ReceiverContext {
            id: ComponentId::new("profiling", None),
            output: ReceiverOutput::for_test(vec![tx]),
            started,
            shutdown: shutdown.clone(),
            telemetry: telemetry.clone(),
        }));
        (task, rx, shutdown, telemetry)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_flow_every_interval_and_shutdown_is_prompt() {
        let factory = ProfilingReceiverFactory::new(|_: &Config, _: &Filter| {
            Ok(Box::new(FakeSource) as Box<dyn SampleSource>)
        })
        .with_environment(environment);
        let config = Config {
            reporter_interval: Duration::from_millis(200),
            symbolize: false,
            ..Config::default()
        };
        let (task, mut rx, shutdown, telemetry) = start(&factory, config);
        let batch = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a batch in time")
            .expect("a batch");
        assert!(batch.sample_count() >= 1);
        assert!(ProfileBatch::decode(&batch.encode_to_vec()).is_ok());
        shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops promptly")
            .expect("joins");
        assert!(result.is_ok(), "{result:?}");
        let labels = [("receiver", "profiling")];
        assert!(telemetry.counter(SAMPLES_METRIC, "", &labels).get() >= 1);
    }

    /// Samples of a process that maps an ELF claiming 65535 headers: the bad file shows
    /// in the receiver's metrics, and the receiver runs on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_files_are_counted_in_the_receiver_metrics() {
        let dir = tempfile::tempdir().expect("tmp");
        let huge = dir.path().join("huge.so");
        std::fs::write(&huge, crate::tests::attacker::huge_counts()).expect("write");
        let attacker = crate::tests::attacker::Attacker::spawn(std::slice::from_ref(&huge));
        let pid = attacker.pid();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
        let addr = crate::tests::attacker::mapped_at(&maps, &huge) + 0x10;
        struct Bad(u32, u64);
        impl SampleSource for Bad {
            fn poll(
                &mut self,
                timeout: Duration,
                sink: &mut dyn FnMut(SourceEvent),
            ) -> Result<(), SourceError> {
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                sink(SourceEvent::Sample(Sample {
                    pid: self.0,
                    tid: self.0,
                    user_stack: vec![self.1],
                    ..Sample::default()
                }));
                Ok(())
            }
        }
        let factory = ProfilingReceiverFactory::new(move |_: &Config, _: &Filter| {
            Ok(Box::new(Bad(pid, addr)) as Box<dyn SampleSource>)
        })
        .with_environment(environment);
        let config = Config {
            reporter_interval: Duration::from_millis(200),
            ..Config::default()
        };
        let (task, mut rx, shutdown, telemetry) = start(&factory, config);
        for _ in 0..2 {
            let batch = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("batches go on")
                .expect("a batch");
            assert!(batch.sample_count() >= 1);
        }
        shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("stops promptly")
            .expect("joins");
        assert!(result.is_ok(), "{result:?}");
        let labels = [("receiver", "profiling")];
        assert_eq!(
            telemetry.counter(FILES_REJECTED_METRIC, "", &labels).get(),
            1
        );
        assert_eq!(
            telemetry
                .counter(SYMBOLIZER_RESTARTS_METRIC, "", &labels)
                .get(),
            0
        );
        drop(attacker);
    }

    #[tokio::test]
    async fn a_sampler_that_cannot_start_is_fatal() {
        let factory = ProfilingReceiverFactory::new(|_: &Config, _: &Filter| {
            Err::<Box<dyn SampleSource>, _>(SourceError(
                "BPF refused: operation not permitted".into(),
            ))
        })
        .with_environment(environment);
        let (task, _rx, _shutdown, _t) = start(&factory, Config::default());
        let err = task.await.expect("joins").expect_err("fatal");
        assert_eq!(
            profcol_core::errors::error_chain(&err),
            "profiling: cannot start the sampler: BPF refused: operation not permitted"
        );
    }

    #[tokio::test]
    async fn with_error_mode_ignore_a_sampler_that_cannot_start_is_not_fatal() {
        let factory = ProfilingReceiverFactory::new(|_: &Config, _: &Filter| {
            Err::<Box<dyn SampleSource>, _>(SourceError(
                "BPF refused: operation not permitted".into(),
            ))
        })
        .with_environment(environment);
        let config = Config {
            error_mode: ErrorMode::Ignore,
            ..Config::default()
        };
        let (task, _rx, _shutdown, _t) = start(&factory, config);
        let result = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("returns at once")
            .expect("joins");
        // The receiver ends cleanly: the collector's other pipelines run on.
        assert!(result.is_ok(), "{result:?}");
    }

    /// The distribution's config through the collector's own loader: the receiver's
    /// part passes (the `debug` exporter is not in this test's registry).
    #[test]
    fn an_otel_ebpf_profiler_distribution_config_loads() {
        let path = format!(
            "{}/testdata/otelcol-ebpf-profiler.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("testdata");
        let mut registry = profcol_core::component::Registry::new();
        registry
            .receiver(ProfilingReceiverFactory::new(|_: &Config, _: &Filter| {
                Ok(Box::new(FakeSource) as Box<dyn SampleSource>)
            }))
            .expect("registered");
        let errors = profcol_core::service::load(&[(path, text.clone())], &|_| None, &registry)
            .err()
            .expect("no debug exporter here")
            .0;
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["exporters::debug"], "{errors:?}");
        // A typo in it is found, with the path the collector gives it.
        let typo = text.replace("reporter_jitter:", "reporter_jiter:");
        let errors = profcol_core::service::load(&[("t".into(), typo)], &|_| None, &registry)
            .err()
            .expect("typo")
            .0;
        assert_eq!(errors[0].path, "receivers::profiling::reporter_jiter");
    }

    /// `create` takes a checked config only, so an invalid one never reaches it.
    #[test]
    fn invalid_config_cannot_reach_create() {
        let errors = profcol_core::config::Checked::check(Config {
            max_stack_depth: 500,
            ..Config::default()
        })
        .expect_err("refused");
        assert!(
            errors[0]
                .to_string()
                .starts_with("max_stack_depth: must be from 1 to 127"),
            "{errors:?}"
        );
    }
}
