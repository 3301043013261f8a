//! Camera frames kept as blobs (ROS `Image`, `CompressedImage` as CDR) decoded for pictures:
//! the Rerun recording draws them, `sion memory evidence` writes them as image files.

use sion_ingest::cdr::Message as _;
use sion_ingest::cdr_media_type;
use sion_ingest::msgs;

/// A camera frame as a picture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The camera's frame (the message's `frame_id`, as tf2 names it).
    pub camera: String,
    /// The message's stamp, ns.
    pub stamp_ns: i64,
    pub pixels: Pixels,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pixels {
    /// 8-bit RGB, row after row, `width × height × 3` bytes.
    Rgb { width: u32, height: u32, data: Vec<u8> },
    /// 8-bit grey, `width × height` bytes.
    Gray { width: u32, height: u32, data: Vec<u8> },
    /// A compressed picture as the camera sent it: `image/jpeg` or `image/png`.
    Encoded { media_type: &'static str, data: Vec<u8> },
}

fn stamp_ns(h: &msgs::Header) -> i64 {
    i64::from(h.stamp.sec) * 1_000_000_000 + i64::from(h.stamp.nanosec)
}

/// Whether a blob's media type is a camera frame's.
pub fn is_camera_frame(media_type: &str) -> bool {
    media_type == cdr_media_type(msgs::Image::TYPE)
        || media_type == cdr_media_type(msgs::CompressedImage::TYPE)
}

/// A camera frame blob as a picture, if it is one: raw rgb8, bgr8 or mono8, or compressed.
pub fn decode(media_type: &str, bytes: &[u8]) -> Option<Frame> {
    if media_type == cdr_media_type(msgs::CompressedImage::TYPE) {
        let image = msgs::CompressedImage::from_cdr(bytes).ok()?;
        // ROS says "jpeg" or "png", sometimes after the pixel format ("rgb8; jpeg compressed bgr8").
        let media_type = if image.format.contains("png") { "image/png" } else { "image/jpeg" };
        return Some(Frame {
            camera: sion_verify::units::frame_name(&image.header.frame_id).to_owned(),
            stamp_ns: stamp_ns(&image.header),
            pixels: Pixels::Encoded { media_type, data: image.data },
        });
    }
    if media_type != cdr_media_type(msgs::Image::TYPE) {
        return None;
    }
    let image = msgs::Image::from_cdr(bytes).ok()?;
    let channels = match image.encoding.as_str() {
        "rgb8" | "bgr8" => 3,
        "mono8" => 1,
        _ => return None,
    };
    let (w, h, step) = (image.width as usize, image.height as usize, image.step as usize);
    if w == 0 || h == 0 || step < w.checked_mul(channels)? || image.data.len() < step.checked_mul(h)? {
        return None;
    }
    let mut data = Vec::with_capacity(w * h * channels);
    for row in image.data.chunks(step).take(h) {
        data.extend_from_slice(&row[..w * channels]);
    }
    if image.encoding == "bgr8" {
        data.chunks_exact_mut(3).for_each(|p| p.swap(0, 2));
    }
    let (width, height) = (image.width, image.height);
    let pixels = if channels == 3 {
        Pixels::Rgb { width, height, data }
    } else {
        Pixels::Gray { width, height, data }
    };
    Some(Frame {
        camera: sion_verify::units::frame_name(&image.header.frame_id).to_owned(),
        stamp_ns: stamp_ns(&image.header),
        pixels,
    })
}

/// The side of a scan's picture, pixels.
const SCAN_PICTURE: u32 = 400;

/// A scan or a point cloud blob (ROS `LaserScan`, `PointCloud2`) as a picture from above: the
/// returns as white pixels on black, the sensor at the centre (a grey cross), x to the right and
/// y up in the sensor's frame, scaled so the farthest return is at the edge (at least ±1 m).
/// The picture's `camera` is the sensor's frame.
pub fn decode_scan(media_type: &str, bytes: &[u8]) -> Option<Frame> {
    let mut points = Vec::new();
    let header = if media_type == cdr_media_type(msgs::LaserScan::TYPE) {
        let scan = msgs::LaserScan::from_cdr(bytes).ok()?;
        sion_ingest::scan_points(&scan, |p| points.push(p)).ok()?;
        scan.header
    } else if media_type == cdr_media_type(msgs::PointCloud2::TYPE) {
        let cloud = msgs::PointCloud2::from_cdr(bytes).ok()?;
        sion_ingest::cloud_points(&cloud, |p| points.push(p)).ok()?;
        cloud.header
    } else {
        return None;
    };
    let reach = points.iter().map(|p| p[0].abs().max(p[1].abs())).fold(1.0_f64, f64::max);
    let side = SCAN_PICTURE as usize;
    let half = f64::from(SCAN_PICTURE) / 2.0;
    let scale = (half - 2.0) / reach;
    let mut data = vec![0u8; side * side];
    for i in 0..side {
        // The sensor: a grey cross through the centre.
        data[(side / 2) * side + i] = 60;
        data[i * side + side / 2] = 60;
    }
    for p in &points {
        let (x, y) = ((half + p[0] * scale).round() as usize, (half - p[1] * scale).round() as usize);
        if x < side && y < side {
            data[y * side + x] = 255;
        }
    }
    Some(Frame {
        camera: sion_verify::units::frame_name(&header.frame_id).to_owned(),
        stamp_ns: stamp_ns(&header),
        pixels: Pixels::Gray { width: SCAN_PICTURE, height: SCAN_PICTURE, data },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_is_drawn_from_above_with_the_sensor_at_the_centre() {
        // Four returns at 2 m: ahead (+x), left (+y), behind, right; one NaN left out.
        let scan = msgs::LaserScan {
            header: msgs::Header { stamp: msgs::Time { sec: 3, nanosec: 0 }, frame_id: "/laser".into() },
            angle_min: 0.0,
            angle_max: 4.0,
            angle_increment: std::f32::consts::FRAC_PI_2,
            range_min: 0.1,
            range_max: 10.0,
            ranges: vec![2.0, 2.0, 2.0, 2.0, f32::NAN],
            ..Default::default()
        };
        let frame = decode_scan(&cdr_media_type(msgs::LaserScan::TYPE), &scan.to_cdr()).expect("a picture");
        assert_eq!((frame.camera.as_str(), frame.stamp_ns), ("laser", 3_000_000_000));
        let Pixels::Gray { width: 400, height: 400, data } = frame.pixels else {
            panic!("a 400 × 400 grey picture")
        };
        let lit: Vec<(usize, usize)> =
            data.iter().enumerate().filter(|(_, v)| **v == 255).map(|(i, _)| (i % 400, i / 400)).collect();
        assert_eq!(lit.len(), 4, "{lit:?}");
        // Ahead is to the right, left is up: the farthest return at the edge.
        assert!(lit.iter().any(|&(x, y)| x >= 397 && y == 200), "{lit:?}");
        assert!(lit.iter().any(|&(x, y)| x == 200 && y <= 3), "{lit:?}");
        assert_eq!(decode_scan("image/png", b"png"), None);
    }
}
