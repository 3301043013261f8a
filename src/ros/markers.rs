//! Answers as `visualization_msgs/MarkerArray`, which RViz2 and Foxglove draw with no plugin
//! (docs/VIZ.md, "RViz2 and Foxglove"): every answered range or subject question on `~/answer`,
//! and, while `markers.around_m` is above 0, the memory around the robot on `~/around`.
//!
//! One array per answer, in the question's frame: a DELETEALL first (the last answer goes), then
//! one LINE_LIST per namespace: `question`, `answer/<kind>`, `proof/opened`,
//! `proof/passed_over`, `proof/not_answering`, and a `verdict` text. The proof's three
//! namespaces are the layer a user hides (RViz2: the display's Namespaces; Foxglove: the topic's
//! namespaces in the 3D panel).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use r2r::builtin_interfaces::msg::Time;
use r2r::geometry_msgs::msg::{Point, Pose, Quaternion, Vector3};
use r2r::std_msgs::msg::{ColorRGBA, Header};
use r2r::visualization_msgs::msg::{Marker, MarkerArray};
use tokio_util::sync::CancellationToken;

use super::params::Params;
use crate::atom::BoxMm;
use crate::brain::Readers;
use crate::index::geom::Query;
use crate::proof::ProofFile;
use crate::viz::scene::{self, Layer, Scene};

// visualization_msgs/Marker's constants.
const LINE_LIST: i32 = 5;
const TEXT_VIEW_FACING: i32 = 9;
const ADD: i32 = 0;
const DELETEALL: i32 = 3;

/// Boxes drawn in one array, at most (about 12 MB of points): a question over a whole memory
/// can answer with millions of atoms. The answer's atoms come first, then the proof's layers;
/// the verdict says how many were left out.
pub const MAX_BOXES: usize = 20_000;

/// Where the robot was last seen by the intake: its last pose atom in the fixed frame (its box
/// and the start of its valid time).
#[derive(Clone, Default)]
pub struct RobotAt {
    frame: String,
    at: Arc<Mutex<Option<(BoxMm, i64)>>>,
}

impl RobotAt {
    pub fn new(fixed_frame: &str) -> Self {
        Self { frame: crate::units::frame_name(fixed_frame).to_owned(), at: Arc::default() }
    }

    /// Note the last pose in the fixed frame among `atoms` (as appended).
    pub fn note(&self, atoms: &[crate::atom::Atom]) {
        let last = atoms
            .iter()
            .rev()
            .map(|a| a.parts())
            .find(|p| p.kind == crate::atom::Kind::Pose && p.frame == self.frame);
        if let Some(p) = last {
            *self.at.lock().unwrap_or_else(PoisonError::into_inner) = Some((p.bounds, p.valid.from_ns));
        }
    }

    fn get(&self) -> Option<(String, BoxMm, i64)> {
        let at = *self.at.lock().unwrap_or_else(PoisonError::into_inner);
        at.map(|(b, t)| (self.frame.clone(), b, t))
    }
}

fn colour([r, g, b, a]: [u8; 4]) -> ColorRGBA {
    ColorRGBA {
        r: f32::from(r) / 255.0,
        g: f32::from(g) / 255.0,
        b: f32::from(b) / 255.0,
        a: f32::from(a) / 255.0,
    }
}

fn point([x, y, z]: [f64; 3]) -> Point {
    Point { x, y, z }
}

fn marker(frame: &str, ns: String, kind: i32) -> Marker {
    Marker {
        // Stamp zero: RViz2 and Foxglove draw it with the latest transform of the frame.
        header: Header { stamp: Time { sec: 0, nanosec: 0 }, frame_id: frame.to_owned() },
        ns,
        id: 0,
        type_: kind,
        action: ADD,
        pose: Pose { orientation: Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }, ..Default::default() },
        ..Default::default()
    }
}

fn line_list(frame: &str, ns: String, boxes: &[BoxMm], rgba: [u8; 4], width_m: f64) -> Marker {
    let mut m = marker(frame, ns, LINE_LIST);
    m.scale = Vector3 { x: width_m, y: 0.0, z: 0.0 };
    m.color = colour(rgba);
    m.points = boxes
        .iter()
        .flat_map(|b| scene::edges_m(&scene::drawable(b)))
        .flat_map(|[p, q]| [point(p), point(q)])
        .collect();
    m
}

/// The markers of one answer. `title` names the question (`~/recall`, `around the robot`).
pub fn array(scene: &Scene, title: &str) -> MarkerArray {
    let frame = scene.frame.as_str();
    let mut markers = vec![Marker { action: DELETEALL, ..marker(frame, String::new(), LINE_LIST) }];
    let question = scene.drawn_question();
    if let Some(q) = &question {
        markers.push(line_list(
            frame,
            "question".into(),
            &[*q],
            scene::question_rgba(scene.verified()),
            0.05,
        ));
    }
    let mut left_out = 0;
    // By kind, the robot kinds in the legend's order, then any other in the answer's.
    let mut by_kind: Vec<(crate::atom::Kind, Vec<BoxMm>)> =
        scene::KINDS.iter().map(|k| (*k, Vec::new())).collect();
    // A subject answer can hold atoms of other frames: only the scene's frame is drawn here,
    // the others counted in the verdict.
    let elsewhere = scene.answer.iter().filter(|a| a.frame != frame).count();
    for a in scene.answer.iter().filter(|a| a.frame == frame) {
        match by_kind.iter_mut().find(|(k, _)| *k == a.kind) {
            Some((_, boxes)) => boxes.push(a.bounds),
            None => by_kind.push((a.kind, vec![a.bounds])),
        }
    }
    let mut budget = MAX_BOXES;
    let mut take = |boxes: Vec<BoxMm>, left_out: &mut usize| -> Vec<BoxMm> {
        let kept = boxes.len().min(budget);
        budget -= kept;
        *left_out += boxes.len() - kept;
        boxes.into_iter().take(kept).collect()
    };
    for (kind, boxes) in by_kind.into_iter().filter(|(_, b)| !b.is_empty()) {
        let boxes = take(boxes, &mut left_out);
        let [r, g, b] = scene::kind_rgb(kind);
        markers.push(line_list(frame, format!("answer/{}", kind.as_str()), &boxes, [r, g, b, 255], 0.03));
    }
    for layer in Layer::ALL {
        let boxes: Vec<BoxMm> = scene.walk.iter().filter(|w| w.layer == layer).map(|w| w.bounds).collect();
        if boxes.is_empty() {
            continue;
        }
        let boxes = take(boxes, &mut left_out);
        let width = if layer == Layer::Opened { 0.02 } else { 0.01 };
        markers.push(line_list(frame, format!("proof/{}", layer.name()), &boxes, layer.rgba(), width));
    }
    let mut text = marker(frame, "verdict".into(), TEXT_VIEW_FACING);
    // Above the question's box (or the answer's first atom), half a metre up.
    let at = question.or_else(|| scene.answer.first().map(|a| a.bounds)).map(|b| {
        let c = |i: usize| (b.min_mm[i] as f64 + b.max_mm[i] as f64) / 2000.0;
        [c(0), c(1), b.max_mm[2] as f64 / 1000.0 + 0.5]
    });
    text.pose.position = point(at.unwrap_or_default());
    text.scale = Vector3 { x: 0.0, y: 0.0, z: 0.3 };
    text.color = if scene.verified() { colour([60, 230, 90, 255]) } else { colour([255, 60, 60, 255]) };
    text.text = format!("{title}: {}", scene.headline());
    if elsewhere > 0 {
        text.text.push_str(&format!(" ({elsewhere} atoms in other frames not drawn)"));
    }
    if left_out > 0 {
        text.text.push_str(&format!(" ({left_out} boxes not drawn: at most {MAX_BOXES} in all)"));
    }
    markers.push(text);
    MarkerArray { markers }
}

/// Publish the markers of `file` (checked against the memory's ledger key); a failure to publish
/// (the node stopping) is only logged.
fn publish(publisher: &r2r::Publisher<MarkerArray>, readers: &Readers, file: &ProofFile, title: &str) {
    let scene = Scene::of(file, Some(&readers.ledger_key()));
    if let Err(e) = publisher.publish(&array(&scene, title)) {
        tracing::debug!("the answer's markers were not published: {e}");
    }
}

/// Draws answers on `~/answer` behind the services, one at a time, the latest first: a
/// service answers without waiting for its drawing (a proof is checked again to be drawn), and
/// a burst of questions costs one drawing, of the last.
#[derive(Clone)]
pub struct Drawer {
    latest: tokio::sync::watch::Sender<Option<Arc<(ProofFile, &'static str)>>>,
}

impl Drawer {
    pub fn start(publisher: r2r::Publisher<MarkerArray>, readers: Readers, stop: CancellationToken) -> Self {
        let (latest, mut rx) = tokio::sync::watch::channel(None::<Arc<(ProofFile, &'static str)>>);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    changed = rx.changed() => if changed.is_err() { return },
                }
                let Some(answer) = rx.borrow_and_update().clone() else { continue };
                let (publisher, readers) = (publisher.clone(), readers.clone());
                let drawn =
                    tokio::task::spawn_blocking(move || publish(&publisher, &readers, &answer.0, answer.1))
                        .await;
                if let Err(e) = drawn {
                    tracing::warn!("an answer was not drawn: {e}");
                }
            }
        });
        Self { latest }
    }

    /// Draw `file`, the answer to the question `title` names, soon.
    pub fn draw(&self, file: &ProofFile, title: &'static str) {
        // Nobody may be listening yet: the value is kept for the drawing task either way.
        self.latest.send_replace(Some(Arc::new((file.clone(), title))));
    }
}

/// While `markers.around_m` is above 0 (settable while the node runs), every
/// `markers.period_s`: what the memory holds within that many metres of the robot's last pose,
/// over the last `markers.around_s` seconds of valid time, proved, on `publisher`.
pub async fn publish_around(
    publisher: r2r::Publisher<MarkerArray>,
    readers: Readers,
    params: Arc<Mutex<Params>>,
    robot: RobotAt,
    stop: CancellationToken,
) {
    loop {
        let p = params.lock().unwrap_or_else(PoisonError::into_inner).markers.clone();
        let period = Duration::from_secs_f64(p.period_s.clamp(0.05, 3600.0));
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let radius = p.around_m;
        if !(radius.is_finite() && radius > 0.0) {
            continue;
        }
        let Some((frame, at, t)) = robot.get() else { continue };
        let r_mm = (radius.min(10_000.0) * 1000.0).round() as i64;
        let bounds = BoxMm {
            min_mm: at.min_mm.map(|v| v.saturating_sub(r_mm)),
            max_mm: at.max_mm.map(|v| v.saturating_add(r_mm)),
        };
        let back_ns = (p.around_s.clamp(0.0, 86_400.0) * 1e9).round() as i64;
        let (readers, publisher) = (readers.clone(), publisher.clone());
        let answered = tokio::task::spawn_blocking(move || {
            let query =
                Query::new(&frame, bounds, t.saturating_sub(back_ns), i64::MAX).map_err(|e| e.to_string())?;
            let file = readers.snapshot(None).and_then(|s| s.range(&query)).map_err(|e| e.to_string())?;
            publish(&publisher, &readers, &file, "around the robot");
            Ok::<_, String>(())
        })
        .await;
        match answered {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("the memory around the robot was not drawn: {e}"),
            Err(e) => tracing::warn!("the memory around the robot was not drawn: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::viz::scene::{Answered, Question, Verdict, WalkNode};

    #[test]
    fn an_answer_is_a_question_box_its_atoms_by_kind_the_proof_in_layers_and_a_verdict() {
        let b = |x: i64| BoxMm { min_mm: [x, 0, 0], max_mm: [x + 1000, 1000, 1000] };
        let atom = |kind, x| Answered {
            position: 0,
            kind,
            subject: "robot".into(),
            frame: "map".into(),
            bounds: b(x),
            from_ns: 0,
            to_ns: 1,
            blob: None,
        };
        let scene = Scene {
            frame: "map".into(),
            question: Some(Question { bounds: b(0), from_ns: 0, to_ns: 1 }),
            verdict: Verdict::Verified { statement: String::new() },
            kind: "range",
            head_size: 7,
            head_root: [0; 32],
            head_index: [0; 32],
            attested: true,
            bytes: 100,
            answer: vec![
                atom(crate::atom::Kind::Pose, 0),
                atom(crate::atom::Kind::Pose, 10),
                atom(crate::atom::Kind::Coverage, 0),
            ],
            walk: vec![WalkNode {
                tree: crate::proof::Tree::ShortLived,
                depth: 0,
                bounds: b(0),
                layer: Layer::Opened,
            }],
        };
        let a = array(&scene, "~/recall");
        let ns: Vec<&str> = a.markers.iter().map(|m| m.ns.as_str()).collect();
        assert_eq!(ns, ["", "question", "answer/pose", "answer/coverage", "proof/opened", "verdict"]);
        assert_eq!(a.markers[0].action, DELETEALL);
        assert!(a.markers.iter().all(|m| m.header.frame_id == "map"));
        // 12 edges, two points each, per box.
        assert_eq!(a.markers[2].points.len(), 2 * 24);
        assert_eq!(a.markers[3].points.len(), 24);
        assert!(a.markers[5].text.contains("✓ proof verifies: 3 atoms"), "{}", a.markers[5].text);
    }
}
