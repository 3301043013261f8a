//! The cognet runtime: exact telemetry for a normal, a failed, an interrupted and a runaway
//! wake; one loop exactly; plugins in order; both modes through one wake machinery, with
//! continuous mode's skip policy; and the private store's contract.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sion_cognet::{
    BoxError, CognetConfig, Definition, HookFuture, LoadError, Loop, Mode, Plugin, Store, StoreKey,
    Telemetry, Tick, WakeError,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq)]
enum Script {
    Normal,
    FailThink,
    SleepInAct,
    NeverStop,
}

struct Body {
    script: Script,
    wakes_seen: u64,
    stimuli_seen: Vec<u32>,
}

impl Loop for Body {
    type Stimulus = u32;

    async fn tick(&mut self, tick: &mut Tick<'_, u32>) -> Result<(), BoxError> {
        self.wakes_seen = tick.clock().wake;
        self.stimuli_seen.extend_from_slice(tick.stimuli());
        if self.script == Script::NeverStop {
            return Ok(());
        }
        let script = self.script;
        tick.phase("sync", async |_: &mut Tick<'_, u32>| Ok(())).await?;
        tick.phase("think", async |_: &mut Tick<'_, u32>| {
            if script == Script::FailThink { Err("the model is confused".into()) } else { Ok(()) }
        })
        .await?;
        tick.phase("act", async |t: &mut Tick<'_, u32>| {
            t.system("emit", async |t: &mut Tick<'_, u32>| {
                if script == Script::SleepInAct {
                    t.cancellable(tokio::time::sleep(Duration::from_secs(30))).await?;
                }
                Ok(())
            })
            .await
        })
        .await?;
        tick.stop();
        Ok(())
    }
}

fn body(script: Script) -> Body {
    Body { script, wakes_seen: 0, stimuli_seen: Vec::new() }
}

async fn loaded(script: Script) -> sion_cognet::Cognet<Body> {
    let mut def = Definition::new(CognetConfig::default(), Telemetry::new().recording());
    def.declare_loop(body(script));
    def.load().await.expect("loads")
}

fn shorts(cognet: &sion_cognet::Cognet<Body>) -> Vec<String> {
    cognet.telemetry().recorded().iter().map(|e| e.short()).collect()
}

const BRACKETED_ACT: [&str; 4] =
    ["phase:start(act)", "system:start(emit)", "system:complete(emit)", "phase:complete(act)"];

#[tokio::test]
async fn a_normal_wake() {
    let mut c = loaded(Script::Normal).await;
    let report = c.wake(&[], &CancellationToken::new()).await.expect("wake");
    assert_eq!((report.wake, report.ticks), (1, 1));
    let mut expected = vec![
        "wake:start",
        "tick:start",
        "phase:start(sync)",
        "phase:complete(sync)",
        "phase:start(think)",
        "phase:complete(think)",
    ];
    expected.extend(BRACKETED_ACT);
    expected.extend(["tick:complete", "wake:complete"]);
    assert_eq!(shorts(&c), expected);
    // Every event is stamped with the world clock.
    let events = c.telemetry().recorded();
    assert!(events.iter().all(|e| e.wake == 1));
    assert!(
        events
            .iter()
            .filter(|e| e.name.starts_with("cognet:phase"))
            .all(|e| e.tick == 1 && e.phase.is_some())
    );
    assert_eq!(events[7].system.as_deref(), Some("emit"));
    assert_eq!(events[7].phase.as_deref(), Some("act"));
    assert_eq!(c.clock().phase, None, "the clock leaves the phase when it ends");
}

#[tokio::test]
async fn a_failed_phase_is_reported_and_propagates() {
    let mut c = loaded(Script::FailThink).await;
    let err = c.wake(&[], &CancellationToken::new()).await.expect_err("fails");
    assert!(matches!(&err, WakeError::Failed(e) if e.to_string() == "the model is confused"), "{err}");
    assert_eq!(
        shorts(&c),
        [
            "wake:start",
            "tick:start",
            "phase:start(sync)",
            "phase:complete(sync)",
            "phase:start(think)",
            "phase:failed(think)",
            "tick:failed",
            "wake:failed"
        ]
    );
    let failed = &c.telemetry().recorded()[5];
    assert_eq!(failed.name, "cognet:phase:failed");
    assert_eq!(failed.error.as_deref(), Some("the model is confused"));
}

#[tokio::test]
async fn an_aborted_wake_is_interrupted_not_failed() {
    let mut c = loaded(Script::SleepInAct).await;
    let signal = CancellationToken::new();
    let abort = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        abort.cancel();
    });
    let started = std::time::Instant::now();
    let err = c.wake(&[], &signal).await.expect_err("interrupted");
    assert!(matches!(err, WakeError::Interrupted));
    assert!(started.elapsed() < Duration::from_secs(5), "the signal reached the long operation");
    assert_eq!(
        shorts(&c),
        [
            "wake:start",
            "tick:start",
            "phase:start(sync)",
            "phase:complete(sync)",
            "phase:start(think)",
            "phase:complete(think)",
            "phase:start(act)",
            "system:start(emit)",
            "system:interrupted(emit)",
            "phase:interrupted(act)",
            "tick:interrupted",
            "wake:interrupted"
        ]
    );
}

#[tokio::test]
async fn a_runaway_wake_is_an_error_after_max_ticks() {
    let mut c = loaded(Script::NeverStop).await;
    let err = c.wake(&[], &CancellationToken::new()).await.expect_err("runaway");
    assert!(matches!(err, WakeError::Runaway(32)), "{err}");
    let mut expected = vec!["wake:start".to_owned()];
    for _ in 0..32 {
        expected.extend(["tick:start".to_owned(), "tick:complete".to_owned()]);
    }
    expected.push("wake:failed".to_owned());
    assert_eq!(shorts(&c), expected);
    assert_eq!(c.clock().tick, 32);
}

#[tokio::test]
async fn exactly_one_loop() {
    let def: Definition<Body> = Definition::new(CognetConfig::default(), Telemetry::new());
    assert!(matches!(def.load().await, Err(LoadError::NoLoop)));
    let mut def = Definition::new(CognetConfig::default(), Telemetry::new());
    def.declare_loop(body(Script::Normal)).declare_loop(body(Script::Normal));
    assert!(matches!(def.load().await, Err(LoadError::TooManyLoops(2))));
}

struct Recorder {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn note(&self, what: String) -> HookFuture<'_> {
        self.log.lock().expect("lock").push(format!("{}:{what}", self.name));
        Box::pin(async { Ok(()) })
    }
}

impl Plugin for Recorder {
    fn boot(&mut self) -> HookFuture<'_> {
        self.note("boot".into())
    }
    fn wake(&mut self, wake: u64) -> HookFuture<'_> {
        self.note(format!("wake{wake}"))
    }
    fn tick(&mut self, tick: u64) -> HookFuture<'_> {
        self.note(format!("tick{tick}"))
    }
    fn shutdown(&mut self) -> HookFuture<'_> {
        self.note("shutdown".into())
    }
}

#[tokio::test]
async fn plugins_run_in_order_and_resident_state_survives_wakes() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut def = Definition::new(CognetConfig::default(), Telemetry::new());
    def.plugin(Recorder { name: "a", log: Arc::clone(&log) });
    def.plugin(Recorder { name: "b", log: Arc::clone(&log) });
    def.declare_loop(body(Script::Normal));
    let mut c = def.load().await.expect("loads");
    c.wake(&[7], &CancellationToken::new()).await.expect("wake");
    c.wake(&[8, 9], &CancellationToken::new()).await.expect("wake");
    assert_eq!(c.body().wakes_seen, 2);
    assert_eq!(c.body().stimuli_seen, [7, 8, 9]);
    c.shutdown().await.expect("shutdown");
    assert_eq!(
        *log.lock().expect("lock"),
        [
            "a:boot",
            "b:boot",
            "a:wake1",
            "b:wake1",
            "a:tick1",
            "b:tick1",
            "a:wake2",
            "b:wake2",
            "a:tick2",
            "b:tick2",
            "a:shutdown",
            "b:shutdown"
        ]
    );
}

/// A body that takes 120 ms on its second wake, at a 50 ms period.
struct Slow {
    wakes: u64,
}

impl Loop for Slow {
    type Stimulus = ();
    async fn tick(&mut self, tick: &mut Tick<'_, ()>) -> Result<(), BoxError> {
        self.wakes += 1;
        if self.wakes == 2 {
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
        tick.stop();
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuous_mode_skips_the_wakes_a_slow_one_outran() {
    let config = CognetConfig { mode: Mode::Continuous { period_ms: 50 }, max_ticks_per_wake: 32 };
    let mut def = Definition::new(config, Telemetry::new().recording());
    def.declare_loop(Slow { wakes: 0 });
    let mut c = def.load().await.expect("loads");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let stats = c
        .run(&mut rx, &shutdown, |c, _| {
            if c.body().wakes >= 6 {
                stop.cancel();
            }
        })
        .await
        .expect("runs");
    // Wakes at 0 and 50 ms; the second runs to ~170 ms, so those due at 100 and 150 ms are
    // skipped and the next runs at 200 ms, on the grid.
    assert_eq!(stats.skipped, 2, "{stats:?}");
    let skipped: Vec<String> = c
        .telemetry()
        .recorded()
        .iter()
        .map(|e| e.short())
        .filter(|s| s.starts_with("wake:skipped"))
        .collect();
    assert_eq!(skipped, ["wake:skipped(2)"]);
    assert!(
        stats.lateness.iter().all(|l| *l < Duration::from_millis(25)),
        "wakes keep to the grid: {:?}",
        stats.lateness
    );
}

#[tokio::test]
async fn invocation_mode_wakes_when_a_stimulus_arrives() {
    let mut def = Definition::new(CognetConfig::default(), Telemetry::new());
    def.declare_loop(body(Script::Normal));
    let mut c = def.load().await.expect("loads");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    tx.send(1).expect("send");
    tx.send(2).expect("send");
    let stop = shutdown.clone();
    let feeder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        tx.send(3).expect("send");
        tokio::time::sleep(Duration::from_millis(30)).await;
        stop.cancel();
    });
    let stats = c.run(&mut rx, &shutdown, |_, _| {}).await.expect("runs");
    feeder.await.expect("feeder");
    assert_eq!(stats.wakes, 2, "one wake for the first two stimuli, one for the third");
    assert_eq!(c.body().stimuli_seen, [1, 2, 3]);
}

struct Counter;
impl StoreKey for Counter {
    const NAME: &'static str = "counter";
    type Value = u64;
}

struct Bad;
impl StoreKey for Bad {
    const NAME: &'static str = "Not A Key";
    type Value = u64;
}

#[tokio::test]
async fn the_private_store_gives_absent_never_a_crash() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = Store::open(tmp.path()).expect("open");
    assert_eq!(store.get::<Counter>(), None);
    store.set::<Counter>(&41).await.expect("set");
    store.set::<Counter>(&42).await.expect("set");
    assert_eq!(store.get::<Counter>(), Some(42));
    assert_eq!(Store::open(tmp.path()).expect("reopen").get::<Counter>(), Some(42));
    std::fs::write(tmp.path().join("counter.json"), b"{not json").expect("write");
    assert_eq!(store.get::<Counter>(), None, "unreadable is absent");
    assert!(store.set::<Bad>(&1).await.is_err());
    assert_eq!(store.get::<Bad>(), None);
    store.remove::<Counter>().expect("remove");
    assert_eq!(store.get::<Counter>(), None);
}

#[tokio::test]
async fn telemetry_goes_to_an_mcap_file_others_can_read() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("telemetry.mcap");
    let mut def = Definition::new(CognetConfig::default(), Telemetry::new().to_mcap(&path).expect("mcap"));
    def.declare_loop(body(Script::Normal));
    let mut c = def.load().await.expect("loads");
    c.wake(&[], &CancellationToken::new()).await.expect("wake");
    c.shutdown().await.expect("shutdown");

    let bytes = std::fs::read(&path).expect("read");
    let mut names = Vec::new();
    for message in mcap::MessageStream::new(&bytes).expect("an MCAP file") {
        let message = message.expect("a message");
        assert_eq!(message.channel.topic, "/cognet/telemetry");
        assert_eq!(message.channel.message_encoding, "json");
        let schema = message.channel.schema.as_ref().expect("a schema");
        assert_eq!(schema.encoding, "jsonschema");
        let event: serde_json::Value = serde_json::from_slice(&message.data).expect("JSON");
        names.push(event["name"].as_str().expect("name").to_owned());
    }
    assert_eq!(names.first().map(String::as_str), Some("cognet:wake:start"));
    assert_eq!(names.last().map(String::as_str), Some("cognet:wake:complete"));
    assert_eq!(names.len(), 12);
}
