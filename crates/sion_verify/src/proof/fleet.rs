//! Fleet recall bundles (docs/PROOFS.md, "Fleet recall"): one range question asked of every
//! log of a fleet ledger (or of a named group of agents) as of one Pulse, answered by each
//! robot's range proof, with every log's leaf at that Pulse — so the reader recomputes the
//! signed state root itself and knows the set of logs is whole: a robot left out, an answer as
//! of an older head (stale), or an answer that does not hold (lying) is refused, naming the log.
//!
//! ```text
//! "SIONFLT1"
//! 32      ledger key
//! 153     the Pulse's signed header (89-byte header, 64-byte signature)
//! u64     n, the Pulse's `logs`
//! n ×     (u32 length, the log's leaf encoding at that Pulse), in log order
//! u32     m, answers
//! m ×     (u64 log id, u32 length, a range proof file), ascending log id
//! ```

use ed25519_dalek::VerifyingKey;

use super::{Claim, Expect, ProofFile, Question, VerifyError};
use crate::atom::Atom;
use crate::index::geom::Query;
use crate::ledger::{LogId, MemoryLog, SignedHeader};
use crate::merkle::{Blake3, MemoryTree, TreeHasher as _};
use crate::wire::{Put as _, Reader, WireError};

const MAGIC: &[u8; 8] = b"SIONFLT1";

/// The most logs a bundle names (a fleet ledger's state of a million logs is 200 MB of leaves:
/// past that, ask by group).
pub const MAX_LOGS: u64 = 1 << 20;

/// The largest bundle a reader reads.
pub const MAX_BUNDLE_BYTES: usize = 1 << 30;

/// One range question answered across a fleet, as of one Pulse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetBundle {
    /// The key the bundle says signed the header (a reader names its own).
    pub ledger_key: [u8; 32],
    /// The Pulse asked as of.
    pub header: SignedHeader,
    /// Every log of the ledger, as that Pulse's state holds it.
    pub logs: Vec<MemoryLog>,
    /// The range proofs, by log.
    pub answers: Vec<(LogId, Vec<u8>)>,
}

/// Why a bundle does not answer the question for the fleet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The bytes are not a bundle.
    #[error("not a fleet recall bundle: {0}")]
    Malformed(#[from] WireError),
    /// Signed by another key than the reader's, or not signed.
    #[error("the Pulse's header is not signed by the ledger key given: {0}")]
    Signature(String),
    /// The leaves do not make the signed state: logs were added, left out or changed.
    #[error(
        "the {logs} logs given do not hash to Pulse {pulse}'s signed state root: the set of logs is not the ledger's"
    )]
    StateRoot {
        /// The Pulse.
        pulse: u64,
        /// How many logs the bundle gives.
        logs: usize,
    },
    /// A log in the question's scope that holds atoms has no answer.
    #[error("log {log}{} holds {size} atoms at Pulse {pulse} and has no answer in the bundle: a robot was left out", agent_of(.agent))]
    LeftOut {
        /// The log.
        log: LogId,
        /// Its agent.
        agent: Option<String>,
        /// Its size at the Pulse.
        size: u64,
        /// The Pulse.
        pulse: u64,
    },
    /// An answer as of an older head than the ledger's at the Pulse.
    #[error("log {log}{} answers as of {proved} atoms, but held {size} at Pulse {pulse}: a stale answer", agent_of(.agent))]
    Stale {
        /// The log.
        log: LogId,
        /// Its agent.
        agent: Option<String>,
        /// The size its answer is as of.
        proved: u64,
        /// Its size at the Pulse.
        size: u64,
        /// The Pulse.
        pulse: u64,
    },
    /// An answer that does not hold, answers another question, or is of a head the ledger
    /// never gave that log at the Pulse.
    #[error("log {log}{}'s answer does not hold: {reason}", agent_of(.agent))]
    Lying {
        /// The log.
        log: LogId,
        /// Its agent.
        agent: Option<String>,
        /// Why.
        reason: String,
    },
    /// The group asked about is not an agent name (so no log would be in it).
    #[error("{0:?} is not an agent name (1 to 128 bytes, `/`-separated segments of a-z, 0-9, - and _)")]
    Group(String),
    /// An answer for a log out of the question's scope, or twice for one log.
    #[error(
        "an answer for log {0} that the question did not ask (out of the group, past the logs, or twice)"
    )]
    NotAsked(LogId),
}

impl FleetError {
    /// The refusal's code: `malformed`, `signature`, `state_root`, `left_out`, `stale`,
    /// `lying`, `not_asked` or `group`.
    pub fn code(&self) -> &'static str {
        match self {
            FleetError::Malformed(_) => "malformed",
            FleetError::Signature(_) => "signature",
            FleetError::StateRoot { .. } => "state_root",
            FleetError::LeftOut { .. } => "left_out",
            FleetError::Stale { .. } => "stale",
            FleetError::Lying { .. } => "lying",
            FleetError::NotAsked(_) => "not_asked",
            FleetError::Group(_) => "group",
        }
    }
}

fn agent_of(agent: &Option<String>) -> String {
    agent.as_ref().map_or(String::new(), |a| format!(" ({a})"))
}

/// What a bundle proves: every atom any log in scope recorded that answers the question, as of
/// the Pulse.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetAnswer {
    /// The Pulse's number and time (ns since the Unix epoch).
    pub pulse: u64,
    /// Its time.
    pub time_ns: i64,
    /// The logs in scope (holding atoms or not).
    pub in_scope: usize,
    /// Each answered log's answer.
    pub logs: Vec<LogAnswer>,
}

/// One log's part of a fleet answer.
#[derive(Debug, Clone, PartialEq)]
pub struct LogAnswer {
    /// The log.
    pub log: LogId,
    /// Its agent.
    pub agent: Option<String>,
    /// Its atoms that answer, (position, atom) ascending.
    pub atoms: Vec<(u64, Atom)>,
}

impl FleetAnswer {
    /// How many atoms in all.
    pub fn atoms(&self) -> usize {
        self.logs.iter().map(|l| l.atoms.len()).sum()
    }
}

/// Whether a log's agent is `group` or under it (every log, without a group).
pub fn in_group(log: &MemoryLog, group: Option<&str>) -> bool {
    match group {
        None => true,
        Some(g) => log
            .agent
            .as_deref()
            .is_some_and(|a| a == g || a.strip_prefix(g).is_some_and(|r| r.starts_with('/'))),
    }
}

impl FleetBundle {
    /// The bundle's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_bytes(MAGIC);
        out.put_bytes(&self.ledger_key);
        self.header.put(&mut out);
        out.put_u64(self.logs.len() as u64);
        for log in &self.logs {
            out.put_bytes32(&log.encode());
        }
        out.put_u32(self.answers.len() as u32);
        for (id, proof) in &self.answers {
            out.put_u64(id.0);
            out.put_bytes32(proof);
        }
        out
    }

    /// Read a bundle, bounded ([`MAX_BUNDLE_BYTES`], [`MAX_LOGS`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() > MAX_BUNDLE_BYTES {
            return Err(WireError::Invalid {
                field: "bundle",
                problem: format!("{} bytes, over {MAX_BUNDLE_BYTES}", bytes.len()),
            });
        }
        let mut r = Reader::new(bytes);
        if r.take(8, "magic")? != MAGIC {
            return Err(WireError::Invalid { field: "magic", problem: "not SIONFLT1".into() });
        }
        let ledger_key = r.array("ledger key")?;
        let header = SignedHeader::read(&mut r)?;
        let n = r.u64("logs")?;
        if n > MAX_LOGS || n != header.header.logs {
            return Err(WireError::Invalid {
                field: "logs",
                problem: format!("{n}, where the header says {} (at most {MAX_LOGS})", header.header.logs),
            });
        }
        let mut logs = Vec::with_capacity(n.min(4096) as usize);
        for i in 0..n {
            let log = MemoryLog::decode(r.bytes32(4096, "leaf")?)?;
            if log.id.0 != i {
                return Err(WireError::Invalid {
                    field: "leaf",
                    problem: format!("log {} where log {i} was expected", log.id),
                });
            }
            logs.push(log);
        }
        let m = r.u32("answers")?;
        if u64::from(m) > n {
            return Err(WireError::Invalid {
                field: "answers",
                problem: format!("{m} answers for {n} logs"),
            });
        }
        let mut answers = Vec::with_capacity(m.min(4096) as usize);
        for _ in 0..m {
            let id = LogId(r.u64("answer's log")?);
            if answers.last().is_some_and(|(last, _): &(LogId, Vec<u8>)| last.0 >= id.0) {
                return Err(WireError::Invalid {
                    field: "answer's log",
                    problem: format!(
                        "log {id} after a log at or past it: answers are in strictly ascending log order"
                    ),
                });
            }
            answers.push((id, r.bytes32(super::MAX_FILE_BYTES, "answer")?.to_vec()));
        }
        r.finish()?;
        Ok(Self { ledger_key, header, logs, answers })
    }
}

/// Check a bundle against the reader's ledger key and question (and group of agents, if it
/// asks of one): the header signed by that key, the leaves hashing to its state root, and for
/// every log in scope holding atoms, an answer to exactly this question at exactly the head
/// the Pulse's state gives it.
pub fn verify_fleet(
    bytes: &[u8],
    ledger_key: &VerifyingKey,
    query: &Query,
    group: Option<&str>,
) -> Result<FleetAnswer, FleetError> {
    if let Some(g) = group
        && !crate::ledger::valid_agent_name(g)
    {
        return Err(FleetError::Group(g.to_owned()));
    }
    let b = FleetBundle::decode(bytes)?;
    if b.ledger_key != ledger_key.to_bytes() {
        return Err(FleetError::Signature(format!("the bundle names key {}", hex::encode(b.ledger_key))));
    }
    b.header.verify(ledger_key).map_err(|e| FleetError::Signature(e.to_string()))?;
    let h = &b.header.header;
    let tree = MemoryTree::<Blake3>::from_leaves(b.logs.iter().map(MemoryLog::encode));
    let root = if b.logs.is_empty() { Blake3::hash_empty() } else { tree.root() };
    if root != h.state_root {
        return Err(FleetError::StateRoot { pulse: h.number, logs: b.logs.len() });
    }
    let mut answers = std::collections::BTreeMap::new();
    for (id, bytes) in &b.answers {
        let asked = b.logs.get(id.0 as usize).is_some_and(|l| in_group(l, group));
        if !asked || answers.insert(*id, bytes).is_some() {
            return Err(FleetError::NotAsked(*id));
        }
    }
    let mut out = FleetAnswer { pulse: h.number, time_ns: h.time_ns, in_scope: 0, logs: Vec::new() };
    // Attestations shared by answers (their Pulses' headers) are checked once.
    let mut checked = std::collections::HashSet::new();
    for log in b.logs.iter().filter(|l| in_group(l, group)) {
        out.in_scope += 1;
        let size = log.head.size;
        let Some(bytes) = answers.get(&log.id) else {
            if size == 0 {
                continue;
            }
            return Err(FleetError::LeftOut { log: log.id, agent: log.agent.clone(), size, pulse: h.number });
        };
        let lying = |reason: String| FleetError::Lying { log: log.id, agent: log.agent.clone(), reason };
        let file = ProofFile::decode(bytes).map_err(|e| lying(e.to_string()))?;
        let verified = file
            .verify_sharing(Some(ledger_key), &mut checked)
            .map_err(|e: VerifyError| lying(e.to_string()))?;
        Expect::answer(Question::Range(query.clone()))
            .of_log(log.id)
            .check(&verified)
            .map_err(|e| lying(e.to_string()))?;
        // The whole head — size, root, index and manifest: a commit may move the index at the
        // same size, and an answer over another index could leave atoms out.
        if verified.head != log.head {
            if verified.head.size < size {
                return Err(FleetError::Stale {
                    log: log.id,
                    agent: log.agent.clone(),
                    proved: verified.head.size,
                    size,
                    pulse: h.number,
                });
            }
            return Err(lying(format!(
                "it answers as of a head ({} atoms) that is not the one the ledger gave it at Pulse {} ({size} atoms)",
                verified.head.size, h.number
            )));
        }
        let Claim::Range { atoms, .. } = verified.claim else {
            return Err(lying("not a range proof".into()));
        };
        out.logs.push(LogAnswer { log: log.id, agent: log.agent.clone(), atoms });
    }
    Ok(out)
}
