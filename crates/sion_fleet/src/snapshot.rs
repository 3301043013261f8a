//! Snapshots kept in etcd beside the Pulses (docs/FLEET-LEDGER.md, "The state snapshot" and
//! "Cells"): what a front-end holding nothing starts from before it replays the entries since.
//! Each is a pointer key and chunks under a prefix, written outside any Pulse by a front-end
//! from a state it checked, the pointer moved only forward. They are caches: one that does not
//! check out is passed over for the entries.
//!
//! On a ledger of format 4 (or 5) the entries are the ledger: a Pulse's compare-and-swap writes no
//! log, nonce or agent key, and the state snapshot — logs, agents, nonces and cells, signed by
//! the ledger's key — is the only copy of the state in etcd.

use ed25519_dalek::{Signer as _, Verifier as _};
use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use sion_ledger::state::{Cells, State};
use sion_ledger::{Account, MemoryLog, PulseHeader};
use sion_verify::cells::{MAX_LEVEL, key_level};
use sion_verify::wire::{Put as _, Reader, WireError};

use crate::{FleetError, FleetLedger, Snapshot, agent_value, decode_agent_value, n20, prefix_end};

/// A front-end writes a snapshot after making a Pulse whose number is a multiple of this: a
/// front-end that restarts replays at most about twice as many entries.
pub const SNAPSHOT_EVERY: u64 = 1024;

/// A front-end also writes a state snapshot once it has committed this many transactions
/// since it last wrote one, so that a replay stays short when Pulses carry many.
pub const SNAPSHOT_AFTER_TXS: u64 = 1 << 16;

/// The most bytes of one snapshot chunk before it is cut, far within etcd's request size.
pub(crate) const CHUNK_BYTES: usize = 512 << 10;

/// Where one kind of snapshot is kept: its pointer's key and its chunks' prefix, under `P/`.
pub(crate) struct Place {
    pub pointer: &'static str,
    pub chunks: &'static str,
}

pub(crate) const CELLS: Place = Place { pointer: "cellsnap", chunks: "cellchunk/" };
pub(crate) const STATE: Place = Place { pointer: "statesnap", chunks: "statechunk/" };

/// The domain of the ledger key's signature over a state snapshot's pointer.
const STATE_DOMAIN: &[u8] = b"sion-fleet-state-v1";

/// Record tags of a state snapshot's chunks, in the order they come.
const LOG: u8 = 0;
const AGENT: u8 = 1;
const NONCE: u8 = 2;
const CELL: u8 = 3;

/// `P/statesnap`: `u64 S, u32 count, 32 BLAKE3` of the chunks' values in order, `32 H(header
/// S)`, then the ledger key's signature over `"sion-fleet-state-v1"` and those 76 bytes.
struct StatePointer {
    pulse: u64,
    count: u32,
    hash: [u8; 32],
    header: [u8; 32],
    signature: [u8; 64],
}

impl StatePointer {
    const SIGNED: usize = 8 + 4 + 32 + 32;
    const LEN: usize = Self::SIGNED + 64;

    fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STATE_DOMAIN.len() + Self::SIGNED);
        out.put_bytes(STATE_DOMAIN);
        out.put_u64(self.pulse);
        out.put_u32(self.count);
        out.put_bytes(&self.hash);
        out.put_bytes(&self.header);
        out
    }

    fn parse(v: &[u8]) -> Result<Self, String> {
        if v.len() != Self::LEN {
            return Err(format!("P/statesnap is {} bytes, not {}", v.len(), Self::LEN));
        }
        let mut r = Reader::new(v);
        let read = |r: &mut Reader| -> Result<Self, WireError> {
            Ok(Self {
                pulse: r.u64("pulse")?,
                count: r.u32("count")?,
                hash: r.array("hash")?,
                header: r.array("header")?,
                signature: r.array("signature")?,
            })
        };
        read(&mut r).map_err(|e| format!("P/statesnap: {e}"))
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = self.signed_bytes().split_off(STATE_DOMAIN.len());
        out.put_bytes(&self.signature);
        out
    }
}

/// The Pulse a state snapshot's pointer names, if it parses and the ledger key signed it: an
/// unsigned one is as none (never a reason to stop writing snapshots, nor a mark the archive
/// keeps to).
fn signed_pulse(v: &[u8], key: &ed25519_dalek::VerifyingKey) -> Option<u64> {
    signed_pointer(v, key).ok().map(|p| p.pulse)
}

/// A state snapshot's pointer, parsed and its signature checked under the ledger key.
fn signed_pointer(v: &[u8], key: &ed25519_dalek::VerifyingKey) -> Result<StatePointer, String> {
    let p = StatePointer::parse(v)?;
    let signature = ed25519_dalek::Signature::from_bytes(&p.signature);
    key.verify(&p.signed_bytes(), &signature)
        .map_err(|_| "P/statesnap is not signed by the ledger's key".to_owned())?;
    Ok(p)
}

/// Chunks of records, each cut after the record that takes it to [`CHUNK_BYTES`] or past.
struct Chunks(Vec<Vec<u8>>);

impl Chunks {
    fn new() -> Self {
        Self(vec![Vec::new()])
    }

    /// The chunk the next record goes into.
    fn next(&mut self) -> &mut Vec<u8> {
        if self.0.last().is_none_or(|c| c.len() >= CHUNK_BYTES) {
            self.0.push(Vec::new());
        }
        let last = self.0.len() - 1;
        &mut self.0[last]
    }
}

/// A cell as a snapshot holds it: key (16 bytes, big-endian), `u32` count, then that many
/// (`u64` log, `u64` the Pulse that listed it), logs ascending.
pub(crate) fn put_cell(out: &mut Vec<u8>, key: u128, listed: &[(u64, u64)]) {
    out.put_bytes(&key.to_be_bytes());
    out.put_u32(listed.len() as u32);
    for (id, pulse) in listed {
        out.put_u64(*id);
        out.put_u64(*pulse);
    }
}

/// Read one cell that [`put_cell`] wrote into `cells`, its listings no later than Pulse `head`.
pub(crate) fn read_cell(r: &mut Reader, cells: &mut Cells, head: u64) -> Result<u128, String> {
    let wire = |e: WireError| e.to_string();
    let key = u128::from_be_bytes(r.array("cell").map_err(wire)?);
    if key_level(key) > MAX_LEVEL {
        return Err(format!("cell {key:032x} of a level past {MAX_LEVEL}"));
    }
    let n = r.u32("logs").map_err(wire)? as usize;
    if n == 0 || n > r.remaining() / 16 {
        return Err(format!("cell {key:032x} lists {n} logs"));
    }
    let mut listed = Vec::with_capacity(n);
    for _ in 0..n {
        let (id, pulse) = (r.u64("log").map_err(wire)?, r.u64("pulse").map_err(wire)?);
        if pulse == 0 || pulse > head {
            return Err(format!("cell {key:032x} lists log {id} at Pulse {pulse}, not 1 … {head}"));
        }
        listed.push((id, pulse));
    }
    if !cells.load(key, listed) {
        return Err(format!("cell {key:032x}: logs not ascending, or the cell twice"));
    }
    Ok(key)
}

/// A state's chunks: every log in id order (`u8 0`, `u32` length, its leaf), every agent by
/// name (`u8 1`, `u16` length, the name's UTF-8, 32 controller, `u8` status), every nonce by
/// account (`u8 2`, 32 account, `u64` next nonce; accounts with nonce 0 left out), every cell by
/// key (`u8 3`, the cell as [`put_cell`] writes it).
fn state_chunks(state: &State) -> Vec<Vec<u8>> {
    let mut out = Chunks::new();
    for log in &state.logs {
        let leaf = log.encode();
        let c = out.next();
        c.put_u8(LOG);
        c.put_u32(leaf.len() as u32);
        c.put_bytes(&leaf);
    }
    for (name, agent) in &state.agents {
        let c = out.next();
        c.put_u8(AGENT);
        c.put_u16(name.len() as u16);
        c.put_bytes(name.as_bytes());
        c.put_bytes(&agent_value(agent));
    }
    let mut nonces: Vec<(&Account, &u64)> = state.nonces.iter().filter(|(_, n)| **n > 0).collect();
    nonces.sort_unstable_by_key(|(a, _)| a.0);
    for (account, n) in nonces {
        let c = out.next();
        c.put_u8(NONCE);
        c.put_bytes(&account.0);
        c.put_u64(*n);
    }
    if let Some(cells) = &state.cells {
        for (key, listed) in cells.sorted() {
            let c = out.next();
            c.put_u8(CELL);
            put_cell(c, key, &listed);
        }
    }
    out.0
}

/// The last record loaded, across chunks: its kind, and the last account and cell key.
#[derive(Default)]
struct Last {
    tag: u8,
    nonce: Option<[u8; 32]>,
    cell: Option<u128>,
}

/// Load one chunk [`state_chunks`] wrote into `state` (the chunks before it loaded): records in
/// tag order, logs numbered from 0 on, agents and nonces strictly ascending.
fn load_state_chunk(state: &mut State, last: &mut Last, bytes: &[u8], head: u64) -> Result<(), String> {
    let mut r = Reader::new(bytes);
    let wire = |e: WireError| e.to_string();
    while r.remaining() > 0 {
        let tag = r.u8("record").map_err(wire)?;
        if tag < last.tag || tag > CELL {
            return Err(format!("a record of kind {tag} after one of kind {}", last.tag));
        }
        last.tag = tag;
        match tag {
            LOG => {
                let leaf = r.bytes32(1 << 16, "log").map_err(wire)?;
                let log = MemoryLog::decode(leaf).map_err(|e| format!("log {}: {e}", state.logs.len()))?;
                if log.id.0 != state.logs.len() as u64 {
                    return Err(format!("log {} where log {} was expected", log.id, state.logs.len()));
                }
                state.logs.push(log);
            }
            AGENT => {
                let n = r.u16("agent name").map_err(wire)? as usize;
                let name = std::str::from_utf8(r.take(n, "agent name").map_err(wire)?)
                    .map_err(|_| "an agent's name not UTF-8".to_owned())?
                    .to_owned();
                let agent = decode_agent_value(&name, r.take(33, "agent").map_err(wire)?)?;
                if state.agents.last_key_value().is_some_and(|(last, _)| *last >= name) {
                    return Err(format!("agent {name:?} not after the one before"));
                }
                state.agents.insert(name, agent);
            }
            NONCE => {
                let account = Account(r.array("account").map_err(wire)?);
                let n = r.u64("nonce").map_err(wire)?;
                if last.nonce.is_some_and(|a| a >= account.0) || n == 0 {
                    return Err(format!(
                        "nonce {n} of {}: 0, or not after the one before",
                        hex::encode(account.0)
                    ));
                }
                last.nonce = Some(account.0);
                state.nonces.insert(account, n);
            }
            _ => {
                let cells = state.cells.as_mut().ok_or("a cell on a ledger without cells")?;
                let key = read_cell(&mut r, cells, head)?;
                if last.cell.is_some_and(|k| k >= key) {
                    return Err(format!("cell {key:032x} not after the one before"));
                }
                last.cell = Some(key);
            }
        }
    }
    Ok(())
}

impl FleetLedger {
    /// Read the chunks of `place`'s snapshot of Pulse `s` at revision `at`, a few at a time,
    /// each given to `each` in order; they must be the `count` chunks whose values hash to
    /// `hash`.
    pub(crate) async fn read_chunks(
        &mut self,
        place: &Place,
        (s, count, hash): (u64, u32, [u8; 32]),
        at: i64,
        mut each: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let prefix = self.key_of(&format!("{}{}/", place.chunks, n20(s)));
        let options = GetOptions::new().with_range(prefix_end(prefix.as_bytes())).with_revision(at);
        let mut hasher = blake3::Hasher::new();
        let mut read = 0u32;
        // A chunk is at most CHUNK_BYTES and a record: a few a read.
        let mut start = prefix.clone().into_bytes();
        loop {
            let resp = self
                .get(start.clone(), Some(options.clone().with_limit(8)))
                .await
                .map_err(|e| e.to_string())?;
            for kv in resp.kvs() {
                // No more than the pointer names is read, whatever etcd holds past them.
                if read == count {
                    return Err(format!("more chunks than the {count} P/{} names", place.pointer));
                }
                let want = format!("{prefix}{}", n20(u64::from(read)));
                if kv.key() != want.as_bytes() {
                    return Err(format!("{} where {want} was expected", String::from_utf8_lossy(kv.key())));
                }
                hasher.update(kv.value());
                each(kv.value()).map_err(|e| format!("{want}: {e}"))?;
                read += 1;
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        if read != count || *hasher.finalize().as_bytes() != hash {
            return Err(format!("Pulse {s}'s snapshot is not the {count} chunks P/{} names", place.pointer));
        }
        Ok(())
    }

    /// Write `place`'s snapshot of Pulse `s`: its chunks, then the pointer (`pointer` makes its
    /// value from the chunks' count and hash) if the one read is of an earlier Pulse (`old`
    /// reads a pointer's Pulse; a damaged one is overwritten), then every older snapshot's
    /// chunks are deleted. The pointer only moves forward (a compare-and-swap on its revision):
    /// a slow front-end never puts it back to an older snapshot, whose entries since may be
    /// archived by then. A front-end that dies midway leaves chunks no pointer names, deleted
    /// by the next later snapshot. The Pulse written, if any.
    pub(crate) async fn write_chunks(
        &mut self,
        place: &Place,
        s: u64,
        parts: &[Vec<u8>],
        pointer: impl FnOnce(u32, [u8; 32]) -> Vec<u8>,
        old: impl Fn(&[u8]) -> Option<u64>,
    ) -> Result<Option<u64>, FleetError> {
        let was = self.get(self.key_of(place.pointer), None).await?;
        let revision = was.kvs().first().map_or(0, |kv| kv.mod_revision());
        if was.kvs().first().and_then(|kv| old(kv.value())).is_some_and(|o| o >= s) {
            return Ok(None);
        }
        let mine = format!("{}{}/", place.chunks, n20(s));
        // The chunks of one Pulse's snapshot are the same whoever writes them (the state at a
        // Pulse is one, encoded one way): a writer overwrites what one that died midway left,
        // and two writing at once write the same bytes. None deletes them first.
        let mut hasher = blake3::Hasher::new();
        for (i, part) in parts.iter().enumerate() {
            hasher.update(part);
            self.put(self.key_of(&format!("{mine}{}", n20(i as u64))), part.clone()).await?;
        }
        let value = pointer(parts.len() as u32, *hasher.finalize().as_bytes());
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(self.key_of(place.pointer), CompareOp::Equal, revision)])
            .and_then(vec![TxnOp::put(self.key_of(place.pointer), value, None)]);
        if !self.write_txn(txn).await?.succeeded() {
            // Lost to another writer: its chunks are these keys if its pointer names this Pulse.
            let now = self.get(self.key_of(place.pointer), None).await?;
            if now.kvs().first().and_then(|kv| old(kv.value())) != Some(s) {
                self.delete_prefix(&mine).await?;
            }
            return Ok(None);
        }
        // Every older snapshot's chunks go: the one replaced, and any a front-end that died
        // midway left. Newer ones are not touched: another front-end may be writing them.
        let (from, to) = (self.key_of(place.chunks), self.key_of(&mine));
        self.retrying(false, |mut c| {
            let (from, to) = (from.clone(), to.clone());
            async move { c.delete(from, Some(DeleteOptions::new().with_range(to))).await }
        })
        .await?;
        Ok(Some(s))
    }

    pub(crate) async fn delete_prefix(&mut self, rest: &str) -> Result<(), FleetError> {
        let key = self.key_of(rest);
        self.retrying(false, |mut c| {
            let key = key.clone();
            async move { c.delete(key, Some(DeleteOptions::new().with_prefix())).await }
        })
        .await?;
        Ok(())
    }

    /// Write a snapshot of the state as of the held state's Pulse (format 4), if it is past
    /// the latest: the state is the one this front-end checked or built, never one read from
    /// etcd unchecked. The Pulse written, if any.
    pub async fn write_state_snapshot(&mut self) -> Result<Option<u64>, FleetError> {
        if self.keyed {
            return Ok(None);
        }
        let snap = self.snapshot().await?;
        let (s, header) = (snap.latest.number, snap.latest.hash());
        let parts = state_chunks(&snap.state);
        let key = self.key.clone();
        let pointer = |count, hash| {
            let mut p = StatePointer { pulse: s, count, hash, header, signature: [0; 64] };
            p.signature = key.sign(&p.signed_bytes()).to_bytes();
            p.encode()
        };
        let public = self.public_key();
        let written = self.write_chunks(&STATE, s, &parts, pointer, |v| signed_pulse(v, &public)).await?;
        // Written, or one as late already there: counted afresh either way.
        self.since_snapshot = 0;
        Ok(written)
    }

    /// The Pulse of the latest state snapshot (`P/statesnap`), if any: entries after it must
    /// stay in etcd.
    pub(crate) async fn state_snapshot_pulse(&mut self) -> Result<Option<u64>, FleetError> {
        let got = self.get(self.key_of(STATE.pointer), None).await?;
        let public = self.public_key();
        Ok(got.kvs().first().and_then(|kv| signed_pulse(kv.value(), &public)))
    }

    /// The latest state snapshot as etcd holds it at revision `at`, if there is one, checked:
    /// the pointer signed by the ledger's key, its chunks those it names, the header it names
    /// that of its Pulse (signed), and the logs hashing to that header's state root. Cells are
    /// checked by the replay after it (each header names their root). A snapshot that does not
    /// check out is passed over (the inner error); one signed for a Pulse past the head `head`
    /// is refused (the outer): the ledger key signed a state the head has not reached, so the
    /// head was put back.
    async fn read_state_snapshot(
        &mut self,
        at: i64,
        head: u64,
    ) -> Result<Result<Option<Snapshot>, String>, FleetError> {
        let resp = self.get(self.key_of(STATE.pointer), Some(GetOptions::new().with_revision(at))).await?;
        let Some(kv) = resp.kvs().first() else { return Ok(Ok(None)) };
        let p = match signed_pointer(kv.value(), &self.public_key()) {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        if p.pulse > head {
            return Err(self.mismatch(
                head,
                &["head".into(), STATE.pointer.into()],
                format!(
                    "the ledger's key signed a snapshot of the state as of Pulse {}, past the head: P/head was \
                     put back to an older Pulse, and the next header would reuse a number already signed",
                    p.pulse
                ),
            ));
        }
        Ok(self.load_state_snapshot(p, at).await)
    }

    /// The state of a signed pointer's snapshot, loaded and checked against its Pulse's header.
    async fn load_state_snapshot(&mut self, p: StatePointer, at: i64) -> Result<Option<Snapshot>, String> {
        let mut state = State::new_ledger(self.cells);
        state.chained = self.chained;
        let mut last = Last::default();
        self.read_chunks(&STATE, (p.pulse, p.count, p.hash), at, |bytes| {
            load_state_chunk(&mut state, &mut last, bytes, p.pulse)
        })
        .await?;
        let latest: PulseHeader = self.header(p.pulse).await.map_err(|e| e.to_string())?.header;
        if latest.hash() != p.header {
            return Err(format!("P/statesnap names another header than Pulse {}'s", p.pulse));
        }
        state.index();
        if state.root() != (latest.logs, latest.state_root) {
            return Err(format!("its logs do not hash to Pulse {}'s state root", p.pulse));
        }
        // Checked here too: with the snapshot at the head, no replay compares them.
        if state.cells.as_mut().map(Cells::root) != latest.cells {
            return Err(format!("its cells do not hash to Pulse {}'s cells root", p.pulse));
        }
        Ok(Some(Snapshot { head_revision: 0, state, latest, claim: None }))
    }

    /// The state as of Pulse `number` (format 4), read at revision `at`: the latest state
    /// snapshot at or before it, and the entries since replayed onto it, each checked by the
    /// rules and against its signed header ([`FleetLedger::replay_in_place`]); from the genesis
    /// when there is no snapshot or it does not check out. A refusal when neither can be
    /// read through to the head; one from the entries after a snapshot that checked is theirs.
    pub(crate) async fn load_state(&mut self, number: u64, at: i64) -> Result<State, FleetError> {
        let mut passed = None;
        let start = match self.read_state_snapshot(at, number).await? {
            Ok(Some(held)) => Some(held),
            Ok(None) => None,
            Err(why) => {
                tracing::warn!("the state snapshot is passed over ({why}); replaying from the genesis");
                passed = Some(why);
                None
            }
        };
        let from_snapshot = start.is_some();
        let mut held = match start {
            Some(held) => held,
            None => {
                let mut state = State::new_ledger(self.cells);
                state.chained = self.chained;
                state.index();
                match self.header(0).await {
                    Ok(genesis) => Snapshot { head_revision: 0, state, latest: genesis.header, claim: None },
                    Err(e) => return Err(self.unloadable(number, passed, e)),
                }
            }
        };
        // Nothing to put back on a refusal (the state is dropped): no undo kept per transaction.
        match self.replay_in_place(&mut held, number, at, None).await {
            Ok(()) => {}
            Err(e) if from_snapshot => return Err(e),
            Err(e) => return Err(self.unloadable(number, passed, e)),
        }
        Ok(held.state)
    }

    /// etcd holds no version record the Pulses up to the head did not write: each opening and
    /// each commit writes one, by the compare-and-swap that moves the head, and none is ever
    /// deleted, so the records number exactly the logs' versions (one count read). More is a
    /// head put back to an older Pulse with the Pulses past it deleted — the next header would
    /// reuse a number already signed — or records forged; fewer, records withheld (their proofs
    /// are refused as damaged when asked for, not a reason to refuse the state).
    pub(crate) async fn no_version_past(
        &mut self,
        state: &State,
        number: u64,
        at: i64,
    ) -> Result<(), FleetError> {
        let prefix = self.key_of("version/");
        let options =
            GetOptions::new().with_range(prefix_end(prefix.as_bytes())).with_revision(at).with_count_only();
        let held = self.get(prefix, Some(options)).await?.count();
        let made: u64 = state.logs.iter().map(|l| l.commits + 1).sum();
        if u64::try_from(held).is_ok_and(|held| held > made) {
            return Err(self.mismatch(
                number,
                &["head".into(), "version/".into()],
                format!(
                    "etcd holds {held} version records, but the signed Pulses up to the head, Pulse {number}, \
                     made {made}: P/head was put back to an older Pulse and the Pulses past it deleted (the \
                     next header would reuse a number already signed), or records were forged"
                ),
            ));
        }
        Ok(())
    }

    /// The refusal of a state that could be loaded neither from its snapshot nor from the
    /// genesis: the replay's, with what was wrong with the snapshot.
    fn unloadable(&self, number: u64, passed: Option<String>, e: FleetError) -> FleetError {
        match (passed, e) {
            (None, e) => e,
            (Some(why), FleetError::StateMismatch { pulse, mut keys, problem }) => {
                keys.insert(0, self.key_of(STATE.pointer));
                FleetError::StateMismatch {
                    pulse,
                    keys,
                    problem: format!("{problem}; the state snapshot: {why}"),
                }
            }
            (Some(why), e) => self.mismatch(
                number,
                &[STATE.pointer.to_owned()],
                format!(
                    "the state snapshot does not check out ({why}), and the entries from the genesis cannot \
                     be replayed ({e})"
                ),
            ),
        }
    }
}
