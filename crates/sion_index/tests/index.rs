//! The index against brute force: on random logs and random queries every answer equals a
//! scan, every proof verifies, incremental sealing gives the root of a fresh build, and
//! mutated proofs are refused.

use sion_index::geom::Query;
use sion_index::tree::{GroupEntry, Step};
use sion_index::{HOUR_NS, Index};
use sion_sim::SplitMix64;
use sion_testkit::{FRAMES, random_atoms};
use sion_verify::atom::{Atom, BoxMm};
use sion_verify::proof::{ListKey, ListProof, RangeProof, VerifyError};

fn random_query(rng: &mut SplitMix64) -> Query {
    let frame = if rng.chance(50) { "nowhere" } else { FRAMES[(rng.next_u64() % 3) as usize] };
    let min = [rng.range(-6_000, 6_000), rng.range(-6_000, 6_000), rng.range(-500, 3_500)];
    let size = [rng.range(0, 4_000), rng.range(0, 4_000), rng.range(0, 2_000)];
    let from = rng.range(-HOUR_NS, 7 * HOUR_NS);
    let to = if rng.chance(100) { from } else { from + rng.range(1, 2 * HOUR_NS) };
    let q = Query::new(
        frame,
        BoxMm { min_mm: min, max_mm: [min[0] + size[0], min[1] + size[1], min[2] + size[2]] },
        from,
        to,
    )
    .expect("valid query");
    // Half the questions name one to three kinds (`chance` is in permille).
    if rng.chance(500) {
        let kinds = (0..1 + rng.next_u64() % 3).fold(0u32, |m, _| m | 1 << (rng.next_u64() % 17));
        return q.with_kinds(kinds).expect("kinds");
    }
    q
}

fn brute_force(atoms: &[Atom], size: usize, q: &Query) -> Vec<u64> {
    atoms[..size].iter().enumerate().filter(|(_, a)| q.matches(a.parts())).map(|(i, _)| i as u64).collect()
}

fn range_proof(index: &mut Index, atoms: &[Atom], q: &Query) -> RangeProof {
    let answer = index.range(q).expect("range");
    let chosen = answer.positions.iter().map(|p| (*p, atoms[*p as usize].bytes().to_vec())).collect();
    RangeProof { query: q.clone(), atoms: chosen, answer }
}

fn encode(p: &RangeProof) -> Vec<u8> {
    let mut out = Vec::new();
    p.put(&mut out);
    out
}

fn decode(bytes: &[u8]) -> Option<RangeProof> {
    let mut r = sion_verify::wire::Reader::new(bytes);
    let p = RangeProof::read(&mut r, sion_verify::index::Version::V4).ok()?;
    r.finish().ok()?;
    Some(p)
}

#[test]
fn answers_equal_brute_force_and_proofs_verify() {
    let mut rng = SplitMix64::new(1);
    for round in 0..12 {
        let n = 50 + (rng.next_u64() % 1500) as usize;
        let atoms = random_atoms(&mut rng, n);
        let mut index = Index::new();
        let mut folded = 0;
        while folded < n {
            // Seal at random sizes: the incremental root must equal a fresh build's.
            let step = 1 + (rng.next_u64() % 300) as usize;
            for a in &atoms[folded..(folded + step).min(n)] {
                index.fold(a).expect("fold");
            }
            folded = (folded + step).min(n);
            let root = index.root().expect("root");
            assert_eq!(
                root,
                Index::build(&atoms[..folded]).expect("build").root().expect("root"),
                "round {round}, size {folded}"
            );
            for _ in 0..20 {
                let q = random_query(&mut rng);
                let proof = range_proof(&mut index, &atoms, &q);
                assert_eq!(proof.answer.positions, brute_force(&atoms, folded, &q), "round {round}: {q:?}");
                let bytes = encode(&proof);
                let back = decode(&bytes).expect("decodes");
                let answer = back.verify(&root, folded as u64).expect("verifies");
                let got: Vec<u64> = answer.iter().map(|(p, _)| *p).collect();
                assert_eq!(got, brute_force(&atoms, folded, &q));
            }
        }
    }
}

/// A question about one kind in a box crowded with another: the proof passes over the crowd's
/// buckets whole, so it grows with what matches (a few observations), not with the poses.
#[test]
fn a_question_about_a_kind_passes_over_the_others_whole() {
    use sion_verify::atom::{AtomParts, Interval, Kind, Permille};
    let mut rng = SplitMix64::new(5);
    let atoms: Vec<Atom> = (0..6_000)
        .map(|i| {
            let kind = if i % 100 == 0 { Kind::Observation } else { Kind::Pose };
            let at = [rng.range(0, 20_000), rng.range(0, 20_000), 0];
            let from = rng.range(0, HOUR_NS / 2);
            let p = AtomParts::new(
                kind,
                "map",
                BoxMm { min_mm: at, max_mm: [at[0] + 100, at[1] + 100, 100] },
                Interval { from_ns: from, to_ns: from + 1_000_000 },
                Permille(900),
            );
            Atom::new(p).expect("valid")
        })
        .collect();
    let mut index = Index::build(&atoms).expect("build");
    let root = index.root().expect("root");
    let everything = Query::new("map", BoxMm { min_mm: [0; 3], max_mm: [20_000, 20_000, 100] }, 0, HOUR_NS)
        .expect("query");
    let observations = everything.clone().with_kinds(1 << Kind::Observation.code()).expect("kinds");
    let all = range_proof(&mut index, &atoms, &everything);
    let some = range_proof(&mut index, &atoms, &observations);
    assert_eq!(some.answer.positions, brute_force(&atoms, atoms.len(), &observations));
    assert_eq!(some.answer.positions.len(), 60);
    some.verify(&root, atoms.len() as u64).expect("verifies");
    let walked = |p: &RangeProof| p.answer.short.iter().flatten().count();
    // The 60 observations' groups and the paths to them, not the 5,940 poses' (sizes without
    // the atoms, which travel with either answer).
    let (some_steps, all_steps) = (walked(&some), walked(&all));
    assert!(some_steps * 10 < all_steps, "{some_steps} steps for the observations, {all_steps} for all");
    let misses = |p: &RangeProof| {
        p.answer
            .short
            .iter()
            .flatten()
            .filter_map(|s| if let Step::Group(g) = s { Some(g) } else { None })
            .flatten()
            .filter(|e| matches!(e, GroupEntry::Miss(_)))
            .count()
    };
    assert_eq!(misses(&some), 0, "no pose is shown to the question about observations");
}

#[test]
fn subject_and_link_lists_are_complete() {
    let mut rng = SplitMix64::new(2);
    let atoms = random_atoms(&mut rng, 800);
    let mut index = Index::build(&atoms).expect("build");
    let root = index.root().expect("root");
    for s in (0..14).map(|i| format!("pallet-{i}")) {
        let answer = index.subject(&s).expect("subject");
        let expected: Vec<u64> =
            atoms.iter().enumerate().filter(|(_, a)| a.parts().subject == s).map(|(i, _)| i as u64).collect();
        assert_eq!(answer.positions, expected);
        let proof = ListProof {
            key: ListKey::Subject(s.clone()),
            atoms: answer.positions.iter().map(|p| (*p, atoms[*p as usize].bytes().to_vec())).collect(),
            answer,
        };
        let got = proof.verify(&root, 800).expect("subject proof verifies");
        assert_eq!(got.len(), expected.len());
        if !expected.is_empty() {
            let mut short = proof.clone();
            short.atoms.pop();
            assert!(short.verify(&root, 800).is_err(), "a result removed");
        }
    }
    for target in atoms.iter().take(60) {
        let answer = index.links(&target.id()).expect("links");
        let expected: Vec<u64> = atoms
            .iter()
            .enumerate()
            .filter(|(_, a)| a.parts().links.iter().any(|l| l.target == target.id()))
            .map(|(i, _)| i as u64)
            .collect();
        assert_eq!(answer.positions, expected);
        let proof = ListProof {
            key: ListKey::LinksTo(target.id()),
            atoms: answer.positions.iter().map(|p| (*p, atoms[*p as usize].bytes().to_vec())).collect(),
            answer,
        };
        proof.verify(&root, 800).expect("link proof verifies");
    }
}

/// Every way of tampering with a proof named in the issue, on one proof with hits and misses.
#[test]
fn mutated_range_proofs_are_refused() {
    let mut rng = SplitMix64::new(3);
    let atoms = random_atoms(&mut rng, 1200);
    let mut index = Index::build(&atoms).expect("build");
    let root = index.root().expect("root");
    let mut tried = 0;
    while tried < 8 {
        let q = random_query(&mut rng);
        let proof = range_proof(&mut index, &atoms, &q);
        if proof.answer.positions.len() < 2 || proof.answer.short.is_none() {
            continue;
        }
        tried += 1;
        let refused = |p: &RangeProof, what: &str| {
            assert!(p.verify(&root, 1200).is_err(), "{what} was accepted");
        };
        // A different head.
        assert!(proof.verify(&[7; 32], 1200).is_err());
        assert!(matches!(proof.verify(&root, 3), Err(VerifyError::Range(_))));
        // A result removed, added, or swapped for another atom.
        let mut p = proof.clone();
        p.atoms.remove(0);
        refused(&p, "a removed result");
        let mut p = proof.clone();
        let extra = (0..1200u64).find(|i| !proof.answer.positions.contains(i)).expect("one");
        p.atoms.push((extra, atoms[extra as usize].bytes().to_vec()));
        p.atoms.sort();
        refused(&p, "an added result");
        let mut p = proof.clone();
        p.atoms[0].1 = atoms[(p.atoms[0].0 as usize + 1) % 1200].bytes().to_vec();
        refused(&p, "a swapped atom");
        // Tree steps: drop, duplicate, swap children, widen and shrink boxes, flip digests.
        let steps = proof.answer.short.clone().expect("short");
        for i in 0..steps.len() {
            let mut s = steps.clone();
            s.remove(i);
            let mut p = proof.clone();
            p.answer.short = Some(s);
            refused(&p, "a dropped node");
            let mut s = steps.clone();
            s.insert(i, steps[i].clone());
            let mut p = proof.clone();
            p.answer.short = Some(s);
            refused(&p, "a duplicated node");
            match &steps[i] {
                Step::Pruned(sum) => {
                    for (grow, shrink) in [(1, 0), (0, 1)] {
                        let mut sum = *sum;
                        sum.bbox.max_mm[0] += grow;
                        sum.bbox.min_mm[1] += shrink;
                        let mut s = steps.clone();
                        s[i] = Step::Pruned(sum);
                        let mut p = proof.clone();
                        p.answer.short = Some(s);
                        refused(&p, "a widened or shrunk box");
                    }
                    let mut sum = *sum;
                    sum.digest[3] ^= 0x20;
                    let mut s = steps.clone();
                    s[i] = Step::Pruned(sum);
                    let mut p = proof.clone();
                    p.answer.short = Some(s);
                    refused(&p, "a flipped digest");
                }
                Step::Group(group) => {
                    for (j, entry) in group.iter().enumerate() {
                        let mut altered = group.clone();
                        match entry {
                            GroupEntry::Miss(e) => {
                                let mut e = *e;
                                e.bbox.to_ns -= 1;
                                altered[j] = GroupEntry::Miss(e);
                            }
                            GroupEntry::Hit(_) => {
                                altered.remove(j);
                            }
                        }
                        let mut s = steps.clone();
                        s[i] = Step::Group(altered);
                        let mut p = proof.clone();
                        p.answer.short = Some(s);
                        refused(&p, "a shrunk or dropped group entry");
                    }
                }
                Step::Interior(bbox) => {
                    // The box its children's boxes are coded against, wider or narrower than
                    // their union.
                    for (grow, shrink) in [(1, 0), (0, 1)] {
                        let mut bbox = *bbox;
                        bbox.min_mm[2] -= grow;
                        bbox.to_ns -= shrink;
                        let mut s = steps.clone();
                        s[i] = Step::Interior(bbox);
                        let mut p = proof.clone();
                        p.answer.short = Some(s);
                        refused(&p, "an interior box that is not its children's union");
                    }
                }
                Step::Whole(sum) => {
                    // A range proof takes nothing whole: a pruned node made whole is refused.
                    let mut s = steps.clone();
                    s[i] = Step::Whole(*sum);
                    let mut p = proof.clone();
                    p.answer.short = Some(s);
                    refused(&p, "a subtree taken whole in a range proof");
                }
            }
            if let Step::Pruned(sum) = &steps[i] {
                let mut s = steps.clone();
                s[i] = Step::Whole(*sum);
                let mut p = proof.clone();
                p.answer.short = Some(s);
                refused(&p, "a pruned subtree taken whole in a range proof");
            }
        }
        // Swapped children: the subtrees under the first interior node exchanged.
        if let Some(first) = steps.iter().position(|s| matches!(s, Step::Interior(_))) {
            let (left_end, _) = subtree_end(&steps, first + 1);
            let (right_end, _) = subtree_end(&steps, left_end);
            let mut s = steps[..first + 1].to_vec();
            s.extend_from_slice(&steps[left_end..right_end]);
            s.extend_from_slice(&steps[first + 1..left_end]);
            s.extend_from_slice(&steps[right_end..]);
            if s != steps {
                let mut p = proof.clone();
                p.answer.short = Some(s);
                refused(&p, "swapped children");
            }
        }
        // Every bit of the encoding: no flip proves the asked query's answer (a flip inside
        // the query may prove some other query's answer, which is not a proof of this one).
        let bytes = encode(&proof);
        for i in (0..bytes.len()).step_by(3) {
            let mut b = bytes.clone();
            b[i] ^= 1 << (i % 8);
            if let Some(p) = decode(&b) {
                let proves_it = p.query == proof.query && p.verify(&root, 1200).is_ok();
                assert!(!proves_it, "bit flip at byte {i} of {} was accepted", bytes.len());
            }
        }
    }
}

fn subtree_end(steps: &[Step], at: usize) -> (usize, ()) {
    match steps[at] {
        Step::Interior(_) => {
            let (l, _) = subtree_end(steps, at + 1);
            subtree_end(steps, l)
        }
        _ => (at + 1, ()),
    }
}

#[test]
fn empty_answers_are_proved_too() {
    let mut rng = SplitMix64::new(4);
    let atoms = random_atoms(&mut rng, 300);
    let mut index = Index::build(&atoms).expect("build");
    let root = index.root().expect("root");
    // An empty frame, a box far away, and an index with nothing at all.
    for q in [
        Query::new("aaa", BoxMm { min_mm: [0; 3], max_mm: [1; 3] }, 0, 10).expect("q"),
        Query::new("zzz", BoxMm { min_mm: [0; 3], max_mm: [1; 3] }, 0, 10).expect("q"),
        Query::new("nope", BoxMm { min_mm: [0; 3], max_mm: [1; 3] }, 0, 10).expect("q"),
        Query::new("map", BoxMm { min_mm: [90_000; 3], max_mm: [91_000; 3] }, 0, HOUR_NS).expect("q"),
    ] {
        let proof = range_proof(&mut index, &atoms, &q);
        assert!(proof.answer.positions.is_empty());
        assert!(decode(&encode(&proof)).expect("decodes").verify(&root, 300).expect("verifies").is_empty());
    }
    let mut empty = Index::new();
    let root = empty.root().expect("root");
    let q = Query::new("map", BoxMm { min_mm: [0; 3], max_mm: [1; 3] }, 0, 10).expect("q");
    let proof = range_proof(&mut empty, &[], &q);
    assert!(proof.verify(&root, 0).expect("verifies").is_empty());
}

/// An answer big enough to be decoded on every core, its walk long: `verify` agrees with
/// `verify_walk` (which tells each node as it is checked) on the answer and on every refusal,
/// the same error first, and each refusal is the same every time it is checked (a walk split
/// between two threads once named whichever fault a thread reached first).
#[test]
fn big_answers_decoded_on_every_core_are_refused_as_on_one() {
    let mut rng = SplitMix64::new(9);
    let atoms = random_atoms(&mut rng, 24_000);
    let n = atoms.len() as u64;
    let mut index = Index::build(&atoms).expect("build");
    let root = index.root().expect("root");
    let q = Query::new(
        FRAMES[0],
        BoxMm { min_mm: [-6_000, -6_000, -500], max_mm: [7_000, 7_000, 4_500] },
        -HOUR_NS,
        7 * HOUR_NS,
    )
    .expect("valid query");
    let proof = range_proof(&mut index, &atoms, &q);
    let steps = proof.answer.short.clone().expect("short");
    assert!(
        steps.len() >= 2_000 && proof.atoms.len() >= sion_verify::proof::PARALLEL_ATOMS,
        "{} steps, {} atoms",
        steps.len(),
        proof.atoms.len()
    );
    let both = |p: &RangeProof| {
        let parallel = p.verify(&root, n).map(|a| a.into_iter().map(|(p, _)| p).collect::<Vec<_>>());
        let serial =
            p.verify_walk(&root, n, |_| {}).map(|a| a.into_iter().map(|(p, _)| p).collect::<Vec<_>>());
        assert_eq!(format!("{parallel:?}"), format!("{serial:?}"));
        for _ in 0..3 {
            let again = p.verify(&root, n).map(|a| a.into_iter().map(|(p, _)| p).collect::<Vec<_>>());
            assert_eq!(format!("{again:?}"), format!("{parallel:?}"));
        }
        parallel
    };
    assert_eq!(both(&proof).expect("verifies"), brute_force(&atoms, atoms.len(), &q));
    // Mutations all along the walk.
    for i in (0..steps.len()).step_by(steps.len() / 40) {
        let mut s = steps.clone();
        match &mut s[i] {
            Step::Pruned(sum) | Step::Whole(sum) => sum.digest[0] ^= 1,
            Step::Group(group) => match &mut group[0] {
                GroupEntry::Miss(e) => e.bbox.max_mm[2] += 1,
                GroupEntry::Hit(p) => *p += 1,
            },
            Step::Interior(_) => {
                s.remove(i);
            }
        }
        let mut p = proof.clone();
        p.answer.short = Some(s);
        assert!(both(&p).is_err(), "a mutation at step {i} was accepted");
    }
    // An answer atom reached twice, far apart in the walk.
    let mut s = steps.clone();
    let hits: Vec<usize> = (0..s.len())
        .filter(|&i| matches!(&s[i], Step::Group(g) if g.iter().any(|e| matches!(e, GroupEntry::Hit(_)))))
        .collect();
    let (first, last) = (hits[0], hits[hits.len() - 1]);
    let Step::Group(g) = s[first].clone() else { unreachable!() };
    let hit = g.iter().find(|e| matches!(e, GroupEntry::Hit(_))).cloned().expect("a hit");
    if let Step::Group(g) = &mut s[last] {
        g[0] = hit;
    }
    let mut p = proof.clone();
    p.answer.short = Some(s);
    assert!(both(&p).is_err(), "an atom answering twice was accepted");
}

/// What a count question is answered with, by a scan.
fn brute_count(atoms: &[Atom], size: usize, q: &Query) -> sion_verify::proof::Counted {
    let mut c = sion_verify::proof::Counted::default();
    for a in atoms[..size].iter().filter(|a| q.matches(a.parts())) {
        let v = a.parts().valid;
        let (from, to) = (v.from_ns.max(q.from_ns), v.to_ns.min(q.to_ns));
        c.count += 1;
        c.duration_ns += (to - from) as u128;
        c.span = Some(c.span.map_or((from, to), |(f, t)| (f.min(from), t.max(to))));
    }
    c
}

fn count_proof(index: &mut Index, q: &Query) -> sion_verify::proof::CountProof {
    let (counted, answer) = index.snapshot().expect("snapshot").count(q).expect("count");
    sion_verify::proof::CountProof { query: q.clone(), counted, answer }
}

/// Counts, durations and spans equal a scan's on random logs and questions (half of them about
/// some kinds); every count proof verifies after a round trip through its bytes, and one that
/// states another count, or takes a subtree whole that is not inside, is refused.
#[test]
fn counts_equal_brute_force_and_proofs_verify() {
    let mut rng = SplitMix64::new(7);
    for round in 0..8 {
        let n = 50 + (rng.next_u64() % 2500) as usize;
        let atoms = random_atoms(&mut rng, n);
        let mut index = Index::build(&atoms).expect("build");
        let root = index.root().expect("root");
        for _ in 0..40 {
            let mut q = random_query(&mut rng);
            if rng.chance(333) {
                // A wide box: many subtrees lie wholly inside it.
                q.bounds = BoxMm { min_mm: [-20_000, -20_000, -5_000], max_mm: [20_000, 20_000, 10_000] };
            }
            let proof = count_proof(&mut index, &q);
            assert_eq!(proof.counted, brute_count(&atoms, n, &q), "round {round}: {q:?}");
            let mut bytes = Vec::new();
            proof.put(&mut bytes);
            let mut r = sion_verify::wire::Reader::new(&bytes);
            let back = sion_verify::proof::CountProof::read(&mut r, sion_verify::index::Version::V4)
                .expect("decodes");
            r.finish().expect("nothing after");
            assert_eq!(back.verify(&root, n as u64).expect("verifies"), proof.counted);
            let mut more = proof.clone();
            more.counted.count += 1;
            assert!(more.verify(&root, n as u64).is_err(), "a count one more than the walk shows");
            // A subtree taken whole that reaches outside the question.
            let mut stretched = proof.clone();
            let whole = stretched.answer.short.iter_mut().flatten().find_map(|s| match s {
                Step::Whole(s) => Some(s),
                _ => None,
            });
            if let Some(s) = whole {
                s.bbox.max_mm[0] = q.bounds.max_mm[0].saturating_add(1);
                assert!(stretched.verify(&root, n as u64).is_err(), "a whole subtree reaching outside");
            }
        }
    }
}

/// A count's proof does not grow with the count: ten times the atoms in the box, about the
/// same proof (the subtrees inside are taken by their tallies).
#[test]
fn a_count_proof_does_not_grow_with_the_count() {
    use sion_verify::atom::{AtomParts, Interval, Kind, Permille};
    let size_for = |n: usize| {
        let mut rng = SplitMix64::new(9);
        let atoms: Vec<Atom> = (0..n)
            .map(|i| {
                let at = [rng.range(0, 50_000), rng.range(0, 50_000), 0];
                let from = rng.range(0, HOUR_NS / 2);
                let kind = if i % 3 == 0 { Kind::Observation } else { Kind::Pose };
                let p = AtomParts::new(
                    kind,
                    "map",
                    BoxMm { min_mm: at, max_mm: [at[0] + 100, at[1] + 100, 100] },
                    Interval { from_ns: from, to_ns: from + 1_000_000 },
                    Permille(900),
                );
                Atom::new(p).expect("valid")
            })
            .collect();
        let mut index = Index::build(&atoms).expect("build");
        let q = Query::new("map", BoxMm { min_mm: [-1; 3], max_mm: [60_000, 60_000, 1_000] }, 0, HOUR_NS)
            .expect("query")
            .with_kinds(1 << Kind::Observation.code())
            .expect("kinds");
        let proof = count_proof(&mut index, &q);
        assert_eq!(proof.counted, brute_count(&atoms, n, &q));
        let mut bytes = Vec::new();
        proof.put(&mut bytes);
        bytes.len()
    };
    let (small, big) = (size_for(2_000), size_for(20_000));
    assert!(big < 2 * small + 512, "{small} bytes for 2,000 atoms, {big} for 20,000");
}
