//! The `sion memory` command line as a user drives it.

use std::process::{Command, Output};

const SION: &str = env!("CARGO_BIN_EXE_sion");

fn sion(args: &[&str], stdin: Option<&str>) -> Output {
    sion_bytes(args, stdin.unwrap_or_default().as_bytes())
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const A: &str = r#"{"kind":"observation","frame":"map","min":[0,0,0],"max":[1200,1000,1500],"from":1000,"to":2000,"confidence":900,"subject":"pallet-17"}"#;
const B: &str = r#"{"kind":"pose","frame":"map","min":[5,5,0],"max":[5,5,0],"from":1000,"to":1001,"confidence":990,"subject":"robot-1"}"#;
const C: &str = r#"{"kind":"note","frame":"map","min":[0,0,0],"max":[0,0,0],"from":0,"to":10,"confidence":500,"payload":{"text":"aisle 4 is blocked"}}"#;

#[test]
fn a_session_at_the_command_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("mem");
    let d = data.to_str().expect("utf8");
    let o = sion(&["memory", "open", "--data", d, "--agent", "depot/robot-1"], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "open", "--data", d], None);
    assert!(!o.status.success(), "opening twice is an error");

    // A bad line stops the run, names its line and field, and keeps what came before.
    let bad = A.replace("[1200,1000,1500]", "[1200,-1,1500]");
    let o = sion(&["memory", "remember", "--data", d, "--echo"], Some(&format!("{A}\n\n{B}\n{bad}\n{C}\n")));
    assert!(!o.status.success());
    let out = text(&o);
    assert!(out.contains("line 4: max[1]"), "{out}");
    assert!(out.contains("durable at positions 0..=1"), "{out}");
    let echoed: Vec<&str> = std::str::from_utf8(&o.stdout).expect("utf8").lines().collect();
    assert_eq!(echoed.len(), 2);
    assert!(echoed[1].contains(r#""position":1"#));

    // Skipping bad lines; remembering again is a no-op that reports existing positions.
    let o =
        sion(&["memory", "remember", "--data", d, "--skip-bad", "-"], Some(&format!("{A}\n{bad}\n{C}\n")));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("(1 new, 1 already held)"), "{}", text(&o));
    assert!(text(&o).contains("skipped 1 lines"), "{}", text(&o));

    let o = sion(&["memory", "commit", "--data", d], None);
    assert!(o.status.success() && text(&o).contains("committed 3 atoms"), "{}", text(&o));
    let o = sion(&["memory", "commit", "--data", d], None);
    assert!(text(&o).contains("nothing to commit"), "{}", text(&o));

    let o = sion(&["memory", "show", "--data", d, "--json"], None);
    let show: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(show["committed"]["size"], 3);
    assert_eq!(show["agent"], "depot/robot-1");

    let proof = tmp.path().join("p.sionproof");
    let o = sion(
        &[
            "memory",
            "prove",
            "inclusion",
            "--data",
            d,
            "--position",
            "2",
            "--out",
            proof.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "verify", proof.to_str().expect("utf8"), "--data", d], None);
    assert!(o.status.success() && text(&o).contains("VALID"), "{}", text(&o));
    assert!(text(&o).contains("aisle") || text(&o).contains("note"), "{}", text(&o));
    let o =
        sion(&["memory", "verify", proof.to_str().expect("utf8"), "--ledger-key", &"11".repeat(32)], None);
    assert!(!o.status.success());

    let cons = tmp.path().join("c.sionproof");
    let o = sion(
        &[
            "memory",
            "prove",
            "consistency",
            "--data",
            d,
            "--from",
            "1",
            "--out",
            cons.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    // Without a key of the reader's own, a valid proof is anchored by nothing outside it: it
    // says so, and exits 3, not 0.
    let o = sion(&["memory", "verify", "--json", cons.to_str().expect("utf8")], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["valid"], true);
    assert_eq!(v["anchored"], false);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let o = sion(&["memory", "verify", cons.to_str().expect("utf8")], None);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).starts_with("UNANCHORED"), "{}", text(&o));
    assert!(text(&o).contains("--ledger-key"), "{}", text(&o));
    let o = sion(&["memory", "verify", "--json", "--data", d, cons.to_str().expect("utf8")], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!((v["valid"].clone(), v["anchored"].clone()), (true.into(), true.into()));
    assert!(o.status.success(), "{}", text(&o));

    // What was seen in this box: the observation touches the query box at x = 1200.
    let rp = tmp.path().join("r.sionproof");
    let o = sion(
        &[
            "memory",
            "recall",
            "--data",
            d,
            "--frame",
            "map",
            "--box",
            "1200,0,0,2000,10,10",
            "--from",
            "1500",
            "--to",
            "1500",
            "--json",
            "--out",
            rp.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let atoms = v["claim"]["range"]["atoms"].as_array().expect("atoms");
    assert_eq!(atoms.len(), 1);
    assert_eq!(atoms[0]["subject"], "pallet-17");
    assert_eq!(v["head"]["size"], 3);
    let o = sion(&["memory", "verify", rp.to_str().expect("utf8"), "--data", d], None);
    assert!(o.status.success() && text(&o).contains("these 1 atoms"), "{}", text(&o));
    // Nothing there: an empty answer, proved.
    let o = sion(
        &[
            "memory",
            "recall",
            "--data",
            d,
            "--frame",
            "map",
            "--box",
            "-9,-9,-9,-1,-1,-1",
            "--from",
            "0",
            "--to",
            "99",
        ],
        None,
    );
    assert!(o.status.success() && text(&o).contains("these 0 atoms"), "{}", text(&o));
    let o = sion(
        &["memory", "recall", "--data", d, "--frame", "map", "--box", "1,2,3", "--from", "0", "--to", "9"],
        None,
    );
    assert!(!o.status.success() && text(&o).contains("six lengths"), "{}", text(&o));
    let o = sion(&["memory", "subject", "robot-1", "--data", d], None);
    assert!(o.status.success() && text(&o).contains("these 1 atoms are every atom"), "{}", text(&o));
    let o = sion(&["memory", "links", &"ab".repeat(32), "--data", d, "--json"], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "prove", "omission", "--data", d, "--position", "1"], None);
    assert!(!o.status.success() && text(&o).contains("not omitted"), "{}", text(&o));
    let o = sion(&["memory", "prove", "cell-omission", "--data", d, "--position", "1"], None);
    assert!(!o.status.success() && text(&o).contains("nothing omitted"), "{}", text(&o));

    let o = sion(&["memory", "prove", "inclusion", "--data", d, "--position", "3"], None);
    assert!(!o.status.success() && text(&o).contains("not committed"), "{}", text(&o));
    let o = sion(&["memory", "audit", "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "commit", "--data", d, "--seal"], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "remember", "--data", d], Some(&format!("{}\n", B.replace("1001", "1002"))));
    assert!(!o.status.success() && text(&o).contains("sealed"), "{}", text(&o));
    let o = sion(&["memory", "commit", "--data", d, "--seal"], None);
    assert!(!o.status.success() && text(&o).contains("sealed"), "{}", text(&o));

    // The library says what is wrong; the command line says what to run (a `hint:` line).
    let nowhere = tmp.path().join("nowhere");
    let o = sion(&["memory", "show", "--data", nowhere.to_str().expect("utf8")], None);
    assert!(!o.status.success() && text(&o).contains("no memory at"), "{}", text(&o));
    let hint = format!("hint: create one with `sion memory open --data {}`", nowhere.display());
    assert!(text(&o).contains(&hint), "{}", text(&o));
    let o = sion(
        &["memory", "prove", "inclusion", "--data", d, "--position", "999999", "--out", "/dev/null"],
        None,
    );
    assert!(!o.status.success() && text(&o).contains("not committed yet"), "{}", text(&o));
    assert!(text(&o).contains("hint: commit what the log holds with `sion memory commit`"), "{}", text(&o));
    let o = sion(&["memory", "--help"], None);
    assert!(o.status.success() && text(&o).contains("remember"));
}

/// One vocabulary (docs/UNITS.md): metres and millimetres, RFC 3339, seconds and nanoseconds
/// ask the same question; tf2's `/map` is `map`; a question that cannot match anything the
/// memory holds is answered and proved, with a warning that names what the memory holds.
#[test]
fn a_question_in_metres_and_ros_time() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("mem");
    let d = d.to_str().expect("utf8");
    // 2026-01-01T00:00:00Z and one second later.
    let atom = r#"{"kind":"observation","frame":"map","min":[0,0,0],"max":[1200,1000,1500],"from":1767225600000000000,"to":1767225601000000000,"confidence":900,"subject":"pallet-17"}"#;
    assert!(sion(&["memory", "open", "--data", d], None).status.success());
    assert!(sion(&["memory", "remember", "--data", d], Some(&format!("{atom}\n"))).status.success());
    assert!(sion(&["memory", "commit", "--data", d], None).status.success());
    let recall = |frame: &str, bounds: &str, from: &str, to: &str| {
        sion(
            &[
                "memory", "recall", "--data", d, "--frame", frame, "--box", bounds, "--from", from, "--to",
                to, "--json",
            ],
            None,
        )
    };
    let claim = |o: &Output| -> serde_json::Value {
        assert!(o.status.success(), "{}", text(o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json")["claim"].clone()
    };
    let in_mm = claim(&recall("map", "1200,0,0,2000,10,10", "1767225600500000000", "1767225600600000000"));
    assert_eq!(in_mm["range"]["atoms"].as_array().map(Vec::len), Some(1), "{in_mm}");
    for (frame, bounds, from, to) in [
        ("map", "1.2m,0m,0m,2m,0.01m,1cm", "2026-01-01T00:00:00.5Z", "2026-01-01T01:00:00.6+01:00"),
        ("/map", "1200mm,0,0,2m,10mm,10", "1767225600.5s", "1767225600600ms"),
    ] {
        let o = recall(frame, bounds, from, to);
        assert_eq!(claim(&o), in_mm, "{frame} {bounds} {from} {to}");
        assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"), "{}", text(&o));
    }
    // Seconds without their unit, a decimal length without its unit: the field and the fix.
    let o = recall("map", "0,0,0,1,1,1", "1767225600.5", "1767225601s");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--from") && text(&o).contains("1767225600.5s"), "{}", text(&o));
    assert!(!text(&o).contains("invalid digit"), "{}", text(&o));
    let o = recall("map", "0,0,0,1.5,1,1", "0", "1");
    assert!(!o.status.success() && text(&o).contains("X1") && text(&o).contains("1.5m"), "{}", text(&o));
    // A frame never recorded: proved empty, and a warning naming the frames held.
    let o = recall("base_footprint", "0m,0m,0m,1m,1m,1m", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z");
    let v = claim(&o);
    assert_eq!(v["range"]["atoms"].as_array().map(Vec::len), Some(0));
    assert!(
        text(&o).contains(r#"warning: the memory holds no frame "base_footprint"; it holds "map""#),
        "{}",
        text(&o)
    );
    // Seconds given as nanoseconds land in 1970: the warning gives the span the frame holds.
    let o = recall("map", "0m,0m,0m,1m,1m,1m", "1767225600", "1767225601");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2026-01-01T00:00:00.000Z .. 2026-01-01T00:00:01.000Z"), "{}", text(&o));
    assert!(text(&o).contains("1970"), "{}", text(&o));
    // A box that misses every atom (metres meant, millimetres written): the extent held.
    let o = recall("map", "2000,2000,2000,3000,3000,3000", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z");
    assert!(text(&o).contains("warning: the box [2, 2, 2]..[3, 3, 3] m misses"), "{}", text(&o));
    // --last: the last ten minutes up to now (nothing there, and it says so).
    let o = sion(
        &["memory", "recall", "--data", d, "--frame", "map", "--box", "0m,0m,0m,1m,1m,1m", "--last", "10min"],
        None,
    );
    assert!(o.status.success() && text(&o).contains("misses every atom"), "{}", text(&o));
    // verify's expected question speaks the same vocabulary.
    let proof = tmp.path().join("q.sionproof");
    let p = proof.to_str().expect("utf8");
    let o = sion(
        &[
            "memory",
            "recall",
            "--data",
            d,
            "--frame",
            "map",
            "--box",
            "0m,0m,0m,1m,1m,1m",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-01T00:00:01Z",
            "--out",
            p,
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(
        &[
            "memory",
            "verify",
            p,
            "--data",
            d,
            "--expect-frame",
            "/map",
            "--expect-box",
            "0,0,0,1000,1000,1000",
            "--expect-from",
            "1767225600s",
            "--expect-to",
            "1767225601000000000",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// `sion memory verify --expect-…`: a valid proof is refused for a question it does not answer.
#[test]
fn verify_checks_the_question_asked() {
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{suite}/manifest.json")).expect("manifest"))
            .expect("json");
    let range = manifest["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["file"] == "range.sionproof")
        .expect("range");
    let e = &range["expect"];
    let corners: Vec<String> = e["box"].as_array().expect("box").iter().map(|v| v.to_string()).collect();
    let (frame, key) = (e["frame"].as_str().expect("frame"), range["ledger_key"].as_str().expect("key"));
    let (from, to) = (e["from_ns"].to_string(), e["to_ns"].to_string());
    let file = format!("{suite}/range.sionproof");
    let ask = |corners: &str, at_least: &str| {
        sion(
            &[
                "memory",
                "verify",
                "--ledger-key",
                key,
                "--expect-frame",
                frame,
                "--expect-box",
                corners,
                "--expect-from",
                &from,
                "--expect-to",
                &to,
                "--expect-at-least",
                at_least,
                &file,
            ],
            None,
        )
    };
    let o = ask(&corners.join(","), "0");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("VALID"), "{}", text(&o));
    let mut bigger = corners.clone();
    bigger[0] = (corners[0].parse::<i64>().expect("int") - 1).to_string();
    let o = ask(&bigger.join(","), "0");
    assert!(!o.status.success());
    assert!(text(&o).contains("answers another question"), "{}", text(&o));
    let o = ask(&corners.join(","), "999999");
    assert!(!o.status.success());
    assert!(text(&o).contains("older than the 999999 atoms expected"), "{}", text(&o));
    let o = sion(&["memory", "verify", "--ledger-key", key, "--expect-subject", "nobody", &file], None);
    assert!(!o.status.success());
    assert!(text(&o).contains("answers another question"), "{}", text(&o));
    // The question's parts come together.
    let o = sion(&["memory", "verify", "--expect-frame", "map", &file], None);
    assert!(!o.status.success());
    assert!(text(&o).contains("--expect-from"), "{}", text(&o));
    let o = sion(
        &["memory", "verify", "--expect-frame", "map", "--expect-from", "0", "--expect-to", "1", &file],
        None,
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("--expect-box"), "{}", text(&o));
}

#[test]
fn last_seen_and_nearest_are_answered_with_proofs_verify_checks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("mem");
    let d = d.to_str().expect("utf8");
    // pallet-17 seen at three places, one second apart (2026-01-01T00:00:0{0,1,2}Z), and a
    // robot's pose near the last.
    let seen = |x: i64, s: i64| {
        format!(
            r#"{{"kind":"observation","frame":"map","min":[{x},0,0],"max":[{},500,500],"from":{},"to":{},"confidence":900,"subject":"pallet-17"}}"#,
            x + 500,
            1_767_225_600_000_000_000 + s * 1_000_000_000,
            1_767_225_600_000_000_000 + (s + 1) * 1_000_000_000
        )
    };
    let atoms = [seen(0, 0), seen(2_000, 1), seen(4_000, 2), B.replace("[5,5,0]", "[4600,200,0]")];
    assert!(sion(&["memory", "open", "--data", d], None).status.success());
    assert!(sion(&["memory", "remember", "--data", d], Some(&(atoms.join("\n") + "\n"))).status.success());
    assert!(sion(&["memory", "commit", "--data", d], None).status.success());
    let proof = tmp.path().join("last.sionproof");
    let p = proof.to_str().expect("utf8");
    let o = sion(
        &[
            "memory",
            "last-seen",
            "--data",
            d,
            "--frame",
            "map",
            "--box",
            "0m,0m,0m,10m,10m,1m",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-01T00:01:00Z",
            "--out",
            p,
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["claim"]["latest"]["atom"]["position"], 2, "{v}");
    let verify = |extra: &[&str], file: &str| {
        let mut args = vec!["memory", "verify", "--data", d];
        args.extend_from_slice(extra);
        args.push(file);
        sion(&args, None)
    };
    let latest_q = [
        "--expect-frame",
        "map",
        "--expect-box",
        "0m,0m,0m,10m,10m,1m",
        "--expect-from",
        "2026-01-01T00:00:00Z",
        "--expect-to",
        "2026-01-01T00:01:00Z",
    ];
    let o = verify(&[&latest_q[..], &["--expect-latest"]].concat(), p);
    assert!(o.status.success() && text(&o).contains("was seen last"), "{}", text(&o));
    // The same proof asked as a range question answers another question.
    let o = verify(&latest_q, p);
    assert!(!o.status.success() && text(&o).contains("answers another question"), "{}", text(&o));

    // The two atoms nearest to (4.2 m, 0.2 m, 0) at 00:00:02.5: only the last sighting (the
    // point is inside its box) was valid then, so the answer holds one, and says so.
    let near = tmp.path().join("near.sionproof");
    let n = near.to_str().expect("utf8");
    let o = sion(
        &[
            "memory",
            "nearest",
            "--data",
            d,
            "--frame",
            "map",
            "--point",
            "4.2m,0.2m,0m",
            "--at",
            "2026-01-01T00:00:02.5Z",
            "-k",
            "2",
            "--out",
            n,
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let got: Vec<u64> = v["claim"]["nearest"]["atoms"]
        .as_array()
        .expect("atoms")
        .iter()
        .filter_map(|a| a["position"].as_u64())
        .collect();
    assert_eq!(got, vec![2], "the pose and the earlier sightings were not valid then: {v}");
    let o = verify(
        &[
            "--expect-frame",
            "map",
            "--expect-point",
            "4200,200,0",
            "--expect-k",
            "2",
            "--expect-from",
            "2026-01-01T00:00:02.5Z",
            "--expect-to",
            "2026-01-01T00:00:02.5Z",
        ],
        n,
    );
    assert!(o.status.success() && text(&o).contains("nearest"), "{}", text(&o));
    let o = verify(
        &["--expect-frame", "map", "--expect-point", "0,0,0", "--expect-from", "0", "--expect-to", "0"],
        n,
    );
    assert!(!o.status.success() && text(&o).contains("answers another question"), "{}", text(&o));
}

fn sion_bytes(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(SION)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).expect("write");
    drop(input);
    child.wait_with_output().expect("wait")
}

#[test]
fn a_bad_byte_is_a_bad_line_and_a_sealed_log_takes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("mem");
    let d = data.to_str().expect("utf8");
    assert!(sion(&["memory", "open", "--data", d], None).status.success());

    // A line that is not UTF-8 stops the run at that line; the lines before it are durable.
    let mut input = format!("{A}\n{B}\n").into_bytes();
    input.extend_from_slice(b"{\"kind\":\"note\xff\xfe\"}\n");
    input.extend_from_slice(format!("{C}\n").as_bytes());
    let o = sion_bytes(&["memory", "remember", "--data", d, "--echo"], &input);
    assert!(!o.status.success());
    let out = text(&o);
    assert!(out.contains("line 3: not UTF-8 at byte"), "{out}");
    assert!(out.contains("durable at positions 0..=1"), "{out}");
    assert_eq!(std::str::from_utf8(&o.stdout).expect("utf8").lines().count(), 2, "{out}");

    // --skip-bad skips it and takes the rest.
    let o = sion_bytes(&["memory", "remember", "--data", d, "--skip-bad"], &input);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("(1 new, 2 already held)"), "{}", text(&o));
    assert!(text(&o).contains("skipping line 3: not UTF-8"), "{}", text(&o));

    // A sealed log refuses atoms it could never commit, and says so.
    let o = sion(&["memory", "commit", "--data", d, "--seal"], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "remember", "--data", d], Some(&format!("{}\n", A.replace("1000,", "1001,"))));
    assert!(!o.status.success());
    assert!(text(&o).contains("sealed"), "{}", text(&o));
    assert!(!text(&o).contains("durable at"), "{}", text(&o));
    let o = sion(&["memory", "show", "--data", d, "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!((v["size"].clone(), v["committed"]["sealed"].clone()), (3.into(), true.into()), "{v}");
}

/// Issue 15, requirement 8: `sion memory prove time` writes a transaction-time proof file and
/// `sion memory verify` says when the atom was recorded, by the ledger's Pulse and clock.
#[test]
fn a_transaction_time_proof_is_a_file_that_verify_reads() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("m");
    let d = d.to_str().expect("utf8");
    assert!(sion(&["memory", "open", "--data", d], None).status.success());
    let atoms = sion(&["sim", "--atoms", "300"], None).stdout;
    let (first, second) = {
        let text = String::from_utf8(atoms).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        (lines[..200].join("\n") + "\n", lines[200..].join("\n") + "\n")
    };
    for part in [first, second] {
        let o = sion(&["memory", "remember", "--data", d, "-"], Some(&part));
        assert!(o.status.success(), "{}", text(&o));
        let o = sion(&["memory", "commit", "--data", d], None);
        assert!(o.status.success(), "{}", text(&o));
    }
    let show = sion(&["memory", "show", "--data", d, "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).expect("json");
    let key = v["ledger"]["key"].as_str().expect("ledger.key").to_owned();
    let file = tmp.path().join("t.sionproof");
    let f = file.to_str().expect("utf8");
    let o = sion(&["memory", "prove", "time", "--data", d, "--position", "250", "--out", f], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "verify", "--ledger-key", &key, "--expect-recorded", "250", f], None);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("at position 250 of log 0 was recorded at Pulse"), "{out}");
    assert!(out.contains("the log held 200 atoms"), "{out}");
    let o = sion(&["memory", "verify", "--ledger-key", &key, "--expect-recorded", "10", f], None);
    assert!(!o.status.success() && text(&o).contains("answers another question"), "{}", text(&o));
    // Not yet committed: said so.
    let o = sion(&["memory", "prove", "time", "--data", d, "--position", "300", "--out", f], None);
    assert!(!o.status.success(), "{}", text(&o));
}

/// `sion memory verify`: a refusal carries its code (docs/PROOFS.md, "Refusals") in JSON and in
/// text; a proof not checked at all (the reader's input) is code `input` and exit status 2, not
/// a refusal (1); and every expectation member has its option, accepted for the proof that
/// answers it and refused with its code for one that does not.
#[test]
fn verify_gives_the_refusal_code_and_asks_every_expectation() {
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{suite}/manifest.json")).expect("manifest"))
            .expect("json");
    let key = manifest["ledger_key"].as_str().expect("ledger_key").to_owned();
    let path = |name: &str| format!("{suite}/{name}");
    let verify = |extra: &[&str], file: &str| {
        let mut args = vec!["memory", "verify", "--ledger-key", &key];
        args.extend_from_slice(extra);
        args.push(file);
        sion(&args, None)
    };
    let json = |o: &Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
    };
    // The refusal's code must match what the verifier gives: `code` beside `error`, exit 1.
    let refused = |o: &Output, code: &str| {
        assert_eq!(o.status.code(), Some(1), "{}", text(o));
        let v = json(o);
        assert_eq!(v["valid"], false, "{v}");
        assert_eq!(v["code"], code, "{v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    };
    let accepted = |o: &Output| {
        assert_eq!(o.status.code(), Some(0), "{}", text(o));
        assert_eq!(json(o)["valid"], true, "{}", text(o));
    };

    // A refusal from the file alone, in JSON and in text.
    let flipped = path("inclusion-path-flipped.sionproof");
    refused(&verify(&["--json"], &flipped), "merkle");
    let o = verify(&[], &flipped);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(&format!("INVALID {flipped} (merkle): ")), "{}", text(&o));
    let other = "11".repeat(32);
    refused(&sion(&["memory", "verify", "--json", "--ledger-key", &other, &flipped], None), "wrong_ledger");

    // Not checked: an unreadable file, a key that is not one, an option that does not read.
    for (args, file) in [
        (vec!["--json"], path("no-such-file.sionproof")),
        (vec!["--json", "--ledger-key", "abc"], path("inclusion.sionproof")),
        (vec!["--json", "--expect-extends", "2000"], path("consistency.sionproof")),
        (vec!["--json", "--expect-head", "12:zz"], path("inclusion.sionproof")),
    ] {
        let mut all = vec!["memory", "verify"];
        all.extend_from_slice(&args);
        all.push(&file);
        let o = sion(&all, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let v = json(&o);
        assert_eq!((v["valid"].clone(), v["code"].clone()), (false.into(), "input".into()), "{args:?}: {v}");
    }
    let o = sion(&["memory", "verify", &path("no-such-file.sionproof")], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("error: reading"), "{}", text(&o));
    // Two questions at once: a usage error (clap), exit 2 too.
    let o = verify(&["--expect-position", "1234", "--expect-omitted", "1234"], &path("inclusion.sionproof"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let help = text(&sion(&["memory", "verify", "--help"], None));
    assert!(help.contains("2 when it was not checked"), "{help}");

    // position (inclusion)
    let inclusion = path("inclusion.sionproof");
    accepted(&verify(&["--json", "--expect-position", "1234"], &inclusion));
    refused(&verify(&["--json", "--expect-position", "1235"], &inclusion), "other_question");
    refused(&verify(&["--json", "--expect-position", "1234"], &path("omission.sionproof")), "other_question");
    // omitted
    let omission = path("omission.sionproof");
    accepted(&verify(&["--json", "--expect-omitted", "123"], &omission));
    refused(&verify(&["--json", "--expect-omitted", "124"], &omission), "other_question");
    refused(&verify(&["--json", "--expect-omitted", "1234"], &inclusion), "other_question");
    // extends (consistency)
    let consistency = path("consistency.sionproof");
    let case = manifest["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["file"] == "consistency.sionproof")
        .expect("consistency case");
    let old_root = case["expect"]["extends"]["root"].as_str().expect("root");
    let old = format!("2000:{old_root}");
    accepted(&verify(&["--json", "--expect-extends", &old], &consistency));
    refused(
        &verify(&["--json", "--expect-extends", &format!("1999:{old_root}")], &consistency),
        "other_question",
    );
    refused(
        &verify(&["--json", "--expect-extends", &format!("2000:{}", "00".repeat(32))], &consistency),
        "other_question",
    );
    refused(&verify(&["--json", "--expect-extends", &old], &inclusion), "other_question");
    // log
    accepted(&verify(&["--json", "--expect-log", "0", "--expect-position", "1234"], &inclusion));
    refused(&verify(&["--json", "--expect-log", "1", "--expect-position", "1234"], &inclusion), "other_log");
    // head: exactly the one the proof answers as of, as `--json` printed it.
    let o = verify(&["--json"], &inclusion);
    accepted(&o);
    let head = json(&o)["head"].clone();
    let (size, root) = (head["size"].as_u64().expect("size"), head["root"].as_str().expect("root"));
    accepted(&verify(&["--json", "--expect-head", &format!("{size}:{root}")], &inclusion));
    refused(&verify(&["--json", "--expect-head", &format!("{}:{root}", size + 1)], &inclusion), "other_head");
    refused(
        &verify(&["--json", "--expect-head", &format!("{size}:{}", "11".repeat(32))], &inclusion),
        "other_head",
    );
    // The order of docs/PROOFS.md: the log before the head, the head before the question.
    let wrong_head = format!("{size}:{}", "11".repeat(32));
    let wrong = ["--expect-head", &wrong_head, "--expect-position", "9", "--json"];
    refused(&verify(&[&["--expect-log", "1"][..], &wrong].concat(), &inclusion), "other_log");
    refused(&verify(&wrong, &inclusion), "other_head");
}

/// A frame gets out of a memory in the clear too (`open-payload`), as it was given, checked
/// against the hash its atom commits to.
#[test]
fn open_payload_gets_a_frame_out_of_a_memory_in_the_clear() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("m");
    let d = d.to_str().expect("utf8");
    let bag = concat!(env!("CARGO_MANIFEST_DIR"), "/bags/demo.mcap");
    let o = sion(&["replay", bag, "--data", d], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = sion(&["memory", "dump", "--data", d], None);
    let frame = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|a| {
            a["payload"]["blob"]["media_type"].as_str().is_some_and(|m| m.contains("sensor_msgs/msg/Image"))
        })
        .expect("a camera frame with its image");
    let out = tmp.path().join("frame.cdr");
    let position = frame["position"].to_string();
    let o = sion(
        &[
            "memory",
            "open-payload",
            "--data",
            d,
            "--position",
            &position,
            "--out",
            out.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(&out).expect("frame");
    assert_eq!(bytes.len() as u64, frame["payload"]["blob"]["size"].as_u64().expect("size"));
    assert_eq!(
        blake3::hash(&bytes).to_hex().to_string(),
        frame["payload"]["blob"]["hash"].as_str().expect("hash")
    );
}

/// `recall --kind`: the observations in a box crowded with poses, proved complete for
/// observations alone; `verify --expect-kind` checks the question, and a proof about one kind
/// does not answer a question about every kind.
/// `recall --subject`, `count --subject` and `last-seen --subject` answer about one subject's
/// atoms, from its own tree; `verify --expect-about` checks the proof is about that subject,
/// and refuses it as the answer to the question about every subject.
#[test]
fn recall_about_a_subject_is_proved_for_that_subject_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("mem");
    let d = d.to_str().expect("utf8");
    let atoms: Vec<String> = (0..12)
        .map(|i| {
            format!(
                r#"{{"kind":"observation","frame":"map","min":[{x},0,0],"max":[{},500,500],"from":{},"to":{},"confidence":900,"subject":"pallet-{}"}}"#,
                i * 300 + 500,
                1_767_225_600_000_000_000i64 + i * 1_000_000_000,
                1_767_225_600_000_000_000i64 + (i + 1) * 1_000_000_000,
                i % 3,
                x = i * 300,
            )
        })
        .collect();
    assert!(sion(&["memory", "open", "--data", d], None).status.success());
    assert!(sion(&["memory", "remember", "--data", d], Some(&(atoms.join("\n") + "\n"))).status.success());
    assert!(sion(&["memory", "commit", "--data", d], None).status.success());
    let question = [
        "--frame",
        "map",
        "--box",
        "0m,0m,0m,10m,10m,1m",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:01:00Z",
    ];
    let ask = |what: &str, extra: &[&str]| {
        let mut args = vec!["memory", what, "--data", d, "--json"];
        args.extend_from_slice(&question);
        args.extend_from_slice(extra);
        sion(&args, None)
    };
    let proof = tmp.path().join("pallet.sionproof");
    let p = proof.to_str().expect("utf8");
    let o = ask("recall", &["--subject", "pallet-1", "--out", p]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let positions: Vec<u64> = v["claim"]["range"]["atoms"]
        .as_array()
        .expect("atoms")
        .iter()
        .filter_map(|a| a["position"].as_u64())
        .collect();
    assert_eq!(positions, [1, 4, 7, 10], "{v}");
    assert_eq!(v["claim"]["range"]["subject"], "pallet-1", "{v}");
    let o = ask("count", &["--subject", "pallet-2"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["claim"]["count"]["count"].as_u64(), Some(4), "{v}");
    let o = ask("last-seen", &["--subject", "pallet-0"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["claim"]["latest"]["atom"]["position"].as_u64(), Some(9), "{v}");
    let o = ask("recall", &["--subject", "nobody"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["claim"]["range"]["atoms"].as_array().map(Vec::len), Some(0), "{v}");
    let o = ask("recall", &["--subject", "bad\u{7}subject"]);
    assert!(!o.status.success() && text(&o).contains("subject"), "{}", text(&o));

    let verify = |extra: &[&str]| {
        let mut args = vec![
            "memory",
            "verify",
            "--data",
            d,
            "--expect-frame",
            "map",
            "--expect-box",
            "0m,0m,0m,10m,10m,1m",
            "--expect-from",
            "2026-01-01T00:00:00Z",
            "--expect-to",
            "2026-01-01T00:01:00Z",
        ];
        args.extend_from_slice(extra);
        args.push(p);
        sion(&args, None)
    };
    let o = verify(&["--expect-about", "pallet-1"]);
    assert!(o.status.success() && text(&o).contains("about \"pallet-1\""), "{}", text(&o));
    let o = verify(&[]);
    assert!(!o.status.success() && text(&o).contains("answers another question"), "{}", text(&o));
    let o = verify(&["--expect-about", "pallet-2"]);
    assert!(!o.status.success() && text(&o).contains("answers another question"), "{}", text(&o));
}

#[test]
fn recall_of_a_kind_is_proved_for_that_kind_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().join("mem");
    let d = d.to_str().expect("utf8");
    let atom = |kind: &str, x: i64, s: i64| {
        format!(
            r#"{{"kind":"{kind}","frame":"map","min":[{x},0,0],"max":[{},500,500],"from":{},"to":{},"confidence":900}}"#,
            x + 500,
            1_767_225_600_000_000_000 + s * 1_000_000_000,
            1_767_225_600_000_000_000 + (s + 1) * 1_000_000_000
        )
    };
    let atoms: Vec<String> =
        (0..12).map(|i| atom(if i % 4 == 0 { "observation" } else { "pose" }, i * 300, i)).collect();
    assert!(sion(&["memory", "open", "--data", d], None).status.success());
    assert!(sion(&["memory", "remember", "--data", d], Some(&(atoms.join("\n") + "\n"))).status.success());
    assert!(sion(&["memory", "commit", "--data", d], None).status.success());
    let question = [
        "--frame",
        "map",
        "--box",
        "0m,0m,0m,10m,10m,1m",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:01:00Z",
    ];
    let recall = |extra: &[&str]| {
        let mut args = vec!["memory", "recall", "--data", d, "--json"];
        args.extend_from_slice(&question);
        args.extend_from_slice(extra);
        sion(&args, None)
    };
    let proof = tmp.path().join("obs.sionproof");
    let p = proof.to_str().expect("utf8");
    let o = recall(&["--kind", "observation", "--out", p]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let kinds: Vec<&str> = v["claim"]["range"]["atoms"]
        .as_array()
        .expect("atoms")
        .iter()
        .filter_map(|a| a["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["observation"; 3], "{v}");
    let o = recall(&["--kind", "pose,observation"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["claim"]["range"]["atoms"].as_array().map(Vec::len), Some(12), "{v}");
    let o = recall(&["--kind", "person"]);
    assert!(!o.status.success() && text(&o).contains("not a kind of atom"), "{}", text(&o));

    let expect = [
        "--expect-frame",
        "map",
        "--expect-box",
        "0m,0m,0m,10m,10m,1m",
        "--expect-from",
        "2026-01-01T00:00:00Z",
        "--expect-to",
        "2026-01-01T00:01:00Z",
    ];
    let verify_count = |extra: &[&str], file: &str| {
        let mut args = vec!["memory", "verify", "--data", d];
        args.extend_from_slice(&expect);
        args.extend_from_slice(extra);
        args.push(file);
        sion(&args, None)
    };
    let verify = |extra: &[&str]| verify_count(extra, p);
    let o = verify(&["--expect-kind", "observation"]);
    assert!(o.status.success() && text(&o).contains("kind observation"), "{}", text(&o));
    let o = verify(&[]);
    assert!(!o.status.success() && text(&o).contains("answers another question"), "{}", text(&o));

    // How many observations, for how long: three, a second each, from 00:00:00 to 00:00:09.
    let count = tmp.path().join("count.sionproof");
    let c = count.to_str().expect("utf8");
    let mut args = vec!["memory", "count", "--data", d, "--json", "--kind", "observation", "--out", c];
    args.extend_from_slice(&question);
    let o = sion(&args, None);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let counted = &v["claim"]["count"];
    assert_eq!(
        (counted["count"].as_u64(), counted["duration_ns"].as_u64()),
        (Some(3), Some(3_000_000_000)),
        "{v}"
    );
    assert_eq!(counted["first"].as_i64(), Some(1_767_225_600_000_000_000), "{v}");
    assert_eq!(counted["last"].as_i64(), Some(1_767_225_609_000_000_000), "{v}");
    let o = verify_count(&["--expect-count", "--expect-kind", "observation"], c);
    assert!(o.status.success() && text(&o).contains("holds 3 atoms"), "{}", text(&o));
    // Asked about a year the memory does not hold: answered (zero), proved, and warned about.
    let o = sion(
        &[
            "memory",
            "count",
            "--data",
            d,
            "--json",
            "--frame",
            "map",
            "--box",
            "0m,0m,0m,10m,10m,1m",
            "--from",
            "2020-01-01T00:00:00Z",
            "--to",
            "2020-01-02T00:00:00Z",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["claim"]["count"]["count"], 0, "{v}");
    assert!(v["warnings"].as_array().is_some_and(|w| !w.is_empty()), "{v}");
}

/// A writer that withheld its atoms' cells (made with the library: the command line never
/// does) is convicted at the command line, and the proof checked as the reader asks.
#[test]
fn a_cell_omission_is_proved_and_checked_at_the_command_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("liar");
    let d = data.to_str().expect("utf8");
    let mut liar = sion_memory::memory::Memory::options(&data).create().expect("create");
    liar.withhold_cells();
    let atoms: Vec<_> =
        sion_memory::sim::Warehouse::new(sion_memory::sim::WarehouseConfig::default()).take(50).collect();
    liar.remember(atoms).expect("remember");
    liar.commit(false).expect("commit");
    drop(liar);
    let out = tmp.path().join("c.sionproof");
    let o = sion(
        &[
            "memory",
            "prove",
            "cell-omission",
            "--data",
            d,
            "--position",
            "9",
            "--out",
            out.to_str().expect("utf8"),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    let f = out.to_str().expect("utf8");
    let o = sion(&["memory", "verify", f, "--data", d, "--expect-cell-omitted", "9"], None);
    assert!(o.status.success() && text(&o).contains("broke the cells rule"), "{}", text(&o));
    let o = sion(&["memory", "verify", f, "--data", d, "--expect-cell-omitted", "8", "--json"], None);
    assert!(!o.status.success() && text(&o).contains("other_question"), "{}", text(&o));
}
