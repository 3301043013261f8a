//! The fleet ledger (docs/FLEET-LEDGER.md): the Pulse chain and the ledger's state kept in
//! etcd under one key prefix, the next Pulse agreed by a compare-and-swap on the head, so any
//! number of front-ends can take transactions at once and two Pulses can never share a
//! number. The rules are the embedded ledger's own ([`sion_ledger::state::State`]):
//! what is accepted, and the headers it gets, are the same.
//!
//! On format 5 a header is fixed in etcd before it is signed, and Ed25519 signatures are
//! deterministic: no front-end signs a header that did not win its number (not even in a
//! request that loses, which etcd logs as well), and a Pulse left unsigned by a front-end that
//! died is completed by any other with the same bytes, once checked as a replay would.

#![forbid(unsafe_code)]

pub mod access;
pub mod admission;
pub mod archive;
pub mod c2sp;
pub mod cells;
mod claim;
pub mod client;
pub mod history;
pub mod local;
pub mod relay;
pub mod service;
pub mod snapshot;
mod swap_wait;
pub mod witness;

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use sion_ledger::link::Receipt;
use sion_ledger::state::{Change, Signature, State, Undo};
use sion_ledger::tree;
use sion_ledger::{
    Account, Agent, AgentStatus, LedgerError, LogId, MemoryLog, PulseHeader, SignedHeader, SignedTx,
    StateProof, Tx, TxTimeProof, account_of, decode_version, encode_version,
};
use sion_verify::ledger::Cosignature;
use sion_verify::merkle::{self, Blake3, Digest, MemoryTree};
use sion_verify::wire::Reader;

/// Why the fleet ledger did not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
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
    #[error("no fleet ledger under {0} in etcd")]
    Missing(String),
    /// The ledger under the prefix signs with another key than this front-end's.
    #[error("the fleet ledger under {prefix} signs with key {found}, not this front-end's {ours}")]
    OtherKey { prefix: String, found: String, ours: String },
    /// `P/format` names a format older than the front-end was told to accept: `P/format` is
    /// not signed, and a writer to etcd who could turn a format 6 ledger's front-ends into
    /// older ones' would have them forgo the claim (docs/FLEET-LEDGER.md, "The claim").
    #[error(
        "the fleet ledger under {prefix} says it is of format {found} (P/format), older than {oldest}, the \
         oldest this front-end serves: if it was made so, start the front-end with --oldest-format {found}; \
         if not, P/format was rewritten by a writer to etcd"
    )]
    OlderFormat { prefix: String, found: u8, oldest: u8 },
    /// A cosignature that does not hold for the Pulse's header, or is by a witness the
    /// front-end does not accept.
    #[error("cosignature refused: {0}")]
    Cosignature(String),
    /// An archived Pulse that cannot be read (no archive given, its segment missing or
    /// damaged), or an archiving that cannot be done.
    #[error("the archive of old Pulses: {0}")]
    Archive(String),
    /// A checkpoint or a proof of the history asked for that the ledger cannot give (a size
    /// past its latest checkpoint, or no checkpoint yet).
    #[error("the ledger's history: {0}")]
    History(String),
    /// The head moved under every attempt.
    #[error("the head moved under each of {0} attempts (too many front-ends racing for one Pulse?)")]
    Contention(u32),
    /// What etcd holds is not what the ledger signed: the logs do not hash to the state root of
    /// the Pulse `P/head` names, the head does not name a signed header, a Pulse made since the
    /// state this front-end held does not replay, or keys were written by no front-end's commit.
    /// The front-end signs nothing on it (docs/FLEET-LEDGER.md, "What a party with etcd write
    /// access can and cannot do").
    #[error(
        "the state in etcd does not match signed Pulse {pulse}: {problem} (keys: {}). Nothing is signed \
         on it: etcd was written by someone other than a front-end of this ledger, or lost data. Put \
         back what the signed Pulses say under those keys, and find who can write to etcd \
         (docs/FLEET-LEDGER.md, \"What a party with etcd write access can and cannot do\")",
        .keys.join(", ")
    )]
    StateMismatch {
        /// The Pulse `P/head` names (the last one this front-end held, when the head went back).
        pulse: u64,
        /// The etcd keys that differ, as far as the front-end can tell.
        keys: Vec<String>,
        /// What differs, in words.
        problem: String,
    },
    /// An answer past what the service sends (the `Cells` call: refusal code `too_large`).
    #[error("{0}")]
    TooLarge(String),
    /// Refused at the door by the operator's admission policy (docs/FLEET-LEDGER.md,
    /// "Admission"), before anything was read or written in etcd.
    #[error("{0}")]
    Admission(#[from] admission::Refusal),
}

/// How long a request to etcd may take: past it, a submission fails with an error that says
/// no quorum answered, instead of waiting for one (etcd queues requests while it has none).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub use access::{AccessError, EtcdAccess};

fn connect_options(access: &EtcdAccess) -> etcd_client::ConnectOptions {
    access.apply(
        etcd_client::ConnectOptions::new()
            .with_timeout(REQUEST_TIMEOUT)
            .with_connect_timeout(REQUEST_TIMEOUT),
    )
}

fn etcd_err(endpoints: &str, e: etcd_client::Error) -> FleetError {
    let text = e.to_string();
    let message = if text.contains("Timeout expired") || text.contains("deadline") {
        format!(
            "no answer within {} s ({text}): is a quorum of the etcd members up? Nothing is known to \
             have been recorded; the robot keeps its atoms and commits them when the ledger answers",
            REQUEST_TIMEOUT.as_secs()
        )
    } else if text.contains("raft proposal dropped") {
        // Still so after the retries a request's time allows (or where none is tried): the
        // members elect no leader.
        format!(
            "etcd has no leader ({text}): is a quorum of the etcd members up? Nothing is known to have \
             been recorded; the robot keeps its atoms and commits them when the ledger answers"
        )
    } else if text.contains("message length too large") {
        // The reply was there: saying "no quorum" or "not running" would send the operator
        // looking in the wrong place.
        format!(
            "a reply from etcd larger than this front-end's limit of {} MiB ({text}): a value under \
             the ledger's prefix is far larger than any the ledger writes. Nothing was recorded",
            DECODE_LIMIT >> 20
        )
    } else {
        text
    };
    FleetError::Etcd { endpoints: endpoints.to_owned(), message }
}

/// Keys one range read of the state returns at most: the state is read a page at a time
/// (continuing after the last key), never in one reply, however many logs the fleet has.
pub const STATE_PAGE: i64 = 1_000;

/// The largest reply from etcd a front-end decodes: a page of [`STATE_PAGE`] keys with values
/// of up to 16 KiB each (a log's leaf is under 400 bytes), and `REPLAY_PAGE` entries of up
/// to 64 KiB and more, with room to spare. tonic's default is 4 MiB.
pub const DECODE_LIMIT: usize = 16 << 20;

/// The end of the range of keys starting with `prefix` (etcd's `range_end` for a prefix).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: to the end of the keyspace.
    vec![0]
}

/// The most versions one call returns.
pub const VERSIONS_PER_CALL: u64 = 1024;

/// Attempts on other members after one could not be reached.
const TRANSIENT_TRIES: u32 = 8;

/// A member that could not be reached (refused, reset, unavailable), or one that knows no
/// leader yet (raft drops a proposal made to a member between leaders, so it is not in the
/// log: etcd answers "raft proposal dropped" with code Unknown): another, or a later try, may
/// answer. A timeout is not transient here — it is what a lost quorum looks like, and is
/// reported.
fn transient(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    !text.contains("Timeout expired")
        && (text.contains("unavailable")
            || text.contains("connect error")
            || text.contains("transport error")
            // A connection cut while the request was on it (hyper's "connection closed"): not
            // known to have landed, as a timeout.
            || text.contains("connection closed")
            || text.contains("raft proposal dropped"))
}

/// Members taken out of the etcd client's rotation because a connection to their port failed
/// at once (or two probes in a row timed out), each member's probes timed out in a row, and
/// when the members were last probed ([`FleetLedger::heal`]).
#[derive(Default)]
struct Heal {
    benched: std::collections::BTreeSet<String>,
    timeouts: BTreeMap<String, u32>,
    probed: Option<std::time::Instant>,
}

/// What probing a member's port found ([`FleetLedger::heal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Answered,
    /// The connection failed at once: refused, reset, or the address not reachable.
    Refused,
    TimedOut,
}

impl Probe {
    /// Whether the member is up (`Some(true)`), down, or left as it was, counting its probes
    /// timed out in a row in `strikes`: a second timeout in a row is a member gone.
    fn verdict(self, strikes: &mut u32) -> Option<bool> {
        *strikes = if self == Probe::TimedOut { strikes.saturating_add(1) } else { 0 };
        match self {
            Probe::Answered => Some(true),
            Probe::Refused => Some(false),
            Probe::TimedOut => (*strikes >= 2).then_some(false),
        }
    }
}

/// Whether etcd refused a request for its size or its operations (before its log): "too many
/// operations in txn request", "request is too large", or gRPC's "larger than max".
fn over_limits(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    ["too many operations", "too large", "larger than max"].iter().any(|t| text.contains(t))
}

/// How many times a submission retries after losing its compare-and-swap.
const ATTEMPTS: u32 = 256;

/// A front-end that lost this many compare-and-swaps in a row asks for the next Pulse
/// (`P/turn`).
const TURN_AFTER: u32 = 2;

/// The longest a front-end waits for the Pulse of one that asked for it.
const TURN_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// A front-end's mark in `P/turn`: different for each front-end (the clock, the process and a
/// counter), nothing secret.
fn turn_mark() -> [u8; 8] {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let x = (now_ns() as u64) ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x.to_le_bytes()
}

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
    /// The last state this front-end checked (or built), as of the head at an etcd revision:
    /// served while the head stays at that revision, and what a reload replays from.
    cached: Option<Snapshot>,
    /// Whether `cached` may still be the current state (false after a lost race or a lost reply:
    /// then the next read reloads, checking what it reads against `cached`).
    fresh: bool,
    /// Compare-and-swaps this front-end lost to another.
    lost: u64,
    /// Read requests this front-end made of etcd (each range read or read-only transaction).
    reads: u64,
    /// Where archived Pulses' segments are (`sion ledger serve --archive DIR`).
    archive_dir: Option<std::path::PathBuf>,
    /// The last segment read, checked.
    segment: Option<archive::Segment>,
    /// Whether the ledger chains each writer's logs (`P/format` `2` and later: every ledger
    /// made since chains were; docs/FLEET-LEDGER.md, "State in etcd"). Read once, at connecting.
    chained: bool,
    /// Whether the ledger keeps cells (`P/format` `3` and later: every ledger made since fleets keep
    /// them; docs/FLEET-LEDGER.md, "Cells"): its headers are of version 2.
    cells: bool,
    /// Whether the header is signed only after its entry won its number (`P/format` `5` and `6`):
    /// the swap puts the entry and a proposal, a second transaction the head and signatures
    /// (docs/FLEET-LEDGER.md, "Agreeing on the next Pulse").
    after: bool,
    /// Whether each swap also moves `P/claim` on (`P/format` `6`): a header is signed only for
    /// the entry claimed for its number ([`claim`]; docs/FLEET-LEDGER.md, "The claim").
    claimed: bool,
    /// A Pulse found in etcd one past the head, its entry put and its signatures not yet
    /// (formats 5 and 6): completed by [`FleetLedger::snapshot`] once the state at the head is held.
    pending: Option<u64>,
    /// Whether the ledger keeps its state key by key (`P/format` `3` and before: `P/log/I`,
    /// `P/nonce/A`, `P/agent/NAME`, `P/path/I/K` written by each Pulse); on formats `4` and `5` the
    /// entries are the ledger and the state is kept as a signed snapshot
    /// (docs/FLEET-LEDGER.md, "The state snapshot").
    keyed: bool,
    /// Transactions this front-end committed since it last wrote a state snapshot.
    since_snapshot: u64,
    /// What one Pulse's etcd transaction may hold.
    limits: TxnLimits,
    /// What [`FleetLedger::heal`] knows of the members: shared with this front-end's readers,
    /// as the etcd client whose rotation it edits is.
    heal: std::sync::Arc<tokio::sync::Mutex<Heal>>,
    /// The latest checkpoint of the ledger's history this front-end checked or wrote, with its
    /// open tiles (docs/FLEET-LEDGER.md, "Checkpoints").
    history: Option<history::Held>,
    /// The revision of `P/turn` this front-end last saw, and its own mark to put there when it
    /// asks for the next Pulse ("Agreeing on the next Pulse": taking turns).
    turn_seen: i64,
    turn_mark: [u8; 8],
    /// How long the next Pulse's compare-and-swap is waited for ([`swap_wait`]).
    swap_wait: swap_wait::SwapWait,
}

/// The format `sion ledger init` makes, and the oldest a front-end serves unless told
/// otherwise ([`FleetLedger::connect_accepting`]).
pub const NEWEST_FORMAT: u8 = 6;

/// How a new ledger keeps its state in etcd (`P/format`, docs/FLEET-LEDGER.md "State in etcd").
/// Public only for [`FleetLedger::init_format`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `2`: chained logs, no cells (headers of version 1).
    Unchained,
    /// `3`: cells, and the state kept key by key.
    Keyed,
    /// `4`: the entries are the ledger; the state kept as a signed snapshot.
    Entries,
    /// `5`: as `4`, and a header signed only after its entry won its number.
    Proposed,
    /// `6`: as `5`, and the number won only by moving `P/claim` on from where the head's claim
    /// is.
    Claimed,
}

impl Format {
    /// The format of a number (`P/format`'s one digit), if there is one.
    pub fn from_number(number: u8) -> Option<Format> {
        [Format::Unchained, Format::Keyed, Format::Entries, Format::Proposed, Format::Claimed]
            .into_iter()
            .find(|f| f.number() == number)
    }

    /// Its number (`P/format`'s one digit).
    pub fn number(self) -> u8 {
        self.value()[0] - b'0'
    }

    fn value(self) -> &'static [u8] {
        match self {
            Format::Unchained => b"2",
            Format::Keyed => b"3",
            Format::Entries => b"4",
            Format::Proposed => b"5",
            Format::Claimed => b"6",
        }
    }
}

/// The state and the latest header, as of one revision of `P/head`.
#[derive(Clone)]
struct Snapshot {
    head_revision: i64,
    state: State,
    latest: PulseHeader,
    /// Format 6: where `P/claim` is with the head's claim in it (the next swap moves it on from
    /// there); `None` before it was read.
    claim: Option<claim::Place>,
}

/// The state as read from etcd, before it is checked.
struct ReadState {
    state: State,
    /// Its keys written after the head's revision (by no front-end: see `read_state`).
    written_after: Vec<String>,
}

/// The most Pulses made by other front-ends that a front-end replays from the state it held
/// (each transaction checked again by the rules); past it, or past the archive's mark, what it
/// reads is checked against the signed state root alone.
const MAX_REPLAY: u64 = 4096;

/// Pulses read by one range read while replaying (an entry is at most 64 KiB and a header).
const REPLAY_PAGE: u64 = 32;

/// How many keys a refusal names before it says how many more there are.
const NAMED_KEYS: usize = 16;

/// How many logs a refusal compares with their version records to name the ones etcd holds
/// wrongly, when the front-end held no earlier state to compare with.
const DIAGNOSED_LOGS: u64 = 4096;

/// The most transactions one Pulse's entry may hold (a batch is bounded by etcd's limits well
/// before this; a reader refuses more rather than allocate for them).
pub const MAX_BATCH: u32 = 65_536;

/// A Pulse's entry as `P/pulse/N` holds it: `u8 0` and the header (the genesis); `u8 1`, `u32`
/// length and the signed transaction, then the header (89 bytes, or 121 with cells; unsigned); or `u8 2`, `u32`
/// count (2 or more), that many (`u32` length, signed transaction), then the header — a Pulse
/// of many transactions, in the order they were applied (docs/FLEET-LEDGER.md, "Many
/// transactions, one Pulse").
pub(crate) fn decode_entry(v: &[u8]) -> Result<(Vec<SignedTx>, PulseHeader), String> {
    let mut r = Reader::new(v);
    let e = |e: sion_verify::wire::WireError| e.to_string();
    let count = match r.u8("entry kind").map_err(e)? {
        0 => 0,
        1 => 1,
        2 => match r.u32("count").map_err(e)? {
            n @ 2..=MAX_BATCH => n,
            n => return Err(format!("an entry of kind 2 holding {n} transactions (2 … {MAX_BATCH})")),
        },
        k => return Err(format!("entry kind {k}")),
    };
    let mut txs = Vec::with_capacity(count.min(1024) as usize);
    for i in 0..count {
        let bytes = r.bytes32(1 << 16, "transaction").map_err(e)?;
        txs.push(SignedTx::decode(bytes).map_err(|err| format!("transaction {i}: {err}"))?);
    }
    // The rest is the header, of either version (its first byte): whether it is this ledger's
    // is checked where the ledger's format is known.
    let header =
        PulseHeader::decode(r.take(r.remaining(), "header").map_err(e)?).map_err(|err| err.to_string())?;
    Ok((txs, header))
}

/// A sender with two transactions among these, if any: a Pulse takes at most one of each
/// sender (so at most one change of each log, and nonces in order).
pub(crate) fn sender_twice(txs: &[SignedTx]) -> Option<Account> {
    let mut seen = std::collections::HashSet::with_capacity(txs.len());
    txs.iter().find(|tx| !seen.insert(tx.sender)).map(|tx| tx.sender)
}

/// How many logs these transactions open (a Pulse opens at most one).
pub(crate) fn openings(txs: &[SignedTx]) -> usize {
    txs.iter().filter(|tx| matches!(tx.tx, Tx::OpenMemory { .. })).count()
}

/// The keys (under the prefix) whose values differ between two states.
fn differing_keys(want: &State, got: &State) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..want.logs.len().max(got.logs.len()) {
        if want.logs.get(i) != got.logs.get(i) {
            out.push(format!("log/{}", n20(i as u64)));
        }
    }
    let names: std::collections::BTreeSet<&String> = want.agents.keys().chain(got.agents.keys()).collect();
    for name in names {
        if want.agents.get(name) != got.agents.get(name) {
            out.push(format!("agent/{name}"));
        }
    }
    let accounts: std::collections::BTreeSet<&Account> =
        want.nonces.keys().chain(got.nonces.keys()).collect();
    for account in accounts {
        if want.nonces.get(account) != got.nonces.get(account) {
            out.push(format!("nonce/{}", hex::encode(account.0)));
        }
    }
    out
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// Numbers in keys: 20 decimal digits, so keys sort as numbers.
pub(crate) fn n20(n: u64) -> String {
    format!("{n:020}")
}

/// Where a state-tree node is kept: `node/J/M/R`, complete subtree `M` of level `J` (leaves
/// `M·2^J … (M+1)·2^J − 1`) as Pulse `N = 2^64 − 1 − R` set it (J two digits, M and R twenty),
/// so that the newest sorts first: etcd reads a whole range to sort it, but stops at the limit
/// of a range in key order, so "the last one at or before Pulse P" is the first key from
/// `R = 2^64 − 1 − P` on, one key read however often the node changed.
fn node_key(j: u32, m: u64, pulse: u64) -> String {
    format!("{}{}", node_prefix(j, m), n20(u64::MAX - pulse))
}

/// Every version of one state-tree node: `node/J/M/`.
fn node_prefix(j: u32, m: u64) -> String {
    format!("node/{j:02}/{}/", n20(m))
}

/// A state-tree tier block as Pulse `N = 2^64 − 1 − R` set it: `tier/T/S/R` (T two digits, S
/// and R twenty; newest first, as for nodes).
fn tier_key(t: u32, s: u64, pulse: u64) -> String {
    format!("{}{}", tier_prefix(t, s), n20(u64::MAX - pulse))
}

/// Every version of one tier block: `tier/T/S/`.
fn tier_prefix(t: u32, s: u64) -> String {
    format!("tier/{t:02}/{}/", n20(s))
}

/// The most reads one etcd transaction carries (etcd's `--max-txn-ops` is 128 by default).
const NODE_READS_PER_TXN: usize = 64;

/// A state tree inclusion path as `P/path/I/K` holds it: the 32-byte nodes, bottom-up.
fn encode_path(path: &[Digest]) -> Vec<u8> {
    path.concat()
}

/// Read `P/path/I/K` back: whole 32-byte nodes, at most 64.
fn decode_path(v: &[u8]) -> Option<Vec<Digest>> {
    if !v.len().is_multiple_of(32) || v.len() > 64 * 32 {
        return None;
    }
    Some(v.chunks_exact(32).filter_map(|c| c.try_into().ok()).collect())
}

fn head_value(h: &PulseHeader) -> Vec<u8> {
    let mut v = h.number.to_le_bytes().to_vec();
    v.extend_from_slice(&h.hash());
    v
}

/// `P/head`'s value read back: the Pulse's number and its header's hash (`None` unless 40 bytes).
fn decode_head(v: &[u8]) -> Option<(u64, Digest)> {
    let number: [u8; 8] = v.get(..8)?.try_into().ok()?;
    let hash: Digest = v.get(8..)?.try_into().ok()?;
    Some((u64::from_le_bytes(number), hash))
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

/// The domain of the ledger key's signature over a Pulse's entry (`P/esig/N`, format 4).
const ENTRY_DOMAIN: &[u8] = b"sion-fleet-entry-v1";

/// What the ledger key signs of Pulse `number`'s entry on format 4 (`P/esig/N`): the domain,
/// the number (`u64`, little-endian) and the BLAKE3 of the entry's bytes, 59 bytes in all. The
/// header's signature does not cover the transactions (a header commits to the logs only), so
/// without this an agent's transaction could be taken out of an entry unseen.
fn entry_message(number: u64, entry: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(ENTRY_DOMAIN.len() + 40);
    m.extend_from_slice(ENTRY_DOMAIN);
    m.extend_from_slice(&number.to_le_bytes());
    m.extend_from_slice(blake3::hash(entry).as_bytes());
    m
}

/// The ledger key's signature over Pulse `number`'s entry (`P/esig/N`).
fn sign_entry(key: &SigningKey, number: u64, entry: &[u8]) -> [u8; 64] {
    key.sign(&entry_message(number, entry)).to_bytes()
}

/// Whether `signature` (`P/esig/N` as etcd holds it, if at all) is the ledger key's over Pulse
/// `number`'s entry.
fn entry_signed(key: &VerifyingKey, number: u64, entry: &[u8], signature: Option<&[u8]>) -> bool {
    let Some(signature) = signature.and_then(|s| <[u8; 64]>::try_from(s).ok()) else { return false };
    key.verify_strict(&entry_message(number, entry), &ed25519_dalek::Signature::from_bytes(&signature))
        .is_ok()
}

/// The domain of the ledger key's signature over an entry a front-end proposes for a number
/// (`P/prop/N`, format 5): that this front-end built it, not that it is Pulse `N`'s — a
/// proposal may lose its number to another, and is never read as a Pulse's signature.
const PROPOSAL_DOMAIN: &[u8] = b"sion-fleet-proposal-v1";

/// What the ledger key signs of an entry proposed for Pulse `number` (`P/prop/N`): the
/// domain, the number (`u64`, little-endian) and the BLAKE3 of the entry's bytes, 62 bytes.
fn proposal_message(number: u64, entry: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(PROPOSAL_DOMAIN.len() + 40);
    m.extend_from_slice(PROPOSAL_DOMAIN);
    m.extend_from_slice(&number.to_le_bytes());
    m.extend_from_slice(blake3::hash(entry).as_bytes());
    m
}

/// Whether `signature` (`P/prop/N` as etcd holds it, if at all) is the ledger key's proposal
/// of `entry` for Pulse `number`.
fn proposed(key: &VerifyingKey, number: u64, entry: &[u8], signature: Option<&[u8]>) -> bool {
    let Some(signature) = signature.and_then(|s| <[u8; 64]>::try_from(s).ok()) else { return false };
    key.verify_strict(&proposal_message(number, entry), &ed25519_dalek::Signature::from_bytes(&signature))
        .is_ok()
}

fn entry(txs: &[SignedTx], header: &PulseHeader) -> Vec<u8> {
    let mut v = Vec::new();
    match txs.len() {
        0 => v.push(0),
        1 => v.push(1),
        n => {
            v.push(2);
            v.extend_from_slice(&(n as u32).to_le_bytes());
        }
    }
    for tx in txs {
        let bytes = tx.encode();
        v.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        v.extend_from_slice(&bytes);
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
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse, FleetError> {
        let key = key.into();
        // A key-value client of the same channel, with the decode limit sized for a page.
        self.retrying(true, |c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.kv_client().max_decoding_message_size(DECODE_LIMIT).get(key, options).await }
        })
        .await
    }

    /// `call`, tried again on another member while it fails in a way that another may not
    /// ([`transient`]), at least [`TRANSIENT_TRIES`] times and while [`REQUEST_TIMEOUT`] lasts,
    /// with backoff, dead members taken out of rotation ([`FleetLedger::heal`]); each try of a `read`
    /// counted in [`FleetLedger::etcd_reads`].
    async fn retrying<T, F>(&mut self, read: bool, mut call: impl FnMut(Client) -> F) -> Result<T, FleetError>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut tries = 0;
        let started = std::time::Instant::now();
        loop {
            self.reads += u64::from(read);
            // A clone of the client shares its channel.
            match call(self.client.clone()).await {
                Ok(r) => return Ok(r),
                // A member killed: its connection fails at once, and the next try may pick it
                // again; tried while the request's time lasts (at least TRANSIENT_TRIES times).
                Err(e)
                    if transient(&e) && (tries < TRANSIENT_TRIES || started.elapsed() < REQUEST_TIMEOUT) =>
                {
                    tries += 1;
                    self.heal().await;
                    tokio::time::sleep(backoff(tries, self.lost)).await;
                }
                Err(e) => return Err(self.err(e)),
            }
        }
    }

    /// Every key-value under `rest` (a prefix under the ledger's) as of revision `at` (0: the
    /// latest), read [`STATE_PAGE`] keys at a time, each page continuing after the last key of
    /// the one before, all at one revision: one consistent snapshot, in replies of bounded size.
    async fn range_all(&mut self, rest: &str, at: i64) -> Result<Vec<etcd_client::KeyValue>, FleetError> {
        let prefix = self.key_of(rest).into_bytes();
        let end = prefix_end(&prefix);
        let mut start = prefix;
        let mut out = Vec::new();
        loop {
            let options = GetOptions::new().with_range(end.clone()).with_revision(at).with_limit(STATE_PAGE);
            let mut resp = self.get(start.clone(), Some(options)).await?;
            let more = resp.more();
            let kvs = resp.take_kvs();
            let Some(last) = kvs.last() else { break };
            // The next page starts just after the last key read (the key and a 0 byte).
            start = last.key().to_vec();
            start.push(0);
            out.extend(kvs);
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// A read-only transaction (gets alone), tried again like a read.
    async fn read_txn(&mut self, txn: Txn) -> Result<etcd_client::TxnResponse, FleetError> {
        self.retrying(true, |c| {
            let txn = txn.clone();
            async move { c.kv_client().max_decoding_message_size(DECODE_LIMIT).txn(txn).await }
        })
        .await
    }

    /// A conditional write transaction, tried again on another member like a read (its
    /// compare makes a retry of one that landed fail, not land twice).
    async fn write_txn(&mut self, txn: Txn) -> Result<etcd_client::TxnResponse, FleetError> {
        self.retrying(false, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
    }

    /// A put that is the same whenever it is done (a signature, a front-end's turn mark), tried
    /// again likewise: the revision etcd gave it.
    async fn put(&mut self, key: String, value: Vec<u8>) -> Result<i64, FleetError> {
        let resp = self
            .retrying(false, |mut c| {
                let (key, value) = (key.clone(), value.clone());
                async move { c.put(key, value, None).await }
            })
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// After a connection to a member failed, or a swap went unanswered: probe every member's
    /// port, all at once (at most every 250 ms from the end of the last probe), and take out of
    /// the client's rotation those that refuse a connection — the client's balancer otherwise
    /// keeps picking a killed member for seconds (measured: requests failing "tcp connect
    /// error" 7 s after a member was killed) — or let two probes in a row go unanswered for
    /// 200 ms (a host gone; one slow answer is a busy machine, not a dead member). A member
    /// back up is put back at the next probe; if none answers, all are kept.
    async fn heal(&mut self) {
        // One probe at a time among the front-ends sharing this client: the others go on.
        let Ok(mut heal) = std::sync::Arc::clone(&self.heal).try_lock_owned() else { return };
        let heal = &mut *heal;
        if heal.probed.is_some_and(|t| t.elapsed() < std::time::Duration::from_millis(250)) {
            return;
        }
        let all: Vec<String> = self.endpoints.split(',').map(str::to_owned).collect();
        // At once: members that do not answer at all cost 200 ms together, not 200 ms each,
        // while the Pulses wait.
        let mut probes = tokio::task::JoinSet::new();
        for e in &all {
            let authority =
                e.split("://").nth(1).unwrap_or(e).split('/').next().unwrap_or_default().to_owned();
            let e = e.clone();
            probes.spawn(async move {
                let probe = tokio::net::TcpStream::connect(authority);
                let answer = match tokio::time::timeout(std::time::Duration::from_millis(200), probe).await {
                    Ok(Ok(_)) => Probe::Answered,
                    Ok(Err(_)) => Probe::Refused,
                    Err(_) => Probe::TimedOut,
                };
                (e, answer)
            });
        }
        // Each member up, down, or (one probe timed out) left as it was. Timeouts count as in a
        // row only between probes of one stall: a timeout seconds after the last probe starts
        // the count again.
        if heal.probed.is_some_and(|t| t.elapsed() > std::time::Duration::from_secs(2)) {
            heal.timeouts.clear();
        }
        let before = heal.timeouts.clone();
        let mut verdicts: BTreeMap<String, Option<bool>> = BTreeMap::new();
        while let Some(probed) = probes.join_next().await {
            let Ok((e, answer)) = probed else { continue };
            let strikes = heal.timeouts.entry(e.clone()).or_default();
            verdicts.insert(e, answer.verdict(strikes));
        }
        heal.probed = Some(std::time::Instant::now());
        if !verdicts.values().any(|v| *v == Some(true)) {
            // None answered: the fault may be this front-end's own; keep every member, and
            // count none of this round's timeouts against them.
            verdicts = all.iter().map(|e| (e.clone(), Some(true))).collect();
            heal.timeouts = before;
        }
        for e in &all {
            let benched = heal.benched.contains(e);
            match verdicts.get(e).copied().flatten() {
                Some(false) if !benched && self.client.remove_endpoint(e).await.is_ok() => {
                    heal.benched.insert(e.clone());
                }
                Some(true) if benched && self.client.add_endpoint(e).await.is_ok() => {
                    heal.benched.remove(e);
                }
                _ => {}
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
        Self::connect_with(endpoints, prefix, key, &EtcdAccess::default()).await
    }

    /// The same, reaching etcd as `access` says (TLS with a client certificate, a user).
    pub async fn connect_with(
        endpoints: &[&str],
        prefix: &str,
        key: SigningKey,
        access: &EtcdAccess,
    ) -> Result<Self, FleetError> {
        Self::connect_accepting(endpoints, prefix, key, access, NEWEST_FORMAT).await
    }

    /// The same, serving a ledger of format `oldest` or newer: ledgers made before format 6
    /// are served only when the operator says so (`P/format` is not signed: "The claim").
    pub async fn connect_accepting(
        endpoints: &[&str],
        prefix: &str,
        key: SigningKey,
        access: &EtcdAccess,
        oldest: u8,
    ) -> Result<Self, FleetError> {
        let joined = endpoints.join(",");
        let client = Client::connect(endpoints, Some(connect_options(access)))
            .await
            .map_err(|e| etcd_err(&joined, e))?;
        let mut ledger = Self {
            client,
            endpoints: joined,
            prefix: prefix.to_owned(),
            key,
            cached: None,
            fresh: false,
            lost: 0,
            reads: 0,
            archive_dir: None,
            segment: None,
            chained: false,
            cells: false,
            keyed: true,
            after: false,
            claimed: false,
            pending: None,
            since_snapshot: 0,
            limits: TxnLimits::default(),
            heal: Default::default(),
            history: None,
            turn_seen: 0,
            turn_mark: turn_mark(),
            swap_wait: Default::default(),
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
        let turn = ledger.get(ledger.key_of("turn"), None).await?;
        ledger.turn_seen = turn.kvs().first().map_or(0, |kv| kv.mod_revision());
        let format = ledger.get(ledger.key_of("format"), None).await?;
        let found = match format.kvs().first().map(|kv| kv.value()) {
            None => 1,
            Some([d @ b'2'..=b'6']) => d - b'0',
            Some(_) => 0,
        };
        if found != 0 && found < oldest {
            return Err(FleetError::OlderFormat { prefix: ledger.prefix.clone(), found, oldest });
        }
        (ledger.chained, ledger.cells, ledger.keyed) = match format.kvs().first().map(|kv| kv.value()) {
            None => (false, false, true),
            Some(b"2") => (true, false, true),
            Some(b"3") => (true, true, true),
            Some(b"4") => (true, true, false),
            Some(b"5") => {
                ledger.after = true;
                (true, true, false)
            }
            Some(b"6") => {
                (ledger.after, ledger.claimed) = (true, true);
                (true, true, false)
            }
            Some(v) => {
                return Err(ledger
                    .damaged("format", format!("{:?}, not 2, 3, 4, 5 or 6", String::from_utf8_lossy(v))));
            }
        };
        Ok(ledger)
    }

    /// Make a fleet ledger under `prefix`: its key and its genesis Pulse 0, once (a second
    /// `init` finds it and connects, or refuses another key).
    pub async fn init(endpoints: &[&str], prefix: &str, key: SigningKey) -> Result<Self, FleetError> {
        Self::init_with(endpoints, prefix, key, &EtcdAccess::default()).await
    }

    /// The same, reaching etcd as `access` says.
    pub async fn init_with(
        endpoints: &[&str],
        prefix: &str,
        key: SigningKey,
        access: &EtcdAccess,
    ) -> Result<Self, FleetError> {
        Self::init_accepting(endpoints, prefix, key, access, NEWEST_FORMAT).await
    }

    /// The same, finding a ledger there already of format `oldest` or newer
    /// ([`FleetLedger::connect_accepting`]); a new one is of the newest format.
    pub async fn init_accepting(
        endpoints: &[&str],
        prefix: &str,
        key: SigningKey,
        access: &EtcdAccess,
        oldest: u8,
    ) -> Result<Self, FleetError> {
        Self::init_as(endpoints, prefix, key, access, Format::Claimed, oldest).await
    }

    /// Make a fleet ledger of `format`, as ledgers made before were: 5 (a number won without
    /// moving `P/claim` on), 4 (a header signed before its entry won its number), 3 (the state
    /// kept key by key) or 2 (no cells, headers of version 1); 6 is [`FleetLedger::init`]. For
    /// tests that a front-end still serves each, that show what each later format closes, and
    /// to measure one against another.
    #[doc(hidden)]
    pub async fn init_format(
        endpoints: &[&str],
        prefix: &str,
        key: SigningKey,
        format: Format,
    ) -> Result<Self, FleetError> {
        Self::init_as(endpoints, prefix, key, &EtcdAccess::default(), format, format.number()).await
    }

    async fn init_as(
        endpoints: &[&str],
        prefix: &str,
        key: SigningKey,
        access: &EtcdAccess,
        format: Format,
        oldest: u8,
    ) -> Result<Self, FleetError> {
        let cells = format != Format::Unchained;
        let joined = endpoints.join(",");
        let mut client = Client::connect(endpoints, Some(connect_options(access)))
            .await
            .map_err(|e| etcd_err(&joined, e))?;
        let genesis = State::new_ledger(cells).header(0, now_ns(), [0; 32]);
        let signature = SignedHeader::sign(&key, genesis).signature;
        let k = |rest: &str| format!("{prefix}{rest}");
        let genesis_entry = entry(&[], &genesis);
        let mut puts = vec![
            TxnOp::put(k("key"), key.verifying_key().to_bytes().to_vec(), None),
            TxnOp::put(k("format"), format.value().to_vec(), None),
            TxnOp::put(k("head"), head_value(&genesis), None),
            TxnOp::put(k(&format!("sig/{}", n20(0))), signature.to_vec(), None),
        ];
        if matches!(format, Format::Entries | Format::Proposed | Format::Claimed) {
            let esig = sign_entry(&key, 0, &genesis_entry);
            puts.push(TxnOp::put(k(&format!("esig/{}", n20(0))), esig.to_vec(), None));
        }
        puts.push(TxnOp::put(k(&format!("pulse/{}", n20(0))), genesis_entry.clone(), None));
        let mut when = vec![Compare::create_revision(k("key"), CompareOp::Equal, 0)];
        // Format 6: `P/claim` is made first, empty and alone, on an empty prefix; the genesis
        // then comes with its claim, made for where that puts `P/claim` — never a claim for a
        // genesis already there ("The claim"). A first step whose answer was lost, or a second
        // `init` racing, finds `P/claim` empty at version 1 with no `P/key`, and goes on from it.
        if format == Format::Claimed {
            let first = Txn::new()
                .when(vec![
                    Compare::create_revision(k("key"), CompareOp::Equal, 0),
                    Compare::create_revision(k("claim"), CompareOp::Equal, 0),
                ])
                .and_then(vec![TxnOp::put(k("claim"), Vec::new(), None)])
                .or_else(vec![TxnOp::get(k("key"), None), TxnOp::get(k("claim"), None)]);
            let resp = client.txn(first).await.map_err(|e| etcd_err(&joined, e))?;
            let create = if resp.succeeded() {
                Some(resp.header().map_or(0, |h| h.revision()))
            } else {
                let got: Vec<Option<etcd_client::KeyValue>> = resp
                    .op_responses()
                    .into_iter()
                    .map(|r| match r {
                        etcd_client::TxnOpResponse::Get(g) => g.kvs().first().cloned(),
                        _ => None,
                    })
                    .collect();
                match got.as_slice() {
                    [None, Some(c)] if c.value().is_empty() && c.version() == 1 => Some(c.create_revision()),
                    _ => None,
                }
            };
            if let Some(create) = create {
                let place = claim::Place { create, version: 1 }.next();
                when.push(Compare::create_revision(k("claim"), CompareOp::Equal, create));
                when.push(Compare::version(k("claim"), CompareOp::Equal, 1));
                puts.push(TxnOp::put(k("claim"), claim::encode(&key, 0, &genesis_entry, place), None));
            }
        }
        // Made here, or by another `init` (connected to, and checked as any ledger is).
        let txn = Txn::new().when(when).and_then(puts);
        client.txn(txn).await.map_err(|e| etcd_err(&joined, e))?;
        Self::connect_accepting(endpoints, prefix, key, access, oldest).await
    }

    /// A second front-end on the same etcd connection, with a state of its own: a service
    /// answers reads from it, so no read waits for a Submit or holds one up.
    pub fn reader(&self) -> Self {
        Self {
            client: self.client.clone(),
            endpoints: self.endpoints.clone(),
            prefix: self.prefix.clone(),
            key: self.key.clone(),
            cached: None,
            fresh: false,
            lost: 0,
            reads: 0,
            archive_dir: self.archive_dir.clone(),
            segment: None,
            chained: self.chained,
            cells: self.cells,
            keyed: self.keyed,
            after: self.after,
            claimed: self.claimed,
            pending: None,
            since_snapshot: 0,
            limits: self.limits,
            heal: std::sync::Arc::clone(&self.heal),
            history: None,
            turn_seen: self.turn_seen,
            turn_mark: turn_mark(),
            swap_wait: self.swap_wait.clone(),
        }
    }

    /// Keep each Pulse's etcd transaction within these limits (those the etcd cluster was
    /// started with: `sion ledger serve --etcd-max-txn-ops`, `--etcd-max-request-bytes`).
    pub fn with_limits(mut self, limits: TxnLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How many compare-and-swaps on the head this front-end has lost to others.
    pub fn lost_races(&self) -> u64 {
        self.lost
    }

    /// How many read requests this front-end has made of etcd (range reads and read-only
    /// transactions): what a proof costs, counted.
    pub fn etcd_reads(&self) -> u64 {
        self.reads
    }

    pub fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The ledger's operator account (its own key), as the embedded ledger's.
    pub fn operator(&self) -> Account {
        account_of(&self.key)
    }

    /// The state as of the current head, read at one revision (a consistent snapshot) and
    /// checked before anything is built on it ([`FleetLedger::check_state`]): served while the
    /// head stays where this front-end last saw it.
    async fn snapshot(&mut self) -> Result<&Snapshot, FleetError> {
        // A Pulse found waiting for its signatures is completed (or seen completed), and the
        // head read again: at most a few times, as each completion moves the head.
        for _ in 0..4 {
            self.pending = None;
            self.read_head().await?;
            match self.pending.take() {
                Some(n) => self.complete(n).await?,
                None => break,
            }
        }
        self.cached.as_ref().ok_or_else(|| FleetError::Missing(self.prefix.clone()))
    }

    /// [`FleetLedger::snapshot`]'s read: the head, and the state at it unless held fresh.
    async fn read_head(&mut self) -> Result<(), FleetError> {
        let head = self.get(self.key_of("head"), None).await?;
        let Some(kv) = head.kvs().first() else { return Err(FleetError::Missing(self.prefix.clone())) };
        let head_revision = kv.mod_revision();
        let fresh = self.fresh && self.cached.as_ref().is_some_and(|c| c.head_revision == head_revision);
        if !fresh {
            let value = kv.value();
            let Some((number, hash)) = decode_head(value) else {
                return Err(self.damaged("head", format!("{} bytes, not 40", value.len())));
            };
            let at = head.header().map_or(0, |h| h.revision());
            // From the state this front-end held, the Pulses since are replayed, each checked and
            // rehashing only what it changes; the whole state is read only without one (or past
            // what can be replayed).
            if !self.advance(number, hash, at, head_revision).await? {
                let held_nothing = self.cached.is_none();
                let (mut state, written_after) = if self.keyed {
                    let mut read = self.read_state(at, head_revision).await?;
                    read.state.index();
                    (read.state, read.written_after)
                } else {
                    // The entries are the ledger: the latest signed snapshot and the Pulses since
                    // (its tree kept as they are replayed).
                    (self.load_state(number, at).await?, Vec::new())
                };
                let latest =
                    self.check_state(number, hash, (at, head_revision), written_after, &state).await?;
                // Holding nothing before, the version records the Pulses left are counted too
                // (one that held a state tells a head put back by it, in `check_state`).
                if !self.keyed && held_nothing {
                    self.no_version_past(&state, number, at).await?;
                }
                // The cells are not kept key by key: rebuilt from a snapshot and the entries since.
                if self.cells && self.keyed {
                    state.cells = Some(self.rebuild_cells(&latest, at).await?);
                }
                self.cached = Some(Snapshot { head_revision, state, latest, claim: None });
            }
            if self.claimed {
                self.read_claim(number, at).await?;
            }
            self.fresh = true;
        }
        Ok(())
    }

    /// Bring the held state to the head (Pulse `number`, hashing to `hash`, read at revision
    /// `at`) by replaying the Pulses since: each entry's transaction checked by the rules and
    /// applied in place, each header following the one before, signed by the ledger's key, and
    /// naming the state root the change makes; then nothing past the head. O(Pulses replayed ×
    /// log n), no log read. False (the held state kept as it was) when there is nothing held,
    /// the head did not move to a later Pulse, or the Pulses since cannot be read
    /// ([`MAX_REPLAY`], archived): the caller reads the whole state and checks it.
    async fn advance(
        &mut self,
        number: u64,
        hash: Digest,
        at: i64,
        head_revision: i64,
    ) -> Result<bool, FleetError> {
        let Some(mut held) = self.cached.take() else { return Ok(false) };
        let was = held.latest.number;
        // On format 4 nothing but the entries makes the state: the head where it was is the
        // state held (a lost reply, a swap not known to have landed), once nothing lies past it.
        if !self.keyed && number == was && hash == held.latest.hash() {
            self.cached = Some(held);
            let archived = self.archived_mark_at(Some(at)).await?.0;
            self.nothing_past(number, at, archived).await?;
            if let Some(c) = self.cached.as_mut() {
                c.head_revision = head_revision;
            }
            return Ok(true);
        }
        if number <= was || number - was > MAX_REPLAY {
            self.cached = Some(held);
            return Ok(false);
        }
        let archived = match self.archived_mark_at(Some(at)).await {
            Ok(mark) => mark.0,
            Err(e) => {
                self.cached = Some(held);
                return Err(e);
            }
        };
        if was + 1 < archived {
            self.cached = Some(held);
            return Ok(false);
        }
        let mut undone = Vec::new();
        let since = held.head_revision;
        let replayed = self.replay_in_place(&mut held, number, at, Some(&mut undone)).await;
        let checked = match replayed {
            Ok(()) if held.latest.hash() != hash => Err(self.mismatch(
                number,
                &["head".into(), format!("pulse/{}", n20(number))],
                format!("P/head names Pulse {number} with a hash its entry's header does not have"),
            )),
            // Agents and nonces are not in the state root: what etcd holds of them, written since
            // the Pulse held, must be what the Pulses replayed made (read are only the keys
            // written since).
            // No such keys on format 4: the state is what the entries make.
            Ok(()) if !self.keyed => self.nothing_past(number, at, archived).await,
            Ok(()) => match self.written_since(since, at, &held.state, false).await {
                Ok(differ) if !differ.is_empty() => Err(self.mismatch(
                    number,
                    &differ,
                    format!(
                        "these keys do not hold what the signed Pulses {} … {number} made of the state this \
                         front-end held at Pulse {was}",
                        was + 1
                    ),
                )),
                Ok(_) => self.nothing_past(number, at, archived).await,
                Err(e) => Err(e),
            },
            // A Pulse whose signed root is not what its transaction makes: name the logs etcd
            // holds otherwise than the replay made them, if any.
            Err(FleetError::StateMismatch { pulse, keys, problem })
                if self.keyed && problem.contains("does not sign the state") =>
            {
                match self.written_since(since, at, &held.state, true).await {
                    Ok(differ) if !differ.is_empty() => Err(self.mismatch(pulse, &differ, problem)),
                    _ => Err(FleetError::StateMismatch { pulse, keys, problem }),
                }
            }
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => {
                held.head_revision = head_revision;
                self.cached = Some(held);
                Ok(true)
            }
            Err(e) => {
                // Put back as it was held: a later look replays from there again.
                while let Some((undo, latest)) = undone.pop() {
                    held.state.undo(undo);
                    held.latest = latest;
                }
                self.cached = Some(held);
                Err(e)
            }
        }
    }

    /// Replay Pulses `held.latest + 1 … to` onto `held` in place, read at revision `at` a page
    /// at a time; each change's undo (and the header before it) pushed on `undone` if given
    /// (a caller that drops the state on a refusal keeps none).
    async fn replay_in_place(
        &mut self,
        held: &mut Snapshot,
        to: u64,
        at: i64,
        mut undone: Option<&mut Vec<(Undo, PulseHeader)>>,
    ) -> Result<(), FleetError> {
        let mut n = held.latest.number + 1;
        while n <= to {
            let end = (n + REPLAY_PAGE).min(to + 1);
            // Entries, signatures and (format 4) entry signatures in one read at one revision.
            let range = |what: &str| {
                let options = GetOptions::new()
                    .with_range(self.key_of(&format!("{what}/{}", n20(end))))
                    .with_revision(at);
                TxnOp::get(self.key_of(&format!("{what}/{}", n20(n))), Some(options))
            };
            let mut ops = vec![range("pulse"), range("sig")];
            if !self.keyed {
                ops.push(range("esig"));
            }
            let resp = self.read_txn(Txn::new().and_then(ops)).await?;
            let mut pages = resp.op_responses().into_iter().map(|r| match r {
                etcd_client::TxnOpResponse::Get(got) => got.kvs().to_vec(),
                _ => Vec::new(),
            });
            let (entries, sigs, esigs) = (
                pages.next().unwrap_or_default(),
                pages.next().unwrap_or_default(),
                pages.next().unwrap_or_default(),
            );
            self.replay_page(held, (n, end, to), (&entries, &sigs, &esigs), undone.as_deref_mut())?;
            n = end;
        }
        Ok(())
    }

    /// Replay Pulses `n … end − 1` (of a replay to Pulse `to`) onto `held`, their entries and
    /// signatures among `entries` and `sigs` (read at one revision): [`FleetLedger::replay_in_place`]'s
    /// work on one page.
    fn replay_page(
        &self,
        held: &mut Snapshot,
        (n, end, to): (u64, u64, u64),
        (entries, sigs, esigs): (
            &[etcd_client::KeyValue],
            &[etcd_client::KeyValue],
            &[etcd_client::KeyValue],
        ),
        mut undone: Option<&mut Vec<(Undo, PulseHeader)>>,
    ) -> Result<(), FleetError> {
        let operator = self.operator();
        let key = self.public_key();
        let find = |kvs: &[etcd_client::KeyValue], k: &str| {
            kvs.iter().find(|kv| kv.key() == k.as_bytes()).map(|kv| kv.value().to_vec())
        };
        for m in n..end {
            let rest = format!("pulse/{}", n20(m));
            let sig_rest = format!("sig/{}", n20(m));
            let bad = |problem: String| self.mismatch(to, std::slice::from_ref(&rest), problem);
            let Some(value) = find(entries, &self.key_of(&rest)) else {
                return Err(bad(format!("Pulse {m} is missing below the head, Pulse {to}")));
            };
            let (txs, header) =
                decode_entry(&value).map_err(|e| bad(format!("Pulse {m}'s entry does not parse: {e}")))?;
            if txs.is_empty() {
                return Err(bad(format!("Pulse {m}'s entry holds no transaction")));
            }
            if let Some(twice) = sender_twice(&txs) {
                return Err(bad(format!("Pulse {m}'s entry holds two transactions of {twice}")));
            }
            if openings(&txs) > 1 {
                return Err(bad(format!("Pulse {m}'s entry opens more than one log")));
            }
            let prev = held.latest;
            if header.number != m || header.prev != prev.hash() || header.time_ns <= prev.time_ns {
                return Err(bad(format!("Pulse {m}'s header does not follow Pulse {}'s", m - 1)));
            }
            let signature: Option<[u8; 64]> =
                find(sigs, &self.key_of(&sig_rest)).and_then(|v| v.as_slice().try_into().ok());
            if signature.is_none_or(|signature| SignedHeader { header, signature }.verify(&key).is_err()) {
                return Err(self.mismatch(
                    to,
                    &[sig_rest],
                    format!(
                        "Pulse {m} has no signature of the ledger's key: not made by a front-end's commit"
                    ),
                ));
            }
            for (i, tx) in txs.iter().enumerate() {
                // A log's transaction's effect is fixed by the signed state root checked below
                // (its sender is the log's writer, and its nonce the writer's next, by the rules):
                // its signature is not checked again. An agent's is: agents are not in the root.
                let signature = match tx.tx {
                    Tx::CommitMemory { .. } | Tx::OpenMemory { .. } => Signature::Checked,
                    _ => Signature::Check,
                };
                let change = held.state.check_as(&operator, tx, m, signature).map_err(|e| {
                    bad(format!(
                        "Pulse {m}'s transaction {i} is refused by the rules on the state before it ({e})"
                    ))
                })?;
                let undo = held.state.apply(tx.sender, change);
                if let Some(undone) = undone.as_mut() {
                    undone.push((undo, prev));
                }
            }
            held.latest = header;
            let (logs, root) = held.state.root();
            if (header.logs, header.state_root) != (logs, root) {
                return Err(bad(format!(
                    "Pulse {m}'s header does not sign the state its {} makes ({} logs, state root {}; it \
                         says {} logs, {})",
                    if txs.len() == 1 {
                        "transaction".to_owned()
                    } else {
                        format!("{} transactions", txs.len())
                    },
                    logs,
                    hex::encode(root),
                    header.logs,
                    hex::encode(header.state_root)
                )));
            }
            let cells = held.state.cells.as_mut().map(sion_ledger::state::Cells::root);
            if header.cells != cells {
                return Err(bad(format!(
                    "Pulse {m}'s header does not sign the cells its {} make (cells root {}; it says {})",
                    if txs.len() == 1 {
                        "transaction".to_owned()
                    } else {
                        format!("{} transactions", txs.len())
                    },
                    cells.map_or("none".into(), hex::encode),
                    header.cells.map_or("none".into(), hex::encode),
                )));
            }
            // Checked last, so a change the roots tell is named by them: what only this tells is
            // a transaction the header does not commit to (an agent's) taken out or put in.
            let esig_rest = format!("esig/{}", n20(m));
            if !self.keyed && !entry_signed(&key, m, &value, find(esigs, &self.key_of(&esig_rest)).as_deref())
            {
                return Err(self.mismatch(
                    to,
                    &[rest, esig_rest],
                    format!(
                        "Pulse {m}'s entry is not the one the ledger's key signed (P/esig/{m}): rewritten since \
                         its Pulse was made"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The keys under `agent/` and `nonce/` (and `log/`, with `logs`) written after revision
    /// `since` and seen at `at` that do not hold what `state` holds, as `rest`s, sorted.
    async fn written_since(
        &mut self,
        since: i64,
        at: i64,
        state: &State,
        logs: bool,
    ) -> Result<Vec<String>, FleetError> {
        let mut out = Vec::new();
        for what in ["agent/", "log/", "nonce/"] {
            if what == "log/" && !logs {
                continue;
            }
            let prefix = self.key_of(what);
            let options = GetOptions::new()
                .with_range(prefix_end(prefix.as_bytes()))
                .with_revision(at)
                .with_min_mod_revision(since + 1);
            let resp = self.get(prefix.clone(), Some(options)).await?;
            for kv in resp.kvs() {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let Some(name) = key.strip_prefix(&prefix) else { continue };
                let holds = match what {
                    "agent/" => state.agents.get(name).is_some_and(|a| agent_value(a) == kv.value()),
                    "log/" => name
                        .parse::<u64>()
                        .ok()
                        .and_then(|i| state.logs.get(i as usize))
                        .is_some_and(|l| l.encode() == kv.value()),
                    _ => name
                        .parse::<Account>()
                        .is_ok_and(|a| state.nonce(&a).to_le_bytes().as_slice() == kv.value()),
                };
                if !holds {
                    out.push(format!("{what}{name}"));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// What lies past the head, Pulse `number`, at revision `at`: nothing, or (format 5) the
    /// next Pulse's entry waiting for its signatures, noted in [`FleetLedger::pending`] to be
    /// completed. Anything else is refused: the head was put back, and a number already signed
    /// would be signed again.
    async fn past_head(&mut self, number: u64, at: i64) -> Result<(), FleetError> {
        let next_rest = format!("pulse/{}", n20(number + 1));
        let options = GetOptions::new()
            .with_range(prefix_end(self.key_of("pulse/").as_bytes()))
            .with_keys_only()
            .with_limit(2)
            .with_revision(at);
        let resp = self.get(self.key_of(&next_rest), Some(options)).await?;
        let keys: Vec<&[u8]> = resp.kvs().iter().map(|kv| kv.key()).collect();
        match keys.as_slice() {
            [] => Ok(()),
            [only] if self.after && *only == self.key_of(&next_rest).as_bytes() => {
                self.pending = Some(number + 1);
                Ok(())
            }
            _ => {
                let past = keys
                    .first()
                    .map(|k| String::from_utf8_lossy(k).trim_start_matches(&self.prefix).to_owned())
                    .unwrap_or(next_rest);
                Err(self.mismatch(
                    number,
                    &["head".into(), past.clone()],
                    format!(
                        "etcd holds {past} past the head, Pulse {number}: P/head was put back to an older \
                         Pulse, and the next header would reuse a number already signed"
                    ),
                ))
            }
        }
    }

    /// Format 6: `P/claim` at revision `at`, with the head Pulse `number` held: the ledger
    /// key's claim, where it says it is, naming the head (the next swap then moves it on from
    /// there) or, while that Pulse waits past the head for its seal ([`FleetLedger::pending`]),
    /// the next. Anything else is refused and nothing built: a claim naming the next Pulse
    /// with no entry there is one whose entry was deleted under its seal, and another swap for
    /// that number would have a second header signed for it.
    async fn read_claim(&mut self, number: u64, at: i64) -> Result<(), FleetError> {
        let resp = self.get(self.key_of("claim"), Some(GetOptions::new().with_revision(at))).await?;
        let refuse = |this: &Self, problem: String| {
            let refused = this.mismatch(number, &["claim".into()], problem);
            tracing::error!("{refused}");
            refused
        };
        let Some(kv) = resp.kvs().first() else {
            return Err(refuse(
                self,
                "etcd holds no P/claim on a ledger of format 6: deleted by no front-end".into(),
            ));
        };
        let found = claim::check(&self.public_key(), kv.value(), kv.create_revision(), kv.version())
            .map_err(|why| refuse(self, format!("P/claim is not a claim a front-end put: {why}")))?;
        let place = match found.number {
            n if n == number => Some(found.place),
            n if n == number + 1 && self.pending == Some(n) => None,
            n if n == number + 1 => {
                return Err(refuse(
                    self,
                    format!(
                        "P/claim names Pulse {n}, taken by a front-end's swap, but etcd holds no P/pulse/{n}: its \
                         entry was deleted by no front-end before its seal (which may yet land). Nothing is built \
                         on Pulse {number}: a second entry for Pulse {n} would have two headers signed for it"
                    ),
                ));
            }
            n => {
                return Err(refuse(
                    self,
                    format!(
                        "P/claim names Pulse {n}, with the head at Pulse {number}: written by no front-end"
                    ),
                ));
            }
        };
        if let Some(c) = self.cached.as_mut() {
            c.claim = place;
        }
        Ok(())
    }

    /// No Pulse lies past the head at revision `at` (its number would be signed twice) but,
    /// on format 5, the next one waiting for its signatures; the archive's mark is not past
    /// it either.
    async fn nothing_past(&mut self, number: u64, at: i64, archived: u64) -> Result<(), FleetError> {
        self.past_head(number, at).await?;
        if archived > number {
            return Err(self.mismatch(
                number,
                &["head".into(), "archived".into()],
                format!(
                    "Pulses up to {} are archived, past the head: P/head was put back to an older Pulse",
                    archived - 1
                ),
            ));
        }
        Ok(())
    }

    /// The logs, agents and nonces as etcd holds them at revision `at`, and the keys among them
    /// written after the head's revision `head_revision` (no front-end writes one of them but
    /// together with `P/head`).
    async fn read_state(&mut self, at: i64, head_revision: i64) -> Result<ReadState, FleetError> {
        let mut state = State::new_ledger(self.cells);
        state.chained = self.chained;
        let mut written_after = Vec::new();
        let mut note = |kv: &etcd_client::KeyValue| {
            if kv.mod_revision() > head_revision {
                written_after.push(String::from_utf8_lossy(kv.key()).into_owned());
            }
        };
        let logs = self.range_all("log/", at).await?;
        for kv in &logs {
            note(kv);
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let log = MemoryLog::decode(kv.value())
                .map_err(|e| FleetError::Damaged { key: key.clone(), problem: e.to_string() })?;
            if log.id.0 as usize != state.logs.len() || key != self.key_of(&format!("log/{}", n20(log.id.0)))
            {
                return Err(FleetError::Damaged {
                    key,
                    problem: format!("log {} where log {} was expected", log.id, state.logs.len()),
                });
            }
            state.logs.push(log);
        }
        let agents = self.range_all("agent/", at).await?;
        let mut by_name = BTreeMap::new();
        for kv in &agents {
            note(kv);
            let name = String::from_utf8_lossy(&kv.key()[self.key_of("agent/").len()..]).into_owned();
            let agent = decode_agent_value(&name, kv.value()).map_err(|problem| FleetError::Damaged {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                problem,
            })?;
            by_name.insert(name, agent);
        }
        state.agents = by_name;
        let nonces = self.range_all("nonce/", at).await?;
        let mut map = HashMap::new();
        for kv in &nonces {
            note(kv);
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let hex_account = &kv.key()[self.key_of("nonce/").len()..];
            let mut account = [0u8; 32];
            hex::decode_to_slice(hex_account, &mut account)
                .map_err(|_| FleetError::Damaged { key: key.clone(), problem: "not an account".into() })?;
            let n: [u8; 8] = kv
                .value()
                .try_into()
                .map_err(|_| FleetError::Damaged { key: key.clone(), problem: "not 8 bytes".into() })?;
            map.insert(Account(account), u64::from_le_bytes(n));
        }
        state.nonces = map;
        Ok(ReadState { state, written_after })
    }

    /// A refusal to build on what etcd holds, naming the keys (`rest`s under the prefix).
    fn mismatch(&self, pulse: u64, rest: &[String], problem: impl Into<String>) -> FleetError {
        let mut keys: Vec<String> = rest.iter().take(NAMED_KEYS).map(|r| self.key_of(r)).collect();
        if rest.len() > NAMED_KEYS {
            keys.push(format!("and {} more", rest.len() - NAMED_KEYS));
        }
        FleetError::StateMismatch { pulse, keys, problem: problem.into() }
    }

    /// Check the state read from etcd before building on it, and return the head's header:
    /// `P/head` names Pulse `number` with `hash`; that Pulse's header (`P/pulse/N`) hashes to
    /// it and its signature (`P/sig/N`) holds under this front-end's key; no Pulse lies past it
    /// (`P/pulse/N+1` but one waiting for its seal on format 5, the archive's mark); when this front-end held an earlier state, the
    /// Pulses since replay from it by the rules, each signed, to exactly what etcd holds; the
    /// logs hash to the header's state root; no agent or nonce was changed after the head.
    /// Agents and nonces are not in the state root: without a held state to replay from, those
    /// written before the head are taken as read (docs/FLEET-LEDGER.md, "What a party with
    /// etcd write access can and cannot do").
    async fn check_state(
        &mut self,
        number: u64,
        hash: Digest,
        (at, head_revision): (i64, i64),
        written_after: Vec<String>,
        state: &State,
    ) -> Result<PulseHeader, FleetError> {
        let pulse_rest = format!("pulse/{}", n20(number));
        let sig_rest = format!("sig/{}", n20(number));
        let at_rev = || Some(GetOptions::new().with_revision(at));
        let resp = self.get(self.key_of(&pulse_rest), at_rev()).await?;
        let Some(kv) = resp.kvs().first() else {
            return Err(self.mismatch(
                number,
                &["head".into(), pulse_rest],
                format!("P/head names Pulse {number}, whose entry etcd does not hold"),
            ));
        };
        let latest = self.entry_header(&pulse_rest, kv.value())?;
        if latest.number != number || latest.hash() != hash {
            return Err(self.mismatch(
                number,
                &["head".into(), pulse_rest],
                format!(
                    "P/head names Pulse {number} with hash {}, but its entry holds Pulse {}'s header, hash {}",
                    hex::encode(hash),
                    latest.number,
                    hex::encode(latest.hash())
                ),
            ));
        }
        let resp = self.get(self.key_of(&sig_rest), at_rev()).await?;
        let signature: Option<[u8; 64]> = resp.kvs().first().and_then(|kv| kv.value().try_into().ok());
        let signed = signature.map(|signature| SignedHeader { header: latest, signature });
        if signed.is_none_or(|s| s.verify(&self.public_key()).is_err()) {
            return Err(self.mismatch(
                number,
                &[sig_rest],
                "the head's header has no signature of the ledger's key beside it: it was not made by a \
                 front-end's commit",
            ));
        }
        // At the head's own revision: another front-end may have moved the head since.
        self.past_head(number, at).await?;
        let archived = self.archived_mark_at(Some(at)).await?.0;
        if archived > number {
            return Err(self.mismatch(
                number,
                &["head".into(), "archived".into()],
                format!(
                    "Pulses up to {} are archived, past the head: P/head was put back to an older Pulse",
                    archived - 1
                ),
            ));
        }
        if let Some(held) = self.cached.clone() {
            let was = held.latest.number;
            if was > number {
                return Err(self.mismatch(
                    was,
                    &["head".into()],
                    format!(
                        "P/head names Pulse {number}, but this front-end already held Pulse {was}: the chain \
                         in etcd was rolled back"
                    ),
                ));
            }
            if was == number && held.latest.hash() != hash {
                return Err(self.mismatch(
                    number,
                    &["head".into(), format!("pulse/{}", n20(number))],
                    format!("Pulse {number} is not the header this front-end held for that number"),
                ));
            }
            if let Some(replayed) = self.replay(&held, number, at, archived).await? {
                let differ = differing_keys(&replayed, state);
                if !differ.is_empty() {
                    return Err(self.mismatch(
                        number,
                        &differ,
                        format!(
                            "these keys do not hold what the signed Pulses {} … {number} made of the state this \
                             front-end held at Pulse {was}",
                            was + 1
                        ),
                    ));
                }
            }
        }
        let rest_of = |k: &String| k.strip_prefix(&self.prefix).unwrap_or(k).to_owned();
        let (logs_after, others_after): (Vec<String>, Vec<String>) =
            written_after.iter().map(rest_of).partition(|k| k.starts_with("log/"));
        let tree = MemoryTree::<Blake3>::from_leaves(state.logs.iter().map(MemoryLog::encode));
        if tree.size() != latest.logs || tree.root() != latest.state_root {
            let mut rest = logs_after;
            for k in self.diagnose_logs(state, &latest, at).await? {
                if !rest.contains(&k) {
                    rest.push(k);
                }
            }
            return Err(self.mismatch(
                number,
                &rest,
                format!(
                    "the {} logs in etcd do not hash to the state root of Pulse {number}, which counts {} logs",
                    tree.size(),
                    latest.logs
                ),
            ));
        }
        // Agents and nonces are not in the state root: one written after the head is refused
        // unless it holds the value it held at the head (put back as it was).
        let mut changed = Vec::new();
        for rest in others_after {
            let key = self.key_of(&rest);
            let now = self.get(key.clone(), Some(GetOptions::new().with_revision(at))).await?;
            let then = match self.get(key, Some(GetOptions::new().with_revision(head_revision))).await {
                Ok(then) => then.kvs().first().map(|kv| kv.value().to_vec()),
                // Compacted away: what it held then cannot be told.
                Err(FleetError::Etcd { message, .. }) if message.contains("compacted") => None,
                Err(e) => return Err(e),
            };
            if now.kvs().first().map(|kv| kv.value().to_vec()) != then || then.is_none() {
                changed.push(rest);
            }
        }
        if !changed.is_empty() {
            return Err(self.mismatch(
                number,
                &changed,
                format!(
                    "written after Pulse {number}'s commit by no front-end (a front-end writes agents and \
                     nonces only together with P/head), and not as they stood at that Pulse"
                ),
            ));
        }
        Ok(latest)
    }

    /// The state after Pulses `held + 1 … to`, each entry's transaction checked by the rules on
    /// the state before it and applied, each header following the one before, signed by the
    /// ledger's key and naming the state root the change makes ([`FleetLedger::replay_in_place`]
    /// on a copy). None when those Pulses cannot be read any more (below the archive's mark
    /// `archived`) or are too many to replay ([`MAX_REPLAY`]): the state root alone is then
    /// checked, after one read that the held Pulse is still in the chain at its number (or
    /// the chain was rolled back and extended again past it: refused). Agents and nonces are
    /// then taken as read.
    async fn replay(
        &mut self,
        held: &Snapshot,
        to: u64,
        at: i64,
        archived: u64,
    ) -> Result<Option<State>, FleetError> {
        let from = held.latest.number + 1;
        if from > to {
            return Ok(Some(held.state.clone()));
        }
        if to - held.latest.number > MAX_REPLAY || from < archived {
            self.held_is_ancestor(held, to, at, archived).await?;
            return Ok(None);
        }
        // The same replay as a front-end's own advance, on a copy: the state read whole is
        // then compared with it key by key.
        let mut copy = held.clone();
        self.replay_in_place(&mut copy, to, at, None).await?;
        Ok(Some(copy.state))
    }

    /// The held Pulse's header is still the chain's at its number — read from `P/pulse/M` at
    /// revision `at`, or from the archive's segment once archived — or the chain in etcd was
    /// rolled back and extended again past it (a fork), refused. A front-end not given the
    /// archive (or whose segment cannot be read) cannot tell for an archived Pulse, and goes on.
    async fn held_is_ancestor(
        &mut self,
        held: &Snapshot,
        to: u64,
        at: i64,
        archived: u64,
    ) -> Result<(), FleetError> {
        let m = held.latest.number;
        let rest = format!("pulse/{}", n20(m));
        let found = if m >= archived {
            let resp = self.get(self.key_of(&rest), Some(GetOptions::new().with_revision(at))).await?;
            match resp.kvs().first() {
                Some(kv) => Some(self.entry_header(&rest, kv.value())?),
                None => None,
            }
        } else {
            match self.archived(m).await {
                Ok(p) => Some(p.header.header),
                Err(FleetError::Archive(_)) => return Ok(()),
                Err(FleetError::Refused(LedgerError::NoPulse(_))) => None,
                Err(e) => return Err(e),
            }
        };
        if found.is_some_and(|h| h.hash() == held.latest.hash()) {
            return Ok(());
        }
        Err(self.mismatch(
            to,
            &["head".into(), rest],
            format!(
                "this front-end held Pulse {m}, and the chain up to Pulse {to} no longer holds that header at \
                 its number: the chain in etcd was rolled back and extended again (a fork)"
            ),
        ))
    }

    /// Which logs etcd holds wrongly, when there is no held state to compare with: the logs the
    /// head's header does not count or that name a later Pulse, and those that differ from their
    /// last version record (written by the same commit as the log; up to [`DIAGNOSED_LOGS`]). The whole `log/` prefix
    /// when none can be told.
    async fn diagnose_logs(
        &mut self,
        state: &State,
        head: &PulseHeader,
        at: i64,
    ) -> Result<Vec<String>, FleetError> {
        let mut out = Vec::new();
        for log in &state.logs {
            if log.id.0 >= head.logs || log.committed_at > head.number {
                out.push(format!("log/{}", n20(log.id.0)));
                continue;
            }
            if log.id.0 >= DIAGNOSED_LOGS {
                continue;
            }
            let rest = format!("version/{}/{}", n20(log.id.0), n20(log.commits));
            let resp = self.get(self.key_of(&rest), Some(GetOptions::new().with_revision(at))).await?;
            let record: Option<&[u8; 128]> = resp.kvs().first().and_then(|kv| kv.value().try_into().ok());
            if record.is_none_or(|r| decode_version(r, log).ok().as_ref() != Some(log)) {
                out.push(format!("log/{}", n20(log.id.0)));
            }
        }
        if out.is_empty() {
            out.push("log/".into());
        }
        Ok(out)
    }

    /// The header at the end of a Pulse's entry (`P/pulse/N`): of version 2 on a ledger with
    /// cells, else of version 1.
    fn entry_header(&self, rest: &str, v: &[u8]) -> Result<PulseHeader, FleetError> {
        PulseHeader::decode_tail(v, self.cells).map_err(|e| self.damaged(rest, e.to_string()))
    }

    /// Pulse `number`'s signed header (up to the head: one past it may wait for its signature,
    /// which the next read of the state completes). An archived Pulse's comes from its segment.
    pub async fn header(&mut self, number: u64) -> Result<SignedHeader, FleetError> {
        let rest = format!("pulse/{}", n20(number));
        let resp = self.get(self.key_of(&rest), None).await?;
        let Some(kv) = resp.kvs().first() else { return Ok(self.archived(number).await?.header) };
        let header = self.entry_header(&rest, kv.value())?;
        let rest = format!("sig/{}", n20(number));
        let resp = self.get(self.key_of(&rest), None).await?;
        // The signature is written with the head that names the Pulse: a header in etcd
        // without one is past the head, or was not made by a front-end; it is signed here never
        // (only a front-end's proposal is, checked as a replay: `complete`).
        let signature: [u8; 64] = match resp.kvs().first() {
            Some(kv) => kv.value().try_into().map_err(|_| self.damaged(&rest, "not 64 bytes"))?,
            None => {
                return Err(self.damaged(
                    &rest,
                    "missing: this Pulse is not signed (past the head, or not made by a front-end's commit)",
                ));
            }
        };
        let signed = SignedHeader { header, signature };
        signed.verify(&self.public_key()).map_err(|e| self.damaged(&rest, e.to_string()))?;
        Ok(signed)
    }

    /// Pulse `number`'s entry as `P/pulse/N` holds it: its transaction (none for the genesis) and
    /// its header, unsigned (what a witness checks the header's state root against). An
    /// archived Pulse's entry is not served (refusal `archived`).
    pub async fn entry(&mut self, number: u64) -> Result<Vec<u8>, FleetError> {
        let rest = format!("pulse/{}", n20(number));
        let resp = self.get(self.key_of(&rest), None).await?;
        match resp.kvs().first() {
            Some(kv) => Ok(kv.value().to_vec()),
            None if number < self.archived_mark().await?.0 => Err(FleetError::Archive(format!(
                "Pulse {number} is archived: its entry is served only while it is in etcd"
            ))),
            None => Err(LedgerError::NoPulse(number).into()),
        }
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

    /// How many logs `account` has opened, in the current state (the admission policy's quota).
    pub async fn logs_opened_by(&mut self, account: &Account) -> Result<u64, FleetError> {
        Ok(self.snapshot().await?.state.logs.iter().filter(|l| l.writer == *account).count() as u64)
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
        // The latest Pulse: the state held, its tree kept (no log read). A state this front-end
        // cannot check now is not used: the proof is then made as below.
        if let Ok(snap) = self.snapshot().await
            && snap.latest == header.header
        {
            let log = snap.state.logs.get(id.0 as usize).cloned().ok_or(LedgerError::UnknownLog(id))?;
            let path = snap.state.path(id).ok_or(LedgerError::UnknownLog(id))?;
            return Ok(StateProof { header, log, path });
        }
        // Any other Pulse: the tree's nodes as that Pulse left them, O(log n) of them in one
        // etcd transaction, and the log's version then (any trouble there: made as below).
        if let Ok(Some(proof)) = self.node_state_proof(id, &header).await {
            return Ok(proof);
        }
        // A ledger made before the nodes were kept: at a Pulse that committed (or opened) this
        // log, or the Pulse before one of its commits, the path kept with that version.
        if self.keyed
            && let Ok(Some(proof)) = self.kept_state_proof(id, &header).await
        {
            return Ok(proof);
        }
        let rest = format!("pulse/{}", n20(pulse));
        // No log keys on format 4: the logs then are their version records'.
        if !self.keyed {
            let logs = self.logs_at_pulse(pulse, header.header.logs).await?;
            return self.state_proof_over(id, header, logs, &rest);
        }
        let resp = self.get(self.key_of(&rest), None).await?;
        // An archived Pulse has no revision in etcd any more: its logs come from version records.
        let Some(revision) = resp.kvs().first().map(|kv| kv.mod_revision()) else {
            let logs = self.logs_at_pulse(pulse, header.header.logs).await?;
            return self.state_proof_over(id, header, logs, &rest);
        };
        let logs = match self.range_all("log/", revision).await {
            Ok(kvs) => {
                let mut logs = Vec::new();
                for kv in &kvs {
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

    /// The state proof of log `id` at `header`'s Pulse from the path its commit there (or its
    /// next commit, at the Pulse after — which serves only if that Pulse moved no other leaf,
    /// as a Pulse of one transaction does) kept in `P/path/I/K`, checked against the header's
    /// root; `None` when no kept path serves that Pulse (the caller reads tier blocks).
    async fn kept_state_proof(
        &mut self,
        id: LogId,
        header: &SignedHeader,
    ) -> Result<Option<StateProof>, FleetError> {
        let pulse = header.header.number;
        if id.0 >= header.header.logs {
            return Ok(None);
        }
        let Some(current) = self.log(id).await? else { return Ok(None) };
        let Some((held, version)) = self.version_at(&current, pulse).await? else { return Ok(None) };
        // The first version committed after the Pulse.
        let lo = held + 1;
        let kept = if version.committed_at == pulse {
            lo - 1
        } else if lo <= current.commits && self.version(id, lo, &current).await?.committed_at == pulse + 1 {
            lo
        } else {
            return Ok(None);
        };
        let rest = format!("path/{}/{}", n20(id.0), n20(kept));
        let resp = self.get(self.key_of(&rest), None).await?;
        let Some(path) = resp.kvs().first().and_then(|kv| decode_path(kv.value())) else { return Ok(None) };
        let log = version.as_of_logs(header.header.logs);
        let leaf = <Blake3 as merkle::TreeHasher>::hash_leaf(&log.encode());
        let h = &header.header;
        if merkle::verify_inclusion::<Blake3, _>(id.0, h.logs, &leaf, &path, &h.state_root).is_err() {
            return Ok(None);
        }
        Ok(Some(StateProof { header: *header, log, path }))
    }

    /// The version of `current`'s log that Pulse `pulse` held, and its number (`None`: opened
    /// after it): `current` itself when its last commit is no later (no read), else a binary
    /// search of its version records, whose `committed_at` never decreases, each read once.
    async fn version_at(
        &mut self,
        current: &MemoryLog,
        pulse: u64,
    ) -> Result<Option<(u64, MemoryLog)>, FleetError> {
        if current.committed_at <= pulse {
            return Ok(Some((current.commits, current.clone())));
        }
        let (mut lo, mut hi) = (0, current.commits + 1);
        let mut found = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let v = self.version(current.id, mid, current).await?;
            if v.committed_at > pulse {
                hi = mid;
            } else {
                lo = mid + 1;
                found = Some((mid, v));
            }
        }
        // The last version probed at or before the Pulse is the one it held: lo − 1.
        Ok(found.filter(|(k, _)| *k + 1 == lo))
    }

    /// The state proof of log `id` at `header`'s Pulse from the state-tree nodes kept under
    /// `P/node/` (each the last one set at or before the Pulse, O(log n) of them read in one
    /// or two etcd transactions) and the log's version then, checked against the header's root;
    /// `None` when a node is missing (a Pulse made before nodes were kept) or does not check.
    async fn node_state_proof(
        &mut self,
        id: LogId,
        header: &SignedHeader,
    ) -> Result<Option<StateProof>, FleetError> {
        let h = &header.header;
        if id.0 >= h.logs {
            return Ok(None);
        }
        let Some(current) = self.log(id).await? else { return Ok(None) };
        let Some((_, version)) = self.version_at(&current, h.number).await? else { return Ok(None) };
        let log = version.as_of_logs(h.logs);
        let wanted = tree::path_nodes(id.0, h.logs);
        let mut nodes: HashMap<(u32, u64), Digest> = HashMap::with_capacity(wanted.len());
        // Each node from its tier block as the Pulse left it (O(tiers) keys, at most two a tier,
        // in one read)…
        let blocks: Vec<(u32, u64)> = wanted
            .iter()
            .map(|&(j, m)| {
                let (t, b, ..) = tree::tier_of(j, m);
                (t, b)
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut held: HashMap<(u32, u64), Vec<Digest>> = HashMap::new();
        for chunk in blocks.chunks(NODE_READS_PER_TXN) {
            let mut ops = Vec::with_capacity(chunk.len());
            for &(t, b) in chunk {
                let from = self.key_of(&tier_key(t, b, h.number));
                let end = prefix_end(self.key_of(&tier_prefix(t, b)).as_bytes());
                ops.push(TxnOp::get(from, Some(GetOptions::new().with_range(end).with_limit(1))));
            }
            let resp = self.read_txn(Txn::new().and_then(ops)).await?;
            for (r, &(t, b)) in resp.op_responses().into_iter().zip(chunk) {
                let etcd_client::TxnOpResponse::Get(got) = r else { return Ok(None) };
                if let Some(kv) = got.kvs().first()
                    && kv.value().len().is_multiple_of(32)
                {
                    let hashes = kv.value().chunks(32).filter_map(|c| <Digest>::try_from(c).ok()).collect();
                    held.insert((t, b), hashes);
                }
            }
        }
        let mut wanted_nodes = Vec::new();
        for &(j, m) in &wanted {
            let (t, b, ..) = tree::tier_of(j, m);
            match held.get(&(t, b)).and_then(|block| tree::node_from_tier(j, m, block)) {
                Some(hash) => {
                    nodes.insert((j, m), hash);
                }
                None => wanted_nodes.push((j, m)),
            }
        }
        // … and, for a block no Pulse since tiers were kept set, from the node keys Pulses before
        // them kept (unchanged since, or its block would have been written).
        for chunk in wanted_nodes.chunks(NODE_READS_PER_TXN) {
            let mut ops = Vec::with_capacity(chunk.len());
            for &(j, m) in chunk {
                // The first key of the node's from Pulse N back: the node as Pulse N left it.
                let from = self.key_of(&node_key(j, m, h.number));
                let end = prefix_end(self.key_of(&node_prefix(j, m)).as_bytes());
                let options = GetOptions::new().with_range(end).with_limit(1);
                ops.push(TxnOp::get(from, Some(options)));
            }
            let resp = self.read_txn(Txn::new().and_then(ops)).await?;
            for (r, &(j, m)) in resp.op_responses().into_iter().zip(chunk) {
                let etcd_client::TxnOpResponse::Get(got) = r else { return Ok(None) };
                let Some(kv) = got.kvs().first() else { return Ok(None) };
                let Ok(node) = <Digest>::try_from(kv.value()) else { return Ok(None) };
                nodes.insert((j, m), node);
            }
        }
        let Some(path) = tree::path_from(id.0, h.logs, |j, m| nodes.get(&(j, m)).copied()) else {
            return Ok(None);
        };
        let leaf = <Blake3 as merkle::TreeHasher>::hash_leaf(&log.encode());
        if merkle::verify_inclusion::<Blake3, _>(id.0, h.logs, &leaf, &path, &h.state_root).is_err() {
            return Ok(None);
        }
        Ok(Some(StateProof { header: *header, log, path }))
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
            let Some((_, version)) = self.version_at(&current, pulse).await? else {
                return Err(self.damaged(
                    &format!("version/{}/", n20(i)),
                    format!("log {i} is counted by Pulse {pulse} but opened after it"),
                ));
            };
            // A chain's `next` as that Pulse held it.
            out.push(version.as_of_logs(count));
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
        // Not waiting for the physical removal: older revisions are refused from now on, and a
        // large history takes etcd longer to drop than a request may take (measured: over 5 s
        // after 100,000 logs opened).
        self.client.compact(revision, None).await.map_err(|e| self.err(e))?;
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
        self.put(key, c.signature.to_vec()).await?;
        Ok(())
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

    /// Check a transaction by the ledger's rules and, if it passes, make it a Pulse by a
    /// compare-and-swap on the head ([`FleetLedger::submit_batch`] of one).
    pub async fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, FleetError> {
        let mut taken = self.submit_batch(vec![tx]).await;
        match taken.pop() {
            Some(t) => t.map(|r| r.pulse),
            None => Err(FleetError::Contention(0)),
        }
    }

    /// Take a batch of transactions into as few Pulses as etcd's limits allow (docs/
    /// FLEET-LEDGER.md, "Many transactions, one Pulse"): each checked by the ledger's rules on
    /// the state the ones before it made, in the order given; the accepted ones made one Pulse
    /// by one compare-and-swap on the head, acknowledged (their receipts returned) once etcd has
    /// committed it. A Pulse takes at most one transaction of each sender and what fits in
    /// [`TxnLimits`]; the rest go into the next. Losing the race re-reads the state and decides
    /// again, so a commit of a version another front-end has just committed is refused as
    /// stale. One answer for each transaction, in the order given.
    pub async fn submit_batch(&mut self, txs: Vec<SignedTx>) -> Vec<Result<Receipt, FleetError>> {
        let mut out: Vec<Option<Result<Receipt, FleetError>>> = (0..txs.len()).map(|_| None).collect();
        self.submit_each(txs, Signature::Check, |i, answer| out[i] = Some(answer)).await;
        out.into_iter().map(|a| a.unwrap_or(Err(FleetError::Contention(0)))).collect()
    }

    /// [`FleetLedger::submit_batch`], each transaction's answer given to `answer` (with its
    /// index) as soon as its Pulse has landed or it was refused — not after the whole batch;
    /// `signature` says whether their signatures are still to be checked (the service's door
    /// checks each `Submit`'s before it queues it: not twice).
    pub async fn submit_each(
        &mut self,
        txs: Vec<SignedTx>,
        signature: Signature,
        mut answer: impl FnMut(usize, Result<Receipt, FleetError>),
    ) {
        let mut done = vec![false; txs.len()];
        let mut pending: Vec<usize> = (0..txs.len()).collect();
        while !pending.is_empty() {
            match self.one_pulse(&txs, &pending, signature).await {
                Ok(decided) => {
                    let (mut made, mut taken) = (None, 0);
                    for (i, a) in decided {
                        done[i] = true;
                        if let Ok(r) = &a {
                            made = Some(r.pulse.header.number);
                            taken += 1;
                        }
                        answer(i, a);
                    }
                    pending.retain(|&i| !done[i]);
                    self.since_snapshot += taken;
                    // Whoever makes every 1,024th Pulse snapshots the state (or, on a ledger that
                    // keeps it key by key, the cells), after answering; so does a front-end that
                    // made many transactions since its last one. A cache: a failure is only
                    // reported.
                    let due = made.is_some_and(|n| n % snapshot::SNAPSHOT_EVERY == 0);
                    if !self.keyed && (due || self.since_snapshot >= snapshot::SNAPSHOT_AFTER_TXS) {
                        if let Err(e) = self.write_state_snapshot().await {
                            tracing::warn!("the state snapshot was not written ({e}); the next one will be");
                        }
                    } else if self.cells
                        && due
                        && let Err(e) = self.write_cell_snapshot().await
                    {
                        tracing::warn!("the cells' snapshot was not written ({e}); the next one will be");
                    }
                }
                // Nothing known to be taken: every one still pending gets the reason.
                Err(e) => {
                    for &i in &pending {
                        answer(i, Err(e.clone()));
                    }
                    pending.clear();
                }
            }
        }
    }

    /// Make one Pulse of what it can of `txs[pending]`: the answers it decided (refusals, and
    /// the receipts of those it took); the others wait for the next Pulse. An error when
    /// nothing was decided (etcd, contention, a state that does not match).
    async fn one_pulse(
        &mut self,
        txs: &[SignedTx],
        pending: &[usize],
        signature: Signature,
    ) -> Result<Decided, FleetError> {
        let operator = self.operator();
        let started = std::time::Instant::now();
        let mut lost_here = 0u32;
        let mut transport = 0u32;
        // Attempts whose reply was lost: etcd may have committed one of them.
        let mut unknown: Vec<Unknown> = Vec::new();
        for _ in 0..ATTEMPTS {
            if let Err(e) = self.snapshot().await {
                return self.landed(&unknown).await?.ok_or(e);
            }
            // An attempt whose reply was lost may have landed (then its transactions are in that
            // Pulse, and would now be refused as replayed): checked once the head is past it.
            let head = self.cached.as_ref().map_or(0, |c| c.latest.number);
            if unknown.iter().any(|u| u.0 <= head)
                && let Some(decided) = self.landed(&unknown).await?
            {
                return Ok(decided);
            }
            // Taken out to be changed in place (and undone if the swap does not land): no copy of
            // the whole state per Pulse.
            let Some(mut snap) = self.cached.take() else {
                return Err(FleetError::Missing(self.prefix.clone()));
            };
            let number = snap.latest.number + 1;
            let claimed = match (self.claimed, snap.claim) {
                (false, _) => None,
                (true, Some(place)) => Some(place.next()),
                // The head's claim not known: a Pulse was still waiting past it after the
                // completions `snapshot` makes (each front-end racing moved on). As a lost race.
                (true, None) => {
                    self.cached = Some(snap);
                    self.fresh = false;
                    lost_here += 1;
                    tokio::time::sleep(backoff(lost_here, self.lost)).await;
                    continue;
                }
            };
            let mut batch = Batch::new(self.limits, self.key_of("").len(), self.keyed);
            let mut decided = Vec::new();
            for &i in pending {
                let tx = &txs[i];
                // One of each sender, and one opening: its log is the Pulse's last (`logs - 1`).
                let opening = matches!(tx.tx, Tx::OpenMemory { .. });
                if batch.senders.contains(&tx.sender) || (opening && batch.opened) {
                    continue;
                }
                let change = match snap.state.check_as(&operator, tx, number, signature) {
                    Ok(change) => change,
                    Err(refusal) => {
                        decided.push((i, Err(FleetError::Refused(refusal))));
                        continue;
                    }
                };
                // An opening moves its writer's previous last log's `next` too (no version record:
                // versions are commits).
                let chained = match &change {
                    Change::Log(log, _) if log.commits == 0 => snap.state.chained_by(log),
                    _ => None,
                };
                let undo = snap.state.apply(tx.sender, change.clone());
                if !batch.take(i, tx, &change, chained, &snap.state) {
                    // Over etcd's limits with it: it waits for the next Pulse.
                    snap.state.undo(undo);
                    break;
                }
                batch.undo.push(undo);
            }
            if batch.taken.is_empty() {
                self.cached = Some(snap);
                return Ok(decided);
            }
            // Trying again after an attempt not known to have landed, on the same head: the same
            // time, so the same header and the same signature (Ed25519 is deterministic). With a
            // new time, had the first landed, the retry would put a second signed header for this
            // number into etcd's log (its compare fails, but a transaction's request is logged).
            let again = unknown.iter().find(|u| u.0 == number && u.2.prev == snap.latest.hash());
            let time_ns =
                again.map_or_else(|| now_ns().max(snap.latest.time_ns.saturating_add(1)), |u| u.2.time_ns);
            let header = snap.state.header(number, time_ns, snap.latest.hash());
            let taken: Vec<SignedTx> = batch.taken.iter().map(|(i, _)| txs[*i].clone()).collect();
            let mine = entry(&taken, &header);
            // Format 5: the swap puts the entry and this front-end's proposal of it, and the
            // header is signed only once the entry has won its number (`seal`), so no signature
            // of a header that lost is ever sent, even in a request whose compare fails (etcd
            // logs those too). Before: signed here and written by the swap, the header and its
            // signature landing together or not at all.
            let mut puts = if self.after {
                let proposal = self.key.sign(&proposal_message(number, &mine)).to_bytes();
                vec![
                    TxnOp::put(self.key_of(&format!("pulse/{}", n20(number))), mine.clone(), None),
                    TxnOp::put(self.key_of(&format!("prop/{}", n20(number))), proposal.to_vec(), None),
                ]
            } else {
                self.batch_puts(&batch, &snap.state, number, &header, &mine, &self.sign(&header))
            };
            // The head unmoved, and no Pulse of this number already in etcd (a head put back to an
            // older Pulse would otherwise have this front-end sign a second header for a number).
            let mut compares = vec![
                Compare::mod_revision(self.key_of("head"), CompareOp::Equal, snap.head_revision),
                Compare::create_revision(self.key_of(&format!("pulse/{}", n20(number))), CompareOp::Equal, 0),
                // No front-end asked for the next Pulse since this one last looked.
                Compare::mod_revision(self.key_of("turn"), CompareOp::Equal, self.turn_seen),
            ];
            // Format 6: `P/claim` still where the head's claim is, moved on by this swap to hold
            // this entry's claim. The compares above a writer can make true again by deleting
            // keys; this one no one can, once another's swap moved it (`claim`).
            if let (Some(next), Some(place)) = (claimed, snap.claim) {
                compares.push(Compare::create_revision(self.key_of("claim"), CompareOp::Equal, place.create));
                compares.push(Compare::version(self.key_of("claim"), CompareOp::Equal, place.version));
                puts.push(TxnOp::put(
                    self.key_of("claim"),
                    claim::encode(&self.key, number, &mine, next),
                    None,
                ));
            }
            let txn = Txn::new()
                .when(compares)
                .and_then(puts)
                .or_else(vec![TxnOp::get(self.key_of("turn"), None), TxnOp::get(self.key_of("head"), None)]);
            let sent = std::time::Instant::now();
            let wait = self.swap_wait.wait();
            // Not answered within the wait: not known to have landed (a killed leader's proposal
            // is never answered), so tried again below.
            let outcome = match tokio::time::timeout(wait, self.client.txn(txn)).await {
                Ok(Ok(resp)) => {
                    self.swap_wait.answered(sent.elapsed());
                    Ok(resp)
                }
                Ok(Err(e)) => Err(Some(e)),
                Err(_) => {
                    self.swap_wait.unanswered();
                    Err(None)
                }
            };
            let resp = match outcome {
                Ok(resp) if resp.succeeded() => resp,
                other => {
                    // Not landed (or not known to have): the state goes back to the head it was of.
                    while let Some(undo) = batch.undo.pop() {
                        snap.state.undo(undo);
                    }
                    self.cached = Some(snap);
                    self.fresh = false;
                    match other {
                        Ok(resp) => {
                            self.lost += 1;
                            lost_here += 1;
                            // Another front-end asked for the next Pulse: it is given it. (Turns are
                            // scheduling: a failure to read or write `P/turn` is only a slower try,
                            // never the submission's answer.)
                            if self.yield_turn(&resp, number).await.unwrap_or(false) {
                                continue;
                            }
                            // Lost twice in a row: ask for the next Pulse (a front-end that just
                            // made one builds the next before another has replayed it, so
                            // without turns one could win for seconds: measured, 1,000 robots,
                            // 80 lost in a row and 500 commits waiting over 1 s).
                            if lost_here >= TURN_AFTER && self.ask_turn().await.is_ok() {
                                continue;
                            }
                            // Randomised exponential backoff: front-ends that lose together do
                            // not all come back together (measured: without it, 16 racing
                            // writers starved some of them).
                            tokio::time::sleep(backoff(lost_here, self.lost)).await;
                            continue;
                        }
                        // Not known to have landed: tried again (the entry then checked) while
                        // the request's time lasts, on whichever member answers.
                        Err(e) if e.as_ref().is_none_or(transient) && started.elapsed() < REQUEST_TIMEOUT => {
                            transport += 1;
                            // Unanswered too: the swap's member (or the leader it forwarded to)
                            // may have been killed, and the balancer would pick it again.
                            self.heal().await;
                            // Each attempt once (a retry on the same head builds the same bytes).
                            if !unknown.iter().any(|u| u.0 == number && u.1 == mine) {
                                let receipts = batch.receipts(&header);
                                unknown.push((number, mine, header, receipts));
                            }
                            tokio::time::sleep(backoff(transport, self.lost)).await;
                            continue;
                        }
                        Err(e) => {
                            let e = match e {
                                Some(e) => self.err(e),
                                None => FleetError::Etcd {
                                    endpoints: self.endpoints.clone(),
                                    message: format!(
                                        "no answer within {} s: is a quorum of the etcd members up? Nothing is \
                                         known to have been recorded; the robot keeps its atoms and commits them \
                                         when the ledger answers",
                                        REQUEST_TIMEOUT.as_secs()
                                    ),
                                },
                            };
                            return self.landed(&unknown).await?.ok_or(e);
                        }
                    }
                }
            };
            let mut head_revision = resp.header().map_or(0, |h| h.revision());
            let mut moved_on = false;
            if self.after {
                match self.seal(&batch, &snap.state, &header, &mine, &snap.latest).await {
                    Ok(Some(revision)) => head_revision = revision,
                    // Sealed, and Pulses made since: the next look reads forward.
                    Ok(None) => moved_on = true,
                    Err(e) => {
                        // The entry won its number and is this front-end's to acknowledge once
                        // sealed, by this front-end or by any other that finds it waiting: the
                        // next look completes it, and the attempt is then found landed.
                        while let Some(undo) = batch.undo.pop() {
                            snap.state.undo(undo);
                        }
                        self.cached = Some(snap);
                        self.fresh = false;
                        if !unknown.iter().any(|u| u.0 == number && u.1 == mine) {
                            let receipts = batch.receipts(&header);
                            unknown.push((number, mine, header, receipts));
                        }
                        if started.elapsed() < REQUEST_TIMEOUT {
                            transport += 1;
                            tokio::time::sleep(backoff(transport, self.lost)).await;
                            continue;
                        }
                        return self.landed(&unknown).await?.ok_or(e);
                    }
                }
            }
            snap.head_revision = head_revision;
            snap.latest = header;
            if claimed.is_some() {
                snap.claim = claimed;
            }
            self.cached = Some(snap);
            self.fresh = !moved_on;
            let pulse = SignedHeader { header, signature: self.sign(&header) };
            for (i, r) in batch.receipts(&header) {
                decided.push((i, Ok(Receipt { pulse, ..r })));
            }
            return Ok(decided);
        }
        self.landed(&unknown).await?.ok_or(FleetError::Contention(ATTEMPTS))
    }

    /// After a lost compare-and-swap: if `P/turn` (read by the swap when it failed, with the
    /// head) was put since this front-end last looked, by another, and no Pulse was made since,
    /// wait until the head moves past Pulse `number − 1` (the other's Pulse) or [`TURN_WAIT`]
    /// passes. Whether to try again at once (a turn seen: given, or already served).
    async fn yield_turn(&mut self, resp: &etcd_client::TxnResponse, number: u64) -> Result<bool, FleetError> {
        let ops = resp.op_responses();
        let [etcd_client::TxnOpResponse::Get(got), etcd_client::TxnOpResponse::Get(head)] = ops.as_slice()
        else {
            return Ok(false);
        };
        let (revision, mark) =
            got.kvs().first().map_or((0, None), |kv| (kv.mod_revision(), Some(kv.value())));
        if revision == self.turn_seen {
            return Ok(false);
        }
        self.turn_seen = revision;
        // Its own mark, or a Pulse made since it was put (the asker's, or one after): no wait.
        let served = head.kvs().first().is_some_and(|kv| kv.mod_revision() > revision);
        if mark == Some(self.turn_mark.as_slice()) || served {
            return Ok(true);
        }
        let until = std::time::Instant::now() + TURN_WAIT;
        while std::time::Instant::now() < until {
            let head = self.get(self.key_of("head"), None).await?;
            let moved =
                head.kvs().first().and_then(|kv| decode_head(kv.value())).is_some_and(|(n, _)| n >= number);
            if moved {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        Ok(true)
    }

    /// Ask for the next Pulse: put this front-end's mark in `P/turn`, so that every other's
    /// swap in flight fails and the others wait for this one's ([`FleetLedger::yield_turn`]).
    async fn ask_turn(&mut self) -> Result<(), FleetError> {
        self.turn_seen = self.put(self.key_of("turn"), self.turn_mark.to_vec()).await?;
        Ok(())
    }

    /// The receipts of an attempt whose reply was lost, if etcd holds its entry: it landed
    /// (on format 5, once sealed: completed here if it waits).
    async fn landed(&mut self, unknown: &[Unknown]) -> Result<Option<Decided>, FleetError> {
        if unknown.is_empty() {
            return Ok(None);
        }
        if self.after {
            // Completed first if it waits; then the signature etcd holds beside this entry is
            // given, never one made here (the entry read could have been put back after
            // another's took the number).
            self.fresh = false;
            if self.snapshot().await.is_err() {
                return Ok(None);
            }
            for (n, mine, header, receipts) in unknown {
                if let Some(signature) = self.sealed_as(*n, header, mine).await? {
                    let pulse = SignedHeader { header: *header, signature };
                    self.fresh = false;
                    return Ok(Some(
                        receipts.iter().map(|(i, r)| (*i, Ok(Receipt { pulse, ..*r }))).collect(),
                    ));
                }
            }
            return Ok(None);
        }
        for (n, mine, header, receipts) in unknown {
            let got = self.get(self.key_of(&format!("pulse/{}", n20(*n))), None).await?;
            if got.kvs().first().is_some_and(|kv| kv.value() == mine.as_slice()) {
                let pulse = SignedHeader { header: *header, signature: self.sign(header) };
                self.fresh = false;
                return Ok(Some(receipts.iter().map(|(i, r)| (*i, Ok(Receipt { pulse, ..*r }))).collect()));
            }
        }
        Ok(None)
    }

    /// Pulse `n`'s signature as etcd holds it, if its entry there is `entry` and the signature
    /// holds for `header` under the ledger's key (read together).
    async fn sealed_as(
        &mut self,
        n: u64,
        header: &PulseHeader,
        entry: &[u8],
    ) -> Result<Option<[u8; 64]>, FleetError> {
        let resp = self
            .read_txn(Txn::new().and_then(vec![
                TxnOp::get(self.key_of(&format!("pulse/{}", n20(n))), None),
                TxnOp::get(self.key_of(&format!("sig/{}", n20(n))), None),
            ]))
            .await?;
        let mut got = resp.op_responses().into_iter().map(|r| match r {
            etcd_client::TxnOpResponse::Get(got) => got.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        let (Some(Some(held)), Some(Some(signature))) = (got.next(), got.next()) else { return Ok(None) };
        let Ok(signature) = <[u8; 64]>::try_from(signature.as_slice()) else { return Ok(None) };
        let holds =
            held == entry && SignedHeader { header: *header, signature }.verify(&self.public_key()).is_ok();
        Ok(holds.then_some(signature))
    }

    /// Format 5: sign the header of Pulse `header.number`, whose entry `entry` won its number
    /// on the head `prev`, and put the head, the signatures and what proofs read beside the
    /// entry — if `P/head` still names `prev` (compared by value: whatever else was written
    /// meanwhile, a seal once sent lands, so no refused seal leaves in etcd's log a signature
    /// that another entry's could follow; an entry replaced under it is then found by every
    /// reader, as the head's entry not matching it). Tried again while unanswered: the same
    /// bytes each time (the header is fixed, Ed25519 deterministic). The head's revision once
    /// sealed (by this front-end or another); `None` if sealed and the head already past it.
    async fn seal(
        &mut self,
        batch: &Batch,
        state: &State,
        header: &PulseHeader,
        entry: &[u8],
        prev: &PulseHeader,
    ) -> Result<Option<i64>, FleetError> {
        let number = header.number;
        let pulse_rest = format!("pulse/{}", n20(number));
        let signature = self.sign(header);
        let puts = self.batch_puts(batch, state, number, header, entry, &signature);
        let txn = Txn::new()
            .when(vec![Compare::value(self.key_of("head"), CompareOp::Equal, head_value(prev))])
            .and_then(puts)
            .or_else(vec![TxnOp::get(self.key_of("head"), None)]);
        let started = std::time::Instant::now();
        let mut tries = 0u32;
        loop {
            let sent = std::time::Instant::now();
            let outcome =
                match tokio::time::timeout(self.swap_wait.wait(), self.client.txn(txn.clone())).await {
                    Ok(Ok(resp)) => {
                        self.swap_wait.answered(sent.elapsed());
                        Ok(resp)
                    }
                    Ok(Err(e)) => Err(Some(e)),
                    Err(_) => {
                        self.swap_wait.unanswered();
                        Err(None)
                    }
                };
            match outcome {
                Ok(resp) if resp.succeeded() => return Ok(Some(resp.header().map_or(0, |h| h.revision()))),
                // Sealed already (by another front-end that found it waiting, or by this one's
                // earlier try whose answer was lost), perhaps with Pulses since: told by the head
                // and, past it, by the signature etcd holds beside this entry.
                Ok(resp) => {
                    let head = resp.op_responses().into_iter().find_map(|r| match r {
                        etcd_client::TxnOpResponse::Get(got) => got.kvs().first().cloned(),
                        _ => None,
                    });
                    let named = head.as_ref().and_then(|kv| decode_head(kv.value()));
                    if let (Some(kv), Some(named)) = (&head, named)
                        && named == (number, header.hash())
                    {
                        return Ok(Some(kv.mod_revision()));
                    }
                    if named.is_some_and(|(n, _)| n > number)
                        && self.sealed_as(number, header, entry).await?.is_some()
                    {
                        return Ok(None);
                    }
                    let refused = self.mismatch(
                        number,
                        &["head".into(), pulse_rest],
                        format!(
                            "Pulse {number}'s entry won its number, but P/head was moved off the Pulse before it, \
                             to another than this one, before its header was signed: written by no front-end"
                        ),
                    );
                    tracing::error!("{refused}");
                    return Err(refused);
                }
                Err(e) if e.as_ref().is_none_or(transient) && started.elapsed() < REQUEST_TIMEOUT => {
                    tries += 1;
                    self.heal().await;
                    tokio::time::sleep(backoff(tries, self.lost)).await;
                }
                // etcd refuses a request over its limits before its log: the seal is nowhere,
                // and no front-end can put it while the limits stand (docs/FLEET-LEDGER.md,
                // "Many transactions, one Pulse": the operator's remedy).
                Err(Some(e)) if over_limits(&e) => {
                    // On format 6 the entry holds its number for good (its claim moved on):
                    // the seal must fit, so the members' limits are raised.
                    let remedy = if self.claimed {
                        "restart the members with limits at least the front-ends' (the entry keeps its \
                         number; any front-end then seals it)"
                            .to_owned()
                    } else {
                        format!(
                            "delete {p}pulse/{n} and {p}prop/{n}, and start the front-ends with the members' limits",
                            p = self.prefix,
                            n = n20(number),
                        )
                    };
                    let refused = FleetError::Etcd {
                        endpoints: self.endpoints.clone(),
                        message: format!(
                            "etcd refuses Pulse {number}'s seal ({e}): the front-ends' --etcd-max-txn-ops or \
                             --etcd-max-request-bytes exceed the members'. Nothing of Pulse {number} was \
                             acknowledged or signed in etcd: {remedy}"
                        ),
                    };
                    tracing::error!("{refused}");
                    return Err(refused);
                }
                Err(Some(e)) => return Err(self.err(e)),
                Err(None) => {
                    return Err(FleetError::Etcd {
                        endpoints: self.endpoints.clone(),
                        message: format!(
                            "Pulse {number}'s signatures were not acknowledged within {} s: is a quorum of \
                             the etcd members up? Its entry is in etcd; any front-end completes it",
                            REQUEST_TIMEOUT.as_secs()
                        ),
                    });
                }
            }
        }
    }

    /// Format 5: complete Pulse `number`, found in etcd past the head with its entry and no
    /// signatures (its front-end died, or is slow, between the two). Waited for a while first,
    /// as its own front-end normally seals it within a round trip. Then, as a replay would:
    /// its proposal must be the ledger key's, its header must follow the head's, and each of
    /// its transactions (every signature checked: nothing signed covers them yet) must pass
    /// the rules on the held state and make the header's roots — only then is it signed. The
    /// caller reads the head again after.
    async fn complete(&mut self, number: u64) -> Result<(), FleetError> {
        self.fresh = false;
        let until = std::time::Instant::now() + self.swap_wait.wait();
        loop {
            let head = self.get(self.key_of("head"), None).await?;
            if head.kvs().first().and_then(|kv| decode_head(kv.value())).is_some_and(|(n, _)| n >= number) {
                return Ok(());
            }
            if std::time::Instant::now() >= until {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let Some(held) = self.cached.clone() else { return Err(FleetError::Missing(self.prefix.clone())) };
        if held.latest.number + 1 != number {
            return Ok(());
        }
        let pulse_rest = format!("pulse/{}", n20(number));
        let prop_rest = format!("prop/{}", n20(number));
        let resp = self
            .read_txn(Txn::new().and_then(vec![
                TxnOp::get(self.key_of(&pulse_rest), None),
                TxnOp::get(self.key_of(&prop_rest), None),
                TxnOp::get(self.key_of("claim"), None),
            ]))
            .await?;
        let mut got = resp.op_responses().into_iter().map(|r| match r {
            etcd_client::TxnOpResponse::Get(got) => got.kvs().first().cloned(),
            _ => None,
        });
        let (Some(Some(kv)), proposal, claim_kv) = (got.next(), got.next().flatten(), got.next().flatten())
        else {
            // Gone since it was seen: nothing waits.
            return Ok(());
        };
        let value = kv.value().to_vec();
        let bad = |problem: String| self.mismatch(number, &[pulse_rest.clone(), prop_rest.clone()], problem);
        // Format 5: the key's proposal of the entry. (On format 6 its claim, below, is the key's
        // word for the entry and where it took the number: a proposal adds nothing to it.)
        if !self.claimed
            && !proposed(&self.public_key(), number, &value, proposal.as_ref().map(|p| p.value()))
        {
            return Err(bad(format!(
                "Pulse {number} waits past the head for its signatures, but no front-end proposed its entry \
                 (P/prop/{number} is not the ledger key's proposal of it): nothing is signed; deleting \
                 P/pulse/{number} lets the ledger go on"
            )));
        }
        // Format 6: the entry must be the one whose claim moved `P/claim` on from the head's —
        // not one put over it after, with another proposal the key made for the number (read
        // from a member's log), while its own front-end's seal is held back on the network.
        // The claim, the ledger key's where it was made for, is at the one place a claim for
        // this number can be ("The claim").
        if self.claimed {
            let found = claim_kv.as_ref().ok_or_else(|| "etcd holds none".to_string()).and_then(|kv| {
                claim::check(&self.public_key(), kv.value(), kv.create_revision(), kv.version())
            });
            let problem = match found {
                Ok(c) if c.number == number && c.entry == *blake3::hash(&value).as_bytes() => None,
                Ok(c) if c.number == number => Some(format!(
                    "P/claim names another entry for it (hashing to {}…): this one was put over the entry that \
                     took the number, by no front-end, and nothing is signed; putting that entry's bytes back \
                     (the members' logs hold them) lets any front-end complete it",
                    hex::encode(&c.entry[..8])
                )),
                Ok(c) if c.number + 1 == number => Some(format!(
                    "no swap took its number (P/claim names Pulse {}, the head): it was put by no front-end, and \
                     nothing is signed; deleting P/pulse/{number} lets the ledger go on",
                    c.number
                )),
                Ok(c) => Some(format!(
                    "P/claim names Pulse {}: written by no front-end; nothing is signed",
                    c.number
                )),
                Err(why) => {
                    Some(format!("P/claim is not a claim a front-end put ({why}); nothing is signed"))
                }
            };
            if let Some(problem) = problem {
                let refused = self.mismatch(
                    number,
                    &[pulse_rest.clone(), "claim".into()],
                    format!(
                        "Pulse {number} waits past the head for its signatures, but P/claim does not show its entry \
                         as the one that took the number: {problem}"
                    ),
                );
                tracing::error!("{refused}");
                return Err(refused);
            }
        }
        let (txs, header) =
            decode_entry(&value).map_err(|e| bad(format!("Pulse {number}'s entry does not parse: {e}")))?;
        if txs.is_empty()
            || sender_twice(&txs).is_some()
            || openings(&txs) > 1
            || entry(&txs, &header) != value
        {
            return Err(bad(format!("Pulse {number}'s entry is not one a front-end builds")));
        }
        let prev = held.latest;
        if header.number != number || header.prev != prev.hash() || header.time_ns <= prev.time_ns {
            return Err(bad(format!("Pulse {number}'s header does not follow Pulse {}'s", prev.number)));
        }
        let operator = self.operator();
        let mut state = held.state;
        let mut batch = Batch::new(self.limits, self.key_of("").len(), self.keyed);
        batch.forced = true;
        for (i, tx) in txs.iter().enumerate() {
            let change = state.check_as(&operator, tx, number, Signature::Check).map_err(|e| {
                bad(format!(
                    "Pulse {number}'s transaction {i} is refused by the rules on the state before it ({e})"
                ))
            })?;
            let chained = match &change {
                Change::Log(log, _) if log.commits == 0 => state.chained_by(log),
                _ => None,
            };
            state.apply(tx.sender, change.clone());
            batch.take(i, tx, &change, chained, &state);
        }
        if state.header(number, header.time_ns, prev.hash()).encode() != header.encode() {
            return Err(bad(format!(
                "Pulse {number}'s header does not sign the state its transactions make"
            )));
        }
        self.seal(&batch, &state, &header, &value, &prev).await?;
        Ok(())
    }

    /// The puts of one Pulse's compare-and-swap (on format 5, of its seal: the entry is the
    /// swap's): the head, the entry and its signature, and the
    /// keys its transactions changed (nonces, agents, logs with their version records and
    /// paths, and the state-tree nodes set).
    fn batch_puts(
        &self,
        batch: &Batch,
        state: &State,
        number: u64,
        header: &PulseHeader,
        entry: &[u8],
        signature: &[u8; 64],
    ) -> Vec<TxnOp> {
        let mut puts = vec![
            TxnOp::put(self.key_of("head"), head_value(header), None),
            TxnOp::put(self.key_of(&format!("sig/{}", n20(number))), signature.to_vec(), None),
        ];
        // On format 5 the entry was put by the swap that won its number, before any signature.
        if !self.after {
            puts.push(TxnOp::put(self.key_of(&format!("pulse/{}", n20(number))), entry.to_vec(), None));
        }
        if !self.keyed {
            let esig = sign_entry(&self.key, number, entry);
            puts.push(TxnOp::put(self.key_of(&format!("esig/{}", n20(number))), esig.to_vec(), None));
        }
        // On format 4 the entry is the change: only what proofs of earlier Pulses read is kept
        // beside it (version records, tier blocks).
        for sender in batch.senders.iter().filter(|_| self.keyed) {
            puts.push(TxnOp::put(
                self.key_of(&format!("nonce/{}", hex::encode(sender.0))),
                state.nonce(sender).to_le_bytes().to_vec(),
                None,
            ));
        }
        for name in batch.agents.iter().filter(|_| self.keyed) {
            if let Some(a) = state.agents.get(name) {
                puts.push(TxnOp::put(self.key_of(&format!("agent/{name}")), agent_value(a), None));
            }
        }
        for id in &batch.logs {
            let Some(log) = state.logs.get(id.0 as usize) else { continue };
            if self.keyed {
                puts.push(TxnOp::put(self.key_of(&format!("log/{}", n20(id.0))), log.encode(), None));
            }
            if !batch.versioned.contains(id) {
                continue;
            }
            puts.push(TxnOp::put(
                self.key_of(&format!("version/{}/{}", n20(id.0), n20(log.commits))),
                encode_version(log).to_vec(),
                None,
            ));
            // The log's inclusion path at this Pulse: its state proofs here need no other log read.
            if self.keyed
                && let Some(path) = state.path(*id)
            {
                puts.push(TxnOp::put(
                    self.key_of(&format!("path/{}/{}", n20(id.0), n20(log.commits))),
                    encode_path(&path),
                    None,
                ));
            }
        }
        // Every tier block of the state tree this Pulse changed, under its number: a state proof
        // at any Pulse takes each block it needs as the last one kept at or before it. (Leaves
        // share blocks: each once, as etcd asks.)
        for (t, b) in &batch.blocks {
            puts.push(TxnOp::put(
                self.key_of(&tier_key(*t, *b, number)),
                state.tier_block(*t, *b).concat(),
                None,
            ));
        }
        puts
    }
}

/// What bounds one etcd transaction, which is one Pulse: the operations it may hold (etcd's
/// `--max-txn-ops`, 128 unless the operator raised it) and its size (etcd's
/// `--max-request-bytes`, 1.5 MiB unless raised; a front-end keeps its request to
/// `max_bytes`, leaving room for the request's framing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnLimits {
    pub max_ops: usize,
    pub max_bytes: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        Self { max_ops: 128, max_bytes: 1 << 20 }
    }
}

/// The transactions one Pulse takes, and what they change, counted against [`TxnLimits`].
struct Batch {
    limits: TxnLimits,
    /// (index into the caller's transactions, the log it opened or committed).
    taken: Vec<(usize, Option<LogId>)>,
    undo: Vec<Undo>,
    senders: std::collections::BTreeSet<Account>,
    agents: std::collections::BTreeSet<String>,
    /// Logs whose leaves changed; `versioned`, those with a new version record (openings and
    /// commits, not a chain's `next`).
    logs: std::collections::BTreeSet<LogId>,
    versioned: std::collections::BTreeSet<LogId>,
    /// State-tree tier blocks the changed leaves set, as (tier, block).
    blocks: std::collections::BTreeSet<(u32, u64)>,
    /// Bytes of the entry's transactions and of the keys and values put (each put's framing
    /// counted at [`PUT_OVERHEAD`]).
    bytes: usize,
    /// Bytes of the entry's transactions.
    entry: usize,
    /// The length of a key's prefix (`P/`).
    prefix: usize,
    /// Whether it opens a log (one a Pulse).
    opened: bool,
    /// Whether its Pulse writes the state key by key (format 3 and before).
    keyed: bool,
    /// Whether every transaction is taken whatever the limits: a Pulse another front-end
    /// proposed, whose entry is fixed, completed under this front-end's limits (format 5).
    forced: bool,
}

/// An attempt whose reply was lost: its Pulse number, its entry, its header and the receipts
/// it would give.
type Unknown = (u64, Vec<u8>, PulseHeader, Vec<(usize, Receipt)>);

/// What a Pulse decided: for each transaction it took or refused (by its index), the answer.
type Decided = Vec<(usize, Result<Receipt, FleetError>)>;

/// The most bytes of transactions one Pulse's entry holds (a transaction is at most 64 KiB):
/// replay reads 32 entries a request within the 16 MiB decode limit, a witness's link reads one
/// within its 4 MiB, and the archive's segments hold them.
pub const MAX_ENTRY_BYTES: usize = 256 << 10;

/// Puts a Pulse makes whatever it holds: the head, the entry, the signature (and on formats 4
/// and 5 the entry's signature: [`Batch::fixed_puts`]; on format 5 the entry and its proposal
/// are the swap's, the rest the seal's, each within what the whole is counted at).
const FIXED_PUTS: usize = 3;
/// Bytes counted for each put besides its key and value (etcd's framing).
const PUT_OVERHEAD: usize = 32;
/// The longest key after the prefix (`version/` or `path/`, two 20-digit numbers; an agent's
/// name is counted as it is).
const KEY_REST: usize = 52;
/// A log's leaf, version record and path, at most.
const LOG_PUT_BYTES: usize = 400 + 128 + 64 * 32;

impl Batch {
    fn new(limits: TxnLimits, prefix: usize, keyed: bool) -> Self {
        Self {
            limits,
            keyed,
            forced: false,
            entry: 0,
            prefix,
            opened: false,
            taken: Vec::new(),
            undo: Vec::new(),
            senders: Default::default(),
            agents: Default::default(),
            logs: Default::default(),
            versioned: Default::default(),
            blocks: Default::default(),
            bytes: sion_verify::ledger::HEADER_V2
                + 64
                + 5
                + Self::fixed_puts(keyed) * (PUT_OVERHEAD + prefix + KEY_REST)
                + if keyed { 0 } else { 64 },
        }
    }

    /// The puts every Pulse makes: [`FIXED_PUTS`], and `P/esig/N` on format 4.
    fn fixed_puts(keyed: bool) -> usize {
        FIXED_PUTS + usize::from(!keyed)
    }

    fn ops(&self) -> usize {
        let keyed = if self.keyed {
            self.senders.len() + self.agents.len() + self.logs.len() + self.versioned.len()
        } else {
            0
        };
        Self::fixed_puts(self.keyed) + keyed + self.versioned.len() + self.blocks.len()
    }

    /// Take transaction `i` (already applied to `state`) if the Pulse stays within its limits
    /// with it; false, and nothing counted, if not — unless it is the first, which always fits
    /// (one transaction's puts are far within etcd's defaults: docs/FLEET-LEDGER.md, "What
    /// etcd limits").
    fn take(
        &mut self,
        i: usize,
        tx: &SignedTx,
        change: &Change,
        chained: Option<MemoryLog>,
        state: &State,
    ) -> bool {
        let (mut logs, mut agent, mut log_id) = (Vec::new(), None, None);
        match change {
            Change::Agent(a) => agent = Some(a.name.clone()),
            Change::Log(log, _) => {
                logs.push(log.id);
                log_id = Some(log.id);
                if let Some(before) = chained {
                    logs.push(before.id);
                }
            }
        }
        let n = state.logs.len() as u64;
        let new_blocks: Vec<(u32, u64)> = logs
            .iter()
            .flat_map(|id| tree::tier_blocks_of(id.0, n))
            .filter(|b| !self.blocks.contains(b))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let new_logs = logs.iter().filter(|id| !self.logs.contains(id)).count();
        let put = PUT_OVERHEAD + self.prefix + KEY_REST;
        let tx_bytes = tx.encode().len() + 4;
        let (ops, bytes) = if self.keyed {
            (
                1 + usize::from(agent.as_ref().is_some_and(|a| !self.agents.contains(a)))
                    + new_logs
                    + 2 * usize::from(log_id.is_some()),
                put + 8
                    + agent.as_ref().map_or(0, |a| put + a.len() + 33)
                    + logs.len() * (LOG_PUT_BYTES + 3 * put),
            )
        } else {
            // A version record.
            (usize::from(log_id.is_some()), usize::from(log_id.is_some()) * (128 + put))
        };
        let ops = self.ops() + ops + new_blocks.len();
        let bytes = self.bytes + tx_bytes + bytes + new_blocks.len() * ((32 << tree::TIER) + put);
        let over = ops > self.limits.max_ops
            || bytes > self.limits.max_bytes
            || self.entry + tx_bytes > MAX_ENTRY_BYTES;
        if !self.taken.is_empty() && over && !self.forced {
            return false;
        }
        self.bytes = bytes;
        self.entry += tx_bytes;
        self.opened |= matches!(tx.tx, Tx::OpenMemory { .. });
        self.senders.insert(tx.sender);
        if let Some(a) = agent {
            self.agents.insert(a);
        }
        self.logs.extend(logs.iter().copied());
        if let Some(id) = log_id {
            self.versioned.insert(id);
        }
        self.blocks.extend(new_blocks);
        self.taken.push((i, log_id));
        true
    }

    /// Each taken transaction's receipt, the header's signature to be filled in.
    fn receipts(&self, header: &PulseHeader) -> Vec<(usize, Receipt)> {
        let pulse = SignedHeader { header: *header, signature: [0; 64] };
        self.taken.iter().map(|(i, log)| (*i, Receipt { pulse, log: *log })).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Probe;

    #[test]
    fn a_member_is_benched_when_refused_or_twice_unanswered_not_once_slow() {
        let mut strikes = 0;
        assert_eq!(Probe::Answered.verdict(&mut strikes), Some(true));
        assert_eq!(Probe::TimedOut.verdict(&mut strikes), None, "one slow answer is a busy machine");
        assert_eq!(Probe::Answered.verdict(&mut strikes), Some(true));
        assert_eq!(Probe::TimedOut.verdict(&mut strikes), None, "the count starts again after an answer");
        assert_eq!(Probe::TimedOut.verdict(&mut strikes), Some(false), "two in a row: gone");
        assert_eq!(Probe::TimedOut.verdict(&mut strikes), Some(false));
        assert_eq!(Probe::Refused.verdict(&mut strikes), Some(false), "a refusal benches at once");
        assert_eq!(strikes, 0);
    }
}
