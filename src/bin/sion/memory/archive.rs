//! `sion memory archive` and `sion memory restore` (docs/SEAL.md, "Archives").

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use sion_archive::Archive;

use crate::common::{DataArg, open_memory};
use crate::ui;

#[derive(Args)]
pub struct ArchiveArgs {
    #[command(flatten)]
    data: DataArg,
    /// Where: a directory (a path or file://DIR), or s3://BUCKET/PREFIX for an S3-compatible
    /// store, configured from the environment: AWS_ENDPOINT (e.g. http://127.0.0.1:9000),
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, and AWS_ALLOW_HTTP=true for a
    /// plain-HTTP endpoint.
    #[arg(long)]
    to: String,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// The archive: a directory or s3://BUCKET/PREFIX, as for `archive`.
    #[arg(long)]
    from: String,
    /// The memory directory to make (new, or empty).
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// The writer's key (the archive is encrypted for it; 32 bytes, as `writer.key` in the
    /// memory directory). Keep a copy of it away from the robot.
    #[arg(long)]
    key: PathBuf,
    /// The ledger key you trust (64 hex digits): refuse unless the restored memory's ledger
    /// signs with it. An embedded ledger comes back from the archive itself, so without it the
    /// check rests on the archive alone.
    #[arg(long)]
    ledger_key: Option<String>,
    /// The last Pulse you recorded of this memory's ledger (printed by `commit`, `archive`,
    /// `restore` and `show`): refuse an archive whose ledger has not reached it — a copy
    /// made before later commits (a forget among them) would undo them. An embedded ledger
    /// comes back from the archive itself and cannot tell an old archive from the latest;
    /// this number, kept apart from it, can (docs/SEAL.md, "What an archive can promise").
    #[arg(long, value_name = "PULSE")]
    at_least_pulse: Option<u64>,
}

pub fn archive(a: ArchiveArgs) -> Result<ExitCode> {
    let mut memory = open_memory(&a.data.data)?;
    let store = Archive::open(&a.to).with_context(|| format!("opening the archive at {}", a.to))?;
    let bar = ui::bar(memory.log().size().max(1), "atoms");
    let written = store
        .write(&mut memory, |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .with_context(|| format!("archiving {} to {}", a.data.data.display(), a.to))?;
    bar.finish_and_clear();
    if written.committed_first > 0 {
        println!(
            "committed {} atoms first (an archive is of a committed head)",
            ui::count(written.committed_first)
        );
    }
    println!(
        "archived {} atoms (root {}, index {}) to {}: {} objects, {} new ({} bytes), {} no longer needed deleted",
        ui::count(written.head.size),
        ui::short(&written.head.root),
        ui::short(&written.head.index),
        a.to,
        ui::count(written.objects as u64),
        ui::count(written.sent as u64),
        ui::count(written.sent_bytes),
        ui::count(written.deleted as u64),
    );
    println!(
        "manifest {} committed as the head's manifest at Pulse {}",
        hex::encode(written.root),
        written.pulse
    );
    Ok(ExitCode::SUCCESS)
}

pub fn restore(a: RestoreArgs) -> Result<ExitCode> {
    let key = sion_memory::ledger::read_key(&a.key)
        .with_context(|| format!("reading the writer's key {}", a.key.display()))?;
    let pinned = match &a.ledger_key {
        Some(hex_key) => Some(crate::common::ledger_key_arg(hex_key)?),
        None => {
            eprintln!(
                "no --ledger-key: the restored memory is checked against the ledger it names (for an embedded one, the archive's own)"
            );
            None
        }
    };
    let store = Archive::open(&a.from).with_context(|| format!("opening the archive at {}", a.from))?;
    let bar = ui::bar(1, "atoms");
    let anchor = sion_archive::Anchor { ledger_key: pinned.as_ref(), at_least_pulse: a.at_least_pulse };
    let restored = store
        .restore_pinned(&a.data, &key, anchor, &sion_memory::fleet::connect, |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .with_context(|| format!("restoring {} from {}", a.data.display(), a.from))?;
    bar.finish_and_clear();
    println!(
        "restored {} atoms, {} blobs and {} files ({} bytes fetched) into {}",
        ui::count(restored.head.size),
        ui::count(restored.blobs as u64),
        ui::count(restored.files as u64),
        ui::count(restored.fetched_bytes),
        a.data.display()
    );
    println!(
        "checked against the committed head: {} atoms, root {}, index {}, manifest {}",
        ui::count(restored.head.size),
        hex::encode(restored.head.root),
        hex::encode(restored.head.index),
        hex::encode(restored.root)
    );
    println!(
        "its ledger is at Pulse {}: record it, and name it with --at-least-pulse next time",
        restored.pulse
    );
    if a.at_least_pulse.is_none() {
        eprintln!(
            "no --at-least-pulse: nothing here tells this archive from an older copy of it (its ledger came with \
             it, unless it is a fleet ledger); an older one would bring back what was forgotten since"
        );
    }
    Ok(ExitCode::SUCCESS)
}
