//! What the fleet ledger's tests build their commits from: every log holds the same atoms, so a
//! head of `n` atoms and the consistency proof between two heads are computed here alone.

// Each test crate uses what it needs of these.
#![allow(dead_code)]

use ed25519_dalek::SigningKey;
use sion_store::ledger::{Head, LogId, SignedTx, Tx};
use sion_verify::merkle::{Blake3, MemoryTree, consistency_path};

/// The tree over atoms `0 … n − 1`.
pub fn tree(n: u64) -> MemoryTree<Blake3> {
    MemoryTree::from_leaves((0..n).map(|i| format!("atom {i}")))
}

/// The head of a log of `n` atoms (its index root marked with `n`).
pub fn head(n: u64) -> Head {
    Head { size: n, root: tree(n).root(), index: [n as u8; 32], manifest: [0; 32] }
}

/// `writer`'s commit of `log` from `from` to `to` atoms, with its consistency proof.
pub fn commit(writer: &SigningKey, nonce: u64, log: LogId, version: u64, from: u64, to: u64) -> SignedTx {
    commit_cells(writer, nonce, log, version, from, to, Vec::new())
}

/// [`commit`], naming the map cells (docs/LEDGER.md, "Cells") its new atoms are in.
pub fn commit_cells(
    writer: &SigningKey,
    nonce: u64,
    log: LogId,
    version: u64,
    from: u64,
    to: u64,
    cells: Vec<u128>,
) -> SignedTx {
    let proof =
        if from == 0 { vec![] } else { consistency_path::<Blake3, _>(&tree(to), from, to).expect("proof") };
    SignedTx::sign(
        writer,
        nonce,
        Tx::CommitMemory { log, version, head: head(to), proof, seal: false, cells },
    )
}
