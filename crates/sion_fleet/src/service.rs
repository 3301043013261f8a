//! The fleet ledger's network service (docs/LEDGER.md, "The fleet ledger's transport"): gRPC,
//! each message one of docs/LEDGER.md's own encodings as bytes. A front-end keeps no state of
//! its own: any number may serve one etcd cluster at once, and the compare-and-swap of
//! [`FleetLedger::submit`] keeps them from forking the chain.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use sion_ledger::{Account, LedgerError, LogId, SignedHeader, SignedTx, StateProof};
use sion_verify::ledger::Cosignature;
use sion_verify::wire::{Put as _, Reader};
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

use crate::admission::{Door, Policy, Refusal};
use crate::relay::{self, Relay, Role};
use crate::{FleetError, FleetLedger};

/// The generated messages and stubs of proto/ledger.proto.
#[allow(clippy::all, missing_docs, unused_qualifications)]
pub mod pb {
    tonic::include_proto!("sion.ledger.v1");
}

use pb::ledger_server::{Ledger as Rpc, LedgerServer};
use pb::{
    Blob, CellsAsked, Cosigned, Empty, Forwarded, List, LogAt, Maybe, Name, Number, Outcome, Outcomes, Sizes,
    VersionsQuery,
};

/// How often a front-end that forwards brings its state to the head.
const KEEP_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// Where a front-end listens unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The gRPC metadata key a refusal's code travels in ([`LedgerError::code`]).
pub const REFUSAL: &str = "sion-refusal";

/// The gRPC metadata key of a `rate_limited` refusal's wait, in milliseconds.
pub const RETRY_AFTER: &str = "retry-after-ms";

/// How long a read (anything but `Submit` and `Cosign`) may take, waiting for its turn
/// included, before it is answered `DEADLINE_EXCEEDED`.
pub const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// One front-end: a [`FleetLedger`] behind the gRPC service. Submissions are taken one at a time
/// (their snapshot of the state is shared by them). Reads have queues and states of their own
/// ([`FleetLedger::reader`]), each within [`READ_DEADLINE`]: quick ones (the head, a log, a
/// nonce, an agent, a header, an entry, cosignatures) apart from proofs and searches of a log's
/// versions, so a slow read (a state proof of an old Pulse) holds up neither a commit nor the
/// reads a robot makes before one. Run more front-ends for more at once.
pub struct Service {
    seq: Arc<Sequencer>,
    quick: Mutex<FleetLedger>,
    reader: Mutex<FleetLedger>,
    /// The witnesses whose cosignatures this front-end keeps (none unless told).
    witnesses: Vec<[u8; 32]>,
    /// The ledger's operator account (always admitted).
    operator: Account,
    /// The history's checkpoints and proofs, shared with `GET /checkpoint`.
    checkpoints: Checkpoints,
    /// The state the election reads `P/seq` with, while serving with peers.
    campaigner: Option<FleetLedger>,
}

/// A front-end's checkpoints of the ledger's history (docs/FLEET-LEDGER.md, "Checkpoints"),
/// shared by its gRPC calls and its HTTP `GET /checkpoint`: a state of its own, so no commit
/// waits for them, and a new checkpoint at most every `every`, however often it is asked.
#[derive(Clone)]
pub struct Checkpoints {
    held: Arc<Mutex<Held>>,
    every: std::time::Duration,
    key: ed25519_dalek::VerifyingKey,
}

/// A front-end's history state: its ledger, and the last checkpoint asked for (when, and what
/// came of it), served again until the cadence allows another.
struct Held {
    ledger: FleetLedger,
    last: Option<(std::time::Instant, Result<sion_verify::ledger::SignedNote, String>)>,
}

/// The most Pulses one call adds to the history (a ledger's first checkpoint, of a long
/// history, is made over several calls).
const CHECKPOINT_MOST: u64 = 16 * crate::history::HISTORY_STEP;

impl Checkpoints {
    fn new(ledger: FleetLedger) -> Self {
        let key = ledger.public_key();
        Self {
            held: Arc::new(Mutex::new(Held { ledger, last: None })),
            every: std::time::Duration::from_secs(1),
            key,
        }
    }

    /// The latest checkpoint note, extended to the latest Pulse unless one was made within
    /// the cadence.
    pub async fn latest(&self) -> Result<sion_verify::ledger::SignedNote, FleetError> {
        let mut held = self.held.lock().await;
        if let Some((at, last)) = &held.last
            && at.elapsed() < self.every
        {
            return last.clone().map_err(FleetError::History);
        }
        let out = held.ledger.checkpoint(CHECKPOINT_MOST).await.map(|(note, _)| note);
        // A failure is kept too: anonymous readers asking while etcd refuses cost it one
        // attempt a cadence, not one each.
        held.last = Some((std::time::Instant::now(), out.clone().map_err(|e| e.to_string())));
        out
    }

    /// The checkpoint a note of this ledger signs (checked under its key).
    pub fn verify(
        &self,
        note: &sion_verify::ledger::SignedNote,
    ) -> Result<sion_verify::ledger::Checkpoint, FleetError> {
        note.verify_checkpoint(&self.key).map_err(|e| FleetError::History(e.to_string()))
    }

    /// Keep witnesses' cosignature lines with their checkpoint ([`FleetLedger::keep_cosigned`]).
    pub async fn keep_cosigned(
        &self,
        note: &sion_verify::ledger::SignedNote,
        checkpoint: &sion_verify::ledger::Checkpoint,
        lines: Vec<sion_verify::ledger::NoteSignature>,
    ) -> Result<(), FleetError> {
        self.held.lock().await.ledger.keep_cosigned(note, checkpoint, lines).await
    }

    /// The first cosigned checkpoint covering Pulse `pulse`, as kept.
    pub async fn cosigned_covering(
        &self,
        pulse: u64,
    ) -> Result<Option<sion_verify::ledger::SignedNote>, FleetError> {
        self.held.lock().await.ledger.cosigned_covering(pulse).await
    }

    /// The history's consistency proof from `old` Pulses to `new`.
    pub async fn consistency(&self, old: u64, new: u64) -> Result<Vec<[u8; 32]>, FleetError> {
        self.held.lock().await.ledger.history_consistency(old, new).await
    }

    /// The inclusion proof of Pulse `pulse` in the history of `size` Pulses.
    pub async fn inclusion(&self, pulse: u64, size: u64) -> Result<Vec<[u8; 32]>, FleetError> {
        self.held.lock().await.ledger.history_inclusion(pulse, size).await
    }
}

/// What takes `Submit`s into Pulses: the front-end's ledger, the queue of submissions admitted
/// at the door, and the door (its quotas are counted as a Pulse is made).
struct Sequencer {
    ledger: Mutex<FleetLedger>,
    queue: Queue,
    /// `Submit`s queued so far (each one's [`Queued::id`]).
    submits: std::sync::atomic::AtomicU64,
    /// The admission policy and its rate buckets, passed before anything is queued.
    door: Door,
    /// The election and the peers, when the operator named any (`sion ledger serve --peer`).
    relay: Option<Arc<Relay>>,
    /// The ledger's key: a sequencer's answers are checked under it before they are passed on.
    public: ed25519_dalek::VerifyingKey,
}

/// Why a forwarded batch came back without outcomes.
enum NotForwarded {
    /// Nothing of it was recorded (the peer could not be reached, or refused the batch whole):
    /// this front-end makes the Pulses itself.
    Nothing(String),
    /// Not known: the peer may have taken it.
    Unknown(String),
}

impl Sequencer {
    /// Make Pulses of what is queued, in a task of the front-end's own (whoever asked may go
    /// away).
    fn spawn_pulses(self: &Arc<Self>) {
        let seq = self.clone();
        tokio::spawn(async move { seq.make_pulses().await });
    }

    /// `Submit` `id` was not taken into a batch within [`relay::PERMIT_WAIT`]: both places in
    /// flight are held by batches the sequencer has not decided (it is slow, or wedged and not
    /// yet passed over). What is queued is made here, racing it on the compare-and-swap, so the
    /// robot is answered within its 15 s. The queue is taken from its front in order, so the
    /// `Submit` may still be queued only if the front is as old (a look at one item).
    fn unstick(self: &Arc<Self>, id: u64, relay: &Relay) {
        let stuck = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .first()
            .is_some_and(|q| q.id <= id);
        if stuck && matches!(relay.role(), Role::Peer(_)) {
            self.spawn_pulses();
        }
    }

    /// Take whatever is queued (nothing, if another turn took it first) into Pulses, answering
    /// each as its Pulse lands; or, while a peer sequences, hand it to that peer.
    async fn sequence(self: Arc<Self>) {
        if let Some(relay) = self.relay.clone()
            && let Role::Peer(addr) = relay.role()
        {
            return self.forward(&relay, &addr).await;
        }
        self.make_pulses().await;
    }

    /// Hand what is queued to the sequencer at `addr`, answering each as it answers. A task
    /// that finds both places in flight taken leaves what is queued to their holders, which take
    /// it when their batch is answered (before, each `Submit`'s task waited in line for a
    /// place: thousands of them under load, served one a batch). A `Submit` not taken into a
    /// batch within [`relay::PERMIT_WAIT`] is made into a Pulse here (`Service::submit`).
    async fn forward(self: Arc<Self>, relay: &Relay, addr: &str) {
        let Ok(mut permit) = relay.in_flight.try_acquire() else { return };
        loop {
            // The sequencer may have changed, or a forward to it failed meanwhile.
            if relay.role() != Role::Peer(addr.to_string()) {
                drop(permit);
                return Box::pin(self.sequence()).await;
            }
            // A batch another front-end forwarded here is never forwarded again (no loop while
            // the lease moves): with one queued, this front-end makes the Pulses.
            let batch = {
                let mut queue = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if queue.iter().any(|q| q.forwarded) {
                    None
                } else {
                    let (mut take, mut bytes) = (0, 0);
                    for q in queue.iter() {
                        if take == relay::MAX_FORWARD_TXS
                            || (take > 0 && bytes + q.bytes.len() > relay::MAX_FORWARD_BYTES)
                        {
                            break;
                        }
                        bytes += q.bytes.len();
                        take += 1;
                    }
                    Some(queue.drain(..take).collect::<Vec<_>>())
                }
            };
            let Some(batch) = batch else {
                drop(permit);
                return self.make_pulses().await;
            };
            if batch.is_empty() {
                drop(permit);
                // A `Submit` queued while this place was held, and found none free, is taken
                // now: it queued before it looked for a place, this looks after letting it go.
                if self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty() {
                    return;
                }
                match relay.in_flight.try_acquire() {
                    Ok(p) => {
                        permit = p;
                        continue;
                    }
                    Err(_) => return,
                }
            }
            let txs: Vec<Vec<u8>> = batch.iter().map(|q| q.bytes.clone()).collect();
            let n = txs.len();
            let (time_ns, signature) = relay.sign(addr, &txs);
            let call = async {
                let mut client = relay.client(addr).map_err(NotForwarded::Nothing)?;
                client.forward(Forwarded { txs, time_ns, signature }).await.map_err(|s| {
                    // Refused whole (not this ledger's key, a clock apart, a batch seen before, a
                    // front-end without peers or without `Forward`), or never sent (this process's
                    // own connector failed to connect, or HTTP/2 cancelled the call before writing
                    // it — from the error's causes, not a message from the far end): nothing
                    // recorded.
                    if never_sent(&s)
                        || matches!(
                            s.code(),
                            tonic::Code::Unauthenticated
                                | tonic::Code::Unimplemented
                                | tonic::Code::InvalidArgument
                                | tonic::Code::FailedPrecondition
                        )
                    {
                        NotForwarded::Nothing(s.message().to_string())
                    } else {
                        NotForwarded::Unknown(s.message().to_string())
                    }
                })
            };
            let outcome = match tokio::time::timeout(relay::FORWARD_WAIT, call).await {
                Ok(r) => r,
                Err(_) => Err(NotForwarded::Unknown(format!(
                    "no answer within {} s",
                    relay::FORWARD_WAIT.as_secs()
                ))),
            };
            match outcome {
                Ok(resp) if resp.get_ref().values.len() == n => {
                    relay.count_forwarded(n);
                    relay.answered(addr);
                    let mut checked = None;
                    for (q, o) in batch.into_iter().zip(resp.into_inner().values) {
                        let answer = self.answer_of(o, &mut checked);
                        if answer.is_ok() {
                            self.door.recorded(&q.tx.sender);
                        }
                        let _ = q.reply.send(answer);
                    }
                }
                Ok(resp) => {
                    relay.forget(addr);
                    let got = resp.get_ref().values.len();
                    for q in batch {
                        let _ = q.reply.send(Err(Status::unavailable(format!(
                            "the front-end sequencing ({addr}) answered {got} outcomes for {n} transactions: not known \
                             whether this one was recorded; ask the ledger for your log"
                        ))));
                    }
                }
                Err(NotForwarded::Nothing(why)) => {
                    tracing::warn!(
                        "forwarding to {addr} failed ({why}); this front-end makes its own Pulses"
                    );
                    relay.forget(addr);
                    drop(permit);
                    {
                        let mut queue = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        let rest = std::mem::take(&mut *queue);
                        queue.extend(batch);
                        queue.extend(rest);
                    }
                    return self.make_pulses().await;
                }
                Err(NotForwarded::Unknown(why)) => {
                    relay.forget(addr);
                    for q in batch {
                        let _ = q.reply.send(Err(Status::unavailable(format!(
                            "the front-end sequencing ({addr}) did not answer ({why}): not known whether this \
                             transaction was recorded; ask the ledger for your log and nonce"
                        ))));
                    }
                }
            }
        }
    }

    /// A sequencer's outcome as this front-end answers it: a header checked under the ledger's
    /// key (`checked` holds the last one checked: a batch's are mostly one or two Pulses), or
    /// its refusal as the sequencer coded it.
    fn answer_of(&self, o: Outcome, checked: &mut Option<SignedHeader>) -> Answer {
        if let Some(bytes) = o.pulse {
            let mut r = Reader::new(&bytes);
            let header = SignedHeader::read(&mut r).ok().filter(|_| r.finish().is_ok());
            return match header {
                Some(h) if checked.as_ref() == Some(&h) => Ok(h),
                Some(h) if h.verify(&self.public).is_ok() => {
                    *checked = Some(h);
                    Ok(h)
                }
                _ => Err(Status::internal(
                    "the front-end sequencing answered with a header not signed by the ledger's key: not known \
                     whether this transaction was recorded",
                )),
            };
        }
        let code = tonic::Code::from_i32(o.code);
        let code = if code == tonic::Code::Ok { tonic::Code::Internal } else { code };
        let mut s = Status::new(code, o.message);
        if !o.refusal.is_empty() {
            s = coded(s, &o.refusal);
        }
        if o.retry_after_ms > 0 {
            s = with_retry_after(s, o.retry_after_ms);
        }
        Err(s)
    }

    /// While a peer sequences, bring this front-end's state to the head every [`KEEP_UP`]
    /// (when its ledger is not busy), so that if it has to make Pulses — the sequencer gone,
    /// or itself elected — it replays seconds of Pulses, not minutes.
    async fn keep_up(self: Arc<Self>) {
        let Some(relay) = self.relay.clone() else { return };
        let mut tick = tokio::time::interval(KEEP_UP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if matches!(relay.role(), Role::Peer(_))
                && let Ok(mut ledger) = self.ledger.try_lock()
                && let Err(e) = ledger.latest().await
            {
                tracing::warn!("bringing this front-end's state forward while another sequences: {e}");
            }
        }
    }

    /// Take whatever is queued into Pulses made here.
    async fn make_pulses(&self) {
        let mut ledger = self.ledger.lock().await;
        let queued =
            std::mem::take(&mut *self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if queued.is_empty() {
            return;
        }
        let mut txs = Vec::with_capacity(queued.len());
        let mut replies = Vec::with_capacity(queued.len());
        // The log quota needs the state (the front-end's checked snapshot), not a write: counted
        // once a turn, with the openings queued with it.
        let mut counted: HashMap<Account, u64> = HashMap::new();
        for Queued { tx, reply, .. } in queued {
            if self.door.needs_count(&tx) {
                let opened = match counted.get(&tx.sender) {
                    Some(n) => *n,
                    None => match ledger.logs_opened_by(&tx.sender).await {
                        Ok(n) => n,
                        Err(e) => {
                            let _ = reply.send(Err(status(e)));
                            continue;
                        }
                    },
                };
                if let Err(r) = self.door.quota(&tx, opened) {
                    let _ = reply.send(Err(admission(&r)));
                    continue;
                }
                counted.insert(tx.sender, opened + 1);
            }
            replies.push(Some((tx.sender, reply)));
            txs.push(tx);
        }
        // Every signature was checked at the door. A caller that went away does not stop the
        // others' answers.
        ledger
            .submit_each(txs, sion_ledger::state::Signature::Checked, |i, answer| {
                if let Some((sender, reply)) = replies.get_mut(i).and_then(Option::take) {
                    if answer.is_ok() {
                        self.door.recorded(&sender);
                    }
                    let _ = reply.send(answer.map(|r| r.pulse).map_err(status));
                }
            })
            .await;
    }
}

impl Service {
    /// A front-end that admits every account without limit ([`Policy::unlimited`]; `sion
    /// ledger serve` always gives a policy: [`Service::admitting`]).
    pub fn new(ledger: FleetLedger) -> Self {
        let operator = ledger.operator();
        Self {
            checkpoints: Checkpoints::new(ledger.reader()),
            reader: Mutex::new(ledger.reader()),
            quick: Mutex::new(ledger.reader()),
            seq: Arc::new(Sequencer {
                public: ledger.public_key(),
                ledger: Mutex::new(ledger),
                queue: Queue::default(),
                submits: std::sync::atomic::AtomicU64::new(0),
                door: Door::new(Policy::unlimited(), operator),
                relay: None,
            }),
            witnesses: Vec::new(),
            operator,
            campaigner: None,
        }
    }

    /// Take part in electing one front-end of these to make the Pulses (docs/FLEET-LEDGER.md,
    /// "One sequencer at a time"; `sion ledger serve --peer ADDR --advertise ADDR`): this one is
    /// reached at `advertise`, and forwards only to the `peers` named.
    pub fn relaying(mut self, advertise: String, peers: Vec<String>) -> Self {
        // Built before it serves: the sequencer is not shared yet.
        if let Some(seq) = Arc::get_mut(&mut self.seq) {
            let ledger = seq.ledger.get_mut();
            self.campaigner = Some(ledger.reader());
            seq.relay = Some(Arc::new(Relay::new(advertise, peers, ledger.key.clone())));
        }
        self
    }

    /// The election and the peers, if serving with any.
    pub fn relay(&self) -> Option<Arc<Relay>> {
        self.seq.relay.clone()
    }

    /// Admit submissions by this policy (`sion ledger serve --admission FILE`).
    pub fn admitting(mut self, policy: Policy) -> Self {
        // Built before it serves: the sequencer is not shared yet.
        if let Some(seq) = Arc::get_mut(&mut self.seq) {
            seq.door = Door::new(policy, self.operator);
        }
        self
    }

    /// Make a new checkpoint at most this often (`sion ledger serve --checkpoint-every`).
    pub fn checkpointing_every(mut self, every: std::time::Duration) -> Self {
        self.checkpoints.every = every;
        self
    }

    /// The front-end's checkpoints, for its HTTP `GET /checkpoint`.
    pub fn checkpoints(&self) -> Checkpoints {
        self.checkpoints.clone()
    }

    /// Also keep cosignatures by these witnesses (`sion ledger serve --witnesses FILE`).
    pub fn accepting(mut self, witnesses: Vec<[u8; 32]>) -> Self {
        self.witnesses = witnesses;
        self
    }
}

/// Serve `ledger` on `listen` until `shutdown` resolves.
pub async fn serve(
    ledger: FleetLedger,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    serve_service(Service::new(ledger), listen, shutdown).await
}

/// Serve a front-end on `listen` until `shutdown` resolves.
pub async fn serve_service(
    mut service: Service,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    // The election runs while the front-end serves (and stops if this future is dropped, as a
    // killed front-end's would, its lease left to run out); stopping, it gives `P/seq` up at once.
    let campaign = match (service.seq.relay.clone(), service.campaigner.take()) {
        (Some(relay), Some(ledger)) => {
            let task = AbortOnDrop(tokio::spawn(relay.clone().campaign(ledger.reader())));
            let keeping = AbortOnDrop(tokio::spawn(service.seq.clone().keep_up()));
            Some(([task, keeping], relay, ledger))
        }
        _ => None,
    };
    let served = tonic::transport::Server::builder()
        .add_service(LedgerServer::new(service))
        .serve_with_shutdown(listen, shutdown)
        .await
        .map_err(|e| format!("serving on {listen}: {e}"));
    if let Some((tasks, relay, ledger)) = campaign {
        drop(tasks);
        relay.resign(&ledger).await;
    }
    served
}

/// Whether a call failed before anything was sent, decided from the error's own chain of
/// causes, made in this process, never from a message a far end could have written:
/// - this process's connector could not connect (the peer's port refused it, the host or
///   network could not be reached, the connection timed out): an I/O error reached before
///   any HTTP/2 error;
/// - or hyper cancelled the request before writing it. On a client HTTP/2 connection of
///   hyper 1.x (1.12, which tonic 0.14.9 builds on), `Kind::Canceled` is made only for a
///   request still in the connection's queue when the connection closed, or sent to a
///   connection already closed (client/dispatch.rs, `Envelope`'s drop; client/conn/http2.rs,
///   "connection was not ready"); a request taken off the queue fails with an HTTP/2 error,
///   or hyper's "dispatch gone" if the connection ends while h2 holds it for a stream.
///   Any other hyper error is on an established connection, where the request may have been
///   written: not known.
fn never_sent(s: &Status) -> bool {
    for e in causes(s) {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            return h.is_canceled();
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            return matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::TimedOut
                    | K::HostUnreachable
                    | K::NetworkUnreachable
                    | K::AddrNotAvailable
            );
        }
    }
    false
}

/// A status's chain of causes, nearest first.
fn causes(s: &Status) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(s), |e| e.source())
}

/// A task that ends when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn status(e: FleetError) -> Status {
    match e {
        FleetError::Refused(r) => refusal(&r),
        // The service answered: its etcd did not (or sent what it cannot decode). Coded, so a
        // client does not take it for a service that cannot be reached.
        FleetError::Etcd { .. } => coded(Status::unavailable(e.to_string()), "etcd"),
        FleetError::Admission(r) => admission(&r),
        FleetError::Contention(_) => Status::resource_exhausted(e.to_string()),
        FleetError::Cosignature(_) => coded(Status::failed_precondition(e.to_string()), "cosignature"),
        FleetError::Archive(_) => coded(Status::failed_precondition(e.to_string()), "archived"),
        FleetError::History(_) => coded(Status::out_of_range(e.to_string()), "history"),
        FleetError::TooLarge(_) => coded(Status::out_of_range(e.to_string()), "too_large"),
        // Not the sender's fault and not a rule: the ledger will not sign on what etcd holds.
        FleetError::StateMismatch { .. } => coded(Status::data_loss(e.to_string()), "state_mismatch"),
        other => Status::internal(other.to_string()),
    }
}

fn admission(r: &Refusal) -> Status {
    let s = match r {
        Refusal::NotAdmitted { .. } => Status::permission_denied(r.to_string()),
        Refusal::Quota { .. } | Refusal::RateLimited { .. } => Status::resource_exhausted(r.to_string()),
    };
    let s = coded(s, r.code());
    match r {
        Refusal::RateLimited { retry_after, .. } => {
            with_retry_after(s, u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX).max(1))
        }
        _ => s,
    }
}

/// A `rate_limited` refusal's wait, in its metadata ([`RETRY_AFTER`]).
fn with_retry_after(mut s: Status, ms: u64) -> Status {
    if let Ok(v) = ms.to_string().parse() {
        s.metadata_mut().insert(RETRY_AFTER, v);
    }
    s
}

/// A submission's answer lost with the queue's task.
fn dropped() -> Status {
    Status::internal("the submission was dropped from the front-end's queue")
}

/// A signed header as `Submit` answers it (the header, then its signature).
fn header_bytes(h: &SignedHeader) -> Vec<u8> {
    let mut out = Vec::with_capacity(185);
    h.put(&mut out);
    out
}

fn refusal(r: &LedgerError) -> Status {
    coded(Status::failed_precondition(r.to_string()), r.code())
}

fn coded(mut s: Status, code: &str) -> Status {
    if let Ok(code) = code.parse() {
        s.metadata_mut().insert(REFUSAL, code);
    }
    s
}

/// A read, its wait for its turn included, within [`READ_DEADLINE`].
async fn deadline<T>(read: impl Future<Output = Result<T, Status>>) -> Result<T, Status> {
    tokio::time::timeout(READ_DEADLINE, read).await.unwrap_or_else(|_| {
        Err(Status::deadline_exceeded(format!(
            "the read took over {} s at this front-end (reads queue apart from commits): ask again, or \
             another front-end",
            READ_DEADLINE.as_secs()
        )))
    })
}

fn bad(field: &str, e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {e}"))
}

/// What a `Submit` is answered: its Pulse's signed header, or why not.
type Answer = Result<SignedHeader, Status>;

/// A submission waiting for the next Pulse: the transaction (and its bytes, to forward), where
/// its answer goes, and whether another front-end forwarded it here.
struct Queued {
    /// This front-end's number for a `Submit` (0 for a forwarded transaction): whether it is
    /// still queued.
    id: u64,
    tx: SignedTx,
    bytes: Vec<u8>,
    reply: tokio::sync::oneshot::Sender<Answer>,
    forwarded: bool,
}

/// Submissions waiting for the next Pulse.
type Queue = std::sync::Mutex<Vec<Queued>>;

/// A `Submit`'s answer as a forwarded batch's outcome.
fn outcome(answer: Answer) -> Outcome {
    match answer {
        Ok(h) => Outcome { pulse: Some(header_bytes(&h)), ..Outcome::default() },
        Err(s) => Outcome {
            pulse: None,
            code: s.code() as i32,
            message: s.message().to_string(),
            refusal: s.metadata().get(REFUSAL).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string(),
            retry_after_ms: s
                .metadata()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        },
    }
}

fn state_bytes(p: &StateProof) -> Vec<u8> {
    let mut out = Vec::new();
    p.put(&mut out);
    out
}

#[tonic::async_trait]
impl Rpc for Service {
    async fn key(&self, _: Request<Empty>) -> Result<Response<Blob>, Status> {
        let key = self.quick.lock().await.public_key();
        Ok(Response::new(Blob { value: key.to_bytes().to_vec() }))
    }

    async fn submit(&self, r: Request<Blob>) -> Result<Response<Blob>, Status> {
        let bytes = r.into_inner().value;
        let tx = SignedTx::decode(&bytes).map_err(|e| bad("transaction", e))?;
        // The door, before the ledger is locked or etcd asked anything: the signature (so no one
        // spends another account's rate), then the policy and the rates, from memory.
        if !self.seq.door.signature_holds(&tx) {
            return Err(refusal(&LedgerError::BadSignature));
        }
        self.seq.door.admit(&tx).map_err(|r| admission(&r))?;
        // Group commit: queued, then a sequencing task takes everything queued into as few
        // Pulses as etcd's limits allow (docs/FLEET-LEDGER.md, "Many transactions, one Pulse").
        // The task is not this call's: a caller that goes away cancels nobody else's answer.
        let (reply, mut answer) = tokio::sync::oneshot::channel();
        let id = self.seq.submits.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.seq.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Queued {
            id,
            tx,
            bytes,
            reply,
            forwarded: false,
        });
        tokio::spawn(self.seq.clone().sequence());
        let got = match &self.seq.relay {
            None => answer.await,
            Some(relay) => match tokio::time::timeout(relay::PERMIT_WAIT, &mut answer).await {
                Ok(got) => got,
                Err(_) => {
                    self.seq.unstick(id, relay);
                    answer.await
                }
            },
        };
        match got {
            Ok(answer) => answer.map(|h| Response::new(Blob { value: header_bytes(&h) })),
            Err(_) => Err(dropped()),
        }
    }

    async fn forward(&self, r: Request<Forwarded>) -> Result<Response<Outcomes>, Status> {
        let Some(relay) = &self.seq.relay else {
            return Err(Status::failed_precondition(
                "this front-end takes no forwarded batches: it was not told of peers (sion ledger serve --peer)",
            ));
        };
        let q = r.into_inner();
        let bytes: usize = q.txs.iter().map(Vec::len).sum();
        if q.txs.len() > relay::MAX_FORWARD_TXS || bytes > relay::MAX_FORWARD_BYTES {
            return Err(bad(
                "txs",
                format!(
                    "{} transactions of {bytes} bytes: a batch holds at most {} and {} bytes",
                    q.txs.len(),
                    relay::MAX_FORWARD_TXS,
                    relay::MAX_FORWARD_BYTES
                ),
            ));
        }
        // Only the ledger's front-ends hold its key. What they forward passed their door (each
        // robot's signature and rate): not checked twice. Each batch is for one front-end, and
        // taken once.
        relay::check_forwarded(&self.seq.public, q.time_ns, &relay.advertise, &q.txs, &q.signature)
            .and_then(|()| relay.first_seen(&q.signature, q.time_ns))
            .map_err(|e| Status::unauthenticated(format!("forwarded batch: {e}")))?;
        let n = q.txs.len();
        let mut answers = Vec::with_capacity(n);
        {
            let mut queue = self.seq.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for bytes in q.txs {
                let (reply, answer) = tokio::sync::oneshot::channel();
                match SignedTx::decode(&bytes) {
                    Ok(tx) => queue.push(Queued { id: 0, tx, bytes: Vec::new(), reply, forwarded: true }),
                    Err(e) => {
                        let _ = reply.send(Err(bad("transaction", e)));
                    }
                }
                answers.push(answer);
            }
        }
        relay.count_received(n);
        // Made here whatever this front-end believes of the election (a forwarded transaction
        // is never forwarded again): not left to wait for a place in flight.
        self.seq.spawn_pulses();
        let mut values = Vec::with_capacity(n);
        for answer in answers {
            values.push(outcome(answer.await.unwrap_or_else(|_| Err(dropped()))));
        }
        Ok(Response::new(Outcomes { values }))
    }

    async fn latest(&self, _: Request<Empty>) -> Result<Response<Blob>, Status> {
        deadline(async {
            let h = self.quick.lock().await.latest().await.map_err(status)?;
            let mut out = Vec::new();
            h.put(&mut out);
            Ok(Response::new(Blob { value: out }))
        })
        .await
    }

    async fn header(&self, r: Request<Number>) -> Result<Response<Blob>, Status> {
        let n = r.into_inner().value;
        deadline(async {
            let mut ledger = self.quick.lock().await;
            // A Pulse past the latest is not there yet; asking etcd for it would say "damaged".
            if n > ledger.latest().await.map_err(status)?.header.number {
                return Err(refusal(&LedgerError::NoPulse(n)));
            }
            let h = ledger.header(n).await.map_err(status)?;
            let mut out = Vec::new();
            h.put(&mut out);
            Ok(Response::new(Blob { value: out }))
        })
        .await
    }

    async fn log(&self, r: Request<Number>) -> Result<Response<Maybe>, Status> {
        let id = LogId(r.into_inner().value);
        deadline(async {
            let log = self.quick.lock().await.log(id).await.map_err(status)?;
            Ok(Response::new(Maybe { value: log.map(|l| l.encode()) }))
        })
        .await
    }

    async fn log_count(&self, _: Request<Empty>) -> Result<Response<Number>, Status> {
        deadline(async {
            let n = self.quick.lock().await.log_count().await.map_err(status)?;
            Ok(Response::new(Number { value: n }))
        })
        .await
    }

    async fn nonce(&self, r: Request<Blob>) -> Result<Response<Number>, Status> {
        let account: [u8; 32] =
            r.into_inner().value.as_slice().try_into().map_err(|_| bad("account", "not 32 bytes"))?;
        deadline(async {
            let n = self.quick.lock().await.nonce(&Account(account)).await.map_err(status)?;
            Ok(Response::new(Number { value: n }))
        })
        .await
    }

    async fn agent(&self, r: Request<Name>) -> Result<Response<Maybe>, Status> {
        let name = r.into_inner().value;
        deadline(async {
            let agent = self.quick.lock().await.agent(&name).await.map_err(status)?;
            // As in etcd: 32-byte controller, u8 status (0 live, 1 suspended, 2 revoked).
            let value = agent.as_ref().map(crate::agent_value);
            Ok(Response::new(Maybe { value }))
        })
        .await
    }

    async fn state(&self, r: Request<LogAt>) -> Result<Response<Blob>, Status> {
        let q = r.into_inner();
        deadline(async {
            let mut ledger = self.reader.lock().await;
            if q.at > ledger.latest().await.map_err(status)?.header.number {
                return Err(refusal(&LedgerError::NoPulse(q.at)));
            }
            let p = ledger.state_proof(LogId(q.log), q.at).await.map_err(status)?;
            Ok(Response::new(Blob { value: state_bytes(&p) }))
        })
        .await
    }

    async fn time(&self, r: Request<LogAt>) -> Result<Response<Blob>, Status> {
        let q = r.into_inner();
        deadline(async {
            let p = self.reader.lock().await.tx_time_proof(LogId(q.log), q.at).await.map_err(status)?;
            let mut out = Vec::new();
            out.put_u64(p.position);
            p.before.put(&mut out);
            p.at.put(&mut out);
            Ok(Response::new(Blob { value: out }))
        })
        .await
    }

    async fn last_commit_at_most(&self, r: Request<LogAt>) -> Result<Response<Maybe>, Status> {
        let q = r.into_inner();
        deadline(async {
            let v = self.reader.lock().await.last_commit_at_most(LogId(q.log), q.at).await.map_err(status)?;
            Ok(Response::new(Maybe { value: v.map(|v| v.encode()) }))
        })
        .await
    }

    async fn first_commit_over(&self, r: Request<LogAt>) -> Result<Response<Maybe>, Status> {
        let q = r.into_inner();
        deadline(async {
            let v = self.reader.lock().await.first_commit_over(LogId(q.log), q.at).await.map_err(status)?;
            Ok(Response::new(Maybe { value: v.map(|v| v.encode()) }))
        })
        .await
    }

    async fn versions(&self, r: Request<VersionsQuery>) -> Result<Response<List>, Status> {
        let q = r.into_inner();
        deadline(async {
            let vs =
                self.reader.lock().await.versions(LogId(q.log), q.from, q.limit).await.map_err(status)?;
            Ok(Response::new(List { values: vs.iter().map(|v| v.encode()).collect() }))
        })
        .await
    }

    async fn cosign(&self, r: Request<Cosigned>) -> Result<Response<Empty>, Status> {
        let q = r.into_inner();
        let mut reader = Reader::new(&q.cosignature);
        let c = Cosignature::read(&mut reader).map_err(|e| bad("cosignature", e))?;
        reader.finish().map_err(|e| bad("cosignature", e))?;
        if !self.witnesses.contains(&c.witness) {
            return Err(status(FleetError::Cosignature(format!(
                "witness {} is not one this front-end accepts (sion ledger serve --witnesses FILE)",
                hex::encode(c.witness)
            ))));
        }
        self.seq.ledger.lock().await.add_cosignature(q.number, c).await.map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    async fn entry(&self, r: Request<Number>) -> Result<Response<Blob>, Status> {
        let n = r.into_inner().value;
        deadline(async {
            let mut ledger = self.quick.lock().await;
            // Past the latest (checked, as every read of the state is): not there yet.
            if n > ledger.latest().await.map_err(status)?.header.number {
                return Err(refusal(&LedgerError::NoPulse(n)));
            }
            let value = ledger.entry(n).await.map_err(status)?;
            Ok(Response::new(Blob { value }))
        })
        .await
    }

    async fn cosignatures(&self, r: Request<Number>) -> Result<Response<List>, Status> {
        let n = r.into_inner().value;
        deadline(async {
            let cs = self.quick.lock().await.cosignatures(n).await.map_err(status)?;
            let values = cs
                .iter()
                .map(|c| {
                    let mut out = Vec::with_capacity(96);
                    c.put(&mut out);
                    out
                })
                .collect();
            Ok(Response::new(List { values }))
        })
        .await
    }

    async fn checkpoint(&self, _: Request<Empty>) -> Result<Response<Blob>, Status> {
        deadline(async {
            let note = self.checkpoints.latest().await.map_err(status)?;
            Ok(Response::new(Blob { value: note.encode().into_bytes() }))
        })
        .await
    }

    async fn history_consistency(&self, r: Request<Sizes>) -> Result<Response<List>, Status> {
        let q = r.into_inner();
        deadline(async {
            let proof = self.checkpoints.consistency(q.old, q.new).await.map_err(status)?;
            Ok(Response::new(List { values: proof.iter().map(|h| h.to_vec()).collect() }))
        })
        .await
    }

    async fn cosigned_checkpoint(&self, r: Request<Number>) -> Result<Response<Maybe>, Status> {
        let pulse = r.into_inner().value;
        deadline(async {
            let note = self.checkpoints.cosigned_covering(pulse).await.map_err(status)?;
            Ok(Response::new(Maybe { value: note.map(|n| n.encode().into_bytes()) }))
        })
        .await
    }

    async fn cells(&self, r: Request<CellsAsked>) -> Result<Response<Maybe>, Status> {
        let q = r.into_inner();
        let asked = crate::cells::AskedCells::decode(&q.asked).map_err(|e| bad("asked", e))?;
        deadline(async {
            let got = self.reader.lock().await.cells_asked(&asked, q.at).await.map_err(status)?;
            let value = match got {
                None => None,
                Some((header, proof, lists)) => {
                    let nodes = sion_verify::proof::fleet::cell_nodes(&proof, &lists);
                    let bytes = crate::cells::encode_answer(&header, &nodes);
                    // Bounded as a reader bounds what it decodes: a box over more cells is asked
                    // in parts.
                    if bytes.len() > crate::cells::MAX_ANSWER_BYTES {
                        return Err(status(FleetError::TooLarge(format!(
                            "the cells asked take {} bytes, over {}: ask about a smaller box, or fewer cells",
                            bytes.len(),
                            crate::cells::MAX_ANSWER_BYTES
                        ))));
                    }
                    Some(bytes)
                }
            };
            Ok(Response::new(Maybe { value }))
        })
        .await
    }

    async fn history_inclusion(&self, r: Request<Sizes>) -> Result<Response<List>, Status> {
        let q = r.into_inner();
        deadline(async {
            let proof = self.checkpoints.inclusion(q.old, q.new).await.map_err(status)?;
            Ok(Response::new(List { values: proof.iter().map(|h| h.to_vec()).collect() }))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::time::Duration;

    use super::pb::Forwarded;
    use super::pb::ledger_client::LedgerClient;
    use super::{causes, never_sent};
    use tonic::transport::Channel;

    fn client(port: u16) -> LedgerClient<Channel> {
        let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("an address")
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        LedgerClient::new(channel)
    }

    fn forwarded(marker: &[u8]) -> Forwarded {
        Forwarded { txs: vec![marker.to_vec()], time_ns: 0, signature: vec![0; 64] }
    }

    /// A port nothing listens on: the connector fails, nothing was sent.
    #[tokio::test]
    async fn a_refused_connection_sent_nothing() {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
        let s = client(port).forward(forwarded(b"x")).await.expect_err("nothing listens");
        assert!(never_sent(&s), "{s:?}");
    }

    /// A far end that reads the request and then closes the connection without an answer:
    /// the request was written, so whether it was recorded is not known — never "not sent",
    /// whatever hyper makes of the close.
    #[tokio::test]
    async fn a_request_written_then_cut_off_is_not_known() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("addr").port();
        let marker = b"the-transaction-that-was-written-".repeat(8);
        let needle = marker.clone();
        let far_end = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("a connection");
            // A test that fails, not one that hangs, if the request never comes.
            conn.set_read_timeout(Some(Duration::from_secs(20))).expect("a timeout");
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(needle.len()).any(|w| w == needle.as_slice()) {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            true // dropped: closed, nothing answered
        });
        let s = tokio::time::timeout(Duration::from_secs(30), client(port).forward(forwarded(&marker)))
            .await
            .expect("an answer within 30 s")
            .expect_err("the far end closed");
        assert!(far_end.join().expect("the far end"), "the request reached the far end");
        assert!(!never_sent(&s), "{s:?}");
        // `never_sent` reads hyper's errors by downcasting to the hyper this crate names: it must
        // be the one tonic builds on (were they two versions, the downcast would never match).
        let hyper_seen = causes(&s).any(|e| e.downcast_ref::<hyper::Error>().is_some());
        assert!(hyper_seen, "tonic's error carries a hyper::Error of the hyper this crate uses: {s:?}");
    }

    /// A far end that opens one stream at a time (SETTINGS_MAX_CONCURRENT_STREAMS 1), holds the
    /// first without an answer and then closes the connection. The second request waits in h2
    /// for a stream; the third waits in hyper's queue, never written, and hyper cancels it when
    /// the connection closes: not sent. The first was written: not known.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_cancelled_in_the_queue_was_not_sent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("addr").port();
        let (first_in, first_seen) = tokio::sync::oneshot::channel();
        let (close, closing) = tokio::sync::oneshot::channel::<()>();
        let far_end = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("a connection");
            let mut conn = h2::server::Builder::new()
                .max_concurrent_streams(1)
                .handshake::<_, &'static [u8]>(socket)
                .await
                .expect("an HTTP/2 handshake");
            let held = conn.accept().await;
            // The client has taken the limit of one stream once it answers a ping sent after
            // it (it reads frames in order): only then may the others be made.
            let mut ping = conn.ping_pong().expect("pings");
            tokio::select! {
                pong = ping.ping(h2::Ping::opaque()) => { pong.expect("the client answers a ping"); }
                _ = async { while conn.accept().await.is_some() {} } => {}
            }
            let _ = first_in.send(());
            // The connection kept going (its settings and pings answered) until told to close.
            tokio::select! {
                _ = closing => {}
                _ = async { while conn.accept().await.is_some() {} } => {}
            }
            // Nothing is polled after this: the held stream's end is never written, and the
            // connection closes.
            drop(conn);
            drop(held);
        });
        let c = client(port);
        let call = |marker: &'static [u8]| {
            let mut c = c.clone();
            tokio::spawn(async move { c.forward(forwarded(marker)).await })
        };
        let first = call(b"first");
        tokio::time::timeout(Duration::from_secs(20), first_seen)
            .await
            .expect("the first stream within 20 s")
            .expect("the far end took it");
        // Each call given time (on a loaded machine too) to reach its place in the queue.
        let second = call(b"second");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let third = call(b"third");
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let _ = close.send(());
        tokio::time::timeout(Duration::from_secs(20), far_end)
            .await
            .expect("the far end ends within 20 s")
            .expect("the far end");
        let outcome = |call: tokio::task::JoinHandle<Result<tonic::Response<_>, tonic::Status>>| async move {
            tokio::time::timeout(Duration::from_secs(20), call)
                .await
                .expect("an answer within 20 s")
                .expect("the call")
                .expect_err("the far end closed")
        };
        let (first, _second, third) = (outcome(first).await, outcome(second).await, outcome(third).await);
        assert!(!never_sent(&first), "{first:?}");
        let cancelled =
            causes(&third).any(|e| e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_canceled));
        assert!(cancelled, "hyper cancelled the queued request: {third:?}");
        assert!(never_sent(&third), "{third:?}");
    }
}
