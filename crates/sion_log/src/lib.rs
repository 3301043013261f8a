//! The durable, append-only atom log (docs/LOG.md).
//!
//! Atoms go to segment files, one checksummed record each. Beside them the log keeps two
//! derived files: `offsets` (where each position's record starts) and `nodes` (every perfect
//! subtree hash of the RFC 9162 tree over the records, in post-order). So proofs for any old
//! size are O(log n) reads, and the log itself is never held in memory: what stays resident is
//! the tree's frontier and the map that makes a repeated atom a no-op.
//!
//! An append resolves only once its atoms are durable. Concurrent appends are committed in
//! groups: whoever finds no commit under way leads one for everything queued, with one fsync
//! per file, while the others wait for it.

#![forbid(unsafe_code)]

mod blob_index;
pub mod blobs;
mod dedup;
pub mod repair;
mod segment;

use std::collections::HashMap;
use std::fs;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};

use dedup::Dedup;
use segment::{HEADER_LEN, RECORD_HEADER_LEN, Record, RecordReader};
use sion_disk::shadow::DiskFile;
use sion_disk::{Disk, File, Open};
use sion_verify::atom::Atom;
pub use sion_verify::leaf::{LogHasher, leaf_hash, leaf_hash_of_bytes};
use sion_verify::merkle::{self, Digest, Frontier, Subtrees, postorder_index, postorder_len};

const FORMAT: &str = "sion-log 2 blake3 id-leaves\n";

/// Why a log operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    #[error("{context}: {source}")]
    Io { context: String, source: Arc<io::Error> },
    #[error("no log at {0}")]
    Missing(PathBuf),
    #[error("a log already exists at {0}")]
    Exists(PathBuf),
    #[error("the log at {0} is open in another process")]
    Locked(PathBuf),
    #[error("{path}: not a log of this version (expected {FORMAT:?})")]
    Format { path: PathBuf },
    #[error("log is damaged at position {position}: {reason}")]
    Corrupt { position: u64, reason: String },
    #[error(
        "log is damaged at position {position} ({segment}, byte {offset}): {reason}; the log was \
         left as it is"
    )]
    Damaged { position: u64, segment: PathBuf, offset: u64, reason: String },
    #[error("position {position} is not below the log size {size}")]
    NoSuchPosition { position: u64, size: u64 },
    #[error("size {size} is larger than the log ({current})")]
    NoSuchSize { size: u64, current: u64 },
    #[error("the log stopped accepting appends after an I/O failure ({0}); reopen it to recover")]
    Halted(String),
    #[error("the log at {0} is sealed on its ledger: it takes no more atoms (open a new memory)")]
    Sealed(PathBuf),
    #[error("the log at {0} is open for reading only: it takes no atoms here")]
    ReadOnly(PathBuf),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LogError {
    move |source| LogError::Io { context: context.into(), source: Arc::new(source) }
}

/// Where an appended atom is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub position: u64,
    /// False when the log already held this atom: the append was a no-op.
    pub new: bool,
}

/// The size and tree hash of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeHead {
    pub size: u64,
    pub root: Digest,
}

/// What opening a log had to repair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes of an unfinished record cut from the end of the last segment (a copy is kept in
    /// `set_aside`).
    pub torn_bytes: u64,
    /// Where the cut bytes were kept (`log/torn/`), if any were cut.
    pub set_aside: Option<PathBuf>,
    /// Records past the last checkpoint whose offsets and tree hashes were derived again from
    /// the segments.
    pub rederived: u64,
}

#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Memory for the duplicate filter's cache of pages (the filter itself is on disk).
    pub dedup_cache_bytes: usize,
    /// A new segment starts once the current one has reached this many bytes.
    pub segment_bytes: u64,
    /// The derived files are fsynced, and a checkpoint written, once this many segment bytes
    /// have been appended since the last checkpoint. Reopening after a crash re-derives at
    /// most this much from the segments.
    pub checkpoint_bytes: u64,
    /// Atoms the log must keep at open (the head a ledger committed): recovery never cuts
    /// below it, it refuses instead.
    pub keep_at_least: u64,
    /// Where every change to the log's files goes (the OS; a test's faulty disk).
    pub disk: Disk,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 256 << 20,
            checkpoint_bytes: 32 << 20,
            dedup_cache_bytes: 16 << 20,
            keep_at_least: 0,
            disk: Disk::os(),
        }
    }
}

/// A handle on an open log. Clones share it; reads never wait for a commit in progress.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

struct Segment {
    first: u64,
    file: Arc<File>,
}

struct Inner {
    dir: PathBuf,
    options: LogOptions,
    segments: RwLock<Vec<Segment>>,
    /// Derived files: shadows for a reader (what it derives stays in its memory).
    offsets: DiskFile,
    nodes: DiskFile,
    checkpoint: DiskFile,
    head: RwLock<TreeHead>,
    writer: Mutex<Writer>,
    queue: Mutex<Queue>,
    queue_changed: Condvar,
    groups_committed: AtomicU64,
    /// Set once the ledger seals the log: appends are refused, since they could never be
    /// committed.
    sealed: std::sync::atomic::AtomicBool,
    /// Held for the life of the handle: one process writes a log (none for a reader).
    _lock: Option<fs::File>,
    /// Opened for reading only: nothing is written, appends are refused.
    read_only: bool,
}

struct Writer {
    frontier: Frontier<LogHasher>,
    dedup: Dedup,
    /// Length of the last segment.
    active_len: u64,
    /// Segment bytes appended since the derived files were last made durable.
    since_checkpoint: u64,
    halted: Option<String>,
}

#[derive(Default)]
struct Queue {
    next_ticket: u64,
    leading: bool,
    waiting: Vec<(u64, Vec<Atom>)>,
    done: HashMap<u64, Result<Vec<Appended>, LogError>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; if something did, the data is still whole.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The node file read as perfect subtrees.
struct NodeFile<'a>(&'a DiskFile);

impl Subtrees for NodeFile<'_> {
    type Error = LogError;

    fn subtree(&self, level: u32, index: u64) -> Result<Digest, LogError> {
        let mut d = [0u8; 32];
        self.0.read_exact_at(&mut d, postorder_index(level, index) * 32).map_err(io_err("reading nodes"))?;
        Ok(d)
    }
}

fn open_rw(disk: &Disk, path: &Path) -> Result<File, LogError> {
    disk.open(path, Open::Existing).map_err(io_err(format!("opening {}", path.display())))
}

/// A file of the log opened for reading only; a missing one is named.
fn open_ro(disk: &Disk, path: &Path) -> Result<File, LogError> {
    disk.open(path, Open::Read).map_err(io_err(format!("opening {} to read it", path.display())))
}

/// A derived file (offsets, nodes): a missing one is made empty, and opening derives it again
/// from the segments, which are the truth.
fn open_derived(disk: &Disk, path: &Path, writable: bool) -> Result<DiskFile, LogError> {
    if !writable {
        return DiskFile::shadow(path).map_err(io_err(format!("opening {} to read it", path.display())));
    }
    disk.open(path, Open::Create).map(DiskFile::real).map_err(io_err(format!("opening {}", path.display())))
}

/// Whether a good record follows the unusable one at `at`, as its length says: then the
/// record was damaged in place, not left unfinished by a crash, and what follows is real.
fn good_follows(file: &fs::File, at: u64, segment_len: u64) -> bool {
    let mut head = [0u8; 4];
    if file.read_exact_at(&mut head, at).is_err() {
        return false;
    }
    let next = at + RECORD_HEADER_LEN + u64::from(u32::from_le_bytes(head));
    next < segment_len
        && matches!(segment::read_record_at(file, next, segment_len), Ok(Record::Good(b)) if Atom::decode(&b).is_ok())
}

/// Copy a segment's bytes from `at` to its end into `log/torn/` before they are cut, so that
/// recovery never destroys what it cannot read.
fn set_aside(disk: &Disk, dir: &Path, seg: &Segment, at: u64, segment_len: u64) -> Result<PathBuf, LogError> {
    let torn = dir.join("torn");
    disk.create_dir_all(&torn).map_err(io_err(format!("creating {}", torn.display())))?;
    let path = torn.join(format!("{:020}.seg-at-{at}", seg.first));
    copy_tail(disk, &seg.file, at, segment_len, &path)
        .map_err(io_err(format!("writing {}", path.display())))?;
    sync_dir(disk, &torn)?;
    Ok(path)
}

/// Copy bytes `at..end` of `file` to a new file at `to`, streamed (a tail may be as large as a
/// segment or a blob pack), and fsync the copy. The log's and the blob store's torn tails are
/// both set aside with it.
pub(crate) fn copy_tail(disk: &Disk, file: &fs::File, at: u64, end: u64, to: &Path) -> io::Result<()> {
    let out = disk.open(to, Open::Truncate)?;
    let mut reader = ReadAt { file, at }.take(end.saturating_sub(at));
    let mut buf = vec![0u8; 1 << 20];
    let mut written = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all_at(&buf[..n], written)?;
        written += n as u64;
    }
    out.sync_all()
}

/// `path`, or if something is there already (an earlier repair's), the first of `path.1`,
/// `path.2`, … that is free: what is set aside is never written over.
pub(crate) fn unused_name(path: PathBuf) -> PathBuf {
    if !path.exists() {
        return path;
    }
    (1u32..)
        .map(|n| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        })
        .find(|p| !p.exists())
        .unwrap_or(path)
}

fn sync_dir(disk: &Disk, path: &Path) -> Result<(), LogError> {
    disk.sync_dir(path).map_err(io_err(format!("syncing directory {}", path.display())))
}

fn derived_len(file: &DiskFile, what: &str) -> Result<u64, LogError> {
    file.len().map_err(io_err(format!("reading the length of {what}")))
}

fn file_len(file: &fs::File, what: &str) -> Result<u64, LogError> {
    Ok(file.metadata().map_err(io_err(format!("reading the length of {what}")))?.len())
}

impl Log {
    /// Create an empty log in `dir` (which must not hold one).
    pub fn create(dir: &Path, options: LogOptions) -> Result<(Self, Recovery), LogError> {
        if dir.join("FORMAT").exists() {
            return Err(LogError::Exists(dir.to_owned()));
        }
        let disk = &options.disk;
        let segments = dir.join("segments");
        disk.create_dir_all(&segments).map_err(io_err(format!("creating {}", segments.display())))?;
        for name in ["offsets", "nodes"] {
            let path = dir.join(name);
            disk.write_file(&path, b"").map_err(io_err(format!("creating {}", path.display())))?;
        }
        // A creation cut short may have left the first segment: without FORMAT nothing was
        // ever appended to it.
        let first = segment::segment_path(&segments, 0);
        if first.exists() {
            disk.remove_file(&first).map_err(io_err(format!("removing unfinished {}", first.display())))?;
        }
        new_segment(disk, &segments, 0)?;
        sync_dir(disk, &segments)?;
        // FORMAT last, whole or absent: a directory without it is an unfinished creation.
        let format = dir.join("FORMAT");
        disk.replace_file(&format, FORMAT.as_bytes())
            .map_err(io_err(format!("writing {}", format.display())))?;
        Self::open(dir, options)
    }

    /// Open a log, dropping an unfinished record at its end and taking in whole records the
    /// derived files had not caught up with.
    pub fn open(dir: &Path, options: LogOptions) -> Result<(Self, Recovery), LogError> {
        Self::open_with(dir, options, true)
    }

    /// Open a log to read it and change nothing — no lock, no repair, no file written — so a
    /// log on read-only media, on a full disk, or held by a writer in another process can be
    /// read. It holds the atoms its derived files cover (a writer keeps them up to date as it
    /// appends); anything a crash left past them is not read, and appends are refused.
    pub fn open_read_only(dir: &Path) -> Result<Self, LogError> {
        Self::open_with(dir, LogOptions::default(), false).map(|(log, _)| log)
    }

    fn open_with(dir: &Path, options: LogOptions, writable: bool) -> Result<(Self, Recovery), LogError> {
        let format_path = dir.join("FORMAT");
        match fs::read_to_string(&format_path) {
            Ok(f) if f == FORMAT => {}
            Ok(_) => return Err(LogError::Format { path: format_path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(LogError::Missing(dir.to_owned())),
            Err(e) => return Err(io_err(format!("reading {}", format_path.display()))(e)),
        }
        let lock = if writable {
            let lock = sion_disk::shadow::lock_dir(dir).map_err(io_err("opening the log's lock file"))?;
            Some(lock.ok_or_else(|| LogError::Locked(dir.to_owned()))?)
        } else {
            None
        };
        let disk = &options.disk;
        if writable {
            // A creation, or a new segment, cut short before its name was durable: make it
            // so before appending to it.
            disk.make_durable(&format_path).map_err(io_err(format!("syncing {}", format_path.display())))?;
            sync_dir(disk, &dir.join("segments"))?;
        }
        let offsets = open_derived(disk, &dir.join("offsets"), writable)?;
        let nodes = open_derived(disk, &dir.join("nodes"), writable)?;
        let checkpoint = open_derived(disk, &dir.join("checkpoint"), writable)?;
        let segments = load_segments(disk, &dir.join("segments"), writable)?;
        let mut recovery = Recovery::default();

        // The derived files are durable up to the checkpoint; past it they may hold anything a
        // crash left, so they are cut back to it and re-derived from the segments, which are
        // the truth.
        let n_offsets = derived_len(&offsets, "offsets")? / 8;
        let n_leaves = leaves_in(derived_len(&nodes, "nodes")? / 32);
        // Where the record after the first `size` ends, once the last of them is checked
        // against its stored leaf hash.
        let check = |size: u64| -> Result<(usize, u64), LogError> {
            if size == 0 {
                return Ok((0, HEADER_LEN));
            }
            let position = size - 1;
            let (i, record_offset) = locate(&segments, &offsets, position)?;
            let file = &segments[i].file;
            let good = match segment::read_record_at(file, record_offset, file_len(file, "a segment")?)
                .map_err(io_err("reading a segment"))?
            {
                Record::Good(bytes) => bytes,
                _ => {
                    return Err(LogError::Corrupt { position, reason: "its record is damaged".into() });
                }
            };
            let stored = NodeFile(&nodes).subtree(0, position)?;
            if leaf_hash_of_bytes(&good) != stored {
                return Err(LogError::Corrupt {
                    position,
                    reason: "its record does not match the stored leaf hash".into(),
                });
            }
            Ok((i, record_offset + RECORD_HEADER_LEN + good.len() as u64))
        };
        // A reader too: past the checkpoint the derived files may hold what a crash left, so
        // it derives that part again, in its memory.
        let mut size = read_checkpoint(&checkpoint);
        if !writable && size == 0 {
            // A writer rewrites the checkpoint in place: a torn read fails its CRC; once more.
            size = read_checkpoint(&checkpoint);
        }
        let mut size = size.min(n_offsets).min(n_leaves);
        let (mut seg_index, mut offset) = check(size)?;
        offsets.set_len(size * 8).map_err(io_err("truncating offsets"))?;
        nodes.set_len(postorder_len(size) * 32).map_err(io_err("truncating nodes"))?;
        let mut frontier = Frontier::<LogHasher>::load(&NodeFile(&nodes), size)?;
        // Take in whole records past the derived files; cut an unfinished one.
        let mut offset_buf = Vec::new();
        let mut node_buf = Vec::new();
        let mut taken_from = Vec::new();
        while let Some(seg) = segments.get(seg_index) {
            if offset == HEADER_LEN && seg.first != size {
                return Err(LogError::Corrupt {
                    position: size,
                    reason: format!("segment {seg_index} starts at position {}", seg.first),
                });
            }
            let seg_len = file_len(&seg.file, "a segment")?;
            let mut reader =
                RecordReader::new(BufReader::new(ReadAt { file: &seg.file, at: offset }), seg_len);
            // RecordReader counts from the header; start it at our offset.
            reader_skip(&mut reader, offset);
            loop {
                let at = reader.offset();
                let record = reader.next_record().map_err(io_err("reading a segment"))?;
                let bytes = match record {
                    Record::Good(bytes) if Atom::decode(&bytes).is_ok() => bytes,
                    Record::End => break,
                    unusable => {
                        let other = match unusable {
                            Record::Good(_) => "a record that is not a valid atom",
                            Record::Torn => "an unfinished record",
                            Record::Bad(why) => why,
                            Record::End => "the end",
                        };
                        let is_last = seg_index + 1 == segments.len();
                        let damaged = |reason: String| LogError::Damaged {
                            position: size,
                            segment: segment::segment_path(&dir.join("segments"), seg.first),
                            offset: at,
                            reason,
                        };
                        if !is_last {
                            return Err(damaged(format!("{other} before later segments")));
                        }
                        if good_follows(&seg.file, at, seg_len) {
                            return Err(damaged(format!("{other}, and whole records follow it")));
                        }
                        if size < options.keep_at_least {
                            return Err(damaged(format!(
                                "{other}, and the ledger committed {} atoms",
                                options.keep_at_least
                            )));
                        }
                        if !writable {
                            // A reader leaves the unfinished record where it is (a writer
                            // may be writing it now) and reads up to it.
                            break;
                        }
                        recovery.set_aside = Some(set_aside(disk, dir, seg, at, seg_len)?);
                        recovery.torn_bytes = seg_len - at;
                        seg.file.set_len(at).map_err(io_err("truncating a torn segment"))?;
                        seg.file.sync_data().map_err(io_err("syncing a segment"))?;
                        break;
                    }
                };
                offset_buf.extend_from_slice(&at.to_le_bytes());
                frontier.push(leaf_hash_of_bytes(&bytes), |d| node_buf.extend_from_slice(d));
                size += 1;
                recovery.rederived += 1;
                if taken_from.last() != Some(&seg_index) {
                    taken_from.push(seg_index);
                }
            }
            if recovery.torn_bytes > 0 {
                break;
            }
            seg_index += 1;
            offset = HEADER_LEN;
        }
        if writable {
            // Records an append wrote but never made durable (its fsync, or a write after it,
            // failed) are taken in here: they are made durable before anything counts them.
            for &i in &taken_from {
                segments[i].file.sync_data().map_err(io_err("syncing a segment"))?;
            }
        }
        if !offset_buf.is_empty() {
            offsets
                .write_all_at(&offset_buf, derived_len(&offsets, "offsets")?)
                .map_err(io_err("writing offsets"))?;
            nodes.write_all_at(&node_buf, derived_len(&nodes, "nodes")?).map_err(io_err("writing nodes"))?;
        }
        offsets.sync_data().map_err(io_err("syncing offsets"))?;
        nodes.sync_data().map_err(io_err("syncing nodes"))?;
        write_checkpoint(&checkpoint, size)?;

        // A reader takes no atoms: it needs no duplicate filter.
        let dedup = if writable {
            // The filter of earlier versions (a redb database) is re-derived in the new form.
            if dir.join("dedup.redb").exists() {
                let _ = disk.remove_file(&dir.join("dedup.redb"));
            }
            let dedup_path = dir.join("dedup");
            let mut dedup = match Dedup::open(disk, &dedup_path, options.dedup_cache_bytes, size) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("{}: {e}; rebuilding it from the log", dedup_path.display());
                    Dedup::create(disk, &dedup_path, options.dedup_cache_bytes).map_err(dedup_err)?
                }
            };
            catch_up_dedup(&mut dedup, &segments, &offsets, &nodes, size)?;
            dedup
        } else {
            Dedup::detached()
        };
        let active_len = match segments.last() {
            Some(s) => file_len(&s.file, "the last segment")?,
            None => return Err(LogError::Corrupt { position: 0, reason: "no segments".into() }),
        };
        let head = TreeHead { size, root: frontier.root() };
        let inner = Inner {
            dir: dir.to_owned(),
            options,
            segments: RwLock::new(segments),
            offsets,
            nodes,
            checkpoint,
            head: RwLock::new(head),
            writer: Mutex::new(Writer { frontier, dedup, active_len, since_checkpoint: 0, halted: None }),
            queue: Mutex::new(Queue::default()),
            queue_changed: Condvar::new(),
            groups_committed: AtomicU64::new(0),
            sealed: std::sync::atomic::AtomicBool::new(!writable),
            _lock: lock,
            read_only: !writable,
        };
        Ok((Self { inner: Arc::new(inner) }, recovery))
    }

    /// Refuse appends from now on: the ledger sealed this log (the memory says so at open and
    /// when it seals).
    pub fn seal(&self) {
        self.inner.sealed.store(true, Ordering::Release);
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The durable size and root.
    pub fn head(&self) -> TreeHead {
        *self.inner.head.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn size(&self) -> u64 {
        self.head().size
    }

    /// How many group commits (one fsync per file each) this handle has made.
    pub fn groups_committed(&self) -> u64 {
        self.inner.groups_committed.load(Ordering::Relaxed)
    }

    fn check_size(&self, size: u64) -> Result<(), LogError> {
        let current = self.size();
        if size > current {
            return Err(LogError::NoSuchSize { size, current });
        }
        Ok(())
    }

    fn check_position(&self, position: u64) -> Result<(), LogError> {
        let size = self.size();
        if position >= size {
            return Err(LogError::NoSuchPosition { position, size });
        }
        Ok(())
    }

    /// The canonical bytes of the atom at `position`, checksum verified.
    pub fn read_bytes(&self, position: u64) -> Result<Vec<u8>, LogError> {
        self.check_position(position)?;
        let segments = self.inner.segments.read().unwrap_or_else(PoisonError::into_inner);
        let (i, offset) = locate(&segments, &self.inner.offsets, position)?;
        // Records below the size are whole: no need to ask the segment's length.
        match segment::read_record_at(&segments[i].file, offset, u64::MAX)
            .map_err(io_err("reading a segment"))?
        {
            Record::Good(bytes) => Ok(bytes),
            other => Err(LogError::Corrupt { position, reason: format!("record is {other:?}") }),
        }
    }

    /// The atom at `position`.
    pub fn read(&self, position: u64) -> Result<Atom, LogError> {
        let bytes = self.read_bytes(position)?;
        Atom::decode(&bytes).map_err(|e| LogError::Corrupt { position, reason: e.to_string() })
    }

    /// The stored leaf hash of `position`.
    pub fn leaf_hash(&self, position: u64) -> Result<Digest, LogError> {
        self.check_position(position)?;
        NodeFile(&self.inner.nodes).subtree(0, position)
    }

    /// The root of the log's first `size` atoms.
    pub fn root_at(&self, size: u64) -> Result<Digest, LogError> {
        self.check_size(size)?;
        merkle::root_at::<LogHasher, _>(&NodeFile(&self.inner.nodes), size)
    }

    /// The inclusion proof of `position` in the tree of the first `size` atoms.
    pub fn inclusion_proof(&self, position: u64, size: u64) -> Result<Vec<Digest>, LogError> {
        self.check_size(size)?;
        if position >= size {
            return Err(LogError::NoSuchPosition { position, size });
        }
        merkle::inclusion_path::<LogHasher, _>(&NodeFile(&self.inner.nodes), position, size)
    }

    /// The consistency proof from the first `old` atoms to the first `new` (`0 < old <= new`).
    pub fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<Digest>, LogError> {
        self.check_size(new)?;
        if old == 0 || old > new {
            return Err(LogError::NoSuchSize { size: old, current: new });
        }
        merkle::consistency_path::<LogHasher, _>(&NodeFile(&self.inner.nodes), old, new)
    }

    /// Where the log holds this atom, if it does.
    pub fn position_of(&self, atom: &Atom) -> Result<Option<u64>, LogError> {
        if self.inner.read_only {
            return Err(LogError::ReadOnly(self.inner.dir.clone()));
        }
        let leaf = leaf_hash(atom);
        let mut writer = lock(&self.inner.writer);
        let size = writer.frontier.size();
        let from = atom.parts().valid.from_ns;
        let stored = |p| NodeFile(&self.inner.nodes).subtree(0, p);
        match writer.dedup.find(from, &leaf, size, |p| stored(p).map_err(Lookup::Log)) {
            Ok(found) => Ok(found),
            Err(Lookup::Log(e)) => Err(e),
            Err(Lookup::Filter(e)) => {
                self.rebuild_filter(&mut writer, size, &e)?;
                writer.dedup.find(from, &leaf, size, stored)
            }
        }
    }

    /// The filter is a cache: a damaged one is rebuilt from the segments, here and now.
    fn rebuild_filter(&self, w: &mut Writer, size: u64, why: &dedup::DedupError) -> Result<(), LogError> {
        let inner = &*self.inner;
        let path = inner.dir.join("dedup");
        tracing::warn!("{}: {why}; rebuilding it from the log", path.display());
        w.dedup =
            Dedup::create(&inner.options.disk, &path, inner.options.dedup_cache_bytes).map_err(dedup_err)?;
        let segments = inner.segments.read().unwrap_or_else(PoisonError::into_inner);
        catch_up_dedup(&mut w.dedup, &segments, &inner.offsets, &inner.nodes, size)
    }

    /// Append atoms; resolves once all of them are durable. An atom the log already holds is
    /// not written again: its existing position comes back with `new: false`.
    pub fn append(&self, atoms: Vec<Atom>) -> Result<Vec<Appended>, LogError> {
        let inner = &*self.inner;
        if inner.read_only {
            return Err(LogError::ReadOnly(inner.dir.clone()));
        }
        if inner.sealed.load(Ordering::Acquire) {
            return Err(LogError::Sealed(inner.dir.clone()));
        }
        let mut queue = lock(&inner.queue);
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push((ticket, atoms));
        loop {
            if let Some(result) = queue.done.remove(&ticket) {
                return result;
            }
            if queue.leading {
                queue = inner.queue_changed.wait(queue).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Lead one commit for everything queued so far.
            queue.leading = true;
            let group = std::mem::take(&mut queue.waiting);
            drop(queue);
            let results = self.commit_group(group);
            queue = lock(&inner.queue);
            queue.done.extend(results);
            queue.leading = false;
            inner.queue_changed.notify_all();
        }
    }

    fn commit_group(&self, group: Vec<(u64, Vec<Atom>)>) -> Vec<(u64, Result<Vec<Appended>, LogError>)> {
        let mut writer = lock(&self.inner.writer);
        if let Some(why) = &writer.halted {
            let err = LogError::Halted(why.clone());
            return group.into_iter().map(|(t, _)| (t, Err(err.clone()))).collect();
        }
        match self.write_group(&mut writer, &group) {
            Ok(per_request) => group.iter().map(|(t, _)| *t).zip(per_request.into_iter().map(Ok)).collect(),
            Err(e) => {
                // After a failed write or fsync the files' state is unknown: stop here and
                // let reopening (recovery) decide what is durable.
                writer.halted = Some(e.to_string());
                group.into_iter().map(|(t, _)| (t, Err(e.clone()))).collect()
            }
        }
    }

    fn write_group(
        &self,
        w: &mut Writer,
        group: &[(u64, Vec<Atom>)],
    ) -> Result<Vec<Vec<Appended>>, LogError> {
        let inner = &*self.inner;
        let start = w.frontier.size();
        if w.active_len >= inner.options.segment_bytes && start > 0 {
            self.roll_segment(w, start)?;
        }
        let nodes = NodeFile(&inner.nodes);
        let mut frontier = w.frontier.clone();
        let count: usize = group.iter().map(|(_, atoms)| atoms.len()).sum();
        let bytes: usize = group.iter().flat_map(|(_, atoms)| atoms).map(|a| a.bytes().len()).sum();
        let mut fresh: rustc_hash::FxHashMap<Digest, u64> =
            rustc_hash::FxHashMap::with_capacity_and_hasher(count, Default::default());
        let mut seg_buf = Vec::with_capacity(bytes + count * RECORD_HEADER_LEN as usize);
        let mut offset_buf = Vec::with_capacity(count * 8);
        let mut node_buf = Vec::with_capacity(count * 2 * 32 + 64 * 32);
        // First the duplicate filter, for every atom unlike those before it in the group, in
        // one transaction; then the new atoms in order.
        let leaves: Vec<Vec<Digest>> =
            group.iter().map(|(_, atoms)| atoms.iter().map(leaf_hash).collect()).collect();
        let mut unique: Vec<(i64, Digest)> = Vec::with_capacity(count);
        for ((_, atoms), leaves) in group.iter().zip(&leaves) {
            for (atom, leaf) in atoms.iter().zip(leaves) {
                if fresh.insert(*leaf, u64::MAX).is_none() {
                    unique.push((atom.parts().valid.from_ns, *leaf));
                }
            }
        }
        let held =
            match w.dedup.group(&unique, start, start, |p| nodes.subtree(0, p).map_err(Lookup::Log), false) {
                Ok(held) => held,
                Err(Lookup::Log(e)) => return Err(e),
                Err(Lookup::Filter(e)) => {
                    self.rebuild_filter(w, start, &e)?;
                    w.dedup.group(&unique, start, start, |p| nodes.subtree(0, p), false)?
                }
            };
        let mut held = held.into_iter();
        fresh.clear();
        let mut out = Vec::with_capacity(group.len());
        for ((_, atoms), leaves) in group.iter().zip(&leaves) {
            let mut appended = Vec::with_capacity(atoms.len());
            for (atom, leaf) in atoms.iter().zip(leaves) {
                let known = match fresh.get(leaf) {
                    Some(&p) => Some(p),
                    None => held.next().flatten(),
                };
                if let Some(position) = known {
                    fresh.insert(*leaf, position);
                    appended.push(Appended { position, new: false });
                    continue;
                }
                let position = frontier.size();
                let offset = w.active_len + seg_buf.len() as u64;
                segment::put_record(&mut seg_buf, atom.bytes());
                offset_buf.extend_from_slice(&offset.to_le_bytes());
                frontier.push(*leaf, |d| node_buf.extend_from_slice(d));
                fresh.insert(*leaf, position);
                appended.push(Appended { position, new: true });
            }
            out.push(appended);
        }
        if !seg_buf.is_empty() {
            let segments = inner.segments.read().unwrap_or_else(PoisonError::into_inner);
            let active = segments.last().map(|s| Arc::clone(&s.file));
            drop(segments);
            let Some(active) = active else {
                return Err(LogError::Corrupt { position: start, reason: "no segments".into() });
            };
            active.write_all_at(&seg_buf, w.active_len).map_err(io_err("writing a segment"))?;
            inner.offsets.write_all_at(&offset_buf, start * 8).map_err(io_err("writing offsets"))?;
            inner
                .nodes
                .write_all_at(&node_buf, postorder_len(start) * 32)
                .map_err(io_err("writing nodes"))?;
            // The segment is the truth: once it is durable, so are these atoms. The derived
            // files follow at the next checkpoint (or are re-derived on open).
            active.sync_data().map_err(io_err("syncing a segment"))?;
            inner.groups_committed.fetch_add(1, Ordering::Relaxed);
            w.active_len += seg_buf.len() as u64;
            w.since_checkpoint += seg_buf.len() as u64;
            w.frontier = frontier;
            *inner.head.write().unwrap_or_else(PoisonError::into_inner) =
                TreeHead { size: w.frontier.size(), root: w.frontier.root() };
            if w.since_checkpoint >= inner.options.checkpoint_bytes {
                w.dedup.sync().map_err(dedup_err)?;
                inner.checkpoint(w.frontier.size())?;
                w.since_checkpoint = 0;
            }
        }
        Ok(out)
    }

    /// Make the derived files durable now, so reopening re-derives nothing.
    pub fn checkpoint(&self) -> Result<(), LogError> {
        let mut w = lock(&self.inner.writer);
        w.dedup.sync().map_err(dedup_err)?;
        self.inner.checkpoint(w.frontier.size())?;
        w.since_checkpoint = 0;
        Ok(())
    }

    fn roll_segment(&self, w: &mut Writer, first: u64) -> Result<(), LogError> {
        let dir = self.inner.dir.join("segments");
        let disk = &self.inner.options.disk;
        let file = new_segment(disk, &dir, first)?;
        sync_dir(disk, &dir)?;
        self.inner
            .segments
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Segment { first, file: Arc::new(file) });
        w.active_len = HEADER_LEN;
        Ok(())
    }

    /// Read every atom from `from` on, in order, checking each record's checksum.
    pub fn scan(&self, from: u64) -> impl Iterator<Item = Result<(u64, Atom), LogError>> + use<> {
        self.scan_bytes(from).map(|item| {
            let (position, bytes) = item?;
            let atom =
                Atom::decode(&bytes).map_err(|e| LogError::Corrupt { position, reason: e.to_string() })?;
            Ok((position, atom))
        })
    }

    /// Read every record from `from` on, in order, checking each checksum but not decoding
    /// (for readers that decode on several cores).
    pub fn scan_bytes(&self, from: u64) -> Scan {
        Scan::new(self.clone(), from, self.size())
    }

    /// Re-read every record, recompute every tree node and compare with what is stored; also
    /// recompute the root at size `mark` (say, the committed head's). `progress` is called
    /// with the number of records checked so far.
    pub fn audit(&self, mark: u64, mut progress: impl FnMut(u64)) -> Result<Audit, LogError> {
        let size = self.size();
        let mut root_at_mark = None;
        let mut frontier = Frontier::<LogHasher>::new();
        let mut stored_nodes =
            BufReader::with_capacity(1 << 20, DiskReadAt { file: &self.inner.nodes, at: 0 });
        let mut stored_offsets =
            BufReader::with_capacity(1 << 16, DiskReadAt { file: &self.inner.offsets, at: 0 });
        let segments: Vec<(u64, Arc<File>)> = self
            .inner
            .segments
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|s| (s.first, Arc::clone(&s.file)))
            .collect();
        let mut position = 0u64;
        let bad = |position: u64, reason: String| {
            Ok(Audit { size, root: None, root_at_mark: None, first_bad: Some((position, reason)) })
        };
        if mark == 0 {
            root_at_mark = Some(frontier.root());
        }
        for (index, (first, file)) in segments.iter().enumerate() {
            if position >= size {
                break;
            }
            if *first != position {
                return bad(position, format!("segment {index} starts at position {first}"));
            }
            let mut head = [0u8; 16];
            file.read_exact_at(&mut head, 0).map_err(io_err("reading a segment header"))?;
            if head != segment::header(*first) {
                return bad(position, format!("segment {index} has a damaged header"));
            }
            let seg_len = file_len(file, "a segment")?;
            let mut reader = RecordReader::new(
                BufReader::with_capacity(1 << 20, ReadAt { file, at: HEADER_LEN }),
                seg_len,
            );
            while position < size {
                let at = reader.offset();
                let bytes = match reader.next_record().map_err(io_err("reading a segment"))? {
                    Record::End => break,
                    Record::Good(bytes) => bytes,
                    Record::Torn => return bad(position, "record is cut short".into()),
                    Record::Bad(why) => return bad(position, why.into()),
                };
                if let Err(e) = Atom::decode(&bytes) {
                    return bad(position, format!("record is not a valid atom: {e}"));
                }
                let mut stored_offset = [0u8; 8];
                stored_offsets.read_exact(&mut stored_offset).map_err(io_err("reading offsets"))?;
                if u64::from_le_bytes(stored_offset) != at {
                    return bad(position, "stored offset does not match the segment".into());
                }
                let mut mismatch = None;
                let mut read_err = None;
                frontier.push(leaf_hash_of_bytes(&bytes), |computed| {
                    let mut stored = [0u8; 32];
                    if let Err(e) = stored_nodes.read_exact(&mut stored) {
                        read_err.get_or_insert(e);
                    } else if stored != *computed && mismatch.is_none() {
                        mismatch = Some(());
                    }
                });
                if let Some(e) = read_err {
                    return Err(io_err("reading nodes")(e));
                }
                if mismatch.is_some() {
                    return bad(position, "stored tree hashes do not match the record".into());
                }
                position += 1;
                if position == mark {
                    root_at_mark = Some(frontier.root());
                }
                if position.is_multiple_of(4096) {
                    progress(position);
                }
            }
        }
        progress(position);
        if position != size {
            return bad(position, format!("segments hold {position} records, the log says {size}"));
        }
        Ok(Audit { size, root: Some(frontier.root()), root_at_mark, first_bad: None })
    }
}

impl Inner {
    /// Make the derived files durable up to `size` and record that.
    fn checkpoint(&self, size: u64) -> Result<(), LogError> {
        self.offsets.sync_data().map_err(io_err("syncing offsets"))?;
        self.nodes.sync_data().map_err(io_err("syncing nodes"))?;
        write_checkpoint(&self.checkpoint, size)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A clean close leaves nothing to re-derive; if this fails, opening re-derives.
        let w = self.writer.get_mut().unwrap_or_else(PoisonError::into_inner);
        let (size, pending) = (w.frontier.size(), w.halted.is_none() && w.since_checkpoint > 0);
        if pending {
            let _ = w.dedup.sync();
            let _ = self.checkpoint(size);
        }
    }
}

/// The checkpoint file: the size up to which the derived files are durable, as a u64 and its
/// CRC-32C (docs/LOG.md, "Checkpoint"). Absent or damaged reads as 0.
fn read_checkpoint(file: &DiskFile) -> u64 {
    let mut b = [0u8; 12];
    if file.read_exact_at(&mut b, 0).is_err() {
        return 0;
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&b[..8]);
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&b[8..]);
    if crc32c::crc32c(&size) == u32::from_le_bytes(crc) { u64::from_le_bytes(size) } else { 0 }
}

fn write_checkpoint(file: &DiskFile, size: u64) -> Result<(), LogError> {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&size.to_le_bytes());
    b[8..].copy_from_slice(&crc32c::crc32c(&size.to_le_bytes()).to_le_bytes());
    file.write_all_at(&b, 0).and_then(|()| file.sync_data()).map_err(io_err("writing the checkpoint"))
}

/// What an audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    pub size: u64,
    /// The root recomputed from the records, when every record checked out.
    pub root: Option<Digest>,
    /// The root recomputed at the size asked for, if the log reached it.
    pub root_at_mark: Option<Digest>,
    /// The first position that did not check out, and why.
    pub first_bad: Option<(u64, String)>,
}

/// Sequential reads through a log, from a position to the size when the scan began.
pub struct Scan {
    log: Log,
    next: u64,
    end: u64,
    reader: Option<(usize, RecordReader<BufReader<ReadAtOwned>>)>,
}

impl Scan {
    fn new(log: Log, from: u64, end: u64) -> Self {
        Self { log, next: from, end, reader: None }
    }

    fn open_reader(&self) -> Result<(usize, RecordReader<BufReader<ReadAtOwned>>), LogError> {
        let segments = self.log.inner.segments.read().unwrap_or_else(PoisonError::into_inner);
        let (i, offset) = locate(&segments, &self.log.inner.offsets, self.next)?;
        let file = Arc::clone(&segments[i].file);
        let len = file_len(&file, "a segment")?;
        let mut reader =
            RecordReader::new(BufReader::with_capacity(1 << 20, ReadAtOwned { file, at: offset }), len);
        reader_skip(&mut reader, offset);
        Ok((i, reader))
    }
}

impl Iterator for Scan {
    type Item = Result<(u64, Vec<u8>), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let position = self.next;
        loop {
            if self.reader.is_none() {
                match self.open_reader() {
                    Ok(r) => self.reader = Some(r),
                    Err(e) => {
                        self.next = self.end;
                        return Some(Err(e));
                    }
                }
            }
            let (_, reader) = self.reader.as_mut()?;
            let record = match reader.next_record() {
                Ok(r) => r,
                Err(e) => {
                    self.next = self.end;
                    return Some(Err(io_err("reading a segment")(e)));
                }
            };
            let result = match record {
                // The segment ended: the next position starts the next segment.
                Record::End => {
                    self.reader = None;
                    continue;
                }
                Record::Good(bytes) => Ok(bytes),
                other => Err(LogError::Corrupt { position, reason: format!("record is {other:?}") }),
            };
            self.next += 1;
            if result.is_err() {
                self.next = self.end;
            }
            return Some(result.map(|bytes| (position, bytes)));
        }
    }
}

/// `Read` over a file from an offset, with positioned reads (so handles can be shared).
struct ReadAt<'a> {
    file: &'a fs::File,
    at: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The same over a derived file.
struct DiskReadAt<'a> {
    file: &'a DiskFile,
    at: u64,
}

impl Read for DiskReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

struct ReadAtOwned {
    file: Arc<File>,
    at: u64,
}

impl Read for ReadAtOwned {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Start a reader's offset count at `offset` (its inner reader already starts there).
fn reader_skip<R: Read>(reader: &mut RecordReader<R>, offset: u64) {
    reader.set_offset(offset);
}

fn new_segment(disk: &Disk, dir: &Path, first: u64) -> Result<File, LogError> {
    let path = segment::segment_path(dir, first);
    let file = disk.open(&path, Open::New).map_err(io_err(format!("creating {}", path.display())))?;
    file.write_all_at(&segment::header(first), 0).map_err(io_err("writing a segment header"))?;
    file.sync_all().map_err(io_err("syncing a new segment"))?;
    Ok(file)
}

/// What the segments alone say, read without the lock, the derived files or any write: for a
/// log that will not open, how far it is whole and what lies past the damage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    pub segments: usize,
    /// Whole records (valid atoms) before the first damage: positions `0..whole`.
    pub whole: u64,
    /// The first damage: the segment file, the byte in it and what is wrong.
    pub damage: Option<(PathBuf, u64, String)>,
    /// Whole records found after the damage, following each record's length while it holds,
    /// and in the segments after it: what a copy of the log could restore around the damage.
    pub whole_after: u64,
}

/// The first positions of the segments in `seg_dir`, from their names, in order.
pub(crate) fn segment_firsts(seg_dir: &Path) -> Result<Vec<u64>, LogError> {
    let mut firsts: Vec<u64> = fs::read_dir(seg_dir)
        .map_err(io_err(format!("listing {}", seg_dir.display())))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".seg")?.parse().ok())
        .collect();
    firsts.sort_unstable();
    Ok(firsts)
}

/// Survey a log's segments (see [`Survey`]); the log at `dir` is only read.
pub fn survey(dir: &Path) -> Result<Survey, LogError> {
    let seg_dir = dir.join("segments");
    let firsts = segment_firsts(&seg_dir)?;
    let mut out = Survey { segments: firsts.len(), ..Survey::default() };
    for first in firsts {
        let path = segment::segment_path(&seg_dir, first);
        let file = fs::File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        let len = file_len(&file, "a segment")?;
        let mut head = [0u8; 16];
        let header_ok =
            len >= HEADER_LEN && file.read_exact_at(&mut head, 0).is_ok() && head == segment::header(first);
        if out.damage.is_none() && (!header_ok || first != out.whole) {
            let why = if header_ok {
                format!("it starts at position {first}, not {}", out.whole)
            } else {
                "its header is damaged".into()
            };
            out.damage = Some((path.clone(), 0, why));
        }
        let mut at = HEADER_LEN;
        while at < len {
            let record = segment::read_record_at(&file, at, len).map_err(io_err("reading a segment"))?;
            let (good, step) = match &record {
                Record::Good(b) => (Atom::decode(b).is_ok(), RECORD_HEADER_LEN + b.len() as u64),
                _ => (false, 0),
            };
            if good && header_ok {
                if out.damage.is_none() {
                    out.whole += 1;
                } else {
                    out.whole_after += 1;
                }
                at += step;
                continue;
            }
            if out.damage.is_none() {
                let why = match record {
                    Record::Good(_) => "a record that is not a valid atom".to_owned(),
                    Record::Torn => "a record cut short".to_owned(),
                    Record::Bad(why) => why.to_owned(),
                    Record::End => "the end".to_owned(),
                };
                out.damage = Some((path.clone(), at, why));
            }
            // Past a damaged record, go on by its length while that points at whole records.
            let mut len_bytes = [0u8; 4];
            if file.read_exact_at(&mut len_bytes, at).is_err() {
                break;
            }
            let next = at + RECORD_HEADER_LEN + u64::from(u32::from_le_bytes(len_bytes));
            if next <= at
                || next >= len
                || !matches!(segment::read_record_at(&file, next, len), Ok(Record::Good(_)))
            {
                break;
            }
            at = next;
        }
    }
    Ok(out)
}

fn load_segments(disk: &Disk, dir: &Path, writable: bool) -> Result<Vec<Segment>, LogError> {
    let mut firsts = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(format!("listing {}", dir.display())))? {
        let name = entry.map_err(io_err("listing segments"))?.file_name();
        let Some(first) =
            name.to_str().and_then(|n| n.strip_suffix(".seg")).and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        firsts.push(first);
    }
    firsts.sort_unstable();
    let mut segments = Vec::with_capacity(firsts.len());
    let count = firsts.len();
    for (i, first) in firsts.into_iter().enumerate() {
        let path = segment::segment_path(dir, first);
        let file = if writable { open_rw(disk, &path)? } else { open_ro(disk, &path)? };
        let mut head = [0u8; 16];
        let len = file_len(&file, "a segment")?;
        if len < HEADER_LEN && i + 1 == count && i > 0 && !writable {
            continue;
        }
        if len < HEADER_LEN && i + 1 == count && i > 0 {
            // A segment whose creation was cut short holds no records.
            disk.remove_file(&path).map_err(io_err(format!("removing unfinished {}", path.display())))?;
            sync_dir(disk, dir)?;
            continue;
        }
        if len < HEADER_LEN || file.read_exact_at(&mut head, 0).is_err() || head != segment::header(first) {
            return Err(LogError::Corrupt {
                position: first,
                reason: format!("{} has a damaged header", path.display()),
            });
        }
        segments.push(Segment { first, file: Arc::new(file) });
    }
    if segments.first().is_none_or(|s| s.first != 0) {
        return Err(LogError::Corrupt { position: 0, reason: "the first segment is missing".into() });
    }
    Ok(segments)
}

/// Which segment holds `position`, and the record's offset in it.
fn locate(segments: &[Segment], offsets: &DiskFile, position: u64) -> Result<(usize, u64), LogError> {
    let i = segments.partition_point(|s| s.first <= position).saturating_sub(1);
    let mut o = [0u8; 8];
    offsets.read_exact_at(&mut o, position * 8).map_err(io_err("reading offsets"))?;
    Ok((i, u64::from_le_bytes(o)))
}

/// The most leaves whose post-order nodes fit in `nodes` stored nodes.
fn leaves_in(nodes: u64) -> u64 {
    // postorder_len(n) = 2n - popcount(n) is increasing, and popcount(n) <= 64 puts the
    // answer within 32 of nodes / 2.
    let mut n = nodes / 2 + 33;
    while n > 0 && postorder_len(n) > nodes {
        n -= 1;
    }
    n
}

/// Why a lookup in the duplicate filter failed: the filter itself (rebuilt), or the log.
enum Lookup {
    Filter(dedup::DedupError),
    Log(LogError),
}

impl From<dedup::DedupError> for Lookup {
    fn from(e: dedup::DedupError) -> Self {
        Lookup::Filter(e)
    }
}

fn dedup_err(e: dedup::DedupError) -> LogError {
    LogError::Corrupt { position: 0, reason: e.to_string() }
}

impl From<dedup::DedupError> for LogError {
    fn from(e: dedup::DedupError) -> Self {
        dedup_err(e)
    }
}

/// Take the atoms the duplicate filter does not cover yet into it, from the segments (after a
/// crash, or when the filter was rebuilt).
fn catch_up_dedup(
    dedup: &mut Dedup,
    segments: &[Segment],
    offsets: &DiskFile,
    nodes: &DiskFile,
    size: u64,
) -> Result<(), LogError> {
    let mut from = dedup.covered().min(size);
    if from == size {
        return Ok(());
    }
    tracing::info!("taking {} atoms into the duplicate filter", size - from);
    let stored = |p: u64| NodeFile(nodes).subtree(0, p);
    while from < size {
        let end = (from + 8192).min(size);
        let mut group = Vec::with_capacity((end - from) as usize);
        for position in from..end {
            let (i, offset) = locate(segments, offsets, position)?;
            let bytes = match segment::read_record_at(&segments[i].file, offset, u64::MAX)
                .map_err(io_err("reading a segment"))?
            {
                Record::Good(bytes) => bytes,
                other => return Err(LogError::Corrupt { position, reason: format!("record is {other:?}") }),
            };
            let atom =
                Atom::decode(&bytes).map_err(|e| LogError::Corrupt { position, reason: e.to_string() })?;
            group.push((atom.parts().valid.from_ns, leaf_hash(&atom)));
        }
        // Atoms already covered (a filter ahead of a log cut back) answer as held.
        dedup.group(&group, from, from, stored, false)?;
        from = end;
    }
    dedup.sync().map_err(dedup_err)?;
    Ok(())
}
