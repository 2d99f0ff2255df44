//! HTTPS on the API (`api.tls`): rustls with the certificate chain and key read from PEM
//! files, read again whenever either changes (a renewed certificate is served to the next
//! connections; one that cannot be read is reported and the previous one stays in force).

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::settings::TlsFiles;
use crate::file_watch::FileWatch;

/// The acceptor in force, swapped when the files change.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ArcSwap<rustls::ServerConfig>>,
}

/// Why the TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("api.tls: {path}: {why}")]
    File { path: String, why: String },
    #[error("api.tls: {0}")]
    Config(String),
}

impl Tls {
    /// Reads the files; `Err` names the file and what is wrong with it.
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        Ok(Tls {
            config: Arc::new(ArcSwap::from_pointee(server_config(files)?)),
        })
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.load_full())
    }

    /// Reads the files again whenever one changes, until `shutdown`.
    pub async fn reload(self, files: TlsFiles, shutdown: CancellationToken) {
        let watch = |path: &Path| FileWatch::new(path, std::fs::read(path).ok());
        let (mut cert, mut key) = match (watch(&files.cert_file), watch(&files.key_file)) {
            (Ok(cert), Ok(key)) => (cert, key),
            (Err(e), _) | (_, Err(e)) => {
                error!("api.tls: cannot watch the files ({e}); a renewal needs a restart");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = cert.changed() => {}
                _ = key.changed() => {}
            }
            match server_config(&files) {
                Ok(config) => {
                    self.config.store(Arc::new(config));
                    info!("api.tls: certificate reloaded");
                }
                Err(e) => error!("{e}; the previous certificate stays in force"),
            }
        }
    }
}

fn server_config(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let file_error = |path: &Path, why: String| TlsError::File {
        path: path.display().to_string(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert_file)
        .map_err(|e| file_error(&files.cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(&files.cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(&files.cert_file, "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .map_err(|e| file_error(&files.key_file, e.to_string()))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
