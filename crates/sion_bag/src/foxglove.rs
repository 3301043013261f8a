//! Foxglove's well-known schemas (protobuf) in an export, so that Foxglove's 3D, Image and Log
//! panels draw the memory with no configuration (docs/BAGS.md, "Export"):
//!
//! - `/tf` (`foxglove.FrameTransform`): every transform atom (parent = its frame, child = its
//!   subject), so the robot and its sensors sit where the memory says;
//! - `/sion/trajectory/<frame>/<subject>` (`foxglove.PosesInFrame`): each robot's path in each
//!   frame it is posed in, over the last two minutes of valid time, at most five poses a
//!   second, once a second;
//! - `/sion/scene/atoms` (`foxglove.SceneUpdate`): every other atom as a wireframe box in its
//!   frame, coloured by kind (the legend of docs/VIZ.md), alive for its valid interval;
//! - `/sion/camera/<frame>` (`foxglove.RawImage` or `foxglove.CompressedImage`): the camera
//!   frames the memory kept, stamped and framed as the camera sent them, each with its camera's
//!   calibration as the memory holds it on `/sion/camera/<frame>/calibration`
//!   (`foxglove.CameraCalibration`);
//! - `/sion/scene/answers` (`foxglove.SceneUpdate`) and `/sion/verdicts` (`foxglove.Log`): each
//!   answer given: its question box, its atoms by kind, its proof's walk in three entities
//!   (`proof/opened`, `proof/passed_over`, `proof/not_answering`, hidden one by one in the
//!   3D panel) and the verdict as text; the verdict again as a log line.
//!
//! Every message is on one timeline: the atoms' valid time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Seek, Write};

use ::foxglove::Encode;
use ::foxglove::messages::{
    CameraCalibration, Color, CompressedImage, FrameTransform, LinePrimitive, Log, Point3, Pose,
    PosesInFrame, Quaternion, RawImage, SceneEntity, SceneUpdate, TextPrimitive, Vector3,
};
use ::foxglove::messages::{Duration, Timestamp};

use sion_ingest::cdr::Message as _;
use sion_ingest::cdr_media_type;
use sion_ingest::msgs;
use sion_verify::atom::{Atom, BoxMm, Kind, Payload};
use sion_viz::scene::{self, Layer, Scene};

/// Poses kept per robot in its trajectory message, by valid time.
const TRAJECTORY_WINDOW_NS: i64 = 120_000_000_000;
/// At most one pose per this much valid time in a trajectory.
const TRAJECTORY_STEP_NS: i64 = 200_000_000;
/// A trajectory message per robot per this much valid time.
const TRAJECTORY_EVERY_NS: i64 = 1_000_000_000;

/// A time on the timeline as Foxglove's timestamp (before 1970: 1970; past 2106: 2106).
pub fn timestamp(ns: i64) -> Timestamp {
    let ns = ns.max(0);
    let sec = u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX);
    Timestamp::new(sec, (ns % 1_000_000_000) as u32)
}

/// A valid interval's length as an entity's lifetime; an open one (or one too long for a
/// protobuf duration) is 0, which Foxglove reads as "until replaced".
fn lifetime(from_ns: i64, to_ns: i64) -> Option<Duration> {
    let ns = to_ns.checked_sub(from_ns).filter(|d| *d > 0)?;
    let sec = i32::try_from(ns / 1_000_000_000).ok()?;
    Some(Duration::new(sec, (ns % 1_000_000_000) as u32))
}

fn colour([r, g, b, a]: [u8; 4]) -> Color {
    Color {
        r: f64::from(r) / 255.0,
        g: f64::from(g) / 255.0,
        b: f64::from(b) / 255.0,
        a: f64::from(a) / 255.0,
    }
}

fn kind_colour(kind: Kind) -> Color {
    let [r, g, b] = scene::kind_rgb(kind);
    colour([r, g, b, 255])
}

/// Boxes as one line list (12 edges each), in metres.
fn wireframes(boxes: impl IntoIterator<Item = BoxMm>, colour: Color, thickness_px: f64) -> LinePrimitive {
    LinePrimitive {
        r#type: ::foxglove::messages::line_primitive::Type::LineList as i32,
        pose: Some(identity()),
        thickness: thickness_px,
        scale_invariant: true,
        points: boxes
            .into_iter()
            .flat_map(|b| scene::edges_m(&scene::drawable(&b)))
            .flat_map(|edge| edge.map(|[x, y, z]| Point3 { x, y, z }))
            .collect(),
        color: Some(colour),
        ..Default::default()
    }
}

fn identity() -> Pose {
    Pose {
        position: Some(Vector3 { x: 0.0, y: 0.0, z: 0.0 }),
        orientation: Some(Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }),
    }
}

fn centre_m(b: &BoxMm) -> Vector3 {
    let c = |i: usize| (b.min_mm[i] as f64 + b.max_mm[i] as f64) / 2000.0;
    Vector3 { x: c(0), y: c(1), z: c(2) }
}

/// A rotation kept as a payload (four little-endian i32, x y z w, in billionths), if it is one.
fn rotation(atom: &Atom) -> Quaternion {
    if let Payload::Public(bytes) = &atom.parts().payload
        && bytes.len() == 16
    {
        let q: Vec<f64> = bytes
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])) / 1e9)
            .collect();
        return Quaternion { x: q[0], y: q[1], z: q[2], w: q[3] };
    }
    Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }
}

/// What the Foxglove channels of an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoxgloveSummary {
    pub transforms: u64,
    pub trajectories: u64,
    pub boxes: u64,
    pub images: u64,
    pub answers: u64,
}

/// The Foxglove channels of one MCAP file, added as first used.
pub struct Channels {
    schemas: HashMap<String, u16>,
    channels: BTreeMap<String, u16>,
    sequence: u32,
    trails: BTreeMap<(String, String), Trail>,
    /// Each camera's latest calibration the memory holds, by its frame.
    calibrations: HashMap<String, sion_ingest::Calibration>,
    pub summary: FoxgloveSummary,
}

#[derive(Default)]
struct Trail {
    poses: VecDeque<(i64, Pose)>,
    sent_ns: Option<i64>,
}

impl Channels {
    pub fn new() -> Self {
        Self {
            schemas: HashMap::new(),
            channels: BTreeMap::new(),
            sequence: 0,
            trails: BTreeMap::new(),
            calibrations: HashMap::new(),
            summary: FoxgloveSummary::default(),
        }
    }

    fn write<T: Encode, W: Write + Seek>(
        &mut self,
        mcap: &mut mcap::Writer<W>,
        topic: &str,
        time_ns: i64,
        message: &T,
    ) -> Result<(), mcap::McapError> {
        let channel = match self.channels.get(topic) {
            Some(c) => *c,
            None => {
                let schema =
                    T::get_schema().unwrap_or_else(|| unreachable!("every foxglove message has a schema"));
                let id = match self.schemas.get(&schema.name) {
                    Some(id) => *id,
                    None => {
                        let id = mcap.add_schema(&schema.name, &schema.encoding, &schema.data)?;
                        self.schemas.insert(schema.name.clone(), id);
                        id
                    }
                };
                let c = mcap.add_channel(id, topic, &T::get_message_encoding(), &BTreeMap::new())?;
                self.channels.insert(topic.to_owned(), c);
                c
            }
        };
        let mut bytes = Vec::with_capacity(message.encoded_len().unwrap_or(256));
        // A Vec grows as needed: encoding into it cannot run out of room.
        let _ = message.encode(&mut bytes);
        self.sequence = self.sequence.wrapping_add(1);
        let t = u64::try_from(time_ns.max(0)).unwrap_or(0);
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: self.sequence,
            log_time: t,
            publish_time: t,
        };
        mcap.write_to_known_channel(&header, &bytes)
    }

    /// One atom of the log, at `time_ns` on the timeline; `image` is its blob when it has one.
    pub fn atom<W: Write + Seek>(
        &mut self,
        mcap: &mut mcap::Writer<W>,
        position: u64,
        atom: &Atom,
        time_ns: i64,
        blob: Option<(&str, &[u8])>,
    ) -> Result<(), mcap::McapError> {
        let p = atom.parts();
        if let Some(c) = sion_ingest::calibration_of(atom) {
            self.calibrations.insert(p.frame.clone(), c);
        }
        match p.kind {
            Kind::Transform => {
                let transform = FrameTransform {
                    timestamp: Some(timestamp(time_ns)),
                    parent_frame_id: p.frame.clone(),
                    child_frame_id: p.subject.clone(),
                    translation: Some(centre_m(&p.bounds)),
                    rotation: Some(rotation(atom)),
                };
                self.write(mcap, "/tf", time_ns, &transform)?;
                self.summary.transforms += 1;
            }
            // Poses are paths, not transforms: a robot is posed in several frames at once (map
            // and odom), and a frame has one parent.
            Kind::Pose => {
                let pose = Pose { position: Some(centre_m(&p.bounds)), orientation: Some(rotation(atom)) };
                self.trail(mcap, &p.frame, &p.subject, time_ns, pose)?;
            }
            _ => {
                let entity = SceneEntity {
                    timestamp: Some(timestamp(time_ns)),
                    frame_id: p.frame.clone(),
                    id: format!("{}/{position}", p.kind.as_str()),
                    lifetime: lifetime(p.valid.from_ns, p.valid.to_ns),
                    lines: vec![wireframes([p.bounds], kind_colour(p.kind), 1.5)],
                    ..Default::default()
                };
                self.write(
                    mcap,
                    "/sion/scene/atoms",
                    time_ns,
                    &SceneUpdate { deletions: vec![], entities: vec![entity] },
                )?;
                self.summary.boxes += 1;
            }
        }
        if let Some((media_type, bytes)) = blob {
            self.image(mcap, media_type, bytes, time_ns)?;
        }
        Ok(())
    }

    fn trail<W: Write + Seek>(
        &mut self,
        mcap: &mut mcap::Writer<W>,
        frame: &str,
        subject: &str,
        time_ns: i64,
        pose: Pose,
    ) -> Result<(), mcap::McapError> {
        let trail = self.trails.entry((frame.to_owned(), subject.to_owned())).or_default();
        if trail
            .poses
            .back()
            .is_none_or(|(t, _)| time_ns >= t.saturating_add(TRAJECTORY_STEP_NS) || time_ns < *t)
        {
            trail.poses.push_back((time_ns, pose));
        }
        while trail.poses.front().is_some_and(|(t, _)| *t < time_ns.saturating_sub(TRAJECTORY_WINDOW_NS)) {
            trail.poses.pop_front();
        }
        if trail.sent_ns.is_some_and(|s| time_ns < s.saturating_add(TRAJECTORY_EVERY_NS) && time_ns >= s) {
            return Ok(());
        }
        trail.sent_ns = Some(time_ns);
        let message = PosesInFrame {
            timestamp: Some(timestamp(time_ns)),
            frame_id: frame.to_owned(),
            poses: trail.poses.iter().map(|(_, p)| *p).collect(),
        };
        let topic = format!("/sion/trajectory/{}/{}", topic_part(frame), topic_part(subject));
        self.write(mcap, &topic, time_ns, &message)?;
        self.summary.trajectories += 1;
        Ok(())
    }

    /// A camera frame kept as a blob (a ROS Image or CompressedImage), as Foxglove's image.
    fn image<W: Write + Seek>(
        &mut self,
        mcap: &mut mcap::Writer<W>,
        media_type: &str,
        bytes: &[u8],
        time_ns: i64,
    ) -> Result<(), mcap::McapError> {
        if media_type == cdr_media_type(msgs::Image::TYPE) {
            let Ok(image) = msgs::Image::from_cdr(bytes) else { return Ok(()) };
            // Frames named as the transforms name them (`/camera` is `camera`), so Foxglove
            // places the image where /tf says.
            let frame = sion_verify::units::frame_name(&image.header.frame_id).to_owned();
            let topic = format!("/sion/camera/{}", topic_part(&frame));
            self.calibration(mcap, &topic, &frame, time_ns)?;
            let message = RawImage {
                timestamp: Some(timestamp(time_ns)),
                frame_id: frame,
                width: image.width,
                height: image.height,
                encoding: image.encoding,
                step: image.step,
                data: image.data.into(),
            };
            self.write(mcap, &topic, time_ns, &message)?;
        } else if media_type == cdr_media_type(msgs::CompressedImage::TYPE) {
            let Ok(image) = msgs::CompressedImage::from_cdr(bytes) else { return Ok(()) };
            let frame = sion_verify::units::frame_name(&image.header.frame_id).to_owned();
            let topic = format!("/sion/camera/{}", topic_part(&frame));
            self.calibration(mcap, &topic, &frame, time_ns)?;
            // ROS says "jpeg" or "png", sometimes with the pixel format first ("rgb8; jpeg ...").
            let format = if image.format.contains("png") { "png" } else { "jpeg" };
            let message = CompressedImage {
                timestamp: Some(timestamp(time_ns)),
                frame_id: frame,
                data: image.data.into(),
                format: format.into(),
            };
            self.write(mcap, &topic, time_ns, &message)?;
        } else {
            return Ok(());
        }
        self.summary.images += 1;
        Ok(())
    }

    /// The calibration of the camera whose frame is `frame`, beside its image on `image_topic`,
    /// when the memory holds one (the pinhole model: distortion is not kept).
    fn calibration<W: Write + Seek>(
        &mut self,
        mcap: &mut mcap::Writer<W>,
        image_topic: &str,
        frame: &str,
        time_ns: i64,
    ) -> Result<(), mcap::McapError> {
        let Some(c) = self.calibrations.get(frame).copied() else {
            return Ok(());
        };
        let [fx, fy, cx, cy] = c.k;
        let message = CameraCalibration {
            timestamp: Some(timestamp(time_ns)),
            frame_id: frame.to_owned(),
            width: c.width,
            height: c.height,
            distortion_model: "plumb_bob".into(),
            d: vec![0.0; 5],
            k: vec![fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
            r: vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p: vec![fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0],
        };
        self.write(mcap, &format!("{image_topic}/calibration"), time_ns, &message)
    }

    /// An answer: its scene on `/sion/scene/answers` and its verdict on `/sion/verdicts`, at
    /// `time_ns`.
    pub fn answer<W: Write + Seek>(
        &mut self,
        mcap: &mut mcap::Writer<W>,
        name: &str,
        scene: &Scene,
        time_ns: i64,
    ) -> Result<(), mcap::McapError> {
        let entity = |id: String, lines: Vec<LinePrimitive>, texts: Vec<TextPrimitive>| SceneEntity {
            timestamp: Some(timestamp(time_ns)),
            frame_id: scene.frame.clone(),
            id,
            lines,
            texts,
            ..Default::default()
        };
        self.summary.answers += 1;
        // Numbered in the order given: names are paths, and two may end alike.
        let prefix = format!("answer/{}", self.summary.answers);
        let mut entities = Vec::new();
        let question = scene.drawn_question();
        if let Some(q) = question {
            let text = TextPrimitive {
                pose: Some(Pose {
                    position: Some(Vector3 { z: q.max_mm[2] as f64 / 1000.0 + 0.5, ..centre_m(&q) }),
                    orientation: Some(Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }),
                }),
                billboard: true,
                font_size: 14.0,
                scale_invariant: true,
                color: Some(if scene.verified() {
                    colour([60, 230, 90, 255])
                } else {
                    colour([255, 60, 60, 255])
                }),
                text: format!("{name}: {}", scene.headline()),
            };
            let lines = vec![wireframes([q], colour(scene::question_rgba(scene.verified())), 3.0)];
            entities.push(entity(format!("{prefix}/question"), lines, vec![text]));
        }
        let mut kinds: Vec<Kind> = Vec::new();
        for a in &scene.answer {
            if !kinds.contains(&a.kind) {
                kinds.push(a.kind);
            }
        }
        for kind in kinds {
            let boxes =
                scene.answer.iter().filter(|a| a.kind == kind && a.frame == scene.frame).map(|a| a.bounds);
            let lines = vec![wireframes(boxes, kind_colour(kind), 2.0)];
            entities.push(entity(format!("{prefix}/answer/{}", kind.as_str()), lines, Vec::new()));
        }
        for layer in Layer::ALL {
            let boxes = scene.walk.iter().filter(|w| w.layer == layer).map(|w| w.bounds);
            let width = if layer == Layer::Opened { 1.5 } else { 1.0 };
            let lines = vec![wireframes(boxes, colour(layer.rgba()), width)];
            entities.push(entity(format!("{prefix}/proof/{}", layer.name()), lines, Vec::new()));
        }
        self.write(mcap, "/sion/scene/answers", time_ns, &SceneUpdate { deletions: vec![], entities })?;
        let (level, message) = match &scene.verdict {
            scene::Verdict::Verified { statement } => {
                (::foxglove::messages::log::Level::Info, format!("{name}: verified: {statement}"))
            }
            scene::Verdict::Rejected { why } => {
                (::foxglove::messages::log::Level::Error, format!("{name}: does NOT verify: {why}"))
            }
        };
        let log = Log {
            timestamp: Some(timestamp(time_ns)),
            level: level as i32,
            message,
            name: "sion_memory".into(),
            ..Default::default()
        };
        self.write(mcap, "/sion/verdicts", time_ns, &log)?;
        Ok(())
    }
}

impl Default for Channels {
    fn default() -> Self {
        Self::new()
    }
}

/// A frame or subject as one part of a topic name.
fn topic_part(s: &str) -> String {
    let part: String = s
        .trim_matches('/')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '/' { c } else { '_' })
        .collect();
    if part.is_empty() { "_".into() } else { part }
}
