//! The embedded ledger (docs/LEDGER.md): it keeps memory logs' heads, not their atoms, moves a
//! head only along an RFC 9162 consistency proof, stamps every accepted transaction with a
//! Pulse whose header it signs, and can prove when any position of a log was recorded.
//!
//! Its state lives in a journal of (transaction, signed header) entries, each fsynced before a
//! transaction is acknowledged. Beside it, caches of the journal (files.rs): where each Pulse
//! is, every version of every log, and a checkpoint of the state, so that opening replays only
//! the journal past the checkpoint and memory does not grow with the ledger's life.

#![forbid(unsafe_code)]

mod files;
pub mod link;
pub mod state;
pub mod tree;

use std::fs::{self, File};
use std::io::{self, BufReader, Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::{SigningKey, VerifyingKey};

pub use sion_verify::ledger::{
    Account, Agent, AgentStatus, AttestationError, Cosignature, Head, LogId, MemoryLog, PulseHeader,
    SignedHeader, SignedTx, StateProof, Tx, TxTimeProof, Witnesses, cosign_message, empty_head, parent_of,
    valid_agent_name,
};
use sion_verify::merkle::{self, Blake3, MemoryTree};
use sion_verify::wire::{Put as _, Reader};

use files::PulseEntry;
use sion_disk::frame as wire;
use sion_disk::shadow::DiskFile;
use sion_disk::{Disk, Open};
use state::State;

/// A ledger with cells (header version 2, docs/LEDGER.md, "Cells") whose logs' leaves chain
/// each writer's logs (leaf version 2): every ledger made now.
const FORMAT: &str = "sion-ledger 4\n";
/// A ledger from before cells: chained leaves, version 1 headers, for good.
const FORMAT_3: &str = "sion-ledger 3\n";
/// A ledger from before chains: its leaves stay version 1, which its headers sign.
const FORMAT_2: &str = "sion-ledger 2\n";
/// A ledger from before the acknowledged mark: opened, it is given one (from its journal), and
/// is then a `sion-ledger 2` ledger.
const FORMAT_1: &str = "sion-ledger 1\n";
const ACKED: &str = "acked";
const MAX_ENTRY_BYTES: usize = 1 << 16;

/// Why the ledger refused a transaction or could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    #[error("{context}: {source}")]
    Io { context: String, source: Arc<io::Error> },
    #[error("no ledger at {0}")]
    Missing(PathBuf),
    #[error("a ledger already exists at {0}")]
    Exists(PathBuf),
    #[error("the ledger at {0} is in use by another process")]
    Locked(PathBuf),
    #[error("the ledger at {0} is open for reading only: it takes no transactions here")]
    ReadOnly(PathBuf),
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
    #[error("log {log}'s commit carries cells the ledger does not take: {problem}")]
    Cells { log: LogId, problem: String },
    #[error("a commit of log {log} at the same size ({size}) must keep the root and carry no proof")]
    RootChanged { log: LogId, size: u64 },
    #[error(
        "fork: the new head of log {log} ({to} atoms) does not extend the current one ({from}): {reason}"
    )]
    Fork { log: LogId, from: u64, to: u64, reason: String },
    #[error("no Pulse {0}")]
    NoPulse(u64),
    #[error(
        "the ledger's journal ends at Pulse {journal_ends}, but Pulse {acknowledged} was acknowledged (ledger/acked): acknowledged Pulses are missing, so the journal was cut or restored from an older copy. Nothing was changed. Restore ledger/journal from a copy that reaches Pulse {acknowledged}: going on without it would sign a second, different header with a number already given out (docs/LEDGER.md, \"The acknowledged mark\")"
    )]
    RolledBack { journal_ends: u64, acknowledged: u64 },
    #[error(
        "the journal's Pulse {0} is not the one the ledger acknowledged (ledger/acked names another header): the journal was rewritten. Nothing was changed (docs/LEDGER.md, \"The acknowledged mark\")"
    )]
    NotAcknowledged(u64),
    #[error(
        "ledger/acked {0}: the ledger cannot tell whether acknowledged Pulses were lost, so it does not go on (docs/LEDGER.md, \"The acknowledged mark\", says how to accept a journal known to be whole)"
    )]
    Acked(String),
    #[error("log {log} has no version {version}")]
    NoVersion { log: LogId, version: u64 },
    #[error(
        "the ledger's {file} or the journal entry it points to is damaged ({reason}); opening the ledger again rebuilds the file from the journal, or names the damaged entry"
    )]
    Derived { file: String, reason: String },
    #[error("log {log} has not recorded position {position} in any commit")]
    NotRecorded { log: LogId, position: u64 },
    /// A remote ledger could not be asked (unreachable, no quorum behind it, a reply that does
    /// not parse): nothing is known to have been done.
    #[error("the ledger at {ledger}: {message}")]
    Remote { ledger: String, message: String },
    /// A remote ledger refused a transaction by its rules; `code` is [`LedgerError::code`]'s.
    #[error("the ledger at {ledger} refused it ({code}): {message}")]
    Refused { ledger: String, code: String, message: String },
}

impl LedgerError {
    /// A short stable name for the kind of error, sent by the fleet ledger's service with each
    /// refusal (docs/LEDGER.md, "The fleet ledger's transport").
    pub fn code(&self) -> &str {
        match self {
            Self::Io { .. } => "io",
            Self::Missing(_) => "missing",
            Self::Exists(_) => "exists",
            Self::Locked(_) => "locked",
            Self::ReadOnly(_) => "read_only",
            Self::Journal { .. } => "journal",
            Self::BadSignature | Self::NotWriter { .. } => "forged",
            Self::Nonce { .. } => "nonce",
            Self::UnknownLog(_) => "unknown_log",
            Self::UnknownAgent(_) => "unknown_agent",
            Self::AgentExists(_) => "agent_exists",
            Self::BadAgentName(_) => "bad_agent_name",
            Self::NotController { .. } => "not_controller",
            Self::AgentNotLive { .. } => "contained",
            Self::Sealed(_) => "sealed",
            Self::Stale { .. } => "stale",
            Self::Shrinks { .. } => "shrinks",
            Self::Cells { .. } => "cells",
            Self::RootChanged { .. } => "root_changed",
            Self::Fork { .. } => "fork",
            Self::NoPulse(_) => "no_pulse",
            Self::RolledBack { .. } | Self::NotAcknowledged(_) | Self::Acked(_) => "rolled_back",
            Self::NoVersion { .. } => "no_version",
            Self::Derived { .. } => "derived",
            Self::NotRecorded { .. } => "not_recorded",
            Self::Remote { .. } => "remote",
            Self::Refused { code, .. } => code,
        }
    }
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
pub fn write_key(disk: &Disk, path: &Path, key: &SigningKey) -> Result<(), LedgerError> {
    let f = disk.open(path, Open::NewPrivate).map_err(io_err(format!("creating {}", path.display())))?;
    f.write_all_at(&key.to_bytes(), 0)
        .and_then(|()| f.sync_all())
        .and_then(|()| disk.sync_dir(sion_disk::dir_of(path)))
        .map_err(io_err(format!("writing {}", path.display())))
}

/// The key at `path`, made if there is none whole there — left by a creation cut short, it is
/// fsynced before it is used (it may never have been), so nothing is signed with a key that
/// a power cut can take away.
pub fn read_or_make_key(disk: &Disk, path: &Path) -> Result<SigningKey, LedgerError> {
    match read_key(path) {
        Ok(key) => {
            sion_disk::private::keep_private(
                &[sion_disk::private::Secret {
                    path,
                    holds: "a signing key: whoever reads it can sign as its owner",
                }],
                true,
            );
            disk.open(path, Open::Existing)
                .and_then(|f| f.sync_all())
                .and_then(|()| disk.sync_dir(sion_disk::dir_of(path)))
                .map_err(io_err(format!("syncing {}", path.display())))?;
            Ok(key)
        }
        Err(_) => {
            if path.exists() {
                disk.remove_file(path)
                    .map_err(io_err(format!("removing the unfinished {}", path.display())))?;
            }
            let key = generate_key()?;
            write_key(disk, path, &key)?;
            Ok(key)
        }
    }
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

/// An embedded ledger, open for one process at a time. It holds in memory only the current
/// state (one entry per log, agent and account) and the latest header; every past header and
/// version is read from disk when asked for.
pub struct Ledger {
    disk: Disk,
    dir: PathBuf,
    key: SigningKey,
    state: State,
    latest: SignedHeader,
    /// The next Pulse's number.
    pulses: u64,
    /// Bytes of the journal its Pulses cover.
    journal_len: u64,
    journal: sion_disk::File,
    /// A write or fsync of the journal failed: it may hold a partial frame past
    /// `journal_len`, cut before the next one is written.
    journal_dirty: bool,
    pulse_file: DiskFile,
    version_files: Vec<DiskFile>,
    /// Pulses since the last checkpoint, and how many there may be.
    since_checkpoint: u64,
    checkpoint_every: u64,
    boot: LedgerBoot,
    /// Held while open (none for a reader).
    _lock: Option<File>,
    /// Opened to be read: the files beside the journal are shadows, nothing is written.
    read_only: bool,
    /// The acknowledged mark's file (none for a reader).
    acked: Option<sion_disk::File>,
    /// Writing a Pulse's mark failed: its slot may name that refused Pulse, so before the next
    /// one is written it is given the last acknowledged Pulse's mark again.
    acked_dirty: bool,
    /// The ledger had no mark (made before it) and was given one from its journal here.
    acked_made: bool,
}

/// How opening found the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerBoot {
    /// Resumed from the checkpoint at Pulse `pulses − 1` and replayed `replayed` Pulses after it.
    Checkpoint { pulses: u64, replayed: u64 },
    /// Replayed the whole journal (`replayed` Pulses): the checkpoint was missing or did not
    /// agree with the journal, for the reason given.
    Replayed { why: String, replayed: u64 },
}

/// Pulses between checkpoints: opening replays at most this many past the last one.
pub const CHECKPOINT_EVERY: u64 = 1024;
/// Left beside the journal when a read finds a derived file damaged: the next open rebuilds.
const DAMAGED: &str = "DAMAGED";

fn lock_dir(dir: &Path) -> Result<File, LedgerError> {
    sion_disk::shadow::lock_dir(dir)
        .map_err(io_err(format!("opening {}", dir.join("LOCK").display())))?
        .ok_or_else(|| LedgerError::Locked(dir.to_owned()))
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// The header of Pulse `number` over `state`.
fn pulse_header(state: &mut State, number: u64, time_ns: i64, prev: Option<&SignedHeader>) -> PulseHeader {
    state.header(number, time_ns, prev.map(|h| h.header.hash()).unwrap_or([0; 32]))
}

/// A Pulse's signed header, and its cell trie and each cell's logs as they stood then.
type CellsThen = (SignedHeader, sion_verify::cells::CellTrie, std::collections::HashMap<u128, Vec<u64>>);

/// A log's version record (docs/LEDGER.md, "Files beside the journal"), as the fleet ledger
/// keeps it too.
pub fn encode_version(log: &MemoryLog) -> [u8; 128] {
    files::encode_version(log)
}

/// A version record read back, its other fields from `base`.
pub fn decode_version(b: &[u8; 128], base: &MemoryLog) -> Result<MemoryLog, String> {
    files::decode_version(b, base)
}

/// One journal entry: the transaction (none for the genesis) and the signed header.
fn parse_entry(frame: &[u8], first: bool) -> Result<(Option<SignedTx>, SignedHeader), String> {
    let mut r = Reader::new(frame);
    let tx = match r.u8("entry kind").map_err(|e| e.to_string())? {
        0 if first => None,
        1 if !first => {
            let tx_bytes = r.bytes32(MAX_ENTRY_BYTES, "transaction").map_err(|e| e.to_string())?;
            Some(SignedTx::decode(tx_bytes).map_err(|e| e.to_string())?)
        }
        k => return Err(format!("unexpected entry kind {k}")),
    };
    let header = SignedHeader::read(&mut r).map_err(|e| e.to_string())?;
    r.finish().map_err(|e| e.to_string())?;
    Ok((tx, header))
}

fn open_rw(disk: &Disk, path: &Path, truncate: bool) -> Result<sion_disk::File, LedgerError> {
    disk.open(path, if truncate { Open::Truncate } else { Open::Create })
        .map_err(io_err(format!("opening {}", path.display())))
}

/// What a checkpoint that agrees with the journal resumes from.
struct Resume {
    state: State,
    latest: SignedHeader,
    pulses: u64,
    journal_len: u64,
}

impl Ledger {
    /// Create a ledger with a new key and its genesis Pulse 0.
    pub fn create(dir: &Path) -> Result<Self, LedgerError> {
        Self::create_on(&Disk::os(), dir)
    }

    /// The same, writing through `disk`.
    pub fn create_on(disk: &Disk, dir: &Path) -> Result<Self, LedgerError> {
        Self::create_format(disk, dir, FORMAT)
    }

    /// A ledger as made before chains (`sion-ledger 2`: version 1 leaves), for tests of what
    /// readers do with one.
    #[doc(hidden)]
    pub fn create_unchained(dir: &Path) -> Result<Self, LedgerError> {
        Self::create_format(&Disk::os(), dir, FORMAT_2)
    }

    /// A ledger as made before cells (`sion-ledger 3`: version 1 headers), for tests of what
    /// readers and writers do with one.
    #[doc(hidden)]
    pub fn create_without_cells(dir: &Path) -> Result<Self, LedgerError> {
        Self::create_format(&Disk::os(), dir, FORMAT_3)
    }

    fn create_format(disk: &Disk, dir: &Path, format: &str) -> Result<Self, LedgerError> {
        if dir.join("FORMAT").exists() {
            return Err(LedgerError::Exists(dir.to_owned()));
        }
        disk.create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let key = read_or_make_key(disk, &dir.join("key"))?;
        let mut empty = State::new_ledger(format == FORMAT);
        let genesis = SignedHeader::sign(&key, pulse_header(&mut empty, 0, now_ns(), None));
        let mut entry = vec![0u8];
        genesis.put(&mut entry);
        let mut frame = Vec::new();
        wire::put_frame(&mut frame, &entry);
        let journal = dir.join("journal");
        disk.write_file(&journal, &frame).map_err(io_err("writing the journal"))?;
        let mark = files::Acked { number: 0, hash: genesis.header.hash() };
        disk.write_file(&dir.join(ACKED), &mark.encode(&key)).map_err(io_err("writing ledger/acked"))?;
        // FORMAT last, each name durable before it: a directory without it is unfinished.
        disk.sync_dir(dir).map_err(io_err("syncing the ledger directory"))?;
        disk.replace_file(&dir.join("FORMAT"), format.as_bytes()).map_err(io_err("writing FORMAT"))?;
        Self::open_on(disk, dir)
    }

    /// Open a ledger: resume from its checkpoint and replay the journal past it, re-checking
    /// every transaction, header and signature there; without a checkpoint that agrees with
    /// the journal, replay the whole journal and write the files beside it afresh.
    pub fn open(dir: &Path) -> Result<Self, LedgerError> {
        Self::open_on(&Disk::os(), dir)
    }

    /// The same, writing through `disk`.
    pub fn open_on(disk: &Disk, dir: &Path) -> Result<Self, LedgerError> {
        Self::open_with(disk, dir, true)
    }

    /// Open a ledger to read it and change nothing: no lock, the journal read as it is (an
    /// entry a writer is appending now, or a crash left unfinished, is not read), and what a
    /// replay past the checkpoint derives kept in memory. It takes no transactions.
    pub fn open_read_only(dir: &Path) -> Result<Self, LedgerError> {
        Self::open_with(&Disk::os(), dir, false)
    }

    fn open_with(disk: &Disk, dir: &Path, writable: bool) -> Result<Self, LedgerError> {
        let (legacy, chained, cells) = match fs::read_to_string(dir.join("FORMAT")) {
            Ok(f) if f == FORMAT => (false, true, true),
            Ok(f) if f == FORMAT_3 => (false, true, false),
            Ok(f) if f == FORMAT_2 => (false, false, false),
            Ok(f) if f == FORMAT_1 => (true, false, false),
            Ok(_) => return Err(LedgerError::Journal { entry: 0, reason: "unknown ledger format".into() }),
            Err(_) => return Err(LedgerError::Missing(dir.to_owned())),
        };
        let lock = if writable { Some(lock_dir(dir)?) } else { None };
        if writable {
            // A creation cut short just before FORMAT's name was durable: make it so.
            disk.make_durable(&dir.join("FORMAT")).map_err(io_err("syncing FORMAT"))?;
        }
        let key_path = dir.join("key");
        sion_disk::private::keep_private(
            &[
                sion_disk::private::Secret { path: dir, holds: "a ledger's signing key" },
                sion_disk::private::Secret {
                    path: &key_path,
                    holds: "the ledger's signing key: whoever reads it can sign this ledger's Pulses",
                },
            ],
            writable,
        );
        let key = read_key(&key_path)?;
        // Read before the journal is replayed: a journal that ends short of it was cut, and is
        // left as it is for the operator, not cut again as a torn write.
        let mark = read_acked(&dir.join(ACKED), &key.verifying_key(), legacy)?;
        let path = dir.join("journal");
        let journal = disk
            .open(&path, if writable { Open::Existing } else { Open::Read })
            .map_err(io_err("opening the journal"))?;
        let file_len = journal.metadata().map_err(io_err("reading the journal"))?.len();
        let versions_dir = dir.join("versions");
        let beside = |path: &Path| -> Result<DiskFile, LedgerError> {
            if writable {
                open_rw(disk, path, false).map(DiskFile::real)
            } else {
                DiskFile::shadow(path).map_err(io_err(format!("opening {}", path.display())))
            }
        };
        if writable {
            disk.create_dir_all(&versions_dir)
                .map_err(io_err(format!("creating {}", versions_dir.display())))?;
        }
        let mut pulse_file = beside(&dir.join("pulses"))?;
        let mut resumed = if dir.join(DAMAGED).exists() {
            Err("a read found a file beside the journal damaged".to_owned())
        } else {
            Self::resume(disk, dir, &key.verifying_key(), &journal, &pulse_file, file_len, cells)
        };
        if !writable && resumed.is_err() && !dir.join(DAMAGED).exists() {
            // A writer may have checkpointed between our opening the pulse index and reading
            // its checkpoint: once more with the pulse index as it is now, else a full replay.
            pulse_file = beside(&dir.join("pulses"))?;
            resumed = Self::resume(disk, dir, &key.verifying_key(), &journal, &pulse_file, file_len, cells);
        }
        let mut empty = State::new_ledger(cells);
        empty.chained = chained;
        let genesis_placeholder = SignedHeader::sign(&key, pulse_header(&mut empty, 0, 0, None));
        let mut ledger = Self {
            disk: disk.clone(),
            dir: dir.to_owned(),
            key,
            state: empty,
            latest: genesis_placeholder,
            pulses: 0,
            journal_len: 0,
            journal,
            journal_dirty: false,
            pulse_file,
            version_files: Vec::new(),
            since_checkpoint: 0,
            checkpoint_every: CHECKPOINT_EVERY,
            boot: LedgerBoot::Checkpoint { pulses: 0, replayed: 0 },
            _lock: lock,
            read_only: !writable,
            acked: None,
            acked_dirty: false,
            acked_made: false,
        };
        let why = match resumed {
            Ok(r) => {
                ledger.state = r.state;
                ledger.latest = r.latest;
                ledger.pulses = r.pulses;
                ledger.journal_len = r.journal_len;
                None
            }
            Err(why) => Some(why),
        };
        ledger.state.chained = chained;
        // What the files beside the journal hold past the resumed Pulse is redone by the replay.
        ledger
            .pulse_file
            .set_len(ledger.pulses * files::PULSE_ENTRY)
            .map_err(io_err("truncating the pulse index"))?;
        for log in &ledger.state.logs {
            let f = beside(&versions_dir.join(log.id.0.to_string()))?;
            f.set_len((log.commits + 1) * files::VERSION_ENTRY)
                .map_err(io_err("truncating a version file"))?;
            ledger.version_files.push(f);
        }
        let (replayed, torn) = ledger.replay(&path, file_len)?;
        let last = ledger.pulses - 1;
        if let Some(m) = mark {
            if m.number > last {
                return Err(LedgerError::RolledBack { journal_ends: last, acknowledged: m.number });
            }
            let at = if m.number == last { ledger.latest } else { ledger.header(m.number)? };
            if at.header.hash() != m.hash {
                return Err(LedgerError::NotAcknowledged(m.number));
            }
        }
        if torn && writable {
            // An entry cut short past every acknowledged Pulse was never acknowledged.
            ledger
                .journal
                .set_len(ledger.journal_len)
                .and_then(|()| ledger.journal.sync_all())
                .map_err(io_err("truncating the journal"))?;
        }
        if writable {
            let f = open_rw(disk, &dir.join(ACKED), false)?;
            if mark.is_none_or(|m| m.number < last) {
                // Pulses in the journal but not yet marked: a crash between the two, or an
                // append whose sync failed (its bytes read back, but may not survive a power
                // cut). Made durable before they are marked, or the mark would name a Pulse a
                // power cut can take away.
                ledger.journal.sync_all().map_err(io_err("syncing the journal"))?;
                write_acked(&f, &ledger.key, &ledger.latest)?;
            }
            ledger.acked = Some(f);
            if legacy {
                disk.sync_dir(dir).map_err(io_err("syncing the ledger directory"))?;
                disk.replace_file(&dir.join("FORMAT"), FORMAT_2.as_bytes())
                    .map_err(io_err("writing FORMAT"))?;
                ledger.acked_made = true;
            }
        }
        ledger.boot = match why {
            None => LedgerBoot::Checkpoint { pulses: ledger.pulses - replayed, replayed },
            Some(why) => LedgerBoot::Replayed { why, replayed },
        };
        if writable {
            if replayed > 0 || matches!(ledger.boot, LedgerBoot::Replayed { .. }) {
                ledger.checkpoint()?;
            }
            if dir.join(DAMAGED).exists() {
                let _ = disk.remove_file(&dir.join(DAMAGED));
            }
        }
        Ok(ledger)
    }

    /// The checkpoint, if it agrees with the journal and the files beside it.
    fn resume(
        disk: &Disk,
        dir: &Path,
        key: &VerifyingKey,
        journal: &File,
        pulse_file: &DiskFile,
        file_len: u64,
        cells: bool,
    ) -> Result<Resume, String> {
        let path = dir.join("checkpoint");
        let len = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(_) => return Err("no checkpoint".into()),
        };
        if len > files::MAX_CHECKPOINT {
            return Err(format!("the checkpoint claims {len} bytes"));
        }
        let bytes = fs::read(&path).map_err(|e| format!("reading the checkpoint: {e}"))?;
        let mut c =
            files::Checkpoint::decode(&bytes).map_err(|e| format!("the checkpoint is damaged: {e}"))?;
        if c.state.cells.is_some() != cells {
            return Err("the checkpoint's state is not of this ledger's format (cells)".into());
        }
        if c.pulses == 0 || c.journal_len > file_len {
            return Err(format!("the checkpoint covers {} bytes of a journal of {file_len}", c.journal_len));
        }
        let last = c.pulses - 1;
        if let Some(cells) = &c.state.cells
            && cells.last_listing() > last
        {
            return Err(format!("the checkpoint's cells were listed past its last Pulse, {last}"));
        }
        let entry = read_pulse_entry(pulse_file, last)?;
        if entry.offset + 8 + u64::from(entry.len) != c.journal_len {
            return Err(format!("the pulse index and the checkpoint disagree on where Pulse {last} ends"));
        }
        let frame = read_frame(journal, entry)?;
        let (_, header) = parse_entry(&frame, last == 0).map_err(|e| format!("Pulse {last}: {e}"))?;
        if header.header.number != last || header.header.hash() != c.last {
            return Err(format!("the journal's Pulse {last} is not the one the checkpoint names"));
        }
        header.verify(key).map_err(|e| e.to_string())?;
        let expected = pulse_header(&mut c.state, last, header.header.time_ns, None);
        let h = &header.header;
        if (expected.logs, expected.state_root, expected.cells) != (h.logs, h.state_root, h.cells) {
            return Err(format!("the checkpoint's state is not the state Pulse {last} signs"));
        }
        for log in &c.state.logs {
            let f = disk
                .open(&dir.join("versions").join(log.id.0.to_string()), Open::Read)
                .map_err(|e| format!("the versions of log {}: {e}", log.id))?;
            if read_version(&DiskFile::real(f), log, log.commits)? != *log {
                return Err(format!("the versions of log {} end elsewhere than its state", log.id));
            }
        }
        Ok(Resume { state: c.state, latest: header, pulses: c.pulses, journal_len: c.journal_len })
    }

    /// Replay the journal from `self.journal_len`, frame by frame, re-checking each; returns
    /// how many Pulses it took in, and whether a frame was cut short at the end (left for the
    /// caller to cut once the acknowledged mark says it was never acknowledged); a whole frame
    /// that fails its checksum is damage, an error.
    fn replay(&mut self, path: &Path, file_len: u64) -> Result<(u64, bool), LedgerError> {
        let mut file = File::open(path).map_err(io_err("reading the journal"))?;
        file.seek(SeekFrom::Start(self.journal_len)).map_err(io_err("reading the journal"))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let operator = self.operator();
        let start = self.pulses;
        // The tree over the resumed state, once: each Pulse replayed then rehashes its change.
        self.state.index();
        let mut torn = false;
        let mut body = Vec::new();
        while self.journal_len < file_len {
            let entry = self.pulses;
            let bad = |reason: String| LedgerError::Journal { entry, reason };
            let left = file_len - self.journal_len;
            if left < 8 {
                torn = true;
                break;
            }
            let mut head = [0u8; 8];
            reader.read_exact(&mut head).map_err(io_err("reading the journal"))?;
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            if 8 + u64::from(len) > left {
                torn = true;
                break;
            }
            if len == 0 || len as usize > MAX_ENTRY_BYTES {
                return Err(bad(format!("a frame claims {len} bytes")));
            }
            body.resize(len as usize, 0);
            reader.read_exact(&mut body).map_err(io_err("reading the journal"))?;
            if wire::frame_checksum(len, &body) != crc {
                return Err(bad("checksum mismatch".into()));
            }
            let (tx, header) = parse_entry(&body, entry == 0).map_err(bad)?;
            header.verify(&self.public_key()).map_err(|e| bad(e.to_string()))?;
            let mut change = None;
            if let Some(tx) = tx {
                let c = self
                    .state
                    .check(&operator, &tx, entry)
                    .map_err(|e| bad(format!("replay refused: {e}")))?;
                self.state.apply(tx.sender, c.clone());
                change = Some(c);
            }
            let prev = (entry > 0).then_some(&self.latest);
            let expected = pulse_header(&mut self.state, entry, header.header.time_ns, prev);
            if header.header != expected {
                return Err(bad("header does not match the replayed state".into()));
            }
            self.took(header, PulseEntry { offset: self.journal_len, len }, change.as_ref())?;
        }
        if self.pulses == 0 {
            return Err(LedgerError::Journal { entry: 0, reason: "no genesis Pulse".into() });
        }
        Ok((self.pulses - start, torn))
    }

    /// Record Pulse `self.pulses` as taken (its frame durable in the journal at `at`): the
    /// pulse index and the version files follow, the state has moved already.
    fn took(
        &mut self,
        header: SignedHeader,
        at: PulseEntry,
        change: Option<&state::Change>,
    ) -> Result<(), LedgerError> {
        let number = self.pulses;
        self.pulse_file
            .write_all_at(&at.encode(), number * files::PULSE_ENTRY)
            .map_err(io_err("writing the pulse index"))?;
        if let Some(state::Change::Log(log, _)) = change {
            let id = log.id.0 as usize;
            if id == self.version_files.len() {
                let path = self.dir.join("versions").join(log.id.0.to_string());
                self.version_files.push(if self.read_only {
                    DiskFile::empty()
                } else {
                    DiskFile::real(open_rw(&self.disk, &path, true)?)
                });
            }
            let f = self.version_files.get(id).ok_or(LedgerError::UnknownLog(log.id))?;
            f.write_all_at(&files::encode_version(log), log.commits * files::VERSION_ENTRY)
                .map_err(io_err("writing a version file"))?;
        }
        self.latest = header;
        self.pulses += 1;
        self.journal_len = at.offset + 8 + u64::from(at.len);
        self.since_checkpoint += 1;
        Ok(())
    }

    /// Make the files beside the journal durable and record the state they reach.
    fn checkpoint(&mut self) -> Result<(), LedgerError> {
        self.pulse_file.sync_data().map_err(io_err("syncing the pulse index"))?;
        for f in &self.version_files {
            f.sync_data().map_err(io_err("syncing a version file"))?;
        }
        let c = files::Checkpoint {
            pulses: self.pulses,
            journal_len: self.journal_len,
            last: self.latest.header.hash(),
            state: self.state.clone(),
        };
        let tmp = self.dir.join("checkpoint.new");
        self.disk.write_file(&tmp, &c.encode()).map_err(io_err("writing the ledger checkpoint"))?;
        self.disk
            .rename(&tmp, &self.dir.join("checkpoint"))
            .map_err(io_err("renaming the ledger checkpoint"))?;
        self.disk.sync_dir(&self.dir).map_err(io_err("syncing the ledger directory"))?;
        self.since_checkpoint = 0;
        Ok(())
    }

    /// Checkpoint every `n` Pulses from now on (at least 1) instead of [`CHECKPOINT_EVERY`].
    pub fn set_checkpoint_every(&mut self, n: u64) {
        self.checkpoint_every = n.max(1);
    }

    /// How opening found the ledger.
    /// Whether this open gave a ledger made before the acknowledged mark its first one, from
    /// its journal as it stood (Pulses lost before cannot be told apart from never written).
    pub fn acked_made(&self) -> bool {
        self.acked_made
    }

    pub fn boot(&self) -> &LedgerBoot {
        &self.boot
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
        self.state.nonce(account)
    }

    pub fn log(&self, id: LogId) -> Option<&MemoryLog> {
        self.state.logs.get(id.0 as usize)
    }

    pub fn logs(&self) -> &[MemoryLog] {
        &self.state.logs
    }

    pub fn agent(&self, name: &str) -> Option<&Agent> {
        self.state.agents.get(name)
    }

    /// The cell map as of the latest Pulse (`None` on a ledger made without cells).
    pub fn cells(&self) -> Option<&state::Cells> {
        self.state.cells.as_ref()
    }

    /// The latest signed header and the proof, against its cell root, of which logs cell `key`
    /// lists (`None` on a ledger made without cells).
    pub fn cell_proof(&self, key: u128) -> Option<(SignedHeader, sion_verify::cells::CellProof)> {
        Some((self.latest, self.state.cells.as_ref()?.prove(key)))
    }

    /// Pulse `pulse`'s signed header, the proof against its cells root of every cell `asked`
    /// asks, and the logs each listed then (`Ok(None)` on a ledger made without cells).
    pub fn cells_asked_at(
        &self,
        asked: &sion_verify::cells::CellQuery,
        pulse: u64,
    ) -> Result<Option<link::CellsAnswer>, LedgerError> {
        let Some((header, trie, logs)) = self.cells_at(pulse)? else { return Ok(None) };
        let (proof, lists) = state::prove_asked(&trie, asked, |k| logs.get(&k).cloned().unwrap_or_default());
        Ok(Some((header, proof, lists)))
    }

    /// Pulse `pulse`'s signed header, the proof against its cells root of which logs cell `key`
    /// listed then, and those logs (`Ok(None)` on a ledger made without cells).
    pub fn cell_proof_at(
        &self,
        key: u128,
        pulse: u64,
    ) -> Result<Option<(SignedHeader, sion_verify::cells::CellProof, Vec<u64>)>, LedgerError> {
        let Some((header, trie, logs)) = self.cells_at(pulse)? else { return Ok(None) };
        Ok(Some((header, trie.prove(key), logs.get(&key).cloned().unwrap_or_default())))
    }

    /// Pulse `pulse`'s signed header and the cell map as it stood then, checked against the
    /// header's cells root: rebuilt from the Pulse that listed each log (a cost of the map's
    /// size). `Ok(None)` on a ledger made without cells.
    fn cells_at(&self, pulse: u64) -> Result<Option<CellsThen>, LedgerError> {
        let Some(cells) = &self.state.cells else { return Ok(None) };
        let header = self.header(pulse)?;
        let (mut trie, logs) = cells.as_of(pulse);
        if Some(trie.root()) != header.header.cells {
            return Err(self
                .damaged("checkpoint", format!("the cells as of Pulse {pulse} are not the ones it signed")));
        }
        Ok(Some((header, trie, logs)))
    }

    pub fn latest(&self) -> &SignedHeader {
        &self.latest
    }

    /// A file beside the journal was found damaged: say so, and leave a mark so that the next
    /// open rebuilds it from the journal.
    fn damaged(&self, file: &str, reason: String) -> LedgerError {
        if !self.read_only {
            let _ = self.disk.write_file(&self.dir.join(DAMAGED), format!("{file}: {reason}\n").as_bytes());
        }
        LedgerError::Derived { file: file.to_owned(), reason }
    }

    /// The signed header of Pulse `pulse`, read from the journal.
    pub fn header(&self, pulse: u64) -> Result<SignedHeader, LedgerError> {
        if pulse == self.latest.header.number {
            return Ok(self.latest);
        }
        if pulse >= self.pulses {
            return Err(LedgerError::NoPulse(pulse));
        }
        let read = || -> Result<SignedHeader, String> {
            let entry = read_pulse_entry(&self.pulse_file, pulse)?;
            if entry.offset + 8 + u64::from(entry.len) > self.journal_len {
                return Err(format!("Pulse {pulse} is said to end past the journal"));
            }
            let frame = read_frame(&self.journal, entry)?;
            let (_, header) = parse_entry(&frame, pulse == 0)?;
            if header.header.number != pulse {
                return Err(format!("the frame for Pulse {pulse} holds Pulse {}", header.header.number));
            }
            Ok(header)
        };
        read().map_err(|e| self.damaged("pulses", e))
    }

    /// How many versions log `id` has had: its opening, then one per commit.
    pub fn version_count(&self, id: LogId) -> u64 {
        self.log(id).map_or(0, |l| l.commits + 1)
    }

    /// Version `k` of log `id` (0: its opening; `k` commits moved its head).
    pub fn version(&self, id: LogId, k: u64) -> Result<MemoryLog, LedgerError> {
        let base = self.log(id).ok_or(LedgerError::UnknownLog(id))?;
        if k > base.commits {
            return Err(LedgerError::NoVersion { log: id, version: k });
        }
        if k == base.commits {
            return Ok(base.clone());
        }
        let f = self.version_files.get(id.0 as usize).ok_or(LedgerError::UnknownLog(id))?;
        read_version(f, base, k).map_err(|e| self.damaged(&format!("versions/{}", id.0), e))
    }

    /// Every version of log `id` from version `from` on, oldest first, read as it goes.
    pub fn versions_from(
        &self,
        id: LogId,
        from: u64,
    ) -> impl Iterator<Item = Result<MemoryLog, LedgerError>> + '_ {
        (from..self.version_count(id)).map(move |k| self.version(id, k))
    }

    /// The first version of log `id` in `lo..hi` for which `past` holds (versions are ordered
    /// by size and by Pulse, so `past` holds from some version on), or `hi`.
    fn search(
        &self,
        id: LogId,
        mut lo: u64,
        mut hi: u64,
        past: impl Fn(&MemoryLog) -> bool,
    ) -> Result<u64, LedgerError> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if past(&self.version(id, mid)?) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// The latest committed version (one commit or more) of log `id` with at most `size`
    /// atoms.
    pub fn last_commit_at_most(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
        let n = self.version_count(id);
        let k = self.search(id, 1, n, |v| v.head.size > size)?;
        if k <= 1 { Ok(None) } else { self.version(id, k - 1).map(Some) }
    }

    /// The first committed version of log `id` with more than `size` atoms.
    pub fn first_commit_over(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
        let n = self.version_count(id);
        let k = self.search(id, 1, n, |v| v.head.size > size)?;
        if k >= n { Ok(None) } else { self.version(id, k).map(Some) }
    }

    /// The version of log `id` in force at Pulse `pulse`, if the log existed then.
    fn version_at_pulse(&self, id: LogId, pulse: u64) -> Result<Option<MemoryLog>, LedgerError> {
        let n = self.version_count(id);
        let k = self.search(id, 0, n, |v| v.committed_at > pulse)?;
        if k == 0 { Ok(None) } else { self.version(id, k - 1).map(Some) }
    }

    /// Check a transaction and, if it passes, make it durable under a new Pulse.
    pub fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, LedgerError> {
        if self.read_only {
            return Err(LedgerError::ReadOnly(self.dir.clone()));
        }
        let number = self.pulses;
        let change = self.state.check(&self.operator(), &tx, number)?;
        // A write that failed before leaves the journal or the mark to be put right first.
        if self.acked_dirty {
            let f = self.acked.as_ref().ok_or_else(|| LedgerError::ReadOnly(self.dir.clone()))?;
            write_acked_slot(f, &self.key, &self.latest, number % 2)?;
            self.acked_dirty = false;
        }
        if self.journal_dirty {
            self.journal
                .set_len(self.journal_len)
                .map_err(io_err("cutting a failed entry off the journal"))?;
            self.journal_dirty = false;
        }
        // Applied in place (the state tree rehashes only what changes) and undone if the Pulse
        // cannot be made durable: the state moves only with an acknowledged Pulse.
        let undo = self.state.apply(tx.sender, change.clone());
        let time_ns = now_ns().max(self.latest.header.time_ns.saturating_add(1));
        let header =
            SignedHeader::sign(&self.key, pulse_header(&mut self.state, number, time_ns, Some(&self.latest)));
        let mut entry = vec![1u8];
        entry.put_bytes32(&tx.encode());
        header.put(&mut entry);
        let mut frame = Vec::new();
        wire::put_frame(&mut frame, &entry);
        // Durable first; only then is the Pulse acknowledged. Written where the last Pulse
        // ends: after a failure the file may hold part of a frame there, which the next one
        // replaces (and which is cut first, so no remnant follows it).
        let written = self
            .journal
            .write_all_at(&frame, self.journal_len)
            .map_err(io_err("appending to the journal"))
            .and_then(|()| self.journal.sync_data().map_err(io_err("syncing the journal")));
        // Then the mark, before the Pulse is acknowledged. If it fails, the Pulse is not
        // acknowledged: the next one is written over it (or, after a crash, opening takes it
        // from the journal: nobody saw another header with its number).
        let written = written.and_then(|()| match &self.acked {
            Some(f) => write_acked(f, &self.key, &header).inspect_err(|_| self.acked_dirty = true),
            None => Err(LedgerError::ReadOnly(self.dir.clone())),
        });
        if let Err(e) = written {
            self.journal_dirty = true;
            self.state.undo(undo);
            return Err(e);
        }
        let at = PulseEntry { offset: self.journal_len, len: entry.len() as u32 };
        if let Err(e) = self.took(header, at, Some(&change)) {
            // The Pulse is durable and acknowledged; the files beside the journal are rebuilt
            // from it at the next open.
            self.latest = header;
            self.pulses = number + 1;
            self.journal_len = at.offset + 8 + u64::from(at.len);
            let _ = self.damaged("pulses", e.to_string());
        } else if self.since_checkpoint >= self.checkpoint_every {
            let _ = self.checkpoint();
        }
        Ok(header)
    }

    /// That log `id` stood as it did at Pulse `pulse`.
    pub fn state_proof(&self, id: LogId, pulse: u64) -> Result<StateProof, LedgerError> {
        let header = self.header(pulse)?;
        // The latest Pulse's state is the one held, its tree kept: O(log n).
        if pulse + 1 == self.pulses {
            let log = self.state.logs.get(id.0 as usize).cloned().ok_or(LedgerError::UnknownLog(id))?;
            let path = self.state.path(id).ok_or(LedgerError::UnknownLog(id))?;
            return Ok(StateProof { header, log, path });
        }
        let mut state: Vec<MemoryLog> = Vec::new();
        for j in 0..self.state.logs.len() as u64 {
            if let Some(v) = self.version_at_pulse(LogId(j), pulse)? {
                state.push(v);
            }
        }
        // A chain's `next` as that Pulse held it: logs opened after it are not there yet.
        let count = state.len() as u64;
        let state: Vec<MemoryLog> = state.into_iter().map(|l| l.as_of_logs(count)).collect();
        let log = state.get(id.0 as usize).cloned().ok_or(LedgerError::UnknownLog(id))?;
        let tree = MemoryTree::<Blake3>::from_leaves(state.iter().map(MemoryLog::encode));
        let path = merkle::inclusion_path::<Blake3, _>(&tree, id.0, tree.size())
            .map_err(|_| LedgerError::UnknownLog(id))?;
        Ok(StateProof { header, log, path })
    }

    /// When `position` of log `id` was recorded: the state before and at the Pulse of the
    /// commit that first covered it.
    pub fn tx_time_proof(&self, id: LogId, position: u64) -> Result<TxTimeProof, LedgerError> {
        if self.log(id).is_none() {
            return Err(LedgerError::UnknownLog(id));
        }
        let recorded =
            self.first_commit_over(id, position)?.ok_or(LedgerError::NotRecorded { log: id, position })?;
        let pulse = recorded.committed_at;
        Ok(TxTimeProof {
            position,
            before: self.state_proof(id, pulse - 1)?,
            at: self.state_proof(id, pulse)?,
        })
    }
}

/// The acknowledged mark: the later of its two slots that is whole and signed. `None` for a
/// ledger made before it (`legacy`) that has none yet.
fn read_acked(path: &Path, key: &VerifyingKey, legacy: bool) -> Result<Option<files::Acked>, LedgerError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(f) => {
            f.take(2 * files::ACKED_SLOT).read_to_end(&mut bytes).map_err(io_err("reading ledger/acked"))?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && legacy => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(LedgerError::Acked("is missing".into())),
        Err(e) => return Err(io_err("reading ledger/acked")(e)),
    }
    let slots: Vec<Result<files::Acked, &str>> =
        bytes.chunks(files::ACKED_SLOT as usize).map(|b| files::Acked::decode(b, key)).collect();
    match slots.iter().filter_map(|s| s.as_ref().ok()).max_by_key(|m| m.number) {
        Some(m) => Ok(Some(*m)),
        None if legacy && bytes.is_empty() => Ok(None),
        None => {
            let why: Vec<String> = slots
                .iter()
                .enumerate()
                .map(|(i, s)| format!("slot {i}: {}", s.err().unwrap_or("whole")))
                .collect();
            Err(LedgerError::Acked(format!(
                "is damaged ({} bytes; {})",
                bytes.len(),
                if why.is_empty() { "empty".to_owned() } else { why.join(", ") }
            )))
        }
    }
}

/// Mark `header`'s Pulse acknowledged: its slot written and made durable.
fn write_acked(f: &sion_disk::File, key: &SigningKey, header: &SignedHeader) -> Result<(), LedgerError> {
    // The slots alternate, so a torn write leaves the Pulse before whole.
    write_acked_slot(f, key, header, header.header.number % 2)
}

/// The same, in slot `slot` (after a failed write, the last acknowledged Pulse's mark goes
/// into the slot the failed one may have reached).
fn write_acked_slot(
    f: &sion_disk::File,
    key: &SigningKey,
    header: &SignedHeader,
    slot: u64,
) -> Result<(), LedgerError> {
    let mark = files::Acked { number: header.header.number, hash: header.header.hash() };
    f.write_all_at(&mark.encode(key), slot * files::ACKED_SLOT)
        .and_then(|()| f.sync_data())
        .map_err(io_err("writing ledger/acked"))
}

fn read_pulse_entry(f: &DiskFile, pulse: u64) -> Result<PulseEntry, String> {
    let mut b = [0u8; files::PULSE_ENTRY as usize];
    f.read_exact_at(&mut b, pulse * files::PULSE_ENTRY)
        .map_err(|e| format!("reading the pulse index at Pulse {pulse}: {e}"))?;
    PulseEntry::decode(&b).ok_or_else(|| format!("the pulse index entry of Pulse {pulse} fails its checksum"))
}

fn read_frame(journal: &File, at: PulseEntry) -> Result<Vec<u8>, String> {
    if at.len as usize > MAX_ENTRY_BYTES || at.len == 0 {
        return Err(format!("a journal frame of {} bytes", at.len));
    }
    let mut b = vec![0u8; 8 + at.len as usize];
    journal
        .read_exact_at(&mut b, at.offset)
        .map_err(|e| format!("reading the journal at byte {}: {e}", at.offset))?;
    let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let crc = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    if len != at.len || wire::frame_checksum(len, &b[8..]) != crc {
        return Err(format!("no whole journal frame at byte {}", at.offset));
    }
    b.drain(..8);
    Ok(b)
}

fn read_version(f: &DiskFile, base: &MemoryLog, k: u64) -> Result<MemoryLog, String> {
    let mut b = [0u8; files::VERSION_ENTRY as usize];
    f.read_exact_at(&mut b, k * files::VERSION_ENTRY)
        .map_err(|e| format!("reading version {k} of log {}: {e}", base.id))?;
    let v = files::decode_version(&b, base).map_err(|e| format!("version {k} of log {}: {e}", base.id))?;
    if v.commits != k {
        return Err(format!("version {k} of log {} says it is version {}", base.id, v.commits));
    }
    Ok(v)
}
