//! `sion memory commit`: the durable head committed to the ledger.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use sion_memory::time::rfc3339;

use crate::common::{DataArg, open_memory};
use crate::ui;

#[derive(Args)]
pub(crate) struct CommitArgs {
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// Close the log for good: the ledger will refuse any further growth.
    #[arg(long)]
    pub(crate) seal: bool,
}

pub(crate) fn commit(a: CommitArgs) -> Result<ExitCode> {
    let mut memory = open_memory(&a.data.data)?;
    let committed = memory.committed().head;
    if committed.size == memory.log().size() && !a.seal {
        outln!(
            "nothing to commit: the head at Pulse {} already covers all {} atoms",
            memory.committed().committed_at,
            ui::count(committed.size)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let c = match memory.commit(a.seal) {
        Ok(c) => c,
        // The agent (or one above it) stopped by its controller: nothing of the memory is at
        // fault, and nothing recorded is lost.
        Err(sion_memory::memory::CommitError::Ledger(e)) if e.code() == "contained" => {
            let agent = memory.committed().agent.clone().unwrap_or_default();
            return Err(anyhow::anyhow!(e)).context(format!(
                "committing the head to the ledger: the atoms stay recorded here and go in with the first commit after the agent is reinstated (`sion ledger agent show {agent} --ledger URL` says which agent stops it)"
            ));
        }
        Err(e) => return Err(e).context("committing the head to the ledger"),
    };
    let h = &c.pulse.header;
    outln!(
        "committed {} atoms (+{}) at Pulse {} ({}){}",
        ui::count(c.head.size),
        ui::count(c.head.size - c.previous.size),
        h.number,
        rfc3339(h.time_ns),
        if a.seal { ", sealed" } else { "" }
    );
    outln!("  root        {}", hex::encode(c.head.root));
    outln!("  state root  {}", hex::encode(h.state_root));
    outln!("  signed by   {}", hex::encode(memory.ledger().public_key().to_bytes()));
    Ok(ExitCode::SUCCESS)
}
