//! Crash safety, tested by killing: `sion memory remember` is SIGKILLed at random moments
//! while it writes a large input; after each kill the memory must reopen, pass `audit`, and
//! hold every atom that was reported durable, byte for byte.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sion_memory::atom::Atom;
use sion_memory::log::{Log, LogOptions};
use sion_memory::sim::{SplitMix64, Warehouse, WarehouseConfig};

const SION: &str = env!("CARGO_BIN_EXE_sion");
const ATOMS: usize = 400_000;
const TRIALS: usize = 24;

fn sion(args: &[&str]) -> std::process::Output {
    Command::new(SION).args(args).output().expect("run sion")
}

fn run_ok(args: &[&str]) -> String {
    let out = sion(args);
    assert!(out.status.success(), "sion {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Feed `lines` to `sion memory remember` on its standard input and SIGKILL it after
/// `kill_after`; returns the positions it reported durable (with `--echo`) and their atoms.
fn remember_until_killed(
    data: &Path,
    lines: Vec<String>,
    batch: u64,
    kill_after: Duration,
) -> Vec<(u64, Atom)> {
    let mut child = Command::new(SION)
        .args(["memory", "remember", "--echo", "--batch", &batch.to_string(), "--data"])
        .arg(data)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn remember");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        for line in lines {
            // The pipe breaks when the child is killed: stop feeding.
            if writeln!(stdin, "{line}").is_err() {
                break;
            }
        }
    });
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut reported = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The last line may be cut by the kill: only whole lines count.
            let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            let Some(position) = json.get("position").and_then(|p| p.as_u64()) else { continue };
            let atom = Atom::from_json(&line).expect("echoed lines are atoms with their ids");
            reported.push((position, atom));
        }
        reported
    });
    let started = Instant::now();
    while started.elapsed() < kill_after {
        if child.try_wait().expect("poll").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    feeder.join().expect("feeder");
    reader.join().expect("reader")
}

#[test]
fn sigkill_during_remember_loses_nothing_reported_durable() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("memory");
    let atoms: Vec<Atom> =
        Warehouse::new(WarehouseConfig { seed: 99, ..Default::default() }).take(ATOMS).collect();
    let lines: Vec<String> = atoms.iter().map(|a| a.to_json_line(None)).collect();
    run_ok(&["memory", "open", "--data", data.to_str().expect("utf8")]);

    let mut rng = SplitMix64::new(0x5eed);
    let mut durable: HashMap<u64, Atom> = HashMap::new();
    let mut kills_mid_run = 0;
    let mut resume_from = 0usize;
    for trial in 0..TRIALS {
        // Like a producer resuming after a crash: feed what the log lacks, starting a little
        // before it (those atoms are already held, and must come back as no-ops).
        let overlap_start = resume_from.saturating_sub(500);
        let kill_after = Duration::from_millis(30 + rng.next_u64() % 300);
        // Small batches put the kill among the writes and fsyncs more often.
        let batch = [1, 7, 97, 997, 4096][trial % 5];
        let reported = remember_until_killed(&data, lines[overlap_start..].to_vec(), batch, kill_after);
        for (position, atom) in reported {
            if let Some(earlier) = durable.insert(position, atom.clone()) {
                assert_eq!(earlier, atom, "position {position} changed between runs");
            }
        }
        let audit = sion(&["memory", "audit", "--data", data.to_str().expect("utf8")]);
        assert!(
            audit.status.success(),
            "trial {trial}: audit failed after a kill: {}{}",
            String::from_utf8_lossy(&audit.stdout),
            String::from_utf8_lossy(&audit.stderr)
        );
        {
            let (log, recovery) = Log::open(&data.join("log"), LogOptions::default()).expect("reopen");
            eprintln!(
                "trial {trial}: batches of {batch}, killed after {kill_after:?}: {} atoms in the log, {} reported durable so far, recovery {recovery:?}",
                log.size(),
                durable.len()
            );
            if log.size() < ATOMS as u64 {
                kills_mid_run += 1;
            }
            resume_from = log.size() as usize;
            for (position, atom) in &durable {
                let bytes = log.read_bytes(*position).expect("reported position is present");
                assert_eq!(bytes, atom.bytes(), "trial {trial}: position {position} differs");
            }
        }
        // Now and then commit what survived, so later runs also extend a committed head.
        if trial % 5 == 4 {
            run_ok(&["memory", "commit", "--data", data.to_str().expect("utf8")]);
        }
    }
    assert!(kills_mid_run >= 20, "only {kills_mid_run} kills landed before the input was done");
    assert!(!durable.is_empty());

    // Finish the input: every atom exactly once, in input order (no duplicates from reruns).
    let input = tmp.path().join("atoms.jsonl");
    std::fs::write(&input, lines.join("\n")).expect("input");
    run_ok(&["memory", "remember", "--data", data.to_str().expect("utf8"), input.to_str().expect("utf8")]);
    let (log, _) = Log::open(&data.join("log"), LogOptions::default()).expect("open");
    assert_eq!(log.size(), ATOMS as u64);
    for (i, atom) in atoms.iter().enumerate() {
        assert_eq!(log.position_of(atom).expect("lookup"), Some(i as u64));
    }
}

#[test]
fn a_flipped_byte_in_a_segment_is_named_by_audit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("memory");
    let d = data.to_str().expect("utf8");
    run_ok(&["memory", "open", "--data", d]);
    let input = tmp.path().join("atoms.jsonl");
    let lines: Vec<String> =
        Warehouse::new(WarehouseConfig::default()).take(500).map(|a| a.to_json_line(None)).collect();
    std::fs::write(&input, lines.join("\n")).expect("input");
    run_ok(&["memory", "remember", "--data", d, input.to_str().expect("utf8")]);
    run_ok(&["memory", "commit", "--data", d]);

    let offsets = std::fs::read(data.join("log/offsets")).expect("offsets");
    let record_321 = u64::from_le_bytes(offsets[321 * 8..322 * 8].try_into().expect("8 bytes")) as usize;
    let segment = std::fs::read_dir(data.join("log/segments"))
        .expect("dir")
        .next()
        .expect("one")
        .expect("entry")
        .path();
    let mut bytes = std::fs::read(&segment).expect("segment");
    bytes[record_321 + 30] ^= 0x04;
    std::fs::write(&segment, bytes).expect("write");

    let out = sion(&["memory", "audit", "--data", d]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("BAD at position 321"), "{stdout}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}
