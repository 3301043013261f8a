//! The fleet ledger service end to end: two front-ends (`sion_fleet::service`) on one etcd,
//! a memory whose log is opened through one and reopened through the other, its proofs
//! verified under the ledger's key by a reader that fetches the headers it needs from the
//! service; refusals travel with their codes.

mod common;
use common::free_addr;

use ed25519_dalek::SigningKey;
use sion_fleet::FleetLedger;
use sion_fleet::client::RemoteLedger;
use sion_fleet::local::Etcd;
use sion_sim::{Warehouse, WarehouseConfig};
use sion_store::index::IndexConfig;
use sion_store::ledger::link::LedgerLink;
use sion_store::ledger::{LedgerError, SignedTx, Tx, account_of};
use sion_store::memory::Memory;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_on_the_fleet_ledger_through_two_front_ends() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[11; 32]);
    let prefix = "/sion-ledger/service/";
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let (a, b) = (free_addr(), free_addr());
    for addr in [a, b] {
        let ledger = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
        tokio::spawn(sion_fleet::service::serve(ledger, addr, std::future::pending()));
    }
    let (url_a, url_b) = (format!("http://{a}"), format!("http://{b}"));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    // The memory's side is synchronous: run it on a blocking thread, as the node and the CLI do.
    let dir = tmp.path().join("robot");
    let public = key.verifying_key();
    tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&url_a).expect("link to front-end a");
        assert_eq!(link.public_key(), public);
        let config = IndexConfig::default();
        let mut memory = Memory::options(&dir)
            .index(config.clone())
            .agent("fleet/robot-1")
            .ledger_link(Box::new(link), &url_a)
            .create()
            .expect("create");
        let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(3000).collect();
        memory.remember(atoms[..1000].to_vec()).expect("remember");
        let first = memory.commit(false).expect("commit 1");
        memory.remember(atoms[1000..].to_vec()).expect("remember");
        let second = memory.commit(false).expect("commit 2");
        assert_eq!((first.head.size, second.head.size), (1000, 3000));
        assert!(!dir.join("ledger").exists(), "the robot holds a ledger of its own");
        drop(memory);

        // Reopened through the other front-end: the same ledger (the same pinned key).
        let connect =
            |url: &str, _: &ed25519_dalek::VerifyingKey| -> Result<Box<dyn LedgerLink>, LedgerError> {
                assert_eq!(url, url_a, "memory.json names the URL it was opened with");
                Ok(Box::new(RemoteLedger::connect(&url_b)?))
            };
        let mut memory =
            Memory::options(&dir).index(config.clone()).connect(&connect).open().expect("reopen via b");
        assert_eq!(memory.committed().head.size, 3000);
        let recorded = memory.prove_recorded(1500).expect("time proof");
        let v = recorded.verify(Some(&public)).expect("verifies under the fleet ledger's key");
        let pulse = v.pulse.expect("attested").0;
        // A reader fetches that Pulse's header from the service itself and compares.
        let reader = RemoteLedger::connect(&url_b).expect("reader's link");
        let fetched = reader.header(pulse).expect("header");
        assert_eq!(Some(fetched), recorded.attestation.as_ref().map(|a| a.state.header));
        assert_eq!(pulse, second.pulse.header.number, "atom 1500 was recorded by the second commit");

        // Backdating: a commit built on the first version, after the second, is refused as stale
        // with its code; a replayed nonce likewise.
        let writer = memory.writer().clone();
        let nonce = memory.ledger().nonce(&account_of(&writer)).expect("nonce");
        let log = memory.log_id();
        let head = memory.committed().head;
        let stale = SignedTx::sign(
            &writer,
            nonce,
            Tx::CommitMemory { log, version: 1, head, proof: vec![], seal: false, cells: Vec::new() },
        );
        match memory.submit(stale) {
            Err(e) => assert!(e.to_string().contains("(stale)"), "{e}"),
            Ok(_) => panic!("a stale commit was accepted"),
        }
        let replay = SignedTx::sign(
            &writer,
            0,
            Tx::CommitMemory { log, version: 2, head, proof: vec![], seal: false, cells: Vec::new() },
        );
        match memory.submit(replay) {
            Err(e) => assert!(e.to_string().contains("(nonce)"), "{e}"),
            Ok(_) => panic!("a replayed nonce was accepted"),
        }
        // A third commit through front-end b still goes on from the head.
        let more: Vec<_> =
            Warehouse::new(WarehouseConfig { seed: 9, ..WarehouseConfig::default() }).take(500).collect();
        memory.remember(more).expect("remember");
        let third = memory.commit(false).expect("commit 3");
        assert!(third.head.size > 3000);
    })
    .await
    .expect("the memory's side");
}
