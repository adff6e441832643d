//! Listening endpoints as otelcol configs write them: `host:port`, `[v6]:port`, or
//! `:port` for every interface.

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

    #[tokio::test]
    async fn binds_every_interface_for_a_bare_port() {
        let l = bind_listener(":0").await.expect("bind");
        assert!(l.local_addr().expect("addr").ip().is_unspecified());
        assert!(bind_listener("nowhere").await.is_err());
    }
}
