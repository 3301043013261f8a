//! The MCP server: the Reality Memory Protocol's verbs as MCP tools over one writer's memory
//! — `sion mcp` on stdio (one client) or streamable HTTP on loopback (many clients), or the
//! node itself (its `mcp_listen` parameter), whose kernel stays the memory's one writer while
//! ROS clients use it too. Every tool's input has a JSON schema (derived here); every answer is
//! JSON text. A second writer process on the same directory is refused, saying where to
//! connect instead.
//!
//! Over HTTP every request carries a bearer token from the server's token file, or comes over
//! the server's Unix socket from a user it admits, and the token's (or the user's) roles say
//! which tools it may call ([`access`]); connections must bring their request within a bound
//! ([`listen`]); sessions are bounded in number and closed when idle. Over stdio the client is
//! the process that started the server, and has every role.

pub mod access;
pub mod listen;
pub mod stdio;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use access::{AccessError, Grant, Holder, Peers, Role, Tokens};
pub use listen::Listen;
use listen::{Bounded, ConnInfo, Door};

use crate::protocol::{Protocol, ProtocolError};

/// The server: the verbs of one memory, shared by every session.
#[derive(Clone)]
pub struct MemoryServer {
    protocol: Arc<Protocol>,
    calls: Arc<Calls>,
    /// Set only by [`serve_stdio`]: the client is the process that started the server, and has
    /// every role. Anywhere else a call whose HTTP request brought no token's roles is refused.
    local: bool,
}

/// The bound on tool calls in flight, shared by every session and sessionless request: a
/// recall holds its whole proof (up to ~150 MiB while it proves), so the number running at
/// once is what bounds the memory the server uses, however many clients ask.
struct Calls {
    /// Any tool call running, at most this many.
    any: Arc<tokio::sync::Semaphore>,
    /// Of them, provers (recall, believe, audit, verify), at most this many: the others (a
    /// writer's remember, say) keep places however many recalls are queued.
    provers: Arc<tokio::sync::Semaphore>,
    max: usize,
    /// How long a call waits for its place before it is refused as busy.
    wait: Duration,
}

impl Calls {
    fn new(max: usize, wait: Duration) -> Arc<Calls> {
        let max = max.max(1);
        Arc::new(Calls {
            any: Arc::new(tokio::sync::Semaphore::new(max)),
            provers: Arc::new(tokio::sync::Semaphore::new(max.div_ceil(2))),
            max,
            wait,
        })
    }
}

/// What a verb costs: a prover builds or checks a whole proof.
#[derive(Clone, Copy)]
enum Work {
    Light,
    Prove,
}

fn answer<T: serde::Serialize>(r: Result<T, ProtocolError>) -> Result<CallToolResult, McpError> {
    match r {
        Ok(v) => {
            let text = serde_json::to_string_pretty(&v)
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
        }
        // A refusal is the tool's answer (the model reads why), not a protocol error.
        Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())])),
    }
}

impl MemoryServer {
    /// Run a verb on the blocking pool (verbs fsync, prove and, through a node, wait for its
    /// brain, which must not hold up the runtime's workers the node's brain and services run
    /// on) once it has a place among the calls in flight; past [`Calls::wait`] without one, the
    /// answer is a busy refusal to retry.
    async fn call<T, F>(&self, work: Work, verb: F) -> Result<CallToolResult, McpError>
    where
        T: serde::Serialize + Send + 'static,
        F: FnOnce(&Protocol) -> Result<T, ProtocolError> + Send + 'static,
    {
        match self.run(work, move |p| answer(verb(p))).await {
            Ok(result) => result,
            Err(_) => Ok(busy(&self.calls)),
        }
    }

    /// Run `verb` on the blocking pool within the bounds on calls (and on provers, for
    /// `Work::Prove`); `Err` with the reason when no place came free in time.
    async fn run<T, F>(&self, work: Work, verb: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce(&Protocol) -> T + Send + 'static,
    {
        let calls = &self.calls;
        let deadline = tokio::time::Instant::now() + calls.wait;
        let busy = || busy_text(calls);
        // A prover takes its place among provers first, so one waiting holds no general place.
        let prover = match work {
            Work::Light => None,
            Work::Prove => {
                match tokio::time::timeout_at(deadline, calls.provers.clone().acquire_owned()).await {
                    Ok(Ok(p)) => Some(p),
                    _ => return Err(busy()),
                }
            }
        };
        let Ok(Ok(place)) = tokio::time::timeout_at(deadline, calls.any.clone().acquire_owned()).await else {
            return Err(busy());
        };
        let protocol = Arc::clone(&self.protocol);
        // The places go into the blocking task: they are given back when the verb and its
        // answer's text are done, even if the request that asked is dropped meanwhile.
        let done = tokio::task::spawn_blocking(move || {
            let out = verb(&protocol);
            drop((place, prover));
            out
        });
        done.await.map_err(|e| format!("the verb did not finish: {e}"))
    }

    /// The roles of the request's token (or peer); all of them for a local (stdio) server.
    fn grant(&self, context: &RequestContext<RoleServer>) -> Option<Grant> {
        if self.local {
            return Some(Grant::ALL);
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|http| http.extensions.get::<Grant>().copied())
    }
}

/// The answer to a call that found no place in time: a tool error the client (or its model)
/// reads, saying to retry.
fn busy(calls: &Calls) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(busy_text(calls))])
}

fn busy_text(calls: &Calls) -> String {
    format!(
        "busy, retry: this MCP server runs at most {} tool calls at once (at most {} recalls, believes, audits or verifies) and no place came free within {} s; retry in a few seconds (docs/ROS.md, \"Bounds on MCP clients\")",
        calls.max,
        calls.max.div_ceil(2),
        calls.wait.as_secs_f64()
    )
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RememberArgs {
    /// Atoms in docs/ATOM.md's JSON form: kind, frame, min, max (mm), from, to (ns),
    /// confidence (permille), and optionally subject, sources, evidence, extractor, links,
    /// payload.
    pub atoms: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RecallArgs {
    /// The frame asked about (`map`; `/map` is the same, as in tf2).
    pub frame: String,
    /// The box's minimum corner, x, y, z: each a string with its unit ("1.5m", "-2m",
    /// "250mm") or a whole number of millimetres.
    #[schemars(schema_with = "lengths_schema")]
    pub min: [serde_json::Value; 3],
    /// The box's maximum corner, as `min` (corners included).
    #[schemars(schema_with = "lengths_schema")]
    pub max: [serde_json::Value; 3],
    /// Start of the interval (included): RFC 3339 ("2026-01-01T14:00:00Z"), seconds since the
    /// Unix epoch with their unit ("1767225600.5s"), whole nanoseconds, or ROS Time ({"sec",
    /// "nanosec"}).
    #[schemars(schema_with = "time_schema")]
    pub from: serde_json::Value,
    /// End of the interval (excluded; equal to `from` asks about that instant), as `from`.
    #[schemars(schema_with = "time_schema")]
    pub to: serde_json::Value,
    /// The committed head to answer as of (its size); the latest if absent.
    #[serde(default)]
    pub as_of: Option<u64>,
    /// Atoms on this page, at most (default 50, at most 1000); `summary` counts them all.
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before: the next page of the same answer, as of the same
    /// head (the question must be the same).
    #[serde(default)]
    pub cursor: Option<String>,
    /// Only atoms of these kinds ("observation", "pose", "coverage", "map_tile", "transform",
    /// …); absent: every kind. The proof passes over the other kinds whole.
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// Only atoms about this subject ("pallet-17", a track id); absent: every subject. The
    /// proof walks the subject's own tree.
    #[serde(default)]
    pub subject: Option<String>,
}

fn lengths_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "minItems": 3,
        "maxItems": 3,
        "items": {
            "oneOf": [
                {"type": "string", "description": "a length with its unit: \"1.5m\", \"12cm\", \"250mm\""},
                {"type": "integer", "description": "whole millimetres"}
            ]
        }
    })
}

fn time_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "oneOf": [
            {"type": "string", "description": "RFC 3339 (\"2026-01-01T14:00:00Z\") or seconds with their unit (\"1767225600.5s\")"},
            {"type": "integer", "description": "whole nanoseconds since the Unix epoch"},
            {
                "type": "object",
                "description": "ROS Time (builtin_interfaces/Time)",
                "properties": {"sec": {"type": "integer"}, "nanosec": {"type": "integer", "minimum": 0, "maximum": 999999999}},
                "required": ["sec"]
            }
        ]
    })
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct LastSeenArgs {
    /// The frame asked about (`map`; `/map` is the same, as in tf2).
    pub frame: String,
    /// The box's minimum corner, x, y, z: each a string with its unit ("1.5m") or whole
    /// millimetres.
    #[schemars(schema_with = "lengths_schema")]
    pub min: [serde_json::Value; 3],
    /// The box's maximum corner, as `min` (corners included).
    #[schemars(schema_with = "lengths_schema")]
    pub max: [serde_json::Value; 3],
    /// Start of the interval (included), as sion_memory_recall takes it.
    #[schemars(schema_with = "time_schema")]
    pub from: serde_json::Value,
    /// End of the interval (excluded), as `from`.
    #[schemars(schema_with = "time_schema")]
    pub to: serde_json::Value,
    /// The committed head to answer as of (its size); the latest if absent.
    #[serde(default)]
    pub as_of: Option<u64>,
    /// Only atoms of these kinds ("observation", "pose", …); absent: every kind.
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// Only atoms about this subject ("pallet-17"); absent: every subject.
    #[serde(default)]
    pub subject: Option<String>,
}

impl LastSeenArgs {
    /// The question: box, interval, kinds and subject.
    fn query(&self) -> Result<sion_verify::index::geom::Query, ProtocolError> {
        let query = crate::protocol::question(&self.frame, &self.min, &self.max, &self.from, &self.to)?;
        let query = crate::protocol::of_kinds(query, self.kinds.as_deref())?;
        crate::protocol::of_subject(query, self.subject.as_deref())
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct FleetRecallArgs {
    /// The question: frame, box corners, interval (and kinds and subject), as
    /// sion_memory_last_seen takes it, but no `as_of` (refused: each log answers as of the
    /// head the Pulse gives it).
    #[serde(flatten)]
    pub question: LastSeenArgs,
    /// Only the logs of this agent and the agents under it ("warehouse-3"); absent: every log.
    #[serde(default)]
    pub group: Option<String>,
    /// The Pulse to answer as of; the fleet ledger's latest if absent or 0.
    #[serde(default)]
    pub pulse: Option<u64>,
    /// Ask only the logs the fleet ledger's cells list in the box (docs/PROOFS.md, "Fleet
    /// recall by cells"): a smaller bundle when the box is small beside where the fleet goes.
    #[serde(default)]
    pub by_cells: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NearestArgs {
    /// The frame the point is in (`map`).
    pub frame: String,
    /// The point, x, y, z: each a string with its unit ("1.5m") or whole millimetres.
    #[schemars(schema_with = "lengths_schema")]
    pub point: [serde_json::Value; 3],
    /// The instant, as sion_memory_recall takes times; or give `from` and `to` instead.
    #[serde(default)]
    #[schemars(schema_with = "time_schema")]
    pub at: Option<serde_json::Value>,
    /// Start of an interval (included) instead of `at`.
    #[serde(default)]
    #[schemars(schema_with = "time_schema")]
    pub from: Option<serde_json::Value>,
    /// End of that interval (excluded).
    #[serde(default)]
    #[schemars(schema_with = "time_schema")]
    pub to: Option<serde_json::Value>,
    /// How many atoms, the k nearest (default 1, at most 100 here).
    #[serde(default)]
    pub k: Option<u32>,
    /// The committed head to answer as of (its size); the latest if absent.
    #[serde(default)]
    pub as_of: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct VerifyArgs {
    /// A proof file, base64 (as `sion_memory_recall` returns it).
    pub proof: String,
    /// The ledger key you trust, 64 hex digits — not one the proof brings.
    pub ledger_key: String,
    /// What you asked (docs/PROOFS.md, "What the reader asked"), to check the proof answers it.
    #[serde(default)]
    pub expect: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReviseArgs {
    /// The position, in this memory's log, of the atom revised.
    pub position: u64,
    /// supersedes, accepts, disputes, retracts or refutes.
    pub state: String,
    /// Why, in words.
    #[serde(default)]
    pub why: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct BelieveArgs {
    /// The reader's policy (docs/BELIEF.md): `{"revisers":[{"name":…,"key":"<writer key hex>","rank":N}],"prefer":"latest"|"rank"|{"quorum":k}}`.
    pub policy: serde_json::Value,
    /// Atom ids (64 hex digits) to believe about.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Or positions of this memory's log.
    #[serde(default)]
    pub positions: Vec<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ForgetArgs {
    /// Positions of sealed atoms whose payloads to forget.
    pub positions: Vec<u64>,
    /// Who asks (recorded in the forget atom).
    pub who: String,
    /// Why (recorded).
    pub why: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ShareArgs {
    /// A name for people.
    pub name: String,
    /// The member's X-Wing public key (their member.pub), base64.
    pub member_public: String,
}

#[tool_router]
impl MemoryServer {
    /// A server over the memory in `data` (created if absent), as its writer, believing also
    /// from the memories in `others` (read-only, on the same ledger).
    pub fn new(data: &std::path::Path, others: Vec<PathBuf>) -> Result<Self, ProtocolError> {
        Ok(Self::over(Arc::new(Protocol::open(data)?.with_others(others))))
    }

    /// A server over these verbs (a running node's, say: [`Protocol::through`]), shared with the
    /// node's other surfaces.
    pub fn over(protocol: Arc<Protocol>) -> Self {
        Self { protocol, calls: Calls::new(Self::MAX_CALLS, Self::CALL_WAIT), local: false }
    }

    /// Tool calls in flight at once, at most, by default (half of them, rounded up, provers).
    pub const MAX_CALLS: usize = 4;
    /// How long a call waits for its place, by default, before it is refused as busy.
    pub const CALL_WAIT: Duration = Duration::from_secs(10);

    /// This server with at most `max` tool calls in flight at once (at least 1; half of them,
    /// rounded up, provers), a call waiting at most `wait` for its place.
    pub fn with_calls(mut self, max: usize, wait: Duration) -> Self {
        self.calls = Calls::new(max, wait);
        self
    }

    #[tool(
        description = "The memory: its log number, writer key, ledger key, how many atoms it holds and its committed head."
    )]
    async fn sion_memory_open(&self) -> Result<CallToolResult, McpError> {
        self.call(Work::Light, |r| Ok(r.opened())).await
    }

    #[tool(
        description = "Remember atoms (docs/ATOM.md JSON form): appended durably; returns their positions. Not yet committed: call sion_memory_commit."
    )]
    async fn sion_memory_remember(
        &self,
        Parameters(a): Parameters<RememberArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Light, move |r| r.remember(&a.atoms)).await
    }

    #[tool(
        description = "Commit the log's durable head to the ledger; returns the head and the Pulse that stamps it."
    )]
    async fn sion_memory_commit(&self) -> Result<CallToolResult, McpError> {
        self.call(Work::Light, |r| r.commit()).await
    }

    #[tool(
        description = "What was seen in this box during this interval, as of a committed head: a summary of the whole answer (how many atoms, of which kinds and subjects, when), one page of its atoms (limit, default 50; next_cursor for the next), and proof_resource, an MCP resource holding the proof that the answer is complete (an empty answer included) — read it and check it with sion_memory_verify against a ledger key you trust. Box corners in metres (\"1.5m\") or whole millimetres; times as RFC 3339, seconds with their unit (\"1767225600.5s\"), nanoseconds or ROS Time {sec, nanosec}."
    )]
    async fn sion_memory_recall(
        &self,
        Parameters(a): Parameters<RecallArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |r| {
            let query = crate::protocol::question(&a.frame, &a.min, &a.max, &a.from, &a.to)?;
            let query = crate::protocol::of_kinds(query, a.kinds.as_deref())?;
            let query = crate::protocol::of_subject(query, a.subject.as_deref())?;
            let limit = a.limit.map_or(crate::protocol::Page::DEFAULT, |l| l as usize);
            let (as_of, offset) = match &a.cursor {
                None => (a.as_of, 0),
                Some(c) => {
                    let (head, offset) = crate::protocol::parse_cursor(c)?;
                    if a.as_of.is_some_and(|h| h != head) {
                        return Err(ProtocolError::Input {
                            field: "cursor".into(),
                            problem: format!("its head {head} is not as_of {}", a.as_of.unwrap_or_default()),
                        });
                    }
                    (Some(head), offset)
                }
            };
            r.recall(&query, as_of, crate::protocol::Page { offset, limit })
        })
        .await
    }

    #[tool(
        description = "Which atom in this box during this interval (of these kinds, about this subject, if named) was seen last (its valid time ends last; the later one recorded on a tie), as of a committed head, or that none was: the atom, the statement, and the proof (base64, a few KiB) that nothing later answers — check it with sion_memory_verify (expect {\"latest\": {frame, box, from_ns, to_ns}}) against a ledger key you trust. Corners in metres (\"1.5m\") or whole millimetres; times as sion_memory_recall takes them."
    )]
    async fn sion_memory_last_seen(
        &self,
        Parameters(a): Parameters<LastSeenArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |r| r.last_seen(&a.query()?, a.as_of)).await
    }

    #[tool(
        description = "How many atoms in this box during this interval (of these kinds, about this subject, if named), for how many seconds in all (each atom's valid time cut to the interval, summed), the first and last instant, as of a committed head — with the proof (base64, its size does not grow with the count: subtrees inside the question are taken by the counts their nodes commit to). Check it with sion_memory_verify (expect {\"count\": {frame, box, from_ns, to_ns, kinds, subject}}). Corners in metres (\"1.5m\") or whole millimetres; times as sion_memory_recall takes them."
    )]
    async fn sion_memory_count(
        &self,
        Parameters(a): Parameters<LastSeenArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |r| r.count(&a.query()?, a.as_of)).await
    }

    #[tool(
        description = "The k atoms (default 1, at most 100) nearest to a point at an instant (or during an interval), as of a committed head: of the frame's atoms valid then, those whose boxes are nearest to the point, nearest first (ties by log position), each with its distance in metres, and the proof (base64) that nothing nearer exists — check it with sion_memory_verify (expect {\"nearest\": {frame, point, from_ns, to_ns, k}}). The point in metres (\"1.5m\") or whole millimetres; times as sion_memory_recall takes them."
    )]
    async fn sion_memory_nearest(
        &self,
        Parameters(a): Parameters<NearestArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |r| {
            let (from, to) = match (&a.at, &a.from, &a.to) {
                (Some(t), None, None) => (t.clone(), t.clone()),
                (None, Some(f), Some(t)) => (f.clone(), t.clone()),
                _ => {
                    return Err(ProtocolError::Input {
                        field: "at".into(),
                        problem: "give the instant (at), or an interval (from and to), not both".into(),
                    });
                }
            };
            let k = a.k.unwrap_or(1);
            if !(1..=100).contains(&k) {
                return Err(ProtocolError::Input {
                    field: "k".into(),
                    problem: format!(
                        "{k}: ask for 1 to 100 atoms here (the command line takes up to 10,000)"
                    ),
                });
            }
            // A point is a box of one point; its minimum corner is the point, rounded down.
            let q = crate::protocol::question(&a.frame, &a.point, &a.point, &from, &to)?;
            let near = sion_verify::proof::NearQuery::new(&q.frame, q.bounds.min_mm, q.from_ns, q.to_ns, k)
                .map_err(|problem| ProtocolError::Input { field: "point".into(), problem })?;
            r.nearest(&near, a.as_of)
        })
        .await
    }

    #[tool(
        description = "Check a proof file against the ledger key you trust and what you asked; says what it proves, or why not."
    )]
    async fn sion_memory_verify(
        &self,
        Parameters(a): Parameters<VerifyArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |_| Protocol::verify(&a.proof, &a.ledger_key, a.expect.as_ref())).await
    }

    #[tool(
        description = "Revise an atom: a revision naming it with a state (supersedes, accepts, disputes, retracts, refutes), committed. Nothing is deleted."
    )]
    async fn sion_memory_revise(
        &self,
        Parameters(a): Parameters<ReviseArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Light, move |r| r.revise(a.position, &a.state, &a.why)).await
    }

    #[tool(
        description = "What a reader believes about atoms under its policy (docs/BELIEF.md): the fold over trusted revisers' revisions, checked from a bundle of proofs, returned with it."
    )]
    async fn sion_memory_believe(
        &self,
        Parameters(a): Parameters<BelieveArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |r| r.believe(&a.policy, &a.targets, &a.positions)).await
    }

    #[tool(
        description = "What any robot of the fleet recorded in this box during this interval (of these kinds, about this subject, if named), as of one Pulse of the fleet ledger (the latest unless pulse is given), from every log on it (or of one group of agents: an agent name and every agent under it): how many atoms each robot's log answers with, and the bundle (base64, docs/PROOFS.md \"Fleet recall\") that proves the answer complete across robots — a robot left out, a stale answer or a lying one is refused by its reader. Check it with `sion fleet verify` or Python sion_verify.check_fleet against a ledger key you trust. Needs this memory on a fleet ledger and the other robots' memories named by `sion mcp --also`; refused, naming the log, when one in scope cannot answer. Corners in metres (\"1.5m\") or whole millimetres; times as sion_memory_recall takes them."
    )]
    async fn sion_fleet_recall(
        &self,
        Parameters(a): Parameters<FleetRecallArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, move |r| {
            if a.question.as_of.is_some() {
                return Err(ProtocolError::Input {
                    field: "as_of".into(),
                    problem:
                        "a fleet recall is asked as of a Pulse (pulse), each log as of the head it gives"
                            .into(),
                });
            }
            let query = a.question.query()?;
            // Pulse 0, the genesis, holds no log: 0 asks for the latest, as over ROS.
            r.fleet_recall(&query, a.group.as_deref(), a.pulse.filter(|p| *p != 0), a.by_cells)
        })
        .await
    }

    #[tool(
        description = "Forget the payloads of sealed atoms: a forget atom is recorded and the keys destroyed; the atoms stay in the log and its proofs. Only a sealed memory forgets."
    )]
    async fn sion_memory_forget(
        &self,
        Parameters(a): Parameters<ForgetArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Light, move |r| r.forget(&a.positions, &a.who, &a.why)).await
    }

    #[tool(
        description = "Share a sealed memory: add a member (an X-Wing public key, base64); returns the keys wrapped to them (base64) for `sion memory space join`."
    )]
    async fn sion_memory_share(
        &self,
        Parameters(a): Parameters<ShareArgs>,
    ) -> Result<CallToolResult, McpError> {
        self.call(Work::Light, move |r| r.share(&a.name, &a.member_public)).await
    }

    #[tool(
        description = "Audit the memory: every record re-read, every hash recomputed, the root compared with the committed head."
    )]
    async fn sion_memory_audit(&self) -> Result<CallToolResult, McpError> {
        self.call(Work::Prove, |r| r.audit()).await
    }
}

#[tool_handler]
impl ServerHandler for MemoryServer {
    /// Every call is checked against the roles of the token its HTTP request carried (put
    /// there by [`serve_http`]'s guard). Only a server [`serve_stdio`] runs grants every role
    /// without one: a request that reaches the tools by a path bringing no token's roles (a
    /// transport or rmcp path not known here) is refused, not served as the admin's.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let grant = self.grant(&context);
        let needs = Role::of_tool(&request.name);
        if !grant.is_some_and(|g| g.allows(needs)) {
            let peer = context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|http| http.extensions.get::<PeerUid>().copied());
            let text = match (grant, peer) {
                (Some(g), Some(PeerUid(uid))) => format!(
                    "refused: {} needs the role {} (or admin); this request, from uid {uid} over the Unix socket, has the role {} (`--unix-role`, `--unix-allow`; docs/ROS.md, \"Who may call the MCP tools\")",
                    request.name,
                    needs.name(),
                    g.describe()
                ),
                _ => format!(
                    "refused: {} needs a token with the role {} (or admin); this request has {} (docs/ROS.md, \"Who may call the MCP tools\")",
                    request.name,
                    needs.name(),
                    grant.map_or_else(|| "no token".into(), |g| format!("a token of role {}", g.describe()))
                ),
            };
            return Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into());
        }
        // A sessionless request's place among the sessions is held until its answer is made:
        // the tool router drops the request's context as soon as it has read the arguments.
        let place = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|http| http.extensions.get::<Arc<Sessionless>>().cloned());
        let answer = Self::tool_router().call(ToolCallContext::new(self, request, context)).await;
        drop(place);
        answer
    }

    /// `sion://proof/range?…` (a recall's `proof_resource`): the proof of that question as of
    /// that head, base64, made again (the same question and head give the same proof). Read
    /// with the role of a recall, within the same bounds on provers.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let needs = Role::of_tool("sion_memory_recall");
        if !self.grant(&context).is_some_and(|g| g.allows(needs)) {
            return Err(McpError::invalid_request(
                format!("reading a proof needs a token with the role {} (or admin)", needs.name()),
                None,
            ));
        }
        let uri = request.uri.clone();
        let proof = self
            .run(Work::Prove, move |r| {
                let (query, head) = crate::protocol::parse_proof_uri(&uri)?;
                r.range_proof(&query, head)
            })
            .await
            .map_err(|busy| McpError::internal_error(busy, None))?
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::blob(proof, request.uri).with_mime_type("application/vnd.sion.proof"),
        ])
        .into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let template = ResourceTemplate::new(
            "sion://proof/range?frame={frame}&box={box}&from_ns={from_ns}&to_ns={to_ns}&as_of={as_of}",
            "range proof",
        )
        .with_title("The proof of a recall's answer")
        .with_description(
            "A proof file (docs/PROOFS.md), base64, that the atoms in frame, box (mm: x,y,z,x,y,z) and [from_ns, to_ns) as of the committed head as_of are all there are (with &kinds=MASK, bit k for kind code k, of those kinds only; with &subject=S, percent-encoded, about that subject only); sion_memory_recall gives each answer's URI",
        )
        .with_mime_type("application/vnd.sion.proof");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("sion_memory", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A robot's memory it can prove: remember atoms, commit, recall with proofs, verify them against a ledger key you trust, revise, and believe under your own policy.",
            )
    }
}

/// What a client proves who it is with.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Credential {
    /// `Authorization: Bearer TOKEN`, a token of this file (over TCP or a Unix socket).
    Tokens(Arc<Tokens>),
    /// The peer's uid over the Unix socket (`SO_PEERCRED`): only with [`Listen::Unix`].
    Peers(Arc<Peers>),
}

impl From<Tokens> for Credential {
    fn from(t: Tokens) -> Credential {
        Credential::Tokens(Arc::new(t))
    }
}

impl From<Peers> for Credential {
    fn from(p: Peers) -> Credential {
        Credential::Peers(Arc::new(p))
    }
}

/// How the HTTP server admits clients: the credential, and the bounds on connections, sessions
/// and requests.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub credential: Credential,
    /// Connections open at once, at most; past it the next waits in the kernel's queue until
    /// one closes.
    pub max_connections: usize,
    /// A connection must bring a whole request head within this of opening or of its last
    /// answer, or is closed; a request's body must arrive within this of its head (408).
    pub request_read: Duration,
    /// A request head (request line and headers), at most (bytes); past it the connection is
    /// closed.
    pub max_head: usize,
    /// Sessions open at once, at most, a sessionless request counted as a session while it is
    /// served; an `initialize` (or sessionless request) past it is refused (503).
    pub max_sessions: usize,
    /// Of them, at most this many for any one token, so that one holder cannot take every
    /// place and keep it with pings.
    pub max_sessions_per_token: usize,
    /// Tool calls in flight at once, at most ([`MemoryServer::with_calls`]).
    pub max_calls: usize,
    /// How long a tool call waits for its place before it is refused as busy.
    pub call_wait: Duration,
    /// A session with no request this long is closed.
    pub idle: Duration,
    /// A request's body, at most (bytes); a larger one is refused (413).
    pub max_body: usize,
}

impl HttpOptions {
    pub const MAX_SESSIONS: usize = 64;
    pub const IDLE: Duration = Duration::from_secs(120);
    pub const MAX_CONNECTIONS: usize = 256;
    pub const REQUEST_READ: Duration = Duration::from_secs(10);
    pub const MAX_HEAD: usize = 32 << 10;

    /// This credential (tokens, or Unix peers), and the default bounds: 256 connections, each
    /// bringing its request head (at most 32 KiB) within 10 s and its body within 10 s more;
    /// 64 sessions, half of them for one holder, 120 s idle (longer than any tool call should
    /// take: rmcp counts a call in progress as idle), 16 MiB a request (as a stdio line), 4
    /// tool calls at once, each waiting 10 s at most.
    pub fn new(credential: impl Into<Credential>) -> Self {
        Self {
            credential: credential.into(),
            max_connections: Self::MAX_CONNECTIONS,
            request_read: Self::REQUEST_READ,
            max_head: Self::MAX_HEAD,
            max_sessions: Self::MAX_SESSIONS,
            max_sessions_per_token: Self::MAX_SESSIONS / 2,
            max_calls: MemoryServer::MAX_CALLS,
            call_wait: MemoryServer::CALL_WAIT,
            idle: Self::IDLE,
            max_body: stdio::MAX_LINE,
        }
    }
}

/// Serve `server` on stdio until its client closes stdin; a line over [`stdio::MAX_LINE`] is
/// answered with a JSON-RPC error and the next one read.
pub async fn serve_stdio(server: MemoryServer) -> Result<(), McpServeError> {
    use rmcp::ServiceExt as _;
    let server = MemoryServer { local: true, ..server };
    let (transport, writer) =
        stdio::LineTransport::new(tokio::io::stdin(), tokio::io::stdout(), stdio::MAX_LINE);
    let running = server
        .serve(transport)
        .await
        .map_err(|e| McpServeError::Session(format!("starting the stdio session: {e}")))?;
    running.waiting().await.map_err(|e| McpServeError::Session(format!("the stdio session: {e}")))?;
    // Every answer given is written before the process goes.
    let _ = writer.await;
    Ok(())
}

/// What the guard in front of the service shares.
struct Guard {
    options: HttpOptions,
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    /// Whose each session is. Held while an `initialize` is served, so the count of sessions
    /// cannot pass the bound between the check and the session's creation.
    opening: tokio::sync::Mutex<HashMap<String, Holder>>,
    /// Sessionless requests (MCP 2026-07-28) being served, by token: each counts as a session
    /// until its answer is made.
    sessionless: Arc<std::sync::Mutex<HashMap<Holder, usize>>>,
}

/// A sessionless request's place among the sessions: carried in the request's extensions, and
/// held by the tool call it asks for ([`MemoryServer::call_tool`]) until its answer is made.
#[derive(Debug)]
struct Sessionless {
    holder: Holder,
    all: Arc<std::sync::Mutex<HashMap<Holder, usize>>>,
}

impl Drop for Sessionless {
    fn drop(&mut self) {
        // A poisoned count still counts: a panic elsewhere must not leak places.
        let mut all = self.all.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = all.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.holder);
            }
        }
    }
}

impl Guard {
    /// Whether `holder` may have one more session (or sessionless request) now: the sessions
    /// open and the sessionless requests in flight, in all and of this holder, against the
    /// bounds. Called with `owners` locked (the `opening` lock); forgets sessions closed since.
    async fn room(
        &self,
        owners: &mut HashMap<String, Holder>,
        holder: Holder,
    ) -> Result<(), axum::response::Response> {
        let open: std::collections::HashSet<String> =
            self.sessions.sessions.read().await.keys().map(|id| id.to_string()).collect();
        owners.retain(|id, _| open.contains(id));
        let (flying, flying_mine) = {
            let all = self.sessionless.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            (all.values().sum::<usize>(), all.get(&holder).copied().unwrap_or(0))
        };
        let total = open.len() + flying;
        let idle = self.options.idle.as_secs();
        if total >= self.options.max_sessions {
            tracing::warn!("an MCP session was refused: {total} are open, the bound");
            return Err(refusal(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                -32002,
                format!(
                    "this MCP server has {total} sessions open (sessionless requests in flight included), its bound: close one (DELETE), or wait for an idle one to close ({idle} s)"
                ),
            ));
        }
        let mine = owners.values().filter(|h| **h == holder).count() + flying_mine;
        let per = self.options.max_sessions_per_token.max(1);
        if mine >= per {
            tracing::warn!("an MCP session was refused: its token has {mine} open, the bound for one token");
            return Err(refusal(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                -32002,
                format!(
                    "this token has {mine} sessions open on this MCP server (sessionless requests in flight included), the bound for one token: close one of them (DELETE), or wait for an idle one to close ({idle} s)"
                ),
            ));
        }
        Ok(())
    }
}

/// Serve `server` as streamable HTTP at `http://ADDR/mcp`, or at `/mcp` over the Unix socket
/// `unix:PATH`, until `stop` resolves; `ready` hears where (port 0 picks one). TCP on loopback
/// only (tokens travel in clear). A request without the credential of `options` (a token, or a
/// Unix peer it admits) is refused (401, 403) once its head is read, before anything else is
/// read or done for it; a connection that brings no whole head in time is closed.
pub async fn serve_http(
    server: MemoryServer,
    listen: impl Into<Listen>,
    options: HttpOptions,
    ready: impl FnOnce(Listen),
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), McpServeError> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let listen = listen.into();
    let others = match (&listen, &options.credential) {
        (Listen::Tcp(addr), _) if !addr.ip().is_loopback() => return Err(McpServeError::NotLoopback(*addr)),
        (Listen::Tcp(_), Credential::Peers(_)) => return Err(McpServeError::PeersNeedUnix),
        (_, Credential::Peers(p)) => p.admits_others(),
        _ => false,
    };
    let (max_connections, request_read, max_head) =
        (options.max_connections, options.request_read, options.max_head);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.idle);
    // rmcp keeps each answer sent (a recall's may be tens of MB) for a late resume of its
    // stream, 60 s by default; these clients do not resume, so nothing is kept once sent.
    sessions.session_config.completed_cache_ttl = Duration::ZERO;
    let sessions = Arc::new(sessions);
    let server = server.with_calls(options.max_calls, options.call_wait);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        sessions.clone(),
        StreamableHttpServerConfig::default().with_max_request_body_bytes(options.max_body),
    );
    let guard = Arc::new(Guard {
        options,
        sessions,
        opening: tokio::sync::Mutex::new(HashMap::new()),
        sessionless: Arc::default(),
    });
    // `watch` outermost, so that every request (refused, or for another path, too) holds its
    // connection busy while it is served, and only then.
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .fallback(|| async { axum::http::StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn_with_state(guard, admit))
        .layer(axum::middleware::from_fn(listen::watch))
        .into_make_service_with_connect_info::<ConnInfo>();
    match listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| McpServeError::Io(format!("listening on {addr}"), e))?;
            let bound =
                listener.local_addr().map_err(|e| McpServeError::Io("the address bound".into(), e))?;
            ready(Listen::Tcp(bound));
            let listener = Bounded::new(listener, max_connections, request_read, max_head, listen::tcp_door);
            axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
                .map_err(|e| McpServeError::Io("serving HTTP".into(), e))
        }
        Listen::Unix(path) => {
            let me = access::effective_uid()?;
            let (listener, socket) = listen::bind_unix(&path, others, me)?;
            ready(Listen::Unix(path.clone()));
            let listener = Bounded::new(listener, max_connections, request_read, max_head, listen::unix_door);
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
                .map_err(|e| McpServeError::Io(format!("serving HTTP on {}", path.display()), e));
            drop(socket);
            served
        }
    }
}

/// A refusal at the door: the HTTP status, and a JSON-RPC error as the body, which MCP clients
/// show their user in place of a bare status (its id is null: the request was not read).
fn refusal(status: axum::http::StatusCode, code: i64, text: String) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": text}});
    let mut r =
        (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if status == axum::http::StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"sion_memory\""),
        );
    }
    if status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("10"));
    }
    r
}

/// A refusal after which the connection is closed: its client proved nothing (or is too slow),
/// so it keeps no connection open here by asking again on it.
fn refusal_closing(status: axum::http::StatusCode, code: i64, text: String) -> axum::response::Response {
    let mut r = refusal(status, code, text);
    r.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    r
}

/// The uid of a request's peer over the Unix socket, when that is its credential (for the words
/// of a refusal).
#[derive(Clone, Copy, Debug)]
struct PeerUid(u32);

/// Who the request's client is, by the server's credential: its holder and roles (and its uid,
/// over the Unix socket), or why not (its status and words; the connection is then closed).
fn identify(
    guard: &Guard,
    request: &axum::extract::Request,
) -> Result<(Holder, Grant, Option<u32>), (axum::http::StatusCode, String)> {
    use axum::http::StatusCode;
    let door = request.extensions().get::<axum::extract::ConnectInfo<ConnInfo>>().map(|c| c.0.door);
    match &guard.options.credential {
        Credential::Peers(peers) => {
            let Some(Door::Unix { uid: Some(uid) }) = door else {
                return Err((
                    StatusCode::FORBIDDEN,
                    "this MCP server admits only peers of its Unix socket that the kernel names".into(),
                ));
            };
            match peers.grant(uid) {
                Some(grant) => Ok((Peers::holder(uid), grant, Some(uid))),
                None => {
                    tracing::warn!(
                        "an MCP connection of uid {uid} was refused: not admitted on the Unix socket"
                    );
                    Err((
                        StatusCode::FORBIDDEN,
                        format!(
                            "uid {uid} is not admitted on this MCP server's Unix socket: it admits its own user (uid {}) and the users its operator allows (`--unix-allow {uid}=ROLES`, or `mcp_unix_allow` for the node; docs/ROS.md, \"Who may call the MCP tools\")",
                            peers.me()
                        ),
                    ))
                }
            }
        }
        Credential::Tokens(tokens) => {
            let presented = request
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
                .map(str::trim);
            presented.and_then(|t| tokens.holder(t)).map(|(h, g)| (h, g, None)).ok_or_else(|| {
                (
                    StatusCode::UNAUTHORIZED,
                    "this MCP server needs `Authorization: Bearer TOKEN`, a token from its token file (docs/ROS.md, \"Who may call the MCP tools\")".into(),
                )
            })
        }
    }
}

/// The guard: the credential first (nothing is read or made for a request without one), its
/// roles put on the request for the tools, then the bounds on bodies and on sessions.
async fn admit(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let (holder, grant, peer) = match identify(&guard, &request) {
        Ok(who) => who,
        Err((status, why)) => return refusal_closing(status, -32001, why),
    };
    request.extensions_mut().insert(grant);
    if let Some(uid) = peer {
        request.extensions_mut().insert(PeerUid(uid));
    }
    let opens =
        request.method() == axum::http::Method::POST && !request.headers().contains_key("mcp-session-id");
    // The body, whole, within its time and size: a client that trickles it holds nothing for
    // long. (rmcp reads every body whole anyway.)
    let (parts, body) = request.into_parts();
    let max = guard.options.max_body;
    let wait = guard.options.request_read;
    let bytes = match tokio::time::timeout(wait, axum::body::to_bytes(body, max)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return refusal_closing(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                format!("a request's body is at most {max} bytes here"),
            );
        }
        Err(_) => {
            return refusal_closing(
                StatusCode::REQUEST_TIMEOUT,
                -32600,
                format!("the request's body did not arrive within {} s of its head", wait.as_secs_f64()),
            );
        }
    };
    if !opens {
        return next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await;
    }
    // A POST without a session may open one: is it an `initialize`?
    #[derive(Deserialize)]
    struct Peek {
        method: Option<String>,
    }
    let initialize =
        serde_json::from_slice::<Peek>(&bytes).is_ok_and(|p| p.method.as_deref() == Some("initialize"));
    let mut request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    let mut owners = guard.opening.lock().await;
    if let Err(refused) = guard.room(&mut owners, holder).await {
        return refused;
    }
    if !initialize {
        // Sessionless (MCP 2026-07-28, which rmcp serves whatever the configuration, or a
        // request rmcp will refuse for want of a session): it holds a place among the sessions
        // until answered, so the bounds mean what they say whichever protocol a client speaks.
        *guard
            .sessionless
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(holder)
            .or_insert(0) += 1;
        let place = Sessionless { holder, all: Arc::clone(&guard.sessionless) };
        request.extensions_mut().insert(Arc::new(place));
        drop(owners);
        return next.run(request).await;
    }
    let response = next.run(request).await;
    if let Some(id) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        owners.insert(id.to_owned(), holder);
    }
    response
}

/// Why the MCP server could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    #[error(
        "{0}: only a loopback address (tokens travel in clear over HTTP; put a TLS proxy in front to reach it from elsewhere)"
    )]
    NotLoopback(SocketAddr),
    #[error("peer credentials are a Unix socket's: listen on unix:PATH, or use tokens over TCP")]
    PeersNeedUnix,
    #[error("the Unix socket {0}: {1}")]
    Socket(PathBuf, String),
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("{0}")]
    Session(String),
}

#[cfg(test)]
mod tests {
    use super::{MemoryServer, Role, stdio};
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

    /// Serve `server` on an in-process pipe (the line transport, as stdio without being
    /// [`super::serve_stdio`]), call `tool` after the handshake, and give its answer.
    async fn answer_over_a_pipe(server: MemoryServer, tool: &str) -> serde_json::Value {
        use rmcp::ServiceExt as _;
        let (client, there) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(there);
        let (transport, _writer) = stdio::LineTransport::new(read, write, stdio::MAX_LINE);
        // Served until the pipe closes (when this returns and drops the client's end).
        tokio::spawn(async move {
            if let Ok(running) = server.serve(transport).await {
                let _ = running.waiting().await;
            }
        });
        let (out, mut into) = tokio::io::split(client);
        let mut lines = tokio::io::BufReader::new(out).lines();
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
        let inited = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}});
        for m in [init, inited, call] {
            into.write_all(format!("{m}\n").as_bytes()).await.expect("the pipe takes a line");
        }
        loop {
            let line = lines.next_line().await.expect("the pipe reads").expect("an answer");
            let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
            if v["id"] == 2 {
                return v;
            }
        }
    }

    /// A server not started by `serve_stdio` serves no tool to a request that brought no
    /// token's roles (here: none at all, as a future rmcp path without the HTTP request might).
    #[tokio::test]
    async fn without_a_tokens_roles_nothing_but_stdio_is_served() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let server = MemoryServer::new(&dir.path().join("mem"), vec![]).expect("a memory");
        for tool in ["sion_memory_open", "sion_memory_commit"] {
            let v = answer_over_a_pipe(server.clone(), tool).await;
            assert_eq!(v["result"]["isError"], true, "{v}");
            let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
            assert!(text.contains("this request has no token"), "{v}");
        }
        let local = MemoryServer { local: true, ..server };
        let v = answer_over_a_pipe(local, "sion_memory_open").await;
        assert_ne!(v["result"]["isError"], true, "{v}");
    }

    /// A request `initialize` with `extra` headers, as raw HTTP/1.1.
    fn initialize(extra: &str) -> Vec<u8> {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// The status of the answer read from `s`.
    async fn status<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
        use tokio::io::AsyncReadExt as _;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.expect("the answer");
            assert_ne!(n, 0, "closed before answering: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).split(' ').nth(1).unwrap_or_default().to_owned()
    }

    /// How long until the server closed `s` (a read gives nothing, or the connection is reset),
    /// if within `within`.
    async fn closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> Option<Duration> {
        use tokio::io::AsyncReadExt as _;
        let start = tokio::time::Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout_at(start + within, s.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Issue 30 (4): a connection that sends nothing, or half a head, is closed once the bound
    /// passes, and meanwhile a client with a token is served; before, both were kept for ever.
    #[tokio::test]
    async fn silent_and_half_sent_connections_are_closed_in_time() {
        use super::{HttpOptions, Listen, access::Tokens};
        use std::os::unix::fs::PermissionsExt as _;
        use tokio::io::AsyncWriteExt as _;
        let dir = tempfile::tempdir().expect("tmp");
        let token = "t".repeat(40);
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("read {token}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let mut options = HttpOptions::new(Tokens::load(&path).expect("tokens"));
        options.request_read = Duration::from_secs(1);
        let server = MemoryServer::new(&dir.path().join("mem"), vec![]).expect("a memory");
        let (tx, bound) = tokio::sync::oneshot::channel();
        let addr: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
        tokio::spawn(super::serve_http(server, addr, options, |b| drop(tx.send(b)), std::future::pending()));
        let Ok(Listen::Tcp(addr)) = bound.await else { panic!("not served") };

        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut half = tokio::net::TcpStream::connect(addr).await.expect("connect");
        half.write_all(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\n").await.expect("write");
        let mut client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        client.write_all(&initialize(&format!("Authorization: Bearer {token}\r\n"))).await.expect("write");
        assert_eq!(status(&mut client).await, "200");
        for s in [&mut silent, &mut half] {
            let took = closed(s, Duration::from_secs(4)).await.expect("closed within the bound");
            assert!(took < Duration::from_millis(2500), "{took:?}");
        }
        // A request without a token is refused, and its connection closed at once.
        let mut stranger = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stranger.write_all(&initialize("")).await.expect("write");
        assert_eq!(status(&mut stranger).await, "401");
        assert!(closed(&mut stranger, Duration::from_millis(500)).await.is_some());
    }

    /// Over a Unix socket the peer's uid is the credential: this process's own user is served
    /// with the roles given it (here the default, read), with no token; the socket is 0600 in a
    /// directory made 0700, and is removed when the server stops.
    #[tokio::test]
    async fn a_unix_socket_serves_this_user_by_its_uid() {
        use super::{HttpOptions, Listen, access::Grant, access::Peers};
        use std::os::unix::fs::PermissionsExt as _;
        use tokio::io::AsyncWriteExt as _;
        let dir = tempfile::tempdir().expect("tmp");
        let sock = dir.path().join("run").join("mcp.sock");
        let mut options = HttpOptions::new(Peers::new(Grant::default()).expect("peers"));
        options.request_read = Duration::from_secs(1);
        let server = MemoryServer::new(&dir.path().join("mem"), vec![]).expect("a memory");
        let (tx, bound) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(super::serve_http(
            server,
            Listen::Unix(sock.clone()),
            options,
            |b| drop(tx.send(b)),
            async move {
                let _ = stopped.await;
            },
        ));
        assert_eq!(bound.await.expect("served"), Listen::Unix(sock.clone()));
        let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&sock), 0o600);
        assert_eq!(mode(sock.parent().expect("dir")), 0o700);
        let mut client = tokio::net::UnixStream::connect(&sock).await.expect("connect");
        client.write_all(&initialize("")).await.expect("write");
        assert_eq!(status(&mut client).await, "200");
        let mut silent = tokio::net::UnixStream::connect(&sock).await.expect("connect");
        assert!(closed(&mut silent, Duration::from_secs(4)).await.is_some());
        drop(client);
        let _ = stop.send(());
        serving.await.expect("joined").expect("served");
        assert!(!sock.exists(), "the socket was left behind");
    }

    #[test]
    fn every_tool_is_given_its_role() {
        let tools = MemoryServer::tool_router().list_all();
        assert_eq!(tools.len(), 14);
        for t in tools {
            assert_ne!(
                Role::of_tool(&t.name),
                Role::Admin,
                "{} needs a role in access::Role::of_tool",
                t.name
            );
        }
    }
}
