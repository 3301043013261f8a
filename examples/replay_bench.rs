//! Replay speed: a generated warehouse run replayed into a fresh memory (durable, blobs kept),
//! beside the time to merely read the same bag with the `mcap` crate (the peer), on one core.
//!
//! ```sh
//! cargo run --release --example replay_bench -- [--seconds 120] [--camera 640x480] [--camera-hz 15]
//! ```
//!
//! The larger run is replayed twice: into a memory in the clear (every frame kept), and into a
//! sealed one with `sion replay --sealed`'s default retention (one frame's image a second per
//! camera kept, sealed; the others remembered without it).
//!
//! Prints a table: log time replayed per second of wall time (target ≥ 50× real time on the
//! demo bag) and message bytes per second (target ≥ 100 MB/s), first for the demo bag's
//! settings, then for the larger run asked for.

use std::io::Cursor;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use sion_memory::bag::replay::{ReplayOptions, replay};
use sion_memory::bag::synth::{SynthConfig, synth};
use sion_memory::memory::{Memory, Retention, StreamRetention};

#[derive(Parser)]
struct Args {
    /// Length of the larger run [s].
    #[arg(long, default_value_t = 120.0)]
    seconds: f64,
    /// Its camera, WIDTHxHEIGHT.
    #[arg(long, default_value = "640x480")]
    camera: String,
    /// Its camera rate [Hz].
    #[arg(long, default_value_t = 15.0)]
    camera_hz: f64,
}

struct Row {
    name: String,
    file_mb: f64,
    message_mb: f64,
    span_s: f64,
    read_s: f64,
    replay_s: f64,
    atoms: u64,
}

fn measure(name: &str, config: &SynthConfig, sealed: bool) -> Result<Row> {
    let bytes = synth(Cursor::new(Vec::new()), config)?.1.into_inner();

    // The peer: every message of the bag read (and decompressed) by the mcap crate.
    let mut best_read = f64::INFINITY;
    let mut message_bytes = 0u64;
    for _ in 0..3 {
        let started = Instant::now();
        message_bytes = 0;
        for m in mcap::MessageStream::new(&bytes)? {
            message_bytes += std::hint::black_box(m?.data.len()) as u64;
        }
        best_read = best_read.min(started.elapsed().as_secs_f64());
    }

    let mut best_replay = f64::INFINITY;
    let mut atoms = 0;
    let mut span_s = 0.0;
    for _ in 0..3 {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("m");
        let (memory, options) = if sealed {
            // As `sion replay --sealed` with its defaults: one frame's image a second per
            // camera, sealed (filtered, compressed); a week within 20 GB.
            let mut options = ReplayOptions {
                retention: Some(Retention {
                    camera: StreamRetention { keep_ns: 604_800_000_000_000, keep_bytes: 20_000_000_000 },
                    map: StreamRetention::default(),
                }),
                ..ReplayOptions::default()
            };
            options.ingest.keep_frame_every_ns = 1_000_000_000;
            (Memory::options(&path).agent("robot").sealed(true).create()?, options)
        } else {
            (Memory::options(&path).agent("robot").create()?, ReplayOptions::default())
        };
        let started = Instant::now();
        let report = replay(&bytes, &memory, options, |_| {}).context("replay")?;
        best_replay = best_replay.min(started.elapsed().as_secs_f64());
        atoms = report.atoms;
        span_s = report.log_times.map_or(0.0, |(a, b)| (b - a) as f64 / 1e9);
    }
    Ok(Row {
        name: name.to_owned(),
        file_mb: bytes.len() as f64 / 1e6,
        message_mb: message_bytes as f64 / 1e6,
        span_s,
        read_s: best_read,
        replay_s: best_replay,
        atoms,
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    let (w, h) = args
        .camera
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .context("--camera takes WIDTHxHEIGHT")?;
    // One core, as the target says: rayon (used elsewhere) gets one thread.
    rayon::ThreadPoolBuilder::new().num_threads(1).build_global().ok();
    let demo = SynthConfig::default();
    let large = SynthConfig {
        seconds: args.seconds,
        camera_width: w,
        camera_height: h,
        camera_hz: args.camera_hz,
        ..SynthConfig::default()
    };
    let large_name = format!("{:.0} s, {w}×{h} at {} Hz", args.seconds, args.camera_hz);
    let rows = [
        measure("demo bag (90 s, 160×120 at 5 Hz)", &demo, false)?,
        measure(&large_name, &large, false)?,
        measure(
            &format!(
                "{large_name}, into a sealed memory with the default retention (one frame a second kept, sealed)"
            ),
            &large,
            true,
        )?,
    ];
    println!(
        "| bag | file | messages | atoms | read with mcap (peer) | replay, durable | real time | message data | target |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        println!(
            "| {} | {:.1} MB | {:.1} MB | {} | {:.3} s ({:.0} MB/s) | {:.3} s | {:.0}× | {:.0} MB/s | ≥ 50×, ≥ 100 MB/s |",
            r.name,
            r.file_mb,
            r.message_mb,
            r.atoms,
            r.read_s,
            r.message_mb / r.read_s,
            r.replay_s,
            r.span_s / r.replay_s,
            r.message_mb / r.replay_s,
        );
    }
    println!("\nBest of 3 runs each; replay = read, decode, convert, keep blobs and append atoms durably.");
    Ok(())
}
