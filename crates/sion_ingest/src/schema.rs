//! The message definitions (`ros2msg`) of the types the ingest reads, as rosbag2 stores them
//! in an MCAP schema: the type's own fields, then each type it uses, depth first, under a line
//! of 80 `=` and `MSG: package/Type`. A bag written by this package carries these texts; a bag
//! read by it must define the same fields in the same order, or its bytes would be decoded as
//! something they are not.

use std::collections::BTreeSet;

/// Each known type: its name (`package/Type`) and its fields, one per line.
const DEFINITIONS: &[(&str, &str)] = &[
    ("builtin_interfaces/Time", "int32 sec\nuint32 nanosec"),
    ("std_msgs/Header", "builtin_interfaces/Time stamp\nstring frame_id"),
    ("geometry_msgs/Point", "float64 x\nfloat64 y\nfloat64 z"),
    ("geometry_msgs/Vector3", "float64 x\nfloat64 y\nfloat64 z"),
    ("geometry_msgs/Quaternion", "float64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1"),
    ("geometry_msgs/Pose", "Point position\nQuaternion orientation"),
    ("geometry_msgs/PoseStamped", "std_msgs/Header header\nPose pose"),
    ("geometry_msgs/PoseWithCovariance", "Pose pose\nfloat64[36] covariance"),
    ("geometry_msgs/Twist", "Vector3 linear\nVector3 angular"),
    ("geometry_msgs/TwistWithCovariance", "Twist twist\nfloat64[36] covariance"),
    ("geometry_msgs/Transform", "Vector3 translation\nQuaternion rotation"),
    ("geometry_msgs/TransformStamped", "std_msgs/Header header\nstring child_frame_id\nTransform transform"),
    (
        "nav_msgs/Odometry",
        "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/PoseWithCovariance pose\n\
         geometry_msgs/TwistWithCovariance twist",
    ),
    ("tf2_msgs/TFMessage", "geometry_msgs/TransformStamped[] transforms"),
    (
        "nav_msgs/MapMetaData",
        "builtin_interfaces/Time map_load_time\nfloat32 resolution\nuint32 width\nuint32 height\n\
         geometry_msgs/Pose origin",
    ),
    ("nav_msgs/OccupancyGrid", "std_msgs/Header header\nMapMetaData info\nint8[] data"),
    (
        "sensor_msgs/Image",
        "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\n\
         uint32 step\nuint8[] data",
    ),
    ("sensor_msgs/CompressedImage", "std_msgs/Header header\nstring format\nuint8[] data"),
    (
        "sensor_msgs/RegionOfInterest",
        "uint32 x_offset\nuint32 y_offset\nuint32 height\nuint32 width\nbool do_rectify",
    ),
    (
        "sensor_msgs/CameraInfo",
        "std_msgs/Header header\nuint32 height\nuint32 width\nstring distortion_model\nfloat64[] d\n\
         float64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\nuint32 binning_y\n\
         RegionOfInterest roi",
    ),
    (
        "sensor_msgs/LaserScan",
        "std_msgs/Header header\nfloat32 angle_min\nfloat32 angle_max\nfloat32 angle_increment\n\
         float32 time_increment\nfloat32 scan_time\nfloat32 range_min\nfloat32 range_max\n\
         float32[] ranges\nfloat32[] intensities",
    ),
    ("sensor_msgs/PointField", "string name\nuint32 offset\nuint8 datatype\nuint32 count"),
    (
        "sensor_msgs/PointCloud2",
        "std_msgs/Header header\nuint32 height\nuint32 width\nPointField[] fields\nbool is_bigendian\n\
         uint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense",
    ),
    (
        "sensor_msgs/Imu",
        "std_msgs/Header header\ngeometry_msgs/Quaternion orientation\nfloat64[9] orientation_covariance\n\
         geometry_msgs/Vector3 angular_velocity\nfloat64[9] angular_velocity_covariance\n\
         geometry_msgs/Vector3 linear_acceleration\nfloat64[9] linear_acceleration_covariance",
    ),
    ("sensor_msgs/NavSatStatus", "int8 status\nuint16 service"),
    (
        "sensor_msgs/NavSatFix",
        "std_msgs/Header header\nNavSatStatus status\nfloat64 latitude\nfloat64 longitude\nfloat64 altitude\n\
         float64[9] position_covariance\nuint8 position_covariance_type",
    ),
    ("vision_msgs/ObjectHypothesis", "string class_id\nfloat64 score"),
    (
        "vision_msgs/ObjectHypothesisWithPose",
        "ObjectHypothesis hypothesis\ngeometry_msgs/PoseWithCovariance pose",
    ),
    ("vision_msgs/BoundingBox3D", "geometry_msgs/Pose center\ngeometry_msgs/Vector3 size"),
    (
        "vision_msgs/Detection3D",
        "std_msgs/Header header\nObjectHypothesisWithPose[] results\nBoundingBox3D bbox\nstring id",
    ),
    ("vision_msgs/Detection3DArray", "std_msgs/Header header\nDetection3D[] detections"),
    ("vision_msgs/Point2D", "float64 x\nfloat64 y"),
    ("vision_msgs/Pose2D", "Point2D position\nfloat64 theta"),
    ("vision_msgs/BoundingBox2D", "Pose2D center\nfloat64 size_x\nfloat64 size_y"),
    (
        "vision_msgs/Detection2D",
        "std_msgs/Header header\nObjectHypothesisWithPose[] results\nBoundingBox2D bbox\nstring id",
    ),
    ("vision_msgs/Detection2DArray", "std_msgs/Header header\nDetection2D[] detections"),
];

const PRIMITIVES: &[&str] = &[
    "bool", "byte", "char", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float32", "float64", "string", "wstring",
];

/// A schema that does not define what this build decodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    #[error("{0} is not a type this build can read")]
    Unknown(String),
    #[error(
        "the schema of {message_type} defines fields [{found}], not [{expected}] as this build reads them"
    )]
    Differs { message_type: String, found: String, expected: String },
}

/// `pkg/msg/Type` or `pkg/Type` → `pkg/Type`.
fn short(name: &str) -> String {
    match name.split('/').collect::<Vec<_>>()[..] {
        [package, "msg", ty] => format!("{package}/{ty}"),
        _ => name.to_owned(),
    }
}

fn fields_of(name: &str) -> Option<&'static str> {
    DEFINITIONS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// A field's type with its array suffix removed and its package made explicit.
fn base_type(ty: &str, package: &str) -> String {
    let base = ty.split('[').next().unwrap_or(ty);
    let base = base.split("<=").next().unwrap_or(base);
    if PRIMITIVES.contains(&base) {
        base.to_owned()
    } else if base == "Header" {
        "std_msgs/Header".to_owned()
    } else if base.contains('/') {
        short(base)
    } else {
        format!("{package}/{base}")
    }
}

/// The full `ros2msg` text of a message type (`geometry_msgs/msg/PoseStamped`), as rosbag2
/// writes it into an MCAP schema.
pub fn definition(message_type: &str) -> Result<String, SchemaError> {
    let name = short(message_type);
    let own = fields_of(&name).ok_or_else(|| SchemaError::Unknown(message_type.to_owned()))?;
    let mut text = own.to_owned();
    text.push('\n');
    let mut seen = BTreeSet::from([name.clone()]);
    let mut order = Vec::new();
    dependencies(&name, &mut seen, &mut order);
    for dep in order {
        text.push_str(&"=".repeat(80));
        text.push_str(&format!("\nMSG: {dep}\n"));
        text.push_str(fields_of(&dep).unwrap_or_default());
        text.push('\n');
    }
    Ok(text)
}

fn dependencies(name: &str, seen: &mut BTreeSet<String>, order: &mut Vec<String>) {
    let package = name.split('/').next().unwrap_or_default();
    for (ty, _) in parse_fields(fields_of(name).unwrap_or_default(), package) {
        if !PRIMITIVES.contains(&ty.as_str()) && seen.insert(ty.clone()) {
            order.push(ty.clone());
            dependencies(&ty, seen, order);
        }
    }
}

/// The (type, name) pairs of a definition's own section: comments, blank lines and constants
/// left out, types made explicit.
fn parse_fields(section: &str, package: &str) -> Vec<(String, String)> {
    section
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (ty, name) = (words.next()?, words.next()?);
            // A constant: `uint8 NAME=1` or `uint8 NAME = 1`.
            if name.contains('=') || words.next() == Some("=") {
                return None;
            }
            Some((base_type(ty, package) + array_suffix(ty), name.to_owned()))
        })
        .collect()
}

fn array_suffix(ty: &str) -> &str {
    ty.find('[').map_or("", |i| &ty[i..])
}

/// Check that a schema's text defines `message_type` with the fields this build decodes, in
/// order (comments, constants, defaults and the dependency sections may differ).
pub fn check(message_type: &str, text: &str) -> Result<(), SchemaError> {
    let name = short(message_type);
    let expected_text = fields_of(&name).ok_or_else(|| SchemaError::Unknown(message_type.to_owned()))?;
    let package = name.split('/').next().unwrap_or_default();
    let own = text.split("\n=").next().unwrap_or_default();
    let found = parse_fields(own, package);
    let expected = parse_fields(expected_text, package);
    if found == expected {
        return Ok(());
    }
    let show =
        |f: &[(String, String)]| f.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ");
    Err(SchemaError::Differs {
        message_type: message_type.to_owned(),
        found: show(&found),
        expected: show(&expected),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_lists_its_dependencies_once_depth_first() {
        let text = definition("geometry_msgs/msg/PoseStamped").expect("known");
        let sections: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("MSG: ")).collect();
        assert_eq!(
            sections,
            [
                "std_msgs/Header",
                "builtin_interfaces/Time",
                "geometry_msgs/Pose",
                "geometry_msgs/Point",
                "geometry_msgs/Quaternion"
            ]
        );
        assert!(text.starts_with("std_msgs/Header header\nPose pose\n====="));
        for ty in [
            "nav_msgs/msg/Odometry",
            "tf2_msgs/msg/TFMessage",
            "sensor_msgs/msg/CameraInfo",
            "sensor_msgs/msg/LaserScan",
            "sensor_msgs/msg/PointCloud2",
            "sensor_msgs/msg/Imu",
            "sensor_msgs/msg/NavSatFix",
            "vision_msgs/msg/Detection3DArray",
            "vision_msgs/msg/Detection2DArray",
        ] {
            check(ty, &definition(ty).expect("known")).expect("a definition checks against itself");
        }
    }

    #[test]
    fn schemas_are_compared_by_their_fields() {
        // rosbag2's text for the same type: comments, a constant, other spellings.
        let jazzy = "# A pose with a reference coordinate frame and timestamp\n\nstd_msgs/msg/Header header\n\
                     uint8 FLAG=1\ngeometry_msgs/Pose pose  # the pose\n";
        check("geometry_msgs/msg/PoseStamped", jazzy).expect("same fields");
        let other = "std_msgs/Header header\ngeometry_msgs/Point position\n";
        let err = check("geometry_msgs/msg/PoseStamped", other).expect_err("other fields");
        assert!(err.to_string().contains("geometry_msgs/Point position"), "{err}");
        assert!(matches!(check("foo_msgs/msg/Bar", ""), Err(SchemaError::Unknown(_))));
    }
}
