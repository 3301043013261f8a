//! The blob store: the bytes that atoms commit to by hash (map tiles, camera frames), kept
//! beside the log, one file per blob named by the hex of its BLAKE3 hash under a directory of
//! its first byte (`blobs/3f/3fa4…`). A blob is written under a temporary name, fsynced,
//! renamed into place and its directory fsynced, so a blob that exists under its name is whole;
//! keep blobs before remembering the atoms that commit to them and no durable atom points at
//! nothing. Reading checks the hash again: a corrupted blob is an error, never silent.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a blob could not be kept or read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no blob {0}")]
    Missing(String),
    #[error("blob {0} does not hash to its name (corrupted on disk)")]
    Corrupt(String),
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BlobError {
    let path = path.to_owned();
    move |source| BlobError::Io { what, path, source }
}

/// From this many blobs in one call on, [`BlobStore::keep`] syncs the filesystem instead of
/// each file.
const MANY_BLOBS: usize = 16;

/// Make everything written to the filesystem holding `dir` durable (syncfs(2)): file data,
/// new names and directories alike.
fn sync_filesystem(dir: &Path) -> Result<(), BlobError> {
    let d = File::open(dir).map_err(io_err("opening", dir))?;
    rustix::fs::syncfs(&d).map_err(|e| BlobError::Io {
        what: "syncing the filesystem of",
        path: dir.to_owned(),
        source: e.into(),
    })
}

/// A content-addressed store of blobs in a directory.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
    next_temp: Arc<AtomicU64>,
}

impl BlobStore {
    /// The store in `dir`, created if absent; temporary files a crash left behind are removed.
    pub fn open(dir: &Path) -> Result<Self, BlobError> {
        let temp = dir.join("tmp");
        if temp.exists() {
            fs::remove_dir_all(&temp).map_err(io_err("clearing", &temp))?;
        }
        fs::create_dir_all(&temp).map_err(io_err("creating", &temp))?;
        Ok(Self { dir: dir.to_owned(), next_temp: Arc::new(AtomicU64::new(0)) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob with this hash lives.
    pub fn path(&self, hash: &[u8; 32]) -> PathBuf {
        let name = hex::encode(hash);
        self.dir.join(&name[..2]).join(name)
    }

    pub fn contains(&self, hash: &[u8; 32]) -> bool {
        self.path(hash).exists()
    }

    /// Keep blobs durably; returns their hashes. Blobs already held are not written again.
    /// Every file is written first and fsynced after, so one call costs one wait for the disk
    /// however many blobs it keeps.
    pub fn keep<B: AsRef<[u8]>>(&self, blobs: &[B]) -> Result<Vec<[u8; 32]>, BlobError> {
        let mut hashes = Vec::with_capacity(blobs.len());
        let mut written = Vec::new();
        for blob in blobs {
            let bytes = blob.as_ref();
            let hash = *blake3::hash(bytes).as_bytes();
            hashes.push(hash);
            let path = self.path(&hash);
            if path.exists() || written.iter().any(|(_, p, _)| *p == path) {
                continue;
            }
            let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
            let temp = self.dir.join("tmp").join(format!("{}-{n}", std::process::id()));
            let mut file = File::create(&temp).map_err(io_err("creating", &temp))?;
            file.write_all(bytes).map_err(io_err("writing", &temp))?;
            written.push((temp, path, file));
        }
        // Many blobs at once (a bag's replay): one filesystem-wide sync before the renames and
        // one after costs less than a sync per file and per directory.
        let many = written.len() >= MANY_BLOBS;
        if many {
            sync_filesystem(&self.dir)?;
        }
        let mut dirs = Vec::new();
        for (temp, path, file) in written {
            if !many {
                file.sync_all().map_err(io_err("syncing", &temp))?;
            }
            let parent = path.parent().unwrap_or(&self.dir).to_owned();
            if !dirs.contains(&parent) {
                fs::create_dir_all(&parent).map_err(io_err("creating", &parent))?;
                dirs.push(parent);
            }
            fs::rename(&temp, &path).map_err(io_err("renaming into", &path))?;
        }
        if many {
            sync_filesystem(&self.dir)?;
            return Ok(hashes);
        }
        if !dirs.is_empty() {
            // A new fan-out directory must itself be durable in the store's directory.
            dirs.push(self.dir.clone());
        }
        for dir in dirs {
            File::open(&dir).and_then(|d| d.sync_all()).map_err(io_err("syncing", &dir))?;
        }
        Ok(hashes)
    }

    /// The blob with this hash, checked against it.
    pub fn get(&self, hash: &[u8; 32]) -> Result<Vec<u8>, BlobError> {
        let path = self.path(hash);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::Missing(hex::encode(hash)));
            }
            Err(e) => return Err(io_err("reading", &path)(e)),
        };
        if blake3::hash(&bytes).as_bytes() != hash {
            return Err(BlobError::Corrupt(hex::encode(hash)));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_kept_once_and_read_back_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let hashes = store.keep(&[b"tile".as_slice(), b"frame", b"tile"]).unwrap();
        assert_eq!(hashes[0], hashes[2]);
        assert_eq!(store.get(&hashes[1]).unwrap(), b"frame");
        assert!(matches!(store.get(&[7; 32]), Err(BlobError::Missing(_))));

        fs::write(store.path(&hashes[0]), b"tilf").unwrap();
        assert!(matches!(store.get(&hashes[0]), Err(BlobError::Corrupt(_))));

        // What a crash left in tmp/ goes on the next open.
        fs::write(dir.path().join("tmp").join("stale"), b"x").unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert_eq!(store.get(&hashes[1]).unwrap(), b"frame");
    }
}
