//! Many transactions, one Pulse (issue 35, requirement 1; docs/FLEET-LEDGER.md, "Many
//! transactions, one Pulse"), on a real etcd: a front-end takes a batch of robots' openings and
//! commits into as few Pulses as etcd's limits allow, each transaction still checked by the
//! rules on the state the ones before it made (a stale commit among them refused alone, a
//! sender's second transaction put in the next Pulse); another front-end replays the batched
//! Pulses from the state it held and one started afresh reads them; every log's state and
//! transaction-time proofs verify; a witness checks every batched Pulse's state root from its
//! transactions and cosigns it, and refuses one whose entry lost a transaction; and through the
//! service, robots submitting at once are taken by group commit.

mod common;
use common::commit;
use common::free_addr;
use std::collections::BTreeSet;

use ed25519_dalek::SigningKey;
use sion_fleet::client::RemoteLedger;
use sion_fleet::local::{Cluster, Etcd};
use sion_fleet::service::Service;
use sion_fleet::witness::{Witness, WitnessError};
use sion_fleet::{FleetError, FleetLedger, TxnLimits};
use sion_store::ledger::link::LedgerLink as _;
use sion_store::ledger::{LedgerError, LogId, SignedTx, Tx, account_of};

fn open(writer: &SigningKey, nonce: u64) -> SignedTx {
    SignedTx::sign(writer, nonce, Tx::OpenMemory { agent: None, policy: [7; 32] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulse_takes_many_robots_transactions_each_checked_and_witnessed() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Started as an operator raising etcd's limit of operations a transaction would start it (the
    // first front-ends below keep to the default, 128).
    let etcd = Etcd::start_with(tmp.path(), &["--max-txn-ops", "1024"]).await.expect("etcd");
    let key = SigningKey::from_bytes(&[51; 32]);
    let prefix = "/sion-ledger/batch/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let mut b = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    b.latest().await.expect("b holds the genesis");
    let robots: Vec<SigningKey> = (0..60u8).map(|i| SigningKey::from_bytes(&[100 + i; 32])).collect();

    // 60 openings in one call: one a Pulse (an opening's log is its Pulse's last, `logs - 1`, as
    // robots from before batches take it), every log its own robot's, in the order given.
    let before = a.latest().await.expect("latest").header.number;
    let taken = a.submit_batch(robots.iter().map(|r| open(r, 0)).collect()).await;
    let mut logs = Vec::new();
    for (i, t) in taken.iter().enumerate() {
        let r = t.as_ref().unwrap_or_else(|e| panic!("opening {i}: {e}"));
        let id = r.log.expect("an opening names its log");
        let log = a.log(id).await.expect("log").expect("exists");
        assert_eq!(log.writer, account_of(&robots[i]), "log {id} is not robot {i}'s");
        assert_eq!(log.committed_at, r.pulse.header.number);
        assert_eq!(id.0, r.pulse.header.logs - 1, "the opened log is not its Pulse's last");
        logs.push(id);
    }
    let pulses: BTreeSet<u64> =
        taken.iter().map(|t| t.as_ref().expect("taken").pulse.header.number).collect();
    let after = a.latest().await.expect("latest").header.number;
    assert_eq!((pulses.len() as u64, after - before), (60, 60), "one opening a Pulse");

    // Commits, with what the rules refuse among them: a stale version (refused alone), and a
    // robot's second commit (its next nonce) — in the next Pulse, after its first; and three new
    // robots' openings among them, one in each of three Pulses.
    let mut txs: Vec<SignedTx> =
        robots.iter().zip(&logs).map(|(r, log)| commit(r, 1, *log, 0, 0, 10)).collect();
    txs[7] = commit(&robots[7], 1, logs[7], 5, 0, 10);
    txs.push(commit(&robots[3], 2, logs[3], 1, 10, 25));
    let newcomers: Vec<SigningKey> = (0..3u8).map(|i| SigningKey::from_bytes(&[200 + i; 32])).collect();
    txs.extend(newcomers.iter().map(|r| open(r, 0)));
    let taken = a.submit_batch(txs).await;
    for (k, t) in taken[61..].iter().enumerate() {
        let r = t.as_ref().unwrap_or_else(|e| panic!("newcomer {k}: {e}"));
        assert_eq!(r.log, Some(LogId(60 + k as u64)), "openings take the next ids in order");
        assert_eq!(r.log.map(|l| l.0 + 1), Some(r.pulse.header.logs));
    }
    assert!(
        matches!(&taken[7], Err(FleetError::Refused(LedgerError::Stale { .. }))),
        "the stale commit: {:?}",
        taken[7]
    );
    for (i, t) in taken.iter().enumerate() {
        if i != 7 {
            t.as_ref().unwrap_or_else(|e| panic!("transaction {i}: {e}"));
        }
    }
    let first = taken[3].as_ref().expect("robot 3's first").pulse.header.number;
    let second = taken[60].as_ref().expect("robot 3's second").pulse.header.number;
    assert!(second > first, "robot 3's second commit did not follow its first ({first}, {second})");
    assert_eq!(a.log(logs[3]).await.expect("log").expect("log").head.size, 25);
    let batched = taken.iter().filter_map(|t| t.as_ref().ok()).map(|r| r.pulse.header.number);
    let batched: BTreeSet<u64> = batched.collect();
    assert!(batched.len() < 20, "60 commits and 3 openings took {} Pulses", batched.len());
    eprintln!("60 commits and 3 openings in {} Pulses (etcd's default: 128 operations)", batched.len());

    // Raised limits (an etcd started with --max-txn-ops 1024): the next round in fewer Pulses.
    let mut wide = FleetLedger::connect(&[etcd.url()], prefix, key.clone())
        .await
        .expect("connect")
        .with_limits(TxnLimits { max_ops: 1024, max_bytes: 1 << 20 });
    let round: Vec<SignedTx> = robots
        .iter()
        .zip(&logs)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 7)
        .map(|(_, (r, log))| commit(r, 2, *log, 1, 10, 20))
        .collect();
    let taken = wide.submit_batch(round).await;
    let numbers: BTreeSet<u64> = taken
        .iter()
        .map(|t| t.as_ref().expect("a commit through the wide front-end").pulse.header.number)
        .collect();
    assert!(numbers.len() <= 2, "58 commits under 1,024 operations took {} Pulses", numbers.len());

    // The front-end that held the genesis replays every batched Pulse (each transaction checked
    // again), and one started afresh reads the state and checks it against the signed root.
    let latest = b.latest().await.expect("b replays the batched Pulses");
    assert_eq!(latest.header, wide.latest().await.expect("latest").header);
    let mut fresh = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("fresh");
    assert_eq!(fresh.log_count().await.expect("count"), 63);
    // And b goes on building on them.
    let h = b.submit(commit(&robots[7], 1, logs[7], 0, 0, 10)).await.expect("robot 7 commits now");
    assert_eq!(h.header.number, latest.header.number + 1);

    // Every log's proofs verify: its state at the last Pulse, and when position 0 and its last
    // position were recorded.
    let public = key.verifying_key();
    let last = b.latest().await.expect("latest").header.number;
    for (i, log) in logs.iter().enumerate() {
        let p = b.state_proof(*log, last).await.expect("state proof");
        p.verify(&public).expect("a state proof verifies");
        let size = p.log.head.size;
        for position in [0, size - 1] {
            let t = b
                .tx_time_proof(*log, position)
                .await
                .unwrap_or_else(|e| panic!("robot {i}, {position}: {e}"));
            t.verify(&public).unwrap_or_else(|e| panic!("robot {i}'s position {position}: {e}"));
        }
    }

    // A witness checks each batched Pulse's state root from its transactions, and cosigns it.
    let addr = free_addr();
    let witness_key = SigningKey::from_bytes(&[52; 32]);
    let service =
        Service::new(FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("serve"))
            .accepting(vec![witness_key.verifying_key().to_bytes()]);
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let url = format!("http://{addr}");
    let state = tmp.path().join("w.state");
    let (u, s, wk) = (url.clone(), state.clone(), witness_key.clone());
    let followed = tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&u).expect("link");
        let mut w = Witness::open(wk, public, &s).expect("witness");
        w.follow(&link, |_| {}).expect("the witness checks every batched Pulse")
    })
    .await
    .expect("witness");
    assert_eq!(followed, last + 1, "genesis and every Pulse cosigned");

    // Through the service: robots submitting at once are taken by group commit — their commits
    // share Pulses — and each is told its own log.
    let robots2: Vec<SigningKey> = robots.iter().take(40).cloned().collect();
    let logs2: Vec<LogId> = logs.iter().take(40).copied().collect();
    let mut versions = Vec::new();
    for log in &logs2 {
        versions.push(b.log(*log).await.expect("log").expect("log"));
    }
    let mut threads = Vec::new();
    // Connected first, then all at once.
    let together = std::sync::Arc::new(std::sync::Barrier::new(robots2.len()));
    for ((r, log), v) in robots2.into_iter().zip(logs2).zip(versions) {
        let u = url.clone();
        let together = together.clone();
        threads.push(tokio::task::spawn_blocking(move || {
            let mut link = RemoteLedger::connect(&u).expect("link");
            let nonce = link.nonce(&account_of(&r)).expect("nonce");
            let tx = commit(&r, nonce, log, v.commits, v.head.size, v.head.size + 5);
            together.wait();
            let receipt = link.submit_receipt(tx).expect("committed through the service");
            assert_eq!(receipt.log, Some(log), "the receipt names another log");
            receipt.pulse.header.number
        }));
    }
    let mut numbers = BTreeSet::new();
    for t in threads {
        numbers.insert(t.await.expect("robot"));
    }
    eprintln!("40 robots at once through one front-end: {} Pulses", numbers.len());
    assert!(numbers.len() < 40, "every commit took a Pulse of its own: no group commit");

    // The witness again, over the group commits; then a batched Pulse's entry losing one of its
    // transactions (etcd written by someone else): not cosigned, as damage.
    let (u, s, wk) = (url.clone(), state.clone(), witness_key.clone());
    let latest = tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&u).expect("link");
        let mut w = Witness::open(wk, public, &s).expect("witness");
        w.follow(&link, |_| {}).expect("the witness checks the group commits");
        w.last().expect("followed").0
    })
    .await
    .expect("witness");
    let mut more: Vec<SignedTx> = Vec::new();
    for (r, log) in robots.iter().zip(&logs).skip(40).take(10) {
        let v = b.log(*log).await.expect("log").expect("log");
        let nonce = b.nonce(&account_of(r)).await.expect("nonce");
        more.push(commit(r, nonce, *log, v.commits, v.head.size, v.head.size + 3));
    }
    let taken = b.submit_batch(more).await;
    let n = taken[0].as_ref().expect("taken").pulse.header.number;
    assert!(taken.iter().all(|t| t.as_ref().is_ok_and(|r| r.pulse.header.number == n)), "one Pulse");
    assert_eq!(n, latest + 1);
    let entry_key = format!("{prefix}pulse/{n:020}");
    let mut client = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let entry = client.get(entry_key.as_str(), None).await.expect("get").kvs()[0].value().to_vec();
    let dropped = drop_last_transaction(&entry);
    client.put(entry_key.as_str(), dropped, None).await.expect("put");
    // The front-end that made it replays nothing it made itself; one that held the Pulse before
    // replays this one and refuses the rewritten entry, naming keys; so does one started afresh
    // while no state snapshot is as late as it (it replays every entry since the genesis).
    let refused = a.latest().await.expect_err("a front-end that held the Pulse before replays it");
    assert!(
        refused
            .to_string()
            .contains(&format!("Pulse {n}'s header does not sign the state its 9 transactions make")),
        "{refused}"
    );
    let mut afresh = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("afresh");
    let refused = afresh.latest().await.expect_err("a front-end started afresh replays the entries");
    assert!(refused.to_string().contains("does not sign the state its 9 transactions make"), "{refused}");
    // Once a state snapshot is as of that Pulse (b held it: its own), one started afresh loads
    // the snapshot, reads only the header's bytes of the entry and serves it — to the witness,
    // which refuses it.
    assert_eq!(b.write_state_snapshot().await.expect("b's snapshot"), Some(n));
    let addr = free_addr();
    let afresh = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("afresh");
    let service = Service::new(afresh).accepting(vec![witness_key.verifying_key().to_bytes()]);
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let url = format!("http://{addr}");
    let (u, s, wk) = (url.clone(), state.clone(), witness_key.clone());
    tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&u).expect("link");
        let mut w = Witness::open(wk, public, &s).expect("witness");
        match w.follow(&link, |_| {}) {
            Err(e @ WitnessError::Damaged { number, .. }) => {
                assert_eq!(number, n);
                assert!(e.to_string().contains("logs other than logs"), "{e}");
            }
            other => panic!("the witness cosigned an entry missing a transaction: {other:?}"),
        }
        assert_eq!(w.last().map(|l| l.0), Some(n - 1));
    })
    .await
    .expect("witness");
}

/// A batched entry (`u8 2, u32 count, count × (u32 len, tx), header`) with its last
/// transaction taken out.
fn drop_last_transaction(entry: &[u8]) -> Vec<u8> {
    assert_eq!(entry[0], 2, "a batched entry");
    let count = u32::from_le_bytes(entry[1..5].try_into().expect("count"));
    let mut at = 5;
    let mut bodies = Vec::new();
    for _ in 0..count {
        let len = u32::from_le_bytes(entry[at..at + 4].try_into().expect("len")) as usize;
        bodies.push(&entry[at..at + 4 + len]);
        at += 4 + len;
    }
    let header = &entry[at..];
    let mut out = vec![2];
    out.extend_from_slice(&(count - 1).to_le_bytes());
    for b in &bodies[..bodies.len() - 1] {
        out.extend_from_slice(b);
    }
    out.extend_from_slice(header);
    out
}

/// A Pulse filled to etcd's default limit of operations a transaction (128, the front-end's
/// default too) lands: every put it makes is counted, the entry's own signature among them
/// (found by a read-only review: uncounted, a batch counted at exactly 128 was a transaction
/// of 129 operations, refused by etcd, and every commit in it with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulse_at_etcds_default_limit_of_operations_lands() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[52; 32]);
    let prefix = "/sion-ledger/batch-limit/";
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let robots: Vec<SigningKey> = (0..200u8).map(|i| SigningKey::from_bytes(&[i; 32])).collect();
    let taken = a.submit_batch(robots.iter().map(|r| open(r, 0)).collect()).await;
    let logs: Vec<LogId> =
        taken.iter().map(|t| t.as_ref().expect("opened").log.expect("an opening names its log")).collect();
    let commits = robots.iter().zip(&logs).map(|(r, log)| commit(r, 1, *log, 0, 0, 10)).collect();
    let taken = a.submit_batch(commits).await;
    for (i, t) in taken.iter().enumerate() {
        t.as_ref().unwrap_or_else(|e| panic!("commit {i}: {e}"));
    }
    let pulses: BTreeSet<u64> =
        taken.iter().filter_map(|t| t.as_ref().ok()).map(|r| r.pulse.header.number).collect();
    assert!(pulses.len() >= 2, "200 commits in one Pulse of at most 128 operations");
    eprintln!("200 commits in {} Pulses at etcd's default 128 operations", pulses.len());
}

/// A front-end told wider limits than its members' (`--etcd-max-txn-ops 1024` against etcd's
/// default 128): on format 6 its Pulse's entry wins its number (the swap is a few operations)
/// and the seal, one put a commit, is refused by etcd before its log. Every robot hears that
/// nothing was acknowledged and what to do; no front-end can seal the Pulse while the limits
/// stand; once the member is restarted with limits at least the front-ends', the next front-end
/// seals it, once, and the robots' commits are the ledger's (docs/FLEET-LEDGER.md, "Many
/// transactions, one Pulse").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_over_the_members_limits_is_refused_naming_the_remedy_and_sealed_once_they_are_raised() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut cluster = Cluster::start(tmp.path(), 1).await.expect("etcd");
    let urls = cluster.urls();
    let url = urls[0].as_str();
    let key = SigningKey::from_bytes(&[53; 32]);
    let prefix = "/sion-ledger/over-limits/";
    let mut narrow = FleetLedger::init(&[url], prefix, key.clone()).await.expect("init");
    let robots: Vec<SigningKey> = (0..200u8).map(|i| SigningKey::from_bytes(&[i; 32])).collect();
    let taken = narrow.submit_batch(robots.iter().map(|r| open(r, 0)).collect()).await;
    let logs: Vec<LogId> =
        taken.iter().map(|t| t.as_ref().expect("opened").log.expect("an opening names its log")).collect();
    let before = narrow.latest().await.expect("latest").header.number;

    let mut wide = FleetLedger::connect(&[url], prefix, key.clone())
        .await
        .expect("connect")
        .with_limits(TxnLimits { max_ops: 1024, max_bytes: 1 << 20 });
    let commits = robots.iter().zip(&logs).map(|(r, log)| commit(r, 1, *log, 0, 0, 10)).collect();
    let taken = wide.submit_batch(commits).await;
    for (i, t) in taken.iter().enumerate() {
        match t {
            Err(FleetError::Etcd { message, .. }) => {
                for said in [
                    &format!("etcd refuses Pulse {}'s seal", before + 1),
                    // etcd's own words: the operations, not the request's size.
                    "too many operations",
                    "--etcd-max-txn-ops",
                    "Nothing of Pulse",
                    "restart the members with limits at least the front-ends'",
                ] {
                    assert!(message.contains(said), "robot {i} was not told {said:?}: {message}");
                }
            }
            other => panic!("robot {i}'s commit over the members' limits: {other:?}"),
        }
    }
    // The entry holds its number; a front-end keeping to the members' limits, asked to build
    // on the head (robot 0 trying its commit again), finds it waiting and cannot seal it either.
    match narrow.submit(commit(&robots[0], 1, logs[0], 0, 0, 10)).await {
        Err(FleetError::Etcd { message, .. }) => assert!(message.contains("--etcd-max-txn-ops"), "{message}"),
        other => panic!("a Pulse over the members' limits was sealed: {other:?}"),
    }

    // Refused before etcd's log: no signature of that Pulse is in it.
    let sigs = common::signatures_in_wal(&tmp.path().join("m1"), prefix, "sig");
    assert!(!sigs.contains_key(&(before + 1)), "a seal etcd refused is in its log");

    // The operator's remedy: the member restarted with raised limits.
    cluster.kill(0);
    cluster.set_flags(&["--max-txn-ops", "1024"]);
    cluster.restart(0).expect("restart");
    cluster.wait_for_quorum(std::time::Duration::from_secs(30)).await.expect("quorum");
    let mut fresh = FleetLedger::connect(&[url], prefix, key.clone()).await.expect("connect");
    // Robot 0's retry seals the waiting Pulse, and is refused as replayed: its commit is in it.
    match fresh.submit(commit(&robots[0], 1, logs[0], 0, 0, 10)).await {
        Err(FleetError::Refused(LedgerError::Nonce { .. })) => {}
        other => panic!("robot 0's retry after the seal: {other:?}"),
    }
    let next = fresh.submit(commit(&robots[0], 2, logs[0], 1, 10, 20)).await.expect("the next commit");
    assert_eq!(next.header.number, before + 2, "the waiting Pulse was sealed, then this one built");
    for (i, log) in logs.iter().enumerate() {
        let state = fresh.log(*log).await.expect("log").expect("exists");
        assert_eq!(state.head.size, if i == 0 { 20 } else { 10 }, "robot {i}'s commit is not the ledger's");
    }
    let sigs = common::signatures_in_wal(&tmp.path().join("m1"), prefix, "sig");
    let sealed = sigs.get(&(before + 1)).map_or(0, Vec::len);
    assert_eq!(sealed, 1, "Pulse {}'s seal is in etcd's log {sealed} times", before + 1);
}
