use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Pod;
use profcol_core::telemetry::Telemetry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

fn within(d: Duration, base_ms: u64) -> bool {
    let base = Duration::from_millis(base_ms);
    d >= base && d <= base + base / 10
}

#[test]
fn refusals_back_off_to_30s_and_unreachability_to_5s() {
    let mut b = Backoff::new(POLICY);
    for ms in [1000, 2000, 4000, 8000, 16000, 30000, 30000] {
        let d = b.next(FaultKind::Refused);
        assert!(within(d, ms), "{d:?} for {ms}");
    }
    // From a refusal's 30 s to an outage: the outage's cap applies at once.
    let d = b.next(FaultKind::Unreachable);
    assert!(within(d, 5000), "{d:?}");
    b.reset();
    for ms in [500, 1000, 2000, 4000, 5000, 5000] {
        let d = b.next(FaultKind::Unreachable);
        assert!(within(d, ms), "{d:?} for {ms}");
    }
    b.reset();
    assert!(within(b.next(FaultKind::Refused), 1000));
}

/// With the policy's numbers, a refused list is tried 5 times in the first 30 s (at 0,
/// 1, 3, 7 and 15 s): the bound the integration test checks against a real binary.
#[test]
fn a_refused_list_is_tried_five_times_in_30s() {
    let mut b = Backoff::new(POLICY);
    let mut at = Duration::ZERO;
    let mut tries = 0;
    while at <= Duration::from_secs(30) {
        tries += 1;
        at += b.next(FaultKind::Refused);
    }
    assert_eq!(tries, 5);
}

fn status(code: u16, reason: &str, message: &str) -> Status {
    Status::failure(message, reason).with_code(code)
}

#[test]
fn statuses_are_refusals_outages_or_gone() {
    let forbidden = status(
        403,
        "Forbidden",
        "pods is forbidden: User \"x\" cannot list resource \"pods\"",
    );
    assert_eq!(
        from_status("list", &forbidden),
        Outcome::Fault(Fault {
            verb: "list",
            kind: FaultKind::Refused,
            code: Some(403),
            message: "Forbidden (pods is forbidden: User \"x\" cannot list resource \"pods\")"
                .into(),
        })
    );
    assert_eq!(
        from_status("watch", &status(410, "Expired", "too old resource version")),
        Outcome::Gone
    );
    for code in [429, 500, 503] {
        let Outcome::Fault(f) = from_status("list", &status(code, "x", "y")) else {
            panic!("{code}");
        };
        assert_eq!(f.kind, FaultKind::Unreachable, "{code}");
    }
    let Outcome::Fault(f) = from_status("list", &status(404, "NotFound", "")) else {
        panic!("404");
    };
    assert_eq!(
        (f.kind, f.message.as_str()),
        (FaultKind::Refused, "NotFound")
    );
    assert_eq!(f.to_string(), "HTTP 404: NotFound");
}

#[test]
fn a_fault_is_worth_a_log_line_only_when_it_changes() {
    let h = Health::default();
    let refused = |message: &str| Fault {
        verb: "list",
        kind: FaultKind::Refused,
        code: Some(403),
        message: message.into(),
    };
    let down = |message: &str| Fault {
        verb: "watch",
        kind: FaultKind::Unreachable,
        code: None,
        message: message.into(),
    };
    assert!(h.fault("pods", refused("no")));
    assert!(!h.fault("pods", refused("no")));
    assert!(h.fault("pods", refused("still no, differently")));
    assert!(h.fault("nodes", refused("no")), "per resource");
    assert!(h.fault("pods", down("connection refused")));
    assert!(
        !h.fault("pods", down("connection reset")),
        "an outage is one change"
    );
    // ... for every watch: logged by the first to see it, ended by the last.
    assert!(h.outage_begins());
    assert!(h.fault("nodes", down("connection refused")));
    assert!(!h.outage_begins());
    assert_eq!(h.ok("nodes", false), Some(down("connection refused")));
    assert!(!h.outage_ends(), "pods still sees it");
    assert_eq!(h.ok("pods", true), Some(down("connection reset")));
    assert!(h.outage_ends());
    assert!(!h.outage_ends());
    assert_eq!(h.ok("pods", false), None);
    assert!(h.fault("pods", down("connection refused")), "a new outage");
    let snapshot = h.snapshot();
    assert_eq!(snapshot[0].0, "nodes");
    assert!(snapshot[1].1.listed);
}

// ---- against a scripted API server ---------------------------------------------------

/// What the scripted server answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Lists: 403. Watches: never asked.
    Refuse,
    /// Lists: one pod. Watches: an ERROR 410 event.
    ListThenGone,
}

struct Scripted {
    port: u16,
    script: Arc<Mutex<Script>>,
    lists: Arc<AtomicUsize>,
    watches: Arc<AtomicUsize>,
}

async fn scripted(script: Script) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let script = Arc::new(Mutex::new(script));
    let lists = Arc::new(AtomicUsize::new(0));
    let watches = Arc::new(AtomicUsize::new(0));
    let (s, l, w) = (script.clone(), lists.clone(), watches.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (s, l, w) = (s.clone(), l.clone(), w.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i;
                        }
                        let mut chunk = [0u8; 4096];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                    let script = *s.lock().expect("lock");
                    let watch = target.contains("watch=true");
                    let (status, body) = if watch {
                        w.fetch_add(1, Ordering::SeqCst);
                        let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 5 (9)","reason":"Expired","code":410}}"#;
                        ("200 OK", format!("{gone}\n"))
                    } else {
                        l.fetch_add(1, Ordering::SeqCst);
                        match script {
                            Script::Refuse => (
                                "403 Forbidden",
                                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"system:serviceaccount:o:profcol\" cannot list resource \"pods\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"kind":"pods"},"code":403}"#.to_owned(),
                            ),
                            Script::ListThenGone => (
                                "200 OK",
                                r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","namespace":"n","uid":"u1","resourceVersion":"5"}}]}"#.to_owned(),
                            ),
                        }
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Scripted {
        port,
        script,
        lists,
        watches,
    }
}

fn api(port: u16) -> Api<Pod> {
    let uri = format!("http://127.0.0.1:{port}").parse().expect("uri");
    let client = kube::Client::try_from(kube::Config::new(uri)).expect("client");
    Api::all(client)
}

type Seen = Arc<Mutex<Vec<String>>>;

/// Events the sink saw, by name.
fn recorder() -> (Seen, impl FnMut(Event<Pod>) + Send) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let sink = move |e: Event<Pod>| {
        let name = match &e {
            Event::Init => "Init".to_owned(),
            Event::InitApply(p) => format!("InitApply {}", p.name_any()),
            Event::InitDone => "InitDone".to_owned(),
            Event::Apply(p) => format!("Apply {}", p.name_any()),
            Event::Delete(p) => format!("Delete {}", p.name_any()),
        };
        s.lock().expect("lock").push(name);
    };
    (seen, sink)
}

const FAST: Policy = Policy {
    refused_initial: Duration::from_millis(100),
    refused_max: Duration::from_millis(400),
    unreachable_initial: Duration::from_secs(30),
    unreachable_max: Duration::from_secs(30),
};

#[tokio::test]
async fn a_refused_list_backs_off_and_recovers_when_allowed() {
    let server = scripted(Script::Refuse).await;
    let health = Arc::new(Health::default());
    let telemetry = Telemetry::new();
    let errors = telemetry.counter("errors_total", "", &[]);
    let (seen, sink) = recorder();
    let reporter = Reporter {
        what: "pods",
        health: health.clone(),
        errors: errors.clone(),
        policy: FAST,
    };
    let task = tokio::spawn(run(api(server.port), Selectors::default(), reporter, sink));
    // Tries at 0, 0.1, 0.3, 0.7, 1.1, 1.5 s (+ up to 10 %): 5 within 1.3 s. Before, the
    // reset on `Init` made it one try per first wait: 13.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let lists = server.lists.load(Ordering::SeqCst);
    assert!((4..=5).contains(&lists), "{lists} lists in 1.3 s");
    assert_eq!(errors.get(), u64::try_from(lists).expect("count"));
    assert!(
        seen.lock().expect("lock").is_empty(),
        "a refused list sends no Init"
    );
    let fault = health.snapshot()[0].1.fault.clone().expect("a fault");
    assert_eq!(
        (fault.verb, fault.kind, fault.code),
        ("list", FaultKind::Refused, Some(403))
    );
    assert!(
        fault.message.contains("cannot list resource \"pods\""),
        "{fault}"
    );

    // Permission granted: within the 400 ms cap the list goes through.
    *server.script.lock().expect("lock") = Script::ListThenGone;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let events = seen.lock().expect("lock").clone();
    assert_eq!(
        events[..3],
        ["Init", "InitApply a", "InitDone"],
        "{events:?}"
    );
    let h = &health.snapshot()[0].1;
    assert!(h.listed);
    task.abort();
}

#[tokio::test]
async fn a_gone_watch_relists_at_once() {
    let server = scripted(Script::ListThenGone).await;
    let (seen, sink) = recorder();
    let reporter = Reporter {
        what: "pods",
        health: Arc::new(Health::default()),
        errors: Counter::default(),
        // Any wait would be 30 s: what happens within the test's second happened at once.
        policy: FAST_GONE,
    };
    let task = tokio::spawn(run(api(server.port), Selectors::default(), reporter, sink));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // list, watch → 410, list at once, watch → 410 again: now a server that keeps
    // answering 410 to fresh versions waits.
    assert_eq!(server.lists.load(Ordering::SeqCst), 2);
    assert_eq!(server.watches.load(Ordering::SeqCst), 2);
    let events = seen.lock().expect("lock").clone();
    assert_eq!(
        events,
        [
            "Init",
            "InitApply a",
            "InitDone",
            "Init",
            "InitApply a",
            "InitDone"
        ]
    );
    task.abort();
}

const FAST_GONE: Policy = Policy {
    refused_initial: Duration::from_secs(30),
    refused_max: Duration::from_secs(30),
    unreachable_initial: Duration::from_secs(30),
    unreachable_max: Duration::from_secs(30),
};
