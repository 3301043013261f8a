//! `sion mcp`: the memory's verbs as MCP tools (src/rmp.rs, docs/BELIEF.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sion_memory::mcp::MemoryServer;

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
    /// http://127.0.0.1:8765/mcp), for many clients at once; without it, stdio for one.
    #[arg(long)]
    listen: Option<SocketAddr>,
}

pub fn run(a: McpArgs) -> Result<ExitCode> {
    let server = MemoryServer::new(&a.data, a.also.clone())
        .with_context(|| format!("opening {}", a.data.display()))?;
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async move {
        match a.listen {
            None => {
                let running = server.serve(rmcp::transport::stdio()).await.context("serving MCP on stdio")?;
                running.waiting().await.context("the stdio session")?;
            }
            Some(addr) => {
                if !addr.ip().is_loopback() {
                    bail!("--listen {addr}: only a loopback address (the tools write the memory and carry no authentication)");
                }
                let service = StreamableHttpService::new(
                    move || Ok(server.clone()),
                    Arc::new(LocalSessionManager::default()),
                    StreamableHttpServerConfig::default(),
                );
                let router = axum::Router::new().nest_service("/mcp", service);
                let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
                let bound = listener.local_addr().context("the address bound")?;
                eprintln!("serving MCP (streamable HTTP) at http://{bound}/mcp for {}", a.data.display());
                axum::serve(listener, router)
                    .with_graceful_shutdown(async {
                        let _ = tokio::signal::ctrl_c().await;
                    })
                    .await
                    .context("serving HTTP")?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
