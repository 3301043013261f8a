//! Which position holds a given atom: the map that makes remembering an atom twice a no-op,
//! on disk (docs/LOG.md, "The duplicate filter"), so it does not grow the process with the log.
//!
//! It is a redb table in `log/dedup.redb`: key (the atom's valid `from`, the first 8 bytes of
//! its leaf hash), value the position. Keying by time first keeps a robot's appends, which
//! arrive in time order, on the few pages at the table's end, which stay in redb's cache. A hit
//! is confirmed against the full leaf hash stored in the node file; two atoms sharing a key are
//! kept whole, by full leaf hash, in a second table. The table is a cache of the log: its
//! cursor says how far it covers, and opening re-derives the rest from the segments; a missing
//! or damaged file is rebuilt.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase as _, ReadableTable as _, TableDefinition};
use sion_verify::merkle::Digest;

const KEYS: TableDefinition<(u64, u64), u64> = TableDefinition::new("by_time_and_leaf");
const WHOLE: TableDefinition<&[u8; 32], u64> = TableDefinition::new("by_leaf");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Why the duplicate filter could not be used (the log rebuilds it).
#[derive(Debug, thiserror::Error)]
#[error("the duplicate filter: {0}")]
pub(super) struct DedupError(String);

fn err(e: impl std::fmt::Display) -> DedupError {
    DedupError(e.to_string())
}

pub(super) struct Dedup {
    db: Database,
    /// Positions below this are in the table.
    covered: u64,
}

fn prefix(leaf: &Digest) -> u64 {
    let mut p = [0u8; 8];
    p.copy_from_slice(&leaf[..8]);
    u64::from_le_bytes(p)
}

impl Dedup {
    /// Open (or create) the table at `path`; a file that is not a sound redb database fails,
    /// and the caller starts a new one.
    pub(super) fn open(path: &Path, cache_bytes: usize) -> Result<Self, DedupError> {
        // A damaged file may make redb panic rather than fail: treat both alike.
        let opened =
            std::panic::catch_unwind(|| Database::builder().set_cache_size(cache_bytes).create(path));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => return Err(err(e)),
            Err(_) => return Err(DedupError("redb gave up on the file".into())),
        };
        let covered = {
            let tx = db.begin_read().map_err(err)?;
            match tx.open_table(META) {
                Ok(t) => t.get("covered").map_err(err)?.map_or(0, |v| v.value()),
                Err(redb::TableError::TableDoesNotExist(_)) => 0,
                Err(e) => return Err(err(e)),
            }
        };
        Ok(Self { db, covered })
    }

    /// Start over with an empty table at `path`.
    pub(super) fn create(path: &Path, cache_bytes: usize) -> Result<Self, DedupError> {
        let _ = std::fs::remove_file(path);
        Self::open(path, cache_bytes)
    }

    /// How many positions the table covers.
    pub(super) fn covered(&self) -> u64 {
        self.covered
    }

    /// The position of an atom with valid `from` and leaf hash `leaf`, confirming a hit with
    /// `stored`, which reads the leaf hash at a position below the log's size `size`.
    pub(super) fn find<E: From<DedupError>>(
        &self,
        from: i64,
        leaf: &Digest,
        size: u64,
        stored: impl Fn(u64) -> Result<Digest, E>,
    ) -> Result<Option<u64>, E> {
        let tx = self.db.begin_read().map_err(err)?;
        let keys = match tx.open_table(KEYS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(e).into()),
        };
        if let Some(p) = keys.get((from as u64, prefix(leaf))).map_err(err)?.map(|v| v.value())
            && p < size
            && stored(p)? == *leaf
        {
            return Ok(Some(p));
        }
        if let Ok(whole) = tx.open_table(WHOLE)
            && let Some(p) = whole.get(leaf).map_err(err)?.map(|v| v.value())
            && p < size
        {
            return Ok(Some(p));
        }
        Ok(None)
    }

    /// Look up and record a group of atoms (no two alike) in one write transaction: for each
    /// (from, leaf), its existing position, or `None` and it is recorded at the next position
    /// (`next`, counting up). Entries at or past `size` are stale (a crash left them) and are
    /// overwritten.
    pub(super) fn group<E: From<DedupError>>(
        &mut self,
        atoms: &[(i64, Digest)],
        mut next: u64,
        size: u64,
        stored: impl Fn(u64) -> Result<Digest, E>,
        durable: bool,
    ) -> Result<Vec<Option<u64>>, E> {
        let mut tx = self.db.begin_write().map_err(err)?;
        tx.set_durability(if durable { Durability::Immediate } else { Durability::None }).map_err(err)?;
        tx.set_quick_repair(durable);
        let mut out = Vec::with_capacity(atoms.len());
        {
            let mut keys = tx.open_table(KEYS).map_err(err)?;
            let mut whole = tx.open_table(WHOLE).map_err(err)?;
            for (from, leaf) in atoms {
                let key = (*from as u64, prefix(leaf));
                let held = keys.get(key).map_err(err)?.map(|v| v.value());
                let found = match held {
                    Some(p) if p < size && stored(p)? == *leaf => Some(p),
                    _ => whole.get(leaf).map_err(err)?.map(|v| v.value()).filter(|&p| p < size),
                };
                if found.is_some() {
                    out.push(found);
                    continue;
                }
                match held {
                    // Another atom has this key: this one is kept whole.
                    Some(p) if p < size => {
                        whole.insert(leaf, next).map_err(err)?;
                    }
                    _ => {
                        keys.insert(key, next).map_err(err)?;
                    }
                }
                out.push(None);
                next += 1;
            }
            tx.open_table(META).map_err(err)?.insert("covered", next).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        self.covered = next;
        Ok(out)
    }

    /// Make the table durable as it is.
    pub(super) fn sync(&mut self) -> Result<(), DedupError> {
        let mut tx = self.db.begin_write().map_err(err)?;
        tx.set_durability(Durability::Immediate).map_err(err)?;
        tx.set_quick_repair(true);
        tx.open_table(META).map_err(err)?.insert("covered", self.covered).map_err(err)?;
        tx.commit().map_err(err)
    }
}
