//! The index on disk (docs/INDEX-STORE.md): a checkpoint plus the log's tail folds to the
//! root a fold from scratch gives; a missing, stale, torn or damaged checkpoint is detected,
//! counted, reported and rebuilt with the same roots; SIGKILL in the middle of writing a
//! checkpoint leaves an index that opens with the right root.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sion_memory::atom::{Atom, AtomParts, BoxMm, Interval, Kind, Permille};
use sion_memory::index::geom::Query;
use sion_memory::index::{Index, IndexConfig};
use sion_memory::memory::{IndexBoot, Memory};
use sion_memory::sim::{SplitMix64, Warehouse, WarehouseConfig};

/// Atoms in a few frames, hours and cells, some long-lived, some sharing subjects, in random
/// time order (late atoms too).
fn random_log(seed: u64, n: usize) -> Vec<Atom> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|i| {
            let x = rng.range(-400_000, 400_000);
            let y = rng.range(-400_000, 400_000);
            let from = rng.range(0, 20 * 3_600_000_000_000);
            let long = rng.chance(100);
            let to = if long { from + 5 * 3_600_000_000_000 } else { from + rng.range(1, 3_600_000_000_000) };
            let frame = ["map", "odom", "base_link"][(rng.next_u64() % 3) as usize];
            let mut p = AtomParts::new(
                Kind::Observation,
                frame,
                BoxMm { min_mm: [x, y, 0], max_mm: [x + 500, y + 500, 1000] },
                Interval { from_ns: from, to_ns: to },
                Permille(900),
            );
            if rng.chance(600) {
                p.subject = format!("thing-{}", rng.next_u64() % 50);
            }
            p.confidence = Permille((i % 1000) as u16);
            Atom::new(p).expect("valid")
        })
        .collect()
}

fn scratch_root(atoms: &[Atom]) -> [u8; 32] {
    Index::build(atoms).expect("build").root().expect("root")
}

#[test]
fn a_checkpoint_plus_the_tail_folds_to_the_same_root_as_from_scratch() {
    let tmp = tempfile::tempdir().expect("tmp");
    for (trial, seed) in [3u64, 17, 99].into_iter().enumerate() {
        let atoms = random_log(seed, 6000);
        let mut rng = SplitMix64::new(seed ^ 0xabc);
        let dir = tmp.path().join(format!("index-{trial}"));
        let mut index = Index::create(&dir, IndexConfig::default()).expect("create");
        // Fold in uneven slices, sealing now and then, checkpointing some of the seals, and
        // "crashing" (dropping without a checkpoint is what Drop does not prevent: so reopen
        // from the last checkpoint by opening a copy) before going on.
        let mut at = 0;
        while at < atoms.len() {
            let end = (at + rng.range(1, 1500) as usize).min(atoms.len());
            index.fold_all(&atoms[at..end]).expect("fold");
            at = end;
            if rng.chance(700) {
                index.seal().expect("seal");
            }
            if rng.chance(400) {
                index.checkpoint().expect("checkpoint");
                drop(index);
                let (reopened, _) = Index::open(&dir, IndexConfig::default()).expect("open");
                // Resumed at the checkpoint: fold what it lacks.
                let from = reopened.size() as usize;
                index = reopened;
                index.fold_all(&atoms[from..at]).expect("fold the tail");
            }
        }
        assert_eq!(index.root().expect("root"), scratch_root(&atoms), "trial {trial}");
        // Every sealed version answers as a fold of its prefix would.
        let reader = index.reader();
        let latest = reader.latest().expect("latest").expect("a version");
        assert_eq!(latest.size(), atoms.len() as u64);
    }
}

/// A robot's pose subject gets an atom a millisecond: in a day, 86 million positions in one
/// list. Its positions are kept in full runs of 4096 under list nodes, so no record grows with
/// the list (format 2 merged them into one run, unreadable once past 16 MiB, ~4.7 h of poses).
#[test]
fn a_long_subject_list_is_kept_in_bounded_runs_and_answers_whole_at_every_head() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("memory");
    // 24,582 positions at the end: six full runs (under list nodes of levels 2 and 1) and a
    // tail; partial runs on the way.
    let n = 26_631;
    let atoms: Vec<Atom> = (0..n)
        .map(|i| {
            let mut p = AtomParts::new(
                Kind::Pose,
                "map",
                BoxMm::point([i as i64 % 5000, 0, 0]),
                Interval { from_ns: i as i64 * 1_000_000, to_ns: i as i64 * 1_000_000 + 1 },
                Permille(1000),
            );
            // Every atom but each 13th, so the list's positions are not the log's.
            if i % 13 != 0 {
                p.subject = "robot-1".into();
            }
            Atom::new(p).expect("valid")
        })
        .collect();
    let mut rng = SplitMix64::new(5);
    let mut memory = Memory::options(&dir).create().expect("create");
    let mut heads = Vec::new();
    let mut at = 0;
    while at < atoms.len() {
        let end = (at + rng.range(1, 6000) as usize).min(atoms.len());
        memory.remember(atoms[at..end].to_vec()).expect("remember");
        heads.push(memory.commit(false).expect("commit").head.size);
        at = end;
        // Reopened now and then: the writer takes the list up from its record on disk.
        if rng.chance(300) {
            drop(memory);
            memory = Memory::options(&dir).open().expect("open");
        }
    }
    let key = memory.ledger().public_key();
    for &size in &heads {
        let file = memory
            .prove_list(sion_memory::proof::ListKey::Subject("robot-1".into()), Some(size))
            .expect("prove");
        let verified = file.verify(Some(&key)).expect("verifies");
        let sion_memory::proof::Claim::List { atoms: got, .. } = verified.claim else { panic!("list") };
        let expected: Vec<u64> = (0..size).filter(|i| i % 13 != 0).collect();
        let positions: Vec<u64> = got.iter().map(|(p, _)| *p).collect();
        assert_eq!(positions, expected, "as of {size}");
    }
    assert_eq!(memory.index().expect("index").root().expect("root"), scratch_root(&atoms));
}

fn memory_with_heads(dir: &Path) -> (Vec<Atom>, Vec<u64>) {
    let mut memory = Memory::options(dir).create().expect("create");
    let atoms: Vec<Atom> = Warehouse::new(WarehouseConfig::default()).take(9000).collect();
    let mut heads = Vec::new();
    for chunk in atoms.chunks(3000) {
        memory.remember(chunk.to_vec()).expect("remember");
        heads.push(memory.commit(false).expect("commit").head.size);
    }
    (atoms, heads)
}

fn ask_every_head(dir: &Path, atoms: &[Atom], heads: &[u64]) {
    let memory = Memory::options(dir).open().expect("open");
    let key = memory.ledger().public_key();
    let q = Query::new("map", BoxMm { min_mm: [0; 3], max_mm: [1_000_000, 1_000_000, 30_000] }, 0, i64::MAX)
        .expect("query");
    for &size in heads {
        let file = memory.prove_range(&q, Some(size)).expect("prove");
        let verified = file.verify(Some(&key)).expect("verifies");
        let sion_memory::proof::Claim::Range { atoms: got, .. } = verified.claim else { panic!("range") };
        let expected = atoms[..size as usize].iter().filter(|a| q.matches(a.parts())).count();
        assert_eq!(got.len(), expected, "as of {size}");
    }
}

fn rebuilt(dir: &Path) -> (String, u64) {
    let memory = Memory::options(dir).open().expect("open");
    match memory.index_boot().clone() {
        IndexBoot::Rebuilt { why, rebuilds, .. } => (why, rebuilds),
        other => panic!("not rebuilt: {other:?}"),
    }
}

#[test]
fn a_missing_torn_or_damaged_checkpoint_is_rebuilt_with_the_same_roots() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let (atoms, heads) = memory_with_heads(&dir);
    // A clean open resumes from the checkpoint and folds nothing.
    let memory = Memory::options(&dir).open().expect("open");
    assert_eq!(memory.index_boot(), &IndexBoot::Checkpoint { version: 9000, folded: 0 });
    drop(memory);
    ask_every_head(&dir, &atoms, &heads);

    // Deleted.
    std::fs::remove_dir_all(dir.join("index")).expect("rm");
    let (why, n) = rebuilt(&dir);
    assert_eq!((why.as_str(), n), ("no checkpoint", 1));
    ask_every_head(&dir, &atoms, &heads);
    // Torn: the checkpoint cut short.
    let checkpoint = dir.join("index/checkpoint");
    let bytes = std::fs::read(&checkpoint).expect("read");
    std::fs::write(&checkpoint, &bytes[..bytes.len() - 7]).expect("write");
    let (why, n) = rebuilt(&dir);
    assert!(why.contains("torn or damaged"), "{why}");
    assert_eq!(n, 2, "counted");
    ask_every_head(&dir, &atoms, &heads);
    // Damaged: a flipped bit in the checkpoint's index root.
    let mut bytes = std::fs::read(&checkpoint).expect("read");
    bytes[30] ^= 0x10;
    std::fs::write(&checkpoint, &bytes).expect("write");
    assert!(rebuilt(&dir).0.contains("torn or damaged"));
    // Damaged: a flipped byte in the last root record, at the end of the node file.
    let nodes = dir.join("index/nodes");
    let mut bytes = std::fs::read(&nodes).expect("read");
    let at = bytes.len() - 20;
    bytes[at] ^= 0xff;
    std::fs::write(&nodes, &bytes).expect("write");
    let (why, _) = rebuilt(&dir);
    assert!(why.contains("checksum"), "{why}");
    // A store of the format before this one (a cache: rebuilt, never read as this one).
    std::fs::write(dir.join("index/FORMAT"), "sion-index-store 1\n").expect("write");
    let (why, _) = rebuilt(&dir);
    assert!(why.contains("not an index of this version"), "{why}");
    ask_every_head(&dir, &atoms, &heads);
    // Stale: the index of another log (say, restored from the wrong backup) disagrees with
    // the ledger's head at its size.
    let early = tmp.path().join("early");
    let mut first = Memory::options(&early).create().expect("create");
    let other: Vec<Atom> =
        Warehouse::new(WarehouseConfig { seed: 8, ..Default::default() }).take(3000).collect();
    first.remember(other).expect("remember");
    first.commit(false).expect("commit");
    drop(first);
    std::fs::remove_dir_all(dir.join("index")).expect("rm");
    copy_dir(&early.join("index"), &dir.join("index"));
    let (why, _) = rebuilt(&dir);
    assert!(why.contains("disagrees with the head"), "{why}");
    ask_every_head(&dir, &atoms, &heads);
    // A record damaged deep inside (found by a walk, not by opening): the answer is an error
    // naming the damage, and the next open rebuilds.
    let memory = Memory::options(&dir).open().expect("open");
    drop(memory);
    let mut bytes = std::fs::read(&nodes).expect("read");
    let half = bytes.len() / 2;
    for b in bytes[64..half].iter_mut().step_by(97) {
        *b ^= 0x55;
    }
    std::fs::write(&nodes, &bytes).expect("write");
    let memory = Memory::options(&dir).open().expect("opens: the damage is not where opening looks");
    let q = Query::new("map", BoxMm { min_mm: [0; 3], max_mm: [1_000_000, 1_000_000, 30_000] }, 0, i64::MAX)
        .expect("query");
    let failed = memory.prove_range(&q, Some(heads[0])).expect_err("a damaged record is found");
    assert!(failed.to_string().contains("damaged"), "{failed}");
    drop(memory);
    assert!(rebuilt(&dir).0.contains("found damaged while in use"));
    ask_every_head(&dir, &atoms, &heads);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        if entry.file_name() == "LOCK" {
            continue;
        }
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

fn helper() -> PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/examples/index_crash
    let exe = std::env::current_exe().expect("exe");
    exe.parent().and_then(Path::parent).expect("target dir").join("examples").join("index_crash")
}

#[test]
fn sigkill_while_writing_a_checkpoint_leaves_an_index_that_opens_with_the_right_root() {
    let helper = helper();
    assert!(helper.exists(), "{} is built with the tests (cargo test --all-targets)", helper.display());
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("index");
    let all: Vec<Atom> = Warehouse::new(WarehouseConfig::default()).take(240_000).collect();
    let mut rng = SplitMix64::new(2026);
    let (mut in_checkpoint, mut trials) = (0, 0);
    // How long a checkpoint takes here (its fsyncs: under a millisecond on a quick disk, tens
    // on a slow one), measured from the helper's own lines, so the kills aim inside one.
    let mut shortest_us = u128::MAX;
    let started = Instant::now();
    // At least 24 kills, and on until 10 have landed inside a checkpoint.
    while (trials < 24 || in_checkpoint < 10) && trials < 80 && started.elapsed() < Duration::from_secs(240) {
        trials += 1;
        let mut child = Command::new(&helper)
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let wait_for = 1 + rng.next_u64() % 3;
        let mut durable = 0u64;
        let mut seen = 0;
        let mut began = None;
        for line in lines.by_ref() {
            let line = line.expect("line");
            if let Some(size) = line.strip_prefix("durable ") {
                durable = size.parse().expect("size");
                if let Some(t) = began.take() {
                    shortest_us = shortest_us.min(Instant::elapsed(&t).as_micros());
                }
            }
            if line.starts_with("checkpoint ") {
                began = Some(Instant::now());
                seen += 1;
                if seen == wait_for {
                    // Somewhere in the first half of the shortest checkpoint seen so far.
                    let within = if shortest_us == u128::MAX { 1000 } else { (shortest_us / 2).max(20) };
                    std::thread::sleep(Duration::from_micros(rng.next_u64() % within as u64));
                    break;
                }
            }
        }
        child.kill().expect("kill");
        let status = child.wait().expect("wait");
        let killed = !status.success();
        let (index, _) = Index::open(&dir, IndexConfig::default()).expect("the index opens after a SIGKILL");
        let version = index.size();
        drop(lines);
        assert!(
            version >= durable,
            "trial {trials}: a durable checkpoint ({durable}) was lost (at {version})"
        );
        let mut index = index;
        assert_eq!(
            index.root().expect("root"),
            scratch_root(&all[..version as usize]),
            "trial {trials}: the root at {version}"
        );
        if killed && version == durable {
            in_checkpoint += 1;
        }
        if version as usize + 4000 > all.len() {
            break;
        }
    }
    assert!(trials >= 20, "{trials} trials");
    assert!(in_checkpoint >= 10, "only {in_checkpoint} of {trials} kills landed inside a checkpoint");
}

/// A memory made under an earlier version of docs/INDEX.md (memory.json says `"index": 3`):
/// opened now, its heads so far carry earlier roots — answers as of them are refused, naming
/// why — and from its next commit on, this version's; memory.json says from which size.
#[test]
fn a_memory_of_an_earlier_index_version_moves_to_this_one_at_its_next_commit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let atoms: Vec<Atom> = Warehouse::new(WarehouseConfig::default()).take(2000).collect();
    {
        let mut memory = Memory::options(&dir).create().expect("create");
        memory.remember(atoms[..1000].to_vec()).expect("remember");
        memory.commit(false).expect("commit");
    }
    let config_path = dir.join("memory.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).expect("read")).expect("json");
    config["index"] = serde_json::json!(3);
    std::fs::write(&config_path, serde_json::to_vec_pretty(&config).expect("json")).expect("write");
    std::fs::remove_dir_all(dir.join("index")).expect("an older store is not read anyway");

    let mut memory = Memory::options(&dir).open().expect("open");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).expect("read")).expect("json");
    assert_eq!((config["index"].as_u64(), config["index_from"].as_u64()), (Some(4), Some(1001)), "{config}");
    let q = Query::new("map", BoxMm { min_mm: [0; 3], max_mm: [1_000_000, 1_000_000, 30_000] }, 0, i64::MAX)
        .expect("query");
    let old = memory.prove_range(&q, None).expect_err("the old head's index is of an earlier version");
    assert!(old.to_string().contains("earlier version"), "{old}");
    // A commit with no new atoms: the same size, this version's root, and answers as of it.
    let same = memory.commit(false).expect("commit at the same size").head;
    assert_eq!((same.size, same.index), (1000, scratch_root(&atoms[..1000])));
    let key = memory.ledger().public_key();
    memory.prove_range(&q, None).expect("prove at the same size").verify(Some(&key)).expect("verifies");
    memory.remember(atoms[1000..].to_vec()).expect("remember");
    let head = memory.commit(false).expect("commit").head;
    assert_eq!(head.index, scratch_root(&atoms), "the new head commits a version 4 root");
    memory.prove_range(&q, None).expect("prove").verify(Some(&key)).expect("verifies");
    drop(memory);
    let memory = Memory::options(&dir).open().expect("reopen");
    memory.prove_range(&q, None).expect("prove").verify(Some(&key)).expect("verifies after reopening");
    drop(memory);
    // A memory of a version this one does not know is not opened (nor rewritten).
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).expect("read")).expect("json");
    config["index"] = serde_json::json!(5);
    std::fs::write(&config_path, serde_json::to_vec_pretty(&config).expect("json")).expect("write");
    let refused = Memory::options(&dir).open().err().expect("a newer index version is not opened");
    assert!(refused.to_string().contains("newer than this sion_memory knows"), "{refused}");
}
