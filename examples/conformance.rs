//! Writes the conformance suite (`tests/conformance/`): proof files of every kind made by a
//! real memory, valid ones and mutated ones, with a manifest saying what a verifier must
//! conclude of each, and why. Any implementation of docs/PROOFS.md can run it; the Rust
//! verifier (tests/conformance.rs) and the Python package (python/tests) do in CI.
//!
//!   cargo run --example conformance -- tests/conformance
//!
//! The files are committed: a new run makes a new ledger key and new Pulse times, so it
//! rewrites every file (and the tests then check the new ones).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Link, LinkRel, Permille};
use sion_memory::index::geom::Query;
use sion_memory::index::tree::Step;
use sion_memory::index::{FrameWitness, Index};
use sion_memory::ledger::{Head, SignedTx, Tx, account_of};
use sion_memory::memory::Memory;
use sion_memory::proof::{
    self, Attestation, CellEnd, Expect, ListKey, Proof, ProofFile, RangeProof, VerifyError,
};
use sion_memory::sim::{Warehouse, WarehouseConfig};

struct Suite {
    dir: PathBuf,
    ledger_key: String,
    cases: Vec<Value>,
}

impl Suite {
    /// Add a case: write the file, check our verifier's verdict is the one stated, record it.
    fn case(
        &mut self,
        name: &str,
        bytes: &[u8],
        expect: Value,
        verdict: Result<(), (&str, &str)>,
    ) -> Result<()> {
        self.case_with_key(name, bytes, expect, verdict, None)
    }

    fn case_with_key(
        &mut self,
        name: &str,
        bytes: &[u8],
        expect: Value,
        verdict: Result<(), (&str, &str)>,
        key: Option<&str>,
    ) -> Result<()> {
        let file = format!("{name}.sionproof");
        std::fs::write(self.dir.join(&file), bytes)?;
        let key_hex = key.unwrap_or(&self.ledger_key).to_owned();
        let ours = check(bytes, &key_hex, &expect);
        let mut case = json!({ "file": file, "ledger_key": key_hex, "expect": expect });
        match (verdict, ours) {
            (Ok(()), Ok(v)) => {
                case["verdict"] = json!("valid");
                case["statement"] = json!(v.statement());
                case["kind"] = json!(v.claim.kind());
                case["head_size"] = json!(v.head.size);
                case["atoms"] = json!(answer_positions(&v));
            }
            (Err((code, why)), Err(e)) if e.code() == code => {
                case["verdict"] = json!("invalid");
                case["error"] = json!(code);
                case["why"] = json!(why);
                case["our_message"] = json!(e.to_string());
            }
            (wanted, got) => {
                bail!("{name}: meant to be {wanted:?}, our verifier says {:?}", got.map(|v| v.statement()))
            }
        }
        self.cases.push(case);
        Ok(())
    }
}

fn answer_positions(v: &proof::Verified) -> Vec<u64> {
    v.claim.positions()
}

fn check(bytes: &[u8], key_hex: &str, expect: &Value) -> Result<proof::Verified, VerifyError> {
    let mut k = [0u8; 32];
    hex::decode_to_slice(key_hex, &mut k).map_err(|_| VerifyError::BadLedgerKey)?;
    let key = ed25519_dalek::VerifyingKey::from_bytes(&k).map_err(|_| VerifyError::BadLedgerKey)?;
    let expect = Expect::from_json(expect).map_err(VerifyError::Range)?;
    proof::verify(bytes, &key, &expect)
}

fn range_expect(q: &Query) -> Value {
    let mut v = json!({
        "frame": q.frame,
        "box": [q.bounds.min_mm[0], q.bounds.min_mm[1], q.bounds.min_mm[2],
                q.bounds.max_mm[0], q.bounds.max_mm[1], q.bounds.max_mm[2]],
        "from_ns": q.from_ns, "to_ns": q.to_ns,
    });
    if q.filters_kinds() {
        let names: Vec<&str> =
            Kind::ALL.iter().filter(|k| q.asks_kind(k.code())).map(|k| k.as_str()).collect();
        v["kinds"] = json!(names);
    }
    if let Some(subject) = &q.subject {
        v["subject"] = json!(subject);
    }
    v
}

fn range_of(file: &mut ProofFile) -> &mut RangeProof {
    match &mut file.proof {
        Proof::Range { range, .. } | Proof::Omission { range, .. } => range,
        _ => unreachable!("a range proof"),
    }
}

fn main() -> Result<()> {
    let out =
        std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("tests/conformance"));
    std::fs::create_dir_all(&out)?;
    for entry in std::fs::read_dir(&out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "sionproof") {
            std::fs::remove_file(path)?;
        }
    }
    let tmp = tempfile::tempdir()?;
    let mut memory = Memory::options(tmp.path().join("m")).agent("fleet/robot-7").create()?;
    let mut atoms: Vec<Atom> = Warehouse::new(WarehouseConfig::default()).take(3000).collect();
    // A revision of atom 10, so there is a link list to prove.
    let target = atoms[10].id();
    let mut revision = AtomParts::new(
        Kind::Revision,
        "map",
        BoxMm { min_mm: [0; 3], max_mm: [0; 3] },
        Interval { from_ns: atoms[10].parts().valid.from_ns, to_ns: atoms[10].parts().valid.to_ns },
        Permille(800),
    );
    revision.links = vec![Link { rel: LinkRel::Supersedes, target }];
    revision.subject = atoms[10].parts().subject.clone();
    atoms.push(Atom::new(revision)?);
    memory.remember(atoms[..2000].to_vec())?;
    memory.commit(false)?;
    memory.remember(atoms[2000..].to_vec())?;
    memory.commit(false)?;
    let ledger_key = hex::encode(memory.ledger().public_key().to_bytes());
    let size = memory.committed().head.size;
    let mut suite = Suite { dir: out.clone(), ledger_key: ledger_key.clone(), cases: Vec::new() };

    // --- range proofs
    let a = atoms[42].parts().clone();
    let pad = 20_000;
    let bounds = BoxMm {
        min_mm: [a.bounds.min_mm[0] - pad, a.bounds.min_mm[1] - pad, a.bounds.min_mm[2] - 5_000],
        max_mm: [a.bounds.max_mm[0] + pad, a.bounds.max_mm[1] + pad, a.bounds.max_mm[2] + 5_000],
    };
    let q = Query::new("map", bounds, a.valid.from_ns - 600_000_000_000, a.valid.to_ns + 600_000_000_000)?;
    let range = memory.prove_range(&q, None)?;
    let n = match &range.proof {
        Proof::Range { range, .. } => range.atoms.len(),
        _ => 0,
    };
    if n < 2 {
        bail!("the range query answers {n} atoms; the suite wants a few");
    }
    suite.case("range", &range.encode(), range_expect(&q).tap_at_least(size), Ok(()))?;
    let empty_q = Query::new("map", BoxMm { min_mm: [-9_000_000; 3], max_mm: [-8_000_000; 3] }, 0, 1)?;
    let empty = memory.prove_range(&empty_q, None)?;
    suite.case("range-empty", &empty.encode(), range_expect(&empty_q), Ok(()))?;
    let absent_q = Query::new("no_such_frame", bounds, q.from_ns, q.to_ns)?;
    let absent = memory.prove_range(&absent_q, None)?;
    suite.case("range-absent-frame", &absent.encode(), range_expect(&absent_q), Ok(()))?;
    let instant_q = Query::new("map", bounds, a.valid.from_ns, a.valid.from_ns)?;
    let instant = memory.prove_range(&instant_q, None)?;
    let mut instant_expect = range_expect(&instant_q);
    instant_expect["to_ns"] = json!(a.valid.from_ns); // asked as an instant: from = to
    suite.case("range-instant", &instant.encode(), instant_expect, Ok(()))?;
    let older = memory.prove_range(&q, Some(2000))?;
    suite.case("range-as-of-older-head", &older.encode(), range_expect(&q), Ok(()))?;

    // The question, not only the proof.
    let smaller = BoxMm {
        min_mm: [a.bounds.min_mm[0] - 1, a.bounds.min_mm[1] - 1, a.bounds.min_mm[2]],
        max_mm: a.bounds.max_mm,
    };
    let small_q = Query::new("map", smaller, q.from_ns, q.to_ns)?;
    let small = memory.prove_range(&small_q, None)?;
    suite.case(
        "range-for-a-smaller-box",
        &small.encode(),
        range_expect(&q),
        Err(("other_question", "a valid, complete proof for a smaller box than the one asked")),
    )?;
    let short_q = Query::new("map", bounds, q.from_ns, q.from_ns + 1_000_000_000)?;
    let short = memory.prove_range(&short_q, None)?;
    suite.case(
        "range-for-a-shorter-interval",
        &short.encode(),
        range_expect(&q),
        Err(("other_question", "a valid, complete proof for a shorter interval than the one asked")),
    )?;
    suite.case(
        "range-older-than-asked",
        &older.encode(),
        range_expect(&q).tap_at_least(size),
        Err(("stale_head", "valid as of 2000 atoms; the reader asked for a head of at least the latest")),
    )?;
    suite.case_with_key(
        "range-other-ledger",
        &range.encode(),
        range_expect(&q),
        Err(("wrong_ledger", "attested by a ledger other than the one the reader trusts")),
        Some(&hex::encode(ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key().to_bytes())),
    )?;
    let mut unattested = range.clone();
    unattested.attestation = None;
    suite.case(
        "range-unattested",
        &unattested.encode(),
        range_expect(&q),
        Err(("unattested", "no ledger attestation, and the reader names a ledger key")),
    )?;

    // About some kinds only: the walk passes over the other kinds' buckets whole.
    let kind_q = q.clone().with_kinds(1 << Kind::Observation.code())?;
    let of_kind = memory.prove_range(&kind_q, None)?;
    let of_kind_n = match &of_kind.proof {
        Proof::Range { range, .. } => range.atoms.len(),
        _ => 0,
    };
    if of_kind_n == 0 || of_kind_n >= n {
        bail!("the observations in the box are {of_kind_n} of {n} atoms; the suite wants some, not all");
    }
    suite.case("range-of-a-kind", &of_kind.encode(), range_expect(&kind_q), Ok(()))?;
    suite.case(
        "range-of-a-kind-asked-of-every-kind",
        &of_kind.encode(),
        range_expect(&q),
        Err((
            "other_question",
            "a complete answer about observations only; the reader asked about every kind",
        )),
    )?;
    let mut m = of_kind.clone();
    range_of(&mut m).query = q.clone();
    suite.case(
        "range-of-a-kind-widened-to-every-kind",
        &m.encode(),
        range_expect(&q),
        Err(("range", "the file's question widened to every kind after proving: a subtree of poses passed over meets it")),
    )?;
    let mut m = of_kind.clone();
    let pruned = range_of(&mut m).answer.short.iter_mut().flatten().find_map(|s| match s {
        Step::Pruned(s) if s.bbox.meets(&kind_q) => Some(s),
        _ => None,
    });
    let Some(pruned) = pruned else { bail!("no bucket of another kind was passed over in the box") };
    pruned.tally.count += 1;
    suite.case(
        "range-of-a-kind-tally-changed",
        &m.encode(),
        range_expect(&kind_q),
        Err((
            "index_root",
            "the count in a passed-over subtree's tally changed: tallies are hashed, the index root differs",
        )),
    )?;

    // About one subject (index version 4): the walk is of the subject's own tree.
    let subject = atoms[10].parts().subject.clone();
    let about_q = Query::new(
        &atoms[10].parts().frame,
        BoxMm { min_mm: [-10_000_000, -10_000_000, -100_000], max_mm: [10_000_000, 10_000_000, 100_000] },
        // Every time the memory holds, in whole seconds: a browser reads JSON numbers as
        // doubles, exact only for such (i64::MAX is not).
        0,
        4_000_000_000_000_000_000,
    )?
    .with_subject(&subject)?;
    let about = memory.prove_range(&about_q, None)?;
    let about_n = match &about.proof {
        Proof::Range { range, .. } => range.atoms.len(),
        _ => 0,
    };
    if about_n < 2 {
        bail!("{subject:?} has {about_n} atoms in its frame; the suite wants a few");
    }
    suite.case("range-about-a-subject", &about.encode(), range_expect(&about_q), Ok(()))?;
    let mut every_subject = about_q.clone();
    every_subject.subject = None;
    suite.case(
        "range-about-a-subject-asked-of-every-subject",
        &about.encode(),
        range_expect(&every_subject),
        Err(("other_question", "a complete answer about one subject; the reader asked about every subject")),
    )?;
    let mut m = about.clone();
    if let sion_verify::index::Places::Subject(place) = &mut range_of(&mut m).answer.places
        && let Some(step) = place.path.first_mut()
    {
        step.sibling[0] ^= 1;
    } else {
        bail!("the places map has one subject; the suite wants a path");
    }
    suite.case(
        "range-about-a-subject-place-path-flipped",
        &m.encode(),
        range_expect(&about_q),
        Err(("index_root", "a sibling on the path to the subject's place flipped: the index root differs")),
    )?;
    let mut m = about.clone();
    let other_subject = "nobody-at-all";
    range_of(&mut m).query = about_q.clone().with_subject(other_subject)?;
    range_of(&mut m).atoms.clear();
    suite.case(
        "range-about-a-subject-said-of-another",
        &m.encode(),
        json!({}),
        Err(("range", "the subject's walk and place, said to be another subject's: its answer's atoms are gone, and the walk hits them")),
    )?;
    let nobody_q = about_q.clone().with_subject(other_subject)?;
    let nobody = memory.prove_range(&nobody_q, None)?;
    suite.case("range-about-an-absent-subject", &nobody.encode(), range_expect(&nobody_q), Ok(()))?;
    let count_about = memory.prove_count(&about_q, None)?;
    suite.case(
        "count-about-a-subject",
        &count_about.encode(),
        json!({ "count": range_expect(&about_q) }),
        Ok(()),
    )?;
    let latest_about = memory.prove_latest(&about_q, None)?;
    suite.case(
        "latest-about-a-subject",
        &latest_about.encode(),
        json!({ "latest": range_expect(&about_q) }),
        Ok(()),
    )?;

    // Mutations of the valid range proof.
    let mut m = range.clone();
    range_of(&mut m).atoms.remove(0);
    suite.case(
        "range-answer-dropped",
        &m.encode(),
        range_expect(&q),
        Err(("range", "an answer atom is left out: the walk still hits it")),
    )?;
    let mut m = range.clone();
    let extra = range_of(&mut m).atoms[0].clone();
    range_of(&mut m).atoms.insert(0, extra);
    suite.case(
        "range-answer-duplicated",
        &m.encode(),
        range_expect(&q),
        Err(("range", "answer positions are not strictly ascending")),
    )?;
    let mut m = range.clone();
    range_of(&mut m).atoms.swap(0, 1);
    suite.case(
        "range-answer-swapped",
        &m.encode(),
        range_expect(&q),
        Err(("range", "answer positions out of order")),
    )?;
    let mut m = range.clone();
    range_of(&mut m).query.bounds.max_mm[0] += 1_000_000;
    let widened = range_of(&mut m).query.clone();
    suite.case(
        "range-query-widened",
        &m.encode(),
        range_expect(&widened),
        Err(("range", "the query in the file widened after proving: a pruned subtree now meets it")),
    )?;
    let mut m = range.clone();
    range_of(&mut m).query.bounds.min_mm[0] += 10_000;
    range_of(&mut m).query.bounds.max_mm[0] -= 10_000;
    let narrowed = range_of(&mut m).query.clone();
    suite.case(
        "range-query-narrowed",
        &m.encode(),
        range_expect(&narrowed),
        Err(("range", "the query in the file narrowed after proving: an answer atom no longer answers it")),
    )?;
    let mut m = range.clone();
    range_of(&mut m).answer.links_root[0] ^= 1;
    suite.case(
        "range-links-root-flipped",
        &m.encode(),
        range_expect(&q),
        Err(("index_root", "a bit of the link map's root flipped: the index root differs")),
    )?;
    let mut bytes = range.encode();
    bytes.push(0);
    suite.case(
        "range-trailing-byte",
        &bytes,
        range_expect(&q),
        Err(("format", "a byte after the end of the encoding")),
    )?;
    let bytes = range.encode();
    suite.case(
        "range-truncated",
        &bytes[..bytes.len() - 1],
        range_expect(&q),
        Err(("format", "the file ends early")),
    )?;
    // Version 2 headers (a ledger with cells): the cells root is signed with the rest, and a
    // header read as version 1 leaves 32 bytes the file's next field does not take.
    let mut bytes = range.encode();
    bytes[8 + 1 + 32 + 89] ^= 0x01; // the first byte of the header's cells root
    suite.case(
        "range-cells-root-flipped",
        &bytes,
        range_expect(&q),
        Err(("attestation", "the header's cells root changed: the ledger's signature does not hold")),
    )?;
    let mut bytes = range.encode();
    bytes[8 + 1 + 32] = 1; // the header's version byte
    suite.case(
        "range-header-version-changed",
        &bytes,
        range_expect(&q),
        Err((
            "format",
            "a version 2 header read as version 1: the bytes that follow are not a signature and a log",
        )),
    )?;
    let mut bytes = range.encode();
    bytes[..8].copy_from_slice(b"SIONPRF1");
    suite.case(
        "range-first-format",
        &bytes,
        range_expect(&q),
        Err(("format", "the first proof format (SIONPRF1) is refused")),
    )?;
    let header_len = range.attestation.as_ref().map_or(89, |a| a.state.header.header.len());
    let mut bytes = range.encode();
    bytes[8 + 1 + 32 + header_len] ^= 0x80; // the first byte of the ledger's signature
    suite.case(
        "range-signature-flipped",
        &bytes,
        range_expect(&q),
        Err(("attestation", "the Pulse header's signature does not hold")),
    )?;
    let mut m = range.clone();
    if let Proof::Range { head, .. } = &mut m.proof {
        head.size -= 1;
    }
    suite.case(
        "range-head-mismatch",
        &m.encode(),
        range_expect(&q),
        Err(("head_mismatch", "the head named differs from the one the ledger attests")),
    )?;
    let mut m = range.clone();
    let first = range_of(&mut m).atoms[0].0;
    let atom = Atom::decode(&range_of(&mut m).atoms[0].1)?;
    let mut parts = atom.into_parts();
    parts.confidence = Permille(if parts.confidence.0 == 1000 { 999 } else { parts.confidence.0 + 1 });
    range_of(&mut m).atoms[0] = (first, Atom::new(parts)?.bytes().to_vec());
    suite.case(
        "range-atom-edited",
        &m.encode(),
        range_expect(&q),
        Err(("index_root", "an answer atom's confidence edited: its id, and so the root, differ")),
    )?;

    // Several faults in one file: the earliest check decides (docs/PROOFS.md, "Which refusal,
    // when several apply").
    let mut m = range.clone();
    let first = range_of(&mut m).atoms[0].0;
    let mut parts = Atom::decode(&range_of(&mut m).atoms[0].1)?.into_parts();
    parts.confidence = Permille(if parts.confidence.0 == 1000 { 999 } else { parts.confidence.0 + 1 });
    range_of(&mut m).atoms[0] = (first, Atom::new(parts)?.bytes().to_vec());
    let mut bytes = m.encode();
    bytes[8 + 1 + 32 + header_len] ^= 0x80;
    suite.case(
        "range-atom-edited-and-signature-flipped",
        &bytes,
        range_expect(&q),
        Err((
            "attestation",
            "an answer atom edited and the header's signature flipped: the signature is checked first",
        )),
    )?;
    let mut m = range.clone();
    range_of(&mut m).atoms.swap(0, 1);
    range_of(&mut m).atoms[1].1 = vec![0xFF; 3];
    suite.case(
        "range-out-of-order-then-undecodable",
        &m.encode(),
        range_expect(&q),
        Err((
            "atom",
            "answer atoms out of order, the second not an atom: a range proof decodes every atom first",
        )),
    )?;
    let mut m = range.clone();
    if let Some(a) = m.attestation.as_mut() {
        a.ledger_key = [0; 32];
        a.ledger_key[0] = 2; // y = 2: no curve point has it
    }
    suite.case(
        "range-ledger-key-not-a-point",
        &m.encode(),
        range_expect(&q),
        Err((
            "wrong_ledger",
            "the file's ledger key is not an ed25519 key, and not the reader's: the reader's key is compared first",
        )),
    )?;
    let mut bytes = range.encode();
    bytes[8 + 1 + 32] = 3; // the attested header's version byte
    suite.case(
        "range-header-version-3",
        &bytes,
        range_expect(&q),
        Err(("format", "the attested Pulse header has version 3: it does not decode")),
    )?;
    let mut m = range.clone();
    {
        let r = range_of(&mut m);
        let frames = r.answer.frames;
        if let FrameWitness::Present { index, .. } = &mut r.answer.frame {
            *index = frames;
        }
    }
    suite.case(
        "range-frame-index-beyond-frames",
        &m.encode(),
        range_expect(&q),
        Err(("range", "the frame's leaf index is the frames tree's size: no such leaf")),
    )?;
    let mut m = absent.clone();
    if let FrameWitness::Absent { left, right } = &mut range_of(&mut m).answer.frame
        && let Some(n) = left.as_mut().or(right.as_mut())
    {
        n.entry[0] = u8::MAX; // the name's length runs past the entry's end
    }
    suite.case(
        "range-absent-frame-neighbour-unreadable",
        &m.encode(),
        range_expect(&absent_q),
        Err(("range", "a neighbour's frame entry does not read: its name's length runs past its end")),
    )?;

    let mut m = range.clone();
    range_of(&mut m).query.frame = "map\u{e9}".into();
    suite.case(
        "range-query-frame-not-a-frame",
        &m.encode(),
        json!({}),
        Err(("format", "the query names a frame outside [A-Za-z0-9_./-]")),
    )?;
    let mut m = range.clone();
    range_of(&mut m).query.bounds.min_mm[2] = range_of(&mut m).query.bounds.max_mm[2] + 1;
    suite.case(
        "range-query-corners-reversed",
        &m.encode(),
        json!({}),
        Err(("format", "the query box's minimum is above its maximum on z")),
    )?;
    let mut m = range.clone();
    {
        // A chain of 257 interior nodes, each with a pruned right child, over one group.
        let r = range_of(&mut m);
        let walk = r.answer.short.clone().or(r.answer.long.clone()).unwrap_or_default();
        let pruned = walk.iter().find(|s| matches!(s, Step::Pruned(_))).cloned();
        let group = walk.iter().find(|s| matches!(s, Step::Group(_))).cloned();
        if let (Some(Step::Pruned(p)), Some(group)) = (pruned, group) {
            let mut deep = vec![Step::Interior(p.bbox); 257];
            deep.push(group);
            deep.extend(std::iter::repeat_n(Step::Pruned(p), 257));
            r.answer.short = Some(deep);
        }
    }
    suite.case(
        "range-walk-too-deep",
        &m.encode(),
        json!({}),
        Err(("format", "a walk deeper than 256 levels")),
    )?;

    // --- count proofs (kind 9): a wide box, so that subtrees lie wholly inside it
    let wide = Query::new(
        "map",
        BoxMm { min_mm: [-10_000_000, -10_000_000, -100_000], max_mm: [10_000_000, 10_000_000, 100_000] },
        q.from_ns,
        q.to_ns,
    )?;
    let count = memory.prove_count(&wide, None)?;
    let count_expect = json!({ "count": range_expect(&wide) });
    suite.case("count", &count.encode(), count_expect.clone(), Ok(()))?;
    let count_of_kind_q = wide.clone().with_kinds(1 << Kind::Observation.code())?;
    let count_of_kind = memory.prove_count(&count_of_kind_q, None)?;
    suite.case(
        "count-of-a-kind",
        &count_of_kind.encode(),
        json!({ "count": range_expect(&count_of_kind_q) }),
        Ok(()),
    )?;
    suite.case(
        "count-asked-as-range",
        &count.encode(),
        range_expect(&wide),
        Err(("other_question", "a count proof is not the range answer the reader asked for")),
    )?;
    let mut m = count.clone();
    if let Proof::Count { count, .. } = &mut m.proof {
        count.counted.count += 1;
    }
    suite.case(
        "count-one-more",
        &m.encode(),
        count_expect.clone(),
        Err(("range", "the file states one atom more than its walk shows")),
    )?;
    let mut m = count.clone();
    let mut stretched = false;
    if let Proof::Count { count, .. } = &mut m.proof
        && let Some(s) = count.answer.short.iter_mut().flatten().find_map(|s| match s {
            Step::Whole(s) => Some(s),
            _ => None,
        })
    {
        s.bbox.max_mm[0] = wide.bounds.max_mm[0] + 1;
        stretched = true;
    }
    if !stretched {
        bail!("the count took no subtree whole; the suite wants one");
    }
    // A count proof in a file of the older magic: version 2 has no kind 9.
    let mut bytes = count.encode();
    bytes[..8].copy_from_slice(b"SIONPRF2");
    suite.case(
        "count-in-a-version-2-file",
        &bytes,
        count_expect.clone(),
        Err(("format", "a count proof (kind 9) in a SIONPRF2 file: index version 2 has none")),
    )?;
    // A range proof that takes a subtree whole, as a count proof would: refused.
    let mut m = of_kind.clone();
    let passed = range_of(&mut m).answer.short.iter_mut().flatten().find(|s| matches!(s, Step::Pruned(_)));
    let Some(step) = passed else { bail!("the range proof passed over nothing; the suite wants a subtree") };
    if let Step::Pruned(s) = step {
        *step = Step::Whole(*s);
    }
    suite.case(
        "range-with-a-subtree-taken-whole",
        &m.encode(),
        range_expect(&kind_q),
        Err(("range", "a range proof takes no subtree whole (tag 3 is a count proof's)")),
    )?;
    suite.case(
        "count-whole-reaching-outside",
        &m.encode(),
        count_expect.clone(),
        Err(("range", "a subtree taken whole whose box reaches past the question's")),
    )?;

    // --- latest and nearest proofs (kinds 7 and 8)
    let latest = memory.prove_latest(&q, None)?;
    let latest_expect = json!({ "latest": range_expect(&q) });
    suite.case("latest", &latest.encode(), latest_expect.clone(), Ok(()))?;
    let latest_of_kind = memory.prove_latest(&kind_q, None)?;
    suite.case(
        "latest-of-a-kind",
        &latest_of_kind.encode(),
        json!({ "latest": range_expect(&kind_q) }),
        Ok(()),
    )?;
    let none = memory.prove_latest(&empty_q, None)?;
    suite.case("latest-none", &none.encode(), json!({ "latest": range_expect(&empty_q) }), Ok(()))?;
    suite.case(
        "latest-for-another-box",
        &none.encode(),
        latest_expect.clone(),
        Err(("other_question", "a valid latest proof of another box than the one asked")),
    )?;
    suite.case(
        "latest-asked-as-range",
        &latest.encode(),
        range_expect(&q),
        Err(("other_question", "a latest proof is not the range answer the reader asked for")),
    )?;
    let best = match &latest.proof {
        Proof::Latest { latest, .. } => latest.atom.as_ref().map(|(p, _)| *p),
        _ => None,
    };
    let Some(best) = best else { bail!("the latest question answers nothing; the suite wants an atom") };
    let earlier = (0..size).find(|&p| p != best && q.matches(atoms[p as usize].parts()));
    let Some(earlier) = earlier else { bail!("the latest question has one atom; the suite wants two") };
    let mut m = latest.clone();
    if let Proof::Latest { latest, .. } = &mut m.proof {
        latest.atom = Some((earlier, atoms[earlier as usize].bytes().to_vec()));
        latest.answer.positions = vec![earlier];
    }
    suite.case(
        "latest-earlier-atom",
        &m.encode(),
        latest_expect.clone(),
        Err((
            "range",
            "an earlier atom given as the latest: the walk passes over where it is, or shows a later one",
        )),
    )?;
    let mut m = latest.clone();
    if let Proof::Latest { latest, .. } = &mut m.proof {
        latest.atom = None;
        latest.answer.positions.clear();
    }
    suite.case(
        "latest-emptied",
        &m.encode(),
        latest_expect,
        Err(("range", "the answer removed, claiming nothing answers: the walk still hits the latest atom")),
    )?;

    let a = atoms[42].parts();
    let near_q = proof::NearQuery::new(
        "map",
        [a.bounds.min_mm[0] + 700, a.bounds.min_mm[1] - 1_300, a.bounds.min_mm[2]],
        a.valid.from_ns,
        a.valid.from_ns,
        5,
    )
    .map_err(anyhow::Error::msg)?;
    let near_expect = |q: &proof::NearQuery| {
        json!({ "nearest": {
            "frame": q.frame, "point": q.point_mm, "from_ns": q.from_ns, "to_ns": q.to_ns, "k": q.k,
        }})
    };
    let nearest = memory.prove_nearest(&near_q, None)?;
    let found = match &nearest.proof {
        Proof::Nearest { nearest, .. } => nearest.atoms.len(),
        _ => 0,
    };
    if found < 2 {
        bail!("the nearest question answers {found} atoms; the suite wants a few");
    }
    suite.case("nearest", &nearest.encode(), near_expect(&near_q), Ok(()))?;
    let far_q = proof::NearQuery::new("map", [0, 0, 0], 0, 0, 3).map_err(anyhow::Error::msg)?;
    let far = memory.prove_nearest(&far_q, None)?;
    suite.case("nearest-none-then", &far.encode(), near_expect(&far_q), Ok(()))?;
    suite.case(
        "nearest-for-another-point",
        &far.encode(),
        near_expect(&near_q),
        Err(("other_question", "a valid nearest proof of another point and instant than asked")),
    )?;
    let mut m = nearest.clone();
    if let Proof::Nearest { nearest, .. } = &mut m.proof {
        nearest.atoms.swap(0, 1);
    }
    suite.case(
        "nearest-misordered",
        &m.encode(),
        near_expect(&near_q),
        Err(("range", "the answer not nearest first (two swapped)")),
    )?;
    let mut m = nearest.clone();
    if let Proof::Nearest { nearest, .. } = &mut m.proof {
        let dropped = nearest.atoms.pop().map(|(p, _)| p);
        nearest.answer.positions.retain(|p| Some(*p) != dropped);
    }
    suite.case(
        "nearest-farthest-dropped",
        &m.encode(),
        near_expect(&near_q),
        Err(("range", "the k-th answer removed: the walk still hits it")),
    )?;

    // --- subject and link proofs
    let subject = atoms[10].parts().subject.clone();
    let subj = memory.prove_list(ListKey::Subject(subject.clone()), None)?;
    suite.case("subject", &subj.encode(), json!({ "subject": subject }), Ok(()))?;
    let nobody = memory.prove_list(ListKey::Subject("nobody-at-all".into()), None)?;
    suite.case("subject-absent", &nobody.encode(), json!({ "subject": "nobody-at-all" }), Ok(()))?;
    suite.case(
        "subject-other-subject",
        &nobody.encode(),
        json!({ "subject": subject }),
        Err((
            "other_question",
            "a valid proof that nobody-at-all has no atoms, for a reader who asked about another subject",
        )),
    )?;
    let mut m = subj.clone();
    if let Proof::List { list, .. } = &mut m.proof {
        list.atoms.pop();
    }
    suite.case(
        "subject-answer-dropped",
        &m.encode(),
        json!({ "subject": subject }),
        Err(("list", "the answer lacks an atom of the committed list")),
    )?;
    let mut m = subj.clone();
    if let Proof::List { list, .. } = &mut m.proof {
        if list.atoms.len() < 2 {
            bail!("the subject proof has {} atoms, the suite needs two", list.atoms.len());
        }
        list.atoms.swap(0, 1);
        list.atoms[1].1 = vec![0xFF; 3];
    }
    suite.case(
        "subject-out-of-order-then-undecodable",
        &m.encode(),
        json!({ "subject": subject }),
        Err((
            "list",
            "answer atoms out of order, the second not an atom: a list proof checks each position first",
        )),
    )?;
    let mut m = subj.clone();
    if let Proof::List { list, .. } = &mut m.proof {
        list.key = ListKey::Subject("line\nbreak".into());
    }
    suite.case(
        "subject-control-character",
        &m.encode(),
        json!({}),
        Err(("format", "the subject holds a control character (U+000A)")),
    )?;
    let links = memory.prove_links(target, None)?;
    suite.case("links", &links.encode(), json!({ "links_to": target.to_string() }), Ok(()))?;

    // --- inclusion, consistency, omission
    let inclusion = memory.prove_inclusion(1234)?;
    suite.case("inclusion", &inclusion.encode(), json!({ "position": 1234 }), Ok(()))?;
    suite.case(
        "inclusion-other-position",
        &inclusion.encode(),
        json!({ "position": 1235 }),
        Err(("other_question", "proves position 1234, the reader asked about 1235")),
    )?;
    suite.case(
        "inclusion-other-log",
        &inclusion.encode(),
        json!({ "position": 1234, "log": 1 }),
        Err(("other_log", "proves an atom of log 0, the reader asked about log 1")),
    )?;
    let Proof::Inclusion { head: at, .. } = &inclusion.proof else { bail!("an inclusion proof") };
    let (at_size, at_root) = (at.size, hex::encode(at.root));
    suite.case(
        "inclusion-at-head",
        &inclusion.encode(),
        json!({ "position": 1234, "head": { "size": at_size, "root": at_root } }),
        Ok(()),
    )?;
    suite.case(
        "inclusion-other-head",
        &inclusion.encode(),
        json!({ "position": 1234, "head": { "size": at_size, "root": hex::encode([0x11; 32]) } }),
        Err(("other_head", "as of a head of the same size but another root than the one the reader holds")),
    )?;
    suite.case(
        "inclusion-other-log-and-head",
        &inclusion.encode(),
        json!({ "position": 1235, "log": 1, "head": { "size": at_size - 1, "root": at_root } }),
        Err(("other_log", "another log, another head and another position asked: the log is checked first")),
    )?;
    let mut m = inclusion.clone();
    if let Proof::Inclusion { path, .. } = &mut m.proof {
        path[0][0] ^= 1;
    }
    suite.case(
        "inclusion-path-flipped",
        &m.encode(),
        json!({ "position": 1234 }),
        Err(("merkle", "a bit of the inclusion path flipped")),
    )?;
    let consistency = memory.prove_consistency(2000)?;
    suite.case(
        "consistency",
        &consistency.encode(),
        json!({ "extends": { "size": 2000, "root": hex::encode(memory.version(Some(2000))?.head.root) } }),
        Ok(()),
    )?;
    let mut m = consistency.clone();
    if let Proof::Consistency { old_size, path, .. } = &mut m.proof {
        *old_size = 0;
        path.clear();
    }
    suite.case(
        "consistency-from-zero",
        &m.encode(),
        json!({}),
        Err(("merkle", "a consistency proof from size 0 proves nothing and is refused")),
    )?;
    time_cases(&mut suite, &memory)?;
    witness_cases(&mut suite, &memory)?;
    let ledger_secret = sion_memory::ledger::read_key(&tmp.path().join("m/ledger/key"))?;
    checkpoint_cases(&mut suite, &memory, &ledger_secret)?;
    omission_cases(&mut suite, &mut memory, &atoms)?;
    cell_omission_cases(&mut suite, &memory, &atoms, tmp.path())?;

    // Proofs made under index version 2, kept as they were made: old proofs go on checking.
    let v2: Value = serde_json::from_slice(&std::fs::read(out.join("v2/manifest.json"))?)?;
    suite.cases.extend(v2["cases"].as_array().cloned().unwrap_or_default());
    let v3: Value = serde_json::from_slice(&std::fs::read(out.join("v3/manifest.json"))?)?;
    suite.cases.extend(v3["cases"].as_array().cloned().unwrap_or_default());
    // And files attested by version 1 headers (a ledger made before cells).
    let h1: Value = serde_json::from_slice(&std::fs::read(out.join("h1/manifest.json"))?)?;
    suite.cases.extend(h1["cases"].as_array().cloned().unwrap_or_default());

    let manifest = json!({
        "suite": "sion_memory proof conformance",
        "format": "SIONPRF4, and SIONPRF3 in v3/ and SIONPRF2 in v2/ (docs/PROOFS.md); version 2 Pulse headers (with cells), and version 1 in h1/ (docs/LEDGER.md)",
        "about": "Each case: a proof file, the ledger key a reader trusts, what the reader asked (expect: docs/PROOFS.md, \"What the reader asked\"), and the verdict a verifier must reach: valid (with the answer's positions) or invalid (with the refusal's code, docs/PROOFS.md \"Refusals\", and why). our_message is what the Rust verifier says, for information only.",
        "ledger_key": ledger_key,
        "cases": suite.cases,
    });
    write_manifest(&out.join("manifest.json"), &manifest)?;
    println!("wrote {} cases to {}", manifest["cases"].as_array().map_or(0, Vec::len), out.display());
    Ok(())
}

/// Cosigned attestations (`attested = 2`): witnesses' cosignatures of the attested Pulse, and a
/// reader's witnesses and quorum.
fn witness_cases(suite: &mut Suite, memory: &Memory) -> Result<()> {
    use ed25519_dalek::SigningKey;
    use sion_memory::ledger::Cosignature;
    let witness = |seed: u8| SigningKey::from_bytes(&[seed; 32]);
    let (w1, w2, w3) = (witness(0x51), witness(0x52), witness(0x53));
    let hex_of = |k: &SigningKey| hex::encode(k.verifying_key().to_bytes());
    let (h1, h2, h3) = (hex_of(&w1), hex_of(&w2), hex_of(&w3));
    let plain = memory.prove_inclusion(1234)?;
    let attestation = plain.attestation.clone().context("attested")?;
    let header = attestation.state.header.header;
    let ledger = attestation.ledger_key;
    let mut cosigned = plain.clone();
    if let Some(a) = cosigned.attestation.as_mut() {
        a.cosignatures =
            vec![Cosignature::sign(&w1, &ledger, &header), Cosignature::sign(&w2, &ledger, &header)];
    }
    let bytes = cosigned.encode();
    // A transaction-time proof cosigned (`attested = 2`).
    let mut time = memory.prove_recorded(1234)?;
    if let Some(a) = time.attestation.as_mut() {
        let header = a.state.header.header;
        a.cosignatures = vec![Cosignature::sign(&w1, &ledger, &header)];
    }
    suite.case(
        "time-cosigned",
        &time.encode(),
        json!({ "recorded": 1234, "witnesses": [h1.clone()], "quorum": 1 }),
        Ok(()),
    )?;
    let both = json!({ "position": 1234, "witnesses": [h1, h2], "quorum": 2 });
    suite.case("inclusion-cosigned", &bytes, both.clone(), Ok(()))?;
    suite.case(
        "inclusion-cosigned-one-of-three",
        &bytes,
        json!({ "position": 1234, "witnesses": [h1, h3, h2], "quorum": 1 }),
        Ok(()),
    )?;
    suite.case(
        "inclusion-cosigned-quorum-unmet",
        &bytes,
        json!({ "position": 1234, "witnesses": [h1, h2, h3], "quorum": 3 }),
        Err(("witnesses", "two of the three witnesses named cosigned; the reader's quorum is three")),
    )?;
    suite.case(
        "inclusion-cosigned-by-strangers",
        &bytes,
        json!({ "position": 1234, "witnesses": [h3], "quorum": 1 }),
        Err(("witnesses", "cosigned, but by witnesses the reader does not name")),
    )?;
    suite.case(
        "inclusion-uncosigned-quorum",
        &plain.encode(),
        both.clone(),
        Err(("witnesses", "attested but not cosigned (attested = 1), and the reader requires a quorum")),
    )?;
    // The envelope: ledger key 32, the state proof, then u8 n and n × 96 bytes. Flip a bit of
    // the last cosignature's signature.
    let at = 9 + attestation_len(&plain);
    let mut m = bytes.clone();
    m[at + 1 + 96 + 32 + 10] ^= 1;
    suite.case(
        "inclusion-cosignature-flipped",
        &m,
        json!({ "position": 1234 }),
        Err((
            "attestation",
            "a cosignature the file carries does not hold, even for a reader naming no witness",
        )),
    )?;
    let mut other = plain.clone();
    if let Some(a) = other.attestation.as_mut() {
        // w1's cosignature of this Pulse number and header, but of another ledger's key.
        a.cosignatures = vec![Cosignature::sign(&w1, &[9; 32], &header)];
    }
    suite.case(
        "inclusion-cosigned-for-another-ledger",
        &other.encode(),
        json!({ "position": 1234 }),
        Err(("attestation", "the cosignature is over another ledger key than the attestation's")),
    )?;
    // Two cosignatures out of order: each file has one encoding, ascending witness keys.
    let mut sorted = cosigned.attestation.clone().context("attested")?.cosignatures;
    sorted.sort_by_key(|c| c.witness);
    let mut unordered = bytes[..at + 1].to_vec();
    for c in sorted.iter().rev() {
        c.put(&mut unordered);
    }
    unordered.extend_from_slice(&bytes[at + 1 + 192..]);
    suite.case(
        "inclusion-cosignatures-unordered",
        &unordered,
        json!({ "position": 1234 }),
        Err(("format", "cosignatures not in ascending order of witness key")),
    )?;
    let mut none = bytes[..at].to_vec();
    none.push(0);
    none.extend_from_slice(&bytes[at + 1 + 192..]);
    suite.case(
        "inclusion-cosigned-by-none",
        &none,
        json!({ "position": 1234 }),
        Err(("format", "attested = 2 with no cosignature")),
    )?;
    Ok(())
}

/// Attestations covered by a C2SP checkpoint (`attested` 3 and 4): the ledger's history of
/// Pulse headers as a checkpoint, cosigned (`cosignature/v1`) by C2SP witnesses, and a reader's
/// cosigners and quorum (docs/PROOFS.md, "Covered by a checkpoint").
fn checkpoint_cases(
    suite: &mut Suite,
    memory: &Memory,
    ledger_secret: &ed25519_dalek::SigningKey,
) -> Result<()> {
    use ed25519_dalek::SigningKey;
    use sion_memory::ledger::Cosignature;
    use sion_memory::merkle::{MemoryTree, Sha256, inclusion_path};
    use sion_memory::proof::Covering;
    use sion_verify::ledger::{Checkpoint, SignedNote, cosign_v1, origin_of, sign_checkpoint, witness_vkey};
    let witness = |seed: u8| SigningKey::from_bytes(&[seed; 32]);
    let (w1, w2, w3) = (witness(0x61), witness(0x62), witness(0x63));
    let names = ["witness.example/w1", "witness.example/w2", "witness.example/w3"];
    let vkey = |i: usize, k: &SigningKey| witness_vkey(names[i], &k.verifying_key().to_bytes());
    let (c1, c2, c3) = (vkey(0, &w1), vkey(1, &w2), vkey(2, &w3));
    let plain = memory.prove_inclusion(1234)?;
    let attestation = plain.attestation.clone().context("attested")?;
    let header = attestation.state.header.header;
    let ledger = attestation.ledger_key;
    // The history: every Pulse header so far, leaf n Pulse n's 89 bytes.
    let latest = memory.ledger().latest()?.header.number;
    let headers =
        (0..=latest).map(|n| Ok(memory.ledger().header(n)?.header.encode())).collect::<Result<Vec<_>>>()?;
    let tree = MemoryTree::<Sha256>::from_leaves(&headers);
    let checkpoint_of = |size: u64| -> Result<(Checkpoint, Vec<[u8; 32]>)> {
        let sub = MemoryTree::<Sha256>::from_leaves(&headers[..size as usize]);
        // Past its end, the path of its last leaf: a verifier must still refuse it.
        let leaf = header.number.min(size.saturating_sub(1));
        let path = inclusion_path::<Sha256, _>(&tree, leaf, size).unwrap_or_default();
        Ok((Checkpoint { origin: origin_of(&ledger), size, root: sub.root(), extensions: Vec::new() }, path))
    };
    let (checkpoint, path) = checkpoint_of(latest + 1)?;
    let cosign = |note: &mut SignedNote, who: &[(usize, &SigningKey)]| {
        for (i, k) in who {
            note.signatures.push(cosign_v1(k, names[*i], 1_767_225_600 + *i as u64, &note.text.clone()));
        }
    };
    let mut note = sign_checkpoint(ledger_secret, &checkpoint);
    cosign(&mut note, &[(0, &w1), (1, &w2)]);
    let covered = |note: SignedNote, path: Vec<[u8; 32]>, cosignatures: Vec<Cosignature>| {
        let mut f = plain.clone();
        if let Some(a) = f.attestation.as_mut() {
            a.checkpoint = Some(Covering { note, path });
            a.cosignatures = cosignatures;
        }
        f.encode()
    };
    let bytes = covered(note.clone(), path.clone(), Vec::new());
    let both = json!({ "position": 1234, "cosigners": [c1, c2], "cosigners_quorum": 2 });
    suite.case("inclusion-checkpoint", &bytes, both.clone(), Ok(()))?;
    suite.case(
        "inclusion-checkpoint-one-of-three",
        &bytes,
        json!({ "position": 1234, "cosigners": [c1, c3, c2], "cosigners_quorum": 1 }),
        Ok(()),
    )?;
    suite.case(
        "inclusion-checkpoint-quorum-unmet",
        &bytes,
        json!({ "position": 1234, "cosigners": [c1, c2, c3] }),
        Err((
            "witnesses",
            "two of the three C2SP witnesses named cosigned the checkpoint; the reader's quorum is all three",
        )),
    )?;
    suite.case(
        "inclusion-checkpoint-by-strangers",
        &bytes,
        json!({ "position": 1234, "cosigners": [c3] }),
        Err(("witnesses", "cosigned, but by C2SP witnesses the reader does not name")),
    )?;
    suite.case(
        "inclusion-not-covered-quorum",
        &plain.encode(),
        both.clone(),
        Err((
            "witnesses",
            "attested (attested = 1) but no checkpoint covers it, and the reader names C2SP witnesses",
        )),
    )?;
    // attested = 4: the ledger's own witnesses' cosignatures of the header too.
    let gw = SigningKey::from_bytes(&[0x51; 32]);
    let witnessed = covered(note.clone(), path.clone(), vec![Cosignature::sign(&gw, &ledger, &header)]);
    suite.case(
        "inclusion-checkpoint-and-cosigned",
        &witnessed,
        json!({
            "position": 1234,
            "witnesses": [hex::encode(gw.verifying_key().to_bytes())],
            "cosigners": [c2],
        }),
        Ok(()),
    )?;
    // The header's inclusion path in the history, one bit flipped.
    let mut flipped = path.clone();
    if let Some(first) = flipped.first_mut() {
        first[0] ^= 1;
    }
    suite.case(
        "inclusion-checkpoint-path-flipped",
        &covered(note.clone(), flipped, Vec::new()),
        json!({ "position": 1234 }),
        Err(("attestation", "the Pulse's header is not the checkpoint's leaf at its number (the path is altered), even for a reader naming no witness")),
    )?;
    // The same checkpoint, signed by another key than the attestation's ledger.
    let mut stranger = SignedNote { text: note.text.clone(), signatures: Vec::new() };
    stranger.signatures.push(sion_verify::ledger::note_signature(
        &SigningKey::from_bytes(&[0x77; 32]),
        &checkpoint.origin,
        &note.text,
    ));
    cosign(&mut stranger, &[(0, &w1), (1, &w2)]);
    suite.case(
        "inclusion-checkpoint-other-signer",
        &covered(stranger, path.clone(), Vec::new()),
        both.clone(),
        Err(("attestation", "the checkpoint is not signed by the attestation's ledger key under its origin")),
    )?;
    // A checkpoint the ledger signed, of the history before the attested Pulse: it does not
    // cover it.
    let (short, short_path) = checkpoint_of(header.number)?;
    let mut early = sign_checkpoint(ledger_secret, &short);
    cosign(&mut early, &[(0, &w1), (1, &w2)]);
    suite.case(
        "inclusion-checkpoint-before-the-pulse",
        &covered(early, short_path, Vec::new()),
        both.clone(),
        Err(("attestation", "the checkpoint's history ends before the attested Pulse")),
    )?;
    // Witness w2's cosignature line, one bit of its signature flipped.
    let mut bad = note.clone();
    if let Some(line) = bad.signatures.get_mut(2) {
        line.signature[20] ^= 1;
    }
    let bad = covered(bad, path.clone(), Vec::new());
    suite.case(
        "inclusion-checkpoint-cosignature-flipped",
        &bad,
        both.clone(),
        Err(("attestation", "a named C2SP witness's cosignature line on the checkpoint does not hold")),
    )?;
    suite.case(
        "inclusion-checkpoint-cosignature-flipped-unnamed",
        &bad,
        json!({ "position": 1234, "cosigners": [c1] }),
        Ok(()),
    )?;
    // A note whose body is not a checkpoint (no root hash line).
    let text = format!("{}\n{}\n", checkpoint.origin, checkpoint.size);
    let not_checkpoint = SignedNote {
        signatures: vec![sion_verify::ledger::note_signature(ledger_secret, &checkpoint.origin, &text)],
        text,
    };
    suite.case(
        "inclusion-checkpoint-not-a-checkpoint",
        &covered(not_checkpoint, path.clone(), Vec::new()),
        json!({ "position": 1234 }),
        Err(("format", "the note's text is not a checkpoint body (no root hash line)")),
    )?;
    // A transaction-time proof covered (`attested = 3`).
    let mut time = memory.prove_recorded(1234)?;
    let at = time.attestation.as_ref().context("attested")?.state.header.header;
    let time_path = inclusion_path::<Sha256, _>(&tree, at.number, latest + 1).unwrap_or_default();
    if let Some(a) = time.attestation.as_mut() {
        a.checkpoint = Some(Covering { note: note.clone(), path: time_path });
    }
    suite.case(
        "time-checkpoint",
        &time.encode(),
        json!({ "recorded": 1234, "cosigners": [c1], "cosigners_quorum": 1 }),
        Ok(()),
    )?;
    Ok(())
}

/// The bytes of a file's attestation after the `attested` byte: ledger key and state proof.
fn attestation_len(f: &ProofFile) -> usize {
    f.attestation.as_ref().map_or(0, |a| {
        let mut out = Vec::new();
        a.state.put(&mut out);
        32 + out.len()
    })
}

/// Transaction-time proofs (kind 6): when an atom was recorded, by the ledger's Pulses.
fn time_cases(suite: &mut Suite, memory: &Memory) -> Result<()> {
    let first = memory.prove_recorded(1234)?;
    suite.case("time", &first.encode(), json!({ "recorded": 1234 }), Ok(()))?;
    let second = memory.prove_recorded(2500)?;
    suite.case("time-second-commit", &second.encode(), json!({ "recorded": 2500 }), Ok(()))?;
    suite.case(
        "time-other-position",
        &first.encode(),
        json!({ "recorded": 1235 }),
        Err(("other_question", "proves when position 1234 was recorded, the reader asked about 1235")),
    )?;
    suite.case(
        "time-asked-as-inclusion",
        &first.encode(),
        json!({ "position": 1234 }),
        Err(("other_question", "a transaction-time proof answers when, not an inclusion question")),
    )?;
    let pulse_of = |f: &ProofFile| f.attestation.as_ref().map_or(0, |a| a.state.header.header.number);
    let (p1, p2) = (pulse_of(&first), pulse_of(&second));
    // Position 1234 claimed for the second commit's Pulse: the log held it the Pulse before.
    let mut m = second.clone();
    if let Proof::Recorded { position, atom, path, .. } = &mut m.proof {
        let inclusion = memory.prove_inclusion(1234)?;
        if let Proof::Inclusion { atom: a, path: p, .. } = inclusion.proof {
            (*position, *atom, *path) = (1234, a, p);
        }
    }
    suite.case(
        "time-covered-before",
        &m.encode(),
        json!({ "recorded": 1234 }),
        Err((
            "recorded_elsewhere",
            "position 1234 was already in the log at the Pulse before the one claimed",
        )),
    )?;
    // The state before taken from a Pulse that does not directly precede.
    let mut m = second.clone();
    if let Proof::Recorded { before, .. } = &mut m.proof {
        **before = memory.ledger().state_proof(memory.committed().id, p1 - 1)?;
    }
    suite.case(
        "time-not-consecutive",
        &m.encode(),
        json!({ "recorded": 2500 }),
        Err((
            "attestation",
            "the state before is of a Pulse that does not directly precede the attested one",
        )),
    )?;
    if p2 != p1 + 1 {
        bail!("the suite expects the two commits at consecutive Pulses ({p1}, {p2})");
    }
    let mut m = second.clone();
    if let Proof::Recorded { before, .. } = &mut m.proof {
        before.log.head.size = 2501;
    }
    suite.case(
        "time-before-size-edited",
        &m.encode(),
        json!({ "recorded": 2500 }),
        Err((
            "attestation",
            "the log's size at the Pulse before edited: it is no longer in that Pulse's state",
        )),
    )?;
    let mut m = first.clone();
    m.attestation = None;
    suite.case(
        "time-unattested",
        &m.encode(),
        json!({}),
        Err(("format", "a transaction-time proof without the ledger's attestation is not one")),
    )?;
    Ok(())
}

/// A writer that withholds its atoms' cells from the ledger (docs/LEDGER.md, "Cells"), and the
/// cell omission proof (kind 10) that convicts it; its mutations; and the honest memory's
/// atom with a cell proof faked to say the same.
fn cell_omission_cases(suite: &mut Suite, honest: &Memory, atoms: &[Atom], tmp: &Path) -> Result<()> {
    let mut liar = Memory::options(tmp.join("liar")).agent("fleet/robot-9").create()?;
    // Honest for its first 300 atoms, so the ledger's cells are not empty; then it withholds
    // them, and the first atom of a cell not listed yet convicts it.
    liar.remember(atoms[..300].to_vec())?;
    liar.commit(false)?;
    liar.withhold_cells();
    liar.remember(atoms[300..600].to_vec())?;
    liar.commit(false)?;
    let key = hex::encode(liar.ledger().public_key().to_bytes());
    let key = Some(key.as_str());
    let (p, file) = (300..600)
        .find_map(|p| liar.prove_cell_omission(p).ok().map(|f| (p, f)))
        .context("an atom of the liar's in a cell not listed")?;
    suite.case_with_key("cell-omission", &file.encode(), json!({ "cell_omitted": p }), Ok(()), key)?;
    suite.case_with_key(
        "cell-omission-other-position",
        &file.encode(),
        json!({ "cell_omitted": p + 1 }),
        Err(("other_question", "convicts the writer over one position, the reader asked about the next")),
        key,
    )?;
    suite.case_with_key(
        "cell-omission-asked-as-omission",
        &file.encode(),
        json!({ "omitted": p }),
        Err(("other_question", "a cell omission is not an index omission (kind 5)")),
        key,
    )?;
    let Proof::CellOmission { log, .. } = &file.proof else { bail!("a cell omission proof") };
    let log = *log;
    let mut m = file.clone();
    if let Proof::CellOmission { end, .. } = &mut m.proof {
        *end = CellEnd::Listed(vec![log.0]);
    }
    suite.case_with_key(
        "cell-omission-said-listed",
        &m.encode(),
        json!({ "cell_omitted": p }),
        Err(("cells", "the cell's leaf made to list the log: the path no longer leads to the cells root")),
        key,
    )?;
    let mut m = file.clone();
    if let Proof::CellOmission { cell, .. } = &mut m.proof {
        *cell ^= 1 << 20;
    }
    suite.case_with_key(
        "cell-omission-other-cell",
        &m.encode(),
        json!({ "cell_omitted": p }),
        Err(("cells", "a cell the atom does not lie in")),
        key,
    )?;
    let mut m = file.clone();
    if let Proof::CellOmission { siblings, .. } = &mut m.proof
        && let Some(s) = siblings.last_mut()
    {
        s[0] ^= 1;
    }
    suite.case_with_key(
        "cell-omission-sibling-flipped",
        &m.encode(),
        json!({ "cell_omitted": p }),
        Err(("cells", "a sibling of the cell's path flipped")),
        key,
    )?;
    let mut m = file.clone();
    if let Proof::CellOmission { position, .. } = &mut m.proof {
        *position += 1;
    }
    suite.case_with_key(
        "cell-omission-position-moved",
        &m.encode(),
        json!({ "cell_omitted": p + 1 }),
        Err(("merkle", "the atom claimed at another position: its inclusion path fails")),
        key,
    )?;
    // Refused while decoding (`format`): the cell given as another's leaf, a cell leaf listing
    // no log or logs out of order, an unknown end, too many siblings, a kind 10 in a SIONPRF3
    // file.
    let Proof::CellOmission { cell, .. } = &file.proof else { bail!("a cell omission proof") };
    let cell = *cell;
    let formats: [(&str, CellEnd, usize, &str); 4] = [
        (
            "cell-omission-own-leaf-as-another",
            CellEnd::Other(cell, [7; 32]),
            0,
            "end 1 naming the cell itself",
        ),
        ("cell-omission-listing-none", CellEnd::Listed(vec![]), 0, "end 2 listing no log"),
        ("cell-omission-logs-unsorted", CellEnd::Listed(vec![5, 3]), 0, "end 2's logs not ascending"),
        ("cell-omission-129-siblings", CellEnd::Empty, 129, "129 siblings, over 128"),
    ];
    for (name, new_end, n, why) in formats {
        let mut m = file.clone();
        if let Proof::CellOmission { end, siblings, .. } = &mut m.proof {
            *end = new_end;
            if n > 0 {
                *siblings = vec![[1; 32]; n];
            }
        }
        suite.case_with_key(name, &m.encode(), json!({ "cell_omitted": p }), Err(("format", why)), key)?;
    }
    let mut m = file.clone();
    if let Proof::CellOmission { end, siblings, .. } = &mut m.proof {
        (*end, *siblings) = (CellEnd::Empty, Vec::new());
    }
    let mut bytes = m.encode();
    let at = bytes.len() - 2; // the end byte, before the siblings' count
    bytes[at] = 3;
    suite.case_with_key(
        "cell-omission-end-3",
        &bytes,
        json!({ "cell_omitted": p }),
        Err(("format", "an end byte of 3")),
        key,
    )?;
    let mut bytes = file.encode();
    bytes[..8].copy_from_slice(b"SIONPRF3");
    suite.case_with_key(
        "cell-omission-in-a-version-3-file",
        &bytes,
        json!({ "cell_omitted": p }),
        Err(("format", "a kind 10 in a SIONPRF3 file")),
        key,
    )?;
    // Another cell's leaf off the asked cell's path.
    let mut m = file.clone();
    if let Proof::CellOmission { end, siblings, .. } = &mut m.proof {
        (*end, *siblings) = (CellEnd::Other(cell ^ (1 << 127), [3; 32]), vec![[4; 32]]);
    }
    suite.case_with_key(
        "cell-omission-leaf-off-the-path",
        &m.encode(),
        json!({ "cell_omitted": p }),
        Err(("cells", "the path ends, one bit down, in another cell's leaf whose first bit differs")),
        key,
    )?;
    // A writer on a ledger made before cells (version 1 headers): no cells root to prove
    // against, refused at the kind byte.
    let old_ledger = tmp.join("before-cells");
    sion_memory::ledger::Ledger::create_without_cells(&old_ledger)?;
    let mut old = Memory::options(tmp.join("old")).ledger_dir(&old_ledger).create()?;
    old.remember(atoms[..50].to_vec())?;
    old.commit(false)?;
    let inclusion = old.prove_inclusion(3)?;
    let Proof::Inclusion { log, head, position, atom, path } = inclusion.proof else { bail!("inclusion") };
    let a = Atom::decode(&atom)?;
    let old_cell = sion_memory::cells::cells_of(&a.parts().frame, &a.parts().bounds)[0];
    let v1 = ProofFile {
        proof: Proof::CellOmission {
            log,
            head,
            position,
            atom,
            path,
            cell: old_cell,
            end: CellEnd::Empty,
            siblings: vec![],
        },
        attestation: inclusion.attestation,
    };
    let old_key = hex::encode(old.ledger().public_key().to_bytes());
    suite.case_with_key(
        "cell-omission-header-version-1",
        &v1.encode(),
        json!({ "cell_omitted": 3 }),
        Err(("format", "a kind 10 attested by a version 1 header (a ledger made before cells)")),
        Some(&old_key),
    )?;
    let unattested = ProofFile { attestation: None, ..file.clone() };
    suite.case_with_key(
        "cell-omission-unattested",
        &unattested.encode(),
        json!({}),
        Err(("format", "a kind 10 without an attestation: there are no cells to have left the log out")),
        None,
    )?;
    // The honest memory's atom 321 and its cell's true proof: the cell lists its log.
    let inclusion = honest.prove_inclusion(321)?;
    let Proof::Inclusion { log, position, atom, .. } = inclusion.proof else { bail!("inclusion") };
    let a = Atom::decode(&atom)?;
    let cell = sion_memory::cells::cells_of(&a.parts().frame, &a.parts().bounds)[0];
    let Some((at, cell_proof, logs)) = honest.ledger().cell_proof(cell, None)? else {
        bail!("a ledger with cells")
    };
    let attestation = honest.attestation_at(at.header.number)?;
    let head = attestation.state.log.head;
    let listed = ProofFile {
        proof: Proof::CellOmission {
            log,
            head,
            position,
            atom: atom.clone(),
            path: honest.log().inclusion_proof(position, head.size)?,
            cell,
            end: CellEnd::Listed(logs),
            siblings: cell_proof.siblings,
        },
        attestation: Some(attestation),
    };
    suite.case(
        "cell-omission-of-a-listed-log",
        &listed.encode(),
        json!({ "cell_omitted": 321 }),
        Err(("not_omitted", "the cell's true proof: it lists the log")),
    )?;
    // The honest memory's atom 321, its cell said empty: the path fails (its cell lists it).
    let inclusion = honest.prove_inclusion(321)?;
    let Proof::Inclusion { log, head, position, atom, path } = inclusion.proof else { bail!("inclusion") };
    let a = Atom::decode(&atom)?;
    let cell = sion_memory::cells::cells_of(&a.parts().frame, &a.parts().bounds)[0];
    let forged = ProofFile {
        proof: Proof::CellOmission {
            log,
            head,
            position,
            atom,
            path,
            cell,
            end: CellEnd::Empty,
            siblings: vec![],
        },
        attestation: inclusion.attestation,
    };
    suite.case(
        "cell-omission-of-an-honest-writer",
        &forged.encode(),
        json!({ "cell_omitted": 321 }),
        Err(("cells", "an honest writer's atom, its cell claimed empty: the cells root says otherwise")),
    )?;
    Ok(())
}

/// A writer whose committed index leaves an atom out, and the omission proof that convicts it.
fn omission_cases(suite: &mut Suite, memory: &mut Memory, atoms: &[Atom]) -> Result<()> {
    let size = memory.committed().head.size as usize;
    // An omission proof from the honest index: its answer holds the atom it accuses it of
    // leaving out.
    let p = atoms[123].parts();
    let honest =
        memory.prove_range(&Query::new(&p.frame, p.bounds, p.valid.from_ns, p.valid.to_ns)?, None)?;
    let Proof::Range { log, head, range } = honest.proof else { bail!("a range proof") };
    let accused = ProofFile {
        proof: Proof::Omission {
            log,
            head,
            position: 123,
            atom: atoms[123].bytes().to_vec(),
            path: memory.log().inclusion_proof(123, head.size)?,
            range,
        },
        attestation: honest.attestation,
    };
    suite.case(
        "omission-the-answer-holds",
        &accused.encode(),
        json!({ "omitted": 123 }),
        Err(("not_omitted", "accuses an honest index: the range proof's answer holds the atom at 123")),
    )?;
    let mut decoy = atoms[123].parts().clone();
    decoy.bounds.min_mm[0] += 50_000;
    decoy.bounds.max_mm[0] += 50_000;
    let decoy = Atom::new(decoy)?;
    let mut bad = Index::new();
    for (i, a) in atoms[..size].iter().enumerate() {
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
    let nonce = memory.ledger().nonce(&account_of(&writer))?;
    let log = memory.log_id();
    let version = memory.committed().commits;
    memory
        .submit(SignedTx::sign(
            &writer,
            nonce,
            Tx::CommitMemory { log, version, head, proof: vec![], seal: false, cells: Vec::new() },
        ))
        .context("the ledger does not check index roots")?;
    let atom = &atoms[123];
    let p = atom.parts();
    let query = Query::new(&p.frame, p.bounds, p.valid.from_ns, p.valid.to_ns)?;
    let answer = bad.range(&query).expect("range");
    let range = RangeProof {
        query,
        atoms: answer.positions.iter().map(|&i| (i, atoms[i as usize].bytes().to_vec())).collect(),
        answer,
    };
    let state = memory.ledger().state_proof(log, memory.committed().committed_at)?;
    let file = ProofFile {
        proof: Proof::Omission {
            log,
            head,
            position: 123,
            atom: atom.bytes().to_vec(),
            path: memory.log().inclusion_proof(123, head.size)?,
            range: Box::new(range),
        },
        attestation: Some(Attestation {
            ledger_key: memory.ledger().public_key().to_bytes(),
            state,
            cosignatures: Vec::new(),
            checkpoint: None,
        }),
    };
    suite.case("omission", &file.encode(), json!({ "omitted": 123 }), Ok(()))?;
    let mut wrong = file.clone();
    if let Proof::Omission { position, atom: a, path, .. } = &mut wrong.proof {
        *position = 124;
        *a = atoms[124].bytes().to_vec();
        *path = memory.log().inclusion_proof(124, head.size)?;
    }
    suite.case(
        "omission-of-an-atom-the-index-holds",
        &wrong.encode(),
        json!({}),
        Err(("range", "accuses the index of leaving out an atom the proof's query does not reach")),
    )?;
    Ok(())
}

trait AtLeast {
    fn tap_at_least(self, size: u64) -> Self;
}

impl AtLeast for Value {
    fn tap_at_least(mut self, size: u64) -> Self {
        self["at_least"] = json!(size);
        self
    }
}

fn write_manifest(path: &Path, manifest: &Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(manifest)?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
