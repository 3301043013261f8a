//! Writes tests/conformance/belief/: real belief bundles (docs/BELIEF.md, "Bundles") and a
//! manifest of what a checker must conclude from each — the ledger key, the targets, the
//! policy, the Pulse asked for, and the beliefs, or the refusal. tests/belief_conformance.rs
//! checks every case (and python/tests the Python package's checker).
//!
//!     cargo run --example belief_vectors

use std::path::Path;

use anyhow::Result;
use serde_json::json;
use sion_memory::atom::{Atom, AtomId, AtomParts, BoxMm, Interval, Kind, LinkRel, Permille};
use sion_memory::belief::{bundle, revision_of};
use sion_memory::ledger::Ledger;
use sion_memory::memory::Memory;
use sion_memory::proof::{Attestation, ListKey, Proof, ProofFile};

/// What one telling of the story leaves: the bundle's files and the attestations carried
/// alone, its Pulse, the keys and the atoms asked about.
struct Story {
    files: Vec<ProofFile>,
    alone: Vec<Attestation>,
    pulse: u64,
    ledger_key: [u8; 32],
    robot: [u8; 32],
    operator: [u8; 32],
    seen: AtomId,
    second: AtomId,
    mistaken: AtomId,
    operator_second_log: u64,
}

fn observation(subject: &str) -> Result<Atom> {
    let mut p = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [0, 0, 0], max_mm: [1000, 1000, 1000] },
        Interval { from_ns: 1_767_225_600_000_000_000, to_ns: 1_767_225_601_000_000_000 },
        Permille(900),
    );
    p.subject = subject.into();
    Ok(Atom::new(p)?)
}

/// The robot sees pallet 17 and pallet 18; an operator disputes 17, refutes it by mistake and
/// retracts the refutation (a revision of a revision), and accepts 18; later, from a second
/// log under the same key, the operator refutes 18; last, the robot accepts 17 again. On a
/// ledger that chains each writer's logs (`chained`), or on one from before chains.
fn tell(dir: &Path, chained: bool) -> Result<Story> {
    let (robot_dir, operator_dir, second_dir) =
        (dir.join("robot"), dir.join("operator"), dir.join("operator-2"));
    let ledger_dir = dir.join("ledger");
    if chained {
        drop(Ledger::create(&ledger_dir)?);
    } else {
        drop(Ledger::create_unchained(&ledger_dir)?);
    }
    let (seen, pallet_18) = (observation("pallet-17")?, observation("pallet-18")?);
    let mut robot = Memory::options(&robot_dir).agent("robot").ledger_dir(&ledger_dir).create()?;
    robot.remember(vec![seen.clone(), pallet_18.clone()])?;
    robot.commit(false)?;
    let robot_key = robot.writer().verifying_key().to_bytes();
    drop(robot);
    let mut operator = Memory::options(&operator_dir).agent("operator").ledger_dir(&ledger_dir).create()?;
    let dispute = revision_of(&seen, LinkRel::Disputes, "it is in bay 4")?;
    let mistaken = revision_of(&seen, LinkRel::Refutes, "wrong pallet")?;
    operator.remember(vec![
        dispute,
        mistaken.clone(),
        revision_of(&pallet_18, LinkRel::Accepts, "checked")?,
    ])?;
    operator.commit(false)?;
    operator.remember(vec![revision_of(&mistaken, LinkRel::Retracts, "that was pallet 18")?])?;
    operator.commit(false)?;
    let operator_key = operator.writer().verifying_key().to_bytes();
    drop(operator);
    std::fs::create_dir_all(&second_dir)?;
    std::fs::copy(operator_dir.join("writer.key"), second_dir.join("writer.key"))?;
    let mut second = Memory::options(&second_dir).ledger_dir(&ledger_dir).create()?;
    second.remember(vec![revision_of(&pallet_18, LinkRel::Refutes, "it was pallet 19")?])?;
    second.commit(false)?;
    let operator_second_log = second.log_id().0;
    drop(second);
    let mut robot = Memory::options(&robot_dir).open()?;
    robot.remember(vec![revision_of(&seen, LinkRel::Accepts, "seen again")?])?;
    robot.commit(false)?;
    let ledger_key = robot.ledger().public_key().to_bytes();
    drop(robot);

    let open = |d: &Path| Memory::options(d).open_read_only();
    let (robot, operator, second) = (open(&robot_dir)?, open(&operator_dir)?, open(&second_dir)?);
    let (files, alone, pulse) = sion_memory::memory::belief::bundle_with_chains(
        &[&robot, &operator, &second],
        &[seen.id(), pallet_18.id()],
        &[robot_key, operator_key],
    )?;
    Ok(Story {
        files,
        alone,
        pulse,
        ledger_key,
        robot: robot_key,
        operator: operator_key,
        seen: seen.id(),
        second: pallet_18.id(),
        mistaken: mistaken.id(),
        operator_second_log,
    })
}

fn main() -> Result<()> {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/belief");
    std::fs::create_dir_all(&out)?;
    let tmp = tempfile::tempdir()?;
    let s = tell(&tmp.path().join("chained"), true)?;
    let old = tell(&tmp.path().join("unchained"), false)?;
    let write = |name: &str, bytes: Vec<u8>| std::fs::write(out.join(name), bytes);

    write("disputed.sionbelief", bundle::encode_with(&s.files, &s.alone))?;
    // The same files as version 2 and version 1 bundles, which checkers still read.
    write("disputed-v2.sionbelief", bundle::encode_v2(&s.files))?;
    write("disputed-v1.sionbelief", bundle::encode_v1(&s.files))?;
    // The same files in the reverse order: the same beliefs (the fold is of a set).
    let mut reversed = s.files.clone();
    reversed.reverse();
    write("disputed-reordered.sionbelief", bundle::encode(&reversed))?;
    // The operator's link proofs left out: its logs are not in the bundle at all.
    let operators =
        |f: &ProofFile| f.attestation.as_ref().is_some_and(|a| a.state.log.writer.0 == s.operator);
    let without: Vec<_> = s
        .files
        .iter()
        .filter(|f| !(matches!(f.proof, Proof::List { .. }) && operators(f)))
        .cloned()
        .collect();
    write("operator-log-left-out.sionbelief", bundle::encode(&without))?;
    // Only the operator's list of what revises its refutation left out: its retraction could
    // be hidden (and the refutation would stand).
    let hidden: Vec<_> = s
        .files
        .iter()
        .filter(|f| {
            !(operators(f)
                && matches!(&f.proof, Proof::List { list, .. } if list.key == ListKey::LinksTo(s.mistaken)))
        })
        .cloned()
        .collect();
    write("retraction-hidden.sionbelief", bundle::encode(&hidden))?;
    // The attack: every file of the operator's second log left out (the one that refutes
    // pallet 18 later). By key alone the first log would show "accepted".
    let first_only: Vec<_> = s
        .files
        .iter()
        .filter(|f| f.attestation.as_ref().is_none_or(|a| a.state.log.id.0 != s.operator_second_log))
        .cloned()
        .collect();
    write("second-log-left-out.sionbelief", bundle::encode(&first_only))?;
    // The same story on a ledger from before chains (version 1 leaves).
    write("unchained.sionbelief", bundle::encode_with(&old.files, &old.alone))?;

    let policy = |s: &Story, prefer: serde_json::Value| {
        json!({"revisers": [
            {"name": "robot-7", "key": hex::encode(s.robot), "rank": 1},
            {"name": "operator-ana", "key": hex::encode(s.operator), "rank": 9}],
            "prefer": prefer})
    };
    let targets = |s: &Story| json!([s.seen.to_string(), s.second.to_string()]);
    let case =
        |s: &Story, file: &str, prefer: serde_json::Value, as_of: Option<u64>, verdict: serde_json::Value| {
            json!({"file": file, "ledger_key": hex::encode(s.ledger_key), "targets": targets(s),
               "policy": policy(s, prefer), "as_of": as_of, "verdict": verdict})
        };
    let states = |a: &str, b: &str| json!({"states": [a, b]});
    let refused = |code: &str| json!({"refused": code});
    let mut trusted =
        case(&old, "unchained.sionbelief", json!("rank"), Some(old.pulse), states("disputed", "refuted"));
    trusted["trust_log_set"] = json!(true);
    let p = s.pulse;
    let manifest = json!({
        "about": "Belief bundles (docs/BELIEF.md, \"Bundles\") and what a checker concludes from each under the policy given: the state of each target, or a refusal. Targets: pallet 17, seen by the robot, disputed and (mistakenly) refuted by an operator who then retracted the refutation, accepted again by the robot later; pallet 18, seen by the robot, accepted by the operator, then refuted by the same operator from a second log under the same key. The bundles are version 3 (SIONBEL3) but for disputed-v2 (SIONBEL2) and disputed-v1 (SIONBEL1), which hold the same proof files as disputed. unchained is the same story on a ledger from before log chains (version 1 leaves); a case with \"trust_log_set\": true is checked taking the logs a bundle brings as all a reviser's (docs/BELIEF.md, \"Every log of a reviser\"), absent: false. \"as_of\": null means staleness is not checked. Made by examples/belief_vectors.rs, checked by tests/belief_conformance.rs.",
        "pulse": p,
        "cases": [
            case(&s, "disputed.sionbelief", json!("latest"), Some(p), states("accepted", "refuted")),
            case(&s, "disputed.sionbelief", json!("rank"), None, states("disputed", "refuted")),
            case(&s, "disputed.sionbelief", json!({"quorum": 2}), None, states("disputed", "asserted")),
            case(&s, "disputed.sionbelief", json!("latest"), Some(p + 1), refused("stale")),
            case(&s, "disputed-v2.sionbelief", json!("latest"), Some(p), states("accepted", "refuted")),
            case(&s, "disputed-v1.sionbelief", json!("rank"), Some(p), states("disputed", "refuted")),
            case(&s, "disputed-reordered.sionbelief", json!("latest"), Some(p), states("accepted", "refuted")),
            case(&s, "operator-log-left-out.sionbelief", json!("latest"), None, refused("no_log")),
            case(&s, "retraction-hidden.sionbelief", json!("latest"), None, refused("missing_links")),
            case(&s, "second-log-left-out.sionbelief", json!("latest"), None, refused("missing_log")),
            case(&old, "unchained.sionbelief", json!("latest"), None, refused("unchained")),
            trusted,
        ],
    });
    std::fs::write(out.join("manifest.json"), serde_json::to_string_pretty(&manifest)? + "\n")?;
    println!("wrote {}", out.display());
    Ok(())
}
