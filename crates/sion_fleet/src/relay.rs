//! One sequencer at a time (docs/FLEET-LEDGER.md, "One sequencer at a time"). The front-ends of
//! a ledger that its operator told of each other (`sion ledger serve --peer ADDR`) elect one of
//! them to make the Pulses, by a key under an etcd lease (`P/seq`, holding the address it
//! advertises); the others hand it what passed their door, in batches signed by the ledger's
//! key, and pass its answers on. Scheduling only: the compare-and-swap on the head still
//! decides every Pulse, so two front-ends that both believe they sequence (while a lease runs
//! out) only race, as front-ends without peers always do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tonic::transport::Channel;

use crate::FleetLedger;
use crate::service::pb::ledger_client::LedgerClient;

/// Seconds the sequencer's lease lasts unless renewed: how long the others take to elect
/// another after it dies without a word (it is renewed every [`LOOK_EVERY`]).
pub const LEASE_TTL_S: i64 = 3;

/// How often a front-end renews its lease, or looks who holds `P/seq`.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// What a forwarded batch's signature is made over begins with this (docs/FLEET-LEDGER.md,
/// "One sequencer at a time"): no header, entry or checkpoint the key signs begins so.
pub const FORWARD_DOMAIN: &[u8] = b"sion-fleet-forward-v1";

/// How far a forwarded batch's time may be from the receiver's clock.
pub const FORWARD_SKEW: Duration = Duration::from_secs(30);

/// The most transactions one forwarded batch holds, and its most bytes of transactions (within
/// the 4 MiB a gRPC message may be).
pub const MAX_FORWARD_TXS: usize = 1024;
pub const MAX_FORWARD_BYTES: usize = 2 << 20;

/// How long a forwarding front-end waits for the sequencer's outcomes before it answers its
/// robots that it is not known whether their transactions were recorded: within a robot's own
/// 15 s wait for its answer.
pub const FORWARD_WAIT: Duration = Duration::from_secs(10);

/// How long a `Submit` waits to be taken into a forwarded batch (both of the front-end's two
/// places in flight held meanwhile) before its front-end makes its Pulse itself: with
/// [`FORWARD_WAIT`], a robot is answered within its 15 s.
pub const PERMIT_WAIT: Duration = Duration::from_secs(3);

/// How long a front-end makes its own Pulses after a forward to a peer failed, whatever
/// `P/seq` says: a sequencer that renews its lease but cannot be reached, or does not answer,
/// holds up one batch, not every one.
pub const SHUN: Duration = Duration::from_secs(10);

/// The longest a peer is passed over, however often it failed.
pub const SHUN_MOST: Duration = Duration::from_secs(300);

/// The most forwarded batches a front-end remembers (those of the last 2 × [`FORWARD_SKEW`]),
/// so that one seen on the wire and sent again is refused.
const MAX_SEEN: usize = 65_536;

/// A lease this front-end holds (or held: until etcd says it ran out), and the stream that
/// renews it (opened again after a failed look).
struct Held {
    id: i64,
    renewal: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
}

/// Who makes the Pulses, as this front-end last looked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not known (no holder, etcd not answering, or a holder this front-end's operator did not
    /// name as a peer): this front-end makes its own Pulses.
    Unknown,
    /// This front-end.
    Me,
    /// The peer at this address.
    Peer(String),
}

/// A front-end's part in electing and reaching the sequencer.
pub struct Relay {
    /// The address this front-end is reached at by its peers (written in `P/seq` when it holds it).
    pub advertise: String,
    /// The peers this front-end's operator named: it forwards to no other address, whatever etcd
    /// holds.
    pub peers: Vec<String>,
    role: RwLock<Role>,
    key: SigningKey,
    clients: std::sync::Mutex<HashMap<String, LedgerClient<Channel>>>,
    /// Forwarded batches in flight to the sequencer: at most two, so one is always waiting for
    /// its next Pulse while the other's is made, and the rest of the queue gathers meanwhile.
    pub(crate) in_flight: tokio::sync::Semaphore,
    /// The lease this front-end holds `P/seq` under (0: none), revoked when it stops serving.
    lease: AtomicI64,
    forwarded: AtomicU64,
    received: AtomicU64,
    /// Peers a forward to failed, and until when they are passed over ([`SHUN`]).
    shunned: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// How long each peer was last passed over for, since it last answered.
    shun_for: std::sync::Mutex<HashMap<String, Duration>>,
    /// When this front-end started (ns since the Unix epoch): batches made before are refused.
    started_ns: u64,
    /// The forwarded batches taken in the last 2 × [`FORWARD_SKEW`]: the BLAKE3 of each
    /// signature, with its time.
    seen: std::sync::Mutex<HashMap<[u8; 32], u64>>,
}

/// The bytes a forwarded batch's signature signs: [`FORWARD_DOMAIN`], the time (u64 ns since
/// the Unix epoch, little-endian), the BLAKE3 of the receiver's advertised address (UTF-8: a
/// batch is for one front-end), and the BLAKE3 of the transactions, each as a u32 length
/// (little-endian) and its bytes.
pub fn forward_message(time_ns: u64, receiver: &str, txs: &[Vec<u8>]) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    for tx in txs {
        h.update(&(tx.len() as u32).to_le_bytes());
        h.update(tx);
    }
    let mut m = Vec::with_capacity(FORWARD_DOMAIN.len() + 72);
    m.extend_from_slice(FORWARD_DOMAIN);
    m.extend_from_slice(&time_ns.to_le_bytes());
    m.extend_from_slice(blake3::hash(receiver.as_bytes()).as_bytes());
    m.extend_from_slice(h.finalize().as_bytes());
    m
}

/// Whether a forwarded batch is the ledger key's and of now: why not, if not.
pub fn check_forwarded(
    key: &VerifyingKey,
    time_ns: u64,
    receiver: &str,
    txs: &[Vec<u8>],
    signature: &[u8],
) -> Result<(), String> {
    let now = crate::now_ns().max(0) as u64;
    let skew = now.abs_diff(time_ns);
    if skew > FORWARD_SKEW.as_nanos() as u64 {
        return Err(format!(
            "the batch's time is {:.1} s from this front-end's clock (at most {} s): replayed, or a clock is wrong",
            skew as f64 / 1e9,
            FORWARD_SKEW.as_secs()
        ));
    }
    check_forward_signature(key, time_ns, receiver, txs, signature)
}

/// Whether a forwarded batch is signed by `key` for `receiver` (strictly, docs/FLEET-LEDGER.md,
/// "One sequencer at a time"), its time aside: the check tests/conformance/fleet/forward.json's
/// vectors are for.
pub fn check_forward_signature(
    key: &VerifyingKey,
    time_ns: u64,
    receiver: &str,
    txs: &[Vec<u8>],
    signature: &[u8],
) -> Result<(), String> {
    let signature = <[u8; 64]>::try_from(signature)
        .map_err(|_| format!("the signature is {} bytes, not 64", signature.len()))?;
    key.verify_strict(&forward_message(time_ns, receiver, txs), &ed25519_dalek::Signature::from_bytes(&signature))
        .map_err(|_| {
            format!(
                "the batch is not signed by this ledger's key for this front-end ({receiver}): only its front-ends \
                 forward, each batch to one"
            )
        })
}

impl Relay {
    /// A front-end reached at `advertise` whose operator named these `peers`; `key` is the
    /// ledger's (forwarded batches are signed with it).
    pub fn new(advertise: String, peers: Vec<String>, key: SigningKey) -> Self {
        Self {
            advertise,
            peers,
            role: RwLock::new(Role::Unknown),
            key,
            clients: std::sync::Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(2),
            lease: AtomicI64::new(0),
            forwarded: AtomicU64::new(0),
            received: AtomicU64::new(0),
            shunned: std::sync::Mutex::new(HashMap::new()),
            shun_for: std::sync::Mutex::new(HashMap::new()),
            started_ns: crate::now_ns().max(0) as u64,
            seen: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Who makes the Pulses, as last looked: a peer a forward to failed within [`SHUN`] is
    /// taken as not known (this front-end makes its own).
    pub fn role(&self) -> Role {
        let role = self.role.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Role::Peer(addr) = &role {
            let shunned = self.shunned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if shunned.get(addr).is_some_and(|until| std::time::Instant::now() < *until) {
                return Role::Unknown;
            }
        }
        role
    }

    /// Whether a forwarded batch with this signature and time was not taken before; it is
    /// remembered from now (a batch seen on the wire and sent again is refused).
    pub(crate) fn first_seen(&self, signature: &[u8], time_ns: u64) -> Result<(), String> {
        let skew = FORWARD_SKEW.as_nanos() as u64;
        let now = crate::now_ns().max(0) as u64;
        // Remembered only since this process started: one timed before then might have been
        // taken by the process before it.
        if time_ns < self.started_ns {
            return Err(
                "the batch was made before this front-end started: sent again, or a clock is wrong".into()
            );
        }
        let id = *blake3::hash(signature).as_bytes();
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains_key(&id) {
            return Err("this batch was taken before: a batch is sent once".into());
        }
        // A batch is taken only within the skew of its time: forgotten once past it.
        if seen.len() >= MAX_SEEN / 2 {
            seen.retain(|_, t| t.saturating_add(skew) >= now);
            if seen.len() >= MAX_SEEN {
                return Err(format!(
                    "over {MAX_SEEN} batches within {} s: ask again shortly",
                    FORWARD_SKEW.as_secs()
                ));
            }
        }
        seen.insert(id, time_ns);
        Ok(())
    }

    fn set_role(&self, role: Role) {
        *self.role.write().unwrap_or_else(std::sync::PoisonError::into_inner) = role;
    }

    /// After a failed forward: make Pulses here for [`SHUN`], doubled each time the same peer
    /// fails again (at most [`SHUN_MOST`]), whatever the looks say.
    pub(crate) fn forget(&self, addr: &str) {
        let mut shunned = self.shunned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        let last = self.shun_for.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(addr).copied();
        let next = last.map_or(SHUN, |d| (d * 2).min(SHUN_MOST));
        self.shun_for
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(addr.to_string(), next);
        shunned.insert(addr.to_string(), now + next);
    }

    /// After a forward that was answered: the peer's next failure is passed over for [`SHUN`]
    /// again.
    pub(crate) fn answered(&self, addr: &str) {
        self.shun_for.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(addr);
    }

    /// Transactions this front-end handed to a sequencer, and took from others.
    pub fn counts(&self) -> (u64, u64) {
        (self.forwarded.load(Ordering::Relaxed), self.received.load(Ordering::Relaxed))
    }

    pub(crate) fn count_forwarded(&self, n: usize) {
        self.forwarded.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_received(&self, n: usize) {
        self.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Sign a batch to forward to `receiver`, as of now: its time and signature.
    pub(crate) fn sign(&self, receiver: &str, txs: &[Vec<u8>]) -> (u64, Vec<u8>) {
        let time_ns = crate::now_ns().max(0) as u64;
        (time_ns, self.key.sign(&forward_message(time_ns, receiver, txs)).to_bytes().to_vec())
    }

    /// The client of a peer (connected when first used).
    pub(crate) fn client(&self, addr: &str) -> Result<LedgerClient<Channel>, String> {
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = clients.get(addr) {
            return Ok(c.clone());
        }
        // A peer whose host went away is noticed by the connection's own pings, not by TCP's
        // minutes-long give-up.
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("peer {addr}: {e}"))?
            .connect_timeout(Duration::from_secs(2))
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(2))
            .keep_alive_while_idle(true)
            .connect_lazy();
        let c = LedgerClient::new(channel);
        clients.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Take part in the election until the task is dropped: hold `P/seq` if no one does, renew
    /// the lease while holding it, and note who holds it every [`LOOK_EVERY`].
    pub(crate) async fn campaign(self: Arc<Self>, ledger: FleetLedger) {
        let mut held: Option<Held> = None;
        let mut client = ledger.client.clone();
        let key = ledger.key_of("seq");
        let mut tick = tokio::time::interval(LOOK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let looked = tokio::time::timeout(LOOK_EVERY * 4, self.look(&mut client, &key, &mut held)).await;
            let role = match &looked {
                Ok(Ok(Some(holder))) if holder == self.advertise.as_bytes() => Role::Me,
                Ok(Ok(Some(holder))) => match std::str::from_utf8(holder) {
                    Ok(h) if self.peers.iter().any(|p| p == h) => Role::Peer(h.to_string()),
                    _ => Role::Unknown,
                },
                _ => Role::Unknown,
            };
            // A look that failed (etcd electing a leader, a member restarting) keeps the lease: it
            // may well still run. Its renewal stream is opened again at the next look, and the
            // lease is let go only when etcd says it ran out.
            if matches!(looked, Ok(Err(_)) | Err(_))
                && let Some(h) = held.as_mut()
            {
                h.renewal = None;
            }
            let before = self.role.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if role != before {
                tracing::info!("the ledger's sequencer is now {role:?} (this front-end: {})", self.advertise);
            }
            self.set_role(role);
        }
    }

    /// One look: renew the lease held, then read `P/seq`; if no one holds it, take it under a
    /// lease (granted now if none is held). Who holds it.
    async fn look(
        &self,
        client: &mut etcd_client::Client,
        key: &str,
        held: &mut Option<Held>,
    ) -> Result<Option<Vec<u8>>, etcd_client::Error> {
        let mut ran_out = false;
        if let Some(h) = held.as_mut() {
            if h.renewal.is_none() {
                match client.lease_keep_alive(h.id).await {
                    Ok(r) => h.renewal = Some(r),
                    // etcd no longer has it ("lease not found"): it ran out while looks failed.
                    Err(etcd_client::Error::LeaseKeepAliveError(_)) => ran_out = true,
                    Err(e) => return Err(e),
                }
            }
            if let Some((keeper, stream)) = h.renewal.as_mut() {
                keeper.keep_alive().await?;
                // Ran out (etcd answers a TTL of 0 for a lease it no longer has): let go.
                ran_out = !matches!(stream.message().await?, Some(r) if r.ttl() > 0);
            }
        }
        if ran_out {
            *held = None;
            self.lease.store(0, Ordering::Relaxed);
        }
        let got = client.get(key, None).await?;
        if let Some(kv) = got.kvs().first() {
            // Another's: a lease held from before is not needed.
            if kv.value() != self.advertise.as_bytes()
                && let Some(h) = held.take()
            {
                self.lease.store(0, Ordering::Relaxed);
                let _ = client.lease_revoke(h.id).await;
            }
            return Ok(Some(kv.value().to_vec()));
        }
        let id = match held {
            Some(h) => h.id,
            None => {
                let id = client.lease_grant(LEASE_TTL_S, None).await?.id();
                let renewal = client.lease_keep_alive(id).await?;
                *held = Some(Held { id, renewal: Some(renewal) });
                self.lease.store(id, Ordering::Relaxed);
                id
            }
        };
        let txn = Txn::new()
            .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(
                key,
                self.advertise.as_bytes(),
                Some(PutOptions::new().with_lease(id)),
            )])
            .or_else(vec![TxnOp::get(key, None)]);
        let resp = client.txn(txn).await?;
        if resp.succeeded() {
            return Ok(Some(self.advertise.as_bytes().to_vec()));
        }
        // Another took it first: this lease is not needed (a new one is granted when the key is
        // free again).
        if let Some(h) = held.take() {
            self.lease.store(0, Ordering::Relaxed);
            let _ = client.lease_revoke(h.id).await;
        }
        Ok(resp.op_responses().into_iter().find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        }))
    }

    /// Give up `P/seq` at once (its lease revoked), when this front-end stops serving: the
    /// others need not wait for the lease to run out.
    pub(crate) async fn resign(&self, ledger: &FleetLedger) {
        let id = self.lease.swap(0, Ordering::Relaxed);
        if id != 0 {
            let mut client = ledger.client.clone();
            let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(id)).await;
        }
    }
}
