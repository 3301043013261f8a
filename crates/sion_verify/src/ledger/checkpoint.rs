//! C2SP checkpoints of a fleet ledger's history (docs/FLEET-LEDGER.md, "Checkpoints"): the
//! history tree over the Pulse headers, checkpoints as C2SP signed notes
//! (<https://c2sp.org/signed-note>, <https://c2sp.org/tlog-checkpoint>), witness cosignatures
//! of them (`cosignature/v1`, <https://c2sp.org/tlog-cosignature>) and the body of a C2SP
//! tlog-witness `add-checkpoint` request (<https://c2sp.org/tlog-witness>).
//!
//! The history tree is RFC 6962's (SHA-256, leaf `0x00`, node `0x01`): leaf `n` is the encoding
//! of Pulse `n`'s header (89 bytes, or 121 with cells), so a checkpoint of size `n` commits to Pulses `0 … n − 1`
//! and a consistency proof between two checkpoints is the one every C2SP witness checks.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use sha2::Digest as _;

use super::pulse::PulseHeader;
use crate::merkle::{Digest, Sha256, TreeHasher as _, verify_consistency, verify_inclusion};

/// The most bytes a note may have (text and signature lines): a checkpoint with a hundred
/// cosignatures is under 16 KiB.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;

/// The most signature lines a note may carry (C2SP signed-note lets a verifier refuse more).
pub const MAX_NOTE_SIGNATURES: usize = 100;

/// The most consistency-proof lines an `add-checkpoint` request may carry (C2SP tlog-witness).
pub const MAX_PROOF_LINES: usize = 63;

/// Signed-note signature type of an Ed25519 note signature (the log's own).
const TYPE_ED25519: u8 = 0x01;
/// Signed-note signature type of an Ed25519 `cosignature/v1` (a witness's).
const TYPE_COSIGNATURE_V1: u8 = 0x04;

/// The history tree's leaf hash of a Pulse: SHA-256(0x00 || its header's encoding: 89 or 121 bytes).
pub fn history_leaf(header: &PulseHeader) -> Digest {
    Sha256::hash_leaf(&header.encode())
}

/// The origin line of a ledger's checkpoints, fixed by its key so that every front-end of one
/// ledger signs the same text: `sion-ledger/` and the key's 64 lowercase hex digits.
pub fn origin_of(ledger_key: &[u8; 32]) -> String {
    format!("sion-ledger/{}", hex::encode(ledger_key))
}

/// A signed-note key ID: the first four bytes of SHA-256(name || 0x0A || type || public key).
pub fn key_id(name: &str, kind: u8, key: &[u8; 32]) -> u32 {
    let mut h = sha2::Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', kind]);
    h.update(key);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// The C2SP verifier key of a ledger's checkpoints: `origin+keyid(8 hex)+base64(0x01 || key)`,
/// what a C2SP witness or client is configured with.
pub fn ledger_vkey(ledger_key: &[u8; 32]) -> String {
    let origin = origin_of(ledger_key);
    let mut material = vec![TYPE_ED25519];
    material.extend_from_slice(ledger_key);
    format!("{origin}+{:08x}+{}", key_id(&origin, TYPE_ED25519, ledger_key), B64.encode(material))
}

/// The C2SP verifier key of a `cosignature/v1` witness: `name+keyid+base64(0x04 || key)`.
pub fn witness_vkey(name: &str, key: &[u8; 32]) -> String {
    let mut material = vec![TYPE_COSIGNATURE_V1];
    material.extend_from_slice(key);
    format!("{name}+{:08x}+{}", key_id(name, TYPE_COSIGNATURE_V1, key), B64.encode(material))
}

/// Parse a C2SP `cosignature/v1` verifier key (`name+keyid+base64(0x04 || key)`): its name
/// and Ed25519 key, its key ID checked against both. The error says what is wrong with it.
pub fn parse_witness_vkey(vkey: &str) -> Result<(String, VerifyingKey), String> {
    let mut parts = vkey.splitn(3, '+');
    let (Some(name), Some(id), Some(material)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{vkey:?} is not a vkey (name+keyid+base64key)"));
    };
    if !valid_key_name(name) {
        return Err(format!("{vkey:?}: {name:?} is not a key name (no spaces, no plus)"));
    }
    let material = B64.decode(material).map_err(|_| format!("{vkey:?}: its key is not base64"))?;
    let (Some(&TYPE_COSIGNATURE_V1), Ok(raw)) =
        (material.first(), <[u8; 32]>::try_from(&material[1.min(material.len())..]))
    else {
        return Err(format!("{vkey:?}: not a cosignature/v1 Ed25519 key (type 0x04, 32 bytes)"));
    };
    if id.len() != 8 || u32::from_str_radix(id, 16).ok() != Some(key_id(name, TYPE_COSIGNATURE_V1, &raw)) {
        return Err(format!("{vkey:?}: its key ID does not match its name and key"));
    }
    let key = VerifyingKey::from_bytes(&raw).map_err(|_| format!("{vkey:?}: not an Ed25519 key"))?;
    Ok((name.to_owned(), key))
}

/// How a note's `cosignature/v1` line of one witness stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cosigned {
    /// No line under the witness's name and key ID.
    Absent,
    /// The first such line verifies: the witness's time (POSIX seconds).
    At(u64),
    /// The first such line does not verify.
    Fails,
}

/// Why a note, a checkpoint or an `add-checkpoint` body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Not a well-formed note, checkpoint or request: what and where.
    #[error("malformed {what}: {problem}")]
    Malformed {
        /// The part refused (`note`, `signature line 2`, `checkpoint size line`, …).
        what: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Larger than the bound.
    #[error("{what} is {len} bytes or lines, over the bound of {max}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// No signature line of the expected key verifies.
    #[error("no valid signature of {name} (key ID {id:08x}) on this checkpoint")]
    Unsigned {
        /// The key name looked for.
        name: String,
        /// Its key ID.
        id: u32,
    },
    /// The checkpoint is of another log.
    #[error("the checkpoint's origin is {found:?}, not {want:?}")]
    Origin {
        /// The origin line found.
        found: String,
        /// The origin expected.
        want: String,
    },
    /// A Pulse is not in the history the checkpoint commits to.
    #[error("Pulse {pulse} is not in the history of size {size} this checkpoint signs: {reason}")]
    NotIncluded {
        /// The Pulse.
        pulse: u64,
        /// The checkpoint's size.
        size: u64,
        /// Why.
        reason: String,
    },
    /// One checkpoint does not extend the other.
    #[error("the checkpoint of size {new} does not extend the one of size {old}: {reason}")]
    Inconsistent {
        /// The older size.
        old: u64,
        /// The newer size.
        new: u64,
        /// Why.
        reason: String,
    },
}

fn malformed(what: impl Into<String>, problem: impl Into<String>) -> CheckpointError {
    CheckpointError::Malformed { what: what.into(), problem: problem.into() }
}

/// A checkpoint's body (C2SP tlog-checkpoint): the log's origin, the history's size and its
/// root. Extension lines are kept as they came; the ledger writes none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The origin line ([`origin_of`] for a sion ledger).
    pub origin: String,
    /// How many Pulses the history holds (the latest Pulse's number plus one).
    pub size: u64,
    /// The RFC 6962 root of the history tree of `size` leaves.
    pub root: Digest,
    /// Extension lines, without their newlines.
    pub extensions: Vec<String>,
}

impl Checkpoint {
    /// The note text: `origin\nsize\nbase64(root)\n` and any extension lines.
    pub fn body(&self) -> String {
        let mut s = format!("{}\n{}\n{}\n", self.origin, self.size, B64.encode(self.root));
        for e in &self.extensions {
            s.push_str(e);
            s.push('\n');
        }
        s
    }

    /// Parse a note text as a checkpoint body.
    pub fn parse_body(text: &str) -> Result<Self, CheckpointError> {
        let Some(text) = text.strip_suffix('\n') else {
            return Err(malformed("checkpoint", "does not end with a newline"));
        };
        let mut lines = text.split('\n');
        let origin = lines.next().unwrap_or_default();
        if origin.is_empty() {
            return Err(malformed("checkpoint origin line", "empty"));
        }
        let size_line = lines.next().ok_or_else(|| malformed("checkpoint", "no size line"))?;
        let size_ok = !size_line.is_empty()
            && size_line.bytes().all(|b| b.is_ascii_digit())
            && (size_line == "0" || !size_line.starts_with('0'));
        let size = size_line.parse::<u64>().ok().filter(|_| size_ok).ok_or_else(|| {
            malformed(
                "checkpoint size line",
                format!("{size_line:?} is not a decimal without leading zeroes"),
            )
        })?;
        let root_line = lines.next().ok_or_else(|| malformed("checkpoint", "no root hash line"))?;
        let root: Digest = B64
            .decode(root_line)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| malformed("checkpoint root hash line", "not the base64 of 32 bytes"))?;
        let extensions: Vec<String> = lines.map(str::to_owned).collect();
        if extensions.iter().any(String::is_empty) {
            return Err(malformed("checkpoint extension line", "empty"));
        }
        Ok(Self { origin: origin.to_owned(), size, root, extensions })
    }

    /// Check that Pulse `header` is leaf `header.number` of this checkpoint's history, by an
    /// RFC 6962 inclusion proof.
    pub fn includes(&self, header: &PulseHeader, proof: &[Digest]) -> Result<(), CheckpointError> {
        verify_inclusion::<Sha256, _>(header.number, self.size, &history_leaf(header), proof, &self.root)
            .map_err(|e| CheckpointError::NotIncluded {
                pulse: header.number,
                size: self.size,
                reason: e.to_string(),
            })
    }

    /// Check that this checkpoint extends `older` (same origin), by an RFC 6962 consistency
    /// proof. Every history extends the empty one.
    pub fn extends(&self, older: &Checkpoint, proof: &[Digest]) -> Result<(), CheckpointError> {
        let err = |reason: String| CheckpointError::Inconsistent { old: older.size, new: self.size, reason };
        if older.origin != self.origin {
            return Err(err(format!("origins {:?} and {:?}", older.origin, self.origin)));
        }
        if older.size == 0 {
            return if proof.is_empty() { Ok(()) } else { Err(err("a proof from the empty tree".into())) };
        }
        verify_consistency::<Sha256, _>(older.size, self.size, &older.root, &self.root, proof)
            .map_err(|e| err(e.to_string()))
    }
}

/// One signature line of a note: `— name base64(key ID || signature)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// The key name.
    pub name: String,
    /// The key ID (its first four bytes).
    pub id: u32,
    /// What follows the key ID.
    pub signature: Vec<u8>,
}

impl NoteSignature {
    /// The line, newline included.
    pub fn line(&self) -> String {
        let mut bytes = self.id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.signature);
        format!("\u{2014} {} {}\n", self.name, B64.encode(bytes))
    }

    /// Parse one line (without its newline).
    pub fn parse_line(line: &str, what: &str) -> Result<Self, CheckpointError> {
        let rest = line
            .strip_prefix("\u{2014} ")
            .ok_or_else(|| malformed(what, "does not start with an em dash and a space"))?;
        let (name, b64) =
            rest.split_once(' ').ok_or_else(|| malformed(what, "no space after the key name"))?;
        if !valid_key_name(name) {
            return Err(malformed(what, format!("key name {name:?} is empty or holds a space or a plus")));
        }
        let bytes = B64.decode(b64).map_err(|_| malformed(what, "the signature is not base64"))?;
        if bytes.len() < 5 {
            return Err(malformed(what, "shorter than a key ID and a signature"));
        }
        Ok(Self {
            name: name.to_owned(),
            id: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            signature: bytes[4..].to_vec(),
        })
    }
}

/// Whether `name` may name a key (C2SP signed-note: non-empty, no Unicode space, no plus).
pub fn valid_key_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

/// A signed note: its text (ending in a newline) and its signature lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedNote {
    /// The text, newline-terminated.
    pub text: String,
    /// The signatures, in the order they came.
    pub signatures: Vec<NoteSignature>,
}

impl SignedNote {
    /// The note as bytes: the text, an empty line, the signature lines.
    pub fn encode(&self) -> String {
        let mut s = self.text.clone();
        s.push('\n');
        for sig in &self.signatures {
            s.push_str(&sig.line());
        }
        s
    }

    /// Parse a signed note (at most [`MAX_NOTE_BYTES`] and [`MAX_NOTE_SIGNATURES`]).
    pub fn parse(bytes: &[u8]) -> Result<Self, CheckpointError> {
        if bytes.len() > MAX_NOTE_BYTES {
            return Err(CheckpointError::TooLarge { what: "note", len: bytes.len(), max: MAX_NOTE_BYTES });
        }
        let s = std::str::from_utf8(bytes)
            .map_err(|e| malformed("note", format!("not UTF-8 at byte {}", e.valid_up_to())))?;
        if s.chars().any(|c| c.is_control() && c != '\n') {
            return Err(malformed("note", "holds a control character other than newline"));
        }
        // The text ends at the last blank line; the signature block follows it.
        let split =
            s.rfind("\n\n").ok_or_else(|| malformed("note", "no empty line before the signatures"))?;
        let text = &s[..split + 1];
        let sigs = &s[split + 2..];
        let Some(sigs) = sigs.strip_suffix('\n') else {
            return Err(malformed("note", "the signature block does not end with a newline"));
        };
        if sigs.is_empty() {
            return Err(malformed("note", "no signature lines"));
        }
        let lines: Vec<&str> = sigs.split('\n').collect();
        if lines.len() > MAX_NOTE_SIGNATURES {
            return Err(CheckpointError::TooLarge {
                what: "signature lines",
                len: lines.len(),
                max: MAX_NOTE_SIGNATURES,
            });
        }
        let signatures = lines
            .iter()
            .enumerate()
            .map(|(i, l)| NoteSignature::parse_line(l, &format!("signature line {}", i + 1)))
            .collect::<Result<_, _>>()?;
        Ok(Self { text: text.to_owned(), signatures })
    }

    /// Whether a valid Ed25519 note signature of `key` under `name` is on this note (checked
    /// strictly, as the ledger's Pulse signatures are: `verify_strict`).
    pub fn signed_by(&self, name: &str, key: &VerifyingKey) -> bool {
        let id = key_id(name, TYPE_ED25519, &key.to_bytes());
        // The first line of that name and key ID only: names and IDs are public, and a note
        // padded with lines under them must not cost a verification each.
        self.signatures.iter().find(|s| s.name == name && s.id == id).is_some_and(|s| {
            <[u8; 64]>::try_from(s.signature.as_slice()).is_ok_and(|sig| {
                key.verify_strict(self.text.as_bytes(), &Signature::from_bytes(&sig)).is_ok()
            })
        })
    }

    /// The checkpoint this note signs, if `ledger_key` signed it as the log [`origin_of`] it
    /// (an Ed25519 note signature with that name and key ID). Signatures of other keys are
    /// ignored, as C2SP asks.
    pub fn verify_checkpoint(&self, ledger_key: &VerifyingKey) -> Result<Checkpoint, CheckpointError> {
        let raw = ledger_key.to_bytes();
        let origin = origin_of(&raw);
        if !self.signed_by(&origin, ledger_key) {
            return Err(CheckpointError::Unsigned { id: key_id(&origin, TYPE_ED25519, &raw), name: origin });
        }
        let checkpoint = Checkpoint::parse_body(&self.text)?;
        if checkpoint.origin != origin {
            return Err(CheckpointError::Origin { found: checkpoint.origin, want: origin });
        }
        Ok(checkpoint)
    }

    /// The time of a valid `cosignature/v1` of witness `name` with `key` on this note, if it
    /// carries one (lines under other names or key IDs are ignored).
    pub fn cosigned_by(&self, name: &str, key: &VerifyingKey) -> Option<u64> {
        match self.cosignature_of(name, key) {
            Cosigned::At(time) => Some(time),
            Cosigned::Absent | Cosigned::Fails => None,
        }
    }

    /// Whether this note carries a `cosignature/v1` of witness `name` with `key`, and whether
    /// it holds: the first line of that name and key ID only, as for
    /// [`SignedNote::signed_by`]; a time past 2^63 − 1 fails.
    pub fn cosignature_of(&self, name: &str, key: &VerifyingKey) -> Cosigned {
        let id = key_id(name, TYPE_COSIGNATURE_V1, &key.to_bytes());
        let Some(line) = self.signatures.iter().find(|s| s.name == name && s.id == id) else {
            return Cosigned::Absent;
        };
        let holds = line.signature.split_first_chunk::<8>().and_then(|(time, sig)| {
            let sig: [u8; 64] = sig.try_into().ok()?;
            let time = u64::from_be_bytes(*time);
            if time > i64::MAX as u64 {
                return None;
            }
            key.verify(&cosignature_message(time, &self.text), &Signature::from_bytes(&sig))
                .ok()
                .map(|()| time)
        });
        holds.map_or(Cosigned::Fails, Cosigned::At)
    }
}

/// An Ed25519 note signature (signed-note type 0x01) by `key` under `name` over `text`.
pub fn note_signature(key: &SigningKey, name: &str, text: &str) -> NoteSignature {
    NoteSignature {
        name: name.to_owned(),
        id: key_id(name, TYPE_ED25519, &key.verifying_key().to_bytes()),
        signature: key.sign(text.as_bytes()).to_bytes().to_vec(),
    }
}

/// The log's checkpoint note: the body signed by the ledger key under the name [`origin_of`].
pub fn sign_checkpoint(key: &SigningKey, checkpoint: &Checkpoint) -> SignedNote {
    let text = checkpoint.body();
    let signature = note_signature(key, &checkpoint.origin, &text);
    SignedNote { text, signatures: vec![signature] }
}

/// What a `cosignature/v1` signs: `cosignature/v1\ntime T\n` and the checkpoint's note text.
pub fn cosignature_message(time: u64, text: &str) -> Vec<u8> {
    format!("cosignature/v1\ntime {time}\n{text}").into_bytes()
}

/// A witness's `cosignature/v1` line on a checkpoint note's `text`, at POSIX time `time`.
pub fn cosign_v1(key: &SigningKey, name: &str, time: u64, text: &str) -> NoteSignature {
    let mut signature = time.to_be_bytes().to_vec();
    signature.extend_from_slice(&key.sign(&cosignature_message(time, text)).to_bytes());
    NoteSignature {
        name: name.to_owned(),
        id: key_id(name, TYPE_COSIGNATURE_V1, &key.verifying_key().to_bytes()),
        signature,
    }
}

/// The body of a C2SP tlog-witness `add-checkpoint` request: the size the witness last
/// cosigned, a consistency proof from it, and the signed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The old size.
    pub old: u64,
    /// The RFC 6962 consistency proof from `old` to the checkpoint's size (empty from 0).
    pub proof: Vec<Digest>,
    /// The signed checkpoint note.
    pub note: SignedNote,
}

impl AddCheckpoint {
    /// The request body.
    pub fn encode(&self) -> String {
        let mut s = format!("old {}\n", self.old);
        for p in &self.proof {
            s.push_str(&B64.encode(p));
            s.push('\n');
        }
        s.push('\n');
        s.push_str(&self.note.encode());
        s
    }

    /// Parse a request body, bounded ([`MAX_PROOF_LINES`], [`MAX_NOTE_BYTES`]).
    pub fn parse(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let bound = MAX_NOTE_BYTES + 64 * (MAX_PROOF_LINES + 1);
        if bytes.len() > bound {
            return Err(CheckpointError::TooLarge {
                what: "add-checkpoint body",
                len: bytes.len(),
                max: bound,
            });
        }
        let s = std::str::from_utf8(bytes).map_err(|_| malformed("add-checkpoint body", "not UTF-8"))?;
        let (head, note) =
            s.split_once("\n\n").ok_or_else(|| malformed("add-checkpoint body", "no empty line"))?;
        let mut lines = head.split('\n');
        let old_line = lines.next().unwrap_or_default();
        let old = old_line
            .strip_prefix("old ")
            .filter(|d| {
                !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) && (*d == "0" || !d.starts_with('0'))
            })
            .and_then(|d| d.parse::<u64>().ok())
            .ok_or_else(|| malformed("old size line", format!("{old_line:?} is not `old` and a decimal")))?;
        let mut proof = Vec::new();
        for (i, l) in lines.enumerate() {
            if i >= MAX_PROOF_LINES {
                return Err(CheckpointError::TooLarge {
                    what: "consistency proof lines",
                    len: i + 1,
                    max: MAX_PROOF_LINES,
                });
            }
            let d: Digest = B64.decode(l).ok().and_then(|v| v.try_into().ok()).ok_or_else(|| {
                malformed(format!("consistency proof line {}", i + 1), "not the base64 of 32 bytes")
            })?;
            proof.push(d);
        }
        Ok(Self { old, proof, note: SignedNote::parse(note.as_bytes())? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(number: u64) -> PulseHeader {
        PulseHeader {
            number,
            time_ns: number as i64,
            logs: 0,
            state_root: [0; 32],
            prev: [0; 32],
            cells: None,
        }
    }

    #[test]
    fn a_checkpoint_note_round_trips_and_verifies_under_its_key_only() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let cp = Checkpoint {
            origin: origin_of(&key.verifying_key().to_bytes()),
            size: 3,
            root: [9; 32],
            extensions: vec![],
        };
        let note = sign_checkpoint(&key, &cp);
        let parsed = SignedNote::parse(note.encode().as_bytes()).unwrap();
        assert_eq!(parsed, note);
        assert_eq!(parsed.verify_checkpoint(&key.verifying_key()).unwrap(), cp);
        let other = SigningKey::from_bytes(&[8; 32]);
        assert!(matches!(
            parsed.verify_checkpoint(&other.verifying_key()),
            Err(CheckpointError::Unsigned { .. })
        ));
        let mut changed = parsed.clone();
        changed.text = changed.text.replace("\n3\n", "\n4\n");
        assert!(changed.verify_checkpoint(&key.verifying_key()).is_err());
    }

    #[test]
    fn cosignatures_hold_for_their_witness_and_time_only() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let w = SigningKey::from_bytes(&[1; 32]);
        let cp = Checkpoint {
            origin: origin_of(&key.verifying_key().to_bytes()),
            size: 1,
            root: [1; 32],
            extensions: vec![],
        };
        let mut note = sign_checkpoint(&key, &cp);
        let mut line = cosign_v1(&w, "w.example/1", 1_700_000_000, &note.text);
        note.signatures.push(line.clone());
        assert_eq!(note.cosigned_by("w.example/1", &w.verifying_key()), Some(1_700_000_000));
        assert_eq!(note.cosigned_by("w.example/2", &w.verifying_key()), None);
        line.signature[7] ^= 1; // another time under the same signature
        note.signatures[1] = line;
        assert_eq!(note.cosigned_by("w.example/1", &w.verifying_key()), None);
    }

    #[test]
    fn inclusion_and_consistency_over_headers() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let origin = origin_of(&key.verifying_key().to_bytes());
        let headers: Vec<PulseHeader> = (0..13).map(header).collect();
        let tree = crate::merkle::MemoryTree::<Sha256>::from_leaves(headers.iter().map(PulseHeader::encode));
        let cp = Checkpoint { origin: origin.clone(), size: 13, root: tree.root(), extensions: vec![] };
        let path = crate::merkle::inclusion_path::<Sha256, _>(&tree, 5, 13).unwrap();
        cp.includes(&headers[5], &path).unwrap();
        assert!(cp.includes(&headers[6], &path).is_err());
        let old =
            crate::merkle::MemoryTree::<Sha256>::from_leaves(headers[..7].iter().map(PulseHeader::encode));
        let older = Checkpoint { origin, size: 7, root: old.root(), extensions: vec![] };
        let proof = crate::merkle::consistency_path::<Sha256, _>(&tree, 7, 13).unwrap();
        cp.extends(&older, &proof).unwrap();
        let request = AddCheckpoint { old: 7, proof, note: sign_checkpoint(&key, &cp) };
        assert_eq!(AddCheckpoint::parse(request.encode().as_bytes()).unwrap(), request);
    }

    /// The signed-note example published with Go's golang.org/x/mod/sumdb/note (and repeated
    /// by Cloudflare's signed_note): its key ID, its signature line byte for byte, and its
    /// verification.
    #[test]
    fn the_published_signed_note_example() {
        let skey = B64.decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz").unwrap();
        assert_eq!(skey[0], TYPE_ED25519);
        let key = SigningKey::from_bytes(&skey[1..].try_into().unwrap());
        let vkey = B64.decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW").unwrap();
        assert_eq!(vkey[1..], key.verifying_key().to_bytes());
        assert_eq!(key_id("PeterNeumann", TYPE_ED25519, &key.verifying_key().to_bytes()), 0xc74f20a3);
        let text = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
        let line = "\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
        assert_eq!(note_signature(&key, "PeterNeumann", text).line(), line);
        let note = SignedNote::parse(format!("{text}\n{line}").as_bytes()).unwrap();
        assert!(note.signed_by("PeterNeumann", &key.verifying_key()));
        assert!(!note.signed_by("PeterNeumann2", &key.verifying_key()));
    }

    /// C2SP tlog-cosignature's own example: its cosignature line carries the timestamp of its
    /// example signed message, and that message is what we sign for that time and body.
    #[test]
    fn the_published_cosignature_example() {
        let body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        let cp = Checkpoint::parse_body(body).unwrap();
        assert_eq!((cp.origin.as_str(), cp.size), ("example.com/behind-the-sofa", 20852163));
        let line = NoteSignature::parse_line(
            "\u{2014} witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==",
            "example",
        )
        .unwrap();
        assert_eq!(line.signature.len(), 8 + 64);
        let time = u64::from_be_bytes(line.signature[..8].try_into().unwrap());
        assert_eq!(time, 1679315147);
        assert_eq!(
            cosignature_message(time, body),
            b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        );
    }

    #[test]
    fn malformed_notes_and_bodies_name_what_is_wrong() {
        for (bad, what) in [
            (&b"a\n1\n"[..], "note"),
            (b"a\n01\nAAAA\n\n\xe2\x80\x94 a AAAAAAAA\n", "checkpoint size line"),
            (b"a\n1\nAAAA\n\n- a AAAAAAAA\n", "signature line 1"),
        ] {
            let err = SignedNote::parse(bad).and_then(|n| Checkpoint::parse_body(&n.text).map(|_| n));
            match err {
                Err(CheckpointError::Malformed { what: w, .. }) => assert_eq!(w, what, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(AddCheckpoint::parse(b"old 01\n\nx").is_err());
    }
}
