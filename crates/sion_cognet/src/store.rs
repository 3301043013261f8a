//! A cognet's private key/value store (seed: "The private store"): typed get/set, writes that
//! are atomic and resolve only when durable, and reads that give "absent" — never a crash — for
//! a key that is missing or unreadable. Cache doctrine: if losing a key can break the cognet,
//! it belonged in the log.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sion_disk::Disk;

/// A key of the store and the type of its value.
pub trait StoreKey {
    /// `[a-z0-9_-]`, 1 to 64 bytes.
    const NAME: &'static str;
    type Value: Serialize + DeserializeOwned + Send + 'static;
}

#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("store key {0:?} is not 1 to 64 characters of [a-z0-9_-]")]
    BadKey(&'static str),
    #[error("{context}: {source}")]
    Io { context: String, source: Arc<std::io::Error> },
    #[error("encoding the value of {key}: {reason}")]
    Encode { key: &'static str, reason: String },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io { context: context.into(), source: Arc::new(source) }
}

/// One cognet's store: a directory of `<key>.json` files.
#[derive(Debug, Clone)]
pub struct Store {
    disk: Disk,
    dir: PathBuf,
}

fn check_key(key: &'static str) -> Result<(), StoreError> {
    let ok = !key.is_empty()
        && key.len() <= 64
        && key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(StoreError::BadKey(key)) }
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_on(&Disk::os(), dir)
    }

    /// The same, writing through `disk` (a test's faulty disk).
    pub fn open_on(disk: &Disk, dir: &Path) -> Result<Self, StoreError> {
        disk.create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(Self { disk: disk.clone(), dir: dir.to_owned() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &'static str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The value of `K`, or `None` when it is absent or cannot be read as a `K::Value`.
    pub fn get<K: StoreKey>(&self) -> Option<K::Value> {
        check_key(K::NAME).ok()?;
        let bytes = fs::read(self.path(K::NAME)).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(target: "cognet", "store key {} is unreadable ({e}); treating it as absent", K::NAME);
                None
            }
        }
    }

    /// Replace the value of `K`: written to a temporary file, fsynced, renamed over the old
    /// one, and the directory fsynced, on a blocking thread; resolves once durable.
    pub async fn set<K: StoreKey>(&self, value: &K::Value) -> Result<(), StoreError> {
        check_key(K::NAME)?;
        let bytes = serde_json::to_vec(value)
            .map_err(|e| StoreError::Encode { key: K::NAME, reason: e.to_string() })?;
        let (disk, path) = (self.disk.clone(), self.path(K::NAME));
        let write = move || -> Result<(), StoreError> {
            disk.replace_file(&path, &bytes).map_err(io(format!("writing {}", path.display())))
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(result) => result,
            Err(e) => Err(io("the store's writing thread")(std::io::Error::other(e.to_string()))),
        }
    }

    /// Forget `K` (absent afterwards).
    pub fn remove<K: StoreKey>(&self) -> Result<(), StoreError> {
        check_key(K::NAME)?;
        match self.disk.remove_file(&self.path(K::NAME)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(format!("removing {}", K::NAME))(e)),
            Err(_) => Ok(()),
            // Absent after a crash too.
            Ok(()) => self.disk.sync_dir(&self.dir).map_err(io(format!("syncing {}", self.dir.display()))),
        }
    }
}
