//! Listening endpoints as otelcol configs write them: `host:port`, `[v6]:port`, or
//! `:port` for every interface.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::net::TcpListener;

use crate::config::ConfigError;

/// Splits `host:port` without resolving it; the host is empty for `:port`.
pub fn parse_endpoint(endpoint: &str) -> Result<(&str, u16), &'static str> {
    let (host, port) = endpoint.rsplit_once(':').ok_or("missing \":port\"")?;
    let host = match host.strip_prefix('[') {
        Some(rest) => rest
            .strip_suffix(']')
            .ok_or("an IPv6 address needs brackets, as in [::1]:4317")?,
        None if host.contains(':') => {
            return Err("an IPv6 address needs brackets, as in [::1]:4317");
        }
        None => host,
    };
    if host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err("the host has characters a host name cannot have");
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| "the port must be a number from 0 to 65535")?;
    Ok((host, port))
}

/// A config check: `endpoint` at `path` must be `host:port`.
pub fn check_endpoint(endpoint: &str, path: &str, errors: &mut Vec<ConfigError>) {
    if let Err(problem) = parse_endpoint(endpoint) {
        errors.push(ConfigError::new(
            path,
            format!("{endpoint:?} is not host:port: {problem}"),
        ));
    }
}

/// Binds a listener on `endpoint`; `:port` means every interface, as in Go.
pub async fn bind_listener(endpoint: &str) -> Result<TcpListener, String> {
    let (host, port) = parse_endpoint(endpoint).map_err(str::to_owned)?;
    let address = if host.is_empty() {
        format!("0.0.0.0:{port}")
    } else {
        endpoint.to_owned()
    };
    TcpListener::bind(address.as_str())
        .await
        .map_err(|e| e.to_string())
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

/// Headers an HTTP client sets itself; configuring them would break the protocol.
const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    "te",
    "upgrade",
];

/// An exporter's configured `headers` as a header map, refusing the ones the client sets
/// itself (and names starting with `reserved_prefixes`); errors at `headers::<name>`.
/// Every configured value is marked sensitive, so that no debug output or log shows it:
/// credentials travel under any name (`authorization`, `x-api-key`, `x-scope-orgid`,
/// `x-auth-token`...), and which of them is secret is the user's knowledge, not ours.
pub fn header_map(
    headers: &BTreeMap<String, String>,
    reserved_prefixes: &[&str],
) -> Result<HeaderMap, Vec<ConfigError>> {
    let mut map = HeaderMap::new();
    let mut errors = Vec::new();
    for (name, value) in headers {
        let path = format!("headers::{name}");
        let Ok(parsed) = HeaderName::from_bytes(name.as_bytes()) else {
            errors.push(ConfigError::new(path, "not a valid header name"));
            continue;
        };
        let reserved = RESERVED_HEADERS.contains(&parsed.as_str())
            || reserved_prefixes
                .iter()
                .any(|p| parsed.as_str().starts_with(p));
        if reserved {
            errors.push(ConfigError::new(
                path,
                "is set by the exporter itself and cannot be configured",
            ));
            continue;
        }
        match HeaderValue::from_str(value) {
            Ok(mut v) => {
                v.set_sensitive(true);
                map.insert(parsed, v);
            }
            Err(_) => errors.push(ConfigError::new(
                path,
                "not a valid header value (visible ASCII only)",
            )),
        }
    }
    if errors.is_empty() {
        Ok(map)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(parse_endpoint("localhost:4317"), Ok(("localhost", 4317)));
        assert_eq!(parse_endpoint(":4317"), Ok(("", 4317)));
        assert_eq!(parse_endpoint("[::1]:0"), Ok(("::1", 0)));
        for bad in [
            "localhost",
            "::1:4317",
            "[::1:4317",
            "host:99999",
            "a b:1",
            "x/y:1",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
        let mut errors = Vec::new();
        check_endpoint("nowhere", "protocols::grpc::endpoint", &mut errors);
        assert_eq!(
            errors[0].to_string(),
            "protocols::grpc::endpoint: \"nowhere\" is not host:port: missing \":port\""
        );
    }

    #[test]
    fn headers_are_checked_and_the_transport_ones_refused() {
        let h = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let map =
            header_map(&h(&[("authorization", "Bearer x"), ("x-team", "a")]), &[]).expect("valid");
        assert!(map["authorization"].is_sensitive());
        assert_eq!(map["x-team"], "a");
        // Every configured header, whatever its name, stays out of debug output.
        assert!(map.values().all(HeaderValue::is_sensitive));
        let shown = format!("{map:?}");
        assert!(
            !shown.contains("Bearer x") && !shown.contains("\"a\""),
            "{shown}"
        );
        let errors = header_map(
            &h(&[
                ("content-type", "x"),
                ("grpc-timeout", "1S"),
                ("bad name", "v"),
                ("x", "\u{7}"),
            ]),
            &["grpc-"],
        )
        .expect_err("invalid");
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "headers::bad name: not a valid header name",
                "headers::content-type: is set by the exporter itself and cannot be configured",
                "headers::grpc-timeout: is set by the exporter itself and cannot be configured",
                "headers::x: not a valid header value (visible ASCII only)",
            ]
        );
        assert!(header_map(&h(&[("grpc-timeout", "1S")]), &[]).is_ok());
    }

    #[tokio::test]
    async fn binds_every_interface_for_a_bare_port() {
        let l = bind_listener(":0").await.expect("bind");
        assert!(l.local_addr().expect("addr").ip().is_unspecified());
        assert!(bind_listener("nowhere").await.is_err());
    }
}
