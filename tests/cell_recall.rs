//! A fleet recall answered by the ledger's cells (SIONFLT2, docs/PROOFS.md, "Fleet recall by
//! cells"): robots' memories on one ledger with cells, a question about one robot's aisle, and
//! a bundle that states and asks only the logs the aisle's cells list — with the same atoms as
//! the bundle of every log. A robot that withheld its cells is missing from the cells and the
//! answer, and is convicted by a cell omission proof (kind 10) made from its memory.

use std::path::Path;

use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Permille};
use sion_memory::fleet::{recall_bundle, recall_by_cells};
use sion_memory::index::geom::Query;
use sion_memory::memory::Memory;
use sion_memory::proof::fleet::{CellBundle, CellNode, verify_fleet};

/// How many robots (`SION_CELL_ROBOTS`, default 8); the last is the liar.
fn robots() -> usize {
    std::env::var("SION_CELL_ROBOTS").ok().and_then(|v| v.parse().ok()).unwrap_or(8).max(4)
}

/// Robot `i`'s atoms: along its own aisle, 100 m from the next robot's (the liar's in robot 2's).
fn atoms_of(i: usize, liar: usize) -> Vec<Atom> {
    let x0 = if i == liar { 200_000 + 500 } else { i as i64 * 100_000 };
    (0..40)
        .map(|j| {
            let (x, y) = (x0 + j * 1000, j * 500);
            let mut parts = AtomParts::new(
                Kind::Observation,
                "map",
                BoxMm { min_mm: [x, y, 0], max_mm: [x + 300, y + 300, 1000] },
                Interval { from_ns: 1_000_000_000 + j, to_ns: 2_000_000_000 + j },
                Permille(900),
            );
            parts.subject = format!("robot-{i} sees {j}");
            Atom::new(parts).expect("atom")
        })
        .collect()
}

fn robot(dir: &Path, ledger: &Path, i: usize, liar: usize) {
    let mut m = Memory::options(dir.join(format!("robot-{i}")))
        .agent(format!("robot-{i}").as_str())
        .ledger_dir(ledger)
        .create()
        .expect("create");
    if i == liar {
        m.withhold_cells();
    }
    m.remember(atoms_of(i, liar)).expect("remember");
    m.commit(false).expect("commit");
}

#[test]
fn a_recall_by_cells_asks_only_the_logs_there_and_misses_only_a_liar() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ledger_dir = tmp.path().join("ledger");
    let robots = robots();
    let liar_index = robots - 1;
    for i in 0..robots {
        robot(tmp.path(), &ledger_dir, i, liar_index);
    }
    let memories: Vec<Memory> = (0..robots)
        .map(|i| Memory::options(tmp.path().join(format!("robot-{i}"))).open_read_only().expect("open"))
        .collect();
    let ledger = sion_memory::ledger::Ledger::open_read_only(&ledger_dir).expect("ledger");
    let key = ledger.public_key();

    // Robot 2's aisle.
    let aisle = BoxMm { min_mm: [200_000, 0, -1000], max_mm: [240_000, 20_000, 2000] };
    let q = Query::new("map", aisle, 0, 4_000_000_000).expect("query");
    let (bundle, gaps) =
        recall_by_cells(&ledger, None, &q, None, &memories, 1 << 30, |_, _| {}).expect("cells");
    assert!(gaps.iter().all(|g| matches!(g, sion_memory::fleet::Gap::OutOfScope { .. })), "{gaps:?}");
    let ids: Vec<u64> = bundle.logs.iter().map(|(l, _)| l.id.0).collect();
    let robot_2 = memories[2].log_id().0;
    assert_eq!(
        ids,
        [robot_2],
        "only robot 2's log is listed in its aisle's cells (the liar withheld its own)"
    );
    let bytes = bundle.encode();
    let started = std::time::Instant::now();
    let by_cells = verify_fleet(&bytes, &key, &q, None).expect("valid");
    let cells_took = started.elapsed();
    assert_eq!(by_cells.atoms(), 40);

    // The bundle of every log answers the same, and the liar's atoms beside: it is in the
    // aisle and its cells say it was not.
    let (every, gaps) = recall_bundle(&ledger, None, &q, None, &memories, |_, _| {}).expect("every log");
    assert!(gaps.is_empty(), "{gaps:?}");
    let all = every.encode();
    let started = std::time::Instant::now();
    let by_logs = verify_fleet(&all, &key, &q, None).expect("valid");
    let logs_took = started.elapsed();
    assert_eq!(by_logs.atoms(), 80);
    let liar = memories[liar_index].log_id();
    assert!(by_logs.logs.iter().any(|l| l.log == liar && l.atoms.len() == 40));
    let convicted = memories[liar_index].prove_cell_omission(0).expect("convicted");
    convicted.verify(Some(&key)).expect("the liar's omission holds");
    eprintln!(
        "{robots} robots: by cells {} bytes ({} logs stated), checked in {:.2} ms; every log {} bytes, checked in {:.2} ms",
        bytes.len(),
        bundle.logs.len(),
        cells_took.as_secs_f64() * 1e3,
        all.len(),
        logs_took.as_secs_f64() * 1e3,
    );

    // Refused: a listed log's state dropped; a cell's logs edited; an answer dropped; the
    // bundle checked for another key.
    let mut m = bundle.clone();
    m.logs.clear();
    m.answers.clear();
    assert_eq!(verify_fleet(&m.encode(), &key, &q, None).expect_err("dropped").code(), "left_out");
    let mut m = bundle.clone();
    for n in &mut m.cells {
        if let CellNode::Listed(_, ids) = n {
            ids.clear();
            ids.push(u64::MAX - 1);
        }
    }
    assert_eq!(verify_fleet(&m.encode(), &key, &q, None).expect_err("edited").code(), "cells");
    let mut m = bundle.clone();
    m.answers.clear();
    assert_eq!(verify_fleet(&m.encode(), &key, &q, None).expect_err("no answer").code(), "left_out");
    let other = ed25519_dalek::SigningKey::from_bytes(&[5; 32]).verifying_key();
    assert_eq!(verify_fleet(&bytes, &other, &q, None).expect_err("other key").code(), "signature");
    // Another question: the cells the reader computes for it are not the ones proved.
    let elsewhere =
        Query::new("map", BoxMm { min_mm: [0, 0, -1000], max_mm: [40_000, 20_000, 2000] }, 0, i64::MAX)
            .expect("query");
    assert!(verify_fleet(&bytes, &key, &elsewhere, None).is_err());
    assert_eq!(CellBundle::decode(&bytes).expect("decode"), bundle);

    // As of an earlier Pulse: the cells as they stood then (the ledger keeps when it listed
    // each log).
    let first = bundle.header.header.number - 3;
    let (earlier, _) =
        recall_by_cells(&ledger, Some(first), &q, None, &memories, 1 << 30, |_, _| {}).expect("earlier");
    assert_eq!(earlier.header.header.number, first);
    verify_fleet(&earlier.encode(), &key, &q, None).expect("valid as of the earlier Pulse");

    // The conformance files (tests/conformance/fleet-cells/), written on request from this run:
    // `SION_WRITE_CELL_FIXTURES=1 cargo test --all-features --test cell_recall`.
    if std::env::var_os("SION_WRITE_CELL_FIXTURES").is_some() {
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fleet-cells");
        std::fs::create_dir_all(&out).expect("dir");
        let mut left_out = bundle.clone();
        left_out.logs.clear();
        left_out.answers.clear();
        let mut edited = bundle.clone();
        for n in &mut edited.cells {
            if let CellNode::Listed(_, ids) = n {
                *ids = vec![memories[0].log_id().0];
            }
        }
        let mut opaque = bundle.clone();
        for n in &mut opaque.cells {
            if let CellNode::Listed(..) = n {
                *n = CellNode::Opaque([0; 32]);
            }
        }
        let mut unlisted = bundle.clone();
        for n in &mut unlisted.cells {
            if let CellNode::Listed(k, ids) = n {
                *n = CellNode::Other(*k, sion_memory::cells::logs_digest(ids));
            }
        }
        let mut extra = bundle.clone();
        let zero = ledger.state_proof(memories[0].log_id(), bundle.header.header.number).expect("state");
        extra.logs.insert(0, (zero.log, zero.path));
        let mut path_flipped = bundle.clone();
        path_flipped.logs[0].1[0][0] ^= 1;
        let mut lying = bundle.clone();
        let other = Query::new("map", aisle, 0, 3_999_999_999).expect("another question");
        lying.answers[0].1 = memories[2].prove_range(&other, None).expect("its answer").encode();
        let files = [
            ("valid", &bundle),
            ("as-of-earlier", &earlier),
            ("left-out", &left_out),
            ("cells-edited", &edited),
            ("lying", &lying),
            ("opaque-over-an-asked-cell", &opaque),
            ("asked-cell-without-its-logs", &unlisted),
            ("a-log-not-listed-stated", &extra),
            ("state-path-flipped", &path_flipped),
        ];
        for (name, b) in files {
            std::fs::write(out.join(format!("{name}.sionfleet")), b.encode()).expect("write");
        }
        let question = serde_json::json!({
            "ledger_key": hex::encode(key.to_bytes()),
            "frame": "map", "box": [200_000, 0, -1000, 240_000, 20_000, 2000],
            "from_ns": 0, "to_ns": 4_000_000_000i64,
            "valid": { "atoms": 40, "in_scope": 1 },
            "also_valid": ["as-of-earlier"],
            "refused": {
                "left-out": "left_out", "cells-edited": "cells", "lying": "lying",
                "opaque-over-an-asked-cell": "cells", "asked-cell-without-its-logs": "cells",
                "a-log-not-listed-stated": "not_asked", "state-path-flipped": "state_root",
            },
        });
        let text = serde_json::to_string_pretty(&question).expect("json") + "\n";
        std::fs::write(out.join("question.json"), text).expect("write");
    }
}

/// The conformance files of a recall by cells (tests/conformance/fleet-cells/, made by the test
/// above): the valid bundles hold, each broken one is refused with its code — what the Python
/// package checks too (python/tests/test_conformance.py).
#[test]
fn the_recall_by_cells_conformance_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fleet-cells");
    let text = std::fs::read_to_string(dir.join("question.json")).expect("question");
    let q: serde_json::Value = serde_json::from_str(&text).expect("json");
    let key_bytes: [u8; 32] =
        hex::decode(q["ledger_key"].as_str().expect("key")).expect("hex").try_into().expect("32 bytes");
    let key = ed25519_dalek::VerifyingKey::from_bytes(&key_bytes).expect("key");
    let b: Vec<i64> = q["box"].as_array().expect("box").iter().map(|v| v.as_i64().expect("mm")).collect();
    let bounds = BoxMm { min_mm: [b[0], b[1], b[2]], max_mm: [b[3], b[4], b[5]] };
    let frame = q["frame"].as_str().expect("frame");
    let query =
        Query::new(frame, bounds, q["from_ns"].as_i64().expect("from"), q["to_ns"].as_i64().expect("to"))
            .expect("query");
    for name in ["valid", "as-of-earlier"] {
        let bytes = std::fs::read(dir.join(format!("{name}.sionfleet"))).expect("read");
        let answer = verify_fleet(&bytes, &key, &query, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(answer.atoms() as u64, q["valid"]["atoms"].as_u64().expect("atoms"), "{name}");
        assert_eq!(answer.in_scope as u64, q["valid"]["in_scope"].as_u64().expect("in scope"), "{name}");
    }
    for (name, code) in q["refused"].as_object().expect("refused") {
        let bytes = std::fs::read(dir.join(format!("{name}.sionfleet"))).expect("read");
        let e = verify_fleet(&bytes, &key, &query, None).expect_err(name);
        assert_eq!(e.code(), code.as_str().expect("code"), "{name}: {e}");
    }
}
