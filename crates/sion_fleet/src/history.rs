//! The ledger's history as a C2SP log (docs/FLEET-LEDGER.md, "Checkpoints"): an RFC 6962
//! SHA-256 tree whose leaf `n` is Pulse `n`'s header, kept in etcd as tiles, and the latest
//! checkpoint of it signed by the ledger key as a C2SP signed note. A front-end extends it from
//! signed headers alone, checked against the last checkpoint the key signed before anything new
//! is signed; any front-end may serve its checkpoints and proofs.
//!
//! Keys under the prefix: `P/hist/T/S` (20 digits) is tile `S` of tier `T`, the hashes of the
//! complete subtrees of level `6T` numbered `64·S … 64·S + 63` (as many as are complete, 32
//! bytes each; tier 0 holds the leaf hashes); `P/checkpoint` the latest signed checkpoint note.
//! A tile is only ever extended (a complete subtree never changes), so the latest tiles serve
//! proofs for every size up to the checkpoint's.

use std::collections::{BTreeMap, HashMap};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use sion_verify::ledger::{Checkpoint, SignedNote, history_leaf, origin_of, sign_checkpoint};
use sion_verify::merkle::{self, Digest, Sha256, Subtrees, TreeHasher as _};

use crate::{FleetError, FleetLedger, n20};

/// Hashes a tile holds; levels a tier spans (64 = 2^6).
const TILE: usize = 64;
const TIER_LEVELS: u32 = 6;

/// The most Pulses one etcd transaction adds to the history: its tiles (one per 64 Pulses, and
/// one a tier above) stay well within etcd's default 128 operations.
pub const HISTORY_STEP: u64 = 1024;

fn hist_key(t: u32, s: u64) -> String {
    format!("hist/{t}/{}", n20(s))
}

/// The RFC 6962 hash of a perfect subtree from its 2^k leaves' (or lower subtrees') hashes.
fn fold_perfect(hashes: &[Digest]) -> Digest {
    let mut level = hashes.to_vec();
    while level.len() > 1 {
        level = level.chunks(2).map(|p| Sha256::hash_children(&p[0], &p[1])).collect();
    }
    level.first().copied().unwrap_or_else(Sha256::hash_empty)
}

/// The history's open tiles: for each tier, the tile still growing (fewer than 64 hashes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tiles {
    size: u64,
    open: Vec<Vec<Digest>>,
}

impl Tiles {
    /// How many leaves (Pulses) the history holds.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// How many hashes the open tile of tier `t` holds at `size`: digit `t` of `size` in base 64.
    fn open_len(size: u64, t: u32) -> usize {
        let shift = (TIER_LEVELS * t) as usize;
        if shift >= 64 { 0 } else { ((size >> shift) % TILE as u64) as usize }
    }

    /// The tiers a history of `size` leaves has (64^t ≤ size).
    fn tiers(size: u64) -> u32 {
        let mut t = 0;
        while t < 11 && (size >> (TIER_LEVELS * t)) >= 1 {
            t += 1;
        }
        t.max(1)
    }

    /// Append a leaf; every tile it changed (tier, number, its hashes now).
    pub fn push(&mut self, leaf: Digest, changed: &mut BTreeMap<(u32, u64), Vec<Digest>>) {
        let (mut hash, mut unit, mut t) = (leaf, self.size, 0usize);
        loop {
            if self.open.len() <= t {
                self.open.push(Vec::new());
            }
            self.open[t].push(hash);
            changed.insert((t as u32, unit / TILE as u64), self.open[t].clone());
            if self.open[t].len() < TILE {
                break;
            }
            // The tile is complete: its subtree is the next hash of the tier above.
            hash = fold_perfect(&self.open[t]);
            self.open[t].clear();
            unit /= TILE as u64;
            t += 1;
        }
        self.size += 1;
    }

    /// The RFC 6962 root of the history: its peaks (each open tile's hashes grouped by the
    /// binary digits of their count, highest tier first) folded from the right.
    pub fn root(&self) -> Digest {
        let mut peaks = Vec::new();
        for tile in self.open.iter().rev() {
            let mut at = 0;
            for bit in (0..TIER_LEVELS).rev() {
                let w = 1usize << bit;
                if tile.len() & w != 0 {
                    peaks.push(fold_perfect(&tile[at..at + w]));
                    at += w;
                }
            }
        }
        let Some(mut root) = peaks.pop() else { return Sha256::hash_empty() };
        while let Some(left) = peaks.pop() {
            root = Sha256::hash_children(&left, &root);
        }
        root
    }
}

/// Tiles read for one proof; a subtree outside them names the tile to read.
struct Read<'a>(&'a HashMap<(u32, u64), Vec<Digest>>);

impl Subtrees for Read<'_> {
    type Error = (u32, u64);
    fn subtree(&self, level: u32, index: u64) -> Result<Digest, (u32, u64)> {
        let t = level / TIER_LEVELS;
        let units = 1u64 << (level - TIER_LEVELS * t);
        let first = index * units;
        let (s, at) = (first / TILE as u64, (first % TILE as u64) as usize);
        let tile = self.0.get(&(t, s)).ok_or((t, s))?;
        tile.get(at..at + units as usize).map(fold_perfect).ok_or((t, s))
    }
}

/// What a front-end holds of the history: the latest checkpoint it read or wrote, the tiles
/// it checked against it, and the hash of the last Pulse in it (the next one's `prev`).
#[derive(Clone)]
pub(crate) struct Held {
    revision: i64,
    tiles: Tiles,
    last: Option<Digest>,
    note: SignedNote,
    checkpoint: Checkpoint,
}

impl FleetLedger {
    fn decode_tile(&self, t: u32, s: u64, v: &[u8]) -> Result<Vec<Digest>, FleetError> {
        if !v.len().is_multiple_of(32) || v.len() > TILE * 32 {
            return Err(self.damaged(&hist_key(t, s), format!("{} bytes, not up to 64 hashes", v.len())));
        }
        Ok(v.chunks(32).map(|c| c.try_into().unwrap_or([0; 32])).collect())
    }

    /// The latest checkpoint in etcd, checked: signed by this ledger's key, its open tiles
    /// folding to its root, and the last Pulse in it the signed header with that number. None
    /// before the first checkpoint.
    async fn load_history(&mut self) -> Result<Option<Held>, FleetError> {
        let resp = self.get(self.key_of("checkpoint"), None).await?;
        let Some(kv) = resp.kvs().first() else { return Ok(None) };
        let (revision, at) = (kv.mod_revision(), resp.header().map_or(0, |h| h.revision()));
        let note = SignedNote::parse(kv.value()).map_err(|e| self.damaged("checkpoint", e.to_string()))?;
        let checkpoint = note
            .verify_checkpoint(&self.public_key())
            .map_err(|e| self.damaged("checkpoint", e.to_string()))?;
        let size = checkpoint.size;
        // The open tiles as of the checkpoint's revision (written with it).
        let mut open = Vec::new();
        for t in 0..Tiles::tiers(size) {
            let want = Tiles::open_len(size, t);
            let s = (size >> (TIER_LEVELS * t)) / TILE as u64;
            let got = if want == 0 {
                Vec::new()
            } else {
                let rest = hist_key(t, s);
                let r = self
                    .get(self.key_of(&rest), Some(etcd_client::GetOptions::new().with_revision(at)))
                    .await?;
                let v = r.kvs().first().map(|kv| kv.value().to_vec()).unwrap_or_default();
                self.decode_tile(t, s, &v)?
            };
            if got.len() != want {
                return Err(self.damaged(
                    &hist_key(t, s),
                    format!("{} hashes where a history of {size} Pulses has {want}", got.len()),
                ));
            }
            open.push(got);
        }
        let tiles = Tiles { size, open };
        if tiles.root() != checkpoint.root {
            return Err(self.damaged(
                "hist/",
                format!("the tiles do not fold to the signed checkpoint's root at {size}"),
            ));
        }
        let last = match size {
            0 => None,
            n => {
                let h = self.header(n - 1).await?;
                let path = self.history_inclusion_with(n - 1, n).await?;
                checkpoint.includes(&h.header, &path).map_err(|e| self.damaged("hist/", e.to_string()))?;
                Some(h.header.hash())
            }
        };
        Ok(Some(Held { revision, tiles, last, note, checkpoint }))
    }

    /// The latest Pulse's number as `P/head` says it: each Pulse added to the history is then
    /// its signed header, checked, so the head is not taken on trust (nor the whole state read).
    async fn head_number(&mut self) -> Result<u64, FleetError> {
        let resp = self.get(self.key_of("head"), None).await?;
        let Some(kv) = resp.kvs().first() else { return Err(FleetError::Missing(self.prefix.clone())) };
        let number: [u8; 8] = kv
            .value()
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| self.damaged("head", "shorter than a Pulse number"))?;
        Ok(u64::from_le_bytes(number))
    }

    /// The latest signed checkpoint, extended first to the latest Pulse (at most
    /// [`HISTORY_STEP`] Pulses a transaction, `most` in all), as its note: what
    /// `GET /checkpoint` serves. Each Pulse added is its signed header, following the last.
    pub async fn checkpoint(&mut self, most: u64) -> Result<(SignedNote, Checkpoint), FleetError> {
        let mut added = 0;
        let mut lost = 0;
        loop {
            let held = match self.history.take() {
                Some(h) => Some(h),
                None => self.load_history().await?,
            };
            let latest = self.head_number().await?;
            let size = held.as_ref().map_or(0, |h| h.tiles.size);
            if size > latest || added >= most {
                let Some(held) = held else {
                    return Err(FleetError::Missing(format!("{}checkpoint", self.prefix)));
                };
                let out = (held.note.clone(), held.checkpoint.clone());
                self.history = Some(held);
                return Ok(out);
            }
            let (mut tiles, mut last, revision) = match &held {
                Some(h) => (h.tiles.clone(), h.last, h.revision),
                None => (Tiles::default(), None, 0),
            };
            let mut changed = BTreeMap::new();
            let until = latest.min(size + HISTORY_STEP.min(most - added) - 1);
            for n in size..=until {
                let h = self.header(n).await?.header;
                if h.number != n || last.is_some_and(|l| l != h.prev) {
                    return Err(
                        self.damaged(&format!("pulse/{}", n20(n)), "does not follow the Pulse before it")
                    );
                }
                tiles.push(history_leaf(&h), &mut changed);
                last = Some(h.hash());
            }
            let checkpoint = Checkpoint {
                origin: origin_of(&self.public_key().to_bytes()),
                size: tiles.size,
                root: tiles.root(),
                extensions: vec![],
            };
            let note = sign_checkpoint(&self.key, &checkpoint);
            let mut puts: Vec<TxnOp> = changed
                .iter()
                .map(|((t, s), hashes)| TxnOp::put(self.key_of(&hist_key(*t, *s)), hashes.concat(), None))
                .collect();
            puts.push(TxnOp::put(self.key_of("checkpoint"), note.encode().into_bytes(), None));
            // Only on the checkpoint this front-end checked: another front-end's newer one is read
            // and checked instead of being overwritten.
            let key = self.key_of("checkpoint");
            let guard = if revision == 0 {
                Compare::version(key, CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(key, CompareOp::Equal, revision)
            };
            let resp = self.write_txn(Txn::new().when(vec![guard]).and_then(puts)).await?;
            if resp.succeeded() {
                let revision = resp.header().map_or(0, |h| h.revision());
                added += tiles.size - size;
                self.history = Some(Held { revision, tiles, last, note, checkpoint });
            } else {
                // Lost to another front-end: the next turn reads its checkpoint. Not forever (a
                // writer of etcd rewriting `P/checkpoint` over and over would hold the turn).
                lost += 1;
                if lost >= 16 {
                    return Err(FleetError::Contention(lost));
                }
            }
        }
    }

    /// Keep witnesses' cosignature lines with the checkpoint they cosign (`P/cosigned/SIZE`,
    /// merged with those kept before: one line per witness name and key ID). The note must be
    /// the ledger's own; each line was checked by the caller under its witness's key, and is
    /// checked again by every reader under the keys it chose.
    pub async fn keep_cosigned(
        &mut self,
        note: &SignedNote,
        checkpoint: &Checkpoint,
        lines: Vec<sion_verify::ledger::NoteSignature>,
    ) -> Result<(), FleetError> {
        let own =
            note.verify_checkpoint(&self.public_key()).map_err(|e| FleetError::History(e.to_string()))?;
        if own != *checkpoint {
            return Err(FleetError::History("the note is not of the checkpoint given".into()));
        }
        let rest = format!("cosigned/{}", n20(checkpoint.size));
        let key = self.key_of(&rest);
        // Merged on the revision read: two front-ends keeping lines at once lose none.
        for _ in 0..8 {
            let resp = self.get(key.clone(), None).await?;
            let (mut kept, guard) = match resp.kvs().first() {
                Some(kv) => (
                    SignedNote::parse(kv.value()).map_err(|e| self.damaged(&rest, e.to_string()))?,
                    Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                ),
                None => (note.clone(), Compare::version(key.clone(), CompareOp::Equal, 0)),
            };
            if kept.text != note.text {
                return Err(self.damaged(&rest, "holds another checkpoint of that size"));
            }
            // A witness's line replaces one kept under its name and key ID (each was checked
            // under its key by the caller; a line kept before may not have been).
            for line in &lines {
                let count = kept.signatures.len();
                match kept.signatures.iter_mut().skip(1).find(|s| s.name == line.name && s.id == line.id) {
                    Some(s) => *s = line.clone(),
                    None if count < sion_verify::ledger::MAX_NOTE_SIGNATURES => {
                        kept.signatures.push(line.clone())
                    }
                    None => {
                        return Err(FleetError::History(format!(
                            "checkpoint {} holds {} signatures already",
                            checkpoint.size, count
                        )));
                    }
                }
            }
            let bytes = kept.encode().into_bytes();
            if bytes.len() > sion_verify::ledger::MAX_NOTE_BYTES {
                return Err(FleetError::History(format!(
                    "checkpoint {} with its cosignatures would be {} bytes, over a note's {}",
                    checkpoint.size,
                    bytes.len(),
                    sion_verify::ledger::MAX_NOTE_BYTES
                )));
            }
            let put = TxnOp::put(key.clone(), bytes, None);
            let resp = self.write_txn(Txn::new().when(vec![guard]).and_then(vec![put])).await?;
            if resp.succeeded() {
                return Ok(());
            }
        }
        Err(FleetError::Contention(8))
    }

    /// The first checkpoint kept with cosignatures that covers Pulse `pulse` (its size past
    /// it), as kept: the ledger's note and the witnesses' lines, for the reader to check. None
    /// if no cosigned checkpoint covers it yet.
    pub async fn cosigned_covering(&mut self, pulse: u64) -> Result<Option<SignedNote>, FleetError> {
        let from = self.key_of(&format!("cosigned/{}", n20(pulse.saturating_add(1))));
        let end = crate::prefix_end(self.key_of("cosigned/").as_bytes());
        let options = etcd_client::GetOptions::new().with_range(end).with_limit(1);
        let resp = self.get(from, Some(options)).await?;
        let Some(kv) = resp.kvs().first() else { return Ok(None) };
        let rest = String::from_utf8_lossy(&kv.key()[self.prefix.len()..]).into_owned();
        let note = SignedNote::parse(kv.value()).map_err(|e| self.damaged(&rest, e.to_string()))?;
        let cp =
            note.verify_checkpoint(&self.public_key()).map_err(|e| self.damaged(&rest, e.to_string()))?;
        if rest != format!("cosigned/{}", n20(cp.size)) || cp.size <= pulse {
            return Err(self.damaged(&rest, format!("holds the checkpoint of size {}", cp.size)));
        }
        Ok(Some(note))
    }

    /// The hashes of the history's subtrees a proof needs, read tile by tile as the proof asks.
    async fn history_proof<T>(
        &mut self,
        mut build: impl FnMut(&Read<'_>) -> Result<T, (u32, u64)>,
    ) -> Result<T, FleetError> {
        let mut read: HashMap<(u32, u64), Vec<Digest>> = HashMap::new();
        loop {
            match build(&Read(&read)) {
                Ok(p) => return Ok(p),
                Err((t, s)) => {
                    let rest = hist_key(t, s);
                    if read.contains_key(&(t, s)) {
                        return Err(
                            self.damaged(&rest, "holds fewer hashes than the checkpoint's size needs")
                        );
                    }
                    let r = self.get(self.key_of(&rest), None).await?;
                    let v = r.kvs().first().map(|kv| kv.value().to_vec()).unwrap_or_default();
                    let tile = self.decode_tile(t, s, &v)?;
                    read.insert((t, s), tile);
                }
            }
        }
    }

    async fn history_inclusion_with(&mut self, pulse: u64, size: u64) -> Result<Vec<Digest>, FleetError> {
        self.history_proof(|r| merkle::inclusion_path::<Sha256, _>(r, pulse, size)).await
    }

    /// The RFC 6962 inclusion proof of Pulse `pulse` in the history of `size` Pulses (at most
    /// the latest checkpoint's size); one at the latest checkpoint is checked against it first.
    pub async fn history_inclusion(&mut self, pulse: u64, size: u64) -> Result<Vec<Digest>, FleetError> {
        let (_, latest) = self.checkpoint(0).await?;
        if pulse >= size || size > latest.size {
            return Err(FleetError::History(format!(
                "no inclusion proof of Pulse {pulse} in a history of {size}: the latest checkpoint's size is {}",
                latest.size
            )));
        }
        let path = self.history_inclusion_with(pulse, size).await?;
        if size == latest.size {
            let header = self.header(pulse).await?.header;
            latest.includes(&header, &path).map_err(|e| self.damaged("hist/", e.to_string()))?;
        }
        Ok(path)
    }

    /// The RFC 6962 consistency proof from the history of `old` Pulses to that of `new` (at
    /// most the latest checkpoint's size); empty from 0, as C2SP tlog-witness asks. One to the
    /// latest checkpoint is checked against its signed root first.
    pub async fn history_consistency(&mut self, old: u64, new: u64) -> Result<Vec<Digest>, FleetError> {
        let (_, latest) = self.checkpoint(0).await?;
        if old > new || new > latest.size {
            return Err(FleetError::History(format!(
                "no consistency proof from {old} to {new}: the latest checkpoint's size is {}",
                latest.size
            )));
        }
        if old == 0 || old == new {
            return Ok(Vec::new());
        }
        let (proof, old_root) = self
            .history_proof(|r| {
                Ok((
                    merkle::consistency_path::<Sha256, _>(r, old, new)?,
                    merkle::root_at::<Sha256, _>(r, old)?,
                ))
            })
            .await?;
        // Up to the latest checkpoint, the proof must lead from the tiles' root at `old` to the
        // signed root: tiles rewritten in etcd are refused here, not handed to a witness.
        if new == latest.size {
            merkle::verify_consistency::<Sha256, _>(old, new, &old_root, &latest.root, &proof)
                .map_err(|e| self.damaged("hist/", format!("a consistency proof from {old}: {e}")))?;
        }
        Ok(proof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sion_verify::merkle::MemoryTree;

    #[test]
    fn tiles_fold_to_the_rfc_6962_root_and_serve_every_subtree() {
        let mut tiles = Tiles::default();
        let mut tree = MemoryTree::<Sha256>::new();
        let mut written: HashMap<(u32, u64), Vec<Digest>> = HashMap::new();
        for n in 0..9000u64 {
            let leaf = Sha256::hash_leaf(&n.to_le_bytes());
            let mut changed = BTreeMap::new();
            tiles.push(leaf, &mut changed);
            written.extend(changed);
            tree.push_leaf_hash(leaf);
            assert_eq!(tiles.root(), tree.root(), "size {}", n + 1);
            if [1, 2, 63, 64, 65, 4095, 4096, 4097, 8999].contains(&n) {
                let size = n + 1;
                for i in [0, n / 2, n] {
                    let got = merkle::inclusion_path::<Sha256, _>(&Read(&written), i, size).unwrap();
                    let want = merkle::inclusion_path::<Sha256, _>(&tree, i, size).unwrap();
                    assert_eq!(got, want);
                }
                for old in [1, size / 3, size] {
                    if old == 0 {
                        continue;
                    }
                    let got = merkle::consistency_path::<Sha256, _>(&Read(&written), old, size).unwrap();
                    assert_eq!(got, merkle::consistency_path::<Sha256, _>(&tree, old, size).unwrap());
                }
            }
        }
    }
}
