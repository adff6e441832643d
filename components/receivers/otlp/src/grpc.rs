//! OTLP/gRPC: `opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use profcol_core::pdata::types::ProfilesData;
use profcol_proto::otlp::collector::profiles::v1development::profiles_service_server::{
    ProfilesService, ProfilesServiceServer,
};
use profcol_proto::otlp::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use prost::Message;
use prost::bytes::Bytes;
use tonic::codec::CompressionEncoding;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use crate::status::{RpcStatus, refused_status};
use http_body_util::Full;
use profcol_core::component::Intake;
use profcol_core::component::Refused;
use profcol_core::decode_budget::{DecodeBudget, DecodePermit};
use profcol_core::server::{BodyError, PeerAddr, read_body};
use profcol_core::telemetry::WireBytes;

/// How long a request without `grpc-timeout` may wait for pipeline room.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

/// The tonic service, wrapped for [`profcol_core::server::serve`]. The wrapper reads the
/// request itself, within the HTTP receiver's body timeout and the size cap, asks the
/// memory limiter and reserves decoding memory, and undoes `grpc-encoding` itself with a
/// cap, so that tonic only ever decodes a plain message whose cost is already reserved.
#[derive(Clone)]
pub(crate) struct GrpcEndpoint {
    inner: ProfilesServiceServer<Export>,
    intake: Intake,
    budget: DecodeBudget,
    max_message_size: usize,
    bytes: WireBytes,
}

impl GrpcEndpoint {
    pub(crate) fn new(
        intake: Intake,
        budget: DecodeBudget,
        max_message_size: usize,
        bytes: WireBytes,
    ) -> Self {
        let inner = ProfilesServiceServer::new(Export {
            intake: intake.clone(),
        })
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .max_decoding_message_size(max_message_size);
        GrpcEndpoint {
            inner,
            intake,
            budget,
            max_message_size,
            bytes,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Inner = ProfilesServiceServer<Export>;

/// gRPC's length prefix: a compressed flag and a 4-byte big-endian length.
const FRAME_HEADER: usize = 5;

impl hyper::service::Service<Request<Incoming>> for GrpcEndpoint {
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let endpoint = self.clone();
        Box::pin(async move {
            let (mut parts, mut body) = request.into_parts();
            let prepared = endpoint.prepare(&mut parts, &mut body).await;
            profcol_core::server::discard_rest(body);
            let (message, _permit) = match prepared {
                Ok(ready) => ready,
                Err(status) => return Ok(status.into_http()),
            };
            let request = Request::from_parts(parts, Full::new(message));
            let mut inner = endpoint.inner.clone();
            use tonic::codegen::Service;
            std::future::poll_fn(|cx| {
                <Inner as Service<Request<Full<Bytes>>>>::poll_ready(&mut inner, cx)
            })
            .await?;
            // The reservation is held until tonic has decoded, validated and delivered.
            let mut response = inner.call(request).await?;
            oversize_is_resource_exhausted(&mut response);
            Ok(response)
        })
    }
}

impl GrpcEndpoint {
    /// Reads and, where compressed, decompresses the request's one message, with its
    /// decoding reservation; or the status that refuses it.
    async fn prepare(
        &self,
        parts: &mut http::request::Parts,
        body: &mut Incoming,
    ) -> Result<(Bytes, DecodePermit), Status> {
        let refused = |r: Refused| to_tonic(refused_status(r));
        let limit = self.max_message_size.saturating_add(FRAME_HEADER);
        let bytes = read_body(&parts.headers, body, limit)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge { .. } => Status::resource_exhausted(format!(
                    "the message is too large: over the limit of {} bytes",
                    self.max_message_size
                )),
                BodyError::Timeout => Status::deadline_exceeded(e.to_string()),
                BodyError::Read(_) => Status::cancelled(e.to_string()),
            })?;
        let mut permit = self
            .intake
            .reserve(&self.budget, bytes.len())
            .map_err(refused)?;
        let encoding = parts
            .headers
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("identity")
            .to_ascii_lowercase();
        // One compressed frame, as unary clients send, is decompressed here; anything else
        // goes to tonic as it came, which answers it (and is bounded by the read above).
        let frame = match bytes.first() {
            Some(1) if bytes.len() >= FRAME_HEADER => {
                let mut len = [0u8; 4];
                len.copy_from_slice(&bytes[1..FRAME_HEADER]);
                let len = u32::from_be_bytes(len) as usize;
                (bytes.len() == FRAME_HEADER + len).then_some(len)
            }
            _ => None,
        };
        if !matches!(encoding.as_str(), "gzip" | "zstd" | "snappy") {
            if encoding == "identity" {
                self.bytes.add(bytes.len(), bytes.len());
            }
            return Ok((bytes, permit));
        }
        if frame.is_none() && encoding == "snappy" {
            if bytes.first() == Some(&0) {
                // Sent uncompressed despite the header (allowed): tonic reads it plain.
                parts.headers.remove("grpc-encoding");
                self.bytes.add(bytes.len(), bytes.len());
                return Ok((bytes, permit));
            }
            // tonic has no snappy; an Export request is one message.
            return Err(Status::unimplemented(
                "snappy-compressed requests must be one compressed message",
            ));
        }
        if frame.is_none() {
            // Several frames, or one that does not add up: tonic decompresses them, so
            // reserve what the largest message may take before handing them on.
            permit.cover(self.max_message_size).map_err(refused)?;
            return Ok((bytes, permit));
        }
        let max = self.max_message_size;
        let compressed = bytes.slice(FRAME_HEADER..);
        let (plain, mut permit) = tokio::task::spawn_blocking(move || {
            let plain = match encoding.as_str() {
                "gzip" => crate::decompress::gunzip(&compressed, max, &mut permit),
                // grpc-go's snappy compressor, which otelcol registers, writes the
                // framing format.
                "snappy" => crate::decompress::unsnappy_framed(&compressed, max, &mut permit),
                _ => crate::decompress::unzstd(&compressed, max, &mut permit),
            };
            (plain, permit)
        })
        .await
        .map_err(|e| Status::internal(format!("decompression task failed: {e}")))?;
        let plain = plain.map_err(|e| match e {
            crate::decompress::Error::TooLarge { .. } => Status::resource_exhausted(e.to_string()),
            crate::decompress::Error::Busy => refused(Refused::Busy),
            crate::decompress::Error::Corrupt(m) => Status::internal(m),
        })?;
        permit.cover(plain.len()).map_err(refused)?;
        self.bytes.add(bytes.len(), FRAME_HEADER + plain.len());
        let mut framed = Vec::with_capacity(FRAME_HEADER + plain.len());
        framed.push(0);
        framed.extend_from_slice(&u32::try_from(plain.len()).unwrap_or(u32::MAX).to_be_bytes());
        framed.extend_from_slice(&plain);
        drop(plain);
        parts.headers.remove("grpc-encoding");
        Ok((Bytes::from(framed), permit))
    }
}

/// tonic answers a message over `max_decoding_message_size` with OUT_OF_RANGE, which OTLP
/// clients retry; the OTLP spec says RESOURCE_EXHAUSTED (not retryable, as it carries no
/// RetryInfo). Compressed messages that grow past the limit already get RESOURCE_EXHAUSTED.
/// `Export` itself never answers OUT_OF_RANGE, so every such status comes from that check.
fn oversize_is_resource_exhausted<B>(response: &mut Response<B>) {
    const OUT_OF_RANGE: &[u8] = b"11";
    let headers = response.headers_mut();
    if headers.get("grpc-status").map(HeaderValue::as_bytes) == Some(OUT_OF_RANGE) {
        headers.insert("grpc-status", HeaderValue::from_static("8"));
    }
}

pub(crate) struct Export {
    intake: Intake,
}

#[async_trait::async_trait]
impl ProfilesService for Export {
    async fn export(
        &self,
        request: tonic::Request<ExportProfilesServiceRequest>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, Status> {
        let deadline = grpc_timeout(request.metadata()).map_or(DEFAULT_DEADLINE, answer_within);
        let peer = request.extensions().get::<PeerAddr>().map(|p| p.0);
        let request = request.into_inner();
        let data = ProfilesData {
            resource_profiles: request.resource_profiles,
            dictionary: request.dictionary,
        };
        let batch = crate::validate(data).await.map_err(|e| match e {
            crate::IntakeError::Invalid(e) => Status::invalid_argument(e.to_string()),
            crate::IntakeError::Internal(m) => Status::internal(m),
        })?;
        match self.intake.deliver(batch, peer, deadline).await {
            Ok(()) => Ok(tonic::Response::new(
                ExportProfilesServiceResponse::default(),
            )),
            Err(refused) => Err(to_tonic(refused_status(refused))),
        }
    }
}

/// A tonic status carrying the whole `google.rpc.Status` (and so its RetryInfo) in
/// `grpc-status-details-bin`.
fn to_tonic(status: RpcStatus) -> Status {
    let details = Bytes::from(status.encode_to_vec());
    Status::with_details(Code::from_i32(status.code), status.message, details)
}

/// How long to wait for pipeline room given the client's `grpc-timeout`: a little less, so
/// that the refusal (with its RetryInfo) reaches the client before it gives up on its own.
fn answer_within(timeout: Duration) -> Duration {
    timeout.saturating_sub((timeout / 10).min(Duration::from_secs(1)))
}

/// Parses `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
pub(crate) fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n * 3600),
        'M' => Duration::from_secs(n * 60),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_grpc_timeout("1500m"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("10u"), Some(Duration::from_micros(10)));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "S", "5", "5s", "123456789S", "-1S", "1.5S", "5é"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }

    #[test]
    fn answers_before_the_client_gives_up() {
        assert_eq!(
            answer_within(Duration::from_millis(300)),
            Duration::from_millis(270)
        );
        assert_eq!(
            answer_within(Duration::from_secs(60)),
            Duration::from_secs(59)
        );
        assert_eq!(answer_within(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn out_of_range_becomes_resource_exhausted() {
        let mut r = Status::out_of_range("too large").into_http::<()>();
        oversize_is_resource_exhausted(&mut r);
        assert_eq!(r.headers()["grpc-status"], "8");
        let mut ok = Status::invalid_argument("x").into_http::<()>();
        oversize_is_resource_exhausted(&mut ok);
        assert_eq!(ok.headers()["grpc-status"], "3");
    }
}
