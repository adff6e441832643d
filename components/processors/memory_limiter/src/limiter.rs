//! The memory limiter: a background task measures memory use every `check_interval`
//! and raises a shared "refusing" flag while use is at or above the soft limit. The
//! receivers ask [`Admission::admit`] before they hand data on, so a refusal reaches the
//! sender as a retryable error; batches already inside the pipeline pass through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use profcol_core::component::{Admission, ProcessError, Processor, Refused};
use profcol_core::pdata::ProfileBatch;
use profcol_core::telemetry::{Gauge, Telemetry};
use tokio::task::JoinHandle;

use crate::config::Limits;
use crate::memory::MemorySource;

const MIB: u64 = 1 << 20;

/// What the checker task and the admission share.
struct Shared {
    refusing: AtomicBool,
    gauge: Gauge,
}

/// The receivers' side: refuses while memory use is above the soft limit.
struct Gate(Arc<Shared>);

impl Admission for Gate {
    fn admit(&self) -> Result<(), Refused> {
        if self.0.refusing.load(Ordering::Relaxed) {
            Err(Refused::MemoryLimit)
        } else {
            Ok(())
        }
    }
}

/// Measures and updates the flag; owned by the background task.
struct Checker {
    id: String,
    source: Arc<dyn MemorySource>,
    limits: Limits,
    interval: Duration,
    shared: Arc<Shared>,
    above_hard: bool,
    read_failed: bool,
}

fn mib(bytes: u64) -> u64 {
    bytes / MIB
}

impl Checker {
    fn check(&mut self) {
        let used = match self.source.used_bytes() {
            Ok(used) => {
                if self.read_failed {
                    tracing::info!(processor = %self.id, "memory use can be read again");
                    self.read_failed = false;
                }
                used
            }
            Err(e) => {
                // Keep the last decision: a failed read says nothing about memory.
                if !self.read_failed {
                    tracing::warn!(processor = %self.id, error = %e, "cannot read memory use; keeping the last decision");
                    self.read_failed = true;
                }
                return;
            }
        };
        let refusing = used >= self.limits.soft;
        let was = self.shared.refusing.swap(refusing, Ordering::Relaxed);
        self.shared.gauge.set(i64::from(refusing));
        let (used_mib, soft_mib, hard_mib) =
            (mib(used), mib(self.limits.soft), mib(self.limits.hard));
        if refusing && !was {
            tracing::warn!(
                processor = %self.id, used_mib, soft_limit_mib = soft_mib, hard_limit_mib = hard_mib,
                "memory use is above the soft limit; refusing data until it falls"
            );
        } else if !refusing && was {
            tracing::info!(
                processor = %self.id, used_mib, soft_limit_mib = soft_mib,
                "memory use is below the soft limit again; accepting data"
            );
        }
        let above_hard = used >= self.limits.hard;
        if above_hard && !self.above_hard {
            tracing::warn!(
                processor = %self.id, used_mib, hard_limit_mib = hard_mib,
                "memory use is above the hard limit"
            );
        }
        self.above_hard = above_hard;
    }

    async fn run(mut self) {
        let start = tokio::time::Instant::now() + self.interval;
        let mut ticker = tokio::time::interval_at(start, self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.check();
        }
    }
}

pub struct MemoryLimiter {
    shared: Arc<Shared>,
    /// The task measuring memory use, once started.
    task: Option<JoinHandle<()>>,
    /// The checker, until a runtime is there to run it.
    pending: Option<Checker>,
}

impl MemoryLimiter {
    /// Measures once now, then every `interval` on a task of the current tokio runtime
    /// (or, if there is none yet, from the first `process` call on). `processor` is the
    /// component id, for the gauge's label and the logs.
    pub fn new(
        processor: &str,
        limits: Limits,
        interval: Duration,
        source: Arc<dyn MemorySource>,
        telemetry: &Telemetry,
    ) -> Self {
        let shared = Arc::new(Shared {
            refusing: AtomicBool::new(false),
            gauge: telemetry.gauge(
                "otelcol_processor_memory_limiter_refusing",
                "Whether the memory limiter refuses data (1) or accepts it (0).",
                &[("processor", processor)],
            ),
        });
        let mut checker = Checker {
            id: processor.to_owned(),
            source,
            limits,
            interval,
            shared: Arc::clone(&shared),
            above_hard: false,
            read_failed: false,
        };
        checker.check();
        let mut limiter = MemoryLimiter {
            shared,
            task: None,
            pending: Some(checker),
        };
        limiter.start();
        limiter
    }

    fn start(&mut self) {
        if self.task.is_some() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current()
            && let Some(checker) = self.pending.take()
        {
            self.task = Some(runtime.spawn(checker.run()));
        }
    }

    /// Whether data is refused now.
    pub fn is_refusing(&self) -> bool {
        self.shared.refusing.load(Ordering::Relaxed)
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.pending = None;
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.stop();
    }
}

#[async_trait]
impl Processor for MemoryLimiter {
    async fn process(
        &mut self,
        batch: ProfileBatch,
        out: &mut Vec<ProfileBatch>,
    ) -> Result<(), ProcessError> {
        self.start();
        out.push(batch);
        Ok(())
    }

    async fn shutdown(&mut self, _out: &mut Vec<ProfileBatch>) -> Result<(), ProcessError> {
        self.stop();
        Ok(())
    }

    fn admission(&self) -> Option<Arc<dyn Admission>> {
        Some(Arc::new(Gate(Arc::clone(&self.shared))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryError, ProcessRss};
    use std::sync::atomic::AtomicU64;

    /// Memory use as a test sets it; `u64::MAX` reads as an error.
    #[derive(Default)]
    struct Simulated(AtomicU64);

    impl Simulated {
        fn set_mib(&self, mib: u64) {
            self.0.store(mib * MIB, Ordering::Relaxed);
        }
    }

    impl MemorySource for Simulated {
        fn used_bytes(&self) -> Result<u64, MemoryError> {
            match self.0.load(Ordering::Relaxed) {
                u64::MAX => Err(MemoryError::Missing {
                    path: "/simulated",
                    field: "VmRSS",
                }),
                v => Ok(v),
            }
        }
    }

    const SECOND: Duration = Duration::from_secs(1);
    const LIMITS: Limits = Limits {
        hard: 1000 * MIB,
        soft: 800 * MIB,
    };

    fn limiter(memory: &Arc<Simulated>, telemetry: &Telemetry) -> MemoryLimiter {
        let source: Arc<dyn MemorySource> = memory.clone();
        MemoryLimiter::new("memory_limiter", LIMITS, SECOND, source, telemetry)
    }

    fn gauge(t: &Telemetry) -> Option<i64> {
        t.value(
            "otelcol_processor_memory_limiter_refusing",
            &[("processor", "memory_limiter")],
        )
    }

    /// Lets the checker run the checks due within `d` (time is paused: this is instant).
    async fn wait(d: Duration) {
        tokio::time::sleep(d + Duration::from_millis(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn refuses_above_the_soft_limit_and_recovers_below() {
        let memory = Arc::new(Simulated::default());
        memory.set_mib(100);
        let telemetry = Telemetry::new();
        let mut p = limiter(&memory, &telemetry);
        let gate = p.admission().expect("an admission");
        assert_eq!(gate.admit(), Ok(()));
        assert_eq!(gauge(&telemetry), Some(0));

        // Crossing the soft limit is seen at the next check, not before.
        memory.set_mib(850);
        assert_eq!(gate.admit(), Ok(()));
        wait(SECOND).await;
        assert!(p.is_refusing());
        assert_eq!(gate.admit(), Err(Refused::MemoryLimit));
        assert_eq!(gauge(&telemetry), Some(1));

        // Batches inside the pipeline still pass while refusing.
        let mut out = Vec::new();
        p.process(ProfileBatch::empty(), &mut out)
            .await
            .expect("process");
        assert_eq!(out.len(), 1);

        // Above the hard limit: still refusing.
        memory.set_mib(1200);
        wait(SECOND).await;
        assert_eq!(gate.admit(), Err(Refused::MemoryLimit));

        // Exactly at the soft limit counts as above.
        memory.set_mib(800);
        wait(SECOND).await;
        assert_eq!(gate.admit(), Err(Refused::MemoryLimit));

        memory.set_mib(799);
        wait(SECOND).await;
        assert!(!p.is_refusing());
        assert_eq!(gate.admit(), Ok(()));
        assert_eq!(gauge(&telemetry), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn checks_follow_the_interval() {
        let memory = Arc::new(Simulated::default());
        memory.set_mib(0);
        let telemetry = Telemetry::new();
        let p = limiter(&memory, &telemetry);
        memory.set_mib(900);
        tokio::time::sleep(SECOND / 2).await;
        assert!(!p.is_refusing(), "no check yet at 0.5s");
        tokio::time::sleep(SECOND / 2 + Duration::from_millis(1)).await;
        assert!(p.is_refusing(), "checked at 1s");
    }

    #[tokio::test(start_paused = true)]
    async fn starts_refusing_at_once_if_already_over() {
        let memory = Arc::new(Simulated::default());
        memory.set_mib(900);
        let p = limiter(&memory, &Telemetry::new());
        assert!(p.is_refusing());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_keeps_the_last_decision() {
        let memory = Arc::new(Simulated::default());
        memory.set_mib(900);
        let p = limiter(&memory, &Telemetry::new());
        assert!(p.is_refusing());
        memory.0.store(u64::MAX, Ordering::Relaxed);
        wait(SECOND).await;
        assert!(p.is_refusing());
        memory.set_mib(10);
        wait(SECOND).await;
        assert!(!p.is_refusing());
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_the_checks() {
        let memory = Arc::new(Simulated::default());
        memory.set_mib(10);
        let mut p = limiter(&memory, &Telemetry::new());
        p.shutdown(&mut Vec::new()).await.expect("shutdown");
        memory.set_mib(900);
        wait(SECOND * 3).await;
        assert!(!p.is_refusing());
    }

    /// Made where no runtime runs, the checker starts with the first batch.
    #[test]
    fn starts_lazily_without_a_runtime() {
        let memory = Arc::new(Simulated::default());
        memory.set_mib(10);
        let mut p = limiter(&memory, &Telemetry::new());
        assert!(p.task.is_none() && p.pending.is_some());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut out = Vec::new();
            p.process(ProfileBatch::empty(), &mut out)
                .await
                .expect("process");
            assert!(p.task.is_some());
            memory.set_mib(900);
            wait(SECOND).await;
            assert!(p.is_refusing());
        });
    }

    #[tokio::test]
    async fn real_process_memory_is_measured() {
        let used = ProcessRss.used_bytes().expect("rss");
        assert!(used > 0);
        // A limit far above what a test uses: accepting.
        let p = MemoryLimiter::new(
            "memory_limiter",
            Limits {
                hard: u64::MAX,
                soft: u64::MAX - 1,
            },
            SECOND,
            Arc::new(ProcessRss),
            &Telemetry::new(),
        );
        assert!(!p.is_refusing());
        // A limit below it: refusing at once.
        let p = MemoryLimiter::new(
            "memory_limiter",
            Limits {
                hard: used / 2,
                soft: used / 4,
            },
            SECOND,
            Arc::new(ProcessRss),
            &Telemetry::new(),
        );
        assert!(p.is_refusing());
    }
}
