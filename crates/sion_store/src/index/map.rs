//! The writer's copy of a crit-bit map (docs/INDEX.md, "Maps"): every key's leaf and the
//! tree's interior, in memory, so that finding a list and sealing a changed one touch no
//! records — only the nodes that changed are written, each a new record (path copying), so
//! every sealed version's map stays whole on disk for readers.
//!
//! Memory grows with the number of distinct subjects or link targets (about 150 bytes each),
//! not with the number of atoms in their lists.

use std::collections::HashMap;

use sion_verify::index::critbit::{bit, first_difference, node_digest};
use sion_verify::merkle::Digest;

use super::IndexError;
use super::record::{CritChild, CritRec, Ptr, Record};
use super::store::Store;

#[derive(Debug, Clone)]
enum Node {
    Leaf { key: [u8; 32], ptr: Ptr, digest: Digest },
    Inner { crit: u16, left: usize, right: usize, digest: Digest, ptr: Ptr },
}

/// A crit-bit map held by the writer.
#[derive(Debug, Clone, Default)]
pub struct MemMap {
    nodes: Vec<Node>,
    root: Option<usize>,
    leaves: HashMap<[u8; 32], usize>,
    /// Inner nodes whose record is out of date (their digest too, until the seal).
    dirty: bool,
}

impl MemMap {
    /// The map under `root` as the store holds it.
    pub fn load(store: &Store, root: Option<CritChild>) -> Result<Self, IndexError> {
        let mut map = Self::default();
        if let Some(root) = root {
            let at = map.load_child(store, root)?;
            map.root = Some(at);
        }
        Ok(map)
    }

    fn load_child(&mut self, store: &Store, child: CritChild) -> Result<usize, IndexError> {
        if child.leaf {
            let key = match &*store.read(child.ptr)? {
                Record::List(l) => l.key,
                _ => return Err(IndexError::Damaged(format!("the list at {} is not one", child.ptr))),
            };
            self.nodes.push(Node::Leaf { key, ptr: child.ptr, digest: child.digest });
            self.leaves.insert(key, self.nodes.len() - 1);
            return Ok(self.nodes.len() - 1);
        }
        let rec = match &*store.read(child.ptr)? {
            Record::Crit(c) => *c,
            _ => return Err(IndexError::Damaged(format!("the map node at {} is not one", child.ptr))),
        };
        let left = self.load_child(store, rec.left)?;
        let right = self.load_child(store, rec.right)?;
        self.nodes.push(Node::Inner { crit: rec.crit, left, right, digest: child.digest, ptr: child.ptr });
        Ok(self.nodes.len() - 1)
    }

    /// The record of `key`'s list, if the map holds it.
    pub fn get(&self, key: &[u8; 32]) -> Option<Ptr> {
        let at = *self.leaves.get(key)?;
        match &self.nodes[at] {
            Node::Leaf { ptr, .. } => Some(*ptr),
            Node::Inner { .. } => None,
        }
    }

    /// Set `key`'s leaf (its list's new record and leaf digest), adding the key if new.
    pub fn set(&mut self, key: [u8; 32], ptr: Ptr, digest: Digest) {
        self.dirty = true;
        if let Some(&at) = self.leaves.get(&key) {
            self.nodes[at] = Node::Leaf { key, ptr, digest };
            self.touch_path(&key);
            return;
        }
        self.nodes.push(Node::Leaf { key, ptr, digest });
        let leaf = self.nodes.len() - 1;
        self.leaves.insert(key, leaf);
        let Some(root) = self.root else {
            self.root = Some(leaf);
            return;
        };
        // The key's first difference from the leaf its search ends at decides where it goes:
        // above the first node whose crit bit is past that difference.
        let mut at = root;
        while let Node::Inner { crit, left, right, .. } = &self.nodes[at] {
            at = if bit(&key, *crit) { *right } else { *left };
        }
        let Node::Leaf { key: near, .. } = &self.nodes[at] else { return };
        let Some(d) = first_difference(&key, near) else { return };
        let mut parent: Option<(usize, bool)> = None;
        let mut at = root;
        loop {
            match &self.nodes[at] {
                Node::Inner { crit, left, right, .. } if *crit < d => {
                    let go_right = bit(&key, *crit);
                    parent = Some((at, go_right));
                    at = if go_right { *right } else { *left };
                }
                _ => break,
            }
        }
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
                Node::Leaf { .. } => return,
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
        Some(self.child(root))
    }

    fn child(&self, at: usize) -> CritChild {
        match &self.nodes[at] {
            Node::Leaf { ptr, digest, .. } => CritChild { leaf: true, ptr: *ptr, digest: *digest },
            Node::Inner { ptr, digest, .. } => CritChild { leaf: false, ptr: *ptr, digest: *digest },
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
