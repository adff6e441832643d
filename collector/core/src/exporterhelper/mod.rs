//! The exporter helper: what stands between the pipelines and an exporter. It owns the
//! sending queue (in memory or on disk), timeout and retry (tower layers around one
//! export attempt), and counts what it sends, fails and cannot queue.

mod layers;
mod periodic;
mod queue;
mod settings;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tower::{Service, ServiceBuilder, ServiceExt};

pub use layers::{Backoff, ExportService, TimeoutLayer};
pub use periodic::PeriodicTask;
pub use settings::{ExporterHelperSettings, QueueSettings, RetrySettings, validate_helper_blocks};

use crate::component::{ComponentId, ExportError, Exporter};
use crate::pdata::ProfileBatch;
use crate::telemetry::ExporterCounters;
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
    queue: Option<Arc<SendingQueue>>,
    disk: Option<Arc<DiskStore>>,
    block_on_overflow: bool,
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
    /// storage extension the queue names, if any.
    pub fn start(
        id: ComponentId,
        exporter: Arc<dyn Exporter>,
        settings: &ExporterHelperSettings,
        counters: ExporterCounters,
        storage: Option<PathBuf>,
    ) -> Result<Self, String> {
        let sender = ServiceBuilder::new()
            .retry(Backoff::new(settings.retry.clone()))
            .layer(TimeoutLayer(settings.timeout))
            .service(ExportService(exporter.clone()));
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
            (
                Some(Arc::new(SendingQueue::new(q.queue_size, preloaded))),
                disk,
            )
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner {
            id,
            exporter,
            sender,
            counters,
            queue,
            disk,
            block_on_overflow: q.block_on_overflow,
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
        let Some(queue) = &inner.queue else {
            return send(inner, batch).await.map_err(ConsumeError::Export);
        };
        let reserved = if inner.block_on_overflow {
            queue.reserve().await
        } else {
            queue.try_reserve()
        };
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
                    Ok(Ok(seq)) => Some(seq),
                    Ok(Err(e)) => {
                        queue.unreserve();
                        inner.counters.enqueue_failed.add(samples);
                        tracing::error!(exporter = %inner.id, error = %e, "could not write to the persistent queue");
                        return Err(ConsumeError::QueueFull);
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
        });
        inner.counters.queue_size.add(1);
        Ok(())
    }

    /// Stops taking batches, lets the consumers drain the queue for up to `deadline`, then
    /// shuts the exporter down. A persistent queue keeps what was not sent.
    pub async fn shutdown(&self, deadline: Duration) {
        if let Some(q) = &self.inner.queue {
            q.close();
        }
        let consumers = std::mem::take(&mut *self.consumers.lock().await);
        let aborts: Vec<_> = consumers
            .iter()
            .map(tokio::task::JoinHandle::abort_handle)
            .collect();
        let all = futures_join_all(consumers);
        if tokio::time::timeout(deadline, all).await.is_err() {
            let left = self.inner.queue.as_ref().map_or(0, |q| q.len());
            tracing::warn!(exporter = %self.inner.id, left, "shutdown timeout reached with batches unsent");
            for a in aborts {
                a.abort();
            }
        }
        if let Err(e) = self.inner.exporter.shutdown().await {
            tracing::warn!(exporter = %self.inner.id, error = %e, "exporter shutdown failed");
        }
    }
}

async fn futures_join_all(handles: Vec<tokio::task::JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
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
async fn send(inner: &Inner, batch: ProfileBatch) -> Result<(), ExportError> {
    let samples = batch.sample_count() as u64;
    let mut sender = inner.sender.clone();
    let result = match sender.ready().await {
        Ok(s) => s.call(batch).await,
        Err(e) => Err(e),
    };
    match &result {
        Ok(()) => inner.counters.sent.add(samples),
        Err(e) => {
            inner.counters.send_failed.add(samples);
            let kind = if e.is_retryable() {
                "gave up after retries"
            } else {
                "permanent error, not retried"
            };
            tracing::error!(exporter = %inner.id, samples, error = %e, "export failed: {kind}; dropping the batch");
        }
    }
    result
}

async fn consume_loop(inner: Arc<Inner>) {
    let Some(queue) = inner.queue.clone() else {
        return;
    };
    while let Some(entry) = queue.pop().await {
        inner.counters.queue_size.add(-1);
        let batch = match (entry.batch, entry.seq, &inner.disk) {
            (Some(b), _, _) => b,
            (None, Some(seq), Some(disk)) => match disk.read(seq) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(exporter = %inner.id, error = %e, "dropping a damaged batch from the persistent queue");
                    disk.remove(seq);
                    continue;
                }
            },
            _ => continue,
        };
        // Sent or given up on: either way it leaves the disk. A crash before this point
        // sends it again after restart (at least once).
        let _ = send(&inner, batch).await;
        if let (Some(seq), Some(disk)) = (entry.seq, &inner.disk) {
            disk.remove(seq);
        }
    }
}

#[cfg(test)]
mod tests;
