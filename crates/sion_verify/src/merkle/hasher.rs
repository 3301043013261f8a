//! Leaf and interior node hashing with RFC 9162 domain separation (0x00 leaf, 0x01 node).

use sha2::Digest as _;

/// A 32-byte tree hash. Both hashes we use produce 32 bytes.
pub type Digest = [u8; 32];

/// How a tree hashes its leaves and nodes (RFC 9162 §2.1.1).
pub trait TreeHasher {
    /// MTH({}) — the hash of the empty string.
    fn hash_empty() -> Digest;
    /// MTH({d}) = HASH(0x00 || d).
    fn hash_leaf(data: &[u8]) -> Digest;
    /// HASH(0x01 || left || right).
    fn hash_children(left: &Digest, right: &Digest) -> Digest;
}

/// SHA-256, the hash of RFC 9162's test vectors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sha256;

impl TreeHasher for Sha256 {
    fn hash_empty() -> Digest {
        sha2::Sha256::digest([]).into()
    }

    fn hash_leaf(data: &[u8]) -> Digest {
        let mut h = sha2::Sha256::new();
        h.update([0x00]);
        h.update(data);
        h.finalize().into()
    }

    fn hash_children(left: &Digest, right: &Digest) -> Digest {
        let mut h = sha2::Sha256::new();
        h.update([0x01]);
        h.update(left);
        h.update(right);
        h.finalize().into()
    }
}

/// BLAKE3, the product's hash: the same tree shape and domain separation, a faster hash.
#[derive(Debug, Clone, Copy, Default)]
pub struct Blake3;

impl TreeHasher for Blake3 {
    fn hash_empty() -> Digest {
        *blake3::hash(&[]).as_bytes()
    }

    fn hash_leaf(data: &[u8]) -> Digest {
        // Leaves are mostly short (an atom id, a list entry): one call on a stack copy is a
        // fifth quicker than a streaming hasher.
        let mut buf = [0u8; 128];
        if let Some(tail) = buf.get_mut(1..=data.len()) {
            tail.copy_from_slice(data);
            return *blake3::hash(&buf[..=data.len()]).as_bytes();
        }
        let mut h = blake3::Hasher::new();
        h.update(&[0x00]);
        h.update(data);
        *h.finalize().as_bytes()
    }

    fn hash_children(left: &Digest, right: &Digest) -> Digest {
        let mut buf = [0u8; 65];
        buf[0] = 0x01;
        buf[1..33].copy_from_slice(left);
        buf[33..].copy_from_slice(right);
        *blake3::hash(&buf).as_bytes()
    }
}
