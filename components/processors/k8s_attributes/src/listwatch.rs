//! One resource's list-then-watch loop, in place of kube-runtime's `watcher` with its
//! default backoff, whose faults on a real API server were:
//!
//! - the watcher emits `Init` before every list, and the backoff resets on any event, so
//!   a refused list (403) was retried about once a second forever, with a WARN from
//!   kube-runtime and one from us each time;
//! - after an outage, connection errors had grown the backoff to its 30 s cap, and the
//!   "too old resource version" (410) answer to the first watch cost a second wait before
//!   the relist.
//!
//! Here: a **refusal** (401, 403, 404 and other 4xx answers) backs off exponentially from
//! 1 s to 30 s; an **unreachable** server (connection errors, timeouts, 429, 5xx) from
//! 0.5 s to 5 s, so that a cluster coming back is seen within seconds; a **410** relists
//! at once, and a watch that ends normally is restarted at once. The backoff resets only
//! when a list completes or a watch delivers. Each fault is logged once per change (a
//! refusal with its status and message, unreachability once), and its end once; every
//! failed call is still counted in `otelcol_otelsvc_k8s_watch_errors_total`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::response::Status;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use profcol_core::telemetry::Counter;
use serde::de::DeserializeOwned;

/// Backoff bounds per kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub refused_initial: Duration,
    pub refused_max: Duration,
    pub unreachable_initial: Duration,
    pub unreachable_max: Duration,
}

/// What the processor uses.
pub const POLICY: Policy = Policy {
    refused_initial: Duration::from_secs(1),
    refused_max: Duration::from_secs(30),
    unreachable_initial: Duration::from_millis(500),
    unreachable_max: Duration::from_secs(5),
};

/// Page size of lists, as client-go's.
const PAGE_SIZE: u32 = 500;
/// The server ends a watch after this; the client gives up on a silent one a bit later.
const WATCH_TIMEOUT_SECS: u32 = 290;
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 15);
/// A watch that ends sooner than this having delivered nothing counts as a fault, so
/// that a server closing watches at once is not asked again in a tight loop.
const SHORTEST_WATCH: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The API server answered and said no: permissions, a missing resource.
    Refused,
    /// No answer, or one saying "later": connection errors, timeouts, 429, 5xx.
    Unreachable,
}

/// Why the last call for a resource failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `list` or `watch`.
    pub verb: &'static str,
    pub kind: FaultKind,
    /// The HTTP status, when the server answered.
    pub code: Option<u16>,
    pub message: String,
}

impl Fault {
    /// What makes two faults "the same" for logging: a refusal by its status and
    /// message, unreachability as such (its errors vary from try to try).
    fn signature(&self) -> (FaultKind, &'static str, Option<u16>, &str) {
        match self.kind {
            FaultKind::Refused => (self.kind, self.verb, self.code, &self.message),
            FaultKind::Unreachable => (self.kind, "", None, ""),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(code) => write!(f, "HTTP {code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// What a failed call means for the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// 410: the resource version is gone; relist now.
    Gone,
    Fault(Fault),
}

fn from_status(verb: &'static str, status: &Status) -> Outcome {
    let code = status.code;
    if code == 410 {
        return Outcome::Gone;
    }
    let kind = if code == 429 || code >= 500 || code == 0 {
        FaultKind::Unreachable
    } else {
        FaultKind::Refused
    };
    let mut message = status.message.trim().to_owned();
    if !status.reason.is_empty() && !message.contains(&status.reason) {
        message = if message.is_empty() {
            status.reason.clone()
        } else {
            format!("{} ({message})", status.reason)
        };
    }
    Outcome::Fault(Fault {
        verb,
        kind,
        code: (code != 0).then_some(code),
        message,
    })
}

fn classify(verb: &'static str, error: &kube::Error) -> Outcome {
    match error {
        kube::Error::Api(status) => from_status(verb, status),
        other => Outcome::Fault(Fault {
            verb,
            kind: FaultKind::Unreachable,
            code: None,
            message: profcol_core::errors::error_chain(other),
        }),
    }
}

/// Exponential backoff with a floor and cap per fault kind and a little jitter.
#[derive(Debug)]
pub struct Backoff {
    policy: Policy,
    last: Option<Duration>,
    jitter_seed: u64,
}

impl Backoff {
    pub fn new(policy: Policy) -> Self {
        Backoff {
            policy,
            last: None,
            jitter_seed: u64::from(std::process::id()),
        }
    }

    /// The wait before the next try after a fault of `kind`: double the last wait, at
    /// least the kind's first wait, at most its cap, plus up to 10 % jitter (so that
    /// the nodes of a DaemonSet do not come back in step).
    pub fn next(&mut self, kind: FaultKind) -> Duration {
        let (initial, max) = match kind {
            FaultKind::Refused => (self.policy.refused_initial, self.policy.refused_max),
            FaultKind::Unreachable => {
                (self.policy.unreachable_initial, self.policy.unreachable_max)
            }
        };
        let base = self
            .last
            .map_or(initial, |d| d.saturating_mul(2))
            .clamp(initial, max.max(initial));
        self.last = Some(base);
        // xorshift: cheap, and enough to spread retries.
        let mut x = self.jitter_seed ^ 0x9e37_79b9_7f4a_7c15;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter_seed = x;
        let tenth = base / 10;
        let jitter = if tenth.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(x % u64::try_from(tenth.as_nanos()).unwrap_or(u64::MAX).max(1))
        };
        base + jitter
    }

    pub fn reset(&mut self) {
        self.last = None;
    }
}

/// Per resource: listed at least once, and the fault of the last call if it failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchHealth {
    pub listed: bool,
    pub fault: Option<Fault>,
}

/// The health of every watch, for logs and the `wait_for_metadata` error.
#[derive(Debug, Default)]
pub struct Health {
    watches: Mutex<BTreeMap<&'static str, WatchHealth>>,
    /// An outage was logged and has not ended for every watch yet: it is one event for
    /// the API server, logged once however many watches see it.
    outage_logged: std::sync::atomic::AtomicBool,
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, WatchHealth>> {
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(&self, what: &'static str) {
        self.lock().entry(what).or_default();
    }

    /// Records a fault; true when it differs from the one before (worth a log line).
    fn fault(&self, what: &'static str, fault: Fault) -> bool {
        let mut watches = self.lock();
        let health = watches.entry(what).or_default();
        let changed = health
            .fault
            .as_ref()
            .is_none_or(|f| f.signature() != fault.signature());
        health.fault = Some(fault);
        changed
    }

    /// Records a call that worked; returns the fault it ends, if any.
    fn ok(&self, what: &'static str, listed: bool) -> Option<Fault> {
        let mut watches = self.lock();
        let health = watches.entry(what).or_default();
        health.listed |= listed;
        health.fault.take()
    }

    /// True for the first watch to see an outage, until the outage ends.
    fn outage_begins(&self) -> bool {
        !self
            .outage_logged
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// True once no watch sees the outage any more (and it was logged).
    fn outage_ends(&self) -> bool {
        let any = self.lock().values().any(|h| {
            h.fault
                .as_ref()
                .is_some_and(|f| f.kind == FaultKind::Unreachable)
        });
        !any && self
            .outage_logged
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Every watch's health, by resource.
    pub fn snapshot(&self) -> Vec<(&'static str, WatchHealth)> {
        self.lock().iter().map(|(k, v)| (*k, v.clone())).collect()
    }
}

/// The selectors of one watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    pub fields: String,
    pub labels: String,
}

impl Selectors {
    fn list_params(&self, continue_token: Option<String>) -> ListParams {
        ListParams {
            field_selector: (!self.fields.is_empty()).then(|| self.fields.clone()),
            label_selector: (!self.labels.is_empty()).then(|| self.labels.clone()),
            limit: Some(PAGE_SIZE),
            continue_token,
            ..ListParams::default()
        }
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            field_selector: (!self.fields.is_empty()).then(|| self.fields.clone()),
            label_selector: (!self.labels.is_empty()).then(|| self.labels.clone()),
            timeout: Some(WATCH_TIMEOUT_SECS),
            bookmarks: true,
            ..WatchParams::default()
        }
    }
}

/// Where one watch reports.
pub struct Reporter {
    pub what: &'static str,
    pub health: Arc<Health>,
    pub errors: Counter,
    pub policy: Policy,
}

impl Reporter {
    /// Counts and records a fault, logs it if it changed, and returns the wait.
    fn fault(&self, fault: Fault, backoff: &mut Backoff) -> Duration {
        self.errors.add(1);
        let wait = backoff.next(fault.kind);
        let cap = match fault.kind {
            FaultKind::Refused => self.policy.refused_max,
            FaultKind::Unreachable => self.policy.unreachable_max,
        };
        let (verb, kind) = (fault.verb, fault.kind);
        let text = fault.to_string();
        let changed = self.health.fault(self.what, fault);
        let log = match kind {
            FaultKind::Refused => changed,
            FaultKind::Unreachable => changed && self.health.outage_begins(),
        };
        if log {
            match kind {
                FaultKind::Refused => tracing::warn!(
                    resource = self.what,
                    verb,
                    error = %text,
                    "the Kubernetes API server refused to {verb} {}; retrying with backoff up to {cap:?}, logged again only if the answer changes",
                    self.what
                ),
                FaultKind::Unreachable => tracing::warn!(
                    resource = self.what,
                    verb,
                    error = %text,
                    "the Kubernetes API server is unreachable; retrying with backoff up to {cap:?}, logged again when it answers"
                ),
            }
        } else {
            tracing::debug!(resource = self.what, verb, error = %text, ?wait, "Kubernetes call failed again");
        }
        wait
    }

    fn ok(&self, listed: bool) {
        let Some(fault) = self.health.ok(self.what, listed) else {
            return;
        };
        let verb = if listed { "list" } else { "watch" };
        match fault.kind {
            FaultKind::Refused => tracing::info!(
                resource = self.what,
                after = %fault,
                "the Kubernetes {} {verb} works again",
                self.what
            ),
            FaultKind::Unreachable if self.health.outage_ends() => tracing::info!(
                resource = self.what,
                after = %fault,
                "the Kubernetes API server answers again; every watch works again"
            ),
            FaultKind::Unreachable => {
                tracing::debug!(
                    resource = self.what,
                    "the Kubernetes {} {verb} works again",
                    self.what
                );
            }
        }
    }
}

/// Lists `api` and watches it from the list's version, forever, handing every event to
/// `sink`: `Init`, `InitApply` per object and `InitDone` for each (re)list, then `Apply` /
/// `Delete`. Stops only when dropped.
pub async fn run<K, F>(api: Api<K>, selectors: Selectors, reporter: Reporter, mut sink: F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Event<K>) + Send,
{
    reporter.health.register(reporter.what);
    let mut backoff = Backoff::new(reporter.policy);
    let mut gone_in_a_row = 0u32;
    'relist: loop {
        // The list, page by page; the sink sees Init only once a page has come, so a
        // refused list changes nothing downstream.
        let mut continue_token: Option<String> = None;
        let mut started = false;
        let version = loop {
            match api
                .list(&selectors.list_params(continue_token.take()))
                .await
            {
                Ok(page) => {
                    if !started {
                        sink(Event::Init);
                        started = true;
                    }
                    for object in page.items {
                        sink(Event::InitApply(object));
                    }
                    match page.metadata.continue_.filter(|c| !c.is_empty()) {
                        Some(token) => continue_token = Some(token),
                        None => break page.metadata.resource_version.unwrap_or_default(),
                    }
                }
                Err(e) => {
                    let wait = match classify("list", &e) {
                        // A continue token that expired: start the list again.
                        Outcome::Gone => Duration::ZERO,
                        Outcome::Fault(fault) => reporter.fault(fault, &mut backoff),
                    };
                    tokio::time::sleep(wait).await;
                    continue 'relist;
                }
            }
        };
        sink(Event::InitDone);
        reporter.ok(true);
        backoff.reset();
        let mut version = version;
        // Watches from the version, again and again, until a relist is needed.
        loop {
            let opened = Instant::now();
            let (end, healthy) = match api.watch(&selectors.watch_params(), &version).await {
                Ok(stream) => {
                    watch_stream(stream, &mut version, &reporter, &mut backoff, &mut sink).await
                }
                Err(e) => match classify("watch", &e) {
                    Outcome::Gone => (End::Gone, false),
                    Outcome::Fault(fault) => (End::Fault(fault), false),
                },
            };
            if healthy {
                gone_in_a_row = 0;
            }
            match end {
                End::Gone => {
                    // Relist at once; only a server that keeps answering 410 to fresh
                    // versions is made to wait.
                    gone_in_a_row += 1;
                    if gone_in_a_row > 1 {
                        let fault = Fault {
                            verb: "watch",
                            kind: FaultKind::Unreachable,
                            code: Some(410),
                            message: "the resource version of a fresh list is already gone"
                                .to_owned(),
                        };
                        tokio::time::sleep(reporter.fault(fault, &mut backoff)).await;
                    }
                    continue 'relist;
                }
                End::Healthy => {}
                End::Quiet if opened.elapsed() < SHORTEST_WATCH => {
                    let fault = Fault {
                        verb: "watch",
                        kind: FaultKind::Unreachable,
                        code: None,
                        message: "the watch ended at once".to_owned(),
                    };
                    tokio::time::sleep(reporter.fault(fault, &mut backoff)).await;
                }
                End::Quiet => {}
                End::Fault(fault) => {
                    tokio::time::sleep(reporter.fault(fault, &mut backoff)).await;
                }
            }
        }
    }
}

/// How a watch ended.
enum End {
    /// 410: relist.
    Gone,
    /// Ended (or went silent) after working: watch again at once.
    Healthy,
    /// Ended without delivering anything and before it counted as working.
    Quiet,
    Fault(Fault),
}

/// Reads one watch to its end, handing events on and following the version.
async fn watch_stream<K, S, F>(
    stream: S,
    version: &mut String,
    reporter: &Reporter,
    backoff: &mut Backoff,
    sink: &mut F,
) -> (End, bool)
where
    K: Resource + Clone + Debug,
    S: futures_util::Stream<Item = Result<WatchEvent<K>, kube::Error>>,
    F: FnMut(Event<K>),
{
    let mut stream = std::pin::pin!(stream);
    // Healthy once it delivers, or stays open a moment.
    let mut healthy = false;
    let settled = tokio::time::sleep(SHORTEST_WATCH);
    let mut settled = std::pin::pin!(settled);
    loop {
        let item = tokio::select! {
            () = &mut settled, if !healthy => {
                healthy = true;
                reporter.ok(false);
                backoff.reset();
                continue;
            }
            // Silent past its timeout: ended; start another.
            item = tokio::time::timeout(WATCH_IDLE, stream.next()) => item.unwrap_or_default(),
        };
        let fault = match item {
            Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                if let Some(v) = o.resource_version() {
                    *version = v;
                }
                sink(Event::Apply(o));
                None
            }
            Some(Ok(WatchEvent::Deleted(o))) => {
                if let Some(v) = o.resource_version() {
                    *version = v;
                }
                sink(Event::Delete(o));
                None
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                *version = b.metadata.resource_version;
                None
            }
            Some(Ok(WatchEvent::Error(status))) => Some(from_status("watch", &status)),
            Some(Err(e)) => Some(classify("watch", &e)),
            None => {
                let end = if healthy { End::Healthy } else { End::Quiet };
                return (end, healthy);
            }
        };
        match fault {
            Some(Outcome::Gone) => return (End::Gone, healthy),
            Some(Outcome::Fault(f)) => return (End::Fault(f), healthy),
            None => {}
        }
        if !healthy {
            healthy = true;
            reporter.ok(false);
            backoff.reset();
        }
    }
}

#[cfg(test)]
mod tests {
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
}
