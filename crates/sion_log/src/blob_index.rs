//! The blob store's index on disk (docs/LOG.md, "The blob index"): which pack and offset hold
//! a blob, for every pack but the one being written, in *runs* — files of entries sorted by
//! hash, in checksummed blocks, each covering a range of pack numbers. A closed pack's entries
//! become a run of their own; two runs covering as many packs merge into one (a binary
//! counter, off the writer's path), so a store of `n` packs has about log2 `n` runs, and a
//! lookup reads a few blocks of each. Memory does not grow with the blobs kept; opening reads
//! the runs' headers and the packs' sizes.
//!
//! The runs are a cache of the packs: a run that is missing, damaged or stale (a pack it
//! covers gone, or not the length it indexed) is rebuilt from the packs it should cover (a
//! reader that may not write holds those entries in memory).

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sion_disk::{Disk, Open};

const MAGIC: &[u8; 8] = b"SIONBIX1";
/// Magic, first pack, end pack, count, packs listed, CRC-32C of those 28 bytes.
const FIXED: u64 = 32;
/// A listed pack: its number and the length indexed.
const LISTED: u64 = 12;
/// Hash, pack, body offset, body length.
pub(super) const ENTRY: usize = 32 + 4 + 8 + 8;
/// Entries in a block (the last block of a run may hold fewer), then the block's CRC-32C.
const BLOCK: usize = 64;
const BLOCK_BYTES: u64 = (BLOCK * ENTRY + 4) as u64;

/// Where one blob's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub hash: [u8; 32],
    pub pack: u32,
    pub offset: u64,
    pub len: u64,
}

impl Entry {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hash);
        out.extend_from_slice(&self.pack.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Self {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&b[..32]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Self {
            hash,
            pack: u32::from_le_bytes([b[32], b[33], b[34], b[35]]),
            offset: u64_at(36),
            len: u64_at(44),
        }
    }
}

/// Where the blocks of a run listing `k` packs begin.
fn blocks_at(k: u64) -> u64 {
    FIXED + k * LISTED + 4
}

/// The bytes of a run of `count` entries listing `k` packs.
fn run_len(k: u64, count: u64) -> u64 {
    let full = count / BLOCK as u64;
    let rest = count % BLOCK as u64;
    blocks_at(k) + full * BLOCK_BYTES + if rest > 0 { rest * ENTRY as u64 + 4 } else { 0 }
}

/// A hash's first 8 bytes as a big-endian number: where in the run a uniform hash sits.
fn prefix(hash: &[u8; 32]) -> u64 {
    let mut p = [0u8; 8];
    p.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(p)
}

fn run_name(first: u32, end: u32) -> String {
    format!("run-{first:06}-{end:06}.bix")
}

/// One run: the entries of packs `first..end`, sorted by hash.
#[derive(Debug)]
pub(super) struct Run {
    path: PathBuf,
    file: fs::File,
    pub first: u32,
    pub end: u32,
    pub count: u64,
    /// The packs it indexes, with the length of each it indexed.
    packs: Vec<(u32, u64)>,
}

impl Run {
    /// A run whose header and length check out; anything else is a reason it is not used.
    fn open(path: &Path) -> Result<Self, String> {
        let file = fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
        let read = |buf: &mut [u8], at: u64| {
            file.read_exact_at(buf, at).map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let mut h = [0u8; FIXED as usize];
        read(&mut h, 0)?;
        let crc = u32::from_le_bytes([h[28], h[29], h[30], h[31]]);
        if &h[..8] != MAGIC || crc32c::crc32c(&h[..28]) != crc {
            return Err(format!("{}: not a blob index run (magic or checksum)", path.display()));
        }
        let first = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        let end = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        let mut c = [0u8; 8];
        c.copy_from_slice(&h[16..24]);
        let count = u64::from_le_bytes(c);
        let k = u64::from(u32::from_le_bytes([h[24], h[25], h[26], h[27]]));
        let len = file.metadata().map_err(|e| format!("reading {}: {e}", path.display()))?.len();
        // Counts are bounded by the file that holds them before anything trusts them.
        if first >= end
            || k > u64::from(end - first)
            || count > len / ENTRY as u64
            || run_len(k, count) != len
        {
            return Err(format!("{}: its header does not match its length", path.display()));
        }
        if path.file_name().and_then(|n| n.to_str()) != Some(run_name(first, end).as_str()) {
            return Err(format!("{}: its name does not match its header", path.display()));
        }
        let mut list = vec![0u8; (k * LISTED + 4) as usize];
        read(&mut list, FIXED)?;
        let (body, crc) = list.split_at(list.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(format!("{}: its list of packs does not match its checksum", path.display()));
        }
        let packs: Vec<(u32, u64)> = body
            .chunks_exact(LISTED as usize)
            .map(|b| {
                let mut l = [0u8; 8];
                l.copy_from_slice(&b[4..12]);
                (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u64::from_le_bytes(l))
            })
            .collect();
        if packs.iter().any(|&(p, _)| p < first || p >= end) || packs.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(format!("{}: its list of packs is out of range or order", path.display()));
        }
        Ok(Self { path: path.to_owned(), file, first, end, count, packs })
    }

    fn blocks(&self) -> u64 {
        self.count.div_ceil(BLOCK as u64)
    }

    /// Block `b`'s entries, checked against its checksum.
    fn block(&self, b: u64) -> Result<Vec<Entry>, String> {
        let n = (self.count - b * BLOCK as u64).min(BLOCK as u64) as usize;
        let mut bytes = vec![0u8; n * ENTRY + 4];
        self.file
            .read_exact_at(&mut bytes, blocks_at(self.packs.len() as u64) + b * BLOCK_BYTES)
            .map_err(|e| format!("reading {}: {e}", self.path.display()))?;
        let (body, crc) = bytes.split_at(n * ENTRY);
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(format!("{}: block {b} does not match its checksum", self.path.display()));
        }
        let entries: Vec<Entry> = body.chunks_exact(ENTRY).map(Entry::decode).collect();
        if entries.windows(2).any(|w| w[0].hash >= w[1].hash) {
            return Err(format!("{}: block {b} is not in hash order", self.path.display()));
        }
        Ok(entries)
    }

    /// The entry for `hash`, if the run holds it: an interpolation search over blocks (hashes
    /// are uniform, so each probe lands where the hash's first 8 bytes put it between the
    /// bounds known so far: two or three reads a lookup), falling back to halving after four
    /// probes, so a run whose hashes are not uniform still costs only log2 of its blocks.
    fn find(&self, hash: &[u8; 32]) -> Result<Option<Entry>, String> {
        let key = prefix(hash);
        let (mut lo, mut hi) = (0u64, self.blocks());
        let (mut lo_key, mut hi_key) = (0u64, u64::MAX);
        let mut probes = 0;
        while lo < hi {
            let b = if probes < 4 && hi_key > lo_key {
                let within = u128::from(key.saturating_sub(lo_key)) * u128::from(hi - lo)
                    / u128::from(hi_key - lo_key);
                (lo + within as u64).min(hi - 1)
            } else {
                lo + (hi - lo) / 2
            };
            probes += 1;
            let block = self.block(b)?;
            let (Some(first), Some(last)) = (block.first(), block.last()) else { return Ok(None) };
            if hash < &first.hash {
                (hi, hi_key) = (b, prefix(&first.hash));
            } else if hash > &last.hash {
                (lo, lo_key) = (b + 1, prefix(&last.hash));
            } else {
                return Ok(block.binary_search_by(|e| e.hash.cmp(hash)).ok().map(|i| block[i]));
            }
        }
        Ok(None)
    }

    /// Every entry, in hash order.
    fn entries(&self) -> impl Iterator<Item = Result<Entry, String>> + '_ {
        (0..self.blocks()).flat_map(move |b| match self.block(b) {
            Ok(entries) => entries.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })
    }
}

/// Write a run of `entries` (in hash order, no hash twice) for packs `first..end` in `dir`:
/// beside its name, fsynced, then renamed into place and the directory fsynced.
fn write_run(
    disk: &Disk,
    dir: &Path,
    first: u32,
    end: u32,
    packs: &[(u32, u64)],
    entries: impl Iterator<Item = Result<Entry, String>>,
) -> Result<Run, String> {
    let path = dir.join(run_name(first, end));
    let tmp = dir.join(format!(".{}.tmp", run_name(first, end)));
    let err = |what: &str, e: io::Error| format!("{what} {}: {e}", tmp.display());
    let file = disk.open(&tmp, Open::Truncate).map_err(|e| err("creating", e))?;
    let mut count = 0u64;
    {
        let mut out = io::BufWriter::with_capacity(1 << 16, file.writer(blocks_at(packs.len() as u64)));
        let mut block = Vec::with_capacity(BLOCK * ENTRY + 4);
        let mut last: Option<[u8; 32]> = None;
        for entry in entries {
            let entry = entry?;
            if last.is_some_and(|l| l >= entry.hash) {
                return Err(format!("{}: entries out of hash order", tmp.display()));
            }
            last = Some(entry.hash);
            entry.encode(&mut block);
            count += 1;
            if block.len() == BLOCK * ENTRY {
                block.extend_from_slice(&crc32c::crc32c(&block).to_le_bytes());
                out.write_all(&block).map_err(|e| err("writing", e))?;
                block.clear();
            }
        }
        if !block.is_empty() {
            block.extend_from_slice(&crc32c::crc32c(&block).to_le_bytes());
            out.write_all(&block).map_err(|e| err("writing", e))?;
        }
        out.flush().map_err(|e| err("writing", e))?;
    }
    let mut h = Vec::with_capacity(blocks_at(packs.len() as u64) as usize);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&first.to_le_bytes());
    h.extend_from_slice(&end.to_le_bytes());
    h.extend_from_slice(&count.to_le_bytes());
    h.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    let list_at = h.len();
    for (pack, len) in packs {
        h.extend_from_slice(&pack.to_le_bytes());
        h.extend_from_slice(&len.to_le_bytes());
    }
    let crc = crc32c::crc32c(&h[list_at..]);
    h.extend_from_slice(&crc.to_le_bytes());
    file.write_all_at(&h, 0).map_err(|e| err("writing", e))?;
    file.sync_all().map_err(|e| err("syncing", e))?;
    drop(file);
    disk.rename(&tmp, &path).map_err(|e| err("renaming", e))?;
    disk.sync_dir(dir).map_err(|e| format!("syncing {}: {e}", dir.display()))?;
    Run::open(&path)
}

/// Two sorted streams as one; a hash in both is taken from the first (the earlier packs).
fn merge<'a>(
    a: impl Iterator<Item = Result<Entry, String>> + 'a,
    b: impl Iterator<Item = Result<Entry, String>> + 'a,
) -> impl Iterator<Item = Result<Entry, String>> + 'a {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(Err(_)), _) | (Some(Ok(_)), None) => a.next(),
        (None, _) | (_, Some(Err(_))) => b.next(),
        (Some(Ok(x)), Some(Ok(y))) => match x.hash.cmp(&y.hash) {
            std::cmp::Ordering::Less => a.next(),
            std::cmp::Ordering::Greater => b.next(),
            std::cmp::Ordering::Equal => {
                b.next();
                a.next()
            }
        },
    })
}

/// Merge two adjoining runs into one written beside them (they stay as they are: the caller
/// swaps the result in and removes them).
pub(super) fn merge_runs(disk: &Disk, dir: &Path, a: &Run, b: &Run) -> Result<Run, String> {
    let packs: Vec<(u32, u64)> = a.packs.iter().chain(&b.packs).copied().collect();
    write_run(disk, dir, a.first, b.end, &packs, merge(a.entries(), b.entries()))
}

/// The runs that cover the closed packs, in pack order.
#[derive(Debug)]
pub(super) struct Index {
    dir: PathBuf,
    runs: Vec<Arc<Run>>,
}

impl Index {
    /// No runs (a store with no closed pack).
    pub(super) fn empty(dir: &Path) -> Self {
        Self { dir: dir.to_owned(), runs: Vec::new() }
    }

    /// The index of `packs` (pack number and length: every pack but the current one). Runs
    /// that check out — every pack they list there with the length they indexed, and no
    /// other pack in their range — cover what they can; the packs they leave out are indexed
    /// again by `scan` into new runs, or, when `writable` is false, returned to be held in
    /// memory.
    pub(super) fn open(
        disk: &Disk,
        dir: &Path,
        packs: &[(u32, u64)],
        writable: bool,
        mut scan: impl FnMut(u32) -> Result<Vec<Entry>, super::blobs::BlobError>,
    ) -> Result<(Self, Vec<Entry>), super::blobs::BlobError> {
        let limit = packs.iter().map(|p| p.0).max().map_or(0, |p| p.saturating_add(1));
        let mut found: Vec<Run> = Vec::new();
        let mut unused: Vec<PathBuf> = Vec::new();
        if let Ok(listing) = fs::read_dir(dir) {
            for entry in listing.flatten() {
                let path = entry.path();
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if name.starts_with('.') && name.ends_with(".tmp") {
                    unused.push(path); // a write a crash interrupted
                } else if name.ends_with(".bix") {
                    match Run::open(&path) {
                        Ok(run) if run.end <= limit => {
                            let here: Vec<(u32, u64)> =
                                packs.iter().copied().filter(|p| p.0 >= run.first && p.0 < run.end).collect();
                            if here == run.packs {
                                found.push(run);
                            } else {
                                tracing::warn!(
                                    "{}: its packs are not the ones it indexed (gone, cut or grown): rebuilt",
                                    path.display()
                                );
                                unused.push(path);
                            }
                        }
                        Ok(_) => unused.push(path),
                        Err(why) => {
                            tracing::warn!("{why}: rebuilt from the packs");
                            unused.push(path);
                        }
                    }
                }
            }
        }
        // The widest run at each start first; then a cover from pack 0 up, and the gaps it
        // leaves.
        found.sort_by(|a, b| a.first.cmp(&b.first).then(b.end.cmp(&a.end)));
        let mut cover: Vec<(Option<Run>, u32, u32)> = Vec::new();
        let mut at = 0u32;
        for run in found {
            if run.first < at {
                unused.push(run.path.clone()); // covered by a wider one (a merge a crash cut short)
                continue;
            }
            if run.first > at {
                cover.push((None, at, run.first));
            }
            at = run.end;
            let (first, end) = (run.first, run.end);
            cover.push((Some(run), first, end));
        }
        if at < limit {
            cover.push((None, at, limit));
        }
        // Before anything is written, so no new run is taken for an old one; made durable,
        // so no stale run comes back after a power cut.
        if writable && !unused.is_empty() {
            for path in &unused {
                disk.remove_file(path).map_err(|e| super::blobs::BlobError::Io {
                    what: "removing",
                    path: path.clone(),
                    source: e,
                })?;
            }
            disk.sync_dir(dir).map_err(|e| super::blobs::BlobError::Io {
                what: "syncing",
                path: dir.to_owned(),
                source: e,
            })?;
        }
        let mut index = Self { dir: dir.to_owned(), runs: Vec::new() };
        let mut loose = Vec::new();
        for (run, from, to) in cover {
            if let Some(run) = run {
                index.runs.push(Arc::new(run));
                continue;
            }
            for &(pack, len) in packs.iter().filter(|p| p.0 >= from && p.0 < to) {
                let entries = scan(pack)?;
                if !writable {
                    loose.extend(entries);
                    continue;
                }
                match index.add(disk, pack, len, entries.clone()) {
                    // A rebuild at open merges as it goes: it is the one time it happens.
                    Ok(()) => index.merge_all(disk),
                    Err(why) => {
                        tracing::warn!("the blob index: {why}; holding pack {pack}'s entries in memory");
                        loose.extend(entries);
                    }
                }
            }
        }
        Ok((index, loose))
    }

    /// Add the entries of `pack` (just closed, `len` bytes) as a run of its own.
    pub(super) fn add(
        &mut self,
        disk: &Disk,
        pack: u32,
        len: u64,
        mut entries: Vec<Entry>,
    ) -> Result<(), String> {
        entries.sort_unstable_by_key(|e| e.hash);
        entries.dedup_by(|b, a| a.hash == b.hash);
        disk.create_dir_all(&self.dir).map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let end = pack.checked_add(1).ok_or("pack number out of range")?;
        let run = write_run(disk, &self.dir, pack, end, &[(pack, len)], entries.into_iter().map(Ok))?;
        self.runs.push(Arc::new(run));
        Ok(())
    }

    /// The next two runs to merge: adjoining, covering as many packs; the latest such pair.
    /// Failing that, an older run covering fewer packs than the newer one beside it: runs
    /// closed while a merge was under way can leave the counter out of order (…, 1, 4, …),
    /// and merging those keeps the runs few (the sizes then fall from oldest to newest).
    pub(super) fn next_merge(&self) -> Option<(Arc<Run>, Arc<Run>)> {
        let packs = |r: &Run| r.end - r.first;
        let adjoining = |w: &&[Arc<Run>]| w[0].end == w[1].first;
        let pair = |w: &[Arc<Run>]| (w[0].clone(), w[1].clone());
        self.runs
            .windows(2)
            .rev()
            .find(|w| adjoining(w) && packs(&w[0]) == packs(&w[1]))
            .or_else(|| self.runs.windows(2).rev().find(|w| adjoining(w) && packs(&w[0]) < packs(&w[1])))
            .map(pair)
    }

    /// Put `merged` in place of `a` and `b` if they are still there, side by side; returns
    /// the files no longer used (theirs, or `merged`'s if they are not).
    pub(super) fn replace(&mut self, a: &Arc<Run>, b: &Arc<Run>, merged: Run) -> Vec<PathBuf> {
        match self.runs.iter().position(|r| Arc::ptr_eq(r, a)) {
            Some(i) if self.runs.get(i + 1).is_some_and(|r| Arc::ptr_eq(r, b)) => {
                self.runs.splice(i..i + 2, [Arc::new(merged)]);
                vec![a.path.clone(), b.path.clone()]
            }
            _ => vec![merged.path],
        }
    }

    /// Merge until no two runs cover as many packs side by side (here, on this thread).
    fn merge_all(&mut self, disk: &Disk) {
        while let Some((a, b)) = self.next_merge() {
            match merge_runs(disk, &self.dir, &a, &b) {
                Ok(merged) => {
                    for old in self.replace(&a, &b, merged) {
                        let _ = disk.remove_file(&old);
                    }
                }
                Err(why) => {
                    tracing::warn!("the blob index: merging: {why}");
                    return;
                }
            }
        }
    }

    /// The entry for `hash` in the newest run that holds it.
    pub(super) fn find(&self, hash: &[u8; 32]) -> Result<Option<Entry>, String> {
        for run in self.runs.iter().rev() {
            if let Some(e) = run.find(hash)? {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// Entries in the runs.
    pub(super) fn count(&self) -> u64 {
        self.runs.iter().map(|r| r.count).sum()
    }

    /// The runs, as (first pack, end pack, entries).
    pub(super) fn runs(&self) -> Vec<(u32, u32, u64)> {
        self.runs.iter().map(|r| (r.first, r.end, r.count)).collect()
    }

    /// Drop the run that failed to read at `hash`'s lookup: its packs, and its file.
    pub(super) fn forget_damaged(&mut self, hash: &[u8; 32]) -> Option<(Vec<u32>, PathBuf)> {
        let i = self.runs.iter().position(|r| r.find(hash).is_err())?;
        let run = self.runs.remove(i);
        Some((run.packs.iter().map(|p| p.0).collect(), run.path.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> Entry {
        Entry {
            hash: *blake3::hash(&i.to_le_bytes()).as_bytes(),
            pack: (i % 7) as u32,
            offset: i * 10,
            len: i,
        }
    }

    fn lens(n: u32) -> Vec<(u32, u64)> {
        (0..n).map(|p| (p, 1000 + u64::from(p))).collect()
    }

    #[test]
    fn runs_find_what_they_hold_and_nothing_else_and_merge_as_a_binary_counter() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("index");
        let disk = Disk::os();
        let (mut index, loose) = Index::open(&disk, &dir, &[], true, |_| Ok(Vec::new())).unwrap();
        assert!(loose.is_empty());
        let mut all = Vec::new();
        for (pack, len) in lens(5) {
            let entries: Vec<Entry> =
                (0..(200 + pack as u64 * 37)).map(|i| entry(pack as u64 * 1000 + i)).collect();
            all.extend(entries.clone());
            index.add(&disk, pack, len, entries).unwrap();
            index.merge_all(&disk);
        }
        // 5 packs: a run of 4 and a run of 1.
        assert_eq!(index.runs().iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), vec![(0, 4), (4, 5)]);
        assert_eq!(index.count(), all.len() as u64);
        for e in &all {
            assert_eq!(index.find(&e.hash).unwrap(), Some(*e));
        }
        for i in 0..500u64 {
            assert_eq!(index.find(&entry(1_000_000 + i).hash).unwrap(), None);
        }
        // Reopened: the same runs, nothing rescanned; a stray run and a torn write are removed.
        fs::write(dir.join(run_name(1, 2)), b"junk").unwrap();
        fs::write(dir.join(format!(".{}.tmp", run_name(4, 6))), b"half").unwrap();
        let (index, loose) = Index::open(&disk, &dir, &lens(5), true, |p| panic!("scanned {p}")).unwrap();
        assert!(loose.is_empty());
        assert_eq!(index.runs().len(), 2);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2, "only the runs in use are left");
        assert_eq!(index.find(&all[777].hash).unwrap(), Some(all[777]));
        drop(index);
        // A pack that is not the length its run indexed (cut, grown, replaced): that run is
        // rebuilt from the packs, the other kept.
        let mut other = lens(5);
        other[4].1 += 1;
        let mut scanned = Vec::new();
        let (index, _) = Index::open(&disk, &dir, &other, true, |p| {
            scanned.push(p);
            Ok(Vec::new())
        })
        .unwrap();
        assert_eq!(scanned, vec![4]);
        assert_eq!(index.runs().iter().map(|r| (r.0, r.1, r.2)).collect::<Vec<_>>()[0].1, 4);
    }

    #[test]
    fn a_damaged_run_is_left_out_and_its_packs_indexed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("index");
        let disk = Disk::os();
        let entries = |pack: u32| -> Vec<Entry> {
            (0..300u64).map(|i| Entry { pack, ..entry(pack as u64 * 1000 + i) }).collect()
        };
        let (mut index, _) = Index::open(&disk, &dir, &[], true, |_| Ok(Vec::new())).unwrap();
        for (pack, len) in lens(2) {
            index.add(&disk, pack, len, entries(pack)).unwrap();
        }
        index.merge_all(&disk);
        drop(index);
        // A flipped byte in the merged run's header: it no longer checks out.
        let run = dir.join(run_name(0, 2));
        let mut bytes = fs::read(&run).unwrap();
        bytes[17] ^= 1;
        fs::write(&run, &bytes).unwrap();
        let mut scanned = Vec::new();
        let (index, loose) = Index::open(&disk, &dir, &lens(2), true, |p| {
            scanned.push(p);
            Ok(entries(p))
        })
        .unwrap();
        assert_eq!(scanned, vec![0, 1]);
        assert!(loose.is_empty());
        assert_eq!(index.find(&entries(1)[5].hash).unwrap(), Some(entries(1)[5]));
        // A damaged block is found on lookup, and the run is dropped with its file named.
        drop(index);
        let run = dir.join(run_name(0, 2));
        let mut bytes = fs::read(&run).unwrap();
        let at = blocks_at(2) as usize + 10;
        bytes[at] ^= 1;
        fs::write(&run, &bytes).unwrap();
        let (mut index, _) = Index::open(&disk, &dir, &lens(2), false, |_| Ok(Vec::new())).unwrap();
        let hashes: Vec<[u8; 32]> = entries(0).iter().chain(&entries(1)).map(|e| e.hash).collect();
        let bad = hashes.iter().find(|h| index.find(h).is_err()).expect("the damaged block is found");
        let (packs, path) = index.forget_damaged(bad).expect("dropped");
        assert_eq!((packs, path), (vec![0, 1], run));
        assert!(index.runs().is_empty());
    }
}
