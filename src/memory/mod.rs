//! A writer's memory: its atom log, its writer key and the ledger that keeps its heads,
//! behind one handle. This is what the command line, the demo and the node drive.
//!
//! A memory directory holds `memory.json` (which log on which ledger), `writer.key`, `log/`,
//! and, for the embedded ledger, `ledger/`.

use std::fs;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

use crate::atom::Atom;
use crate::ledger::{
    Head, Ledger, LedgerError, LogId, MemoryLog, SignedHeader, Tx, TxTimeProof, account_of, generate_key,
    read_key, write_key,
};
use crate::log::{Appended, Audit, Log, LogError, LogOptions, Recovery};
use crate::proof::{Attestation, Proof, ProofFile};

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("no memory at {0}: create one with `sion memory open --data {0}`")]
    Missing(PathBuf),
    #[error("a memory already exists at {0}")]
    Exists(PathBuf),
    #[error("{path}: {problem}")]
    Config { path: PathBuf, problem: String },
    #[error(
        "position {position} is not committed yet (the committed head has {committed} atoms): run `sion memory commit`"
    )]
    NotCommitted { position: u64, committed: u64 },
    #[error("size {size} is not within the committed head (1..={committed})")]
    BadSize { size: u64, committed: u64 },
    #[error(
        "the log no longer extends its committed head ({committed} atoms, root {root}): atoms were lost or rewritten; run `sion memory audit`"
    )]
    Diverged { committed: u64, root: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Config {
    /// The log's number on its ledger.
    log: u64,
    agent: Option<String>,
    /// The ledger's directory, relative to the memory directory.
    ledger: PathBuf,
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
    ledger: Ledger,
    writer: SigningKey,
    log_id: LogId,
    agent: Option<String>,
    recovery: Recovery,
}

fn config_err(path: &Path, problem: impl ToString) -> MemoryError {
    MemoryError::Config { path: path.to_owned(), problem: problem.to_string() }
}

impl Memory {
    /// Create a memory in `dir`: a writer key, an empty log, the embedded ledger (unless
    /// `ledger_dir` names an existing one), the agent identity if asked for, and the log opened
    /// on the ledger.
    pub fn create(dir: &Path, agent: Option<&str>, ledger_dir: Option<&Path>) -> Result<Self, MemoryError> {
        let config_path = dir.join("memory.json");
        if config_path.exists() {
            return Err(MemoryError::Exists(dir.to_owned()));
        }
        fs::create_dir_all(dir).map_err(|e| config_err(dir, e))?;
        let key_path = dir.join("writer.key");
        let writer = match read_key(&key_path) {
            Ok(k) => k,
            Err(_) => {
                let k = generate_key()?;
                let _ = fs::remove_file(&key_path);
                write_key(&key_path, &k)?;
                k
            }
        };
        let ledger_rel = ledger_dir.map(Path::to_owned).unwrap_or_else(|| PathBuf::from("ledger"));
        let ledger_path = dir.join(&ledger_rel);
        let mut ledger = match Ledger::open(&ledger_path) {
            Ok(l) => l,
            Err(LedgerError::Missing(_)) => Ledger::create(&ledger_path)?,
            Err(e) => return Err(e.into()),
        };
        let log_dir = dir.join("log");
        let (log, recovery) = match Log::open(&log_dir, LogOptions::default()) {
            Ok(opened) => opened,
            Err(LogError::Missing(_)) => Log::create(&log_dir, LogOptions::default())?,
            Err(e) => return Err(e.into()),
        };
        if let Some(name) = agent {
            register_agent_path(&mut ledger, &writer, name)?;
        }
        let me = account_of(&writer);
        ledger.submit(crate::ledger::SignedTx::sign(
            &writer,
            ledger.nonce(&me),
            Tx::OpenMemory { agent: agent.map(str::to_owned), policy: [0; 32] },
        ))?;
        let log_id = LogId(ledger.logs().len() as u64 - 1);
        let config = Config { log: log_id.0, agent: agent.map(str::to_owned), ledger: ledger_rel };
        let text = serde_json::to_string_pretty(&config).map_err(|e| config_err(&config_path, e))?;
        let tmp = dir.join("memory.json.tmp");
        fs::write(&tmp, text + "\n").map_err(|e| config_err(&tmp, e))?;
        fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| config_err(&tmp, e))?;
        fs::rename(&tmp, &config_path).map_err(|e| config_err(&config_path, e))?;
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| config_err(dir, e))?;
        Ok(Self { dir: dir.to_owned(), log, ledger, writer, log_id, agent: config.agent, recovery })
    }

    /// Open a memory, recovering its log and checking that the log still extends the head the
    /// ledger holds.
    pub fn open(dir: &Path) -> Result<Self, MemoryError> {
        let config_path = dir.join("memory.json");
        let text = match fs::read_to_string(&config_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(MemoryError::Missing(dir.to_owned()));
            }
            Err(e) => return Err(config_err(&config_path, e)),
        };
        let config: Config = serde_json::from_str(&text).map_err(|e| config_err(&config_path, e))?;
        let writer = read_key(&dir.join("writer.key"))?;
        let ledger = Ledger::open(&dir.join(&config.ledger))?;
        let (log, recovery) = Log::open(&dir.join("log"), LogOptions::default())?;
        let log_id = LogId(config.log);
        let committed = ledger.log(log_id).ok_or(LedgerError::UnknownLog(log_id))?.head;
        let extends = committed.size <= log.size()
            && (committed.size == 0 || log.root_at(committed.size)? == committed.root);
        if !extends {
            return Err(MemoryError::Diverged {
                committed: committed.size,
                root: hex::encode(committed.root),
            });
        }
        Ok(Self { dir: dir.to_owned(), log, ledger, writer, log_id, agent: config.agent, recovery })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
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
        // `open` and `create` checked the log exists on the ledger, and logs are never removed.
        &self.ledger.logs()[self.log_id.0 as usize]
    }

    /// Append atoms durably (a no-op for atoms already held).
    pub fn remember(&self, atoms: Vec<Atom>) -> Result<Vec<Appended>, MemoryError> {
        Ok(self.log.append(atoms)?)
    }

    /// Commit the log's durable head to the ledger, with the consistency proof from the
    /// committed head; `seal` closes the log for good.
    pub fn commit(&mut self, seal: bool) -> Result<Committed, MemoryError> {
        let current = self.committed().clone();
        let tree = self.log.head();
        let proof = if current.head.size == 0 || current.head.size == tree.size {
            Vec::new()
        } else {
            self.log.consistency_proof(current.head.size, tree.size)?
        };
        let head = Head { size: tree.size, root: tree.root, index: [0; 32], manifest: [0; 32] };
        let me = account_of(&self.writer);
        let tx = crate::ledger::SignedTx::sign(
            &self.writer,
            self.ledger.nonce(&me),
            Tx::CommitMemory { log: self.log_id, version: current.commits, head, proof, seal },
        );
        let pulse = self.ledger.submit(tx)?;
        Ok(Committed { pulse, head, previous: current.head })
    }

    fn attestation(&self) -> Result<Attestation, MemoryError> {
        let state = self.ledger.state_proof(self.log_id, self.committed().committed_at)?;
        Ok(Attestation { ledger_key: self.ledger.public_key().to_bytes(), state })
    }

    /// Prove that the atom at `position` is in the committed head.
    pub fn prove_inclusion(&self, position: u64) -> Result<ProofFile, MemoryError> {
        let head = self.committed().head;
        if position >= head.size {
            return Err(MemoryError::NotCommitted { position, committed: head.size });
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

    /// Prove that the log's first `old_size` atoms are a prefix of the committed head.
    pub fn prove_consistency(&self, old_size: u64) -> Result<ProofFile, MemoryError> {
        let head = self.committed().head;
        if old_size == 0 || old_size > head.size {
            return Err(MemoryError::BadSize { size: old_size, committed: head.size });
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
    pub fn prove_time(&self, position: u64) -> Result<TxTimeProof, MemoryError> {
        Ok(self.ledger.tx_time_proof(self.log_id, position)?)
    }

    /// Re-read the whole log and compare it with the committed head.
    pub fn audit(&self, progress: impl FnMut(u64)) -> Result<(Audit, MemoryLog), MemoryError> {
        let committed = self.committed().clone();
        Ok((self.log.audit(committed.head.size, progress)?, committed))
    }
}

/// Register `name` and every agent above it that does not exist yet, controlled by `writer`.
fn register_agent_path(ledger: &mut Ledger, writer: &SigningKey, name: &str) -> Result<(), MemoryError> {
    let mut prefix = String::new();
    for segment in name.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(segment);
        if ledger.agent(&prefix).is_none() {
            let me = account_of(writer);
            let tx = Tx::RegisterAgent { name: prefix.clone(), controller: me };
            ledger.submit(crate::ledger::SignedTx::sign(writer, ledger.nonce(&me), tx))?;
        }
    }
    Ok(())
}
