//! What the ledger holds: accounts, agents, memory logs and their heads (docs/LEDGER.md).

use std::fmt;
use std::str::FromStr;

use crate::merkle::Digest;
use crate::wire::{Put as _, Reader, WireError};

/// An account: an ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Account(pub [u8; 32]);

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Account({})", &hex::encode(self.0)[..16])
    }
}

impl FromStr for Account {
    type Err = hex::FromHexError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut a = [0u8; 32];
        hex::decode_to_slice(s, &mut a)?;
        Ok(Self(a))
    }
}

/// A memory log's number on its ledger, in order of opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogId(pub u64);

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A log's head: how many atoms, their tree hash, and the index and manifest roots the writer
/// committed beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Head {
    /// How many atoms the log holds.
    pub size: u64,
    /// The log's RFC 9162 BLAKE3 tree hash (docs/LOG.md, "The tree").
    pub root: Digest,
    /// The root of the index of the first `size` atoms (docs/INDEX.md, "The root").
    pub index: Digest,
    /// The manifest root the writer committed; attested with the head, not interpreted here.
    pub manifest: Digest,
}

impl Head {
    /// Append u64 size, then root, index and manifest (32 bytes each).
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u64(self.size);
        out.put_bytes(&self.root);
        out.put_bytes(&self.index);
        out.put_bytes(&self.manifest);
    }

    /// Read a head as [`Head::put`] writes it.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            size: r.u64("size")?,
            root: r.array("root")?,
            index: r.array("index")?,
            manifest: r.array("manifest")?,
        })
    }
}

/// A memory log on the ledger (specification v1.9's MemoryLog).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemoryLog {
    /// The log's number; also its leaf index in the state tree.
    pub id: LogId,
    /// The account that opened it, the only one that may commit to it.
    pub writer: Account,
    /// The agent it was opened for, if any.
    pub agent: Option<String>,
    /// The 32-byte policy commitment given when it was opened.
    pub policy: Digest,
    /// Its current head.
    pub head: Head,
    /// The head's sequence number: how many commits moved it.
    pub commits: u64,
    /// The Pulse of the last commit (of the opening, before any commit).
    pub committed_at: u64,
    /// Whether a commit sealed it: a sealed log takes no more commits.
    pub sealed: bool,
    /// Its place among its writer's logs, on a ledger that chains them (leaf version 2,
    /// docs/LEDGER.md, "Pulses"); `None` on a ledger made before chains (leaf version 1).
    pub chain: Option<Chain>,
}

/// A log's neighbours among the logs its writer opened, in order of opening: with every log of
/// a writer in one Pulse's state, the first (no `prev`) through the last (no `next`) prove the
/// writer's whole set of logs at that Pulse (docs/BELIEF.md, "Every log of a reviser").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Chain {
    /// The log its writer opened just before this one.
    pub prev: Option<LogId>,
    /// The log its writer opened just after this one, once it is opened.
    pub next: Option<LogId>,
}

/// "None" in a chain field of a leaf's encoding.
const NO_LOG: u64 = u64::MAX;

fn put_link(out: &mut Vec<u8>, link: Option<LogId>) {
    out.put_u64(link.map_or(NO_LOG, |l| l.0));
}

fn read_link(r: &mut Reader<'_>, field: &'static str) -> Result<Option<LogId>, WireError> {
    Ok(match r.u64(field)? {
        NO_LOG => None,
        id => Some(LogId(id)),
    })
}

impl MemoryLog {
    /// The leaf of the ledger's state tree for this log: version 2 with its chain, version 1
    /// without.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(216);
        out.put_u8(if self.chain.is_some() { 2 } else { 1 });
        out.put_u64(self.id.0);
        out.put_bytes(&self.writer.0);
        match &self.agent {
            None => out.put_u8(0),
            Some(a) => {
                out.put_u8(1);
                out.put_str8(a);
            }
        }
        out.put_bytes(&self.policy);
        self.head.put(&mut out);
        out.put_u64(self.commits);
        out.put_u64(self.committed_at);
        out.put_u8(u8::from(self.sealed));
        if let Some(chain) = &self.chain {
            put_link(&mut out, chain.prev);
            put_link(&mut out, chain.next);
        }
        out
    }

    /// Read exactly what [`MemoryLog::encode`] writes (docs/LEDGER.md, "Pulses"): version 1,
    /// or version 2 with the chain; nothing after.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("version")?;
        if version != 1 && version != 2 {
            return Err(WireError::Invalid { field: "version", problem: "unknown".into() });
        }
        let id = LogId(r.u64("id")?);
        let writer = Account(r.array("writer")?);
        let agent = if r.flag("agent")? { Some(r.str8("agent")?) } else { None };
        let log = Self {
            id,
            writer,
            agent,
            policy: r.array("policy")?,
            head: Head::read(&mut r)?,
            commits: r.u64("commits")?,
            committed_at: r.u64("committed_at")?,
            sealed: r.flag("sealed")?,
            chain: if version == 2 {
                Some(Chain { prev: read_link(&mut r, "prev")?, next: read_link(&mut r, "next")? })
            } else {
                None
            },
        };
        r.finish()?;
        Ok(log)
    }

    /// This log as the state of a Pulse with `logs` logs holds it: a `next` opened after that
    /// Pulse is not there yet. (Logs are opened in order of id, one per Pulse.)
    pub fn as_of_logs(mut self, logs: u64) -> Self {
        if let Some(c) = &mut self.chain
            && c.next.is_some_and(|n| n.0 >= logs)
        {
            c.next = None;
        }
        self
    }
}

/// Whether an agent may act (docs/LEDGER.md, "Transactions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentStatus {
    /// It may open logs, grow them and have agents registered under it, if every agent above
    /// it is live too.
    Live,
    /// Stopped until the operator or the controller of an agent above it reinstates it.
    Suspended,
    /// Stopped for good: revocation is final.
    Revoked,
}

impl AgentStatus {
    /// The status's byte in a `SetAgentStatus` transaction: 0 live, 1 suspended, 2 revoked.
    pub fn code(self) -> u8 {
        match self {
            Self::Live => 0,
            Self::Suspended => 1,
            Self::Revoked => 2,
        }
    }

    /// The status a byte stands for; `None` if it is unknown.
    pub fn from_code(c: u8) -> Option<Self> {
        [Self::Live, Self::Suspended, Self::Revoked].into_iter().find(|s| s.code() == c)
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Live => "live",
            Self::Suspended => "suspended",
            Self::Revoked => "revoked",
        })
    }
}

/// An agent identity. Names are paths: `fleet/robot-7` sits under `fleet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// Its name (see [`valid_agent_name`]).
    pub name: String,
    /// The account that controls it.
    pub controller: Account,
    /// Whether it may act.
    pub status: AgentStatus,
}

/// The agent directly above `name`, if any.
pub fn parent_of(name: &str) -> Option<&str> {
    name.rsplit_once('/').map(|(parent, _)| parent)
}

/// Agent names: 1 to 128 bytes, `/`-separated segments of `[a-z0-9_-]`.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.split('/').all(|seg| {
            !seg.is_empty()
                && seg.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

/// The head of a log nothing was committed to yet: size 0, the empty tree's root, zero index
/// and manifest roots.
pub fn empty_head() -> Head {
    use crate::merkle::{Blake3, TreeHasher as _};
    Head { size: 0, root: Blake3::hash_empty(), index: [0; 32], manifest: [0; 32] }
}
