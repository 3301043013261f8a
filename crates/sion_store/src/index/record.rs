//! The records of the on-disk index (docs/INDEX-STORE.md, "Records"): what each is, its bytes,
//! and decoding that refuses anything but a record this version writes. A record, once
//! written, is never changed; a new version of a node is a new record, and a record points to
//! the records below it by their offsets in the node file.

use sion_verify::atom::AtomId;
use sion_verify::index::geom::SpaceTime;
use sion_verify::index::tree::{Entry, Summary};
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
    pub const CRIT: u8 = 7;
    pub const LIST: u8 = 8;
    pub const LIST_RUN: u8 = 9;
    pub const ROOT: u8 = 10;
}

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

/// One item of a cell list: a cell's key, its bucket and the bucket's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellItem {
    pub cell: u128,
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

/// A child in a crit-bit map: a subtree (node) or a list's record (leaf), and its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CritChild {
    pub leaf: bool,
    pub ptr: Ptr,
    pub digest: Digest,
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
    pub runs: Vec<RunRef>,
    /// The latest positions, not in a run yet (at most [`MAX_TAIL`]).
    pub tail: Vec<u64>,
}

/// A list's latest positions stay in its record until this many, then go to a run.
pub const MAX_TAIL: usize = 16;

/// Positions of a list, in log order: one run of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRunRec {
    pub positions: Vec<u64>,
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
    Crit(CritRec),
    List(ListRec),
    ListRun(ListRunRec),
    Root(RootRec),
}

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

fn put_summary(out: &mut Vec<u8>, s: &Summary) {
    put_box(out, &s.bbox);
    out.put_bytes(&s.digest);
}

fn read_summary(r: &mut Reader<'_>) -> Result<Summary, WireError> {
    Ok(Summary { bbox: read_box(r)?, digest: r.array("digest")? })
}

fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    out.put_u64(e.position);
    out.put_bytes(&e.id.0);
    put_box(out, &e.bbox);
}

fn read_entry(r: &mut Reader<'_>) -> Result<Entry, WireError> {
    Ok(Entry { position: r.u64("position")?, id: AtomId(r.array("id")?), bbox: read_box(r)? })
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

fn put_crit_child(out: &mut Vec<u8>, c: &CritChild) {
    out.put_u8(u8::from(c.leaf));
    out.put_u64(c.ptr);
    out.put_bytes(&c.digest);
}

fn read_crit_child(r: &mut Reader<'_>) -> Result<CritChild, WireError> {
    Ok(CritChild { leaf: r.flag("leaf")?, ptr: r.u64("pointer")?, digest: r.array("digest")? })
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
            Record::Run(run) => {
                out.put_u8(kind::RUN);
                out.put_u32(run.entries.len() as u32);
                for e in &run.entries {
                    put_entry(out, e);
                }
            }
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
            Record::Crit(c) => {
                out.put_u8(kind::CRIT);
                out.put_u16(c.crit);
                put_crit_child(out, &c.left);
                put_crit_child(out, &c.right);
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
                for map in [&root.subjects, &root.links] {
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
                let n = count(&mut r, "entries", MAX_BLOCK, 104)?;
                let entries = (0..n).map(|_| read_entry(&mut r)).collect::<Result<Vec<_>, _>>()?;
                let m = count(&mut r, "interior", MAX_BLOCK, 96)?;
                let interior = (0..m).map(|_| read_summary(&mut r)).collect::<Result<Vec<_>, _>>()?;
                if entries.is_empty() || m + 1 != entries.len().div_ceil(sion_verify::index::tree::GROUP) {
                    return Err(invalid("interior", format!("{m} nodes for {n} entries")));
                }
                Record::Block(BlockRec { entries, interior })
            }
            kind::RUN => {
                let n = count(&mut r, "entries", MAX_BLOCK, 104)?;
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
                let n = count(&mut r, "cells", MAX_CELLS, 120)?;
                let items = (0..n)
                    .map(|_| {
                        Ok(CellItem {
                            cell: u128::from_le_bytes(r.array("cell")?),
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
            kind::CRIT => Record::Crit(CritRec {
                crit: r.u16("crit")?,
                left: read_crit_child(&mut r)?,
                right: read_crit_child(&mut r)?,
            }),
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
                Record::List(ListRec {
                    key,
                    label,
                    count: count_,
                    first_position,
                    last_position,
                    peaks,
                    runs: read_runs(&mut r)?,
                    tail: read_positions(&mut r)?,
                })
            }
            kind::LIST_RUN => {
                let n = count(&mut r, "positions", usize::MAX, 1)?;
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
                let mut maps = [None, None];
                for map in maps.iter_mut() {
                    if r.flag("map")? {
                        *map = Some(read_crit_child(&mut r)?);
                    }
                }
                let [subjects, links] = maps;
                Record::Root(RootRec { version, frames, subjects, links, index_root })
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
            Record::Block(b) => b.entries.len() * 104 + b.interior.len() * 96,
            Record::Run(r) => r.entries.len() * 104,
            Record::Node(_) => 256,
            Record::Bucket(b) => b.full.len() * 128 + b.runs.len() * 16 + 256,
            Record::Cells(c) => c.items.len() * 128,
            Record::Frame(f) => (f.hours.len() + f.months.len()) * 128 + f.name.len() + 128,
            Record::Crit(_) => 96,
            Record::List(l) => l.peaks.len() * 32 + l.runs.len() * 16 + l.label.len() + 96,
            Record::ListRun(r) => r.positions.len() * 8,
            Record::Root(r) => r.frames.len() * 256 + 128,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(i: i64) -> Summary {
        Summary {
            bbox: SpaceTime { min_mm: [i, -i, 0], max_mm: [i + 5, 7, 9], from_ns: i, to_ns: i + 3 },
            digest: [i as u8; 32],
        }
    }

    #[test]
    fn records_round_trip_and_refuse_trailing_bytes() {
        let entry = Entry { position: 9, id: AtomId([3; 32]), bbox: summary(2).bbox };
        let slot = Slot { level: 2, ptr: 77, first: -4, last: 9, summary: summary(1) };
        let child = CritChild { leaf: true, ptr: 5, digest: [1; 32] };
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
                items: vec![CellItem { cell: u128::MAX - 1, bucket: 12, summary: summary(5) }],
            }),
            Record::Frame(FrameRec { name: "map".into(), hours: vec![slot, slot], months: vec![slot] }),
            Record::Crit(CritRec { crit: 17, left: child, right: CritChild { leaf: false, ..child } }),
            Record::List(ListRec {
                key: [4; 32],
                label: "pallet-17".into(),
                count: 3,
                first_position: 2,
                last_position: 40,
                peaks: vec![[1; 32], [2; 32]],
                runs: vec![RunRef { ptr: 3, count: 3 }],
                tail: vec![41, 45],
            }),
            Record::ListRun(ListRunRec { positions: vec![2, 3, 40, u64::MAX] }),
            Record::Root(RootRec {
                version: 40,
                frames: vec![RootFrame { name: "map".into(), ptr: 8, short: Some(summary(1)), long: None }],
                subjects: Some(child),
                links: None,
                index_root: [9; 32],
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
