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
        let ports =
            free_port().and_then(|c| Ok((c, free_port()?))).map_err(|e| format!("free ports: {e}"))?;
        let client_url = format!("http://127.0.0.1:{}", ports.0);
        let peer_url = format!("http://127.0.0.1:{}", ports.1);
        let child = Command::new("etcd")
            .args(["--name", "m1", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("m1={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting etcd ({e}): install it (Debian: apt install etcd-server)"))?;
        let etcd = Self { child, client_url };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = etcd_client::Client::connect([etcd.client_url.as_str()], None).await
                && c.get("probe", None).await.is_ok()
            {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                return Err(format!("etcd did not answer on {} within 20 s", etcd.client_url));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where clients connect.
    pub fn url(&self) -> &str {
        &self.client_url
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
}

impl Cluster {
    /// Start `n` members under `dir` and wait until the cluster answers a quorum read.
    pub async fn start(dir: &Path, n: usize) -> Result<Self, String> {
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
        let mut cluster = Self { dir: dir.to_owned(), members, initial };
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
