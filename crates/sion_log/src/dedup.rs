//! Which position holds a given atom: the map that makes remembering an atom twice a no-op
//! (docs/LOG.md, "The duplicate filter"), with memory bounded by a budget, not by the log.
//!
//! Keys are (the atom's valid `from`, the first 8 bytes of its leaf hash); a hit is confirmed
//! against the full leaf hash in the node file. The newest entries are in memory; past the
//! budget, and at every log checkpoint, they are written as a *run*: a file of entries sorted
//! by key, in checksummed blocks, covering a range of positions, split into parts where `from`
//! jumps. Small generations are merged as a binary counter merges (so clean closes leave few
//! files); large ones stay as written.
//!
//! A robot's atoms arrive in time order, so a new atom's `from` is past every run's latest
//! `from`, and finding it is absent costs one lookup in memory; only an atom from earlier than
//! what is on disk (a late one, a bag replayed again) is looked up in the runs whose time
//! range holds it. (A redb table did this before; it cost ~2 µs an atom, 40% of an append,
//! and a damaged file could make redb abort the process.)
//!
//! The filter is a cache of the log: what the runs cover is contiguous from position 0; the
//! rest is re-derived from the segments when the log opens. A run that is torn, damaged or
//! past the log's end is deleted with the runs after it, and re-derived.

use std::fs::{self, File};

use sion_disk::{Disk, Open};
use std::io::{self, BufWriter, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use sion_verify::merkle::Digest;

const MAGIC: &[u8; 8] = b"siondup1";
const HEADER: u64 = 64;
const ENTRY: usize = 24;
/// Entries in a block (the last block of a run may hold fewer).
const BLOCK: usize = 128;
const BLOCK_BYTES: u64 = (BLOCK * ENTRY + 4) as u64;
/// Only generations smaller than this are merged (those of clean closes and short runs):
/// lookups open only the parts whose time span holds their `from`, so many large generations
/// cost little, and leaving them be keeps a checkpoint from rewriting much of the filter.
const MERGE_BELOW: u64 = 1 << 17;
/// What an entry in memory costs, for the budget (key, value, the table's overhead).
const MEM_ENTRY_BYTES: usize = 40;

/// Why the duplicate filter could not be used (the log rebuilds it).
#[derive(Debug, thiserror::Error)]
#[error("the duplicate filter: {0}")]
pub(super) struct DedupError(String);

fn io(what: &str, path: &Path) -> impl FnOnce(io::Error) -> DedupError {
    move |e| DedupError(format!("{what} {}: {e}", path.display()))
}

fn prefix(leaf: &Digest) -> u64 {
    let mut p = [0u8; 8];
    p.copy_from_slice(&leaf[..8]);
    u64::from_le_bytes(p)
}

type Key = (i64, u64);

/// A run on disk: one part of a generation, as its header describes it.
#[derive(Debug)]
struct Run {
    path: PathBuf,
    file: File,
    head: Head,
}

/// The runs written at once for positions `first..end`: the entries split where `from`
/// jumps, so that each part spans a short time and a lookup opens only the part whose span
/// holds its `from`.
#[derive(Debug)]
struct Generation {
    first: u64,
    end: u64,
    count: u64,
    parts: Vec<Run>,
}

/// Parts a generation is split into at most.
const MAX_PARTS: usize = 16;
/// Entries are split between parts only where `from` jumps by more than this (a minute).
const SPLIT_NS: i64 = 60_000_000_000;

fn run_len(count: u64) -> u64 {
    let full = count / BLOCK as u64;
    let rest = count % BLOCK as u64;
    HEADER + full * BLOCK_BYTES + if rest > 0 { rest * ENTRY as u64 + 4 } else { 0 }
}

/// What a run's header says besides its length.
#[derive(Debug, Clone, Copy)]
struct Head {
    first: u64,
    end: u64,
    count: u64,
    min_from: i64,
    max_from: i64,
    part: u32,
    parts: u32,
}

fn encode_header(h: Head) -> [u8; HEADER as usize] {
    let Head { first, end, count, min_from, max_from, part, parts } = h;
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&first.to_le_bytes());
    h[16..24].copy_from_slice(&end.to_le_bytes());
    h[24..32].copy_from_slice(&count.to_le_bytes());
    h[32..40].copy_from_slice(&min_from.to_le_bytes());
    h[40..48].copy_from_slice(&max_from.to_le_bytes());
    h[48..52].copy_from_slice(&part.to_le_bytes());
    h[52..56].copy_from_slice(&parts.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

impl Run {
    /// Open a run file, checking its header and length (its blocks are checked when read).
    fn open(path: PathBuf) -> Result<Self, String> {
        let file = File::open(&path).map_err(|e| e.to_string())?;
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0).map_err(|e| format!("its header: {e}"))?;
        if &h[..8] != MAGIC || crc32c::crc32c(&h[..60]) != u32::from_le_bytes([h[60], h[61], h[62], h[63]]) {
            return Err("its header is damaged".into());
        }
        let head = Head {
            first: u64_at(&h, 8),
            end: u64_at(&h, 16),
            count: u64_at(&h, 24),
            min_from: u64_at(&h, 32) as i64,
            max_from: u64_at(&h, 40) as i64,
            part: u32::from_le_bytes([h[48], h[49], h[50], h[51]]),
            parts: u32::from_le_bytes([h[52], h[53], h[54], h[55]]),
        };
        let Head { first, end, count, part, parts, .. } = head;
        if end < first || count > end - first {
            return Err(format!("its header claims {count} entries for positions {first}..{end}"));
        }
        if part >= parts || parts as usize > MAX_PARTS {
            return Err(format!("its header calls it part {part} of {parts}"));
        }
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        if len != run_len(count) {
            return Err(format!("{len} bytes, not the {} of {count} entries", run_len(count)));
        }
        Ok(Self { path, file, head })
    }

    fn blocks(&self) -> u64 {
        self.head.count.div_ceil(BLOCK as u64)
    }

    fn block(&self, i: u64) -> Result<Vec<(Key, u64)>, DedupError> {
        let n = (self.head.count - i * BLOCK as u64).min(BLOCK as u64) as usize;
        let mut b = vec![0u8; n * ENTRY + 4];
        self.file.read_exact_at(&mut b, HEADER + i * BLOCK_BYTES).map_err(io("reading", &self.path))?;
        let crc = u32::from_le_bytes([b[n * ENTRY], b[n * ENTRY + 1], b[n * ENTRY + 2], b[n * ENTRY + 3]]);
        if crc32c::crc32c(&b[..n * ENTRY]) != crc {
            return Err(DedupError(format!("block {i} of {} fails its checksum", self.path.display())));
        }
        Ok((0..n)
            .map(|k| {
                let at = k * ENTRY;
                ((u64_at(&b, at) as i64, u64_at(&b, at + 8)), u64_at(&b, at + 16))
            })
            .collect())
    }

    /// The positions this run holds under `key`.
    fn get(&self, key: Key) -> Result<Vec<u64>, DedupError> {
        // The last block whose first key is at most `key`; equal keys may begin a block
        // earlier.
        let (mut lo, mut hi) = (0u64, self.blocks());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let first = self.block(mid)?.first().map(|e| e.0);
            if first.is_some_and(|f| f <= key) { lo = mid } else { hi = mid }
        }
        let mut out = Vec::new();
        let mut i = lo;
        loop {
            let block = self.block(i)?;
            out.extend(block.iter().filter(|e| e.0 == key).map(|e| e.1));
            if i == 0 || block.first().is_none_or(|e| e.0 != key) {
                break;
            }
            i -= 1;
        }
        Ok(out)
    }

    /// Every entry, in order.
    fn entries(&self) -> Result<Vec<(Key, u64)>, DedupError> {
        let mut out = Vec::with_capacity(self.head.count as usize);
        for i in 0..self.blocks() {
            out.extend(self.block(i)?);
        }
        Ok(out)
    }
}

/// Write a generation of `entries` (sorted) covering positions `first..end` into `dir`,
/// durably: every part written and synced before any is renamed into place, so that a crash
/// leaves a generation whole or visibly short of parts.
fn write_generation(
    disk: &Disk,
    dir: &Path,
    first: u64,
    end: u64,
    entries: &[(Key, u64)],
) -> Result<Generation, DedupError> {
    // Split at the largest jumps in `from` (at most MAX_PARTS − 1 of them, each over SPLIT_NS).
    let mut jumps: Vec<(i64, usize)> = entries
        .windows(2)
        .enumerate()
        .filter_map(|(i, w)| {
            let jump = w[1].0.0.saturating_sub(w[0].0.0);
            (jump > SPLIT_NS).then_some((jump, i + 1))
        })
        .collect();
    jumps.sort_unstable_by(|a, b| b.cmp(a));
    let mut cuts: Vec<usize> = jumps.iter().take(MAX_PARTS - 1).map(|j| j.1).collect();
    cuts.sort_unstable();
    let mut bounds = vec![0];
    bounds.extend(cuts);
    bounds.push(entries.len());
    let parts = (bounds.len() - 1) as u32;
    let mut written = Vec::new();
    for (part, w) in bounds.windows(2).enumerate() {
        let slice = &entries[w[0]..w[1]];
        let name = format!("{first:020}-{end:020}-{part:02}");
        let tmp = dir.join(format!("{name}.tmp"));
        let head = Head {
            first,
            end,
            count: slice.len() as u64,
            min_from: slice.first().map_or(i64::MAX, |e| e.0.0),
            max_from: slice.last().map_or(i64::MIN, |e| e.0.0),
            part: part as u32,
            parts,
        };
        let file = disk.open(&tmp, Open::Truncate).map_err(io("creating", &tmp))?;
        let mut out = BufWriter::with_capacity(1 << 20, file.writer(0));
        out.write_all(&encode_header(head)).map_err(io("writing", &tmp))?;
        let mut block = Vec::with_capacity(BLOCK * ENTRY);
        for chunk in slice.chunks(BLOCK) {
            block.clear();
            for ((from, p), position) in chunk {
                block.extend_from_slice(&from.to_le_bytes());
                block.extend_from_slice(&p.to_le_bytes());
                block.extend_from_slice(&position.to_le_bytes());
            }
            out.write_all(&block)
                .and_then(|()| out.write_all(&crc32c::crc32c(&block).to_le_bytes()))
                .map_err(io("writing", &tmp))?;
        }
        out.flush().map_err(io("writing", &tmp))?;
        drop(out);
        file.sync_data().map_err(io("syncing", &tmp))?;
        written.push((tmp, dir.join(format!("{name}.run"))));
    }
    for (tmp, path) in &written {
        disk.rename(tmp, path).map_err(io("renaming", tmp))?;
    }
    disk.sync_dir(dir).map_err(io("syncing", dir))?;
    let parts = written
        .into_iter()
        .map(|(_, path)| Run::open(path.clone()).map_err(|e| DedupError(format!("{}: {e}", path.display()))))
        .collect::<Result<Vec<Run>, DedupError>>()?;
    Ok(Generation { first, end, count: entries.len() as u64, parts })
}

impl Generation {
    fn entries(&self) -> Result<Vec<(Key, u64)>, DedupError> {
        let mut out = Vec::with_capacity(self.count as usize);
        for part in &self.parts {
            out.extend(part.entries()?);
        }
        Ok(out)
    }

    fn remove(&self, disk: &Disk) {
        for part in &self.parts {
            let _ = disk.remove_file(&part.path);
        }
    }
}

pub(super) struct Dedup {
    disk: Disk,
    dir: PathBuf,
    runs: Vec<Generation>,
    /// The latest `from` of any entry on disk: an atom past it is not in any run.
    disk_max_from: i64,
    /// Entries for positions from the last run's end to `covered`.
    memory: FxHashMap<Key, u64>,
    /// Entries whose key another entry in memory has (two atoms, same `from`, same first 8
    /// bytes of leaf hash: chance alone, about 2^-64 a pair).
    shared: Vec<(Key, u64)>,
    max_memory: usize,
    /// Positions below this are in the filter.
    covered: u64,
}

impl Dedup {
    /// Open the filter in directory `dir` (created if missing): the runs that chain from
    /// position 0 within the first `size` positions; other runs are deleted.
    pub(super) fn open(disk: &Disk, dir: &Path, budget_bytes: usize, size: u64) -> Result<Self, DedupError> {
        disk.create_dir_all(dir).map_err(io("creating", dir))?;
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(io("reading", dir))? {
            let path = entry.map_err(io("reading", dir))?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("run") => match Run::open(path.clone()) {
                    Ok(run) => found.push(run),
                    Err(why) => {
                        tracing::warn!("{}: {why}; re-deriving what it held from the log", path.display());
                        let _ = disk.remove_file(&path);
                    }
                },
                // Left by a crash while a run was written.
                _ => {
                    let _ = disk.remove_file(&path);
                }
            }
        }
        // Whole generations only (a crash may leave one short of parts), then a chain of them
        // from 0: where a merged generation and those it merged are both left (a crash between
        // writing it and deleting them), the merged one is taken.
        found.sort_by_key(|r| (r.head.first, std::cmp::Reverse(r.head.end), r.head.part));
        let mut whole: Vec<Generation> = Vec::new();
        let mut parts: Vec<Run> = Vec::new();
        let finish = |parts: &mut Vec<Run>, whole: &mut Vec<Generation>| {
            let complete = parts.first().is_some_and(|p| {
                p.head.parts as usize == parts.len()
                    && parts.iter().enumerate().all(|(i, r)| r.head.part as usize == i)
            });
            if complete {
                let (first, end) = (parts[0].head.first, parts[0].head.end);
                let count = parts.iter().map(|r| r.head.count).sum();
                whole.push(Generation { first, end, count, parts: std::mem::take(parts) });
            } else {
                for r in parts.drain(..) {
                    let _ = disk.remove_file(&r.path);
                }
            }
        };
        for run in found {
            if parts.first().is_some_and(|p| (p.head.first, p.head.end) != (run.head.first, run.head.end)) {
                finish(&mut parts, &mut whole);
            }
            parts.push(run);
        }
        finish(&mut parts, &mut whole);
        let mut runs: Vec<Generation> = Vec::new();
        let mut expected = 0;
        for generation in whole {
            if generation.first == expected && generation.end <= size {
                expected = generation.end;
                runs.push(generation);
            } else {
                generation.remove(disk);
            }
        }
        let disk_max_from =
            runs.iter().flat_map(|g| &g.parts).map(|r| r.head.max_from).max().unwrap_or(i64::MIN);
        Ok(Self {
            disk: disk.clone(),
            dir: dir.to_owned(),
            runs,
            disk_max_from,
            memory: FxHashMap::default(),
            shared: Vec::new(),
            max_memory: (budget_bytes / MEM_ENTRY_BYTES).max(1024),
            covered: expected,
        })
    }

    /// A filter of nothing, on no disk: for a log opened to be read only, which takes no atoms.
    pub(super) fn detached() -> Self {
        Self {
            disk: Disk::os(),
            dir: PathBuf::new(),
            runs: Vec::new(),
            disk_max_from: i64::MIN,
            memory: FxHashMap::default(),
            shared: Vec::new(),
            max_memory: 1024,
            covered: 0,
        }
    }

    /// Start over with an empty filter in `dir`.
    pub(super) fn create(disk: &Disk, dir: &Path, budget_bytes: usize) -> Result<Self, DedupError> {
        // Opening at size 0 keeps no run and deletes every file in it.
        Self::open(disk, dir, budget_bytes, 0)
    }

    /// How many positions the filter covers.
    pub(super) fn covered(&self) -> u64 {
        self.covered
    }

    /// Where the atom with `key` and `leaf` is, looking past the entry in memory: in the
    /// shared entries and in the parts whose time span holds its `from`.
    fn find_beyond_memory<E: From<DedupError>>(
        &self,
        key: Key,
        leaf: &Digest,
        size: u64,
        stored: &impl Fn(u64) -> Result<Digest, E>,
    ) -> Result<Option<u64>, E> {
        for &(k, p) in &self.shared {
            if k == key && p < size && stored(p)? == *leaf {
                return Ok(Some(p));
            }
        }
        if key.0 <= self.disk_max_from {
            let parts = self.runs.iter().flat_map(|g| &g.parts);
            for run in parts.filter(|r| r.head.min_from <= key.0 && key.0 <= r.head.max_from) {
                for p in run.get(key)? {
                    if p < size && stored(p)? == *leaf {
                        return Ok(Some(p));
                    }
                }
            }
        }
        Ok(None)
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
        let key = (from, prefix(leaf));
        if let Some(&p) = self.memory.get(&key)
            && p < size
            && stored(p)? == *leaf
        {
            return Ok(Some(p));
        }
        self.find_beyond_memory(key, leaf, size, &stored)
    }

    /// Look up and record a group of atoms (no two alike): for each (from, leaf), its
    /// existing position, or `None` and it is recorded at the next position (`next`, counting
    /// up from the filter's end).
    pub(super) fn group<E: From<DedupError>>(
        &mut self,
        atoms: &[(i64, Digest)],
        mut next: u64,
        size: u64,
        stored: impl Fn(u64) -> Result<Digest, E>,
        _durable: bool,
    ) -> Result<Vec<Option<u64>>, E> {
        if next != self.covered {
            return Err(DedupError(format!(
                "asked to record from {next}, the filter ends at {}",
                self.covered
            ))
            .into());
        }
        // Past the budget, what memory holds goes to a run first: those atoms are durable in
        // the log by now (a run is never ahead of the segments).
        if self.memory.len() + self.shared.len() >= self.max_memory {
            self.flush()?;
        }
        let mut out = Vec::with_capacity(atoms.len());
        for (from, leaf) in atoms {
            let key = (*from, prefix(leaf));
            let in_memory = self.memory.get(&key).copied();
            let found = match in_memory {
                Some(p) if p < size && stored(p)? == *leaf => Some(p),
                _ => self.find_beyond_memory(key, leaf, size, &stored)?,
            };
            if found.is_some() {
                out.push(found);
                continue;
            }
            if in_memory.is_some() {
                self.shared.push((key, next));
            } else {
                self.memory.insert(key, next);
            }
            out.push(None);
            next += 1;
        }
        self.covered = next;
        Ok(out)
    }

    /// Write what is in memory as a run, merging the last runs while each is no larger than
    /// the one after it (and is smaller than [`MERGE_BELOW`]).
    fn flush(&mut self) -> Result<(), DedupError> {
        let first = self.runs.last().map_or(0, |r| r.end);
        if self.covered == first {
            return Ok(());
        }
        let mut entries: Vec<(Key, u64)> = self.memory.drain().chain(self.shared.drain(..)).collect();
        entries.sort_unstable();
        let generation = write_generation(&self.disk, &self.dir, first, self.covered, &entries)?;
        self.disk_max_from = self
            .disk_max_from
            .max(generation.parts.iter().map(|r| r.head.max_from).max().unwrap_or(i64::MIN));
        self.runs.push(generation);
        while let [.., a, b] = &self.runs[..] {
            if a.count > b.count || b.count >= MERGE_BELOW {
                break;
            }
            let mut merged = a.entries()?;
            merged.extend(b.entries()?);
            merged.sort_unstable();
            let generation = write_generation(&self.disk, &self.dir, a.first, b.end, &merged)?;
            for old in self.runs.drain(self.runs.len() - 2..) {
                old.remove(&self.disk);
            }
            self.runs.push(generation);
        }
        Ok(())
    }

    /// Make the filter durable as it is.
    pub(super) fn sync(&mut self) -> Result<(), DedupError> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(path: &Path) -> Vec<u8> {
        fs::read(path).expect("read")
    }

    fn leaf(i: u64) -> Digest {
        *blake3::hash(&i.to_le_bytes()).as_bytes()
    }

    #[test]
    fn finds_what_it_recorded_across_runs_merges_and_reopening() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("dedup");
        // A tiny budget: a run every 1,024 entries, merged as they pile up.
        let mut d = Dedup::open(&Disk::os(), &path, 1024 * MEM_ENTRY_BYTES, 0).expect("open");
        let leaves: Vec<Digest> = (0..10_000).map(leaf).collect();
        // Times mostly rising, some late (from earlier than what is on disk), some shared.
        let from = |i: u64| if i.is_multiple_of(97) { (i / 3) as i64 } else { i as i64 * 10 };
        let stored = |p: u64| -> Result<Digest, DedupError> { Ok(leaves[p as usize]) };
        for chunk in (0..10_000u64).collect::<Vec<_>>().chunks(700) {
            let atoms: Vec<(i64, Digest)> = chunk.iter().map(|&i| (from(i), leaves[i as usize])).collect();
            let next = d.covered();
            let got = d.group(&atoms, next, next, stored, false).expect("group");
            assert!(got.iter().all(Option::is_none));
            // Everything recorded so far answers, and again it is a duplicate.
            let again = d.group(&atoms, d.covered(), d.covered(), stored, false).expect("again");
            assert_eq!(again, chunk.iter().map(|&i| Some(i)).collect::<Vec<_>>());
        }
        assert!(d.runs.len() < 10, "{} runs", d.runs.len());
        d.sync().expect("sync");
        drop(d);
        let d = Dedup::open(&Disk::os(), &path, 1 << 20, 10_000).expect("reopen");
        assert_eq!(d.covered(), 10_000);
        for i in (0..10_000).step_by(7) {
            assert_eq!(d.find(from(i), &leaves[i as usize], 10_000, stored).expect("find"), Some(i));
            assert_eq!(d.find(from(i) + 1, &leaves[i as usize], 10_000, stored).expect("find"), None);
        }
        // A damaged block is found when read and named.
        let run = fs::read_dir(&path).expect("dir").flatten().map(|e| e.path()).min().expect("a run");
        let mut bytes = read_all(&run);
        bytes[HEADER as usize + 5] ^= 1;
        fs::write(&run, bytes).expect("write");
        let d = Dedup::open(&Disk::os(), &path, 1 << 20, 10_000).expect("reopen");
        let err =
            (0..10_000).step_by(13).find_map(|i| d.find(from(i), &leaves[i as usize], 10_000, stored).err());
        assert!(err.is_some_and(|e| e.to_string().contains("checksum")));
        // A damaged header: the run and those after it are dropped, to be re-derived.
        let mut bytes = read_all(&run);
        bytes[3] ^= 1;
        fs::write(&run, bytes).expect("write");
        drop(d);
        assert_eq!(Dedup::open(&Disk::os(), &path, 1 << 20, 10_000).expect("reopen").covered(), 0);
        // A log cut back: runs past its end are dropped too.
        let mut d = Dedup::create(&Disk::os(), &path, 1024 * MEM_ENTRY_BYTES).expect("create");
        let atoms: Vec<(i64, Digest)> = (0..3000u64).map(|i| (from(i), leaves[i as usize])).collect();
        d.group(&atoms[..2000], 0, 0, stored, false).expect("group");
        d.sync().expect("sync");
        d.group(&atoms[2000..], 2000, 2000, stored, false).expect("group");
        d.sync().expect("sync");
        let runs = |d: &Dedup| d.runs.iter().map(|g| (g.first, g.end)).collect::<Vec<_>>();
        assert_eq!(runs(&d), vec![(0, 2000), (2000, 3000)]);
        drop(d);
        let d = Dedup::open(&Disk::os(), &path, 1 << 20, 2500).expect("reopen");
        assert_eq!((runs(&d), d.covered()), (vec![(0, 2000)], 2000));
        // Two sources an hour apart: a generation of two parts, each opened only for its hour;
        // one part lost (a crash among the renames), the whole generation goes.
        let mut d = Dedup::create(&Disk::os(), &path, 1 << 20).expect("create");
        let hour = 3_600_000_000_000i64;
        let atoms: Vec<(i64, Digest)> = (0..2000u64)
            .map(|i| (i as i64 + if i.is_multiple_of(2) { hour } else { 0 }, leaves[i as usize]))
            .collect();
        d.group(&atoms, 0, 0, stored, false).expect("group");
        d.sync().expect("sync");
        assert_eq!(d.runs[0].parts.len(), 2);
        assert_eq!(d.find(hour + 10, &leaves[10], 2000, stored).expect("find"), Some(10));
        let part = d.runs[0].parts[1].path.clone();
        drop(d);
        fs::remove_file(part).expect("rm");
        assert_eq!(Dedup::open(&Disk::os(), &path, 1 << 20, 2000).expect("reopen").covered(), 0);
    }
}
