//! A Merkle crit-bit tree over 32-byte keys (docs/INDEX.md, "Maps"): the shape depends only
//! on the set of keys, membership and absence are each shown by one root-to-leaf path.
//!
//! Over keys sorted ascending, a tree of one key is that key's leaf; a tree of more splits at
//! the first bit (most significant first) where its first and last keys differ: keys with a 0
//! there go left. Interior digest: BLAKE3 keyed with `BLAKE3(0x21 || u16 LE bit)` over
//! `left || right` (one 64-byte block; the key binds the bit); the empty map: `BLAKE3(0x22)`.

use crate::merkle::Digest;
use crate::wire::{Put as _, Reader, WireError};

/// Domain tag of the key an interior node is hashed with.
pub const TAG_NODE: u8 = 0x21;
/// The empty map's digest is BLAKE3 of this one byte.
pub const TAG_EMPTY: u8 = 0x22;

/// Bit `i` (below 256) of a key; bit 0 is the most significant bit of byte 0.
pub fn bit(key: &[u8; 32], i: u16) -> bool {
    let i = usize::from(i);
    key[i / 8] >> (7 - i % 8) & 1 == 1
}

/// The first bit where two keys differ, if they do.
pub fn first_difference(a: &[u8; 32], b: &[u8; 32]) -> Option<u16> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i * 8) as u16 + (x ^ y).leading_zeros() as u16)
}

/// The key an interior node at crit bit `crit` is hashed with: `BLAKE3(0x21 || u16 LE crit)`.
fn crit_key(crit: u16) -> [u8; 32] {
    static KEYS: std::sync::OnceLock<Vec<[u8; 32]>> = std::sync::OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        (0..256u16)
            .map(|b| {
                let mut buf = [TAG_NODE, 0, 0];
                buf[1..].copy_from_slice(&b.to_le_bytes());
                *blake3::hash(&buf).as_bytes()
            })
            .collect()
    });
    keys.get(usize::from(crit)).copied().unwrap_or_else(|| {
        let mut buf = [TAG_NODE, 0, 0];
        buf[1..].copy_from_slice(&crit.to_le_bytes());
        *blake3::hash(&buf).as_bytes()
    })
}

/// An interior node's digest: BLAKE3 keyed with `BLAKE3(0x21 || u16 LE crit)` over
/// `left || right`.
pub fn node_digest(crit: u16, left: &Digest, right: &Digest) -> Digest {
    let mut buf = [0u8; 64];
    buf[..32].copy_from_slice(left);
    buf[32..].copy_from_slice(right);
    *blake3::keyed_hash(&crit_key(crit), &buf).as_bytes()
}

/// The empty map's digest, `BLAKE3(0x22)`.
pub fn empty_digest() -> Digest {
    *blake3::hash(&[TAG_EMPTY]).as_bytes()
}

/// One step of a path, from the root down: the node's crit bit and the digest of the side the
/// path does not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStep {
    /// The first bit (0 to 255) at which the node's first and last keys differ.
    pub crit: u16,
    /// Digest of the side the path does not take.
    pub sibling: Digest,
}

/// Recompute a root from the leaf a search for `key` ends at (`leaf_key`, `leaf`) and the
/// path to it; `None` if the path is not a valid crit-bit path (crit bits strictly increase
/// downwards, and the leaf's key agrees with `key` at every one of them).
pub fn root_from_path(
    key: &[u8; 32],
    leaf_key: &[u8; 32],
    leaf: Digest,
    path: &[PathStep],
) -> Option<Digest> {
    if path.windows(2).any(|w| w[0].crit >= w[1].crit)
        || path.iter().any(|s| s.crit >= 256 || bit(key, s.crit) != bit(leaf_key, s.crit))
    {
        return None;
    }
    let mut digest = leaf;
    for step in path.iter().rev() {
        digest = if bit(key, step.crit) {
            node_digest(step.crit, &step.sibling, &digest)
        } else {
            node_digest(step.crit, &digest, &step.sibling)
        };
    }
    Some(digest)
}

/// A path as proofs carry it (docs/PROOFS.md, kinds 3 and 4): `u16 n`, then each step from the
/// root, `u16 crit || 32 sibling`.
pub fn put_path(out: &mut Vec<u8>, path: &[PathStep]) {
    out.put_u16(path.len() as u16);
    for step in path {
        out.put_u16(step.crit);
        out.put_bytes(&step.sibling);
    }
}

/// Read what [`put_path`] writes; more than 256 steps (no crit-bit path is longer) is refused.
pub fn read_path(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<PathStep>, WireError> {
    let n = r.u16(field)?;
    if n > 256 {
        return Err(WireError::Invalid {
            field,
            problem: format!("{n} steps: longer than any crit-bit path"),
        });
    }
    (0..n).map(|_| Ok(PathStep { crit: r.u16("crit")?, sibling: r.array("sibling")? })).collect()
}
