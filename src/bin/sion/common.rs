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
