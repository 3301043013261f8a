//! No list question can exhaust the robot (issue 30, requirement 6): a subject or link list
//! longer than a list proof may walk is refused, saying which list, how long it is, the bound
//! and what to ask instead, before its positions are read; a list within the bound proves and
//! verifies. The bound here is a test's small one (`*_within`); the shipped one is
//! `MAX_LIST_STEPS`, what a 64 MiB proof file of the smallest atoms could carry.

use sion_store::index::{IndexError, MAX_LIST_STEPS, MIN_LIST_ENTRY_BYTES};
use sion_store::memory::{Memory, ProveError};
use sion_verify::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Link, LinkRel, Permille};
use sion_verify::proof::{Claim, ListKey};

const LONG: &str = "pallet-17";
const SHORT: &str = "pallet-18";

fn atom(n: i64, subject: &str, links: Vec<Link>) -> Atom {
    let mut p = AtomParts::new(
        Kind::Claim,
        "map",
        BoxMm::point([n, 0, 0]),
        Interval { from_ns: n, to_ns: n + 1 },
        Permille(900),
    );
    p.subject = subject.into();
    p.links = links;
    Atom::new(p).expect("a valid atom")
}

/// A memory with `long` atoms about [`LONG`] (each linking to one target) and 3 about
/// [`SHORT`], committed; and the target's id.
fn memory(dir: &std::path::Path, long: i64) -> (Memory, sion_verify::atom::AtomId) {
    let mut memory = Memory::options(dir).create().expect("create");
    let target = atom(1_000_000, "target", Vec::new());
    let mut atoms = vec![target.clone()];
    atoms
        .extend((0..long).map(|n| atom(n, LONG, vec![Link { rel: LinkRel::Supports, target: target.id() }])));
    atoms.extend((0..3).map(|n| atom(long + n, SHORT, Vec::new())));
    memory.remember(atoms).expect("remember");
    memory.commit(false).expect("commit");
    (memory, target.id())
}

#[test]
fn a_list_over_the_bound_is_refused_and_one_within_proves() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (memory, target) = memory(&tmp.path().join("m"), 300);
    let size = memory.committed().head.size;
    let snapshot = memory.index_reader().at(size).expect("the committed version");

    // The index walk: refused before a position is read, naming the list, its length, the bound.
    match snapshot.subject_within(LONG, 50) {
        Err(IndexError::ListTooLarge { list, entries: 300, max: 50 }) => {
            assert!(list.contains(LONG), "{list}")
        }
        other => panic!("not refused as too large: {other:?}"),
    }
    match snapshot.links_within(&target, 50) {
        Err(IndexError::ListTooLarge { list, entries: 300, max: 50 }) => {
            assert!(list.contains(&target.to_string()), "{list}")
        }
        other => panic!("not refused as too large: {other:?}"),
    }
    // Within the bound: every position. The shipped bound is far above a test's lists.
    assert_eq!(snapshot.subject_within(LONG, 400).expect("within").positions.len(), 300);
    assert_eq!(snapshot.subject(SHORT).expect("within").positions.len(), 3);
    assert_eq!(snapshot.subject_within("nobody", 0).expect("an absent key").positions.len(), 0);

    // The prover, taken from the memory in a moment: the refusal is the memory's TooLarge, and
    // says what to ask instead.
    let prover = memory.snapshot(None).expect("prover");
    let e = prover.list_within(ListKey::Subject(LONG.into()), 50).expect_err("refused");
    let text = e.to_string();
    assert!(matches!(e, ProveError::TooLarge(_)), "{e:?}");
    for said in [LONG, "300 entries", "at most 50", "box and interval", "earlier head"] {
        assert!(text.contains(said), "{said:?} not in: {text}");
    }
    assert!(matches!(prover.list_within(ListKey::LinksTo(target), 50), Err(ProveError::TooLarge(_))));

    // Appending goes on while a prover is held; a list within its bound proves and verifies.
    memory.remember(vec![atom(10_000, LONG, Vec::new())]).expect("remember");
    for (key, n) in [
        (ListKey::Subject(LONG.into()), 300),
        (ListKey::Subject(SHORT.into()), 3),
        (ListKey::LinksTo(target), 300),
    ] {
        let file = prover.list_within(key.clone(), 400).expect("within the bound");
        let verified = file.verify(Some(&memory.ledger().public_key())).expect("valid");
        match verified.claim {
            Claim::List { atoms, .. } => assert_eq!(atoms.len(), n, "{key:?}"),
            other => panic!("unexpected claim {other:?}"),
        }
        assert_eq!(verified.head.size, size, "as of the head the prover was taken at");
    }
    // And with the shipped bound, through the memory itself.
    let file = memory.prove_list(ListKey::Subject(LONG.into()), None).expect("prove");
    file.verify(None).expect("valid");
}

/// The shipped bound is what the verifier's 64 MiB allows: no list a verifier would read is
/// refused for its length, because no atom in a list is smaller than the bound assumes.
#[test]
fn the_list_bound_matches_the_verifiers_limit() {
    let smallest = {
        let mut p = AtomParts::new(
            Kind::Claim,
            "m",
            BoxMm::point([0, 0, 0]),
            Interval { from_ns: 0, to_ns: 1 },
            Permille(0),
        );
        p.subject = "s".into();
        Atom::new(p).expect("the smallest atom with a subject")
    };
    // A list proof's entry: a varint position (at least a byte), a u32 length, the atom.
    assert_eq!(MIN_LIST_ENTRY_BYTES, 1 + 4 + smallest.bytes().len());
    assert_eq!(MAX_LIST_STEPS, sion_verify::proof::MAX_FILE_BYTES / MIN_LIST_ENTRY_BYTES);
}
