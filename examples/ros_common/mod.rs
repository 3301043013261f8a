//! What examples/ros_load.rs and examples/ros_soak.rs share: the robot's topics and rates,
//! their publishers and the schedule they keep, the node's stats and its /proc counters.

// Each example uses its own part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use r2r::QosProfile;
use r2r::sion_memory_msgs::msg::Stats;
use sion_memory::ingest::cdr::Message as _;
use sion_memory::ingest::msgs::{
    CameraInfo, Header, Image, Point, Pose, PoseStamped, Quaternion, TfMessage, Time, Transform,
    TransformStamped, Vector3,
};

pub const PROFILE_VAR: &str = "FASTDDS_DEFAULT_PROFILES_FILE";

pub const POSE_HZ: u64 = 1000;
pub const TF_HZ: u64 = 100;
pub const CAMERA_HZ: u64 = 30;
pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 480;

/// The topics published, in table order: name, stream name in the node's stats, rate.
pub const TOPICS: [(&str, &str, u64); 5] = [
    ("/pose", "pose", POSE_HZ),
    ("/tf", "tf", TF_HZ),
    ("/tf_static", "tf_static", 0),
    ("/camera/image_raw", "image", CAMERA_HZ),
    ("/camera/camera_info", "camera_info", CAMERA_HZ),
];

/// The publishers here and the node share one transport setting, so it is chosen before either
/// starts: without `default_transports` this process runs itself again with config/fastdds.xml
/// in its environment (and exits with its status). Prints which transports are in use.
pub fn choose_transports(default_transports: bool) -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os(PROFILE_VAR).is_none() && !default_transports {
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
    Ok(())
}

pub struct Publishers {
    pub pose: r2r::PublisherUntyped,
    pub tf: r2r::PublisherUntyped,
    pub tf_static: r2r::PublisherUntyped,
    pub image: r2r::PublisherUntyped,
    pub info: r2r::PublisherUntyped,
}

pub struct Counts(BTreeMap<&'static str, AtomicU64>);

impl Counts {
    pub fn new() -> Self {
        Self(TOPICS.iter().map(|(_, stream, _)| (*stream, AtomicU64::new(0))).collect())
    }

    pub fn add(&self, stream: &'static str) {
        self.add_n(stream, 1);
    }

    pub fn add_n(&self, stream: &str, k: u64) {
        // Every stream has an entry from `new`.
        if let Some(n) = self.0.get(stream) {
            n.fetch_add(k, Ordering::Relaxed);
        }
    }
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.iter().map(|(k, v)| (*k, v.load(Ordering::Relaxed))).collect()
    }
}

/// How the publisher kept time.
pub struct Published {
    pub elapsed: Duration,
    pub late_p99_ms: f64,
}

pub fn now_stamp() -> (i64, Time) {
    let ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    (ns, Time { sec: (ns / 1_000_000_000) as i32, nanosec: (ns % 1_000_000_000) as u32 })
}

pub fn header(stamp: Time, frame: &str) -> Header {
    Header { stamp, frame_id: frame.into() }
}

pub fn yaw(angle: f64) -> Quaternion {
    Quaternion { x: 0.0, y: 0.0, z: (angle / 2.0).sin(), w: (angle / 2.0).cos() }
}

pub fn transform(
    stamp: Time,
    parent: &str,
    child: &str,
    t: Vector3,
    rotation: Quaternion,
) -> TransformStamped {
    TransformStamped {
        header: header(stamp, parent),
        child_frame_id: child.into(),
        transform: Transform { translation: t, rotation },
    }
}

impl Publishers {
    /// The robot's publishers on `node`: pose and TF reliable, the camera best effort (as
    /// drivers publish it), static transforms latched.
    pub fn create(node: &mut r2r::Node) -> Result<Self> {
        let reliable = QosProfile::default().keep_last(1000);
        Ok(Self {
            pose: node.create_publisher_untyped(
                "/pose",
                "geometry_msgs/msg/PoseStamped",
                reliable.clone(),
            )?,
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
        })
    }

    pub fn all(&self) -> [&r2r::PublisherUntyped; 5] {
        [&self.pose, &self.tf, &self.tf_static, &self.image, &self.info]
    }

    pub fn wait_for_subscribers(&self, timeout: Duration) -> Result<()> {
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
    /// (`camera_hz`: frames a second, 0 for none; `part`: what this process publishes.)
    pub fn play(&self, seconds: f64, camera_hz: u64, part: Part, counts: &Counts) -> Result<Published> {
        let robot = part != Part::Camera;
        let camera_hz = if part == Part::Robot { 0 } else { camera_hz };
        if robot {
            self.publish_statics(counts)?;
        }
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
            if robot {
                self.publish_pose(k, stamp, counts)?;
            }
            // Frame j is due at j/30 s: it goes out on the first tick at or after that.
            if camera_hz > 0 && k * camera_hz >= frame * POSE_HZ {
                self.publish_frame(frame, stamp, &mut pixels, counts)?;
                frame += 1;
            }
        }
        late.sort();
        let p99 = late.get(late.len() * 99 / 100).copied().unwrap_or_default();
        Ok(Published { elapsed: start.elapsed(), late_p99_ms: p99.as_secs_f64() * 1e3 })
    }

    fn publish_statics(&self, counts: &Counts) -> Result<()> {
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
        Ok(())
    }

    /// Pose `k` (at 1 kHz) and, every tenth, the transform it moved.
    fn publish_pose(&self, k: u64, stamp: Time, counts: &Counts) -> Result<()> {
        let t = k as f64 / POSE_HZ as f64;
        let angle = t / 5.0;
        let at = Point { x: 5.0 * angle.cos(), y: 5.0 * angle.sin(), z: 0.0 };
        let heading = yaw(angle + std::f64::consts::FRAC_PI_2);
        if k.is_multiple_of(POSE_HZ / TF_HZ) {
            let m = TfMessage { transforms: vec![transform(stamp, "odom", "base_link", at, heading)] };
            self.tf.publish_raw(&m.to_cdr())?;
            counts.add("tf");
        }
        let pose =
            PoseStamped { header: header(stamp, "map"), pose: Pose { position: at, orientation: heading } };
        self.pose.publish_raw(&pose.to_cdr())?;
        counts.add("pose");
        Ok(())
    }

    /// Camera frame `frame` with its calibration.
    fn publish_frame(&self, frame: u64, stamp: Time, pixels: &mut [u8], counts: &Counts) -> Result<()> {
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
            data: pixels.to_vec(),
        };
        self.image.publish_raw(&image.to_cdr())?;
        counts.add("image");
        Ok(())
    }
}

/// What one process publishes: a robot's drivers are processes of their own, each with its
/// own DDS participant (and so its own shared-memory segment).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    /// Pose, TF and the camera from one participant.
    All,
    /// Pose and TF only.
    Robot,
    /// The camera only.
    Camera,
}

/// The node spun on a thread of its own, until this is dropped.
pub struct Spinner {
    spinning: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    pub fn start(mut node: r2r::Node) -> Self {
        let spinning = Arc::new(AtomicBool::new(true));
        let flag = spinning.clone();
        let thread = std::thread::spawn(move || {
            while flag.load(Ordering::Relaxed) {
                node.spin_once(Duration::from_millis(5));
            }
        });
        Self { spinning, thread: Some(thread) }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.spinning.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn received(stats: &Stats, stream: &str) -> u64 {
    stats.streams.iter().find(|s| s.stream == stream).map_or(0, |s| s.messages)
}

pub fn wait_for(
    latest: &Mutex<Option<Stats>>,
    timeout: Duration,
    ok: impl Fn(&Stats) -> bool,
) -> Option<Stats> {
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
pub struct Sample {
    pub at: Instant,
    pub cpu_ticks: u64,
    pub rss_kib: u64,
}

impl Sample {
    pub fn take(pid: u32) -> Result<Self> {
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
    pub fn cpu_percent_since(&self, earlier: &Sample) -> f64 {
        let secs = self.at.duration_since(earlier.at).as_secs_f64();
        (self.cpu_ticks.saturating_sub(earlier.cpu_ticks)) as f64 / secs
    }
}

pub fn dir_bytes(dir: &Path) -> u64 {
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
