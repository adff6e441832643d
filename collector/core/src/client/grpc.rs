//! The gRPC client side the exporters share: where an `endpoint` setting points
//! ([`GrpcTarget`]), a lazily connecting channel with the `tls:` block applied
//! ([`connect_lazy`]), configured headers on every call ([`WithHeaders`]), and what a failed
//! call means for the exporter helper ([`from_grpc_status`]: retryable or permanent, as
//! otelcol's OTLP exporter maps gRPC codes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::HeaderMap;
use http::uri::{Scheme, Uri};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use super::tls::{ClientTls, TlsClientSettings, TlsError};
use crate::component::ExportError;
use crate::config::ConfigError;
use profcol_proto::google_rpc as rpc;

/// The `User-Agent` profcol's clients send.
pub const USER_AGENT: &str = concat!("profcol/", env!("CARGO_PKG_VERSION"));

/// Where a gRPC exporter connects: `scheme://authority` and whether it speaks TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcTarget {
    pub uri: Uri,
    pub tls: bool,
}

impl GrpcTarget {
    /// `host:port` (TLS unless `insecure`), `http://host[:port]` (plaintext) or
    /// `https://host[:port]` (TLS, as otelcol does even with `insecure`).
    pub fn parse(endpoint: &str, insecure: bool) -> Result<Self, String> {
        let endpoint = endpoint.trim();
        let (scheme_given, tls) = if endpoint.starts_with("http://") {
            (true, false)
        } else if endpoint.starts_with("https://") {
            (true, true)
        } else if endpoint.contains("://") {
            return Err(format!(
                "{endpoint:?}: unsupported scheme (use host:port, http:// or https://)"
            ));
        } else {
            (false, !insecure)
        };
        let text = if scheme_given {
            endpoint.to_owned()
        } else {
            format!("{}://{endpoint}", if tls { "https" } else { "http" })
        };
        let uri: Uri = text
            .parse()
            .map_err(|e| format!("{endpoint:?} is not a valid endpoint: {e}"))?;
        let authority = uri
            .authority()
            .filter(|a| !a.host().is_empty())
            .ok_or_else(|| format!("{endpoint:?} has no host"))?;
        if !scheme_given && authority.port_u16().is_none() {
            return Err(format!(
                "{endpoint:?} has no port: write host:port, as in collector:4317"
            ));
        }
        if authority.as_str().contains('@') {
            return Err(format!("{endpoint:?}: user info is not supported"));
        }
        if let Some(pq) = uri.path_and_query()
            && !(pq.as_str().is_empty() || pq.as_str() == "/")
        {
            return Err(format!(
                "{endpoint:?}: a gRPC endpoint takes no path or query"
            ));
        }
        let scheme = if tls { Scheme::HTTPS } else { Scheme::HTTP };
        let uri = Uri::builder()
            .scheme(scheme)
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| format!("{endpoint:?} is not a valid endpoint: {e}"))?;
        Ok(GrpcTarget { uri, tls })
    }
}

/// Where a gRPC exporter sends and the metadata it adds to every call: what its
/// `endpoint` and `headers` keys compile into ([`grpc_target`], [`grpc_headers`]).
#[derive(Debug, Clone)]
pub struct GrpcDestination {
    pub target: GrpcTarget,
    pub headers: HeaderMap,
}

/// A gRPC exporter's `endpoint` key, checked: TLS unless `insecure`, as
/// [`GrpcTarget::parse`] reads it; the error is at `endpoint`.
pub fn grpc_target(endpoint: &str, insecure: bool) -> Result<GrpcTarget, ConfigError> {
    if endpoint.trim().is_empty() {
        return Err(ConfigError::new(
            "endpoint",
            "must be set: host:port, http://host:port (plaintext) or https://host:port",
        ));
    }
    GrpcTarget::parse(endpoint, insecure).map_err(|e| ConfigError::new("endpoint", e))
}

/// A gRPC exporter's `headers` key as metadata; errors at `headers::<name>`. gRPC's own
/// `grpc-*` headers are refused too.
pub fn grpc_headers(headers: &BTreeMap<String, String>) -> Result<HeaderMap, Vec<ConfigError>> {
    crate::config::header_map(headers, &["grpc-"])
}

/// Why a gRPC channel could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("must be created inside a tokio runtime")]
    NoRuntime,
    #[error("user agent: {0}")]
    UserAgent(#[source] tonic::transport::Error),
    #[error("tls: {0}")]
    Tls(#[from] TlsError),
    #[error("tls: {0}")]
    TlsSetup(#[source] tonic::transport::Error),
}

/// A channel to `target` that connects on first use, with the `tls:` block applied
/// (files read and parsed now) and `timeout` as the connect timeout (0: none). Must be
/// called inside a tokio runtime (the channel's worker is spawned here). `who` names the
/// component in the warning about unused TLS files.
pub fn connect_lazy(
    target: &GrpcTarget,
    tls: &TlsClientSettings,
    timeout: Duration,
    who: &str,
) -> Result<Channel, ConnectError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ConnectError::NoRuntime);
    }
    let mut builder = Endpoint::from(target.uri.clone())
        .user_agent(USER_AGENT)
        .map_err(ConnectError::UserAgent)?
        .tcp_nodelay(true);
    if !timeout.is_zero() {
        builder = builder.connect_timeout(timeout);
    }
    if target.tls {
        let loaded = ClientTls::load(tls)?;
        builder = builder
            .tls_config_with_verifier(loaded.tonic_config(), loaded.verifier.clone())
            .map_err(ConnectError::TlsSetup)?;
    } else if tls.ca_file().is_some() || tls.cert_file().is_some() {
        tracing::warn!(
            component = %who,
            endpoint = %target.uri,
            "the endpoint is plaintext; the tls files are not used"
        );
    }
    Ok(builder.connect_lazy())
}

/// A channel that adds the configured headers (gRPC metadata) to every call.
#[derive(Clone)]
pub struct WithHeaders {
    channel: Channel,
    headers: Arc<HeaderMap>,
}

impl WithHeaders {
    pub fn new(channel: Channel, headers: HeaderMap) -> Self {
        WithHeaders {
            channel,
            headers: Arc::new(headers),
        }
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for WithHeaders {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        for (name, value) in self.headers.iter() {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        self.channel.call(request)
    }
}

/// A failed gRPC call as one attempt's error.
pub fn from_grpc_status(status: &tonic::Status) -> ExportError {
    let code = status.code();
    let details = rpc::decode_status(status.details());
    let retry_info = details.as_ref().and_then(rpc::Status::retry_info);
    let chain = std::error::Error::source(status).map(error_chain);
    let message = match (status.message(), chain) {
        ("", None) => format!("gRPC {code:?}"),
        (m, None) => format!("gRPC {code:?}: {m}"),
        (m, Some(chain)) if chain.contains(m) => format!("gRPC {code:?}: {chain}"),
        (m, Some(chain)) => format!("gRPC {code:?}: {m}: {chain}"),
    };
    // Errors tonic makes on this side (connect refused, reset stream, broken connection)
    // carry their source; a server's status never does.
    let local_transport_error = std::error::Error::source(status).is_some()
        && matches!(code, Code::Unknown | Code::Internal);
    let retryable = match code {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => true,
        // Throttling is retried only when the server says when (otelcol's rule): without
        // RetryInfo it is an over-size or quota refusal that a retry repeats.
        Code::ResourceExhausted => retry_info.is_some(),
        _ => local_transport_error,
    };
    if retryable {
        ExportError::Retryable {
            message,
            retry_after: retry_info.filter(|d| !d.is_zero()),
        }
    } else {
        ExportError::Permanent { message }
    }
}

pub use crate::errors::error_chain;

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn grpc_codes_map_as_otelcol_maps_them() {
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unavailable,
            Code::DataLoss,
        ] {
            assert!(
                from_grpc_status(&tonic::Status::new(code, "x")).is_retryable(),
                "{code:?}"
            );
        }
        for code in [
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::Unimplemented,
            Code::NotFound,
            Code::AlreadyExists,
            Code::FailedPrecondition,
            Code::Internal,
            Code::Unknown,
            Code::ResourceExhausted,
        ] {
            assert!(
                !from_grpc_status(&tonic::Status::new(code, "x")).is_retryable(),
                "{code:?}"
            );
        }
    }

    #[test]
    fn resource_exhausted_with_retry_info_is_retryable_after_the_delay() {
        let details = rpc::Status {
            code: 8,
            message: "slow down".into(),
            details: vec![rpc::Any::retry_info(Duration::from_secs(7))],
        }
        .encode_to_vec();
        let status =
            tonic::Status::with_details(Code::ResourceExhausted, "slow down", details.into());
        let e = from_grpc_status(&status);
        assert!(e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert!(e.to_string().contains("slow down"), "{e}");
    }
}
