//! What a memory needs of its ledger, whichever ledger it is: the embedded one in its own
//! directory ([`Ledger`]) or a fleet ledger service reached over the network (the `sion_fleet`
//! crate's client). A memory holds a `Box<dyn LedgerLink>` and never knows which.
//!
//! Every call may fail: a remote ledger can be unreachable, and the memory says so rather than
//! guessing. Nothing here lets the link decide what a *reader* accepts: headers and proofs it
//! returns are checked against the ledger key by whoever uses them.

use ed25519_dalek::VerifyingKey;

use super::{
    Account, Agent, Ledger, LedgerBoot, LedgerError, LogId, MemoryLog, SignedHeader, SignedTx, StateProof,
    TxTimeProof,
};

/// What the ledger says of a transaction it took: its Pulse's signed header, and the log it
/// opened or committed (none for an agent's transaction). Only the header is signed: a client
/// checks the log it is told of against the state (its writer, and for an opening, that it was
/// opened at that Pulse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub pulse: SignedHeader,
    pub log: Option<LogId>,
}

/// A memory's ledger: the calls `sion_store::memory::Memory` makes of it.
pub trait LedgerLink: Send + Sync {
    /// Where the ledger is, for people: a directory or a URL.
    fn describe(&self) -> String;
    /// The key every header of this ledger is signed with.
    fn public_key(&self) -> VerifyingKey;
    /// How an embedded ledger came up when it was opened (None for a remote one).
    fn boot(&self) -> Option<&LedgerBoot> {
        None
    }
    /// The latest Pulse's signed header.
    fn latest(&self) -> Result<SignedHeader, LedgerError>;
    /// Pulse `pulse`'s signed header.
    fn header(&self, pulse: u64) -> Result<SignedHeader, LedgerError>;
    /// The account's next nonce.
    fn nonce(&self, account: &Account) -> Result<u64, LedgerError>;
    /// Log `id` as the current state holds it.
    fn log(&self, id: LogId) -> Result<Option<MemoryLog>, LedgerError>;
    /// How many logs the ledger holds (a log opened now gets this number minus one).
    fn log_count(&self) -> Result<u64, LedgerError>;
    /// The agent of that name, if any.
    fn agent(&self, name: &str) -> Result<Option<Agent>, LedgerError>;
    /// Submit a signed transaction: its Pulse's header once it is durable, or the refusal.
    fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, LedgerError>;
    /// Submit a signed transaction, and learn which log it opened or committed: a Pulse opens
    /// at most one log, its last (docs/LEDGER.md, "Pulses"), so an opening's log is the header's
    /// `logs − 1`, whatever else the Pulse took.
    fn submit_receipt(&mut self, tx: SignedTx) -> Result<Receipt, LedgerError> {
        let log = match &tx.tx {
            super::Tx::CommitMemory { log, .. } => Some(*log),
            super::Tx::OpenMemory { .. } => None,
            _ => return self.submit(tx).map(|pulse| Receipt { pulse, log: None }),
        };
        let pulse = self.submit(tx)?;
        let log = log.or(Some(LogId(pulse.header.logs.saturating_sub(1))));
        Ok(Receipt { pulse, log })
    }
    /// That log `id` stood as it did at Pulse `pulse`.
    fn state_proof(&self, id: LogId, pulse: u64) -> Result<StateProof, LedgerError>;
    /// When `position` of log `id` was recorded.
    fn tx_time_proof(&self, id: LogId, position: u64) -> Result<TxTimeProof, LedgerError>;
    /// The latest version (one commit or more) of log `id` with at most `size` atoms.
    fn last_commit_at_most(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError>;
    /// The first version of log `id` with more than `size` atoms.
    fn first_commit_over(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError>;
    /// Up to `limit` versions of log `id` from version `from` on, oldest first (fewer at the end).
    fn versions(&self, id: LogId, from: u64, limit: u64) -> Result<Vec<MemoryLog>, LedgerError>;

    /// Witnesses' cosignatures of Pulse `pulse`'s header that this ledger holds (each checked
    /// by whoever relies on it). An embedded ledger has no witnesses.
    fn cosignatures(&self, _pulse: u64) -> Result<Vec<sion_verify::ledger::Cosignature>, LedgerError> {
        Ok(Vec::new())
    }

    /// The first checkpoint of this ledger's history (docs/FLEET-LEDGER.md, "Checkpoints")
    /// kept with witnesses' cosignatures that covers Pulse `pulse`, with the header's inclusion
    /// proof in it, unchecked; none where the ledger keeps no history (an embedded one) or no
    /// cosigned checkpoint covers the Pulse yet.
    fn covering(&self, _pulse: u64) -> Result<Option<sion_verify::proof::Covering>, LedgerError> {
        Ok(None)
    }

    /// Pulse `pulse`'s signed header (the latest's for `None`), the proof against its cells
    /// root of which logs cell `key` listed then, and those logs (ascending; empty for none);
    /// `None` where the ledger keeps no cells (an embedded or fleet ledger made before them).
    fn cell_proof(&self, _key: u128, _pulse: Option<u64>) -> Result<Option<CellAnswer>, LedgerError> {
        Ok(None)
    }

    /// Pulse `pulse`'s signed header (the latest's for `None`), the proof against its cells
    /// root of every cell `asked` asks (docs/LEDGER.md, "A question's cells"), and the logs
    /// each listed then; `None` where the ledger keeps no cells.
    fn cells_asked(
        &self,
        _asked: &sion_verify::cells::CellQuery,
        _pulse: Option<u64>,
    ) -> Result<Option<CellsAnswer>, LedgerError> {
        Ok(None)
    }

    /// Every version of log `id` from version `from` on, oldest first, asked for a page
    /// ([`PAGE`] versions) at a time.
    fn versions_from(
        &self,
        id: LogId,
        from: u64,
    ) -> Box<dyn Iterator<Item = Result<MemoryLog, LedgerError>> + '_> {
        let mut next = from;
        let mut page = std::collections::VecDeque::new();
        let mut done = false;
        Box::new(std::iter::from_fn(move || {
            if page.is_empty() && !done {
                match self.versions(id, next, PAGE) {
                    Ok(got) => {
                        done = (got.len() as u64) < PAGE;
                        next += got.len() as u64;
                        page.extend(got);
                    }
                    Err(e) => {
                        done = true;
                        return Some(Err(e));
                    }
                }
            }
            page.pop_front().map(Ok)
        }))
    }
}

/// What a ledger answers of a cell: its latest signed header, the cell's proof against that
/// header's cells root, and the logs the cell lists.
pub type CellAnswer = (SignedHeader, sion_verify::cells::CellProof, Vec<u64>);

/// What a ledger answers of a question's cells: its latest signed header, the proof of every
/// cell the question asks, and the logs each of them lists.
pub type CellsAnswer =
    (SignedHeader, sion_verify::cells::RangeCellProof, std::collections::BTreeMap<u128, Vec<u64>>);

/// Versions asked of a ledger at a time.
pub const PAGE: u64 = 1024;

impl LedgerLink for Ledger {
    fn cells_asked(
        &self,
        asked: &sion_verify::cells::CellQuery,
        pulse: Option<u64>,
    ) -> Result<Option<CellsAnswer>, LedgerError> {
        match pulse {
            Some(p) if p != self.latest().header.number => self.cells_asked_at(asked, p),
            _ => Ok(self.cells().map(|c| {
                let (proof, lists) = c.prove_asked(asked);
                (*self.latest(), proof, lists)
            })),
        }
    }
    fn cell_proof(&self, key: u128, pulse: Option<u64>) -> Result<Option<CellAnswer>, LedgerError> {
        match pulse {
            Some(p) if p != self.latest().header.number => self.cell_proof_at(key, p),
            _ => Ok(Ledger::cell_proof(self, key).map(|(header, proof)| {
                let logs = self.cells().map(|c| c.logs_at(key).to_vec()).unwrap_or_default();
                (header, proof, logs)
            })),
        }
    }
    fn describe(&self) -> String {
        format!("embedded ledger at {}", self.dir().display())
    }
    fn public_key(&self) -> VerifyingKey {
        Ledger::public_key(self)
    }
    fn boot(&self) -> Option<&LedgerBoot> {
        Some(Ledger::boot(self))
    }
    fn latest(&self) -> Result<SignedHeader, LedgerError> {
        Ok(*Ledger::latest(self))
    }
    fn header(&self, pulse: u64) -> Result<SignedHeader, LedgerError> {
        Ledger::header(self, pulse)
    }
    fn nonce(&self, account: &Account) -> Result<u64, LedgerError> {
        Ok(Ledger::nonce(self, account))
    }
    fn log(&self, id: LogId) -> Result<Option<MemoryLog>, LedgerError> {
        Ok(Ledger::log(self, id).cloned())
    }
    fn log_count(&self) -> Result<u64, LedgerError> {
        Ok(self.logs().len() as u64)
    }
    fn agent(&self, name: &str) -> Result<Option<Agent>, LedgerError> {
        Ok(Ledger::agent(self, name).cloned())
    }
    fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, LedgerError> {
        Ledger::submit(self, tx)
    }
    fn state_proof(&self, id: LogId, pulse: u64) -> Result<StateProof, LedgerError> {
        Ledger::state_proof(self, id, pulse)
    }
    fn tx_time_proof(&self, id: LogId, position: u64) -> Result<TxTimeProof, LedgerError> {
        Ledger::tx_time_proof(self, id, position)
    }
    fn last_commit_at_most(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
        Ledger::last_commit_at_most(self, id, size)
    }
    fn first_commit_over(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
        Ledger::first_commit_over(self, id, size)
    }
    fn versions(&self, id: LogId, from: u64, limit: u64) -> Result<Vec<MemoryLog>, LedgerError> {
        self.versions_from(id, from).take(limit.min(usize::MAX as u64) as usize).collect()
    }
}

/// How a memory reaches a remote ledger named in its memory.json: given the URL and the key
/// pinned there, a link (the program provides it; this crate has no network client). A link
/// may connect lazily — the memory then opens, and records, while the ledger is unreachable —
/// but its key must be the pinned one, and the memory checks that it is.
pub type Connect<'a> = &'a dyn Fn(&str, &VerifyingKey) -> Result<Box<dyn LedgerLink>, LedgerError>;

/// The [`Connect`] of a program without a client for remote ledgers.
pub fn no_remote(url: &str, _key: &VerifyingKey) -> Result<Box<dyn LedgerLink>, LedgerError> {
    Err(LedgerError::Remote {
        ledger: url.to_owned(),
        message: "this memory's log is on a fleet ledger, and this program has no client for one \
                  (the sion command and the node have)"
            .to_owned(),
    })
}
