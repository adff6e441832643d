//! The push server's accept loop: HTTP/1.1 and h2c through hyper, each connection in its
//! own task, and a bounded graceful shutdown (as the otlp receiver's, without TLS).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::endpoint::Endpoint;

/// After shutdown, how long open connections get to finish. Handlers stop waiting for
/// pipeline room at shutdown, so this is rarely reached.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(700);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// A pause after a failed accept (out of file descriptors), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves `endpoint` on `tcp` until `shutdown`, then drains for at most [`DRAIN_TIMEOUT`].
pub(crate) async fn serve(tcp: TcpListener, endpoint: Endpoint, shutdown: CancellationToken) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE_INTERVAL);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = tcp.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(
                        builder.clone(),
                        stream,
                        peer,
                        endpoint.clone(),
                        shutdown.clone(),
                    ));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "pprof receiver: accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
        }
    }
    drop(tcp);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "pprof receiver: closing connections that did not finish in time"
        );
        connections.abort_all();
    }
}

async fn connection(
    builder: auto::Builder<TokioExecutor>,
    stream: TcpStream,
    peer: SocketAddr,
    endpoint: Endpoint,
    shutdown: CancellationToken,
) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let endpoint = endpoint.clone();
        async move { Ok::<_, Infallible>(endpoint.handle(request, peer).await) }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "pprof receiver: connection ended with an error");
    }
}
