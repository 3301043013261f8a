//! `sion brain`: the memory brain in continuous mode on a memory directory.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use sion_memory::atom::Atom;
use sion_memory::brain::{BrainConfig, Intake, MemoryBrain, MemoryKernel};
use sion_memory::cognet::{Definition, Mode, Telemetry};
use sion_memory::memory::Memory;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ui;

#[derive(Args)]
pub struct BrainArgs {
    /// The memory directory (created with `sion memory open`).
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// Settings as JSON (see docs/BRAIN.md); defaults: a 100 ms period, a commit every 5 s or
    /// 10,000 atoms.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Wake every this many milliseconds (overrides the config).
    #[arg(long)]
    period_ms: Option<u64>,
    /// Also take in atoms as JSON lines from this file (or - for standard input), as a
    /// sensor would: each is durable before the brain sees it.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Print each taken-in atom as JSON with its position once it is durable.
    #[arg(long)]
    echo: bool,
    /// Write the loop's telemetry to this MCAP file (Foxglove and Rerun open it).
    #[arg(long)]
    telemetry: Option<PathBuf>,
    /// Stop once the input is done and the brain has folded, derived and committed everything.
    #[arg(long)]
    until_idle: bool,
}

pub fn run(a: BrainArgs) -> Result<ExitCode> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    runtime.block_on(run_async(a))
}

async fn run_async(a: BrainArgs) -> Result<ExitCode> {
    let mut config: BrainConfig = match &a.config {
        Some(path) => serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("{} is not a brain configuration (docs/BRAIN.md)", path.display()))?,
        None => BrainConfig::default(),
    };
    if let Some(p) = a.period_ms {
        config.cognet.mode = Mode::Continuous { period_ms: p };
    }
    let memory = Memory::options(&a.data)
        .open()
        .with_context(|| format!("opening the memory at {}", a.data.display()))?;
    let (kernel, intake) = MemoryKernel::new(memory).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut telemetry = Telemetry::new();
    if let Some(path) = &a.telemetry {
        telemetry = telemetry.to_mcap(path).with_context(|| format!("creating {}", path.display()))?;
    }
    let mut def = Definition::new(config.cognet.clone(), telemetry);
    def.declare_loop(MemoryBrain::new(kernel, config));
    let mut cognet = def.load().await.map_err(|e| anyhow::anyhow!("{e}"))?;

    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });

    // Intake: atoms taken in on a thread of their own, durable before the brain is told.
    let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
    let input_done = Arc::new(AtomicBool::new(a.input.is_none()));
    let input_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    if let Some(path) = a.input.clone() {
        let (done, error, echo) = (Arc::clone(&input_done), Arc::clone(&input_error), a.echo);
        std::thread::spawn(move || {
            if let Err(e) = take_in(&path, &intake, echo, &tx) {
                *error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(format!("{e:#}"));
            }
            done.store(true, Ordering::SeqCst);
        });
    }

    let status = ui::bar(0, "atoms folded");
    let mut last_status = Instant::now();
    let stop = shutdown.clone();
    let done = Arc::clone(&input_done);
    let until_idle = a.until_idle;
    let started = Instant::now();
    let result = cognet
        .run(&mut rx, &shutdown, |c, stats| {
            let s = c.body().stats();
            if last_status.elapsed() >= Duration::from_millis(500) {
                last_status = Instant::now();
                status.set_position(s.folded);
                status.set_message(format!(
                    "ticks {} · folded {} · derived {} · last commit {} · skipped wakes {}",
                    ui::count(stats.ticks),
                    ui::count(s.folded),
                    ui::count(s.derived),
                    s.last_commit
                        .map(|(p, n)| format!("Pulse {p} ({} atoms)", ui::count(n)))
                        .unwrap_or_else(|| "none".into()),
                    stats.skipped
                ));
            }
            if until_idle && done.load(Ordering::SeqCst) && c.body().idle() {
                stop.cancel();
            }
        })
        .await;
    status.finish_and_clear();
    let stats = result.map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(e) = input_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        eprintln!("input stopped: {e}");
    }
    let mut brain = cognet.shutdown().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let s = brain.stats().clone();
    let size = brain.index().size();
    let root = brain.index().root().map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "brain stopped after {:.1} s: {} wakes, {} ticks, {} skipped; folded {}, derived {}, {} commits{}",
        started.elapsed().as_secs_f64(),
        stats.wakes,
        stats.ticks,
        stats.skipped,
        ui::count(s.folded),
        ui::count(s.derived),
        s.commits,
        s.last_commit.map(|(p, n)| format!(", the last at Pulse {p} ({n} atoms)")).unwrap_or_default()
    );
    outln!("index root {} at size {size}", hex::encode(root));
    Ok(ExitCode::SUCCESS)
}

/// Read JSON lines, append them durably in batches, echo them, and tell the brain.
fn take_in(path: &PathBuf, intake: &Intake, echo: bool, tx: &mpsc::UnboundedSender<u64>) -> Result<()> {
    let reader: Box<dyn std::io::BufRead> = if path.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        Box::new(BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        ))
    };
    let stdout = std::io::stdout();
    let mut batch = Vec::new();
    let flush = |batch: &mut Vec<Atom>| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let atoms = std::mem::take(batch);
        let got = intake.remember(atoms.clone()).context("appending to the log")?;
        if echo {
            let mut out = stdout.lock();
            for (atom, a) in atoms.iter().zip(&got) {
                writeln!(out, "{}", atom.to_json_line(Some(a.position))).map_err(crate::stdout_failed)?;
            }
            out.flush().map_err(crate::stdout_failed)?;
        }
        let _ = tx.send(got.len() as u64);
        Ok(())
    };
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading line {}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        batch.push(Atom::from_json(&line).with_context(|| format!("line {}", i + 1))?);
        if batch.len() >= 256 {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)
}
