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
    if step < w.checked_mul(channels)? || image.data.len() < step.checked_mul(h)? {
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
