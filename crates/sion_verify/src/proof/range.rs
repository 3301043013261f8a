//! Range proofs: "everything recorded in this box during this interval, as of this head"
//! (docs/PROOFS.md, "Range proof"). The answer's atoms travel with the proof; the proof is the
//! walk of the frame's trees that the query reached, and the frames tree path above it.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{VerifyError, parallel};
use crate::atom::{Atom, BoxMm};
use crate::index::critbit;
use crate::index::geom::ALL_KINDS;
use crate::index::geom::{Query, SpaceTime};
use crate::index::tree::{Entry, GROUP, GroupEntry, Step, Summary, Tally, group_summary, group_summary_v2};
use crate::index::{
    FrameWitness, Neighbour, PlaceLeaf, Places, RangeAnswer, SubjectPlace, Version, encode_frame,
    frames_commitment, index_root, place_leaf_digest, subject_key,
};
use crate::merkle::{Blake3, Digest, TreeHasher as _, root_from_inclusion};
use crate::wire::{Put as _, Reader, WireError};

const MAX_DEPTH: usize = 256;
const MAX_PATH: usize = 64;

mod tag {
    pub const PRUNED: u8 = 0;
    pub const INTERIOR: u8 = 1;
    /// A leaf group of `k` entries: `2 | (k − 1) << 2 | hits << 4`, bit `j` of `hits` set when
    /// entry `j` answers the query.
    pub const GROUP: u8 = 2;
    /// A subtree taken whole (a count proof's), coded as a pruned one.
    pub const WHOLE: u8 = 3;
}

/// A range query's answer and its proof, as the index gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeProof {
    /// The question: frame, box and interval.
    pub query: Query,
    /// The answer: (position, atom bytes), ascending by position.
    pub atoms: Vec<(u64, Vec<u8>)>,
    /// What shows the answer complete: the frame's walks, its place in the frames tree and the
    /// map roots.
    pub answer: RangeAnswer,
}

/// Which of a frame's two trees a walked node is in (docs/INDEX.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    /// Atoms valid for at most an hour (`to − from <= 3_600_000_000_000` ns), by hour, then cell.
    ShortLived,
    /// Atoms valid for longer, by cell.
    LongLived,
}

/// What a node of a proof's tree walk is to the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// An interior node or leaf group the walk opened, because its box meets the query.
    Expanded,
    /// A subtree the walk passed over whole: its box does not meet the query.
    Pruned,
    /// A subtree a count took whole by its tally: it lies inside the question.
    Whole,
    /// A leaf entry that answers the query: the atom at this position is in the answer.
    Answer(u64),
    /// A leaf entry in an opened group that does not answer the query.
    Passed(u64),
}

/// One node of a range proof's tree walk as verification rebuilds it: what a picture of the
/// proof draws (sion viz). Nodes come in post-order, children before their parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    /// The tree the node is in.
    pub tree: Tree,
    /// Its depth: the walk's root is at 0, a group's entries one below the group.
    pub depth: usize,
    /// Its box (an entry's: its atom's box and valid interval).
    pub bbox: SpaceTime,
    /// What it is to the query.
    pub reached: Reached,
}

/// What a tree walk may pass over whole and leave out of its answer: for a range proof, what
/// misses its query; for a latest or nearest proof, also what ranks below its answer
/// (docs/PROOFS.md, kinds 7 and 8). `Err` says why not, as the refusal puts it.
pub(crate) trait Rule: Sync {
    /// Whether a subtree with this box and tally may be passed over (a version 2 walk's tally
    /// names every kind: it has none).
    fn pass(&self, s: &Summary) -> Result<(), String>;
    /// Whether this leaf entry, not in the answer, may be left out.
    fn leave(&self, entry: &Entry) -> Result<(), String>;
    /// Whether a subtree may be taken whole by its tally (only a count proof's may).
    fn whole(&self, _: &Summary) -> Result<(), String> {
        Err("a subtree taken whole: only a count proof takes one".into())
    }
}

/// A range proof's rule: what misses the query.
impl Rule for Query {
    fn pass(&self, s: &Summary) -> Result<(), String> {
        if s.bbox.meets(self) && s.tally.kinds & self.kinds != 0 {
            Err("a subtree passed over meets the query".into())
        } else {
            Ok(())
        }
    }
    fn leave(&self, e: &Entry) -> Result<(), String> {
        if e.bbox.meets(self) && self.asks_kind(e.kind) {
            Err(format!("position {} answers the query but is left out", e.position))
        } else {
            Ok(())
        }
    }
}

/// A box's eight coordinates as differences from the box it lies in: each minimum (x, y, z,
/// from) minus the reference's, the reference's maximum (x, y, z, to) minus each maximum. A box
/// inside its reference has no negative difference, and one sharing a side with it a zero.
fn box_differences(b: &SpaceTime, reference: &SpaceTime) -> [i64; 8] {
    let (r, mut d) = (reference, [0i64; 8]);
    for a in 0..3 {
        d[a] = b.min_mm[a].wrapping_sub(r.min_mm[a]);
        d[4 + a] = r.max_mm[a].wrapping_sub(b.max_mm[a]);
    }
    d[3] = b.from_ns.wrapping_sub(r.from_ns);
    d[7] = r.to_ns.wrapping_sub(b.to_ns);
    d
}

/// A box against its reference: a byte whose bit `i` says difference `i` is not zero, then the
/// zigzag of each such difference.
fn put_box(out: &mut Vec<u8>, b: &SpaceTime, reference: &SpaceTime) {
    let d = box_differences(b, reference);
    let mask = (0..8).filter(|&i| d[i] != 0).fold(0u8, |m, i| m | (1 << i));
    out.put_u8(mask);
    for v in d.into_iter().filter(|&v| v != 0) {
        out.put_zigzag(v);
    }
}

fn read_box(r: &mut Reader<'_>, reference: &SpaceTime) -> Result<SpaceTime, WireError> {
    let mask = r.u8("box")?;
    let mut d = [0i64; 8];
    for (i, v) in d.iter_mut().enumerate() {
        if mask & (1 << i) != 0 {
            *v = r.zigzag("box")?;
            if *v == 0 {
                // A zero has one encoding: its mask bit clear.
                return Err(WireError::Invalid { field: "box", problem: "a zero difference coded".into() });
            }
        }
    }
    let rf = reference;
    let mut b = SpaceTime::ZERO;
    for a in 0..3 {
        b.min_mm[a] = rf.min_mm[a].wrapping_add(d[a]);
        b.max_mm[a] = rf.max_mm[a].wrapping_sub(d[4 + a]);
    }
    b.from_ns = rf.from_ns.wrapping_add(d[3]);
    b.to_ns = rf.to_ns.wrapping_sub(d[7]);
    Ok(b)
}

fn put_path(out: &mut Vec<u8>, path: &[Digest]) {
    out.put_u8(path.len() as u8);
    for d in path {
        out.put_bytes(d);
    }
}

fn read_path(r: &mut Reader<'_>) -> Result<Vec<Digest>, WireError> {
    let n = usize::from(r.u8("path")?);
    if n > MAX_PATH {
        return Err(WireError::Invalid { field: "path", problem: format!("{n} nodes") });
    }
    (0..n).map(|_| r.array("path")).collect()
}

/// The query: its frame, then the zigzag of each minimum (x, y, z), of each extent
/// (max − min), of `from` and of `to − from` (wrapping i64 arithmetic); under index version 3
/// and later then the varint of the kinds asked about, and under version 4 the subject asked
/// about (str16; empty when the question is about every subject).
pub(crate) fn put_query(out: &mut Vec<u8>, q: &Query, version: Version) {
    out.put_str8(&q.frame);
    let b = &q.bounds;
    for a in 0..3 {
        out.put_zigzag(b.min_mm[a]);
    }
    for a in 0..3 {
        out.put_zigzag(b.max_mm[a].wrapping_sub(b.min_mm[a]));
    }
    out.put_zigzag(q.from_ns);
    out.put_zigzag(q.to_ns.wrapping_sub(q.from_ns));
    if version.tallied() {
        out.put_varint(u64::from(q.kinds));
    }
    if version >= Version::V4 {
        out.put_str16(q.subject.as_deref().unwrap_or_default());
    }
}

pub(crate) fn read_query(r: &mut Reader<'_>, version: Version) -> Result<Query, WireError> {
    let frame = r.str8("frame")?;
    let mut bounds = BoxMm { min_mm: [0; 3], max_mm: [0; 3] };
    for a in 0..3 {
        bounds.min_mm[a] = r.zigzag("box")?;
    }
    for a in 0..3 {
        bounds.max_mm[a] = bounds.min_mm[a].wrapping_add(r.zigzag("box")?);
    }
    let from = r.zigzag("from")?;
    let to = from.wrapping_add(r.zigzag("to")?);
    if to <= from {
        return Err(WireError::Invalid {
            field: "to",
            problem: "a stored query interval is never empty".into(),
        });
    }
    let kinds = match version {
        Version::V2 => ALL_KINDS,
        Version::V3 | Version::V4 => {
            let v = r.varint("kinds")?;
            u32::try_from(v).unwrap_or(u32::MAX)
        }
    };
    let subject = if version >= Version::V4 { r.str16("subject")? } else { String::new() };
    let invalid =
        |e: crate::index::geom::QueryError| WireError::Invalid { field: "query", problem: e.to_string() };
    let q = Query::new(&frame, bounds, from, to).and_then(|q| q.with_kinds(kinds)).map_err(invalid)?;
    if subject.is_empty() { Ok(q) } else { q.with_subject(&subject).map_err(invalid) }
}

impl RangeProof {
    /// Append the proof's body (docs/PROOFS.md, kind 3).
    pub fn put(&self, out: &mut Vec<u8>) {
        put_query(out, &self.query, self.answer.version);
        out.put_varint(self.atoms.len() as u64);
        for (position, bytes) in &self.atoms {
            out.put_varint(*position);
            out.put_bytes32(bytes);
        }
        put_index_part(out, &self.answer);
    }

    /// Read a body as [`RangeProof::put`] writes it; refuses an ill-formed query, a walk node
    /// deeper than 256 and a frames tree path of more than 64 nodes.
    pub fn read(r: &mut Reader<'_>, version: Version) -> Result<Self, WireError> {
        let query = read_query(r, version)?;
        let n = r.varint("atoms")?;
        if n > r.remaining() as u64 {
            return Err(WireError::Truncated("atoms"));
        }
        let mut atoms = Vec::with_capacity(n as usize);
        for _ in 0..n {
            atoms.push((
                r.varint("position")?,
                r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
            ));
        }
        let positions = atoms.iter().map(|(p, _)| *p).collect();
        let answer = read_index_part(r, positions, version, query.subject.is_some())?;
        Ok(Self { query, atoms, answer })
    }

    /// Check the proof against an index root and log size; returns the answer's atoms.
    /// Big answers are decoded on every core.
    pub fn verify(
        &self,
        index_root_expected: &Digest,
        log_size: u64,
    ) -> Result<Vec<(u64, Atom)>, VerifyError> {
        self.check(index_root_expected, log_size, None)
    }

    /// [`Self::verify`], handing each node of the tree walks to `seen` as it is checked (in
    /// post-order, on this thread).
    pub fn verify_walk(
        &self,
        index_root_expected: &Digest,
        log_size: u64,
        mut seen: impl FnMut(Walked),
    ) -> Result<Vec<(u64, Atom)>, VerifyError> {
        self.check(index_root_expected, log_size, Some(&mut seen))
    }

    fn check(
        &self,
        index_root_expected: &Digest,
        log_size: u64,
        seen: Option<&mut dyn FnMut(Walked)>,
    ) -> Result<Vec<(u64, Atom)>, VerifyError> {
        let q = &self.query;
        // Decoding (and hashing) the answer's atoms is a third of the work: for big answers, on
        // every core. Each atom is decoded beside its position, where it stays (an atom is some
        // 350 bytes: moving it between lists was a tenth of a big proof's check).
        let decode = |(position, bytes): &(u64, Vec<u8>)| {
            Atom::decode(bytes).map(|a| (*position, a)).map_err(|e| VerifyError::Atom(e.to_string()))
        };
        let decoded: Vec<(u64, Atom)> = if self.atoms.len() >= PARALLEL_ATOMS {
            parallel::map(&self.atoms, decode)?
        } else {
            // At its final size (a `collect` of results grows its list, copying it).
            let mut out = Vec::with_capacity(self.atoms.len());
            for item in &self.atoms {
                out.push(decode(item)?);
            }
            out
        };
        let mut last = None;
        for (position, atom) in &decoded {
            if last.is_some_and(|l| l >= *position) {
                return Err(VerifyError::Range("answer positions are not strictly ascending".into()));
            }
            last = Some(*position);
            below_head(*position, log_size)?;
            if !q.matches(atom.parts()) {
                return Err(VerifyError::Range(format!(
                    "the atom at position {position} does not answer the query"
                )));
            }
        }
        let answer =
            Answer { used: decoded.iter().map(|_| AtomicBool::new(false)).collect(), atoms: decoded };
        check_walks(q.into(), q, answer, &self.answer, index_root_expected, log_size, seen)
    }
}

/// An answer's position must be in the head's log.
pub(crate) fn below_head(position: u64, log_size: u64) -> Result<(), VerifyError> {
    if position >= log_size {
        return Err(VerifyError::Range(format!("position {position} is beyond the head ({log_size} atoms)")));
    }
    Ok(())
}

/// Which trees a proof's walks are of: a frame's own, or one subject's in that frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trees<'a> {
    pub frame: &'a str,
    pub subject: Option<&'a str>,
}

impl<'a> From<&'a Query> for Trees<'a> {
    fn from(q: &'a Query) -> Self {
        Trees { frame: &q.frame, subject: q.subject.as_deref() }
    }
}

/// Replay a proof's walks under `rule`, check that they reached every atom of the answer, and
/// that the frames tree and the maps give the head's index root (docs/PROOFS.md, kind 3 steps
/// 2 to 5; kinds 7 and 8 the same). Returns the answer's atoms by ascending position.
pub(crate) fn check_walks(
    trees: Trees<'_>,
    rule: &dyn Rule,
    answer: Answer,
    a: &RangeAnswer,
    index_root_expected: &Digest,
    log_size: u64,
    mut seen: Option<&mut dyn FnMut(Walked)>,
) -> Result<Vec<(u64, Atom)>, VerifyError> {
    let mut summaries = [None, None];
    let walks = [(Tree::ShortLived, &a.short), (Tree::LongLived, &a.long)];
    for ((tree, walk), summary) in walks.into_iter().zip(summaries.iter_mut()) {
        if let Some(steps) = walk {
            let walker = Walker { steps, version: a.version, rule, log_size, tree, answer: &answer };
            let (s, end) = walker.replay(0, 0, &mut seen)?;
            if end != steps.len() {
                return Err(VerifyError::Range("the tree walk has steps left over".into()));
            }
            *summary = Some(s);
        }
    }
    if let Some(i) = answer.used.iter().position(|used| !used.load(Ordering::Relaxed)) {
        let p = answer.atoms[i].0;
        return Err(VerifyError::Range(format!("the atom at position {p} is not in the index")));
    }
    let frame = trees.frame;
    let frames_root = match &a.frame {
        FrameWitness::Present { index, path } => {
            let entry = encode_frame(a.version, frame, summaries[0], summaries[1]);
            frames_root_from(*index, a.frames, &entry, path)?
        }
        FrameWitness::Absent { left, right } => {
            if a.short.is_some() || a.long.is_some() || !answer.atoms.is_empty() {
                return Err(VerifyError::Range("an absent frame has no trees and no answer".into()));
            }
            absent_frame_root(frame, a.frames, left.as_ref(), right.as_ref())?
        }
    };
    let (frames, commitment) = match (&a.places, trees.subject) {
        (Places::Before, None) if a.version < Version::V4 => (a.frames, frames_root),
        (Places::Root(places), None) if a.version >= Version::V4 => {
            (a.frames, frames_commitment(&frames_root, places))
        }
        (Places::Subject(place), Some(subject)) if a.version >= Version::V4 => {
            let places = places_root(subject, place, a, frames_root)?;
            (place.frames, frames_commitment(&place.frames_root, &places))
        }
        _ => return Err(VerifyError::Range("the places map's part does not fit the question".into())),
    };
    let root = index_root(frames, &commitment, &a.subjects_root, &a.links_root);
    if root != *index_root_expected {
        return Err(VerifyError::IndexRoot);
    }
    Ok(answer.atoms)
}

/// The places map's root, from the leaf a search for the subject's key ends at (version 4).
/// Its own leaf holds the frames tree the walks recomputed (`a.frames` leaves, root
/// `frames_root`); another's, or an empty map, shows the subject has no atom, and the walks
/// then are of an empty frames tree.
fn places_root(
    subject: &str,
    place: &SubjectPlace,
    a: &RangeAnswer,
    frames_root: Digest,
) -> Result<Digest, VerifyError> {
    let key = subject_key(subject);
    let (leaf_key, leaf) = match &place.leaf {
        PlaceLeaf::Found => (key, place_leaf_digest(&key, a.frames, &frames_root)),
        PlaceLeaf::Empty => {
            if !place.path.is_empty() {
                return Err(VerifyError::Range("an empty places map has no path".into()));
            }
            return Ok(critbit::empty_digest());
        }
        PlaceLeaf::Other { key: other, frames, root } => {
            if *other == key {
                return Err(VerifyError::Range("the subject's own place is given as another's".into()));
            }
            (*other, place_leaf_digest(other, *frames, root))
        }
    };
    critbit::root_from_path(&key, &leaf_key, leaf, &place.path).ok_or_else(|| {
        VerifyError::Range("the places map path is not a crit-bit path for the subject".into())
    })
}

/// The part of a range, latest or nearest proof after its answer: the frames tree witness, the
/// map roots and the two walks (docs/PROOFS.md, kind 3).
pub(crate) fn put_index_part(out: &mut Vec<u8>, a: &RangeAnswer) {
    out.put_varint(a.frames);
    match &a.frame {
        FrameWitness::Present { index, path } => {
            out.put_u8(0);
            out.put_varint(*index);
            put_path(out, path);
        }
        FrameWitness::Absent { left, right } => {
            out.put_u8(1);
            for n in [left, right] {
                match n {
                    None => out.put_u8(0),
                    Some(n) => {
                        out.put_u8(1);
                        out.put_varint(n.index);
                        out.put_bytes32(&n.entry);
                        put_path(out, &n.path);
                    }
                }
            }
        }
    }
    match &a.places {
        Places::Before => {}
        Places::Root(root) => out.put_bytes(root),
        Places::Subject(place) => {
            match &place.leaf {
                PlaceLeaf::Found => out.put_u8(0),
                PlaceLeaf::Empty => out.put_u8(1),
                PlaceLeaf::Other { key, frames, root } => {
                    out.put_u8(2);
                    out.put_bytes(key);
                    out.put_varint(*frames);
                    out.put_bytes(root);
                }
            }
            critbit::put_path(out, &place.path);
            out.put_varint(place.frames);
            out.put_bytes(&place.frames_root);
        }
    }
    out.put_bytes(&a.subjects_root);
    out.put_bytes(&a.links_root);
    for walk in [&a.short, &a.long] {
        match walk {
            None => out.put_u8(0),
            Some(steps) => {
                out.put_u8(1);
                let mut at = 0;
                while at < steps.len() {
                    put_walk(out, steps, &mut at, &SpaceTime::ZERO, a.version);
                }
            }
        }
    }
}

/// Read what [`put_index_part`] writes; `positions` are the answer's, ascending; `subject`:
/// whether the question names one.
pub(crate) fn read_index_part(
    r: &mut Reader<'_>,
    positions: Vec<u64>,
    version: Version,
    subject: bool,
) -> Result<RangeAnswer, WireError> {
    let frames = r.varint("frames")?;
    let frame = match r.u8("frame witness")? {
        0 => FrameWitness::Present { index: r.varint("frame index")?, path: read_path(r)? },
        1 => {
            let mut side = || -> Result<Option<Neighbour>, WireError> {
                if !r.flag("neighbour")? {
                    return Ok(None);
                }
                Ok(Some(Neighbour {
                    index: r.varint("neighbour index")?,
                    entry: r.bytes32(4096, "neighbour entry")?.to_vec(),
                    path: read_path(r)?,
                }))
            };
            let left = side()?;
            let right = side()?;
            FrameWitness::Absent { left, right }
        }
        k => {
            return Err(WireError::Invalid { field: "frame witness", problem: format!("unknown kind {k}") });
        }
    };
    let places = match (version, subject) {
        (Version::V4, false) => Places::Root(r.array("places root")?),
        (Version::V4, true) => Places::Subject(read_place(r, frames, &frame)?),
        _ => Places::Before,
    };
    let subjects_root = r.array("subjects root")?;
    let links_root = r.array("links root")?;
    let mut walks = [None, None];
    for walk in walks.iter_mut() {
        if r.flag("tree")? {
            // About what a walk's steps take on the wire, on average (most are pruned nodes,
            // 40 bytes and more): one allocation for most walks, and never more than a few
            // times the bytes received.
            let mut steps = Vec::with_capacity(r.remaining() / 42);
            read_steps(r, &mut steps, &SpaceTime::ZERO, 0, version)?;
            *walk = Some(steps);
        }
    }
    let [short, long] = walks;
    if let Places::Subject(place) = &places {
        if place.leaf != PlaceLeaf::Found && (short.is_some() || long.is_some()) {
            return Err(WireError::Invalid {
                field: "tree",
                problem: "a subject with no place has no trees".into(),
            });
        }
        if long.is_some() {
            return Err(WireError::Invalid {
                field: "tree",
                problem: "a subject's tree in a frame is its short-lived one: the long-lived is empty".into(),
            });
        }
    }
    let answer =
        RangeAnswer { positions, frames, frame, short, long, subjects_root, links_root, places, version };
    Ok(answer)
}

/// A subject's place in the places map (version 4): the leaf the search ends at, the path, and
/// the index's frames tree. A subject without a place has an empty frames tree: `frames` 0, no
/// neighbours.
fn read_place(r: &mut Reader<'_>, frames: u64, frame: &FrameWitness) -> Result<SubjectPlace, WireError> {
    let leaf = match r.u8("place")? {
        0 => PlaceLeaf::Found,
        1 => PlaceLeaf::Empty,
        2 => PlaceLeaf::Other {
            key: r.array("place key")?,
            frames: r.varint("place frames")?,
            root: r.array("place root")?,
        },
        k => return Err(WireError::Invalid { field: "place", problem: format!("unknown kind {k}") }),
    };
    let empty = matches!(frame, FrameWitness::Absent { left: None, right: None }) && frames == 0;
    if leaf != PlaceLeaf::Found && !empty {
        return Err(WireError::Invalid {
            field: "place",
            problem: "a subject with no place has an empty frames tree (0 frames, no neighbours)".into(),
        });
    }
    let path = critbit::read_path(r, "place path")?;
    Ok(SubjectPlace { leaf, path, frames: r.varint("frames")?, frames_root: r.array("frames root")? })
}

/// The answer's atoms by ascending position, and which of them a walk has reached.
pub(crate) struct Answer {
    atoms: Vec<(u64, Atom)>,
    used: Vec<AtomicBool>,
}

impl Answer {
    /// An answer of decoded atoms (any order: it is kept by ascending position).
    pub(crate) fn new(mut atoms: Vec<(u64, Atom)>) -> Self {
        atoms.sort_by_key(|(p, _)| *p);
        Self { used: atoms.iter().map(|_| AtomicBool::new(false)).collect(), atoms }
    }
}

/// Answers of at least this many atoms are decoded on every core; smaller ones, and every
/// walk, on the caller's thread. On this project's 2-core VM a thread started and joined
/// costs 40-50 us alone, and more beside work: the seed's biggest row (1,500 atoms, 2,900
/// steps) checked in 1.99 ms with its walks on one thread, 2.07 ms split in two and 2.34 ms in
/// four (medians of six runs, alternated), and its answer decoded on two threads saved
/// nothing measurable. A walk split between threads also made the refusal of an atom
/// answering twice depend on which thread reached it first; on one, the first fault in walk
/// order is always the one named.
pub const PARALLEL_ATOMS: usize = 4096;

/// The walk whose first step is `steps[*at]`, its boxes coded against `reference`.
fn put_walk(out: &mut Vec<u8>, steps: &[Step], at: &mut usize, reference: &SpaceTime, version: Version) {
    let Some(step) = steps.get(*at) else { return };
    *at += 1;
    match step {
        Step::Pruned(s) | Step::Whole(s) => {
            out.put_u8(if matches!(step, Step::Whole(_)) { tag::WHOLE } else { tag::PRUNED });
            put_box(out, &s.bbox, reference);
            if version.tallied() {
                put_tally(out, &s.tally);
            }
            out.put_bytes(&s.digest);
        }
        Step::Interior(bbox) => {
            out.put_u8(tag::INTERIOR);
            put_box(out, bbox, reference);
            put_walk(out, steps, at, bbox, version);
            put_walk(out, steps, at, bbox, version);
        }
        Step::Group(entries) => {
            // (A group holds 1 to 4 entries; `put` writes what it is given without panicking.)
            let hits =
                entries.iter().enumerate().filter(|(j, e)| *j < GROUP && matches!(e, GroupEntry::Hit(_)));
            let hits = hits.fold(0u8, |m, (j, _)| m | (1 << j));
            out.put_u8(tag::GROUP | ((entries.len() as u8).wrapping_sub(1) & 3) << 2 | hits << 4);
            for entry in entries {
                match entry {
                    GroupEntry::Hit(p) => out.put_varint(*p),
                    GroupEntry::Miss(e) => {
                        out.put_varint(e.position);
                        out.put_bytes(&e.id.0);
                        put_box(out, &e.bbox, reference);
                        if version.tallied() {
                            out.put_u8(e.kind);
                        }
                    }
                }
            }
        }
    }
}

/// A pruned node's tally: varint kinds, varint count, varint duration (up to 128 bits).
fn put_tally(out: &mut Vec<u8>, t: &Tally) {
    out.put_varint(u64::from(t.kinds));
    out.put_varint(t.count);
    out.put_varint128(t.duration_ns);
}

fn read_tally(r: &mut Reader<'_>) -> Result<Tally, WireError> {
    let kinds = u32::try_from(r.varint("tally")?)
        .map_err(|_| WireError::Invalid { field: "tally", problem: "kinds past 32 bits".into() })?;
    Ok(Tally { kinds, count: r.varint("tally")?, duration_ns: r.varint128("tally")? })
}

/// An entry's kind: a kind code of docs/ATOM.md.
fn read_kind(r: &mut Reader<'_>) -> Result<u8, WireError> {
    let kind = r.u8("kind")?;
    if crate::atom::Kind::from_code(kind).is_none() {
        return Err(WireError::Invalid { field: "kind", problem: format!("{kind} is no kind of atom") });
    }
    Ok(kind)
}

/// Read one tree's steps (pre-order, self-delimiting).
fn read_steps(
    r: &mut Reader<'_>,
    out: &mut Vec<Step>,
    reference: &SpaceTime,
    depth: usize,
    version: Version,
) -> Result<(), WireError> {
    if depth > MAX_DEPTH {
        return Err(WireError::Invalid { field: "tree", problem: "deeper than any index tree".into() });
    }
    let step = r.u8("step")?;
    match step & 3 {
        tag::PRUNED if step == tag::PRUNED => {
            let bbox = read_box(r, reference)?;
            // A version 2 walk has no tallies: its pruned nodes may hold any kind.
            let tally = match version {
                Version::V2 => Tally { kinds: u32::MAX, ..Tally::default() },
                Version::V3 | Version::V4 => read_tally(r)?,
            };
            out.push(Step::Pruned(Summary { bbox, tally, digest: r.array("digest")? }));
        }
        tag::WHOLE if step == tag::WHOLE && version.tallied() => {
            let bbox = read_box(r, reference)?;
            let tally = read_tally(r)?;
            out.push(Step::Whole(Summary { bbox, tally, digest: r.array("digest")? }));
        }
        tag::INTERIOR if step == tag::INTERIOR => {
            let bbox = read_box(r, reference)?;
            out.push(Step::Interior(bbox));
            read_steps(r, out, &bbox, depth + 1, version)?;
            read_steps(r, out, &bbox, depth + 1, version)?;
        }
        // No hit flag beyond the group's entries: a group has one encoding.
        tag::GROUP if (step >> 4) >> (((step >> 2) & 3) + 1) == 0 => {
            let (count, hits) = (usize::from((step >> 2) & 3) + 1, step >> 4);
            let mut entries = Vec::with_capacity(count);
            for j in 0..count {
                let position = r.varint("position")?;
                entries.push(if hits & (1 << j) != 0 {
                    GroupEntry::Hit(position)
                } else {
                    let id = crate::atom::AtomId(r.array("id")?);
                    let bbox = read_box(r, reference)?;
                    let kind = match version {
                        Version::V2 => 0,
                        Version::V3 | Version::V4 => read_kind(r)?,
                    };
                    GroupEntry::Miss(Entry { position, id, bbox, kind })
                });
            }
            out.push(Step::Group(entries));
        }
        _ => return Err(WireError::Invalid { field: "step", problem: format!("unknown step {step}") }),
    }
    Ok(())
}

/// One tree's walk being replayed: the steps, what it may pass over, and the answer it must
/// account for.
struct Walker<'a> {
    steps: &'a [Step],
    version: Version,
    rule: &'a dyn Rule,
    log_size: u64,
    tree: Tree,
    answer: &'a Answer,
}

/// Who is told of each node as it is checked, if anyone.
type Seen<'s> = Option<&'s mut dyn FnMut(Walked)>;

impl Walker<'_> {
    fn tell(&self, seen: &mut Seen<'_>, depth: usize, bbox: SpaceTime, reached: Reached) {
        if let Some(seen) = seen {
            seen(Walked { tree: self.tree, depth, bbox, reached });
        }
    }

    /// Recompute the summary of the walked subtree whose first step is `at`, checking that
    /// nothing it passes over could answer; returns it and where the subtree's steps end.
    fn replay(&self, at: usize, depth: usize, seen: &mut Seen<'_>) -> Result<(Summary, usize), VerifyError> {
        if depth > MAX_DEPTH {
            return Err(VerifyError::Range("the tree walk is too deep".into()));
        }
        let step = self.steps.get(at).ok_or_else(|| VerifyError::Range("the tree walk ends early".into()))?;
        match step {
            Step::Pruned(s) => {
                self.rule.pass(s).map_err(VerifyError::Range)?;
                self.tell(seen, depth, s.bbox, Reached::Pruned);
                Ok((*s, at + 1))
            }
            Step::Whole(s) => {
                self.rule.whole(s).map_err(VerifyError::Range)?;
                self.tell(seen, depth, s.bbox, Reached::Whole);
                Ok((*s, at + 1))
            }
            Step::Interior(bbox) => {
                let (left, mid) = self.replay(at + 1, depth + 1, seen)?;
                let (right, end) = self.replay(mid, depth + 1, seen)?;
                let s = match self.version {
                    Version::V2 => Summary::join_v2(&left, &right),
                    Version::V3 | Version::V4 => Summary::join(&left, &right),
                };
                if s.bbox != *bbox {
                    return Err(VerifyError::Range(
                        "an interior node's box is not the union of its children's".into(),
                    ));
                }
                self.tell(seen, depth, s.bbox, Reached::Expanded);
                Ok((s, end))
            }
            Step::Group(group) => {
                if group.is_empty() || group.len() > GROUP {
                    return Err(VerifyError::Range("a leaf group holds 1 to 4 entries".into()));
                }
                let mut entries =
                    [Entry { position: 0, id: crate::atom::AtomId([0; 32]), bbox: SpaceTime::ZERO, kind: 0 };
                        GROUP];
                for (g, slot) in group.iter().zip(entries.iter_mut()) {
                    let (entry, reached) = match g {
                        GroupEntry::Hit(p) => {
                            let answer = self.answer;
                            let i = answer.atoms.binary_search_by_key(p, |(q, _)| *q).map_err(|_| {
                                VerifyError::Range(format!(
                                    "the index answers with position {p}, which the answer lacks"
                                ))
                            })?;
                            if answer.used[i].swap(true, Ordering::Relaxed) {
                                return Err(VerifyError::Range(format!("position {p} answers twice")));
                            }
                            let atom = &answer.atoms[i].1;
                            let bbox = SpaceTime::of_atom(atom.parts());
                            let kind = atom.kind().code();
                            (Entry { position: *p, id: atom.id(), bbox, kind }, Reached::Answer(*p))
                        }
                        GroupEntry::Miss(e) => {
                            self.rule.leave(e).map_err(VerifyError::Range)?;
                            if e.position >= self.log_size {
                                return Err(VerifyError::Range(format!(
                                    "position {} is beyond the head",
                                    e.position
                                )));
                            }
                            (*e, Reached::Passed(e.position))
                        }
                    };
                    self.tell(seen, depth + 1, entry.bbox, reached);
                    *slot = entry;
                }
                let s = match self.version {
                    Version::V2 => group_summary_v2(&entries[..group.len()]),
                    Version::V3 | Version::V4 => group_summary(&entries[..group.len()]),
                };
                self.tell(seen, depth, s.bbox, Reached::Expanded);
                Ok((s, at + 1))
            }
        }
    }
}

fn frames_root_from(index: u64, frames: u64, entry: &[u8], path: &[Digest]) -> Result<Digest, VerifyError> {
    root_from_inclusion::<Blake3, _>(index, frames, &Blake3::hash_leaf(entry), path)
        .map_err(|e| VerifyError::Range(format!("frames tree: {e}")))
}

fn absent_frame_root(
    frame: &str,
    frames: u64,
    left: Option<&Neighbour>,
    right: Option<&Neighbour>,
) -> Result<Digest, VerifyError> {
    let name_of = |n: &Neighbour| -> Result<String, VerifyError> {
        Reader::new(&n.entry).str8("frame").map_err(|e| VerifyError::Range(format!("neighbour entry: {e}")))
    };
    let bad = |why: &str| Err(VerifyError::Range(format!("frame {frame:?} is not shown absent: {why}")));
    match (left, right) {
        (None, None) if frames == 0 => Ok(Blake3::hash_empty()),
        (None, None) => bad("no neighbours"),
        (Some(l), r) => {
            if name_of(l)?.as_str() >= frame {
                return bad("the left neighbour does not sort before it");
            }
            let root = frames_root_from(l.index, frames, &l.entry, &l.path)?;
            match r {
                None if l.index + 1 == frames => Ok(root),
                None => bad("the left neighbour is not the last frame"),
                Some(r) => {
                    if name_of(r)?.as_str() <= frame || r.index != l.index + 1 {
                        return bad("the right neighbour is not next to the left one, after it");
                    }
                    if frames_root_from(r.index, frames, &r.entry, &r.path)? != root {
                        return bad("the neighbours are in different trees");
                    }
                    Ok(root)
                }
            }
        }
        (None, Some(r)) => {
            if r.index != 0 || name_of(r)?.as_str() <= frame {
                return bad("the right neighbour is not the first frame, after it");
            }
            frames_root_from(r.index, frames, &r.entry, &r.path)
        }
    }
}
