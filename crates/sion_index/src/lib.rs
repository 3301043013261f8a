//! The spatio-temporal index: a deterministic function of the log (docs/INDEX.md), kept on
//! disk (docs/INDEX-STORE.md), folded forward incrementally, and the raw material of range,
//! subject and link proofs.
//!
//! Per frame, short-lived atoms (valid for at most an hour) sit in a list of hourly cell lists
//! and long-lived ones in a list of monthly cell lists; each cell's atoms are cut into blocks of 4096, each a
//! k-d-packed binary Merkle R-tree. A map of atoms by subject and a map of links by target
//! complete it.
//!
//! [`Index`] is the writer: it folds atoms and seals versions, each an immutable set of records
//! named by a root. A [`Snapshot`] of any sealed version answers through `&self`, from those
//! records alone, so readers never wait on the writer and an old head costs no more than the
//! latest. Resident memory is what the writer holds hot (within [`Budget`]) and the store's
//! cache of decoded records (within its budget), whatever the length of the log.

#![forbid(unsafe_code)]

mod map;
mod rank;
mod record;
mod store;
pub mod tree;
mod walk;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sion_verify::atom::{Atom, AtomId};
pub use sion_verify::index::geom;
pub use sion_verify::index::{
    FrameWitness, ListAnswer, ListHasher, MapLeaf, Neighbour, RangeAnswer, encode_frame, index_root,
    link_leaf_digest, list_leaf, subject_key, subject_leaf_digest,
};
use sion_verify::merkle::Digest;

use geom::Query;
pub use store::Checkpoint;
use store::Store;
use walk::PartialCache;
pub use walk::{MAX_LIST_STEPS, MAX_WALK_STEPS, MIN_LIST_ENTRY_BYTES, Snapshot};
use write::Writer;
pub use write::{Budget, cell_key, is_short_lived};

/// Atoms valid for at most this long are short-lived.
pub const SHORT_LIVED_NS: i64 = 3_600_000_000_000;
/// Short-lived atoms are grouped by the hour their valid time starts in.
pub const HOUR_NS: i64 = 3_600_000_000_000;
/// Long-lived atoms are grouped by the month (30 days) their valid time starts in.
pub const MONTH_NS: i64 = 30 * 24 * HOUR_NS;
/// Side of a spatial cell, by box centre: 2^17 mm = 131.072 m.
pub const CELL_MM: i64 = 1 << 17;
/// Atoms of one cell (in log order) are packed in blocks of this many.
pub const BLOCK: usize = 4096;
/// A subject's atoms of one frame (its places, index version 4) are packed in blocks of this
/// many: a seal rebuilds a bucket's partial block, and one subject (a robot's poses) may take
/// an atom in every commit.
pub const SUBJECT_BLOCK: usize = 64;
/// The version of docs/INDEX.md the roots here follow.
pub const INDEX_VERSION: u32 = 4;

/// Why the index could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    #[error("{context}: {source}")]
    Io { context: String, source: Arc<std::io::Error> },
    #[error("the index is damaged ({0}); it is rebuilt from the log")]
    Damaged(String),
    /// A seal failed after it began to write the version past its buckets: what the writer
    /// holds may no longer match the store, so it takes nothing more. Open the index again: it
    /// resumes from its checkpoint and folds the log from there (the log holds every atom).
    #[error("a seal of the index failed part-way ({0}); open the index again to resume from its checkpoint")]
    Interrupted(String),
    #[error("no index at {0}")]
    Missing(PathBuf),
    #[error("the index at {0} is open in another process")]
    Locked(PathBuf),
    #[error("no sealed version of the index covers exactly {0} atoms")]
    NoVersion(u64),
    #[error("the walk that proves this answer takes more than {0} steps")]
    TooLarge(usize),
    /// A subject or link list too long to prove: `list` says which (as a person would),
    /// `entries` how many it holds, `max` the steps and entries a list walk may take.
    #[error(
        "the list of {list} holds {entries} entries: proving it would walk more than {max} steps and entries"
    )]
    ListTooLarge { list: String, entries: u64, max: usize },
}

/// How much memory the index may use, and the disk it writes through.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// Decoded records kept for readers and the writer (shared).
    pub cache_bytes: usize,
    /// What the writer keeps hot.
    pub budget: Budget,
    /// Where every change to the index's files goes (the OS; a test's faulty disk).
    pub disk: sion_disk::Disk,
}

impl Default for IndexConfig {
    fn default() -> Self {
        let env = |name: &str, default: usize| {
            std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok()).map_or(default, |mib| mib << 20)
        };
        Self {
            cache_bytes: env("SION_INDEX_CACHE_MIB", 64 << 20),
            budget: Budget { hot_bytes: env("SION_INDEX_HOT_MIB", Budget::default().hot_bytes) },
            disk: sion_disk::Disk::os(),
        }
    }
}

/// How an index came to be open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// Made empty just now.
    Fresh,
    /// Resumed from its checkpoint, at this version; bytes written after it were dropped.
    Checkpoint { version: u64, dropped_bytes: u64 },
}

/// The index's writer: folds the log's atoms, seals versions, and hands out readers.
pub struct Index {
    writer: Writer,
    partials: Arc<PartialCache>,
}

/// Readers' side of an index: snapshots of sealed versions, for any thread.
#[derive(Clone)]
pub struct IndexReader {
    store: Arc<Store>,
    partials: Arc<PartialCache>,
}

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

impl Index {
    /// An index in memory (for tests and benchmarks; a memory keeps its own on disk).
    pub fn new() -> Self {
        let store = Arc::new(Store::in_memory(IndexConfig::default().cache_bytes));
        let writer = Writer::new(store, None, Budget { hot_bytes: usize::MAX })
            .unwrap_or_else(|_| unreachable!("an empty store has nothing to read"));
        Self { writer, partials: Arc::default() }
    }

    /// Build the index of a sequence of atoms from position 0, in memory.
    pub fn build(atoms: &[Atom]) -> Result<Self, IndexError> {
        let mut index = Self::new();
        index.fold_all(atoms)?;
        index.seal()?;
        Ok(index)
    }

    /// Make an empty index in `dir`.
    pub fn create(dir: &Path, config: IndexConfig) -> Result<Self, IndexError> {
        let store = Arc::new(Store::create(dir, config.cache_bytes, &config.disk)?);
        Ok(Self { writer: Writer::new(store, None, config.budget)?, partials: Arc::default() })
    }

    /// Open the index in `dir` at its checkpoint (fold the log's tail past [`Index::size`] to
    /// catch up). An error means the index cannot be used as it is: rebuild it.
    pub fn open(dir: &Path, config: IndexConfig) -> Result<(Self, Boot), IndexError> {
        let (store, opened) = Store::open(dir, config.cache_bytes, &config.disk)?;
        let version = opened.root.as_ref().map_or(0, |r| r.version);
        let writer = Writer::new(Arc::new(store), opened.root, config.budget)?;
        Ok((
            Self { writer, partials: Arc::default() },
            Boot::Checkpoint { version, dropped_bytes: opened.dropped_bytes },
        ))
    }

    /// The same, changing nothing in `dir`: no lock, the files read up to the checkpoint, and
    /// what is folded and sealed past it kept in memory (docs/INDEX-STORE.md).
    pub fn open_read_only(dir: &Path, config: IndexConfig) -> Result<(Self, Boot), IndexError> {
        let (store, opened) = Store::open_read_only(dir, config.cache_bytes)?;
        let version = opened.root.as_ref().map_or(0, |r| r.version);
        let writer = Writer::new(Arc::new(store), opened.root, config.budget)?;
        Ok((Self { writer, partials: Arc::default() }, Boot::Checkpoint { version, dropped_bytes: 0 }))
    }

    /// How many atoms of the log the index covers.
    pub fn size(&self) -> u64 {
        self.writer.size()
    }

    /// Take in the next atom of the log (position `self.size()`).
    pub fn fold(&mut self, atom: &Atom) -> Result<(), IndexError> {
        self.writer.fold(atom)
    }

    /// Take in the next atoms of the log.
    pub fn fold_all(&mut self, atoms: &[Atom]) -> Result<(), IndexError> {
        self.writer.fold_all(atoms)
    }

    /// Seal the version of everything folded; returns its root.
    pub fn seal(&mut self) -> Result<Digest, IndexError> {
        Ok(self.writer.seal()?.index_root)
    }

    /// The index root of everything folded (sealing first if needed).
    pub fn root(&mut self) -> Result<Digest, IndexError> {
        self.seal()
    }

    /// Make every sealed version durable, so the next open resumes from the latest.
    pub fn checkpoint(&self) -> Result<(), IndexError> {
        self.writer.store().checkpoint()
    }

    /// The snapshot of everything folded (sealing first if needed).
    pub fn snapshot(&mut self) -> Result<Snapshot, IndexError> {
        let root = self.writer.seal()?;
        Ok(Snapshot { store: Arc::clone(self.writer.store()), root, partials: Arc::clone(&self.partials) })
    }

    /// A reader of this index's sealed versions, for other threads.
    pub fn reader(&self) -> IndexReader {
        IndexReader { store: Arc::clone(self.writer.store()), partials: Arc::clone(&self.partials) }
    }

    /// Every atom in the query's frame, box and interval, with the walks that prove it complete.
    pub fn range(&mut self, q: &Query) -> Result<RangeAnswer, IndexError> {
        self.snapshot()?.range(q)
    }

    /// Every atom about `subject`.
    pub fn subject(&mut self, subject: &str) -> Result<ListAnswer, IndexError> {
        self.snapshot()?.subject(subject)
    }

    /// Every atom that links to `target`.
    pub fn links(&mut self, target: &AtomId) -> Result<ListAnswer, IndexError> {
        self.snapshot()?.links(target)
    }

    /// What the index holds in memory and on disk, for a node's once-a-minute line.
    pub fn memory(&self) -> IndexMemory {
        let (cached, _, _) = self.writer.store().cache_stats();
        IndexMemory {
            hot: self.writer.hot_bytes(),
            cached,
            map_nodes: self.writer.map_nodes(),
            on_disk: self.writer.store().node_bytes(),
        }
    }
}

/// What an index holds: the writer's hot state (bytes), decoded records cached (bytes), the
/// nodes of its subject and link maps in memory, and its node file's size (bytes).
#[derive(Debug, Clone, Copy)]
pub struct IndexMemory {
    pub hot: usize,
    pub cached: usize,
    pub map_nodes: usize,
    pub on_disk: u64,
}

impl Drop for Index {
    /// A clean close leaves nothing to fold again; if this fails, the next open folds the tail.
    fn drop(&mut self) {
        let _ = self.writer.store().checkpoint();
    }
}

impl IndexReader {
    /// The snapshot of the sealed version of exactly `size` atoms.
    pub fn at(&self, size: u64) -> Result<Snapshot, IndexError> {
        let v = self.store.version(size).ok_or(IndexError::NoVersion(size))?;
        Ok(Snapshot {
            store: Arc::clone(&self.store),
            root: self.store.root_of(&v)?,
            partials: Arc::clone(&self.partials),
        })
    }

    /// The snapshot of the latest sealed version, if any.
    pub fn latest(&self) -> Result<Option<Snapshot>, IndexError> {
        match self.store.latest() {
            None => Ok(None),
            Some(v) => Ok(Some(self.at(v.version)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::write::spread;

    #[test]
    fn spread_puts_bit_i_at_2i() {
        for v in [0u64, 1, 0b1011, u64::MAX, 1 << 63, 0x1234_5678_9abc_def0] {
            let mut expected = 0u128;
            for i in 0..64 {
                expected |= u128::from((v >> i) & 1) << (2 * i);
            }
            assert_eq!(spread(v), expected);
        }
    }
}
