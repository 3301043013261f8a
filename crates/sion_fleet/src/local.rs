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

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
