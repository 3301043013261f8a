//! Decoding and checking belief bundles (docs/BELIEF.md, "Bundles") must never panic,
//! whatever the bytes: the reader trusts every writer the bundle names and the ledger key it
//! carries, so a mutation reaches the walk and the fold, not only the signatures.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_verify::belief::{Policy, Prefer, Reviser, bundle};
use sion_verify::proof::{ListKey, Proof};

fuzz_target!(|data: &[u8]| {
    let Ok(files) = bundle::decode(data) else { return };
    let mut revisers = Vec::new();
    let mut targets = Vec::new();
    let mut ledger_key = None;
    for f in &files {
        if let Some(a) = &f.attestation {
            ledger_key.get_or_insert(a.ledger_key);
            let key = a.state.log.writer.0;
            if !revisers.iter().any(|r: &Reviser| r.key == key) {
                revisers.push(Reviser { name: String::new(), key, rank: revisers.len() as u32 });
            }
        }
        if let Proof::List { list, .. } = &f.proof
            && let ListKey::LinksTo(t) = &list.key
        {
            targets.push(*t);
        }
    }
    let Some(key) = ledger_key.and_then(|k| ed25519_dalek::VerifyingKey::from_bytes(&k).ok()) else { return };
    for prefer in [Prefer::Latest, Prefer::Rank, Prefer::Quorum(2)] {
        let policy = Policy { revisers: revisers.clone(), prefer };
        let _ = bundle::check(data, &key, &targets, &policy, None);
    }
});
