//! The ROS 2 messages this package takes in, as plain Rust structures with the fields (in the
//! order) of their definitions, so that the live node and bag replay hand the same values to the
//! same conversion code. Each reads and writes its CDR form.

use super::cdr::{Message, cdr_seq, cdr_struct};

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

cdr_seq!(TransformStamped);

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

cdr_struct! {
    /// `sensor_msgs/LaserScan`: ranges in metres from `angle_min` by `angle_increment` (radians,
    /// counter-clockwise about z from x) in the scanner's frame.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct LaserScan {
        pub header: Header,
        pub angle_min: f32,
        pub angle_max: f32,
        pub angle_increment: f32,
        pub time_increment: f32,
        pub scan_time: f32,
        pub range_min: f32,
        pub range_max: f32,
        pub ranges: Vec<f32>,
        pub intensities: Vec<f32>,
    }
}

cdr_struct! {
    /// `sensor_msgs/PointField`: one field of each point of a `PointCloud2`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct PointField {
        pub name: String,
        pub offset: u32,
        /// 1 INT8, 2 UINT8, 3 INT16, 4 UINT16, 5 INT32, 6 UINT32, 7 FLOAT32, 8 FLOAT64.
        pub datatype: u8,
        pub count: u32,
    }
}

cdr_seq!(PointField);

impl PointField {
    pub const FLOAT32: u8 = 7;
    pub const FLOAT64: u8 = 8;
}

cdr_struct! {
    /// `sensor_msgs/PointCloud2`: `height` rows of `width` points, `point_step` bytes each.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct PointCloud2 {
        pub header: Header,
        pub height: u32,
        pub width: u32,
        pub fields: Vec<PointField>,
        pub is_bigendian: bool,
        pub point_step: u32,
        pub row_step: u32,
        pub data: Vec<u8>,
        pub is_dense: bool,
    }
}

cdr_struct! {
    /// `sensor_msgs/Imu`. A covariance whose first element is -1 says the quantity is not given.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Imu {
        pub header: Header,
        pub orientation: Quaternion,
        pub orientation_covariance: [f64; 9],
        pub angular_velocity: Vector3,
        pub angular_velocity_covariance: [f64; 9],
        pub linear_acceleration: Vector3,
        pub linear_acceleration_covariance: [f64; 9],
    }
}

impl Default for Imu {
    fn default() -> Self {
        Self {
            header: Header::default(),
            orientation: Quaternion::default(),
            orientation_covariance: [0.0; 9],
            angular_velocity: Vector3::default(),
            angular_velocity_covariance: [0.0; 9],
            linear_acceleration: Vector3::default(),
            linear_acceleration_covariance: [0.0; 9],
        }
    }
}

cdr_struct! {
    /// `sensor_msgs/NavSatStatus`: `status` -2 unknown, -1 no fix, 0 fix, 1 SBAS, 2 GBAS.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct NavSatStatus {
        pub status: i8,
        pub service: u16,
    }
}

cdr_struct! {
    /// `sensor_msgs/NavSatFix`: WGS 84 latitude and longitude in degrees, altitude in metres
    /// above the ellipsoid; the covariance in m² in east, north, up.
    #[derive(Debug, Clone, PartialEq)]
    pub struct NavSatFix {
        pub header: Header,
        pub status: NavSatStatus,
        pub latitude: f64,
        pub longitude: f64,
        pub altitude: f64,
        pub position_covariance: [f64; 9],
        /// 0 unknown, 1 approximated, 2 diagonal known, 3 known.
        pub position_covariance_type: u8,
    }
}

impl Default for NavSatFix {
    fn default() -> Self {
        Self {
            header: Header::default(),
            status: NavSatStatus::default(),
            latitude: 0.0,
            longitude: 0.0,
            altitude: 0.0,
            position_covariance: [0.0; 9],
            position_covariance_type: 0,
        }
    }
}

cdr_struct! {
    /// `vision_msgs/ObjectHypothesis`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct ObjectHypothesis {
        pub class_id: String,
        pub score: f64,
    }
}

cdr_struct! {
    /// `vision_msgs/ObjectHypothesisWithPose`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct ObjectHypothesisWithPose {
        pub hypothesis: ObjectHypothesis,
        pub pose: PoseWithCovariance,
    }
}

cdr_seq!(ObjectHypothesisWithPose);

cdr_struct! {
    /// `vision_msgs/BoundingBox3D`: a box of `size` (metres) centred on, and turned as, `center`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct BoundingBox3D {
        pub center: Pose,
        pub size: Vector3,
    }
}

cdr_struct! {
    /// `vision_msgs/Detection3D`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Detection3D {
        pub header: Header,
        pub results: Vec<ObjectHypothesisWithPose>,
        pub bbox: BoundingBox3D,
        /// A tracker's id of the object, or empty.
        pub id: String,
    }
}

cdr_seq!(Detection3D);

cdr_struct! {
    /// `vision_msgs/Detection3DArray`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Detection3DArray {
        pub header: Header,
        pub detections: Vec<Detection3D>,
    }
}

cdr_struct! {
    /// `vision_msgs/Point2D`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct Point2D {
        pub x: f64,
        pub y: f64,
    }
}

cdr_struct! {
    /// `vision_msgs/Pose2D`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct Pose2D {
        pub position: Point2D,
        pub theta: f64,
    }
}

cdr_struct! {
    /// `vision_msgs/BoundingBox2D`: in pixels, centred on `center`.
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    pub struct BoundingBox2D {
        pub center: Pose2D,
        pub size_x: f64,
        pub size_y: f64,
    }
}

cdr_struct! {
    /// `vision_msgs/Detection2D`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Detection2D {
        pub header: Header,
        pub results: Vec<ObjectHypothesisWithPose>,
        pub bbox: BoundingBox2D,
        pub id: String,
    }
}

cdr_seq!(Detection2D);

cdr_struct! {
    /// `vision_msgs/Detection2DArray`.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct Detection2DArray {
        pub header: Header,
        pub detections: Vec<Detection2D>,
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
    LaserScan => "sensor_msgs/msg/LaserScan",
    PointCloud2 => "sensor_msgs/msg/PointCloud2",
    Imu => "sensor_msgs/msg/Imu",
    NavSatFix => "sensor_msgs/msg/NavSatFix",
    Detection3DArray => "vision_msgs/msg/Detection3DArray",
    Detection2DArray => "vision_msgs/msg/Detection2DArray",
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
