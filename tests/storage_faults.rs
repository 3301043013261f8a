//! The storage seam with faults injected (issue 14, requirement 3): random sequences of what a
//! robot does to its memory — remember atoms, keep blobs, commit, checkpoint, reopen — run on
//! a disk that fails the n-th change (an I/O error, a full disk, a short write; once or from
//! then on), and then loses power: every file goes back to what was fsynced, every name to
//! what its directory's fsync made durable (sion_disk::Faults). After that, the memory opens,
//! holds every atom, blob and commit it acknowledged, takes a commit again; and every error
//! the sequence saw named its cause.
//!
//! Each case runs its sequence once on a healthy disk to count the changes it makes, then
//! again with the fault at a change chosen from that count, so faults land everywhere: in
//! segment writes, derived files, the duplicate filter, blob packs, the ledger's journal and
//! the files beside it, the index store, memory.json. PROPTEST_CASES sets how many (48).

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Permille};
use sion_memory::disk::{Disk, Fault, Faults};
use sion_memory::log::{Log, LogError, LogOptions};
use sion_memory::memory::{Memory, OpenError};

fn atom(i: u64) -> Atom {
    let x = (i % 97) as i64 * 1_000;
    let mut p = AtomParts::new(
        Kind::Observation,
        "camera",
        BoxMm { min_mm: [x, 0, 0], max_mm: [x + 500, 500, 500] },
        Interval { from_ns: i as i64 * 1_000_000, to_ns: i as i64 * 1_000_000 + 1 },
        Permille(900),
    );
    p.subject = format!("thing-{}", i % 13);
    Atom::new(p).expect("valid")
}

#[derive(Debug, Clone)]
enum Op {
    Remember(u64),
    Blob(usize),
    Commit,
    Checkpoint,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..40).prop_map(Op::Remember),
        1 => (1usize..3000).prop_map(Op::Blob),
        2 => Just(Op::Commit),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Reopen),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![Just(Fault::Io), Just(Fault::NoSpace), Just(Fault::Short)]
}

/// Whether an error names what the disk said: our faults are EIO and ENOSPC.
fn names_the_cause(e: &str) -> bool {
    e.contains("os error 5") || e.contains("os error 28")
}

/// What a run was told was durable.
#[derive(Default)]
struct Acked {
    atoms: Vec<(u64, Vec<u8>)>,
    blobs: Vec<([u8; 32], Vec<u8>)>,
    /// The last commit acknowledged: size and root.
    commit: Option<(u64, [u8; 32])>,
    created: bool,
    errors: Vec<String>,
}

fn run_memory(dir: &Path, disk: &Disk, ops: &[Op]) -> Acked {
    let mut acked = Acked::default();
    let mut next = 0u64;
    let mut memory = match Memory::options(dir).disk(disk).create() {
        Ok(m) => {
            acked.created = true;
            Some(m)
        }
        Err(e) => {
            acked.errors.push(format!("create: {e}"));
            None
        }
    };
    for op in ops {
        if let Op::Reopen = op {
            drop(memory.take());
            // As `sion memory open` does: a memory whose making failed is made again.
            let opened = match Memory::options(dir).disk(disk).open() {
                Err(OpenError::Missing(_)) => Memory::options(dir).disk(disk).create(),
                other => other,
            };
            match opened {
                Ok(m) => {
                    acked.created = true;
                    memory = Some(m);
                }
                Err(e) => acked.errors.push(format!("reopen: {e}")),
            }
            continue;
        }
        let Some(m) = memory.as_mut() else { continue };
        match op {
            Op::Remember(n) => {
                let atoms: Vec<Atom> = (next..next + n).map(atom).collect();
                next += n;
                match m.remember(atoms.clone()) {
                    Ok(appended) => {
                        for (a, at) in atoms.iter().zip(appended) {
                            acked.atoms.push((at.position, a.bytes().to_vec()));
                        }
                    }
                    Err(e) => acked.errors.push(format!("remember: {e}")),
                }
            }
            Op::Blob(len) => {
                let bytes: Vec<u8> = (0..*len).map(|i| (i as u64 * 31 + next) as u8).collect();
                next += 1;
                match m.blobs().keep(&[&bytes]) {
                    Ok(h) => acked.blobs.push((h[0], bytes)),
                    Err(e) => acked.errors.push(format!("blob: {e}")),
                }
            }
            Op::Commit => match m.commit(false) {
                Ok(c) => acked.commit = Some((c.head.size, c.head.root)),
                Err(e) => acked.errors.push(format!("commit: {e}")),
            },
            Op::Checkpoint => {
                if let Err(e) = m.log().checkpoint() {
                    acked.errors.push(format!("checkpoint: {e}"));
                }
            }
            Op::Reopen => {}
        }
    }
    acked
}

/// After the power cut: everything acknowledged is there and the memory works.
fn check_memory(dir: &Path, acked: &Acked) -> Result<(), TestCaseError> {
    for e in &acked.errors {
        prop_assert!(names_the_cause(e), "an error that does not name the disk's failure: {e}");
    }
    let mut memory = match Memory::options(dir).open() {
        Ok(m) => m,
        Err(e) if !acked.created => {
            // Its creation failed: nothing was acknowledged; it must say what is wrong and
            // never take an unfinished memory for a whole one.
            prop_assert!(acked.atoms.is_empty());
            let _ = e;
            return Ok(());
        }
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "reopening after the crash: {e} (errors before: {:?})",
                acked.errors
            )));
        }
    };
    let log = memory.log().clone();
    for (position, bytes) in &acked.atoms {
        let held =
            log.read_bytes(*position).map_err(|e| TestCaseError::fail(format!("atom {position}: {e}")))?;
        prop_assert_eq!(&held, bytes, "atom {} changed", position);
    }
    for (hash, bytes) in &acked.blobs {
        let held = memory.blobs().get(hash).map_err(|e| TestCaseError::fail(format!("blob: {e}")))?;
        prop_assert_eq!(&held, bytes);
    }
    if let Some((size, root)) = acked.commit {
        let head = memory.committed().head;
        prop_assert!(head.size >= size, "commit of {} lost: the ledger says {}", size, head.size);
        prop_assert_eq!(log.root_at(size).map_err(|e| TestCaseError::fail(e.to_string()))?, root);
    }
    memory.commit(false).map_err(|e| TestCaseError::fail(format!("a commit after recovery: {e}")))?;
    Ok(())
}

fn run_log(dir: &Path, disk: &Disk, ops: &[Op]) -> Acked {
    let options = || LogOptions {
        disk: disk.clone(),
        segment_bytes: 4096,
        checkpoint_bytes: 1500,
        ..LogOptions::default()
    };
    let mut acked = Acked::default();
    let mut next = 0u64;
    let mut log = match Log::create(dir, options()) {
        Ok((l, _)) => {
            acked.created = true;
            Some(l)
        }
        Err(e) => {
            acked.errors.push(format!("create: {e}"));
            None
        }
    };
    for op in ops {
        match op {
            Op::Reopen => {
                drop(log.take());
                // As a memory does: a log whose making failed is made again.
                let opened = match Log::open(dir, options()) {
                    Err(LogError::Missing(_)) => Log::create(dir, options()),
                    other => other,
                };
                match opened {
                    Ok((l, _)) => {
                        acked.created = true;
                        log = Some(l);
                    }
                    Err(e) => acked.errors.push(format!("reopen: {e}")),
                }
            }
            Op::Remember(n) => {
                let Some(l) = &log else { continue };
                let atoms: Vec<Atom> = (next..next + n).map(atom).collect();
                next += n;
                match l.append(atoms.clone()) {
                    Ok(appended) => {
                        for (a, at) in atoms.iter().zip(appended) {
                            acked.atoms.push((at.position, a.bytes().to_vec()));
                        }
                    }
                    Err(e) => acked.errors.push(format!("append: {e}")),
                }
            }
            Op::Checkpoint | Op::Commit => {
                let Some(l) = &log else { continue };
                if let Err(e) = l.checkpoint() {
                    acked.errors.push(format!("checkpoint: {e}"));
                }
            }
            Op::Blob(_) => {}
        }
    }
    acked
}

fn check_log(dir: &Path, acked: &Acked) -> Result<(), TestCaseError> {
    for e in &acked.errors {
        prop_assert!(names_the_cause(e), "an error that does not name the disk's failure: {e}");
    }
    let (log, _) = match Log::open(dir, LogOptions::default()) {
        Ok(l) => l,
        Err(_) if !acked.created => return Ok(()),
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "reopening after the crash: {e} (errors before: {:?})",
                acked.errors
            )));
        }
    };
    for (position, bytes) in &acked.atoms {
        let held =
            log.read_bytes(*position).map_err(|e| TestCaseError::fail(format!("atom {position}: {e}")))?;
        prop_assert_eq!(&held, bytes, "atom {} changed", position);
    }
    // It takes atoms again, and what it holds audits whole.
    log.append(vec![atom(1 << 40)])
        .map_err(|e| TestCaseError::fail(format!("append after recovery: {e}")))?;
    let audit = log.audit(0, |_| {}).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(audit.first_bad.is_none(), "audit after recovery: {:?}", audit.first_bad);
    Ok(())
}

/// One case: count the changes on a healthy disk, then fail the one at `at` of them.
fn case(
    ops: &[Op],
    at: f64,
    fault: Fault,
    sticky: bool,
    run: fn(&Path, &Disk, &[Op]) -> Acked,
    check: fn(&Path, &Acked) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let counting = Arc::new(Faults::new());
    let dry = tempfile::tempdir().expect("tmp");
    let healthy = run(&dry.path().join("m"), &Disk::new(counting.clone()), ops);
    prop_assert!(healthy.errors.is_empty(), "a healthy disk: {:?}", healthy.errors);
    let changes = counting.changes();

    let faults = Arc::new(Faults::new());
    faults.fail_at((at * changes as f64) as u64, fault, sticky);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let acked = run(&dir, &Disk::new(faults.clone()), ops);
    prop_assert_eq!(faults.injected(), 1, "the fault was injected");
    faults.crash().expect("the power cut");
    check(&dir, &acked)
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_memory_loses_nothing_it_acknowledged_on_a_failing_disk(
        ops in prop::collection::vec(op(), 1..24),
        at in 0.0f64..1.0,
        fault in fault(),
        sticky in any::<bool>(),
    ) {
        case(&ops, at, fault, sticky, run_memory, check_memory)?;
    }

    #[test]
    fn a_log_loses_nothing_it_acknowledged_on_a_failing_disk(
        ops in prop::collection::vec(op(), 1..40),
        at in 0.0f64..1.0,
        fault in fault(),
        sticky in any::<bool>(),
    ) {
        case(&ops, at, fault, sticky, run_log, check_log)?;
    }
}

/// The loop's private store (docs/BRAIN.md): a value set is the new one or the old one after
/// any fault and power cut, never torn, never older than what was acknowledged.
#[derive(Debug)]
struct Counter;

impl sion_memory::cognet::StoreKey for Counter {
    const NAME: &'static str = "counter";
    type Value = Vec<u64>;
}

fn store_case(sets: u64, at: f64, fault: Fault, sticky: bool) -> Result<(), TestCaseError> {
    use sion_memory::cognet::Store;
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let run = |disk: &Disk, dir: &Path| -> (Option<u64>, Vec<String>) {
        let (mut acked, mut errors) = (None, Vec::new());
        let store = match Store::open_on(disk, dir) {
            Ok(s) => s,
            Err(e) => return (None, vec![e.to_string()]),
        };
        for i in 0..sets {
            // Values of growing length, so a torn one would not decode.
            match runtime.block_on(store.set::<Counter>(&vec![i; i as usize + 1])) {
                Ok(()) => acked = Some(i),
                Err(e) => errors.push(e.to_string()),
            }
        }
        (acked, errors)
    };
    let counting = Arc::new(Faults::new());
    let dry = tempfile::tempdir().expect("tmp");
    prop_assert!(run(&Disk::new(counting.clone()), dry.path()).1.is_empty());
    let faults = Arc::new(Faults::new());
    faults.fail_at((at * counting.changes() as f64) as u64, fault, sticky);
    let tmp = tempfile::tempdir().expect("tmp");
    let (acked, errors) = run(&Disk::new(faults.clone()), tmp.path());
    faults.crash().expect("the power cut");
    for e in &errors {
        prop_assert!(names_the_cause(e), "an error that does not name the disk's failure: {e}");
    }
    let held = Store::open(tmp.path()).expect("open").get::<Counter>();
    match (acked, held) {
        (None, None) => {}
        (Some(a), Some(v)) => {
            prop_assert!(v.len() == v[0] as usize + 1 && v.iter().all(|&x| x == v[0]), "torn: {v:?}");
            prop_assert!(v[0] >= a, "acknowledged {a}, holds {}", v[0]);
        }
        (None, Some(v)) => prop_assert!(v.len() == v[0] as usize + 1, "torn: {v:?}"),
        (Some(a), None) => return Err(TestCaseError::fail(format!("acknowledged {a}, holds nothing"))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_private_store_keeps_the_value_it_acknowledged_on_a_failing_disk(
        sets in 1u64..12,
        at in 0.0f64..1.0,
        fault in fault(),
        sticky in any::<bool>(),
    ) {
        store_case(sets, at, fault, sticky)?;
    }
}
