//! The writer's copy of a crit-bit map (docs/INDEX.md, "Maps"): the part of the map the
//! writer has walked, in memory, so that finding a list and sealing a changed one touch few
//! records — only the nodes that changed are written (path copying), packed into pages of up
//! to `MAX_PAGE` nodes, so every sealed version's map stays whole on disk for readers.
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
use super::record::{CritChild, CritPage, CritRec, MAX_PAGE, Ptr, Record};
use super::store::Store;

/// Nodes a writer's map keeps in memory between seals (about 20 MiB with the key table).
pub const MAX_NODES: usize = 1 << 18;

const NONE: u32 = u32::MAX;

/// An inner node a walk passed through, and whether it went right.
type Parent = (usize, bool);

#[derive(Debug, Clone)]
enum Node {
    Leaf {
        key: [u8; 32],
        ptr: Ptr,
        digest: Digest,
    },
    /// `ptr` 0: changed since the last seal (not written yet); else node `node` of the page
    /// at `ptr`.
    Inner {
        crit: u16,
        left: usize,
        right: usize,
        digest: Digest,
        ptr: Ptr,
        node: u8,
    },
    /// A sealed subtree not read yet.
    Stub(CritChild),
}

/// A crit-bit map held by the writer.
#[derive(Debug, Clone)]
pub struct MemMap {
    /// Past this many nodes, a seal lets the map go.
    max_nodes: usize,
    /// Inner nodes in a page the seal writes, at most (`MAX_PAGE`; smaller in tests).
    page_nodes: usize,
    nodes: Vec<Node>,
    /// Each node's parent (`NONE` for the root): marking a changed path walks up from its
    /// leaf and stops at the first node already marked.
    parents: Vec<u32>,
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
        let mut map = Self {
            max_nodes,
            page_nodes: MAX_PAGE,
            nodes: Vec::new(),
            parents: Vec::new(),
            root: None,
            leaves: FxHashMap::default(),
            dirty: false,
        };
        if let Some(root) = root {
            map.nodes.push(Node::Stub(root));
            map.parents.push(NONE);
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
                Record::Places(p) => p.key,
                _ => return Err(IndexError::Damaged(format!("the map leaf at {} is not one", child.ptr))),
            };
            self.nodes[at] = Node::Leaf { key, ptr: child.ptr, digest: child.digest };
            self.leaves.insert(key, at);
            return Ok(());
        }
        let rec = crit_node(store, &child)?;
        self.nodes.push(Node::Stub(rec.left));
        self.nodes.push(Node::Stub(rec.right));
        self.parents.extend([at as u32, at as u32]);
        let (left, right) = (self.nodes.len() - 2, self.nodes.len() - 1);
        self.nodes[at] = Node::Inner {
            crit: rec.crit,
            left,
            right,
            digest: child.digest,
            ptr: child.ptr,
            node: child.node,
        };
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
        let mut above: Option<u16> = None;
        loop {
            self.expand(store, at)?;
            match &self.nodes[at] {
                Node::Inner { crit, .. } if above.is_some_and(|a| *crit <= a) => {
                    return Err(IndexError::Damaged("a map node is out of order".into()));
                }
                Node::Inner { crit, left, right, .. } if !stop(*crit) => {
                    above = Some(*crit);
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
            self.mark_up(at);
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
        self.parents.push(NONE);
        let leaf = self.nodes.len() - 1;
        self.leaves.insert(key, leaf);
        let Some(near) = near else {
            self.root = Some(leaf);
            return Ok(());
        };
        let Some(d) = first_difference(&key, &near) else { return Ok(()) };
        let Some((at, parent)) = self.descend(store, &key, |crit| crit >= d)? else { return Ok(()) };
        let (l, r) = if bit(&key, d) { (at, leaf) } else { (leaf, at) };
        self.nodes.push(Node::Inner { crit: d, left: l, right: r, digest: [0; 32], ptr: 0, node: 0 });
        let inner = self.nodes.len() - 1;
        self.parents.push(parent.map_or(NONE, |(p, _)| p as u32));
        self.parents[at] = inner as u32;
        self.parents[leaf] = inner as u32;
        match parent {
            None => self.root = Some(inner),
            Some((p, go_right)) => {
                if let Node::Inner { left, right, .. } = &mut self.nodes[p] {
                    if go_right { *right = inner } else { *left = inner }
                }
            }
        }
        self.mark_up(inner);
        Ok(())
    }

    /// Mark the inner nodes above `from` out of date, up to the first one that already is
    /// (every node above a marked one is marked: marks only ever go up to the root).
    fn mark_up(&mut self, from: usize) {
        let mut at = self.parents[from];
        while at != NONE {
            match &mut self.nodes[at as usize] {
                Node::Inner { ptr: 0, .. } => return,
                Node::Inner { ptr, .. } => *ptr = 0,
                Node::Leaf { .. } | Node::Stub(_) => return,
            }
            at = self.parents[at as usize];
        }
    }

    /// Write every out-of-date inner node, in pages (children first), and return the map's
    /// root as a root record names it (the top of its page, node 0).
    pub fn seal(&mut self, store: &Store) -> Option<CritChild> {
        let root = self.root?;
        if self.dirty {
            if self.pack(store, root) > 0 {
                self.write_page(store, root);
            }
            self.dirty = false;
        }
        let sealed = self.child(root);
        // Every node is clean now: past the budget, the whole map goes back to one stub.
        if self.nodes.len() > self.max_nodes {
            let page_nodes = self.page_nodes;
            *self = Self::with_budget(Some(sealed), self.max_nodes);
            self.page_nodes = page_nodes;
        }
        Some(sealed)
    }

    fn child(&self, at: usize) -> CritChild {
        match &self.nodes[at] {
            Node::Leaf { ptr, digest, .. } => CritChild { leaf: true, ptr: *ptr, node: 0, digest: *digest },
            Node::Inner { ptr, node, digest, .. } => {
                CritChild { leaf: false, ptr: *ptr, node: *node, digest: *digest }
            }
            Node::Stub(child) => *child,
        }
    }

    /// The out-of-date inner node at `at`, if it is one: its crit bit and children.
    fn unwritten(&self, at: usize) -> Option<(u16, usize, usize)> {
        match &self.nodes[at] {
            Node::Inner { ptr: 0, crit, left, right, .. } => Some((*crit, *left, *right)),
            _ => None,
        }
    }

    /// Compute the digests of the out-of-date nodes under `at`, children first, writing a
    /// page of them whenever the nodes still unwritten below a node would not fit in one with
    /// it (the larger side first). Gives how many stay unwritten under `at`, itself included:
    /// they go in the page of a node above.
    fn pack(&mut self, store: &Store, at: usize) -> usize {
        let Some((crit, left, right)) = self.unwritten(at) else { return 0 };
        let mut below = [(self.pack(store, left), left), (self.pack(store, right), right)];
        below.sort_unstable_by_key(|b| std::cmp::Reverse(b.0));
        for i in 0..2 {
            if 1 + below[0].0 + below[1].0 > self.page_nodes && below[i].0 > 0 {
                self.write_page(store, below[i].1);
                below[i].0 = 0;
            }
        }
        let digest = node_digest(crit, &self.child(left).digest, &self.child(right).digest);
        if let Node::Inner { digest: d, .. } = &mut self.nodes[at] {
            *d = digest;
        }
        1 + below[0].0 + below[1].0
    }

    /// Write the unwritten nodes under `top` (digests computed) as one page, in pre-order.
    fn write_page(&mut self, store: &Store, top: usize) {
        let mut order = Vec::with_capacity(self.page_nodes);
        let mut stack = vec![top];
        while let Some(at) = stack.pop() {
            if let Some((_, left, right)) = self.unwritten(at) {
                order.push(at);
                stack.push(right);
                stack.push(left);
            }
        }
        let in_page = |at: usize| order.iter().position(|&o| o == at);
        let child = |at: usize| match in_page(at) {
            Some(i) => CritChild { leaf: false, ptr: 0, node: i as u8, digest: self.child(at).digest },
            None => self.child(at),
        };
        let nodes = order
            .iter()
            .filter_map(|&at| self.unwritten(at))
            .map(|(crit, left, right)| CritRec { crit, left: child(left), right: child(right) })
            .collect();
        debug_assert!((1..=self.page_nodes).contains(&order.len()), "a page of {} nodes", order.len());
        let ptr = store.append(Record::CritPage(CritPage { nodes }));
        for (i, &at) in order.iter().enumerate() {
            if let Node::Inner { ptr: p, node, .. } = &mut self.nodes[at] {
                *p = ptr;
                *node = i as u8;
            }
        }
    }
}

/// The inner node `child` names, its children as references a walk follows (a child in the
/// same page points to the page).
pub fn crit_node(store: &Store, child: &CritChild) -> Result<CritRec, IndexError> {
    let damaged = || IndexError::Damaged(format!("the map node {} at {} is not one", child.node, child.ptr));
    let mut rec = match &*store.read(child.ptr)? {
        Record::CritPage(page) => *page.nodes.get(usize::from(child.node)).ok_or_else(damaged)?,
        _ => return Err(damaged()),
    };
    for c in [&mut rec.left, &mut rec.right] {
        if !c.leaf && c.ptr == 0 {
            c.ptr = child.ptr;
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ListRec;
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
            full: Vec::new(),
            runs: Vec::new(),
            tail: Vec::new(),
        }))
    }

    #[test]
    fn a_map_read_lazily_and_let_go_keeps_the_root_of_its_leaves() {
        let store = Store::in_memory(1 << 20);
        // A budget of 12 nodes lets the map go at almost every seal; usize::MAX never. Pages
        // of one node, of three (most seals split the changed nodes over several) and whole.
        for (budget, page_nodes, keys, per_round) in [
            (12, MAX_PAGE, 64, 7),
            (usize::MAX, MAX_PAGE, 64, 7),
            (usize::MAX, 3, 400, 30),
            (12, 1, 400, 30),
            (usize::MAX, MAX_PAGE, 4000, 300),
        ] {
            let mut map = MemMap::with_budget(None, budget);
            map.page_nodes = page_nodes;
            let mut leaves: HashMap<[u8; 32], Digest> = HashMap::new();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            for round in 0..40u64 {
                for _ in 0..per_round {
                    rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    // Some keys again (an update), most new; keys sharing long prefixes too.
                    let k = (rng >> 33) % keys;
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
                again.page_nodes = page_nodes;
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
                assert!(map.loaded() <= 1 + 2 * per_round * 2, "let go after the seal: {}", map.loaded());
            }
        }
    }
}
