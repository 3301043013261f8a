//! The doors a memory hands to the threads of its process. [`Intake`] is the one write path:
//! every surface that remembers (topics, the node's services, MCP, the command line) appends
//! through it. [`Readers`] hand out [`Snapshot`]s, each a committed head fixed for proving
//! without the memory's lock. [`HeadWatch`] wakes whoever waits for the next committed head,
//! so nothing polls for it.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use sion_verify::atom::{Atom, AtomId, AtomParts, BlobRef, Payload};
use sion_verify::ledger::{LogId, MemoryLog};
use sion_verify::proof::{Attestation, ProofFile};

use super::space::{self, Space, SpaceError};
use super::{Memory, MemoryError, ProveError, Snapshot};
use crate::log::blobs::{BlobError, BlobStore};
use crate::log::{Appended, Audit, Log, LogError};

/// Why remembering (appending, sealing, forgetting, adding a member) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RememberError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Space(#[from] SpaceError),
    /// Sealing, forgetting and members need a sealed memory.
    #[error("the memory at {0} is not sealed: its log was opened without a space")]
    NotSealed(PathBuf),
    /// Opened to be read ([`super::Options::open_read_only`]): its writer does this.
    #[error("the memory at {0} was opened to be read: remembering, sealing and forgetting need its writer")]
    ReadOnly(PathBuf),
}

/// What an atom's payload is, in words (for a refusal).
pub(super) fn payload_name(atom: &AtomParts) -> String {
    match &atom.payload {
        Payload::None => "no payload".into(),
        Payload::Text(_) => "public text".into(),
        Payload::Public(_) => "public bytes".into(),
        Payload::Encrypted(_) => "encrypted bytes of no space".into(),
        Payload::Blob(b) => format!("a blob of {} in the clear", b.media_type),
    }
}

/// The memory's one write path: [`Memory::intake`] hands it out, cheap to clone and to share
/// between threads. What it takes is durable when it returns; a sealed memory seals frames,
/// tiles and inline payloads before they are kept.
#[derive(Clone)]
pub struct Intake {
    dir: PathBuf,
    log: Log,
    blobs: BlobStore,
    space: Option<Arc<Space>>,
    read_only: bool,
}

impl Intake {
    pub(super) fn new(
        dir: PathBuf,
        log: Log,
        blobs: BlobStore,
        space: Option<Arc<Space>>,
        read_only: bool,
    ) -> Self {
        Self { dir, log, blobs, space, read_only }
    }

    /// Whether the memory seals what it keeps.
    pub fn sealed(&self) -> bool {
        self.space.is_some()
    }

    /// The space, to change it (seal, forget, add a member).
    fn writable_space(&self) -> Result<&Space, RememberError> {
        if self.read_only {
            return Err(RememberError::ReadOnly(self.dir.clone()));
        }
        self.space.as_deref().ok_or_else(|| RememberError::NotSealed(self.dir.clone()))
    }

    /// Append atoms durably (a no-op for atoms the log holds already): every write of a memory
    /// ends here.
    pub fn remember(&self, atoms: Vec<Atom>) -> Result<Vec<Appended>, RememberError> {
        if self.read_only {
            return Err(RememberError::ReadOnly(self.dir.clone()));
        }
        Ok(self.log.append(atoms)?)
    }

    /// Keep the blobs `atoms` commit to, durably, and return the atoms to remember: in a sealed
    /// memory each blob is sealed for its atom first, and the atom returned commits to the
    /// sealed bytes.
    pub fn keep_blobs_of(&self, atoms: Vec<Atom>, blobs: Vec<Vec<u8>>) -> Result<Vec<Atom>, RememberError> {
        let space = if self.space.is_some() { Some(self.writable_space()?) } else { None };
        Ok(space::keep_blobs_for(space, &self.log, &self.blobs, atoms, blobs)?)
    }

    /// [`Intake::keep_blobs_of`], then [`Intake::remember`].
    pub fn remember_with_blobs(
        &self,
        atoms: Vec<Atom>,
        blobs: Vec<Vec<u8>>,
    ) -> Result<Vec<Appended>, RememberError> {
        let atoms = self.keep_blobs_of(atoms, blobs)?;
        self.remember(atoms)
    }

    /// Seal each atom's inline payload (text or bytes) and remember them.
    pub fn remember_sealed(&self, atoms: Vec<AtomParts>) -> Result<Vec<Appended>, RememberError> {
        let space = self.writable_space()?;
        let sealed =
            atoms.into_iter().map(|p| space.seal_inline(&self.log, p)).collect::<Result<Vec<_>, _>>()?;
        self.remember(sealed)
    }

    /// Seal a blob (`content`, of `media_type`) for the atom `parts`, keep the sealed bytes,
    /// then remember the atom, which commits to them.
    pub fn remember_sealed_blob(
        &self,
        mut parts: AtomParts,
        media_type: &str,
        content: &[u8],
    ) -> Result<Appended, RememberError> {
        self.writable_space()?;
        // As the node keeps a frame: the atom names the blob as given, and is sealed for it
        // (a camera frame or map tile into its stream's lane, anything else into the store).
        parts.payload = Payload::Blob(BlobRef {
            hash: *blake3::hash(content).as_bytes(),
            size: content.len() as u64,
            media_type: media_type.to_owned(),
        });
        let atom = Atom::new(parts).map_err(|e| SpaceError::Record(e.to_string()))?;
        let appended = self.remember_with_blobs(vec![atom], vec![content.to_vec()])?;
        Ok(appended.into_iter().next().ok_or_else(|| SpaceError::Record("nothing appended".into()))?)
    }

    /// The sealed bytes of the atom at `position` and which kind they are, if it is sealed.
    pub fn sealed_bytes(
        &self,
        position: u64,
    ) -> Result<Option<(Atom, Vec<u8>, sion_seal::SealKind)>, RememberError> {
        let atom = self.log.read(position)?;
        let blob = |h: &[u8; 32]| self.blobs.get(h).ok();
        let found = match &self.space {
            Some(space) => space.sealed_bytes(position, atom.parts(), blob)?,
            None => space::sealed_payload(position, atom.parts(), blob)?,
        };
        Ok(found.map(|(b, k)| (atom, b, k)))
    }

    /// The atom at `position` and its sealed bytes, or why it has none.
    fn sealed_at(&self, position: u64) -> Result<(Atom, Vec<u8>, sion_seal::SealKind), RememberError> {
        match self.sealed_bytes(position)? {
            Some(found) => Ok(found),
            None => {
                Err(SpaceError::NotSealed { position, what: payload_name(self.log.read(position)?.parts()) }
                    .into())
            }
        }
    }

    /// Forget the payloads of the atoms at `positions` (docs/SEAL.md, "Forgetting"): forget
    /// atoms (who, why, the leaves, linking to each), durable, then the writer's keys
    /// punctured. Returns the forget atoms' positions.
    pub fn forget(&self, positions: &[u64], who: &str, why: &str) -> Result<Vec<u64>, RememberError> {
        let space = self.writable_space()?;
        let targets = positions
            .iter()
            .map(|&p| self.sealed_at(p).map(|(atom, bytes, _)| (p, atom, bytes)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(space.forget(&self.log, &targets, who, why)?.0)
    }

    /// Add a member to a sealed memory's space (docs/SEAL.md, "Spaces"): the member record,
    /// durable, and the keys wrapped to them.
    pub fn add_member(
        &self,
        name: &str,
        public: &[u8],
    ) -> Result<(Appended, sion_seal::Wrapped), RememberError> {
        Ok(self.writable_space()?.add_member(&self.log, name, public)?)
    }

    /// What the payload service answers a member: the atom, its sealed bytes, and their leaf
    /// key wrapped to the member (docs/SEAL.md, "The payload service").
    pub fn payload_for(
        &self,
        position: u64,
        member: &[u8; 32],
    ) -> Result<(Atom, Vec<u8>, sion_seal::WrappedLeaf), RememberError> {
        let space = self.space.as_deref().ok_or_else(|| RememberError::NotSealed(self.dir.clone()))?;
        let (atom, bytes, _) = self.sealed_at(position)?;
        let wrapped = space.wrap_leaf_for(member, atom.parts(), &bytes)?;
        Ok((atom, bytes, wrapped))
    }
}

/// The memory's committed head as it moves: [`Memory::watch_head`] hands it out. Each commit
/// the memory makes wakes every waiter.
#[derive(Clone)]
pub struct HeadWatch(Arc<(Mutex<MemoryLog>, Condvar)>);

impl HeadWatch {
    pub(super) fn new(head: MemoryLog) -> Self {
        Self(Arc::new((Mutex::new(head), Condvar::new())))
    }

    fn head(&self) -> MutexGuard<'_, MemoryLog> {
        self.0.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn publish(&self, head: &MemoryLog) {
        let mut held = self.head();
        if *held != *head {
            *held = head.clone();
            self.0.1.notify_all();
        }
    }

    /// The latest committed head.
    pub fn latest(&self) -> MemoryLog {
        self.head().clone()
    }

    /// Wait until the committed head satisfies `done`, for at most `timeout`: the head that
    /// did, or `None` when the time ran out ([`HeadWatch::latest`] then says where it is).
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&MemoryLog) -> bool,
    ) -> Option<MemoryLog> {
        let held = self.head();
        let (held, _) =
            self.0.1.wait_timeout_while(held, timeout, |h| !done(h)).unwrap_or_else(PoisonError::into_inner);
        done(&held).then(|| held.clone())
    }

    /// Wait, for at most `timeout`, for a commit after the `commits`-th one.
    pub fn wait_past(&self, commits: u64, timeout: Duration) -> Option<MemoryLog> {
        self.wait_until(timeout, |h| h.commits > commits)
    }
}

/// The readers' door of a memory its writer holds behind a lock (a node's kernel, the protocol
/// server): answers as of committed heads, through [`Snapshot`]s. It cannot write the log or
/// commit; the memory is locked only to read the ledger's word for a head.
#[derive(Clone)]
pub struct Readers {
    memory: Arc<Mutex<Memory>>,
    log: Log,
    heads: HeadWatch,
    identity: (LogId, VerifyingKey),
}

impl Readers {
    /// The readers of `memory`.
    pub fn new(memory: Arc<Mutex<Memory>>) -> Self {
        let (log, heads, identity) = {
            let m = memory.lock().unwrap_or_else(PoisonError::into_inner);
            (m.log().clone(), m.watch_head(), (m.log_id(), m.writer().verifying_key()))
        };
        Self { memory, log, heads, identity }
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log's latest committed version on the ledger (no lock).
    pub fn committed(&self) -> MemoryLog {
        self.heads.latest()
    }

    /// The committed head as it moves.
    pub fn watch_head(&self) -> HeadWatch {
        self.heads.clone()
    }

    /// How many atoms the log holds (committed or not).
    pub fn log_size(&self) -> u64 {
        self.log.size()
    }

    /// The committed version of the log with `size` atoms (the latest if `None`), and the
    /// time of the Pulse that committed it.
    pub fn head_at(&self, size: Option<u64>) -> Result<(MemoryLog, i64), ProveError> {
        let memory = self.memory();
        let version = memory.version(size)?;
        let time = memory.ledger().header(version.committed_at).map_or(0, |h| h.header.time_ns);
        Ok((version, time))
    }

    /// The key that signs the ledger's Pulse headers.
    pub fn ledger_key(&self) -> VerifyingKey {
        self.memory().ledger().public_key()
    }

    /// The memory's directory.
    pub fn dir(&self) -> PathBuf {
        self.memory().dir().to_path_buf()
    }

    /// The fleet ledger's URL the log is on (none: an embedded ledger).
    pub fn ledger_url(&self) -> Option<String> {
        self.memory().ledger_url()
    }

    /// The log's number on the ledger and its writer's key.
    pub fn identity(&self) -> (LogId, VerifyingKey) {
        self.identity
    }

    /// The atom at `position` of the log.
    pub fn read(&self, position: u64) -> Result<Atom, LogError> {
        self.log.read(position)
    }

    /// A committed head (the latest if `None`) fixed for proving: the lock is held only while
    /// the ledger is asked for it.
    pub fn snapshot(&self, as_of: Option<u64>) -> Result<Snapshot, ProveError> {
        self.memory().snapshot(as_of)
    }

    /// Every record re-read and hashed, the root compared with the committed head; no lock is
    /// held while the log is read.
    pub fn audit(&self) -> Result<(Audit, MemoryLog), LogError> {
        let committed = self.committed();
        Ok((self.log.audit(committed.head.size, |_| {})?, committed))
    }

    /// A belief bundle's proof files and its revisers' empty logs' attestations (see
    /// [`super::belief::bundle_with_chains`]) from this memory and `others`, as of the ledger's
    /// latest Pulse. The memory is locked only for each ledger read (a few per log and
    /// statement), not while the link proofs are made: commits go on.
    pub fn belief_bundle(
        &self,
        others: &[&Memory],
        targets: &[AtomId],
        trusted: &[[u8; 32]],
    ) -> Result<(Vec<ProofFile>, Vec<Attestation>, u64), MemoryError> {
        use super::belief::{Shared, Source};
        let mine = Shared::new(&self.memory);
        let mut sources: Vec<&dyn Source> = vec![&mine];
        sources.extend(others.iter().map(|m| *m as &dyn Source));
        super::belief::bundle_with_chains(&sources, targets, trusted)
    }
}
