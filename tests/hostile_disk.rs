//! What a disk does to a memory's files, tried with real files and the `sion` binary: a record
//! damaged in place, derived files lost, a tail a crash left unfinished. Opening never destroys
//! what it cannot read, names the exact position and file of damage, and rebuilds what is
//! derived.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const SION: &str = env!("CARGO_BIN_EXE_sion");
const SEGMENT: &str = "log/segments/00000000000000000000.seg";

fn sion(args: &[&str]) -> Output {
    Command::new(SION).args(args).stdin(Stdio::null()).output().expect("spawn")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A committed memory of `n` simulated atoms.
fn memory(dir: &Path, n: usize) -> String {
    let d = dir.to_str().expect("utf8").to_owned();
    assert!(sion(&["memory", "open", "--data", &d]).status.success());
    let atoms = sion(&["sim", "--atoms", &n.to_string()]).stdout;
    let input = dir.with_extension("jsonl");
    std::fs::write(&input, atoms).expect("write");
    let o = sion(&["memory", "remember", "--data", &d, input.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "commit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    d
}

fn root_of(d: &str) -> serde_json::Value {
    let o = sion(&["memory", "show", "--data", d, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    serde_json::json!([v["size"], v["root"]])
}

/// Where position `p`'s record starts in its segment (from the derived offsets).
fn record_offset(dir: &Path, p: u64) -> u64 {
    let offsets = std::fs::read(dir.join("log/offsets")).expect("offsets");
    let at = (p * 8) as usize;
    u64::from_le_bytes(offsets[at..at + 8].try_into().expect("8 bytes"))
}

#[test]
fn a_record_damaged_in_place_is_named_and_nothing_after_it_is_cut() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let d = memory(&dir, 20_000);
    let at = record_offset(&dir, 7_428);
    let segment = dir.join(SEGMENT);
    let mut bytes = std::fs::read(&segment).expect("segment");
    bytes[(at + 8 + 20) as usize] ^= 0x10;
    std::fs::write(&segment, &bytes).expect("write");
    // The derived files are behind (as after a crash): opening must read the segment again.
    std::fs::remove_file(dir.join("log/checkpoint")).expect("rm");

    for args in [["memory", "show", "--data", &d], ["memory", "audit", "--data", &d]] {
        let o = sion(&args);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        let out = text(&o);
        assert!(out.contains("damaged at position 7428"), "{args:?}: {out}");
        assert!(out.contains(&format!("byte {at}")), "{args:?}: {out}");
        assert!(out.contains("00000000000000000000.seg"), "{args:?}: {out}");
    }
    // audit, which the refusal points to, still reads the segments alone and says how far the
    // log is whole and what follows the damage.
    let o = sion(&["memory", "audit", "--data", &d]);
    let out = text(&o);
    assert!(out.contains("BAD at position 7428: checksum mismatch"), "{out}");
    assert!(out.contains("7,428 atoms before it are whole; 12,571 whole records follow the damage"), "{out}");
    // The segment is as the disk left it: the 12,571 good records after the damage are there.
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes, "opening changed the segment");
}

#[test]
fn derived_files_that_are_missing_are_rebuilt() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let d = memory(&dir, 5_000);
    let before = root_of(&d);
    for lost in [
        &["log/offsets"][..],
        &["log/nodes"],
        &["log/checkpoint", "log/dedup"],
        &["log/offsets", "log/nodes", "log/checkpoint"],
    ] {
        for f in lost {
            let path = dir.join(f);
            if path.is_dir() {
                std::fs::remove_dir_all(path).expect("rm");
            } else {
                std::fs::remove_file(path).expect("rm");
            }
        }
        // Read-only commands derive what is missing in their own memory, and write nothing.
        assert_eq!(root_of(&d), before, "after losing {lost:?}");
        let o = sion(&["memory", "audit", "--data", &d]);
        assert!(o.status.success(), "after losing {lost:?}: {}", text(&o));
        for f in lost {
            assert!(!dir.join(f).exists(), "a read-only command wrote {f}");
        }
        // A writer derives them again on disk.
        let o = sion(&["memory", "commit", "--data", &d]);
        assert!(o.status.success(), "{}", text(&o));
        for f in lost {
            assert!(dir.join(f).exists(), "{f} derived again by the writer");
        }
        assert_eq!(root_of(&d), before, "after deriving {lost:?} again");
    }
}

#[test]
fn a_tail_a_crash_left_unfinished_is_cut_and_kept_aside() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let d = memory(&dir, 1_000);
    let before = root_of(&d);
    let segment = dir.join(SEGMENT);
    let mut bytes = std::fs::read(&segment).expect("segment");
    let good_len = bytes.len();
    // A record header promising 120 bytes, and 30 of them.
    bytes.extend_from_slice(&120u32.to_le_bytes());
    bytes.extend_from_slice(&[0xAB; 34]);
    std::fs::write(&segment, &bytes).expect("write");
    std::fs::remove_file(dir.join("log/checkpoint")).expect("rm");
    // Reading reads up to the unfinished record and leaves it where it is (a writer could be
    // writing it now).
    let o = sion(&["memory", "show", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(root_of(&d), before);
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes, "a read-only command cut the segment");
    // The writer's open cuts it, and keeps it aside.
    let o = sion(&["memory", "commit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("kept in"), "{}", text(&o));
    assert_eq!(root_of(&d), before);
    assert_eq!(std::fs::metadata(&segment).expect("segment").len() as usize, good_len);
    let kept =
        std::fs::read(dir.join(format!("log/torn/00000000000000000000.seg-at-{good_len}"))).expect("kept");
    assert_eq!(kept, bytes[good_len..]);
}

/// A memory with blobs: a short synthetic run (camera frames, a map) replayed.
fn memory_with_blobs(tmp: &Path) -> (String, std::path::PathBuf) {
    let bag = tmp.join("run.mcap");
    let b = bag.to_str().expect("utf8");
    let o = sion(&["bag", "synth", "--seconds", "4", "--camera", "32x24", "--camera-hz", "2", "--out", b]);
    assert!(o.status.success(), "{}", text(&o));
    let dir = tmp.join("m");
    let d = dir.to_str().expect("utf8").to_owned();
    assert!(sion(&["memory", "open", "--data", &d]).status.success());
    let o = sion(&["replay", b, "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    let pack = dir.join("blobs/pack-000000.blobs");
    assert!(pack.exists(), "the replay kept blobs");
    (d, pack)
}

#[test]
fn a_pack_cut_short_is_left_as_it_is_by_readers_and_named_by_audit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (d, pack) = memory_with_blobs(tmp.path());
    let o = sion(&["memory", "audit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("every blob atoms commit to that is held here"), "{}", text(&o));

    // Cut the pack short (inside its first blob): reading the memory must not change it, and audit must say what is gone.
    let bytes = std::fs::read(&pack).expect("pack");
    let half = bytes[..100].to_vec();
    std::fs::write(&pack, &half).expect("write");
    let o = sion(&["memory", "show", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(&pack).expect("pack"), half, "show changed the blob pack");
    let o = sion(&["memory", "audit", "--data", &d]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("BAD blob of the atom at position"), "{out}");
    assert!(out.contains("missing"), "{out}");
    assert_eq!(std::fs::read(&pack).expect("pack"), half, "audit changed the blob pack");

    // Without the pack at all, audit names the missing blobs the same way.
    std::fs::remove_file(&pack).expect("rm");
    let o = sion(&["memory", "audit", "--data", &d]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("missing"), "{}", text(&o));
}

/// Every file under `dir` with its length and modification time: what "changed nothing" means.
fn listing(dir: &Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let m = e.metadata().expect("metadata");
            if m.is_dir() {
                todo.push(e.path());
            } else {
                out.push((e.path(), m.len(), m.modified().expect("mtime")));
            }
        }
    }
    out.sort();
    out
}

/// The commands that only read: each must succeed and leave the directory as it was.
fn read_only_commands(d: &str, proof: &Path) -> Vec<Vec<String>> {
    let p = proof.to_str().expect("utf8");
    [
        &["memory", "show", "--data", d][..],
        &["memory", "show", "--data", d, "--json"],
        &[
            "memory",
            "recall",
            "--data",
            d,
            "--frame",
            "map",
            "--box",
            "0,0,0,200000,200000,30000",
            "--from",
            "0",
            "--to",
            &i64::MAX.to_string(),
            // The old name of --out, still taken for this release (CHANGELOG.md).
            "--proof",
            p,
        ],
        &["memory", "audit", "--data", d],
        &["memory", "dump", "--data", d, "--limit", "5"],
        &["memory", "verify", p, "--data", d],
    ]
    .iter()
    .map(|a| a.iter().map(|s| s.to_string()).collect())
    .collect()
}

#[test]
fn a_memory_in_use_by_a_writer_or_on_read_only_media_can_be_read_and_is_not_changed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let d = memory(&dir, 3_000);
    // More atoms than the head commits, as a running node has.
    let more = sion(&["sim", "--atoms", "3500"]).stdout;
    let input = tmp.path().join("more.jsonl");
    std::fs::write(&input, &more[more.len() / 2..]).expect("write");
    let o = sion(&["memory", "remember", "--data", &d, input.to_str().expect("utf8"), "--skip-bad"]);
    assert!(o.status.success(), "{}", text(&o));
    let before = root_of(&d);

    // A writer holds the memory (its lock), as the node does while it runs.
    let writer = sion_memory::memory::Memory::options(&dir).open().expect("the writer opens");
    let files = listing(&dir);
    for args in read_only_commands(&d, &tmp.path().join("a.sionproof")) {
        let o = Command::new(SION).args(&args).stdin(Stdio::null()).output().expect("spawn");
        assert!(o.status.success(), "{args:?} while a writer holds the memory: {}", text(&o));
    }
    assert_eq!(listing(&dir), files, "a read-only command changed the directory");
    assert_eq!(root_of(&d), before);
    drop(writer);

    // On read-only media (a read-only bind mount in a user and mount namespace of its own).
    if !Command::new("unshare").args(["-rm", "true"]).status().is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED the read-only mount: `unshare -rm` is not allowed here");
        return;
    }
    let files = listing(&dir);
    let mut script = format!(
        "set -e; mount --bind {d} {d}; mount -o remount,ro,bind {d}; touch {d}/x 2>/dev/null && exit 9;"
    );
    for args in read_only_commands(&d, &tmp.path().join("b.sionproof")) {
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        script.push_str(&format!(" {SION} {} > /dev/null;", quoted.join(" ")));
    }
    let o = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .expect("spawn");
    assert!(o.status.success(), "on read-only media: {}", text(&o));
    assert_eq!(listing(&dir), files, "the directory changed");
    assert_eq!(root_of(&d), before);
}

/// Flip a byte inside the record at position `p` of the first segment; returns where the
/// record starts and the segment's bytes before the flip.
fn damage_record(dir: &Path, p: u64) -> (u64, Vec<u8>) {
    let at = record_offset(dir, p);
    let segment = dir.join(SEGMENT);
    let before = std::fs::read(&segment).expect("segment");
    let mut bytes = before.clone();
    bytes[(at + 8 + 20) as usize] ^= 0x10;
    std::fs::write(&segment, &bytes).expect("write");
    (at, before)
}

#[test]
fn repair_keeps_what_is_before_the_damage_and_sets_the_rest_aside() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    // 10,000 atoms committed, 10,000 more durable but not committed.
    let d = memory(&dir, 10_000);
    let more = tmp.path().join("more.jsonl");
    std::fs::write(&more, sion(&["sim", "--atoms", "20000"]).stdout).expect("write");
    let o = sion(&["memory", "remember", "--data", &d, more.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    let (at, before) = damage_record(&dir, 15_000);
    let damaged = std::fs::read(dir.join(SEGMENT)).expect("segment");
    assert!(!sion(&["memory", "audit", "--data", &d]).status.success());

    let o = sion(&["memory", "repair", "--data", &d]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("damaged at position 15000"), "{out}");
    assert!(out.contains(&format!("byte {at}")), "{out}");
    assert!(out.contains("kept the 15,000 atoms before it"), "{out}");
    assert!(out.contains("4,999 whole records are among what was set aside"), "{out}");
    assert!(out.contains("the committed head (10,000 atoms) is kept whole"), "{out}");
    // Nothing deleted: the damaged record and all after it, byte for byte, in log/torn/.
    let aside = dir.join(format!("log/torn/00000000000000000000.seg-at-{at}"));
    assert_eq!(std::fs::read(&aside).expect("set aside"), damaged[at as usize..]);
    assert_eq!(std::fs::read(dir.join(SEGMENT)).expect("segment"), before[..at as usize]);
    let o = sion(&["memory", "audit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(root_of(&d)[0], 15_000);
    // It goes on: the lost atoms can be remembered again, and committed.
    let o = sion(&["memory", "remember", "--data", &d, more.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(sion(&["memory", "commit", "--data", &d]).status.success());
    assert_eq!(root_of(&d)[0], 20_000);
}

#[test]
fn repair_inside_the_committed_head_changes_nothing_unless_asked_for_a_new_log() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let d = memory(&dir, 20_000);
    damage_record(&dir, 7_428);
    let damaged = std::fs::read(dir.join(SEGMENT)).expect("segment");
    let o = sion(&["memory", "repair", "--data", &d]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("NOT REPAIRED"), "{out}");
    assert!(out.contains("inside its committed head (20000 atoms)"), "{out}");
    assert!(out.contains("Nothing was changed"), "{out}");
    assert_eq!(std::fs::read(dir.join(SEGMENT)).expect("segment"), damaged, "repair changed the segment");

    let o = sion(&["memory", "repair", "--data", &d, "--new-log"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("kept the 7,428 atoms before it"), "{out}");
    assert!(out.contains("the ledger had committed 20,000 atoms of log 0; 12,572 are lost"), "{out}");
    let o = sion(&["memory", "audit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "show", "--data", &d, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["size"], 7_428, "{v}");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("memory.json")).expect("config")).expect("json");
    assert_eq!(config["log"], 1, "{config}");
    assert_eq!(config["repaired"][0], serde_json::json!({"log": 0, "committed": 20000, "kept": 7428}));
}

#[test]
fn repair_cuts_a_damaged_blob_pack_and_names_the_atoms_whose_blobs_are_lost() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (d, pack) = memory_with_blobs(tmp.path());
    let mut bytes = std::fs::read(&pack).expect("pack");
    // The second record's length: it now runs past the pack's end.
    let first_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8"));
    let second = 8 + 40 + first_len as usize;
    bytes[second + 7] = 0x40;
    std::fs::write(&pack, &bytes).expect("write");
    let o = sion(&["memory", "repair", "--data", &d]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains(&format!("damaged at byte {second}): kept its first")), "{out}");
    assert!(out.contains("its payload is missing"), "{out}");
    assert!(out.contains("atoms commit to blobs that are missing or damaged"), "{out}");
    let aside = dir_of(&d).join(format!("blobs/torn/pack-000000.blobs-at-{second}"));
    assert_eq!(std::fs::read(&aside).expect("set aside"), bytes[second..]);
    // audit names the same loss; the memory keeps blobs again after it.
    let o = sion(&["memory", "audit", "--data", &d]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("missing"), "{}", text(&o));
}

fn dir_of(d: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(d)
}

/// Issue 15, requirement 7, end to end: the ledger's journal cut by a few bytes (its last,
/// acknowledged Pulse torn off) used to open as a torn write, `audit` passed, and the next
/// commit signed another header with the same number. Now every command refuses, says what
/// was lost, and leaves the journal as it was; restored, the memory goes on.
#[test]
fn a_ledger_journal_cut_short_of_what_it_acknowledged_is_refused_by_every_command() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let d = memory(&dir, 2_000);
    let o = sion(&["memory", "commit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
    let journal = dir.join("ledger/journal");
    let whole = std::fs::read(&journal).expect("journal");
    std::fs::write(&journal, &whole[..whole.len() - 7]).expect("cut");
    for args in [
        vec!["memory", "show", "--data", &d],
        vec!["memory", "audit", "--data", &d],
        vec!["memory", "commit", "--data", &d],
    ] {
        let o = sion(&args);
        assert!(!o.status.success(), "{args:?} passed: {}", text(&o));
        let out = text(&o);
        assert!(out.contains("was acknowledged (ledger/acked)"), "{args:?}: {out}");
        assert_eq!(std::fs::read(&journal).expect("journal").len(), whole.len() - 7, "{args:?} changed it");
    }
    std::fs::write(&journal, &whole).expect("restore");
    let o = sion(&["memory", "audit", "--data", &d]);
    assert!(o.status.success(), "{}", text(&o));
}
