//! A memory that lives for months: what it costs to open, ask, commit and keep, as the log
//! grows from 10^6 to 10^8 atoms.
//!
//!     cargo build --release --bin sion
//!     cargo run --release --example lifetime -- [--sizes 1000000,10000000,100000000] [--dir DIR] [--remove]
//!
//! `--remove` deletes each size's memory once it is measured, so the three sizes need the disk
//! of the largest alone (~64 GB at 10^8) rather than all of them together.
//!
//! The workload is the seed's warehouse (1 km × 1 km × 30 m, the same mix of observations,
//! poses, coverage and map tiles) at the seed's density — 10^6 atoms a month — running for
//! longer: 10^7 atoms are ten months, 10^8 about eight years. So the seed's four query rows get
//! the answers they get at 10^6 (an hour of this warehouse holds as many atoms at every size),
//! and what grows is only the memory around them; over a life longer than the seed's month,
//! the warehouse is mapped again every month (a map tile holds for a month, not until further
//! notice), so a query sees a month of tiles at every size, as at 10^6. (Packing 10^8 atoms
//! into the same month instead makes every answer a hundred times larger, and with it its
//! proof; that measures the answer, not the memory.)
//!
//! For each size it builds the memory in its own process (durable appends in batches of 8,192,
//! a commit every 10,000 atoms as the node's `commit_every_atoms` does — 100 at 10^6, 10,000
//! at 10^8, so the ledger has lived as long as the log), then, each in a fresh process: opens it from
//! its checkpoint and answers 25 queries of each row (proof size, prove and verify time, best
//! of 3, peak memory); runs `sion memory recall` end to end; commits 1,000 new atoms a hundred
//! times; and opens it without the index's checkpoint (a full re-fold). It prints one table, the seed's figures beside ours.
//!
//! Each row is asked twice: at random hours of the whole life, and as the same 25 questions
//! at every size (the hours asked at 10^6, in the first month). The first is what a robot asks;
//! but a month into a longer life a tile holds for a month, where in the seed's month tiles
//! accumulate from nothing, so those answers are larger at 10^7 and 10^8 than at 10^6. The
//! second has the same answers at every size, so its proofs show what the log's size alone
//! does to a proof: that is the row the ≤ 1.5× target is read on.

mod proc_memory;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proc_memory::rss;

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use sion_memory::atom::{Atom, BoxMm};
use sion_memory::index::geom::Query;
use sion_memory::memory::{IndexBoot, Memory};
use sion_memory::proof::{Expect, Question};
use sion_memory::sim::{MONTH_NS, MonthInAWarehouse, SplitMix64, WAREHOUSE_MM};

const HOUR_NS: i64 = 3_600_000_000_000;
const SEED: u64 = 2026;
const BATCH: usize = 8192;
/// Atoms between commits while building a memory (the node's default `commit_every_atoms`).
const COMMIT_EVERY: u64 = 10_000;
const QUERIES: usize = 25;
/// Commits of 1,000 atoms onto a built memory.
const ROUNDS: u64 = 100;

struct Row {
    size_m: [i64; 3],
    hours: i64,
    /// The seed's results, proof KiB, verify ms.
    seed: (f64, f64, f64),
}

const ROWS: [Row; 4] = [
    Row { size_m: [10, 10, 3], hours: 1, seed: (0.2, 5.9, 0.10) },
    Row { size_m: [50, 50, 10], hours: 1, seed: (9.0, 36.0, 0.21) },
    Row { size_m: [100, 100, 30], hours: 6, seed: (169.0, 154.7, 1.0) },
    Row { size_m: [200, 200, 30], hours: 24, seed: (1711.0, 548.6, 4.2) },
];

fn span(n: u64) -> i64 {
    (MONTH_NS as i128 * n as i128 / 1_000_000) as i64
}

fn start_ns() -> i64 {
    MonthInAWarehouse::new(1, SEED).start_ns()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn du(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if meta.is_file() {
        return meta.len();
    }
    std::fs::read_dir(path).map_or(0, |d| d.flatten().map(|e| du(&e.path())).sum())
}

/// The queries of a row, the same for every size of the same density.
fn queries(row: &Row, n: u64, rng: &mut SplitMix64) -> Vec<Query> {
    let size_mm = row.size_m.map(|m| m * 1_000);
    (0..QUERIES)
        .map(|_| {
            let min = [
                rng.range(0, WAREHOUSE_MM[0] - size_mm[0] + 1),
                rng.range(0, WAREHOUSE_MM[1] - size_mm[1] + 1),
                rng.range(0, WAREHOUSE_MM[2] - size_mm[2] + 1),
            ];
            let bounds = BoxMm {
                min_mm: min,
                max_mm: [min[0] + size_mm[0], min[1] + size_mm[1], min[2] + size_mm[2]],
            };
            let t0 = start_ns() + rng.range(0, span(n) - row.hours * HOUR_NS);
            Query::new("map", bounds, t0, t0 + row.hours * HOUR_NS).expect("a query")
        })
        .collect()
}

/// Child: build the memory of `n` atoms.
fn build(dir: &Path, n: u64) -> Result<Value> {
    let _ = std::fs::remove_dir_all(dir);
    let mut memory = Memory::options(dir).agent("warehouse/robot-1").create()?;
    let mut atoms = MonthInAWarehouse::over(n, SEED, span(n));
    let (mut appended, mut append_time, mut fold_time) = (0u64, Duration::ZERO, Duration::ZERO);
    let started = Instant::now();
    let every =
        std::env::var("SION_LIFETIME_COMMIT_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(COMMIT_EVERY);
    let mut next_commit = every;
    let mut pre_commit = 0;
    loop {
        let batch: Vec<Atom> = atoms.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        let t = Instant::now();
        appended += batch.len() as u64;
        memory.remember(batch)?;
        append_time += t.elapsed();
        if appended >= next_commit || appended == n {
            if pre_commit == 0 {
                pre_commit = rss().0;
            }
            let t = Instant::now();
            memory.commit(false)?;
            fold_time += t.elapsed();
            next_commit += every;
            if appended % 10_000_000 < BATCH as u64 {
                eprintln!("  {appended} atoms, {:.0} s", started.elapsed().as_secs_f64());
            }
        }
    }
    let (peak, anon, file) = rss();
    Ok(json!({
        "append_rate": appended as f64 / append_time.as_secs_f64(),
        "append_s": append_time.as_secs_f64(),
        "commit_s": fold_time.as_secs_f64(),
        "total_s": started.elapsed().as_secs_f64(),
        "peak_kib": peak, "anon_kib": anon, "file_kib": file, "before_first_commit_kib": pre_commit,
    }))
}

/// Child: open the memory and answer the four rows.
fn open_and_ask(dir: &Path, n: u64) -> Result<Value> {
    let t = Instant::now();
    let memory = Memory::options(dir).open()?;
    let open_s = t.elapsed().as_secs_f64();
    let boot = format!("{:?}", memory.index_boot());
    let ledger_boot = memory.ledger().boot().map(|b| format!("{b:?}")).unwrap_or_default();
    let pulses = memory.ledger().latest()?.header.number + 1;
    let after_open = rss();
    let key = memory.ledger().public_key();
    let size = memory.committed().head.size;
    // The rows over the whole life (a random hour of it), and the same questions as at 10^6
    // (hours of the first month): those have the same answers at every size, so their proofs
    // show what the memory's size alone does to a proof.
    let rows = ask_rows(&memory, &key, size, n)?;
    let same = ask_rows(&memory, &key, size, 1_000_000)?;
    let (peak, anon, file) = rss();
    Ok(json!({
        "open_s": open_s, "boot": boot, "ledger_boot": ledger_boot, "pulses": pulses,
        "open_peak_kib": after_open.0,
        "peak_kib": peak, "anon_kib": anon, "file_kib": file,
        "rows": rows, "same": same,
    }))
}

/// The four rows' queries as drawn for a memory of `n` atoms, answered, proved and verified.
fn ask_rows(memory: &Memory, key: &ed25519_dalek::VerifyingKey, size: u64, n: u64) -> Result<Vec<Value>> {
    let mut rng = SplitMix64::new(7);
    let mut rows = Vec::new();
    for row in &ROWS {
        let (mut results, mut proof_bytes) = (0usize, 0usize);
        let (mut prove, mut verify) = (Duration::ZERO, Duration::ZERO);
        for q in queries(row, n, &mut rng) {
            let t = Instant::now();
            let file = memory.prove_range(&q, None)?;
            let bytes = file.encode();
            prove += t.elapsed();
            let expect = Expect::answer(Question::Range(q.clone())).at_least(size);
            let mut best = Duration::MAX;
            let mut verified = None;
            for _ in 0..3 {
                let t = Instant::now();
                verified = Some(sion_memory::proof::verify(&bytes, key, &expect)?);
                best = best.min(t.elapsed());
            }
            verify += best;
            let Some(sion_memory::proof::Claim::Range { atoms, .. }) = verified.map(|v| v.claim) else {
                bail!("not a range claim")
            };
            results += atoms.len();
            // The proof without the answer's atoms (which travel beside it), as the seed counts.
            if let sion_memory::proof::Proof::Range { range, .. } = &file.proof {
                let answer_bytes: usize = range.atoms.iter().map(|(_, a)| a.len() + 4).sum();
                proof_bytes += bytes.len() - answer_bytes;
            }
        }
        let k = QUERIES as f64;
        rows.push(json!({
            "results": results as f64 / k,
            "proof_kib": proof_bytes as f64 / k / 1024.0,
            "prove_ms": ms(prove) / k,
            "verify_ms": ms(verify) / k,
        }));
    }
    Ok(rows)
}

/// Child: commit 1,000 new atoms, twenty times (the atoms go on where the log ends).
fn commits(dir: &Path, n: u64) -> Result<Value> {
    let mut memory = Memory::options(dir).open()?;
    let density_span = span(ROUNDS * 1000);
    // After whatever the log holds (an earlier run of this child included), so that none of
    // the new atoms is a duplicate the log would drop.
    let held = memory.log().size().max(n);
    let mut atoms = MonthInAWarehouse::over(ROUNDS * 1000, SEED + 1 + held, density_span)
        .starting_at(start_ns() + span(held));
    let (mut times, mut checkpoints, mut folds, mut seals) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut first = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut warming = Vec::new();
    // A fresh process has nothing hot: the first commit reads what it touches from disk, the
    // next ones less and less. The last twenty of a hundred are the steady state of a node
    // that runs; the first twenty say what a restart costs.
    for round in 0..ROUNDS {
        let batch: Vec<Atom> = atoms.by_ref().take(1000).collect();
        memory.remember(batch)?;
        let size = memory.log().size();
        let log = memory.log().clone();
        let t = Instant::now();
        let index = memory.index()?;
        sion_memory::memory::fold_log(&log, index, size)?;
        let folded = t.elapsed();
        let root = index.root()?;
        let sealed = t.elapsed();
        memory.commit_at(size, root, false)?;
        let total = t.elapsed();
        let t = Instant::now();
        memory.index()?.checkpoint()?;
        if round == 0 {
            first = (folded, sealed, total);
        }
        if round < 20 {
            warming.push(total);
        }
        if round >= ROUNDS - 20 {
            times.push(total);
            folds.push(folded);
            seals.push(sealed - folded);
            checkpoints.push(t.elapsed());
        }
    }
    let mean = |v: &[Duration]| v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    let max = |v: &[Duration]| v.iter().map(|d| ms(*d)).fold(0.0, f64::max);
    Ok(json!({
        "first_ms": ms(first.2),
        "warming_mean_ms": mean(&warming),
        "fold_mean_ms": mean(&folds), "fold_max_ms": max(&folds),
        "seal_mean_ms": mean(&seals), "seal_max_ms": max(&seals),
        "commit_mean_ms": mean(&times), "commit_max_ms": max(&times),
        "checkpoint_mean_ms": mean(&checkpoints), "checkpoint_max_ms": max(&checkpoints),
    }))
}

/// Child: open the memory with its index gone: a full re-fold.
fn rebuild(dir: &Path) -> Result<Value> {
    std::fs::remove_dir_all(dir.join("index")).context("removing the index")?;
    let t = Instant::now();
    let memory = Memory::options(dir).open()?;
    let open_s = t.elapsed().as_secs_f64();
    let rebuilt = matches!(memory.index_boot(), IndexBoot::Rebuilt { .. });
    let (peak, anon, file) = rss();
    Ok(json!({ "open_s": open_s, "rebuilt": rebuilt, "peak_kib": peak, "anon_kib": anon, "file_kib": file }))
}

fn child(args: &[&str]) -> Result<Value> {
    let out = Command::new(std::env::current_exe()?).args(args).output()?;
    if !out.status.success() {
        bail!("{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// `sion memory recall` of one row-2 query, end to end, in a fresh process.
fn cli_recall(dir: &Path, n: u64) -> Result<f64> {
    let sion = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("sion"))
        .context("the sion binary's directory")?;
    if !sion.exists() {
        bail!("{} is missing: cargo build --release --bin sion", sion.display());
    }
    let q = &queries(&ROWS[1], n, &mut SplitMix64::new(11))[0];
    let b = &q.bounds;
    let bx = format!(
        "{},{},{},{},{},{}",
        b.min_mm[0], b.min_mm[1], b.min_mm[2], b.max_mm[0], b.max_mm[1], b.max_mm[2]
    );
    let proof = dir.join("recall.sionproof");
    let t = Instant::now();
    let out = Command::new(&sion)
        .args(["memory", "recall", "--data"])
        .arg(dir)
        .args([
            "--frame",
            "map",
            "--box",
            &bx,
            "--from",
            &q.from_ns.to_string(),
            "--to",
            &q.to_ns.to_string(),
        ])
        .arg("--proof")
        .arg(&proof)
        .output()?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("sion memory recall failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(secs)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or_default();
    match arg(1) {
        "--build" => return print(build(Path::new(arg(2)), arg(3).parse()?)?),
        "--ask" => return print(open_and_ask(Path::new(arg(2)), arg(3).parse()?)?),
        "--commits" => return print(commits(Path::new(arg(2)), arg(3).parse()?)?),
        "--rebuild" => return print(rebuild(Path::new(arg(2)))?),
        _ => {}
    }
    let mut sizes = vec![1_000_000u64, 10_000_000, 100_000_000];
    let mut base = std::env::temp_dir().join("sion-lifetime");
    let mut remove = false;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--sizes" => {
                sizes = args
                    .get(i + 1)
                    .context("--sizes N,N,…")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
                i += 1;
            }
            "--dir" => {
                base = PathBuf::from(args.get(i + 1).context("--dir DIR")?);
                i += 1;
            }
            "--remove" => remove = true,
            other => bail!("unknown argument {other:?} (see the file's comment)"),
        }
        i += 1;
    }
    let mut results = Vec::new();
    for &n in &sizes {
        let dir = base.join(n.to_string());
        let d = dir.to_str().context("a UTF-8 directory")?.to_owned();
        let ns = n.to_string();
        eprintln!("== {n} atoms: building in {d}");
        let built = child(&["--build", &d, &ns])?;
        let disk = json!({
            "segments": du(&dir.join("log/segments")),
            "log_derived": du(&dir.join("log/offsets")) + du(&dir.join("log/nodes")),
            "dedup": du(&dir.join("log/dedup")),
            "index": du(&dir.join("index/nodes")) + du(&dir.join("index/roots")),
            "checkpoint": du(&dir.join("index/checkpoint")),
            "ledger": du(&dir.join("ledger")),
        });
        eprintln!("== {n} atoms: open and ask");
        let asked = child(&["--ask", &d, &ns])?;
        let asked_again = child(&["--ask", &d, &ns])?;
        eprintln!("== {n} atoms: sion memory recall");
        let recall = cli_recall(&dir, n)?;
        eprintln!("== {n} atoms: commits of 1,000");
        let committed = child(&["--commits", &d, &ns])?;
        eprintln!("== {n} atoms: open without the checkpoint");
        let rebuilt = child(&["--rebuild", &d])?;
        results.push(Measured { n, built, disk, asked, asked_again, recall, committed, rebuilt });
        if remove {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {d}"))?;
        }
    }
    println!("\n### `examples/lifetime`: the seed's warehouse at its density, as the log grows\n");
    println!(
        "| measure | {} | target |",
        sizes.iter().map(|n| format!("{n} atoms")).collect::<Vec<_>>().join(" | ")
    );
    println!("| --- | {}--- |", "--- | ".repeat(sizes.len()));
    let row = |name: &str, target: &str, f: &dyn Fn(&Measured) -> String| {
        println!("| {name} | {} | {target} |", results.iter().map(f).collect::<Vec<_>>().join(" | "));
    };
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    row("peak resident memory: open + the four rows (anon / file at the end)", "≤ 256 MiB, flat", &|r| {
        format!(
            "{:.0} MiB ({:.0} / {:.0})",
            mib(r.asked["peak_kib"].as_u64().unwrap_or(0)),
            mib(r.asked["anon_kib"].as_u64().unwrap_or(0)),
            mib(r.asked["file_kib"].as_u64().unwrap_or(0))
        )
    });
    row("cold boot with the checkpoint (Memory::open; second run)", "≤ 1 s at 10^8", &|r| {
        format!("{:.3} s ({:.3} s)", f(&r.asked["open_s"]), f(&r.asked_again["open_s"]))
    });
    row("… the ledger's Pulses, and how it opened (second run)", "", &|r| {
        format!("{} ({})", r.asked_again["pulses"], r.asked_again["ledger_boot"].as_str().unwrap_or("?"))
    });
    row("cold boot without it (full re-fold; peak memory)", "", &|r| {
        format!(
            "{:.1} s ({:.0} MiB)",
            f(&r.rebuilt["open_s"]),
            mib(r.rebuilt["peak_kib"].as_u64().unwrap_or(0))
        )
    });
    row("`sion memory recall`, end to end", "≤ 1 s at 10^8", &|r| format!("{:.3} s", r.recall));
    row(
        "commit of 1,000 new atoms: fold + seal + ledger, mean / max of the last 20 of 100 (the first after open; mean of the first 20)",
        "≤ 10 ms at 10^8",
        &|r| {
            format!(
                "{:.2} / {:.2} ms ({:.1} ms; {:.1} ms)",
                f(&r.committed["commit_mean_ms"]),
                f(&r.committed["commit_max_ms"]),
                f(&r.committed["first_ms"]),
                f(&r.committed["warming_mean_ms"])
            )
        },
    );
    row("… of which fold (read, decode, place) / seal, mean", "", &|r| {
        format!("{:.2} / {:.2} ms", f(&r.committed["fold_mean_ms"]), f(&r.committed["seal_mean_ms"]))
    });
    row("… then the index checkpoint (fsyncs), mean / max", "", &|r| {
        format!(
            "{:.2} / {:.2} ms",
            f(&r.committed["checkpoint_mean_ms"]),
            f(&r.committed["checkpoint_max_ms"])
        )
    });
    for (i, seed_row) in ROWS.iter().enumerate() {
        let name = format!(
            "{} × {} × {} m, {} h, a random hour of the whole life: results, proof KiB (seed {}), prove ms, verify ms (seed {})",
            seed_row.size_m[0],
            seed_row.size_m[1],
            seed_row.size_m[2],
            seed_row.hours,
            seed_row.seed.1,
            seed_row.seed.2
        );
        row(&name, "", &|r| {
            let x = &r.asked_again["rows"][i];
            format!(
                "{:.1}, {:.1}, {:.3}, {:.3}",
                f(&x["results"]),
                f(&x["proof_kib"]),
                f(&x["prove_ms"]),
                f(&x["verify_ms"])
            )
        });
    }
    for (i, seed_row) in ROWS.iter().enumerate() {
        let name = format!(
            "… the same 25 questions as at 10^6 (hours of the first month; the same answers at every size): {} × {} × {} m, {} h: results, proof KiB, verify ms",
            seed_row.size_m[0], seed_row.size_m[1], seed_row.size_m[2], seed_row.hours,
        );
        row(&name, "size, verify ≤ 1.5× of 10^6", &|r| {
            let x = &r.asked_again["same"][i];
            format!("{:.1}, {:.1}, {:.3}", f(&x["results"]), f(&x["proof_kib"]), f(&x["verify_ms"]))
        });
    }
    row(
        "disk bytes per atom: log segments / log's derived files / duplicate filter / index / checkpoint / ledger",
        "",
        &|r| {
            let n = r.n as f64;
            let b = |k: &str| r.disk[k].as_f64().unwrap_or(0.0) / n;
            format!(
                "{:.0} / {:.0} / {:.0} / {:.0} / {:.4} / {:.1}",
                b("segments"),
                b("log_derived"),
                b("dedup"),
                b("index"),
                b("checkpoint"),
                b("ledger")
            )
        },
    );
    row(
        "durable append rate (batches of 8,192; the building process's peak memory)",
        "≥ today's 272k/s",
        &|r| {
            format!(
                "{:.0} atoms/s ({:.0} MiB)",
                f(&r.built["append_rate"]),
                mib(r.built["peak_kib"].as_u64().unwrap_or(0))
            )
        },
    );
    row("building: appends, commits every 10,000 atoms (fold + seal + ledger), total", "", &|r| {
        format!(
            "{:.0} s, {:.0} s, {:.0} s",
            f(&r.built["append_s"]),
            f(&r.built["commit_s"]),
            f(&r.built["total_s"])
        )
    });
    println!(
        "\nseed: index build over 10^6 atoms 0.78 s, 325 MiB; the index rebuilt from scratch for every head."
    );
    Ok(())
}

/// What was measured at one size.
struct Measured {
    n: u64,
    built: Value,
    disk: Value,
    asked: Value,
    asked_again: Value,
    recall: f64,
    committed: Value,
    rebuilt: Value,
}

fn print(v: Value) -> Result<()> {
    println!("{v}");
    Ok(())
}
