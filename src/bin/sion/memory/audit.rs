//! `sion memory audit` and `repair`: the log re-read, and a damaged one mended.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use sion_memory::memory::Memory;

use crate::common::open_memory_read_only;
use crate::ui;

#[derive(Args)]
pub(crate) struct RepairArgs {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    pub(crate) data: PathBuf,
    /// When the damage is inside the committed head: keep the atoms before it as a new log on
    /// the same ledger.
    #[arg(long)]
    pub(crate) new_log: bool,
}

/// Whether opening failed because the log's records are damaged (not for want of a file or
/// a lock): then the segments alone can still say how far the log is whole.
pub(crate) fn damaged_log(e: &anyhow::Error) -> bool {
    use sion_memory::log::LogError;
    use sion_memory::memory::OpenError;
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<OpenError>(),
            Some(
                OpenError::Log(LogError::Damaged { .. } | LogError::Corrupt { .. })
                    | OpenError::Unreadable { .. }
            )
        ) || matches!(c.downcast_ref::<LogError>(), Some(LogError::Damaged { .. } | LogError::Corrupt { .. }))
    })
}

/// Audit a memory whose log will not open: read its segments only, and say how far it is
/// whole, where the damage is and what lies past it.
pub(crate) fn survey(dir: &Path, why: &anyhow::Error) -> Result<ExitCode> {
    let survey = sion_memory::log::survey(&dir.join("log")).context("reading the log's segments")?;
    outln!("BAD: the memory does not open: {why:#}");
    match &survey.damage {
        Some((segment, byte, reason)) => {
            outln!("BAD at position {}: {reason} ({}, byte {byte})", survey.whole, segment.display())
        }
        None => outln!("the {} segments read whole ({} atoms)", survey.segments, ui::count(survey.whole)),
    }
    outln!(
        "  {} atoms before it are whole; {} whole records follow the damage (read from the segments \
         alone, nothing was changed)",
        ui::count(survey.whole),
        ui::count(survey.whole_after)
    );
    Ok(ExitCode::FAILURE)
}

pub(crate) fn repair(dir: &Path, new_log: bool) -> Result<ExitCode> {
    let r = match Memory::repair(dir, new_log) {
        Ok(r) => r,
        Err(e @ sion_memory::memory::MemoryError::CommittedDamage { .. }) => {
            outln!("NOT REPAIRED: {e}");
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e).with_context(|| format!("repairing {}", dir.display())),
    };
    match &r.log.damage {
        None => {
            outln!("the log's segments read whole: {} atoms kept, nothing set aside", ui::count(r.log.kept))
        }
        Some((segment, byte, why)) => {
            outln!(
                "the log was damaged at position {} ({}, byte {byte}: {why}); kept the {} atoms before it",
                r.log.kept,
                segment.display(),
                ui::count(r.log.kept)
            );
            for (path, bytes) in &r.log.set_aside {
                outln!("  set aside {} ({} bytes)", path.display(), ui::count(*bytes));
            }
            outln!(
                "  {} whole records are among what was set aside (not in the log; a copy of this memory may hold them)",
                ui::count(r.log.whole_set_aside)
            );
            if r.new_log.is_none() && r.committed > 0 {
                outln!("  the committed head ({} atoms) is kept whole", ui::count(r.committed));
            }
        }
    }
    if let Some(n) = &r.new_log {
        outln!(
            "the ledger had committed {} atoms of log {}; {} are lost. The {} kept go on as a new log on \
             the same ledger, committed now; log {} stays at its last head",
            ui::count(n.committed),
            n.log,
            ui::count(n.committed - n.kept),
            ui::count(n.kept),
            n.log
        );
    }
    for p in &r.packs {
        outln!(
            "blob pack {} was damaged ({}): kept its first {} bytes, set aside {} ({} bytes)",
            p.pack.display(),
            p.why,
            ui::count(p.kept_bytes),
            p.set_aside.display(),
            ui::count(p.bytes)
        );
    }
    for (position, problem) in &r.lost_blobs {
        outln!("  the atom at position {position}: its payload is missing ({problem})");
    }
    if r.lost_blob_count > 0 {
        outln!("{} atoms commit to blobs that are missing or damaged", ui::count(r.lost_blob_count));
    }
    outln!("repaired: `sion memory audit --data {}` checks it", dir.display());
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn audit(dir: &Path) -> Result<ExitCode> {
    let memory = match open_memory_read_only(dir) {
        Ok(m) => m,
        Err(e) if damaged_log(&e) => return survey(dir, &e),
        Err(e) => return Err(e),
    };
    let size = memory.log().size();
    let bar = ui::bar(size, "atoms");
    let started = Instant::now();
    let (audit, committed) = memory.audit(|n| bar.set_position(n))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    if let Some((position, reason)) = &audit.first_bad {
        outln!("BAD at position {position}: {reason}");
        return Ok(ExitCode::FAILURE);
    }
    outln!(
        "audited {} atoms in {secs:.2} s: every record, offset and tree hash checks out; root {}",
        ui::count(audit.size),
        audit.root.map(hex::encode).unwrap_or_default()
    );
    match audit.root_at_mark {
        Some(root) if root == committed.head.root => {
            outln!(
                "the committed head ({} atoms, Pulse {}) matches the recomputed root",
                ui::count(committed.head.size),
                committed.committed_at
            );
            // The bytes atoms commit to by hash (map tiles, camera frames) are read back too.
            let bar = ui::bar(size, "atoms (blobs)");
            let blobs = memory.audit_blobs(|n| bar.set_position(n))?;
            bar.finish_and_clear();
            if blobs.bad > 0 {
                for (position, problem) in &blobs.first {
                    outln!("BAD blob of the atom at position {position}: {problem}");
                }
                outln!(
                    "BAD: {} of the {} blobs atoms commit to are missing or damaged ({} missing)",
                    ui::count(blobs.bad),
                    ui::count(blobs.referenced),
                    ui::count(blobs.missing)
                );
                return Ok(ExitCode::FAILURE);
            }
            outln!(
                "every blob atoms commit to that is held here ({}) hashes to its name{}",
                ui::count(blobs.referenced - blobs.elsewhere - blobs.forgotten),
                if blobs.elsewhere > 0 {
                    format!("; {} are kept elsewhere (no pack here is lost)", ui::count(blobs.elsewhere))
                } else {
                    String::new()
                }
            );
            if blobs.forgotten > 0 {
                outln!(
                    "{} sealed payloads were forgotten by retention (forget atoms say when and why)",
                    ui::count(blobs.forgotten)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            outln!(
                "BAD: the committed head ({} atoms, root {}) does not match the log",
                ui::count(committed.head.size),
                hex::encode(committed.head.root)
            );
            Ok(ExitCode::FAILURE)
        }
    }
}
