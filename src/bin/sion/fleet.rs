//! `sion fleet`: questions asked of a whole fleet's memories at once, proved complete across
//! robots against the fleet ledger's state (docs/PROOFS.md, "Fleet recall").

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};

use crate::common::QuestionArgs;

#[derive(Subcommand)]
pub enum FleetCommand {
    /// Ask one range question of every robot's memory on a fleet ledger, as of one Pulse, and
    /// write the answer as one bundle: the Pulse's signed header, every log's state at it (so
    /// its reader knows no robot was left out), and each robot's range proof as of the head
    /// the Pulse gives its log. Memories are read where they are (`--memory DIR`, once per
    /// robot: its directory, mounted or copied). A log with atoms whose memory is not given,
    /// or that cannot answer as of that head, is named; the bundle is then not written unless
    /// --partial (its reader would refuse it).
    Recall(RecallArgs),
    /// Check a fleet recall bundle against the ledger key you trust and the question you ask:
    /// every log in the Pulse's state (or in --group) that held atoms answers exactly it, as
    /// of exactly the head the Pulse gives it. Prints the answer, robot by robot.
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct RecallArgs {
    /// The fleet ledger service.
    #[arg(long, value_name = "URL")]
    ledger: String,
    /// A robot's memory directory; once per robot.
    #[arg(long = "memory", value_name = "DIR", required = true)]
    memories: Vec<PathBuf>,
    /// The Pulse to ask as of [default: the latest].
    #[arg(long, value_name = "N")]
    pulse: Option<u64>,
    /// Only logs of this agent and those under it (`yard` takes `yard/robot-7`).
    #[arg(long, value_name = "NAME", value_parser = group_value)]
    group: Option<String>,
    /// Where to write the bundle.
    #[arg(long, short = 'o', value_name = "FILE")]
    out: PathBuf,
    /// Write the bundle even if a robot in scope is missing or cannot answer (as evidence).
    #[arg(long)]
    partial: bool,
    /// Ask only the logs the ledger's cells list in the box (SIONFLT2, docs/PROOFS.md, "Fleet
    /// recall by cells"): the bundle states those logs alone, with the proof of the box's cells,
    /// so its size follows the robots that were there, not the fleet. Only a memory whose log
    /// is listed is needed; a ledger made before cells refuses it.
    #[arg(long)]
    by_cells: bool,
    #[command(flatten)]
    question: QuestionArgs,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The bundle.
    file: PathBuf,
    /// The ledger key you trust (64 hex digits), obtained apart from whoever sent the bundle.
    #[arg(long, value_name = "HEX")]
    ledger_key: String,
    /// Only logs of this agent and those under it: the bundle must have been asked so.
    #[arg(long, value_name = "NAME", value_parser = group_value)]
    group: Option<String>,
    #[command(flatten)]
    question: QuestionArgs,
}

/// A group is an agent name (docs/LEDGER.md): anything else would take no log.
fn group_value(text: &str) -> Result<String, String> {
    if sion_verify::ledger::valid_agent_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not an agent name (1 to 128 bytes, `/`-separated segments of a-z, 0-9, - and _)"
        ))
    }
}

pub fn run(cmd: FleetCommand) -> Result<ExitCode> {
    match cmd {
        FleetCommand::Recall(a) => recall(a),
        FleetCommand::Verify(a) => verify(a),
    }
}

fn recall(a: RecallArgs) -> Result<ExitCode> {
    let query = a.question.query()?;
    let link = sion_memory::fleet::RemoteLedger::connect(&a.ledger)
        .with_context(|| format!("connecting to the fleet ledger at {}", a.ledger))?;
    let memories =
        a.memories.iter().map(|d| crate::common::open_memory_read_only(d)).collect::<Result<Vec<_>>>()?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message("logs' states, then answers");
    let progress = |done: usize, all: usize| {
        bar.set_length(all as u64);
        bar.set_position(done as u64);
    };
    let (recalled, gaps) = sion_memory::fleet::recall(
        &link,
        a.pulse,
        &query,
        a.group.as_deref(),
        &memories,
        sion_verify::proof::fleet::MAX_BUNDLE_BYTES,
        a.by_cells,
        progress,
    )?;
    bar.finish_and_clear();
    for g in &gaps {
        eprintln!("{g}");
    }
    let missing = gaps.iter().any(|g| !matches!(g, sion_memory::fleet::Gap::OutOfScope { .. }));
    if missing && !a.partial {
        bail!("the bundle would not hold (above); nothing written (--partial writes it anyway)");
    }
    sion_memory::disk::Disk::os()
        .replace_file(&a.out, &recalled.bytes)
        .with_context(|| format!("writing {}", a.out.display()))?;
    outln!(
        "{}: Pulse {} ({}), {} logs, {} answers, {} bytes",
        a.out.display(),
        recalled.pulse,
        sion_verify::time::rfc3339(recalled.time_ns),
        recalled.logs,
        recalled.answers,
        recalled.bytes.len()
    );
    Ok(if missing { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

fn verify(a: VerifyArgs) -> Result<ExitCode> {
    let query = a.question.query()?;
    let key = crate::common::ledger_key_arg(&a.ledger_key)?;
    // Bounded before it is read: a bundle is at most 1 GiB.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(&a.file).with_context(|| format!("reading {}", a.file.display()))?,
            sion_verify::proof::fleet::MAX_BUNDLE_BYTES as u64 + 1,
        ),
        &mut bytes,
    )
    .with_context(|| format!("reading {}", a.file.display()))?;
    match sion_verify::proof::fleet::verify_fleet(&bytes, &key, &query, a.group.as_deref()) {
        Ok(answer) => {
            for l in &answer.logs {
                outln!(
                    "log {} ({}): {} atom(s)",
                    l.log,
                    l.agent.as_deref().unwrap_or("no agent"),
                    l.atoms.len()
                );
            }
            outln!(
                "VALID: {} atom(s) from {} log(s) in scope, complete as of Pulse {} ({})",
                answer.atoms(),
                answer.in_scope,
                answer.pulse,
                sion_verify::time::rfc3339(answer.time_ns)
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            outln!("INVALID: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
