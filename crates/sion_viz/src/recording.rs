//! The Rerun recording (feature `rerun`): a memory drawn on the valid-time timeline, and an
//! answer drawn from its [`Scene`].

use std::collections::HashMap;

use nalgebra::{Isometry3, Point3, Quaternion, Translation3, UnitQuaternion};
use rerun::RecordingStream;
use rerun::archetypes::{
    Boxes3D, Image, LineStrips3D, Pinhole, Points3D, TextDocument, Transform3D, ViewCoordinates,
};
use rerun::components::{Color, FillMode};

use sion_ingest::Calibration;
use sion_ingest::cdr::Message as _;
use sion_ingest::cdr_media_type;
use sion_ingest::msgs::{self, OccupancyGrid};
use sion_ingest::tf::{TfBuffer, TfError};
use sion_store::log::blobs::BlobStore;
use sion_store::log::{Log, LogError};
use sion_verify::atom::{Atom, BlobRef, BoxMm, Interval, Kind, Payload};
use sion_verify::proof::{ProofFile, Tree};

use crate::frames::Pixels;
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
    /// Of those, atoms in other frames drawn through the transforms the memory holds.
    pub through_transforms: u64,
    /// Atoms in other frames not drawn, by frame and why (no transform connects the frame to
    /// the one drawn, or none near the atom's time).
    pub not_drawn: std::collections::BTreeMap<(String, String), u64>,
    /// Atoms in frames other than the one drawn that could not be placed (the sum of
    /// `not_drawn`).
    pub other_frames: u64,
    /// Atoms past the limit, not drawn.
    pub over_limit: u64,
    /// Map tiles drawn as occupied cells and as images.
    pub map_tiles: u64,
    /// Camera frames drawn as images.
    pub images: u64,
    /// Of those, frames drawn in 3D too, in their camera's frustum (calibration and transform
    /// known).
    pub frusta: u64,
    /// The cameras (their frames) whose frames were drawn.
    pub cameras: Vec<String>,
    /// Blobs that are missing, do not decode, or have an encoding not drawn.
    pub blobs_not_drawn: u64,
}

/// What [`draw_answer`] drew: the proof's tree nodes by what they are to the query.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AnswerDrawn {
    pub answer: u64,
    /// Camera frames of the answer drawn as pictures, and their cameras.
    pub frames: u64,
    pub cameras: Vec<String>,
    pub expanded: u64,
    pub pruned: u64,
    pub passed: u64,
    /// The proof file's size in bytes.
    pub bytes: usize,
    /// Why the proof does not verify, if it does not.
    pub rejected: Option<String>,
}

/// How long the transforms the memory holds are kept while drawing, behind the atom reached.
const TF_HISTORY_NS: i64 = 120_000_000_000;
/// How far from its nearest transform an atom may be placed.
const TF_TOLERANCE_NS: i64 = 500_000_000;

/// Draw the log's atoms in `frame`, at most `limit` of them, telling `progress` the position
/// reached now and then. Atoms in other frames are drawn through the transforms the memory
/// holds (its transform atoms, as a transform buffer would have them at the atom's time); those
/// that cannot be placed are counted by frame and reason. Camera frames are drawn as images,
/// and in 3D in their camera's frustum where the memory holds the camera's calibration.
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
    let mut tf = TfBuffer::new(TF_HISTORY_NS, TF_TOLERANCE_NS);
    let mut calibrations: HashMap<String, Calibration> = HashMap::new();
    let mut trajectories: std::collections::BTreeMap<String, Vec<(i64, [f32; 3])>> = Default::default();
    for entry in log.scan(0) {
        let (position, atom) = entry?;
        if position % 4096 == 0 {
            progress(position);
        }
        let p = atom.parts();
        if p.kind == Kind::Transform
            && let Some(t) = transform_of(&atom)
        {
            // A transform that does not hold (a bad rotation) is left out, as the ingest would.
            let _ =
                tf.insert(&p.frame, &p.subject, p.valid.from_ns, &t, p.valid.to_ns == Interval::OPEN_END_NS);
        }
        if let Some(c) = sion_ingest::calibration_of(&atom) {
            calibrations.insert(p.frame.clone(), c);
        }
        if drawn.atoms >= limit {
            drawn.over_limit += 1;
            continue;
        }
        let place = if p.frame == frame {
            Isometry3::identity()
        } else {
            match tf.lookup(frame, &p.frame, p.valid.from_ns) {
                Ok(place) => place,
                Err(e) => {
                    let why = match e {
                        TfError::Unconnected { .. } => {
                            format!("no transform connects it to {frame:?} at its time")
                        }
                        _ => "no transform near the atom's time".to_owned(),
                    };
                    *drawn.not_drawn.entry((p.frame.clone(), why)).or_default() += 1;
                    drawn.other_frames += 1;
                    continue;
                }
            }
        };
        if p.frame != frame {
            drawn.through_transforms += 1;
        }
        drawn.atoms += 1;
        rec.set_timestamp_nanos_since_epoch(TIMELINE, p.valid.from_ns);
        let path = format!("world/atoms/{}/{}", p.kind.as_str(), entity_part(&p.subject));
        let colour = kind_colour(p.kind);
        if is_point(&p.bounds) {
            let radius = if p.kind == Kind::Pose { 0.15 } else { 0.08 };
            let at = place * point(p.bounds.min_mm);
            rec.log(path, &Points3D::new([to_f32(&at)]).with_colors([colour]).with_radii([radius]))?;
            if p.kind == Kind::Pose {
                trajectories.entry(entity_part(&p.subject)).or_default().push((p.valid.from_ns, to_f32(&at)));
            }
        } else {
            rec.log(path, &placed_boxes(&place, [&p.bounds]).with_colors([colour]).with_radii([0.02]))?;
        }
        match p.kind {
            Kind::MapTile if p.frame == frame => draw_blob(rec, blobs, &atom, &mut drawn, draw_map_tile)?,
            Kind::Observation => {
                let Payload::Blob(blob) = &p.payload else { continue };
                let drew = match blobs.get(&blob.hash) {
                    Ok(bytes) => draw_camera_frame(
                        rec,
                        &blob.media_type,
                        &bytes,
                        &tf,
                        &calibrations,
                        frame,
                        &mut drawn,
                    )?,
                    Err(_) => false,
                };
                if !drew && !is_scan(&blob.media_type) {
                    drawn.blobs_not_drawn += 1;
                }
            }
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
    rec.log_static("memory/summary", &TextDocument::from_markdown(memory_summary(&drawn, frame)))?;
    rec.log_static("legend", &TextDocument::from_markdown(legend_markdown()))?;
    Ok(drawn)
}

/// What was drawn and what was not, and why: the "What is drawn" panel.
fn memory_summary(drawn: &MemoryDrawn, frame: &str) -> String {
    let mut out = format!(
        "# What is drawn\n\nEverything in the frame **{frame}**, in metres, on the timeline `{TIMELINE}`.\n\n\
         - {} atoms drawn, {} of them from other frames through the transforms the memory holds\n\
         - {} camera frames, {} of them in their camera's frustum ({})\n\
         - {} map tiles\n",
        drawn.atoms,
        drawn.through_transforms,
        drawn.images,
        drawn.frusta,
        if drawn.cameras.is_empty() { "no camera".to_owned() } else { drawn.cameras.join(", ") },
        drawn.map_tiles,
    );
    if drawn.over_limit > 0 {
        out.push_str(&format!("- {} atoms past the limit, not drawn\n", drawn.over_limit));
    }
    if !drawn.not_drawn.is_empty() {
        out.push_str("\n## Not drawn\n\n| frame | atoms | why |\n| --- | --- | --- |\n");
        for ((f, why), n) in &drawn.not_drawn {
            out.push_str(&format!("| {f} | {n} | {why} |\n"));
        }
    }
    if drawn.blobs_not_drawn > 0 {
        out.push_str(&format!(
            "\n{} payloads missing, sealed, or in an encoding not drawn\n",
            drawn.blobs_not_drawn
        ));
    }
    out
}

/// The legend as a table: what each colour means (the scene's, docs/VIZ.md).
pub fn legend_markdown() -> String {
    let mut out = "# Legend\n\n| colour | what |\n| --- | --- |\n".to_owned();
    for e in scene::legend() {
        let [r, g, b, _] = e.rgba;
        out.push_str(&format!("| `#{r:02x}{g:02x}{b:02x}` {} | {} |\n", colour_name(e.rgba), e.meaning));
    }
    out.push_str(
        "\nThe proof's layer (`world/proof`) is in the tab **… and the proof**: one click shows what \
         the check opened and what it passed over.\n",
    );
    out
}

/// A colour's name, for a legend read as text.
fn colour_name(rgba: [u8; 4]) -> &'static str {
    match rgba {
        [255, 255, 255, _] => "white",
        [40, 230, 90, _] => "green",
        [255, 80, 200, _] => "magenta",
        [200, 60, 255, _] => "purple",
        [180, 180, 60, _] => "olive",
        [110, 110, 140, _] => "slate",
        [0, 200, 255, _] => "cyan",
        [60, 120, 255, _] => "blue",
        [255, 50, 50, _] => "red",
        [255, 140, 60, _] => "orange",
        [255, 170, 0, _] => "amber",
        [150, 150, 150, _] => "grey",
        [120, 180, 255, _] => "pale blue",
        _ => "",
    }
}

/// The layout the recording carries: the 3D view large (a tab without the proof, the default,
/// and a tab with it), beside it the verdict, the frames that answered (one view per camera),
/// the legend and what was drawn; the time panel on valid time.
///
/// `answered`: the cameras are those of an answer's frames (`answer/frames/<camera>`, drawn by
/// [`draw_answer`]); otherwise every camera's frames (`frames/<camera>`).
pub fn send_blueprint(rec: &RecordingStream, cameras: &[String], answered: bool) -> Result<(), VizError> {
    use rerun::blueprint::{
        Blueprint, BlueprintActivation, Horizontal, Spatial2DView, Spatial3DView, Tabs, TextDocumentView,
        TimePanel, Vertical,
    };
    let world = Tabs::new([
        Spatial3DView::new("Memory and answer")
            .with_origin("world")
            .with_contents(["+ $origin/**", "- $origin/proof/**"])
            .into(),
        Spatial3DView::new("… and the proof").with_origin("world").into(),
    ]);
    let mut side: Vec<rerun::blueprint::ContainerLike> =
        vec![TextDocumentView::new("Verdict").with_origin("proof/summary").into()];
    for camera in cameras {
        let (title, origin) = if answered {
            (format!("Frames that answered: {camera}"), format!("answer/frames/{}", entity_part(camera)))
        } else {
            (format!("Camera: {camera}"), format!("frames/{}", entity_part(camera)))
        };
        side.push(Spatial2DView::new(title).with_origin(origin).into());
    }
    side.push(
        Tabs::new([
            TextDocumentView::new("Legend").with_origin("legend").into(),
            TextDocumentView::new("What is drawn").with_origin("memory/summary").into(),
        ])
        .into(),
    );
    let blueprint = Blueprint::new(
        Horizontal::new([world.into(), Vertical::new(side).into()]).with_column_shares([3.0, 1.0]),
    )
    .with_time_panel(TimePanel::new().with_timeline(TIMELINE));
    blueprint.send(rec, BlueprintActivation { make_active: true, make_default: true })?;
    Ok(())
}

/// How [`draw_answer`] has the blob of an answer's atom (its position, its reference): the
/// media type and bytes, opened for a sealed memory.
pub type OpenBlob<'a> = dyn Fn(u64, &BlobRef) -> Option<(String, Vec<u8>)> + 'a;

/// Draw a proof file: the query box, the answer, every node of the proof's tree walk (opened,
/// passed over, or a leaf entry that does not answer), and a summary saying whether it verified
/// (against `ledger_key`, the reader's; without one, only against the key the file names);
/// and the camera frames that answered on the timeline (`answer/frames/<camera>`), each as
/// `open` gives it (the blob of the atom at a position with its media type, opened for a
/// sealed memory; `None` when it cannot be had).
pub fn draw_answer(
    rec: &RecordingStream,
    file: &ProofFile,
    ledger_key: Option<&ed25519_dalek::VerifyingKey>,
    open: &OpenBlob<'_>,
) -> Result<AnswerDrawn, VizError> {
    let scene = Scene::of(file, ledger_key);
    let mut frames = 0;
    let mut cameras = Vec::new();
    for a in &scene.answer {
        let Some(blob) = &a.blob else { continue };
        let Some(picture) =
            open(a.position, blob).and_then(|(media_type, bytes)| picture(&media_type, &bytes))
        else {
            continue;
        };
        let camera = sion_verify::units::frame_name(&picture.frame).to_owned();
        rec.set_timestamp_nanos_since_epoch(TIMELINE, a.from_ns);
        log_picture(rec, &format!("answer/frames/{}", entity_part(&camera)), &picture.image)?;
        frames += 1;
        if !cameras.contains(&camera) {
            cameras.push(camera);
        }
    }
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
        frames,
        cameras,
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
    let asked = scene.asked().map(|a| format!("**Asked:** {a}\n\n")).unwrap_or_default();
    let summary = match &scene.verdict {
        Verdict::Verified { statement } => {
            format!("# ✅ The proof verifies\n\n{asked}**Proves:** {statement}\n")
        }
        Verdict::Rejected { why } => format!("# ❌ The proof does NOT verify\n\n{asked}{why}\n"),
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

/// A camera frame (a ROS Image in rgb8, bgr8 or mono8, or a CompressedImage in JPEG or PNG):
/// as a picture on the timeline (`frames/<camera>`), and in 3D in its camera's frustum
/// (`world/cameras/<camera>`) where the memory holds the camera's calibration and a transform
/// to `frame` at the frame's stamp.
fn draw_camera_frame(
    rec: &RecordingStream,
    media_type: &str,
    bytes: &[u8],
    tf: &TfBuffer,
    calibrations: &HashMap<String, Calibration>,
    frame: &str,
    drawn: &mut MemoryDrawn,
) -> Result<bool, VizError> {
    let Some(picture) = picture(media_type, bytes) else { return Ok(false) };
    let camera = sion_verify::units::frame_name(&picture.frame).to_owned();
    let part = entity_part(&camera);
    log_picture(rec, &format!("frames/{part}"), &picture.image)?;
    drawn.images += 1;
    if !drawn.cameras.contains(&camera) {
        drawn.cameras.push(camera.clone());
    }
    if let (Some(c), Ok(place)) = (calibrations.get(&camera), tf.lookup(frame, &camera, picture.stamp_ns)) {
        let t = place.translation.vector;
        let q = place.rotation.quaternion();
        let at = format!("world/cameras/{part}");
        rec.log(
            at.as_str(),
            &Transform3D::from_translation_rotation(
                [t.x as f32, t.y as f32, t.z as f32],
                rerun::Quaternion::from_xyzw([q.i as f32, q.j as f32, q.k as f32, q.w as f32]),
            ),
        )?;
        let [fx, fy, cx, cy] = c.k;
        // ROS cameras' optical frames: x right, y down, z forward (REP 103).
        rec.log(
            format!("{at}/image"),
            &Pinhole::from_focal_length_and_resolution(
                [fx as f32, fy as f32],
                [c.width as f32, c.height as f32],
            )
            .with_principal_point([cx as f32, cy as f32])
            .with_camera_xyz(rerun::components::ViewCoordinates::RDF)
            .with_image_plane_distance(1.0),
        )?;
        log_picture(rec, &format!("{at}/image"), &picture.image)?;
        drawn.frusta += 1;
    }
    Ok(true)
}

/// A decoded camera frame: the camera's frame, its stamp, and the picture to log.
struct Picture {
    frame: String,
    stamp_ns: i64,
    image: PictureData,
}

enum PictureData {
    Raw(Image),
    Encoded(rerun::archetypes::EncodedImage),
}

fn log_picture(rec: &RecordingStream, path: &str, image: &PictureData) -> Result<(), VizError> {
    match image {
        PictureData::Raw(i) => rec.log(path, i)?,
        PictureData::Encoded(i) => rec.log(path, i)?,
    }
    Ok(())
}

/// A camera frame blob as a picture to log, if it is one this draws.
fn picture(media_type: &str, bytes: &[u8]) -> Option<Picture> {
    let frame = crate::frames::decode(media_type, bytes)?;
    let image = match frame.pixels {
        Pixels::Rgb { width, height, data } => PictureData::Raw(Image::from_rgb24(data, [width, height])),
        Pixels::Gray { width, height, data } => PictureData::Raw(Image::from_l8(data, [width, height])),
        Pixels::Encoded { media_type, data } => {
            PictureData::Encoded(rerun::archetypes::EncodedImage::new(data).with_media_type(media_type))
        }
    };
    Some(Picture { frame: frame.camera, stamp_ns: frame.stamp_ns, image })
}

/// A scan or a cloud kept as a blob: not drawn as a picture, and not counted as one missing.
fn is_scan(media_type: &str) -> bool {
    media_type == cdr_media_type(msgs::LaserScan::TYPE)
        || media_type == cdr_media_type(msgs::PointCloud2::TYPE)
}

/// A transform atom's transform: its point is the child's origin in the parent frame, its
/// payload the rotation (four i32, x y z w, in parts per 10^9).
fn transform_of(atom: &Atom) -> Option<msgs::Transform> {
    let p = atom.parts();
    let Payload::Public(bytes) = &p.payload else { return None };
    if bytes.len() != 16 {
        return None;
    }
    let q: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])) / 1e9)
        .collect();
    let [x, y, z] = p.bounds.min_mm.map(|v| v as f64 / 1000.0);
    Some(msgs::Transform {
        translation: msgs::Vector3 { x, y, z },
        rotation: msgs::Quaternion { x: q[0], y: q[1], z: q[2], w: q[3] },
    })
}

fn point(mm: [i64; 3]) -> Point3<f64> {
    Point3::new(mm[0] as f64 / 1000.0, mm[1] as f64 / 1000.0, mm[2] as f64 / 1000.0)
}

fn to_f32(p: &Point3<f64>) -> [f32; 3] {
    [p.x as f32, p.y as f32, p.z as f32]
}

/// Boxes of another frame placed in the drawn one: each box's centre moved and the box turned.
fn placed_boxes<'a>(place: &Isometry3<f64>, bounds: impl IntoIterator<Item = &'a BoxMm>) -> Boxes3D {
    if *place == Isometry3::identity() {
        return boxes(bounds);
    }
    let (centres, halves): (Vec<[f32; 3]>, Vec<[f32; 3]>) = bounds
        .into_iter()
        .map(|b| {
            let (lo, hi) = (point(b.min_mm), point(b.max_mm));
            let centre = place * nalgebra::center(&lo, &hi);
            let half = (hi - lo) / 2.0;
            (to_f32(&centre), [half.x as f32, half.y as f32, half.z as f32])
        })
        .unzip();
    let q = place.rotation.quaternion();
    let turn = rerun::components::RotationQuat(rerun::Quaternion::from_xyzw([
        q.i as f32, q.j as f32, q.k as f32, q.w as f32,
    ]));
    let n = centres.len();
    Boxes3D::from_centers_and_half_sizes(centres, halves)
        .with_quaternions(std::iter::repeat_n(turn, n))
        .with_fill_mode(FillMode::MajorWireframe)
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
