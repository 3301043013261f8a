//! The memory brain: what it derives, that sync is one idempotent fold for cold boot and
//! steady state alike, and that it does not stop while its results are unwitnessed.

use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, LinkRel, Permille};
use sion_memory::brain::{BrainConfig, Intake, MemoryBrain, MemoryKernel};
use sion_memory::cognet::{Cognet, Definition, Telemetry};
use sion_memory::index::Index;
use sion_memory::memory::Memory;
use tokio_util::sync::CancellationToken;

const S: i64 = 1_000_000_000;

fn atom(kind: Kind, subject: &str, min: [i64; 3], max: [i64; 3], from_s: i64, to_s: i64) -> Atom {
    let mut p = AtomParts::new(
        kind,
        "map",
        BoxMm { min_mm: min, max_mm: max },
        Interval { from_ns: from_s * S, to_ns: to_s * S },
        Permille(900),
    );
    p.subject = subject.into();
    Atom::new(p).expect("valid")
}

/// A brain that commits as soon as there is anything new, and its intake' door.
async fn brain(dir: &std::path::Path) -> (Cognet<MemoryBrain>, Intake) {
    let memory = Memory::options(dir).open().expect("open");
    let (kernel, intake) = MemoryKernel::new(memory).expect("kernel");
    let config = BrainConfig { commit_period_ms: 0, ..BrainConfig::default() };
    let mut def = Definition::new(config.cognet.clone(), Telemetry::new().recording());
    def.declare_loop(MemoryBrain::new(kernel, config));
    (def.load().await.expect("load"), intake)
}

fn log_atoms(c: &Cognet<MemoryBrain>) -> Vec<Atom> {
    c.body().kernel().session_after(None, usize::MAX).expect("read").into_iter().map(|(_, a)| a).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brain_derives_trajectories_coverage_and_conflicts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    drop(Memory::options(&dir).create().expect("create"));
    let (mut c, intake) = brain(&dir).await;
    // A robot drives for 70 s: its first minute closes when the pose at 60 s arrives.
    let poses: Vec<Atom> =
        (0..70).map(|t| atom(Kind::Pose, "robot-1", [t * 1000, 0, 0], [t * 1000, 0, 0], t, t + 1)).collect();
    // One pallet seen in two places at overlapping times; later observations close the
    // coverage window that holds them.
    let a = atom(Kind::Observation, "pallet-1", [0, 0, 0], [1200, 1000, 1500], 100, 110);
    let b = atom(Kind::Observation, "pallet-1", [9000, 0, 0], [10200, 1000, 1500], 105, 115);
    let later = atom(Kind::Observation, "pallet-2", [0, 0, 0], [1200, 1000, 1500], 700, 701);
    let mut stimuli = poses.clone();
    stimuli.extend([a.clone(), b.clone(), later]);
    intake.remember(stimuli).expect("append");

    let report = c.wake(&[], &CancellationToken::new()).await.expect("wake");
    assert!(report.ticks >= 2, "a wake with outputs needs another tick to witness them");
    let atoms = log_atoms(&c);
    let trajectories: Vec<&Atom> = atoms.iter().filter(|x| x.kind() == Kind::Trajectory).collect();
    assert_eq!(trajectories.len(), 1);
    let t = trajectories[0].parts();
    assert_eq!(t.subject, "robot-1");
    assert_eq!(t.bounds, BoxMm { min_mm: [0, 0, 0], max_mm: [59_000, 0, 0] });
    assert_eq!((t.valid.from_ns, t.valid.to_ns), (0, 60 * S));
    assert_eq!(t.sources.len(), 60);
    let conflicts: Vec<&Atom> = atoms.iter().filter(|x| x.kind() == Kind::Conflict).collect();
    assert_eq!(conflicts.len(), 1);
    let links = &conflicts[0].parts().links;
    assert!(links.iter().all(|l| l.rel == LinkRel::Contradicts));
    assert_eq!(
        links.iter().map(|l| l.target).collect::<Vec<_>>(),
        [a.id(), b.id()],
        "both sides stay, both named"
    );
    assert_eq!((conflicts[0].parts().valid.from_ns, conflicts[0].parts().valid.to_ns), (105 * S, 110 * S));
    let coverage: Vec<&Atom> = atoms.iter().filter(|x| x.kind() == Kind::Coverage).collect();
    assert_eq!(coverage.len(), 1, "the two observations of the first window share one tile");
    assert_eq!(coverage[0].parts().bounds, BoxMm { min_mm: [0, 0, 0], max_mm: [10200, 1000, 1500] });
    // The brain committed, and the commit's outcome came back through the fold.
    assert!(atoms.iter().any(|x| x.kind() == Kind::Outcome));
    let committed = c.body().kernel().committed();
    assert_eq!(committed.size, atoms.len() as u64 - 1, "all but the last commit's own outcome");
    assert_eq!(c.body().cursor(), Some(atoms.len() as u64 - 1));

    // Nothing new: one tick, no outputs, stop.
    let report = c.wake(&[], &CancellationToken::new()).await.expect("wake");
    assert_eq!(report.ticks, 1);
    assert_eq!(log_atoms(&c).len(), atoms.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_is_one_fold_for_cold_boot_and_steady_state() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    drop(Memory::options(&dir).create().expect("create"));
    let input: Vec<Atom> = sion_memory::sim::Warehouse::new(Default::default()).take(6000).collect();
    let steady_root = {
        let (mut c, intake) = brain(&dir).await;
        for chunk in input.chunks(1500) {
            intake.remember(chunk.to_vec()).expect("append");
            c.wake(&[], &CancellationToken::new()).await.expect("wake");
        }
        // Idempotent: a second sync folds nothing.
        assert_eq!(c.body_mut().sync(&CancellationToken::new()).expect("sync"), 0);
        let root = c.body_mut().index().root().expect("root");
        let atoms = log_atoms(&c);
        assert_eq!(
            root,
            Index::build(&atoms).expect("build").root().expect("root"),
            "the resident index is the log's"
        );
        root
    };
    // A cold boot: the same call, with the cursor where the index's checkpoint and the
    // deriver's are (not at the start: the index is on disk).
    let size = {
        let (mut c, _) = brain(&dir).await;
        assert!(c.body().cursor().is_some(), "a cold boot resumes at the checkpoints");
        c.wake(&[], &CancellationToken::new()).await.expect("wake");
        assert_eq!(c.body_mut().index().root().expect("root"), steady_root);
        let events: Vec<String> = c.telemetry().recorded().iter().map(|e| e.short()).collect();
        assert_eq!(events[..3], ["wake:start", "tick:start", "phase:start(sync)"]);
        c.body().index_size()
    };
    // Without the index (deleted), the memory rebuilds it from the log: the same root.
    std::fs::remove_dir_all(dir.join("index")).expect("delete the index");
    let (mut c, _) = brain(&dir).await;
    c.wake(&[], &CancellationToken::new()).await.expect("wake");
    assert_eq!(c.body().index_size(), size);
    assert_eq!(c.body_mut().index().root().expect("root"), steady_root);
}

/// A ledger that can be made unreachable, as a fleet ledger's service can be.
struct Flaky {
    inner: sion_memory::ledger::Ledger,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Flaky {
    fn up(&self) -> Result<(), sion_memory::ledger::LedgerError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(sion_memory::ledger::LedgerError::Remote {
                ledger: "test://fleet".into(),
                message: "cannot be reached (the test took it down)".into(),
            });
        }
        Ok(())
    }
}

mod flaky {
    use sion_memory::ledger::link::LedgerLink;
    use sion_memory::ledger::{
        Account, Agent, LedgerError, LogId, MemoryLog, SignedHeader, SignedTx, StateProof, TxTimeProof,
    };

    impl LedgerLink for super::Flaky {
        fn describe(&self) -> String {
            "a ledger the test takes down".into()
        }
        fn public_key(&self) -> ed25519_dalek::VerifyingKey {
            self.inner.public_key()
        }
        fn latest(&self) -> Result<SignedHeader, LedgerError> {
            self.up()?;
            LedgerLink::latest(&self.inner)
        }
        fn header(&self, pulse: u64) -> Result<SignedHeader, LedgerError> {
            self.up()?;
            LedgerLink::header(&self.inner, pulse)
        }
        fn nonce(&self, account: &Account) -> Result<u64, LedgerError> {
            self.up()?;
            LedgerLink::nonce(&self.inner, account)
        }
        fn log(&self, id: LogId) -> Result<Option<MemoryLog>, LedgerError> {
            self.up()?;
            LedgerLink::log(&self.inner, id)
        }
        fn log_count(&self) -> Result<u64, LedgerError> {
            self.up()?;
            LedgerLink::log_count(&self.inner)
        }
        fn agent(&self, name: &str) -> Result<Option<Agent>, LedgerError> {
            self.up()?;
            LedgerLink::agent(&self.inner, name)
        }
        fn submit(&mut self, tx: SignedTx) -> Result<SignedHeader, LedgerError> {
            self.up()?;
            LedgerLink::submit(&mut self.inner, tx)
        }
        fn state_proof(&self, id: LogId, pulse: u64) -> Result<StateProof, LedgerError> {
            self.up()?;
            LedgerLink::state_proof(&self.inner, id, pulse)
        }
        fn tx_time_proof(&self, id: LogId, position: u64) -> Result<TxTimeProof, LedgerError> {
            self.up()?;
            LedgerLink::tx_time_proof(&self.inner, id, position)
        }
        fn last_commit_at_most(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
            self.up()?;
            LedgerLink::last_commit_at_most(&self.inner, id, size)
        }
        fn first_commit_over(&self, id: LogId, size: u64) -> Result<Option<MemoryLog>, LedgerError> {
            self.up()?;
            LedgerLink::first_commit_over(&self.inner, id, size)
        }
        fn versions(&self, id: LogId, from: u64, limit: u64) -> Result<Vec<MemoryLog>, LedgerError> {
            self.up()?;
            LedgerLink::versions(&self.inner, id, from, limit)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brain_whose_ledger_is_down_keeps_recording_and_commits_the_backlog_when_it_returns() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().expect("tmp");
    let down = std::sync::Arc::new(AtomicBool::new(false));
    let link = Flaky {
        inner: sion_memory::ledger::Ledger::create(&tmp.path().join("fleet")).expect("ledger"),
        down: down.clone(),
    };
    let memory = Memory::options(tmp.path().join("m"))
        .ledger_link(Box::new(link), "test://fleet")
        .create()
        .expect("create");
    let (kernel, intake) = MemoryKernel::new(memory).expect("kernel");
    let config = BrainConfig { commit_period_ms: 0, ..BrainConfig::default() };
    let mut def = Definition::new(config.cognet.clone(), Telemetry::new());
    def.declare_loop(MemoryBrain::new(kernel, config));
    let mut c = def.load().await.expect("load");
    let input: Vec<Atom> = sion_memory::sim::Warehouse::new(Default::default()).take(1500).collect();
    intake.remember(input[..1000].to_vec()).expect("append");
    c.wake(&[], &CancellationToken::new()).await.expect("wake");
    let before = c.body().stats().commits;
    assert!(before >= 1);

    // The ledger goes away: the brain's wakes go on, recording, and its commits fail.
    down.store(true, Ordering::SeqCst);
    intake.remember(input[1000..].to_vec()).expect("recording goes on");
    for _ in 0..3 {
        c.wake(&[], &CancellationToken::new()).await.expect("a failed commit stopped the brain");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let stats = c.body().stats().clone();
    assert_eq!(stats.commits, before, "{stats:?}");
    assert!(stats.commit_failures >= 1, "{stats:?}");
    let backlog = c.body().index_size();
    assert!(backlog >= 1500, "the atoms were not recorded meanwhile");

    // It returns: the next commit due takes everything recorded meanwhile, at once.
    down.store(false, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    c.wake(&[], &CancellationToken::new()).await.expect("wake");
    let stats = c.body().stats().clone();
    assert!(stats.commits > before, "{stats:?}");
    drop(c);
    drop(intake);
    let ledger = sion_memory::ledger::Ledger::open(&tmp.path().join("fleet")).expect("the ledger");
    use sion_memory::ledger::link::LedgerLink as _;
    let log = sion_memory::ledger::LogId(0);
    let first_back = ledger.versions(log, before + 1, 1).expect("versions");
    assert!(
        first_back.first().is_some_and(|v| v.head.size >= backlog),
        "the first commit after the ledger came back did not take the whole backlog of {backlog}: {first_back:?}"
    );
}
