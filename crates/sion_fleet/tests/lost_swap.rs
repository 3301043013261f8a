//! A Pulse's compare-and-swap whose answer never comes (docs/FLEET-LEDGER.md, "Faults"), run
//! as an attack on the ledger's key. A proxy between a front-end and its etcd member holds the
//! swap back and cuts the front-end's connection, so the front-end tries again on a fresh
//! connection; only once the retry has landed and been acknowledged does the proxy let the
//! first swap through, and its compare fails. etcd logs a transaction's request whether its
//! compare holds or not, so whoever reads the member's data directory holds every header the
//! front-end signed for that number: they must all be one header, or the key would be shown
//! signing two Pulses with one number.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sion_fleet::local::Etcd;
use sion_fleet::{FleetLedger, Format};
use sion_verify::ledger::PulseHeader;

use common::proxy::{Intercept, Rule, proxy};

/// A chunk this long naming a `pulse/` key is a Pulse's swap (its entry, header, signatures
/// and records); a read of a Pulse's keys is a few hundred bytes.
const SWAP_BYTES: usize = 600;

/// Every header for Pulse `header.number` after `header.prev` in the member's write-ahead log
/// (which holds each transaction's request): each occurrence, in order.
fn headers_in_wal(data: &Path, header: &PulseHeader) -> Vec<Vec<u8>> {
    let encoded = header.encode();
    let mut start = vec![encoded[0]];
    start.extend_from_slice(&header.number.to_le_bytes());
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data.join("member/wal")).expect("the member's wal").flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        for w in bytes.windows(encoded.len()) {
            if w.starts_with(&start) && w[57..89] == header.prev {
                out.push(w.to_vec());
            }
        }
    }
    out
}

/// On format 4 the swap carries the signed header: the retry must sign the same one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_whose_answer_never_came_is_tried_again_with_the_same_signed_header() {
    lost_swap(Format::Entries).await;
}

/// On format 5 the swap carries the entry and its proposal, and the seal the signatures: the
/// seal is held back, its retry lands, and the held one, delivered after, is the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_format_5_a_seal_whose_answer_never_came_is_sent_again_as_the_same_bytes() {
    lost_swap(Format::Proposed).await;
}

/// The same on format 6, where the swap carries the entry and its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_format_6_a_seal_whose_answer_never_came_is_sent_again_as_the_same_bytes() {
    lost_swap(Format::Claimed).await;
}

async fn lost_swap(format: Format) {
    let format_4 = format == Format::Entries;
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/lost-swap/";
    // Held: the first request long enough to be a swap (a read of a Pulse's keys is shorter)
    // that names a `pulse/` key, which a Pulse's swap names on format 4, or a `sig/` key, which
    // its seal names from format 5 on.
    let mut hold =
        Intercept::new(Rule::Orphan, format!("{prefix}{}/", if format_4 { "pulse" } else { "sig" }));
    hold.min_bytes = SWAP_BYTES;
    let hold = Arc::new(hold);
    let url = proxy(etcd.url(), hold.clone()).await;
    let key = ed25519_dalek::SigningKey::from_bytes(&[61; 32]);
    let mut ledger = FleetLedger::init_format(&[url.as_str()], prefix, key, format).await.expect("init");
    let robots = common::robots(&mut ledger, 70, 1).await;
    let (writer, log) = &robots[0];
    ledger.submit(common::commit(writer, 1, *log, 0, 0, 10)).await.expect("a first commit");

    // The second commit's swap is held back and its connection cut; the front-end's retry
    // lands and is acknowledged while the first is still held.
    hold.arm();
    let receipt = ledger.submit(common::commit(writer, 2, *log, 1, 10, 20)).await.expect("acknowledged");
    assert!(!hold.is_armed(), "no swap went through the proxy");
    assert!(!hold.delivered.load(Ordering::SeqCst));
    let header = receipt.header;
    let data = dir.path().join("data");
    let signatures =
        || common::signatures_in_wal(&data, prefix, "sig").remove(&header.number).unwrap_or_default();
    // The retry, acknowledged, is in the log already.
    let logged = signatures().len();
    assert!(logged > 0, "the acknowledged signature is not in etcd's log");

    // The held request reaches etcd, which logs it (its compare fails): more signatures for
    // that number in the log.
    hold.release.notify_one();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut found = signatures();
    while found.len() <= logged && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        found = signatures();
    }
    assert!(hold.delivered.load(Ordering::SeqCst), "the held request never reached etcd");
    assert!(found.len() > logged, "etcd never logged the held request");
    found.sort();
    found.dedup();
    assert_eq!(
        found,
        vec![receipt.signature.to_vec()],
        "etcd's log holds {} different signatures for Pulse {}",
        found.len(),
        header.number
    );
    // On format 4 the headers themselves: the retry's time is the first's.
    if format_4 {
        let mut headers = headers_in_wal(&data, &header);
        headers.sort();
        headers.dedup();
        let times: Vec<i64> =
            headers.iter().map(|h| i64::from_le_bytes(h[9..17].try_into().expect("8 bytes"))).collect();
        assert_eq!(
            headers,
            vec![header.encode()],
            "different headers for Pulse {} (times {times:?})",
            header.number
        );
    }
    let on = ledger.log(*log).await.expect("log").expect("exists");
    assert_eq!((on.commits, on.head.size), (2, 20));
}
