//! OTLP/HTTP: `POST /v1development/profiles` with a protobuf or JSON body, plain, gzip,
//! zstd or snappy (`snappy` block or framed as otelcol reads it, `x-snappy-framed`). Answers come in the request's encoding.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use profcol_core::component::Refused;
use profcol_core::pdata::ProfileBatch;
use profcol_core::pdata::codec::{DecodeError, is_gzip};
use profcol_core::pdata::otlp_json::{read_profiles_json, write_export_response_json};
use profcol_core::pdata::types::ExportProfilesServiceResponse;
use profcol_core::telemetry::WireBytes;
use prost::Message;
use prost::bytes::Bytes;

use crate::decompress::{unsnappy, unsnappy_framed, unzstd};
use crate::status::{RpcStatus, code, refused_status};
use profcol_core::component::Intake;
use profcol_core::decode_budget::{DecodeBudget, DecodePermit};
use profcol_core::server::{self, PeerAddr, Rejection, read_body};

pub(crate) const PROFILES_PATH: &str = "/v1development/profiles";
const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// How long a request may wait for pipeline room.
const DELIVER_DEADLINE: std::time::Duration = crate::grpc::DEFAULT_DEADLINE;

/// The body encoding of a request, and so of its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => PROTOBUF,
            Encoding::Json => JSON,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coding {
    Identity,
    Gzip,
    Zstd,
    /// A raw block, or the framing format when the body starts with its identifier.
    Snappy,
    SnappyFramed,
}

/// A refused request: the rejection every HTTP receiver shares.
pub(crate) type HttpError = Rejection;

/// What the path, media types and encodings this endpoint accepts are, for its refusals.
fn not_found(path: &str) -> HttpError {
    Rejection::NotFound {
        path: path.to_owned(),
        accepted: format!("OTLP profiles are accepted at POST {PROFILES_PATH}"),
    }
}
const MEDIA_TYPES: &str = "application/x-protobuf or application/json";
const ENCODINGS: &str = "gzip, zstd, snappy, x-snappy-framed or none";

/// The `google.rpc.Status` a refusal answers with.
fn rpc_status(e: &HttpError) -> RpcStatus {
    let code = match e {
        Rejection::Refused(refused) => return refused_status(*refused),
        Rejection::NotFound { .. } => code::NOT_FOUND,
        Rejection::MethodNotAllowed(_) => code::UNIMPLEMENTED,
        Rejection::TooLarge { .. } => code::RESOURCE_EXHAUSTED,
        Rejection::Timeout => code::DEADLINE_EXCEEDED,
        Rejection::UnsupportedMediaType { .. }
        | Rejection::UnsupportedEncoding { .. }
        | Rejection::Read(_)
        | Rejection::Invalid(_) => code::INVALID_ARGUMENT,
        Rejection::Internal(_) => code::INTERNAL,
    };
    RpcStatus::new(code, e.to_string())
}

/// The OTLP/HTTP handler, for [`profcol_core::server::serve`].
#[derive(Clone)]
pub(crate) struct HttpEndpoint {
    inner: Arc<Inner>,
}

struct Inner {
    intake: Intake,
    budget: DecodeBudget,
    max_body_size: usize,
    bytes: WireBytes,
}

impl HttpEndpoint {
    pub(crate) fn new(
        intake: Intake,
        budget: DecodeBudget,
        max_body_size: usize,
        bytes: WireBytes,
    ) -> Self {
        HttpEndpoint {
            inner: Arc::new(Inner {
                intake,
                budget,
                max_body_size,
                bytes,
            }),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<Request<Incoming>> for HttpEndpoint {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { Ok(inner.handle(request).await) })
    }
}

impl Inner {
    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let encoding = content_type(request.headers());
        let (parts, mut body) = request.into_parts();
        let outcome = self.export(&parts, &mut body, encoding.clone()).await;
        // A refused request may still be arriving; the client must get to read the answer.
        profcol_core::server::discard_rest(body);
        match outcome {
            Ok(encoding) => success(encoding),
            Err(e) => {
                tracing::debug!(error = %e, "otlp receiver: HTTP request refused");
                error_response(&e, encoding.ok())
            }
        }
    }

    async fn export(
        &self,
        parts: &http::request::Parts,
        body: &mut Incoming,
        encoding: Result<Encoding, String>,
    ) -> Result<Encoding, HttpError> {
        if parts.uri.path() != PROFILES_PATH {
            return Err(not_found(parts.uri.path()));
        }
        if parts.method != Method::POST {
            return Err(HttpError::MethodNotAllowed(parts.method.clone()));
        }
        let encoding = encoding.map_err(|given| Rejection::UnsupportedMediaType {
            given,
            accepted: MEDIA_TYPES,
        })?;
        let coding = content_coding(&parts.headers)?;
        let limit = self.max_body_size;
        let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0);
        // Before the body is read: the limiter, and a reservation for the declared length.
        let mut permit = self
            .intake
            .reserve(
                &self.budget,
                server::declared_length_within(&parts.headers, limit),
            )
            .map_err(HttpError::Refused)?;
        let body = read_body(&parts.headers, body, limit).await?;
        permit.cover(body.len()).map_err(HttpError::Refused)?;
        let bytes = self.bytes.clone();
        let (batch, permit) = tokio::task::spawn_blocking(move || {
            let batch = decode(&body, coding, encoding, limit, &mut permit, &bytes);
            (batch, permit)
        })
        .await
        .map_err(|e| HttpError::Internal(format!("decoding task failed: {e}")))?;
        let batch = batch?;
        // The reservation lasts until the pipelines took the batch.
        let delivered = self.intake.deliver(batch, peer, DELIVER_DEADLINE).await;
        drop(permit);
        delivered.map_err(HttpError::Refused)?;
        Ok(encoding)
    }
}

fn content_type(headers: &HeaderMap) -> Result<Encoding, String> {
    let value = headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let media = value.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case(PROTOBUF) {
        Ok(Encoding::Protobuf)
    } else if media.eq_ignore_ascii_case(JSON) {
        Ok(Encoding::Json)
    } else {
        Err(value)
    }
}

fn content_coding(headers: &HeaderMap) -> Result<Coding, HttpError> {
    let Some(value) = headers.get(CONTENT_ENCODING) else {
        return Ok(Coding::Identity);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Ok(Coding::Identity),
        "gzip" | "x-gzip" => Ok(Coding::Gzip),
        "zstd" => Ok(Coding::Zstd),
        "snappy" => Ok(Coding::Snappy),
        "x-snappy-framed" => Ok(Coding::SnappyFramed),
        _ => Err(Rejection::UnsupportedEncoding {
            given: text.into_owned(),
            accepted: ENCODINGS,
        }),
    }
}

/// Decompresses (capped at `limit`), parses and validates a body. CPU-bound: run it off the
/// async workers.
fn decode(
    body: &[u8],
    coding: Coding,
    encoding: Encoding,
    limit: usize,
    permit: &mut DecodePermit,
    bytes: &WireBytes,
) -> Result<ProfileBatch, HttpError> {
    let decompressed = |e| match e {
        crate::decompress::Error::TooLarge { limit } => HttpError::TooLarge { limit },
        crate::decompress::Error::Busy => HttpError::Refused(Refused::Busy),
        other => HttpError::Invalid(other.to_string()),
    };
    let plain: Cow<'_, [u8]> = match coding {
        Coding::Identity => Cow::Borrowed(body),
        Coding::Gzip => {
            if !is_gzip(body) {
                return Err(HttpError::Invalid(
                    "Content-Encoding is gzip but the body is not gzip data".into(),
                ));
            }
            Cow::Owned(crate::decompress::gunzip(body, limit, permit).map_err(decompressed)?)
        }
        Coding::Zstd => Cow::Owned(unzstd(body, limit, permit).map_err(decompressed)?),
        Coding::Snappy => Cow::Owned(unsnappy(body, limit, permit).map_err(decompressed)?),
        Coding::SnappyFramed => {
            Cow::Owned(unsnappy_framed(body, limit, permit).map_err(decompressed)?)
        }
    };
    bytes.add(body.len(), plain.len());
    match encoding {
        Encoding::Protobuf => permit.cover(plain.len()),
        // JSON is read through a document tree first, which takes far more per byte.
        Encoding::Json => permit.cover_with(
            plain.len(),
            profcol_core::pdata::limits::JSON_DECODE_AMPLIFICATION,
        ),
    }
    .map_err(HttpError::Refused)?;
    let invalid = |e: DecodeError| HttpError::Invalid(e.to_string());
    match encoding {
        Encoding::Protobuf => ProfileBatch::decode(&plain).map_err(|e| invalid(e.into())),
        Encoding::Json => {
            let data = read_profiles_json(&plain).map_err(|e| invalid(DecodeError::Json(e)))?;
            ProfileBatch::new(data).map_err(|e| invalid(DecodeError::Invalid(e)))
        }
    }
}

/// [`decode`] as the server calls it, for [`crate::fuzzing`].
pub(crate) fn decode_for_fuzzing(
    content_encoding: &str,
    json: bool,
    body: &[u8],
    limit: usize,
) -> Result<ProfileBatch, String> {
    let mut headers = HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_str(content_encoding) {
        headers.insert(CONTENT_ENCODING, value);
    }
    let coding = content_coding(&headers).map_err(|e| e.to_string())?;
    let encoding = if json {
        Encoding::Json
    } else {
        Encoding::Protobuf
    };
    let mut permit = profcol_core::decode_budget::DecodeBudget::new(64).permit();
    decode(
        body,
        coding,
        encoding,
        limit,
        &mut permit,
        &WireBytes::detached(),
    )
    .map_err(|e| e.to_string())
}

fn success(encoding: Encoding) -> Response<Full<Bytes>> {
    let response = ExportProfilesServiceResponse::default();
    let body = match encoding {
        Encoding::Protobuf => response.encode_to_vec(),
        Encoding::Json => {
            let mut out = Vec::new();
            write_export_response_json(&response, &mut out);
            out
        }
    };
    respond(StatusCode::OK, encoding.content_type(), body)
}

/// A `google.rpc.Status` body in the request's encoding; plain text when the request's
/// encoding is not one of OTLP's.
fn error_response(error: &HttpError, encoding: Option<Encoding>) -> Response<Full<Bytes>> {
    let status = rpc_status(error);
    let mut response = match encoding {
        Some(Encoding::Protobuf) => respond(error.http_status(), PROTOBUF, status.encode_to_vec()),
        Some(Encoding::Json) => respond(
            error.http_status(),
            JSON,
            crate::status::status_json(&status),
        ),
        None => respond(
            error.http_status(),
            "text/plain; charset=utf-8",
            status.message.into_bytes(),
        ),
    };
    error.add_headers(response.headers_mut());
    response
}

fn respond(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Full<Bytes>> {
    server::respond(status, Some(content_type), body)
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
    fn content_types() {
        assert_eq!(
            content_type(&headers(&[("content-type", "application/x-protobuf")])),
            Ok(Encoding::Protobuf)
        );
        assert_eq!(
            content_type(&headers(&[(
                "content-type",
                "Application/JSON; charset=utf-8"
            )])),
            Ok(Encoding::Json)
        );
        assert_eq!(
            content_type(&headers(&[("content-type", "text/plain")])),
            Err("text/plain".into())
        );
        assert_eq!(content_type(&HeaderMap::new()), Err(String::new()));
    }

    #[test]
    fn content_codings() {
        assert_eq!(
            content_coding(&HeaderMap::new()).ok(),
            Some(Coding::Identity)
        );
        assert_eq!(
            content_coding(&headers(&[("content-encoding", "GZIP")])).ok(),
            Some(Coding::Gzip)
        );
        assert_eq!(
            content_coding(&headers(&[("content-encoding", "zstd")])).ok(),
            Some(Coding::Zstd)
        );
        assert!(matches!(
            content_coding(&headers(&[("content-encoding", "br")])),
            Err(Rejection::UnsupportedEncoding { given, .. }) if given == "br"
        ));
    }

    #[test]
    fn gzip_that_is_not_gzip_is_a_bad_request() {
        let budget = profcol_core::decode_budget::DecodeBudget::new(1);
        let e = decode(
            b"plain",
            Coding::Gzip,
            Encoding::Protobuf,
            1 << 20,
            &mut budget.permit(),
            &WireBytes::detached(),
        )
        .expect_err("not gzip");
        assert_eq!(e.http_status(), StatusCode::BAD_REQUEST);
    }
}
