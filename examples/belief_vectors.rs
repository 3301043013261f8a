//! Writes tests/conformance/belief/: real belief bundles (docs/BELIEF.md, "Bundles") and a
//! manifest of what a checker must conclude from each — the ledger key, the targets, the
//! policy, and the beliefs, or the refusal. tests/belief_conformance.rs checks every case.
//!
//!     cargo run --example belief_vectors

use std::path::Path;

use anyhow::Result;
use serde_json::json;
use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, LinkRel, Permille};
use sion_memory::belief::{bundle, revision_of};
use sion_memory::memory::Memory;
use sion_memory::proof::{ListKey, Proof};

fn main() -> Result<()> {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/belief");
    std::fs::create_dir_all(&out)?;
    let tmp = tempfile::tempdir()?;
    let (robot_dir, operator_dir) = (tmp.path().join("robot"), tmp.path().join("operator"));
    let mut p = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [0, 0, 0], max_mm: [1000, 1000, 1000] },
        Interval { from_ns: 1_767_225_600_000_000_000, to_ns: 1_767_225_601_000_000_000 },
        Permille(900),
    );
    p.subject = "pallet-17".into();
    let seen = Atom::new(p)?;
    // The robot sees it; an operator disputes it; the robot accepts it again; the operator
    // retracts a second, mistaken dispute (a revision of a revision).
    let mut robot = Memory::create(&robot_dir, Some("robot"), None)?;
    robot.remember(vec![seen.clone()])?;
    robot.commit(false)?;
    let robot_key = robot.writer().verifying_key().to_bytes();
    drop(robot);
    let mut operator = Memory::create(&operator_dir, Some("operator"), Some(&robot_dir.join("ledger")))?;
    let dispute = revision_of(&seen, LinkRel::Disputes, "it is in bay 4")?;
    let mistaken = revision_of(&seen, LinkRel::Refutes, "wrong pallet")?;
    operator.remember(vec![dispute, mistaken.clone()])?;
    operator.commit(false)?;
    operator.remember(vec![revision_of(&mistaken, LinkRel::Retracts, "that was pallet 18")?])?;
    operator.commit(false)?;
    let operator_key = operator.writer().verifying_key().to_bytes();
    drop(operator);
    let mut robot = Memory::open(&robot_dir)?;
    robot.remember(vec![revision_of(&seen, LinkRel::Accepts, "seen again")?])?;
    robot.commit(false)?;
    let ledger_key = robot.ledger().public_key().to_bytes();
    drop(robot);

    let robot = Memory::open_read_only(&robot_dir)?;
    let operator = Memory::open_read_only(&operator_dir)?;
    let (files, pulse) =
        sion_memory::memory::belief::bundle(&[&robot, &operator], &[seen.id()], &[robot_key, operator_key])?;
    std::fs::write(out.join("disputed.sionbelief"), bundle::encode(&files))?;
    // The same files as a version 1 bundle (each file whole), which checkers still read.
    std::fs::write(out.join("disputed-v1.sionbelief"), bundle::encode_v1(&files))?;
    // The same with the operator's link proofs left out: its log is not in the bundle at all.
    let operators = |f: &sion_memory::proof::ProofFile| {
        f.attestation.as_ref().is_some_and(|a| a.state.log.writer.0 == operator_key)
    };
    let without: Vec<_> =
        files.iter().filter(|f| !(matches!(f.proof, Proof::List { .. }) && operators(f))).cloned().collect();
    std::fs::write(out.join("operator-log-left-out.sionbelief"), bundle::encode(&without))?;
    // Only the operator's list of what revises its refutation left out: its retraction could
    // be hidden (and the refutation would stand).
    let hidden: Vec<_> = files
        .iter()
        .filter(|f| {
            !(operators(f)
                && matches!(&f.proof, Proof::List { list, .. } if list.key == ListKey::LinksTo(mistaken.id())))
        })
        .cloned()
        .collect();
    std::fs::write(out.join("retraction-hidden.sionbelief"), bundle::encode(&hidden))?;

    let policy = |prefer: serde_json::Value| {
        json!({"revisers": [
            {"name": "robot-7", "key": hex::encode(robot_key), "rank": 1},
            {"name": "operator-ana", "key": hex::encode(operator_key), "rank": 9}],
            "prefer": prefer})
    };
    let case = |file: &str, prefer: serde_json::Value, as_of: Option<u64>, verdict: serde_json::Value| {
        json!({"file": file, "ledger_key": hex::encode(ledger_key), "targets": [seen.id().to_string()],
               "policy": policy(prefer), "as_of": as_of, "verdict": verdict})
    };
    let manifest = json!({
        "about": "Belief bundles (docs/BELIEF.md, \"Bundles\") and what a checker concludes from each under the policy given: the state of each target, or a refusal. A robot's observation, disputed and (mistakenly) refuted by an operator who then retracted the refutation, accepted again by the robot later. The bundles are version 2 (SIONBEL2) but for disputed-v1 (SIONBEL1, the same proof files). Made by examples/belief_vectors.rs, checked by tests/belief_conformance.rs.",
        "pulse": pulse,
        "cases": [
            case("disputed.sionbelief", json!("latest"), Some(pulse), json!({"states": ["accepted"]})),
            case("disputed.sionbelief", json!("rank"), None, json!({"states": ["disputed"]})),
            case("disputed.sionbelief", json!({"quorum": 2}), None, json!({"states": ["disputed"]})),
            case("disputed.sionbelief", json!("latest"), Some(pulse + 1), json!({"refused": "stale"})),
            case("disputed-v1.sionbelief", json!("rank"), Some(pulse), json!({"states": ["disputed"]})),
            case("operator-log-left-out.sionbelief", json!("latest"), None, json!({"refused": "no_log"})),
            case("retraction-hidden.sionbelief", json!("latest"), None, json!({"refused": "missing_links"})),
        ],
    });
    std::fs::write(out.join("manifest.json"), serde_json::to_string_pretty(&manifest)? + "\n")?;
    println!("wrote {}", out.display());
    Ok(())
}
