//! Witnesses on a real etcd: two witnesses follow a fleet ledger and cosign every Pulse; a
//! robot's proof files carry their cosignatures (`attested = 2`), and a reader who names the
//! witnesses and a quorum accepts them. The holder of the ledger key re-signs a Pulse with an
//! earlier time (a backdated fork): a reader naming no witness is fooled — which is why they
//! exist — a reader with a quorum is not, and a witness shown the fork refuses it and says why.

mod common;
use common::free_addr;

use ed25519_dalek::SigningKey;
use sion_fleet::FleetLedger;
use sion_fleet::client::RemoteLedger;
use sion_fleet::local::Etcd;
use sion_fleet::service::Service;
use sion_fleet::witness::{Witness, WitnessError};
use sion_sim::{Warehouse, WarehouseConfig};
use sion_store::index::IndexConfig;
use sion_store::ledger::LedgerError;
use sion_store::ledger::link::LedgerLink;
use sion_store::memory::Memory;
use sion_verify::ledger::{Cosignature, SignedHeader};
use sion_verify::proof::{self, Expect};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn witnesses_cosign_the_chain_and_catch_a_backdated_fork() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[21; 32]);
    let prefix = "/sion-ledger/witness/";
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let (w1, w2, stranger) = (
        SigningKey::from_bytes(&[31; 32]),
        SigningKey::from_bytes(&[32; 32]),
        SigningKey::from_bytes(&[33; 32]),
    );
    let accepted = vec![w1.verifying_key().to_bytes(), w2.verifying_key().to_bytes()];
    let addr = free_addr();
    let ledger = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let service = Service::new(ledger).accepting(accepted.clone());
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    let url = format!("http://{addr}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let dir = tmp.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let public = key.verifying_key();
        let link = RemoteLedger::connect(&url).expect("link");
        let config = IndexConfig::default();
        let robot = dir.join("robot");
        let mut memory = Memory::options(&robot)
            .index(config.clone())
            .agent("fleet/robot-1")
            .ledger_link(Box::new(link), &url)
            .create()
            .expect("create");
        let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(2000).collect();
        memory.remember(atoms[..1000].to_vec()).expect("remember");
        memory.commit(false).expect("commit 1");
        memory.remember(atoms[1000..].to_vec()).expect("remember");
        let second = memory.commit(false).expect("commit 2");
        let pulse = second.pulse.header.number;

        // Before any witness: the proof is attested only, and a reader's quorum refuses it.
        let quorum2 = Expect::default().cosigned_by(accepted.clone(), 2);
        let bare = memory.prove_inclusion(1500).expect("prove").encode();
        assert_eq!(bare[8], 1, "attested = 1");
        let e = proof::verify(&bare, &public, &quorum2).expect_err("no cosignatures yet");
        assert_eq!(e.code(), "witnesses", "{e}");
        proof::verify(&bare, &public, &Expect::default()).expect("valid for a reader naming no witness");

        // Two witnesses follow the chain from the genesis and cosign every Pulse.
        let follower = RemoteLedger::connect(&url).expect("witness link");
        let mut witness1 = Witness::open(w1.clone(), public, &dir.join("w1.state")).expect("w1");
        let mut witness2 = Witness::open(w2.clone(), public, &dir.join("w2.state")).expect("w2");
        assert_eq!(witness1.follow(&follower, |_| {}).expect("w1 follows"), pulse + 1);
        assert_eq!(witness2.follow(&follower, |_| {}).expect("w2 follows"), pulse + 1);
        assert_eq!(follower.cosignatures(pulse).expect("cosignatures").len(), 2);

        let file = memory.prove_inclusion(1500).expect("prove");
        let bytes = file.encode();
        assert_eq!(bytes[8], 2, "attested = 2: cosigned");
        let v = proof::verify(&bytes, &public, &quorum2).expect("2 of 2 witnesses cosigned");
        assert_eq!(v.cosigned.len(), 2);
        let strangers = Expect::default().cosigned_by(vec![stranger.verifying_key().to_bytes()], 1);
        assert_eq!(proof::verify(&bytes, &public, &strangers).expect_err("stranger").code(), "witnesses");

        // A restarted witness has nothing new to cosign, and hands the last cosignature again.
        let mut again = Witness::open(w1.clone(), public, &dir.join("w1.state")).expect("w1 reopened");
        assert_eq!(again.last().map(|l| l.0), Some(pulse));
        assert_eq!(again.follow(&follower, |_| {}).expect("w1 again"), 0);

        // The ledger key's holder re-signs Pulse `pulse` an hour earlier: a backdated fork.
        let attestation = file.attestation.clone().expect("attested");
        let mut forged_header = attestation.state.header.header;
        forged_header.time_ns -= 3_600_000_000_000;
        let forged = SignedHeader::sign(&key, forged_header);
        let mut fork = file.clone();
        if let Some(a) = fork.attestation.as_mut() {
            a.state.header = forged;
        }
        // With the real cosignatures still in the file, they do not hold for the forged header.
        let e = proof::verify(&fork.encode(), &public, &Expect::default()).expect_err("cosignatures");
        assert_eq!(e.code(), "attestation", "{e}");
        // Stripped of them, the fork fools a reader who names no witness …
        if let Some(a) = fork.attestation.as_mut() {
            a.cosignatures.clear();
        }
        let fooled =
            proof::verify(&fork.encode(), &public, &Expect::default()).expect("the ledger key signed it");
        assert_eq!(fooled.pulse.map(|p| p.1), Some(forged_header.time_ns));
        // … and not one who asks for a quorum.
        let e = proof::verify(&fork.encode(), &public, &quorum2).expect_err("no witness cosigned the fork");
        assert_eq!(e.code(), "witnesses", "{e}");
        assert!(e.to_string().contains("0 of the 2 witnesses"), "{e}");
        // A witness shown the fork refuses it, with both headers' hashes as the evidence.
        match witness2.cosign(&forged) {
            Err(WitnessError::Equivocation { number, .. }) => assert_eq!(number, pulse),
            other => panic!("the fork was not caught: {other:?}"),
        }
        // Nor does it cosign an older or a skipped Pulse.
        let old = follower.header(1).expect("Pulse 1");
        assert!(matches!(witness2.cosign(&old), Err(WitnessError::DoesNotExtend { .. })));

        // The service keeps cosignatures only from the witnesses it accepts, and only valid ones.
        let by_stranger = Cosignature::sign(&stranger, &public.to_bytes(), &second.pulse.header);
        match follower.cosign(pulse, &by_stranger) {
            Err(LedgerError::Refused { code, .. }) => assert_eq!(code, "cosignature"),
            other => panic!("a stranger's cosignature was kept: {other:?}"),
        }
        let wrong = Cosignature::sign(&w1, &public.to_bytes(), &forged_header);
        match follower.cosign(pulse, &wrong) {
            Err(LedgerError::Refused { code, message, .. }) => {
                assert_eq!(code, "cosignature");
                assert!(message.contains("does not hold"), "{message}");
            }
            other => panic!("a cosignature of another header was kept: {other:?}"),
        }

        // A damaged state file is refused, naming it: a witness never starts afresh silently.
        let state = dir.join("w2.state");
        let mut bytes = std::fs::read(&state).expect("state");
        bytes[20] ^= 1;
        std::fs::write(&state, &bytes).expect("damage");
        let e = Witness::open(w2, public, &state).err().expect("damaged state refused");
        assert!(e.to_string().contains("w2.state"), "{e}");

        // The next commit: witnesses cosign it as they follow, and proofs of it are cosigned.
        memory
            .remember(
                Warehouse::new(WarehouseConfig { seed: 5, ..WarehouseConfig::default() }).take(300).collect(),
            )
            .expect("remember");
        let third = memory.commit(false).expect("commit 3");
        assert_eq!(witness1.follow(&follower, |_| {}).expect("w1 follows on"), 1);
        let time = memory.prove_recorded(2100).expect("time proof");
        assert_eq!(time.attestation.as_ref().map(|a| a.cosignatures.len()), Some(1));
        let quorum1 = Expect::default().cosigned_by(accepted.clone(), 1);
        let v = proof::verify(&time.encode(), &public, &quorum1).expect("1 of 2 cosigned Pulse 3");
        assert_eq!(v.pulse.map(|p| p.0), Some(third.pulse.header.number));
    })
    .await
    .expect("the robot's and the witnesses' side");
}

/// A ledger shown to a witness through `follow` (as `sion ledger witness` runs it) after its
/// chain was rolled back — etcd restored from an older copy, or the ledger started afresh
/// under the same key — is caught: first as a rollback (its latest Pulse below what the
/// witness cosigned), then, once the new chain has grown past it, as a fork (another header
/// for a number the witness cosigned). And a Pulse whose signature is missing from etcd is
/// refused as damage, never signed after the fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_following_a_ledger_catches_a_rollback_and_a_fork() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[41; 32]);
    let (first, second) = ("/sion-ledger/first/", "/sion-ledger/again/");
    let witness_key = SigningKey::from_bytes(&[42; 32]);
    let mut urls = Vec::new();
    for prefix in [first, second] {
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
        let ledger = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
        let addr = free_addr();
        let service = Service::new(ledger).accepting(vec![witness_key.verifying_key().to_bytes()]);
        tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
        urls.push(format!("http://{addr}"));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let dir = tmp.path().to_owned();
    let public = key.verifying_key();
    let (first_url, second_url) = (urls[0].clone(), urls[1].clone());
    let cosigned = tokio::task::spawn_blocking(move || {
        let commit_n = |url: &str, robot: &str, n: usize| {
            let link = RemoteLedger::connect(url).expect("link");
            let mut memory = Memory::options(dir.join(robot))
                .agent(format!("fleet-{robot}/{robot}").as_str())
                .ledger_link(Box::new(link), url)
                .create()
                .expect("create");
            let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(100 * n).collect();
            for chunk in atoms.chunks(100) {
                memory.remember(chunk.to_vec()).expect("remember");
                memory.commit(false).expect("commit");
            }
        };
        // The witness follows the first chain: the genesis, the agents, the log opened, three
        // commits.
        commit_n(&first_url, "robot-a", 3);
        let mut witness = Witness::open(witness_key, public, &dir.join("w.state")).expect("w");
        let first = RemoteLedger::connect(&first_url).expect("link");
        witness.follow(&first, |_| {}).expect("follows the first chain");
        let (last, _) = witness.last().expect("cosigned");
        assert_eq!(last, first.latest().expect("latest").header.number);

        // The same key, a chain started again: its latest Pulse is below what was cosigned.
        let again = RemoteLedger::connect(&second_url).expect("link");
        commit_n(&second_url, "robot-b", 0);
        let behind = again.latest().expect("latest").header.number;
        assert!(behind < last);
        match witness.follow(&again, |_| {}) {
            Err(WitnessError::RolledBack { latest, cosigned }) => {
                assert_eq!((latest, cosigned), (behind, last))
            }
            other => panic!("the rollback was not caught: {other:?}"),
        }
        assert_eq!(witness.last().map(|l| l.0), Some(last), "nothing was cosigned");
        // Grown past it, the new chain shows another header for that number: a fork.
        commit_n(&second_url, "robot-c", 4);
        assert!(again.latest().expect("latest").header.number >= last);
        match witness.follow(&again, |_| {}) {
            Err(WitnessError::Equivocation { number, .. }) => assert_eq!(number, last),
            other => panic!("the fork was not caught: {other:?}"),
        }
        last
    })
    .await
    .expect("the witness's side");

    // A header in etcd whose signature is gone is refused as damage, not signed on reading.
    let mut client = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    client.delete(format!("{first}sig/{:020}", cosigned), None).await.expect("delete the signature");
    let mut ledger = FleetLedger::connect(&[etcd.url()], first, key.clone()).await.expect("connect");
    match ledger.header(cosigned).await {
        Err(e) => assert!(e.to_string().contains("not made by a front-end"), "{e}"),
        Ok(h) => panic!("a header without its signature was signed on reading: {h:?}"),
    }
    assert!(client.get(format!("{first}sig/{:020}", cosigned), None).await.expect("get").kvs().is_empty());
}

/// A writer that opens a second log on a fleet ledger: the opening chains it after the first
/// (the first's leaf now names it as `next`, written in the same etcd transaction), a witness
/// following the ledger checks that two-leaf change and cosigns it, and a Pulse's state shows
/// the chain as it was then (before the opening, the first log has no `next`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_second_log_is_chained_and_witnessed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[51; 32]);
    let prefix = "/sion-ledger/chain/";
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let witness_key = SigningKey::from_bytes(&[52; 32]);
    let ledger = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let addr = free_addr();
    let service = Service::new(ledger).accepting(vec![witness_key.verifying_key().to_bytes()]);
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    let url = format!("http://{addr}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let dir = tmp.path().to_owned();
    let public = key.verifying_key();
    tokio::task::spawn_blocking(move || {
        let open = |name: &str| {
            let link = RemoteLedger::connect(&url).expect("link");
            Memory::options(dir.join(name)).ledger_link(Box::new(link), &url).create().expect("create")
        };
        let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(20).collect();
        let mut first = open("first");
        first.remember(atoms[..10].to_vec()).expect("remember");
        first.commit(false).expect("commit");
        // A stranger's log between the two: chains are per writer, not per ledger.
        let mut other = open("other");
        other.remember(atoms[10..12].to_vec()).expect("remember");
        other.commit(false).expect("commit");
        // The same writer key, a second memory (a robot that starts a new memory).
        std::fs::create_dir_all(dir.join("second")).expect("dir");
        std::fs::copy(dir.join("first/writer.key"), dir.join("second/writer.key")).expect("key");
        let mut second = open("second");
        second.remember(atoms[12..].to_vec()).expect("remember");
        let committed = second.commit(false).expect("commit").pulse.header.number;

        let link = RemoteLedger::connect(&url).expect("link");
        let (a, b) = (first.log_id(), second.log_id());
        let now = link.state_proof(a, committed).expect("state");
        now.verify(&public).expect("verifies");
        let chain = now.log.chain.expect("a chained ledger");
        assert_eq!((chain.prev, chain.next), (None, Some(b)));
        let later = link.state_proof(b, committed).expect("state").log.chain.expect("chained");
        assert_eq!((later.prev, later.next), (Some(a), None));
        assert_eq!(
            link.state_proof(other.log_id(), committed).expect("state").log.chain.map(|c| c.prev),
            Some(None)
        );
        // Before the second was opened (the Pulse before its opening, which came just before
        // its commit), the first had no `next`.
        let before = link.state_proof(a, committed - 2).expect("state before");
        before.verify(&public).expect("verifies");
        assert_eq!(before.log.chain.and_then(|c| c.next), None);

        // A witness follows from the genesis and cosigns every Pulse, the chained opening too.
        let mut witness = Witness::open(witness_key, public, &dir.join("w.state")).expect("w");
        witness.follow(&link, |_| {}).expect("the witness checks the chained opening");
        assert_eq!(witness.last().map(|l| l.0), Some(link.latest().expect("latest").header.number));
    })
    .await
    .expect("the robot's and the witness's side");
}
