//! TLS on the agent's listen port (rustls, `ring` provider): a server
//! certificate and key, and optionally a CA whose certificates clients must
//! present (mTLS). With mTLS only the fronts holding a certificate signed by that
//! CA reach the agent, so the hunt headers it reads come from a front.
//!
//! Everything is loaded and checked at start; an error names its config key.
//! The files are then watched ([`watch`]): a rotated certificate (cert-manager,
//! a renewed Let's Encrypt one, a Kubernetes secret's new symlink) is taken for
//! new connections within [`RELOAD_EVERY`], with no restart and no connection
//! lost. Files that do not load (a key written after its certificate, a bad
//! file) leave the certificate in use in place, with an error naming the key.

use crate::error::{invalid, ConfigError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::os::unix::fs::MetadataExt;
use crate::sync::{lock, write};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};
use tracing::{error, info};

/// How often the agent looks at its TLS files for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);


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
    /// What it was loaded from, watched for a new certificate.
    pub files: Files,
}

/// Failed handshakes logged one by one per [`FailureLog`] window, at most.
pub const LOG_BURST: u32 = 10;
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// Which failed handshakes get a log line of their own: the first
/// [`LOG_BURST`] of each [`LOG_WINDOW`] (a window opens at the first failure
/// after the last one closed); the rest are counted, and the first
/// line of the next window says how many there were. A scanner, or a front
/// with the wrong certificate, cannot fill the disk with one line a
/// connection; `huntlb_tls_handshake_failures_total` counts every one.
#[derive(Debug, Default)]
pub struct FailureLog(Mutex<(Option<Instant>, u32, u64)>);

impl FailureLog {
    /// Whether this failure gets its own line, and how many went unlogged
    /// in the windows since the last line (to say with it).
    pub fn admit(&self, now: Instant) -> (bool, u64) {
        let mut g = lock(&self.0);
        let (start, logged, unlogged) = &mut *g;
        if start.is_none_or(|s| now.duration_since(s) >= LOG_WINDOW) {
            (*start, *logged) = (Some(now), 0);
        }
        if *logged < LOG_BURST {
            *logged += 1;
            (true, std::mem::take(unlogged))
        } else {
            *unlogged += 1;
            (false, 0)
        }
    }
}

/// The PEM files of [`server_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    pub cert: String,
    pub key: String,
    pub client_ca: Option<String>,
}

/// A file's modified time, length and inode (a file replaced by a rename, as a
/// Kubernetes secret's is, may keep its time); `None`: it cannot be read.
type Stamp = Option<(SystemTime, u64, u64)>;

impl Files {
    fn stamps(&self) -> Vec<Stamp> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len(), m.ino()))))
            .collect()
    }
}

/// The server configuration new connections get: swapped by [`watch`].
#[derive(Debug)]
pub struct Current(RwLock<Arc<ServerConfig>>);

impl Current {
    pub fn new(server: Arc<ServerConfig>) -> Current {
        Current(RwLock::new(server))
    }

    pub fn get(&self) -> Arc<ServerConfig> {
        crate::sync::read(&self.0).clone()
    }
}

/// Every [`RELOAD_EVERY`], reload the files if any changed since the last look
/// and, if they load, hand new connections the result. Connections already
/// open keep the certificate they were made with.
pub async fn watch(files: Files, current: Arc<Current>) {
    let mut last = files.stamps();
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let now = files.stamps();
        if now == last {
            continue;
        }
        // Looked at once per change, loaded or not: a certificate written
        // before its key fails now and loads when the key's write is seen.
        last = now;
        match server_config(&files.cert, &files.key, files.client_ca.as_deref()) {
            Ok(t) => {
                *write(&current.0) = t.server;
                info!(cert = %files.cert, "TLS files changed: new connections get the new certificate");
            }
            Err(e) => error!(error = %e, "TLS files changed but do not load: the certificate in use stays"),
        }
    }
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
    let files = Files { cert: cert.to_string(), key: key.to_string(), client_ca: client_ca.map(str::to_string) };
    Ok(Tls { server: Arc::new(cfg), mtls: client_ca.is_some(), files })
}

/// TLS to the forwarding tier's peers: the agent presents its own
/// certificate (`tls_cert`, `tls_key`: peers with mTLS take only certificates
/// from their `tls_client_ca`) and checks the peer's against `ca` for `name`
/// (`fleet_tls_name`), or for the peer's IP address when no name is given.
#[derive(Clone)]
pub struct PeerTls {
    pub client: Arc<rustls::ClientConfig>,
    pub name: Option<rustls::pki_types::ServerName<'static>>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerTls(name: {:?})", self.name)
    }
}

pub fn peer_config(cert: &str, key: &str, ca: (&'static str, &str), name: Option<&str>) -> Result<PeerTls, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (ca_key, ca_path) = ca;
    let mut roots = RootCertStore::empty();
    for c in certs(ca_key, ca_path)? {
        roots.add(c).map_err(|e| invalid(ca_key, format!("{ca_path}: {e}")))?;
    }
    let chain = certs("tls_cert", cert)?;
    let pem = read("tls_key", key)?;
    let private =
        PrivateKeyDer::from_pem_slice(&pem).map_err(|e| invalid("tls_key", format!("{key}: no PEM private key in it ({e})")))?;
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(ca_key, e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, private)
        .map_err(|e| invalid("tls_key", format!("{key} with {cert}: {e}")))?;
    // Forwards speak HTTP/1.1 to peers.
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = match name {
        None => None,
        Some(n) => Some(
            rustls::pki_types::ServerName::try_from(n.to_string())
                .map_err(|e| invalid("fleet_tls_name", format!("`{n}`: {e}")))?,
        ),
    };
    Ok(PeerTls { client: Arc::new(client), name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_log_lets_a_burst_through_per_window_and_counts_the_rest() {
        let t0 = Instant::now();
        let log = FailureLog::default();
        let first: Vec<(bool, u64)> = (0..LOG_BURST + 5).map(|_| log.admit(t0)).collect();
        assert!(first[..LOG_BURST as usize].iter().all(|&x| x == (true, 0)));
        assert!(first[LOG_BURST as usize..].iter().all(|&x| x == (false, 0)));
        // the next window's first line carries the 5 left out; then none again
        let later = t0 + LOG_WINDOW;
        assert_eq!(log.admit(later), (true, 5));
        assert_eq!(log.admit(later), (true, 0));
    }

    /// docs/agent.md's TLS section says what [`watch`] does: the listen
    /// port's files looked at every [`RELOAD_EVERY`], a change taken with no
    /// restart; and no sentence there says they are read once, as one did
    /// a few lines after the first.
    #[test]
    fn the_docs_say_the_files_are_watched_as_they_are() {
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agent.md")).unwrap();
        let start = docs.find("## TLS from the fronts").unwrap();
        let section = &docs[start..start + docs[start..].find("\n## ").unwrap_or(docs.len() - start)];
        let text = section.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains(&format!("The files are looked at every {} s.", RELOAD_EVERY.as_secs())), "{text}");
        for sentence in text.split(". ") {
            let once = sentence.contains("read once") || sentence.contains("To change certificates, restart");
            assert!(!once, "docs/agent.md's TLS section: \"{sentence}\" (the listen port's files are watched)");
        }
    }
}
