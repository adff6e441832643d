//! PEM files of certificates and keys, read one way for the clients' and the servers'
//! `tls:` blocks, so that what is wrong with a file that is missing or malformed is said
//! the same way wherever it is named.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What is wrong with one PEM file; the caller says which file.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    #[error("not valid PEM: {0}")]
    Invalid(String),
    #[error("holds no PEM certificate")]
    NoCertificate,
    #[error("no usable private key: {0}")]
    NoKey(String),
    #[error("not a usable CA certificate: {0}")]
    UnusableCa(String),
}

/// The bytes of the file at `path`.
pub fn read(path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path).map_err(PemError::Read)
}

/// Every certificate in `pem`: at least one.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemError::Invalid(e.to_string()))?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(certs)
}

/// The first private key in `pem` (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| PemError::NoKey(e.to_string()))
}

/// The certificates in `pem` as trust anchors.
pub fn ca_roots(pem: &[u8]) -> Result<RootCertStore, PemError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(pem)? {
        roots
            .add(cert)
            .map_err(|e| PemError::UnusableCa(e.to_string()))?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA (P-256) and its key, as `openssl req -x509` writes them.
    const CERT: &[u8] = include_bytes!("../testdata/pem/cert.pem");
    const KEY: &[u8] = include_bytes!("../testdata/pem/key.pem");

    #[test]
    fn a_certificate_and_its_key_are_read() {
        assert_eq!(certificates(CERT).expect("a certificate").len(), 1);
        assert_eq!(ca_roots(CERT).expect("a CA").len(), 1);
        assert!(matches!(private_key(KEY), Ok(PrivateKeyDer::Pkcs8(_))));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pem/cert.pem");
        assert_eq!(read(Path::new(path)).expect("readable"), CERT);
    }

    #[test]
    fn a_file_that_is_not_there_cannot_be_read() {
        let e = read(Path::new("/nonexistent/profcol/ca.pem")).expect_err("missing");
        assert!(e.to_string().starts_with("cannot read: "), "{e}");
    }

    #[test]
    fn text_without_a_certificate_is_refused() {
        let e = certificates(b"just some text\n").expect_err("no certificate");
        assert_eq!(e.to_string(), "holds no PEM certificate");
        let e = ca_roots(b"").expect_err("empty");
        assert_eq!(e.to_string(), "holds no PEM certificate");
    }

    #[test]
    fn a_broken_certificate_block_is_refused() {
        let broken = "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n";
        let e = certificates(broken.as_bytes()).expect_err("invalid");
        assert!(e.to_string().starts_with("not valid PEM: "), "{e}");
    }

    #[test]
    fn a_certificate_is_not_a_key() {
        let e = private_key(CERT).expect_err("no key");
        assert!(e.to_string().starts_with("no usable private key: "), "{e}");
    }
}
