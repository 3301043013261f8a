//! Issue 30, finding 1, on a real etcd: who may open a log is the operator's decision, a flood
//! of openings from fresh keys is refused at the door while a registered robot commits on, and
//! a state of more than 4 MiB under one prefix is read a page at a time (it used to fail every
//! call with "decoded message length too large", and to say the service could not be reached).

mod common;
use common::free_addr;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use etcd_client::{Client, GetOptions, Txn, TxnOp};
use sion_fleet::admission::{Open, Policy, Rate};
use sion_fleet::client::RemoteLedger;
use sion_fleet::local::Etcd;
use sion_fleet::service::Service;
use sion_fleet::{FleetLedger, Format};
use sion_store::ledger::link::LedgerLink;
use sion_store::ledger::state::{Change, State};
use sion_store::ledger::{
    Account, LedgerError, LogId, MemoryLog, PulseHeader, SignedHeader, SignedTx, Tx, account_of,
    encode_version,
};
use sion_verify::merkle::{Blake3, MemoryTree};

fn open_tx(key: &SigningKey, nonce: u64) -> SignedTx {
    SignedTx::sign(key, nonce, Tx::OpenMemory { agent: None, policy: [7; 32] })
}

/// Serve `prefix` on a fresh port under `policy`; the service's URL.
async fn serve(etcd: &Etcd, prefix: &str, key: &SigningKey, policy: Policy) -> String {
    let addr = free_addr();
    let ledger = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let service = Service::new(ledger).admitting(policy);
    tokio::spawn(sion_fleet::service::serve_service(service, addr, std::future::pending()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    format!("http://{addr}")
}

/// How many logs the ledger holds, as a front-end that held nothing reads them.
async fn count(etcd: &Etcd, prefix: &str, key: &SigningKey) -> u64 {
    let mut ledger = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    ledger.log_count().await.expect("log count")
}

fn code(e: &LedgerError) -> &str {
    match e {
        LedgerError::Refused { code, .. } => code,
        _ => "",
    }
}

/// The robot's `k`-th commit of its log (0-based: version `k`, nonce `k + 1`) at the same size
/// — the head kept, no proof: each a Pulse, as a robot's commit is — and how long it took.
fn commit(link: &mut RemoteLedger, robot: &SigningKey, log: &MemoryLog, k: u64) -> Duration {
    let tx = Tx::CommitMemory {
        log: log.id,
        version: k,
        head: log.head,
        proof: vec![],
        seal: false,
        cells: Vec::new(),
    };
    let t = Instant::now();
    link.submit(SignedTx::sign(robot, k + 1, tx)).expect("the registered robot's commit");
    t.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_strangers_is_refused_at_the_door_while_a_registered_robot_commits() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[21; 32]);
    let prefix = "/sion-ledger/flood/";
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let robot = SigningKey::from_bytes(&[22; 32]);
    let mut policy = Policy::default_open();
    policy.open = Open::Registered;
    policy.writers.insert(account_of(&robot));
    // The robot commits as fast as it can here: no per-account rate in the way of its figures.
    policy.rate = None;
    let url = serve(&etcd, prefix, &key, policy).await;
    let logs_before = count(&etcd, prefix, &key).await;

    // The robot opens its log and commits 200 times before the flood: its figures alone.
    let (mut link, id, log, baseline) = {
        let (url, robot) = (url.clone(), robot.clone());
        tokio::task::spawn_blocking(move || {
            let mut link = RemoteLedger::connect(&url).expect("robot's link");
            link.submit(open_tx(&robot, 0)).expect("the registered robot opens its log");
            let id = LogId(link.log_count().expect("log count") - 1);
            let log = link.log(id).expect("log").expect("its log");
            assert_eq!(log.writer, account_of(&robot));
            let mut baseline = Vec::new();
            for k in 0..200 {
                baseline.push(commit(&mut link, &robot, &log, k));
            }
            (link, id, log, baseline)
        })
        .await
        .expect("the robot's first commits")
    };
    assert_eq!(id, log.id);
    let done = Arc::new(AtomicBool::new(false));
    let robot_side = {
        let done = done.clone();
        tokio::task::spawn_blocking(move || {
            let mut latencies = Vec::new();
            while !done.load(Ordering::Relaxed) || latencies.len() < 20 {
                latencies.push(commit(&mut link, &robot, &log, 200 + latencies.len() as u64));
            }
            latencies
        })
    };

    // The flood: fresh keys, each opening a log, from two clients, for at most 20,000
    // submissions or 60 s.
    const FLOOD: u64 = 20_000;
    let deadline = Instant::now() + Duration::from_secs(60);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut flooders = Vec::new();
    for _ in 0..2 {
        let (url, next) = (url.clone(), next.clone());
        flooders.push(tokio::task::spawn_blocking(move || {
            let mut link = RemoteLedger::connect(&url).expect("a stranger's link");
            let mut refused = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= FLOOD || Instant::now() > deadline {
                    return refused;
                }
                let mut seed = [0u8; 32];
                seed[..8].copy_from_slice(&i.to_le_bytes());
                seed[8] = 0xf1;
                let stranger = SigningKey::from_bytes(&seed);
                match link.submit(open_tx(&stranger, 0)) {
                    Err(e) if code(&e) == "not_admitted" => {
                        assert!(e.to_string().contains("not admitted"), "{e}");
                        refused += 1;
                    }
                    other => panic!("stranger {i}'s opening was not refused at the door: {other:?}"),
                }
            }
        }));
    }
    let mut refused = 0;
    for f in flooders {
        refused += f.await.expect("flooder");
    }
    let flood_time = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let mut latencies = robot_side.await.expect("the robot's side");
    latencies.sort();
    let mut baseline = baseline;
    baseline.sort();
    eprintln!(
        "the registered robot alone: 200 commits, p50 {:.2} ms, p99 {:.2} ms",
        percentile(&baseline, 0.5).as_secs_f64() * 1e3,
        percentile(&baseline, 0.99).as_secs_f64() * 1e3,
    );
    let logs_after = count(&etcd, prefix, &key).await;
    eprintln!(
        "flood: {refused} openings from fresh keys refused (not_admitted) in {:.1} s ({:.0}/s); the registered \
         robot committed {} times meanwhile, p50 {:.2} ms, p99 {:.2} ms; P/log/ keys {logs_before} -> {logs_after}",
        flood_time.as_secs_f64(),
        refused as f64 / flood_time.as_secs_f64(),
        latencies.len(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    assert!(refused >= 1_000, "only {refused} flood submissions in the time");
    assert_eq!(logs_after, logs_before + 1, "the state grew by more than the robot's own log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_and_rates_refuse_with_their_codes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[31; 32]);
    let prefix = "/sion-ledger/quota/";
    FleetLedger::init(&[etcd.url()], prefix, key.clone()).await.expect("init");
    let policy = Policy {
        open: Open::Anyone,
        max_logs_per_account: Some(2),
        rate: Some(Rate { per_second: 0.5, burst: 3.0 }),
        strangers: None,
        ..Policy::unlimited()
    };
    let url = serve(&etcd, prefix, &key, policy).await;
    let robot = SigningKey::from_bytes(&[32; 32]);
    let raw_url = url.clone();
    tokio::task::spawn_blocking(move || {
        let mut link = RemoteLedger::connect(&url).expect("link");
        link.submit(open_tx(&robot, 0)).expect("first log");
        link.submit(open_tx(&robot, 1)).expect("second log");
        let e = link.submit(open_tx(&robot, 2)).expect_err("a third log over the quota of 2");
        assert_eq!(code(&e), "quota", "{e}");
        assert!(e.to_string().contains("has opened 2 logs"), "{e}");
        let e = link.submit(open_tx(&robot, 2)).expect_err("a fourth submission past the burst of 3");
        assert_eq!(code(&e), "rate_limited", "{e}");
        assert!(e.to_string().contains("retry after"), "{e}");
        assert!(!e.to_string().contains("cannot be reached"), "{e}");
        // A transaction whose signature does not hold is refused before it can spend anyone's rate.
        let mut forged = open_tx(&SigningKey::from_bytes(&[33; 32]), 0);
        forged.signature[0] ^= 1;
        assert_eq!(code(&link.submit(forged).expect_err("forged")), "forged");
    })
    .await
    .expect("the robot's side");
    // Over gRPC, the code and the wait travel as metadata.
    let mut raw =
        sion_fleet::service::pb::ledger_client::LedgerClient::connect(raw_url).await.expect("raw client");
    let tx = open_tx(&SigningKey::from_bytes(&[32; 32]), 2);
    let status =
        raw.submit(sion_fleet::service::pb::Blob { value: tx.encode() }).await.expect_err("still limited");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(status.metadata().get("sion-refusal").and_then(|v| v.to_str().ok()), Some("rate_limited"));
    let wait: u64 = status
        .metadata()
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("retry-after-ms");
    assert!(wait > 0 && wait <= 2_000, "{wait} ms");
    assert_eq!(count(&etcd, prefix, &key).await, 2);
}

/// Write `n` openings by one account into etcd as front-ends would have (each Pulse's entry,
/// its signature, the log and its version record; then the nonce and the head), in
/// transactions of 120 puts. Returns the last header.
async fn write_openings(c: &mut Client, prefix: &str, key: &SigningKey, n: u64) -> PulseHeader {
    let writer = SigningKey::from_bytes(&[42; 32]);
    let operator = account_of(key);
    let mut state = State::default();
    let mut tree = MemoryTree::<Blake3>::default();
    let genesis = c.get(format!("{prefix}pulse/{:020}", 0), None).await.expect("genesis");
    let value = genesis.kvs()[0].value();
    // The genesis's entry: `u8 0`, then its header (of version 2: the ledger keeps cells).
    let mut prev = PulseHeader::decode(&value[1..]).expect("genesis header");
    let mut ops = Vec::new();
    for i in 0..n {
        let number = i + 1;
        let tx = open_tx(&writer, i);
        let Ok(Change::Log(log, _)) = state.check(&operator, &tx, number) else {
            panic!("opening {i} refused")
        };
        state.apply(tx.sender, Change::Log(log.clone(), Vec::new()));
        tree.push_leaf(&log.encode());
        let header = PulseHeader {
            number,
            time_ns: prev.time_ns + 1_000,
            logs: tree.size(),
            state_root: tree.root(),
            prev: prev.hash(),
            // Openings name no cells: the map stays as it was.
            cells: prev.cells,
        };
        let mut entry = vec![1u8];
        let bytes = tx.encode();
        entry.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        entry.extend_from_slice(&bytes);
        entry.extend_from_slice(&header.encode());
        ops.push(TxnOp::put(format!("{prefix}pulse/{number:020}"), entry, None));
        ops.push(TxnOp::put(
            format!("{prefix}sig/{number:020}"),
            SignedHeader::sign(key, header).signature.to_vec(),
            None,
        ));
        ops.push(TxnOp::put(format!("{prefix}log/{:020}", log.id.0), log.encode(), None));
        ops.push(TxnOp::put(
            format!("{prefix}version/{:020}/{:020}", log.id.0, 0),
            encode_version(&log).to_vec(),
            None,
        ));
        if ops.len() >= 120 {
            c.txn(Txn::new().and_then(std::mem::take(&mut ops))).await.expect("a batch of Pulses");
        }
        prev = header;
    }
    ops.push(TxnOp::put(
        format!("{prefix}nonce/{}", hex::encode(account_of(&writer).0)),
        n.to_le_bytes().to_vec(),
        None,
    ));
    c.txn(Txn::new().and_then(ops)).await.expect("the last batch");
    // The head last: nothing under the prefix is newer than it.
    let mut head = prev.number.to_le_bytes().to_vec();
    head.extend_from_slice(&prev.hash());
    c.put(format!("{prefix}head"), head, None).await.expect("head");
    prev
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_over_4_mib_in_one_prefix_is_read_a_page_at_a_time() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[41; 32]);
    let prefix = "/sion-ledger/big/";
    // The state key by key (format 3): on format 4 there is no `P/log/` to read.
    FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init");
    let mut c = Client::connect([etcd.url()], None).await.expect("etcd client");
    // Enough logs that `P/log/` is over 5 MiB in one reply (key, value and etcd's fields).
    let sample = MemoryLog { id: LogId(0), ..open_log() };
    let per_log = (format!("{prefix}log/{:020}", 0).len() + sample.encode().len() + 24) as u64;
    let n = ((5 << 20) / per_log + 1).max(17_000);
    let started = Instant::now();
    let last = write_openings(&mut c, prefix, &key, n).await;
    eprintln!("wrote {n} openings ({per_log} bytes a log key) in {:.1} s", started.elapsed().as_secs_f64());

    // What every front-end did before: one range read of the prefix, over tonic's 4 MiB.
    let whole = c.get(format!("{prefix}log/"), Some(GetOptions::new().with_prefix())).await;
    let e = whole
        .expect_err("one reply of the whole prefix fits the default decode limit: the test is too small");
    assert!(e.to_string().contains("message length too large"), "{e}");

    // A front-end started now reads it in pages, checks it against the signed state root, and
    // commits on it.
    let mut ledger = common::connect(&[etcd.url()], prefix, key.clone()).await.expect("connect");
    let t = Instant::now();
    assert_eq!(ledger.log_count().await.expect("the state, read in pages"), n);
    eprintln!("a fresh front-end read and checked {n} logs in {:.2} s", t.elapsed().as_secs_f64());
    let robot = SigningKey::from_bytes(&[43; 32]);
    let h = ledger.submit(open_tx(&robot, 0)).await.expect("an opening on the big state");
    assert_eq!((h.header.number, h.header.logs), (last.number + 1, n + 1));
    // A state proof at a Pulse still in etcd's history reads the logs at its revision, in pages.
    let p = ledger.state_proof(LogId(n - 1), last.number).await.expect("state proof");
    p.verify(&key.verifying_key()).expect("verifies");

    // Through the service, as a robot sees it.
    let url = serve(&etcd, prefix, &key, Policy::unlimited()).await;
    let count = tokio::task::spawn_blocking(move || {
        RemoteLedger::connect(&url).expect("link").log_count().expect("log count over gRPC")
    })
    .await
    .expect("the robot's side");
    assert_eq!(count, n + 1);
}

fn open_log() -> MemoryLog {
    let writer = SigningKey::from_bytes(&[42; 32]);
    let Ok(Change::Log(log, _)) = State::default().check(&Account([0; 32]), &open_tx(&writer, 0), 1) else {
        panic!("an opening refused")
    };
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_limit_says_so_and_not_that_the_service_is_down() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = SigningKey::from_bytes(&[51; 32]);
    let prefix = "/sion-ledger/huge/";
    // A ledger that reads `P/agent/` (format 3); on format 4 the same reply would be a page of
    // entries.
    FleetLedger::init_format(&[etcd.url()], prefix, key.clone(), Format::Keyed).await.expect("init");
    let url = serve(&etcd, prefix, &key, Policy::unlimited()).await;
    // Whoever can write to etcd puts 13 values of 1.4 MiB (under etcd's 1.5 MiB request limit)
    // under `P/agent/`: one page of them is over the front-end's 16 MiB decode limit.
    let mut c = Client::connect([etcd.url()], None).await.expect("etcd client");
    for i in 0..13 {
        c.put(format!("{prefix}agent/huge-{i:02}"), vec![0u8; 1400 << 10], None).await.expect("put");
    }
    let e = tokio::task::spawn_blocking(move || {
        let link = RemoteLedger::connect(&url).expect("the service is up");
        link.log_count().expect_err("the state cannot be read")
    })
    .await
    .expect("the reader's side");
    let text = e.to_string();
    assert!(text.contains("larger than this front-end's limit of 16 MiB"), "{text}");
    assert!(text.contains("the service answered"), "{text}");
    assert!(!text.contains("cannot be reached") && !text.contains("running there"), "{text}");
}

fn sion_binary() -> std::path::PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/sion
    let exe = std::env::current_exe().expect("exe");
    let bin = exe.parent().and_then(std::path::Path::parent).expect("target dir").join("sion");
    assert!(bin.exists(), "{} is built with the workspace's tests", bin.display());
    bin
}

fn sion(args: &[&str]) -> (bool, String) {
    let o = std::process::Command::new(sion_binary()).args(args).output().expect("sion");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_closes_the_door_with_an_admission_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(tmp.path()).await.expect("etcd");
    let key = tmp.path().join("ledger.key");
    let k = key.to_str().expect("utf8");
    let (ok, out) = sion(&["ledger", "init", "--etcd", etcd.url(), "--key", k]);
    assert!(ok, "{out}");
    let file = tmp.path().join("admission.json");
    let f = file.to_str().expect("utf8");
    let (ok, out) = sion(&["ledger", "admit", "--admission", f, "--key", "00"]);
    assert!(!ok && out.contains("--key 00"), "{out}");
    let robot = hex::encode(SigningKey::from_bytes(&[61; 32]).verifying_key().to_bytes());
    let (ok, out) = sion(&["ledger", "admit", "--admission", f, "--key", &robot, "--agents", "fleet/"]);
    assert!(ok, "{out}");
    let policy = Policy::read(&file).expect("the file admit wrote");
    assert_eq!(policy.open, Open::Registered);
    assert!(policy.writers.contains(&account_of(&SigningKey::from_bytes(&[61; 32]))));
    assert_eq!(policy.agents, ["fleet/"]);

    let listen = free_addr().to_string();
    let mut serving = std::process::Command::new(sion_binary())
        .args(["ledger", "serve", "--etcd", etcd.url(), "--key", k, "--listen", &listen, "--admission", f])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "sion ledger serve did not listen on {listen}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A stranger's robot cannot open a log: told why, not that the service is down.
    let d = tmp.path().join("stranger");
    let url = format!("http://{listen}");
    let (ok, out) = sion(&["memory", "open", "--data", d.to_str().expect("utf8"), "--ledger", &url]);
    let _ = serving.kill();
    let _ = serving.wait();
    assert!(!ok, "{out}");
    assert!(out.contains("not_admitted") && out.contains("not registered"), "{out}");
    assert!(!out.contains("cannot be reached"), "{out}");
    // No log opened: no version record written (every opening writes its first).
    let mut c = Client::connect([etcd.url()], None).await.expect("etcd client");
    let options = GetOptions::new().with_prefix().with_count_only();
    assert_eq!(c.get("/sion-ledger/version/", Some(options)).await.expect("count").count(), 0);
}
