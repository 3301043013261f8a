//! A second, deliberately plain implementation of the index, written from docs/INDEX.md alone
//! (version 3):
//! it rebuilds everything from scratch with no caching and shares no code with crates/sion_index/src
//! (only the atom type and BLAKE3). On random logs it must give the incremental index's root.

use std::collections::BTreeMap;

use sion_index::Index;
use sion_sim::SplitMix64;
use sion_verify::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Permille};

type Digest = [u8; 32];
const HOUR: i64 = 3_600_000_000_000;
const MONTH: i64 = 30 * 24 * HOUR;

fn h(parts: &[&[u8]]) -> Digest {
    let mut hasher = blake3::Hasher::new();
    for p in parts {
        hasher.update(p);
    }
    *hasher.finalize().as_bytes()
}

/// (min x, min y, min z, max x, max y, max z, from, to)
type Bx = [i64; 8];

fn atom_box(a: &Atom) -> Bx {
    let p = a.parts();
    let (lo, hi) = (p.bounds.min_mm, p.bounds.max_mm);
    [lo[0], lo[1], lo[2], hi[0], hi[1], hi[2], p.valid.from_ns, p.valid.to_ns]
}

fn union(a: &Bx, b: &Bx) -> Bx {
    [
        a[0].min(b[0]),
        a[1].min(b[1]),
        a[2].min(b[2]),
        a[3].max(b[3]),
        a[4].max(b[4]),
        a[5].max(b[5]),
        a[6].min(b[6]),
        a[7].max(b[7]),
    ]
}

fn box_bytes(b: &Bx) -> Vec<u8> {
    b.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A tally: (kinds, count, duration).
type Tl = (u32, u64, u128);

fn tally_of(a: &Atom) -> Tl {
    let v = a.parts().valid;
    (1 << a.kind().code(), 1, (v.to_ns - v.from_ns) as u128)
}

fn tally_sum(a: &Tl, b: &Tl) -> Tl {
    (a.0 | b.0, a.1 + b.1, a.2 + b.2)
}

fn tally_bytes(t: &Tl) -> Vec<u8> {
    [&t.0.to_le_bytes()[..], &t.1.to_le_bytes(), &t.2.to_le_bytes()].concat()
}

/// A node: box, tally, digest.
type Node = (Bx, Tl, Digest);

/// "A tree of one item is that item; a tree of more puts the first `left(m)` items left": half
/// of them, rounded up, for a block's groups; the largest power of two below `m` for a list.
fn tree_split(items: &[Node], left: fn(usize) -> usize) -> Node {
    if items.len() == 1 {
        return items[0];
    }
    let m = left(items.len());
    let (lb, lt, ld) = tree_split(&items[..m], left);
    let (rb, rt, rd) = tree_split(&items[m..], left);
    let digest = h(&[&box_bytes(&lb), &tally_bytes(&lt), &ld, &box_bytes(&rb), &tally_bytes(&rt), &rd]);
    (union(&lb, &rb), tally_sum(&lt, &rt), digest)
}

/// A block's tree over its groups.
fn tree(items: &[Node]) -> Node {
    tree_split(items, |m| m.div_ceil(2))
}

/// A list: over a bucket's blocks, an hour's cells, a frame's hours (RFC 9162's split).
fn list(items: &[Node]) -> Node {
    tree_split(items, |m| {
        let mut k = 1;
        while k * 2 < m {
            k *= 2;
        }
        k
    })
}

fn centre(b: &Bx, axis: usize) -> i64 {
    b[axis] + (b[axis + 3] - b[axis]) / 2
}

/// (position, atom)
type E<'a> = (u64, &'a Atom);

fn kd(mut es: Vec<E<'_>>) -> Vec<E<'_>> {
    let n = es.len();
    if n <= 4 {
        es.sort_by_key(|e| e.0);
        return es;
    }
    let spread = |axis: usize| {
        let cs: Vec<i64> = es.iter().map(|e| centre(&atom_box(e.1), axis)).collect();
        *cs.iter().max().unwrap() as i128 - *cs.iter().min().unwrap() as i128
    };
    let mut axis = 0;
    for a in 1..3 {
        if spread(a) > spread(axis) {
            axis = a;
        }
    }
    es.sort_by_key(|e| (centre(&atom_box(e.1), axis), e.0));
    let left = 4 * n.div_ceil(4).div_ceil(2);
    let right = es.split_off(left);
    let mut out = kd(es);
    out.extend(kd(right));
    out
}

fn block_tree(es: Vec<E<'_>>) -> Node {
    let ordered = kd(es);
    let groups: Vec<Node> = ordered
        .chunks(4)
        .map(|g| {
            let mut bytes = vec![0x11, g.len() as u8];
            let (mut b, mut t) = (atom_box(g[0].1), (0, 0, 0));
            for (pos, a) in g {
                bytes.extend_from_slice(&pos.to_le_bytes());
                bytes.extend_from_slice(&a.id().0);
                bytes.extend_from_slice(&box_bytes(&atom_box(a)));
                bytes.push(a.kind().code());
                b = union(&b, &atom_box(a));
                t = tally_sum(&t, &tally_of(a));
            }
            (b, t, h(&[&bytes]))
        })
        .collect();
    tree(&groups)
}

fn bucket_tree(es: &[E<'_>]) -> Node {
    bucket_tree_of(es, 4096)
}

fn bucket_tree_of(es: &[E<'_>], block: usize) -> Node {
    let blocks: Vec<Node> = es.chunks(block).map(|c| block_tree(c.to_vec())).collect();
    list(&blocks)
}

fn cell_key(b: &Bx) -> u128 {
    let cx = centre(b, 0).div_euclid(131_072);
    let cy = centre(b, 1).div_euclid(131_072);
    let (ux, uy) = ((cx as u64) ^ (1 << 63), (cy as u64) ^ (1 << 63));
    let mut key = 0u128;
    for i in 0..64 {
        key |= u128::from((ux >> i) & 1) << (2 * i + 1);
        key |= u128::from((uy >> i) & 1) << (2 * i);
    }
    key
}

/// The buckets of one hour or month, by (cell, kind).
fn cell_list<'a>(es: &[E<'a>]) -> Node {
    let mut cells: BTreeMap<(u128, u8), Vec<E<'a>>> = BTreeMap::new();
    for e in es {
        cells.entry((cell_key(&atom_box(e.1)), e.1.kind().code())).or_default().push(*e);
    }
    let items: Vec<Node> = cells.values().map(|es| bucket_tree(es)).collect();
    list(&items)
}

fn rfc_tree(leaf_hashes: &[Digest], node: &dyn Fn(&Digest, &Digest) -> Digest) -> Digest {
    match leaf_hashes.len() {
        0 => h(&[]),
        1 => leaf_hashes[0],
        n => {
            let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            node(&rfc_tree(&leaf_hashes[..k], node), &rfc_tree(&leaf_hashes[k..], node))
        }
    }
}

fn crit(keys: &[(Digest, Digest)]) -> Digest {
    match keys {
        [] => h(&[&[0x22]]),
        [(_, leaf)] => *leaf,
        _ => {
            let (first, last) = (&keys[0].0, &keys[keys.len() - 1].0);
            let bit_of = |k: &Digest, b: usize| (k[b / 8] >> (7 - b % 8)) & 1;
            let b = (0..256).find(|&b| bit_of(first, b) != bit_of(last, b)).unwrap();
            let split = keys.iter().position(|(k, _)| bit_of(k, b) == 1).unwrap();
            let key = h(&[&[0x21], &(b as u16).to_le_bytes()]);
            let mut children = crit(&keys[..split]).to_vec();
            children.extend_from_slice(&crit(&keys[split..]));
            *blake3::keyed_hash(&key, &children).as_bytes()
        }
    }
}

fn list_root(entries: &[(u64, Digest)]) -> Digest {
    let leaves: Vec<Digest> = entries.iter().map(|(p, id)| h(&[&[0x00], &p.to_le_bytes(), id])).collect();
    rfc_tree(&leaves, &|l, r| h(&[l, r]))
}

/// The index root of docs/INDEX.md, from scratch.
fn spec_root(atoms: &[Atom]) -> Digest {
    let mut frames: BTreeMap<&str, Vec<E<'_>>> = BTreeMap::new();
    for (i, a) in atoms.iter().enumerate() {
        frames.entry(&a.parts().frame).or_default().push((i as u64, a));
    }
    let entries: Vec<Vec<u8>> = frames
        .iter()
        .map(|(name, es)| {
            let (short, long): (Vec<E<'_>>, Vec<E<'_>>) =
                es.iter().partition(|(_, a)| a.parts().valid.to_ns - a.parts().valid.from_ns <= HOUR);
            let mut hours: BTreeMap<i64, Vec<E<'_>>> = BTreeMap::new();
            for e in short {
                hours.entry(e.1.parts().valid.from_ns.div_euclid(HOUR)).or_default().push(e);
            }
            let hour_items: Vec<Node> = hours.values().map(|es| cell_list(es)).collect();
            let mut months: BTreeMap<i64, Vec<E<'_>>> = BTreeMap::new();
            for e in long {
                months.entry(e.1.parts().valid.from_ns.div_euclid(MONTH)).or_default().push(e);
            }
            let month_items: Vec<Node> = months.values().map(|es| cell_list(es)).collect();
            let mut entry = vec![name.len() as u8];
            entry.extend_from_slice(name.as_bytes());
            for t in [
                (!hour_items.is_empty()).then(|| list(&hour_items)),
                (!month_items.is_empty()).then(|| list(&month_items)),
            ] {
                match t {
                    None => entry.push(0),
                    Some((b, t, d)) => {
                        entry.push(1);
                        entry.extend_from_slice(&box_bytes(&b));
                        entry.extend_from_slice(&tally_bytes(&t));
                        entry.extend_from_slice(&d);
                    }
                }
            }
            entry
        })
        .collect();
    let frame_leaves: Vec<Digest> = entries.iter().map(|e| h(&[&[0x00], e])).collect();
    let frames_root = rfc_tree(&frame_leaves, &|l, r| h(&[&[0x01], l, r]));

    let mut subjects: BTreeMap<Digest, (String, Vec<(u64, Digest)>)> = BTreeMap::new();
    let mut links: BTreeMap<Digest, Vec<(u64, Digest)>> = BTreeMap::new();
    for (i, a) in atoms.iter().enumerate() {
        let p = a.parts();
        if !p.subject.is_empty() {
            let key = h(&[p.subject.as_bytes()]);
            subjects
                .entry(key)
                .or_insert_with(|| (p.subject.clone(), Vec::new()))
                .1
                .push((i as u64, a.id().0));
        }
        let mut targets: Vec<Digest> = p.links.iter().map(|l| l.target.0).collect();
        targets.sort();
        targets.dedup();
        for t in targets {
            links.entry(t).or_default().push((i as u64, a.id().0));
        }
    }
    let subject_leaves: Vec<(Digest, Digest)> = subjects
        .iter()
        .map(|(k, (s, list))| {
            let len = (s.len() as u16).to_le_bytes();
            (*k, h(&[&[0x20], k, &(list.len() as u64).to_le_bytes(), &list_root(list), &len, s.as_bytes()]))
        })
        .collect();
    let link_leaves: Vec<(Digest, Digest)> = links
        .iter()
        .map(|(k, list)| (*k, h(&[&[0x23], k, &(list.len() as u64).to_le_bytes(), &list_root(list)])))
        .collect();
    // Version 4: each subject's places — its atoms of each frame, in log order, as one bucket's
    // tree — in a frames tree of its own, a leaf of the places map.
    let mut places: BTreeMap<Digest, BTreeMap<&str, Vec<E<'_>>>> = BTreeMap::new();
    for (i, a) in atoms.iter().enumerate() {
        let p = a.parts();
        if !p.subject.is_empty() {
            places
                .entry(h(&[p.subject.as_bytes()]))
                .or_default()
                .entry(&p.frame)
                .or_default()
                .push((i as u64, a));
        }
    }
    let place_leaves: Vec<(Digest, Digest)> = places
        .iter()
        .map(|(k, frames)| {
            let leaves: Vec<Digest> = frames
                .iter()
                .map(|(name, es)| {
                    let (b, t, d) = bucket_tree_of(es, 64);
                    let mut entry = vec![name.len() as u8];
                    entry.extend_from_slice(name.as_bytes());
                    entry.push(1);
                    entry.extend_from_slice(&box_bytes(&b));
                    entry.extend_from_slice(&tally_bytes(&t));
                    entry.extend_from_slice(&d);
                    entry.push(0);
                    h(&[&[0x00], &entry])
                })
                .collect();
            let root = rfc_tree(&leaves, &|l, r| h(&[&[0x01], l, r]));
            (*k, h(&[&[0x24], k, &(frames.len() as u64).to_le_bytes(), &root]))
        })
        .collect();
    h(&[
        &[0x30],
        &(entries.len() as u64).to_le_bytes(),
        &h(&[&[0x31], &frames_root, &crit(&place_leaves)]),
        &crit(&subject_leaves),
        &crit(&link_leaves),
    ])
}

fn incremental_roots_match(atoms: &[Atom], rng: &mut SplitMix64) {
    let mut index = Index::new();
    let mut folded = 0;
    while folded < atoms.len() {
        let step = 1 + (rng.next_u64() % (atoms.len() as u64 / 3 + 1)) as usize;
        for a in &atoms[folded..(folded + step).min(atoms.len())] {
            index.fold(a).expect("fold");
        }
        folded = (folded + step).min(atoms.len());
        assert_eq!(index.root().expect("root"), spec_root(&atoms[..folded]), "size {folded}");
    }
}

#[test]
fn crowded_random_logs() {
    let mut rng = SplitMix64::new(11);
    for _ in 0..6 {
        let n = 1 + (rng.next_u64() % 700) as usize;
        let atoms = sion_testkit::random_atoms(&mut rng, n);
        incremental_roots_match(&atoms, &mut rng);
    }
}

/// Atoms over kilometres, both signs, many hours and frames: many cells and hours.
#[test]
fn spread_out_random_logs() {
    let mut rng = SplitMix64::new(12);
    let atoms: Vec<Atom> = (0..3000)
        .map(|i| {
            let min = [
                rng.range(-2_000_000, 2_000_000),
                rng.range(-2_000_000, 2_000_000),
                rng.range(-10_000, 10_000),
            ];
            let size = [rng.range(0, 300_000), rng.range(0, 300_000), rng.range(0, 5_000)];
            // Over half a year, out of order: long-lived atoms in several months, late ones too.
            let from = if i % 7 == 0 { rng.range(0, 6 * MONTH) } else { rng.range(0, 40 * HOUR) };
            let to = if i % 13 == 0 { Interval::OPEN_END_NS } else { from + rng.range(1, 2 * HOUR) };
            let mut p = AtomParts::new(
                [Kind::Observation, Kind::Pose, Kind::Coverage, Kind::Note][i % 4],
                ["map", "odom", "world"][i % 3],
                BoxMm { min_mm: min, max_mm: [min[0] + size[0], min[1] + size[1], min[2] + size[2]] },
                Interval { from_ns: from, to_ns: to },
                Permille(500),
            );
            p.subject = format!("thing-{}", rng.next_u64() % 40);
            Atom::new(p).expect("valid")
        })
        .collect();
    incremental_roots_match(&atoms, &mut rng);
}

/// One cell and hour with more than two blocks of atoms.
#[test]
fn a_dense_bucket_spans_blocks() {
    let atoms = dense_poses(&mut SplitMix64::new(13), 9_000, 0);
    let mut index = Index::build(&atoms).expect("build");
    assert_eq!(index.root().expect("root"), spec_root(&atoms));
    let mut index2 = Index::build(&atoms[..4095]).expect("build");
    for a in &atoms[4095..] {
        index2.fold(a).expect("fold");
    }
    assert_eq!(index2.root().expect("root"), index.root().expect("root"));
}

/// The same dense bucket on disk within a small budget, sealed every few atoms: the bucket is
/// let go after each seal and taken up again holding none of its partial block's entries, so
/// its blocks fill (4,096) and its subject's (64) while those entries are still only in the
/// store; each seal reads them back. The roots stay the plain implementation's.
#[test]
fn a_bucket_held_without_its_entries_fills_its_blocks() {
    let mut rng = SplitMix64::new(17);
    let atoms = dense_poses(&mut rng, 9_000, 3);
    let dir = tempfile::tempdir().expect("tmp");
    let config = sion_index::IndexConfig {
        budget: sion_index::Budget { hot_bytes: 16 << 10 },
        ..sion_index::IndexConfig::default()
    };
    let mut index = Index::create(&dir.path().join("index"), config).expect("create");
    let mut at = 0;
    while at < atoms.len() {
        let end = (at + 1 + (rng.next_u64() % 700) as usize).min(atoms.len());
        index.fold_all(&atoms[at..end]).expect("fold");
        index.seal().expect("seal");
        at = end;
        if rng.chance(100) || (4_000..4_200).contains(&at) {
            assert_eq!(index.root().expect("root"), spec_root(&atoms[..at]), "at {at}");
        }
    }
    assert_eq!(index.root().expect("root"), spec_root(&atoms), "the whole log");
}

/// A log longer than the chunks `fold_all` works in (each prepared while the one before is
/// placed), where subjects and frames first seen in one chunk recur in the next, and subjects
/// too long to be kept inline: built whole and folded in uneven slices, it has the spec's root.
#[test]
fn a_long_log_folded_a_chunk_ahead() {
    let mut rng = SplitMix64::new(14);
    let atoms: Vec<Atom> = sion_testkit::random_atoms(&mut rng, 80_000)
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let mut p = a.into_parts();
            // New subjects all along, old ones recurring.
            p.subject = match i % 5 {
                0 => format!("a-subject-longer-than-twenty-four-bytes-{}", (i * 31) % (i / 100 + 1)),
                1 => String::new(),
                _ => format!("s-{}", (i * 7919) % (i / 10 + 1)),
            };
            if i > 40_000 && i % 7 == 0 {
                p.frame = "a-frame-first-seen-late".into();
            }
            Atom::new(p).expect("valid")
        })
        .collect();
    let root = spec_root(&atoms);
    assert_eq!(Index::build(&atoms).expect("build").root().expect("root"), root, "built whole");
    let mut sliced = Index::new();
    let mut at = 0;
    while at < atoms.len() {
        let end = (at + 1 + (rng.next_u64() % 50_000) as usize).min(atoms.len());
        sliced.fold_all(&atoms[at..end]).expect("fold");
        at = end;
    }
    assert_eq!(sliced.root().expect("root"), root, "folded in slices");
}

/// The writer within a small budget: subjects' buckets and places are let go between seals
/// and read back from the store when their subject comes again, and the roots stay those of
/// the plain implementation.
#[test]
fn a_small_budget_lets_places_go_and_reads_them_back() {
    let mut rng = SplitMix64::new(15);
    let atoms: Vec<Atom> = sion_testkit::random_atoms(&mut rng, 12_000)
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let mut p = a.into_parts();
            // A few subjects that recur in every frame, many that come back now and then.
            p.subject =
                if i % 3 == 0 { format!("robot-{}", i % 4) } else { format!("pallet-{}", (i * 7) % 900) };
            Atom::new(p).expect("valid")
        })
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    let config = sion_index::IndexConfig {
        budget: sion_index::Budget { hot_bytes: 64 << 10 },
        ..sion_index::IndexConfig::default()
    };
    let mut index = Index::create(&dir.path().join("index"), config).expect("create");
    let mut at = 0;
    while at < atoms.len() {
        let end = (at + 1 + (rng.next_u64() % 1_500) as usize).min(atoms.len());
        index.fold_all(&atoms[at..end]).expect("fold");
        at = end;
        if rng.chance(300) {
            assert_eq!(index.root().expect("root"), spec_root(&atoms[..at]), "at {at}");
        }
    }
    assert_eq!(index.root().expect("root"), spec_root(&atoms), "the whole log");
}

/// `n` poses in one bucket (one frame, cell and hour; blocks of 4,096 fill), about `subjects`
/// robots in turn (none if 0).
fn dense_poses(rng: &mut SplitMix64, n: usize, subjects: usize) -> Vec<Atom> {
    (0..n)
        .map(|i| {
            let min = [rng.range(0, 100_000), rng.range(0, 100_000), 0];
            let from = rng.range(0, HOUR / 2);
            let mut p = AtomParts::new(
                Kind::Pose,
                "map",
                BoxMm { min_mm: min, max_mm: [min[0] + 500, min[1] + 500, 1_000] },
                Interval { from_ns: from, to_ns: from + 1_000 },
                Permille(990),
            );
            if subjects > 0 {
                p.subject = format!("robot-{}", i % subjects);
            }
            p.payload = sion_verify::atom::Payload::Text(i.to_string());
            Atom::new(p).expect("valid")
        })
        .collect()
}

/// Poses in one bucket of one hour, as the failure tests fold them.
fn one_dense_bucket(n: usize) -> Vec<Atom> {
    dense_poses(&mut SplitMix64::new(99), n, 0)
}

/// Make every record of the node file unreadable for a while (a failing disk); the returned
/// bytes put it back.
fn fail_reads(nodes: &std::path::Path) -> Vec<u8> {
    use std::os::unix::fs::FileExt as _;
    let bytes = std::fs::read(nodes).expect("read");
    let file = std::fs::OpenOptions::new().write(true).open(nodes).expect("open");
    file.write_all_at(&vec![0u8; bytes.len() - 8], 8).expect("zero");
    bytes
}

fn heal(nodes: &std::path::Path, bytes: &[u8]) {
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::OpenOptions::new().write(true).open(nodes).expect("open");
    file.write_all_at(bytes, 0).expect("write back");
}

fn small_budget() -> sion_index::IndexConfig {
    sion_index::IndexConfig {
        budget: sion_index::Budget { hot_bytes: 16 << 10 },
        ..sion_index::IndexConfig::default()
    }
}

/// A bucket held without its entries reads them back when its block fills; if that read
/// fails, the atom is not taken (the bucket is as it was), and folding it again once the disk
/// reads again gives the spec's root. (From a review: the entry was pushed before the read, so
/// a retry pushed it twice and the block grew past 4,096.)
#[test]
fn a_failed_read_when_a_block_fills_takes_nothing() {
    let atoms = one_dense_bucket(5_000);
    let dir = tempfile::tempdir().expect("tmp");
    let mut index = Index::create(&dir.path().join("index"), small_budget()).expect("create");
    index.fold_all(&atoms[..4_000]).expect("fold");
    index.seal().expect("seal");
    // Taken up again (its record read), holding none of its 4,000 entries.
    index.fold(&atoms[4_000]).expect("fold");
    let nodes = dir.path().join("index").join("nodes");
    let bytes = fail_reads(&nodes);
    let failed = (4_001..4_096).find(|&i| index.fold(&atoms[i]).is_err());
    heal(&nodes, &bytes);
    assert_eq!(failed, Some(4_095), "the fold that fills the block read the failing disk");
    assert_eq!(index.size() as usize, failed.unwrap_or_default(), "the failed atom was not taken");
    let at = index.size() as usize;
    index.fold_all(&atoms[at..]).expect("fold");
    assert_eq!(index.root().expect("root"), spec_root(&atoms));
}

/// The same through `fold_all`, whose two halves (buckets, lists) each read what their atoms
/// need before anything is pushed: the place's block read back when atom 4,095 fills it, and
/// a link target's list (cold, the index opened again) when atom `link_at` links to it, a
/// subject's places (cold too) when atom `subject_at` is about it — after its place's bucket
/// counted it as coming. Whichever fails first, the atoms before its atom are taken whole, it
/// and the rest not at all, and the fold picks up from there to the spec's root (and, in a
/// debug build, no bucket is left counting an atom not taken as coming).
fn fold_of_many_failing(link_at: usize, subject_at: usize) -> u64 {
    let target = one_dense_bucket(1)[0].id();
    let link = sion_verify::atom::Link { rel: sion_verify::atom::LinkRel::Supports, target };
    let atoms: Vec<Atom> = one_dense_bucket(10_000)
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let mut p = a.into_parts();
            if i == 20 || i == link_at {
                p.links.push(link);
            }
            if i == 30 || i == subject_at {
                p.subject = "pallet-7".into();
            }
            Atom::new(p).expect("valid")
        })
        .collect();
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("index");
    let mut index = Index::create(&dir, small_budget()).expect("create");
    index.fold_all(&atoms[..4_000]).expect("fold");
    index.seal().expect("seal");
    index.checkpoint().expect("checkpoint");
    drop(index);
    let config = sion_index::IndexConfig { cache_bytes: 1 << 16, ..small_budget() };
    let (mut index, _) = Index::open(&dir, config).expect("opened again");
    // The place's bucket taken up again, holding none of its 4,000 entries.
    index.fold(&atoms[4_000]).expect("fold");
    let nodes = dir.join("nodes");
    let bytes = fail_reads(&nodes);
    // 4,999 atoms: enough for the fold to run its halves on two cores.
    let failed = index.fold_all(&atoms[4_001..9_000]);
    heal(&nodes, &bytes);
    assert!(failed.is_err(), "the fold read the failing disk");
    let taken = index.size();
    assert_eq!(index.root().expect("root"), spec_root(&atoms[..taken as usize]));
    index.fold_all(&atoms[taken as usize..]).expect("fold");
    assert_eq!(index.root().expect("root"), spec_root(&atoms));
    taken
}

#[test]
fn a_failed_read_in_the_buckets_half_of_a_fold_takes_the_atoms_before_it() {
    assert_eq!(fold_of_many_failing(4_300, 4_400), 4_095, "the atoms before the one that fills the block");
}

#[test]
fn a_failed_read_of_a_subjects_places_in_a_fold_takes_the_atoms_before_it() {
    assert_eq!(fold_of_many_failing(4_300, 4_060), 4_060, "the atoms before the one whose subject is cold");
}

#[test]
fn a_failed_read_in_the_lists_half_of_a_fold_takes_the_atoms_before_it() {
    assert_eq!(
        fold_of_many_failing(4_050, 4_400),
        4_050,
        "the atoms before the one whose link's list is cold"
    );
}

/// Reads that fail in folds again and again (subjects' buckets and link targets' lists, many
/// of them, let go by a small budget and read back when they come again): each version
/// sealed after a failure has the spec's root for exactly the atoms taken.
#[test]
fn folds_failing_again_and_again_take_whole_atoms() {
    let mut rng = SplitMix64::new(23);
    // One place's bucket (taken up again before each failing fold); subjects' buckets and
    // link targets' lists, many of them, let go by the small budget and read back when they
    // come again.
    let targets: Vec<sion_verify::atom::AtomId> = one_dense_bucket(400).iter().map(Atom::id).collect();
    let atoms: Vec<Atom> = dense_poses(&mut rng, 40_000, 0)
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let mut p = a.into_parts();
            if i % 2 == 0 {
                p.subject = format!("pallet-{}", (i * 7) % 400);
            }
            let target = targets[(i * 13) % targets.len()];
            p.links.push(sion_verify::atom::Link { rel: sion_verify::atom::LinkRel::Supports, target });
            Atom::new(p).expect("valid")
        })
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    let config = sion_index::IndexConfig {
        cache_bytes: 1 << 16,
        budget: sion_index::Budget { hot_bytes: 32 << 10 },
        ..sion_index::IndexConfig::default()
    };
    let mut index = Index::create(&dir.path().join("index"), config).expect("create");
    let nodes = dir.path().join("index").join("nodes");
    let (mut failures, mut part_way) = (0, 0);
    while (index.size() as usize) < atoms.len() {
        let at = index.size() as usize;
        // Some folds on one core, some (4,096 atoms or more) on two.
        let end = (at + 300 + (rng.next_u64() % 6_000) as usize).min(atoms.len());
        if at > 0 && rng.chance(333) {
            // A few atoms on a healthy disk first, so that reads fail part-way.
            let healthy = (at + 1 + (rng.next_u64() % 5) as usize).min(atoms.len());
            index.fold_all(&atoms[at..healthy]).expect("fold");
            let at = healthy;
            let bytes = fail_reads(&nodes);
            let folded = index.fold_all(&atoms[at..end]);
            heal(&nodes, &bytes);
            let taken = index.size() as usize;
            assert!((at..=end).contains(&taken), "{at}..{end}: {taken}");
            if folded.is_err() {
                failures += 1;
                part_way += usize::from(taken > at);
                assert!(taken < end, "a failed fold took every atom");
                assert_eq!(
                    index.root().expect("root"),
                    spec_root(&atoms[..taken]),
                    "after a failure at {taken}"
                );
            }
        } else {
            index.fold_all(&atoms[at..end]).expect("fold");
        }
        index.seal().expect("seal");
    }
    assert!(failures >= 3 && part_way >= 1, "{failures} folds met the failing disk, {part_way} part-way");
    assert_eq!(index.root().expect("root"), spec_root(&atoms));
}

/// The node file a build writes is the same byte for byte whether its folds run on one core
/// or two.
#[test]
fn a_build_writes_the_same_node_file_on_one_core_and_two() {
    let mut rng = SplitMix64::new(24);
    let atoms = sion_testkit::random_atoms(&mut rng, 30_000);
    let build = |threads: usize| {
        let dir = tempfile::tempdir().expect("tmp");
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        pool.install(|| {
            let mut index = Index::create(&dir.path().join("index"), small_budget()).expect("create");
            for slice in atoms.chunks(7_000) {
                index.fold_all(slice).expect("fold");
                index.seal().expect("seal");
            }
            index.checkpoint().expect("checkpoint");
        });
        std::fs::read(dir.path().join("index").join("nodes")).expect("read")
    };
    let (one, two) = (build(1), build(2));
    assert!(one.len() > 1 << 20, "{} bytes", one.len());
    assert!(one == two, "the node files differ ({} and {} bytes)", one.len(), two.len());
}

/// A seal that fails to read a bucket's entries back loses none of what was folded: the next
/// seal writes every bucket of the failed one. (From a review: the failed seal's buckets were
/// dropped, and the next root left their atoms out.)
#[test]
fn a_failed_read_in_a_seal_loses_nothing_folded() {
    let atoms = one_dense_bucket(5_000);
    let dir = tempfile::tempdir().expect("tmp");
    let mut index = Index::create(&dir.path().join("index"), small_budget()).expect("create");
    index.fold_all(&atoms[..3_000]).expect("fold");
    index.seal().expect("seal");
    index.fold(&atoms[3_000]).expect("fold");
    let nodes = dir.path().join("index").join("nodes");
    let bytes = fail_reads(&nodes);
    let sealed = index.seal();
    heal(&nodes, &bytes);
    assert!(sealed.is_err(), "the seal read the failing disk");
    assert_eq!(index.root().expect("root"), spec_root(&atoms[..3_001]), "sealed again");
    index.fold_all(&atoms[3_001..]).expect("fold");
    assert_eq!(index.root().expect("root"), spec_root(&atoms));
}

/// A seal that fails past its buckets (here: the disk refuses the write that publishes it)
/// stops the writer — what it holds has moved ahead of the store — and it refuses to fold or
/// seal until the index is opened again; opened again, it resumes from its checkpoint and the
/// atoms folded from there give the spec's root. (From a review: a cell list or map that fails
/// part-way left the writer's state ahead of the store, and a later root could leave atoms out.)
#[test]
fn a_seal_failing_past_its_buckets_stops_the_writer_until_it_is_opened_again() {
    use std::sync::Arc;

    use sion_disk::{Disk, Fault, Faults};
    let atoms = one_dense_bucket(3_200);
    let steps = |dir: &std::path::Path, disk: Disk| {
        let config = sion_index::IndexConfig { disk, ..small_budget() };
        let mut index = Index::create(dir, config).expect("create");
        index.fold_all(&atoms[..3_000]).expect("fold");
        index.seal().expect("seal");
        index.checkpoint().expect("checkpoint");
        index
    };
    let counting = Arc::new(Faults::new());
    let dry = tempfile::tempdir().expect("tmp");
    let healthy = steps(&dry.path().join("index"), Disk::new(counting.clone()));
    let first_of_the_next_seal = counting.changes();
    drop(healthy);

    let faults = Arc::new(Faults::new());
    faults.fail_at(first_of_the_next_seal, Fault::Io, true);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("index");
    let mut index = steps(&dir, Disk::new(faults.clone()));
    index.fold_all(&atoms[3_000..3_100]).expect("fold");
    let failed = index.seal().expect_err("the disk refused the seal's write");
    assert!(faults.injected() >= 1);
    assert!(!matches!(failed, sion_index::IndexError::Interrupted(_)), "{failed}");
    for refused in [index.fold(&atoms[3_100]).map(|_| ()), index.seal().map(|_| ())] {
        assert!(matches!(refused, Err(sion_index::IndexError::Interrupted(_))), "{refused:?}");
    }
    drop(index);
    faults.heal();
    let (mut index, _) = Index::open(&dir, small_budget()).expect("opened again");
    assert_eq!(index.size(), 3_000, "from its checkpoint");
    index.fold_all(&atoms[3_000..]).expect("fold");
    assert_eq!(index.root().expect("root"), spec_root(&atoms));
}
