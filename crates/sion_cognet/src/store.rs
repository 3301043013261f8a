//! A cognet's private key/value store (seed: "The private store"): typed get/set, writes that
//! are atomic and resolve only when durable, and reads that give "absent" — never a crash — for
//! a key that is missing or unreadable. Cache doctrine: if losing a key can break the cognet,
//! it belonged in the log.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A key of the store and the type of its value.
pub trait StoreKey {
    /// `[a-z0-9_-]`, 1 to 64 bytes.
    const NAME: &'static str;
    type Value: Serialize + DeserializeOwned + Send + 'static;
}

#[derive(Debug, Clone, thiserror::Error)]
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
        fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(Self { dir: dir.to_owned() })
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
        let (dir, path) = (self.dir.clone(), self.path(K::NAME));
        let tmp = self.dir.join(format!("{}.json.tmp", K::NAME));
        let write = move || -> Result<(), StoreError> {
            let mut f = File::create(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
            f.write_all(&bytes)
                .and_then(|()| f.sync_all())
                .map_err(io(format!("writing {}", tmp.display())))?;
            fs::rename(&tmp, &path).map_err(io(format!("renaming onto {}", path.display())))?;
            File::open(&dir).and_then(|d| d.sync_all()).map_err(io(format!("syncing {}", dir.display())))
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(result) => result,
            Err(e) => Err(io("the store's writing thread")(std::io::Error::other(e.to_string()))),
        }
    }

    /// Forget `K` (absent afterwards).
    pub fn remove<K: StoreKey>(&self) -> Result<(), StoreError> {
        check_key(K::NAME)?;
        match fs::remove_file(self.path(K::NAME)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(format!("removing {}", K::NAME))(e)),
            _ => Ok(()),
        }
    }
}
