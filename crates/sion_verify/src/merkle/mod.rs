//! RFC 9162 Merkle trees (§2.1): tree hashing, inclusion and consistency proofs.
//!
//! Generic over the hash function through [`TreeHasher`]: [`Sha256`] is the RFC's own and
//! passes the public test vectors; [`Blake3`] is the product's. Proof *generation* reads
//! perfect subtree hashes from any [`Subtrees`] source (memory or the log's node file), so a
//! proof for any old tree size costs O(log n) reads. Proof *verification* needs nothing but
//! the proof, the sizes and the roots.

mod frontier;
mod hasher;
mod proof;

pub use frontier::{Frontier, MemoryTree, postorder_index, postorder_len};
pub use hasher::{Blake3, Digest, Sha256, TreeHasher};
pub use proof::{
    ProofError, consistency_path, inclusion_path, range_hash, root_at, root_from_inclusion,
    verify_consistency, verify_inclusion,
};

/// Perfect subtree hashes of one tree: `subtree(level, index)` is the Merkle tree hash of the
/// leaves `[index << level, (index + 1) << level)`. Callers only ask for subtrees that are
/// complete in the tree they hold.
pub trait Subtrees {
    /// Why a subtree could not be read (an I/O failure, or a subtree the source does not hold).
    type Error;
    /// The hash of the perfect subtree of `2^level` leaves that starts at leaf `index << level`.
    fn subtree(&self, level: u32, index: u64) -> Result<Digest, Self::Error>;
}

/// The largest power of two strictly less than `n` (RFC 9162's split point `k`); `n >= 2`.
pub fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::split_point;

    #[test]
    fn split_point_is_largest_power_of_two_below() {
        assert_eq!(split_point(2), 1);
        assert_eq!(split_point(3), 2);
        assert_eq!(split_point(4), 2);
        assert_eq!(split_point(5), 4);
        assert_eq!(split_point(8), 4);
        assert_eq!(split_point(9), 8);
        assert_eq!(split_point(u64::MAX), 1 << 63);
    }
}
