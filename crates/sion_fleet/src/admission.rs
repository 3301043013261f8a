//! Who may submit to a front-end, and how fast (docs/FLEET-LEDGER.md, "Admission"): the
//! operator's admission policy, checked at the door — before the front-end reads or writes
//! anything in etcd for the transaction — so a stranger's flood of openings costs a signature
//! check and a table look-up, never the state.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sion_ledger::{Account, SignedTx, Tx};

/// Who may open logs and register agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Any account (still under the rate limits and quotas).
    Anyone,
    /// Only the registered writer keys, the controllers of agents under the registered
    /// prefixes, and the ledger's operator.
    Registered,
}

/// A token bucket's figures: `per_second` tokens added a second, at most `burst` held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

/// The operator's admission policy (`sion ledger serve --admission FILE`).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub open: Open,
    /// Registered writer accounts (their public keys).
    pub writers: HashSet<Account>,
    /// Agent-name prefixes: an opening for an agent whose name starts with one, or the
    /// registration of such an agent, is admitted (the ledger's rules then require the sender
    /// to control the agent, or the parent above it).
    pub agents: Vec<String>,
    /// The most logs one account may have opened (none: no limit). The operator has none.
    pub max_logs_per_account: Option<u64>,
    /// Transactions per account (none: no limit).
    pub rate: Option<Rate>,
    /// Openings and agent registrations by all accounts that are not registered writers,
    /// together (none: no limit): what bounds a flood of fresh keys when `open` is `anyone`.
    pub strangers: Option<Rate>,
}

/// The most logs an account may open unless the policy says otherwise.
pub const DEFAULT_MAX_LOGS: u64 = 64;
/// Transactions an account may submit a second unless the policy says otherwise (a robot
/// commits every few seconds), and its burst.
pub const DEFAULT_RATE: Rate = Rate { per_second: 20.0, burst: 40.0 };
/// Openings and registrations a second by all unregistered accounts together, and the burst.
pub const DEFAULT_STRANGERS: Rate = Rate { per_second: 10.0, burst: 50.0 };

/// How many accounts' buckets a front-end keeps before it forgets the idle ones.
const MAX_BUCKETS: usize = 65_536;

impl Policy {
    /// No door at all: every account, no limit (the library's default, for tests and
    /// benchmarks; `sion ledger serve` never runs without a policy).
    pub fn unlimited() -> Self {
        Self {
            open: Open::Anyone,
            writers: HashSet::new(),
            agents: Vec::new(),
            max_logs_per_account: None,
            rate: None,
            strangers: None,
        }
    }

    /// What `sion ledger serve` uses without `--admission`: anyone may open, under the default
    /// quota and rates.
    pub fn default_open() -> Self {
        Self {
            max_logs_per_account: Some(DEFAULT_MAX_LOGS),
            rate: Some(DEFAULT_RATE),
            strangers: Some(DEFAULT_STRANGERS),
            ..Self::unlimited()
        }
    }

    /// Read a policy file (JSON; docs/FLEET-LEDGER.md, "Admission").
    pub fn read(path: &Path) -> Result<Self, AdmissionError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AdmissionError { path: path.display().to_string(), problem: e.to_string() })?;
        Self::parse(&text).map_err(|problem| AdmissionError { path: path.display().to_string(), problem })
    }

    /// A policy from its JSON text; the problem names the field.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let obj = value.as_object().ok_or("not a JSON object")?;
        let mut policy = Self::default_open();
        for (field, v) in obj {
            match field.as_str() {
                "open" => {
                    policy.open = match v.as_str() {
                        Some("anyone") => Open::Anyone,
                        Some("registered") => Open::Registered,
                        _ => return Err(format!("open: {v}, not \"anyone\" or \"registered\"")),
                    }
                }
                "writers" => {
                    let list = v.as_array().ok_or("writers: not a list of hex keys")?;
                    for (i, k) in list.iter().enumerate() {
                        let hex_key = k.as_str().ok_or_else(|| format!("writers[{i}]: not a string"))?;
                        let mut account = [0u8; 32];
                        hex::decode_to_slice(hex_key.trim(), &mut account)
                            .map_err(|_| format!("writers[{i}]: {hex_key:?} is not 64 hex digits"))?;
                        policy.writers.insert(Account(account));
                    }
                }
                "agents" => {
                    let list = v.as_array().ok_or("agents: not a list of agent-name prefixes")?;
                    policy.agents = list
                        .iter()
                        .enumerate()
                        .map(|(i, p)| match p.as_str() {
                            Some(p) if !p.is_empty() => Ok(p.to_owned()),
                            _ => Err(format!("agents[{i}]: not a non-empty string")),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "max_logs_per_account" => {
                    policy.max_logs_per_account = match v {
                        serde_json::Value::Null => None,
                        v => Some(v.as_u64().ok_or("max_logs_per_account: not a whole number or null")?),
                    }
                }
                "rate" => policy.rate = rate(field, v)?,
                "strangers" => policy.strangers = rate(field, v)?,
                other => return Err(format!("{other}: not a field of an admission policy")),
            }
        }
        Ok(policy)
    }

    /// The policy as JSON (what `sion ledger admit` writes).
    pub fn to_json(&self) -> String {
        let rate = |r: &Option<Rate>| match r {
            None => serde_json::Value::Null,
            Some(r) => serde_json::json!({ "per_second": r.per_second, "burst": r.burst }),
        };
        let mut writers: Vec<String> = self.writers.iter().map(|a| hex::encode(a.0)).collect();
        writers.sort();
        let v = serde_json::json!({
            "open": match self.open { Open::Anyone => "anyone", Open::Registered => "registered" },
            "writers": writers,
            "agents": self.agents,
            "max_logs_per_account": self.max_logs_per_account,
            "rate": rate(&self.rate),
            "strangers": rate(&self.strangers),
        });
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    }

    fn registered(&self, account: &Account) -> bool {
        self.writers.contains(account)
    }

    fn agent_admitted(&self, name: &str) -> bool {
        self.agents.iter().any(|p| name.starts_with(p.as_str()))
    }
}

fn rate(field: &str, v: &serde_json::Value) -> Result<Option<Rate>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let number = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_f64)
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| format!("{field}.{k}: not a positive number"))
    };
    if let Some(other) = v.as_object().and_then(|o| o.keys().find(|k| *k != "per_second" && *k != "burst")) {
        return Err(format!("{field}.{other}: not a field of a rate (per_second, burst)"));
    }
    let (per_second, burst) = (number("per_second")?, number("burst")?);
    if burst < 1.0 {
        return Err(format!("{field}.burst: {burst}, less than one transaction"));
    }
    Ok(Some(Rate { per_second, burst }))
}

/// A policy file that cannot be used, naming it and the field.
#[derive(Debug, thiserror::Error)]
#[error("the admission policy {path}: {problem}")]
pub struct AdmissionError {
    pub path: String,
    pub problem: String,
}

/// A submission refused at the door; over the service, its [`Refusal::code`] travels in
/// `sion-refusal` and a retry-after in `retry-after-ms`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The policy does not admit this account to open logs or register agents.
    #[error(
        "not admitted: account {account} is not registered with this fleet ledger (the operator admits \
         writer keys and agent prefixes: sion ledger admit)"
    )]
    NotAdmitted { account: String },
    /// The account has opened as many logs as it may.
    #[error("quota: account {account} has opened {opened} logs, the most this ledger allows one account")]
    Quota { account: String, opened: u64 },
    /// Too many transactions too fast; retry after the given time.
    #[error("rate limited: {who} may submit {per_second} transactions a second; retry after {} ms", .retry_after.as_millis())]
    RateLimited { who: String, per_second: f64, retry_after: Duration },
}

impl Refusal {
    /// The refusal's code (docs/LEDGER.md, "The fleet ledger's transport").
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotAdmitted { .. } => "not_admitted",
            Self::Quota { .. } => "quota",
            Self::RateLimited { .. } => "rate_limited",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Self {
        Self { tokens: rate.burst, at: now }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * rate.per_second).min(rate.burst);
        self.at = now;
    }

    /// Take a token, or say how long until one is there.
    fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        self.refill(rate, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / rate.per_second))
        }
    }
}

struct Buckets {
    accounts: HashMap<Account, Bucket>,
    strangers: Option<Bucket>,
}

/// A policy and the front-end's buckets: the door a submission passes before anything is read.
pub struct Door {
    policy: Policy,
    operator: Account,
    buckets: Mutex<Buckets>,
    /// Senders' keys as decoded for their signatures' checks: a fleet's robots submit again
    /// and again.
    keys: Mutex<Keys>,
}

/// Decoded keys of senders whose transactions were recorded, in two generations of at most
/// [`MAX_KEYS`] / 2 each: when the newer fills, the older is forgotten and the newer becomes it.
/// A key used again is moved to the newer, so a robot that submits at least once a generation
/// is never forgotten (before, a full cache was cleared whole, and every robot paid a decode).
#[derive(Default)]
struct Keys {
    newer: HashMap<Account, ed25519_dalek::VerifyingKey>,
    older: HashMap<Account, ed25519_dalek::VerifyingKey>,
}

/// The most decoded keys a door keeps (both generations).
const MAX_KEYS: usize = 65_536;

impl Keys {
    fn get(&mut self, account: &Account) -> Option<ed25519_dalek::VerifyingKey> {
        if let Some(k) = self.newer.get(account) {
            return Some(*k);
        }
        let k = self.older.remove(account)?;
        self.insert(*account, k);
        Some(k)
    }

    fn insert(&mut self, account: Account, key: ed25519_dalek::VerifyingKey) {
        if self.newer.len() >= MAX_KEYS / 2 {
            // The older's memory is reused for the next newer.
            std::mem::swap(&mut self.older, &mut self.newer);
            self.newer.clear();
        }
        self.newer.insert(account, key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }
}

/// Whether a transaction makes the state grow by a log or an agent (what admission governs).
fn grows(tx: &Tx) -> bool {
    matches!(tx, Tx::OpenMemory { .. } | Tx::RegisterAgent { .. })
}

impl Door {
    pub fn new(policy: Policy, operator: Account) -> Self {
        Self {
            policy,
            operator,
            buckets: Mutex::new(Buckets { accounts: HashMap::new(), strangers: None }),
            keys: Mutex::new(Keys::default()),
        }
    }

    /// Whether `tx`'s signature is its sender's ([`SignedTx::signature_holds`]), the sender's
    /// key decoded once while it is kept.
    pub fn signature_holds(&self, tx: &SignedTx) -> bool {
        let kept = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&tx.sender);
        let key = match kept {
            Some(k) => k,
            None => {
                let Ok(k) = ed25519_dalek::VerifyingKey::from_bytes(&tx.sender.0) else { return false };
                // Not kept here: a key is kept once a transaction of its is recorded
                // ([`Door::recorded`]), so a flood of strangers' keys — signing validly,
                // admitted or not — fills nothing.
                return tx.signature_holds_under(&k);
            }
        };
        tx.signature_holds_under(&key)
    }

    /// A transaction of `sender`'s was recorded: its key is kept for its next checks (moved to
    /// the newer generation if kept already).
    pub fn recorded(&self, sender: &Account) {
        let mut keys = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.get(sender).is_none()
            && let Ok(k) = ed25519_dalek::VerifyingKey::from_bytes(&sender.0)
        {
            keys.insert(*sender, k);
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Check `tx` against the policy and the rates, from memory only. The log quota needs the
    /// state and is checked after ([`Door::quota`]).
    pub fn admit(&self, tx: &SignedTx) -> Result<(), Refusal> {
        self.admit_at(tx, Instant::now())
    }

    fn admit_at(&self, tx: &SignedTx, now: Instant) -> Result<(), Refusal> {
        let sender = tx.sender;
        if sender == self.operator {
            return Ok(());
        }
        let registered = self.policy.registered(&sender);
        let by_agent = match &tx.tx {
            Tx::OpenMemory { agent: Some(name), .. } | Tx::RegisterAgent { name, .. } => {
                self.policy.agent_admitted(name)
            }
            _ => false,
        };
        // Commits and status changes need a log or an agent the sender already has: they cannot
        // grow the state, and the rules refuse a stranger's.
        if grows(&tx.tx) && self.policy.open == Open::Registered && !registered && !by_agent {
            return Err(Refusal::NotAdmitted { account: hex::encode(sender.0) });
        }
        let mut b = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(rate) = self.policy.strangers
            && grows(&tx.tx)
            && !registered
        {
            let bucket = b.strangers.get_or_insert_with(|| Bucket::full(rate, now));
            bucket.take(rate, now).map_err(|retry_after| Refusal::RateLimited {
                who: "accounts not registered, together,".into(),
                per_second: rate.per_second,
                retry_after,
            })?;
        }
        if let Some(rate) = self.policy.rate {
            if b.accounts.len() >= MAX_BUCKETS {
                // Forget the full (idle) buckets; if a flood of keys keeps them all busy, all:
                // each then starts with a burst, still bounded by the strangers' bucket.
                b.accounts.retain(|_, k| {
                    k.refill(rate, now);
                    k.tokens < rate.burst
                });
                if b.accounts.len() >= MAX_BUCKETS {
                    b.accounts.clear();
                }
            }
            let bucket = b.accounts.entry(sender).or_insert_with(|| Bucket::full(rate, now));
            bucket.take(rate, now).map_err(|retry_after| Refusal::RateLimited {
                who: format!("account {}", hex::encode(sender.0)),
                per_second: rate.per_second,
                retry_after,
            })?;
        }
        Ok(())
    }

    /// The log quota: `opened` logs already opened by the sender of an opening.
    pub fn quota(&self, tx: &SignedTx, opened: u64) -> Result<(), Refusal> {
        match self.policy.max_logs_per_account {
            Some(max)
                if tx.sender != self.operator && matches!(tx.tx, Tx::OpenMemory { .. }) && opened >= max =>
            {
                Err(Refusal::Quota { account: hex::encode(tx.sender.0), opened })
            }
            _ => Ok(()),
        }
    }

    /// Whether the quota needs the state for this transaction.
    pub fn needs_count(&self, tx: &SignedTx) -> bool {
        self.policy.max_logs_per_account.is_some()
            && tx.sender != self.operator
            && matches!(tx.tx, Tx::OpenMemory { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    fn open(key: &SigningKey, nonce: u64) -> SignedTx {
        SignedTx::sign(key, nonce, Tx::OpenMemory { agent: None, policy: [0; 32] })
    }

    /// The attack of a review: a flood of strangers' keys, each with a valid signature, used
    /// to empty the whole cache, so every robot paid a key decode again. A robot that submits
    /// once in 10,000 keys kept now keeps its own, and the cache stays bounded.
    #[test]
    fn a_flood_of_strangers_keys_forgets_no_robot_that_keeps_submitting() {
        let key = SigningKey::from_bytes(&[1; 32]).verifying_key();
        let robot = Account([0xAA; 32]);
        let mut keys = Keys::default();
        keys.insert(robot, key);
        for i in 0u32..300_000 {
            let mut a = [0u8; 32];
            a[..4].copy_from_slice(&i.to_le_bytes());
            keys.insert(Account(a), key);
            if i % 10_000 == 0 {
                assert!(keys.get(&robot).is_some(), "the robot's key was forgotten after {i} strangers");
            }
            assert!(keys.len() <= MAX_KEYS);
        }
        // One that stops submitting is forgotten within two generations.
        let mut quiet = Keys::default();
        quiet.insert(robot, key);
        for i in 0..MAX_KEYS as u32 {
            let mut a = [0u8; 32];
            a[..4].copy_from_slice(&i.to_le_bytes());
            quiet.insert(Account(a), key);
        }
        assert!(quiet.get(&robot).is_none());
        // At the door, a valid signature alone keeps nothing: only a sender whose transaction
        // was recorded is kept, so strangers' keys, admitted or not, never push a robot's out.
        let door = Door::new(Policy::unlimited(), Account([9; 32]));
        let stranger = open(&SigningKey::from_bytes(&[3; 32]), 0);
        assert!(door.signature_holds(&stranger));
        assert_eq!(door.keys.lock().expect("keys").len(), 0);
        door.recorded(&stranger.sender);
        assert_eq!(door.keys.lock().expect("keys").len(), 1);
        assert!(door.signature_holds(&stranger));
        let mut forged = stranger.clone();
        forged.nonce += 1;
        assert!(!door.signature_holds(&forged), "a kept key still checks each signature");
    }

    #[test]
    fn the_policy_file_names_its_bad_fields() {
        let p = Policy::parse(r#"{"open":"registered","writers":["00"]}"#);
        assert!(p.unwrap_err().contains("writers[0]"));
        assert!(Policy::parse(r#"{"opn":"anyone"}"#).unwrap_err().contains("opn"));
        assert!(
            Policy::parse(r#"{"rate":{"per_second":0,"burst":1}}"#).unwrap_err().contains("rate.per_second")
        );
        let p = Policy::parse(r#"{"open":"registered","agents":["fleet/"],"rate":null}"#).expect("parses");
        assert_eq!(
            (p.open, p.rate, p.max_logs_per_account),
            (Open::Registered, None, Some(DEFAULT_MAX_LOGS))
        );
        assert_eq!(Policy::parse(&p.to_json()).expect("round trip"), p);
    }

    #[test]
    fn strangers_are_refused_and_rates_hold() {
        let operator = Account([9; 32]);
        let robot = SigningKey::from_bytes(&[1; 32]);
        let stranger = SigningKey::from_bytes(&[2; 32]);
        let mut policy = Policy::default_open();
        policy.open = Open::Registered;
        policy.writers.insert(Account(robot.verifying_key().to_bytes()));
        policy.agents.push("fleet/".into());
        policy.rate = Some(Rate { per_second: 1.0, burst: 2.0 });
        let door = Door::new(policy, operator);
        let t0 = Instant::now();
        assert_eq!(door.admit_at(&open(&stranger, 0), t0).unwrap_err().code(), "not_admitted");
        let by_agent =
            SignedTx::sign(&stranger, 0, Tx::OpenMemory { agent: Some("fleet/r1".into()), policy: [0; 32] });
        assert!(door.admit_at(&by_agent, t0).is_ok());
        assert!(door.admit_at(&open(&robot, 0), t0).is_ok());
        assert!(door.admit_at(&open(&robot, 1), t0).is_ok());
        let Err(Refusal::RateLimited { retry_after, .. }) = door.admit_at(&open(&robot, 2), t0) else {
            panic!("a third in the same instant passed a burst of 2")
        };
        assert!(retry_after <= Duration::from_secs(1) && retry_after > Duration::ZERO);
        assert!(door.admit_at(&open(&robot, 2), t0 + Duration::from_secs(1)).is_ok());
        assert_eq!(door.quota(&open(&robot, 3), DEFAULT_MAX_LOGS).unwrap_err().code(), "quota");
    }
}
