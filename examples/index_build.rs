//! The index build alone, over the seed's workload: the first build in a fresh process (which
//! pays for fresh memory) and the best of several, with the CPU time and page faults of each;
//! then commits of 1,000 more atoms, their fold and seal timed apart.
//!
//!     cargo run --release --example index_build -- [ATOMS] [BUILDS] [--on-disk] [--commits N]

use std::time::Instant;

use sion_memory::atom::Atom;
use sion_memory::index::{Index, IndexConfig};
use sion_memory::sim::MonthInAWarehouse;

/// User and system CPU seconds and minor page faults of this process so far.
fn usage() -> (f64, f64, i64) {
    let status = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces, so split after its ')').
    let fields: Vec<&str> = status.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    let tick = 100.0; // USER_HZ on Linux
    (field(11) as f64 / tick, field(12) as f64 / tick, field(7))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let builds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    // With `--on-disk`, the index a memory keeps: records on disk, the writer in its budgets.
    let on_disk = args.iter().any(|a| a == "--on-disk");
    // `--commits N`: how many commits of 1,000 atoms to time after the last build.
    let commits: usize = args
        .iter()
        .position(|a| a == "--commits")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    eprintln!("generating {n} atoms…");
    let all: Vec<Atom> = MonthInAWarehouse::new(n + 1_000 * commits as u64, 2026).collect();
    let (atoms, later) = all.split_at(n as usize);
    println!("| build | wall | fold | seal | user CPU | system CPU | page faults | root |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut times = Vec::new();
    for b in 1..=builds {
        let before = usage();
        let started = Instant::now();
        // What `Index::build` does, its fold and its seal timed apart.
        let mut index = if on_disk {
            Index::create(&scratch.path().join(format!("index-{b}")), IndexConfig::default()).expect("create")
        } else {
            Index::new()
        };
        index.fold_all(atoms).expect("fold");
        let folded = started.elapsed().as_secs_f64();
        let root = index.root().expect("root");
        let wall = started.elapsed().as_secs_f64();
        let after = usage();
        println!(
            "| {b} | {wall:.3} s | {folded:.3} s | {:.3} s | {:.2} s | {:.2} s | {} | {}… |",
            wall - folded,
            after.0 - before.0,
            after.1 - before.1,
            after.2 - before.2,
            &hex::encode(root)[..16]
        );
        times.push(wall);
        if b == builds {
            // Commits of 1,000 more atoms: fold, then seal.
            let (mut fold, mut seal) = (Vec::new(), Vec::new());
            for chunk in later.chunks(1_000) {
                let t = Instant::now();
                index.fold_all(chunk).expect("fold");
                fold.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                index.root().expect("root");
                seal.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let stats =
                |v: &[f64]| (v.iter().sum::<f64>() / v.len() as f64, v.iter().copied().fold(0.0, f64::max));
            let (f, s) = (stats(&fold), stats(&seal));
            println!(
                "\ncommit 1,000 atoms, mean / max of {}: fold {:.2} / {:.2} ms, seal {:.2} / {:.2} ms",
                fold.len(),
                f.0,
                f.1,
                s.0,
                s.1
            );
        }
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "\nindex build over {n} atoms on {} threads: first {:.3} s, best of {builds} {best:.3} s (seed: 0.78 s, one core)",
        rayon::current_num_threads(),
        times[0]
    );
}
