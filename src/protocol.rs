//! The Reality Memory Protocol's seven verbs — remember, recall, verify, revise, forget, share,
//! audit — and commit and believe, as one API over one writer's memory, each written once:
//! the MCP tools, the node's ROS services and the command line are thin over it. Each verb
//! takes and returns plain data (JSON-ready), and says what went wrong in words that name the
//! field. A verb writes through the memory's [`Intake`] and reads through its [`Readers`];
//! only how a commit is made differs between a memory this process holds and a running node's.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use serde::Serialize;
use sion_brain::CommitNow;
use sion_store::log::Appended;
use sion_store::memory::{
    CommitError, Intake, Memory, MemoryError, OpenError, ProveError, Readers, RememberError,
};
use sion_verify::atom::{Atom, AtomId, LinkRel};
use sion_verify::belief::{Belief, Policy, bundle};
use sion_verify::index::geom::Query;
use sion_verify::proof::{Expect, NearQuery};
use tokio::sync::mpsc::UnboundedSender;

/// Why a verb failed; the message is for the caller.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("{0}")]
    Memory(#[from] MemoryError),
    #[error("{0}")]
    Remember(#[from] RememberError),
    #[error("{0}")]
    Open(#[from] OpenError),
    #[error("{0}")]
    Commit(#[from] CommitError),
    #[error("{0}")]
    Log(#[from] sion_store::log::LogError),
    #[error("{0}")]
    Prove(#[from] ProveError),
    #[error("{field}: {problem}")]
    Input { field: String, problem: String },
    #[error("{0}")]
    Refused(String),
}

fn input(field: &str, problem: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::Input { field: field.to_owned(), problem: problem.to_string() }
}

/// The question about these kinds only, when names are given (`["observation"]`; none or an
/// empty list: every kind).
pub fn of_kinds(query: Query, kinds: Option<&[String]>) -> Result<Query, ProtocolError> {
    let Some(names) = kinds.filter(|k| !k.is_empty()) else { return Ok(query) };
    let mask =
        sion_verify::units::parse_kinds(names.iter().map(String::as_str)).map_err(|e| input("kinds", e))?;
    query.with_kinds(mask).map_err(|e| input("kinds", e.to_string()))
}

/// The question about one subject's atoms only, when one is named (none or empty: every
/// subject).
pub fn of_subject(query: Query, subject: Option<&str>) -> Result<Query, ProtocolError> {
    let Some(subject) = subject.filter(|s| !s.is_empty()) else { return Ok(query) };
    query.with_subject(subject).map_err(|e| input("subject", e.to_string()))
}

/// A range question from JSON as callers write it (docs/UNITS.md): the frame as tf2 names it
/// (`/map` is `map`); each corner's coordinates as numbers (millimetres) or strings with their
/// unit (`"1.5m"`); times as integers (nanoseconds), strings (RFC 3339, `"1767225600.5s"`) or
/// ROS Time objects (`{"sec": 1767225600, "nanosec": 500000000}`).
pub fn question(
    frame: &str,
    min: &[serde_json::Value; 3],
    max: &[serde_json::Value; 3],
    from: &serde_json::Value,
    to: &serde_json::Value,
) -> Result<Query, ProtocolError> {
    use sion_verify::units::{self, Edge};
    let length = |field: &str, v: &serde_json::Value, edge: Edge| -> Result<i64, ProtocolError> {
        match v {
            serde_json::Value::Number(n) => n.as_i64().ok_or_else(|| {
                input(
                    field,
                    format!("{n}: a number is whole millimetres; write metres as a string, \"{n}m\""),
                )
            }),
            serde_json::Value::String(t) => units::length_mm(t, edge).map_err(|e| input(field, e)),
            other => Err(input(
                field,
                format!("{other}: a number (millimetres) or a string with its unit (\"1.5m\")"),
            )),
        }
    };
    let time = |field: &str, v: &serde_json::Value, edge: Edge| -> Result<i64, ProtocolError> {
        match v {
            serde_json::Value::Number(n) => n.as_i64().ok_or_else(|| {
                input(
                    field,
                    format!(
                        "{n}: a number is whole nanoseconds; write seconds as a string, \"{n}s\", or RFC 3339"
                    ),
                )
            }),
            serde_json::Value::String(t) => units::time_ns(t, edge).map_err(|e| input(field, e)),
            // ROS Time, as builtin_interfaces/Time is written in JSON: {"sec": S, "nanosec": N}.
            serde_json::Value::Object(o) if o.contains_key("sec") => {
                let sec = o.get("sec").and_then(serde_json::Value::as_i64);
                let nanosec = o.get("nanosec").map_or(Some(0), serde_json::Value::as_u64);
                match (sec, nanosec.and_then(|n| u32::try_from(n).ok())) {
                    (Some(sec), Some(nanosec)) => {
                        units::ros_time_ns(sec, nanosec).map_err(|e| input(field, e))
                    }
                    _ => Err(input(field, "a ROS Time is {\"sec\": integer, \"nanosec\": 0 to 999999999}")),
                }
            }
            other => Err(input(
                field,
                format!(
                    "{other}: RFC 3339 (\"2026-01-01T00:00:00Z\"), seconds (\"1767225600.5s\"), ROS Time ({{\"sec\", \"nanosec\"}}) or integer nanoseconds"
                ),
            )),
        }
    };
    let mut bounds = sion_verify::atom::BoxMm { min_mm: [0; 3], max_mm: [0; 3] };
    for (axis, name) in ["x", "y", "z"].iter().enumerate() {
        bounds.min_mm[axis] = length(&format!("min.{name}"), &min[axis], Edge::Low)?;
        bounds.max_mm[axis] = length(&format!("max.{name}"), &max[axis], Edge::High)?;
    }
    let from = time("from", from, Edge::Low)?;
    let to = time("to", to, Edge::High)?;
    Query::new(units::frame_name(frame), bounds, from, to).map_err(|e| input("query", e))
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

/// A page of a recall's answer: an agent reads a summary and a few atoms, not hundreds of
/// thousands of characters (docs/MCP.md, "Pages").
#[derive(Debug, Serialize)]
pub struct Recalled {
    /// What the proof proves, in words.
    pub statement: String,
    /// The question as understood, in metres and UTC.
    pub asked: String,
    /// The whole answer in a few lines: how many atoms, of which kinds and subjects, when.
    pub summary: Summary,
    /// This page of the answer: each atom in docs/ATOM.md's JSON form, with its id and
    /// position, in the proof's order.
    pub atoms: Vec<serde_json::Value>,
    /// Where this page starts in the answer.
    pub offset: usize,
    /// Give as `cursor` for the next page (of the same answer, as of the same head); absent on
    /// the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// The proof file of the whole answer (docs/PROOFS.md): read this MCP resource for it
    /// (base64), then check it with `sion_memory_verify` against a ledger key you trust, or
    /// offline (`sion memory verify`). Reading it proves the question again as of the same head.
    pub proof_resource: String,
    /// The proof's size in bytes.
    pub proof_bytes: usize,
    pub head_size: u64,
    /// Why the question cannot match anything the memory holds, naming what it holds (an
    /// unknown frame; an interval or a box outside the frame's); empty when it can match.
    pub warnings: Vec<String>,
}

/// A recall's whole answer in a few lines.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// How many atoms the answer holds (every page together).
    pub atoms: usize,
    /// How many of each kind.
    pub kinds: std::collections::BTreeMap<String, usize>,
    /// The most frequent subjects (at most 20), with how many atoms each.
    pub subjects: Vec<(String, usize)>,
    /// The earliest start and latest end of the atoms' valid times, in UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid: Option<String>,
}

/// Which page of an answer: `limit` atoms from `offset`.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub offset: usize,
    pub limit: usize,
}

impl Page {
    /// Atoms a page holds when the caller does not say.
    pub const DEFAULT: usize = 50;
    /// The most a page holds.
    pub const MAX: usize = 1000;
}

/// The cursor of the page at `offset` of the answer as of `head`: `HEAD:OFFSET`.
fn cursor(head: u64, offset: usize) -> String {
    format!("{head}:{offset}")
}

/// A cursor given back: the head the answer was made as of, and where the page starts.
pub fn parse_cursor(text: &str) -> Result<(u64, usize), ProtocolError> {
    text.split_once(':')
        .and_then(|(h, o)| Some((h.parse().ok()?, o.parse().ok()?)))
        .ok_or_else(|| input("cursor", format!("{text:?} is not a cursor this server gave (HEAD:OFFSET)")))
}

/// The URI of a range question's proof as of a head (an MCP resource; reading it proves the
/// question again): `sion://proof/range?frame=F&box=X,Y,Z,X,Y,Z&from_ns=N&to_ns=N&as_of=N`, the
/// box in millimetres, the frame percent-encoded.
/// A latest or nearest answer: small, so its proof travels with it.
#[derive(Debug, Serialize)]
pub struct Ranked {
    /// What the proof proves, in words.
    pub statement: String,
    /// The question as understood, in metres and UTC.
    pub asked: String,
    /// The answer's atoms (docs/ATOM.md's JSON form, with their positions): the one seen last,
    /// or the nearest first.
    pub atoms: Vec<serde_json::Value>,
    /// For a nearest answer, each atom's distance from the point, metres, in the same order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distances_m: Option<Vec<f64>>,
    /// For a count: how many atoms, for how many seconds in all, the first and last instant
    /// (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<serde_json::Value>,
    /// The proof file, base64: check it with sion_memory_verify against a ledger key you trust.
    pub proof: String,
    pub proof_bytes: usize,
    /// The committed head answered as of (its size).
    pub head_size: u64,
}

impl Ranked {
    fn of(file: &sion_verify::proof::ProofFile, asked: String) -> Result<Self, ProtocolError> {
        let verified = file
            .verify(None)
            .map_err(|e| ProtocolError::Refused(format!("the proof just made does not verify: {e}")))?;
        let json = |p: u64, a: &Atom| {
            serde_json::from_str(&a.to_json_line(Some(p))).unwrap_or(serde_json::Value::Null)
        };
        let (atoms, distances_m) = match &verified.claim {
            sion_verify::proof::Claim::Latest { atom, .. } => {
                (atom.iter().map(|(p, a)| json(*p, a)).collect(), None)
            }
            sion_verify::proof::Claim::Nearest { atoms, .. } => (
                atoms.iter().map(|(p, a, _)| json(*p, a)).collect(),
                Some(atoms.iter().map(|(_, _, d2)| (*d2 as f64).sqrt() / 1e3).collect()),
            ),
            _ => (Vec::new(), None),
        };
        let count = match &verified.claim {
            sion_verify::proof::Claim::Count { counted, .. } => Some(serde_json::json!({
                "atoms": counted.count,
                "seconds": counted.duration_ns as f64 / 1e9,
                "first": counted.span.map(|(f, _)| sion_verify::time::rfc3339(f)),
                "last": counted.span.map(|(_, l)| sion_verify::time::rfc3339(l)),
            })),
            _ => None,
        };
        let bytes = file.encode();
        Ok(Ranked {
            statement: verified.statement(),
            asked,
            atoms,
            distances_m,
            count,
            proof_bytes: bytes.len(),
            proof: B64.encode(bytes),
            head_size: verified.head.size,
        })
    }
}

pub fn proof_uri(query: &Query, head: u64) -> String {
    let b = &query.bounds;
    let mut uri = format!(
        "sion://proof/range?frame={}&box={},{},{},{},{},{}&from_ns={}&to_ns={}&as_of={head}",
        percent_encode(&query.frame),
        b.min_mm[0],
        b.min_mm[1],
        b.min_mm[2],
        b.max_mm[0],
        b.max_mm[1],
        b.max_mm[2],
        query.from_ns,
        query.to_ns
    );
    // The same question, kinds and subject included: reading the URI proves that question.
    if query.filters_kinds() {
        uri.push_str(&format!("&kinds={}", query.kinds));
    }
    if let Some(subject) = &query.subject {
        uri.push_str(&format!("&subject={}", percent_encode(subject)));
    }
    uri
}

/// Every byte outside `[A-Za-z0-9._~-]` as `%XX`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (c as char).to_string(),
            c => format!("%{c:02X}"),
        })
        .collect()
}

/// `%XX` escapes undone; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(raw: &str) -> Option<String> {
    let raw = raw.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok())?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The question and head of a proof URI, or an error naming what is wrong.
pub fn parse_proof_uri(uri: &str) -> Result<(Query, u64), ProtocolError> {
    let bad = |why: &str| input("uri", format!("{uri:?}: {why}"));
    let rest =
        uri.strip_prefix("sion://proof/range?").ok_or_else(|| bad("not a sion://proof/range?… URI"))?;
    let mut fields = std::collections::BTreeMap::new();
    for pair in rest.split('&') {
        let (k, v) = pair.split_once('=').ok_or_else(|| bad("a field without a value"))?;
        fields.insert(k, v);
    }
    let field = |k: &str| fields.get(k).copied().ok_or_else(|| bad(&format!("no {k}")));
    let number = |k: &str| field(k)?.parse::<i64>().map_err(|_| bad(&format!("{k} is not a whole number")));
    let frame =
        percent_decode(field("frame")?).ok_or_else(|| bad("the frame: a bad %-escape, or not UTF-8"))?;
    let corners: Vec<i64> = field("box")?
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| bad("box is not six numbers"))?;
    let [x0, y0, z0, x1, y1, z1] = corners[..] else { return Err(bad("box is not six numbers")) };
    let bounds = sion_verify::atom::BoxMm { min_mm: [x0, y0, z0], max_mm: [x1, y1, z1] };
    let head = u64::try_from(number("as_of")?).map_err(|_| bad("as_of is negative"))?;
    let mut query =
        Query::new(&frame, bounds, number("from_ns")?, number("to_ns")?).map_err(|e| bad(&e.to_string()))?;
    if let Some(kinds) = fields.get("kinds") {
        let mask = kinds.parse::<u32>().map_err(|_| bad("kinds is not a kind mask"))?;
        query = query.with_kinds(mask).map_err(|e| bad(&e.to_string()))?;
    }
    if let Some(subject) = fields.get("subject") {
        let subject =
            percent_decode(subject).ok_or_else(|| bad("the subject: a bad %-escape, or not UTF-8"))?;
        query = query.with_subject(&subject).map_err(|e| bad(&e.to_string()))?;
    }
    Ok((query, head))
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
    /// The bundle (docs/BELIEF.md, "Bundles"), checked here against the ledger key; base64
    /// in JSON.
    #[serde(serialize_with = "base64_bytes")]
    pub bundle: Vec<u8>,
}

/// What `fleet_recall` found: one range question asked of every robot's memory on the fleet
/// ledger as of one Pulse, proved complete across them by the bundle.
#[derive(Debug, Serialize)]
pub struct FleetRecalled {
    /// The Pulse the answer is as of, and its time (RFC 3339; and in ns since the Unix epoch).
    pub pulse: u64,
    pub time: String,
    pub time_ns: i64,
    /// The logs the question reaches (of the group, if named), holding atoms or not.
    pub logs_in_scope: usize,
    /// How many atoms answer, in all.
    pub atoms: usize,
    /// Each log that answered with atoms: its id, agent and how many.
    pub answered: Vec<FleetLogAnswer>,
    /// One sentence: what the bundle proves.
    pub statement: String,
    /// The bundle (docs/PROOFS.md, "Fleet recall": SIONFLT1), checked here against the
    /// ledger's key; base64 in JSON. Check it with `sion fleet verify` or Python
    /// `sion_verify.check_fleet`.
    #[serde(serialize_with = "base64_bytes")]
    pub bundle: Vec<u8>,
}

/// One log's part of a fleet answer.
#[derive(Debug, Serialize)]
pub struct FleetLogAnswer {
    pub log: u64,
    pub agent: Option<String>,
    pub atoms: usize,
}

/// The largest fleet bundle `fleet_recall` hands over a protocol answer (base64 in JSON);
/// a larger one is for `sion fleet recall -o FILE`.
pub const MAX_FLEET_ANSWER_BYTES: usize = 16 << 20;

fn base64_bytes<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&B64.encode(bytes))
}

/// A change that is durable, and whether the commit that followed it landed.
#[derive(Debug, Serialize)]
pub struct Changed<T: Serialize> {
    pub result: T,
    /// The Pulse that committed it; absent when that commit failed.
    pub pulse: Option<u64>,
    /// Why the commit failed: the change is recorded all the same, and the next commit takes
    /// it (asking again would do it twice).
    pub commit_error: Option<String>,
}

impl<T: Serialize> Changed<T> {
    fn after(result: T, committed: Result<CommittedHead, ProtocolError>) -> Self {
        match committed {
            Ok(c) => Self { result, pulse: Some(c.pulse), commit_error: None },
            Err(e) => Self { result, pulse: None, commit_error: Some(e.to_string()) },
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Audited {
    pub size: u64,
    pub committed: u64,
    pub root_matches: bool,
    pub first_bad: Option<(u64, String)>,
}

/// How long a commit through a running node waits for its brain to commit.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The doors of a running node's kernel (sion_brain): its readers prove, its intake writes,
/// and its brain commits when told. Verbs through these never open the memory themselves.
#[derive(Clone)]
pub struct KernelDoors {
    pub readers: Readers,
    pub intake: Intake,
    /// Tells the brain the log grew (its stimulus).
    pub told: UnboundedSender<u64>,
    pub commit_now: CommitNow,
}

/// Who commits the memory the verbs act on.
enum Committer {
    /// This process opened it as its one writer (`sion mcp`, the command line).
    Own(Arc<Mutex<Memory>>),
    /// A running node is its writer: its brain commits when told.
    Brain { told: UnboundedSender<u64>, commit_now: CommitNow },
}

/// The most atoms one `believe` may ask about: each costs a link proof from every log its bundle
/// draws on, so the question's size is bounded before any is made.
pub const MAX_TARGETS: usize = 1024;

/// One writer's memory behind the verbs. Every verb takes `&self` and may be called from many
/// threads at once: the log serialises appends, and a commit covers whatever is durable when it
/// is made. Verbs block (proofs, fsyncs, a node's commit): call them off an async runtime's
/// workers.
pub struct Protocol {
    intake: Intake,
    readers: Readers,
    committer: Committer,
    /// Other revisers' memories (read-only, on the same ledger) that `believe` draws from,
    /// and `fleet_recall` asks.
    others: Vec<PathBuf>,
    /// Held while a fleet recall is answered.
    fleet_turn: Mutex<()>,
}

fn refused_second_writer(dir: &Path) -> impl Fn(OpenError) -> ProtocolError + '_ {
    move |e| match e {
        OpenError::Log(sion_store::log::LogError::Locked(_))
        | OpenError::Ledger(sion_store::ledger::LedgerError::Locked(_))
        | OpenError::Index(sion_store::index::IndexError::Locked(_)) => ProtocolError::Refused(format!(
            "the memory at {} has a writer already (the node, or another `sion mcp`): a memory has one \
             writer process; connect to that one (the node serves MCP with its `mcp_listen` parameter, \
             `sion mcp --listen` serves many clients)",
            dir.display()
        )),
        other => MemoryError::from(other).into(),
    }
}

impl Protocol {
    /// Open the memory in `dir` as its writer, creating it (with an embedded ledger) if there is
    /// none. A memory another process writes (a node, another server) is refused, saying so.
    pub fn open(dir: &Path) -> Result<Self, ProtocolError> {
        let memory = crate::fleet::options(dir).open_or_create().map_err(refused_second_writer(dir))?;
        Ok(Self::over(memory))
    }

    /// The verbs over a memory this process opened (as its writer, or to read it: then the
    /// verbs that write are refused by the memory).
    pub fn over(memory: Memory) -> Self {
        let intake = memory.intake();
        let memory = Arc::new(Mutex::new(memory));
        Self {
            intake,
            readers: Readers::new(Arc::clone(&memory)),
            committer: Committer::Own(memory),
            others: Vec::new(),
            fleet_turn: Mutex::new(()),
        }
    }

    /// The verbs through a running node's kernel: the node stays the memory's one writer.
    pub fn through(doors: KernelDoors) -> Self {
        Self {
            intake: doors.intake,
            readers: doors.readers,
            committer: Committer::Brain { told: doors.told, commit_now: doors.commit_now },
            others: Vec::new(),
            fleet_turn: Mutex::new(()),
        }
    }

    /// Also believe from these memories (read-only, on the same ledger).
    pub fn with_others(mut self, others: Vec<PathBuf>) -> Self {
        self.others = others;
        self
    }

    /// The memory's identity and committed head.
    pub fn opened(&self) -> Opened {
        let (log, writer) = self.readers.identity();
        let c = self.readers.committed();
        Opened {
            log: log.0,
            writer: hex::encode(writer.to_bytes()),
            ledger_key: hex::encode(self.readers.ledger_key().to_bytes()),
            size: self.readers.log_size(),
            committed: c.head.size,
            root: hex::encode(c.head.root),
            pulse: c.committed_at,
            sealed: self.intake.sealed(),
        }
    }

    /// A running node's brain hears that the log grew to `appended` (its stimulus).
    fn tell(&self, appended: impl IntoIterator<Item = u64>) {
        if let Committer::Brain { told, .. } = &self.committer
            && let Some(last) = appended.into_iter().max()
        {
            // The brain may be stopping; the atoms are durable either way.
            let _ = told.send(last);
        }
    }

    fn append(&self, atoms: Vec<Atom>) -> Result<Vec<Appended>, ProtocolError> {
        let appended = self.intake.remember(atoms)?;
        self.tell(appended.iter().map(|a| a.position));
        Ok(appended)
    }

    fn read(&self, position: u64) -> Result<Atom, sion_store::log::LogError> {
        self.readers.read(position)
    }

    /// The key of the memory's ledger: the memory's word for it (a reader chooses its own).
    pub fn ledger_key(&self) -> ed25519_dalek::VerifyingKey {
        self.readers.ledger_key()
    }

    /// remember: atoms in docs/ATOM.md's JSON form, durable when this returns.
    pub fn remember(&self, atoms: &[serde_json::Value]) -> Result<Remembered, ProtocolError> {
        let parsed: Vec<Atom> = atoms
            .iter()
            .enumerate()
            .map(|(i, a)| Atom::from_json(&a.to_string()).map_err(|e| input(&format!("atoms[{i}]"), e)))
            .collect::<Result<_, _>>()?;
        self.remember_atoms(parsed)
    }

    /// remember atoms already parsed (a surface that reads them itself), durable when this
    /// returns.
    pub fn remember_atoms(&self, atoms: Vec<Atom>) -> Result<Remembered, ProtocolError> {
        let appended = self.append(atoms)?;
        Ok(Remembered {
            new: appended.iter().filter(|a| a.new).count(),
            positions: appended.iter().map(|a| a.position).collect(),
        })
    }

    /// commit: the log's durable head (at least everything durable when called) committed to
    /// the ledger; through a node, its brain commits it and this waits (30 s at most) for the
    /// head it commits.
    pub fn commit(&self) -> Result<CommittedHead, ProtocolError> {
        let committed = match &self.committer {
            Committer::Own(m) => {
                m.lock().unwrap_or_else(PoisonError::into_inner).commit(false)?;
                self.readers.committed()
            }
            Committer::Brain { told, commit_now } => {
                let target = self.readers.log_size();
                commit_now.request();
                let _ = told.send(target.saturating_sub(1));
                self.readers.watch_head().wait_until(COMMIT_TIMEOUT, |h| h.head.size >= target).ok_or_else(
                    || {
                        ProtocolError::Refused(format!(
                            "the brain has not committed within {} s (committed {} of {target} atoms; the \
                             atoms are recorded, and the node's log says why its commits fail — a ledger \
                             that cannot be reached?)",
                            COMMIT_TIMEOUT.as_secs(),
                            self.readers.committed().head.size
                        ))
                    },
                )?
            }
        };
        let head = committed.head;
        Ok(CommittedHead { size: head.size, root: hex::encode(head.root), pulse: committed.committed_at })
    }

    /// recall: everything in a frame, box and interval, as of a committed head, with its proof
    /// (the question from [`question`], in any unit people write).
    /// One page of the answer, with a summary of all of it and where its proof is (a page of a
    /// cursor is of the answer as of the cursor's head).
    pub fn recall(&self, query: &Query, as_of: Option<u64>, page: Page) -> Result<Recalled, ProtocolError> {
        // The lock only while the head is chosen: a remember waits on no proof.
        let snapshot = self.readers.snapshot(as_of)?;
        let file = snapshot.range(query)?;
        let warnings = snapshot.mismatches(query)?.iter().map(ToString::to_string).collect();
        let verified = file
            .verify(None)
            .map_err(|e| ProtocolError::Refused(format!("the proof just made does not verify: {e}")))?;
        let all: &[(u64, Atom)] = match &verified.claim {
            sion_verify::proof::Claim::Range { atoms, .. } => atoms,
            _ => &[],
        };
        let mut kinds = std::collections::BTreeMap::new();
        let mut subjects: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let (mut first, mut last) = (i64::MAX, i64::MIN);
        for (_, a) in all {
            let p = a.parts();
            *kinds.entry(p.kind.as_str().to_owned()).or_insert(0) += 1;
            if !p.subject.is_empty() {
                *subjects.entry(&p.subject).or_insert(0) += 1;
            }
            first = first.min(p.valid.from_ns);
            last = last.max(p.valid.to_ns);
        }
        let mut subjects: Vec<(String, usize)> =
            subjects.into_iter().map(|(s, n)| (s.to_owned(), n)).collect();
        subjects.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        subjects.truncate(20);
        let head = verified.head.size;
        let limit = page.limit.clamp(1, Page::MAX);
        let end = page.offset.saturating_add(limit).min(all.len());
        let atoms = all
            .get(page.offset.min(all.len())..end)
            .unwrap_or_default()
            .iter()
            .map(|(p, a)| serde_json::from_str(&a.to_json_line(Some(*p))).unwrap_or(serde_json::Value::Null))
            .collect();
        Ok(Recalled {
            statement: verified.statement(),
            asked: sion_verify::units::show_query(query),
            summary: Summary {
                atoms: all.len(),
                kinds,
                subjects,
                valid: (!all.is_empty()).then(|| sion_verify::units::show_interval(first, last)),
            },
            atoms,
            offset: page.offset,
            next_cursor: (end < all.len()).then(|| cursor(head, end)),
            proof_resource: proof_uri(query, head),
            proof_bytes: file.encode().len(),
            head_size: head,
            warnings,
        })
    }

    /// Which atom of a frame, box and interval was seen last (its valid time ends last), with
    /// its proof inline (docs/PROOFS.md, kind 7: a few KiB).
    pub fn last_seen(&self, query: &Query, as_of: Option<u64>) -> Result<Ranked, ProtocolError> {
        let file = self.readers.snapshot(as_of)?.latest(query)?;
        Ranked::of(&file, sion_verify::units::show_query(query))
    }

    /// How many atoms answer a range question, for how long in all, first and last when, with
    /// the proof inline (docs/PROOFS.md, kind 9).
    pub fn count(&self, query: &Query, as_of: Option<u64>) -> Result<Ranked, ProtocolError> {
        let file = self.readers.snapshot(as_of)?.count(query)?;
        Ranked::of(&file, sion_verify::units::show_query(query))
    }

    /// The k atoms of a frame valid during an interval nearest to a point, nearest first, with
    /// their proof inline (docs/PROOFS.md, kind 8).
    pub fn nearest(&self, query: &NearQuery, as_of: Option<u64>) -> Result<Ranked, ProtocolError> {
        let file = self.readers.snapshot(as_of)?.nearest(query)?;
        let asked = format!(
            "frame {:?}, ({:.3}, {:.3}, {:.3}) m, {}, the {} nearest",
            query.frame,
            query.point_mm[0] as f64 / 1e3,
            query.point_mm[1] as f64 / 1e3,
            query.point_mm[2] as f64 / 1e3,
            sion_verify::units::show_interval(query.from_ns, query.to_ns),
            query.k
        );
        Ranked::of(&file, asked)
    }

    /// The proof of a range question as of a committed head, base64 (what a proof resource
    /// reads: the same question and head give the same proof).
    pub fn range_proof(&self, query: &Query, head: u64) -> Result<String, ProtocolError> {
        let file = self.readers.snapshot(Some(head))?.range(query)?;
        Ok(B64.encode(file.encode()))
    }

    /// verify: a proof file (base64) against the ledger key the caller trusts, and what it asked
    /// (docs/PROOFS.md, "What the reader asked"; absent: the question is not checked).
    pub fn verify(
        proof: &str,
        ledger_key: &str,
        expect: Option<&serde_json::Value>,
    ) -> Result<Checked, ProtocolError> {
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
    pub fn revise(&self, position: u64, state: &str, why: &str) -> Result<Revised, ProtocolError> {
        let rel = match LinkRel::from_name(state) {
            Some(r) if r.is_state() => r,
            _ => return Err(input("state", "one of supersedes, accepts, disputes, retracts, refutes")),
        };
        let target = self.read(position).map_err(|e| input("position", e))?;
        self.revise_atom(&target, rel, why)
    }

    /// revise an atom given whole (one of another memory, say): the revision is this memory's,
    /// committed.
    pub fn revise_atom(&self, target: &Atom, rel: LinkRel, why: &str) -> Result<Revised, ProtocolError> {
        let revision = sion_verify::belief::revision_of(target, rel, why).map_err(|e| input("why", e))?;
        let appended = self.append(vec![revision.clone()])?;
        let c = self.commit()?;
        Ok(Revised {
            revision: revision.id().to_string(),
            position: appended.first().map(|a| a.position).unwrap_or_default(),
            target: target.id().to_string(),
            state: rel.to_string(),
            pulse: c.pulse,
        })
    }

    /// The atoms asked about: ids (64 hex digits), then atoms of this log by position; at most
    /// [`MAX_TARGETS`] (each costs a link proof per log a bundle draws on).
    pub fn atom_ids(&self, targets: &[String], positions: &[u64]) -> Result<Vec<AtomId>, ProtocolError> {
        if targets.len() + positions.len() > MAX_TARGETS {
            return Err(input(
                "targets",
                format!(
                    "{} atoms asked about, more than the {MAX_TARGETS} one question may name: ask in parts",
                    targets.len() + positions.len()
                ),
            ));
        }
        let mut ids: Vec<AtomId> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.parse().map_err(|_| input(&format!("targets[{i}]"), "an atom id is 64 hex digits"))
            })
            .collect::<Result<_, _>>()?;
        for (i, &p) in positions.iter().enumerate() {
            ids.push(self.read(p).map_err(|e| input(&format!("positions[{i}]"), e))?.id());
        }
        if ids.is_empty() {
            return Err(input("targets", "nothing to believe about"));
        }
        Ok(ids)
    }

    /// A belief bundle (docs/BELIEF.md, "Bundles") about `ids` for `policy`'s revisers, from
    /// this memory and the others it was given, as of the ledger's latest Pulse: its bytes and
    /// that Pulse. Not checked here: see [`Protocol::believe`].
    pub fn bundle(&self, policy: &Policy, ids: &[AtomId]) -> Result<(Vec<u8>, u64), ProtocolError> {
        let others = self
            .others
            .iter()
            .map(|d| crate::fleet::options(d).open_read_only())
            .collect::<Result<Vec<_>, _>>()?;
        let others: Vec<&Memory> = others.iter().collect();
        let trusted: Vec<[u8; 32]> = policy.revisers.iter().map(|r| r.key).collect();
        // Locked for each ledger read only: remembering goes on while lists are proved.
        let (files, alone, pulse) = self.readers.belief_bundle(&others, ids, &trusted)?;
        Ok((bundle::encode_with(&files, &alone), pulse))
    }

    /// believe: the fold under `policy` about atoms (ids, or positions of this log), from this
    /// memory and the others it was given (read-only, on the same ledger), as of the ledger's
    /// latest Pulse, checked here from its bundle against the ledger's key.
    pub fn believe(
        &self,
        policy: &serde_json::Value,
        targets: &[String],
        positions: &[u64],
    ) -> Result<Believed, ProtocolError> {
        let policy: Policy = serde_json::from_value(policy.clone()).map_err(|e| input("policy", e))?;
        let ids = self.atom_ids(targets, positions)?;
        let (bytes, pulse) = self.bundle(&policy, &ids)?;
        let checked = bundle::check(&bytes, &self.ledger_key(), &ids, &policy, Some(pulse))
            .map_err(|e| ProtocolError::Refused(e.to_string()))?;
        Ok(Believed { pulse, beliefs: checked.beliefs, bundle: bytes })
    }

    /// fleet_recall: one range question asked of this memory and the others it was given (the
    /// robots' memories this server reads, on the same fleet ledger), as of Pulse `pulse` (the
    /// latest if none), of every log (or of `group`'s agents only): the bundle that proves the
    /// answer complete across robots (docs/PROOFS.md, "Fleet recall"), checked here against
    /// this memory's ledger key. A log in scope holding atoms whose memory this server was not
    /// given, or that cannot answer as of the Pulse, refuses the question, naming it.
    pub fn fleet_recall(
        &self,
        query: &Query,
        group: Option<&str>,
        pulse: Option<u64>,
        by_cells: bool,
    ) -> Result<FleetRecalled, ProtocolError> {
        use crate::fleet::Gap;
        if let Some(g) = group
            && !sion_verify::ledger::valid_agent_name(g)
        {
            return Err(input("group", format!("{g:?} is not an agent name")));
        }
        let Some(url) = self.readers.ledger_url() else {
            return Err(ProtocolError::Refused(
                "this memory is on an embedded ledger, which holds only its own log: a fleet recall asks a fleet ledger's logs (sion memory open --ledger URL)".into(),
            ));
        };
        let key = self.ledger_key();
        let link = crate::fleet::RemoteLedger::connect(&url).map_err(MemoryError::from)?;
        {
            use sion_store::ledger::link::LedgerLink as _;
            if link.public_key() != key {
                return Err(ProtocolError::Refused(format!(
                    "the fleet ledger at {url} answers with key {}, not the key {} this memory pinned",
                    hex::encode(link.public_key().to_bytes()),
                    hex::encode(key.to_bytes())
                )));
            }
        }
        // One at a time: each asks the ledger for every log's state and proves from every
        // memory; a caller past it is told, not queued (ROS callers are not counted otherwise).
        let _turn = match self.fleet_turn.try_lock() {
            Ok(turn) => turn,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(ProtocolError::Refused(
                    "another fleet recall is being answered: ask again when it is done".into(),
                ));
            }
        };
        // The Pulse first, then the memories: one that commits in between is read as of its
        // newer head, which holds the Pulse's.
        let pulse = match pulse {
            Some(p) => p,
            None => {
                use sion_store::ledger::link::LedgerLink as _;
                link.latest().map_err(MemoryError::from)?.header.number
            }
        };
        let mut dirs = vec![self.readers.dir()];
        dirs.extend(self.others.iter().cloned());
        let memories =
            dirs.iter().map(|d| crate::fleet::options(d).open_read_only()).collect::<Result<Vec<_>, _>>()?;
        // By cells (SIONFLT2): only the logs the box's cells list are stated and asked.
        let (recalled, gaps) = crate::fleet::recall(
            &link,
            Some(pulse),
            query,
            group,
            &memories,
            MAX_FLEET_ANSWER_BYTES,
            by_cells,
            |_, _| {},
        )
        .map_err(|e| ProtocolError::Refused(e.to_string()))?;
        let bytes = recalled.bytes;
        let missing: Vec<String> =
            gaps.iter().filter(|g| !matches!(g, Gap::OutOfScope { .. })).map(ToString::to_string).collect();
        if !missing.is_empty() {
            return Err(ProtocolError::Refused(format!(
                "the answer would not be complete, so no bundle is given: {} (this server reads its own memory and those it was given: `sion mcp --also`, the node's believe_from)",
                missing.join("; ")
            )));
        }
        if bytes.len() > MAX_FLEET_ANSWER_BYTES {
            return Err(ProtocolError::Refused(format!(
                "the bundle is {} bytes, over the {MAX_FLEET_ANSWER_BYTES} this answer carries: ask a smaller box or a shorter interval, or use `sion fleet recall -o FILE`",
                bytes.len()
            )));
        }
        let answer = sion_verify::proof::fleet::verify_fleet(&bytes, &key, query, group)
            .map_err(|e| ProtocolError::Refused(format!("the bundle just made does not hold: {e}")))?;
        let time = sion_verify::time::rfc3339(answer.time_ns);
        let statement = format!(
            "these {} atoms are everything the {} log(s){} of this fleet ledger had recorded in {} as of Pulse {} ({time})",
            answer.atoms(),
            answer.in_scope,
            group.map_or(String::new(), |g| format!(" of group {g}")),
            sion_verify::proof::Question::Range(query.clone()),
            answer.pulse,
        );
        Ok(FleetRecalled {
            pulse: answer.pulse,
            time,
            time_ns: answer.time_ns,
            logs_in_scope: answer.in_scope,
            atoms: answer.atoms(),
            answered: answer
                .logs
                .iter()
                .filter(|l| !l.atoms.is_empty())
                .map(|l| FleetLogAnswer { log: l.log.0, agent: l.agent.clone(), atoms: l.atoms.len() })
                .collect(),
            statement,
            bundle: bytes,
        })
    }

    /// forget: the payloads of sealed atoms (docs/SEAL.md), recorded and committed; the forget
    /// atoms' positions (recorded even if the commit then fails: see [`Changed`]).
    pub fn forget(
        &self,
        positions: &[u64],
        who: &str,
        why: &str,
    ) -> Result<Changed<Vec<u64>>, ProtocolError> {
        if positions.is_empty() {
            return Err(input("positions", "name at least one atom"));
        }
        let at = self.intake.forget(positions, who, why)?;
        self.tell(at.iter().copied());
        Ok(Changed::after(at, self.commit()))
    }

    /// share: add a member (an X-Wing public key, base64) to the space; the wrapped keys to
    /// give them, base64 (`sion memory space join` takes them), handed out even if the commit
    /// then fails (the member is recorded; see [`Changed`]).
    pub fn share(&self, name: &str, member_public: &str) -> Result<Changed<String>, ProtocolError> {
        let public = B64
            .decode(member_public.trim())
            .map_err(|e| input("member_public", format!("not base64: {e}")))?;
        let not_sealed = || {
            ProtocolError::Refused(
                "this memory is not sealed: nothing to share (sion memory open --sealed)".into(),
            )
        };
        if !self.intake.sealed() {
            return Err(not_sealed());
        }
        let (appended, wrap) = self.intake.add_member(name, &public)?;
        self.tell([appended.position]);
        Ok(Changed::after(B64.encode(wrap.encode()), self.commit()))
    }

    /// audit: every record re-read, every hash recomputed, the root compared with the head.
    pub fn audit(&self) -> Result<Audited, ProtocolError> {
        let (audit, committed) = self.readers.audit()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A recall's proof resource names its whole question: reading it proves that question,
    /// kinds and subject included, not a wider one.
    #[test]
    fn a_proof_uri_carries_kinds_and_subject() {
        let bounds = sion_verify::atom::BoxMm { min_mm: [-5, 0, 1], max_mm: [9, 9, 9] };
        let plain = Query::new("site/b", bounds, 10, 20).expect("query");
        let asked = [
            plain.clone(),
            plain.clone().with_kinds(0b101).expect("kinds"),
            plain.clone().with_subject("pallet 17 & co=ü").expect("subject"),
            plain.with_kinds(1 << 3).and_then(|q| q.with_subject("%41")).expect("both"),
        ];
        for q in asked {
            let uri = proof_uri(&q, 42);
            assert_eq!(parse_proof_uri(&uri).expect("parses"), (q.clone(), 42), "{uri}");
        }
        assert!(
            parse_proof_uri("sion://proof/range?frame=map&box=0,0,0,1,1,1&from_ns=0&to_ns=1&as_of=1&kinds=0")
                .is_err()
        );
        assert!(
            parse_proof_uri(
                "sion://proof/range?frame=map&box=0,0,0,1,1,1&from_ns=0&to_ns=1&as_of=1&subject=%0A"
            )
            .is_err()
        );
    }
}
