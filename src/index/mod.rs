//! The spatio-temporal index: a deterministic function of the log (docs/INDEX.md), kept up
//! to date incrementally, and the raw material of range, subject and link proofs.
//!
//! Per frame, short-lived atoms (valid for at most an hour) sit in a forest of hourly trees and
//! long-lived ones in one tree; each is split into 131 m cells and blocks of 4096 atoms, each
//! block a k-d-packed binary Merkle R-tree. A fold touches only the blocks new atoms land in;
//! sealing rehashes those, the cell and hour lists above them, and the small maps on top. A map
//! of atoms by subject and a map of links by target complete it.

pub mod critbit;
pub mod geom;
pub mod tree;

use std::collections::{BTreeMap, BTreeSet};

use crate::atom::{Atom, AtomId, Interval};
use crate::merkle::{Blake3, Digest, Frontier, MemoryTree, TreeHasher as _};
use crate::wire::Put as _;
use critbit::{CritTree, PathStep};
use geom::{Query, SpaceTime};
use tree::{Built, Entry, Step, Summary, interior, kd_order, left_len};

/// Atoms valid for at most this long are short-lived.
pub const SHORT_LIVED_NS: i64 = 3_600_000_000_000;
/// Short-lived atoms are grouped by the hour their valid time starts in.
pub const HOUR_NS: i64 = 3_600_000_000_000;
/// Side of a spatial cell, by box centre: 2^17 mm = 131.072 m.
pub const CELL_MM: i64 = 1 << 17;
/// Atoms of one cell (in log order) are packed in blocks of this many.
pub const BLOCK: usize = 4096;

const TAG_ROOT: u8 = 0x30;
const TAG_SUBJECT: u8 = 0x20;
const TAG_LINKS: u8 = 0x23;

pub fn is_short_lived(valid: &Interval) -> bool {
    valid.to_ns - valid.from_ns <= SHORT_LIVED_NS
}

/// The cell of a box, as a key whose order interleaves x and y (Morton order).
pub fn cell_key(bbox: &SpaceTime) -> u128 {
    let cx = bbox.center(0).div_euclid(CELL_MM);
    let cy = bbox.center(1).div_euclid(CELL_MM);
    // Offset to unsigned so the order of keys follows the order of cells.
    let (x, y) = ((cx as u64) ^ (1 << 63), (cy as u64) ^ (1 << 63));
    let mut key = 0u128;
    for b in (0..64).rev() {
        key = (key << 2) | (u128::from((x >> b) & 1) << 1) | u128::from((y >> b) & 1);
    }
    key
}

/// Entries of one cell, in blocks.
#[derive(Debug, Clone, Default)]
struct Bucket {
    /// Block `b` is `entries[b * BLOCK ..]`, in k-d order within the block.
    entries: Vec<Entry>,
    /// Interior nodes of each block's tree, pre-order.
    blocks: Vec<Vec<Summary>>,
    /// The list over block roots.
    roots: Built,
    /// The first block that changed since the last seal.
    dirty_from: Option<usize>,
}

impl Bucket {
    fn push(&mut self, e: Entry) {
        let block = self.entries.len() / BLOCK;
        self.entries.push(e);
        self.dirty_from = Some(self.dirty_from.map_or(block, |d| d.min(block)));
    }

    fn block(&self, b: usize) -> &[Entry] {
        &self.entries[b * BLOCK..((b + 1) * BLOCK).min(self.entries.len())]
    }

    fn seal(&mut self) {
        let Some(from) = self.dirty_from.take() else { return };
        let count = self.entries.len().div_ceil(BLOCK);
        self.blocks.truncate(from);
        for b in from..count {
            let end = ((b + 1) * BLOCK).min(self.entries.len());
            let block = &mut self.entries[b * BLOCK..end];
            kd_order(block);
            let leaves: Vec<Summary> = block.iter().map(Entry::summary).collect();
            self.blocks.push(interior(&leaves));
        }
        let roots = (0..count).map(|b| self.block_root(b)).collect();
        self.roots = Built::new(roots);
    }

    fn block_root(&self, b: usize) -> Summary {
        match self.blocks[b].first() {
            Some(root) => *root,
            None => self.block(b)[0].summary(),
        }
    }

    fn root(&self) -> Option<Summary> {
        self.roots.root()
    }

    fn walk(&self, q: &Query, out: &mut Vec<Step>) {
        self.roots.walk(q, out, &mut |b, out| walk_block(self.block(b), &self.blocks[b], q, out));
    }
}

fn walk_block(entries: &[Entry], interior: &[Summary], q: &Query, out: &mut Vec<Step>) {
    fn go(
        entries: &[Entry],
        interior: &[Summary],
        lo: usize,
        hi: usize,
        at: usize,
        q: &Query,
        out: &mut Vec<Step>,
    ) {
        if hi - lo == 1 {
            let e = &entries[lo];
            if e.bbox.meets(q) {
                out.push(Step::Hit(e.position));
            } else {
                out.push(Step::Miss(*e));
            }
            return;
        }
        let node = interior[at];
        if !node.bbox.meets(q) {
            out.push(Step::Pruned(node));
            return;
        }
        out.push(Step::Interior);
        let m = left_len(hi - lo);
        go(entries, interior, lo, lo + m, at + 1, q, out);
        go(entries, interior, lo + m, hi, at + m, q, out);
    }
    if !entries.is_empty() {
        go(entries, interior, 0, entries.len(), 0, q, out);
    }
}

/// Buckets by cell, and the list over their roots in cell order.
#[derive(Debug, Clone, Default)]
struct Cells {
    buckets: BTreeMap<u128, Bucket>,
    tree: Built,
    dirty: BTreeSet<u128>,
}

impl Cells {
    fn push(&mut self, e: Entry) {
        let key = cell_key(&e.bbox);
        self.buckets.entry(key).or_default().push(e);
        self.dirty.insert(key);
    }

    fn seal(&mut self) -> bool {
        if self.dirty.is_empty() {
            return false;
        }
        for key in std::mem::take(&mut self.dirty) {
            if let Some(b) = self.buckets.get_mut(&key) {
                b.seal();
            }
        }
        self.tree = Built::new(self.buckets.values().filter_map(Bucket::root).collect());
        true
    }

    fn root(&self) -> Option<Summary> {
        self.tree.root()
    }

    fn walk(&self, q: &Query, out: &mut Vec<Step>) {
        let buckets: Vec<&Bucket> = self.buckets.values().collect();
        self.tree.walk(q, out, &mut |i, out| buckets[i].walk(q, out));
    }
}

#[derive(Debug, Clone, Default)]
struct Frame {
    hours: BTreeMap<i64, Cells>,
    hours_tree: Built,
    long: Cells,
    dirty: bool,
}

impl Frame {
    fn seal(&mut self) {
        let mut changed = false;
        for cells in self.hours.values_mut() {
            changed |= cells.seal();
        }
        if changed || self.dirty {
            self.hours_tree = Built::new(self.hours.values().filter_map(Cells::root).collect());
        }
        self.long.seal();
        self.dirty = false;
    }

    fn short_root(&self) -> Option<Summary> {
        self.hours_tree.root()
    }

    fn walk_short(&self, q: &Query, out: &mut Vec<Step>) {
        let hours: Vec<&Cells> = self.hours.values().collect();
        self.hours_tree.walk(q, out, &mut |i, out| hours[i].walk(q, out));
    }

    /// The frame's entry in the frames tree (docs/INDEX.md, "Frames").
    fn encode(&self, name: &str) -> Vec<u8> {
        encode_frame(name, self.short_root(), self.long.root())
    }
}

/// A frame's leaf in the frames tree: str8 name, then for the short-lived and the long-lived
/// tree a flag (0 empty, 1 present) and, if present, its 64-byte box and digest.
pub fn encode_frame(name: &str, short: Option<Summary>, long: Option<Summary>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + name.len() + 2 * 97);
    out.put_str8(name);
    for tree in [short, long] {
        match tree {
            None => out.put_u8(0),
            Some(s) => {
                out.put_u8(1);
                out.put_bytes(&s.bbox.encode());
                out.put_bytes(&s.digest);
            }
        }
    }
    out
}

/// Atoms of one subject (or linking to one target), in log order, with the RFC 9162 tree
/// over their list leaves.
#[derive(Debug, Clone)]
struct List {
    label: String,
    positions: Vec<u64>,
    frontier: Frontier<Blake3>,
}

impl List {
    fn new(label: String) -> Self {
        Self { label, positions: Vec::new(), frontier: Frontier::new() }
    }

    fn push(&mut self, position: u64, leaf: &[u8]) {
        self.positions.push(position);
        self.frontier.push(Blake3::hash_leaf(leaf), |_| {});
    }
}

/// A subject list's leaf: u64 position || atom id. A link list's: u64 position || source atom
/// id || u8 relation code.
pub fn subject_leaf(position: u64, id: &AtomId) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    out.put_u64(position);
    out.put_bytes(&id.0);
    out
}

pub fn link_leaf(position: u64, id: &AtomId, rel: u8) -> Vec<u8> {
    let mut out = subject_leaf(position, id);
    out.put_u8(rel);
    out
}

/// The key of a subject in the subject map.
pub fn subject_key(subject: &str) -> [u8; 32] {
    *blake3::hash(subject.as_bytes()).as_bytes()
}

/// A subject map leaf: `BLAKE3(0x20 || key || u64 count || list root || str16 subject)`.
pub fn subject_leaf_digest(key: &[u8; 32], count: u64, root: &Digest, subject: &str) -> Digest {
    let mut buf = vec![TAG_SUBJECT];
    buf.put_bytes(key);
    buf.put_u64(count);
    buf.put_bytes(root);
    buf.put_str16(subject);
    *blake3::hash(&buf).as_bytes()
}

/// A link map leaf: `BLAKE3(0x23 || target id || u64 count || list root)`.
pub fn link_leaf_digest(key: &[u8; 32], count: u64, root: &Digest) -> Digest {
    let mut buf = vec![TAG_LINKS];
    buf.put_bytes(key);
    buf.put_u64(count);
    buf.put_bytes(root);
    *blake3::hash(&buf).as_bytes()
}

/// The index root: `BLAKE3(0x30 || u64 frame count || frames root || subjects || links)`.
pub fn index_root(frames: u64, frames_root: &Digest, subjects: &Digest, links: &Digest) -> Digest {
    let mut buf = vec![TAG_ROOT];
    buf.put_u64(frames);
    buf.put_bytes(frames_root);
    buf.put_bytes(subjects);
    buf.put_bytes(links);
    *blake3::hash(&buf).as_bytes()
}

/// The index of a log's first `size` atoms.
#[derive(Debug, Clone, Default)]
pub struct Index {
    size: u64,
    frames: BTreeMap<String, Frame>,
    subjects: BTreeMap<[u8; 32], List>,
    links: BTreeMap<[u8; 32], List>,
    sealed: Option<Sealed>,
}

/// What sealing computes over the whole index: the small trees on top and the root.
#[derive(Debug, Clone)]
struct Sealed {
    frame_names: Vec<String>,
    frames_tree: MemoryTree<Blake3>,
    subjects: CritTree,
    links: CritTree,
    root: Digest,
}

/// Where a query's frame stands in the frames tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameWitness {
    /// The frame is leaf `index`; its entry is recomputed from the tree walks.
    Present { index: u64, path: Vec<Digest> },
    /// The frame is not in the index: the entries next to where it would be.
    Absent { left: Option<Neighbour>, right: Option<Neighbour> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub index: u64,
    pub entry: Vec<u8>,
    pub path: Vec<Digest>,
}

/// The answer to a range query with what proves it complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeAnswer {
    pub positions: Vec<u64>,
    pub frames: u64,
    pub frame: FrameWitness,
    /// Walks of the short-lived and the long-lived tree (`None`: that tree is empty).
    pub short: Option<Vec<Step>>,
    pub long: Option<Vec<Step>>,
    pub subjects_root: Digest,
    pub links_root: Digest,
}

/// Every atom in a subject's list (or linking to a target), with the map path that proves the
/// list is the committed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAnswer {
    pub positions: Vec<u64>,
    /// The leaf the search ended at, when the map is not empty: its key, and for a subject its
    /// label, count and list root (for a different key, this proves absence).
    pub leaf: Option<MapLeaf>,
    pub path: Vec<PathStep>,
    pub frames: u64,
    pub frames_root: Digest,
    /// The other map's root (links for a subject answer, subjects for a links answer).
    pub other_root: Digest,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLeaf {
    pub key: [u8; 32],
    pub label: String,
    pub count: u64,
    pub root: Digest,
}

impl Index {
    pub fn new() -> Self {
        Self::default()
    }

    /// Build the index of a sequence of atoms from position 0.
    pub fn build<'a>(atoms: impl IntoIterator<Item = &'a Atom>) -> Self {
        let mut index = Self::new();
        for atom in atoms {
            index.fold(atom);
        }
        index.seal();
        index
    }

    /// How many atoms of the log the index covers.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Take in the next atom of the log (position `self.size()`).
    pub fn fold(&mut self, atom: &Atom) {
        let position = self.size;
        self.size += 1;
        self.sealed = None;
        let p = atom.parts();
        let entry = Entry { position, id: atom.id(), bbox: SpaceTime::of_atom(p) };
        let frame = self.frames.entry(p.frame.clone()).or_default();
        if is_short_lived(&p.valid) {
            let hour = p.valid.from_ns.div_euclid(HOUR_NS);
            let cells = frame.hours.entry(hour).or_insert_with(|| {
                frame.dirty = true;
                Cells::default()
            });
            cells.push(entry);
        } else {
            frame.long.push(entry);
        }
        if !p.subject.is_empty() {
            let key = subject_key(&p.subject);
            self.subjects
                .entry(key)
                .or_insert_with(|| List::new(p.subject.clone()))
                .push(position, &subject_leaf(position, &entry.id));
        }
        for link in &p.links {
            self.links
                .entry(link.target.0)
                .or_insert_with(|| List::new(String::new()))
                .push(position, &link_leaf(position, &entry.id, link.rel.code()));
        }
    }

    /// Rehash what changed since the last seal; returns the root.
    pub fn seal(&mut self) -> Digest {
        if let Some(s) = &self.sealed {
            return s.root;
        }
        for frame in self.frames.values_mut() {
            frame.seal();
        }
        let frame_names: Vec<String> = self.frames.keys().cloned().collect();
        let frames_tree = MemoryTree::<Blake3>::from_leaves(self.frames.iter().map(|(n, f)| f.encode(n)));
        let subjects = CritTree::build(
            self.subjects
                .iter()
                .map(|(k, l)| {
                    (*k, subject_leaf_digest(k, l.positions.len() as u64, &l.frontier.root(), &l.label))
                })
                .collect(),
        );
        let links = CritTree::build(
            self.links
                .iter()
                .map(|(k, l)| (*k, link_leaf_digest(k, l.positions.len() as u64, &l.frontier.root())))
                .collect(),
        );
        let root = index_root(frame_names.len() as u64, &frames_tree.root(), &subjects.root(), &links.root());
        self.sealed = Some(Sealed { frame_names, frames_tree, subjects, links, root });
        root
    }

    fn sealed(&mut self) -> &Sealed {
        self.seal();
        // `seal` just set it.
        self.sealed.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// The index root (sealing first if needed).
    pub fn root(&mut self) -> Digest {
        self.seal()
    }

    fn frames_path(sealed: &Sealed, index: u64) -> Vec<Digest> {
        let n = sealed.frames_tree.size();
        crate::merkle::inclusion_path::<Blake3, _>(&sealed.frames_tree, index, n).unwrap_or_default()
    }

    /// Every atom in the query's frame, box and interval, with the walks that prove it complete.
    pub fn range(&mut self, q: &Query) -> RangeAnswer {
        self.seal();
        let sealed = self.sealed.as_ref().unwrap_or_else(|| unreachable!());
        let frames = sealed.frame_names.len() as u64;
        let (subjects_root, links_root) = (sealed.subjects.root(), sealed.links.root());
        let found = sealed.frame_names.binary_search(&q.frame);
        let Ok(i) = found else {
            let at = found.unwrap_err();
            let neighbour = |i: usize| {
                let name = &sealed.frame_names[i];
                Neighbour {
                    index: i as u64,
                    entry: self.frames[name].encode(name),
                    path: Self::frames_path(sealed, i as u64),
                }
            };
            return RangeAnswer {
                positions: Vec::new(),
                frames,
                frame: FrameWitness::Absent {
                    left: at.checked_sub(1).map(neighbour),
                    right: (at < sealed.frame_names.len()).then(|| neighbour(at)),
                },
                short: None,
                long: None,
                subjects_root,
                links_root,
            };
        };
        let frame = &self.frames[&q.frame];
        let mut short = frame.short_root().map(|_| Vec::new());
        if let Some(steps) = short.as_mut() {
            frame.walk_short(q, steps);
        }
        let mut long = frame.long.root().map(|_| Vec::new());
        if let Some(steps) = long.as_mut() {
            frame.long.walk(q, steps);
        }
        let mut positions: Vec<u64> = short
            .iter()
            .chain(long.iter())
            .flatten()
            .filter_map(|s| if let Step::Hit(p) = s { Some(*p) } else { None })
            .collect();
        positions.sort_unstable();
        RangeAnswer {
            positions,
            frames,
            frame: FrameWitness::Present { index: i as u64, path: Self::frames_path(sealed, i as u64) },
            short,
            long,
            subjects_root,
            links_root,
        }
    }

    /// Every atom about `subject`.
    pub fn subject(&mut self, subject: &str) -> ListAnswer {
        let key = subject_key(subject);
        self.sealed();
        let sealed = self.sealed.as_ref().unwrap_or_else(|| unreachable!());
        Self::list_answer(&self.subjects, &sealed.subjects, &key, sealed, sealed.links.root())
    }

    /// Every atom that links to `target`.
    pub fn links(&mut self, target: &AtomId) -> ListAnswer {
        self.sealed();
        let sealed = self.sealed.as_ref().unwrap_or_else(|| unreachable!());
        Self::list_answer(&self.links, &sealed.links, &target.0, sealed, sealed.subjects.root())
    }

    fn list_answer(
        lists: &BTreeMap<[u8; 32], List>,
        tree: &CritTree,
        key: &[u8; 32],
        sealed: &Sealed,
        other_root: Digest,
    ) -> ListAnswer {
        let (path, leaf) = match tree.search(key) {
            None => (Vec::new(), None),
            Some((path, i)) => {
                let leaf_key = *tree.key(i).unwrap_or(key);
                let leaf = lists.get(&leaf_key).map(|l| MapLeaf {
                    key: leaf_key,
                    label: l.label.clone(),
                    count: l.positions.len() as u64,
                    root: l.frontier.root(),
                });
                (path, leaf)
            }
        };
        // An atom linking twice to one target has two list leaves but answers once.
        let mut positions = lists.get(key).map(|l| l.positions.clone()).unwrap_or_default();
        positions.dedup();
        ListAnswer {
            positions,
            leaf,
            path,
            frames: sealed.frame_names.len() as u64,
            frames_root: sealed.frames_tree.root(),
            other_root,
        }
    }
}
