//! The files beside the journal (docs/LEDGER.md, "Files beside the journal"): where each
//! Pulse's frame is (`pulses`), every version of every log (`versions/<id>`), and the state
//! at a Pulse (`checkpoint`). Opening resumes from the checkpoint and replays only the journal
//! past it, and what grows with the ledger's life stays on disk. All three are caches of the
//! journal: one missing or damaged is rebuilt by replaying the journal whole.

use sion_verify::ledger::{Account, Agent, AgentStatus, Head, MemoryLog};
use sion_verify::merkle::Digest;
use sion_verify::wire::{Put as _, Reader, WireError};

use super::state::{Cells, State};

/// Bytes of one `pulses` entry: u64 journal offset, u32 frame length, u32 CRC-32C.
pub const PULSE_ENTRY: u64 = 16;
/// Bytes of one version record.
pub const VERSION_ENTRY: u64 = 128;
const CHECKPOINT_MAGIC: &[u8; 8] = b"sionlck1";
/// The longest checkpoint read back (a state of this size holds tens of thousands of logs).
pub const MAX_CHECKPOINT: u64 = 64 << 20;

/// Where Pulse `n`'s frame is in the journal: its header at `offset`, its body `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PulseEntry {
    pub offset: u64,
    pub len: u32,
}

impl PulseEntry {
    pub fn encode(&self) -> [u8; PULSE_ENTRY as usize] {
        let mut out = [0u8; PULSE_ENTRY as usize];
        out[..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        let crc = crc32c::crc32c(&out[..12]);
        out[12..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8; PULSE_ENTRY as usize]) -> Option<Self> {
        let crc = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        if crc32c::crc32c(&b[..12]) != crc {
            return None;
        }
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&b[..8]);
        Some(Self { offset: u64::from_le_bytes(offset), len: u32::from_le_bytes([b[8], b[9], b[10], b[11]]) })
    }
}

/// A version record: what changes from one version of a log to the next (its head, commits,
/// Pulse and seal); the rest of the log (id, writer, agent, policy) never changes.
pub fn encode_version(log: &MemoryLog) -> [u8; VERSION_ENTRY as usize] {
    let mut v = Vec::with_capacity(VERSION_ENTRY as usize);
    log.head.put(&mut v);
    v.put_u64(log.commits);
    v.put_u64(log.committed_at);
    v.put_u8(u8::from(log.sealed));
    v.put_bytes(&[0; 3]);
    let crc = crc32c::crc32c(&v);
    v.put_u32(crc);
    let mut out = [0u8; VERSION_ENTRY as usize];
    out.copy_from_slice(&v);
    out
}

/// Read a version record of the log whose unchanging fields `base` holds.
pub fn decode_version(b: &[u8; VERSION_ENTRY as usize], base: &MemoryLog) -> Result<MemoryLog, String> {
    let crc = u32::from_le_bytes([b[124], b[125], b[126], b[127]]);
    if crc32c::crc32c(&b[..124]) != crc {
        return Err("a version record fails its checksum".into());
    }
    let mut r = Reader::new(&b[..124]);
    let wire = |e: WireError| e.to_string();
    let head = Head::read(&mut r).map_err(wire)?;
    let commits = r.u64("commits").map_err(wire)?;
    let committed_at = r.u64("committed_at").map_err(wire)?;
    let sealed = r.flag("sealed").map_err(wire)?;
    if r.array::<3>("padding").map_err(wire)? != [0; 3] {
        return Err("a version record's padding is not zero".into());
    }
    Ok(MemoryLog { head, commits, committed_at, sealed, ..base.clone() })
}

/// The state after Pulse `pulses − 1`, which ends `journal_len` bytes into the journal and
/// whose header hashes to `last`.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub pulses: u64,
    pub journal_len: u64,
    pub last: Digest,
    pub state: State,
}

fn status_code(s: AgentStatus) -> u8 {
    match s {
        AgentStatus::Live => 0,
        AgentStatus::Suspended => 1,
        AgentStatus::Revoked => 2,
    }
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_bytes(CHECKPOINT_MAGIC);
        out.put_u64(self.pulses);
        out.put_u64(self.journal_len);
        out.put_bytes(&self.last);
        out.put_u32(self.state.logs.len() as u32);
        for log in &self.state.logs {
            out.put_bytes32(&log.encode());
        }
        out.put_u32(self.state.agents.len() as u32);
        for agent in self.state.agents.values() {
            out.put_str8(&agent.name);
            out.put_bytes(&agent.controller.0);
            out.put_u8(status_code(agent.status));
        }
        let mut nonces: Vec<(&Account, &u64)> = self.state.nonces.iter().collect();
        nonces.sort();
        out.put_u32(nonces.len() as u32);
        for (account, nonce) in nonces {
            out.put_bytes(&account.0);
            out.put_u64(*nonce);
        }
        // A ledger made with cells: its cell map, each cell's logs ascending.
        if let Some(cells) = &self.state.cells {
            let sorted = cells.sorted();
            out.put_u32(sorted.len() as u32);
            for (key, logs) in sorted {
                out.put_bytes(&key.to_be_bytes());
                out.put_u32(logs.len() as u32);
                for (id, pulse) in logs {
                    out.put_u64(id);
                    out.put_u64(pulse);
                }
            }
        }
        let crc = crc32c::crc32c(&out);
        out.put_u32(crc);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let Some(body_len) = bytes.len().checked_sub(4) else {
            return Err("shorter than its checksum".into());
        };
        let (body, crc) = bytes.split_at(body_len);
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("it fails its checksum".into());
        }
        let wire = |e: WireError| e.to_string();
        let mut r = Reader::new(body);
        if &r.array::<8>("magic").map_err(wire)? != CHECKPOINT_MAGIC {
            return Err("not a ledger checkpoint (magic)".into());
        }
        let pulses = r.u64("pulses").map_err(wire)?;
        let journal_len = r.u64("journal_len").map_err(wire)?;
        let last = r.array("last").map_err(wire)?;
        let mut state = State::default();
        // Every count is bounded by the bytes left before anything is reserved for it.
        let count = |r: &mut Reader<'_>, field: &'static str, min: usize| -> Result<usize, String> {
            let n = r.u32(field).map_err(wire)? as usize;
            if n > r.remaining() / min {
                return Err(format!("{field}: {n} cannot fit in {} bytes", r.remaining()));
            }
            Ok(n)
        };
        for _ in 0..count(&mut r, "logs", 4)? {
            let encoded = r.bytes32(1 << 16, "log").map_err(wire)?;
            let log = MemoryLog::decode(encoded).map_err(wire)?;
            if log.id.0 != state.logs.len() as u64 {
                return Err(format!("log {} is stored as log {}", log.id, state.logs.len()));
            }
            state.logs.push(log);
        }
        for _ in 0..count(&mut r, "agents", 34)? {
            let name = r.str8("agent name").map_err(wire)?;
            let controller = Account(r.array("controller").map_err(wire)?);
            let status = match r.u8("status").map_err(wire)? {
                0 => AgentStatus::Live,
                1 => AgentStatus::Suspended,
                2 => AgentStatus::Revoked,
                s => return Err(format!("agent {name:?} has status {s}")),
            };
            state.agents.insert(name.clone(), Agent { name, controller, status });
        }
        for _ in 0..count(&mut r, "nonces", 40)? {
            let account = Account(r.array("account").map_err(wire)?);
            state.nonces.insert(account, r.u64("nonce").map_err(wire)?);
        }
        if r.remaining() > 0 {
            let mut cells = Cells::default();
            for _ in 0..count(&mut r, "cells", 20)? {
                let key = u128::from_be_bytes(r.array("cell").map_err(wire)?);
                let mut listed = Vec::new();
                for _ in 0..count(&mut r, "cell logs", 16)? {
                    let id = r.u64("cell log").map_err(wire)?;
                    listed.push((id, r.u64("cell log's Pulse").map_err(wire)?));
                }
                // One trie insert a cell, not one a log.
                if !cells.load(key, listed) {
                    return Err(format!(
                        "cell {key:032x}: its logs are not strictly ascending, or none, or listed twice"
                    ));
                }
            }
            state.cells = Some(cells);
        }
        r.finish().map_err(wire)?;
        Ok(Self { pulses, journal_len, last, state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sion_verify::ledger::LogId;

    fn log(id: u64, commits: u64) -> MemoryLog {
        MemoryLog {
            id: LogId(id),
            writer: Account([id as u8; 32]),
            agent: id.is_multiple_of(2).then(|| format!("robot/{id}")),
            policy: [3; 32],
            head: Head { size: 10 * commits, root: [1; 32], index: [2; 32], manifest: [0; 32] },
            commits,
            committed_at: 7 + commits,
            sealed: commits == 4,
            chain: (!id.is_multiple_of(3))
                .then(|| sion_verify::ledger::Chain { prev: id.checked_sub(1).map(LogId), next: None }),
        }
    }

    #[test]
    fn records_read_back_and_a_flipped_bit_is_caught() {
        let e = PulseEntry { offset: 123_456, len: 789 };
        assert_eq!(PulseEntry::decode(&e.encode()), Some(e));
        let v = log(2, 4);
        let rec = encode_version(&v);
        assert_eq!(decode_version(&rec, &log(2, 0)).expect("reads"), v);
        let mut state = State::default();
        state.logs = vec![log(0, 1), log(1, 4)];
        state.agents.insert(
            "robot".into(),
            Agent { name: "robot".into(), controller: Account([5; 32]), status: AgentStatus::Suspended },
        );
        state.nonces.insert(Account([5; 32]), 9);
        state.nonces.insert(Account([1; 32]), 2);
        let c = Checkpoint { pulses: 12, journal_len: 4096, last: [8; 32], state };
        let bytes = c.encode();
        let back = Checkpoint::decode(&bytes).expect("reads");
        assert_eq!(back.encode(), bytes);
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Checkpoint::decode(&bad).is_err(), "bit {bit}");
        }
        for bit in 0..128 * 8 {
            let mut bad = rec;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_version(&bad, &log(2, 0)).is_err(), "version bit {bit}");
        }
        for bit in 0..16 * 8 {
            let mut bad = e.encode();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(PulseEntry::decode(&bad), None, "pulse bit {bit}");
        }
    }
}

/// Bytes of one slot of `acked`; the file holds two.
pub const ACKED_SLOT: u64 = 128;
const ACKED_MAGIC: &[u8; 8] = b"sionlak1";
const ACKED_DOMAIN: &[u8] = b"sion-ledger-acked-v1";

/// The last Pulse the ledger acknowledged, signed (docs/LEDGER.md, "The acknowledged mark").
/// Kept apart from the journal, so a journal cut or restored from an older copy is caught
/// instead of taken for a torn write and signed over again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub number: u64,
    pub hash: Digest,
}

impl Acked {
    pub fn encode(&self, key: &ed25519_dalek::SigningKey) -> [u8; ACKED_SLOT as usize] {
        use ed25519_dalek::Signer as _;
        let mut out = [0u8; ACKED_SLOT as usize];
        out[..8].copy_from_slice(ACKED_MAGIC);
        out[8..16].copy_from_slice(&self.number.to_le_bytes());
        out[16..48].copy_from_slice(&self.hash);
        let signature = key.sign(&[ACKED_DOMAIN, &out[8..48]].concat());
        out[48..112].copy_from_slice(&signature.to_bytes());
        let crc = crc32c::crc32c(&out[..124]);
        out[124..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// A slot, if it is whole and signed by `key`; why not, otherwise.
    pub fn decode(b: &[u8], key: &ed25519_dalek::VerifyingKey) -> Result<Self, &'static str> {
        let b: &[u8; ACKED_SLOT as usize] = b.try_into().map_err(|_| "short")?;
        if &b[..8] != ACKED_MAGIC {
            return Err("no mark");
        }
        if crc32c::crc32c(&b[..124]) != u32::from_le_bytes([b[124], b[125], b[126], b[127]]) {
            return Err("checksum mismatch");
        }
        if b[112..124].iter().any(|&z| z != 0) {
            return Err("reserved bytes are not zero");
        }
        let signature = ed25519_dalek::Signature::from_bytes(b[48..112].try_into().map_err(|_| "short")?);
        key.verify_strict(&[ACKED_DOMAIN, &b[8..48]].concat(), &signature).map_err(|_| "bad signature")?;
        let mut number = [0u8; 8];
        number.copy_from_slice(&b[8..16]);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&b[16..48]);
        Ok(Self { number: u64::from_le_bytes(number), hash })
    }
}

#[cfg(test)]
mod acked_tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_any_changed_byte_is_refused() {
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let mark = Acked { number: 41, hash: [9; 32] };
        let b = mark.encode(&key);
        assert_eq!(Acked::decode(&b, &key.verifying_key()), Ok(mark));
        for i in 0..b.len() {
            let mut c = b;
            c[i] ^= 1;
            assert!(Acked::decode(&c, &key.verifying_key()).is_err(), "byte {i}");
        }
        let other = ed25519_dalek::SigningKey::from_bytes(&[8; 32]);
        assert!(Acked::decode(&b, &other.verifying_key()).is_err());
    }
}
