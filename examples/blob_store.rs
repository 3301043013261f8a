//! The blob store as it grows: opening it and finding blobs with its index runs on disk (the
//! closed packs found through them, only the last pack's blobs in memory), against reading
//! every pack's record headers at open and holding every entry in memory — what it did before
//! the runs, and what a reader of a store whose runs are missing still does. Each measurement
//! is a fresh process (its resident memory is its own); the packs are in the page cache.
//!
//! ```sh
//! cargo run --release --example blob_store -- [--blobs 1000000] [--size 256] [--dir DIR]
//! ```

mod proc_memory;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use sion_memory::log::blobs::BlobStore;

#[derive(Parser)]
#[command(about = "Open a blob store of many blobs with and without its index runs")]
struct Args {
    /// Blobs to keep
    #[arg(long, default_value_t = 1_000_000)]
    blobs: u64,
    /// Bytes a blob
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Where the store goes (default: a temporary directory)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// (internal) measure in this process: `runs` or `headers`
    #[arg(long, hide = true)]
    child: Option<String>,
}

fn blob(i: u64, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    for (j, chunk) in b.chunks_mut(8).enumerate() {
        let x = (i ^ (j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
    b
}

fn measure(dir: &Path, args: &Args, how: &str) -> Result<Value> {
    let t = Instant::now();
    let store = if how == "runs" { BlobStore::open(dir)? } else { BlobStore::open_read_only(dir)? };
    let open_s = t.elapsed().as_secs_f64();
    let (peak, anon, _) = proc_memory::rss();
    let runs = store.index_runs().len();
    let n = 10_000u64;
    let t = Instant::now();
    for k in 0..n {
        let i = k.wrapping_mul(7919) % args.blobs;
        let hash = *blake3::hash(&blob(i, args.size)).as_bytes();
        if !store.contains(&hash) {
            bail!("blob {i} is not found");
        }
    }
    let hit_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let t = Instant::now();
    for k in 0..n {
        if store.contains(blake3::hash(&k.to_be_bytes()).as_bytes()) {
            bail!("a blob never kept is found");
        }
    }
    let miss_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    Ok(
        json!({ "open_s": open_s, "peak_kib": peak, "anon_kib": anon, "runs": runs, "hit_us": hit_us, "miss_us": miss_us, "len": store.len() }),
    )
}

fn child(dir: &Path, args: &Args, how: &str) -> Result<Value> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--blobs", &args.blobs.to_string(), "--size", &args.size.to_string(), "--child", how, "--dir"])
        .arg(dir)
        .output()?;
    if !out.status.success() {
        bail!("the {how} child failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().join("blobs"));
    if let Some(how) = &args.child {
        println!("{}", measure(&dir, &args, how)?);
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("keeping {} blobs of {} bytes in {} ...", args.blobs, args.size, dir.display());
    let t = Instant::now();
    let store = BlobStore::open(&dir)?;
    let mut i = 0;
    while i < args.blobs {
        let batch: Vec<Vec<u8>> = (i..(i + 1000).min(args.blobs)).map(|j| blob(j, args.size)).collect();
        store.keep(&batch)?;
        i += batch.len() as u64;
    }
    let keep_s = t.elapsed().as_secs_f64();
    drop(store);
    let with_runs = child(&dir, &args, "runs")?;
    // Without the runs: set aside, opened as a reader (which writes none), put back.
    let aside = dir.join("index-aside");
    // (A store of one pack has no runs: every blob is in the pack being written.)
    let had_runs = dir.join("index").exists();
    if had_runs {
        std::fs::rename(dir.join("index"), &aside).context("setting the runs aside")?;
    }
    let headers = child(&dir, &args, "headers");
    if had_runs {
        std::fs::rename(&aside, dir.join("index")).context("putting the runs back")?;
    }
    let headers = headers?;
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{} blobs of {} bytes ({:.0} MB of packs; kept in {:.1} s, {:.0} blobs/s):\n",
        args.blobs,
        args.size,
        (args.blobs as f64 * (args.size as f64 + 40.0)) / 1e6,
        keep_s,
        args.blobs as f64 / keep_s
    );
    println!("| measure | index runs on disk | every pack's headers read (before; a reader without runs) |");
    println!("| --- | --- | --- |");
    println!("| open | {:.3} s | {:.3} s |", f(&with_runs, "open_s"), f(&headers, "open_s"));
    println!(
        "| resident memory after open: peak (anonymous) | {:.1} MiB ({:.1}) | {:.1} MiB ({:.1}) |",
        f(&with_runs, "peak_kib") / 1024.0,
        f(&with_runs, "anon_kib") / 1024.0,
        f(&headers, "peak_kib") / 1024.0,
        f(&headers, "anon_kib") / 1024.0
    );
    println!("| index runs | {} | — |", with_runs["runs"]);
    println!(
        "| lookup of a blob held, mean of 10,000 | {:.2} µs | {:.2} µs |",
        f(&with_runs, "hit_us"),
        f(&headers, "hit_us")
    );
    println!(
        "| lookup of a blob not held | {:.2} µs | {:.2} µs |",
        f(&with_runs, "miss_us"),
        f(&headers, "miss_us")
    );
    Ok(())
}
