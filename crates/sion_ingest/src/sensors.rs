//! The sensors beyond pose, transforms, maps and cameras: lidar (`LaserScan`, `PointCloud2`),
//! `Imu`, GNSS (`NavSatFix`), detections (`vision_msgs`), and any other topic named in the
//! configuration. What each becomes is in docs/ROS.md, "What each topic becomes".

use nalgebra::{Isometry3, Point3};

use super::msgs::{
    BoundingBox3D, Detection2DArray, Detection3DArray, Header, Imu, LaserScan, NavSatFix,
    ObjectHypothesisWithPose, PointCloud2, PointField,
};
use super::{
    Ingest, Ingested, Reject, SourceId, blob_ref, bounding_box, finite, frame, pose_isometry, rotation_nano,
    sample, stamp, units,
};
use crate::cdr::Message as _;
use sion_verify::atom::{Atom, AtomParts, BoxMm, Kind, Payload, Permille};

/// What a message refused for now waits for, to be tried again.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// A camera frame, decoded and checked: only its lookups are tried again.
    Camera(String),
    /// A transform from the fixed frame to `frame` at `at`: the message is converted again
    /// once that lookup succeeds (never decoded again before).
    Lookup { frame: String, at: i64 },
}

/// Why a message was refused whole, with — when it may yet be taken — its stamp and what it
/// waits for.
pub(crate) type Refused = (Reject, Option<(i64, Wait)>);

/// What converting one message gave: its atoms and the refusals of its parts; or why it was
/// refused whole.
pub(crate) type Converted = Result<(Vec<Ingested>, Vec<Reject>), Refused>;

/// The frame GNSS fixes are placed in: REP 105's `earth`, Earth-centred, Earth-fixed (WGS 84).
pub const EARTH_FRAME: &str = "earth";

/// A reading REP 145 / `sensor_msgs/Imu` says is not given (its covariance's first element is
/// -1) is this in the payload.
pub const NOT_GIVEN: i64 = i64::MIN;

fn whole(r: Reject) -> Refused {
    (r, None)
}

/// A refusal of the lookup of `frame` at `at`, for a message stamped `stamp`: such a message
/// waits for its transform.
fn waiting(stamp: i64, frame: &str, at: i64) -> impl Fn(Reject) -> Refused {
    let frame = frame.to_owned();
    move |r| (r, Some((stamp, Wait::Lookup { frame: frame.clone(), at })))
}

/// Axis-aligned bounds of points in a sensor's frame, metres; the sensor's origin included
/// (what a scan covers runs from the sensor to its returns).
struct Bounds {
    min: [f64; 3],
    max: [f64; 3],
}

impl Bounds {
    fn origin() -> Self {
        Self { min: [0.0; 3], max: [0.0; 3] }
    }

    fn add(&mut self, p: [f64; 3]) {
        for (axis, x) in p.into_iter().enumerate() {
            self.min[axis] = self.min[axis].min(x);
            self.max[axis] = self.max[axis].max(x);
        }
    }

    /// The box in the target frame that holds these bounds: its eight corners carried over,
    /// rounded outward. It holds every point the bounds hold, whatever the rotation.
    fn carried(&self, target_from_sensor: &Isometry3<f64>, field: &'static str) -> Result<BoxMm, Reject> {
        let (a, b) = (self.min, self.max);
        let corners: Vec<Point3<f64>> = (0..8)
            .map(|i| {
                let pick = |axis: usize| if i & (1 << axis) == 0 { a[axis] } else { b[axis] };
                target_from_sensor * Point3::new(pick(0), pick(1), pick(2))
            })
            .collect();
        bounding_box(&corners, field)
    }
}

impl Ingest {
    fn fixed(&self) -> String {
        self.config.fixed_frame.clone()
    }

    /// A `LaserScan`: a coverage atom in the fixed frame holding the scanner and every return,
    /// the scan kept as a blob. As REP 117 says, a range of +∞ is "nothing within range_max"
    /// (the beam covered out to range_max); NaN, −∞ and finite ranges outside
    /// [range_min, range_max] are left out.
    pub(crate) fn scan(&mut self, source: SourceId, message: &[u8]) -> Converted {
        self.check_size(message).map_err(whole)?;
        let scan = LaserScan::from_cdr(message).map_err(|e| whole(e.into()))?;
        let t = stamp(&scan.header).map_err(whole)?;
        self.saw(t);
        let sensor = frame(&scan.header.frame_id, "header.frame_id").map_err(whole)?.to_owned();
        let bounds = scan_bounds(&scan).map_err(whole)?;
        let fixed = self.fixed();
        let fixed_from_sensor = self.lookup(&fixed, &sensor, t).map_err(waiting(t, &sensor, t))?;
        let mut bx = bounds.carried(&fixed_from_sensor, "scan").map_err(whole)?;
        // A scan takes time (a tenth of a second for a 10 Hz lidar) while the robot moves: where
        // the transform at its last ray is known too, the box holds the returns both ways.
        let took = f64::from(scan.time_increment) * scan.ranges.len().saturating_sub(1) as f64;
        if took.is_finite() && took > 0.0 && took <= 1.0 {
            let end = t.saturating_add((took * 1e9).round() as i64);
            // It waits for that transform as for the first (a node that had it and a replay that
            // had not would make different boxes); given up waiting, the start's box stands.
            match self.lookup(&fixed, &sensor, end) {
                Ok(at_end) => {
                    let other = bounds.carried(&at_end, "scan").map_err(whole)?;
                    bx = BoxMm {
                        min_mm: std::array::from_fn(|i| bx.min_mm[i].min(other.min_mm[i])),
                        max_mm: std::array::from_fn(|i| bx.max_mm[i].max(other.max_mm[i])),
                    };
                }
                Err(e) if !self.giving_up => return Err(waiting(t, &sensor, end)(e)),
                Err(_) => {}
            }
        }
        self.coverage(source, &fixed, &sensor, bx, t, message, LaserScan::TYPE)
    }

    /// A `PointCloud2`: as a scan, over its points' x, y and z (non-finite points left out).
    pub(crate) fn cloud(&mut self, source: SourceId, message: &[u8]) -> Converted {
        self.check_size(message).map_err(whole)?;
        let cloud = PointCloud2::from_cdr(message).map_err(|e| whole(e.into()))?;
        let t = stamp(&cloud.header).map_err(whole)?;
        self.saw(t);
        let sensor = frame(&cloud.header.frame_id, "header.frame_id").map_err(whole)?.to_owned();
        let bounds = cloud_bounds(&cloud).map_err(whole)?;
        let fixed = self.fixed();
        let fixed_from_sensor = self.lookup(&fixed, &sensor, t).map_err(waiting(t, &sensor, t))?;
        let bx = bounds.carried(&fixed_from_sensor, "cloud").map_err(whole)?;
        self.coverage(source, &fixed, &sensor, bx, t, message, PointCloud2::TYPE)
    }

    #[allow(clippy::too_many_arguments)]
    fn coverage(
        &mut self,
        source: SourceId,
        fixed: &str,
        sensor: &str,
        bx: BoxMm,
        t: i64,
        message: &[u8],
        message_type: &'static str,
    ) -> Converted {
        let kind = message_type;
        let mut parts = AtomParts::new(Kind::Coverage, fixed, bx, sample(t), Permille(1000));
        parts.subject = sensor.to_owned();
        parts.extractor = Some(self.extractor(source));
        // Thinned as camera frames are (a sealed memory's `every_s`, per sensor): every scan is
        // remembered as what it covered, one per period keeps its points.
        if !self.keeps_payload(kind, sensor, t) {
            let atom = Atom::new(parts).map_err(|e| whole(e.into()))?;
            return Ok((vec![Ingested { atom, blob: None }], Vec::new()));
        }
        parts.payload = Payload::Blob(blob_ref(message, message_type));
        let atom = Atom::new(parts).map_err(|e| whole(e.into()))?;
        Ok((vec![Ingested { atom, blob: Some(message.to_vec()) }], Vec::new()))
    }

    /// An `Imu` reading: an observation atom at the IMU's place in the fixed frame, its subject
    /// the IMU's frame, its reading in the payload (docs/ROS.md, "Imu").
    pub(crate) fn imu(&mut self, source: SourceId, message: &[u8]) -> Converted {
        let imu = Imu::from_cdr(message).map_err(|e| whole(e.into()))?;
        let t = stamp(&imu.header).map_err(whole)?;
        self.saw(t);
        let sensor = frame(&imu.header.frame_id, "header.frame_id").map_err(whole)?.to_owned();
        let payload = imu_payload(&imu).map_err(whole)?;
        let fixed = self.fixed();
        let fixed_from_sensor = self.lookup(&fixed, &sensor, t).map_err(waiting(t, &sensor, t))?;
        let at = fixed_from_sensor * Point3::origin();
        let bx = bounding_box(&[at], "imu position").map_err(whole)?;
        self.reading(source, &fixed, bx, t, sensor, payload)
    }

    /// A `NavSatFix`: an observation atom in the `earth` frame (ECEF, millimetres) at the fix,
    /// grown by the largest standard deviation its covariance gives; refused unless its status
    /// says it has a fix.
    pub(crate) fn gnss(&mut self, source: SourceId, message: &[u8]) -> Converted {
        let fix = NavSatFix::from_cdr(message).map_err(|e| whole(e.into()))?;
        let t = stamp(&fix.header).map_err(whole)?;
        self.saw(t);
        let sensor = frame(&fix.header.frame_id, "header.frame_id").map_err(whole)?.to_owned();
        let (bx, payload) = gnss_box(&fix).map_err(whole)?;
        self.reading(source, EARTH_FRAME, bx, t, sensor, payload)
    }

    /// A sensor's reading at a place: an observation atom, its subject the sensor, the reading
    /// as its public payload.
    fn reading(
        &self,
        source: SourceId,
        frame: &str,
        bx: BoxMm,
        t: i64,
        sensor: String,
        payload: Vec<u8>,
    ) -> Converted {
        let mut parts = AtomParts::new(Kind::Observation, frame, bx, sample(t), Permille(1000));
        parts.subject = sensor;
        parts.payload = Payload::Public(payload);
        parts.extractor = Some(self.extractor(source));
        let atom = Atom::new(parts).map_err(|e| whole(e.into()))?;
        Ok((vec![Ingested { atom, blob: None }], Vec::new()))
    }

    /// A `Detection3DArray`: an observation atom per detection, its box the object's box in
    /// the fixed frame, its subject the class (and tracker's id), its confidence the score.
    pub(crate) fn detections_3d(&mut self, source: SourceId, message: &[u8]) -> Converted {
        let array = Detection3DArray::from_cdr(message).map_err(|e| whole(e.into()))?;
        let found: Vec<Found<'_>> =
            array.detections.iter().map(|d| (&d.header, d.results.as_slice(), d.id.as_str())).collect();
        self.detections(source, &array.header, &found, |ingest, i, sensor, t| {
            let fixed_from_sensor = ingest.lookup(&ingest.config.fixed_frame, sensor, t)?;
            box_3d(&array.detections[i].bbox, &fixed_from_sensor)
        })
    }

    /// A `Detection2DArray`, with the model of the camera whose frame its header names: an
    /// observation atom per detection, its box the part of the camera's frustum (out to
    /// `camera_range_m`) that the detection's pixel box lies in.
    pub(crate) fn detections_2d(&mut self, source: SourceId, message: &[u8]) -> Converted {
        let array = Detection2DArray::from_cdr(message).map_err(|e| whole(e.into()))?;
        let found: Vec<Found<'_>> =
            array.detections.iter().map(|d| (&d.header, d.results.as_slice(), d.id.as_str())).collect();
        self.detections(source, &array.header, &found, |ingest, i, camera, t| {
            pixel_corners(&array.detections[i].bbox).and_then(|corners| ingest.frustum(camera, t, corners))
        })
    }

    /// An array's detections, each placed in the fixed frame by `place` (given its index, its
    /// frame and stamp: its own header's, or the array's when it leaves its frame empty). A
    /// detection that cannot be placed for want of a transform or a calibration holds the whole
    /// message; one that cannot be placed otherwise is refused alone.
    fn detections(
        &mut self,
        source: SourceId,
        header: &Header,
        found: &[Found<'_>],
        place: impl Fn(&Self, usize, &str, i64) -> Result<BoxMm, Reject>,
    ) -> Converted {
        let t0 = stamp(header).map_err(whole)?;
        self.saw(t0);
        let mut placed = Vec::with_capacity(found.len());
        for (i, (own, ..)) in found.iter().enumerate() {
            let own = own_header(own, header);
            let (t, frame) = match (stamp(own), frame(&own.frame_id, "detections.header.frame_id")) {
                (Ok(t), Ok(f)) => (t, f),
                (Err(e), _) | (_, Err(e)) => {
                    placed.push(Err(e));
                    continue;
                }
            };
            match place(self, i, frame, t) {
                Err(e) if super::waits(&e) => return Err(waiting(t0, frame, t)(e)),
                other => placed.push(other.map(|bx| (t, bx))),
            }
        }
        let fixed = self.fixed();
        let (mut atoms, mut rejected) = (Vec::new(), Vec::new());
        for ((_, results, id), place) in found.iter().zip(placed) {
            match place.and_then(|(t, bx)| self.detection(source, &fixed, bx, t, results, id)) {
                Ok(atom) => atoms.push(Ingested { atom, blob: None }),
                Err(e) => rejected.push(e),
            }
        }
        Ok((atoms, rejected))
    }

    fn detection(
        &self,
        source: SourceId,
        fixed: &str,
        bx: BoxMm,
        t: i64,
        results: &[ObjectHypothesisWithPose],
        id: &str,
    ) -> Result<Atom, Reject> {
        let (class, confidence) = best_hypothesis(results)?;
        let mut parts = AtomParts::new(Kind::Observation, fixed, bx, sample(t), confidence);
        parts.subject = match (class, id) {
            (c, "") => c.to_owned(),
            ("", i) => i.to_owned(),
            (c, i) => format!("{c}/{i}"),
        };
        parts.extractor = Some(self.extractor(source));
        Ok(Atom::new(parts)?)
    }

    /// A message of another topic: an observation atom at the robot's place in the fixed frame
    /// when it was received, its subject the topic, committing to the message (kept as a blob).
    pub(crate) fn other(&mut self, source: SourceId, message: &[u8], received_ns: i64) -> Converted {
        self.check_size(message).map_err(whole)?;
        if received_ns < 0 {
            return Err(whole(Reject::OutOfRange { field: "receipt time" }));
        }
        let (topic, message_type) =
            self.sources.get(source).map(|s| (s.topic.clone(), s.message_type.clone())).unwrap_or_default();
        let fixed = self.fixed();
        let robot = self.config.robot_frame.clone();
        let fixed_from_robot =
            self.lookup(&fixed, &robot, received_ns).map_err(waiting(received_ns, &robot, received_ns))?;
        let bx = bounding_box(&[fixed_from_robot * Point3::origin()], "robot position").map_err(whole)?;
        let mut parts = AtomParts::new(Kind::Observation, &fixed, bx, sample(received_ns), Permille(1000));
        parts.subject = topic;
        parts.payload = Payload::Blob(blob_ref(message, &message_type));
        parts.extractor = Some(self.extractor(source));
        let atom = Atom::new(parts).map_err(|e| whole(e.into()))?;
        Ok((vec![Ingested { atom, blob: Some(message.to_vec()) }], Vec::new()))
    }
}

/// What the placing of an array's detections reads of each: its header, hypotheses and id.
type Found<'a> = (&'a Header, &'a [ObjectHypothesisWithPose], &'a str);

/// A detection's own header, or its array's when it leaves its frame empty (as many
/// detectors do).
fn own_header<'a>(own: &'a Header, array: &'a Header) -> &'a Header {
    if own.frame_id.is_empty() { array } else { own }
}

fn scan_bounds(scan: &LaserScan) -> Result<Bounds, Reject> {
    let mut bounds = Bounds::origin();
    scan_points(scan, |p| bounds.add(p))?;
    Ok(bounds)
}

/// Each return of a scan as a point in the scanner's frame, metres (REP 117: +∞ is "nothing
/// within `range_max`", taken at `range_max`; NaN, −∞ and ranges outside `[range_min,
/// range_max]` are left out): what the memory's coverage atom holds, and what a picture draws.
pub fn scan_points(scan: &LaserScan, mut visit: impl FnMut([f64; 3])) -> Result<(), Reject> {
    let angle_min = finite(f64::from(scan.angle_min), "angle_min")?;
    let increment = finite(f64::from(scan.angle_increment), "angle_increment")?;
    let range_min = finite(f64::from(scan.range_min), "range_min")?;
    let range_max = finite(f64::from(scan.range_max), "range_max")?;
    if range_min < 0.0 || range_max < range_min {
        return Err(Reject::BadScan("range_min and range_max are not 0 ≤ range_min ≤ range_max"));
    }
    if increment == 0.0 && scan.ranges.len() > 1 {
        return Err(Reject::BadScan("angle_increment is 0"));
    }
    for (i, &r) in scan.ranges.iter().enumerate() {
        let r = f64::from(r);
        let r = if r == f64::INFINITY {
            range_max
        } else if r.is_finite() && (range_min..=range_max).contains(&r) {
            r
        } else {
            continue;
        };
        let a = angle_min + i as f64 * increment;
        visit([r * a.cos(), r * a.sin(), 0.0]);
    }
    Ok(())
}

fn cloud_bounds(cloud: &PointCloud2) -> Result<Bounds, Reject> {
    let mut bounds = Bounds::origin();
    cloud_points(cloud, |p| bounds.add(p))?;
    Ok(bounds)
}

/// Each point of a cloud with finite x, y and z (FLOAT32 or FLOAT64, either endianness), in
/// the cloud's frame, metres.
pub fn cloud_points(cloud: &PointCloud2, mut visit: impl FnMut([f64; 3])) -> Result<(), Reject> {
    let field = |name: &str| -> Result<(usize, bool), Reject> {
        let f = cloud
            .fields
            .iter()
            .find(|f| f.name == name)
            .ok_or(Reject::BadCloud("a field of x, y and z is missing"))?;
        let wide = match f.datatype {
            PointField::FLOAT32 => false,
            PointField::FLOAT64 => true,
            _ => return Err(Reject::BadCloud("x, y or z is neither FLOAT32 nor FLOAT64")),
        };
        let end = u64::from(f.offset) + if wide { 8 } else { 4 };
        if end > u64::from(cloud.point_step) {
            return Err(Reject::BadCloud("a field ends past point_step"));
        }
        Ok((f.offset as usize, wide))
    };
    let axes = [field("x")?, field("y")?, field("z")?];
    let (width, height) = (u64::from(cloud.width), u64::from(cloud.height));
    let (step, row) = (u64::from(cloud.point_step), u64::from(cloud.row_step));
    if width > 0 && row < width * step {
        return Err(Reject::BadCloud("row_step is shorter than width × point_step"));
    }
    if (cloud.data.len() as u64) < row * height {
        return Err(Reject::BadCloud("data is shorter than row_step × height"));
    }
    let big = cloud.is_bigendian;
    let read = |at: usize, wide: bool| -> f64 {
        // In bounds: every field ends within point_step, every point within its row.
        if wide {
            let b: [u8; 8] = cloud.data.get(at..at + 8).and_then(|b| b.try_into().ok()).unwrap_or([0xff; 8]);
            if big { f64::from_be_bytes(b) } else { f64::from_le_bytes(b) }
        } else {
            let b: [u8; 4] = cloud.data.get(at..at + 4).and_then(|b| b.try_into().ok()).unwrap_or([0xff; 4]);
            f64::from(if big { f32::from_be_bytes(b) } else { f32::from_le_bytes(b) })
        }
    };
    for r in 0..height {
        for c in 0..width {
            let base = (r * row + c * step) as usize;
            let p = axes.map(|(offset, wide)| read(base + offset, wide));
            if p.iter().all(|x| x.is_finite()) {
                visit(p);
            }
        }
    }
    Ok(())
}

/// An `Imu`'s payload, 64 bytes little-endian: the orientation as four i32 parts per 10^9
/// (x, y, z, w; all 0 when not given), the angular velocity as three i64 µrad/s, the linear
/// acceleration as three i64 µm/s² ([`NOT_GIVEN`] each when not given).
fn imu_payload(imu: &Imu) -> Result<Vec<u8>, Reject> {
    let mut out = Vec::with_capacity(64);
    let orientation = if imu.orientation_covariance[0] == -1.0 {
        None
    } else {
        rotation_nano(&imu.orientation, "orientation")?
    };
    for x in orientation.unwrap_or([0; 4]) {
        out.extend_from_slice(&x.to_le_bytes());
    }
    let micro =
        |v: &super::msgs::Vector3, covariance: f64, field: &'static str| -> Result<[i64; 3], Reject> {
            if covariance == -1.0 {
                return Ok([NOT_GIVEN; 3]);
            }
            let one = |x: f64| -> Result<i64, Reject> {
                let x = finite(x, field)? * 1e6;
                if x.abs() > 1e15 {
                    return Err(Reject::OutOfRange { field });
                }
                Ok(x.round() as i64)
            };
            Ok([one(v.x)?, one(v.y)?, one(v.z)?])
        };
    let spin = micro(&imu.angular_velocity, imu.angular_velocity_covariance[0], "angular_velocity")?;
    let accel =
        micro(&imu.linear_acceleration, imu.linear_acceleration_covariance[0], "linear_acceleration")?;
    for x in spin.into_iter().chain(accel) {
        out.extend_from_slice(&x.to_le_bytes());
    }
    Ok(out)
}

/// WGS 84.
const A: f64 = 6_378_137.0;
const F: f64 = 1.0 / 298.257_223_563;

/// A fix's box in ECEF millimetres and its payload, 27 bytes little-endian: latitude and
/// longitude as i64 nanodegrees, altitude as i64 mm above the ellipsoid ([`NOT_GIVEN`] for a
/// 2-D fix), the status (i8) and service (u16).
fn gnss_box(fix: &NavSatFix) -> Result<(BoxMm, Vec<u8>), Reject> {
    // As sensor_msgs says, a fix is valid when its status is at least STATUS_FIX (0): -1 is no
    // fix, -2 a status not yet set (the message's default, before a receiver has a lock).
    if fix.status.status < 0 {
        return Err(Reject::NoFix(fix.status.status));
    }
    let lat = finite(fix.latitude, "latitude")?;
    let lon = finite(fix.longitude, "longitude")?;
    // A NaN altitude is a fix without one (a 2-D fix): the box then runs from 500 m below
    // the ellipsoid to 9,000 m above it, where a robot can be.
    let alt = if fix.altitude.is_nan() { None } else { Some(finite(fix.altitude, "altitude")?) };
    if !(-90.0..=90.0).contains(&lat) {
        return Err(Reject::OutOfRange { field: "latitude" });
    }
    if !(-180.0..=180.0).contains(&lon) {
        return Err(Reject::OutOfRange { field: "longitude" });
    }
    if alt.is_some_and(|a| a.abs() > 1e8) {
        return Err(Reject::OutOfRange { field: "altitude" });
    }
    let sigma = if fix.position_covariance_type == 0 {
        0.0
    } else {
        let c = &fix.position_covariance;
        let worst = [c[0], c[4], c[8]].into_iter().try_fold(0.0f64, |m, v| {
            let v = finite(v, "position_covariance")?;
            if v < 0.0 { Err(Reject::OutOfRange { field: "position_covariance" }) } else { Ok(m.max(v)) }
        })?;
        worst.sqrt()
    };
    let (phi, lambda) = (lat.to_radians(), lon.to_radians());
    let e2 = F * (2.0 - F);
    let n = A / (1.0 - e2 * phi.sin().powi(2)).sqrt();
    let ecef = |h: f64| {
        [
            (n + h) * phi.cos() * lambda.cos(),
            (n + h) * phi.cos() * lambda.sin(),
            (n * (1.0 - e2) + h) * phi.sin(),
        ]
    };
    let heights = match alt {
        Some(a) => [a, a],
        None => [-500.0, 9_000.0],
    };
    let corners: Vec<Point3<f64>> = heights
        .into_iter()
        .flat_map(|h| {
            let c = ecef(h);
            [
                Point3::new(c[0] - sigma, c[1] - sigma, c[2] - sigma),
                Point3::new(c[0] + sigma, c[1] + sigma, c[2] + sigma),
            ]
        })
        .collect();
    let bx = bounding_box(&corners, "fix")?;
    let mut payload = Vec::with_capacity(27);
    payload.extend_from_slice(&((lat * 1e9).round() as i64).to_le_bytes());
    payload.extend_from_slice(&((lon * 1e9).round() as i64).to_le_bytes());
    let alt_mm = match alt {
        Some(a) => units::metres_to_mm(a).map_err(|_| Reject::OutOfRange { field: "altitude" })?,
        None => NOT_GIVEN,
    };
    payload.extend_from_slice(&alt_mm.to_le_bytes());
    payload.extend_from_slice(&fix.status.status.to_le_bytes());
    payload.extend_from_slice(&fix.status.service.to_le_bytes());
    Ok((bx, payload))
}

/// A `BoundingBox3D` (in its detection's frame) as a box in the fixed frame.
fn box_3d(bbox: &BoundingBox3D, fixed_from_sensor: &Isometry3<f64>) -> Result<BoxMm, Reject> {
    let size = [bbox.size.x, bbox.size.y, bbox.size.z];
    for s in size {
        if finite(s, "bbox.size")? < 0.0 {
            return Err(Reject::BadDetection("a size of its box is negative"));
        }
    }
    let sensor_from_box = pose_isometry(&bbox.center, "bbox.center")?;
    let half = size.map(|s| s / 2.0);
    let bounds = Bounds { min: half.map(|h| -h), max: half };
    bounds.carried(&(fixed_from_sensor * sensor_from_box), "bbox")
}

/// The four corners, in pixels, of a `BoundingBox2D` turned by its `theta`.
fn pixel_corners(bbox: &super::msgs::BoundingBox2D) -> Result<[(f64, f64); 4], Reject> {
    let (cx, cy) =
        (finite(bbox.center.position.x, "bbox.center")?, finite(bbox.center.position.y, "bbox.center")?);
    let theta = finite(bbox.center.theta, "bbox.center.theta")?;
    let (hx, hy) = (finite(bbox.size_x, "bbox.size_x")? / 2.0, finite(bbox.size_y, "bbox.size_y")? / 2.0);
    if hx < 0.0 || hy < 0.0 {
        return Err(Reject::BadDetection("a size of its box is negative"));
    }
    let (sin, cos) = theta.sin_cos();
    Ok([(-1.0, -1.0), (1.0, -1.0), (-1.0, 1.0), (1.0, 1.0)]
        .map(|(sx, sy): (f64, f64)| (cx + sx * hx * cos - sy * hy * sin, cy + sx * hx * sin + sy * hy * cos)))
}

/// The class of the most likely hypothesis and its score as a confidence (scores clamped to
/// 0..=1; no hypothesis: "" and certain).
fn best_hypothesis(results: &[ObjectHypothesisWithPose]) -> Result<(&str, Permille), Reject> {
    let mut best: Option<(&str, f64)> = None;
    for r in results {
        let score = finite(r.hypothesis.score, "results.hypothesis.score")?;
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((&r.hypothesis.class_id, score));
        }
    }
    Ok(match best {
        Some((class, score)) => (class, Permille((score.clamp(0.0, 1.0) * 1000.0).round() as u16)),
        None => ("", Permille(1000)),
    })
}
