//! A witness (docs/FLEET-LEDGER.md, "Witnesses"): follows a fleet ledger's chain and cosigns
//! each header it has checked extends the last one it cosigned. What it cosigned last is made
//! durable before the cosignature leaves, so after any crash it still never cosigns two
//! headers with one number: a ledger that forks its chain for one reader gets no cosignature
//! for the fork from this witness, and a ledger that shows it the fork is caught. It cosigns
//! only a Pulse it checked ([`Witness::check_state`]): one whose entry is archived is followed
//! (its chain) but never cosigned.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};
use sion_ledger::link::LedgerLink;
use sion_ledger::{Account, Head, LedgerError, LogId, MemoryLog, SignedHeader, StateProof, Tx};
use sion_verify::ledger::{Chain, Cosignature, empty_head};
use sion_verify::merkle::split_point as split;
use sion_verify::merkle::{Blake3, Digest, TreeHasher as _, verify_consistency};
use sion_verify::wire::{Put as _, Reader};

use crate::client::RemoteLedger;

const MAGIC: &[u8; 8] = b"SIONWIT1";

/// Cells a witness asks of the ledger at a time when it checks a Pulse's cells root.
const CELLS_ASKED: usize = 256;

/// Why a witness did not cosign.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// The ledger showed a header for a number the witness already cosigned (or was shown,
    /// signed, for the same number: a state proof under another header than the one it checks),
    /// with another hash: the ledger forked its chain (both headers are signed by its key — the
    /// evidence).
    #[error(
        "the ledger equivocates: Pulse {number} has header {offered} (hex: {offered_header}), but this witness cosigned or was shown signed {cosigned} for that number"
    )]
    Equivocation {
        /// The Pulse number.
        number: u64,
        /// The hash this witness cosigned, hex.
        cosigned: String,
        /// The hash of the header it was shown, hex.
        offered: String,
        /// The signed header it was shown, hex (the header, 89 or 121 bytes, then the 64-byte
        /// signature).
        offered_header: String,
    },
    /// A header that does not extend the last cosigned one (its number or its `prev`).
    #[error("Pulse {number} does not extend the last cosigned header (Pulse {last}): {why}")]
    DoesNotExtend {
        /// The header's number.
        number: u64,
        /// The last cosigned number.
        last: u64,
        /// What is wrong.
        why: String,
    },
    /// The ledger's latest Pulse is below one this witness already cosigned: its chain was
    /// rolled back (etcd restored from an older copy, or a ledger started afresh under the same
    /// key), and the Pulses it signs next would take numbers it already gave out.
    #[error(
        "the ledger rolled back: its latest Pulse is {latest}, but this witness already cosigned Pulse {cosigned}; it would sign those numbers again"
    )]
    RolledBack {
        /// The ledger's latest Pulse.
        latest: u64,
        /// The last Pulse this witness cosigned.
        cosigned: u64,
    },
    /// A header not signed by the ledger's key.
    #[error("Pulse {0}'s header is not signed by the ledger's key")]
    Signature(u64),
    /// The Pulse's entry does not explain its signed header ([`Witness::check_state`]): its
    /// stored transaction is damaged, missing, or does not make the header's state root of the
    /// Pulse before. Not evidence against the ledger's key — the entry's transaction is covered
    /// by no signature of it, so whoever can write etcd can rewrite it — but the witness cannot
    /// vouch for the Pulse either: it does not cosign, and tries again later (the stored copy
    /// put right, it goes on). The same refusal meets a key holder that signed a state root that
    /// does not follow (docs/FLEET-LEDGER.md, "Witnesses").
    #[error(
        "Pulse {number}'s entry does not explain its signed header: {why} (its stored transaction is damaged or rewritten — no signature a witness reads covers it — or the ledger's key signed a state that does not follow; not cosigned)"
    )]
    Damaged {
        /// The Pulse.
        number: u64,
        /// What does not follow.
        why: String,
    },
    /// The state file is for another ledger, or damaged.
    #[error("the witness state {path}: {problem}")]
    State {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The ledger could not be asked, or refused.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A witness of one ledger: its key, the ledger's, and the last header it cosigned.
pub struct Witness {
    key: SigningKey,
    ledger: VerifyingKey,
    state: PathBuf,
    /// The last header followed: cosigned, or passed without a cosignature (archived).
    last: Option<(u64, Digest)>,
    /// Pulses the last [`Witness::follow`] passed without cosigning.
    passed: u64,
    /// The last header this process checked and cosigned in [`Witness::follow`]: handed again
    /// without a second check while it is still the last one.
    vouched: Option<(u64, Digest)>,
}

impl Witness {
    /// A witness with signing key `key` of the ledger whose key is `ledger`, remembering what
    /// it cosigned in the file `state` (made on first use; one file per ledger witnessed).
    pub fn open(key: SigningKey, ledger: VerifyingKey, state: &Path) -> Result<Self, WitnessError> {
        let bad = |problem: String| WitnessError::State { path: state.to_owned(), problem };
        let last = match std::fs::read(state) {
            Ok(bytes) => {
                let (ledger_key, number, hash) = decode_state(MAGIC, "witness", &bytes).map_err(bad)?;
                if ledger_key != ledger.to_bytes() {
                    return Err(bad(format!(
                        "it is of the ledger with key {}, not {}",
                        hex::encode(ledger_key),
                        hex::encode(ledger.to_bytes())
                    )));
                }
                Some((number, hash))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(bad(e.to_string())),
        };
        Ok(Self { key, ledger, state: state.to_owned(), last, passed: 0, vouched: None })
    }

    /// This witness's public key.
    pub fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The last header followed — cosigned, or passed uncosigned because its entry is archived:
    /// its number and hash.
    pub fn last(&self) -> Option<(u64, Digest)> {
        self.last
    }

    /// How many Pulses the last [`Witness::follow`] went past without cosigning them: their
    /// entries are archived, so there was nothing to check their state roots against.
    pub fn passed(&self) -> u64 {
        self.passed
    }

    /// Cosign `h` if it is the ledger's and extends the last header cosigned (or is the one
    /// cosigned last: the same cosignature again). The new last header is durable before the
    /// cosignature is returned.
    pub fn cosign(&mut self, h: &SignedHeader) -> Result<Cosignature, WitnessError> {
        self.advance(h)?;
        Ok(Cosignature::sign(&self.key, &self.ledger.to_bytes(), &h.header))
    }

    /// Take `h` as the last header followed if it is the ledger's and extends the last one (or
    /// is it), durably; nothing is signed.
    fn advance(&mut self, h: &SignedHeader) -> Result<(), WitnessError> {
        let number = h.header.number;
        h.verify(&self.ledger).map_err(|_| WitnessError::Signature(number))?;
        let hash = h.header.hash();
        match self.last {
            Some((n, cosigned)) if n == number => {
                if cosigned != hash {
                    return Err(equivocation(number, cosigned, h));
                }
            }
            Some((n, cosigned)) => {
                if number != n + 1 {
                    let why = if number < n {
                        format!("this witness already cosigned up to Pulse {n}")
                    } else {
                        format!("Pulse {} must be cosigned first", n + 1)
                    };
                    return Err(WitnessError::DoesNotExtend { number, last: n, why });
                }
                if h.header.prev != cosigned {
                    return Err(WitnessError::DoesNotExtend {
                        number,
                        last: n,
                        why: format!(
                            "its prev is {}, the cosigned header's hash {}",
                            hex::encode(h.header.prev),
                            hex::encode(cosigned)
                        ),
                    });
                }
                self.remember(number, hash)?;
            }
            None => {
                if number != 0 {
                    return Err(WitnessError::DoesNotExtend {
                        number,
                        last: 0,
                        why: "a new witness starts at the genesis, Pulse 0".into(),
                    });
                }
                self.remember(number, hash)?;
            }
        }
        Ok(())
    }

    fn remember(&mut self, number: u64, hash: Digest) -> Result<(), WitnessError> {
        let bytes = encode_state(MAGIC, &self.ledger.to_bytes(), number, hash);
        sion_disk::Disk::os()
            .replace_file(&self.state, &bytes)
            .map_err(|e| WitnessError::State { path: self.state.clone(), problem: e.to_string() })?;
        self.last = Some((number, hash));
        Ok(())
    }

    /// Follow the ledger at `link` up to its latest Pulse: fetch each header after the last
    /// followed, check it, cosign it and hand the cosignature back. First the last number is
    /// asked for again — if the ledger now shows another header there, it forked. A Pulse whose
    /// entry the service says is archived cannot be checked: it is followed (its chain) and
    /// never cosigned ([`Witness::passed`] counts those). Returns how many Pulses were
    /// cosigned; `progress` is told each number.
    pub fn follow(
        &mut self,
        link: &RemoteLedger,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, WitnessError> {
        if link.public_key() != self.ledger {
            return Err(LedgerError::Remote {
                ledger: link.describe(),
                message: format!(
                    "it signs with key {}, not the witnessed {}",
                    hex::encode(link.public_key().to_bytes()),
                    hex::encode(self.ledger.to_bytes())
                ),
            }
            .into());
        }
        let latest = link.latest()?.header.number;
        if let Some((n, _)) = self.last
            && latest < n
        {
            return Err(WitnessError::RolledBack { latest, cosigned: n });
        }
        let mut next = match self.last {
            // Again: a cosignature made durable here may not have reached the ledger.
            Some((n, _)) => n,
            None => 0,
        };
        let mut cosigned = 0;
        self.passed = 0;
        while next <= latest {
            let h = link.header(next)?;
            let again = self.last.is_some_and(|(n, _)| n == next);
            // The last one again is checked again too unless this process checked it: it may
            // have been passed unchecked, and the service's word "archived" must never stand in
            // for a check.
            let vouched =
                again && self.vouched.is_some_and(|v| Some(v) == self.last && v.1 == h.header.hash());
            if !vouched && !self.check_state(link, &h)? {
                self.advance(&h)?;
                if !again {
                    self.passed += 1;
                }
                progress(next);
                next += 1;
                continue;
            }
            let c = self.cosign(&h)?;
            self.vouched = Some((next, h.header.hash()));
            match link.cosign(next, &c) {
                Ok(()) => {}
                // Handing the last one back again is best effort: the ledger may have archived
                // that Pulse meanwhile, and then takes no cosignature of it.
                Err(LedgerError::Refused { .. }) if again => {}
                Err(e) => return Err(e.into()),
            }
            if !again {
                cosigned += 1;
            }
            progress(next);
            next += 1;
        }
        Ok(cosigned)
    }
}

impl Witness {
    /// Check, before cosigning, that Pulse `h`'s state root is what its transaction makes of the
    /// state of the Pulse before — as far as a witness can without holding the state, from what
    /// the ledger signed and the sender signed, trusting nothing else the service says: the
    /// Pulse's entry (its transaction, and a header that must be the signed one) and state proofs
    /// of the one log the transaction touches, at the two Pulses (each checked against its signed
    /// header by the link, and that header required to be exactly `h`, or the Pulse before — the
    /// one this witness followed last when it did: a proof under another signed header for the
    /// same number is the ledger equivocating). An agent's transaction leaves the logs as they were; an opening adds
    /// exactly the log it asks for, the new leaf's inclusion path folding to the previous state
    /// root; a commit changes one leaf — the same path at both Pulses — as the rules allow
    /// (the writer's signature, the version, a consistency proof from the old head to the new).
    /// Not checked (not in the state root, or not without the whole state): nonces, agents and
    /// whether an agent above a log was live. Returns false when the Pulse's entry is archived
    /// (nothing was checked beyond the chain): the caller must not cosign it. An entry that does
    /// not explain the header is [`WitnessError::Damaged`], not evidence of a fork: no signature
    /// a witness reads covers the entry's transactions (a front-end checks format 4's `P/esig/N`;
    /// the service does not serve it).
    pub fn check_state(&self, link: &RemoteLedger, h: &SignedHeader) -> Result<bool, WitnessError> {
        let number = h.header.number;
        h.verify(&self.ledger).map_err(|_| WitnessError::Signature(number))?;
        let bad = |why: String| WitnessError::Damaged { number, why };
        if number == 0 {
            if h.header.logs != 0
                || h.header.state_root != Blake3::hash_empty()
                || h.header.cells.is_some_and(|c| c != [0; 32])
            {
                return Err(WitnessError::DoesNotExtend {
                    number,
                    last: 0,
                    why: "the genesis holds logs".into(),
                });
            }
            return Ok(true);
        }
        let (txs, at) = match link.entry(number) {
            Ok(entry) => entry,
            Err(LedgerError::Refused { code, .. }) if code == "archived" => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        if at != h.header {
            return Err(bad("its entry holds another header than the signed one".into()));
        }
        if txs.is_empty() {
            return Err(bad("its entry holds no transaction".into()));
        }
        if let Some(twice) = crate::sender_twice(&txs) {
            return Err(bad(format!("its entry holds two transactions of {twice}")));
        }
        if crate::openings(&txs) > 1 {
            return Err(bad("its entry opens more than one log".into()));
        }
        if let Some(i) = txs.iter().position(|tx| !tx.signature_holds()) {
            return Err(bad(format!("its transaction {i}'s signature does not hold")));
        }
        let prev = link.header(number - 1)?;
        let (was, now) = (&prev.header, &h.header);
        if let Some((n, followed)) = self.last
            && n == number - 1
            && followed != was.hash()
        {
            return Err(equivocation(n, followed, &prev));
        }
        if was.hash() != now.prev {
            return Err(WitnessError::DoesNotExtend {
                number,
                last: number - 1,
                why: format!("its prev is not the hash of Pulse {}'s header", number - 1),
            });
        }
        // A state proof is checked against its own signed header by the link; it must be under
        // exactly the header checked here (or the one before), or it proves nothing of them.
        let under = |p: &StateProof, want: &SignedHeader| -> Result<(), WitnessError> {
            if p.header.header == want.header {
                return Ok(());
            }
            Err(equivocation(want.header.number, want.header.hash(), &p.header))
        };
        // What the Pulse changed (each changed leaf's new hash, by position), and what the Pulse
        // before held, learnt from its state proofs (the hashes of ranges of its tree).
        let mut changes = Changes::new(was.logs, was.state_root);
        let mut next = was.logs;
        for tx in &txs {
            match &tx.tx {
                Tx::RegisterAgent { .. } | Tx::SetAgentStatus { .. } | Tx::ReassignAgent { .. } => {}
                Tx::OpenMemory { agent, policy } => {
                    // Openings take the next ids in the entry's order.
                    let id = LogId(next);
                    next += 1;
                    if id.0 >= now.logs {
                        return Err(bad(format!(
                            "it opens more logs than the {} its header counts",
                            now.logs
                        )));
                    }
                    let opened = link.state_proof(id, number)?;
                    under(&opened, h)?;
                    let want = MemoryLog {
                        id,
                        writer: tx.sender,
                        agent: agent.clone(),
                        policy: *policy,
                        head: empty_head(),
                        commits: 0,
                        committed_at: number,
                        sealed: false,
                        chain: opened.log.chain.map(|c| Chain { prev: c.prev, next: None }),
                    };
                    if opened.log != want {
                        return Err(bad(format!("log {id} is not the log its transaction opens")));
                    }
                    changes.set(id.0, &want).map_err(bad)?;
                    // The one change an opening may make to the logs before: the writer's previous
                    // last log (its chain's end at the Pulse before: `next` none) now names this
                    // one. That it was the writer's *last* a witness checks by its `next`; that a
                    // log with no `prev` is its writer's first it cannot.
                    if let Some(last) = want.chain.and_then(|c| c.prev) {
                        if last.0 >= was.logs {
                            return Err(bad(format!("log {id} is chained after log {last}, opened with it")));
                        }
                        let before = link.state_proof(last, number - 1)?;
                        under(&before, &prev)?;
                        let end = before.log.chain.is_some_and(|c| c.next.is_none());
                        if before.log.writer != tx.sender || !end {
                            return Err(bad(format!(
                                "log {id} is chained after log {last}, which is not its writer's last log"
                            )));
                        }
                        changes.learn(&before).map_err(bad)?;
                        let mut after = before.log.clone();
                        if let Some(c) = &mut after.chain {
                            c.next = Some(id);
                        }
                        changes.set(last.0, &after).map_err(bad)?;
                    }
                }
                Tx::CommitMemory { log, cells, .. } if !cells.is_empty() && now.cells.is_none() => {
                    return Err(bad(format!(
                        "its commit of log {log} names cells, which this ledger (made before cells) does not keep"
                    )));
                }
                Tx::CommitMemory { log, version, head, proof, seal, .. } => {
                    if log.0 >= was.logs {
                        return Err(bad(format!(
                            "it commits log {log}, which the Pulse before did not hold"
                        )));
                    }
                    let before = link.state_proof(*log, number - 1)?;
                    let after = link.state_proof(*log, number)?;
                    under(&before, &prev)?;
                    under(&after, h)?;
                    let current = &before.log;
                    if let Some(why) = commit_refusal(current, &tx.sender, *version, head, proof) {
                        return Err(bad(format!("its commit of log {log} breaks the rules: {why}")));
                    }
                    let want = MemoryLog {
                        head: *head,
                        commits: current.commits + 1,
                        committed_at: number,
                        sealed: *seal,
                        ..current.clone()
                    };
                    if after.log != want {
                        return Err(bad(format!("log {log} after it is not what the commit makes of it")));
                    }
                    changes.learn(&before).map_err(bad)?;
                    changes.set(log.0, &want).map_err(bad)?;
                }
            }
        }
        if now.logs != next {
            return Err(bad(format!(
                "its openings leave {} logs after {}, not the {} its header counts",
                next, was.logs, now.logs
            )));
        }
        // New logs sit past the old ones: the Pulse before's last log's path shows them all.
        if next > was.logs && was.logs > 0 && !changes.knows_leaf(was.logs - 1) {
            let last = link.state_proof(LogId(was.logs - 1), number - 1)?;
            under(&last, &prev)?;
            changes.learn(&last).map_err(bad)?;
        }
        // Every other leaf as the Pulse before held it, and these as the transactions make them:
        // the state root the header signs.
        let root = changes.root(now.logs).map_err(bad)?;
        if root != now.state_root {
            let ids: Vec<String> = changes.changed.keys().map(u64::to_string).collect();
            return Err(bad(match ids.as_slice() {
                [one] => format!(
                    "logs other than log {one}, the one it changes, changed (or not as it changes it)"
                ),
                many => format!(
                    "logs other than logs {}, those its transactions change, changed (or not as they change them)",
                    many.join(", ")
                ),
            }));
        }
        self.check_cells(link, h, &prev, &txs)?;
        Ok(true)
    }

    /// The cells root `h` signs is what its commits' cells make of the Pulse before's
    /// (docs/FLEET-LEDGER.md, "Cells"): each cell a commit names lists its log from then on,
    /// and no other cell changes. From the proof of the named cells at the Pulse before (under
    /// exactly `prev`) alone: a subtree it gives by its hash holds no named cell, so the root
    /// after is computed from it
    /// ([`verify_update`](sion_verify::cells::RangeCellProof::verify_update)).
    fn check_cells(
        &self,
        link: &RemoteLedger,
        h: &SignedHeader,
        prev: &SignedHeader,
        txs: &[sion_ledger::SignedTx],
    ) -> Result<(), WitnessError> {
        let number = h.header.number;
        let bad = |why: String| WitnessError::Damaged { number, why };
        let (was, now) = match (prev.header.cells, h.header.cells) {
            (None, None) => return Ok(()),
            (Some(was), Some(now)) => (was, now),
            _ => {
                return Err(bad(
                    "its header and the one before disagree on whether the ledger keeps cells".into()
                ));
            }
        };
        let mut named: BTreeMap<u128, Vec<u64>> = BTreeMap::new();
        for tx in txs {
            if let Tx::CommitMemory { log, cells, .. } = &tx.tx {
                for key in cells {
                    named.entry(*key).or_default().push(log.0);
                }
            }
        }
        if named.is_empty() {
            return if was == now {
                Ok(())
            } else {
                Err(bad("its cells root changed, though no commit names a cell".into()))
            };
        }
        let keys: Vec<u128> = named.keys().copied().collect();
        let asked = crate::cells::AskedCells::keys(&keys);
        // Asked a part at a time (each answer carries every log its cells list, and is bounded),
        // every part under exactly the header followed, merged into one proof of them all.
        let mut proof: Option<sion_verify::cells::RangeCellProof> = None;
        let mut lists: BTreeMap<u128, Vec<u64>> = BTreeMap::new();
        // Parts too large to answer (their cells list many logs) are halved and asked again.
        let mut parts: Vec<&[u128]> = keys.chunks(CELLS_ASKED).rev().collect();
        while let Some(part) = parts.pop() {
            let answer = match link.cells(&crate::cells::AskedCells::keys(part), Some(number - 1)) {
                Err(LedgerError::Refused { code, .. }) if code == "too_large" && part.len() > 1 => {
                    let (left, right) = part.split_at(part.len() / 2);
                    parts.push(right);
                    parts.push(left);
                    continue;
                }
                other => other?,
            };
            let (at, p, l) =
                answer.ok_or_else(|| bad("the ledger gives no cells for the Pulse before".into()))?;
            if at.header != prev.header {
                return Err(equivocation(prev.header.number, prev.header.hash(), &at));
            }
            // Only the logs of cells asked in this part count.
            lists.extend(l.into_iter().filter(|(k, _)| part.binary_search(k).is_ok()));
            proof = Some(match proof {
                None => p,
                Some(so_far) => so_far.merge(&p).ok_or_else(|| {
                    bad("its cells at the Pulse before, asked in parts, are of two tries".into())
                })?,
            });
        }
        let proof = proof.ok_or_else(|| bad("no cells asked".into()))?;
        let mut updates = BTreeMap::new();
        for (key, logs) in &named {
            let mut ids = lists.get(key).cloned().unwrap_or_default();
            for id in logs {
                if let Err(i) = ids.binary_search(id) {
                    ids.insert(i, *id);
                }
            }
            updates.insert(*key, sion_verify::cells::logs_digest(&ids));
        }
        let (before, after) = proof
            .verify_update(&was, &asked, &updates)
            .map_err(|e| bad(format!("the proof of its cells at the Pulse before: {e}")))?;
        // The logs given for each named cell are the ones the proof shows it listed.
        let before: BTreeMap<u128, Digest> = before.into_iter().collect();
        for key in &keys {
            let shown = before.get(key).copied();
            let given = lists.get(key).filter(|l| !l.is_empty()).map(|l| sion_verify::cells::logs_digest(l));
            if shown != given {
                return Err(bad(format!(
                    "cell {key:032x}'s logs at the Pulse before are not the ones its proof shows"
                )));
            }
        }
        if after != now {
            return Err(bad(format!(
                "its cells root is not what its commits' {} named cells make of the Pulse before's",
                keys.len()
            )));
        }
        Ok(())
    }
}

/// A Pulse's changes to the state tree, and what a witness knows of the tree before it: enough
/// to compute the new state root from the old one — each changed leaf's new hash, and for every
/// range of leaves it did not change, that range's hash at the Pulse before, from the inclusion
/// paths of state proofs checked against that Pulse's header.
struct Changes {
    /// Leaves in the tree before, and its root.
    size: u64,
    before: Digest,
    changed: BTreeMap<u64, Digest>,
    /// `[lo, hi)` → the hash of that node of the tree before.
    known: HashMap<(u64, u64), Digest>,
}

impl Changes {
    fn new(size: u64, root: Digest) -> Self {
        let mut known = HashMap::new();
        if size > 0 {
            known.insert((0, size), root);
        }
        Self { size, before: root, changed: BTreeMap::new(), known }
    }

    fn set(&mut self, i: u64, log: &MemoryLog) -> Result<(), String> {
        if self.changed.insert(i, Blake3::hash_leaf(&log.encode())).is_some() {
            return Err(format!("log {i} is changed twice by one Pulse"));
        }
        Ok(())
    }

    fn knows_leaf(&self, i: u64) -> bool {
        self.known.contains_key(&(i, i + 1))
    }

    /// Learn the nodes of a state proof at the Pulse before: its leaf, its path's siblings and
    /// the ancestors they fold to.
    fn learn(&mut self, p: &StateProof) -> Result<(), String> {
        let (i, n) = (p.log.id.0, self.size);
        if p.header.header.logs != n || i >= n {
            return Err(format!(
                "a state proof of log {i} in a tree of {} logs, not {n}",
                p.header.header.logs
            ));
        }
        // The siblings' ranges, top-down, then bottom-up as the path lists them.
        let (mut lo, mut hi) = (0, n);
        let mut ranges = Vec::new();
        while hi - lo > 1 {
            let k = split(hi - lo);
            if i < lo + k {
                ranges.push((lo + k, hi));
                hi = lo + k;
            } else {
                ranges.push((lo, lo + k));
                lo += k;
            }
        }
        ranges.reverse();
        if ranges.len() != p.path.len() {
            return Err(format!("log {i}'s path has {} steps, not {}", p.path.len(), ranges.len()));
        }
        let mut node = ((i, i + 1), Blake3::hash_leaf(&p.log.encode()));
        self.known.insert(node.0, node.1);
        for (range, sibling) in ranges.into_iter().zip(&p.path) {
            self.known.insert(range, *sibling);
            node = if range.0 < node.0.0 {
                ((range.0, node.0.1), Blake3::hash_children(sibling, &node.1))
            } else {
                ((node.0.0, range.1), Blake3::hash_children(&node.1, sibling))
            };
            self.known.insert(node.0, node.1);
        }
        // It folds to the root of the Pulse before (the link checked it so; checked here too, so
        // nothing learnt is taken on another's word).
        if node != ((0, n), self.before) {
            return Err(format!("log {i}'s path does not fold to the state root of the Pulse before"));
        }
        Ok(())
    }

    /// The root of the tree of `size` leaves after the changes.
    fn root(&self, size: u64) -> Result<Digest, String> {
        if size == 0 {
            return Ok(Blake3::hash_empty());
        }
        self.node(0, size)
    }

    fn node(&self, lo: u64, hi: u64) -> Result<Digest, String> {
        if self.changed.range(lo..hi).next().is_none() {
            return self.known.get(&(lo, hi)).copied().ok_or_else(|| {
                format!("nothing it was given shows logs {lo} … {} of the Pulse before", hi - 1)
            });
        }
        if hi - lo == 1 {
            return self.changed.get(&lo).copied().ok_or_else(|| format!("log {lo}"));
        }
        let k = split(hi - lo);
        Ok(Blake3::hash_children(&self.node(lo, lo + k)?, &self.node(lo + k, hi)?))
    }
}

/// Why a commit of `current` is refused by the rules a witness can check (docs/LEDGER.md,
/// "Transactions"; whether the agent above is live it cannot): none if it is accepted.
fn commit_refusal(
    current: &MemoryLog,
    sender: &Account,
    version: u64,
    head: &Head,
    proof: &[Digest],
) -> Option<String> {
    let old = &current.head;
    if current.writer != *sender {
        return Some("not signed by the log's writer".into());
    }
    if current.sealed {
        return Some("the log is sealed".into());
    }
    if version != current.commits {
        return Some(format!("version {version}, but the log is at {}", current.commits));
    }
    if head.size < old.size {
        return Some(format!("it shrinks the log from {} to {}", old.size, head.size));
    }
    if head.size == old.size {
        return (head.root != old.root || !proof.is_empty())
            .then(|| "the root changed at the same size".into());
    }
    if old.size == 0 {
        return (!proof.is_empty()).then(|| "a commit onto the empty log carries a proof".into());
    }
    verify_consistency::<Blake3, _>(old.size, head.size, &old.root, &head.root, proof)
        .err()
        .map(|e| format!("no consistency from {} to {} atoms ({e})", old.size, head.size))
}

fn equivocation(number: u64, cosigned: Digest, h: &SignedHeader) -> WitnessError {
    let mut offered_header = Vec::new();
    h.put(&mut offered_header);
    WitnessError::Equivocation {
        number,
        cosigned: hex::encode(cosigned),
        offered: hex::encode(h.header.hash()),
        offered_header: hex::encode(offered_header),
    }
}

/// A witness's state file (this witness's, `SIONWIT1`, and the C2SP witness's, `SIONC2W1`):
/// the 8-byte `magic`, 32 ledger key, u64 number (or size), 32 hash (or root), u32 CRC-32C
/// (Castagnoli, little-endian) of what precedes it.
pub(crate) fn encode_state(magic: &[u8; 8], ledger: &[u8; 32], number: u64, hash: Digest) -> Vec<u8> {
    let mut out = Vec::with_capacity(84);
    out.put_bytes(magic);
    out.put_bytes(ledger);
    out.put_u64(number);
    out.put_bytes(&hash);
    let crc = crc32c::crc32c(&out);
    out.put_u32(crc);
    out
}

/// Read what [`encode_state`] wrote under `magic`; `what` names the file in a refusal.
pub(crate) fn decode_state(
    magic: &[u8; 8],
    what: &str,
    bytes: &[u8],
) -> Result<([u8; 32], u64, Digest), String> {
    if bytes.len() != 84 {
        return Err(format!("{} bytes, not 84", bytes.len()));
    }
    let (body, crc) = bytes.split_at(80);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err("its checksum fails (damaged): restore it, never start it afresh".into());
    }
    let mut r = Reader::new(body);
    if r.take(8, "magic").map_err(|e| e.to_string())? != magic {
        return Err(format!("not a {what} state file ({})", String::from_utf8_lossy(magic)));
    }
    let ledger = r.array("ledger key").map_err(|e| e.to_string())?;
    let number = r.u64("number").map_err(|e| e.to_string())?;
    let hash = r.array("hash").map_err(|e| e.to_string())?;
    Ok((ledger, number, hash))
}
