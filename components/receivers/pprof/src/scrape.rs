//! Remote mode: every interval, `GET <target><path>` for each target and enabled profile
//! type, each pair in its own task (a slow target or type delays nothing else). CPU is
//! asked for a window (`?seconds=`); cumulative columns are differenced ([`crate::delta`]).

use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_ENCODING, USER_AGENT};
use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use profcol_core::client::tls::{TlsError, public_roots_config};
use profcol_core::component::Refused;
use profcol_core::config::ConfigError;
use profcol_core::errors::error_chain;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::pdata::types::KeyValue;
use profcol_core::telemetry::{Counter, Telemetry};
use profcol_proto::pprof as pp;
use prost::Message as _;
use prost::bytes::Bytes;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::config::{ProfileKind, RemoteConfig, without_user_info};
use crate::delta::{self, DeltaState};
use crate::{SCOPE_SCRAPE, SCRAPE_FAILURES_METRIC, scope, string_kv};
use profcol_core::component::Intake;

/// The largest profile read from a target, as sent and after decompression.
const MAX_PROFILE_BYTES: usize = 32 << 20;
const USER_AGENT_VALUE: &str = concat!("profcol/", env!("CARGO_PKG_VERSION"));
/// How long a scraped batch may wait for pipeline room.
const DELIVER_DEADLINE: Duration = Duration::from_secs(5);

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ScrapeError {
    #[error("request failed: {0}")]
    Request(String),
    #[error("no complete answer within {}ms", .0.as_millis())]
    Timeout(Duration),
    #[error("HTTP status {0}, expected 200")]
    Status(StatusCode),
    #[error("cannot read the response body: {0}")]
    Body(String),
    #[error("the profile exceeds the limit of {MAX_PROFILE_BYTES} bytes")]
    TooLarge,
    #[error("{0}")]
    Invalid(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// One target and profile type.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The target's endpoint, for logs and the failure counter.
    target: Arc<str>,
    attributes: Arc<Vec<KeyValue>>,
    kind: ProfileKind,
    url: Uri,
    interval: Duration,
    timeout: Duration,
}

pub(crate) struct Scraper {
    client: HttpClient,
    jobs: Vec<Job>,
}

/// The jobs of a `remote` block whose endpoints are valid base URLs and paths valid URL
/// paths: one per target and enabled profile type. An error names the target whose URL
/// does not parse.
pub(crate) fn jobs(config: &RemoteConfig) -> Result<Vec<Job>, ConfigError> {
    let timeout = config.effective_timeout();
    let mut jobs = Vec::new();
    for (i, target) in config.targets.iter().enumerate() {
        let base = target.endpoint.trim_end_matches('/');
        let attributes: Arc<Vec<KeyValue>> =
            Arc::new(target.labels.iter().map(|(k, v)| string_kv(k, v)).collect());
        let name: Arc<str> = Arc::from(target.endpoint.as_str());
        for (kind, path) in config.profiles.enabled() {
            let mut url = format!("{base}{path}");
            let mut job_timeout = timeout;
            if kind == ProfileKind::Cpu {
                let seconds = config.cpu_seconds();
                let separator = if path.contains('?') { '&' } else { '?' };
                url.push_str(&format!("{separator}seconds={seconds}"));
                // Go holds the answer for the whole window.
                job_timeout = job_timeout.max(Duration::from_secs(seconds + 1));
            }
            let url: Uri = url.parse().map_err(|e| {
                ConfigError::new(
                    format!("remote::targets[{i}]::endpoint"),
                    format!("{:?} is not a valid URL: {e}", without_user_info(&url)),
                )
            })?;
            jobs.push(Job {
                target: name.clone(),
                attributes: attributes.clone(),
                kind,
                url,
                interval: config.interval,
                timeout: job_timeout,
            });
        }
    }
    Ok(jobs)
}

impl Scraper {
    /// Runs `jobs` (a checked config's, [`jobs`]) with one client for all of them.
    pub(crate) fn new(config: &RemoteConfig, jobs: Vec<Job>) -> Result<Self, TlsError> {
        Ok(Scraper {
            client: client(config.effective_timeout())?,
            jobs,
        })
    }

    /// Runs every job until shutdown.
    pub(crate) async fn run(
        self,
        intake: Intake,
        telemetry: &Telemetry,
        receiver: &str,
        shutdown: CancellationToken,
    ) {
        let receiver: Arc<str> = Arc::from(receiver);
        let mut tasks = JoinSet::new();
        for job in self.jobs {
            let failures = telemetry.counter(
                SCRAPE_FAILURES_METRIC,
                "Scrapes of a pprof endpoint that failed (unreachable, non-200, bad body, timeout).",
                &[
                    ("receiver", &receiver),
                    ("target", &job.target),
                    ("profile", job.kind.name()),
                ],
            );
            tasks.spawn(scrape_loop(
                job,
                self.client.clone(),
                intake.clone(),
                failures,
                receiver.clone(),
                shutdown.clone(),
            ));
        }
        while tasks.join_next().await.is_some() {}
    }
}

fn client(connect_timeout: Duration) -> Result<HttpClient, TlsError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(public_roots_config()?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector))
}

async fn scrape_loop(
    job: Job,
    client: HttpClient,
    intake: Intake,
    failures: Counter,
    receiver: Arc<str>,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(job.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut state = DeltaState::default();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let outcome = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            r = scrape(&client, &job, state.previous()) => r,
        };
        let (batch, snapshot) = match outcome {
            Ok((Some(batch), snapshot)) => (batch, snapshot),
            Ok((None, snapshot)) => {
                if let Some(s) = snapshot {
                    state.commit(s);
                }
                continue;
            }
            Err(e) => {
                failures.add(1);
                tracing::warn!(
                    receiver = %receiver,
                    target = %job.target,
                    profile = job.kind.name(),
                    url = %job.url,
                    error = %e,
                    "pprof receiver: scrape failed; retrying next interval"
                );
                continue;
            }
        };
        match intake
            .deliver(batch, None, DELIVER_DEADLINE.min(job.interval))
            .await
        {
            Ok(()) => {
                if let Some(s) = snapshot {
                    state.commit(s);
                }
            }
            Err(Refused::ShuttingDown) => return,
            // The snapshot is not kept: the next delta then covers this interval too.
            Err(e) => tracing::warn!(
                receiver = %receiver,
                target = %job.target,
                profile = job.kind.name(),
                error = %e,
                "pprof receiver: scraped profile dropped"
            ),
        }
    }
}

/// One scrape: fetch, decode, difference against `previous`, translate. The batch is
/// None when there is nothing to emit (a first cumulative scrape, an empty profile); the
/// snapshot (cumulative types only) is to be kept once the batch is delivered.
async fn scrape(
    client: &HttpClient,
    job: &Job,
    previous: Option<Arc<delta::Snapshot>>,
) -> Result<Translated, ScrapeError> {
    let (gzipped, body) = tokio::time::timeout(job.timeout, fetch(client, &job.url))
        .await
        .map_err(|_| ScrapeError::Timeout(job.timeout))??;
    let kind = job.kind;
    let attributes = job.attributes.clone();
    tokio::task::spawn_blocking(move || {
        translate(
            kind,
            &body,
            gzipped,
            attributes.to_vec(),
            previous.as_deref(),
        )
    })
    .await
    .map_err(|e| ScrapeError::Internal(format!("decoding task failed: {e}")))?
}

async fn fetch(client: &HttpClient, url: &Uri) -> Result<(bool, Bytes), ScrapeError> {
    let mut request = Request::get(url.clone())
        .body(Empty::<Bytes>::new())
        .map_err(|e| ScrapeError::Internal(e.to_string()))?;
    request
        .headers_mut()
        .insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    let response = client
        .request(request)
        .await
        .map_err(|e| ScrapeError::Request(error_chain(&e)))?;
    if response.status() != StatusCode::OK {
        return Err(ScrapeError::Status(response.status()));
    }
    let gzipped = response
        .headers()
        .get(CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let body = Limited::new(response.into_body(), MAX_PROFILE_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                ScrapeError::TooLarge
            } else {
                ScrapeError::Body(error_chain(e.as_ref()))
            }
        })?
        .to_bytes();
    Ok((gzipped, body))
}

type Translated = (Option<ProfileBatch>, Option<Arc<delta::Snapshot>>);

fn translate(
    kind: ProfileKind,
    body: &[u8],
    gzipped: bool,
    attributes: Vec<KeyValue>,
    previous: Option<&delta::Snapshot>,
) -> Result<Translated, ScrapeError> {
    // Scrapes are paced by the interval, one at a time per target and bounded by
    // MAX_PROFILE_BYTES, so they reserve from a budget of their own.
    let mut permit = profcol_core::decode_budget::DecodeBudget::for_pprof(
        profcol_core::decode_budget::DEFAULT_DECODE_MEMORY_MIB,
    )
    .permit();
    let plain = crate::endpoint::decompress(body, gzipped, MAX_PROFILE_BYTES, &mut permit)
        .map_err(|e| ScrapeError::Invalid(e.to_string()))?;
    let profile =
        crate::pyroscope::decode(&plain, MAX_PROFILE_BYTES, &mut permit).map_err(|e| match e {
            crate::endpoint::RequestError::TooLarge { .. } => ScrapeError::TooLarge,
            other => ScrapeError::Invalid(other.to_string()),
        })?;
    let options = ToOtlpOptions {
        resource_attributes: attributes,
        scope: Some(scope(SCOPE_SCRAPE, Vec::new())),
        original_payload: None,
    };
    let invalid = |e: profcol_core::pdata::pprof::PprofError| {
        ScrapeError::Invalid(format!("invalid pprof profile: {e}"))
    };
    if !kind.has_cumulative_columns() {
        let batch = pprof_to_batch(&profile, options).map_err(invalid)?;
        return Ok((non_empty(batch), None));
    }
    // Differencing matches samples across scrapes by meaning, on pprof's own types; a
    // scrape comes once per interval, so their allocations are paid at that pace.
    let cumulative = pp::Profile::decode(&*profile).map_err(|e| {
        ScrapeError::Invalid(format!(
            "invalid pprof profile: not a valid protobuf message: {e}"
        ))
    })?;
    let diff = delta::diff(kind, &cumulative, previous)
        .map_err(|e| ScrapeError::Invalid(format!("invalid pprof profile: {e}")))?;
    let batch = match &diff.profile {
        Some(p) => {
            let mut batch = pprof_to_batch(&p.encode_to_vec(), options).map_err(invalid)?;
            delta::drop_zero_samples(&mut batch, &diff.delta_columns);
            non_empty(batch)
        }
        None => None,
    };
    Ok((batch, Some(diff.snapshot)))
}

fn non_empty(batch: ProfileBatch) -> Option<ProfileBatch> {
    (batch.sample_count() > 0).then_some(batch)
}
