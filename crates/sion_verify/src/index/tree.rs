//! The binary Merkle R-tree every level of the index is made of (docs/INDEX.md, "Trees").
//!
//! A node is summarised by its box, its tally (which kinds, how many atoms, how long they
//! were valid in all) and its digest. Atom entries sit in leaf groups of at most [`GROUP`]: a
//! group's digest is `BLAKE3(0x11 || u8 count || entries)`, each entry
//! `u64 position || id || box || u8 kind`. An interior node's digest is
//! `BLAKE3(left box || left tally || left digest || right box || right tally || right digest)`
//! (248 bytes); its box is the union of its children's and its tally their sum. So a tree over
//! the roots of other trees is still one binary tree with one hashing rule, and a proof walks
//! it without knowing the levels. Version 2 of the index (docs/INDEX.md) had no tallies and no
//! kinds: [`Summary::join_v2`] and [`group_summary_v2`] check the proofs made under it.

use super::geom::SpaceTime;
use crate::atom::AtomId;
use crate::merkle::Digest;

/// Domain tag of a leaf group's digest (index version 3).
pub const TAG_GROUP: u8 = 0x11;
/// Domain tag of a leaf group's digest under index version 2.
pub const TAG_GROUP_V2: u8 = 0x10;
/// Entries in a leaf group, at most.
pub const GROUP: usize = 4;
/// Bytes of an entry as a group hashes it (version 3).
pub const ENTRY_BYTES: usize = 105;
/// Bytes of a tally as a node hashes it.
pub const TALLY_BYTES: usize = 28;

/// An atom as the index holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The atom's position in the log.
    pub position: u64,
    /// The atom's id.
    pub id: AtomId,
    /// The atom's box and valid interval.
    pub bbox: SpaceTime,
    /// The atom's kind code (docs/ATOM.md; not part of a version 2 entry).
    pub kind: u8,
}

impl Entry {
    /// What this entry adds to a tally.
    pub fn tally(&self) -> Tally {
        Tally::of(self.kind, &self.bbox)
    }
}

/// What a subtree holds, summed: the kinds of its atoms (bit `k` set when an atom of kind `k`
/// is below), how many atoms, and the sum of their valid intervals' lengths (`to − from`, ns).
/// An aggregate over a subtree wholly inside a question is read from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Tally {
    /// Bit `k` is set when an atom of kind code `k` is below.
    pub kinds: u32,
    /// How many atoms are below.
    pub count: u64,
    /// The sum of their valid intervals' lengths, ns.
    pub duration_ns: u128,
}

impl Tally {
    /// One atom's: its kind's bit, a count of one, its interval's length.
    pub fn of(kind: u8, bbox: &SpaceTime) -> Self {
        let length = (i128::from(bbox.to_ns) - i128::from(bbox.from_ns)).max(0) as u128;
        Self { kinds: 1u32.checked_shl(u32::from(kind)).unwrap_or(0), count: 1, duration_ns: length }
    }

    /// Both together (sums saturate: no real tree comes near).
    pub fn add(&self, other: &Self) -> Self {
        Self {
            kinds: self.kinds | other.kinds,
            count: self.count.saturating_add(other.count),
            duration_ns: self.duration_ns.saturating_add(other.duration_ns),
        }
    }

    /// The 28 bytes hashed for it: u32 kinds, u64 count, u128 duration, little-endian.
    pub fn encode(&self) -> [u8; TALLY_BYTES] {
        let mut out = [0u8; TALLY_BYTES];
        out[..4].copy_from_slice(&self.kinds.to_le_bytes());
        out[4..12].copy_from_slice(&self.count.to_le_bytes());
        out[12..].copy_from_slice(&self.duration_ns.to_le_bytes());
        out
    }
}

/// The summary of a leaf group: the union of its boxes, the sum of its entries' tallies and
/// `BLAKE3(0x11 || u8 count || entries)`, each entry `u64 position || id || box || u8 kind`.
pub fn group_summary(entries: &[Entry]) -> Summary {
    let mut buf = [0u8; 2 + GROUP * ENTRY_BYTES];
    buf[0] = TAG_GROUP;
    buf[1] = entries.len() as u8;
    let (mut bbox, mut tally) = (entries[0].bbox, Tally::default());
    for (e, out) in entries.iter().zip(buf[2..].chunks_exact_mut(ENTRY_BYTES)) {
        out[..8].copy_from_slice(&e.position.to_le_bytes());
        out[8..40].copy_from_slice(&e.id.0);
        out[40..104].copy_from_slice(&e.bbox.encode());
        out[104] = e.kind;
        bbox = bbox.union(&e.bbox);
        tally = tally.add(&e.tally());
    }
    Summary { bbox, tally, digest: *blake3::hash(&buf[..2 + entries.len() * ENTRY_BYTES]).as_bytes() }
}

/// A leaf group's summary under index version 2: `BLAKE3(0x10 || u8 count || entries)`, each
/// entry `u64 position || id || box` (no kind, no tally: it is left empty).
pub fn group_summary_v2(entries: &[Entry]) -> Summary {
    let mut buf = [0u8; 2 + GROUP * 104];
    buf[0] = TAG_GROUP_V2;
    buf[1] = entries.len() as u8;
    let mut bbox = entries[0].bbox;
    for (e, out) in entries.iter().zip(buf[2..].chunks_exact_mut(104)) {
        out[..8].copy_from_slice(&e.position.to_le_bytes());
        out[8..40].copy_from_slice(&e.id.0);
        out[40..].copy_from_slice(&e.bbox.encode());
        bbox = bbox.union(&e.bbox);
    }
    let digest = *blake3::hash(&buf[..2 + entries.len() * 104]).as_bytes();
    Summary { bbox, tally: Tally::default(), digest }
}

/// A node's box, tally and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The union of the boxes below the node.
    pub bbox: SpaceTime,
    /// The sum of the tallies below the node.
    pub tally: Tally,
    /// The node's digest.
    pub digest: Digest,
}

impl Summary {
    /// The parent of two nodes: the union of their boxes, the sum of their tallies and
    /// `BLAKE3(left box || left tally || left digest || right box || right tally || right digest)`.
    pub fn join(left: &Summary, right: &Summary) -> Summary {
        const SIDE: usize = 64 + TALLY_BYTES + 32;
        let mut buf = [0u8; 2 * SIDE];
        for (s, out) in [left, right].into_iter().zip(buf.chunks_exact_mut(SIDE)) {
            out[..64].copy_from_slice(&s.bbox.encode());
            out[64..64 + TALLY_BYTES].copy_from_slice(&s.tally.encode());
            out[64 + TALLY_BYTES..].copy_from_slice(&s.digest);
        }
        Summary {
            bbox: left.bbox.union(&right.bbox),
            tally: left.tally.add(&right.tally),
            digest: *blake3::hash(&buf).as_bytes(),
        }
    }

    /// The parent under index version 2: `BLAKE3(left box || left digest || right box || right
    /// digest)` (tallies are neither hashed nor summed).
    pub fn join_v2(left: &Summary, right: &Summary) -> Summary {
        let mut buf = [0u8; 2 * (64 + 32)];
        buf[..64].copy_from_slice(&left.bbox.encode());
        buf[64..96].copy_from_slice(&left.digest);
        buf[96..160].copy_from_slice(&right.bbox.encode());
        buf[160..].copy_from_slice(&right.digest);
        Summary {
            bbox: left.bbox.union(&right.bbox),
            tally: Tally::default(),
            digest: *blake3::hash(&buf).as_bytes(),
        }
    }
}

/// One node of a range proof, in pre-order: the proof is a binary tree whose interior nodes
/// are recomputed, whose pruned nodes do not meet the query, and whose leaf groups list their
/// entries, each either answering the query (the atom comes with the answer) or not (the entry
/// shows why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A subtree the walk did not enter, its box, tally and digest; it cannot answer the query.
    Pruned(Summary),
    /// A subtree taken whole by its tally (a count proof's): it lies wholly inside the
    /// question.
    Whole(Summary),
    /// An entered interior node and its box (the union of its children's; a proof codes the
    /// boxes below it against it).
    Interior(SpaceTime),
    /// A leaf group's 1 to [`GROUP`] entries, in the group's order.
    Group(Vec<GroupEntry>),
}

/// An entry of a walked leaf group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupEntry {
    /// An entry that answers the query: its position (the atom comes with the answer).
    Hit(u64),
    /// An entry that does not: the whole entry, whose box shows that it does not meet the query.
    Miss(Entry),
}
