//! The accept loop every HTTP and gRPC receiver shares: TCP, optional TLS (handshaken in
//! the connection's own task, so a slow client holds up no one), HTTP/1.1 and HTTP/2
//! through hyper, the peer's address put into each request's extensions, and a bounded
//! graceful shutdown.

pub mod tls;

use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::component::BoxError;

/// Who sent a request: the TCP peer, in every request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// After shutdown, how long open connections get to finish their requests before they are
/// dropped. Handlers stop waiting for pipeline room at shutdown, so this is rarely reached.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(700);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// A pause after a failed accept (out of file descriptors), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Open connections per listener; past this, new ones wait in the kernel's backlog until
/// one closes, so a client that opens sockets without end cannot exhaust descriptors.
pub const MAX_CONNECTIONS: usize = 1024;
/// Concurrent HTTP/2 streams (requests) per connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;
/// A connection with no request in flight for this long is closed (gracefully: HTTP/2
/// clients get a GOAWAY and reconnect when they next send).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A bound socket and how to speak on it.
pub struct Listener {
    pub tcp: TcpListener,
    pub tls: Option<TlsAcceptor>,
    /// gRPC speaks HTTP/2 only; HTTP endpoints either.
    pub http2_only: bool,
    /// For logs: who serves ("otlp receiver") and what ("grpc", "http").
    pub component: &'static str,
    pub protocol: &'static str,
}

/// Who serves what, for logs.
#[derive(Clone, Copy)]
struct Who {
    component: &'static str,
    protocol: &'static str,
}

/// Serves `service` on `listener` until `shutdown` is cancelled, then lets open connections
/// finish for at most [`DRAIN_TIMEOUT`].
pub async fn serve<S, B>(listener: Listener, service: S, shutdown: CancellationToken)
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE_INTERVAL)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    if listener.http2_only {
        builder = builder.http2_only();
    }
    let who = Who {
        component: listener.component,
        protocol: listener.protocol,
    };
    let (component, protocol) = (who.component, who.protocol);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.tcp.accept(), if connections.len() < MAX_CONNECTIONS => match accepted {
                Ok((stream, peer)) => {
                    // Small requests and responses should not wait for Nagle.
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(
                        builder.clone(),
                        stream,
                        peer,
                        listener.tls.clone(),
                        service.clone(),
                        shutdown.clone(),
                        who,
                    ));
                }
                Err(e) => {
                    tracing::warn!(component, protocol, error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            component,
            protocol,
            open = connections.len(),
            "closing connections that did not finish in time"
        );
        connections.abort_all();
    }
}

async fn connection<S, B>(
    builder: auto::Builder<TokioExecutor>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    service: S,
    shutdown: CancellationToken,
    who: Who,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let activity = Activity::default();
    let tracked = activity.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(PeerAddr(peer));
        let guard = tracked.begin();
        let response = service.call(request);
        async move {
            let response = response.await;
            drop(guard);
            response
        }
    });
    match tls {
        None => serve_connection(&builder, stream, service, &shutdown, activity, peer, who).await,
        Some(acceptor) => {
            let handshake = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => r,
            };
            match handshake {
                Ok(Ok(stream)) => {
                    serve_connection(&builder, stream, service, &shutdown, activity, peer, who)
                        .await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(component = who.component, protocol = who.protocol, %peer, error = %e, "TLS handshake failed");
                }
                Err(_) => {
                    tracing::debug!(component = who.component, protocol = who.protocol, %peer, "TLS handshake timed out");
                }
            }
        }
    }
}

async fn serve_connection<I, S, B>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    shutdown: &CancellationToken,
    activity: Activity,
    peer: SocketAddr,
    who: Who,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        () = activity.idle_for(IDLE_TIMEOUT) => {
            tracing::debug!(component = who.component, protocol = who.protocol, %peer, "closing an idle connection");
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(component = who.component, protocol = who.protocol, %peer, error = %e, "connection ended with an error");
    }
}

/// Requests in flight on one connection, and when the last one ended.
#[derive(Clone, Default)]
struct Activity(std::sync::Arc<std::sync::Mutex<(usize, Option<tokio::time::Instant>)>>);

/// Ends a request's part in [`Activity`] when dropped (also when its future is dropped).
struct InFlight(Activity);

impl Activity {
    fn begin(&self) -> InFlight {
        self.with(|state| state.0 += 1);
        InFlight(self.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut (usize, Option<tokio::time::Instant>)) -> T) -> T {
        let mut state = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }

    /// Completes once no request has been in flight for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        let started = tokio::time::Instant::now();
        loop {
            let idle_since = self.with(|state| match state {
                (0, last) => Some(last.unwrap_or(started)),
                _ => None,
            });
            match idle_since {
                Some(since) if since.elapsed() >= timeout => return,
                Some(since) => tokio::time::sleep_until(since + timeout).await,
                None => tokio::time::sleep(timeout).await,
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.with(|state| {
            state.0 = state.0.saturating_sub(1);
            state.1 = Some(tokio::time::Instant::now());
        });
    }
}

/// How long a request body may take to arrive.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("the request body exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
    Timeout,
    #[error("cannot read the request body: {0}")]
    Read(String),
}

/// Why an HTTP receiver refused a request: what every HTTP receiver answers alike
/// (status code, `Allow`, `Retry-After`), with the words each protocol uses for what it
/// accepts. Each receiver maps it to its protocol's error body (OTLP's `google.rpc.Status`,
/// Connect's `{code, message}`).
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("no such path {path:?}; {accepted}")]
    NotFound {
        path: String,
        /// What is accepted, and where (`OTLP profiles are accepted at POST ...`).
        accepted: String,
    },
    #[error("method {0} is not allowed; use POST")]
    MethodNotAllowed(http::Method),
    #[error("unsupported content type {given:?}; use {accepted}")]
    UnsupportedMediaType {
        given: String,
        accepted: &'static str,
    },
    #[error("unsupported content encoding {given:?}; use {accepted}")]
    UnsupportedEncoding {
        given: String,
        accepted: &'static str,
    },
    #[error("the request body exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("cannot read the request body: {0}")]
    Read(String),
    #[error("the request body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
    Timeout,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(crate::component::Refused),
    #[error("internal error: {0}")]
    Internal(String),
}

/// How long a client refused for backpressure is told to wait (`Retry-After`).
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Rejection {
    pub fn http_status(&self) -> http::StatusCode {
        use crate::component::Refused;
        use http::StatusCode;
        match self {
            Rejection::NotFound { .. } => StatusCode::NOT_FOUND,
            Rejection::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::UnsupportedMediaType { .. } | Rejection::UnsupportedEncoding { .. } => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            Rejection::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::Timeout => StatusCode::REQUEST_TIMEOUT,
            Rejection::Read(_) | Rejection::Invalid(_) => StatusCode::BAD_REQUEST,
            Rejection::Refused(Refused::Full | Refused::MemoryLimit | Refused::Busy) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Rejection::Refused(Refused::ShuttingDown) => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The headers the status calls for: `Allow` on 405, `Retry-After` on backpressure.
    pub fn add_headers(&self, headers: &mut http::HeaderMap) {
        use crate::component::Refused;
        match self {
            Rejection::MethodNotAllowed(_) => {
                headers.insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
            }
            Rejection::Refused(Refused::Full | Refused::MemoryLimit | Refused::Busy) => {
                headers.insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from(RETRY_AFTER.as_secs()),
                );
            }
            _ => {}
        }
    }
}

impl From<BodyError> for Rejection {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge { limit } => Rejection::TooLarge { limit },
            BodyError::Timeout => Rejection::Timeout,
            BodyError::Read(e) => Rejection::Read(e),
        }
    }
}

/// The `Content-Length` a request declares, if it declares a readable one.
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// The declared length as a reservation size: 0 when none is declared, at most `limit`.
pub fn declared_length_within(headers: &http::HeaderMap, limit: usize) -> usize {
    declared_length(headers).map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX).min(limit))
}

/// Reads a request body of at most `limit` bytes: refused at once when its declared
/// `Content-Length` is over, cut off when more arrives, given [`BODY_READ_TIMEOUT`].
/// Takes the body by reference so that what a refused request still sends can be
/// drained afterwards ([`discard_rest`]).
pub async fn read_body(
    headers: &http::HeaderMap,
    body: &mut Incoming,
    limit: usize,
) -> Result<bytes::Bytes, BodyError> {
    use http_body_util::{BodyExt, LengthLimitError, Limited};
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > u64::try_from(limit).unwrap_or(u64::MAX)) {
        return Err(BodyError::TooLarge { limit });
    }
    let collected = tokio::time::timeout(BODY_READ_TIMEOUT, Limited::new(body, limit).collect())
        .await
        .map_err(|_| BodyError::Timeout)?
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                BodyError::TooLarge { limit }
            } else {
                BodyError::Read(e.to_string())
            }
        })?;
    Ok(collected.to_bytes())
}

/// A response with `body`, and a `Content-Type` when one is given.
pub fn respond(
    status: http::StatusCode,
    content_type: Option<&'static str>,
    body: Vec<u8>,
) -> Response<http_body_util::Full<bytes::Bytes>> {
    let mut response = Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
    }
    response
}

/// How much of a refused request's body is read and thrown away, at most, so that a client
/// still sending can read the answer: closing a socket with unread input makes the kernel reset
/// the connection, and the reset destroys the answer in the client's receive buffer. Past these
/// bounds the connection is closed anyway (as nginx's lingering close does).
const DISCARD_MAX_BYTES: usize = 64 << 20;
const DISCARD_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads what is left of a refused request's body in the background and drops it.
pub fn discard_rest<B>(mut body: B)
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
{
    if body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let mut read = 0usize;
        let drain = async {
            while read < DISCARD_MAX_BYTES {
                let frame =
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
                match frame {
                    Some(Ok(frame)) => {
                        read += frame.data_ref().map_or(0, bytes::Buf::remaining);
                    }
                    Some(Err(_)) | None => break,
                }
            }
        };
        let _ = tokio::time::timeout(DISCARD_MAX_TIME, drain).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::Refused;

    #[test]
    fn every_http_receiver_answers_a_rejection_alike() {
        let mut headers = http::HeaderMap::new();
        let busy = Rejection::Refused(Refused::Busy);
        assert_eq!(busy.http_status(), http::StatusCode::TOO_MANY_REQUESTS);
        busy.add_headers(&mut headers);
        assert_eq!(
            headers.get(http::header::RETRY_AFTER).map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        let mut headers = http::HeaderMap::new();
        let method = Rejection::MethodNotAllowed(http::Method::GET);
        assert_eq!(method.http_status(), http::StatusCode::METHOD_NOT_ALLOWED);
        method.add_headers(&mut headers);
        assert_eq!(
            headers.get(http::header::ALLOW).map(|v| v.as_bytes()),
            Some(&b"POST"[..])
        );
        let media = Rejection::UnsupportedMediaType {
            given: "text/csv".into(),
            accepted: "application/proto",
        };
        assert_eq!(
            media.http_status(),
            http::StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        assert_eq!(
            media.to_string(),
            "unsupported content type \"text/csv\"; use application/proto"
        );
        assert_eq!(
            Rejection::from(BodyError::TooLarge { limit: 5 }).http_status(),
            http::StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            Rejection::Refused(Refused::ShuttingDown).http_status(),
            http::StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
