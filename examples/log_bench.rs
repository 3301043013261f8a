//! Durable log throughput and proof costs at 10^6 atoms, beside raw MCAP writing of the same
//! bytes (the `mcap` crate) measured in the same run.
//!
//!     cargo run --release --example log_bench -- [ATOMS] [BATCH]
//!
//! Prints a table: durable appends (one thread, batched; eight threads, group commit), MCAP
//! writes of the same atom bytes, inclusion and consistency proofs (build and verify), open
//! time, and resident memory per atom of an open log (measured in a fresh child process).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sion_memory::atom::{Atom, Kind};
use sion_memory::log::{Log, LogHasher, LogOptions};
use sion_memory::merkle::{verify_consistency, verify_inclusion};
use sion_memory::sim::{SplitMix64, Warehouse, WarehouseConfig};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--open-child") {
        // Resident memory of an open log, in a process that did nothing else.
        let dir = Path::new(&args[2]);
        let before = rss_kib();
        let started = Instant::now();
        let (log, _) = Log::open(dir, LogOptions::default())?;
        let open_ms = started.elapsed().as_secs_f64() * 1e3;
        let after = rss_kib();
        println!("{} {} {open_ms}", log.size(), after.saturating_sub(before));
        return Ok(());
    }
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let batch: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);

    eprintln!("generating {n} observation atoms…");
    let atoms: Vec<Atom> = Warehouse::new(WarehouseConfig::default())
        .filter(|a| a.kind() == Kind::Observation)
        .take(n)
        .collect();
    let bytes: usize = atoms.iter().map(|a| a.bytes().len()).sum();
    let mean = bytes / n;
    let tmp = tempfile::tempdir()?;
    let mut rows: Vec<[String; 4]> = Vec::new();

    // 1. One writer, durable batches.
    eprintln!("durable appends, one thread…");
    let dir = tmp.path().join("log");
    let (log, _) = Log::create(&dir, LogOptions::default())?;
    // Batches are made before the clock starts: a producer hands its atoms over, it does not
    // copy them.
    let batches: Vec<Vec<Atom>> = atoms.chunks(batch).map(<[Atom]>::to_vec).collect();
    let started = Instant::now();
    for b in batches {
        log.append(b)?;
    }
    let one = started.elapsed();
    let ours = rate(n, one);
    rows.push([
        format!("durable append, 1 thread, batches of {batch}"),
        format!("{:.0} atoms/s ({:.0} MB/s)", ours, bytes as f64 / one.as_secs_f64() / 1e6),
        format!("{} fsync groups", log.groups_committed()),
        "≥ 250,000 atoms/s".into(),
    ]);

    // 2. Eight writers with small batches: group commit shares the fsyncs.
    eprintln!("durable appends, eight threads…");
    let dir8 = tmp.path().join("log8");
    let (log8, _) = Log::create(&dir8, LogOptions::default())?;
    let shared = Arc::new(atoms.clone());
    let started = Instant::now();
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let log = log8.clone();
            let atoms = Arc::clone(&shared);
            std::thread::spawn(move || {
                let share = atoms.len().div_ceil(8);
                let mine = &atoms[(t * share).min(atoms.len())..((t + 1) * share).min(atoms.len())];
                let batches: Vec<Vec<Atom>> = mine.chunks(32).map(<[Atom]>::to_vec).collect();
                for b in batches {
                    log.append(b).expect("append");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "worker panicked")?;
    }
    let eight = started.elapsed();
    rows.push([
        "durable append, 8 threads, batches of 32".into(),
        format!("{:.0} atoms/s", rate(n, eight)),
        format!("{} fsync groups for {} appends", log8.groups_committed(), n.div_ceil(32)),
        String::new(),
    ]);
    drop(log8);

    // 3. The peer: the same bytes written as MCAP messages, uncompressed, one fsync at the end.
    eprintln!("MCAP writes…");
    let mcap_rate = |sync_every: Option<usize>| -> Result<f64, Box<dyn std::error::Error>> {
        let path = tmp.path().join("peer.mcap");
        let started = Instant::now();
        let file = File::create(&path)?;
        let sync_handle = file.try_clone()?;
        let mut w = mcap::WriteOptions::new().compression(None).create(BufWriter::new(file))?;
        let schema = w.add_schema("sion_memory/Atom", "", b"")?;
        let channel = w.add_channel(schema, "/atoms", "sion-atom", &Default::default())?;
        for (i, a) in atoms.iter().enumerate() {
            let header = mcap::records::MessageHeader {
                channel_id: channel,
                sequence: i as u32,
                log_time: i as u64,
                publish_time: i as u64,
            };
            w.write_to_known_channel(&header, a.bytes())?;
            if let Some(k) = sync_every
                && (i + 1) % k == 0
            {
                w.flush()?;
                sync_handle.sync_data()?;
            }
        }
        w.finish()?;
        let file = w.into_inner().into_inner().map_err(|e| e.into_error())?;
        file.sync_data()?;
        let t = started.elapsed();
        std::fs::remove_file(&path)?;
        Ok(rate(n, t))
    };
    let peer = mcap_rate(None)?;
    rows.push([
        "raw MCAP write of the same bytes (mcap 0.26, uncompressed, fsync at end)".into(),
        format!("{peer:.0} msgs/s"),
        format!("ours / MCAP = {:.2}×", ours / peer),
        "≥ 0.3×".into(),
    ]);
    let peer_synced = mcap_rate(Some(batch))?;
    rows.push([
        format!("MCAP, flushed and fsynced every {batch} messages"),
        format!("{peer_synced:.0} msgs/s"),
        format!("ours / MCAP = {:.2}×", ours / peer_synced),
        String::new(),
    ]);

    // 4. Proofs at full size: random positions and old sizes.
    eprintln!("proofs…");
    let head = log.head();
    let mut rng = SplitMix64::new(42);
    let trials = 2000;
    let (mut build, mut check, mut proof_bytes) = (Duration::ZERO, Duration::ZERO, 0usize);
    for _ in 0..trials {
        let position = rng.next_u64() % head.size;
        let t = Instant::now();
        let path = log.inclusion_proof(position, head.size)?;
        let atom = log.read_bytes(position)?;
        build += t.elapsed();
        proof_bytes += path.len() * 32 + atom.len();
        let t = Instant::now();
        let leaf = sion_memory::log::leaf_hash_of_bytes(&atom);
        verify_inclusion::<LogHasher, _>(position, head.size, &leaf, &path, &head.root)?;
        check += t.elapsed();
    }
    rows.push([
        format!("inclusion proof at {n} atoms (atom + path)"),
        format!(
            "build {:.1} µs, verify {:.1} µs",
            build.as_secs_f64() * 1e6 / trials as f64,
            check.as_secs_f64() * 1e6 / trials as f64
        ),
        format!("{} bytes", proof_bytes / trials),
        String::new(),
    ]);
    let (mut build, mut check, mut proof_bytes) = (Duration::ZERO, Duration::ZERO, 0usize);
    for _ in 0..trials {
        let old = 1 + rng.next_u64() % (head.size - 1);
        let t = Instant::now();
        let path = log.consistency_proof(old, head.size)?;
        let old_root = log.root_at(old)?;
        build += t.elapsed();
        proof_bytes += path.len() * 32;
        let t = Instant::now();
        verify_consistency::<LogHasher, _>(old, head.size, &old_root, &head.root, &path)?;
        check += t.elapsed();
    }
    rows.push([
        format!("consistency proof to {n} atoms from a random size"),
        format!(
            "build {:.1} µs, verify {:.1} µs",
            build.as_secs_f64() * 1e6 / trials as f64,
            check.as_secs_f64() * 1e6 / trials as f64
        ),
        format!("{} bytes", proof_bytes / trials),
        String::new(),
    ]);
    drop(log);

    // 5. Open (recovery check, dedup map) and resident memory, in a fresh process.
    let out = std::process::Command::new(std::env::current_exe()?).arg("--open-child").arg(&dir).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<f64> = text.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    if let [size, kib, open_ms] = fields[..] {
        rows.push([
            format!("open a log of {size} atoms"),
            format!("{open_ms:.0} ms"),
            format!("resident {:.1} bytes/atom", kib * 1024.0 / size),
            "≤ 64 bytes/atom (seed: ~1 KB)".into(),
        ]);
    }

    println!(
        "\nsion_memory log benchmark: {n} atoms of {mean} bytes on average, {} cores\n",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1)
    );
    println!("| measure | ours | detail | target |");
    println!("| --- | --- | --- | --- |");
    for [a, b, c, d] in rows {
        println!("| {a} | {b} | {c} | {d} |");
    }
    Ok(())
}
