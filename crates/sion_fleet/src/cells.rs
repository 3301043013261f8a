//! Cells on a fleet ledger (docs/FLEET-LEDGER.md, "Cells"). The map is what the Pulses'
//! commits named, so it is not kept in etcd key by key (a commit may name 1,024 cells; a
//! Pulse's transaction holds 128 operations): a front-end holds it in memory, brings it forward
//! with each Pulse it replays, and, holding nothing, rebuilds it from the latest snapshot in
//! etcd and the entries since, checked against the head's cells root. A snapshot is written
//! every [`SNAPSHOT_EVERY`] Pulses, outside the Pulse's compare-and-swap, by the front-end that
//! made that Pulse; it is a cache: one that does not check out is passed over for the entries
//! from the genesis.

use std::collections::BTreeMap;

use etcd_client::GetOptions;
use sion_ledger::state::{Cells, prove_asked_within};
use sion_ledger::{LedgerError, PulseHeader, SignedHeader, Tx};
use sion_verify::cells::{Asked, CellQuery, RangeCellProof};
use sion_verify::proof::fleet::{CellNode, put_cell_nodes, read_cell_nodes};
use sion_verify::wire::{Put as _, Reader, WireError};

use crate::snapshot::{CELLS, put_cell, read_cell};
use crate::{FleetError, FleetLedger, REPLAY_PAGE, decode_entry, n20};

pub use crate::snapshot::SNAPSHOT_EVERY;

/// The most cells a request may name.
pub const MAX_ASKED_KEYS: usize = 65_536;

/// The most bytes of the `Cells` call's answer: within a link's largest reply (4 MiB), with
/// room for its framing.
pub const MAX_ANSWER_BYTES: usize = (4 << 20) - (64 << 10);

/// The most nodes of the `Cells` call's proof a front-end builds (about 50 MiB of them held
/// while it is encoded): past it the call is refused (`too_large`) before it is sent.
pub const MAX_ANSWER_NODES: usize = 1 << 20;

/// The longest frame name a question's cells may be asked of, in bytes.
pub const MAX_FRAME_BYTES: usize = 256;

/// Which cells a request asks about (the service's `Cells` call): a question's (a frame and a
/// box, docs/LEDGER.md, "A question's cells"), or named cells (a witness's, those a Pulse's
/// commits name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskedCells {
    Question(Box<CellQuery>),
    Keys(Vec<(u128, u128)>),
}

impl Asked for AskedCells {
    fn meets(&self, depth: usize, prefix: u128) -> bool {
        match self {
            AskedCells::Question(q) => q.meets(depth, prefix),
            // Keys ascending (by construction and by decoding): the first whose key is not below
            // the subtree's interval decides, found by halving — not a scan at every node.
            AskedCells::Keys(k) => {
                let lo = prefix & !(u128::MAX.checked_shr(depth.min(128) as u32).unwrap_or(0));
                let hi = lo | u128::MAX.checked_shr(depth.min(128) as u32).unwrap_or(0);
                let i = k.partition_point(|(key, _)| *key < lo);
                k.get(i).is_some_and(|(key, _)| *key <= hi)
            }
        }
    }
}

impl AskedCells {
    /// Named cells (sorted here, each once).
    pub fn keys(keys: &[u128]) -> Self {
        let mut k = keys.to_vec();
        k.sort_unstable();
        k.dedup();
        AskedCells::Keys(k.into_iter().map(|k| (k, k)).collect())
    }

    /// The request's bytes: `u8 0`, `u16` length and the frame's UTF-8, the box (six `i64`, mm:
    /// min x, y, z, max x, y, z); or `u8 1`, `u32` count, the keys (16 bytes each, big-endian,
    /// strictly ascending).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            AskedCells::Question(q) => {
                out.put_u8(0);
                out.put_u16(q.frame().len() as u16);
                out.put_bytes(q.frame().as_bytes());
                let b = q.bounds();
                for v in b.min_mm.iter().chain(b.max_mm.iter()) {
                    out.put_i64(*v);
                }
            }
            AskedCells::Keys(keys) => {
                out.put_u8(1);
                out.put_u32(keys.len() as u32);
                for (k, _) in keys {
                    out.put_bytes(&k.to_be_bytes());
                }
            }
        }
        out
    }

    /// Read what [`AskedCells::encode`] writes, bounded ([`MAX_FRAME_BYTES`], [`MAX_ASKED_KEYS`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let bad = |field: &'static str, problem: String| WireError::Invalid { field, problem };
        let mut r = Reader::new(bytes);
        let asked = match r.u8("asked")? {
            0 => {
                let n = r.u16("frame length")? as usize;
                if n > MAX_FRAME_BYTES {
                    return Err(bad("frame length", format!("{n} bytes, over {MAX_FRAME_BYTES}")));
                }
                let frame = std::str::from_utf8(r.take(n, "frame")?)
                    .map_err(|_| bad("frame", "not UTF-8".into()))?
                    .to_owned();
                let mut v = [0i64; 6];
                for x in &mut v {
                    *x = r.i64("box")?;
                }
                let b = sion_verify::atom::BoxMm { min_mm: [v[0], v[1], v[2]], max_mm: [v[3], v[4], v[5]] };
                AskedCells::Question(Box::new(CellQuery::new(&frame, &b)))
            }
            1 => {
                let n = r.u32("keys")? as usize;
                if n > MAX_ASKED_KEYS || n > r.remaining() / 16 {
                    return Err(bad("keys", format!("{n}, over {MAX_ASKED_KEYS} or the bytes left")));
                }
                let mut keys = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = u128::from_be_bytes(r.array("key")?);
                    if keys.last().is_some_and(|(last, _)| *last >= k) {
                        return Err(bad("key", "not strictly ascending".into()));
                    }
                    keys.push((k, k));
                }
                AskedCells::Keys(keys)
            }
            t => return Err(bad("asked", format!("kind {t}, not 0 or 1"))),
        };
        r.finish()?;
        Ok(asked)
    }
}

/// The `Cells` call's answer: the signed header of the Pulse the cells are of, then the cell
/// proof's nodes as SIONFLT2 holds them (docs/PROOFS.md, "Fleet recall by cells"): each asked
/// cell the trie holds with its logs.
pub fn encode_answer(header: &SignedHeader, nodes: &[CellNode]) -> Vec<u8> {
    let mut out = Vec::new();
    header.put(&mut out);
    put_cell_nodes(&mut out, nodes);
    out
}

/// Read what [`encode_answer`] writes.
pub fn decode_answer(bytes: &[u8]) -> Result<(SignedHeader, Vec<CellNode>), WireError> {
    let mut r = Reader::new(bytes);
    let header = SignedHeader::read(&mut r)?;
    let nodes = read_cell_nodes(&mut r)?;
    r.finish()?;
    Ok((header, nodes))
}

/// `P/cellsnap`: the Pulse of the latest snapshot of the cells, how many chunks it is, and
/// the BLAKE3 hash of their values in order (docs/FLEET-LEDGER.md, "Cells").
struct SnapshotPointer {
    pulse: u64,
    count: u32,
    hash: [u8; 32],
}

impl SnapshotPointer {
    const LEN: usize = 8 + 4 + 32;

    fn parse(v: &[u8]) -> Result<Self, String> {
        if v.len() != Self::LEN {
            return Err(format!("P/cellsnap is {} bytes, not {}", v.len(), Self::LEN));
        }
        let mut r = Reader::new(v);
        let read = |r: &mut Reader| -> Result<Self, WireError> {
            Ok(Self { pulse: r.u64("pulse")?, count: r.u32("count")?, hash: r.array("hash")? })
        };
        read(&mut r).map_err(|e| format!("P/cellsnap: {e}"))
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        out.put_u64(self.pulse);
        out.put_u32(self.count);
        out.put_bytes(&self.hash);
        out
    }
}

/// A snapshot's chunks: each cell in key order as [`crate::snapshot::put_cell`] writes it, cut
/// between cells past [`crate::snapshot::CHUNK_BYTES`].
fn chunks(cells: &Cells) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new()];
    for (key, listed) in cells.sorted() {
        if out.last().is_some_and(|c| c.len() >= crate::snapshot::CHUNK_BYTES) {
            out.push(Vec::new());
        }
        let Some(chunk) = out.last_mut() else { continue };
        put_cell(chunk, key, &listed);
    }
    out
}

/// Load one chunk into `cells`; what is wrong with it, if anything.
fn load_chunk(cells: &mut Cells, bytes: &[u8], head: u64) -> Result<(), String> {
    let mut r = Reader::new(bytes);
    while r.remaining() > 0 {
        read_cell(&mut r, cells, head)?;
    }
    Ok(())
}

impl FleetLedger {
    /// Whether this ledger keeps cells (one made since fleets keep them).
    pub fn keeps_cells(&self) -> bool {
        self.cells
    }

    /// The cells `asked` asks as of Pulse `pulse` (the latest for `None`): that Pulse's signed
    /// header, the proof of them against its cells root, and the logs each lists. `None` on a
    /// ledger without cells.
    pub async fn cells_asked(
        &mut self,
        asked: &AskedCells,
        pulse: Option<u64>,
    ) -> Result<Option<(SignedHeader, RangeCellProof, BTreeMap<u128, Vec<u64>>)>, FleetError> {
        if !self.cells {
            return Ok(None);
        }
        let snap = self.snapshot().await?;
        let latest = snap.latest.number;
        let p = pulse.unwrap_or(latest);
        if p > latest {
            return Err(LedgerError::NoPulse(p).into());
        }
        let Some(cells) = snap.state.cells.as_ref() else { return Ok(None) };
        // Bounded before anything is sent: no answer past MAX_ANSWER_BYTES is built whole (a
        // node is at least a byte, a listed log 8).
        let too_large = || {
            FleetError::TooLarge(format!(
                "the cells asked take over {MAX_ANSWER_BYTES} bytes: ask about a smaller box, or fewer cells"
            ))
        };
        let (most_nodes, most_logs) = (MAX_ANSWER_NODES, MAX_ANSWER_BYTES / 8);
        let (proof, lists, root) = if p == latest {
            let (proof, lists) =
                cells.prove_asked_within(asked, most_nodes, most_logs).ok_or_else(too_large)?;
            (proof, lists, snap.latest.cells)
        } else {
            // The map as it stood then: each log's listing Pulse is kept.
            let (mut trie, logs) = cells.as_of(p);
            let (proof, lists) = prove_asked_within(&trie, asked, most_nodes, most_logs, |k| {
                logs.get(&k).cloned().unwrap_or_default()
            })
            .ok_or_else(too_large)?;
            (proof, lists, Some(trie.root()))
        };
        let header = self.header(p).await?;
        if header.header.cells != root {
            return Err(self.damaged(
                &format!("pulse/{}", n20(p)),
                "its header's cells root is not the cells this front-end holds as of it",
            ));
        }
        Ok(Some((header, proof, lists)))
    }

    /// The cells as of `latest` (read at etcd revision `at`): the latest snapshot at or before
    /// it and the cells each entry since names, checked against the header's cells root; from
    /// the genesis when there is no snapshot or it does not check out (a cache, never a reason
    /// to refuse). A refusal only when neither gives the signed root.
    pub(crate) async fn rebuild_cells(&mut self, latest: &PulseHeader, at: i64) -> Result<Cells, FleetError> {
        let want = latest.cells;
        let mut tried = Vec::new();
        let mut starts = Vec::new();
        match self.read_cell_snapshot(at, latest.number).await {
            Ok(Some((s, cells))) => starts.push((s, cells)),
            Ok(None) => {}
            Err(why) => tried.push(format!("the snapshot ({why})")),
        }
        if starts.first().is_none_or(|(s, _)| *s > 0) {
            starts.push((0, Cells::default()));
        }
        for (from, mut cells) in starts {
            match self.cells_since(&mut cells, from, latest.number, at).await {
                Ok(()) if Some(cells.root()) == want => return Ok(cells),
                Ok(()) => tried.push(format!("from Pulse {from}: another root")),
                Err(why) => tried.push(format!("from Pulse {from}: {why}")),
            }
        }
        Err(self.mismatch(
            latest.number,
            &["cellsnap".into(), "pulse/".into()],
            format!(
                "the cells the entries in etcd name do not hash to Pulse {}'s cells root ({})",
                latest.number,
                tried.join("; ")
            ),
        ))
    }

    /// List in `cells` what the commits of Pulses `from + 1 … to` name, the entries read at
    /// revision `at`, a page at a time.
    async fn cells_since(&mut self, cells: &mut Cells, from: u64, to: u64, at: i64) -> Result<(), String> {
        let mut n = from + 1;
        while n <= to {
            let end = (n + REPLAY_PAGE).min(to + 1);
            let options =
                GetOptions::new().with_range(self.key_of(&format!("pulse/{}", n20(end)))).with_revision(at);
            let resp = self
                .get(self.key_of(&format!("pulse/{}", n20(n))), Some(options))
                .await
                .map_err(|e| e.to_string())?;
            let kvs = resp.kvs();
            if kvs.len() as u64 != end - n {
                return Err(format!("entries of Pulses {n} … {} missing (archived?)", end - 1));
            }
            for (m, kv) in (n..end).zip(kvs) {
                let (txs, header) =
                    decode_entry(kv.value()).map_err(|e| format!("Pulse {m}'s entry: {e}"))?;
                if header.number != m {
                    return Err(format!("Pulse {}'s entry where Pulse {m}'s was expected", header.number));
                }
                for tx in txs {
                    if let Tx::CommitMemory { log, cells: keys, .. } = tx.tx {
                        for key in keys {
                            cells.add(key, log.0, m);
                        }
                    }
                }
            }
            n = end;
        }
        Ok(())
    }

    /// The latest snapshot of the cells as etcd holds it at revision `at`, if there is one at
    /// or before Pulse `head`: its Pulse and its cells, loaded (their root not yet checked).
    async fn read_cell_snapshot(&mut self, at: i64, head: u64) -> Result<Option<(u64, Cells)>, String> {
        let options = || Some(GetOptions::new().with_revision(at));
        let resp = self.get(self.key_of("cellsnap"), options()).await.map_err(|e| e.to_string())?;
        let Some(kv) = resp.kvs().first() else { return Ok(None) };
        let SnapshotPointer { pulse: s, count, hash } = SnapshotPointer::parse(kv.value())?;
        if s > head {
            return Ok(None);
        }
        let mut cells = Cells::default();
        self.read_chunks(&CELLS, (s, count, hash), at, |bytes| load_chunk(&mut cells, bytes, s)).await?;
        Ok(Some((s, cells)))
    }

    /// Write a snapshot of the cells as of the held state's Pulse, if it is past the latest
    /// snapshot: its chunks, then `P/cellsnap` naming them, then the chunks of the snapshot it
    /// replaces are deleted. Outside any Pulse, and a cache: a front-end that dies midway
    /// leaves chunks no `P/cellsnap` names, deleted by the next later snapshot. The pointer
    /// only moves forward (a compare-and-swap on its revision). The Pulse written, if any.
    pub async fn write_cell_snapshot(&mut self) -> Result<Option<u64>, FleetError> {
        if !self.cells {
            return Ok(None);
        }
        let snap = self.snapshot().await?;
        let s = snap.latest.number;
        let Some(cells) = snap.state.cells.as_ref() else { return Ok(None) };
        let parts = chunks(cells);
        let pointer = |count, hash| SnapshotPointer { pulse: s, count, hash }.encode();
        self.write_chunks(&CELLS, s, &parts, pointer, |v| SnapshotPointer::parse(v).ok().map(|p| p.pulse))
            .await
    }

    /// The Pulse of the latest snapshot of the cells (`P/cellsnap`), if any: entries after it
    /// must stay in etcd (a front-end holding nothing rebuilds the map from them).
    pub(crate) async fn cell_snapshot_pulse(&mut self) -> Result<Option<u64>, FleetError> {
        let got = self.get(self.key_of("cellsnap"), None).await?;
        Ok(got.kvs().first().and_then(|kv| SnapshotPointer::parse(kv.value()).ok()).map(|p| p.pulse))
    }
}
