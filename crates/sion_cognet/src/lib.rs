//! The cognet runtime (seeds: "The Loop", "Memory"): a brain declares exactly one loop; the
//! runtime wakes it — when a stimulus arrives (invocation) or on a clock (continuous), through
//! one wake machinery — and runs the loop body tick after tick until the body calls `stop()`.
//! Ticks, phases and systems are the only writers of the world clock, and each brackets its
//! work with telemetry. Resident state is whatever the loop body holds: it survives between
//! wakes and is free to lose.

#![forbid(unsafe_code)]

pub mod store;
pub mod telemetry;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use store::{Store, StoreError, StoreKey};
pub use telemetry::{Event, Outcome, Scope, Telemetry};

/// Errors a loop body, phase, system or plugin may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where the brain is in its thinking: written by ticks, phases and systems only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorldClock {
    /// Wakes so far.
    pub wake: u64,
    /// Ticks so far, over all wakes.
    pub tick: u64,
    pub phase: Option<String>,
    pub system: Option<String>,
}

/// How a cognet is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mode {
    /// Wake when a stimulus arrives.
    Invocation,
    /// Wake on a clock, every `period_ms`, whether or not anything arrived.
    Continuous { period_ms: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CognetConfig {
    pub mode: Mode,
    /// A wake that has not stopped after this many ticks is a bug, not progress.
    pub max_ticks_per_wake: u64,
}

impl Default for CognetConfig {
    fn default() -> Self {
        Self { mode: Mode::Invocation, max_ticks_per_wake: 32 }
    }
}

/// The loop body: one iteration is one tick.
#[allow(async_fn_in_trait)]
pub trait Loop {
    type Stimulus;
    async fn tick(&mut self, tick: &mut Tick<'_, Self::Stimulus>) -> Result<(), BoxError>;
}

/// A lifecycle hook's future.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + 'a>>;

/// Lifecycle hooks, registered before load and awaited to completion in registration order.
pub trait Plugin {
    /// Once, after load.
    fn boot(&mut self) -> HookFuture<'_> {
        Box::pin(async { Ok(()) })
    }
    /// Each wake, before its first tick.
    fn wake(&mut self, _wake: u64) -> HookFuture<'_> {
        Box::pin(async { Ok(()) })
    }
    /// Each tick, before the loop body: keep it cheap.
    fn tick(&mut self, _tick: u64) -> HookFuture<'_> {
        Box::pin(async { Ok(()) })
    }
    /// Once, at unload.
    fn shutdown(&mut self) -> HookFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("a cognet declares exactly one loop; this one declares none")]
    NoLoop,
    #[error("a cognet declares exactly one loop; this one declares {0}")]
    TooManyLoops(usize),
    #[error("a boot hook failed: {0}")]
    Boot(BoxError),
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WakeError {
    #[error("the wake failed: {0}")]
    Failed(BoxError),
    #[error("the wake was interrupted")]
    Interrupted,
    #[error("runaway wake: {0} ticks without stop()")]
    Runaway(u64),
    #[error("a {hook} hook failed: {source}")]
    Hook { hook: &'static str, source: BoxError },
}

/// What one tick of the loop body is given.
pub struct Tick<'a, S> {
    stimuli: &'a [S],
    signal: &'a CancellationToken,
    stopped: &'a mut bool,
    clock: &'a mut WorldClock,
    telemetry: &'a Telemetry,
}

/// The work of a phase or system was cut short because the wake was aborted.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("interrupted: the wake was aborted")]
pub struct Interrupted;

impl<'a, S> Tick<'a, S> {
    /// The entries that arrived since the last wake (an empty diff is the ordinary case).
    pub fn stimuli(&self) -> &[S] {
        self.stimuli
    }

    /// The wake's abort leash: forward it to every long operation.
    pub fn signal(&self) -> &CancellationToken {
        self.signal
    }

    /// End the wake after this tick completes.
    pub fn stop(&mut self) {
        *self.stopped = true;
    }

    pub fn clock(&self) -> &WorldClock {
        self.clock
    }

    /// Await `work` unless the wake is aborted first.
    pub async fn cancellable<T>(&self, work: impl Future<Output = T>) -> Result<T, Interrupted> {
        tokio::select! {
            biased;
            _ = self.signal.cancelled() => Err(Interrupted),
            value = work => Ok(value),
        }
    }

    fn close(&self, scope: Scope, result: Result<(), &BoxError>) {
        let (outcome, error) = match result {
            Ok(()) => (Outcome::Complete, None),
            Err(_) if self.signal.is_cancelled() => (Outcome::Interrupted, None),
            Err(e) => (Outcome::Failed, Some(e.to_string())),
        };
        self.telemetry.emit(scope, outcome, self.clock, error, None);
    }

    /// A named stage of the tick: sets the clock's phase for its duration, brackets it with
    /// telemetry, and returns what `work` returns. Failures propagate (reported `failed`, or
    /// `interrupted` when the wake was aborted).
    pub async fn phase<T>(
        &mut self,
        name: &str,
        work: impl AsyncFnOnce(&mut Self) -> Result<T, BoxError>,
    ) -> Result<T, BoxError> {
        self.scoped(Scope::Phase, |c| &mut c.phase, name, work).await
    }

    /// A unit of work inside a phase, timed and stamped with the tick and phase.
    pub async fn system<T>(
        &mut self,
        name: &str,
        work: impl AsyncFnOnce(&mut Self) -> Result<T, BoxError>,
    ) -> Result<T, BoxError> {
        self.scoped(Scope::System, |c| &mut c.system, name, work).await
    }

    /// Run `work` with the clock's `slot` naming it, bracketed by telemetry of `scope`.
    async fn scoped<T>(
        &mut self,
        scope: Scope,
        slot: fn(&mut WorldClock) -> &mut Option<String>,
        name: &str,
        work: impl AsyncFnOnce(&mut Self) -> Result<T, BoxError>,
    ) -> Result<T, BoxError> {
        let outer = slot(self.clock).replace(name.to_owned());
        self.telemetry.emit(scope, Outcome::Start, self.clock, None, None);
        let result = work(self).await;
        self.close(scope, result.as_ref().map(|_| ()));
        *slot(self.clock) = outer;
        result
    }
}

/// A cognet before load: its loop, its plugins and its configuration.
pub struct Definition<L: Loop> {
    config: CognetConfig,
    telemetry: Telemetry,
    plugins: Vec<Box<dyn Plugin>>,
    body: Option<L>,
    loops: usize,
}

impl<L: Loop> Definition<L> {
    pub fn new(config: CognetConfig, telemetry: Telemetry) -> Self {
        Self { config, telemetry, plugins: Vec::new(), body: None, loops: 0 }
    }

    /// Register a plugin; its hooks run in registration order.
    pub fn plugin(&mut self, plugin: impl Plugin + 'static) -> &mut Self {
        self.plugins.push(Box::new(plugin));
        self
    }

    /// Declare the loop. A second declaration makes `load` fail.
    pub fn declare_loop(&mut self, body: L) -> &mut Self {
        self.loops += 1;
        if self.body.is_none() {
            self.body = Some(body);
        }
        self
    }

    /// Check the declaration and run the boot hooks.
    pub async fn load(self) -> Result<Cognet<L>, LoadError> {
        let body = match (self.loops, self.body) {
            (1, Some(body)) => body,
            (0, _) | (_, None) => return Err(LoadError::NoLoop),
            (n, _) => return Err(LoadError::TooManyLoops(n)),
        };
        let mut cognet = Cognet {
            body,
            config: self.config,
            telemetry: self.telemetry,
            plugins: self.plugins,
            clock: WorldClock::default(),
        };
        for p in cognet.plugins.iter_mut() {
            p.boot().await.map_err(LoadError::Boot)?;
        }
        Ok(cognet)
    }
}

/// What a wake did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeReport {
    pub wake: u64,
    pub ticks: u64,
}

/// A loaded cognet: its loop body (and the resident memory it holds), warm between wakes.
pub struct Cognet<L: Loop> {
    body: L,
    config: CognetConfig,
    telemetry: Telemetry,
    plugins: Vec<Box<dyn Plugin>>,
    clock: WorldClock,
}

impl<L: Loop> Cognet<L> {
    pub fn body(&self) -> &L {
        &self.body
    }

    pub fn body_mut(&mut self) -> &mut L {
        &mut self.body
    }

    pub fn clock(&self) -> &WorldClock {
        &self.clock
    }

    pub fn config(&self) -> &CognetConfig {
        &self.config
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    fn emit(&self, scope: Scope, outcome: Outcome, error: Option<String>) {
        self.telemetry.emit(scope, outcome, &self.clock, error, None);
    }

    /// One wake: tick after tick until the body stops, fails, runs away, or `signal` aborts it.
    pub async fn wake(
        &mut self,
        stimuli: &[L::Stimulus],
        signal: &CancellationToken,
    ) -> Result<WakeReport, WakeError> {
        self.clock.wake += 1;
        self.emit(Scope::Wake, Outcome::Start, None);
        for p in self.plugins.iter_mut() {
            if let Err(source) = p.wake(self.clock.wake).await {
                self.telemetry.emit(
                    Scope::Wake,
                    Outcome::Failed,
                    &self.clock,
                    Some(source.to_string()),
                    None,
                );
                return Err(WakeError::Hook { hook: "wake", source });
            }
        }
        let mut ticks = 0u64;
        loop {
            if signal.is_cancelled() {
                self.emit(Scope::Wake, Outcome::Interrupted, None);
                return Err(WakeError::Interrupted);
            }
            if ticks == self.config.max_ticks_per_wake {
                let error = format!("runaway: {ticks} ticks without stop()");
                self.emit(Scope::Wake, Outcome::Failed, Some(error));
                return Err(WakeError::Runaway(ticks));
            }
            self.clock.tick += 1;
            ticks += 1;
            self.emit(Scope::Tick, Outcome::Start, None);
            for p in self.plugins.iter_mut() {
                if let Err(source) = p.tick(self.clock.tick).await {
                    self.emit(Scope::Tick, Outcome::Failed, Some(source.to_string()));
                    self.emit(Scope::Wake, Outcome::Failed, Some(source.to_string()));
                    return Err(WakeError::Hook { hook: "tick", source });
                }
            }
            let mut stopped = false;
            let result = {
                let mut tick = Tick {
                    stimuli,
                    signal,
                    stopped: &mut stopped,
                    clock: &mut self.clock,
                    telemetry: &self.telemetry,
                };
                self.body.tick(&mut tick).await
            };
            match result {
                Ok(()) => self.emit(Scope::Tick, Outcome::Complete, None),
                Err(_) if signal.is_cancelled() => {
                    self.emit(Scope::Tick, Outcome::Interrupted, None);
                    self.emit(Scope::Wake, Outcome::Interrupted, None);
                    return Err(WakeError::Interrupted);
                }
                Err(e) => {
                    self.emit(Scope::Tick, Outcome::Failed, Some(e.to_string()));
                    self.emit(Scope::Wake, Outcome::Failed, Some(e.to_string()));
                    return Err(WakeError::Failed(e));
                }
            }
            if stopped {
                self.emit(Scope::Wake, Outcome::Complete, None);
                return Ok(WakeReport { wake: self.clock.wake, ticks });
            }
        }
    }

    /// Run the shutdown hooks and close the telemetry file.
    pub async fn shutdown(mut self) -> Result<L, BoxError> {
        for p in self.plugins.iter_mut() {
            p.shutdown().await?;
        }
        self.telemetry.finish();
        Ok(self.body)
    }

    /// Wake the cognet as its mode says until `shutdown` is cancelled (which also aborts the
    /// wake in flight) or a wake fails. Stimuli that arrive between wakes go to the next one.
    ///
    /// Continuous mode keeps to a grid of `period` from the first wake; a wake never overlaps
    /// another; when a wake outruns its period the wakes that fell due meanwhile are skipped —
    /// not queued, not run concurrently — and their count goes to telemetry.
    pub async fn run(
        &mut self,
        stimuli: &mut mpsc::UnboundedReceiver<L::Stimulus>,
        shutdown: &CancellationToken,
        mut observe: impl FnMut(&Self, &RunStats),
    ) -> Result<RunStats, WakeError> {
        let mut stats = RunStats::default();
        let mut pending = Vec::new();
        match self.config.mode {
            Mode::Invocation => loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Ok(stats),
                    first = stimuli.recv() => match first {
                        None => return Ok(stats),
                        Some(s) => pending.push(s),
                    },
                }
                while let Ok(s) = stimuli.try_recv() {
                    pending.push(s);
                }
                let batch = std::mem::take(&mut pending);
                match self.wake(&batch, &shutdown.child_token()).await {
                    Ok(r) => stats.ticks += r.ticks,
                    Err(WakeError::Interrupted) => return Ok(stats),
                    Err(e) => return Err(e),
                }
                stats.wakes += 1;
                observe(self, &stats);
            },
            Mode::Continuous { period_ms } => {
                let period = Duration::from_millis(period_ms.max(1));
                let start = tokio::time::Instant::now();
                let mut k: u32 = 0;
                loop {
                    let due = start + period * k;
                    tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => return Ok(stats),
                        _ = sleep_until_precisely(due) => {}
                    }
                    stats.record_lateness(tokio::time::Instant::now().saturating_duration_since(due));
                    while let Ok(s) = stimuli.try_recv() {
                        pending.push(s);
                    }
                    let batch = std::mem::take(&mut pending);
                    match self.wake(&batch, &shutdown.child_token()).await {
                        Ok(r) => stats.ticks += r.ticks,
                        Err(WakeError::Interrupted) => return Ok(stats),
                        Err(e) => return Err(e),
                    }
                    stats.wakes += 1;
                    // The next wake is the first grid point not yet past.
                    let elapsed = tokio::time::Instant::now().saturating_duration_since(start);
                    let next = (k + 1).max(elapsed.as_nanos().div_ceil(period.as_nanos()) as u32);
                    let skipped = u64::from(next - (k + 1));
                    if skipped > 0 {
                        stats.skipped += skipped;
                        self.telemetry.emit(Scope::Wake, Outcome::Skipped, &self.clock, None, Some(skipped));
                    }
                    k = next;
                    observe(self, &stats);
                }
            }
        }
    }
}

/// Sleep until `due`: the timer wheel's millisecond ticks for most of the way, then the
/// operating system's finer sleep for the last two milliseconds (on a multi-threaded runtime),
/// so wakes keep to their grid well inside a millisecond.
async fn sleep_until_precisely(due: tokio::time::Instant) {
    let margin = Duration::from_millis(2);
    if let Some(coarse) = due.checked_sub(margin) {
        tokio::time::sleep_until(coarse).await;
    }
    let rest = due.saturating_duration_since(tokio::time::Instant::now());
    if rest.is_zero() {
        return;
    }
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(|| std::thread::sleep(rest));
    } else {
        tokio::time::sleep_until(due).await;
    }
}

/// What a run of wakes did.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub wakes: u64,
    pub ticks: u64,
    /// Continuous mode: wakes skipped because another outran its period.
    pub skipped: u64,
    /// Continuous mode: how late each wake started after its grid point (the latest 100,000).
    pub lateness: std::collections::VecDeque<Duration>,
}

impl RunStats {
    fn record_lateness(&mut self, late: Duration) {
        // The latest 100,000 wakes (17 minutes at 100 Hz): dropping the oldest is O(1).
        if self.lateness.len() == 100_000 {
            self.lateness.pop_front();
        }
        self.lateness.push_back(late);
    }

    /// The `q` quantile (0..=1) of wake lateness.
    pub fn lateness_quantile(&self, q: f64) -> Option<Duration> {
        let mut v: Vec<Duration> = self.lateness.iter().copied().collect();
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        v.get(i).copied()
    }
}
