//! Old Pulses out of etcd, on a real etcd: archived into segment files beside the ledger,
//! every header, cosignature, state proof and transaction-time proof is what it was; a front-end
//! given the archive reads them, one without says why it cannot; a damaged segment is refused
//! naming it; archiving goes on from its mark as the chain grows.

use ed25519_dalek::SigningKey;
use etcd_client::GetOptions;
use sion_fleet::local::Etcd;
use sion_fleet::{FleetError, FleetLedger};
use sion_store::ledger::{Head, LogId, SignedTx, Tx, account_of};
use sion_verify::ledger::Cosignature;
use sion_verify::merkle::{Blake3, MemoryTree, consistency_path};

fn tree(n: u64) -> MemoryTree<Blake3> {
    MemoryTree::from_leaves((0..n).map(|i| format!("atom {i}")))
}

fn commit(writer: &SigningKey, nonce: u64, log: LogId, version: u64, from: u64, to: u64) -> SignedTx {
    let proof =
        if from == 0 { vec![] } else { consistency_path::<Blake3, _>(&tree(to), from, to).expect("proof") };
    let head = Head { size: to, root: tree(to).root(), index: [0; 32], manifest: [0; 32] };
    SignedTx::sign(
        writer,
        nonce,
        Tx::CommitMemory { log, version, head, proof, seal: false, cells: Vec::new() },
    )
}

async fn keys(etcd: &Etcd, prefix: &str) -> usize {
    let mut c = etcd_client::Client::connect([etcd.url()], None).await.expect("client");
    let resp = c.get(prefix, Some(GetOptions::new().with_prefix().with_keys_only())).await.expect("get");
    resp.kvs().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_pulses_move_to_segments_and_read_back_the_same() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let archive = tmp.path().join("archive");
    std::fs::create_dir_all(&archive).expect("archive dir");
    let key = SigningKey::from_bytes(&[44; 32]);
    let prefix = "/sion-ledger/archive/";
    let mut ledger =
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init").with_archive(&archive);
    let writers = [SigningKey::from_bytes(&[7; 32]), SigningKey::from_bytes(&[8; 32])];
    let mut logs = Vec::new();
    for w in &writers {
        ledger
            .submit(SignedTx::sign(w, 0, Tx::OpenMemory { agent: None, policy: [0; 32] }))
            .await
            .expect("open");
        logs.push(LogId(ledger.log_count().await.expect("count") - 1));
    }
    let mut sizes = [0u64, 0];
    let mut round = 0u64;
    let mut grow = async |ledger: &mut FleetLedger, rounds: u64| {
        for _ in 0..rounds {
            for (i, w) in writers.iter().enumerate() {
                let nonce = ledger.nonce(&account_of(w)).await.expect("nonce");
                let step = 5 + i as u64;
                ledger
                    .submit(commit(w, nonce, logs[i], round, sizes[i], sizes[i] + step))
                    .await
                    .expect("commit");
                sizes[i] += step;
            }
            round += 1;
        }
    };
    grow(&mut ledger, 8).await;
    // A witness cosigned some Pulses: cosignatures move with them.
    let witness = SigningKey::from_bytes(&[9; 32]);
    for n in [0u64, 3, 7] {
        let h = ledger.header(n).await.expect("header").header;
        let c = Cosignature::sign(&witness, &key.verifying_key().to_bytes(), &h);
        ledger.add_cosignature(n, c).await.expect("cosign");
    }
    let latest = ledger.latest().await.expect("latest").header.number;
    let mut before = Vec::new();
    for n in 0..=latest {
        let header = ledger.header(n).await.expect("header");
        let cosigs = ledger.cosignatures(n).await.expect("cosignatures");
        let states: Vec<_> = {
            let mut v = Vec::new();
            for &log in &logs {
                v.push(ledger.state_proof(log, n).await.ok());
            }
            v
        };
        before.push((header, cosigs, states));
    }
    let time = ledger.tx_time_proof(logs[0], 12).await.expect("time proof");
    let pulses_in_etcd = keys(&etcd, &format!("{prefix}pulse/")).await;

    // Everything but the last two Pulses, in segments of 5.
    let report = ledger.archive_before(latest - 1, 5).await.expect("archive");
    assert_eq!(report.archived_to, latest - 1);
    assert_eq!(report.pulses, latest - 1);
    assert_eq!(report.segments, (latest - 1).div_ceil(5));
    assert_eq!(keys(&etcd, &format!("{prefix}pulse/")).await, pulses_in_etcd - (latest - 1) as usize);
    assert_eq!(keys(&etcd, &format!("{prefix}sig/")).await, 2, "signatures of archived Pulses left in etcd");
    assert_eq!(keys(&etcd, &format!("{prefix}cosig/")).await, 0);

    // Read back through a new front-end with the archive: the same bytes.
    let mut reader = FleetLedger::connect(&[etcd.url()], prefix, key.clone())
        .await
        .expect("connect")
        .with_archive(&archive);
    for (n, (header, cosigs, states)) in before.iter().enumerate() {
        let n = n as u64;
        assert_eq!(&reader.header(n).await.expect("archived header"), header, "Pulse {n}");
        assert_eq!(&reader.cosignatures(n).await.expect("cosignatures"), cosigs, "Pulse {n}");
        for (i, &log) in logs.iter().enumerate() {
            assert_eq!(reader.state_proof(log, n).await.ok(), states[i], "log {log} at Pulse {n}");
        }
    }
    assert_eq!(reader.tx_time_proof(logs[0], 12).await.expect("time proof"), time);
    // Archived Pulses take no more cosignatures.
    let h = reader.header(2).await.expect("header").header;
    let late = Cosignature::sign(&witness, &key.verifying_key().to_bytes(), &h);
    assert!(matches!(reader.add_cosignature(2, late).await, Err(FleetError::Cosignature(_))));

    // A front-end without the archive says what it lacks.
    let mut blind = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let e = blind.header(1).await.expect_err("no archive");
    assert!(e.to_string().contains("--archive"), "{e}");
    assert_eq!(blind.header(latest).await.expect("the latest stays in etcd"), before[latest as usize].0);

    // The chain grows on, and archiving goes on from its mark.
    grow(&mut ledger, 3).await;
    let latest2 = ledger.latest().await.expect("latest").header.number;
    let report = ledger.archive_before(latest2, 100).await.expect("archive again");
    assert_eq!((report.archived_to, report.pulses), (latest2, latest2 - (latest - 1)));
    assert_eq!(keys(&etcd, &format!("{prefix}pulse/")).await, 1);
    let mut reader2 = FleetLedger::connect(&[etcd.url()], prefix, key.clone())
        .await
        .expect("connect")
        .with_archive(&archive);
    for n in [0, latest - 1, latest2 - 1] {
        reader2.header(n).await.expect("archived header");
    }
    // New commits still go on, their proofs still hold.
    grow(&mut ledger, 1).await;
    let p = ledger.latest().await.expect("latest").header.number;
    ledger.state_proof(logs[1], p).await.expect("state").verify(&key.verifying_key()).expect("verifies");

    // A damaged segment is refused, naming it.
    let first = archive.join(sion_fleet::archive::segment_name(0, 5));
    let mut bytes = std::fs::read(&first).expect("segment");
    bytes[40] ^= 1;
    std::fs::write(&first, &bytes).expect("damage");
    let mut fresh = FleetLedger::connect(&[etcd.url()], prefix, key.clone())
        .await
        .expect("connect")
        .with_archive(&archive);
    let e = fresh.header(2).await.expect_err("damaged segment");
    assert!(e.to_string().contains("pulses-") && e.to_string().contains("damaged"), "{e}");
}

/// A state snapshot pointer put into etcd by someone without the ledger key (format 4), naming
/// a Pulse far past the head: the archive takes it as no pointer — it writes a snapshot of its
/// own over it and archives nothing past that — so a front-end started afterwards still loads
/// the state. (Found by a read-only review: trusted, the forged pointer stopped snapshots for
/// good, overflowed the archive's kept mark, and had the archive move out the entries a front-
/// end holding nothing replays.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_state_pointer_neither_stops_snapshots_nor_moves_the_archive() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let archive = tmp.path().join("archive");
    std::fs::create_dir_all(&archive).expect("archive dir");
    let key = SigningKey::from_bytes(&[45; 32]);
    let prefix = "/sion-ledger/archive-forged/";
    let mut ledger =
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init").with_archive(&archive);
    let w = SigningKey::from_bytes(&[46; 32]);
    ledger
        .submit(SignedTx::sign(&w, 0, Tx::OpenMemory { agent: None, policy: [0; 32] }))
        .await
        .expect("open");
    let log = LogId(ledger.log_count().await.expect("count") - 1);
    let mut size = 0;
    for round in 0..6 {
        ledger.submit(commit(&w, round + 1, log, round, size, size + 5)).await.expect("commit");
        size += 5;
    }
    let latest = ledger.latest().await.expect("latest").header.number;

    // The pointer's layout (docs/FLEET-LEDGER.md, "The state snapshot"): u64 S, u32 count, 32 hash,
    // 32 H(header S), 64 signature — here S = u64::MAX and a signature of nobody.
    let mut forged = u64::MAX.to_le_bytes().to_vec();
    forged.extend_from_slice(&1u32.to_le_bytes());
    forged.extend_from_slice(&[7; 32]);
    forged.extend_from_slice(&[8; 32]);
    forged.extend_from_slice(&[9; 64]);
    let pointer = format!("{prefix}statesnap");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    raw.put(pointer.as_str(), forged.clone(), None).await.expect("forge the pointer");

    // Archiving up to the Pulse before the latest: the archive writes its own snapshot (as of
    // the latest) over the forged pointer. (That nothing it needs was archived is shown by the
    // front-end started afterwards, which loads that snapshot and replays from it.)
    let report = ledger.archive_before(latest - 1, 100).await.expect("archive");
    assert_eq!(report.archived_to, latest - 1);
    let now = raw.get(pointer.as_str(), None).await.expect("get").kvs()[0].value().to_vec();
    assert_ne!(now, forged, "the forged pointer was left in place: snapshots stopped");
    assert_eq!(u64::from_le_bytes(now[..8].try_into().expect("S")), latest, "the archive's snapshot");

    // A front-end holding nothing loads that snapshot and serves, and the robot commits on.
    let mut fresh = FleetLedger::connect(&[etcd.url()], prefix, key.clone())
        .await
        .expect("connect")
        .with_archive(&archive);
    assert_eq!(fresh.log(log).await.expect("the state").expect("the log").head.size, size);
    fresh.submit(commit(&w, 7, log, 6, size, size + 5)).await.expect("a commit after the archive");
}
