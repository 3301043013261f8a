//! The cognet runtime and the memory brain, measured:
//!
//!     cargo run --release --example brain_bench -- [ATOMS]
//!
//! empty-tick overhead (bare, and with three empty phases), sync throughput (atoms folded into
//! the resident index per second on a cold boot of a log of ATOMS atoms), and continuous-mode
//! lateness of wakes at 100 Hz (p50 / p99 over 5 s).

use std::time::{Duration, Instant};

use sion_memory::brain::{BrainConfig, MemoryBrain, MemoryKernel};
use sion_memory::cognet::{BoxError, CognetConfig, Definition, Loop, Mode, Telemetry, Tick};
use sion_memory::memory::Memory;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

struct Empty {
    ticks: u64,
    until: u64,
    phases: bool,
}

impl Loop for Empty {
    type Stimulus = ();
    async fn tick(&mut self, tick: &mut Tick<'_, ()>) -> Result<(), BoxError> {
        if self.phases {
            tick.phase("sync", async |_: &mut Tick<'_, ()>| Ok(())).await?;
            tick.phase("think", async |_: &mut Tick<'_, ()>| Ok(())).await?;
            tick.phase("act", async |_: &mut Tick<'_, ()>| Ok(())).await?;
        }
        self.ticks += 1;
        if self.ticks >= self.until {
            self.ticks = 0;
            tick.stop();
        }
        Ok(())
    }
}

async fn tick_overhead(phases: bool) -> Duration {
    let n = 200_000;
    let config = CognetConfig { mode: Mode::Invocation, max_ticks_per_wake: n + 1 };
    let mut def = Definition::new(config, Telemetry::new());
    def.declare_loop(Empty { ticks: 0, until: n, phases });
    let mut c = def.load().await.expect("load");
    let signal = CancellationToken::new();
    let t = Instant::now();
    c.wake(&[], &signal).await.expect("wake");
    t.elapsed() / n as u32
}

async fn lateness() -> (Duration, Duration, u64, u64) {
    let config = CognetConfig { mode: Mode::Continuous { period_ms: 10 }, max_ticks_per_wake: 32 };
    let mut def = Definition::new(config, Telemetry::new());
    def.declare_loop(Empty { ticks: 0, until: 1, phases: true });
    let mut c = def.load().await.expect("load");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.cancel();
    });
    let stats = c.run(&mut rx, &shutdown, |_, _| {}).await.expect("run");
    (
        stats.lateness_quantile(0.5).unwrap_or_default(),
        stats.lateness_quantile(0.99).unwrap_or_default(),
        stats.wakes,
        stats.skipped,
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (bare, phased) = rt.block_on(async { (tick_overhead(false).await, tick_overhead(true).await) });

    eprintln!("writing a log of {n} atoms…");
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("m");
    let memory = Memory::options(&dir).create()?;
    for chunk in sion_memory::sim::MonthInAWarehouse::new(n as u64, 3).collect::<Vec<_>>().chunks(8192) {
        memory.remember(chunk.to_vec())?;
    }
    drop(memory);
    let (folded, sync_time) = rt.block_on(async {
        let (kernel, _sensors) =
            MemoryKernel::new(Memory::options(&dir).open().expect("open")).expect("kernel");
        let mut brain = MemoryBrain::new(kernel, BrainConfig::default());
        let t = Instant::now();
        let folded = brain.sync(&CancellationToken::new()).expect("sync");
        brain.index().root().expect("root");
        (folded, t.elapsed())
    });

    eprintln!("five seconds of wakes at 100 Hz…");
    let (p50, p99, wakes, skipped) = rt.block_on(lateness());

    println!(
        "\nsion_memory cognet runtime and memory brain ({} cores)\n",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1)
    );
    println!("| measure | ours | aim |");
    println!("| --- | --- | --- |");
    println!("| empty tick (no phases) | {:.2} µs | ≤ 5 µs |", bare.as_secs_f64() * 1e6);
    println!("| tick with three empty phases (sync, think, act) | {:.2} µs | |", phased.as_secs_f64() * 1e6);
    println!(
        "| sync: cold boot of {n} atoms into the index (read, decode, fold, seal) | {:.0} atoms/s ({:.2} s) | |",
        folded as f64 / sync_time.as_secs_f64(),
        sync_time.as_secs_f64()
    );
    println!(
        "| continuous mode at 100 Hz for 5 s: wake lateness p50 / p99 | {:.3} / {:.3} ms ({wakes} wakes, {skipped} skipped) | p99 ≤ 1 ms |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    Ok(())
}
