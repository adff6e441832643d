//! The receiver's typed config, in the OpenTelemetry Collector's shape:
//!
//! ```yaml
//! max_decoding_memory_mib: 512  # profcol's: what requests being decoded may take at once
//! protocols:
//!   grpc:                     # present = enabled; a null value means all defaults
//!     endpoint: localhost:4317
//!     max_recv_msg_size_mib: 64
//!     tls: {cert_file: ..., key_file: ..., client_ca_file: ...}
//!   http:
//!     endpoint: localhost:4318
//!     max_request_body_size: 67108864
//! ```

use profcol_core::endpoint::check_endpoint;

use profcol_core::config::{ConfigError, Validate};
use serde::Deserialize;

pub const DEFAULT_GRPC_ENDPOINT: &str = "localhost:4317";
pub const DEFAULT_HTTP_ENDPOINT: &str = "localhost:4318";
/// OTLP's recommended cap for profiles requests.
pub const DEFAULT_MAX_RECV_MSG_SIZE_MIB: u32 = 64;
pub const DEFAULT_MAX_REQUEST_BODY_SIZE: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    #[serde(deserialize_with = "profcol_core::config::nullable::null_is_default")]
    pub protocols: Protocols,
    /// Memory that requests being decoded may claim at once (each reserves 4 bytes per
    /// decompressed byte before decoding); past it, requests are refused as retryable
    /// (HTTP 429, gRPC RESOURCE_EXHAUSTED). Shared by both protocols.
    pub max_decoding_memory_mib: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            protocols: Protocols::default(),
            max_decoding_memory_mib: profcol_core::decode_budget::DEFAULT_DECODE_MEMORY_MIB,
        }
    }
}

/// Which protocols are served. A protocol is enabled when its key is present.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Protocols {
    #[serde(deserialize_with = "profcol_core::config::nullable::null_means_default")]
    pub grpc: Option<GrpcConfig>,
    #[serde(deserialize_with = "profcol_core::config::nullable::null_means_default")]
    pub http: Option<HttpConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcConfig {
    /// `host:port` to listen on.
    pub endpoint: String,
    /// The largest request accepted, after decompression, in MiB.
    pub max_recv_msg_size_mib: u32,
    pub tls: Option<TlsConfig>,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            endpoint: DEFAULT_GRPC_ENDPOINT.to_owned(),
            max_recv_msg_size_mib: DEFAULT_MAX_RECV_MSG_SIZE_MIB,
            tls: None,
        }
    }
}

impl GrpcConfig {
    /// The message size cap in bytes.
    pub fn max_recv_msg_size(&self) -> usize {
        usize::try_from(u64::from(self.max_recv_msg_size_mib) << 20).unwrap_or(usize::MAX)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `host:port` to listen on.
    pub endpoint: String,
    /// The largest request body accepted, in bytes, both as sent and after decompression.
    pub max_request_body_size: u64,
    pub tls: Option<TlsConfig>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            endpoint: DEFAULT_HTTP_ENDPOINT.to_owned(),
            max_request_body_size: DEFAULT_MAX_REQUEST_BODY_SIZE,
            tls: None,
        }
    }
}

impl HttpConfig {
    pub fn max_body_size(&self) -> usize {
        usize::try_from(self.max_request_body_size).unwrap_or(usize::MAX)
    }
}

/// Server-side TLS from PEM files. `client_ca_file` makes client certificates required and
/// checked against that CA (mutual TLS).
/// The `tls:` block every profcol server reads.
pub use profcol_core::server::tls::TlsServerSettings as TlsConfig;

impl Validate for Config {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        let p = &self.protocols;
        if p.grpc.is_none() && p.http.is_none() {
            errors.push(ConfigError::new(
                "protocols",
                "must enable at least one protocol (grpc or http)",
            ));
        }
        if self.max_decoding_memory_mib == 0 {
            errors.push(ConfigError::new(
                "max_decoding_memory_mib",
                "must be at least 1",
            ));
        }
        if let Some(grpc) = &p.grpc {
            check_endpoint(&grpc.endpoint, "protocols::grpc::endpoint", &mut errors);
            if grpc.max_recv_msg_size_mib == 0 {
                errors.push(ConfigError::new(
                    "protocols::grpc::max_recv_msg_size_mib",
                    "must be at least 1",
                ));
            }
            if let Some(tls) = &grpc.tls {
                errors.extend(
                    tls.validate()
                        .into_iter()
                        .map(|e| e.under("protocols::grpc::tls")),
                );
            }
        }
        if let Some(http) = &p.http {
            check_endpoint(&http.endpoint, "protocols::http::endpoint", &mut errors);
            if http.max_request_body_size == 0 {
                errors.push(ConfigError::new(
                    "protocols::http::max_request_body_size",
                    "must be at least 1",
                ));
            }
            if let Some(tls) = &http.tls {
                errors.extend(
                    tls.validate()
                        .into_iter()
                        .map(|e| e.under("protocols::http::tls")),
                );
            }
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profcol_core::config::{parse_typed, parse_yaml};

    fn load(name: &str) -> Result<Config, ConfigError> {
        profcol_core::testkit::testdata_config(env!("CARGO_MANIFEST_DIR"), name)
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        parse_typed(&parse_yaml("inline", text).expect("yaml"))
    }

    #[test]
    fn testdata_config_parses() {
        let c = load("config.yaml").expect("valid");
        assert_eq!(
            c,
            Config {
                protocols: Protocols {
                    grpc: Some(GrpcConfig {
                        endpoint: "0.0.0.0:4317".into(),
                        max_recv_msg_size_mib: 16,
                        tls: Some(TlsConfig {
                            cert_file: Some("/etc/profcol/server.crt".into()),
                            key_file: Some("/etc/profcol/server.key".into()),
                            client_ca_file: Some("/etc/profcol/ca.crt".into()),
                        }),
                    }),
                    http: Some(HttpConfig {
                        endpoint: "127.0.0.1:14318".into(),
                        max_request_body_size: 1048576,
                        tls: None,
                    }),
                },
                max_decoding_memory_mib: 256,
            }
        );
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert_eq!(
            c.protocols.grpc.as_ref().map(|g| g.max_recv_msg_size()),
            Some(16 << 20)
        );
    }

    #[test]
    fn null_protocol_means_enabled_with_defaults() {
        let c = parse("protocols:\n  grpc:\n").expect("valid");
        assert_eq!(c.protocols.grpc, Some(GrpcConfig::default()));
        assert_eq!(c.protocols.http, None);
        assert!(c.validate().is_empty());
        let c = parse("protocols:\n  grpc:\n  http: ~\n").expect("valid");
        assert_eq!(c.protocols.http, Some(HttpConfig::default()));
        assert_eq!(
            c.protocols.http.as_ref().map(|h| h.endpoint.as_str()),
            Some("localhost:4318")
        );
        let c = parse("protocols:\n  http: {endpoint: \"[::1]:9000\"}\n").expect("valid");
        assert_eq!(
            c.protocols.http.as_ref().map(|h| h.max_request_body_size),
            Some(64 << 20)
        );
        assert!(c.validate().is_empty());
    }

    #[test]
    fn no_protocol_is_invalid() {
        for text in ["{}", "protocols: {}", "protocols:\n"] {
            let c = parse(text).expect("parses");
            assert_eq!(
                c.validate(),
                vec![ConfigError::new(
                    "protocols",
                    "must enable at least one protocol (grpc or http)"
                )],
                "{text}"
            );
        }
    }

    #[test]
    fn bad_values_are_reported_with_their_paths() {
        let c = parse(
            "protocols:\n  grpc:\n    endpoint: localhost\n    max_recv_msg_size_mib: 0\n    tls: {cert_file: a.crt}\n  http:\n    endpoint: \"::1:80\"\n    max_request_body_size: 0\n    tls: {}\n",
        )
        .expect("parses");
        let paths: Vec<String> = c.validate().into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "protocols::grpc::endpoint",
                "protocols::grpc::max_recv_msg_size_mib",
                "protocols::grpc::tls::key_file",
                "protocols::http::endpoint",
                "protocols::http::max_request_body_size",
                "protocols::http::tls::cert_file",
                "protocols::http::tls::key_file",
            ]
        );
        let e = parse("protocols:\n  http:\n    max_request_body_size: big\n").expect_err("type");
        assert_eq!(e.path, "protocols::http::max_request_body_size");
    }
}
