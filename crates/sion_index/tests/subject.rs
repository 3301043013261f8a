//! Questions about one subject (docs/INDEX.md version 4, "Places"): range, count and latest
//! answers about a subject equal a scan's on random logs, their proofs verify after a round
//! trip through their bytes, and proofs that change the subject, or show its place as
//! another's, are refused. A question about one subject in a crowd of others grows with what
//! matches, not with the crowd.

use proptest::prelude::*;
use sion_index::geom::Query;
use sion_index::tree::{GroupEntry, Step};
use sion_index::{HOUR_NS, Index};
use sion_sim::SplitMix64;
use sion_testkit::{FRAMES, random_atoms};
use sion_verify::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Permille};
use sion_verify::index::{PlaceLeaf, Places, Version};
use sion_verify::proof::{CountProof, Counted, LatestProof, RangeProof};
use sion_verify::wire::Reader;

const SUBJECTS: [&str; 6] = ["pallet-17", "pallet-18", "person", "forklift-2", "a", "dock door"];

/// Random atoms, a third of them about one of six subjects (the rest as made: most about
/// pallets of their own).
fn atoms_with_subjects(rng: &mut SplitMix64, n: usize) -> Vec<Atom> {
    random_atoms(rng, n)
        .into_iter()
        .map(|a| {
            if !rng.chance(333) {
                return a;
            }
            let mut p = a.parts().clone();
            p.subject = SUBJECTS[(rng.next_u64() % 6) as usize].to_owned();
            Atom::new(p).expect("valid")
        })
        .collect()
}

fn question(rng: &mut SplitMix64) -> Query {
    let frame = if rng.chance(30) { "nowhere" } else { FRAMES[(rng.next_u64() % 3) as usize] };
    let min = [rng.range(-6_000, 6_000), rng.range(-6_000, 6_000), rng.range(-500, 3_500)];
    let size = if rng.chance(333) {
        [40_000, 40_000, 20_000]
    } else {
        [rng.range(0, 5_000), rng.range(0, 5_000), rng.range(0, 2_000)]
    };
    let from = rng.range(-HOUR_NS, 7 * HOUR_NS);
    let to = if rng.chance(50) { from } else { from + rng.range(1, 3 * HOUR_NS) };
    let bounds = BoxMm { min_mm: min, max_mm: [min[0] + size[0], min[1] + size[1], min[2] + size[2]] };
    let mut q = Query::new(frame, bounds, from, to).expect("query");
    if rng.chance(333) {
        q = q.with_kinds(1 << (rng.next_u64() % 17) | 1 << (rng.next_u64() % 17)).expect("kinds");
    }
    // One question in ten about a subject no atom has.
    let subject = if rng.chance(100) { "pallet-99" } else { SUBJECTS[(rng.next_u64() % 6) as usize] };
    q.with_subject(subject).expect("subject")
}

fn brute(atoms: &[Atom], q: &Query) -> Vec<u64> {
    atoms.iter().enumerate().filter(|(_, a)| q.matches(a.parts())).map(|(i, _)| i as u64).collect()
}

fn brute_count(atoms: &[Atom], q: &Query) -> Counted {
    let mut c = Counted::default();
    for a in atoms.iter().filter(|a| q.matches(a.parts())) {
        let v = a.parts().valid;
        let (from, to) = (v.from_ns.max(q.from_ns), v.to_ns.min(q.to_ns));
        c.count += 1;
        c.duration_ns += (to - from) as u128;
        c.span = Some(c.span.map_or((from, to), |(f, t)| (f.min(from), t.max(to))));
    }
    c
}

fn range_proof(index: &mut Index, atoms: &[Atom], q: &Query) -> RangeProof {
    let answer = index.range(q).expect("range");
    let chosen = answer.positions.iter().map(|p| (*p, atoms[*p as usize].bytes().to_vec())).collect();
    RangeProof { query: q.clone(), atoms: chosen, answer }
}

fn roundtrip<T>(put: impl Fn(&mut Vec<u8>), read: impl Fn(&mut Reader<'_>) -> T) -> T {
    let mut bytes = Vec::new();
    put(&mut bytes);
    let mut r = Reader::new(&bytes);
    let back = read(&mut r);
    r.finish().expect("nothing trails");
    back
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn answers_about_a_subject_equal_a_scan_and_prove_it(seed in any::<u64>(), n in 1usize..1500) {
        let mut rng = SplitMix64::new(seed);
        let atoms = atoms_with_subjects(&mut rng, n);
        let mut index = Index::build(&atoms).expect("build");
        let root = index.root().expect("root");
        let snapshot = index.snapshot().expect("snapshot");
        for _ in 0..15 {
            let q = question(&mut rng);
            // Range.
            let proof = range_proof(&mut index, &atoms, &q);
            prop_assert_eq!(&proof.answer.positions, &brute(&atoms, &q), "{:?}", q);
            let back = roundtrip(|o| proof.put(o), |r| RangeProof::read(r, Version::V4).expect("decodes"));
            let got: Vec<u64> = back.verify(&root, n as u64).expect("verifies").iter().map(|(p, _)| *p).collect();
            prop_assert_eq!(&got, &brute(&atoms, &q));
            // The same walks, said to answer the question about another subject or about every
            // one, are refused — unless that is the right answer to it too (two subjects with no
            // atom are shown absent by the same leaf).
            for subject in [Some("person"), Some("a"), None] {
                let mut other = proof.clone();
                other.query.subject = subject.map(str::to_owned);
                if other.query == q {
                    continue;
                }
                if let Ok(answer) = other.verify(&root, n as u64) {
                    let got: Vec<u64> = answer.iter().map(|(p, _)| *p).collect();
                    prop_assert_eq!(got, brute(&atoms, &other.query), "{:?} proved as {:?}", q, subject);
                }
            }
            // The subject's own place shown as another's.
            if let Places::Subject(place) = &proof.answer.places
                && place.leaf == PlaceLeaf::Found
            {
                let mut hidden = proof.clone();
                if let Places::Subject(p) = &mut hidden.answer.places {
                    p.leaf = PlaceLeaf::Other { key: [7; 32], frames: 1, root: [1; 32] };
                }
                prop_assert!(hidden.verify(&root, n as u64).is_err(), "a place shown as another's");
            }
            // Count.
            let (counted, answer) = snapshot.count(&q).expect("count");
            prop_assert_eq!(counted, brute_count(&atoms, &q), "{:?}", q);
            let count = CountProof { query: q.clone(), counted, answer };
            let back = roundtrip(|o| count.put(o), |r| CountProof::read(r, Version::V4).expect("decodes"));
            prop_assert_eq!(back.verify(&root, n as u64).expect("verifies"), counted);
            // Latest.
            let (latest, answer) = snapshot.latest(&q).expect("latest");
            let expected = atoms
                .iter()
                .enumerate()
                .filter(|(_, a)| q.matches(a.parts()))
                .max_by_key(|(i, a)| (a.parts().valid.to_ns, *i))
                .map(|(i, _)| i as u64);
            prop_assert_eq!(latest, expected, "{:?}", q);
            let proof = LatestProof {
                query: q.clone(),
                atom: latest.map(|p| (p, atoms[p as usize].bytes().to_vec())),
                answer,
            };
            let back = roundtrip(|o| proof.put(o), |r| LatestProof::read(r, Version::V4).expect("decodes"));
            prop_assert_eq!(back.verify(&root, n as u64).expect("verifies").map(|(p, _)| p), latest);
        }
    }
}

/// A question about one pallet in a box crowded with others' atoms: the proof walks the
/// pallet's own tree, so it grows with the pallet's atoms, not with the crowd.
#[test]
fn a_question_about_a_subject_does_not_walk_the_crowd() {
    let mut rng = SplitMix64::new(11);
    let atoms: Vec<Atom> = (0..8_000)
        .map(|i| {
            let at = [rng.range(0, 20_000), rng.range(0, 20_000), 0];
            let from = rng.range(0, HOUR_NS / 2);
            let mut p = AtomParts::new(
                Kind::Observation,
                "map",
                BoxMm { min_mm: at, max_mm: [at[0] + 100, at[1] + 100, 100] },
                Interval { from_ns: from, to_ns: from + 1_000_000 },
                Permille(900),
            );
            p.subject = if i % 100 == 0 { "pallet-17".into() } else { format!("box-{}", i % 50) };
            Atom::new(p).expect("valid")
        })
        .collect();
    let mut index = Index::build(&atoms).expect("build");
    let root = index.root().expect("root");
    let everything = Query::new("map", BoxMm { min_mm: [0; 3], max_mm: [20_000, 20_000, 100] }, 0, HOUR_NS)
        .expect("query");
    let pallet = everything.clone().with_subject("pallet-17").expect("subject");
    let all = range_proof(&mut index, &atoms, &everything);
    let one = range_proof(&mut index, &atoms, &pallet);
    assert_eq!(one.answer.positions, brute(&atoms, &pallet));
    assert_eq!(one.answer.positions.len(), 80);
    one.verify(&root, atoms.len() as u64).expect("verifies");
    let walked = |p: &RangeProof| p.answer.short.iter().flatten().count();
    let (one_steps, all_steps) = (walked(&one), walked(&all));
    assert!(one_steps * 20 < all_steps, "{one_steps} steps for the pallet, {all_steps} for all");
    let misses = one
        .answer
        .short
        .iter()
        .flatten()
        .filter_map(|s| if let Step::Group(g) = s { Some(g) } else { None })
        .flatten()
        .filter(|e| matches!(e, GroupEntry::Miss(_)))
        .count();
    assert_eq!(misses, 0, "no other subject's atom is shown to the question about the pallet");
}
