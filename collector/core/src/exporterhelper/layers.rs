//! One export attempt as a tower service, wrapped in a timeout layer and a retry layer
//! with otelcol's exponential backoff.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use tower::retry::Policy;
use tower::{Layer, Service};

use super::settings::RetrySettings;
use crate::component::{ExportError, Exporter};
use crate::pdata::ProfileBatch;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Calls the exporter once.
#[derive(Clone)]
pub struct ExportService(pub Arc<dyn Exporter>);

impl Service<ProfileBatch> for ExportService {
    type Response = ();
    type Error = ExportError;
    type Future = BoxFuture<Result<(), ExportError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ExportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, batch: ProfileBatch) -> Self::Future {
        let exporter = self.0.clone();
        Box::pin(async move { exporter.export(batch).await })
    }
}

/// Bounds each attempt; an attempt that runs out is retryable.
#[derive(Clone)]
pub struct TimeoutLayer(pub Duration);

#[derive(Clone)]
pub struct Timeout<S> {
    inner: S,
    limit: Duration,
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            limit: self.0,
        }
    }
}

impl<S> Service<ProfileBatch> for Timeout<S>
where
    S: Service<ProfileBatch, Response = (), Error = ExportError>,
    S::Future: Send + 'static,
{
    type Response = ();
    type Error = ExportError;
    type Future = BoxFuture<Result<(), ExportError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ExportError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, batch: ProfileBatch) -> Self::Future {
        let attempt = self.inner.call(batch);
        let limit = self.limit;
        Box::pin(async move {
            if limit.is_zero() {
                return attempt.await;
            }
            tokio::time::timeout(limit, attempt)
                .await
                .unwrap_or_else(|_| {
                    Err(ExportError::retryable(format!("timed out after {limit:?}")))
                })
        })
    }
}

/// Exponential backoff: `initial_interval`, times `multiplier` each try, capped at
/// `max_interval`, jittered by `randomization_factor`; gives up once the next wait would
/// pass `max_elapsed_time`. A server's retry-after wins when longer. Cloned per request, so
/// each batch has its own clock.
#[derive(Clone)]
pub struct Backoff {
    settings: RetrySettings,
    started: Option<Instant>,
    next: Duration,
    /// Tests set this to make jitter predictable.
    seed: u64,
}

impl Backoff {
    pub fn new(settings: RetrySettings) -> Self {
        let next = settings.initial_interval;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::from(d.subsec_nanos()) | 1);
        Backoff {
            settings,
            started: None,
            next,
            seed,
        }
    }

    fn jitter(&mut self, base: Duration) -> Duration {
        // xorshift: jitter needs no quality, only spread.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let unit = (self.seed % 10_000) as f64 / 10_000.0; // [0, 1)
        let f = self.settings.randomization_factor;
        base.mul_f64((1.0 - f + 2.0 * f * unit).max(0.0))
    }

    /// The wait before the next attempt, or None to give up.
    pub fn next_wait(&mut self, retry_after: Option<Duration>) -> Option<Duration> {
        if !self.settings.enabled {
            return None;
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        let base = self.next;
        self.next = self
            .next
            .mul_f64(self.settings.multiplier)
            .min(self.settings.max_interval);
        let wait = self.jitter(base).max(retry_after.unwrap_or_default());
        let limit = self.settings.max_elapsed_time;
        if !limit.is_zero() && started.elapsed() + wait > limit {
            return None;
        }
        Some(wait)
    }
}

impl Policy<ProfileBatch, (), ExportError> for Backoff {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _: &mut ProfileBatch,
        result: &mut Result<(), ExportError>,
    ) -> Option<Self::Future> {
        match result {
            Err(ExportError::Retryable {
                retry_after,
                message,
            }) => {
                let wait = self.next_wait(*retry_after)?;
                tracing::warn!(error = %message, wait = ?wait, "export failed; retrying");
                Some(tokio::time::sleep(wait))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, batch: &ProfileBatch) -> Option<ProfileBatch> {
        // Two reference-count bumps.
        Some(batch.clone())
    }
}
