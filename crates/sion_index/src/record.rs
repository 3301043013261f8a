//! The records of the on-disk index (docs/INDEX-STORE.md, "Records"): what each is, its bytes,
//! and decoding that refuses anything but a record this version writes. A record, once
//! written, is never changed; a new version of a node is a new record, and a record points to
//! the records below it by their offsets in the node file.

use sion_verify::atom::AtomId;
use sion_verify::index::critbit::node_digest;
use sion_verify::index::geom::SpaceTime;
use sion_verify::index::tree::{Entry, Summary, TALLY_BYTES, Tally};
use sion_verify::merkle::Digest;
use sion_verify::wire::{Put as _, Reader, WireError};

use super::BLOCK;

/// The offset of a record in the node file. 0 is the file's header, never a record: it means
/// "none".
pub type Ptr = u64;

/// Entries in a block, at most (the bucket's first `BLOCK` atoms, then the next …).
const MAX_BLOCK: usize = BLOCK;
/// Frontier entries, runs, and crit-bit depth are bounded by the sizes they describe.
const MAX_FRONTIER: usize = 64;
const MAX_RUNS: usize = 64;
/// Cells of one hour (or the long-lived cells of a frame), at most: a frame 2^32 cells wide.
const MAX_CELLS: usize = 1 << 24;
/// Frames of an index, at most.
const MAX_FRAMES: usize = 1 << 20;

pub mod kind {
    pub const BLOCK: u8 = 1;
    pub const RUN: u8 = 2;
    pub const NODE: u8 = 3;
    pub const BUCKET: u8 = 4;
    pub const CELLS: u8 = 5;
    pub const FRAME: u8 = 6;
    // 7 was a crit-bit node of one inner node (store format 1).
    pub const LIST: u8 = 8;
    pub const LIST_RUN: u8 = 9;
    pub const ROOT: u8 = 10;
    pub const CRIT_PAGE: u8 = 11;
    pub const LIST_NODE: u8 = 12;
    pub const PLACES: u8 = 13;
}

/// Positions in a full list run; a list's partial runs hold fewer between them.
pub const FULL_RUN: usize = 4096;

/// Inner nodes in a crit-bit page, at most.
pub const MAX_PAGE: usize = 64;

/// A full block: its entries in k-d order and its group tree's interior nodes (pre-order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRec {
    pub entries: Vec<Entry>,
    pub interior: Vec<Summary>,
}

/// Entries of a bucket's last, partial block, in log order: one run of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRec {
    pub entries: Vec<Entry>,
}

/// A stored subtree of a list tree (RFC 9162 shape): its level (1 and up: two children of
/// the level below; level 0 is an item, stored as its own record) and its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// 0: an item (a block, an hour's cells); `l`: a perfect subtree of `2^l` items.
    pub level: u8,
    pub ptr: Ptr,
    /// The first and last item's key (an hour, a block number) under it.
    pub first: i64,
    pub last: i64,
    pub summary: Summary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRec {
    pub left: Slot,
    pub right: Slot,
}

/// A run of a partial block or list: where it is and how many it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRef {
    pub ptr: Ptr,
    pub count: u32,
}

/// A bucket as of a version: the tree over its full blocks (a frontier of stored subtrees)
/// and its last, partial block (runs of entries and that block's summary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketRec {
    pub count: u64,
    pub first_position: u64,
    pub last_position: u64,
    pub full: Vec<Slot>,
    pub runs: Vec<RunRef>,
    pub partial: Option<Summary>,
    pub root: Summary,
}

/// One item of a cell list: a cell's key, the kind of its atoms, its bucket and the bucket's
/// summary. Items are in (cell, kind) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellItem {
    pub cell: u128,
    pub kind: u8,
    pub bucket: Ptr,
    pub summary: Summary,
}

/// Which atoms of a frame a bucket or cell list holds: the short-lived ones of an hour, or
/// the long-lived ones of a month (docs/INDEX.md, "Where an atom goes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    Hour(i64),
    Month(i64),
}

impl Period {
    /// The hour or month number: a list item's key.
    pub fn key(self) -> i64 {
        match self {
            Period::Hour(h) | Period::Month(h) => h,
        }
    }
}

/// The buckets of a frame's hour or month, in cell order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellsRec {
    pub period: Period,
    pub items: Vec<CellItem>,
}

/// A frame as of a version: its hour list and its month list (frontiers of stored subtrees
/// over the hours' and the months' cell lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRec {
    pub name: String,
    pub hours: Vec<Slot>,
    pub months: Vec<Slot>,
}

/// A child in a crit-bit map, and its digest: a list's record (leaf), or an inner node —
/// node `node` (in pre-order) of the page at `ptr`. Inside a page's record, `ptr` 0 means the
/// page itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CritChild {
    pub leaf: bool,
    pub ptr: Ptr,
    pub node: u8,
    pub digest: Digest,
}

/// Up to `MAX_PAGE` inner nodes of a crit-bit map that a seal rewrote, a connected subtree,
/// in pre-order (node 0 is its top). A child that is a node of the same page is stored as no
/// more than a tag: its digest is computed again on reading, so a page costs about one
/// sibling digest per node it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CritPage {
    pub nodes: Vec<CritRec>,
}

/// A crit-bit map's interior node: its crit bit and its two children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CritRec {
    pub crit: u16,
    pub left: CritChild,
    pub right: CritChild,
}

/// A subject's (or link target's) list as of a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRec {
    pub key: [u8; 32],
    pub label: String,
    pub count: u64,
    pub first_position: u64,
    pub last_position: u64,
    /// The list tree's peaks (largest first): its root, and the next leaf's place.
    pub peaks: Vec<Digest>,
    /// Its full runs ([`FULL_RUN`] positions each), as a frontier of perfect subtrees, largest
    /// first: so a record stays small and no run grows with the list.
    pub full: Vec<ListSlot>,
    /// The positions after the full runs: fewer than [`FULL_RUN`] between them.
    pub runs: Vec<RunRef>,
    /// The latest positions, not in a run yet (at most [`MAX_TAIL`]).
    pub tail: Vec<u64>,
}

/// A perfect subtree of `2^level` full list runs: level 0 is a list run, level `l ≥ 1` a
/// list node over two subtrees of level `l − 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListSlot {
    pub level: u8,
    pub ptr: Ptr,
}

impl ListSlot {
    /// The positions under it.
    pub fn positions(self) -> u64 {
        (FULL_RUN as u64) << self.level
    }
}

/// Two subtrees of full list runs, of the level below this one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListNodeRec {
    pub level: u8,
    pub left: Ptr,
    pub right: Ptr,
}

/// A list's latest positions stay in its record until this many, then go to a run.
pub const MAX_TAIL: usize = 16;

/// Positions of a list, in log order: one run of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRunRec {
    pub positions: Vec<u64>,
}

/// A subject's places (index version 4): for each frame its atoms are in, the bucket of
/// them there (its tree is the subject's tree in that frame), by frame name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacesRec {
    pub key: [u8; 32],
    pub frames: Vec<PlaceFrame>,
}

/// One frame of a subject's places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceFrame {
    pub name: String,
    pub bucket: Ptr,
    pub summary: Summary,
}

/// A frame as the root names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootFrame {
    pub name: String,
    pub ptr: Ptr,
    pub short: Option<Summary>,
    pub long: Option<Summary>,
}

/// The index of the log's first `version` atoms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRec {
    pub version: u64,
    pub frames: Vec<RootFrame>,
    pub subjects: Option<CritChild>,
    pub links: Option<CritChild>,
    /// The places map (leaves: [`PlacesRec`]s).
    pub places: Option<CritChild>,
    pub index_root: Digest,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Block(BlockRec),
    Run(RunRec),
    Node(NodeRec),
    Bucket(BucketRec),
    Cells(CellsRec),
    Frame(FrameRec),
    CritPage(CritPage),
    List(ListRec),
    ListRun(ListRunRec),
    ListNode(ListNodeRec),
    Root(RootRec),
    Places(PlacesRec),
}

/// Full runs sit under at most this many levels of list nodes (2^52 × 4096 = 2^64 positions).
const MAX_LIST_LEVEL: u8 = 52;

fn put_box(out: &mut Vec<u8>, b: &SpaceTime) {
    out.put_bytes(&b.encode());
}

fn read_box(r: &mut Reader<'_>) -> Result<SpaceTime, WireError> {
    let mut v = [0i64; 8];
    for x in v.iter_mut() {
        *x = r.i64("box")?;
    }
    Ok(SpaceTime { min_mm: [v[0], v[1], v[2]], max_mm: [v[3], v[4], v[5]], from_ns: v[6], to_ns: v[7] })
}

/// Bytes of a summary in a record: box, tally, digest.
const SUMMARY_BYTES: usize = 64 + TALLY_BYTES + 32;
/// Bytes of an entry in a record: position, id, box, kind.
const ENTRY_BYTES: usize = 8 + 32 + 64 + 1;

fn put_summary(out: &mut Vec<u8>, s: &Summary) {
    put_box(out, &s.bbox);
    out.put_bytes(&s.tally.encode());
    out.put_bytes(&s.digest);
}

fn read_summary(r: &mut Reader<'_>) -> Result<Summary, WireError> {
    let bbox = read_box(r)?;
    let tally = Tally {
        kinds: r.u32("tally")?,
        count: r.u64("tally")?,
        duration_ns: u128::from_le_bytes(r.array("tally")?),
    };
    Ok(Summary { bbox, tally, digest: r.array("digest")? })
}

/// The bytes of a run record of these entries (as `Record::Run(..).encode_into`), from a
/// borrowed slice: a bucket's new run is written without copying it first.
pub fn encode_run(entries: &[Entry], out: &mut Vec<u8>) {
    out.put_u8(kind::RUN);
    out.put_u32(entries.len() as u32);
    for e in entries {
        put_entry(out, e);
    }
}

fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    out.put_u64(e.position);
    out.put_bytes(&e.id.0);
    put_box(out, &e.bbox);
    out.put_u8(e.kind);
}

fn read_entry(r: &mut Reader<'_>) -> Result<Entry, WireError> {
    Ok(Entry {
        position: r.u64("position")?,
        id: AtomId(r.array("id")?),
        bbox: read_box(r)?,
        kind: r.u8("kind")?,
    })
}

fn put_slot(out: &mut Vec<u8>, s: &Slot) {
    out.put_u8(s.level);
    out.put_u64(s.ptr);
    out.put_i64(s.first);
    out.put_i64(s.last);
    put_summary(out, &s.summary);
}

fn read_slot(r: &mut Reader<'_>) -> Result<Slot, WireError> {
    let level = r.u8("level")?;
    if level > 63 {
        return Err(invalid("level", format!("{level}")));
    }
    Ok(Slot {
        level,
        ptr: r.u64("pointer")?,
        first: r.i64("first")?,
        last: r.i64("last")?,
        summary: read_summary(r)?,
    })
}

/// A reference to a child outside the record: `u8 1 || u64 pointer || digest` (a list) or
/// `u8 2 || u64 pointer || u8 node || digest` (a page's node).
fn put_crit_child(out: &mut Vec<u8>, c: &CritChild) {
    if c.leaf {
        out.put_u8(1);
        out.put_u64(c.ptr);
    } else {
        out.put_u8(2);
        out.put_u64(c.ptr);
        out.put_u8(c.node);
    }
    out.put_bytes(&c.digest);
}

/// The rest of a child reference after its tag (1 or 2).
fn read_crit_ref(r: &mut Reader<'_>, tag: u8) -> Result<CritChild, WireError> {
    let (leaf, ptr) = match tag {
        1 => (true, r.u64("pointer")?),
        2 => (false, r.u64("pointer")?),
        t => return Err(invalid("map child", format!("tag {t}"))),
    };
    if ptr == 0 {
        return Err(invalid("map child", "pointer 0".into()));
    }
    let node = if leaf { 0 } else { r.u8("node")? };
    if usize::from(node) >= MAX_PAGE {
        return Err(invalid("map child", format!("node {node}")));
    }
    Ok(CritChild { leaf, ptr, node, digest: r.array("digest")? })
}

fn read_crit_child(r: &mut Reader<'_>) -> Result<CritChild, WireError> {
    let tag = r.u8("map child")?;
    read_crit_ref(r, tag)
}

/// Node `at` of a page and, depth first, the page's nodes under it: `u16 crit`, then each
/// child as `u8 0` followed by that node (a node of this page) or as a reference.
fn put_page_node(out: &mut Vec<u8>, page: &CritPage, at: usize, depth: usize) {
    let Some(node) = page.nodes.get(at) else { return };
    out.put_u16(node.crit);
    for c in [&node.left, &node.right] {
        if !c.leaf && c.ptr == 0 && depth < MAX_PAGE {
            out.put_u8(0);
            put_page_node(out, page, usize::from(c.node), depth + 1);
        } else {
            put_crit_child(out, c);
        }
    }
}

/// Read a page's node (and the page's nodes under it) into `nodes` in pre-order; gives its
/// index and digest. Recursion is bounded by the page's count (at most `MAX_PAGE`).
fn read_page_node(r: &mut Reader<'_>, nodes: &mut Vec<CritRec>, n: usize) -> Result<(u8, Digest), WireError> {
    if nodes.len() >= n {
        return Err(invalid("map page", format!("more than its {n} nodes")));
    }
    let at = nodes.len();
    let crit = r.u16("crit")?;
    // A crit bit names one of a 32-byte key's 256 bits.
    if crit > 255 {
        return Err(invalid("crit", format!("{crit}")));
    }
    let none = CritChild { leaf: true, ptr: 0, node: 0, digest: [0; 32] };
    nodes.push(CritRec { crit, left: none, right: none });
    let mut children = [none; 2];
    for child in children.iter_mut() {
        *child = match r.u8("map child")? {
            0 => {
                let (node, digest) = read_page_node(r, nodes, n)?;
                CritChild { leaf: false, ptr: 0, node, digest }
            }
            tag => read_crit_ref(r, tag)?,
        };
    }
    let [left, right] = children;
    nodes[at] = CritRec { crit, left, right };
    Ok((at as u8, node_digest(crit, &left.digest, &right.digest)))
}

fn put_runs(out: &mut Vec<u8>, runs: &[RunRef]) {
    out.put_u8(runs.len() as u8);
    for run in runs {
        out.put_u64(run.ptr);
        out.put_u32(run.count);
    }
}

fn read_runs(r: &mut Reader<'_>) -> Result<Vec<RunRef>, WireError> {
    let n = usize::from(r.u8("runs")?);
    if n > MAX_RUNS {
        return Err(invalid("runs", format!("{n}")));
    }
    (0..n).map(|_| Ok(RunRef { ptr: r.u64("run")?, count: r.u32("run count")? })).collect()
}

/// Ascending positions: a u16 count, then each as a varint of its difference from the one
/// before (the first from 0).
fn put_positions(out: &mut Vec<u8>, positions: &[u64]) {
    out.put_u16(positions.len() as u16);
    let mut last = 0u64;
    for &p in positions {
        out.put_varint(p.wrapping_sub(last));
        last = p;
    }
}

fn read_positions(r: &mut Reader<'_>) -> Result<Vec<u64>, WireError> {
    let n = usize::from(r.u16("tail")?);
    if n > MAX_TAIL {
        return Err(invalid("tail", format!("{n} positions")));
    }
    let mut out = Vec::with_capacity(n);
    let mut last = 0u64;
    for _ in 0..n {
        last = last.wrapping_add(r.varint("position")?);
        out.push(last);
    }
    Ok(out)
}

fn count(r: &mut Reader<'_>, field: &'static str, max: usize, each: usize) -> Result<usize, WireError> {
    let n = r.u32(field)? as usize;
    // Never allocate for more items than the bytes left could hold.
    if n > max || n.saturating_mul(each) > r.remaining() {
        return Err(invalid(field, format!("{n} items")));
    }
    Ok(n)
}

fn invalid(field: &'static str, problem: String) -> WireError {
    WireError::Invalid { field, problem }
}

fn put_option_summary(out: &mut Vec<u8>, s: &Option<Summary>) {
    match s {
        None => out.put_u8(0),
        Some(s) => {
            out.put_u8(1);
            put_summary(out, s);
        }
    }
}

fn read_option_summary(r: &mut Reader<'_>) -> Result<Option<Summary>, WireError> {
    Ok(if r.flag("summary")? { Some(read_summary(r)?) } else { None })
}

impl Record {
    /// The record's bytes (without the frame around them).
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.encode_into(&mut out);
        out
    }

    /// Append the record's bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Record::Block(b) => {
                out.put_u8(kind::BLOCK);
                out.put_u32(b.entries.len() as u32);
                for e in &b.entries {
                    put_entry(out, e);
                }
                out.put_u32(b.interior.len() as u32);
                for s in &b.interior {
                    put_summary(out, s);
                }
            }
            Record::Run(run) => encode_run(&run.entries, out),
            Record::Node(n) => {
                out.put_u8(kind::NODE);
                put_slot(out, &n.left);
                put_slot(out, &n.right);
            }
            Record::Bucket(b) => {
                out.put_u8(kind::BUCKET);
                out.put_u64(b.count);
                out.put_u64(b.first_position);
                out.put_u64(b.last_position);
                out.put_u8(b.full.len() as u8);
                for s in &b.full {
                    put_slot(out, s);
                }
                put_runs(out, &b.runs);
                put_option_summary(out, &b.partial);
                put_summary(out, &b.root);
            }
            Record::Cells(c) => {
                out.put_u8(kind::CELLS);
                match c.period {
                    Period::Hour(h) => {
                        out.put_u8(0);
                        out.put_i64(h);
                    }
                    Period::Month(m) => {
                        out.put_u8(1);
                        out.put_i64(m);
                    }
                }
                out.put_u32(c.items.len() as u32);
                for item in &c.items {
                    out.put_bytes(&item.cell.to_le_bytes());
                    out.put_u8(item.kind);
                    out.put_u64(item.bucket);
                    put_summary(out, &item.summary);
                }
            }
            Record::Frame(f) => {
                out.put_u8(kind::FRAME);
                out.put_str8(&f.name);
                for frontier in [&f.hours, &f.months] {
                    out.put_u8(frontier.len() as u8);
                    for s in frontier {
                        put_slot(out, s);
                    }
                }
            }
            Record::CritPage(page) => {
                out.put_u8(kind::CRIT_PAGE);
                out.put_u8(page.nodes.len() as u8);
                put_page_node(out, page, 0, 0);
            }
            Record::List(l) => {
                out.put_u8(kind::LIST);
                out.put_bytes(&l.key);
                out.put_str16(&l.label);
                out.put_u64(l.count);
                out.put_u64(l.first_position);
                out.put_u64(l.last_position);
                out.put_u8(l.peaks.len() as u8);
                for p in &l.peaks {
                    out.put_bytes(p);
                }
                out.put_u8(l.full.len() as u8);
                for slot in &l.full {
                    out.put_u8(slot.level);
                    out.put_u64(slot.ptr);
                }
                put_runs(out, &l.runs);
                put_positions(out, &l.tail);
            }
            Record::ListRun(run) => {
                out.put_u8(kind::LIST_RUN);
                out.put_u32(run.positions.len() as u32);
                let mut last = 0u64;
                for &p in &run.positions {
                    // Ascending: each position as its difference from the one before.
                    out.put_varint(p.wrapping_sub(last));
                    last = p;
                }
            }
            Record::ListNode(node) => {
                out.put_u8(kind::LIST_NODE);
                out.put_u8(node.level);
                out.put_u64(node.left);
                out.put_u64(node.right);
            }
            Record::Places(p) => {
                out.put_u8(kind::PLACES);
                out.put_bytes(&p.key);
                out.put_u32(p.frames.len() as u32);
                for f in &p.frames {
                    out.put_str8(&f.name);
                    out.put_u64(f.bucket);
                    put_summary(out, &f.summary);
                }
            }
            Record::Root(root) => {
                out.put_u8(kind::ROOT);
                out.put_u64(root.version);
                out.put_bytes(&root.index_root);
                out.put_u32(root.frames.len() as u32);
                for f in &root.frames {
                    out.put_str8(&f.name);
                    out.put_u64(f.ptr);
                    put_option_summary(out, &f.short);
                    put_option_summary(out, &f.long);
                }
                for map in [&root.subjects, &root.links, &root.places] {
                    match map {
                        None => out.put_u8(0),
                        Some(c) => {
                            out.put_u8(1);
                            put_crit_child(out, c);
                        }
                    }
                }
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let record = match r.u8("record kind")? {
            kind::BLOCK => {
                let n = count(&mut r, "entries", MAX_BLOCK, ENTRY_BYTES)?;
                let entries = (0..n).map(|_| read_entry(&mut r)).collect::<Result<Vec<_>, _>>()?;
                let m = count(&mut r, "interior", MAX_BLOCK, SUMMARY_BYTES)?;
                let interior = (0..m).map(|_| read_summary(&mut r)).collect::<Result<Vec<_>, _>>()?;
                if entries.is_empty() || m + 1 != entries.len().div_ceil(sion_verify::index::tree::GROUP) {
                    return Err(invalid("interior", format!("{m} nodes for {n} entries")));
                }
                Record::Block(BlockRec { entries, interior })
            }
            kind::RUN => {
                let n = count(&mut r, "entries", MAX_BLOCK, ENTRY_BYTES)?;
                Record::Run(RunRec { entries: (0..n).map(|_| read_entry(&mut r)).collect::<Result<_, _>>()? })
            }
            kind::NODE => Record::Node(NodeRec { left: read_slot(&mut r)?, right: read_slot(&mut r)? }),
            kind::BUCKET => {
                let count_ = r.u64("count")?;
                let first_position = r.u64("first position")?;
                let last_position = r.u64("last position")?;
                let n = usize::from(r.u8("frontier")?);
                if n > MAX_FRONTIER {
                    return Err(invalid("frontier", format!("{n}")));
                }
                let full = (0..n).map(|_| read_slot(&mut r)).collect::<Result<_, _>>()?;
                Record::Bucket(BucketRec {
                    count: count_,
                    first_position,
                    last_position,
                    full,
                    runs: read_runs(&mut r)?,
                    partial: read_option_summary(&mut r)?,
                    root: read_summary(&mut r)?,
                })
            }
            kind::CELLS => {
                let period = match r.u8("period")? {
                    0 => Period::Hour(r.i64("hour")?),
                    1 => Period::Month(r.i64("month")?),
                    k => return Err(invalid("period", format!("unknown kind {k}"))),
                };
                let n = count(&mut r, "cells", MAX_CELLS, 16 + 1 + 8 + SUMMARY_BYTES)?;
                let items = (0..n)
                    .map(|_| {
                        Ok(CellItem {
                            cell: u128::from_le_bytes(r.array("cell")?),
                            kind: r.u8("kind")?,
                            bucket: r.u64("bucket")?,
                            summary: read_summary(&mut r)?,
                        })
                    })
                    .collect::<Result<_, WireError>>()?;
                Record::Cells(CellsRec { period, items })
            }
            kind::FRAME => {
                let name = r.str8("frame")?;
                let mut frontiers = [Vec::new(), Vec::new()];
                for frontier in frontiers.iter_mut() {
                    let n = usize::from(r.u8("frontier")?);
                    if n > MAX_FRONTIER {
                        return Err(invalid("frontier", format!("{n}")));
                    }
                    *frontier = (0..n).map(|_| read_slot(&mut r)).collect::<Result<_, _>>()?;
                }
                let [hours, months] = frontiers;
                Record::Frame(FrameRec { name, hours, months })
            }
            kind::CRIT_PAGE => {
                let n = usize::from(r.u8("page nodes")?);
                if n == 0 || n > MAX_PAGE {
                    return Err(invalid("page nodes", format!("{n}")));
                }
                let mut nodes = Vec::with_capacity(n);
                read_page_node(&mut r, &mut nodes, n)?;
                if nodes.len() != n {
                    return Err(invalid("map page", format!("{} of its {n} nodes", nodes.len())));
                }
                Record::CritPage(CritPage { nodes })
            }
            kind::LIST => {
                let key = r.array("key")?;
                let label = r.str16("label")?;
                let count_ = r.u64("count")?;
                let first_position = r.u64("first position")?;
                let last_position = r.u64("last position")?;
                let n = usize::from(r.u8("peaks")?);
                if n != count_.count_ones() as usize {
                    return Err(invalid("peaks", format!("{n} for {count_} leaves")));
                }
                let peaks = (0..n).map(|_| r.array("peak")).collect::<Result<_, _>>()?;
                let f = usize::from(r.u8("full runs")?);
                if f > MAX_FRONTIER {
                    return Err(invalid("full runs", format!("{f} subtrees")));
                }
                let mut full: Vec<ListSlot> = Vec::with_capacity(f);
                for _ in 0..f {
                    let slot = ListSlot { level: r.u8("full run level")?, ptr: r.u64("full run")? };
                    // Largest first, one of each size: a frontier.
                    if slot.level > MAX_LIST_LEVEL || full.last().is_some_and(|s| s.level <= slot.level) {
                        return Err(invalid("full run level", format!("{}", slot.level)));
                    }
                    if slot.ptr == 0 {
                        return Err(invalid("full run", "pointer 0".into()));
                    }
                    full.push(slot);
                }
                let runs = read_runs(&mut r)?;
                let tail = read_positions(&mut r)?;
                let in_runs: u64 = runs.iter().map(|run| u64::from(run.count)).sum();
                if in_runs >= FULL_RUN as u64 {
                    return Err(invalid("runs", format!("{in_runs} positions, a full run or more")));
                }
                let held = full
                    .iter()
                    .map(|s| s.positions())
                    .try_fold(in_runs + tail.len() as u64, u64::checked_add);
                if held != Some(count_) {
                    return Err(invalid("count", format!("{count_} leaves, other than the positions held")));
                }
                Record::List(ListRec {
                    key,
                    label,
                    count: count_,
                    first_position,
                    last_position,
                    peaks,
                    full,
                    runs,
                    tail,
                })
            }
            kind::LIST_NODE => {
                let level = r.u8("list node level")?;
                if level == 0 || level > MAX_LIST_LEVEL {
                    return Err(invalid("list node level", format!("{level}")));
                }
                let (left, right) = (r.u64("left")?, r.u64("right")?);
                if left == 0 || right == 0 {
                    return Err(invalid("list node", "pointer 0".into()));
                }
                Record::ListNode(ListNodeRec { level, left, right })
            }
            kind::LIST_RUN => {
                let n = count(&mut r, "positions", FULL_RUN, 1)?;
                let mut positions = Vec::with_capacity(n);
                let mut last = 0u64;
                for _ in 0..n {
                    last = last.wrapping_add(r.varint("position")?);
                    positions.push(last);
                }
                Record::ListRun(ListRunRec { positions })
            }
            kind::ROOT => {
                let version = r.u64("version")?;
                let index_root = r.array("index root")?;
                let n = count(&mut r, "frames", MAX_FRAMES, 11)?;
                let frames = (0..n)
                    .map(|_| {
                        Ok(RootFrame {
                            name: r.str8("frame")?,
                            ptr: r.u64("frame pointer")?,
                            short: read_option_summary(&mut r)?,
                            long: read_option_summary(&mut r)?,
                        })
                    })
                    .collect::<Result<_, WireError>>()?;
                let mut maps = [None, None, None];
                for map in maps.iter_mut() {
                    if r.flag("map")? {
                        *map = Some(read_crit_child(&mut r)?);
                    }
                }
                let [subjects, links, places] = maps;
                Record::Root(RootRec { version, frames, subjects, links, places, index_root })
            }
            kind::PLACES => {
                let key = r.array("key")?;
                let n = count(&mut r, "places", MAX_FRAMES, 10)?;
                let frames = (0..n)
                    .map(|_| {
                        Ok(PlaceFrame {
                            name: r.str8("frame")?,
                            bucket: r.u64("bucket")?,
                            summary: read_summary(&mut r)?,
                        })
                    })
                    .collect::<Result<Vec<_>, WireError>>()?;
                if frames.is_empty() || frames.iter().any(|f| f.bucket == 0) {
                    return Err(invalid("places", "no frame, or a frame with no bucket".into()));
                }
                if frames.windows(2).any(|w| w[0].name >= w[1].name) {
                    return Err(invalid("places", "frames out of order".into()));
                }
                Record::Places(PlacesRec { key, frames })
            }
            k => return Err(invalid("record kind", format!("unknown kind {k}"))),
        };
        r.finish()?;
        Ok(record)
    }

    /// About how many bytes the decoded record holds (with what holding it in a cache costs),
    /// for the cache's budget.
    pub fn weight(&self) -> usize {
        224 + match self {
            Record::Block(b) => {
                b.entries.len() * size_of::<Entry>() + b.interior.len() * size_of::<Summary>()
            }
            Record::Run(r) => r.entries.len() * size_of::<Entry>(),
            Record::Node(_) => 2 * size_of::<Slot>(),
            Record::Bucket(b) => {
                b.full.len() * size_of::<Slot>() + b.runs.len() * 16 + 2 * size_of::<Summary>()
            }
            Record::Cells(c) => c.items.len() * size_of::<CellItem>(),
            Record::Frame(f) => (f.hours.len() + f.months.len()) * size_of::<Slot>() + f.name.len() + 160,
            Record::CritPage(p) => p.nodes.len() * 160,
            Record::List(l) => l.peaks.len() * 32 + (l.full.len() + l.runs.len()) * 16 + l.label.len() + 96,
            Record::ListRun(r) => r.positions.len() * 8,
            Record::ListNode(_) => 24,
            Record::Root(r) => r.frames.len() * 256 + 128,
            Record::Places(p) => p.frames.len() * 200 + 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(i: i64) -> Summary {
        Summary {
            bbox: SpaceTime { min_mm: [i, -i, 0], max_mm: [i + 5, 7, 9], from_ns: i, to_ns: i + 3 },
            tally: Tally { kinds: 1 << 13 | 1 << 10, count: i as u64, duration_ns: 3 * i as u128 },
            digest: [i as u8; 32],
        }
    }

    #[test]
    fn a_crit_bit_page_must_hold_the_nodes_it_counts() {
        let leaf = |out: &mut Vec<u8>| {
            out.put_u8(1);
            out.put_u64(9);
            out.put_bytes(&[5; 32]);
        };
        // One node over two lists, counted as 1 (whole), 2 (one missing) and 0.
        for (n, whole) in [(1u8, true), (2, false), (0, false)] {
            let mut bytes = vec![kind::CRIT_PAGE, n];
            bytes.put_u16(3);
            leaf(&mut bytes);
            leaf(&mut bytes);
            assert_eq!(Record::decode(&bytes).is_ok(), whole, "n = {n}");
        }
        // Nodes nested past the count; a reference to node 64; an unknown tag; pointer 0.
        let mut deeper = vec![kind::CRIT_PAGE, 1];
        deeper.put_u16(3);
        deeper.put_u8(0);
        deeper.put_u16(4);
        leaf(&mut deeper);
        leaf(&mut deeper);
        leaf(&mut deeper);
        let mut far = vec![kind::CRIT_PAGE, 1];
        far.put_u16(3);
        far.put_u8(2);
        far.put_u64(9);
        far.put_u8(64);
        far.put_bytes(&[5; 32]);
        leaf(&mut far);
        let mut tag = vec![kind::CRIT_PAGE, 1, 3, 0, 3];
        leaf(&mut tag);
        let mut zero = vec![kind::CRIT_PAGE, 1, 3, 0, 1];
        zero.put_u64(0);
        zero.put_bytes(&[5; 32]);
        leaf(&mut zero);
        for (what, bytes) in [("deeper", deeper), ("far", far), ("tag", tag), ("zero", zero)] {
            assert!(Record::decode(&bytes).is_err(), "{what}");
        }
    }

    #[test]
    fn a_list_must_hold_the_positions_it_counts_in_bounded_runs() {
        let list = |count: u64, full: Vec<ListSlot>, runs: Vec<RunRef>| {
            Record::List(ListRec {
                key: [1; 32],
                label: String::new(),
                count,
                first_position: 0,
                last_position: 0,
                peaks: vec![[7; 32]; count.count_ones() as usize],
                full,
                runs,
                tail: vec![1],
            })
            .encode()
        };
        let slot = |level, ptr| ListSlot { level, ptr };
        let run = |count| RunRef { ptr: 5, count };
        let whole = FULL_RUN as u64;
        assert!(Record::decode(&list(3 * whole + 33, vec![slot(1, 9), slot(0, 8)], vec![run(32)])).is_ok());
        let refused = [
            ("count off by one", list(3 * whole + 34, vec![slot(1, 9), slot(0, 8)], vec![run(32)])),
            ("smallest first", list(3 * whole + 33, vec![slot(0, 8), slot(1, 9)], vec![run(32)])),
            ("two of a size", list(2 * whole + 33, vec![slot(0, 9), slot(0, 8)], vec![run(32)])),
            ("pointer 0", list(whole + 33, vec![slot(0, 0)], vec![run(32)])),
            ("a full run among the partial ones", list(whole + 1, Vec::new(), vec![run(FULL_RUN as u32)])),
            ("level past 52", list(1, vec![slot(53, 8)], Vec::new())),
        ];
        for (what, bytes) in refused {
            assert!(Record::decode(&bytes).is_err(), "{what}");
        }
        // A list run holds at most a full run's positions; a list node is over two subtrees.
        let mut long = vec![kind::LIST_RUN];
        long.put_u32(FULL_RUN as u32 + 1);
        long.extend(std::iter::repeat_n(1u8, FULL_RUN + 1));
        assert!(Record::decode(&long).is_err());
        long[1..5].copy_from_slice(&(FULL_RUN as u32).to_le_bytes());
        long.pop();
        assert!(Record::decode(&long).is_ok());
        for (level, left) in [(0u8, 8u64), (53, 8), (1, 0)] {
            let node = Record::ListNode(ListNodeRec { level, left, right: 9 }).encode();
            assert!(Record::decode(&node).is_err(), "level {level}, left {left}");
        }
    }

    #[test]
    fn records_round_trip_and_refuse_trailing_bytes() {
        let entry = Entry { position: 9, id: AtomId([3; 32]), bbox: summary(2).bbox, kind: 13 };
        let slot = Slot { level: 2, ptr: 77, first: -4, last: 9, summary: summary(1) };
        let child = CritChild { leaf: true, ptr: 5, node: 0, digest: [1; 32] };
        let inner = CritChild { leaf: false, ptr: 90, node: 3, digest: [2; 32] };
        // A page of three nodes: 0 over 1 (left) and a list; 1 over a list and 2; 2 over a
        // page node elsewhere and a list. In-page digests are what reading computes.
        let d2 = node_digest(40, &inner.digest, &child.digest);
        let d1 = node_digest(30, &child.digest, &d2);
        let page = CritPage {
            nodes: vec![
                CritRec {
                    crit: 17,
                    left: CritChild { leaf: false, ptr: 0, node: 1, digest: d1 },
                    right: child,
                },
                CritRec {
                    crit: 30,
                    left: child,
                    right: CritChild { leaf: false, ptr: 0, node: 2, digest: d2 },
                },
                CritRec { crit: 40, left: inner, right: child },
            ],
        };
        let records = vec![
            Record::Block(BlockRec { entries: vec![entry; 5], interior: vec![summary(1)] }),
            Record::Run(RunRec { entries: vec![entry; 3] }),
            Record::Node(NodeRec { left: slot, right: slot }),
            Record::Bucket(BucketRec {
                count: 4099,
                first_position: 1,
                last_position: 9000,
                full: vec![slot],
                runs: vec![RunRef { ptr: 8, count: 3 }],
                partial: Some(summary(3)),
                root: summary(4),
            }),
            Record::Cells(CellsRec {
                period: Period::Month(-3),
                items: vec![CellItem { cell: u128::MAX - 1, kind: 13, bucket: 12, summary: summary(5) }],
            }),
            Record::Frame(FrameRec { name: "map".into(), hours: vec![slot, slot], months: vec![slot] }),
            Record::CritPage(page),
            Record::CritPage(CritPage { nodes: vec![CritRec { crit: 9, left: inner, right: child }] }),
            Record::List(ListRec {
                key: [4; 32],
                label: "pallet-17".into(),
                count: 5,
                first_position: 2,
                last_position: 40,
                peaks: vec![[1; 32], [2; 32]],
                full: Vec::new(),
                runs: vec![RunRef { ptr: 3, count: 3 }],
                tail: vec![41, 45],
            }),
            Record::List(ListRec {
                key: [5; 32],
                label: String::new(),
                count: 3 * FULL_RUN as u64 + 17,
                first_position: 0,
                last_position: 99_999,
                peaks: vec![[1; 32], [2; 32], [3; 32], [4; 32]],
                full: vec![ListSlot { level: 1, ptr: 90 }, ListSlot { level: 0, ptr: 80 }],
                runs: vec![RunRef { ptr: 70, count: 16 }],
                tail: vec![99_999],
            }),
            Record::ListRun(ListRunRec { positions: vec![2, 3, 40, u64::MAX] }),
            Record::ListNode(ListNodeRec { level: 3, left: 8, right: 900 }),
            Record::Root(RootRec {
                version: 40,
                frames: vec![RootFrame { name: "map".into(), ptr: 8, short: Some(summary(1)), long: None }],
                subjects: Some(child),
                links: Some(inner),
                places: Some(child),
                index_root: [8; 32],
            }),
            Record::Root(RootRec {
                version: 41,
                frames: Vec::new(),
                subjects: None,
                links: None,
                places: None,
                index_root: [9; 32],
            }),
            Record::Places(PlacesRec {
                key: [3; 32],
                frames: vec![
                    PlaceFrame { name: "map".into(), bucket: 77, summary: summary(2) },
                    PlaceFrame { name: "odom".into(), bucket: 78, summary: summary(3) },
                ],
            }),
        ];
        for record in records {
            let bytes = record.encode();
            assert_eq!(Record::decode(&bytes).expect("decodes"), record);
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Record::decode(&longer).is_err());
            assert!(Record::decode(&bytes[..bytes.len() - 1]).is_err());
        }
    }
}
