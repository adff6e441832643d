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

use crate::Intake;
use crate::status::{RpcStatus, refused_status};
use profcol_core::server::PeerAddr;

/// How long a request without `grpc-timeout` may wait for pipeline room.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

/// The tonic service, wrapped for [`profcol_core::server::serve`].
#[derive(Clone)]
pub(crate) struct GrpcEndpoint {
    inner: ProfilesServiceServer<Export>,
}

impl GrpcEndpoint {
    pub(crate) fn new(intake: Intake, max_message_size: usize) -> Self {
        let inner = ProfilesServiceServer::new(Export { intake })
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Zstd)
            .max_decoding_message_size(max_message_size);
        GrpcEndpoint { inner }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<Request<Incoming>> for GrpcEndpoint {
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        use tonic::codegen::Service;
        type Inner = ProfilesServiceServer<Export>;
        let mut inner = self.inner.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| {
                <Inner as Service<Request<Incoming>>>::poll_ready(&mut inner, cx)
            })
            .await?;
            let mut response = inner.call(request).await?;
            oversize_is_resource_exhausted(&mut response);
            Ok(response)
        })
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
