//! The state of the art the proof table is measured against: a Merkle R*-tree with the
//! verification object of Yang, Papadias et al. (the MR-tree: "Authenticated indexing for
//! outsourced spatial databases", VLDB Journal 18(3), 2009), built here over rstar's own
//! R*-tree of the same atoms (4-D: x, y, z and valid time).
//!
//! Every node's digest is BLAKE3 over its entries, each `box || digest` (the box 64 bytes: the
//! four minima, then the four maxima, i64 LE; a leaf entry's digest is the atom's id, BLAKE3 of
//! its bytes). A range query's verification object (VO) is the depth-first walk of the visited
//! nodes: per node, its entry count, then per entry one byte and
//! - `0` pruned: the entry's box and digest (its box misses the query);
//! - `1` visited: the child's VO (its box is the union of its entries', as rstar keeps it);
//! - `2` result: the atom's position (the atom comes with the answer; its box and id are
//!   computed from its bytes by the verifier);
//! - `3` leaf miss: the entry's box and digest (the atom does not answer).
//!
//! Boxes are written whole, as the paper's VO carries MBRs. The verifier recomputes the root
//! from the VO and the answer's atoms, checks that every pruned box and leaf miss misses the
//! query and every result answers it, and compares the root with the one it trusts.

use rstar::{AABB, Envelope, ParentNode, RTree, RTreeNode, RTreeObject};
use sion_memory::atom::Atom;
use sion_memory::index::geom::Query;
use std::collections::HashMap;

/// An atom in the R*-tree: its 4-D box (time inclusive: `to - 1`) and log position.
pub type Item = rstar::primitives::GeomWithData<rstar::primitives::Rectangle<[i64; 4]>, u64>;

pub type Digest = [u8; 32];

/// The 4-D box of an atom, valid time as an inclusive range.
pub fn box4(a: &Atom) -> ([i64; 4], [i64; 4]) {
    let p = a.parts();
    let b = &p.bounds;
    (
        [b.min_mm[0], b.min_mm[1], b.min_mm[2], p.valid.from_ns],
        [b.max_mm[0], b.max_mm[1], b.max_mm[2], p.valid.to_ns - 1],
    )
}

fn encode_box(e: &AABB<[i64; 4]>) -> [u8; 64] {
    let (lo, hi) = (e.lower(), e.upper());
    let mut out = [0u8; 64];
    for (i, v) in lo.iter().chain(hi.iter()).enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    out
}

fn decode_box(b: &[u8]) -> AABB<[i64; 4]> {
    let v = |i: usize| i64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    AABB::from_corners([v(0), v(1), v(2), v(3)], [v(4), v(5), v(6), v(7)])
}

fn query_box(q: &Query) -> AABB<[i64; 4]> {
    let b = &q.bounds;
    AABB::from_corners(
        [b.min_mm[0], b.min_mm[1], b.min_mm[2], q.from_ns],
        [b.max_mm[0], b.max_mm[1], b.max_mm[2], q.to_ns - 1],
    )
}

/// The MR-tree: rstar's R*-tree and a digest for each of its nodes.
pub struct MrTree<'a> {
    pub tree: RTree<Item>,
    atoms: &'a [Atom],
    digests: HashMap<usize, Digest>,
    pub root: Digest,
}

fn key(node: &ParentNode<Item>) -> usize {
    node as *const ParentNode<Item> as usize
}

impl<'a> MrTree<'a> {
    pub fn build(atoms: &'a [Atom]) -> Self {
        let tree = RTree::bulk_load(
            atoms
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let (lo, hi) = box4(a);
                    Item::new(rstar::primitives::Rectangle::from_corners(lo, hi), i as u64)
                })
                .collect(),
        );
        let mut digests = HashMap::new();
        let root = Self::digest(tree.root(), atoms, &mut digests);
        Self { tree, atoms, digests, root }
    }

    fn digest(node: &ParentNode<Item>, atoms: &[Atom], out: &mut HashMap<usize, Digest>) -> Digest {
        let mut h = blake3::Hasher::new();
        for child in node.children() {
            match child {
                RTreeNode::Leaf(item) => {
                    h.update(&encode_box(&item.envelope()));
                    h.update(&atoms[item.data as usize].id().0);
                }
                RTreeNode::Parent(p) => {
                    let d = Self::digest(p, atoms, out);
                    h.update(&encode_box(&p.envelope()));
                    h.update(&d);
                }
            }
        }
        let d = *h.finalize().as_bytes();
        out.insert(key(node), d);
        d
    }

    /// The VO of a range query, and the positions it answers (in the walk's order).
    pub fn prove(&self, q: &Query) -> (Vec<u8>, Vec<u64>) {
        let (mut vo, mut hits) = (Vec::new(), Vec::new());
        self.walk(self.tree.root(), &query_box(q), &mut vo, &mut hits);
        (vo, hits)
    }

    fn walk(&self, node: &ParentNode<Item>, q: &AABB<[i64; 4]>, vo: &mut Vec<u8>, hits: &mut Vec<u64>) {
        vo.push(node.children().len() as u8);
        for child in node.children() {
            match child {
                RTreeNode::Leaf(item) => {
                    let e = item.envelope();
                    if e.intersects(q) {
                        vo.push(2);
                        put_varint(vo, item.data);
                        hits.push(item.data);
                    } else {
                        vo.push(3);
                        vo.extend_from_slice(&encode_box(&e));
                        vo.extend_from_slice(&self.atoms[item.data as usize].id().0);
                    }
                }
                RTreeNode::Parent(p) => {
                    let e = p.envelope();
                    if e.intersects(q) {
                        vo.push(1);
                        self.walk(p, q, vo, hits);
                    } else {
                        vo.push(0);
                        vo.extend_from_slice(&encode_box(&e));
                        vo.extend_from_slice(&self.digests[&key(p)]);
                    }
                }
            }
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Cursor<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.bytes.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

/// Check a VO against the trusted root, with the answer's atoms (position and bytes, in the
/// walk's order): every atom decodes and answers, every pruned box misses. The verified
/// positions, or `None`.
pub fn verify(root: &Digest, q: &Query, vo: &[u8], answer: &[(u64, Vec<u8>)]) -> Option<Vec<u64>> {
    let qb = query_box(q);
    let mut c = Cursor { bytes: vo, at: 0 };
    let mut next = answer.iter();
    let mut got = Vec::new();
    let (digest, _) = node(&mut c, &qb, q, &mut next, &mut got, 0)?;
    (c.at == vo.len() && next.next().is_none() && &digest == root).then_some(got)
}

type Answer<'b> = std::slice::Iter<'b, (u64, Vec<u8>)>;

fn node(
    c: &mut Cursor,
    qb: &AABB<[i64; 4]>,
    q: &Query,
    answer: &mut Answer,
    got: &mut Vec<u64>,
    depth: usize,
) -> Option<(Digest, AABB<[i64; 4]>)> {
    if depth > 64 {
        return None;
    }
    let n = c.byte()?;
    let mut h = blake3::Hasher::new();
    let mut env = AABB::new_empty();
    for _ in 0..n {
        let (b, d) = match c.byte()? {
            0 | 3 => {
                let b = decode_box(c.take(64)?);
                if b.intersects(qb) {
                    return None;
                }
                let d: Digest = c.take(32)?.try_into().ok()?;
                (b, d)
            }
            1 => node(c, qb, q, answer, got, depth + 1).map(|(d, b)| (b, d))?,
            2 => {
                let position = c.varint()?;
                let (p, bytes) = answer.next()?;
                if *p != position {
                    return None;
                }
                let atom = Atom::decode(bytes).ok()?;
                if !q.matches(atom.parts()) {
                    return None;
                }
                let (lo, hi) = box4(&atom);
                got.push(position);
                (AABB::from_corners(lo, hi), atom.id().0)
            }
            _ => return None,
        };
        h.update(&encode_box(&b));
        h.update(&d);
        env.merge(&b);
    }
    Some((*h.finalize().as_bytes(), env))
}
