//! A throwaway certificate authority made in the test (rcgen), for servers started with TLS:
//! its certificate for the clients' trust (`sslrootcert`, `ssl-ca`, `--tls-ca-cert-file`),
//! server certificates for 127.0.0.1 and localhost, client certificates by name.
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A self-signed CA: its certificate (PEM) and the key that signs its leaves.
pub struct ThrowawayCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf's PEM files: the certificate and its (PKCS#8) key, mode 0600.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ThrowawayCa {
    /// A self-signed CA whose subject's common name is `name`.
    pub fn new(name: &str) -> ThrowawayCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert_pem = params.self_signed(&key).unwrap().pem();
        ThrowawayCa {
            cert_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// Writes the CA's certificate (PEM) to `path`.
    pub fn write_ca(&self, path: &Path) {
        std::fs::write(path, &self.cert_pem).unwrap();
    }

    /// A server certificate for 127.0.0.1 (IP SAN) and localhost (DNS SAN), written as
    /// `{name}.crt` and `{name}.key` in `dir`.
    pub fn server(&self, dir: &Path, name: &str) -> CertFiles {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.leaf(params, dir, name)
    }

    /// A client certificate whose common name is `name` (PostgreSQL's `clientcert=verify-full`
    /// matches it against the user), written as `{name}.crt` and `{name}.key` in `dir`.
    pub fn client(&self, dir: &Path, name: &str) -> CertFiles {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.leaf(params, dir, name)
    }

    fn leaf(&self, mut params: CertificateParams, dir: &Path, name: &str) -> CertFiles {
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = CertFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        write_private(&files.key, &key.serialize_pem());
        files
    }
}

/// Writes a key file readable by its owner only (PostgreSQL refuses a key others can read; a
/// server running as another user gets its own copy, see `Postgres::start_tls`).
fn write_private(path: &Path, content: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(content.as_bytes()).unwrap();
}
