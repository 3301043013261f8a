//! The writer's copy of a crit-bit map (docs/INDEX.md, "Maps"): the part of the map the
//! writer has walked, in memory, so that finding a list and sealing a changed one touch few
//! records — only the nodes that changed are written, each a new record (path copying), so
//! every sealed version's map stays whole on disk for readers.
//!
//! A subtree nobody has walked yet stays a stub (its child reference), read when a walk passes
//! through it: opening a memory reads nothing of its maps, and the first commit reads only the
//! paths of the keys it touches. Memory grows with the keys walked since the last shed (about
//! 150 bytes each), never with the atoms in their lists; past `MAX_NODES`, a seal lets the
//! whole map go back to a stub of its root.

use rustc_hash::FxHashMap;

use sion_verify::index::critbit::{bit, first_difference, node_digest};
use sion_verify::merkle::Digest;

use super::IndexError;
use super::record::{CritChild, CritRec, Ptr, Record};
use super::store::Store;

/// Nodes a writer's map keeps in memory between seals (about 20 MiB with the key table).
pub const MAX_NODES: usize = 1 << 18;

/// An inner node a walk passed through, and whether it went right.
type Parent = (usize, bool);

#[derive(Debug, Clone)]
enum Node {
    Leaf {
        key: [u8; 32],
        ptr: Ptr,
        digest: Digest,
    },
    Inner {
        crit: u16,
        left: usize,
        right: usize,
        digest: Digest,
        ptr: Ptr,
    },
    /// A sealed subtree not read yet.
    Stub(CritChild),
}

/// A crit-bit map held by the writer.
#[derive(Debug, Clone)]
pub struct MemMap {
    /// Past this many nodes, a seal lets the map go.
    max_nodes: usize,
    nodes: Vec<Node>,
    root: Option<usize>,
    /// The leaves read so far, by key.
    leaves: FxHashMap<[u8; 32], usize>,
    /// Inner nodes whose record is out of date (their digest too, until the seal).
    dirty: bool,
}

impl MemMap {
    /// The map under `root` as the store holds it: nothing is read until a walk needs it.
    pub fn load(root: Option<CritChild>) -> Self {
        Self::with_budget(root, MAX_NODES)
    }

    /// The same, keeping at most `max_nodes` in memory between seals.
    pub fn with_budget(root: Option<CritChild>, max_nodes: usize) -> Self {
        let mut map =
            Self { max_nodes, nodes: Vec::new(), root: None, leaves: FxHashMap::default(), dirty: false };
        if let Some(root) = root {
            map.nodes.push(Node::Stub(root));
            map.root = Some(0);
        }
        map
    }

    /// Nodes in memory.
    pub fn loaded(&self) -> usize {
        self.nodes.len()
    }

    /// Read the stub at `at` (if it is one) into a leaf or an inner node with two stubs.
    fn expand(&mut self, store: &Store, at: usize) -> Result<(), IndexError> {
        let Node::Stub(child) = self.nodes[at] else { return Ok(()) };
        if child.leaf {
            let key = match &*store.read(child.ptr)? {
                Record::List(l) => l.key,
                _ => return Err(IndexError::Damaged(format!("the list at {} is not one", child.ptr))),
            };
            self.nodes[at] = Node::Leaf { key, ptr: child.ptr, digest: child.digest };
            self.leaves.insert(key, at);
            return Ok(());
        }
        let rec = match &*store.read(child.ptr)? {
            Record::Crit(c) => *c,
            _ => return Err(IndexError::Damaged(format!("the map node at {} is not one", child.ptr))),
        };
        self.nodes.push(Node::Stub(rec.left));
        self.nodes.push(Node::Stub(rec.right));
        let (left, right) = (self.nodes.len() - 2, self.nodes.len() - 1);
        self.nodes[at] = Node::Inner { crit: rec.crit, left, right, digest: child.digest, ptr: child.ptr };
        Ok(())
    }

    /// Walk towards `key` from `at`, reading stubs on the way; `stop` ends the walk early at
    /// an inner node. Gives the node the walk ends at.
    fn descend(
        &mut self,
        store: &Store,
        key: &[u8; 32],
        stop: impl Fn(u16) -> bool,
    ) -> Result<Option<(usize, Option<Parent>)>, IndexError> {
        let Some(mut at) = self.root else { return Ok(None) };
        let mut parent = None;
        loop {
            self.expand(store, at)?;
            match &self.nodes[at] {
                Node::Inner { crit, left, right, .. } if !stop(*crit) => {
                    let go_right = bit(key, *crit);
                    parent = Some((at, go_right));
                    at = if go_right { *right } else { *left };
                }
                _ => return Ok(Some((at, parent))),
            }
        }
    }

    /// The record of `key`'s list, if the map holds it.
    pub fn get(&mut self, store: &Store, key: &[u8; 32]) -> Result<Option<Ptr>, IndexError> {
        if let Some(&at) = self.leaves.get(key) {
            return Ok(match &self.nodes[at] {
                Node::Leaf { ptr, .. } => Some(*ptr),
                _ => None,
            });
        }
        match self.descend(store, key, |_| false)? {
            Some((at, _)) => Ok(match &self.nodes[at] {
                Node::Leaf { key: found, ptr, .. } if found == key => Some(*ptr),
                _ => None,
            }),
            None => Ok(None),
        }
    }

    /// Set `key`'s leaf (its list's new record and leaf digest), adding the key if new.
    pub fn set(&mut self, store: &Store, key: [u8; 32], ptr: Ptr, digest: Digest) -> Result<(), IndexError> {
        self.dirty = true;
        if self.get(store, &key)?.is_some()
            && let Some(&at) = self.leaves.get(&key)
        {
            self.nodes[at] = Node::Leaf { key, ptr, digest };
            self.touch_path(&key);
            return Ok(());
        }
        // The key's first difference from the leaf its search ends at decides where it goes:
        // above the first node whose crit bit is past that difference.
        let near = match self.descend(store, &key, |_| false)? {
            None => None,
            Some((at, _)) => match &self.nodes[at] {
                Node::Leaf { key: near, .. } => Some(*near),
                _ => return Err(IndexError::Damaged("a map walk ended at an inner node".into())),
            },
        };
        self.nodes.push(Node::Leaf { key, ptr, digest });
        let leaf = self.nodes.len() - 1;
        self.leaves.insert(key, leaf);
        let Some(near) = near else {
            self.root = Some(leaf);
            return Ok(());
        };
        let Some(d) = first_difference(&key, &near) else { return Ok(()) };
        let Some((at, parent)) = self.descend(store, &key, |crit| crit >= d)? else { return Ok(()) };
        let (l, r) = if bit(&key, d) { (at, leaf) } else { (leaf, at) };
        self.nodes.push(Node::Inner { crit: d, left: l, right: r, digest: [0; 32], ptr: 0 });
        let inner = self.nodes.len() - 1;
        match parent {
            None => self.root = Some(inner),
            Some((p, go_right)) => {
                if let Node::Inner { left, right, .. } = &mut self.nodes[p] {
                    if go_right { *right = inner } else { *left = inner }
                }
            }
        }
        self.touch_path(&key);
        Ok(())
    }

    /// Mark the inner nodes on the path to `key` out of date.
    fn touch_path(&mut self, key: &[u8; 32]) {
        let Some(mut at) = self.root else { return };
        loop {
            let next = match &mut self.nodes[at] {
                Node::Inner { crit, left, right, ptr, .. } => {
                    *ptr = 0;
                    if bit(key, *crit) { *right } else { *left }
                }
                Node::Leaf { .. } | Node::Stub(_) => return,
            };
            at = next;
        }
    }

    /// Write a record for every out-of-date inner node (children first) and return the
    /// map's root as a root record names it.
    pub fn seal(&mut self, store: &Store) -> Option<CritChild> {
        let root = self.root?;
        if self.dirty {
            self.write(store, root);
            self.dirty = false;
        }
        let sealed = self.child(root);
        // Every node is clean now: past the budget, the whole map goes back to one stub.
        if self.nodes.len() > self.max_nodes {
            *self = Self::with_budget(Some(sealed), self.max_nodes);
        }
        Some(sealed)
    }

    fn child(&self, at: usize) -> CritChild {
        match &self.nodes[at] {
            Node::Leaf { ptr, digest, .. } => CritChild { leaf: true, ptr: *ptr, digest: *digest },
            Node::Inner { ptr, digest, .. } => CritChild { leaf: false, ptr: *ptr, digest: *digest },
            Node::Stub(child) => *child,
        }
    }

    fn write(&mut self, store: &Store, at: usize) {
        let (crit, left, right) = match &self.nodes[at] {
            Node::Inner { ptr: 0, crit, left, right, .. } => (*crit, *left, *right),
            _ => return,
        };
        self.write(store, left);
        self.write(store, right);
        let (l, r) = (self.child(left), self.child(right));
        let digest = node_digest(crit, &l.digest, &r.digest);
        let ptr = store.append(Record::Crit(CritRec { crit, left: l, right: r }));
        self.nodes[at] = Node::Inner { crit, left, right, digest, ptr };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::record::ListRec;
    use sion_verify::index::critbit::empty_digest;
    use std::collections::HashMap;

    /// The map's digest as docs/INDEX.md defines it, from its leaves alone.
    fn reference(leaves: &mut [([u8; 32], Digest)]) -> Digest {
        fn node(leaves: &[([u8; 32], Digest)]) -> Digest {
            if leaves.len() == 1 {
                return leaves[0].1;
            }
            let (first, last) = (&leaves[0].0, &leaves[leaves.len() - 1].0);
            let crit = first_difference(first, last).expect("distinct keys");
            let split = leaves.partition_point(|(k, _)| !bit(k, crit));
            node_digest(crit, &node(&leaves[..split]), &node(&leaves[split..]))
        }
        leaves.sort_by_key(|l| l.0);
        if leaves.is_empty() { empty_digest() } else { node(leaves) }
    }

    fn list(store: &Store, key: [u8; 32], round: u64) -> Ptr {
        store.append(Record::List(ListRec {
            key,
            label: format!("round {round}"),
            count: 0,
            first_position: 0,
            last_position: 0,
            peaks: Vec::new(),
            runs: Vec::new(),
            tail: Vec::new(),
        }))
    }

    #[test]
    fn a_map_read_lazily_and_let_go_keeps_the_root_of_its_leaves() {
        let store = Store::in_memory(1 << 20);
        // A budget of 12 nodes lets the map go at almost every seal; usize::MAX never.
        for budget in [12, usize::MAX] {
            let mut map = MemMap::with_budget(None, budget);
            let mut leaves: HashMap<[u8; 32], Digest> = HashMap::new();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            for round in 0..40u64 {
                for _ in 0..7 {
                    rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    // Some keys again (an update), most new; keys sharing long prefixes too.
                    let k = (rng >> 33) % 64;
                    let mut key = *blake3::hash(&k.to_le_bytes()).as_bytes();
                    if k.is_multiple_of(5) {
                        key[31] ^= 1;
                    }
                    let digest = *blake3::hash(&[&key[..], &round.to_le_bytes()].concat()).as_bytes();
                    let ptr = list(&store, key, round);
                    map.set(&store, key, ptr, digest).expect("set");
                    leaves.insert(key, digest);
                }
                let sealed = map.seal(&store).expect("a map with leaves");
                let mut all: Vec<_> = leaves.iter().map(|(k, d)| (*k, *d)).collect();
                assert_eq!(sealed.digest, reference(&mut all), "budget {budget}, round {round}");
                // A map read afresh from what was sealed finds every key, and no other.
                let mut again = MemMap::load(Some(sealed));
                for key in leaves.keys() {
                    let ptr = again.get(&store, key).expect("readable").expect("present");
                    match &*store.read(ptr).expect("the list") {
                        Record::List(l) => assert_eq!(&l.key, key),
                        other => panic!("not a list: {other:?}"),
                    }
                }
                assert_eq!(again.get(&store, &[0xab; 32]).expect("readable"), None);
            }
            if budget == 12 {
                assert!(map.loaded() <= 1 + 2 * 7 * 2, "let go after the seal: {}", map.loaded());
            }
        }
    }
}
