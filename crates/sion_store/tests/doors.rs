//! The doors a memory hands out: one write path, snapshots for readers, and a head to wait on.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sion_sim::{Warehouse, WarehouseConfig};
use sion_store::memory::{Memory, Readers, RememberError};

/// A reader waiting on the head wakes at the commit, not at a polling tick, and a snapshot
/// taken before the commit still answers as of its own head.
#[test]
fn a_waiter_wakes_at_the_commit_and_a_snapshot_keeps_its_head() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut memory = Memory::options(tmp.path().join("m")).create().expect("create");
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(2000).collect();
    memory.intake().remember(atoms[..1000].to_vec()).expect("remember");
    memory.commit(false).expect("commit");
    let before = memory.snapshot(None).expect("snapshot");
    let heads = memory.watch_head();
    let seen = heads.latest().commits;

    let waiter = std::thread::spawn(move || {
        let woke = heads.wait_past(seen, Duration::from_secs(30));
        (woke, Instant::now())
    });
    std::thread::sleep(Duration::from_millis(100));
    memory.intake().remember(atoms[1000..].to_vec()).expect("remember");
    let committed = memory.commit(false).expect("commit");
    let at = Instant::now();
    let (woke, woke_at) = waiter.join().expect("waiter");
    let woke = woke.expect("woken by the commit");
    assert_eq!(woke.head, committed.head);
    assert!(woke_at.saturating_duration_since(at) < Duration::from_secs(1), "woken late");

    // The snapshot taken before answers as of its head; a new one as of the new head.
    assert_eq!(before.head().head.size, 1000);
    assert_eq!(memory.snapshot(None).expect("snapshot").head().head.size, 2000);
    let q = sion_verify::index::geom::Query::new(
        "map",
        sion_verify::atom::BoxMm { min_mm: [-1 << 40; 3], max_mm: [1 << 40; 3] },
        i64::MIN / 2,
        i64::MAX / 2,
    )
    .expect("query");
    let file = before.range(&q).expect("prove as of the old head");
    let verified = file.verify(Some(&memory.ledger().public_key())).expect("verifies");
    assert_eq!(verified.head.size, 1000);

    // A waiter that nothing wakes is told so when its time runs out.
    assert!(memory.watch_head().wait_past(woke.commits, Duration::from_millis(50)).is_none());
}

/// Readers share the memory behind its lock, and see its heads without taking it.
#[test]
fn readers_see_heads_without_the_lock_and_intake_refuses_a_reader() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let memory = Memory::options(&dir).create().expect("create");
    let intake = memory.intake();
    let shared = Arc::new(Mutex::new(memory));
    let readers = Readers::new(Arc::clone(&shared));
    let atoms: Vec<_> = Warehouse::new(WarehouseConfig::default()).take(10).collect();
    intake.remember(atoms).expect("remember");
    {
        let held = shared.lock().expect("lock");
        // The lock is held here: the committed head and the log's size are still read.
        assert_eq!(readers.committed().head.size, 0);
        assert_eq!(readers.log_size(), 10);
        drop(held);
    }
    shared.lock().expect("lock").commit(false).expect("commit");
    assert_eq!(readers.committed().head.size, 10);
    drop((readers, shared, intake));

    let read_only = Memory::options(&dir).open_read_only().expect("open to read");
    let refused = read_only.intake().remember(Warehouse::new(WarehouseConfig::default()).take(1).collect());
    assert!(matches!(refused, Err(RememberError::ReadOnly(_))), "{refused:?}");
}
