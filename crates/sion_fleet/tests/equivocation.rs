//! Whoever reads an etcd member's data directory must not find the ledger's key signing two
//! headers for one Pulse number (docs/FLEET-LEDGER.md, "Agreeing on the next Pulse"). etcd
//! logs a transaction's request whether its compare holds or not, so a swap that loses its
//! number leaves everything it carried in the members' write-ahead logs. Run as attacks: two
//! front-ends racing, read back from the member's files; a front-end that dies between a
//! Pulse's entry and its signatures; and a party with etcd write access putting an entry
//! there to have it signed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ed25519_dalek::{Signer as _, SigningKey};
use sion_fleet::local::Etcd;
use sion_fleet::{FleetError, FleetLedger};
use sion_store::ledger::LogId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every distinct value etcd's write-ahead log holds put under `{prefix}{what}/N`, by `N`.
fn signatures_in_wal(data: &Path, prefix: &str, what: &str) -> Found {
    common::signatures_in_wal(data, prefix, what)
        .into_iter()
        .map(|(n, v)| (n, v.into_iter().collect()))
        .collect()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Distinct values by Pulse number.
type Found = BTreeMap<u64, BTreeSet<Vec<u8>>>;

/// Two front-ends on one member, each with robots of its own committing as fast as answered,
/// until `races` compare-and-swaps were lost (or 400 commits each): the distinct header and
/// entry signatures per number in the member's log, and the Pulses made.
async fn race(format_4: bool, races: u64) -> (Found, Found, u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = if format_4 { "/sion-ledger/race-4/" } else { "/sion-ledger/race-5/" };
    let key = SigningKey::from_bytes(&[81; 32]);
    let mut a = if format_4 {
        FleetLedger::init_signing_first(&[etcd.url()], prefix, key.clone()).await.expect("init")
    } else {
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init")
    };
    let b = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let mut robots = common::robots(&mut a, 90, 8).await;
    let theirs = robots.split_off(4);
    let lost = Arc::new(AtomicU64::new(0));
    let run = |mut ledger: FleetLedger, robots: Vec<(SigningKey, LogId)>, lost: Arc<AtomicU64>| async move {
        for round in 0..400u64 {
            let (writer, log) = &robots[(round % 4) as usize];
            let version = round / 4;
            let tx = common::commit(writer, version + 1, *log, version, version * 10, version * 10 + 10);
            ledger.submit(tx).await.expect("a commit");
            let mine = ledger.lost_races();
            let seen = lost.fetch_max(mine, Ordering::SeqCst).max(mine);
            if seen >= races && round % 4 == 3 {
                break;
            }
        }
        ledger.lost_races()
    };
    let (la, lb) = tokio::join!(run(a, robots, lost.clone()), run(b, theirs, lost.clone()));
    let data = dir.path().join("data");
    (signatures_in_wal(&data, prefix, "sig"), signatures_in_wal(&data, prefix, "esig"), la + lb)
}

/// The attack on the protocol before format 5, kept as its evidence: a front-end that lost a
/// race had signed the header it sent, and the member's log holds it beside the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_4_racing_front_ends_leave_two_signed_headers_for_a_number() {
    let (sigs, _, lost) = race(true, 3).await;
    assert!(lost > 0, "the two front-ends never raced");
    let twice: Vec<u64> = sigs.iter().filter(|(_, s)| s.len() > 1).map(|(n, _)| *n).collect();
    assert!(!twice.is_empty(), "{lost} races lost, yet every number has one signed header in etcd's log");
}

/// Format 5: a header is signed only after its entry won its number, so however the
/// front-ends raced, the log holds one header signature (and one entry signature) a number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_front_ends_leave_one_signed_header_a_number_in_etcds_log() {
    let (sigs, esigs, lost) = race(false, 10).await;
    assert!(lost >= 10, "only {lost} races lost");
    assert!(sigs.len() > 10 && esigs.len() > 10, "only {} and {} numbers signed", sigs.len(), esigs.len());
    for (what, found) in [("header", &sigs), ("entry", &esigs)] {
        let twice: Vec<(u64, usize)> =
            found.iter().filter(|(_, s)| s.len() > 1).map(|(n, s)| (*n, s.len())).collect();
        assert!(twice.is_empty(), "{lost} races lost: two {what} signatures for Pulses {twice:?}");
    }
}

/// A TCP proxy to `upstream` that, once `armed`, cuts every connection whose client sends a
/// request naming `needle` (the request never goes on): a front-end that dies, to etcd,
/// after its Pulse's entry and before its signatures.
async fn cutting_proxy(upstream: String, needle: Vec<u8>, armed: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else { continue };
            let (needle, armed) = (needle.clone(), armed.clone());
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
                    if armed.load(Ordering::SeqCst) && find(&buf[..n], &needle).is_some() {
                        break;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulse_left_without_its_signatures_is_completed_and_a_forged_one_is_not_signed() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/unsealed/";
    let key = SigningKey::from_bytes(&[83; 32]);
    let armed = Arc::new(AtomicBool::new(false));
    let upstream = etcd.url().trim_start_matches("http://").to_owned();
    let url = cutting_proxy(upstream, format!("{prefix}sig/").into_bytes(), armed.clone()).await;
    let mut a = FleetLedger::init(&[url.as_str()], prefix, key.clone()).await.expect("init");
    let mut b = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let robots = common::robots(&mut a, 100, 2).await;
    let ((ra, la), (rb, lb)) = (&robots[0], &robots[1]);
    a.submit(common::commit(ra, 1, *la, 0, 0, 10)).await.expect("a first commit");

    // Every request of `a` naming a signature is cut: its next Pulse's entry lands, its
    // signatures never do, and it acknowledges nothing.
    armed.store(true, Ordering::SeqCst);
    let pending = b.latest().await.expect("latest").header.number + 1;
    let unanswered = a.submit(common::commit(ra, 2, *la, 1, 10, 20)).await;
    assert!(unanswered.is_err(), "acknowledged without its signatures: {unanswered:?}");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let reader = raw.clone();
    let get = |k: String| {
        let mut raw = reader.clone();
        async move { raw.get(k, None).await.expect("get").kvs().first().map(|kv| kv.value().to_vec()) }
    };
    let entry_key = format!("{prefix}pulse/{pending:020}");
    let prop_key = format!("{prefix}prop/{pending:020}");
    let sig_key = format!("{prefix}sig/{pending:020}");
    assert!(get(entry_key.clone()).await.is_some(), "the entry did not land");
    assert!(get(sig_key.clone()).await.is_none(), "signed though cut");

    // A party with etcd write access puts a proposal of its own beside the entry: no front-end
    // signs it, and says which keys to look at.
    let proposal = get(prop_key.clone()).await.expect("a proposal");
    raw.put(prop_key.as_str(), vec![7u8; 64], None).await.expect("forge the proposal");
    match b.submit(common::commit(rb, 1, *lb, 0, 0, 10)).await {
        Err(FleetError::StateMismatch { keys, problem, .. }) => {
            assert_eq!(keys, vec![entry_key.clone(), prop_key.clone()], "{problem}");
            assert!(problem.contains("no front-end proposed its entry"), "{problem}");
        }
        other => panic!("an entry without a front-end's proposal: {other:?}"),
    }
    assert!(get(sig_key.clone()).await.is_none(), "a forged proposal's entry was signed");

    // An entry the key did propose, but whose header is not what its transactions make (its
    // cells root's last byte changed): the replay refuses it, and nothing is signed.
    let honest = get(entry_key.clone()).await.expect("the entry");
    let mut forged = honest.clone();
    *forged.last_mut().expect("a header") ^= 1;
    let mut message = b"sion-fleet-proposal-v1".to_vec();
    message.extend_from_slice(&pending.to_le_bytes());
    message.extend_from_slice(blake3::hash(&forged).as_bytes());
    raw.put(entry_key.as_str(), forged, None).await.expect("forge the entry");
    raw.put(prop_key.as_str(), key.sign(&message).to_bytes().to_vec(), None).await.expect("its proposal");
    match b.submit(common::commit(rb, 1, *lb, 0, 0, 10)).await {
        Err(FleetError::StateMismatch { problem, .. }) => {
            assert!(problem.contains("does not sign the state its transactions make"), "{problem}");
        }
        other => panic!("a proposed entry whose header its transactions do not make: {other:?}"),
    }
    assert!(get(sig_key.clone()).await.is_none(), "a header its transactions do not make was signed");
    raw.put(entry_key.as_str(), honest, None).await.expect("put the entry back");

    // The front-end's own proposal put back: the next commit, through another front-end,
    // completes the Pulse left waiting (the first robot's commit in it), then is the next.
    raw.put(prop_key.as_str(), proposal, None).await.expect("put the proposal back");
    let receipt = b.submit(common::commit(rb, 1, *lb, 0, 0, 10)).await.expect("completed, then committed");
    assert_eq!(receipt.header.number, pending + 1);
    let completed = b.header(pending).await.expect("the completed Pulse, signed");
    assert_eq!(get(sig_key.clone()).await, Some(completed.signature.to_vec()));
    let on = b.log(*la).await.expect("log").expect("exists");
    assert_eq!((on.commits, on.head.size), (2, 20), "the waiting Pulse's commit is not in the state");

    // The cut front-end goes on from there once it reaches etcd again.
    armed.store(false, Ordering::SeqCst);
    let next = a.submit(common::commit(ra, 3, *la, 2, 20, 30)).await.expect("the cut front-end again");
    assert_eq!(next.header.number, pending + 2);
    let sigs = signatures_in_wal(&dir.path().join("data"), prefix, "sig");
    assert!(sigs.contains_key(&pending), "the completed Pulse's signature is not in etcd's log");
    assert!(sigs.values().all(|s| s.len() == 1), "two signatures for a number: {sigs:?}");
}
