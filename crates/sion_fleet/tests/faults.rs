//! The fleet ledger on a 3-member etcd cluster on loopback, started here, while members die
//! under it (docs/FLEET-LEDGER.md, "Faults"): a follower killed mid-commit, the leader killed,
//! quorum lost. No Pulse number is ever given twice, no acknowledged commit is lost, a
//! submission without a quorum fails with an error that says so, and the writer's backlog,
//! recorded while the ledger could not be reached, goes in with one commit and one
//! consistency proof when it comes back. Two front-ends racing on one log through a leader's
//! death: exactly one commit of each version wins.

use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use sion_fleet::local::Cluster;
use sion_fleet::{FleetError, FleetLedger};
use sion_store::ledger::{Head, LogId, SignedHeader, SignedTx, Tx, account_of};
use sion_verify::merkle::{Blake3, MemoryTree, consistency_path};

fn tree(n: u64) -> MemoryTree<Blake3> {
    MemoryTree::from_leaves((0..n).map(|i| format!("atom {i}")))
}

fn head(n: u64) -> Head {
    Head { size: n, root: tree(n).root(), index: [0; 32], manifest: [0; 32] }
}

/// One robot: its key and log; what it has recorded locally (its log's size) and every
/// acknowledgement it was given.
struct Robot {
    key: SigningKey,
    log: LogId,
    recorded: u64,
    acked: Vec<SignedHeader>,
    errors: Vec<String>,
}

impl Robot {
    /// Commit everything recorded so far. The log and nonce are read from the ledger each time,
    /// so that a submission whose outcome was unknown (a timeout after etcd committed) is found
    /// and not committed twice.
    async fn commit(&mut self, ledger: &mut FleetLedger) -> Result<Option<SignedHeader>, FleetError> {
        let on = ledger.log(self.log).await?.expect("the robot's log exists");
        if on.head.size >= self.recorded {
            return Ok(None);
        }
        let nonce = ledger.nonce(&account_of(&self.key)).await?;
        let from = on.head.size;
        let proof = if from == 0 {
            vec![]
        } else {
            consistency_path::<Blake3, _>(&tree(self.recorded), from, self.recorded).expect("proof")
        };
        let tx = Tx::CommitMemory {
            log: self.log,
            version: on.commits,
            head: head(self.recorded),
            proof,
            seal: false,
            cells: Vec::new(),
        };
        let h = ledger.submit(SignedTx::sign(&self.key, nonce, tx)).await?;
        self.acked.push(h);
        Ok(Some(h))
    }

    /// Record `atoms` more and try to commit, for `during`; returns (commits acknowledged,
    /// submissions failed).
    async fn run(&mut self, ledger: &mut FleetLedger, during: Duration) -> (u64, u64) {
        let (mut ok, mut failed) = (0, 0);
        let end = Instant::now() + during;
        while Instant::now() < end {
            self.recorded += 3;
            match self.commit(ledger).await {
                Ok(_) => ok += 1,
                Err(e) => {
                    failed += 1;
                    self.errors.push(e.to_string());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        (ok, failed)
    }
}

async fn connect(cluster: &Cluster, prefix: &str, key: &SigningKey) -> FleetLedger {
    let urls = cluster.urls();
    let endpoints: Vec<&str> = urls.iter().map(String::as_str).collect();
    FleetLedger::connect(&endpoints, prefix, key.clone()).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_killed_leader_killed_quorum_lost_no_fork_and_nothing_acknowledged_lost() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cluster = Cluster::start(dir.path(), 3).await.expect("a 3-member etcd cluster");
    let key = SigningKey::from_bytes(&[42; 32]);
    let prefix = "/sion-ledger/faults/";
    let urls = cluster.urls();
    let endpoints: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut ledger = FleetLedger::init(&endpoints, prefix, key.clone()).await.expect("init");

    let writer = SigningKey::from_bytes(&[5; 32]);
    let tx = SignedTx::sign(&writer, 0, Tx::OpenMemory { agent: None, policy: [0; 32] });
    let opened = ledger.submit(tx).await.expect("open");
    let mut robot =
        Robot { key: writer, log: LogId(opened.header.logs - 1), recorded: 0, acked: vec![], errors: vec![] };

    let (ok, _) = robot.run(&mut ledger, Duration::from_millis(500)).await;
    assert!(ok > 0, "nothing committed on a healthy cluster");

    // A follower killed while commits go on: two of three are a quorum, commits go on.
    let leader = cluster.leader().await.expect("a leader");
    let follower = (leader + 1) % 3;
    let before = robot.acked.len();
    let (_, run) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cluster.kill(follower);
        },
        robot.run(&mut ledger, Duration::from_millis(1500))
    );
    eprintln!("follower m{} killed: {} committed, {} failed", follower + 1, run.0, run.1);
    assert!(robot.acked.len() > before, "no commit after a follower was killed");
    cluster.restart(follower).expect("restart");
    cluster.wait_for_quorum(Duration::from_secs(30)).await.expect("quorum");

    // The leader killed: an election, then commits again.
    let leader = cluster.leader().await.expect("a leader");
    let before = robot.acked.len();
    let (_, run) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cluster.kill(leader);
        },
        robot.run(&mut ledger, Duration::from_millis(3000))
    );
    eprintln!("leader m{} killed: {} committed, {} failed", leader + 1, run.0, run.1);
    assert!(robot.acked.len() > before, "no commit after the leader was killed");
    cluster.restart(leader).expect("restart");
    cluster.wait_for_quorum(Duration::from_secs(30)).await.expect("quorum");

    // Quorum lost: two of three stopped. Submissions fail, saying why, within the timeout;
    // the robot goes on recording.
    let committed_before = ledger.log(robot.log).await.expect("log").expect("exists").head.size;
    let survivor = leader;
    let down = [(leader + 1) % 3, (leader + 2) % 3];
    let survivor_url = urls[survivor].clone();
    let mut alone =
        FleetLedger::connect(&[survivor_url.as_str()], prefix, key.clone()).await.expect("connect");
    alone.latest().await.expect("latest");
    for &i in &down {
        cluster.kill(i);
    }
    let started = Instant::now();
    robot.recorded += 100;
    let refused = robot.commit(&mut alone).await;
    let waited = started.elapsed();
    let error = refused.expect_err("a commit without a quorum was acknowledged");
    eprintln!("without a quorum, after {waited:?}: {error}");
    assert!(waited < Duration::from_secs(30), "the error took {waited:?}");
    assert!(matches!(error, FleetError::Etcd { .. }), "not an etcd error: {error}");
    assert!(error.to_string().contains("quorum"), "the error does not say a quorum is missing: {error}");
    // Through every member's URL, the same: no answer is an error, never an acknowledgement.
    robot.recorded += 10;
    assert!(robot.commit(&mut ledger).await.is_err(), "a commit without a quorum was acknowledged");
    robot.recorded += 1000;
    let backlog_from = committed_before;

    // Quorum back: the whole backlog in one commit with one consistency proof.
    for &i in &down {
        cluster.restart(i).expect("restart");
    }
    cluster.wait_for_quorum(Duration::from_secs(30)).await.expect("quorum");
    let mut fresh = connect(&cluster, prefix, &key).await;
    let on = fresh.log(robot.log).await.expect("log").expect("exists");
    let version_before = on.commits;
    let h = robot.commit(&mut fresh).await.expect("the backlog committed").expect("a commit");
    let on = fresh.log(robot.log).await.expect("log").expect("exists");
    assert_eq!(on.head.size, robot.recorded, "the backlog did not go in whole");
    assert_eq!(on.commits, version_before + 1, "the backlog took more than one commit");
    assert_eq!(on.committed_at, h.header.number);
    eprintln!(
        "backlog: {} atoms from {} committed at Pulse {} with one consistency proof",
        robot.recorded - backlog_from,
        backlog_from,
        h.header.number
    );

    // Two front-ends racing on the robot's log, each given every member, while the leader is
    // killed and comes back: in every round both submit the same version (with different
    // heads); never do both win, and a round no one won (the election) is run again.
    let mut other = connect(&cluster, prefix, &key).await;
    let (mut rounds, mut won_by_none) = (0u32, 0u32);
    let mut leader_killed = None;
    while rounds < 12 {
        if rounds == 4 && leader_killed.is_none() {
            let leader = cluster.leader().await.expect("a leader");
            cluster.kill(leader);
            leader_killed = Some(leader);
        }
        if rounds == 8
            && let Some(leader) = leader_killed.take()
        {
            cluster.restart(leader).expect("restart");
        }
        let on = fresh.log(robot.log).await;
        let Ok(Some(on)) = on else {
            won_by_none += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(nonce) = fresh.nonce(&account_of(&robot.key)).await else { continue };
        let from = on.head.size;
        let tx = |to: u64| {
            let proof = consistency_path::<Blake3, _>(&tree(to), from, to).expect("proof");
            let tx = Tx::CommitMemory {
                log: robot.log,
                version: on.commits,
                head: head(to),
                proof,
                seal: false,
                cells: Vec::new(),
            };
            SignedTx::sign(&robot.key, nonce, tx)
        };
        let (a, b) = tokio::join!(fresh.submit(tx(from + 10)), other.submit(tx(from + 11)));
        match (&a, &b) {
            (Ok(_), Ok(_)) => {
                panic!("both front-ends committed version {} of the log: {a:?} / {b:?}", on.commits)
            }
            (Err(_), Err(_)) => won_by_none += 1,
            _ => {
                let h = a.as_ref().or(b.as_ref()).expect("one won");
                robot.acked.push(*h);
                robot.recorded = from + if a.is_ok() { 10 } else { 11 };
                rounds += 1;
            }
        }
    }
    let on = fresh.log(robot.log).await.expect("log").expect("exists");
    assert_eq!(on.head.size, robot.recorded, "the log is not at the winner's head");
    eprintln!(
        "two front-ends racing through a leader's death: 12 versions, one winner each ({won_by_none} rounds won by none)"
    );

    // The chain: every number once, each header signed and naming the one before, times
    // increasing; every acknowledged header is the chain's header at its number.
    let latest = fresh.latest().await.expect("latest");
    let public = key.verifying_key();
    let mut prev: Option<SignedHeader> = None;
    let mut chain = Vec::new();
    for n in 0..=latest.header.number {
        let h = fresh.header(n).await.expect("header");
        h.verify(&public).expect("signed by the ledger");
        assert_eq!(h.header.number, n);
        if let Some(p) = prev {
            assert_eq!(h.header.prev, p.header.hash(), "Pulse {n} does not name Pulse {}", n - 1);
            assert!(h.header.time_ns > p.header.time_ns, "time went back at Pulse {n}");
        }
        prev = Some(h);
        chain.push(h);
    }
    for a in &robot.acked {
        assert_eq!(
            chain[a.header.number as usize], *a,
            "acknowledged Pulse {} was lost or changed",
            a.header.number
        );
    }
    // The log's versions only grow, each at its own Pulse.
    let proof = fresh.state_proof(robot.log, latest.header.number).await.expect("state proof");
    proof.verify(&public).expect("state proof verifies");
    assert_eq!(proof.log.head.size, robot.recorded);
    eprintln!("{} Pulses, {} commits acknowledged, none lost", chain.len(), robot.acked.len());
}
