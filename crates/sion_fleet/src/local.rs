//! A local etcd member for tests, benchmarks and trying the fleet ledger on one machine:
//! Debian's `etcd` started on free loopback ports in a directory of its own, stopped on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One etcd member on loopback.
pub struct Etcd {
    child: Child,
    client_url: String,
}

/// A loopback port free at the time of asking (for etcd members and front-ends in tests).
pub fn free_port() -> std::io::Result<u16> {
    Ok(free_addr()?.port())
}

/// A loopback address whose port is free at the time of asking.
pub fn free_addr() -> std::io::Result<std::net::SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

impl Etcd {
    /// Start a single-member cluster whose data is under `dir`, and wait until it answers.
    pub async fn start(dir: &Path) -> Result<Self, String> {
        let etcd = Self::spawn(dir, "http", |_| {})?;
        etcd.answering(None).await?;
        Ok(etcd)
    }

    /// Start a single-member cluster with these flags added to etcd's command line (say
    /// `["--max-txn-ops", "1024"]`, for front-ends given raised [`crate::TxnLimits`]).
    pub async fn start_with(dir: &Path, flags: &[&str]) -> Result<Self, String> {
        let etcd = Self::spawn(dir, "http", |c| {
            c.args(flags);
        })?;
        etcd.answering(None).await?;
        Ok(etcd)
    }

    /// One member on free loopback ports, its clients on `scheme`, `more` adding to its
    /// command line.
    fn spawn(dir: &Path, scheme: &str, more: impl FnOnce(&mut Command)) -> Result<Self, String> {
        let ports =
            free_port().and_then(|c| Ok((c, free_port()?))).map_err(|e| format!("free ports: {e}"))?;
        let client_url = format!("{scheme}://127.0.0.1:{}", ports.0);
        let peer_url = format!("http://127.0.0.1:{}", ports.1);
        let mut command = Command::new("etcd");
        command
            .args(["--name", "m1", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("m1={peer_url}")]);
        more(&mut command);
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting etcd ({e}): install it (Debian: apt install etcd-server)"))?;
        Ok(Self { child, client_url })
    }

    /// A client of this member once it answers a read (20 s at most).
    async fn answering(
        &self,
        options: Option<etcd_client::ConnectOptions>,
    ) -> Result<etcd_client::Client, String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = etcd_client::Client::connect([self.client_url.as_str()], options.clone()).await
                && c.get("probe", None).await.is_ok()
            {
                return Ok(c);
            }
            if Instant::now() > deadline {
                return Err(format!("etcd did not answer on {} within 20 s", self.client_url));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where clients connect.
    pub fn url(&self) -> &str {
        &self.client_url
    }

    /// The member's process id (a test stops and continues it: an etcd that answers nothing).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Start a member as the README runs them (docs/FLEET-LEDGER.md, "etcd: TLS and
    /// authentication"): TLS with certificates from scripts/etcd-pki.sh under `dir/pki`, client
    /// certificates required, and authentication on, with a `root` user and a user
    /// `sion-ledger` who may read and write `prefix` and nothing else. Returns the member and
    /// what a front-end shows it (the certificate, its key, the user and its password file).
    pub async fn start_secure(dir: &Path, prefix: &str) -> Result<(Self, SecureEtcd), String> {
        let pki = dir.join("pki");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/etcd-pki.sh");
        let made = Command::new("bash").arg(script).arg(&pki).stderr(Stdio::null()).status();
        if !made.is_ok_and(|s| s.success()) {
            return Err(format!("{script} could not make the certificates (is openssl installed?)"));
        }
        let etcd = Self::spawn(dir, "https", |c| {
            c.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(pki.join("ca.pem"))
                .arg("--cert-file")
                .arg(pki.join("server.pem"))
                .arg("--key-file")
                .arg(pki.join("server.key"));
        })?;
        let password_file = pki.join("sion-ledger.password");
        let secure = SecureEtcd {
            ca: pki.join("ca.pem"),
            cert: pki.join("client.pem"),
            key: pki.join("client.key"),
            user: "sion-ledger".into(),
            password_file: password_file.clone(),
        };
        // Before authentication is on, the certificate alone is let in: set it up, then turn it on.
        let tls_only = crate::EtcdAccess::from_files(
            Some(&secure.ca),
            Some(&secure.cert),
            Some(&secure.key),
            None,
            None,
        )
        .map_err(|e| e.to_string())?;
        let mut c = etcd
            .answering(Some(
                tls_only.apply(etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2))),
            ))
            .await?;
        // 32 bytes of the operating system's randomness, as a ledger key is drawn.
        let secret =
            || sion_ledger::generate_key().map(|k| hex::encode(k.to_bytes())).map_err(|e| e.to_string());
        let password = secret()?;
        {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&password_file)
                .map_err(|e| format!("{}: {e}", password_file.display()))?;
            writeln!(f, "{password}").map_err(|e| format!("{}: {e}", password_file.display()))?;
        }
        let e = |e: etcd_client::Error| format!("setting up etcd's authentication: {e}");
        c.user_add("root", secret()?, None).await.map_err(e)?;
        c.user_grant_role("root", "root").await.map_err(e)?;
        c.role_add("sion-ledger").await.map_err(e)?;
        c.role_grant_permission("sion-ledger", etcd_client::Permission::read_write(prefix).with_prefix())
            .await
            .map_err(e)?;
        c.user_add("sion-ledger", password, None).await.map_err(e)?;
        c.user_grant_role("sion-ledger", "sion-ledger").await.map_err(e)?;
        c.auth_enable().await.map_err(e)?;
        Ok((etcd, secure))
    }
}

/// What a front-end shows an etcd started by [`Etcd::start_secure`].
#[derive(Debug, Clone)]
pub struct SecureEtcd {
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub user: String,
    pub password_file: std::path::PathBuf,
}

impl SecureEtcd {
    /// The access a front-end is given.
    pub fn access(&self) -> Result<crate::EtcdAccess, crate::AccessError> {
        crate::EtcdAccess::from_files(
            Some(&self.ca),
            Some(&self.cert),
            Some(&self.key),
            Some(&self.user),
            Some(&self.password_file),
        )
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A member of a [`Cluster`]: its ports, its data, and its process while it runs.
struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    child: Option<Child>,
}

/// A 3-member (or n-member) etcd cluster on loopback, whose members a test kills and restarts
/// (the fault tests of docs/FLEET-LEDGER.md, "Faults").
pub struct Cluster {
    dir: std::path::PathBuf,
    members: Vec<Member>,
    initial: String,
    /// Added to every member's command line (say `--max-txn-ops 1024`).
    flags: Vec<String>,
}

impl Cluster {
    /// Start `n` members under `dir` and wait until the cluster answers a quorum read.
    pub async fn start(dir: &Path, n: usize) -> Result<Self, String> {
        Self::start_with(dir, n, &[]).await
    }

    /// Start `n` members with these flags added to each one's command line.
    pub async fn start_with(dir: &Path, n: usize, flags: &[&str]) -> Result<Self, String> {
        let mut members = Vec::new();
        for i in 0..n {
            let (c, p) =
                free_port().and_then(|c| Ok((c, free_port()?))).map_err(|e| format!("free ports: {e}"))?;
            members.push(Member {
                name: format!("m{}", i + 1),
                client_url: format!("http://127.0.0.1:{c}"),
                peer_url: format!("http://127.0.0.1:{p}"),
                child: None,
            });
        }
        let initial =
            members.iter().map(|m| format!("{}={}", m.name, m.peer_url)).collect::<Vec<_>>().join(",");
        let flags = flags.iter().map(|f| (*f).to_owned()).collect();
        let mut cluster = Self { dir: dir.to_owned(), members, initial, flags };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_for_quorum(Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir"])
            .arg(self.dir.join(&m.name))
            .args(["--listen-client-urls", &m.client_url, "--advertise-client-urls", &m.client_url])
            .args(["--listen-peer-urls", &m.peer_url, "--initial-advertise-peer-urls", &m.peer_url])
            .args(["--initial-cluster", &self.initial, "--initial-cluster-token", "sion-test"])
            // Short elections, so that a test's killed leader is replaced in well under a second.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(&self.flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting etcd ({e}): install it (Debian: apt install etcd-server)"))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Every member's client URL (a client given all of them fails over between them).
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Kill member `i` with SIGKILL (no chance to flush or hand over leadership).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The flags members started from now on take in place of the cluster's first ones (an
    /// operator raising etcd's limits restarts each member with new ones).
    pub fn set_flags(&mut self, flags: &[&str]) {
        self.flags = flags.iter().map(|f| (*f).to_owned()).collect();
    }

    /// Start member `i` again on its data directory (it rejoins as the member it was).
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.members[i].child.is_none() {
            self.spawn(i)?;
        }
        Ok(())
    }

    /// Which running member is the leader, as the members themselves say.
    pub async fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() {
                continue;
            }
            let options = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2));
            let Ok(mut c) = etcd_client::Client::connect([m.client_url.as_str()], Some(options)).await else {
                continue;
            };
            if let Ok(s) = c.status().await
                && s.header().is_some_and(|h| h.member_id() == s.leader())
            {
                return Some(i);
            }
        }
        None
    }

    /// Wait until a linearizable read through any member succeeds.
    pub async fn wait_for_quorum(&self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let urls = self.urls();
        loop {
            let options = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(1));
            if let Ok(mut c) = etcd_client::Client::connect(&urls, Some(options)).await
                && c.get("probe", None).await.is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the etcd cluster {urls:?} had no quorum within {within:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
