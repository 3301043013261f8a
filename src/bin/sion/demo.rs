//! `sion demo`: the main job on an embedded default. A warehouse robot's atoms are remembered
//! durably, heads are committed to the embedded ledger, proofs are written and verified, the
//! ledger refuses a forged history, and the log is audited.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use sion_memory::atom::Kind;
use sion_memory::index::geom::Query;
use sion_memory::ledger::{SignedTx, Tx, account_of};
use sion_memory::memory::Memory;
use sion_memory::proof::{Claim, ProofFile};
use sion_memory::sim::{Warehouse, WarehouseConfig};
use sion_memory::time::rfc3339;

use crate::ui;

pub fn run(dir: &Path, atoms: usize, commit_every: usize, fresh: bool) -> Result<ExitCode> {
    if dir.join("memory.json").exists() {
        if !fresh {
            bail!(
                "{} holds a memory already: pass --fresh to start over, or --data for another place",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    outln!("sion demo: a warehouse robot remembers what it sees, and proves it\n");
    let mut memory = Memory::options(dir)
        .agent("warehouse/robot-1")
        .create()
        .with_context(|| format!("creating a memory at {}", dir.display()))?;
    outln!(
        "memory   {} (log {} of agent warehouse/robot-1, embedded ledger key {})",
        dir.display(),
        memory.log_id(),
        ui::short(&memory.ledger().public_key().to_bytes())
    );

    // Remember the run in durable batches, committing a head every `commit_every` atoms.
    let bar = ui::bar(atoms as u64, "atoms");
    let started = Instant::now();
    let mut kinds = [0u64; 17];
    let mut pulses = Vec::new();
    let mut sim = Warehouse::new(WarehouseConfig::default());
    let mut done = 0usize;
    let mut since_commit = 0usize;
    while done < atoms {
        let batch: Vec<_> = sim.by_ref().take(4096.min(atoms - done)).collect();
        for a in &batch {
            kinds[usize::from(a.kind().code())] += 1;
        }
        done += batch.len();
        since_commit += batch.len();
        memory.remember(batch).context("remembering")?;
        if since_commit >= commit_every || done == atoms {
            let c = memory.commit(false).context("committing")?;
            pulses.push((c.pulse.header.number, c.head.size));
            since_commit = 0;
        }
        bar.set_position(done as u64);
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let count = |k: Kind| ui::count(kinds[usize::from(k.code())]);
    outln!(
        "recorded {} atoms in {secs:.2} s ({} atoms/s, durable before each commit): {} poses, {} observations, {} map tiles",
        ui::count(done as u64),
        ui::count((done as f64 / secs) as u64),
        count(Kind::Pose),
        count(Kind::Observation),
        count(Kind::MapTile)
    );
    let (first_pulse, first_size) = pulses[0];
    let (last_pulse, _) = pulses[pulses.len() - 1];
    outln!(
        "ledger   {} heads committed, Pulses {first_pulse}..={last_pulse}, each checked by an RFC 9162 consistency proof from the one before",
        pulses.len()
    );

    let proofs = dir.join("proofs");
    std::fs::create_dir_all(&proofs).context("creating the proofs directory")?;
    let log = memory.log();
    // An observation in the middle of the run.
    let position = (done as u64 / 2..done as u64)
        .find(|&p| log.read(p).is_ok_and(|a| a.kind() == Kind::Observation))
        .unwrap_or(done as u64 / 2);
    let inclusion = memory.prove_inclusion(position)?;
    report_proof("inclusion", &inclusion, &proofs.join(format!("inclusion-{position}.sionproof")))?;
    let consistency = memory.prove_consistency(first_size)?;
    report_proof("consistency", &consistency, &proofs.join(format!("consistency-{first_size}.sionproof")))?;

    // What was seen around the robot, and where nothing was: both proved complete.
    let seen = memory.log().read(position)?;
    let p = seen.parts();
    let around = sion_memory::atom::BoxMm {
        min_mm: [p.bounds.min_mm[0] - 5_000, p.bounds.min_mm[1] - 5_000, 0],
        max_mm: [p.bounds.max_mm[0] + 5_000, p.bounds.max_mm[1] + 5_000, 3_000],
    };
    let minute = 60_000_000_000;
    let query = Query::new(&p.frame, around, p.valid.from_ns - minute, p.valid.from_ns + minute)?;
    let range = memory.prove_range(&query, None)?;
    report_proof("range", &range, &proofs.join("recall.sionproof"))?;
    if let Claim::Range { atoms, .. } = range.verify(None)?.claim {
        outln!(
            "         {} atoms within 5 m of atom {position} and a minute of it, and provably no others",
            atoms.len()
        );
    }
    let nowhere = Query::new(
        &p.frame,
        sion_memory::atom::BoxMm { min_mm: [-9_000_000; 3], max_mm: [-8_000_000; 3] },
        0,
        i64::MAX,
    )?;
    let empty = memory.prove_range(&nowhere, None)?;
    report_proof("empty range", &empty, &proofs.join("nothing-there.sionproof"))?;

    let time = memory.prove_time(position)?;
    let at = time.verify(&memory.ledger().public_key()).context("transaction-time proof")?;
    outln!(
        "time     atom {position} was recorded at Pulse {} ({}): before it the log had {} atoms, at it {} (two state proofs against signed headers)",
        at.number,
        rfc3339(at.time_ns),
        ui::count(time.before.log.head.size),
        ui::count(time.at.log.head.size)
    );
    let recorded = memory.prove_recorded(position)?;
    report_proof("time", &recorded, &proofs.join(format!("recorded-{position}.sionproof")))?;

    // The ledger refuses a rewritten history and a replay of an old version.
    let current = memory.committed().clone();
    let writer = memory.writer().clone();
    let me = account_of(&writer);
    let forged_head =
        sion_memory::ledger::Head { root: [0xAB; 32], size: current.head.size + 1, ..current.head };
    let proof = vec![[0u8; 32]; 3];
    let nonce = memory.ledger().nonce(&me)?;
    let forked = SignedTx::sign(
        &writer,
        nonce,
        Tx::CommitMemory {
            log: current.id,
            version: current.commits,
            head: forged_head,
            proof,
            seal: false,
            cells: Vec::new(),
        },
    );
    match memory.submit(forked) {
        Err(e) => outln!("refused  a forked head: {e}"),
        Ok(_) => bail!("the ledger accepted a forked head"),
    }
    let stale = SignedTx::sign(
        &writer,
        nonce,
        Tx::CommitMemory {
            log: current.id,
            version: current.commits - 1,
            head: current.head,
            proof: vec![],
            seal: false,
            cells: Vec::new(),
        },
    );
    match memory.submit(stale) {
        Err(e) => outln!("refused  a stale commit: {e}"),
        Ok(_) => bail!("the ledger accepted a stale commit"),
    }

    let started = Instant::now();
    let (audit, committed) = memory.audit(|_| {})?;
    if let Some((p, why)) = audit.first_bad {
        bail!("audit found position {p} bad: {why}");
    }
    if audit.root_at_mark != Some(committed.head.root) {
        bail!("audit: the committed head does not match the log");
    }
    outln!(
        "audit    re-read {} atoms in {:.2} s: every record, offset and tree hash checks out; the root matches the ledger's head",
        ui::count(audit.size),
        started.elapsed().as_secs_f64()
    );
    let sion = std::env::args().next().unwrap_or_else(|| "sion".into());
    outln!("\nlook further:");
    outln!("  {sion} memory show --data {}", dir.display());
    outln!(
        "  {sion} memory verify --data {} {}",
        dir.display(),
        proofs.join(format!("inclusion-{position}.sionproof")).display()
    );
    outln!("  {sion} memory audit --data {}", dir.display());
    outln!(
        "  {sion} memory recall --data {} --frame {} --box {},{},{},{},{},{} --from {} --to {}",
        dir.display(),
        query.frame,
        around.min_mm[0],
        around.min_mm[1],
        around.min_mm[2],
        around.max_mm[0],
        around.max_mm[1],
        around.max_mm[2],
        query.from_ns,
        query.to_ns
    );
    Ok(ExitCode::SUCCESS)
}

fn report_proof(what: &str, file: &ProofFile, path: &Path) -> Result<()> {
    let bytes = file.encode();
    std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    let started = Instant::now();
    let decoded = ProofFile::decode(&bytes).context("reading the proof back")?;
    let verified = decoded.verify(None).with_context(|| format!("verifying the {what} proof"))?;
    let micros = started.elapsed().as_secs_f64() * 1e6;
    let (pulse, _, _) = verified.pulse.unwrap_or_default();
    outln!(
        "proof    {what}: {} bytes, verified in {micros:.0} µs against the head of Pulse {pulse} → {}",
        bytes.len(),
        path.display()
    );
    Ok(())
}
