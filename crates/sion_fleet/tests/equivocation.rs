//! Whoever reads an etcd member's data directory must not find the ledger's key signing two
//! headers for one Pulse number (docs/FLEET-LEDGER.md, "Agreeing on the next Pulse"). etcd
//! logs a transaction's request whether its compare holds or not, so a swap that loses its
//! number leaves everything it carried in the members' write-ahead logs. Run as attacks: two
//! front-ends racing, read back from the member's files; a front-end that dies between a
//! Pulse's entry and its signatures; a party with etcd write access putting an entry there to
//! have it signed, deleting one the moment it lands while another front-end's swap is in
//! flight, or putting the claim again (format 6: `P/claim`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer as _, SigningKey};
use sion_fleet::local::Etcd;
use sion_fleet::{FleetError, FleetLedger, Format};
use sion_store::ledger::{LogId, SignedHeader};

use common::proxy::{Intercept, Rule, proxy};

/// Every distinct value etcd's write-ahead log holds put under `{prefix}{what}/N`, by `N`.
fn signatures_in_wal(data: &Path, prefix: &str, what: &str) -> Found {
    common::signatures_in_wal(data, prefix, what)
        .into_iter()
        .map(|(n, v)| (n, v.into_iter().collect()))
        .collect()
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
        FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Entries).await.expect("init")
    } else {
        FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init")
    };
    let b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulse_left_without_its_signatures_is_completed_and_a_forged_one_is_not_signed() {
    unsealed(6).await;
}

/// The same on format 5, where an entry put over the waiting one with the key's proposal is
/// refused by the replay alone (on format 6 the claim refuses it first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_5_a_pulse_left_without_its_signatures_is_completed_and_a_forged_one_is_not_signed() {
    unsealed(5).await;
}

async fn unsealed(format: u8) {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/unsealed/";
    let key = SigningKey::from_bytes(&[83; 32]);
    // Once armed, every request naming a signature is cut: a front-end that dies, to etcd,
    // after its Pulse's entry and before its signatures.
    let cut = Arc::new(Intercept::new(Rule::Cut, format!("{prefix}sig/")));
    let url = proxy(etcd.url(), cut.clone()).await;
    let mut a = init(format, &url, prefix, &key).await;
    let mut b = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let robots = common::robots(&mut a, 100, 2).await;
    let ((ra, la), (rb, lb)) = (&robots[0], &robots[1]);
    a.submit(common::commit(ra, 1, *la, 0, 0, 10)).await.expect("a first commit");

    // Every request of `a` naming a signature is cut: its next Pulse's entry lands, its
    // signatures never do, and it acknowledges nothing.
    cut.arm();
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

    // Format 5: a party with etcd write access puts a proposal of its own beside the entry: no
    // front-end signs it, and says which keys to look at. (On format 6 the claim is the key's
    // word for the entry: a proposal is not read, and one forged stops nothing — below.)
    let proposal = get(prop_key.clone()).await.expect("a proposal");
    if format == 5 {
        raw.put(prop_key.as_str(), vec![7u8; 64], None).await.expect("forge the proposal");
        match b.submit(common::commit(rb, 1, *lb, 0, 0, 10)).await {
            Err(FleetError::StateMismatch { keys, problem, .. }) => {
                assert_eq!(keys, vec![entry_key.clone(), prop_key.clone()], "{problem}");
                assert!(problem.contains("no front-end proposed its entry"), "{problem}");
            }
            other => panic!("an entry without a front-end's proposal: {other:?}"),
        }
        assert!(get(sig_key.clone()).await.is_none(), "a forged proposal's entry was signed");
    }

    // An entry the key did propose, but whose header is not what its transactions make (its
    // cells root's last byte changed), put over the waiting one: on format 6 the claim names
    // the waiting one, on format 5 the replay refuses it; nothing is signed.
    let honest = get(entry_key.clone()).await.expect("the entry");
    let mut forged = honest.clone();
    *forged.last_mut().expect("a header") ^= 1;
    let mut message = b"sion-fleet-proposal-v1".to_vec();
    message.extend_from_slice(&pending.to_le_bytes());
    message.extend_from_slice(blake3::hash(&forged).as_bytes());
    raw.put(entry_key.as_str(), forged, None).await.expect("forge the entry");
    raw.put(prop_key.as_str(), key.sign(&message).to_bytes().to_vec(), None).await.expect("its proposal");
    let refusal = if format == 6 {
        "P/claim does not show its entry as the one that took the number"
    } else {
        "does not sign the state its transactions make"
    };
    match b.submit(common::commit(rb, 1, *lb, 0, 0, 10)).await {
        Err(FleetError::StateMismatch { problem, .. }) => assert!(problem.contains(refusal), "{problem}"),
        other => panic!("a proposed entry whose header its transactions do not make: {other:?}"),
    }
    assert!(get(sig_key.clone()).await.is_none(), "a header its transactions do not make was signed");
    raw.put(entry_key.as_str(), honest, None).await.expect("put the entry back");

    // The front-end's own proposal put back (on format 6, a forged one left: not read): the
    // next commit, through another front-end, completes the Pulse left waiting (the first
    // robot's commit in it), then is the next.
    let proposal = if format == 6 { vec![7u8; 64] } else { proposal };
    raw.put(prop_key.as_str(), proposal, None).await.expect("put the proposal back");
    let receipt = b.submit(common::commit(rb, 1, *lb, 0, 0, 10)).await.expect("completed, then committed");
    assert_eq!(receipt.header.number, pending + 1);
    let completed = b.header(pending).await.expect("the completed Pulse, signed");
    assert_eq!(get(sig_key.clone()).await, Some(completed.signature.to_vec()));
    let on = b.log(*la).await.expect("log").expect("exists");
    assert_eq!((on.commits, on.head.size), (2, 20), "the waiting Pulse's commit is not in the state");

    // The cut front-end goes on from there once it reaches etcd again.
    cut.disarm();
    let next = a.submit(common::commit(ra, 3, *la, 2, 20, 30)).await.expect("the cut front-end again");
    assert_eq!(next.header.number, pending + 2);
    let sigs = signatures_in_wal(&dir.path().join("data"), prefix, "sig");
    assert!(sigs.contains_key(&pending), "the completed Pulse's signature is not in etcd's log");
    assert!(sigs.values().all(|s| s.len() == 1), "two signatures for a number: {sigs:?}");
}

/// A ledger of `format` (5 or 6) through `url`.
async fn init(format: u8, url: &str, prefix: &str, key: &SigningKey) -> FleetLedger {
    match format {
        5 => FleetLedger::init_format(&[url], prefix, key.clone(), Format::Proposed).await.expect("init"),
        _ => FleetLedger::init(&[url], prefix, key.clone()).await.expect("init"),
    }
}

/// Wait until `done` holds, for at most 10 s.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A review's attack on format 5: front-end A's entry for Pulse N lands and its seal is on its
/// way (held back here, as a slow network would); a party with etcd write access deletes the
/// entry at once, so front-end B's swap for N, in flight (held here until then), finds no
/// entry there. On format 5 that swap lands, B seals it, and A's seal, delivered after, is
/// refused but logged: the member's log holds two header signatures for N. On format 6 A's
/// swap moved `P/claim` on, which no delete undoes: B's swap fails, B then finds the claim
/// naming a Pulse whose entry is gone and builds nothing, and the log holds one.
/// B's answer, and the distinct header signatures and proposals for N in the member's log.
async fn deleted_the_moment_it_landed(format: u8) -> (Result<SignedHeader, FleetError>, usize, usize) {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/deleted/";
    let key = SigningKey::from_bytes(&[85; 32]);
    let a_hold = Arc::new(Intercept::new(Rule::Hold, format!("{prefix}sig/")));
    let b_hold = Arc::new(Intercept::new(Rule::Hold, format!("{prefix}prop/")));
    let a_url = proxy(etcd.url(), a_hold.clone()).await;
    let b_url = proxy(etcd.url(), b_hold.clone()).await;
    let mut a = init(format, &a_url, prefix, &key).await;
    let mut b = common::connect(&[b_url.as_str()], prefix, key.clone()).await.expect("connect");
    let robots = common::robots(&mut a, 110, 2).await;
    let ((ra, la), (rb, lb)) = (robots[0].clone(), robots[1].clone());
    // B's first, then A's: A holds the head, B reads it before its next swap.
    b.submit(common::commit(&rb, 1, lb, 0, 0, 10)).await.expect("b's first");
    let n = a.submit(common::commit(&ra, 1, la, 0, 0, 10)).await.expect("a's first").header.number + 1;
    let entry_key = format!("{prefix}pulse/{n:020}");

    // B's swap for N is held on its way; A's lands, and A's seal is held on its way.
    b_hold.arm();
    let b_task = tokio::spawn(async move { b.submit(common::commit(&rb, 2, lb, 1, 10, 20)).await });
    until("b's swap was not held", || !b_hold.is_armed()).await;
    a_hold.arm();
    let a_task = tokio::spawn(async move { a.submit(common::commit(&ra, 2, la, 1, 10, 20)).await });
    until("a's seal was not held", || !a_hold.is_armed()).await;
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    assert!(
        !raw.get(entry_key.as_str(), None).await.expect("get").kvs().is_empty(),
        "a's entry did not land"
    );

    // The attack: the entry deleted; B's swap delivered.
    raw.delete(entry_key.as_str(), None).await.expect("delete the entry");
    b_hold.release.notify_one();
    let b_answer = b_task.await.expect("b's task");
    a_hold.release.notify_one();
    let _ = a_task.await.expect("a's task");
    let data = dir.path().join("data");
    let (sigs, props) = (signatures_in_wal(&data, prefix, "sig"), signatures_in_wal(&data, prefix, "prop"));
    (b_answer, sigs.get(&n).map_or(0, BTreeSet::len), props.get(&n).map_or(0, BTreeSet::len))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_5_an_entry_deleted_the_moment_it_landed_gets_a_second_header_signed() {
    let (b_answer, signed, _) = deleted_the_moment_it_landed(5).await;
    assert!(b_answer.is_ok(), "b's swap did not land after the delete: {b_answer:?}");
    assert_eq!(signed, 2, "the attack on format 5 no longer has two headers signed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_deleted_the_moment_it_landed_gets_no_second_header_signed() {
    let (b_answer, signed, proposed) = deleted_the_moment_it_landed(6).await;
    assert_eq!(proposed, 2, "b's swap never reached etcd");
    match &b_answer {
        Err(FleetError::StateMismatch { keys, problem, .. }) => {
            assert_eq!(keys, &["/sion-ledger/deleted/claim".to_owned()], "{problem}");
            assert!(problem.contains("deleted by no front-end before its seal"), "{problem}");
        }
        other => panic!("b built on a number a seal was on its way for: {other:?}"),
    }
    assert_eq!(signed, 1, "header signatures for the number in the member's log");
}

/// A claim put again, even its very bytes, is not where it was made for: every front-end then
/// refuses to build, naming `P/claim` (a writer stopping the ledger, not forking it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_put_again_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/claim-again/";
    let key = SigningKey::from_bytes(&[87; 32]);
    let mut a = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let mut b = FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let robots = common::robots(&mut a, 120, 1).await;
    let (r, l) = &robots[0];
    a.submit(common::commit(r, 1, *l, 0, 0, 10)).await.expect("a commit");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let claim_key = format!("{prefix}claim");
    let got = raw.get(claim_key.as_str(), None).await.expect("get");
    let value = got.kvs().first().expect("a claim").value().to_vec();
    assert_eq!(value.len(), 120, "a claim's bytes");
    raw.put(claim_key.as_str(), value, None).await.expect("put the claim again");
    match b.submit(common::commit(r, 2, *l, 1, 10, 20)).await {
        Err(FleetError::StateMismatch { keys, problem, .. }) => {
            assert_eq!(keys, vec![claim_key.clone()], "{problem}");
            assert!(problem.contains("put again by no front-end"), "{problem}");
        }
        other => panic!("built on a claim put again: {other:?}"),
    }
}

/// `P/format` is not signed: a writer who set a format 6 ledger's to `5` would have every
/// front-end started after it forgo the claim (and on `4`, sign before its swap). A front-end
/// serves a ledger older than format 6 only when its operator names that format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_put_back_older_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/downgraded/";
    let key = SigningKey::from_bytes(&[89; 32]);
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    raw.put(format!("{prefix}format"), "5", None).await.expect("put the format back");
    match FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await {
        Err(FleetError::OlderFormat { found: 5, oldest: 6, .. }) => {}
        Err(other) => panic!("refused otherwise: {other}"),
        Ok(_) => panic!("a ledger said to be of format 5 was served without its operator saying so"),
    }
}

/// `init` whose second step (the genesis with its claim) never reached etcd leaves only an
/// empty `P/claim`; `init` again goes on from it, and the ledger then takes commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_cut_between_its_two_steps_is_finished_by_init_again() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await.expect("etcd");
    let prefix = "/sion-ledger/half-made/";
    let key = SigningKey::from_bytes(&[91; 32]);
    // The first request naming P/claim (init's first step, `P/claim` made empty) goes through;
    // the second (the genesis and its claim) is cut.
    let cut = Intercept::new(Rule::Cut, format!("{prefix}claim"));
    cut.passes.store(1, Ordering::SeqCst);
    cut.arm();
    let url = proxy(etcd.url(), Arc::new(cut)).await;
    assert!(
        FleetLedger::init(&[url.as_str()], prefix, key.clone()).await.is_err(),
        "the claim's step was not cut"
    );
    let mut raw = etcd_client::Client::connect([etcd.url()], None).await.expect("etcd client");
    let claim = raw.get(format!("{prefix}claim"), None).await.expect("get");
    let kv = claim.kvs().first().expect("the first step made P/claim");
    assert!(kv.value().is_empty() && kv.version() == 1, "the first step's P/claim: {kv:?}");
    match FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await {
        Err(FleetError::Missing(_)) => {}
        other => panic!("a ledger without its genesis was connected to: {:?}", other.map(|_| ())),
    }
    let mut ledger = FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init again");
    let robots = common::robots(&mut ledger, 130, 1).await;
    let (r, l) = &robots[0];
    ledger.submit(common::commit(r, 1, *l, 0, 0, 10)).await.expect("a commit after init finished");
}
