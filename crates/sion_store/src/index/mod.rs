//! The spatio-temporal index: a deterministic function of the log (docs/INDEX.md), kept up
//! to date incrementally, and the raw material of range, subject and link proofs.
//!
//! Per frame, short-lived atoms (valid for at most an hour) sit in a forest of hourly trees and
//! long-lived ones in one tree; each is split into 131 m cells and blocks of 4096 atoms, each
//! block a k-d-packed binary Merkle R-tree. A fold touches only the blocks new atoms land in;
//! sealing rehashes those, the cell and hour lists above them, and the small maps on top. A map
//! of atoms by subject and a map of links by target complete it.

pub mod critbit;
pub mod tree;

use std::collections::BTreeMap;

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use critbit::CritMap;
use geom::{Query, SpaceTime};
use sion_verify::atom::{Atom, AtomId, Interval};
pub use sion_verify::index::geom;
pub use sion_verify::index::{
    FrameWitness, ListAnswer, ListHasher, MapLeaf, Neighbour, RangeAnswer, encode_frame, index_root,
    link_leaf_digest, list_leaf, subject_key, subject_leaf_digest,
};
use sion_verify::merkle::{Blake3, Digest, Frontier, MemoryTree, TreeHasher as _};
use tree::{
    Built, Entry, GROUP, GroupEntry, Items, Step, Summary, group_summary, interior_of, kd_order, walk,
};

/// Atoms valid for at most this long are short-lived.
pub const SHORT_LIVED_NS: i64 = 3_600_000_000_000;
/// Short-lived atoms are grouped by the hour their valid time starts in.
pub const HOUR_NS: i64 = 3_600_000_000_000;
/// Side of a spatial cell, by box centre: 2^17 mm = 131.072 m.
pub const CELL_MM: i64 = 1 << 17;
/// Atoms of one cell (in log order) are packed in blocks of this many.
pub const BLOCK: usize = 4096;
/// Atoms folded at a time: the next chunk is prepared while this one is placed.
const FOLD_CHUNK: usize = 1 << 15;

#[cfg(test)]
mod cell_tests {
    use super::{group_by_key, spread};

    #[test]
    fn group_by_key_is_a_stable_counting_sort() {
        let (start, order) = group_by_key([2usize, 0, 2, 1, 0].into_iter(), 4);
        assert_eq!(start, vec![0, 2, 3, 5, 5]);
        assert_eq!(order, vec![1, 4, 3, 0, 2]);
    }

    #[test]
    fn spread_puts_bit_i_at_2i() {
        for v in [0u64, 1, 0b1011, u64::MAX, 1 << 63, 0x1234_5678_9abc_def0] {
            let mut expected = 0u128;
            for i in 0..64 {
                expected |= u128::from((v >> i) & 1) << (2 * i);
            }
            assert_eq!(spread(v), expected);
        }
    }
}

/// A stable counting sort: the indices of `keys` (each below `n`) grouped by key, in their
/// order within a key, and where each group starts (key `k`'s is `order[start[k]..start[k + 1]]`).
fn group_by_key(keys: impl Iterator<Item = usize> + Clone, n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; n + 1];
    for k in keys.clone() {
        start[k + 1] += 1;
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut order = vec![0usize; start[n]];
    let mut next = start.clone();
    for (i, k) in keys.enumerate() {
        order[next[k]] = i;
        next[k] += 1;
    }
    (start, order)
}

pub fn is_short_lived(valid: &Interval) -> bool {
    valid.to_ns - valid.from_ns <= SHORT_LIVED_NS
}

/// The cell of a box, as a key whose order interleaves x and y (Morton order).
pub fn cell_key(bbox: &SpaceTime) -> u128 {
    let cx = bbox.center(0).div_euclid(CELL_MM);
    let cy = bbox.center(1).div_euclid(CELL_MM);
    // Offset to unsigned so the order of keys follows the order of cells.
    let (x, y) = ((cx as u64) ^ (1 << 63), (cy as u64) ^ (1 << 63));
    (spread(x) << 1) | spread(y)
}

/// The bits of `v` at the even bit positions of a u128 (bit i goes to bit 2i).
fn spread(v: u64) -> u128 {
    let mut x = u128::from(v);
    x = (x | (x << 32)) & 0x0000_0000_FFFF_FFFF_0000_0000_FFFF_FFFF;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF_0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF_00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333_3333_3333_3333_3333;
    x = (x | (x << 1)) & 0x5555_5555_5555_5555_5555_5555_5555_5555;
    x
}

/// Entries of one cell, in blocks.
#[derive(Debug, Clone, Default)]
struct Bucket {
    /// Block `b` is `entries[b * BLOCK ..]`, in k-d order within the block.
    entries: Vec<Entry>,
    /// Each block's interior nodes over its leaf groups (pre-order); group summaries are
    /// recomputed when needed, which saves a quarter of the index's memory.
    blocks: Vec<Vec<Summary>>,
    /// The list over block roots.
    roots: Built,
    /// The first block that changed since the last seal.
    dirty_from: Option<usize>,
}

impl Bucket {
    /// Add entries (the next in log order): a move when the bucket is new, as most are.
    fn append(&mut self, mut entries: Vec<Entry>) {
        self.mark_dirty();
        if self.entries.is_empty() {
            self.entries = entries;
        } else {
            self.entries.append(&mut entries);
        }
    }

    fn push(&mut self, entry: Entry) {
        self.mark_dirty();
        self.entries.push(entry);
    }

    /// Remember the first block that changes.
    fn mark_dirty(&mut self) {
        if self.dirty_from.is_none() {
            self.dirty_from = Some(self.entries.len() / BLOCK);
        }
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
            let block: &[Entry] = block;
            let group = |g: usize| &block[g * GROUP..((g + 1) * GROUP).min(block.len())];
            self.blocks.push(interior_of(block.len().div_ceil(GROUP), &|g| group_summary(group(g))));
        }
        let roots = (0..count).map(|b| self.block_root(b)).collect();
        self.roots = Built::new(roots);
        // Most buckets are done growing (their hour is past): give back the slack.
        self.entries.shrink_to_fit();
    }

    fn block_root(&self, b: usize) -> Summary {
        // Blocks are never empty; a block of one group has no interior.
        self.blocks[b].first().copied().unwrap_or_else(|| group_summary(self.block(b)))
    }

    fn root(&self) -> Option<Summary> {
        self.roots.root()
    }

    fn walk(&self, q: &Query, out: &mut Vec<Step>) {
        self.roots.walk(q, out, &mut |b, out| {
            let entries = self.block(b);
            let group = |g: usize| &entries[g * GROUP..((g + 1) * GROUP).min(entries.len())];
            let items = Items {
                count: entries.len().div_ceil(GROUP),
                bbox: &|g| group(g).iter().skip(1).fold(group(g)[0].bbox, |b, e| b.union(&e.bbox)),
                summary: &|g| group_summary(group(g)),
            };
            walk(&self.blocks[b], &items, q, out, &mut |g, out| {
                let group = group(g);
                out.push(Step::Group(
                    group
                        .iter()
                        .map(
                            |e| {
                                if e.bbox.meets(q) {
                                    GroupEntry::Hit(e.position)
                                } else {
                                    GroupEntry::Miss(*e)
                                }
                            },
                        )
                        .collect(),
                ));
            })
        });
    }
}

/// Buckets by cell, and the list over their roots in cell order.
#[derive(Debug, Clone, Default)]
struct Cells {
    buckets: BTreeMap<u128, Bucket>,
    tree: Built,
    /// Whether a bucket took entries since the last seal.
    dirty: bool,
}

impl Cells {
    fn bucket(&mut self, cell: u128) -> &mut Bucket {
        self.dirty = true;
        self.buckets.entry(cell).or_default()
    }

    /// The buckets with entries not yet sealed.
    fn dirty_buckets(&mut self) -> impl Iterator<Item = &mut Bucket> {
        self.buckets.values_mut().filter(|b| b.dirty_from.is_some())
    }

    /// Rebuild the list over bucket roots (after the buckets are sealed); whether it changed.
    fn seal(&mut self) -> bool {
        if !std::mem::take(&mut self.dirty) {
            return false;
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
    fn dirty_buckets(&mut self) -> impl Iterator<Item = &mut Bucket> {
        self.hours
            .values_mut()
            .chain(std::iter::once(&mut self.long))
            .filter(|c| c.dirty)
            .flat_map(Cells::dirty_buckets)
    }

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

/// Atoms of one subject (or linking to one target), in log order, with the list tree over
/// their leaves.
#[derive(Debug, Clone)]
struct List {
    key: [u8; 32],
    label: String,
    positions: Vec<u64>,
    frontier: Frontier<ListHasher>,
}

impl List {
    fn root(&self) -> Digest {
        self.frontier.root()
    }
}

/// An atom folded for a list: (list slot, position, the atom's list leaf digest).
type Folded = (u32, u64, Digest);

/// The lists of one map (subjects or links) and the crit-bit tree over their leaves.
#[derive(Debug, Clone, Default)]
struct Lists {
    map: CritMap,
    lists: Vec<List>,
    by_key: HashMap<[u8; 32], usize>,
    dirty: Vec<usize>,
    /// Whether a list's leaf is out of date (index into `lists`).
    stale: Vec<bool>,
}

impl Lists {
    /// The slot of `key`, making an empty list labelled `label()` if there is none.
    fn slot(&mut self, key: [u8; 32], label: impl FnOnce() -> String) -> usize {
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        let i = self.lists.len();
        self.lists.push(List { key, label: label(), positions: Vec::new(), frontier: Frontier::new() });
        self.stale.push(false);
        self.by_key.insert(key, i);
        i
    }

    /// Add folded atoms to their lists, each list on whichever core is free; an atom is added
    /// to a list once however often it names it.
    fn absorb(&mut self, pending: &[Folded]) {
        // A list's atoms stay in log order (folding pushed them so), and one list is worked
        // through at a time.
        let (start, order) = group_by_key(pending.iter().map(|f| f.0 as usize), self.lists.len());
        // Pair each list with its new atoms, to grow the lists in parallel.
        let Self { lists, stale, dirty, .. } = self;
        let mut work: Vec<(&mut List, &[usize])> = Vec::new();
        for (slot, list) in lists.iter_mut().enumerate() {
            let run = &order[start[slot]..start[slot + 1]];
            if run.is_empty() {
                continue;
            }
            if !stale[slot] {
                stale[slot] = true;
                dirty.push(slot);
            }
            work.push((list, run));
        }
        work.par_iter_mut().for_each(|(list, run)| {
            for &i in run.iter() {
                let (_, position, leaf) = pending[i];
                if list.positions.last() == Some(&position) {
                    continue;
                }
                list.positions.push(position);
                list.frontier.push(leaf, |_| {});
            }
        });
    }

    fn seal(&mut self, leaf_digest: impl Fn(&List) -> Digest + Sync) -> Digest {
        let dirty = std::mem::take(&mut self.dirty);
        let updates: Vec<([u8; 32], Digest)> = dirty
            .par_iter()
            .map(|&i| {
                let list = &self.lists[i];
                (list.key, leaf_digest(list))
            })
            .collect();
        for i in dirty {
            self.stale[i] = false;
        }
        self.map.set_all(updates);
        self.map.seal()
    }

    fn get(&self, key: &[u8; 32]) -> Option<&List> {
        self.by_key.get(key).map(|&i| &self.lists[i])
    }
}

fn subject_digest(l: &List) -> Digest {
    subject_leaf_digest(&l.key, l.positions.len() as u64, &l.root(), &l.label)
}

fn link_digest(l: &List) -> Digest {
    link_leaf_digest(&l.key, l.positions.len() as u64, &l.root())
}

/// The index of a log's first `size` atoms.
#[derive(Debug, Clone, Default)]
pub struct Index {
    size: u64,
    frames: BTreeMap<String, Frame>,
    /// Atoms waiting to join their subjects' and link targets' lists: those folded one at a
    /// time, until the seal (`fold_all` adds a chunk's at once).
    pending_subjects: Vec<Folded>,
    pending_links: Vec<Folded>,
    subjects: Lists,
    links: Lists,
    known: Known,
    sealed: Option<Sealed>,
}

/// What folding an atom needs, worked out from the atom alone (on any core).
struct Prepared<'a> {
    atom: &'a Atom,
    entry: Entry,
    /// The hour of a short-lived atom; `None` for a long-lived one.
    hour: Option<i64>,
    cell: u128,
    /// The frame's number, where already known.
    frame: Option<u32>,
    subject: Slot,
    has_links: bool,
    /// The atom's leaf in the lists it joins (its subject's, its links' targets').
    leaf: Digest,
}

/// An atom's place in the subjects map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The atom has no subject.
    None,
    /// The slot of a subject seen before.
    Known(u32),
    /// A subject not known when the atom was prepared.
    New,
}

impl<'a> Prepared<'a> {
    /// Prepare atoms from position `base` on, on every core, into `out` (its room reused).
    fn all(out: &mut Vec<Self>, atoms: &'a [Atom], base: u64, frames: &Numbering, subjects: &Numbering) {
        // Every atom's names first, then their numbers: waiting for an atom's text and waiting
        // for the table then overlap across atoms, rather than add up for each.
        let names: Vec<(Name<'a>, Name<'a>)> =
            atoms.par_iter().map(|a| (Name::of(&a.parts().frame), Name::of(&a.parts().subject))).collect();
        out.clear();
        out.par_extend(atoms.par_iter().zip(&names).enumerate().map(|(i, (a, (frame, subject)))| {
            Prepared::of(a, base + i as u64, frames.number(frame), subjects.number(subject))
        }));
    }

    /// `frame` and `subject`: the numbers of the atom's frame and subject, where known.
    fn of(atom: &'a Atom, position: u64, frame: Option<u32>, subject: Option<u32>) -> Self {
        let p = atom.parts();
        let entry = Entry { position, id: atom.id(), bbox: SpaceTime::of_atom(p) };
        let joins_lists = !p.subject.is_empty() || !p.links.is_empty();
        Prepared {
            atom,
            hour: is_short_lived(&p.valid).then(|| p.valid.from_ns.div_euclid(HOUR_NS)),
            cell: cell_key(&entry.bbox),
            frame,
            subject: match subject {
                _ if p.subject.is_empty() => Slot::None,
                Some(slot) => Slot::Known(slot),
                None => Slot::New,
            },
            has_links: !p.links.is_empty(),
            leaf: if joins_lists { Blake3::hash_leaf(&list_leaf(position, &entry.id)) } else { [0; 32] },
            entry,
        }
    }
}

/// Frame names and subjects seen so far, by number, so that an atom's are looked up without
/// hashing them again.
#[derive(Debug, Clone, Default)]
struct Known {
    frames: Numbering,
    frame_names: Vec<String>,
    /// Subject text to its slot in the subjects map's lists.
    subjects: Numbering,
}

/// Numbers of names. Most names are short and kept inline, zero-padded (atom text has no
/// control characters, so no name ends in a zero byte), so a lookup touches no other memory:
/// folding a million atoms is bound by such lookups.
#[derive(Debug, Clone, Default)]
struct Numbering {
    short: HashMap<[u8; SHORT_NAME], u32>,
    long: HashMap<String, u32>,
}

const SHORT_NAME: usize = 24;

/// A name as a key of a [`Numbering`].
#[derive(Debug, Clone, Copy)]
enum Name<'a> {
    Short([u8; SHORT_NAME]),
    Long(&'a str),
}

impl<'a> Name<'a> {
    fn of(name: &'a str) -> Self {
        Numbering::padded(name).map_or(Name::Long(name), Name::Short)
    }
}

impl Numbering {
    fn padded(name: &str) -> Option<[u8; SHORT_NAME]> {
        let bytes = name.as_bytes();
        let mut out = [0u8; SHORT_NAME];
        out.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(out)
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.number(&Name::of(name))
    }

    fn number(&self, name: &Name<'_>) -> Option<u32> {
        match name {
            Name::Short(key) => self.short.get(key).copied(),
            Name::Long(name) => self.long.get(*name).copied(),
        }
    }

    fn insert(&mut self, name: &str, number: u32) {
        match Self::padded(name) {
            Some(key) => self.short.insert(key, number),
            None => self.long.insert(name.to_owned(), number),
        };
    }

    /// Move `other`'s names into these.
    fn append(&mut self, other: &mut Numbering) {
        self.short.extend(other.short.drain());
        self.long.extend(other.long.drain());
    }
}

/// What sealing computes over the whole index: the small trees on top and the root.
#[derive(Debug, Clone)]
struct Sealed {
    frame_names: Vec<String>,
    frames_tree: MemoryTree<Blake3>,
    subjects_root: Digest,
    links_root: Digest,
    root: Digest,
}

impl Index {
    pub fn new() -> Self {
        Self::default()
    }

    /// Build the index of a sequence of atoms from position 0.
    pub fn build(atoms: &[Atom]) -> Self {
        let mut index = Self::new();
        index.fold_all(atoms);
        index.seal();
        index
    }

    /// How many atoms of the log the index covers.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Take in the next atom of the log (position `self.size()`).
    pub fn fold(&mut self, atom: &Atom) {
        let p = atom.parts();
        let (frame, subject) = (self.known.frames.get(&p.frame), self.known.subjects.get(&p.subject));
        let mut prepared = Prepared::of(atom, self.size, frame, subject);
        self.size += 1;
        self.sealed = None;
        let frame = self.frame_number(&mut prepared);
        self.cells(frame, prepared.hour).bucket(prepared.cell).push(prepared.entry);
        self.join_lists(&mut prepared, &Numbering::default());
    }

    /// Take in the next atoms of the log. The per-atom work runs on every core a chunk
    /// ahead of placing atoms in their buckets and lists, which follows log order.
    pub fn fold_all(&mut self, atoms: &[Atom]) {
        if atoms.len() < 64 {
            for a in atoms {
                self.fold(a);
            }
            return;
        }
        // The subjects seen before a chunk, read while it is placed and the next prepared;
        // the chunk's new subjects gather in `self.known.subjects` and join them after.
        let mut seen = std::mem::take(&mut self.known.subjects);
        let mut chunks = atoms.chunks(FOLD_CHUNK);
        let (mut current, mut next) = (Vec::new(), Vec::new());
        let mut base = self.size;
        if let Some(first) = chunks.next() {
            Prepared::all(&mut current, first, base, &self.known.frames, &seen);
        }
        loop {
            base += current.len() as u64;
            let Some(following) = chunks.next() else {
                self.place(&mut current, &seen);
                break;
            };
            // What this chunk adds (new frames, new subjects) is resolved when the next one
            // is placed. Frames are few; a copy of their numbers costs nothing.
            let frames = self.known.frames.clone();
            rayon::join(
                || self.place(&mut current, &seen),
                || Prepared::all(&mut next, following, base, &frames, &seen),
            );
            seen.append(&mut self.known.subjects);
            std::mem::swap(&mut current, &mut next);
        }
        seen.append(&mut self.known.subjects);
        self.known.subjects = seen;
    }

    /// Put prepared atoms (the next in the log) in their buckets and lists.
    /// Subjects are looked up in `seen`, then among those numbered since.
    fn place(&mut self, prepared: &mut [Prepared<'_>], seen: &Numbering) {
        self.size += prepared.len() as u64;
        self.sealed = None;
        // One pass in log order: new frames and subjects get their numbers, atoms join their
        // lists, and buckets are numbered in order of first sighting.
        let mut runs: HashMap<(u32, Option<i64>, u128), u32> = HashMap::default();
        let mut run_keys: Vec<(u32, Option<i64>, u128)> = Vec::new();
        let mut run_of: Vec<u32> = Vec::with_capacity(prepared.len());
        for p in prepared.iter_mut() {
            let key = (self.frame_number(p), p.hour, p.cell);
            let run = *runs.entry(key).or_insert_with(|| {
                run_keys.push(key);
                run_keys.len() as u32 - 1
            });
            run_of.push(run);
            self.join_lists(p, seen);
        }
        // Each bucket's atoms as one run, in log order.
        let (start, order) = group_by_key(run_of.iter().map(|&r| r as usize), run_keys.len());
        // Each bucket's new entries gathered on every core, then handed over.
        let gathered: Vec<Vec<Entry>> = (0..run_keys.len())
            .into_par_iter()
            .map(|r| order[start[r]..start[r + 1]].iter().map(|&i| prepared[i].entry).collect())
            .collect();
        for (&(frame, hour, cell), entries) in run_keys.iter().zip(gathered) {
            self.cells(frame, hour).bucket(cell).append(entries);
        }
        // The lists grow now, while this chunk's atoms are in cache, not at the seal.
        self.absorb_pending();
    }

    /// Add the atoms waiting for their lists to them. The vectors are emptied, not dropped,
    /// so the next atoms reuse their room.
    fn absorb_pending(&mut self) {
        self.subjects.absorb(&self.pending_subjects);
        self.links.absorb(&self.pending_links);
        self.pending_subjects.clear();
        self.pending_links.clear();
    }

    /// The number of the atom's frame, numbering it if it is new.
    fn frame_number(&mut self, prepared: &mut Prepared<'_>) -> u32 {
        if let Some(f) = prepared.frame {
            return f;
        }
        let name = &prepared.atom.parts().frame;
        let known = &mut self.known;
        let f = match known.frames.get(name) {
            Some(f) => f,
            None => {
                known.frame_names.push(name.clone());
                known.frames.insert(name, known.frame_names.len() as u32 - 1);
                known.frame_names.len() as u32 - 1
            }
        };
        prepared.frame = Some(f);
        f
    }

    /// The cells of a frame's hour (`None`: its long-lived atoms), making the frame on its
    /// first atom.
    fn cells(&mut self, frame: u32, hour: Option<i64>) -> &mut Cells {
        let name = &self.known.frame_names[frame as usize];
        if !self.frames.contains_key(name) {
            self.frames.insert(name.clone(), Frame::default());
        }
        let Some(frame) = self.frames.get_mut(name) else { unreachable!("inserted above") };
        match hour {
            Some(hour) => frame.hours.entry(hour).or_insert_with(|| {
                frame.dirty = true;
                Cells::default()
            }),
            None => &mut frame.long,
        }
    }

    /// Resolve a new subject to its list slot (looked up in `seen`, then among the subjects
    /// numbered since), making the list if there is none.
    fn subject_slot(&mut self, prepared: &mut Prepared<'_>, seen: &Numbering) {
        if prepared.subject != Slot::New {
            return;
        }
        let subject = &prepared.atom.parts().subject;
        let slot = match seen.get(subject).or_else(|| self.known.subjects.get(subject)) {
            Some(slot) => slot,
            None => {
                let slot = self.subjects.slot(subject_key(subject), || subject.clone()) as u32;
                self.known.subjects.insert(subject, slot);
                slot
            }
        };
        prepared.subject = Slot::Known(slot);
    }

    /// Queue the atom for its subject's list and its link targets' lists (subjects looked up
    /// as in [`Self::subject_slot`]).
    fn join_lists(&mut self, prepared: &mut Prepared<'_>, seen: &Numbering) {
        self.subject_slot(prepared, seen);
        if let Slot::Known(slot) = prepared.subject {
            self.pending_subjects.push((slot, prepared.entry.position, prepared.leaf));
        }
        if prepared.has_links {
            for link in &prepared.atom.parts().links {
                let slot = self.links.slot(link.target.0, String::new) as u32;
                self.pending_links.push((slot, prepared.entry.position, prepared.leaf));
            }
        }
    }

    /// Rehash what changed since the last seal; returns the root.
    pub fn seal(&mut self) -> Digest {
        if let Some(s) = &self.sealed {
            return s.root;
        }
        // Atoms folded one at a time wait for their lists until now.
        self.absorb_pending();
        // The expensive part, on every core: the buckets' k-d trees.
        let mut dirty: Vec<&mut Bucket> = self.frames.values_mut().flat_map(Frame::dirty_buckets).collect();
        dirty.par_iter_mut().for_each(|b| b.seal());
        // The lists above the buckets, and the two maps, side by side.
        let (frames, subjects, links) = (&mut self.frames, &mut self.subjects, &mut self.links);
        let ((), (subjects_root, links_root)) = rayon::join(
            || frames.values_mut().for_each(Frame::seal),
            || (subjects.seal(subject_digest), links.seal(link_digest)),
        );
        let frame_names: Vec<String> = self.frames.keys().cloned().collect();
        let frames_tree = MemoryTree::<Blake3>::from_leaves(self.frames.iter().map(|(n, f)| f.encode(n)));
        let root = index_root(frame_names.len() as u64, &frames_tree.root(), &subjects_root, &links_root);
        self.sealed = Some(Sealed { frame_names, frames_tree, subjects_root, links_root, root });
        root
    }

    /// The index root (sealing first if needed).
    pub fn root(&mut self) -> Digest {
        self.seal()
    }

    fn frames_path(sealed: &Sealed, index: u64) -> Vec<Digest> {
        let n = sealed.frames_tree.size();
        sion_verify::merkle::inclusion_path::<Blake3, _>(&sealed.frames_tree, index, n).unwrap_or_default()
    }

    /// Every atom in the query's frame, box and interval, with the walks that prove it complete.
    pub fn range(&mut self, q: &Query) -> RangeAnswer {
        self.seal();
        let sealed = self.sealed.as_ref().unwrap_or_else(|| unreachable!());
        let frames = sealed.frame_names.len() as u64;
        let (subjects_root, links_root) = (sealed.subjects_root, sealed.links_root);
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
            .filter_map(|s| if let Step::Group(g) = s { Some(g) } else { None })
            .flatten()
            .filter_map(|e| if let GroupEntry::Hit(p) = e { Some(*p) } else { None })
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
        self.seal();
        let sealed = self.sealed.as_ref().unwrap_or_else(|| unreachable!());
        list_answer(&self.subjects, &subject_key(subject), sealed, sealed.links_root)
    }

    /// Every atom that links to `target`.
    pub fn links(&mut self, target: &AtomId) -> ListAnswer {
        self.seal();
        let sealed = self.sealed.as_ref().unwrap_or_else(|| unreachable!());
        list_answer(&self.links, &target.0, sealed, sealed.subjects_root)
    }
}

fn list_answer(lists: &Lists, key: &[u8; 32], sealed: &Sealed, other_root: Digest) -> ListAnswer {
    let (path, leaf) = match lists.map.search(key) {
        None => (Vec::new(), None),
        Some((path, leaf_key, _)) => {
            let leaf = lists.get(&leaf_key).map(|l| MapLeaf {
                key: leaf_key,
                label: l.label.clone(),
                count: l.positions.len() as u64,
                root: l.root(),
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
