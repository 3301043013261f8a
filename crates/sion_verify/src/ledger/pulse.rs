//! Pulses: the ledger's signed headers, state proofs against them, and transaction-time
//! proofs (docs/LEDGER.md, "Pulses").

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use super::types::{LogId, MemoryLog};
use crate::merkle::{Blake3, Digest, TreeHasher as _, verify_inclusion};
use crate::wire::{Put as _, Reader, WireError};

const PULSE_DOMAIN: &[u8] = b"sion-ledger-pulse-v1";
/// A version 1 header's length.
pub const HEADER_V1: usize = 89;
/// A version 2 header's length (with the cell root).
pub const HEADER_V2: usize = 121;

/// One Pulse: its number, when it happened, the Merkle root over every log's head (leaf `i`
/// is log `i`'s encoding, `logs` leaves) and the hash of the header before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PulseHeader {
    /// Its number; Pulse 0 is the genesis, with no logs.
    pub number: u64,
    /// Wall-clock time, ns since the Unix epoch; strictly increasing.
    pub time_ns: i64,
    /// How many logs exist: the state tree's leaves.
    pub logs: u64,
    /// Root of the RFC 9162 BLAKE3 tree over the logs' encodings.
    pub state_root: Digest,
    /// BLAKE3 of the previous header's encoding; zeros for Pulse 0.
    pub prev: Digest,
    /// The root of the cell trie (docs/LEDGER.md, "Cells"): which logs hold atoms in which
    /// map cell. Present on a ledger made with cells (header version 2), `None` on one made
    /// before them (version 1).
    pub cells: Option<Digest>,
}

impl PulseHeader {
    /// The bytes signed and hashed: u8 version, u64 number, i64 time_ns, u64 logs, state root,
    /// prev, and on version 2 the cell root (89 bytes for version 1, 121 for version 2).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        out.put_u8(if self.cells.is_some() { 2 } else { 1 });
        out.put_u64(self.number);
        out.put_i64(self.time_ns);
        out.put_u64(self.logs);
        out.put_bytes(&self.state_root);
        out.put_bytes(&self.prev);
        if let Some(c) = &self.cells {
            out.put_bytes(c);
        }
        out
    }

    /// The length of [`PulseHeader::encode`]: 89 bytes, or 121 with a cell root.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        if self.cells.is_some() { HEADER_V2 } else { HEADER_V1 }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let version = r.u8("header version")?;
        if version != 1 && version != 2 {
            return Err(WireError::Invalid {
                field: "header version",
                problem: format!("unknown version {version} (1 or 2)"),
            });
        }
        Ok(Self {
            number: r.u64("number")?,
            time_ns: r.i64("time")?,
            logs: r.u64("logs")?,
            state_root: r.array("state_root")?,
            prev: r.array("prev")?,
            cells: if version == 2 { Some(r.array("cells_root")?) } else { None },
        })
    }

    /// Read the header that ends `bytes` (a fleet ledger's entry ends with its header): the
    /// last 121 bytes on a ledger made with cells, else the last 89.
    pub fn decode_tail(bytes: &[u8], cells: bool) -> Result<Self, WireError> {
        let len = if cells { HEADER_V2 } else { HEADER_V1 };
        let at = bytes.len().checked_sub(len).ok_or(WireError::Truncated("header"))?;
        let header = Self::decode(&bytes[at..])?;
        if header.cells.is_some() != cells {
            return Err(WireError::Invalid {
                field: "header version",
                problem: "not this ledger's (with or without cells)".into(),
            });
        }
        Ok(header)
    }

    /// Read exactly the bytes [`PulseHeader::encode`] writes.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let header = Self::read(&mut r)?;
        r.finish()?;
        Ok(header)
    }

    /// What the next header's `prev` holds.
    pub fn hash(&self) -> Digest {
        *blake3::hash(&self.encode()).as_bytes()
    }
}

/// A header with the ledger's ed25519 signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedHeader {
    /// The header.
    pub header: PulseHeader,
    /// ed25519 signature over `"sion-ledger-pulse-v1" || header`.
    pub signature: [u8; 64],
}

impl SignedHeader {
    /// Sign a header with the ledger's key.
    pub fn sign(key: &SigningKey, header: PulseHeader) -> Self {
        let msg = [PULSE_DOMAIN, &header.encode()].concat();
        Self { header, signature: key.sign(&msg).to_bytes() }
    }

    /// Check the signature under `ledger_key` (strict ed25519 verification).
    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<(), AttestationError> {
        let msg = [PULSE_DOMAIN, &self.header.encode()].concat();
        let sig = ed25519_dalek::Signature::from_bytes(&self.signature);
        ledger_key
            .verify_strict(&msg, &sig)
            .map_err(|_| AttestationError::Signature { pulse: self.header.number })
    }

    /// Append the header's encoding, then the 64-byte signature.
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_bytes(&self.header.encode());
        out.put_bytes(&self.signature);
    }

    /// Read a signed header as [`SignedHeader::put`] writes it (header version 1 or 2).
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self { header: PulseHeader::read(r)?, signature: r.array("signature")? })
    }
}

/// Why an attestation (a signed header, a state or transaction-time proof) does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttestationError {
    /// A header's signature does not hold under the ledger key.
    #[error("the header of Pulse {pulse} is not signed by this ledger's key")]
    Signature {
        /// The header's Pulse number.
        pulse: u64,
    },
    /// A witness's cosignature carried with the header does not hold.
    #[error("the cosignature of Pulse {number} by witness {witness} does not hold")]
    Cosignature {
        /// The witness key, hex.
        witness: String,
        /// The header's Pulse number.
        number: u64,
    },
    /// The C2SP checkpoint said to cover the attested Pulse does not: not signed by the
    /// ledger's key as its origin, too small, the Pulse's header not its leaf, or a named
    /// witness's cosignature on it failing (docs/PROOFS.md, "Covered by a checkpoint").
    #[error("the checkpoint said to cover Pulse {pulse}: {reason}")]
    Checkpoint {
        /// The attested Pulse.
        pulse: u64,
        /// What does not hold.
        reason: String,
    },
    /// A state proof's path does not lead from the log's leaf to the header's state root.
    #[error("log {log} is not in the state of Pulse {pulse}: {reason}")]
    NotInState {
        /// The log the state proof is about.
        log: LogId,
        /// The Pulse whose state it was checked against.
        pulse: u64,
        /// Why the inclusion proof failed.
        reason: String,
    },
    /// A transaction-time proof's Pulses are not consecutive: numbers `P − 1` and `P`, with
    /// `P.prev` the hash of `P − 1`.
    #[error("Pulse {after} does not directly follow Pulse {before}")]
    NotConsecutive {
        /// The earlier Pulse's number.
        before: u64,
        /// The later Pulse's number.
        after: u64,
    },
    /// A transaction-time proof's two state proofs differ in log id or writer.
    #[error("the two state proofs are about different logs")]
    DifferentLogs,
    /// The log already held the position at the earlier Pulse, so it was not recorded at the
    /// later one.
    #[error("position {position} was already covered before Pulse {pulse} (size {size})")]
    CoveredBefore {
        /// The position asked about.
        position: u64,
        /// The later Pulse's number.
        pulse: u64,
        /// The log's size at the earlier Pulse.
        size: u64,
    },
    /// The log does not hold the position yet at the later Pulse.
    #[error("position {position} is not covered at Pulse {pulse} (size {size})")]
    NotCovered {
        /// The position asked about.
        position: u64,
        /// The later Pulse's number.
        pulse: u64,
        /// The log's size at that Pulse.
        size: u64,
    },
}

/// That, at a Pulse, the ledger's state held this log object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateProof {
    /// The Pulse's signed header.
    pub header: SignedHeader,
    /// The log as that Pulse's state holds it.
    pub log: MemoryLog,
    /// Inclusion path of the log's leaf in the header's state tree.
    pub path: Vec<Digest>,
}

impl StateProof {
    /// Check the header's signature under `ledger_key` and the log's leaf
    /// (`BLAKE3(0x00 || encoding)`, index `log.id`) against the header's state root.
    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<(), AttestationError> {
        self.header.verify(ledger_key)?;
        let h = &self.header.header;
        let leaf = Blake3::hash_leaf(&self.log.encode());
        verify_inclusion::<Blake3, _>(self.log.id.0, h.logs, &leaf, &self.path, &h.state_root).map_err(|e| {
            AttestationError::NotInState { log: self.log.id, pulse: h.number, reason: e.to_string() }
        })
    }

    /// Append the signed header, the log's encoding (u32 length first) and the path (u8 count,
    /// then 32 bytes each).
    pub fn put(&self, out: &mut Vec<u8>) {
        self.header.put(out);
        out.put_bytes32(&self.log.encode());
        out.put_u8(self.path.len() as u8);
        for p in &self.path {
            out.put_bytes(p);
        }
    }

    /// Read a state proof as [`StateProof::put`] writes it; a log encoding over 4096 bytes is
    /// refused.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let header = SignedHeader::read(r)?;
        let log = MemoryLog::decode(r.bytes32(4096, "log")?)?;
        let n = r.u8("path")?;
        let path = (0..n).map(|_| r.array("path")).collect::<Result<_, _>>()?;
        Ok(Self { header, log, path })
    }
}

/// When an atom was recorded: before Pulse P its log did not cover the position, at P it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxTimeProof {
    /// The log position whose recording is proved.
    pub position: u64,
    /// The log at Pulse P − 1, not covering `position`.
    pub before: StateProof,
    /// The log at Pulse P, covering it.
    pub at: StateProof,
}

impl TxTimeProof {
    /// Check both state proofs and their order; returns the Pulse that recorded the position.
    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<PulseHeader, AttestationError> {
        self.verify_with(ledger_key, &mut |state, key| state.verify(key))
    }

    /// [`TxTimeProof::verify`], with each state proof checked by `holds` (which may remember
    /// the ones it has checked already; see `ProofFile::verify_sharing`).
    pub fn verify_with(
        &self,
        ledger_key: &VerifyingKey,
        holds: &mut dyn FnMut(&StateProof, &VerifyingKey) -> Result<(), AttestationError>,
    ) -> Result<PulseHeader, AttestationError> {
        holds(&self.before, ledger_key)?;
        holds(&self.at, ledger_key)?;
        let (b, a) = (&self.before.header.header, &self.at.header.header);
        if a.number != b.number + 1 || a.prev != b.hash() {
            return Err(AttestationError::NotConsecutive { before: b.number, after: a.number });
        }
        if self.before.log.id != self.at.log.id || self.before.log.writer != self.at.log.writer {
            return Err(AttestationError::DifferentLogs);
        }
        let position = self.position;
        let size_before = self.before.log.head.size;
        if position < size_before {
            return Err(AttestationError::CoveredBefore { position, pulse: a.number, size: size_before });
        }
        let size_at = self.at.log.head.size;
        if position >= size_at {
            return Err(AttestationError::NotCovered { position, pulse: a.number, size: size_at });
        }
        Ok(*a)
    }
}
