//! Proof files: what a writer hands a reader, checked from the head they name alone
//! (docs/PROOFS.md). Building them needs the writer's log and index; verifying needs nothing
//! but the file and, to trust the head, the ledger's public key.

mod count;
pub mod fleet;
mod list;
mod parallel;
mod range;
mod rank;

use ed25519_dalek::VerifyingKey;

pub use count::{CountProof, Counted, count_of, inside};
pub use list::{ListKey, ListProof};
pub use range::{PARALLEL_ATOMS, RangeProof, Reached, Tree, Walked};
pub use rank::{LatestProof, MAX_NEAREST, MAX_POINT_MM, NearQuery, Nearest, NearestProof, distance2};

use crate::atom::{Atom, AtomId};
use crate::index::Version;
use crate::index::geom::Query;
use crate::leaf::{LogHasher, leaf_hash};
use crate::ledger::{
    AttestationError, Checkpoint, Cosignature, Cosigned, Head, LogId, MAX_NOTE_BYTES, PulseHeader,
    SignedNote, StateProof, TxTimeProof, Witnesses,
};
use crate::merkle::{Digest, ProofError, verify_consistency, verify_inclusion};
use crate::wire::{Put as _, Reader, WireError};

/// Index version 4: a range question may name a subject, and the frames root is hashed with
/// the places map's (docs/PROOFS.md, "Versions").
const MAGIC: &[u8; 8] = b"SIONPRF4";
/// The magic of files made under index version 3 (no subjects' places), still read.
const MAGIC_V3: &[u8; 8] = b"SIONPRF3";
/// The magic of files made under index version 2 (their walks have no tallies), still read.
const MAGIC_V2: &[u8; 8] = b"SIONPRF2";
/// The largest proof file a verifier reads (docs/PROOFS.md): a prover makes none larger.
pub const MAX_FILE_BYTES: usize = 64 << 20;

/// The ledger's word for a head: its public key and a state proof at the Pulse that
/// committed the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestation {
    /// The ed25519 public key the file says signed the header (trusting it is trusting the
    /// writer: a reader names its own, see [`verify`]).
    pub ledger_key: [u8; 32],
    /// The log's state at the Pulse that committed the head.
    pub state: StateProof,
    /// Witnesses' cosignatures of that Pulse's header, in ascending order of witness key, each
    /// witness once (docs/PROOFS.md, "Cosignatures"); empty in a file with `attested = 1`.
    pub cosignatures: Vec<Cosignature>,
    /// A C2SP checkpoint of the ledger's history that covers that Pulse, with the witnesses'
    /// `cosignature/v1` lines it was kept with (`attested` 3 or 4).
    pub checkpoint: Option<Covering>,
}

/// The most nodes a checkpoint's inclusion path may have (a history of up to 2^64 Pulses).
const MAX_HISTORY_PATH: usize = 64;

/// A C2SP checkpoint (a signed note whose body is a tlog-checkpoint of the ledger's history of
/// Pulse headers, docs/FLEET-LEDGER.md "Checkpoints") that covers the attested Pulse, and the
/// header's RFC 6962 inclusion proof in it (docs/PROOFS.md, "Covered by a checkpoint").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covering {
    /// The note as the ledger kept it: the checkpoint, the ledger's signature line and the
    /// witnesses' `cosignature/v1` lines.
    pub note: SignedNote,
    /// The inclusion proof (SHA-256) of the Pulse's header, leaf `number` of the checkpoint's
    /// history.
    pub path: Vec<Digest>,
}

impl Covering {
    /// Check that the ledger key signed the note as its checkpoint and that `header` is leaf
    /// `header.number` of it; the checkpoint.
    pub fn verify(
        &self,
        ledger_key: &VerifyingKey,
        header: &PulseHeader,
    ) -> Result<Checkpoint, AttestationError> {
        let fail = |reason: String| AttestationError::Checkpoint { pulse: header.number, reason };
        let checkpoint = self.note.verify_checkpoint(ledger_key).map_err(|e| fail(e.to_string()))?;
        if self.path.len() > MAX_HISTORY_PATH {
            return Err(fail(format!("a path of {} nodes, over {MAX_HISTORY_PATH}", self.path.len())));
        }
        checkpoint.includes(header, &self.path).map_err(|e| fail(e.to_string()))?;
        Ok(checkpoint)
    }
}

/// At most this many cosignatures in one file (the count is one byte).
pub const MAX_COSIGNATURES: usize = 255;

impl Attestation {
    /// Its bytes as an envelope's attestation part (from `attested` through the cosignatures),
    /// as [`ProofFile::decode_attestation`] reads them.
    pub fn encode_part(&self) -> Vec<u8> {
        let file = ProofFile {
            attestation: Some(self.clone()),
            proof: Proof::Inclusion {
                log: self.state.log.id,
                head: self.state.log.head,
                position: 0,
                atom: Vec::new(),
                path: Vec::new(),
            },
        };
        let mut out = Vec::with_capacity(512);
        file.put_attestation(&mut out);
        out
    }

    /// Check it alone, as a proof file's attestation is checked: signed by `ledger_key` (the
    /// reader's), the log's leaf in the header's state tree, every cosignature holding.
    pub fn verify(&self, ledger_key: &VerifyingKey) -> Result<(), VerifyError> {
        if ledger_key.to_bytes() != self.ledger_key {
            return Err(VerifyError::WrongLedger {
                found: hex::encode(self.ledger_key),
                expected: hex::encode(ledger_key.to_bytes()),
            });
        }
        self.state.verify(ledger_key)?;
        let h = &self.state.header.header;
        if let Some(c) = self.cosignatures.iter().find(|c| !c.holds(&self.ledger_key, h)) {
            return Err(VerifyError::Attestation(AttestationError::Cosignature {
                witness: hex::encode(c.witness),
                number: h.number,
            }));
        }
        if let Some(c) = &self.checkpoint {
            c.verify(ledger_key, h)?;
        }
        Ok(())
    }
}

/// What a proof file claims and its evidence, one variant per kind (docs/PROOFS.md, kinds 1 to
/// 8), each naming the log and the head it is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The atom is at `position` of the log whose head is `head`.
    Inclusion {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The atom's position.
        position: u64,
        /// The atom's canonical encoding.
        atom: Vec<u8>,
        /// RFC 9162 inclusion path of the atom's leaf, from the leaf up.
        path: Vec<Digest>,
    },
    /// The log of `old_size` atoms with root `old_root` is a prefix of the log at `head`.
    Consistency {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The earlier size; 0 is refused.
        old_size: u64,
        /// The earlier root.
        old_root: Digest,
        /// RFC 9162 consistency proof, in the RFC's order.
        path: Vec<Digest>,
    },
    /// Everything in a box and interval, as of `head`.
    Range {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The query, its answer and the walk that shows it complete.
        range: Box<RangeProof>,
    },
    /// Every atom about a subject, or linking to an atom, as of `head`.
    List {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The subject or target, its answer and the map path that shows it complete.
        list: Box<ListProof>,
    },
    /// The atom at `position` is in the log, and the committed index's complete answer for the
    /// atom's own frame, box and interval leaves it out: the writer's index omits it.
    Omission {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The atom's position.
        position: u64,
        /// The atom's canonical encoding.
        atom: Vec<u8>,
        /// RFC 9162 inclusion path of the atom's leaf, from the leaf up.
        path: Vec<Digest>,
        /// A range proof for a query the atom answers, whose answer lacks it.
        range: Box<RangeProof>,
    },
    /// When the atom at `position` was recorded: the head (attested at Pulse P) holds it, and
    /// the log's state at Pulse P − 1 did not cover its position. Always attested.
    Recorded {
        /// The log.
        log: LogId,
        /// The head committed at Pulse P, the first that covers the position.
        head: Head,
        /// The atom's position.
        position: u64,
        /// The atom's canonical encoding.
        atom: Vec<u8>,
        /// RFC 9162 inclusion path of the atom's leaf, from the leaf up.
        path: Vec<Digest>,
        /// The log's state at Pulse P − 1.
        before: Box<StateProof>,
    },
    /// The atom last seen in a box during an interval (or that none was), as of `head`.
    Latest {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The question, its answer and the walk that shows nothing later answers.
        latest: Box<LatestProof>,
    },
    /// The k atoms nearest to a point during an interval, as of `head`.
    Nearest {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The question, its answer and the walk that shows nothing nearer exists.
        nearest: Box<NearestProof>,
    },
    /// How many atoms answer a range question, for how long in all, first and last when, as
    /// of `head`.
    Count {
        /// The log.
        log: LogId,
        /// The head proved against.
        head: Head,
        /// The question, its answer and the walk it is read from.
        count: Box<CountProof>,
    },
    /// The atom at `position` lies in map cell `cell`, and the attested Pulse's cell map does
    /// not list the log there: its writer broke the ledger's cells rule (docs/LEDGER.md,
    /// "Cells"). Always attested, by a version 2 header.
    CellOmission {
        /// The log.
        log: LogId,
        /// The head attested at the Pulse.
        head: Head,
        /// The atom's position.
        position: u64,
        /// The atom's canonical encoding.
        atom: Vec<u8>,
        /// RFC 9162 inclusion path of the atom's leaf, from the leaf up.
        path: Vec<Digest>,
        /// One of the atom's cells.
        cell: u128,
        /// Where the cell's path ends in the cell trie.
        end: CellEnd,
        /// The cell proof's siblings, root first (at most 128).
        siblings: Vec<Digest>,
    },
}

/// Where a cell omission proof's path ends in the header's cell trie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellEnd {
    /// An empty subtree: no log is listed in the cell.
    Empty,
    /// Another cell's leaf (its key and digest): no log is listed in the cell.
    Other(u128, Digest),
    /// The cell's own leaf: the logs it lists, ascending.
    Listed(Vec<u64>),
}

/// A proof and, usually, the ledger's attestation of the head it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofFile {
    /// What the file proves.
    pub proof: Proof,
    /// The ledger's attestation of the head; `None` in an unattested file.
    pub attestation: Option<Attestation>,
}

/// Why a proof file does not prove what it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// `format`: the bytes are not a well-formed proof file.
    #[error("not a proof file: {0}")]
    Format(#[from] WireError),
    /// `atom`: an atom in the file is not a valid atom's canonical encoding (why).
    #[error("the atom in the proof is not valid: {0}")]
    Atom(String),
    /// `merkle`: an inclusion or consistency path does not lead to the head's root (a
    /// consistency proof from size 0 included).
    #[error("the Merkle proof fails: {0}")]
    Merkle(#[from] ProofError),
    /// `attestation`: the Pulse header's signature fails, or the state proof does not lead to
    /// its state root.
    #[error("the head is not attested by the ledger: {0}")]
    Attestation(#[from] AttestationError),
    /// `head_mismatch`: the state proof attests another log or head than the proof names.
    #[error(
        "the ledger's state proof is about log {attested} at size {attested_size}, the proof about log {claimed} at size {claimed_size}"
    )]
    HeadMismatch {
        /// The log the state proof attests.
        attested: LogId,
        /// The size of its attested head.
        attested_size: u64,
        /// The log the proof names.
        claimed: LogId,
        /// The size of the head it names.
        claimed_size: u64,
    },
    /// `wrong_ledger`: the attestation is by another key than the reader's.
    #[error("the proof is attested by ledger key {found}, not the expected {expected}")]
    WrongLedger {
        /// The key in the file, hex.
        found: String,
        /// The reader's key, hex.
        expected: String,
    },
    /// `bad_ledger_key`: the key in the file is not an ed25519 public key.
    #[error("the ledger key in the file is not a valid ed25519 key")]
    BadLedgerKey,
    /// `unattested`: the file has no attestation, and the reader named a ledger key.
    #[error("the proof carries no ledger attestation, and one was required")]
    Unattested,
    /// `range`: a range proof fails a step of docs/PROOFS.md, "Range proof" (which), or an
    /// omission's atom does not answer the range query it is tested by.
    #[error("the range proof fails: {0}")]
    Range(String),
    /// `list`: a subject or link proof fails a step of docs/PROOFS.md, "Subject and link
    /// proofs" (which).
    #[error("the subject or link proof fails: {0}")]
    List(String),
    /// `index_root`: the proof recomputes to another index root than the head's.
    #[error("the proof does not lead to the head's index root")]
    IndexRoot,
    /// `cells`: a cell omission proof's cell is not one of its atom's cells, or its cell proof
    /// does not lead to the header's cells root.
    #[error("the cell proof fails: {0}")]
    Cells(String),
    /// `not_omitted`: an omission proof's range answer holds the atom at this position.
    #[error("no omission: the committed index answers position {0} for the atom's own box and interval")]
    NotOmitted(u64),
    /// `other_question`: the proof is valid, but answers another question than the reader's.
    #[error("the proof answers another question: {answered}, not the one asked: {asked}")]
    OtherQuestion {
        /// The reader's question, as [`Question`] displays it.
        asked: String,
        /// The proof's, likewise.
        answered: String,
    },
    /// `other_log`: the proof is about another log than the reader's.
    #[error("the proof is about log {found}, not the expected log {expected}")]
    OtherLog {
        /// The proof's log.
        found: LogId,
        /// The reader's.
        expected: LogId,
    },
    /// `stale_head`: the head holds fewer atoms than the reader's `at_least`.
    #[error("the proof is as of a head of {size} atoms, older than the {at_least} atoms expected")]
    StaleHead {
        /// The size of the proof's head.
        size: u64,
        /// The least size the reader accepts.
        at_least: u64,
    },
    /// `recorded_elsewhere`: a transaction-time proof whose Pulse is not the one that recorded
    /// the position (the log covered it at the Pulse before, or does not cover it at this one).
    #[error("not recorded at this Pulse: {0}")]
    RecordedElsewhere(String),
    /// `witnesses`: fewer of the reader's witnesses cosigned the attested Pulse than its quorum.
    #[error("{found} of the {named} witnesses you named cosigned Pulse {pulse}; your quorum is {quorum}")]
    Witnesses {
        /// The attested Pulse's number (0 when the file is unattested).
        pulse: u64,
        /// How many of the reader's witnesses cosigned it.
        found: usize,
        /// How many the reader named.
        named: usize,
        /// How many the reader requires.
        quorum: usize,
    },
    /// `witnesses`: fewer of the reader's C2SP witnesses cosigned the checkpoint covering the
    /// attested Pulse than its quorum (none when the file carries no checkpoint).
    #[error("{found} of the {named} C2SP witnesses you named cosigned {covering}; your quorum is {quorum}")]
    Cosigners {
        /// What was looked at: the checkpoint and the Pulse it covers, or that there is none.
        covering: String,
        /// How many of the reader's witnesses cosigned it.
        found: usize,
        /// How many the reader named.
        named: usize,
        /// How many the reader requires.
        quorum: usize,
    },
    /// `other_head`: the head is not the exact one the reader holds.
    #[error("the proof is as of another head than the expected one ({size} atoms, root {root})")]
    OtherHead {
        /// The size of the proof's head.
        size: u64,
        /// The first 8 bytes of its root, hex.
        root: String,
    },
}

impl VerifyError {
    /// A stable name for the kind of refusal (docs/PROOFS.md, "Refusals"; the conformance
    /// suite's `error`).
    pub fn code(&self) -> &'static str {
        match self {
            VerifyError::Format(_) => "format",
            VerifyError::Atom(_) => "atom",
            VerifyError::Merkle(_) => "merkle",
            VerifyError::Attestation(_) => "attestation",
            VerifyError::HeadMismatch { .. } => "head_mismatch",
            VerifyError::WrongLedger { .. } => "wrong_ledger",
            VerifyError::BadLedgerKey => "bad_ledger_key",
            VerifyError::Unattested => "unattested",
            VerifyError::Range(_) => "range",
            VerifyError::List(_) => "list",
            VerifyError::IndexRoot => "index_root",
            VerifyError::NotOmitted(_) => "not_omitted",
            VerifyError::Cells(_) => "cells",
            VerifyError::OtherQuestion { .. } => "other_question",
            VerifyError::OtherLog { .. } => "other_log",
            VerifyError::StaleHead { .. } => "stale_head",
            VerifyError::OtherHead { .. } => "other_head",
            VerifyError::RecordedElsewhere(_) => "recorded_elsewhere",
            VerifyError::Witnesses { .. } | VerifyError::Cosigners { .. } => "witnesses",
        }
    }
}

/// The question a reader asked. A valid proof is complete only for the question it carries, and
/// a proof for a smaller box, a shorter interval or another subject can be valid and complete
/// too: [`Expect`] makes the verifier refuse it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    /// Everything in this frame, box and interval (a range proof). Build the query with
    /// [`Query::new`], so an instant is asked as the proof carries it.
    Range(Query),
    /// Every atom about this subject (a subject proof).
    Subject(String),
    /// Every atom linking to this atom (a link proof).
    LinksTo(AtomId),
    /// The atom at this position (an inclusion proof).
    Included {
        /// The log position.
        position: u64,
    },
    /// The log extends this earlier head (a consistency proof).
    Extends {
        /// The earlier head's size.
        size: u64,
        /// The earlier head's root.
        root: Digest,
    },
    /// The committed index leaves out the atom at this position (an omission proof).
    Omitted {
        /// The log position.
        position: u64,
    },
    /// When the atom at this position was recorded (a transaction-time proof).
    Recorded {
        /// The log position.
        position: u64,
    },
    /// The ledger's cells leave out the log where the atom at this position lies (a cell
    /// omission proof).
    CellOmitted {
        /// The log position.
        position: u64,
    },
    /// The atom last seen in this frame, box and interval (a latest proof).
    Latest(Query),
    /// The k atoms nearest to this point during this interval (a nearest proof).
    Nearest(NearQuery),
    /// How many atoms answer this range question (a count proof).
    Count(Query),
}

/// The C2SP witnesses a reader trusts (names and `cosignature/v1` keys, from their vkeys) and
/// how many of them must have cosigned the checkpoint covering the attested Pulse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cosigners {
    /// Each witness's key name and Ed25519 key; no name and no key twice.
    pub keys: Vec<(String, [u8; 32])>,
    /// How many of them (at least 1).
    pub quorum: usize,
}

impl Cosigners {
    /// Witnesses from their C2SP vkeys (`name+keyid+base64(0x04 || key)`), `quorum` of them
    /// (all when `None`). The error names the vkey at fault.
    pub fn from_vkeys<S: AsRef<str>>(vkeys: &[S], quorum: Option<usize>) -> Result<Self, String> {
        let mut keys: Vec<(String, [u8; 32])> = Vec::with_capacity(vkeys.len());
        for (i, v) in vkeys.iter().enumerate() {
            let (name, key) =
                crate::ledger::parse_witness_vkey(v.as_ref()).map_err(|e| format!("cosigners[{i}]: {e}"))?;
            // A cosignature/v1 does not sign the name: one key under two names would count twice.
            if keys.iter().any(|(n, k)| *n == name || *k == key.to_bytes()) {
                return Err(format!("cosigners[{i}]: witness {name} (or its key) named twice"));
            }
            keys.push((name, key.to_bytes()));
        }
        let quorum = quorum.unwrap_or(keys.len());
        if quorum == 0 || quorum > keys.len() {
            return Err(format!(
                "cosigners_quorum: {quorum}, but between 1 and the {} witnesses named",
                keys.len()
            ));
        }
        Ok(Self { keys, quorum })
    }
}

/// What a reader expects of a proof besides its being valid: the question it answers, the log,
/// and how recent a head it answers as of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// The question the proof must answer; `None` accepts any.
    pub question: Option<Question>,
    /// The log the proof must be about.
    pub log: Option<LogId>,
    /// The head must hold at least this many atoms: an answer as of an older head is refused.
    pub at_least: u64,
    /// Exactly this head (size and root), when the reader holds it.
    pub head: Option<(u64, Digest)>,
    /// The witnesses the reader trusts and its quorum: that many of them must have cosigned the
    /// attested Pulse's header.
    pub witnesses: Option<Witnesses>,
    /// The C2SP witnesses the reader trusts and its quorum: that many of them must have
    /// cosigned a checkpoint the file shows covers the attested Pulse.
    pub cosigners: Option<Cosigners>,
}

impl Expect {
    /// Expect an answer to `question`, of any log and head.
    pub fn answer(question: Question) -> Self {
        Self { question: Some(question), ..Self::default() }
    }

    /// Also require the head to hold at least `size` atoms.
    pub fn at_least(mut self, size: u64) -> Self {
        self.at_least = size;
        self
    }

    /// Also require the proof to be about `log`.
    pub fn of_log(mut self, log: LogId) -> Self {
        self.log = Some(log);
        self
    }

    /// Also require exactly this head.
    pub fn at_head(mut self, size: u64, root: Digest) -> Self {
        self.head = Some((size, root));
        self
    }

    /// Also require `quorum` of these witnesses to have cosigned the attested Pulse.
    pub fn cosigned_by(mut self, keys: Vec<[u8; 32]>, quorum: usize) -> Self {
        self.witnesses = Some(Witnesses { keys, quorum });
        self
    }

    /// Also require a checkpoint covering the attested Pulse, cosigned by enough of these C2SP
    /// witnesses.
    pub fn covered_by(mut self, cosigners: Cosigners) -> Self {
        self.cosigners = Some(cosigners);
        self
    }

    /// An expectation from its JSON form (docs/PROOFS.md, "What the reader asked"): an object
    /// with, for a range question, `frame`, `box` (six integers: x0, y0, z0, x1, y1, z1 in mm),
    /// `from_ns` and `to_ns` (and `kinds`, an array of kind names, if it names some); or `subject`; or `links_to` (64 hex digits); or `position` (an
    /// inclusion); or `omitted` (a position); or `extends` (`{"size", "root"}`); and
    /// optionally `at_least`, `head` (exactly this head: `{"size", "root"}`), `log`, and
    /// `witnesses` (an array of witness keys, 64 hex digits each) with `quorum` (how many of them
    /// must have cosigned), and `cosigners` (an array of C2SP witness vkeys) with
    /// `cosigners_quorum`. Absent or null members are not expected.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let int = |name: &str| -> Result<Option<i64>, String> {
            match v.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x.as_i64().map(Some).ok_or_else(|| format!("{name}: not an integer")),
            }
        };
        let unsigned = |name: &str| -> Result<Option<u64>, String> {
            int(name)?.map(|x| u64::try_from(x).map_err(|_| format!("{name}: negative"))).transpose()
        };
        let text = |name: &str| v.get(name).and_then(serde_json::Value::as_str);
        // A head as `{"size": n, "root": "<64 hex>"}`: `extends` and `head`.
        let size_and_root = |name: &str| -> Result<Option<(u64, Digest)>, String> {
            let Some(h) = v.get(name).filter(|h| !h.is_null()) else { return Ok(None) };
            let size = h
                .get("size")
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("{name}.size: an integer from 0 to 2^64 - 1"))?;
            let mut root = [0u8; 32];
            let hex_root = h.get("root").and_then(serde_json::Value::as_str).unwrap_or_default();
            hex::decode_to_slice(hex_root, &mut root).map_err(|_| format!("{name}.root: 64 hex digits"))?;
            Ok(Some((size, root)))
        };
        let question = if let Some(frame) = text("frame") {
            let corners: Vec<i64> = match v.get("box").and_then(serde_json::Value::as_array) {
                Some(b) => {
                    b.iter().map(|c| c.as_i64().ok_or("box: six integers (mm)")).collect::<Result<_, _>>()?
                }
                None => {
                    return Err("box: a range question names its box (x0, y0, z0, x1, y1, z1 in mm)".into());
                }
            };
            let [x0, y0, z0, x1, y1, z1] = corners[..] else {
                return Err(format!(
                    "box: {} numbers, not six (x0, y0, z0, x1, y1, z1 in mm)",
                    corners.len()
                ));
            };
            let (Some(from), Some(to)) = (int("from_ns")?, int("to_ns")?) else {
                return Err("from_ns, to_ns: a range question names its interval".into());
            };
            let bounds = crate::atom::BoxMm { min_mm: [x0, y0, z0], max_mm: [x1, y1, z1] };
            let query = Query::new(frame, bounds, from, to).map_err(|e| e.to_string())?;
            Some(Question::Range(with_subject_of(v, "", with_kinds_of(v, "", query)?)?))
        } else if let Some(subject) = text("subject") {
            Some(Question::Subject(subject.to_owned()))
        } else if let Some(target) = text("links_to") {
            Some(Question::LinksTo(target.parse().map_err(|_| "links_to: not an atom id (64 hex digits)")?))
        } else if let Some(position) = unsigned("omitted")? {
            Some(Question::Omitted { position })
        } else if let Some(position) = unsigned("recorded")? {
            Some(Question::Recorded { position })
        } else if let Some((size, root)) = size_and_root("extends")? {
            Some(Question::Extends { size, root })
        } else if let Some(position) = unsigned("position")? {
            Some(Question::Included { position })
        } else if let Some(l) = v.get("latest").filter(|l| l.is_object()) {
            Some(Question::Latest(range_of(l, "latest")?))
        } else if let Some(n) = v.get("nearest").filter(|n| n.is_object()) {
            Some(Question::Nearest(nearest_of(n)?))
        } else if let Some(c) = v.get("count").filter(|c| c.is_object()) {
            Some(Question::Count(range_of(c, "count")?))
        } else {
            unsigned("cell_omitted")?.map(|position| Question::CellOmitted { position })
        };
        let witnesses = match v.get("witnesses").filter(|w| !w.is_null()) {
            None => {
                if unsigned("quorum")?.is_some() {
                    return Err("quorum: name the witnesses it counts (witnesses)".into());
                }
                None
            }
            Some(w) => {
                let list = w.as_array().ok_or("witnesses: an array of witness keys (64 hex digits each)")?;
                let mut keys = Vec::with_capacity(list.len());
                for (i, k) in list.iter().enumerate() {
                    let mut key = [0u8; 32];
                    hex::decode_to_slice(k.as_str().unwrap_or_default(), &mut key)
                        .map_err(|_| format!("witnesses[{i}]: not 64 hex digits"))?;
                    if keys.contains(&key) {
                        return Err(format!("witnesses[{i}]: named twice"));
                    }
                    keys.push(key);
                }
                let quorum = usize::try_from(unsigned("quorum")?.unwrap_or(keys.len() as u64))
                    .map_err(|_| "quorum: too large")?;
                if quorum == 0 || quorum > keys.len() {
                    return Err(format!(
                        "quorum: {quorum}, but between 1 and the {} witnesses named",
                        keys.len()
                    ));
                }
                Some(Witnesses { keys, quorum })
            }
        };
        let cosigners = match v.get("cosigners").filter(|w| !w.is_null()) {
            None => {
                if unsigned("cosigners_quorum")?.is_some() {
                    return Err("cosigners_quorum: name the C2SP witnesses it counts (cosigners)".into());
                }
                None
            }
            Some(w) => {
                let list = w.as_array().ok_or("cosigners: an array of C2SP witness vkeys")?;
                let vkeys = list
                    .iter()
                    .enumerate()
                    .map(|(i, k)| k.as_str().ok_or_else(|| format!("cosigners[{i}]: not a string")))
                    .collect::<Result<Vec<_>, _>>()?;
                let quorum = unsigned("cosigners_quorum")?
                    .map(|q| usize::try_from(q).map_err(|_| "cosigners_quorum: too large"))
                    .transpose()?;
                Some(Cosigners::from_vkeys(&vkeys, quorum)?)
            }
        };
        Ok(Self {
            question,
            log: unsigned("log")?.map(LogId),
            at_least: unsigned("at_least")?.unwrap_or(0),
            head: size_and_root("head")?,
            witnesses,
            cosigners,
        })
    }

    /// Whether `verified` meets the expectation.
    pub fn check(&self, verified: &Verified) -> Result<(), VerifyError> {
        if let Some(expected) = self.log
            && verified.log != expected
        {
            return Err(VerifyError::OtherLog { found: verified.log, expected });
        }
        let head = &verified.head;
        if head.size < self.at_least {
            return Err(VerifyError::StaleHead { size: head.size, at_least: self.at_least });
        }
        if let Some((size, root)) = self.head
            && (head.size != size || head.root != root)
        {
            return Err(VerifyError::OtherHead { size: head.size, root: hex::encode(&head.root[..8]) });
        }
        if let Some(w) = &self.witnesses {
            let found = w.keys.iter().filter(|k| verified.cosigned.contains(k)).count();
            if found < w.quorum {
                return Err(VerifyError::Witnesses {
                    pulse: verified.pulse.map_or(0, |p| p.0),
                    found,
                    named: w.keys.len(),
                    quorum: w.quorum,
                });
            }
        }
        if let Some(c) = &self.cosigners {
            verified.covered_by(c)?;
        }
        let Some(question) = &self.question else { return Ok(()) };
        let answers = match (question, &verified.claim) {
            (Question::Range(q), Claim::Range { query, .. }) => q == query,
            (Question::Subject(s), Claim::List { key: ListKey::Subject(k), .. }) => s == k,
            (Question::LinksTo(t), Claim::List { key: ListKey::LinksTo(k), .. }) => t == k,
            (Question::Included { position }, Claim::Included { position: p, .. }) => position == p,
            (Question::Extends { size, root }, Claim::Extends { old_size, old_root }) => {
                size == old_size && root == old_root
            }
            (Question::Omitted { position }, Claim::Omitted { position: p, .. }) => position == p,
            (Question::Recorded { position }, Claim::Recorded { position: p, .. }) => position == p,
            (Question::CellOmitted { position }, Claim::CellOmitted { position: p, .. }) => position == p,
            (Question::Latest(q), Claim::Latest { query, .. }) => q == query,
            (Question::Count(q), Claim::Count { query, .. }) => q == query,
            (Question::Nearest(q), Claim::Nearest { query, .. }) => q == query,
            _ => false,
        };
        if answers {
            Ok(())
        } else {
            Err(VerifyError::OtherQuestion {
                asked: question.to_string(),
                answered: verified.claim.question(),
            })
        }
    }
}

/// A range question in JSON (`frame`, `box`, `from_ns`, `to_ns`), as `name` (latest) holds it.
fn range_of(v: &serde_json::Value, name: &str) -> Result<Query, String> {
    let frame =
        v.get("frame").and_then(serde_json::Value::as_str).ok_or(format!("{name}.frame: a frame name"))?;
    let corners: Vec<i64> = v
        .get("box")
        .and_then(serde_json::Value::as_array)
        .ok_or(format!("{name}.box: six integers (x0, y0, z0, x1, y1, z1 in mm)"))?
        .iter()
        .map(|c| c.as_i64().ok_or(format!("{name}.box: six integers (mm)")))
        .collect::<Result<_, _>>()?;
    let [x0, y0, z0, x1, y1, z1] = corners[..] else {
        return Err(format!("{name}.box: {} numbers, not six (x0, y0, z0, x1, y1, z1 in mm)", corners.len()));
    };
    let (from, to) = interval_of(v, name)?;
    let bounds = crate::atom::BoxMm { min_mm: [x0, y0, z0], max_mm: [x1, y1, z1] };
    let query = Query::new(frame, bounds, from, to).map_err(|e| format!("{name}: {e}"))?;
    let query = with_kinds_of(v, &format!("{name}."), query)?;
    with_subject_of(v, &format!("{name}."), query)
}

/// A range question's `subject` in JSON, if named: the one subject it asks about (absent,
/// null or empty: every subject).
fn with_subject_of(v: &serde_json::Value, prefix: &str, query: Query) -> Result<Query, String> {
    match v.get("subject") {
        None | Some(serde_json::Value::Null) => Ok(query),
        Some(serde_json::Value::String(s)) if s.is_empty() => Ok(query),
        Some(serde_json::Value::String(s)) => query.with_subject(s).map_err(|e| format!("{prefix}{e}")),
        Some(_) => Err(format!("{prefix}subject: a string")),
    }
}

/// A question's `kinds` in JSON, if named: an array of kind names (docs/ATOM.md); absent or
/// null, every kind.
fn with_kinds_of(v: &serde_json::Value, prefix: &str, query: Query) -> Result<Query, String> {
    let Some(kinds) = v.get("kinds").filter(|k| !k.is_null()) else { return Ok(query) };
    if kinds.as_array().is_some_and(Vec::is_empty) {
        return Ok(query);
    }
    let names: Vec<&str> = kinds
        .as_array()
        .ok_or(format!("{prefix}kinds: an array of kind names (\"observation\", \"pose\", …)"))?
        .iter()
        .map(|k| k.as_str().ok_or(format!("{prefix}kinds: kind names, as strings")))
        .collect::<Result<_, _>>()?;
    let mask = crate::units::parse_kinds(names).map_err(|e| format!("{prefix}kinds: {e}"))?;
    query.with_kinds(mask).map_err(|e| format!("{prefix}kinds: {e}"))
}

fn interval_of(v: &serde_json::Value, name: &str) -> Result<(i64, i64), String> {
    let int = |field: &str| {
        v.get(field).and_then(serde_json::Value::as_i64).ok_or(format!("{name}.{field}: an integer (ns)"))
    };
    Ok((int("from_ns")?, int("to_ns")?))
}

/// A nearest question in JSON: `frame`, `point` (three integers, mm), `from_ns`, `to_ns`, `k`.
fn nearest_of(v: &serde_json::Value) -> Result<NearQuery, String> {
    // A nearest question is about every subject and kind: one that names either asks what no
    // nearest proof answers, and is refused rather than read as wider.
    for member in ["subject", "kinds"] {
        if v.get(member).is_some_and(|m| !m.is_null()) {
            return Err(format!(
                "nearest.{member}: a nearest question names no {member} (it is about every one)"
            ));
        }
    }
    let frame = v.get("frame").and_then(serde_json::Value::as_str).ok_or("nearest.frame: a frame name")?;
    let point: Vec<i64> = v
        .get("point")
        .and_then(serde_json::Value::as_array)
        .ok_or("nearest.point: three integers (x, y, z in mm)")?
        .iter()
        .map(|c| c.as_i64().ok_or("nearest.point: three integers (mm)"))
        .collect::<Result<_, _>>()?;
    let [x, y, z] = point[..] else {
        return Err(format!("nearest.point: {} numbers, not three (x, y, z in mm)", point.len()));
    };
    let (from, to) = interval_of(v, "nearest")?;
    let k = v
        .get("k")
        .and_then(serde_json::Value::as_u64)
        .and_then(|k| u32::try_from(k).ok())
        .ok_or(format!("nearest.k: 1 to {MAX_NEAREST}"))?;
    NearQuery::new(frame, [x, y, z], from, to, k).map_err(|e| format!("nearest: {e}"))
}

impl std::fmt::Display for Question {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Question::Range(q) => write!(
                f,
                "frame {:?}, box {:?}..={:?} mm, [{}, {}) ns{}",
                q.frame,
                q.bounds.min_mm,
                q.bounds.max_mm,
                q.from_ns,
                q.to_ns,
                of_kinds(q)
            ),
            Question::Subject(s) => write!(f, "every atom about {s:?}"),
            Question::LinksTo(id) => write!(f, "every atom linking to {id}"),
            Question::Included { position } => write!(f, "the atom at position {position}"),
            Question::Extends { size, root } => {
                write!(f, "extends the head of {size} atoms (root {})", hex::encode(&root[..8]))
            }
            Question::Omitted { position } => write!(f, "the index leaves out position {position}"),
            Question::Recorded { position } => write!(f, "when position {position} was recorded"),
            Question::CellOmitted { position } => {
                write!(f, "the ledger's cells leave out the log where position {position} lies")
            }
            Question::Latest(q) => write!(f, "the atom seen last in {}", Question::Range(q.clone())),
            Question::Count(q) => write!(f, "how many atoms are in {}", Question::Range(q.clone())),
            Question::Nearest(q) => write!(
                f,
                "the {} atoms nearest to {:?} mm in frame {:?} during [{}, {}) ns",
                q.k, q.point_mm, q.frame, q.from_ns, q.to_ns
            ),
        }
    }
}

/// Decode a proof file and check it in this process: against `ledger_key` (an attestation by
/// that key is required), and against what the reader expects (the question, the log, the
/// head). What a reader who trusts nothing the writer says should call.
pub fn verify(bytes: &[u8], ledger_key: &VerifyingKey, expect: &Expect) -> Result<Verified, VerifyError> {
    let file = ProofFile::decode(bytes)?;
    let verified = file.verify(Some(ledger_key))?;
    expect.check(&verified)?;
    Ok(verified)
}

/// What a proof file was found to prove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The log the proof is about.
    pub log: LogId,
    /// The head it was checked against.
    pub head: Head,
    /// The Pulse that committed the head and the ledger key that signed it, when attested.
    pub pulse: Option<(u64, i64, [u8; 32])>,
    /// The witnesses whose cosignatures of that Pulse's header the file carries (every one
    /// holds; which of them a reader trusts is its own choice, [`Expect::cosigned_by`]).
    pub cosigned: Vec<[u8; 32]>,
    /// The C2SP checkpoint covering that Pulse, checked (signed by the ledger's key, the
    /// header its leaf), as the file carries it with its witnesses' lines; which of them a
    /// reader trusts is its own choice, [`Expect::covered_by`].
    pub checkpoint: Option<(Checkpoint, SignedNote)>,
    /// What the proof establishes about the head.
    pub claim: Claim,
}

/// What a verified proof establishes about its head, one variant per kind of proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The atom is at `position` of the log.
    Included {
        /// The log position.
        position: u64,
        /// The atom, decoded and valid.
        atom: Box<Atom>,
    },
    /// The log of `old_size` atoms with root `old_root` is a prefix of the head's.
    Extends {
        /// The earlier size.
        old_size: u64,
        /// The earlier root.
        old_root: Digest,
    },
    /// The complete answer to a range query (possibly empty).
    Range {
        /// The query the proof carries.
        query: Query,
        /// The answer: (position, atom), ascending by position.
        atoms: Vec<(u64, Atom)>,
    },
    /// Every atom about a subject, or linking to an atom.
    List {
        /// The subject or target.
        key: ListKey,
        /// The answer: (position, atom), ascending by position.
        atoms: Vec<(u64, Atom)>,
    },
    /// The committed index leaves out this atom of the log.
    Omitted {
        /// The atom's log position.
        position: u64,
        /// The atom, decoded and valid.
        atom: Box<Atom>,
    },
    /// The atom at `position` lies in `cell`, which the attested Pulse's cells do not list the
    /// log in: the log's writer broke the cells rule.
    CellOmitted {
        /// The atom's log position.
        position: u64,
        /// The atom, decoded and valid.
        atom: Box<Atom>,
        /// The cell that leaves the log out.
        cell: u128,
    },
    /// The atom at `position` was recorded at the attested Pulse ([`Verified::pulse`]): the
    /// log held `size_before` atoms (no more than `position`) at the Pulse before.
    Recorded {
        /// The atom's log position.
        position: u64,
        /// The atom, decoded and valid.
        atom: Box<Atom>,
        /// The log's size at the Pulse before.
        size_before: u64,
        /// That Pulse's time (the ledger's clock, ns since the Unix epoch).
        time_before_ns: i64,
    },
    /// The atom of the query's frame, box and interval whose valid time ends last (the later
    /// position on a tie), or none: nothing answers the query.
    Latest {
        /// The question the proof carries.
        query: Query,
        /// The answer: (position, atom).
        atom: Option<(u64, Box<Atom>)>,
    },
    /// The k atoms nearest to the point among those of the frame valid during the interval
    /// (fewer when fewer are), nearest first, ties by position.
    Nearest {
        /// The question the proof carries.
        query: NearQuery,
        /// The answer: (position, atom, squared distance in mm²), nearest first.
        atoms: Nearest,
    },
    /// How many atoms answer the query, for how long in all (each one's valid interval cut to
    /// the query's), and the first and last instant of that.
    Count {
        /// The question the proof carries.
        query: Query,
        /// The answer.
        counted: Counted,
    },
}

impl Proof {
    /// The version of docs/INDEX.md its tree walks follow (version 3 for kinds without any).
    pub fn index_version(&self) -> Version {
        match self {
            Proof::Range { range, .. } | Proof::Omission { range, .. } => range.answer.version,
            Proof::Latest { latest, .. } => latest.answer.version,
            Proof::Nearest { nearest, .. } => nearest.answer.version,
            Proof::Count { count, .. } => count.answer.version,
            _ => Version::V4,
        }
    }

    /// The kind of proof, as `sion memory verify` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Proof::Inclusion { .. } => "inclusion",
            Proof::Consistency { .. } => "consistency",
            Proof::Range { .. } => "range",
            Proof::List { .. } => "list",
            Proof::Omission { .. } => "omission",
            Proof::Recorded { .. } => "time",
            Proof::Latest { .. } => "latest",
            Proof::Nearest { .. } => "nearest",
            Proof::Count { .. } => "count",
            Proof::CellOmission { .. } => "cell_omission",
        }
    }
}

impl Claim {
    /// The claim as JSON: one key naming what is proved (`included`, `extends`, `range`,
    /// `subject`, `links`, `omitted`), atoms in their JSON form with their positions.
    pub fn to_json(&self) -> serde_json::Value {
        let claim = self;
        let list = |atoms: &[(u64, Atom)]| -> Vec<serde_json::Value> {
            atoms.iter().map(|(p, a)| serde_json::to_value(a.to_json(Some(*p))).unwrap_or_default()).collect()
        };
        match claim {
            Claim::Included { position, atom } => serde_json::json!({
                "included": { "position": position, "atom": atom.to_json(Some(*position)) }
            }),
            Claim::Extends { old_size, old_root } => serde_json::json!({
                "extends": { "size": old_size, "root": hex::encode(old_root) }
            }),
            Claim::Range { query, atoms } => {
                serde_json::json!({ "range": asked(query, serde_json::json!({ "atoms": list(atoms) })) })
            }
            Claim::List { key, atoms } => match key {
                ListKey::Subject(s) => {
                    serde_json::json!({ "subject": { "subject": s, "atoms": list(atoms) } })
                }
                ListKey::LinksTo(id) => {
                    serde_json::json!({ "links": { "target": id.to_string(), "atoms": list(atoms) } })
                }
            },
            Claim::Omitted { position, atom } => serde_json::json!({
                "omitted": { "position": position, "atom": atom.to_json(Some(*position)) }
            }),
            Claim::CellOmitted { position, atom, cell } => serde_json::json!({
                "cell_omitted": {
                    "position": position,
                    "atom": atom.to_json(Some(*position)),
                    "cell": format!("{cell:032x}"),
                    "level": crate::cells::key_level(*cell),
                }
            }),
            Claim::Recorded { position, atom, size_before, time_before_ns } => serde_json::json!({
                "recorded": {
                    "position": position,
                    "atom": atom.to_json(Some(*position)),
                    "size_before": size_before,
                    "time_before_ns": time_before_ns,
                }
            }),
            Claim::Latest { query, atom } => serde_json::json!({
                "latest": asked(query, serde_json::json!({
                    "atom": atom.as_ref().map(|(p, a)| a.to_json(Some(*p))),
                }))
            }),
            Claim::Count { query, counted } => serde_json::json!({
                "count": asked(query, serde_json::json!({
                    "count": counted.count,
                    // A u128 of ns: as a string when past what a JSON number holds exactly.
                    "duration_ns": u64::try_from(counted.duration_ns)
                        .ok()
                        .filter(|d| *d < 1 << 53)
                        .map_or_else(|| serde_json::json!(counted.duration_ns.to_string()), |d| serde_json::json!(d)),
                    "duration_s": counted.duration_ns as f64 / 1e9,
                    "first": counted.span.map(|(f, _)| f),
                    "last": counted.span.map(|(_, l)| l),
                }))
            }),
            Claim::Nearest { query, atoms } => serde_json::json!({
                "nearest": {
                    "frame": query.frame,
                    "point": query.point_mm,
                    "from": query.from_ns,
                    "to": query.to_ns,
                    "k": query.k,
                    "atoms": atoms.iter().map(|(p, a, _)| a.to_json(Some(*p))).collect::<Vec<_>>(),
                    "distances_mm": atoms.iter().map(|(_, _, d2)| (*d2 as f64).sqrt()).collect::<Vec<_>>(),
                }
            }),
        }
    }

    /// The question the claim answers, as [`Question`]'s `Display` puts it.
    pub fn question(&self) -> String {
        match self {
            Claim::Included { position, .. } => Question::Included { position: *position },
            Claim::Extends { old_size, old_root } => Question::Extends { size: *old_size, root: *old_root },
            Claim::Range { query, .. } => Question::Range(query.clone()),
            Claim::List { key: ListKey::Subject(s), .. } => Question::Subject(s.clone()),
            Claim::List { key: ListKey::LinksTo(id), .. } => Question::LinksTo(*id),
            Claim::Omitted { position, .. } => Question::Omitted { position: *position },
            Claim::CellOmitted { position, .. } => Question::CellOmitted { position: *position },
            Claim::Recorded { position, .. } => Question::Recorded { position: *position },
            Claim::Latest { query, .. } => Question::Latest(query.clone()),
            Claim::Nearest { query, .. } => Question::Nearest(query.clone()),
            Claim::Count { query, .. } => Question::Count(query.clone()),
        }
        .to_string()
    }

    /// The log positions the claim names: a range's or a list's answer (ascending), a nearest
    /// answer (nearest first), the latest atom, the atom included, omitted or recorded.
    pub fn positions(&self) -> Vec<u64> {
        match self {
            Claim::Range { atoms, .. } | Claim::List { atoms, .. } => atoms.iter().map(|(p, _)| *p).collect(),
            Claim::Nearest { atoms, .. } => atoms.iter().map(|(p, _, _)| *p).collect(),
            Claim::Included { position, .. }
            | Claim::Omitted { position, .. }
            | Claim::CellOmitted { position, .. }
            | Claim::Recorded { position, .. } => {
                vec![*position]
            }
            Claim::Latest { atom, .. } => atom.iter().map(|(p, _)| *p).collect(),
            Claim::Extends { .. } | Claim::Count { .. } => Vec::new(),
        }
    }

    /// The kind of proof that makes this claim, as `sion memory verify` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Claim::Included { .. } => "inclusion",
            Claim::Extends { .. } => "consistency",
            Claim::Range { .. } => "range",
            Claim::List { .. } => "list",
            Claim::Omitted { .. } => "omission",
            Claim::CellOmitted { .. } => "cell_omission",
            Claim::Recorded { .. } => "time",
            Claim::Latest { .. } => "latest",
            Claim::Nearest { .. } => "nearest",
            Claim::Count { .. } => "count",
        }
    }
}

/// A claim's question about a box (frame, min, max, from, to, kinds) with its answer's members.
fn asked(query: &Query, mut answer: serde_json::Value) -> serde_json::Value {
    if let Some(members) = answer.as_object_mut() {
        members.insert("frame".into(), query.frame.clone().into());
        members.insert("min".into(), serde_json::json!(query.bounds.min_mm));
        members.insert("max".into(), serde_json::json!(query.bounds.max_mm));
        members.insert("from".into(), query.from_ns.into());
        members.insert("to".into(), query.to_ns.into());
        members.insert("kinds".into(), kind_names(query));
        members.insert("subject".into(), query.subject.clone().into());
    }
    answer
}

/// The kinds a query names, as names (null when it asks about every kind).
fn kind_names(q: &Query) -> serde_json::Value {
    if !q.filters_kinds() {
        return serde_json::Value::Null;
    }
    crate::atom::Kind::ALL.iter().filter(|k| q.asks_kind(k.code())).map(|k| k.as_str()).collect()
}

impl Verified {
    /// What was verified, as JSON: `kind`, `statement`, `log`, `head` (size and the three roots
    /// in hex), `pulse` (number, time in ns, ledger key; null when unattested), `cosigned_by`
    /// (the witness keys whose cosignatures the file carries, hex), `checkpoint` (the C2SP
    /// checkpoint covering the Pulse: its size and note, with every line it carries; null when
    /// none) and `claim`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.claim.kind(),
            "statement": self.statement(),
            "log": self.log.0,
            "head": {
                "size": self.head.size,
                "root": hex::encode(self.head.root),
                "index": hex::encode(self.head.index),
                "manifest": hex::encode(self.head.manifest),
            },
            "pulse": self.pulse.map(|(number, time_ns, key)| serde_json::json!({
                "number": number, "time_ns": time_ns, "ledger_key": hex::encode(key),
            })),
            "cosigned_by": self.cosigned.iter().map(hex::encode).collect::<Vec<_>>(),
            "checkpoint": self.checkpoint.as_ref().map(|(cp, note)| serde_json::json!({
                "size": cp.size, "note": note.encode(),
            })),
            "claim": self.claim.to_json(),
        })
    }

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
                "these {} atoms are everything log {log} holds in frame {:?}, box {:?}..={:?} mm, [{}, {}) ns{}",
                atoms.len(),
                query.frame,
                query.bounds.min_mm,
                query.bounds.max_mm,
                query.from_ns,
                query.to_ns,
                of_kinds(query)
            ),
            Claim::Count { query, counted } => format!(
                "log {log} holds {} atoms in frame {:?}, box {:?}..={:?} mm, [{}, {}) ns{}: valid for {} s in all{}",
                counted.count,
                query.frame,
                query.bounds.min_mm,
                query.bounds.max_mm,
                query.from_ns,
                query.to_ns,
                of_kinds(query),
                crate::units::show_seconds_u128(counted.duration_ns),
                match counted.span {
                    Some((first, last)) => format!(
                        ", the first from {} and the last until {}",
                        crate::time::rfc3339(first),
                        crate::time::rfc3339(last)
                    ),
                    None => String::new(),
                }
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
            Claim::CellOmitted { position, atom, cell } => format!(
                "atom {} at position {position} of log {log} lies in map cell {cell:032x} (frame {:?}, level {}), which the ledger's cells at Pulse {} do not list log {log} in: its writer broke the cells rule",
                atom.id(),
                atom.parts().frame,
                crate::cells::key_level(*cell),
                self.pulse.map_or(0, |p| p.0)
            ),
            Claim::Recorded { position, atom, size_before, .. } => match self.pulse {
                Some((pulse, time_ns, _)) => format!(
                    "atom {} at position {position} of log {log} was recorded at Pulse {pulse}, time {} ({time_ns} ns; the ledger's clock): at Pulse {} the log held {size_before} atoms",
                    atom.id(),
                    crate::time::rfc3339(time_ns),
                    pulse.saturating_sub(1)
                ),
                None => {
                    format!("atom {} at position {position} of log {log}: recorded (unattested)", atom.id())
                }
            },
            Claim::Latest { query, atom } => {
                let asked = Question::Range(query.clone());
                match atom {
                    Some((p, a)) => format!(
                        "atom {} at position {p} ({} {:?}, valid until {} ns) was seen last of everything log {log} holds in {asked}",
                        a.id(),
                        a.parts().kind,
                        a.parts().subject,
                        a.parts().valid.to_ns
                    ),
                    None => format!("log {log} holds nothing in {asked}"),
                }
            }
            Claim::Nearest { query, atoms } => format!(
                "these {} atoms are the {} nearest to {:?} mm of everything log {log} holds in frame {:?} valid during [{}, {}) ns{}",
                atoms.len(),
                query.k,
                query.point_mm,
                query.frame,
                query.from_ns,
                query.to_ns,
                match atoms.last() {
                    Some((_, _, d2)) => format!(" (the farthest {:.0} mm away)", (*d2 as f64).sqrt()),
                    None => " (there are none)".into(),
                }
            ),
        }
    }
}

/// `, of kind observation` when a query names kinds, `, about "pallet-17"` when it names a
/// subject; nothing when it asks about every kind and subject.
fn of_kinds(q: &Query) -> String {
    let mut out = String::new();
    if q.filters_kinds() {
        out = format!(", of {}", crate::units::show_kinds(q.kinds));
    }
    if let Some(s) = &q.subject {
        out.push_str(&format!(", about {s:?}"));
    }
    out
}

impl ProofFile {
    /// The file's bytes (docs/PROOFS.md, "The envelope").
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        // A file read under version 2 is written back as it was.
        out.put_bytes(match self.proof.index_version() {
            Version::V2 => MAGIC_V2,
            Version::V3 => MAGIC_V3,
            Version::V4 => MAGIC,
        });
        self.put_attestation(&mut out);
        self.put_body(&mut out);
        out
    }

    /// The file's bytes in two parts, their concatenation after the magic being the file: the
    /// attestation's (from the `attested` byte through the cosignatures) and the body's (from
    /// `kind` on). Belief bundles (SIONBEL2 and 3, docs/BELIEF.md) carry each attestation once.
    pub fn encode_split(&self) -> (Vec<u8>, Vec<u8>) {
        let (mut attestation, mut body) = (Vec::with_capacity(512), Vec::with_capacity(1024));
        self.put_attestation(&mut attestation);
        self.put_body(&mut body);
        (attestation, body)
    }

    fn put_attestation(&self, out: &mut Vec<u8>) {
        match &self.attestation {
            None => out.put_u8(0),
            Some(a) => {
                let covered = if a.checkpoint.is_some() { 2 } else { 0 };
                out.put_u8(covered + if a.cosignatures.is_empty() { 1 } else { 2 });
                out.put_bytes(&a.ledger_key);
                a.state.put(out);
                if !a.cosignatures.is_empty() {
                    let mut sorted = a.cosignatures.clone();
                    sorted.sort_by_key(|c| c.witness);
                    sorted.dedup_by_key(|c| c.witness);
                    sorted.truncate(MAX_COSIGNATURES);
                    out.put_u8(sorted.len() as u8);
                    for c in &sorted {
                        c.put(out);
                    }
                }
                if let Some(c) = &a.checkpoint {
                    out.put_bytes32(c.note.encode().as_bytes());
                    put_path(out, &c.path);
                }
            }
        }
    }

    fn put_body(&self, out: &mut Vec<u8>) {
        match &self.proof {
            Proof::Inclusion { log, head, position, atom, path } => {
                out.put_u8(1);
                out.put_u64(log.0);
                head.put(out);
                out.put_u64(*position);
                out.put_bytes32(atom);
                put_path(out, path);
            }
            Proof::Consistency { log, head, old_size, old_root, path } => {
                out.put_u8(2);
                out.put_u64(log.0);
                head.put(out);
                out.put_u64(*old_size);
                out.put_bytes(old_root);
                put_path(out, path);
            }
            Proof::Range { log, head, range } => {
                out.put_u8(3);
                out.put_u64(log.0);
                head.put(out);
                range.put(out);
            }
            Proof::List { log, head, list } => {
                out.put_u8(4);
                out.put_u64(log.0);
                head.put(out);
                list.put(out);
            }
            Proof::Omission { log, head, position, atom, path, range } => {
                out.put_u8(5);
                out.put_u64(log.0);
                head.put(out);
                out.put_u64(*position);
                out.put_bytes32(atom);
                put_path(out, path);
                range.put(out);
            }
            Proof::Recorded { log, head, position, atom, path, before } => {
                out.put_u8(6);
                out.put_u64(log.0);
                head.put(out);
                out.put_u64(*position);
                out.put_bytes32(atom);
                put_path(out, path);
                before.put(out);
            }
            Proof::Latest { log, head, latest } => {
                out.put_u8(7);
                out.put_u64(log.0);
                head.put(out);
                latest.put(out);
            }
            Proof::Nearest { log, head, nearest } => {
                out.put_u8(8);
                out.put_u64(log.0);
                head.put(out);
                nearest.put(out);
            }
            Proof::Count { log, head, count } => {
                out.put_u8(9);
                out.put_u64(log.0);
                head.put(out);
                count.put(out);
            }
            Proof::CellOmission { log, head, position, atom, path, cell, end, siblings } => {
                out.put_u8(10);
                out.put_u64(log.0);
                head.put(out);
                out.put_u64(*position);
                out.put_bytes32(atom);
                put_path(out, path);
                out.put_bytes(&cell.to_be_bytes());
                match end {
                    CellEnd::Empty => out.put_u8(0),
                    CellEnd::Other(key, digest) => {
                        out.put_u8(1);
                        out.put_bytes(&key.to_be_bytes());
                        out.put_bytes(digest);
                    }
                    CellEnd::Listed(ids) => {
                        out.put_u8(2);
                        out.put_u32(ids.len() as u32);
                        for id in ids {
                            out.put_u64(*id);
                        }
                    }
                }
                out.put_u8(siblings.len() as u8);
                for d in siblings {
                    out.put_bytes(d);
                }
            }
        }
    }

    /// Read a file's one encoding (docs/PROOFS.md): refuses files over 64 MiB, the first
    /// format (`SIONPRF1`) and anything not well formed. Nothing is verified yet: see
    /// [`ProofFile::verify`].
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() > MAX_FILE_BYTES {
            return Err(WireError::Invalid {
                field: "file",
                problem: format!("{} bytes is too large", bytes.len()),
            });
        }
        let mut r = Reader::new(bytes);
        let version = match r.take(8, "magic")? {
            m if m == MAGIC => Version::V4,
            m if m == MAGIC_V3 => Version::V3,
            m if m == MAGIC_V2 => Version::V2,
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
                    problem: "not a proof file (SIONPRF4, SIONPRF3 or SIONPRF2)".into(),
                });
            }
        };
        let attestation = read_attestation(&mut r)?;
        let cells = attestation.as_ref().is_some_and(|a| a.state.header.header.cells.is_some());
        let proof = read_body(&mut r, attestation.is_some(), version, cells)?;
        r.finish()?;
        Ok(Self { proof, attestation })
    }

    /// Read an envelope's attestation part alone (as [`ProofFile::encode_split`] gives it):
    /// exactly one attestation (`attested` 1 to 4), nothing after.
    pub fn decode_attestation(part: &[u8]) -> Result<Attestation, WireError> {
        let mut r = Reader::new(part);
        let attestation = read_attestation(&mut r)?.ok_or_else(|| WireError::Invalid {
            field: "attested",
            problem: "0: an attestation part attests".into(),
        })?;
        r.finish()?;
        Ok(attestation)
    }

    /// The file made of `attestation` and an envelope's body (from `kind` on), read as
    /// [`ProofFile::decode`] reads a whole file.
    pub fn decode_body(attestation: Attestation, body: &[u8]) -> Result<Self, WireError> {
        if body.len() > MAX_FILE_BYTES {
            return Err(WireError::Invalid {
                field: "file",
                problem: format!("{} bytes is too large", body.len()),
            });
        }
        let mut r = Reader::new(body);
        let cells = attestation.state.header.header.cells.is_some();
        let proof = read_body(&mut r, true, Version::V4, cells)?;
        r.finish()?;
        Ok(Self { proof, attestation: Some(attestation) })
    }

    /// Check the proof against the head it names and, if attested, the head against the
    /// ledger. `expected_ledger`, when given, is the only ledger key accepted, and an
    /// attestation is then required.
    pub fn verify(&self, expected_ledger: Option<&VerifyingKey>) -> Result<Verified, VerifyError> {
        self.verify_inner(expected_ledger, None)
    }

    /// [`ProofFile::verify`], for many files that share attestations (a belief bundle's): a
    /// ledger state proof (its signed header and path), or a witness's cosignature of a header,
    /// whose bytes are in `checked` (as a digest) held already and is not checked again; one
    /// that holds is added. Everything else is checked for every file.
    pub fn verify_sharing(
        &self,
        expected_ledger: Option<&VerifyingKey>,
        checked: &mut std::collections::HashSet<Digest>,
    ) -> Result<Verified, VerifyError> {
        self.verify_inner(expected_ledger, Some(checked))
    }

    fn verify_inner(
        &self,
        expected_ledger: Option<&VerifyingKey>,
        checked: Option<&mut std::collections::HashSet<Digest>>,
    ) -> Result<Verified, VerifyError> {
        let (log, head) = match &self.proof {
            Proof::Inclusion { log, head, .. }
            | Proof::Consistency { log, head, .. }
            | Proof::Range { log, head, .. }
            | Proof::List { log, head, .. }
            | Proof::Omission { log, head, .. }
            | Proof::Recorded { log, head, .. }
            | Proof::Latest { log, head, .. }
            | Proof::Nearest { log, head, .. }
            | Proof::Count { log, head, .. }
            | Proof::CellOmission { log, head, .. } => (*log, *head),
        };
        let mut checked = checked;
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
                state_holds(&mut checked, &a.state, &key)?;
                if a.state.log.id != log || a.state.log.head != head {
                    return Err(VerifyError::HeadMismatch {
                        attested: a.state.log.id,
                        attested_size: a.state.log.head.size,
                        claimed: log,
                        claimed_size: head.size,
                    });
                }
                let h = &a.state.header.header;
                // With `checked`, a cosignature of a header that held once is not checked again.
                let header = h.hash();
                let mut cosigned = |c: &Cosignature| -> bool {
                    let Some(checked) = checked.as_deref_mut() else { return c.holds(&a.ledger_key, h) };
                    let mut bytes = vec![2u8];
                    for part in [&a.ledger_key[..], &header[..], &c.witness[..], &c.signature[..]] {
                        bytes.extend_from_slice(part);
                    }
                    let digest: Digest = *blake3::hash(&bytes).as_bytes();
                    if checked.contains(&digest) {
                        return true;
                    }
                    let holds = c.holds(&a.ledger_key, h);
                    if holds {
                        checked.insert(digest);
                    }
                    holds
                };
                if let Some(c) = a.cosignatures.iter().find(|c| !cosigned(c)) {
                    return Err(VerifyError::Attestation(AttestationError::Cosignature {
                        witness: hex::encode(c.witness),
                        number: h.number,
                    }));
                }
                let checkpoint = match &a.checkpoint {
                    None => None,
                    Some(c) => Some((covering_holds(&mut checked, c, &key, h)?, c.note.clone())),
                };
                Some((h.number, h.time_ns, a.ledger_key, checkpoint))
            }
        };
        let (pulse, checkpoint) = match pulse {
            Some((number, time, key, checkpoint)) => (Some((number, time, key)), checkpoint),
            None => (None, None),
        };
        let cosigned = self.attestation.as_ref().map(|a| a.cosignatures.iter().map(|c| c.witness).collect());
        let claim = match &self.proof {
            Proof::Inclusion { position, atom, path, .. } => {
                let atom = Atom::decode(atom).map_err(|e| VerifyError::Atom(e.to_string()))?;
                let leaf = leaf_hash(&atom);
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
                let leaf = leaf_hash(&atom);
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
            Proof::Recorded { position, atom, path, before, .. } => {
                let atom = Atom::decode(atom).map_err(|e| VerifyError::Atom(e.to_string()))?;
                let leaf = leaf_hash(&atom);
                verify_inclusion::<LogHasher, _>(*position, head.size, &leaf, path, &head.root)?;
                // Decoding refuses a kind 6 without an attestation; checked above.
                let a = self.attestation.as_ref().ok_or(VerifyError::Unattested)?;
                let key = VerifyingKey::from_bytes(&a.ledger_key).map_err(|_| VerifyError::BadLedgerKey)?;
                let time =
                    TxTimeProof { position: *position, before: (**before).clone(), at: a.state.clone() };
                time.verify_with(&key, &mut |state, key| state_holds(&mut checked, state, key)).map_err(
                    |e| match e {
                        AttestationError::CoveredBefore { .. } | AttestationError::NotCovered { .. } => {
                            VerifyError::RecordedElsewhere(e.to_string())
                        }
                        other => VerifyError::Attestation(other),
                    },
                )?;
                Claim::Recorded {
                    position: *position,
                    atom: Box::new(atom),
                    size_before: before.log.head.size,
                    time_before_ns: before.header.header.time_ns,
                }
            }
            Proof::Latest { latest, .. } => {
                let atom = latest.verify(&head.index, head.size)?;
                Claim::Latest { query: latest.query.clone(), atom: atom.map(|(p, a)| (p, Box::new(a))) }
            }
            Proof::Nearest { nearest, .. } => {
                let atoms = nearest.verify(&head.index, head.size)?;
                Claim::Nearest { query: nearest.query.clone(), atoms }
            }
            Proof::Count { count, .. } => {
                let counted = count.verify(&head.index, head.size)?;
                Claim::Count { query: count.query.clone(), counted }
            }
            Proof::CellOmission { position, atom, path, cell, end, siblings, .. } => {
                let atom = Atom::decode(atom).map_err(|e| VerifyError::Atom(e.to_string()))?;
                let leaf = leaf_hash(&atom);
                verify_inclusion::<LogHasher, _>(*position, head.size, &leaf, path, &head.root)?;
                let parts = atom.parts();
                if !crate::cells::cells_of(&parts.frame, &parts.bounds).contains(cell) {
                    return Err(VerifyError::Cells(format!(
                        "cell {cell:032x} is not one of the cells atom {position} lies in"
                    )));
                }
                // Decoding refuses a kind 10 without an attestation by a version 2 header.
                let root = self
                    .attestation
                    .as_ref()
                    .and_then(|a| a.state.header.header.cells)
                    .ok_or(VerifyError::Unattested)?;
                let proof = crate::cells::CellProof {
                    end: match end {
                        CellEnd::Empty => None,
                        CellEnd::Other(k, d) => Some((*k, *d)),
                        CellEnd::Listed(ids) => Some((*cell, crate::cells::logs_digest(ids))),
                    },
                    siblings: siblings.clone(),
                };
                proof.verify(&root, *cell).map_err(|e| VerifyError::Cells(e.to_string()))?;
                if let CellEnd::Listed(ids) = end
                    && ids.binary_search(&log.0).is_ok()
                {
                    return Err(VerifyError::NotOmitted(*position));
                }
                Claim::CellOmitted { position: *position, atom: Box::new(atom), cell: *cell }
            }
        };
        Ok(Verified { log, head, pulse, cosigned: cosigned.unwrap_or_default(), checkpoint, claim })
    }
}

/// [`Covering::verify`], once for many files that share it (`checked`: see
/// [`ProofFile::verify_sharing`]).
fn covering_holds(
    checked: &mut Option<&mut std::collections::HashSet<Digest>>,
    covering: &Covering,
    key: &VerifyingKey,
    header: &PulseHeader,
) -> Result<Checkpoint, AttestationError> {
    let Some(checked) = checked.as_deref_mut() else { return covering.verify(key, header) };
    // Over the wire form (lengths included), so no two coverings hash alike.
    let note = covering.note.encode();
    let mut h = blake3::Hasher::new();
    h.update(&[3u8]);
    h.update(key.as_bytes());
    h.update(&header.encode());
    h.update(&(note.len() as u64).to_le_bytes());
    h.update(note.as_bytes());
    h.update(&(covering.path.len() as u64).to_le_bytes());
    for d in &covering.path {
        h.update(d);
    }
    let digest: Digest = *h.finalize().as_bytes();
    if checked.contains(&digest) {
        // Held once: parsed again (it was), not verified again.
        return Checkpoint::parse_body(&covering.note.text)
            .map_err(|e| AttestationError::Checkpoint { pulse: header.number, reason: e.to_string() });
    }
    let checkpoint = covering.verify(key, header)?;
    checked.insert(digest);
    Ok(checkpoint)
}

/// The envelope's attestation part: `attested` and, if attested, its fields.
fn read_attestation(r: &mut Reader<'_>) -> Result<Option<Attestation>, WireError> {
    Ok(match r.u8("attested")? {
        0 => None,
        attested @ 1..=4 => {
            let ledger_key = r.array("ledger key")?;
            let state = StateProof::read(r)?;
            let cosignatures = if attested % 2 == 0 { read_cosignatures(r)? } else { Vec::new() };
            let checkpoint = if attested >= 3 { Some(read_covering(r)?) } else { None };
            Some(Attestation { ledger_key, state, cosignatures, checkpoint })
        }
        other => {
            return Err(WireError::Invalid { field: "attested", problem: format!("{other}, not 0 to 4") });
        }
    })
}

/// The envelope from `kind` on: the proof. A transaction-time proof needs `attested`.
fn read_body(r: &mut Reader<'_>, attested: bool, version: Version, cells: bool) -> Result<Proof, WireError> {
    Ok(match r.u8("proof kind")? {
        1 => Proof::Inclusion {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            position: r.u64("position")?,
            atom: r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
            path: read_path(r)?,
        },
        2 => Proof::Consistency {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            old_size: r.u64("old size")?,
            old_root: r.array("old root")?,
            path: read_path(r)?,
        },
        3 => Proof::Range {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            range: Box::new(RangeProof::read(r, version)?),
        },
        4 => Proof::List {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            list: Box::new(ListProof::read(r)?),
        },
        5 => Proof::Omission {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            position: r.u64("position")?,
            atom: r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
            path: read_path(r)?,
            range: Box::new(RangeProof::read(r, version)?),
        },
        6 if !attested => {
            return Err(WireError::Invalid {
                field: "attestation",
                problem:
                    "a transaction-time proof (kind 6) is the ledger's word or nothing: it must be attested"
                        .into(),
            });
        }
        6 => Proof::Recorded {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            position: r.u64("position")?,
            atom: r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
            path: read_path(r)?,
            before: Box::new(StateProof::read(r)?),
        },
        7 => Proof::Latest {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            latest: Box::new(LatestProof::read(r, version)?),
        },
        8 => Proof::Nearest {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            nearest: Box::new(NearestProof::read(r, version)?),
        },
        9 if version == Version::V2 => {
            return Err(WireError::Invalid {
                field: "proof kind",
                problem: "a count proof (kind 9) is of index version 3: a SIONPRF2 file has none".into(),
            });
        }
        9 => Proof::Count {
            log: LogId(r.u64("log")?),
            head: Head::read(r)?,
            count: Box::new(CountProof::read(r, version)?),
        },
        10 if version != Version::V4 || !cells => {
            return Err(WireError::Invalid {
                field: "proof kind",
                problem: "a cell omission proof (kind 10) is SIONPRF4 only, and attested by a version 2 \
                          Pulse header (a ledger with cells)"
                    .into(),
            });
        }
        10 => read_cell_omission(r)?,
        k => {
            return Err(WireError::Invalid { field: "proof kind", problem: format!("unknown kind {k}") });
        }
    })
}

/// A cell omission proof's fields from its log on (kind 10, docs/PROOFS.md).
fn read_cell_omission(r: &mut Reader<'_>) -> Result<Proof, WireError> {
    let log = LogId(r.u64("log")?);
    let head = Head::read(r)?;
    let position = r.u64("position")?;
    let atom = r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec();
    let path = read_path(r)?;
    let cell = u128::from_be_bytes(r.array("cell")?);
    let bad = |problem: String| WireError::Invalid { field: "cell proof", problem };
    let end = match r.u8("cell end")? {
        0 => CellEnd::Empty,
        1 => {
            let key = u128::from_be_bytes(r.array("cell end key")?);
            if key == cell {
                return Err(bad("the cell's own leaf is given as another's (end 1): it is end 2".into()));
            }
            CellEnd::Other(key, r.array("cell end digest")?)
        }
        2 => {
            let n = r.u32("cell logs")? as usize;
            if n == 0 || n > r.remaining() / 8 {
                return Err(bad(format!("{n} logs listed: 1 or more, each 8 bytes, that fit the file")));
            }
            let ids = (0..n).map(|_| r.u64("cell log")).collect::<Result<Vec<_>, _>>()?;
            if ids.windows(2).any(|w| w[0] >= w[1]) {
                return Err(bad("the cell's logs are not strictly ascending".into()));
            }
            CellEnd::Listed(ids)
        }
        e => return Err(bad(format!("end {e}, not 0, 1 or 2"))),
    };
    let n = r.u8("cell siblings")?;
    if n > 128 {
        return Err(bad(format!("{n} siblings, over 128")));
    }
    let siblings = (0..n).map(|_| r.array("cell sibling")).collect::<Result<_, _>>()?;
    Ok(Proof::CellOmission { log, head, position, atom, path, cell, end, siblings })
}

/// Whether a state proof holds under a key; with `checked`, one whose bytes held once is not
/// checked again (`ProofFile::verify_sharing`).
fn state_holds(
    checked: &mut Option<&mut std::collections::HashSet<Digest>>,
    state: &StateProof,
    key: &VerifyingKey,
) -> Result<(), AttestationError> {
    let Some(checked) = checked.as_deref_mut() else { return state.verify(key) };
    let mut bytes = vec![1u8];
    bytes.extend_from_slice(&key.to_bytes());
    state.put(&mut bytes);
    let digest: Digest = *blake3::hash(&bytes).as_bytes();
    if !checked.contains(&digest) {
        state.verify(key)?;
        checked.insert(digest);
    }
    Ok(())
}

fn put_path(out: &mut Vec<u8>, path: &[Digest]) {
    out.put_u8(path.len() as u8);
    for d in path {
        out.put_bytes(d);
    }
}

/// `u8 n` (1 to 255) cosignatures, in strictly ascending order of witness key: one encoding.
fn read_cosignatures(r: &mut Reader<'_>) -> Result<Vec<Cosignature>, WireError> {
    let n = r.u8("cosignatures")?;
    if n == 0 {
        return Err(WireError::Invalid {
            field: "cosignatures",
            problem: "none, in a file that says it is cosigned (attested = 2)".into(),
        });
    }
    let mut out: Vec<Cosignature> = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let c = Cosignature::read(r)?;
        if out.last().is_some_and(|last| last.witness >= c.witness) {
            return Err(WireError::Invalid {
                field: "cosignatures",
                problem: "not in strictly ascending order of witness key".into(),
            });
        }
        out.push(c);
    }
    Ok(out)
}

/// `u32+n` a signed note (n ≤ [`MAX_NOTE_BYTES`], in the one encoding [`SignedNote::encode`]
/// gives) whose text is a checkpoint body, then `u8 n` and the history inclusion path.
fn read_covering(r: &mut Reader<'_>) -> Result<Covering, WireError> {
    let bytes = r.bytes32(MAX_NOTE_BYTES, "checkpoint")?;
    let invalid = |problem: String| WireError::Invalid { field: "checkpoint", problem };
    let note = SignedNote::parse(bytes).map_err(|e| invalid(e.to_string()))?;
    if note.encode().as_bytes() != bytes {
        return Err(invalid("not in its one encoding (base64 with padding, no line twice-spaced)".into()));
    }
    Checkpoint::parse_body(&note.text).map_err(|e| invalid(e.to_string()))?;
    Ok(Covering { note, path: read_path(r)? })
}

fn read_path(r: &mut Reader<'_>) -> Result<Vec<Digest>, WireError> {
    let n = r.u8("path")?;
    (0..n).map(|_| r.array("path")).collect()
}

impl Verified {
    /// Whether `quorum` of the reader's C2SP witnesses cosigned the checkpoint the file showed
    /// covers the attested Pulse: `witnesses` if fewer did (or the file has no checkpoint),
    /// `attestation` if a line under a named witness's name and key ID does not hold (the file
    /// carries no false evidence of the witnesses a reader names).
    pub fn covered_by(&self, cosigners: &Cosigners) -> Result<(), VerifyError> {
        let pulse = self.pulse.map_or(0, |p| p.0);
        let named = cosigners.keys.len();
        let Some((checkpoint, note)) = &self.checkpoint else {
            return Err(VerifyError::Cosigners {
                covering: format!("any checkpoint (the file carries none covering Pulse {pulse})"),
                found: 0,
                named,
                quorum: cosigners.quorum,
            });
        };
        let mut found = 0;
        for (name, raw) in &cosigners.keys {
            // A key that is not a curve point signs nothing.
            let Ok(key) = VerifyingKey::from_bytes(raw) else { continue };
            match note.cosignature_of(name, &key) {
                Cosigned::Absent => {}
                Cosigned::At(_) => found += 1,
                Cosigned::Fails => {
                    return Err(VerifyError::Attestation(AttestationError::Checkpoint {
                        pulse,
                        reason: format!(
                            "the cosignature/v1 of witness {name} on the checkpoint of size {} does not hold",
                            checkpoint.size
                        ),
                    }));
                }
            }
        }
        if found < cosigners.quorum {
            return Err(VerifyError::Cosigners {
                covering: format!("the checkpoint of size {} covering Pulse {pulse}", checkpoint.size),
                found,
                named,
                quorum: cosigners.quorum,
            });
        }
        Ok(())
    }

    /// The id of the atom proved included, if that is the claim.
    pub fn atom_id(&self) -> Option<AtomId> {
        match &self.claim {
            Claim::Included { atom, .. } => Some(atom.id()),
            Claim::Omitted { atom, .. } => Some(atom.id()),
            Claim::Recorded { atom, .. } => Some(atom.id()),
            _ => None,
        }
    }
}
