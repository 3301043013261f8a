//! The memory brain: this package's reference cognet (docs/BRAIN.md). Phases sync → think →
//! act, on the cognet runtime:
//!
//! - **sync** folds the log tail into the index, one function for cold boot (the cursor at the
//!   index's checkpoint) and steady state alike; calling it twice folds nothing the second time;
//! - **think** derives trajectories, coverage and conflicts from what is new;
//! - **act** outputs them and commits the head to the ledger every `commit_period_ms` or every
//!   `commit_every` new atoms, whichever comes first.
//!
//! The brain cannot write the log: the [`MemoryKernel`] commits its outputs and the results of
//! its actions, which come back through the same fold. It does not stop while it has
//! unwitnessed results.

#![forbid(unsafe_code)]

mod derive;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use derive::{DeriveConfig, Deriver};

use sion_cognet::{BoxError, CognetConfig, Loop, Mode, Store, StoreKey, Tick};
use sion_store::index::Index;
use sion_store::ledger::SignedHeader;
use sion_store::log::{Appended, Log};
use sion_store::memory::Memory;
pub use sion_store::memory::{Intake, Readers};
use sion_verify::atom::{Atom, AtomId, AtomParts, BoxMm, Interval, Kind, Payload, Permille};

/// The brain's settings (a JSON file for `sion brain --config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrainConfig {
    pub cognet: CognetConfig,
    /// Commit at least this often while there is something new …
    pub commit_period_ms: u64,
    /// … or as soon as this many new atoms wait, whichever comes first.
    pub commit_every: u64,
    /// Fold at most this many atoms per sync call before checking the wake's signal.
    pub sync_chunk: usize,
    /// Make the index's sealed versions durable at most this often (after a commit): a
    /// cold boot folds at most this much of the log again.
    pub index_checkpoint_ms: u64,
    pub derive: DeriveConfig,
    /// A sealed memory's retention (docs/SEAL.md, "Retention"), applied by the `retain` phase
    /// at most every `retention_check_ms`; nothing is forgotten by a memory without a space.
    pub retention: sion_store::memory::Retention,
    pub retention_check_ms: u64,
}

impl Default for BrainConfig {
    fn default() -> Self {
        Self {
            cognet: CognetConfig { mode: Mode::Continuous { period_ms: 100 }, max_ticks_per_wake: 32 },
            commit_period_ms: 5_000,
            commit_every: 10_000,
            sync_chunk: 1 << 16,
            index_checkpoint_ms: 10_000,
            derive: DeriveConfig::default(),
            retention: sion_store::memory::Retention::default(),
            retention_check_ms: 10_000,
        }
    }
}

/// The subject of the outcome atom each commit leaves in the log.
pub const COMMIT_SUBJECT: &str = "sion:commit";

/// What the brain can ask the kernel to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Commit the head of the log's first `size` atoms, with this index root.
    Commit { size: u64, index_root: [u8; 32] },
}

/// What came of an action (its outcome atom is in the log too).
#[derive(Debug, Clone)]
pub struct ActionResult {
    pub outcome: Atom,
    pub pulse: SignedHeader,
}

/// The kernel of a memory: the only writer of its log. Sensors' atoms (stimuli, through the
/// memory's [`Intake`]), the brain's outputs and the outcomes of its actions all enter the log,
/// and leave it through [`MemoryKernel::session_after`], read-only. The brain holds the kernel
/// and nothing else of the memory, so it has no way to write the log itself.
pub struct MemoryKernel {
    /// Shared with [`Readers`], which take the ledger's word for a head from it; only the
    /// kernel commits.
    memory: Arc<Mutex<Memory>>,
    log: Log,
    store: Store,
    /// The index's writer, until the brain takes it.
    index: Option<Index>,
    /// A sealed memory's space (retention forgets through it).
    space: Option<Arc<sion_store::memory::Space>>,
}

impl MemoryKernel {
    /// The kernel of a memory, and the memory's one write path, for its sensors.
    pub fn new(mut memory: Memory) -> Result<(Self, Intake), BoxError> {
        let store = Store::open(&memory.dir().join("brain"))?;
        let log = memory.log().clone();
        let intake = memory.intake();
        let index = memory.take_index()?;
        let space = memory.space().cloned();
        let kernel = Self { memory: Arc::new(Mutex::new(memory)), log, store, index: Some(index), space };
        Ok((kernel, intake))
    }

    /// A door for readers of the memory, to hand out before the kernel goes to its brain.
    pub fn readers(&self) -> Readers {
        Readers::new(Arc::clone(&self.memory))
    }

    /// The index's writer, for the brain that keeps it.
    fn take_index(&mut self) -> Option<Index> {
        self.index.take()
    }

    /// Forget what `policy` no longer keeps (a sealed memory; nothing otherwise): forget atoms,
    /// durable, then the payloads' segments removed.
    pub fn retain(
        &self,
        policy: &sion_store::memory::Retention,
    ) -> Result<sion_store::memory::Retained, sion_store::memory::SpaceError> {
        match &self.space {
            Some(space) => space.retain(&self.log, policy),
            None => Ok(sion_store::memory::Retained::default()),
        }
    }

    /// The brain's private store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// How many atoms the log holds.
    pub fn log_size(&self) -> u64 {
        self.log.size()
    }

    /// The head the ledger holds for this log.
    pub fn committed(&self) -> sion_store::ledger::Head {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner).committed().head
    }

    fn output_log(&self) -> Log {
        self.log.clone()
    }

    /// Log entries after `cursor` (all of them for `None`), in order, at most `limit`
    /// (records read in order, decoded on every core).
    pub fn session_after(&self, cursor: Option<u64>, limit: usize) -> Result<Vec<(u64, Atom)>, BoxError> {
        use rayon::prelude::*;
        let from = cursor.map_or(0, |c| c + 1);
        let records: Vec<(u64, Vec<u8>)> = self.log.scan_bytes(from).take(limit).collect::<Result<_, _>>()?;
        let atoms = records
            .par_iter()
            .map(|(position, bytes)| {
                Atom::decode(bytes).map(|a| (*position, a)).map_err(|e| sion_store::log::LogError::Corrupt {
                    position: *position,
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(atoms)
    }

    /// Append atoms for the brain; resolves once they are durable.
    pub async fn output(&self, atoms: Vec<Atom>) -> Result<Vec<Appended>, BoxError> {
        let log = self.output_log();
        Ok(tokio::task::spawn_blocking(move || log.append(atoms)).await??)
    }

    /// Carry out an action and commit its outcome to the log.
    pub async fn run(&mut self, action: Action) -> Result<ActionResult, BoxError> {
        match action {
            Action::Commit { size, index_root } => {
                let committed = tokio::task::block_in_place(|| {
                    self.memory
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .commit_at(size, index_root, false)
                })?;
                let h = committed.pulse.header;
                let mut parts = AtomParts::new(
                    Kind::Outcome,
                    "sion",
                    BoxMm::point([0, 0, 0]),
                    Interval { from_ns: h.time_ns.max(0), to_ns: h.time_ns.max(0) + 1 },
                    Permille(1000),
                );
                parts.subject = COMMIT_SUBJECT.into();
                parts.payload = Payload::Text(format!(
                    "committed {} atoms at Pulse {}: root {}, index {}",
                    committed.head.size,
                    h.number,
                    hex::encode(committed.head.root),
                    hex::encode(committed.head.index)
                ));
                let outcome = Atom::new(parts)?;
                self.output(vec![outcome.clone()]).await?;
                Ok(ActionResult { outcome, pulse: committed.pulse })
            }
        }
    }
}

/// The brain's checkpoint: how far its derivations reached. Never load-bearing: without it
/// the brain derives everything again (the log takes the repeats as no-ops), only slower.
pub struct Checkpoint;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointValue {
    /// Every derivation triggered at or before this position is in the log.
    pub derived_through: u64,
    /// The deriver's state after the atom at `derived_through` (base64 of
    /// `Deriver::save`): with it, a restart derives on from there; without it, the deriver
    /// replays the log from its start (its repeats are no-ops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deriver: Option<String>,
}

impl StoreKey for Checkpoint {
    const NAME: &'static str = "checkpoint";
    type Value = CheckpointValue;
}

/// Counters for status lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrainStats {
    pub folded: u64,
    pub derived: u64,
    pub commits: u64,
    /// (Pulse, size) of the last commit.
    pub last_commit: Option<(u64, u64)>,
    /// Commits that failed (the ledger unreachable or refusing); each is tried again later.
    pub commit_failures: u64,
}

/// The memory brain.
pub struct MemoryBrain {
    kernel: MemoryKernel,
    config: BrainConfig,
    /// The index: a projection of the log, on disk, free to lose (it is rebuilt).
    index: Index,
    cursor: Option<u64>,
    last_checkpoint: Instant,
    last_memory_note: Option<Instant>,
    last_retention: Option<Instant>,
    last_brain_checkpoint: Option<Instant>,
    deriver: Deriver,
    /// Atoms folded but not yet thought about.
    fresh: Vec<(u64, Atom)>,
    outbox: Vec<Atom>,
    /// Outputs and outcomes not yet seen coming back through sync.
    unwitnessed: HashSet<AtomId>,
    /// Derivations triggered at or before this position are already in the log.
    derived_through: Option<u64>,
    committed_size: u64,
    /// Atoms past the committed head other than the brain's own commit outcomes.
    news: u64,
    last_commit: Instant,
    /// Set by whoever wants a commit now (a service call); cleared when the brain has committed
    /// everything it had folded at that time.
    commit_now: Arc<AtomicBool>,
    live: LiveSettings,
    stats: BrainStats,
    /// Commits failed in a row, and when to try again: a ledger that cannot be reached (a fleet
    /// ledger's service down) must not stop the brain; the atoms stay recorded, and the first
    /// commit that succeeds takes the whole backlog.
    failing: u32,
    retry_at: Option<Instant>,
}

/// What may change while the brain runs (a node's parameters set with `ros2 param set`): how
/// often it commits and what a sealed memory keeps. Read at every wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    pub commit_period_ms: u64,
    pub commit_every: u64,
    pub retention: sion_store::memory::Retention,
    pub retention_check_ms: u64,
}

/// A handle that changes the brain's [`Live`] settings, taken at its next wake.
#[derive(Clone)]
pub struct LiveSettings(Arc<Mutex<Live>>);

impl LiveSettings {
    /// The settings in force (or about to be, at the next wake).
    pub fn get(&self) -> Live {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Change them: `change` gets the settings in force and edits them.
    pub fn update(&self, change: impl FnOnce(&mut Live)) {
        change(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// A handle that asks the brain to commit at its next wake rather than when its period says.
#[derive(Clone)]
pub struct CommitNow(Arc<AtomicBool>);

impl CommitNow {
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a request is still waiting for the brain.
    pub fn pending(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl MemoryBrain {
    pub fn new(mut kernel: MemoryKernel, config: BrainConfig) -> Self {
        let checkpoint = kernel.store().get::<Checkpoint>();
        let derived_through = checkpoint.as_ref().map(|c| c.derived_through);
        let resumed = checkpoint.as_ref().and_then(|c| {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(c.deriver.as_ref()?).ok()?;
            Deriver::load(config.derive, &bytes).map(|d| (c.derived_through, d))
        });
        let committed_size = kernel.committed().size;
        let index = kernel.take_index().unwrap_or_default();
        // Sync resumes where the index and the deriver both are: the index folds only what it
        // lacks, and the deriver, restored, sees only what it has not seen (without its state
        // it sees the whole log again).
        let (deriver, seen) = match resumed {
            Some((through, deriver)) => (deriver, through + 1),
            None => (Deriver::new(config.derive), 0),
        };
        let resume = seen.min(index.size());
        let live = LiveSettings(Arc::new(Mutex::new(Live {
            commit_period_ms: config.commit_period_ms,
            commit_every: config.commit_every,
            retention: config.retention,
            retention_check_ms: config.retention_check_ms,
        })));
        Self {
            deriver,
            kernel,
            config,
            index,
            cursor: resume.checked_sub(1),
            last_checkpoint: Instant::now(),
            last_memory_note: None,
            last_retention: None,
            last_brain_checkpoint: None,
            fresh: Vec::new(),
            outbox: Vec::new(),
            unwitnessed: HashSet::new(),
            derived_through,
            committed_size,
            news: 0,
            last_commit: Instant::now(),
            commit_now: Arc::default(),
            live,
            stats: BrainStats::default(),
            failing: 0,
            retry_at: None,
        }
    }

    pub fn kernel(&self) -> &MemoryKernel {
        &self.kernel
    }

    pub fn index(&mut self) -> &mut Index {
        &mut self.index
    }

    /// How many atoms the index covers.
    pub fn index_size(&self) -> u64 {
        self.index.size()
    }

    /// The position of the last atom folded.
    pub fn cursor(&self) -> Option<u64> {
        self.cursor
    }

    pub fn stats(&self) -> &BrainStats {
        &self.stats
    }

    /// A handle to change how often the brain commits and what it retains, at its next wake.
    pub fn live(&self) -> LiveSettings {
        self.live.clone()
    }

    /// The live settings into the configuration the wake uses.
    fn take_live(&mut self) {
        let live = self.live.get();
        self.config.commit_period_ms = live.commit_period_ms;
        self.config.commit_every = live.commit_every;
        self.config.retention = live.retention;
        self.config.retention_check_ms = live.retention_check_ms;
    }

    /// A handle to ask for a commit at the next wake.
    pub fn commit_now(&self) -> CommitNow {
        CommitNow(Arc::clone(&self.commit_now))
    }

    /// Whether the brain has caught up: everything in the log folded, nothing unwitnessed,
    /// nothing left to commit.
    pub fn idle(&self) -> bool {
        let size = self.kernel.log_size();
        self.cursor.map_or(0, |c| c + 1) == size
            && self.unwitnessed.is_empty()
            && self.outbox.is_empty()
            && self.fresh.is_empty()
            && !self.commit_due(true)
    }

    /// Fold the log tail into the resident index: the same call on a cold boot (cursor at
    /// the start) and on every tick; calling it again folds nothing. Returns how many atoms.
    pub fn sync(&mut self, signal: &tokio_util::sync::CancellationToken) -> Result<u64, BoxError> {
        self.take_live();
        let mut folded = 0;
        loop {
            let batch = self.kernel.session_after(self.cursor, self.config.sync_chunk)?;
            let Some(&(last, _)) = batch.last() else { return Ok(folded) };
            let from = self.index.size();
            let atoms: Vec<Atom> = batch.iter().filter(|(p, _)| *p >= from).map(|(_, a)| a.clone()).collect();
            self.index.fold_all(&atoms)?;
            for (position, atom) in batch {
                self.unwitnessed.remove(&atom.id());
                let outcome = atom.kind() == Kind::Outcome && atom.parts().subject == COMMIT_SUBJECT;
                if position >= self.committed_size && !outcome {
                    self.news += 1;
                }
                if matches!(atom.kind(), Kind::Pose | Kind::Observation) {
                    self.fresh.push((position, atom));
                }
            }
            self.cursor = Some(last);
            folded += atoms.len() as u64;
            self.stats.folded += atoms.len() as u64;
            if signal.is_cancelled() {
                return Err(Box::new(sion_cognet::Interrupted));
            }
        }
    }

    /// Derive from what is new; outputs wait in the outbox for `act`.
    pub fn think(&mut self) {
        for (position, atom) in std::mem::take(&mut self.fresh) {
            let derived = self.deriver.take(&atom);
            // After a restart, what the checkpoint says is in the log already is not repeated.
            if self.derived_through.is_none_or(|through| position > through) {
                self.stats.derived += derived.len() as u64;
                self.outbox.extend(derived);
            }
        }
    }

    /// Whether a commit is due: someone asked for one and something is folded past the
    /// committed head; or there is news (the outcomes of the brain's own commits are not news,
    /// or every commit would call for another) and the period has passed or enough has piled
    /// up (`any_time`: whenever there is news).
    fn commit_due(&self, any_time: bool) -> bool {
        let requested = self.commit_now.load(Ordering::SeqCst) && self.index.size() > self.committed_size;
        requested
            || self.news > 0
                && (any_time
                    || self.news >= self.config.commit_every
                    || self.last_commit.elapsed() >= Duration::from_millis(self.config.commit_period_ms))
    }

    /// Output the derived atoms and commit the head when it is due.
    pub async fn act(&mut self) -> Result<(), BoxError> {
        if self.index.size() <= self.committed_size {
            // Nothing folded to commit: a request is answered by the head as it is.
            self.commit_now.store(false, Ordering::SeqCst);
        }
        if !self.outbox.is_empty() {
            let atoms = std::mem::take(&mut self.outbox);
            let ids: Vec<AtomId> = atoms.iter().map(Atom::id).collect();
            let got = self.kernel.output(atoms).await?;
            let cursor = self.cursor.map_or(0, |c| c + 1);
            for (id, a) in ids.into_iter().zip(got) {
                // A repeat already folded is witnessed; anything past the cursor is not yet.
                if a.position >= cursor {
                    self.unwitnessed.insert(id);
                }
            }
        }
        if self.commit_due(false) && self.retry_at.is_none_or(|t| Instant::now() >= t) {
            let size = self.index.size();
            let index_root = self.index.root()?;
            let result = match self.kernel.run(Action::Commit { size, index_root }).await {
                Ok(r) => r,
                Err(e) => {
                    self.failing += 1;
                    self.stats.commit_failures += 1;
                    // Back off from 100 ms, doubling, to the commit period (at most 30 s).
                    let cap = Duration::from_millis(self.config.commit_period_ms.clamp(100, 30_000));
                    let wait = (Duration::from_millis(100) * 2u32.saturating_pow(self.failing - 1)).min(cap);
                    self.retry_at = Some(Instant::now() + wait);
                    tracing::warn!(
                        "commit of {size} atoms failed ({e}); they stay recorded here, trying again in {:.1} s",
                        wait.as_secs_f64()
                    );
                    return Ok(());
                }
            };
            if self.failing > 0 {
                tracing::info!(
                    "committed {size} atoms after {} failed attempt(s): the backlog in one commit",
                    self.failing
                );
                self.failing = 0;
                self.retry_at = None;
            }
            if self.last_checkpoint.elapsed() >= Duration::from_millis(self.config.index_checkpoint_ms)
                || self.stats.commits == 0
            {
                self.index.checkpoint()?;
                self.last_checkpoint = Instant::now();
                // What the memory holds, once a minute: a node that lives must stay within its
                // budgets, and this says where its memory went if it does not.
                if self.last_memory_note.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    let m = self.index.memory();
                    let mib = |b: usize| b as f64 / f64::from(1u32 << 20);
                    tracing::info!(
                        "memory at {size} atoms: index {:.1} MiB hot, {:.1} MiB of its records cached, {} map nodes, {:.0} MiB on disk",
                        mib(m.hot),
                        mib(m.cached),
                        m.map_nodes,
                        m.on_disk as f64 / f64::from(1u32 << 20)
                    );
                    self.last_memory_note = Some(Instant::now());
                }
            }
            self.unwitnessed.insert(result.outcome.id());
            self.committed_size = size;
            self.news = 0;
            self.last_commit = Instant::now();
            self.stats.commits += 1;
            self.stats.last_commit = Some((result.pulse.header.number, size));
            self.commit_now.store(false, Ordering::SeqCst);
            if let Some(through) = self.cursor
                && self
                    .last_brain_checkpoint
                    .is_none_or(|t| t.elapsed() >= Duration::from_millis(self.config.index_checkpoint_ms))
            {
                use base64::Engine as _;
                let deriver = base64::engine::general_purpose::STANDARD.encode(self.deriver.save());
                let value = CheckpointValue { derived_through: through, deriver: Some(deriver) };
                self.kernel.store().set::<Checkpoint>(&value).await?;
                self.last_brain_checkpoint = Some(Instant::now());
            }
        }
        Ok(())
    }
}

impl MemoryBrain {
    /// The retention phase: at most every `retention_check_ms`, forget what the memory's
    /// retention no longer keeps (docs/SEAL.md). A failure is logged and tried again at the next
    /// check; it never stops the brain.
    pub fn retain(&mut self) {
        let policy = self.config.retention;
        let none = sion_store::memory::StreamRetention::default();
        if (policy.camera == none && policy.map == none)
            || self
                .last_retention
                .is_some_and(|t| t.elapsed() < Duration::from_millis(self.config.retention_check_ms))
        {
            return;
        }
        self.last_retention = Some(Instant::now());
        match self.kernel.retain(&policy) {
            Ok(r) if r.segments > 0 => tracing::info!(
                "retention forgot {} segment(s) of payloads ({:.1} MB given back); forget atoms at {:?}",
                r.segments,
                r.bytes as f64 / 1e6,
                r.forget_positions
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("retention could not forget what it should ({e}); trying again later"),
        }
    }
}

impl Loop for MemoryBrain {
    /// Stimuli are the atoms the kernel has committed; the brain reads them from the log.
    type Stimulus = u64;

    async fn tick(&mut self, tick: &mut Tick<'_, u64>) -> Result<(), BoxError> {
        tick.phase("sync", async |t: &mut Tick<'_, u64>| self.sync(t.signal())).await?;
        tick.phase("think", async |_: &mut Tick<'_, u64>| {
            self.think();
            Ok(())
        })
        .await?;
        tick.phase("act", async |_: &mut Tick<'_, u64>| self.act().await).await?;
        tick.phase("retain", async |_: &mut Tick<'_, u64>| {
            self.retain();
            Ok(())
        })
        .await?;
        // Results must be seen before the wake can honestly end.
        if self.unwitnessed.is_empty() && self.outbox.is_empty() {
            tick.stop();
        }
        Ok(())
    }
}
