//! kill -9 costs nothing, tested by killing: `sion brain` runs in continuous mode while atoms
//! stream in; it is SIGKILLed at random moments, restarted, and each time the memory must
//! reopen with its ledger head consistent with the log, every atom acknowledged as durable
//! must be there, and the index the brain rebuilds by replay must have the root of a
//! from-scratch build. Deleting the brain's checkpoint changes only how long recovery takes.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sion_memory::atom::{Atom, Kind};
use sion_memory::brain::COMMIT_SUBJECT;
use sion_memory::index::Index;
use sion_memory::memory::Memory;
use sion_memory::sim::{SplitMix64, Warehouse, WarehouseConfig};

mod common;

const SION: &str = env!("CARGO_BIN_EXE_sion");
const TRIALS: usize = 22;
const ATOMS: usize = 40_000;

fn config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("brain.json");
    std::fs::write(&path, r#"{"commit_period_ms": 150, "commit_every": 2000, "cognet": {"mode": {"kind": "continuous", "period_ms": 20}, "max_ticks_per_wake": 32}}"#)
        .expect("config");
    path
}

/// Run the brain fed `lines` on stdin; kill it after `kill_after` (or let it finish with
/// --until-idle when `None`). Returns the acknowledged (position, atom)s and, if it finished,
/// the index root and size it printed.
fn brain(data: &Path, cfg: &Path, lines: Vec<String>, kill_after: Option<Duration>) -> Run {
    let mut cmd = Command::new(SION);
    cmd.args(["brain", "--echo", "--input", "-", "--data"]).arg(data).arg("--config").arg(cfg);
    if kill_after.is_none() {
        cmd.arg("--until-idle");
    }
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn brain");
    let mut stdin = child.stdin.take().expect("stdin");
    let paced = kill_after.is_some();
    let feeder = std::thread::spawn(move || {
        // A sensor's pace: about 5,000 atoms a second while the brain may be killed.
        for chunk in lines.chunks(100) {
            for line in chunk {
                if writeln!(stdin, "{line}").is_err() {
                    return;
                }
            }
            if paced {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        let mut root = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("index root ") {
                let mut parts = rest.split(" at size ");
                if let (Some(r), Some(n)) = (parts.next(), parts.next()) {
                    root = n.trim().parse().ok().map(|n| (r.to_owned(), n));
                }
                continue;
            }
            let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            let Some(position) = json.get("position").and_then(|p| p.as_u64()) else { continue };
            acked.push((position, Atom::from_json(&line).expect("an echoed atom")));
        }
        (acked, root)
    });
    let mut killed_running = false;
    match kill_after {
        Some(after) => {
            let started = Instant::now();
            while started.elapsed() < after && child.try_wait().expect("poll").is_none() {
                std::thread::sleep(Duration::from_millis(2));
            }
            killed_running = child.try_wait().expect("poll").is_none();
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
        None => {
            let status = child.wait().expect("wait");
            assert!(status.success(), "the brain failed");
        }
    }
    feeder.join().expect("feeder");
    let (acked, root) = reader.join().expect("reader");
    Run { acked, root, killed_running }
}

/// What one run of the brain showed: the atoms it acknowledged, the index root and size it
/// printed when it finished, and whether it was still running when killed.
struct Run {
    acked: Vec<(u64, Atom)>,
    root: Option<(String, u64)>,
    killed_running: bool,
}

fn log_atoms(data: &Path) -> Vec<Atom> {
    let memory =
        Memory::options(data).open().expect("the memory reopens: its ledger head is consistent with its log");
    memory.log().scan(0).map(|r| r.expect("readable").1).collect()
}

#[test]
fn sigkill_the_brain_at_random_and_lose_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("memory");
    let out = Command::new(SION).args(["memory", "open", "--data"]).arg(&data).output().expect("open");
    assert!(out.status.success());
    let cfg = config(tmp.path());
    let input: Vec<String> = Warehouse::new(WarehouseConfig { seed: 5, ..Default::default() })
        .take(ATOMS)
        .map(|a| a.to_json_line(None))
        .collect();

    let mut rng = SplitMix64::new(0xb5a1);
    let mut acked: HashMap<u64, Atom> = HashMap::new();
    let mut fed = 0usize;
    let mut killed_mid_run = 0;
    for trial in 0..TRIALS {
        // Resume a little before what was taken in: repeats are no-ops.
        let from = fed.saturating_sub(300);
        let kill_after = Duration::from_millis(150 + rng.next_u64() % 600);
        let run = brain(&data, &cfg, input[from..].to_vec(), Some(kill_after));
        if run.killed_running {
            killed_mid_run += 1;
        }
        for (p, a) in run.acked {
            if let Some(before) = acked.insert(p, a.clone()) {
                assert_eq!(before, a, "position {p} changed");
            }
        }
        let atoms = log_atoms(&data);
        for (p, a) in &acked {
            assert_eq!(
                atoms.get(*p as usize),
                Some(a),
                "trial {trial}: acknowledged position {p} lost or changed"
            );
        }
        // How far the input got: the last input atom present in the log.
        let present: BTreeSet<_> = atoms.iter().map(Atom::id).collect();
        fed = input
            .iter()
            .rposition(|l| present.contains(&Atom::from_json(l).expect("atom").id()))
            .map_or(0, |i| i + 1);
        eprintln!(
            "trial {trial}: killed after {kill_after:?}; log {} atoms, input taken in up to {fed}",
            atoms.len()
        );
    }
    assert!(killed_mid_run >= 20, "only {killed_mid_run} kills landed while the brain ran");
    assert!(fed < ATOMS || acked.len() > ATOMS / 2, "the kills spread over the stream");

    // Recovery with and without the checkpoint: the same atoms, only the time differs.
    let without = tmp.path().join("without-checkpoint");
    common::copy_dir(&data, &without);
    std::fs::remove_file(without.join("brain/checkpoint.json")).ok();
    std::fs::remove_dir_all(without.join("index")).ok();
    let rest = input[fed.saturating_sub(300)..].to_vec();
    let t = Instant::now();
    let with_root = brain(&data, &cfg, rest.clone(), None).root;
    let with_time = t.elapsed();
    let t = Instant::now();
    let without_root = brain(&without, &cfg, rest, None).root;
    let without_time = t.elapsed();
    eprintln!("recovery with the checkpoint {with_time:?}, without {without_time:?}");

    for (dir, printed) in [(&data, with_root), (&without, without_root)] {
        let atoms = log_atoms(dir);
        let (root, size) = printed.expect("the brain printed its index root");
        // The index rebuilt by replay has the root of a from-scratch build of the log.
        let mut scratch = Index::build(&atoms[..size as usize]).expect("build");
        assert_eq!(root, hex::encode(scratch.root().expect("root")), "{}", dir.display());
        // Every input atom made it.
        let ids: BTreeSet<_> = atoms.iter().map(Atom::id).collect();
        assert!(input.iter().all(|l| ids.contains(&Atom::from_json(l).expect("atom").id())));
    }
    let lasting = |dir: &Path| -> BTreeSet<_> {
        log_atoms(dir)
            .into_iter()
            .filter(|a| !(a.kind() == Kind::Outcome && a.parts().subject == COMMIT_SUBJECT))
            .map(|a| a.id())
            .collect()
    };
    assert_eq!(lasting(&data), lasting(&without), "the checkpoint changes nothing but time");
    let derived =
        log_atoms(&data).iter().filter(|a| matches!(a.kind(), Kind::Trajectory | Kind::Coverage)).count();
    assert!(derived > 0, "the brain derived something");
}
