//! The memory log's leaves (docs/LOG.md, "The tree"): what a position of the log commits to.

use crate::atom::{Atom, AtomId};
use crate::merkle::{Blake3, Digest, TreeHasher as _};

/// The hash of the product's trees.
pub type LogHasher = Blake3;

/// The log's leaf for an atom: `BLAKE3(0x00 || atom id)` (docs/LOG.md, "The tree"). The id
/// is BLAKE3 of the atom's encoding, so the leaf commits to the atom as surely as hashing the
/// encoding again would, at a quarter of the cost.
pub fn leaf_hash(atom: &Atom) -> Digest {
    LogHasher::hash_leaf(atom.id().as_bytes())
}

/// The leaf for an atom's canonical bytes.
pub fn leaf_hash_of_bytes(bytes: &[u8]) -> Digest {
    LogHasher::hash_leaf(AtomId::of_encoding(bytes).as_bytes())
}
