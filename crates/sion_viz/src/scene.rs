//! What a picture of an answer shows, whichever viewer draws it: the question's box, the answer's
//! atoms by kind, the verdict, and the proof's tree walk in three layers. The node's RViz
//! markers, the Foxglove scene in `sion export` and the Rerun recording are all drawn from one
//! [`Scene`], so they agree, and one [`legend`] says what every colour means.
//!
//! Everything here is the proof's, not the writer's: the walk is what verification rebuilds from
//! the proof alone (`RangeProof::verify_walk`, docs/PROOFS.md).

use ed25519_dalek::VerifyingKey;
use sion_verify::atom::{BlobRef, BoxMm, Kind, Payload};
use sion_verify::proof::{Claim, Proof, ProofFile, Reached, Tree};

/// Coordinates are drawn within ±10 km: a question about "everywhere" has `i64` corners, which
/// no viewer can place.
pub const DRAW_LIMIT_MM: i64 = 10_000_000;

/// A point atom (a pose, an IMU reading) is drawn as a box this far from its point on each
/// side (10 cm), so that it shows.
pub const POINT_HALF_MM: i64 = 100;

/// A picture of one proof file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scene {
    /// The frame the question was asked in (a range question's; else the answer's first atom's,
    /// else empty).
    pub frame: String,
    /// The range question, when the proof answers one.
    pub question: Option<Question>,
    /// What checking the proof found.
    pub verdict: Verdict,
    /// The proof's kind (`range`, `list`, `inclusion`, ...).
    pub kind: &'static str,
    /// The head the proof is against: size, log root, index root.
    pub head_size: u64,
    pub head_root: [u8; 32],
    pub head_index: [u8; 32],
    /// Whether the file carries the ledger's attestation of that head.
    pub attested: bool,
    /// The proof file's size in bytes.
    pub bytes: usize,
    /// The answer's atoms (in a range proof, as far as the walk got when it fails).
    pub answer: Vec<Answered>,
    /// The proof's tree walk, post-order, children before their parent.
    pub walk: Vec<WalkNode>,
}

/// A range question: a box in [`Scene::frame`] during `[from_ns, to_ns)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Question {
    pub bounds: BoxMm,
    pub from_ns: i64,
    pub to_ns: i64,
}

/// Whether the proof verifies, with the statement it proves or why it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Verified { statement: String },
    Rejected { why: String },
}

/// One atom of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub position: u64,
    pub kind: Kind,
    pub subject: String,
    pub frame: String,
    pub bounds: BoxMm,
    pub from_ns: i64,
    pub to_ns: i64,
    /// The blob it commits to (a camera frame, a scan, a map tile), if any.
    pub blob: Option<BlobRef>,
}

/// One node of the proof's tree walk other than an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkNode {
    pub tree: Tree,
    pub depth: usize,
    pub bounds: BoxMm,
    pub layer: Layer,
}

/// What a node of the walk is to the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// A node the walk opened: its box meets the question.
    Opened,
    /// A subtree passed over whole: its box misses the question.
    PassedOver,
    /// A leaf entry of an opened group that does not answer.
    NotAnswering,
}

impl Layer {
    pub const ALL: [Layer; 3] = [Layer::Opened, Layer::PassedOver, Layer::NotAnswering];

    /// Its name in entity paths, marker namespaces and legends.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Opened => "opened",
            Layer::PassedOver => "passed_over",
            Layer::NotAnswering => "not_answering",
        }
    }

    /// Its colour, RGBA.
    pub fn rgba(self) -> [u8; 4] {
        match self {
            Layer::Opened => [255, 170, 0, 255],
            Layer::PassedOver => [150, 150, 150, 160],
            Layer::NotAnswering => [120, 180, 255, 255],
        }
    }

    pub fn meaning(self) -> &'static str {
        match self {
            Layer::Opened => "proof: a tree node the check opened, because its box meets the question",
            Layer::PassedOver => {
                "proof: a subtree the check passed over whole, because its box misses the question"
            }
            Layer::NotAnswering => {
                "proof: an atom of an opened node that is not in the box and interval asked"
            }
        }
    }
}

/// The question's colour: white when the proof verifies, red when it does not.
pub fn question_rgba(verified: bool) -> [u8; 4] {
    if verified { [255, 255, 255, 255] } else { [255, 40, 40, 255] }
}

/// One colour per kind, the robot kinds the most distinct.
pub fn kind_rgb(kind: Kind) -> [u8; 3] {
    match kind {
        Kind::Pose => [255, 80, 200],
        Kind::Trajectory => [200, 60, 255],
        Kind::Transform => [180, 180, 60],
        Kind::MapTile => [110, 110, 140],
        Kind::Observation => [0, 200, 255],
        Kind::Coverage => [60, 120, 255],
        Kind::Conflict => [255, 50, 50],
        Kind::Revision => [255, 140, 60],
        _ => [220, 220, 220],
    }
}

/// The kinds a robot's memory holds, in the legend's order.
pub const KINDS: [Kind; 8] = [
    Kind::Pose,
    Kind::Trajectory,
    Kind::Transform,
    Kind::MapTile,
    Kind::Observation,
    Kind::Coverage,
    Kind::Conflict,
    Kind::Revision,
];

/// One line of the legend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegendEntry {
    pub name: String,
    pub rgba: [u8; 4],
    pub meaning: String,
}

/// What every colour of a picture means: the question, each kind of atom, each proof layer.
pub fn legend() -> Vec<LegendEntry> {
    let mut out = vec![
        LegendEntry {
            name: "question".into(),
            rgba: question_rgba(true),
            meaning: "the box asked about (red when the proof does not verify)".into(),
        },
        LegendEntry {
            name: "answer".into(),
            rgba: ANSWER_RGBA,
            meaning: "an atom of the answer (in the box, during the interval)".into(),
        },
    ];
    for kind in KINDS {
        let [r, g, b] = kind_rgb(kind);
        out.push(LegendEntry {
            name: kind.as_str().into(),
            rgba: [r, g, b, 255],
            meaning: {
                let name = kind.as_str().replace('_', " ");
                let a = if name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
                format!("{a} {name} atom")
            },
        });
    }
    for layer in Layer::ALL {
        out.push(LegendEntry {
            name: layer.name().into(),
            rgba: layer.rgba(),
            meaning: layer.meaning().into(),
        });
    }
    out
}

/// The answer's colour where one colour marks it (the Rerun picture; markers colour by kind).
pub const ANSWER_RGBA: [u8; 4] = [40, 230, 90, 255];

impl Scene {
    /// Check `file` (against `ledger_key` when given, else against the key it names) and
    /// rebuild what its proof shows. A proof that does not verify is drawn as far as its walk
    /// goes.
    pub fn of(file: &ProofFile, ledger_key: Option<&VerifyingKey>) -> Scene {
        let verified = file.verify(ledger_key);
        let mut walked = Vec::new();
        let (head, question, frame, answer) = match &file.proof {
            Proof::Range { head, range, .. } => {
                let answer = range.verify_walk(&head.index, head.size, |node| walked.push(node));
                let q = &range.query;
                let question = Question { bounds: q.bounds, from_ns: q.from_ns, to_ns: q.to_ns };
                (head, Some(question), q.frame.clone(), answer.unwrap_or_default())
            }
            Proof::List { head, .. }
            | Proof::Inclusion { head, .. }
            | Proof::Omission { head, .. }
            | Proof::Recorded { head, .. }
            | Proof::Latest { head, .. }
            | Proof::Nearest { head, .. }
            | Proof::Count { head, .. }
            | Proof::CellOmission { head, .. } => {
                let atoms = match &verified {
                    Ok(v) => match &v.claim {
                        Claim::Range { atoms, .. } | Claim::List { atoms, .. } => atoms.clone(),
                        Claim::Included { position, atom }
                        | Claim::Recorded { position, atom, .. }
                        | Claim::CellOmitted { position, atom, .. }
                        | Claim::Latest { atom: Some((position, atom)), .. } => {
                            vec![(*position, (**atom).clone())]
                        }
                        Claim::Nearest { atoms, .. } => {
                            atoms.iter().map(|(p, a, _)| (*p, a.clone())).collect()
                        }
                        _ => Vec::new(),
                    },
                    Err(_) => Vec::new(),
                };
                // A latest or count question is a box and an interval, drawn as a range
                // question's is.
                let asked = match &file.proof {
                    Proof::Latest { latest, .. } => Some(&latest.query),
                    Proof::Count { count, .. } => Some(&count.query),
                    _ => None,
                };
                let question =
                    asked.map(|q| Question { bounds: q.bounds, from_ns: q.from_ns, to_ns: q.to_ns });
                let frame = match &file.proof {
                    Proof::Latest { latest, .. } => latest.query.frame.clone(),
                    Proof::Count { count, .. } => count.query.frame.clone(),
                    Proof::Nearest { nearest, .. } => nearest.query.frame.clone(),
                    _ => atoms.first().map(|(_, a)| a.parts().frame.clone()).unwrap_or_default(),
                };
                (head, question, frame, atoms)
            }
            Proof::Consistency { head, .. } => (head, None, String::new(), Vec::new()),
        };
        let answer = answer
            .iter()
            .map(|(position, atom)| {
                let p = atom.parts();
                Answered {
                    position: *position,
                    kind: p.kind,
                    subject: p.subject.clone(),
                    frame: p.frame.clone(),
                    bounds: p.bounds,
                    from_ns: p.valid.from_ns,
                    to_ns: p.valid.to_ns,
                    blob: match &p.payload {
                        Payload::Blob(b) => Some(b.clone()),
                        _ => None,
                    },
                }
            })
            .collect();
        let walk = walked
            .iter()
            .filter_map(|w| {
                let layer = match w.reached {
                    Reached::Expanded => Layer::Opened,
                    Reached::Pruned => Layer::PassedOver,
                    // Taken whole by its tally: opened as far as a count needs.
                    Reached::Whole => Layer::Opened,
                    Reached::Passed(_) => Layer::NotAnswering,
                    Reached::Answer(_) => return None,
                };
                let bounds = BoxMm { min_mm: w.bbox.min_mm, max_mm: w.bbox.max_mm };
                Some(WalkNode { tree: w.tree, depth: w.depth, bounds, layer })
            })
            .collect();
        Scene {
            frame,
            question,
            verdict: match &verified {
                Ok(v) => Verdict::Verified { statement: v.statement() },
                Err(e) => Verdict::Rejected { why: e.to_string() },
            },
            kind: file.proof.kind(),
            head_size: head.size,
            head_root: head.root,
            head_index: head.index,
            attested: file.attestation.is_some(),
            bytes: file.encode().len(),
            answer,
            walk,
        }
    }

    pub fn verified(&self) -> bool {
        matches!(self.verdict, Verdict::Verified { .. })
    }

    /// The question in metres and UTC (`frame "map", [0, 0, -1]..[10, 8, 3] m, 2026-01-01T… ..
    /// 2026-01-01T… (UTC)`), when the proof answers one.
    pub fn asked(&self) -> Option<String> {
        let q = self.question?;
        let query = sion_verify::index::geom::Query {
            frame: self.frame.clone(),
            bounds: q.bounds,
            from_ns: q.from_ns,
            to_ns: q.to_ns,
            kinds: sion_verify::index::geom::ALL_KINDS,
            subject: None,
        };
        Some(format!("{} (UTC)", sion_verify::units::show_query(&query)))
    }

    /// How many nodes of the walk are in `layer`.
    pub fn count(&self, layer: Layer) -> usize {
        self.walk.iter().filter(|w| w.layer == layer).count()
    }

    /// The verdict in one line, for a label in the scene.
    pub fn headline(&self) -> String {
        let atoms = match self.answer.len() {
            1 => "1 atom".to_owned(),
            n => format!("{n} atoms"),
        };
        match &self.verdict {
            // Only an answer (a range or a list) is complete; other proofs prove one fact.
            Verdict::Verified { .. } if matches!(self.kind, "range" | "list") => {
                format!("✓ proof verifies: {atoms}, complete, as of head {}", self.head_size)
            }
            Verdict::Verified { .. } => {
                format!("✓ proof verifies: a {} proof, as of head {}", self.kind, self.head_size)
            }
            Verdict::Rejected { why } => format!("✗ proof does NOT verify: {why}"),
        }
    }

    /// The question's box as drawn: where the question is larger than everything the proof
    /// shows (a question about "everywhere"), the part of it around what is shown, grown by a
    /// metre; always within [`DRAW_LIMIT_MM`].
    pub fn drawn_question(&self) -> Option<BoxMm> {
        let q = self.question?.bounds;
        let shown = self.answer.iter().map(|a| a.bounds).chain(self.walk.iter().map(|w| w.bounds));
        let extent = shown.map(|b| clamp(&b)).reduce(|a, b| union(&a, &b)).map(|e| grow(&e, 1000));
        let within = extent.and_then(|e| intersect(&q, &e));
        Some(clamp(&within.unwrap_or(q)))
    }
}

/// A box as drawn: within [`DRAW_LIMIT_MM`], and at least `2 × POINT_HALF_MM` thick along each
/// axis.
pub fn drawable(b: &BoxMm) -> BoxMm {
    at_least(&clamp(b), POINT_HALF_MM)
}

fn clamp(b: &BoxMm) -> BoxMm {
    let c = |v: i64| v.clamp(-DRAW_LIMIT_MM, DRAW_LIMIT_MM);
    BoxMm { min_mm: b.min_mm.map(c), max_mm: b.max_mm.map(c) }
}

fn union(a: &BoxMm, b: &BoxMm) -> BoxMm {
    BoxMm {
        min_mm: [0, 1, 2].map(|i| a.min_mm[i].min(b.min_mm[i])),
        max_mm: [0, 1, 2].map(|i| a.max_mm[i].max(b.max_mm[i])),
    }
}

fn intersect(a: &BoxMm, b: &BoxMm) -> Option<BoxMm> {
    let out = BoxMm {
        min_mm: [0, 1, 2].map(|i| a.min_mm[i].max(b.min_mm[i])),
        max_mm: [0, 1, 2].map(|i| a.max_mm[i].min(b.max_mm[i])),
    };
    (0..3).all(|i| out.min_mm[i] <= out.max_mm[i]).then_some(out)
}

fn grow(b: &BoxMm, by: i64) -> BoxMm {
    BoxMm { min_mm: b.min_mm.map(|v| v.saturating_sub(by)), max_mm: b.max_mm.map(|v| v.saturating_add(by)) }
}

/// The box grown, where it is thinner than `2 × half_mm` along an axis, to that thickness.
pub fn at_least(b: &BoxMm, half_mm: i64) -> BoxMm {
    let mut out = *b;
    for a in 0..3 {
        if b.max_mm[a].saturating_sub(b.min_mm[a]) < 2 * half_mm {
            let mid = b.min_mm[a] / 2 + b.max_mm[a] / 2;
            out.min_mm[a] = mid.saturating_sub(half_mm);
            out.max_mm[a] = mid.saturating_add(half_mm);
        }
    }
    out
}

/// The twelve edges of a box, as pairs of corners in metres: what a line list draws.
pub fn edges_m(b: &BoxMm) -> [[[f64; 3]; 2]; 12] {
    let lo = b.min_mm.map(|v| v as f64 / 1000.0);
    let hi = b.max_mm.map(|v| v as f64 / 1000.0);
    let corner = |i: usize| {
        [
            if i & 1 == 0 { lo[0] } else { hi[0] },
            if i & 2 == 0 { lo[1] } else { hi[1] },
            if i & 4 == 0 { lo[2] } else { hi[2] },
        ]
    };
    // Corners differing in one bit are joined.
    const EDGES: [(usize, usize); 12] =
        [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7)];
    EDGES.map(|(a, b)| [corner(a), corner(b)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_about_everywhere_is_drawn_around_what_the_proof_shows() {
        let everywhere = BoxMm { min_mm: [i64::MIN; 3], max_mm: [i64::MAX; 3] };
        let mut scene = Scene {
            frame: "map".into(),
            question: Some(Question { bounds: everywhere, from_ns: 0, to_ns: 1 }),
            verdict: Verdict::Verified { statement: String::new() },
            kind: "range",
            head_size: 1,
            head_root: [0; 32],
            head_index: [0; 32],
            attested: false,
            bytes: 0,
            answer: Vec::new(),
            walk: Vec::new(),
        };
        let all = scene.drawn_question().unwrap();
        assert_eq!(all.min_mm, [-DRAW_LIMIT_MM; 3]);
        scene.walk.push(WalkNode {
            tree: Tree::ShortLived,
            depth: 0,
            bounds: BoxMm { min_mm: [0, 0, 0], max_mm: [5000, 4000, 0] },
            layer: Layer::PassedOver,
        });
        let around = scene.drawn_question().unwrap();
        assert_eq!(around, BoxMm { min_mm: [-1000, -1000, -1000], max_mm: [6000, 5000, 1000] });
    }

    #[test]
    fn every_box_has_twelve_edges_of_its_sizes() {
        let b = BoxMm { min_mm: [0, 0, 0], max_mm: [1000, 2000, 3000] };
        let mut lengths: Vec<i64> = edges_m(&b)
            .iter()
            .map(|[p, q]| ((0..3).map(|i| (q[i] - p[i]).abs()).sum::<f64>() * 1000.0) as i64)
            .collect();
        lengths.sort();
        assert_eq!(lengths, [1000, 1000, 1000, 1000, 2000, 2000, 2000, 2000, 3000, 3000, 3000, 3000]);
    }

    #[test]
    fn the_legend_names_every_colour_once() {
        let legend = legend();
        let mut names: Vec<&str> = legend.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), legend.len());
        assert_eq!(legend.len(), 2 + KINDS.len() + Layer::ALL.len());
    }
}
