//! The durable log: appends, reads, proofs from stored subtrees, recovery and audit.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use sion_log::{Log, LogError, LogHasher, LogOptions};
use sion_sim::{Warehouse, WarehouseConfig};
use sion_verify::atom::Atom;
use sion_verify::merkle::{MemoryTree, postorder_len, verify_consistency, verify_inclusion};

fn atoms(n: usize, seed: u64) -> Vec<Atom> {
    Warehouse::new(WarehouseConfig { seed, ..Default::default() }).take(n).collect()
}

fn small_segments() -> LogOptions {
    LogOptions { segment_bytes: 4096, checkpoint_bytes: 10_000, ..LogOptions::default() }
}

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .expect("segments")
        .map(|e| e.expect("entry").path())
        .collect();
    v.sort();
    v
}

#[test]
fn appends_read_back_and_prove() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (log, _) = Log::create(tmp.path(), small_segments()).expect("create");
    let all = atoms(300, 1);
    let mut reference = MemoryTree::<LogHasher>::new();
    for chunk in all.chunks(37) {
        let got = log.append(chunk.to_vec()).expect("append");
        for (a, atom) in got.iter().zip(chunk) {
            assert!(a.new);
            assert_eq!(a.position, reference.size());
            reference.push_leaf(atom.id().as_bytes());
        }
    }
    assert!(segment_files(tmp.path()).len() > 3, "small segments roll over");
    let head = log.head();
    assert_eq!(head.size, 300);
    assert_eq!(head.root, reference.root());
    for (i, atom) in all.iter().enumerate() {
        assert_eq!(&log.read(i as u64).expect("read"), atom);
    }
    for size in [1u64, 2, 3, 37, 64, 100, 255, 256, 257, 300] {
        let root = log.root_at(size).expect("root");
        for position in [0, size / 2, size - 1] {
            let proof = log.inclusion_proof(position, size).expect("proof");
            let leaf = sion_log::leaf_hash(&all[position as usize]);
            verify_inclusion::<LogHasher, _>(position, size, &leaf, &proof, &root).expect("verifies");
        }
        let proof = log.consistency_proof(size, 300).expect("consistency");
        verify_consistency::<LogHasher, _>(size, 300, &root, &head.root, &proof).expect("consistent");
    }
    let scanned: Vec<Atom> = log.scan(100).map(|r| r.expect("scan").1).collect();
    assert_eq!(scanned, all[100..]);
    let audit = log.audit(0, |_| {}).expect("audit");
    assert_eq!(audit.first_bad, None);
    assert_eq!(audit.root, Some(head.root));
    assert!(matches!(log.read(300), Err(LogError::NoSuchPosition { .. })));
    assert!(matches!(log.root_at(301), Err(LogError::NoSuchSize { .. })));
}

#[test]
fn remembering_twice_is_a_no_op() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (log, _) = Log::create(tmp.path(), LogOptions::default()).expect("create");
    let all = atoms(50, 2);
    log.append(all[..30].to_vec()).expect("first");
    let mut again = all[20..].to_vec();
    again.push(all[5].clone());
    let got = log.append(again).expect("second");
    let positions: Vec<u64> = got.iter().map(|a| a.position).collect();
    assert_eq!(positions, (20..50).chain([5]).collect::<Vec<_>>());
    assert!(got[..10].iter().all(|a| !a.new) && got[10..30].iter().all(|a| a.new) && !got[30].new);
    // Duplicates inside one batch too.
    let got = log.append(vec![all[0].clone(), all[0].clone()]).expect("dup");
    assert_eq!(got.iter().map(|a| (a.position, a.new)).collect::<Vec<_>>(), [(0, false), (0, false)]);
    assert_eq!(log.size(), 50);
    drop(log);
    let (log, _) = Log::open(tmp.path(), LogOptions::default()).expect("reopen");
    assert_eq!(log.position_of(&all[42]).expect("lookup"), Some(42));
    assert_eq!(log.append(vec![all[42].clone()]).expect("again")[0].position, 42);
    assert_eq!(log.size(), 50);
}

/// Flip a byte in every block of every run of the duplicate filter in `dir` (docs/LOG.md: a
/// 64-byte header, then blocks of 128 entries of 24 bytes and a CRC), leaving headers sound.
fn damage_every_block(dir: &Path) {
    let runs: Vec<_> =
        std::fs::read_dir(dir).expect("the filter's directory").flatten().map(|e| e.path()).collect();
    assert!(!runs.is_empty(), "a run was written");
    for run in &runs {
        let mut bytes = std::fs::read(run).expect("read");
        let mut at = 64 + 5;
        while at < bytes.len() {
            bytes[at] ^= 1;
            at += 128 * 24 + 4;
        }
        std::fs::write(run, bytes).expect("write");
    }
}

#[test]
fn a_damaged_duplicate_filter_is_rebuilt_and_nothing_is_remembered_twice() {
    let tmp = tempfile::tempdir().expect("tmp");
    let all = atoms(3000, 3);
    {
        let (log, _) = Log::create(tmp.path(), LogOptions::default()).expect("create");
        log.append(all.clone()).expect("append");
    }
    // Closing wrote the filter's entries as a run: damage every block of it (its header and
    // length stay sound, so opening keeps it and only a lookup finds the damage).
    damage_every_block(&tmp.path().join("dedup"));
    let (log, _) = Log::open(tmp.path(), LogOptions::default()).expect("opens: the runs' headers are sound");
    // A lookup alone finds the damage too, and answers after rebuilding.
    assert_eq!(log.position_of(&all[100]).expect("lookup after damage"), Some(100));
    drop(log);
    // The rebuilt filter's runs, damaged the same way.
    damage_every_block(&tmp.path().join("dedup"));
    let (log, _) = Log::open(tmp.path(), LogOptions::default()).expect("reopen");
    // Atoms from earlier than the newest on disk are looked up in the runs: the damage is
    // found, the filter rebuilt from the segments, and the answer is still right.
    let got = log.append(vec![all[17].clone(), all[2999].clone()]).expect("append after damage");
    assert_eq!(got.iter().map(|a| (a.position, a.new)).collect::<Vec<_>>(), [(17, false), (2999, false)]);
    assert_eq!(log.size(), 3000);
    assert_eq!(log.position_of(&all[1234]).expect("lookup"), Some(1234));
}

#[test]
fn reopening_keeps_everything() {
    let tmp = tempfile::tempdir().expect("tmp");
    let all = atoms(500, 3);
    let head = {
        let (log, _) = Log::create(tmp.path(), small_segments()).expect("create");
        log.append(all.clone()).expect("append");
        log.head()
    };
    let (log, recovery) = Log::open(tmp.path(), small_segments()).expect("open");
    assert_eq!(recovery, Default::default());
    assert_eq!(log.head(), head);
    log.append(atoms(10, 4)).expect("append after reopen");
    assert_eq!(log.size(), 510);
    assert_eq!(log.audit(0, |_| {}).expect("audit").first_bad, None);
}

#[test]
fn a_torn_tail_is_cut_and_derived_files_are_rebuilt_past_the_checkpoint() {
    let tmp = tempfile::tempdir().expect("tmp");
    let all = atoms(200, 5);
    let head = {
        let (log, _) = Log::create(tmp.path(), LogOptions::default()).expect("create");
        log.append(all[..150].to_vec()).expect("append");
        log.head()
    };
    // A record cut off mid-way, as a crash during a write leaves it.
    let seg = segment_files(tmp.path()).pop().expect("segment");
    let mut f = OpenOptions::new().append(true).open(&seg).expect("open segment");
    f.write_all(&[120, 0, 0, 0, 1, 2, 3, 4, 5, 6]).expect("write");
    drop(f);
    let (log, recovery) = Log::open(tmp.path(), LogOptions::default()).expect("open");
    assert_eq!(recovery.torn_bytes, 10);
    assert_eq!(log.head(), head);
    // Derived files behind the segments (a crash between the writes): whole records come back.
    log.append(all[150..].to_vec()).expect("append");
    let full = log.head();
    drop(log);
    let offsets = OpenOptions::new().write(true).open(tmp.path().join("offsets")).expect("offsets");
    offsets.set_len(160 * 8 + 3).expect("truncate");
    let (log, recovery) = Log::open(tmp.path(), LogOptions::default()).expect("open");
    assert_eq!(recovery.rederived, 40);
    assert_eq!(log.head(), full);
    assert_eq!(log.audit(0, |_| {}).expect("audit").first_bad, None);
}

#[test]
fn garbage_past_the_checkpoint_is_derived_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let head = {
        let (log, _) = Log::create(tmp.path(), LogOptions::default()).expect("create");
        log.append(atoms(200, 8)).expect("append");
        log.head()
    };
    // As after a power cut: the checkpoint says 120, the derived files past it hold junk.
    let mut checkpoint = 120u64.to_le_bytes().to_vec();
    checkpoint.extend_from_slice(&crc32c::crc32c(&120u64.to_le_bytes()).to_le_bytes());
    std::fs::write(tmp.path().join("checkpoint"), checkpoint).expect("checkpoint");
    for (name, keep) in [("offsets", 120 * 8), ("nodes", postorder_len(120) as usize * 32)] {
        let path = tmp.path().join(name);
        let mut bytes = std::fs::read(&path).expect("read");
        for b in &mut bytes[keep..] {
            *b = 0x5A;
        }
        std::fs::write(&path, bytes).expect("write");
    }
    let (log, recovery) = Log::open(tmp.path(), LogOptions::default()).expect("open");
    assert_eq!(recovery.rederived, 80);
    assert_eq!(log.head(), head);
    assert_eq!(log.audit(0, |_| {}).expect("audit").first_bad, None);
}

#[test]
fn audit_names_a_flipped_byte() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (log, _) = Log::create(tmp.path(), LogOptions::default()).expect("create");
    log.append(atoms(100, 6)).expect("append");
    let offset_of_57 = {
        let bytes = std::fs::read(tmp.path().join("offsets")).expect("offsets");
        u64::from_le_bytes(bytes[57 * 8..58 * 8].try_into().expect("8 bytes"))
    };
    let seg = segment_files(tmp.path()).pop().expect("segment");
    let mut bytes = std::fs::read(&seg).expect("read");
    bytes[offset_of_57 as usize + 20] ^= 0x10;
    std::fs::write(&seg, bytes).expect("write");
    let audit = log.audit(0, |_| {}).expect("audit runs");
    let (position, reason) = audit.first_bad.expect("finds it");
    assert_eq!(position, 57, "{reason}");
    assert!(matches!(log.read(57), Err(LogError::Corrupt { position: 57, .. })));
}

#[test]
fn concurrent_appends_commit_in_groups() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (log, _) = Log::create(tmp.path(), LogOptions::default()).expect("create");
    let all = Arc::new(atoms(4000, 7));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = log.clone();
            let all = Arc::clone(&all);
            std::thread::spawn(move || {
                // Every thread appends every atom of its share once, and one shared atom.
                let mut seen = Vec::new();
                for i in (t..4000).step_by(8) {
                    let got = log.append(vec![all[i].clone(), all[0].clone()]).expect("append");
                    seen.push((i, got[0].position));
                }
                seen
            })
        })
        .collect();
    let mut positions = Vec::new();
    for t in threads {
        for (i, position) in t.join().expect("thread") {
            assert_eq!(log.read(position).expect("read"), all[i]);
            positions.push(position);
        }
    }
    positions.sort_unstable();
    positions.dedup();
    assert_eq!(positions.len(), 4000, "every atom once");
    assert_eq!(log.size(), 4000);
    let groups = log.groups_committed();
    eprintln!("4000 appends from 8 threads took {groups} group commits");
    assert!(groups < 4000, "group commit: {groups} commits for 4000 appends");
}
