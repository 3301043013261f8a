//! Folding the log into the index and sealing versions (docs/INDEX-STORE.md, "Sealing").
//!
//! The writer keeps in memory only what is hot: the buckets and lists atoms went to lately,
//! within a budget; everything else is read back from the store when an atom needs it. A seal
//! writes, for what changed since the last one, new records bottom-up — runs of new entries,
//! full blocks, buckets, cell lists, the hour lists' changed paths, frames, lists and the
//! maps' changed paths — and a root that names them all. Nothing written before is touched.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use sion_verify::atom::{Atom, Interval};
use sion_verify::index::geom::SpaceTime;
use sion_verify::index::tree::{Entry, Summary};
use sion_verify::index::{
    ListHasher, Version, encode_frame, link_leaf_digest, list_leaf, place_leaf_digest, subject_key,
    subject_leaf_digest,
};
use sion_verify::merkle::{Blake3, Digest, Frontier, TreeHasher as _};

use super::map::MemMap;
use super::record::{
    BucketRec, CellItem, CellsRec, CritChild, FULL_RUN, FrameRec, ListNodeRec, ListRec, ListRunRec, ListSlot,
    NodeRec, Period, PlaceFrame, PlacesRec, Ptr, Record, RootFrame, RootRec, RunRef, Slot,
};
use super::store::Store;
use super::tree::{BlockTree, Shape, root_of};
use super::walk::{read_entries, recompute_root};
use super::{BLOCK, CELL_MM, HOUR_NS, IndexError, MONTH_NS, SHORT_LIVED_NS, SUBJECT_BLOCK};

/// Whether an atom valid for `valid` is short-lived (docs/INDEX.md, "Where an atom goes").
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
pub(super) fn spread(v: u64) -> u128 {
    let mut x = u128::from(v);
    x = (x | (x << 32)) & 0x0000_0000_FFFF_FFFF_0000_0000_FFFF_FFFF;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF_0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF_00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333_3333_3333_3333_3333;
    x = (x | (x << 1)) & 0x5555_5555_5555_5555_5555_5555_5555_5555;
    x
}

/// A bucket: a frame's short-lived atoms of one hour, or its long-lived atoms of one month,
/// in one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct BucketKey {
    frame: u32,
    period: Period,
    cell: u128,
    /// The kind code of its atoms: a bucket holds one kind, so a question about some kinds
    /// passes over the others' buckets whole.
    kind: u8,
}

/// Whose a bucket is: a frame's place (its hour or month, cell and kind), or one subject's in
/// one frame (index version 4: every atom about the subject there, in log order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Owner {
    Place(BucketKey),
    Subject([u8; 32], u32),
}

/// The hot buckets, a place's and a subject's, by number: a fold looks an atom's buckets up
/// once, in its first phase, and its second phase and the seal go to them by number (two
/// lookups an atom, in tables whose values are whole buckets, were a fifth of a build's fold,
/// measured).
#[derive(Default)]
struct Buckets {
    places: HashMap<BucketKey, u32>,
    subjects: HashMap<([u8; 32], u32), u32>,
    items: Vec<HotBucket>,
    /// Whose each numbered bucket is (None: the number is free).
    owners: Vec<Option<Owner>>,
    free: Vec<u32>,
}

impl Buckets {
    /// Hold `bucket` as `owner`'s (which holds none); its number.
    fn insert(&mut self, owner: Owner, bucket: HotBucket) -> u32 {
        let n = match self.free.pop() {
            Some(n) => {
                self.items[n as usize] = bucket;
                self.owners[n as usize] = Some(owner);
                n
            }
            None => {
                self.items.push(bucket);
                self.owners.push(Some(owner));
                (self.items.len() - 1) as u32
            }
        };
        debug_assert!(n < NONE, "more buckets held than numbers");
        let held = match owner {
            Owner::Place(key) => self.places.insert(key, n),
            Owner::Subject(subject, frame) => self.subjects.insert((subject, frame), n),
        };
        debug_assert!(held.is_none(), "a bucket held twice");
        n
    }

    /// Let bucket `n` go.
    fn remove(&mut self, n: u32) -> Option<HotBucket> {
        let owner = self.owners.get_mut(n as usize)?.take()?;
        match owner {
            Owner::Place(key) => self.places.remove(&key),
            Owner::Subject(subject, frame) => self.subjects.remove(&(subject, frame)),
        };
        self.free.push(n);
        Some(std::mem::take(&mut self.items[n as usize]))
    }

    fn get(&self, n: u32) -> Option<&HotBucket> {
        self.items.get(n as usize)
    }

    fn get_mut(&mut self, n: u32) -> Option<&mut HotBucket> {
        self.items.get_mut(n as usize)
    }

    /// The buckets held.
    fn held(&self) -> impl Iterator<Item = &HotBucket> {
        self.items.iter().zip(&self.owners).filter(|(_, o)| o.is_some()).map(|(b, _)| b)
    }
}

/// A subject's places the writer holds: its bucket in each frame, by frame name.
#[derive(Debug, Clone, Default)]
struct HotPlaces {
    frames: Vec<PlaceFrame>,
    touched: u64,
}

/// A bucket the writer holds: its partial block's entries and its full blocks' frontier.
#[derive(Debug, Clone, Default)]
struct HotBucket {
    count: u64,
    first_position: u64,
    last_position: u64,
    /// The partial block's entries held (log order), after the `unread` first ones.
    partial: Vec<Entry>,
    /// The partial block's first entries not held: they are in `runs`, read back only when
    /// the block fills or a seal needs them. A bucket loaded again after it was let go holds
    /// none, so an atom that comes to it costs no read, and between seals it holds only
    /// what came since.
    unread: usize,
    /// How many of the partial block's first entries `runs` hold.
    in_runs: usize,
    runs: Vec<RunRef>,
    full: Vec<Slot>,
    /// Blocks that filled since the last seal.
    completed: Vec<Vec<Entry>>,
    /// Atoms a fold made ready to come here and has not pushed yet (zero between folds).
    pending: usize,
    dirty: bool,
    touched: u64,
}

/// A list the writer holds (a subject's, or a link target's).
#[derive(Debug, Clone)]
struct HotList {
    label: String,
    frontier: Frontier<ListHasher>,
    first_position: u64,
    last_position: u64,
    /// Full runs, as a frontier of perfect subtrees (docs/INDEX-STORE.md, list).
    full: Vec<ListSlot>,
    runs: Vec<RunRef>,
    /// Positions not in a run: they travel in the list's record.
    tail: Vec<u64>,
    dirty: bool,
    touched: u64,
}

/// What the writer may hold in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Entries of hot buckets and positions of hot lists, in bytes; past it, clean ones are
    /// let go after a seal, and a fold seals early.
    pub hot_bytes: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self { hot_bytes: 24 << 20 }
    }
}

/// The writer: the only one who folds atoms and seals versions.
pub struct Writer {
    store: Arc<Store>,
    size: u64,
    latest: Option<Arc<RootRec>>,
    frame_numbers: HashMap<String, u32>,
    frame_names: Vec<String>,
    /// The latest record of each frame numbered so far (None: no record yet).
    frame_recs: Vec<Option<FrameRec>>,
    /// Each place's bucket, and each subject's in each frame (index version 4).
    buckets: Buckets,
    /// The fold's bucket numbers of each atom (kept, so that a fold of one atom allocates none).
    bucket_numbers: Vec<(u32, u32)>,
    /// Subjects' places, as last sealed (loaded when an atom about the subject comes).
    places: HashMap<[u8; 32], HotPlaces>,
    /// The buckets an atom went to since the last seal (a seal need not scan every hot one).
    dirty_buckets: Vec<(Owner, u32)>,
    /// The latest cell list of each (frame, period) a hot bucket is in.
    cells_at: HashMap<(u32, Period), Option<Ptr>>,
    lists: [HashMap<[u8; 32], HotList>; 2],
    /// Keys of the lists an atom went to since the last seal (a seal need not scan them all).
    touched_lists: [Vec<[u8; 32]>; 2],
    /// The three maps (subjects, links, places), loaded when first needed.
    maps: [Option<MemMap>; 3],
    budget: Budget,
    seals: u64,
    hot_bytes: usize,
    /// Why the writer takes nothing more, if a seal failed past its buckets.
    interrupted: Option<String>,
}

const SUBJECTS: usize = 0;
const LINKS: usize = 1;
const PLACES: usize = 2;
/// About what a subject's hot places cost, and each frame in them.
const HOT_PLACES_BYTES: usize = 256;
const PLACE_FRAME_BYTES: usize = 200;
/// About what a hot list costs besides its fresh positions.
const HOT_LIST_BYTES: usize = 320;

fn damaged(what: String) -> IndexError {
    IndexError::Damaged(what)
}

/// Push an item (or subtree) onto a frontier, merging equal levels into new node records.
fn push_slot(store: &Store, frontier: &mut Vec<Slot>, mut slot: Slot) {
    while frontier.last().is_some_and(|l| l.level == slot.level) {
        let Some(left) = frontier.pop() else { break };
        let ptr = store.append(Record::Node(NodeRec { left, right: slot }));
        slot = Slot {
            level: left.level + 1,
            ptr,
            first: left.first,
            last: slot.last,
            summary: Summary::join(&left.summary, &slot.summary),
        };
    }
    frontier.push(slot);
}

/// The summary of a list tree given by its peaks (each the left child of the rest).
fn fold_summaries(parts: impl DoubleEndedIterator<Item = Summary>) -> Option<Summary> {
    let mut rev = parts.rev();
    let last = rev.next()?;
    Some(rev.fold(last, |right, left| Summary::join(&left, &right)))
}

/// Replace the items with keys `ups` (ascending, each present) under `slot`, copying the
/// path to each; returns the new slot.
fn update_slot(store: &Store, slot: Slot, ups: &[(i64, Slot)]) -> Result<Slot, IndexError> {
    if ups.is_empty() {
        return Ok(slot);
    }
    if slot.level == 0 {
        return match ups {
            [(key, leaf)] if *key == slot.first => Ok(*leaf),
            _ => Err(damaged(format!("a list item {} is not where its key says", slot.first))),
        };
    }
    let node = match &*store.read(slot.ptr)? {
        Record::Node(n) => *n,
        _ => return Err(damaged(format!("the node at {} is not one", slot.ptr))),
    };
    let split = ups.partition_point(|(k, _)| *k <= node.left.last);
    let left = update_slot(store, node.left, &ups[..split])?;
    let right = update_slot(store, node.right, &ups[split..])?;
    let ptr = store.append(Record::Node(NodeRec { left, right }));
    Ok(Slot {
        level: slot.level,
        ptr,
        first: left.first,
        last: right.last,
        summary: Summary::join(&left.summary, &right.summary),
    })
}

/// Every item (level 0 slot) under the given peaks, in order.
fn leaves(store: &Store, frontier: &[Slot], out: &mut Vec<Slot>) -> Result<(), IndexError> {
    for slot in frontier {
        if slot.level == 0 {
            out.push(*slot);
            continue;
        }
        match &*store.read(slot.ptr)? {
            Record::Node(n) => leaves(store, &[n.left, n.right], out)?,
            _ => return Err(damaged(format!("the node at {} is not one", slot.ptr))),
        }
    }
    Ok(())
}

/// The item with key `key` under the peaks, if there is one.
fn find_item(store: &Store, frontier: &[Slot], key: i64) -> Result<Option<Slot>, IndexError> {
    let Some(mut at) = frontier.iter().find(|s| s.first <= key && key <= s.last).copied() else {
        return Ok(None);
    };
    while at.level > 0 {
        let node = match &*store.read(at.ptr)? {
            Record::Node(n) => *n,
            _ => return Err(damaged(format!("the node at {} is not one", at.ptr))),
        };
        at = if key <= node.left.last { node.left } else { node.right };
    }
    Ok((at.first == key).then_some(at))
}

/// What an atom contributes, worked out on any core before it is placed.
struct Prepared {
    entry: Entry,
    period: Period,
    cell: u128,
    leaf: Digest,
    /// The subject's map key (a hash: computed with the rest, on every core).
    subject: Option<[u8; 32]>,
}

fn prepare(atom: &Atom, position: u64) -> Prepared {
    let p = atom.parts();
    let entry = Entry { position, id: atom.id(), bbox: SpaceTime::of_atom(p), kind: p.kind.code() };
    let joins = !p.subject.is_empty() || !p.links.is_empty();
    Prepared {
        period: if is_short_lived(&p.valid) {
            Period::Hour(p.valid.from_ns.div_euclid(HOUR_NS))
        } else {
            Period::Month(p.valid.from_ns.div_euclid(MONTH_NS))
        },
        cell: cell_key(&entry.bbox),
        leaf: if joins { Blake3::hash_leaf(&list_leaf(position, &entry.id)) } else { [0; 32] },
        subject: (!p.subject.is_empty()).then(|| subject_key(&p.subject)),
        entry,
    }
}

impl Writer {
    /// A writer over `store`, resuming from its latest published root (or empty).
    pub fn new(store: Arc<Store>, latest: Option<Arc<RootRec>>, budget: Budget) -> Result<Self, IndexError> {
        let mut w = Self {
            store,
            size: latest.as_ref().map_or(0, |r| r.version),
            latest: None,
            frame_numbers: HashMap::default(),
            frame_names: Vec::new(),
            frame_recs: Vec::new(),
            buckets: Buckets::default(),
            bucket_numbers: Vec::new(),
            places: HashMap::default(),
            dirty_buckets: Vec::new(),
            cells_at: HashMap::default(),
            lists: [HashMap::default(), HashMap::default()],
            touched_lists: [Vec::new(), Vec::new()],
            maps: [None, None, None],
            budget,
            seals: 0,
            hot_bytes: 0,
            interrupted: None,
        };
        if let Some(root) = &latest {
            for f in &root.frames {
                let rec = match &*w.store.read(f.ptr)? {
                    Record::Frame(rec) => rec.clone(),
                    _ => return Err(damaged(format!("frame {:?} is not a frame record", f.name))),
                };
                let n = w.frame_names.len() as u32;
                w.frame_numbers.insert(f.name.clone(), n);
                w.frame_names.push(f.name.clone());
                w.frame_recs.push(Some(rec));
            }
        }
        w.latest = latest;
        Ok(w)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// How many atoms are folded.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of entries and positions held hot.
    pub fn hot_bytes(&self) -> usize {
        self.hot_bytes
    }

    /// Nodes of the subject, link and places maps held in memory (at most `map::MAX_NODES`
    /// each between seals; not part of `hot_bytes`).
    pub fn map_nodes(&self) -> usize {
        self.maps.iter().flatten().map(MemMap::loaded).sum()
    }

    fn frame_number(&mut self, name: &str) -> u32 {
        if let Some(&n) = self.frame_numbers.get(name) {
            return n;
        }
        let n = self.frame_names.len() as u32;
        self.frame_numbers.insert(name.to_owned(), n);
        self.frame_names.push(name.to_owned());
        self.frame_recs.push(None);
        n
    }

    /// The fold's two halves, each borrowing only the fields it changes: the buckets (a
    /// place's, a subject's) and the lists (subjects', link targets').
    fn sides(&mut self) -> (BucketSide<'_>, ListSide<'_>) {
        let latest = self.latest.as_deref();
        let [subjects, links, places] = &mut self.maps;
        (
            BucketSide {
                store: &self.store,
                frame_names: &self.frame_names,
                frame_recs: &self.frame_recs,
                places_root: latest.and_then(|r| r.places),
                buckets: &mut self.buckets,
                numbers: &mut self.bucket_numbers,
                places: &mut self.places,
                cells_at: &mut self.cells_at,
                places_map: places,
                dirty_buckets: &mut self.dirty_buckets,
                seals: self.seals,
                walked: 0,
                grown: 0,
            },
            ListSide {
                store: &self.store,
                roots: [latest.and_then(|r| r.subjects), latest.and_then(|r| r.links)],
                lists: &mut self.lists,
                touched: &mut self.touched_lists,
                maps: [subjects, links],
                seals: self.seals,
                grown: 0,
            },
        )
    }

    /// The writer's copy of map `m`, loaded from the latest root on first use.
    fn map(&mut self, m: usize) -> &mut MemMap {
        let root = self.latest.as_ref().and_then(|r| match m {
            SUBJECTS => r.subjects,
            LINKS => r.links,
            _ => r.places,
        });
        self.maps[m].get_or_insert_with(|| MemMap::load(root))
    }

    /// Whether the writer still takes atoms and seals.
    fn usable(&self) -> Result<(), IndexError> {
        match &self.interrupted {
            Some(why) => Err(IndexError::Interrupted(why.clone())),
            None => Ok(()),
        }
    }

    /// Take in the next atom of the log (position `self.size()`).
    pub fn fold(&mut self, atom: &Atom) -> Result<(), IndexError> {
        self.usable()?;
        let p = prepare(atom, self.size);
        self.fold_chunk(std::slice::from_ref(atom), &[p])
    }

    /// Take in the next atoms of the log: prepared on every core, placed in log order (the
    /// buckets on one core, the lists on another); a version is sealed early whenever the hot
    /// entries outgrow the budget.
    pub fn fold_all(&mut self, atoms: &[Atom]) -> Result<(), IndexError> {
        self.usable()?;
        const CHUNK: usize = 1 << 14;
        for chunk in atoms.chunks(CHUNK) {
            let base = self.size;
            let prepared: Vec<Prepared> =
                chunk.par_iter().enumerate().map(|(i, a)| prepare(a, base + i as u64)).collect();
            self.fold_chunk(chunk, &prepared)?;
            if self.hot_bytes > self.budget.hot_bytes {
                // Clean ones first (a past hour's buckets take no more atoms); seal early only
                // if what is dirty alone is over the budget.
                self.evict();
                if self.hot_bytes > self.budget.hot_bytes {
                    self.seal()?;
                }
            }
        }
        Ok(())
    }

    /// Place prepared atoms, in two phases so that an atom is taken whole or not at all:
    /// first every read each needs (what it goes to, taken up again; a block it fills, read
    /// back), up to the first atom whose read fails; then the atoms before that one pushed,
    /// which cannot fail. The buckets and the lists are disjoint, so each phase runs its two
    /// halves on two cores (one, for a few atoms), and the node file is the same either way.
    fn fold_chunk(&mut self, atoms: &[Atom], prepared: &[Prepared]) -> Result<(), IndexError> {
        let mut frames = Vec::with_capacity(atoms.len());
        let mut last: Option<(&str, u32)> = None;
        for atom in atoms {
            let name = atom.parts().frame.as_str();
            let n = match last {
                Some((seen, n)) if seen == name => n,
                _ => self.frame_number(name),
            };
            last = Some((name, n));
            frames.push(n);
        }
        // Two cores for a build's or a cold boot's batches; a commit's thousand atoms fold
        // sooner on one (measured: waking the other cost more than it saved, 2.0-2.1 ms a
        // commit against 1.3-1.6 ms, and its worst case doubled).
        let both = atoms.len() >= 4_096;
        let (mut buckets, mut lists) = self.sides();
        let (b, l) = join(both, || buckets.ready_all(prepared, &frames), || lists.ready_all(atoms, prepared));
        // The first atom either half failed on (the buckets' error, if both failed on it).
        let failed = [b.err(), l.err()].into_iter().flatten().min_by_key(|(i, _)| *i);
        let taken = failed.as_ref().map_or(atoms.len(), |(i, _)| *i);
        let (b, l) = join(
            both,
            || buckets.push_all(prepared, &frames, taken),
            || lists.push_all(atoms, prepared, taken),
        );
        let grown = buckets.grown + lists.grown;
        self.hot_bytes += grown;
        self.size += taken as u64;
        if let Err(e) = b.and(l) {
            // An atom ready was not where the first phase left it: the writer's state is not
            // what it believes, so it goes no further.
            self.interrupted = Some(e.to_string());
            return Err(e);
        }
        failed.map_or(Ok(()), |(_, e)| Err(e))
    }

    /// Write what changed since the last seal and publish the version of everything folded.
    pub fn seal(&mut self) -> Result<Arc<RootRec>, IndexError> {
        self.usable()?;
        if let Some(latest) = &self.latest
            && latest.version == self.size
        {
            return Ok(Arc::clone(latest));
        }
        self.seals += 1;
        let mut owners = std::mem::take(&mut self.dirty_buckets);
        owners.sort_unstable();
        owners.dedup();
        // A number is its owner's while the bucket is dirty (only clean ones are let go); checked
        // all the same, so a number freed and given again is never sealed as another's.
        owners.retain(|&(o, n)| {
            self.buckets.owners.get(n as usize) == Some(&Some(o))
                && self.buckets.get(n).is_some_and(|b| b.dirty)
        });
        let mut past_buckets = false;
        match self.seal_owners(&owners, &mut past_buckets) {
            Ok(root) => Ok(root),
            Err(e) if past_buckets => {
                // Past the buckets (or in one as it was written), what the writer holds (cell
                // lists, frames, lists, maps, filled blocks) is not what the store has: go no
                // further.
                self.interrupted = Some(e.to_string());
                Err(e)
            }
            Err(e) => {
                // In the buckets (a read back failed), nothing folded is lost: every bucket of
                // this seal is dirty again (those it wrote are written again, the same, by the
                // next seal, with their cells and places).
                for &(_, n) in &owners {
                    if let Some(b) = self.buckets.get_mut(n) {
                        b.dirty = true;
                    }
                }
                self.dirty_buckets.extend(owners);
                Err(e)
            }
        }
    }

    /// The seal of [`Writer::seal`], given its dirty buckets (sorted).
    fn seal_owners(
        &mut self,
        owners: &[(Owner, u32)],
        past_buckets: &mut bool,
    ) -> Result<Arc<RootRec>, IndexError> {
        let store = Arc::clone(&self.store);
        let trace = std::env::var_os("SION_SEAL_TRACE").is_some();
        let t0 = std::time::Instant::now();
        let mut marks: Vec<(&str, std::time::Duration)> = Vec::new();

        // Buckets: the k-d trees of filled and partial blocks, on every core; a slice at a
        // time, so the entries read back for this seal are let go again before the next
        // slice's are read (what the seal holds past the budget stays within about a quarter
        // of it: a whole budget's slice was 24 MB of a cold boot's peak, and a quarter's
        // seals as fast).
        let mut changed_cells: BTreeMap<(u32, Period), Vec<CellItem>> = BTreeMap::new();
        let mut changed_places: BTreeMap<[u8; 32], Vec<(u32, Ptr, Summary)>> = BTreeMap::new();
        let slice_bytes = (self.budget.hot_bytes / 4).max(1 << 20);
        let mut done = 0;
        while done < owners.len() {
            let (mut end, mut bytes) = (done, 0usize);
            while end < owners.len() && (end == done || bytes < slice_bytes) {
                bytes = bytes.saturating_add(self.buckets.get(owners[end].1).map_or(0, |b| {
                    (b.unread + b.partial.len() + b.completed.len() * b.completed.first().map_or(0, Vec::len))
                        * size_of::<Entry>()
                }));
                end += 1;
            }
            self.seal_buckets(
                &store,
                &owners[done..end],
                &mut changed_cells,
                &mut changed_places,
                past_buckets,
            )?;
            done = end;
        }
        *past_buckets = true;

        marks.push(("buckets", t0.elapsed()));
        // Cell lists, then each frame's hour list and month list.
        let mut changed: BTreeMap<(u32, bool), Vec<PeriodUpdate>> = BTreeMap::new();
        for ((frame, period), updates) in changed_cells {
            let previous = cells_ptr(&store, &self.frame_recs, &mut self.cells_at, frame, period)?;
            let items = match previous {
                None => merge_cells(&[], updates),
                Some(p) => match &*store.read(p)? {
                    Record::Cells(c) => merge_cells(&c.items, updates),
                    _ => return Err(damaged(format!("the cell list at {p} is not one"))),
                },
            };
            let summary = root_of(Shape::Lists, &items.iter().map(|i| i.summary).collect::<Vec<_>>())
                .ok_or_else(|| damaged("an empty cell list was sealed".into()))?;
            let ptr = store.append(Record::Cells(CellsRec { period, items }));
            self.cells_at.insert((frame, period), Some(ptr));
            let key = period.key();
            let long = matches!(period, Period::Month(_));
            changed.entry((frame, long)).or_default().push((
                key,
                Slot { level: 0, ptr, first: key, last: key, summary },
                previous.is_some(),
            ));
        }
        for ((frame, long), periods) in changed {
            let name = self.frame_names[frame as usize].clone();
            let mut rec = self.frame_recs[frame as usize].clone().unwrap_or(FrameRec {
                name,
                hours: Vec::new(),
                months: Vec::new(),
            });
            let list = if long { &mut rec.months } else { &mut rec.hours };
            *list = update_list(&store, list, &periods)?;
            self.frame_recs[frame as usize] = Some(rec);
        }

        marks.push(("cells+hours", t0.elapsed()));
        // Each changed subject's places, and the places map.
        let latest_places = self.latest.as_ref().and_then(|r| r.places);
        let mut place_ups: Vec<([u8; 32], Ptr, Digest)> = Vec::with_capacity(changed_places.len());
        for (key, updates) in changed_places {
            let seals = self.seals;
            let names: Vec<String> =
                updates.iter().map(|(frame, _, _)| self.frame_names[*frame as usize].clone()).collect();
            let places = places_of(
                &store,
                latest_places,
                &mut self.maps[PLACES],
                &mut self.places,
                &mut self.hot_bytes,
                key,
            )?;
            places.touched = seals;
            for ((_, bucket, summary), name) in updates.into_iter().zip(names) {
                let item = PlaceFrame { name, bucket, summary };
                match places.frames.binary_search_by(|f| f.name.cmp(&item.name)) {
                    Ok(i) => places.frames[i] = item,
                    Err(i) => places.frames.insert(i, item),
                }
            }
            let tree = places_tree(&places.frames);
            let digest = place_leaf_digest(&key, places.frames.len() as u64, &tree.root());
            let ptr = store.append(Record::Places(PlacesRec { key, frames: places.frames.clone() }));
            place_ups.push((key, ptr, digest));
        }
        let places_root = {
            let map = self.map(PLACES);
            for (key, ptr, digest) in place_ups {
                map.set(&store, key, ptr, digest)?;
            }
            map.seal(&store)
        };
        marks.push(("places", t0.elapsed()));
        // Lists and the two maps.
        let mut map_roots = [None, None];
        for (m, root) in map_roots.iter_mut().enumerate() {
            // The changed lists in key order (so the node file is the same on every run);
            // their runs written first, their roots and leaf digests on every core.
            let lists = &mut self.lists[m];
            // Kept until the lists are written: a seal that fails part-way leaves them to the next.
            let mut keys = self.touched_lists[m].clone();
            keys.sort_unstable();
            keys.dedup();
            keys.retain(|k| lists.get(k).is_some_and(|l| l.dirty));
            for key in &keys {
                if let Some(list) = lists.get_mut(key) {
                    list.write_runs(&store)?;
                }
            }
            let digests: Vec<Option<Digest>> = keys
                .par_iter()
                .map(|key| {
                    let list = lists.get(key)?;
                    let (count, list_root) = (list.frontier.size(), list.frontier.root());
                    Some(if m == SUBJECTS {
                        subject_leaf_digest(key, count, &list_root, &list.label)
                    } else {
                        link_leaf_digest(key, count, &list_root)
                    })
                })
                .collect();
            let mut ups: Vec<([u8; 32], Ptr, Digest)> = Vec::with_capacity(keys.len());
            for (key, digest) in keys.into_iter().zip(digests) {
                let (Some(list), Some(digest)) = (lists.get_mut(&key), digest) else { continue };
                let ptr = store.append(Record::List(ListRec {
                    key,
                    label: list.label.clone(),
                    count: list.frontier.size(),
                    first_position: list.first_position,
                    last_position: list.last_position,
                    peaks: list.frontier.peaks().to_vec(),
                    full: list.full.clone(),
                    runs: list.runs.clone(),
                    tail: list.tail.clone(),
                }));
                list.dirty = false;
                ups.push((key, ptr, digest));
            }
            self.touched_lists[m].clear();
            marks.push(("lists written", t0.elapsed()));
            let map = self.map(m);
            for (key, ptr, digest) in ups {
                map.set(&store, key, ptr, digest)?;
            }
            *root = map.seal(&store);
        }

        marks.push(("lists+maps", t0.elapsed()));
        // The root.
        let mut frames: Vec<RootFrame> = Vec::new();
        for (number, name) in self.frame_names.iter().enumerate() {
            let Some(rec) = &self.frame_recs[number] else { continue };
            let short = fold_summaries(rec.hours.iter().map(|s| s.summary));
            let long = fold_summaries(rec.months.iter().map(|s| s.summary));
            let unchanged = self.latest.as_ref().and_then(|r| {
                r.frames.iter().find(|f| f.name == *name && f.short == short && f.long == long).cloned()
            });
            let entry = match unchanged {
                Some(f) => f,
                None => {
                    let ptr = store.append(Record::Frame(rec.clone()));
                    RootFrame { name: name.clone(), ptr, short, long }
                }
            };
            frames.push(entry);
        }
        frames.sort_by(|a, b| a.name.cmp(&b.name));
        let [subjects, links] = map_roots;
        let mut root =
            RootRec { version: self.size, frames, subjects, links, places: places_root, index_root: [0; 32] };
        root.index_root = recompute_root(&root);
        let root = store.publish(root)?;
        marks.push(("publish", t0.elapsed()));
        self.latest = Some(Arc::clone(&root));
        self.evict();
        if trace {
            let (cached, hits, misses) = store.cache_stats();
            eprintln!(
                "seal {}: {marks:?} hot {} buckets {}+{} lists {}+{} places {} map nodes {}+{}+{} cache {cached} B, {hits} hits, {misses} misses, node file {} B",
                self.size,
                self.hot_bytes,
                self.buckets.places.len(),
                self.buckets.subjects.len(),
                self.lists[0].len(),
                self.lists[1].len(),
                self.places.len(),
                self.maps[0].as_ref().map_or(0, MemMap::loaded),
                self.maps[1].as_ref().map_or(0, MemMap::loaded),
                self.maps[2].as_ref().map_or(0, MemMap::loaded),
                store.node_bytes(),
            );
        }
        Ok(root)
    }

    /// Write a slice of a seal's dirty buckets: the k-d trees of their filled and partial
    /// blocks on every core (reading back the partial blocks' entries not held), then their
    /// records in order. A bucket that held none of its earlier entries lets them go again.
    fn seal_buckets(
        &mut self,
        store: &Store,
        owners: &[(Owner, u32)],
        changed_cells: &mut BTreeMap<(u32, Period), Vec<CellItem>>,
        changed_places: &mut BTreeMap<[u8; 32], Vec<(u32, Ptr, Summary)>>,
        past_buckets: &mut bool,
    ) -> Result<(), IndexError> {
        let mut slice: Vec<((Owner, u32), HotBucket)> = Vec::with_capacity(owners.len());
        for &(owner, n) in owners {
            if let Some(b) = self.buckets.get_mut(n) {
                slice.push(((owner, n), std::mem::take(b)));
            }
        }
        // Reads first, and nothing else until they all succeed: a failed one puts every
        // bucket back as it was (each read back whole, or not at all).
        let read: Result<Vec<usize>, IndexError> =
            slice.par_iter_mut().map(|(_, b)| b.read_back(store)).collect();
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                self.put_back(slice);
                return Err(e);
            }
        };
        // The k-d trees of a part of the buckets on every core; then each part written, in
        // order, on this thread while the next part's trees are built (the other core sat idle
        // through the writes, a third of a build's seal).
        let mut parts: VecDeque<Vec<Taken>> = VecDeque::new();
        let mut taken = slice.into_iter().zip(read).peekable();
        while taken.peek().is_some() {
            parts.push_back(taken.by_ref().take(SEAL_PART).collect());
        }
        let Some(first) = parts.front_mut() else { return Ok(()) };
        let mut trees = trees_of(first);
        while let Some(part) = parts.pop_front() {
            let (written, next) = join(
                !parts.is_empty(),
                || self.write_buckets(store, part, trees, changed_cells, changed_places),
                || parts.front_mut().map(|p| trees_of(p)),
            );
            if let Err(e) = written {
                // A bucket failed as it was written: its filled blocks (and the next part's,
                // in trees dropped here) are gone from what the writer holds, so it goes no
                // further, as past the buckets.
                *past_buckets = true;
                self.put_back(parts.into_iter().flatten().map(|(ob, _)| ob));
                return Err(e);
            }
            trees = next.unwrap_or_default();
        }
        Ok(())
    }

    /// Write a part of a seal's buckets, given their trees, in order.
    fn write_buckets(
        &mut self,
        store: &Store,
        part: Vec<Taken>,
        trees: Vec<(Vec<BlockTree>, Option<Summary>)>,
        changed_cells: &mut BTreeMap<(u32, Period), Vec<CellItem>>,
        changed_places: &mut BTreeMap<[u8; 32], Vec<(u32, Ptr, Summary)>>,
    ) -> Result<(), IndexError> {
        let mut written = part.into_iter().zip(trees);
        while let Some((((owner, mut b), read), (full, partial))) = written.next() {
            let (ptr, root) = match b.write(store, full, partial) {
                Ok(done) => done,
                Err(e) => {
                    self.put_back(std::iter::once((owner, b)).chain(written.map(|((ob, _), _)| ob)));
                    return Err(e);
                }
            };
            if read > 0 {
                // Let go again: the lists and places of the many subjects a seal touches are
                // worth more of the budget (measured: a re-fold 10 % faster, commits the same).
                b.let_go();
            }
            match owner.0 {
                Owner::Place(key) => {
                    changed_cells.entry((key.frame, key.period)).or_default().push(CellItem {
                        cell: key.cell,
                        kind: key.kind,
                        bucket: ptr,
                        summary: root,
                    });
                }
                Owner::Subject(subject, frame) => {
                    changed_places.entry(subject).or_default().push((frame, ptr, root));
                }
            }
            self.put_back([(owner, b)]);
        }
        Ok(())
    }

    /// Put buckets taken out for a seal back where they were (written or not).
    fn put_back(&mut self, buckets: impl IntoIterator<Item = ((Owner, u32), HotBucket)>) {
        for ((o, n), b) in buckets {
            debug_assert_eq!(
                self.buckets.owners.get(n as usize),
                Some(&Some(o)),
                "a bucket put back is its owner's"
            );
            if let Some(slot) = self.buckets.get_mut(n) {
                *slot = b;
            }
        }
    }

    /// Let clean hot buckets and lists go, oldest first, while over the budget (dirty ones wait
    /// for the next seal).
    fn evict(&mut self) {
        if self.hot_bytes <= self.budget.hot_bytes {
            return;
        }
        // The running count only grows between seals (what a seal wrote out is not taken off
        // it): count afresh first, so what is let go is what is over.
        self.recount();
        if self.hot_bytes <= self.budget.hot_bytes {
            return;
        }
        let floor = self.budget.hot_bytes / 2;
        // A place's buckets first, then a subject's, each least lately touched first.
        let places = self.buckets.places.iter().map(|(k, n)| (*k, *n)).collect();
        evict_buckets(&mut self.buckets, places, &mut self.hot_bytes, floor);
        let subjects = self.buckets.subjects.iter().map(|(k, n)| (*k, *n)).collect();
        evict_buckets(&mut self.buckets, subjects, &mut self.hot_bytes, floor);
        // A subject's places are sealed whenever its buckets are: clean unless one is dirty.
        let mut places: Vec<(u64, [u8; 32])> = self.places.iter().map(|(k, p)| (p.touched, *k)).collect();
        places.sort_unstable();
        let dirty: std::collections::HashSet<[u8; 32]> = self
            .buckets
            .subjects
            .iter()
            .filter(|(_, n)| self.buckets.get(**n).is_some_and(|b| b.dirty))
            .map(|((k, _), _)| *k)
            .collect();
        for (_, key) in places {
            if self.hot_bytes <= self.budget.hot_bytes / 2 {
                break;
            }
            if !dirty.contains(&key)
                && let Some(p) = self.places.remove(&key)
            {
                self.hot_bytes = self.hot_bytes.saturating_sub(places_bytes(&p));
            }
        }
        for m in [SUBJECTS, LINKS] {
            let mut lists: Vec<(u64, [u8; 32])> =
                self.lists[m].iter().map(|(k, l)| (l.touched, *k)).collect();
            lists.sort_unstable();
            for (_, key) in lists {
                if self.hot_bytes <= self.budget.hot_bytes / 2 {
                    break;
                }
                if self.lists[m].get(&key).is_some_and(|l| !l.dirty)
                    && let Some(l) = self.lists[m].remove(&key)
                {
                    self.hot_bytes = self.hot_bytes.saturating_sub(list_bytes(&l));
                }
            }
        }
        self.recount();
    }

    /// Count what is hot afresh.
    fn recount(&mut self) {
        self.hot_bytes = self.buckets.held().map(bucket_bytes).sum::<usize>()
            + self.lists.iter().flat_map(|m| m.values()).map(list_bytes).sum::<usize>()
            + self.places.values().map(places_bytes).sum::<usize>();
    }
}

/// About what a hot bucket costs.
fn bucket_bytes(b: &HotBucket) -> usize {
    (b.partial.capacity() + b.completed.iter().map(Vec::capacity).sum::<usize>()) * size_of::<Entry>() + 256
}

/// About what a hot list costs.
fn list_bytes(l: &HotList) -> usize {
    HOT_LIST_BYTES + l.tail.capacity() * 8
}

/// About what a subject's hot places cost.
fn places_bytes(p: &HotPlaces) -> usize {
    HOT_PLACES_BYTES + p.frames.len() * PLACE_FRAME_BYTES
}

/// Let clean buckets of `those` (each with its key, for the order of equals, and its number)
/// go, least lately touched first, until `hot_bytes` is at `floor`.
fn evict_buckets<K: Ord>(buckets: &mut Buckets, those: Vec<(K, u32)>, hot_bytes: &mut usize, floor: usize) {
    let touched = |n: u32| buckets.get(n).map_or(0, |b| b.touched);
    let mut order: Vec<(u64, K, u32)> = those.into_iter().map(|(k, n)| (touched(n), k, n)).collect();
    order.sort_unstable();
    for (_, _, n) in order {
        if *hot_bytes <= floor {
            break;
        }
        debug_assert!(buckets.get(n).is_none_or(|b| b.pending == 0), "a fold left atoms counted as coming");
        if buckets.get(n).is_some_and(|b| !b.dirty)
            && let Some(b) = buckets.remove(n)
        {
            *hot_bytes = hot_bytes.saturating_sub(bucket_bytes(&b));
        }
    }
}

/// Apply changed hours or months (ascending; `existed`: it was in the list) to a frame's hour
/// or month list.
/// One period's new cell list: its key, its slot, and whether it replaces an
/// earlier version of the same period.
type PeriodUpdate = (i64, Slot, bool);

fn update_list(store: &Store, frontier: &[Slot], hours: &[PeriodUpdate]) -> Result<Vec<Slot>, IndexError> {
    let last = frontier.last().map_or(i64::MIN, |s| s.last);
    let middle = hours.iter().any(|(h, _, existed)| !existed && *h < last);
    if middle {
        // An hour before the last one appeared (a late atom): rebuild the list's nodes.
        let mut items = Vec::new();
        leaves(store, frontier, &mut items)?;
        for (h, slot, _) in hours {
            match items.binary_search_by(|s| s.first.cmp(h)) {
                Ok(i) => items[i] = *slot,
                Err(i) => items.insert(i, *slot),
            }
        }
        let mut out = Vec::new();
        for item in items {
            push_slot(store, &mut out, item);
        }
        return Ok(out);
    }
    let existing: Vec<(i64, Slot)> = hours.iter().filter(|(_, _, e)| *e).map(|(h, s, _)| (*h, *s)).collect();
    let mut out = Vec::with_capacity(frontier.len() + 1);
    for slot in frontier {
        let lo = existing.partition_point(|(h, _)| *h < slot.first);
        let hi = existing.partition_point(|(h, _)| *h <= slot.last);
        out.push(update_slot(store, *slot, &existing[lo..hi])?);
    }
    for (_, slot, _) in hours.iter().filter(|(_, _, e)| !*e) {
        push_slot(store, &mut out, *slot);
    }
    Ok(out)
}

/// A subject's frames tree (index version 4): an RFC 9162 tree over each frame's entry, as a
/// frame's entry in the frames tree with the subject's tree as its short-lived one and no
/// long-lived one, by frame name.
pub(super) fn places_tree(frames: &[PlaceFrame]) -> sion_verify::merkle::MemoryTree<Blake3> {
    sion_verify::merkle::MemoryTree::<Blake3>::from_leaves(
        frames.iter().map(|f| encode_frame(Version::V4, &f.name, Some(f.summary), None)),
    )
}

impl HotBucket {
    /// Write what changed since the last seal — the blocks that filled (`full`, their k-d
    /// trees built), the partial block's new run — and the bucket's record; returns it and
    /// its root's summary (`partial`: the partial block's, if any).
    fn write(
        &mut self,
        store: &Store,
        full: Vec<BlockTree>,
        partial: Option<Summary>,
    ) -> Result<(Ptr, Summary), IndexError> {
        debug_assert_eq!(self.pending, 0, "a fold left atoms counted as coming");
        let blocks_before = self.full.iter().map(|s| 1u64 << s.level).sum::<u64>();
        for (i, tree) in full.into_iter().enumerate() {
            let summary = tree.root();
            let ptr = store.append(Record::Block(super::record::BlockRec {
                entries: tree.entries,
                interior: tree.interior,
            }));
            let index = (blocks_before + i as u64) as i64;
            push_slot(store, &mut self.full, Slot { level: 0, ptr, first: index, last: index, summary });
        }
        self.write_runs(store);
        let root = fold_summaries(self.full.iter().map(|s| s.summary).chain(partial))
            .ok_or_else(|| damaged("an empty bucket was sealed".into()))?;
        let ptr = store.append(Record::Bucket(BucketRec {
            count: self.count,
            first_position: self.first_position,
            last_position: self.last_position,
            full: self.full.clone(),
            runs: self.runs.clone(),
            partial,
            root,
        }));
        self.dirty = false;
        Ok((ptr, root))
    }

    /// Take the next entry of this bucket (log order), its blocks `block` entries long;
    /// whether the bucket was clean until now. [`HotBucket::ready`] first.
    fn push(&mut self, entry: Entry, seals: u64, block: usize) -> bool {
        let was_clean = !self.dirty;
        if self.count == 0 {
            self.first_position = entry.position;
        }
        self.count += 1;
        self.last_position = entry.position;
        if self.partial.len() == self.partial.capacity() {
            // Room at once for the atoms of this fold still coming here (`pending`), within the
            // block: growing one doubling at a time copied a build's entries about twice over
            // (a tenth of a build's time, measured).
            let len = self.partial.len();
            let room = block.saturating_sub(self.unread).max(len + 1);
            let want = (len * 2).max(len + self.pending + 1).clamp(len + 1, room);
            self.partial.reserve_exact(want - len);
        }
        self.partial.push(entry);
        self.dirty = true;
        self.touched = seals;
        if self.unread + self.partial.len() == block {
            debug_assert_eq!(self.unread, 0, "a bucket is made ready before a push fills its block");
            let full = std::mem::take(&mut self.partial);
            self.completed.push(full);
            self.in_runs = 0;
            self.runs.clear();
        }
        was_clean
    }

    /// Make ready for the next entry (after the `pending` ones): if it fills the block, read
    /// the block's entries back.
    /// Returns how many were read.
    fn ready(&mut self, store: &Store, block: usize) -> Result<usize, IndexError> {
        if self.unread + self.partial.len() + self.pending + 1 == block {
            self.read_back(store)
        } else {
            Ok(0)
        }
    }

    /// Hold the whole partial block again: its first `unread` entries read back from the runs.
    /// Returns how many; on an error the bucket is as it was.
    fn read_back(&mut self, store: &Store) -> Result<usize, IndexError> {
        if self.unread == 0 {
            return Ok(0);
        }
        let mut entries = read_entries(&self.runs, |ptr| store.read_to_replace(ptr))?;
        if entries.len() != self.unread {
            return Err(damaged(format!(
                "a bucket's runs hold {} entries where its record says {}",
                entries.len(),
                self.unread
            )));
        }
        let read = entries.len();
        // Exactly (and the entries a fold pushes next, up to the one that fills it): `append`
        // would double the block's memory past the writer's budget.
        entries.reserve_exact(self.partial.len() + self.pending + 1);
        entries.append(&mut self.partial);
        self.partial = entries;
        self.unread = 0;
        Ok(read)
    }

    /// Let the partial block's entries go once its runs hold them all (after a seal wrote it).
    fn let_go(&mut self) {
        if self.unread == 0 && self.in_runs == self.partial.len() {
            self.unread = self.in_runs;
            self.partial = Vec::new();
        }
    }

    /// Write the partial block's new entries as a run, merging runs so that each is smaller
    /// than the one before it (a few runs, each entry rewritten a few times at most).
    fn write_runs(&mut self, store: &Store) {
        debug_assert_eq!(self.unread, 0, "a seal reads a bucket's entries back before it writes");
        if self.in_runs == self.partial.len() {
            return;
        }
        let mut starts: Vec<usize> = Vec::with_capacity(self.runs.len() + 1);
        let mut at = 0;
        for r in &self.runs {
            starts.push(at);
            at += r.count as usize;
        }
        starts.push(self.in_runs);
        self.runs.push(RunRef { ptr: 0, count: (self.partial.len() - self.in_runs) as u32 });
        while self.runs.len() >= 2 {
            let n = self.runs.len();
            if self.runs[n - 2].count > self.runs[n - 1].count {
                break;
            }
            let merged = self.runs[n - 2].count + self.runs[n - 1].count;
            self.runs.truncate(n - 2);
            starts.truncate(n - 1);
            self.runs.push(RunRef { ptr: 0, count: merged });
        }
        // Write the runs that are new (pointer 0): the last one, possibly merged.
        for (i, run) in self.runs.iter_mut().enumerate() {
            if run.ptr == 0 {
                let start = starts[i];
                run.ptr = store.append_run(&self.partial[start..start + run.count as usize]);
            }
        }
        self.in_runs = self.partial.len();
    }
}

impl HotList {
    fn add(&mut self, position: u64, leaf: Digest, seals: u64) {
        // An atom linking to one target twice is in its list once.
        if self.frontier.size() > 0 && self.last_position == position {
            return;
        }
        if self.frontier.size() == 0 {
            self.first_position = position;
        }
        self.frontier.push(leaf, |_| {});
        self.last_position = position;
        self.tail.push(position);
        self.dirty = true;
        self.touched = seals;
    }

    /// Once the tail is long, write it as runs: while the partial runs and the tail make a
    /// full run ([`FULL_RUN`] positions), they become one, which joins the frontier of full
    /// runs (subtrees of equal size merge, as in a Merkle frontier); what is left becomes a
    /// partial run, merged with the ones before it as buckets merge theirs. So no record grows
    /// with the list, and a merge rewrites at most a full run.
    fn write_runs(&mut self, store: &Store) -> Result<(), IndexError> {
        if self.tail.len() < super::record::MAX_TAIL {
            return Ok(());
        }
        let mut rest = std::mem::take(&mut self.tail);
        loop {
            let held: usize = self.runs.iter().map(|r| r.count as usize).sum();
            if held + rest.len() < FULL_RUN {
                break;
            }
            let mut positions = Vec::with_capacity(FULL_RUN);
            for run in std::mem::take(&mut self.runs) {
                positions.extend_from_slice(&self.run_positions(store, run)?);
            }
            let more: Vec<u64> = rest.drain(..FULL_RUN - held).collect();
            positions.extend_from_slice(&more);
            self.push_full(store, positions);
        }
        if rest.is_empty() {
            return Ok(());
        }
        let mut positions = rest;
        while let Some(last) = self.runs.last().copied() {
            if last.count as usize > positions.len() {
                break;
            }
            let mut earlier = self.run_positions(store, last)?;
            earlier.extend_from_slice(&positions);
            positions = earlier;
            self.runs.pop();
        }
        let count = positions.len() as u32;
        let ptr = store.append(Record::ListRun(ListRunRec { positions }));
        self.runs.push(RunRef { ptr, count });
        Ok(())
    }

    fn run_positions(&self, store: &Store, run: RunRef) -> Result<Vec<u64>, IndexError> {
        match &*store.read(run.ptr)? {
            Record::ListRun(r) if r.positions.len() == run.count as usize => Ok(r.positions.clone()),
            _ => Err(damaged(format!("the list run at {} is not one", run.ptr))),
        }
    }

    /// Write a full run and add it to the frontier of full runs.
    fn push_full(&mut self, store: &Store, positions: Vec<u64>) {
        let ptr = store.append(Record::ListRun(ListRunRec { positions }));
        let mut slot = ListSlot { level: 0, ptr };
        while let Some(last) = self.full.last().copied() {
            if last.level != slot.level {
                break;
            }
            self.full.pop();
            let level = slot.level + 1;
            let ptr = store.append(Record::ListNode(ListNodeRec { level, left: last.ptr, right: slot.ptr }));
            slot = ListSlot { level, ptr };
        }
        self.full.push(slot);
    }
}

/// A bucket taken out for a seal: whose it is, its number, and how many entries were read
/// back for it.
type Taken = (((Owner, u32), HotBucket), usize);

/// Buckets a seal writes while the next as many have their trees built (the records are the
/// same for any part; a debug build's are small, so that tests of a few thousand atoms seal in
/// many parts).
const SEAL_PART: usize = if cfg!(debug_assertions) { 64 } else { 8_192 };

/// The k-d trees of buckets taken out for a seal, on every core: each filled block's, and the
/// root of the partial block's.
fn trees_of(part: &mut [Taken]) -> Vec<(Vec<BlockTree>, Option<Summary>)> {
    part.par_iter_mut()
        .map(|((_, b), _)| {
            let full: Vec<BlockTree> = b.completed.drain(..).map(BlockTree::build).collect();
            let partial = (!b.partial.is_empty()).then(|| BlockTree::build(b.partial.clone()).root());
            (full, partial)
        })
        .collect()
}

/// Run `a` and `b`, on two cores if `both`.
fn join<A: Send, B: Send>(both: bool, a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    if both { rayon::join(a, b) } else { (a(), b()) }
}

/// No bucket (an atom about no subject has no subject's bucket).
const NONE: u32 = u32::MAX;

/// The bucket of an atom's place.
fn place_key(p: &Prepared, frame: u32) -> BucketKey {
    BucketKey { frame, period: p.period, cell: p.cell, kind: p.entry.kind }
}

/// The latest cell list of a frame's hour or month, if any.
fn cells_ptr(
    store: &Store,
    frame_recs: &[Option<FrameRec>],
    cells_at: &mut HashMap<(u32, Period), Option<Ptr>>,
    frame: u32,
    period: Period,
) -> Result<Option<Ptr>, IndexError> {
    if let Some(p) = cells_at.get(&(frame, period)) {
        return Ok(*p);
    }
    let found = match frame_recs.get(frame as usize).and_then(Option::as_ref) {
        None => None,
        Some(rec) => {
            let frontier = match period {
                Period::Hour(_) => &rec.hours,
                Period::Month(_) => &rec.months,
            };
            find_item(store, frontier, period.key())?.map(|s| s.ptr)
        }
    };
    if cells_at.len() > 1 << 16 {
        cells_at.clear();
    }
    cells_at.insert((frame, period), found);
    Ok(found)
}

/// A sealed bucket, hot again: its record only (its partial block's entries stay in their
/// runs until they are needed).
fn load_bucket(store: &Store, ptr: Ptr) -> Result<HotBucket, IndexError> {
    let rec = match &*store.read_to_replace(ptr)? {
        Record::Bucket(b) => b.clone(),
        _ => return Err(damaged(format!("the bucket at {ptr} is not one"))),
    };
    let in_runs = rec.runs.iter().map(|r| r.count as usize).sum();
    Ok(HotBucket {
        unread: in_runs,
        in_runs,
        runs: rec.runs,
        full: rec.full,
        count: rec.count,
        first_position: rec.first_position,
        last_position: rec.last_position,
        ..HotBucket::default()
    })
}

/// A subject's places as last sealed, loaded from the store (and counted in `grown`) if they
/// are not hot.
fn places_of<'m>(
    store: &Store,
    root: Option<CritChild>,
    map: &mut Option<MemMap>,
    places: &'m mut HashMap<[u8; 32], HotPlaces>,
    grown: &mut usize,
    key: [u8; 32],
) -> Result<&'m mut HotPlaces, IndexError> {
    match places.entry(key) {
        MapEntry::Occupied(o) => Ok(o.into_mut()),
        MapEntry::Vacant(v) => {
            let mut hot = HotPlaces::default();
            if let Some(ptr) = map.get_or_insert_with(|| MemMap::load(root)).get(store, &key)? {
                match &*store.read_to_replace(ptr)? {
                    Record::Places(p) => hot.frames = p.frames.clone(),
                    _ => return Err(damaged(format!("the places at {ptr} are not places"))),
                }
            }
            *grown += places_bytes(&hot);
            Ok(v.insert(hot))
        }
    }
}

/// The fold's half that places atoms in buckets, their place's and their subject's.
struct BucketSide<'a> {
    store: &'a Store,
    frame_names: &'a [String],
    frame_recs: &'a [Option<FrameRec>],
    places_root: Option<CritChild>,
    buckets: &'a mut Buckets,
    /// Each atom's buckets made ready by the first phase: its place's, and its subject's (or
    /// `NONE`).
    numbers: &'a mut Vec<(u32, u32)>,
    places: &'a mut HashMap<[u8; 32], HotPlaces>,
    cells_at: &'a mut HashMap<(u32, Period), Option<Ptr>>,
    places_map: &'a mut Option<MemMap>,
    dirty_buckets: &'a mut Vec<(Owner, u32)>,
    seals: u64,
    /// How many atoms the first phase made ready (each counted in its buckets' `pending`).
    walked: usize,
    /// Bytes made hot, for the writer's count.
    grown: usize,
}

impl BucketSide<'_> {
    /// The number of a place's bucket, loaded from the store if it is not hot.
    fn bucket(&mut self, key: BucketKey) -> Result<u32, IndexError> {
        match self.buckets.places.get(&key) {
            Some(&n) => Ok(n),
            None => {
                let mut hot = HotBucket::default();
                if let Some(cells) =
                    cells_ptr(self.store, self.frame_recs, self.cells_at, key.frame, key.period)?
                {
                    let found = match &*self.store.read(cells)? {
                        Record::Cells(c) => c
                            .items
                            .binary_search_by(|i| (i.cell, i.kind).cmp(&(key.cell, key.kind)))
                            .ok()
                            .map(|i| c.items[i].bucket),
                        _ => return Err(damaged(format!("the cell list at {cells} is not one"))),
                    };
                    if let Some(ptr) = found {
                        hot = load_bucket(self.store, ptr)?;
                    }
                }
                Ok(self.buckets.insert(Owner::Place(key), hot))
            }
        }
    }

    /// The number of a subject's bucket in a frame, loaded from the store if it is not hot.
    fn subject_bucket(&mut self, key: [u8; 32], frame: u32) -> Result<u32, IndexError> {
        match self.buckets.subjects.get(&(key, frame)) {
            Some(&n) => Ok(n),
            None => {
                let name = self
                    .frame_names
                    .get(frame as usize)
                    .ok_or_else(|| damaged(format!("frame number {frame} is not named")))?;
                let places = places_of(
                    self.store,
                    self.places_root,
                    self.places_map,
                    self.places,
                    &mut self.grown,
                    key,
                )?;
                places.touched = self.seals;
                let found = places
                    .frames
                    .binary_search_by(|f| f.name.as_str().cmp(name))
                    .ok()
                    .map(|i| places.frames[i].bucket);
                let hot = match found {
                    Some(ptr) => load_bucket(self.store, ptr)?,
                    None => HotBucket::default(),
                };
                Ok(self.buckets.insert(Owner::Subject(key, frame), hot))
            }
        }
    }

    /// Phase one: make each atom's buckets ready, in log order, up to the first that fails
    /// (its index and why).
    fn ready_all(&mut self, prepared: &[Prepared], frames: &[u32]) -> Result<(), (usize, IndexError)> {
        self.walked = 0;
        self.numbers.clear();
        self.numbers.reserve(prepared.len());
        for (i, (p, &frame)) in prepared.iter().zip(frames).enumerate() {
            self.ready(p, frame).map_err(|e| (i, e))?;
            self.walked = i + 1;
        }
        Ok(())
    }

    /// Make an atom's buckets ready for it: each taken up, its block read back if the atom
    /// fills it; the atom is counted in their `pending` only if every read succeeds.
    fn ready(&mut self, p: &Prepared, frame: u32) -> Result<(), IndexError> {
        let store = self.store;
        let gone = || damaged("a bucket taken up is not held".into());
        let place = self.bucket(place_key(p, frame))?;
        let b = self.buckets.get_mut(place).ok_or_else(gone)?;
        let mut read = b.ready(store, BLOCK)?;
        b.pending += 1;
        let mut subject_number = NONE;
        if let Some(subject) = p.subject {
            let ready = self.subject_bucket(subject, frame).and_then(|n| {
                let s = self.buckets.get_mut(n).ok_or_else(gone)?;
                let read = s.ready(store, SUBJECT_BLOCK)?;
                s.pending += 1;
                Ok((n, read))
            });
            match ready {
                Ok((n, more)) => (subject_number, read) = (n, read + more),
                Err(e) => {
                    if let Some(b) = self.buckets.get_mut(place) {
                        b.pending -= 1;
                    }
                    return Err(e);
                }
            }
        }
        self.numbers.push((place, subject_number));
        self.grown += read * size_of::<Entry>();
        Ok(())
    }

    /// Phase two: push the first `taken` atoms made ready, and take those made ready but not
    /// taken off their buckets' `pending`.
    fn push_all(&mut self, prepared: &[Prepared], frames: &[u32], taken: usize) -> Result<(), IndexError> {
        let gone = || damaged("a bucket made ready is not held".into());
        let made_ready = prepared.iter().zip(frames).zip(self.numbers.iter()).enumerate().take(self.walked);
        for (i, ((p, &frame), &(place, subject_number))) in made_ready {
            let b = self.buckets.get_mut(place).ok_or_else(gone)?;
            b.pending -= 1;
            if i < taken {
                if b.push(p.entry, self.seals, BLOCK) {
                    self.dirty_buckets.push((Owner::Place(place_key(p, frame)), place));
                }
                self.grown += size_of::<Entry>();
            }
            if let Some(subject) = p.subject {
                let s = self.buckets.get_mut(subject_number).ok_or_else(gone)?;
                s.pending -= 1;
                if i < taken {
                    if s.push(p.entry, self.seals, SUBJECT_BLOCK) {
                        self.dirty_buckets.push((Owner::Subject(subject, frame), subject_number));
                    }
                    self.grown += size_of::<Entry>();
                }
            }
        }
        Ok(())
    }
}

/// The fold's half that adds atoms to lists: their subject's, their link targets'.
struct ListSide<'a> {
    store: &'a Store,
    /// The subjects' and links' maps in the latest root.
    roots: [Option<CritChild>; 2],
    lists: &'a mut [HashMap<[u8; 32], HotList>; 2],
    touched: &'a mut [Vec<[u8; 32]>; 2],
    maps: [&'a mut Option<MemMap>; 2],
    seals: u64,
    /// Bytes made hot, for the writer's count.
    grown: usize,
}

impl ListSide<'_> {
    /// The list for `key` in map `m`, loaded from the store if it is not hot.
    fn list(
        &mut self,
        m: usize,
        key: [u8; 32],
        label: impl FnOnce() -> String,
    ) -> Result<&mut HotList, IndexError> {
        match self.lists[m].entry(key) {
            MapEntry::Occupied(o) => Ok(o.into_mut()),
            MapEntry::Vacant(v) => {
                let mut hot = HotList {
                    label: String::new(),
                    frontier: Frontier::new(),
                    first_position: 0,
                    last_position: 0,
                    full: Vec::new(),
                    runs: Vec::new(),
                    tail: Vec::new(),
                    dirty: false,
                    touched: 0,
                };
                let root = self.roots[m];
                match self.maps[m].get_or_insert_with(|| MemMap::load(root)).get(self.store, &key)? {
                    Some(ptr) => {
                        let l = match &*self.store.read_to_replace(ptr)? {
                            Record::List(l) => l.clone(),
                            _ => return Err(damaged(format!("the list at {ptr} is not one"))),
                        };
                        hot.frontier = Frontier::from_peaks(l.count, l.peaks)
                            .ok_or_else(|| damaged(format!("list peaks for {} leaves", l.count)))?;
                        hot.label = l.label;
                        hot.first_position = l.first_position;
                        hot.last_position = l.last_position;
                        hot.full = l.full;
                        hot.runs = l.runs;
                        hot.tail = l.tail;
                    }
                    None => hot.label = label(),
                }
                self.grown += HOT_LIST_BYTES;
                Ok(v.insert(hot))
            }
        }
    }

    /// Phase one: take up each atom's lists, in log order, up to the first that fails (its
    /// index and why).
    fn ready_all(&mut self, atoms: &[Atom], prepared: &[Prepared]) -> Result<(), (usize, IndexError)> {
        for (i, (atom, p)) in atoms.iter().zip(prepared).enumerate() {
            self.ready(atom, p).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    fn ready(&mut self, atom: &Atom, p: &Prepared) -> Result<(), IndexError> {
        let parts = atom.parts();
        if let Some(subject) = p.subject {
            self.list(SUBJECTS, subject, || parts.subject.clone())?;
        }
        for link in &parts.links {
            self.list(LINKS, link.target.0, String::new)?;
        }
        Ok(())
    }

    /// Phase two: add the first `taken` atoms to their lists (hashing each new leaf in).
    fn push_all(&mut self, atoms: &[Atom], prepared: &[Prepared], taken: usize) -> Result<(), IndexError> {
        for (atom, p) in atoms.iter().zip(prepared).take(taken) {
            let position = p.entry.position;
            if let Some(key) = p.subject {
                self.add(SUBJECTS, key, position, p.leaf)?;
            }
            for link in &atom.parts().links {
                self.add(LINKS, link.target.0, position, p.leaf)?;
            }
        }
        Ok(())
    }

    fn add(&mut self, m: usize, key: [u8; 32], position: u64, leaf: Digest) -> Result<(), IndexError> {
        let list =
            self.lists[m].get_mut(&key).ok_or_else(|| damaged("a list made ready is not held".into()))?;
        let clean = !list.dirty;
        list.add(position, leaf, self.seals);
        if clean {
            self.touched[m].push(key);
        }
        self.grown += 8;
        Ok(())
    }
}

/// A cell list's items with `updates` put in (each replacing the item of its cell and kind,
/// or added in order), in one vector of the size it ends at: a month's list holds every cell
/// the frame has, and inserting one by one doubled it (28 MB of a cold boot's peak).
fn merge_cells(items: &[CellItem], mut updates: Vec<CellItem>) -> Vec<CellItem> {
    let key = |i: &CellItem| (i.cell, i.kind);
    // Later updates of the same cell and kind win, as when each was put in turn.
    updates.sort_by_key(key);
    updates.reverse();
    updates.dedup_by_key(|i| key(i));
    updates.reverse();
    let added = updates.iter().filter(|u| items.binary_search_by_key(&key(u), key).is_err()).count();
    let mut out = Vec::with_capacity(items.len() + added);
    let (mut a, mut b) = (items.iter().peekable(), updates.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(i), Some(u)) => match key(i).cmp(&key(u)) {
                std::cmp::Ordering::Less => out.extend(a.next().cloned()),
                std::cmp::Ordering::Equal => {
                    a.next();
                    out.extend(b.next());
                }
                std::cmp::Ordering::Greater => out.extend(b.next()),
            },
            (Some(_), None) => out.extend(a.next().cloned()),
            (None, Some(_)) => out.extend(b.next()),
            (None, None) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge gives what putting each update in turn gave (the last of a cell and kind
    /// wins, the rest in order), at the exact size.
    #[test]
    fn a_merged_cell_list_is_the_list_with_each_update_put_in_turn() {
        let item = |cell: u128, kind: u8, d: u8| CellItem {
            cell,
            kind,
            bucket: u64::from(d),
            summary: Summary {
                bbox: SpaceTime { min_mm: [0; 3], max_mm: [0; 3], from_ns: 0, to_ns: 1 },
                tally: sion_verify::index::tree::Tally::default(),
                digest: [d; 32],
            },
        };
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..200 {
            let mut items: Vec<CellItem> = Vec::new();
            for _ in 0..next(20) {
                let (c, k) = (u128::from(next(10) as u8), next(3) as u8);
                if let Err(i) = items.binary_search_by(|i| (i.cell, i.kind).cmp(&(c, k))) {
                    items.insert(i, item(c, k, 1));
                }
            }
            let updates: Vec<CellItem> =
                (0..next(20)).map(|j| item(u128::from(next(12) as u8), next(3) as u8, 2 + j as u8)).collect();
            let mut want = items.clone();
            for u in updates.clone() {
                match want.binary_search_by(|i| (i.cell, i.kind).cmp(&(u.cell, u.kind))) {
                    Ok(i) => want[i] = u,
                    Err(i) => want.insert(i, u),
                }
            }
            let got = merge_cells(&items, updates);
            assert_eq!(got, want);
            assert_eq!(got.capacity(), got.len());
        }
    }
}
