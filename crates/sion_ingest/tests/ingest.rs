//! Sensors to atoms: what each ROS 2 message becomes, and every kind of bad input refused by
//! reason without disturbing what came before.

use proptest::prelude::*;
use sion_ingest::cdr::Message;
use sion_ingest::msgs::*;
use sion_ingest::{Ingest, IngestConfig, Reject, Stream, Taken};
use sion_verify::atom::{Interval, Kind, LinkRel, Payload};

fn header(sec: i32, frame: &str) -> Header {
    Header { stamp: Time { sec, nanosec: 500 }, frame_id: frame.into() }
}

fn tf(parent: &str, child: &str, sec: i32, xyz: [f64; 3], rotation: Quaternion) -> TransformStamped {
    TransformStamped {
        header: header(sec, parent),
        child_frame_id: child.into(),
        transform: Transform { translation: Vector3 { x: xyz[0], y: xyz[1], z: xyz[2] }, rotation },
    }
}

/// A quaternion turning a frame about z by `yaw` radians.
fn yaw(yaw: f64) -> Quaternion {
    Quaternion { x: 0.0, y: 0.0, z: (yaw / 2.0).sin(), w: (yaw / 2.0).cos() }
}

/// The optical frame convention: z forward, x right, y down, from a body frame (x forward,
/// y left, z up).
fn optical() -> Quaternion {
    Quaternion { x: -0.5, y: 0.5, z: -0.5, w: 0.5 }
}

fn camera_info(frame: &str) -> CameraInfo {
    CameraInfo {
        header: header(0, frame),
        width: 640,
        height: 480,
        k: [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0],
        ..Default::default()
    }
}

fn image(sec: i32, frame: &str) -> Image {
    Image {
        header: header(sec, frame),
        width: 4,
        height: 2,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: 12,
        data: vec![7; 24],
    }
}

fn reasons(taken: &Taken) -> Vec<&'static str> {
    taken.rejected().map(Reject::reason).collect()
}

/// A robot at (10 m, 5 m) in the map, facing +y, its camera 1 m up looking forward.
fn robot_with_camera() -> Ingest {
    let mut ingest = Ingest::new(IngestConfig::default());
    let statics = TfMessage {
        transforms: vec![
            tf("map", "odom", 0, [0.0, 0.0, 0.0], Quaternion::default()),
            tf("base_link", "camera", 0, [0.0, 0.0, 1.0], optical()),
        ],
    };
    assert!(ingest.take(Stream::TfStatic, &statics.to_cdr()).rejected().next().is_none());
    let odom = TfMessage {
        transforms: vec![tf("odom", "base_link", 100, [10.0, 5.0, 0.0], yaw(std::f64::consts::FRAC_PI_2))],
    };
    assert!(ingest.take(Stream::Tf, &odom.to_cdr()).rejected().next().is_none());
    assert!(ingest.take(Stream::CameraInfo, &camera_info("camera").to_cdr()).rejected().next().is_none());
    ingest
}

#[test]
fn a_pose_becomes_a_point_in_millimetres_at_its_stamp() {
    let mut ingest = Ingest::new(IngestConfig::default());
    let pose = PoseStamped {
        header: header(12, "map"),
        pose: Pose { position: Vector3 { x: 1.2345, y: -0.0005, z: 0.0 }, orientation: yaw(0.0) },
    };
    let taken = ingest.take(Stream::Pose, &pose.to_cdr());
    assert_eq!(reasons(&taken), Vec::<&str>::new());
    let atom = &taken.ingested[0].atom;
    let p = atom.parts();
    assert_eq!(p.kind, Kind::Pose);
    assert_eq!(p.frame, "map");
    assert_eq!(p.subject, "robot");
    assert_eq!(p.bounds.min_mm, [1235, -1, 0]);
    assert_eq!(p.bounds.max_mm, [1235, -1, 0]);
    assert_eq!(p.valid, Interval { from_ns: 12_000_000_500, to_ns: 12_000_000_501 });
    // The rotation: (0, 0, 0, 1) in parts per 10^9.
    let expected: Vec<u8> = [0i32, 0, 0, 1_000_000_000].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(p.payload, Payload::Public(expected));
    assert_eq!(p.extractor.as_ref().unwrap().model, "geometry_msgs/msg/PoseStamped@/pose");

    // Odometry is a pose too, in its own frame; a zero quaternion keeps the position.
    let odom = Odometry {
        header: header(13, "/odom"),
        child_frame_id: "base_link".into(),
        pose: PoseWithCovariance {
            pose: Pose {
                position: Vector3 { x: 2.0, y: 0.0, z: 0.0 },
                orientation: Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 0.0 },
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let taken = ingest.take(Stream::Odometry, &odom.to_cdr());
    let p = taken.ingested[0].atom.parts();
    assert_eq!((p.frame.as_str(), p.bounds.min_mm, &p.payload), ("odom", [2000, 0, 0], &Payload::None));
}

#[test]
fn transforms_become_atoms_and_static_ones_last() {
    let mut ingest = Ingest::new(IngestConfig::default());
    let message = TfMessage {
        transforms: vec![
            tf("map", "odom", 1, [1.0, 2.0, 3.0], yaw(0.3)),
            tf("odom", "base_link", 1, [f64::NAN, 0.0, 0.0], yaw(0.0)),
            tf("odom", "", 1, [0.0, 0.0, 0.0], yaw(0.0)),
            tf("odom", "wheel", 1, [0.0, 0.0, 0.0], Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 0.0 }),
        ],
    };
    let taken = ingest.take(Stream::Tf, &message.to_cdr());
    assert_eq!(reasons(&taken), ["nan", "no_frame", "out_of_range"]);
    assert_eq!(taken.ingested.len(), 1);
    let p = taken.ingested[0].atom.parts();
    assert_eq!((p.kind, p.frame.as_str(), p.subject.as_str()), (Kind::Transform, "map", "odom"));
    assert_eq!(p.bounds.min_mm, [1000, 2000, 3000]);
    assert_eq!(p.valid.to_ns - p.valid.from_ns, 1);

    let statics = TfMessage { transforms: vec![tf("base_link", "laser", 0, [0.1, 0.0, 0.2], yaw(0.0))] };
    let taken = ingest.take(Stream::TfStatic, &statics.to_cdr());
    assert_eq!(taken.ingested[0].atom.parts().valid.to_ns, Interval::OPEN_END_NS);

    let stats = &ingest.stats()[&Stream::Tf];
    assert_eq!((stats.messages, stats.atoms), (1, 1));
    assert_eq!(stats.rejected.values().sum::<u64>(), 3);
}

#[test]
fn a_camera_frame_is_placed_in_the_fixed_frame() {
    let mut ingest = robot_with_camera();
    let frame = image(100, "camera");
    let bytes = frame.to_cdr();
    let taken = ingest.take(Stream::Image, &bytes);
    assert_eq!(reasons(&taken), Vec::<&str>::new());
    let ingested = &taken.ingested[0];
    let p = ingested.atom.parts();
    assert_eq!((p.kind, p.frame.as_str()), (Kind::Observation, "map"));
    // The robot at (10, 5) faces +y, so the camera looks along +y from 1 m up: the frustum
    // runs from y = 5 m to y = 15 m, ±6.4 m to the sides at the far end, 1 ± 4.8 m in height.
    assert_eq!(p.bounds.min_mm, [3600, 5000, -3800]);
    assert_eq!(p.bounds.max_mm, [16400, 15000, 5800]);
    // The payload commits to the message as received, which is handed back to keep.
    let Payload::Blob(blob) = &p.payload else { panic!("not a blob: {:?}", p.payload) };
    assert_eq!(ingested.blob.as_deref(), Some(bytes.as_slice()));
    assert_eq!(blob.hash, *blake3::hash(&bytes).as_bytes());
    assert_eq!(blob.media_type, "application/x-ros2-cdr; type=sensor_msgs/msg/Image");

    let jpeg = CompressedImage {
        header: header(100, "camera"),
        format: "jpeg".into(),
        data: b"\xff\xd8\xff\xe0rest".to_vec(),
    };
    let taken = ingest.take(Stream::CompressedImage, &jpeg.to_cdr());
    assert_eq!(taken.ingested[0].atom.parts().bounds, p.bounds);
}

#[test]
fn every_bad_camera_input_is_refused_by_reason() {
    let mut ingest = robot_with_camera();
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("malformed_message", image(100, "camera").to_cdr()[..30].to_vec()));
    cases.push(("no_frame", image(100, "").to_cdr()));
    let mut unknown = image(100, "camera");
    unknown.encoding = "rgb9".into();
    cases.push(("unknown_encoding", unknown.to_cdr()));
    let mut short = image(100, "camera");
    short.data.pop();
    cases.push(("malformed_image", short.to_cdr()));
    let mut narrow = image(100, "camera");
    narrow.step = 11;
    cases.push(("malformed_image", narrow.to_cdr()));
    let mut huge = image(100, "camera");
    (huge.width, huge.height, huge.step, huge.data) = (8192, 1400, 3 * 8192, vec![0; 3 * 8192 * 1400]);
    cases.push(("oversized", huge.to_cdr()));
    let mut negative = image(100, "camera");
    negative.header.stamp.sec = -1;
    cases.push(("out_of_range", negative.to_cdr()));
    for (reason, bytes) in &cases {
        let taken = ingest.take(Stream::Image, bytes);
        assert_eq!(reasons(&taken), [*reason], "expected {reason}");
        assert!(taken.ingested.is_empty());
    }
    for (format, data, reason) in [
        ("tiff", b"II*\0".to_vec(), "unknown_encoding"),
        ("png", b"\xff\xd8\xff".to_vec(), "malformed_image"),
        ("jpeg", Vec::new(), "malformed_image"),
    ] {
        let message = CompressedImage { header: header(100, "camera"), format: format.into(), data };
        assert_eq!(reasons(&ingest.take(Stream::CompressedImage, &message.to_cdr())), [reason]);
    }
    // An uncalibrated camera_info is refused and leaves the old calibration in place.
    let mut uncalibrated = camera_info("camera");
    uncalibrated.k = [0.0; 9];
    assert_eq!(reasons(&ingest.take(Stream::CameraInfo, &uncalibrated.to_cdr())), ["bad_camera_info"]);
    let mut nan = camera_info("camera");
    nan.k[2] = f64::NAN;
    assert_eq!(reasons(&ingest.take(Stream::CameraInfo, &nan.to_cdr())), ["bad_camera_info"]);
    assert_eq!(ingest.take(Stream::Image, &image(100, "camera").to_cdr()).ingested.len(), 1);

    let stats = &ingest.stats()[&Stream::Image];
    assert_eq!(stats.messages, cases.len() as u64 + 1);
    assert_eq!(stats.atoms, 1);
    assert_eq!(stats.rejected["malformed_image"], 2);
}

#[test]
fn frames_wait_for_their_transform_and_calibration_then_give_up() {
    let mut ingest = robot_with_camera();
    // A frame stamped after the last odometry waits; the odometry for its stamp lets it through.
    let early = ingest.take(Stream::Image, &image(101, "camera").to_cdr());
    assert!(early.finished.is_empty() && early.ingested.is_empty());
    assert_eq!(ingest.stats()[&Stream::Image].held, 1);
    let odom = TfMessage { transforms: vec![tf("odom", "base_link", 101, [10.0, 6.0, 0.0], yaw(0.0))] };
    let later = ingest.take(Stream::Tf, &odom.to_cdr());
    assert_eq!(later.ingested.len(), 2, "the transform and the frame");
    let frame = later.finished.iter().find(|f| f.stream == Stream::Image).expect("the frame is finished");
    assert_eq!((frame.message, frame.atoms), (early.message, 1));
    assert_eq!(ingest.stats()[&Stream::Image].held, 0);

    // A frame from a camera with no calibration, and one from a calibrated camera no transform
    // reaches, wait; both are given up once a message stamped half a second later arrives.
    ingest.take(Stream::Image, &image(101, "thermal").to_cdr());
    assert!(ingest.take(Stream::Image, &image(101, "stereo").to_cdr()).finished.is_empty());
    assert!(
        ingest
            .take(Stream::CameraInfo, &camera_info("stereo").to_cdr())
            .finished
            .iter()
            .all(|f| f.rejected.is_empty())
    );
    let pose = |sec| PoseStamped { header: header(sec, "map"), ..Default::default() };
    let taken = ingest.take(Stream::Pose, &pose(102).to_cdr());
    let reasons: Vec<_> = taken
        .finished
        .iter()
        .filter(|f| f.stream == Stream::Image)
        .flat_map(|f| f.rejected.iter().map(Reject::reason))
        .collect();
    assert_eq!(reasons, ["no_camera_info", "unknown_frame"]);
    assert_eq!(ingest.stats()[&Stream::Image].held, 0);

    // Whatever still waits at the end of a stream is refused by flush.
    ingest.take(Stream::Image, &image(103, "camera").to_cdr());
    assert_eq!(ingest.flush().rejected().map(Reject::reason).collect::<Vec<_>>(), ["missing_transform"]);
}

#[test]
fn map_tiles_bound_their_grid_and_supersede_the_last() {
    let mut ingest = Ingest::new(IngestConfig::default());
    let grid = |sec, data: Vec<i8>| OccupancyGrid {
        header: header(sec, "map"),
        info: MapMetaData {
            resolution: 0.05,
            width: 40,
            height: 20,
            origin: Pose { position: Vector3 { x: -1.0, y: 2.0, z: 0.0 }, orientation: yaw(0.0) },
            ..Default::default()
        },
        data,
    };
    let first = ingest.take(Stream::Map, &grid(1, vec![0; 800]).to_cdr());
    let p = first.ingested[0].atom.parts();
    assert_eq!((p.kind, p.subject.as_str()), (Kind::MapTile, "/map"));
    assert_eq!((p.bounds.min_mm, p.bounds.max_mm), ([-1000, 2000, 0], [1000, 3000, 0]));
    assert_eq!(p.valid.to_ns, Interval::OPEN_END_NS);
    assert!(p.links.is_empty());

    let second = ingest.take(Stream::Map, &grid(2, vec![100; 800]).to_cdr());
    let links = &second.ingested[0].atom.parts().links;
    assert_eq!((links[0].rel, links[0].target), (LinkRel::Supersedes, first.ingested[0].atom.id()));

    let mut bad = grid(3, vec![0; 799]);
    assert_eq!(reasons(&ingest.take(Stream::Map, &bad.to_cdr())), ["bad_map"]);
    bad.data = vec![101; 800];
    assert_eq!(reasons(&ingest.take(Stream::Map, &bad.to_cdr())), ["bad_map"]);
    bad.data = vec![0; 800];
    bad.info.resolution = f32::NAN;
    assert_eq!(reasons(&ingest.take(Stream::Map, &bad.to_cdr())), ["nan"]);
    bad.info.resolution = -0.05;
    assert_eq!(reasons(&ingest.take(Stream::Map, &bad.to_cdr())), ["out_of_range"]);
    bad.info.resolution = 0.05;
    bad.info.origin.position.x = f64::INFINITY;
    assert_eq!(reasons(&ingest.take(Stream::Map, &bad.to_cdr())), ["out_of_range"]);
}

#[test]
fn values_an_atom_cannot_hold_are_refused() {
    let mut ingest = Ingest::new(IngestConfig::default());
    let pose = |x: f64, q: Quaternion| PoseStamped {
        header: header(1, "map"),
        pose: Pose { position: Vector3 { x, y: 0.0, z: 0.0 }, orientation: q },
    };
    for (x, q, reason) in [
        (f64::NAN, yaw(0.0), "nan"),
        (f64::INFINITY, yaw(0.0), "infinite"),
        (f64::NEG_INFINITY, yaw(0.0), "infinite"),
        (2e12, yaw(0.0), "out_of_range"),
        (0.0, Quaternion { x: f64::NAN, y: 0.0, z: 0.0, w: 1.0 }, "nan"),
    ] {
        assert_eq!(reasons(&ingest.take(Stream::Pose, &pose(x, q).to_cdr())), [reason]);
    }
    let mut long_frame = pose(0.0, yaw(0.0));
    long_frame.header.frame_id = "f".repeat(1000);
    assert_eq!(reasons(&ingest.take(Stream::Pose, &long_frame.to_cdr())), ["invalid_atom"]);
    let mut bad_nanos = pose(0.0, yaw(0.0));
    bad_nanos.header.stamp.nanosec = 1_000_000_000;
    assert_eq!(reasons(&ingest.take(Stream::Pose, &bad_nanos.to_cdr())), ["out_of_range"]);
    // Between the refusals, good poses still go through.
    assert_eq!(ingest.take(Stream::Pose, &pose(1.0, yaw(0.0)).to_cdr()).ingested.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Whatever arrives on a topic, the ingest answers with atoms or reasons, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(stream in 0usize..8, bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut ingest = robot_with_camera();
        let mut message = vec![0, 1, 0, 0];
        message.extend(bytes);
        let taken = ingest.take(Stream::ALL[stream], &message);
        prop_assert!(taken.ingested.len() + taken.rejected().count() <= 300);
    }

    /// Mutating one byte of a good message gives atoms or reasons, never a panic.
    #[test]
    fn mutated_messages_never_panic(at in any::<prop::sample::Index>(), byte in any::<u8>(), which in 0usize..4) {
        let mut ingest = robot_with_camera();
        let (stream, mut message) = match which {
            0 => (Stream::Image, image(100, "camera").to_cdr()),
            1 => (Stream::CameraInfo, camera_info("camera").to_cdr()),
            2 => (Stream::Tf, TfMessage { transforms: vec![tf("odom", "base_link", 100, [1.0, 2.0, 3.0], yaw(1.0))] }.to_cdr()),
            _ => (Stream::Odometry, Odometry { header: header(5, "odom"), ..Default::default() }.to_cdr()),
        };
        let i = at.index(message.len());
        message[i] = byte;
        let _ = ingest.take(stream, &message);
    }
}
