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
    let h = ExporterHandle::start(
        id.clone(),
        stuck,
        &s,
        counters(&t),
        panics(&t),
        Some(dir.clone()),
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
    let root = std::env::temp_dir().join(format!("profcol-pq-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
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
        histogram("otelcol_exporter_send_duration_seconds", "scripted/fast").count_at_or_below(1.0),
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
    let dir = std::env::temp_dir().join(format!(
        "profcol-helper-offline-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
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
    let store =
        crate::service::open_offline_for_test(&settings.offline, t, &id).expect("offline folder");
    ExporterHandle::start_with_offline(id, exporter, settings, counters(t), panics(t), None, store)
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
