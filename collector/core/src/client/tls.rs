//! Client TLS shared by the exporters: otelcol's `tls:` client block
//! ([`TlsClientSettings`]) and the material loaded from it once at create ([`ClientTls`]),
//! handed to rustls (HTTP clients) or tonic (gRPC, the same rustls underneath). Both use
//! one certificate verifier, so roots, `ca_file` and `insecure_skip_verify` behave alike.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;

use crate::config::{ConfigError, Validate};
use crate::pem::{self, PemError};

/// otelcol's `configtls` client block.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsClientSettings {
    /// gRPC only: plaintext for an endpoint written without a scheme. (HTTP clients
    /// follow the URL's scheme.)
    pub insecure: bool,
    /// PEM CA bundle that replaces the system roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mTLS; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate. For tests only.
    pub insecure_skip_verify: bool,
    /// The name the server certificate must carry (and SNI), instead of the endpoint's host.
    pub server_name_override: Option<String>,
}

fn non_empty_path(p: &Option<PathBuf>) -> Option<&Path> {
    p.as_deref().filter(|p| !p.as_os_str().is_empty())
}

impl TlsClientSettings {
    pub fn ca_file(&self) -> Option<&Path> {
        non_empty_path(&self.ca_file)
    }
    pub fn cert_file(&self) -> Option<&Path> {
        non_empty_path(&self.cert_file)
    }
    pub fn key_file(&self) -> Option<&Path> {
        non_empty_path(&self.key_file)
    }
    pub fn server_name_override(&self) -> Option<&str> {
        self.server_name_override
            .as_deref()
            .filter(|s| !s.trim().is_empty())
    }
}

impl Validate for TlsClientSettings {
    fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        match (self.cert_file(), self.key_file()) {
            (Some(_), None) => errors.push(ConfigError::new(
                "key_file",
                "must be set when cert_file is (client certificates need their key)",
            )),
            (None, Some(_)) => errors.push(ConfigError::new(
                "cert_file",
                "must be set when key_file is (a key needs its certificate)",
            )),
            _ => {}
        }
        if let Some(name) = self.server_name_override()
            && let Err(e) = ServerName::try_from(name)
        {
            errors.push(ConfigError::new(
                "server_name_override",
                format!("{name:?} is not a DNS name or IP address: {e}"),
            ));
        }
        errors
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {problem}")]
    Pem {
        path: PathBuf,
        #[source]
        problem: PemError,
    },
    #[error("no trusted root certificates: {0}")]
    Roots(String),
    #[error("invalid server_name_override {0:?}")]
    ServerName(String),
    #[error("TLS setup failed: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A client certificate and key, as PEM (for tonic) and parsed (for rustls).
pub struct ClientIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// Everything a TLS client needs, checked at create.
pub struct ClientTls {
    pub provider: Arc<CryptoProvider>,
    pub verifier: Arc<dyn ServerCertVerifier>,
    pub identity: Option<ClientIdentity>,
    pub server_name: Option<ServerName<'static>>,
}

impl ClientTls {
    pub fn load(settings: &TlsClientSettings) -> Result<Self, TlsError> {
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let verifier: Arc<dyn ServerCertVerifier> = if settings.insecure_skip_verify {
            tracing::warn!(
                "tls.insecure_skip_verify is set: the server's certificate is not checked"
            );
            Arc::new(NoVerification(provider.clone()))
        } else {
            let roots = match settings.ca_file() {
                Some(path) => Arc::new(
                    read_pem(path)
                        .and_then(|bytes| pem::ca_roots(&bytes).map_err(in_file(path)))?,
                ),
                None => system_roots(),
            };
            WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| TlsError::Roots(e.to_string()))?
        };
        let identity = match (settings.cert_file(), settings.key_file()) {
            (Some(cert), Some(key)) => Some(load_identity(cert, key)?),
            _ => None,
        };
        let server_name = settings
            .server_name_override()
            .map(|name| {
                ServerName::try_from(name.to_owned())
                    .map_err(|_| TlsError::ServerName(name.to_owned()))
            })
            .transpose()?;
        Ok(ClientTls {
            provider,
            verifier,
            identity,
            server_name,
        })
    }

    /// A rustls client config offering `alpn`.
    pub fn rustls_config(&self, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(self.verifier.clone());
        let mut config = match &self.identity {
            Some(id) => builder.with_client_auth_cert(id.chain.clone(), id.key.clone_key())?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }

    /// tonic's TLS settings; the verifier goes with `Endpoint::tls_config_with_verifier`.
    #[cfg(feature = "client")]
    pub fn tonic_config(&self) -> tonic::transport::ClientTlsConfig {
        let mut config = tonic::transport::ClientTlsConfig::new();
        if let Some(id) = &self.identity {
            config = config.identity(tonic::transport::Identity::from_pem(
                id.cert_pem.clone(),
                id.key_pem.clone(),
            ));
        }
        if let Some(name) = &self.server_name {
            config = config.domain_name(name.to_str().into_owned());
        }
        config
    }
}

/// A client config trusting the system's roots (or the bundled ones): for HTTPS to
/// servers named by URL alone, such as scrape targets, push endpoints and signed upload
/// URLs.
pub fn public_roots_config() -> Result<rustls::ClientConfig, TlsError> {
    ClientTls::load(&TlsClientSettings::default())?.rustls_config(&[])
}

/// What is wrong with the PEM file at `path`, as a [`TlsError`] naming it.
fn in_file(path: &Path) -> impl Fn(PemError) -> TlsError + '_ {
    move |problem| TlsError::Pem {
        path: path.to_owned(),
        problem,
    }
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    pem::read(path).map_err(in_file(path))
}

/// The system's roots, or the bundled Mozilla roots where the system has none (a bare
/// container). Loaded once per process.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(error = %e, "loading a system root certificate failed");
            }
            let mut roots = RootCertStore::empty();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::info!("no system root certificates found; using the bundled webpki roots");
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            Arc::new(roots)
        })
        .clone()
}

fn load_identity(cert_path: &Path, key_path: &Path) -> Result<ClientIdentity, TlsError> {
    let cert_pem = read_pem(cert_path)?;
    let key_pem = read_pem(key_path)?;
    let chain = pem::certificates(&cert_pem).map_err(in_file(cert_path))?;
    let key = pem::private_key(&key_pem).map_err(in_file(key_path))?;
    Ok(ClientIdentity {
        cert_pem,
        key_pem,
        chain,
        key,
    })
}

/// `insecure_skip_verify`: any certificate is accepted, but the handshake signatures are
/// still checked, so the session is at least bound to the key the server presented.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
