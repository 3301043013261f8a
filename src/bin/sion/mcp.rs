//! `sion mcp`: the memory's verbs as MCP tools (src/protocol.rs, docs/BELIEF.md; who may call them
//! over HTTP: docs/ROS.md, "Who may call the MCP tools").

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use sion_memory::mcp::access::{Grant, Peers, Tokens};
use sion_memory::mcp::{HttpOptions, Listen, MemoryServer};

#[derive(Args)]
pub struct McpArgs {
    /// The memory directory (created, with an embedded ledger, if it holds no memory). This
    /// process becomes its one writer.
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// Other memories, read-only (on the same ledger), that `sion_memory_believe` draws its
    /// bundles from too, and `sion_fleet_recall` asks with this one: every client with the
    /// role `read` gets their answers (repeat).
    #[arg(long)]
    also: Vec<PathBuf>,
    /// Serve streamable HTTP on this loopback address (`127.0.0.1:8765`: the endpoint is
    /// http://127.0.0.1:8765/mcp), for many clients at once, each with a token; or on a Unix
    /// socket (`unix:/run/user/1000/sion/mcp.sock`, made 0600 in a directory made 0700), each
    /// client known by its user id; without it, stdio for one.
    #[arg(long)]
    listen: Option<Listen>,
    /// With a TCP --listen: the token file (lines `ROLES TOKEN`, roles read, remember, forget,
    /// share, admin; mode 0600). Default DATA/mcp/tokens, written with a read, a remember and an
    /// admin token when absent.
    #[arg(long, requires = "listen")]
    tokens: Option<PathBuf>,
    /// With --listen unix:PATH: the roles of a client running as this server's own user
    /// (read, remember, forget, share, admin, or several joined by commas). Read only unless
    /// told: every process of that user can reach the socket.
    #[arg(long, requires = "listen", default_value = "read", value_parser = Grant::parse)]
    unix_role: Grant,
    /// With --listen unix:PATH: admit another user too, `UID` (role read) or `UID=ROLES`
    /// (repeat). The socket is then made 0666 in a directory made 0711, and the kernel's word
    /// on each peer's uid alone keeps other users out.
    #[arg(long, requires = "listen", value_parser = Peers::parse_allowed)]
    unix_allow: Vec<(u32, Grant)>,
    /// With --listen: connections open at once, at most (past it the next waits until one
    /// closes).
    #[arg(long, default_value_t = HttpOptions::MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_connections: u32,
    /// With --listen: a connection must bring a whole request head (at most 32 KiB) within this
    /// of opening or of its last answer, and the request's body within this of its head, or is
    /// closed [s].
    #[arg(long, default_value_t = HttpOptions::REQUEST_READ.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3_600))]
    request_read_s: u64,
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
    let unix_options_given = a.unix_role != Grant::default() || !a.unix_allow.is_empty();
    let http = match a.listen.clone() {
        None => None,
        Some(listen @ Listen::Unix(_)) => {
            if a.tokens.is_some() {
                anyhow::bail!(
                    "--tokens is for a TCP --listen: over a Unix socket the client's user id is its credential (--unix-role, --unix-allow)"
                );
            }
            let peers = a
                .unix_allow
                .iter()
                .fold(Peers::new(a.unix_role).context("--listen unix:")?, |p, (uid, g)| p.allow(*uid, *g));
            eprintln!("clients are admitted by their user id: {}", peers.summary());
            Some((listen, HttpOptions::new(peers)))
        }
        Some(listen @ Listen::Tcp(_)) => {
            if unix_options_given {
                anyhow::bail!("--unix-role and --unix-allow are for --listen unix:PATH");
            }
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
            Some((listen, HttpOptions::new(tokens)))
        }
    };
    let http = match http {
        None => None,
        Some((listen, mut options)) => {
            options.max_sessions = a.max_sessions as usize;
            options.max_sessions_per_token =
                a.max_sessions_per_token.map_or((options.max_sessions / 2).max(1), |n| n as usize);
            options.max_calls = a.max_calls as usize;
            options.call_wait = call_wait;
            options.idle = Duration::from_secs(a.session_idle_s);
            options.max_connections = a.max_connections as usize;
            options.request_read = Duration::from_secs(a.request_read_s);
            Some((listen, options))
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async move {
        match http {
            None => sion_memory::mcp::serve_stdio(server).await.context("serving MCP on stdio")?,
            Some((listen, options)) => {
                let data = a.data.display().to_string();
                sion_memory::mcp::serve_http(
                    server,
                    listen,
                    options,
                    |bound| eprintln!("serving MCP (streamable HTTP) at {} for {data}", bound.endpoint()),
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
