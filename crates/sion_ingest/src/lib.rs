//! Sensors to atoms. ROS 2 messages, as the CDR bytes a live subscription or a bag hands over,
//! become memory atoms here and nowhere else: metres and seconds become millimetres and
//! nanoseconds once, with explicit rounding; bad input becomes a [`Reject`] with a reason, never
//! a panic and never a lost neighbour. No input or output happens here: the caller keeps the
//! blobs (map tiles, camera frames) the atoms commit to, then remembers the atoms.
//!
//! What each stream becomes (`docs/ROS.md` has the details):
//! - pose (`PoseStamped`) and odometry (`Odometry`): a pose atom, a point in the frame the pose
//!   was published in, valid for the instant of its stamp, its orientation as the payload;
//! - `/tf` and `/tf_static`: a transform atom per transform (a point at the child's origin in the
//!   parent frame; static ones valid until further notice), and the transform buffer;
//! - map (`OccupancyGrid`): a map_tile atom bounding the grid, committing to the message;
//! - camera (`Image`, `CompressedImage`, with `CameraInfo`): an observation atom in the fixed
//!   frame bounding what the camera could see (its frustum out to a range), committing to the frame.

#![forbid(unsafe_code)]

pub mod cdr;
pub mod msgs;
pub mod schema;
pub mod tf;
pub mod units;

use std::collections::{BTreeMap, HashMap, VecDeque};

use nalgebra::{Isometry3, Point3};

use cdr::{CdrError, Message};
use msgs::{
    CameraInfo, CompressedImage, Header, Image, OccupancyGrid, Odometry, Pose, PoseStamped, TfMessage,
};
use sion_verify::atom::{
    Atom, AtomError, AtomId, AtomParts, BlobRef, BoxMm, Extractor, Interval, Kind, Link, LinkRel, Payload,
    Permille,
};
use tf::{TfBuffer, TfError};
use units::{Round, UnitError};

/// A pose, a transform or a camera frame is a sample: valid for the one nanosecond of its stamp.
pub const SAMPLE_NS: i64 = 1;

/// The media type of a blob that is a ROS 2 message as received (CDR), with its type.
pub fn cdr_media_type(message_type: &str) -> String {
    format!("application/x-ros2-cdr; type={message_type}")
}

/// The message streams the memory takes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    Pose,
    Odometry,
    Tf,
    TfStatic,
    Map,
    Image,
    CompressedImage,
    CameraInfo,
}

impl Stream {
    pub const ALL: [Stream; 8] = [
        Stream::Pose,
        Stream::Odometry,
        Stream::Tf,
        Stream::TfStatic,
        Stream::Map,
        Stream::Image,
        Stream::CompressedImage,
        Stream::CameraInfo,
    ];

    /// The stream's key in the configuration (`topics.<name>`) and in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Pose => "pose",
            Stream::Odometry => "odom",
            Stream::Tf => "tf",
            Stream::TfStatic => "tf_static",
            Stream::Map => "map",
            Stream::Image => "image",
            Stream::CompressedImage => "compressed_image",
            Stream::CameraInfo => "camera_info",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The ROS 2 type of the stream's messages.
    pub fn message_type(self) -> &'static str {
        match self {
            Stream::Pose => PoseStamped::TYPE,
            Stream::Odometry => Odometry::TYPE,
            Stream::Tf | Stream::TfStatic => TfMessage::TYPE,
            Stream::Map => OccupancyGrid::TYPE,
            Stream::Image => Image::TYPE,
            Stream::CompressedImage => CompressedImage::TYPE,
            Stream::CameraInfo => CameraInfo::TYPE,
        }
    }

    /// The topic a ROS 2 robot publishes the stream on by default.
    pub fn default_topic(self) -> &'static str {
        match self {
            Stream::Pose => "/pose",
            Stream::Odometry => "/odom",
            Stream::Tf => "/tf",
            Stream::TfStatic => "/tf_static",
            Stream::Map => "/map",
            Stream::Image => "/camera/image_raw",
            Stream::CompressedImage => "/camera/image_raw/compressed",
            Stream::CameraInfo => "/camera/camera_info",
        }
    }
}

/// How messages become atoms.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestConfig {
    /// The frame camera observations are placed in.
    pub fixed_frame: String,
    /// The subject of pose atoms: the robot's name.
    pub robot: String,
    /// Topic of each stream.
    pub topics: BTreeMap<Stream, String>,
    /// How far a camera's box reaches along its optical axis, metres.
    pub camera_range_m: f64,
    /// The largest image message taken in, bytes.
    pub max_image_bytes: usize,
    /// The largest occupancy grid taken in, cells.
    pub max_map_cells: u64,
    /// How far from its nearest transform sample a lookup may reach, nanoseconds.
    pub tf_tolerance_ns: i64,
    /// How long a camera frame may wait for its transform or calibration, nanoseconds of
    /// message stamps (a frame is given up once a message stamped this much later arrives).
    pub hold_ns: i64,
    /// Keep at most one frame's payload (its image) per this many nanoseconds of stamps, per
    /// camera; the others are remembered as observations without a payload (what the camera
    /// saw, where and when, not the image). 0 keeps every frame's payload. A retention policy
    /// (docs/SEAL.md, "Retention"): a sealed memory's `every_s`.
    pub keep_frame_every_ns: i64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            fixed_frame: "map".into(),
            robot: "robot".into(),
            topics: Stream::ALL.into_iter().map(|s| (s, s.default_topic().to_owned())).collect(),
            camera_range_m: 10.0,
            max_image_bytes: 32 << 20,
            max_map_cells: 64 << 20,
            tf_tolerance_ns: 100_000_000,
            hold_ns: 500_000_000,
            keep_frame_every_ns: 0,
        }
    }
}

impl IngestConfig {
    pub fn topic(&self, stream: Stream) -> &str {
        self.topics.get(&stream).map_or(stream.default_topic(), String::as_str)
    }
}

/// Why a message, or one transform of a `TFMessage`, was not remembered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Reject {
    #[error("malformed message: {0}")]
    Malformed(#[from] CdrError),
    #[error("{field} is not a number")]
    NaN { field: &'static str },
    #[error("{field} is infinite")]
    Infinite { field: &'static str },
    #[error("{field} is out of range")]
    OutOfRange { field: &'static str },
    #[error("{field} names no frame")]
    NoFrame { field: &'static str },
    #[error("frame {0:?} is not in the transform tree")]
    UnknownFrame(String),
    #[error("missing transform: {0}")]
    MissingTransform(TfError),
    #[error("no camera_info for frame {0:?} yet")]
    NoCameraInfo(String),
    #[error("bad camera_info: {0}")]
    BadCameraInfo(&'static str),
    #[error("a {what} of {size} exceeds the limit of {limit}")]
    Oversized { what: &'static str, size: u64, limit: u64 },
    #[error("malformed image: {0}")]
    MalformedImage(&'static str),
    #[error("unknown image encoding {0:?}")]
    UnknownEncoding(String),
    #[error("bad occupancy grid: {0}")]
    BadMap(&'static str),
    #[error("the atom would be invalid: {0}")]
    InvalidAtom(#[from] AtomError),
}

impl Reject {
    /// A short, stable name for the reason, for counters and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Reject::Malformed(_) => "malformed_message",
            Reject::NaN { .. } => "nan",
            Reject::Infinite { .. } => "infinite",
            Reject::OutOfRange { .. } => "out_of_range",
            Reject::NoFrame { .. } => "no_frame",
            Reject::UnknownFrame(_) => "unknown_frame",
            Reject::MissingTransform(_) => "missing_transform",
            Reject::NoCameraInfo(_) => "no_camera_info",
            Reject::BadCameraInfo(_) => "bad_camera_info",
            Reject::Oversized { .. } => "oversized",
            Reject::MalformedImage(_) => "malformed_image",
            Reject::UnknownEncoding(_) => "unknown_encoding",
            Reject::BadMap(_) => "bad_map",
            Reject::InvalidAtom(_) => "invalid_atom",
        }
    }

    fn unit(field: &'static str) -> impl Fn(UnitError) -> Reject {
        move |e| match e {
            UnitError::NaN => Reject::NaN { field },
            UnitError::Infinite => Reject::Infinite { field },
            UnitError::OutOfRange => Reject::OutOfRange { field },
        }
    }
}

/// An atom made from a message, with the blob its payload commits to (the message itself).
#[derive(Debug, Clone, PartialEq)]
pub struct Ingested {
    pub atom: Atom,
    pub blob: Option<Vec<u8>>,
}

/// A message whose handling is over: how many atoms it gave and what was refused (a
/// `TFMessage` can give both).
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The number [`Ingest::take`] gave the message.
    pub message: u64,
    pub stream: Stream,
    pub atoms: usize,
    pub rejected: Vec<Reject>,
}

/// What one call to [`Ingest::take`] gave: atoms, and the messages finished by it — the one
/// taken, unless it is a camera frame held for its transform or calibration, and any held
/// frames the call resolved or gave up on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Taken {
    /// The number given to the message taken.
    pub message: u64,
    pub ingested: Vec<Ingested>,
    pub finished: Vec<Finished>,
}

impl Taken {
    /// Every refusal among the finished messages.
    pub fn rejected(&self) -> impl Iterator<Item = &Reject> {
        self.finished.iter().flat_map(|f| &f.rejected)
    }
}

/// Counters of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamStats {
    pub messages: u64,
    pub atoms: u64,
    /// Rejections by [`Reject::reason`].
    pub rejected: BTreeMap<&'static str, u64>,
    /// Camera frames waiting for a transform or calibration.
    pub held: u64,
}

/// A camera frame waiting for what it needs.
#[derive(Debug, Clone)]
struct Held {
    message: u64,
    stream: Stream,
    stamp_ns: i64,
    /// Its camera frame, checked: a retry goes straight to the lookups it waits for.
    camera: String,
    bytes: Vec<u8>,
    reason: Reject,
}

/// At most this many frames wait at once; beyond it the oldest is refused.
const MAX_HELD: usize = 64;

/// Turns messages into atoms, keeping what later messages need: the transform tree, the latest
/// camera calibration per frame, the latest map tile, and camera frames that arrived before the
/// transform or calibration for their stamp (as tf2's message filter does, they wait until
/// some message is stamped `hold_ns` past them).
#[derive(Debug, Clone)]
pub struct Ingest {
    config: IngestConfig,
    tf: TfBuffer,
    cameras: HashMap<String, CameraInfo>,
    /// Per camera, the stamp of the last frame whose payload was kept.
    kept_at: HashMap<String, i64>,
    last_tile: Option<AtomId>,
    held: VecDeque<Held>,
    /// The latest stamp of any message taken: the clock held frames wait by.
    latest_ns: i64,
    next_message: u64,
    stats: BTreeMap<Stream, StreamStats>,
}

impl Ingest {
    pub fn new(config: IngestConfig) -> Self {
        let tf = TfBuffer::new(10_000_000_000, config.tf_tolerance_ns);
        Self {
            config,
            tf,
            cameras: HashMap::new(),
            kept_at: HashMap::new(),
            last_tile: None,
            held: VecDeque::new(),
            latest_ns: i64::MIN,
            next_message: 0,
            stats: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    /// Take `stream` from `topic` from now on (a bag names its own topics): the topic is
    /// recorded in the atoms' extractor.
    pub fn use_topic(&mut self, stream: Stream, topic: &str) {
        self.config.topics.insert(stream, topic.to_owned());
    }

    pub fn tf(&self) -> &TfBuffer {
        &self.tf
    }

    /// Counters per stream since this ingest began.
    pub fn stats(&self) -> &BTreeMap<Stream, StreamStats> {
        &self.stats
    }

    /// Take in one message of `stream`, as CDR bytes.
    /// Keep one camera frame's payload per this many ns of a camera's stamps from now on (a
    /// node's `retention.camera.every_s`, set while it runs); 0 keeps every one.
    pub fn set_keep_frame_every_ns(&mut self, ns: i64) {
        self.config.keep_frame_every_ns = ns.max(0);
    }

    pub fn take(&mut self, stream: Stream, message: &[u8]) -> Taken {
        let number = self.next_message;
        self.next_message += 1;
        self.stats.entry(stream).or_default().messages += 1;
        let mut taken = Taken { message: number, ..Taken::default() };
        let mut rejected = Vec::new();
        let mut atoms = Vec::new();
        let outcome = match stream {
            Stream::Pose => PoseStamped::from_cdr(message)
                .map_err(Reject::from)
                .and_then(|m| self.pose(stream, &m.header, &m.pose))
                .map(|atom| atoms.push(Ingested { atom, blob: None })),
            Stream::Odometry => Odometry::from_cdr(message)
                .map_err(Reject::from)
                .and_then(|m| self.pose(stream, &m.header, &m.pose.pose))
                .map(|atom| atoms.push(Ingested { atom, blob: None })),
            Stream::Tf | Stream::TfStatic => TfMessage::from_cdr(message).map_err(Reject::from).map(|m| {
                for t in &m.transforms {
                    match self.transform(stream, t) {
                        Ok(atom) => atoms.push(Ingested { atom, blob: None }),
                        Err(e) => rejected.push(e),
                    }
                }
            }),
            Stream::Map => OccupancyGrid::from_cdr(message)
                .map_err(Reject::from)
                .and_then(|m| self.map(&m, message))
                .map(|i| atoms.push(i)),
            Stream::Image | Stream::CompressedImage => match self.frame(stream, message) {
                Ok(i) => {
                    atoms.push(i);
                    Ok(())
                }
                Err((reason, Some((stamp_ns, camera)))) if waits(&reason) => {
                    self.hold(
                        Held { message: number, stream, stamp_ns, camera, bytes: message.to_vec(), reason },
                        &mut taken,
                    );
                    return self.release(stream, taken);
                }
                Err((reason, _)) => Err(reason),
            },
            Stream::CameraInfo => {
                CameraInfo::from_cdr(message).map_err(Reject::from).and_then(|m| self.camera_info(m))
            }
        };
        if let Err(e) = outcome {
            rejected.push(e);
        }
        self.finish(&mut taken, number, stream, atoms, rejected);
        self.release(stream, taken)
    }

    /// Refuse every frame still waiting (at the end of a stream or a bag).
    pub fn flush(&mut self) -> Taken {
        let mut taken = Taken { message: self.next_message, ..Taken::default() };
        while let Some(h) = self.held.pop_front() {
            self.give_up(h, &mut taken);
        }
        taken
    }

    fn finish(
        &mut self,
        taken: &mut Taken,
        message: u64,
        stream: Stream,
        atoms: Vec<Ingested>,
        rejected: Vec<Reject>,
    ) {
        let stats = self.stats.entry(stream).or_default();
        stats.atoms += atoms.len() as u64;
        for r in &rejected {
            *stats.rejected.entry(r.reason()).or_default() += 1;
        }
        taken.finished.push(Finished { message, stream, atoms: atoms.len(), rejected });
        taken.ingested.extend(atoms);
    }

    fn hold(&mut self, held: Held, taken: &mut Taken) {
        self.stats.entry(held.stream).or_default().held += 1;
        self.held.push_back(held);
        if self.held.len() > MAX_HELD
            && let Some(oldest) = self.held.pop_front()
        {
            self.give_up(oldest, taken);
        }
    }

    fn give_up(&mut self, held: Held, taken: &mut Taken) {
        self.stats.entry(held.stream).or_default().held -= 1;
        self.finish(taken, held.message, held.stream, Vec::new(), vec![held.reason]);
    }

    /// After a message: retry held frames if it could help them, and give up on those that
    /// waited long enough.
    fn release(&mut self, stream: Stream, mut taken: Taken) -> Taken {
        if self.held.is_empty() {
            return taken;
        }
        if matches!(stream, Stream::Tf | Stream::TfStatic | Stream::CameraInfo) {
            // Only the lookups are tried again: the frame was decoded and checked when it came
            // (decoding each held frame anew on every transform made the intake fall behind
            // when a flood of frames waited: measured, transforms 0.9 s late at the median).
            for held in std::mem::take(&mut self.held) {
                match self.observation(held.stream, &held.camera, held.stamp_ns, &held.bytes) {
                    Ok(i) => {
                        self.stats.entry(held.stream).or_default().held -= 1;
                        self.finish(&mut taken, held.message, held.stream, vec![i], Vec::new());
                    }
                    Err(reason) => self.held.push_back(Held { reason, ..held }),
                }
            }
        }
        let horizon = self.latest_ns.saturating_sub(self.config.hold_ns);
        while self.held.front().is_some_and(|h| h.stamp_ns < horizon) {
            if let Some(h) = self.held.pop_front() {
                self.give_up(h, &mut taken);
            }
        }
        taken
    }

    fn saw(&mut self, stamp_ns: i64) {
        self.latest_ns = self.latest_ns.max(stamp_ns);
    }

    /// A camera frame's observation; on failure, the reason, and once the frame was decoded and
    /// checked, its stamp and camera frame (what holding it needs).
    fn frame(&mut self, stream: Stream, message: &[u8]) -> Result<Ingested, (Reject, Option<(i64, String)>)> {
        let (camera, t) = match stream {
            Stream::CompressedImage => {
                let image = CompressedImage::from_cdr(message).map_err(|e| (e.into(), None))?;
                let t = stamp(&image.header).map_err(|e| (e, None))?;
                self.saw(t);
                self.compressed_image(&image, message).map_err(|e| (e, None))?;
                (image.header.frame_id, t)
            }
            _ => {
                let image = Image::from_cdr(message).map_err(|e| (e.into(), None))?;
                let t = stamp(&image.header).map_err(|e| (e, None))?;
                self.saw(t);
                self.image(&image, message).map_err(|e| (e, None))?;
                (image.header.frame_id, t)
            }
        };
        let checked = frame(&camera, "header.frame_id").map_err(|e| (e, None))?;
        self.observation(stream, checked, t, message).map_err(|e| (e, Some((t, checked.to_owned()))))
    }

    fn extractor(&self, stream: Stream) -> Extractor {
        Extractor {
            model: format!("{}@{}", stream.message_type(), self.config.topic(stream)),
            code: concat!("sion_memory ", env!("CARGO_PKG_VERSION")).into(),
        }
    }

    fn pose(&mut self, stream: Stream, header: &Header, pose: &Pose) -> Result<Atom, Reject> {
        let t = stamp(header)?;
        self.saw(t);
        let frame = frame(&header.frame_id, "header.frame_id")?;
        let at = point_mm(&pose.position, "pose.position", Round::Nearest)?;
        let mut parts = AtomParts::new(Kind::Pose, frame, BoxMm::point(at), sample(t), Permille(1000));
        parts.subject = self.config.robot.clone();
        // A zero quaternion is how many publishers say "no orientation": keep the position.
        if let Some(q) = rotation_nano(&pose.orientation, "pose.orientation")? {
            parts.payload = Payload::Public(rotation_bytes(q));
        }
        parts.extractor = Some(self.extractor(stream));
        Ok(Atom::new(parts)?)
    }

    fn transform(&mut self, stream: Stream, t: &msgs::TransformStamped) -> Result<Atom, Reject> {
        let time = stamp(&t.header)?;
        if stream == Stream::Tf {
            self.saw(time); // static transforms are often stamped 0 or long ago
        }
        let parent = frame(&t.header.frame_id, "header.frame_id")?;
        let child = frame(&t.child_frame_id, "child_frame_id")?;
        let at = point_mm(&t.transform.translation, "transform.translation", Round::Nearest)?;
        let q = rotation_nano(&t.transform.rotation, "transform.rotation")?
            .ok_or(Reject::OutOfRange { field: "transform.rotation" })?;
        let fixed = stream == Stream::TfStatic;
        self.tf
            .insert(parent, child, time, &t.transform, fixed)
            .map_err(|_| Reject::OutOfRange { field: "transform" })?;
        let valid =
            if fixed { Interval { from_ns: time, to_ns: Interval::OPEN_END_NS } } else { sample(time) };
        let mut parts = AtomParts::new(Kind::Transform, parent, BoxMm::point(at), valid, Permille(1000));
        parts.subject = child.to_owned();
        parts.payload = Payload::Public(rotation_bytes(q));
        parts.extractor = Some(self.extractor(stream));
        Ok(Atom::new(parts)?)
    }

    fn map(&mut self, grid: &OccupancyGrid, message: &[u8]) -> Result<Ingested, Reject> {
        let t = stamp(&grid.header)?;
        self.saw(t);
        let frame = frame(&grid.header.frame_id, "header.frame_id")?;
        let info = &grid.info;
        let resolution = f64::from(info.resolution);
        finite(resolution, "info.resolution")?;
        if resolution <= 0.0 {
            return Err(Reject::OutOfRange { field: "info.resolution" });
        }
        let cells = u64::from(info.width) * u64::from(info.height);
        if cells == 0 {
            return Err(Reject::BadMap("no cells"));
        }
        if cells > self.config.max_map_cells {
            return Err(Reject::Oversized {
                what: "grid of cells",
                size: cells,
                limit: self.config.max_map_cells,
            });
        }
        if grid.data.len() as u64 != cells {
            return Err(Reject::BadMap("data length is not width × height"));
        }
        if grid.data.iter().any(|&c| !(-1..=100).contains(&c)) {
            return Err(Reject::BadMap("a cell is outside -1..=100"));
        }
        let frame_from_grid = pose_isometry(&info.origin, "info.origin")?;
        let (w, h) = (f64::from(info.width) * resolution, f64::from(info.height) * resolution);
        let corners = [[0.0, 0.0, 0.0], [w, 0.0, 0.0], [0.0, h, 0.0], [w, h, 0.0]]
            .map(|[x, y, z]| frame_from_grid * Point3::new(x, y, z));
        let bounds = bounding_box(&corners, "info")?;
        let valid = Interval { from_ns: t, to_ns: Interval::OPEN_END_NS };
        let mut parts = AtomParts::new(Kind::MapTile, frame, bounds, valid, Permille(1000));
        parts.subject = self.config.topic(Stream::Map).to_owned();
        parts.payload = Payload::Blob(blob_ref(message, OccupancyGrid::TYPE));
        parts.extractor = Some(self.extractor(Stream::Map));
        // Each tile of the map topic supersedes the one before: its revisions form a chain.
        if let Some(previous) = self.last_tile {
            parts.links.push(Link { rel: LinkRel::Supersedes, target: previous });
        }
        let atom = Atom::new(parts)?;
        self.last_tile = Some(atom.id());
        Ok(Ingested { atom, blob: Some(message.to_vec()) })
    }

    /// Check a raw image is what it says: size, encoding, row length.
    fn image(&self, image: &Image, message: &[u8]) -> Result<(), Reject> {
        frame(&image.header.frame_id, "header.frame_id")?;
        self.check_size(message)?;
        if image.width == 0 || image.height == 0 {
            return Err(Reject::MalformedImage("no pixels"));
        }
        if image.is_bigendian > 1 {
            return Err(Reject::MalformedImage("is_bigendian is neither 0 nor 1"));
        }
        let pixel = bytes_per_pixel(&image.encoding)
            .ok_or_else(|| Reject::UnknownEncoding(image.encoding.clone()))?;
        if u64::from(image.step) < u64::from(image.width) * pixel {
            return Err(Reject::MalformedImage("step is shorter than a row"));
        }
        if image.data.len() as u64 != u64::from(image.step) * u64::from(image.height) {
            return Err(Reject::MalformedImage("data length is not step × height"));
        }
        Ok(())
    }

    /// Check a compressed image is what its format names.
    fn compressed_image(&self, image: &CompressedImage, message: &[u8]) -> Result<(), Reject> {
        frame(&image.header.frame_id, "header.frame_id")?;
        self.check_size(message)?;
        // `format` is e.g. "jpeg", "png" or "rgb8; jpeg compressed bgr8".
        let format = image.format.to_ascii_lowercase();
        let magic: &[u8] = if format.contains("png") {
            b"\x89PNG\r\n\x1a\n"
        } else if format.contains("jpeg") || format.contains("jpg") {
            b"\xff\xd8\xff"
        } else {
            return Err(Reject::UnknownEncoding(image.format.clone()));
        };
        if !image.data.starts_with(magic) {
            return Err(Reject::MalformedImage("the data is not what the format names"));
        }
        Ok(())
    }

    fn check_size(&self, message: &[u8]) -> Result<(), Reject> {
        let limit = self.config.max_image_bytes;
        if message.len() > limit {
            return Err(Reject::Oversized {
                what: "message of bytes",
                size: message.len() as u64,
                limit: limit as u64,
            });
        }
        Ok(())
    }

    /// The observation atom of a camera frame: the box in the fixed frame that holds the
    /// camera's frustum from its centre out to `camera_range_m`.
    fn observation(
        &mut self,
        stream: Stream,
        camera: &str,
        t: i64,
        message: &[u8],
    ) -> Result<Ingested, Reject> {
        let info = self.cameras.get(camera).ok_or_else(|| Reject::NoCameraInfo(camera.to_owned()))?;
        let fixed = self.config.fixed_frame.as_str();
        let fixed_from_camera = self.lookup(fixed, camera, t)?;
        let (fx, cx, fy, cy) = (info.k[0], info.k[2], info.k[4], info.k[5]);
        let (w, h) = (f64::from(info.width), f64::from(info.height));
        let range = self.config.camera_range_m;
        // Optical frame: z forward, x right, y down; a pixel (u, v) at depth d is
        // ((u - cx) d / fx, (v - cy) d / fy, d).
        let far = [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)].map(|(u, v)| {
            fixed_from_camera * Point3::new((u - cx) * range / fx, (v - cy) * range / fy, range)
        });
        let centre = fixed_from_camera * Point3::origin();
        let bounds = bounding_box(&[centre, far[0], far[1], far[2], far[3]], "camera frustum")?;
        let mut parts = AtomParts::new(Kind::Observation, fixed, bounds, sample(t), Permille(1000));
        parts.extractor = Some(self.extractor(stream));
        // One frame's payload per `keep_frame_every_ns` of a camera's stamps (a clock that went
        // back starts again); the others are what was seen, without the image.
        let every = self.config.keep_frame_every_ns;
        let keep = every <= 0
            || self
                .kept_at
                .get(camera)
                .is_none_or(|&last| t >= last.saturating_add(every) || t < last.saturating_sub(every));
        if !keep {
            return Ok(Ingested { atom: Atom::new(parts)?, blob: None });
        }
        self.kept_at.insert(camera.to_owned(), t);
        parts.payload = Payload::Blob(blob_ref(message, stream.message_type()));
        Ok(Ingested { atom: Atom::new(parts)?, blob: Some(message.to_vec()) })
    }

    fn camera_info(&mut self, info: CameraInfo) -> Result<(), Reject> {
        let camera = frame(&info.header.frame_id, "header.frame_id")?.to_owned();
        if info.width == 0 || info.height == 0 {
            return Err(Reject::BadCameraInfo("no image size"));
        }
        if info.k.iter().any(|x| !x.is_finite()) {
            return Err(Reject::BadCameraInfo("k is not finite"));
        }
        if info.k[0] <= 0.0 || info.k[4] <= 0.0 {
            return Err(Reject::BadCameraInfo("focal lengths are not positive (uncalibrated camera)"));
        }
        self.cameras.insert(camera, info);
        Ok(())
    }

    /// `target_from_source` at `time_ns`.
    fn lookup(&self, target: &str, source: &str, time_ns: i64) -> Result<Isometry3<f64>, Reject> {
        self.tf.lookup(target, source, time_ns).map_err(|e| {
            for frame in [source, target] {
                if !self.tf.knows(frame) {
                    return Reject::UnknownFrame(frame.to_owned());
                }
            }
            Reject::MissingTransform(e)
        })
    }
}

/// Whether a frame refused for this reason may yet be taken once more transforms or a
/// calibration arrive.
fn waits(reason: &Reject) -> bool {
    matches!(reason, Reject::MissingTransform(_) | Reject::UnknownFrame(_) | Reject::NoCameraInfo(_))
}

fn sample(t: i64) -> Interval {
    Interval { from_ns: t, to_ns: t.saturating_add(SAMPLE_NS) }
}

fn stamp(header: &Header) -> Result<i64, Reject> {
    units::stamp_to_ns(header.stamp.sec, header.stamp.nanosec).map_err(Reject::unit("header.stamp"))
}

/// A frame name; ROS 1's leading slash is dropped so "/map" and "map" are one frame.
fn frame<'a>(name: &'a str, field: &'static str) -> Result<&'a str, Reject> {
    match name.strip_prefix('/').unwrap_or(name) {
        "" => Err(Reject::NoFrame { field }),
        f => Ok(f),
    }
}

fn finite(x: f64, field: &'static str) -> Result<f64, Reject> {
    if x.is_nan() {
        Err(Reject::NaN { field })
    } else if x.is_infinite() {
        Err(Reject::Infinite { field })
    } else {
        Ok(x)
    }
}

fn point_mm(p: &msgs::Point, field: &'static str, round: Round) -> Result<[i64; 3], Reject> {
    let mm = |m| units::metres_to_mm_rounding(m, round).map_err(Reject::unit(field));
    Ok([mm(p.x)?, mm(p.y)?, mm(p.z)?])
}

/// The smallest box, in whole millimetres, that holds the points.
fn bounding_box(points: &[Point3<f64>], field: &'static str) -> Result<BoxMm, Reject> {
    let mut min = [f64::INFINITY; 3];
    let mut max = [f64::NEG_INFINITY; 3];
    for p in points {
        for axis in 0..3 {
            let x = finite(p[axis], field)?;
            min[axis] = min[axis].min(x);
            max[axis] = max[axis].max(x);
        }
    }
    let lo = |m| units::metres_to_mm_rounding(m, Round::Down).map_err(Reject::unit(field));
    let hi = |m| units::metres_to_mm_rounding(m, Round::Up).map_err(Reject::unit(field));
    Ok(BoxMm {
        min_mm: [lo(min[0])?, lo(min[1])?, lo(min[2])?],
        max_mm: [hi(max[0])?, hi(max[1])?, hi(max[2])?],
    })
}

/// A rotation as integer parts per 10^9 of a unit quaternion (x, y, z, w); `None` for the zero
/// quaternion. NaN and infinities are refused.
fn rotation_nano(q: &msgs::Quaternion, field: &'static str) -> Result<Option<[i32; 4]>, Reject> {
    let parts = [q.x, q.y, q.z, q.w];
    for &x in &parts {
        finite(x, field)?;
    }
    let norm = parts.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm < 1e-6 {
        return Ok(None);
    }
    // |x / norm| ≤ 1, so each part fits an i32 with room to spare.
    Ok(Some(parts.map(|x| (x / norm * 1e9).round() as i32)))
}

/// The payload of pose and transform atoms: the rotation, four little-endian i32 (x, y, z, w)
/// in parts per 10^9.
pub fn rotation_bytes(q: [i32; 4]) -> Vec<u8> {
    q.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn pose_isometry(pose: &Pose, field: &'static str) -> Result<Isometry3<f64>, Reject> {
    let t = msgs::Transform { translation: pose.position, rotation: pose.orientation };
    tf::isometry(&t).ok_or(Reject::OutOfRange { field })
}

fn blob_ref(bytes: &[u8], message_type: &str) -> BlobRef {
    BlobRef {
        hash: *blake3::hash(bytes).as_bytes(),
        size: bytes.len() as u64,
        media_type: cdr_media_type(message_type),
    }
}

/// Bytes per pixel of a `sensor_msgs/Image` encoding (the names of `sensor_msgs/image_encodings.hpp`).
fn bytes_per_pixel(encoding: &str) -> Option<u64> {
    Some(match encoding {
        "mono8" | "8UC1" | "8SC1" => 1,
        "mono16" | "16UC1" | "16SC1" | "yuv422" | "uyvy" | "yuyv" | "yuv422_yuy2" => 2,
        "rgb8" | "bgr8" | "8UC3" | "8SC3" => 3,
        "rgba8" | "bgra8" | "8UC4" | "8SC4" | "32FC1" | "32SC1" => 4,
        "rgb16" | "bgr16" | "16UC3" | "16SC3" => 6,
        "rgba16" | "bgra16" | "16UC4" | "16SC4" | "64FC1" | "32FC2" => 8,
        "32FC3" | "32SC3" => 12,
        "32FC4" | "32SC4" | "64FC2" => 16,
        e if e.starts_with("bayer_") && e.ends_with("16") => 2,
        e if e.starts_with("bayer_") && e.ends_with('8') => 1,
        _ => return None,
    })
}
