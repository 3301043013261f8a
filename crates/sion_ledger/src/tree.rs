//! The ledger's state tree kept as it changes (docs/LEDGER.md, "Pulses": an RFC 9162 BLAKE3 tree
//! over the logs' leaf encodings). A Pulse changes one log, or opens one and moves its writer's
//! chain: rebuilding the tree from every leaf each time cost 2.6 ms at 2,000 logs and 16 ms at
//! 20,000. Here each change rehashes only its leaf's ancestors, O(log n), and the root and an
//! inclusion path are read from the nodes kept.

use sion_verify::merkle::split_point as split;
use sion_verify::merkle::{Blake3, Digest, TreeHasher as _};

/// Every complete subtree's hash, level by level: `levels[0]` the leaf hashes, `levels[j][m]`
/// the hash of leaves `m·2^j … (m+1)·2^j − 1` once all of them exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateTree {
    levels: Vec<Vec<Digest>>,
}

impl StateTree {
    /// The tree over these leaves' hashes (`BLAKE3(0x00 || encoding)` each).
    pub fn from_leaf_hashes(leaves: impl IntoIterator<Item = Digest>) -> Self {
        let mut tree = Self::default();
        for leaf in leaves {
            tree.push(leaf);
        }
        tree
    }

    /// The tree over these leaf encodings.
    pub fn from_leaves<D: AsRef<[u8]>>(leaves: impl IntoIterator<Item = D>) -> Self {
        Self::from_leaf_hashes(leaves.into_iter().map(|l| Blake3::hash_leaf(l.as_ref())))
    }

    /// How many leaves.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    /// Append a leaf hash; every subtree it completes is hashed.
    pub fn push(&mut self, leaf: Digest) {
        let mut node = leaf;
        let mut j = 0;
        loop {
            if self.levels.len() == j {
                self.levels.push(Vec::new());
            }
            let level = &mut self.levels[j];
            level.push(node);
            let at = level.len() - 1;
            if at.is_multiple_of(2) {
                return;
            }
            node = Blake3::hash_children(&level[at - 1], &level[at]);
            j += 1;
        }
    }

    /// Remove the last leaf (undoing a [`StateTree::push`]).
    pub fn pop(&mut self) {
        let Some(n) = self.levels.first().map(Vec::len) else { return };
        if n == 0 {
            return;
        }
        let n = n - 1;
        for (j, level) in self.levels.iter_mut().enumerate() {
            level.truncate(n >> j);
        }
        while self.levels.last().is_some_and(Vec::is_empty) && self.levels.len() > 1 {
            self.levels.pop();
        }
    }

    /// Replace leaf `i`'s hash and rehash its complete ancestors; a leaf past the end is ignored.
    pub fn set(&mut self, i: u64, leaf: Digest) {
        let Some(slot) = self.levels.first_mut().and_then(|l| l.get_mut(i as usize)) else { return };
        *slot = leaf;
        let mut at = i as usize;
        for j in 1..self.levels.len() {
            at /= 2;
            if at >= self.levels[j].len() {
                return;
            }
            let below = &self.levels[j - 1];
            let node = Blake3::hash_children(&below[2 * at], &below[2 * at + 1]);
            self.levels[j][at] = node;
        }
    }

    /// The root: RFC 9162's hash of every leaf (`BLAKE3("")` for none).
    pub fn root(&self) -> Digest {
        match self.size() {
            0 => Blake3::hash_empty(),
            n => range(0, n, &mut |j, m| self.node(j, m)).unwrap_or_else(Blake3::hash_empty),
        }
    }

    /// Leaf `i`'s RFC 9162 inclusion path, bottom-up; `None` past the end.
    pub fn path(&self, i: u64) -> Option<Vec<Digest>> {
        path_from(i, self.size(), |j, m| self.node(j, m))
    }

    /// Leaf `i`'s complete ancestors, itself first: `(level, index, hash)` for every complete
    /// subtree that holds it — every node whose hash a change of that leaf (or its push) set.
    pub fn ancestors(&self, i: u64) -> Vec<(u32, u64, Digest)> {
        let mut out = Vec::new();
        for (j, level) in self.levels.iter().enumerate() {
            match level.get((i >> j) as usize) {
                Some(h) => out.push((j as u32, i >> j, *h)),
                None => break,
            }
        }
        out
    }

    /// Complete subtree `m` of level `j` (leaves `m·2^j … (m+1)·2^j − 1`).
    pub fn node(&self, j: u32, m: u64) -> Option<Digest> {
        self.levels.get(j as usize)?.get(m as usize).copied()
    }

    /// Tier block `s` of tier `t` ([`TIER`]): the hashes of the complete subtrees of level
    /// `TIER·t` numbered `64·s … 64·s + 63`, as many of them as are complete, in order.
    pub fn tier_block(&self, t: u32, s: u64) -> Vec<Digest> {
        let Some(level) = self.levels.get((TIER * t) as usize) else { return Vec::new() };
        let from = (s << TIER) as usize;
        level.get(from..level.len().min(from + (1 << TIER))).map(<[Digest]>::to_vec).unwrap_or_default()
    }
}

/// Levels a tier spans: a tier block holds 2^TIER = 64 hashes of one level, `TIER·t`, and with
/// them every complete subtree of levels `TIER·t … TIER·t + TIER − 1` inside it.
pub const TIER: u32 = 6;

/// The tier blocks (`(tier, block)`) a change of leaf `i` in a tree of `n` leaves sets: one of
/// each tier whose level has a complete subtree (`2^(TIER·t) ≤ n`).
pub fn tier_blocks_of(i: u64, n: u64) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    let mut t = 0;
    while TIER * t < 64 && (1u128 << (TIER * t)) <= n as u128 {
        out.push((t, i.checked_shr(TIER * (t + 1)).unwrap_or(0)));
        t += 1;
    }
    out
}

/// The tier block that holds complete subtree `m` of level `j`, and where its level-`TIER·t`
/// subtrees start and end in the block: `(tier, block, from, to)`.
pub fn tier_of(j: u32, m: u64) -> (u32, u64, usize, usize) {
    let t = j / TIER;
    let below = j - TIER * t;
    let first = m << below;
    let in_block = (first & ((1 << TIER) - 1)) as usize;
    (t, first >> TIER, in_block, in_block + (1usize << below))
}

/// Complete subtree `m` of level `j` from its tier block's hashes (as [`StateTree::tier_block`]
/// gave them): `None` if the block does not hold all of it.
pub fn node_from_tier(j: u32, m: u64, block: &[Digest]) -> Option<Digest> {
    let (_, _, from, to) = tier_of(j, m);
    let mut level: Vec<Digest> = block.get(from..to)?.to_vec();
    while level.len() > 1 {
        level = level.chunks(2).map(|p| Blake3::hash_children(&p[0], &p[1])).collect();
    }
    level.first().copied()
}

/// The complete subtrees (`(level, index)`, each once) that leaf `i`'s inclusion path in a tree
/// of `n` leaves is hashed from: O(log n) of them (the one right sibling that is not a complete
/// subtree is made of at most log n that are). Empty when `i ≥ n`.
pub fn path_nodes(i: u64, n: u64) -> Vec<(u32, u64)> {
    let mut nodes = Vec::new();
    let _ = path_from(i, n, |j, m| {
        nodes.push((j, m));
        Some([0; 32])
    });
    nodes
}

/// Leaf `i`'s RFC 9162 inclusion path in a tree of `n` leaves, bottom-up, from the hashes of
/// complete subtrees that `node(level, index)` gives (`None` if one is missing, or `i ≥ n`).
pub fn path_from(i: u64, n: u64, mut node: impl FnMut(u32, u64) -> Option<Digest>) -> Option<Vec<Digest>> {
    if i >= n {
        return None;
    }
    let (mut lo, mut hi) = (0, n);
    let mut path = Vec::new();
    while hi - lo > 1 {
        let k = split(hi - lo);
        if i < lo + k {
            path.push(range(lo + k, hi, &mut node)?);
            hi = lo + k;
        } else {
            path.push(range(lo, lo + k, &mut node)?);
            lo += k;
        }
    }
    path.reverse();
    Some(path)
}

/// The hash of leaves `lo … hi − 1` as RFC 9162 defines it (`hi > lo`), from complete subtrees.
fn range(lo: u64, hi: u64, node: &mut impl FnMut(u32, u64) -> Option<Digest>) -> Option<Digest> {
    let n = hi - lo;
    if n.is_power_of_two() && lo.is_multiple_of(n) {
        let j = n.trailing_zeros();
        return node(j, lo >> j);
    }
    let k = split(n);
    Some(Blake3::hash_children(&range(lo, lo + k, node)?, &range(lo + k, hi, node)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sion_verify::merkle::{MemoryTree, inclusion_path, verify_inclusion};

    fn leaf(i: u64, v: u64) -> Vec<u8> {
        format!("log {i} version {v}").into_bytes()
    }

    #[test]
    fn every_complete_subtree_is_found_in_its_tier_block() {
        for n in [1u64, 2, 63, 64, 65, 127, 4095, 4096, 4097, 9000] {
            let tree = StateTree::from_leaves((0..n).map(|i| leaf(i, 0)));
            for j in 0..14u32 {
                for m in 0..(n >> j) {
                    let (t, s, ..) = tier_of(j, m);
                    let block = tree.tier_block(t, s);
                    assert_eq!(node_from_tier(j, m, &block), tree.node(j, m), "n {n}, node ({j}, {m})");
                }
            }
            // A change of a leaf sets exactly the blocks holding its complete ancestors.
            for i in [0, n / 2, n - 1] {
                let blocks = tier_blocks_of(i, n);
                for (j, m, _) in tree.ancestors(i) {
                    let (t, s, ..) = tier_of(j, m);
                    assert!(blocks.contains(&(t, s)), "n {n}, leaf {i}: ({j}, {m}) in no block set");
                }
            }
        }
    }

    #[test]
    fn agrees_with_a_tree_built_afresh_through_pushes_sets_and_pops() {
        let mut tree = StateTree::default();
        let mut leaves: Vec<Vec<u8>> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for step in 0..1500u64 {
            match next() % 7 {
                0..=3 => {
                    leaves.push(leaf(leaves.len() as u64, step));
                    tree.push(Blake3::hash_leaf(leaves.last().expect("one")));
                }
                4 | 5 if !leaves.is_empty() => {
                    let i = next() % leaves.len() as u64;
                    leaves[i as usize] = leaf(i, step);
                    tree.set(i, Blake3::hash_leaf(&leaves[i as usize]));
                }
                _ if !leaves.is_empty() => {
                    leaves.pop();
                    tree.pop();
                }
                _ => {}
            }
            let fresh = MemoryTree::<Blake3>::from_leaves(leaves.iter());
            assert_eq!((tree.size(), tree.root()), (fresh.size(), fresh.root()), "step {step}");
            if !leaves.is_empty() && step % 5 == 0 {
                let i = next() % leaves.len() as u64;
                let path = tree.path(i).expect("a leaf");
                let want = inclusion_path::<Blake3, _>(&fresh, i, fresh.size()).expect("path");
                assert_eq!(path, want, "step {step}, leaf {i}");
                let h = Blake3::hash_leaf(&leaves[i as usize]);
                verify_inclusion::<Blake3, _>(i, tree.size(), &h, &path, &tree.root()).expect("verifies");
            }
        }
        assert_eq!(StateTree::default().root(), Blake3::hash_empty());
        assert_eq!(StateTree::from_leaves(leaves.iter()), tree_rebuilt(&leaves));
    }

    /// What a fleet ledger keeps (each Pulse, the complete ancestors of the leaves it changed,
    /// under that Pulse's number) gives any earlier Pulse's inclusion paths: each subtree's hash
    /// as of Pulse P is the last one kept at or before P.
    #[test]
    fn versioned_ancestors_give_any_earlier_paths() {
        use std::collections::BTreeMap;
        let mut tree = StateTree::default();
        let mut leaves: Vec<Vec<u8>> = Vec::new();
        let mut kept: BTreeMap<(u32, u64, u64), Digest> = BTreeMap::new();
        let mut roots = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for pulse in 0..600u64 {
            let mut changed = Vec::new();
            if leaves.is_empty() || next() % 3 == 0 {
                leaves.push(leaf(leaves.len() as u64, pulse));
                tree.push(Blake3::hash_leaf(leaves.last().expect("one")));
                changed.push(leaves.len() as u64 - 1);
            }
            if next() % 2 == 0 {
                let i = next() % leaves.len() as u64;
                leaves[i as usize] = leaf(i, pulse);
                tree.set(i, Blake3::hash_leaf(&leaves[i as usize]));
                changed.push(i);
            }
            for i in changed {
                for (j, m, h) in tree.ancestors(i) {
                    kept.insert((j, m, pulse), h);
                }
            }
            roots.push((tree.size(), tree.root(), leaves.clone()));
        }
        for pulse in (0..600u64).step_by(7) {
            let (n, root, ref then) = roots[pulse as usize];
            let i = next() % n;
            let at = |j: u32, m: u64| kept.range((j, m, 0)..=(j, m, pulse)).next_back().map(|(_, h)| *h);
            let path = path_from(i, n, at).expect("every node kept");
            assert!(path_nodes(i, n).len() <= 2 * 64);
            let h = Blake3::hash_leaf(&then[i as usize]);
            verify_inclusion::<Blake3, _>(i, n, &h, &path, &root).expect("the path as of that Pulse");
        }
    }

    fn tree_rebuilt(leaves: &[Vec<u8>]) -> StateTree {
        StateTree::from_leaf_hashes(leaves.iter().map(|l| Blake3::hash_leaf(l)))
    }
}
