//! The Rerun recording (feature `rerun`): a memory drawn on the valid-time timeline, and an
//! answer drawn from its [`Scene`].

use nalgebra::{Isometry3, Point3, Quaternion, Translation3, UnitQuaternion};
use rerun::RecordingStream;
use rerun::archetypes::{Boxes3D, Image, LineStrips3D, Points3D, TextDocument, ViewCoordinates};
use rerun::components::{Color, FillMode};

use sion_ingest::cdr::Message as _;
use sion_ingest::cdr_media_type;
use sion_ingest::msgs::{self, OccupancyGrid};
use sion_store::log::blobs::BlobStore;
use sion_store::log::{Log, LogError};
use sion_verify::atom::{Atom, BoxMm, Kind, Payload};
use sion_verify::proof::{ProofFile, Tree};

use crate::scene::{self, Layer, Scene, Verdict};

/// The timeline atoms are placed on: the start of each atom's valid interval.
pub const TIMELINE: &str = "valid_time";

/// Cells at or above this occupancy (percent) are drawn as obstacles (map_server's default).
const OCCUPIED_PERCENT: i8 = 65;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VizError {
    #[error("reading the log: {0}")]
    Log(#[from] LogError),
    #[error("writing the recording: {0}")]
    Rerun(#[from] rerun::RecordingStreamError),
}

/// What [`draw_memory`] drew and left out, for the summary a user reads.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemoryDrawn {
    /// Atoms drawn as boxes or points.
    pub atoms: u64,
    /// Atoms in frames other than the one drawn.
    pub other_frames: u64,
    /// Atoms past the limit, not drawn.
    pub over_limit: u64,
    /// Map tiles drawn as occupied cells and as images.
    pub map_tiles: u64,
    /// Camera frames drawn as images.
    pub images: u64,
    /// Blobs that are missing, do not decode, or have an encoding not drawn.
    pub blobs_not_drawn: u64,
}

/// What [`draw_answer`] drew: the proof's tree nodes by what they are to the query.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AnswerDrawn {
    pub answer: u64,
    pub expanded: u64,
    pub pruned: u64,
    pub passed: u64,
    /// The proof file's size in bytes.
    pub bytes: usize,
    /// Why the proof does not verify, if it does not.
    pub rejected: Option<String>,
}

/// Draw the log's atoms in `frame`, at most `limit` of them, telling `progress` the position
/// reached now and then.
pub fn draw_memory(
    rec: &RecordingStream,
    log: &Log,
    blobs: &BlobStore,
    frame: &str,
    limit: u64,
    mut progress: impl FnMut(u64),
) -> Result<MemoryDrawn, VizError> {
    let mut drawn = MemoryDrawn::default();
    // ROS frames are right-handed with z up (REP 103).
    rec.log_static("world", &ViewCoordinates::RIGHT_HAND_Z_UP())?;
    let mut trajectories: std::collections::BTreeMap<String, Vec<(i64, [f32; 3])>> = Default::default();
    for entry in log.scan(0) {
        let (position, atom) = entry?;
        if position % 4096 == 0 {
            progress(position);
        }
        let p = atom.parts();
        if p.frame != frame {
            drawn.other_frames += 1;
            continue;
        }
        if drawn.atoms >= limit {
            drawn.over_limit += 1;
            continue;
        }
        drawn.atoms += 1;
        rec.set_timestamp_nanos_since_epoch(TIMELINE, p.valid.from_ns);
        let path = format!("world/atoms/{}/{}", p.kind.as_str(), entity_part(&p.subject));
        let colour = kind_colour(p.kind);
        if is_point(&p.bounds) {
            let radius = if p.kind == Kind::Pose { 0.15 } else { 0.08 };
            rec.log(
                path,
                &Points3D::new([metres(p.bounds.min_mm)]).with_colors([colour]).with_radii([radius]),
            )?;
        } else {
            rec.log(path, &boxes([&p.bounds]).with_colors([colour]).with_radii([0.02]))?;
        }
        if p.kind == Kind::Pose {
            trajectories
                .entry(entity_part(&p.subject))
                .or_default()
                .push((p.valid.from_ns, centre(&p.bounds)));
        }
        match p.kind {
            Kind::MapTile => draw_blob(rec, blobs, &atom, &mut drawn, draw_map_tile)?,
            Kind::Observation => draw_blob(rec, blobs, &atom, &mut drawn, draw_camera_frame)?,
            _ => {}
        }
    }
    for (subject, mut points) in trajectories {
        points.sort_by_key(|(t, _)| *t);
        let strip: Vec<[f32; 3]> = points.into_iter().map(|(_, p)| p).collect();
        rec.log_static(
            format!("world/trajectory/{subject}"),
            &LineStrips3D::new([strip]).with_colors([kind_colour(Kind::Pose)]).with_radii([0.03]),
        )?;
    }
    Ok(drawn)
}

/// Draw a proof file: the query box, the answer, every node of the proof's tree walk (opened,
/// passed over, or a leaf entry that does not answer), and a summary saying whether it verified.
pub fn draw_answer(rec: &RecordingStream, file: &ProofFile) -> Result<AnswerDrawn, VizError> {
    let scene = Scene::of(file, None);
    if let Some(q) = scene.drawn_question() {
        rec.log_static(
            "world/query",
            &boxes([&q])
                .with_colors([rgba(scene::question_rgba(scene.verified()))])
                .with_radii([0.08])
                .with_labels([format!("query: {}", scene.frame)]),
        )?;
    }
    // A point atom (a pose, say) gets a 20 cm box, so that it shows.
    let bounds: Vec<BoxMm> = scene.answer.iter().map(|a| scene::drawable(&a.bounds)).collect();
    rec.log_static(
        "world/answer",
        &boxes(bounds.iter())
            .with_colors([rgba(scene::ANSWER_RGBA)])
            .with_radii([0.03])
            .with_labels(scene.answer.iter().map(|a| format!("#{} {}", a.position, a.kind.as_str()))),
    )?;
    for tree in [Tree::ShortLived, Tree::LongLived] {
        let name = match tree {
            Tree::ShortLived => "short_lived",
            Tree::LongLived => "long_lived",
        };
        for layer in Layer::ALL {
            let nodes: Vec<BoxMm> = scene
                .walk
                .iter()
                .filter(|w| w.tree == tree && w.layer == layer)
                .map(|w| scene::drawable(&w.bounds))
                .collect();
            let radius = if layer == Layer::Opened { 0.02 } else { 0.01 };
            rec.log_static(
                format!("world/proof/{name}/{}", layer.name()),
                &boxes(nodes.iter()).with_colors([rgba(layer.rgba())]).with_radii([radius]),
            )?;
        }
    }
    let drawn = AnswerDrawn {
        answer: scene.answer.len() as u64,
        expanded: scene.count(Layer::Opened) as u64,
        pruned: scene.count(Layer::PassedOver) as u64,
        passed: scene.count(Layer::NotAnswering) as u64,
        bytes: scene.bytes,
        rejected: match &scene.verdict {
            Verdict::Verified { .. } => None,
            Verdict::Rejected { why } => Some(why.clone()),
        },
    };
    let summary = match &scene.verdict {
        Verdict::Verified { statement } => format!("# ✅ The proof verifies\n\n{statement}\n"),
        Verdict::Rejected { why } => format!("# ❌ The proof does NOT verify\n\n{why}\n"),
    };
    let summary = format!(
        "{summary}\n- kind: {}\n- head: {} atoms, log root `{}`, index root `{}`\n- attested by the ledger: {}\n\
         - proof: {} bytes; tree nodes opened {}, passed over {}, leaf entries not answering {}\n\
         - answer: {} atoms\n",
        scene.kind,
        scene.head_size,
        hex::encode(scene.head_root),
        hex::encode(scene.head_index),
        if scene.attested { "yes" } else { "no" },
        drawn.bytes,
        drawn.expanded,
        drawn.pruned,
        drawn.passed,
        drawn.answer,
    );
    rec.log_static("proof/summary", &TextDocument::from_markdown(summary))?;
    Ok(drawn)
}

fn rgba([r, g, b, a]: [u8; 4]) -> Color {
    Color::from_unmultiplied_rgba(r, g, b, a)
}

/// Fetch an atom's blob and draw it; a blob that is missing or does not decode is counted.
fn draw_blob(
    rec: &RecordingStream,
    blobs: &BlobStore,
    atom: &Atom,
    drawn: &mut MemoryDrawn,
    draw: fn(&RecordingStream, &str, &[u8], &mut MemoryDrawn) -> Result<bool, VizError>,
) -> Result<(), VizError> {
    let Payload::Blob(blob) = &atom.parts().payload else {
        return Ok(());
    };
    let drew = match blobs.get(&blob.hash) {
        Ok(bytes) => draw(rec, &blob.media_type, &bytes, drawn)?,
        Err(_) => false,
    };
    if !drew {
        drawn.blobs_not_drawn += 1;
    }
    Ok(())
}

/// A map tile: its occupied cells in the world, and the tile as a picture.
fn draw_map_tile(
    rec: &RecordingStream,
    media_type: &str,
    bytes: &[u8],
    drawn: &mut MemoryDrawn,
) -> Result<bool, VizError> {
    if media_type != cdr_media_type(OccupancyGrid::TYPE) {
        return Ok(false);
    }
    let Ok(grid) = OccupancyGrid::from_cdr(bytes) else {
        return Ok(false);
    };
    let info = &grid.info;
    let (w, h) = (info.width as usize, info.height as usize);
    if w == 0 || grid.data.len() != w * h {
        return Ok(false);
    }
    let res = f64::from(info.resolution);
    let world_from_grid = isometry(&info.origin);
    let mut cells = Vec::new();
    for (i, &c) in grid.data.iter().enumerate() {
        if c >= OCCUPIED_PERCENT {
            let (x, y) = ((i % w) as f64 + 0.5, (i / w) as f64 + 0.5);
            let p = world_from_grid * Point3::new(x * res, y * res, 0.0);
            cells.push([p.x as f32, p.y as f32, p.z as f32]);
        }
    }
    rec.log(
        "world/map",
        &Points3D::new(cells).with_radii([(res / 2.0) as f32]).with_colors([Color::from_rgb(90, 90, 110)]),
    )?;
    // Row 0 of the grid is at the origin (bottom); row 0 of an image is its top.
    let mut picture = Vec::with_capacity(w * h);
    for row in grid.data.chunks(w).rev() {
        picture.extend(row.iter().map(|&c| grey(c)));
    }
    rec.log("map/tile", &Image::from_l8(picture, [info.width, info.height]))?;
    drawn.map_tiles += 1;
    Ok(true)
}

/// An occupancy (-1 unknown, 0..=100 percent) as a grey: free white, occupied black.
fn grey(cell: i8) -> u8 {
    match u8::try_from(cell) {
        Ok(percent) => 255 - (u16::from(percent.min(100)) * 255 / 100) as u8,
        Err(_) => 128,
    }
}

/// A camera frame (raw rgb8, bgr8 or mono8) as a picture on the timeline.
fn draw_camera_frame(
    rec: &RecordingStream,
    media_type: &str,
    bytes: &[u8],
    drawn: &mut MemoryDrawn,
) -> Result<bool, VizError> {
    if media_type != cdr_media_type(msgs::Image::TYPE) {
        return Ok(false);
    }
    let Ok(image) = msgs::Image::from_cdr(bytes) else {
        return Ok(false);
    };
    let channels = match image.encoding.as_str() {
        "rgb8" | "bgr8" => 3,
        "mono8" => 1,
        _ => return Ok(false),
    };
    let (w, h, step) = (image.width as usize, image.height as usize, image.step as usize);
    if step < w * channels || image.data.len() < step * h {
        return Ok(false);
    }
    let mut pixels = Vec::with_capacity(w * h * channels);
    for row in image.data.chunks(step).take(h) {
        pixels.extend_from_slice(&row[..w * channels]);
    }
    if image.encoding == "bgr8" {
        pixels.chunks_exact_mut(3).for_each(|p| p.swap(0, 2));
    }
    let picture = if channels == 3 {
        Image::from_rgb24(pixels, [image.width, image.height])
    } else {
        Image::from_l8(pixels, [image.width, image.height])
    };
    rec.log("camera/image", &picture)?;
    drawn.images += 1;
    Ok(true)
}

fn isometry(pose: &msgs::Pose) -> Isometry3<f64> {
    let (p, q) = (&pose.position, &pose.orientation);
    let rotation = Quaternion::new(q.w, q.x, q.y, q.z);
    // An all-zero quaternion (common in hand-made maps) means no rotation.
    let rotation = if rotation.norm() > 0.0 {
        UnitQuaternion::from_quaternion(rotation)
    } else {
        UnitQuaternion::identity()
    };
    Isometry3::from_parts(Translation3::new(p.x, p.y, p.z), rotation)
}

fn boxes<'a>(bounds: impl IntoIterator<Item = &'a BoxMm>) -> Boxes3D {
    let (mins, sizes): (Vec<[f32; 3]>, Vec<[f32; 3]>) = bounds
        .into_iter()
        .map(|b| {
            let min = metres(b.min_mm);
            let max = metres(b.max_mm);
            (min, [max[0] - min[0], max[1] - min[1], max[2] - min[2]])
        })
        .unzip();
    // Edges only: boxes inside boxes must stay visible.
    Boxes3D::from_mins_and_sizes(mins, sizes).with_fill_mode(FillMode::MajorWireframe)
}

fn is_point(b: &BoxMm) -> bool {
    b.min_mm == b.max_mm
}

/// Millimetres to metres, as the viewer's world units.
fn metres(mm: [i64; 3]) -> [f32; 3] {
    mm.map(|v| (v as f64 / 1000.0) as f32)
}

fn centre(b: &BoxMm) -> [f32; 3] {
    let (min, max) = (metres(b.min_mm), metres(b.max_mm));
    [(min[0] + max[0]) / 2.0, (min[1] + max[1]) / 2.0, (min[2] + max[2]) / 2.0]
}

/// A subject as one entity path part: the viewer splits paths at `/`.
fn entity_part(subject: &str) -> String {
    let part: String = subject
        .trim_matches('/')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    if part.is_empty() { "_".to_owned() } else { part }
}

/// One colour per kind (the legend's, [`scene::kind_rgb`]).
pub fn kind_colour(kind: Kind) -> Color {
    let [r, g, b] = scene::kind_rgb(kind);
    Color::from_rgb(r, g, b)
}
