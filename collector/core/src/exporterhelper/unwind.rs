//! Catching a panic in a future, so a task that would die is noticed instead: the queue
//! consumer carries on with the next batch, a pipeline is marked failed.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Polls `F`, turning a panic into `Err(message)`. What panicked is dropped and never
/// polled again; the caller decides what state is trustworthy after it.
pub struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> CatchUnwind<F> {
    pub fn new(future: F) -> Self {
        CatchUnwind(Box::pin(future))
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

/// The text a panic was raised with.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with no message".to_owned()
    }
}

/// The counter of caught panics, per component (`exporter/otlp`, `processor/batch`,
/// `pipeline/profiles`).
pub fn panic_counter(
    telemetry: &crate::telemetry::Telemetry,
    component: &str,
) -> crate::telemetry::Counter {
    telemetry.counter(
        "profcol_component_panics_total",
        "Panics caught in a component's task; the task carried on or its pipeline failed.",
        &[("component", component)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_message_and_values_pass_through() {
        assert_eq!(CatchUnwind::new(async { 7 }).await, Ok(7));
        let caught: Result<(), String> = CatchUnwind::new(async {
            tokio::task::yield_now().await;
            panic!("batch 3 is cursed")
        })
        .await;
        assert_eq!(caught, Err("batch 3 is cursed".to_owned()));
        let formatted: Result<(), String> =
            CatchUnwind::new(async { panic!("{} formatted", 1) }).await;
        assert_eq!(formatted, Err("1 formatted".to_owned()));
    }
}
