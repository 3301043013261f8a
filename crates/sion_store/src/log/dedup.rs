//! Which position holds a given leaf: the map that makes remembering an atom twice a no-op.
//!
//! It keeps 8 bytes of each leaf hash and the position (16 bytes an entry, about 35 bytes an
//! atom with the table's slack), and confirms a hit against the full leaf hash stored in the
//! node file. Two leaves sharing a prefix are kept whole in a small overflow map.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

use sion_verify::merkle::Digest;

/// Leaf hash prefixes are uniformly random already: hashing them again buys nothing.
#[derive(Default)]
pub(super) struct PrefixHasher(u64);

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Leaves of one commit group, not yet in the map.
pub(super) type LeafMap = HashMap<Digest, u64, BuildHasherDefault<PrefixHasher>>;

fn prefix(leaf: &Digest) -> u64 {
    let mut p = [0u8; 8];
    p.copy_from_slice(&leaf[..8]);
    u64::from_le_bytes(p)
}

#[derive(Default)]
pub(super) struct Dedup {
    by_prefix: HashMap<u64, u64, BuildHasherDefault<PrefixHasher>>,
    overflow: HashMap<Digest, u64>,
}

impl Dedup {
    pub(super) fn with_capacity(n: usize) -> Self {
        Self { by_prefix: HashMap::with_capacity_and_hasher(n, Default::default()), overflow: HashMap::new() }
    }

    /// The position of `leaf`, confirming a prefix hit with `stored`, which reads the leaf
    /// hash at a position.
    pub(super) fn find<E>(
        &self,
        leaf: &Digest,
        stored: impl FnOnce(u64) -> Result<Digest, E>,
    ) -> Result<Option<u64>, E> {
        if let Some(&p) = self.overflow.get(leaf) {
            return Ok(Some(p));
        }
        match self.by_prefix.get(&prefix(leaf)) {
            Some(&p) if stored(p)? == *leaf => Ok(Some(p)),
            _ => Ok(None),
        }
    }

    /// Record a leaf known to be absent.
    pub(super) fn insert(&mut self, leaf: &Digest, position: u64) {
        match self.by_prefix.entry(prefix(leaf)) {
            Entry::Occupied(_) => {
                self.overflow.insert(*leaf, position);
            }
            Entry::Vacant(slot) => {
                slot.insert(position);
            }
        }
    }
}
