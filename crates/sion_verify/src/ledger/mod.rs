//! What a reader needs of the ledger (docs/LEDGER.md): memory logs' heads and encodings, signed
//! Pulse headers, state and transaction-time proofs, and the transactions writers sign. The
//! ledger that keeps and moves heads is the store's (`sion_store::ledger`).

mod checkpoint;
mod cosign;
mod pulse;
mod tx;
mod types;

pub use checkpoint::{
    AddCheckpoint, Checkpoint, CheckpointError, Cosigned, MAX_NOTE_BYTES, MAX_NOTE_SIGNATURES,
    MAX_PROOF_LINES, NoteSignature, SignedNote, cosign_v1, cosignature_message, history_leaf, key_id,
    ledger_vkey, note_signature, origin_of, parse_witness_vkey, sign_checkpoint, valid_key_name,
    witness_vkey,
};
pub use cosign::{Cosignature, Witnesses, cosign_message};
pub use pulse::{AttestationError, HEADER_V1, HEADER_V2, PulseHeader, SignedHeader, StateProof, TxTimeProof};
pub use tx::{MAX_TX_CELLS, SignedTx, Tx};
pub use types::{
    Account, Agent, AgentStatus, Chain, Head, LogId, MemoryLog, empty_head, parent_of, valid_agent_name,
};
