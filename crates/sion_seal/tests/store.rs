//! The writer's key store (docs/SEAL.md, "Key stores"): after a forget no byte of any file in
//! its directory derives the forgotten leaf; a power cut during a forget leaves the old store
//! or the new one; damage is refused, naming what is wrong.

use std::path::Path;
use std::sync::Arc;

use sion_disk::{Disk, Fault, Faults};
use sion_seal::{KeyStore, SealError, SealKind, Sealed};
use sion_verify::atom::{AtomParts, BoxMm, Interval, Kind, Permille};

const SPACE: [u8; 32] = [9; 32];

fn frame_atom(n: i64) -> AtomParts {
    let mut p = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [n, 0, 0], max_mm: [n + 100, 100, 100] },
        Interval { from_ns: n, to_ns: n + 1 },
        Permille(900),
    );
    p.subject = "camera".into();
    p
}

/// Every byte of every file under `dir`.
fn every_byte(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            all.extend(every_byte(&p));
        } else {
            all.extend(std::fs::read(&p).expect("read"));
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn after_a_forget_no_file_of_the_store_derives_the_leaf_and_the_rest_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("space.sionkeys");
    let disk = Disk::os();
    let mut store = KeyStore::create(&disk, &path, SPACE).expect("create");
    let seeds = [[1u8; 32], [2u8; 32]];
    for s in seeds {
        store.begin_epoch(s).expect("epoch");
    }
    let atoms: Vec<AtomParts> = (0..40).map(frame_atom).collect();
    let sealed: Vec<Vec<u8>> = (0..40u32)
        .map(|i| {
            let cover = store.cover(1).expect("epoch 1");
            Sealed::seal(SealKind::Payload, &SPACE, cover, i, &atoms[i as usize], b"a face").expect("seal")
        })
        .collect();

    store.forget(1, 7, 8).expect("forget leaf 7");
    store.forget(1, 20, 30).expect("forget 20..30");
    drop(store);

    let bytes = every_byte(tmp.path());
    for leaf in [7u32, 20, 25, 29] {
        for (depth, s) in sion_testkit::ggm_path(seeds[1], leaf).iter().enumerate() {
            assert!(!contains(&bytes, s), "leaf {leaf}: the node at depth {depth} above it is kept");
        }
    }
    let names: Vec<_> =
        std::fs::read_dir(tmp.path()).expect("dir").map(|e| e.expect("e").file_name()).collect();
    assert_eq!(names, ["space.sionkeys"], "nothing beside the store (no .tmp left)");

    let store = KeyStore::open(&disk, &path).expect("reopen");
    assert_eq!(store.epochs(), 2);
    assert_eq!(store.space(), &SPACE);
    assert!(store.cover(0).expect("epoch 0").leaf_key(7).is_ok(), "another epoch is untouched");
    for i in 0..40u32 {
        let s = Sealed::decode(&sealed[i as usize]).expect("decode");
        let opened = s.open(SealKind::Payload, &SPACE, store.cover(1).expect("epoch 1"), &atoms[i as usize]);
        if i == 7 || (20..30).contains(&i) {
            assert_eq!(opened, Err(SealError::Forgotten { epoch: 1, leaf: i }));
        } else {
            assert_eq!(opened.expect("opens"), b"a face");
        }
    }
    assert!(matches!(store.cover(2), Err(SealError::NoEpoch { epoch: 2, epochs: 2 })));
    assert!(KeyStore::create(&disk, &path, SPACE).is_err(), "a store is never overwritten");
}

#[test]
fn a_power_cut_during_a_forget_leaves_the_store_before_or_after() {
    // Count the changes a forget makes, then fail each in turn and cut the power.
    let changes = {
        let tmp = tempfile::tempdir().expect("tmp");
        let faults = Arc::new(Faults::new());
        let disk = Disk::new(faults.clone());
        let mut store = KeyStore::create(&disk, &tmp.path().join("k"), SPACE).expect("create");
        store.begin_epoch([3; 32]).expect("epoch");
        let before = faults.changes();
        store.forget(0, 5, 6).expect("forget");
        faults.changes() - before
    };
    assert!(changes >= 4, "written, fsynced, renamed, directory fsynced: {changes}");
    for at in 0..changes {
        for fault in [Fault::Io, Fault::NoSpace, Fault::Short] {
            let tmp = tempfile::tempdir().expect("tmp");
            let path = tmp.path().join("k");
            let faults = Arc::new(Faults::new());
            let disk = Disk::new(faults.clone());
            let mut store = KeyStore::create(&disk, &path, SPACE).expect("create");
            store.begin_epoch([3; 32]).expect("epoch");
            faults.fail_at(faults.changes() + at, fault, true);
            let result = store.forget(0, 5, 6);
            drop(store);
            faults.crash().expect("power cut");
            let reopened = KeyStore::open(&Disk::os(), &path).expect("the store opens after the cut");
            let forgotten = reopened.cover(0).expect("epoch").leaf_key(5).is_err();
            if result.is_ok() {
                assert!(forgotten, "change {at} {fault:?}: an acknowledged forget was lost");
            }
            assert!(reopened.cover(0).expect("epoch").leaf_key(6).is_ok(), "leaf 6 stays");
        }
    }
}

#[test]
fn a_damaged_store_is_refused_naming_what_is_wrong() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("k");
    let disk = Disk::os();
    let mut store = KeyStore::create(&disk, &path, SPACE).expect("create");
    store.begin_epoch([4; 32]).expect("epoch");
    store.forget(0, 100, 200).expect("forget");
    let good = std::fs::read(&path).expect("read");
    let refused = |bytes: &[u8]| {
        std::fs::write(&path, bytes).expect("write");
        match KeyStore::open(&disk, &path) {
            Err(SealError::Format { what: "key store", problem }) => problem,
            other => panic!("not refused as a damaged key store: {other:?}"),
        }
    };
    for i in [0, 8, 20, 44, 60, good.len() - 1] {
        let mut bad = good.clone();
        bad[i] ^= 1;
        let why = refused(&bad);
        assert!(!why.is_empty(), "byte {i}");
    }
    assert!(refused(&good[..good.len() - 1]).contains("check"));
    assert!(refused(&good[..10]).contains("header"));
    let mut v1 = good.clone();
    v1[8] = 1;
    assert!(refused(&v1).contains("version 1"));
    std::fs::write(&path, &good).expect("restore");
    assert!(KeyStore::open(&disk, &path).is_ok());
    assert!(matches!(KeyStore::open(&disk, &tmp.path().join("none")), Err(SealError::Io { .. })));
}

/// A member's store holds only the epochs given to it; a cover given again never brings back a
/// leaf the member forgot, and an epoch never given is refused as such.
#[test]
fn a_members_store_holds_what_it_was_given_and_never_unforgets() {
    let tmp = tempfile::tempdir().expect("tmp");
    let disk = Disk::os();
    let path = tmp.path().join("member.sionkeys");
    let mut store = KeyStore::create(&disk, &path, SPACE).expect("create");
    let given = sion_seal::Cover::new(2, [9; 32]);
    store.hold(given.clone()).expect("hold epoch 2");
    assert_eq!(store.epochs(), 3);
    assert!(!store.holds(0) && !store.holds(1) && store.holds(2));
    assert!(matches!(store.cover(1), Err(SealError::NoEpoch { epoch: 1, .. })));
    store.forget(2, 10, 20).expect("forget");
    // The same cover again (an old wrap): the forgotten leaves stay forgotten.
    store.hold(given.clone()).expect("hold again");
    let store = KeyStore::open(&disk, &path).expect("reopen");
    let cover = store.cover(2).expect("epoch 2");
    assert!(cover.leaf_key(15).is_err(), "an old wrap brought a forgotten leaf back");
    assert_eq!(cover.leaf_key(25).expect("kept"), given.leaf_key(25).expect("kept"));
    assert!(!store.holds(0), "an epoch never given is not held after reopening");
}
