//! `sion memory evidence`: one answer out as a directory, checked by `sion memory verify DIR`
//! (docs/EVIDENCE.md): the proof, the payloads as their atoms commit to them, the frames as
//! pictures, the MCAP and Rerun pictures; a payload changed, added or misnamed is refused; a
//! sealed memory's frames are opened (as the writer) beside their sealed bytes.

use std::path::Path;
use std::process::{Command, Output};

const SION: &str = env!("CARGO_BIN_EXE_sion");

fn sion(args: &[&str]) -> Output {
    Command::new(SION).args(args).output().expect("sion runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A replayed demo bag (sealed or not) and an evidence directory of "what was seen in x, y
/// ∈ [0, 10] × [0, 8] m during the first 30 s".
fn evidence(dir: &Path, sealed: bool) -> (String, String) {
    let data = dir.join("memory");
    let d = data.to_str().expect("utf8");
    let bag = concat!(env!("CARGO_MANIFEST_DIR"), "/bags/demo.mcap");
    let mut replay = vec!["replay", bag, "--data", d];
    if sealed {
        replay.extend(["--sealed", "--keep-every-s", "0"]);
    }
    let o = sion(&replay);
    assert!(o.status.success(), "{}", text(&o));
    let out = dir.join("evidence");
    let e = out.to_str().expect("utf8");
    let o = sion(&[
        "memory",
        "evidence",
        "--data",
        d,
        "--box",
        "0m,0m,-1m,10m,8m,3m",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:00:30Z",
        "--out",
        e,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("sion memory verify --ledger-key"), "{}", text(&o));
    (d.to_owned(), e.to_owned())
}

fn verify(data: &str, dir: &str) -> Output {
    sion(&["memory", "verify", "--data", data, dir])
}

#[test]
fn evidence_of_an_answer_is_checked_whole_and_refused_when_a_payload_is_not_the_committed_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, dir) = evidence(tmp.path(), false);
    let root = Path::new(&dir);
    for file in ["answer.sionproof", "answer.json", "answer.mcap", "README.md"] {
        assert!(root.join(file).is_file(), "{file} is missing");
    }
    let answer: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("answer.json")).expect("answer.json")).expect("JSON");
    assert_eq!(answer["format"], "sion-evidence/1");
    assert!(
        answer["asked"]
            .as_str()
            .expect("asked")
            .contains("[0, 0, -1]..[10, 8, 3] m, 2026-01-01T00:00:00.000Z")
    );
    let atoms = answer["atoms"].as_array().expect("atoms");
    let blobs: Vec<String> = std::fs::read_dir(root.join("blobs"))
        .expect("blobs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let with_blobs = atoms.iter().filter(|a| a["payload"]["blob"].is_object()).count();
    assert_eq!(blobs.len(), with_blobs, "every payload of the answer is here");
    // The demo's camera: 160 × 120 RGB frames, written as PNG.
    let frames: Vec<_> =
        std::fs::read_dir(root.join("frames")).expect("frames/").map(|e| e.expect("entry").path()).collect();
    assert!(!frames.is_empty());
    let decoder =
        png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&frames[0]).expect("a frame")));
    let info = decoder.read_info().expect("a PNG").info().clone();
    assert_eq!((info.width, info.height), (160, 120));
    // The pictures: Foxglove's scene of the answer in the MCAP.
    let mcap_bytes = std::fs::read(root.join("answer.mcap")).expect("answer.mcap");
    let topics: std::collections::BTreeSet<String> = mcap::MessageStream::new(&mcap_bytes)
        .expect("MCAP")
        .map(|m| m.expect("readable").channel.topic.clone())
        .collect();
    assert!(topics.contains("/sion/scene/answers") && topics.contains("/sion/verdicts"), "{topics:?}");
    assert!(topics.iter().any(|t| t.starts_with("/sion/camera/")), "{topics:?}");

    let o = verify(&data, &dir);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("evidence {} payloads in blobs/", blobs.len())), "{}", text(&o));

    // A payload changed by one byte, one for an atom not in the answer, one misnamed.
    let first = root.join("blobs").join(&blobs[0]);
    let kept = std::fs::read(&first).expect("a blob");
    let mut changed = kept.clone();
    changed[kept.len() / 2] ^= 1;
    std::fs::write(&first, &changed).expect("write");
    let o = verify(&data, &dir);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("(evidence_hash)"), "{}", text(&o));
    std::fs::write(&first, &kept).expect("write");
    for (name, code) in
        [("999999", "evidence_not_in_answer"), ("frame.png", "evidence_name"), ("0103", "evidence_name")]
    {
        let extra = root.join("blobs").join(name);
        std::fs::write(&extra, &kept).expect("write");
        let o = verify(&data, &dir);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", text(&o));
        assert!(text(&o).contains(&format!("({code})")), "{name}: {}", text(&o));
        std::fs::remove_file(&extra).expect("remove");
    }
    assert!(verify(&data, &dir).status.success());

    // Evidence is written into a new directory only.
    let o = sion(&[
        "memory",
        "evidence",
        "--data",
        &data,
        "--proof",
        &format!("{dir}/answer.sionproof"),
        "--out",
        &dir,
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("not empty"), "{}", text(&o));
}

#[test]
fn a_sealed_memorys_evidence_holds_its_sealed_payloads_and_the_frames_opened() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, dir) = evidence(tmp.path(), true);
    let root = Path::new(&dir);
    let sealed = std::fs::read_dir(root.join("blobs")).expect("blobs/").count();
    let opened = std::fs::read_dir(root.join("opened")).expect("opened/").count();
    let frames = std::fs::read_dir(root.join("frames")).expect("frames/").count();
    assert!(sealed > 0 && opened == sealed && frames > 0, "{sealed} {opened} {frames}");
    // The sealed bytes are what the atoms commit to; the opened frame is not them.
    let name = std::fs::read_dir(root.join("blobs"))
        .expect("blobs/")
        .next()
        .expect("one")
        .expect("entry")
        .file_name();
    assert_ne!(
        std::fs::read(root.join("blobs").join(&name)).expect("sealed"),
        std::fs::read(root.join("opened").join(&name)).expect("opened")
    );
    let o = verify(&data, &dir);
    assert!(o.status.success(), "{}", text(&o));
}
