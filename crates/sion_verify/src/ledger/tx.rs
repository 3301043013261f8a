//! Signed transactions (docs/LEDGER.md, "Transactions").

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use super::types::{Account, AgentStatus, Head, LogId};
use crate::merkle::Digest;
use crate::wire::{Put as _, Reader, WireError};

const TX_DOMAIN: &[u8] = b"sion-ledger-tx-v1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tx {
    /// Register an agent identity controlled by `controller`. An agent under a parent needs
    /// the parent's controller to sign; a top-level agent, anyone.
    RegisterAgent { name: String, controller: Account },
    /// Suspend, revoke or reinstate an agent: signed by the controller of an agent above it or
    /// by the ledger's operator; an agent's own controller may suspend or revoke it, not
    /// reinstate it. Revocation is final.
    SetAgentStatus { name: String, status: AgentStatus },
    /// Open a memory log owned by the sender.
    OpenMemory { agent: Option<String>, policy: Digest },
    /// Move a log to a new head. `version` is the `commits` count the writer built on, so two
    /// commits of one version never both execute; `proof` is the RFC 9162 consistency proof
    /// from the current head's size to the new one.
    CommitMemory { log: LogId, version: u64, head: Head, proof: Vec<Digest>, seal: bool },
}

/// A transaction with its sender, the sender's nonce and the sender's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTx {
    pub tx: Tx,
    pub sender: Account,
    pub nonce: u64,
    pub signature: [u8; 64],
}

fn body(tx: &Tx, sender: &Account, nonce: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.put_bytes(&sender.0);
    out.put_u64(nonce);
    match tx {
        Tx::RegisterAgent { name, controller } => {
            out.put_u8(0);
            out.put_str8(name);
            out.put_bytes(&controller.0);
        }
        Tx::SetAgentStatus { name, status } => {
            out.put_u8(1);
            out.put_str8(name);
            out.put_u8(status.code());
        }
        Tx::OpenMemory { agent, policy } => {
            out.put_u8(2);
            match agent {
                None => out.put_u8(0),
                Some(a) => {
                    out.put_u8(1);
                    out.put_str8(a);
                }
            }
            out.put_bytes(policy);
        }
        Tx::CommitMemory { log, version, head, proof, seal } => {
            out.put_u8(3);
            out.put_u64(log.0);
            out.put_u64(*version);
            head.put(&mut out);
            out.put_u8(proof.len() as u8);
            for p in proof {
                out.put_bytes(p);
            }
            out.put_u8(u8::from(*seal));
        }
    }
    out
}

fn signed_message(body: &[u8]) -> Vec<u8> {
    [TX_DOMAIN, body].concat()
}

impl SignedTx {
    pub fn sign(key: &SigningKey, nonce: u64, tx: Tx) -> Self {
        let sender = Account(key.verifying_key().to_bytes());
        let signature = key.sign(&signed_message(&body(&tx, &sender, nonce))).to_bytes();
        Self { tx, sender, nonce, signature }
    }

    /// Whether the signature is the sender's over this transaction.
    pub fn signature_holds(&self) -> bool {
        let Ok(key) = VerifyingKey::from_bytes(&self.sender.0) else { return false };
        let sig = ed25519_dalek::Signature::from_bytes(&self.signature);
        key.verify_strict(&signed_message(&body(&self.tx, &self.sender, self.nonce)), &sig).is_ok()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = body(&self.tx, &self.sender, self.nonce);
        out.put_bytes(&self.signature);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let sender = Account(r.array("sender")?);
        let nonce = r.u64("nonce")?;
        let agent_name = |r: &mut Reader<'_>| r.str8("name");
        let tx = match r.u8("kind")? {
            0 => Tx::RegisterAgent { name: agent_name(&mut r)?, controller: Account(r.array("controller")?) },
            1 => {
                let name = agent_name(&mut r)?;
                let code = r.u8("status")?;
                let status = AgentStatus::from_code(code)
                    .ok_or(WireError::Invalid { field: "status", problem: format!("unknown code {code}") })?;
                Tx::SetAgentStatus { name, status }
            }
            2 => {
                let agent = if r.flag("agent")? { Some(r.str8("agent")?) } else { None };
                Tx::OpenMemory { agent, policy: r.array("policy")? }
            }
            3 => {
                let log = LogId(r.u64("log")?);
                let version = r.u64("version")?;
                let head = Head::read(&mut r)?;
                let n = r.u8("proof")?;
                let proof = (0..n).map(|_| r.array("proof")).collect::<Result<_, _>>()?;
                Tx::CommitMemory { log, version, head, proof, seal: r.flag("seal")? }
            }
            k => {
                return Err(WireError::Invalid {
                    field: "kind",
                    problem: format!("unknown transaction kind {k}"),
                });
            }
        };
        let signature = r.array("signature")?;
        r.finish()?;
        Ok(Self { tx, sender, nonce, signature })
    }
}
