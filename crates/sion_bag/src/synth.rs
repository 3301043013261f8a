//! A warehouse robot run, generated: the same bag for the same configuration, byte for byte.
//!
//! A 30 m × 20 m warehouse with three racks along x (at y = 5, 10 and 15 m) and pallets beside
//! them. The robot drives the aisles in a loop at `speed_m_s`, publishing what a real one does:
//! - `/pose` (`PoseStamped`, frame `map`) and `/odom` (`Odometry`, `odom` → `base_link`) at 50 Hz;
//! - `/tf`: `odom` → `base_link` at 50 Hz; `/tf_static`: `map` → `odom` and `base_link` →
//!   `camera` (an optical frame, 1.2 m up, looking ahead), once at the start;
//! - `/map` (`OccupancyGrid`, 0.1 m cells): walls, racks and pallets, every 10 s;
//! - `/camera/image_raw` (`rgb8`) and `/camera/camera_info` at `camera_hz`: the pallets in view,
//!   drawn as coloured boxes on a floor and a wall.
//!
//! Every `move_every_s` one pallet (chosen by the seed) moves to another free place, so a place
//! revisited shows something different: the maps record it, and so do the camera frames.

use std::io::{Seek, Write};

use super::BagWriter;
use sion_ingest::cdr::Message as _;
use sion_ingest::msgs::{
    CameraInfo, Header, Image, MapMetaData, OccupancyGrid, Odometry, Point, Pose, PoseStamped,
    PoseWithCovariance, Quaternion, TfMessage, Time, Transform, TransformStamped, Vector3,
};

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthConfig {
    pub seconds: f64,
    pub seed: u64,
    /// The run's first stamp, nanoseconds since the epoch (default 2026-01-01T00:00:00Z).
    pub start_ns: u64,
    pub speed_m_s: f64,
    pub camera_hz: f64,
    pub camera_width: u32,
    pub camera_height: u32,
    pub move_every_s: f64,
    /// zstd chunks (the default) or plain ones.
    pub compress: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            seconds: 90.0,
            seed: 7,
            start_ns: 1_767_225_600_000_000_000,
            speed_m_s: 2.0,
            camera_hz: 5.0,
            camera_width: 160,
            camera_height: 120,
            move_every_s: 15.0,
            compress: true,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SynthSummary {
    pub messages: u64,
    pub frames: u64,
    pub maps: u64,
    pub moves: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SynthError {
    #[error("{0}")]
    Config(String),
    #[error("writing the bag: {0}")]
    Write(#[from] mcap::McapError),
}

const POSE_HZ: f64 = 50.0;
const MAP_PERIOD_S: f64 = 10.0;
const WIDTH_M: f64 = 30.0;
const DEPTH_M: f64 = 20.0;
const CELL_M: f64 = 0.1;
const RACK_YS: [f64; 3] = [5.0, 10.0, 15.0];
const RACK_X: (f64, f64) = (4.0, 26.0);
const PALLET_M: f64 = 1.2;
const CAMERA_UP_M: f64 = 1.2;
const FOCAL_FRACTION: f64 = 0.9; // focal length as a fraction of the image width (~58° field of view)

/// The aisles' loop, as corners the robot drives between.
const LOOP: [(f64, f64); 8] =
    [(2.0, 2.5), (28.0, 2.5), (28.0, 7.5), (2.0, 7.5), (2.0, 12.5), (28.0, 12.5), (28.0, 17.5), (2.0, 17.5)];

/// SplitMix64: small, fast and the same everywhere, which is all a generated run needs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Places a pallet can stand: beside a rack, in the aisle half nearest it.
fn slots() -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for &y in &RACK_YS {
        for side in [-1.0, 1.0] {
            let mut x = RACK_X.0 + 1.0;
            while x < RACK_X.1 {
                out.push((x, y + side * 1.3));
                x += 3.0;
            }
        }
    }
    out
}

/// Where the robot is `t` seconds into the run: position and heading.
fn robot_at(t: f64, speed: f64) -> (f64, f64, f64) {
    let legs: Vec<((f64, f64), (f64, f64))> =
        (0..LOOP.len()).map(|i| (LOOP[i], LOOP[(i + 1) % LOOP.len()])).collect();
    let lengths: Vec<f64> =
        legs.iter().map(|(a, b)| ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt()).collect();
    let total: f64 = lengths.iter().sum();
    let mut d = (t * speed).rem_euclid(total);
    for ((a, b), len) in legs.iter().zip(&lengths) {
        if d <= *len {
            let f = d / len;
            return (a.0 + (b.0 - a.0) * f, a.1 + (b.1 - a.1) * f, (b.1 - a.1).atan2(b.0 - a.0));
        }
        d -= len;
    }
    (LOOP[0].0, LOOP[0].1, 0.0)
}

fn stamp(ns: u64) -> Time {
    Time { sec: (ns / 1_000_000_000) as i32, nanosec: (ns % 1_000_000_000) as u32 }
}

fn header(ns: u64, frame: &str) -> Header {
    Header { stamp: stamp(ns), frame_id: frame.into() }
}

fn yaw(angle: f64) -> Quaternion {
    Quaternion { x: 0.0, y: 0.0, z: (angle / 2.0).sin(), w: (angle / 2.0).cos() }
}

fn transform(
    ns: u64,
    parent: &str,
    child: &str,
    translation: Vector3,
    rotation: Quaternion,
) -> TransformStamped {
    TransformStamped {
        header: header(ns, parent),
        child_frame_id: child.into(),
        transform: Transform { translation, rotation },
    }
}

/// The world as the map sees it: walls, racks and the pallets where they stand now.
fn grid(ns: u64, pallets: &[(f64, f64)]) -> OccupancyGrid {
    let (w, h) = ((WIDTH_M / CELL_M) as u32, (DEPTH_M / CELL_M) as u32);
    let mut data = vec![0i8; (w * h) as usize];
    let mut fill = |x0: f64, y0: f64, x1: f64, y1: f64| {
        let (c0, c1) = (((x0 / CELL_M).floor().max(0.0)) as u32, ((x1 / CELL_M).ceil() as u32).min(w));
        let (r0, r1) = (((y0 / CELL_M).floor().max(0.0)) as u32, ((y1 / CELL_M).ceil() as u32).min(h));
        for r in r0..r1 {
            for c in c0..c1 {
                data[(r * w + c) as usize] = 100;
            }
        }
    };
    fill(0.0, 0.0, WIDTH_M, CELL_M);
    fill(0.0, DEPTH_M - CELL_M, WIDTH_M, DEPTH_M);
    fill(0.0, 0.0, CELL_M, DEPTH_M);
    fill(WIDTH_M - CELL_M, 0.0, WIDTH_M, DEPTH_M);
    for &y in &RACK_YS {
        fill(RACK_X.0, y - 0.5, RACK_X.1, y + 0.5);
    }
    for &(x, y) in pallets {
        let r = PALLET_M / 2.0;
        fill(x - r, y - r, x + r, y + r);
    }
    OccupancyGrid {
        header: header(ns, "map"),
        info: MapMetaData {
            map_load_time: stamp(ns),
            resolution: CELL_M as f32,
            width: w,
            height: h,
            origin: Pose::default(),
        },
        data,
    }
}

/// The camera's picture: a wall and a floor, and each pallet in view as a box of its colour.
fn picture(
    config: &SynthConfig,
    robot: (f64, f64, f64),
    pallets: &[(f64, f64)],
    colours: &[[u8; 3]],
) -> Vec<u8> {
    let (w, h) = (config.camera_width as usize, config.camera_height as usize);
    let mut rgb = vec![0u8; w * h * 3];
    for (row, line) in rgb.chunks_mut(w * 3).enumerate() {
        let shade = if row < h / 2 { [170, 175, 185] } else { [90, 85, 80] };
        for px in line.chunks_mut(3) {
            px.copy_from_slice(&shade);
        }
    }
    let focal = config.camera_width as f64 * FOCAL_FRACTION;
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    let (rx, ry, heading) = robot;
    // Far pallets first, so nearer ones cover them.
    let mut order: Vec<usize> = (0..pallets.len()).collect();
    let depth = |i: usize| {
        let (dx, dy) = (pallets[i].0 - rx, pallets[i].1 - ry);
        dx * heading.cos() + dy * heading.sin()
    };
    order.sort_by(|&a, &b| depth(b).total_cmp(&depth(a)));
    for i in order {
        let (dx, dy) = (pallets[i].0 - rx, pallets[i].1 - ry);
        let forward = depth(i);
        let left = -dx * heading.sin() + dy * heading.cos();
        if forward < 0.5 {
            continue;
        }
        let u = cx - left / forward * focal;
        let half = PALLET_M / 2.0 / forward * focal;
        // The pallet stands on the floor, CAMERA_UP_M below the camera, PALLET_M tall.
        let v_bottom = cy + CAMERA_UP_M / forward * focal;
        let v_top = cy + (CAMERA_UP_M - PALLET_M) / forward * focal;
        let (u0, u1) = ((u - half).max(0.0) as usize, ((u + half).max(0.0) as usize).min(w));
        let (v0, v1) = (v_top.max(0.0) as usize, (v_bottom.max(0.0) as usize).min(h));
        for row in v0..v1 {
            for col in u0..u1 {
                rgb[(row * w + col) * 3..][..3].copy_from_slice(&colours[i]);
            }
        }
    }
    rgb
}

/// Write the run into `out`; gives `out` back with what was written.
pub fn synth<W: Write + Seek>(out: W, config: &SynthConfig) -> Result<(SynthSummary, W), SynthError> {
    let positive = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(SynthError::Config(format!("{name} must be positive, not {v}")))
        }
    };
    positive("seconds", config.seconds)?;
    positive("speed", config.speed_m_s)?;
    positive("camera rate", config.camera_hz)?;
    positive("move period", config.move_every_s)?;
    if config.seconds > 86_400.0 {
        return Err(SynthError::Config("a run of more than a day is not a demo".into()));
    }
    if !(8..=4096).contains(&config.camera_width) || !(8..=4096).contains(&config.camera_height) {
        return Err(SynthError::Config(
            "the camera's width and height must be within 8..=4096 pixels".into(),
        ));
    }
    let mut bag = BagWriter::with_compression(out, config.compress)?;
    let pose_topic = bag.topic("/pose", PoseStamped::TYPE, false)?;
    let odom_topic = bag.topic("/odom", Odometry::TYPE, false)?;
    let tf_topic = bag.topic("/tf", TfMessage::TYPE, false)?;
    let static_topic = bag.topic("/tf_static", TfMessage::TYPE, true)?;
    let map_topic = bag.topic("/map", OccupancyGrid::TYPE, true)?;
    let image_topic = bag.topic("/camera/image_raw", Image::TYPE, false)?;
    let info_topic = bag.topic("/camera/camera_info", CameraInfo::TYPE, false)?;

    let mut rng = Rng(config.seed);
    let free = slots();
    let mut taken: Vec<usize> = Vec::new();
    while taken.len() < 8.min(free.len()) {
        let s = rng.below(free.len() as u64) as usize;
        if !taken.contains(&s) {
            taken.push(s);
        }
    }
    let colours: Vec<[u8; 3]> = (0..taken.len())
        .map(|_| {
            let c = rng.next();
            [(c & 0xff) as u8 | 0x40, ((c >> 8) & 0xff) as u8 | 0x40, ((c >> 16) & 0xff) as u8 | 0x40]
        })
        .collect();

    let mut summary = SynthSummary { first_ns: config.start_ns, ..SynthSummary::default() };
    let start = config.start_ns;
    let ns_at = |t: f64| start + (t * 1e9).round() as u64;
    let optical = Quaternion { x: -0.5, y: 0.5, z: -0.5, w: 0.5 };
    let statics = TfMessage {
        transforms: vec![
            transform(start, "map", "odom", Vector3::default(), Quaternion::default()),
            transform(start, "base_link", "camera", Vector3 { x: 0.3, y: 0.0, z: CAMERA_UP_M }, optical),
        ],
    };
    bag.write(static_topic, start, &statics.to_cdr())?;
    summary.messages += 1;

    let (w, h) = (config.camera_width, config.camera_height);
    let focal = f64::from(w) * FOCAL_FRACTION;
    let info = |ns: u64| CameraInfo {
        header: header(ns, "camera"),
        height: h,
        width: w,
        distortion_model: "plumb_bob".into(),
        d: vec![0.0; 5],
        k: [focal, 0.0, f64::from(w) / 2.0, 0.0, focal, f64::from(h) / 2.0, 0.0, 0.0, 1.0],
        r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        p: [focal, 0.0, f64::from(w) / 2.0, 0.0, 0.0, focal, f64::from(h) / 2.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        ..CameraInfo::default()
    };

    // Events on one clock: poses at 50 Hz, frames at camera_hz, maps and moves periodically.
    let ticks = (config.seconds * POSE_HZ).floor() as u64;
    let frame_period = 1.0 / config.camera_hz;
    let (mut next_frame, mut next_map, mut next_move) = (0.0, 0.0, config.move_every_s);
    for tick in 0..ticks {
        let t = tick as f64 / POSE_HZ;
        let ns = ns_at(t);
        let (x, y, heading) = robot_at(t, config.speed_m_s);
        let q = yaw(heading);
        let position = Point { x, y, z: 0.0 };
        let base = TfMessage { transforms: vec![transform(ns, "odom", "base_link", position, q)] };
        bag.write(tf_topic, ns, &base.to_cdr())?;
        let pose = Pose { position, orientation: q };
        bag.write(pose_topic, ns, &PoseStamped { header: header(ns, "map"), pose }.to_cdr())?;
        let odom = Odometry {
            header: header(ns, "odom"),
            child_frame_id: "base_link".into(),
            pose: PoseWithCovariance { pose, covariance: [0.0; 36] },
            ..Odometry::default()
        };
        bag.write(odom_topic, ns, &odom.to_cdr())?;
        summary.messages += 3;
        if t >= next_move {
            // One pallet moves to a free slot (none if every slot is taken).
            let which = rng.below(taken.len() as u64) as usize;
            let free_slots: Vec<usize> = (0..free.len()).filter(|s| !taken.contains(s)).collect();
            if !free_slots.is_empty() {
                taken[which] = free_slots[rng.below(free_slots.len() as u64) as usize];
                summary.moves += 1;
            }
            next_move += config.move_every_s;
        }
        let pallets: Vec<(f64, f64)> = taken.iter().map(|&s| free[s]).collect();
        if t >= next_map {
            bag.write(map_topic, ns, &grid(ns, &pallets).to_cdr())?;
            summary.messages += 1;
            summary.maps += 1;
            next_map += MAP_PERIOD_S;
        }
        if t >= next_frame {
            bag.write(info_topic, ns, &info(ns).to_cdr())?;
            let image = Image {
                header: header(ns, "camera"),
                height: h,
                width: w,
                encoding: "rgb8".into(),
                is_bigendian: 0,
                step: w * 3,
                data: picture(config, (x, y, heading), &pallets, &colours),
            };
            bag.write(image_topic, ns, &image.to_cdr())?;
            summary.messages += 2;
            summary.frames += 1;
            next_frame += frame_period;
        }
        summary.last_ns = ns;
    }
    let out = bag.finish()?;
    Ok((summary, out))
}
