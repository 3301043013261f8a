//! The writer's side of a belief bundle (docs/BELIEF.md, "Bundles"): the proof files a reader
//! needs to check a fold from heads alone, built from the logs of the revisers it trusts.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use sion_verify::atom::AtomId;
use sion_verify::belief::{State, simulated};
use sion_verify::ledger::{LogId, MemoryLog};
use sion_verify::proof::{Attestation, Claim, ListKey, ProofFile};

use super::{Memory, MemoryError};
use crate::index::IndexReader;
use crate::log::Log;

/// What a bundle needs of one memory: the ledger's word about it (a few reads) and link proofs
/// from its log and index (the long part, read without any lock: [`Shared`]).
pub trait Source {
    /// The log's writer key.
    fn writer_key(&self) -> [u8; 32];
    /// The log's id on its ledger.
    fn log_id(&self) -> LogId;
    /// The memory's directory, for errors.
    fn dir(&self) -> PathBuf;
    /// The ledger's latest Pulse.
    fn latest_pulse(&self) -> Result<u64, MemoryError>;
    /// The ledger's attestation of this log at `pulse`.
    fn attestation_at(&self, pulse: u64) -> Result<Attestation, MemoryError>;
    /// The ledger's attestation of log `id` at `pulse`.
    fn attestation_of(&self, id: LogId, pulse: u64) -> Result<Attestation, MemoryError>;
    /// When the atom at `position` was recorded, as a proof file (kind 6).
    fn prove_recorded(&self, position: u64) -> Result<ProofFile, MemoryError>;
    /// What list proofs read, none of it behind a lock: the index, the log, the log's id, and
    /// the first position the index's version 2 covers.
    fn lists(&self) -> (&IndexReader, &Log, LogId, u64);
    /// The complete list of atoms linking to `target`, against `version` (kind 4).
    fn prove_links(
        &self,
        version: &MemoryLog,
        attestation: Attestation,
        target: AtomId,
    ) -> Result<ProofFile, MemoryError> {
        let (reader, log, id, v2_from) = self.lists();
        Ok(super::prove_list(reader, log, id, version, attestation, ListKey::LinksTo(target), v2_from)?)
    }
}

impl Source for Memory {
    fn writer_key(&self) -> [u8; 32] {
        self.writer().verifying_key().to_bytes()
    }
    fn log_id(&self) -> LogId {
        Memory::log_id(self)
    }
    fn dir(&self) -> PathBuf {
        Memory::dir(self).to_owned()
    }
    fn latest_pulse(&self) -> Result<u64, MemoryError> {
        Ok(self.ledger().latest()?.header.number)
    }
    fn attestation_at(&self, pulse: u64) -> Result<Attestation, MemoryError> {
        Ok(Memory::attestation_at(self, pulse)?)
    }
    fn attestation_of(&self, id: LogId, pulse: u64) -> Result<Attestation, MemoryError> {
        Ok(Memory::attestation_of(self, id, pulse)?)
    }
    fn prove_recorded(&self, position: u64) -> Result<ProofFile, MemoryError> {
        Ok(Memory::prove_recorded(self, position)?)
    }
    fn lists(&self) -> (&IndexReader, &Log, LogId, u64) {
        (self.index_reader(), self.log(), Memory::log_id(self), self.index_from())
    }
}

/// A memory its writer holds behind a lock (a node's kernel, `sion mcp`), as a bundle's
/// source: the ledger is read under the lock, one read at a time, and link proofs — most of a
/// bundle's work — from the log and index without it, so commits and appends do not wait for
/// a bundle. Every ledger read is of the one Pulse chosen first (or of a recorded time, which
/// never changes), so a commit in between changes nothing the bundle holds.
pub struct Shared<'a> {
    memory: &'a Mutex<Memory>,
    reader: IndexReader,
    log: Log,
    log_id: LogId,
    writer: [u8; 32],
    dir: PathBuf,
    index_from: u64,
}

impl<'a> Shared<'a> {
    /// Take what the link proofs need from the memory, holding its lock a moment.
    pub fn new(memory: &'a Mutex<Memory>) -> Self {
        let m = memory.lock().unwrap_or_else(PoisonError::into_inner);
        Self {
            reader: m.index_reader().clone(),
            log: m.log().clone(),
            log_id: m.log_id(),
            writer: m.writer().verifying_key().to_bytes(),
            dir: m.dir().to_owned(),
            index_from: m.index_from(),
            memory,
        }
    }

    fn locked(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Source for Shared<'_> {
    fn writer_key(&self) -> [u8; 32] {
        self.writer
    }
    fn log_id(&self) -> LogId {
        self.log_id
    }
    fn dir(&self) -> PathBuf {
        self.dir.clone()
    }
    fn latest_pulse(&self) -> Result<u64, MemoryError> {
        Ok(self.locked().ledger().latest()?.header.number)
    }
    fn attestation_at(&self, pulse: u64) -> Result<Attestation, MemoryError> {
        Ok(self.locked().attestation_at(pulse)?)
    }
    fn attestation_of(&self, id: LogId, pulse: u64) -> Result<Attestation, MemoryError> {
        Ok(self.locked().attestation_of(id, pulse)?)
    }
    fn prove_recorded(&self, position: u64) -> Result<ProofFile, MemoryError> {
        Ok(self.locked().prove_recorded(position)?)
    }
    fn lists(&self) -> (&IndexReader, &Log, LogId, u64) {
        (&self.reader, &self.log, self.log_id, self.index_from)
    }
}

/// A bundle's proof files for `targets`, from `memories` (one log each, all on one ledger),
/// every head attested as of the ledger's latest Pulse: each log's complete list of links to
/// every target and to every statement met (revisions of revisions), and when each statement
/// was recorded. Statements by writers not in `trusted` are not followed (a reader who trusts
/// them asks with them in its policy). Returns the files and the Pulse.
pub fn bundle(
    memories: &[&Memory],
    targets: &[AtomId],
    trusted: &[[u8; 32]],
) -> Result<(Vec<ProofFile>, u64), MemoryError> {
    bundle_with_chains(memories, targets, trusted).map(|(files, _, pulse)| (files, pulse))
}

/// [`bundle`], with the attestations of trusted revisers' logs that hold nothing (so that a
/// reader can follow each reviser's chain of logs whole; docs/BELIEF.md, "Every log of a
/// reviser"): files, those attestations, and the Pulse. A trusted reviser's log on the
/// ledger that holds atoms but is not among `memories` is refused, naming it.
pub fn bundle_with_chains<S: Source + ?Sized>(
    memories: &[&S],
    targets: &[AtomId],
    trusted: &[[u8; 32]],
) -> Result<(Vec<ProofFile>, Vec<Attestation>, u64), MemoryError> {
    let Some(first) = memories.first() else { return Ok((Vec::new(), Vec::new(), 0)) };
    let pulse = first.latest_pulse()?;
    // Each log's head as of that Pulse and the ledger's attestation of it, made once: every
    // link proof of the log is against this head, with this attestation.
    let mut heads = Vec::with_capacity(memories.len());
    let mut alone: Vec<Attestation> = Vec::new();
    for memory in memories {
        let attestation = memory.attestation_at(pulse)?;
        if attestation.state.log.head.size == 0 {
            // Nothing in it: no list to prove. A trusted reviser's is carried for its chain.
            let writer = memory.writer_key();
            if trusted.contains(&writer) && attestation.state.log.chain.is_some() {
                alone.push(attestation);
            }
            heads.push(None);
            continue;
        }
        // The version proved against is exactly the one attested (a commit of the same size
        // made meanwhile must not be picked instead).
        heads.push(Some((attestation.state.log.clone(), attestation)));
    }
    // Every trusted reviser's other logs at the Pulse, along its chain: each must be one of
    // `memories`, or hold nothing (then its attestation alone is carried).
    let given: BTreeSet<LogId> = memories.iter().map(|m| m.log_id()).collect();
    let mut walked: BTreeSet<LogId> = BTreeSet::new();
    for (m, memory) in memories.iter().enumerate() {
        let writer = memory.writer_key();
        if !trusted.contains(&writer) || walked.contains(&memory.log_id()) {
            continue;
        }
        let start = match &heads[m] {
            Some((log, _)) => log.clone(),
            None => memory.attestation_at(pulse)?.state.log,
        };
        let Some(chain) = start.chain else { continue };
        walked.insert(start.id);
        let mut todo: Vec<LogId> = chain.prev.into_iter().chain(chain.next).collect();
        while let Some(id) = todo.pop() {
            if !walked.insert(id) {
                continue;
            }
            let attestation = memory.attestation_of(id, pulse)?;
            let log = &attestation.state.log;
            let c = log.chain.unwrap_or_default();
            todo.extend(c.prev.into_iter().chain(c.next));
            if given.contains(&id) {
                continue;
            }
            if log.head.size > 0 {
                return Err(MemoryError::Config {
                    path: memory.dir(),
                    problem: format!(
                        "reviser {}'s log {id} holds {} atoms at Pulse {pulse} but is not among the memories \
                         given: a reader needs every log of a reviser it trusts (give that memory too)",
                        hex::encode(writer),
                        log.head.size
                    ),
                });
            }
            alone.push(attestation);
        }
    }
    let mut files = Vec::new();
    // The state proofs the link proofs share, checked once (the reader checks them again).
    let mut checked = std::collections::HashSet::new();
    let mut asked: BTreeSet<AtomId> = BTreeSet::new();
    let mut recorded: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut queue: Vec<AtomId> = targets.to_vec();
    while let Some(target) = queue.pop() {
        if !asked.insert(target) {
            continue;
        }
        for (m, memory) in memories.iter().enumerate() {
            let Some((version, attestation)) = &heads[m] else { continue };
            let file = memory.prove_links(version, attestation.clone(), target)?;
            let writer = memory.writer_key();
            if trusted.contains(&writer)
                && let Claim::List { atoms, .. } = file
                    .verify_sharing(None, &mut checked)
                    .map_err(|e| MemoryError::Config {
                        path: memory.dir(),
                        problem: format!("a link proof it made does not verify: {e}"),
                    })?
                    .claim
            {
                for (position, atom) in atoms {
                    let states = atom
                        .parts()
                        .links
                        .iter()
                        .any(|l| l.target == target && State::of_link(l.rel).is_some());
                    if !states || simulated(&atom) {
                        continue;
                    }
                    if recorded.insert((m, position)) {
                        files.push(memory.prove_recorded(position)?);
                    }
                    queue.push(atom.id());
                }
            }
            files.push(file);
        }
    }
    Ok((files, alone, pulse))
}
