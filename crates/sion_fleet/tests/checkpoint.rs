//! The ledger's history as a C2SP log (issue 35, requirement 5; docs/FLEET-LEDGER.md,
//! "Checkpoints"), on a real etcd: the checkpoints a front-end signs and serves are read by
//! independent implementations installed from crates.io — Cloudflare's `signed_note` (the C2SP
//! signed-note verifier) and `tlog_tiles` (C2SP tlog-checkpoint parsing, RFC 6962 inclusion
//! and consistency checks) — and agree with a tree built here over the signed headers; a
//! second front-end extends the same history; tiles or a checkpoint rewritten in etcd by
//! someone without the key are refused before anything is signed on them.

mod common;
use common::commit;
use common::free_addr;

use ed25519_dalek::SigningKey;
use sion_fleet::client::RemoteLedger;
use sion_fleet::service::Service;
use sion_fleet::{FleetError, FleetLedger};
use sion_store::ledger::link::LedgerLink as _;
use sion_verify::ledger::{Checkpoint, SignedNote, ledger_vkey, origin_of, sign_checkpoint};
use sion_verify::merkle::{MemoryTree, Sha256};

/// What the independent implementations say of a checkpoint note under the ledger's vkey: its
/// origin, size and root.
fn independent_read(note: &[u8], vkey: &str) -> (String, u64, [u8; 32]) {
    let verifier = signed_note::StandardVerifier::new(vkey).expect("signed_note takes our vkey");
    let list = signed_note::VerifierList::new(vec![Box::new(verifier)]);
    let parsed = signed_note::Note::from_bytes(note).expect("signed_note parses our note");
    let (verified, _) = parsed.verify(&list).expect("signed_note verifies our signature");
    assert_eq!(verified.len(), 1);
    let cp = tlog_tiles::Checkpoint::from_bytes(parsed.text()).expect("tlog_tiles parses our checkpoint");
    (cp.origin().to_owned(), cp.size(), cp.hash().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_c2sp_logs_that_independent_code_checks() {
    let prefix = "/sion-ledger/checkpoint/";
    let (_dir, etcd, key, mut a) = common::ledger(prefix, 61).await;
    let public = key.verifying_key();
    let (robots, logs): (Vec<SigningKey>, Vec<_>) = common::robots(&mut a, 70, 6).await.into_iter().unzip();

    let addr = free_addr();
    let service =
        Service::new(FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("serve"))
            .checkpointing_every(std::time::Duration::from_millis(200));
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let url = format!("http://{addr}");
    let vkey = ledger_vkey(&public.to_bytes());

    let (first, commits) = {
        let url = url.clone();
        let robots = robots.clone();
        let logs = logs.clone();
        let vkey = vkey.clone();
        tokio::task::spawn_blocking(move || {
            let mut link = RemoteLedger::connect(&url).expect("link");
            let (note, first) = link.checkpoint().expect("the first checkpoint");
            let latest = link.latest().expect("latest").header.number;
            assert_eq!(first.size, latest + 1, "the checkpoint holds every Pulse, the genesis its leaf 0");
            // Independent code reads what we signed, and it is the RFC 6962 tree over the headers.
            let headers: Vec<_> = (0..first.size).map(|n| link.header(n).expect("header").header).collect();
            let tree = MemoryTree::<Sha256>::from_leaves(headers.iter().map(|h| h.encode()));
            let (origin, size, root) = independent_read(note.encode().as_bytes(), &vkey);
            assert_eq!((origin, size, root), (origin_of(&public.to_bytes()), first.size, tree.root()));
            // More Pulses, then (past the cadence) a newer checkpoint that extends the first.
            for (i, (r, log)) in robots.iter().zip(&logs).enumerate() {
                link.submit(commit(r, 1, *log, 0, 0, 5 + i as u64)).expect("commit");
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
            (first, link.latest().expect("latest").header.number)
        })
        .await
        .expect("first")
    };
    let (note, second) = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let link = RemoteLedger::connect(&url).expect("link");
            let (note, cp) = link.checkpoint().expect("the second checkpoint");
            let proof = link.history_consistency(first.size, cp.size).expect("consistency");
            cp.extends(&first, &proof).expect("our check of the consistency proof");
            let tproof: Vec<tlog_tiles::Hash> = proof.iter().map(|h| tlog_tiles::Hash(*h)).collect();
            tlog_tiles::check_tree(
                &tproof,
                cp.size,
                tlog_tiles::Hash(cp.root),
                first.size,
                tlog_tiles::Hash(first.root),
            )
            .expect("tlog_tiles checks the consistency proof");
            // Every Pulse's inclusion in the newer checkpoint, checked by both.
            for pulse in 0..cp.size {
                let header = link.header(pulse).expect("header").header;
                let path = link.history_inclusion(pulse, cp.size).expect("inclusion");
                cp.includes(&header, &path).expect("our check of the inclusion proof");
                let tpath: Vec<tlog_tiles::Hash> = path.iter().map(|h| tlog_tiles::Hash(*h)).collect();
                tlog_tiles::check_record(
                    &tpath,
                    cp.size,
                    tlog_tiles::Hash(cp.root),
                    pulse,
                    tlog_tiles::record_hash(&header.encode()),
                )
                .expect("tlog_tiles checks the inclusion proof");
            }
            // Proofs past the checkpoint are refused, saying why.
            let past = link.history_inclusion(0, cp.size + 5).expect_err("past the checkpoint");
            assert!(past.to_string().contains("latest checkpoint"), "{past}");
            (note, cp)
        })
        .await
        .expect("second")
    };
    assert_eq!(second.size, commits + 1, "the cadence passed: every Pulse is in the newer checkpoint");
    assert_eq!(independent_read(note.encode().as_bytes(), &vkey).1, second.size);

    // A second front-end (none held) reads the checkpoint, checks its tiles and extends it.
    let mut b = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("b");
    let more = b.submit(commit(&robots[0], 2, logs[0], 1, 5, 9)).await.expect("another commit").header.number;
    let (_, third) = b.checkpoint(u64::MAX).await.expect("b extends the history");
    assert_eq!(third.size, more + 1);
    let proof = b.history_consistency(second.size, third.size).await.expect("consistency");
    third.extends(&second, &proof).expect("b's checkpoint extends the service's");

    // Someone who can write etcd but holds no key: a rewritten open tile, then a checkpoint
    // signed by another key. A front-end refuses both before it signs anything on them.
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("raw etcd");
    let tile = format!("{prefix}hist/0/{:020}", 0);
    let kept = raw.get(tile.clone(), None).await.expect("get").kvs()[0].value().to_vec();
    let mut bad = kept.clone();
    bad[5] ^= 1;
    raw.put(tile.clone(), bad, None).await.expect("put");
    let mut c = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("c");
    match c.checkpoint(u64::MAX).await {
        Err(FleetError::Damaged { key, problem }) => assert!(key.contains("hist"), "{key}: {problem}"),
        other => panic!("a rewritten tile was not refused: {:?}", other.map(|(_, cp)| cp.size)),
    }
    raw.put(tile, kept, None).await.expect("put back");
    let stranger = SigningKey::from_bytes(&[99; 32]);
    let forged = sign_checkpoint(
        &stranger,
        &Checkpoint { origin: origin_of(&public.to_bytes()), size: 1, root: [0; 32], extensions: vec![] },
    );
    raw.put(format!("{prefix}checkpoint"), forged.encode().into_bytes(), None).await.expect("put");
    let mut d = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("d");
    match d.checkpoint(u64::MAX).await {
        Err(FleetError::Damaged { key, problem }) => {
            assert!(key.ends_with("checkpoint") && problem.contains("no valid signature"), "{key}: {problem}")
        }
        other => panic!("a checkpoint by another key was not refused: {:?}", other.map(|(_, cp)| cp.size)),
    }
    // Its own note, parsed by us, says why too.
    let refused = SignedNote::parse(forged.encode().as_bytes()).expect("parses").verify_checkpoint(&public);
    assert!(refused.is_err());
}
