//! Archives (docs/SEAL.md, "Archives"): a sealed memory archived to a directory and to a real
//! S3-compatible server (s3s-fs, started here on loopback), restored into a new directory and
//! checked against its committed head; a forget reaches the archive (every object left,
//! decrypted with the writer's key, is scanned for the forgotten payload and its keys); a
//! damaged object, another writer's key and a head that moved on are refused, and nothing is
//! put in place.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sion_archive::{Anchor, Archive, ArchiveError, ArchiveKeys, Kind as ObjectKind};
use sion_store::ledger::link::no_remote;
use sion_store::memory::{Memory, Opened};
use sion_verify::atom::{AtomParts, BoxMm, Interval, Kind, Payload, Permille};

fn observation(i: i64, text: &str) -> AtomParts {
    let mut p = AtomParts::new(
        Kind::Observation,
        "map",
        BoxMm { min_mm: [i * 1000, 0, 0], max_mm: [i * 1000 + 500, 500, 500] },
        Interval { from_ns: 1_800_000_000_000_000_000 + i, to_ns: 1_800_000_000_000_000_001 + i },
        Permille(900),
    );
    p.subject = format!("person-{}", i % 7);
    p.payload = Payload::Text(text.to_owned());
    p
}

fn frame(f: u8) -> Vec<u8> {
    let mut v = format!("FRAME-{f}-PLAINTEXT-MARKER-").into_bytes();
    v.extend((0..100_000u32).map(|i| (i % 251) as u8 ^ f));
    v
}

/// A sealed memory with payloads, frames (in the camera lane) and a clear blob, committed.
struct Robot {
    memory: Memory,
    secrets: Vec<String>,
    first: u64,
    frames: Vec<u64>,
}

fn robot(data: &Path) -> Robot {
    let memory = Memory::options(data).agent("robot").sealed(true).create().expect("create");
    let secrets: Vec<String> =
        (0..30).map(|i| format!("face of person {i} at dock 3, secret {i:04}")).collect();
    let first = memory.log().size();
    memory
        .remember_sealed(secrets.iter().enumerate().map(|(i, s)| observation(i as i64, s)).collect())
        .expect("seal");
    let mut frames = Vec::new();
    for f in 0..3u8 {
        let mut parts = observation(100 + f as i64, "");
        parts.payload = Payload::None;
        let a = memory
            .remember_sealed_blob(parts, "application/cdr; type=sensor_msgs/msg/Image", &frame(f))
            .expect("seal a frame");
        frames.push(a.position);
    }
    let mut memory = memory;
    memory.commit(false).expect("commit");
    Robot { memory, secrets, first, frames }
}

fn text_of(o: Opened) -> String {
    match o {
        Opened::Inline(Payload::Text(t)) => t,
        other => panic!("not text: {other:?}"),
    }
}

fn check_restored(restored: &Path, robot: &Robot, forgotten: &[u64]) {
    let memory = Memory::options(restored).open().expect("open the restored memory");
    assert_eq!(memory.committed().head, robot.memory.committed().head, "the same committed head");
    assert_eq!(memory.log().size(), robot.memory.log().size());
    for (i, s) in robot.secrets.iter().enumerate() {
        let p = robot.first + i as u64;
        match memory.open_payload(p) {
            Ok(o) => {
                assert!(!forgotten.contains(&p), "forgotten payload {p} opened after restore");
                assert_eq!(text_of(o), *s);
            }
            Err(e) => assert!(forgotten.contains(&p), "payload {p} does not open after restore: {e}"),
        }
    }
    for (f, &p) in robot.frames.iter().enumerate() {
        match memory.open_payload(p) {
            Ok(Opened::Blob { content, .. }) => {
                assert!(!forgotten.contains(&p), "forgotten frame {p} opened after restore");
                assert_eq!(content, frame(f as u8));
            }
            Ok(other) => panic!("not a blob: {other:?}"),
            Err(e) => assert!(forgotten.contains(&p), "frame {p} does not open after restore: {e}"),
        }
    }
}

/// Every object in an archive directory, opened with the writer's keys.
fn opened_objects(archive: &Path, keys: &ArchiveKeys) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut stack = vec![archive.join("objects")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            if name.len() != 64 {
                continue; // not an object (a stray file the test left)
            }
            let bytes = std::fs::read(&p).expect("read");
            let kind = match bytes[8] {
                1 => ObjectKind::Chunk,
                2 => ObjectKind::Blob,
                3 => ObjectKind::File,
                4 => ObjectKind::Manifest,
                k => panic!("object {name} has kind {k}"),
            };
            out.push(keys.open(kind, &name, &bytes).expect("the writer opens every object"));
        }
    }
    out
}

/// The secrets that derive the payloads at `positions` (epoch 0).
fn doomed(memory: &Memory, data: &Path, positions: &[u64]) -> Vec<[u8; 32]> {
    let keys = sion_seal::KeyStore::open(&sion_disk::Disk::os(), &data.join("space/keys")).expect("keys");
    let epoch_seed = keys.cover(0).expect("epoch 0").nodes()[0].seed;
    let mut out = Vec::new();
    for &p in positions {
        let (_, bytes, _) = memory.sealed_bytes(p).expect("read").expect("sealed");
        let s = sion_seal::Sealed::decode(&bytes).expect("sealed bytes");
        assert_eq!(s.epoch, 0);
        out.extend(sion_testkit::path_secrets(epoch_seed, s.leaf));
    }
    out
}

fn holds(haystacks: &[Vec<u8>], needle: &[u8]) -> bool {
    haystacks.iter().any(|h| h.windows(needle.len()).any(|w| w == needle))
}

#[test]
fn archive_restore_and_forget_through_a_directory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("robot");
    let dir = tmp.path().join("archive");
    let mut robot = robot(&data);
    let url = dir.to_string_lossy().into_owned();
    let archive = Archive::open(&url).expect("open archive");

    let written = archive.write(&mut robot.memory, |_, _| {}).expect("archive");
    assert_eq!(written.head.size, robot.memory.log().size());
    assert_eq!(robot.memory.committed().head.manifest, written.root, "the root is the head's manifest");
    assert!(written.sent > 0 && written.deleted == 0);
    // A stray file in the store (not an object name, not ASCII): neither used, deleted, nor
    // a panic when archiving again.
    std::fs::write(dir.join("objects").join("é-notes.txt"), b"the operator's notes").expect("stray");
    // Again with nothing new: nothing sent, nothing deleted.
    let again = archive.write(&mut robot.memory, |_, _| {}).expect("archive again");
    assert_eq!((again.sent, again.deleted, again.root), (0, 0, written.root));
    assert!(dir.join("objects").join("é-notes.txt").exists(), "the stray file is left alone");

    // Restored with the writer's key: the same head, every payload and frame opens.
    let key = robot.memory.writer().clone();
    let restored = tmp.path().join("restored");
    // Pinned to a ledger key chosen outside the archive: another key is refused, nothing put
    // in place; the memory's own key is taken.
    let ledger_key = robot.memory.ledger().public_key();
    let other = ed25519_dalek::SigningKey::from_bytes(&[5; 32]).verifying_key();
    let pinned = |key| Anchor { ledger_key: Some(key), at_least_pulse: None };
    let e = archive
        .restore_pinned(&restored, &key, pinned(&other), &no_remote, |_, _| {})
        .expect_err("another ledger key");
    assert!(e.to_string().contains("not the key given"), "{e}");
    assert!(!restored.exists());
    assert!(!staging(&restored).exists(), "a refused restore leaves nothing behind: {e}");
    let r =
        archive.restore_pinned(&restored, &key, pinned(&ledger_key), &no_remote, |_, _| {}).expect("restore");
    assert_eq!(r.root, written.root);
    check_restored(&restored, &robot, &[]);
    assert_private(&restored);
    // A later commit carries the manifest forward.
    robot.memory.remember_sealed(vec![observation(500, "after the archive")]).expect("seal");
    robot.memory.commit(false).expect("commit");
    assert_eq!(robot.memory.committed().head.manifest, written.root);

    // Forget a payload and a frame, and archive again: the new state no longer holds them.
    let keys = ArchiveKeys::of(&key);
    let forgotten = [robot.first + 7, robot.frames[1]];
    let (_, sealed_frame, _) = robot.memory.sealed_bytes(robot.frames[1]).expect("read").expect("sealed");
    let before = opened_objects(&dir, &keys);
    assert!(holds(&before, &sealed_frame), "the archive holds the sealed frame before the forget");
    let secrets = doomed(&robot.memory, &data, &forgotten);
    assert!(holds(&before, &secrets[0]), "the archive holds the epoch seed before the forget");
    // A copy of the archive as it was before the forget, kept by someone who wants it undone.
    let before_forget = tmp.path().join("archive-before-forget");
    copy_tree(&dir, &before_forget);
    robot.memory.forget(&forgotten, "operator ana", "asked to be forgotten").expect("forget");
    robot.memory.commit(false).expect("commit the forget");
    let third = archive.write(&mut robot.memory, |_, _| {}).expect("archive after the forget");
    assert!(third.deleted > 0, "the old key store's objects are deleted");
    let after = opened_objects(&dir, &keys);
    // Not a byte of what remains, opened with the writer's key, is a secret that derived them.
    for (i, secret) in secrets.iter().enumerate() {
        assert!(!holds(&after, secret), "secret {i} on the forgotten leaves' paths is in the archive");
    }
    assert!(!holds(&after, robot.secrets[7].as_bytes()), "the forgotten payload is in the archive");
    assert!(!holds(&after, b"FRAME-1-PLAINTEXT-MARKER-"));
    // The forgotten atoms' sealed bytes stay (the log commits to them), but no key left in the
    // archive opens them: restored, they do not open, and everything else does.
    let restored2 = tmp.path().join("restored-after-forget");
    let r2 = archive.restore(&restored2, &key, &no_remote, |_, _| {}).expect("restore after the forget");
    check_restored(&restored2, &robot, &forgotten);
    assert!(r2.pulse >= third.pulse, "the restore names the Pulse to record: {} < {}", r2.pulse, third.pulse);

    // The copy from before the forget: its embedded ledger came with it, so on its own it
    // cannot tell it is older (docs/SEAL.md, "What an archive can promise"); named the last
    // Pulse the user recorded, the restore refuses it and says which Pulse each is.
    let old_archive = Archive::open(&before_forget.to_string_lossy()).expect("open the old copy");
    let rolled = tmp.path().join("rolled-back");
    let e = old_archive
        .restore_pinned(
            &rolled,
            &key,
            Anchor { ledger_key: Some(&ledger_key), at_least_pulse: Some(r2.pulse) },
            &no_remote,
            |_, _| {},
        )
        .expect_err("an archive from before the forget");
    match &e {
        ArchiveError::RolledBack { has, asked } => assert!(has < asked && *asked == r2.pulse, "{e}"),
        other => panic!("not refused as rolled back: {other}"),
    }
    assert!(e.to_string().contains(&format!("at least Pulse {}", r2.pulse)), "{e}");
    assert!(!rolled.exists() && !staging(&rolled).exists(), "nothing left behind");

    // Refusals: restoring over a memory; another writer's key; a damaged object.
    assert!(matches!(
        archive.restore(&restored2, &key, &no_remote, |_, _| {}),
        Err(ArchiveError::TargetExists(_))
    ));
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let e = archive.restore(&tmp.path().join("x"), &stranger, &no_remote, |_, _| {}).expect_err("stranger");
    assert!(e.to_string().contains("does not open with this writer's key"), "{e}");
    let victim = biggest_object(&dir);
    let mut bytes = std::fs::read(&victim).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&victim, &bytes).expect("damage");
    let target = tmp.path().join("y");
    let e = archive.restore(&target, &key, &no_remote, |_, _| {}).expect_err("damaged");
    let name = victim.file_name().expect("name").to_string_lossy().into_owned();
    assert!(e.to_string().contains(&name) && e.to_string().contains("do not hash to its name"), "{e}");
    assert!(!target.exists(), "nothing is put in place after a refusal");
    assert!(!staging(&target).exists(), "nor left beside it: the staging held the keys in the clear");
}

fn staging(to: &Path) -> PathBuf {
    let mut name = to.file_name().expect("name").to_os_string();
    name.push(".restoring");
    to.with_file_name(name)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// A restored memory is its owner's alone: the directory and everything in it.
fn assert_private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", dir.display());
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let meta = e.metadata().expect("stat");
        if meta.is_dir() {
            assert_private(&e.path());
        } else {
            let mode = meta.permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", e.path().display());
        }
    }
}

fn biggest_object(archive: &Path) -> PathBuf {
    let mut best = (0, PathBuf::new());
    for d in std::fs::read_dir(archive.join("objects")).expect("objects").flatten() {
        if !d.path().is_dir() {
            continue;
        }
        for e in std::fs::read_dir(d.path()).expect("dir").flatten() {
            let len = e.metadata().expect("meta").len();
            if len > best.0 {
                best = (len, e.path());
            }
        }
    }
    best.1
}

/// s3s-fs, a real S3 server (S3 over HTTP, SigV4, a directory behind it), on a loopback port.
struct S3Server {
    child: Child,
    endpoint: String,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s3s_fs() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SION_S3S_FS") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("s3s-fs")).find(|p| p.is_file()))
}

fn start_s3(root: &Path) -> Option<S3Server> {
    let Some(bin) = s3s_fs() else {
        assert!(
            std::env::var_os("SION_REQUIRE_S3").is_none(),
            "SION_REQUIRE_S3 is set but no s3s-fs was found (scripts/s3.sh installs it)"
        );
        eprintln!("no s3s-fs on PATH (scripts/s3.sh installs it): the S3 archive test is skipped");
        return None;
    };
    let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    std::fs::create_dir_all(root.join("robots")).expect("bucket dir");
    let child = Command::new(bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", "sion-test", "--secret-key", "sion-test-secret"])
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start s3s-fs");
    let server = S3Server { child, endpoint: format!("http://127.0.0.1:{port}") };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "s3s-fs did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(server)
}

#[test]
fn archive_and_restore_through_a_real_s3_server() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(server) = start_s3(&tmp.path().join("s3")) else { return };
    let settings = [
        ("aws_endpoint", server.endpoint.as_str()),
        ("aws_access_key_id", "sion-test"),
        ("aws_secret_access_key", "sion-test-secret"),
        ("aws_region", "us-east-1"),
        ("aws_allow_http", "true"),
    ];
    let data = tmp.path().join("robot");
    let mut robot = robot(&data);
    let archive = Archive::open_with("s3://robots/robot-7", &settings).expect("open s3");
    let written = archive.write(&mut robot.memory, |_, _| {}).expect("archive to s3");
    assert_eq!(robot.memory.committed().head.manifest, written.root);
    // The objects are in the server's directory, under the bucket and prefix, none in the clear.
    let stored = tmp.path().join("s3/robots/robot-7");
    assert!(stored.join("latest.json").is_file(), "latest.json is in the bucket");
    let keys = ArchiveKeys::of(robot.memory.writer());
    let objects = opened_objects(&stored, &keys);
    assert!(objects.len() as u64 >= 3, "{} objects", objects.len());

    let key = robot.memory.writer().clone();
    let restored = tmp.path().join("restored");
    archive.restore(&restored, &key, &no_remote, |_, _| {}).expect("restore from s3");
    check_restored(&restored, &robot, &[]);

    // Forget, archive again: the bucket no longer holds the forgotten payload.
    let forgotten = [robot.first + 3];
    let secrets = doomed(&robot.memory, &data, &forgotten);
    robot.memory.forget(&forgotten, "operator", "test").expect("forget");
    robot.memory.commit(false).expect("commit");
    let again = archive.write(&mut robot.memory, |_, _| {}).expect("archive again");
    assert!(again.deleted > 0);
    let left = opened_objects(&stored, &keys);
    assert!(secrets.iter().all(|s| !holds(&left, s)), "a forgotten secret is in the bucket");
    let restored2 = tmp.path().join("restored2");
    archive.restore(&restored2, &key, &no_remote, |_, _| {}).expect("restore again");
    check_restored(&restored2, &robot, &forgotten);
}
