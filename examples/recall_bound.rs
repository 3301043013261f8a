//! No question can exhaust the robot (issue 30, requirement 6): over a memory of N atoms, a
//! question about everything is refused, with what the process holds bounded while it is
//! asked, and a writer remembering at the same time is not held up by it.
//!
//!     cargo run --release --example recall_bound -- [--atoms 10000000] [--dir DIR] [--seconds 10]
//!
//! Builds the seed's warehouse (examples/lifetime.rs's workload, a commit every 10,000 atoms)
//! unless DIR already holds a memory of that size, then, in a fresh process so its peak
//! resident memory is the asking's alone: one thread remembers an atom every 5 ms (a durable
//! append each, as `~/remember` or MCP's remember does), for `--seconds` with nothing else
//! running, then as long again while another thread asks for everything (the whole warehouse,
//! its whole life) over and over — first through a prover taken from the memory in a moment
//! (`Memory::snapshot`, as `sion mcp` and the node prove now), then proving while holding the
//! memory's lock (as `sion mcp` did before: the peer, measured in the same run). It prints the
//! remember latencies of each phase, the refusals, and the process's peak resident memory. (A
//! memory small enough that everything fits a 64 MiB proof gets it proved, not refused.)

mod proc_memory;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use sion_memory::atom::{Atom, BoxMm};
use sion_memory::index::geom::Query;
use sion_memory::memory::{Memory, ProveError};
use sion_memory::sim::{MONTH_NS, MonthInAWarehouse};

const SEED: u64 = 2026;
const BATCH: usize = 8192;
const COMMIT_EVERY: u64 = 10_000;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// The seed's density over a longer life (examples/lifetime.rs): 10^6 atoms a month.
fn span(n: u64) -> i64 {
    MONTH_NS.saturating_mul((n / 1_000_000).max(1) as i64)
}

fn build(dir: &Path, n: u64) -> Result<()> {
    if let Ok(m) = Memory::options(dir).open_read_only()
        && m.committed().head.size == n
    {
        println!("using the memory of {n} atoms at {}", dir.display());
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dir);
    let started = Instant::now();
    let mut memory = Memory::options(dir).agent("warehouse/robot-1").create()?;
    let mut atoms = MonthInAWarehouse::over(n, SEED, span(n));
    let mut appended = 0u64;
    let mut next_commit = COMMIT_EVERY;
    loop {
        let batch: Vec<Atom> = atoms.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        appended += batch.len() as u64;
        memory.remember(batch)?;
        if appended >= next_commit || appended == n {
            memory.commit(false)?;
            next_commit = appended + COMMIT_EVERY;
        }
    }
    println!("built {n} atoms at {} in {:.1} s", dir.display(), started.elapsed().as_secs_f64());
    Ok(())
}

struct Phase {
    name: &'static str,
    latencies: Vec<Duration>,
    asked: u64,
    refused: u64,
    ask_time: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// How a question is asked during a phase.
#[derive(Clone, Copy, PartialEq)]
enum Asking {
    Nothing,
    /// A prover taken under the lock, the proof made without it.
    Prover,
    /// The proof made while the lock is held.
    Locked,
}

fn phase(
    memory: &Arc<Mutex<Memory>>,
    q: &Query,
    name: &'static str,
    asking: Asking,
    secs: f64,
) -> Result<Phase> {
    let stop = Arc::new(AtomicBool::new(false));
    let asker = (asking != Asking::Nothing).then(|| {
        let (memory, q, stop) = (Arc::clone(memory), q.clone(), Arc::clone(&stop));
        std::thread::spawn(move || -> Result<(u64, u64, Duration)> {
            let (mut asked, mut refused, mut time) = (0u64, 0u64, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let answer = if asking == Asking::Prover {
                    let prover = memory.lock().unwrap_or_else(PoisonError::into_inner).snapshot(None)?;
                    prover.range(&q)
                } else {
                    memory.lock().unwrap_or_else(PoisonError::into_inner).prove_range(&q, None)
                };
                time += t.elapsed();
                asked += 1;
                match answer {
                    Err(ProveError::TooLarge(_)) => refused += 1,
                    Err(e) => return Err(e.into()),
                    // Small enough to prove (a memory of a few hundred thousand atoms): proved.
                    Ok(_) => {}
                }
            }
            Ok((asked, refused, time))
        })
    });
    let mut latencies = Vec::new();
    let mut atoms = MonthInAWarehouse::new(1_000_000, SEED + 1);
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < secs {
        let atom = atoms.next().context("atoms ran out")?;
        let t = Instant::now();
        memory.lock().unwrap_or_else(PoisonError::into_inner).remember(vec![atom])?;
        latencies.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let (asked, refused, ask_time) = match asker {
        Some(h) => h.join().map_err(|_| anyhow::anyhow!("the asking thread panicked"))??,
        None => (0, 0, Duration::ZERO),
    };
    latencies.sort_unstable();
    Ok(Phase { name, latencies, asked, refused, ask_time })
}

fn ask(dir: &Path, secs: f64) -> Result<()> {
    let memory = Memory::options(dir).open()?;
    let n = memory.committed().head.size;
    let opened_kib = proc_memory::rss().0;
    let start = MonthInAWarehouse::new(1, SEED).start_ns();
    let everything = Query::new(
        "map",
        BoxMm { min_mm: [-1_000_000; 3], max_mm: [2_000_000, 2_000_000, 60_000] },
        start - MONTH_NS,
        start + span(n) + MONTH_NS,
    )?;
    let memory = Arc::new(Mutex::new(memory));
    let phases = [
        phase(&memory, &everything, "remembering alone", Asking::Nothing, secs)?,
        phase(&memory, &everything, "while everything is asked (prover, no lock)", Asking::Prover, secs)?,
        phase(
            &memory,
            &everything,
            "while everything is asked under the lock (before)",
            Asking::Locked,
            secs,
        )?,
    ];
    let peak_kib = proc_memory::rss().0;
    println!("\n{n} atoms; the question: every atom of the warehouse, its whole life (frame map)");
    println!(
        "| phase | remembers | p50 ms | p99 ms | max ms | p99 / alone | asked | refused | mean refusal |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let alone = percentile(&phases[0].latencies, 0.99);
    for p in &phases {
        let p99 = percentile(&p.latencies, 0.99);
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2}× | {} | {} | {} |",
            p.name,
            p.latencies.len(),
            percentile(&p.latencies, 0.5),
            p99,
            p.latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
            p99 / alone.max(1e-9),
            p.asked,
            p.refused,
            if p.asked > 0 {
                format!("{:.0} ms", p.ask_time.as_secs_f64() * 1e3 / p.asked as f64)
            } else {
                "—".into()
            },
        );
    }
    println!(
        "\npeak resident memory of this process: {:.0} MiB (opened: {:.0} MiB); target: within 256 MiB",
        peak_kib as f64 / 1024.0,
        opened_kib as f64 / 1024.0
    );
    Ok(())
}

fn main() -> Result<()> {
    let secs: f64 = arg("--seconds").map_or(Ok(10.0), |s| s.parse()).context("--seconds")?;
    if let Some(dir) = arg("--ask") {
        return ask(Path::new(&dir), secs);
    }
    let n: u64 = arg("--atoms").map_or(Ok(1_000_000), |s| s.parse()).context("--atoms")?;
    let dir = arg("--dir")
        .map_or_else(|| std::env::temp_dir().join(format!("sion-recall-bound-{n}")), PathBuf::from);
    build(&dir, n)?;
    let status = Command::new(std::env::current_exe()?)
        .args(["--ask", &dir.to_string_lossy(), "--seconds", &secs.to_string()])
        .status()?;
    if !status.success() {
        bail!("the asking process failed");
    }
    Ok(())
}
