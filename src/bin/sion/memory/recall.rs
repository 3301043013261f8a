//! `sion memory recall`, `subject`, `links` and `prove`: questions answered with their proofs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sion_memory::atom::Atom;
use sion_memory::memory::Memory;
use sion_memory::proof::{Claim, ListKey, NearQuery, ProofFile, Verified};
use sion_memory::time::rfc3339;

use crate::common::{DataArg, QuestionArgs, open_memory_read_only, prove_warned};
use crate::ui;

#[derive(Args)]
pub(crate) struct AnswerArgs {
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// Answer as of the committed head with this many atoms [default: the latest].
    #[arg(long)]
    pub(crate) as_of: Option<u64>,
    /// Also write the answer with its proof to this file (for `sion memory verify`). Was
    /// `--proof`, still taken for this release.
    #[arg(long = "out", alias = "proof", value_name = "FILE")]
    pub(crate) proof: Option<PathBuf>,
    /// Print JSON: the head and the atoms in their JSON form (docs/ATOM.md).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct RecallArgs {
    #[command(flatten)]
    pub(crate) question: QuestionArgs,
    #[command(flatten)]
    pub(crate) answer: AnswerArgs,
}

#[derive(Args)]
pub(crate) struct NearestArgs {
    /// The frame the point is in (`/map` is `map`, as in tf2).
    #[arg(long, value_parser = crate::common::frame_value)]
    pub(crate) frame: String,
    /// The point: X,Y,Z, each with its unit (2.5m,-1m,0m; also cm and mm); bare integers are
    /// millimetres.
    #[arg(long, value_name = "X,Y,Z", allow_hyphen_values = true, value_parser = point_value)]
    pub(crate) point: [i64; 3],
    /// The instant: RFC 3339, seconds with their unit, bare nanoseconds (ROS Time's), or
    /// `now`. Or give an interval with --from and --to.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::common::time_from, conflicts_with_all = ["from", "to"])]
    pub(crate) at: Option<i64>,
    /// Start of the interval (as --at).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::common::time_from, requires = "to")]
    pub(crate) from: Option<i64>,
    /// End of the interval, excluded (as --at).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::common::time_to, requires = "from")]
    pub(crate) to: Option<i64>,
    /// How many atoms: the K nearest [1 to 10000].
    #[arg(long, short = 'k', default_value_t = 1)]
    pub(crate) k: u32,
    #[command(flatten)]
    pub(crate) answer: AnswerArgs,
}

pub(crate) fn point_value(text: &str) -> Result<[i64; 3], String> {
    sion_memory::units::parse_point(text).map_err(|e| e.problem)
}

#[derive(Args)]
pub(crate) struct ListArgs {
    /// The subject (for `subject`) or the atom id, 64 hex digits (for `links`).
    pub(crate) key: String,
    #[command(flatten)]
    pub(crate) answer: AnswerArgs,
}

#[derive(Subcommand)]
pub(crate) enum ProveCommand {
    /// Prove that the atom at a position is in the committed head.
    Inclusion {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: inclusion-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove that the committed index leaves out the atom at a position (convicting the
    /// writer); fails if the index holds it, as an honest index does.
    Omission {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: omission-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove that the ledger's map cells leave this log out where the atom at a position lies
    /// (convicting its writer, who must list its log in every cell its atoms lie in:
    /// docs/LEDGER.md, "Cells"); fails if every cell of the atom lists the log, as an honest
    /// writer's do.
    CellOmission {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: cell-omission-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove when the atom at a position was recorded: the Pulse whose commit first covered
    /// it, and the log's state at the Pulse before (the ledger's clock, not the writer's).
    Time {
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        position: u64,
        /// Where to write the proof [default: recorded-POSITION.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Prove that the log's first N atoms are a prefix of the committed head.
    Consistency {
        #[command(flatten)]
        data: DataArg,
        /// The older size N.
        #[arg(long)]
        from: u64,
        /// Where to write the proof [default: consistency-N.sionproof].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub(crate) fn recall(a: RecallArgs) -> Result<ExitCode> {
    let query = a.question.query()?;
    box_answer(&query, &a.answer, |s, q| s.range(q))
}

pub(crate) fn last_seen(a: RecallArgs) -> Result<ExitCode> {
    box_answer(&a.question.query()?, &a.answer, |s, q| s.latest(q))
}

pub(crate) fn count(a: RecallArgs) -> Result<ExitCode> {
    box_answer(&a.question.query()?, &a.answer, |s, q| s.count(q))
}

/// Answer a question about a box and interval (range, last seen, count) with its warnings.
fn box_answer(
    query: &sion_memory::index::geom::Query,
    a: &AnswerArgs,
    prove: impl FnOnce(
        &sion_memory::memory::Snapshot,
        &sion_memory::index::geom::Query,
    ) -> Result<ProofFile, sion_memory::memory::ProveError>,
) -> Result<ExitCode> {
    let memory = open_memory_read_only(&a.data.data)?;
    let started = Instant::now();
    let (file, warnings) = prove_warned(&memory, query, a.as_of, prove)?;
    answer_warned(file, a, started, Some(&memory), &warnings)
}

pub(crate) fn nearest(a: NearestArgs) -> Result<ExitCode> {
    let (from, to) = match (a.at, a.from, a.to) {
        (Some(t), _, _) => (t, t),
        (None, Some(from), Some(to)) => (from, to),
        _ => anyhow::bail!("give --at, or --from and --to"),
    };
    let query =
        NearQuery::new(&a.frame, a.point, from, to, a.k).map_err(|e| anyhow::anyhow!("the question: {e}"))?;
    let memory = open_memory_read_only(&a.answer.data.data)?;
    let started = Instant::now();
    let file = memory.prove_nearest(&query, a.answer.as_of).context("answering")?;
    answer(file, &a.answer, started, Some(&memory))
}

pub(crate) fn list(key: ListKey, a: AnswerArgs) -> Result<ExitCode> {
    let memory = open_memory_read_only(&a.data.data)?;
    let started = Instant::now();
    let file = memory.prove_list(key, a.as_of).context("answering")?;
    answer(file, &a, started, Some(&memory))
}

/// Print an answer (checked, as a reader would) and write its proof if asked.
pub(crate) fn answer(
    file: ProofFile,
    a: &AnswerArgs,
    started: Instant,
    memory: Option<&Memory>,
) -> Result<ExitCode> {
    answer_warned(file, a, started, memory, &[])
}

/// [`answer`], with the warnings about its question (in the JSON too; printed already).
pub(crate) fn answer_warned(
    file: ProofFile,
    a: &AnswerArgs,
    started: Instant,
    memory: Option<&Memory>,
    warnings: &[String],
) -> Result<ExitCode> {
    let bytes = file.encode();
    if bytes.len() > sion_memory::proof::MAX_FILE_BYTES {
        anyhow::bail!(
            "the answer's proof is {} bytes, over the 64 MiB a verifier reads: ask a smaller box or a shorter interval",
            ui::count(bytes.len() as u64)
        );
    }
    let verified = file.verify(None).context("the answer just proved does not verify (a bug)")?;
    let secs = started.elapsed().as_secs_f64();
    if let Some(path) = &a.proof {
        std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        let v = serde_json::json!({
            "head": {
                "log": verified.log.0,
                "size": verified.head.size,
                "root": hex::encode(verified.head.root),
                "index": hex::encode(verified.head.index),
                "pulse": verified.pulse.map(|(n, t, _)| serde_json::json!({"number": n, "time": rfc3339(t)})),
            },
            "claim": verified.claim.to_json(),
            "proof_bytes": bytes.len(),
            "sealed": sealed_states(&verified, memory),
            "warnings": warnings,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_verified(&verified, memory)?;
        outln!(
            "  proof   {} bytes, built in {:.1} ms{}",
            bytes.len(),
            secs * 1e3,
            a.proof.as_ref().map(|p| format!(", written to {}", p.display())).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn prove(cmd: ProveCommand) -> Result<ExitCode> {
    // One path for every kind: open, prove, write where asked or to KIND-N.sionproof.
    let (data, out, name, n) = match &cmd {
        ProveCommand::Inclusion { data, position, out } => (data, out, "inclusion", *position),
        ProveCommand::Omission { data, position, out } => (data, out, "omission", *position),
        ProveCommand::Time { data, position, out } => (data, out, "recorded", *position),
        ProveCommand::CellOmission { data, position, out } => (data, out, "cell-omission", *position),
        ProveCommand::Consistency { data, from, out } => (data, out, "consistency", *from),
    };
    let memory = open_memory_read_only(&data.data)?;
    let file = match &cmd {
        ProveCommand::Inclusion { .. } => memory.prove_inclusion(n)?,
        ProveCommand::Omission { .. } => memory.prove_omission(n)?,
        ProveCommand::Time { .. } => memory.prove_recorded(n)?,
        ProveCommand::CellOmission { .. } => memory.prove_cell_omission(n)?,
        ProveCommand::Consistency { .. } => memory.prove_consistency(n)?,
    };
    let out = out.clone().unwrap_or_else(|| PathBuf::from(format!("{name}-{n}.sionproof")));
    write_proof(&file, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// Where the sealed payloads of an answer's atoms stand (position → state), for --json.
pub(crate) fn sealed_states(v: &Verified, memory: Option<&Memory>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let (Claim::Range { atoms, .. } | Claim::List { atoms, .. }, Some(m)) = (&v.claim, memory) {
        for (position, atom) in atoms {
            if let Some(state) = super::space::payload_state(m, atom) {
                out.insert(position.to_string(), state.into());
            }
        }
    }
    out.into()
}

pub(crate) fn print_verified(v: &Verified, memory: Option<&Memory>) -> Result<()> {
    outln!("proves: {}", v.statement());
    if let Claim::Range { query, .. } = &v.claim {
        outln!("  asked   {} (UTC)", sion_memory::units::show_query(query));
    }
    if let Claim::Latest { query, .. } | Claim::Count { query, .. } = &v.claim {
        outln!("  asked   {} (UTC)", sion_memory::units::show_query(query));
    }
    if let Claim::Count { counted, .. } = &v.claim {
        outln!(
            "  count   {} atoms, valid for {} s in all",
            ui::count(counted.count),
            sion_memory::units::show_seconds_u128(counted.duration_ns)
        );
        if let Some((first, last)) = counted.span {
            outln!("  seen    from {} until {} (UTC)", rfc3339(first), rfc3339(last));
        }
    }
    if let Claim::Range { atoms, .. } | Claim::List { atoms, .. } = &v.claim {
        print_atoms(atoms, memory)?;
    }
    if let Claim::Latest { atom: Some((p, a)), .. } = &v.claim {
        outln!("  last seen until {} (UTC)", rfc3339(a.parts().valid.to_ns));
        print_atoms(&[(*p, (**a).clone())], memory)?;
    }
    if let Claim::Nearest { atoms, .. } = &v.claim {
        for (p, a, d2) in atoms.iter().take(20) {
            outln!("  {p:>10}  {:.3} m away", (*d2 as f64).sqrt() / 1000.0);
            print_atoms(&[(*p, a.clone())], memory)?;
        }
        if atoms.len() > 20 {
            outln!("  … and {} more (--json lists them all)", atoms.len() - 20);
        }
    }
    outln!("  head    {} atoms, root {}", ui::count(v.head.size), hex::encode(v.head.root));
    match v.pulse {
        Some((number, time_ns, key)) => {
            outln!(
                "  ledger  committed at Pulse {number} ({}), signed by {}",
                rfc3339(time_ns),
                hex::encode(key)
            )
        }
        None => outln!("  ledger  not attested: the head is taken on the writer's word"),
    }
    Ok(())
}

pub(crate) fn print_atoms(atoms: &[(u64, Atom)], memory: Option<&Memory>) -> Result<()> {
    for (position, atom) in atoms.iter().take(20) {
        let p = atom.parts();
        let sealed = memory.and_then(|m| super::space::payload_state(m, atom)).map(|s| format!("  {s}"));
        outln!(
            "  {position:>10}  {:<12} {:<16} {:?}..={:?} mm  [{}, {}) ns{}",
            p.kind.as_str(),
            p.subject,
            p.bounds.min_mm,
            p.bounds.max_mm,
            p.valid.from_ns,
            p.valid.to_ns,
            sealed.unwrap_or_default()
        );
    }
    if atoms.len() > 20 {
        outln!("  … and {} more (--json lists them all)", atoms.len() - 20);
    }
    Ok(())
}

fn write_proof(file: &ProofFile, out: &Path) -> Result<()> {
    let bytes = file.encode();
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    let verified = file.verify(None).context("the proof just built does not verify (a bug)")?;
    outln!("wrote {} ({} bytes)", out.display(), bytes.len());
    print_verified(&verified, None)?;
    Ok(())
}
