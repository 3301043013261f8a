//! `sion mcp`: the memory's verbs as MCP tools (src/rmp.rs, docs/BELIEF.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use rmcp::ServiceExt as _;
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
                let data = a.data.display().to_string();
                sion_memory::mcp::serve_http(
                    server,
                    addr,
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
