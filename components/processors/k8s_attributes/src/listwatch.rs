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
#[path = "listwatch_tests.rs"]
mod tests;
