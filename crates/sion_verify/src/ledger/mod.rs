//! What a reader needs of the ledger (docs/LEDGER.md): memory logs' heads and encodings, signed
//! Pulse headers, state and transaction-time proofs, and the transactions writers sign. The
//! ledger that keeps and moves heads is the store's (`sion_store::ledger`).

mod cosign;
mod pulse;
mod tx;
mod types;

pub use cosign::{Cosignature, Witnesses, cosign_message};
pub use pulse::{AttestationError, PulseHeader, SignedHeader, StateProof, TxTimeProof};
pub use tx::{SignedTx, Tx};
pub use types::{
    Account, Agent, AgentStatus, Chain, Head, LogId, MemoryLog, empty_head, parent_of, valid_agent_name,
};
