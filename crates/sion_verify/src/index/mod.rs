//! The index's commitment (docs/INDEX.md): how its nodes, frames, lists, maps and root are
//! hashed, and the shape of the answers a proof carries. Building and maintaining the index is
//! the store's (`sion_store::index`); a reader needs only this to check a proof.

pub mod critbit;
pub mod geom;
pub mod tree;

use crate::atom::AtomId;
use crate::merkle::{Blake3, Digest, TreeHasher};
use crate::wire::Put as _;
use critbit::PathStep;
use tree::{Step, Summary};

const TAG_ROOT: u8 = 0x30;
const TAG_SUBJECT: u8 = 0x20;
const TAG_LINKS: u8 = 0x23;
const TAG_PLACES: u8 = 0x24;
const TAG_FRAMES: u8 = 0x31;

/// Which version of docs/INDEX.md a root follows: proofs made under versions 2 (tallies and
/// kinds not yet in the index) and 3 (no subjects' places yet) still check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub enum Version {
    /// Nodes hash their children's boxes and digests; entries have no kind.
    V2,
    /// Nodes also hash their children's tallies; entries end with their atom's kind.
    V3,
    /// The frames root is hashed with the places map's: each subject's own trees, by frame.
    #[default]
    V4,
}

impl Version {
    /// Whether nodes carry tallies and entries kinds (versions 3 and 4).
    pub fn tallied(self) -> bool {
        self >= Version::V3
    }
}

/// A frame's leaf in the frames tree: str8 name, then for the short-lived and the long-lived
/// tree a flag (0 empty, 1 present) and, if present, its 64-byte box, its 28-byte tally
/// (version 3 only) and its digest.
pub fn encode_frame(version: Version, name: &str, short: Option<Summary>, long: Option<Summary>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + name.len() + 2 * 125);
    out.put_str8(name);
    for tree in [short, long] {
        match tree {
            None => out.put_u8(0),
            Some(s) => {
                out.put_u8(1);
                out.put_bytes(&s.bbox.encode());
                if version.tallied() {
                    out.put_bytes(&s.tally.encode());
                }
                out.put_bytes(&s.digest);
            }
        }
    }
    out
}

/// How list trees hash: RFC 9162's shape and leaf hashing (`BLAKE3(0x00 || leaf)`), with
/// interior nodes `BLAKE3(left || right)` (one 64-byte block; the leaves are hashes already,
/// and the count is committed beside the root).
#[derive(Debug, Clone, Copy, Default)]
pub struct ListHasher;

impl TreeHasher for ListHasher {
    fn hash_empty() -> Digest {
        Blake3::hash_empty()
    }

    fn hash_leaf(data: &[u8]) -> Digest {
        Blake3::hash_leaf(data)
    }

    fn hash_children(left: &Digest, right: &Digest) -> Digest {
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(left);
        buf[32..].copy_from_slice(right);
        *blake3::hash(&buf).as_bytes()
    }
}

/// A list's leaf: u64 position || atom id (hashed as `BLAKE3(0x00 || leaf)`).
pub fn list_leaf(position: u64, id: &AtomId) -> [u8; 40] {
    let mut out = [0u8; 40];
    out[..8].copy_from_slice(&position.to_le_bytes());
    out[8..].copy_from_slice(&id.0);
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

/// A leaf of the places map (version 4): `BLAKE3(0x24 || key || u64 frame count || root)`,
/// the root of the subject's own frames tree.
pub fn place_leaf_digest(key: &[u8; 32], frames: u64, root: &Digest) -> Digest {
    let mut buf = vec![TAG_PLACES];
    buf.put_bytes(key);
    buf.put_u64(frames);
    buf.put_bytes(root);
    *blake3::hash(&buf).as_bytes()
}

/// What the index root hashes for the frames (version 4): `BLAKE3(0x31 || frames tree root ||
/// places map root)`; under versions 2 and 3, the frames tree root itself.
pub fn frames_commitment(frames_root: &Digest, places: &Digest) -> Digest {
    let mut buf = vec![TAG_FRAMES];
    buf.put_bytes(frames_root);
    buf.put_bytes(places);
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

/// Where a query's frame stands in the frames tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameWitness {
    /// The frame is leaf `index`; its entry is recomputed from the tree walks.
    Present {
        /// The frame's leaf index (frames sort by name, bytewise).
        index: u64,
        /// RFC 9162 inclusion path of its entry, from the leaf up.
        path: Vec<Digest>,
    },
    /// The frame is not in the index: the entries next to where it would be.
    Absent {
        /// The last frame sorting before it; `None` if it would be first.
        left: Option<Neighbour>,
        /// The first frame sorting after it; `None` if it would be last.
        right: Option<Neighbour>,
    },
}

/// A frames tree leaf beside the place of an absent frame, with what proves it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Its leaf index.
    pub index: u64,
    /// Its frame entry, as [`encode_frame`] makes it.
    pub entry: Vec<u8>,
    /// RFC 9162 inclusion path of the entry, from the leaf up.
    pub path: Vec<Digest>,
}

/// The answer to a range query with what proves it complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeAnswer {
    /// Log positions of the answer's atoms, ascending.
    pub positions: Vec<u64>,
    /// How many frames the index holds: the frames tree's leaves.
    pub frames: u64,
    /// Where the query's frame stands in the frames tree.
    pub frame: FrameWitness,
    /// Walk of the short-lived tree (`None`: that tree is empty).
    pub short: Option<Vec<Step>>,
    /// Walk of the long-lived tree, likewise.
    pub long: Option<Vec<Step>>,
    /// The subject map's digest, hashed into the index root.
    pub subjects_root: Digest,
    /// The link map's digest, hashed into the index root.
    pub links_root: Digest,
    /// Under version 4, the places map: its root, or (a question about one subject) the path
    /// to the subject's place, whose frames tree `frames` and `frame` then speak of.
    pub places: Places,
    /// The version of docs/INDEX.md the walks follow (a proof made under version 2 or 3 still
    /// checks).
    pub version: Version,
}

/// Where a range answer's walks stand in the places map (docs/INDEX.md, version 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Places {
    /// Versions 2 and 3: no places map.
    Before,
    /// A question about every subject: the walks are of the frame's own trees; the places
    /// map's root.
    Root(Digest),
    /// A question about one subject: the walks are of the subject's tree in the frame.
    Subject(SubjectPlace),
}

/// The subject's place in the places map, and the frames tree of the index around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectPlace {
    /// The leaf the search for the subject's key ends at.
    pub leaf: PlaceLeaf,
    /// The crit-bit path from the map's root down to it (empty for a map of one key).
    pub path: Vec<PathStep>,
    /// How many frames the index's frames tree holds.
    pub frames: u64,
    /// The index's frames tree root.
    pub frames_root: Digest,
}

/// The leaf a search of the places map ends at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceLeaf {
    /// The subject's own: its frames tree is the one the answer's walks recompute.
    Found,
    /// The map is empty: no atom has a subject.
    Empty,
    /// Another subject's: the subject has no atom.
    Other {
        /// Its key.
        key: [u8; 32],
        /// Its frames tree's leaf count.
        frames: u64,
        /// Its frames tree's root.
        root: Digest,
    },
}

/// Every atom in a subject's list (or linking to a target), with the map path that proves the
/// list is the committed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAnswer {
    /// Log positions of the list's atoms, ascending.
    pub positions: Vec<u64>,
    /// The leaf the search ended at, when the map is not empty: its key, and for a subject its
    /// label, count and list root (for a different key, this proves absence).
    pub leaf: Option<MapLeaf>,
    /// The crit-bit path from the map's root down to `leaf` (empty for a map of one key).
    pub path: Vec<PathStep>,
    /// How many frames the index holds.
    pub frames: u64,
    /// The frames tree's root.
    pub frames_root: Digest,
    /// The other map's root (links for a subject answer, subjects for a links answer).
    pub other_root: Digest,
}

/// A leaf of the subject or the link map (docs/INDEX.md, "Maps").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLeaf {
    /// Its key: BLAKE3 of the subject, or the target atom's id.
    pub key: [u8; 32],
    /// The subject; empty in the link map.
    pub label: String,
    /// How many atoms the list holds.
    pub count: u64,
    /// The list's root ([`ListHasher`] over [`list_leaf`]s).
    pub root: Digest,
}
