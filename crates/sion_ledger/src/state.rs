//! The ledger's state machine: the rules each transaction must pass (docs/LEDGER.md,
//! "Rules"). `check` decides and describes the change; nothing here does I/O.

use std::collections::{BTreeMap, HashMap};

use super::LedgerError;
use super::tree::StateTree;
use sion_verify::cells::{CellProof, CellTrie, RangeCellProof, logs_digest};
use sion_verify::ledger::MAX_TX_CELLS;
use sion_verify::ledger::{
    Account, Agent, AgentStatus, Chain, LogId, MemoryLog, SignedTx, Tx, empty_head, parent_of,
    valid_agent_name,
};
use sion_verify::merkle::{Blake3, TreeHasher as _, verify_consistency};

/// The ledger's current state: every log, agent and account nonce. The embedded ledger and
/// the fleet ledger (crates/sion_fleet) both decide with it.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub logs: Vec<MemoryLog>,
    pub agents: BTreeMap<String, Agent>,
    pub nonces: HashMap<Account, u64>,
    /// Whether each log's leaf chains it to its writer's logs before and after it (leaf
    /// version 2): every ledger made since chains were; an older one keeps its version 1
    /// leaves, which its signed headers commit to (docs/LEDGER.md, "Pulses").
    pub chained: bool,
    /// The cell map, on a ledger made with cells (docs/LEDGER.md, "Cells"); `None` on one made
    /// before them, whose headers are of version 1.
    pub cells: Option<Cells>,
    /// The state tree over `logs`, kept as [`State::apply`] changes them ([`State::index`]
    /// builds it after a state is read whole); one out of step with `logs` is not used.
    tree: Option<StateTree>,
}

/// The cell map: for each map cell, the logs that hold atoms there (ascending), and the trie
/// over the cells' digests whose root a version 2 header carries. It only grows: a log once
/// listed in a cell stays listed. The Pulse that listed each is kept, so the map as of any
/// Pulse can be proved again (a writer that lists a cell late is convicted as of the Pulse
/// that recorded its atom).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cells {
    logs: HashMap<u128, Vec<u64>>,
    listed_at: HashMap<(u128, u64), u64>,
    trie: CellTrie,
}

impl Cells {
    /// The logs listed in cell `key` (empty for a cell no log has met).
    pub fn logs_at(&self, key: u128) -> &[u64] {
        self.logs.get(&key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// How many cells some log has met.
    pub fn len(&self) -> usize {
        self.logs.len()
    }

    /// Whether no log has met any cell.
    pub fn is_empty(&self) -> bool {
        self.logs.is_empty()
    }

    /// Every cell and its logs with the Pulse that listed each, in key order (for a snapshot
    /// of the state).
    pub fn sorted(&self) -> Vec<(u128, Vec<(u64, u64)>)> {
        let mut out: Vec<(u128, Vec<(u64, u64)>)> = self
            .logs
            .iter()
            .map(|(k, ids)| {
                (
                    *k,
                    ids.iter()
                        .map(|id| (*id, self.listed_at.get(&(*k, *id)).copied().unwrap_or(0)))
                        .collect(),
                )
            })
            .collect();
        out.sort_unstable_by_key(|(k, _)| *k);
        out
    }

    /// The latest Pulse that listed a log in a cell (0 for none).
    pub fn last_listing(&self) -> u64 {
        self.listed_at.values().copied().max().unwrap_or(0)
    }

    /// The map as it stood after Pulse `pulse`: its trie (root computed) and each cell's logs.
    pub fn as_of(&self, pulse: u64) -> (CellTrie, HashMap<u128, Vec<u64>>) {
        let mut trie = CellTrie::new();
        let mut logs = HashMap::new();
        for (key, ids) in &self.logs {
            let then: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| self.listed_at.get(&(*key, *id)).is_some_and(|p| *p <= pulse))
                .collect();
            if !then.is_empty() {
                trie.insert(*key, logs_digest(&then));
                logs.insert(*key, then);
            }
        }
        trie.root();
        (trie, logs)
    }

    /// The trie's root: what the header carries.
    pub fn root(&mut self) -> sion_verify::merkle::Digest {
        self.trie.root()
    }

    /// The proof of which logs cell `key` lists (or that it lists none).
    pub fn prove(&self, key: u128) -> CellProof {
        self.trie.prove(key)
    }

    /// The proof of every cell `asked` asks, and the logs each of them lists.
    pub fn prove_asked<A: sion_verify::cells::Asked + ?Sized>(
        &self,
        asked: &A,
    ) -> (RangeCellProof, BTreeMap<u128, Vec<u64>>) {
        prove_asked(&self.trie, asked, |k| self.logs_at(k).to_vec())
    }

    /// [`Cells::prove_asked`] within a budget ([`prove_asked_within`]).
    pub fn prove_asked_within<A: sion_verify::cells::Asked + ?Sized>(
        &self,
        asked: &A,
        most_nodes: usize,
        most_logs: usize,
    ) -> Option<(RangeCellProof, BTreeMap<u128, Vec<u64>>)> {
        prove_asked_within(&self.trie, asked, most_nodes, most_logs, |k| self.logs_at(k).to_vec())
    }

    /// The proof of every cell within `ranges` (inclusive key ranges, ascending).
    pub fn prove_ranges(&self, ranges: &[(u128, u128)]) -> RangeCellProof {
        self.trie.prove_ranges(ranges)
    }

    /// List `log` in cell `key` at Pulse `pulse`; whether it was not listed before.
    pub fn add(&mut self, key: u128, log: u64, pulse: u64) -> bool {
        let ids = self.logs.entry(key).or_default();
        let Err(at) = ids.binary_search(&log) else { return false };
        ids.insert(at, log);
        self.trie.insert(key, logs_digest(ids));
        self.listed_at.insert((key, log), pulse);
        true
    }

    /// Cell `key`'s logs and the Pulse that listed each, as a snapshot holds them (ids strictly
    /// ascending, at least one, the cell not loaded before); whether they were.
    pub fn load(&mut self, key: u128, listed: Vec<(u64, u64)>) -> bool {
        if listed.is_empty() || listed.windows(2).any(|w| w[0].0 >= w[1].0) || self.logs.contains_key(&key) {
            return false;
        }
        let ids: Vec<u64> = listed.iter().map(|(id, _)| *id).collect();
        self.trie.insert(key, logs_digest(&ids));
        self.listed_at.extend(listed.into_iter().map(|(id, pulse)| ((key, id), pulse)));
        self.logs.insert(key, ids);
        true
    }

    /// Take `log` out of cell `key` again (undoing [`Cells::add`]).
    fn take_out(&mut self, key: u128, log: u64) {
        let Some(ids) = self.logs.get_mut(&key) else { return };
        if let Ok(at) = ids.binary_search(&log) {
            ids.remove(at);
        }
        self.listed_at.remove(&(key, log));
        if ids.is_empty() {
            self.logs.remove(&key);
            self.trie.remove(key);
        } else {
            let d = logs_digest(ids);
            self.trie.insert(key, d);
        }
    }
}

/// The proof of every cell `asked` asks in `trie`, and the logs (`logs_of`) of each asked cell
/// the proof shows.
pub fn prove_asked<A: sion_verify::cells::Asked + ?Sized>(
    trie: &CellTrie,
    asked: &A,
    logs_of: impl Fn(u128) -> Vec<u64>,
) -> (RangeCellProof, BTreeMap<u128, Vec<u64>>) {
    let proof = trie.prove_asked(asked);
    let lists = proof
        .nodes
        .iter()
        .filter_map(|n| match n {
            sion_verify::cells::RangeNode::Leaf(k, _) if asked.meets(128, *k) => Some((*k, logs_of(*k))),
            _ => None,
        })
        .collect();
    (proof, lists)
}

/// [`prove_asked`] within a budget (`None` past it): at most `most_nodes` nodes, and at most
/// `most_logs` logs listed over the asked cells, so a service bounds what a stranger's question
/// costs it before it is sent.
pub fn prove_asked_within<A: sion_verify::cells::Asked + ?Sized>(
    trie: &CellTrie,
    asked: &A,
    most_nodes: usize,
    most_logs: usize,
    logs_of: impl Fn(u128) -> Vec<u64>,
) -> Option<(RangeCellProof, BTreeMap<u128, Vec<u64>>)> {
    let proof = trie.prove_asked_within(asked, most_nodes)?;
    let mut lists = BTreeMap::new();
    let mut logs = 0usize;
    for n in &proof.nodes {
        if let sion_verify::cells::RangeNode::Leaf(k, _) = n
            && asked.meets(128, *k)
        {
            let l = logs_of(*k);
            logs += l.len();
            if logs > most_logs {
                return None;
            }
            lists.insert(*k, l);
        }
    }
    Some((proof, lists))
}

/// What [`State::apply`] changed, to put back with [`State::undo`] (a Pulse that could not be
/// made durable, or lost a race), without copying the whole state beforehand.
#[derive(Debug, Clone)]
pub struct Undo {
    sender: Account,
    nonce: Option<u64>,
    agent: Option<(String, Option<Agent>)>,
    replaced: Vec<MemoryLog>,
    pushed: bool,
    /// The cells the change listed its log in.
    listed: Vec<(u128, u64)>,
}

/// What an accepted transaction changes: an agent, or a log and the cells it is listed in.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per transaction, moved once: not worth a box
pub enum Change {
    Agent(Agent),
    Log(MemoryLog, Vec<u128>),
}

/// Whether [`State::check_as`] checks the transaction's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signature {
    Check,
    /// Already checked by the caller, or its effect fixed by what the ledger's key signed.
    Checked,
}

impl State {
    /// The header of Pulse `number` over this state (`prev`: the previous header's hash, zeros
    /// for the genesis).
    pub fn header(
        &mut self,
        number: u64,
        time_ns: i64,
        prev: sion_verify::merkle::Digest,
    ) -> sion_verify::ledger::PulseHeader {
        let (logs, state_root) = self.root();
        let cells = self.cells.as_mut().map(Cells::root);
        sion_verify::ledger::PulseHeader { number, time_ns, logs, state_root, prev, cells }
    }

    /// A state for a new ledger: chained, and with cells when `cells`.
    pub fn new_ledger(cells: bool) -> Self {
        Self { chained: true, cells: cells.then(Cells::default), ..Self::default() }
    }

    /// Build the state tree over the logs as they are (once, after a state is read whole):
    /// from then on each [`State::apply`] rehashes only what it changes.
    pub fn index(&mut self) {
        self.tree = Some(StateTree::from_leaves(self.logs.iter().map(MemoryLog::encode)));
    }

    fn tree(&self) -> Option<&StateTree> {
        self.tree.as_ref().filter(|t| t.size() == self.logs.len() as u64)
    }

    /// How many logs, and the state tree's root over them (from the tree kept, or built here
    /// over every log when none is kept).
    pub fn root(&self) -> (u64, sion_verify::merkle::Digest) {
        match self.tree() {
            Some(t) => (t.size(), t.root()),
            None => {
                let t = sion_verify::merkle::MemoryTree::<Blake3>::from_leaves(
                    self.logs.iter().map(MemoryLog::encode),
                );
                (t.size(), t.root())
            }
        }
    }

    /// Log `id`'s inclusion path in the current state's tree (`None` for no such log).
    pub fn path(&self, id: LogId) -> Option<Vec<sion_verify::merkle::Digest>> {
        match self.tree() {
            Some(t) => t.path(id.0),
            None => {
                let t = StateTree::from_leaves(self.logs.iter().map(MemoryLog::encode));
                t.path(id.0)
            }
        }
    }

    /// Tier block `s` of tier `t` of the kept tree ([`StateTree::tier_block`]); empty when no
    /// tree is kept.
    pub fn tier_block(&self, t: u32, s: u64) -> Vec<sion_verify::merkle::Digest> {
        self.tree().map(|tree| tree.tier_block(t, s)).unwrap_or_default()
    }

    /// The log `writer` opened last, if any: the end of its chain (a log opened more recently
    /// by someone else has a greater id, so the search from the end is short for a busy
    /// writer).
    pub fn last_log_of(&self, writer: &Account) -> Option<LogId> {
        self.logs.iter().rev().find(|l| l.writer == *writer).map(|l| l.id)
    }

    /// The logs an opening changes besides the new one: its writer's previous last log, now
    /// with `next` (none on an unchained ledger, or for a writer's first log).
    pub fn chained_by(&self, opened: &MemoryLog) -> Option<MemoryLog> {
        let prev = opened.chain?.prev?;
        let mut before = self.logs.get(prev.0 as usize)?.clone();
        if let Some(c) = &mut before.chain {
            c.next = Some(opened.id);
        }
        Some(before)
    }

    pub fn nonce(&self, account: &Account) -> u64 {
        self.nonces.get(account).copied().unwrap_or(0)
    }

    /// The first agent at or above `name` that is not live, if any.
    fn blocked(&self, name: &str) -> Result<Option<&Agent>, LedgerError> {
        let mut at = Some(name);
        while let Some(n) = at {
            let agent = self.agents.get(n).ok_or_else(|| LedgerError::UnknownAgent(n.to_owned()))?;
            if agent.status != AgentStatus::Live {
                return Ok(Some(agent));
            }
            at = parent_of(n);
        }
        Ok(None)
    }

    /// Agent `name`, if `sender` may change it: `own` (the agent's own controller, where the
    /// transaction lets it), the operator, or the controller of an agent above it; and it is
    /// not revoked (revocation is final).
    fn changeable(
        &self,
        name: &str,
        operator: &Account,
        sender: Account,
        own: bool,
    ) -> Result<&Agent, LedgerError> {
        let agent = self.agents.get(name).ok_or_else(|| LedgerError::UnknownAgent(name.to_owned()))?;
        let mut above = parent_of(name);
        let mut allowed = own || sender == *operator;
        while let (false, Some(n)) = (allowed, above) {
            allowed = self.agents.get(n).is_some_and(|a| a.controller == sender);
            above = parent_of(n);
        }
        if !allowed {
            return Err(LedgerError::NotController { agent: name.to_owned(), sender });
        }
        if agent.status == AgentStatus::Revoked {
            return Err(LedgerError::AgentNotLive {
                agent: name.to_owned(),
                blocked_by: name.to_owned(),
                status: AgentStatus::Revoked,
            });
        }
        Ok(agent)
    }

    fn require_live(&self, name: &str) -> Result<(), LedgerError> {
        match self.blocked(name)? {
            None => Ok(()),
            Some(a) => Err(LedgerError::AgentNotLive {
                agent: name.to_owned(),
                blocked_by: a.name.clone(),
                status: a.status,
            }),
        }
    }

    pub fn check(&self, operator: &Account, stx: &SignedTx, pulse: u64) -> Result<Change, LedgerError> {
        self.check_as(operator, stx, pulse, Signature::Check)
    }

    /// [`State::check`], its signature check left to the caller when `signature` says it was
    /// done (a front-end's door checks every `Submit`'s before it queues it) or is not needed.
    pub fn check_as(
        &self,
        operator: &Account,
        stx: &SignedTx,
        pulse: u64,
        signature: Signature,
    ) -> Result<Change, LedgerError> {
        if signature == Signature::Check && !stx.signature_holds() {
            return Err(LedgerError::BadSignature);
        }
        let expected = self.nonce(&stx.sender);
        if stx.nonce != expected {
            return Err(LedgerError::Nonce { expected, got: stx.nonce });
        }
        let sender = stx.sender;
        match &stx.tx {
            Tx::RegisterAgent { name, controller } => {
                if !valid_agent_name(name) {
                    return Err(LedgerError::BadAgentName(name.clone()));
                }
                if self.agents.contains_key(name) {
                    return Err(LedgerError::AgentExists(name.clone()));
                }
                if let Some(parent) = parent_of(name) {
                    let p = self
                        .agents
                        .get(parent)
                        .ok_or_else(|| LedgerError::UnknownAgent(parent.to_owned()))?;
                    if p.controller != sender {
                        return Err(LedgerError::NotController { agent: parent.to_owned(), sender });
                    }
                    self.require_live(parent)?;
                }
                Ok(Change::Agent(Agent {
                    name: name.clone(),
                    controller: *controller,
                    status: AgentStatus::Live,
                }))
            }
            Tx::SetAgentStatus { name, status } => {
                let agent = self.agents.get(name).ok_or_else(|| LedgerError::UnknownAgent(name.clone()))?;
                // An agent may stop itself; only those above it (or the operator) may restart it.
                let own = agent.controller == sender && *status != AgentStatus::Live;
                let agent = self.changeable(name, operator, sender, own)?;
                Ok(Change::Agent(Agent { status: *status, ..agent.clone() }))
            }
            Tx::ReassignAgent { name, controller } => {
                // As for reinstating: the operator, or the controller of an agent above.
                let agent = self.changeable(name, operator, sender, false)?;
                Ok(Change::Agent(Agent { controller: *controller, ..agent.clone() }))
            }
            Tx::OpenMemory { agent, policy } => {
                if let Some(name) = agent {
                    let a = self.agents.get(name).ok_or_else(|| LedgerError::UnknownAgent(name.clone()))?;
                    if a.controller != sender {
                        return Err(LedgerError::NotController { agent: name.clone(), sender });
                    }
                    self.require_live(name)?;
                }
                Ok(Change::Log(
                    MemoryLog {
                        id: LogId(self.logs.len() as u64),
                        writer: sender,
                        agent: agent.clone(),
                        policy: *policy,
                        head: empty_head(),
                        commits: 0,
                        committed_at: pulse,
                        sealed: false,
                        chain: self.chained.then(|| Chain { prev: self.last_log_of(&sender), next: None }),
                    },
                    Vec::new(),
                ))
            }
            Tx::CommitMemory { log, version, head, proof, seal, cells } => {
                let current = self.logs.get(log.0 as usize).ok_or(LedgerError::UnknownLog(*log))?;
                self.check_cells(*log, cells)?;
                if current.writer != sender {
                    return Err(LedgerError::NotWriter { log: *log, sender });
                }
                if current.sealed {
                    return Err(LedgerError::Sealed(*log));
                }
                if *version != current.commits {
                    return Err(LedgerError::Stale {
                        log: *log,
                        version: *version,
                        current: current.commits,
                    });
                }
                let (old, new) = (&current.head, head);
                if new.size < old.size {
                    return Err(LedgerError::Shrinks { log: *log, from: old.size, to: new.size });
                }
                // Growing, or naming cells (which makes readers open the log): a contained agent
                // does neither.
                if (new.size > old.size || !cells.is_empty())
                    && let Some(name) = &current.agent
                {
                    self.require_live(name)?;
                    // An agent given to another controller takes no more atoms from the old
                    // one (before any reassignment, every log's writer controls its agent).
                    if self.agents.get(name).is_some_and(|a| a.controller != sender) {
                        return Err(LedgerError::NotController { agent: name.clone(), sender });
                    }
                }
                if new.size == old.size {
                    if new.root != old.root || !proof.is_empty() {
                        return Err(LedgerError::RootChanged { log: *log, size: new.size });
                    }
                } else if old.size == 0 {
                    // Every log extends the empty one: there is nothing to prove.
                    if !proof.is_empty() {
                        return Err(LedgerError::Fork {
                            log: *log,
                            from: 0,
                            to: new.size,
                            reason: "a commit onto the empty log carries no proof".into(),
                        });
                    }
                } else {
                    verify_consistency::<Blake3, _>(old.size, new.size, &old.root, &new.root, proof)
                        .map_err(|e| LedgerError::Fork {
                            log: *log,
                            from: old.size,
                            to: new.size,
                            reason: e.to_string(),
                        })?;
                }
                Ok(Change::Log(
                    MemoryLog {
                        head: *new,
                        commits: current.commits + 1,
                        committed_at: pulse,
                        sealed: *seal,
                        ..current.clone()
                    },
                    cells.clone(),
                ))
            }
        }
    }

    /// A commit's cells: none on a ledger made without cells; at most [`MAX_TX_CELLS`],
    /// strictly increasing, each of a level the cells have (the encoding says the same, but a
    /// transaction made in this process was never decoded).
    fn check_cells(&self, log: LogId, cells: &[u128]) -> Result<(), LedgerError> {
        if cells.is_empty() {
            return Ok(());
        }
        let problem = if self.cells.is_none() {
            Some("this ledger was made without cells: its commits carry none".to_owned())
        } else if cells.len() > MAX_TX_CELLS {
            Some(format!("{} cells, over {MAX_TX_CELLS}", cells.len()))
        } else if cells.windows(2).any(|w| w[0] >= w[1]) {
            Some("the cells are not in strictly increasing key order".to_owned())
        } else {
            cells
                .iter()
                .position(|&k| sion_verify::cells::key_level(k) > sion_verify::cells::MAX_LEVEL)
                .map(|i| format!("cell {i} is of a level past {}", sion_verify::cells::MAX_LEVEL))
        };
        match problem {
            None => Ok(()),
            Some(problem) => Err(LedgerError::Cells { log, problem }),
        }
    }

    /// Make an accepted change, rehashing only what it changes in the kept tree; what it
    /// changed, to put back with [`State::undo`].
    pub fn apply(&mut self, sender: Account, change: Change) -> Undo {
        let synced = self.tree().is_some();
        let nonce = self.nonces.get(&sender).copied();
        *self.nonces.entry(sender).or_insert(0) += 1;
        let mut undo =
            Undo { sender, nonce, agent: None, replaced: Vec::new(), pushed: false, listed: Vec::new() };
        let mut touched: Vec<u64> = Vec::new();
        match change {
            Change::Agent(a) => {
                let name = a.name.clone();
                let before = self.agents.insert(name.clone(), a);
                undo.agent = Some((name, before));
            }
            Change::Log(log, cells) => match self.logs.get_mut(log.id.0 as usize) {
                Some(slot) => {
                    if let Some(map) = self.cells.as_mut() {
                        for key in cells {
                            if map.add(key, log.id.0, log.committed_at) {
                                undo.listed.push((key, log.id.0));
                            }
                        }
                    }
                    touched.push(log.id.0);
                    undo.replaced.push(std::mem::replace(slot, log));
                }
                None => {
                    if let Some(before) = self.chained_by(&log)
                        && let Some(slot) = self.logs.get_mut(before.id.0 as usize)
                    {
                        touched.push(before.id.0);
                        undo.replaced.push(std::mem::replace(slot, before));
                    }
                    self.logs.push(log);
                    undo.pushed = true;
                }
            },
        }
        self.rehash(synced, &touched, undo.pushed);
        undo
    }

    /// Put back what [`State::apply`] changed (the last change applied, first).
    pub fn undo(&mut self, undo: Undo) {
        let synced = self.tree().is_some();
        if let Some(map) = self.cells.as_mut() {
            for &(key, log) in undo.listed.iter().rev() {
                map.take_out(key, log);
            }
        }
        match undo.nonce {
            Some(n) => self.nonces.insert(undo.sender, n),
            None => self.nonces.remove(&undo.sender),
        };
        if let Some((name, before)) = undo.agent {
            match before {
                Some(a) => self.agents.insert(name, a),
                None => self.agents.remove(&name),
            };
        }
        if undo.pushed {
            self.logs.pop();
            if let Some(t) = self.tree.as_mut().filter(|_| synced) {
                t.pop();
            }
        }
        let mut touched = Vec::new();
        for log in undo.replaced {
            if let Some(slot) = self.logs.get_mut(log.id.0 as usize) {
                touched.push(log.id.0);
                *slot = log;
            }
        }
        self.rehash(synced, &touched, false);
    }

    /// Bring the kept tree up to the logs after a change to `touched` (and a log pushed), if it
    /// was in step before; else drop it (the next [`State::index`] rebuilds it).
    fn rehash(&mut self, synced: bool, touched: &[u64], pushed: bool) {
        if !synced {
            self.tree = None;
            return;
        }
        let Some(tree) = self.tree.as_mut() else { return };
        for &i in touched {
            if let Some(l) = self.logs.get(i as usize) {
                tree.set(i, Blake3::hash_leaf(&l.encode()));
            }
        }
        if pushed && let Some(l) = self.logs.last() {
            tree.push(Blake3::hash_leaf(&l.encode()));
        }
    }
}
