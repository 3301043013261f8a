//! How a front-end reaches an etcd that admits only the operator's front-ends: TLS with the
//! operator's CA and a client certificate, and an etcd user with a password
//! (docs/FLEET-LEDGER.md, "etcd: TLS and authentication"). Without them, whoever reaches etcd's
//! port can write the ledger's state; with them, only a holder of the certificate, its key and
//! the password can.

use std::fmt;
use std::path::Path;

/// What a front-end (or `sion ledger init`, `archive`) shows etcd to be let in. The default
/// is plain HTTP with no user: for tests and a cluster on one machine's loopback.
#[derive(Clone, Default)]
pub struct EtcdAccess {
    tls: Option<etcd_client::TlsOptions>,
    user: Option<(String, String)>,
}

impl fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the password.
        f.debug_struct("EtcdAccess")
            .field("tls", &self.tls.is_some())
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// Why the files naming etcd access could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    #[error("{path}: {problem}")]
    File { path: String, problem: String },
    #[error("{0}")]
    Incomplete(&'static str),
}

fn file_err(path: &Path, problem: impl Into<String>) -> AccessError {
    AccessError::File { path: path.display().to_string(), problem: problem.into() }
}

/// Read a file that holds a secret, refusing it (as ssh does) if others may read it.
fn read_secret(path: &Path) -> Result<Vec<u8>, AccessError> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).map_err(|e| file_err(path, e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(file_err(
            path,
            format!(
                "holds a secret but is open to other users (mode {:o}): `chmod 600 {}`",
                meta.mode() & 0o777,
                path.display()
            ),
        ));
    }
    if meta.len() > 1 << 20 {
        return Err(file_err(path, "is over 1 MiB: not a key or a password"));
    }
    std::fs::read(path).map_err(|e| file_err(path, e.to_string()))
}

fn read_public(path: &Path) -> Result<Vec<u8>, AccessError> {
    let meta = std::fs::metadata(path).map_err(|e| file_err(path, e.to_string()))?;
    if meta.len() > 1 << 20 {
        return Err(file_err(path, "is over 1 MiB: not a certificate"));
    }
    std::fs::read(path).map_err(|e| file_err(path, e.to_string()))
}

impl EtcdAccess {
    /// From the files an operator names: the CA that signed etcd's server certificate; this
    /// front-end's certificate and key (both or neither; the key 0600); an etcd user and the
    /// file holding its password (both or neither; the file 0600, one line).
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
        user: Option<&str>,
        password_file: Option<&Path>,
    ) -> Result<Self, AccessError> {
        let tls = match (ca, cert, key) {
            (None, None, None) => None,
            (None, _, _) => {
                return Err(AccessError::Incomplete(
                    "a client certificate needs --etcd-ca, the CA that signed etcd's server certificate",
                ));
            }
            (Some(ca), cert, key) => {
                let mut tls = etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(read_public(ca)?));
                match (cert, key) {
                    (Some(cert), Some(key)) => {
                        tls = tls
                            .identity(etcd_client::Identity::from_pem(read_public(cert)?, read_secret(key)?));
                    }
                    (None, None) => {}
                    _ => return Err(AccessError::Incomplete("--etcd-cert and --etcd-key go together")),
                }
                Some(tls)
            }
        };
        let user = match (user, password_file) {
            (None, None) => None,
            (Some(user), Some(file)) => {
                let bytes = read_secret(file)?;
                let text = String::from_utf8(bytes).map_err(|_| file_err(file, "is not UTF-8"))?;
                let password = text.trim_end_matches(['\n', '\r']).to_owned();
                if password.is_empty() || password.contains('\n') {
                    return Err(file_err(file, "must hold the password alone, on one line"));
                }
                Some((user.to_owned(), password))
            }
            _ => return Err(AccessError::Incomplete("--etcd-user and --etcd-password-file go together")),
        };
        Ok(Self { tls, user })
    }

    /// Whether etcd is reached over TLS (its endpoints are then `https://`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub(crate) fn apply(&self, mut options: etcd_client::ConnectOptions) -> etcd_client::ConnectOptions {
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        if let Some((user, password)) = &self.user {
            // etcd's tokens expire (5 minutes idle by default): a long-lived front-end signs in
            // again rather than failing.
            options = options.with_user(user.clone(), password.clone()).with_auto_token_refresh(true);
        }
        options
    }
}
