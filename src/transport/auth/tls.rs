//! TLS on the gRPC port, reloaded when the certificate files change.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use rustls::{
    RootCertStore, ServerConfig,
    crypto::CryptoProvider,
    server::WebPkiClientVerifier,
    sign::{CertifiedKey, SingleCertAndKey},
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::sync::watch;
use x509_parser::extensions::GeneralName;

use super::files;
use crate::base::metrics::Metrics;

/// The files of the gRPC port's TLS: the server's certificate chain and key (PEM)
/// and, for mTLS, the CA that signs callers' certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates callers' certificates must chain to (PEM); `None`: no mTLS.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files cannot be used; each names the file to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be opened or is not valid PEM.
    #[error("cannot read {}: {reason}", path.display())]
    Unreadable {
        path: PathBuf,
        reason: rustls_pki_types::pem::Error,
    },
    /// The file holds no `CERTIFICATE` section.
    #[error("{} holds no PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    /// The file holds no private key section.
    #[error("{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", path.display())]
    NoKey { path: PathBuf },
    /// The key is of a kind or curve rustls cannot sign with.
    #[error("{}: unusable private key: {reason}", path.display())]
    BadKey {
        path: PathBuf,
        reason: rustls::Error,
    },
    /// The server's certificate cannot be parsed.
    #[error("{}: unusable certificate: {reason}", path.display())]
    BadCertificate {
        path: PathBuf,
        reason: rustls::Error,
    },
    /// The key is not the one the certificate was issued for (typically a rotation
    /// that replaced one file but not the other).
    #[error(
        "the private key in {} does not match the certificate in {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    /// The client CA file cannot serve as a trust anchor for client certificates.
    #[error("{}: unusable client CA: {reason}", path.display())]
    BadCa { path: PathBuf, reason: String },
    /// The crypto provider supports none of the safe protocol versions.
    #[error("cannot configure TLS: {0}")]
    Provider(rustls::Error),
}

/// The gRPC port's current TLS configuration, swapped when the files change.
/// A handshake takes the configuration of its moment and keeps it for the life of
/// its connection, so a swap affects only connections made after it.
#[derive(Debug)]
pub struct TlsReloader {
    files: TlsFiles,
    config: RwLock<Arc<ServerConfig>>,
}

impl TlsReloader {
    /// Loads the files; any problem is an error, so a bad file refuses to start.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let config = RwLock::new(Arc::new(server_config(&files)?));
        Ok(Arc::new(Self { files, config }))
    }

    /// The configuration new handshakes use.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again and swaps the configuration; on error the previous
    /// one stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(server_config(&self.files)?);
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }

    /// Reloads whenever one of the files changes, until `stop` turns true.
    pub async fn watch(self: Arc<Self>, stop: watch::Receiver<bool>, metrics: Arc<Metrics>) {
        let TlsFiles {
            cert,
            key,
            client_ca,
        } = &self.files;
        let paths = [Some(cert), Some(key), client_ca.as_ref()]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        files::watch(
            "grpc_tls",
            paths,
            files::RELOAD_EVERY,
            stop,
            &metrics,
            || self.reload().map_err(|e| e.to_string()),
        )
        .await;
    }
}

/// The name a client certificate gives its holder: its first DNS subject
/// alternative name, else its subject common name.
pub fn caller_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let dns = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .and_then(|san| {
            san.value.general_names.iter().find_map(|name| match name {
                GeneralName::DNSName(dns) => Some(*dns),
                _ => None,
            })
        });
    dns.or_else(|| {
        cert.subject()
            .iter_common_name()
            .find_map(|cn| cn.as_str().ok())
    })
    .filter(|name| !name.is_empty())
    .map(str::to_owned)
}

/// A server configuration from the files: HTTP/2 only (gRPC), client certificates
/// required when a client CA is given.
fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    // The provider is explicit so that nothing depends on a process-wide default
    // (which another crate in the process might have installed differently).
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = certified_key(files, &provider)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Provider)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = Arc::new(client_roots(path)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| TlsError::BadCa {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The certificate chain and its key, checked to belong together.
fn certified_key(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = match PrivateKeyDer::from_pem_file(&files.key) {
        Ok(key) => key,
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsError::NoKey {
                path: files.key.clone(),
            });
        }
        Err(reason) => {
            return Err(TlsError::Unreadable {
                path: files.key.clone(),
                reason,
            });
        }
    };
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|reason| TlsError::BadKey {
            path: files.key.clone(),
            reason,
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // Unknown: the key cannot tell its public half; the handshake will show.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            })
        }
        Err(reason) => Err(TlsError::BadCertificate {
            path: files.cert.clone(),
            reason,
        }),
    }
}

/// Every certificate in a PEM file; none is an error.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unreadable = |reason| TlsError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The client CA file as trust anchors.
fn client_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// The gRPC port's TLS from its files (a bad file refuses to start), logging which
/// security the port has.
pub fn for_grpc_port(files: Option<TlsFiles>) -> Result<Option<Arc<TlsReloader>>, TlsError> {
    let Some(files) = files else {
        tracing::info!("gRPC port: plaintext (no TLS certificate configured)");
        return Ok(None);
    };
    let mtls = files.client_ca.is_some();
    let tls = TlsReloader::load(files)?;
    if mtls {
        tracing::info!("gRPC port: TLS, client certificates required (mTLS)");
    } else {
        tracing::info!("gRPC port: TLS, no client certificates");
    }
    Ok(Some(tls))
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    fn certificate(sans: &[&str], common_name: Option<&str>) -> CertificateDer<'static> {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = common_name {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn caller_name_is_the_first_dns_name_else_the_common_name() {
        let both = certificate(&["orders.prod.svc", "orders"], Some("ignored"));
        assert_eq!(caller_name(&both).as_deref(), Some("orders.prod.svc"));
        let ip_then_dns = certificate(&["10.0.0.7", "billing"], Some("ignored"));
        assert_eq!(caller_name(&ip_then_dns).as_deref(), Some("billing"));
        let cn_only = certificate(&[], Some("reports"));
        assert_eq!(caller_name(&cn_only).as_deref(), Some("reports"));
        let neither = certificate(&["10.0.0.7"], None);
        assert_eq!(caller_name(&neither), None);
        assert_eq!(caller_name(&CertificateDer::from(vec![1, 2, 3])), None);
    }

    #[test]
    fn load_refuses_a_key_that_does_not_match_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let other_key = KeyPair::generate().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        std::fs::write(&files.cert, cert.cert.pem()).unwrap();
        std::fs::write(&files.key, other_key.serialize_pem()).unwrap();

        let error = TlsReloader::load(files.clone()).unwrap_err().to_string();
        assert!(
            error.contains("does not match")
                && error.contains("tls.key")
                && error.contains("tls.crt"),
            "{error}"
        );

        std::fs::write(&files.key, cert.signing_key.serialize_pem()).unwrap();
        let reloader = TlsReloader::load(files).unwrap();
        assert_eq!(reloader.current().alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn load_names_the_file_that_holds_no_certificate_or_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: Some(dir.path().join("missing-ca.pem")),
        };
        std::fs::write(&files.cert, cert.signing_key.serialize_pem()).unwrap();
        std::fs::write(&files.key, cert.signing_key.serialize_pem()).unwrap();
        let error = TlsReloader::load(files.clone()).unwrap_err().to_string();
        assert!(
            error.contains("tls.crt holds no PEM certificate"),
            "{error}"
        );

        std::fs::write(&files.cert, cert.cert.pem()).unwrap();
        std::fs::write(&files.key, cert.cert.pem()).unwrap();
        let error = TlsReloader::load(files.clone()).unwrap_err().to_string();
        assert!(
            error.contains("tls.key holds no PEM private key"),
            "{error}"
        );

        std::fs::write(&files.key, cert.signing_key.serialize_pem()).unwrap();
        let error = TlsReloader::load(files).unwrap_err().to_string();
        assert!(
            error.contains("cannot read") && error.contains("missing-ca.pem"),
            "{error}"
        );
    }
}
