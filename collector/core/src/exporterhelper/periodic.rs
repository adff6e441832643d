//! A background task an exporter runs every interval (flushing what it gathered).
//! The exporter's start hook starts it, in the collector's runtime; `stop` ends it after
//! the run in progress; dropping it unstopped aborts it. The task holds its target weakly,
//! so it also ends once the exporter is gone.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The longest interval kept as asked: tokio adds the interval to the clock, which panics
/// past what an `Instant` holds, so a config's `1000000000h` becomes this (30 years).
const MAX_EVERY: Duration = Duration::from_secs(30 * 365 * 86_400);

enum State {
    Idle,
    Running(JoinHandle<()>),
    Stopped,
}

pub struct PeriodicTask {
    state: Mutex<State>,
    stop: Arc<Notify>,
}

impl Default for PeriodicTask {
    fn default() -> Self {
        PeriodicTask {
            state: Mutex::new(State::Idle),
            stop: Arc::new(Notify::new()),
        }
    }
}

impl PeriodicTask {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `tick(target)` every `every` (the first after one interval), unless it already
    /// runs or was stopped. A zero interval never ticks; one above 30 years is 30 years.
    /// Call it from a tokio runtime.
    pub fn start<T, F, Fut>(&self, target: &Arc<T>, every: Duration, tick: F)
    where
        T: Send + Sync + 'static,
        F: Fn(Arc<T>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*state, State::Idle) || every.is_zero() {
            return;
        }
        let every = every.min(MAX_EVERY);
        let target = Arc::downgrade(target);
        let stop = self.stop.clone();
        *state = State::Running(tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                tokio::select! {
                    _ = interval.tick() => {}
                    () = stop.notified() => return,
                }
                let Some(target) = target.upgrade() else {
                    return;
                };
                tick(target).await;
            }
        }));
    }

    /// Ends the task after the tick it may be running; it never starts again.
    pub async fn stop(&self) {
        let handle = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, State::Stopped) {
                State::Running(handle) => Some(handle),
                _ => None,
            }
        };
        if let Some(handle) = handle {
            // A stored permit: the task sees it even if it is mid-tick now.
            self.stop.notify_one();
            let _ = handle.await;
        }
    }
}

impl Drop for PeriodicTask {
    fn drop(&mut self) {
        if let State::Running(handle) = self.state.get_mut().unwrap_or_else(PoisonError::into_inner)
        {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn ticks_until_stopped_and_never_restarts() {
        let count = Arc::new(AtomicUsize::new(0));
        let task = PeriodicTask::new();
        let tick = |c: Arc<AtomicUsize>| async move {
            c.fetch_add(1, Ordering::SeqCst);
        };
        task.start(&count, Duration::from_secs(1), tick);
        task.start(&count, Duration::from_secs(1), tick);
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            3,
            "one task, first tick after one interval"
        );
        task.stop().await;
        task.start(&count, Duration::from_secs(1), tick);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn zero_and_enormous_intervals_neither_panic_nor_spin() {
        let count = Arc::new(AtomicUsize::new(0));
        let tick = |c: Arc<AtomicUsize>| async move {
            c.fetch_add(1, Ordering::SeqCst);
        };
        let zero = PeriodicTask::new();
        zero.start(&count, Duration::ZERO, tick);
        assert!(matches!(*zero.state.lock().expect("lock"), State::Idle));
        let huge = PeriodicTask::new();
        huge.start(&count, Duration::MAX, tick);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count.load(Ordering::SeqCst), 0);
        // The huge one's task is alive (not dead of a panic) and stops when asked.
        {
            let state = huge.state.lock().expect("lock");
            let State::Running(handle) = &*state else {
                panic!("started");
            };
            assert!(!handle.is_finished());
        }
        tokio::time::timeout(Duration::from_secs(1), huge.stop())
            .await
            .expect("stops");
        zero.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn ends_when_its_target_is_gone() {
        let target = Arc::new(AtomicUsize::new(0));
        let task = PeriodicTask::new();
        task.start(
            &target,
            Duration::from_secs(1),
            |c: Arc<AtomicUsize>| async move {
                c.fetch_add(1, Ordering::SeqCst);
            },
        );
        drop(target);
        tokio::time::sleep(Duration::from_secs(3)).await;
        // stop() returns at once: the task already ended.
        tokio::time::timeout(Duration::from_millis(10), task.stop())
            .await
            .expect("ended");
    }
}
