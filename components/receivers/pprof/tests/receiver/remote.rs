//! Remote mode against a hyper server that serves the Go fixtures at /debug/pprof/...

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper_util::rt::TokioIo;
use profcol_receiver_pprof::{
    Config, ProfileKind, ProfileSetting, Profiles, RemoteConfig, SCOPE_SCRAPE,
    SCRAPE_FAILURES_METRIC, Target,
};
use prost::Message;
use prost::bytes::Bytes;

use crate::*;

/// What the fake Go process has been asked, by path.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<String>>,
}

impl Seen {
    fn count(&self, path: &str) -> usize {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.split('?').next() == Some(path))
            .count()
    }
    fn all(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }
}

/// The mutex fixture with each sample's values raised by `step[i] * n`.
fn mutex_profile(n: i64, step: &[(i64, i64)]) -> Vec<u8> {
    let mut p = fixture_profile("go-mutex.pb.gz");
    for (s, (contentions, delay)) in p.sample.iter_mut().zip(step) {
        s.value[0] += contentions * n;
        s.value[1] += delay * n;
    }
    p.encode_to_vec()
}

/// Serves, like net/http/pprof: `/debug/pprof/profile` (go-cpu), `/goroutine`, `/heap`,
/// `/mutex` (rising by `MUTEX_STEP` per request); `/fail/...` answers 500 and
/// `/slow/...` answers after 5 s.
async fn fake_go_process() -> (SocketAddr, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let seen = state.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: http::Request<_>| {
                    let seen = seen.clone();
                    async move {
                        let target = request
                            .uri()
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default();
                        let path = request.uri().path().to_owned();
                        let n = {
                            let mut requests = seen.requests.lock().expect("lock");
                            requests.push(target);
                            requests
                                .iter()
                                .filter(|r| r.split('?').next() == Some(path.as_str()))
                                .count() as i64
                                - 1
                        };
                        let (status, body) = match path.as_str() {
                            "/debug/pprof/profile" => (200, fixture("go-cpu.pb.gz")),
                            "/debug/pprof/goroutine" => (200, fixture("go-goroutine.pb.gz")),
                            "/debug/pprof/heap" => (200, fixture("go-heap.pb.gz")),
                            "/debug/pprof/mutex" => (200, mutex_profile(n, &MUTEX_STEP)),
                            p if p.starts_with("/fail/") => (500, b"boom".to_vec()),
                            p if p.starts_with("/slow/") => {
                                tokio::time::sleep(Duration::from_secs(5)).await;
                                (200, fixture("go-goroutine.pb.gz"))
                            }
                            _ => (404, b"404 page not found".to_vec()),
                        };
                        let mut response = http::Response::new(Full::new(Bytes::from(body)));
                        *response.status_mut() =
                            http::StatusCode::from_u16(status).expect("status");
                        response.headers_mut().insert(
                            "content-type",
                            http::HeaderValue::from_static("application/octet-stream"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// Contentions and delay added per scrape, per sample of the mutex fixture.
const MUTEX_STEP: [(i64, i64); 2] = [(3, 1_000), (0, 0)];

fn only(kind: ProfileKind) -> Profiles {
    let off = ProfileSetting {
        enabled: Some(false),
        path: None,
    };
    let mut p = Profiles {
        cpu: off.clone(),
        heap: off.clone(),
        allocs: off.clone(),
        goroutine: off.clone(),
        mutex: off.clone(),
        block: off,
    };
    let on = ProfileSetting {
        enabled: Some(true),
        path: None,
    };
    match kind {
        ProfileKind::Cpu => p.cpu = on,
        ProfileKind::Heap => p.heap = on,
        ProfileKind::Allocs => p.allocs = on,
        ProfileKind::Goroutine => p.goroutine = on,
        ProfileKind::Mutex => p.mutex = on,
        ProfileKind::Block => p.block = on,
    }
    p
}

fn remote(targets: Vec<Target>, interval_ms: u64, profiles: Profiles) -> Config {
    Config {
        remote: Some(RemoteConfig {
            targets,
            interval: Duration::from_millis(interval_ms),
            timeout: Duration::ZERO,
            profiles,
        }),
        ..Config::default()
    }
}

fn target(endpoint: String, labels: &[(&str, &str)]) -> Target {
    Target {
        endpoint,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[tokio::test]
async fn cpu_is_delivered_every_interval_with_the_target_labels() {
    let (addr, seen) = fake_go_process().await;
    let mut r = start(
        remote(
            vec![target(
                format!("http://{addr}/"),
                &[("service.name", "checkout"), ("env", "prod")],
            )],
            300,
            only(ProfileKind::Cpu),
        ),
        8,
    )
    .await;
    let expected = fixture_samples("go-cpu.pb.gz");
    for _ in 0..3 {
        let batch = r.next_batch().await;
        assert_eq!(batch.sample_count(), expected);
        assert_eq!(sample_types(&batch), ["cpu", "samples"]);
        assert_eq!(
            resource_attributes(&batch, 0),
            pairs(&[("service.name", "checkout"), ("env", "prod")])
        );
        assert_eq!(scope_name(&batch, 0), SCOPE_SCRAPE);
        assert!(batch.client().is_none());
    }
    // A sub-2 s interval still asks for the 1 s minimum window.
    assert!(seen.count("/debug/pprof/profile") >= 3);
    assert!(
        seen.all()
            .iter()
            .all(|r| r == "/debug/pprof/profile?seconds=1"),
        "{:?}",
        seen.all()
    );
    r.stop().await;
}

#[tokio::test]
async fn mutex_first_scrape_primes_and_later_ones_emit_the_difference() {
    let (addr, seen) = fake_go_process().await;
    let mut r = start(
        remote(
            vec![target(format!("http://{addr}"), &[])],
            250,
            only(ProfileKind::Mutex),
        ),
        8,
    )
    .await;
    for round in 0..2 {
        let batch = r.next_batch().await;
        // The first scrape emitted nothing: this is at least the second.
        assert!(seen.count("/debug/pprof/mutex") >= 2 + round);
        assert_eq!(sample_types(&batch), ["delay", "contentions"]);
        // Only the first sample rose, by exactly one step.
        let contentions = profile(&batch, "contentions");
        let delay = profile(&batch, "delay");
        assert_eq!(contentions.samples.len(), 1, "round {round}");
        assert_eq!(contentions.samples[0].values, [MUTEX_STEP[0].0]);
        assert_eq!(delay.samples.len(), 1);
        assert_eq!(delay.samples[0].values, [MUTEX_STEP[0].1]);
        assert_eq!(
            contentions.samples[0].stack_index,
            delay.samples[0].stack_index
        );
        // The stack is the fixture's first: Unlock (inlined in criticalSection) ← contend.
        let source = fixture_profile("go-mutex.pb.gz");
        let stack = &batch.dictionary().stack_table
            [usize::try_from(contentions.samples[0].stack_index).expect("index")];
        assert_eq!(
            stack.location_indices.len(),
            source.sample[0].location_id.len()
        );
        // Period and time are the scraped profile's.
        assert_eq!(contentions.period, source.period);
    }
    r.stop().await;
}

#[tokio::test]
async fn heap_first_scrape_has_only_the_inuse_columns() {
    let (addr, _) = fake_go_process().await;
    let mut r = start(
        remote(
            vec![target(format!("http://{addr}"), &[])],
            250,
            only(ProfileKind::Heap),
        ),
        8,
    )
    .await;
    let batch = r.next_batch().await;
    assert_eq!(sample_types(&batch), ["inuse_space", "inuse_objects"]);
    let source = fixture_profile("go-heap.pb.gz");
    // Rows with nothing in use are dropped.
    let in_use = source
        .sample
        .iter()
        .filter(|s| s.value[2] != 0 || s.value[3] != 0)
        .count();
    assert_eq!(profile(&batch, "inuse_space").samples.len(), in_use);
    // The same heap again: the alloc columns rose by nothing, so they stay empty.
    let batch = r.next_batch().await;
    assert_eq!(
        sample_types(&batch),
        [
            "inuse_space",
            "alloc_objects",
            "alloc_space",
            "inuse_objects"
        ]
    );
    assert!(profile(&batch, "alloc_space").samples.is_empty());
    assert_eq!(profile(&batch, "inuse_space").samples.len(), in_use);
    r.stop().await;
}

#[tokio::test]
async fn failing_targets_are_counted_and_do_not_hold_up_the_others() {
    let (addr, seen) = fake_go_process().await;
    let closed = format!("http://127.0.0.1:{}", free_port());
    let failing = format!("http://{addr}/fail");
    let slow = format!("http://{addr}/slow");
    let good = format!("http://{addr}");
    let mut r = start(
        remote(
            vec![
                target(closed.clone(), &[]),
                target(failing.clone(), &[]),
                target(slow.clone(), &[]),
                target(good, &[("service.name", "ok")]),
            ],
            300,
            only(ProfileKind::Goroutine),
        ),
        16,
    )
    .await;
    let started = std::time::Instant::now();
    for _ in 0..3 {
        let batch = r.next_batch().await;
        assert_eq!(
            resource_attributes(&batch, 0),
            pairs(&[("service.name", "ok")])
        );
        assert_eq!(batch.sample_count(), fixture_samples("go-goroutine.pb.gz"));
    }
    // Three batches at 300 ms, though one target takes 5 s to answer.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let failures = |t: &str| {
        r.counter(
            SCRAPE_FAILURES_METRIC,
            &[
                ("receiver", "pprof"),
                ("target", t),
                ("profile", "goroutine"),
            ],
        )
    };
    // Each failing target is retried every interval.
    for t in [&closed, &failing, &slow] {
        assert!(failures(t) >= 1, "{t}: {}", failures(t));
    }
    assert!(seen.count("/fail/debug/pprof/goroutine") >= 2);
    r.stop().await;
}

#[tokio::test]
async fn all_default_types_are_scraped_concurrently() {
    let (addr, seen) = fake_go_process().await;
    let mut r = start(
        remote(
            vec![target(format!("http://{addr}"), &[])],
            400,
            Profiles::default(),
        ),
        16,
    )
    .await;
    let mut kinds: HashMap<String, usize> = HashMap::new();
    while !["cpu", "goroutine", "inuse_space"]
        .iter()
        .all(|k| kinds.contains_key(*k))
    {
        let batch = r.next_batch().await;
        *kinds.entry(sample_types(&batch)[0].clone()).or_default() += 1;
    }
    // cpu, goroutine and heap (inuse) arrive; mutex only from its second scrape.
    assert!(kinds.contains_key("cpu"), "{kinds:?}");
    assert!(kinds.contains_key("goroutine"), "{kinds:?}");
    assert!(kinds.contains_key("inuse_space"), "{kinds:?}");
    // block is not served (404 here): counted, not fatal.
    assert!(seen.count("/debug/pprof/block") >= 1);
    assert!(
        r.counter(
            SCRAPE_FAILURES_METRIC,
            &[("profile", "block"), ("target", &format!("http://{addr}"))]
        ) >= 1
    );
    assert_eq!(seen.count("/debug/pprof/allocs"), 0);
    r.stop().await;
}

#[tokio::test]
async fn a_refused_delta_is_carried_into_the_next_one() {
    let (addr, seen) = fake_go_process().await;
    let mut r = start(
        remote(
            vec![target(format!("http://{addr}"), &[])],
            200,
            only(ProfileKind::Mutex),
        ),
        1,
    )
    .await;
    // The first scrape only primes, so the filler is in before any delta.
    r.tx.send(profcol_core::pdata::ProfileBatch::empty())
        .await
        .expect("fill");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(r.next_batch().await.is_empty(), "the filler");
    let batch = r.next_batch().await;
    let scrapes = seen.count("/debug/pprof/mutex") as i64;
    assert!(scrapes >= 4, "{scrapes}");
    // Differenced against the priming scrape: every refused interval is included.
    let contentions = profile(&batch, "contentions").samples[0].values[0];
    assert_eq!(contentions % MUTEX_STEP[0].0, 0);
    assert!(contentions >= 3 * MUTEX_STEP[0].0, "{contentions}");
    r.stop().await;
}
