//! What a sealed memory says about itself in its own log (docs/SEAL.md, "Spaces in the log"
//! and "Forget atoms"): the space's records — its creation, each epoch and its members, each
//! member added — and forget records, each the text payload of an `action` atom in frame
//! `sion`, so that a reader proves by the log's own proofs which epoch sealed an atom, who
//! could read it, and what was forgotten, when and why.

use serde::{Deserialize, Serialize};
use sion_verify::atom::{
    Atom, AtomError, AtomId, AtomParts, BoxMm, Interval, Kind, Link, LinkRel, Payload, Permille,
};

use crate::SealError;

/// The frame of the records' atoms.
pub const FRAME: &str = "sion";
/// The subject of the space's records.
pub const SPACE_SUBJECT: &str = "sion/space";
/// The subject of forget records.
pub const FORGET_SUBJECT: &str = "sion/forget";
/// The format a space's creation record names.
pub const SPACE_FORMAT: &str = "sion-space-v1";
/// Targets a forget atom links to, at most (an atom's limit on links).
pub const MAX_FORGET_LINKS: usize = 256;

/// A space's id: BLAKE3 of its creation record's text, exactly as its atom carries it.
pub fn space_id(creation: &str) -> [u8; 32] {
    *blake3::hash(creation.as_bytes()).as_bytes()
}

/// The log's `policy` (docs/LEDGER.md) for a log sealed in `space`: BLAKE3("sion-space-v1" ||
/// space id). Fixed when the log is opened, so a reader holding the ledger's attestation knows
/// which space the log's sealed atoms belong to.
pub fn policy(space: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(SPACE_FORMAT.as_bytes());
    h.update(space);
    *h.finalize().as_bytes()
}

/// One record of a space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpaceRecord {
    /// The first: the space's id is BLAKE3 of this record's text.
    Create { nonce: [u8; 32], created_ns: i64 },
    /// Epoch `epoch` begins, with these members (their key hashes, ascending); `why` is
    /// `created`, `removed <hex>` or `rotated`.
    Epoch { epoch: u32, members: Vec<[u8; 32]>, why: String },
    /// A member (its key's hash, and a name for people) joins the current epoch.
    Add { epoch: u32, member: [u8; 32], name: String },
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum RawSpace {
    Create { format: String, nonce: String, created_ns: i64 },
    Epoch { epoch: u32, members: Vec<String>, why: String },
    Add { epoch: u32, member: String, name: String },
}

fn hex32(s: &str, field: &str) -> Result<[u8; 32], SealError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).map_err(|_| SealError::Format {
        what: "space record",
        problem: format!("{field} is not 64 hex digits"),
    })?;
    Ok(out)
}

impl SpaceRecord {
    /// Its text: one JSON object, keys in the order shown in docs/SEAL.md.
    pub fn to_text(&self) -> String {
        let raw = match self {
            SpaceRecord::Create { nonce, created_ns } => RawSpace::Create {
                format: SPACE_FORMAT.into(),
                nonce: hex::encode(nonce),
                created_ns: *created_ns,
            },
            SpaceRecord::Epoch { epoch, members, why } => RawSpace::Epoch {
                epoch: *epoch,
                members: members.iter().map(hex::encode).collect(),
                why: why.clone(),
            },
            SpaceRecord::Add { epoch, member, name } => {
                RawSpace::Add { epoch: *epoch, member: hex::encode(member), name: name.clone() }
            }
        };
        // A struct of strings and integers always serialises.
        serde_json::to_string(&raw).unwrap_or_default()
    }

    /// Read a record's text.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "space record", problem };
        let raw: RawSpace = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        Ok(match raw {
            RawSpace::Create { format, nonce, created_ns } => {
                if format != SPACE_FORMAT {
                    return Err(bad(format!("format {format:?}, not {SPACE_FORMAT:?}")));
                }
                SpaceRecord::Create { nonce: hex32(&nonce, "nonce")?, created_ns }
            }
            RawSpace::Epoch { epoch, members, why } => {
                let members = members.iter().map(|m| hex32(m, "a member")).collect::<Result<Vec<_>, _>>()?;
                if members.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(bad("members are not in ascending order, each once".into()));
                }
                SpaceRecord::Epoch { epoch, members, why }
            }
            RawSpace::Add { epoch, member, name } => {
                SpaceRecord::Add { epoch, member: hex32(&member, "member")?, name }
            }
        })
    }
}

/// The atom of a record (its subject, its text, and the targets it names), at `time_ns`:
/// kind `action`, frame `sion`, the point box at the origin, the instant `time_ns`.
pub fn record_atom(subject: &str, text: String, time_ns: i64, targets: &[AtomId]) -> Result<Atom, AtomError> {
    let mut parts = AtomParts::new(
        Kind::Action,
        FRAME,
        BoxMm::point([0, 0, 0]),
        Interval { from_ns: time_ns, to_ns: time_ns.saturating_add(1) },
        Permille(1000),
    );
    parts.subject = subject.to_owned();
    parts.links = targets.iter().map(|t| Link { rel: LinkRel::Supersedes, target: *t }).collect();
    parts.payload = Payload::Text(text);
    Atom::new(parts)
}

/// The text of a record atom of `subject`, if the atom is one.
pub fn record_text<'a>(atom: &'a AtomParts, subject: &str) -> Option<&'a str> {
    match &atom.payload {
        Payload::Text(t) if atom.kind == Kind::Action && atom.frame == FRAME && atom.subject == subject => {
            Some(t)
        }
        _ => None,
    }
}

/// A member as the space lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub key_hash: [u8; 32],
    pub name: String,
}

/// A space's membership, folded from its records in log order.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    space: Option<[u8; 32]>,
    epochs: Vec<Vec<Member>>,
}

impl Membership {
    /// Take the next record (its text as the log holds it).
    pub fn apply(&mut self, text: &str) -> Result<(), SealError> {
        let bad = |problem: String| SealError::Format { what: "space record", problem };
        match SpaceRecord::parse(text)? {
            SpaceRecord::Create { .. } => {
                if self.space.is_some() {
                    return Err(bad("a second creation record".into()));
                }
                self.space = Some(space_id(text));
            }
            SpaceRecord::Epoch { epoch, members, .. } => {
                if self.space.is_none() {
                    return Err(bad("an epoch before the space's creation".into()));
                }
                if epoch as usize != self.epochs.len() {
                    return Err(bad(format!("epoch {epoch} follows {} epochs", self.epochs.len())));
                }
                let named = |h: &[u8; 32]| {
                    self.epochs
                        .iter()
                        .flatten()
                        .find(|m| &m.key_hash == h)
                        .map_or(String::new(), |m| m.name.clone())
                };
                let list = members.iter().map(|h| Member { key_hash: *h, name: named(h) }).collect();
                self.epochs.push(list);
            }
            SpaceRecord::Add { epoch, member, name } => {
                let current = self
                    .epochs
                    .len()
                    .checked_sub(1)
                    .ok_or_else(|| bad("a member added before any epoch".into()))?;
                if epoch as usize != current {
                    return Err(bad(format!("a member added to epoch {epoch}, not the current {current}")));
                }
                let list = &mut self.epochs[current];
                if list.iter().any(|m| m.key_hash == member) {
                    return Err(bad(format!("member {} added twice", hex::encode(member))));
                }
                let at = list.partition_point(|m| m.key_hash < member);
                list.insert(at, Member { key_hash: member, name });
            }
        }
        Ok(())
    }

    /// The space's id, once its creation record was taken.
    pub fn space(&self) -> Option<[u8; 32]> {
        self.space
    }

    /// The current epoch, if any began.
    pub fn current(&self) -> Option<u32> {
        self.epochs.len().checked_sub(1).map(|e| e as u32)
    }

    /// The members of `epoch` (empty if it never began).
    pub fn members(&self, epoch: u32) -> &[Member] {
        self.epochs.get(epoch as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether the key with hash `member` was a member of `epoch`.
    pub fn is_member(&self, epoch: u32, member: &[u8; 32]) -> bool {
        self.members(epoch).iter().any(|m| &m.key_hash == member)
    }
}

/// Leaves `from..to` (end exclusive) of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafRange {
    pub epoch: u32,
    pub from: u64,
    pub to: u64,
}

/// A forget record: who forgot, why, and which leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetRecord {
    pub who: String,
    pub why: String,
    pub leaves: Vec<LeafRange>,
}

#[derive(Serialize, Deserialize)]
struct RawForget {
    op: String,
    who: String,
    why: String,
    leaves: Vec<(u32, u64, u64)>,
}

impl ForgetRecord {
    /// Its text: `{"op":"forget","who":…,"why":…,"leaves":[[epoch,from,to],…]}`.
    pub fn to_text(&self) -> String {
        let raw = RawForget {
            op: "forget".into(),
            who: self.who.clone(),
            why: self.why.clone(),
            leaves: self.leaves.iter().map(|r| (r.epoch, r.from, r.to)).collect(),
        };
        serde_json::to_string(&raw).unwrap_or_default()
    }

    /// Read a forget record's text: every range non-empty and within 2^32 leaves.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let bad = |problem: String| SealError::Format { what: "forget record", problem };
        let raw: RawForget = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if raw.op != "forget" {
            return Err(bad(format!("op {:?}, not \"forget\"", raw.op)));
        }
        let mut leaves = Vec::with_capacity(raw.leaves.len());
        for (i, (epoch, from, to)) in raw.leaves.into_iter().enumerate() {
            if from >= to || to > 1 << crate::DEPTH {
                return Err(bad(format!("leaves[{i}]: [{from}, {to}) is not a range of 32-bit leaves")));
            }
            leaves.push(LeafRange { epoch, from, to });
        }
        Ok(Self { who: raw.who, why: raw.why, leaves })
    }
}
