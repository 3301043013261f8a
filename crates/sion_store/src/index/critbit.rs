//! Building Merkle crit-bit maps over 32-byte keys (docs/INDEX.md, "Maps"): a tree built
//! once, and the incremental map the index keeps. The hashing rules and path checking are the
//! verifier's (`sion_verify::index::critbit`).

pub use sion_verify::index::critbit::{
    PathStep, TAG_EMPTY, TAG_NODE, bit, empty_digest, first_difference, node_digest, root_from_path,
};
use sion_verify::merkle::Digest;

#[derive(Debug, Clone)]
enum Node {
    Leaf(usize),
    Interior { crit: u16, left: usize, right: usize },
}

/// A built crit-bit tree over `(key, leaf digest)` pairs sorted by key.
#[derive(Debug, Clone, Default)]
pub struct CritTree {
    keys: Vec<[u8; 32]>,
    nodes: Vec<(Node, Digest)>,
}

impl CritTree {
    /// `leaves` sorted by key, keys distinct.
    pub fn build(leaves: Vec<([u8; 32], Digest)>) -> Self {
        let mut tree = Self {
            keys: leaves.iter().map(|(k, _)| *k).collect(),
            nodes: Vec::with_capacity(leaves.len() * 2),
        };
        if !leaves.is_empty() {
            tree.add(&leaves, 0);
        }
        tree
    }

    fn add(&mut self, leaves: &[([u8; 32], Digest)], offset: usize) -> usize {
        let at = self.nodes.len();
        let (first, last) = (&leaves[0], &leaves[leaves.len() - 1]);
        let Some(crit) = first_difference(&first.0, &last.0) else {
            self.nodes.push((Node::Leaf(offset), first.1));
            return at;
        };
        self.nodes.push((Node::Leaf(offset), [0; 32]));
        let split = leaves.partition_point(|(k, _)| !bit(k, crit));
        let left = self.add(&leaves[..split], offset);
        let right = self.add(&leaves[split..], offset + split);
        let digest = node_digest(crit, &self.nodes[left].1, &self.nodes[right].1);
        self.nodes[at] = (Node::Interior { crit, left, right }, digest);
        at
    }

    pub fn root(&self) -> Digest {
        self.nodes.first().map(|n| n.1).unwrap_or_else(empty_digest)
    }

    /// The path a search for `key` takes and the index (in key order) of the leaf it ends at;
    /// `None` for an empty map. The key is present exactly when that leaf's key equals it.
    pub fn search(&self, key: &[u8; 32]) -> Option<(Vec<PathStep>, usize)> {
        let mut path = Vec::new();
        let mut at = 0;
        loop {
            match &self.nodes.get(at)?.0 {
                Node::Leaf(i) => return Some((path, *i)),
                Node::Interior { crit, left, right } => {
                    let (next, other) = if bit(key, *crit) { (*right, *left) } else { (*left, *right) };
                    path.push(PathStep { crit: *crit, sibling: self.nodes[other].1 });
                    at = next;
                }
            }
        }
    }

    pub fn key(&self, index: usize) -> Option<&[u8; 32]> {
        self.keys.get(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u32) -> [u8; 32] {
        *blake3::hash(&i.to_le_bytes()).as_bytes()
    }

    #[test]
    fn paths_prove_presence_and_absence() {
        let mut leaves: Vec<_> = (0..100u32).map(|i| (k(i), *blake3::hash(&[i as u8]).as_bytes())).collect();
        leaves.sort();
        let tree = CritTree::build(leaves.clone());
        for (key, digest) in &leaves {
            let (path, i) = tree.search(key).expect("non-empty");
            assert_eq!(tree.key(i), Some(key));
            assert_eq!(root_from_path(key, key, *digest, &path), Some(tree.root()));
        }
        for absent in 100..120u32 {
            let key = k(absent);
            let (path, i) = tree.search(&key).expect("non-empty");
            let found = tree.key(i).expect("leaf");
            assert_ne!(found, &key);
            // The path is the found leaf's own path, followed by the absent key's bits.
            let leaf = leaves[i].1;
            assert_eq!(root_from_path(&key, found, leaf, &path), Some(tree.root()));
        }
        assert_eq!(CritTree::build(vec![]).root(), empty_digest());
        let twice = [PathStep { crit: 5, sibling: [0; 32] }, PathStep { crit: 5, sibling: [0; 32] }];
        assert!(root_from_path(&k(0), &k(0), [0; 32], &twice).is_none());
    }
}

/// Levels of the map whose two halves are rehashed on two cores.
const SPLIT_DEPTH: u32 = 4;

#[derive(Debug, Clone)]
enum MapNode {
    Leaf { key: [u8; 32], digest: Digest },
    Interior { crit: u16, children: [usize; 2], digest: Option<Digest> },
}

/// A crit-bit tree kept up to date key by key: inserting a key or changing a leaf marks its
/// path, and `seal` rehashes only marked nodes. Same shape and digests as [`CritTree::build`].
#[derive(Debug, Clone, Default)]
pub struct CritMap {
    nodes: Vec<MapNode>,
    root: Option<usize>,
    leaves: rustc_hash::FxHashMap<[u8; 32], usize>,
}

impl CritMap {
    pub fn len(&self) -> usize {
        self.leaves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// Set many leaves at once: one by one when they are few, by rebuilding the whole tree
    /// (same shape, same digests) when they are many.
    pub fn set_all(&mut self, updates: Vec<([u8; 32], Digest)>) {
        if updates.len() * 8 < self.leaves.len() {
            for (k, d) in updates {
                self.set(k, d);
            }
            return;
        }
        // Every leaf, the updates after the old ones; a stable sort keeps that order within a
        // key, so the last of each key is the newest.
        let mut all: Vec<([u8; 32], Digest)> = self
            .nodes
            .iter()
            .filter_map(|n| match n {
                MapNode::Leaf { key, digest } => Some((*key, *digest)),
                MapNode::Interior { .. } => None,
            })
            .collect();
        all.extend(updates);
        all.sort_by_key(|(key, _)| *key);
        let mut sorted: Vec<([u8; 32], Digest)> = Vec::with_capacity(all.len());
        for (key, digest) in all {
            match sorted.last_mut() {
                Some(last) if last.0 == key => last.1 = digest,
                _ => sorted.push((key, digest)),
            }
        }
        *self = Self::default();
        self.leaves.reserve(sorted.len());
        self.nodes.reserve(sorted.len() * 2);
        if !sorted.is_empty() {
            let root = self.build(&sorted);
            self.root = Some(root);
        }
    }

    fn build(&mut self, leaves: &[([u8; 32], Digest)]) -> usize {
        let (first, last) = (&leaves[0], &leaves[leaves.len() - 1]);
        let Some(crit) = first_difference(&first.0, &last.0) else {
            let at = self.nodes.len();
            self.nodes.push(MapNode::Leaf { key: first.0, digest: first.1 });
            self.leaves.insert(first.0, at);
            return at;
        };
        let split = leaves.partition_point(|(k, _)| !bit(k, crit));
        let left = self.build(&leaves[..split]);
        let right = self.build(&leaves[split..]);
        let digest = node_digest(crit, &self.sealed_digest(left), &self.sealed_digest(right));
        self.nodes.push(MapNode::Interior { crit, children: [left, right], digest: Some(digest) });
        self.nodes.len() - 1
    }

    /// Set the leaf digest of `key`, inserting the key if it is new.
    pub fn set(&mut self, key: [u8; 32], digest: Digest) {
        if let Some(&leaf) = self.leaves.get(&key) {
            self.nodes[leaf] = MapNode::Leaf { key, digest };
            self.mark(&key, usize::MAX);
            return;
        }
        let leaf = self.nodes.len();
        self.nodes.push(MapNode::Leaf { key, digest });
        self.leaves.insert(key, leaf);
        let Some(root) = self.root else {
            self.root = Some(leaf);
            return;
        };
        // The leaf a search ends at shares the longest prefix with the new key.
        let mut at = root;
        while let MapNode::Interior { crit, children, .. } = &self.nodes[at] {
            at = children[usize::from(bit(&key, *crit))];
        }
        let MapNode::Leaf { key: near, .. } = &self.nodes[at] else { unreachable!() };
        let Some(crit) = first_difference(&key, near) else { return };
        // Insert a node at the first place on the path whose crit bit is past the new one.
        let mut parent: Option<(usize, usize)> = None;
        let mut at = root;
        while let MapNode::Interior { crit: c, children, .. } = &self.nodes[at] {
            if *c > crit {
                break;
            }
            let side = usize::from(bit(&key, *c));
            parent = Some((at, side));
            at = children[side];
        }
        let mut children = [at, at];
        children[usize::from(bit(&key, crit))] = leaf;
        let node = self.nodes.len();
        self.nodes.push(MapNode::Interior { crit, children, digest: None });
        match parent {
            None => self.root = Some(node),
            Some((p, side)) => {
                if let MapNode::Interior { children, .. } = &mut self.nodes[p] {
                    children[side] = node;
                }
            }
        }
        self.mark(&key, node);
    }

    /// Forget the digests on the path to `key` (down to `stop`, exclusive, if given).
    fn mark(&mut self, key: &[u8; 32], stop: usize) {
        let mut at = self.root;
        while let Some(i) = at {
            if i == stop {
                return;
            }
            match &mut self.nodes[i] {
                MapNode::Interior { crit, children, digest } => {
                    *digest = None;
                    at = Some(children[usize::from(bit(key, *crit))]);
                }
                MapNode::Leaf { .. } => return,
            }
        }
    }

    /// The digest of node `i`, recomputing the forgotten ones below it (and noting them in
    /// `fresh`). The top levels split their two halves between cores: a commit that grows a
    /// few hundred lists forgets a few thousand nodes.
    fn fresh_digest(&self, i: usize, depth: u32, fresh: &mut Vec<(usize, Digest)>) -> Digest {
        match &self.nodes[i] {
            MapNode::Leaf { digest, .. } => *digest,
            MapNode::Interior { digest: Some(d), .. } => *d,
            MapNode::Interior { crit, children: [left, right], digest: None } => {
                let (left, right) = if depth < SPLIT_DEPTH {
                    let mut fresh_right = Vec::new();
                    let halves = rayon::join(
                        || self.fresh_digest(*left, depth + 1, fresh),
                        || self.fresh_digest(*right, depth + 1, &mut fresh_right),
                    );
                    fresh.append(&mut fresh_right);
                    halves
                } else {
                    (self.fresh_digest(*left, depth + 1, fresh), self.fresh_digest(*right, depth + 1, fresh))
                };
                let d = node_digest(*crit, &left, &right);
                fresh.push((i, d));
                d
            }
        }
    }

    /// Rehash what changed; the root digest.
    pub fn seal(&mut self) -> Digest {
        let Some(root) = self.root else { return empty_digest() };
        let mut fresh = Vec::new();
        let digest = self.fresh_digest(root, 0, &mut fresh);
        for (i, d) in fresh {
            if let MapNode::Interior { digest, .. } = &mut self.nodes[i] {
                *digest = Some(d);
            }
        }
        digest
    }

    /// After `seal`: the path a search for `key` takes, and the key and digest of the leaf it
    /// ends at; `None` for an empty map.
    pub fn search(&self, key: &[u8; 32]) -> Option<(Vec<PathStep>, [u8; 32], Digest)> {
        let mut path = Vec::new();
        let mut at = self.root?;
        loop {
            match &self.nodes[at] {
                MapNode::Leaf { key: k, digest } => return Some((path, *k, *digest)),
                MapNode::Interior { crit, children, .. } => {
                    let side = usize::from(bit(key, *crit));
                    path.push(PathStep { crit: *crit, sibling: self.sealed_digest(children[1 - side]) });
                    at = children[side];
                }
            }
        }
    }

    fn sealed_digest(&self, i: usize) -> Digest {
        match &self.nodes[i] {
            MapNode::Leaf { digest, .. } => *digest,
            MapNode::Interior { digest, .. } => digest.unwrap_or([0; 32]),
        }
    }
}

#[cfg(test)]
mod map_tests {
    use super::*;

    #[test]
    fn incremental_map_matches_a_fresh_build() {
        let mut map = CritMap::default();
        let mut leaves = std::collections::BTreeMap::new();
        for round in 0..400u32 {
            let key = *blake3::hash(&(round % 150).to_le_bytes()).as_bytes();
            let digest = *blake3::hash(&round.to_le_bytes()).as_bytes();
            map.set(key, digest);
            leaves.insert(key, digest);
            if round == 200 {
                // A bulk update takes the rebuilding path; the result must not differ.
                let all: Vec<_> = leaves.iter().map(|(k, d)| (*k, *d)).collect();
                map.set_all(all);
            }
            if round % 37 == 0 || round == 399 {
                let fresh = CritTree::build(leaves.iter().map(|(k, d)| (*k, *d)).collect());
                assert_eq!(map.seal(), fresh.root(), "round {round}");
                for k in leaves.keys().take(20) {
                    let (path, found, digest) = map.search(k).expect("non-empty");
                    assert_eq!(&found, k);
                    assert_eq!(root_from_path(k, k, digest, &path), Some(fresh.root()));
                }
            }
        }
    }
}
