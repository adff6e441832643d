//! The push server's routes: `POST /v1/pprof` (contrib's pprofreceiver server mode),
//! `POST /ingest` (Pyroscope) and `POST /push.v1.PusherService/Push` (Pyroscope's Connect
//! API). Bodies may be gzipped by `Content-Encoding`, and the pprof inside by its magic.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use profcol_core::component::Refused;
use profcol_core::decode_budget::{DecodeBudget, DecodePermit};
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{DecodeError, is_gzip, maybe_gunzip_reserving};
use profcol_core::pdata::pprof::{ToOtlpOptions, pprof_to_batch};
use profcol_core::pdata::semconv;
use profcol_core::server::{Rejection, read_body, respond};
use profcol_core::telemetry::WireBytes;
use prost::bytes::Bytes;

use crate::query_and_multipart::{param, query_params};
use crate::{SCOPE_SERVER, scope, string_kv};
use profcol_core::component::Intake;

pub const PPROF_PATH: &str = "/v1/pprof";
pub const INGEST_PATH: &str = "/ingest";
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";
/// The header that names the service on `/v1/pprof` (or the `service_name` parameter).
pub const SERVICE_NAME_HEADER: &str = "x-service-name";

const CONNECT_PROTO: &str = "application/proto";
/// How long a request may wait for pipeline room.
pub(crate) const DELIVER_DEADLINE: Duration = Duration::from_secs(5);

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

/// A refused request: the rejection every HTTP receiver shares.
pub(crate) type RequestError = Rejection;

fn not_found(path: String) -> RequestError {
    Rejection::NotFound {
        path,
        accepted: format!(
            "profiles are accepted at POST {PPROF_PATH}, {INGEST_PATH} and {PUSH_PATH}"
        ),
    }
}

/// A pprof decoding failure: over the cap is 413, anything else 400.
pub(crate) fn from_decode(e: DecodeError, limit: usize) -> RequestError {
    match e {
        DecodeError::TooLarge { .. } => Rejection::TooLarge { limit },
        DecodeError::Busy => Rejection::Refused(Refused::Busy),
        DecodeError::Protobuf(e) => Rejection::Invalid(format!(
            "invalid pprof profile: not a valid protobuf message: {e}"
        )),
        other => Rejection::Invalid(other.to_string()),
    }
}

/// The Connect error code (connectrpc.com/docs/protocol#error-codes).
fn connect_code(e: &RequestError) -> &'static str {
    match e {
        Rejection::NotFound { .. } => "not_found",
        Rejection::MethodNotAllowed(_) | Rejection::UnsupportedEncoding { .. } => "unimplemented",
        Rejection::UnsupportedMediaType { .. } | Rejection::Read(_) | Rejection::Invalid(_) => {
            "invalid_argument"
        }
        Rejection::TooLarge { .. }
        | Rejection::Refused(Refused::Full)
        | Rejection::Refused(Refused::MemoryLimit)
        | Rejection::Refused(Refused::Busy) => "resource_exhausted",
        Rejection::Timeout => "deadline_exceeded",
        Rejection::Refused(Refused::ShuttingDown) => "unavailable",
        Rejection::Internal(_) => "internal",
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
    bytes: WireBytes,
}

impl Endpoint {
    pub(crate) fn new(
        intake: Intake,
        limit: usize,
        budget: DecodeBudget,
        bytes: WireBytes,
    ) -> Self {
        Endpoint {
            inner: Arc::new(Inner {
                intake,
                limit,
                budget,
                bytes,
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
            return error_response(None, &not_found(path));
        };
        let (parts, mut body) = request.into_parts();
        let outcome = self.inner.accept(route, parts, &mut body, peer).await;
        // A refused request may still be arriving; the client must get to read the answer.
        profcol_core::server::discard_rest(body);
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
                return Err(Rejection::UnsupportedMediaType {
                    given: media,
                    accepted: CONNECT_PROTO,
                });
            }
        }
        let limit = self.limit;
        // Before the body is read: the memory limiter, then a reservation for its declared
        // length, grown to what it holds and then to what its parts decompress to.
        let declared = profcol_core::server::declared_length_within(&parts.headers, limit);
        let mut permit = self
            .intake
            .reserve(&self.budget, declared)
            .map_err(RequestError::Refused)?;
        let body = read_body(&parts.headers, body, limit).await?;
        permit.cover(body.len()).map_err(RequestError::Refused)?;
        let bytes = self.bytes.clone();
        let (batch, permit) = tokio::task::spawn_blocking(move || {
            let batch = decode_request(route, &parts, &body, gzipped, limit, &mut permit, &bytes);
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
    bytes: &WireBytes,
) -> Result<Option<ProfileBatch>, RequestError> {
    let plain = decompress(body, gzipped, limit, permit)?;
    // As the request came, and after its Content-Encoding (parts a form gzips on their
    // own are decompressed later, as profiles are).
    bytes.add(body.len(), plain.len());
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
        _ => Err(Rejection::UnsupportedEncoding {
            given: text.into_owned(),
            accepted: "gzip or none",
        }),
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
    maybe_gunzip_reserving(body, limit, permit, body.len()).map_err(|e| from_decode(e, limit))
}

/// Plain text for `/v1/pprof` and `/ingest` (and unknown paths); a Connect error
/// (`{"code": ..., "message": ...}`) for Push.
fn error_response(route: Option<Route>, error: &RequestError) -> Response<Full<Bytes>> {
    let message = error.to_string();
    let mut response = match route {
        Some(Route::Push) => {
            let body = serde_json::json!({"code": connect_code(error), "message": message});
            respond(
                error.http_status(),
                Some("application/json"),
                body.to_string().into_bytes(),
            )
        }
        _ => respond(
            error.http_status(),
            Some("text/plain; charset=utf-8"),
            message.into_bytes(),
        ),
    };
    error.add_headers(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

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
            Err(RequestError::UnsupportedEncoding { given, .. }) if given == "br"
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
            r.headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()),
            Some("1")
        );
        assert_eq!(
            RequestError::Refused(Refused::ShuttingDown).http_status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
