//! A GGM tree over an epoch seed, held as a cover: the nodes whose subtrees are exactly the
//! leaves not forgotten (docs/SEAL.md, "Per-leaf keys").

use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::SealError;

/// Leaves are 32-bit: depth 32.
pub const DEPTH: u8 = 32;
const DOMAIN: &[u8] = b"sion-seal-ggm-v1";
const MAGIC: &[u8; 8] = b"SIONCOV1";

/// A node of the tree: the leaves whose top `depth` bits are `prefix`, and its seed.
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
pub struct Node {
    pub depth: u8,
    pub prefix: u32,
    pub seed: [u8; 32],
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a seed in a log line.
        write!(f, "Node({}:{:#x})", self.depth, self.prefix)
    }
}

fn child(seed: &[u8; 32], bit: u8) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(seed);
    h.update(DOMAIN);
    h.update(&[bit]);
    *h.finalize().as_bytes()
}

impl Node {
    fn covers(&self, leaf: u32) -> bool {
        self.depth == 0 || (u64::from(leaf) >> (DEPTH - self.depth)) == u64::from(self.prefix)
    }

    /// Its two children.
    fn split(&self) -> (Node, Node) {
        let d = self.depth + 1;
        let p = self.prefix << 1;
        (
            Node { depth: d, prefix: p, seed: child(&self.seed, 0) },
            Node { depth: d, prefix: p | 1, seed: child(&self.seed, 1) },
        )
    }

    /// The first and one-past-last leaf under it.
    fn range(&self) -> (u64, u64) {
        let span = 1u64 << (DEPTH - self.depth);
        let first = if self.depth == 0 { 0 } else { u64::from(self.prefix) << (DEPTH - self.depth) };
        (first, first + span)
    }
}

/// One epoch's key material: the nodes covering every leaf not forgotten, disjoint, in leaf
/// order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Cover {
    pub epoch: u32,
    nodes: Vec<Node>,
}

impl Cover {
    /// The whole tree of an epoch: its seed as the root.
    pub fn new(epoch: u32, seed: [u8; 32]) -> Self {
        Self { epoch, nodes: vec![Node { depth: 0, prefix: 0, seed }] }
    }

    /// Whether no leaf of the epoch derives from it.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether any leaf of `from..to` (end exclusive) still derives from this cover.
    pub fn holds_any(&self, from: u64, to: u64) -> bool {
        self.nodes.iter().any(|n| {
            let (a, b) = n.range();
            a < to && from < b
        })
    }

    /// Keep only the leaves `other` also covers (both of one epoch, e.g. a cover received again
    /// and the one already held, which may have honoured forgets since): never more than either.
    pub fn restrict_to(&mut self, other: &Cover) {
        let mut next = 0u64;
        for n in &other.nodes {
            let (a, b) = n.range();
            self.forget(next, a);
            next = b;
        }
        self.forget(next, 1 << DEPTH);
    }

    /// The nodes held.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Leaf `leaf`'s key, if a held node covers it.
    pub fn leaf_key(&self, leaf: u32) -> Result<[u8; 32], SealError> {
        // Nodes are disjoint and in leaf order: the last starting at or before `leaf`.
        let i = self.nodes.partition_point(|n| n.range().0 <= u64::from(leaf));
        let node = i
            .checked_sub(1)
            .map(|i| &self.nodes[i])
            .filter(|n| n.covers(leaf))
            .ok_or(SealError::Forgotten { epoch: self.epoch, leaf })?;
        let mut seed = node.seed;
        for d in node.depth..DEPTH {
            let bit = ((leaf >> (DEPTH - 1 - d)) & 1) as u8;
            let next = child(&seed, bit);
            seed.zeroize();
            seed = next;
        }
        Ok(seed)
    }

    /// Forget the leaves in `from..to` (end exclusive, up to 2^32): the nodes covering them are
    /// replaced by the subtrees around the range, so nothing held derives a key in it.
    pub fn forget(&mut self, from: u64, to: u64) {
        let to = to.min(1 << DEPTH);
        if from >= to {
            return;
        }
        let mut out = Vec::with_capacity(self.nodes.len() + 2 * DEPTH as usize);
        let mut work: Vec<Node> = std::mem::take(&mut self.nodes);
        work.reverse();
        // Depth-first, in leaf order: a node wholly outside stays, wholly inside goes (its seed
        // zeroised on drop), partly inside is split.
        while let Some(n) = work.pop() {
            let (a, b) = n.range();
            if b <= from || a >= to {
                out.push(n);
            } else if from <= a && b <= to {
                drop(n);
            } else {
                let (l, r) = n.split();
                drop(n);
                work.push(r);
                work.push(l);
            }
        }
        self.nodes = out;
    }

    /// Forget one leaf.
    pub fn forget_leaf(&mut self, leaf: u32) {
        self.forget(u64::from(leaf), u64::from(leaf) + 1);
    }

    /// The key store's bytes for this epoch (docs/SEAL.md, "Key covers"): "SIONCOV1", u32
    /// epoch, u32 n, n × (u8 depth, u32 prefix, 32 seed), disjoint and in leaf order.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.nodes.len() * 37);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&(self.nodes.len() as u32).to_le_bytes());
        for n in &self.nodes {
            out.push(n.depth);
            out.extend_from_slice(&n.prefix.to_le_bytes());
            out.extend_from_slice(&n.seed);
        }
        out
    }

    /// Read [`Cover::encode`]'s bytes: nodes must be valid (prefix below 2^depth), disjoint and
    /// in leaf order.
    pub fn decode(bytes: &[u8]) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "key cover", problem };
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(bad("no SIONCOV1 header".into()));
        }
        let epoch = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let n = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize;
        let body = &bytes[16..];
        if body.len() != n.checked_mul(37).ok_or_else(|| bad("count overflows".into()))? {
            return Err(bad(format!("{n} nodes need {} bytes, not {}", n * 37, body.len())));
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(n);
        let mut next = 0u64;
        for (i, c) in body.chunks_exact(37).enumerate() {
            let depth = c[0];
            let prefix = u32::from_le_bytes([c[1], c[2], c[3], c[4]]);
            if depth > DEPTH || (depth < 32 && u64::from(prefix) >= 1u64 << depth) {
                return Err(bad(format!("node {i}: prefix {prefix:#x} at depth {depth}")));
            }
            let mut seed = [0u8; 32];
            seed.copy_from_slice(&c[5..]);
            let node = Node { depth, prefix, seed };
            let (a, b) = node.range();
            if a < next {
                return Err(bad(format!("node {i} overlaps or precedes the one before")));
            }
            next = b;
            nodes.push(node);
        }
        Ok(Self { epoch, nodes })
    }
}
