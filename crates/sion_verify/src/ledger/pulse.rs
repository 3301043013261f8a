//! Pulses: the ledger's signed headers, state proofs against them, and transaction-time
//! proofs (docs/LEDGER.md, "Pulses").

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use super::types::{LogId, MemoryLog};
use crate::merkle::{Blake3, Digest, TreeHasher as _, verify_inclusion};
use crate::wire::{Put as _, Reader, WireError};

const PULSE_DOMAIN: &[u8] = b"sion-ledger-pulse-v1";

/// One Pulse: its number, when it happened, the Merkle root over every log's head (leaf `i`
/// is log `i`'s encoding, `logs` leaves) and the hash of the header before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PulseHeader {
    pub number: u64,
    pub time_ns: i64,
    pub logs: u64,
    pub state_root: Digest,
    pub prev: Digest,
}

impl PulseHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(89);
        out.put_u8(1);
        out.put_u64(self.number);
        out.put_i64(self.time_ns);
        out.put_u64(self.logs);
        out.put_bytes(&self.state_root);
        out.put_bytes(&self.prev);
        out
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        if r.u8("header version")? != 1 {
            return Err(WireError::Invalid { field: "header version", problem: "unknown".into() });
        }
        Ok(Self {
            number: r.u64("number")?,
            time_ns: r.i64("time")?,
            logs: r.u64("logs")?,
            state_root: r.array("state_root")?,
            prev: r.array("prev")?,
        })
    }

    /// What the next header's `prev` holds.
    pub fn hash(&self) -> Digest {
        *blake3::hash(&self.encode()).as_bytes()
    }
}

/// A header with the ledger's ed25519 signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedHeader {
    pub header: PulseHeader,
    pub signature: [u8; 64],
}

impl SignedHeader {
    pub fn sign(key: &SigningKey, header: PulseHeader) -> Self {
        let msg = [PULSE_DOMAIN, &header.encode()].concat();
        Self { header, signature: key.sign(&msg).to_bytes() }
    }

    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<(), AttestationError> {
        let msg = [PULSE_DOMAIN, &self.header.encode()].concat();
        let sig = ed25519_dalek::Signature::from_bytes(&self.signature);
        ledger_key
            .verify_strict(&msg, &sig)
            .map_err(|_| AttestationError::Signature { pulse: self.header.number })
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_bytes(&self.header.encode());
        out.put_bytes(&self.signature);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self { header: PulseHeader::read(r)?, signature: r.array("signature")? })
    }
}

/// Why an attestation (a signed header, a state or transaction-time proof) does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttestationError {
    #[error("the header of Pulse {pulse} is not signed by this ledger's key")]
    Signature { pulse: u64 },
    #[error("log {log} is not in the state of Pulse {pulse}: {reason}")]
    NotInState { log: LogId, pulse: u64, reason: String },
    #[error("Pulse {after} does not directly follow Pulse {before}")]
    NotConsecutive { before: u64, after: u64 },
    #[error("the two state proofs are about different logs")]
    DifferentLogs,
    #[error("position {position} was already covered before Pulse {pulse} (size {size})")]
    CoveredBefore { position: u64, pulse: u64, size: u64 },
    #[error("position {position} is not covered at Pulse {pulse} (size {size})")]
    NotCovered { position: u64, pulse: u64, size: u64 },
}

/// That, at a Pulse, the ledger's state held this log object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateProof {
    pub header: SignedHeader,
    pub log: MemoryLog,
    /// Inclusion path of the log's leaf in the header's state tree.
    pub path: Vec<Digest>,
}

impl StateProof {
    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<(), AttestationError> {
        self.header.verify(ledger_key)?;
        let h = &self.header.header;
        let leaf = Blake3::hash_leaf(&self.log.encode());
        verify_inclusion::<Blake3, _>(self.log.id.0, h.logs, &leaf, &self.path, &h.state_root).map_err(|e| {
            AttestationError::NotInState { log: self.log.id, pulse: h.number, reason: e.to_string() }
        })
    }

    pub fn put(&self, out: &mut Vec<u8>) {
        self.header.put(out);
        out.put_bytes32(&self.log.encode());
        out.put_u8(self.path.len() as u8);
        for p in &self.path {
            out.put_bytes(p);
        }
    }

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
    pub position: u64,
    pub before: StateProof,
    pub at: StateProof,
}

impl TxTimeProof {
    /// Check both state proofs and their order; returns the Pulse that recorded the position.
    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<PulseHeader, AttestationError> {
        self.before.verify(ledger_key)?;
        self.at.verify(ledger_key)?;
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
