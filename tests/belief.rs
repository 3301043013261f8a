//! The fold of docs/BELIEF.md against a deliberately plain second implementation written from
//! that page (recursive, scanning every statement each time, no memo), on random histories:
//! revisions of revisions, conflicts, untrusted and simulated revisers, ties within a Pulse,
//! evidence given twice and in any order. Then the cases the issue names, by hand.

use std::collections::{BTreeMap, BTreeSet};

use sion_memory::atom::{Atom, AtomId, AtomParts, BoxMm, Extractor, Interval, Kind, Link, LinkRel, Permille};
use sion_memory::belief::{Belief, Policy, Prefer, Recorded, Reviser, State, Statement, fold};
use sion_memory::sim::SplitMix64;

/// The simulation's SplitMix64 (the same numbers on every machine), drawing below a bound.
struct Rng(SplitMix64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
}

fn parts(kind: Kind, n: i64) -> AtomParts {
    AtomParts::new(kind, "map", BoxMm::point([n, 0, 0]), Interval { from_ns: 1, to_ns: 2 }, Permille(900))
}

// ---- the plain implementation, from docs/BELIEF.md ----

struct PlainStatement {
    target: AtomId,
    state: State,
    by: AtomId,
    writer: [u8; 32],
    pulse: u64,
    position: u64,
}

fn link_state(rel: LinkRel) -> Option<State> {
    match rel {
        LinkRel::Supersedes => Some(State::Superseded),
        LinkRel::Contradicts | LinkRel::Disputes => Some(State::Disputed),
        LinkRel::Accepts => Some(State::Accepted),
        LinkRel::Retracts => Some(State::Retracted),
        LinkRel::Refutes => Some(State::Refuted),
        _ => None,
    }
}

fn plain_statements(evidence: &[Recorded], policy: &Policy) -> Vec<PlainStatement> {
    let trusted: BTreeSet<[u8; 32]> = policy.revisers.iter().map(|r| r.key).collect();
    let mut out: Vec<PlainStatement> = Vec::new();
    for r in evidence {
        if !trusted.contains(&r.writer) {
            continue;
        }
        if let Some(x) = &r.atom.parts().extractor
            && x.model.starts_with("sim:")
        {
            continue;
        }
        for l in &r.atom.parts().links {
            let Some(state) = link_state(l.rel) else { continue };
            let by = r.atom.id();
            if l.target == by {
                continue;
            }
            // The same atom recorded twice (in two logs): its earliest recording speaks.
            if let Some(i) = out.iter().position(|s| s.by == by && s.target == l.target && s.state == state) {
                let e = &out[i];
                if (e.pulse, e.writer, e.position) <= (r.pulse, r.writer, r.position) {
                    continue;
                }
                out.remove(i);
            }
            out.push(PlainStatement {
                target: l.target,
                state,
                by,
                writer: r.writer,
                pulse: r.pulse,
                position: r.position,
            });
        }
    }
    out
}

fn plain_believe(target: AtomId, all: &[PlainStatement], policy: &Policy) -> Belief {
    let standing: Vec<&PlainStatement> = all
        .iter()
        .filter(|s| s.target == target)
        .filter(|s| {
            let b = plain_believe(s.by, all, policy).state;
            b != State::Superseded && b != State::Retracted && b != State::Refuted
        })
        .collect();
    let mut listed: Vec<Statement> =
        standing.iter().map(|s| Statement { state: s.state, by: s.by }).collect();
    listed.sort();
    listed.dedup();
    let belief = |state: State, mut by: Vec<AtomId>| {
        by.sort();
        by.dedup();
        Belief { target, state, decided_by: by, standing: listed.clone() }
    };
    if standing.is_empty() {
        return belief(State::Asserted, vec![]);
    }
    let rank = |w: &[u8; 32]| policy.revisers.iter().find(|r| &r.key == w).map(|r| r.rank).unwrap_or(0);
    // The latest Pulse among `set`; per writer its last statement there; one state or a dispute.
    let latest = |set: Vec<&PlainStatement>| {
        let pulse = set.iter().map(|s| s.pulse).max().unwrap_or(0);
        let mut per: BTreeMap<[u8; 32], &PlainStatement> = BTreeMap::new();
        for s in set.into_iter().filter(|s| s.pulse == pulse) {
            match per.get(&s.writer) {
                Some(e) if (e.position, e.by) >= (s.position, s.by) => {}
                _ => {
                    per.insert(s.writer, s);
                }
            }
        }
        let states: BTreeSet<State> = per.values().map(|s| s.state).collect();
        let by: Vec<AtomId> = per.values().map(|s| s.by).collect();
        if states.len() == 1 {
            belief(*states.iter().next().unwrap(), by)
        } else {
            belief(State::Disputed, by)
        }
    };
    match policy.prefer {
        Prefer::Latest => latest(standing),
        Prefer::Rank => {
            let top = standing.iter().map(|s| rank(&s.writer)).max().unwrap_or(0);
            latest(standing.into_iter().filter(|s| rank(&s.writer) == top).collect())
        }
        Prefer::Quorum(k) => {
            let mut votes: BTreeMap<[u8; 32], &PlainStatement> = BTreeMap::new();
            for s in standing {
                match votes.get(&s.writer) {
                    Some(e) if (e.pulse, e.position, e.by) >= (s.pulse, s.position, s.by) => {}
                    _ => {
                        votes.insert(s.writer, s);
                    }
                }
            }
            let mut count: BTreeMap<State, Vec<AtomId>> = BTreeMap::new();
            for s in votes.values() {
                count.entry(s.state).or_default().push(s.by);
            }
            let reached: Vec<(&State, &Vec<AtomId>)> =
                count.iter().filter(|(_, v)| v.len() as u64 >= u64::from(k.max(1))).collect();
            if reached.len() == 1 {
                belief(*reached[0].0, reached[0].1.clone())
            } else if reached.is_empty() && count.len() == 1 {
                belief(State::Asserted, vec![])
            } else {
                belief(State::Disputed, votes.values().map(|s| s.by).collect())
            }
        }
    }
}

// ---- random histories ----

struct History {
    targets: Vec<AtomId>,
    evidence: Vec<Recorded>,
}

fn history(rng: &mut Rng) -> History {
    let writers = 1 + rng.below(4) as u8;
    let mut atoms: Vec<AtomId> = Vec::new();
    let mut evidence = Vec::new();
    let mut positions = [0u64; 8];
    let mut pulses = [0u64; 8];
    let claims = 1 + rng.below(4);
    for i in 0..claims {
        let w = rng.below(writers as u64) as usize;
        let a = Atom::new(parts(Kind::Claim, i as i64)).expect("claim");
        atoms.push(a.id());
        evidence.push(Recorded { writer: [w as u8; 32], pulse: pulses[w], position: positions[w], atom: a });
        positions[w] += 1;
    }
    let rels =
        [LinkRel::Supersedes, LinkRel::Accepts, LinkRel::Disputes, LinkRel::Retracts, LinkRel::Refutes];
    for n in 0..rng.below(24) {
        let w = rng.below(writers as u64) as usize;
        // Pulses move on per writer, often shared between writers (ties in one Pulse).
        pulses[w] += rng.below(3);
        let mut p = parts(if rng.below(5) == 0 { Kind::Conflict } else { Kind::Revision }, 1000 + n as i64);
        if p.kind == Kind::Conflict {
            let a = atoms[rng.below(atoms.len() as u64) as usize];
            let b = atoms[rng.below(atoms.len() as u64) as usize];
            if a == b {
                continue;
            }
            p.links = vec![
                Link { rel: LinkRel::Contradicts, target: a },
                Link { rel: LinkRel::Contradicts, target: b },
            ];
        } else {
            let rel = rels[rng.below(rels.len() as u64) as usize];
            let t1 = atoms[rng.below(atoms.len() as u64) as usize];
            p.links = vec![Link { rel, target: t1 }];
            // Sometimes a second target, same state; sometimes a `supports` too.
            let t2 = atoms[rng.below(atoms.len() as u64) as usize];
            if rng.below(3) == 0 && t2 != t1 {
                p.links.push(Link { rel, target: t2 });
            }
            if rng.below(4) == 0 && t2 != t1 {
                p.links.push(Link { rel: LinkRel::Supports, target: t2 });
            }
        }
        if rng.below(8) == 0 {
            p.extractor = Some(Extractor { model: "sim:gazebo".into(), code: "test".into() });
        }
        let Ok(a) = Atom::new(p) else { continue };
        atoms.push(a.id());
        if rng.below(6) == 0 {
            // Copied into another writer's log too.
            let v = rng.below(writers as u64) as usize;
            evidence.push(Recorded {
                writer: [v as u8; 32],
                pulse: pulses[v],
                position: positions[v],
                atom: a.clone(),
            });
            positions[v] += 1;
        }
        evidence.push(Recorded { writer: [w as u8; 32], pulse: pulses[w], position: positions[w], atom: a });
        positions[w] += 1;
    }
    History { targets: atoms, evidence }
}

fn random_policy(rng: &mut Rng) -> Policy {
    let mut revisers = Vec::new();
    for w in 0..4u8 {
        if rng.below(4) != 0 {
            revisers.push(Reviser { name: format!("w{w}"), key: [w; 32], rank: rng.below(3) as u32 });
        }
    }
    let prefer = match rng.below(3) {
        0 => Prefer::Latest,
        1 => Prefer::Rank,
        _ => Prefer::Quorum(1 + rng.below(3) as u32),
    };
    Policy { revisers, prefer }
}

#[test]
fn the_fold_agrees_with_a_plain_implementation_on_random_histories() {
    let mut rng = Rng(SplitMix64::new(0x5109_2026_1203));
    let mut moved = 0;
    for case in 0..3000 {
        let h = history(&mut rng);
        let policy = random_policy(&mut rng);
        let ours = fold(&h.targets, &h.evidence, &policy);
        let all = plain_statements(&h.evidence, &policy);
        let plain: Vec<Belief> = h.targets.iter().map(|t| plain_believe(*t, &all, &policy)).collect();
        assert_eq!(ours, plain, "case {case}: policy {policy:?}");
        moved += ours.iter().filter(|b| b.state != State::Asserted).count();
        // The same evidence in another order, some of it twice: the same beliefs.
        let mut shuffled = h.evidence.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        if let Some(first) = shuffled.first().cloned() {
            shuffled.push(first);
        }
        assert_eq!(fold(&h.targets, &shuffled, &policy), ours, "case {case}: order changed the fold");
    }
    assert!(moved > 3000, "the random histories moved belief only {moved} times");
}

fn revision(rel: LinkRel, target: AtomId, n: i64) -> Atom {
    let mut p = parts(Kind::Revision, n);
    p.links = vec![Link { rel, target }];
    Atom::new(p).expect("revision")
}

fn at(writer: u8, pulse: u64, position: u64, atom: &Atom) -> Recorded {
    Recorded { writer: [writer; 32], pulse, position, atom: atom.clone() }
}

fn trusting(prefer: Prefer, revisers: &[(u8, u32)]) -> Policy {
    Policy {
        revisers: revisers
            .iter()
            .map(|&(k, rank)| Reviser { name: String::new(), key: [k; 32], rank })
            .collect(),
        prefer,
    }
}

#[test]
fn conflicts_keep_both_sides_and_quorums_count_revisers() {
    let a = Atom::new(parts(Kind::Observation, 1)).expect("a");
    let b = Atom::new(parts(Kind::Observation, 2)).expect("b");
    let mut p = parts(Kind::Conflict, 3);
    p.links = vec![
        Link { rel: LinkRel::Contradicts, target: a.id() },
        Link { rel: LinkRel::Contradicts, target: b.id() },
    ];
    let conflict = Atom::new(p).expect("conflict");
    let ev = vec![at(1, 1, 0, &a), at(1, 1, 1, &b), at(1, 2, 2, &conflict)];
    let beliefs = fold(&[a.id(), b.id()], &ev, &trusting(Prefer::Latest, &[(1, 0)]));
    assert!(beliefs.iter().all(|x| x.state == State::Disputed && x.decided_by == vec![conflict.id()]));
    // An operator accepts a later: a is accepted, b stays disputed — both still in the log.
    let accept = revision(LinkRel::Accepts, a.id(), 4);
    let mut ev2 = ev.clone();
    ev2.push(at(2, 3, 0, &accept));
    let beliefs = fold(&[a.id(), b.id()], &ev2, &trusting(Prefer::Latest, &[(1, 0), (2, 0)]));
    assert_eq!((beliefs[0].state, beliefs[1].state), (State::Accepted, State::Disputed));
    assert_eq!(beliefs[0].standing.len(), 2, "the conflict stays among the standing statements");
    // A quorum of two revisers: one refutation is not enough; two are.
    let r1 = revision(LinkRel::Refutes, a.id(), 5);
    let r2 = revision(LinkRel::Refutes, a.id(), 6);
    let q = trusting(Prefer::Quorum(2), &[(1, 0), (2, 0), (3, 0)]);
    assert_eq!(fold(&[a.id()], &[at(1, 1, 0, &r1)], &q)[0].state, State::Asserted);
    assert_eq!(fold(&[a.id()], &[at(1, 1, 0, &r1), at(3, 1, 0, &r2)], &q)[0].state, State::Refuted);
    // A superseded fact does not come back when its successor is itself revised by someone
    // untrusted.
    let newer = revision(LinkRel::Supersedes, a.id(), 7);
    let noise = revision(LinkRel::Retracts, newer.id(), 8);
    let p = trusting(Prefer::Latest, &[(1, 0)]);
    assert_eq!(fold(&[a.id()], &[at(1, 1, 0, &newer), at(9, 2, 0, &noise)], &p)[0].state, State::Superseded);
}

#[test]
fn a_policy_reads_from_json() {
    let json = format!(
        r#"{{"revisers":[{{"name":"operator-ana","key":"{}","rank":9}},{{"key":"{}"}}],"prefer":{{"quorum":2}}}}"#,
        hex::encode([1u8; 32]),
        hex::encode([2u8; 32])
    );
    let p: Policy = serde_json::from_str(&json).expect("policy");
    assert_eq!(p.prefer, Prefer::Quorum(2));
    assert_eq!((p.revisers[0].rank, p.revisers[1].rank), (9, 0));
    let latest: Policy = serde_json::from_str(r#"{"revisers":[],"prefer":"latest"}"#).expect("latest");
    assert_eq!(latest.prefer, Prefer::Latest);
}

// ---- bundles: the fold checked from heads alone ----

use sion_memory::belief::bundle::{self, BundleError};
use sion_memory::memory::Memory;

fn observed() -> Atom {
    let mut p = parts(Kind::Observation, 42);
    p.subject = "pallet-17".into();
    Atom::new(p).expect("observation")
}

#[test]
fn an_observation_disputed_by_an_operator_believed_two_ways_each_checked() {
    let tmp = tempfile::tempdir().expect("tmp");
    let robot_dir = tmp.path().join("robot");
    let operator_dir = tmp.path().join("operator");
    let ledger_dir = robot_dir.join("ledger");
    let seen = observed();
    // The robot records what it saw.
    let mut robot = Memory::options(&robot_dir).agent("robot").create().expect("robot");
    robot.remember(vec![seen.clone()]).expect("remember");
    robot.commit(false).expect("commit");
    let robot_key = robot.writer().verifying_key().to_bytes();
    drop(robot);
    // An operator, on the same ledger, disputes it.
    let mut operator =
        Memory::options(&operator_dir).agent("operator").ledger_dir(&ledger_dir).create().expect("operator");
    operator.remember(vec![revision(LinkRel::Disputes, seen.id(), 1)]).expect("dispute");
    operator.commit(false).expect("commit");
    let operator_key = operator.writer().verifying_key().to_bytes();
    drop(operator);
    // Later, the robot accepts it again (it looked twice).
    let mut robot = Memory::options(&robot_dir).open().expect("reopen");
    robot.remember(vec![revision(LinkRel::Accepts, seen.id(), 2)]).expect("accept");
    robot.commit(false).expect("commit");
    let ledger_key = robot.ledger().public_key();
    drop(robot);

    let robot = Memory::options(&robot_dir).open_read_only().expect("robot, read");
    let operator = Memory::options(&operator_dir).open_read_only().expect("operator, read");
    let trusted = [robot_key, operator_key];
    let (files, pulse) =
        sion_memory::memory::belief::bundle(&[&robot, &operator], &[seen.id()], &trusted).expect("bundle");
    let bytes = bundle::encode(&files);

    let reviser = |key: [u8; 32], rank: u32| Reviser { name: String::new(), key, rank };
    let latest =
        Policy { revisers: vec![reviser(robot_key, 1), reviser(operator_key, 9)], prefer: Prefer::Latest };
    let ranked = Policy { prefer: Prefer::Rank, ..latest.clone() };
    let a = bundle::check(&bytes, &ledger_key, &[seen.id()], &latest, Some(pulse)).expect("reader A");
    let b = bundle::check(&bytes, &ledger_key, &[seen.id()], &ranked, Some(pulse)).expect("reader B");
    assert_eq!(a.beliefs[0].state, State::Accepted, "the latest word is the robot's");
    assert_eq!(b.beliefs[0].state, State::Disputed, "the operator outranks the robot");
    assert_eq!(a.beliefs[0].standing.len(), 2, "both statements stay visible");
    // The same fold as from the evidence alone.
    assert_eq!(fold(&[seen.id()], &a.evidence, &latest), a.beliefs);

    // Refused: a newer Pulse asked for (a stale head); a trusted reviser with no log in the
    // bundle; a link proof left out (a revision could be hidden).
    assert!(matches!(
        bundle::check(&bytes, &ledger_key, &[seen.id()], &latest, Some(pulse + 1)),
        Err(BundleError::Stale { .. })
    ));
    let (robot_only, _) =
        sion_memory::memory::belief::bundle(&[&robot], &[seen.id()], &trusted).expect("bundle");
    assert!(matches!(
        bundle::check(&bundle::encode(&robot_only), &ledger_key, &[seen.id()], &latest, None),
        Err(BundleError::NoLog(_))
    ));
    let without: Vec<_> = files
        .iter()
        .filter(|f| {
            !(matches!(f.proof, sion_memory::proof::Proof::List { .. })
                && f.attestation.as_ref().is_some_and(|a| a.state.log.writer.0 == operator_key))
        })
        .cloned()
        .collect();
    assert!(matches!(
        bundle::check(&bundle::encode(&without), &ledger_key, &[seen.id()], &latest, None),
        Err(BundleError::MissingLinks { .. }) | Err(BundleError::NoLog(_))
    ));
    // Against another ledger key: refused.
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[3; 32]).verifying_key();
    assert!(matches!(
        bundle::check(&bytes, &stranger, &[seen.id()], &latest, None),
        Err(BundleError::Proof { .. })
    ));
    // A damaged byte anywhere: refused, never a panic.
    for i in (0..bytes.len()).step_by(97) {
        let mut bad = bytes.clone();
        bad[i] ^= 0x20;
        let _ = bundle::check(&bad, &ledger_key, &[seen.id()], &latest, None);
    }
}

/// The attack of issue 30: a writer with two logs, one that `accepts` an observation and a
/// later one that `refutes` it. A bundle carrying only the first log's lists is refused (its
/// chain names the second), the maker will not make one, and with both logs the belief is the
/// same whatever order the memories or the files come in. A reviser's log that holds nothing
/// is carried for its chain alone. A stale bundle checks only when staleness is not asked
/// about, and the answer says it was not.
#[test]
fn a_writer_with_two_logs_cannot_show_two_readers_two_beliefs() {
    use sion_memory::proof::Proof;
    let tmp = tempfile::tempdir().expect("tmp");
    let (robot_dir, first_dir, second_dir, empty_dir) =
        (tmp.path().join("robot"), tmp.path().join("op-1"), tmp.path().join("op-2"), tmp.path().join("op-3"));
    let ledger_dir = robot_dir.join("ledger");
    let seen = observed();
    let mut robot = Memory::options(&robot_dir).agent("robot").create().expect("robot");
    robot.remember(vec![seen.clone()]).expect("remember");
    robot.commit(false).expect("commit");
    drop(robot);
    let mut first =
        Memory::options(&first_dir).ledger_dir(&ledger_dir).create().expect("operator, first log");
    first.remember(vec![revision(LinkRel::Accepts, seen.id(), 1)]).expect("accepts");
    first.commit(false).expect("commit");
    let operator = first.writer().verifying_key().to_bytes();
    drop(first);
    // The same operator key, a second log: it later refutes what the first accepted.
    for dir in [&second_dir, &empty_dir] {
        std::fs::create_dir_all(dir).expect("dir");
        std::fs::copy(first_dir.join("writer.key"), dir.join("writer.key")).expect("key");
    }
    let mut second =
        Memory::options(&second_dir).ledger_dir(&ledger_dir).create().expect("operator, second log");
    second.remember(vec![revision(LinkRel::Refutes, seen.id(), 2)]).expect("refutes");
    second.commit(false).expect("commit");
    let ledger_key = second.ledger().public_key();
    drop(second);
    // A third log of the operator's, with nothing in it.
    drop(Memory::options(&empty_dir).ledger_dir(&ledger_dir).create().expect("operator, an empty log"));

    let open = |d: &std::path::Path| Memory::options(d).open_read_only().expect("read");
    let (robot, first, second, empty) =
        (open(&robot_dir), open(&first_dir), open(&second_dir), open(&empty_dir));
    let policy = Policy {
        revisers: vec![Reviser { name: "operator".into(), key: operator, rank: 0 }],
        prefer: Prefer::Latest,
    };
    let trusted = [operator];
    let make = |ms: &[&Memory]| {
        let (files, alone, pulse) =
            sion_memory::memory::belief::bundle_with_chains(ms, &[seen.id()], &trusted).expect("bundle");
        (files, alone, pulse)
    };
    let (files, alone, pulse) = make(&[&robot, &first, &second, &empty]);
    assert_eq!(alone.len(), 1, "the empty log is carried for its chain");
    let honest = bundle::encode_with(&files, &alone);
    let checked = bundle::check(&honest, &ledger_key, &[seen.id()], &policy, Some(pulse)).expect("honest");
    assert_eq!(checked.beliefs[0].state, State::Refuted, "the operator's latest word");
    assert_eq!(checked.logs[0].logs.len(), 3);
    assert!(checked.logs[0].proved);
    // Any order of memories and of files: the same belief (the fold of a set).
    let (files_b, alone_b, _) = make(&[&second, &empty, &robot, &first]);
    let mut reversed = files.clone();
    reversed.reverse();
    for bytes in [bundle::encode_with(&files_b, &alone_b), bundle::encode_with(&reversed, &alone)] {
        let other =
            bundle::check(&bytes, &ledger_key, &[seen.id()], &policy, Some(pulse)).expect("reordered");
        assert_eq!(other.beliefs, checked.beliefs);
    }

    // The attack: only the first log's files. The maker refuses; a bundle made by hand is
    // refused, naming the log left out.
    let e = sion_memory::memory::belief::bundle_with_chains(&[&robot, &first], &[seen.id()], &trusted)
        .expect_err("the maker will not leave out a log that holds atoms");
    assert!(e.to_string().contains(&format!("log {}", second.log_id())), "{e}");
    let only_first: Vec<_> = files
        .iter()
        .filter(|f| f.attestation.as_ref().is_none_or(|a| a.state.log.id != second.log_id()))
        .cloned()
        .collect();
    for alone in [&alone[..], &[]] {
        match bundle::check(
            &bundle::encode_with(&only_first, alone),
            &ledger_key,
            &[seen.id()],
            &policy,
            None,
        ) {
            Err(e @ BundleError::MissingLog { .. }) => assert_eq!(e.code(), "missing_log"),
            other => panic!("a log left out was not caught: {other:?}"),
        }
    }
    // The empty log left out: its chain has a gap all the same.
    match bundle::check(&bundle::encode(&files), &ledger_key, &[seen.id()], &policy, None) {
        Err(BundleError::MissingLog { log, .. }) => assert_eq!(log, empty.log_id()),
        other => panic!("the empty log left out was not caught: {other:?}"),
    }
    // A second log's link list left out (the log is there, by its recorded proof's attestation
    // or not at all): refused either way.
    let no_lists: Vec<_> = files
        .iter()
        .filter(|f| {
            !(matches!(f.proof, Proof::List { .. })
                && f.attestation.as_ref().is_some_and(|a| a.state.log.id == second.log_id()))
        })
        .cloned()
        .collect();
    let e = bundle::check(&bundle::encode_with(&no_lists, &alone), &ledger_key, &[seen.id()], &policy, None)
        .expect_err("a list left out");
    assert!(matches!(e.code(), "missing_links" | "missing_log"), "{e}");

    // Staleness: the operator revises again; the old bundle checks only when no later Pulse
    // is asked for, and then says staleness was not checked.
    drop((robot, first, second, empty));
    let mut again = Memory::options(&first_dir).open().expect("reopen");
    again.remember(vec![revision(LinkRel::Accepts, seen.id(), 3)]).expect("accepts again");
    let latest = again.commit(false).expect("commit").pulse.header.number;
    drop(again);
    let unasked =
        bundle::check(&honest, &ledger_key, &[seen.id()], &policy, None).expect("staleness not asked");
    assert_eq!(unasked.staleness, None);
    assert!(matches!(
        bundle::check(&honest, &ledger_key, &[seen.id()], &policy, Some(latest)),
        Err(BundleError::Stale { .. })
    ));
}

/// A ledger from before chains (version 1 leaves): a reviser's set of logs cannot be proved,
/// so its bundle is refused (`unchained`) unless the reader takes the logs it brings, and the
/// answer then says they were not proved.
#[test]
fn a_ledger_from_before_chains_is_refused_unless_the_reader_trusts_the_log_set() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ledger_dir = tmp.path().join("ledger");
    drop(sion_memory::ledger::Ledger::create_unchained(&ledger_dir).expect("an old ledger"));
    let seen = observed();
    let mut robot = Memory::options(tmp.path().join("robot"))
        .agent("robot")
        .ledger_dir(&ledger_dir)
        .create()
        .expect("robot");
    robot.remember(vec![seen.clone(), revision(LinkRel::Accepts, seen.id(), 1)]).expect("remember");
    robot.commit(false).expect("commit");
    let key = robot.writer().verifying_key().to_bytes();
    let ledger_key = robot.ledger().public_key();
    let policy =
        Policy { revisers: vec![Reviser { name: String::new(), key, rank: 0 }], prefer: Prefer::Latest };
    let (files, alone, pulse) =
        sion_memory::memory::belief::bundle_with_chains(&[&robot], &[seen.id()], &[key]).expect("bundle");
    let bytes = bundle::encode_with(&files, &alone);
    let e = bundle::check(&bytes, &ledger_key, &[seen.id()], &policy, Some(pulse)).expect_err("unchained");
    assert_eq!(e.code(), "unchained", "{e}");
    let ask = bundle::Ask { as_of: Some(pulse), log_set: bundle::LogSet::Trusted };
    let checked =
        bundle::check_with(&bytes, &ledger_key, &[seen.id()], &policy, ask).expect("trusted log set");
    assert_eq!(checked.beliefs[0].state, State::Accepted);
    assert!(!checked.logs[0].proved);
}

/// A bundle made from a memory its writer holds behind a lock (a node, `sion mcp`) proves its
/// link lists without that lock: with the lock held the whole time (a commit that takes long),
/// every list still proves; only the ledger's few reads wait for it.
#[test]
fn link_lists_are_proved_without_the_writers_lock() {
    use sion_memory::memory::belief::{Shared, Source};
    let tmp = tempfile::tempdir().expect("tmp");
    let seen = observed();
    let mut memory = Memory::options(tmp.path().join("m")).create().expect("memory");
    let revisions: Vec<Atom> = (0..200).map(|i| revision(LinkRel::Accepts, seen.id(), i)).collect();
    memory.remember(std::iter::once(seen.clone()).chain(revisions).collect()).expect("remember");
    memory.commit(false).expect("commit");
    let version = memory.committed().clone();
    let attestation = memory.attestation_at(version.committed_at).expect("attestation");
    let locked = std::sync::Mutex::new(memory);
    let shared = Shared::new(&locked);
    let held = locked.lock().expect("the writer's lock, held as a long commit holds it");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = shared.prove_links(&version, attestation.clone(), seen.id());
            let _ = tx.send(file.map(|f| f.encode().len()));
        });
        let proved = rx.recv_timeout(std::time::Duration::from_secs(60));
        drop(held);
        let bytes = proved.expect("the list waited for the lock").expect("proves");
        assert!(bytes > 200 * 60, "{bytes} bytes for 200 revisions");
    });
}

/// One question names at most `MAX_TARGETS` atoms: more is refused, naming the field, before
/// any proof is made (each target costs a link proof from every log).
#[test]
fn a_question_about_too_many_atoms_is_refused_before_any_proof() {
    use sion_memory::protocol::{MAX_TARGETS, Protocol};
    let tmp = tempfile::tempdir().expect("tmp");
    let protocol = Protocol::over(Memory::options(tmp.path().join("m")).create().expect("memory"));
    let many: Vec<String> = (0..=MAX_TARGETS).map(|i| format!("{i:064x}")).collect();
    let e = protocol.atom_ids(&many, &[]).expect_err("too many");
    assert!(e.to_string().contains("targets") && e.to_string().contains("1025"), "{e}");
    assert_eq!(protocol.atom_ids(&many[..MAX_TARGETS], &[]).expect("at the bound").len(), MAX_TARGETS);
}

/// The README's story at the command line: a robot's observation disputed by an operator,
/// accepted again by the robot, believed two ways by two readers, each from a checked bundle.
#[test]
fn revise_and_believe_at_the_command_line() {
    use std::process::Command;
    let sion = env!("CARGO_BIN_EXE_sion");
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = |name: &str| tmp.path().join(name).to_string_lossy().into_owned();
    let run = |args: &[&str], stdin: Option<&str>| {
        use std::io::Write as _;
        let mut c = Command::new(sion)
            .args(args)
            .current_dir(tmp.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sion");
        if let Some(s) = stdin {
            c.stdin.take().expect("stdin").write_all(s.as_bytes()).expect("write");
        }
        drop(c.stdin.take());
        let o = c.wait_with_output().expect("wait");
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "sion {args:?}: {text}");
        text
    };
    let json = |args: &[&str]| -> serde_json::Value { serde_json::from_str(&run(args, None)).expect("json") };
    let (robot, op) = (dir("robot"), dir("operator"));
    run(&["memory", "open", "--data", &robot, "--agent", "robot"], None);
    let line = r#"{"kind":"observation","frame":"map","min":[0,0,0],"max":[1000,1000,1000],"from":1767225600000000000,"to":1767225601000000000,"confidence":900,"subject":"pallet-17"}"#;
    run(&["memory", "remember", "--data", &robot, "-"], Some(line));
    run(&["memory", "commit", "--data", &robot], None);
    // `--ledger DIR` is the user's path, relative to where they are (it once was joined to the
    // memory directory, and a ledger missing there was made anew: a second ledger). A path that
    // is not a ledger is refused, nothing made.
    let typo = Command::new(sion)
        .args(["memory", "open", "--data", &op, "--agent", "operator", "--ledger", "robot/ledgr"])
        .current_dir(tmp.path())
        .output()
        .expect("sion");
    assert!(!typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stderr).contains("no embedded ledger at"), "{typo:?}");
    assert!(!tmp.path().join("operator/robot").exists() && !tmp.path().join("robot/ledgr").exists());
    run(&["memory", "open", "--data", &op, "--agent", "operator", "--ledger", "robot/ledger"], None);
    let out = run(
        &[
            "memory",
            "revise",
            "--data",
            &op,
            "--target-data",
            &robot,
            "--position",
            "0",
            "--state",
            "disputes",
            "--why",
            "it is in bay 4",
        ],
        None,
    );
    assert!(out.contains(": disputes "), "{out}");
    run(&["memory", "revise", "--data", &robot, "--position", "0", "--state", "accepts"], None);
    let shown = json(&["memory", "show", "--data", &robot, "--json"]);
    let robot_key = shown["writer"].as_str().expect("writer").to_owned();
    let ledger_key = shown["ledger"]["key"].as_str().expect("key").to_owned();
    let op_key =
        json(&["memory", "show", "--data", &op, "--json"])["writer"].as_str().expect("writer").to_owned();
    let policy = |prefer: &str| {
        let path = tmp.path().join(format!("{prefer}.json"));
        let body = format!(
            r#"{{"revisers":[{{"name":"robot-7","key":"{robot_key}","rank":1}},{{"name":"operator-ana","key":"{op_key}","rank":9}}],"prefer":"{prefer}"}}"#
        );
        std::fs::write(&path, body).expect("policy");
        path.to_string_lossy().into_owned()
    };
    let bundle = dir("answer.sionbelief");
    let a = run(
        &[
            "memory",
            "believe",
            "--data",
            &robot,
            "--data",
            &op,
            "--policy",
            &policy("latest"),
            "--position",
            "0",
            "--ledger-key",
            &ledger_key,
            "--out",
            &bundle,
        ],
        None,
    );
    assert!(a.lines().next().is_some_and(|l| l.ends_with("  accepted")), "{a}");
    assert!(a.contains("VALID bundle"), "{a}");
    let target = a.split_whitespace().next().expect("target").to_owned();
    let b = run(
        &[
            "memory",
            "believe",
            "--bundle",
            &bundle,
            "--policy",
            &policy("rank"),
            "--target",
            &target,
            "--ledger-key",
            &ledger_key,
        ],
        None,
    );
    assert!(b.lines().next().is_some_and(|l| l.ends_with("  disputed")), "{b}");
    assert!(b.contains("decided  disputed   by operator-ana"), "{b}");
}

#[test]
fn a_trusted_reviser_who_committed_nothing_is_carried_alone_and_an_untrusted_one_left_aside() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (robot_dir, operator_dir) = (tmp.path().join("robot"), tmp.path().join("operator"));
    let seen = observed();
    let mut robot = Memory::options(&robot_dir).agent("robot").create().expect("robot");
    robot.remember(vec![seen.clone()]).expect("remember");
    robot.commit(false).expect("commit");
    let robot_key = robot.writer().verifying_key().to_bytes();
    drop(robot);
    // An operator's memory on the same ledger that has said nothing yet.
    let operator = Memory::options(&operator_dir)
        .agent("operator")
        .ledger_dir(robot_dir.join("ledger"))
        .create()
        .expect("operator");
    let operator_key = operator.writer().verifying_key().to_bytes();
    drop(operator);
    let robot = Memory::options(&robot_dir).open_read_only().expect("robot");
    let operator = Memory::options(&operator_dir).open_read_only().expect("operator");
    let ledger_key = robot.ledger().public_key();
    // Trusted: its empty log proves no list, and is carried as an attestation alone, so the
    // reader sees the operator's every log (one, empty) and its silence.
    let (files, alone, pulse) = sion_memory::memory::belief::bundle_with_chains(
        &[&robot, &operator],
        &[seen.id()],
        &[robot_key, operator_key],
    )
    .expect("bundle");
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].state.log.writer.0, operator_key);
    let reviser = |key: [u8; 32]| Reviser { name: String::new(), key, rank: 0 };
    let policy = Policy { revisers: vec![reviser(robot_key), reviser(operator_key)], prefer: Prefer::Latest };
    let bytes = bundle::encode_with(&files, &alone);
    let checked = bundle::check(&bytes, &ledger_key, &[seen.id()], &policy, Some(pulse)).expect("checks");
    assert_eq!(checked.beliefs[0].state, State::Asserted);
    assert_eq!(checked.logs[1].logs, vec![operator.log_id()]);
    // Without it, the operator has no log in the bundle.
    let e =
        bundle::check(&bundle::encode(&files), &ledger_key, &[seen.id()], &policy, None).expect_err("no log");
    assert_eq!(e.code(), "no_log", "{e}");
    // Not trusted: left aside, and the bundle holds the robot's log only.
    let (files, alone, _) =
        sion_memory::memory::belief::bundle_with_chains(&[&robot, &operator], &[seen.id()], &[robot_key])
            .expect("bundle");
    assert!(files.iter().all(|f| f.attestation.as_ref().is_some_and(|a| a.state.log.writer.0 == robot_key)));
    assert!(!files.is_empty() && alone.is_empty());
}
