//! What the fleet ledger's tests share: their commits (every log holds the same atoms, so a
//! head of `n` atoms and the consistency proof between two heads are computed here alone), a
//! free loopback address, a fresh ledger on an etcd member of its own, and robots' logs.

// Each test crate uses what it needs of these.
#![allow(dead_code)]

pub mod proxy;

use std::net::SocketAddr;

use ed25519_dalek::SigningKey;
use sion_fleet::FleetLedger;
use sion_fleet::local::Etcd;
use sion_store::ledger::{Head, LogId, SignedTx, Tx};
use sion_verify::merkle::{Blake3, MemoryTree, consistency_path};

/// A front-end of a ledger of any format these tests make, older ones included (a front-end
/// serves a ledger older than format 6 only when told to: `P/format` is not signed).
pub async fn connect(
    endpoints: &[&str],
    prefix: &str,
    key: SigningKey,
) -> Result<FleetLedger, sion_fleet::FleetError> {
    FleetLedger::connect_accepting(endpoints, prefix, key, &sion_fleet::EtcdAccess::default(), 1).await
}

/// A free loopback address for a front-end.
pub fn free_addr() -> SocketAddr {
    sion_fleet::local::free_addr().expect("a free loopback port")
}

/// A fresh ledger under `prefix` on an etcd member of its own, its key made of `seed`: the
/// member's directory, the member, the key and the ledger. Bind the directory to a name for
/// the test's life (`_dir`, not `_`): dropped, it takes the member's data with it.
pub async fn ledger(prefix: &str, seed: u8) -> (tempfile::TempDir, Etcd, SigningKey, FleetLedger) {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[seed; 32]);
    let ledger = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    (dir, etcd, key, ledger)
}

/// `n` robots, their keys made of `first`, `first + 1` …, and their logs, opened straight on
/// the ledger in one batch (not what is tested).
pub async fn robots(ledger: &mut FleetLedger, first: u8, n: u8) -> Vec<(SigningKey, LogId)> {
    let keys: Vec<SigningKey> = (0..n).map(|i| SigningKey::from_bytes(&[first + i; 32])).collect();
    let opened = ledger
        .submit_batch(
            keys.iter()
                .map(|k| SignedTx::sign(k, 0, Tx::OpenMemory { agent: None, policy: [0; 32] }))
                .collect(),
        )
        .await;
    keys.into_iter().zip(opened).map(|(k, r)| (k, r.expect("opened").log.expect("a log"))).collect()
}

/// The tree over atoms `0 … n − 1`.
pub fn tree(n: u64) -> MemoryTree<Blake3> {
    MemoryTree::from_leaves((0..n).map(|i| format!("atom {i}")))
}

/// The head of a log of `n` atoms (its index root marked with `n`).
pub fn head(n: u64) -> Head {
    Head { size: n, root: tree(n).root(), index: [n as u8; 32], manifest: [0; 32] }
}

/// `writer`'s commit of `log` from `from` to `to` atoms, with its consistency proof.
pub fn commit(writer: &SigningKey, nonce: u64, log: LogId, version: u64, from: u64, to: u64) -> SignedTx {
    commit_cells(writer, nonce, log, version, from, to, Vec::new())
}

/// [`commit`], naming the map cells (docs/LEDGER.md, "Cells") its new atoms are in.
pub fn commit_cells(
    writer: &SigningKey,
    nonce: u64,
    log: LogId,
    version: u64,
    from: u64,
    to: u64,
    cells: Vec<u128>,
) -> SignedTx {
    let proof =
        if from == 0 { vec![] } else { consistency_path::<Blake3, _>(&tree(to), from, to).expect("proof") };
    SignedTx::sign(
        writer,
        nonce,
        Tx::CommitMemory { log, version, head: head(to), proof, seal: false, cells },
    )
}

/// Every value etcd's write-ahead log holds put under `{prefix}{what}/N` (its requests, logged
/// whether their compare held or not), in order, by Pulse number `N`: a put's key (field 1) is
/// followed by its value (field 2, `0x12`, a one-byte length of 64).
pub fn signatures_in_wal(
    data: &std::path::Path,
    prefix: &str,
    what: &str,
) -> std::collections::BTreeMap<u64, Vec<Vec<u8>>> {
    let needle = format!("{prefix}{what}/");
    let mut out = std::collections::BTreeMap::<u64, Vec<Vec<u8>>>::new();
    for file in std::fs::read_dir(data.join("member/wal")).expect("the member's wal").flatten() {
        let bytes = std::fs::read(file.path()).unwrap_or_default();
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(needle.len()).position(|w| w == needle.as_bytes()) {
            let key_end = at + i + needle.len() + 20;
            at = at + i + 1;
            let Some(number) = bytes
                .get(key_end - 20..key_end)
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| d.parse::<u64>().ok())
            else {
                continue;
            };
            if bytes.get(key_end..key_end + 2) == Some(&[0x12, 64])
                && let Some(value) = bytes.get(key_end + 2..key_end + 66)
            {
                out.entry(number).or_default().push(value.to_vec());
            }
        }
    }
    out
}
