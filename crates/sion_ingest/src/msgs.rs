//! The ROS 2 messages this package takes in, as plain Rust structures with the fields (in the
//! order) of their definitions, so that the live node and bag replay hand the same values to the
//! same conversion code. Each reads and writes its CDR form.

use super::cdr::{Cdr, CdrError, Message, Reader, Writer, cdr_struct};

cdr_struct! {
    /// `builtin_interfaces/Time`.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct Time {
        pub sec: i32,
        pub nanosec: u32,
    }
}

cdr_struct! {
    /// `std_msgs/Header`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Header {
        pub stamp: Time,
        pub frame_id: String,
    }
}

cdr_struct! {
    /// `geometry_msgs/Vector3` (and `Point`, which has the same fields).
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct Vector3 {
        pub x: f64,
        pub y: f64,
        pub z: f64,
    }
}

pub type Point = Vector3;

cdr_struct! {
    /// `geometry_msgs/Quaternion`.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Quaternion {
        pub x: f64,
        pub y: f64,
        pub z: f64,
        pub w: f64,
    }
}

impl Default for Quaternion {
    fn default() -> Self {
        Self { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }
    }
}

cdr_struct! {
    /// `geometry_msgs/Pose`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct Pose {
        pub position: Point,
        pub orientation: Quaternion,
    }
}

cdr_struct! {
    /// `geometry_msgs/PoseStamped`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct PoseStamped {
        pub header: Header,
        pub pose: Pose,
    }
}

cdr_struct! {
    /// `geometry_msgs/PoseWithCovariance`.
    #[derive(Debug, Clone, PartialEq)]
    pub struct PoseWithCovariance {
        pub pose: Pose,
        pub covariance: [f64; 36],
    }
}

impl Default for PoseWithCovariance {
    fn default() -> Self {
        Self { pose: Pose::default(), covariance: [0.0; 36] }
    }
}

cdr_struct! {
    /// `geometry_msgs/Twist`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct Twist {
        pub linear: Vector3,
        pub angular: Vector3,
    }
}

cdr_struct! {
    /// `geometry_msgs/TwistWithCovariance`.
    #[derive(Debug, Clone, PartialEq)]
    pub struct TwistWithCovariance {
        pub twist: Twist,
        pub covariance: [f64; 36],
    }
}

impl Default for TwistWithCovariance {
    fn default() -> Self {
        Self { twist: Twist::default(), covariance: [0.0; 36] }
    }
}

cdr_struct! {
    /// `nav_msgs/Odometry`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Odometry {
        pub header: Header,
        pub child_frame_id: String,
        pub pose: PoseWithCovariance,
        pub twist: TwistWithCovariance,
    }
}

cdr_struct! {
    /// `geometry_msgs/Transform`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct Transform {
        pub translation: Vector3,
        pub rotation: Quaternion,
    }
}

cdr_struct! {
    /// `geometry_msgs/TransformStamped`: `header.frame_id` is the parent frame.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct TransformStamped {
        pub header: Header,
        pub child_frame_id: String,
        pub transform: Transform,
    }
}

impl Cdr for Vec<TransformStamped> {
    fn read(r: &mut Reader<'_>) -> Result<Self, CdrError> {
        let n = r.seq_len()?;
        (0..n).map(|_| TransformStamped::read(r)).collect()
    }
    fn write(&self, w: &mut Writer) {
        w.seq_len(self.len());
        self.iter().for_each(|t| t.write(w));
    }
}

cdr_struct! {
    /// `tf2_msgs/TFMessage`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct TfMessage {
        pub transforms: Vec<TransformStamped>,
    }
}

cdr_struct! {
    /// `nav_msgs/MapMetaData`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct MapMetaData {
        pub map_load_time: Time,
        /// Metres per cell.
        pub resolution: f32,
        pub width: u32,
        pub height: u32,
        /// The pose of cell (0, 0)'s corner in the map's frame.
        pub origin: Pose,
    }
}

cdr_struct! {
    /// `nav_msgs/OccupancyGrid`: row-major cells, -1 unknown, 0..=100 occupancy probability.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct OccupancyGrid {
        pub header: Header,
        pub info: MapMetaData,
        pub data: Vec<i8>,
    }
}

cdr_struct! {
    /// `sensor_msgs/Image`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Image {
        pub header: Header,
        pub height: u32,
        pub width: u32,
        pub encoding: String,
        pub is_bigendian: u8,
        /// Bytes per row.
        pub step: u32,
        pub data: Vec<u8>,
    }
}

cdr_struct! {
    /// `sensor_msgs/CompressedImage`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct CompressedImage {
        pub header: Header,
        pub format: String,
        pub data: Vec<u8>,
    }
}

cdr_struct! {
    /// `sensor_msgs/RegionOfInterest`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct RegionOfInterest {
        pub x_offset: u32,
        pub y_offset: u32,
        pub height: u32,
        pub width: u32,
        pub do_rectify: bool,
    }
}

cdr_struct! {
    /// `sensor_msgs/CameraInfo`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct CameraInfo {
        pub header: Header,
        pub height: u32,
        pub width: u32,
        pub distortion_model: String,
        pub d: Vec<f64>,
        /// Intrinsics, row-major: fx 0 cx / 0 fy cy / 0 0 1.
        pub k: [f64; 9],
        pub r: [f64; 9],
        pub p: [f64; 12],
        pub binning_x: u32,
        pub binning_y: u32,
        pub roi: RegionOfInterest,
    }
}

macro_rules! messages {
    ($($t:ty => $name:literal,)*) => {$(
        impl Message for $t {
            const TYPE: &'static str = $name;
        }
    )*};
}

messages! {
    PoseStamped => "geometry_msgs/msg/PoseStamped",
    Odometry => "nav_msgs/msg/Odometry",
    TfMessage => "tf2_msgs/msg/TFMessage",
    OccupancyGrid => "nav_msgs/msg/OccupancyGrid",
    Image => "sensor_msgs/msg/Image",
    CompressedImage => "sensor_msgs/msg/CompressedImage",
    CameraInfo => "sensor_msgs/msg/CameraInfo",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_cdr() {
        let header = Header { stamp: Time { sec: 12, nanosec: 34 }, frame_id: "odom".into() };
        let odom = Odometry {
            header: header.clone(),
            child_frame_id: "base_link".into(),
            pose: PoseWithCovariance {
                pose: Pose { position: Vector3 { x: 1.0, y: -2.0, z: 0.5 }, ..Pose::default() },
                covariance: [0.25; 36],
            },
            ..Odometry::default()
        };
        assert_eq!(Odometry::from_cdr(&odom.to_cdr()), Ok(odom));

        let tf = TfMessage {
            transforms: vec![
                TransformStamped { header: header.clone(), child_frame_id: "a".into(), ..Default::default() },
                TransformStamped { header: header.clone(), child_frame_id: "b".into(), ..Default::default() },
            ],
        };
        assert_eq!(TfMessage::from_cdr(&tf.to_cdr()), Ok(tf));

        let grid = OccupancyGrid {
            header: header.clone(),
            info: MapMetaData { resolution: 0.05, width: 2, height: 2, ..Default::default() },
            data: vec![-1, 0, 100, 50],
        };
        assert_eq!(OccupancyGrid::from_cdr(&grid.to_cdr()), Ok(grid));

        let info = CameraInfo { header, width: 640, height: 480, d: vec![0.1, 0.2], ..Default::default() };
        assert_eq!(CameraInfo::from_cdr(&info.to_cdr()), Ok(info));
    }

    #[test]
    fn every_truncation_of_a_message_is_refused() {
        let image = Image {
            header: Header { stamp: Time { sec: 1, nanosec: 2 }, frame_id: "camera".into() },
            height: 2,
            width: 2,
            encoding: "mono8".into(),
            is_bigendian: 0,
            step: 2,
            data: vec![1, 2, 3, 4],
        };
        let bytes = image.to_cdr();
        for cut in 0..bytes.len() {
            assert!(Image::from_cdr(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(Image::from_cdr(&bytes), Ok(image));
    }
}
