//! The node's parameters: declared to ROS (so `ros2 param` sees them), set from
//! `config/robot.yaml` through `--params-file` or one by one with `-p name:=value`.

use r2r::RosParams;

use crate::ingest::{IngestConfig, Source, Stream};

// A description longer than a line is one `#[doc = "…"]` string: r2r's derive takes a field's
// first doc attribute as the parameter's description (`ros2 param describe`, `--help`), and
// `///` lines are one attribute each.
#[derive(RosParams, Debug, Clone, PartialEq)]
pub struct Params {
    /// Memory directory (created on first start)
    pub data_dir: String,
    /// Agent identity of the robot's memory log
    pub agent: String,
    #[doc = "Ledger a new memory's log is opened on: \"embedded\" (a ledger inside data_dir), a fleet \
        ledger service's URL (http://HOST:PORT), or an embedded ledger's directory"]
    pub ledger: String,
    #[doc = "A new memory is sealed (docs/SEAL.md): camera frames and map tiles are sealed in its \
        space, so only the writer and the space's members open them, and they can be forgotten \
        (~/forget). An existing memory keeps what its memory.json says"]
    pub sealed: bool,
    /// The robot's name: the subject of its pose atoms
    pub robot: String,
    /// Frame camera, scan and detection observations are placed in
    pub fixed_frame: String,
    /// The robot's own frame (REP 105's base_link): where messages of topics.other are placed
    pub robot_frame: String,
    /// Commit the head to the ledger at least this often while there is news [s]
    pub commit_period_s: f64,
    /// ... or as soon as this many new atoms wait
    pub commit_every_atoms: i64,
    /// Period of the memory brain's wakes [ms]
    pub brain_period_ms: i64,
    /// How far a camera's box reaches along its optical axis [m]
    pub camera_range_m: f64,
    /// Largest image, scan, point cloud or topics.other message taken in [bytes]
    pub max_image_bytes: i64,
    /// How far from its nearest sample a transform may be used, once a message gives up waiting [s]
    pub tf_tolerance_s: f64,
    #[doc = "How long a sensor message waits for its transform or camera info before its last try [s \
        of message time]"]
    pub frame_hold_s: f64,
    /// Period of /sion_memory/stats and of repeated rejection logs [s]
    pub stats_period_s: f64,
    /// Messages waiting for the intake, at most; past it they are dropped and counted
    pub intake_queue_messages: i64,
    /// ... and their bytes, at most [MiB]
    pub intake_queue_mb: i64,
    /// The index writer's hot state (atoms folded, paths being built), at most [MiB]
    pub index_hot_mb: i64,
    /// The index's decoded records kept for readers and the writer, at most [MiB]
    pub index_cache_mb: i64,
    #[doc = "Serve the memory's verbs as MCP tools (streamable HTTP at /mcp) from this node, on this \
        loopback address (127.0.0.1:8765), every client presenting a token of mcp_tokens, or on \
        this Unix socket (unix:/run/sion/mcp.sock, made 0600 in a directory made 0700), every \
        client known by its user id (mcp_unix_role, mcp_unix_allow); empty: not served. The node \
        stays the memory's one writer while MCP and ROS clients use it at once"]
    pub mcp_listen: String,
    #[doc = "The MCP clients' token file (lines `ROLES TOKEN`, roles read, remember, forget, share, \
        admin; mode 0600, docs/ROS.md); empty: DATA_DIR/mcp/tokens, written with a read, a \
        remember and an admin token when absent. Not read for a unix: mcp_listen"]
    pub mcp_tokens: String,
    #[doc = "With a unix: mcp_listen, the roles of a client running as the node's own user (read, \
        remember, forget, share, admin, or several joined by commas)"]
    pub mcp_unix_role: String,
    #[doc = "With a unix: mcp_listen, other users admitted, `UID` (role read) or `UID=ROLES`, \
        separated by spaces or semicolons (`1001=remember;1002`); the socket is then 0666 in a \
        0711 directory, the peer's uid alone keeping other users out"]
    pub mcp_unix_allow: String,
    #[doc = "Other revisers' memory directories (read-only, on this memory's ledger), comma-separated, \
        that ~/believe and the MCP tool draw belief bundles from too, and ~/fleet_recall and the MCP \
        tool sion_fleet_recall ask with this one (the robots' memories on its fleet ledger)"]
    pub believe_from: String,
    #[doc = "Take the time the node stamps (/sion_memory/stats, /diagnostics, /rosout) from /clock \
        (rosgraph_msgs/Clock), as a simulation or `ros2 bag play --clock` publishes it. Atoms keep \
        their messages' own stamps either way; the ledger keeps its own time. Read at start"]
    pub use_sim_time: bool,
    pub topics: Topics,
    /// A sealed memory's retention: what it keeps of each stream's payloads (docs/SEAL.md)
    pub retention: RetentionParams,
    /// Answers drawn for RViz2 and Foxglove (visualization_msgs/MarkerArray, docs/VIZ.md)
    pub markers: MarkerParams,
}

/// The memory around the robot, drawn on `~/around` (every answered question is drawn on
/// `~/answer` regardless); each may be set while the node runs.
#[derive(RosParams, Debug, Clone, PartialEq)]
pub struct MarkerParams {
    #[doc = "Draw what the memory holds within this many metres of the robot's last pose on ~/around, \
        proved like any answer [m]; 0: not drawn"]
    pub around_m: f64,
    /// ... over this many seconds of valid time before that pose [s]
    pub around_s: f64,
    /// ... every this many seconds [s]
    pub period_s: f64,
}

#[derive(RosParams, Debug, Clone, PartialEq)]
pub struct RetentionParams {
    pub camera: StreamRetentionParams,
    pub map: StreamRetentionParams,
    /// How often the brain's retention phase looks for what to forget [s]
    pub check_s: f64,
}

#[derive(RosParams, Debug, Clone, PartialEq)]
pub struct StreamRetentionParams {
    #[doc = "Forget payloads older than this (by their stamps, against the stream's newest) [s]; \
        0 keeps them however old"]
    pub keep_s: f64,
    #[doc = "Forget the oldest while the stream's payloads take more than this on disk [MB]; 0: no \
        budget; -1: a fifth of the space free where data_dir is when the node starts"]
    pub keep_mb: i64,
    #[doc = "Keep at most one payload per this many seconds per camera or scanner (the other \
        frames and scans are remembered without their image or points) [s]; 0 keeps every one \
        (camera only: it also thins scans and point clouds)"]
    pub every_s: f64,
}

/// The topics taken in; an empty name (or list) takes none of that kind.
#[derive(RosParams, Debug, Clone, PartialEq)]
pub struct Topics {
    /// geometry_msgs/PoseStamped
    pub pose: String,
    /// nav_msgs/Odometry
    pub odom: String,
    /// tf2_msgs/TFMessage
    pub tf: String,
    /// tf2_msgs/TFMessage (transient local)
    pub tf_static: String,
    /// nav_msgs/OccupancyGrid
    pub map: String,
    #[doc = "Cameras, each by its image topic: sensor_msgs/Image, or sensor_msgs/CompressedImage when \
        the name ends in /compressed. Its sensor_msgs/CameraInfo is read from camera_info beside \
        the image (image_transport's rule: /front/image_raw and /front/image_raw/compressed take \
        /front/camera_info), or from the topic after a `=` (/front/image_raw=/front/info)"]
    pub cameras: TopicList,
    /// sensor_msgs/LaserScan topics
    pub scans: TopicList,
    /// sensor_msgs/PointCloud2 topics
    pub clouds: TopicList,
    /// sensor_msgs/Imu topics
    pub imu: TopicList,
    /// sensor_msgs/NavSatFix topics
    pub gnss: TopicList,
    /// vision_msgs/Detection3DArray topics
    pub detections_3d: TopicList,
    #[doc = "vision_msgs/Detection2DArray topics (their header names the camera whose camera_info \
        places them)"]
    pub detections_2d: TopicList,
    #[doc = "Other topics kept whole at the robot's place, each `TOPIC=TYPE` (/battery=sensor_msgs/msg/\
        BatteryState); TYPE from a package the node was built with (docs/ROS.md)"]
    pub other: TopicList,
}

/// A list of topics: a string-array parameter (`[/front/image_raw, /rear/image_raw]` in a
/// parameters file or `-p 'topics.scans:=[/scan, /scan_rear]'`); a string is taken as one
/// list separated by commas, as `-p topics.scans:=/scan` gives it. (r2r's derive has no
/// array parameters of its own.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopicList(pub Vec<String>);

impl TopicList {
    fn from_value(value: &r2r::ParameterValue) -> Option<Self> {
        match value {
            r2r::ParameterValue::StringArray(list) => Some(Self(list.clone())),
            r2r::ParameterValue::String(text) => {
                Some(Self(text.split(',').map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect()))
            }
            // rcl reads `[]` in a parameters file as an array of no type in particular.
            r2r::ParameterValue::NotSet => Some(Self::default()),
            r2r::ParameterValue::BoolArray(v) if v.is_empty() => Some(Self::default()),
            r2r::ParameterValue::IntegerArray(v) if v.is_empty() => Some(Self::default()),
            r2r::ParameterValue::DoubleArray(v) if v.is_empty() => Some(Self::default()),
            r2r::ParameterValue::ByteArray(v) if v.is_empty() => Some(Self::default()),
            _ => None,
        }
    }

    fn wrong_type(name: &str) -> r2r::Error {
        r2r::Error::InvalidParameterType { name: name.to_owned(), ty: "string array" }
    }
}

impl std::ops::Deref for TopicList {
    type Target = Vec<String>;
    fn deref(&self) -> &Vec<String> {
        &self.0
    }
}

impl std::ops::DerefMut for TopicList {
    fn deref_mut(&mut self) -> &mut Vec<String> {
        &mut self.0
    }
}

impl RosParams for TopicList {
    fn register_parameters(
        &mut self,
        prefix: &str,
        param: Option<r2r::Parameter>,
        params: &mut indexmap::IndexMap<String, r2r::Parameter>,
    ) -> r2r::Result<()> {
        // A value from the command line or a parameters file replaces the default.
        if let Some(given) = params.shift_remove(prefix) {
            *self = Self::from_value(&given.value).ok_or_else(|| Self::wrong_type(prefix))?;
        }
        let mut param = param.unwrap_or_else(|| r2r::Parameter::new(r2r::ParameterValue::NotSet));
        param.value = r2r::ParameterValue::StringArray(self.0.clone());
        params.insert(prefix.to_owned(), param);
        Ok(())
    }

    fn get_parameter(&mut self, name: &str) -> r2r::Result<r2r::ParameterValue> {
        match name {
            "" => Ok(r2r::ParameterValue::StringArray(self.0.clone())),
            _ => Err(r2r::Error::InvalidParameterName { name: name.to_owned() }),
        }
    }

    fn set_parameter(&mut self, name: &str, value: &r2r::ParameterValue) -> r2r::Result<()> {
        self.check_parameter(name, value)?;
        *self = Self::from_value(value).ok_or_else(|| Self::wrong_type(name))?;
        Ok(())
    }

    fn check_parameter(&self, name: &str, value: &r2r::ParameterValue) -> r2r::Result<()> {
        if !name.is_empty() {
            return Err(r2r::Error::InvalidParameterName { name: name.to_owned() });
        }
        Self::from_value(value).map(|_| ()).ok_or_else(|| Self::wrong_type(name))
    }
}

/// image_transport's rule: a camera's calibration is `camera_info` in its image topic's
/// namespace (`/front/image_raw/compressed` → `/front/camera_info`).
fn camera_info_beside(image: &str) -> String {
    let base = image.strip_suffix("/compressed").unwrap_or(image);
    match base.rfind('/') {
        Some(i) => format!("{}/camera_info", &base[..i]),
        None => "camera_info".into(),
    }
}

impl Default for Params {
    fn default() -> Self {
        let ingest = IngestConfig::default();
        let topic = |s: Stream| s.default_topic().to_owned();
        let list = |s: Stream| TopicList(vec![s.default_topic().to_owned()]);
        Self {
            data_dir: "sion-data".into(),
            agent: "robot".into(),
            ledger: "embedded".into(),
            // Private by default: frames and tiles sealed, camera frames kept one a second for a
            // week within a fifth of the free disk (docs/SEAL.md, "Defaults").
            sealed: true,
            robot: ingest.robot,
            fixed_frame: ingest.fixed_frame,
            robot_frame: ingest.robot_frame,
            commit_period_s: 5.0,
            commit_every_atoms: 10_000,
            brain_period_ms: 100,
            camera_range_m: ingest.camera_range_m,
            max_image_bytes: ingest.max_image_bytes as i64,
            tf_tolerance_s: ingest.tf_tolerance_ns as f64 / 1e9,
            frame_hold_s: ingest.hold_ns as f64 / 1e9,
            stats_period_s: 1.0,
            intake_queue_messages: 65_536,
            intake_queue_mb: 64,
            index_hot_mb: (crate::index::Budget::default().hot_bytes >> 20) as i64,
            index_cache_mb: 64,
            mcp_listen: String::new(),
            mcp_tokens: String::new(),
            mcp_unix_role: "read".into(),
            mcp_unix_allow: String::new(),
            believe_from: String::new(),
            use_sim_time: false,
            topics: Topics {
                pose: topic(Stream::Pose),
                odom: topic(Stream::Odometry),
                tf: topic(Stream::Tf),
                tf_static: topic(Stream::TfStatic),
                map: topic(Stream::Map),
                cameras: TopicList(vec![topic(Stream::Image), topic(Stream::CompressedImage)]),
                scans: list(Stream::LaserScan),
                clouds: list(Stream::PointCloud2),
                imu: list(Stream::Imu),
                gnss: list(Stream::NavSatFix),
                detections_3d: list(Stream::Detections3D),
                detections_2d: list(Stream::Detections2D),
                other: TopicList::default(),
            },
            // A week of frames, one a second, within 20 GB; map tiles kept.
            retention: RetentionParams {
                camera: StreamRetentionParams { keep_s: 604_800.0, keep_mb: -1, every_s: 1.0 },
                map: StreamRetentionParams { keep_s: 0.0, keep_mb: 0, every_s: 0.0 },
                check_s: 10.0,
            },
            markers: MarkerParams { around_m: 0.0, around_s: 30.0, period_s: 1.0 },
        }
    }
}

impl Params {
    /// Every declared parameter's name, description and default value, in declaration order.
    pub fn declared() -> Vec<(String, String, String)> {
        let mut declared = indexmap::IndexMap::new();
        let mut params = Self::default();
        if params.register_parameters("", None, &mut declared).is_err() {
            return Vec::new();
        }
        declared.into_iter().map(|(name, p)| (name, p.description.to_owned(), show(&p.value))).collect()
    }

    /// Every topic to take in, in the order of the parameters, or an error naming the
    /// parameter of one that is malformed.
    pub fn sources(&self) -> Result<Vec<Source>, String> {
        let t = &self.topics;
        let mut sources = Vec::new();
        let mut add = |source: Source| {
            if !source.topic.is_empty() && !sources.contains(&source) {
                sources.push(source);
            }
        };
        for (stream, topic) in [
            (Stream::Pose, &t.pose),
            (Stream::Odometry, &t.odom),
            (Stream::Tf, &t.tf),
            (Stream::TfStatic, &t.tf_static),
            (Stream::Map, &t.map),
        ] {
            add(Source::new(stream, topic.trim()));
        }
        for camera in t.cameras.iter().map(|c| c.trim()).filter(|c| !c.is_empty()) {
            let (image, info) = match camera.split_once('=') {
                Some((image, info)) => (image.trim(), info.trim().to_owned()),
                None => (camera, camera_info_beside(camera)),
            };
            if image.is_empty() || info.is_empty() {
                return Err(format!(
                    "parameter topics.cameras: {camera:?} is not IMAGE_TOPIC or IMAGE_TOPIC=INFO_TOPIC"
                ));
            }
            let stream = if image.ends_with("/compressed") { Stream::CompressedImage } else { Stream::Image };
            add(Source::new(stream, image));
            add(Source::new(Stream::CameraInfo, &info));
        }
        for (stream, topics) in [
            (Stream::LaserScan, &t.scans),
            (Stream::PointCloud2, &t.clouds),
            (Stream::Imu, &t.imu),
            (Stream::NavSatFix, &t.gnss),
            (Stream::Detections3D, &t.detections_3d),
            (Stream::Detections2D, &t.detections_2d),
        ] {
            for topic in topics.iter() {
                add(Source::new(stream, topic.trim()));
            }
        }
        for other in t.other.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
            let (topic, ty) = other
                .split_once('=')
                .map(|(a, b)| (a.trim(), b.trim()))
                .filter(|(a, b)| !a.is_empty() && b.split('/').count() == 3)
                .ok_or_else(|| format!("parameter topics.other: {other:?} is not TOPIC=package/msg/Type"))?;
            // A type the memory reads is taken in as such (`/tf` listed here must still feed
            // the transform buffer).
            add(match Stream::of_type(ty) {
                Some(Stream::Tf) if topic.ends_with("tf_static") => Source::new(Stream::TfStatic, topic),
                Some(stream) => Source::new(stream, topic),
                None => Source::other(topic, ty),
            });
        }
        Ok(sources)
    }

    /// The ingest's configuration, checked: a parameter out of range is an error naming it.
    pub fn ingest(&self) -> Result<IngestConfig, String> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(format!("parameter {name} must be positive, not {v}"))
            }
        };
        // Bounded so the conversion to nanoseconds cannot overflow; a day is already absurd.
        let seconds = |name: &str, v: f64| {
            let v = positive(name, v)?;
            if v > 86_400.0 {
                return Err(format!("parameter {name} must be at most a day, not {v} s"));
            }
            Ok((v * 1e9).round() as i64)
        };
        Ok(IngestConfig {
            fixed_frame: self.fixed_frame.clone(),
            robot: self.robot.clone(),
            robot_frame: self.robot_frame.clone(),
            sources: self.sources()?,
            camera_range_m: positive("camera_range_m", self.camera_range_m)?,
            max_image_bytes: usize::try_from(self.max_image_bytes).map_err(|_| {
                format!("parameter max_image_bytes must not be negative: {}", self.max_image_bytes)
            })?,
            max_map_cells: IngestConfig::default().max_map_cells,
            tf_tolerance_ns: seconds("tf_tolerance_s", self.tf_tolerance_s)?,
            hold_ns: seconds("frame_hold_s", self.frame_hold_s)?,
            // Set by the node for a sealed memory (its retention's every_s).
            keep_frame_every_ns: 0,
        })
    }
}

impl Params {
    /// How often retention runs, checked [ms].
    pub fn retention_check_ms(&self) -> Result<u64, String> {
        let s = self.retention.check_s;
        if !(s.is_finite() && (0.01..=86_400.0).contains(&s)) {
            return Err(format!("parameter retention.check_s must be from 0.01 to 86400 s, not {s}"));
        }
        Ok((s * 1e3).round() as u64)
    }

    /// A sealed memory's retention, checked: (the policy, frames' payloads kept at most every
    /// this many ns). A value out of range is an error naming it. `free_bytes`: the space free
    /// where the memory is, which a `keep_mb` of -1 takes a fifth of.
    pub fn retention(&self, free_bytes: u64) -> Result<(crate::memory::Retention, i64), String> {
        let stream =
            |name: &str, p: &StreamRetentionParams| -> Result<crate::memory::StreamRetention, String> {
                // Up to about a hundred years, so the conversion to nanoseconds cannot overflow.
                if !(p.keep_s.is_finite() && (0.0..=3.0e9).contains(&p.keep_s)) {
                    return Err(format!(
                        "parameter retention.{name}.keep_s must be from 0 to 3e9 s, not {}",
                        p.keep_s
                    ));
                }
                let keep_bytes = match p.keep_mb {
                    -1 => free_bytes / 5,
                    mb => u64::try_from(mb).ok().and_then(|m| m.checked_mul(1_000_000)).ok_or_else(|| {
                        format!("parameter retention.{name}.keep_mb must be a size in MB, 0 or -1, not {mb}")
                    })?,
                };
                Ok(crate::memory::StreamRetention { keep_ns: (p.keep_s * 1e9).round() as i64, keep_bytes })
            };
        let every = self.retention.camera.every_s;
        if !(every.is_finite() && (0.0..=86_400.0).contains(&every)) {
            return Err(format!("parameter retention.camera.every_s must be from 0 to 86400 s, not {every}"));
        }
        Ok((
            crate::memory::Retention {
                camera: stream("camera", &self.retention.camera)?,
                map: stream("map", &self.retention.map)?,
            },
            (every * 1e9).round() as i64,
        ))
    }

    /// Where to serve MCP, if anywhere: a loopback address or `unix:PATH`, or an error naming
    /// the parameter.
    pub fn mcp_listen(&self) -> Result<Option<crate::mcp::Listen>, String> {
        let text = self.mcp_listen.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(|e| format!("parameter mcp_listen: {e}"))
    }

    /// Who a unix: mcp_listen admits: the node's own user with mcp_unix_role, and the users of
    /// mcp_unix_allow; or an error naming the parameter.
    pub fn mcp_unix_peers(&self) -> Result<crate::mcp::access::Peers, String> {
        use crate::mcp::access::{Grant, Peers};
        let own =
            Grant::parse(self.mcp_unix_role.trim()).map_err(|e| format!("parameter mcp_unix_role: {e}"))?;
        let mut peers = Peers::new(own).map_err(|e| e.to_string())?;
        for one in
            self.mcp_unix_allow.split(|c: char| c == ';' || c.is_whitespace()).filter(|s| !s.is_empty())
        {
            let (uid, grant) =
                Peers::parse_allowed(one).map_err(|e| format!("parameter mcp_unix_allow: {e}"))?;
            peers = peers.allow(uid, grant);
        }
        Ok(peers)
    }

    /// The MCP clients' token file: `mcp_tokens`, or DATA_DIR/mcp/tokens (and whether it is
    /// that default, which is written when absent).
    pub fn mcp_tokens(&self, data_dir: &std::path::Path) -> (std::path::PathBuf, bool) {
        match self.mcp_tokens.trim() {
            "" => (data_dir.join("mcp").join("tokens"), true),
            path => (path.into(), false),
        }
    }

    /// The other revisers' memories belief draws from.
    pub fn believe_from(&self) -> Vec<std::path::PathBuf> {
        self.believe_from.split(',').map(str::trim).filter(|d| !d.is_empty()).map(Into::into).collect()
    }

    /// The index's budgets and disk, checked: a budget out of range is an error naming it.
    pub fn index(&self) -> Result<crate::index::IndexConfig, String> {
        let mib = |name: &str, v: i64| match usize::try_from(v) {
            Ok(m @ 1..=1_048_576) => Ok(m << 20),
            _ => Err(format!("parameter {name} must be from 1 to 1048576 (MiB), not {v}")),
        };
        Ok(crate::index::IndexConfig {
            cache_bytes: mib("index_cache_mb", self.index_cache_mb)?,
            budget: crate::index::Budget { hot_bytes: mib("index_hot_mb", self.index_hot_mb)? },
            disk: crate::disk::Disk::os(),
        })
    }
}

fn show(value: &r2r::ParameterValue) -> String {
    use r2r::ParameterValue as V;
    match value {
        V::String(s) => format!("{s:?}"),
        V::Double(x) => format!("{x:?}"),
        V::Integer(n) => format!("{n}"),
        V::Bool(b) => format!("{b}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::Params;

    #[test]
    fn index_budgets_are_the_parameters_and_a_bad_one_is_named() {
        let p = Params { index_hot_mb: 8, index_cache_mb: 16, ..Params::default() };
        let index = p.index().expect("in range");
        assert_eq!((index.budget.hot_bytes, index.cache_bytes), (8 << 20, 16 << 20));
        let e = Params { index_cache_mb: 0, ..Params::default() }.index().expect_err("refused");
        assert!(e.contains("index_cache_mb"), "{e}");
        let e = Params { index_hot_mb: -3, ..Params::default() }.index().expect_err("refused");
        assert!(e.contains("index_hot_mb") && e.contains("-3"), "{e}");
    }

    #[test]
    fn mcp_is_served_on_loopback_or_a_unix_socket_only() {
        use crate::mcp::Listen;
        assert_eq!(Params::default().mcp_listen(), Ok(None));
        let p = Params { mcp_listen: "127.0.0.1:8765".into(), ..Params::default() };
        assert_eq!(p.mcp_listen(), Ok(Some(Listen::Tcp("127.0.0.1:8765".parse().expect("addr")))));
        let p = Params { mcp_listen: "unix:/run/sion/mcp.sock".into(), ..Params::default() };
        assert_eq!(p.mcp_listen(), Ok(Some(Listen::Unix("/run/sion/mcp.sock".into()))));
        for bad in ["0.0.0.0:8765", "10.1.2.3:80", "localhost", "unix:"] {
            let e = Params { mcp_listen: bad.into(), ..Params::default() }.mcp_listen().expect_err(bad);
            assert!(e.contains("mcp_listen"), "{e}");
        }
        // The node's own user reads unless told; others only as listed.
        let peers = Params::default().mcp_unix_peers().expect("defaults");
        let me = peers.me();
        assert_eq!(peers.grant(me).map(|g| g.describe()).as_deref(), Some("read"));
        assert_eq!(peers.grant(me.wrapping_add(1)), None);
        let other = me.wrapping_add(7);
        let p = Params {
            mcp_unix_role: "remember".into(),
            mcp_unix_allow: format!("{other}=remember,forget; {}", me.wrapping_add(8)),
            ..Params::default()
        };
        let peers = p.mcp_unix_peers().expect("listed");
        assert_eq!(peers.grant(me).map(|g| g.describe()).as_deref(), Some("read,remember"));
        assert_eq!(peers.grant(other).map(|g| g.describe()).as_deref(), Some("read,remember,forget"));
        assert_eq!(peers.grant(me.wrapping_add(8)).map(|g| g.describe()).as_deref(), Some("read"));
        for (role, allow, names) in [("wrote", "", "mcp_unix_role"), ("read", "bob", "mcp_unix_allow")] {
            let p = Params { mcp_unix_role: role.into(), mcp_unix_allow: allow.into(), ..Params::default() };
            let e = p.mcp_unix_peers().expect_err(names);
            assert!(e.contains(names), "{e}");
        }
        let p = Params { believe_from: " /a, ,/b ".into(), ..Params::default() };
        assert_eq!(p.believe_from(), vec![std::path::PathBuf::from("/a"), "/b".into()]);
    }

    #[test]
    fn cameras_bring_their_calibration_and_other_topics_their_type() {
        use super::TopicList;
        use crate::ingest::{Source, Stream};
        let mut p = Params::default();
        p.topics.cameras = TopicList(vec![
            "/front/image_raw".into(),
            "/front/image_raw/compressed".into(),
            "/rear/image_color/compressed".into(),
            "/top/image=/top/calibration".into(),
        ]);
        p.topics.other = TopicList(vec!["/battery = sensor_msgs/msg/BatteryState".into()]);
        p.topics.clouds.clear();
        let sources = p.sources().expect("well formed");
        let of = |stream: Stream| -> Vec<&str> {
            sources.iter().filter(|s| s.stream == stream).map(|s| s.topic.as_str()).collect()
        };
        assert_eq!(of(Stream::Image), ["/front/image_raw", "/top/image"]);
        assert_eq!(
            of(Stream::CompressedImage),
            ["/front/image_raw/compressed", "/rear/image_color/compressed"]
        );
        assert_eq!(of(Stream::CameraInfo), ["/front/camera_info", "/rear/camera_info", "/top/calibration"]);
        assert_eq!(of(Stream::PointCloud2), Vec::<&str>::new());
        assert!(sources.contains(&Source::other("/battery", "sensor_msgs/msg/BatteryState")));
        p.topics.other = TopicList(vec!["/scan_rear=sensor_msgs/msg/LaserScan".into()]);
        assert!(p.sources().expect("well formed").contains(&Source::new(Stream::LaserScan, "/scan_rear")));
        p.topics.other = TopicList(vec!["/battery".into()]);
        let e = p.sources().expect_err("no type");
        assert!(e.contains("topics.other") && e.contains("/battery"), "{e}");
        p.topics.other.clear();
        p.topics.cameras = TopicList(vec!["=/info".into()]);
        assert!(p.sources().expect_err("no image").contains("topics.cameras"));
    }
}
