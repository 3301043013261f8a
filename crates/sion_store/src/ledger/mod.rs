//! The embedded ledger (docs/LEDGER.md): it keeps memory logs' heads, not their atoms, moves a
//! head only along an RFC 9162 consistency proof, stamps every accepted transaction with a
//! Pulse whose header it signs, and can prove when any position of a log was recorded.
//!
//! Its state lives in a journal of (transaction, signed header) entries, each fsynced before a
//! transaction is acknowledged; opening replays and re-checks the whole journal.

mod state;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::{SigningKey, VerifyingKey};

pub use sion_verify::ledger::{
    Account, Agent, AgentStatus, AttestationError, Head, LogId, MemoryLog, PulseHeader, SignedHeader,
    SignedTx, StateProof, Tx, TxTimeProof, empty_head, parent_of, valid_agent_name,
};
use sion_verify::merkle::{self, Blake3, MemoryTree};
use sion_verify::wire::{Put as _, Reader};

use crate::frame as wire;
use state::State;

const FORMAT: &str = "sion-ledger 1\n";
const MAX_ENTRY_BYTES: usize = 1 << 16;

/// Why the ledger refused a transaction or could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    #[error("{context}: {source}")]
    Io { context: String, source: Arc<io::Error> },
    #[error("no ledger at {0}")]
    Missing(PathBuf),
    #[error("a ledger already exists at {0}")]
    Exists(PathBuf),
    #[error("the ledger at {0} is in use by another process")]
    Locked(PathBuf),
    #[error("the ledger journal is damaged at entry {entry}: {reason}")]
    Journal { entry: u64, reason: String },
    #[error("forged: the signature is not the sender's")]
    BadSignature,
    #[error("replayed or out of order: the sender's next nonce is {expected}, not {got}")]
    Nonce { expected: u64, got: u64 },
    #[error("no memory log {0} on this ledger")]
    UnknownLog(LogId),
    #[error("no agent named {0:?}")]
    UnknownAgent(String),
    #[error("an agent named {0:?} exists already")]
    AgentExists(String),
    #[error("{0:?} is not an agent name (`/`-separated segments of [a-z0-9_-], at most 128 bytes)")]
    BadAgentName(String),
    #[error("{sender} does not control agent {agent:?} or any agent above it")]
    NotController { agent: String, sender: Account },
    #[error("forged: {sender} is not the writer of log {log}")]
    NotWriter { log: LogId, sender: Account },
    #[error("agent {agent:?} cannot act: {blocked_by:?} is {status}")]
    AgentNotLive { agent: String, blocked_by: String, status: AgentStatus },
    #[error("log {0} is sealed: it cannot grow or change")]
    Sealed(LogId),
    #[error("stale: the commit builds on version {version} of log {log}, which is at version {current}")]
    Stale { log: LogId, version: u64, current: u64 },
    #[error("log {log} cannot shrink from {from} to {to} atoms")]
    Shrinks { log: LogId, from: u64, to: u64 },
    #[error("a commit of log {log} at the same size ({size}) must keep the root and carry no proof")]
    RootChanged { log: LogId, size: u64 },
    #[error(
        "fork: the new head of log {log} ({to} atoms) does not extend the current one ({from}): {reason}"
    )]
    Fork { log: LogId, from: u64, to: u64, reason: String },
    #[error("no Pulse {0}")]
    NoPulse(u64),
    #[error("log {log} has not recorded position {position} in any commit")]
    NotRecorded { log: LogId, position: u64 },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LedgerError {
    move |source| LedgerError::Io { context: context.into(), source: Arc::new(source) }
}

/// A fresh ed25519 key from the operating system's randomness.
pub fn generate_key() -> Result<SigningKey, LedgerError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| io_err("gathering randomness for a key")(io::Error::other(e.to_string())))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Write a key file readable by its owner only.
pub fn write_key(path: &Path, key: &SigningKey) -> Result<(), LedgerError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("creating {}", path.display())))?;
    f.write_all(&key.to_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err(format!("writing {}", path.display())))
}

pub fn read_key(path: &Path) -> Result<SigningKey, LedgerError> {
    let bytes = fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
    let seed: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        io_err(format!("reading {}", path.display()))(io::Error::other("a key file holds exactly 32 bytes"))
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

pub fn account_of(key: &SigningKey) -> Account {
    Account(key.verifying_key().to_bytes())
}

/// An embedded ledger, open for one process at a time.
pub struct Ledger {
    dir: PathBuf,
    key: SigningKey,
    book: Book,
    headers: Vec<SignedHeader>,
    journal: File,
    _lock: File,
}

fn lock_dir(dir: &Path) -> Result<File, LedgerError> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    f.try_lock().map_err(|_| LedgerError::Locked(dir.to_owned()))?;
    Ok(f)
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

impl Ledger {
    /// Create a ledger with a new key and its genesis Pulse 0.
    pub fn create(dir: &Path) -> Result<Self, LedgerError> {
        if dir.join("FORMAT").exists() {
            return Err(LedgerError::Exists(dir.to_owned()));
        }
        fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let key_path = dir.join("key");
        let key = match read_key(&key_path) {
            Ok(key) => key,
            Err(_) => {
                let _ = fs::remove_file(&key_path);
                let key = generate_key()?;
                write_key(&key_path, &key)?;
                key
            }
        };
        let genesis = SignedHeader::sign(&key, Book::default().header(0, now_ns(), None));
        let mut entry = vec![0u8];
        genesis.put(&mut entry);
        let mut frame = Vec::new();
        wire::put_frame(&mut frame, &entry);
        let journal = dir.join("journal");
        fs::write(&journal, frame).map_err(io_err("writing the journal"))?;
        File::open(&journal).and_then(|f| f.sync_all()).map_err(io_err("syncing the journal"))?;
        fs::write(dir.join("FORMAT"), FORMAT).map_err(io_err("writing FORMAT"))?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("syncing the ledger directory"))?;
        Self::open(dir)
    }

    /// Open a ledger, replaying and re-checking every journal entry.
    pub fn open(dir: &Path) -> Result<Self, LedgerError> {
        match fs::read_to_string(dir.join("FORMAT")) {
            Ok(f) if f == FORMAT => {}
            Ok(_) => return Err(LedgerError::Journal { entry: 0, reason: "unknown ledger format".into() }),
            Err(_) => return Err(LedgerError::Missing(dir.to_owned())),
        }
        let lock = lock_dir(dir)?;
        let key = read_key(&dir.join("key"))?;
        let path = dir.join("journal");
        let bytes = fs::read(&path).map_err(io_err("reading the journal"))?;
        let (frames, covered) = wire::whole_frames(&bytes, MAX_ENTRY_BYTES);
        let tail = &bytes[covered..];
        if !tail.is_empty() && !is_torn_frame(tail) {
            return Err(LedgerError::Journal {
                entry: frames.len() as u64,
                reason: "checksum mismatch".into(),
            });
        }
        let mut ledger = Self {
            dir: dir.to_owned(),
            key,
            book: Book::default(),
            headers: Vec::new(),
            journal: OpenOptions::new().append(true).open(&path).map_err(io_err("opening the journal"))?,
            _lock: lock,
        };
        let operator = ledger.operator();
        for (i, frame) in frames.iter().enumerate() {
            let entry = i as u64;
            let bad = |reason: String| LedgerError::Journal { entry, reason };
            let mut r = Reader::new(frame);
            let tx = match r.u8("entry kind").map_err(|e| bad(e.to_string()))? {
                0 if i == 0 => None,
                1 if i > 0 => {
                    let tx_bytes =
                        r.bytes32(MAX_ENTRY_BYTES, "transaction").map_err(|e| bad(e.to_string()))?;
                    Some(SignedTx::decode(tx_bytes).map_err(|e| bad(e.to_string()))?)
                }
                k => return Err(bad(format!("unexpected entry kind {k}"))),
            };
            let header = SignedHeader::read(&mut r).map_err(|e| bad(e.to_string()))?;
            r.finish().map_err(|e| bad(e.to_string()))?;
            header.verify(&ledger.public_key()).map_err(|e| bad(e.to_string()))?;
            if let Some(tx) = tx {
                let change = ledger
                    .book
                    .state
                    .check(&operator, &tx, entry)
                    .map_err(|e| bad(format!("replay refused: {e}")))?;
                ledger.book.apply(tx.sender, change);
            }
            let expected = ledger.book.header(entry, header.header.time_ns, ledger.headers.last());
            if header.header != expected {
                return Err(bad("header does not match the replayed state".into()));
            }
            ledger.headers.push(header);
        }
        if ledger.headers.is_empty() {
            return Err(LedgerError::Journal { entry: 0, reason: "no genesis Pulse".into() });
        }
        if !tail.is_empty() {
            // An entry cut short was never acknowledged.
            let f = OpenOptions::new().write(true).open(&path).map_err(io_err("opening the journal"))?;
            f.set_len(covered as u64)
                .and_then(|()| f.sync_all())
                .map_err(io_err("truncating the journal"))?;
        }
        Ok(ledger)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The ledger operator's account (its own key), which may suspend and reinstate agents.
    pub fn operator(&self) -> Account {
        account_of(&self.key)
    }

    /// Sign a transaction as the operator, with the operator's next nonce.
    pub fn operator_tx(&self, tx: Tx) -> SignedTx {
        SignedTx::sign(&self.key, self.nonce(&self.operator()), tx)
    }

    pub fn nonce(&self, account: &Account) -> u64 {
        self.book.state.nonce(account)
    }

    pub fn log(&self, id: LogId) -> Option<&MemoryLog> {
        self.book.state.logs.get(id.0 as usize)
    }

    pub fn logs(&self) -> &[MemoryLog] {
        &self.book.state.logs
    }

    /// Every version of a log, oldest first: the opening, then one per accepted commit (each
    /// with the Pulse it took effect at in `committed_at`).
    pub fn versions(&self, id: LogId) -> &[MemoryLog] {
        self.book.history.get(id.0 as usize).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn agent(&self, name: &str) -> Option<&Agent> {
        self.book.state.agents.get(name)
    }

    pub fn latest(&self) -> &SignedHeader {
        // Opening guarantees the genesis header.
        &self.headers[self.headers.len() - 1]
    }

    pub fn header(&self, pulse: u64) -> Option<&SignedHeader> {
        self.headers.get(pulse as usize)
    }

    /// Check a transaction and, if it passes, make it durable under a new Pulse.
    pub fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, LedgerError> {
        let number = self.headers.len() as u64;
        let change = self.book.state.check(&self.operator(), &tx, number)?;
        // The state as it would be (small: one entry per log and account); the history of
        // every version, which grows with the commits, is only appended to once durable.
        let mut next = Book { state: self.book.state.clone(), history: Vec::new() };
        next.state.apply(tx.sender, change.clone());
        let time_ns = now_ns().max(self.latest().header.time_ns.saturating_add(1));
        let header = SignedHeader::sign(&self.key, next.header(number, time_ns, self.headers.last()));
        let mut entry = vec![1u8];
        entry.put_bytes32(&tx.encode());
        header.put(&mut entry);
        let mut frame = Vec::new();
        wire::put_frame(&mut frame, &entry);
        // Durable first; only then does the ledger's state move.
        self.journal.write_all(&frame).map_err(io_err("appending to the journal"))?;
        self.journal.sync_data().map_err(io_err("syncing the journal"))?;
        self.book.apply(tx.sender, change);
        self.headers.push(header);
        Ok(header)
    }

    /// That log `id` stood as it did at Pulse `pulse`.
    pub fn state_proof(&self, id: LogId, pulse: u64) -> Result<StateProof, LedgerError> {
        let header = *self.header(pulse).ok_or(LedgerError::NoPulse(pulse))?;
        let state: Vec<MemoryLog> = self
            .book
            .history
            .iter()
            .filter_map(|versions| versions.iter().rev().find(|v| v.committed_at <= pulse).cloned())
            .collect();
        let log = state.get(id.0 as usize).cloned().ok_or(LedgerError::UnknownLog(id))?;
        let tree = MemoryTree::<Blake3>::from_leaves(state.iter().map(MemoryLog::encode));
        let path = merkle::inclusion_path::<Blake3, _>(&tree, id.0, tree.size())
            .map_err(|_| LedgerError::UnknownLog(id))?;
        Ok(StateProof { header, log, path })
    }

    /// When `position` of log `id` was recorded: the state before and at the Pulse of the
    /// commit that first covered it.
    pub fn tx_time_proof(&self, id: LogId, position: u64) -> Result<TxTimeProof, LedgerError> {
        let versions = self.book.history.get(id.0 as usize).ok_or(LedgerError::UnknownLog(id))?;
        let recorded = versions
            .iter()
            .find(|v| v.head.size > position)
            .ok_or(LedgerError::NotRecorded { log: id, position })?;
        let pulse = recorded.committed_at;
        Ok(TxTimeProof {
            position,
            before: self.state_proof(id, pulse - 1)?,
            at: self.state_proof(id, pulse)?,
        })
    }
}

/// The ledger's state and every version of every log (each carries the Pulse it took effect
/// in `committed_at`), for proofs about the past.
#[derive(Debug, Clone, Default)]
struct Book {
    state: State,
    history: Vec<Vec<MemoryLog>>,
}

impl Book {
    fn apply(&mut self, sender: Account, change: state::Change) {
        if let state::Change::Log(log) = &change {
            let id = log.id.0 as usize;
            if id == self.history.len() {
                self.history.push(Vec::new());
            }
            if let Some(versions) = self.history.get_mut(id) {
                versions.push(log.clone());
            }
        }
        self.state.apply(sender, change);
    }

    fn header(&self, number: u64, time_ns: i64, prev: Option<&SignedHeader>) -> PulseHeader {
        let tree = MemoryTree::<Blake3>::from_leaves(self.state.logs.iter().map(MemoryLog::encode));
        let prev = prev.map(|h| h.header.hash()).unwrap_or([0; 32]);
        PulseHeader { number, time_ns, logs: tree.size(), state_root: tree.root(), prev }
    }
}

/// Whether bytes after the last whole frame are one frame cut short (a crash mid-append)
/// rather than a whole frame that fails its checksum (damage).
fn is_torn_frame(tail: &[u8]) -> bool {
    match tail.get(..4) {
        None => true,
        Some(len) => 8 + u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize > tail.len(),
    }
}
