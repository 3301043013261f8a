//! `sion memory revise` and `sion memory believe` (docs/BELIEF.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use sion_memory::atom::{AtomId, LinkRel};
use sion_memory::belief::{Policy, bundle};

use sion_memory::rmp::Rmp;

use crate::memory_cmd::{DataArg, ledger_key_arg, open_memory, open_memory_read_only};

#[derive(Clone, Copy, ValueEnum)]
pub enum StateArg {
    Supersedes,
    Accepts,
    Disputes,
    Retracts,
    Refutes,
}

#[derive(Args)]
pub struct ReviseArgs {
    /// The reviser's memory: the revision is appended to its log and committed.
    #[command(flatten)]
    data: DataArg,
    /// The memory that holds the atom revised (default: --data).
    #[arg(long)]
    target_data: Option<PathBuf>,
    /// The position of the atom revised in that memory's log (`recall` prints it as #N).
    #[arg(long)]
    position: u64,
    /// The revision's state.
    #[arg(long, value_enum)]
    state: StateArg,
    /// Why, in words (the revision's text payload).
    #[arg(long, default_value = "")]
    why: String,
}

#[derive(Args)]
pub struct BelieveArgs {
    /// A reviser's memory (repeat for each log the bundle draws on; all on one ledger).
    #[arg(long = "data", env = "SION_DATA", required_unless_present = "bundle")]
    data: Vec<PathBuf>,
    /// The reader's policy: JSON, docs/BELIEF.md ("Policy").
    #[arg(long)]
    policy: PathBuf,
    /// An atom to believe about (64 hex digits; repeat).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// An atom to believe about, by its position in the first --data memory (repeat).
    #[arg(long = "position")]
    positions: Vec<u64>,
    /// Write the bundle (the proof files the fold is checked from) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Check this bundle instead of making one (offline; needs --ledger-key).
    #[arg(long, conflicts_with = "out")]
    bundle: Option<PathBuf>,
    /// The ledger key the reader trusts (64 hex digits). Without it, the first memory's
    /// ledger's key is used, which a reader who does not trust the writer should not do.
    #[arg(long)]
    ledger_key: Option<String>,
    /// Refuse heads older than this Pulse.
    #[arg(long)]
    as_of: Option<u64>,
}

pub fn revise(a: ReviseArgs) -> Result<ExitCode> {
    let target = {
        let dir = a.target_data.as_ref().unwrap_or(&a.data.data);
        let m = open_memory_read_only(dir)?;
        m.log()
            .read(a.position)
            .with_context(|| format!("reading position {} of {}", a.position, dir.display()))?
    };
    let rel = match a.state {
        StateArg::Supersedes => LinkRel::Supersedes,
        StateArg::Accepts => LinkRel::Accepts,
        StateArg::Disputes => LinkRel::Disputes,
        StateArg::Retracts => LinkRel::Retracts,
        StateArg::Refutes => LinkRel::Refutes,
    };
    let rmp = Rmp::over(open_memory(&a.data.data)?);
    let r = rmp.revise_atom(&target, rel, &a.why).context("recording the revision")?;
    outln!("revision {} at position {}: {rel} {}", r.revision, r.position, r.target);
    outln!("committed at Pulse {}", r.pulse);
    Ok(ExitCode::SUCCESS)
}

pub fn believe(a: BelieveArgs) -> Result<ExitCode> {
    let policy: Policy = serde_json::from_slice(
        &std::fs::read(&a.policy).with_context(|| format!("reading the policy {}", a.policy.display()))?,
    )
    .with_context(|| format!("{}: not a policy (docs/BELIEF.md, \"Policy\")", a.policy.display()))?;
    // The bundle is made from read-only memories (a running node may be writing the first).
    let rmp = match a.data.split_first() {
        Some((first, others)) => Some(Rmp::over(open_memory_read_only(first)?).with_others(others.to_vec())),
        None => None,
    };
    let targets: Vec<AtomId> = match &rmp {
        Some(rmp) => rmp.atom_ids(&a.targets, &a.positions).context("--target / --position")?,
        None if !a.positions.is_empty() => bail!("--position needs a --data memory"),
        None => a
            .targets
            .iter()
            .map(|t| t.parse().with_context(|| format!("--target {t}: an atom id is 64 hex digits")))
            .collect::<Result<_>>()?,
    };
    if targets.is_empty() {
        bail!("nothing to believe about: give --target ID or --position N");
    }
    let ledger_key = match (&a.ledger_key, &rmp) {
        (Some(hex), _) => ledger_key_arg(hex)?,
        (None, Some(rmp)) => {
            eprintln!("checking against the memory's own ledger key (give --ledger-key to choose yours)");
            rmp.ledger_key()
        }
        (None, None) => bail!("--bundle needs --ledger-key: the key you trust, not one the bundle brings"),
    };
    let bytes = match (&a.bundle, &rmp) {
        (Some(path), _) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        (None, Some(rmp)) => {
            let (bytes, _) = rmp.bundle(&policy, &targets).context("making the bundle")?;
            if let Some(out) = &a.out {
                std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
            }
            bytes
        }
        (None, None) => bail!("give --data (to make a bundle) or --bundle FILE (to check one)"),
    };
    let checked =
        bundle::check(&bytes, &ledger_key, &targets, &policy, a.as_of).context("checking the bundle")?;
    let name = |key: &[u8; 32]| {
        policy
            .revisers
            .iter()
            .find(|r| &r.key == key)
            .map(|r| r.name.clone())
            .unwrap_or_else(|| hex::encode(&key[..8]))
    };
    for b in &checked.beliefs {
        outln!("{}  {}", b.target, b.state);
        for s in &b.standing {
            let who =
                checked.evidence.iter().find(|e| e.atom.id() == s.by).map(|e| (name(&e.writer), e.pulse));
            let mark = if b.decided_by.contains(&s.by) { "decided" } else { "standing" };
            match who {
                Some((w, p)) => {
                    outln!("  {mark:8} {:10} by {w} (Pulse {p}), atom {}", s.state.as_str(), s.by)
                }
                None => outln!("  {mark:8} {:10} atom {}", s.state.as_str(), s.by),
            }
        }
    }
    outln!(
        "VALID bundle: {} bytes, heads of Pulse {}, {} statements; the fold recomputed here under {}",
        bytes.len(),
        checked.pulse,
        checked.evidence.len(),
        a.policy.display()
    );
    Ok(ExitCode::SUCCESS)
}
