//! A sealed memory (docs/SEAL.md): payloads and blobs sealed in the memory's space open for
//! the writer and for members with their own key stores, not for anyone else; a removed
//! member does not open what is sealed after; and forgetting really forgets — after a forget,
//! no byte of any file left (the data directory, the writer's key store, the key store of a
//! member who honoured it) is the payload, its leaf key, or any tree node that derives it,
//! while every other payload of the same epoch still opens. The tree's nodes are computed here
//! from the epoch seed as docs/SEAL.md defines them, not with the crate.

use std::path::Path;
use std::process::{Command, Output};

use sion_memory::atom::{AtomParts, BoxMm, Interval, Kind, Payload, Permille};
use sion_memory::disk::Disk;
use sion_memory::memory::{MemberKeys, Memory, MemoryError, Opened, SpaceError};
use sion_memory::proof::{Claim, ListKey};
use sion_seal::record::{FORGET_SUBJECT, record_text};
use sion_seal::{KeyStore, SealError};

const SION: &str = env!("CARGO_BIN_EXE_sion");

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

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

fn leaf_of(memory: &Memory, position: u64) -> (u32, u32) {
    let (_, bytes, _) = memory.sealed_bytes(position).expect("read").expect("sealed");
    let s = sion_seal::Sealed::decode(&bytes).expect("sealed bytes");
    (s.epoch, s.leaf)
}

fn text_of(o: Opened) -> String {
    match o {
        Opened::Inline(Payload::Text(t)) => t,
        other => panic!("not text: {other:?}"),
    }
}

#[test]
fn sealed_payloads_open_for_members_only_and_forgetting_really_forgets() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("robot");
    let disk = Disk::os();
    let mut memory = Memory::options(&data).agent("robot").sealed(true).create().expect("create");
    let space = memory.space().expect("sealed").clone();
    // The log's policy commits to the space.
    assert_eq!(memory.committed().policy, sion_seal::record::policy(&space.id()));

    // Two members with key stores of their own; a stranger who is never added.
    let (alice_dir, bob_dir, carol_dir) =
        (tmp.path().join("alice"), tmp.path().join("bob"), tmp.path().join("carol"));
    let alice = MemberKeys::create(&disk, &alice_dir).expect("alice");
    let bob = MemberKeys::create(&disk, &bob_dir).expect("bob");
    let carol = MemberKeys::create(&disk, &carol_dir).expect("carol");
    for (name, m) in [("alice", &alice), ("bob", &bob)] {
        let (_, wrap) = space.add_member(memory.log(), name, &m.key().public()).expect("add");
        m.join(wrap.encode()).expect("join");
    }
    assert!(matches!(
        space.add_member(memory.log(), "alice again", &alice.key().public()),
        Err(SpaceError::AlreadyMember(_))
    ));

    // Forty payloads and four camera-frame-like blobs, each with text found nowhere else.
    let secrets: Vec<String> =
        (0..40).map(|i| format!("face of person {i} seen at dock 7, secret {i:04}-{}", i * 7919)).collect();
    let first = memory.log().size();
    memory
        .remember_sealed(secrets.iter().enumerate().map(|(i, s)| observation(i as i64, s)).collect())
        .expect("seal");
    let frames: Vec<Vec<u8>> = (0..4u8)
        .map(|f| {
            let mut v = format!("FRAME-{f}-PLAINTEXT-MARKER-").into_bytes();
            v.extend((0..200_000u32).map(|i| (i % 251) as u8 ^ f));
            v
        })
        .collect();
    let mut frame_at = Vec::new();
    for (f, bytes) in frames.iter().enumerate() {
        let mut parts = observation(100 + f as i64, "");
        parts.payload = Payload::None;
        let a = memory
            .remember_sealed_blob(parts, "application/cdr; type=sensor_msgs/msg/Image", bytes)
            .expect("seal a blob");
        frame_at.push(a.position);
    }
    memory.commit(false).expect("commit");

    // Nothing in the clear anywhere in the data directory.
    for s in &secrets {
        assert!(files_holding(&data, s.as_bytes()).is_empty(), "{s:?} is in the clear");
    }
    assert!(files_holding(&data, b"FRAME-2-PLAINTEXT-MARKER-").is_empty(), "a frame is in the clear");
    // The frames were compressed before sealing (they compress well).
    let (_, sealed, _) = memory.sealed_bytes(frame_at[0]).expect("read").expect("sealed");
    assert!(
        sealed.len() < frames[0].len() / 4,
        "{} sealed bytes for a {} byte frame",
        sealed.len(),
        frames[0].len()
    );

    // The writer, Alice and Bob open every payload and frame; Carol none.
    for (i, s) in secrets.iter().enumerate() {
        let p = first + i as u64;
        assert_eq!(text_of(memory.open_payload(p).expect("writer opens")), *s);
        let (atom, bytes, kind) = memory.sealed_bytes(p).expect("read").expect("sealed");
        for m in [&alice, &bob] {
            assert_eq!(text_of(m.open_payload(atom.parts(), &bytes, kind).expect("member opens")), *s);
        }
        assert!(carol.open_payload(atom.parts(), &bytes, kind).is_err(), "a stranger opened {p}");
    }
    for (f, &p) in frame_at.iter().enumerate() {
        match memory.open_payload(p).expect("writer opens a frame") {
            Opened::Blob { media_type, content } => {
                assert_eq!(media_type, "application/cdr; type=sensor_msgs/msg/Image");
                assert_eq!(content, frames[f], "frame {f} is not the bytes given");
            }
            other => panic!("not a blob: {other:?}"),
        }
    }

    // Forget payload 13 and frame 1. Their epoch seed, read before, lets the test compute
    // every secret that derived them.
    let keys = KeyStore::open(&disk, &data.join("space/keys")).expect("keys");
    let epoch_seed = keys.cover(0).expect("epoch 0").nodes()[0].seed;
    drop(keys);
    let forgotten = [first + 13, frame_at[1]];
    let mut doomed: Vec<[u8; 32]> = Vec::new();
    for &p in &forgotten {
        let (epoch, leaf) = leaf_of(&memory, p);
        assert_eq!(epoch, 0);
        doomed.extend(sion_testkit::path_secrets(epoch_seed, leaf));
    }
    let forget_at =
        memory.forget(&forgotten, "operator ana", "a person asked to be forgotten").expect("forget");
    memory.commit(false).expect("commit the forget");
    assert_eq!(forget_at.len(), 1);

    // Alice honours the forget (from the committed log, as `sion memory space honour` does);
    // Bob does not.
    let file = memory.prove_list(ListKey::Subject(FORGET_SUBJECT.into()), None).expect("forgets");
    let Claim::List { atoms, .. } = file.verify(None).expect("verified").claim else { panic!("a list") };
    let texts: Vec<String> =
        atoms.iter().filter_map(|(_, a)| record_text(a.parts(), FORGET_SUBJECT).map(str::to_owned)).collect();
    assert_eq!(texts.len(), 1);
    assert_eq!(alice.honour(&space.id(), &texts).expect("honour"), 2);
    drop(memory);
    let memory = Memory::options(&data).open().expect("reopen");

    // No file of the data directory or of Alice's keys holds the forgotten plaintext, its leaf
    // key, or any node above it; Bob, who did not honour it, still holds the epoch seed.
    for dir in [&data, &alice_dir] {
        assert!(files_holding(dir, secrets[13].as_bytes()).is_empty());
        assert!(files_holding(dir, b"FRAME-1-PLAINTEXT-MARKER-").is_empty());
        for (i, secret) in doomed.iter().enumerate() {
            let held = files_holding(dir, secret);
            assert!(held.is_empty(), "secret {i} of a forgotten leaf is still in {held:?}");
        }
    }
    assert!(!files_holding(&bob_dir, &epoch_seed).is_empty(), "the scan would find a seed that is there");

    // The forgotten payloads open for no one who honoured it; every other one still does.
    for &p in &forgotten {
        match memory.open_payload(p) {
            Err(MemoryError::Space(SpaceError::Seal(SealError::Forgotten { epoch: 0, .. }))) => {}
            other => panic!("a forgotten payload: {other:?}"),
        }
        let (atom, bytes, kind) = memory.sealed_bytes(p).expect("read").expect("sealed");
        assert!(matches!(
            alice.open_payload(atom.parts(), &bytes, kind),
            Err(SpaceError::Seal(SealError::Forgotten { .. }))
        ));
        assert!(bob.open_payload(atom.parts(), &bytes, kind).is_ok(), "forgetting relies on members");
    }
    for (i, s) in secrets.iter().enumerate().filter(|(i, _)| *i != 13) {
        assert_eq!(text_of(memory.open_payload(first + i as u64).expect("still opens")), *s);
    }
    assert!(matches!(memory.open_payload(frame_at[2]).expect("frame 2"), Opened::Blob { .. }));
    // The forget atom names who, why and the leaves, and links to what it forgot.
    let forget_atom = memory.log().read(forget_at[0]).expect("forget atom");
    assert_eq!(forget_atom.parts().links.len(), 2);
    assert!(texts[0].contains("a person asked to be forgotten") && texts[0].contains("operator ana"));
    // The forgotten atoms are still proved: their commitment stays in the log.
    let proof = memory.prove_inclusion(first + 13).expect("inclusion");
    proof.verify(None).expect("a forgotten atom's inclusion verifies");

    // Bob removed: a new epoch without him. What is sealed after opens for Alice (given the new
    // epoch's keys) and the writer, never for Bob.
    let (_, wraps) = space_of(&memory).remove_member(memory.log(), &bob.key().hash()).expect("remove");
    assert_eq!(space_of(&memory).epoch(), 1);
    assert_eq!(wraps.len(), 1);
    assert!(bob.join(wraps[0].1.encode()).is_err(), "Bob opened Alice's wrap");
    alice.join(wraps[0].1.encode()).expect("alice takes epoch 1");
    let later = memory.log().size();
    memory.remember_sealed(vec![observation(200, "after bob left")]).expect("seal");
    assert_eq!(leaf_of(&memory, later).0, 1);
    let (atom, bytes, kind) = memory.sealed_bytes(later).expect("read").expect("sealed");
    assert_eq!(text_of(alice.open_payload(atom.parts(), &bytes, kind).expect("alice")), "after bob left");
    assert!(matches!(
        bob.open_payload(atom.parts(), &bytes, kind),
        Err(SpaceError::Seal(SealError::NoEpoch { epoch: 1, .. }))
    ));
    // The payload service's answer: the leaf key wrapped to a member of the sealing epoch.
    let wrapped =
        space_of(&memory).wrap_leaf_for(&alice.key().hash(), atom.parts(), &bytes).expect("wrap leaf");
    assert_eq!(
        text_of(alice.open_with_leaf(atom.parts(), &bytes, kind, wrapped.encode()).expect("alice opens")),
        "after bob left"
    );
    assert!(bob.open_with_leaf(atom.parts(), &bytes, kind, wrapped.encode()).is_err());
    assert!(matches!(
        space_of(&memory).wrap_leaf_for(&bob.key().hash(), atom.parts(), &bytes),
        Err(SpaceError::NoMember(_))
    ));
    // A ciphertext moved to another atom does not open.
    let other = observation(201, "");
    assert!(matches!(
        space_of(&memory).open_payload(later, &other, &bytes, kind),
        Err(SpaceError::Seal(SealError::Open { .. }))
    ));

    // The membership, as the log's records say it.
    let m = space_of(&memory).membership();
    assert!(m.is_member(0, &bob.key().hash()) && !m.is_member(1, &bob.key().hash()));
    assert!(m.is_member(1, &alice.key().hash()));
}

fn space_of(memory: &Memory) -> &sion_memory::memory::Space {
    memory.space().expect("sealed")
}

/// The leaf counter never hands out a leaf twice: reopened, sealing goes on past what was
/// reserved; a counter that was lost begins a new epoch rather than guess.
#[test]
fn a_leaf_is_never_sealed_twice_across_reopens_or_a_lost_counter() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("m");
    let memory = Memory::options(&data).sealed(true).create().expect("create");
    let at = memory.log().size();
    memory.remember_sealed(vec![observation(1, "one"), observation(2, "two")]).expect("seal");
    let before: Vec<_> = (at..at + 2).map(|p| leaf_of(&memory, p)).collect();
    drop(memory);
    let memory = Memory::options(&data).open().expect("reopen");
    let at2 = memory.log().size();
    memory.remember_sealed(vec![observation(3, "three")]).expect("seal");
    let after = leaf_of(&memory, at2);
    assert!(after.0 == 0 && after.1 >= 4096, "leaf {after:?} after a reopen may repeat one of {before:?}");
    drop(memory);
    std::fs::remove_file(data.join("space/leaves")).expect("lose the counter");
    let memory = Memory::options(&data).open().expect("reopen");
    let at3 = memory.log().size();
    memory.remember_sealed(vec![observation(4, "four")]).expect("seal");
    // The rotation's record comes first, then the sealed atom.
    let sealed_at = memory.log().size() - 1;
    assert!(sealed_at > at3);
    assert_eq!(leaf_of(&memory, sealed_at), (1, 0), "a lost counter did not begin a new epoch");
    assert_eq!(text_of(memory.open_payload(at2).expect("epoch 0 still opens")), "three");
}

fn sion(args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(SION);
    c.args(args);
    if let Some(input) = stdin {
        use std::io::Write as _;
        let mut child = c
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sion");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
        return child.wait_with_output().expect("wait");
    }
    c.output().expect("sion")
}

/// The first member's key hash in `space show --json`.
fn shown_hash(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).expect("json");
    v["epochs"][0]["members"][0]["key_hash"].as_str().expect("a member").to_owned()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The same story at the command line, as an operator and a member run it.
#[test]
fn sealing_sharing_and_forgetting_at_the_command_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("robot");
    let d = d.to_str().expect("utf8");
    let member = tmp.path().join("ana");
    let m = member.to_str().expect("utf8");
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    let out = ok(sion(&["memory", "space", "create", "--data", d], None));
    assert!(out.contains("sealed  space"), "{out}");
    // Not sealed: refused, saying how to make one.
    let plain = tmp.path().join("plain");
    ok(sion(&["memory", "open", "--data", plain.to_str().expect("utf8")], None));
    let o = sion(&["memory", "space", "show", "--data", plain.to_str().expect("utf8")], None);
    assert!(!o.status.success() && text(&o).contains("not sealed"), "{}", text(&o));

    ok(sion(&["memory", "space", "keygen", "--keys", m], None));
    let wrap = tmp.path().join("ana.sionwrap");
    let pubkey = member.join("member.pub");
    ok(sion(
        &[
            "memory",
            "space",
            "add",
            "--data",
            d,
            "--name",
            "ana",
            "--member",
            pubkey.to_str().expect("utf8"),
            "--out",
            wrap.to_str().expect("utf8"),
        ],
        None,
    ));
    ok(sion(&["memory", "space", "join", "--keys", m, "--wrap", wrap.to_str().expect("utf8")], None));
    // The epoch's keys wrapped to her again (a wrap lost): taken as well, nothing changes.
    let hash = shown_hash(&ok(sion(&["memory", "space", "show", "--data", d, "--json"], None)));
    let again = tmp.path().join("again.sionwrap");
    ok(sion(
        &["memory", "space", "wrap", "--data", d, "--member", &hash, "--out", again.to_str().expect("utf8")],
        None,
    ));
    ok(sion(&["memory", "space", "join", "--keys", m, "--wrap", again.to_str().expect("utf8")], None));
    let shown = ok(sion(&["memory", "space", "show", "--data", d], None));
    assert!(shown.contains(" ana") && shown.contains("epoch 0: 1 member"), "{shown}");

    let lines = [
        r#"{"kind":"observation","frame":"map","min":[0,0,0],"max":[1000,1000,1000],"from":1767225600000000000,"to":1767225601000000000,"confidence":900,"subject":"visitor","payload":{"text":"the visitor's name is Jo Secret-Smith"}}"#,
        r#"{"kind":"observation","frame":"map","min":[0,0,0],"max":[1000,1000,1000],"from":1767225601000000000,"to":1767225602000000000,"confidence":900,"subject":"visitor","payload":{"text":"badge number 4471-SECRET"}}"#,
    ];
    let positions = ok(sion(&["memory", "seal", "--data", d, "-"], Some(&lines.join("\n"))));
    let positions: Vec<&str> = positions.lines().filter(|l| l.trim().parse::<u64>().is_ok()).collect();
    assert_eq!(positions.len(), 2, "{positions:?}");
    ok(sion(&["memory", "commit", "--data", d], None));
    let opened = ok(sion(&["memory", "open-payload", "--data", d, "--position", positions[0]], None));
    assert!(opened.contains("Jo Secret-Smith"), "{opened}");
    let opened =
        ok(sion(&["memory", "open-payload", "--data", d, "--position", positions[1], "--keys", m], None));
    assert!(opened.contains("4471-SECRET"), "{opened}");

    let out = ok(sion(
        &["memory", "forget", "--data", d, "--position", positions[0], "--why", "asked by Jo"],
        None,
    ));
    assert!(out.contains("forgot the payloads of 1 atom"), "{out}");
    let o = sion(&["memory", "open-payload", "--data", d, "--position", positions[0]], None);
    assert!(!o.status.success() && text(&o).contains("forgotten"), "{}", text(&o));
    // Recall still proves the atom and says its payload is forgotten; the other stays sealed.
    let recalled = ok(sion(&["memory", "subject", "visitor", "--data", d], None));
    assert!(recalled.contains("payload forgotten (epoch 0"), "{recalled}");
    assert!(recalled.contains("sealed (epoch 0"), "{recalled}");
    // The member honours it: their key no longer opens it; the other still opens.
    let out = ok(sion(&["memory", "space", "honour", "--data", d, "--keys", m], None));
    assert!(out.contains("honoured 1 forget atom"), "{out}");
    let o = sion(&["memory", "open-payload", "--data", d, "--position", positions[0], "--keys", m], None);
    assert!(!o.status.success() && text(&o).contains("forgotten"), "{}", text(&o));
    ok(sion(&["memory", "open-payload", "--data", d, "--position", positions[1], "--keys", m], None));
    // A payload in the clear cannot be forgotten: refused, saying why.
    let o = sion(&["memory", "forget", "--data", d, "--position", "0"], None);
    assert!(
        !o.status.success() && text(&o).contains("only sealed payloads can be forgotten"),
        "{}",
        text(&o)
    );
    // The whole memory still audits.
    ok(sion(&["memory", "audit", "--data", d], None));

    // Archived to a directory and restored into another with the writer's key (docs/SEAL.md,
    // "Archives"): the restore is checked against the head that commits the archive's root.
    let archive = tmp.path().join("archive");
    let a = archive.to_str().expect("utf8");
    let out = ok(sion(&["memory", "archive", "--data", d, "--to", a], None));
    assert!(out.contains("committed as the head's manifest"), "{out}");
    let restored = tmp.path().join("restored");
    let r = restored.to_str().expect("utf8");
    let key = tmp.path().join("robot/writer.key");
    let out = ok(sion(
        &["memory", "restore", "--from", a, "--data", r, "--key", key.to_str().expect("utf8")],
        None,
    ));
    assert!(out.contains("checked against the committed head"), "{out}");
    let opened = ok(sion(&["memory", "open-payload", "--data", r, "--position", positions[1]], None));
    assert!(opened.contains("4471-SECRET"), "{opened}");
    let o = sion(&["memory", "open-payload", "--data", r, "--position", positions[0]], None);
    assert!(!o.status.success() && text(&o).contains("forgotten"), "{}", text(&o));
    ok(sion(&["memory", "audit", "--data", r], None));
    // Into a memory that exists: refused.
    let o =
        sion(&["memory", "restore", "--from", a, "--data", r, "--key", key.to_str().expect("utf8")], None);
    assert!(!o.status.success() && text(&o).contains("restore into a new directory"), "{}", text(&o));
}

/// A forget cut short by a crash is finished when the memory next opens: the forget atom is in
/// the log (once) and the key is gone — whether the crash came before the atom was appended or
/// after it, before the key store was punctured.
#[test]
fn a_forget_a_crash_cut_short_is_finished_on_the_next_open() {
    use sion_seal::record::{ForgetRecord, LeafRange, record_atom};
    for appended_before_the_crash in [false, true] {
        let tmp = tempfile::tempdir().expect("tmp");
        let data = tmp.path().join("m");
        let memory = Memory::options(&data).sealed(true).create().expect("create");
        let at = memory.log().size();
        memory.remember_sealed(vec![observation(1, "forget me"), observation(2, "keep me")]).expect("seal");
        let (epoch, leaf) = leaf_of(&memory, at);
        let target = memory.log().read(at).expect("atom").id();
        let record = ForgetRecord {
            who: "operator".into(),
            why: "asked".into(),
            leaves: vec![LeafRange { epoch, from: u64::from(leaf), to: u64::from(leaf) + 1 }],
        };
        let atom = record_atom(FORGET_SUBJECT, record.to_text(), 1_800_000_000_000_000_000, &[target])
            .expect("atom");
        // What `forget` leaves on disk when the power goes: `pending` written (and perhaps the
        // atom appended), the key store not yet punctured.
        std::fs::write(data.join("space/pending"), atom.bytes()).expect("pending");
        if appended_before_the_crash {
            memory.remember(vec![atom.clone()]).expect("append");
        }
        let size_before = memory.log().size();
        drop(memory);
        let memory = Memory::options(&data).open().expect("reopen");
        assert!(!data.join("space/pending").exists(), "pending was not finished");
        let expected = size_before + u64::from(!appended_before_the_crash);
        assert_eq!(memory.log().size(), expected, "the forget atom is in the log once");
        match memory.open_payload(at) {
            Err(MemoryError::Space(SpaceError::Seal(SealError::Forgotten { .. }))) => {}
            other => panic!("after the crash (appended: {appended_before_the_crash}): {other:?}"),
        }
        assert_eq!(text_of(memory.open_payload(at + 1).expect("the other")), "keep me");
    }
}
