//! TLS on the agent's listen port (rustls, `ring` provider): a server
//! certificate and key, and optionally a CA whose certificates clients must
//! present (mTLS). With mTLS only the fronts holding a certificate signed by that
//! CA reach the agent, so the hunt headers it reads come from a front.
//!
//! Everything is loaded and checked at start; an error names its config key.

use crate::config::ConfigError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::sync::Arc;

fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}

fn read(key: &'static str, path: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| invalid(key, format!("{path}: {e}")))
}

fn certs(key: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(key, format!("{path}: not PEM certificates ({e})")))?;
    if certs.is_empty() {
        return Err(invalid(key, format!("{path}: no PEM certificate in it")));
    }
    Ok(certs)
}

/// The agent's TLS settings, loaded.
#[derive(Debug, Clone)]
pub struct Tls {
    pub server: Arc<ServerConfig>,
    /// Client certificates are required and verified (`tls_client_ca`).
    pub mtls: bool,
}

/// The server side of TLS from the given PEM files. `client_ca`: require a
/// client certificate that chains to one of the certificates in it.
pub fn server_config(cert: &str, key: &str, client_ca: Option<&str>) -> Result<Tls, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs("tls_cert", cert)?;
    let pem = read("tls_key", key)?;
    let private =
        PrivateKeyDer::from_pem_slice(&pem).map_err(|e| invalid("tls_key", format!("{key}: no PEM private key in it ({e})")))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("tls_cert", e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs("tls_client_ca", ca)? {
                roots.add(c).map_err(|e| invalid("tls_client_ca", format!("{ca}: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid("tls_client_ca", format!("{ca}: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    // a key that does not match the certificate, or one ring cannot use, is named here
    let mut cfg = builder.with_single_cert(chain, private).map_err(|e| invalid("tls_key", format!("{key} with {cert}: {e}")))?;
    // HTTP/2 or HTTP/1.1, as over plaintext (the server also tells them apart by the preface)
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Tls { server: Arc::new(cfg), mtls: client_ca.is_some() })
}
