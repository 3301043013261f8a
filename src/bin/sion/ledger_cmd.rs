//! `sion ledger`: the operator's side of a fleet ledger (docs/FLEET-LEDGER.md) — make one in
//! etcd, and serve it to robots and readers over gRPC.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use clap::{Args, Subcommand};
use sion_memory::fleet::DEFAULT_LISTEN;

#[derive(Subcommand)]
pub enum LedgerCommand {
    /// Make a fleet ledger in etcd: its signing key (written to --key unless that file holds
    /// one) and its genesis Pulse. Run once per ledger; a second run finds it and says so.
    Init(LedgerArgs),
    /// Serve a fleet ledger: a front-end that keeps no state of its own (everything is in
    /// etcd), so several can serve one ledger at once. Robots open logs on it with
    /// `sion memory open --ledger http://HOST:PORT` or the node's `ledger` parameter; readers
    /// check proofs with `sion memory verify --ledger http://HOST:PORT`.
    Serve(ServeArgs),
}

#[derive(Args)]
pub struct LedgerArgs {
    /// etcd's client URLs, comma-separated (give every member: a front-end fails over).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    etcd: Vec<String>,
    /// The ledger's signing key (32 bytes). It belongs on the operator's machines only: a
    /// robot that held it could sign its own Pulses.
    #[arg(long)]
    key: PathBuf,
    /// Where in etcd's keyspace the ledger lives (one prefix per ledger).
    #[arg(long, default_value = "/sion-ledger/")]
    prefix: String,
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    ledger: LedgerArgs,
    /// Address to listen on (loopback unless you say otherwise).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
}

pub fn run(cmd: LedgerCommand) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async {
        match cmd {
            LedgerCommand::Init(a) => init(a).await,
            LedgerCommand::Serve(a) => serve(a).await,
        }
    })
}

fn endpoints(a: &LedgerArgs) -> Vec<&str> {
    a.etcd.iter().map(String::as_str).collect()
}

async fn init(a: LedgerArgs) -> Result<ExitCode> {
    let key = sion_memory::ledger::read_or_make_key(&sion_memory::disk::Disk::os(), &a.key)
        .with_context(|| format!("the ledger key at {}", a.key.display()))?;
    let ledger = sion_fleet::FleetLedger::init(&endpoints(&a), &a.prefix, key)
        .await
        .with_context(|| format!("making the fleet ledger under {} in etcd", a.prefix))?;
    outln!(
        "fleet ledger under {} in etcd {}: key {}",
        a.prefix,
        a.etcd.join(","),
        hex::encode(ledger.public_key().to_bytes())
    );
    outln!("serve it with: sion ledger serve --etcd {} --key {}", a.etcd.join(","), a.key.display());
    Ok(ExitCode::SUCCESS)
}

async fn serve(a: ServeArgs) -> Result<ExitCode> {
    let key = sion_memory::ledger::read_key(&a.ledger.key).with_context(|| {
        format!("reading the ledger key {} (sion ledger init makes it)", a.ledger.key.display())
    })?;
    let public = hex::encode(key.verifying_key().to_bytes());
    let ledger = sion_fleet::FleetLedger::connect(&endpoints(&a.ledger), &a.ledger.prefix, key)
        .await
        .with_context(|| format!("connecting to the fleet ledger under {}", a.ledger.prefix))?;
    eprintln!(
        "serving the fleet ledger (key {public}) on http://{}, state in etcd {} under {}; Ctrl-C stops",
        a.listen,
        a.ledger.etcd.join(","),
        a.ledger.prefix
    );
    // Ctrl-C, or SIGTERM from a service manager.
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
    };
    sion_fleet::service::serve(ledger, a.listen, stop).await.map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}
