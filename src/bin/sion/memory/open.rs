//! `sion memory open`: make a memory.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use crate::common::DataArg;

#[derive(Args)]
pub(crate) struct OpenArgs {
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// Agent identity the log belongs to, as a path (`warehouse/robot-7`); agents that do
    /// not exist yet are registered, controlled by this memory's writer key.
    #[arg(long)]
    pub(crate) agent: Option<String>,
    /// The ledger to open the log on: a fleet ledger service's URL (`http://HOST:PORT`, run by
    /// `sion ledger serve`; this machine then holds no ledger key), or an existing embedded
    /// ledger's directory. Default: a new embedded ledger inside the memory directory.
    #[arg(long, value_name = "URL|DIR")]
    pub(crate) ledger: Option<String>,
    /// A sealed memory: its log's policy commits to a new space, whose keys seal payloads and
    /// blobs so that only the writer and the space's members open them, and which can forget
    /// them (docs/SEAL.md; `sion memory space`, `seal`, `forget`).
    #[arg(long)]
    pub(crate) sealed: bool,
}

pub(crate) fn open(a: OpenArgs) -> Result<ExitCode> {
    // An embedded ledger's directory is the user's path (relative to where they are, not to
    // the memory), and one that exists: a typo must not make a second ledger.
    let ledger = match a.ledger.as_deref() {
        Some(dir) if !sion_memory::fleet::is_url(dir) => {
            let path = std::path::absolute(dir).with_context(|| format!("--ledger {dir}"))?;
            if !path.join("FORMAT").exists() && !path.join("journal").exists() {
                anyhow::bail!(
                    "--ledger {dir}: no embedded ledger at {} (a fleet ledger is http://HOST:PORT; without --ledger a new one is made inside the memory)",
                    path.display()
                );
            }
            Some(path.to_string_lossy().into_owned())
        }
        other => other.map(str::to_owned),
    };
    let memory = match sion_memory::fleet::options_on(&a.data.data, ledger.as_deref())
        .and_then(|o| o.agent(a.agent.as_deref()).sealed(a.sealed).create())
    {
        Ok(memory) => memory,
        // An agent under someone else's name: only that name's controller registers it.
        Err(sion_memory::memory::OpenError::Ledger(e)) if e.code() == "not_controller" => {
            let agent = a.agent.as_deref().unwrap_or_default();
            let dir = a.data.data.display();
            return Err(anyhow::anyhow!(e)).context(format!(
                "creating a memory at {dir}: agent {agent} is to be registered by the controller of the agent above it, for this memory's writer key (`sion memory key --data {dir}` prints it, making it if need be): `sion ledger agent register {agent} --controller KEY --ledger URL --key THEIR_KEY`, then open again"
            ));
        }
        Err(e) => return Err(e).with_context(|| format!("creating a memory at {}", a.data.data.display())),
    };
    let log = memory.committed();
    outln!("opened memory log {} at {}", log.id, a.data.data.display());
    if let Some(space) = memory.space() {
        outln!(
            "  sealed  space {}, epoch {} (no members yet: `sion memory space add`)",
            hex::encode(space.id()),
            space.epoch()
        );
    }
    outln!("  writer  {}", log.writer);
    if let Some(agent) = &log.agent {
        outln!("  agent   {agent}");
    }
    outln!(
        "  ledger  {} (key {})",
        memory.ledger().describe(),
        hex::encode(memory.ledger().public_key().to_bytes())
    );
    outln!("  opened at Pulse {}", log.committed_at);
    Ok(ExitCode::SUCCESS)
}

/// `sion memory key`: the writer key a memory at this directory signs with, made now if there
/// is none (what `open` would make), so it can be registered before the log is opened.
pub(crate) fn key(a: &DataArg) -> Result<ExitCode> {
    let dir = &a.data;
    let disk = sion_memory::disk::Disk::os();
    if !dir.exists() {
        disk.create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
        // The key's directory is the memory's: others need not list it.
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .with_context(|| format!("chmod 700 {}", dir.display()))?;
    }
    let path = dir.join("writer.key");
    let key = if path.exists() {
        sion_memory::ledger::read_key(&path)
    } else {
        sion_memory::ledger::read_or_make_key(&disk, &path)
    }
    .with_context(|| format!("the writer key at {}", path.display()))?;
    outln!("{}", hex::encode(key.verifying_key().to_bytes()));
    Ok(ExitCode::SUCCESS)
}
