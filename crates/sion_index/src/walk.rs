//! Answering from a sealed version: a [`Snapshot`] is a root record and the store it points
//! into, and every answer is read from immutable records through `&self` — no lock on the
//! writer, whatever the writer is doing, and the same code for the latest head and an old one.

use std::cell::Cell;
use std::sync::{Arc, Mutex, PoisonError};

use sion_verify::atom::AtomId;
use sion_verify::index::critbit::{self, PathStep, bit};
use sion_verify::index::geom::Query;
use sion_verify::index::{
    FrameWitness, ListAnswer, ListHasher, MapLeaf, Neighbour, PlaceLeaf, Places, RangeAnswer, SubjectPlace,
    Version, encode_frame, frames_commitment, index_root, subject_key,
};
use sion_verify::merkle::{Blake3, Digest, Frontier, MemoryTree};

use super::IndexError;
use super::record::{
    BucketRec, CellItem, CritChild, FULL_RUN, ListSlot, Ptr, Record, RootFrame, RootRec, Slot,
};
use super::store::Store;
use super::tree::{BlockTree, Items, Select, Shape, Step, Summary, interior_of, walk};

/// The index of the log's first `size()` atoms, as sealed: answers with their proofs.
#[derive(Clone)]
pub struct Snapshot {
    pub(super) store: Arc<Store>,
    pub(super) root: Arc<RootRec>,
    pub(super) partials: Arc<PartialCache>,
}

/// Partial blocks rebuilt from their runs (k-d order, group tree) by the bucket record they
/// belong to: records never change, so neither do these.
#[derive(Default)]
pub struct PartialCache(Mutex<Vec<(Ptr, Arc<BlockTree>)>>);

const PARTIALS_KEPT: usize = 64;

impl PartialCache {
    fn get(&self, bucket: Ptr) -> Option<Arc<BlockTree>> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter().find(|(p, _)| *p == bucket).map(|(_, b)| Arc::clone(b))
    }

    fn put(&self, bucket: Ptr, block: Arc<BlockTree>) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= PARTIALS_KEPT {
            kept.remove(0);
        }
        kept.push((bucket, block));
    }
}

/// The summary of a tree over a frontier (RFC 9162 shape: each peak the left child of the
/// rest), and of any suffix of it.
fn fold(parts: &[Part]) -> Option<Summary> {
    let mut iter = parts.iter().rev();
    let last = iter.next()?.summary();
    Some(iter.fold(last, |right, left| Summary::join(&left.summary(), &right)))
}

/// How a walk continues into a list's item (a level-0 slot) that meets the query.
type ItemWalk<'a> = dyn FnMut(&Slot, &mut Vec<Step>) -> Result<(), IndexError> + 'a;
/// How a walk continues into a bucket's partial block.
type PartialWalk<'a> = dyn FnMut(&Summary, &mut Vec<Step>) -> Result<(), IndexError> + 'a;

/// A peak of a list tree as a walk meets it: a stored subtree, or a bucket's partial block.
#[derive(Debug, Clone, Copy)]
enum Part {
    Slot(Slot),
    Partial(Summary),
}

impl Part {
    fn summary(&self) -> Summary {
        match self {
            Part::Slot(s) => s.summary,
            Part::Partial(s) => *s,
        }
    }
}

/// The most a walk of a range answer holds before the question is refused as too large: its
/// steps and the entries of the leaf groups it opened, each a few dozen bytes in a proof file.
/// More would not fit the 64 MiB a proof file may hold (docs/PROOFS.md), and what the walk
/// holds stays bounded (tens of MiB) whatever is asked.
pub const MAX_WALK_STEPS: usize = 1 << 19;

/// The fewest bytes one answer entry takes in a list proof (docs/PROOFS.md, kind 4): a varint
/// position, a u32 length, and the smallest atom a list can hold (81 bytes: docs/ATOM.md's
/// fixed fields, a one-byte frame and a one-byte subject; a link list's atom also has a link).
pub const MIN_LIST_ENTRY_BYTES: usize = 1 + 4 + 81;

/// The most a subject or link list walk takes (records read, and positions) before the
/// question is refused as too large: a list longer than this could not fit the 64 MiB a
/// proof file may hold even were every atom the smallest (about 780,000 entries), and what
/// the walk holds stays a few MiB, however long the list has grown. The atoms themselves are
/// then read only while they fit those 64 MiB.
pub const MAX_LIST_STEPS: usize = sion_verify::proof::MAX_FILE_BYTES / MIN_LIST_ENTRY_BYTES;

/// Which list a walk is reading, for a refusal.
enum ListName<'a> {
    Subject(&'a str),
    Links(&'a AtomId),
}

impl ListName<'_> {
    fn describe(&self) -> String {
        match self {
            ListName::Subject(s) => format!("atoms about {s:?}"),
            ListName::Links(id) => format!("atoms linking to {id}"),
        }
    }
}

/// What a list walk has taken so far: each record it reads is a step, each position an
/// entry. Refused as soon as it passes `max`, so a damaged record that claims a short list
/// but points to a long one is stopped too.
struct ListBudget<'a> {
    max: usize,
    taken: usize,
    /// What the list says it holds (for the refusal).
    entries: u64,
    name: &'a ListName<'a>,
}

impl ListBudget<'_> {
    fn take(&mut self, n: usize) -> Result<(), IndexError> {
        self.taken = self.taken.saturating_add(n);
        if self.taken > self.max { Err(self.refused()) } else { Ok(()) }
    }

    fn refused(&self) -> IndexError {
        IndexError::ListTooLarge { list: self.name.describe(), entries: self.entries, max: self.max }
    }
}

/// What a walk has taken so far, counted as it goes (each step once).
struct Budget {
    max: usize,
    counted: Cell<usize>,
    taken: Cell<usize>,
}

impl Budget {
    fn new(max: usize) -> Self {
        Self { max, counted: Cell::new(0), taken: Cell::new(0) }
    }

    /// Checked after each block a walk enters: a block adds at most its few hundred entries.
    fn within(&self, out: &[Step]) -> Result<(), IndexError> {
        let new = out.get(self.counted.get()..).unwrap_or_default();
        let taken = new.iter().map(|s| 1 + if let Step::Group(g) = s { g.len() } else { 0 }).sum::<usize>();
        self.counted.set(out.len());
        self.taken.set(self.taken.get() + taken);
        if self.taken.get() > self.max { Err(IndexError::TooLarge(self.max)) } else { Ok(()) }
    }
}

/// The index root a root record's parts hash to.
pub fn recompute_root(root: &RootRec) -> Digest {
    let frames = frames_tree(&root.frames);
    index_root(
        root.frames.len() as u64,
        &frames_commitment(&frames.root(), &map_digest(&root.places)),
        &map_digest(&root.subjects),
        &map_digest(&root.links),
    )
}

fn frames_tree(frames: &[RootFrame]) -> MemoryTree<Blake3> {
    MemoryTree::<Blake3>::from_leaves(
        frames.iter().map(|f| encode_frame(Version::V4, &f.name, f.short, f.long)),
    )
}

fn map_digest(map: &Option<CritChild>) -> Digest {
    map.map_or_else(critbit::empty_digest, |c| c.digest)
}

impl Snapshot {
    /// How many atoms of the log this version covers.
    pub fn size(&self) -> u64 {
        self.root.version
    }

    /// The index root of this version.
    pub fn root(&self) -> Digest {
        self.root.index_root
    }

    fn frames_path(tree: &MemoryTree<Blake3>, index: u64) -> Vec<Digest> {
        sion_verify::merkle::inclusion_path::<Blake3, _>(tree, index, tree.size()).unwrap_or_default()
    }

    /// What the snapshot holds in each frame (sorted by name): the union of its atoms' boxes
    /// and valid times, from the summaries the root commits to. Reads nothing from disk.
    pub fn held(&self) -> Vec<sion_verify::index::geom::FrameExtent> {
        self.root
            .frames
            .iter()
            .filter_map(|f| {
                let extent = match (f.short, f.long) {
                    (Some(a), Some(b)) => a.bbox.union(&b.bbox),
                    (Some(a), None) | (None, Some(a)) => a.bbox,
                    (None, None) => return None,
                };
                Some(sion_verify::index::geom::FrameExtent { frame: f.name.clone(), extent })
            })
            .collect()
    }

    /// Every atom in the query's frame, box and interval, with the walks that prove it complete.
    pub fn range(&self, q: &Query) -> Result<RangeAnswer, IndexError> {
        self.range_within(q, MAX_WALK_STEPS)
    }

    /// The same, refused ([`IndexError::TooLarge`]) as soon as either walk passes `max_steps`
    /// (steps and leaf entries): what the walk holds stays bounded, however much of the memory
    /// the question covers.
    pub fn range_within(&self, q: &Query, max_steps: usize) -> Result<RangeAnswer, IndexError> {
        self.walk_frame(&q.frame, q.subject.as_deref(), q, max_steps)
    }

    /// The walk of a frame's two trees that `q` selects (a range query, or a latest or nearest
    /// question's rule), its hits the answer's positions; an absent frame shown absent.
    pub(super) fn walk_frame(
        &self,
        frame_name: &str,
        subject: Option<&str>,
        q: &dyn Select,
        max_steps: usize,
    ) -> Result<RangeAnswer, IndexError> {
        if let Some(subject) = subject {
            return self.walk_subject(frame_name, subject, q, max_steps);
        }
        let frames = &self.root.frames;
        let tree = frames_tree(frames);
        let count = frames.len() as u64;
        let subjects_root = map_digest(&self.root.subjects);
        let links_root = map_digest(&self.root.links);
        let found = frames.binary_search_by(|f| f.name.as_str().cmp(frame_name));
        let i = match found {
            Ok(i) => i,
            Err(at) => {
                let neighbour = |i: usize| {
                    let f = &frames[i];
                    Neighbour {
                        index: i as u64,
                        entry: encode_frame(Version::V4, &f.name, f.short, f.long),
                        path: Self::frames_path(&tree, i as u64),
                    }
                };
                return Ok(RangeAnswer {
                    positions: Vec::new(),
                    frames: count,
                    frame: FrameWitness::Absent {
                        left: at.checked_sub(1).map(neighbour),
                        right: (at < frames.len()).then(|| neighbour(at)),
                    },
                    short: None,
                    long: None,
                    subjects_root,
                    links_root,
                    places: Places::Root(map_digest(&self.root.places)),
                    version: Version::V4,
                });
            }
        };
        let frame = match &*self.store.read(frames[i].ptr)? {
            Record::Frame(f) => f.clone(),
            _ => return Err(IndexError::Damaged(format!("frame {frame_name:?}: not a frame record"))),
        };
        let mut walks = [None, None];
        for (frontier, walked) in [&frame.hours, &frame.months].into_iter().zip(walks.iter_mut()) {
            if !frontier.is_empty() {
                let mut steps = Vec::new();
                let parts: Vec<Part> = frontier.iter().copied().map(Part::Slot).collect();
                let budget = Budget::new(max_steps);
                self.walk_parts(&parts, q, &mut steps, &mut |slot, out| {
                    self.walk_cells_at(slot.ptr, q, out, &budget)
                })?;
                *walked = Some(steps);
            }
        }
        let [short, long] = walks;
        let positions = hits(short.iter().chain(long.iter()));
        Ok(RangeAnswer {
            positions,
            frames: count,
            frame: FrameWitness::Present { index: i as u64, path: Self::frames_path(&tree, i as u64) },
            short,
            long,
            subjects_root,
            links_root,
            places: Places::Root(map_digest(&self.root.places)),
            version: Version::V4,
        })
    }

    /// The walk of one subject's tree in a frame (index version 4) that `q` selects, shown in
    /// the subject's frames tree, the subject's place in the places map shown too; a subject
    /// with no atom shown absent from the map, one with none in the frame absent from its
    /// frames tree.
    fn walk_subject(
        &self,
        frame_name: &str,
        subject: &str,
        q: &dyn Select,
        max_steps: usize,
    ) -> Result<RangeAnswer, IndexError> {
        let key = subject_key(subject);
        let index_frames = frames_tree(&self.root.frames);
        let mut place = SubjectPlace {
            leaf: PlaceLeaf::Empty,
            path: Vec::new(),
            frames: self.root.frames.len() as u64,
            frames_root: index_frames.root(),
        };
        let mut answer = RangeAnswer {
            positions: Vec::new(),
            frames: 0,
            frame: FrameWitness::Absent { left: None, right: None },
            short: None,
            long: None,
            subjects_root: map_digest(&self.root.subjects),
            links_root: map_digest(&self.root.links),
            places: Places::Before,
            version: Version::V4,
        };
        let Some(at) = self.root.places else {
            answer.places = Places::Subject(place);
            return Ok(answer);
        };
        let (ptr, path) = self.map_path(at, &key)?;
        place.path = path;
        let places = match &*self.store.read(ptr)? {
            Record::Places(p) => p.clone(),
            _ => return Err(IndexError::Damaged(format!("the places at {ptr} are not places"))),
        };
        let tree = super::write::places_tree(&places.frames);
        if places.key != key {
            place.leaf =
                PlaceLeaf::Other { key: places.key, frames: places.frames.len() as u64, root: tree.root() };
            answer.places = Places::Subject(place);
            return Ok(answer);
        }
        place.leaf = PlaceLeaf::Found;
        answer.frames = places.frames.len() as u64;
        match places.frames.binary_search_by(|f| f.name.as_str().cmp(frame_name)) {
            Err(at) => {
                let neighbour = |i: usize| {
                    let f = &places.frames[i];
                    Neighbour {
                        index: i as u64,
                        entry: encode_frame(Version::V4, &f.name, Some(f.summary), None),
                        path: Self::frames_path(&tree, i as u64),
                    }
                };
                answer.frame = FrameWitness::Absent {
                    left: at.checked_sub(1).map(neighbour),
                    right: (at < places.frames.len()).then(|| neighbour(at)),
                };
            }
            Ok(i) => {
                let budget = Budget::new(max_steps);
                let mut steps = Vec::new();
                let summary = places.frames[i].summary;
                let part =
                    Part::Slot(Slot { level: 0, ptr: places.frames[i].bucket, first: 0, last: 0, summary });
                self.walk_parts(&[part], q, &mut steps, &mut |slot, out| {
                    self.walk_bucket_at(slot.ptr, q, out, &budget)
                })?;
                answer.positions = hits(std::slice::from_ref(&steps));
                answer.short = Some(steps);
                answer.frame =
                    FrameWitness::Present { index: i as u64, path: Self::frames_path(&tree, i as u64) };
            }
        }
        answer.places = Places::Subject(place);
        Ok(answer)
    }

    /// The descent of a crit-bit map to the leaf a search for `key` ends at: its record and
    /// the path (crit bits grow going down, so it ends within 256 steps whatever the records
    /// say).
    fn map_path(&self, mut at: CritChild, key: &[u8; 32]) -> Result<(Ptr, Vec<PathStep>), IndexError> {
        let mut path = Vec::new();
        let mut above: Option<u16> = None;
        while !at.leaf {
            let node = super::map::crit_node(&self.store, &at)?;
            if above.is_some_and(|a| node.crit <= a) {
                return Err(IndexError::Damaged(format!("the map node at {} is out of order", at.ptr)));
            }
            above = Some(node.crit);
            let (next, other) =
                if bit(key, node.crit) { (node.right, node.left) } else { (node.left, node.right) };
            path.push(PathStep { crit: node.crit, sibling: other.digest });
            at = next;
        }
        Ok((at.ptr, path))
    }

    /// Walk a list tree given by its peaks: each peak is the left child of the tree over the
    /// rest. `item` continues into a level-0 item that meets the query.
    fn walk_parts(
        &self,
        parts: &[Part],
        q: &dyn Select,
        out: &mut Vec<Step>,
        item: &mut ItemWalk<'_>,
    ) -> Result<(), IndexError> {
        self.walk_parts_partial(parts, q, out, item, &mut |_, _| Ok(()))
    }

    fn walk_parts_partial(
        &self,
        parts: &[Part],
        q: &dyn Select,
        out: &mut Vec<Step>,
        item: &mut ItemWalk<'_>,
        partial: &mut PartialWalk<'_>,
    ) -> Result<(), IndexError> {
        match parts {
            [] => Ok(()),
            [one] => self.walk_part(one, q, out, item, partial),
            [first, rest @ ..] => {
                let Some(s) = fold(parts) else { return Ok(()) };
                if q.whole(&s.bbox, s.tally.kinds) {
                    out.push(Step::Whole(s));
                    return Ok(());
                }
                if !q.opens(&s.bbox, s.tally.kinds) {
                    out.push(Step::Pruned(s));
                    return Ok(());
                }
                out.push(Step::Interior(s.bbox));
                self.walk_part(first, q, out, item, partial)?;
                self.walk_parts_partial(rest, q, out, item, partial)
            }
        }
    }

    fn walk_part(
        &self,
        part: &Part,
        q: &dyn Select,
        out: &mut Vec<Step>,
        item: &mut ItemWalk<'_>,
        partial: &mut PartialWalk<'_>,
    ) -> Result<(), IndexError> {
        let summary = part.summary();
        if q.whole(&summary.bbox, summary.tally.kinds) {
            out.push(Step::Whole(summary));
            return Ok(());
        }
        if !q.opens(&summary.bbox, summary.tally.kinds) {
            out.push(Step::Pruned(summary));
            return Ok(());
        }
        match part {
            Part::Partial(s) => partial(s, out),
            Part::Slot(slot) if slot.level == 0 => item(slot, out),
            Part::Slot(slot) => {
                out.push(Step::Interior(summary.bbox));
                let node = match &*self.store.read(slot.ptr)? {
                    Record::Node(n) => *n,
                    _ => return Err(IndexError::Damaged(format!("the node at {} is not a node", slot.ptr))),
                };
                self.walk_part(&Part::Slot(node.left), q, out, item, partial)?;
                self.walk_part(&Part::Slot(node.right), q, out, item, partial)
            }
        }
    }

    /// Walk a cell list (its tree is rebuilt from its items: a few dozen at most).
    fn walk_cells_at(
        &self,
        ptr: Ptr,
        q: &dyn Select,
        out: &mut Vec<Step>,
        budget: &Budget,
    ) -> Result<(), IndexError> {
        let items: Vec<CellItem> = match &*self.store.read(ptr)? {
            Record::Cells(c) => c.items.clone(),
            _ => return Err(IndexError::Damaged(format!("the cell list at {ptr} is not one"))),
        };
        let interior = interior_of(Shape::Lists, items.len(), &|i| items[i].summary);
        let walked = Items {
            count: items.len(),
            outline: &|i| (items[i].summary.bbox, items[i].summary.tally.kinds),
            summary: &|i| items[i].summary,
        };
        walk(Shape::Lists, &interior, &walked, q, out, &mut |i, out| {
            self.walk_bucket_at(items[i].bucket, q, out, budget)
        })
    }

    fn walk_bucket_at(
        &self,
        ptr: Ptr,
        q: &dyn Select,
        out: &mut Vec<Step>,
        budget: &Budget,
    ) -> Result<(), IndexError> {
        let bucket = match &*self.store.read(ptr)? {
            Record::Bucket(b) => b.clone(),
            _ => return Err(IndexError::Damaged(format!("the bucket at {ptr} is not one"))),
        };
        let mut parts: Vec<Part> = bucket.full.iter().copied().map(Part::Slot).collect();
        if let Some(p) = bucket.partial {
            parts.push(Part::Partial(p));
        }
        self.walk_parts_partial(
            &parts,
            q,
            out,
            &mut |slot, out| {
                match &*self.store.read(slot.ptr)? {
                    Record::Block(b) => {
                        BlockTree { entries: b.entries.clone(), interior: b.interior.clone() }.walk(q, out)
                    }
                    _ => return Err(IndexError::Damaged(format!("the block at {} is not one", slot.ptr))),
                }
                budget.within(out)
            },
            &mut |_, out| {
                self.partial_block(ptr, &bucket)?.walk(q, out);
                budget.within(out)
            },
        )
    }

    /// A bucket's partial block, from its runs.
    fn partial_block(&self, ptr: Ptr, bucket: &BucketRec) -> Result<Arc<BlockTree>, IndexError> {
        if let Some(b) = self.partials.get(ptr) {
            return Ok(b);
        }
        let block = Arc::new(BlockTree::build(read_runs(&self.store, bucket)?));
        self.partials.put(ptr, Arc::clone(&block));
        Ok(block)
    }

    /// Every atom about `subject`.
    pub fn subject(&self, subject: &str) -> Result<ListAnswer, IndexError> {
        self.subject_within(subject, MAX_LIST_STEPS)
    }

    /// The same, refused ([`IndexError::ListTooLarge`]) when the list's walk would pass
    /// `max_steps` (records read and positions): before any position is read when the list
    /// says it is longer, and as soon as the walk passes it otherwise.
    pub fn subject_within(&self, subject: &str, max_steps: usize) -> Result<ListAnswer, IndexError> {
        self.list_answer(
            &self.root.subjects,
            &subject_key(subject),
            map_digest(&self.root.links),
            &ListName::Subject(subject),
            max_steps,
        )
    }

    /// Every atom that links to `target`.
    pub fn links(&self, target: &AtomId) -> Result<ListAnswer, IndexError> {
        self.links_within(target, MAX_LIST_STEPS)
    }

    /// The same, bounded as [`Snapshot::subject_within`] is.
    pub fn links_within(&self, target: &AtomId, max_steps: usize) -> Result<ListAnswer, IndexError> {
        self.list_answer(
            &self.root.links,
            &target.0,
            map_digest(&self.root.subjects),
            &ListName::Links(target),
            max_steps,
        )
    }

    fn list_answer(
        &self,
        map: &Option<CritChild>,
        key: &[u8; 32],
        other_root: Digest,
        name: &ListName<'_>,
        max_steps: usize,
    ) -> Result<ListAnswer, IndexError> {
        let frames = frames_tree(&self.root.frames);
        let mut answer = ListAnswer {
            positions: Vec::new(),
            leaf: None,
            path: Vec::new(),
            frames: self.root.frames.len() as u64,
            frames_root: frames_commitment(&frames.root(), &map_digest(&self.root.places)),
            other_root,
        };
        let Some(at) = *map else { return Ok(answer) };
        // The descent to the list is at most 256 steps, whatever the list's length: the budget
        // counts the list's walk.
        let (ptr, path) = self.map_path(at, key)?;
        answer.path = path;
        let list = match &*self.store.read(ptr)? {
            Record::List(l) => l.clone(),
            _ => return Err(IndexError::Damaged(format!("the list at {ptr} is not one"))),
        };
        let root = Frontier::<ListHasher>::from_peaks(list.count, list.peaks.clone())
            .ok_or_else(|| IndexError::Damaged(format!("the list at {ptr} has the wrong peaks")))?
            .root();
        if list.key == *key {
            let mut budget = ListBudget { max: max_steps, taken: 0, entries: list.count, name };
            // Refused before a position is read: the list says how long it is.
            if list.count > max_steps as u64 {
                return Err(budget.refused());
            }
            for slot in &list.full {
                full_runs(&self.store, *slot, &mut answer.positions, &mut budget)?;
            }
            for run in &list.runs {
                budget.take(1)?;
                match &*self.store.read(run.ptr)? {
                    Record::ListRun(r) if r.positions.len() == run.count as usize => {
                        budget.take(r.positions.len())?;
                        answer.positions.extend_from_slice(&r.positions)
                    }
                    _ => return Err(IndexError::Damaged(format!("the list run at {} is not one", run.ptr))),
                }
            }
            budget.take(list.tail.len())?;
            answer.positions.extend_from_slice(&list.tail);
            if answer.positions.len() as u64 != list.count {
                return Err(IndexError::Damaged(format!("the list at {} lacks positions", ptr)));
            }
        }
        answer.leaf = Some(MapLeaf { key: list.key, label: list.label, count: list.count, root });
        Ok(answer)
    }
}

/// The positions walks hit (the answer), ascending.
fn hits<'a>(walks: impl IntoIterator<Item = &'a Vec<Step>>) -> Vec<u64> {
    let mut positions: Vec<u64> = walks
        .into_iter()
        .flatten()
        .filter_map(|s| if let Step::Group(g) = s { Some(g) } else { None })
        .flatten()
        .filter_map(|e| if let sion_verify::index::tree::GroupEntry::Hit(p) = e { Some(*p) } else { None })
        .collect();
    positions.sort_unstable();
    positions
}

/// The positions of the full list runs under `slot`, in order, onto `out`. Each list node is
/// one level above its children, so the descent ends within 52 levels whatever the file says.
/// Every record read and position taken counts against `budget`.
fn full_runs(
    store: &Store,
    slot: ListSlot,
    out: &mut Vec<u64>,
    budget: &mut ListBudget<'_>,
) -> Result<(), IndexError> {
    budget.take(1)?;
    let record = store.read(slot.ptr)?;
    match (&*record, slot.level) {
        (Record::ListRun(r), 0) if r.positions.len() == FULL_RUN => {
            budget.take(r.positions.len())?;
            out.extend_from_slice(&r.positions);
            Ok(())
        }
        (Record::ListNode(n), level) if n.level == level && level > 0 => {
            full_runs(store, ListSlot { level: level - 1, ptr: n.left }, out, budget)?;
            full_runs(store, ListSlot { level: level - 1, ptr: n.right }, out, budget)
        }
        _ => Err(IndexError::Damaged(format!(
            "the full list run (level {}) at {} is not one",
            slot.level, slot.ptr
        ))),
    }
}

/// A bucket's partial block's entries, in log order, from its runs.
pub(super) fn read_runs(
    store: &Store,
    bucket: &BucketRec,
) -> Result<Vec<sion_verify::index::tree::Entry>, IndexError> {
    read_entries(&bucket.runs, |ptr| store.read(ptr))
}

/// The entries of `runs`, in order, each run read by `read` and checked to hold its count.
pub(super) fn read_entries(
    runs: &[super::record::RunRef],
    read: impl Fn(Ptr) -> Result<Arc<Record>, IndexError>,
) -> Result<Vec<sion_verify::index::tree::Entry>, IndexError> {
    let mut entries = Vec::with_capacity(runs.iter().map(|r| r.count as usize).sum());
    for run in runs {
        match &*read(run.ptr)? {
            Record::Run(r) if r.entries.len() == run.count as usize => entries.extend_from_slice(&r.entries),
            _ => return Err(IndexError::Damaged(format!("the run at {} is not one", run.ptr))),
        }
    }
    Ok(entries)
}
