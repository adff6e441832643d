//! The exporter helper: what stands between the pipelines and an exporter. It owns the
//! sending queue (in memory or on disk), timeout and retry (tower layers around one
//! export attempt), and counts what it sends, fails and cannot queue.

pub mod disk;
mod layers;
pub mod offline;
mod periodic;
mod queue;
mod settings;
mod unwind;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

pub use layers::{Backoff, ExportService, MAX_RETRY_AFTER, TimeoutLayer};
pub use offline::{OfflineCounters, OfflineError, OfflineSettings, OfflineStore, Reachability};
pub use periodic::PeriodicTask;
pub use settings::{
    ExporterHelperSettings, QueueSettings, RetrySettings, validate_helper_blocks,
    validate_offline_block,
};
pub use unwind::{CatchUnwind, panic_counter, panic_message};

use crate::component::{ComponentId, ExportError, Exporter};
use crate::pdata::ProfileBatch;
use crate::telemetry::{Counter, ExporterCounters, Histogram};
use queue::{DiskStore, Entry, PushError, SendingQueue};

type Sender = tower::retry::Retry<Backoff, layers::Timeout<ExportService>>;

/// Why a batch did not enter an exporter.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    #[error("sending queue is full; batch dropped")]
    QueueFull,
    #[error("exporter is shutting down")]
    Closed,
    #[error(transparent)]
    Export(#[from] ExportError),
}

struct Inner {
    id: ComponentId,
    exporter: Arc<dyn Exporter>,
    sender: Sender,
    counters: ExporterCounters,
    /// Panics caught in the exporter or the queue consumer.
    panics: Counter,
    queue: Option<Arc<SendingQueue>>,
    disk: Option<Arc<DiskStore>>,
    /// The last write to the persistent queue failed; batches are held in memory.
    disk_failing: AtomicBool,
    block_on_overflow: bool,
    reachability: Arc<Reachability>,
    offline: Option<Offline>,
    /// One attempt, without retries: how a probe asks whether the backend is back.
    single_attempt: layers::Timeout<ExportService>,
    /// Cancelled once the shutdown deadline has passed: sends still retrying stop, and
    /// with an offline folder their batches are kept there.
    stopping: CancellationToken,
}

/// An exporter's offline mode: its folder, when it last probed the backend, and the
/// replay of the folder running in the background, if any.
struct Offline {
    store: Arc<OfflineStore>,
    settings: OfflineSettings,
    last_probe: std::sync::Mutex<Option<std::time::Instant>>,
    /// A replay of the folder is running.
    replaying: AtomicBool,
    replay_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Cancelled when shutdown starts: a replay stops before its next file or attempt.
    stop_replay: CancellationToken,
}

/// How long consumers get, after the shutdown deadline, to put what they hold into the
/// offline folder.
const OFFLINE_SPILL_WAIT: Duration = Duration::from_secs(10);

/// The pipelines' handle on one exporter (one per exporter id, shared by every pipeline
/// that lists it).
#[derive(Clone)]
pub struct ExporterHandle {
    inner: Arc<Inner>,
    consumers: Arc<tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ExporterHandle {
    /// Wraps `exporter` and starts the queue's consumers. `storage` is the directory of the
    /// storage extension the queue names, if any; `panics` counts panics caught in the
    /// exporter (see [`panic_counter`]).
    pub fn start(
        id: ComponentId,
        exporter: Arc<dyn Exporter>,
        settings: &ExporterHelperSettings,
        counters: ExporterCounters,
        panics: Counter,
        storage: Option<PathBuf>,
    ) -> Result<Self, String> {
        Self::start_with_offline(id, exporter, settings, counters, panics, storage, None)
    }

    /// [`start`](Self::start), with the offline folder `settings.offline` configures,
    /// opened by the caller.
    pub fn start_with_offline(
        id: ComponentId,
        exporter: Arc<dyn Exporter>,
        settings: &ExporterHelperSettings,
        counters: ExporterCounters,
        panics: Counter,
        storage: Option<PathBuf>,
        offline: Option<OfflineStore>,
    ) -> Result<Self, String> {
        let reachability = Arc::new(Reachability::default());
        let attempt = ExportService {
            exporter: exporter.clone(),
            durations: counters.send_duration.clone(),
            reachability: reachability.clone(),
        };
        let single_attempt = TimeoutLayer(settings.timeout).layer(attempt.clone());
        let sender = ServiceBuilder::new()
            .retry(Backoff::new(settings.retry.clone()))
            .layer(TimeoutLayer(settings.timeout))
            .service(attempt);
        let offline = offline.map(|store| {
            let store = Arc::new(store);
            let weak = Arc::downgrade(&store);
            store
                .counters()
                .size
                .set_source(move || weak.upgrade().map_or(0.0, |s| s.size_bytes() as f64));
            Offline {
                store,
                settings: settings.offline.clone(),
                last_probe: std::sync::Mutex::new(None),
                replaying: AtomicBool::new(false),
                replay_task: std::sync::Mutex::new(None),
                stop_replay: CancellationToken::new(),
            }
        });
        let q = &settings.queue;
        let (queue, disk) = if q.enabled {
            let (disk, preloaded) = match storage {
                Some(dir) => {
                    let dir = dir.join(format!("exporter_{}", sanitize(&id.to_string())));
                    let (store, seqs) = DiskStore::open(&dir)
                        .map_err(|e| format!("persistent queue at {}: {e}", dir.display()))?;
                    if !seqs.is_empty() {
                        tracing::info!(exporter = %id, batches = seqs.len(), "resuming batches queued before the last stop");
                    }
                    let entries = seqs
                        .into_iter()
                        .map(|s| Entry {
                            batch: None,
                            seq: Some(s),
                            since: store.written_at(s),
                        })
                        .collect();
                    (Some(Arc::new(store)), entries)
                }
                None => (None, Vec::new()),
            };
            counters
                .queue_capacity
                .set(i64::try_from(q.queue_size).unwrap_or(i64::MAX));
            counters.queue_size.set(preloaded.len() as i64);
            let queue = Arc::new(SendingQueue::new(q.queue_size, preloaded));
            let weak = Arc::downgrade(&queue);
            counters
                .queue_oldest_age
                .set_source(move || weak.upgrade().map_or(0.0, |q| q.oldest_age().as_secs_f64()));
            (Some(queue), disk)
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner {
            id,
            exporter,
            sender,
            counters,
            panics,
            queue,
            disk,
            disk_failing: AtomicBool::new(false),
            block_on_overflow: q.block_on_overflow,
            reachability,
            offline,
            single_attempt,
            stopping: CancellationToken::new(),
        });
        let consumers = if inner.queue.is_some() {
            (0..q.num_consumers)
                .map(|_| tokio::spawn(consume_loop(inner.clone())))
                .collect()
        } else {
            Vec::new()
        };
        Ok(ExporterHandle {
            inner,
            consumers: Arc::new(tokio::sync::Mutex::new(consumers)),
        })
    }

    pub fn id(&self) -> &ComponentId {
        &self.inner.id
    }

    /// Takes a batch from a pipeline: queues it (waiting for room only with
    /// `block_on_overflow`), or without a queue sends it now, retries included.
    pub async fn consume(&self, batch: ProfileBatch) -> Result<(), ConsumeError> {
        let inner = &self.inner;
        let samples = batch.sample_count() as u64;
        if let Some(offline) = &inner.offline
            && goes_offline(inner, offline)
        {
            let kept = keep_offline(inner, offline, batch).await;
            probe_if_due(inner, offline);
            return kept.map_err(ConsumeError::Export);
        }
        let Some(queue) = &inner.queue else {
            return send(inner, batch).await.map_err(ConsumeError::Export);
        };
        let reserved = if inner.block_on_overflow {
            queue.reserve().await
        } else {
            queue.try_reserve()
        };
        if let (Err(PushError::Full), Some(offline)) = (&reserved, &inner.offline) {
            // A full queue while the backend is slow or away: disk, not the floor.
            return keep_offline(inner, offline, batch)
                .await
                .map_err(ConsumeError::Export);
        }
        if let Err(e) = reserved {
            inner.counters.enqueue_failed.add(samples);
            return Err(match e {
                PushError::Full => {
                    tracing::warn!(exporter = %inner.id, samples, "sending queue is full; dropping a batch");
                    ConsumeError::QueueFull
                }
                PushError::Closed => ConsumeError::Closed,
            });
        }
        let seq = match &inner.disk {
            Some(disk) => {
                let (disk, b) = (disk.clone(), batch.clone());
                match tokio::task::spawn_blocking(move || disk.write(&b)).await {
                    Ok(Ok(seq)) => {
                        if inner.disk_failing.swap(false, Ordering::Relaxed) {
                            tracing::info!(exporter = %inner.id, "the persistent queue is writable again");
                        }
                        Some(seq)
                    }
                    Ok(Err(e)) => {
                        // Nothing is lost to a disk fault: the batch waits in memory (its
                        // place is reserved) and is sent from there; only a crash before
                        // then would lose it. The next batch tries the disk again.
                        if !inner.disk_failing.swap(true, Ordering::Relaxed) {
                            let why = if disk::is_retryable_io(&e) {
                                "the disk is full; holding batches in memory until it has room"
                            } else {
                                "holding batches in memory until it can be written"
                            };
                            tracing::error!(exporter = %inner.id, error = %e, "could not write to the persistent queue: {why}");
                        }
                        None
                    }
                    Err(_) => {
                        queue.unreserve();
                        return Err(ConsumeError::Closed);
                    }
                }
            }
            None => None,
        };
        queue.push_reserved(Entry {
            batch: Some(batch),
            seq,
            since: SystemTime::now(),
        });
        inner.counters.queue_size.add(1);
        Ok(())
    }

    /// Stops taking batches, lets the consumers drain the queue for up to `deadline`, then
    /// shuts the exporter down. A persistent queue keeps what was not sent.
    pub async fn shutdown(&self, deadline: Duration) {
        let offline = self.inner.offline.as_ref();
        if let Some(o) = offline {
            o.stop_replay.cancel();
        }
        if let Some(q) = &self.inner.queue {
            q.close();
        }
        let mut consumers = std::mem::take(&mut *self.consumers.lock().await);
        if tokio::time::timeout(deadline, join_in_order(&mut consumers))
            .await
            .is_err()
        {
            let left = self.inner.queue.as_ref().map_or(0, |q| q.len());
            tracing::warn!(exporter = %self.inner.id, left, "shutdown timeout reached with batches unsent");
            if offline.is_some() {
                // What consumers hold and what is queued goes to the offline folder.
                self.inner.stopping.cancel();
                let _ =
                    tokio::time::timeout(OFFLINE_SPILL_WAIT, join_in_order(&mut consumers)).await;
            }
            for c in &consumers {
                c.abort();
            }
        }
        if let Some(o) = offline {
            let task = o
                .replay_task
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(mut task) = task
                && tokio::time::timeout(OFFLINE_SPILL_WAIT, &mut task)
                    .await
                    .is_err()
            {
                task.abort();
            }
        }
        self.spill_to_disk().await;
        self.spill_offline().await;
        if let Err(e) = self.inner.exporter.shutdown().await {
            tracing::warn!(exporter = %self.inner.id, error = %e, "exporter shutdown failed");
        }
    }
}

impl ExporterHandle {
    /// What a persistent queue still holds only in memory (the disk could not take it when
    /// it came) is written now, where there is room, so that the next start sends it.
    async fn spill_to_disk(&self) {
        let (Some(queue), Some(disk)) = (&self.inner.queue, &self.inner.disk) else {
            return;
        };
        let (mut kept, mut lost) = (0usize, 0usize);
        while let Some(entry) = queue.pop().await {
            let (Some(batch), None) = (entry.batch, entry.seq) else {
                continue; // On disk already.
            };
            let disk = disk.clone();
            match tokio::task::spawn_blocking(move || disk.write(&batch)).await {
                Ok(Ok(_)) => kept += 1,
                Ok(Err(e)) => {
                    lost += 1;
                    tracing::debug!(exporter = %self.inner.id, error = %e, "could not keep a batch on disk");
                }
                Err(_) => lost += 1,
            }
        }
        if kept > 0 {
            tracing::info!(exporter = %self.inner.id, batches = kept, "kept batches held in memory on disk for the next start");
        }
        if lost > 0 {
            tracing::error!(exporter = %self.inner.id, batches = lost, "batches held in memory could not be written to the persistent queue and are lost");
        }
    }
}

impl ExporterHandle {
    /// What the queue still holds after the shutdown deadline goes to the offline folder,
    /// where there is one, rather than being lost.
    async fn spill_offline(&self) {
        let (Some(queue), Some(offline)) = (&self.inner.queue, &self.inner.offline) else {
            return;
        };
        while let Some(entry) = queue.pop().await {
            if let Some(batch) = entry.batch {
                let _ = keep_offline(&self.inner, offline, batch).await;
            }
        }
    }

    /// Sends every batch in the offline folder, oldest first, each removed once the
    /// backend took it (or refused it for good); stops at the first that cannot be sent
    /// for now, which stays. What `profcol replay` runs, on a handle without a queue.
    pub async fn replay_offline(&self) -> ReplayReport {
        let Some(offline) = &self.inner.offline else {
            return ReplayReport::default();
        };
        if offline.replaying.swap(true, Ordering::AcqRel) {
            return ReplayReport {
                stopped: Some("a replay of this folder is already running".into()),
                ..ReplayReport::default()
            };
        }
        let report = replay(&self.inner, offline, ReplayMode::All).await;
        offline.replaying.store(false, Ordering::Release);
        report
    }
}

/// What a replay of the offline folder did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// Batches and samples the backend took.
    pub sent_batches: u64,
    pub sent_samples: u64,
    /// Batches dropped: unreadable, or refused for good by the backend.
    pub dropped_batches: u64,
    /// Batches left for later, because the backend could not be reached.
    pub left_batches: u64,
    /// Why the replay stopped early, if it did.
    pub stopped: Option<String>,
}

/// Whether batches go to disk now: always, or once attempts have failed for `after`.
fn goes_offline(inner: &Inner, offline: &Offline) -> bool {
    offline.settings.always()
        || inner
            .reachability
            .unreachable_for()
            .is_some_and(|down_for| down_for >= offline.settings.after)
}

/// While offline, once per probe interval: one attempt with the folder's oldest batch,
/// in the background (the pipeline does not wait for it). If the backend takes it, the
/// rest of the folder follows with `replay_on_recovery`, and new batches are sent again.
fn probe_if_due(inner: &Arc<Inner>, offline: &Offline) {
    if offline.settings.always() {
        return;
    }
    {
        let mut last = offline
            .last_probe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < offline.settings.probe_interval) {
            return;
        }
        *last = Some(now);
    }
    let mode = if offline.settings.replay_on_recovery {
        ReplayMode::ProbeThenAll
    } else {
        ReplayMode::ProbeOnly
    };
    start_replay(inner, offline, mode);
}

/// Writes `batch` to the offline folder, off the async workers.
async fn keep_offline(
    inner: &Inner,
    offline: &Offline,
    batch: ProfileBatch,
) -> Result<(), ExportError> {
    let samples = batch.sample_count() as u64;
    let store = offline.store.clone();
    let written = tokio::task::spawn_blocking(move || store.write(&batch)).await;
    match written {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            inner.counters.send_failed.add(samples);
            tracing::error!(exporter = %inner.id, dir = %offline.store.dir().display(), samples, error = %e, "could not write a batch to the offline directory; dropping it");
            Err(ExportError::permanent(format!(
                "writing to the offline directory failed: {e}"
            )))
        }
        Err(e) => Err(ExportError::permanent(format!(
            "the offline write task failed: {e}"
        ))),
    }
}

/// After the backend took a batch: sends the offline folder, once, in the background.
fn replay_on_recovery(inner: &Arc<Inner>) {
    let Some(offline) = &inner.offline else {
        return;
    };
    if offline.settings.replay_on_recovery
        && !offline.settings.always()
        && !offline.store.is_empty()
    {
        start_replay(inner, offline, ReplayMode::All);
    }
}

/// Runs a replay in the background unless one runs or the exporter is stopping.
fn start_replay(inner: &Arc<Inner>, offline: &Offline, mode: ReplayMode) {
    if offline.stop_replay.is_cancelled() || offline.replaying.swap(true, Ordering::AcqRel) {
        return;
    }
    let task_inner = inner.clone();
    let task = tokio::spawn(async move {
        let inner = task_inner;
        let Some(offline) = &inner.offline else {
            return;
        };
        let report = replay(&inner, offline, mode).await;
        offline.replaying.store(false, Ordering::Release);
        if report.sent_batches > 0 {
            tracing::info!(exporter = %inner.id, sent_batches = report.sent_batches, sent_samples = report.sent_samples, left_batches = report.left_batches, "the backend answers again; sent batches from the offline directory");
        }
    });
    *offline
        .replay_task
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
}

/// What a replay sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplayMode {
    /// Every file, each with retries.
    All,
    /// The oldest file, one attempt; then, if it got through, the rest.
    ProbeThenAll,
    /// The oldest file, one attempt.
    ProbeOnly,
}

async fn replay(inner: &Inner, offline: &Offline, mode: ReplayMode) -> ReplayReport {
    let mut report = ReplayReport::default();
    let store = offline.store.clone();
    // Expired files are not sent.
    let _ = tokio::task::spawn_blocking(move || store.make_room(0)).await;
    let files = offline.store.list();
    let mut left = files.len() as u64;
    let counters = offline.store.counters();
    for (n, file) in files.into_iter().enumerate() {
        if offline.stop_replay.is_cancelled() {
            report.stopped = Some("the exporter is shutting down".into());
            break;
        }
        let probe = n == 0 && mode != ReplayMode::All;
        if n > 0 && mode == ReplayMode::ProbeOnly {
            break;
        }
        let store = offline.store.clone();
        let read = tokio::task::spawn_blocking(move || store.read(&file)).await;
        let batch = match read {
            Ok(Ok(batch)) => batch,
            Ok(Err(offline::ReadError::Gone)) => {
                // Made room for newer batches meanwhile (and counted then).
                offline.store.remove(&file);
                left -= 1;
                continue;
            }
            Ok(Err(offline::ReadError::Damaged(e))) => {
                tracing::error!(exporter = %inner.id, error = %e, "dropping an unreadable file from the offline directory");
                offline.store.remove(&file);
                counters.dropped.add(file.samples);
                report.dropped_batches += 1;
                left -= 1;
                continue;
            }
            Err(e) => {
                report.stopped = Some(format!("the read task failed: {e}"));
                break;
            }
        };
        let samples = batch.sample_count() as u64;
        let attempts = send_attempts(inner, batch, !probe);
        let sent = tokio::select! {
            sent = attempts => sent,
            () = offline.stop_replay.cancelled() => {
                report.stopped = Some("the exporter is shutting down".into());
                break;
            }
        };
        match sent {
            Ok(()) => {
                offline.store.remove(&file);
                counters.replayed.add(samples);
                report.sent_batches += 1;
                report.sent_samples += samples;
            }
            Err(e) if e.is_retryable() => {
                report.stopped = Some(e.to_string());
                break;
            }
            Err(e) => {
                tracing::error!(exporter = %inner.id, error = %e, "the backend refused a batch from the offline directory for good; dropping it");
                offline.store.remove(&file);
                counters.dropped.add(samples);
                report.dropped_batches += 1;
            }
        }
        left -= 1;
    }
    report.left_batches = left;
    report
}

/// Waits for the tasks one after another, dropping each once it ended, so that a wait cut
/// short leaves exactly the unfinished ones.
async fn join_in_order(handles: &mut Vec<tokio::task::JoinHandle<()>>) {
    while let Some(last) = handles.last_mut() {
        let _ = last.await;
        handles.pop();
    }
}

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One attempt after another until success, a permanent error, or the retry budget ends.
/// An exporter that panics fails the batch permanently (it would panic again) and is
/// counted; the caller's task carries on.
async fn send(inner: &Arc<Inner>, batch: ProfileBatch) -> Result<(), ExportError> {
    let samples = batch.sample_count() as u64;
    // Kept for the offline folder should every attempt fail (a clone shares the data).
    let kept = inner.offline.as_ref().map(|_| batch.clone());
    let result = match &inner.offline {
        // Past the shutdown deadline, retries give way to the offline folder.
        Some(_) => tokio::select! {
            sent = send_attempts(inner, batch, true) => sent,
            () = inner.stopping.cancelled() => Err(ExportError::retryable("the exporter is shutting down")),
        },
        None => send_attempts(inner, batch, true).await,
    };
    match (&result, kept, &inner.offline) {
        (Ok(()), ..) => replay_on_recovery(inner),
        (Err(e), Some(batch), Some(offline)) if e.is_retryable() => {
            tracing::warn!(exporter = %inner.id, samples, error = %e, "export failed after retries; keeping the batch in the offline directory");
            return keep_offline(inner, offline, batch).await;
        }
        _ => {}
    }
    if let Err(e) = &result {
        inner.counters.send_failed.add(samples);
        let kind = if e.is_retryable() {
            "gave up after retries"
        } else {
            "permanent error, not retried"
        };
        tracing::error!(exporter = %inner.id, samples, error = %e, "export failed: {kind}; dropping the batch");
    }
    result
}

/// The attempts themselves (one, or with retries), counting what was sent and how late.
async fn send_attempts(inner: &Inner, batch: ProfileBatch, retry: bool) -> Result<(), ExportError> {
    let samples = batch.sample_count() as u64;
    let data_times = data_times(&batch);
    let (mut sender, mut single) = (inner.sender.clone(), inner.single_attempt.clone());
    let attempts = async move {
        if retry {
            match sender.ready().await {
                Ok(s) => s.call(batch).await,
                Err(e) => Err(e),
            }
        } else {
            match single.ready().await {
                Ok(s) => s.call(batch).await,
                Err(e) => Err(e),
            }
        }
    };
    let result = match CatchUnwind::new(attempts).await {
        Ok(r) => r,
        Err(message) => {
            inner.panics.add(1);
            tracing::error!(exporter = %inner.id, panic = %message, "the exporter panicked on a batch; it carries on with the next");
            Err(ExportError::permanent(format!(
                "the exporter panicked: {message}"
            )))
        }
    };
    if result.is_ok() {
        inner.counters.sent.add(samples);
        observe_latency(&inner.counters.latency, &data_times, SystemTime::now());
    }
    result
}

/// When each sample's data is from, in Unix nanoseconds (its earliest timestamp, else
/// its profile's time), as runs of (time, samples): samples of one profile without
/// timestamps are one run. Samples with no time at all are left out.
fn data_times(batch: &ProfileBatch) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for profile in batch.profiles() {
        for sample in profile.samples.iter() {
            let t = sample
                .timestamps_unix_nano
                .iter()
                .min()
                .unwrap_or(profile.time_unix_nano);
            match runs.last_mut() {
                _ if t == 0 => {}
                Some((last, n)) if *last == t => *n += 1,
                _ => runs.push((t, 1)),
            }
        }
    }
    runs
}

/// Adds each sample's age at `acknowledged` to the latency histogram, in one update.
fn observe_latency(latency: &Histogram, data_times: &[(u64, u64)], acknowledged: SystemTime) {
    if data_times.is_empty() {
        return;
    }
    let now = acknowledged
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut counts = vec![0u64; latency.buckets()];
    let mut sum = 0.0;
    for &(t, n) in data_times {
        // Data stamped in the future (a skewed clock) is as late as data from now.
        let age = now.saturating_sub(t) as f64 / 1e9;
        counts[latency.bucket_of(age)] += n;
        sum += age * n as f64;
    }
    latency.add_counts(&counts, sum);
}

/// A queue consumer: takes entries until the queue is closed and drained. A panic while
/// handling one entry is caught and counted, the entry is dropped (it would panic again)
/// and the consumer starts over on the next, so the queue stays intact and served.
async fn consume_loop(inner: Arc<Inner>) {
    let Some(queue) = inner.queue.clone() else {
        return;
    };
    while let Some(entry) = queue.pop().await {
        inner.counters.queue_size.add(-1);
        let seq = entry.seq;
        let samples = entry.batch.as_ref().map_or(0, |b| b.sample_count() as u64);
        if let Err(message) = CatchUnwind::new(consume_entry(&inner, entry)).await {
            inner.panics.add(1);
            inner.counters.send_failed.add(samples);
            tracing::error!(exporter = %inner.id, panic = %message, "a queue consumer panicked; dropping its batch and restarting it");
            if let (Some(seq), Some(disk)) = (seq, &inner.disk) {
                disk.remove(seq);
            }
        }
    }
}

async fn consume_entry(inner: &Arc<Inner>, entry: Entry) {
    let batch = match (entry.batch, entry.seq, &inner.disk) {
        (Some(b), _, _) => b,
        (None, Some(seq), Some(disk)) => match disk.read(seq) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(exporter = %inner.id, error = %e, "dropping a damaged batch from the persistent queue");
                disk.remove(seq);
                return;
            }
        },
        _ => return,
    };
    // Sent or given up on: either way it leaves the disk. A crash before this point
    // sends it again after restart (at least once).
    let _ = send(inner, batch).await;
    if let (Some(seq), Some(disk)) = (entry.seq, &inner.disk) {
        disk.remove(seq);
    }
}

#[cfg(test)]
mod tests;
