//! The fleet ledger (docs/FLEET-LEDGER.md): the Pulse chain and the ledger's state kept in
//! etcd under one key prefix, the next Pulse agreed by a compare-and-swap on the head, so any
//! number of front-ends can take transactions at once and two Pulses can never share a
//! number. The rules are the embedded ledger's own ([`sion_store::ledger::state::State`]):
//! what is accepted, and the headers it gets, are the same.
//!
//! A header is fixed in etcd before it is signed, and ed25519 signatures are deterministic:
//! no front-end signs a header that did not win its number, and a Pulse left unsigned by a
//! front-end that died is completed by any other with the same bytes.

pub mod archive;
pub mod client;
pub mod local;
pub mod service;
pub mod witness;

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::{SigningKey, VerifyingKey};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use sion_store::ledger::state::{Change, State};
use sion_store::ledger::{
    Account, Agent, AgentStatus, LedgerError, LogId, MemoryLog, PulseHeader, SignedHeader, SignedTx,
    StateProof, TxTimeProof, account_of, decode_version, encode_version,
};
use sion_verify::ledger::Cosignature;
use sion_verify::merkle::{self, Blake3, MemoryTree};

/// Why the fleet ledger did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// etcd could not be reached or refused the request (no quorum, a member down, …).
    #[error("etcd at {endpoints}: {message}")]
    Etcd { endpoints: String, message: String },
    /// The ledger's rules refused the transaction (docs/LEDGER.md, "Transactions").
    #[error("refused: {0}")]
    Refused(#[from] LedgerError),
    /// What etcd holds under the prefix is not a fleet ledger's state as this version writes it.
    #[error("the fleet ledger's state in etcd is damaged at {key}: {problem}")]
    Damaged { key: String, problem: String },
    /// No ledger under the prefix: `init` makes one.
    #[error("no fleet ledger under {0} in etcd (sion ledger init makes one)")]
    Missing(String),
    /// The ledger under the prefix signs with another key than this front-end's.
    #[error("the fleet ledger under {prefix} signs with key {found}, not this front-end's {ours}")]
    OtherKey { prefix: String, found: String, ours: String },
    /// A cosignature that does not hold for the Pulse's header, or is by a witness the
    /// front-end does not accept.
    #[error("cosignature refused: {0}")]
    Cosignature(String),
    /// An archived Pulse that cannot be read (no archive given, its segment missing or
    /// damaged), or an archiving that cannot be done.
    #[error("the archive of old Pulses: {0}")]
    Archive(String),
    /// The head moved under every attempt.
    #[error("the head moved under each of {0} attempts (too many front-ends racing for one Pulse?)")]
    Contention(u32),
}

/// How long a request to etcd may take: past it, a submission fails with an error that says
/// no quorum answered, instead of waiting for one (etcd queues requests while it has none).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn connect_options() -> etcd_client::ConnectOptions {
    etcd_client::ConnectOptions::new().with_timeout(REQUEST_TIMEOUT).with_connect_timeout(REQUEST_TIMEOUT)
}

fn etcd_err(endpoints: &str, e: etcd_client::Error) -> FleetError {
    let text = e.to_string();
    let message = if text.contains("Timeout expired") || text.contains("deadline") {
        format!(
            "no answer within {} s ({text}): is a quorum of the etcd members up? Nothing is known to \
             have been recorded; the robot keeps its atoms and commits them when the ledger answers",
            REQUEST_TIMEOUT.as_secs()
        )
    } else {
        text
    };
    FleetError::Etcd { endpoints: endpoints.to_owned(), message }
}

/// The most versions one call returns.
pub const VERSIONS_PER_CALL: u64 = 1024;

/// Attempts on other members after one could not be reached.
const TRANSIENT_TRIES: u32 = 8;

/// A member that could not be reached (refused, reset, unavailable): another may answer. A
/// timeout is not transient here — it is what a lost quorum looks like, and is reported.
fn transient(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    !text.contains("Timeout expired")
        && (text.contains("unavailable")
            || text.contains("connect error")
            || text.contains("transport error"))
}

/// How many times a submission retries after losing its compare-and-swap.
const ATTEMPTS: u32 = 256;

/// A wait before the `k`-th retry: uniform in [0, 2^min(k, 7) × 100 µs), from a cheap hash of
/// the clock and `salt` (no need for a cryptographic source to spread retries).
fn backoff(k: u32, salt: u64) -> std::time::Duration {
    let mut x = now_ns() as u64 ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(k);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    let span = 100u64 << k.min(7);
    std::time::Duration::from_micros(x % span)
}

/// One front-end of a fleet ledger: an etcd client, the key prefix and the ledger key.
pub struct FleetLedger {
    client: Client,
    endpoints: String,
    prefix: String,
    key: SigningKey,
    /// The state as of the head at an etcd revision, kept while no other front-end moves it.
    cached: Option<Snapshot>,
    /// Compare-and-swaps this front-end lost to another.
    lost: u64,
    /// Where archived Pulses' segments are (`sion ledger serve --archive DIR`).
    archive_dir: Option<std::path::PathBuf>,
    /// The last segment read, checked.
    segment: Option<archive::Segment>,
}

/// The state and the latest header, as of one revision of `P/head`.
#[derive(Clone)]
struct Snapshot {
    head_revision: i64,
    state: State,
    latest: PulseHeader,
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// Numbers in keys: 20 decimal digits, so keys sort as numbers.
fn n20(n: u64) -> String {
    format!("{n:020}")
}

fn head_value(h: &PulseHeader) -> Vec<u8> {
    let mut v = h.number.to_le_bytes().to_vec();
    v.extend_from_slice(&h.hash());
    v
}

/// An agent's value as etcd (and the service's `Agent` reply) holds it, read back: 32
/// controller, u8 status; the problem in words if it is not one.
pub fn decode_agent_value(name: &str, v: &[u8]) -> Result<Agent, String> {
    if v.len() != 33 {
        return Err(format!("{name}: {} bytes, not 33", v.len()));
    }
    let mut controller = [0u8; 32];
    controller.copy_from_slice(&v[..32]);
    let status = match v[32] {
        0 => AgentStatus::Live,
        1 => AgentStatus::Suspended,
        2 => AgentStatus::Revoked,
        s => return Err(format!("{name}: status {s}")),
    };
    Ok(Agent { name: name.to_owned(), controller: Account(controller), status })
}

/// An agent as etcd (and the service's `Agent` reply) holds it: 32 controller, u8 status.
pub fn agent_value(a: &Agent) -> Vec<u8> {
    let mut v = a.controller.0.to_vec();
    v.push(match a.status {
        AgentStatus::Live => 0,
        AgentStatus::Suspended => 1,
        AgentStatus::Revoked => 2,
    });
    v
}

fn entry(tx: Option<&SignedTx>, header: &PulseHeader) -> Vec<u8> {
    let mut v = Vec::new();
    match tx {
        None => v.push(0),
        Some(tx) => {
            v.push(1);
            let bytes = tx.encode();
            v.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            v.extend_from_slice(&bytes);
        }
    }
    v.extend_from_slice(&header.encode());
    v
}

impl FleetLedger {
    fn err(&self, e: etcd_client::Error) -> FleetError {
        etcd_err(&self.endpoints, e)
    }

    /// A read, tried again on another member when the one asked cannot be reached (a client
    /// given every member's URL balances over them, dead ones included).
    async fn get(
        &mut self,
        key: String,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse, FleetError> {
        let mut tries = 0;
        loop {
            match self.client.get(key.clone(), options.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) if transient(&e) && tries < TRANSIENT_TRIES => {
                    tries += 1;
                    tokio::time::sleep(backoff(tries, self.lost)).await;
                }
                Err(e) => return Err(self.err(e)),
            }
        }
    }

    /// A put that is the same whenever it is done (a signature), tried again likewise.
    async fn put(&mut self, key: String, value: Vec<u8>) -> Result<(), FleetError> {
        let mut tries = 0;
        loop {
            match self.client.put(key.clone(), value.clone(), None).await {
                Ok(_) => return Ok(()),
                Err(e) if transient(&e) && tries < TRANSIENT_TRIES => {
                    tries += 1;
                    tokio::time::sleep(backoff(tries, self.lost)).await;
                }
                Err(e) => return Err(self.err(e)),
            }
        }
    }

    fn key_of(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn damaged(&self, rest: &str, problem: impl Into<String>) -> FleetError {
        FleetError::Damaged { key: self.key_of(rest), problem: problem.into() }
    }

    /// Connect a front-end to the ledger under `prefix` (ending in `/`), refusing one that signs
    /// with another key.
    pub async fn connect(endpoints: &[&str], prefix: &str, key: SigningKey) -> Result<Self, FleetError> {
        let joined = endpoints.join(",");
        let client =
            Client::connect(endpoints, Some(connect_options())).await.map_err(|e| etcd_err(&joined, e))?;
        let mut ledger = Self {
            client,
            endpoints: joined,
            prefix: prefix.to_owned(),
            key,
            cached: None,
            lost: 0,
            archive_dir: None,
            segment: None,
        };
        let resp = ledger.get(ledger.key_of("key"), None).await?;
        let Some(kv) = resp.kvs().first() else { return Err(FleetError::Missing(ledger.prefix.clone())) };
        let ours = ledger.key.verifying_key().to_bytes();
        if kv.value() != ours {
            return Err(FleetError::OtherKey {
                prefix: ledger.prefix.clone(),
                found: hex::encode(kv.value()),
                ours: hex::encode(ours),
            });
        }
        Ok(ledger)
    }

    /// Make a fleet ledger under `prefix`: its key and its genesis Pulse 0, once (a second
    /// `init` finds it and connects, or refuses another key).
    pub async fn init(endpoints: &[&str], prefix: &str, key: SigningKey) -> Result<Self, FleetError> {
        let joined = endpoints.join(",");
        let mut client =
            Client::connect(endpoints, Some(connect_options())).await.map_err(|e| etcd_err(&joined, e))?;
        let genesis = State::default().header(0, now_ns(), [0; 32]);
        let signature = SignedHeader::sign(&key, genesis).signature;
        let k = |rest: &str| format!("{prefix}{rest}");
        let txn =
            Txn::new().when(vec![Compare::create_revision(k("key"), CompareOp::Equal, 0)]).and_then(vec![
                TxnOp::put(k("key"), key.verifying_key().to_bytes().to_vec(), None),
                TxnOp::put(k("head"), head_value(&genesis), None),
                TxnOp::put(k(&format!("pulse/{}", n20(0))), entry(None, &genesis), None),
                TxnOp::put(k(&format!("sig/{}", n20(0))), signature.to_vec(), None),
            ]);
        client.txn(txn).await.map_err(|e| etcd_err(&joined, e))?;
        Self::connect(endpoints, prefix, key).await
    }

    /// How many compare-and-swaps on the head this front-end has lost to others.
    pub fn lost_races(&self) -> u64 {
        self.lost
    }

    pub fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The ledger's operator account (its own key), as the embedded ledger's.
    pub fn operator(&self) -> Account {
        account_of(&self.key)
    }

    /// The state as of the current head, read at one revision (a consistent snapshot).
    async fn snapshot(&mut self) -> Result<Snapshot, FleetError> {
        let head = self.get(self.key_of("head"), None).await?;
        let Some(kv) = head.kvs().first() else { return Err(FleetError::Missing(self.prefix.clone())) };
        let head_revision = kv.mod_revision();
        if let Some(c) = &self.cached
            && c.head_revision == head_revision
        {
            return Ok(c.clone());
        }
        let value = kv.value();
        if value.len() != 40 {
            return Err(self.damaged("head", format!("{} bytes, not 40", value.len())));
        }
        let mut number = [0u8; 8];
        number.copy_from_slice(&value[..8]);
        let number = u64::from_le_bytes(number);
        let at = head.header().map_or(0, |h| h.revision());
        let options = || GetOptions::new().with_prefix().with_revision(at);
        let mut state = State::default();
        let logs = self.get(self.key_of("log/"), Some(options())).await?;
        for kv in logs.kvs() {
            let log = MemoryLog::decode(kv.value()).map_err(|e| self.damaged("log/", e.to_string()))?;
            if log.id.0 as usize != state.logs.len() {
                return Err(self
                    .damaged("log/", format!("log {} where log {} was expected", log.id, state.logs.len())));
            }
            state.logs.push(log);
        }
        let agents = self.get(self.key_of("agent/"), Some(options())).await?;
        let mut by_name = BTreeMap::new();
        for kv in agents.kvs() {
            let name = String::from_utf8_lossy(&kv.key()[self.key_of("agent/").len()..]).into_owned();
            let agent = decode_agent_value(&name, kv.value()).map_err(|e| self.damaged("agent/", e))?;
            by_name.insert(name, agent);
        }
        state.agents = by_name;
        let nonces = self.get(self.key_of("nonce/"), Some(options())).await?;
        let mut map = HashMap::new();
        for kv in nonces.kvs() {
            let hex_account = &kv.key()[self.key_of("nonce/").len()..];
            let mut account = [0u8; 32];
            hex::decode_to_slice(hex_account, &mut account)
                .map_err(|_| self.damaged("nonce/", "not an account"))?;
            let n: [u8; 8] = kv.value().try_into().map_err(|_| self.damaged("nonce/", "not 8 bytes"))?;
            map.insert(Account(account), u64::from_le_bytes(n));
        }
        state.nonces = map;
        let latest = self.pulse_header(number, Some(at)).await?;
        let snapshot = Snapshot { head_revision, state, latest };
        self.cached = Some(snapshot.clone());
        Ok(snapshot)
    }

    /// Pulse `number`'s header as etcd holds it (unsigned), at a revision if given.
    async fn pulse_header(&mut self, number: u64, at: Option<i64>) -> Result<PulseHeader, FleetError> {
        let rest = format!("pulse/{}", n20(number));
        let options = at.map(|r| GetOptions::new().with_revision(r));
        let resp = self.get(self.key_of(&rest), options).await?;
        let kv = resp.kvs().first().ok_or_else(|| self.damaged(&rest, "missing"))?;
        self.entry_header(&rest, kv.value())
    }

    /// The header at the end of a Pulse's entry (`P/pulse/N`).
    fn entry_header(&self, rest: &str, v: &[u8]) -> Result<PulseHeader, FleetError> {
        if v.len() < 89 {
            return Err(self.damaged(rest, "shorter than a header"));
        }
        PulseHeader::decode(&v[v.len() - 89..]).map_err(|e| self.damaged(rest, e.to_string()))
    }

    /// Pulse `number`'s signed header, its signature completed if the front-end that won it
    /// died before writing it (the same bytes: the header is fixed, the signature deterministic).
    /// An archived Pulse's comes from its segment.
    pub async fn header(&mut self, number: u64) -> Result<SignedHeader, FleetError> {
        let rest = format!("pulse/{}", n20(number));
        let resp = self.get(self.key_of(&rest), None).await?;
        let Some(kv) = resp.kvs().first() else { return Ok(self.archived(number).await?.header) };
        let header = self.entry_header(&rest, kv.value())?;
        let rest = format!("sig/{}", n20(number));
        let resp = self.get(self.key_of(&rest), None).await?;
        // The signature is written by the compare-and-swap that made the Pulse: a header in
        // etcd without one was not made by a front-end, and is never signed after the fact
        // (whoever can write etcd could otherwise have any header signed).
        let signature: [u8; 64] = match resp.kvs().first() {
            Some(kv) => kv.value().try_into().map_err(|_| self.damaged(&rest, "not 64 bytes"))?,
            None => {
                return Err(self.damaged(&rest, "missing: this Pulse was not made by a front-end's commit"));
            }
        };
        let signed = SignedHeader { header, signature };
        signed.verify(&self.public_key()).map_err(|e| self.damaged(&rest, e.to_string()))?;
        Ok(signed)
    }

    /// The latest Pulse's signed header.
    pub async fn latest(&mut self) -> Result<SignedHeader, FleetError> {
        let number = self.snapshot().await?.latest.number;
        self.header(number).await
    }

    /// A log as the current state holds it.
    pub async fn log(&mut self, id: LogId) -> Result<Option<MemoryLog>, FleetError> {
        Ok(self.snapshot().await?.state.logs.get(id.0 as usize).cloned())
    }

    /// The next nonce of `account`.
    pub async fn nonce(&mut self, account: &Account) -> Result<u64, FleetError> {
        Ok(self.snapshot().await?.state.nonce(account))
    }

    /// How many logs the current state holds.
    pub async fn log_count(&mut self) -> Result<u64, FleetError> {
        Ok(self.snapshot().await?.state.logs.len() as u64)
    }

    /// The agent of that name in the current state, if any.
    pub async fn agent(&mut self, name: &str) -> Result<Option<Agent>, FleetError> {
        Ok(self.snapshot().await?.state.agents.get(name).cloned())
    }

    /// Up to `limit` (at most [`VERSIONS_PER_CALL`]) versions of log `id` from version `from`,
    /// oldest first: one range read of its version records.
    pub async fn versions(&mut self, id: LogId, from: u64, limit: u64) -> Result<Vec<MemoryLog>, FleetError> {
        let current = self.log(id).await?.ok_or(LedgerError::UnknownLog(id))?;
        if from > current.commits || limit == 0 {
            return Ok(Vec::new());
        }
        let rest = format!("version/{}/", n20(id.0));
        let start = self.key_of(&format!("{rest}{}", n20(from)));
        let end = self.key_of(&format!("{rest}{}", n20(current.commits + 1)));
        let limit = limit.min(VERSIONS_PER_CALL);
        let options = GetOptions::new().with_range(end).with_limit(limit as i64);
        let resp = self.get(start, Some(options)).await?;
        let mut out = Vec::with_capacity(resp.kvs().len());
        for (i, kv) in resp.kvs().iter().enumerate() {
            let record: &[u8; 128] =
                kv.value().try_into().map_err(|_| self.damaged(&rest, "not 128 bytes"))?;
            let v = decode_version(record, &current).map_err(|e| self.damaged(&rest, e))?;
            if v.commits != from + i as u64 {
                return Err(self.damaged(
                    &rest,
                    format!("version {} where {} was expected", v.commits, from + i as u64),
                ));
            }
            out.push(v);
        }
        Ok(out)
    }

    /// The first version of log `id` in `lo..hi` whose size exceeds `size` (sizes never
    /// decrease), or `hi`.
    async fn first_over(
        &mut self,
        current: &MemoryLog,
        mut lo: u64,
        mut hi: u64,
        size: u64,
    ) -> Result<u64, FleetError> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.version(current.id, mid, current).await?.head.size > size {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// The latest committed version (one commit or more) of log `id` with at most `size` atoms.
    pub async fn last_commit_at_most(
        &mut self,
        id: LogId,
        size: u64,
    ) -> Result<Option<MemoryLog>, FleetError> {
        let current = self.log(id).await?.ok_or(LedgerError::UnknownLog(id))?;
        let k = self.first_over(&current, 1, current.commits + 1, size).await?;
        if k <= 1 { Ok(None) } else { Ok(Some(self.version(id, k - 1, &current).await?)) }
    }

    /// The first committed version of log `id` with more than `size` atoms.
    pub async fn first_commit_over(&mut self, id: LogId, size: u64) -> Result<Option<MemoryLog>, FleetError> {
        let current = self.log(id).await?.ok_or(LedgerError::UnknownLog(id))?;
        let n = current.commits + 1;
        let k = self.first_over(&current, 1, n, size).await?;
        if k >= n { Ok(None) } else { Ok(Some(self.version(id, k, &current).await?)) }
    }

    /// That log `id` stood as it did at Pulse `pulse`: the logs as etcd held them at the
    /// revision of that Pulse's own transaction (the `mod_revision` of `P/pulse/N`), the tree
    /// over them checked against the header before the path is given. Once etcd has compacted
    /// that revision away (its `--auto-compaction-*`), the same logs are rebuilt from their
    /// version records, which are never compacted: each log's last version committed at or
    /// before the Pulse ([`FleetLedger::logs_at_pulse`]).
    pub async fn state_proof(&mut self, id: LogId, pulse: u64) -> Result<StateProof, FleetError> {
        let header = self.header(pulse).await?;
        let rest = format!("pulse/{}", n20(pulse));
        let resp = self.get(self.key_of(&rest), None).await?;
        // An archived Pulse has no revision in etcd any more: its logs come from version records.
        let Some(revision) = resp.kvs().first().map(|kv| kv.mod_revision()) else {
            let logs = self.logs_at_pulse(pulse, header.header.logs).await?;
            return self.state_proof_over(id, header, logs, &rest);
        };
        let options = GetOptions::new().with_prefix().with_revision(revision);
        let logs = match self.get(self.key_of("log/"), Some(options)).await {
            Ok(resp) => {
                let mut logs = Vec::new();
                for kv in resp.kvs() {
                    logs.push(
                        MemoryLog::decode(kv.value()).map_err(|e| self.damaged("log/", e.to_string()))?,
                    );
                }
                logs
            }
            Err(FleetError::Etcd { message, .. }) if message.contains("compacted") => {
                self.logs_at_pulse(pulse, header.header.logs).await?
            }
            Err(e) => return Err(e),
        };
        self.state_proof_over(id, header, logs, &rest)
    }

    fn state_proof_over(
        &self,
        id: LogId,
        header: SignedHeader,
        logs: Vec<MemoryLog>,
        rest: &str,
    ) -> Result<StateProof, FleetError> {
        let tree = MemoryTree::<Blake3>::from_leaves(logs.iter().map(MemoryLog::encode));
        if tree.size() != header.header.logs || tree.root() != header.header.state_root {
            return Err(self.damaged(rest, "the logs at its revision are not the state its header signs"));
        }
        let log = logs.get(id.0 as usize).cloned().ok_or(LedgerError::UnknownLog(id))?;
        let path = merkle::inclusion_path::<Blake3, _>(&tree, id.0, tree.size())
            .map_err(|_| LedgerError::UnknownLog(id))?;
        Ok(StateProof { header, log, path })
    }

    /// The first `count` logs as they stood at Pulse `pulse`, from their version records:
    /// log `i`'s last version committed at or before the Pulse (version 0 is its opening, so
    /// every log the Pulse's state counts has one). A binary search of each log's versions.
    pub async fn logs_at_pulse(&mut self, pulse: u64, count: u64) -> Result<Vec<MemoryLog>, FleetError> {
        let mut out = Vec::with_capacity(count.min(1 << 16) as usize);
        for i in 0..count {
            let current = self.log(LogId(i)).await?.ok_or(LedgerError::UnknownLog(LogId(i)))?;
            // The first version committed after the Pulse: committed_at never decreases.
            let (mut lo, mut hi) = (0, current.commits + 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.version(current.id, mid, &current).await?.committed_at > pulse {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            if lo == 0 {
                return Err(self.damaged(
                    &format!("version/{}/", n20(i)),
                    format!("log {i} is counted by Pulse {pulse} but opened after it"),
                ));
            }
            out.push(self.version(current.id, lo - 1, &current).await?);
        }
        Ok(out)
    }

    /// Compact etcd's history of the ledger's keys up to the revision of Pulse `keep_from`
    /// (what etcd's `--auto-compaction-*` does by itself): the revisions before it are dropped,
    /// and state proofs of earlier Pulses are then rebuilt from version records. Returns the
    /// revision compacted to.
    pub async fn compact_before(&mut self, keep_from: u64) -> Result<i64, FleetError> {
        let rest = format!("pulse/{}", n20(keep_from));
        let resp = self.get(self.key_of(&rest), None).await?;
        let revision = resp.kvs().first().ok_or(LedgerError::NoPulse(keep_from))?.mod_revision();
        self.client
            .compact(revision, Some(etcd_client::CompactionOptions::new().with_physical()))
            .await
            .map_err(|e| self.err(e))?;
        Ok(revision)
    }

    /// Version `k` of log `id` (the version after `k` commits).
    async fn version(&mut self, id: LogId, k: u64, base: &MemoryLog) -> Result<MemoryLog, FleetError> {
        let rest = format!("version/{}/{}", n20(id.0), n20(k));
        let resp = self.get(self.key_of(&rest), None).await?;
        let kv = resp.kvs().first().ok_or_else(|| self.damaged(&rest, "missing"))?;
        let record: &[u8; 128] = kv.value().try_into().map_err(|_| self.damaged(&rest, "not 128 bytes"))?;
        decode_version(record, base).map_err(|e| self.damaged(&rest, e))
    }

    /// When `position` of log `id` was recorded: the state at the Pulse of the first commit
    /// that covered it, and at the Pulse before (found by a binary search of its versions).
    pub async fn tx_time_proof(&mut self, id: LogId, position: u64) -> Result<TxTimeProof, FleetError> {
        let current = self.log(id).await?.ok_or(LedgerError::UnknownLog(id))?;
        if current.head.size <= position {
            return Err(LedgerError::NotRecorded { log: id, position }.into());
        }
        // The first version whose size exceeds the position: versions' sizes never decrease.
        let (mut lo, mut hi) = (0, current.commits);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.version(id, mid, &current).await?.head.size > position {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let pulse = self.version(id, lo, &current).await?.committed_at;
        Ok(TxTimeProof {
            position,
            before: self.state_proof(id, pulse - 1).await?,
            at: self.state_proof(id, pulse).await?,
        })
    }

    /// The ledger's signature of a header (the verifier crate's signing: one domain, one place).
    /// Keep witness `c`'s cosignature of Pulse `number` (`P/cosig/N/W`), once it is checked
    /// against the Pulse's header. Storing it again is harmless: ed25519 is deterministic, so an
    /// honest witness's second cosignature of one header is the same bytes.
    pub async fn add_cosignature(&mut self, number: u64, c: Cosignature) -> Result<(), FleetError> {
        let latest = self.latest().await?.header.number;
        if number > latest {
            return Err(FleetError::Cosignature(format!(
                "Pulse {number} does not exist yet (the latest is {latest})"
            )));
        }
        if number < self.archived_mark().await?.0 {
            return Err(FleetError::Cosignature(format!(
                "Pulse {number} is archived: its cosignatures are closed; cosign a newer one"
            )));
        }
        let header = self.header(number).await?.header;
        if !c.holds(&self.public_key().to_bytes(), &header) {
            return Err(FleetError::Cosignature(format!(
                "witness {}'s signature does not hold for the header of Pulse {number}",
                hex::encode(c.witness)
            )));
        }
        let key = self.key_of(&format!("cosig/{}/{}", n20(number), hex::encode(c.witness)));
        self.put(key, c.signature.to_vec()).await
    }

    /// The cosignatures of Pulse `number` held, in ascending order of witness key (etcd's key
    /// order: lower-case hex).
    pub async fn cosignatures(&mut self, number: u64) -> Result<Vec<Cosignature>, FleetError> {
        let rest = format!("cosig/{}/", n20(number));
        let resp = self.get(self.key_of(&rest), Some(GetOptions::new().with_prefix())).await?;
        let mut out = Vec::with_capacity(resp.kvs().len());
        for kv in resp.kvs() {
            let name = kv.key().rsplit(|b| *b == b'/').next().unwrap_or_default();
            let mut witness = [0u8; 32];
            hex::decode_to_slice(name, &mut witness)
                .map_err(|_| self.damaged(&rest, "a key that is not a witness key"))?;
            let signature: [u8; 64] = kv
                .value()
                .try_into()
                .map_err(|_| self.damaged(&rest, "a cosignature that is not 64 bytes"))?;
            out.push(Cosignature { witness, signature });
        }
        if out.is_empty() && number < self.archived_mark().await?.0 {
            return Ok(self.archived(number).await?.cosignatures);
        }
        Ok(out)
    }

    fn sign(&self, header: &PulseHeader) -> [u8; 64] {
        SignedHeader::sign(&self.key, *header).signature
    }

    /// Check a transaction by the ledger's rules and, if it passes, make it Pulse `N` by a
    /// compare-and-swap on the head: acknowledged (the signed header returned) once etcd has
    /// committed it. Losing the race re-reads the state and decides again, so a commit of a
    /// version another front-end has just committed is refused as stale.
    pub async fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, FleetError> {
        let operator = self.operator();
        let mut lost_here = 0u32;
        let mut transport = 0u32;
        // Attempts whose reply was lost: etcd may have committed one of them.
        let mut unknown: Vec<(u64, Vec<u8>, PulseHeader)> = Vec::new();
        for _ in 0..ATTEMPTS {
            let snap = self.snapshot().await?;
            let number = snap.latest.number + 1;
            let change = match snap.state.check(&operator, &tx, number) {
                Ok(change) => change,
                Err(refusal) => {
                    // Refused now (a replayed nonce, a stale version) perhaps only because an
                    // earlier attempt of this very submission was committed: then that is its Pulse.
                    for (n, mine, header) in &unknown {
                        if self
                            .get(self.key_of(&format!("pulse/{}", n20(*n))), None)
                            .await?
                            .kvs()
                            .first()
                            .is_some_and(|kv| kv.value() == mine.as_slice())
                        {
                            return Ok(SignedHeader { header: *header, signature: self.sign(header) });
                        }
                    }
                    return Err(refusal.into());
                }
            };
            let mut next = snap.state.clone();
            next.apply(tx.sender, change.clone());
            let time_ns = now_ns().max(snap.latest.time_ns.saturating_add(1));
            let header = next.header(number, time_ns, snap.latest.hash());
            let nonce = next.nonce(&tx.sender);
            let mine = entry(Some(&tx), &header);
            // Signed before the swap and written by it: the header and its signature land
            // together or not at all (Ed25519 is deterministic, so a retry signs the same bytes).
            let signature = self.sign(&header);
            let mut puts = vec![
                TxnOp::put(self.key_of("head"), head_value(&header), None),
                TxnOp::put(self.key_of(&format!("pulse/{}", n20(number))), mine.clone(), None),
                TxnOp::put(self.key_of(&format!("sig/{}", n20(number))), signature.to_vec(), None),
                TxnOp::put(
                    self.key_of(&format!("nonce/{}", hex::encode(tx.sender.0))),
                    nonce.to_le_bytes().to_vec(),
                    None,
                ),
            ];
            match &change {
                Change::Agent(a) => {
                    puts.push(TxnOp::put(self.key_of(&format!("agent/{}", a.name)), agent_value(a), None))
                }
                Change::Log(log) => {
                    puts.push(TxnOp::put(self.key_of(&format!("log/{}", n20(log.id.0))), log.encode(), None));
                    puts.push(TxnOp::put(
                        self.key_of(&format!("version/{}/{}", n20(log.id.0), n20(log.commits))),
                        encode_version(log).to_vec(),
                        None,
                    ));
                }
            }
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(self.key_of("head"), CompareOp::Equal, snap.head_revision)])
                .and_then(puts);
            let resp = match self.client.txn(txn).await {
                Ok(resp) => resp,
                Err(e) if transient(&e) && transport < TRANSIENT_TRIES => {
                    transport += 1;
                    self.cached = None;
                    unknown.push((number, mine, header));
                    tokio::time::sleep(backoff(transport, self.lost)).await;
                    continue;
                }
                Err(e) => return Err(self.err(e)),
            };
            if !resp.succeeded() {
                self.cached = None;
                self.lost += 1;
                lost_here += 1;
                // Randomised exponential backoff: front-ends that lose together do not all come
                // back together (measured: without it, 16 racing writers starved some of them).
                tokio::time::sleep(backoff(lost_here, self.lost)).await;
                continue;
            }
            let revision = resp.header().map_or(0, |h| h.revision());
            self.cached = Some(Snapshot { head_revision: revision, state: next, latest: header });
            return Ok(SignedHeader { header, signature });
        }
        Err(FleetError::Contention(ATTEMPTS))
    }
}
