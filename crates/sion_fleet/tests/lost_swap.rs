//! A Pulse's compare-and-swap whose answer never comes (docs/FLEET-LEDGER.md, "Faults"), run
//! as an attack on the ledger's key. A proxy between a front-end and its etcd member holds the
//! swap back and cuts the front-end's connection, so the front-end tries again on a fresh
//! connection and its retry lands; then the proxy lets the first swap through, and its compare
//! fails. etcd logs a transaction's request whether its compare holds or not, so whoever reads
//! the member's data directory holds every header the front-end signed for that number: they
//! must all be one header, or the key would be shown signing two Pulses with one number.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sion_fleet::FleetLedger;
use sion_fleet::local::Etcd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A client's write at least this long is a Pulse's swap (its entry, header, signatures and
/// records); the reads a front-end makes are a few hundred bytes at most.
const SWAP_BYTES: usize = 600;

/// A TCP proxy to `upstream` (host:port). Once `armed`, the first write of a client of at least
/// [`SWAP_BYTES`] is held: the client's connection is cut at once, and after `hold` the bytes
/// go upstream on the connection they came for (which stays open a while, for etcd to log and
/// answer them); `delivered` then says so.
async fn proxy(
    upstream: String,
    armed: Arc<AtomicBool>,
    hold: Duration,
    delivered: Arc<AtomicBool>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else { continue };
            let (armed, delivered) = (armed.clone(), delivered.clone());
            tokio::spawn(async move {
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
                    if n >= SWAP_BYTES && armed.swap(false, Ordering::SeqCst) {
                        // Both halves of the client's socket dropped: its connection is cut.
                        back.abort();
                        drop(from_client);
                        tokio::time::sleep(hold).await;
                        let sent = to_server.write_all(&buf[..n]).await.is_ok();
                        delivered.store(sent, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        return;
                    }
                    if to_server.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                back.abort();
            });
        }
    });
    format!("http://{addr}")
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path, out: &mut Vec<u8>) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            all_bytes(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.extend_from_slice(&bytes);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_whose_answer_never_came_is_tried_again_with_the_same_signed_header() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let upstream = etcd.url().trim_start_matches("http://").to_owned();
    let (armed, delivered) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let url = proxy(upstream, armed.clone(), Duration::from_millis(1500), delivered.clone()).await;
    let key = ed25519_dalek::SigningKey::from_bytes(&[61; 32]);
    let prefix = "/sion-ledger/lost-swap/";
    let mut ledger = FleetLedger::init(&[url.as_str()], prefix, key).await.expect("init");
    let robots = common::robots(&mut ledger, 70, 1).await;
    let (writer, log) = &robots[0];
    ledger.submit(common::commit(writer, 1, *log, 0, 0, 10)).await.expect("a first commit");

    // The second commit's swap is held back, its connection cut.
    armed.store(true, Ordering::SeqCst);
    let receipt = ledger.submit(common::commit(writer, 2, *log, 1, 10, 20)).await.expect("acknowledged");
    assert!(!armed.load(Ordering::SeqCst), "no swap went through the proxy");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(delivered.load(Ordering::SeqCst), "the held swap never reached etcd");
    let on = ledger.log(*log).await.expect("log").expect("exists");
    assert_eq!((on.commits, on.head.size), (2, 20), "the commit is in the ledger once");

    // Every header for that number in the member's files (its raft log holds each request): the
    // encoding's version and number, then its time, logs and state root, then `prev`.
    let header = receipt.header;
    let mut bytes = Vec::new();
    all_bytes(&dir.path().join("data"), &mut bytes);
    let encoded = header.encode();
    let mut start = vec![encoded[0]];
    start.extend_from_slice(&header.number.to_le_bytes());
    let mut found: Vec<Vec<u8>> = Vec::new();
    for at in 0..bytes.len().saturating_sub(encoded.len()) {
        let candidate = &bytes[at..at + encoded.len()];
        if candidate.starts_with(&start)
            && candidate[57..89] == header.prev
            && !found.iter().any(|f| f == candidate)
        {
            found.push(candidate.to_vec());
        }
    }
    assert!(found.contains(&encoded), "the acknowledged header is not in etcd's files");
    assert_eq!(
        found.len(),
        1,
        "etcd's log holds {} different headers signed for Pulse {}",
        found.len(),
        header.number
    );
}
