//! The Reality Memory Protocol's seven verbs — remember, recall, verify, revise, forget, share,
//! audit — and commit and believe, as one API over one writer's memory: what the MCP server
//! (`sion mcp`) calls, and what other surfaces are to call. Each verb takes and returns plain
//! data (JSON-ready), and says what went wrong in words that name the field.

use std::path::Path;

use base64::Engine as _;
use serde::Serialize;
use sion_store::memory::{Memory, MemoryError};
use sion_verify::atom::{Atom, AtomId, LinkRel};
use sion_verify::belief::{Belief, Policy, bundle};
use sion_verify::index::geom::Query;
use sion_verify::proof::Expect;

/// Why a verb failed; the message is for the caller.
#[derive(Debug, thiserror::Error)]
pub enum RmpError {
    #[error("{0}")]
    Memory(#[from] MemoryError),
    #[error("{field}: {problem}")]
    Input { field: String, problem: String },
    #[error("{0}")]
    Refused(String),
}

fn input(field: &str, problem: impl std::fmt::Display) -> RmpError {
    RmpError::Input { field: field.to_owned(), problem: problem.to_string() }
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The memory's identity and committed head.
#[derive(Debug, Serialize)]
pub struct Opened {
    pub log: u64,
    pub writer: String,
    pub ledger_key: String,
    pub size: u64,
    pub committed: u64,
    pub root: String,
    pub pulse: u64,
    pub sealed: bool,
}

#[derive(Debug, Serialize)]
pub struct Remembered {
    /// Durable positions, in the order given.
    pub positions: Vec<u64>,
    /// How many were new (an atom the log held already keeps its position).
    pub new: usize,
}

#[derive(Debug, Serialize)]
pub struct CommittedHead {
    pub size: u64,
    pub root: String,
    pub pulse: u64,
}

#[derive(Debug, Serialize)]
pub struct Recalled {
    /// What the proof proves, in words.
    pub statement: String,
    /// The answer: each atom in docs/ATOM.md's JSON form, with its id and position.
    pub atoms: Vec<serde_json::Value>,
    /// The proof file (docs/PROOFS.md), base64: check it with `verify`, or offline.
    pub proof: String,
    pub head_size: u64,
}

#[derive(Debug, Serialize)]
pub struct Checked {
    pub valid: bool,
    /// What it proves, when valid; why not, when not.
    pub statement: String,
}

#[derive(Debug, Serialize)]
pub struct Revised {
    pub revision: String,
    pub position: u64,
    pub target: String,
    pub state: String,
    pub pulse: u64,
}

#[derive(Debug, Serialize)]
pub struct Believed {
    pub pulse: u64,
    pub beliefs: Vec<Belief>,
    /// The bundle (docs/BELIEF.md, "Bundles"), base64, checked here against the ledger key.
    pub bundle: String,
}

#[derive(Debug, Serialize)]
pub struct Audited {
    pub size: u64,
    pub committed: u64,
    pub root_matches: bool,
    pub first_bad: Option<(u64, String)>,
}

/// One writer's memory behind the verbs.
pub struct Rmp {
    memory: Memory,
}

impl Rmp {
    /// Open the memory in `dir` as its writer, creating it (with an embedded ledger) if there is
    /// none. A memory another process writes (a node, another server) is refused, saying so.
    pub fn open(dir: &Path) -> Result<Self, RmpError> {
        let index = sion_store::index::IndexConfig::default();
        let memory = if dir.join("memory.json").exists() {
            crate::fleet::open(&index, dir)
        } else {
            crate::fleet::create(&index, dir, None, None, false)
        }
        .map_err(|e| match e {
            MemoryError::Log(sion_store::log::LogError::Locked(_))
            | MemoryError::Ledger(sion_store::ledger::LedgerError::Locked(_))
            | MemoryError::Index(sion_store::index::IndexError::Locked(_)) => RmpError::Refused(format!(
                "the memory at {} has a writer already (the node, or another `sion mcp`): a memory has one \
                 writer process; connect to that one (`sion mcp --listen` serves many clients)",
                dir.display()
            )),
            other => other.into(),
        })?;
        Ok(Self { memory })
    }

    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    pub fn opened(&self) -> Opened {
        let c = self.memory.committed();
        Opened {
            log: self.memory.log_id().0,
            writer: hex::encode(self.memory.writer().verifying_key().to_bytes()),
            ledger_key: hex::encode(self.memory.ledger().public_key().to_bytes()),
            size: self.memory.log().size(),
            committed: c.head.size,
            root: hex::encode(c.head.root),
            pulse: c.committed_at,
            sealed: self.memory.space().is_some(),
        }
    }

    /// remember: atoms in docs/ATOM.md's JSON form, durable when this returns.
    pub fn remember(&self, atoms: &[serde_json::Value]) -> Result<Remembered, RmpError> {
        let parsed: Vec<Atom> = atoms
            .iter()
            .enumerate()
            .map(|(i, a)| Atom::from_json(&a.to_string()).map_err(|e| input(&format!("atoms[{i}]"), e)))
            .collect::<Result<_, _>>()?;
        let appended = self.memory.remember(parsed)?;
        Ok(Remembered {
            new: appended.iter().filter(|a| a.new).count(),
            positions: appended.iter().map(|a| a.position).collect(),
        })
    }

    pub fn commit(&mut self) -> Result<CommittedHead, RmpError> {
        let c = self.memory.commit(false)?;
        Ok(CommittedHead { size: c.head.size, root: hex::encode(c.head.root), pulse: c.pulse.header.number })
    }

    /// recall: everything in a frame, box and interval, as of a committed head, with its proof.
    pub fn recall(
        &self,
        frame: &str,
        min_mm: [i64; 3],
        max_mm: [i64; 3],
        from_ns: i64,
        to_ns: i64,
        as_of: Option<u64>,
    ) -> Result<Recalled, RmpError> {
        let query = Query::new(frame, sion_verify::atom::BoxMm { min_mm, max_mm }, from_ns, to_ns)
            .map_err(|e| input("query", e))?;
        let file = self.memory.prove_range(&query, as_of)?;
        let verified = file
            .verify(None)
            .map_err(|e| RmpError::Refused(format!("the proof just made does not verify: {e}")))?;
        let atoms = match &verified.claim {
            sion_verify::proof::Claim::Range { atoms, .. } => atoms
                .iter()
                .map(|(p, a)| {
                    serde_json::from_str(&a.to_json_line(Some(*p))).unwrap_or(serde_json::Value::Null)
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(Recalled {
            statement: verified.statement(),
            atoms,
            proof: B64.encode(file.encode()),
            head_size: verified.head.size,
        })
    }

    /// verify: a proof file (base64) against the ledger key the caller trusts, and what it asked
    /// (docs/PROOFS.md, "What the reader asked"; absent: the question is not checked).
    pub fn verify(
        proof: &str,
        ledger_key: &str,
        expect: Option<&serde_json::Value>,
    ) -> Result<Checked, RmpError> {
        let bytes = B64.decode(proof.trim()).map_err(|e| input("proof", format!("not base64: {e}")))?;
        let mut key = [0u8; 32];
        hex::decode_to_slice(ledger_key, &mut key).map_err(|_| input("ledger_key", "is 64 hex digits"))?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&key)
            .map_err(|_| input("ledger_key", "is not an ed25519 key"))?;
        let expect = match expect {
            Some(e) => Expect::from_json(e).map_err(|e| input("expect", e))?,
            None => Expect::default(),
        };
        Ok(match sion_verify::proof::verify(&bytes, &key, &expect) {
            Ok(v) => Checked { valid: true, statement: v.statement() },
            Err(e) => Checked { valid: false, statement: e.to_string() },
        })
    }

    /// revise: a revision naming the atom at `position` with a state, committed.
    pub fn revise(&mut self, position: u64, state: &str, why: &str) -> Result<Revised, RmpError> {
        let rel = match LinkRel::from_name(state) {
            Some(r) if r.is_state() => r,
            _ => return Err(input("state", "one of supersedes, accepts, disputes, retracts, refutes")),
        };
        let target = self.memory.log().read(position).map_err(|e| input("position", e))?;
        let revision = sion_verify::belief::revision_of(&target, rel, why).map_err(|e| input("why", e))?;
        let appended = self.memory.remember(vec![revision.clone()])?;
        let c = self.memory.commit(false)?;
        Ok(Revised {
            revision: revision.id().to_string(),
            position: appended.first().map(|a| a.position).unwrap_or_default(),
            target: target.id().to_string(),
            state: rel.to_string(),
            pulse: c.pulse.header.number,
        })
    }

    /// believe: the fold under `policy` about atoms (ids, or positions of this log), from this
    /// memory and `others` (read-only, on the same ledger), checked here from its bundle.
    pub fn believe(
        &self,
        policy: &serde_json::Value,
        targets: &[String],
        positions: &[u64],
        others: &[&Memory],
    ) -> Result<Believed, RmpError> {
        let policy: Policy = serde_json::from_value(policy.clone()).map_err(|e| input("policy", e))?;
        let mut ids: Vec<AtomId> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.parse().map_err(|_| input(&format!("targets[{i}]"), "an atom id is 64 hex digits"))
            })
            .collect::<Result<_, _>>()?;
        for &p in positions {
            ids.push(self.memory.log().read(p).map_err(|e| input("positions", e))?.id());
        }
        if ids.is_empty() {
            return Err(input("targets", "nothing to believe about"));
        }
        let mut memories: Vec<&Memory> = vec![&self.memory];
        memories.extend_from_slice(others);
        let trusted: Vec<[u8; 32]> = policy.revisers.iter().map(|r| r.key).collect();
        let (files, pulse) = sion_store::memory::belief::bundle(&memories, &ids, &trusted)?;
        let bytes = bundle::encode(&files);
        let checked = bundle::check(&bytes, &self.memory.ledger().public_key(), &ids, &policy, Some(pulse))
            .map_err(|e| RmpError::Refused(e.to_string()))?;
        Ok(Believed { pulse, beliefs: checked.beliefs, bundle: B64.encode(bytes) })
    }

    /// forget: the payloads of sealed atoms (docs/SEAL.md), recorded and committed.
    pub fn forget(&mut self, positions: &[u64], who: &str, why: &str) -> Result<Vec<u64>, RmpError> {
        let at = self.memory.forget(positions, who, why)?;
        self.memory.commit(false)?;
        Ok(at)
    }

    /// share: add a member (an X-Wing public key, base64) to the space; the wrapped keys to
    /// give them, base64 (`sion memory space join` takes them).
    pub fn share(&mut self, name: &str, member_public: &str) -> Result<String, RmpError> {
        let public = B64
            .decode(member_public.trim())
            .map_err(|e| input("member_public", format!("not base64: {e}")))?;
        let space = self.memory.space().cloned().ok_or_else(|| {
            RmpError::Refused(
                "this memory is not sealed: nothing to share (sion memory open --sealed)".into(),
            )
        })?;
        let (_, wrap) = space.add_member(self.memory.log(), name, &public).map_err(MemoryError::from)?;
        self.memory.commit(false)?;
        Ok(B64.encode(wrap.encode()))
    }

    /// audit: every record re-read, every hash recomputed, the root compared with the head.
    pub fn audit(&self) -> Result<Audited, RmpError> {
        let (audit, committed) = self.memory.audit(|_| {})?;
        let root_matches =
            audit.root_at_mark.is_some_and(|r| r == committed.head.root) || committed.head.size == 0;
        Ok(Audited {
            size: audit.size,
            committed: committed.head.size,
            root_matches,
            first_bad: audit.first_bad,
        })
    }
}
