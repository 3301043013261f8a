//! Belief: a fold over the revisions and conflicts written by the revisers a reader trusts
//! (docs/BELIEF.md). Belief is computed by whoever reads, under a policy they name; it is not a
//! field of any atom, and the writer's confidence is never taken for it.
//!
//! The fold is total and deterministic: the same evidence and policy give the same beliefs, in
//! any input order, and no input makes it fail or loop.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::atom::{Atom, AtomId, LinkRel};

/// What a reader believes about a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// No standing statement of a trusted reviser about it: it stands as its writer recorded
    /// it (which is not "true": its confidence is its writer's).
    Asserted,
    /// A trusted reviser accepted it.
    Accepted,
    /// Trusted revisers disagree about it, or one disputes it (a conflict disputes each side).
    Disputed,
    /// A later atom replaces it.
    Superseded,
    /// Withdrawn.
    Retracted,
    /// Shown false.
    Refuted,
}

impl State {
    /// The statement a link makes about its target, if any.
    pub fn of_link(rel: LinkRel) -> Option<Self> {
        Some(match rel {
            LinkRel::Supersedes => Self::Superseded,
            LinkRel::Contradicts | LinkRel::Disputes => Self::Disputed,
            LinkRel::Accepts => Self::Accepted,
            LinkRel::Retracts => Self::Retracted,
            LinkRel::Refutes => Self::Refuted,
            LinkRel::Supports | LinkRel::DerivedFrom => return None,
        })
    }

    /// Whether an atom in this state still speaks: a superseded, retracted or refuted
    /// revision moves no belief.
    pub fn stands(self) -> bool {
        !matches!(self, Self::Superseded | Self::Retracted | Self::Refuted)
    }

    /// Its name in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Asserted => "asserted",
            Self::Accepted => "accepted",
            Self::Disputed => "disputed",
            Self::Superseded => "superseded",
            Self::Retracted => "retracted",
            Self::Refuted => "refuted",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to prefer among disagreeing statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefer {
    /// The latest by transaction time.
    Latest,
    /// The highest rank; among equals, the latest.
    Rank,
    /// A state at least `k` revisers hold (each by its latest statement).
    Quorum(u32),
}

/// A reviser the reader trusts: a log's writer key, with a rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reviser {
    /// A name for people (`operator-ana`).
    #[serde(default)]
    pub name: String,
    /// The writer's ed25519 public key, 64 hex digits.
    #[serde(with = "crate::hex32")]
    pub key: [u8; 32],
    /// Higher outranks lower under `Prefer::Rank` (default 0).
    #[serde(default)]
    pub rank: u32,
}

/// A reader's policy (docs/BELIEF.md, "Policy"; its JSON form is this struct's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Whose revisions count: every other writer's are ignored.
    pub revisers: Vec<Reviser>,
    /// How to prefer among disagreeing statements.
    pub prefer: Prefer,
}

/// A revision of `target` in state `rel` (one of [`LinkRel::is_state`]): the target's frame,
/// box, interval and subject, confidence 1000, and `why` as its text (none when empty). What
/// `sion memory revise` and the RMP's revise both write.
pub fn revision_of(target: &Atom, rel: LinkRel, why: &str) -> Result<Atom, crate::atom::AtomError> {
    let t = target.parts();
    let mut parts = crate::atom::AtomParts::new(
        crate::atom::Kind::Revision,
        &t.frame,
        t.bounds,
        t.valid,
        crate::atom::Permille(1000),
    );
    parts.subject = t.subject.clone();
    parts.links = vec![crate::atom::Link { rel, target: target.id() }];
    if !why.is_empty() {
        parts.payload = crate::atom::Payload::Text(why.to_owned());
    }
    Atom::new(parts)
}

/// An atom of some writer's log, with when it was recorded: the input of the fold.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The log's writer key.
    pub writer: [u8; 32],
    /// Its transaction time: the Pulse of the first committed head that holds it.
    pub pulse: u64,
    /// Its position in its log.
    pub position: u64,
    /// The atom.
    pub atom: Atom,
}

/// One statement the fold weighed: `by` says `state` of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Statement {
    /// What it says of the target.
    pub state: State,
    /// The atom that says it.
    pub by: AtomId,
}

/// What a reader believes about one target, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Belief {
    /// The atom believed about.
    pub target: AtomId,
    /// What is believed of it.
    pub state: State,
    /// The standing statements that decided it (sorted by atom id); empty when asserted.
    pub decided_by: Vec<AtomId>,
    /// Every standing statement of a trusted reviser about it, decided or not (both sides of
    /// a conflict stay visible).
    pub standing: Vec<Statement>,
}

/// Whether an atom is a simulation's output: its extractor's model begins with `sim:`
/// (docs/BELIEF.md). Such atoms never move belief.
pub fn simulated(atom: &Atom) -> bool {
    atom.parts().extractor.as_ref().is_some_and(|x| x.model.starts_with("sim:"))
}

/// The order of transaction time: Pulse, then writer key, then position.
type When = (u64, [u8; 32], u64);

struct Said {
    target: AtomId,
    state: State,
    by: AtomId,
    writer: [u8; 32],
    when: When,
}

/// Fold `evidence` under `policy` into a belief about each target (in the order given).
pub fn fold(targets: &[AtomId], evidence: &[Recorded], policy: &Policy) -> Vec<Belief> {
    let ranks: HashMap<[u8; 32], u32> = policy.revisers.iter().map(|r| (r.key, r.rank)).collect();
    // Every statement a trusted, non-simulated atom makes, once per (atom, target, state): an
    // atom found in several logs (copied) speaks from its earliest recording.
    let mut first: BTreeMap<(AtomId, AtomId, State), Said> = BTreeMap::new();
    for r in evidence {
        if !ranks.contains_key(&r.writer) || simulated(&r.atom) {
            continue;
        }
        let by = r.atom.id();
        for link in &r.atom.parts().links {
            let Some(state) = State::of_link(link.rel) else { continue };
            if link.target == by {
                continue;
            }
            let said = Said {
                target: link.target,
                state,
                by,
                writer: r.writer,
                when: (r.pulse, r.writer, r.position),
            };
            match first.get(&(by, link.target, state)) {
                Some(e) if e.when <= said.when => {}
                _ => {
                    first.insert((by, link.target, state), said);
                }
            }
        }
    }
    let mut about: HashMap<AtomId, Vec<Said>> = HashMap::new();
    for said in first.into_values() {
        about.entry(said.target).or_default().push(said);
    }
    let mut memo: HashMap<AtomId, Belief> = HashMap::new();
    targets.iter().map(|t| believe(*t, &about, &ranks, policy.prefer, &mut memo)).collect()
}

/// The belief about `target`, computing first (without recursion: revisions of revisions may
/// be chains of any length) the belief about every statement about it.
fn believe(
    target: AtomId,
    about: &HashMap<AtomId, Vec<Said>>,
    ranks: &HashMap<[u8; 32], u32>,
    prefer: Prefer,
    memo: &mut HashMap<AtomId, Belief>,
) -> Belief {
    // Depth-first: a node is finished once every atom that speaks of it is. Ids are hashes of
    // the atoms that name them, so no cycle can be built; one met anyway (an atom seen on the
    // path) counts as not standing.
    let mut on_path: BTreeSet<AtomId> = BTreeSet::new();
    let mut stack: Vec<(AtomId, bool)> = vec![(target, false)];
    while let Some((node, expanded)) = stack.pop() {
        if memo.contains_key(&node) {
            continue;
        }
        let said = about.get(&node).map(Vec::as_slice).unwrap_or(&[]);
        if !expanded {
            on_path.insert(node);
            stack.push((node, true));
            for s in said {
                if !memo.contains_key(&s.by) && !on_path.contains(&s.by) {
                    stack.push((s.by, false));
                }
            }
            continue;
        }
        let standing: Vec<&Said> = said
            .iter()
            .filter(|s| !on_path.contains(&s.by) || memo.contains_key(&s.by))
            .filter(|s| memo.get(&s.by).is_none_or(|b| b.state.stands()))
            .collect();
        let belief = decide(node, &standing, ranks, prefer);
        on_path.remove(&node);
        memo.insert(node, belief);
    }
    memo.get(&target).cloned().unwrap_or(Belief {
        target,
        state: State::Asserted,
        decided_by: Vec::new(),
        standing: Vec::new(),
    })
}

fn decide(target: AtomId, standing: &[&Said], ranks: &HashMap<[u8; 32], u32>, prefer: Prefer) -> Belief {
    let mut all: Vec<Statement> = standing.iter().map(|s| Statement { state: s.state, by: s.by }).collect();
    all.sort();
    all.dedup();
    let done = |state: State, mut by: Vec<AtomId>| {
        by.sort();
        by.dedup();
        Belief { target, state, decided_by: by, standing: all.clone() }
    };
    if standing.is_empty() {
        return done(State::Asserted, Vec::new());
    }
    let latest_of = |set: &[&Said]| {
        // The latest Pulse decides; two revisers disagreeing in one Pulse are a dispute.
        let Some(pulse) = set.iter().map(|s| s.when.0).max() else {
            return done(State::Asserted, Vec::new());
        };
        let last: Vec<&&Said> = set.iter().filter(|s| s.when.0 == pulse).collect();
        // Within one writer's log, the later position decides.
        let mut per_writer: BTreeMap<[u8; 32], &Said> = BTreeMap::new();
        for s in &last {
            let e = per_writer.entry(s.writer).or_insert(s);
            if s.when > e.when || (s.when == e.when && s.by > e.by) {
                *e = s;
            }
        }
        let states: BTreeSet<State> = per_writer.values().map(|s| s.state).collect();
        let by: Vec<AtomId> = per_writer.values().map(|s| s.by).collect();
        match states.iter().next() {
            Some(&only) if states.len() == 1 => done(only, by),
            _ => done(State::Disputed, by),
        }
    };
    match prefer {
        Prefer::Latest => latest_of(standing),
        Prefer::Rank => {
            let rank = |s: &Said| ranks.get(&s.writer).copied().unwrap_or(0);
            let top = standing.iter().map(|s| rank(s)).max().unwrap_or(0);
            let best: Vec<&Said> = standing.iter().copied().filter(|s| rank(s) == top).collect();
            latest_of(&best)
        }
        Prefer::Quorum(k) => {
            // Each reviser's vote is its latest standing statement.
            let mut votes: BTreeMap<[u8; 32], &Said> = BTreeMap::new();
            for s in standing {
                let e = votes.entry(s.writer).or_insert(s);
                if (s.when, s.by) > (e.when, e.by) {
                    *e = s;
                }
            }
            let mut count: BTreeMap<State, Vec<AtomId>> = BTreeMap::new();
            for s in votes.values() {
                count.entry(s.state).or_default().push(s.by);
            }
            let reached: Vec<(State, Vec<AtomId>)> = count
                .iter()
                .filter(|(_, v)| v.len() as u64 >= u64::from(k.max(1)))
                .map(|(s, v)| (*s, v.clone()))
                .collect();
            match reached.as_slice() {
                [(state, by)] => done(*state, by.clone()),
                [] if count.len() == 1 => done(State::Asserted, Vec::new()),
                _ => done(State::Disputed, votes.values().map(|s| s.by).collect()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atom::{AtomParts, BoxMm, Extractor, Interval, Kind, Link, Permille};

    fn claim(n: i64) -> Atom {
        let mut p = AtomParts::new(
            Kind::Claim,
            "map",
            BoxMm::point([n, 0, 0]),
            Interval { from_ns: 1, to_ns: 2 },
            Permille(900),
        );
        p.subject = "pallet-17".into();
        Atom::new(p).expect("claim")
    }

    fn revision(rel: LinkRel, target: AtomId, n: i64) -> Atom {
        let mut p = AtomParts::new(
            Kind::Revision,
            "map",
            BoxMm::point([n, 0, 0]),
            Interval { from_ns: 1, to_ns: 2 },
            Permille(1000),
        );
        p.links = vec![Link { rel, target }];
        Atom::new(p).expect("revision")
    }

    fn rec(writer: u8, pulse: u64, position: u64, atom: &Atom) -> Recorded {
        Recorded { writer: [writer; 32], pulse, position, atom: atom.clone() }
    }

    fn policy(prefer: Prefer, revisers: &[(u8, u32)]) -> Policy {
        Policy {
            revisers: revisers
                .iter()
                .map(|(k, r)| Reviser { name: String::new(), key: [*k; 32], rank: *r })
                .collect(),
            prefer,
        }
    }

    #[test]
    fn retracted_then_accepted_and_revisions_of_revisions() {
        let c = claim(1);
        let retract = revision(LinkRel::Retracts, c.id(), 2);
        let accept = revision(LinkRel::Accepts, c.id(), 3);
        let p = policy(Prefer::Latest, &[(1, 0)]);
        let ev = vec![rec(1, 5, 0, &retract), rec(1, 6, 1, &accept)];
        assert_eq!(fold(&[c.id()], &ev, &p)[0].state, State::Accepted);
        // The acceptance retracted in turn: the retraction stands again.
        let undo = revision(LinkRel::Retracts, accept.id(), 4);
        let mut ev2 = ev.clone();
        ev2.push(rec(1, 7, 2, &undo));
        let b = &fold(&[c.id()], &ev2, &p)[0];
        assert_eq!((b.state, b.decided_by.clone()), (State::Retracted, vec![retract.id()]));
        // From a reviser not trusted: nothing moves.
        assert_eq!(fold(&[c.id()], &ev, &policy(Prefer::Latest, &[(9, 0)]))[0].state, State::Asserted);
    }

    #[test]
    fn two_policies_two_beliefs_and_simulations_never_count() {
        let c = claim(1);
        let robot_accepts = revision(LinkRel::Accepts, c.id(), 2);
        let operator_disputes = revision(LinkRel::Disputes, c.id(), 3);
        let ev = vec![rec(1, 10, 0, &operator_disputes), rec(2, 11, 0, &robot_accepts)];
        let latest = fold(&[c.id()], &ev, &policy(Prefer::Latest, &[(1, 9), (2, 1)]));
        let ranked = fold(&[c.id()], &ev, &policy(Prefer::Rank, &[(1, 9), (2, 1)]));
        assert_eq!(latest[0].state, State::Accepted);
        assert_eq!(ranked[0].state, State::Disputed);
        assert_eq!(ranked[0].standing.len(), 2, "both statements stay visible");
        let mut p = operator_disputes.parts().clone();
        p.extractor = Some(Extractor { model: "sim:gazebo".into(), code: "x".into() });
        let sim = Atom::new(p).expect("sim");
        let b = fold(&[c.id()], &[rec(1, 10, 0, &sim)], &policy(Prefer::Latest, &[(1, 0)]));
        assert_eq!(b[0].state, State::Asserted);
    }
}

/// A belief bundle (docs/BELIEF.md, "Bundles"): the proof files that let a reader check a fold
/// from heads alone. Version 3 (`SIONBEL3`, written) carries each distinct attestation once,
/// each file's body against one of them, and the attestations of a reviser's logs that prove no
/// list (so its chain of logs is whole); version 2 (`SIONBEL2`, still read) the same without
/// those; version 1 (`SIONBEL1`, still read) each proof file whole.
pub mod bundle {
    use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

    use ed25519_dalek::VerifyingKey;

    use super::{Belief, Policy, Recorded, State, fold, simulated};
    use crate::atom::{Atom, AtomId};
    use crate::ledger::{LogId, MemoryLog};
    use crate::proof::{Attestation, Claim, ListKey, Proof, ProofFile, VerifyError};

    /// The magic of a bundle as written (version 3: version 2 and the attestations of a
    /// reviser's logs that prove no list).
    pub const MAGIC: &[u8; 8] = b"SIONBEL3";
    /// The magic of version 2, still read.
    pub const MAGIC_V2: &[u8; 8] = b"SIONBEL2";
    /// The magic of version 1 (each proof file whole), still read.
    pub const MAGIC_V1: &[u8; 8] = b"SIONBEL1";
    /// At most this many proof files (and attestations), and bytes each: a length read from a
    /// file is bounded before anything is allocated for it.
    pub const MAX_FILES: u32 = 1 << 20;
    const MAX_FILE: u32 = 64 << 20;
    const MAX_ATTESTATION: u32 = 1 << 20;

    /// Why a bundle does not show the fold.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum BundleError {
        /// Not a bundle, or cut short.
        #[error("not a belief bundle: {0}")]
        Format(String),
        /// A proof file in it does not verify against the reader's ledger key.
        #[error("proof file {index} of the bundle: {source}")]
        Proof {
            /// Its place in the bundle.
            index: usize,
            /// Why.
            #[source]
            source: VerifyError,
        },
        /// An attestation no proof file uses (a log carried for its state alone) does not
        /// verify against the reader's ledger key.
        #[error("attestation {entry} of the bundle: {source}")]
        Attestation {
            /// Its place in the bundle's table of attestations.
            entry: usize,
            /// Why.
            #[source]
            source: VerifyError,
        },
        /// A proof file carries no attestation: it proves nothing from heads alone.
        #[error("proof file {0} of the bundle is not attested by a ledger")]
        Unattested(usize),
        /// Two link proofs of one log against different heads, or Pulses that differ.
        #[error("the bundle's heads are not of one Pulse: {0}")]
        MixedHeads(String),
        /// The heads are older than the Pulse the reader asked for.
        #[error("the bundle answers as of Pulse {found}, but Pulse {asked} was asked for (a stale head)")]
        Stale {
            /// The Pulse asked.
            asked: u64,
            /// The bundle's.
            found: u64,
        },
        /// A trusted reviser's complete list of links to an atom is missing from one of its
        /// logs: the bundle could leave out a revision.
        #[error(
            "the bundle has no link proof of reviser {reviser}'s log {log} for atom {target}: a revision could be left out"
        )]
        MissingLinks {
            /// The reviser's key (hex).
            reviser: String,
            /// The log.
            log: LogId,
            /// The atom.
            target: AtomId,
        },
        /// A statement's transaction time is not proved.
        #[error(
            "the bundle does not prove when reviser {reviser}'s atom at position {position} of log {log} was recorded"
        )]
        MissingTime {
            /// The reviser's key (hex).
            reviser: String,
            /// Its log.
            log: LogId,
            /// Its position.
            position: u64,
        },
        /// A trusted reviser's log is not in the bundle at all.
        #[error("reviser {0} has no log in the bundle")]
        NoLog(String),
        /// A log of a trusted reviser's chain (every log it had at the bundle's Pulse) is not in
        /// the bundle: its revisions could be left out.
        #[error(
            "reviser {reviser}'s log {log} ({why}) is not in the bundle: its revisions could be left out"
        )]
        MissingLog {
            /// The reviser's key (hex).
            reviser: String,
            /// The log missing.
            log: LogId,
            /// Where the chain names it.
            why: String,
        },
        /// A trusted reviser's logs are on a ledger from before chains (version 1 leaves): which
        /// logs it has cannot be proved, so a writer could show two readers two sets.
        #[error(
            "reviser {reviser}'s log {log} is on a ledger from before log chains: the set of its logs cannot be \
             proved (unless the reader accepts the logs the bundle brings)"
        )]
        Unchained {
            /// The reviser's key (hex).
            reviser: String,
            /// A log of it without a chain.
            log: LogId,
        },
    }

    impl BundleError {
        /// A short stable name of the refusal (docs/BELIEF.md, "Checking"), for programs.
        pub fn code(&self) -> &'static str {
            match self {
                BundleError::Format(_) => "format",
                BundleError::Proof { .. } | BundleError::Attestation { .. } => "proof",
                BundleError::Unattested(_) => "unattested",
                BundleError::MixedHeads(_) => "mixed_heads",
                BundleError::Stale { .. } => "stale",
                BundleError::MissingLinks { .. } => "missing_links",
                BundleError::MissingTime { .. } => "missing_time",
                BundleError::NoLog(_) => "no_log",
                BundleError::MissingLog { .. } => "missing_log",
                BundleError::Unchained { .. } => "unchained",
            }
        }
    }

    /// Encode proof files into a bundle (version 3), with no attestation beside them: see
    /// [`encode_with`].
    pub fn encode(files: &[ProofFile]) -> Vec<u8> {
        encode_with(files, &[])
    }

    /// Encode proof files and `alone` — attestations of logs no file proves anything of (a
    /// reviser's logs with nothing committed, carried so that its chain is whole) — into a
    /// bundle (version 3): `SIONBEL3`; `u32` A, then A attestations, each `u32` length + an
    /// envelope's attestation part (from `attested` through the cosignatures,
    /// docs/PROOFS.md), distinct, first those the files use in the order first used, then
    /// those of `alone` no file uses, in ascending order of log id; `u32` F, then F files,
    /// each `u32` index of its attestation + `u32` length + the envelope from `kind` on. All
    /// integers little-endian. File i is `SIONPRF4` ‖ attestation ‖ body.
    pub fn encode_with(files: &[ProofFile], alone: &[Attestation]) -> Vec<u8> {
        encode_table(MAGIC, files, alone)
    }

    /// Encode proof files into a version 2 bundle, for readers of version 2 only.
    pub fn encode_v2(files: &[ProofFile]) -> Vec<u8> {
        encode_table(MAGIC_V2, files, &[])
    }

    fn encode_table(magic: &[u8; 8], files: &[ProofFile], alone: &[Attestation]) -> Vec<u8> {
        let mut table: Vec<Vec<u8>> = Vec::new();
        let mut index: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut bodies: Vec<(u32, Vec<u8>)> = Vec::with_capacity(files.len());
        for f in files {
            let (attestation, body) = f.encode_split();
            let i = *index.entry(attestation).or_insert_with_key(|a| {
                table.push(a.clone());
                (table.len() - 1) as u32
            });
            bodies.push((i, body));
        }
        let used: HashSet<LogId> =
            files.iter().filter_map(|f| f.attestation.as_ref()).map(|a| a.state.log.id).collect();
        let mut rest: BTreeMap<LogId, Vec<u8>> = BTreeMap::new();
        for a in alone {
            if !used.contains(&a.state.log.id) {
                rest.entry(a.state.log.id).or_insert_with(|| a.encode_part());
            }
        }
        table.extend(rest.into_values().filter(|a| !index.contains_key(a)));
        let mut out = magic.to_vec();
        out.extend_from_slice(&(table.len() as u32).to_le_bytes());
        for a in &table {
            out.extend_from_slice(&(a.len() as u32).to_le_bytes());
            out.extend_from_slice(a);
        }
        out.extend_from_slice(&(bodies.len() as u32).to_le_bytes());
        for (i, body) in &bodies {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(body);
        }
        out
    }

    /// Encode proof files into a version 1 bundle: `SIONBEL1`, a `u32` count, then each proof
    /// file as a `u32` length and its bytes. For readers of version 1 only.
    pub fn encode_v1(files: &[ProofFile]) -> Vec<u8> {
        let mut out = MAGIC_V1.to_vec();
        out.extend_from_slice(&(files.len() as u32).to_le_bytes());
        for f in files {
            let bytes = f.encode();
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Bounded reads of a bundle's bytes.
    struct Cursor<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl<'a> Cursor<'a> {
        fn u32(&mut self, what: &str) -> Result<u32, BundleError> {
            let v = self
                .bytes
                .get(self.at..self.at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(|| BundleError::Format(format!("cut short at byte {} ({what})", self.at)))?;
            self.at += 4;
            Ok(v)
        }

        fn take(&mut self, len: u32, what: &str) -> Result<&'a [u8], BundleError> {
            let end = self.at.checked_add(len as usize);
            let b = end.and_then(|end| self.bytes.get(self.at..end)).ok_or_else(|| {
                BundleError::Format(format!("{what} runs past the end (byte {}, {len} bytes)", self.at))
            })?;
            self.at += len as usize;
            Ok(b)
        }

        fn count(&mut self, what: &str) -> Result<u32, BundleError> {
            let n = self.u32(what)?;
            if n > MAX_FILES {
                return Err(BundleError::Format(format!("{n} {what}, more than {MAX_FILES}")));
            }
            Ok(n)
        }
    }

    /// The proof files of a bundle, version 3, 2 or 1 (not yet verified).
    pub fn decode(bytes: &[u8]) -> Result<Vec<ProofFile>, BundleError> {
        let mut files = Vec::new();
        each_file(bytes, |_, file| {
            files.push(file);
            Ok(())
        })?;
        Ok(files)
    }

    /// Hand each proof file of a bundle to `f` in order, one at a time (a checker keeps what it
    /// needs of each, not every file: a version 2 file repeats its attestation when read), and
    /// return the attestations no file uses (version 3), with their places in the table.
    fn each_file(
        bytes: &[u8],
        mut f: impl FnMut(usize, ProofFile) -> Result<(), BundleError>,
    ) -> Result<Vec<(usize, Attestation)>, BundleError> {
        let bad = |why: String| BundleError::Format(why);
        let mut r = Cursor { bytes, at: 8 };
        let proof =
            |i: u32, e: crate::wire::WireError| BundleError::Proof { index: i as usize, source: e.into() };
        let mut alone = Vec::new();
        match bytes.get(..8) {
            Some(m) if m == MAGIC_V1 => {
                for i in 0..r.count("proof files")? {
                    let len = r.u32("a proof file's length")?;
                    if len > MAX_FILE {
                        return Err(bad(format!("proof file {i} claims {len} bytes")));
                    }
                    let file = ProofFile::decode(r.take(len, &format!("proof file {i}"))?)
                        .map_err(|e| proof(i, e))?;
                    f(i as usize, file)?;
                }
            }
            Some(m) if m == MAGIC || m == MAGIC_V2 => {
                let v3 = m == MAGIC;
                // Each entry is exactly one attestation, so where a file's body begins is fixed.
                let mut table = Vec::new();
                let mut seen: HashSet<&[u8]> = HashSet::new();
                for a in 0..r.count("attestations")? {
                    let len = r.u32("an attestation's length")?;
                    if len == 0 || len > MAX_ATTESTATION {
                        return Err(bad(format!("attestation {a} claims {len} bytes")));
                    }
                    let part = r.take(len, &format!("attestation {a}"))?;
                    if !seen.insert(part) {
                        return Err(bad(format!("attestation {a} repeats an earlier one")));
                    }
                    let attestation = ProofFile::decode_attestation(part)
                        .map_err(|e| bad(format!("attestation {a} is not one attestation: {e}")))?;
                    table.push(attestation);
                }
                // In the order first used: a file names a used attestation or the next one.
                let mut used = 0usize;
                for i in 0..r.count("proof files")? {
                    let a = r.u32("a proof file's attestation")? as usize;
                    if a > used || a >= table.len() {
                        return Err(bad(format!(
                            "proof file {i} names attestation {a}, but the next unused one is {used} (of {})",
                            table.len()
                        )));
                    }
                    used += usize::from(a == used);
                    let len = r.u32("a proof file's length")?;
                    if len > MAX_FILE {
                        return Err(bad(format!("proof file {i} claims {len} bytes")));
                    }
                    let body = r.take(len, &format!("proof file {i}"))?;
                    let file = ProofFile::decode_body(table[a].clone(), body).map_err(|e| proof(i, e))?;
                    f(i as usize, file)?;
                }
                if used != table.len() && !v3 {
                    return Err(bad(format!("attestation {used} is used by no proof file")));
                }
                // Version 3: the rest hold logs for their state alone, each log once, in
                // ascending order of id, none a log a file's attestation holds.
                let proved: HashSet<LogId> = table[..used].iter().map(|a| a.state.log.id).collect();
                let mut last: Option<LogId> = None;
                for (k, a) in table.into_iter().enumerate().skip(used) {
                    let id = a.state.log.id;
                    if proved.contains(&id) || last.is_some_and(|l| l >= id) {
                        return Err(bad(format!(
                            "attestation {k}, used by no proof file, holds log {id}: such entries hold \
                             logs no file's attestation holds, each once, in ascending order"
                        )));
                    }
                    last = Some(id);
                    alone.push((k, a));
                }
            }
            _ => return Err(bad("no SIONBEL3 (or SIONBEL2, SIONBEL1) magic".into())),
        }
        if r.at != bytes.len() {
            return Err(bad(format!("{} bytes after the last proof file", bytes.len() - r.at)));
        }
        Ok(alone)
    }

    /// A log's complete list of atoms linking to one target: (position, atom).
    type Listed = Vec<(u64, Atom)>;

    /// Whether a reader accepts a reviser's logs on a ledger from before chains as the bundle
    /// brings them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum LogSet {
        /// Every log of every trusted reviser must be proved by its chain (the default).
        #[default]
        Proved,
        /// On a ledger from before chains, the logs the bundle brings are taken as all the
        /// reviser's: a writer could show two readers two sets. Chained logs are still checked.
        Trusted,
    }

    /// What the reader asks besides its policy and targets.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Ask {
        /// Refuse heads older than this Pulse (`None`: staleness is not checked, and the
        /// answer says so: [`Checked::staleness`]).
        pub as_of: Option<u64>,
        /// Whether a reviser's set of logs must be proved.
        pub log_set: LogSet,
    }

    /// What a checked bundle shows.
    #[derive(Debug, Clone)]
    pub struct Checked {
        /// The Pulse its heads are of.
        pub pulse: u64,
        /// The fold, recomputed here.
        pub beliefs: Vec<Belief>,
        /// The statements' atoms, with when and by whom they were recorded.
        pub evidence: Vec<Recorded>,
        /// The Pulse the bundle was checked to be at least as new as, or `None`: staleness was
        /// not checked.
        pub staleness: Option<u64>,
        /// Every trusted reviser's logs the fold drew on, in the policy's order; `proved` is
        /// false for logs taken as the bundle brought them ([`LogSet::Trusted`]).
        pub logs: Vec<RevisersLogs>,
    }

    /// A trusted reviser's logs at the bundle's Pulse.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RevisersLogs {
        /// Its key.
        pub reviser: [u8; 32],
        /// Its logs, in order of opening.
        pub logs: Vec<LogId>,
        /// Whether these are all its logs, proved by their chain.
        pub proved: bool,
    }

    /// [`check_with`], refusing unproved sets of logs, with staleness checked against `as_of`
    /// when given.
    pub fn check(
        bytes: &[u8],
        ledger_key: &VerifyingKey,
        targets: &[AtomId],
        policy: &Policy,
        as_of: Option<u64>,
    ) -> Result<Checked, BundleError> {
        check_with(bytes, ledger_key, targets, policy, Ask { as_of, log_set: LogSet::Proved })
    }

    /// Check a bundle in this process against the reader's ledger key, policy and question,
    /// and recompute the fold. Every trusted reviser's every log at the bundle's Pulse must be
    /// in it (proved by the chain of its logs), each with a complete link proof for every
    /// target and for every statement met (revisions of revisions) if it holds any atom, and
    /// the transaction time of every statement; all heads of one Pulse, not older than
    /// `ask.as_of` when given.
    pub fn check_with(
        bytes: &[u8],
        ledger_key: &VerifyingKey,
        targets: &[AtomId],
        policy: &Policy,
        ask: Ask,
    ) -> Result<Checked, BundleError> {
        // log → (pulse, head size) of its link proofs; (log, target) → atoms;
        // (log, position) → (atom id, pulse); (pulse, log) → the leaf attested.
        let mut heads: BTreeMap<LogId, (u64, u64)> = BTreeMap::new();
        let mut links: HashMap<(LogId, AtomId), Listed> = HashMap::new();
        let mut times: HashMap<(LogId, u64), (AtomId, u64)> = HashMap::new();
        let mut leaves: BTreeMap<(u64, LogId), MemoryLog> = BTreeMap::new();
        // Files of one log and Pulse share a state proof: its signature is checked once.
        let mut states = HashSet::new();
        let alone = each_file(bytes, |index, file| {
            let verified = file
                .verify_sharing(Some(ledger_key), &mut states)
                .map_err(|source| BundleError::Proof { index, source })?;
            let Some(att) = &file.attestation else { return Err(BundleError::Unattested(index)) };
            let log = &att.state.log;
            let pulse = att.state.header.header.number;
            leaves.entry((pulse, log.id)).or_insert_with(|| log.clone());
            match (&file.proof, verified.claim) {
                (Proof::List { .. }, Claim::List { key: ListKey::LinksTo(target), atoms }) => {
                    let head = (pulse, verified.head.size);
                    if let Some(h) = heads.insert(log.id, head)
                        && h != head
                    {
                        return Err(BundleError::MixedHeads(format!(
                            "log {} (reviser {}): Pulse {} ({} atoms) and Pulse {} ({} atoms)",
                            log.id,
                            hex::encode(log.writer.0),
                            h.0,
                            h.1,
                            head.0,
                            head.1
                        )));
                    }
                    // One log, one head: every link proof of it for this target is one list.
                    links.insert((log.id, target), atoms);
                }
                (_, Claim::Recorded { position, atom, .. }) => {
                    times.insert((log.id, position), (atom.id(), pulse));
                }
                // Other proofs prove nothing the fold needs: left aside.
                _ => {}
            }
            Ok(())
        })?;
        for (entry, a) in &alone {
            a.verify(ledger_key).map_err(|source| BundleError::Attestation { entry: *entry, source })?;
        }
        let mut pulses: BTreeSet<u64> = heads.values().map(|h| h.0).collect();
        pulses.extend(alone.iter().map(|(_, a)| a.state.header.header.number));
        if pulses.len() > 1 {
            return Err(BundleError::MixedHeads(format!("the heads are of Pulses {pulses:?}")));
        }
        let pulse = pulses.into_iter().next().unwrap_or(0);
        for (_, a) in alone {
            leaves.entry((pulse, a.state.log.id)).or_insert(a.state.log);
        }
        if let Some(asked) = ask.as_of
            && pulse < asked
        {
            return Err(BundleError::Stale { asked, found: pulse });
        }
        // Every trusted reviser's logs at the Pulse: a chain from its first to its last.
        let at_pulse: BTreeMap<LogId, &MemoryLog> =
            leaves.range((pulse, LogId(0))..=(pulse, LogId(u64::MAX))).map(|((_, id), l)| (*id, l)).collect();
        let mut sets: Vec<RevisersLogs> = Vec::new();
        for r in &policy.revisers {
            if sets.iter().any(|s| s.reviser == r.key) {
                continue;
            }
            let mine: Vec<&MemoryLog> = at_pulse.values().copied().filter(|l| l.writer.0 == r.key).collect();
            sets.push(logs_of(r.key, &mine, &at_pulse, &heads, ask.log_set)?);
        }
        // Walk from the targets through every statement found, requiring each list.
        let mut evidence: Vec<Recorded> = Vec::new();
        let mut asked: BTreeSet<AtomId> = BTreeSet::new();
        let mut queue: Vec<AtomId> = targets.to_vec();
        while let Some(t) = queue.pop() {
            if !asked.insert(t) {
                continue;
            }
            for set in &sets {
                let reviser = hex::encode(set.reviser);
                for &log in &set.logs {
                    // A log with nothing committed proves no list, and holds no statement.
                    if at_pulse.get(&log).is_some_and(|l| l.head.size == 0) {
                        continue;
                    }
                    let list = links.get(&(log, t)).ok_or_else(|| BundleError::MissingLinks {
                        reviser: reviser.clone(),
                        log,
                        target: t,
                    })?;
                    for (position, atom) in list {
                        let states = atom
                            .parts()
                            .links
                            .iter()
                            .any(|l| l.target == t && State::of_link(l.rel).is_some());
                        if !states || simulated(atom) {
                            continue;
                        }
                        let id = atom.id();
                        let missing = || BundleError::MissingTime {
                            reviser: reviser.clone(),
                            log,
                            position: *position,
                        };
                        let (recorded, when) = times.get(&(log, *position)).copied().ok_or_else(missing)?;
                        if recorded != id || when > pulse {
                            return Err(missing());
                        }
                        evidence.push(Recorded {
                            writer: set.reviser,
                            pulse: when,
                            position: *position,
                            atom: atom.clone(),
                        });
                        queue.push(id);
                    }
                }
            }
        }
        let beliefs = fold(targets, &evidence, policy);
        Ok(Checked { pulse, beliefs, evidence, staleness: ask.as_of, logs: sets })
    }

    /// A reviser's logs at the bundle's Pulse (`mine`: those of its logs the bundle holds):
    /// the chain from its first log (no `prev`) through its last (no `next`), every link in the
    /// bundle; or, on a ledger from before chains and if the reader allows it, the logs the
    /// bundle brings with a link proof.
    fn logs_of(
        reviser: [u8; 32],
        mine: &[&MemoryLog],
        at_pulse: &BTreeMap<LogId, &MemoryLog>,
        heads: &BTreeMap<LogId, (u64, u64)>,
        log_set: LogSet,
    ) -> Result<RevisersLogs, BundleError> {
        let hex_key = hex::encode(reviser);
        let Some(first) = mine.first() else { return Err(BundleError::NoLog(hex_key)) };
        if let Some(old) = mine.iter().find(|l| l.chain.is_none()) {
            if log_set == LogSet::Proved {
                return Err(BundleError::Unchained { reviser: hex_key, log: old.id });
            }
            if mine.iter().all(|l| l.chain.is_none()) {
                let logs: Vec<LogId> =
                    mine.iter().map(|l| l.id).filter(|id| heads.contains_key(id)).collect();
                if logs.is_empty() {
                    return Err(BundleError::NoLog(hex_key));
                }
                return Ok(RevisersLogs { reviser, logs, proved: false });
            }
        }
        let missing =
            |log: LogId, why: String| BundleError::MissingLog { reviser: hex_key.clone(), log, why };
        // The lowest id the bundle holds is the first log only if nothing comes before it.
        if let Some(prev) = first.chain.and_then(|c| c.prev) {
            return Err(missing(prev, format!("before log {}", first.id)));
        }
        let mut logs = vec![first.id];
        let mut at = *first;
        while let Some(next) = at.chain.and_then(|c| c.next) {
            let Some(n) = at_pulse.get(&next).copied() else {
                return Err(missing(next, format!("after log {}", at.id)));
            };
            // Ids grow along a chain, so it ends; a link that does not hold both ways is not one.
            if n.writer.0 != reviser || n.chain.and_then(|c| c.prev) != Some(at.id) || next <= at.id {
                return Err(missing(
                    next,
                    format!("after log {}, as its chain says; the ledger's log {next} is not that", at.id),
                ));
            }
            logs.push(next);
            at = n;
        }
        if let Some(stray) = mine.iter().find(|l| !logs.contains(&l.id)) {
            return Err(missing(
                stray.id,
                format!("the bundle holds it, but it is not on the chain from log {}", first.id),
            ));
        }
        Ok(RevisersLogs { reviser, logs, proved: true })
    }
}
