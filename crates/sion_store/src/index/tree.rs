//! Building the binary Merkle R-trees of the index (docs/INDEX.md, "Trees"): the tree shape,
//! interior nodes in pre-order, walks that make proof steps, and the k-d order of a block. How a
//! node is hashed is the verifier's (`sion_verify::index::tree`).

use sion_verify::index::geom::{Query, SpaceTime};
pub use sion_verify::index::tree::{Entry, GROUP, GroupEntry, Step, Summary, TAG_GROUP, group_summary};

/// How many items go left in a tree over `n >= 2` items.
pub fn left_len(n: usize) -> usize {
    n.div_ceil(2)
}

/// The interior nodes of the tree over `n` items, in pre-order (`n - 1` of them).
pub fn interior_of(n: usize, item: &dyn Fn(usize) -> Summary) -> Vec<Summary> {
    let mut out = Vec::with_capacity(n.saturating_sub(1));
    if n >= 2 {
        fill(0, n, item, &mut out);
    }
    out
}

const PLACEHOLDER: Summary = Summary { bbox: SpaceTime::ZERO, digest: [0; 32] };

fn fill(lo: usize, hi: usize, item: &dyn Fn(usize) -> Summary, out: &mut Vec<Summary>) -> Summary {
    if hi - lo == 1 {
        return item(lo);
    }
    let at = out.len();
    out.push(PLACEHOLDER); // until the children are known (not `item(lo)`: it may hash a group)
    let m = left_len(hi - lo);
    let left = fill(lo, lo + m, item, out);
    let right = fill(lo + m, hi, item, out);
    let node = Summary::join(&left, &right);
    out[at] = node;
    node
}

/// What a walk needs of a tree's items: how many, their boxes, and (for pruned ones) their
/// summaries.
pub struct Items<'a> {
    pub count: usize,
    pub bbox: &'a dyn Fn(usize) -> SpaceTime,
    pub summary: &'a dyn Fn(usize) -> Summary,
}

/// Walk the nodes of a tree (its interior nodes in pre-order, its items) that the query
/// reaches, pushing proof steps; at an item that meets the query, `descend(index)` continues
/// into what the item stands for.
pub fn walk(
    interior: &[Summary],
    items: &Items<'_>,
    q: &Query,
    out: &mut Vec<Step>,
    descend: &mut dyn FnMut(usize, &mut Vec<Step>),
) {
    if items.count > 0 {
        walk_range(interior, items, 0, items.count, 0, q, out, descend);
    }
}

#[allow(clippy::too_many_arguments)]
fn walk_range(
    interior: &[Summary],
    items: &Items<'_>,
    lo: usize,
    hi: usize,
    at: usize,
    q: &Query,
    out: &mut Vec<Step>,
    descend: &mut dyn FnMut(usize, &mut Vec<Step>),
) {
    if hi - lo == 1 {
        if (items.bbox)(lo).meets(q) {
            descend(lo, out);
        } else {
            out.push(Step::Pruned((items.summary)(lo)));
        }
        return;
    }
    let node = interior[at];
    if !node.bbox.meets(q) {
        out.push(Step::Pruned(node));
        return;
    }
    out.push(Step::Interior(node.bbox));
    let m = left_len(hi - lo);
    walk_range(interior, items, lo, lo + m, at + 1, q, out, descend);
    walk_range(interior, items, lo + m, hi, at + m, q, out, descend);
}

/// A tree over summaries kept in full (the lists over blocks, cells and hours).
#[derive(Debug, Clone, Default)]
pub struct Built {
    pub items: Vec<Summary>,
    pub interior: Vec<Summary>,
}

impl Built {
    pub fn new(items: Vec<Summary>) -> Self {
        let interior = interior_of(items.len(), &|i| items[i]);
        Self { items, interior }
    }

    pub fn root(&self) -> Option<Summary> {
        self.interior.first().or(self.items.first()).copied()
    }

    pub fn walk(&self, q: &Query, out: &mut Vec<Step>, descend: &mut dyn FnMut(usize, &mut Vec<Step>)) {
        let items =
            Items { count: self.items.len(), bbox: &|i| self.items[i].bbox, summary: &|i| self.items[i] };
        walk(&self.interior, &items, q, out, descend);
    }
}

/// How many entries of a block of `n > GROUP` go left: half of its groups, rounded up.
pub fn left_entries(n: usize) -> usize {
    GROUP * n.div_ceil(GROUP).div_ceil(2)
}

/// Put entries in k-d order: while more than a group remain, split on the spatial axis along
/// which their centres spread most (ties: x before y before z), the first
/// [`left_entries`]`(n)` by (centre, position) going left, recursively; a group is ordered by
/// position. The order depends only on the set of entries, and the groups are consecutive runs
/// of [`GROUP`].
pub fn kd_order(entries: &mut [Entry]) {
    // Order small keys, then move each entry once.
    let mut keys: Vec<KdKey> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| KdKey {
            center: [e.bbox.center(0), e.bbox.center(1), e.bbox.center(2)],
            position: e.position,
            index: i as u32,
        })
        .collect();
    kd_keys(&mut keys);
    // Slot i takes the entry first at `keys[i].index`: follow each cycle of that permutation,
    // marking a slot done by pointing it at itself.
    for start in 0..entries.len() {
        if keys[start].index as usize == start {
            continue;
        }
        let first = entries[start];
        let mut slot = start;
        loop {
            let from = keys[slot].index as usize;
            keys[slot].index = slot as u32;
            if from == start {
                entries[slot] = first;
                break;
            }
            entries[slot] = entries[from];
            slot = from;
        }
    }
}

#[derive(Clone, Copy)]
struct KdKey {
    center: [i64; 3],
    position: u64,
    index: u32,
}

fn kd_keys(keys: &mut [KdKey]) {
    let n = keys.len();
    if n <= GROUP {
        keys.sort_unstable_by_key(|k| k.position);
        return;
    }
    let mut lo = [i64::MAX; 3];
    let mut hi = [i64::MIN; 3];
    for k in keys.iter() {
        for a in 0..3 {
            lo[a] = lo[a].min(k.center[a]);
            hi[a] = hi[a].max(k.center[a]);
        }
    }
    let spread = |a: usize| hi[a] as i128 - lo[a] as i128;
    let mut axis = 0;
    for a in 1..3 {
        if spread(a) > spread(axis) {
            axis = a;
        }
    }
    let m = left_entries(n);
    keys.select_nth_unstable_by_key(m - 1, |k| (k.center[axis], k.position));
    let (left, right) = keys.split_at_mut(m);
    kd_keys(left);
    kd_keys(right);
}
