//! What the index's record cache really takes: the bytes it counts against its budget
//! (`index_cache_mb`) beside what malloc has in use for it, measured by filling the cache with
//! the records of many queries. A budget means what it says only if the two agree.
//!
//!     cargo run --release --example cache_weight -- [--atoms 300000] [--cache-mb 48]

use std::time::Instant;

use anyhow::Result;
use sion_memory::atom::BoxMm;
use sion_memory::index::IndexConfig;
use sion_memory::index::geom::Query;
use sion_memory::memory::Memory;
use sion_memory::sim::{MONTH_NS, MonthInAWarehouse, SplitMix64, WAREHOUSE_MM};

fn in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    #[allow(unsafe_code)]
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = arg("--atoms", 300_000);
    let cache_mb = arg("--cache-mb", 48) as usize;
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("m");
    {
        let mut memory = Memory::options(&dir).agent("warehouse/robot-1").create()?;
        let atoms: Vec<_> = MonthInAWarehouse::over(n, 7, MONTH_NS).collect();
        for chunk in atoms.chunks(8192) {
            memory.remember(chunk.to_vec())?;
        }
        memory.commit(false)?;
    }
    let config = IndexConfig { cache_bytes: cache_mb << 20, ..IndexConfig::default() };
    let mut memory = Memory::options(&dir).index(config.clone()).open()?;
    let start = MonthInAWarehouse::new(1, 7).start_ns();
    let mut rng = SplitMix64::new(11);
    let before = in_use();
    let t = Instant::now();
    let mut queries = 0;
    println!("| queries | cache counts (MiB) | malloc in use grew (MiB) | ratio |");
    println!("| --- | --- | --- | --- |");
    for round in 0..8 {
        for _ in 0..200 {
            let size = [100_000, 100_000, 30_000];
            let min = [rng.range(0, WAREHOUSE_MM[0] - size[0]), rng.range(0, WAREHOUSE_MM[1] - size[1]), 0];
            let bounds = BoxMm { min_mm: min, max_mm: [min[0] + size[0], min[1] + size[1], size[2]] };
            let t0 = start + rng.range(0, MONTH_NS - 6 * 3_600_000_000_000);
            let q = Query::new("map", bounds, t0, t0 + 6 * 3_600_000_000_000)?;
            std::hint::black_box(memory.prove_range(&q, None)?);
            queries += 1;
        }
        let counted = memory.index()?.memory().cached;
        let grew = in_use().saturating_sub(before);
        println!(
            "| {queries} | {:.1} | {:.1} | {:.2} |",
            counted as f64 / 1048576.0,
            grew as f64 / 1048576.0,
            grew as f64 / counted.max(1) as f64
        );
        let _ = round;
    }
    println!("\n{n} atoms, a cache budget of {cache_mb} MiB, {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}
