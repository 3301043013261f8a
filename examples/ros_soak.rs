//! Soak: the sion_memory node living through a robot's load while it is killed again and again.
//! Its launcher (`scripts/launch.py launch/robot.launch.py`, respawn on) runs it; this process
//! publishes what examples/ros_load publishes (pose 1 kHz, TF 100 Hz, a 640×480 camera at
//! 30 Hz), asks proved range queries of it all along (some as of old heads) and verifies each
//! answer against the memory's own ledger key, and sends the node SIGKILL `--kills` times at
//! random moments, one in each of as many equal slots of the run.
//!
//! What it checks (and exits 1 if any fails):
//! - every life of the node comes back by itself: the launcher starts it again and it reports
//!   on /sion_memory/stats within 60 s, never needing a human;
//! - nothing acknowledged is lost: for each life, the last stats it published (messages of each
//!   topic remembered, the log's size) are met by the memory at the end — at least that many
//!   poses, transforms and frames stamped within the life's window, every frame's blob
//!   present, and the log's first atoms as they were when that node died (their root taken
//!   right after the kill is the root at the end);
//! - the ledger holds: committed sizes never go back, and `sion memory audit` passes at the end.
//!
//! ```sh
//! . scripts/setup.sh && sion_install_node --release
//! cargo build --release --bin sion --features ros --example ros_soak
//! ./target/release/examples/ros_soak --seconds 1800 --kills 100
//! ```
//!
//! The node is the one `sion_install_node` installed (its path is printed); the memory goes to
//! a fresh directory (`--data`, else a temporary one), the launcher's output beside it as
//! DATA.launch.log.

mod ros_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::StreamExt as _;
use r2r::QosProfile;
use r2r::builtin_interfaces::msg::Time as RosTime;
use r2r::sion_memory_msgs::msg::Stats;
use r2r::sion_memory_msgs::srv::QueryRange;
use ros_common::{Counts, Publishers, Sample};
use sion_memory::atom::{BoxMm, Kind, Payload};
use sion_memory::index::geom::Query;
use sion_memory::log::Log;
use sion_memory::memory::Memory;
use sion_memory::proof::{Claim, Expect, Question};
use sion_memory::sim::SplitMix64;

#[derive(Parser)]
#[command(
    about = "Kill the sion_memory node again and again under a robot's load; check nothing acknowledged is lost"
)]
struct Args {
    /// How long to publish [s]
    #[arg(long, default_value_t = 1800.0)]
    seconds: f64,
    /// SIGKILLs of the node, one at a random moment in each of as many equal slots of the run
    #[arg(long, default_value_t = 100)]
    kills: u32,
    /// Where the node keeps its memory (default: a fresh temporary directory, removed after)
    #[arg(long)]
    data: Option<PathBuf>,
    /// Seed of the kill moments and the queries
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Proved range queries a second, verified here
    #[arg(long, default_value_t = 4.0)]
    queries_hz: f64,
    /// The `sion` binary that audits the memory at the end (default: beside this example's
    /// profile)
    #[arg(long)]
    sion: Option<PathBuf>,
}

/// One run of the node, from its launcher's start to the SIGKILL (or the end).
struct Life {
    pid: u32,
    /// Wall clock when this process first saw it: nothing it received was published before.
    seen_ns: i64,
    /// Wall clock of the SIGKILL (the end of the run for the last life).
    ended_ns: i64,
    /// The last stats it published: what it acknowledged.
    acked: Option<Stats>,
    /// From the SIGKILL until the next life's first stats.
    down: Option<Duration>,
    /// The log's root over its first `prefix.0` atoms, read right after the kill.
    prefix: Option<(u64, [u8; 32])>,
    rss_kib: u64,
}

#[derive(Default)]
struct QueryCounts {
    asked: AtomicU64,
    verified: AtomicU64,
    atoms: AtomicU64,
    refused: AtomicU64,
    unanswered: AtomicU64,
    invalid: AtomicU64,
    /// Why the node refused, and how often.
    reasons: Mutex<BTreeMap<String, u64>>,
}

fn wall_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn main() -> Result<()> {
    let args = Args::parse();
    ros_common::choose_transports(false)?;
    if args.kills == 0 || args.seconds < 10.0 * f64::from(args.kills).max(3.0) / 3.0 {
        bail!("--seconds must leave at least 10 s to each of the {} kills' slots", args.kills);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile_dir = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("this example's profile directory")?;
    let sion = args.sion.clone().unwrap_or_else(|| profile_dir.join("sion"));
    if !sion.exists() {
        bail!("{} is missing: cargo build --release --bin sion (or --sion PATH)", sion.display());
    }
    let temp = tempfile::tempdir()?;
    let data = args.data.clone().unwrap_or_else(|| temp.path().join("memory"));
    let _ = std::fs::remove_dir_all(&data);
    let launch_log = data.with_extension("launch.log");
    // What the launcher will run: the node sion_install_node put on AMENT_PREFIX_PATH.
    let printed = Command::new("python3")
        .arg(root.join("scripts/launch.py"))
        .arg(root.join("launch/robot.launch.py"))
        .arg(format!("data_dir:={}", data.display()))
        .arg("--print")
        .output()
        .context("python3 scripts/launch.py --print")?;
    if !printed.status.success() {
        bail!("the launcher cannot run the node: {}", String::from_utf8_lossy(&printed.stderr).trim());
    }
    let command = String::from_utf8_lossy(&printed.stdout);
    let exe = command.split_whitespace().find(|w| w.ends_with("sion_memory_node")).unwrap_or("?");
    let resolved = std::fs::canonicalize(exe).map_or_else(|_| exe.to_owned(), |p| p.display().to_string());
    println!("node: {resolved} (by scripts/launch.py launch/robot.launch.py, respawn on)");
    println!(
        "soak: {:.0} s, {} kills, seed {}, queries {} Hz, memory {}",
        args.seconds,
        args.kills,
        args.seed,
        args.queries_hz,
        data.display()
    );

    let mut launcher = Command::new("python3")
        .arg(root.join("scripts/launch.py"))
        .arg(root.join("launch/robot.launch.py"))
        .arg(format!("data_dir:={}", data.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&launch_log)?)
        .stderr(std::fs::File::create(launch_log.with_extension("err"))?)
        .spawn()
        .context("starting the launcher")?;
    let outcome = soak(&args, &launcher, &data);
    // SIGINT, as a robot's shutdown does: the launcher stops the node, which drains and commits.
    let _ = Command::new("kill").args(["-INT", &launcher.id().to_string()]).status();
    let stopped = wait_child(&mut launcher, Duration::from_secs(60));
    if outcome.is_err() {
        eprintln!("--- launcher output: {} (and .err)", launch_log.display());
    }
    let lives = outcome?;
    if !stopped {
        bail!("the launcher did not stop within 60 s of SIGINT");
    }
    check(&lives, &data, &sion)
}

fn wait_child(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// The launcher's child running sion_memory_node, if one runs now.
fn node_pid(launcher: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid ...": the command is parenthesised and may hold spaces.
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        let mut fields = rest.split_whitespace();
        let (state, ppid) = (fields.next(), fields.next().and_then(|p| p.parse::<u32>().ok()));
        // The kernel cuts a command name at 15 bytes.
        if ppid == Some(launcher) && comm == "sion_memory_nod" && state != Some("Z") {
            return Some(pid);
        }
    }
    None
}

fn soak(args: &Args, launcher: &Child, data: &Path) -> Result<Vec<Life>> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let ctx = r2r::Context::create()?;
    let mut node = r2r::Node::create(ctx, "sion_soak", "")?;
    let publishers = Publishers::create(&mut node)?;
    let client = node
        .create_client::<QueryRange::Service>("/sion_memory/query_range", QosProfile::services_default())?;
    // Every stats message, with the wall clock it came at.
    let latest: Arc<Mutex<Option<(i64, Stats)>>> = Arc::default();
    let mut stats = node.subscribe::<Stats>("/sion_memory/stats", QosProfile::default())?;
    let sink = latest.clone();
    runtime.spawn(async move {
        while let Some(s) = stats.next().await {
            *sink.lock().unwrap_or_else(|e| e.into_inner()) = Some((wall_ns(), s));
        }
    });
    let spinner = ros_common::Spinner::start(node);
    let result = (|| {
        let first_seen = wall_ns();
        let pid = wait_pid(launcher.id(), Duration::from_secs(60)).context("the launcher started no node")?;
        eprintln!("waiting for the node to subscribe ...");
        publishers.wait_for_subscribers(Duration::from_secs(60))?;
        let stats_since = |since: i64| {
            latest.lock().unwrap_or_else(|e| e.into_inner()).as_ref().filter(|(at, _)| *at >= since).cloned()
        };
        if !wait_until(Duration::from_secs(60), || stats_since(first_seen).is_some()) {
            bail!("no /sion_memory/stats from the node within 60 s");
        }
        let key = Memory::options(data)
            .open_read_only()
            .context("opening the memory to read its ledger key")?
            .ledger()
            .public_key();

        let counts = Counts::new();
        let queries = QueryCounts::default();
        let done = AtomicBool::new(false);
        let committed: Mutex<Vec<u64>> = Mutex::default();
        let mut lives = vec![Life {
            pid,
            seen_ns: first_seen,
            ended_ns: 0,
            acked: None,
            down: None,
            prefix: None,
            rss_kib: 0,
        }];
        eprintln!("publishing for {} s, {} kills ...", args.seconds, args.kills);
        let started = Instant::now();
        std::thread::scope(|scope| -> Result<()> {
            let (counts, queries, done, committed) = (&counts, &queries, &done, &committed);
            let publisher = scope.spawn(move || {
                let played =
                    publishers.play(args.seconds, ros_common::CAMERA_HZ, ros_common::Part::All, counts);
                (publishers, played)
            });
            let asker = scope.spawn(|| ask(args, &runtime, &client, &key, queries, done, committed, started));
            let mut rng = SplitMix64::new(args.seed);
            let slot = Duration::from_secs_f64(args.seconds / f64::from(args.kills));
            let mut went_wrong = None;
            for k in 0..args.kills {
                // A random moment in the k-th slot, not in the last two seconds of the run.
                let at = slot * k + Duration::from_nanos(rng.next_u64() % slot.as_nanos().max(1) as u64);
                let at = at.min(Duration::from_secs_f64(args.seconds - 2.0));
                if let Some(wait) = at.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
                // The node may be between lives (killed in the slot before, started again
                // late): wait for it, and kill it wherever it then is.
                let Some(pid) = wait_pid(launcher.id(), Duration::from_secs(60)) else {
                    went_wrong = Some(format!(
                        "no node running 60 s after kill {k}: the launcher did not start it again"
                    ));
                    break;
                };
                let life = lives.last_mut().context("a life")?;
                if life.pid != pid {
                    went_wrong = Some(format!("a node ({pid}) this soak did not see start"));
                    break;
                }
                life.rss_kib = Sample::take(pid).map_or(0, |s| s.rss_kib);
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                let killed_ns = wall_ns();
                let killed = Instant::now();
                life.ended_ns = killed_ns;
                // The stats it published before it died: what it acknowledged.
                // (Any it published before it died: one still on its way counts too.)
                life.acked = stats_since(life.seen_ns).map(|(_, s)| s);
                if let Some(s) = &life.acked {
                    committed.lock().unwrap_or_else(|e| e.into_inner()).push(s.committed_size);
                }
                wait_until(Duration::from_secs(10), || {
                    !Path::new(&format!("/proc/{pid}")).exists()
                        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                            .is_ok_and(|s| s.contains(") Z "))
                });
                // The log as the dead node left it, read without changing it.
                if let Some(s) = &life.acked
                    && let Ok(log) = Log::open_read_only(&data.join("log"))
                {
                    let size = s.log_size.min(log.size());
                    if let Ok(root) = log.root_at(size) {
                        life.prefix = Some((size, root));
                    }
                }
                let Some(next) = wait_new_pid(launcher.id(), pid, Duration::from_secs(60)) else {
                    went_wrong = Some(format!(
                        "the launcher did not start the node again within 60 s of kill {}",
                        k + 1
                    ));
                    break;
                };
                let seen_ns = wall_ns();
                lives.push(Life {
                    pid: next,
                    seen_ns,
                    ended_ns: 0,
                    acked: None,
                    down: None,
                    prefix: None,
                    rss_kib: 0,
                });
                let back = wait_until(Duration::from_secs(60), || stats_since(seen_ns).is_some());
                if let Some(previous) = lives.iter_mut().rev().nth(1) {
                    previous.down = back.then(|| killed.elapsed());
                }
                if !back {
                    // Killed again before it reported is a moment like any other, but a node
                    // that never reports needs a human.
                    if wait_new_pid(launcher.id(), next, Duration::ZERO).is_none() {
                        went_wrong =
                            Some(format!("the node started after kill {} did not report within 60 s", k + 1));
                        break;
                    }
                }
                if (k + 1) % 10 == 0 || k + 1 == args.kills {
                    eprintln!("  {} kills, {:.0} s", k + 1, started.elapsed().as_secs_f64());
                }
            }
            let (_publishers, played) =
                publisher.join().map_err(|_| anyhow::anyhow!("the publisher panicked"))?;
            played?;
            // One more stats period, then the last life's acknowledgement.
            std::thread::sleep(Duration::from_secs(3));
            done.store(true, Ordering::Relaxed);
            asker.join().map_err(|_| anyhow::anyhow!("the query thread panicked"))?;
            if let Some(e) = went_wrong {
                bail!(e);
            }
            let life = lives.last_mut().context("a life")?;
            life.ended_ns = wall_ns();
            life.rss_kib = Sample::take(life.pid).map_or(0, |s| s.rss_kib);
            life.acked = stats_since(life.seen_ns).map(|(_, s)| s);
            Ok(())
        })?;
        let published = counts.snapshot();
        println!("\n{:.0} s under load; published: {}", started.elapsed().as_secs_f64(), summary(&published));
        let q = &queries;
        println!(
            "queries: {} asked, {} answered and verified here against the memory's key ({} atoms), {} refused by the node, {} unanswered (the node was down), {} INVALID",
            q.asked.load(Ordering::Relaxed),
            q.verified.load(Ordering::Relaxed),
            q.atoms.load(Ordering::Relaxed),
            q.refused.load(Ordering::Relaxed),
            q.unanswered.load(Ordering::Relaxed),
            q.invalid.load(Ordering::Relaxed)
        );
        for (reason, n) in q.reasons.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            println!("  refused {n}×: {reason}");
        }
        if q.invalid.load(Ordering::Relaxed) > 0 {
            bail!("an answer did not verify");
        }
        Ok(lives)
    })();
    drop(spinner);
    result
}

/// The topics published (the soak's one camera: the load's other cameras and lidar are 0).
fn summary(counts: &BTreeMap<&'static str, u64>) -> String {
    counts.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
}

fn wait_until(timeout: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_pid(launcher: u32, timeout: Duration) -> Option<u32> {
    let mut found = None;
    wait_until(timeout, || {
        found = node_pid(launcher);
        found.is_some()
    });
    found
}

fn wait_new_pid(launcher: u32, old: u32, timeout: Duration) -> Option<u32> {
    let mut found = None;
    wait_until(timeout, || {
        found = node_pid(launcher).filter(|p| *p != old);
        found.is_some()
    });
    found
}

/// Ask proved range queries until `done`: boxes on the robot's circle, over the last seconds
/// or an older stretch, some as of an older committed head; verify each answer here.
#[allow(clippy::too_many_arguments)]
fn ask(
    args: &Args,
    runtime: &tokio::runtime::Runtime,
    client: &r2r::Client<QueryRange::Service>,
    key: &ed25519_dalek::VerifyingKey,
    counts: &QueryCounts,
    done: &AtomicBool,
    committed: &Mutex<Vec<u64>>,
    started: Instant,
) {
    let mut rng = SplitMix64::new(args.seed ^ 0x5eed);
    let period = Duration::from_secs_f64(1.0 / args.queries_hz.max(0.01));
    let start_ns = wall_ns();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(period);
        let side = rng.range(500, 12_000);
        let min = [rng.range(-6_000, 6_000 - side), rng.range(-6_000, 6_000 - side), -1_000];
        let bounds = BoxMm { min_mm: min, max_mm: [min[0] + side, min[1] + side, 3_000] };
        let now = wall_ns();
        let span = rng.range(1, 10) * 1_000_000_000;
        let from = if rng.chance(500) {
            now - span
        } else {
            start_ns + rng.range(0, (now - start_ns).max(1)) - span
        };
        let Ok(query) = Query::new("map", bounds, from, from + span) else { continue };
        let as_of = if rng.chance(300) {
            let sizes = committed.lock().unwrap_or_else(|e| e.into_inner());
            if sizes.is_empty() { 0 } else { sizes[(rng.next_u64() % sizes.len() as u64) as usize] }
        } else {
            0
        };
        let time =
            |ns: i64| RosTime { sec: (ns / 1_000_000_000) as i32, nanosec: (ns % 1_000_000_000) as u32 };
        let request = QueryRange::Request {
            frame_id: "map".into(),
            min_mm: bounds.min_mm.to_vec(),
            max_mm: bounds.max_mm.to_vec(),
            from_time: time(from),
            to_time: time(from + span),
            as_of_size: as_of,
        };
        counts.asked.fetch_add(1, Ordering::Relaxed);
        let Ok(future) = client.request(&request) else {
            counts.unanswered.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let reply = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), future).await });
        let response = match reply {
            Ok(Ok(r)) => r,
            _ => {
                counts.unanswered.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        if !response.ok {
            // An as-of head the node no longer has (it was killed before committing it) is a
            // refusal with a reason, not a failure.
            counts.refused.fetch_add(1, Ordering::Relaxed);
            let reason: String = response.error.chars().take(100).collect();
            *counts.reasons.lock().unwrap_or_else(|e| e.into_inner()).entry(reason).or_default() += 1;
            continue;
        }
        let expect = Expect::answer(Question::Range(query)).at_least(as_of);
        match sion_memory::proof::verify(&response.proof, key, &expect) {
            Ok(v) => {
                counts.verified.fetch_add(1, Ordering::Relaxed);
                if let Claim::Range { atoms, .. } = v.claim {
                    counts.atoms.fetch_add(atoms.len() as u64, Ordering::Relaxed);
                }
            }
            Err(e) => {
                counts.invalid.fetch_add(1, Ordering::Relaxed);
                eprintln!("INVALID answer at {:.0} s: {e}", started.elapsed().as_secs_f64());
            }
        }
    }
}

fn remembered(stats: &Stats, stream: &str) -> u64 {
    stats.streams.iter().find(|s| s.stream == stream).map_or(0, |s| s.remembered)
}

/// What the memory holds at the end against what each life acknowledged.
fn check(lives: &[Life], data: &Path, sion: &Path) -> Result<()> {
    let memory = Memory::options(data).open_read_only().context("opening the memory at the end")?;
    let log = memory.log();
    let size = log.size();
    // Stamps of what the robot's topics became: poses, the odometry transform, camera frames
    // (with whether the frame's blob is there: in the blob store, or in a sealed memory — the
    // node's default — its sealed bytes in the camera's lane).
    let sealed = memory.space().is_some();
    let (mut poses, mut tfs, mut frames) = (Vec::new(), Vec::new(), Vec::new());
    let mut missing_blobs = 0u64;
    for item in log.scan(0) {
        let (position, atom) = item.context("reading the log")?;
        let p = atom.parts();
        match p.kind {
            Kind::Pose => poses.push(p.valid.from_ns),
            Kind::Transform if p.subject == "base_link" => tfs.push(p.valid.from_ns),
            Kind::Observation => {
                frames.push(p.valid.from_ns);
                if let Payload::Blob(b) = &p.payload {
                    let present = if sealed {
                        matches!(memory.sealed_bytes(position), Ok(Some(_)))
                    } else {
                        memory.blobs().contains(&b.hash)
                    };
                    if !present {
                        missing_blobs += 1;
                    }
                }
            }
            _ => {}
        }
    }
    for v in [&mut poses, &mut tfs, &mut frames] {
        v.sort_unstable();
        v.dedup();
    }
    let within = |v: &[i64], from: i64, to: i64| {
        (v.partition_point(|&t| t <= to) - v.partition_point(|&t| t < from)) as u64
    };
    let mut failures = Vec::new();
    let mut lost = 0u64;
    let mut acked_total: BTreeMap<&str, u64> = BTreeMap::new();
    let mut present_total: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut max_log, mut last_committed) = (0u64, 0u64);
    let (mut down, mut rss): (Vec<Duration>, Vec<u64>) = (Vec::new(), Vec::new());
    for (i, life) in lives.iter().enumerate() {
        down.extend(life.down);
        if life.rss_kib > 0 {
            rss.push(life.rss_kib);
        }
        let Some(acked) = &life.acked else { continue };
        max_log = max_log.max(acked.log_size);
        if acked.committed_size < last_committed {
            failures
                .push(format!("life {i}: committed size {} after {last_committed}", acked.committed_size));
        }
        last_committed = last_committed.max(acked.committed_size);
        for (stream, stamps) in [("pose", &poses), ("tf", &tfs), ("image", &frames)] {
            let want = remembered(acked, stream);
            let have = within(stamps, life.seen_ns, life.ended_ns);
            *acked_total.entry(stream).or_default() += want;
            *present_total.entry(stream).or_default() += have.min(want);
            if have < want {
                lost += want - have;
                failures.push(format!("life {i}: {stream}: {want} acknowledged, {have} in the memory"));
            }
        }
        if let Some((at, root)) = life.prefix
            && log.root_at(at).ok() != Some(root)
        {
            failures.push(format!("life {i}: the log's first {at} atoms changed after the node was killed"));
        }
    }
    if size < max_log {
        failures.push(format!("the log holds {size} atoms; {max_log} were acknowledged"));
    }
    if missing_blobs > 0 {
        failures.push(format!("{missing_blobs} frames' blobs are missing"));
    }
    let committed = memory.committed().head.size;
    if committed < last_committed {
        failures.push(format!("the ledger's head is at {committed}; {last_committed} was committed"));
    }
    let audit = Command::new(sion)
        .args(["memory", "audit", "--data"])
        .arg(data)
        .output()
        .context("sion memory audit")?;
    if !audit.status.success() {
        failures.push(format!("sion memory audit failed: {}", String::from_utf8_lossy(&audit.stderr).trim()));
    }
    down.sort();
    rss.sort_unstable();
    let pct = |v: &[Duration], q: usize| {
        v.get((v.len() * q / 100).min(v.len().saturating_sub(1))).map_or(0.0, |d| d.as_secs_f64())
    };
    let kills = lives.len() - 1;
    println!("\n| measure | value |");
    println!("| --- | --- |");
    println!(
        "| SIGKILLs of the node / lives / started again by the launcher | {} / {} / {} |",
        kills,
        lives.len(),
        kills
    );
    println!(
        "| back after a kill (SIGKILL → its next stats): median / p95 / max | {:.1} / {:.1} / {:.1} s |",
        pct(&down, 50),
        pct(&down, 95),
        down.last().map_or(0.0, |d| d.as_secs_f64())
    );
    for stream in ["pose", "tf", "image"] {
        println!(
            "| {stream}: acknowledged by the lives that died or ended / present at the end | {} / {} |",
            acked_total.get(stream).copied().unwrap_or(0),
            present_total.get(stream).copied().unwrap_or(0)
        );
    }
    println!("| log: atoms at the end / most acknowledged by a life | {size} / {max_log} |");
    println!(
        "| ledger: committed head at the end / most committed by a life | {committed} / {last_committed} |"
    );
    println!(
        "| frames whose blob is missing ({}) | {missing_blobs} |",
        if sealed {
            "sealed: one image a second kept, in the camera's lane"
        } else {
            "in the clear: every image, in the blob store"
        }
    );
    println!(
        "| `sion memory audit` at the end | {} |",
        if audit.status.success() { "passed" } else { "FAILED" }
    );
    println!(
        "| node RSS at its kill: median / max over the lives | {:.1} / {:.1} MiB |",
        rss.get(rss.len() / 2).map_or(0.0, |k| *k as f64 / 1024.0),
        rss.last().map_or(0.0, |k| *k as f64 / 1024.0)
    );
    println!("| lost: acknowledged and not in the memory | {lost} |");
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        bail!("{} check(s) failed", failures.len());
    }
    println!(
        "\nEvery acknowledged message was in the memory after {kills} kills; the node never needed a human."
    );
    Ok(())
}
