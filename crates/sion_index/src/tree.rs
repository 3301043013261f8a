//! Building the binary Merkle R-trees of the index (docs/INDEX.md, "Trees"): the tree shape,
//! interior nodes in pre-order, walks that make proof steps, and the k-d order of a block. How a
//! node is hashed is the verifier's (`sion_verify::index::tree`).

use sion_verify::index::geom::{Query, SpaceTime};
pub use sion_verify::index::tree::{
    Entry, GROUP, GroupEntry, Step, Summary, TAG_GROUP, Tally, group_summary,
};

/// How a tree over items splits them (docs/INDEX.md, "Trees"): a block's tree over its groups
/// halves them, rounding up (its k-d order is cut the same way); a list — over blocks, cells or
/// hours — puts the largest power of two below the count on the left (RFC 9162), so appending
/// an item changes only the right edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Halves,
    Lists,
}

impl Shape {
    /// How many of `n >= 2` items go left.
    pub fn left(self, n: usize) -> usize {
        match self {
            Shape::Halves => n.div_ceil(2),
            Shape::Lists => 1 << (usize::BITS - 1 - (n - 1).leading_zeros()),
        }
    }
}

/// The interior nodes of the tree over `n` items, in pre-order (`n - 1` of them).
pub fn interior_of(shape: Shape, n: usize, item: &dyn Fn(usize) -> Summary) -> Vec<Summary> {
    let mut out = Vec::with_capacity(n.saturating_sub(1));
    if n >= 2 {
        fill(shape, 0, n, item, &mut out);
    }
    out
}

const PLACEHOLDER: Summary =
    Summary { bbox: SpaceTime::ZERO, tally: Tally { kinds: 0, count: 0, duration_ns: 0 }, digest: [0; 32] };

fn fill(
    shape: Shape,
    lo: usize,
    hi: usize,
    item: &dyn Fn(usize) -> Summary,
    out: &mut Vec<Summary>,
) -> Summary {
    if hi - lo == 1 {
        return item(lo);
    }
    let at = out.len();
    out.push(PLACEHOLDER); // until the children are known (not `item(lo)`: it may hash a group)
    let m = shape.left(hi - lo);
    let left = fill(shape, lo, lo + m, item, out);
    let right = fill(shape, lo + m, hi, item, out);
    let node = Summary::join(&left, &right);
    out[at] = node;
    node
}

/// What a walk enters and answers with: a range query enters every subtree whose box meets
/// it and answers with every entry that does; a latest or nearest question also passes over
/// what ranks below its answer (docs/PROOFS.md, kinds 7 and 8). A walk asks in tree order,
/// so a search may note what it is shown.
pub trait Select {
    /// Whether the walk enters a subtree with this box and these kinds below it (else it is
    /// pruned).
    fn opens(&self, bbox: &SpaceTime, kinds: u32) -> bool;
    /// Whether a leaf entry of an entered group is a hit (else a miss).
    fn takes(&self, entry: &Entry) -> bool;
    /// Whether the walk takes a subtree with this box and these kinds whole, by its tally (a
    /// count's walk: it lies inside the question).
    fn whole(&self, _bbox: &SpaceTime, _kinds: u32) -> bool {
        false
    }
}

impl Select for Query {
    fn opens(&self, bbox: &SpaceTime, kinds: u32) -> bool {
        bbox.meets(self) && kinds & self.kinds != 0
    }
    fn takes(&self, entry: &Entry) -> bool {
        entry.bbox.meets(self) && self.asks_kind(entry.kind)
    }
}

/// What a walk needs of a tree's items: how many, their boxes and kinds (cheap: no hashing),
/// and (for pruned ones) their summaries.
pub struct Items<'a> {
    pub count: usize,
    pub outline: &'a dyn Fn(usize) -> (SpaceTime, u32),
    pub summary: &'a dyn Fn(usize) -> Summary,
}

/// A walk's way into an item that meets the query: the item's index and the steps so far.
pub type Descend<'a, E> = dyn FnMut(usize, &mut Vec<Step>) -> Result<(), E> + 'a;

/// Walk the nodes of a tree (its interior nodes in pre-order, its items) that the query
/// reaches, pushing proof steps; at an item that meets the query, `descend(index)` continues
/// into what the item stands for.
pub fn walk<E>(
    shape: Shape,
    interior: &[Summary],
    items: &Items<'_>,
    q: &dyn Select,
    out: &mut Vec<Step>,
    descend: &mut Descend<'_, E>,
) -> Result<(), E> {
    if items.count > 0 {
        walk_range(shape, interior, items, (0, items.count, 0), q, out, descend)?;
    }
    Ok(())
}

fn walk_range<E>(
    shape: Shape,
    interior: &[Summary],
    items: &Items<'_>,
    (lo, hi, at): (usize, usize, usize),
    q: &dyn Select,
    out: &mut Vec<Step>,
    descend: &mut Descend<'_, E>,
) -> Result<(), E> {
    if hi - lo == 1 {
        let (bbox, kinds) = (items.outline)(lo);
        if q.whole(&bbox, kinds) {
            out.push(Step::Whole((items.summary)(lo)));
        } else if q.opens(&bbox, kinds) {
            descend(lo, out)?;
        } else {
            out.push(Step::Pruned((items.summary)(lo)));
        }
        return Ok(());
    }
    let node = interior[at];
    if q.whole(&node.bbox, node.tally.kinds) {
        out.push(Step::Whole(node));
        return Ok(());
    }
    if !q.opens(&node.bbox, node.tally.kinds) {
        out.push(Step::Pruned(node));
        return Ok(());
    }
    out.push(Step::Interior(node.bbox));
    let m = shape.left(hi - lo);
    walk_range(shape, interior, items, (lo, lo + m, at + 1), q, out, descend)?;
    walk_range(shape, interior, items, (lo + m, hi, at + m), q, out, descend)
}

/// The root of the tree over `items` in the given shape (`None` for no items).
pub fn root_of(shape: Shape, items: &[Summary]) -> Option<Summary> {
    match items.len() {
        0 => None,
        1 => Some(items[0]),
        n => {
            let m = shape.left(n);
            let (l, r) = items.split_at(m);
            Some(Summary::join(&root_of(shape, l)?, &root_of(shape, r)?))
        }
    }
}

/// A block's group tree: its entries (k-d order), the interior over its groups, and its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTree {
    pub entries: Vec<Entry>,
    pub interior: Vec<Summary>,
}

impl BlockTree {
    /// Put `entries` (1 to `BLOCK` of them) in k-d order and hash their groups' tree.
    pub fn build(mut entries: Vec<Entry>) -> Self {
        kd_order(&mut entries);
        let interior = {
            let block: &[Entry] = &entries;
            let group = |g: usize| &block[g * GROUP..((g + 1) * GROUP).min(block.len())];
            interior_of(Shape::Halves, block.len().div_ceil(GROUP), &|g| group_summary(group(g)))
        };
        Self { entries, interior }
    }

    pub fn group(&self, g: usize) -> &[Entry] {
        &self.entries[g * GROUP..((g + 1) * GROUP).min(self.entries.len())]
    }

    pub fn root(&self) -> Summary {
        // A block of one group has no interior.
        self.interior.first().copied().unwrap_or_else(|| group_summary(self.group(0)))
    }

    /// The walk of the block's groups that the question reaches.
    pub fn walk(&self, q: &dyn Select, out: &mut Vec<Step>) {
        let groups = self.entries.len().div_ceil(GROUP);
        let items = Items {
            count: groups,
            outline: &|g| {
                let group = self.group(g);
                group.iter().fold((group[0].bbox, 0), |(b, k), e| (b.union(&e.bbox), k | e.tally().kinds))
            },
            summary: &|g| group_summary(self.group(g)),
        };
        let _ =
            walk::<std::convert::Infallible>(Shape::Halves, &self.interior, &items, q, out, &mut |g, out| {
                let step = self
                    .group(g)
                    .iter()
                    .map(|e| if q.takes(e) { GroupEntry::Hit(e.position) } else { GroupEntry::Miss(*e) })
                    .collect();
                out.push(Step::Group(step));
                Ok(())
            });
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
