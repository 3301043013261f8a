//! The fleet ledger, as the programs of this package use it: a memory whose memory.json names
//! a fleet ledger service is opened through [`connect`]; a `--ledger` argument or the node's
//! `ledger` parameter that is a URL opens a new log on one (docs/FLEET-LEDGER.md).

use std::path::Path;

use ed25519_dalek::VerifyingKey;
use sion_store::index::IndexConfig;
use sion_store::ledger::LedgerError;
use sion_store::ledger::link::LedgerLink;
use sion_store::memory::{Memory, MemoryError};

pub use sion_fleet::client::RemoteLedger;
pub use sion_fleet::service::DEFAULT_LISTEN;

/// Whether a `--ledger` value or the `ledger` parameter names a service (`http://…`,
/// `https://…`) rather than a directory.
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// The [`sion_store::ledger::link::Connect`] of this package's programs: a link that connects
/// when first used, with the key the memory pinned, so that a memory opens (and records)
/// while its ledger is unreachable.
pub fn connect(url: &str, key: &VerifyingKey) -> Result<Box<dyn LedgerLink>, LedgerError> {
    Ok(Box::new(RemoteLedger::lazy(url, *key)?))
}

/// Open the memory in `dir`, on whichever ledger its memory.json names.
pub fn open(index: &IndexConfig, dir: &Path) -> Result<Memory, MemoryError> {
    Memory::open_linked(index, dir, &connect)
}

/// Open it to read only, likewise.
pub fn open_read_only(dir: &Path) -> Result<Memory, MemoryError> {
    Memory::open_read_only_linked(dir, &connect)
}

/// Create a memory in `dir` whose log is opened on `ledger`: a fleet ledger service's URL, an
/// embedded ledger's directory, or (None) a new embedded ledger inside it; `sealed`, with a
/// space of its own (docs/SEAL.md).
pub fn create(
    index: &IndexConfig,
    dir: &Path,
    agent: Option<&str>,
    ledger: Option<&str>,
    sealed: bool,
) -> Result<Memory, MemoryError> {
    match ledger {
        Some(url) if is_url(url) => {
            let link = Box::new(RemoteLedger::connect(url)?);
            if sealed {
                Memory::create_sealed_linked(index, dir, agent, link, url)
            } else {
                Memory::create_linked(index, dir, agent, link, url)
            }
        }
        other if sealed => Memory::create_sealed(index, dir, agent, other.map(Path::new)),
        other => Memory::create_with(index, dir, agent, other.map(Path::new)),
    }
}
