//! What believing costs (docs/BELIEF.md): one target with 1, 100 and 10,000 revisions, written
//! across 1 and 10 revisers' logs on one ledger. For each: the fold alone over the statements,
//! making the bundle (link and recorded proofs from the logs), its size, and checking it as a
//! reader does (every proof verified against the ledger key, then the fold recomputed) —
//! beside the same files as a version 1 bundle, each file whole.
//!
//!     cargo run --release --example belief_bench [-- --max 10000]

use std::time::Instant;

use anyhow::{Context as _, Result};
use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Link, LinkRel, Permille};
use sion_memory::belief::{Policy, Prefer, Reviser, bundle, fold};
use sion_memory::memory::Memory;

fn parts(kind: Kind, n: i64) -> AtomParts {
    AtomParts::new(kind, "map", BoxMm::point([n, 0, 0]), Interval { from_ns: 1, to_ns: 2 }, Permille(1000))
}

struct Row {
    revisions: u64,
    logs: u64,
    fold_ms: f64,
    make_ms: f64,
    bytes: usize,
    check_ms: f64,
    /// The same files as a version 1 bundle (each whole): its size and check time.
    v1_bytes: usize,
    check_v1_ms: f64,
    state: String,
}

fn run(revisions: u64, logs: u64) -> Result<Row> {
    let tmp = tempfile::tempdir()?;
    let first = tmp.path().join("log0");
    let ledger = first.join("ledger");
    let claim = {
        let mut p = parts(Kind::Claim, -1);
        p.subject = "pallet-17".into();
        Atom::new(p)?
    };
    let mut keys = Vec::new();
    for l in 0..logs {
        let dir = tmp.path().join(format!("log{l}"));
        let mut m = if l == 0 {
            Memory::options(&dir).create()?
        } else {
            Memory::options(&dir).ledger_dir(&ledger).create()?
        };
        if l == 0 {
            m.remember(vec![claim.clone()])?;
        } else {
            // A reviser's log with a committed head (an empty one proves nothing: its head
            // commits no index).
            let mut p = parts(Kind::Note, 1_000_000 + l as i64);
            p.subject = format!("reviser {l} on duty");
            m.remember(vec![Atom::new(p)?])?;
        }
        keys.push(m.writer().verifying_key().to_bytes());
        // This log's share, committed in up to ten steps (each a Pulse).
        let share: Vec<u64> = (0..revisions).filter(|i| i % logs == l).collect();
        for chunk in share.chunks(share.len().div_ceil(10).max(1)) {
            let atoms: Vec<Atom> = chunk
                .iter()
                .map(|&i| {
                    let mut p = parts(Kind::Revision, i as i64);
                    let rel = if i % 2 == 0 { LinkRel::Accepts } else { LinkRel::Disputes };
                    p.links = vec![Link { rel, target: claim.id() }];
                    Atom::new(p)
                })
                .collect::<Result<_, _>>()?;
            m.remember(atoms)?;
            m.commit(false)?;
        }
        if share.is_empty() {
            m.commit(false)?;
        }
        drop(m);
    }
    let memories: Vec<Memory> = (0..logs)
        .map(|l| Memory::options(tmp.path().join(format!("log{l}"))).open_read_only())
        .collect::<Result<_, _>>()?;
    let ledger_key = memories[0].ledger().public_key();
    let refs: Vec<&Memory> = memories.iter().collect();
    let policy = Policy {
        revisers: keys
            .iter()
            .enumerate()
            .map(|(i, k)| Reviser { name: format!("r{i}"), key: *k, rank: i as u32 })
            .collect(),
        prefer: Prefer::Latest,
    };
    let started = Instant::now();
    let (files, pulse) = sion_memory::memory::belief::bundle(&refs, &[claim.id()], &keys)?;
    let make_ms = started.elapsed().as_secs_f64() * 1e3;
    let bytes = bundle::encode(&files);
    let started = Instant::now();
    let checked = bundle::check(&bytes, &ledger_key, &[claim.id()], &policy, Some(pulse)).context("check")?;
    let check_ms = started.elapsed().as_secs_f64() * 1e3;
    // Version 1 of the same files (each whole), checked the same way: the figure beside.
    let v1 = bundle::encode_v1(&files);
    let started = Instant::now();
    let checked_v1 =
        bundle::check(&v1, &ledger_key, &[claim.id()], &policy, Some(pulse)).context("check v1")?;
    let check_v1_ms = started.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(checked_v1.beliefs == checked.beliefs, "v1 and v2 disagree");
    anyhow::ensure!(
        checked.evidence.len() as u64 == revisions,
        "{} statements found",
        checked.evidence.len()
    );
    // The fold alone, best of 5.
    let mut fold_ms = f64::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        let beliefs = fold(&[claim.id()], &checked.evidence, &policy);
        fold_ms = fold_ms.min(started.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(beliefs == checked.beliefs);
    }
    Ok(Row {
        revisions,
        logs,
        fold_ms,
        make_ms,
        bytes: bytes.len(),
        check_ms,
        v1_bytes: v1.len(),
        check_v1_ms,
        state: checked.beliefs[0].state.to_string(),
    })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let max: u64 = match args.iter().position(|a| a == "--max") {
        Some(i) => args.get(i + 1).context("--max N")?.parse().context("--max N")?,
        None => 10_000,
    };
    println!("### `examples/belief_bench`: one target, its revisions across revisers' logs on one ledger\n");
    println!(
        "| revisions | logs | fold alone | make the bundle | bundle size | check it (verify + fold) | version 1: size, check | belief (latest) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for revisions in [1u64, 100, 10_000].into_iter().filter(|&n| n <= max) {
        for logs in [1u64, 10] {
            let r = run(revisions, logs)?;
            println!(
                "| {} | {} | {:.3} ms | {:.1} ms | {:.1} KiB ({:.2} KiB a revision) | {:.1} ms | {:.1} KiB ({:.2}×), {:.1} ms ({:.2}×) | {} |",
                r.revisions,
                r.logs,
                r.fold_ms,
                r.make_ms,
                r.bytes as f64 / 1024.0,
                r.bytes as f64 / 1024.0 / r.revisions as f64,
                r.check_ms,
                r.v1_bytes as f64 / 1024.0,
                r.v1_bytes as f64 / r.bytes as f64,
                r.check_v1_ms,
                r.check_v1_ms / r.check_ms,
                r.state
            );
        }
    }
    Ok(())
}
