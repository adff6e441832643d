//! Server TLS from PEM files, as otelcol's receivers configure it (`tls:` with
//! `cert_file`, `key_file` and, for client certificates, `client_ca_file`), loaded once
//! when the receiver is created so that a missing or malformed file stops the collector
//! at start-up with the file's name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;

use crate::config::{ConfigError, Validate};
use crate::pem::{self, PemError};

/// A receiver's `tls:` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsServerSettings {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Client certificates must chain to this CA: mutual TLS.
    pub client_ca_file: Option<PathBuf>,
}

impl Validate for TlsServerSettings {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        for (field, value) in [("cert_file", &self.cert_file), ("key_file", &self.key_file)] {
            match value {
                None => errors.push(ConfigError::new(
                    field,
                    "is required when tls is set (tls needs both cert_file and key_file)",
                )),
                Some(p) if p.as_os_str().is_empty() => {
                    errors.push(ConfigError::new(field, "must not be empty"));
                }
                Some(_) => {}
            }
        }
        if self
            .client_ca_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            errors.push(ConfigError::new("client_ca_file", "must not be empty"));
        }
        errors
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls {field} is not set")]
    Missing { field: &'static str },
    #[error("tls {field} {path:?}: {problem}")]
    Pem {
        field: &'static str,
        path: PathBuf,
        #[source]
        problem: PemError,
    },
    #[error("tls {field} {path:?}: {problem}")]
    File {
        field: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error("tls: {0}")]
    Config(String),
}

/// Which ALPN protocols the server offers: gRPC needs HTTP/2, HTTP endpoints take either.
#[derive(Debug, Clone, Copy)]
pub enum Alpn {
    H2Only,
    H2AndHttp1,
}

/// Reads and checks the files of `tls` into an acceptor offering `alpn`.
pub fn load_acceptor(tls: &TlsServerSettings, alpn: Alpn) -> Result<TlsAcceptor, TlsError> {
    let cert_file = tls
        .cert_file
        .as_deref()
        .ok_or(TlsError::Missing { field: "cert_file" })?;
    let key_file = tls
        .key_file
        .as_deref()
        .ok_or(TlsError::Missing { field: "key_file" })?;
    let certs = pem_file("cert_file", cert_file, pem::certificates)?;
    let key = pem_file("key_file", key_file, pem::private_key)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let roots = pem_file("client_ca_file", ca_file, pem::ca_roots)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::File {
                    field: "client_ca_file",
                    path: ca_file.clone(),
                    problem: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::File {
            field: "key_file",
            path: key_file.to_owned(),
            problem: format!("does not go with cert_file {}: {e}", cert_file.display()),
        })?;
    config.alpn_protocols = match alpn {
        Alpn::H2Only => vec![b"h2".to_vec()],
        Alpn::H2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The PEM file `path`, named by the key `field`, read by `parse`.
fn pem_file<T>(
    field: &'static str,
    path: &Path,
    parse: fn(&[u8]) -> Result<T, PemError>,
) -> Result<T, TlsError> {
    pem::read(path)
        .and_then(|bytes| parse(&bytes))
        .map_err(|problem| TlsError::Pem {
            field,
            path: path.to_owned(),
            problem,
        })
}
