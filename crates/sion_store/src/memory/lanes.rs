//! Where a sealed memory keeps the blobs that retention forgets (docs/SEAL.md, "Retention"):
//! camera frames and map tiles, each stream in a directory of its own, in segment files of
//! consecutive leaves of one epoch. Retention forgets a whole segment's leaves (one range: a
//! cut of at most 32 nodes in the key cover) and then removes the file, so the disk a stream
//! takes is bounded by its budget, not by how long the robot has lived.
//!
//! A segment `E<epoch, 8 hex>-L<first leaf, 8 hex>.seg` is "SIONSEG1", then records: `u32`
//! leaf, `i64` stamp (the frame's time, ns), `u32` length, 32 BLAKE3 of the body, the body
//! (the sealed bytes). A segment that is closed ends with a footer record: leaf `u32::MAX`,
//! the newest stamp it holds, length 0, 32 zero bytes — so opening reads one record of each
//! closed segment, not all of them. Records are made durable (`fdatasync`) before the atoms
//! that commit to them are appended; a record a crash cut short is cut off when the segment is
//! next written (a reader leaves it).

use std::fs;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sion_disk::{Disk, File, Open};

const MAGIC: &[u8; 8] = b"SIONSEG1";
const RECORD: u64 = 4 + 8 + 4 + 32;
const FOOTER_LEAF: u32 = u32::MAX;
/// A segment is closed past this size (so retention drops the disk in steps of this).
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// A record's body is at most this (a camera frame is at most the node's `max_image_bytes`).
const MAX_BODY: u64 = 256 << 20;

/// Why a lane could not keep or give a blob.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaneError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Damaged { path: PathBuf, why: String },
    #[error("leaf {leaf} of epoch {epoch} is not held (forgotten by retention, or never kept)")]
    NotHeld { epoch: u32, leaf: u32 },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LaneError {
    let path = path.to_owned();
    move |source| LaneError::Io { what, path, source }
}

/// One segment: its leaves (first to last), bytes, newest stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub epoch: u32,
    pub first: u32,
    pub last: u32,
    pub bytes: u64,
    pub newest_ns: i64,
    pub path: PathBuf,
}

fn segment_name(epoch: u32, first: u32) -> String {
    format!("E{epoch:08x}-L{first:08x}.seg")
}

/// A segment's epoch and first leaf from its name, if it is exactly a segment's name (anything
/// else in the directory is left alone).
fn parse_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix('E')?.strip_suffix(".seg")?;
    let (e, l) = rest.split_once("-L")?;
    let parsed = (u32::from_str_radix(e, 16).ok()?, u32::from_str_radix(l, 16).ok()?);
    (segment_name(parsed.0, parsed.1) == name).then_some(parsed)
}

struct Open_ {
    segment: Segment,
    file: File,
    /// Where the next record goes (past any torn tail, which is cut before writing).
    end: u64,
    torn: bool,
}

struct State {
    closed: Vec<Segment>,
    open: Option<Open_>,
}

/// One stream's lane.
pub struct Lane {
    disk: Disk,
    dir: PathBuf,
    writer: bool,
    segment_bytes: std::sync::atomic::AtomicU64,
    state: Mutex<State>,
}

/// Read a record header at `at`: (leaf, stamp, length, hash).
fn header(file: &fs::File, path: &Path, at: u64) -> Result<(u32, i64, u64, [u8; 32]), LaneError> {
    let mut h = [0u8; RECORD as usize];
    file.read_exact_at(&mut h, at).map_err(io_err("reading", path))?;
    let leaf = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&h[4..12]);
    let len = u64::from(u32::from_le_bytes([h[12], h[13], h[14], h[15]]));
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&h[16..48]);
    Ok((leaf, i64::from_le_bytes(s), len, hash))
}

/// Walk a segment's records: its leaves, newest stamp, and where its whole records end.
fn scan(file: &fs::File, path: &Path, epoch: u32, first: u32) -> Result<(Segment, u64, bool), LaneError> {
    let len = file.metadata().map_err(io_err("reading the size of", path))?.len();
    let mut magic = [0u8; 8];
    if len >= 8 {
        file.read_exact_at(&mut magic, 0).map_err(io_err("reading", path))?;
        if &magic != MAGIC {
            return Err(LaneError::Damaged {
                path: path.to_owned(),
                why: "not a segment (no SIONSEG1)".into(),
            });
        }
    }
    let mut seg =
        Segment { epoch, first, last: first, bytes: len, newest_ns: i64::MIN, path: path.to_owned() };
    let mut at = 8u64.min(len);
    let mut closed = false;
    while at + RECORD <= len {
        let (leaf, stamp, body, _) = header(file, path, at)?;
        if leaf == FOOTER_LEAF && body == 0 {
            seg.newest_ns = seg.newest_ns.max(stamp);
            at += RECORD;
            closed = true;
            break;
        }
        if body > MAX_BODY || at + RECORD + body > len {
            break; // torn (or damaged) from here on
        }
        seg.last = seg.last.max(leaf);
        seg.newest_ns = seg.newest_ns.max(stamp);
        at += RECORD + body;
    }
    Ok((seg, at, closed))
}

impl Lane {
    /// The lane in `dir` (made if absent, for a writer; a reader writes nothing). Segments
    /// close past [`SEGMENT_BYTES`], or past `SION_SEGMENT_KIB` KiB if the environment says
    /// (tests and benchmarks that retain many segments in little time).
    pub fn open(disk: &Disk, dir: &Path, writer: bool) -> Result<Self, LaneError> {
        let bytes = std::env::var("SION_SEGMENT_KIB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&k| k > 0)
            .map_or(SEGMENT_BYTES, |k| k << 10);
        Self::open_with(disk, dir, writer, bytes)
    }

    /// The same, closing segments past `segment_bytes` (tests use small ones).
    pub fn open_with(disk: &Disk, dir: &Path, writer: bool, segment_bytes: u64) -> Result<Self, LaneError> {
        if writer {
            disk.create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        let mut names: Vec<(u32, u32)> = match fs::read_dir(dir) {
            Ok(entries) => entries.flatten().filter_map(|e| parse_name(e.file_name().to_str()?)).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err("listing", dir)(e)),
        };
        names.sort_unstable();
        let mut closed = Vec::new();
        let mut open = None;
        for (i, &(epoch, first)) in names.iter().enumerate() {
            let path = dir.join(segment_name(epoch, first));
            let file = fs::File::open(&path).map_err(io_err("opening", &path))?;
            let last_one = i + 1 == names.len();
            // A closed segment: its footer alone.
            let len = file.metadata().map_err(io_err("reading the size of", &path))?.len();
            // The next segment of the same epoch bounds this one's leaves; the last of an epoch is
            // walked for them.
            if !last_one && len >= 8 + RECORD && names[i + 1].0 == epoch {
                let (leaf, stamp, body, _) = header(&file, &path, len - RECORD)?;
                if leaf == FOOTER_LEAF && body == 0 {
                    let last = names[i + 1].1.saturating_sub(1);
                    closed.push(Segment { epoch, first, last, bytes: len, newest_ns: stamp, path });
                    continue;
                }
            }
            let (segment, end, was_closed) = scan(&file, &path, epoch, first)?;
            if was_closed || !last_one {
                closed.push(segment);
            } else {
                let f = if writer {
                    disk.open(&path, Open::Existing).map_err(io_err("opening", &path))?
                } else {
                    disk.open(&path, Open::Read).map_err(io_err("opening", &path))?
                };
                // Made, and cut short before its magic was durable: written again before anything.
                let end = end.max(8);
                open = Some(Open_ { torn: end != segment.bytes, end, segment, file: f });
            }
        }
        Ok(Self {
            disk: disk.clone(),
            dir: dir.to_owned(),
            writer,
            segment_bytes: std::sync::atomic::AtomicU64::new(segment_bytes),
            state: Mutex::new(State { closed, open }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Close the open segment: its footer written and made durable.
    fn close(&self, state: &mut State) -> Result<(), LaneError> {
        let Some(mut o) = state.open.take() else { return Ok(()) };
        let path = o.segment.path.clone();
        let mut footer = Vec::with_capacity(RECORD as usize);
        footer.extend_from_slice(&FOOTER_LEAF.to_le_bytes());
        footer.extend_from_slice(&o.segment.newest_ns.to_le_bytes());
        footer.extend_from_slice(&0u32.to_le_bytes());
        footer.extend_from_slice(&[0u8; 32]);
        if let Err(e) = o.file.write_all_at(&footer, o.end).and_then(|()| o.file.sync_data()) {
            state.open = Some(o);
            return Err(io_err("closing", &path)(e));
        }
        o.segment.bytes = o.end + RECORD;
        state.closed.push(o.segment);
        Ok(())
    }

    /// Keep sealed blobs `(epoch, leaf, stamp, bytes)`, in leaf order, durably (one
    /// `fdatasync` per segment written).
    pub fn keep(&self, blobs: &[(u32, u32, i64, &[u8])]) -> Result<(), LaneError> {
        if blobs.is_empty() {
            return Ok(());
        }
        let segment_bytes = self.segment_bytes.load(std::sync::atomic::Ordering::Relaxed);
        let mut state = self.state();
        if let Some((_, leaf, _, body)) = blobs.iter().find(|b| b.3.len() as u64 > MAX_BODY) {
            return Err(LaneError::Damaged {
                path: self.dir.clone(),
                why: format!(
                    "leaf {leaf}: {} bytes, more than a segment's record holds ({MAX_BODY})",
                    body.len()
                ),
            });
        }
        let mut i = 0;
        while i < blobs.len() {
            let (epoch, leaf, _, _) = blobs[i];
            // Leaves of a lane only grow within an epoch: a segment holds those from its first on.
            let fits = state.open.as_ref().is_some_and(|o| {
                o.segment.epoch == epoch && o.end < segment_bytes && leaf >= o.segment.first
            });
            if !fits {
                self.close(&mut state)?;
                let path = self.dir.join(segment_name(epoch, leaf));
                let file = self.disk.open(&path, Open::Create).map_err(io_err("creating", &path))?;
                file.write_all_at(MAGIC, 0).map_err(io_err("writing", &path))?;
                self.disk.sync_dir(&self.dir).map_err(io_err("syncing", &self.dir))?;
                let segment = Segment { epoch, first: leaf, last: leaf, bytes: 8, newest_ns: i64::MIN, path };
                state.open = Some(Open_ { segment, file, end: 8, torn: false });
            }
            let Some(o) = state.open.as_mut() else { break };
            if o.torn {
                o.file.set_len(o.end).map_err(io_err("cutting a torn tail of", &o.segment.path))?;
                o.file.write_all_at(MAGIC, 0).map_err(io_err("writing", &o.segment.path))?;
                o.torn = false;
            }
            let mut buf = Vec::new();
            while i < blobs.len()
                && blobs[i].0 == o.segment.epoch
                && o.end + (buf.len() as u64) < segment_bytes
            {
                let (_, leaf, stamp, body) = blobs[i];
                buf.extend_from_slice(&leaf.to_le_bytes());
                buf.extend_from_slice(&stamp.to_le_bytes());
                buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
                buf.extend_from_slice(blake3::hash(body).as_bytes());
                buf.extend_from_slice(body);
                o.segment.last = o.segment.last.max(leaf);
                o.segment.newest_ns = o.segment.newest_ns.max(stamp);
                i += 1;
            }
            let path = o.segment.path.clone();
            o.file.write_all_at(&buf, o.end).map_err(io_err("writing", &path))?;
            o.file.sync_data().map_err(io_err("syncing", &path))?;
            o.end += buf.len() as u64;
            o.segment.bytes = o.end;
        }
        Ok(())
    }

    /// The sealed bytes of `leaf` of `epoch`, checked against `hash` (the atom's).
    pub fn get(&self, epoch: u32, leaf: u32, hash: &[u8; 32]) -> Result<Vec<u8>, LaneError> {
        let path = {
            let state = self.state();
            let all = state.closed.iter().chain(state.open.as_ref().map(|o| &o.segment));
            all.filter(|s| s.epoch == epoch && s.first <= leaf)
                .max_by_key(|s| s.first)
                .map(|s| s.path.clone())
        };
        let Some(path) = path else { return Err(LaneError::NotHeld { epoch, leaf }) };
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LaneError::NotHeld { epoch, leaf });
            }
            Err(e) => return Err(io_err("opening", &path)(e)),
        };
        let len = file.metadata().map_err(io_err("reading the size of", &path))?.len();
        let damaged = |why: String| LaneError::Damaged { path: path.clone(), why };
        let mut at = 8u64;
        while at + RECORD <= len {
            let (l, _, body, h) = header(&file, &path, at)?;
            if l == FOOTER_LEAF {
                break;
            }
            if body > MAX_BODY || at + RECORD + body > len {
                // Damaged or torn before the leaf asked for: not forgotten — damaged.
                return Err(damaged(format!("a record at byte {at} runs past the segment's end")));
            }
            if l == leaf {
                if &h != hash {
                    return Err(damaged(format!("leaf {leaf} is not the blob its atom commits to")));
                }
                let mut out = vec![0u8; body as usize];
                file.read_exact_at(&mut out, at + RECORD).map_err(io_err("reading", &path))?;
                if blake3::hash(&out).as_bytes() != hash {
                    return Err(LaneError::Damaged {
                        path,
                        why: format!("leaf {leaf} does not hash to its name"),
                    });
                }
                return Ok(out);
            }
            at += RECORD + body;
        }
        Err(LaneError::NotHeld { epoch, leaf })
    }

    /// The closed segments (oldest first), the open one, and the newest stamp kept.
    pub fn segments(&self) -> (Vec<Segment>, Option<Segment>) {
        let state = self.state();
        (state.closed.clone(), state.open.as_ref().map(|o| o.segment.clone()))
    }

    /// Bytes the lane takes on disk.
    pub fn bytes(&self) -> u64 {
        let state = self.state();
        state.closed.iter().map(|s| s.bytes).sum::<u64>() + state.open.as_ref().map_or(0, |o| o.segment.bytes)
    }

    /// Remove a closed segment (its leaves forgotten first, by the caller): its file deleted and
    /// the directory made durable.
    pub fn remove(&self, segment: &Segment) -> Result<(), LaneError> {
        if !self.writer {
            return Ok(());
        }
        let mut state = self.state();
        state.closed.retain(|s| s.path != segment.path);
        match self.disk.remove_file(&segment.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &segment.path)(e)),
        }
        self.disk.sync_dir(&self.dir).map_err(io_err("syncing", &self.dir))
    }

    /// Close segments past `bytes` from now on (tests and benchmarks that retain many
    /// segments in little time).
    pub fn set_segment_bytes(&self, bytes: u64) {
        self.segment_bytes.store(bytes.max(64), std::sync::atomic::Ordering::Relaxed);
    }

    /// Close the open segment (so that retention may take it next).
    pub fn close_open(&self) -> Result<(), LaneError> {
        let mut state = self.state();
        self.close(&mut state)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
