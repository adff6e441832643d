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

/// The sending queue's folder (its storage extension's) could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("persistent queue at {}", dir.display())]
pub struct PersistentQueueError {
    pub dir: PathBuf,
    #[source]
    pub source: std::io::Error,
}

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
    /// exporter (see [`panic_counter`]); `offline` is the folder `settings.offline`
    /// configures, opened by the caller (the service graph opens it).
    pub fn start(
        id: ComponentId,
        exporter: Arc<dyn Exporter>,
        settings: &ExporterHelperSettings,
        counters: ExporterCounters,
        panics: Counter,
        storage: Option<PathBuf>,
        offline: Option<OfflineStore>,
    ) -> Result<Self, PersistentQueueError> {
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
                    let (store, seqs) =
                        DiskStore::open(&dir).map_err(|source| PersistentQueueError {
                            dir: dir.clone(),
                            source,
                        })?;
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
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::pdata::DictionaryBuilder;
    use crate::pdata::{Profile, ResourceProfiles, Sample, ScopeProfiles};
    use crate::telemetry::Telemetry;

    /// Plays back a script of outcomes, one per attempt, then succeeds.
    struct Scripted {
        script: Mutex<Vec<Result<(), ExportError>>>,
        attempts: AtomicUsize,
        delivered: AtomicUsize,
        delay: Duration,
    }

    impl Scripted {
        fn new(script: Vec<Result<(), ExportError>>, delay: Duration) -> Arc<Self> {
            let mut script = script;
            script.reverse();
            Arc::new(Scripted {
                script: Mutex::new(script),
                attempts: AtomicUsize::new(0),
                delivered: AtomicUsize::new(0),
                delay,
            })
        }
    }

    #[async_trait]
    impl Exporter for Scripted {
        async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            let outcome = self.script.lock().expect("lock").pop().unwrap_or(Ok(()));
            if outcome.is_ok() {
                self.delivered
                    .fetch_add(batch.sample_count(), Ordering::SeqCst);
            }
            outcome
        }
    }

    fn batch(samples: usize) -> ProfileBatch {
        let b = DictionaryBuilder::new();
        let mut profile = Profile::default();
        for _ in 0..samples {
            profile.samples.push(&Sample {
                values: &[1],
                ..Default::default()
            });
        }
        ProfileBatch::from_parts(
            b.finish().expect("an empty dictionary fits"),
            vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        )
    }

    fn settings(queue: bool) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: Duration::from_secs(1),
            retry: RetrySettings {
                initial_interval: Duration::from_millis(100),
                max_interval: Duration::from_secs(1),
                max_elapsed_time: Duration::from_secs(10),
                ..RetrySettings::default()
            },
            queue: QueueSettings {
                enabled: queue,
                num_consumers: 2,
                queue_size: 4,
                ..QueueSettings::default()
            },
            offline: OfflineSettings::default(),
        }
    }

    fn counters(t: &Telemetry) -> ExporterCounters {
        ExporterCounters::new(t, "scripted")
    }

    fn panics(t: &Telemetry) -> crate::telemetry::Counter {
        panic_counter(t, "exporter/scripted")
    }

    fn value(t: &Telemetry, name: &str) -> i64 {
        t.value(name, &[("exporter", "scripted")]).unwrap_or(0)
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_are_retried_until_success() {
        let t = Telemetry::new();
        let exp = Scripted::new(
            vec![
                Err(ExportError::retryable("down")),
                Err(ExportError::retryable("down")),
            ],
            Duration::ZERO,
        );
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        h.consume(batch(3)).await.expect("sent in the end");
        assert_eq!(exp.attempts.load(Ordering::SeqCst), 3);
        assert_eq!(exp.delivered.load(Ordering::SeqCst), 3);
        assert_eq!(value(&t, "otelcol_exporter_sent_profile_samples_total"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried_and_are_counted() {
        let t = Telemetry::new();
        let exp = Scripted::new(
            vec![Err(ExportError::permanent("invalid argument"))],
            Duration::ZERO,
        );
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        let err = h.consume(batch(2)).await.expect_err("permanent");
        assert!(err.to_string().contains("invalid argument"));
        assert_eq!(exp.attempts.load(Ordering::SeqCst), 1);
        assert_eq!(
            value(&t, "otelcol_exporter_send_failed_profile_samples_total"),
            2
        );
    }

    #[tokio::test(start_paused = true)]
    async fn slow_attempts_time_out_and_the_retry_budget_ends() {
        let t = Telemetry::new();
        // Every attempt takes 5 s against a 1 s timeout.
        let exp = Scripted::new(Vec::new(), Duration::from_secs(5));
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        let started = tokio::time::Instant::now();
        let err = h.consume(batch(1)).await.expect_err("gives up");
        assert!(err.to_string().contains("timed out"), "{err}");
        // Within max_elapsed_time (10 s) plus one attempt.
        assert!(
            started.elapsed() <= Duration::from_secs(12),
            "{:?}",
            started.elapsed()
        );
        assert!(exp.attempts.load(Ordering::SeqCst) >= 5);
        assert_eq!(exp.delivered.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured() {
        let t = Telemetry::new();
        let exp = Scripted::new(
            vec![Err(ExportError::Retryable {
                message: "throttled".into(),
                retry_after: Some(Duration::from_secs(7)),
            })],
            Duration::ZERO,
        );
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        let started = tokio::time::Instant::now();
        h.consume(batch(1)).await.expect("sent");
        assert!(started.elapsed() >= Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_and_counts_unless_told_to_block() {
        let t = Telemetry::new();
        // Consumers are stuck for a minute, so the queue (4) fills.
        let exp = Scripted::new(Vec::new(), Duration::from_secs(60));
        let mut s = settings(true);
        s.timeout = Duration::from_secs(120);
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &s,
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        let mut refused = 0;
        for _ in 0..10 {
            if h.consume(batch(1)).await.is_err() {
                refused += 1;
            }
            tokio::task::yield_now().await;
        }
        // 2 taken by consumers, 4 queued, 4 refused.
        assert_eq!(refused, 4);
        assert_eq!(
            value(&t, "otelcol_exporter_enqueue_failed_profile_samples_total"),
            4
        );
        assert_eq!(value(&t, "otelcol_exporter_queue_capacity"), 4);
        h.shutdown(Duration::from_secs(600)).await;
        assert_eq!(exp.delivered.load(Ordering::SeqCst), 6);
    }

    #[tokio::test]
    async fn persistent_queue_keeps_unsent_batches_for_the_next_start() {
        let dir = crate::testkit::scratch_path("pq");
        let t = Telemetry::new();
        let id = ComponentId::new("scripted", None);
        let mut s = settings(true);
        s.queue.num_consumers = 1;
        // First run: the destination hangs; shut down before anything is sent.
        let stuck = Scripted::new(Vec::new(), Duration::from_secs(3600));
        let h = ExporterHandle::start(
            id.clone(),
            stuck,
            &s,
            counters(&t),
            panics(&t),
            Some(dir.clone()),
            None,
        )
        .expect("start");
        for _ in 0..3 {
            h.consume(batch(2)).await.expect("queued");
        }
        h.shutdown(Duration::from_millis(50)).await;
        // Second run: all three come back and are delivered.
        let ok = Scripted::new(Vec::new(), Duration::ZERO);
        let h = ExporterHandle::start(
            id,
            ok.clone(),
            &s,
            counters(&t),
            panics(&t),
            Some(dir.clone()),
            None,
        )
        .expect("restart");
        h.shutdown(Duration::from_secs(5)).await;
        assert_eq!(ok.delivered.load(Ordering::SeqCst), 6);
        let left = std::fs::read_dir(dir.join("exporter_scripted"))
            .expect("dir")
            .count();
        assert_eq!(left, 0, "sent batches leave the disk");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Panics on every batch of exactly `cursed` samples; records the rest.
    struct Cursed {
        cursed: usize,
        delivered: AtomicUsize,
    }

    #[async_trait]
    impl Exporter for Cursed {
        async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
            tokio::task::yield_now().await;
            if batch.sample_count() == self.cursed {
                panic!("cursed batch");
            }
            self.delivered
                .fetch_add(batch.sample_count(), Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_panicking_exporter_is_caught_counted_and_the_consumer_carries_on() {
        let t = Telemetry::new();
        let exp = Arc::new(Cursed {
            cursed: 13,
            delivered: AtomicUsize::new(0),
        });
        let mut s = settings(true);
        s.queue.num_consumers = 1;
        s.queue.queue_size = 16;
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &s,
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        for n in [1, 13, 2, 13, 3] {
            h.consume(batch(n)).await.expect("queued");
        }
        h.shutdown(Duration::from_secs(5)).await;
        // The one consumer survived both panics and sent what came after them.
        assert_eq!(exp.delivered.load(Ordering::SeqCst), 6);
        assert_eq!(
            t.value(
                "profcol_component_panics_total",
                &[("component", "exporter/scripted")]
            ),
            Some(2)
        );
        assert_eq!(
            value(&t, "otelcol_exporter_send_failed_profile_samples_total"),
            26
        );
        assert_eq!(value(&t, "otelcol_exporter_sent_profile_samples_total"), 6);
    }

    #[tokio::test]
    async fn without_a_queue_a_panic_is_a_permanent_error_for_that_batch_only() {
        let t = Telemetry::new();
        let exp = Arc::new(Cursed {
            cursed: 5,
            delivered: AtomicUsize::new(0),
        });
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        let err = h.consume(batch(5)).await.expect_err("panicked");
        assert!(err.to_string().contains("panicked: cursed batch"), "{err}");
        h.consume(batch(4)).await.expect("the next one goes");
        assert_eq!(exp.delivered.load(Ordering::SeqCst), 4);
        assert_eq!(panics(&t).get(), 1);
    }

    fn backoff(retry: RetrySettings) -> Backoff {
        Backoff::new(retry)
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_arithmetic_saturates_at_max_interval() {
        let huge = [
            (f64::MAX, Duration::from_secs(30), 1.0),
            (1e300, Duration::MAX, 0.5),
            (1.5, Duration::MAX, 1.0),
        ];
        for (multiplier, max_interval, randomization_factor) in huge {
            let mut b = backoff(RetrySettings {
                initial_interval: Duration::from_secs(u64::MAX / 2),
                multiplier,
                max_interval,
                randomization_factor,
                max_elapsed_time: Duration::ZERO,
                ..RetrySettings::default()
            });
            for _ in 0..200 {
                let wait = b.next_wait(None).expect("retries forever");
                assert!(wait <= max_interval, "{wait:?} > {max_interval:?}");
            }
        }
        // Ordinary settings with a huge multiplier: from the second wait on, at the cap.
        let mut b = backoff(RetrySettings {
            initial_interval: Duration::from_secs(1),
            multiplier: 1e18,
            randomization_factor: 0.0,
            max_interval: Duration::from_secs(30),
            max_elapsed_time: Duration::MAX,
            ..RetrySettings::default()
        });
        assert_eq!(b.next_wait(None), Some(Duration::from_secs(1)));
        for _ in 0..10 {
            assert_eq!(b.next_wait(None), Some(Duration::from_secs(30)));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn huge_retry_after_gives_up_within_a_budget_and_is_capped_without_one() {
        let enormous = [
            Duration::from_secs(u64::MAX),
            Duration::MAX,
            // What a far-future HTTP date (year 9999) comes to.
            Duration::from_secs(253_402_300_799),
        ];
        for retry_after in enormous {
            let mut budget = backoff(RetrySettings::default());
            assert_eq!(budget.next_wait(Some(retry_after)), None, "{retry_after:?}");
            let mut forever = backoff(RetrySettings {
                max_elapsed_time: Duration::ZERO,
                ..RetrySettings::default()
            });
            assert_eq!(forever.next_wait(Some(retry_after)), Some(MAX_RETRY_AFTER));
        }
        // Through the helper: a server asking for u64::MAX seconds ends the retries at once
        // instead of holding the batch for ever.
        let t = Telemetry::new();
        let exp = Scripted::new(
            vec![Err(ExportError::Retryable {
                message: "come back never".into(),
                retry_after: Some(Duration::from_secs(u64::MAX)),
            })],
            Duration::ZERO,
        );
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        let started = tokio::time::Instant::now();
        let err = h.consume(batch(1)).await.expect_err("gave up");
        assert!(err.to_string().contains("come back never"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(exp.attempts.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn bad_backoff_numbers_are_config_errors_with_their_paths() {
        use crate::config::{Validate, parse_typed, parse_yaml};
        let cases = [
            ("multiplier: .nan", "retry_on_failure::multiplier"),
            ("multiplier: .inf", "retry_on_failure::multiplier"),
            ("multiplier: -2", "retry_on_failure::multiplier"),
            ("multiplier: 0.5", "retry_on_failure::multiplier"),
            (
                "randomization_factor: .nan",
                "retry_on_failure::randomization_factor",
            ),
            (
                "randomization_factor: 1.5",
                "retry_on_failure::randomization_factor",
            ),
            (
                "randomization_factor: -0.1",
                "retry_on_failure::randomization_factor",
            ),
            (
                "randomization_factor: -.inf",
                "retry_on_failure::randomization_factor",
            ),
        ];
        for (yaml, path) in cases {
            let retry: RetrySettings =
                parse_typed(&parse_yaml("t.yaml", yaml).expect("yaml")).expect(yaml);
            let errors = validate_helper_blocks(&retry, &QueueSettings::default());
            let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
            assert_eq!(paths, [path], "{yaml}: {errors:?}");
        }
        let both: RetrySettings = parse_typed(
            &parse_yaml("t.yaml", "{multiplier: .nan, randomization_factor: .nan}").expect("yaml"),
        )
        .expect("parses");
        assert_eq!(both.validate().len(), 2, "every error is reported");
        assert!(RetrySettings::default().validate().is_empty());
    }

    fn names_in(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// A real full disk: a 64 KiB tmpfs, filled. Batches accepted while it is full wait in
    /// memory and are all delivered; no temporary file is left taking space; once there is
    /// room again, batches are on disk before they are sent.
    #[tokio::test]
    async fn a_full_disk_loses_no_batch_and_leaves_no_temp_file() {
        let Some(disk) = disk::testing::TinyDisk::mount("pq", 64) else {
            return;
        };
        let t = Telemetry::new();
        let mut s = settings(true);
        s.queue.num_consumers = 1;
        s.queue.queue_size = 16;
        // Slow enough that queued batches are still queued when the test looks.
        let exp = Scripted::new(Vec::new(), Duration::from_millis(300));
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &s,
            counters(&t),
            panics(&t),
            Some(disk.dir.clone()),
            None,
        )
        .expect("start");
        let queue_dir = disk.dir.join("exporter_scripted");
        disk.fill(&disk.dir.join("filler"));
        // Each batch is several KiB encoded, more than the few bytes a full tmpfs may have.
        for _ in 0..4 {
            h.consume(batch(2000))
                .await
                .expect("accepted while the disk is full");
        }
        assert_eq!(
            names_in(&queue_dir),
            Vec::<String>::new(),
            "nothing half-written stays"
        );
        std::fs::remove_file(disk.dir.join("filler")).expect("free the disk");
        h.consume(batch(7)).await.expect("accepted");
        let on_disk = names_in(&queue_dir);
        assert_eq!(on_disk.len(), 1, "{on_disk:?}");
        assert!(on_disk[0].ends_with(".pb"), "{on_disk:?}");
        h.shutdown(Duration::from_secs(10)).await;
        assert_eq!(exp.delivered.load(Ordering::SeqCst), 4 * 2000 + 7);
        assert_eq!(names_in(&queue_dir), Vec::<String>::new());
        assert_eq!(
            value(&t, "otelcol_exporter_enqueue_failed_profile_samples_total"),
            0
        );
    }

    #[tokio::test]
    async fn the_persistent_queue_sweeps_temp_files_and_is_private() {
        let root = crate::testkit::scratch_path("pq-sweep");
        let queue_dir = root.join("exporter_scripted");
        std::fs::create_dir_all(&queue_dir).expect("dir");
        // What a crash mid-write leaves: a temp file beside a whole one.
        std::fs::write(queue_dir.join("00000000000000000003.tmp"), b"half a batch").expect("tmp");
        let whole = queue::DiskStore::open(&root.join("scratch"))
            .expect("open")
            .0
            .write(&batch(3))
            .expect("write");
        std::fs::rename(
            root.join("scratch").join(format!("{whole:020}.pb")),
            queue_dir.join("00000000000000000002.pb"),
        )
        .expect("move");
        let t = Telemetry::new();
        let exp = Scripted::new(Vec::new(), Duration::ZERO);
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp.clone(),
            &settings(true),
            counters(&t),
            panics(&t),
            Some(root.clone()),
            None,
        )
        .expect("start");
        h.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            exp.delivered.load(Ordering::SeqCst),
            3,
            "the whole batch is sent"
        );
        assert_eq!(
            names_in(&queue_dir),
            Vec::<String>::new(),
            "the temp file is swept"
        );
        // Made by profcol: private.
        let fresh = root.join("new/exporter_x");
        let (store, _) = queue::DiskStore::open(&fresh).expect("open");
        let seq = store.write(&batch(1)).expect("write");
        assert_eq!(disk::testing::mode(&root.join("new")), 0o700);
        assert_eq!(disk::testing::mode(&fresh), 0o700);
        assert_eq!(
            disk::testing::mode(&fresh.join(format!("{seq:020}.pb"))),
            0o600
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Batches a full disk kept in memory are written at shutdown once there is room, and
    /// sent by the next start.
    #[tokio::test]
    async fn batches_held_in_memory_reach_the_disk_at_shutdown() {
        let Some(disk) = disk::testing::TinyDisk::mount("pq-spill", 64) else {
            return;
        };
        let t = Telemetry::new();
        let id = ComponentId::new("scripted", None);
        let mut s = settings(true);
        s.queue.num_consumers = 1;
        let stuck = Scripted::new(Vec::new(), Duration::from_secs(3600));
        let h = ExporterHandle::start(
            id.clone(),
            stuck.clone(),
            &s,
            counters(&t),
            panics(&t),
            Some(disk.dir.clone()),
            None,
        )
        .expect("start");
        // The one consumer is busy (for an hour) with the first batch.
        h.consume(batch(1)).await.expect("queued");
        while stuck.attempts.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let filler = disk.dir.join("filler");
        disk.fill(&filler);
        h.consume(batch(2)).await.expect("held in memory");
        h.consume(batch(4)).await.expect("held in memory");
        let queue_dir = disk.dir.join("exporter_scripted");
        assert_eq!(names_in(&queue_dir).len(), 1, "only the first is on disk");
        std::fs::remove_file(&filler).expect("free the disk");
        h.shutdown(Duration::from_millis(50)).await;
        assert_eq!(names_in(&queue_dir).len(), 3, "{:?}", names_in(&queue_dir));
        let ok = Scripted::new(Vec::new(), Duration::ZERO);
        let h = ExporterHandle::start(
            id,
            ok.clone(),
            &s,
            counters(&t),
            panics(&t),
            Some(disk.dir.clone()),
            None,
        )
        .expect("restart");
        h.shutdown(Duration::from_secs(5)).await;
        // The first was on disk all along (its send was cut short), the others were spilled.
        assert_eq!(ok.delivered.load(Ordering::SeqCst), 1 + 2 + 4);
        assert_eq!(names_in(&queue_dir), Vec::<String>::new());
    }

    /// `samples` samples in a profile of time `time_unix_nano`.
    fn batch_at(samples: usize, time_unix_nano: u64) -> ProfileBatch {
        let mut b = batch(samples);
        for rp in b.resource_profiles_mut() {
            for sp in &mut rp.scope_profiles {
                for p in &mut sp.profiles {
                    p.time_unix_nano = time_unix_nano;
                }
            }
        }
        b
    }

    fn now_nanos() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    /// Real time: how late data is acknowledged moves by what a slow backend adds, and
    /// each attempt's duration is what the backend took.
    #[tokio::test]
    async fn latency_and_send_duration_move_by_the_backends_delay() {
        let t = Telemetry::new();
        let patient = ExporterHelperSettings {
            timeout: Duration::from_secs(30),
            ..settings(false)
        };
        let start = |name: &str, delay: Duration| {
            ExporterHandle::start(
                ComponentId::new("scripted", Some(name)),
                Scripted::new(Vec::new(), delay),
                &patient,
                ExporterCounters::new(&t, &format!("scripted/{name}")),
                panics(&t),
                None,
                None,
            )
            .expect("start")
        };
        let fast = start("fast", Duration::ZERO);
        let slow = start("slow", Duration::from_millis(1200));
        fast.consume(batch_at(5, now_nanos())).await.expect("sent");
        slow.consume(batch_at(5, now_nanos())).await.expect("sent");
        // Data from 30 s ago is 30 s late whatever the backend.
        fast.consume(batch_at(2, now_nanos() - 30_000_000_000))
            .await
            .expect("sent");
        let histogram = |name: &str, exporter: &str| {
            t.histogram_of(name, &[("exporter", exporter)])
                .unwrap_or_else(|| panic!("{name} for {exporter}"))
        };
        let fast_latency = histogram("otelcol_exporter_profile_latency_seconds", "scripted/fast");
        let slow_latency = histogram("otelcol_exporter_profile_latency_seconds", "scripted/slow");
        assert_eq!(fast_latency.count(), 7, "one per sample");
        assert_eq!(fast_latency.count_at_or_below(1.0), 5);
        assert_eq!(fast_latency.count_at_or_below(10.0), 5);
        assert_eq!(fast_latency.count_at_or_below(60.0), 7);
        assert_eq!(slow_latency.count(), 5);
        assert_eq!(
            slow_latency.count_at_or_below(1.0),
            0,
            "at least the 1.2 s it took"
        );
        assert_eq!(slow_latency.count_at_or_below(10.0), 5);
        let slow_sends = histogram("otelcol_exporter_send_duration_seconds", "scripted/slow");
        assert_eq!(slow_sends.count(), 1);
        assert!(
            slow_sends.sum_seconds() >= 1.2,
            "{}",
            slow_sends.sum_seconds()
        );
        assert_eq!(
            histogram("otelcol_exporter_send_duration_seconds", "scripted/fast")
                .count_at_or_below(1.0),
            2
        );
    }

    /// Attempts that time out are timed to the timeout, and data that never arrived is not
    /// counted as late.
    #[tokio::test(start_paused = true)]
    async fn timed_out_attempts_are_timed_and_failed_data_has_no_latency() {
        let t = Telemetry::new();
        let exp = Scripted::new(Vec::new(), Duration::from_secs(5));
        let h = ExporterHandle::start(
            ComponentId::new("scripted", None),
            exp,
            &settings(false),
            counters(&t),
            panics(&t),
            None,
            None,
        )
        .expect("start");
        h.consume(batch_at(3, now_nanos()))
            .await
            .expect_err("times out");
        let sends = t
            .histogram_of(
                "otelcol_exporter_send_duration_seconds",
                &[("exporter", "scripted")],
            )
            .expect("there");
        assert!(sends.count() >= 2, "every attempt: {}", sends.count());
        assert_eq!(sends.count_at_or_below(0.5), 0);
        assert_eq!(
            sends.count_at_or_below(1.0),
            sends.count(),
            "cut at the 1 s timeout"
        );
        let latency = t
            .histogram_of(
                "otelcol_exporter_profile_latency_seconds",
                &[("exporter", "scripted")],
            )
            .expect("there");
        assert_eq!(latency.count(), 0);
    }

    /// A backend that is up or down as the test says.
    struct Switchable {
        down: std::sync::atomic::AtomicBool,
        attempts: AtomicUsize,
        delivered: AtomicUsize,
    }

    impl Switchable {
        fn new(down: bool) -> Arc<Self> {
            Arc::new(Switchable {
                down: std::sync::atomic::AtomicBool::new(down),
                attempts: AtomicUsize::new(0),
                delivered: AtomicUsize::new(0),
            })
        }
    }

    #[async_trait]
    impl Exporter for Switchable {
        async fn export(&self, batch: ProfileBatch) -> Result<(), ExportError> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(ExportError::retryable("connection refused"));
            }
            self.delivered
                .fetch_add(batch.sample_count(), Ordering::SeqCst);
            Ok(())
        }
    }

    fn offline_scratch(name: &str) -> std::path::PathBuf {
        crate::testkit::scratch_path(&format!("helper-offline-{name}"))
    }

    fn offline_settings(dir: &std::path::Path, after: Duration) -> ExporterHelperSettings {
        ExporterHelperSettings {
            timeout: Duration::from_secs(1),
            retry: RetrySettings {
                initial_interval: Duration::from_millis(5),
                max_interval: Duration::from_millis(10),
                max_elapsed_time: Duration::from_millis(30),
                ..RetrySettings::default()
            },
            queue: QueueSettings {
                enabled: false,
                ..QueueSettings::default()
            },
            offline: OfflineSettings {
                directory: Some(dir.to_path_buf()),
                after,
                probe_interval: Duration::from_millis(300),
                ..OfflineSettings::default()
            },
        }
    }

    fn start_offline(
        t: &Telemetry,
        exporter: Arc<dyn Exporter>,
        settings: &ExporterHelperSettings,
    ) -> ExporterHandle {
        let id = ComponentId::new("scripted", None);
        let store = crate::service::open_offline_for_test(&settings.offline, t, &id)
            .expect("offline folder");
        ExporterHandle::start(id, exporter, settings, counters(t), panics(t), None, store)
            .expect("start")
    }

    /// An outage: failed batches, then (past `after`) every batch, go to the folder instead
    /// of being dropped; once per interval the folder's oldest batch probes the backend in
    /// the background; once a probe gets through, the folder is sent, each sample once.
    #[tokio::test]
    async fn an_outage_fills_the_offline_folder_and_recovery_replays_it() {
        let t = Telemetry::new();
        let dir = offline_scratch("outage");
        let backend = Switchable::new(true);
        let settings = offline_settings(&dir, Duration::from_millis(100));
        let h = start_offline(&t, backend.clone(), &settings);

        h.consume(batch(1)).await.expect("kept, not failed");
        assert!(
            backend.attempts.load(Ordering::SeqCst) >= 2,
            "retried first"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Past `after`: batches go straight to disk; the first starts a probe, which fails.
        let before = backend.attempts.load(Ordering::SeqCst);
        h.consume(batch(2)).await.expect("kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let attempts = backend.attempts.load(Ordering::SeqCst);
        assert_eq!(attempts, before + 1, "one probe, one attempt");
        h.consume(batch(3)).await.expect("kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            backend.attempts.load(Ordering::SeqCst),
            attempts,
            "no attempt between probes"
        );
        assert_eq!(
            value(&t, "otelcol_exporter_offline_written_profile_samples_total"),
            6
        );
        assert_eq!(
            value(&t, "otelcol_exporter_send_failed_profile_samples_total"),
            0
        );
        assert!(value(&t, "otelcol_exporter_offline_size_bytes") > 0);

        backend.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(350)).await;
        h.consume(batch(4))
            .await
            .expect("kept, and the probe gets through");
        let replayed = async {
            while backend.delivered.load(Ordering::SeqCst) < 10 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), replayed)
            .await
            .expect("the folder is replayed after recovery");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            backend.delivered.load(Ordering::SeqCst),
            10,
            "each sample once"
        );
        assert_eq!(
            value(
                &t,
                "otelcol_exporter_offline_replayed_profile_samples_total"
            ),
            10
        );
        assert_eq!(value(&t, "otelcol_exporter_offline_size_bytes"), 0);
        h.shutdown(Duration::from_secs(1)).await;
        let left = std::fs::read_dir(&dir)
            .expect("dir")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".binpb"))
            })
            .count();
        assert_eq!(left, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `after: 0s`: nothing is sent, everything is kept; a replay later sends it all and
    /// stops (leaving the rest) when the backend fails again.
    #[tokio::test]
    async fn always_offline_keeps_everything_for_a_replay() {
        let t = Telemetry::new();
        let dir = offline_scratch("always");
        let backend = Switchable::new(false);
        let settings = offline_settings(&dir, Duration::ZERO);
        let h = start_offline(&t, backend.clone(), &settings);
        for n in 1..=4 {
            h.consume(batch(n)).await.expect("kept");
        }
        assert_eq!(backend.attempts.load(Ordering::SeqCst), 0);
        h.shutdown(Duration::from_secs(1)).await;
        drop(h);

        // A replay against a backend that is down sends nothing and keeps every file.
        let down = Switchable::new(true);
        let h = start_offline(&Telemetry::new(), down.clone(), &settings);
        let report = h.replay_offline().await;
        assert_eq!((report.sent_batches, report.left_batches), (0, 4));
        assert!(report.stopped.is_some());
        h.shutdown(Duration::ZERO).await;
        drop(h);

        let h = start_offline(&Telemetry::new(), backend.clone(), &settings);
        let report = h.replay_offline().await;
        assert_eq!(
            (
                report.sent_batches,
                report.sent_samples,
                report.left_batches
            ),
            (4, 10, 0)
        );
        assert_eq!(backend.delivered.load(Ordering::SeqCst), 10);
        assert!(report.stopped.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Past the shutdown deadline, a batch a consumer is still retrying goes to the offline
    /// folder instead of being lost with the consumer.
    #[tokio::test]
    async fn batches_still_retrying_at_shutdown_are_kept_offline() {
        let t = Telemetry::new();
        let dir = offline_scratch("shutdown");
        let backend = Switchable::new(true);
        let mut settings = offline_settings(&dir, Duration::from_secs(3600));
        settings.retry.max_elapsed_time = Duration::from_secs(600);
        settings.queue = QueueSettings {
            enabled: true,
            num_consumers: 1,
            queue_size: 4,
            ..QueueSettings::default()
        };
        let h = start_offline(&t, backend.clone(), &settings);
        h.consume(batch(5)).await.expect("queued");
        h.consume(batch(7)).await.expect("queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            backend.attempts.load(Ordering::SeqCst) >= 1,
            "being retried"
        );
        h.shutdown(Duration::from_millis(100)).await;
        assert_eq!(
            value(&t, "otelcol_exporter_offline_written_profile_samples_total"),
            12
        );
        assert_eq!(
            value(&t, "otelcol_exporter_send_failed_profile_samples_total"),
            0
        );
        drop(h);
        let h = start_offline(&Telemetry::new(), Switchable::new(false), &settings);
        let report = h.replay_offline().await;
        assert_eq!((report.sent_batches, report.sent_samples), (2, 12));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
