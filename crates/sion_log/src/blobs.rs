//! The blob store: the bytes that atoms commit to by hash (map tiles, camera frames), kept
//! beside the log in append-only pack files (`blobs/pack-000000.blobs`, …). A robot's camera
//! gives millions of frames; one file each would spend more time creating inodes than writing
//! pixels, so frames are appended to a pack instead, many per write and one `fdatasync` per
//! batch.
//!
//! A pack is the magic `SIONBLB1`, then records: the body's length (u64, little-endian), its
//! BLAKE3 hash (32 bytes), the body. Keep blobs before remembering the atoms that commit to
//! them, so no durable atom points at nothing. The closed packs are found through index runs
//! on disk (`blob_index`); on open the last pack is indexed by walking its record headers, and
//! the records of its last 512 MiB are checked against their hashes (one that fails is left
//! out of the index, so keeping it again writes it again).
//! Opening changes no pack (a reader's open writes nothing at all; a writer's may write index
//! runs): a torn tail of the last pack (a record running past the end) is cut only when a
//! blob is next kept, and its bytes are first copied to `torn/`. Reading checks
//! the hash again: a corrupted blob is an error, never silent.

use std::collections::HashMap;
use std::fs;

use sion_disk::{Disk, File, Open};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::blob_index;

/// Why a blob could not be kept or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    #[error("{} is not a blob pack, or is damaged before its end: {why}", path.display())]
    BadPack { path: PathBuf, why: String },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BlobError {
    let path = path.to_owned();
    move |source| BlobError::Io { what, path, source }
}

const MAGIC: &[u8; 8] = b"SIONBLB1";
/// A record's header: the body's length and hash.
const HEADER: u64 = 8 + 32;
/// A pack past this size, or holding this many blobs, is closed and the next one begun: what
/// the store holds in memory is bounded by them.
const PACK_LIMIT: u64 = 1 << 30;
const PACK_BLOBS: u64 = 1 << 16;
/// How much of the last pack's end is checked against its hashes on open: more than any one
/// batch writes, so whatever a crash interrupted is inside it.
const VERIFY_TAIL: u64 = 512 << 20;

#[derive(Debug, Clone, Copy)]
struct Location {
    pack: u32,
    /// Where the body begins.
    offset: u64,
    len: u64,
}

#[derive(Debug)]
struct State {
    /// The current pack's blobs, and any a closed pack holds that the runs do not cover (a
    /// reader's store whose index runs are missing, or a run that failed to be written).
    index: HashMap<[u8; 32], Location>,
    /// Blobs in the current pack.
    current_blobs: u64,
    /// The closed packs' index on disk.
    runs: blob_index::Index,
    /// Whether this process writes the store (a reader writes nothing, index runs included).
    writer: bool,
    /// An index merge is under way on a thread of its own.
    merging: bool,
    /// The pack being appended to and its durable length.
    current: Option<(u32, File, u64)>,
    next_pack: u32,
    /// The current pack holds bytes past its durable length that a crash left: they are set
    /// aside and cut before the next write, not at open, so a reader changes nothing.
    torn_tail: bool,
    /// Whether `current` was opened for writing (packs are opened read-only at open).
    writable: bool,
    /// What opening found wrong: packs the list names that are gone, a last pack cut short.
    damage: Vec<String>,
    /// The current pack's name may not be durable yet (the directory's fsync failed).
    name_pending: bool,
}

/// The list of packs ever begun, a name a line: a pack that is gone is known to be lost, not
/// mistaken for blobs kept elsewhere.
const PACKS: &str = "PACKS";

/// What repairs cut from the packs, a line each: blobs lost there are named lost, not taken
/// for blobs kept elsewhere.
const REPAIRED: &str = "REPAIRED";

/// What [`BlobStore::repair`] did to one pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackRepair {
    pub pack: PathBuf,
    /// Bytes of the pack kept (its records before the damage).
    pub kept_bytes: u64,
    /// Where the rest went, and how many bytes it holds.
    pub set_aside: PathBuf,
    pub bytes: u64,
    pub why: String,
}

/// A content-addressed store of blobs in a directory.
#[derive(Debug, Clone)]
pub struct BlobStore {
    disk: Disk,
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    pack_limit: u64,
}

fn pack_name(n: u32) -> String {
    format!("pack-{n:06}.blobs")
}

fn read_at(file: &fs::File, path: &Path, offset: u64, buf: &mut [u8]) -> Result<(), BlobError> {
    file.read_exact_at(buf, offset).map_err(io_err("reading", path))
}

impl BlobStore {
    /// The store in `dir` to read only: a missing directory is an empty store, not made.
    pub fn open_read_only(dir: &Path) -> Result<Self, BlobError> {
        if !dir.exists() {
            let state = State {
                index: HashMap::new(),
                current_blobs: 0,
                runs: blob_index::Index::empty(&dir.join("index")),
                writer: false,
                merging: false,
                current: None,
                next_pack: 0,
                torn_tail: false,
                writable: false,
                damage: Vec::new(),
                name_pending: false,
            };
            return Ok(Self {
                disk: Disk::os(),
                dir: dir.to_owned(),
                state: Arc::new(Mutex::new(state)),
                pack_limit: PACK_LIMIT,
            });
        }
        Self::open_with(&Disk::os(), dir, false)
    }

    /// The store in `dir`, created if absent; a torn tail a crash left is cut.
    pub fn open(dir: &Path) -> Result<Self, BlobError> {
        Self::open_on(&Disk::os(), dir)
    }

    /// The same, writing through `disk`.
    pub fn open_on(disk: &Disk, dir: &Path) -> Result<Self, BlobError> {
        Self::open_with(disk, dir, true)
    }

    /// Open; `writer` says whether this process writes the store (and so may write the index
    /// runs the packs lack): a reader changes nothing.
    fn open_with(disk: &Disk, dir: &Path, writer: bool) -> Result<Self, BlobError> {
        if writer {
            disk.create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        let mut packs: Vec<u32> = fs::read_dir(dir)
            .map_err(io_err("listing", dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                name.strip_prefix("pack-")?.strip_suffix(".blobs")?.parse().ok()
            })
            // The last number is never a pack's: the next would not have one.
            .filter(|&n: &u32| n < u32::MAX)
            .collect();
        packs.sort_unstable();
        let mut damage = Vec::new();
        match fs::read_to_string(dir.join(PACKS)) {
            Ok(list) => {
                for name in list.lines().filter(|l| !l.is_empty()) {
                    let n: Option<u32> =
                        name.strip_prefix("pack-").and_then(|n| n.strip_suffix(".blobs")?.parse().ok());
                    if n.is_some_and(|n| !packs.contains(&n)) {
                        damage.push(format!("{name} is gone"));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("reading", &dir.join(PACKS))(e)),
        }
        match fs::read_to_string(dir.join(REPAIRED)) {
            Ok(list) => damage.extend(list.lines().filter(|l| !l.is_empty()).map(str::to_owned)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("reading", &dir.join(REPAIRED))(e)),
        }
        // The closed packs through their index runs (built from the packs where missing);
        // the last one, being written to, by its record headers.
        let mut closed = Vec::with_capacity(packs.len());
        for &pack in &packs[..packs.len().saturating_sub(1)] {
            let path = dir.join(pack_name(pack));
            closed.push((pack, fs::metadata(&path).map_err(io_err("reading the size of", &path))?.len()));
        }
        let (runs, loose) = blob_index::Index::open(disk, &dir.join("index"), &closed, writer, |pack| {
            let path = dir.join(pack_name(pack));
            let file = disk.open(&path, Open::Read).map_err(io_err("opening", &path))?;
            let mut found = HashMap::new();
            scan(&file, &path, pack, false, &mut found)?;
            Ok(found
                .into_iter()
                .map(|(hash, at)| blob_index::Entry { hash, pack: at.pack, offset: at.offset, len: at.len })
                .collect())
        })?;
        let mut index: HashMap<[u8; 32], Location> = loose
            .into_iter()
            .map(|e| (e.hash, Location { pack: e.pack, offset: e.offset, len: e.len }))
            .collect();
        let mut current = None;
        let mut torn_tail = false;
        let mut current_blobs = 0;
        if let Some(&pack) = packs.last() {
            let path = dir.join(pack_name(pack));
            // Read-only until a blob is kept, so a memory on read-only media opens.
            let file = disk.open(&path, Open::Read).map_err(io_err("opening", &path))?;
            let mut found = HashMap::new();
            let (durable, len) = scan(&file, &path, pack, true, &mut found)?;
            current_blobs = found.len() as u64;
            for (hash, at) in found {
                index.entry(hash).or_insert(at);
            }
            torn_tail = durable < len;
            if torn_tail {
                damage.push(format!("{} ends inside a record at byte {durable}", pack_name(pack)));
            }
            current = Some((pack, file, durable));
        }
        let next_pack = packs.last().map_or(0, |p| p + 1);
        let state = State {
            index,
            current_blobs,
            runs,
            writer,
            merging: false,
            current,
            next_pack,
            torn_tail,
            writable: false,
            damage,
            name_pending: false,
        };
        Ok(Self {
            disk: disk.clone(),
            dir: dir.to_owned(),
            state: Arc::new(Mutex::new(state)),
            pack_limit: PACK_LIMIT,
        })
    }

    /// Make the current pack writable, setting aside and cutting a torn tail first.
    fn writable(&self, pack: u32, durable: u64, torn_tail: bool) -> Result<(File, u64), BlobError> {
        let path = self.dir.join(pack_name(pack));
        let file = self.disk.open(&path, Open::Existing).map_err(io_err("opening", &path))?;
        // Made by a process whose fsync of the directory failed: its name is made durable
        // before anything is acknowledged in it.
        self.disk.sync_dir(&self.dir).map_err(io_err("syncing", &self.dir))?;
        if torn_tail {
            let len = file.metadata().map_err(io_err("reading the size of", &path))?.len();
            let torn = self.dir.join("torn");
            self.disk.create_dir_all(&torn).map_err(io_err("creating", &torn))?;
            let aside = torn.join(format!("{}-at-{durable}", pack_name(pack)));
            super::copy_tail(&self.disk, &file, durable, len, &aside).map_err(io_err("writing", &aside))?;
            tracing::warn!(
                "{}: cut a torn tail at byte {durable} ({} bytes, kept in {})",
                path.display(),
                len - durable,
                aside.display()
            );
            file.set_len(durable).map_err(io_err("cutting", &path))?;
            file.sync_all().map_err(io_err("syncing", &path))?;
        }
        let mut start = durable;
        if start < MAGIC.len() as u64 {
            // Created, then the crash came before its magic was durable.
            file.write_all_at(MAGIC, 0).map_err(io_err("writing", &path))?;
            start = MAGIC.len() as u64;
        }
        Ok((file, start))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What opening found wrong with the packs (gone, cut short); empty when nothing. A blob
    /// an atom commits to that is not held is lost if there is damage, else kept elsewhere.
    pub fn damage(&self) -> Vec<String> {
        self.state().damage.clone()
    }

    pub fn contains(&self, hash: &[u8; 32]) -> bool {
        self.state().locate(&self.disk, &self.dir, hash).is_some()
    }

    /// How many blobs the store holds.
    pub fn len(&self) -> usize {
        let state = self.state();
        state.index.len() + state.runs.count() as usize
    }

    /// The index runs on disk, as (first pack, end pack, blobs): for tests and `audit`.
    pub fn index_runs(&self) -> Vec<(u32, u32, u64)> {
        self.state().runs.runs()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep blobs durably; returns their hashes. Blobs already held are not written again.
    /// All new ones go into one write and one `fdatasync`, however many there are.
    pub fn keep<B: AsRef<[u8]>>(&self, blobs: &[B]) -> Result<Vec<[u8; 32]>, BlobError> {
        let hashes: Vec<[u8; 32]> = blobs.iter().map(|b| *blake3::hash(b.as_ref()).as_bytes()).collect();
        let mut state = self.state();
        let mut fresh: Vec<usize> = Vec::new();
        for (i, hash) in hashes.iter().enumerate() {
            if state.locate(&self.disk, &self.dir, hash).is_none()
                && !fresh.iter().any(|&j| hashes[j] == *hash)
            {
                fresh.push(i);
            }
        }
        if fresh.is_empty() {
            return Ok(hashes);
        }
        // The pack opened read-only at open becomes writable at the first write, its torn tail
        // (if a crash left one) set aside and cut then, full or not.
        if let Some((pack, file, size)) = state.current.take() {
            if state.writable {
                state.current = Some((pack, file, size));
            } else {
                match self.writable(pack, size, state.torn_tail) {
                    Ok((file, start)) => {
                        state.current = Some((pack, file, start));
                        state.torn_tail = false;
                        state.writable = true;
                    }
                    Err(e) => {
                        state.current = Some((pack, file, size));
                        return Err(e);
                    }
                }
            }
        }
        let (pack, file, start, created) = match state.current.take() {
            Some((pack, file, size)) if size < self.pack_limit && state.current_blobs < PACK_BLOBS => {
                (pack, file, size, false)
            }
            closing => {
                let pack = state.next_pack;
                let path = self.dir.join(pack_name(pack));
                // Named in the list before it exists, so its loss is never silent.
                let list = self.dir.join(PACKS);
                let is_new = !list.exists();
                self.disk
                    .open(&list, Open::Create)
                    .and_then(|f| {
                        f.write_all_at(format!("{}\n", pack_name(pack)).as_bytes(), f.len()?)?;
                        f.sync_data()
                    })
                    .and_then(|()| if is_new { self.disk.sync_dir(&self.dir) } else { Ok(()) })
                    .map_err(io_err("writing", &list))?;
                // Truncated if there: only an attempt of this process that failed can have left
                // a pack numbered past every pack found at open, and it holds nothing kept.
                let file = self.disk.open(&path, Open::Truncate).map_err(io_err("creating", &path))?;
                file.write_all_at(MAGIC, 0).map_err(io_err("writing", &path))?;
                state.next_pack = pack + 1;
                // The next pack is begun (and named in the list) before the last one's entries
                // go to disk, so a crash between finds the run covering only closed packs.
                if let Some((closed, _, len)) = closing {
                    self.close_pack(&mut state, closed, len);
                }
                (pack, file, MAGIC.len() as u64, true)
            }
        };
        let mut buf =
            Vec::with_capacity(fresh.iter().map(|&i| HEADER as usize + blobs[i].as_ref().len()).sum());
        let mut placed = Vec::with_capacity(fresh.len());
        for &i in &fresh {
            let body = blobs[i].as_ref();
            buf.extend_from_slice(&(body.len() as u64).to_le_bytes());
            buf.extend_from_slice(&hashes[i]);
            let offset = start + buf.len() as u64;
            buf.extend_from_slice(body);
            placed.push((hashes[i], Location { pack, offset, len: body.len() as u64 }));
        }
        state.writable = true;
        let sync_name = created || state.name_pending;
        let written = self.append(pack, &file, start, &buf, sync_name);
        state.name_pending = sync_name && written.is_err();
        // The pack stays current either way; a failed write left nothing durable past `start`,
        // and the next one overwrites it.
        let end = if written.is_ok() { start + buf.len() as u64 } else { start };
        state.current = Some((pack, file, end));
        if created {
            state.current_blobs = 0;
        }
        written?;
        state.current_blobs += placed.len() as u64;
        state.index.extend(placed);
        drop(state);
        if created {
            self.merge_runs();
        }
        Ok(hashes)
    }

    /// Merge index runs on a thread of its own, so neither keeping nor reading blobs waits
    /// for a merge (the largest rewrites the whole index); readers use the runs as they are
    /// until the merged one is swapped in.
    fn merge_runs(&self) {
        let mut state = self.state();
        if state.merging || !state.writer {
            return;
        }
        let Some(pair) = state.runs.next_merge() else { return };
        state.merging = true;
        drop(state);
        let (disk, shared, runs_dir) = (self.disk.clone(), self.state.clone(), self.dir.join("index"));
        let started = std::thread::Builder::new().name("blob-index-merge".into()).spawn(move || {
            let mut next = Some(pair);
            while let Some((a, b)) = next.take() {
                let merged = blob_index::merge_runs(&disk, &runs_dir, &a, &b);
                let mut state = shared.lock().unwrap_or_else(PoisonError::into_inner);
                match merged {
                    Ok(merged) => {
                        for old in state.runs.replace(&a, &b, merged) {
                            let _ = disk.remove_file(&old);
                        }
                        next = state.runs.next_merge();
                    }
                    // The runs stay as they are: lookups read one more; the next open merges.
                    Err(why) => tracing::warn!("the blob index: merging: {why}"),
                }
                if next.is_none() {
                    state.merging = false;
                }
            }
        });
        if started.is_err() {
            self.state().merging = false;
        }
    }

    /// Wait for index merges under way to finish (tests; a store that is dropped leaves a
    /// merge it interrupts to the next open).
    pub fn settle(&self) {
        while self.state().merging {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A pack is full: its blobs' entries leave memory for an index run on disk (or stay, if
    /// the run cannot be written: it is a cache, rebuilt at the next open).
    fn close_pack(&self, state: &mut State, pack: u32, len: u64) {
        let entries: Vec<blob_index::Entry> = state
            .index
            .iter()
            .filter(|(_, at)| at.pack == pack)
            .map(|(hash, at)| blob_index::Entry { hash: *hash, pack, offset: at.offset, len: at.len })
            .collect();
        match state.runs.add(&self.disk, pack, len, entries) {
            Ok(()) => state.index.retain(|_, at| at.pack != pack),
            Err(why) => tracing::warn!("the blob index: {why}; pack {pack}'s entries stay in memory"),
        }
    }

    /// Write `buf` at the durable end `start` of a pack and make it durable (and the pack's
    /// name, when it is new).
    fn append(&self, pack: u32, file: &File, start: u64, buf: &[u8], created: bool) -> Result<(), BlobError> {
        let path = self.dir.join(pack_name(pack));
        file.write_all_at(buf, start).map_err(io_err("writing", &path))?;
        file.sync_data().map_err(io_err("syncing", &path))?;
        if created {
            self.disk.sync_dir(&self.dir).map_err(io_err("syncing", &self.dir))?;
        }
        Ok(())
    }

    /// Repair the store in `dir` (not open elsewhere): a pack damaged before its end keeps its
    /// records before the damage, and the rest is copied into `torn/` and cut off (a pack whose
    /// magic is damaged is moved there whole). The blobs past the damage are lost, and say so:
    /// each cut is written to `REPAIRED`, which opening reads as damage, so `audit` names the
    /// atoms that commit to them.
    pub fn repair(disk: &Disk, dir: &Path) -> Result<Vec<PackRepair>, BlobError> {
        let mut out = Vec::new();
        if !dir.exists() {
            return Ok(out);
        }
        let mut packs: Vec<u32> = fs::read_dir(dir)
            .map_err(io_err("listing", dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name().to_str()?.strip_prefix("pack-")?.strip_suffix(".blobs")?.parse().ok()
            })
            .collect();
        packs.sort_unstable();
        let torn = dir.join("torn");
        for pack in packs {
            let path = dir.join(pack_name(pack));
            let file = disk.open(&path, Open::Existing).map_err(io_err("opening", &path))?;
            let len = file.len().map_err(io_err("reading the size of", &path))?;
            let (durable, why) = match scan(&file, &path, pack, true, &mut HashMap::new()) {
                Ok((durable, _)) if durable >= len => continue,
                Ok((durable, _)) => (durable, format!("damaged at byte {durable}")),
                Err(BlobError::BadPack { why, .. }) => (0, why),
                Err(e) => return Err(e),
            };
            if out.is_empty() {
                // The index runs point into the packs as they are: removed (durably) before
                // any is cut, and made again at the next open.
                let runs = dir.join("index");
                if let Ok(listing) = fs::read_dir(&runs) {
                    for run in listing.flatten() {
                        disk.remove_file(&run.path()).map_err(io_err("removing", &run.path()))?;
                    }
                    disk.sync_dir(&runs).map_err(io_err("syncing", &runs))?;
                }
            }
            disk.create_dir_all(&torn).map_err(io_err("creating", &torn))?;
            let aside = super::unused_name(torn.join(format!("{}-at-{durable}", pack_name(pack))));
            if durable == 0 {
                drop(file);
                disk.rename(&path, &aside).map_err(io_err("moving aside", &path))?;
            } else {
                super::copy_tail(disk, &file, durable, len, &aside).map_err(io_err("writing", &aside))?;
                disk.sync_dir(&torn).map_err(io_err("syncing", &torn))?;
                file.set_len(durable).and_then(|()| file.sync_all()).map_err(io_err("cutting", &path))?;
            }
            out.push(PackRepair {
                pack: path,
                kept_bytes: durable,
                set_aside: aside,
                bytes: len - durable,
                why,
            });
        }
        if !out.is_empty() {
            let list = dir.join(REPAIRED);
            let f = disk.open(&list, Open::Create).map_err(io_err("opening", &list))?;
            let mut text = String::new();
            for r in &out {
                let name = r.pack.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                text.push_str(&format!(
                    "{name} was repaired: {} bytes from byte {} on, and the blobs in them, set aside ({})\n",
                    r.bytes, r.kept_bytes, r.why
                ));
            }
            f.write_all_at(text.as_bytes(), f.len().map_err(io_err("reading", &list))?)
                .and_then(|()| f.sync_all())
                .and_then(|()| disk.sync_dir(&torn))
                .and_then(|()| disk.sync_dir(dir))
                .map_err(io_err("writing", &list))?;
        }
        Ok(out)
    }

    /// The blob with this hash, checked against it.
    pub fn get(&self, hash: &[u8; 32]) -> Result<Vec<u8>, BlobError> {
        let at = self
            .state()
            .locate(&self.disk, &self.dir, hash)
            .ok_or_else(|| BlobError::Missing(hex::encode(hash)))?;
        let path = self.dir.join(pack_name(at.pack));
        let file = fs::File::open(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                BlobError::Missing(format!("{} (its pack is gone)", hex::encode(hash)))
            }
            _ => io_err("opening", &path)(e),
        })?;
        let mut bytes = vec![0; usize::try_from(at.len).map_err(|_| BlobError::Corrupt(hex::encode(hash)))?];
        read_at(&file, &path, at.offset, &mut bytes)?;
        if blake3::hash(&bytes).as_bytes() != hash {
            return Err(BlobError::Corrupt(hex::encode(hash)));
        }
        Ok(bytes)
    }
}

impl State {
    /// Where the blob with this hash is: in memory, else in the runs. A run found damaged is
    /// dropped and its packs read into memory (the next writer's open writes it again).
    fn locate(&mut self, disk: &Disk, dir: &Path, hash: &[u8; 32]) -> Option<Location> {
        if let Some(at) = self.index.get(hash) {
            return Some(*at);
        }
        loop {
            match self.runs.find(hash) {
                Ok(found) => return found.map(|e| Location { pack: e.pack, offset: e.offset, len: e.len }),
                Err(why) => {
                    tracing::warn!("the blob index: {why}; reading its packs instead");
                    let (packs, path) = self.runs.forget_damaged(hash)?;
                    // A writer removes it, so the next open writes it again.
                    if self.writer {
                        let _ = disk.remove_file(&path);
                    }
                    for pack in packs {
                        let path = dir.join(pack_name(pack));
                        let Ok(file) = fs::File::open(&path) else { continue };
                        if let Err(e) = scan(&file, &path, pack, false, &mut self.index) {
                            tracing::warn!("{e}");
                        }
                    }
                    if let Some(at) = self.index.get(hash) {
                        return Some(*at);
                    }
                }
            }
        }
    }
}

/// Index a pack's records; returns the length up to its last whole record and the file's
/// length. In the last pack a torn tail is left for the next write to cut; in an earlier one
/// it is an error. Nothing is written.
fn scan(
    file: &fs::File,
    path: &Path,
    pack: u32,
    last: bool,
    index: &mut HashMap<[u8; 32], Location>,
) -> Result<(u64, u64), BlobError> {
    let size = file.metadata().map_err(io_err("reading the size of", path))?.len();
    let bad = |why: String| BlobError::BadPack { path: path.to_owned(), why };
    let mut magic = [0u8; 8];
    if size < MAGIC.len() as u64 || {
        read_at(file, path, 0, &mut magic)?;
        &magic != MAGIC
    } {
        if last && size < MAGIC.len() as u64 {
            // Created, then the crash came before its magic was durable: empty, and the next
            // write begins it again.
            return Ok((0, size));
        }
        return Err(bad("it does not begin with the pack magic".into()));
    }
    let mut at = MAGIC.len() as u64;
    let mut cut = None;
    while at < size {
        let mut header = [0u8; HEADER as usize];
        if at + HEADER > size {
            cut = Some((at, "a record's header runs past the end"));
            break;
        }
        read_at(file, path, at, &mut header)?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&header[..8]);
        let len = u64::from_le_bytes(len);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&header[8..]);
        let body = at + HEADER;
        if len > size - body {
            cut = Some((at, "a record's body runs past the end"));
            break;
        }
        if last && body + len + VERIFY_TAIL > size {
            let mut bytes = vec![0; usize::try_from(len).map_err(|_| bad("a record too large".into()))?];
            read_at(file, path, body, &mut bytes)?;
            if blake3::hash(&bytes).as_bytes() != &hash {
                // Written but not durable when a crash came (or rotten since): left out of the
                // index, so keeping it again writes it again. What follows is still read.
                tracing::warn!(
                    "{}: the record at byte {at} does not match its hash; leaving it out",
                    path.display()
                );
                at = body + len;
                continue;
            }
        }
        index.entry(hash).or_insert(Location { pack, offset: body, len });
        at = body + len;
    }
    if let Some((at, why)) = cut {
        if !last {
            return Err(bad(format!("{why} at byte {at}")));
        }
        // What a crash interrupted: no atom refers to it, for atoms are appended only after
        // their blobs are durable. (A pack cut short by other hands is found by `audit`.)
        tracing::warn!("{}: a torn tail at byte {at} ({why}); cut at the next write", path.display());
        return Ok((at, size));
    }
    Ok((size, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_pack_damaged_before_the_last_is_cut_by_repair_and_its_lost_blobs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let (a, b) = (vec![1u8; 300], vec![2u8; 400]);
        let h = store.keep(&[&a, &b]).unwrap();
        drop(store);
        // A second pack after it, made elsewhere and moved in.
        let other = tempfile::tempdir().unwrap();
        let c = vec![3u8; 500];
        let hc = BlobStore::open(other.path()).unwrap().keep(&[&c]).unwrap()[0];
        fs::rename(other.path().join(pack_name(0)), dir.path().join(pack_name(1))).unwrap();
        // The second record's length in the first pack says more than the pack holds.
        let pack = dir.path().join(pack_name(0));
        let mut bytes = fs::read(&pack).unwrap();
        let second = (MAGIC.len() as u64 + HEADER + 300) as usize;
        bytes[second + 7] = 0x40;
        fs::write(&pack, &bytes).unwrap();
        assert!(
            matches!(BlobStore::open(dir.path()), Err(BlobError::BadPack { .. })),
            "a damaged earlier pack"
        );

        let repaired = BlobStore::repair(&Disk::os(), dir.path()).unwrap();
        assert_eq!(repaired.len(), 1);
        assert_eq!(repaired[0].kept_bytes, second as u64);
        assert_eq!(fs::read(&repaired[0].set_aside).unwrap(), bytes[second..], "the tail is kept aside");
        let store = BlobStore::open(dir.path()).unwrap();
        assert_eq!(store.get(&h[0]).unwrap(), a, "the blob before the damage");
        assert!(matches!(store.get(&h[1]), Err(BlobError::Missing(_))));
        assert_eq!(store.get(&hc).unwrap(), c, "the later pack");
        assert!(store.damage().iter().any(|d| d.contains("was repaired")), "{:?}", store.damage());
        assert!(BlobStore::repair(&Disk::os(), dir.path()).unwrap().is_empty(), "nothing more to repair");
    }

    /// A camera keeps millions of frames: the closed packs' entries live in index runs on
    /// disk, not in memory, and opening reads the runs instead of every pack.
    #[test]
    fn closed_packs_are_found_through_index_runs_that_are_rebuilt_when_lost() {
        let dir = tempfile::tempdir().unwrap();
        let blob = |i: u32| format!("frame {i} ").repeat(40).into_bytes();
        let mut store = BlobStore::open(dir.path()).unwrap();
        store.pack_limit = 4000; // about 10 blobs a pack
        let mut hashes = Vec::new();
        for i in 0..230u32 {
            hashes.extend(store.keep(&[blob(i)]).unwrap());
        }
        store.settle();
        let runs = store.index_runs();
        let packs = runs.last().map_or(0, |r| r.1);
        assert!(packs >= 20, "{runs:?}");
        assert!(runs.len() <= 5, "a binary counter of {packs} packs: {runs:?}");
        let in_runs: u64 = runs.iter().map(|r| r.2).sum();
        assert_eq!(store.state().index.len() as u64 + in_runs, 230);
        assert!(store.state().index.len() <= 11, "only the current pack's blobs are in memory");
        drop(store);

        let check = |store: &BlobStore| {
            for (i, h) in hashes.iter().enumerate() {
                let got =
                    store.get(h).unwrap_or_else(|e| panic!("blob {i}: {e}; runs {:?}", store.index_runs()));
                assert_eq!(got, blob(i as u32), "blob {i}");
            }
            assert!(!store.contains(&[9; 32]));
            assert_eq!(store.len(), 230);
        };
        let store = BlobStore::open(dir.path()).unwrap();
        assert_eq!(store.index_runs(), runs, "opened from the runs");
        check(&store);
        drop(store);

        // Lost: a reader holds the closed packs in memory and writes nothing; a writer makes
        // the runs again.
        fs::remove_dir_all(dir.path().join("index")).unwrap();
        let reader = BlobStore::open_read_only(dir.path()).unwrap();
        assert!(reader.index_runs().is_empty());
        check(&reader);
        assert!(!dir.path().join("index").exists(), "a reader changes nothing");
        let store = BlobStore::open(dir.path()).unwrap();
        assert_eq!(store.index_runs().iter().map(|r| r.2).sum::<u64>(), in_runs);
        check(&store);
        drop(store);

        // Damaged inside a block: found on lookup, its packs read instead.
        let first = dir.path().join("index").join(
            fs::read_dir(dir.path().join("index")).unwrap().flatten().map(|e| e.file_name()).min().unwrap(),
        );
        let mut bytes = fs::read(&first).unwrap();
        bytes[40] ^= 0x55;
        fs::write(&first, &bytes).unwrap();
        let reader = BlobStore::open_read_only(dir.path()).unwrap();
        check(&reader);
    }

    #[test]
    fn blobs_are_kept_once_and_read_back_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let hashes = store.keep(&[b"tile".as_slice(), b"frame", b"tile"]).unwrap();
        assert_eq!(hashes[0], hashes[2]);
        assert_eq!(store.len(), 2);
        assert_eq!(store.get(&hashes[1]).unwrap(), b"frame");
        assert!(matches!(store.get(&[7; 32]), Err(BlobError::Missing(_))));
        store.keep(&[b"frame".as_slice()]).unwrap();
        assert_eq!(store.len(), 2, "kept once");

        // A flipped byte is found on reading.
        let pack = dir.path().join(pack_name(0));
        let mut bytes = fs::read(&pack).unwrap();
        let at = bytes.windows(4).position(|w| w == b"tile").unwrap();
        bytes[at] ^= 1;
        fs::write(&pack, &bytes).unwrap();
        let store = BlobStore::open(&dir.path().join("other")).unwrap();
        assert!(store.is_empty());
        // The flipped record is in the checked tail: left out, and the one after it kept.
        let reopened = BlobStore::open(dir.path()).unwrap();
        assert!(!reopened.contains(&hashes[0]));
        assert_eq!(reopened.get(&hashes[1]).unwrap(), b"frame");
        reopened.keep(&[b"tile".as_slice()]).unwrap();
        assert_eq!(reopened.get(&hashes[0]).unwrap(), b"tile", "kept again, written again");
    }

    #[test]
    fn a_torn_tail_is_cut_at_the_next_write_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let kept = store.keep(&[vec![1u8; 1000], vec![2u8; 2000]]).unwrap();
        drop(store);
        // A crash in the middle of the next batch: a header and half a body.
        let pack = dir.path().join(pack_name(0));
        let durable = fs::metadata(&pack).unwrap().len();
        let mut f = fs::OpenOptions::new().append(true).open(&pack).unwrap();
        f.write_all(&500u64.to_le_bytes()).unwrap();
        f.write_all(&[9u8; 32]).unwrap();
        f.write_all(&[3u8; 100]).unwrap();
        drop(f);
        let torn_len = fs::metadata(&pack).unwrap().len();
        let store = BlobStore::open(dir.path()).unwrap();
        // Opening reads; it changes nothing, and says what it found.
        assert_eq!(fs::metadata(&pack).unwrap().len(), torn_len);
        assert_eq!(store.damage(), vec![format!("{} ends inside a record at byte {durable}", pack_name(0))]);
        assert_eq!(store.get(&kept[1]).unwrap(), vec![2u8; 2000]);
        // The next write sets the tail aside, cuts it and writes where it began.
        let more = store.keep(&[vec![4u8; 10]]).unwrap();
        let aside = dir.path().join("torn").join(format!("{}-at-{durable}", pack_name(0)));
        assert_eq!(fs::read(aside).unwrap().len() as u64, torn_len - durable);
        assert_eq!(fs::metadata(&pack).unwrap().len(), durable + HEADER + 10);
        let store = BlobStore::open(dir.path()).unwrap();
        assert_eq!(store.len(), 3);
        assert_eq!(store.get(&more[0]).unwrap(), vec![4u8; 10]);
    }
}
