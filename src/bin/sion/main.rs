//! `sion`: the command line of sion_memory.

mod demo;
mod memory_cmd;
mod ui;

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
    Memory(memory_cmd::MemoryCommand),
    /// Run the demo: a warehouse robot's atoms remembered, committed, proved and audited.
    Demo(DemoArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Memory(cmd) => memory_cmd::run(cmd),
        Command::Demo(args) => demo::run(&args.data, args.atoms, args.commit_every, args.fresh),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
