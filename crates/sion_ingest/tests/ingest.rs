//! Sensors to atoms: what each ROS 2 message becomes, and every kind of bad input refused by
//! reason without disturbing what came before.

use proptest::prelude::*;
use sion_ingest::cdr::Message;
use sion_ingest::msgs::*;
use sion_ingest::{Ingest, IngestConfig, Reject, Source, Stream, Taken};
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
fn a_cameras_calibration_is_remembered_when_first_seen_and_when_it_changes() {
    let mut ingest = Ingest::new(IngestConfig::default());
    let mut info = camera_info("front_optical");
    info.header.stamp.sec = 7;
    let first = ingest.take(Stream::CameraInfo, &info.to_cdr());
    let atom = only(&first);
    let p = atom.parts();
    assert_eq!(
        (p.kind, p.frame.as_str(), p.subject.as_str()),
        (Kind::Observation, "front_optical", "front_optical")
    );
    assert_eq!(p.bounds.min_mm, [0; 3]);
    assert_eq!(p.valid, Interval { from_ns: 7_000_000_500, to_ns: Interval::OPEN_END_NS });
    assert_eq!(
        p.extractor.as_ref().map(|e| e.model.as_str()),
        Some("sensor_msgs/msg/CameraInfo@/camera/camera_info")
    );
    let calibration = sion_ingest::calibration_of(atom).expect("a calibration");
    assert_eq!(
        (calibration.width, calibration.height, calibration.k),
        (640, 480, [500.0, 500.0, 320.0, 240.0])
    );
    // The same calibration at the camera's rate gives nothing more; a new one does.
    info.header.stamp.sec = 8;
    assert!(ingest.take(Stream::CameraInfo, &info.to_cdr()).ingested.is_empty());
    info.k[0] = 510.25;
    let changed = ingest.take(Stream::CameraInfo, &info.to_cdr());
    assert_eq!(sion_ingest::calibration_of(only(&changed)).map(|c| c.k[0]), Some(510.25));
    // An image is not a calibration.
    let mut robot = robot_with_camera();
    let frame = robot.take(Stream::Image, &image(100, "camera").to_cdr());
    assert_eq!(sion_ingest::calibration_of(only(&frame)), None);
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

/// `message` with its stamp moved `ns` past the whole second it was made at.
fn at_ns<T>(mut message: T, ns: u32, header: impl Fn(&mut T) -> &mut Header) -> T {
    header(&mut message).stamp.nanosec = ns;
    message
}

#[test]
fn a_frame_or_scan_that_overtakes_its_transform_makes_the_atom_it_would_in_order() {
    // The node takes each topic in its own order, so under load a frame can come before the
    // transform sample after it; a replay of the bag takes them in the bag's order. Both must
    // make the same atom: nothing is extrapolated while a sample at or after the stamp may yet
    // come (it was: the sample 80 ms before stood in, and one atom of 1,865 differed).
    let moved = TfMessage {
        transforms: vec![at_ns(tf("odom", "base_link", 100, [11.0, 5.5, 0.0], yaw(1.2)), 200_000_000, |t| {
            &mut t.header
        })],
    };
    let frame = at_ns(image(100, "camera"), 80_000_000, |m| &mut m.header);
    let mut sweep = at_ns(scan(100, vec![1.0, 2.0, 3.0]), 50_000_000, |m| &mut m.header);
    sweep.time_increment = 0.02; // its last ray 40 ms after the first, still before the sample
    let atoms = |tf_first: bool| {
        let mut ingest = robot_with_sensors();
        let mut atoms = Vec::new();
        if tf_first {
            atoms.extend(ingest.take(Stream::Tf, &moved.to_cdr()).ingested);
        }
        for (stream, message) in [(Stream::Image, frame.to_cdr()), (Stream::LaserScan, sweep.to_cdr())] {
            let taken = ingest.take(stream, &message);
            assert_eq!(taken.ingested.is_empty(), !tf_first, "{taken:?}");
            atoms.extend(taken.ingested);
        }
        if !tf_first {
            atoms.extend(ingest.take(Stream::Tf, &moved.to_cdr()).ingested);
        }
        assert!(ingest.flush().finished.is_empty());
        let mut ids: Vec<_> = atoms.iter().map(|i| i.atom.id()).collect();
        ids.sort();
        ids
    };
    let (in_order, overtaken) = (atoms(true), atoms(false));
    assert_eq!(in_order.len(), 3, "the transform, the frame and the scan");
    assert_eq!(in_order, overtaken);
}

#[test]
fn a_frame_past_the_last_transform_takes_the_nearest_sample_once_none_later_came() {
    // No sample after 100 s comes: the frame at 100.05 s waits, and when it is given up (here
    // at the end of the stream; live, half a second of stamps later) the sample 50 ms before
    // stands in, as the 100 ms tolerance allows; 150 ms is too far.
    let mut ingest = robot_with_camera();
    let near =
        ingest.take(Stream::Image, &at_ns(image(100, "camera"), 50_000_000, |m| &mut m.header).to_cdr());
    assert!(near.finished.is_empty(), "{near:?}");
    let far =
        ingest.take(Stream::Image, &at_ns(image(100, "camera"), 150_000_000, |m| &mut m.header).to_cdr());
    assert!(far.finished.is_empty(), "{far:?}");
    let flushed = ingest.flush();
    assert_eq!(flushed.ingested.len(), 1, "{flushed:?}");
    assert_eq!(
        flushed.finished.iter().map(|f| (f.message, f.atoms)).collect::<Vec<_>>(),
        [(near.message, 1), (far.message, 0)]
    );
    assert_eq!(reasons(&flushed), ["missing_transform"]);
    // A frame at the very stamp of the last sample needs no later one.
    let exact = ingest.take(Stream::Image, &image(100, "camera").to_cdr());
    assert_eq!(exact.ingested.len(), 1, "{exact:?}");
    // Live, a held message has its last try once a message stamped `hold_ns` (0.5 s) past it
    // comes.
    let near =
        ingest.take(Stream::Image, &at_ns(image(100, "camera"), 90_000_000, |m| &mut m.header).to_cdr());
    assert!(near.finished.is_empty(), "{near:?}");
    let pose =
        |nanosec| PoseStamped { header: at_ns(header(100, "map"), nanosec, |h| h), ..Default::default() };
    assert!(
        ingest
            .take(Stream::Pose, &pose(500_000_000).to_cdr())
            .finished
            .iter()
            .all(|f| f.stream == Stream::Pose)
    );
    let late = ingest.take(Stream::Pose, &pose(600_000_000).to_cdr());
    let frame = late.finished.iter().find(|f| f.stream == Stream::Image).expect("the frame's last try");
    assert_eq!((frame.message, frame.atoms), (near.message, 1));
}

#[test]
fn a_scan_waits_for_the_transform_after_its_last_ray_and_given_up_keeps_its_first_rays_box() {
    let mut sweep = scan(100, vec![1.0, f32::INFINITY, f32::NAN]);
    sweep.time_increment = 0.05; // the last ray 0.1 s after the first, past the last sample
    let moved = TfMessage {
        transforms: vec![at_ns(
            tf("odom", "base_link", 100, [12.0, 5.0, 0.0], yaw(std::f64::consts::FRAC_PI_2)),
            200_000_500,
            |t| &mut t.header,
        )],
    };
    // The sample after the last ray comes: the box holds the returns from both ends.
    let mut ingest = robot_with_sensors();
    let early = ingest.take(Stream::LaserScan, &sweep.to_cdr());
    assert!(early.finished.is_empty(), "{early:?}");
    let later = ingest.take(Stream::Tf, &moved.to_cdr());
    let both = later.ingested.iter().find(|i| i.atom.parts().kind == Kind::Coverage).expect("the scan");
    assert_eq!(both.atom.parts().bounds.min_mm, [10_000, 5_000, 200]);
    assert_eq!(both.atom.parts().bounds.max_mm, [12_000, 10_000, 200]);
    // None comes: given up, the scan keeps the box of its first ray's transform.
    let mut ingest = robot_with_sensors();
    assert!(ingest.take(Stream::LaserScan, &sweep.to_cdr()).finished.is_empty());
    let flushed = ingest.flush();
    assert_eq!(reasons(&flushed), Vec::<&str>::new());
    let first = &flushed.ingested[0].atom;
    assert_eq!(first.parts().bounds.min_mm, [10_000, 5_000, 200]);
    assert_eq!(first.parts().bounds.max_mm, [11_000, 10_000, 200]);
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
    fn arbitrary_bytes_never_panic(stream in 0usize..Stream::ALL.len(), bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut ingest = robot_with_camera();
        let mut message = vec![0, 1, 0, 0];
        message.extend(bytes);
        let taken = ingest.take(Stream::ALL[stream], &message);
        prop_assert!(taken.ingested.len() + taken.rejected().count() <= 300);
    }

    /// Mutating one byte of a good message gives atoms or reasons, never a panic.
    #[test]
    fn mutated_messages_never_panic(at in any::<prop::sample::Index>(), byte in any::<u8>(), which in 0usize..10) {
        let mut ingest = robot_with_camera();
        let (stream, mut message) = match which {
            4 => (Stream::LaserScan, scan(100, vec![1.0, f32::INFINITY]).to_cdr()),
            5 => (Stream::PointCloud2, cloud(100, &[[1.0, 0.0, 0.0]]).to_cdr()),
            6 => (Stream::Imu, Imu { header: header(100, "base_link"), ..Default::default() }.to_cdr()),
            7 => (Stream::NavSatFix, NavSatFix { header: header(100, "gps"), ..Default::default() }.to_cdr()),
            8 => (Stream::Detections3D, detections_3d(100).to_cdr()),
            9 => (Stream::Detections2D, detections_2d(100).to_cdr()),
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

/// A robot with a camera (as above), a scanner 0.2 m above its base, and an IMU at its base.
fn robot_with_sensors() -> Ingest {
    let mut ingest = robot_with_camera();
    let statics = TfMessage {
        transforms: vec![
            tf("base_link", "laser", 0, [0.0, 0.0, 0.2], Quaternion::default()),
            tf("base_link", "imu", 0, [0.0, 0.0, 0.0], Quaternion::default()),
        ],
    };
    assert!(ingest.take(Stream::TfStatic, &statics.to_cdr()).rejected().next().is_none());
    ingest
}

/// Rays at -90°, 0° and 90° in the scanner's frame, out to 5 m.
fn scan(sec: i32, ranges: Vec<f32>) -> LaserScan {
    LaserScan {
        header: header(sec, "laser"),
        angle_min: -std::f32::consts::FRAC_PI_2,
        angle_max: std::f32::consts::FRAC_PI_2,
        angle_increment: std::f32::consts::FRAC_PI_2,
        range_min: 0.1,
        range_max: 5.0,
        ranges,
        ..Default::default()
    }
}

/// A cloud of float32 x, y, z and an intensity, in the scanner's frame.
fn cloud(sec: i32, points: &[[f32; 3]]) -> PointCloud2 {
    let field = |name: &str, offset| PointField {
        name: name.into(),
        offset,
        datatype: PointField::FLOAT32,
        count: 1,
    };
    let mut data = Vec::new();
    for p in points {
        for x in p.iter().chain(&[0.5f32]) {
            data.extend_from_slice(&x.to_le_bytes());
        }
    }
    PointCloud2 {
        header: header(sec, "laser"),
        height: 1,
        width: points.len() as u32,
        fields: vec![field("x", 0), field("y", 4), field("z", 8), field("intensity", 12)],
        is_bigendian: false,
        point_step: 16,
        row_step: 16 * points.len() as u32,
        data,
        is_dense: false,
    }
}

fn hypothesis(class: &str, score: f64) -> ObjectHypothesisWithPose {
    ObjectHypothesisWithPose {
        hypothesis: ObjectHypothesis { class_id: class.into(), score },
        ..Default::default()
    }
}

/// A person 2 m ahead of the robot, 1 × 1 × 2 m, tracked as 17.
fn detections_3d(sec: i32) -> Detection3DArray {
    let person = Detection3D {
        header: Header::default(),
        results: vec![hypothesis("chair", 0.2), hypothesis("person", 0.9)],
        bbox: BoundingBox3D {
            center: Pose { position: Point { x: 2.0, y: 0.0, z: 0.5 }, orientation: Quaternion::default() },
            size: Vector3 { x: 1.0, y: 1.0, z: 2.0 },
        },
        id: "17".into(),
    };
    Detection3DArray { header: header(sec, "base_link"), detections: vec![person] }
}

/// A pallet seen at the centre of the camera's image, as a box of no size (a ray).
fn detections_2d(sec: i32) -> Detection2DArray {
    let pallet = Detection2D {
        header: Header::default(),
        results: vec![hypothesis("pallet", 0.75)],
        bbox: BoundingBox2D {
            center: Pose2D { position: Point2D { x: 320.0, y: 240.0 }, theta: 0.0 },
            size_x: 0.0,
            size_y: 0.0,
        },
        id: String::new(),
    };
    Detection2DArray { header: header(sec, "camera"), detections: vec![pallet] }
}

fn only(taken: &Taken) -> &sion_verify::atom::Atom {
    assert_eq!(reasons(taken), Vec::<&str>::new());
    assert_eq!(taken.ingested.len(), 1, "{taken:?}");
    &taken.ingested[0].atom
}

#[test]
fn several_cameras_each_under_its_own_topic() {
    let config = IngestConfig {
        sources: vec![
            Source::new(Stream::Image, "/front/image_raw"),
            Source::new(Stream::Image, "/rear/image_raw"),
            Source::new(Stream::CameraInfo, "/front/camera_info"),
            Source::new(Stream::CameraInfo, "/rear/camera_info"),
            Source::new(Stream::Tf, "/tf"),
            Source::new(Stream::TfStatic, "/tf_static"),
        ],
        ..IngestConfig::default()
    };
    let mut ingest = Ingest::new(config);
    // The rear camera looks back: turned half a turn about the base's z before the optical turn.
    let back = Quaternion { x: -0.5, y: -0.5, z: 0.5, w: 0.5 };
    let statics = TfMessage {
        transforms: vec![
            tf("map", "base_link", 0, [0.0, 0.0, 0.0], Quaternion::default()),
            tf("base_link", "front", 0, [0.0, 0.0, 1.0], optical()),
            tf("base_link", "rear", 0, [0.0, 0.0, 1.0], back),
        ],
    };
    assert!(ingest.take_from(5, &statics.to_cdr(), 0).rejected().next().is_none());
    assert!(ingest.take_from(2, &camera_info("front").to_cdr(), 0).rejected().next().is_none());
    assert!(ingest.take_from(3, &camera_info("rear").to_cdr(), 0).rejected().next().is_none());
    let front = only(&ingest.take_from(0, &image(100, "front").to_cdr(), 0)).clone();
    let rear = only(&ingest.take_from(1, &image(100, "rear").to_cdr(), 0)).clone();
    let model = |a: &sion_verify::atom::Atom| a.parts().extractor.as_ref().map(|e| e.model.clone());
    assert_eq!(model(&front).as_deref(), Some("sensor_msgs/msg/Image@/front/image_raw"));
    assert_eq!(model(&rear).as_deref(), Some("sensor_msgs/msg/Image@/rear/image_raw"));
    // Forward out to 10 m, and backward.
    assert_eq!((front.parts().bounds.min_mm[0], front.parts().bounds.max_mm[0]), (0, 10_000));
    assert_eq!((rear.parts().bounds.min_mm[0], rear.parts().bounds.max_mm[0]), (-10_000, 0));
    assert_eq!(ingest.sources().len(), 6);
    // A topic named again is the same source.
    assert_eq!(ingest.source(Source::new(Stream::Image, "/rear/image_raw")), 1);
}

#[test]
fn a_laser_scan_covers_the_scanner_and_its_returns_in_the_fixed_frame() {
    let mut ingest = robot_with_sensors();
    // -90°: 1 m; 0°: nothing within range (+∞, covered to 5 m); 90°: NaN, left out.
    let message = scan(100, vec![1.0, f32::INFINITY, f32::NAN]).to_cdr();
    let taken = ingest.take(Stream::LaserScan, &message);
    let atom = only(&taken);
    let p = atom.parts();
    assert_eq!(p.kind, Kind::Coverage);
    assert_eq!(p.frame, "map");
    assert_eq!(p.subject, "laser");
    // The robot at (10, 5) faces +y: the scanner's x is the map's +y, its y the map's -x.
    assert_eq!(p.bounds.min_mm, [10_000, 5_000, 200]);
    assert_eq!(p.bounds.max_mm, [11_000, 10_000, 200]);
    assert_eq!(p.valid, Interval { from_ns: 100_000_000_500, to_ns: 100_000_000_501 });
    match &p.payload {
        Payload::Blob(b) => {
            assert_eq!(b.media_type, "application/x-ros2-cdr; type=sensor_msgs/msg/LaserScan")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(taken.ingested[0].blob.as_deref(), Some(&message[..]));
    // Bad scans, by reason.
    let mut bad = scan(100, vec![1.0]);
    bad.range_max = 0.0;
    assert_eq!(reasons(&ingest.take(Stream::LaserScan, &bad.to_cdr())), ["bad_scan"]);
    let mut bad = scan(100, vec![1.0, 2.0]);
    bad.angle_increment = f32::NAN;
    assert_eq!(reasons(&ingest.take(Stream::LaserScan, &bad.to_cdr())), ["nan"]);
}

#[test]
fn a_sealed_memorys_retention_keeps_one_scan_per_period_per_scanner() {
    let mut ingest = robot_with_sensors();
    // The robot stands still from 100 s to 101 s: its transform is known between them.
    let still = TfMessage {
        transforms: vec![tf("odom", "base_link", 101, [10.0, 5.0, 0.0], yaw(std::f64::consts::FRAC_PI_2))],
    };
    assert!(ingest.take(Stream::Tf, &still.to_cdr()).rejected().next().is_none());
    // 50 ms here, a second in the node's defaults.
    ingest.set_keep_frame_every_ns(50_000_000);
    let at = |sec: i32, nanosec: u32| {
        let mut m = scan(sec, vec![1.0]);
        m.header.stamp.nanosec = nanosec;
        m.to_cdr()
    };
    let kept: Vec<bool> = [(100, 0), (100, 20_000_000), (100, 40_000_000), (100, 60_000_000)]
        .into_iter()
        .map(|(s, n)| {
            let taken = ingest.take(Stream::LaserScan, &at(s, n));
            let i = &taken.ingested[0];
            assert_eq!(matches!(i.atom.parts().payload, Payload::Blob(_)), i.blob.is_some());
            i.blob.is_some()
        })
        .collect();
    // Every scan is remembered as what it covered; one per period keeps its points.
    assert_eq!(kept, [true, false, false, true]);
}

#[test]
fn a_scan_taken_while_the_robot_moves_holds_its_returns_from_both_ends() {
    let mut ingest = robot_with_sensors();
    // A tenth of a second later the robot is a metre further along x (the sample a microsecond
    // past the last ray: 0.05 s as an f32 makes the scan take a nanosecond over 0.1 s, and the
    // transform at its end is not extrapolated).
    let mut moved = tf("odom", "base_link", 100, [11.0, 5.0, 0.0], yaw(std::f64::consts::FRAC_PI_2));
    moved.header.stamp.nanosec = 100_001_500;
    assert!(
        ingest.take(Stream::Tf, &TfMessage { transforms: vec![moved] }.to_cdr()).rejected().next().is_none()
    );
    let mut m = scan(100, vec![1.0, f32::INFINITY, f32::NAN]);
    m.time_increment = 0.05; // three rays: the last 0.1 s after the first
    let atom = only(&ingest.take(Stream::LaserScan, &m.to_cdr())).clone();
    assert_eq!(atom.parts().bounds.min_mm, [10_000, 5_000, 200]);
    assert_eq!(atom.parts().bounds.max_mm, [12_000, 10_000, 200]);
}

#[test]
fn a_scan_before_its_transform_waits_for_it() {
    let mut ingest = robot_with_sensors();
    let early = ingest.take(Stream::LaserScan, &scan(101, vec![1.0, 1.0, 1.0]).to_cdr());
    assert!(early.finished.is_empty() && early.ingested.is_empty(), "{early:?}");
    assert_eq!(ingest.stats()[&Stream::LaserScan].held, 1);
    let odom = TfMessage { transforms: vec![tf("odom", "base_link", 101, [10.0, 5.0, 0.0], yaw(0.0))] };
    let later = ingest.take(Stream::Tf, &odom.to_cdr());
    let finished =
        later.finished.iter().find(|f| f.stream == Stream::LaserScan).expect("the scan is finished");
    assert_eq!((finished.atoms, finished.rejected.len()), (1, 0));
    assert_eq!(ingest.stats()[&Stream::LaserScan].held, 0);
}

#[test]
fn a_point_cloud_covers_its_finite_points() {
    let mut ingest = robot_with_sensors();
    let points = [[1.0, 0.0, 0.0], [f32::NAN, 9.0, 9.0], [2.0, 1.0, -0.5]];
    let atom = only(&ingest.take(Stream::PointCloud2, &cloud(100, &points).to_cdr())).clone();
    let p = atom.parts();
    assert_eq!(p.kind, Kind::Coverage);
    // Scanner bounds x 0..2, y 0..1, z -0.5..0 (the scanner included), turned to face +y.
    assert_eq!(p.bounds.min_mm, [9_000, 5_000, -300]);
    assert_eq!(p.bounds.max_mm, [10_000, 7_000, 200]);
    // Big-endian clouds read too.
    let mut big = cloud(100, &[[1.0, 0.0, 0.0]]);
    big.is_bigendian = true;
    big.data = [1.0f32, 0.0, 0.0, 0.5].iter().flat_map(|x| x.to_be_bytes()).collect();
    assert_eq!(
        only(&ingest.take(Stream::PointCloud2, &big.to_cdr())).parts().bounds.max_mm,
        [10_000, 6_000, 200]
    );
    let mut bad = cloud(100, &points);
    bad.row_step = 10;
    assert_eq!(reasons(&ingest.take(Stream::PointCloud2, &bad.to_cdr())), ["bad_cloud"]);
    let mut bad = cloud(100, &points);
    bad.data.truncate(20);
    assert_eq!(reasons(&ingest.take(Stream::PointCloud2, &bad.to_cdr())), ["bad_cloud"]);
    let mut bad = cloud(100, &points);
    bad.fields[2].datatype = 2;
    assert_eq!(reasons(&ingest.take(Stream::PointCloud2, &bad.to_cdr())), ["bad_cloud"]);
    let mut bad = cloud(100, &points);
    bad.fields[1].offset = 14;
    assert_eq!(reasons(&ingest.take(Stream::PointCloud2, &bad.to_cdr())), ["bad_cloud"]);
}

#[test]
fn an_imu_reading_is_an_observation_at_the_imu_with_its_reading_in_integers() {
    let mut ingest = robot_with_sensors();
    let mut imu = Imu { header: header(100, "imu"), orientation: yaw(0.0), ..Default::default() };
    imu.angular_velocity.z = 0.25;
    imu.linear_acceleration = Vector3 { x: 0.0, y: 0.0, z: 9.81 };
    let atom = only(&ingest.take(Stream::Imu, &imu.to_cdr())).clone();
    let p = atom.parts();
    assert_eq!((p.kind, p.subject.as_str(), p.frame.as_str()), (Kind::Observation, "imu", "map"));
    assert_eq!(p.bounds.min_mm, [10_000, 5_000, 0]);
    let Payload::Public(bytes) = &p.payload else { panic!("{:?}", p.payload) };
    assert_eq!(bytes.len(), 64);
    let word = |i: usize| i64::from_le_bytes(bytes[16 + 8 * i..24 + 8 * i].try_into().unwrap());
    assert_eq!((word(2), word(5)), (250_000, 9_810_000));
    // An orientation the IMU does not give (covariance[0] = -1) is zeros, not a guess.
    imu.orientation_covariance[0] = -1.0;
    imu.linear_acceleration_covariance[0] = -1.0;
    let atom = only(&ingest.take(Stream::Imu, &imu.to_cdr())).clone();
    let Payload::Public(bytes) = &atom.parts().payload else { panic!() };
    assert_eq!(&bytes[..16], &[0; 16]);
    assert_eq!(i64::from_le_bytes(bytes[40..48].try_into().unwrap()), i64::MIN);
    imu.angular_velocity.x = f64::NAN;
    assert_eq!(reasons(&ingest.take(Stream::Imu, &imu.to_cdr())), ["nan"]);
}

#[test]
fn a_gnss_fix_is_an_observation_in_the_earth_frame() {
    let mut ingest = robot_with_sensors();
    let mut fix = NavSatFix { header: header(100, "gps"), altitude: 10.0, ..Default::default() };
    fix.position_covariance = [4.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.25];
    fix.position_covariance_type = 2;
    let atom = only(&ingest.take(Stream::NavSatFix, &fix.to_cdr())).clone();
    let p = atom.parts();
    assert_eq!((p.kind, p.subject.as_str(), p.frame.as_str()), (Kind::Observation, "gps", "earth"));
    // On the equator at the prime meridian, 10 m up: x is the equatorial radius + 10 m; σ 2 m.
    assert_eq!(p.bounds.min_mm, [6_378_145_000, -2_000, -2_000]);
    assert_eq!(p.bounds.max_mm, [6_378_149_000, 2_000, 2_000]);
    let Payload::Public(bytes) = &p.payload else { panic!() };
    assert_eq!(bytes.len(), 27);
    assert_eq!(i64::from_le_bytes(bytes[16..24].try_into().unwrap()), 10_000);
    fix.status.status = -1;
    assert_eq!(reasons(&ingest.take(Stream::NavSatFix, &fix.to_cdr())), ["no_fix"]);
    // A status not yet set (the message's default before a lock): no fix either.
    fix.status.status = -2;
    assert_eq!(reasons(&ingest.take(Stream::NavSatFix, &fix.to_cdr())), ["no_fix"]);
    // A 2-D fix (no altitude): the box runs from 500 m below the ellipsoid to 9 km above.
    fix.status.status = 1;
    fix.altitude = f64::NAN;
    let atom = only(&ingest.take(Stream::NavSatFix, &fix.to_cdr())).clone();
    let p = atom.parts();
    assert_eq!((p.bounds.min_mm[0], p.bounds.max_mm[0]), (6_377_635_000, 6_387_139_000));
    let Payload::Public(bytes) = &p.payload else { panic!() };
    assert_eq!((i64::from_le_bytes(bytes[16..24].try_into().unwrap()), bytes[24] as i8), (i64::MIN, 1));
    fix.status.status = 0;
    fix.latitude = 91.0;
    assert_eq!(reasons(&ingest.take(Stream::NavSatFix, &fix.to_cdr())), ["out_of_range"]);
}

#[test]
fn a_3d_detection_is_an_observation_of_its_class_and_track() {
    let mut ingest = robot_with_sensors();
    let mut array = detections_3d(100);
    let mut broken = array.detections[0].clone();
    broken.bbox.size.x = f64::NAN;
    array.detections.push(broken);
    let taken = ingest.take(Stream::Detections3D, &array.to_cdr());
    assert_eq!(reasons(&taken), ["nan"], "the broken one is refused, the other kept");
    let p = taken.ingested[0].atom.parts();
    assert_eq!((p.kind, p.subject.as_str(), p.confidence.0), (Kind::Observation, "person/17", 900));
    // 2 m ahead of a robot at (10, 5) facing +y; 1 × 1 × 2 m about a centre 0.5 m up.
    assert_eq!(p.bounds.min_mm, [9_500, 6_500, -500]);
    assert_eq!(p.bounds.max_mm, [10_500, 7_500, 1_500]);
    // No tracker id: the class alone.
    let mut array = detections_3d(100);
    array.detections[0].id.clear();
    assert_eq!(only(&ingest.take(Stream::Detections3D, &array.to_cdr())).parts().subject, "person");
}

#[test]
fn a_2d_detection_is_the_part_of_the_camera_frustum_it_lies_in() {
    let mut ingest = robot_with_sensors();
    let atom = only(&ingest.take(Stream::Detections2D, &detections_2d(100).to_cdr())).clone();
    let p = atom.parts();
    assert_eq!((p.subject.as_str(), p.confidence.0), ("pallet", 750));
    // The ray through the image's centre: from the camera at (10, 5, 1) out 10 m along +y.
    assert_eq!(p.bounds.min_mm, [10_000, 5_000, 1_000]);
    assert_eq!(p.bounds.max_mm, [10_000, 15_000, 1_000]);
    // A camera without a calibration: the detections wait for one, then are refused.
    let mut array = detections_2d(100);
    array.header.frame_id = "thermal".into();
    assert!(ingest.take(Stream::Detections2D, &array.to_cdr()).finished.is_empty());
    assert_eq!(reasons(&ingest.flush()), ["no_camera_info"]);
}

#[test]
fn another_topic_is_kept_whole_at_the_robot() {
    let mut ingest = robot_with_sensors();
    let id = ingest.source(Source::other("/battery", "sensor_msgs/msg/BatteryState"));
    let message = [0, 1, 0, 0, 42, 0, 0, 0];
    let taken = ingest.take_from(id, &message, 100_000_000_500);
    let atom = only(&taken);
    let p = atom.parts();
    assert_eq!((p.kind, p.subject.as_str()), (Kind::Observation, "/battery"));
    assert_eq!(p.bounds.min_mm, [10_000, 5_000, 0]);
    assert_eq!(p.extractor.as_ref().map(|e| e.model.as_str()), Some("sensor_msgs/msg/BatteryState@/battery"));
    assert_eq!(taken.ingested[0].blob.as_deref(), Some(&message[..]));
}

/// The fuzz target's seeds (fuzz/seeds/make_inputs.py) are messages each stream decodes, so
/// fuzzing starts from inside every conversion.
#[test]
fn the_fuzz_seeds_decode_on_their_streams() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/ingest");
    let mut streams = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("the seeds") {
        let path = entry.expect("an entry").path();
        let bytes = std::fs::read(&path).expect("a seed");
        let (&pick, message) = bytes.split_first().expect("a pick byte");
        let stream = Stream::ALL[usize::from(pick) % Stream::ALL.len()];
        let mut ingest = robot_with_sensors();
        let mut taken = ingest.take(stream, message);
        let flushed = ingest.flush();
        taken.finished.extend(flushed.finished);
        let malformed: Vec<String> =
            taken.rejected().filter(|r| r.reason() == "malformed_message").map(ToString::to_string).collect();
        assert!(malformed.is_empty(), "{}: {malformed:?}", path.display());
        streams.insert(stream);
    }
    assert_eq!(streams.len(), Stream::ALL.len(), "a seed for every stream");
}
