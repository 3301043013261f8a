//! A memory's link to a fleet ledger service ([`sion_ledger::link::LedgerLink`] over
//! gRPC): what `sion memory open --ledger URL`, the node's `ledger` parameter and
//! `sion memory verify --ledger URL` use. Calls block (the memory is synchronous) on a small
//! runtime of the link's own, so a link works inside and outside another tokio runtime.
//!
//! Every header the service returns is checked against the ledger key before it is used; the
//! service can withhold, not forge.

use std::sync::Mutex;
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use sion_ledger::link::LedgerLink;
use sion_ledger::{
    Account, Agent, LedgerError, LogId, MemoryLog, PulseHeader, SignedHeader, SignedTx, StateProof,
    TxTimeProof,
};
use sion_verify::ledger::{Checkpoint, Cosignature, SignedNote};
use sion_verify::wire::Reader;
use tonic::transport::{Channel, Endpoint};

use crate::service::REFUSAL;
use crate::service::pb::ledger_client::LedgerClient;
use crate::service::pb::{Blob, CellsAsked, Cosigned, Empty, LogAt, Name, Number, Sizes, VersionsQuery};

/// What to look at when the service does not answer.
const UNREACHABLE: &str = "is the ledger service running there, with a quorum of its etcd members up? \
                           Atoms are still recorded here, and committed when it answers";

/// How long one call may take before it fails (the service waits up to 5 s for etcd).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest reply the link decodes (tonic's default; the largest reply, `Versions`, is
/// 1,024 leaves of under 400 bytes).
const MAX_REPLY: usize = 4 << 20;

/// A link to the fleet ledger service at a URL (`http://host:port`).
pub struct RemoteLedger {
    url: String,
    key: VerifyingKey,
    runtime: LinkRuntime,
    client: Mutex<LedgerClient<Channel>>,
}

/// The link's own runtime, shut down in the background when the link is dropped: a link may be
/// dropped on an async runtime's thread (a server's memory at shutdown), where dropping a
/// runtime the ordinary way panics.
struct LinkRuntime(Option<tokio::runtime::Runtime>);

impl Drop for LinkRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl RemoteLedger {
    /// Connect to the service at `url` and learn its key (a memory then checks it against the
    /// one it pinned; a reader against the one it chose).
    pub fn connect(url: &str) -> Result<Self, LedgerError> {
        let remote = |message: String| LedgerError::Remote { ledger: url.to_owned(), message };
        let (runtime, endpoint) = runtime_and_endpoint(url)?;
        let stopped = || remote("the link's runtime stopped".into());
        let channel = run(&runtime, async move { endpoint.connect().await })
            .ok_or_else(stopped)?
            .map_err(|e| remote(format!("cannot connect ({e}): {UNREACHABLE}")))?;
        let mut client = LedgerClient::new(channel);
        let key = run(&runtime, async move {
            let r = client.key(Empty {}).await;
            r.map(|r| (r.into_inner().value, client))
        });
        let (key, client) = key.ok_or_else(stopped)?.map_err(|s| remote(s.message().to_owned()))?;
        let key: [u8; 32] =
            key.as_slice().try_into().map_err(|_| remote("its key is not 32 bytes".into()))?;
        let key =
            VerifyingKey::from_bytes(&key).map_err(|_| remote("its key is not an ed25519 key".into()))?;
        Ok(Self { url: url.to_owned(), key, runtime, client: Mutex::new(client) })
    }

    /// A link to the service at `url` that connects when first used, for a memory that pinned
    /// the ledger's `key` when its log was opened: the memory opens (and records) while the
    /// service is unreachable, and every header is checked against `key` as always.
    pub fn lazy(url: &str, key: VerifyingKey) -> Result<Self, LedgerError> {
        let (runtime, endpoint) = runtime_and_endpoint(url)?;
        // The channel's worker is spawned on the link's own runtime.
        let channel = {
            // Always Some here: only a drop takes it.
            let _inside = runtime.0.as_ref().map(tokio::runtime::Runtime::enter);
            endpoint.connect_lazy()
        };
        Ok(Self { url: url.to_owned(), key, runtime, client: Mutex::new(LedgerClient::new(channel)) })
    }

    fn client(&self) -> LedgerClient<Channel> {
        // A clone shares the channel; the lock is only held to take it.
        self.client.lock().map(|c| c.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    fn remote(&self, message: impl Into<String>) -> LedgerError {
        LedgerError::Remote { ledger: self.url.clone(), message: message.into() }
    }

    /// A gRPC failure as the ledger's error: a refusal keeps its code, anything else says the
    /// ledger could not be asked.
    fn failed(&self, s: tonic::Status) -> LedgerError {
        match s.metadata().get(REFUSAL).and_then(|v| v.to_str().ok()) {
            // Not a refusal of this memory's transaction: the ledger will not serve on what its
            // etcd holds until the operator puts it right. The memory treats it as a ledger it
            // cannot use now (it opens from `ledger-view`, records, and commits later).
            Some("state_mismatch") => self.remote(format!(
                "will not serve now: {}. Nothing of this memory is at fault: atoms are still recorded here, \
                 and committed when the ledger serves again",
                s.message()
            )),
            // Not a refusal either: the service answered, its etcd did not (no quorum, a deadline
            // passed, a reply over the front-end's limit) — the message says which.
            Some("etcd") => self.remote(format!(
                "the service answered, but its etcd did not serve the call: {}. Atoms are still recorded \
                 here, and committed when it does",
                s.message()
            )),
            Some(code) => LedgerError::Refused {
                ledger: self.url.clone(),
                code: code.to_owned(),
                message: s.message().to_owned(),
            },
            None if s.code() == tonic::Code::Unavailable => {
                self.remote(format!("cannot be reached ({}): {UNREACHABLE}", s.message()))
            }
            // The link's own deadline (tonic reports it as cancelled, "Timeout expired"): the
            // service may be up and slow, and the call may have been done.
            None if s.code() == tonic::Code::DeadlineExceeded
                || (s.code() == tonic::Code::Cancelled && s.message().contains("Timeout expired")) =>
            {
                self.remote(format!(
                    "no answer within {} s, the link's deadline for one call ({}): the service took longer \
                     than that (slow, or waiting on its etcd), and what was asked may have been done; a memory \
                     reads its log from the ledger again before its next commit",
                    CALL_TIMEOUT.as_secs(),
                    s.message()
                ))
            }
            None if s.message().contains("message length too large") => self.remote(format!(
                "a reply larger than the link's limit of {} MiB ({}): nothing was taken from it",
                MAX_REPLY >> 20,
                s.message()
            )),
            None => self.remote(format!("{}: {}", s.code(), s.message())),
        }
    }

    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(
            LedgerClient<Channel>,
        ) -> futures_like::BoxFuture<Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, LedgerError> {
        let fut = f(self.client());
        run(&self.runtime, fut)
            .ok_or_else(|| self.remote("the link's runtime stopped"))?
            .map(tonic::Response::into_inner)
            .map_err(|s| self.failed(s))
    }

    fn signed(&self, bytes: &[u8]) -> Result<SignedHeader, LedgerError> {
        let mut r = Reader::new(bytes);
        let h = SignedHeader::read(&mut r)
            .map_err(|e| self.remote(format!("a header that does not parse: {e}")))?;
        r.finish().map_err(|e| self.remote(format!("a header with bytes after it: {e}")))?;
        h.verify(&self.key).map_err(|e| self.remote(format!("{e}: refused")))?;
        Ok(h)
    }

    fn state(&self, r: &mut Reader<'_>) -> Result<StateProof, LedgerError> {
        let p = StateProof::read(r)
            .map_err(|e| self.remote(format!("a state proof that does not parse: {e}")))?;
        p.verify(&self.key).map_err(|e| self.remote(format!("a state proof that does not verify: {e}")))?;
        Ok(p)
    }

    /// Hand the service a witness's cosignature of Pulse `number`.
    pub fn cosign(&self, number: u64, c: &Cosignature) -> Result<(), LedgerError> {
        let mut cosignature = Vec::with_capacity(96);
        c.put(&mut cosignature);
        let q = Cosigned { number, cosignature };
        self.call(move |mut c| Box::pin(async move { c.cosign(q).await }))?;
        Ok(())
    }

    /// Pulse `number`'s transactions (none for the genesis) and header as its entry holds them,
    /// checked against nothing here: a witness compares the header with the signed one and the
    /// transactions' own signatures ([`crate::witness::Witness::check_state`]).
    pub fn entry(&self, number: u64) -> Result<(Vec<SignedTx>, PulseHeader), LedgerError> {
        let b = self.call(move |mut c| Box::pin(async move { c.entry(Number { value: number }).await }))?;
        crate::decode_entry(&b.value).map_err(|e| self.remote(format!("Pulse {number}'s entry: {e}")))
    }

    /// The ledger's latest checkpoint, checked: a C2SP signed note by the ledger's key whose
    /// body is a checkpoint of its history (docs/FLEET-LEDGER.md, "Checkpoints").
    pub fn checkpoint(&self) -> Result<(SignedNote, Checkpoint), LedgerError> {
        let b = self.call(move |mut c| Box::pin(async move { c.checkpoint(Empty {}).await }))?;
        let note = SignedNote::parse(&b.value)
            .map_err(|e| self.remote(format!("a checkpoint that does not parse: {e}")))?;
        let checkpoint =
            note.verify_checkpoint(&self.key).map_err(|e| self.remote(format!("{e}: refused")))?;
        Ok((note, checkpoint))
    }

    /// The first cosigned checkpoint covering Pulse `pulse`, its ledger signature checked (the
    /// cosignatures are the reader's to check, under the witness keys it chose).
    pub fn cosigned_checkpoint(&self, pulse: u64) -> Result<Option<(SignedNote, Checkpoint)>, LedgerError> {
        let m = self.call(move |mut c| {
            Box::pin(async move { c.cosigned_checkpoint(Number { value: pulse }).await })
        })?;
        let Some(bytes) = m.value else { return Ok(None) };
        let note = SignedNote::parse(&bytes)
            .map_err(|e| self.remote(format!("a checkpoint that does not parse: {e}")))?;
        let cp = note.verify_checkpoint(&self.key).map_err(|e| self.remote(format!("{e}: refused")))?;
        if cp.size <= pulse {
            return Err(
                self.remote(format!("asked for a checkpoint past Pulse {pulse}, it sent size {}", cp.size))
            );
        }
        Ok(Some((note, cp)))
    }

    fn hashes(&self, values: Vec<Vec<u8>>, what: &str) -> Result<Vec<[u8; 32]>, LedgerError> {
        if values.len() > 128 {
            return Err(self.remote(format!("{what} of {} hashes", values.len())));
        }
        values
            .into_iter()
            .map(|v| {
                v.as_slice()
                    .try_into()
                    .map_err(|_| self.remote(format!("{what} holding a hash of {} bytes", v.len())))
            })
            .collect()
    }

    /// The history's consistency proof from `old` Pulses to `new`, unchecked (check it with
    /// [`Checkpoint::extends`]).
    pub fn history_consistency(&self, old: u64, new: u64) -> Result<Vec<[u8; 32]>, LedgerError> {
        let l =
            self.call(move |mut c| Box::pin(async move { c.history_consistency(Sizes { old, new }).await }))?;
        self.hashes(l.values, "a consistency proof")
    }

    /// The inclusion proof of Pulse `pulse` in the history of `size` Pulses, unchecked (check
    /// it with [`Checkpoint::includes`]).
    pub fn history_inclusion(&self, pulse: u64, size: u64) -> Result<Vec<[u8; 32]>, LedgerError> {
        let l = self.call(move |mut c| {
            Box::pin(async move { c.history_inclusion(Sizes { old: pulse, new: size }).await })
        })?;
        self.hashes(l.values, "an inclusion proof")
    }

    /// The cells `asked` asks as of Pulse `pulse` (the latest for `None`; docs/FLEET-LEDGER.md,
    /// "Cells"): the header, checked to be signed by the ledger's key (and of the Pulse asked),
    /// the cell proof and each asked cell's logs, unchecked against its cells root (a reader
    /// checks them against the question it asked). `None` on a ledger without cells.
    pub fn cells(
        &self,
        asked: &crate::cells::AskedCells,
        pulse: Option<u64>,
    ) -> Result<Option<sion_ledger::link::CellsAnswer>, LedgerError> {
        let q = CellsAsked { asked: asked.encode(), at: pulse };
        let m = self.call(move |mut c| Box::pin(async move { c.cells(q).await }))?;
        let Some(b) = m.value else { return Ok(None) };
        let (header, nodes) = crate::cells::decode_answer(&b)
            .map_err(|e| self.remote(format!("cells that do not parse: {e}")))?;
        header.verify(&self.key).map_err(|e| self.remote(format!("{e}: refused")))?;
        if pulse.is_some_and(|p| p != header.header.number) {
            return Err(self.remote(format!(
                "asked for the cells at Pulse {pulse:?}, it sent Pulse {}",
                header.header.number
            )));
        }
        let (proof, lists) = sion_verify::proof::fleet::range_of_nodes(&nodes);
        Ok(Some((header, proof, lists)))
    }

    fn log_of(&self, bytes: &[u8]) -> Result<MemoryLog, LedgerError> {
        MemoryLog::decode(bytes).map_err(|e| self.remote(format!("a log that does not parse: {e}")))
    }
}

/// The link's own runtime (one worker) and the endpoint of the service at `url`.
fn runtime_and_endpoint(url: &str) -> Result<(LinkRuntime, Endpoint), LedgerError> {
    let remote = |message: String| LedgerError::Remote { ledger: url.to_owned(), message };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("sion-ledger-link")
        .enable_all()
        .build()
        .map_err(|e| remote(format!("starting the link's runtime: {e}")))?;
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| remote(format!("not a URL the link understands (http://host:port): {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(CALL_TIMEOUT);
    Ok((LinkRuntime(Some(runtime)), endpoint))
}

/// Run `fut` on the link's runtime and wait for it, from any thread (inside another runtime
/// included: the future runs on the link's own worker, this thread only waits).
fn run<T: Send + 'static>(runtime: &LinkRuntime, fut: impl Future<Output = T> + Send + 'static) -> Option<T> {
    let runtime = runtime.0.as_ref()?;
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = tx.send(fut.await);
    });
    // The task always sends unless the runtime is shut down (only on drop).
    rx.recv().ok()
}

mod futures_like {
    pub type BoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'static>>;
}

impl LedgerLink for RemoteLedger {
    fn describe(&self) -> String {
        format!("fleet ledger at {}", self.url)
    }

    fn public_key(&self) -> VerifyingKey {
        self.key
    }

    fn latest(&self) -> Result<SignedHeader, LedgerError> {
        let b = self.call(|mut c| Box::pin(async move { c.latest(Empty {}).await }))?;
        self.signed(&b.value)
    }

    fn header(&self, pulse: u64) -> Result<SignedHeader, LedgerError> {
        let b = self.call(move |mut c| Box::pin(async move { c.header(Number { value: pulse }).await }))?;
        let h = self.signed(&b.value)?;
        if h.header.number != pulse {
            return Err(self.remote(format!("asked for Pulse {pulse}, it sent Pulse {}", h.header.number)));
        }
        Ok(h)
    }

    fn nonce(&self, account: &Account) -> Result<u64, LedgerError> {
        let value = account.0.to_vec();
        Ok(self.call(move |mut c| Box::pin(async move { c.nonce(Blob { value }).await }))?.value)
    }

    fn log(&self, id: LogId) -> Result<Option<MemoryLog>, LedgerError> {
        let m = self.call(move |mut c| Box::pin(async move { c.log(Number { value: id.0 }).await }))?;
        m.value.map(|b| self.log_of(&b)).transpose()
    }

    fn log_count(&self) -> Result<u64, LedgerError> {
        Ok(self.call(|mut c| Box::pin(async move { c.log_count(Empty {}).await }))?.value)
    }

    fn agent(&self, name: &str) -> Result<Option<Agent>, LedgerError> {
        let value = name.to_owned();
        let m = self.call(move |mut c| Box::pin(async move { c.agent(Name { value }).await }))?;
        let Some(b) = m.value else { return Ok(None) };
        crate::decode_agent_value(name, &b).map(Some).map_err(|e| self.remote(format!("agent {e}")))
    }

    fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, LedgerError> {
        let value = tx.encode();
        let b = self.call(move |mut c| Box::pin(async move { c.submit(Blob { value }).await }))?;
        self.signed(&b.value)
    }

    fn state_proof(&self, id: LogId, pulse: u64) -> Result<StateProof, LedgerError> {
        let q = LogAt { log: id.0, at: pulse };
        let b = self.call(move |mut c| Box::pin(async move { c.state(q).await }))?;
        let mut r = Reader::new(&b.value);
        let p = self.state(&mut r)?;
        if p.log.id != id || p.header.header.number != pulse {
            return Err(self.remote(format!("asked for log {id} at Pulse {pulse}, it sent another")));
        }
        Ok(p)
    }

    fn tx_time_proof(&self, id: LogId, position: u64) -> Result<TxTimeProof, LedgerError> {
        let q = LogAt { log: id.0, at: position };
        let b = self.call(move |mut c| Box::pin(async move { c.time(q).await }))?;
        let mut r = Reader::new(&b.value);
        let got = r.u64("position").map_err(|e| self.remote(e.to_string()))?;
        let before = self.state(&mut r)?;
        let at = self.state(&mut r)?;
        let p = TxTimeProof { position: got, before, at };
        if got != position || p.at.log.id != id {
            return Err(self.remote(format!(
                "asked when position {position} of log {id} was recorded, it sent another"
            )));
        }
        p.verify(&self.key)
            .map_err(|e| self.remote(format!("a transaction-time proof that does not hold: {e}")))?;
        Ok(p)
    }

    fn last_commit_at_most(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
        let q = LogAt { log: id.0, at: size };
        let m = self.call(move |mut c| Box::pin(async move { c.last_commit_at_most(q).await }))?;
        m.value.map(|b| self.log_of(&b)).transpose()
    }

    fn first_commit_over(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
        let q = LogAt { log: id.0, at: size };
        let m = self.call(move |mut c| Box::pin(async move { c.first_commit_over(q).await }))?;
        m.value.map(|b| self.log_of(&b)).transpose()
    }

    fn versions(&self, id: LogId, from: u64, limit: u64) -> Result<Vec<MemoryLog>, LedgerError> {
        let q = VersionsQuery { log: id.0, from, limit };
        let l = self.call(move |mut c| Box::pin(async move { c.versions(q).await }))?;
        l.values.iter().map(|b| self.log_of(b)).collect()
    }

    fn covering(&self, pulse: u64) -> Result<Option<sion_verify::proof::Covering>, LedgerError> {
        let Some((note, checkpoint)) = self.cosigned_checkpoint(pulse)? else { return Ok(None) };
        let path = self.history_inclusion(pulse, checkpoint.size)?;
        Ok(Some(sion_verify::proof::Covering { note, path }))
    }

    fn cells_asked(
        &self,
        asked: &sion_verify::cells::CellQuery,
        pulse: Option<u64>,
    ) -> Result<Option<sion_ledger::link::CellsAnswer>, LedgerError> {
        self.cells(&crate::cells::AskedCells::Question(Box::new(asked.clone())), pulse)
    }

    fn cell_proof(
        &self,
        key: u128,
        pulse: Option<u64>,
    ) -> Result<Option<sion_ledger::link::CellAnswer>, LedgerError> {
        let Some((header, proof, lists)) = self.cells(&crate::cells::AskedCells::keys(&[key]), pulse)? else {
            return Ok(None);
        };
        let path = proof
            .path_of(key)
            .ok_or_else(|| self.remote("a cell proof that does not open the cell's path"))?;
        let logs = lists.get(&key).cloned().unwrap_or_default();
        // Checked here, so a lying service cannot have a robot build, against itself, a proof
        // that does not hold: the path leads to the header's cells root and shows these logs.
        let root =
            header.header.cells.ok_or_else(|| self.remote("cells under a header without a cells root"))?;
        let shown = path
            .verify(&root, key)
            .map_err(|e| self.remote(format!("a cell proof that does not hold: {e}")))?;
        let holds = match shown {
            sion_verify::cells::Found::Present(d) => {
                !logs.is_empty() && d == sion_verify::cells::logs_digest(&logs)
            }
            sion_verify::cells::Found::Absent => logs.is_empty(),
        };
        if !holds {
            return Err(self.remote(format!("cell {key:032x}'s logs are not the ones its proof shows")));
        }
        Ok(Some((header, path, logs)))
    }

    fn cosignatures(&self, pulse: u64) -> Result<Vec<Cosignature>, LedgerError> {
        let l =
            self.call(move |mut c| Box::pin(async move { c.cosignatures(Number { value: pulse }).await }))?;
        l.values
            .iter()
            .map(|b| {
                let mut r = Reader::new(b);
                let c = Cosignature::read(&mut r).and_then(|c| r.finish().map(|()| c));
                c.map_err(|e| self.remote(format!("a cosignature that does not parse: {e}")))
            })
            .collect()
    }
}
