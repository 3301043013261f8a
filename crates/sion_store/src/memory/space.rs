//! A sealed memory's space (docs/SEAL.md, "A sealed memory"): the writer's key store, the
//! leaf counter, the members' public keys, and the space's records as the log holds them.
//!
//! Files under `<memory>/space/`:
//! - `keys`: the key store (`SIONKEYS`), one cover per epoch;
//! - `leaves`: the leaf counter's reserved mark (`SIONLEAF`), so that no leaf — and so no key —
//!   ever seals twice, even across a crash;
//! - `members/<hex key hash>.pub`: each member's X-Wing public key (1,216 bytes);
//! - `records`: a cache of the space's records (log position and text, one JSON line each),
//!   rebuilt from the log when missing or damaged;
//! - `pending`: a record atom being applied (a space change or a forget), so that a crash
//!   between writing it to the log and applying it is finished when the memory next opens.
//!
//! The log is authoritative: every change is an atom first, then applied. A forget is made
//! durable in the log, then the key store is punctured and replaced; a pending forget is
//! applied again on open (puncturing is idempotent).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sion_disk::Disk;
use sion_seal::record::{self, ForgetRecord, LeafRange, Membership, SpaceRecord};
use sion_seal::{
    Codec, Cover, KeyStore, MemberKey, SealError, SealKind, Sealed, Wrapped, WrappedLeaf, bare_id,
    blob_parts, blob_plaintext, inline_payload, inline_plaintext, member_key_hash,
};
use sion_verify::atom::{Atom, AtomParts, BlobRef, Payload};

use super::lanes::{Lane, LaneError, Segment};
use crate::log::blobs::{BlobError, BlobStore};
use crate::log::{Appended, Log, LogError};

/// The largest blob opened (a camera frame is at most the node's `max_image_bytes`, 32 MiB).
const MAX_OPENED_BLOB: usize = 256 << 20;
/// Leaves reserved at a time: one write of the counter per this many seals.
const RESERVE: u64 = 4096;
const LEAF_MAGIC: &[u8; 8] = b"SIONLEAF";

/// Why a space could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpaceError {
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Lane(#[from] LaneError),
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("atom {position} has no sealed payload ({what}): only sealed payloads can be forgotten")]
    NotSealed { position: u64, what: String },
    #[error("atom {position}'s payload is sealed in space {found}…, not this memory's {expected}…")]
    OtherSpace { position: u64, found: String, expected: String },
    #[error("atom {position}'s blob {hash} is not in the blob store")]
    MissingBlob { position: u64, hash: String },
    #[error("no member {0} in the current epoch")]
    NoMember(String),
    #[error("member {0} is already in the current epoch")]
    AlreadyMember(String),
    #[error("{0}")]
    Record(String),
}

fn file_err(path: &Path, problem: impl ToString) -> SpaceError {
    SpaceError::File { path: path.to_owned(), problem: problem.to_string() }
}

/// A new epoch's cover wrapped to each member (their key hash, the wrap).
pub type Wraps = Vec<([u8; 32], Wrapped)>;

/// Where a payload stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// An inline payload, opened: the text or bytes it was.
    Inline(Payload),
    /// A blob, opened: its own media type and its content exactly as it was given.
    Blob { media_type: String, content: Vec<u8> },
}

/// Leaves are handed out in lanes, a range of 2^30 each (docs/SEAL.md, "The leaf counter"): a
/// stream whose payloads retention forgets oldest first (camera frames, map tiles) has a lane of
/// its own, so forgetting its oldest is one cut of the key tree, never a cut around another
/// stream's leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafLane {
    /// Inline payloads, and blobs of no stream below.
    Payloads = 0,
    /// What sensors saw, which a camera's retention forgets: camera frames
    /// (`sensor_msgs/msg/Image`, `CompressedImage`), laser scans and point clouds
    /// (`LaserScan`, `PointCloud2`).
    Camera = 1,
    /// Map tiles (`nav_msgs/msg/OccupancyGrid`).
    Map = 2,
    /// Other blobs.
    Other = 3,
}

const LANE_BITS: u32 = 30;
const LANES: usize = 4;

impl LeafLane {
    /// The lane of a blob of this media type.
    pub fn of(media_type: &str) -> Self {
        if media_type.ends_with("sensor_msgs/msg/Image")
            || media_type.ends_with("sensor_msgs/msg/CompressedImage")
            || media_type.ends_with("sensor_msgs/msg/LaserScan")
            || media_type.ends_with("sensor_msgs/msg/PointCloud2")
        {
            LeafLane::Camera
        } else if media_type.ends_with("nav_msgs/msg/OccupancyGrid") {
            LeafLane::Map
        } else {
            LeafLane::Other
        }
    }

    /// The lane a leaf is in.
    pub fn of_leaf(leaf: u32) -> Self {
        match leaf >> LANE_BITS {
            1 => LeafLane::Camera,
            2 => LeafLane::Map,
            3 => LeafLane::Other,
            _ => LeafLane::Payloads,
        }
    }

    fn end(self) -> u64 {
        (self as u64 + 1) << LANE_BITS
    }
}

/// The leaf counters of the current epoch, a lane each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Leaves {
    epoch: u32,
    /// The next leaf of each lane to seal with.
    next: [u64; LANES],
    /// Leaves of each lane below this are (or may have been) handed out: after a crash sealing
    /// resumes here.
    reserved: [u64; LANES],
}

impl Leaves {
    fn fresh(epoch: u32) -> Self {
        let start: [u64; LANES] = std::array::from_fn(|l| (l as u64) << LANE_BITS);
        Self { epoch, next: start, reserved: start }
    }

    /// No leaf of the epoch known to be unused: the next seal begins a new epoch.
    fn spent(epoch: u32) -> Self {
        let end: [u64; LANES] = std::array::from_fn(|l| (l as u64 + 1) << LANE_BITS);
        Self { epoch, next: end, reserved: end }
    }

    /// "SIONLEAF", u8 2, u32 epoch, 4 × u64 reserved (a lane each), u32 CRC-32C of what
    /// precedes it: 49 bytes.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(49);
        out.extend_from_slice(LEAF_MAGIC);
        out.push(2);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        for r in self.reserved {
            out.extend_from_slice(&r.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() != 49 || &bytes[..8] != LEAF_MAGIC || bytes[8] != 2 {
            return Err("not a SIONLEAF version 2 file of 49 bytes".into());
        }
        let crc = u32::from_le_bytes([bytes[45], bytes[46], bytes[47], bytes[48]]);
        if crc32c::crc32c(&bytes[..45]) != crc {
            return Err("its checksum fails (damaged)".into());
        }
        let epoch = u32::from_le_bytes([bytes[9], bytes[10], bytes[11], bytes[12]]);
        let mut reserved = [0u64; LANES];
        for (l, r) in reserved.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[13 + 8 * l..21 + 8 * l]);
            *r = u64::from_le_bytes(b);
            if *r < (l as u64) << LANE_BITS || *r > (l as u64 + 1) << LANE_BITS {
                return Err(format!("lane {l}'s mark {r} is outside its lane"));
            }
        }
        Ok(Self { epoch, next: reserved, reserved })
    }
}

struct Inner {
    keys: KeyStore,
    membership: Membership,
    /// (position, text) of each space record, in log order.
    records: Vec<(u64, String)>,
    leaves: Leaves,
}

/// A memory's space: what seals its payloads and blobs, forgets them, and shares them.
pub struct Space {
    disk: Disk,
    dir: PathBuf,
    id: [u8; 32],
    inner: Mutex<Inner>,
    /// Held for a whole change (pending written, atom appended, applied, pending removed):
    /// one change at a time, whoever asks (a forget service call, the brain's retention).
    changing: Mutex<()>,
    /// Camera frames and map tiles, sealed: kept apart so retention drops them by segment.
    camera: Lane,
    map: Lane,
}

/// How long, and within how many bytes, a stream's payloads are kept (0: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamRetention {
    /// Payloads whose stamp is older than the stream's newest by more than this are forgotten.
    pub keep_ns: i64,
    /// The oldest are forgotten while the stream takes more than this on disk.
    pub keep_bytes: u64,
}

/// A sealed memory's retention (docs/SEAL.md, "Retention"): per stream, forgotten by the brain
/// on schedule with forget atoms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Retention {
    pub camera: StreamRetention,
    pub map: StreamRetention,
}

/// What one pass of retention did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retained {
    /// Segments whose payloads were forgotten and whose files were removed.
    pub segments: usize,
    /// The forget atoms written.
    pub forget_positions: Vec<u64>,
    /// Bytes given back to the disk.
    pub bytes: u64,
}

/// A change to apply once its record atom is in the log.
enum Change {
    Space(SpaceRecord),
    Forget(ForgetRecord),
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn random32() -> Result<[u8; 32], SpaceError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| SpaceError::Record(format!("no randomness: {e}")))?;
    Ok(b)
}

impl Space {
    /// The creation record of a new space (its text gives the space's id and the log's policy).
    pub fn genesis() -> Result<String, SpaceError> {
        Ok(SpaceRecord::Create { nonce: random32()?, created_ns: now_ns() }.to_text())
    }

    /// Make the space of a new memory whose log was just opened with
    /// `record::policy(record::space_id(creation))`: its creation and first epoch become the
    /// log's first atoms, epoch 0's seed is drawn, and its files written.
    pub fn create(disk: &Disk, memory_dir: &Path, log: &Log, creation: &str) -> Result<Self, SpaceError> {
        let dir = memory_dir.join("space");
        if log.size() > 0 {
            return Err(SpaceError::Record(format!(
                "a sealed memory's space records are its first atoms, and this log already holds {}                  (a creation that was interrupted?): remove the directory and create it again",
                log.size()
            )));
        }
        disk.create_dir_all(&dir.join("members")).map_err(|e| file_err(&dir, e))?;
        let id = record::space_id(creation);
        let t = now_ns();
        let first = SpaceRecord::Epoch { epoch: 0, members: Vec::new(), why: "created".into() }.to_text();
        let atoms = vec![
            record::record_atom(record::SPACE_SUBJECT, creation.to_owned(), t, &[])
                .map_err(|e| SpaceError::Record(e.to_string()))?,
            record::record_atom(record::SPACE_SUBJECT, first.clone(), t + 1, &[])
                .map_err(|e| SpaceError::Record(e.to_string()))?,
        ];
        let appended = log.append(atoms)?;
        let keys_path = dir.join("keys");
        let mut keys = match KeyStore::open(disk, &keys_path) {
            // A crash after an earlier attempt made the store: keep its epoch (its seed may
            // already seal something only it opens).
            Ok(k) if k.space() == &id => k,
            Ok(_) => return Err(file_err(&keys_path, "a key store of another space")),
            Err(_) => {
                if keys_path.exists() {
                    disk.remove_file(&keys_path).map_err(|e| file_err(&keys_path, e))?;
                }
                KeyStore::create(disk, &keys_path, id)?
            }
        };
        if keys.epochs() == 0 {
            keys.begin_epoch(random32()?)?;
        }
        let leaves = Leaves::fresh(0);
        let space = Self {
            disk: disk.clone(),
            dir,
            id,
            inner: Mutex::new(Inner { keys, membership: Membership::default(), records: Vec::new(), leaves }),
            changing: Mutex::new(()),
            camera: Lane::open(disk, &memory_dir.join("lanes/camera"), true)?,
            map: Lane::open(disk, &memory_dir.join("lanes/map"), true)?,
        };
        {
            let mut inner = space.lock();
            space.save_leaves(&inner.leaves)?;
            for (a, text) in appended.iter().zip([creation.to_owned(), first]) {
                inner.membership.apply(&text)?;
                inner.records.push((a.position, text));
            }
            space.save_records(&inner.records)?;
        }
        Ok(space)
    }

    /// Open the space of a memory (its log opened), finishing a change a crash interrupted.
    pub fn open(disk: &Disk, memory_dir: &Path, log: &Log, id: [u8; 32]) -> Result<Self, SpaceError> {
        let space = Self::read(disk, memory_dir, log, id, true)?;
        space.finish_pending(log)?;
        Ok(space)
    }

    /// Open it to read (a reader's process: nothing is written, a pending change is left to
    /// the writer).
    pub fn open_read_only(memory_dir: &Path, log: &Log, id: [u8; 32]) -> Result<Self, SpaceError> {
        Self::read(&Disk::os(), memory_dir, log, id, false)
    }

    fn read(
        disk: &Disk,
        memory_dir: &Path,
        log: &Log,
        id: [u8; 32],
        writer: bool,
    ) -> Result<Self, SpaceError> {
        let dir = memory_dir.join("space");
        let keys_path = dir.join("keys");
        let keys = KeyStore::open(disk, &keys_path)?;
        if keys.space() != &id {
            return Err(file_err(&keys_path, "the key store is of another space than memory.json names"));
        }
        let records = match read_records(&dir.join("records")) {
            Ok(r) => r,
            Err(_) => scan_records(log)?,
        };
        let mut membership = Membership::default();
        for (_, text) in &records {
            membership.apply(text)?;
        }
        if membership.space() != Some(id) {
            return Err(SpaceError::Record("the log's space records are of another space".into()));
        }
        let epoch = membership.current().unwrap_or(0);
        let leaves_path = dir.join("leaves");
        let leaves =
            match std::fs::read(&leaves_path).map_err(|e| e.to_string()).and_then(|b| Leaves::decode(&b)) {
                Ok(l) if l.epoch == epoch => l,
                // Missing or damaged, or of an epoch a crash left behind: nothing below the epoch's
                // end is known to be unused, so a new epoch is the only safe counter.
                _ => Leaves::spent(epoch),
            };
        Ok(Self {
            disk: disk.clone(),
            dir,
            id,
            inner: Mutex::new(Inner { keys, membership, records, leaves }),
            changing: Mutex::new(()),
            camera: Lane::open(disk, &memory_dir.join("lanes/camera"), writer)?,
            map: Lane::open(disk, &memory_dir.join("lanes/map"), writer)?,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The space's id.
    pub fn id(&self) -> [u8; 32] {
        self.id
    }

    /// The current epoch.
    pub fn epoch(&self) -> u32 {
        self.lock().membership.current().unwrap_or(0)
    }

    /// The space's membership as its records say.
    pub fn membership(&self) -> Membership {
        self.lock().membership.clone()
    }

    /// The space's records: (log position, text).
    pub fn records(&self) -> Vec<(u64, String)> {
        self.lock().records.clone()
    }

    /// Whether the writer's key store still derives `leaf` of `epoch`.
    pub fn holds(&self, epoch: u32, leaf: u32) -> bool {
        self.lock().keys.cover(epoch).is_ok_and(|c| c.leaf_key(leaf).is_ok())
    }

    fn save_leaves(&self, leaves: &Leaves) -> Result<(), SpaceError> {
        let path = self.dir.join("leaves");
        self.disk.replace_file(&path, &leaves.encode()).map_err(|e| file_err(&path, e))
    }

    fn save_records(&self, records: &[(u64, String)]) -> Result<(), SpaceError> {
        let path = self.dir.join("records");
        let mut out = String::new();
        for (p, t) in records {
            out.push_str(&serde_json::json!({ "position": p, "text": t }).to_string());
            out.push('\n');
        }
        self.disk.replace_file(&path, out.as_bytes()).map_err(|e| file_err(&path, e))
    }

    /// A new epoch when the current one has no leaf left in `lane` (2^30 seals, or a leaf
    /// counter that was lost: then no leaf of the epoch is known to be unused). Its wraps are
    /// not handed out here: `sion memory space wrap` gives a member the current epoch's.
    fn ready(&self, log: &Log, lane: LeafLane) -> Result<(), SpaceError> {
        if self.lock().leaves.next[lane as usize] < lane.end() {
            return Ok(());
        }
        let guard = self.changing();
        // Another thread may have begun the epoch meanwhile.
        if self.lock().leaves.next[lane as usize] < lane.end() {
            return Ok(());
        }
        let (epoch, members) = self.next_epoch_members(None)?;
        let why = "rotated: the epoch has no leaf known to be unused".to_owned();
        self.change_locked(&guard, log, Change::Space(SpaceRecord::Epoch { epoch, members, why }), &[])?;
        Ok(())
    }

    /// The next leaf of `lane` in the current epoch; the lane's mark is moved (durably) before a
    /// leaf past it is handed out.
    fn next_leaf(&self, inner: &mut Inner, lane: LeafLane) -> Result<(u32, u32), SpaceError> {
        let l = lane as usize;
        if inner.leaves.next[l] >= lane.end() {
            return Err(SpaceError::Record("the epoch's leaves are used up".into()));
        }
        if inner.leaves.next[l] >= inner.leaves.reserved[l] {
            let mut moved = inner.leaves;
            moved.reserved[l] = (moved.next[l] + RESERVE).min(lane.end());
            self.save_leaves(&moved)?;
            inner.leaves = moved;
        }
        let leaf = inner.leaves.next[l] as u32;
        inner.leaves.next[l] += 1;
        Ok((inner.leaves.epoch, leaf))
    }

    /// Seal an atom's inline payload (text or bytes): the atom returned carries it encrypted.
    pub fn seal_inline(&self, log: &Log, parts: AtomParts) -> Result<Atom, SpaceError> {
        let plain = zeroize::Zeroizing::new(inline_plaintext(&parts.payload)?);
        self.ready(log, LeafLane::Payloads)?;
        let mut inner = self.lock();
        let (epoch, leaf) = self.next_leaf(&mut inner, LeafLane::Payloads)?;
        let sealed =
            Sealed::seal(SealKind::Payload, &self.id, inner.keys.cover(epoch)?, leaf, &parts, &plain)?;
        let mut parts = parts;
        parts.payload = Payload::Encrypted(sealed);
        Atom::new(parts).map_err(|e| SpaceError::Record(e.to_string()))
    }

    /// Seal a blob for the atom `parts` (its payload is replaced): returns the atom, which
    /// commits to the sealed bytes, and those bytes, to keep in the blob store. `content` is
    /// compressed with zstd first when that makes it smaller (camera frames as published).
    pub fn seal_blob(
        &self,
        log: &Log,
        parts: AtomParts,
        media_type: &str,
        content: &[u8],
        compress: bool,
    ) -> Result<(Atom, Vec<u8>), SpaceError> {
        // A raw image's neighbouring pixels are alike: their differences compress where the
        // pixels themselves hardly do (a 640 × 480 frame with sensor noise: 100 % → about 60 %).
        let codec = if !compress {
            Codec::None
        } else if media_type.ends_with("sensor_msgs/msg/Image") {
            Codec::Sub3Zstd
        } else {
            Codec::Zstd
        };
        let squeezed = match codec {
            Codec::None => None,
            Codec::Zstd => zstd::bulk::compress(content, 1).ok(),
            Codec::Sub3Zstd => zstd::bulk::compress(&sion_seal::sub3(content), 1).ok(),
        }
        .filter(|c| c.len() < content.len());
        let plain = zeroize::Zeroizing::new(match &squeezed {
            Some(c) => blob_plaintext(codec, media_type, content, c)?,
            None => blob_plaintext(Codec::None, media_type, content, content)?,
        });
        let lane = LeafLane::of(media_type);
        self.ready(log, lane)?;
        let mut inner = self.lock();
        let (epoch, leaf) = self.next_leaf(&mut inner, lane)?;
        let sealed = Sealed::seal(SealKind::Blob, &self.id, inner.keys.cover(epoch)?, leaf, &parts, &plain)?;
        drop(inner);
        let mut parts = parts;
        parts.payload = Payload::Blob(BlobRef {
            hash: *blake3::hash(&sealed).as_bytes(),
            size: sealed.len() as u64,
            media_type: sion_seal::sealed_media_type(epoch, leaf),
        });
        let atom = Atom::new(parts).map_err(|e| SpaceError::Record(e.to_string()))?;
        Ok((atom, sealed))
    }

    /// The sealed bytes of `atom` (and which kind they are), or `None` for an atom whose
    /// payload is not sealed. A camera frame or map tile comes from its lane (refused as
    /// forgotten once retention dropped it); any other blob from `blob`, by its hash.
    pub fn sealed_bytes(
        &self,
        position: u64,
        atom: &AtomParts,
        blob: impl FnOnce(&[u8; 32]) -> Option<Vec<u8>>,
    ) -> Result<Option<(Vec<u8>, SealKind)>, SpaceError> {
        if let Payload::Blob(r) = &atom.payload
            && let Some(Some((epoch, leaf))) = sion_seal::sealed_leaf(&r.media_type)
            && let Some(lane) = self.lane(LeafLane::of_leaf(leaf))
        {
            return match lane.get(epoch, leaf, &r.hash) {
                Ok(b) => Ok(Some((b, SealKind::Blob))),
                Err(LaneError::NotHeld { .. }) => Err(SealError::Forgotten { epoch, leaf }.into()),
                Err(e) => Err(e.into()),
            };
        }
        sealed_payload(position, atom, blob)
    }

    fn lane(&self, lane: LeafLane) -> Option<&Lane> {
        match lane {
            LeafLane::Camera => Some(&self.camera),
            LeafLane::Map => Some(&self.map),
            LeafLane::Payloads | LeafLane::Other => None,
        }
    }

    /// Close the streams' segments past `bytes` from now on (tests and benchmarks that retain
    /// many segments in little time; the node's are 64 MiB, or `SION_SEGMENT_KIB`).
    pub fn set_segment_bytes(&self, bytes: u64) {
        self.camera.set_segment_bytes(bytes);
        self.map.set_segment_bytes(bytes);
    }

    /// Bytes each retained stream takes on disk: (camera, map).
    pub fn lane_bytes(&self) -> (u64, u64) {
        (self.camera.bytes(), self.map.bytes())
    }

    /// Forget what retention no longer keeps (docs/SEAL.md, "Retention"): per stream, oldest
    /// segment first, while it is older than the stream's newest payload by more than
    /// `keep_ns` or the stream takes more than `keep_bytes`: one forget atom naming the
    /// segment's leaves (durable, the keys punctured), then the segment's file removed.
    pub fn retain(&self, log: &Log, policy: &Retention) -> Result<Retained, SpaceError> {
        let mut done = Retained::default();
        for (name, lane, p) in [("camera", &self.camera, policy.camera), ("map", &self.map, policy.map)] {
            if p.keep_ns <= 0 && p.keep_bytes == 0 {
                continue;
            }
            loop {
                let (closed, open) = lane.segments();
                let newest =
                    closed.iter().chain(open.as_ref()).map(|s| s.newest_ns).max().unwrap_or(i64::MIN);
                let total = lane.bytes();
                let old = |s: &Segment| p.keep_ns > 0 && s.newest_ns < newest.saturating_sub(p.keep_ns);
                let over = p.keep_bytes > 0 && total > p.keep_bytes;
                let Some(oldest) = closed.first() else {
                    // Only the open segment: over the budget alone, it is closed to be taken.
                    if over && open.as_ref().is_some_and(|o| o.bytes > 8) {
                        lane.close_open()?;
                        continue;
                    }
                    break;
                };
                if !(old(oldest) || over) {
                    break;
                }
                let why = if old(oldest) {
                    format!("{name} payloads older than {} s", p.keep_ns / 1_000_000_000)
                } else {
                    format!("{name} over its budget of {} MB", p.keep_bytes / 1_000_000)
                };
                // Its leaves: up to the next segment's first of the same epoch (the leaves in
                // between were reserved but never used).
                let next = closed.get(1).or(open.as_ref()).filter(|n| n.epoch == oldest.epoch);
                let lane_end = LeafLane::of_leaf(oldest.first).end();
                let to = next.map_or(u64::from(oldest.last) + 1, |n| u64::from(n.first)).min(lane_end);
                // Forgotten before (a crash between the forget and the file's removal, or
                // forgets of single frames): a forget is written unless none of it derives.
                if self.lock().keys.holds_any(oldest.epoch, u64::from(oldest.first), to) {
                    let record = ForgetRecord {
                        who: "retention".into(),
                        why,
                        leaves: vec![LeafRange { epoch: oldest.epoch, from: u64::from(oldest.first), to }],
                    };
                    done.forget_positions.push(self.change(log, Change::Forget(record), &[])?.position);
                }
                lane.remove(oldest)?;
                done.segments += 1;
                done.bytes += oldest.bytes;
            }
        }
        Ok(done)
    }

    /// Open a sealed payload with the writer's keys.
    pub fn open_payload(
        &self,
        position: u64,
        atom: &AtomParts,
        bytes: &[u8],
        kind: SealKind,
    ) -> Result<Opened, SpaceError> {
        let sealed = Sealed::decode(bytes)?;
        if sealed.space != self.id {
            return Err(SpaceError::OtherSpace {
                position,
                found: hex::encode(&sealed.space[..4]),
                expected: hex::encode(&self.id[..4]),
            });
        }
        let plain = {
            let inner = self.lock();
            zeroize::Zeroizing::new(sealed.open(kind, &self.id, inner.keys.cover(sealed.epoch)?, atom)?)
        };
        opened(kind, &plain)
    }

    /// One change of the space at a time (a forget, a member, an epoch): held from the moment
    /// a change is decided until it is applied.
    fn changing(&self) -> MutexGuard<'_, ()> {
        self.changing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Append a record atom and apply its change (the caller holds the change lock): a change a
    /// crash or a failure left in `pending` is finished first; the record is checked against
    /// the space as it is before anything is written; then it goes to `pending` (durable), is
    /// appended (durable), applied, and `pending` removed. A failure to apply leaves `pending`,
    /// so the change is finished by the next change or the next open — never lost.
    fn change_locked(
        &self,
        _guard: &MutexGuard<'_, ()>,
        log: &Log,
        change: Change,
        targets: &[sion_verify::atom::AtomId],
    ) -> Result<Appended, SpaceError> {
        self.finish_pending_locked(log)?;
        let (subject, text) = match &change {
            Change::Space(r) => (record::SPACE_SUBJECT, r.to_text()),
            Change::Forget(r) => (record::FORGET_SUBJECT, r.to_text()),
        };
        if let Change::Space(_) = &change {
            self.lock().membership.clone().apply(&text)?;
        }
        let atom = record::record_atom(subject, text, now_ns(), targets)
            .map_err(|e| SpaceError::Record(e.to_string()))?;
        let pending = self.dir.join("pending");
        self.disk.replace_file(&pending, atom.bytes()).map_err(|e| file_err(&pending, e))?;
        let appended = log
            .append(vec![atom])?
            .into_iter()
            .next()
            .ok_or_else(|| SpaceError::Record("nothing appended".into()))?;
        self.apply(appended.position, change)?;
        self.disk.remove_file(&pending).map_err(|e| file_err(&pending, e))?;
        Ok(appended)
    }

    fn change(
        &self,
        log: &Log,
        change: Change,
        targets: &[sion_verify::atom::AtomId],
    ) -> Result<Appended, SpaceError> {
        let guard = self.changing();
        self.change_locked(&guard, log, change, targets)
    }

    /// Apply a change whose atom is at `position` in the log. Idempotent: applied again after a
    /// crash, it changes nothing it already changed.
    fn apply(&self, position: u64, change: Change) -> Result<(), SpaceError> {
        let mut inner = self.lock();
        match change {
            Change::Forget(r) => {
                for range in &r.leaves {
                    if inner.keys.holds(range.epoch) {
                        inner.keys.forget(range.epoch, range.from, range.to)?;
                    }
                }
            }
            Change::Space(r) => {
                if inner.records.iter().any(|(p, _)| *p == position) {
                    return Ok(()); // applied before a crash
                }
                let text = r.to_text();
                let mut membership = inner.membership.clone();
                membership.apply(&text)?;
                if let SpaceRecord::Epoch { epoch, .. } = &r {
                    // A seed is drawn only for an epoch not begun yet; one a crash left begun
                    // may already have sealed, so its counter is taken from disk if it names
                    // the epoch, and otherwise spent (the next seal begins another epoch):
                    // never a leaf twice.
                    let leaves = if inner.keys.epochs() <= *epoch {
                        while inner.keys.epochs() < *epoch {
                            // Epochs a crash skipped: never sealed with, never given.
                            inner.keys.begin_epoch(random32()?)?;
                        }
                        inner.keys.begin_epoch(random32()?)?;
                        Leaves::fresh(*epoch)
                    } else {
                        let path = self.dir.join("leaves");
                        match std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| Leaves::decode(&b))
                        {
                            Ok(l) if l.epoch == *epoch => l,
                            _ => Leaves::spent(*epoch),
                        }
                    };
                    self.save_leaves(&leaves)?;
                    inner.leaves = leaves;
                }
                let mut records = inner.records.clone();
                records.push((position, text));
                self.save_records(&records)?;
                inner.records = records;
                inner.membership = membership;
            }
        }
        Ok(())
    }

    fn finish_pending(&self, log: &Log) -> Result<(), SpaceError> {
        let _guard = self.changing();
        self.finish_pending_locked(log)
    }

    fn finish_pending_locked(&self, log: &Log) -> Result<(), SpaceError> {
        let pending = self.dir.join("pending");
        let bytes = match std::fs::read(&pending) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(file_err(&pending, e)),
        };
        // A pending file cut short by a crash was never appended: there is nothing to finish.
        let Ok(atom) = Atom::decode(&bytes) else {
            self.disk.remove_file(&pending).map_err(|e| file_err(&pending, e))?;
            return Ok(());
        };
        let change = if let Some(t) = record::record_text(atom.parts(), record::FORGET_SUBJECT) {
            Change::Forget(ForgetRecord::parse(t)?)
        } else if let Some(t) = record::record_text(atom.parts(), record::SPACE_SUBJECT) {
            Change::Space(SpaceRecord::parse(t)?)
        } else {
            return Err(file_err(&pending, "not a space or forget record"));
        };
        let appended = log.append(vec![atom])?;
        if let Some(a) = appended.first() {
            self.apply(a.position, change)?;
        }
        self.disk.remove_file(&pending).map_err(|e| file_err(&pending, e))?;
        Ok(())
    }

    /// The next epoch's number and members: the current ones, less `removed`.
    fn next_epoch_members(&self, removed: Option<&[u8; 32]>) -> Result<(u32, Vec<[u8; 32]>), SpaceError> {
        let inner = self.lock();
        let epoch = inner.membership.current().unwrap_or(0);
        if let Some(m) = removed
            && !inner.membership.is_member(epoch, m)
        {
            return Err(SpaceError::NoMember(hex::encode(m)));
        }
        let members = inner
            .membership
            .members(epoch)
            .iter()
            .map(|m| m.key_hash)
            .filter(|h| Some(h) != removed)
            .collect();
        Ok((epoch + 1, members))
    }

    /// Add a member (their X-Wing public key, a name) to the current epoch; returns the wrap of
    /// the epoch's cover for them (made under the change lock, so no forget comes between the
    /// cover wrapped and the member recorded).
    pub fn add_member(
        &self,
        log: &Log,
        name: &str,
        public: &[u8],
    ) -> Result<(Appended, Wrapped), SpaceError> {
        let hash = member_key_hash(public);
        let guard = self.changing();
        self.finish_pending_locked(log)?;
        let epoch = self.epoch();
        if self.lock().membership.is_member(epoch, &hash) {
            return Err(SpaceError::AlreadyMember(hex::encode(hash)));
        }
        // Checked before anything is written: a key that is not one is refused here.
        let wrap = {
            let inner = self.lock();
            Wrapped::wrap(&self.id, inner.keys.cover(epoch)?, public)?
        };
        let path = self.dir.join("members").join(format!("{}.pub", hex::encode(hash)));
        self.disk.replace_file(&path, public).map_err(|e| file_err(&path, e))?;
        let appended = self.change_locked(
            &guard,
            log,
            Change::Space(SpaceRecord::Add { epoch, member: hash, name: name.to_owned() }),
            &[],
        )?;
        Ok((appended, wrap))
    }

    /// Remove a member: a new epoch begins without them (its seed never reaches them); returns
    /// the new epoch's cover wrapped to each member left.
    pub fn remove_member(&self, log: &Log, member: &[u8; 32]) -> Result<(Appended, Wraps), SpaceError> {
        let guard = self.changing();
        self.finish_pending_locked(log)?;
        let (epoch, left) = self.next_epoch_members(Some(member))?;
        self.new_epoch(&guard, log, epoch, left, format!("removed {}", hex::encode(member)))
    }

    /// Begin a new epoch with the same members (a writer's choice, or a full epoch).
    pub fn rotate(&self, log: &Log, why: &str) -> Result<(Appended, Wraps), SpaceError> {
        let guard = self.changing();
        self.finish_pending_locked(log)?;
        let (epoch, members) = self.next_epoch_members(None)?;
        self.new_epoch(&guard, log, epoch, members, why.to_owned())
    }

    fn new_epoch(
        &self,
        guard: &MutexGuard<'_, ()>,
        log: &Log,
        epoch: u32,
        members: Vec<[u8; 32]>,
        why: String,
    ) -> Result<(Appended, Wraps), SpaceError> {
        let appended = self.change_locked(
            guard,
            log,
            Change::Space(SpaceRecord::Epoch { epoch, members: members.clone(), why }),
            &[],
        )?;
        let mut wraps = Vec::new();
        for m in members {
            let public = self.member_public(&m)?;
            let inner = self.lock();
            wraps.push((m, Wrapped::wrap(&self.id, inner.keys.cover(epoch)?, &public)?));
        }
        Ok((appended, wraps))
    }

    /// A member's public key, as it was given when they were added.
    pub fn member_public(&self, member: &[u8; 32]) -> Result<Vec<u8>, SpaceError> {
        let path = self.dir.join("members").join(format!("{}.pub", hex::encode(member)));
        let bytes = std::fs::read(&path).map_err(|e| file_err(&path, e))?;
        if member_key_hash(&bytes) != *member {
            return Err(file_err(&path, "its key's hash is not the member's"));
        }
        Ok(bytes)
    }

    /// The current epoch's cover, wrapped to a member of it (to hand to them again).
    pub fn wrap_for(&self, member: &[u8; 32]) -> Result<Wrapped, SpaceError> {
        let inner = self.lock();
        let epoch = inner.membership.current().unwrap_or(0);
        if !inner.membership.is_member(epoch, member) {
            return Err(SpaceError::NoMember(hex::encode(member)));
        }
        drop(inner);
        let public = self.member_public(member)?;
        let inner = self.lock();
        Ok(Wrapped::wrap(&self.id, inner.keys.cover(epoch)?, &public)?)
    }

    /// The leaf key of a sealed payload wrapped to `member`, if they were a member of the epoch
    /// that sealed it and the leaf is not forgotten (docs/SEAL.md, "The payload service").
    pub fn wrap_leaf_for(
        &self,
        member: &[u8; 32],
        atom: &AtomParts,
        bytes: &[u8],
    ) -> Result<WrappedLeaf, SpaceError> {
        let sealed = Sealed::decode(bytes)?;
        if sealed.space != self.id {
            return Err(SpaceError::OtherSpace {
                position: 0,
                found: hex::encode(&sealed.space[..4]),
                expected: hex::encode(&self.id[..4]),
            });
        }
        if !self.lock().membership.is_member(sealed.epoch, member) {
            return Err(SpaceError::NoMember(format!("{} in epoch {}", hex::encode(member), sealed.epoch)));
        }
        let public = self.member_public(member)?;
        let inner = self.lock();
        let key = zeroize::Zeroizing::new(inner.keys.cover(sealed.epoch)?.leaf_key(sealed.leaf)?);
        Ok(WrappedLeaf::wrap(&self.id, sealed.epoch, sealed.leaf, &bare_id(atom)?, &key, &public)?)
    }

    /// Forget the payloads of `targets` ((position, atom, sealed bytes) each): one forget atom
    /// (who, why, the leaves; linking to each target, up to 256 a record), then the key store
    /// punctured. Returns the forget atoms' positions and the leaves forgotten.
    pub fn forget(
        &self,
        log: &Log,
        targets: &[(u64, Atom, Vec<u8>)],
        who: &str,
        why: &str,
    ) -> Result<(Vec<u64>, Vec<LeafRange>), SpaceError> {
        let mut positions = Vec::new();
        let mut all = Vec::new();
        for chunk in targets.chunks(record::MAX_FORGET_LINKS) {
            let mut leaves = Vec::new();
            for (position, _, bytes) in chunk {
                let s = Sealed::decode(bytes)?;
                if s.space != self.id {
                    return Err(SpaceError::OtherSpace {
                        position: *position,
                        found: hex::encode(&s.space[..4]),
                        expected: hex::encode(&self.id[..4]),
                    });
                }
                leaves.push(LeafRange { epoch: s.epoch, from: u64::from(s.leaf), to: u64::from(s.leaf) + 1 });
            }
            let ids: Vec<_> = chunk.iter().map(|(_, a, _)| a.id()).collect();
            let record = ForgetRecord { who: who.to_owned(), why: why.to_owned(), leaves: leaves.clone() };
            let a = self.change(log, Change::Forget(record), &ids)?;
            positions.push(a.position);
            all.extend(leaves);
        }
        Ok((positions, all))
    }
}

/// The sealed bytes of an atom kept inline or in the blob store (`blob`, by hash), or `None`
/// for an atom whose payload is not sealed.
pub fn sealed_payload(
    position: u64,
    atom: &AtomParts,
    blob: impl FnOnce(&[u8; 32]) -> Option<Vec<u8>>,
) -> Result<Option<(Vec<u8>, SealKind)>, SpaceError> {
    match &atom.payload {
        Payload::Encrypted(b) => Ok(Some((b.clone(), SealKind::Payload))),
        Payload::Blob(r) if sion_seal::sealed_leaf(&r.media_type).is_some() => match blob(&r.hash) {
            Some(b) => Ok(Some((b, SealKind::Blob))),
            None => Err(SpaceError::MissingBlob { position, hash: hex::encode(r.hash) }),
        },
        _ => Ok(None),
    }
}

/// Keep the blobs that `atoms` commit to and return the atoms to append, in their order. In a
/// sealed memory (`space`) each blob is first sealed for its atom (compressed where that
/// helps), and the atom made to commit to the sealed bytes instead; without a space, or for a
/// blob no atom names, the blob is kept as it is. Durable before it returns.
pub fn keep_blobs_for(
    space: Option<&Space>,
    log: &Log,
    store: &BlobStore,
    atoms: Vec<Atom>,
    blobs: Vec<Vec<u8>>,
) -> Result<Vec<Atom>, SpaceError> {
    let Some(space) = space else {
        if !blobs.is_empty() {
            store.keep(&blobs)?;
        }
        return Ok(atoms);
    };
    let by_hash: std::collections::HashMap<[u8; 32], Vec<u8>> =
        blobs.into_iter().map(|b| (*blake3::hash(&b).as_bytes(), b)).collect();
    let mut kept = Vec::new();
    let mut laned: Vec<(LeafLane, u32, u32, i64, Vec<u8>)> = Vec::new();
    let mut out = Vec::with_capacity(atoms.len());
    for atom in atoms {
        let blob = match &atom.parts().payload {
            // Each atom seals its own copy: two frames with the same bytes are two leaves.
            Payload::Blob(r) if sion_seal::sealed_leaf(&r.media_type).is_none() => {
                by_hash.get(&r.hash).map(|b| (b.as_slice(), r.media_type.clone()))
            }
            _ => None,
        };
        match blob {
            Some((content, media_type)) => {
                let stamp = atom.parts().valid.from_ns;
                let (sealed_atom, sealed) =
                    space.seal_blob(log, atom.into_parts(), &media_type, content, true)?;
                let leaf = match &sealed_atom.parts().payload {
                    Payload::Blob(r) => sion_seal::sealed_leaf(&r.media_type).flatten(),
                    _ => None,
                };
                match leaf.filter(|(_, l)| space.lane(LeafLane::of_leaf(*l)).is_some()) {
                    Some((epoch, leaf)) => laned.push((LeafLane::of_leaf(leaf), epoch, leaf, stamp, sealed)),
                    None => kept.push(sealed),
                }
                out.push(sealed_atom);
            }
            None => out.push(atom),
        }
    }
    // A blob no atom here names is not kept: in a sealed memory nothing is kept in the clear.
    if !kept.is_empty() {
        store.keep(&kept)?;
    }
    for lane in [LeafLane::Camera, LeafLane::Map] {
        let these: Vec<(u32, u32, i64, &[u8])> =
            laned.iter().filter(|b| b.0 == lane).map(|b| (b.1, b.2, b.3, b.4.as_slice())).collect();
        if let (false, Some(l)) = (these.is_empty(), space.lane(lane)) {
            l.keep(&these)?;
        }
    }
    Ok(out)
}

/// The opened plaintext of a payload or blob, as it was given.
pub fn opened(kind: SealKind, plain: &[u8]) -> Result<Opened, SpaceError> {
    match kind {
        SealKind::Payload => Ok(Opened::Inline(inline_payload(plain)?)),
        SealKind::Blob => {
            let parts = blob_parts(plain)?;
            let (media_type, hash, content) = (parts.media_type, parts.given, parts.content);
            let content = match parts.codec {
                Codec::None => content.to_vec(),
                // Bounded: a writer's compressed bytes never decompress past this.
                Codec::Zstd | Codec::Sub3Zstd => {
                    // Streamed and bounded: memory grows with what decodes, never past the bound.
                    let bad = |why: String| SealError::Format { what: "opened blob", problem: why };
                    let mut out = Vec::new();
                    let decoder = zstd::stream::read::Decoder::new(content)
                        .map_err(|e| bad(format!("its zstd content does not decode: {e}")))?;
                    std::io::Read::read_to_end(
                        &mut std::io::Read::take(decoder, MAX_OPENED_BLOB as u64 + 1),
                        &mut out,
                    )
                    .map_err(|e| bad(format!("its zstd content does not decode: {e}")))?;
                    if out.len() > MAX_OPENED_BLOB {
                        return Err(bad(format!("it decodes to more than {MAX_OPENED_BLOB} bytes")).into());
                    }
                    if parts.codec == Codec::Sub3Zstd {
                        sion_seal::unsub3(&mut out);
                    }
                    out
                }
            };
            if *blake3::hash(&content).as_bytes() != hash {
                return Err(SealError::Format {
                    what: "opened blob",
                    problem: "its content is not the blob as it was given (its hash differs)".into(),
                }
                .into());
            }
            Ok(Opened::Blob { media_type: media_type.to_owned(), content })
        }
    }
}

fn read_records(path: &Path) -> Result<Vec<(u64, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let p = v["position"].as_u64().ok_or("no position")?;
        let t = v["text"].as_str().ok_or("no text")?;
        out.push((p, t.to_owned()));
    }
    if out.is_empty() {
        return Err("empty".into());
    }
    Ok(out)
}

/// The space's records read from the whole log (when their cache is missing or damaged).
fn scan_records(log: &Log) -> Result<Vec<(u64, String)>, SpaceError> {
    let mut out = Vec::new();
    for item in log.scan(0) {
        let (p, atom) = item?;
        if let Some(t) = record::record_text(atom.parts(), record::SPACE_SUBJECT) {
            out.push((p, t.to_owned()));
        }
    }
    Ok(out)
}

/// A member's keys: their X-Wing key and the covers they were given, in a directory of their
/// own (`member.key`, 32 bytes; `member.pub`; `<hex space id>.sionkeys`).
pub struct MemberKeys {
    disk: Disk,
    dir: PathBuf,
    key: MemberKey,
}

impl MemberKeys {
    /// Make a member's key in `dir` (refused if one is there).
    pub fn create(disk: &Disk, dir: &Path) -> Result<Self, SpaceError> {
        disk.create_dir_all(dir).map_err(|e| file_err(dir, e))?;
        let path = dir.join("member.key");
        if path.exists() {
            return Err(file_err(&path, "a member key is already there"));
        }
        let key = MemberKey::generate()?;
        let seed = zeroize::Zeroizing::new(key.seed());
        // Made 0600 (and its directory 0700) by the disk, before a byte of it is written.
        disk.replace_file(&path, seed.as_slice()).map_err(|e| file_err(&path, e))?;
        let public = dir.join("member.pub");
        disk.replace_file(&public, &key.public()).map_err(|e| file_err(&public, e))?;
        Ok(Self { disk: disk.clone(), dir: dir.to_owned(), key })
    }

    /// Open a member's key directory.
    pub fn open(disk: &Disk, dir: &Path) -> Result<Self, SpaceError> {
        let path = dir.join("member.key");
        let mut secrets = vec![
            sion_disk::private::Secret { path: dir, holds: "a member's keys" },
            sion_disk::private::Secret {
                path: &path,
                holds: "a member's key: whoever reads it can unwrap every cover given to this member",
            },
        ];
        let stores: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "sionkeys"))
                    .collect()
            })
            .unwrap_or_default();
        for store in &stores {
            secrets.push(sion_disk::private::Secret {
                path: store,
                holds: "a member's covers: whoever reads them can open the sealed payloads they cover",
            });
        }
        sion_disk::private::keep_private(&secrets, true);
        let bytes = zeroize::Zeroizing::new(std::fs::read(&path).map_err(|e| file_err(&path, e))?);
        let seed: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| file_err(&path, "a member key holds exactly 32 bytes"))?;
        Ok(Self { disk: disk.clone(), dir: dir.to_owned(), key: MemberKey::from_seed(seed) })
    }

    /// The member's key.
    pub fn key(&self) -> &MemberKey {
        &self.key
    }

    fn store_path(&self, space: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}.sionkeys", hex::encode(space)))
    }

    /// The member's key store for `space` (made empty if absent).
    pub fn store(&self, space: &[u8; 32]) -> Result<KeyStore, SpaceError> {
        let path = self.store_path(space);
        if path.exists() {
            Ok(KeyStore::open(&self.disk, &path)?)
        } else {
            Ok(KeyStore::create(&self.disk, &path, *space)?)
        }
    }

    /// Take a wrap given to this member: its cover joins their key store. Returns (space,
    /// epoch).
    pub fn join(&self, wrap: &[u8]) -> Result<([u8; 32], u32), SpaceError> {
        let w = Wrapped::decode(wrap)?;
        let cover: Cover = w.unwrap_for(&self.key)?;
        let mut store = self.store(&w.space)?;
        store.hold(cover)?;
        Ok((w.space, w.epoch))
    }

    /// Honour forget records (their texts): puncture this member's covers the same way.
    /// Returns how many leaf ranges were applied to epochs held here.
    pub fn honour(&self, space: &[u8; 32], forgets: &[String]) -> Result<usize, SpaceError> {
        let mut store = self.store(space)?;
        let mut n = 0;
        for text in forgets {
            for r in ForgetRecord::parse(text)?.leaves {
                if store.holds(r.epoch) {
                    store.forget(r.epoch, r.from, r.to)?;
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Open a sealed payload with this member's covers.
    pub fn open_payload(&self, atom: &AtomParts, bytes: &[u8], kind: SealKind) -> Result<Opened, SpaceError> {
        let sealed = Sealed::decode(bytes)?;
        let store = self.store(&sealed.space)?;
        let plain =
            zeroize::Zeroizing::new(sealed.open(kind, &sealed.space, store.cover(sealed.epoch)?, atom)?);
        opened(kind, &plain)
    }

    /// Open a sealed payload with a leaf key the payload service wrapped to this member.
    pub fn open_with_leaf(
        &self,
        atom: &AtomParts,
        bytes: &[u8],
        kind: SealKind,
        wrapped: &[u8],
    ) -> Result<Opened, SpaceError> {
        let sealed = Sealed::decode(bytes)?;
        let w = WrappedLeaf::decode(wrapped)?;
        if (w.space, w.epoch, w.leaf) != (sealed.space, sealed.epoch, sealed.leaf) || w.atom != bare_id(atom)?
        {
            return Err(SealError::Open { what: "wrapped leaf key (it is for another payload)" }.into());
        }
        let key = w.unwrap_for(&self.key)?;
        let plain = zeroize::Zeroizing::new(sealed.open_with_key(kind, &key, atom)?);
        opened(kind, &plain)
    }
}

#[cfg(test)]
mod tests {
    use super::LeafLane;

    #[test]
    fn what_sensors_saw_shares_the_camera_lane_and_its_retention() {
        let cdr = |t: &str| format!("application/x-ros2-cdr; type={t}");
        for t in [
            "sensor_msgs/msg/Image",
            "sensor_msgs/msg/CompressedImage",
            "sensor_msgs/msg/LaserScan",
            "sensor_msgs/msg/PointCloud2",
        ] {
            assert_eq!(LeafLane::of(&cdr(t)), LeafLane::Camera, "{t}");
        }
        assert_eq!(LeafLane::of(&cdr("nav_msgs/msg/OccupancyGrid")), LeafLane::Map);
        assert_eq!(LeafLane::of(&cdr("sensor_msgs/msg/BatteryState")), LeafLane::Other);
    }
}
