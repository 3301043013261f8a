//! Map cells and the cell trie: the first block of a fleet's shared world memory (issue 35,
//! "cell digests"). A **cell** is a square of the map, per frame, at one of 39 levels (level
//! `l`'s edge is `2^(13 + l)` mm: 8.192 m at level 0, past the ±10^15 mm of any atom at level
//! 38). An atom lies in the cells of the one level at which its box is no wider (in x and in y)
//! than a cell's edge — so at most 2 × 2 of them — that its box meets. A **cell key** is 128
//! bits: 16 bits of the frame's BLAKE3 hash, 6 bits of level, and the Morton interleaving of the
//! cell's column and row (each offset by 2^52), so the cells of one frame and level near one
//! another share long prefixes.
//!
//! The **cell trie** commits to a map from cell keys to digests (a cell's digest commits to the
//! logs that hold atoms there): a binary Merkle trie over the keys' bits, most significant
//! first, in which a subtree holding no key hashes to 32 zero bytes, one holding exactly one
//! key hashes to that key's leaf `H(0x10 || key (16 bytes, big-endian) || digest)` whatever its
//! depth, and any other is `H(0x11 || left || right)`. So its root is a function of the map
//! alone, and a proof that a key is present (its digest) or absent (an empty subtree, or
//! another key's leaf, where its path ends) is the siblings along its path. A ledger made with
//! cells commits to its map in every Pulse header (docs/LEDGER.md, "Cells").

use std::collections::BTreeMap;

use crate::atom::BoxMm;
use crate::merkle::Digest;

/// The edge of a level-0 cell: 2^13 mm (8.192 m).
pub const LEVEL0_BITS: u32 = 13;
/// The highest level: its cells are wider than the whole ±10^15 mm an atom may span.
pub const MAX_LEVEL: u8 = 38;
/// What a column or row is offset by, so both are unsigned in 53 bits.
const OFFSET: i64 = 1 << 52;

const LEAF: u8 = 0x10;
const NODE: u8 = 0x11;
const LOGS: u8 = 0x12;

/// The 16-bit tag of a frame in its cells' keys: the first two bytes of BLAKE3 of its name. Two
/// frames with one tag share cells, which can only make a reader open more logs.
pub fn frame_tag(frame: &str) -> u16 {
    let h = blake3::hash(frame.as_bytes());
    u16::from_be_bytes([h.as_bytes()[0], h.as_bytes()[1]])
}

/// The key of the cell at `level` whose column and row are `cx` and `cy` (floor of a
/// coordinate over the level's edge).
pub fn cell_key(tag: u16, level: u8, cx: i64, cy: i64) -> u128 {
    let (x, y) = ((cx + OFFSET) as u64, (cy + OFFSET) as u64);
    let mut morton: u128 = 0;
    for bit in (0..53).rev() {
        morton = (morton << 2) | (u128::from((x >> bit) & 1) << 1) | u128::from((y >> bit) & 1);
    }
    (u128::from(tag) << 112) | (u128::from(level & 0x3f) << 106) | morton
}

/// The level a cell key names (bits 106 to 111).
pub fn key_level(key: u128) -> u8 {
    ((key >> 106) & 0x3f) as u8
}

/// The level an atom's box lies at: the lowest whose cell edge is at least the box's extent in
/// x and in y (the box then meets at most two columns and two rows).
pub fn level_of(b: &BoxMm) -> u8 {
    let extent = (0..2).map(|i| b.max_mm[i].saturating_sub(b.min_mm[i]).max(0)).max().unwrap_or(0);
    let mut level = 0u8;
    while level < MAX_LEVEL && extent > (1i64 << (LEVEL0_BITS + u32::from(level))) {
        level += 1;
    }
    level
}

/// The cells, ascending, that an atom with this box in `frame` lies in (one to four).
pub fn cells_of(frame: &str, b: &BoxMm) -> Vec<u128> {
    cells_of_tagged(frame_tag(frame), b)
}

/// [`cells_of`] for a frame whose tag ([`frame_tag`]) is `tag`.
pub fn cells_of_tagged(tag: u16, b: &BoxMm) -> Vec<u128> {
    let level = level_of(b);
    let shift = LEVEL0_BITS + u32::from(level);
    let span = |i: usize| (b.min_mm[i] >> shift)..=(b.max_mm[i] >> shift);
    let mut out: Vec<u128> =
        span(0).flat_map(|cx| span(1).map(move |cy| cell_key(tag, level, cx, cy))).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A cell's digest: which logs hold atoms there, `H(0x12 || u32 n || n × u64 id)`, the ids
/// strictly ascending (little-endian).
pub fn logs_digest(ids: &[u64]) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(&[LOGS]);
    h.update(&(ids.len() as u32).to_le_bytes());
    for id in ids {
        h.update(&id.to_le_bytes());
    }
    *h.finalize().as_bytes()
}

fn leaf_hash(key: u128, digest: &Digest) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(&[LEAF]);
    h.update(&key.to_be_bytes());
    h.update(digest);
    *h.finalize().as_bytes()
}

fn node_hash(left: &Digest, right: &Digest) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(&[NODE]);
    h.update(left);
    h.update(right);
    *h.finalize().as_bytes()
}

/// `key`'s first `depth` bits, the rest zero.
fn prefix_of(key: u128, depth: usize) -> u128 {
    key & !u128::MAX.checked_shr(depth as u32).unwrap_or(0)
}

fn bit(key: u128, depth: usize) -> bool {
    (key >> (127 - depth)) & 1 == 1
}

/// A map from cell keys to digests, and its trie's root and proofs. The hashes of subtrees of
/// two keys or more are kept once computed, and those on an inserted key's path dropped: after
/// a few inserts the root costs a hash for each node on their paths, not one for every key.
#[derive(Debug, Clone, Default)]
pub struct CellTrie {
    leaves: BTreeMap<u128, Digest>,
    /// Interior subtrees' hashes by (depth, prefix).
    kept: std::collections::HashMap<(u8, u128), Digest>,
}

impl PartialEq for CellTrie {
    fn eq(&self, other: &Self) -> bool {
        self.leaves == other.leaves
    }
}

impl Eq for CellTrie {}

/// What a proof says of a key: present with this digest, or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The key's digest.
    Present(Digest),
    /// The key is not in the map.
    Absent,
}

/// Where a key's path ends in the trie, and the siblings on the way down (root first; an empty
/// sibling is 32 zero bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellProof {
    /// The leaf at the end of the path: the key's own, another key's (the key is then absent),
    /// or none (an empty subtree: absent).
    pub end: Option<(u128, Digest)>,
    /// The siblings from the root down, one per bit of the path (at most 128).
    pub siblings: Vec<Digest>,
}

/// Why a cell proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CellProofError {
    /// More than 128 siblings.
    #[error("a path of {0} siblings, over 128")]
    TooDeep(usize),
    /// Another key's leaf that does not share the asked key's path to its depth.
    #[error("the leaf at the path's end is of a key off the asked key's path")]
    OffPath,
    /// The path does not lead to the root.
    #[error("the path does not lead to the trie's root")]
    Root,
    /// A change to a key the proof was not asked about (so it may lie in a subtree given by
    /// its hash alone).
    #[error("a change to a cell the proof was not asked about")]
    NotAsked,
}

impl CellTrie {
    /// The empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set `key`'s digest.
    pub fn insert(&mut self, key: u128, digest: Digest) {
        if self.leaves.insert(key, digest) == Some(digest) {
            return;
        }
        self.forget_path(key);
    }

    /// Take `key` out of the map.
    pub fn remove(&mut self, key: u128) {
        if self.leaves.remove(&key).is_some() {
            self.forget_path(key);
        }
    }

    /// Drop the kept hashes of the subtrees on `key`'s path.
    fn forget_path(&mut self, key: u128) {
        for depth in 0..128 {
            self.kept.remove(&(depth as u8, interval(depth, prefix_of(key, depth)).0));
        }
    }

    /// How many keys the map holds.
    pub fn len(&self) -> usize {
        self.leaves.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// A key's digest.
    pub fn get(&self, key: u128) -> Option<&Digest> {
        self.leaves.get(&key)
    }

    #[cfg(test)]
    fn slice(&self) -> Vec<(u128, Digest)> {
        self.leaves.iter().map(|(k, d)| (*k, *d)).collect()
    }

    /// The trie's root (32 zero bytes for the empty map).
    pub fn root(&mut self) -> Digest {
        self.hash_at(0, 0)
    }

    /// The hash of the subtree at `depth` whose keys begin with `prefix`'s first `depth` bits.
    fn hash_at(&mut self, depth: usize, prefix: u128) -> Digest {
        let (lo, hi) = interval(depth, prefix);
        let mut keys = self.leaves.range(lo..=hi);
        match (keys.next(), keys.next()) {
            (None, _) => [0; 32],
            (Some((k, d)), None) => leaf_hash(*k, d),
            _ => {
                if let Some(h) = self.kept.get(&(depth as u8, prefix)) {
                    return *h;
                }
                // Two distinct keys differ at some bit below 128: depth + 1 ≤ 127 here.
                let left = self.hash_at(depth + 1, prefix);
                let right = self.hash_at(depth + 1, prefix | (1u128 << (127 - depth)));
                let h = node_hash(&left, &right);
                self.kept.insert((depth as u8, prefix), h);
                h
            }
        }
    }

    /// [`CellTrie::hash_at`] for a reader: a kept hash where there is one, else computed and
    /// not kept.
    fn hash_read(&self, depth: usize, prefix: u128) -> Digest {
        let (lo, hi) = interval(depth, prefix);
        let mut keys = self.leaves.range(lo..=hi);
        match (keys.next(), keys.next()) {
            (None, _) => [0; 32],
            (Some((k, d)), None) => leaf_hash(*k, d),
            _ => match self.kept.get(&(depth as u8, prefix)) {
                Some(h) => *h,
                None => node_hash(
                    &self.hash_read(depth + 1, prefix),
                    &self.hash_read(depth + 1, prefix | (1u128 << (127 - depth))),
                ),
            },
        }
    }

    /// The proof of what the map holds at `key`.
    /// (Fast after [`CellTrie::root`]: it reads the hashes the root kept, computing only those
    /// an insert since has dropped.)
    pub fn prove(&self, key: u128) -> CellProof {
        let mut siblings = Vec::new();
        let (mut depth, mut prefix) = (0usize, 0u128);
        loop {
            let (lo, hi) = interval(depth, prefix);
            let mut keys = self.leaves.range(lo..=hi);
            match (keys.next(), keys.next()) {
                (None, _) => return CellProof { end: None, siblings },
                (Some((k, d)), None) => return CellProof { end: Some((*k, *d)), siblings },
                _ => {
                    let one = 1u128 << (127 - depth);
                    let (mine, other) =
                        if bit(key, depth) { (prefix | one, prefix) } else { (prefix, prefix | one) };
                    siblings.push(self.hash_read(depth + 1, other));
                    (depth, prefix) = (depth + 1, mine);
                }
            }
        }
    }
}

/// The hash of the subtree at `depth` holding `keys` (ascending, sharing their first `depth`
/// bits), from scratch: what [`CellTrie::root`] keeps (checked in the tests), and what a
/// witness computes of an opened subtree after a Pulse's changes.
fn subtree(keys: &[(u128, Digest)], depth: usize) -> Digest {
    match keys {
        [] => [0; 32],
        [(k, d)] => leaf_hash(*k, d),
        _ => {
            let split = keys.partition_point(|(k, _)| !bit(*k, depth));
            node_hash(&subtree(&keys[..split], depth + 1), &subtree(&keys[split..], depth + 1))
        }
    }
}

impl CellProof {
    /// What the trie whose root is `root` holds at `key`, if this proof shows it.
    pub fn verify(&self, root: &Digest, key: u128) -> Result<Found, CellProofError> {
        let depth = self.siblings.len();
        if depth > 128 {
            return Err(CellProofError::TooDeep(depth));
        }
        let (mut node, found) = match self.end {
            None => ([0; 32], Found::Absent),
            Some((k, d)) => {
                // Another key's leaf ends the path only where both keys' paths run together.
                if k != key && (0..depth).any(|i| bit(k, i) != bit(key, i)) {
                    return Err(CellProofError::OffPath);
                }
                (leaf_hash(k, &d), if k == key { Found::Present(d) } else { Found::Absent })
            }
        };
        for (i, s) in self.siblings.iter().enumerate().rev() {
            node = if bit(key, i) { node_hash(s, &node) } else { node_hash(&node, s) };
        }
        if node == *root { Ok(found) } else { Err(CellProofError::Root) }
    }
}

/// The keys of the cells at `level` of a frame (`tag`) whose columns are `cx` and rows `cy`
/// (both inclusive), as few ascending, disjoint key ranges (each inclusive): the rectangle's
/// Morton blocks, adjacent ones merged.
pub fn rect_ranges(tag: u16, level: u8, cx: (i64, i64), cy: (i64, i64)) -> Vec<(u128, u128)> {
    let clamp = |v: i64| (v.clamp(-OFFSET, OFFSET - 1) + OFFSET) as u64;
    let (x0, x1, y0, y1) = (clamp(cx.0), clamp(cx.1), clamp(cy.0), clamp(cy.1));
    let mut out: Vec<(u128, u128)> = Vec::new();
    if x0 > x1 || y0 > y1 {
        return out;
    }
    let key = |x: u64, y: u64| cell_key(tag, level, x as i64 - OFFSET, y as i64 - OFFSET);
    // Blocks of side 2^s at (bx, by), from the whole space down, in Morton order.
    let mut stack: Vec<(u64, u64, u32)> = vec![(0, 0, 53)];
    while let Some((bx, by, s)) = stack.pop() {
        let last = |b: u64| b + ((1u64 << s) - 1);
        if bx > x1 || last(bx) < x0 || by > y1 || last(by) < y0 {
            continue;
        }
        if bx >= x0 && last(bx) <= x1 && by >= y0 && last(by) <= y1 {
            let (a, b) = (key(bx, by), key(last(bx), last(by)));
            match out.last_mut() {
                Some(prev) if prev.1.checked_add(1) == Some(a) => prev.1 = b,
                _ => out.push((a, b)),
            }
            continue;
        }
        let h = 1u64 << (s - 1);
        // Pushed in reverse so that they come off in Morton order (x is the higher bit).
        for (dx, dy) in [(h, h), (h, 0), (0, h), (0, 0)] {
            stack.push((bx + dx, by + dy, s - 1));
        }
    }
    out
}

/// The cells a question about `frame` and box `b` must look in: at every level, those the box
/// meets (as ascending key ranges). An atom whose box meets `b` lies in at least one of them
/// (the point they share is in a cell of the atom's level that both meet).
pub fn query_ranges(frame: &str, b: &BoxMm) -> Vec<(u128, u128)> {
    let tag = frame_tag(frame);
    let mut out = Vec::new();
    for level in 0..=MAX_LEVEL {
        let shift = LEVEL0_BITS + u32::from(level);
        let span = |i: usize| (b.min_mm[i] >> shift, b.max_mm[i] >> shift);
        out.extend(rect_ranges(tag, level, span(0), span(1)));
    }
    out.sort_unstable();
    out
}

/// One node of a range proof, in depth-first order (left before right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeNode {
    /// A subtree that meets no asked range: its hash.
    Opaque(Digest),
    /// A subtree, meeting an asked range, that holds no key.
    Empty,
    /// A subtree, meeting an asked range, that holds one key: the key and its digest.
    Leaf(u128, Digest),
    /// A subtree, meeting an asked range, that holds more: its two halves follow.
    Node,
}

/// A proof of every key a trie holds within some key ranges, and their digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeCellProof {
    /// The nodes, depth first.
    pub nodes: Vec<RangeNode>,
}

fn interval(depth: usize, prefix: u128) -> (u128, u128) {
    (prefix, prefix | u128::MAX.checked_shr(depth as u32).unwrap_or(0))
}

fn meets(lo: u128, hi: u128, ranges: &[(u128, u128)]) -> bool {
    ranges.iter().any(|&(a, b)| a <= hi && b >= lo)
}

/// What a range proof is asked about: which subtrees of the trie it must open. A subtree is
/// given by its depth and its keys' common first `depth` bits (`prefix`, the rest zero); one
/// that meets nothing asked is given by its hash alone.
pub trait Asked {
    /// Whether some key of the subtree is asked.
    fn meets(&self, depth: usize, prefix: u128) -> bool;
}

impl Asked for [(u128, u128)] {
    fn meets(&self, depth: usize, prefix: u128) -> bool {
        let (lo, hi) = interval(depth, prefix);
        meets(lo, hi, self)
    }
}

/// The cells a question about a frame and a box asks (docs/LEDGER.md, "A question's cells"):
/// at every level, those its box's x–y extent meets. Whether a subtree holds one is read from
/// its prefix — frame tag, level, then the Morton bits that fix an aligned block of columns
/// and rows — so a proof's cost follows the keys the trie holds, never the box's area in cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellQuery {
    frame: String,
    bounds: BoxMm,
    tag: u16,
    /// Per level, the columns and rows asked (offset by 2^52: `x0, x1, y0, y1`, inclusive).
    spans: [(u64, u64, u64, u64); MAX_LEVEL as usize + 1],
}

impl CellQuery {
    /// The cells of `frame` a question with box `b` asks.
    pub fn new(frame: &str, b: &BoxMm) -> Self {
        let clamp = |v: i64| (v.clamp(-OFFSET, OFFSET - 1) + OFFSET) as u64;
        let mut spans = [(0, 0, 0, 0); MAX_LEVEL as usize + 1];
        for (level, span) in spans.iter_mut().enumerate() {
            let shift = LEVEL0_BITS + level as u32;
            let (x0, x1) = (b.min_mm[0].min(b.max_mm[0]), b.min_mm[0].max(b.max_mm[0]));
            let (y0, y1) = (b.min_mm[1].min(b.max_mm[1]), b.min_mm[1].max(b.max_mm[1]));
            *span = (clamp(x0 >> shift), clamp(x1 >> shift), clamp(y0 >> shift), clamp(y1 >> shift));
        }
        Self { frame: frame.to_owned(), bounds: *b, tag: frame_tag(frame), spans }
    }

    /// The frame asked about.
    pub fn frame(&self) -> &str {
        &self.frame
    }

    /// The box asked about.
    pub fn bounds(&self) -> &BoxMm {
        &self.bounds
    }

    /// Whether the question asks cell `key`.
    pub fn contains(&self, key: u128) -> bool {
        self.meets(128, key)
    }
}

impl Asked for CellQuery {
    fn meets(&self, depth: usize, prefix: u128) -> bool {
        let depth = depth.min(128);
        let tag = (prefix >> 112) as u16;
        if depth <= 16 {
            let mask = u16::MAX.checked_shl(16 - depth as u32).unwrap_or(0);
            return tag & mask == self.tag & mask;
        }
        if tag != self.tag {
            return false;
        }
        let level = key_level(prefix);
        if depth <= 22 {
            // Some level up to 38 begins with these bits: the least of them does.
            let mask = 0x3fu8 & (0x3f << (22 - depth));
            return level & mask <= MAX_LEVEL;
        }
        let Some(&(x0, x1, y0, y1)) = self.spans.get(usize::from(level)) else { return false };
        // The first `m` Morton bits fix X's top ceil(m/2) bits and Y's top floor(m/2).
        let m = depth - 22;
        let (mut xp, mut yp) = (0u64, 0u64);
        for b in 0..53 {
            xp |= (((prefix >> (2 * b + 1)) & 1) as u64) << b;
            yp |= (((prefix >> (2 * b)) & 1) as u64) << b;
        }
        let (xfree, yfree) = (53 - m.div_ceil(2), 53 - m / 2);
        let (xhi, yhi) = (xp | ((1u64 << xfree) - 1), yp | ((1u64 << yfree) - 1));
        xp <= x1 && xhi >= x0 && yp <= y1 && yhi >= y0
    }
}

impl CellTrie {
    /// The proof of every key in `ranges` (each inclusive) and its digest.
    /// (Fast after [`CellTrie::root`], as [`CellTrie::prove`].)
    pub fn prove_ranges(&self, ranges: &[(u128, u128)]) -> RangeCellProof {
        self.prove_asked(ranges)
    }

    /// The proof of every key `asked` asks and its digest.
    pub fn prove_asked<A: Asked + ?Sized>(&self, asked: &A) -> RangeCellProof {
        let mut nodes = Vec::new();
        self.emit(0, 0, asked, usize::MAX, &mut nodes);
        RangeCellProof { nodes }
    }

    /// [`CellTrie::prove_asked`], given up (`None`) once the proof passes `most` nodes: a
    /// service answering strangers' questions bounds its work and memory by what it may send.
    pub fn prove_asked_within<A: Asked + ?Sized>(&self, asked: &A, most: usize) -> Option<RangeCellProof> {
        let mut nodes = Vec::new();
        self.emit(0, 0, asked, most, &mut nodes).then_some(RangeCellProof { nodes })
    }

    /// Emit the subtree's nodes; false (stopped) once `out` holds more than `most`.
    fn emit<A: Asked + ?Sized>(
        &self,
        depth: usize,
        prefix: u128,
        ranges: &A,
        most: usize,
        out: &mut Vec<RangeNode>,
    ) -> bool {
        if out.len() >= most {
            return false;
        }
        let (lo, hi) = interval(depth, prefix);
        if !ranges.meets(depth, prefix) {
            out.push(RangeNode::Opaque(self.hash_read(depth, prefix)));
            return true;
        }
        let mut keys = self.leaves.range(lo..=hi);
        match (keys.next(), keys.next()) {
            (None, _) => out.push(RangeNode::Empty),
            (Some((k, d)), None) => out.push(RangeNode::Leaf(*k, *d)),
            _ => {
                out.push(RangeNode::Node);
                return self.emit(depth + 1, prefix, ranges, most, out)
                    && self.emit(depth + 1, prefix | (1u128 << (127 - depth)), ranges, most, out);
            }
        }
        true
    }
}

impl RangeCellProof {
    /// Every key the trie whose root is `root` holds in `ranges` (each inclusive), ascending,
    /// with its digest, if this proof shows them all.
    pub fn verify(
        &self,
        root: &Digest,
        ranges: &[(u128, u128)],
    ) -> Result<Vec<(u128, Digest)>, CellProofError> {
        self.verify_asked(root, ranges)
    }

    /// Every key the trie whose root is `root` holds that `asked` asks, ascending, with its
    /// digest, if this proof shows them all.
    pub fn verify_asked<A: Asked + ?Sized>(
        &self,
        root: &Digest,
        asked: &A,
    ) -> Result<Vec<(u128, Digest)>, CellProofError> {
        fn rebuild<A: Asked + ?Sized>(
            nodes: &[RangeNode],
            at: &mut usize,
            depth: usize,
            prefix: u128,
            ranges: &A,
            out: &mut Vec<(u128, Digest)>,
        ) -> Result<Digest, CellProofError> {
            let node = *nodes.get(*at).ok_or(CellProofError::Root)?;
            *at += 1;
            let (lo, hi) = interval(depth, prefix);
            if !ranges.meets(depth, prefix) {
                // Only a subtree that meets no range may be given by its hash alone.
                return match node {
                    RangeNode::Opaque(h) => Ok(h),
                    _ => Err(CellProofError::Root),
                };
            }
            match node {
                RangeNode::Opaque(_) => Err(CellProofError::Root),
                RangeNode::Empty => Ok([0; 32]),
                RangeNode::Leaf(k, d) => {
                    if k < lo || k > hi {
                        return Err(CellProofError::OffPath);
                    }
                    if ranges.meets(128, k) {
                        out.push((k, d));
                    }
                    Ok(leaf_hash(k, &d))
                }
                RangeNode::Node => {
                    if depth >= 128 {
                        return Err(CellProofError::TooDeep(depth));
                    }
                    let left = rebuild(nodes, at, depth + 1, prefix, ranges, out)?;
                    let right =
                        rebuild(nodes, at, depth + 1, prefix | (1u128 << (127 - depth)), ranges, out)?;
                    Ok(node_hash(&left, &right))
                }
            }
        }
        let mut out = Vec::new();
        let mut at = 0;
        let got = rebuild(&self.nodes, &mut at, 0, 0, asked, &mut out)?;
        if at != self.nodes.len() || got != *root {
            return Err(CellProofError::Root);
        }
        Ok(out)
    }

    /// What a Pulse made of the trie whose root is `root`: every key `asked` asks that it holds
    /// (as [`RangeCellProof::verify_asked`]), and the root after `updates` (each key's new
    /// digest; every key asked) are set. A subtree given by its hash alone holds no updated key,
    /// so the root after is computed from the proof alone: a witness checks a header's cells
    /// root without holding the map (docs/FLEET-LEDGER.md, "Cells").
    pub fn verify_update<A: Asked + ?Sized>(
        &self,
        root: &Digest,
        asked: &A,
        updates: &BTreeMap<u128, Digest>,
    ) -> Result<(Vec<(u128, Digest)>, Digest), CellProofError> {
        if updates.keys().any(|k| !asked.meets(128, *k)) {
            return Err(CellProofError::NotAsked);
        }
        let before = self.verify_asked(root, asked)?;
        // (hash before, hash after) of the subtree at `depth` with `prefix`, the proof's shape
        // already checked by `verify_asked`.
        fn after(
            nodes: &[RangeNode],
            at: &mut usize,
            depth: usize,
            prefix: u128,
            updates: &BTreeMap<u128, Digest>,
        ) -> Result<Digest, CellProofError> {
            let node = *nodes.get(*at).ok_or(CellProofError::Root)?;
            *at += 1;
            let (lo, hi) = interval(depth, prefix);
            let changed = updates.range(lo..=hi);
            let mut keys: BTreeMap<u128, Digest> = BTreeMap::new();
            match node {
                RangeNode::Opaque(h) => {
                    return match changed.clone().next() {
                        None => Ok(h),
                        Some(_) => Err(CellProofError::NotAsked),
                    };
                }
                RangeNode::Node => {
                    if depth >= 128 {
                        return Err(CellProofError::TooDeep(depth));
                    }
                    let left = after(nodes, at, depth + 1, prefix, updates)?;
                    let right = after(nodes, at, depth + 1, prefix | (1u128 << (127 - depth)), updates)?;
                    return Ok(node_hash(&left, &right));
                }
                RangeNode::Empty => {}
                RangeNode::Leaf(k, d) => {
                    keys.insert(k, d);
                }
            }
            keys.extend(changed.map(|(k, d)| (*k, *d)));
            let keys: Vec<(u128, Digest)> = keys.into_iter().collect();
            Ok(subtree(&keys, depth))
        }
        let mut at = 0;
        let root_after = after(&self.nodes, &mut at, 0, 0, updates)?;
        Ok((before, root_after))
    }

    /// One proof opening every subtree either proof opens, both of the same trie (answers to
    /// parts of one question, under one header): a subtree one gives by its hash and the other
    /// opens is taken opened. `None` where they disagree on a subtree both open or both give by
    /// its hash. What it proves is checked as any proof is, against the root.
    pub fn merge(&self, other: &RangeCellProof) -> Option<RangeCellProof> {
        // The nodes of the subtree at `at`, and the index past it.
        fn extent(nodes: &[RangeNode], at: usize, depth: usize) -> Option<usize> {
            match nodes.get(at)? {
                RangeNode::Node if depth < 128 => {
                    let mid = extent(nodes, at + 1, depth + 1)?;
                    extent(nodes, mid, depth + 1)
                }
                RangeNode::Node => None,
                _ => Some(at + 1),
            }
        }
        fn go(
            a: &[RangeNode],
            ia: &mut usize,
            b: &[RangeNode],
            ib: &mut usize,
            depth: usize,
            out: &mut Vec<RangeNode>,
        ) -> Option<()> {
            let (na, nb) = (*a.get(*ia)?, *b.get(*ib)?);
            match (na, nb) {
                (RangeNode::Opaque(x), RangeNode::Opaque(y)) => {
                    (x == y).then_some(())?;
                    out.push(na);
                    *ia += 1;
                    *ib += 1;
                }
                (RangeNode::Opaque(_), _) => {
                    let end = extent(b, *ib, depth)?;
                    out.extend_from_slice(b.get(*ib..end)?);
                    *ia += 1;
                    *ib = end;
                }
                (_, RangeNode::Opaque(_)) => {
                    let end = extent(a, *ia, depth)?;
                    out.extend_from_slice(a.get(*ia..end)?);
                    *ia = end;
                    *ib += 1;
                }
                (RangeNode::Node, RangeNode::Node) if depth < 128 => {
                    out.push(RangeNode::Node);
                    *ia += 1;
                    *ib += 1;
                    go(a, ia, b, ib, depth + 1, out)?;
                    go(a, ia, b, ib, depth + 1, out)?;
                }
                (x, y) if x == y && x != RangeNode::Node => {
                    out.push(x);
                    *ia += 1;
                    *ib += 1;
                }
                _ => return None,
            }
            Some(())
        }
        let (mut ia, mut ib, mut out) = (0, 0, Vec::new());
        go(&self.nodes, &mut ia, &other.nodes, &mut ib, 0, &mut out)?;
        (ia == self.nodes.len() && ib == other.nodes.len()).then_some(RangeCellProof { nodes: out })
    }

    /// The path proof of `key` within this proof (one that opens every subtree on `key`'s path):
    /// what [`CellTrie::prove`] gives of it. `None` if the proof leaves the path unopened or is
    /// not a proof's shape. One pass: each node is hashed once.
    pub fn path_of(&self, key: u128) -> Option<CellProof> {
        struct Walk<'a> {
            nodes: &'a [RangeNode],
            at: usize,
            key: u128,
            end: Option<Option<(u128, Digest)>>,
            siblings: Vec<(usize, Digest)>,
        }
        // The hash of the subtree at node `w.at` (depth `depth`), moving past it; on `key`'s
        // path, its end and the siblings along it are noted.
        fn go(w: &mut Walk<'_>, depth: usize, on_path: bool) -> Option<Digest> {
            let node = *w.nodes.get(w.at)?;
            w.at += 1;
            match node {
                RangeNode::Opaque(h) => (!on_path).then_some(h),
                RangeNode::Empty => {
                    if on_path {
                        w.end = Some(None);
                    }
                    Some([0; 32])
                }
                RangeNode::Leaf(k, d) => {
                    if on_path {
                        w.end = Some(Some((k, d)));
                    }
                    Some(leaf_hash(k, &d))
                }
                RangeNode::Node if depth < 128 => {
                    let right_side = bit(w.key, depth);
                    let left = go(w, depth + 1, on_path && !right_side)?;
                    let right = go(w, depth + 1, on_path && right_side)?;
                    if on_path {
                        w.siblings.push((depth, if right_side { left } else { right }));
                    }
                    Some(node_hash(&left, &right))
                }
                RangeNode::Node => None,
            }
        }
        let mut w = Walk { nodes: &self.nodes, at: 0, key, end: None, siblings: Vec::new() };
        go(&mut w, 0, true)?;
        if w.at != self.nodes.len() {
            return None;
        }
        w.siblings.sort_unstable_by_key(|(depth, _)| *depth);
        Some(CellProof { end: w.end?, siblings: w.siblings.into_iter().map(|(_, d)| d).collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_atom_lies_in_at_most_four_cells_of_its_level() {
        let small = BoxMm { min_mm: [8000, 100, 0], max_mm: [8300, 200, 10] };
        assert_eq!(level_of(&small), 0);
        assert_eq!(cells_of("map", &small).len(), 2, "it straddles x = 8192 mm");
        let wide = BoxMm { min_mm: [0, 0, 0], max_mm: [20_000, 100, 0] };
        assert_eq!(level_of(&wide), 2, "20 m fits a 32.768 m cell, not a 16.384 m one");
        let huge = BoxMm { min_mm: [-1_000_000_000_000_000; 3], max_mm: [1_000_000_000_000_000; 3] };
        assert!(level_of(&huge) <= MAX_LEVEL);
        assert!(cells_of("map", &huge).len() <= 4);
        assert_ne!(cells_of("map", &small), cells_of("odom", &small));
    }

    #[test]
    fn the_empty_trie_and_one_key() {
        let mut t = CellTrie::new();
        assert_eq!(t.root(), [0; 32]);
        assert_eq!(t.prove(7).verify(&t.root(), 7), Ok(Found::Absent));
        t.insert(7, [1; 32]);
        assert_eq!(t.root(), leaf_hash(7, &[1; 32]));
        assert_eq!(t.prove(7).verify(&t.root(), 7), Ok(Found::Present([1; 32])));
        assert_eq!(t.prove(8).verify(&t.root(), 8), Ok(Found::Absent));
    }

    #[test]
    fn a_question_as_wide_as_the_world_costs_the_keys_held_not_its_area() {
        let mut t = CellTrie::new();
        for i in 0..1000i64 {
            t.insert(cell_key(frame_tag("map"), (i % 5) as u8, i * 7 - 3000, 11 - i), [1; 32]);
        }
        let world = BoxMm { min_mm: [-1_000_000_000_000_000; 3], max_mm: [1_000_000_000_000_000; 3] };
        let asked = CellQuery::new("map", &world);
        let root = t.root();
        let proof = t.prove_asked(&asked);
        // A few nodes a key (the empty halves beside shared prefixes), whatever the box's area.
        assert!(proof.nodes.len() < 16 * 1000, "{} nodes", proof.nodes.len());
        assert_eq!(proof.verify_asked(&root, &asked).map(|v| v.len()), Ok(1000));
    }

    #[test]
    fn a_proof_past_its_budget_is_given_up() {
        let mut t = CellTrie::new();
        for i in 0..1000i64 {
            t.insert(cell_key(frame_tag("map"), 0, i, -i), [1; 32]);
        }
        let world = BoxMm { min_mm: [-1_000_000_000_000_000; 3], max_mm: [1_000_000_000_000_000; 3] };
        let asked = CellQuery::new("map", &world);
        let whole = t.prove_asked(&asked);
        assert_eq!(t.prove_asked_within(&asked, 100), None);
        assert_eq!(t.prove_asked_within(&asked, whole.nodes.len()), Some(whole.clone()));
        assert_eq!(t.prove_asked_within(&asked, whole.nodes.len() - 1), None);
    }

    #[test]
    fn a_rectangle_is_its_cells() {
        let tag = frame_tag("map");
        for (cx, cy) in [((-3, 4), (-2, 5)), ((0, 0), (0, 0)), ((7, 9), (-1, 30)), ((-40, -33), (100, 101))] {
            let ranges = rect_ranges(tag, 3, cx, cy);
            let mut want: Vec<u128> =
                (cx.0..=cx.1).flat_map(|x| (cy.0..=cy.1).map(move |y| cell_key(tag, 3, x, y))).collect();
            want.sort_unstable();
            let mut got: Vec<u128> = Vec::new();
            for w in ranges.windows(2) {
                assert!(w[0].1 + 1 < w[1].0, "disjoint, ascending, merged: {ranges:?}");
            }
            for (a, b) in &ranges {
                // Every key in a range is a cell of the rectangle (ranges are exact).
                let mut k = *a;
                loop {
                    got.push(k);
                    if k == *b {
                        break;
                    }
                    k += 1;
                }
            }
            assert_eq!(got, want, "{cx:?} {cy:?}");
        }
    }

    proptest! {
        #[test]
        fn range_proofs_give_every_key_in_the_ranges(
            keys in proptest::collection::btree_map(0u128..4096, any::<[u8; 32]>(), 0..60),
            far in proptest::collection::btree_map(any::<u128>(), any::<[u8; 32]>(), 0..10),
            asked in proptest::collection::vec((0u128..4200, 0u128..300), 0..4),
        ) {
            let mut t = CellTrie::new();
            for (k, d) in keys.iter().chain(far.iter()) {
                t.insert(*k, *d);
            }
            let mut ranges: Vec<(u128, u128)> = asked.iter().map(|(a, n)| (*a, a + n)).collect();
            ranges.sort_unstable();
            let root = t.root();
            let proof = t.prove_ranges(&ranges);
            let want: Vec<(u128, Digest)> = t
                .leaves
                .iter()
                .filter(|(k, _)| ranges.iter().any(|(a, b)| *a <= **k && **k <= *b))
                .map(|(k, d)| (*k, *d))
                .collect();
            prop_assert_eq!(proof.verify(&root, &ranges), Ok(want.clone()));
            // Dropping a key, or showing a subtree that meets a range by its hash alone, fails.
            for i in 0..proof.nodes.len() {
                let mut cut = proof.clone();
                match cut.nodes[i] {
                    RangeNode::Leaf(k, d) => cut.nodes[i] = RangeNode::Leaf(k, [d[0] ^ 1; 32]),
                    RangeNode::Empty => cut.nodes[i] = RangeNode::Opaque([0; 32]),
                    RangeNode::Opaque(h) => cut.nodes[i] = RangeNode::Opaque([h[0] ^ 1; 32]),
                    RangeNode::Node => continue,
                }
                prop_assert!(cut.verify(&root, &ranges).is_err(), "node {} altered", i);
            }
        }

        #[test]
        fn an_atom_that_meets_a_question_lies_in_one_of_its_cells(
            a in (-100_000_000i64..100_000_000, -100_000_000i64..100_000_000, 0i64..2_000_000, 0i64..2_000_000),
            q in (-100_000_000i64..100_000_000, -100_000_000i64..100_000_000, 0i64..3_000_000, 0i64..3_000_000),
        ) {
            let atom = BoxMm { min_mm: [a.0, a.1, 0], max_mm: [a.0 + a.2, a.1 + a.3, 0] };
            let question = BoxMm { min_mm: [q.0, q.1, 0], max_mm: [q.0 + q.2, q.1 + q.3, 0] };
            let meets = (0..2).all(|i| atom.min_mm[i] <= question.max_mm[i] && question.min_mm[i] <= atom.max_mm[i]);
            let ranges = query_ranges("map", &question);
            let found = cells_of("map", &atom).iter().any(|k| ranges.iter().any(|(lo, hi)| lo <= k && k <= hi));
            if meets {
                prop_assert!(found, "{:?} meets {:?} but none of its cells is asked", atom, question);
            }
            // The question's cells read from key prefixes are exactly its ranges' keys.
            let asked = CellQuery::new("map", &question);
            for k in cells_of("map", &atom).into_iter().chain(cells_of("other", &atom)) {
                let in_ranges = ranges.iter().any(|(lo, hi)| *lo <= k && k <= *hi);
                prop_assert_eq!(asked.contains(k), in_ranges, "{:x}", k);
            }
        }

        #[test]
        fn a_question_s_proof_gives_exactly_the_cells_it_asks(
            cells in proptest::collection::vec((0u8..4, -40i64..40, -40i64..40, any::<bool>()), 0..80),
            q in (-200_000i64..200_000, -200_000i64..200_000, 0i64..300_000, 0i64..300_000),
        ) {
            let question = BoxMm { min_mm: [q.0, q.1, 0], max_mm: [q.0 + q.2, q.1 + q.3, 0] };
            let asked = CellQuery::new("map", &question);
            let mut t = CellTrie::new();
            for (level, cx, cy, other) in cells {
                let tag = frame_tag(if other { "other" } else { "map" });
                let key = cell_key(tag, level, cx, cy);
                // The definition: the frame's tag, and a column and row the box spans at the level.
                let sh = LEVEL0_BITS + u32::from(level);
                let spans = (q.0 >> sh..=(q.0 + q.2) >> sh).contains(&cx)
                    && (q.1 >> sh..=(q.1 + q.3) >> sh).contains(&cy);
                prop_assert_eq!(asked.contains(key), !other && spans, "level {} ({}, {})", level, cx, cy);
                t.insert(key, [level; 32]);
            }
            let root = t.root();
            let proof = t.prove_asked(&asked);
            let want: Vec<(u128, Digest)> =
                t.leaves.iter().filter(|(k, _)| asked.contains(**k)).map(|(k, d)| (*k, *d)).collect();
            prop_assert_eq!(proof.verify_asked(&root, &asked), Ok(want));
        }

        #[test]
        fn a_pulses_changes_are_computed_from_the_proof_before_them(
            keys in proptest::collection::btree_map(0u128..4096, any::<u8>(), 0..60),
            changes in proptest::collection::btree_map(0u128..4096, any::<u8>(), 1..12),
            far in any::<bool>(),
        ) {
            // Near keys (long shared prefixes) and, half the time, spread over the whole key space.
            let at = |k: u128| if far { k.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) } else { k };
            let mut t = CellTrie::new();
            for (k, d) in &keys {
                t.insert(at(*k), [*d; 32]);
            }
            let root = t.root();
            let asked: Vec<(u128, u128)> = {
                let mut v: Vec<u128> = changes.keys().map(|k| at(*k)).collect();
                v.sort_unstable();
                v.into_iter().map(|k| (k, k)).collect()
            };
            let proof = t.prove_ranges(&asked);
            let updates: BTreeMap<u128, Digest> = changes.iter().map(|(k, d)| (at(*k), [*d; 32])).collect();
            let (before, after) = proof.verify_update(&root, asked.as_slice(), &updates).expect("holds");
            let want: Vec<(u128, Digest)> =
                asked.iter().filter_map(|(k, _)| t.get(*k).map(|d| (*k, *d))).collect();
            prop_assert_eq!(&before, &want);
            // Asked in two parts, merged: the same proof of the whole.
            let half = asked.len() / 2;
            let merged = t.prove_ranges(&asked[..half]).merge(&t.prove_ranges(&asked[half..])).expect("merges");
            prop_assert_eq!(&merged, &proof);
            prop_assert_eq!(merged.verify_update(&root, asked.as_slice(), &updates).map(|v| v.0), Ok(want.clone()));
            // Each asked key's path is in the proof: the path proof of it.
            for (k, _) in &asked {
                prop_assert_eq!(proof.path_of(*k), Some(t.prove(*k)));
            }
            for (k, d) in &updates {
                t.insert(*k, *d);
            }
            prop_assert_eq!(after, t.root());
            // A change outside what was asked is refused, not computed.
            let mut more = updates.clone();
            more.insert(at(5000), [9; 32]);
            prop_assert_eq!(proof.verify_update(&root, asked.as_slice(), &more).err(), Some(CellProofError::NotAsked));
        }

        #[test]
        fn the_kept_root_is_the_root_of_the_map(
            steps in proptest::collection::vec((0u128..512, any::<u8>(), any::<bool>()), 1..80),
        ) {
            let mut t = CellTrie::new();
            for (k, d, look) in steps {
                // Neighbouring keys and far ones, each new or moved.
                let key = if d % 3 == 0 { k << 100 } else { k };
                // Now and then one taken out again (a Pulse undone).
                if d % 7 == 0 { t.remove(key) } else { t.insert(key, [d; 32]) }
                if look {
                    prop_assert_eq!(t.root(), subtree(&t.slice(), 0));
                }
            }
            prop_assert_eq!(t.root(), subtree(&t.slice(), 0));
        }

        #[test]
        fn proofs_agree_with_the_map(
            keys in proptest::collection::btree_map(any::<u128>(), any::<[u8; 32]>(), 0..40),
            near in proptest::collection::vec(0u128..64, 0..10),
            asked in any::<u128>(),
        ) {
            let mut t = CellTrie::new();
            for (k, d) in &keys {
                t.insert(*k, *d);
            }
            // Keys that share long prefixes, as neighbouring cells do.
            for (i, k) in near.iter().enumerate() {
                t.insert(*k, [i as u8; 32]);
            }
            let root = t.root();
            let keys: Vec<u128> = t.leaves.keys().copied().chain([asked, 0, 1, 63, u128::MAX]).collect();
            for key in keys {
                let want = t.get(key).map_or(Found::Absent, |d| Found::Present(*d));
                let proof = t.prove(key);
                prop_assert_eq!(proof.verify(&root, key), Ok(want));
                // A proof of one key is no proof of another's absence or digest.
                if let Some((k, d)) = proof.end {
                    let mut lying = proof.clone();
                    lying.end = Some((k, [d[0] ^ 1; 32]));
                    prop_assert!(lying.verify(&root, key).is_err());
                }
                if let Some(s) = proof.siblings.first() {
                    let mut flipped = proof.clone();
                    flipped.siblings[0] = [s[0] ^ 1; 32];
                    prop_assert!(flipped.verify(&root, key).is_err());
                }
            }
        }
    }
}
