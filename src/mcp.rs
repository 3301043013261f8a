//! The MCP server: the Reality Memory Protocol's verbs as MCP tools over one writer's memory
//! — `sion mcp` on stdio (one client) or streamable HTTP on loopback (many clients), or the
//! node itself (its `mcp_listen` parameter), whose kernel stays the memory's one writer while
//! ROS clients use it too. Every tool's input has a JSON schema (derived here); every answer is
//! JSON text. A second writer process on the same directory is refused, saying where to
//! connect instead.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData as McpError, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::rmp::{Rmp, RmpError};

/// The server: the verbs of one memory, shared by every session.
#[derive(Clone)]
pub struct MemoryServer {
    rmp: Arc<Rmp>,
}

fn answer<T: serde::Serialize>(r: Result<T, RmpError>) -> Result<CallToolResult, McpError> {
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

/// Run a verb on the blocking pool: verbs fsync, prove and (through a node) wait for its brain,
/// which must not hold up the runtime's workers the node's brain and services run on.
async fn call<T, F>(rmp: &Arc<Rmp>, verb: F) -> Result<CallToolResult, McpError>
where
    T: serde::Serialize + Send + 'static,
    F: FnOnce(&Rmp) -> Result<T, RmpError> + Send + 'static,
{
    let rmp = Arc::clone(rmp);
    match tokio::task::spawn_blocking(move || verb(&rmp)).await {
        Ok(result) => answer(result),
        Err(e) => Err(McpError::internal_error(format!("the verb did not finish: {e}"), None)),
    }
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
    /// The frame asked about (`map`).
    pub frame: String,
    /// The box's minimum corner, x, y, z in millimetres.
    pub min: [i64; 3],
    /// The box's maximum corner, x, y, z in millimetres (corners included).
    pub max: [i64; 3],
    /// Start of the interval, ns since the Unix epoch (included).
    pub from: i64,
    /// End of the interval, ns (excluded; equal to `from` asks about that instant).
    pub to: i64,
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
    pub fn new(data: &std::path::Path, others: Vec<PathBuf>) -> Result<Self, RmpError> {
        Ok(Self::over(Arc::new(Rmp::open(data)?.with_others(others))))
    }

    /// A server over these verbs (a running node's, say: [`Rmp::through`]), shared with the
    /// node's other surfaces.
    pub fn over(rmp: Arc<Rmp>) -> Self {
        Self { rmp }
    }

    #[tool(
        description = "The memory: its log number, writer key, ledger key, how many atoms it holds and its committed head."
    )]
    async fn sion_memory_open(&self) -> Result<CallToolResult, McpError> {
        call(&self.rmp, |r| Ok(r.opened())).await
    }

    #[tool(
        description = "Remember atoms (docs/ATOM.md JSON form): appended durably; returns their positions. Not yet committed: call sion_memory_commit."
    )]
    async fn sion_memory_remember(
        &self,
        Parameters(a): Parameters<RememberArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |r| r.remember(&a.atoms)).await
    }

    #[tool(
        description = "Commit the log's durable head to the ledger; returns the head and the Pulse that stamps it."
    )]
    async fn sion_memory_commit(&self) -> Result<CallToolResult, McpError> {
        call(&self.rmp, |r| r.commit()).await
    }

    #[tool(
        description = "What was seen in this box during this interval: every atom, with a proof that the answer is complete (an empty answer included), as of a committed head."
    )]
    async fn sion_memory_recall(
        &self,
        Parameters(a): Parameters<RecallArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |r| r.recall(&a.frame, a.min, a.max, a.from, a.to, a.as_of)).await
    }

    #[tool(
        description = "Check a proof file against the ledger key you trust and what you asked; says what it proves, or why not."
    )]
    async fn sion_memory_verify(
        &self,
        Parameters(a): Parameters<VerifyArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |_| Rmp::verify(&a.proof, &a.ledger_key, a.expect.as_ref())).await
    }

    #[tool(
        description = "Revise an atom: a revision naming it with a state (supersedes, accepts, disputes, retracts, refutes), committed. Nothing is deleted."
    )]
    async fn sion_memory_revise(
        &self,
        Parameters(a): Parameters<ReviseArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |r| r.revise(a.position, &a.state, &a.why)).await
    }

    #[tool(
        description = "What a reader believes about atoms under its policy (docs/BELIEF.md): the fold over trusted revisers' revisions, checked from a bundle of proofs, returned with it."
    )]
    async fn sion_memory_believe(
        &self,
        Parameters(a): Parameters<BelieveArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |r| r.believe(&a.policy, &a.targets, &a.positions)).await
    }

    #[tool(
        description = "Forget the payloads of sealed atoms: a forget atom is recorded and the keys destroyed; the atoms stay in the log and its proofs. Only a sealed memory forgets."
    )]
    async fn sion_memory_forget(
        &self,
        Parameters(a): Parameters<ForgetArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |r| r.forget(&a.positions, &a.who, &a.why)).await
    }

    #[tool(
        description = "Share a sealed memory: add a member (an X-Wing public key, base64); returns the keys wrapped to them (base64) for `sion memory space join`."
    )]
    async fn sion_memory_share(
        &self,
        Parameters(a): Parameters<ShareArgs>,
    ) -> Result<CallToolResult, McpError> {
        call(&self.rmp, move |r| r.share(&a.name, &a.member_public)).await
    }

    #[tool(
        description = "Audit the memory: every record re-read, every hash recomputed, the root compared with the committed head."
    )]
    async fn sion_memory_audit(&self) -> Result<CallToolResult, McpError> {
        call(&self.rmp, |r| r.audit()).await
    }
}

#[tool_handler]
impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sion_memory", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A robot's memory it can prove: remember atoms, commit, recall with proofs, verify them against a ledger key you trust, revise, and believe under your own policy.",
            )
    }
}

/// Serve `server` as streamable HTTP at `http://ADDR/mcp` until `stop` resolves; `ready` hears
/// the address bound (port 0 picks one). Loopback only: the tools write the memory and carry no
/// authentication.
pub async fn serve_http(
    server: MemoryServer,
    addr: SocketAddr,
    ready: impl FnOnce(SocketAddr),
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), McpServeError> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    if !addr.ip().is_loopback() {
        return Err(McpServeError::NotLoopback(addr));
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| McpServeError::Io(format!("listening on {addr}"), e))?;
    let bound = listener.local_addr().map_err(|e| McpServeError::Io("the address bound".into(), e))?;
    ready(bound);
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| McpServeError::Io("serving HTTP".into(), e))
}

/// Why the MCP server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum McpServeError {
    #[error("{0}: only a loopback address (the tools write the memory and carry no authentication)")]
    NotLoopback(SocketAddr),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}
