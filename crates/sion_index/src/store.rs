//! Where the index's records live (docs/INDEX-STORE.md): an append-only node file of
//! checksummed records, a roots file naming the root record of every sealed version, and a
//! checkpoint saying how much of both is durable. Records are immutable, so a reader holding a
//! version's root reads without any lock on the writer, and a cache of decoded records never
//! needs invalidating: its budget is the only thing that bounds it.
//!
//! The same store runs over files (a memory's `index/` directory) or over memory (an index
//! built for a test or a benchmark).

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};

use sion_disk::{Disk, Open};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use sion_verify::merkle::Digest;

use super::IndexError;
use super::record::{Ptr, Record, RootRec, encode_run};
use super::tree::Entry;

const FORMAT: &str = "sion-index-store 5\n";
/// The node file starts with this, so no record is at offset 0 ("no pointer").
const NODES_MAGIC: &[u8; 8] = b"SIONIDX1";
/// A record is at most this long: a full block is about 0.5 MiB.
const MAX_RECORD: usize = 16 << 20;
/// One entry of the roots file: u64 version, u64 pointer, u32 record length, u32 CRC-32C.
const ROOT_ENTRY: u64 = 24;
const CHECKPOINT_LEN: usize = 8 * 3 + 32 + 4;
/// Left in the directory when a read finds a record damaged: the next open rebuilds.
const DAMAGED: &str = "DAMAGED";
/// Bytes read at once for a record not cached: its header and most bodies.
const FIRST_READ: usize = 512;

/// Where a store's bytes go.
trait Backend: Send + Sync {
    fn len(&self) -> io::Result<u64>;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    fn sync(&self) -> io::Result<()>;
}

impl Backend for sion_disk::shadow::DiskFile {
    fn len(&self) -> io::Result<u64> {
        sion_disk::shadow::DiskFile::len(self)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(bytes, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        sion_disk::shadow::DiskFile::set_len(self, len)
    }
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
}

/// The bytes of a store in memory, as the segments they were written in: one contiguous vector
/// was doubled as a build grew it, each time zeroed and copied (a tenth of a build's seal,
/// measured, for 290 MB of records).
#[derive(Default)]
struct MemBackend(RwLock<Segments>);

#[derive(Default)]
struct Segments {
    /// Each segment's first offset, ascending; the first is 0.
    starts: Vec<u64>,
    segs: Vec<Vec<u8>>,
    len: u64,
}

/// Where `len` bytes from `offset` lie, all below `total`, in segments starting at `starts`:
/// each piece's segment, where in it the piece starts, and its length, in order.
fn spans(
    starts: &[u64],
    total: u64,
    offset: u64,
    len: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let mut i = starts.partition_point(|&s| s <= offset).saturating_sub(1);
    let (mut at, mut left) = (offset, len);
    std::iter::from_fn(move || {
        let start = *starts.get(i)?;
        let end = starts.get(i + 1).copied().unwrap_or(total);
        let n = (end.saturating_sub(at) as usize).min(left);
        if n == 0 {
            return None;
        }
        let piece = (i, (at - start) as usize, n);
        (i, at, left) = (i + 1, at + n as u64, left - n);
        Some(piece)
    })
}

impl Segments {
    fn push(&mut self, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            self.starts.push(self.len);
            self.len += bytes.len() as u64;
            self.segs.push(bytes);
        }
    }
}

impl Backend for MemBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.read().unwrap_or_else(PoisonError::into_inner).len)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let s = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > s.len) {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut done = 0;
        for (i, from, n) in spans(&s.starts, s.len, offset, buf.len()) {
            buf[done..done + n].copy_from_slice(&s.segs[i][from..from + n]);
            done += n;
        }
        Ok(())
    }
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if offset > s.len {
            let gap = (offset - s.len) as usize;
            s.push(vec![0; gap]);
        }
        // What falls on bytes already there is copied over them; the rest is a new segment.
        let over = bytes.len().min((s.len - offset) as usize);
        let Segments { starts, segs, len } = &mut *s;
        let mut done = 0;
        for (i, from, n) in spans(starts, *len, offset, over) {
            segs[i][from..from + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
        s.push(bytes[done..].to_vec());
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut guard = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let s = &mut *guard;
        if len >= s.len {
            let gap = (len - s.len) as usize;
            s.push(vec![0; gap]);
            return Ok(());
        }
        let keep = s.starts.partition_point(|&st| st < len);
        s.starts.truncate(keep);
        s.segs.truncate(keep);
        if let (Some(&start), Some(last)) = (s.starts.last(), s.segs.last_mut()) {
            last.truncate((len - start) as usize);
        }
        s.len = len;
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A sealed version: its size and where its root record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub version: u64,
    pub ptr: Ptr,
    pub len: u32,
}

/// What opening found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The durable version the store resumes from (None: empty).
    pub root: Option<Arc<RootRec>>,
    /// Bytes past the checkpoint that were not durable and were dropped.
    pub dropped_bytes: u64,
}

/// Decoded records by pointer, within a byte budget: records never change, so a hit is
/// always right, and eviction (oldest inserted first, per shard) only costs a re-read.
struct Cache {
    shards: Vec<Mutex<Shard>>,
    budget_per_shard: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Shard {
    map: HashMap<Ptr, Arc<Record>>,
    order: VecDeque<(Ptr, usize)>,
    bytes: usize,
}

const SHARDS: usize = 16;

impl Cache {
    fn new(budget: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            budget_per_shard: budget / SHARDS,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, ptr: Ptr) -> MutexGuard<'_, Shard> {
        // Records are at least a few bytes apart; mix the offset so shards fill evenly.
        let i = (ptr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, ptr: Ptr) -> Option<Arc<Record>> {
        let got = self.shard(ptr).map.get(&ptr).cloned();
        match got {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        got
    }

    fn put(&self, ptr: Ptr, record: Arc<Record>) {
        let weight = record.weight();
        if weight > self.budget_per_shard {
            return;
        }
        let mut shard = self.shard(ptr);
        if shard.map.insert(ptr, record).is_some() {
            return;
        }
        shard.order.push_back((ptr, weight));
        shard.bytes += weight;
        while shard.bytes > self.budget_per_shard {
            let Some((old, w)) = shard.order.pop_front() else { break };
            shard.map.remove(&old);
            shard.bytes -= w;
        }
    }

    fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).bytes).sum()
    }
}

/// The records a seal writes: gathered, written in slices as they pile up, published at once
/// (readers see none of them before the root that names them).
struct Pending {
    /// Where `buf` goes in the node file: everything before it is written.
    base: u64,
    buf: Vec<u8>,
}

/// Pending bytes are written to the file (not yet published) past this much.
const PENDING_FLUSH: usize = 4 << 20;
/// Room past [`PENDING_FLUSH`] for the record that crosses it, so the buffer is not doubled
/// for most seals (a larger record still grows it).
const PENDING_SLACK: usize = 256 << 10;

/// The index's store. Readers share it (`Arc<Store>`); one writer appends.
pub struct Store {
    dir: Option<PathBuf>,
    disk: Disk,
    nodes: Box<dyn Backend>,
    roots: Box<dyn Backend>,
    /// How much of the node file is published (readers only follow pointers below it).
    nodes_len: AtomicU64,
    /// How much of it is written (the writer may read its own unpublished records).
    written_len: AtomicU64,
    versions: RwLock<Vec<Version>>,
    pending: Mutex<Pending>,
    cache: Cache,
    reads: AtomicUsize,
    _lock: Option<File>,
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> IndexError {
    move |source| IndexError::Io { context: context.into(), source: Arc::new(source) }
}

fn damaged(what: impl Into<String>) -> IndexError {
    IndexError::Damaged(what.into())
}

/// The checkpoint: the durable version, how long the node and roots files were then, and the
/// version's index root, with a CRC-32C over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub version: u64,
    pub nodes_len: u64,
    pub roots_len: u64,
    pub index_root: Digest,
}

impl Checkpoint {
    fn encode(&self) -> [u8; CHECKPOINT_LEN] {
        let mut b = [0u8; CHECKPOINT_LEN];
        b[..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..16].copy_from_slice(&self.nodes_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.roots_len.to_le_bytes());
        b[24..56].copy_from_slice(&self.index_root);
        let crc = crc32c::crc32c(&b[..56]);
        b[56..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != CHECKPOINT_LEN {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(b[56..60].try_into().unwrap_or_default());
        if crc32c::crc32c(&b[..56]) != crc {
            return None;
        }
        let mut index_root = [0u8; 32];
        index_root.copy_from_slice(&b[24..56]);
        Some(Self { version: u64_at(0), nodes_len: u64_at(8), roots_len: u64_at(16), index_root })
    }
}

impl Store {
    /// A store in memory.
    pub fn in_memory(cache_bytes: usize) -> Self {
        let nodes = MemBackend::default();
        let _ = nodes.write_at(NODES_MAGIC, 0);
        Self::with(
            Disk::os(),
            None,
            Box::new(nodes),
            Box::new(MemBackend::default()),
            Vec::new(),
            cache_bytes,
            None,
        )
    }

    fn with(
        disk: Disk,
        dir: Option<PathBuf>,
        nodes: Box<dyn Backend>,
        roots: Box<dyn Backend>,
        versions: Vec<Version>,
        cache_bytes: usize,
        lock: Option<File>,
    ) -> Self {
        let len = nodes.len().unwrap_or(NODES_MAGIC.len() as u64);
        Self {
            dir,
            disk,
            nodes,
            roots,
            nodes_len: AtomicU64::new(len),
            versions: RwLock::new(versions),
            pending: Mutex::new(Pending {
                base: len,
                buf: Vec::with_capacity(PENDING_FLUSH + PENDING_SLACK),
            }),
            written_len: AtomicU64::new(len),
            cache: Cache::new(cache_bytes),
            reads: AtomicUsize::new(0),
            _lock: lock,
        }
    }

    /// Make an empty store in `dir` (which must not hold one).
    pub fn create(dir: &Path, cache_bytes: usize, disk: &Disk) -> Result<Self, IndexError> {
        disk.create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let format = dir.join("FORMAT");
        if format.exists() {
            return Err(damaged(format!("{} already holds an index", dir.display())));
        }
        let empty = Checkpoint { version: 0, nodes_len: 8, roots_len: 0, index_root: [0; 32] };
        for (name, bytes) in
            [("nodes", &NODES_MAGIC[..]), ("roots", &[][..]), ("checkpoint", &empty.encode()[..])]
        {
            disk.write_file(&dir.join(name), bytes).map_err(io_err(format!("writing {name}")))?;
        }
        // FORMAT last, each name durable before it: a directory without it is an unfinished
        // creation, not an index.
        disk.sync_dir(dir).map_err(io_err("syncing the index directory"))?;
        disk.replace_file(&format, FORMAT.as_bytes()).map_err(io_err("writing FORMAT"))?;
        Ok(Self::open(dir, cache_bytes, disk)?.0)
    }

    /// Open the store in `dir` at its checkpoint: what was written after it was not durable
    /// and is dropped. Anything that does not check out (a missing or torn checkpoint, a root
    /// that does not decode or hash to what the checkpoint says) is an error, and the caller
    /// rebuilds the index.
    pub fn open(dir: &Path, cache_bytes: usize, disk: &Disk) -> Result<(Self, Opened), IndexError> {
        Self::open_with(dir, cache_bytes, disk, true)
    }

    /// The same, changing nothing: no lock, the files read as the checkpoint has them (a
    /// writer may be appending past it), and what is sealed from here on kept in memory.
    pub fn open_read_only(dir: &Path, cache_bytes: usize) -> Result<(Self, Opened), IndexError> {
        Self::open_with(dir, cache_bytes, &Disk::os(), false)
    }

    fn open_with(
        dir: &Path,
        cache_bytes: usize,
        disk: &Disk,
        writable: bool,
    ) -> Result<(Self, Opened), IndexError> {
        match fs::read_to_string(dir.join("FORMAT")) {
            Ok(f) if f == FORMAT => {}
            Ok(_) => return Err(damaged(format!("{}: not an index of this version", dir.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(IndexError::Missing(dir.to_owned())),
            Err(e) => return Err(io_err("reading FORMAT")(e)),
        }
        let lock = if writable {
            let lock = sion_disk::shadow::lock_dir(dir).map_err(io_err("opening the index's lock file"))?;
            Some(lock.ok_or_else(|| IndexError::Locked(dir.to_owned()))?)
        } else {
            None
        };
        if let Ok(why) = fs::read_to_string(dir.join(DAMAGED)) {
            return Err(damaged(format!("a record was found damaged while in use: {}", why.trim())));
        }
        let bytes = fs::read(dir.join("checkpoint")).map_err(io_err("reading the checkpoint"))?;
        let checkpoint =
            Checkpoint::decode(&bytes).ok_or_else(|| damaged("the checkpoint is torn or damaged"))?;
        let open = |name: &str| -> Result<Box<dyn Backend>, IndexError> {
            if writable {
                let f =
                    disk.open(&dir.join(name), Open::Existing).map_err(io_err(format!("opening {name}")))?;
                Ok(Box::new(sion_disk::shadow::DiskFile::real(f)))
            } else {
                let f = sion_disk::shadow::DiskFile::shadow(&dir.join(name))
                    .map_err(io_err(format!("opening {name}")))?;
                Ok(Box::new(f))
            }
        };
        let (nodes, roots) = (open("nodes")?, open("roots")?);
        let (nodes_len, roots_len) =
            (nodes.len().map_err(io_err("nodes"))?, roots.len().map_err(io_err("roots"))?);
        if nodes_len < checkpoint.nodes_len || roots_len < checkpoint.roots_len {
            return Err(damaged("the node or roots file is shorter than its checkpoint"));
        }
        let mut magic = [0u8; 8];
        nodes.read_at(&mut magic, 0).map_err(|_| damaged("the node file has no header"))?;
        if &magic != NODES_MAGIC || checkpoint.roots_len % ROOT_ENTRY != 0 {
            return Err(damaged("the node file's header or the roots file's length is wrong"));
        }
        let dropped_bytes = (nodes_len - checkpoint.nodes_len) + (roots_len - checkpoint.roots_len);
        if dropped_bytes > 0 {
            nodes.set_len(checkpoint.nodes_len).map_err(io_err("truncating nodes"))?;
            roots.set_len(checkpoint.roots_len).map_err(io_err("truncating roots"))?;
        }
        let mut table = vec![0u8; checkpoint.roots_len as usize];
        roots.read_at(&mut table, 0).map_err(io_err("reading roots"))?;
        let mut versions = Vec::with_capacity(table.len() / ROOT_ENTRY as usize);
        for e in table.chunks_exact(ROOT_ENTRY as usize) {
            let crc = u32::from_le_bytes([e[20], e[21], e[22], e[23]]);
            if crc32c::crc32c(&e[..20]) != crc {
                return Err(damaged("an entry of the roots file is damaged"));
            }
            let v = Version {
                version: u64::from_le_bytes(e[..8].try_into().unwrap_or_default()),
                ptr: u64::from_le_bytes(e[8..16].try_into().unwrap_or_default()),
                len: u32::from_le_bytes(e[16..20].try_into().unwrap_or_default()),
            };
            if versions.last().is_some_and(|l: &Version| l.version >= v.version)
                || v.ptr < 8
                || v.ptr + u64::from(v.len) + 8 > checkpoint.nodes_len
            {
                return Err(damaged("the roots file names versions out of order or beyond the nodes"));
            }
            versions.push(v);
        }
        // A reader's store has no directory: it writes no checkpoint and marks nothing.
        let store = Self::with(
            disk.clone(),
            writable.then(|| dir.to_owned()),
            nodes,
            roots,
            versions,
            cache_bytes,
            lock,
        );
        let root = match store.latest() {
            None if checkpoint.version == 0 => None,
            None => return Err(damaged("the checkpoint names a version the roots file lacks")),
            Some(v) => {
                let root = store.root_of(&v)?;
                if root.version != checkpoint.version || root.index_root != checkpoint.index_root {
                    return Err(damaged("the checkpoint and the last root disagree"));
                }
                if super::walk::recompute_root(&root) != root.index_root {
                    return Err(damaged("the last root's index root does not hash from its parts"));
                }
                Some(root)
            }
        };
        Ok((store, Opened { root, dropped_bytes }))
    }

    /// Read a record. One found damaged marks the store so that the next open rebuilds it.
    pub fn read(&self, ptr: Ptr) -> Result<Arc<Record>, IndexError> {
        self.read_keeping(ptr, true)
    }

    /// Read a record the writer is about to replace (a bucket, its runs, a list, a subject's
    /// places, taken up again to grow): from the cache if it is there, but not put in it, so
    /// what readers keep there is not pushed out by what no one reads twice.
    pub fn read_to_replace(&self, ptr: Ptr) -> Result<Arc<Record>, IndexError> {
        self.read_keeping(ptr, false)
    }

    fn read_keeping(&self, ptr: Ptr, keep: bool) -> Result<Arc<Record>, IndexError> {
        let read = self.read_unmarked(ptr, keep);
        if let (Err(IndexError::Damaged(why)), Some(dir)) = (&read, &self.dir) {
            let _ = self.disk.write_file(&dir.join(DAMAGED), format!("{why}\n").as_bytes());
        }
        read
    }

    fn read_unmarked(&self, ptr: Ptr, keep: bool) -> Result<Arc<Record>, IndexError> {
        if let Some(r) = self.cache.get(ptr) {
            return Ok(r);
        }
        // Only the writer reads past what is published: readers never touch the writer's lock.
        if ptr >= self.nodes_len.load(Ordering::Acquire) {
            let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if ptr >= pending.base {
                let at = (ptr - pending.base) as usize;
                return Self::decode_frame(ptr, pending.buf.get(at..).unwrap_or_default()).map(Arc::new);
            }
        }
        let end = self.written_len.load(Ordering::Acquire);
        if ptr < NODES_MAGIC.len() as u64 || ptr + 8 > end {
            return Err(damaged(format!("a pointer ({ptr}) beyond the node file ({end} bytes)")));
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        // One read for the header and, for most records (map nodes, lists), the body too.
        let first = FIRST_READ.min((end - ptr) as usize);
        let mut bytes = vec![0u8; first];
        self.nodes.read_at(&mut bytes, ptr).map_err(io_err("reading the node file"))?;
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if len as usize > MAX_RECORD || ptr + 8 + u64::from(len) > end {
            return Err(damaged(format!("the record at {ptr} claims {len} bytes")));
        }
        let whole = 8 + len as usize;
        if whole > first {
            bytes.resize(whole, 0);
            self.nodes
                .read_at(&mut bytes[first..], ptr + first as u64)
                .map_err(io_err("reading the node file"))?;
        }
        let body = &bytes[8..whole];
        if sion_disk::frame::frame_checksum(len, body) != crc {
            return Err(damaged(format!("the record at {ptr} fails its checksum")));
        }
        let record =
            Arc::new(Record::decode(body).map_err(|e| damaged(format!("the record at {ptr}: {e}")))?);
        if keep {
            self.cache.put(ptr, Arc::clone(&record));
        }
        Ok(record)
    }

    fn decode_frame(ptr: Ptr, bytes: &[u8]) -> Result<Record, IndexError> {
        let Some(head) = bytes.get(..8) else { return Err(damaged(format!("no record at {ptr}"))) };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let Some(body) = bytes.get(8..8 + len as usize) else {
            return Err(damaged(format!("no record at {ptr}")));
        };
        Record::decode(body).map_err(|e| damaged(format!("the record at {ptr}: {e}")))
    }

    /// Append a record for the next flush; its pointer is good at once for the writer.
    pub fn append(&self, record: Record) -> Ptr {
        let ptr = self.append_with(|buf| record.encode_into(buf));
        // The top of the structure readers walk is cached (list runs too: the next merge of a
        // list's runs reads them back); the rest is read when asked for (most of it never is).
        // Cached at once, not at the publish: a pointer is never reused, and only the writer
        // follows one past what is published. Held until the publish, a seal's records were
        // memory outside the cache's budget (by itself, this made no change to a cold boot's
        // peak that could be measured; it bounds them all the same).
        if matches!(
            record,
            Record::Node(_)
                | Record::Cells(_)
                | Record::Frame(_)
                | Record::Root(_)
                | Record::ListRun(_)
                | Record::ListNode(_)
        ) {
            self.cache.put(ptr, Arc::new(record));
        }
        ptr
    }

    /// Append a run record of these entries (not cached, as [`Store::append`] would not).
    pub fn append_run(&self, entries: &[Entry]) -> Ptr {
        self.append_with(|buf| encode_run(entries, buf))
    }

    /// Append the record `encode` writes, framed (its length and checksum before it).
    fn append_with(&self, encode: impl FnOnce(&mut Vec<u8>)) -> Ptr {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let at = pending.buf.len();
        let ptr = pending.base + at as u64;
        // The frame in place: a header, the body, then the header filled in.
        pending.buf.extend_from_slice(&[0; 8]);
        encode(&mut pending.buf);
        let len = (pending.buf.len() - at - 8) as u32;
        let crc = sion_disk::frame::frame_checksum(len, &pending.buf[at + 8..]);
        pending.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        pending.buf[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        if pending.buf.len() >= PENDING_FLUSH {
            // Written but not published: a crash drops it (it is past the checkpoint).
            if self.nodes.write_at(&pending.buf, pending.base).is_ok() {
                pending.base += pending.buf.len() as u64;
                pending.buf.clear();
                self.written_len.store(pending.base, Ordering::Release);
            }
        }
        ptr
    }

    /// Write what was appended and publish `root` as the version it names: readers see it
    /// once this returns.
    pub fn publish(&self, root: RootRec) -> Result<Arc<RootRec>, IndexError> {
        let version = root.version;
        let root = Arc::new(root);
        let ptr = self.append(Record::Root((*root).clone()));
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let len = (pending.base + pending.buf.len() as u64 - ptr - 8) as u32;
        self.nodes.write_at(&pending.buf, pending.base).map_err(io_err("writing the node file"))?;
        let written = pending.base + pending.buf.len() as u64;
        pending.buf.clear();
        pending.base = written;
        drop(pending);
        self.written_len.store(written, Ordering::Release);
        self.nodes_len.store(written, Ordering::Release);
        let mut entry = [0u8; ROOT_ENTRY as usize];
        entry[..8].copy_from_slice(&version.to_le_bytes());
        entry[8..16].copy_from_slice(&ptr.to_le_bytes());
        entry[16..20].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c::crc32c(&entry[..20]);
        entry[20..].copy_from_slice(&crc.to_le_bytes());
        let mut versions = self.versions.write().unwrap_or_else(PoisonError::into_inner);
        if versions.last().is_some_and(|l| l.version >= version) {
            // A seal at a size already sealed: the new root replaces nothing readers hold.
            return Ok(root);
        }
        let at = versions.len() as u64 * ROOT_ENTRY;
        self.roots.write_at(&entry, at).map_err(io_err("writing the roots file"))?;
        versions.push(Version { version, ptr, len });
        Ok(root)
    }

    /// Make everything published durable and record that in the checkpoint.
    pub fn checkpoint(&self) -> Result<(), IndexError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let Some(latest) = self.latest() else { return Ok(()) };
        let root = self.root_of(&latest)?;
        self.nodes.sync().map_err(io_err("syncing the node file"))?;
        self.roots.sync().map_err(io_err("syncing the roots file"))?;
        let versions = self.versions.read().unwrap_or_else(PoisonError::into_inner).len() as u64;
        let checkpoint = Checkpoint {
            version: latest.version,
            nodes_len: self.nodes_len.load(Ordering::Acquire),
            roots_len: versions * ROOT_ENTRY,
            index_root: root.index_root,
        };
        // Written beside and renamed over, so a crash leaves the old checkpoint or the new.
        let tmp = dir.join("checkpoint.new");
        self.disk.write_file(&tmp, &checkpoint.encode()).map_err(io_err("writing the checkpoint"))?;
        self.disk.rename(&tmp, &dir.join("checkpoint")).map_err(io_err("renaming the checkpoint"))?;
        self.disk.sync_dir(dir).map_err(io_err("syncing the index directory"))?;
        Ok(())
    }

    /// The latest published version.
    pub fn latest(&self) -> Option<Version> {
        self.versions.read().unwrap_or_else(PoisonError::into_inner).last().copied()
    }

    /// The published version of exactly `size` atoms.
    pub fn version(&self, size: u64) -> Option<Version> {
        let versions = self.versions.read().unwrap_or_else(PoisonError::into_inner);
        versions.binary_search_by_key(&size, |v| v.version).ok().map(|i| versions[i])
    }

    /// The root record of a version.
    pub fn root_of(&self, v: &Version) -> Result<Arc<RootRec>, IndexError> {
        match &*self.read(v.ptr)? {
            Record::Root(root) if root.version == v.version => Ok(Arc::new(root.clone())),
            _ => Err(damaged(format!("the root of version {} is not a root", v.version))),
        }
    }

    /// Bytes of decoded records held in the cache, and the hits and misses so far.
    pub fn cache_stats(&self) -> (usize, u64, u64) {
        (
            self.cache.bytes(),
            self.cache.hits.load(Ordering::Relaxed),
            self.cache.misses.load(Ordering::Relaxed),
        )
    }

    /// How many bytes the node file holds.
    pub fn node_bytes(&self) -> u64 {
        self.nodes_len.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Write(u16, Vec<u8>),
        SetLen(u16),
        Read(u16, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u16..600, prop::collection::vec(any::<u8>(), 0..200)).prop_map(|(o, b)| Op::Write(o, b)),
            (0u16..600).prop_map(Op::SetLen),
            (0u16..600, 0u16..200).prop_map(|(o, n)| Op::Read(o, n)),
        ]
    }

    proptest! {
        /// The memory backend's segments hold the bytes one flat vector would, whatever the
        /// writes, truncations and reads (across segments included).
        #[test]
        fn the_memory_backend_is_one_flat_vector(ops in prop::collection::vec(op(), 1..60)) {
            let mem = MemBackend::default();
            let mut flat: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Write(o, bytes) => {
                        let o = o as usize;
                        if flat.len() < o + bytes.len() {
                            flat.resize(o + bytes.len(), 0);
                        }
                        flat[o..o + bytes.len()].copy_from_slice(&bytes);
                        mem.write_at(&bytes, o as u64).unwrap();
                    }
                    Op::SetLen(n) => {
                        flat.resize(n as usize, 0);
                        mem.set_len(u64::from(n)).unwrap();
                    }
                    Op::Read(o, n) => {
                        let mut buf = vec![0u8; n as usize];
                        match flat.get(o as usize..o as usize + n as usize) {
                            Some(want) => {
                                mem.read_at(&mut buf, u64::from(o)).unwrap();
                                prop_assert_eq!(&buf[..], want);
                            }
                            None => prop_assert!(mem.read_at(&mut buf, u64::from(o)).is_err()),
                        }
                    }
                }
                prop_assert_eq!(mem.len().unwrap(), flat.len() as u64);
            }
        }
    }
}
