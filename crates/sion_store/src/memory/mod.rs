//! A writer's memory: its atom log, its writer key and the ledger that keeps its heads,
//! behind one handle. This is what the command line, the demo and the node drive.
//!
//! A memory directory holds `memory.json` (which log on which ledger), `writer.key`, `log/`,
//! `blobs/` (what atoms commit to by hash), `index/` (the index, a cache of the log:
//! docs/INDEX-STORE.md) and, for the embedded ledger, `ledger/`.

use std::fs;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

use crate::index::geom::Query;
use crate::index::{INDEX_VERSION, Index, IndexConfig, IndexError, IndexReader};
use crate::ledger::link::{Connect, LedgerLink, no_remote};
use crate::ledger::{
    Head, Ledger, LedgerError, LogId, MemoryLog, SignedHeader, Tx, TxTimeProof, account_of, read_key,
    read_or_make_key,
};
use crate::log::blobs::{BlobError, BlobStore};
use crate::log::{Appended, Audit, Log, LogError, LogOptions, Recovery};
use sion_disk::Disk;

pub mod belief;
mod doors;
pub mod lanes;
mod repair;
pub mod space;
pub use doors::{HeadWatch, Intake, Readers, RememberError};
pub use repair::{RepairRecord, Repaired};
use sion_verify::atom::{Atom, AtomId};
use sion_verify::index::geom::{FrameExtent, Mismatch};
use sion_verify::proof::{
    Attestation, CountProof, LatestProof, ListKey, ListProof, NearQuery, NearestProof, Proof, ProofFile,
    RangeProof,
};
pub use space::{MemberKeys, Opened, Retained, Retention, Space, SpaceError, StreamRetention};

/// Why a memory could not be opened or created ([`Options::create`], [`Options::open`],
/// [`Options::open_or_create`], [`Options::open_read_only`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Space(#[from] SpaceError),
    #[error(transparent)]
    Index(#[from] IndexError),
    /// memory.json says its index follows a newer version of docs/INDEX.md than this one knows.
    #[error(
        "this memory's index is of version {found} (docs/INDEX.md), newer than this sion_memory knows ({known}): \
         open it with the sion_memory that made it, or a newer one"
    )]
    NewerIndex { found: u32, known: u32 },
    /// No memory.json in the directory.
    #[error("no memory at {0}")]
    Missing(PathBuf),
    /// Creating where a memory is already.
    #[error("a memory already exists at {0}")]
    Exists(PathBuf),
    #[error("{path}: {problem}")]
    Config { path: PathBuf, problem: String },
    /// The log does not extend the head its ledger committed: atoms were lost or rewritten.
    #[error(
        "the log no longer extends its committed head ({committed} atoms, root {root}): atoms were lost or rewritten"
    )]
    Diverged { committed: u64, root: String },
    /// Opened to read while the log's derived files end before the committed head.
    #[error(
        "the ledger committed {committed} atoms, but the log at {dir} can be read only up to \
         {readable} (its derived files end there; a writer derives the rest when it next opens it)"
    )]
    Unreadable { dir: PathBuf, committed: u64, readable: u64 },
    #[error("{0}: a scratch directory for reading: {1}")]
    Scratch(PathBuf, String),
}

/// Why a commit failed ([`Memory::commit`], [`Memory::commit_at`], [`Memory::commit_manifest`],
/// [`Memory::submit`]; and [`Memory::index`], the index a commit folds).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A head of `size` atoms is not between the committed head and the log's end.
    #[error(
        "a head of {size} atoms cannot be committed: the committed head has {committed}, and a head is at least that and at most the log"
    )]
    BadSize { size: u64, committed: u64 },
    #[error(
        "the index rebuilt from the log's first {size} atoms does not match the index root committed for them"
    )]
    IndexMismatch { size: u64 },
    /// A brain holds the index: it commits.
    #[error("this memory's index is held by its brain: commit through the brain")]
    IndexTaken,
}

/// Why a question could not be answered with its proof ([`Memory::snapshot`] and what a
/// [`Snapshot`] proves, [`Memory::prove_inclusion`] and the other `prove_*`, [`Memory::version`],
/// the ledger's attestations).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProveError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Asked about an atom past the committed head.
    #[error("position {position} is not committed yet (the committed head has {committed} atoms)")]
    NotCommitted { position: u64, committed: u64 },
    #[error("size {size} is not within the committed head (1..={committed})")]
    BadSize { size: u64, committed: u64 },
    #[error("no committed head has {size} atoms (committed sizes: {sizes})")]
    NoSuchHead { size: u64, sizes: String },
    #[error(
        "the index rebuilt from the log's first {size} atoms does not match the index root committed for them"
    )]
    IndexMismatch { size: u64 },
    #[error(
        "nothing is committed yet: the memory's committed head holds no atoms (a commit follows the first atoms)"
    )]
    NothingCommitted,
    #[error("position {0} is not omitted: the committed index answers it for its own box and interval")]
    NotOmitted(u64),
    #[error(
        "the answer is too large to prove: {0}. A proof file holds at most 64 MiB (what a verifier \
         reads); ask a smaller box, a shorter interval, or a narrower subject"
    )]
    TooLarge(String),
    #[error(
        "the head of {size} atoms was committed with an index of an earlier version (before this memory was \
         re-indexed): its range and list proofs cannot be made any more; ask as of a later head"
    )]
    OldIndex { size: u64 },
    /// The question itself cannot be asked (an atom's own box, say).
    #[error("the question: {0}")]
    Query(String),
}

/// Why re-reading the log and its blobs failed ([`Memory::audit`], [`Memory::audit_blobs`]);
/// what they find wrong is their answer, not an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Space(#[from] SpaceError),
}

/// Why folding the log into an index failed ([`fold_log`]): a record that could not be read,
/// or the index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FoldError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl From<FoldError> for OpenError {
    fn from(e: FoldError) -> Self {
        match e {
            FoldError::Log(e) => Self::Log(e),
            FoldError::Index(e) => Self::Index(e),
        }
    }
}

impl From<FoldError> for CommitError {
    fn from(e: FoldError) -> Self {
        match e {
            FoldError::Log(e) => Self::Log(e),
            FoldError::Index(e) => Self::Index(e),
        }
    }
}

/// Any error of a memory, for code that does several things with one: each operation's own
/// error ([`OpenError`], [`RememberError`], [`CommitError`], [`ProveError`], [`AuditError`])
/// converts into it, and what repairs, opens payloads and builds belief bundles fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Remember(RememberError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(transparent)]
    Prove(#[from] ProveError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Space(#[from] SpaceError),
    #[error("the memory at {0} is not sealed: its log was opened without a space")]
    NotSealed(PathBuf),
    #[error("{path}: {problem}")]
    Config { path: PathBuf, problem: String },
    /// A repair would lose atoms the ledger committed ([`Memory::repair`]).
    #[error(
        "the log's first damaged record is at position {whole}, inside its committed head ({committed} atoms): \
         repairing keeps the {whole} atoms before it and loses {lost} the ledger committed, and this log could \
         never extend its head again. Nothing was changed. A repair with a new log keeps them as a new log on \
         the same ledger (the old one stays at its head; proofs made from it still verify); or restore the \
         memory from a copy",
        lost = committed - whole
    )]
    CommittedDamage { committed: u64, whole: u64 },
    /// The log does not extend its committed head, and a repair does not explain it.
    #[error(
        "the log no longer extends its committed head ({committed} atoms, root {root}): atoms were lost or rewritten"
    )]
    Diverged { committed: u64, root: String },
}

impl From<RememberError> for MemoryError {
    /// Flat where the causes are the same, so a caller matches one `Log`, `Space`, ….
    fn from(e: RememberError) -> Self {
        match e {
            RememberError::Log(e) => Self::Log(e),
            RememberError::Blob(e) => Self::Blob(e),
            RememberError::Space(e) => Self::Space(e),
            RememberError::NotSealed(dir) => Self::NotSealed(dir),
            other => Self::Remember(other),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Config {
    /// The log's number on its ledger.
    log: u64,
    agent: Option<String>,
    /// The ledger's directory, relative to the memory directory (the embedded ledger's).
    ledger: PathBuf,
    /// A fleet ledger's URL, when the log is on one instead (then `ledger` is unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ledger_url: Option<String>,
    /// That ledger's key (64 hex digits), pinned when the log was opened: a service that
    /// answers with another is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ledger_key: Option<String>,
    /// The version of docs/INDEX.md this memory's index roots follow (absent: 1, a memory
    /// made before version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index: Option<u32>,
    /// For a memory made with version 1 and moved to version 2: the first committed size
    /// whose index root follows version 2 (kept as it was written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index_v2_from: Option<u64>,
    /// For a memory made under an earlier version than `index`: the first committed size
    /// whose index root follows `index`; heads before it carry earlier roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index_from: Option<u64>,
    /// Repairs that lost committed atoms and went on as a new log (docs/LOG.md, "Repair").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    repaired: Vec<RepairRecord>,
    /// A sealed memory's space id (64 hex digits; docs/SEAL.md): its log's policy commits to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    space: Option<String>,
}

/// How the memory's index came up when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexBoot {
    /// From its checkpoint at `version` atoms, then the log's tail folded.
    Checkpoint { version: u64, folded: u64 },
    /// Rebuilt from the whole log, because of `why` (a missing, stale, torn or damaged
    /// checkpoint); `rebuilds` counts every rebuild this memory has had.
    Rebuilt { why: String, folded: u64, rebuilds: u64 },
}

/// What a commit did.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    pub pulse: SignedHeader,
    pub head: Head,
    pub previous: Head,
}

pub struct Memory {
    dir: PathBuf,
    log: Log,
    blobs: BlobStore,
    ledger: Box<dyn LedgerLink>,
    /// The log as the ledger holds it: read when the memory is opened, moved by each commit
    /// (this memory is the log's only writer).
    on_ledger: MemoryLog,
    writer: SigningKey,
    log_id: LogId,
    agent: Option<String>,
    recovery: Recovery,
    /// The index's writer (None once a brain took it) and readers' side.
    index: Option<Index>,
    reader: IndexReader,
    index_boot: IndexBoot,
    /// Heads below this size carry roots of an earlier version of docs/INDEX.md.
    index_from: u64,
    /// Opened to be read: a directory of this process's own for an index it had to fold
    /// afresh (removed when the memory is dropped); nothing in `dir` is written.
    _scratch: Option<tempfile::TempDir>,
    read_only: bool,
    /// A transaction went through [`Memory::submit`], or a submission's outcome is
    /// unknown: `on_ledger` is read again before the next commit.
    stale_view: bool,
    /// A sealed memory's space.
    space: Option<std::sync::Arc<Space>>,
    /// The committed head, for those who wait for the next.
    heads: HeadWatch,
    /// The ledger's cosigned checkpoint covering each Pulse lately asked about (by its
    /// header's hash), and when it was found.
    coverings: std::sync::Mutex<
        std::collections::HashMap<[u8; 32], (std::time::Instant, sion_verify::proof::Covering)>,
    >,
    /// Whether the ledger keeps cells (asked once: a ledger's format does not change), and
    /// the cells this process has had it list this log in already. `Some(false)` also for a
    /// writer told to withhold them ([`Memory::withhold_cells`]).
    cells: Option<bool>,
    cells_sent: std::collections::HashSet<u128>,
}

/// A sealed memory's space id, as memory.json names it.
fn space_of(dir: &Path, config: &Config) -> Result<Option<[u8; 32]>, OpenError> {
    let Some(hex_id) = &config.space else { return Ok(None) };
    let mut id = [0u8; 32];
    hex::decode_to_slice(hex_id, &mut id)
        .map_err(|_| config_err(&dir.join("memory.json"), "`space` is not 64 hex digits"))?;
    Ok(Some(id))
}

/// Atoms decoded at a time while folding a long stretch of log (two batches are held: the one
/// folded and the next, read meanwhile).
const FOLD_BATCH: usize = 1 << 12;

fn config_err(path: &Path, problem: impl ToString) -> OpenError {
    OpenError::Config { path: path.to_owned(), problem: problem.to_string() }
}

/// How to open or create a memory: [`Memory::options`]. Every program opens its memory through
/// this one door — the node, the command line, the protocol server, the archive, the tests.
///
/// ```no_run
/// # use sion_store::memory::Memory;
/// # fn main() -> Result<(), sion_store::memory::OpenError> {
/// let made = Memory::options("robot-1").agent("warehouse/robot-1").sealed(true).create()?;
/// drop(made);
/// let again = Memory::options("robot-1").open()?;
/// let reader = Memory::options("robot-1").open_read_only()?;
/// # drop((again, reader)); Ok(()) }
/// ```
pub struct Options<'a> {
    dir: PathBuf,
    index: IndexConfig,
    agent: Option<String>,
    sealed: bool,
    ledger: NewLedger,
    connect: Connect<'a>,
}

/// Which ledger a new memory opens its log on.
enum NewLedger {
    /// An embedded ledger in this directory (relative to the memory's), made if missing.
    Embedded(PathBuf),
    /// A ledger service at this URL, reached through this link.
    Remote { link: Box<dyn LedgerLink>, url: String },
}

impl Memory {
    /// The door to the memory in `dir`: set what differs from the defaults (an OS disk, the
    /// default index budgets, no agent name, not sealed, a new embedded ledger in `dir/ledger`,
    /// no client for remote ledgers), then [`Options::create`], [`Options::open`],
    /// [`Options::open_or_create`] or [`Options::open_read_only`].
    pub fn options(dir: impl Into<PathBuf>) -> Options<'static> {
        Options {
            dir: dir.into(),
            index: IndexConfig::default(),
            agent: None,
            sealed: false,
            ledger: NewLedger::Embedded(PathBuf::from("ledger")),
            connect: &no_remote,
        }
    }
}

impl<'a> Options<'a> {
    /// Write through `disk` (a test's faulty disk) rather than the OS's.
    pub fn disk(mut self, disk: &Disk) -> Self {
        self.index.disk = disk.clone();
        self
    }

    /// The index's memory budgets and disk.
    pub fn index(mut self, index: IndexConfig) -> Self {
        self.index = index;
        self
    }

    /// A new memory registers this agent name on its ledger (`None`: no name).
    pub fn agent<'s>(mut self, name: impl Into<Option<&'s str>>) -> Self {
        self.agent = name.into().map(str::to_owned);
        self
    }

    /// A new memory is sealed (docs/SEAL.md): a space whose id the log's policy commits to, whose
    /// first atoms are the space's creation and epoch 0.
    pub fn sealed(mut self, sealed: bool) -> Self {
        self.sealed = sealed;
        self
    }

    /// A new memory opens its log on the embedded ledger in `dir` (relative to the memory's
    /// directory, or absolute), made there if there is none: several memories may share one.
    pub fn ledger_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.ledger = NewLedger::Embedded(dir.into());
        self
    }

    /// A new memory opens its log on the ledger service at `url`, reached through `link`: no
    /// ledger directory, and the ledger's key pinned in memory.json so that a service answering
    /// later with another key is refused.
    pub fn ledger_link(mut self, link: Box<dyn LedgerLink>, url: &str) -> Self {
        self.ledger = NewLedger::Remote { link, url: url.to_owned() };
        self
    }

    /// How to reach a remote ledger that an existing memory's memory.json names (the default
    /// refuses: a program without a client for ledger services).
    pub fn connect<'b>(self, connect: Connect<'b>) -> Options<'b> {
        Options {
            dir: self.dir,
            index: self.index,
            agent: self.agent,
            sealed: self.sealed,
            ledger: self.ledger,
            connect,
        }
    }

    /// Create the memory: a writer key, an empty log, its ledger (see [`Options::ledger_dir`],
    /// [`Options::ledger_link`]), the agent name if asked for, and the log opened on the ledger.
    /// A directory that holds a memory already is refused.
    pub fn create(self) -> Result<Memory, OpenError> {
        let dir = self.dir.as_path();
        let disk = &self.index.disk;
        if dir.join("memory.json").exists() {
            return Err(OpenError::Exists(dir.to_owned()));
        }
        disk.create_dir_all(dir).map_err(|e| config_err(dir, e))?;
        let agent = self.agent.as_deref();
        match self.ledger {
            NewLedger::Embedded(ledger_rel) => {
                let ledger_path = dir.join(&ledger_rel);
                let ledger = match Ledger::open_on(disk, &ledger_path) {
                    Ok(l) => l,
                    Err(LedgerError::Missing(_)) => Ledger::create_on(disk, &ledger_path)?,
                    Err(e) => return Err(e.into()),
                };
                Memory::create_inner(&self.index, dir, agent, Box::new(ledger), ledger_rel, None, self.sealed)
            }
            NewLedger::Remote { link, url } => {
                Memory::create_inner(&self.index, dir, agent, link, PathBuf::new(), Some(&url), self.sealed)
            }
        }
    }

    /// Open the memory as its one writer, recovering its log and checking that the log still
    /// extends the head the ledger holds.
    pub fn open(self) -> Result<Memory, OpenError> {
        Memory::open_inner(&self.index, &self.dir, self.connect)
    }

    /// Open the memory if `dir` holds one, create it (as [`Options::create`]) if not.
    pub fn open_or_create(self) -> Result<Memory, OpenError> {
        if self.dir.join("memory.json").exists() { self.open() } else { self.create() }
    }

    /// Open the memory to read it, changing nothing in its directory — no lock taken, no file
    /// written, no repair — so that a memory on read-only media, on a full disk, or in use by a
    /// writer (a running node) can be shown, asked and audited. It answers as of the heads its
    /// ledger committed; it takes no atoms and commits nothing. What it derives (the ledger's
    /// last Pulses, the index folded past its checkpoint) stays in this process; an index that
    /// cannot be used as it is, is folded afresh in a scratch directory of its own.
    pub fn open_read_only(self) -> Result<Memory, OpenError> {
        Memory::open_read_only_inner(&self.dir, self.connect)
    }
}

impl Memory {
    fn create_inner(
        index_config: &IndexConfig,
        dir: &Path,
        agent: Option<&str>,
        mut ledger: Box<dyn LedgerLink>,
        ledger_rel: PathBuf,
        url: Option<&str>,
        sealed: bool,
    ) -> Result<Self, OpenError> {
        let disk = &index_config.disk;
        let key_path = dir.join("writer.key");
        let log_dir = dir.join("log");
        // What this attempt makes, it takes away again if the ledger refuses it before taking
        // anything from its key (a name already taken, say): a refused creation leaves nothing.
        let (fresh_key, fresh_log) = (!key_path.exists(), !log_dir.exists());
        let writer = read_or_make_key(disk, &key_path)?;
        let creation = if sealed { Some(Space::genesis()?) } else { None };
        let (space_id, policy) = match &creation {
            Some(c) => {
                let id = sion_seal::record::space_id(c);
                (Some(id), sion_seal::record::policy(&id))
            }
            None => (None, [0; 32]),
        };
        let options = LogOptions { disk: disk.clone(), ..LogOptions::default() };
        let (log, recovery) = match Log::open(&log_dir, options.clone()) {
            Ok(opened) => opened,
            Err(LogError::Missing(_)) => Log::create(&log_dir, options)?,
            Err(e) => return Err(e.into()),
        };
        let me = account_of(&writer);
        let opened = (|| -> Result<_, OpenError> {
            if let Some(name) = agent {
                register_agent_path(ledger.as_mut(), &writer, name)?;
            }
            let tx = Tx::OpenMemory { agent: agent.map(str::to_owned), policy };
            Ok(ledger.submit_receipt(crate::ledger::SignedTx::sign(&writer, ledger.nonce(&me)?, tx))?)
        })();
        let opened = match opened {
            Ok(opened) => opened,
            Err(refused) => {
                // Only if the ledger holds nothing signed by this key (its nonce is 0): a key
                // that registered a name, or opened a log, must not be lost.
                if fresh_key && matches!(ledger.nonce(&me), Ok(0)) {
                    drop(log);
                    let mut left = Vec::new();
                    if fresh_log && let Err(e) = fs::remove_dir_all(&log_dir) {
                        left.push(format!("{}: {e}", log_dir.display()));
                    }
                    if let Err(e) = fs::remove_file(&key_path) {
                        left.push(format!("{}: {e}", key_path.display()));
                    }
                    if !left.is_empty() {
                        tracing::warn!("the refused creation left {}", left.join("; "));
                    }
                }
                return Err(refused);
            }
        };
        // The log the ledger says it opened (a fleet ledger's Pulse may open many), checked: this
        // writer's, empty, opened at that Pulse.
        let log_id = opened.log.ok_or(LedgerError::UnknownLog(LogId(u64::MAX)))?;
        let on_ledger = ledger.log(log_id)?.ok_or(LedgerError::UnknownLog(log_id))?;
        if on_ledger.writer != me
            || on_ledger.commits != 0
            || on_ledger.committed_at != opened.pulse.header.number
        {
            return Err(LedgerError::Remote {
                ledger: ledger.describe(),
                message: format!(
                    "it says the opening made log {log_id}, which is not this writer's log opened at Pulse {}",
                    opened.pulse.header.number
                ),
            }
            .into());
        }
        let config = Config {
            log: log_id.0,
            agent: agent.map(str::to_owned),
            ledger: ledger_rel,
            ledger_url: url.map(str::to_owned),
            ledger_key: url.map(|_| hex::encode(ledger.public_key().to_bytes())),
            index: Some(INDEX_VERSION),
            index_v2_from: None,
            index_from: None,
            repaired: Vec::new(),
            space: space_id.map(hex::encode),
        };
        // The space's first atoms before memory.json names it.
        let space = match &creation {
            Some(c) => Some(std::sync::Arc::new(Space::create(disk, dir, &log, c)?)),
            None => None,
        };
        write_config(disk, dir, &config)?;
        if url.is_some() {
            write_view(disk, dir, &on_ledger)?;
        }
        let (index, index_boot) = open_index(index_config, dir, &log, &on_ledger, ledger.as_ref(), 0)?;
        Ok(Self {
            dir: dir.to_owned(),
            log,
            ledger,
            heads: HeadWatch::new(on_ledger.clone()),
            coverings: std::sync::Mutex::default(),
            cells: None,
            cells_sent: std::collections::HashSet::new(),
            on_ledger,
            writer,
            log_id,
            agent: config.agent,
            recovery,
            blobs: BlobStore::open_on(disk, &dir.join("blobs"))?,
            reader: index.reader(),
            index: Some(index),
            index_boot,
            index_from: 0,
            _scratch: None,
            read_only: false,
            stale_view: false,
            space,
        })
    }

    fn open_inner(index: &IndexConfig, dir: &Path, connect: Connect<'_>) -> Result<Self, OpenError> {
        let index_config = index;
        let disk = &index_config.disk;
        let config = read_config(dir)?;
        sion_disk::private::keep_memory_private(dir, true);
        // Its making may have been cut short just before memory.json's name was durable.
        disk.make_durable(&dir.join("memory.json")).map_err(|e| config_err(&dir.join("memory.json"), e))?;
        let writer = read_key(&dir.join("writer.key"))?;
        let ledger = link_of(dir, &config, connect, |path| Ledger::open_on(disk, path))?;
        let log_id = LogId(config.log);
        let (on_ledger, offline) = log_on_ledger(dir, &config, ledger.as_ref(), log_id)?;
        if config.ledger_url.is_some()
            && !offline
            && let Err(e) = write_view(disk, dir, &on_ledger)
        {
            // A cache: without it the memory opens only while the ledger answers.
            tracing::warn!("{e}");
        }
        let options =
            LogOptions { keep_at_least: on_ledger.head.size, disk: disk.clone(), ..LogOptions::default() };
        let (log, recovery) = Log::open(&dir.join("log"), options)?;
        if on_ledger.sealed {
            log.seal();
        }
        let committed = on_ledger.head;
        let extends = committed.size <= log.size()
            && (committed.size == 0 || log.root_at(committed.size)? == committed.root);
        if !extends {
            return Err(OpenError::Diverged { committed: committed.size, root: hex::encode(committed.root) });
        }
        let (index_from, moved) = index_from(&config, committed.size)?;
        if let Some(config) = moved {
            write_config(disk, dir, &config)?;
        }
        let (index, index_boot) =
            open_index(index_config, dir, &log, &on_ledger, ledger.as_ref(), index_from)?;
        let space = match space_of(dir, &config)? {
            Some(id) => Some(std::sync::Arc::new(Space::open(disk, dir, &log, id)?)),
            None => None,
        };
        Ok(Self {
            dir: dir.to_owned(),
            log,
            ledger,
            heads: HeadWatch::new(on_ledger.clone()),
            coverings: std::sync::Mutex::default(),
            cells: None,
            cells_sent: std::collections::HashSet::new(),
            on_ledger,
            writer,
            log_id,
            agent: config.agent,
            recovery,
            blobs: BlobStore::open_on(disk, &dir.join("blobs"))?,
            reader: index.reader(),
            index: Some(index),
            index_boot,
            index_from,
            _scratch: None,
            read_only: false,
            stale_view: offline,
            space,
        })
    }

    fn open_read_only_inner(dir: &Path, connect: Connect<'_>) -> Result<Self, OpenError> {
        let config = read_config(dir)?;
        sion_disk::private::keep_memory_private(dir, false);
        let writer = read_key(&dir.join("writer.key"))?;
        // The index first, then the ledger, then the log: a writer running now indexes and
        // commits only what its log holds, so each is at least as far as the one before.
        let path = dir.join("index");
        let config_ = IndexConfig::default();
        let opened = Index::open_read_only(&path, config_.clone());
        let ledger = link_of(dir, &config, connect, Ledger::open_read_only)?;
        let log_id = LogId(config.log);
        let (on_ledger, _) = log_on_ledger(dir, &config, ledger.as_ref(), log_id)?;
        let log = Log::open_read_only(&dir.join("log"))?;
        let committed = on_ledger.head;
        if committed.size > log.size() {
            return Err(OpenError::Unreadable {
                dir: dir.join("log"),
                committed: committed.size,
                readable: log.size(),
            });
        }
        if committed.size > 0 && log.root_at(committed.size)? != committed.root {
            return Err(OpenError::Diverged { committed: committed.size, root: hex::encode(committed.root) });
        }
        // Read only: memory.json is left as it is; the next writer moves it.
        let (index_from, _) = index_from(&config, committed.size)?;
        let mut scratch = None;
        let resumed = opened
            .map_err(OpenError::from)
            .and_then(|(index, _)| resume_index(index, &log, &on_ledger, ledger.as_ref(), index_from));
        let (index, index_boot) = match resumed {
            Ok((index, folded)) => {
                let version = index.size() - folded;
                (index, IndexBoot::Checkpoint { version, folded })
            }
            Err(first) => {
                let why = match &first {
                    OpenError::Index(IndexError::Missing(_)) => "no checkpoint".to_owned(),
                    other => other.to_string(),
                };
                tracing::warn!("{}: {why}; folding the log afresh in a scratch directory", path.display());
                let tmp = tempfile::Builder::new()
                    .prefix("sion-read-")
                    .tempdir()
                    .map_err(|e| OpenError::Scratch(std::env::temp_dir(), e.to_string()))?;
                let mut index = Index::create(&tmp.path().join("index"), config_)?;
                let folded = catch_up(&log, &mut index, &on_ledger, ledger.as_ref(), index_from)?;
                scratch = Some(tmp);
                (index, IndexBoot::Rebuilt { why, folded, rebuilds: rebuilds_so_far(dir) })
            }
        };
        let space = match space_of(dir, &config)? {
            Some(id) => Some(std::sync::Arc::new(Space::open_read_only(dir, &log, id)?)),
            None => None,
        };
        Ok(Self {
            dir: dir.to_owned(),
            log,
            ledger,
            writer,
            log_id,
            agent: config.agent,
            heads: HeadWatch::new(on_ledger.clone()),
            coverings: std::sync::Mutex::default(),
            cells: None,
            cells_sent: std::collections::HashSet::new(),
            on_ledger,
            recovery: Recovery::default(),
            blobs: BlobStore::open_read_only(&dir.join("blobs"))?,
            reader: index.reader(),
            index: Some(index),
            index_boot,
            index_from,
            _scratch: scratch,
            read_only: true,
            stale_view: false,
            space,
        })
    }

    /// A sealed memory's space (docs/SEAL.md); `None` for a memory made without one.
    pub fn space(&self) -> Option<&std::sync::Arc<Space>> {
        self.space.as_ref()
    }

    fn sealed_space(&self) -> Result<&Space, MemoryError> {
        self.space.as_deref().ok_or_else(|| MemoryError::NotSealed(self.dir.clone()))
    }

    /// The memory's one write path, to hand to other threads: every `remember` below is it.
    pub fn intake(&self) -> Intake {
        Intake::new(
            self.dir.clone(),
            self.log.clone(),
            self.blobs.clone(),
            self.space.clone(),
            self.read_only,
        )
    }

    /// The committed head as it moves: each commit of this memory wakes its waiters.
    pub fn watch_head(&self) -> HeadWatch {
        self.heads.clone()
    }

    /// The ledger's word for this log changed: tell whoever waits.
    fn set_on_ledger(&mut self, log: MemoryLog) {
        self.heads.publish(&log);
        self.on_ledger = log;
    }

    /// Seal each atom's inline payload (text or bytes) and append them durably.
    pub fn remember_sealed(
        &self,
        atoms: Vec<sion_verify::atom::AtomParts>,
    ) -> Result<Vec<Appended>, RememberError> {
        self.intake().remember_sealed(atoms)
    }

    /// Seal a blob (`content`, of `media_type`) for the atom `parts`, keep the sealed bytes in
    /// the blob store, then append the atom, which commits to them.
    pub fn remember_sealed_blob(
        &self,
        parts: sion_verify::atom::AtomParts,
        media_type: &str,
        content: &[u8],
    ) -> Result<Appended, RememberError> {
        self.intake().remember_sealed_blob(parts, media_type, content)
    }

    /// Keep the blobs `atoms` commit to (sealed for their atoms in a sealed memory, which then
    /// commit to the sealed bytes), then append the atoms durably.
    pub fn remember_with_blobs(
        &self,
        atoms: Vec<Atom>,
        blobs: Vec<Vec<u8>>,
    ) -> Result<Vec<Appended>, RememberError> {
        self.intake().remember_with_blobs(atoms, blobs)
    }

    /// The sealed bytes of the atom at `position` and which kind they are, if it is sealed.
    pub fn sealed_bytes(
        &self,
        position: u64,
    ) -> Result<Option<(Atom, Vec<u8>, sion_seal::SealKind)>, RememberError> {
        self.intake().sealed_bytes(position)
    }

    /// The payload of the atom at `position`: in a sealed memory, opened with the writer's
    /// keys; in a memory in the clear, as it was given.
    pub fn open_payload(&self, position: u64) -> Result<Opened, MemoryError> {
        if self.space.is_none() {
            // A memory in the clear: each payload is what it was given (a blob, from the blob
            // store, checked against its hash).
            let atom = self.log.read(position)?;
            return Ok(match &atom.parts().payload {
                sion_verify::atom::Payload::Blob(r) => {
                    Opened::Blob { media_type: r.media_type.clone(), content: self.blobs.get(&r.hash)? }
                }
                other => Opened::Inline(other.clone()),
            });
        }
        let space = self.sealed_space()?;
        let Some((atom, bytes, kind)) = self.sealed_bytes(position)? else {
            return Err(SpaceError::NotSealed {
                position,
                what: doors::payload_name(self.log.read(position)?.parts()),
            }
            .into());
        };
        Ok(space.open_payload(position, atom.parts(), &bytes, kind)?)
    }

    /// Forget the payloads of the atoms at `positions`: forget atoms (who, why, the leaves,
    /// linking to each), then the writer's keys punctured. Returns the forget atoms' positions.
    pub fn forget(&self, positions: &[u64], who: &str, why: &str) -> Result<Vec<u64>, RememberError> {
        self.intake().forget(positions, who, why)
    }

    /// Whether this memory was opened to be read only ([`Options::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The fleet ledger's URL this log is on, as memory.json names it; none for a log on an
    /// embedded ledger (or a memory.json that no longer reads).
    pub fn ledger_url(&self) -> Option<String> {
        read_config(&self.dir).ok().and_then(|c| c.ledger_url)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The blobs atoms commit to: keep them before remembering the atoms.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// The ledger the log is on (embedded or remote).
    pub fn ledger(&self) -> &dyn LedgerLink {
        self.ledger.as_ref()
    }

    /// Submit a transaction of one's own to the memory's ledger (a test's forged commit, a
    /// demo's refused one), then read the log's entry from the ledger again.
    pub fn submit(&mut self, tx: crate::ledger::SignedTx) -> Result<SignedHeader, CommitError> {
        let submitted = self.ledger.submit(tx);
        match self.ledger.log(self.log_id) {
            Ok(Some(log)) => {
                self.set_on_ledger(log);
                self.stale_view = false;
            }
            _ => self.stale_view = true,
        }
        Ok(submitted?)
    }

    pub fn writer(&self) -> &SigningKey {
        &self.writer
    }

    pub fn log_id(&self) -> LogId {
        self.log_id
    }

    pub fn agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    /// What opening the log had to repair.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The log object as the ledger holds it (the committed head).
    pub fn committed(&self) -> &MemoryLog {
        &self.on_ledger
    }

    /// Append atoms durably (a no-op for atoms already held).
    pub fn remember(&self, atoms: Vec<Atom>) -> Result<Vec<Appended>, RememberError> {
        self.intake().remember(atoms)
    }

    /// The index's writer, at least at the committed head (folded forward when the head moved;
    /// checked against the index root the head commits to).
    pub fn index(&mut self) -> Result<&mut Index, CommitError> {
        let head = self.committed().head;
        let checks = head.size >= self.index_from;
        let log = self.log.clone();
        let index = self.index.as_mut().ok_or(CommitError::IndexTaken)?;
        if index.size() < head.size {
            fold_log(&log, index, head.size)?;
            if checks && index.root()? != head.index {
                return Err(CommitError::IndexMismatch { size: head.size });
            }
        }
        Ok(index)
    }

    /// The index's writer, for a brain to keep: from now on this memory proves through its
    /// readers only.
    pub fn take_index(&mut self) -> Result<Index, CommitError> {
        self.index()?;
        self.index.take().ok_or(CommitError::IndexTaken)
    }

    /// The readers' side of the index.
    pub fn index_reader(&self) -> &IndexReader {
        &self.reader
    }

    /// How the index came up when the memory was opened.
    pub fn index_boot(&self) -> &IndexBoot {
        &self.index_boot
    }

    /// Committed heads below this size carry index version 1 roots (0: none does).
    pub fn index_from(&self) -> u64 {
        self.index_from
    }

    /// Commit the log's durable head and its index root to the ledger, with the consistency
    /// proof from the committed head; `seal` closes the log for good. The index is
    /// checkpointed after.
    pub fn commit(&mut self, seal: bool) -> Result<Committed, CommitError> {
        let size = self.log.size();
        let log = self.log.clone();
        let index = self.index()?;
        fold_log(&log, index, size)?;
        let root = index.root()?;
        let committed = self.commit_at(size, root, seal)?;
        if let Some(index) = &self.index {
            index.checkpoint()?;
        }
        Ok(committed)
    }

    /// Commit the head of the log's first `size` atoms with an index root computed elsewhere
    /// (by a brain that keeps the index resident); the consistency proof runs from the
    /// committed head to `size`.
    pub fn commit_at(
        &mut self,
        size: u64,
        index_root: [u8; 32],
        seal: bool,
    ) -> Result<Committed, CommitError> {
        self.commit_head(size, index_root, None, seal)
    }

    /// Commit the committed head again, naming `manifest` as its archive's root (an archive of
    /// exactly this head: docs/SEAL.md, "Archives"). Later commits carry it forward until the
    /// next archive.
    pub fn commit_manifest(&mut self, manifest: [u8; 32]) -> Result<Committed, CommitError> {
        let head = self.committed().head;
        self.commit_head(head.size, head.index, Some(manifest), false)
    }

    /// The embedded ledger's directory (None for a log on a fleet ledger).
    pub fn embedded_ledger_dir(&self) -> Result<Option<PathBuf>, MemoryError> {
        let config = read_config(&self.dir)?;
        Ok(config.ledger_url.is_none().then(|| self.dir.join(&config.ledger)))
    }

    fn commit_head(
        &mut self,
        size: u64,
        index_root: [u8; 32],
        manifest: Option<[u8; 32]>,
        seal: bool,
    ) -> Result<Committed, CommitError> {
        if self.stale_view {
            let log = self.ledger.log(self.log_id)?.ok_or(LedgerError::UnknownLog(self.log_id))?;
            self.set_on_ledger(log);
            self.stale_view = false;
        }
        let current = self.committed().clone();
        if size < current.head.size || size > self.log.size() {
            return Err(CommitError::BadSize { size, committed: current.head.size });
        }
        let proof = if current.head.size == 0 || current.head.size == size {
            Vec::new()
        } else {
            self.log.consistency_proof(current.head.size, size)?
        };
        // The manifest names the latest archive until the next one replaces it.
        let manifest = manifest.unwrap_or(current.head.manifest);
        let head = Head { size, root: self.log.root_at(size)?, index: index_root, manifest };
        let me = account_of(&self.writer);
        let mut cells = self.new_cells(current.head.size, size)?;
        // Cells past what one transaction takes go first, in commits that keep the head: the
        // ledger lists the log in every cell of its atoms before it holds them (docs/LEDGER.md,
        // "Cells"), so no Pulse shows an atom the cells leave out.
        let mut current = current;
        while cells.len() > sion_verify::ledger::MAX_TX_CELLS {
            let ahead: Vec<u128> = cells.drain(..sion_verify::ledger::MAX_TX_CELLS).collect();
            let tx = crate::ledger::SignedTx::sign(
                &self.writer,
                self.ledger.nonce(&me)?,
                Tx::CommitMemory {
                    log: self.log_id,
                    version: current.commits,
                    head: current.head,
                    proof: Vec::new(),
                    seal: false,
                    cells: ahead.clone(),
                },
            );
            let pulse = self.ledger.submit(tx).inspect_err(|_| self.stale_view = true)?;
            self.cells_sent.extend(ahead);
            current =
                MemoryLog { commits: current.commits + 1, committed_at: pulse.header.number, ..current };
            self.set_on_ledger(current.clone());
        }
        let sent = cells.clone();
        let tx = crate::ledger::SignedTx::sign(
            &self.writer,
            self.ledger.nonce(&me)?,
            Tx::CommitMemory { log: self.log_id, version: current.commits, head, proof, seal, cells },
        );
        let pulse = match self.ledger.submit(tx) {
            Ok(pulse) => pulse,
            Err(e) => {
                // A remote ledger may have taken it before the reply was lost: ask again first.
                self.stale_view = true;
                return Err(e.into());
            }
        };
        self.cells_sent.extend(sent);
        // What the ledger's rules make of an accepted commit (docs/LEDGER.md, "Transactions").
        self.set_on_ledger(MemoryLog {
            head,
            commits: current.commits + 1,
            committed_at: pulse.header.number,
            sealed: seal,
            ..current.clone()
        });
        if self.ledger.boot().is_none()
            && let Err(e) = write_view(&Disk::os(), &self.dir, &self.on_ledger)
        {
            // A cache: without it the memory still opens while the ledger answers.
            tracing::warn!("{e}");
        }
        if seal {
            self.log.seal();
        }
        Ok(Committed { pulse, head, previous: current.head })
    }

    /// Send no cells with the commits from now on: a writer that breaks the ledger's cells
    /// rule, for tests of what readers catch (docs/PROOFS.md, kind 10).
    #[doc(hidden)]
    pub fn withhold_cells(&mut self) {
        self.cells = Some(false);
    }

    /// The cells the atoms at `from..to` lie in that this process has not yet had the ledger
    /// list this log in (docs/LEDGER.md, "Cells"), ascending; none on a ledger without cells.
    fn new_cells(&mut self, from: u64, to: u64) -> Result<Vec<u128>, CommitError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let keeps = match self.cells {
            Some(k) => k,
            None => {
                let k = self.ledger.latest()?.header.cells.is_some();
                self.cells = Some(k);
                k
            }
        };
        if !keeps {
            return Ok(Vec::new());
        }
        let mut found: Vec<u128> = Vec::new();
        // Most atoms share a frame: its tag (a hash) is taken once per run of one frame.
        let mut tag_of: Option<(String, u16)> = None;
        for record in self.log.scan_bytes(from).take((to - from) as usize) {
            let (position, bytes) = record?;
            // Where it is, read from its first fields: the log took it as a valid atom.
            let (frame, bounds) =
                Atom::placement(&bytes).map_err(|e| LogError::Corrupt { position, reason: e.to_string() })?;
            let tag = match &tag_of {
                Some((f, t)) if *f == frame => *t,
                _ => {
                    let t = sion_verify::cells::frame_tag(&frame);
                    tag_of = Some((frame, t));
                    t
                }
            };
            found.extend(sion_verify::cells::cells_of_tagged(tag, &bounds));
            if found.len() > 1 << 16 {
                found.sort_unstable();
                found.dedup();
            }
        }
        found.sort_unstable();
        found.dedup();
        found.retain(|c| !self.cells_sent.contains(c));
        Ok(found)
    }

    fn attestation(&self) -> Result<Attestation, ProveError> {
        self.attestation_at(self.committed().committed_at)
    }

    /// The ledger's attestation of the head committed at `pulse`.
    pub fn attestation_at(&self, pulse: u64) -> Result<Attestation, ProveError> {
        self.attestation_of(self.log_id, pulse)
    }

    /// The ledger's attestation of another log, `id`, at Pulse `pulse` (a reviser's other logs,
    /// for a belief bundle's chain).
    pub fn attestation_of(&self, id: LogId, pulse: u64) -> Result<Attestation, ProveError> {
        let state = self.ledger.state_proof(id, pulse)?;
        let cosignatures = self.ledger.cosignatures(pulse)?;
        let checkpoint = self.covering(&state.header.header);
        Ok(Attestation { ledger_key: self.ledger.public_key().to_bytes(), state, cosignatures, checkpoint })
    }

    /// The ledger's cosigned checkpoint covering `header`'s Pulse, checked. It is further
    /// evidence, for readers who name C2SP witnesses: without one (none cosigned yet, or a
    /// ledger that keeps no history) a file is attested as before, and one that does not hold
    /// is not put in a file (a prover makes no file a verifier refuses).
    fn covering(&self, header: &sion_verify::ledger::PulseHeader) -> Option<sion_verify::proof::Covering> {
        let pulse = header.number;
        let hash = header.hash();
        // Kept by the header's hash (checked against this very header when it was kept), for a
        // few seconds: a burst of proofs asks the ledger once, and witnesses' lines merged into
        // the kept note later (a round in which one was slow) are picked up after.
        if let Some((at, c)) =
            self.coverings.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&hash)
            && at.elapsed() < std::time::Duration::from_secs(10)
        {
            return Some(c.clone());
        }
        match self.ledger.covering(pulse) {
            Ok(Some(c)) => match c.verify(&self.ledger.public_key(), header) {
                Ok(_) => {
                    let mut kept = self.coverings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Bounded: a long-lived prover asked about many Pulses keeps the latest.
                    if kept.len() >= 1024 {
                        kept.clear();
                    }
                    kept.insert(hash, (std::time::Instant::now(), c.clone()));
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!("the ledger's checkpoint covering Pulse {pulse} is left out: {e}");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("no checkpoint covering Pulse {pulse}: {e}");
                None
            }
        }
    }

    /// The committed version of the log with `size` atoms (the latest commit if `None`).
    pub fn version(&self, size: Option<u64>) -> Result<MemoryLog, ProveError> {
        let Some(size) = size else { return Ok(self.committed().clone()) };
        let found = self.ledger.last_commit_at_most(self.log_id, size)?;
        if let Some(v) = &found
            && v.head.size == size
        {
            return Ok(v.clone());
        }
        // The committed sizes either side of the one asked for (a long life has too many to list).
        let below = found.map(|v| v.head.size.to_string());
        let above = self.ledger.first_commit_over(self.log_id, size)?.map(|v| v.head.size.to_string());
        let sizes = match (below, above) {
            (None, None) => "none yet".to_owned(),
            (Some(b), None) => format!("the latest is {b}"),
            (None, Some(a)) => format!("the first is {a}"),
            (Some(b), Some(a)) => format!("the nearest are {b} and {a}"),
        };
        Err(ProveError::NoSuchHead { size, sizes })
    }

    /// The index as of a committed version, checked against the root the head commits to.
    fn snapshot_of(&self, version: &MemoryLog) -> Result<crate::index::Snapshot, ProveError> {
        snapshot_of(&self.reader, version, self.index_from)
    }

    fn answer_atoms(&self, positions: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, ProveError> {
        answer_atoms(&self.log, positions)
    }

    /// A committed head (the latest if `None`) fixed for proving: what a proof as of it needs,
    /// taken from this memory in a moment. A caller that shares the memory behind a lock proves
    /// with it after letting go, so appends and commits never wait on a proof.
    pub fn snapshot(&self, as_of: Option<u64>) -> Result<Snapshot, ProveError> {
        let version = self.version(as_of)?;
        let attestation = self.attestation_at(version.committed_at)?;
        Ok(Snapshot {
            reader: self.reader.clone(),
            log: self.log.clone(),
            log_id: self.log_id,
            version,
            attestation,
            index_from: self.index_from,
        })
    }

    /// Everything in a frame, box and interval, as of a committed head (the latest if `None`),
    /// with the proof that nothing is missing ([`Snapshot::range`]).
    pub fn prove_range(&self, query: &Query, as_of: Option<u64>) -> Result<ProofFile, ProveError> {
        self.snapshot(as_of)?.range(query)
    }

    /// How many atoms answer `query` as of a committed head, for how long in all, with the
    /// proof ([`Snapshot::count`]).
    pub fn prove_count(&self, query: &Query, as_of: Option<u64>) -> Result<ProofFile, ProveError> {
        self.snapshot(as_of)?.count(query)
    }

    /// The atom last seen in a frame, box and interval (its valid time ends last), as of a
    /// committed head, with the proof that nothing later answers ([`Snapshot::latest`]).
    pub fn prove_latest(&self, query: &Query, as_of: Option<u64>) -> Result<ProofFile, ProveError> {
        self.snapshot(as_of)?.latest(query)
    }

    /// The k atoms nearest to a point during an interval, as of a committed head, with the
    /// proof that nothing nearer exists ([`Snapshot::nearest`]).
    pub fn prove_nearest(&self, query: &NearQuery, as_of: Option<u64>) -> Result<ProofFile, ProveError> {
        self.snapshot(as_of)?.nearest(query)
    }

    /// Every atom about `subject` (or linking to an atom), as of a committed head
    /// ([`Snapshot::list`]).
    pub fn prove_list(&self, key: ListKey, as_of: Option<u64>) -> Result<ProofFile, ProveError> {
        self.snapshot(as_of)?.list(key)
    }

    /// Every atom linking to `target`, as of a committed head.
    pub fn prove_links(&self, target: AtomId, as_of: Option<u64>) -> Result<ProofFile, ProveError> {
        self.prove_list(ListKey::LinksTo(target), as_of)
    }

    /// Prove that the committed index leaves out the atom at `position` (for an honest index
    /// this fails with [`ProveError::NotOmitted`]).
    pub fn prove_omission(&self, position: u64) -> Result<ProofFile, ProveError> {
        let version = self.committed().clone();
        let head = version.head;
        if position >= head.size {
            return Err(ProveError::NotCommitted { position, committed: head.size });
        }
        let atom = self.log.read(position)?;
        let p = atom.parts();
        let query = Query::new(&p.frame, p.bounds, p.valid.from_ns, p.valid.to_ns)
            .map_err(|e| ProveError::Query(e.to_string()))?;
        let answer = self.snapshot_of(&version)?.range(&query)?;
        if answer.positions.contains(&position) {
            return Err(ProveError::NotOmitted(position));
        }
        let range = RangeProof { query, atoms: self.answer_atoms(&answer.positions)?, answer };
        Ok(ProofFile {
            proof: Proof::Omission {
                log: self.log_id,
                head,
                position,
                atom: atom.bytes().to_vec(),
                path: self.log.inclusion_proof(position, head.size)?,
                range: Box::new(range),
            },
            attestation: Some(self.attestation()?),
        })
    }

    /// Prove that the atom at `position` is in the committed head.
    pub fn prove_inclusion(&self, position: u64) -> Result<ProofFile, ProveError> {
        let head = self.committed().head;
        if position >= head.size {
            return Err(ProveError::NotCommitted { position, committed: head.size });
        }
        let proof = Proof::Inclusion {
            log: self.log_id,
            head,
            position,
            atom: self.log.read_bytes(position)?,
            path: self.log.inclusion_proof(position, head.size)?,
        };
        Ok(ProofFile { proof, attestation: Some(self.attestation()?) })
    }

    /// Prove that the ledger's cells leave this log out of a cell the atom at `position` lies
    /// in (docs/PROOFS.md, kind 10): evidence that the log's writer broke the cells rule, made
    /// by anyone who holds the log (an honest writer's memory cannot make one). As of the
    /// Pulse that recorded the position — so a writer that lists the cell later is convicted
    /// all the same — else as of the latest.
    pub fn prove_cell_omission(&self, position: u64) -> Result<ProofFile, ProveError> {
        let recorded = self.ledger.first_commit_over(self.log_id, position)?.map(|v| v.committed_at);
        if let Some(pulse) = recorded
            && let Ok(file) = self.prove_cell_omission_at(position, Some(pulse))
        {
            return Ok(file);
        }
        self.prove_cell_omission_at(position, None)
    }

    /// [`Memory::prove_cell_omission`] as of Pulse `pulse` (the latest for `None`).
    pub fn prove_cell_omission_at(&self, position: u64, pulse: Option<u64>) -> Result<ProofFile, ProveError> {
        let committed = self.committed().head;
        if position >= committed.size {
            return Err(ProveError::NotCommitted { position, committed: committed.size });
        }
        let bytes = self.log.read_bytes(position)?;
        let atom = Atom::decode(&bytes).map_err(|e| LogError::Corrupt { position, reason: e.to_string() })?;
        let parts = atom.parts();
        for cell in sion_verify::cells::cells_of(&parts.frame, &parts.bounds) {
            let Some((header, cell_proof, logs)) = self.ledger.cell_proof(cell, pulse)? else {
                return Err(ProveError::Query(
                    "this memory's ledger keeps no cells (made before them): there is no cell to have left it out"
                        .into(),
                ));
            };
            if logs.binary_search(&self.log_id.0).is_ok() {
                continue;
            }
            let attestation = self.attestation_at(header.header.number)?;
            if attestation.state.header != header {
                return Err(ProveError::Query(format!(
                    "the ledger moved past Pulse {} while asked: ask again",
                    header.header.number
                )));
            }
            let head = attestation.state.log.head;
            let end = match cell_proof.end {
                None => sion_verify::proof::CellEnd::Empty,
                Some((key, _)) if key == cell => sion_verify::proof::CellEnd::Listed(logs),
                Some((key, digest)) => sion_verify::proof::CellEnd::Other(key, digest),
            };
            let proof = Proof::CellOmission {
                log: self.log_id,
                head,
                position,
                atom: bytes,
                path: self.log.inclusion_proof(position, head.size)?,
                cell,
                end,
                siblings: cell_proof.siblings,
            };
            return Ok(ProofFile { proof, attestation: Some(attestation) });
        }
        Err(ProveError::Query(format!(
            "the ledger's cells list this log in every cell the atom at position {position} lies in: nothing omitted"
        )))
    }

    /// Prove that the log's first `old_size` atoms are a prefix of the committed head.
    pub fn prove_consistency(&self, old_size: u64) -> Result<ProofFile, ProveError> {
        let head = self.committed().head;
        if old_size == 0 || old_size > head.size {
            return Err(ProveError::BadSize { size: old_size, committed: head.size });
        }
        let proof = Proof::Consistency {
            log: self.log_id,
            head,
            old_size,
            old_root: self.log.root_at(old_size)?,
            path: self.log.consistency_proof(old_size, head.size)?,
        };
        Ok(ProofFile { proof, attestation: Some(self.attestation()?) })
    }

    /// When the atom at `position` was recorded, as the ledger attests.
    pub fn prove_time(&self, position: u64) -> Result<TxTimeProof, ProveError> {
        Ok(self.ledger.tx_time_proof(self.log_id, position)?)
    }

    /// The same as a proof file (docs/PROOFS.md, kind 6): the atom, its inclusion in the head
    /// of the Pulse that first covered it, and the log's state at that Pulse and the one before.
    pub fn prove_recorded(&self, position: u64) -> Result<ProofFile, ProveError> {
        let time = self.prove_time(position)?;
        let head = time.at.log.head;
        let proof = Proof::Recorded {
            log: self.log_id,
            head,
            position,
            atom: self.log.read_bytes(position)?,
            path: self.log.inclusion_proof(position, head.size)?,
            before: Box::new(time.before),
        };
        Ok(ProofFile {
            proof,
            attestation: Some(Attestation {
                ledger_key: self.ledger.public_key().to_bytes(),
                cosignatures: self.ledger.cosignatures(time.at.header.header.number)?,
                checkpoint: self.covering(&time.at.header.header),
                state: time.at,
            }),
        })
    }

    /// Re-read the whole log and compare it with the committed head.
    pub fn audit(&self, progress: impl FnMut(u64)) -> Result<(Audit, MemoryLog), AuditError> {
        let committed = self.committed().clone();
        Ok((self.log.audit(committed.head.size, progress)?, committed))
    }

    /// Every blob an atom of the log commits to, read back and checked against its hash and
    /// size: what is missing (a pack lost or cut short) and what is damaged, by position.
    pub fn audit_blobs(&self, mut progress: impl FnMut(u64)) -> Result<BlobAudit, AuditError> {
        let mut audit = BlobAudit { damage: self.blobs.damage(), ..BlobAudit::default() };
        for item in self.log.scan(0) {
            let (position, atom) = item?;
            if position % 4096 == 0 {
                progress(position);
            }
            let sion_verify::atom::Payload::Blob(blob) = &atom.parts().payload else { continue };
            audit.referenced += 1;
            // A sealed frame or tile is in its stream's lane; once retention forgot it, it is
            // gone on purpose, and the log says so (a forget atom).
            if let (Some(space), Some(Some(_))) = (&self.space, sion_seal::sealed_leaf(&blob.media_type)) {
                match space.sealed_bytes(position, atom.parts(), |_| None) {
                    Ok(Some((bytes, _))) if bytes.len() as u64 == blob.size => continue,
                    Err(SpaceError::Seal(sion_seal::SealError::Forgotten { .. })) => {
                        audit.forgotten += 1;
                        continue;
                    }
                    // Not in a lane: in the blob store, below.
                    Err(SpaceError::MissingBlob { .. }) => {}
                    Ok(_) => {
                        audit.bad += 1;
                        if audit.first.len() < 10 {
                            audit
                                .first
                                .push((position, "its sealed blob is not the size its atom says".into()));
                        }
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let problem = match self.blobs.get(&blob.hash) {
                Ok(bytes) if bytes.len() as u64 == blob.size => continue,
                Ok(bytes) => format!(
                    "blob {} has {} bytes, the atom says {}",
                    hex::encode(blob.hash),
                    bytes.len(),
                    blob.size
                ),
                Err(BlobError::Missing(_)) if audit.damage.is_empty() => {
                    // Not held, and no pack is known lost: kept elsewhere (an atom may commit
                    // to a blob another store holds).
                    audit.elsewhere += 1;
                    continue;
                }
                Err(BlobError::Missing(h)) => {
                    audit.missing += 1;
                    format!("blob {h} is missing ({})", audit.damage.join("; "))
                }
                Err(BlobError::Corrupt(h)) => format!("blob {h} does not hash to its name"),
                Err(e) => return Err(e.into()),
            };
            audit.bad += 1;
            if audit.first.len() < 10 {
                audit.first.push((position, problem));
            }
        }
        Ok(audit)
    }
}

/// What `Memory::audit_blobs` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlobAudit {
    /// Atoms whose payload is a blob reference.
    pub referenced: u64,
    /// Of those, blobs not held or not as committed.
    pub bad: u64,
    /// Of the bad ones, blobs not held at all, while a pack is known lost or cut short.
    pub missing: u64,
    /// Blobs not held while no pack is known lost: kept elsewhere.
    pub elsewhere: u64,
    /// Sealed frames and tiles retention forgot (their segments removed on purpose).
    pub forgotten: u64,
    /// What is wrong with the packs (`BlobStore::damage`).
    pub damage: Vec<String>,
    /// The first few problems, by position.
    pub first: Vec<(u64, String)>,
}

/// Register `name` and every agent above it that does not exist yet, controlled by `writer`.
fn register_agent_path(
    ledger: &mut dyn LedgerLink,
    writer: &SigningKey,
    name: &str,
) -> Result<(), OpenError> {
    let mut prefix = String::new();
    for segment in name.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(segment);
        if ledger.agent(&prefix)?.is_none() {
            let me = account_of(writer);
            let tx = Tx::RegisterAgent { name: prefix.clone(), controller: me };
            ledger.submit(crate::ledger::SignedTx::sign(writer, ledger.nonce(&me)?, tx))?;
        }
    }
    Ok(())
}

/// Fold a log into an index, from the index's size up to `size`: while one batch of records
/// is folded, the next is read and decoded on the other core; sealing is left to the caller,
/// once. A cold boot is `fold_log(log, &mut Index::new(), log.size())`.
pub fn fold_log(log: &Log, index: &mut Index, size: u64) -> Result<(), FoldError> {
    use rayon::prelude::*;
    let todo = size.saturating_sub(index.size()) as usize;
    let mut records = log.scan_bytes(index.size()).take(todo);
    // Reading and decoding the next batch overlaps placing this one, so even a commit's few
    // thousand atoms go in four batches or more.
    let per_batch = (todo / 4).clamp(128, FOLD_BATCH);
    let mut next_batch = || -> Result<Vec<Atom>, FoldError> {
        let batch: Vec<(u64, Vec<u8>)> = records.by_ref().take(per_batch).collect::<Result<_, _>>()?;
        // Decoded into place (an indexed collect), then checked: atoms are moved once.
        let mut decoded = Vec::with_capacity(batch.len());
        batch
            .into_par_iter()
            .map(|(position, bytes)| {
                Atom::decode_owned(bytes).map_err(|e| LogError::Corrupt { position, reason: e.to_string() })
            })
            .collect_into_vec(&mut decoded);
        Ok(decoded.into_iter().collect::<Result<Vec<Atom>, LogError>>()?)
    };
    let mut batch = next_batch()?;
    while !batch.is_empty() {
        let (next, folded) = rayon::join(&mut next_batch, || index.fold_all(&batch));
        folded?;
        batch = next?;
    }
    Ok(())
}

/// The answer's atoms, refused as soon as their bytes alone pass what a proof file may hold:
/// what is read stays bounded however many atoms the answer names.
fn answer_atoms(log: &Log, positions: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, ProveError> {
    let mut total = 0usize;
    let mut out = Vec::with_capacity(positions.len().min(1 << 16));
    for &p in positions {
        let bytes = log.read_bytes(p)?;
        total += bytes.len() + 12;
        if total > sion_verify::proof::MAX_FILE_BYTES {
            return Err(ProveError::TooLarge(format!(
                "its {} atoms pass 64 MiB before the {}th",
                positions.len(),
                out.len() + 1
            )));
        }
        out.push((p, bytes));
    }
    Ok(out)
}

/// An index walk refused as too large, said as the memory says it.
fn walk_too_large(e: IndexError) -> ProveError {
    match e {
        IndexError::TooLarge(steps) => {
            ProveError::TooLarge(format!("the walk that proves it complete passes {steps} steps"))
        }
        other => other.into(),
    }
}

/// A list walk refused as too large, said as the memory says it, with what can be asked
/// instead (a list proof has no pages: it is the whole list or nothing).
fn list_too_large(e: IndexError) -> ProveError {
    match e {
        IndexError::ListTooLarge { list, entries, max } => ProveError::TooLarge(format!(
            "the list of {list} holds {entries} entries, and a list proof walks at most {max} \
             steps and entries (every entry carries its atom). Ask for a box and interval instead \
             (a range proof) and keep the atoms of that list in it, or ask as of an earlier head, \
             when the list was shorter"
        )),
        other => other.into(),
    }
}

/// The first committed size whose head carries a root of this version of docs/INDEX.md, and,
/// for a memory made under an earlier one, the memory.json that says so: its heads so far
/// carry earlier roots (answers as of them are refused, [`ProveError::OldIndex`]), and from
/// its next commit on, this version's.
fn index_from(config: &Config, committed: u64) -> Result<(u64, Option<Config>), OpenError> {
    match config.index {
        Some(v) if v == INDEX_VERSION => return Ok((config.index_from.unwrap_or(0), None)),
        Some(v) if v > INDEX_VERSION => return Err(OpenError::NewerIndex { found: v, known: INDEX_VERSION }),
        _ => {}
    }
    let from = if committed == 0 { 0 } else { committed + 1 };
    Ok((from, Some(Config { index: Some(INDEX_VERSION), index_from: Some(from), ..config.clone() })))
}

/// The index as of a committed version, checked against the root the head commits to.
pub fn snapshot_of(
    reader: &IndexReader,
    version: &MemoryLog,
    index_from: u64,
) -> Result<crate::index::Snapshot, ProveError> {
    let size = version.head.size;
    // A new memory's head commits no index (docs/LEDGER.md: its index root is zeros).
    if size == 0 {
        return Err(ProveError::NothingCommitted);
    }
    let snapshot = match reader.at(size) {
        Ok(s) => s,
        Err(IndexError::NoVersion(_)) if size < index_from => return Err(ProveError::OldIndex { size }),
        Err(IndexError::NoVersion(_)) => return Err(ProveError::IndexMismatch { size }),
        Err(e) => return Err(e.into()),
    };
    if snapshot.root() != version.head.index {
        // A head from before the memory moved to this index version carries an older root;
        // one committed since at the same size (a commit with no new atoms) carries this one's.
        if size < index_from {
            return Err(ProveError::OldIndex { size });
        }
        return Err(ProveError::IndexMismatch { size });
    }
    Ok(snapshot)
}

/// A committed head of a memory and what proves answers as of it, holding no lock on the memory
/// ([`Memory::snapshot`], [`Readers::snapshot`]).
pub struct Snapshot {
    reader: IndexReader,
    log: Log,
    log_id: LogId,
    version: MemoryLog,
    attestation: Attestation,
    index_from: u64,
}

impl Snapshot {
    /// The committed version this snapshot answers as of.
    pub fn head(&self) -> &MemoryLog {
        &self.version
    }

    /// Everything in a frame, box and interval, with the proof that nothing is missing.
    pub fn range(&self, query: &Query) -> Result<ProofFile, ProveError> {
        prove_range(
            &self.reader,
            &self.log,
            self.log_id,
            &self.version,
            self.attestation.clone(),
            query,
            self.index_from,
        )
    }

    /// The atom last seen in a frame, box and interval: of the atoms that answer the range
    /// query, the one whose valid time ends last (the later position on a tie), or none, with
    /// the proof (docs/PROOFS.md, kind 7).
    pub fn latest(&self, query: &Query) -> Result<ProofFile, ProveError> {
        let snapshot = snapshot_of(&self.reader, &self.version, self.index_from)?;
        let (found, answer) = snapshot.latest(query).map_err(walk_too_large)?;
        let atom = match found {
            Some(p) => answer_atoms(&self.log, &[p])?.pop(),
            None => None,
        };
        let latest = LatestProof { query: query.clone(), atom, answer };
        Ok(ProofFile {
            proof: Proof::Latest { log: self.log_id, head: self.version.head, latest: Box::new(latest) },
            attestation: Some(self.attestation.clone()),
        })
    }

    /// The k atoms of a frame valid during an interval nearest to a point, nearest first (ties
    /// by position), with the proof (docs/PROOFS.md, kind 8).
    pub fn nearest(&self, query: &NearQuery) -> Result<ProofFile, ProveError> {
        let snapshot = snapshot_of(&self.reader, &self.version, self.index_from)?;
        let (found, answer) = snapshot.nearest(query).map_err(walk_too_large)?;
        let nearest = NearestProof { query: query.clone(), atoms: answer_atoms(&self.log, &found)?, answer };
        Ok(ProofFile {
            proof: Proof::Nearest { log: self.log_id, head: self.version.head, nearest: Box::new(nearest) },
            attestation: Some(self.attestation.clone()),
        })
    }

    /// How many atoms answer a range question, for how long in all, first and last when, with
    /// the proof (docs/PROOFS.md, kind 9).
    pub fn count(&self, query: &Query) -> Result<ProofFile, ProveError> {
        let snapshot = snapshot_of(&self.reader, &self.version, self.index_from)?;
        let (counted, answer) = snapshot.count(query).map_err(walk_too_large)?;
        let count = CountProof { query: query.clone(), counted, answer };
        Ok(ProofFile {
            proof: Proof::Count { log: self.log_id, head: self.version.head, count: Box::new(count) },
            attestation: Some(self.attestation.clone()),
        })
    }

    /// What this head holds in each frame: the union of its atoms' boxes and valid times (what
    /// a warning about a question that cannot match names).
    pub fn held(&self) -> Result<Vec<FrameExtent>, ProveError> {
        Ok(snapshot_of(&self.reader, &self.version, self.index_from)?.held())
    }

    /// Why `query` cannot match anything this head holds: an unknown frame, or an interval or a
    /// box outside the frame's extent (empty when it can match). Shown beside the answer, whose
    /// proof is given all the same.
    pub fn mismatches(&self, query: &Query) -> Result<Vec<Mismatch>, ProveError> {
        Ok(sion_verify::index::geom::mismatches(query, &self.held()?))
    }

    /// Every atom about a subject (or linking to an atom), with the proof that the list is
    /// complete.
    pub fn list(&self, key: ListKey) -> Result<ProofFile, ProveError> {
        prove_list(
            &self.reader,
            &self.log,
            self.log_id,
            &self.version,
            self.attestation.clone(),
            key,
            self.index_from,
        )
    }

    /// [`Snapshot::list`], its list walk refused past `max_steps` (records read and positions: a test's small bound).
    pub fn list_within(&self, key: ListKey, max_steps: usize) -> Result<ProofFile, ProveError> {
        prove_list_within(
            &self.reader,
            &self.log,
            self.log_id,
            &self.version,
            self.attestation.clone(),
            key,
            self.index_from,
            max_steps,
        )
    }
}

/// A range proof as of a committed version, from the index's readers' side and the log: no
/// lock on the memory is needed (the caller got the version and attestation from it).
pub(crate) fn prove_range(
    reader: &IndexReader,
    log: &Log,
    log_id: LogId,
    version: &MemoryLog,
    attestation: Attestation,
    query: &Query,
    index_from: u64,
) -> Result<ProofFile, ProveError> {
    let answer = snapshot_of(reader, version, index_from)?.range(query).map_err(walk_too_large)?;
    let range = RangeProof { query: query.clone(), atoms: answer_atoms(log, &answer.positions)?, answer };
    Ok(ProofFile {
        proof: Proof::Range { log: log_id, head: version.head, range: Box::new(range) },
        attestation: Some(attestation),
    })
}

/// A subject or link proof as of a committed version (as [`prove_range`]). A list longer than
/// a proof file can carry is refused ([`ProveError::TooLarge`]) before its positions are
/// read, and its atoms are read only while they fit the 64 MiB a verifier reads.
pub(crate) fn prove_list(
    reader: &IndexReader,
    log: &Log,
    log_id: LogId,
    version: &MemoryLog,
    attestation: Attestation,
    key: ListKey,
    index_from: u64,
) -> Result<ProofFile, ProveError> {
    prove_list_within(
        reader,
        log,
        log_id,
        version,
        attestation,
        key,
        index_from,
        crate::index::MAX_LIST_STEPS,
    )
}

/// [`prove_list`], its list walk refused past `max_steps` (records read and positions; a
/// test's small bound, or [`crate::index::MAX_LIST_STEPS`]).
#[allow(clippy::too_many_arguments)] // prove_list's, and the bound
pub(crate) fn prove_list_within(
    reader: &IndexReader,
    log: &Log,
    log_id: LogId,
    version: &MemoryLog,
    attestation: Attestation,
    key: ListKey,
    index_from: u64,
    max_steps: usize,
) -> Result<ProofFile, ProveError> {
    let snapshot = snapshot_of(reader, version, index_from)?;
    let answer = match &key {
        ListKey::Subject(s) => snapshot.subject_within(s, max_steps),
        ListKey::LinksTo(id) => snapshot.links_within(id, max_steps),
    }
    .map_err(list_too_large)?;
    let list = ListProof { key, atoms: answer_atoms(log, &answer.positions)?, answer };
    Ok(ProofFile {
        proof: Proof::List { log: log_id, head: version.head, list: Box::new(list) },
        attestation: Some(attestation),
    })
}

fn write_config(disk: &Disk, dir: &Path, config: &Config) -> Result<(), OpenError> {
    let path = dir.join("memory.json");
    let text = serde_json::to_string_pretty(config).map_err(|e| config_err(&path, e))?;
    disk.replace_file(&path, (text + "\n").as_bytes()).map_err(|e| config_err(&path, e))
}

/// Open the memory's index at its checkpoint and fold the log up to the committed head,
/// sealing at every committed size on the way, so every head has its version; or, if the
/// checkpoint is missing, stale, torn or damaged, rebuild it from the whole log the same way.
/// A memory's configuration, `memory.json`.
fn read_config(dir: &Path) -> Result<Config, OpenError> {
    let config_path = dir.join("memory.json");
    let text = match fs::read_to_string(&config_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(OpenError::Missing(dir.to_owned()));
        }
        Err(e) => return Err(config_err(&config_path, e)),
    };
    serde_json::from_str(&text).map_err(|e| config_err(&config_path, e))
}

/// How many times this memory's index was rebuilt (its `index-rebuilds` file; 0 if none).
fn rebuilds_so_far(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("index-rebuilds")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

/// An index opened at its checkpoint, checked and folded on: the checkpoint within the log,
/// every committed head it covers a version with that head's root; then the log's tail up to
/// the committed head. Gives how many atoms were folded. An error means: rebuild it.
fn resume_index(
    mut index: Index,
    log: &Log,
    on_ledger: &MemoryLog,
    ledger: &dyn LedgerLink,
    index_from: u64,
) -> Result<(Index, u64), OpenError> {
    let log_id = on_ledger.id;
    let version = index.size();
    if version > log.size() {
        return Err(IndexError::Damaged(format!(
            "the checkpoint covers {version} atoms, the log holds {}",
            log.size()
        ))
        .into());
    }
    // At the committed head itself (the usual checkpoint) the ledger need not be asked: a
    // memory opened while its remote ledger is unreachable resumes from it.
    let at_most = if version == on_ledger.head.size && on_ledger.commits > 0 {
        Some(on_ledger.clone())
    } else {
        ledger.last_commit_at_most(log_id, version)?
    };
    if let Some(v) = at_most.filter(|v| v.head.size >= index_from) {
        snapshot_of(&index.reader(), &v, index_from).map_err(|_| {
            IndexError::Damaged(format!("the checkpoint disagrees with the head of {} atoms", v.head.size))
        })?;
    }
    let folded = catch_up(log, &mut index, on_ledger, ledger, index_from)?;
    Ok((index, folded))
}

fn open_index(
    config: &IndexConfig,
    dir: &Path,
    log: &Log,
    on_ledger: &MemoryLog,
    ledger: &dyn LedgerLink,
    index_from: u64,
) -> Result<(Index, IndexBoot), OpenError> {
    let path = dir.join("index");
    let disk = &config.disk;
    let attempt = || -> Result<(Index, u64), OpenError> {
        let (index, _) = Index::open(&path, config.clone())?;
        resume_index(index, log, on_ledger, ledger, index_from)
    };
    match attempt() {
        Ok((index, folded)) => {
            let version = index.size() - folded;
            Ok((index, IndexBoot::Checkpoint { version, folded }))
        }
        Err(first) => {
            let why = match &first {
                OpenError::Index(IndexError::Missing(_)) => "no checkpoint".to_owned(),
                other => other.to_string(),
            };
            if matches!(first, OpenError::Index(IndexError::Locked(_))) {
                return Err(first);
            }
            // The index is a cache of the log: set the damaged one aside and fold the log again.
            let aside = dir.join("index.damaged");
            let _ = fs::remove_dir_all(&aside);
            if path.exists() {
                disk.rename(&path, &aside).map_err(|e| config_err(&path, e))?;
            }
            let mut index = Index::create(&path, config.clone())?;
            let folded = catch_up(log, &mut index, on_ledger, ledger, index_from)?;
            index.checkpoint()?;
            if matches!(first, OpenError::Index(IndexError::Missing(_))) && log.size() == 0 {
                // A new memory: its index is made, not rebuilt.
                return Ok((index, IndexBoot::Checkpoint { version: 0, folded: 0 }));
            }
            let counter = dir.join("index-rebuilds");
            let rebuilds = rebuilds_so_far(dir) + 1;
            disk.write_file(&counter, format!("{rebuilds}\n").as_bytes())
                .map_err(|e| config_err(&counter, e))?;
            Ok((index, IndexBoot::Rebuilt { why, folded, rebuilds }))
        }
    }
}

/// Fold the log into `index` up to the latest committed head, sealing at each committed size
/// past the index's; returns how many atoms were folded.
fn catch_up(
    log: &Log,
    index: &mut Index,
    on_ledger: &MemoryLog,
    ledger: &dyn LedgerLink,
    index_from: u64,
) -> Result<u64, OpenError> {
    let start = index.size();
    let log_id = on_ledger.id;
    if start >= on_ledger.head.size {
        return Ok(0);
    }
    // Only the commits past what the index holds are read (a long life has many), a page at a
    // time, up to the version the memory was opened at.
    let Some(first) = ledger.first_commit_over(log_id, index.size())? else { return Ok(0) };
    let mut k = first.commits;
    while k <= on_ledger.commits {
        let page = ledger.versions(log_id, k, VERSIONS_PAGE.min(on_ledger.commits + 1 - k))?;
        if page.is_empty() {
            return Err(LedgerError::NoVersion { log: log_id, version: k }.into());
        }
        for v in page {
            k += 1;
            if v.head.size >= index_from && v.head.size > index.size() && v.head.size <= on_ledger.head.size {
                fold_log(log, index, v.head.size)?;
                index.seal()?;
            }
        }
    }
    Ok(index.size() - start)
}

/// The last entry of its log this memory knows the ledger to hold, kept beside memory.json for
/// a memory on a remote ledger (`ledger-view`: the log's leaf encoding, then its crc32c,
/// little-endian): a cache, so that the memory opens — and records — while the ledger cannot
/// be reached.
const VIEW: &str = "ledger-view";

fn write_view(disk: &Disk, dir: &Path, log: &MemoryLog) -> Result<(), OpenError> {
    let mut bytes = log.encode();
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    disk.replace_file(&dir.join(VIEW), &bytes).map_err(|e| config_err(&dir.join(VIEW), e))
}

fn read_view(dir: &Path, id: LogId) -> Option<MemoryLog> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    fs::File::open(dir.join(VIEW)).ok()?.take(4096).read_to_end(&mut bytes).ok()?;
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    MemoryLog::decode(body).ok().filter(|l| l.id == id)
}

/// The log's entry on its ledger; for a remote ledger that cannot be reached, the last one this
/// memory saw (and `true`: its next commit asks the ledger first).
fn log_on_ledger(
    dir: &Path,
    config: &Config,
    ledger: &dyn LedgerLink,
    id: LogId,
) -> Result<(MemoryLog, bool), OpenError> {
    match ledger.log(id) {
        Ok(Some(log)) => Ok((log, false)),
        Ok(None) => Err(LedgerError::UnknownLog(id).into()),
        Err(e @ LedgerError::Remote { .. }) if config.ledger_url.is_some() => match read_view(dir, id) {
            Some(view) => {
                tracing::warn!(
                    "{e}; going on from the last head this memory committed ({} atoms, Pulse {}): atoms are \
                     recorded, and committed when the ledger answers",
                    view.head.size,
                    view.committed_at
                );
                Ok((view, true))
            }
            None => Err(e.into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// Versions asked of a ledger at a time while catching up.
const VERSIONS_PAGE: u64 = crate::ledger::link::PAGE;

/// The memory's ledger: a remote one through `connect` (its key checked against the one
/// pinned in memory.json), or the embedded one opened by `embedded`.
fn link_of<L: LedgerLink + 'static>(
    dir: &Path,
    config: &Config,
    connect: Connect<'_>,
    embedded: impl FnOnce(&Path) -> Result<L, LedgerError>,
) -> Result<Box<dyn LedgerLink>, OpenError> {
    let Some(url) = &config.ledger_url else { return Ok(Box::new(embedded(&dir.join(&config.ledger))?)) };
    let json = dir.join("memory.json");
    let pinned =
        config.ledger_key.as_deref().ok_or_else(|| config_err(&json, "ledger_url without ledger_key"))?;
    let mut key = [0u8; 32];
    hex::decode_to_slice(pinned, &mut key)
        .map_err(|_| config_err(&json, "ledger_key is not 64 hex digits"))?;
    let key = ed25519_dalek::VerifyingKey::from_bytes(&key)
        .map_err(|_| config_err(&json, "ledger_key is not an ed25519 key"))?;
    let link = connect(url, &key)?;
    let found = hex::encode(link.public_key().to_bytes());
    match &config.ledger_key {
        Some(pinned) if *pinned == found => Ok(link),
        Some(pinned) => Err(LedgerError::Remote {
            ledger: url.clone(),
            message: format!(
                "it signs with key {found}, but this memory's log was opened on a ledger with key {pinned} \
                 (memory.json): refused — a ledger with another key is another ledger"
            ),
        }
        .into()),
        None => Err(config_err(&dir.join("memory.json"), "ledger_url without ledger_key")),
    }
}
