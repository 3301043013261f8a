//! Fleet recall (issue 35, requirement 3; docs/PROOFS.md, "Fleet recall"): one range question
//! asked of 20 robots' memories on one fleet ledger (real etcd, the gRPC service), answered as
//! of one Pulse with every log's leaf at it, so the reader recomputes the signed state root and
//! knows the set of logs is whole. A robot left out, a robot answering as of an older head
//! (stale), a robot answering another question or with bytes that do not hold (lying), a log's
//! leaf changed, and another ledger key are each refused, naming the log.
#![cfg(feature = "sim")]

use std::net::SocketAddr;
use std::time::Instant;

use ed25519_dalek::SigningKey;
use sion_fleet::FleetLedger;
use sion_fleet::local::Etcd;
use sion_fleet::service::Service;
use sion_memory::fleet::{Gap, RemoteLedger, options_on, recall_bundle, recall_by_cells};
use sion_memory::memory::Memory;
use sion_verify::atom::BoxMm;
use sion_verify::index::geom::Query;
use sion_verify::proof::fleet::{FleetBundle, FleetError, verify_fleet};

/// 20 robots; `SION_FLEET_ROBOTS=200` for the figure at 200 (docs/PROOFS.md, "Fleet recall").
fn robots() -> usize {
    std::env::var("SION_FLEET_ROBOTS").ok().and_then(|v| v.parse().ok()).filter(|n| *n >= 8).unwrap_or(20)
}
const DAY_NS: i64 = 24 * 3_600 * 1_000_000_000;

fn question(from_ns: i64, days: i64, half: bool) -> Query {
    let max = if half { [500_000, 1_000_000, 30_000] } else { [1_000_000, 1_000_000, 30_000] };
    let bounds = BoxMm { min_mm: [0, 0, 0], max_mm: max };
    Query::new("map", bounds, from_ns, from_ns + days * DAY_NS).expect("query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_recall_is_complete_across_robots_and_names_the_one_left_out_stale_or_lying() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[81; 32]);
    let prefix = "/sion-ledger/recall/";
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let port = sion_fleet::local::free_port().expect("port");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let service =
        Service::new(FleetLedger::connect(&[etcd.url()], prefix, key.clone()).await.expect("serve"));
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let url = format!("http://{addr}");
    let public = key.verifying_key();
    let dir = tmp.path().to_owned();

    tokio::task::spawn_blocking(move || {
        let robots = robots();
        let start = sion_sim::WarehouseConfig::default().start_ns;
        let q = question(start, 10, false);
        let mut memories: Vec<Memory> = (0..robots)
            .map(|i| {
                let d = dir.join(format!("robot-{i:03}"));
                let agent = format!("robot-{i:03}");
                let mut m = options_on(&d, Some(&url)).expect("options").agent(agent.as_str()).create().expect("create");
                // The last robot withholds its cells (the ledger keeps them: docs/FLEET-LEDGER.md,
                // "Cells"): a recall by cells misses it, and its omission convicts it.
                if i == robots - 1 {
                    m.withhold_cells();
                }
                let atoms: Vec<_> = sion_sim::MonthInAWarehouse::new(150, i as u64 + 1).collect();
                m.remember(atoms).expect("remember");
                m.commit(false).expect("commit");
                m
            })
            .collect();
        let link = RemoteLedger::connect(&url).expect("link");

        // Every robot answers: the bundle holds, and its answer is each robot's own.
        let (first, gaps) = recall_bundle(&link, None, &q, None, &memories, |_, _| {}).expect("bundle");
        assert!(gaps.is_empty(), "{gaps:?}");
        let bytes = first.encode();
        let started = Instant::now();
        let answer = verify_fleet(&bytes, &public, &q, None).expect("the whole fleet's answer holds");
        let took = started.elapsed();
        assert_eq!((answer.in_scope, answer.logs.len()), (robots, robots));
        let each: usize = memories
            .iter()
            .map(|m| match m.prove_range(&q, None).expect("prove").verify(Some(&public)).expect("verify").claim {
                sion_verify::proof::Claim::Range { atoms, .. } => atoms.len(),
                _ => unreachable!("a range proof"),
            })
            .sum();
        assert!(each > 0, "the question meets some atoms");
        assert_eq!(answer.atoms(), each);
        eprintln!(
            "fleet recall, {robots} robots: {} atoms, bundle {} bytes ({:.1} KiB), checked in {:.1} ms",
            answer.atoms(),
            bytes.len(),
            bytes.len() as f64 / 1024.0,
            took.as_secs_f64() * 1e3
        );

        // Left out: the bundle made without robot 0's memory says so, and its reader refuses it.
        let (partial, gaps) = recall_bundle(&link, None, &q, None, &memories[1..], |_, _| {}).expect("bundle");
        assert!(matches!(gaps.as_slice(), [Gap::NotGiven { log: 0, .. }]), "{gaps:?}");
        match verify_fleet(&partial.encode(), &public, &q, None) {
            Err(FleetError::LeftOut { log, agent, .. }) => {
                assert_eq!((log.0, agent.as_deref()), (0, Some("robot-000")))
            }
            other => panic!("a robot left out was not refused: {other:?}"),
        }

        // Robot 5 records more; the fleet is asked again as of the new Pulse.
        let more: Vec<_> = sion_sim::MonthInAWarehouse::new(400, 99).skip(150).collect();
        memories[5].remember(more).expect("remember");
        memories[5].commit(false).expect("commit");
        let (second, gaps) = recall_bundle(&link, None, &q, None, &memories, |_, _| {}).expect("bundle");
        assert!(gaps.is_empty(), "{gaps:?}");
        verify_fleet(&second.encode(), &public, &q, None).expect("the second answer holds");
        let answer_of = |b: &FleetBundle, log: u64| b.answers.iter().find(|(id, _)| id.0 == log).expect("answer").1.clone();

        // Stale: robot 5's answer as of its older head, in the newer bundle.
        let mut stale = second.clone();
        let old = answer_of(&first, memories[5].log_id().0);
        stale.answers.iter_mut().find(|(id, _)| *id == memories[5].log_id()).expect("5").1 = old;
        match verify_fleet(&stale.encode(), &public, &q, None) {
            Err(FleetError::Stale { log, proved, size, .. }) => {
                assert_eq!(log, memories[5].log_id());
                assert!(proved < size, "{proved} < {size}");
            }
            other => panic!("a stale answer was not refused: {other:?}"),
        }

        // Lying: robot 7 answers a smaller box (valid for it, not the question), then bytes
        // that do not hold.
        let mut lying = second.clone();
        let smaller = memories[7].prove_range(&question(start, 10, true), None).expect("prove").encode();
        lying.answers.iter_mut().find(|(id, _)| *id == memories[7].log_id()).expect("7").1 = smaller;
        assert!(
            matches!(verify_fleet(&lying.encode(), &public, &q, None), Err(FleetError::Lying { log, .. }) if log == memories[7].log_id())
        );
        let mut garbled = second.clone();
        let a = &mut garbled.answers.iter_mut().find(|(id, _)| *id == memories[7].log_id()).expect("7").1;
        let at = a.len() - 40;
        a[at] ^= 1;
        assert!(
            matches!(verify_fleet(&garbled.encode(), &public, &q, None), Err(FleetError::Lying { log, .. }) if log == memories[7].log_id())
        );

        // The set of logs changed (a leaf said to be smaller): not the signed state.
        let mut shrunk = second.clone();
        shrunk.logs[3].head.size -= 1;
        assert!(matches!(verify_fleet(&shrunk.encode(), &public, &q, None), Err(FleetError::StateRoot { .. })));
        // Another ledger's key, and another question, are refused.
        let other = SigningKey::from_bytes(&[82; 32]).verifying_key();
        assert!(matches!(verify_fleet(&second.encode(), &other, &q, None), Err(FleetError::Signature(_))));
        assert!(verify_fleet(&second.encode(), &public, &question(start, 11, false), None).is_err());

        // The conformance files (tests/conformance/fleet/), written on request from this run:
        // `SION_FLEET_ROBOTS=8 SION_WRITE_FLEET_FIXTURES=1 cargo test --test fleet_recall`.
        if std::env::var_os("SION_WRITE_FLEET_FIXTURES").is_some() {
            let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fleet");
            std::fs::create_dir_all(&out).expect("dir");
            let atoms = verify_fleet(&second.encode(), &public, &q, None).expect("second").atoms();
            for (name, b) in [("valid", &second), ("left-out", &partial), ("stale", &stale), ("lying", &lying)] {
                std::fs::write(out.join(format!("{name}.sionfleet")), b.encode()).expect("write");
            }
            let question = serde_json::json!({
                "ledger_key": hex::encode(public.to_bytes()),
                "frame": q.frame, "box": [0, 0, 0, 1_000_000, 1_000_000, 30_000],
                "from_ns": q.from_ns, "to_ns": q.to_ns,
                "valid": { "atoms": atoms, "in_scope": robots },
                "refused": { "left-out": "left_out", "stale": "stale", "lying": "lying" },
            });
            std::fs::write(out.join("question.json"), serde_json::to_string_pretty(&question).expect("json") + "\n")
                .expect("write");
        }

        // A group: one agent's logs only; the same bundle is not the whole fleet's answer.
        let (one, gaps) = recall_bundle(&link, None, &q, Some("robot-003"), &memories, |_, _| {}).expect("bundle");
        assert_eq!(gaps.iter().filter(|g| matches!(g, Gap::OutOfScope { .. })).count(), robots - 1);
        let answer = verify_fleet(&one.encode(), &public, &q, Some("robot-003")).expect("the group's answer");
        assert_eq!((answer.in_scope, answer.logs.len()), (1, 1));
        assert!(matches!(verify_fleet(&one.encode(), &public, &q, None), Err(FleetError::LeftOut { .. })));

        // By cells (SIONFLT2): only the logs the box's cells list are stated and answer — every
        // robot but the one that withheld its cells, whose own memory convicts it (kind 10).
        let (every, _) = recall_bundle(&link, None, &q, None, &memories, |_, _| {}).expect("bundle");
        let every = verify_fleet(&every.encode(), &public, &q, None).expect("every log");
        let (cells, gaps) =
            recall_by_cells(&link, None, &q, None, &memories, 1 << 30, |_, _| {}).expect("by cells");
        let liar = memories[robots - 1].log_id();
        assert!(matches!(gaps.as_slice(), [Gap::OutOfScope { log }] if *log == liar.0), "{gaps:?}");
        let cell_bytes = cells.encode();
        let started = Instant::now();
        let by_cells = verify_fleet(&cell_bytes, &public, &q, None).expect("the answer by cells holds");
        let cells_took = started.elapsed();
        assert_eq!(by_cells.logs.len(), robots - 1);
        assert!(!by_cells.logs.iter().any(|l| l.log == liar));
        let withheld = every.logs.iter().find(|l| l.log == liar).map_or(0, |l| l.atoms.len());
        assert!(withheld > 0, "the liar was in the box");
        assert_eq!(by_cells.atoms() + withheld, every.atoms());
        let convicted = memories[robots - 1].prove_cell_omission(0).expect("the liar's omission");
        convicted.verify(Some(&public)).expect("the omission holds, attested by the fleet ledger");
        let mut edited = cells.clone();
        for n in &mut edited.cells {
            if let sion_verify::proof::fleet::CellNode::Listed(_, ids) = n {
                ids.push(u64::MAX - 1);
            }
        }
        assert_eq!(verify_fleet(&edited.encode(), &public, &q, None).expect_err("edited").code(), "cells");
        eprintln!(
            "fleet recall by cells, {robots} robots: {} logs stated, bundle {} bytes ({:.1} KiB), checked in {:.1} ms",
            cells.logs.len(),
            cell_bytes.len(),
            cell_bytes.len() as f64 / 1024.0,
            cells_took.as_secs_f64() * 1e3
        );

        // A 50 m × 50 m corner of the 1 km warehouse: by cells, only the robots whose atoms lie
        // there are stated; every log, all of them.
        let corner = BoxMm { min_mm: [100_000, 100_000, 0], max_mm: [150_000, 150_000, 30_000] };
        let small = Query::new("map", corner, start, start + 10 * DAY_NS).expect("query");
        let (every, _) = recall_bundle(&link, None, &small, None, &memories, |_, _| {}).expect("bundle");
        let (cells, _) = recall_by_cells(&link, None, &small, None, &memories, 1 << 30, |_, _| {}).expect("cells");
        let (every_bytes, cell_bytes) = (every.encode(), cells.encode());
        let started = Instant::now();
        let all = verify_fleet(&every_bytes, &public, &small, None).expect("every log");
        let every_took = started.elapsed();
        let started = Instant::now();
        let listed = verify_fleet(&cell_bytes, &public, &small, None).expect("by cells");
        let cells_took = started.elapsed();
        let withheld_here = all.logs.iter().find(|l| l.log == liar).map_or(0, |l| l.atoms.len());
        assert_eq!(listed.atoms() + withheld_here, all.atoms());
        eprintln!(
            "a 50 m × 50 m box, {robots} robots, {} atoms: every log {:.1} KiB, checked in {:.1} ms; by cells {} logs stated, {:.1} KiB, checked in {:.1} ms",
            all.atoms(),
            every_bytes.len() as f64 / 1024.0,
            every_took.as_secs_f64() * 1e3,
            cells.logs.len(),
            cell_bytes.len() as f64 / 1024.0,
            cells_took.as_secs_f64() * 1e3
        );

        // The same from the command line, as an operator asks it and an auditor checks it.
        let out = dir.join("fleet.bundle");
        let (from, to) = (q.from_ns.to_string(), q.to_ns.to_string());
        let question = ["--frame", "map", "--box", "0,0,0,1000000,1000000,30000", "--from", &from, "--to", &to];
        let mut recall = std::process::Command::new(env!("CARGO_BIN_EXE_sion"));
        recall.args(["fleet", "recall", "--ledger", &url, "-o", out.to_str().expect("utf8")]).args(question);
        for i in 0..robots {
            recall.arg("--memory").arg(dir.join(format!("robot-{i:03}")));
        }
        let o = recall.output().expect("sion fleet recall");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_sion"))
            .args(["fleet", "verify", out.to_str().expect("utf8"), "--ledger-key", &hex::encode(public.to_bytes())])
            .args(question)
            .output()
            .expect("sion fleet verify");
        let said = String::from_utf8_lossy(&o.stdout);
        let atoms = verify_fleet(&second.encode(), &public, &q, None).expect("second").atoms();
        assert!(o.status.success() && said.contains(&format!("VALID: {atoms} atom(s) from {robots} log(s)")), "{said}");
        // By cells, from the command line: the robots the box's cells list, checked alike.
        let by_cells_out = dir.join("fleet-cells.bundle");
        let mut recall = std::process::Command::new(env!("CARGO_BIN_EXE_sion"));
        recall
            .args(["fleet", "recall", "--by-cells", "--ledger", &url, "-o", by_cells_out.to_str().expect("utf8")])
            .args(question);
        for i in 0..robots {
            recall.arg("--memory").arg(dir.join(format!("robot-{i:03}")));
        }
        let o = recall.output().expect("sion fleet recall --by-cells");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_sion"))
            .args(["fleet", "verify", by_cells_out.to_str().expect("utf8"), "--ledger-key", &hex::encode(public.to_bytes())])
            .args(question)
            .output()
            .expect("sion fleet verify");
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && said.contains(&format!("VALID: {} atom(s) from {} log(s)", atoms - withheld, robots - 1)), "{said}");
        // Without robot 0's memory: named, and nothing written unless asked.
        let mut short = std::process::Command::new(env!("CARGO_BIN_EXE_sion"));
        short.args(["fleet", "recall", "--ledger", &url, "-o", dir.join("short").to_str().expect("utf8")]).args(question);
        for i in 1..robots {
            short.arg("--memory").arg(dir.join(format!("robot-{i:03}")));
        }
        let o = short.output().expect("sion fleet recall");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("log 0 (robot-000)") && !dir.join("short").exists(), "{err}");
    })
    .await
    .expect("fleet recall");
}

/// The conformance files of fleet recall (tests/conformance/fleet/, made by the test above):
/// the valid bundle holds with its count, each broken one is refused with its code — what the
/// Python package checks too (python/tests/test_conformance.py).
#[test]
fn the_fleet_recall_conformance_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/fleet");
    let q: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("question.json")).expect("question"))
            .expect("json");
    let key = ed25519_dalek::VerifyingKey::from_bytes(
        &hex::decode(q["ledger_key"].as_str().expect("key")).expect("hex").try_into().expect("32"),
    )
    .expect("key");
    let b: Vec<i64> = q["box"].as_array().expect("box").iter().map(|v| v.as_i64().expect("mm")).collect();
    let bounds = BoxMm { min_mm: [b[0], b[1], b[2]], max_mm: [b[3], b[4], b[5]] };
    let query = Query::new(
        q["frame"].as_str().expect("frame"),
        bounds,
        q["from_ns"].as_i64().expect("from"),
        q["to_ns"].as_i64().expect("to"),
    )
    .expect("query");
    let valid = verify_fleet(&std::fs::read(dir.join("valid.sionfleet")).expect("valid"), &key, &query, None)
        .expect("the valid bundle holds");
    assert_eq!(valid.atoms() as u64, q["valid"]["atoms"].as_u64().expect("atoms"));
    assert_eq!(valid.in_scope as u64, q["valid"]["in_scope"].as_u64().expect("in scope"));
    // What a hostile bundle maker could try besides: an answer for a log past the logs, two
    // answers for one log, a group that is no agent name, and cut bytes.
    let bytes = std::fs::read(dir.join("valid.sionfleet")).expect("valid");
    let bundle = FleetBundle::decode(&bytes).expect("decode");
    let mut past = bundle.clone();
    let n = past.logs.len() as u64;
    past.answers.last_mut().expect("answers").0 = sion_verify::ledger::LogId(n);
    assert_eq!(verify_fleet(&past.encode(), &key, &query, None).expect_err("past").code(), "not_asked");
    let mut twice = bundle.clone();
    twice.answers.insert(1, twice.answers[0].clone());
    assert_eq!(verify_fleet(&twice.encode(), &key, &query, None).expect_err("twice").code(), "malformed");
    for group in ["", "robot-001/", "Robot-001"] {
        assert_eq!(verify_fleet(&bytes, &key, &query, Some(group)).expect_err(group).code(), "group");
    }
    for cut in [7, 100, bytes.len() - 1] {
        assert_eq!(verify_fleet(&bytes[..cut], &key, &query, None).expect_err("cut").code(), "malformed");
    }
    for (name, code) in q["refused"].as_object().expect("refused") {
        let bytes = std::fs::read(dir.join(format!("{name}.sionfleet"))).expect("file");
        let e = verify_fleet(&bytes, &key, &query, None).expect_err(name);
        assert_eq!(e.code(), code.as_str().expect("code"), "{name}: {e}");
    }
}
