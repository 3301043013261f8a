//! What the commands share: the memory argument, opening a memory, keys, boxes and proof files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use ed25519_dalek::VerifyingKey;
use sion_memory::atom::BoxMm;
use sion_memory::index::geom::Query;
use sion_memory::memory::Memory;
use sion_memory::units::{self, Edge};

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

/// A box as people write it (sion_verify's units: each value with its unit, bare integers in
/// millimetres), for clap.
pub(crate) fn box_value(text: &str) -> Result<BoxMm, String> {
    units::parse_box(text).map_err(|e| e.problem)
}

/// The start of an interval (RFC 3339, seconds with their unit, bare nanoseconds, or `now`):
/// rounded down below a nanosecond, for clap.
pub(crate) fn time_from(text: &str) -> Result<i64, String> {
    time_value(text, Edge::Low)
}

/// The end of an interval, as [`time_from`]: rounded up below a nanosecond.
pub(crate) fn time_to(text: &str) -> Result<i64, String> {
    time_value(text, Edge::High)
}

fn time_value(text: &str, edge: Edge) -> Result<i64, String> {
    if text.trim() == "now" {
        return Ok(now_ns());
    }
    units::time_ns(text, edge).map_err(|e| e.problem)
}

/// A duration with its unit (`10min`, `1.5s`, `2h`), for clap.
pub(crate) fn duration_value(text: &str) -> Result<i64, String> {
    units::duration_ns(text).map_err(|e| e.problem)
}

/// A frame as tf2 names it: `/map` is `map`.
pub(crate) fn frame_value(text: &str) -> Result<String, String> {
    Ok(units::frame_name(text).to_owned())
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// "What was seen in this box, during this interval", as the commands ask it: in metres or
/// millimetres, and in RFC 3339, seconds, nanoseconds or the last few minutes (docs/UNITS.md).
#[derive(Args)]
pub(crate) struct QuestionArgs {
    /// The frame the box is in (`/map` is `map`, as in tf2).
    #[arg(long, value_parser = frame_value)]
    pub(crate) frame: String,
    /// The box: X0,Y0,Z0,X1,Y1,Z1 (minimum corner, then maximum, corners included), each with
    /// its unit (0m,0m,-1m,10m,8m,3m; also cm and mm); bare integers are millimetres.
    #[arg(long = "box", value_name = "X0,Y0,Z0,X1,Y1,Z1", allow_hyphen_values = true, value_parser = box_value)]
    pub(crate) bounds: BoxMm,
    /// Start of the interval: RFC 3339 (2026-01-01T14:00:00Z), seconds with their unit
    /// (1767225600.5s), bare nanoseconds (ROS Time's), or `now`.
    #[arg(long, allow_hyphen_values = true, value_parser = time_from, required_unless_present = "last")]
    pub(crate) from: Option<i64>,
    /// End of the interval (excluded), written as --from is [default with --last: now]. Equal
    /// to --from: that instant.
    #[arg(long, allow_hyphen_values = true, value_parser = time_to, required_unless_present = "last")]
    pub(crate) to: Option<i64>,
    /// The last DURATION up to --to (or now): 10min, 1.5s, 2h, 1d.
    #[arg(long, value_name = "DURATION", value_parser = duration_value, conflicts_with = "from")]
    pub(crate) last: Option<i64>,
    /// Only atoms of this kind (observation, pose, coverage, map_tile, transform, …; repeat
    /// it or separate with commas). The proof passes over the other kinds' buckets whole, so
    /// it grows with what matches, not with every pose in the box [default: every kind].
    #[arg(long = "kind", value_name = "KIND", value_delimiter = ',', value_parser = kind_value)]
    pub(crate) kinds: Vec<u32>,
    /// Only atoms about this subject (pallet-17, a track id, a person's name): the proof walks
    /// the subject's own tree in the frame, so it grows with the subject's atoms there, not
    /// with everything else in the box [default: every subject, and atoms with none].
    #[arg(long, value_name = "SUBJECT")]
    pub(crate) subject: Option<String>,
}

/// A kind of atom by its name (docs/ATOM.md), as the bit a question's kinds hold.
pub(crate) fn kind_value(text: &str) -> Result<u32, String> {
    units::parse_kinds([text])
}

impl QuestionArgs {
    /// The question, checked (docs/INDEX.md, "Queries").
    pub(crate) fn query(&self) -> Result<Query> {
        let to = self.to.unwrap_or_else(now_ns);
        let from = match (self.from, self.last) {
            (Some(from), _) => from,
            (None, Some(last)) => to.saturating_sub(last),
            (None, None) => bail!("give --from and --to, or --last"),
        };
        let mut query = Query::new(&self.frame, self.bounds, from, to).context("the question")?;
        if !self.kinds.is_empty() {
            query = query.with_kinds(self.kinds.iter().fold(0, |m, k| m | k)).context("the question")?;
        }
        match &self.subject {
            None => Ok(query),
            Some(s) => query.with_subject(s).context("the question (--subject)"),
        }
    }
}

/// Answer a range question as of one committed head, and warn beside the answer (stderr) when
/// the question cannot match anything that head holds: the frames it holds, or the span and
/// extent of the frame asked about (the proof stands). Returns the proof and the warnings.
pub(crate) fn prove_range_warned(
    memory: &Memory,
    query: &Query,
    as_of: Option<u64>,
) -> Result<(sion_memory::proof::ProofFile, Vec<String>)> {
    prove_warned(memory, query, as_of, |s, q| s.range(q))
}

/// [`prove_range_warned`] for any question about a box and interval (range, last seen, count).
pub(crate) fn prove_warned(
    memory: &Memory,
    query: &Query,
    as_of: Option<u64>,
    prove: impl FnOnce(
        &sion_memory::memory::Snapshot,
        &Query,
    ) -> Result<sion_memory::proof::ProofFile, sion_memory::memory::ProveError>,
) -> Result<(sion_memory::proof::ProofFile, Vec<String>)> {
    let snapshot = memory.snapshot(as_of).context("answering the query")?;
    let file = prove(&snapshot, query).context("answering the query")?;
    let warnings: Vec<String> =
        snapshot.mismatches(query).unwrap_or_default().iter().map(ToString::to_string).collect();
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    Ok((file, warnings))
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
