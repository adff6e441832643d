use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use super::*;
use crate::pdata::DictionaryBuilder;
use crate::pdata::types::{Profile, ResourceProfiles, Sample, ScopeProfiles};
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
    let profile = Profile {
        samples: (0..samples)
            .map(|_| Sample {
                values: vec![1],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    ProfileBatch::from_valid(
        b.finish(),
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
    }
}

fn counters(t: &Telemetry) -> ExporterCounters {
    ExporterCounters::new(t, "scripted")
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
    let dir = std::env::temp_dir().join(format!("profcol-pq-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Telemetry::new();
    let id = ComponentId::new("scripted", None);
    let mut s = settings(true);
    s.queue.num_consumers = 1;
    // First run: the destination hangs; shut down before anything is sent.
    let stuck = Scripted::new(Vec::new(), Duration::from_secs(3600));
    let h = ExporterHandle::start(id.clone(), stuck, &s, counters(&t), Some(dir.clone()))
        .expect("start");
    for _ in 0..3 {
        h.consume(batch(2)).await.expect("queued");
    }
    h.shutdown(Duration::from_millis(50)).await;
    // Second run: all three come back and are delivered.
    let ok = Scripted::new(Vec::new(), Duration::ZERO);
    let h = ExporterHandle::start(id, ok.clone(), &s, counters(&t), Some(dir.clone()))
        .expect("restart");
    h.shutdown(Duration::from_secs(5)).await;
    assert_eq!(ok.delivered.load(Ordering::SeqCst), 6);
    let left = std::fs::read_dir(dir.join("exporter_scripted"))
        .expect("dir")
        .count();
    assert_eq!(left, 0, "sent batches leave the disk");
    let _ = std::fs::remove_dir_all(&dir);
}
