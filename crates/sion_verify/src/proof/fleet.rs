//! Fleet recall bundles (docs/PROOFS.md, "Fleet recall"): one range question asked of every
//! log of a fleet ledger (or of a named group of agents) as of one Pulse, answered by each
//! robot's range proof, with every log's leaf at that Pulse — so the reader recomputes the
//! signed state root itself and knows the set of logs is whole: a robot left out, an answer as
//! of an older head (stale), or an answer that does not hold (lying) is refused, naming the log.
//!
//! ```text
//! "SIONFLT1"
//! 32      ledger key
//! 153     the Pulse's signed header (89-byte header, 64-byte signature; 121 with cells)
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
use crate::merkle::{Blake3, Digest, MemoryTree, TreeHasher as _};
use crate::wire::{Put as _, Reader, WireError};

const MAGIC: &[u8; 8] = b"SIONFLT1";
const MAGIC_CELLS: &[u8; 8] = b"SIONFLT2";

/// The most nodes a bundle's cell proof may have.
pub const MAX_CELL_NODES: u32 = 1 << 22;

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
    /// The cells part of a SIONFLT2 bundle does not hold: a header without cells, a later
    /// header that is not later, a cell proof that does not lead to the cells root, or a cell
    /// the question asks given without its logs.
    #[error("the bundle's cells do not hold: {0}")]
    Cells(String),
    /// A stated log's path does not lead to the Pulse's state root (SIONFLT2).
    #[error("log {log}'s state path does not lead to Pulse {pulse}'s signed state root")]
    StatePath {
        /// The log.
        log: LogId,
        /// The Pulse.
        pulse: u64,
    },
    /// A log the question's cells list, whose state the bundle does not give.
    #[error(
        "the cells the question asks list log {log}, whose state at Pulse {pulse} the bundle does not give: a robot was left out"
    )]
    Unstated {
        /// The log.
        log: LogId,
        /// The Pulse.
        pulse: u64,
    },
    /// An answer for a log out of the question's scope, or twice for one log.
    #[error(
        "log {0} is given but the question did not ask it (an answer out of the group, past the logs, or twice; or a state the question's cells do not list)"
    )]
    NotAsked(LogId),
}

impl FleetError {
    /// The refusal's code: `malformed`, `signature`, `state_root`, `left_out`, `stale`,
    /// `lying`, `not_asked`, `group` or `cells`.
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
            FleetError::Cells(_) => "cells",
            FleetError::Unstated { .. } => "left_out",
            FleetError::StatePath { .. } => "state_root",
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
    if bytes.starts_with(MAGIC_CELLS) {
        return verify_cells(bytes, ledger_key, query, group);
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
    answer_logs(&b.logs, &b.answers, ledger_key, query, group, h.number, h.time_ns)
}

/// One node of a SIONFLT2 bundle's cell proof, depth first (docs/PROOFS.md, "Fleet recall by
/// cells").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellNode {
    /// A subtree the question asks no cell of: its hash.
    Opaque(Digest),
    /// A subtree, holding a cell the question may ask, that holds no cell.
    Empty,
    /// A cell the question asks, with the logs it lists (ascending).
    Listed(u128, Vec<u64>),
    /// A subtree's one cell, which the question does not ask: its key and digest.
    Other(u128, Digest),
    /// A subtree of two cells or more: its halves follow.
    Node,
}

/// A cell proof's nodes as SIONFLT2 and the ledger's `Cells` answer hold them: `u32` count,
/// then each node (docs/PROOFS.md, "Fleet recall by cells").
pub fn put_cell_nodes(out: &mut Vec<u8>, nodes: &[CellNode]) {
    out.put_u32(nodes.len() as u32);
    for node in nodes {
        match node {
            CellNode::Opaque(d) => {
                out.put_u8(0);
                out.put_bytes(d);
            }
            CellNode::Empty => out.put_u8(1),
            CellNode::Listed(key, ids) => {
                out.put_u8(2);
                out.put_bytes(&key.to_be_bytes());
                out.put_u32(ids.len() as u32);
                for id in ids {
                    out.put_u64(*id);
                }
            }
            CellNode::Other(key, d) => {
                out.put_u8(3);
                out.put_bytes(&key.to_be_bytes());
                out.put_bytes(d);
            }
            CellNode::Node => out.put_u8(4),
        }
    }
}

/// Read what [`put_cell_nodes`] writes, bounded ([`MAX_CELL_NODES`]).
pub fn read_cell_nodes(r: &mut Reader<'_>) -> Result<Vec<CellNode>, WireError> {
    let bad = |field: &'static str, problem: String| WireError::Invalid { field, problem };
    let k = r.u32("cell nodes")?;
    // Every node takes at least its tag byte.
    if k > MAX_CELL_NODES || k as usize > r.remaining() {
        return Err(bad("cell nodes", format!("{k}, over {MAX_CELL_NODES} or the bytes left")));
    }
    let mut cells = Vec::with_capacity(k.min(4096) as usize);
    for _ in 0..k {
        cells.push(match r.u8("cell node")? {
            0 => CellNode::Opaque(r.array("cell node hash")?),
            1 => CellNode::Empty,
            2 => {
                let key = u128::from_be_bytes(r.array("cell")?);
                let m = r.u32("cell logs")? as usize;
                if m == 0 || m > r.remaining() / 8 {
                    return Err(bad("cell logs", format!("{m}: at least 1, each 8 bytes, that fit")));
                }
                let ids = (0..m).map(|_| r.u64("cell log")).collect::<Result<Vec<_>, _>>()?;
                if ids.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(bad("cell logs", "not strictly ascending".into()));
                }
                CellNode::Listed(key, ids)
            }
            3 => CellNode::Other(u128::from_be_bytes(r.array("cell")?), r.array("cell digest")?),
            4 => CellNode::Node,
            t => return Err(bad("cell node", format!("tag {t}, not 0 to 4"))),
        });
    }
    Ok(cells)
}

/// A range cell proof and the logs of the cells it lists, as nodes: a leaf whose logs are
/// given is [`CellNode::Listed`], any other leaf [`CellNode::Other`].
pub fn cell_nodes(
    proof: &crate::cells::RangeCellProof,
    lists: &std::collections::BTreeMap<u128, Vec<u64>>,
) -> Vec<CellNode> {
    use crate::cells::RangeNode;
    proof
        .nodes
        .iter()
        .map(|n| match *n {
            RangeNode::Opaque(d) => CellNode::Opaque(d),
            RangeNode::Empty => CellNode::Empty,
            RangeNode::Leaf(k, d) => match lists.get(&k) {
                Some(ids) => CellNode::Listed(k, ids.clone()),
                None => CellNode::Other(k, d),
            },
            RangeNode::Node => CellNode::Node,
        })
        .collect()
}

/// The range cell proof the nodes make (a listed cell's digest is its logs' digest), and the
/// logs of each listed cell: what [`cell_nodes`] was made from.
pub fn range_of_nodes(
    nodes: &[CellNode],
) -> (crate::cells::RangeCellProof, std::collections::BTreeMap<u128, Vec<u64>>) {
    use crate::cells::{RangeNode, logs_digest};
    let mut lists = std::collections::BTreeMap::new();
    let nodes = nodes
        .iter()
        .map(|n| match n {
            CellNode::Opaque(d) => RangeNode::Opaque(*d),
            CellNode::Empty => RangeNode::Empty,
            CellNode::Listed(k, ids) => {
                lists.insert(*k, ids.clone());
                RangeNode::Leaf(*k, logs_digest(ids))
            }
            CellNode::Other(k, d) => RangeNode::Leaf(*k, *d),
            CellNode::Node => RangeNode::Node,
        })
        .collect();
    (crate::cells::RangeCellProof { nodes }, lists)
}

/// A fleet recall answered by cells (SIONFLT2): the question's cells at the Pulse asked, so
/// only the logs they list are stated and answer; a log they leave out holds nothing in the
/// box, or its writer broke the cells rule (proof kind 10 convicts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellBundle {
    /// The key the bundle says signed the header.
    pub ledger_key: [u8; 32],
    /// The Pulse asked as of (a version 2 header: its cells root).
    pub header: SignedHeader,
    /// The cell proof, against the header's cells root.
    pub cells: Vec<CellNode>,
    /// The logs the asked cells list, opened by the Pulse asked about: each as that Pulse's
    /// state holds it, with its state path, ascending id.
    pub logs: Vec<(MemoryLog, Vec<Digest>)>,
    /// The range proofs, by log, ascending.
    pub answers: Vec<(LogId, Vec<u8>)>,
}

impl CellBundle {
    /// The bundle's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_bytes(MAGIC_CELLS);
        out.put_bytes(&self.ledger_key);
        self.header.put(&mut out);
        put_cell_nodes(&mut out, &self.cells);
        out.put_u32(self.logs.len() as u32);
        for (log, path) in &self.logs {
            out.put_bytes32(&log.encode());
            out.put_u8(path.len() as u8);
            for d in path {
                out.put_bytes(d);
            }
        }
        out.put_u32(self.answers.len() as u32);
        for (id, proof) in &self.answers {
            out.put_u64(id.0);
            out.put_bytes32(proof);
        }
        out
    }

    /// Read a SIONFLT2 bundle, bounded ([`MAX_BUNDLE_BYTES`], [`MAX_CELL_NODES`], [`MAX_LOGS`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let bad = |field: &'static str, problem: String| WireError::Invalid { field, problem };
        if bytes.len() > MAX_BUNDLE_BYTES {
            return Err(bad("bundle", format!("{} bytes, over {MAX_BUNDLE_BYTES}", bytes.len())));
        }
        let mut r = Reader::new(bytes);
        if r.take(8, "magic")? != MAGIC_CELLS {
            return Err(bad("magic", "not SIONFLT2".into()));
        }
        let ledger_key = r.array("ledger key")?;
        let header = SignedHeader::read(&mut r)?;
        let cells = read_cell_nodes(&mut r)?;
        let s = r.u32("logs")?;
        if u64::from(s) > MAX_LOGS || s as usize > r.remaining() / 5 {
            return Err(bad("logs", format!("{s}, over {MAX_LOGS} or the bytes left")));
        }
        let mut logs: Vec<(MemoryLog, Vec<Digest>)> = Vec::with_capacity(s.min(4096) as usize);
        for _ in 0..s {
            let log = MemoryLog::decode(r.bytes32(4096, "leaf")?)?;
            if logs.last().is_some_and(|(l, _)| l.id.0 >= log.id.0) {
                return Err(bad("leaf", format!("log {} after a log at or past it: ascending ids", log.id)));
            }
            let n = r.u8("state path")?;
            let path = (0..n).map(|_| r.array("state path")).collect::<Result<Vec<_>, _>>()?;
            logs.push((log, path));
        }
        let m = r.u32("answers")?;
        if m > s {
            return Err(bad("answers", format!("{m} answers for {s} logs")));
        }
        let mut answers: Vec<(LogId, Vec<u8>)> = Vec::with_capacity(m.min(4096) as usize);
        for _ in 0..m {
            let id = LogId(r.u64("answer's log")?);
            if answers.last().is_some_and(|(last, _)| last.0 >= id.0) {
                return Err(bad(
                    "answer's log",
                    format!("log {id} after a log at or past it: ascending ids"),
                ));
            }
            answers.push((id, r.bytes32(super::MAX_FILE_BYTES, "answer")?.to_vec()));
        }
        r.finish()?;
        Ok(Self { ledger_key, header, cells, logs, answers })
    }
}

/// Check a SIONFLT2 bundle ([`verify_fleet`] reads either kind): the headers signed by the
/// reader's key, the cell proof against the cells root for the question's own cells (the
/// reader computes which those are), every log they list (opened by the Pulse) stated at the
/// Pulse, and every one of those in scope holding atoms answering exactly this question at
/// exactly its head.
fn verify_cells(
    bytes: &[u8],
    ledger_key: &VerifyingKey,
    query: &Query,
    group: Option<&str>,
) -> Result<FleetAnswer, FleetError> {
    use crate::cells::CellQuery;
    let b = CellBundle::decode(bytes)?;
    if b.ledger_key != ledger_key.to_bytes() {
        return Err(FleetError::Signature(format!("the bundle names key {}", hex::encode(b.ledger_key))));
    }
    b.header.verify(ledger_key).map_err(|e| FleetError::Signature(e.to_string()))?;
    let h = &b.header.header;
    let cells_root = h.cells.ok_or_else(|| {
        FleetError::Cells("the header carries no cells root (a ledger made before cells)".into())
    })?;
    let asked = CellQuery::new(&query.frame, &query.bounds);
    range_of_nodes(&b.cells)
        .0
        .verify_asked(&cells_root, &asked)
        .map_err(|e| FleetError::Cells(e.to_string()))?;
    // Each asked cell the proof shows is a tag 2 (with its logs), and no other is.
    let mut listed = std::collections::BTreeSet::new();
    for node in &b.cells {
        match node {
            CellNode::Listed(k, ids) if asked.contains(*k) => listed.extend(ids.iter().copied()),
            CellNode::Listed(k, _) => {
                return Err(FleetError::Cells(format!("cell {k:032x} is given with its logs but not asked")));
            }
            CellNode::Other(k, _) if asked.contains(*k) => {
                return Err(FleetError::Cells(format!("cell {k:032x} is asked but given without its logs")));
            }
            _ => {}
        }
    }
    // The stated logs are exactly those listed (both ascending): the first id in one and not
    // the other decides — listed, not stated: left out; stated, not listed: not asked.
    let stated: Vec<u64> = b.logs.iter().map(|(l, _)| l.id.0).collect();
    let listed: Vec<u64> = listed.into_iter().collect();
    if let Some(i) = (0..listed.len().max(stated.len())).find(|&i| listed.get(i) != stated.get(i)) {
        return Err(match (listed.get(i), stated.get(i)) {
            (Some(l), Some(s)) if s < l => FleetError::NotAsked(LogId(*s)),
            (Some(l), _) => FleetError::Unstated { log: LogId(*l), pulse: h.number },
            (None, s) => FleetError::NotAsked(LogId(s.copied().unwrap_or_default())),
        });
    }
    for (log, path) in &b.logs {
        let leaf = Blake3::hash_leaf(&log.encode());
        crate::merkle::verify_inclusion::<Blake3, _>(log.id.0, h.logs, &leaf, path, &h.state_root)
            .map_err(|_| FleetError::StatePath { log: log.id, pulse: h.number })?;
    }
    let logs: Vec<MemoryLog> = b.logs.iter().map(|(l, _)| l.clone()).collect();
    answer_logs(&logs, &b.answers, ledger_key, query, group, h.number, h.time_ns)
}

/// Every stated log in scope holding atoms answers exactly `query` at exactly its head; no
/// answer is of a log not stated or out of scope.
fn answer_logs(
    logs: &[MemoryLog],
    given: &[(LogId, Vec<u8>)],
    ledger_key: &VerifyingKey,
    query: &Query,
    group: Option<&str>,
    pulse: u64,
    time_ns: i64,
) -> Result<FleetAnswer, FleetError> {
    let mut answers = std::collections::BTreeMap::new();
    for (id, bytes) in given {
        // Logs are in ascending id order (SIONFLT1: every log; SIONFLT2: those stated).
        let asked = logs
            .binary_search_by_key(&id.0, |l| l.id.0)
            .ok()
            .and_then(|i| logs.get(i))
            .is_some_and(|l| in_group(l, group));
        if !asked || answers.insert(*id, bytes).is_some() {
            return Err(FleetError::NotAsked(*id));
        }
    }
    let mut out = FleetAnswer { pulse, time_ns, in_scope: 0, logs: Vec::new() };
    // Attestations shared by answers (their Pulses' headers) are checked once.
    let mut checked = std::collections::HashSet::new();
    for log in logs.iter().filter(|l| in_group(l, group)) {
        out.in_scope += 1;
        let size = log.head.size;
        let Some(bytes) = answers.get(&log.id) else {
            if size == 0 {
                continue;
            }
            return Err(FleetError::LeftOut { log: log.id, agent: log.agent.clone(), size, pulse });
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
                    pulse,
                });
            }
            return Err(lying(format!(
                "it answers as of a head ({} atoms) that is not the one the ledger gave it at Pulse {} ({size} atoms)",
                verified.head.size, pulse
            )));
        }
        let Claim::Range { atoms, .. } = verified.claim else {
            return Err(lying("not a range proof".into()));
        };
        out.logs.push(LogAnswer { log: log.id, agent: log.agent.clone(), atoms });
    }
    Ok(out)
}
