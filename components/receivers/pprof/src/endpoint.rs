//! The push server's routes: `POST /v1/pprof` (contrib's pprofreceiver server mode),
//! `POST /ingest` (Pyroscope) and `POST /push.v1.PusherService/Push` (Pyroscope's Connect
//! API). Bodies may be gzipped by `Content-Encoding`, and the pprof inside by its magic.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{ALLOW, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use profcol_core::component::Refused;
use profcol_core::decode_budget::{DecodeBudget, DecodePermit};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{DecodeError, is_gzip, maybe_gunzip_reserving};
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::pdata::semconv;
use profcol_core::server::{BODY_READ_TIMEOUT, BodyError, read_body, respond};
use prost::bytes::Bytes;

use crate::form::{param, query_params};
use crate::{Intake, SCOPE_SERVER, scope, string_kv};

pub const PPROF_PATH: &str = "/v1/pprof";
pub const INGEST_PATH: &str = "/ingest";
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";
/// The header that names the service on `/v1/pprof` (or the `service_name` parameter).
pub const SERVICE_NAME_HEADER: &str = "x-service-name";

const CONNECT_PROTO: &str = "application/proto";
/// How long a request may wait for pipeline room.
pub(crate) const DELIVER_DEADLINE: Duration = Duration::from_secs(5);
/// What a 429 asks the sender to wait.
const RETRY_AFTER_SECONDS: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Pprof,
    Ingest,
    Push,
}

impl Route {
    fn of(path: &str) -> Option<Route> {
        match path {
            PPROF_PATH => Some(Route::Pprof),
            INGEST_PATH => Some(Route::Ingest),
            PUSH_PATH => Some(Route::Push),
            _ => None,
        }
    }

    fn success(self) -> Response<Full<Bytes>> {
        match self {
            Route::Pprof => respond(StatusCode::NO_CONTENT, None, Vec::new()),
            // Pyroscope clients expect 200.
            Route::Ingest => respond(StatusCode::OK, None, Vec::new()),
            // An empty PushResponse encodes to no bytes.
            Route::Push => respond(StatusCode::OK, Some(CONNECT_PROTO), Vec::new()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error(
        "no such path {0:?}; profiles are accepted at POST {PPROF_PATH}, {INGEST_PATH} and {PUSH_PATH}"
    )]
    NotFound(String),
    #[error("method {0} is not allowed; use POST")]
    MethodNotAllowed(Method),
    #[error("unsupported content encoding {0:?}; use gzip or none")]
    UnsupportedEncoding(String),
    #[error("unsupported content type {0:?}; use {CONNECT_PROTO}")]
    UnsupportedMediaType(String),
    #[error("the request body exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("cannot read the request body: {0}")]
    Read(String),
    #[error("the request body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
    Timeout,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(Refused),
    #[error("internal error: {0}")]
    Internal(String),
}

impl RequestError {
    /// A pprof decoding failure: over the cap is 413, anything else 400.
    pub(crate) fn from_decode(e: DecodeError, limit: usize) -> Self {
        match e {
            DecodeError::TooLarge { .. } => RequestError::TooLarge { limit },
            DecodeError::Busy => RequestError::Refused(Refused::Busy),
            DecodeError::Protobuf(e) => RequestError::Invalid(format!(
                "invalid pprof profile: not a valid protobuf message: {e}"
            )),
            other => RequestError::Invalid(other.to_string()),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            RequestError::NotFound(_) => StatusCode::NOT_FOUND,
            RequestError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            RequestError::UnsupportedEncoding(_) | RequestError::UnsupportedMediaType(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            RequestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RequestError::Read(_) | RequestError::Invalid(_) => StatusCode::BAD_REQUEST,
            RequestError::Timeout => StatusCode::REQUEST_TIMEOUT,
            RequestError::Refused(Refused::Full | Refused::MemoryLimit | Refused::Busy) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            RequestError::Refused(Refused::ShuttingDown) => StatusCode::SERVICE_UNAVAILABLE,
            RequestError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The Connect error code (connectrpc.com/docs/protocol#error-codes).
    fn connect_code(&self) -> &'static str {
        match self {
            RequestError::NotFound(_) => "not_found",
            RequestError::MethodNotAllowed(_) | RequestError::UnsupportedEncoding(_) => {
                "unimplemented"
            }
            RequestError::UnsupportedMediaType(_)
            | RequestError::Read(_)
            | RequestError::Invalid(_) => "invalid_argument",
            RequestError::TooLarge { .. }
            | RequestError::Refused(Refused::Full)
            | RequestError::Refused(Refused::MemoryLimit)
            | RequestError::Refused(Refused::Busy) => "resource_exhausted",
            RequestError::Timeout => "deadline_exceeded",
            RequestError::Refused(Refused::ShuttingDown) => "unavailable",
            RequestError::Internal(_) => "internal",
        }
    }
}

/// The push server's handler, cheap to clone into connections.
#[derive(Clone)]
pub(crate) struct Endpoint {
    inner: Arc<Inner>,
}

struct Inner {
    intake: Intake,
    limit: usize,
    budget: DecodeBudget,
}

impl Endpoint {
    pub(crate) fn new(intake: Intake, limit: usize, budget: DecodeBudget) -> Self {
        Endpoint {
            inner: Arc::new(Inner {
                intake,
                limit,
                budget,
            }),
        }
    }

    pub(crate) async fn handle(
        &self,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        let Some(route) = Route::of(&path) else {
            return error_response(None, &RequestError::NotFound(path));
        };
        let (parts, mut body) = request.into_parts();
        let outcome = self.inner.accept(route, parts, &mut body, peer).await;
        // A refused request may still be arriving; the client must get to read the answer.
        profcol_core::net::discard_rest(body);
        match outcome {
            Ok(()) => route.success(),
            Err(e) => {
                tracing::debug!(?peer, path, error = %e, "pprof receiver: request refused");
                error_response(Some(route), &e)
            }
        }
    }
}

impl Inner {
    async fn accept(
        &self,
        route: Route,
        parts: http::request::Parts,
        body: &mut Incoming,
        peer: Option<SocketAddr>,
    ) -> Result<(), RequestError> {
        if parts.method != Method::POST {
            return Err(RequestError::MethodNotAllowed(parts.method.clone()));
        }
        let gzipped = content_coding(&parts.headers)?;
        if route == Route::Push {
            let media = media_type(&parts.headers);
            if !media.eq_ignore_ascii_case(CONNECT_PROTO) {
                return Err(RequestError::UnsupportedMediaType(media));
            }
        }
        let limit = self.limit;
        // Before the body is read: the memory limiter, then a reservation for its declared
        // length, grown to what it holds and then to what its parts decompress to.
        self.intake.admit().map_err(RequestError::Refused)?;
        let declared = profcol_core::server::declared_length_within(&parts.headers, limit);
        let mut permit = self
            .budget
            .reserve(declared)
            .map_err(RequestError::Refused)?;
        let body = read_body(&parts.headers, body, limit).await?;
        permit.cover(body.len()).map_err(RequestError::Refused)?;
        let (batch, permit) = tokio::task::spawn_blocking(move || {
            let batch = decode_request(route, &parts, &body, gzipped, limit, &mut permit);
            (batch, permit)
        })
        .await
        .map_err(|e| RequestError::Internal(format!("decoding task failed: {e}")))?;
        if let Some(batch) = batch? {
            let delivered = self.intake.deliver(batch, peer, DELIVER_DEADLINE).await;
            drop(permit);
            delivered.map_err(RequestError::Refused)?;
        }
        Ok(())
    }
}

/// Decompresses and decodes one request on a blocking thread, growing its reservation.
fn decode_request(
    route: Route,
    parts: &http::request::Parts,
    body: &[u8],
    gzipped: bool,
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Option<ProfileBatch>, RequestError> {
    let plain = decompress(body, gzipped, limit, permit)?;
    permit.cover(plain.len()).map_err(RequestError::Refused)?;
    match route {
        Route::Pprof => pprof(&parts.uri, &parts.headers, &plain, limit, permit).map(Some),
        Route::Ingest => {
            crate::pyroscope::ingest(&parts.uri, &parts.headers, &plain, limit, permit).map(Some)
        }
        Route::Push => crate::pyroscope::push(&plain, limit, permit),
    }
}

/// `POST /v1/pprof`: the body is one pprof; `service_name` (query) or `X-Service-Name`
/// (header) names the service.
fn pprof(
    uri: &http::Uri,
    headers: &HeaderMap,
    body: &[u8],
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<ProfileBatch, RequestError> {
    let params = query_params(uri.query());
    let service = param(&params, "service_name")
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get(SERVICE_NAME_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        })
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    let profile = crate::pyroscope::decode(body, limit, permit)?;
    pprof_to_batch(
        &profile,
        ToOtlpOptions {
            resource_attributes: service
                .map(|s| vec![string_kv(semconv::SERVICE_NAME, &s)])
                .unwrap_or_default(),
            scope: Some(scope(SCOPE_SERVER, Vec::new())),
            original_payload: None,
        },
    )
    .map_err(|e| RequestError::Invalid(format!("invalid pprof profile: {e}")))
}

fn media_type(headers: &HeaderMap) -> String {
    let value = headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    value.split(';').next().unwrap_or("").trim().to_owned()
}

/// Whether the body is gzipped by `Content-Encoding`.
fn content_coding(headers: &HeaderMap) -> Result<bool, RequestError> {
    let Some(value) = headers.get(CONTENT_ENCODING) else {
        return Ok(false);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Ok(false),
        "gzip" | "x-gzip" => Ok(true),
        _ => Err(RequestError::UnsupportedEncoding(text.into_owned())),
    }
}

/// Undoes `Content-Encoding: gzip`, within `limit`.
pub(crate) fn decompress<'a>(
    body: &'a [u8],
    gzipped: bool,
    limit: usize,
    permit: &mut DecodePermit,
) -> Result<Cow<'a, [u8]>, RequestError> {
    if !gzipped {
        return Ok(Cow::Borrowed(body));
    }
    if !is_gzip(body) {
        return Err(RequestError::Invalid(
            "Content-Encoding is gzip but the body is not gzip data".into(),
        ));
    }
    maybe_gunzip_reserving(body, limit, permit, body.len())
        .map_err(|e| RequestError::from_decode(e, limit))
}

/// Plain text for `/v1/pprof` and `/ingest` (and unknown paths); a Connect error
/// (`{"code": ..., "message": ...}`) for Push.
fn error_response(route: Option<Route>, error: &RequestError) -> Response<Full<Bytes>> {
    let message = error.to_string();
    let mut response = match route {
        Some(Route::Push) => {
            let body = serde_json::json!({"code": error.connect_code(), "message": message});
            respond(
                error.status(),
                Some("application/json"),
                body.to_string().into_bytes(),
            )
        }
        _ => respond(
            error.status(),
            Some("text/plain; charset=utf-8"),
            message.into_bytes(),
        ),
    };
    let headers = response.headers_mut();
    match error {
        RequestError::MethodNotAllowed(_) => {
            headers.insert(ALLOW, HeaderValue::from_static("POST"));
        }
        RequestError::Refused(Refused::Full | Refused::MemoryLimit | Refused::Busy) => {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        _ => {}
    }
    response
}

impl From<BodyError> for RequestError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge { limit } => RequestError::TooLarge { limit },
            BodyError::Timeout => RequestError::Timeout,
            BodyError::Read(e) => RequestError::Read(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn routes() {
        assert_eq!(Route::of("/v1/pprof"), Some(Route::Pprof));
        assert_eq!(Route::of("/ingest"), Some(Route::Ingest));
        assert_eq!(Route::of("/push.v1.PusherService/Push"), Some(Route::Push));
        assert_eq!(Route::of("/v1/pprof/"), None);
        assert_eq!(Route::Pprof.success().status(), StatusCode::NO_CONTENT);
        assert_eq!(Route::Ingest.success().status(), StatusCode::OK);
    }

    #[test]
    fn codings() {
        let budget = profcol_core::decode_budget::DecodeBudget::new(64);
        assert_eq!(content_coding(&HeaderMap::new()).ok(), Some(false));
        assert_eq!(
            content_coding(&headers(&[("content-encoding", "GZIP")])).ok(),
            Some(true)
        );
        assert!(matches!(
            content_coding(&headers(&[("content-encoding", "br")])),
            Err(RequestError::UnsupportedEncoding(e)) if e == "br"
        ));
        assert!(matches!(
            decompress(b"plain", true, 100, &mut budget.permit()),
            Err(RequestError::Invalid(_))
        ));
        let packed = profcol_core::pdata::codec::gzip_fast(&[7u8; 1000]);
        assert!(matches!(
            decompress(&packed, true, 100, &mut budget.permit()),
            Err(RequestError::TooLarge { limit: 100 })
        ));
        assert_eq!(
            decompress(&packed, true, 1000, &mut budget.permit())
                .expect("fits")
                .len(),
            1000
        );
    }

    #[test]
    fn connect_errors() {
        let r = error_response(Some(Route::Push), &RequestError::Invalid("bad".into()));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            r.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        let r = error_response(Some(Route::Ingest), &RequestError::Refused(Refused::Full));
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            r.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()),
            Some("1")
        );
        assert_eq!(
            RequestError::Refused(Refused::ShuttingDown).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
