//! The embedded ledger: honest commits pass, forged, stale, forked and contained ones are
//! refused with a reason, state survives restarts, and Pulses prove transaction time.

use ed25519_dalek::SigningKey;
use sion_ledger::{
    Account, AgentStatus, Head, Ledger, LedgerBoot, LedgerError, LogId, SignedTx, Tx, account_of, empty_head,
};
use sion_verify::merkle::{Blake3, MemoryTree, consistency_path};

fn key(n: u8) -> SigningKey {
    SigningKey::from_bytes(&[n; 32])
}

fn tree(n: u64) -> MemoryTree<Blake3> {
    MemoryTree::from_leaves((0..n).map(|i| format!("atom {i}")))
}

fn head(n: u64) -> Head {
    Head { size: n, root: tree(n).root(), index: [n as u8; 32], manifest: [0; 32] }
}

struct Writer {
    key: SigningKey,
}

impl Writer {
    fn send(&self, ledger: &mut Ledger, tx: Tx) -> Result<u64, LedgerError> {
        let nonce = ledger.nonce(&account_of(&self.key));
        ledger.submit(SignedTx::sign(&self.key, nonce, tx)).map(|h| h.header.number)
    }

    fn commit(&self, ledger: &mut Ledger, log: LogId, to: u64, seal: bool) -> Result<u64, LedgerError> {
        self.commit_cells(ledger, log, to, seal, Vec::new())
    }

    fn commit_cells(
        &self,
        ledger: &mut Ledger,
        log: LogId,
        to: u64,
        seal: bool,
        cells: Vec<u128>,
    ) -> Result<u64, LedgerError> {
        let current = ledger.log(log).expect("log").clone();
        let from = current.head.size;
        let proof = if from == 0 || from == to {
            vec![]
        } else {
            consistency_path::<Blake3, _>(&tree(to), from, to).expect("proof")
        };
        self.send(
            ledger,
            Tx::CommitMemory { log, version: current.commits, head: head(to), proof, seal, cells },
        )
    }
}

fn open_log(ledger: &mut Ledger, w: &Writer, agent: Option<&str>) -> LogId {
    w.send(ledger, Tx::OpenMemory { agent: agent.map(str::to_owned), policy: [9; 32] }).expect("open");
    LogId(ledger.logs().len() as u64 - 1)
}

#[test]
fn honest_commits_move_the_head_and_get_signed_pulses() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create(dir.path()).expect("create");
    let w = Writer { key: key(1) };
    let log = open_log(&mut ledger, &w, None);
    assert_eq!(ledger.log(log).expect("log").head, empty_head());
    let p1 = w.commit(&mut ledger, log, 5, false).expect("first commit");
    let p2 = w.commit(&mut ledger, log, 13, false).expect("second");
    let p3 = w.commit(&mut ledger, log, 13, false).expect("same size, same root");
    assert_eq!((p1, p2, p3), (2, 3, 4));
    let l = ledger.log(log).expect("log");
    assert_eq!((l.head, l.commits, l.committed_at, l.sealed), (head(13), 3, 4, false));
    for n in 0..=4 {
        ledger.header(n).expect("header").verify(&ledger.public_key()).expect("signed");
    }
    let proof = ledger.state_proof(log, 3).expect("state proof");
    proof.verify(&ledger.public_key()).expect("verifies");
    assert_eq!(proof.log.head.size, 13);
}

#[test]
fn bad_commits_are_refused_with_their_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create(dir.path()).expect("create");
    let w = Writer { key: key(1) };
    let log = open_log(&mut ledger, &w, None);
    w.commit(&mut ledger, log, 8, false).expect("commit");
    let current = |l: &Ledger| l.log(log).expect("log").commits;

    // Stale: built on version 0, the log is at version 1.
    let proof = consistency_path::<Blake3, _>(&tree(10), 8, 10).expect("proof");
    let stale = Tx::CommitMemory {
        log,
        version: 0,
        head: head(10),
        proof: proof.clone(),
        seal: false,
        cells: Vec::new(),
    };
    assert!(matches!(w.send(&mut ledger, stale), Err(LedgerError::Stale { version: 0, current: 1, .. })));

    // Forked: a new head over different atoms.
    let forked_tree = MemoryTree::<Blake3>::from_leaves((0..10).map(|i| format!("other {i}")));
    let forked = Head { root: forked_tree.root(), ..head(10) };
    let fork = Tx::CommitMemory {
        log,
        version: current(&ledger),
        head: forked,
        proof: proof.clone(),
        seal: false,
        cells: Vec::new(),
    };
    let err = w.send(&mut ledger, fork).expect_err("fork");
    assert!(matches!(err, LedgerError::Fork { from: 8, to: 10, .. }), "{err}");
    assert!(err.to_string().starts_with("fork:"));

    // Forged: another key signs as if it were the writer; or a stranger commits.
    let mut forged = SignedTx::sign(
        &key(2),
        0,
        Tx::CommitMemory {
            log,
            version: 1,
            head: head(10),
            proof: proof.clone(),
            seal: false,
            cells: Vec::new(),
        },
    );
    forged.sender = account_of(&w.key);
    assert!(matches!(ledger.submit(forged), Err(LedgerError::BadSignature)));
    let stranger = Writer { key: key(3) };
    let tx = Tx::CommitMemory {
        log,
        version: 1,
        head: head(10),
        proof: proof.clone(),
        seal: false,
        cells: Vec::new(),
    };
    assert!(matches!(stranger.send(&mut ledger, tx), Err(LedgerError::NotWriter { .. })));

    // Shrinking, and a same-size commit that changes the root.
    let tx =
        Tx::CommitMemory { log, version: 1, head: head(4), proof: vec![], seal: false, cells: Vec::new() };
    assert!(matches!(w.send(&mut ledger, tx), Err(LedgerError::Shrinks { from: 8, to: 4, .. })));
    let moved = Head { root: [7; 32], ..head(8) };
    let tx = Tx::CommitMemory { log, version: 1, head: moved, proof: vec![], seal: false, cells: Vec::new() };
    assert!(matches!(w.send(&mut ledger, tx), Err(LedgerError::RootChanged { size: 8, .. })));

    // A replayed transaction: same nonce twice.
    let nonce = ledger.nonce(&account_of(&w.key));
    let tx = SignedTx::sign(
        &w.key,
        nonce,
        Tx::CommitMemory { log, version: 1, head: head(10), proof, seal: false, cells: Vec::new() },
    );
    ledger.submit(tx.clone()).expect("honest");
    assert!(matches!(ledger.submit(tx), Err(LedgerError::Nonce { .. })));

    // Sealed logs cannot grow.
    w.commit(&mut ledger, log, 12, true).expect("seal");
    assert!(matches!(w.commit(&mut ledger, log, 14, false), Err(LedgerError::Sealed(_))));
    assert_eq!(ledger.log(log).expect("log").head, head(12));
}

#[test]
fn a_suspended_agent_or_parent_stops_its_logs_growing() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create(dir.path()).expect("create");
    let fleet = Writer { key: key(1) };
    let robot = Writer { key: key(2) };
    fleet
        .send(&mut ledger, Tx::RegisterAgent { name: "fleet".into(), controller: account_of(&fleet.key) })
        .expect("fleet");
    let tx = Tx::RegisterAgent { name: "fleet/robot-7".into(), controller: account_of(&robot.key) };
    assert!(matches!(robot.send(&mut ledger, tx.clone()), Err(LedgerError::NotController { .. })));
    fleet.send(&mut ledger, tx).expect("robot under fleet");
    // Only the agent itself opens its memory.
    let open = Tx::OpenMemory { agent: Some("fleet/robot-7".into()), policy: [0; 32] };
    assert!(matches!(fleet.send(&mut ledger, open), Err(LedgerError::NotController { .. })));
    let log = open_log(&mut ledger, &robot, Some("fleet/robot-7"));
    robot.commit(&mut ledger, log, 3, false).expect("live");

    // The parent's controller suspends the parent: the child's log stops growing.
    fleet
        .send(&mut ledger, Tx::SetAgentStatus { name: "fleet".into(), status: AgentStatus::Suspended })
        .expect("suspend");
    let err = robot.commit(&mut ledger, log, 6, false).expect_err("contained");
    assert!(
        matches!(&err, LedgerError::AgentNotLive { blocked_by, status: AgentStatus::Suspended, .. } if blocked_by == "fleet"),
        "{err}"
    );
    // The child cannot lift its parent's suspension; the operator can.
    let lift = Tx::SetAgentStatus { name: "fleet".into(), status: AgentStatus::Live };
    assert!(matches!(robot.send(&mut ledger, lift.clone()), Err(LedgerError::NotController { .. })));
    ledger.submit(ledger.operator_tx(lift)).expect("operator reinstates");
    robot.commit(&mut ledger, log, 6, false).expect("grows again");

    // Revocation of the agent itself is final.
    fleet
        .send(&mut ledger, Tx::SetAgentStatus { name: "fleet/robot-7".into(), status: AgentStatus::Revoked })
        .expect("revoke");
    assert!(matches!(robot.commit(&mut ledger, log, 9, false), Err(LedgerError::AgentNotLive { .. })));
    let back = Tx::SetAgentStatus { name: "fleet/robot-7".into(), status: AgentStatus::Live };
    assert!(ledger.submit(ledger.operator_tx(back)).is_err());
}

/// Agent names are first come, first served: a squatter registers `warehouse` before its
/// rightful owner. The operator gives it back (`ReassignAgent`); the squatter's log under it
/// takes no more atoms, the owner opens and grows its own; nobody else may give an agent away,
/// nor a revoked one be given. The transaction reads back as written, and a reopened ledger
/// replays it.
#[test]
fn the_operator_gives_a_squatted_agent_name_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create(dir.path()).expect("create");
    let (squatter, owner) = (Writer { key: key(5) }, Writer { key: key(6) });
    squatter
        .send(
            &mut ledger,
            Tx::RegisterAgent { name: "warehouse".into(), controller: account_of(&squatter.key) },
        )
        .expect("first come");
    let squatted = open_log(&mut ledger, &squatter, Some("warehouse"));
    squatter.commit(&mut ledger, squatted, 3, false).expect("grows");
    // Not the operator: refused, whoever asks.
    let give = Tx::ReassignAgent { name: "warehouse".into(), controller: account_of(&owner.key) };
    for w in [&owner, &squatter] {
        assert!(matches!(w.send(&mut ledger, give.clone()), Err(LedgerError::NotController { .. })));
    }
    let stx = ledger.operator_tx(give);
    assert_eq!(SignedTx::decode(&stx.encode()).expect("decodes"), stx, "kind 4 reads back");
    ledger.submit(stx).expect("the operator gives it back");
    assert_eq!(ledger.agent("warehouse").expect("agent").controller, account_of(&owner.key));
    let err = squatter.commit(&mut ledger, squatted, 6, false).expect_err("no longer its controller");
    assert!(matches!(err, LedgerError::NotController { .. }), "{err}");
    // At the same size it may still commit (nothing new enters the memory under the name).
    squatter.commit(&mut ledger, squatted, 3, false).expect("same size");
    let mine = open_log(&mut ledger, &owner, Some("warehouse"));
    owner.commit(&mut ledger, mine, 4, false).expect("the owner's log grows");
    // A revoked agent is not given to anyone.
    ledger
        .submit(
            ledger.operator_tx(Tx::SetAgentStatus { name: "warehouse".into(), status: AgentStatus::Revoked }),
        )
        .expect("revoke");
    let again = Tx::ReassignAgent { name: "warehouse".into(), controller: account_of(&squatter.key) };
    assert!(matches!(ledger.submit(ledger.operator_tx(again)), Err(LedgerError::AgentNotLive { .. })));
    let latest = ledger.latest().header;
    drop(ledger);
    let reopened = Ledger::open(dir.path()).expect("replays");
    assert_eq!(reopened.latest().header, latest);
    assert_eq!(reopened.agent("warehouse").expect("agent").controller, account_of(&owner.key));
}

#[test]
fn state_survives_restarts_and_a_torn_journal_tail() {
    let dir = tempfile::tempdir().expect("tmp");
    let w = Writer { key: key(1) };
    let (log, latest) = {
        let mut ledger = Ledger::create(dir.path()).expect("create");
        let log = open_log(&mut ledger, &w, None);
        w.commit(&mut ledger, log, 4, false).expect("commit");
        w.commit(&mut ledger, log, 9, false).expect("commit");
        assert!(matches!(Ledger::open(dir.path()), Err(LedgerError::Locked(_))), "one process at a time");
        (log, *ledger.latest())
    };
    let journal = dir.path().join("journal");
    let mut bytes = std::fs::read(&journal).expect("journal");
    bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3]);
    std::fs::write(&journal, &bytes).expect("write");
    let mut ledger = Ledger::open(dir.path()).expect("reopen");
    assert_eq!(*ledger.latest(), latest);
    assert_eq!(ledger.log(log).expect("log").head, head(9));
    w.commit(&mut ledger, log, 11, false).expect("continues");
    drop(ledger);

    // A flipped byte inside an acknowledged entry is damage, not a torn tail: in the entries
    // opening replays (past the checkpoint) it stops the open; in one the checkpoint covers,
    // reading that Pulse says so, and so does the next open that replays the whole journal.
    let clean = std::fs::read(&journal).expect("journal");
    let mut bytes = clean.clone();
    let last = bytes.len() - 70;
    bytes[last] ^= 1;
    std::fs::write(&journal, &bytes).expect("write");
    assert!(matches!(Ledger::open(dir.path()), Err(LedgerError::Journal { entry: 4, .. })));
    let mut bytes = clean;
    bytes[162 + 60] ^= 1;
    std::fs::write(&journal, &bytes).expect("write");
    let ledger = Ledger::open(dir.path()).expect("the checkpoint covers the damaged entry");
    assert!(matches!(ledger.header(1), Err(LedgerError::Derived { .. })));
    drop(ledger);
    assert!(matches!(Ledger::open(dir.path()), Err(LedgerError::Journal { entry: 1, .. })));
}

/// Issue 15, requirement 7: cutting an acknowledged Pulse off the journal used to pass for a
/// torn write, and the next commit signed a second header with its number. Now the ledger's
/// acknowledged mark catches it, and opening changes nothing.
#[test]
fn a_journal_cut_short_of_an_acknowledged_pulse_is_refused_not_signed_over() {
    let dir = tempfile::tempdir().expect("tmp");
    let w = Writer { key: key(1) };
    let (log, acked) = {
        let mut ledger = Ledger::create(dir.path()).expect("create");
        let log = open_log(&mut ledger, &w, None);
        for to in [4, 9, 13] {
            w.commit(&mut ledger, log, to, false).expect("commit");
        }
        (log, ledger.latest().header.number)
    };
    let journal = dir.path().join("journal");
    let whole = std::fs::read(&journal).expect("journal");
    // A few bytes off the end (inside the last, acknowledged frame), then a whole frame off.
    for cut in [5, 165] {
        std::fs::write(&journal, &whole[..whole.len() - cut]).expect("cut");
        let before = std::fs::read(&journal).expect("journal");
        for read_only in [false, true] {
            let opened =
                if read_only { Ledger::open_read_only(dir.path()) } else { Ledger::open(dir.path()) };
            match opened {
                Err(LedgerError::RolledBack { journal_ends, acknowledged }) => {
                    assert_eq!((journal_ends, acknowledged), (acked - 1, acked), "cut {cut}");
                }
                Err(e) => panic!("cut {cut}: refused for another reason: {e}"),
                Ok(_) => panic!("cut {cut}: a journal missing an acknowledged Pulse was opened"),
            }
            assert_eq!(std::fs::read(&journal).expect("journal"), before, "the journal is left as it was");
        }
    }
    // Restored whole, it opens and goes on from the same Pulse.
    std::fs::write(&journal, &whole).expect("restore");
    let mut ledger = Ledger::open(dir.path()).expect("restored");
    assert_eq!(ledger.latest().header.number, acked);
    assert_eq!(w.commit(&mut ledger, log, 20, false).expect("commit"), acked + 1);
    drop(ledger);

    // A journal rewritten under the same key: a copy of the ledger from before Pulse P goes on
    // with another Pulse P; given the original's mark, it is refused.
    let copy = tempfile::tempdir().expect("tmp");
    sion_testkit::copy_dir(dir.path(), copy.path());
    let mut ledger = Ledger::open(dir.path()).expect("open");
    let p = w.commit(&mut ledger, log, 25, false).expect("commit");
    drop(ledger);
    let mut other = Ledger::open(copy.path()).expect("open the copy");
    assert_eq!(w.commit(&mut other, log, 30, false).expect("commit"), p, "the same number");
    drop(other);
    std::fs::copy(dir.path().join("acked"), copy.path().join("acked")).expect("the original's mark");
    for read_only in [false, true] {
        let opened = if read_only { Ledger::open_read_only(copy.path()) } else { Ledger::open(copy.path()) };
        assert!(
            matches!(opened, Err(LedgerError::NotAcknowledged(n)) if n == p),
            "{:?}",
            opened.map(|l| l.latest().header.number)
        );
    }
}

/// The mark is written after the journal: a crash between the two leaves a Pulse in the
/// journal the mark does not yet name, which opening takes and marks; a torn slot leaves
/// the other whole; a mark that cannot be read at all stops the ledger, naming the file.
#[test]
fn the_acknowledged_mark_survives_a_crash_between_journal_and_mark_and_a_torn_slot() {
    let dir = tempfile::tempdir().expect("tmp");
    let w = Writer { key: key(1) };
    let ack_file = dir.path().join("acked");
    let (log, before) = {
        let mut ledger = Ledger::create(dir.path()).expect("create");
        let log = open_log(&mut ledger, &w, None);
        w.commit(&mut ledger, log, 4, false).expect("commit");
        (log, std::fs::read(&ack_file).expect("acked"))
    };
    let latest = {
        let mut ledger = Ledger::open(dir.path()).expect("open");
        w.commit(&mut ledger, log, 9, false).expect("commit");
        ledger.latest().header.number
    };
    // As if the process died after the journal's fsync, before the mark's.
    std::fs::write(&ack_file, &before).expect("older mark");
    let mut ledger = Ledger::open(dir.path()).expect("a Pulse past the mark is taken");
    assert_eq!(ledger.latest().header.number, latest);
    w.commit(&mut ledger, log, 11, false).expect("goes on");
    let latest = ledger.latest().header.number;
    drop(ledger);
    // The slot of the latest Pulse torn: the other names the Pulse before, which the journal holds.
    let mut marks = std::fs::read(&ack_file).expect("acked");
    let slot = (latest % 2) as usize * 128;
    marks[slot + 20] ^= 0xff;
    std::fs::write(&ack_file, &marks).expect("tear");
    let ledger = Ledger::open(dir.path()).expect("the other slot holds");
    assert_eq!(ledger.latest().header.number, latest);
    drop(ledger);
    // Both slots unreadable, or the file gone: refused, naming ledger/acked.
    let mut marks = std::fs::read(&ack_file).expect("acked");
    marks[20] ^= 0xff;
    marks[128 + 20] ^= 0xff;
    std::fs::write(&ack_file, &marks).expect("tear both");
    let e = Ledger::open(dir.path()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("ledger/acked") && e.contains("damaged"), "{e}");
    std::fs::remove_file(&ack_file).expect("remove");
    let e = Ledger::open_read_only(dir.path()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("ledger/acked is missing"), "{e}");
}

/// A mark whose write fails refuses its transaction; the next one takes the same number (the
/// refused header was never given out) after the slot is given the last acknowledged mark
/// again, so a power cut at any point after leaves a ledger that opens, with every
/// acknowledged Pulse.
#[test]
fn a_failed_mark_write_refuses_the_pulse_and_leaves_no_slot_naming_it() {
    use sion_disk::{Disk, Fault, Faults};
    use std::sync::Arc;
    for fault in [Fault::Io, Fault::Short] {
        let dir = tempfile::tempdir().expect("tmp");
        let faults = Arc::new(Faults::new());
        let disk = Disk::new(faults.clone());
        let w = Writer { key: key(1) };
        let mut ledger = Ledger::create_on(&disk, dir.path()).expect("create");
        let log = open_log(&mut ledger, &w, None);
        w.commit(&mut ledger, log, 4, false).expect("commit");
        // A commit's changes, in order: the journal's write and sync, then the mark's write and sync.
        let before = faults.changes();
        faults.fail_at(before + 2, fault, false);
        let refused = w.commit(&mut ledger, log, 9, false);
        let e = refused.expect_err("the mark's write failed, so the commit is not acknowledged");
        assert!(e.to_string().contains("ledger/acked"), "{e}");
        if fault == Fault::Short {
            faults.heal();
        }
        let p = w.commit(&mut ledger, log, 9, false).expect("the next commit");
        assert_eq!(
            p, 3,
            "the refused Pulse's number is taken by the next, whose header is the one given out"
        );
        faults.crash().expect("power cut");
        drop(ledger);
        let reopened = Ledger::open(dir.path()).expect("opens after the cut");
        assert_eq!(reopened.latest().header.number, 3);
        assert_eq!(reopened.log(log).expect("log").head, head(9));
    }
}

/// A journal append whose sync fails leaves a frame that reads back but is not durable. The
/// next open must not mark it acknowledged before making it durable: a power cut would then
/// leave a mark past the journal, and a ledger that refuses to open. (tests/storage_faults.rs
/// found it.)
#[test]
fn an_append_whose_sync_failed_is_made_durable_before_an_open_marks_it() {
    use sion_disk::{Disk, Fault, Faults};
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("tmp");
    let faults = Arc::new(Faults::new());
    let disk = Disk::new(faults.clone());
    let w = Writer { key: key(1) };
    let mut ledger = Ledger::create_on(&disk, dir.path()).expect("create");
    let log = open_log(&mut ledger, &w, None);
    w.commit(&mut ledger, log, 4, false).expect("commit");
    // A commit's changes, in order: the journal's write and sync, then the mark's.
    let before = faults.changes();
    faults.fail_at(before + 1, Fault::Io, false);
    let e = w.commit(&mut ledger, log, 9, false).expect_err("the journal's sync failed");
    assert!(e.to_string().contains("syncing the journal"), "{e}");
    drop(ledger);
    // Opened again (the disk healthy now): the frame is there to read, and is marked only
    // once it is durable.
    let reopened = Ledger::open_on(&disk, dir.path()).expect("reopen");
    let latest = reopened.latest().header.number;
    drop(reopened);
    faults.crash().expect("power cut");
    let after = Ledger::open(dir.path()).expect("opens after the cut");
    assert_eq!(after.latest().header.number, latest, "every Pulse the mark names survived the cut");
}

/// A ledger made before the mark (FORMAT 1, no `acked`) opens, is given its mark from its
/// journal, and is then held to it.
#[test]
fn a_ledger_from_before_the_mark_is_given_one() {
    let dir = tempfile::tempdir().expect("tmp");
    let w = Writer { key: key(1) };
    let log = {
        // Made before chains, as every format-1 ledger was.
        let mut ledger = Ledger::create_unchained(dir.path()).expect("create");
        let log = open_log(&mut ledger, &w, None);
        w.commit(&mut ledger, log, 4, false).expect("commit");
        log
    };
    std::fs::remove_file(dir.path().join("acked")).expect("remove");
    std::fs::write(dir.path().join("FORMAT"), "sion-ledger 1\n").expect("format 1");
    let mut ledger = Ledger::open(dir.path()).expect("a format-1 ledger opens");
    assert!(ledger.acked_made());
    w.commit(&mut ledger, log, 9, false).expect("commit");
    drop(ledger);
    assert_eq!(std::fs::read_to_string(dir.path().join("FORMAT")).expect("FORMAT"), "sion-ledger 2\n");
    let journal = dir.path().join("journal");
    let whole = std::fs::read(&journal).expect("journal");
    std::fs::write(&journal, &whole[..whole.len() - 5]).expect("cut");
    assert!(matches!(Ledger::open(dir.path()), Err(LedgerError::RolledBack { .. })));
}

/// A ledger that has lived: many Pulses, two logs, commits at the same size and growing.
fn long_life(dir: &std::path::Path, pulses: u64) -> (LogId, LogId) {
    let mut ledger = Ledger::create(dir).expect("create");
    let w = Writer { key: key(1) };
    let other = Writer { key: key(2) };
    let log = open_log(&mut ledger, &w, None);
    let other_log = open_log(&mut ledger, &other, None);
    for i in 0..pulses {
        if i % 7 == 3 {
            other.commit(&mut ledger, other_log, 1 + i / 500, false).expect("commit");
        } else {
            w.commit(&mut ledger, log, 1 + i / 100, false).expect("commit");
        }
    }
    (log, other_log)
}

/// What a ledger answers about its past.
fn answers(ledger: &Ledger, log: LogId, other: LogId) -> Vec<String> {
    let mut out = vec![format!("{:?}", ledger.latest()), format!("{:?}", ledger.logs())];
    let last = ledger.latest().header.number;
    for pulse in (0..=last).step_by(97).chain([last - 1, last]) {
        out.push(format!("{:?}", ledger.header(pulse).expect("header")));
        for l in [log, other] {
            out.push(format!("{:?}", ledger.state_proof(l, pulse).map_err(|e| e.to_string())));
        }
    }
    for position in [0, 1, 5, 12, 20, 26, 27, 1000] {
        out.push(format!("{:?}", ledger.tx_time_proof(log, position).map_err(|e| e.to_string())));
    }
    for k in (0..ledger.version_count(log)).step_by(131) {
        out.push(format!("{:?}", ledger.version(log, k).expect("version")));
    }
    for size in [0, 1, 7, 26, 27, 28] {
        out.push(format!("{:?}", ledger.last_commit_at_most(log, size).expect("search")));
        out.push(format!("{:?}", ledger.first_commit_over(other, size).expect("search")));
    }
    out
}

#[test]
fn a_long_life_opens_from_its_checkpoint_and_answers_as_a_full_replay_does() {
    let dir = tempfile::tempdir().expect("tmp");
    let (log, other) = long_life(dir.path(), 2600);
    let ledger = Ledger::open(dir.path()).expect("open");
    // Pulses 0..=2602: checkpoints at 1 (create), then every 1,024.
    assert_eq!(ledger.boot(), &LedgerBoot::Checkpoint { pulses: 2049, replayed: 554 });
    let expected = answers(&ledger, log, other);
    drop(ledger);

    let p = |name: &str| dir.path().join(name);
    let flip = |path: std::path::PathBuf, at: u64| {
        let mut b = std::fs::read(&path).expect("read");
        b[at as usize] ^= 0x10;
        std::fs::write(&path, b).expect("write");
    };
    // Each way the files beside the journal can be lost or damaged: a full replay, the same
    // answers, and the next open resumes from the checkpoint it wrote.
    type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let damages: Vec<Damage> = vec![
        ("no checkpoint", Box::new(|| std::fs::remove_file(p("checkpoint")).expect("rm"))),
        ("damaged", Box::new(|| flip(p("checkpoint"), 40))),
        ("pulse index", Box::new(|| std::fs::remove_file(p("pulses")).expect("rm"))),
        ("versions of log", Box::new(|| std::fs::remove_file(p("versions/0")).expect("rm"))),
        ("pulse index", Box::new(|| flip(p("pulses"), 16 * 2602 + 3))),
    ];
    for (why, damage) in damages {
        damage();
        let ledger = Ledger::open(dir.path()).expect("open");
        match ledger.boot() {
            LedgerBoot::Replayed { why: got, replayed: 2603 } => assert!(got.contains(why), "{why}: {got}"),
            other => panic!("{why}: {other:?}"),
        }
        assert_eq!(answers(&ledger, log, other), expected, "{why}");
        drop(ledger);
        let ledger = Ledger::open(dir.path()).expect("open");
        assert_eq!(ledger.boot(), &LedgerBoot::Checkpoint { pulses: 2603, replayed: 0 }, "{why}");
    }

    // A damaged record the checkpoint does not check is found when read, named, and rebuilt
    // by the next open.
    flip(p("versions/0"), 128 * 500 + 9);
    let ledger = Ledger::open(dir.path()).expect("open");
    let err = ledger.version(log, 500).expect_err("damaged");
    assert!(matches!(&err, LedgerError::Derived { file, .. } if file == "versions/0"), "{err}");
    drop(ledger);
    let ledger = Ledger::open(dir.path()).expect("open");
    assert!(matches!(ledger.boot(), LedgerBoot::Replayed { .. }));
    assert_eq!(answers(&ledger, log, other), expected);
}

/// The child of the kill test: commit until killed, printing each acknowledged Pulse.
#[test]
fn child_commits_until_killed() {
    let Some(dir) = std::env::var_os("SION_LEDGER_CHILD") else { return };
    let dir = std::path::Path::new(&dir);
    let mut ledger = if dir.join("FORMAT").exists() {
        Ledger::open(dir).expect("open")
    } else {
        Ledger::create(dir).expect("create")
    };
    ledger.set_checkpoint_every(1);
    let w = Writer { key: key(1) };
    let log = match ledger.logs().first() {
        Some(l) => l.id,
        None => open_log(&mut ledger, &w, None),
    };
    use std::io::Write as _;
    let mut out = std::io::stdout();
    for _ in 0..100_000 {
        let size = ledger.log(log).expect("log").head.size;
        let pulse = w.commit(&mut ledger, log, (size + 1).min(40), false).expect("commit");
        let hash = hex::encode(ledger.latest().header.hash());
        writeln!(out, "ACK {pulse} {hash}").expect("stdout");
        out.flush().expect("stdout");
    }
}

#[test]
fn kill_9_while_checkpointing_loses_no_acknowledged_pulse() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().expect("tmp");
    let ledger_dir = dir.path().join("ledger");
    let mut acked: Vec<(u64, String)> = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut inside = 0;
    let mut trials = 0;
    // Until twenty kills have landed inside a checkpoint's write (its new file written, not
    // yet renamed over the old), and at least twenty-four in all.
    while (inside < 20 || trials < 24) && trials < 400 {
        let trial = trials;
        trials += 1;
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "child_commits_until_killed", "--nocapture", "--test-threads", "1"])
            .env("SION_LEDGER_CHILD", &ledger_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("child");
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Killed after 1 to 12 acknowledgements; the child checkpoints after every Pulse.
        let wanted = 1 + rng % 12;
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
        let mut seen = 0;
        while seen < wanted {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (pulse, hash) = rest.split_once(' ').expect("ack line");
                acked.push((pulse.parse().expect("pulse"), hash.to_owned()));
                seen += 1;
            }
        }
        // A little later still, so that the kill lands anywhere in the next Pulse.
        std::thread::sleep(std::time::Duration::from_micros(rng % 3000));
        child.kill().expect("kill -9");
        if ledger_dir.join("checkpoint.new").exists() {
            inside += 1;
        }
        // Acknowledgements already written count too.
        for line in lines.map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (pulse, hash) = rest.split_once(' ').expect("ack line");
                acked.push((pulse.parse().expect("pulse"), hash.to_owned()));
            }
        }
        child.wait().expect("reaped");
        let ledger = Ledger::open(&ledger_dir).unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        for (pulse, hash) in &acked {
            let header =
                ledger.header(*pulse).unwrap_or_else(|e| panic!("trial {trial}, Pulse {pulse}: {e}"));
            assert_eq!(&hex::encode(header.header.hash()), hash, "trial {trial}, Pulse {pulse}");
        }
    }
    eprintln!(
        "{} Pulses acknowledged over {trials} kills, {inside} inside a checkpoint's write",
        acked.len()
    );
    assert!(inside >= 20, "only {inside} of {trials} kills landed inside a checkpoint's write");
}

#[test]
fn transaction_time_is_proved_by_two_state_proofs() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create(dir.path()).expect("create");
    let w = Writer { key: key(1) };
    let other = Writer { key: key(2) };
    let log = open_log(&mut ledger, &w, None);
    let other_log = open_log(&mut ledger, &other, None);
    w.commit(&mut ledger, log, 5, false).expect("commit");
    other.commit(&mut ledger, other_log, 2, false).expect("commit");
    let pulse = w.commit(&mut ledger, log, 9, false).expect("commit");
    w.commit(&mut ledger, log, 20, false).expect("commit");

    let proof = ledger.tx_time_proof(log, 7).expect("proof");
    let at = proof.verify(&ledger.public_key()).expect("verifies");
    assert_eq!(at.number, pulse);
    assert_eq!(proof.before.log.head.size, 5);
    assert_eq!(proof.at.log.head.size, 9);

    // Another ledger's key, a claim about another position, a swapped state proof: refused.
    assert!(proof.verify(&key(9).verifying_key()).is_err());
    let mut wrong = proof.clone();
    wrong.position = 3;
    assert!(wrong.verify(&ledger.public_key()).is_err());
    let mut wrong = proof.clone();
    wrong.before = ledger.state_proof(log, pulse - 2).expect("older");
    assert!(wrong.verify(&ledger.public_key()).is_err());
    let mut wrong = proof.clone();
    wrong.at.log.head.size = 100;
    assert!(wrong.verify(&ledger.public_key()).is_err());
    let mut wrong = proof;
    wrong.at.header.header.time_ns -= 1;
    assert!(wrong.verify(&ledger.public_key()).is_err());
    assert!(matches!(ledger.tx_time_proof(log, 20), Err(LedgerError::NotRecorded { .. })));
    let _: Account = account_of(&w.key);
}

#[test]
fn commits_list_their_log_in_the_cells_the_header_commits_to() {
    use sion_verify::cells::{CellTrie, Found, cell_key, frame_tag, logs_digest};
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create(dir.path()).expect("create");
    assert_eq!(ledger.latest().header.cells, Some([0; 32]), "a new ledger keeps cells, none met yet");
    assert_eq!(ledger.latest().header.encode().len(), 121);
    let (a, b) = (Writer { key: key(1) }, Writer { key: key(2) });
    let (la, lb) = (open_log(&mut ledger, &a, None), open_log(&mut ledger, &b, None));
    let tag = frame_tag("map");
    let (c1, c2, c3) = (cell_key(tag, 0, 0, 0), cell_key(tag, 0, 1, 0), cell_key(tag, 3, 5, -2));
    let mut two = vec![c1, c2];
    two.sort_unstable();
    a.commit_cells(&mut ledger, la, 5, false, two.clone()).expect("a's cells");
    b.commit_cells(&mut ledger, lb, 3, false, vec![c2]).expect("b's cell");
    // Cells ahead of the atoms, at the same size; and a cell listed again changes nothing.
    a.commit_cells(&mut ledger, la, 5, false, vec![c3]).expect("ahead");
    let before = ledger.latest().header.cells;
    b.commit_cells(&mut ledger, lb, 4, false, vec![c2]).expect("again");
    assert_eq!(ledger.latest().header.cells, before);

    let cells = ledger.cells().expect("cells");
    assert_eq!(cells.logs_at(c1), [la.0]);
    assert_eq!(cells.logs_at(c2), [la.0, lb.0]);
    assert_eq!(cells.logs_at(c3), [la.0]);
    let mut fresh = CellTrie::new();
    fresh.insert(c1, logs_digest(&[la.0]));
    fresh.insert(c2, logs_digest(&[la.0, lb.0]));
    fresh.insert(c3, logs_digest(&[la.0]));
    let root = ledger.latest().header.cells.expect("root");
    assert_eq!(root, fresh.root());
    let (signed, proof) = ledger.cell_proof(c2).expect("proof");
    signed.verify(&ledger.public_key()).expect("signed");
    assert_eq!(proof.verify(&root, c2), Ok(Found::Present(logs_digest(&[la.0, lb.0]))));
    let elsewhere = cell_key(tag, 0, 9, 9);
    assert_eq!(ledger.cell_proof(elsewhere).expect("proof").1.verify(&root, elsewhere), Ok(Found::Absent));

    // Refused, naming why: out of order, repeated, a level past 38; and on another's log.
    let refused = |r: Result<u64, LedgerError>| r.expect_err("refused").code().to_owned();
    let mut backwards = two.clone();
    backwards.reverse();
    assert_eq!(refused(a.commit_cells(&mut ledger, la, 6, false, backwards)), "cells");
    assert_eq!(refused(a.commit_cells(&mut ledger, la, 6, false, vec![c1, c1])), "cells");
    assert_eq!(refused(a.commit_cells(&mut ledger, la, 6, false, vec![cell_key(tag, 45, 0, 0)])), "cells");
    assert_eq!(ledger.latest().header.cells, Some(root), "a refusal changes no cell");

    // Reopened from the checkpoint, and replayed without it: the same cells.
    ledger.set_checkpoint_every(1);
    a.commit_cells(&mut ledger, la, 6, false, vec![cell_key(tag, 0, -1, -1)]).expect("one more");
    let last = *ledger.latest();
    drop(ledger);
    let ledger = Ledger::open(dir.path()).expect("reopen");
    assert!(matches!(ledger.boot(), LedgerBoot::Checkpoint { .. }), "{:?}", ledger.boot());
    assert_eq!(*ledger.latest(), last);
    assert_eq!(ledger.cells().expect("cells").logs_at(c2), [la.0, lb.0]);
    drop(ledger);
    std::fs::remove_file(dir.path().join("checkpoint")).expect("rm");
    let ledger = Ledger::open(dir.path()).expect("replayed");
    assert!(matches!(ledger.boot(), LedgerBoot::Replayed { .. }), "{:?}", ledger.boot());
    assert_eq!(ledger.cells().expect("cells").len(), 4);
}

#[test]
fn a_ledger_made_before_cells_keeps_version_1_headers_and_takes_no_cells() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::create_without_cells(dir.path()).expect("create");
    assert_eq!(ledger.latest().header.cells, None);
    let w = Writer { key: key(1) };
    let log = open_log(&mut ledger, &w, None);
    let cell = sion_verify::cells::cell_key(1, 0, 0, 0);
    let e = w.commit_cells(&mut ledger, log, 5, false, vec![cell]).expect_err("no cells here");
    assert_eq!(e.code(), "cells");
    w.commit(&mut ledger, log, 5, false).expect("a commit without cells");
    assert_eq!(ledger.latest().header.encode().len(), 89);
    drop(ledger);
    let ledger = Ledger::open(dir.path()).expect("reopen");
    assert!(ledger.cells().is_none());
}
