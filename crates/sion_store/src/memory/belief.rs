//! The writer's side of a belief bundle (docs/BELIEF.md, "Bundles"): the proof files a reader
//! needs to check a fold from heads alone, built from the logs of the revisers it trusts.

use std::collections::BTreeSet;

use sion_verify::atom::AtomId;
use sion_verify::belief::{State, simulated};
use sion_verify::proof::{Claim, ListKey, ProofFile};

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
    // Each log's head as of that Pulse and the ledger's attestation of it, made once: every
    // link proof of the log is against this head, with this attestation.
    let mut heads = Vec::with_capacity(memories.len());
    for memory in memories {
        let attestation = memory.attestation_at(pulse)?;
        let size = attestation.state.log.head.size;
        let writer = memory.writer().verifying_key().to_bytes();
        if size == 0 && !trusted.contains(&writer) {
            // Nothing in it, and a reader leaves an untrusted log aside anyway.
            heads.push(None);
            continue;
        }
        if size == 0 {
            return Err(MemoryError::Config {
                path: memory.dir().to_owned(),
                problem: format!(
                    "reviser {} has committed nothing at Pulse {pulse}: an empty log proves no list \
                     (commit an atom first, or leave this reviser out)",
                    hex::encode(writer)
                ),
            });
        }
        // The version proved against is exactly the one attested (a commit of the same size
        // made meanwhile must not be picked instead).
        heads.push(Some((attestation.state.log.clone(), attestation)));
    }
    let mut files = Vec::new();
    // The state proofs the link proofs share, checked once (the reader checks them again).
    let mut checked = std::collections::HashSet::new();
    let mut asked: BTreeSet<AtomId> = BTreeSet::new();
    let mut recorded: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut queue: Vec<AtomId> = targets.to_vec();
    while let Some(target) = queue.pop() {
        if !asked.insert(target) {
            continue;
        }
        for (m, memory) in memories.iter().enumerate() {
            let Some((version, attestation)) = &heads[m] else { continue };
            let file = super::prove_list(
                memory.index_reader(),
                memory.log(),
                memory.log_id(),
                version,
                attestation.clone(),
                ListKey::LinksTo(target),
                memory.index_v2_from(),
            )?;
            let writer = memory.writer().verifying_key().to_bytes();
            if trusted.contains(&writer)
                && let Claim::List { atoms, .. } = file
                    .verify_sharing(None, &mut checked)
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
