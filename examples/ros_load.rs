//! The sion_memory node under a robot's load, on a real ROS 2 graph (rcl + Fast DDS): pose at
//! 1 kHz, TF at 100 Hz and a 640×480 RGB camera (with its CameraInfo) at 30 Hz, for 60 s.
//! Prints, per topic, messages published, received by the node and remembered (durable), the
//! latency from receipt to durable, and the node's CPU and resident memory at start and end.
//!
//! ```sh
//! . scripts/ros.sh && sion_install_node --release
//! cargo run --release --features ros --example ros_load -- [--seconds 60]
//! ```
//!
//! The node is started from `target/<profile>/sion_memory_node` with `config/robot.yaml` and a
//! fresh data directory; messages are published as CDR bytes (what a C++ driver would send).
//! Publishers and node use `config/fastdds.xml` (as the launch file gives the node), unless
//! FASTDDS_DEFAULT_PROFILES_FILE names another or `--default-transports` asks for Fast DDS'
//! defaults, what a camera driver that was not given the profile gets; the first line printed
//! says which.

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
use r2r::sion_memory_msgs::msg::Stats;
use sion_memory::ingest::cdr::Message as _;
use sion_memory::ingest::msgs::{
    CameraInfo, Header, Image, Point, Pose, PoseStamped, Quaternion, TfMessage, Time, Transform,
    TransformStamped, Vector3,
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
}

const PROFILE_VAR: &str = "FASTDDS_DEFAULT_PROFILES_FILE";

const POSE_HZ: u64 = 1000;
const TF_HZ: u64 = 100;
const CAMERA_HZ: u64 = 30;
const WIDTH: u32 = 640;
const HEIGHT: u32 = 480;

/// The topics published, in table order: name, stream name in the node's stats, rate.
const TOPICS: [(&str, &str, u64); 5] = [
    ("/pose", "pose", POSE_HZ),
    ("/tf", "tf", TF_HZ),
    ("/tf_static", "tf_static", 0),
    ("/camera/image_raw", "image", CAMERA_HZ),
    ("/camera/camera_info", "camera_info", CAMERA_HZ),
];

fn main() -> Result<()> {
    let args = Args::parse();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The publishers here and the node share one transport setting, so it is chosen before
    // either starts: this process runs itself again with the profile in its environment.
    if std::env::var_os(PROFILE_VAR).is_none() && !args.default_transports {
        let status = Command::new(std::env::current_exe()?)
            .args(std::env::args_os().skip(1))
            .env(PROFILE_VAR, root.join("config/fastdds.xml"))
            .status()
            .context("running again with the Fast DDS profile")?;
        std::process::exit(status.code().unwrap_or(1));
    }
    match std::env::var_os(PROFILE_VAR) {
        Some(p) => println!("transports: the Fast DDS profile {}", Path::new(&p).display()),
        None => println!("transports: Fast DDS' defaults (--default-transports)"),
    }
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
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()
        .with_context(|| format!("starting {}", node_exe.display()))?;
    let outcome = drive(&node, args.seconds, &data);
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

fn drive(child: &Child, seconds: f64, data: &Path) -> Result<()> {
    let pid = child.id();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let ctx = r2r::Context::create()?;
    let mut node = r2r::Node::create(ctx, "sion_load", "")?;
    let reliable = QosProfile::default().keep_last(1000);
    let publishers = Publishers {
        pose: node.create_publisher_untyped("/pose", "geometry_msgs/msg/PoseStamped", reliable.clone())?,
        tf: node.create_publisher_untyped("/tf", "tf2_msgs/msg/TFMessage", reliable)?,
        tf_static: node.create_publisher_untyped(
            "/tf_static",
            "tf2_msgs/msg/TFMessage",
            QosProfile::default().keep_last(10).transient_local(),
        )?,
        image: node.create_publisher_untyped(
            "/camera/image_raw",
            "sensor_msgs/msg/Image",
            QosProfile::sensor_data(),
        )?,
        info: node.create_publisher_untyped(
            "/camera/camera_info",
            "sensor_msgs/msg/CameraInfo",
            QosProfile::sensor_data(),
        )?,
    };
    let latest: Arc<Mutex<Option<Stats>>> = Arc::default();
    let mut stats = node.subscribe::<Stats>("/sion_memory/stats", QosProfile::default())?;
    let sink = latest.clone();
    runtime.spawn(async move {
        while let Some(s) = stats.next().await {
            *sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
        }
    });
    let spinning = Arc::new(AtomicBool::new(true));
    let spinner = {
        let spinning = spinning.clone();
        std::thread::spawn(move || {
            while spinning.load(Ordering::Relaxed) {
                node.spin_once(Duration::from_millis(5));
            }
        })
    };
    let result = (|| {
        eprintln!("waiting for the node to subscribe ...");
        publishers.wait_for_subscribers(Duration::from_secs(30))?;
        wait_for(&latest, Duration::from_secs(10), |_| true)
            .context("no /sion_memory/stats from the node")?;
        let idle = Sample::take(pid)?;
        std::thread::sleep(Duration::from_secs(1));
        let idle_cpu = Sample::take(pid)?.cpu_percent_since(&idle);

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
                let played = publishers.play(seconds, counts);
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
        report(&stats, &expected, &published, [idle, load_start, end], cpu, data);
        Ok(())
    })();
    spinning.store(false, Ordering::Relaxed);
    let _ = spinner.join();
    result
}

struct Publishers {
    pose: r2r::PublisherUntyped,
    tf: r2r::PublisherUntyped,
    tf_static: r2r::PublisherUntyped,
    image: r2r::PublisherUntyped,
    info: r2r::PublisherUntyped,
}

struct Counts(BTreeMap<&'static str, AtomicU64>);

impl Counts {
    fn new() -> Self {
        Self(TOPICS.iter().map(|(_, stream, _)| (*stream, AtomicU64::new(0))).collect())
    }

    fn add(&self, stream: &'static str) {
        // Every stream has an entry from `new`.
        if let Some(n) = self.0.get(stream) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.iter().map(|(k, v)| (*k, v.load(Ordering::Relaxed))).collect()
    }
}

/// How the publisher kept time.
struct Published {
    elapsed: Duration,
    late_p99_ms: f64,
}

fn now_stamp() -> (i64, Time) {
    let ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    (ns, Time { sec: (ns / 1_000_000_000) as i32, nanosec: (ns % 1_000_000_000) as u32 })
}

fn header(stamp: Time, frame: &str) -> Header {
    Header { stamp, frame_id: frame.into() }
}

fn yaw(angle: f64) -> Quaternion {
    Quaternion { x: 0.0, y: 0.0, z: (angle / 2.0).sin(), w: (angle / 2.0).cos() }
}

fn transform(stamp: Time, parent: &str, child: &str, t: Vector3, rotation: Quaternion) -> TransformStamped {
    TransformStamped {
        header: header(stamp, parent),
        child_frame_id: child.into(),
        transform: Transform { translation: t, rotation },
    }
}

impl Publishers {
    fn all(&self) -> [&r2r::PublisherUntyped; 5] {
        [&self.pose, &self.tf, &self.tf_static, &self.image, &self.info]
    }

    fn wait_for_subscribers(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.all().iter().all(|p| p.get_inter_process_subscription_count().unwrap_or(0) > 0) {
            if Instant::now() > deadline {
                bail!("the node did not subscribe to every topic within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300)); // matched here; let the node's side match too
        Ok(())
    }

    /// A robot driving a 5 m circle at 1 m/s, on a schedule kept by absolute deadlines.
    fn play(&self, seconds: f64, counts: &Counts) -> Result<Published> {
        let (_, stamp) = now_stamp();
        let optical = Quaternion { x: -0.5, y: 0.5, z: -0.5, w: 0.5 };
        let statics = TfMessage {
            transforms: vec![
                transform(stamp, "map", "odom", Vector3::default(), Quaternion::default()),
                transform(stamp, "base_link", "camera", Vector3 { x: 0.2, y: 0.0, z: 1.0 }, optical),
            ],
        };
        self.tf_static.publish_raw(&statics.to_cdr())?;
        counts.add("tf_static");
        let mut pixels = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
        let start = Instant::now();
        let ticks = (seconds * POSE_HZ as f64) as u64;
        let mut late = Vec::with_capacity(ticks as usize);
        let mut frame = 0u64;
        for k in 0..ticks {
            let due = start + Duration::from_micros(k * 1_000_000 / POSE_HZ);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            late.push(Instant::now().saturating_duration_since(due));
            let (_, stamp) = now_stamp();
            let t = k as f64 / POSE_HZ as f64;
            let angle = t / 5.0;
            let at = Point { x: 5.0 * angle.cos(), y: 5.0 * angle.sin(), z: 0.0 };
            let heading = yaw(angle + std::f64::consts::FRAC_PI_2);
            if k % (POSE_HZ / TF_HZ) == 0 {
                let m = TfMessage { transforms: vec![transform(stamp, "odom", "base_link", at, heading)] };
                self.tf.publish_raw(&m.to_cdr())?;
                counts.add("tf");
            }
            let pose = PoseStamped {
                header: header(stamp, "map"),
                pose: Pose { position: at, orientation: heading },
            };
            self.pose.publish_raw(&pose.to_cdr())?;
            counts.add("pose");
            // Frame j is due at j/30 s: it goes out on the first tick at or after that.
            if k * CAMERA_HZ >= frame * POSE_HZ {
                let info = CameraInfo {
                    header: header(stamp, "camera"),
                    height: HEIGHT,
                    width: WIDTH,
                    distortion_model: "plumb_bob".into(),
                    d: vec![0.0; 5],
                    k: [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0],
                    r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                    p: [500.0, 0.0, 320.0, 0.0, 0.0, 500.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0],
                    ..CameraInfo::default()
                };
                self.info.publish_raw(&info.to_cdr())?;
                counts.add("camera_info");
                // Every frame differs (a moving stripe), so each is a blob of its own.
                let row = (frame as usize * 7) % HEIGHT as usize;
                pixels.iter_mut().for_each(|p| *p = 0);
                let stride = (WIDTH * 3) as usize;
                pixels[row * stride..(row + 1) * stride].fill(255);
                pixels[..8].copy_from_slice(&frame.to_le_bytes());
                let image = Image {
                    header: header(stamp, "camera"),
                    height: HEIGHT,
                    width: WIDTH,
                    encoding: "rgb8".into(),
                    is_bigendian: 0,
                    step: WIDTH * 3,
                    data: pixels.clone(),
                };
                self.image.publish_raw(&image.to_cdr())?;
                counts.add("image");
                frame += 1;
            }
        }
        late.sort();
        let p99 = late.get(late.len() * 99 / 100).copied().unwrap_or_default();
        Ok(Published { elapsed: start.elapsed(), late_p99_ms: p99.as_secs_f64() * 1e3 })
    }
}

fn received(stats: &Stats, stream: &str) -> u64 {
    stats.streams.iter().find(|s| s.stream == stream).map_or(0, |s| s.messages)
}

fn wait_for(latest: &Mutex<Option<Stats>>, timeout: Duration, ok: impl Fn(&Stats) -> bool) -> Option<Stats> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = latest.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
            && ok(s)
        {
            return Some(s.clone());
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The node's CPU time and resident memory at one moment, from /proc.
struct Sample {
    at: Instant,
    cpu_ticks: u64,
    rss_kib: u64,
}

impl Sample {
    fn take(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command name, which is parenthesised and may hold spaces.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).context("/proc/pid/stat")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        let cpu_ticks = ticks(11) + ticks(12); // utime, stime
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        Ok(Self { at: Instant::now(), cpu_ticks, rss_kib })
    }

    /// CPU use between two samples, in % of one core (Linux counts 100 ticks a second).
    fn cpu_percent_since(&self, earlier: &Sample) -> f64 {
        let secs = self.at.duration_since(earlier.at).as_secs_f64();
        (self.cpu_ticks.saturating_sub(earlier.cpu_ticks)) as f64 / secs
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn report(
    stats: &Stats,
    published: &BTreeMap<&'static str, u64>,
    timing: &Published,
    [idle, start, end]: [Sample; 3],
    [idle_cpu, early_cpu, late_cpu]: [f64; 3],
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
    for (topic, stream, hz) in TOPICS {
        let sent = published.get(stream).copied().unwrap_or(0);
        let s = stats.streams.iter().find(|s| s.stream == stream);
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
        let rate = if hz > 0 { format!("{hz} Hz") } else { "once".into() };
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
