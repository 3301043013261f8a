//! Appending to a tree: the frontier of perfect subtrees ("peaks") and the post-order layout
//! in which an append-only tree stores every perfect subtree hash exactly once.
//!
//! In post-order, appending leaf `n` writes the leaf hash and then the hash of every perfect
//! subtree that the leaf completes, so a node file only ever grows at its end. A tree of `n`
//! leaves holds `2n - popcount(n)` nodes.

use std::marker::PhantomData;

use super::{Digest, Subtrees, TreeHasher};

/// Where the perfect subtree `(level, index)` sits in post-order.
pub fn postorder_index(level: u32, index: u64) -> u64 {
    let first_leaf = index << level;
    postorder_len(first_leaf) + (1u64 << (level + 1)) - 2
}

/// How many nodes a post-order node file holds for a tree of `size` leaves.
pub fn postorder_len(size: u64) -> u64 {
    2 * size - u64::from(size.count_ones())
}

/// The right edge of a tree: one peak per set bit of its size, largest first.
#[derive(Debug, Clone)]
pub struct Frontier<H> {
    size: u64,
    peaks: Vec<Digest>,
    hasher: PhantomData<H>,
}

impl<H: TreeHasher> Default for Frontier<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: TreeHasher> Frontier<H> {
    /// The frontier of the empty tree.
    pub fn new() -> Self {
        Self { size: 0, peaks: Vec::new(), hasher: PhantomData }
    }

    /// Rebuild a frontier from the peaks of a tree of `size` leaves, read from `source`.
    pub fn load<S: Subtrees>(source: &S, size: u64) -> Result<Self, S::Error> {
        let mut peaks = Vec::with_capacity(size.count_ones() as usize);
        let mut offset = 0u64;
        for level in (0..64u32).rev() {
            if size & (1u64 << level) != 0 {
                peaks.push(source.subtree(level, offset >> level)?);
                offset += 1u64 << level;
            }
        }
        Ok(Self { size, peaks, hasher: PhantomData })
    }

    /// A frontier from its peaks (largest first), as [`Frontier::peaks`] gave them; `None`
    /// unless there is one peak per set bit of `size`.
    pub fn from_peaks(size: u64, peaks: Vec<Digest>) -> Option<Self> {
        (peaks.len() == size.count_ones() as usize).then_some(Self { size, peaks, hasher: PhantomData })
    }

    /// The peaks: the roots of the perfect subtrees the tree is made of, largest first.
    pub fn peaks(&self) -> &[Digest] {
        &self.peaks
    }

    /// How many leaves the tree holds.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Append a leaf hash. `emit` receives the new nodes in post-order: the leaf hash, then
    /// each perfect subtree it completes, lowest first.
    pub fn push(&mut self, leaf_hash: Digest, mut emit: impl FnMut(&Digest)) {
        emit(&leaf_hash);
        let mut node = leaf_hash;
        let mut n = self.size;
        while n & 1 == 1 {
            // A set low bit means a peak of the same height waits on the left.
            let Some(left) = self.peaks.pop() else { break };
            node = H::hash_children(&left, &node);
            emit(&node);
            n >>= 1;
        }
        self.peaks.push(node);
        self.size += 1;
    }

    /// The tree hash (RFC 9162 MTH) of the whole tree.
    pub fn root(&self) -> Digest {
        let mut iter = self.peaks.iter().rev();
        let Some(last) = iter.next() else { return H::hash_empty() };
        iter.fold(*last, |right, left| H::hash_children(left, &right))
    }
}

/// A whole tree in memory, in post-order: for tests, and for small trees such as the
/// ledger's state tree.
#[derive(Debug, Clone)]
pub struct MemoryTree<H> {
    nodes: Vec<Digest>,
    frontier: Frontier<H>,
}

impl<H: TreeHasher> Default for MemoryTree<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: TreeHasher> MemoryTree<H> {
    /// The empty tree.
    pub fn new() -> Self {
        Self { nodes: Vec::new(), frontier: Frontier::new() }
    }

    /// The tree over these leaves' data, in order.
    pub fn from_leaves<D: AsRef<[u8]>>(leaves: impl IntoIterator<Item = D>) -> Self {
        let mut tree = Self::new();
        for leaf in leaves {
            tree.push_leaf(leaf.as_ref());
        }
        tree
    }

    /// Append a leaf's data, hashed as `H::hash_leaf` does.
    pub fn push_leaf(&mut self, data: &[u8]) {
        self.push_leaf_hash(H::hash_leaf(data));
    }

    /// Append a leaf already hashed.
    pub fn push_leaf_hash(&mut self, leaf_hash: Digest) {
        let nodes = &mut self.nodes;
        self.frontier.push(leaf_hash, |node| nodes.push(*node));
    }

    /// How many leaves the tree holds.
    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The tree hash (RFC 9162 MTH) of the whole tree.
    pub fn root(&self) -> Digest {
        self.frontier.root()
    }

    /// The hash of leaf `index`; `None` if the tree is not that big.
    pub fn leaf_hash(&self, index: u64) -> Option<Digest> {
        (index < self.size()).then(|| self.nodes[postorder_index(0, index) as usize])
    }
}

/// Asking a [`MemoryTree`] for a subtree it does not hold.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("subtree ({level}, {index}) is not complete in this tree")]
pub struct MissingSubtree {
    pub level: u32,
    pub index: u64,
}

impl<H: TreeHasher> Subtrees for MemoryTree<H> {
    type Error = MissingSubtree;

    fn subtree(&self, level: u32, index: u64) -> Result<Digest, MissingSubtree> {
        let missing = MissingSubtree { level, index };
        if level >= 64 {
            return Err(missing);
        }
        let end = index.checked_add(1).and_then(|i| i.checked_mul(1u64 << level)).ok_or(missing)?;
        if end > self.size() {
            return Err(missing);
        }
        self.nodes.get(postorder_index(level, index) as usize).copied().ok_or(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::Sha256;

    #[test]
    fn postorder_positions_follow_appends() {
        // Leaves 0,1 then their parent, leaf 2, leaf 3, parent (1,1), parent (2,0), ...
        assert_eq!(postorder_index(0, 0), 0);
        assert_eq!(postorder_index(0, 1), 1);
        assert_eq!(postorder_index(1, 0), 2);
        assert_eq!(postorder_index(0, 2), 3);
        assert_eq!(postorder_index(0, 3), 4);
        assert_eq!(postorder_index(1, 1), 5);
        assert_eq!(postorder_index(2, 0), 6);
        assert_eq!(postorder_index(0, 4), 7);
        for n in 0..200u64 {
            let tree = MemoryTree::<Sha256>::from_leaves((0..n).map(|i| i.to_le_bytes()));
            assert_eq!(tree.nodes.len() as u64, postorder_len(n));
        }
    }

    #[test]
    fn frontier_reloads_from_its_subtrees() {
        let tree = MemoryTree::<Sha256>::from_leaves((0..77u64).map(|i| i.to_le_bytes()));
        for size in 0..=77u64 {
            let prefix = MemoryTree::<Sha256>::from_leaves((0..size).map(|i| i.to_le_bytes()));
            let loaded = Frontier::<Sha256>::load(&tree, size).expect("complete subtrees");
            assert_eq!(loaded.root(), prefix.root(), "size {size}");
        }
    }
}
