//! Latest and nearest answers against brute force on random logs (docs/PROOFS.md, kinds 7 and
//! 8): the answer is the one a scan ranks first, its proof verifies, and proofs that leave out
//! a later or nearer atom, or rank their answer wrongly, are refused.

use proptest::prelude::*;
use sion_index::geom::{Query, SpaceTime};
use sion_index::tree::{GroupEntry, Step};
use sion_index::{HOUR_NS, Index};
use sion_sim::SplitMix64;
use sion_testkit::{FRAMES, random_atoms};
use sion_verify::atom::{Atom, BoxMm};
use sion_verify::proof::{LatestProof, NearQuery, NearestProof};
use sion_verify::wire::Reader;

fn random_box(rng: &mut SplitMix64) -> BoxMm {
    let min = [rng.range(-6_000, 6_000), rng.range(-6_000, 6_000), rng.range(-500, 3_500)];
    let size = [rng.range(0, 6_000), rng.range(0, 6_000), rng.range(0, 3_000)];
    BoxMm { min_mm: min, max_mm: [min[0] + size[0], min[1] + size[1], min[2] + size[2]] }
}

fn frame(rng: &mut SplitMix64) -> &'static str {
    if rng.chance(50) { "nowhere" } else { FRAMES[(rng.next_u64() % 3) as usize] }
}

fn interval(rng: &mut SplitMix64) -> (i64, i64) {
    let from = rng.range(-HOUR_NS, 7 * HOUR_NS);
    (from, if rng.chance(100) { from } else { from + rng.range(1, 3 * HOUR_NS) })
}

/// The latest by brute force: the greatest (end of valid time, position) that answers.
fn latest_brute(atoms: &[Atom], q: &Query) -> Option<u64> {
    atoms
        .iter()
        .enumerate()
        .filter(|(_, a)| q.matches(a.parts()))
        .max_by_key(|(i, a)| (a.parts().valid.to_ns, *i))
        .map(|(i, _)| i as u64)
}

/// The nearest by brute force: the first k by (distance², position) of the frame's atoms
/// valid during the interval.
fn nearest_brute(atoms: &[Atom], q: &NearQuery) -> Vec<u64> {
    let mut ranked: Vec<(u128, u64)> = atoms
        .iter()
        .enumerate()
        .filter(|(_, a)| a.parts().frame == q.frame && q.during(&SpaceTime::of_atom(a.parts())))
        .map(|(i, a)| (q.distance2(&SpaceTime::of_atom(a.parts())), i as u64))
        .collect();
    ranked.sort_unstable();
    ranked.into_iter().take(q.k as usize).map(|(_, p)| p).collect()
}

fn roundtrip_latest(p: &LatestProof) -> LatestProof {
    let mut bytes = Vec::new();
    p.put(&mut bytes);
    let mut r = Reader::new(&bytes);
    let back = LatestProof::read(&mut r, sion_verify::index::Version::V4).expect("decodes");
    r.finish().expect("nothing trails");
    back
}

fn roundtrip_nearest(p: &NearestProof) -> NearestProof {
    let mut bytes = Vec::new();
    p.put(&mut bytes);
    let mut r = Reader::new(&bytes);
    let back = NearestProof::read(&mut r, sion_verify::index::Version::V4).expect("decodes");
    r.finish().expect("nothing trails");
    back
}

fn bytes_of(atoms: &[Atom], p: u64) -> (u64, Vec<u8>) {
    (p, atoms[p as usize].bytes().to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn latest_is_what_a_scan_ranks_first_and_proves_it(seed in any::<u64>(), n in 1usize..1200) {
        let mut rng = SplitMix64::new(seed);
        let atoms = random_atoms(&mut rng, n);
        let mut index = Index::build(&atoms).expect("build");
        let root = index.root().expect("root");
        let snapshot = index.snapshot().expect("snapshot");
        for _ in 0..12 {
            let (from, to) = interval(&mut rng);
            let mut q = Query::new(frame(&mut rng), random_box(&mut rng), from, to).expect("query");
            // Half the questions are about one or two kinds ("where was a person last seen").
            if rng.chance(500) {
                let kinds = 1u32 << (rng.next_u64() % 17) | 1 << (rng.next_u64() % 17);
                q = q.with_kinds(kinds).expect("kinds");
            }
            let (found, answer) = snapshot.latest(&q).expect("latest");
            prop_assert_eq!(found, latest_brute(&atoms, &q), "{:?}", q);
            let proof = LatestProof { query: q.clone(), atom: found.map(|p| bytes_of(&atoms, p)), answer };
            let back = roundtrip_latest(&proof);
            let got = back.verify(&root, n as u64).expect("verifies");
            prop_assert_eq!(got.map(|(p, _)| p), found);
            // With a small bound on each walk, the search narrows its step rather than give
            // up where the final walk fits: the answer is the same, or the question is refused
            // as too large, never wrong.
            match snapshot.latest_within(&q, 24) {
                Ok((small, _)) => prop_assert_eq!(small, found),
                Err(e) => prop_assert!(matches!(e, sion_index::IndexError::TooLarge(_)), "{e}"),
            }
            if let Some(best) = found {
                // Another answering atom in its place (an earlier one) is refused: the walk
                // does not reach it as the answer, or passes over the later one.
                if let Some(other) = (0..n as u64).find(|&p| p != best && q.matches(atoms[p as usize].parts())) {
                    let mut forged = proof.clone();
                    forged.atom = Some(bytes_of(&atoms, other));
                    prop_assert!(forged.verify(&root, n as u64).is_err(), "a forged latest verifies");
                }
                // Claiming nothing answers is refused.
                let mut empty = proof.clone();
                empty.atom = None;
                empty.answer.positions.clear();
                prop_assert!(empty.verify(&root, n as u64).is_err(), "an emptied latest verifies");
            }
        }
    }

    #[test]
    fn nearest_is_what_a_scan_ranks_first_and_proves_it(seed in any::<u64>(), n in 1usize..1200) {
        let mut rng = SplitMix64::new(seed);
        let atoms = random_atoms(&mut rng, n);
        let mut index = Index::build(&atoms).expect("build");
        let root = index.root().expect("root");
        let snapshot = index.snapshot().expect("snapshot");
        for _ in 0..12 {
            let (from, to) = interval(&mut rng);
            let point = [rng.range(-8_000, 8_000), rng.range(-8_000, 8_000), rng.range(-1_000, 4_000)];
            let k = 1 + (rng.next_u64() % 12) as u32;
            let q = NearQuery::new(frame(&mut rng), point, from, to, k).expect("query");
            let (found, answer) = snapshot.nearest(&q).expect("nearest");
            prop_assert_eq!(&found, &nearest_brute(&atoms, &q), "{:?}", q);
            let proof = NearestProof {
                query: q.clone(),
                atoms: found.iter().map(|p| bytes_of(&atoms, *p)).collect(),
                answer,
            };
            let back = roundtrip_nearest(&proof);
            let got = back.verify(&root, n as u64).expect("verifies");
            prop_assert_eq!(got.iter().map(|(p, _, _)| *p).collect::<Vec<_>>(), found.clone());
            if found.len() >= 2 {
                // The answer out of rank order is refused.
                let mut swapped = proof.clone();
                swapped.atoms.swap(0, 1);
                prop_assert!(swapped.verify(&root, n as u64).is_err(), "a misordered nearest verifies");
            }
            if let Some(last) = found.last() {
                // Dropping the farthest answer (claiming fewer than k, or a closer k-th) is
                // refused: the walk still reaches it.
                let mut fewer = proof.clone();
                fewer.atoms.pop();
                fewer.answer.positions.retain(|p| p != last);
                for walk in [&mut fewer.answer.short, &mut fewer.answer.long].into_iter().flatten() {
                    for step in walk.iter_mut() {
                        if let Step::Group(g) = step {
                            for e in g.iter_mut() {
                                if matches!(e, GroupEntry::Hit(p) if p == last) {
                                    let a = &atoms[*last as usize];
                                    *e = GroupEntry::Miss(sion_index::tree::Entry {
                                        position: *last,
                                        id: a.id(),
                                        bbox: SpaceTime::of_atom(a.parts()),
                                        kind: a.kind().code(),
                                    });
                                }
                            }
                        }
                    }
                }
                prop_assert!(fewer.verify(&root, n as u64).is_err(), "a nearest without its k-th verifies");
            }
        }
    }
}
