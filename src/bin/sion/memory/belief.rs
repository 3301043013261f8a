//! `sion memory revise` and `sion memory believe` (docs/BELIEF.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use sion_memory::atom::{AtomId, LinkRel};
use sion_memory::belief::{Policy, bundle};

use sion_memory::protocol::Protocol;

use crate::common::{DataArg, ledger_key_arg, open_memory, open_memory_read_only};

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
    /// Refuse heads older than this Pulse. Without it, a bundle made here is checked against
    /// the ledger's latest Pulse; a bundle given with --bundle is not checked for staleness,
    /// and the answer says so.
    #[arg(long)]
    as_of: Option<u64>,
    /// Accept, for revisers whose logs are on a ledger from before log chains, the logs the
    /// bundle brings as all their logs (a writer could then show two readers two sets of
    /// logs: docs/BELIEF.md, "Every log of a reviser"). Chained logs are always checked.
    #[arg(long)]
    trust_log_set: bool,
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
    let protocol = Protocol::over(open_memory(&a.data.data)?);
    let r = protocol.revise_atom(&target, rel, &a.why).context("recording the revision")?;
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
    let protocol = match a.data.split_first() {
        Some((first, others)) => {
            Some(Protocol::over(open_memory_read_only(first)?).with_others(others.to_vec()))
        }
        None => None,
    };
    let targets: Vec<AtomId> = match &protocol {
        Some(protocol) => protocol.atom_ids(&a.targets, &a.positions).context("--target / --position")?,
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
    let ledger_key = match (&a.ledger_key, &protocol) {
        (Some(hex), _) => ledger_key_arg(hex)?,
        (None, Some(protocol)) => {
            eprintln!("checking against the memory's own ledger key (give --ledger-key to choose yours)");
            protocol.ledger_key()
        }
        (None, None) => bail!("--bundle needs --ledger-key: the key you trust, not one the bundle brings"),
    };
    // The reader's idea of the latest Pulse: the one it names, else (a bundle made here) the
    // ledger's latest, which the bundle is made at; a bundle from elsewhere, none.
    let (bytes, as_of) = match (&a.bundle, &protocol) {
        (Some(path), _) => {
            (std::fs::read(path).with_context(|| format!("reading {}", path.display()))?, a.as_of)
        }
        (None, Some(protocol)) => {
            let (bytes, latest) = protocol.bundle(&policy, &targets).context("making the bundle")?;
            if let Some(out) = &a.out {
                std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
            }
            (bytes, Some(a.as_of.unwrap_or(latest)))
        }
        (None, None) => bail!("give --data (to make a bundle) or --bundle FILE (to check one)"),
    };
    let log_set = if a.trust_log_set { bundle::LogSet::Trusted } else { bundle::LogSet::Proved };
    let checked = bundle::check_with(&bytes, &ledger_key, &targets, &policy, bundle::Ask { as_of, log_set })
        .context("checking the bundle")?;
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
    for set in &checked.logs {
        let logs: Vec<String> = set.logs.iter().map(ToString::to_string).collect();
        let how = if set.proved {
            "all its logs, proved by their chain"
        } else {
            "as the bundle brings them, NOT proved"
        };
        outln!("  reviser {}: logs {} ({how})", name(&set.reviser), logs.join(", "));
    }
    match checked.staleness {
        Some(q) => outln!("staleness: checked, the heads are of Pulse {} ≥ {q}", checked.pulse),
        None => outln!(
            "staleness: NOT checked (no --as-of): a later Pulse may hold revisions this bundle lacks; \
             give --as-of with the latest Pulse you know of"
        ),
    }
    Ok(ExitCode::SUCCESS)
}
