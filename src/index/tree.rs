//! The binary Merkle R-tree every level of the index is made of (docs/INDEX.md, "Trees").
//!
//! A node is summarised by its box and digest. An atom entry's digest is
//! `BLAKE3(0x10 || position || id || box)`; an interior node's is
//! `BLAKE3(0x11 || left box || left digest || right box || right digest)` and its box is the
//! union of its children's. A tree over `n` items splits them into the first `⌈n/2⌉` and the
//! rest. So a tree over the roots of other trees is still one binary tree with one hashing rule,
//! and a proof walks it without knowing the levels.

use super::geom::{Query, SpaceTime};
use crate::atom::AtomId;
use crate::merkle::Digest;

pub const TAG_ENTRY: u8 = 0x10;
pub const TAG_NODE: u8 = 0x11;

/// An atom as the index holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub position: u64,
    pub id: AtomId,
    pub bbox: SpaceTime,
}

impl Entry {
    pub fn digest(&self) -> Digest {
        let mut buf = [0u8; 1 + 8 + 32 + 64];
        buf[0] = TAG_ENTRY;
        buf[1..9].copy_from_slice(&self.position.to_le_bytes());
        buf[9..41].copy_from_slice(&self.id.0);
        buf[41..].copy_from_slice(&self.bbox.encode());
        *blake3::hash(&buf).as_bytes()
    }

    pub fn summary(&self) -> Summary {
        Summary { bbox: self.bbox, digest: self.digest() }
    }
}

/// A node's box and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub bbox: SpaceTime,
    pub digest: Digest,
}

impl Summary {
    pub fn join(left: &Summary, right: &Summary) -> Summary {
        let mut buf = [0u8; 1 + 2 * (64 + 32)];
        buf[0] = TAG_NODE;
        buf[1..65].copy_from_slice(&left.bbox.encode());
        buf[65..97].copy_from_slice(&left.digest);
        buf[97..161].copy_from_slice(&right.bbox.encode());
        buf[161..].copy_from_slice(&right.digest);
        Summary { bbox: left.bbox.union(&right.bbox), digest: *blake3::hash(&buf).as_bytes() }
    }
}

/// How many items go left in a tree over `n >= 2` items.
pub fn left_len(n: usize) -> usize {
    n.div_ceil(2)
}

/// The interior nodes of the tree over `items`, in pre-order (`items.len() - 1` of them).
pub fn interior(items: &[Summary]) -> Vec<Summary> {
    let mut out = vec![items.first().copied().unwrap_or(EMPTY_SUMMARY); items.len().saturating_sub(1)];
    if items.len() >= 2 {
        fill(items, &mut out, 0);
    }
    out
}

const EMPTY_SUMMARY: Summary =
    Summary { bbox: SpaceTime { min_mm: [0; 3], max_mm: [0; 3], from_ns: 0, to_ns: 0 }, digest: [0; 32] };

fn fill(items: &[Summary], out: &mut [Summary], at: usize) -> Summary {
    if let [only] = items {
        return *only;
    }
    let m = left_len(items.len());
    let left = fill(&items[..m], out, at + 1);
    let right = fill(&items[m..], out, at + m);
    let node = Summary::join(&left, &right);
    out[at] = node;
    node
}

/// A built tree: its items (leaves, in order) and interior nodes (pre-order).
#[derive(Debug, Clone, Default)]
pub struct Built {
    pub items: Vec<Summary>,
    pub interior: Vec<Summary>,
}

impl Built {
    pub fn new(items: Vec<Summary>) -> Self {
        let interior = interior(&items);
        Self { items, interior }
    }

    pub fn root(&self) -> Option<Summary> {
        self.interior.first().or(self.items.first()).copied()
    }

    /// Walk the nodes the query reaches, calling `step` in pre-order; at an item that meets the
    /// query, `descend(index)` continues into what the item stands for.
    pub fn walk(&self, q: &Query, out: &mut Vec<Step>, descend: &mut dyn FnMut(usize, &mut Vec<Step>)) {
        if !self.items.is_empty() {
            self.walk_range(0, self.items.len(), 0, q, out, descend);
        }
    }

    fn walk_range(
        &self,
        lo: usize,
        hi: usize,
        at: usize,
        q: &Query,
        out: &mut Vec<Step>,
        descend: &mut dyn FnMut(usize, &mut Vec<Step>),
    ) {
        let node = if hi - lo == 1 { self.items[lo] } else { self.interior[at] };
        if !node.bbox.meets(q) {
            out.push(Step::Pruned(node));
            return;
        }
        if hi - lo == 1 {
            descend(lo, out);
            return;
        }
        out.push(Step::Interior);
        let m = left_len(hi - lo);
        self.walk_range(lo, lo + m, at + 1, q, out, descend);
        self.walk_range(lo + m, hi, at + m, q, out, descend);
    }
}

/// One node of a range proof, in pre-order: the proof is a binary tree whose interior nodes
/// are recomputed, whose pruned nodes do not meet the query, and whose entries either answer
/// it (`Hit`: the atom comes with the answer) or do not (`Miss`: the entry shows why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Pruned(Summary),
    Interior,
    Hit(u64),
    Miss(Entry),
}

/// Put entries in k-d order: split on the spatial axis along which their centres spread
/// most (ties: x before y before z), the first `⌈n/2⌉` by (centre, position) going left,
/// recursively. The order depends only on the set of entries.
pub fn kd_order(entries: &mut [Entry]) {
    let n = entries.len();
    if n <= 1 {
        return;
    }
    let mut lo = [i64::MAX; 3];
    let mut hi = [i64::MIN; 3];
    for e in entries.iter() {
        for a in 0..3 {
            let c = e.bbox.center(a);
            lo[a] = lo[a].min(c);
            hi[a] = hi[a].max(c);
        }
    }
    let spread = |a: usize| hi[a] as i128 - lo[a] as i128;
    let mut axis = 0;
    for a in 1..3 {
        if spread(a) > spread(axis) {
            axis = a;
        }
    }
    let m = left_len(n);
    entries.select_nth_unstable_by_key(m - 1, |e| (e.bbox.center(axis), e.position));
    let (left, right) = entries.split_at_mut(m);
    kd_order(left);
    kd_order(right);
}
