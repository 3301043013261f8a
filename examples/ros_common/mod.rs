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
    CameraInfo, Header, Image, LaserScan, Point, Pose, PoseStamped, Quaternion, TfMessage, Time, Transform,
    TransformStamped, Vector3,
};

pub const PROFILE_VAR: &str = "FASTDDS_DEFAULT_PROFILES_FILE";

pub const POSE_HZ: u64 = 1000;
pub const TF_HZ: u64 = 100;
pub const CAMERA_HZ: u64 = 30;
pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 480;
pub const LIDAR_HZ: u64 = 10;
/// Rays of a scan: a half-degree over a full turn, as a 2D lidar gives.
pub const LIDAR_RAYS: usize = 720;

/// Cameras beyond the first (`--cameras N`): image topic, calibration topic, frame.
pub const MORE_CAMERAS: [(&str, &str, &str); 3] = [
    ("/camera1/image_raw", "/camera1/camera_info", "camera1"),
    ("/camera2/image_raw", "/camera2/camera_info", "camera2"),
    ("/camera3/image_raw", "/camera3/camera_info", "camera3"),
];
pub const SCAN_TOPIC: &str = "/scan";

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
    /// The cameras beyond the first, as MORE_CAMERAS names them: (image, calibration).
    pub more: Vec<(r2r::PublisherUntyped, r2r::PublisherUntyped)>,
    /// A 2D lidar on /scan, when one is published.
    pub scan: Option<r2r::PublisherUntyped>,
}

/// Messages published, by the node's stream name for the first camera's topics and pose, TF
/// and scan, by topic for the other cameras.
pub struct Counts(BTreeMap<&'static str, AtomicU64>);

impl Counts {
    pub fn new() -> Self {
        let more = MORE_CAMERAS.iter().flat_map(|(image, info, _)| [*image, *info]);
        let keys = TOPICS.iter().map(|(_, stream, _)| *stream).chain([SCAN_TOPIC]).chain(more);
        Self(keys.map(|k| (k, AtomicU64::new(0))).collect())
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
        Self::create_with(node, 1, false)
    }

    /// ... with `cameras` cameras (1 to 4) and, if `lidar`, a 2D lidar on /scan (best effort,
    /// as drivers publish scans).
    pub fn create_with(node: &mut r2r::Node, cameras: usize, lidar: bool) -> Result<Self> {
        let reliable = QosProfile::default().keep_last(1000);
        let mut more = Vec::new();
        for (image, info, _) in MORE_CAMERAS.iter().take(cameras.saturating_sub(1)) {
            more.push((
                node.create_publisher_untyped(image, "sensor_msgs/msg/Image", QosProfile::sensor_data())?,
                node.create_publisher_untyped(info, "sensor_msgs/msg/CameraInfo", QosProfile::sensor_data())?,
            ));
        }
        let scan = match lidar {
            true => Some(node.create_publisher_untyped(
                SCAN_TOPIC,
                "sensor_msgs/msg/LaserScan",
                QosProfile::sensor_data(),
            )?),
            false => None,
        };
        Ok(Self {
            more,
            scan,
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

    pub fn all(&self) -> Vec<&r2r::PublisherUntyped> {
        let mut all = vec![&self.pose, &self.tf, &self.tf_static, &self.image, &self.info];
        all.extend(self.more.iter().flat_map(|(image, info)| [image, info]));
        all.extend(&self.scan);
        all
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
                if k.is_multiple_of(POSE_HZ / LIDAR_HZ) {
                    self.publish_scan(k, stamp, counts)?;
                }
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
        let mut transforms = vec![
            transform(stamp, "map", "odom", Vector3::default(), Quaternion::default()),
            transform(stamp, "base_link", "camera", Vector3 { x: 0.2, y: 0.0, z: 1.0 }, optical),
            transform(stamp, "base_link", "laser", Vector3 { x: 0.0, y: 0.0, z: 0.3 }, Quaternion::default()),
        ];
        // The other cameras look left, back and right: the optical turn after a quarter turn
        // each about the base's z.
        for (i, (_, _, frame)) in MORE_CAMERAS.iter().enumerate() {
            let q = yaw((i + 1) as f64 * std::f64::consts::FRAC_PI_2);
            let turned = Quaternion {
                w: q.w * optical.w - q.z * optical.z,
                x: q.w * optical.x - q.z * optical.y,
                y: q.w * optical.y + q.z * optical.x,
                z: q.w * optical.z + q.z * optical.w,
            };
            transforms.push(transform(stamp, "base_link", frame, Vector3 { x: 0.0, y: 0.0, z: 1.0 }, turned));
        }
        let statics = TfMessage { transforms };
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

    /// A lidar's scan: the walls of a 20 m room around the robot, a ray each half degree.
    fn publish_scan(&self, k: u64, stamp: Time, counts: &Counts) -> Result<()> {
        let Some(scan) = &self.scan else { return Ok(()) };
        let increment = std::f32::consts::TAU / LIDAR_RAYS as f32;
        let ranges = (0..LIDAR_RAYS)
            .map(|i| {
                let a = i as f32 * increment;
                // A square room's wall is 10 m / max(|cos|, |sin|) away, capped at range_max.
                (10.0 / a.cos().abs().max(a.sin().abs())).min(12.0) + (k % 7) as f32 * 0.001
            })
            .collect();
        let m = LaserScan {
            header: header(stamp, "laser"),
            angle_min: 0.0,
            angle_max: std::f32::consts::TAU - increment,
            angle_increment: increment,
            time_increment: 0.1 / LIDAR_RAYS as f32,
            scan_time: 0.1,
            range_min: 0.1,
            range_max: 12.0,
            ranges,
            intensities: Vec::new(),
        };
        scan.publish_raw(&m.to_cdr())?;
        counts.add(SCAN_TOPIC);
        Ok(())
    }

    /// Camera frame `frame` with its calibration, from each camera.
    fn publish_frame(&self, frame: u64, stamp: Time, pixels: &mut [u8], counts: &Counts) -> Result<()> {
        self.publish_one_frame(&self.image, &self.info, ("camera", 0), frame, stamp, pixels)?;
        counts.add("camera_info");
        counts.add("image");
        for (i, ((image, info), (image_topic, info_topic, camera))) in
            self.more.iter().zip(MORE_CAMERAS).enumerate()
        {
            self.publish_one_frame(image, info, (camera, i as u8 + 1), frame, stamp, pixels)?;
            counts.add(image_topic);
            counts.add(info_topic);
        }
        Ok(())
    }

    fn publish_one_frame(
        &self,
        image_pub: &r2r::PublisherUntyped,
        info_pub: &r2r::PublisherUntyped,
        (camera, index): (&str, u8),
        frame: u64,
        stamp: Time,
        pixels: &mut [u8],
    ) -> Result<()> {
        let info = CameraInfo {
            header: header(stamp, camera),
            height: HEIGHT,
            width: WIDTH,
            distortion_model: "plumb_bob".into(),
            d: vec![0.0; 5],
            k: [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0],
            r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p: [500.0, 0.0, 320.0, 0.0, 0.0, 500.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            ..CameraInfo::default()
        };
        info_pub.publish_raw(&info.to_cdr())?;
        // Every frame differs (a moving stripe), so each is a blob of its own.
        let row = (frame as usize * 7) % HEIGHT as usize;
        pixels.iter_mut().for_each(|p| *p = 0);
        let stride = (WIDTH * 3) as usize;
        pixels[row * stride..(row + 1) * stride].fill(255);
        pixels[..8].copy_from_slice(&frame.to_le_bytes());
        pixels[8] = index; // each camera's frame a blob of its own
        let image = Image {
            header: header(stamp, camera),
            height: HEIGHT,
            width: WIDTH,
            encoding: "rgb8".into(),
            is_bigendian: 0,
            step: WIDTH * 3,
            data: pixels.to_vec(),
        };
        image_pub.publish_raw(&image.to_cdr())?;
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
