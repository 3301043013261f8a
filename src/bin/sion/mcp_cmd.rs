//! `sion mcp`: the memory's verbs as MCP tools (src/rmp.rs, docs/BELIEF.md; who may call them
//! over HTTP: docs/ROS.md, "Who may call the MCP tools").

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use sion_memory::mcp::access::Tokens;
use sion_memory::mcp::{HttpOptions, MemoryServer};

#[derive(Args)]
pub struct McpArgs {
    /// The memory directory (created, with an embedded ledger, if it holds no memory). This
    /// process becomes its one writer.
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// Other revisers' memories, read-only (on the same ledger), that `sion_memory_believe`
    /// draws its bundles from too (repeat).
    #[arg(long)]
    also: Vec<PathBuf>,
    /// Serve streamable HTTP on this loopback address (`127.0.0.1:8765`: the endpoint is
    /// http://127.0.0.1:8765/mcp), for many clients at once, each with a token; without it,
    /// stdio for one.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// With --listen: the token file (lines `ROLES TOKEN`, roles read, remember, forget, share,
    /// admin; mode 0600). Default DATA/mcp/tokens, written with a read, a remember and an admin
    /// token when absent.
    #[arg(long, requires = "listen")]
    tokens: Option<PathBuf>,
    /// With --listen: sessions open at once, at most, a sessionless request counting as one
    /// while it is served (an `initialize` past it is refused, 503).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_sessions: u32,
    /// With --listen: sessions open at once for any one token, at most [default: half of
    /// --max-sessions, at least 1].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_sessions_per_token: Option<u32>,
    /// Tool calls in flight at once, at most, whatever the number of clients (half of them,
    /// rounded up, recalls, believes, audits and verifies): what bounds the memory they use.
    #[arg(long, default_value_t = MemoryServer::MAX_CALLS as u32, value_parser = clap::value_parser!(u32).range(1..=256))]
    max_calls: u32,
    /// How long a tool call waits for its place before it is refused as busy [s].
    #[arg(long, default_value_t = MemoryServer::CALL_WAIT.as_secs(), value_parser = clap::value_parser!(u64).range(0..=3_600))]
    call_wait_s: u64,
    /// With --listen: a session idle this long is closed [s].
    #[arg(long, default_value_t = HttpOptions::IDLE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    session_idle_s: u64,
}

pub fn run(a: McpArgs) -> Result<ExitCode> {
    let call_wait = Duration::from_secs(a.call_wait_s);
    let server = MemoryServer::new(&a.data, a.also.clone())
        .with_context(|| format!("opening {}", a.data.display()))?
        .with_calls(a.max_calls as usize, call_wait);
    let http = match a.listen {
        None => None,
        Some(addr) => {
            let path = a.tokens.clone().unwrap_or_else(|| a.data.join("mcp").join("tokens"));
            let (tokens, created) = if a.tokens.is_some() {
                (Tokens::load(&path).context("--tokens")?, false)
            } else {
                Tokens::load_or_create(&path).context("the default token file")?
            };
            if created {
                eprintln!("wrote new tokens to {} (one each for read, remember, admin)", path.display());
            }
            eprintln!("clients present a token of {} ({})", path.display(), tokens.summary());
            let mut options = HttpOptions::new(tokens);
            options.max_sessions = a.max_sessions as usize;
            options.max_sessions_per_token =
                a.max_sessions_per_token.map_or((options.max_sessions / 2).max(1), |n| n as usize);
            options.max_calls = a.max_calls as usize;
            options.call_wait = call_wait;
            options.idle = Duration::from_secs(a.session_idle_s);
            Some((addr, options))
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async move {
        match http {
            None => sion_memory::mcp::serve_stdio(server).await.context("serving MCP on stdio")?,
            Some((addr, options)) => {
                let data = a.data.display().to_string();
                sion_memory::mcp::serve_http(
                    server,
                    addr,
                    options,
                    |bound| eprintln!("serving MCP (streamable HTTP) at http://{bound}/mcp for {data}"),
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await
                .context("--listen")?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
