//! Old Pulses out of etcd (docs/FLEET-LEDGER.md, "The archive of old Pulses"): what etcd's
//! compaction cannot drop is the chain itself, about 1.3 KiB a Pulse, so a fleet ledger that
//! lives for months moves its old Pulses — entry, signature, cosignatures — into segment files
//! beside it, keeps in etcd each segment's range, last header hash and file hash, and reads an
//! archived Pulse's header from its segment, checked: the file's hash, the chain inside it, its
//! last header's hash, every signature.

use std::path::{Path, PathBuf};

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use sion_ledger::{LedgerError, PulseHeader, SignedHeader};
use sion_verify::ledger::Cosignature;
use sion_verify::merkle::Digest;
use sion_verify::wire::{Put as _, Reader};

use crate::{FleetError, FleetLedger, n20};

const MAGIC: &[u8; 8] = b"SIONPSG1";

/// Pulses a segment holds at most, unless told otherwise: about 10 MiB.
pub const SEGMENT_PULSES: u64 = 8192;

/// An archived Pulse: its signed header and the cosignatures kept with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedPulse {
    pub header: SignedHeader,
    pub cosignatures: Vec<Cosignature>,
}

/// One segment read and checked: Pulses `from..from + pulses.len()`.
pub(crate) struct Segment {
    from: u64,
    pulses: Vec<ArchivedPulse>,
}

/// What [`FleetLedger::archive_before`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Pulses archived by this call, and the segments written.
    pub pulses: u64,
    pub segments: u64,
    /// Every Pulse before this one is archived now (the mark after the call).
    pub archived_to: u64,
}

/// A segment's file name: `pulses-FROM-TO.seg` (20 digits each, TO exclusive).
pub fn segment_name(from: u64, to: u64) -> String {
    format!("pulses-{}-{}.seg", n20(from), n20(to))
}

impl FleetLedger {
    /// Let this front-end read archived Pulses from (and archive into) `dir`.
    pub fn with_archive(mut self, dir: &Path) -> Self {
        self.archive_dir = Some(dir.to_owned());
        self
    }

    /// How many Pulses are archived (`P/archived`: u64 count, 32 hash of the last archived
    /// header), and the key's raw value for a compare-and-swap.
    pub(crate) async fn archived_mark(&mut self) -> Result<(u64, Digest, Option<Vec<u8>>), FleetError> {
        self.archived_mark_at(None).await
    }

    /// The same, as etcd held it at a revision if given.
    pub(crate) async fn archived_mark_at(
        &mut self,
        at: Option<i64>,
    ) -> Result<(u64, Digest, Option<Vec<u8>>), FleetError> {
        let resp = self.get(self.key_of("archived"), at.map(|r| GetOptions::new().with_revision(r))).await?;
        let Some(kv) = resp.kvs().first() else { return Ok((0, [0; 32], None)) };
        let v = kv.value();
        if v.len() != 40 {
            return Err(self.damaged("archived", format!("{} bytes, not 40", v.len())));
        }
        let mut r = Reader::new(v);
        let count = r.u64("count").map_err(|e| self.damaged("archived", e.to_string()))?;
        let hash = r.array("hash").map_err(|e| self.damaged("archived", e.to_string()))?;
        Ok((count, hash, Some(v.to_vec())))
    }

    /// An archived Pulse, from its segment (read once and kept while it is the one asked).
    pub(crate) async fn archived(&mut self, number: u64) -> Result<ArchivedPulse, FleetError> {
        if let Some(s) = &self.segment
            && number >= s.from
            && number < s.from + s.pulses.len() as u64
        {
            return Ok(s.pulses[(number - s.from) as usize].clone());
        }
        // The first segment whose end is past the number.
        let start = self.key_of(&format!("segment/{}", n20(number + 1)));
        let end = self.key_of("segment0");
        let resp = self.get(start, Some(GetOptions::new().with_range(end).with_limit(1))).await?;
        let Some(kv) = resp.kvs().first() else {
            return Err(LedgerError::NoPulse(number).into());
        };
        let key = kv.key_str().unwrap_or_default().to_owned();
        let to: u64 = key
            .rsplit('/')
            .next()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| self.damaged("segment/", "a key that is not a number"))?;
        let v = kv.value();
        if v.len() != 72 {
            return Err(self.damaged(&format!("segment/{}", n20(to)), "not 72 bytes"));
        }
        let from = u64::from_le_bytes(v[..8].try_into().unwrap_or_default());
        let last: Digest = v[8..40].try_into().unwrap_or_default();
        let file_hash: Digest = v[40..72].try_into().unwrap_or_default();
        if number < from {
            return Err(LedgerError::NoPulse(number).into());
        }
        let Some(dir) = self.archive_dir.clone() else {
            return Err(FleetError::Archive(format!(
                "Pulse {number} is archived (segment {}), and this front-end was given no archive \
                 (sion ledger serve --archive DIR)",
                segment_name(from, to)
            )));
        };
        let path = dir.join(segment_name(from, to));
        let bytes =
            std::fs::read(&path).map_err(|e| FleetError::Archive(format!("{}: {e}", path.display())))?;
        let bad = |problem: String| FleetError::Archive(format!("{}: {problem}", path.display()));
        if *blake3::hash(&bytes).as_bytes() != file_hash {
            return Err(bad("its hash is not the one etcd holds for it: damaged or replaced".into()));
        }
        let segment = self.parse_segment(&bytes, from, to, last).map_err(bad)?;
        let found = segment.pulses[(number - from) as usize].clone();
        self.segment = Some(segment);
        Ok(found)
    }

    fn parse_segment(&self, bytes: &[u8], from: u64, to: u64, last: Digest) -> Result<Segment, String> {
        let mut r = Reader::new(bytes);
        let wire = |e: sion_verify::wire::WireError| e.to_string();
        if r.take(8, "magic").map_err(wire)? != MAGIC {
            return Err("not a segment of Pulses (SIONPSG1)".into());
        }
        let (f, t) = (r.u64("from").map_err(wire)?, r.u64("to").map_err(wire)?);
        if (f, t) != (from, to) || t <= f {
            return Err(format!("holds Pulses {f}..{t}, not {from}..{to}"));
        }
        let key = self.public_key();
        let mut pulses: Vec<ArchivedPulse> = Vec::with_capacity((to - from).min(SEGMENT_PULSES) as usize);
        for number in from..to {
            let entry = r.bytes32(1 << 20, "entry").map_err(wire)?;
            let header = PulseHeader::decode_tail(entry, self.cells)
                .map_err(|e| format!("Pulse {number}: the entry's header: {e}"))?;
            let signature: [u8; 64] = r.array("signature").map_err(wire)?;
            let n = r.u8("cosignatures").map_err(wire)?;
            let cosignatures =
                (0..n).map(|_| Cosignature::read(&mut r)).collect::<Result<Vec<_>, _>>().map_err(wire)?;
            let signed = SignedHeader { header, signature };
            if header.number != number {
                return Err(format!("Pulse {} where Pulse {number} was expected", header.number));
            }
            if let Some(prev) = pulses.last()
                && header.prev != prev.header.header.hash()
            {
                return Err(format!("Pulse {number} does not name the header before it"));
            }
            signed.verify(&key).map_err(|e| format!("Pulse {number}: {e}"))?;
            pulses.push(ArchivedPulse { header: signed, cosignatures });
        }
        r.finish().map_err(wire)?;
        if pulses.last().map(|p| p.header.header.hash()) != Some(last) {
            return Err("its last header is not the one etcd holds the hash of".into());
        }
        Ok(Segment { from, pulses })
    }

    /// Move every Pulse before `before` (at most the latest, which stays) out of etcd into
    /// segment files of at most `per_segment` Pulses in the archive directory: each file
    /// written and made durable first, then one etcd transaction records it (`P/segment/TO`,
    /// `P/archived`) and deletes its Pulses' entries, signatures and cosignatures — if the mark
    /// is still the one read (two front-ends archiving at once: one wins each segment). State
    /// proofs of archived Pulses are rebuilt from version records, which stay.
    pub async fn archive_before(
        &mut self,
        before: u64,
        per_segment: u64,
    ) -> Result<ArchiveReport, FleetError> {
        let Some(dir) = self.archive_dir.clone() else {
            return Err(FleetError::Archive(
                "no archive directory (sion ledger archive --archive DIR)".into(),
            ));
        };
        let latest = self.latest().await?.header.number;
        if before > latest {
            return Err(FleetError::Archive(format!(
                "Pulses before {before} asked, but the latest is {latest}: the latest Pulse stays in etcd"
            )));
        }
        // A front-end holding nothing rebuilds the cells from their latest snapshot and the
        // entries since: a snapshot as of the latest Pulse first, and nothing after the latest
        // snapshot is archived (its pointer only moves forward).
        let mut before = before;
        if !self.keyed {
            // Likewise the state, on format 4.
            self.write_state_snapshot().await?;
            let kept = self.state_snapshot_pulse().await?.unwrap_or(0);
            before = before.min(kept.saturating_add(1));
        } else if self.cells {
            self.write_cell_snapshot().await?;
            let kept = self.cell_snapshot_pulse().await?.unwrap_or(0);
            before = before.min(kept.saturating_add(1));
        }
        let per_segment = per_segment.clamp(1, SEGMENT_PULSES * 16);
        let mut report = ArchiveReport::default();
        loop {
            let (done, done_hash, raw) = self.archived_mark().await?;
            report.archived_to = done;
            if done >= before {
                return Ok(report);
            }
            let to = (done + per_segment).min(before);
            let bytes = self.build_segment(done, to, done_hash).await?;
            let name = segment_name(done, to);
            let path: PathBuf = dir.join(&name);
            sion_disk::Disk::os()
                .replace_file(&path, &bytes)
                .map_err(|e| FleetError::Archive(format!("writing {}: {e}", path.display())))?;
            let last = self.header(to - 1).await?.header.hash();
            let mut mark = Vec::with_capacity(40);
            mark.put_u64(to);
            mark.put_bytes(&last);
            let mut segment = Vec::with_capacity(72);
            segment.put_u64(done);
            segment.put_bytes(&last);
            segment.put_bytes(blake3::hash(&bytes).as_bytes());
            let guard = match &raw {
                None => Compare::version(self.key_of("archived"), CompareOp::Equal, 0),
                Some(v) => Compare::value(self.key_of("archived"), CompareOp::Equal, v.clone()),
            };
            let range = |what: &str| {
                TxnOp::delete(
                    self.key_of(&format!("{what}/{}", n20(done))),
                    Some(DeleteOptions::new().with_range(self.key_of(&format!("{what}/{}", n20(to))))),
                )
            };
            let txn = Txn::new().when(vec![guard]).and_then(vec![
                TxnOp::put(self.key_of("archived"), mark, None),
                TxnOp::put(self.key_of(&format!("segment/{}", n20(to))), segment, None),
                range("pulse"),
                range("sig"),
                range("esig"),
                range("prop"),
                range("cosig"),
            ]);
            let resp = self.client.txn(txn).await.map_err(|e| self.err(e))?;
            if resp.succeeded() {
                report.pulses += to - done;
                report.segments += 1;
            }
            // Lost: another front-end archived this segment; read the mark again.
        }
    }

    /// The segment file of Pulses `from..to` (all at or below the head), read from etcd, each
    /// header with its signature.
    async fn build_segment(&mut self, from: u64, to: u64, prev: Digest) -> Result<Vec<u8>, FleetError> {
        let mut out = Vec::with_capacity(((to - from) * 1400) as usize);
        out.put_bytes(MAGIC);
        out.put_u64(from);
        out.put_u64(to);
        let mut expect_prev = (from > 0).then_some(prev);
        for number in from..to {
            let rest = format!("pulse/{}", n20(number));
            let resp = self.get(self.key_of(&rest), None).await?;
            let kv = resp.kvs().first().ok_or_else(|| self.damaged(&rest, "missing"))?;
            let entry = kv.value().to_vec();
            let signed = self.header(number).await?;
            if let Some(p) = expect_prev
                && signed.header.prev != p
            {
                return Err(self.damaged(&rest, "does not name the header before it"));
            }
            expect_prev = Some(signed.header.hash());
            let cosignatures = self.cosignatures(number).await?;
            out.put_bytes32(&entry);
            out.put_bytes(&signed.signature);
            out.put_u8(cosignatures.len().min(255) as u8);
            for c in cosignatures.iter().take(255) {
                c.put(&mut out);
            }
        }
        Ok(out)
    }
}
