//! Inclusion and consistency proofs (RFC 9162 §2.1.3 and §2.1.4): generation from perfect
//! subtree hashes, verification from the proof alone.
//!
//! Verification takes roots and proof nodes as byte slices so that malformed input (a root of
//! the wrong length, a truncated node) is an error, not a panic or a type the caller cannot
//! build; the product wraps these in typed proofs.

use super::{Digest, Subtrees, TreeHasher, split_point};

/// Why a proof did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// An inclusion proof's leaf index is not below the tree size.
    #[error("leaf index {index} is not below tree size {size}")]
    IndexOutOfRange {
        /// The leaf index.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// A consistency proof's old tree is larger than the new one.
    #[error("old size {old} is larger than new size {new}")]
    SizesOutOfOrder {
        /// The old size.
        old: u64,
        /// The new size.
        new: u64,
    },
    /// A consistency proof from the empty tree, which RFC 9162 does not define.
    #[error("a consistency proof needs a non-empty old tree (RFC 9162 §2.1.4: 0 < m)")]
    EmptyOldTree,
    /// A proof node is not 32 bytes.
    #[error("proof node {position} is {len} bytes, expected 32")]
    NodeLength {
        /// Its index in the proof.
        position: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// The leaf hash is this many bytes, not 32.
    #[error("leaf hash is {0} bytes, expected 32")]
    LeafHashLength(usize),
    /// The proof has more nodes (this many) than the tree sizes need.
    #[error("proof has {0} nodes, more than the tree can need")]
    TooLong(usize),
    /// The proof has fewer nodes than the tree sizes need.
    #[error("proof has too few nodes for the tree sizes")]
    TooShort,
    /// A consistency proof between equal sizes is not empty, or the roots differ.
    #[error("equal tree sizes need an empty proof and equal roots")]
    NotEmpty,
    /// The proof leads to another root than the one given (the new one, for consistency).
    #[error("proof does not lead to the expected root")]
    RootMismatch,
    /// A consistency proof leads to another old root than the one given (or that is not 32
    /// bytes).
    #[error("proof does not lead to the old root")]
    OldRootMismatch,
}

/// MTH(D\[lo:hi\]): the tree hash of a range of leaves, read from perfect subtrees.
///
/// For the ranges RFC 9162's recursion produces (a perfect left part and a right part ending at
/// the tree size) this costs one read per perfect subtree, O(log n) in all.
pub fn range_hash<H: TreeHasher, S: Subtrees>(src: &S, lo: u64, hi: u64) -> Result<Digest, S::Error> {
    let n = hi - lo;
    if n == 0 {
        return Ok(H::hash_empty());
    }
    if n.is_power_of_two() && lo.is_multiple_of(n) {
        let level = n.trailing_zeros();
        return src.subtree(level, lo >> level);
    }
    let k = split_point(n);
    let left = range_hash::<H, S>(src, lo, lo + k)?;
    let right = range_hash::<H, S>(src, lo + k, hi)?;
    Ok(H::hash_children(&left, &right))
}

/// The root of the tree's first `size` leaves.
pub fn root_at<H: TreeHasher, S: Subtrees>(src: &S, size: u64) -> Result<Digest, S::Error> {
    range_hash::<H, S>(src, 0, size)
}

/// PATH(index, D\[0:size\]) of RFC 9162 §2.1.3.1, nodes ordered from the leaf upwards.
/// The caller guarantees `index < size` and that `src` holds at least `size` leaves.
pub fn inclusion_path<H: TreeHasher, S: Subtrees>(
    src: &S,
    index: u64,
    size: u64,
) -> Result<Vec<Digest>, S::Error> {
    debug_assert!(index < size);
    let mut top_down = Vec::new();
    let (mut lo, mut hi, mut m) = (0u64, size, index);
    while hi - lo > 1 {
        let k = split_point(hi - lo);
        if m < k {
            top_down.push(range_hash::<H, S>(src, lo + k, hi)?);
            hi = lo + k;
        } else {
            top_down.push(range_hash::<H, S>(src, lo, lo + k)?);
            lo += k;
            m -= k;
        }
    }
    top_down.reverse();
    Ok(top_down)
}

/// PROOF(old, D\[0:new\]) of RFC 9162 §2.1.4.1, nodes in the RFC's order.
/// The caller guarantees `0 < old <= new` and that `src` holds at least `new` leaves.
pub fn consistency_path<H: TreeHasher, S: Subtrees>(
    src: &S,
    old: u64,
    new: u64,
) -> Result<Vec<Digest>, S::Error> {
    debug_assert!(0 < old && old <= new);
    let mut top_down = Vec::new();
    let (mut lo, mut hi, mut m, mut whole) = (0u64, new, old, true);
    loop {
        let n = hi - lo;
        if m == n {
            if !whole {
                top_down.push(range_hash::<H, S>(src, lo, hi)?);
            }
            break;
        }
        let k = split_point(n);
        if m <= k {
            top_down.push(range_hash::<H, S>(src, lo + k, hi)?);
            hi = lo + k;
        } else {
            top_down.push(range_hash::<H, S>(src, lo, lo + k)?);
            lo += k;
            m -= k;
            whole = false;
        }
    }
    top_down.reverse();
    Ok(top_down)
}

/// One step of RFC 9162's walk from a leaf towards the root, with `f` the node's index and
/// `s` the last index at this level: whether the next proof node is a left sibling. On the
/// right edge, levels where the node has no sibling are skipped (the RFC's "right-shift until
/// LSB(fn) is set or fn is 0"); the caller then moves both up one level.
fn sibling_is_left(f: &mut u64, s: &mut u64) -> bool {
    let left = *f & 1 == 1 || *f == *s;
    if left {
        while *f & 1 == 0 && *f != 0 {
            *f >>= 1;
            *s >>= 1;
        }
    }
    left
}

fn node(bytes: &[u8], position: usize) -> Result<Digest, ProofError> {
    bytes.try_into().map_err(|_| ProofError::NodeLength { position, len: bytes.len() })
}

/// Verify an inclusion proof (RFC 9162 §2.1.3.2).
pub fn verify_inclusion<H: TreeHasher, P: AsRef<[u8]>>(
    index: u64,
    size: u64,
    leaf_hash: &[u8],
    proof: &[P],
    root: &[u8],
) -> Result<(), ProofError> {
    let leaf: Digest = leaf_hash.try_into().map_err(|_| ProofError::LeafHashLength(leaf_hash.len()))?;
    if root_from_inclusion::<H, P>(index, size, &leaf, proof)?.as_slice() != root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// The root an inclusion proof leads to (the running hash of RFC 9162 §2.1.3.2), for callers
/// that learn the root from the proof and check it elsewhere.
pub fn root_from_inclusion<H: TreeHasher, P: AsRef<[u8]>>(
    index: u64,
    size: u64,
    leaf_hash: &Digest,
    proof: &[P],
) -> Result<Digest, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    if proof.len() > 64 {
        return Err(ProofError::TooLong(proof.len()));
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf_hash;
    for (position, p) in proof.iter().enumerate() {
        let p = node(p.as_ref(), position)?;
        if s == 0 {
            return Err(ProofError::TooLong(proof.len()));
        }
        if sibling_is_left(&mut f, &mut s) {
            r = H::hash_children(&p, &r);
        } else {
            r = H::hash_children(&r, &p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::TooShort);
    }
    Ok(r)
}

/// Verify a consistency proof between trees of `old` and `new` leaves (RFC 9162 §2.1.4.2).
///
/// Equal sizes need an empty proof and equal roots. An empty old tree is rejected, as in the
/// RFC, which defines consistency proofs only for `0 < old`: every tree extends the empty one,
/// so there is nothing to prove, and callers that accept that case say so themselves.
pub fn verify_consistency<H: TreeHasher, P: AsRef<[u8]>>(
    old: u64,
    new: u64,
    old_root: &[u8],
    new_root: &[u8],
    proof: &[P],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::SizesOutOfOrder { old, new });
    }
    if old == 0 {
        return Err(ProofError::EmptyOldTree);
    }
    if old == new {
        return if proof.is_empty() && old_root == new_root { Ok(()) } else { Err(ProofError::NotEmpty) };
    }
    if proof.len() > 128 {
        return Err(ProofError::TooLong(proof.len()));
    }
    let mut nodes = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        // The old tree is a perfect subtree of the new one: its root is the first node.
        nodes.push(node(old_root, usize::MAX).map_err(|_| ProofError::OldRootMismatch)?);
    }
    for (position, p) in proof.iter().enumerate() {
        nodes.push(node(p.as_ref(), position)?);
    }
    let Some((first, rest)) = nodes.split_first() else {
        return Err(ProofError::TooShort);
    };
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::TooLong(proof.len()));
        }
        if sibling_is_left(&mut f, &mut s) {
            fr = H::hash_children(c, &fr);
            sr = H::hash_children(c, &sr);
        } else {
            sr = H::hash_children(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::TooShort);
    }
    if fr.as_slice() != old_root {
        return Err(ProofError::OldRootMismatch);
    }
    if sr.as_slice() != new_root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{Blake3, MemoryTree, Sha256};

    fn tree<H: TreeHasher>(n: u64) -> MemoryTree<H> {
        MemoryTree::from_leaves((0..n).map(|i| format!("leaf {i}")))
    }

    fn round_trips<H: TreeHasher>() {
        let big = tree::<H>(70);
        for size in 1..=70u64 {
            let root = root_at::<H, _>(&big, size).expect("root");
            assert_eq!(root, tree::<H>(size).root());
            for index in 0..size {
                let path = inclusion_path::<H, _>(&big, index, size).expect("path");
                let leaf = big.leaf_hash(index).expect("leaf");
                verify_inclusion::<H, _>(index, size, &leaf, &path, &root).expect("inclusion verifies");
                if let Some(other) = big.leaf_hash(index + 1) {
                    assert!(verify_inclusion::<H, _>(index, size, &other, &path, &root).is_err());
                }
            }
            for old in 1..=size {
                let old_root = root_at::<H, _>(&big, old).expect("old root");
                let path = consistency_path::<H, _>(&big, old, size).expect("path");
                verify_consistency::<H, _>(old, size, &old_root, &root, &path).expect("consistency");
                if old < size {
                    let mut forged = path.clone();
                    forged[0][0] ^= 1;
                    assert!(verify_consistency::<H, _>(old, size, &old_root, &root, &forged).is_err());
                    let fork = tree::<H>(old + 1).root();
                    assert!(verify_consistency::<H, _>(old, size, &fork, &root, &path).is_err());
                }
            }
        }
    }

    #[test]
    fn sha256_proofs_round_trip() {
        round_trips::<Sha256>();
    }

    #[test]
    fn blake3_proofs_round_trip() {
        round_trips::<Blake3>();
    }

    #[test]
    fn empty_tree_root_is_hash_of_nothing() {
        assert_eq!(MemoryTree::<Sha256>::new().root(), Sha256::hash_empty());
        assert_eq!(
            hex::encode(Sha256::hash_empty()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
