//! What the commands share: the memory argument, opening a memory, keys, boxes and proof files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use ed25519_dalek::VerifyingKey;
use sion_memory::atom::BoxMm;
use sion_memory::memory::Memory;

#[derive(Args)]
pub(crate) struct DataArg {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    pub(crate) data: PathBuf,
}

/// Witnesses as a witnesses file names them: name and public key.
pub(crate) type NamedWitnesses = Vec<(String, [u8; 32])>;

/// A witnesses file (lines `name hex-key`), read and parsed; errors name the file and line.
pub(crate) fn read_witnesses(path: &Path) -> Result<NamedWitnesses> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    sion_memory::ledger::Witnesses::parse_file(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

pub(crate) fn parse_box(text: &str) -> Result<BoxMm> {
    let v: Vec<i64> = text
        .split(',')
        .map(|s| s.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--box {text:?}: six integers in millimetres, X0,Y0,Z0,X1,Y1,Z1"))?;
    let [x0, y0, z0, x1, y1, z1] = v[..] else {
        bail!("--box {text:?}: six integers in millimetres, X0,Y0,Z0,X1,Y1,Z1");
    };
    Ok(BoxMm { min_mm: [x0, y0, z0], max_mm: [x1, y1, z1] })
}

pub(crate) fn open_memory(dir: &Path) -> Result<Memory> {
    let memory = sion_memory::fleet::options(dir)
        .open()
        .with_context(|| format!("opening the memory at {}", dir.display()))?;
    let r = memory.recovery();
    if r.torn_bytes > 0 {
        let kept = r.set_aside.as_ref().map(|p| format!(" (kept in {})", p.display())).unwrap_or_default();
        eprintln!("recovered: cut {} bytes of a record a crash left unfinished{kept}", r.torn_bytes);
    }
    Ok(memory)
}

/// A `--ledger-key` argument: the ledger key a reader chose, 64 hex digits of an ed25519 key.
pub(crate) fn ledger_key_arg(hex_key: &str) -> Result<VerifyingKey> {
    let mut k = [0u8; 32];
    hex::decode_to_slice(hex_key, &mut k).context("--ledger-key is 64 hex digits")?;
    VerifyingKey::from_bytes(&k).context("--ledger-key is not an ed25519 key")
}

/// Open a memory to read it: nothing in its directory changes, so a memory on read-only
/// media, on a full disk or in use by a running node can be read (docs/RELIABILITY.md).
pub(crate) fn open_memory_read_only(dir: &Path) -> Result<Memory> {
    let memory = sion_memory::fleet::options(dir)
        .open_read_only()
        .with_context(|| format!("opening the memory at {} to read it", dir.display()))?;
    if let sion_memory::memory::IndexBoot::Rebuilt { why, .. } = memory.index_boot() {
        eprintln!(
            "the index could not be used as it is ({why}): folded the log afresh, in a scratch directory"
        );
    }
    Ok(memory)
}

/// What to run next, for an error the libraries report without naming a command (they are
/// libraries: advice about this command line is the command line's to give).
pub(crate) fn hint(e: &anyhow::Error) -> Option<String> {
    use sion_memory::ledger::LedgerError;
    use sion_memory::log::LogError;
    use sion_memory::memory::{MemoryError, OpenError, ProveError, RememberError, SpaceError};
    // A transparent variant's source is its inner error's source, so wrapped errors are
    // unwrapped here, not found further down the chain.
    fn log_error<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a LogError> {
        match (c.downcast_ref::<LogError>(), c.downcast_ref::<OpenError>(), c.downcast_ref::<MemoryError>()) {
            (Some(e), _, _) | (_, Some(OpenError::Log(e)), _) | (_, _, Some(MemoryError::Log(e))) => Some(e),
            (_, _, Some(MemoryError::Open(OpenError::Log(e)))) => Some(e),
            _ => None,
        }
    }
    fn ledger_error<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a LedgerError> {
        use sion_memory::memory::CommitError;
        if let Some(e) = c.downcast_ref::<LedgerError>() {
            return Some(e);
        }
        match (
            c.downcast_ref::<CommitError>(),
            c.downcast_ref::<OpenError>(),
            c.downcast_ref::<MemoryError>(),
        ) {
            (Some(CommitError::Ledger(e)), _, _) | (_, Some(OpenError::Ledger(e)), _) => Some(e),
            (_, _, Some(MemoryError::Ledger(e) | MemoryError::Commit(CommitError::Ledger(e)))) => Some(e),
            (_, _, Some(MemoryError::Open(OpenError::Ledger(e)))) => Some(e),
            _ => None,
        }
    }
    fn open_error<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a OpenError> {
        match (c.downcast_ref::<OpenError>(), c.downcast_ref::<MemoryError>()) {
            (Some(e), _) | (_, Some(MemoryError::Open(e))) => Some(e),
            _ => None,
        }
    }
    for c in e.chain() {
        match open_error(c) {
            Some(OpenError::Missing(dir)) => {
                return Some(format!("create one with `sion memory open --data {}`", dir.display()));
            }
            Some(OpenError::Diverged { .. }) => {
                return Some("`sion memory audit` shows where the log and its committed head part".into());
            }
            _ => {}
        }
        match log_error(c) {
            Some(LogError::Damaged { .. } | LogError::Corrupt { .. }) => {
                return Some(
                    "`sion memory audit` shows how far the damage goes; `sion memory repair` keeps what is \
                     before it"
                        .into(),
                );
            }
            Some(LogError::Missing(_)) => return Some("create a memory with `sion memory open`".into()),
            _ => {}
        }
        let prove = c.downcast_ref::<ProveError>().or(match c.downcast_ref::<MemoryError>() {
            Some(MemoryError::Prove(e)) => Some(e),
            _ => None,
        });
        if let Some(ProveError::NotCommitted { .. } | ProveError::NothingCommitted) = prove {
            return Some("commit what the log holds with `sion memory commit`".into());
        }
        if let Some(MemoryError::CommittedDamage { .. }) = c.downcast_ref::<MemoryError>() {
            return Some(
                "`sion memory repair --new-log` keeps the atoms before the damage as a new log".into(),
            );
        }
        let not_sealed = matches!(c.downcast_ref::<MemoryError>(), Some(MemoryError::NotSealed(_)))
            || matches!(c.downcast_ref::<RememberError>(), Some(RememberError::NotSealed(_)));
        if not_sealed {
            return Some("a sealed memory is made with `sion memory open --sealed`".into());
        }
        if let Some(SpaceError::NoMember(_)) = c.downcast_ref::<SpaceError>() {
            return Some("`sion memory space show` lists the members".into());
        }
        if let Some(sion_memory::belief::bundle::BundleError::Unchained { .. }) = c.downcast_ref() {
            return Some("`--trust-log-set` accepts the logs the bundle brings".into());
        }
        if let Some(LedgerError::Remote { message, .. }) = ledger_error(c)
            && (message.starts_with("cannot be reached") || message.starts_with("cannot connect"))
        {
            return Some(
                "is `sion ledger serve` running there, with a quorum of its etcd members up?".into(),
            );
        }
        if let Some(sion_fleet::FleetError::Missing(_)) = c.downcast_ref() {
            return Some("`sion ledger init` makes one".into());
        }
    }
    None
}
