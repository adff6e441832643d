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

/// Why an endpoint could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The endpoint is not `host:port`.
    #[error("{0}")]
    NotAnEndpoint(&'static str),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Binds a listener on `endpoint`; `:port` means every interface, as in Go.
pub async fn bind_listener(endpoint: &str) -> Result<TcpListener, BindError> {
    let (host, port) = parse_endpoint(endpoint).map_err(BindError::NotAnEndpoint)?;
    let address = if host.is_empty() {
        format!("0.0.0.0:{port}")
    } else {
        endpoint.to_owned()
    };
    Ok(TcpListener::bind(address.as_str()).await?)
}

/// Binds `endpoint` as every listening component does: a failure is `who`'s fatal error
/// (`who` as logs name the component: "otlp receiver", "zpages"), naming the endpoint and,
/// for a component that listens on several, the `protocol`.
pub async fn listen(
    who: &str,
    endpoint: &str,
    protocol: Option<&str>,
) -> Result<TcpListener, crate::component::ComponentError> {
    bind_listener(endpoint).await.map_err(|e| {
        let protocol = protocol.map(|p| format!(" ({p})")).unwrap_or_default();
        crate::component::ComponentError::caused_by(
            format!("{who}: cannot listen on {endpoint}{protocol}"),
            e,
        )
    })
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

    #[tokio::test]
    async fn a_port_in_use_is_the_components_fatal_error() {
        let taken = bind_listener("127.0.0.1:0").await.expect("bind");
        let endpoint = taken.local_addr().expect("addr").to_string();
        let grpc = crate::errors::error_chain(
            &listen("otlp receiver", &endpoint, Some("grpc"))
                .await
                .expect_err("in use"),
        );
        assert!(
            grpc.starts_with(&format!(
                "otlp receiver: cannot listen on {endpoint} (grpc): "
            )),
            "{grpc}"
        );
        let plain = crate::errors::error_chain(
            &listen("zpages", &endpoint, None).await.expect_err("in use"),
        );
        assert!(
            plain.starts_with(&format!("zpages: cannot listen on {endpoint}: ")),
            "{plain}"
        );
    }
}
