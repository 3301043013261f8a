//! The binary Merkle R-tree every level of the index is made of (docs/INDEX.md, "Trees").
//!
//! A node is summarised by its box and digest. Atom entries sit in leaf groups of at most
//! [`GROUP`]: a group's digest is `BLAKE3(0x10 || u8 count || entries)`, each entry
//! `u64 position || id || box`. An interior node's digest is
//! `BLAKE3(left box || left digest || right box || right digest)` (192 bytes) and its box is the
//! union of its children's. A tree over `n` items splits them into the first `⌈n/2⌉` and the
//! rest. So a tree over the roots of other trees is still one binary tree with one hashing rule,
//! and a proof walks it without knowing the levels.

use super::geom::SpaceTime;
use crate::atom::AtomId;
use crate::merkle::Digest;

/// Domain tag of a leaf group's digest.
pub const TAG_GROUP: u8 = 0x10;
/// Entries in a leaf group, at most.
pub const GROUP: usize = 4;

/// An atom as the index holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The atom's position in the log.
    pub position: u64,
    /// The atom's id.
    pub id: AtomId,
    /// The atom's box and valid interval.
    pub bbox: SpaceTime,
}

/// The summary of a leaf group: the union of its boxes and `BLAKE3(0x10 || u8 count || entries)`.
pub fn group_summary(entries: &[Entry]) -> Summary {
    let mut buf = [0u8; 2 + GROUP * 104];
    buf[0] = TAG_GROUP;
    buf[1] = entries.len() as u8;
    let mut bbox = entries[0].bbox;
    for (e, out) in entries.iter().zip(buf[2..].chunks_exact_mut(104)) {
        out[..8].copy_from_slice(&e.position.to_le_bytes());
        out[8..40].copy_from_slice(&e.id.0);
        out[40..].copy_from_slice(&e.bbox.encode());
        bbox = bbox.union(&e.bbox);
    }
    Summary { bbox, digest: *blake3::hash(&buf[..2 + entries.len() * 104]).as_bytes() }
}

/// A node's box and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The union of the boxes below the node.
    pub bbox: SpaceTime,
    /// The node's digest.
    pub digest: Digest,
}

impl Summary {
    /// The parent of two nodes: the union of their boxes and
    /// `BLAKE3(left box || left digest || right box || right digest)`.
    pub fn join(left: &Summary, right: &Summary) -> Summary {
        let mut buf = [0u8; 2 * (64 + 32)];
        buf[..64].copy_from_slice(&left.bbox.encode());
        buf[64..96].copy_from_slice(&left.digest);
        buf[96..160].copy_from_slice(&right.bbox.encode());
        buf[160..].copy_from_slice(&right.digest);
        Summary { bbox: left.bbox.union(&right.bbox), digest: *blake3::hash(&buf).as_bytes() }
    }
}

/// One node of a range proof, in pre-order: the proof is a binary tree whose interior nodes
/// are recomputed, whose pruned nodes do not meet the query, and whose leaf groups list their
/// entries, each either answering the query (the atom comes with the answer) or not (the entry
/// shows why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A subtree the walk did not enter, its box and digest; its box must not meet the query.
    Pruned(Summary),
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
