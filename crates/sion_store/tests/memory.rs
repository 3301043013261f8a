//! A memory end to end in one process: remember, commit, prove, verify from the file alone,
//! and refuse to open a log that no longer extends its committed head.

use sion_sim::{Warehouse, WarehouseConfig};
use sion_store::memory::{Memory, OpenError, ProveError};
use sion_verify::proof::{Claim, ProofFile, VerifyError};

#[test]
fn remember_commit_prove_verify() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let mut memory = Memory::options(&dir).agent("site/robot-2").create().expect("create");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(3000).collect();
    memory.remember(atoms[..1000].to_vec()).expect("remember");
    let first = memory.commit(false).expect("commit");
    memory.remember(atoms[1000..].to_vec()).expect("remember");
    let second = memory.commit(false).expect("commit");
    assert_eq!((first.head.size, second.head.size), (1000, 3000));
    assert_eq!(second.pulse.header.number, first.pulse.header.number + 1);

    let key = memory.ledger().public_key();
    let file = memory.prove_inclusion(2500).expect("prove");
    let bytes = file.encode();
    let verified = ProofFile::decode(&bytes).expect("decode").verify(Some(&key)).expect("valid");
    match verified.claim {
        Claim::Included { position, atom } => assert_eq!((position, *atom), (2500, atoms[2500].clone())),
        other => panic!("unexpected claim {other:?}"),
    }
    assert_eq!(verified.pulse.map(|p| p.0), Some(second.pulse.header.number));
    let file = memory.prove_consistency(1000).expect("prove");
    ProofFile::decode(&file.encode()).expect("decode").verify(Some(&key)).expect("valid");

    // Another ledger's key, or no attestation where one is required: refused.
    let other = ed25519_dalek::SigningKey::from_bytes(&[3; 32]).verifying_key();
    assert!(matches!(file.verify(Some(&other)), Err(VerifyError::WrongLedger { .. })));
    let bare = ProofFile { attestation: None, ..file.clone() };
    assert!(matches!(bare.verify(Some(&key)), Err(VerifyError::Unattested)));
    assert!(bare.verify(None).is_ok(), "without a key, the head is taken on the writer's word");

    // Every single-bit flip of a proof file is refused (or does not decode).
    let bytes = memory.prove_inclusion(7).expect("prove").encode();
    for i in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut flipped = bytes.clone();
            flipped[i] ^= 1 << bit;
            if flipped[..8] == *b"SIONPRF2" {
                // The same inclusion proof as docs/PROOFS.md's version 2 wrote it (its body
                // is the same under either): it proves the same thing.
                continue;
            }
            let ok = ProofFile::decode(&flipped).map(|f| f.verify(Some(&key)).is_ok()).unwrap_or(false);
            assert!(!ok, "a flip at byte {i} bit {bit} still verified");
        }
    }
    assert!(matches!(memory.prove_inclusion(3000), Err(ProveError::NotCommitted { .. })));
    drop(memory);

    let memory = Memory::options(&dir).open().expect("reopen");
    assert_eq!(memory.committed().head, second.head);
    assert_eq!(memory.agent(), Some("site/robot-2"));
}

/// A query before the first commit (a node's first seconds) is refused with the reason, not
/// as an index that does not match its head.
#[test]
fn a_query_before_the_first_commit_says_nothing_is_committed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut memory = Memory::options(tmp.path().join("m")).create().expect("create");
    let q = sion_store::index::geom::Query::new(
        "map",
        sion_verify::atom::BoxMm { min_mm: [0; 3], max_mm: [1000; 3] },
        0,
        i64::MAX,
    )
    .expect("query");
    let refused = memory.prove_range(&q, None).expect_err("nothing to prove against");
    assert!(matches!(refused, ProveError::NothingCommitted), "{refused}");
    assert!(refused.to_string().contains("nothing is committed yet"));
    memory.remember(Warehouse::new(WarehouseConfig::default()).take(10).collect()).expect("remember");
    memory.commit(false).expect("commit");
    memory.prove_range(&q, None).expect("proved once committed");
}

#[test]
fn a_log_that_lost_committed_atoms_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let mut memory = Memory::options(&dir).create().expect("create");
    memory.remember(Warehouse::new(WarehouseConfig::default()).take(500).collect()).expect("remember");
    memory.commit(false).expect("commit");
    drop(memory);
    // Cut the log behind the ledger's back: its head now claims atoms the log lacks.
    let segment =
        std::fs::read_dir(dir.join("log/segments")).expect("dir").next().expect("one").expect("e").path();
    let len = std::fs::metadata(&segment).expect("meta").len();
    std::fs::OpenOptions::new().write(true).open(&segment).expect("open").set_len(len / 2).expect("cut");
    std::fs::remove_file(dir.join("log/checkpoint")).expect("rm");
    let err = Memory::options(&dir).open().err().expect("refused");
    assert!(matches!(err, OpenError::Diverged { committed: 500, .. }), "{err}");
}

#[test]
fn answers_as_of_any_committed_head() {
    use sion_store::index::geom::Query;
    use sion_verify::atom::BoxMm;
    let tmp = tempfile::tempdir().expect("tmp");
    let mut memory = Memory::options(tmp.path().join("m")).create().expect("create");
    let atoms: Vec<_> = sion_sim::MonthInAWarehouse::new(6000, 5).collect();
    memory.remember(atoms[..2500].to_vec()).expect("remember");
    let first = memory.commit(false).expect("commit");
    memory.remember(atoms[2500..].to_vec()).expect("remember");
    memory.commit(false).expect("commit");
    let key = memory.ledger().public_key();
    let start = sion_sim::MonthInAWarehouse::new(1, 5).start_ns();
    let q = Query::new(
        "map",
        BoxMm { min_mm: [0, 0, 0], max_mm: [600_000, 600_000, 30_000] },
        start,
        start + sion_sim::MONTH_NS,
    )
    .expect("query");
    for (as_of, size) in [(None, 6000usize), (Some(2500), 2500)] {
        let file = memory.prove_range(&q, as_of).expect("prove");
        let verified = ProofFile::decode(&file.encode()).expect("decode").verify(Some(&key)).expect("valid");
        let Claim::Range { atoms: got, .. } = verified.claim else { panic!("a range claim") };
        let expected: Vec<u64> = atoms[..size]
            .iter()
            .enumerate()
            .filter(|(_, a)| q.matches(a.parts()))
            .map(|(i, _)| i as u64)
            .collect();
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), expected);
        assert_eq!(verified.head.size, size as u64);
    }
    assert_eq!(memory.version(Some(2500)).expect("version").head, first.head);
    assert!(matches!(memory.version(Some(2501)), Err(ProveError::NoSuchHead { .. })));
    // An honest index omits nothing.
    assert!(matches!(memory.prove_omission(17), Err(ProveError::NotOmitted(17))));
}

/// A writer whose committed index leaves an atom out is convicted from the head alone.
#[test]
fn an_index_that_leaves_an_atom_out_is_convicted() {
    use sion_store::index::Index;
    use sion_store::index::geom::Query;
    use sion_store::ledger::{Head, SignedTx, Tx, account_of};
    use sion_verify::proof::{Attestation, Proof, RangeProof};
    let tmp = tempfile::tempdir().expect("tmp");
    let mut memory = Memory::options(tmp.path().join("m")).create().expect("create");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(400).collect();
    memory.remember(atoms.clone()).expect("remember");
    // The dishonest index: position 123 holds another atom than the log's.
    let mut decoy = atoms[123].parts().clone();
    decoy.bounds.min_mm[0] += 50_000;
    decoy.bounds.max_mm[0] += 50_000;
    let decoy = sion_verify::atom::Atom::new(decoy).expect("valid");
    let mut bad = Index::new();
    for (i, a) in atoms.iter().enumerate() {
        bad.fold(if i == 123 { &decoy } else { a }).expect("fold");
    }
    let log_head = memory.log().head();
    let head = Head {
        size: log_head.size,
        root: log_head.root,
        index: bad.root().expect("root"),
        manifest: [0; 32],
    };
    let writer = memory.writer().clone();
    let nonce = memory.ledger().nonce(&account_of(&writer)).expect("nonce");
    let log = memory.log_id();
    memory
        .submit(SignedTx::sign(
            &writer,
            nonce,
            Tx::CommitMemory { log, version: 0, head, proof: vec![], seal: false, cells: Vec::new() },
        ))
        .expect("the ledger does not check index roots");

    let atom = &atoms[123];
    let p = atom.parts();
    let q = Query::new(&p.frame, p.bounds, p.valid.from_ns, p.valid.to_ns).expect("query");
    let answer = bad.range(&q).expect("range");
    assert!(!answer.positions.contains(&123));
    let range = RangeProof {
        query: q,
        atoms: answer.positions.iter().map(|&i| (i, atoms[i as usize].bytes().to_vec())).collect(),
        answer,
    };
    let state = memory.ledger().state_proof(log, memory.committed().committed_at).expect("state");
    let file = ProofFile {
        proof: Proof::Omission {
            log,
            head,
            position: 123,
            atom: atom.bytes().to_vec(),
            path: memory.log().inclusion_proof(123, head.size).expect("path"),
            range: Box::new(range),
        },
        attestation: Some(Attestation {
            ledger_key: memory.ledger().public_key().to_bytes(),
            state,
            cosignatures: Vec::new(),
            checkpoint: None,
        }),
    };
    let verified = ProofFile::decode(&file.encode())
        .expect("decode")
        .verify(Some(&memory.ledger().public_key()))
        .expect("convicts");
    assert!(matches!(verified.claim, Claim::Omitted { position: 123, .. }));
    // The same accusation against another atom, which the index does hold, fails.
    let mut wrong = file.clone();
    if let Proof::Omission { position, atom: a, path, .. } = &mut wrong.proof {
        *position = 124;
        *a = atoms[124].bytes().to_vec();
        *path = memory.log().inclusion_proof(124, head.size).expect("path");
    }
    assert!(wrong.verify(None).is_err());
}

/// A memory whose log is on a ledger it reaches through a link (as a fleet ledger's client
/// would be): created, committed, reopened through the link, proved; reopened through a link
/// to another ledger, refused, because memory.json pinned the first ledger's key.
#[test]
fn a_memory_on_a_linked_ledger_pins_its_key() {
    use sion_store::index::IndexConfig;
    use sion_store::ledger::link::LedgerLink;
    use sion_store::ledger::{Ledger, LedgerError};
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, fleet, other) = (tmp.path().join("m"), tmp.path().join("fleet"), tmp.path().join("other"));
    Ledger::create(&other).expect("other ledger");
    let link = Box::new(Ledger::create(&fleet).expect("ledger"));
    let key = link.public_key();
    let config = IndexConfig::default();
    let mut memory = Memory::options(&dir)
        .index(config.clone())
        .agent("site/robot-9")
        .ledger_link(link, "test://fleet")
        .create()
        .expect("create");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(500).collect();
    memory.remember(atoms).expect("remember");
    let c = memory.commit(false).expect("commit");
    assert_eq!(c.head.size, 500);
    assert!(!dir.join("ledger").exists(), "a linked memory made a ledger of its own");
    drop(memory);

    let through = |path: std::path::PathBuf| {
        move |url: &str, _: &ed25519_dalek::VerifyingKey| -> Result<Box<dyn LedgerLink>, LedgerError> {
            assert_eq!(url, "test://fleet");
            Ok(Box::new(Ledger::open(&path)?))
        }
    };
    let memory =
        Memory::options(&dir).index(config.clone()).connect(&through(fleet.clone())).open().expect("reopen");
    assert_eq!(memory.committed().head.size, 500);
    let file = memory.prove_recorded(42).expect("time proof");
    file.verify(Some(&key)).expect("verifies under the fleet ledger's key");
    drop(memory);
    // Without a client, and through a link to another ledger: refused, naming why.
    let e = Memory::options(&dir).open().err().expect("opened without a client");
    assert!(e.to_string().contains("no client"), "{e}");
    let e = Memory::options(&dir)
        .index(config.clone())
        .connect(&through(other))
        .open()
        .err()
        .expect("another ledger accepted");
    assert!(e.to_string().contains("another ledger"), "{e}");
}

/// Finding 6: a question over the whole memory is refused, not proved at any cost. The walk
/// stops as soon as it passes its bound (memory bounded whatever is asked), and the refusal
/// says why; the same question within the bound proves as before, through a prover that holds
/// no lock on the memory.
#[test]
fn a_question_too_large_to_prove_is_refused_as_such() {
    use sion_store::index::IndexError;
    use sion_store::index::geom::Query;
    use sion_verify::atom::BoxMm;
    let tmp = tempfile::tempdir().expect("tmp");
    let mut memory = Memory::options(tmp.path().join("m")).create().expect("create");
    memory.remember(sion_sim::MonthInAWarehouse::new(6000, 5).collect()).expect("remember");
    let head = memory.commit(false).expect("commit").head;
    let start = sion_sim::MonthInAWarehouse::new(1, 5).start_ns();
    let everything = Query::new(
        "map",
        BoxMm { min_mm: [i64::MIN / 2; 3], max_mm: [i64::MAX / 2; 3] },
        start - sion_sim::MONTH_NS,
        start + 2 * sion_sim::MONTH_NS,
    )
    .expect("query");
    let snapshot = memory.index_reader().at(head.size).expect("the committed version");
    let walked = snapshot.range(&everything).expect("within the bound");
    assert!(walked.positions.len() > 100, "{} atoms", walked.positions.len());
    // Bounded at 50 steps: refused, having held at most one block past it.
    assert!(matches!(snapshot.range_within(&everything, 50), Err(IndexError::TooLarge(50))));
    let prover = memory.snapshot(None).expect("prover");
    // The prover is the memory's own word, taken without its lock: appending goes on.
    memory.remember(sion_sim::MonthInAWarehouse::new(6100, 5).skip(6000).collect()).expect("remember");
    let file = prover.range(&everything).expect("prove");
    let verified = file.verify(None).expect("valid");
    assert_eq!(verified.head.size, head.size, "as of the head the prover was taken at");
    let e = ProveError::from(IndexError::TooLarge(50));
    assert!(e.to_string().contains("50 steps"), "{e}");
}

/// Each commit lists the log in every map cell its new atoms lie in (docs/LEDGER.md, "Cells"),
/// so the ledger's cells never leave out an atom it holds.
#[test]
fn commits_list_the_log_in_every_cell_of_its_atoms() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let mut memory = Memory::options(&dir).create().expect("create");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(3000).collect();
    memory.remember(atoms[..1000].to_vec()).expect("remember");
    memory.commit(false).expect("commit");
    memory.remember(atoms[1000..].to_vec()).expect("remember");
    memory.commit(false).expect("commit");
    let log = memory.log_id().0;
    let ledger_dir = memory.embedded_ledger_dir().expect("config").expect("embedded");
    drop(memory);
    let ledger = sion_ledger::Ledger::open_read_only(&ledger_dir).expect("ledger");
    let cells = ledger.cells().expect("a new memory's ledger keeps cells");
    let mut met = std::collections::BTreeSet::new();
    for a in &atoms {
        for c in sion_verify::cells::cells_of(&a.parts().frame, &a.parts().bounds) {
            assert_eq!(cells.logs_at(c), [log], "cell {c:x} of {a:?}");
            met.insert(c);
        }
    }
    assert_eq!(cells.len(), met.len(), "no cell listed that no atom lies in");
}

/// A writer that withholds its atoms' cells is convicted by anyone holding its log: the proof
/// (kind 10) shows an atom it holds in a cell the ledger's cells leave it out of. An honest
/// writer's memory cannot make one, and every single-bit flip of the proof is refused.
#[test]
fn a_writer_that_withholds_its_cells_is_convicted() {
    use sion_verify::proof::{CellEnd, Expect, Proof, Question};
    let tmp = tempfile::tempdir().expect("tmp");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(500).collect();

    let mut honest = Memory::options(tmp.path().join("honest")).create().expect("create");
    honest.remember(atoms.clone()).expect("remember");
    honest.commit(false).expect("commit");
    assert!(matches!(honest.prove_cell_omission(7), Err(ProveError::Query(_))), "nothing omitted");

    let mut liar = Memory::options(tmp.path().join("liar")).create().expect("create");
    liar.withhold_cells();
    liar.remember(atoms.clone()).expect("remember");
    liar.commit(false).expect("commit");
    let key = liar.ledger().public_key();
    let file = liar.prove_cell_omission(7).expect("convicted");
    let bytes = file.encode();
    let verified = ProofFile::decode(&bytes).expect("decode").verify(Some(&key)).expect("valid");
    match &verified.claim {
        Claim::CellOmitted { position, atom, cell } => {
            assert_eq!((*position, &**atom), (7, &atoms[7]));
            let parts = atoms[7].parts();
            assert!(sion_verify::cells::cells_of(&parts.frame, &parts.bounds).contains(cell));
        }
        other => panic!("unexpected claim {other:?}"),
    }
    Expect::answer(Question::CellOmitted { position: 7 }).check(&verified).expect("answers");
    let other = Expect::answer(Question::CellOmitted { position: 8 }).check(&verified);
    assert_eq!(other.expect_err("another position").code(), "other_question");

    // The cell listed after all, or another cell named: refused.
    let mut listed = file.clone();
    if let Proof::CellOmission { end, log, .. } = &mut listed.proof {
        *end = CellEnd::Listed(vec![log.0]);
    }
    assert_eq!(listed.verify(Some(&key)).expect_err("listed").code(), "cells");
    let mut moved = file.clone();
    if let Proof::CellOmission { cell, .. } = &mut moved.proof {
        *cell ^= 1;
    }
    assert_eq!(moved.verify(Some(&key)).expect_err("moved").code(), "cells");

    for i in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut flipped = bytes.clone();
            flipped[i] ^= 1 << bit;
            let ok = ProofFile::decode(&flipped).map(|f| f.verify(Some(&key)).is_ok()).unwrap_or(false);
            assert!(!ok, "a flip at byte {i} bit {bit} still verified");
        }
    }
}

/// A writer that lists its cells late — after the Pulse that recorded its atoms — is convicted
/// as of that Pulse: the ledger keeps when it listed each log, and proves its cells as they were.
#[test]
fn a_writer_that_lists_its_cells_late_is_convicted_all_the_same() {
    use sion_verify::ledger::{SignedTx, Tx};
    let tmp = tempfile::tempdir().expect("tmp");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(200).collect();
    let mut late = Memory::options(tmp.path().join("late")).create().expect("create");
    late.withhold_cells();
    late.remember(atoms.clone()).expect("remember");
    let recorded = late.commit(false).expect("commit").pulse.header.number;
    // Now it lists every cell, at the same size.
    let mut cells: Vec<u128> = atoms
        .iter()
        .flat_map(|a| sion_verify::cells::cells_of(&a.parts().frame, &a.parts().bounds))
        .collect();
    cells.sort_unstable();
    cells.dedup();
    let writer = late.writer().clone();
    let me = sion_ledger::account_of(&writer);
    let current = late.committed().clone();
    let nonce = late.ledger().nonce(&me).expect("nonce");
    let tx = Tx::CommitMemory {
        log: current.id,
        version: current.commits,
        head: current.head,
        proof: vec![],
        seal: false,
        cells,
    };
    late.submit(SignedTx::sign(&writer, nonce, tx)).expect("listed late");
    let key = late.ledger().public_key();
    assert!(late.prove_cell_omission_at(7, None).is_err(), "the latest cells list it");
    let file = late.prove_cell_omission(7).expect("convicted as of the Pulse that recorded it");
    let v = file.verify(Some(&key)).expect("valid");
    assert_eq!(v.pulse.map(|p| p.0), Some(recorded));
    assert!(matches!(v.claim, Claim::CellOmitted { position: 7, .. }));
}

/// Where an atom is, read from its encoding's first fields alone (what a commit reads to name
/// its cells): the same frame and box as the whole decode; a cut encoding is refused.
#[test]
fn an_atoms_placement_is_read_from_its_first_fields() {
    use sion_verify::atom::Atom;
    for a in Warehouse::new(WarehouseConfig::default()).take(500) {
        let (frame, bounds) = Atom::placement(a.bytes()).expect("placement");
        assert_eq!((&frame, &bounds), (&a.parts().frame, &a.parts().bounds));
        let cut = &a.bytes()[..2 + 1 + frame.len() + 40];
        assert!(Atom::placement(cut).is_err(), "a cut box is refused");
    }
}
