//! Proof files: what a writer hands a reader, checked from the head they name alone
//! (docs/PROOFS.md). Building them needs the writer's log and index; verifying needs nothing
//! but the file and, to trust the head, the ledger's public key.

mod list;
mod range;

use ed25519_dalek::VerifyingKey;

pub use list::{ListKey, ListProof};
pub use range::{RangeProof, Reached, Tree, Walked};

use crate::atom::{Atom, AtomId};
use crate::index::geom::Query;
use crate::ledger::{AttestationError, Head, LogId, StateProof};
use crate::log::LogHasher;
use crate::merkle::{Digest, ProofError, verify_consistency, verify_inclusion};
use crate::wire::{Put as _, Reader, WireError};

/// Version 2 codes a range walk's boxes against the interior node above them (docs/PROOFS.md).
const MAGIC: &[u8; 8] = b"SIONPRF2";
const MAX_FILE_BYTES: usize = 64 << 20;

/// The ledger's word for a head: its public key and a state proof at the Pulse that
/// committed the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestation {
    pub ledger_key: [u8; 32],
    pub state: StateProof,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The atom is at `position` of the log whose head is `head`.
    Inclusion { log: LogId, head: Head, position: u64, atom: Vec<u8>, path: Vec<Digest> },
    /// The log of `old_size` atoms with root `old_root` is a prefix of the log at `head`.
    Consistency { log: LogId, head: Head, old_size: u64, old_root: Digest, path: Vec<Digest> },
    /// Everything in a box and interval, as of `head`.
    Range { log: LogId, head: Head, range: Box<RangeProof> },
    /// Every atom about a subject, or linking to an atom, as of `head`.
    List { log: LogId, head: Head, list: Box<ListProof> },
    /// The atom at `position` is in the log, and the committed index's complete answer for the
    /// atom's own frame, box and interval leaves it out: the writer's index omits it.
    Omission {
        log: LogId,
        head: Head,
        position: u64,
        atom: Vec<u8>,
        path: Vec<Digest>,
        range: Box<RangeProof>,
    },
}

/// A proof and, usually, the ledger's attestation of the head it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofFile {
    pub proof: Proof,
    pub attestation: Option<Attestation>,
}

/// Why a proof file does not prove what it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("not a proof file: {0}")]
    Format(#[from] WireError),
    #[error("the atom in the proof is not valid: {0}")]
    Atom(String),
    #[error("the Merkle proof fails: {0}")]
    Merkle(#[from] ProofError),
    #[error("the head is not attested by the ledger: {0}")]
    Attestation(#[from] AttestationError),
    #[error(
        "the ledger's state proof is about log {attested} at size {attested_size}, the proof about log {claimed} at size {claimed_size}"
    )]
    HeadMismatch { attested: LogId, attested_size: u64, claimed: LogId, claimed_size: u64 },
    #[error("the proof is attested by ledger key {found}, not the expected {expected}")]
    WrongLedger { found: String, expected: String },
    #[error("the ledger key in the file is not a valid ed25519 key")]
    BadLedgerKey,
    #[error("the proof carries no ledger attestation, and one was required")]
    Unattested,
    #[error("the range proof fails: {0}")]
    Range(String),
    #[error("the subject or link proof fails: {0}")]
    List(String),
    #[error("the proof does not lead to the head's index root")]
    IndexRoot,
    #[error("no omission: the committed index answers position {0} for the atom's own box and interval")]
    NotOmitted(u64),
}

/// What a proof file was found to prove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub log: LogId,
    pub head: Head,
    /// The Pulse that committed the head and the ledger key that signed it, when attested.
    pub pulse: Option<(u64, i64, [u8; 32])>,
    pub claim: Claim,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    Included {
        position: u64,
        atom: Box<Atom>,
    },
    Extends {
        old_size: u64,
        old_root: Digest,
    },
    /// The complete answer to a range query (possibly empty).
    Range {
        query: Query,
        atoms: Vec<(u64, Atom)>,
    },
    /// Every atom about a subject, or linking to an atom.
    List {
        key: ListKey,
        atoms: Vec<(u64, Atom)>,
    },
    /// The committed index leaves out this atom of the log.
    Omitted {
        position: u64,
        atom: Box<Atom>,
    },
}

impl Proof {
    /// The kind of proof, as `sion memory verify` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Proof::Inclusion { .. } => "inclusion",
            Proof::Consistency { .. } => "consistency",
            Proof::Range { .. } => "range",
            Proof::List { .. } => "list",
            Proof::Omission { .. } => "omission",
        }
    }
}

impl Claim {
    /// The kind of proof that makes this claim, as `sion memory verify` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Claim::Included { .. } => "inclusion",
            Claim::Extends { .. } => "consistency",
            Claim::Range { .. } => "range",
            Claim::List { .. } => "list",
            Claim::Omitted { .. } => "omission",
        }
    }
}

impl Verified {
    /// What the proof proves, in one sentence.
    pub fn statement(&self) -> String {
        let log = self.log;
        match &self.claim {
            Claim::Included { position, atom } => {
                let p = atom.parts();
                format!(
                    "atom {} ({} {:?} in {}) is at position {position} of log {log}",
                    atom.id(),
                    p.kind,
                    p.subject,
                    p.frame
                )
            }
            Claim::Extends { old_size, old_root } => format!(
                "log {log} of {old_size} atoms (root {}) is a prefix of its committed head",
                hex::encode(&old_root[..8])
            ),
            Claim::Range { query, atoms } => format!(
                "these {} atoms are everything log {log} holds in frame {:?}, box {:?}..={:?} mm, [{}, {}) ns",
                atoms.len(),
                query.frame,
                query.bounds.min_mm,
                query.bounds.max_mm,
                query.from_ns,
                query.to_ns
            ),
            Claim::List { key: ListKey::Subject(s), atoms } => {
                format!("these {} atoms are every atom of log {log} about {s:?}", atoms.len())
            }
            Claim::List { key: ListKey::LinksTo(id), atoms } => {
                format!("these {} atoms are every atom of log {log} linking to {id}", atoms.len())
            }
            Claim::Omitted { position, atom } => format!(
                "the writer's committed index leaves out atom {} at position {position} of log {log}, though the log holds it",
                atom.id()
            ),
        }
    }
}

impl ProofFile {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        out.put_bytes(MAGIC);
        match &self.attestation {
            None => out.put_u8(0),
            Some(a) => {
                out.put_u8(1);
                out.put_bytes(&a.ledger_key);
                a.state.put(&mut out);
            }
        }
        match &self.proof {
            Proof::Inclusion { log, head, position, atom, path } => {
                out.put_u8(1);
                out.put_u64(log.0);
                head.put(&mut out);
                out.put_u64(*position);
                out.put_bytes32(atom);
                put_path(&mut out, path);
            }
            Proof::Consistency { log, head, old_size, old_root, path } => {
                out.put_u8(2);
                out.put_u64(log.0);
                head.put(&mut out);
                out.put_u64(*old_size);
                out.put_bytes(old_root);
                put_path(&mut out, path);
            }
            Proof::Range { log, head, range } => {
                out.put_u8(3);
                out.put_u64(log.0);
                head.put(&mut out);
                range.put(&mut out);
            }
            Proof::List { log, head, list } => {
                out.put_u8(4);
                out.put_u64(log.0);
                head.put(&mut out);
                list.put(&mut out);
            }
            Proof::Omission { log, head, position, atom, path, range } => {
                out.put_u8(5);
                out.put_u64(log.0);
                head.put(&mut out);
                out.put_u64(*position);
                out.put_bytes32(atom);
                put_path(&mut out, path);
                range.put(&mut out);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() > MAX_FILE_BYTES {
            return Err(WireError::Invalid {
                field: "file",
                problem: format!("{} bytes is too large", bytes.len()),
            });
        }
        let mut r = Reader::new(bytes);
        match r.take(8, "magic")? {
            m if m == MAGIC => {}
            b"SIONPRF1" => {
                return Err(WireError::Invalid {
                    field: "magic",
                    problem: "a proof file of the first format (SIONPRF1), which this version no longer \
                              reads: prove again"
                        .into(),
                });
            }
            _ => {
                return Err(WireError::Invalid {
                    field: "magic",
                    problem: "not a proof file (SIONPRF2)".into(),
                });
            }
        }
        let attestation = if r.flag("attestation")? {
            Some(Attestation { ledger_key: r.array("ledger key")?, state: StateProof::read(&mut r)? })
        } else {
            None
        };
        let proof = match r.u8("proof kind")? {
            1 => Proof::Inclusion {
                log: LogId(r.u64("log")?),
                head: Head::read(&mut r)?,
                position: r.u64("position")?,
                atom: r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
                path: read_path(&mut r)?,
            },
            2 => Proof::Consistency {
                log: LogId(r.u64("log")?),
                head: Head::read(&mut r)?,
                old_size: r.u64("old size")?,
                old_root: r.array("old root")?,
                path: read_path(&mut r)?,
            },
            3 => Proof::Range {
                log: LogId(r.u64("log")?),
                head: Head::read(&mut r)?,
                range: Box::new(RangeProof::read(&mut r)?),
            },
            4 => Proof::List {
                log: LogId(r.u64("log")?),
                head: Head::read(&mut r)?,
                list: Box::new(ListProof::read(&mut r)?),
            },
            5 => Proof::Omission {
                log: LogId(r.u64("log")?),
                head: Head::read(&mut r)?,
                position: r.u64("position")?,
                atom: r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
                path: read_path(&mut r)?,
                range: Box::new(RangeProof::read(&mut r)?),
            },
            k => {
                return Err(WireError::Invalid { field: "proof kind", problem: format!("unknown kind {k}") });
            }
        };
        r.finish()?;
        Ok(Self { proof, attestation })
    }

    /// Check the proof against the head it names and, if attested, the head against the
    /// ledger. `expected_ledger`, when given, is the only ledger key accepted, and an
    /// attestation is then required.
    pub fn verify(&self, expected_ledger: Option<&VerifyingKey>) -> Result<Verified, VerifyError> {
        let (log, head) = match &self.proof {
            Proof::Inclusion { log, head, .. }
            | Proof::Consistency { log, head, .. }
            | Proof::Range { log, head, .. }
            | Proof::List { log, head, .. }
            | Proof::Omission { log, head, .. } => (*log, *head),
        };
        let pulse = match (&self.attestation, expected_ledger) {
            (None, Some(_)) => return Err(VerifyError::Unattested),
            (None, None) => None,
            (Some(a), expected) => {
                if let Some(expected) = expected
                    && expected.to_bytes() != a.ledger_key
                {
                    return Err(VerifyError::WrongLedger {
                        found: hex::encode(a.ledger_key),
                        expected: hex::encode(expected.to_bytes()),
                    });
                }
                let key = VerifyingKey::from_bytes(&a.ledger_key).map_err(|_| VerifyError::BadLedgerKey)?;
                a.state.verify(&key)?;
                if a.state.log.id != log || a.state.log.head != head {
                    return Err(VerifyError::HeadMismatch {
                        attested: a.state.log.id,
                        attested_size: a.state.log.head.size,
                        claimed: log,
                        claimed_size: head.size,
                    });
                }
                let h = &a.state.header.header;
                Some((h.number, h.time_ns, a.ledger_key))
            }
        };
        let claim = match &self.proof {
            Proof::Inclusion { position, atom, path, .. } => {
                let atom = Atom::decode(atom).map_err(|e| VerifyError::Atom(e.to_string()))?;
                let leaf = crate::log::leaf_hash(&atom);
                verify_inclusion::<LogHasher, _>(*position, head.size, &leaf, path, &head.root)?;
                Claim::Included { position: *position, atom: Box::new(atom) }
            }
            Proof::Consistency { old_size, old_root, path, .. } => {
                verify_consistency::<LogHasher, _>(*old_size, head.size, old_root, &head.root, path)?;
                Claim::Extends { old_size: *old_size, old_root: *old_root }
            }
            Proof::Range { range, .. } => {
                let atoms = range.verify(&head.index, head.size)?;
                Claim::Range { query: range.query.clone(), atoms }
            }
            Proof::List { list, .. } => {
                let atoms = list.verify(&head.index, head.size)?;
                Claim::List { key: list.key.clone(), atoms }
            }
            Proof::Omission { position, atom, path, range, .. } => {
                let atom = Atom::decode(atom).map_err(|e| VerifyError::Atom(e.to_string()))?;
                let leaf = crate::log::leaf_hash(&atom);
                verify_inclusion::<LogHasher, _>(*position, head.size, &leaf, path, &head.root)?;
                if !range.query.matches(atom.parts()) {
                    return Err(VerifyError::Range(
                        "the atom does not answer the range query it is tested by".into(),
                    ));
                }
                let answer = range.verify(&head.index, head.size)?;
                if answer.iter().any(|(p, a)| *p == *position && a.id() == atom.id()) {
                    return Err(VerifyError::NotOmitted(*position));
                }
                Claim::Omitted { position: *position, atom: Box::new(atom) }
            }
        };
        Ok(Verified { log, head, pulse, claim })
    }
}

fn put_path(out: &mut Vec<u8>, path: &[Digest]) {
    out.put_u8(path.len() as u8);
    for d in path {
        out.put_bytes(d);
    }
}

fn read_path(r: &mut Reader<'_>) -> Result<Vec<Digest>, WireError> {
    let n = r.u8("path")?;
    (0..n).map(|_| r.array("path")).collect()
}

impl Verified {
    /// The id of the atom proved included, if that is the claim.
    pub fn atom_id(&self) -> Option<AtomId> {
        match &self.claim {
            Claim::Included { atom, .. } => Some(atom.id()),
            Claim::Omitted { atom, .. } => Some(atom.id()),
            _ => None,
        }
    }
}
