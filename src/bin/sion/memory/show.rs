//! `sion memory show` and `dump`: what a memory holds.

use std::io::{self, BufWriter};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use sion_memory::time::rfc3339;

use crate::common::{DataArg, open_memory_read_only};
use crate::ui;

#[derive(Args)]
pub(crate) struct DumpArgs {
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// The first position to print.
    #[arg(long, default_value_t = 0)]
    pub(crate) from: u64,
    /// Print at most this many atoms.
    #[arg(long)]
    pub(crate) limit: Option<u64>,
}

#[derive(Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn dump(a: &DumpArgs) -> Result<ExitCode> {
    use std::io::Write as _;
    let memory = open_memory_read_only(&a.data.data)?;
    let mut out = BufWriter::new(io::stdout().lock());
    for entry in memory.log().scan(a.from).take(a.limit.map_or(usize::MAX, |n| n as usize)) {
        let (position, atom) = entry.context("reading the log")?;
        writeln!(out, "{}", atom.to_json_line(Some(position))).map_err(crate::stdout_failed)?;
    }
    out.flush().map_err(crate::stdout_failed)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn show(a: ShowArgs) -> Result<ExitCode> {
    let memory = open_memory_read_only(&a.data.data)?;
    let log = memory.committed();
    let tree = memory.log().head();
    let latest = memory.ledger().latest()?.header;
    let committed_time = memory.ledger().header(log.committed_at).ok().map(|h| h.header.time_ns);
    if a.json {
        let v = serde_json::json!({
            "data": a.data.data,
            "log": log.id.0,
            "writer": log.writer.to_string(),
            "agent": log.agent,
            "size": tree.size,
            "root": hex::encode(tree.root),
            "committed": {
                "size": log.head.size,
                "root": hex::encode(log.head.root),
                "index": hex::encode(log.head.index),
                "manifest": hex::encode(log.head.manifest),
                "commits": log.commits,
                "pulse": log.committed_at,
                "time": committed_time.map(rfc3339),
                "sealed": log.sealed,
            },
            "ledger": {
                "at": memory.ledger().describe(),
                "key": hex::encode(memory.ledger().public_key().to_bytes()),
                "pulse": latest.number,
            },
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!("memory {} (log {} on its ledger)", a.data.data.display(), log.id);
    outln!("  writer     {}", log.writer);
    if let Some(agent) = &log.agent {
        outln!("  agent      {agent}");
    }
    outln!("  log        {} atoms, root {}", ui::count(tree.size), hex::encode(tree.root));
    outln!(
        "  committed  {} atoms at Pulse {}{} (commit {}), root {}{}",
        ui::count(log.head.size),
        log.committed_at,
        committed_time.map(|t| format!(" ({})", rfc3339(t))).unwrap_or_default(),
        log.commits,
        hex::encode(log.head.root),
        if log.sealed { ", sealed" } else { "" }
    );
    if tree.size > log.head.size {
        outln!("             {} atoms not committed yet", ui::count(tree.size - log.head.size));
    }
    outln!(
        "  ledger     {}, key {}, latest Pulse {} ({})",
        memory.ledger().describe(),
        hex::encode(memory.ledger().public_key().to_bytes()),
        latest.number,
        rfc3339(latest.time_ns)
    );
    Ok(ExitCode::SUCCESS)
}
