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
//! - camera (`Image`, `CompressedImage`, with `CameraInfo`), any number of them: an observation
//!   atom in the fixed frame bounding what the camera could see (its frustum out to a range),
//!   committing to the frame;
//! - lidar (`LaserScan`, `PointCloud2`): a coverage atom in the fixed frame bounding the scan's
//!   points and the sensor, committing to the scan;
//! - `Imu` and GNSS (`NavSatFix`): an observation atom at the sensor (the IMU's place in the
//!   fixed frame; the fix in the `earth` frame, Earth-centred, Earth-fixed), its reading as
//!   integers in the payload;
//! - detections (`vision_msgs` `Detection3DArray`, `Detection2DArray` with the camera's model):
//!   an observation atom per detection, its subject the class (and the tracker's id), its box
//!   the object's (or, from an image, the part of the camera's frustum it lies in);
//! - any other topic named in the configuration: an observation atom at the robot's place in
//!   the fixed frame, committing to the message.

#![forbid(unsafe_code)]

pub mod cdr;
pub mod msgs;
pub mod schema;
mod sensors;
pub use sensors::{cloud_points, scan_points};
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
    LaserScan,
    PointCloud2,
    Imu,
    NavSatFix,
    Detections3D,
    Detections2D,
    /// Any other topic named in the configuration, of any type: kept whole at the robot's place.
    Other,
}

impl Stream {
    pub const ALL: [Stream; 15] = [
        Stream::Pose,
        Stream::Odometry,
        Stream::Tf,
        Stream::TfStatic,
        Stream::Map,
        Stream::Image,
        Stream::CompressedImage,
        Stream::CameraInfo,
        Stream::LaserScan,
        Stream::PointCloud2,
        Stream::Imu,
        Stream::NavSatFix,
        Stream::Detections3D,
        Stream::Detections2D,
        Stream::Other,
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
            Stream::LaserScan => "scan",
            Stream::PointCloud2 => "cloud",
            Stream::Imu => "imu",
            Stream::NavSatFix => "gnss",
            Stream::Detections3D => "detections_3d",
            Stream::Detections2D => "detections_2d",
            Stream::Other => "other",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The ROS 2 type of the stream's messages (empty for [`Stream::Other`]: a source names it).
    pub fn message_type(self) -> &'static str {
        match self {
            Stream::Pose => PoseStamped::TYPE,
            Stream::Odometry => Odometry::TYPE,
            Stream::Tf | Stream::TfStatic => TfMessage::TYPE,
            Stream::Map => OccupancyGrid::TYPE,
            Stream::Image => Image::TYPE,
            Stream::CompressedImage => CompressedImage::TYPE,
            Stream::CameraInfo => CameraInfo::TYPE,
            Stream::LaserScan => msgs::LaserScan::TYPE,
            Stream::PointCloud2 => msgs::PointCloud2::TYPE,
            Stream::Imu => msgs::Imu::TYPE,
            Stream::NavSatFix => msgs::NavSatFix::TYPE,
            Stream::Detections3D => msgs::Detection3DArray::TYPE,
            Stream::Detections2D => msgs::Detection2DArray::TYPE,
            Stream::Other => "",
        }
    }

    /// The stream whose messages are of this ROS 2 type (`pkg/msg/Type`), if one is; a
    /// `TFMessage` is [`Stream::Tf`] (a topic's name tells `/tf_static`).
    pub fn of_type(message_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| *s != Stream::Other && s.message_type() == message_type)
    }

    /// The topic a ROS 2 robot publishes the stream on by default ("" where there is no
    /// convention).
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
            Stream::LaserScan => "/scan",
            Stream::PointCloud2 => "/points",
            Stream::Imu => "/imu/data",
            Stream::NavSatFix => "/fix",
            Stream::Detections3D => "/detections_3d",
            Stream::Detections2D => "/detections_2d",
            Stream::Other => "",
        }
    }
}

/// One topic the ingest takes in: its stream (what its messages become) and its name, recorded
/// in each atom's extractor (`TYPE@TOPIC`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    pub stream: Stream,
    pub topic: String,
    /// The ROS 2 type of its messages: the stream's, or for [`Stream::Other`] the one named.
    pub message_type: String,
}

impl Source {
    pub fn new(stream: Stream, topic: &str) -> Self {
        Self { stream, topic: topic.to_owned(), message_type: stream.message_type().to_owned() }
    }

    /// A topic of another type, kept whole as a blob at the robot's place.
    pub fn other(topic: &str, message_type: &str) -> Self {
        Self { stream: Stream::Other, topic: topic.to_owned(), message_type: message_type.to_owned() }
    }
}

/// A source's number in an [`Ingest`] (the order sources were added in).
pub type SourceId = usize;

/// How messages become atoms.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestConfig {
    /// The frame camera observations are placed in.
    pub fixed_frame: String,
    /// The subject of pose atoms: the robot's name.
    pub robot: String,
    /// The robot's own frame, where other topics' messages are placed.
    pub robot_frame: String,
    /// The topics taken in (more are added by [`Ingest::source`]).
    pub sources: Vec<Source>,
    /// How far a camera's box reaches along its optical axis, metres.
    pub camera_range_m: f64,
    /// The largest image, scan, cloud or other message taken in, bytes.
    pub max_image_bytes: usize,
    /// The largest occupancy grid taken in, cells.
    pub max_map_cells: u64,
    /// How far from its nearest transform sample a lookup may reach, nanoseconds.
    pub tf_tolerance_ns: i64,
    /// How long a camera frame may wait for its transform or calibration, nanoseconds of
    /// message stamps (a frame is given up once a message stamped this much later arrives).
    pub hold_ns: i64,
    /// Keep at most one frame's payload (its image) per this many nanoseconds of stamps, per
    /// camera, and one scan's or point cloud's per scanner; the others are remembered without a
    /// payload (what the camera saw or the scan covered, where and when, not the image or the
    /// points). 0 keeps every payload. A retention policy
    /// (docs/SEAL.md, "Retention"): a sealed memory's `every_s`.
    pub keep_frame_every_ns: i64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            fixed_frame: "map".into(),
            robot: "robot".into(),
            robot_frame: "base_link".into(),
            sources: Stream::ALL
                .into_iter()
                .filter(|s| *s != Stream::Other)
                .map(|s| Source::new(s, s.default_topic()))
                .collect(),
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
    /// The first topic of `stream` (its default topic if none is configured).
    pub fn topic(&self, stream: Stream) -> &str {
        self.sources.iter().find(|s| s.stream == stream).map_or(stream.default_topic(), |s| &s.topic)
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
    #[error("bad laser scan: {0}")]
    BadScan(&'static str),
    #[error("bad point cloud: {0}")]
    BadCloud(&'static str),
    #[error("bad detection: {0}")]
    BadDetection(&'static str),
    #[error("the receiver has no fix (status {0})")]
    NoFix(i8),
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
            Reject::BadScan(_) => "bad_scan",
            Reject::BadCloud(_) => "bad_cloud",
            Reject::BadDetection(_) => "bad_detection",
            Reject::NoFix(_) => "no_fix",
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
    pub source: SourceId,
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
    /// Messages waiting for a transform or calibration.
    pub held: u64,
}

/// A message waiting for what it needs (a transform, a camera's calibration).
#[derive(Debug, Clone)]
struct Held {
    message: u64,
    source: SourceId,
    stream: Stream,
    stamp_ns: i64,
    /// What it waits for.
    waits_for: sensors::Wait,
    /// When it was received (where a message has no stamp of its own).
    received_ns: i64,
    bytes: Vec<u8>,
    reason: Reject,
}

/// A held message's atoms and the refusals of its parts; or why it was refused, and what it
/// waits for now when that changed.
type Retried = Result<(Vec<Ingested>, Vec<Reject>), (Reject, Option<sensors::Wait>)>;

impl Held {
    /// The time it waits by: its stamp, or the later time it needs a transform at (a scan's
    /// last ray).
    fn until_ns(&self) -> i64 {
        match self.waits_for {
            sensors::Wait::Lookup { at, .. } => at.max(self.stamp_ns),
            sensors::Wait::Camera(_) => self.stamp_ns,
        }
    }
}

/// At most this many messages, and this many of their bytes, wait at once; beyond either the
/// oldest has its last try. Nearly every sensor message waits for the transform sample after
/// it (an IMU at 400 Hz with `/tf` at 10 Hz keeps about 40 waiting); a last try forced by
/// these bounds is a place where the order messages came in can still change an atom.
const MAX_HELD: usize = 1024;
const MAX_HELD_BYTES: usize = 64 << 20;

/// Turns messages into atoms, keeping what later messages need: the transform tree, the latest
/// camera calibration per frame, the latest map tile, and camera frames that arrived before the
/// transform or calibration for their stamp (as tf2's message filter does, they wait until
/// some message is stamped `hold_ns` past them).
#[derive(Debug, Clone)]
pub struct Ingest {
    config: IngestConfig,
    sources: Vec<Source>,
    tf: TfBuffer,
    cameras: HashMap<String, CameraInfo>,
    /// Per camera or scanner, the stamp of the last frame or scan whose payload was kept.
    kept_at: HashMap<(&'static str, String), i64>,
    last_tile: Option<AtomId>,
    held: VecDeque<Held>,
    /// The bytes of the messages held.
    held_bytes: usize,
    /// The latest stamp of any message taken: the clock held frames wait by.
    latest_ns: i64,
    /// Whether a lookup may use a transform sample up to `tf_tolerance_ns` from the time asked
    /// for: only on a held message's last try. Otherwise only samples at or around the time
    /// will do, and a message stamped past the last one waits for the next.
    giving_up: bool,
    next_message: u64,
    stats: BTreeMap<Stream, StreamStats>,
}

impl Ingest {
    pub fn new(config: IngestConfig) -> Self {
        let tf = TfBuffer::new(10_000_000_000, config.tf_tolerance_ns);
        let mut sources: Vec<Source> = Vec::new();
        for s in &config.sources {
            if !sources.contains(s) {
                sources.push(s.clone());
            }
        }
        Self {
            sources,
            config,
            tf,
            cameras: HashMap::new(),
            kept_at: HashMap::new(),
            last_tile: None,
            held: VecDeque::new(),
            held_bytes: 0,
            latest_ns: i64::MIN,
            giving_up: false,
            next_message: 0,
            stats: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    /// The source's number, added if it is new (a bag names its own topics): its topic is
    /// recorded in the extractor of the atoms its messages become.
    pub fn source(&mut self, source: Source) -> SourceId {
        if let Some(id) = self.sources.iter().position(|s| *s == source) {
            return id;
        }
        self.sources.push(source);
        self.sources.len() - 1
    }

    /// Every source, by number.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    pub fn tf(&self) -> &TfBuffer {
        &self.tf
    }

    /// Counters per stream since this ingest began.
    pub fn stats(&self) -> &BTreeMap<Stream, StreamStats> {
        &self.stats
    }

    /// Keep one camera frame's payload per this many ns of a camera's stamps from now on (a
    /// node's `retention.camera.every_s`, set while it runs); 0 keeps every one.
    pub fn set_keep_frame_every_ns(&mut self, ns: i64) {
        self.config.keep_frame_every_ns = ns.max(0);
    }

    /// Take in one message of `stream`, as CDR bytes, from the stream's first source (its
    /// default topic if it has none).
    pub fn take(&mut self, stream: Stream, message: &[u8]) -> Taken {
        let id = match self.sources.iter().position(|s| s.stream == stream) {
            Some(id) => id,
            None => self.source(Source::new(stream, stream.default_topic())),
        };
        self.take_from(id, message, self.latest_ns.max(0))
    }

    /// Take in one message from a source, as CDR bytes, received at `received_ns` (the
    /// receiving clock's time: the node's ROS time, a bag's log time), which places the
    /// messages of other topics in time; the others carry their own stamps.
    pub fn take_from(&mut self, source: SourceId, message: &[u8], received_ns: i64) -> Taken {
        let number = self.next_message;
        self.next_message += 1;
        let mut taken = Taken { message: number, ..Taken::default() };
        let Some(stream) = self.sources.get(source).map(|s| s.stream) else {
            // Not a source of this ingest: nothing to convert it as.
            return taken;
        };
        self.stats.entry(stream).or_default().messages += 1;
        match self.convert(source, stream, message, received_ns) {
            Ok((atoms, rejected)) => self.finish(&mut taken, number, source, stream, atoms, rejected),
            Err((reason, Some((stamp_ns, waits_for)))) if waits(&reason) => {
                let bytes = message.to_vec();
                let held =
                    Held { message: number, source, stream, stamp_ns, waits_for, received_ns, bytes, reason };
                self.hold(held, &mut taken);
            }
            Err((reason, _)) => self.finish(&mut taken, number, source, stream, Vec::new(), vec![reason]),
        }
        self.release(stream, taken)
    }

    /// A message's atoms and the refusals of its parts (a `TFMessage`'s transforms, an array's
    /// detections); or why it was refused whole, with, once it was decoded and checked, the
    /// stamp and camera frame that holding it for a transform or calibration needs.
    fn convert(
        &mut self,
        source: SourceId,
        stream: Stream,
        message: &[u8],
        received_ns: i64,
    ) -> sensors::Converted {
        let whole = |r: Reject| (r, None);
        let one = |atom: Atom| (vec![Ingested { atom, blob: None }], Vec::new());
        match stream {
            Stream::Pose => {
                let m = PoseStamped::from_cdr(message).map_err(|e| whole(e.into()))?;
                self.pose(source, &m.header, &m.pose).map(one).map_err(whole)
            }
            Stream::Odometry => {
                let m = Odometry::from_cdr(message).map_err(|e| whole(e.into()))?;
                self.pose(source, &m.header, &m.pose.pose).map(one).map_err(whole)
            }
            Stream::Tf | Stream::TfStatic => {
                let m = TfMessage::from_cdr(message).map_err(|e| whole(e.into()))?;
                let (mut atoms, mut rejected) = (Vec::new(), Vec::new());
                for t in &m.transforms {
                    match self.transform(source, stream, t) {
                        Ok(atom) => atoms.push(Ingested { atom, blob: None }),
                        Err(e) => rejected.push(e),
                    }
                }
                Ok((atoms, rejected))
            }
            Stream::Map => {
                let m = OccupancyGrid::from_cdr(message).map_err(|e| whole(e.into()))?;
                self.map(source, &m, message).map(|i| (vec![i], Vec::new())).map_err(whole)
            }
            Stream::Image | Stream::CompressedImage => self
                .frame(source, stream, message)
                .map(|i| (vec![i], Vec::new()))
                .map_err(|(r, held)| (r, held.map(|(t, camera)| (t, sensors::Wait::Camera(camera))))),
            Stream::CameraInfo => {
                let m = CameraInfo::from_cdr(message).map_err(|e| whole(e.into()))?;
                self.camera_info(source, m)
                    .map(|atom| {
                        (atom.map(|atom| Ingested { atom, blob: None }).into_iter().collect(), Vec::new())
                    })
                    .map_err(whole)
            }
            Stream::LaserScan => self.scan(source, message),
            Stream::PointCloud2 => self.cloud(source, message),
            Stream::Imu => self.imu(source, message),
            Stream::NavSatFix => self.gnss(source, message),
            Stream::Detections3D => self.detections_3d(source, message),
            Stream::Detections2D => self.detections_2d(source, message),
            Stream::Other => self.other(source, message, received_ns),
        }
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
        source: SourceId,
        stream: Stream,
        atoms: Vec<Ingested>,
        rejected: Vec<Reject>,
    ) {
        let stats = self.stats.entry(stream).or_default();
        stats.atoms += atoms.len() as u64;
        for r in &rejected {
            *stats.rejected.entry(r.reason()).or_default() += 1;
        }
        taken.finished.push(Finished { message, source, stream, atoms: atoms.len(), rejected });
        taken.ingested.extend(atoms);
    }

    fn hold(&mut self, held: Held, taken: &mut Taken) {
        self.stats.entry(held.stream).or_default().held += 1;
        self.held_bytes += held.bytes.len();
        self.held.push_back(held);
        while self.held.len() > MAX_HELD || (self.held_bytes > MAX_HELD_BYTES && self.held.len() > 1) {
            let Some(oldest) = self.held.pop_front() else { break };
            self.give_up(oldest, taken);
        }
    }

    /// A held message's last try: no transform at or after its time came while it waited, so
    /// the nearest sample within `tf_tolerance_ns` stands in; refused if even that fails, for
    /// what it waited for (or what else the try found wrong).
    fn give_up(&mut self, held: Held, taken: &mut Taken) {
        self.stats.entry(held.stream).or_default().held -= 1;
        self.held_bytes -= held.bytes.len();
        self.giving_up = true;
        let outcome = self.retry(&held);
        self.giving_up = false;
        let (atoms, rejected) = match outcome {
            Ok(done) => done,
            Err((reason, _)) if waits(&reason) => (Vec::new(), vec![held.reason]),
            Err((reason, _)) => (Vec::new(), vec![reason]),
        };
        self.finish(taken, held.message, held.source, held.stream, atoms, rejected);
    }

    /// A held message tried again: a camera frame only its lookups (it was decoded and checked
    /// when it came: decoding each held frame anew on every transform made the intake fall
    /// behind when a flood of frames waited: measured, transforms 0.9 s late at the median);
    /// the rest converted again once the lookup it waits for works (a point cloud is
    /// megabytes, and transforms come a hundred a second), or at once on its last try (a scan
    /// whose last ray's transform never came keeps the box of its first). On failure, the
    /// reason and, when a conversion found it, what the message waits for now.
    fn retry(&mut self, held: &Held) -> Retried {
        match &held.waits_for {
            sensors::Wait::Camera(camera) => self
                .observation(held.source, held.stream, camera, held.stamp_ns, &held.bytes)
                .map(|i| (vec![i], Vec::new()))
                .map_err(|reason| (reason, None)),
            sensors::Wait::Lookup { frame, at } => {
                if !self.giving_up {
                    self.lookup(&self.config.fixed_frame, frame, *at).map_err(|reason| (reason, None))?;
                }
                self.convert(held.source, held.stream, &held.bytes, held.received_ns)
                    .map_err(|(reason, wait)| (reason, wait.map(|(_, wait)| wait)))
            }
        }
    }

    /// After a message: retry held frames if it could help them, and give up on those that
    /// waited long enough.
    fn release(&mut self, stream: Stream, mut taken: Taken) -> Taken {
        if self.held.is_empty() {
            return taken;
        }
        if matches!(stream, Stream::Tf | Stream::TfStatic | Stream::CameraInfo) {
            for held in std::mem::take(&mut self.held) {
                self.held_bytes -= held.bytes.len();
                match self.retry(&held) {
                    Ok((atoms, rejected)) => {
                        self.stats.entry(held.stream).or_default().held -= 1;
                        self.finish(&mut taken, held.message, held.source, held.stream, atoms, rejected);
                    }
                    Err((reason, wait)) if waits(&reason) => {
                        self.held_bytes += held.bytes.len();
                        let waits_for = wait.unwrap_or(held.waits_for);
                        self.held.push_back(Held { reason, waits_for, ..held });
                    }
                    Err((reason, _)) => {
                        self.stats.entry(held.stream).or_default().held -= 1;
                        self.finish(
                            &mut taken,
                            held.message,
                            held.source,
                            held.stream,
                            Vec::new(),
                            vec![reason],
                        );
                    }
                }
            }
        }
        // Every message held past the horizon, wherever it is in the queue (a message placed
        // by its time of receipt may sit ahead of others).
        let horizon = self.latest_ns.saturating_sub(self.config.hold_ns);
        if self.held.iter().any(|h| h.until_ns() < horizon) {
            let (late, waiting): (VecDeque<Held>, VecDeque<Held>) =
                std::mem::take(&mut self.held).into_iter().partition(|h| h.until_ns() < horizon);
            self.held = waiting;
            for h in late {
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
    fn frame(
        &mut self,
        source: SourceId,
        stream: Stream,
        message: &[u8],
    ) -> Result<Ingested, (Reject, Option<(i64, String)>)> {
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
        self.observation(source, stream, checked, t, message).map_err(|e| (e, Some((t, checked.to_owned()))))
    }

    fn extractor(&self, source: SourceId) -> Extractor {
        let (ty, topic) =
            self.sources.get(source).map_or(("", ""), |s| (s.message_type.as_str(), s.topic.as_str()));
        Extractor {
            model: format!("{ty}@{topic}"),
            code: concat!("sion_memory ", env!("CARGO_PKG_VERSION")).into(),
        }
    }

    fn topic_of(&self, source: SourceId) -> &str {
        self.sources.get(source).map_or("", |s| s.topic.as_str())
    }

    fn pose(&mut self, source: SourceId, header: &Header, pose: &Pose) -> Result<Atom, Reject> {
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
        parts.extractor = Some(self.extractor(source));
        Ok(Atom::new(parts)?)
    }

    fn transform(
        &mut self,
        source: SourceId,
        stream: Stream,
        t: &msgs::TransformStamped,
    ) -> Result<Atom, Reject> {
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
        parts.extractor = Some(self.extractor(source));
        Ok(Atom::new(parts)?)
    }

    fn map(&mut self, source: SourceId, grid: &OccupancyGrid, message: &[u8]) -> Result<Ingested, Reject> {
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
        parts.subject = self.topic_of(source).to_owned();
        parts.payload = Payload::Blob(blob_ref(message, OccupancyGrid::TYPE));
        parts.extractor = Some(self.extractor(source));
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
        source: SourceId,
        stream: Stream,
        camera: &str,
        t: i64,
        message: &[u8],
    ) -> Result<Ingested, Reject> {
        let info = self.cameras.get(camera).ok_or_else(|| Reject::NoCameraInfo(camera.to_owned()))?;
        let (w, h) = (f64::from(info.width), f64::from(info.height));
        let bounds = self.frustum(camera, t, [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)])?;
        let fixed = self.config.fixed_frame.as_str();
        let mut parts = AtomParts::new(Kind::Observation, fixed, bounds, sample(t), Permille(1000));
        parts.extractor = Some(self.extractor(source));
        if !self.keeps_payload("image", camera, t) {
            return Ok(Ingested { atom: Atom::new(parts)?, blob: None });
        }
        parts.payload = Payload::Blob(blob_ref(message, stream.message_type()));
        Ok(Ingested { atom: Atom::new(parts)?, blob: Some(message.to_vec()) })
    }

    /// Whether the payload of a sensor's message stamped `t` is kept: one per
    /// `keep_frame_every_ns` of the sensor's stamps (a clock that went back starts again); the
    /// others are remembered without it (what was seen, not the image or the points).
    /// `kind` keeps a camera's images apart from a depth camera's cloud in the same frame.
    fn keeps_payload(&mut self, kind: &'static str, sensor: &str, t: i64) -> bool {
        let every = self.config.keep_frame_every_ns;
        let key = (kind, sensor.to_owned());
        let keep = every <= 0
            || self
                .kept_at
                .get(&key)
                .is_none_or(|&last| t >= last.saturating_add(every) || t < last.saturating_sub(every));
        if keep && every > 0 {
            self.kept_at.insert(key, t);
        }
        keep
    }

    /// The box in the fixed frame that holds the part of `camera`'s frustum through the four
    /// pixels `corners`, from its centre out to `camera_range_m`.
    fn frustum(&self, camera: &str, t: i64, corners: [(f64, f64); 4]) -> Result<BoxMm, Reject> {
        let info = self.cameras.get(camera).ok_or_else(|| Reject::NoCameraInfo(camera.to_owned()))?;
        let fixed_from_camera = self.lookup(&self.config.fixed_frame, camera, t)?;
        let (fx, cx, fy, cy) = (info.k[0], info.k[2], info.k[4], info.k[5]);
        let range = self.config.camera_range_m;
        // Optical frame: z forward, x right, y down; a pixel (u, v) at depth d is
        // ((u - cx) d / fx, (v - cy) d / fy, d).
        let far = corners.map(|(u, v)| {
            fixed_from_camera * Point3::new((u - cx) * range / fx, (v - cy) * range / fy, range)
        });
        let centre = fixed_from_camera * Point3::origin();
        bounding_box(&[centre, far[0], far[1], far[2], far[3]], "camera frustum")
    }

    /// A camera's calibration, kept for its frames; the first of a camera, and each that
    /// changes its image size or intrinsics, is remembered too: an observation atom in the
    /// camera's own frame at its origin (docs/ROS.md), so a reader can draw the frames that
    /// camera took.
    fn camera_info(&mut self, source: SourceId, info: CameraInfo) -> Result<Option<Atom>, Reject> {
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
        let payload = calibration_payload(&info)?;
        let changed = self
            .cameras
            .get(&camera)
            .is_none_or(|known| calibration_payload(known).ok().as_deref() != Some(payload.as_slice()));
        let t = stamp(&info.header)?;
        self.cameras.insert(camera.clone(), info);
        if !changed {
            return Ok(None);
        }
        let valid = Interval { from_ns: t, to_ns: Interval::OPEN_END_NS };
        let mut parts =
            AtomParts::new(Kind::Observation, &camera, BoxMm::point([0; 3]), valid, Permille(1000));
        parts.subject = camera.clone();
        parts.payload = Payload::Public(payload);
        parts.extractor = Some(self.extractor(source));
        Ok(Some(Atom::new(parts)?))
    }

    /// `target_from_source` at `time_ns`: from samples at or around the time, or, on a held
    /// message's last try, the nearest within `tf_tolerance_ns`.
    fn lookup(&self, target: &str, source: &str, time_ns: i64) -> Result<Isometry3<f64>, Reject> {
        let reach = if self.giving_up { self.config.tf_tolerance_ns } else { 0 };
        self.tf.lookup_within(target, source, time_ns, reach).map_err(|e| {
            for frame in [source, target] {
                if !self.tf.knows(frame) {
                    return Reject::UnknownFrame(frame.to_owned());
                }
            }
            Reject::MissingTransform(e)
        })
    }
}

/// A calibration as a payload: 40 bytes, little-endian: the image's width and height (u32),
/// then fx, fy, cx, cy (`k[0]`, `k[4]`, `k[2]`, `k[5]`) as i64 micropixels. Distortion is not
/// kept: pictures use the pinhole model.
pub fn calibration_payload(info: &CameraInfo) -> Result<Vec<u8>, Reject> {
    let mut out = Vec::with_capacity(40);
    out.extend_from_slice(&info.width.to_le_bytes());
    out.extend_from_slice(&info.height.to_le_bytes());
    for i in [0, 4, 2, 5] {
        let micro = finite(info.k[i], "k")? * 1e6;
        if micro.abs() > 1e15 {
            return Err(Reject::OutOfRange { field: "k" });
        }
        out.extend_from_slice(&(micro.round() as i64).to_le_bytes());
    }
    Ok(out)
}

/// A camera's calibration as the memory keeps it (see [`calibration_payload`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    pub width: u32,
    pub height: u32,
    /// fx, fy, cx, cy in pixels.
    pub k: [f64; 4],
}

/// The calibration an atom holds: an observation made from a `CameraInfo` (its extractor's
/// model names the type) with a calibration payload; its frame is the camera's.
pub fn calibration_of(atom: &Atom) -> Option<Calibration> {
    let p = atom.parts();
    let from_info = p
        .extractor
        .as_ref()
        .is_some_and(|e| e.model.strip_prefix(CameraInfo::TYPE).is_some_and(|rest| rest.starts_with('@')));
    match (&p.payload, p.kind == Kind::Observation && from_info) {
        (Payload::Public(bytes), true) => {
            calibration_from_payload(bytes).map(|(width, height, k)| Calibration { width, height, k })
        }
        _ => None,
    }
}

/// A calibration atom's payload read back: (width, height, [fx, fy, cx, cy] in pixels).
pub fn calibration_from_payload(bytes: &[u8]) -> Option<(u32, u32, [f64; 4])> {
    if bytes.len() != 40 {
        return None;
    }
    let u = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let k = |j: usize| {
        let at = 8 + 8 * j;
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        i64::from_le_bytes(b) as f64 / 1e6
    };
    Some((u(0), u(4), [k(0), k(1), k(2), k(3)]))
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

pub(crate) fn blob_ref(bytes: &[u8], message_type: &str) -> BlobRef {
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
