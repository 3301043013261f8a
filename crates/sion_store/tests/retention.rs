//! Retention in compressed time (docs/SEAL.md, "Retention"): hours of a camera kept in a sealed
//! memory in seconds of test, retention run as the brain runs it. The disk the camera's lane
//! takes stays under its budget (plus the one segment being written) at every step; what falls
//! out is forgotten with forget atoms that say who and why; the oldest frames no longer open
//! and the newest do; everything else of the memory — its log, its proofs — is untouched.

use std::path::Path;

use sion_seal::SealError;
use sion_seal::record::{FORGET_SUBJECT, ForgetRecord, record_text};
use sion_store::memory::{Memory, MemoryError, Retention, SpaceError, StreamRetention};
use sion_verify::atom::{Atom, AtomParts, BlobRef, BoxMm, Interval, Kind, Payload, Permille};
use sion_verify::proof::{Claim, ListKey};

const IMAGE: &str = "application/cdr; type=sensor_msgs/msg/Image";
const FRAME_BYTES: usize = 4096;
const SECOND: i64 = 1_000_000_000;
const START: i64 = 1_800_000_000 * SECOND;

/// A frame as a camera gives it, different every time and not compressible (so every kept
/// byte counts against the budget).
fn frame(i: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_BYTES);
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < FRAME_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn frame_atom(i: u64, bytes: &[u8]) -> Atom {
    let mut p = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [0, 0, 0], max_mm: [1000, 1000, 1000] },
        Interval { from_ns: START + i as i64 * SECOND, to_ns: START + i as i64 * SECOND + 1 },
        Permille(1000),
    );
    p.payload = Payload::Blob(BlobRef {
        hash: *blake3::hash(bytes).as_bytes(),
        size: bytes.len() as u64,
        media_type: IMAGE.into(),
    });
    Atom::new(p).expect("atom")
}

fn du(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|d| d.flatten().map(|e| e.metadata().map_or(0, |m| m.len())).sum())
        .unwrap_or(0)
}

#[test]
fn six_hours_of_a_camera_stay_within_the_budget_and_the_oldest_are_forgotten() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("robot");
    let mut memory = Memory::options(&data).agent("robot").sealed(true).create().expect("create");
    let space = memory.space().expect("sealed").clone();
    // Segments of 256 KiB (64 frames), so that hours of frames make many of them.
    space.set_segment_bytes(256 << 10);
    let budget = 2 << 20;
    let policy = Retention {
        camera: StreamRetention { keep_ns: 3600 * SECOND, keep_bytes: budget },
        map: StreamRetention::default(),
    };
    let lane = data.join("lanes/camera");
    let segment = 256 << 10;
    // Six hours at one kept frame every 10 s (a camera thinned to that), retention every 60 frames.
    let frames = 6 * 360u64;
    let mut positions = Vec::new();
    let mut forgets = 0;
    for batch in (0..frames).collect::<Vec<_>>().chunks(60) {
        let contents: Vec<Vec<u8>> = batch.iter().map(|&i| frame(i)).collect();
        // Stamps ten seconds apart: compressed time.
        let atoms: Vec<Atom> = batch
            .iter()
            .zip(&contents)
            .map(|(&i, c)| {
                let mut a = frame_atom(i, c).into_parts();
                a.valid = Interval {
                    from_ns: START + i as i64 * 10 * SECOND,
                    to_ns: START + i as i64 * 10 * SECOND + 1,
                };
                Atom::new(a).expect("atom")
            })
            .collect();
        let appended = memory.remember_with_blobs(atoms, contents).expect("keep");
        positions.extend(appended.iter().map(|a| a.position));
        let r = space.retain(memory.log(), &policy).expect("retain");
        forgets += r.forget_positions.len();
        let on_disk = du(&lane);
        assert!(
            on_disk <= budget + segment + 4096,
            "the camera takes {on_disk} bytes, over {budget} + a segment"
        );
        assert_eq!(on_disk, space.lane_bytes().0, "what the lane counts is what the disk holds");
    }
    memory.commit(false).expect("commit");
    assert!(forgets >= 10, "only {forgets} forget atoms in six hours");

    // The newest hour opens; the first frames were forgotten, and say so.
    let last = *positions.last().expect("frames");
    match memory.open_payload(last).expect("the newest frame opens") {
        sion_store::memory::Opened::Blob { content, .. } => assert_eq!(content, frame(frames - 1)),
        other => panic!("not a blob: {other:?}"),
    }
    match memory.open_payload(positions[0]) {
        Err(MemoryError::Space(SpaceError::Seal(SealError::Forgotten { .. }))) => {}
        other => panic!("the first frame of six hours ago: {other:?}"),
    }
    // Every forget atom is retention's, names why, and a range of the camera's leaves; the
    // list of them is complete (a subject proof) and verifies.
    let file = memory.prove_list(ListKey::Subject(FORGET_SUBJECT.into()), None).expect("forgets");
    let Claim::List { atoms, .. } = file.verify(None).expect("verified").claim else { panic!("a list") };
    assert_eq!(atoms.len(), forgets);
    for (_, a) in &atoms {
        let r =
            ForgetRecord::parse(record_text(a.parts(), FORGET_SUBJECT).expect("a forget")).expect("parse");
        assert_eq!(r.who, "retention");
        assert!(r.why.contains("camera"), "{}", r.why);
        assert_eq!(r.leaves.len(), 1);
        assert!(
            r.leaves[0].from >= 1 << 30 && r.leaves[0].to <= 2 << 30,
            "not the camera's lane: {:?}",
            r.leaves
        );
    }
    // The audit finds every blob it should and counts the forgotten ones as forgotten.
    let audit = memory.audit_blobs(|_| {}).expect("audit");
    assert_eq!(audit.bad, 0, "{:?}", audit.first);
    assert!(audit.forgotten > 0 && audit.forgotten < frames, "{audit:?}");
    // A forgotten frame's atom is still in the log and proved.
    memory.prove_inclusion(positions[0]).expect("inclusion").verify(None).expect("verifies");
    // The key store holds one cut, not one per frame: a few nodes for six hours of forgetting.
    let keys = sion_seal::KeyStore::open(&sion_disk::Disk::os(), &data.join("space/keys")).expect("keys");
    assert!(
        keys.cover(0).expect("epoch 0").nodes().len() < 64,
        "{} nodes",
        keys.cover(0).expect("0").nodes().len()
    );
}

/// Retention of a camera whose frames span two epochs, after a restart: forgetting the old
/// epoch's last segment forgets the camera's leaves only — a map tile sealed in that epoch
/// still opens.
#[test]
fn retention_across_an_epoch_forgets_the_cameras_leaves_only() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("robot");
    let memory = Memory::options(&data).agent("robot").sealed(true).create().expect("create");
    let keep = |memory: &Memory, range: std::ops::Range<u64>| -> Vec<u64> {
        let contents: Vec<Vec<u8>> = range.clone().map(frame).collect();
        let atoms = range.zip(&contents).map(|(i, c)| frame_atom(i, c)).collect();
        memory.remember_with_blobs(atoms, contents).expect("keep").iter().map(|a| a.position).collect()
    };
    keep(&memory, 0..20);
    // A map tile in epoch 0's map lane.
    let tile = frame(1000);
    let mut parts = frame_atom(1000, &tile).into_parts();
    parts.kind = Kind::MapTile;
    parts.payload = Payload::Blob(BlobRef {
        hash: *blake3::hash(&tile).as_bytes(),
        size: tile.len() as u64,
        media_type: "application/cdr; type=nav_msgs/msg/OccupancyGrid".into(),
    });
    let tile_at = memory
        .remember_with_blobs(vec![Atom::new(parts).expect("tile")], vec![tile.clone()])
        .expect("tile")[0]
        .position;
    memory.space().expect("sealed").rotate(memory.log(), "rotated").expect("rotate");
    let later = keep(&memory, 20..40);
    drop(memory);
    let memory = Memory::options(&data).open().expect("reopen");
    let space = memory.space().expect("sealed").clone();
    let policy = Retention {
        camera: StreamRetention { keep_ns: 0, keep_bytes: 4096 * 25 },
        map: StreamRetention::default(),
    };
    let r = space.retain(memory.log(), &policy).expect("retain");
    assert!(r.segments >= 1, "{r:?}");
    match memory.open_payload(tile_at).expect("the map tile of the old epoch still opens") {
        sion_store::memory::Opened::Blob { content, .. } => assert_eq!(content, tile),
        other => panic!("{other:?}"),
    }
    assert!(memory.open_payload(*later.last().expect("later")).is_ok(), "the newest frame opens");
}
