//! A TCP proxy between a front-end and etcd that does one thing to the requests naming a key:
//! cuts them, holds them, or orphans them (see [`Rule`]). Requests are matched by the chunks a
//! client's reads return, which for these small gRPC requests are whole requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// What the proxy does to a request that names the needle while it is armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Cuts the client's connection; the request never goes on. Every such request, as long
    /// as the proxy is armed: a front-end that dies on its way to etcd.
    Cut,
    /// Holds the first one (and what its client sends after it) until `release` is told,
    /// then goes on on the same connection: a request delayed, not lost. Disarms.
    Hold,
    /// Holds the first one, with what its client sends in the next 50 ms (the rest of its
    /// frames), cuts the client's connection, and when `release` is told sends the bytes
    /// upstream on the connection they came for, left open for etcd to log and answer them:
    /// a request that lands after its client gave its answer up. Disarms.
    Orphan,
}

/// One proxy's rule and its switches, shared with the test.
#[derive(Debug)]
pub struct Intercept {
    pub rule: Rule,
    /// The bytes a request must hold to be intercepted (a key or a key's prefix).
    pub needle: Vec<u8>,
    /// ... and how long its chunk must at least be (a swap is longer than a read).
    pub min_bytes: usize,
    pub armed: AtomicBool,
    /// How many matching requests still go through before the rule applies.
    pub passes: AtomicU64,
    /// Told when a held or orphaned request may go on.
    pub release: Notify,
    /// Whether an orphaned request was written upstream.
    pub delivered: AtomicBool,
}

impl Intercept {
    /// A proxy's rule for requests naming `needle` (not empty), unarmed, letting none through
    /// first.
    pub fn new(rule: Rule, needle: impl Into<Vec<u8>>) -> Self {
        let needle = needle.into();
        assert!(!needle.is_empty(), "a proxy's needle names a key");
        Self {
            rule,
            needle,
            min_bytes: 0,
            armed: AtomicBool::new(false),
            passes: AtomicU64::new(0),
            release: Notify::new(),
            delivered: AtomicBool::new(false),
        }
    }

    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    /// Whether the rule applies to this chunk of a client's request.
    fn applies(&self, chunk: &[u8]) -> bool {
        if chunk.len() < self.min_bytes
            || !self.is_armed()
            || !chunk.windows(self.needle.len()).any(|w| w == self.needle)
        {
            return false;
        }
        if self.passes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_sub(1)).is_ok() {
            return false;
        }
        match self.rule {
            Rule::Cut => true,
            Rule::Hold | Rule::Orphan => self.armed.swap(false, Ordering::SeqCst),
        }
    }
}

/// A proxy to `upstream` (host:port) applying `intercept`; its URL.
pub async fn proxy(upstream: &str, intercept: Arc<Intercept>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let upstream = upstream.trim_start_matches("http://").to_owned();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else { continue };
            tokio::spawn(relay(client, server, intercept.clone()));
        }
    });
    format!("http://{addr}")
}

async fn relay(client: TcpStream, server: TcpStream, intercept: Arc<Intercept>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if intercept.applies(&buf[..n]) {
            match intercept.rule {
                Rule::Cut => break,
                Rule::Hold => intercept.release.notified().await,
                Rule::Orphan => {
                    let mut held = buf[..n].to_vec();
                    while let Ok(Ok(more @ 1..)) =
                        tokio::time::timeout(Duration::from_millis(50), from_client.read(&mut buf)).await
                    {
                        held.extend_from_slice(&buf[..more]);
                    }
                    // Both halves of the client's socket dropped: its connection is cut.
                    back.abort();
                    drop(from_client);
                    intercept.release.notified().await;
                    let sent = to_server.write_all(&held).await.is_ok();
                    intercept.delivered.store(sent, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    return;
                }
            }
        }
        if to_server.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    back.abort();
}
