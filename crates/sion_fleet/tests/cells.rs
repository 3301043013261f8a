//! Cells on a fleet ledger (docs/FLEET-LEDGER.md, "Cells"), on a real etcd: commits name the
//! cells of their atoms, every header signs the cell trie's root, a front-end answers a
//! question's cells (and named ones) as of any Pulse, writes a snapshot every 1,024 Pulses, and
//! a front-end that held nothing rebuilds the map — from the snapshot, or, when the snapshot is
//! damaged, from the entries since the genesis — to exactly the signed root.

mod common;
use common::commit_cells;

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use sion_fleet::cells::{AskedCells, SNAPSHOT_EVERY};
use sion_fleet::local::Etcd;
use sion_fleet::{FleetLedger, Format};
use sion_store::ledger::{SignedTx, Tx};
use sion_verify::cells::{CellQuery, cell_key, frame_tag, logs_digest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_ledger_keeps_cells_and_a_front_end_rebuilds_them() {
    keeps_cells(false).await;
}

/// The same on a ledger that keeps its state key by key (format 3), whose cells have a
/// snapshot of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_of_format_3_keeps_cells_and_a_front_end_rebuilds_them() {
    keeps_cells(true).await;
}

/// The cells' snapshot: in the state snapshot (format 4), or its own (`keyed`, format 3).
async fn keeps_cells(keyed: bool) {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[61; 32]);
    let prefix = "/sion-ledger/cells/";
    let (pointer, chunks) = if keyed { ("cellsnap", "cellchunk") } else { ("statesnap", "statechunk") };
    let mut a = if keyed {
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init")
    } else {
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init")
    };
    assert!(a.keeps_cells());
    assert_eq!(a.latest().await.expect("genesis").header.cells, Some([0; 32]), "the empty map");

    // Three robots, each in its own aisle of the map (cells of level 0, 8.192 m).
    let tag = frame_tag("map");
    let robots: Vec<SigningKey> = (0..3u8).map(|i| SigningKey::from_bytes(&[70 + i; 32])).collect();
    let mut logs = Vec::new();
    for r in &robots {
        let t =
            a.submit_batch(vec![SignedTx::sign(r, 0, Tx::OpenMemory { agent: None, policy: [7; 32] })]).await;
        logs.push(t[0].as_ref().expect("opened").log.expect("its log"));
    }
    let cell = |robot: usize, step: i64| cell_key(tag, 0, robot as i64 * 100, step);
    // Commits until past the first snapshot: each commit of a robot names the cell it entered.
    let mut nonce = [1u64; 3];
    let mut size = [0u64; 3];
    let mut version = [0u64; 3];
    let mut step = 0i64;
    let mut last = 0;
    while last <= SNAPSHOT_EVERY + 20 {
        let i = (step % 3) as usize;
        let tx = commit_cells(
            &robots[i],
            nonce[i],
            logs[i],
            version[i],
            size[i],
            size[i] + 1,
            vec![cell(i, step / 3)],
        );
        let pulse = a.submit(tx).await.unwrap_or_else(|e| panic!("commit {step}: {e}"));
        (nonce[i], version[i], size[i]) = (nonce[i] + 1, version[i] + 1, size[i] + 1);
        last = pulse.header.number;
        step += 1;
    }
    let latest = a.latest().await.expect("latest");
    assert_eq!(latest.header.number, last);

    // A robot's aisle: its cells list it alone; proved against the header's cells root.
    let aisle = sion_verify::atom::BoxMm {
        min_mm: [100 * 8192, 0, 0],
        max_mm: [100 * 8192 + 8000, 8192 * 50 - 1, 1000],
    };
    let asked = AskedCells::Question(Box::new(CellQuery::new("map", &aisle)));
    let (h, proof, lists) = a.cells_asked(&asked, None).await.expect("cells").expect("kept");
    assert_eq!(h.header, latest.header);
    let shown = proof.verify_asked(&latest.header.cells.expect("root"), &asked).expect("holds");
    assert_eq!(shown.len(), 50, "robot 1's first 50 cells");
    for (k, d) in &shown {
        assert_eq!(lists.get(k), Some(&vec![logs[1].0]));
        assert_eq!(*d, logs_digest(&[logs[1].0]));
    }
    // As of an earlier Pulse: fewer cells, under that Pulse's root.
    let (early, proof, _) = a.cells_asked(&asked, Some(60)).await.expect("cells").expect("kept");
    let then = proof.verify_asked(&early.header.cells.expect("root"), &asked).expect("holds");
    assert!(!then.is_empty() && then.len() < shown.len(), "{} then, {} now", then.len(), shown.len());

    // The snapshot of Pulse 1,024 is in etcd.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let snap = raw.get(format!("{prefix}{pointer}"), None).await.expect("get");
    let value = snap.kvs().first().expect("a snapshot").value().to_vec();
    assert_eq!(u64::from_le_bytes(value[..8].try_into().expect("8")), SNAPSHOT_EVERY);

    // A front-end holding nothing rebuilds the map from it and the entries since.
    let want: BTreeMap<u128, Vec<u64>> = lists;
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let (hb, _, lists_b) = b.cells_asked(&asked, None).await.expect("rebuilt").expect("kept");
    assert_eq!((hb.header, &lists_b), (latest.header, &want));

    // A damaged snapshot is a cache: passed over for the entries from the genesis.
    let chunk = format!("{prefix}{chunks}/{:020}/{:020}", SNAPSHOT_EVERY, 0);
    let mut bytes = raw.get(chunk.clone(), None).await.expect("get").kvs()[0].value().to_vec();
    bytes[20] ^= 1;
    raw.put(chunk, bytes, None).await.expect("damage");
    let mut c = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let (hc, _, lists_c) = c.cells_asked(&asked, None).await.expect("rebuilt").expect("kept");
    assert_eq!((hc.header, &lists_c), (latest.header, &want));

    // Named cells (what a witness asks): one present, one no robot met.
    let named = AskedCells::keys(&[cell(2, 3), cell(0, 9_999)]);
    let (_, proof, lists) = c.cells_asked(&named, None).await.expect("cells").expect("kept");
    let shown = proof.verify_asked(&latest.header.cells.expect("root"), &named).expect("holds");
    assert_eq!(shown.len(), 1);
    assert_eq!(lists.get(&cell(2, 3)), Some(&vec![logs[2].0]));

    // A commit naming cells on a ledger made before cells is refused with the code `cells`.
    let old = "/sion-ledger/cells-old/";
    let mut o =
        FleetLedger::init_format(&[etcd.url()], old, key.clone(), Format::Unchained).await.expect("init");
    assert!(!o.keeps_cells());
    assert_eq!(o.latest().await.expect("genesis").header.cells, None);
    let t = o
        .submit_batch(vec![SignedTx::sign(&robots[0], 0, Tx::OpenMemory { agent: None, policy: [7; 32] })])
        .await;
    let log = t[0].as_ref().expect("opened").log.expect("log");
    match o.submit(commit_cells(&robots[0], 1, log, 0, 0, 1, vec![cell(0, 0)])).await {
        Err(sion_fleet::FleetError::Refused(e)) => assert_eq!(e.code(), "cells", "{e}"),
        other => panic!("a commit naming cells on a ledger without them: {other:?}"),
    }
    assert!(o.cells_asked(&named, None).await.expect("asked").is_none());
}

/// The attack: whoever holds the ledger key (or writes etcd with it) signs a Pulse whose
/// commit names a cell but whose cells root leaves the robot out of it — hiding where a robot
/// was. The robot's signed commit in the entry names the cell, so a front-end that rebuilds the
/// map finds the root is not what the entries make, and signs nothing on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_end_refuses_a_signed_cells_root_that_hides_a_listing() {
    use sion_store::ledger::{MemoryLog, PulseHeader, SignedHeader, account_of, encode_version};
    use sion_verify::merkle::{Blake3, MemoryTree};
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[62; 32]);
    let prefix = "/sion-ledger/cells-hidden/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let robot = SigningKey::from_bytes(&[90; 32]);
    let t = a
        .submit_batch(vec![SignedTx::sign(&robot, 0, Tx::OpenMemory { agent: None, policy: [7; 32] })])
        .await;
    let log = t[0].as_ref().expect("opened").log.expect("log");
    let tag = frame_tag("map");
    a.submit(commit_cells(&robot, 1, log, 0, 0, 1, vec![cell_key(tag, 0, 5, 5)])).await.expect("commit");
    let last = a.latest().await.expect("latest").header;

    // Pulse last + 1, forged: the robot's true commit naming cell (5, 6), its log moved as the
    // rules move it, the state root honest — and the cells root left as it was.
    let tx = commit_cells(&robot, 2, log, 1, 1, 2, vec![cell_key(tag, 0, 5, 6)]);
    let number = last.number + 1;
    let was = a.log(log).await.expect("log").expect("exists");
    let moved = MemoryLog { head: common::head(2), commits: 2, committed_at: number, ..was };
    let tree = MemoryTree::<Blake3>::from_leaves([moved.encode()]);
    let header = PulseHeader {
        number,
        time_ns: last.time_ns + 1,
        logs: 1,
        state_root: tree.root(),
        prev: last.hash(),
        cells: last.cells,
    };
    let mut entry = vec![1u8];
    let bytes = tx.encode();
    entry.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    entry.extend_from_slice(&bytes);
    entry.extend_from_slice(&header.encode());
    let mut head_value = number.to_le_bytes().to_vec();
    head_value.extend_from_slice(&header.hash());
    let k = |rest: String| format!("{prefix}{rest}");
    let put = |key: String, value: Vec<u8>| etcd_client::TxnOp::put(key, value, None);
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    raw.txn(etcd_client::Txn::new().and_then(vec![
        put(k("head".into()), head_value),
        put(k(format!("pulse/{number:020}")), entry),
        put(k(format!("sig/{number:020}")), SignedHeader::sign(&key, header).signature.to_vec()),
        put(k(format!("log/{:020}", log.0)), moved.encode()),
        put(k(format!("version/{:020}/{:020}", log.0, 2)), encode_version(&moved).to_vec()),
        put(k(format!("nonce/{}", hex::encode(account_of(&robot).0))), 3u64.to_le_bytes().to_vec()),
    ]))
    .await
    .expect("the forged Pulse");

    // A front-end that held the state before replays the Pulse and refuses it; so does one that
    // held nothing, from the entries.
    match a.latest().await {
        Err(e @ sion_fleet::FleetError::StateMismatch { .. }) => {
            assert!(e.to_string().contains("cells"), "{e}")
        }
        other => panic!("the front-end that held the state took the hidden listing: {other:?}"),
    }
    let mut fresh = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    match fresh.latest().await {
        Err(e @ sion_fleet::FleetError::StateMismatch { .. }) => {
            assert!(e.to_string().contains("cells root"), "{e}")
        }
        other => panic!("a front-end holding nothing took the hidden listing: {other:?}"),
    }
}
