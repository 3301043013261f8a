//! Signed transactions (docs/LEDGER.md, "Transactions").

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use super::types::{Account, AgentStatus, Head, LogId};
use crate::merkle::Digest;
use crate::wire::{Put as _, Reader, WireError};

const TX_DOMAIN: &[u8] = b"sion-ledger-tx-v1";

/// The most cells one `CommitMemory` may carry (16 KiB of keys).
pub const MAX_TX_CELLS: usize = 1024;

/// A transaction, before it is signed (docs/LEDGER.md, "Transactions", says when each is
/// accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tx {
    /// Register an agent identity controlled by `controller`. An agent under a parent needs
    /// the parent's controller to sign; a top-level agent, anyone.
    RegisterAgent {
        /// The new agent's name (see [`valid_agent_name`](crate::ledger::valid_agent_name)).
        name: String,
        /// The account that will control it.
        controller: Account,
    },
    /// Suspend, revoke or reinstate an agent: signed by the controller of an agent above it or
    /// by the ledger's operator; an agent's own controller may suspend or revoke it, not
    /// reinstate it. Revocation is final.
    SetAgentStatus {
        /// The agent's name.
        name: String,
        /// Its new status.
        status: AgentStatus,
    },
    /// Open a memory log owned by the sender.
    OpenMemory {
        /// The agent the log is for, which the sender controls; `None` for none.
        agent: Option<String>,
        /// The log's 32-byte policy commitment.
        policy: Digest,
    },
    /// Move a log to a new head. `version` is the `commits` count the writer built on, so two
    /// commits of one version never both execute; `proof` is the RFC 9162 consistency proof
    /// from the current head's size to the new one.
    CommitMemory {
        /// The log to move.
        log: LogId,
        /// The log's `commits` count this commit builds on.
        version: u64,
        /// The new head.
        head: Head,
        /// The consistency proof: empty at the same size and from size 0; at most 255 nodes.
        proof: Vec<Digest>,
        /// Seal the log with this commit: no commit may follow.
        seal: bool,
        /// The map cells the atoms this commit adds lie in (docs/LEDGER.md, "Cells"), strictly
        /// increasing, at most [`MAX_TX_CELLS`]; empty on a ledger made without cells. A commit
        /// at the same size may carry cells too: a writer whose atoms meet more cells than one
        /// transaction takes sends them ahead of the commit that adds the atoms.
        cells: Vec<u128>,
    },
    /// Give an agent to another controller: signed by the ledger's operator or the controller
    /// of an agent above it. So a name taken first by the wrong account can be given back; the
    /// old controller's logs under it take no more atoms from it.
    ReassignAgent {
        /// The agent's name.
        name: String,
        /// Its new controller.
        controller: Account,
    },
}

/// A transaction with its sender, the sender's nonce and the sender's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTx {
    /// The transaction.
    pub tx: Tx,
    /// The signing account.
    pub sender: Account,
    /// The sender's sequence number, 0, 1, 2, … per account: no transaction can be replayed.
    pub nonce: u64,
    /// ed25519 signature over `"sion-ledger-tx-v1" || body` (the body is [`SignedTx::encode`]
    /// without the signature).
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
        Tx::CommitMemory { log, version, head, proof, seal, cells } => {
            // Kind 3 without cells, as before them; kind 5 is kind 3 and its cells.
            out.put_u8(if cells.is_empty() { 3 } else { 5 });
            out.put_u64(log.0);
            out.put_u64(*version);
            head.put(&mut out);
            out.put_u8(proof.len() as u8);
            for p in proof {
                out.put_bytes(p);
            }
            out.put_u8(u8::from(*seal));
            if !cells.is_empty() {
                out.put_u16(cells.len() as u16);
                for c in cells {
                    out.put_bytes(&c.to_be_bytes());
                }
            }
        }
        Tx::ReassignAgent { name, controller } => {
            out.put_u8(4);
            out.put_str8(name);
            out.put_bytes(&controller.0);
        }
    }
    out
}

/// A kind 5 commit's cells: `u16 n` (1 to [`MAX_TX_CELLS`]), then `n` 16-byte keys,
/// big-endian, strictly increasing, each of a level no higher than
/// [`MAX_LEVEL`](crate::cells::MAX_LEVEL).
fn read_cells(r: &mut Reader<'_>) -> Result<Vec<u128>, WireError> {
    let n = usize::from(r.u16("cells")?);
    if n == 0 || n > MAX_TX_CELLS {
        return Err(WireError::Invalid {
            field: "cells",
            problem: format!("{n} cells: a kind 5 commit carries 1 to {MAX_TX_CELLS}"),
        });
    }
    let mut cells = Vec::with_capacity(n);
    for i in 0..n {
        let key = u128::from_be_bytes(r.array("cells")?);
        let level = crate::cells::key_level(key);
        if level > crate::cells::MAX_LEVEL {
            return Err(WireError::Invalid {
                field: "cells",
                problem: format!("cell {i} is of level {level}, past {}", crate::cells::MAX_LEVEL),
            });
        }
        if cells.last().is_some_and(|&last| last >= key) {
            return Err(WireError::Invalid {
                field: "cells",
                problem: format!("cell {i} does not follow the one before it in key order"),
            });
        }
        cells.push(key);
    }
    Ok(cells)
}

fn signed_message(body: &[u8]) -> Vec<u8> {
    [TX_DOMAIN, body].concat()
}

impl SignedTx {
    /// Sign `tx` as the account of `key`, with that account's next `nonce`.
    pub fn sign(key: &SigningKey, nonce: u64, tx: Tx) -> Self {
        let sender = Account(key.verifying_key().to_bytes());
        let signature = key.sign(&signed_message(&body(&tx, &sender, nonce))).to_bytes();
        Self { tx, sender, nonce, signature }
    }

    /// Whether the signature is the sender's over this transaction.
    pub fn signature_holds(&self) -> bool {
        let Ok(key) = VerifyingKey::from_bytes(&self.sender.0) else { return false };
        self.signature_holds_under(&key)
    }

    /// [`SignedTx::signature_holds`] with the sender's key already decoded (a service that sees
    /// one sender often keeps it: decoding is a fifth of a check). `key` must be the sender's:
    /// `key.as_bytes() == sender`, or this is false.
    pub fn signature_holds_under(&self, key: &VerifyingKey) -> bool {
        if key.as_bytes() != &self.sender.0 {
            return false;
        }
        let sig = ed25519_dalek::Signature::from_bytes(&self.signature);
        key.verify_strict(&signed_message(&body(&self.tx, &self.sender, self.nonce)), &sig).is_ok()
    }

    /// The body (sender, u64 nonce, a kind byte 0 to 5 and the fields), then the signature.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = body(&self.tx, &self.sender, self.nonce);
        out.put_bytes(&self.signature);
        out
    }

    /// Read exactly what [`SignedTx::encode`] writes. The signature is not checked: see
    /// [`SignedTx::signature_holds`].
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
            kind @ (3 | 5) => {
                let log = LogId(r.u64("log")?);
                let version = r.u64("version")?;
                let head = Head::read(&mut r)?;
                let n = r.u8("proof")?;
                let proof = (0..n).map(|_| r.array("proof")).collect::<Result<_, _>>()?;
                let seal = r.flag("seal")?;
                let cells = if kind == 5 { read_cells(&mut r)? } else { Vec::new() };
                Tx::CommitMemory { log, version, head, proof, seal, cells }
            }
            4 => Tx::ReassignAgent { name: agent_name(&mut r)?, controller: Account(r.array("controller")?) },
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
