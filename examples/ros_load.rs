//! The sion_memory node under a robot's load, on a real ROS 2 graph (rcl + Fast DDS): pose at
//! 1 kHz, TF at 100 Hz and a 640×480 RGB camera (with its CameraInfo) at 30 Hz, for 60 s; with
//! `--cameras 4 --lidar`, four such cameras and a 10 Hz 2D lidar (720 rays) beside them.
//! Prints, per topic, messages published, received by the node and remembered (durable), the
//! latency from receipt to durable, and the node's CPU and resident memory at start and end.
//!
//! ```sh
//! . scripts/setup.sh && sion_install_node --release
//! cargo run --release --features ros --example ros_load -- [--seconds 60] [--camera-hz 30] [--cameras 4 --lidar]
//! ```
//!
//! The node is started from `target/<profile>/sion_memory_node` with `config/robot.yaml` and a
//! fresh data directory; messages are published as CDR bytes (what a C++ driver would send).
//! The camera is published by a second process, its own DDS participant as a camera driver's
//! is (`--one-process` publishes it beside pose and TF). Publishers and node use `config/fastdds.xml` (as the launch file gives the node), unless
//! FASTDDS_DEFAULT_PROFILES_FILE names another or `--default-transports` asks for Fast DDS'
//! defaults, what a camera driver that was not given the profile gets; the first line printed
//! says which.

mod ros_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::StreamExt as _;
use r2r::QosProfile;
use r2r::sion_memory_msgs::msg::Stats;
use ros_common::{
    Counts, MORE_CAMERAS, Part, Published, Publishers, SCAN_TOPIC, Sample, TOPICS, dir_bytes, received,
    wait_for,
};

#[derive(Parser)]
#[command(about = "Load the sion_memory node like a robot would and print what it kept")]
struct Args {
    /// How long to publish [s]
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// The node's executable (default: sion_memory_node beside this example's profile)
    #[arg(long)]
    node: Option<PathBuf>,
    /// Where the node keeps its memory, its log beside it as DATA.node.log (default: a fresh
    /// temporary directory, removed after)
    #[arg(long)]
    data: Option<PathBuf>,
    /// Measure Fast DDS' default transports (what a driver gets that was not given a profile)
    /// instead of config/fastdds.xml; FASTDDS_DEFAULT_PROFILES_FILE, when set, is used as is
    #[arg(long)]
    default_transports: bool,
    /// Camera frames a second (0: no camera). Each 640×480 frame is 900 KiB on disk, so a long
    /// run at 30 Hz needs ~1.6 GB a minute; a lower rate lets a run last hours
    #[arg(long, default_value_t = ros_common::CAMERA_HZ)]
    camera_hz: u64,
    /// How many such cameras (1 to 4), each its own topic and calibration, all published by
    /// the camera driver process
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    cameras: u8,
    /// Publish a 2D lidar's scans (sensor_msgs/LaserScan, 720 rays) on /scan at 10 Hz, beside
    /// pose and TF
    #[arg(long)]
    lidar: bool,
    /// Publish the camera from the same DDS participant as pose and TF (by default it is a
    /// process of its own, as a camera driver is: in one participant, frames and poses share
    /// one shared-memory segment, and a segment too small for the frames loses poses too)
    #[arg(long)]
    one_process: bool,
    /// The node's memory is sealed (its `sealed` parameter): every frame is compressed and
    /// sealed before it is kept (docs/SEAL.md)
    #[arg(long)]
    sealed: bool,
    /// (internal) Be the camera driver: publish frames for --seconds and print the counts
    #[arg(long, hide = true)]
    camera_only: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cameras = usize::from(args.cameras);
    if args.camera_only {
        return camera_driver(args.seconds, args.camera_hz, cameras);
    }
    ros_common::choose_transports(args.default_transports)?;
    println!(
        "camera: {} ({cameras} of them{})",
        if args.camera_hz == 0 {
            "off"
        } else if args.one_process {
            "published by the same participant as pose and TF (--one-process)"
        } else {
            "a driver process of its own"
        },
        if args.lidar { "; a lidar at 10 Hz" } else { "" }
    );
    let node_exe = match args.node {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .and_then(Path::parent)
            .map(|profile| profile.join("sion_memory_node"))
            .context("locating sion_memory_node")?,
    };
    if !node_exe.exists() {
        bail!("{} does not exist: build it first (sion_install_node --release)", node_exe.display());
    }
    let temp = tempfile::tempdir()?;
    let (data, log_path) = match args.data {
        Some(d) => (d.clone(), d.with_extension("node.log")),
        None => (temp.path().join("memory"), temp.path().join("node.log")),
    };

    let mut node = Command::new(&node_exe)
        .args(["--ros-args", "--params-file"])
        .arg(root.join("config/robot.yaml"))
        .arg("-p")
        .arg(format!("data_dir:={}", data.display()))
        .args(["-p", &format!("sealed:={}", args.sealed)])
        .args(["-p", &camera_topics(cameras)])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()
        .with_context(|| format!("starting {}", node_exe.display()))?;
    let part = if args.one_process { Part::All } else { Part::Robot };
    let outcome = drive(&node, args.seconds, args.camera_hz, (cameras, args.lidar), part, &data);
    stop(&mut node);
    if outcome.is_err() {
        eprintln!("--- node log ({}):", log_path.display());
        eprintln!("{}", std::fs::read_to_string(&log_path).unwrap_or_default());
    }
    outcome
}

fn stop(node: &mut Child) {
    // SIGINT, as ros2 launch does: the node drains its intake and commits.
    let _ = Command::new("kill").args(["-INT", &node.id().to_string()]).status();
    let _ = node.wait();
}

/// The node's `topics.cameras`: the first camera's topics and the others'.
fn camera_topics(cameras: usize) -> String {
    let more = MORE_CAMERAS.iter().take(cameras - 1).map(|(image, ..)| format!(", {image}"));
    format!("topics.cameras:=[/camera/image_raw{}]", more.collect::<String>())
}

/// The camera driver's process: its own participant, publishing frames for `seconds` once the
/// node has subscribed; says "ready" when it starts and its counts at the end.
fn camera_driver(seconds: f64, camera_hz: u64, cameras: usize) -> Result<()> {
    let ctx = r2r::Context::create()?;
    let mut node = r2r::Node::create(ctx, "sion_load_camera", "")?;
    let publishers = Publishers::create_with(&mut node, cameras, false)?;
    // Not spun: it has nothing to take, and spinning a node without subscriptions returns at
    // once ("wait set is empty"), a loop that took a whole core.
    publishers.wait_for_subscribers(Duration::from_secs(30))?;
    println!("ready");
    let counts = Counts::new();
    let played = publishers.play(seconds, camera_hz, Part::Camera, &counts)?;
    let sent = counts.snapshot();
    let each: Vec<String> = sent.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}={n}")).collect();
    println!("published {} late_p99_ms={:.3}", each.join(" "), played.late_p99_ms);
    // Best effort: nothing to acknowledge, but let the last frame leave before the writers go.
    std::thread::sleep(Duration::from_millis(500));
    drop(publishers);
    drop(node);
    Ok(())
}

/// Start the camera driver process and wait until it is publishing.
fn start_camera(
    seconds: f64,
    camera_hz: u64,
    cameras: usize,
) -> Result<(Child, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>)> {
    use std::io::BufRead as _;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--camera-only", "--seconds", &seconds.to_string(), "--camera-hz", &camera_hz.to_string()])
        .args(["--cameras", &cameras.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the camera driver process")?;
    let out = child.stdout.take().context("the camera driver's stdout")?;
    let mut lines = std::io::BufReader::new(out).lines();
    match lines.next() {
        Some(Ok(l)) if l == "ready" => Ok((child, lines)),
        other => bail!("the camera driver did not start: {other:?}"),
    }
}

fn drive(
    child: &Child,
    seconds: f64,
    camera_hz: u64,
    (cameras, lidar): (usize, bool),
    part: Part,
    data: &Path,
) -> Result<()> {
    let pid = child.id();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let ctx = r2r::Context::create()?;
    let mut node = r2r::Node::create(ctx, "sion_load", "")?;
    let publishers = Publishers::create_with(&mut node, if part == Part::All { cameras } else { 1 }, lidar)?;
    let latest: Arc<Mutex<Option<Stats>>> = Arc::default();
    let mut stats = node.subscribe::<Stats>("/sion_memory/stats", QosProfile::default())?;
    let sink = latest.clone();
    runtime.spawn(async move {
        while let Some(s) = stats.next().await {
            *sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
        }
    });
    let spinner = ros_common::Spinner::start(node);
    let result = (|| {
        eprintln!("waiting for the node to subscribe ...");
        publishers.wait_for_subscribers(Duration::from_secs(30))?;
        wait_for(&latest, Duration::from_secs(10), |_| true)
            .context("no /sion_memory/stats from the node")?;
        let idle = Sample::take(pid)?;
        std::thread::sleep(Duration::from_secs(1));
        let idle_cpu = Sample::take(pid)?.cpu_percent_since(&idle);

        let mut camera = match part {
            Part::Robot if camera_hz > 0 => Some(start_camera(seconds, camera_hz, cameras)?),
            _ => None,
        };
        eprintln!("publishing for {seconds} s ...");
        let window = Duration::from_secs(5).min(Duration::from_secs_f64(seconds / 2.0));
        let counts = Counts::new();
        let load_start = Sample::take(pid)?;
        let mut early = None;
        let mut late = None;
        let mut minutes: Vec<u64> = Vec::new();
        let published = std::thread::scope(|scope| {
            let counts = &counts;
            // The publishers come back: dropping them would delete their writers, and with them
            // any reliable sample not yet acknowledged.
            let worker = scope.spawn(move || {
                let played = publishers.play(seconds, camera_hz, part, counts);
                (publishers, played)
            });
            std::thread::sleep(window);
            early = Sample::take(pid).ok().map(|s| s.cpu_percent_since(&load_start));
            // The node's resident memory every minute of a long run: it must stay flat.
            let middle = Duration::from_secs_f64(seconds).saturating_sub(window * 2);
            let mut slept = Duration::ZERO;
            while slept < middle {
                let step = Duration::from_secs(60).min(middle - slept);
                std::thread::sleep(step);
                slept += step;
                if step == Duration::from_secs(60)
                    && let Ok(s) = Sample::take(pid)
                {
                    minutes.push(s.rss_kib);
                    eprintln!("minute {}: node RSS {:.1} MiB", minutes.len(), s.rss_kib as f64 / 1024.0);
                }
            }
            let before_end = Sample::take(pid).ok();
            std::thread::sleep(window);
            late = before_end.and_then(|b| Sample::take(pid).ok().map(|s| s.cpu_percent_since(&b)));
            worker.join().map_err(|_| anyhow::anyhow!("the publisher panicked"))
        })?;
        let (_publishers, published) = published;
        let published = published?;
        if let Some((mut driver, mut lines)) = camera.take() {
            let last = lines.next().and_then(Result::ok).unwrap_or_default();
            let status = driver.wait()?;
            match last.strip_prefix("published ") {
                Some(each) if status.success() => {
                    for (key, n) in each.split_whitespace().filter_map(|w| w.split_once('=')) {
                        if key != "late_p99_ms" {
                            counts.add_n(key, n.parse()?);
                        }
                    }
                }
                _ => bail!("the camera driver failed ({status}): {last:?}"),
            }
        }
        let end = Sample::take(pid)?;

        // Everything reliable must arrive: wait for the node's counters to settle.
        let expected = counts.snapshot();
        let settled = wait_for(&latest, Duration::from_secs(20), |s| {
            ["pose", "tf"].iter().all(|k| received(s, k) >= expected[k])
        });
        std::thread::sleep(Duration::from_millis(1500)); // one more stats period
        let stats = latest.lock().unwrap_or_else(|e| e.into_inner()).clone().context("no stats")?;
        if settled.is_none() {
            eprintln!("warning: the node did not report every pose and TF message within 20 s");
        }
        let cpu = [idle_cpu, early.unwrap_or(f64::NAN), late.unwrap_or(f64::NAN)];
        report(
            &stats,
            &expected,
            &published,
            [idle, load_start, end],
            cpu,
            (camera_hz, cameras, lidar),
            data,
        );
        Ok(())
    })();
    drop(spinner);
    result
}

fn report(
    stats: &Stats,
    published: &BTreeMap<&'static str, u64>,
    timing: &Published,
    [idle, start, end]: [Sample; 3],
    [idle_cpu, early_cpu, late_cpu]: [f64; 3],
    (camera_hz, cameras, lidar): (u64, usize, bool),
    data: &Path,
) {
    let secs = timing.elapsed.as_secs_f64();
    println!(
        "\n{secs:.1} s of load (publisher lateness p99 {:.2} ms); the node's counters from /sion_memory/stats:\n",
        timing.late_p99_ms
    );
    println!(
        "| topic | rate | published | received | remembered | lost | refused | atoms | receipt → durable p50 / p99 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    // Each row: topic, its key in the counts, its rate.
    let mut rows: Vec<(&str, &str, u64)> = TOPICS.to_vec();
    for (image, info, _) in MORE_CAMERAS.iter().take(cameras - 1) {
        rows.push((image, image, camera_hz));
        rows.push((info, info, camera_hz));
    }
    if lidar {
        rows.push((SCAN_TOPIC, SCAN_TOPIC, ros_common::LIDAR_HZ));
    }
    for (topic, key, hz) in rows {
        let hz = if topic.starts_with("/camera") { camera_hz } else { hz };
        let sent = published.get(key).copied().unwrap_or(0);
        let s = stats.streams.iter().find(|s| s.topic == topic);
        let (messages, remembered, atoms, refused, p50, p99) = s.map_or((0, 0, 0, 0, 0.0, 0.0), |s| {
            (
                s.messages,
                s.remembered,
                s.atoms,
                s.reject_counts.iter().sum::<u64>(),
                s.durable_p50_ms,
                s.durable_p99_ms,
            )
        });
        let rate = match hz {
            0 if topic.starts_with("/camera") => "off".into(),
            0 => "once".into(),
            hz => format!("{hz} Hz"),
        };
        println!(
            "| {topic} | {rate} | {sent} | {messages} | {remembered} | {} | {refused} | {atoms} | {p50:.2} / {p99:.2} ms |",
            sent.saturating_sub(messages)
        );
    }
    println!("\n| node | at start | at end |");
    println!("| --- | --- | --- |");
    println!(
        "| CPU, % of one core | idle {idle_cpu:.1} %; first 5 s of load {early_cpu:.1} % | last 5 s of load {late_cpu:.1} % (mean over the run {:.1} %) |",
        end.cpu_percent_since(&start)
    );
    println!(
        "| resident memory | {:.1} MiB (idle {:.1} MiB) | {:.1} MiB |",
        start.rss_kib as f64 / 1024.0,
        idle.rss_kib as f64 / 1024.0,
        end.rss_kib as f64 / 1024.0
    );
    println!(
        "| memory on disk | | {:.1} MiB ({} atoms in the log, {} committed) |",
        dir_bytes(data) as f64 / (1024.0 * 1024.0),
        stats.log_size,
        stats.committed_size
    );
}
