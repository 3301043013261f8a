//! The fleet ledger, as the programs of this package use it: a memory whose memory.json names
//! a fleet ledger service is opened through [`connect`]; a `--ledger` argument or the node's
//! `ledger` parameter that is a URL opens a new log on one (docs/FLEET-LEDGER.md).

use std::path::Path;

use ed25519_dalek::VerifyingKey;
use sion_store::ledger::LedgerError;
use sion_store::ledger::link::LedgerLink;
use sion_store::memory::{Memory, OpenError, Options};

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

/// The door to the memory in `dir` as this package's programs open it: a fleet ledger its
/// memory.json names is reached through [`connect`].
pub fn options(dir: &Path) -> Options<'static> {
    Memory::options(dir).connect(&connect)
}

/// The same, for a new memory whose log is opened on `ledger`: a fleet ledger service's URL,
/// an embedded ledger's directory, or (None) a new embedded ledger inside it. A service is
/// asked for its key now, to pin it.
pub fn options_on(dir: &Path, ledger: Option<&str>) -> Result<Options<'static>, OpenError> {
    let options = options(dir);
    Ok(match ledger {
        Some(url) if is_url(url) => options.ledger_link(Box::new(RemoteLedger::connect(url)?), url),
        Some(other) => options.ledger_dir(other),
        None => options,
    })
}
