//! The writer's side of a belief bundle (docs/BELIEF.md, "Bundles"): the proof files a reader
//! needs to check a fold from heads alone, built from the logs of the revisers it trusts.

use std::collections::BTreeSet;

use sion_verify::atom::AtomId;
use sion_verify::belief::{State, simulated};
use sion_verify::proof::{Claim, ProofFile};

use super::{Memory, MemoryError};

/// A bundle's proof files for `targets`, from `memories` (one log each, all on one ledger),
/// every head attested as of the ledger's latest Pulse: each log's complete list of links to
/// every target and to every statement met (revisions of revisions), and when each statement
/// was recorded. Statements by writers not in `trusted` are not followed (a reader who trusts
/// them asks with them in its policy). Returns the files and the Pulse.
pub fn bundle(
    memories: &[&Memory],
    targets: &[AtomId],
    trusted: &[[u8; 32]],
) -> Result<(Vec<ProofFile>, u64), MemoryError> {
    let Some(first) = memories.first() else { return Ok((Vec::new(), 0)) };
    let pulse = first.ledger().latest()?.header.number;
    let mut files = Vec::new();
    let mut asked: BTreeSet<AtomId> = BTreeSet::new();
    let mut recorded: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut queue: Vec<AtomId> = targets.to_vec();
    while let Some(target) = queue.pop() {
        if !asked.insert(target) {
            continue;
        }
        for (m, memory) in memories.iter().enumerate() {
            let mut file = memory.prove_links(target, None)?;
            // As of the one Pulse of the bundle: the state then holds this log's current head.
            file.attestation = Some(memory.attestation_at(pulse)?);
            let writer = memory.writer().verifying_key().to_bytes();
            if trusted.contains(&writer)
                && let Claim::List { atoms, .. } = file
                    .verify(None)
                    .map_err(|e| MemoryError::Config {
                        path: memory.dir().to_owned(),
                        problem: format!("a link proof it made does not verify: {e}"),
                    })?
                    .claim
            {
                for (position, atom) in atoms {
                    let states = atom
                        .parts()
                        .links
                        .iter()
                        .any(|l| l.target == target && State::of_link(l.rel).is_some());
                    if !states || simulated(&atom) {
                        continue;
                    }
                    if recorded.insert((m, position)) {
                        files.push(memory.prove_recorded(position)?);
                    }
                    queue.push(atom.id());
                }
            }
            files.push(file);
        }
    }
    Ok((files, pulse))
}
