//! `sion`: the command line of sion_memory.

// One unsafe call, for SIGPIPE's disposition below; nothing else.
#![deny(unsafe_code)]

/// `println!` that fails with the reason instead of panicking when standard output cannot be
/// written (a full disk, a device that fails). A closed pipe ends the process quietly instead
/// (SIGPIPE, see `main`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(crate::stdout_failed)?
    }};
}

/// What a command says when its output cannot be written.
pub fn stdout_failed(e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!("writing to standard output: {e}")
}

// One module per command (a group's commands in its folder); what they share in `common`.
mod bag;
mod brain;
mod common;
mod demo;
mod fleet;
mod ledger;
mod mcp;
mod memory;
mod serve_ui;
mod ui;
mod viz;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A robot's memory it can prove: atoms in millimetres and nanoseconds, appended durably to a
/// Merkle log whose heads an embedded ledger signs, with proofs anyone can check from a head.
#[derive(Parser)]
#[command(name = "sion", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create, fill, commit, prove and audit a memory.
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Run the demo: a warehouse robot's atoms remembered, committed, proved and audited.
    Demo(DemoArgs),
    /// Run the memory brain on a memory: it folds the log into its index, derives
    /// trajectories, coverage and conflicts, and commits heads, in continuous mode.
    Brain(brain::BrainArgs),
    /// Print a simulated warehouse robot run as JSON lines of atoms (for `remember` or
    /// `brain --input -`).
    Sim(SimArgs),
    /// Replay a ROS 2 bag (MCAP) into a memory through the same ingest as the live node,
    /// then commit a head.
    Replay(bag::ReplayArgs),
    /// Write a memory as MCAP Foxglove draws with no configuration (its well-known schemas:
    /// transforms, paths, atoms as boxes, camera frames, answers and verdicts) beside JSON
    /// channels, on the atoms' valid time (docs/BAGS.md).
    Export(bag::ExportArgs),
    /// Draw a memory, and an answer with its proof, for the Rerun viewer, with the layout the
    /// recording carries: the trajectory, atoms of every frame through the memory's transforms,
    /// cameras as frusta with their frames, the query box, the proof's tree walk, the verdict, a
    /// legend (feature `viz`; docs/VIZ.md).
    Viz(viz::VizArgs),
    /// Serve the web page that checks a proof or an evidence directory in the browser (the
    /// verifier compiled to WebAssembly; build it with `bash scripts/web.sh`), on loopback only.
    /// The page also works opened from disk (web/dist/index.html).
    ServeUi(serve_ui::ServeUiArgs),
    /// Make ROS 2 bags.
    #[command(subcommand)]
    Bag(bag::BagCommand),
    /// Ask a whole fleet's memories at once, proved complete across robots against the fleet
    /// ledger's state (docs/PROOFS.md, "Fleet recall").
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// Run a fleet ledger: one ledger for many robots, its state in etcd, its key on the
    /// operator's machines only (docs/FLEET-LEDGER.md).
    #[command(subcommand)]
    Ledger(ledger::LedgerCommand),
    /// Serve the memory's verbs as MCP tools (remember, commit, recall, verify, revise,
    /// believe, forget, share, audit; docs/BELIEF.md): on stdio for one client, or streamable
    /// HTTP on loopback (--listen) for many. This process is the memory's one writer.
    Mcp(mcp::McpArgs),
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Memory directory for the demo (created; must not hold a memory yet).
    #[arg(long, default_value = "sion-demo")]
    data: PathBuf,
    /// How many atoms the robots record.
    #[arg(long, default_value_t = 200_000)]
    atoms: usize,
    /// Commit a head to the ledger every this many atoms.
    #[arg(long, default_value_t = 25_000)]
    commit_every: usize,
    /// Start over: delete the demo directory first if it holds an earlier demo.
    #[arg(long)]
    fresh: bool,
}

#[derive(clap::Args)]
struct SimArgs {
    /// How many atoms.
    #[arg(long, default_value_t = 10_000)]
    atoms: usize,
    /// The same seed gives the same atoms.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn sim(a: &SimArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let config = sion_memory::sim::WarehouseConfig { seed: a.seed, ..Default::default() };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for atom in sion_memory::sim::Warehouse::new(config).take(a.atoms) {
        writeln!(out, "{}", atom.to_json_line(None)).map_err(stdout_failed)?;
    }
    out.flush().map_err(stdout_failed)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    // Like any Unix tool, end quietly when whoever reads our output stops (`sion … | head`),
    // rather than panic in println!. Rust starts programs with SIGPIPE ignored.
    // SAFETY: nothing else runs yet; SIG_DFL is a valid disposition for SIGPIPE.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let result = match cli.command {
        Command::Memory(cmd) => memory::run(cmd),
        Command::Demo(args) => demo::run(&args.data, args.atoms, args.commit_every, args.fresh),
        Command::Brain(args) => brain::run(args),
        Command::Sim(args) => sim(&args),
        Command::Replay(args) => bag::replay_cmd(&args),
        Command::Bag(cmd) => bag::run(cmd),
        Command::Fleet(cmd) => fleet::run(cmd),
        Command::Mcp(a) => mcp::run(a),
        Command::Export(args) => bag::export_cmd(&args),
        Command::Viz(args) => viz::run(&args),
        Command::ServeUi(args) => serve_ui::run(&args),
        Command::Ledger(cmd) => ledger::run(cmd),
    };
    // What is still buffered must reach its file too, or the command failed.
    let flushed = std::io::Write::flush(&mut std::io::stdout()).map_err(stdout_failed);
    match result.and_then(|code| flushed.map(|()| code)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(hint) = common::hint(&e) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}
