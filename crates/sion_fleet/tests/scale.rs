//! What a Pulse and a proof read, on a real etcd (issue 30, requirement 1): a front-end that
//! held the state replays the Pulses since and reads no log they did not change; a state or
//! transaction-time proof of a compacted Pulse reads its own log's records and path, and the
//! state tree's nodes as that Pulse left them, not every log. Each is shown by damaging, straight in etcd, what must not be read: the old code read it
//! and failed; a front-end reading the whole state still finds it.

mod common;
use common::{head, tree};
use ed25519_dalek::SigningKey;
use sion_fleet::local::Etcd;
use sion_fleet::{FleetError, FleetLedger, Format};
use sion_store::ledger::{LogId, SignedTx, Tx, account_of};
use sion_verify::merkle::{Blake3, consistency_path};

async fn open(ledger: &mut FleetLedger, writer: &SigningKey) -> LogId {
    let nonce = ledger.nonce(&account_of(writer)).await.expect("nonce");
    ledger
        .submit(SignedTx::sign(writer, nonce, Tx::OpenMemory { agent: None, policy: [1; 32] }))
        .await
        .expect("open");
    LogId(ledger.log_count().await.expect("count") - 1)
}

/// Commit ten atoms more to `log`: its Pulse.
async fn grow(ledger: &mut FleetLedger, writer: &SigningKey, log: LogId) -> Result<u64, FleetError> {
    let nonce = ledger.nonce(&account_of(writer)).await?;
    let current = ledger.log(log).await?.expect("the log");
    let (from, to) = (current.head.size, current.head.size + 10);
    let proof =
        if from == 0 { vec![] } else { consistency_path::<Blake3, _>(&tree(to), from, to).expect("proof") };
    let tx = Tx::CommitMemory {
        log,
        version: current.commits,
        head: head(to),
        proof,
        seal: false,
        cells: Vec::new(),
    };
    Ok(ledger.submit(SignedTx::sign(writer, nonce, tx)).await?.header.number)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_end_that_held_the_state_reads_only_what_the_pulses_since_changed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[91; 32]);
    let prefix = "/sion-ledger/scale-held/";
    // A ledger that keeps its state key by key (format 3): on format 4 no log key is read at all.
    let mut a =
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init");
    let writers: Vec<SigningKey> = (0..3u8).map(|i| SigningKey::from_bytes(&[92 + i; 32])).collect();
    let mut logs = Vec::new();
    for w in &writers {
        logs.push(open(&mut a, w).await);
    }
    grow(&mut a, &writers[0], logs[0]).await.expect("a commits");
    // Another front-end moves the head; then log 2's key, which no Pulse since touches, is
    // damaged in etcd.
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect b");
    grow(&mut b, &writers[1], logs[1]).await.expect("b commits");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let damaged = format!("{prefix}log/{:020}", logs[2].0);
    raw.put(damaged.clone(), b"not a leaf".to_vec(), None).await.expect("put");
    // a replays b's Pulse from the state it held, reads nothing of log 2, and commits on.
    let pulse = grow(&mut a, &writers[0], logs[0]).await.expect("a, from the state it held");
    assert_eq!(a.latest().await.expect("latest").header.number, pulse);
    // A front-end reading the whole state finds the damage and builds on nothing.
    let mut fresh = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    match grow(&mut fresh, &writers[1], logs[1]).await {
        Err(FleetError::Damaged { key, .. }) => assert_eq!(key, damaged),
        other => panic!("a whole read did not find the damaged leaf: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proof_of_a_compacted_pulse_reads_its_own_log_not_every_log() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[101; 32]);
    let prefix = "/sion-ledger/scale-compacted/";
    let mut ledger = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let (wa, wb) = (SigningKey::from_bytes(&[102; 32]), SigningKey::from_bytes(&[103; 32]));
    let (la, lb) = (open(&mut ledger, &wa).await, open(&mut ledger, &wb).await);
    let mut commits = Vec::new();
    for _ in 0..3 {
        commits.push(grow(&mut ledger, &wa, la).await.expect("a"));
        grow(&mut ledger, &wb, lb).await.expect("b");
    }
    grow(&mut ledger, &wb, lb).await.expect("b once more");
    let latest = ledger.latest().await.expect("latest").header.number;
    ledger.compact_before(latest).await.expect("compact");
    // Log b's version records and paths gone: whatever reads every log fails.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    for what in ["version", "path"] {
        let k = format!("{prefix}{what}/{:020}/", lb.0);
        raw.delete(k, Some(etcd_client::DeleteOptions::new().with_prefix())).await.expect("delete");
    }
    let mut reader = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let public = key.verifying_key();
    // Position 15 of log a was first committed by its second commit.
    let time = reader.tx_time_proof(la, 15).await.expect("a's transaction time, from its own log");
    assert_eq!(time.at.header.header.number, commits[1]);
    time.verify(&public).expect("verifies");
    for (i, &pulse) in commits.iter().enumerate() {
        let proof = reader.state_proof(la, pulse).await.expect("a's state where it committed");
        proof.verify(&public).expect("verifies");
        assert_eq!(proof.log.head.size, 10 * (i as u64 + 1));
        reader
            .state_proof(la, pulse - 1)
            .await
            .expect("and the Pulse before")
            .verify(&public)
            .expect("verifies");
    }
    // A Pulse neither a commit of a's nor the one before, compacted: from the state tree's nodes
    // as that Pulse left them, not from b's records (gone).
    let proof = reader.state_proof(la, commits[2] + 1).await.expect("a's state at b's commit");
    proof.verify(&public).expect("verifies");
    assert_eq!((proof.header.header.number, proof.log.head.size), (commits[2] + 1, 30));
}

/// A state proof at any Pulse, however compacted, reads O(log n) keys: 1,000 logs (opened by
/// one writer, so each opening moves two leaves), one log committed between them; after
/// compaction and with every other log's version records and paths deleted, proofs of that log
/// and of others at Pulses no commit of theirs made still verify, each within a few dozen reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_proof_at_any_compacted_pulse_reads_log_n_keys() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[121; 32]);
    let prefix = "/sion-ledger/scale-nodes/";
    let mut ledger = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let (robot, many) = (SigningKey::from_bytes(&[122; 32]), SigningKey::from_bytes(&[123; 32]));
    let log = open(&mut ledger, &robot).await;
    let mut sizes = vec![(ledger.latest().await.expect("latest").header.number, 0)];
    let (other, mut other_opened) = (LogId(log.0 + 500), u64::MAX);
    for i in 0..1000u64 {
        if open(&mut ledger, &many).await == other {
            other_opened = ledger.latest().await.expect("latest").header.number;
        }
        if i % 100 == 50 {
            let pulse = grow(&mut ledger, &robot, log).await.expect("a commit");
            sizes.push((pulse, sizes.last().expect("one").1 + 10));
        }
    }
    let latest = ledger.latest().await.expect("latest").header.number;
    ledger.compact_before(latest).await.expect("compact");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    for what in ["version", "path"] {
        for id in (log.0 + 1..=log.0 + 1000).filter(|i| *i != other.0) {
            let k = format!("{prefix}{what}/{id:020}/");
            raw.delete(k, Some(etcd_client::DeleteOptions::new().with_prefix())).await.expect("delete");
        }
    }
    let mut reader = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let public = key.verifying_key();
    reader.state_proof(log, latest).await.expect("the latest state, read once");
    let mut most = 0;
    for pulse in (sizes[0].0 + 1..latest).step_by(29) {
        let before = reader.etcd_reads();
        let proof = reader.state_proof(log, pulse).await.expect("the robot's log at that Pulse");
        most = most.max(reader.etcd_reads() - before);
        proof.verify(&public).expect("verifies");
        let want = sizes.iter().rev().find(|(p, _)| *p <= pulse).expect("opened by then").1;
        assert_eq!((proof.header.header.number, proof.log.head.size), (pulse, want), "Pulse {pulse}");
        if pulse >= other_opened {
            let proof = reader.state_proof(other, pulse).await.expect("another log at that Pulse");
            proof.verify(&public).expect("verifies");
            assert_eq!(proof.header.header.number, pulse);
        }
    }
    eprintln!("at most {most} etcd reads for a state proof among 1,001 logs");
    assert!(most <= 30, "{most} reads for one state proof among 1,001 logs");
}

/// Reads have a queue of their own: while one client asks a front-end for a state proof that
/// reads every log (a compacted Pulse no commit of the log made, of a ledger made before the
/// state tree's nodes were kept: 500 logs' version records), a
/// robot's commits through the same front-end are acknowledged, one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_does_not_hold_up_commits() {
    use sion_fleet::client::RemoteLedger;
    use sion_fleet::service::Service;
    use sion_store::ledger::link::LedgerLink as _;
    use std::time::Instant;

    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[111; 32]);
    let prefix = "/sion-ledger/scale-reads/";
    let mut ledger = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let many = SigningKey::from_bytes(&[112; 32]);
    for _ in 0..1000 {
        open(&mut ledger, &many).await;
    }
    let robot = SigningKey::from_bytes(&[113; 32]);
    let log = open(&mut ledger, &robot).await;
    grow(&mut ledger, &robot, log).await.expect("a first commit");
    let latest = ledger.latest().await.expect("latest").header.number;
    ledger.compact_before(latest).await.expect("compact");
    // The state tree's tier blocks (and nodes) gone, as a ledger made before they were kept:
    // the proof below reads every log's version records.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    for kept in ["node/", "tier/"] {
        let keys = format!("{prefix}{kept}");
        raw.delete(keys, Some(etcd_client::DeleteOptions::new().with_prefix())).await.expect("delete");
    }
    let addr = sion_fleet::local::free_addr().expect("a free loopback port");
    tokio::spawn(sion_fleet::service::serve_service(Service::new(ledger), addr, std::future::pending()));
    let url = format!("http://{addr}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let (reader_url, robot_url) = (url.clone(), url);
    let read = tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&reader_url).expect("link");
        let start = Instant::now();
        link.state_proof(LogId(0), 500).expect("the slow state proof");
        (start, Instant::now())
    });
    let commits = tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&robot_url).expect("link");
        let mut link = link;
        let mut acked = Vec::new();
        let (mut size, mut version) = (10u64, 1u64);
        let started = Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(20) && acked.len() < 400 {
            let nonce = link.nonce(&account_of(&robot)).expect("nonce");
            let to = size + 10;
            let proof = consistency_path::<Blake3, _>(&tree(to), size, to).expect("proof");
            let tx = Tx::CommitMemory { log, version, head: head(to), proof, seal: false, cells: Vec::new() };
            link.submit(SignedTx::sign(&robot, nonce, tx)).expect("a commit");
            acked.push(Instant::now());
            (size, version) = (to, version + 1);
        }
        acked
    });
    let (start, end) = read.await.expect("reader");
    let acked = commits.await.expect("robot");
    let during = acked.iter().filter(|t| **t > start && **t < end).count();
    eprintln!("{during} commits acknowledged during a read of {:.2} s", (end - start).as_secs_f64());
    assert!(
        during >= 5,
        "{during} commits acknowledged during a read of {:.2} s (of {} in all)",
        (end - start).as_secs_f64(),
        acked.len()
    );
}
