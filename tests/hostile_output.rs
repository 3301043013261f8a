//! Output that cannot be written: every command that prints, run with its standard output on
//! `/dev/full` (each write fails with ENOSPC), must fail with exit status 1 and say why — never
//! panic (status 101), never report success for output that was lost.

use std::process::{Command, Output, Stdio};

const SION: &str = env!("CARGO_BIN_EXE_sion");

fn run(args: &[&str], stdout: Stdio) -> Output {
    Command::new(SION)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("spawn")
}

fn full() -> Stdio {
    Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full"))
}

fn ok(args: &[&str]) -> Output {
    let o = run(args, Stdio::piped());
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

#[test]
fn every_command_says_when_its_output_is_lost() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here; nothing to test");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("mem");
    let d = data.to_str().expect("utf8");
    ok(&["memory", "open", "--data", d]);
    let atoms = ok(&["sim", "--atoms", "300"]).stdout;
    let jsonl = tmp.path().join("atoms.jsonl");
    std::fs::write(&jsonl, &atoms).expect("write atoms");
    let j = jsonl.to_str().expect("utf8");
    ok(&["memory", "remember", "--data", d, j]);
    ok(&["memory", "commit", "--data", d]);
    let proof = tmp.path().join("p.sionproof");
    let p = proof.to_str().expect("utf8");
    ok(&["memory", "prove", "inclusion", "--data", d, "--position", "3", "--out", p]);
    let bag = tmp.path().join("out.mcap");
    let b = bag.to_str().expect("utf8");
    let big = "-100000,-100000,-100000,100000,100000,100000";
    let when = ["--from", "0", "--to", "9223372036854775807"];

    let mut cases: Vec<Vec<&str>> = vec![
        vec!["sim", "--atoms", "100000"],
        vec!["memory", "dump", "--data", d],
        vec!["memory", "show", "--data", d],
        vec!["memory", "show", "--data", d, "--json"],
        vec!["memory", "verify", p, "--data", d],
        vec!["memory", "verify", p, "--data", d, "--json"],
        vec!["memory", "audit", "--data", d],
        vec!["memory", "subject", "robot-1", "--data", d],
        vec!["memory", "remember", "--data", d, "--echo", j],
        vec!["memory", "commit", "--data", d],
        vec!["memory", "prove", "inclusion", "--data", d, "--position", "4", "--out", "/dev/full"],
        vec!["export", "--data", d, "--out", "/dev/full"],
        vec!["export", "--data", d, "--out", b],
    ];
    let mut recall = vec!["memory", "recall", "--data", d, "--frame", "map", "--box", big];
    recall.extend(when);
    cases.push(recall.clone());
    recall.push("--json");
    cases.push(recall);

    for args in &cases {
        let o = run(args, full());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert_eq!(o.status.code(), Some(1), "{args:?} must fail when its output is lost: {err}");
        assert!(err.contains("No space left on device"), "{args:?} must say why: {err}");
    }
}
