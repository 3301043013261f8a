//! Archives of a memory (docs/SEAL.md, "Archives"): the log's atoms, the blobs it keeps and
//! the files that give them meaning (memory.json, the space's key stores, the lanes of sealed
//! frames, the embedded ledger), written as content-addressed objects encrypted for the
//! memory's writer, to a directory or an S3-compatible bucket through `object_store`.
//!
//! The archive's root (the name of its manifest object) is committed as the head's
//! `manifest`, so a reader who trusts the ledger knows which stored bytes are the memory; a
//! restore rebuilds a memory directory from the objects and checks it against the committed
//! head (size, root, index root, manifest) before it puts it where it was asked to.
//!
//! An archive keeps one state: writing it again uploads what is new, then deletes every
//! object the new state does not name — so what a forget destroyed (a key store's punctured
//! keys, a lane retention dropped) leaves the archive too.

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chacha20poly1305::aead::{Aead as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit as _, Nonce};
use ed25519_dalek::SigningKey;
use futures::StreamExt as _;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use serde::{Deserialize, Serialize};
use sion_store::log::blobs::BlobStore;
use sion_store::log::{Log, LogOptions};
use sion_store::memory::{Memory, MemoryError};
use sion_verify::atom::{Atom, Payload as AtomPayload};

/// The format this crate writes and reads (docs/SEAL.md, "Archives").
pub const FORMAT: &str = "sion-archive-1";
const MAGIC: &[u8; 8] = b"SIONARC1";
/// Atoms per chunk object: a full chunk never changes, so archiving again re-sends only the
/// last, partial one and the chunks after it.
pub const CHUNK_ATOMS: u64 = 65_536;
/// The largest object a restore accepts (a lane segment closes at 64 MiB; a frame is at most
/// 256 MiB): a length read from the store is bounded before anything is allocated for it.
const MAX_OBJECT: u64 = 1 << 30;
/// The clear pointer to the latest state.
const LATEST: &str = "latest.json";

/// What an object holds (its first byte after the magic, bound into its tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Chunk = 1,
    Blob = 2,
    File = 3,
    Manifest = 4,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    #[error("archive {url}: {source}")]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("archive URL {0:?}: {1}")]
    Url(String, String),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error(transparent)]
    Log(#[from] sion_store::log::LogError),
    #[error(transparent)]
    Blob(#[from] sion_store::log::blobs::BlobError),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("object {name}: {why}")]
    BadObject { name: String, why: String },
    #[error("the archive's manifest: {0}")]
    BadManifest(String),
    #[error(
        "the archive was written for writer {archived}, not for the key given ({given}): only its writer's key opens it"
    )]
    WrongWriter { archived: String, given: String },
    #[error("nothing is committed yet: commit before archiving (an archive is of a committed head)")]
    NothingCommitted,
    #[error("{0} already exists and is not empty: restore into a new directory")]
    TargetExists(PathBuf),
    #[error(
        "the restored memory does not match the head its ledger committed with this archive: {0}. \
         Nothing was put in place"
    )]
    Mismatch(String),
    #[error(
        "the archive's ledger reaches Pulse {has}, but you asked for at least Pulse {asked}: this archive is \
         older than the memory you recorded (a copy made before later commits, a forget among them), and \
         restoring it would undo them. Nothing was put in place"
    )]
    RolledBack { has: u64, asked: u64 },
    #[error(
        "{refused}; and the unfinished restore {} could not be removed ({source}): it holds the writer's \
         key and the memory's keys in the clear, remove it by hand",
        staging.display()
    )]
    NotCleared {
        refused: Box<ArchiveError>,
        staging: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the ledger's head has {committed} atoms, but the archive holds the first {archived} (committed \
         with it): the atoms after {archived} were committed after the last archive and are not in it. \
         Nothing was put in place"
    )]
    Behind { archived: u64, committed: u64 },
}

// Each operation's error of a memory, as a `ArchiveError::Memory`.
sion_store::from_memory_errors!(ArchiveError);

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError {
    let path = path.to_owned();
    move |source| ArchiveError::Io { what, path, source }
}

/// What a restore is checked against besides the archive: what its user holds apart from it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Anchor<'a> {
    /// The key the restored memory's ledger must sign with (the key the operator wrote down,
    /// or the fleet's).
    pub ledger_key: Option<&'a ed25519_dalek::VerifyingKey>,
    /// The last Pulse the user recorded of this memory's ledger: an archive whose ledger has
    /// not reached it is older than the memory they had, and is refused.
    pub at_least_pulse: Option<u64>,
}

/// The head an archive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedHead {
    pub size: u64,
    #[serde(with = "sion_verify::hex32")]
    pub root: [u8; 32],
    #[serde(with = "sion_verify::hex32")]
    pub index: [u8; 32],
}

/// The manifest (JSON, encrypted as a `Manifest` object; its object's name is the root).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub log: u64,
    /// The writer's public key (hex): the key the archive is encrypted for.
    pub writer: String,
    pub head: ArchivedHead,
    pub chunk_atoms: u64,
    /// Chunk `k` holds positions `k × chunk_atoms ..` up to the head's size.
    pub chunks: Vec<String>,
    /// (the blob's BLAKE3, its object)
    pub blobs: Vec<(String, String)>,
    /// (a path relative to the memory directory, its object)
    pub files: Vec<(String, String)>,
}

/// The clear pointer to the latest state, written last.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latest {
    pub format: String,
    /// The manifest object's name: the root committed as the head's manifest.
    pub root: String,
    /// The embedded ledger's files as they were after the manifest was committed (path relative
    /// to the memory directory, object): they cannot be in the manifest, whose root they hold.
    pub ledger: Vec<(String, String)>,
    /// When it was written (ns since the Unix epoch; the writer's clock, for people).
    pub made_ns: u64,
}

/// The keys an archive is encrypted under, derived from the writer's signing key.
pub struct ArchiveKeys {
    cipher: ChaCha20Poly1305,
    nonce_key: [u8; 32],
    public: String,
}

impl ArchiveKeys {
    pub fn of(writer: &SigningKey) -> Self {
        let secret = writer.to_bytes();
        let key = blake3::derive_key("sion-archive-v1 key", &secret);
        let nonce_key = blake3::derive_key("sion-archive-v1 nonce", &secret);
        Self {
            cipher: ChaCha20Poly1305::new(&Key::from(key)),
            nonce_key,
            public: hex::encode(writer.verifying_key().to_bytes()),
        }
    }

    /// An object: "SIONARC1", the kind, a 12-byte nonce (a keyed hash of the kind and the
    /// plaintext, so the same bytes make the same object and archiving again sends nothing
    /// twice), the ChaCha20-Poly1305 ciphertext and tag. Returns (name, bytes).
    pub fn seal(&self, kind: Kind, plain: &[u8]) -> Result<(String, Vec<u8>), ArchiveError> {
        let mut h = blake3::Hasher::new_keyed(&self.nonce_key);
        h.update(&[kind as u8]);
        h.update(plain);
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&h.finalize().as_bytes()[..12]);
        let mut aad = MAGIC.to_vec();
        aad.push(kind as u8);
        // Only a plaintext over 256 GiB could fail (a limit of the cipher).
        let sealed =
            self.cipher.encrypt(&Nonce::from(nonce), Payload { msg: plain, aad: &aad }).map_err(|_| {
                ArchiveError::BadObject {
                    name: format!("({} bytes)", plain.len()),
                    why: "too large to seal".into(),
                }
            })?;
        let mut out = Vec::with_capacity(9 + 12 + sealed.len());
        out.extend_from_slice(&aad);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok((blake3::hash(&out).to_hex().to_string(), out))
    }

    /// Check an object against its name and open it.
    pub fn open(&self, kind: Kind, name: &str, bytes: &[u8]) -> Result<Vec<u8>, ArchiveError> {
        let bad = |why: &str| ArchiveError::BadObject { name: name.to_owned(), why: why.to_owned() };
        if blake3::hash(bytes).to_hex().as_str() != name {
            return Err(bad("its bytes do not hash to its name (damaged or replaced in the store)"));
        }
        if bytes.len() < 9 + 12 + 16 || &bytes[..8] != MAGIC {
            return Err(bad("not a SIONARC1 object"));
        }
        if bytes[8] != kind as u8 {
            return Err(bad(&format!("kind {} where {} was expected", bytes[8], kind as u8)));
        }
        let nonce: [u8; 12] = bytes[9..21].try_into().map_err(|_| bad("short nonce"))?;
        self.cipher
            .decrypt(&Nonce::from(nonce), Payload { msg: &bytes[21..], aad: &bytes[..9] })
            .map_err(|_| bad("does not open with this writer's key (another writer's archive, or tampered)"))
    }
}

/// An archive at a URL: a directory (a path or `file://`), or `s3://bucket/prefix` configured
/// from the environment (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_REGION`, `AWS_ALLOW_HTTP`).
pub struct Archive {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
}

/// What `write` did.
#[derive(Debug, Clone)]
pub struct Written {
    pub root: [u8; 32],
    pub head: ArchivedHead,
    pub objects: usize,
    pub sent: usize,
    pub sent_bytes: u64,
    pub deleted: usize,
    /// The Pulse that committed the manifest.
    pub pulse: u64,
    /// Atoms committed first (the log held more than its committed head).
    pub committed_first: u64,
}

/// What `restore` did.
#[derive(Debug, Clone)]
pub struct Restored {
    pub root: [u8; 32],
    pub head: ArchivedHead,
    pub blobs: usize,
    pub files: usize,
    pub fetched_bytes: u64,
    /// The last Pulse of the restored memory's ledger: the one to record, and to name with
    /// [`Anchor::at_least_pulse`] the next time.
    pub pulse: u64,
}

impl Archive {
    pub fn open(url: &str) -> Result<Self, ArchiveError> {
        Self::open_with(url, &[])
    }

    /// The same, with S3 settings given here (`aws_endpoint`, `aws_access_key_id`, …: the
    /// environment variables' names in lower case) over those of the environment.
    pub fn open_with(url: &str, s3: &[(&str, &str)]) -> Result<Self, ArchiveError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_err("starting the archive's I/O runtime", Path::new(url)))?;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = if let Some(rest) = url.strip_prefix("s3://") {
            #[cfg(feature = "s3")]
            {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(ArchiveError::Url(url.into(), "no bucket: s3://BUCKET/PREFIX".into()));
                }
                let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                for (key, value) in s3 {
                    let key: object_store::aws::AmazonS3ConfigKey = key
                        .parse()
                        .map_err(|e| ArchiveError::Url(url.into(), format!("S3 setting {key:?}: {e}")))?;
                    builder = builder.with_config(key, *value);
                }
                let store =
                    builder.build().map_err(|source| ArchiveError::Store { url: url.into(), source })?;
                (Arc::new(store), prefix.trim_matches('/').to_owned())
            }
            #[cfg(not(feature = "s3"))]
            {
                let _ = (rest, s3);
                return Err(ArchiveError::Url(url.into(), "built without the `s3` feature".into()));
            }
        } else if url.contains("://") && !url.starts_with("file://") {
            return Err(ArchiveError::Url(
                url.into(),
                "unknown scheme: a directory (a path or file://DIR) or s3://BUCKET/PREFIX".into(),
            ));
        } else {
            let dir = PathBuf::from(url.strip_prefix("file://").unwrap_or(url));
            // Its objects are sealed, but their names and sizes are still the memory's business.
            sion_disk::create_private_dir_all(&dir).map_err(io_err("making the archive directory", &dir))?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                .map_err(|source| ArchiveError::Store { url: url.into(), source })?;
            (Arc::new(store), String::new())
        };
        Ok(Self { url: url.to_owned(), store, prefix, rt })
    }

    fn path(&self, rel: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    fn object_path(&self, name: &str) -> ObjectPath {
        // Names are 64 hex digits (checked before use); `get` keeps a stray name from panicking.
        self.path(&format!("objects/{}/{name}", name.get(..2).unwrap_or("xx")))
    }

    fn err(&self) -> impl FnOnce(object_store::Error) -> ArchiveError + '_ {
        move |source| ArchiveError::Store { url: self.url.clone(), source }
    }

    fn put(&self, at: &ObjectPath, bytes: Vec<u8>) -> Result<(), ArchiveError> {
        self.rt.block_on(self.store.put(at, PutPayload::from(bytes))).map_err(self.err())?;
        Ok(())
    }

    fn get(&self, at: &ObjectPath) -> Result<Vec<u8>, ArchiveError> {
        self.rt
            .block_on(async {
                let got = self.store.get(at).await?;
                if got.meta.size > MAX_OBJECT {
                    return Err(object_store::Error::Generic {
                        store: "archive",
                        source: format!(
                            "{at} has {} bytes, more than any object an archive writes",
                            got.meta.size
                        )
                        .into(),
                    });
                }
                Ok(got.bytes().await?.to_vec())
            })
            .map_err(self.err())
    }

    /// Every object name the store holds.
    fn names(&self) -> Result<HashSet<String>, ArchiveError> {
        let prefix = self.path("objects");
        self.rt
            .block_on(async {
                let mut out = HashSet::new();
                let mut list = self.store.list(Some(&prefix));
                while let Some(meta) = list.next().await {
                    // Only object names: a stray file someone left is neither used nor deleted.
                    if let Some(name) = meta?.location.filename()
                        && name.len() == 64
                        && name.bytes().all(|b| b.is_ascii_hexdigit())
                    {
                        out.insert(name.to_owned());
                    }
                }
                Ok(out)
            })
            .map_err(self.err())
    }

    /// The latest state's pointer, if the archive has one.
    pub fn latest(&self) -> Result<Option<Latest>, ArchiveError> {
        let at = self.path(LATEST);
        match self.rt.block_on(self.store.get(&at)) {
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(ArchiveError::Store { url: self.url.clone(), source }),
            Ok(_) => {
                let bytes = self.get(&at)?;
                let latest: Latest = serde_json::from_slice(&bytes)
                    .map_err(|e| ArchiveError::BadManifest(format!("{LATEST}: {e}")))?;
                if latest.format != FORMAT {
                    return Err(ArchiveError::BadManifest(format!(
                        "{LATEST}: format {:?}, this build reads {FORMAT:?}",
                        latest.format
                    )));
                }
                Ok(Some(latest))
            }
        }
    }

    /// Archive the memory's committed head (committing what the log holds past it first), commit
    /// the archive's root as the head's manifest, and delete what the previous state held that
    /// this one does not. `progress(done, total)` counts atoms.
    pub fn write(
        &self,
        memory: &mut Memory,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Written, ArchiveError> {
        let keys = ArchiveKeys::of(memory.writer());
        let before = memory.committed().head.size;
        if memory.log().size() > before {
            memory.commit(false)?;
        }
        let head = memory.committed().head;
        if head.size == 0 {
            return Err(ArchiveError::NothingCommitted);
        }
        let archived = ArchivedHead { size: head.size, root: head.root, index: head.index };
        let mut have = self.names()?;
        let mut keep: HashSet<String> = HashSet::new();
        let mut sent = 0;
        let mut sent_bytes = 0;
        let mut send = |this: &Self, name: String, bytes: Vec<u8>, keep: &mut HashSet<String>| {
            if !have.contains(&name) {
                sent += 1;
                sent_bytes += bytes.len() as u64;
                this.put(&this.object_path(&name), bytes)?;
                have.insert(name.clone());
            }
            keep.insert(name);
            Ok::<(), ArchiveError>(())
        };

        // The atoms, in chunks, and the blobs they commit to that this memory keeps.
        let mut chunks = Vec::new();
        let mut blobs = Vec::new();
        let mut seen_blobs: HashSet<[u8; 32]> = HashSet::new();
        let mut first = 0;
        while first < head.size {
            let count = CHUNK_ATOMS.min(head.size - first);
            let mut plain = Vec::with_capacity(12 + count as usize * 160);
            plain.extend_from_slice(&first.to_le_bytes());
            plain.extend_from_slice(&(count as u32).to_le_bytes());
            for position in first..first + count {
                let bytes = memory.log().read_bytes(position)?;
                let atom = Atom::decode(&bytes)
                    .map_err(|e| sion_store::log::LogError::Corrupt { position, reason: e.to_string() })?;
                if let AtomPayload::Blob(blob) = &atom.parts().payload
                    && memory.blobs().contains(&blob.hash)
                    && seen_blobs.insert(blob.hash)
                {
                    let body = memory.blobs().get(&blob.hash)?;
                    let (name, object) = keys.seal(Kind::Blob, &body)?;
                    send(self, name.clone(), object, &mut keep)?;
                    blobs.push((hex::encode(blob.hash), name));
                }
                plain.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                plain.extend_from_slice(&bytes);
            }
            let (name, object) = keys.seal(Kind::Chunk, &plain)?;
            send(self, name.clone(), object, &mut keep)?;
            chunks.push(name);
            first += count;
            progress(first, head.size);
        }

        // The files that give the atoms their meaning (not the log's and index's derived files,
        // not the writer's key: the archive is encrypted for it, and the embedded ledger after).
        let mut files = Vec::new();
        let ledger_dir = memory.embedded_ledger_dir()?;
        for rel in memory_files(memory.dir(), ledger_dir.as_deref())? {
            let path = memory.dir().join(&rel);
            let body = fs::read(&path).map_err(io_err("reading", &path))?;
            let (name, object) = keys.seal(Kind::File, &body)?;
            send(self, name.clone(), object, &mut keep)?;
            files.push((rel, name));
        }

        let made_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let manifest = Manifest {
            format: FORMAT.into(),
            log: memory.log_id().0,
            writer: keys.public.clone(),
            head: archived,
            chunk_atoms: CHUNK_ATOMS,
            chunks,
            blobs,
            files,
        };
        let json = serde_json::to_vec(&manifest).map_err(|e| ArchiveError::BadManifest(e.to_string()))?;
        let (root_hex, object) = keys.seal(Kind::Manifest, &json)?;
        send(self, root_hex.clone(), object, &mut keep)?;
        let mut root = [0u8; 32];
        hex::decode_to_slice(&root_hex, &mut root).map_err(|e| ArchiveError::BadManifest(e.to_string()))?;

        // The root, committed as the head's manifest; then the embedded ledger that holds it.
        // Archived again with nothing new, the manifest is the same (it is a function of the
        // head and the bytes): nothing to commit.
        let pulse = if memory.committed().head.manifest == root {
            memory.committed().committed_at
        } else {
            memory.commit_manifest(root)?.pulse.header.number
        };
        let mut ledger = Vec::new();
        if let Some(dir) = &ledger_dir
            && let Ok(inside) = dir.strip_prefix(memory.dir())
        {
            for rel in tree_files(dir)? {
                let path = dir.join(&rel);
                let body = fs::read(&path).map_err(io_err("reading", &path))?;
                let (name, object) = keys.seal(Kind::File, &body)?;
                send(self, name.clone(), object, &mut keep)?;
                ledger.push((inside.join(&rel).to_string_lossy().into_owned(), name));
            }
        }
        let latest = Latest { format: FORMAT.into(), root: root_hex, ledger, made_ns };
        let json =
            serde_json::to_vec_pretty(&latest).map_err(|e| ArchiveError::BadManifest(e.to_string()))?;
        self.put(&self.path(LATEST), json)?;

        // One state: what the new one does not name goes (a forgotten key, a dropped lane).
        let mut deleted = 0;
        for name in self.names()? {
            if !keep.contains(&name) {
                self.rt.block_on(self.store.delete(&self.object_path(&name))).map_err(self.err())?;
                deleted += 1;
            }
        }
        Ok(Written {
            root,
            head: archived,
            objects: keep.len(),
            sent,
            sent_bytes,
            deleted,
            pulse,
            committed_first: head.size - before.min(head.size),
        })
    }

    /// Rebuild a memory directory at `to` (new or empty) from the archive, with the writer's
    /// key `writer`, open it (reaching a fleet ledger through `connect`) and check it against
    /// the head its ledger committed with this archive's root; only then move it into place.
    pub fn restore(
        &self,
        to: &Path,
        writer: &SigningKey,
        connect: sion_store::ledger::link::Connect<'_>,
        progress: impl FnMut(u64, u64),
    ) -> Result<Restored, ArchiveError> {
        self.restore_pinned(to, writer, Anchor::default(), connect, progress)
    }

    /// The same, checked against what the user holds outside the archive (`anchor`): the
    /// ledger's key, and the last Pulse they recorded. An embedded ledger comes back from the
    /// archive itself, so only these tell a copy made before a forget from the latest.
    pub fn restore_pinned(
        &self,
        to: &Path,
        writer: &SigningKey,
        anchor: Anchor<'_>,
        connect: sion_store::ledger::link::Connect<'_>,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Restored, ArchiveError> {
        let ledger_key = anchor.ledger_key;
        if to.exists() && fs::read_dir(to).map_err(io_err("reading", to))?.next().is_some() {
            return Err(ArchiveError::TargetExists(to.to_owned()));
        }
        let keys = ArchiveKeys::of(writer);
        let latest = self.latest()?.ok_or_else(|| {
            ArchiveError::BadManifest(format!("{}: no {LATEST}: nothing archived here", self.url))
        })?;
        let mut fetched = 0u64;
        let mut fetch = |kind: Kind, name: &str| -> Result<Vec<u8>, ArchiveError> {
            if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ArchiveError::BadManifest(format!("{name:?} is not an object name")));
            }
            let bytes = self.get(&self.object_path(name))?;
            fetched += bytes.len() as u64;
            keys.open(kind, name, &bytes)
        };
        let manifest: Manifest = serde_json::from_slice(&fetch(Kind::Manifest, &latest.root)?)
            .map_err(|e| ArchiveError::BadManifest(e.to_string()))?;
        if manifest.format != FORMAT {
            return Err(ArchiveError::BadManifest(format!(
                "format {:?}, this build reads {FORMAT:?}",
                manifest.format
            )));
        }
        if manifest.writer != keys.public {
            return Err(ArchiveError::WrongWriter { archived: manifest.writer, given: keys.public.clone() });
        }
        let expected_chunks = manifest.head.size.div_ceil(manifest.chunk_atoms.max(1));
        if manifest.chunk_atoms == 0 || manifest.chunks.len() as u64 != expected_chunks {
            return Err(ArchiveError::BadManifest(format!(
                "{} chunks of {} atoms cannot hold {} atoms",
                manifest.chunks.len(),
                manifest.chunk_atoms,
                manifest.head.size
            )));
        }
        let mut root = [0u8; 32];
        hex::decode_to_slice(&latest.root, &mut root)
            .map_err(|e| ArchiveError::BadManifest(e.to_string()))?;

        let staging = staging_of(to);
        if staging.exists() {
            fs::remove_dir_all(&staging)
                .map_err(io_err("clearing an earlier, unfinished restore", &staging))?;
        }
        // The staging directory holds the writer's key and the clear key store as soon as they
        // are fetched: private from the first byte, and gone whenever the restore is refused.
        sion_disk::create_private_dir_all(&staging).map_err(io_err("making", &staging))?;
        let staged = (|| -> Result<u64, ArchiveError> {
            let write_file = |rel: &str, body: &[u8]| -> Result<(), ArchiveError> {
                let rel_path = safe_relative(rel)?;
                let path = staging.join(rel_path);
                if let Some(parent) = path.parent() {
                    sion_disk::create_private_dir_all(parent).map_err(io_err("making", parent))?;
                }
                write_durable(&path, body)
            };
            for (rel, name) in manifest.files.iter().chain(latest.ledger.iter()) {
                write_file(rel, &fetch(Kind::File, name)?)?;
            }
            let key_path = staging.join("writer.key");
            sion_store::ledger::write_key(&sion_disk::Disk::os(), &key_path, writer)
                .map_err(MemoryError::from)?;

            // The log, atom by atom: the log derives its own files and checks each atom's bytes.
            {
                let (log, _) = Log::create(&staging.join("log"), LogOptions::default())?;
                for (k, name) in manifest.chunks.iter().enumerate() {
                    let plain = fetch(Kind::Chunk, name)?;
                    let atoms = chunk_atoms(&plain, k as u64 * manifest.chunk_atoms, name)?;
                    let count = atoms.len() as u64;
                    let appended = log.append(atoms)?;
                    if appended.iter().any(|a| !a.new)
                        || log.size() != k as u64 * manifest.chunk_atoms + count
                    {
                        return Err(ArchiveError::BadObject {
                            name: name.clone(),
                            why: "repeats atoms the log already holds".into(),
                        });
                    }
                    progress(log.size(), manifest.head.size);
                }
                let blobs = BlobStore::open(&staging.join("blobs"))?;
                for (hash, name) in &manifest.blobs {
                    let body = fetch(Kind::Blob, name)?;
                    if blake3::hash(&body).to_hex().as_str() != hash {
                        return Err(ArchiveError::BadObject {
                            name: name.clone(),
                            why: format!("is not blob {hash}"),
                        });
                    }
                    blobs.keep(&[body])?;
                }
                blobs.settle();
            }

            // Open it as its writer would, then check it against what the ledger committed.
            let memory = match Memory::options(&staging).connect(connect).open() {
                Err(sion_store::memory::OpenError::Diverged { committed, .. })
                    if committed > manifest.head.size =>
                {
                    return Err(ArchiveError::Behind { archived: manifest.head.size, committed });
                }
                other => other.map_err(MemoryError::from)?,
            };
            if let Some(expected) = ledger_key
                && memory.ledger().public_key() != *expected
            {
                return Err(ArchiveError::Mismatch(format!(
                    "its ledger signs with key {}, not the key given ({})",
                    hex::encode(memory.ledger().public_key().to_bytes()),
                    hex::encode(expected.to_bytes())
                )));
            }
            let pulse = memory.ledger().latest().map_err(MemoryError::from)?.header.number;
            if let Some(asked) = anchor.at_least_pulse
                && pulse < asked
            {
                return Err(ArchiveError::RolledBack { has: pulse, asked });
            }
            let n = manifest.head.size;
            let version = memory.version(Some(n)).map_err(|e| ArchiveError::Mismatch(e.to_string()))?;
            let on_ledger = version.head;
            let mut problems = Vec::new();
            if on_ledger.root != manifest.head.root {
                problems
                    .push(format!("the ledger committed root {} at {n} atoms", hex::encode(on_ledger.root)));
            }
            if memory.log().root_at(n)? != manifest.head.root {
                problems.push("the restored log's root is not the archived head's".into());
            }
            if on_ledger.index != manifest.head.index {
                problems.push("the ledger committed another index root".into());
            }
            let current = memory.committed().head;
            if on_ledger.manifest != root && current.manifest != root {
                problems.push(format!(
                    "the ledger's head names archive {}, not this one ({})",
                    hex::encode(current.manifest),
                    latest.root
                ));
            }
            match sion_store::memory::snapshot_of(memory.index_reader(), &version, memory.index_from()) {
                // Archived under an earlier index version: its head commits that version's
                // root, which this one does not rebuild; the log and the ledger agree above.
                Ok(_) | Err(sion_store::memory::ProveError::OldIndex { .. }) => {}
                Err(e) => problems.push(format!("the index rebuilt from the restored log: {e}")),
            }
            if !problems.is_empty() {
                return Err(ArchiveError::Mismatch(problems.join("; ")));
            }
            drop(memory);
            if to.exists() {
                fs::remove_dir(to).map_err(io_err("replacing the empty directory", to))?;
            }
            fs::rename(&staging, to).map_err(io_err("moving the restored memory into place", to))?;
            Ok(pulse)
        })();
        let pulse = match staged {
            Ok(pulse) => pulse,
            Err(e) => {
                return Err(match fs::remove_dir_all(&staging) {
                    Ok(()) => e,
                    Err(source) => ArchiveError::NotCleared { refused: Box::new(e), staging, source },
                });
            }
        };
        sync_dir(to.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))?;
        Ok(Restored {
            root,
            head: manifest.head,
            blobs: manifest.blobs.len(),
            files: manifest.files.len() + latest.ledger.len(),
            fetched_bytes: fetched,
            pulse,
        })
    }
}

/// Write a file and make it durable before the restore goes on.
fn write_durable(path: &Path, body: &[u8]) -> Result<(), ArchiveError> {
    // 0600 whatever the umask: a restored memory's files include its keys.
    sion_disk::Disk::os().write_file(path, body).map_err(io_err("writing", path))?;
    sync_dir(sion_disk::dir_of(path))
}

fn sync_dir(dir: &Path) -> Result<(), ArchiveError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("syncing", dir))
}

fn staging_of(to: &Path) -> PathBuf {
    let mut name = to.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".restoring");
    to.with_file_name(name)
}

/// A path from a manifest: relative, without `..`, so an archive can only write inside the
/// directory being restored.
fn safe_relative(rel: &str) -> Result<PathBuf, ArchiveError> {
    let path = PathBuf::from(rel);
    let ok = !rel.is_empty()
        && path.components().all(|c| matches!(c, std::path::Component::Normal(_)))
        && rel != "writer.key";
    if ok {
        Ok(path)
    } else {
        Err(ArchiveError::BadManifest(format!("file path {rel:?} is not inside a memory directory")))
    }
}

/// A chunk's atoms: u64 first position, u32 count, then each atom as u32 length and its bytes.
fn chunk_atoms(plain: &[u8], first: u64, name: &str) -> Result<Vec<Atom>, ArchiveError> {
    let bad = |why: String| ArchiveError::BadObject { name: name.to_owned(), why };
    let header: [u8; 12] =
        plain.get(..12).and_then(|h| h.try_into().ok()).ok_or_else(|| bad("short chunk".into()))?;
    let at = u64::from_le_bytes(header[..8].try_into().map_err(|_| bad("short chunk".into()))?);
    let count = u32::from_le_bytes(header[8..].try_into().map_err(|_| bad("short chunk".into()))?);
    if at != first {
        return Err(bad(format!("starts at position {at}, its place in the manifest is {first}")));
    }
    let mut atoms = Vec::with_capacity((count as usize).min(CHUNK_ATOMS as usize));
    let mut rest = &plain[12..];
    for i in 0..count {
        let len =
            rest.get(..4)
                .and_then(|l| l.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(|| bad(format!("atom {} is cut short", first + i as u64)))? as usize;
        let bytes =
            rest.get(4..4 + len).ok_or_else(|| bad(format!("atom {} is cut short", first + i as u64)))?;
        atoms.push(Atom::decode(bytes).map_err(|e| bad(format!("atom {}: {e}", first + i as u64)))?);
        rest = &rest[4 + len..];
    }
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes after its {count} atoms", rest.len())));
    }
    Ok(atoms)
}

/// The files of a memory directory an archive keeps: memory.json, the space (key stores,
/// members, records) and the lanes of sealed frames and tiles. Not `log/`, `index/` (derived),
/// `blobs/` (as blobs), the writer's key, the embedded ledger (after the manifest), locks.
fn memory_files(dir: &Path, ledger: Option<&Path>) -> Result<Vec<String>, ArchiveError> {
    let mut out = vec!["memory.json".to_owned()];
    for sub in ["space", "lanes"] {
        let root = dir.join(sub);
        if !root.exists() || ledger.is_some_and(|l| l == root) {
            continue;
        }
        for rel in tree_files(&root)? {
            out.push(Path::new(sub).join(rel).to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// Every file under `root` (relative, sorted), leaving out locks and temporary files.
fn tree_files(root: &Path) -> Result<Vec<PathBuf>, ArchiveError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for entry in fs::read_dir(&dir).map_err(io_err("reading", &dir))? {
            let entry = entry.map_err(io_err("reading", &dir))?;
            let name = entry.file_name();
            let name_str = name.to_string_lossy();
            if name_str == "LOCK" || name_str.ends_with(".tmp") || name_str.starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(io_err("reading", &entry.path()))?;
            if kind.is_dir() {
                stack.push(rel.join(&name));
            } else if kind.is_file() {
                out.push(rel.join(&name));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_open_only_for_their_writer_and_kind() {
        let a = ArchiveKeys::of(&SigningKey::from_bytes(&[7; 32]));
        let b = ArchiveKeys::of(&SigningKey::from_bytes(&[8; 32]));
        let (name, bytes) = a.seal(Kind::File, b"hello").unwrap();
        assert_eq!(a.seal(Kind::File, b"hello").unwrap().0, name, "the same bytes make the same object");
        assert_eq!(a.open(Kind::File, &name, &bytes).unwrap(), b"hello");
        assert!(a.open(Kind::Blob, &name, &bytes).is_err());
        assert!(b.open(Kind::File, &name, &bytes).is_err());
        let mut tampered = bytes.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        let tampered_name = blake3::hash(&tampered).to_hex().to_string();
        assert!(a.open(Kind::File, &tampered_name, &tampered).is_err());
        assert!(a.open(Kind::File, &name, &tampered).is_err());
    }

    #[test]
    fn chunks_refuse_what_does_not_add_up() {
        assert!(chunk_atoms(&[0; 5], 0, "x").is_err());
        let mut plain = 0u64.to_le_bytes().to_vec();
        plain.extend_from_slice(&1u32.to_le_bytes());
        plain.extend_from_slice(&100u32.to_le_bytes());
        assert!(chunk_atoms(&plain, 0, "x").is_err(), "a length past the end");
        assert!(safe_relative("../etc/passwd").is_err());
        assert!(safe_relative("/etc/passwd").is_err());
        assert!(safe_relative("writer.key").is_err());
        assert!(safe_relative("space/keys/x").is_ok());
    }
}
