//! Repairing a memory whose log or blob packs are damaged (docs/LOG.md, "Repair").

use std::path::Path;

use sion_disk::Disk;

use super::{Config, Memory, MemoryError, read_config, space_of, write_config};
use crate::index::INDEX_VERSION;
use crate::ledger::{Ledger, LogId, SignedTx, Tx, account_of, read_key};
use crate::log::blobs::{BlobStore, PackRepair};
use crate::log::repair::{self, LogRepair};
use crate::log::{Log, LogOptions};

/// A repair of a memory's log that lost atoms its ledger had committed: the log it was, and
/// the log on the same ledger that holds what was kept (memory.json, `repaired`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepairRecord {
    /// The log's number on its ledger before the repair; it stays at its last committed head.
    pub log: u64,
    /// Atoms that log had committed.
    pub committed: u64,
    /// Atoms kept: the new log's first commit.
    pub kept: u64,
}

/// What [`Memory::repair`] did.
#[derive(Debug, Clone)]
pub struct Repaired {
    pub log: LogRepair,
    pub packs: Vec<PackRepair>,
    /// The committed head before the repair.
    pub committed: u64,
    /// Set when committed atoms were lost and the kept ones went on as a new log.
    pub new_log: Option<RepairRecord>,
    /// Atoms (by position) whose blobs are now missing or damaged, the first few, and how
    /// many in all.
    pub lost_blobs: Vec<(u64, String)>,
    pub lost_blob_count: u64,
}

impl Memory {
    /// Repair the memory in `dir` (not open elsewhere): keep everything before the log's first
    /// damaged record, move the damaged record and what follows into `log/torn/`, cut damaged
    /// blob packs the same way (`blobs/torn/`), and derive the log's files and the index
    /// again. Nothing is deleted.
    ///
    /// Damage inside the committed head loses atoms the ledger committed, and the log can then
    /// never extend that head: unless `new_log`, nothing is changed and
    /// [`MemoryError::CommittedDamage`] says so. With `new_log`, the atoms kept become a new log
    /// on the same ledger, committed at once; the old log stays at its head (proofs made from
    /// it still verify) and memory.json records the repair.
    pub fn repair(dir: &Path, new_log: bool) -> Result<Repaired, MemoryError> {
        let disk = Disk::os();
        let mut config = read_config(dir)?;
        if let Some(url) = &config.ledger_url {
            // A new log on a fleet ledger needs the service; not built yet (issue 15).
            return Err(MemoryError::Config {
                path: dir.join("memory.json"),
                problem: format!(
                    "this memory's log is on the fleet ledger at {url}: repairing one is not supported yet"
                ),
            });
        }
        let log_dir = dir.join("log");
        let planned = repair::plan(&log_dir)?;
        let mut ledger = Ledger::open(&dir.join(&config.ledger))?;
        let log_id = LogId(config.log);
        let committed = ledger.log(log_id).ok_or(crate::ledger::LedgerError::UnknownLog(log_id))?.head;
        if planned.damage.is_some() && planned.whole < committed.size && !new_log {
            return Err(MemoryError::CommittedDamage { committed: committed.size, whole: planned.whole });
        }
        let log = repair::repair(&log_dir, &disk)?;
        let packs = BlobStore::repair(&disk, &dir.join("blobs"))?;
        let (opened, _) = Log::open(&log_dir, LogOptions::default())?;
        let kept = opened.size();
        let extends = committed.size <= kept
            && (committed.size == 0 || opened.root_at(committed.size)? == committed.root);
        drop(opened);
        let mut record = None;
        if !extends {
            if committed.size <= kept || !new_log {
                // Not damage a repair explains: the records check out and hash to another root.
                return Err(MemoryError::Diverged {
                    committed: committed.size,
                    root: hex::encode(committed.root),
                });
            }
            let writer = read_key(&dir.join("writer.key"))?;
            let me = account_of(&writer);
            // A sealed memory's new log keeps its space: the same policy.
            let policy = space_of(dir, &config)?.map_or([0; 32], |id| sion_seal::record::policy(&id));
            let tx = Tx::OpenMemory { agent: config.agent.clone(), policy };
            ledger.submit(SignedTx::sign(&writer, ledger.nonce(&me), tx))?;
            let new = ledger.logs().len() as u64 - 1;
            let r = RepairRecord { log: config.log, committed: committed.size, kept };
            config = Config {
                log: new,
                index: Some(INDEX_VERSION),
                index_v2_from: None,
                index_from: None,
                repaired: [config.repaired.clone(), vec![r.clone()]].concat(),
                ..config
            };
            write_config(&disk, dir, &config)?;
            record = Some(r);
        }
        drop(ledger);
        let mut memory = Memory::options(dir).open()?;
        if record.is_some() && kept > 0 {
            memory.commit(false)?;
        }
        let audit = memory.audit_blobs(|_| {})?;
        Ok(Repaired {
            log,
            packs,
            committed: committed.size,
            new_log: record,
            lost_blobs: audit.first,
            lost_blob_count: audit.bad,
        })
    }
}
