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

use super::offline::Reachability;
use super::settings::RetrySettings;
use crate::component::{ExportError, Exporter};
use crate::pdata::ProfileBatch;
use crate::telemetry::Histogram;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Calls the exporter once, timing the call (a call cut off by the timeout is timed to
/// where it was cut).
#[derive(Clone)]
pub struct ExportService {
    pub exporter: Arc<dyn Exporter>,
    pub durations: Histogram,
    pub reachability: Arc<Reachability>,
}

/// Records an attempt's duration when it ends, however it ends, and whether the backend
/// answered: an attempt cut off by the timeout did not.
struct Attempt {
    started: Instant,
    durations: Histogram,
    reachability: Arc<Reachability>,
    answered: Option<bool>,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.durations.observe(self.started.elapsed().as_secs_f64());
        if self.answered == Some(true) {
            self.reachability.answered();
        } else {
            self.reachability.missed();
        }
    }
}

impl Service<ProfileBatch> for ExportService {
    type Response = ();
    type Error = ExportError;
    type Future = BoxFuture<Result<(), ExportError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ExportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, batch: ProfileBatch) -> Self::Future {
        let exporter = self.exporter.clone();
        let mut attempt = Attempt {
            started: Instant::now(),
            durations: self.durations.clone(),
            reachability: self.reachability.clone(),
            answered: None,
        };
        Box::pin(async move {
            let result = exporter.export(batch).await;
            // A permanent error is an answer too (the backend refused the data).
            attempt.answered = Some(
                result
                    .as_ref()
                    .map_or_else(|e| !e.is_retryable(), |()| true),
            );
            drop(attempt);
            result
        })
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

/// The longest a server's retry-after is waited for when `max_elapsed_time` is 0 (retry
/// forever); with a budget, a retry-after beyond it ends the retries instead.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `d * f`, saturating at `Duration::MAX` instead of panicking as `Duration::mul_f64`
/// does; a NaN or negative product is zero.
pub(crate) fn mul_saturating(d: Duration, f: f64) -> Duration {
    let secs = d.as_secs_f64() * f;
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// Exponential backoff: `initial_interval`, times `multiplier` each try, jittered by
/// `randomization_factor`, capped at `max_interval`; gives up once the next wait would
/// pass `max_elapsed_time`. A server's retry-after wins when longer. Cloned per request, so
/// each batch has its own clock. All arithmetic saturates: no setting and no retry-after
/// can make it panic.
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
        let next = settings.initial_interval.min(settings.max_interval);
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
        if !(0.0..=1.0).contains(&f) {
            return base;
        }
        mul_saturating(base, 1.0 - f + 2.0 * f * unit)
    }

    /// The wait before the next attempt, or None to give up.
    pub fn next_wait(&mut self, retry_after: Option<Duration>) -> Option<Duration> {
        if !self.settings.enabled {
            return None;
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        let max_interval = self.settings.max_interval;
        let base = self.next;
        let grown = mul_saturating(self.next, self.settings.multiplier);
        // A multiplier that does not grow the interval (NaN, below 1) keeps it.
        self.next = grown.max(self.next).min(max_interval);
        let backoff = self.jitter(base).min(max_interval);
        let limit = self.settings.max_elapsed_time;
        let retry_after = match retry_after {
            Some(d) if limit.is_zero() => d.min(MAX_RETRY_AFTER),
            Some(d) => d,
            None => Duration::ZERO,
        };
        let wait = backoff.max(retry_after);
        if !limit.is_zero() && started.elapsed().saturating_add(wait) > limit {
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
