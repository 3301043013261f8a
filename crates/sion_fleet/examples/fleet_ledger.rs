//! The fleet ledger's commit rate on a real etcd, beside etcd's own transaction rate measured
//! in the same run (the peer): one table.
//!
//!     cargo run --release -p sion_fleet --example fleet_ledger -- [--seconds 5]
//!
//! etcd is a single member on this machine's disk (Debian's etcd 3.4, started here on
//! loopback). Rows:
//! - etcd alone: W clients, each a compare-and-swap loop on a key of its own (etcd's upper
//!   bound: no conflicts), and on one shared key (what one chain head costs);
//! - the fleet ledger: W writers, each committing its own log (a CommitMemory with a
//!   consistency proof, every commit a Pulse), each through a front-end of its own;
//! - the service: the same W writers as robots do it, each a gRPC client
//!   (`sion_fleet::client::RemoteLedger`, checking every header it gets) of one or of two
//!   front-ends (`sion ledger serve`, in this process), the writers split between them.
//!
//! Then what the chain costs etcd: its database size over the Pulses written (MVCC history
//! included, before any compaction).
//!
//! Each row reports transactions a second, latency p50 / p99 and the compare-and-swaps lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use sion_fleet::FleetLedger;
use sion_fleet::client::RemoteLedger;
use sion_fleet::local::Etcd;
use sion_store::ledger::link::LedgerLink as _;
use sion_store::ledger::{Head, LogId, SignedTx, Tx};
use sion_verify::merkle::{Blake3, MemoryTree, consistency_path};

struct Row {
    what: String,
    ops: u64,
    secs: f64,
    lat: Vec<Duration>,
    lost: u64,
}

fn quantile(lat: &mut [Duration], q: f64) -> f64 {
    lat.sort_unstable();
    lat.get(((lat.len() as f64 - 1.0) * q).round() as usize).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

async fn raw(url: &str, writers: usize, shared: bool, seconds: f64) -> Row {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect([url.as_str()], None).await.expect("connect");
            let key = if shared { "raw/shared".to_owned() } else { format!("raw/{w}") };
            let (mut ops, mut lost, mut lat) = (0u64, 0u64, Vec::new());
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            let mut rev =
                c.get(key.as_str(), None).await.expect("get").kvs().first().map_or(0, |kv| kv.mod_revision());
            while Instant::now() < end {
                let t = Instant::now();
                let txn = Txn::new()
                    .when(vec![Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)])
                    .and_then(vec![TxnOp::put(key.as_str(), vec![0u8; 40], None)]);
                let resp = c.txn(txn).await.expect("txn");
                if resp.succeeded() {
                    rev = resp.header().map_or(0, |h| h.revision());
                    ops += 1;
                    lat.push(t.elapsed());
                } else {
                    lost += 1;
                    rev = c
                        .get(key.as_str(), None)
                        .await
                        .expect("get")
                        .kvs()
                        .first()
                        .map_or(0, |kv| kv.mod_revision());
                }
            }
            (ops, lost, lat)
        }));
    }
    let started = Instant::now();
    let mut row = Row {
        what: format!(
            "etcd alone: {writers} client(s), CAS on {}",
            if shared { "one shared key" } else { "a key each" }
        ),
        ops: 0,
        secs: 0.0,
        lat: Vec::new(),
        lost: 0,
    };
    for t in tasks {
        let (ops, lost, lat) = t.await.expect("task");
        row.ops += ops;
        row.lost += lost;
        row.lat.extend(lat);
    }
    row.secs = started.elapsed().as_secs_f64();
    row
}

fn tree(n: u64) -> MemoryTree<Blake3> {
    MemoryTree::from_leaves((0..n).map(|i| format!("atom {i}")))
}

async fn ours(url: &str, prefix: &str, ledger_key: &SigningKey, writers: usize, seconds: f64) -> Row {
    let mut setup = FleetLedger::init(&[url], prefix, ledger_key.clone()).await.expect("init");
    let mut logs = Vec::new();
    let keys: Vec<SigningKey> = (0..writers).map(|w| SigningKey::from_bytes(&[(w + 1) as u8; 32])).collect();
    for k in &keys {
        let tx = SignedTx::sign(k, 0, Tx::OpenMemory { agent: None, policy: [0; 32] });
        setup.submit(tx).await.expect("open");
        let mut id = 0;
        while setup.log(LogId(id + 1)).await.expect("log").is_some() {
            id += 1;
        }
        logs.push(LogId(id));
    }
    let trees: Arc<Vec<MemoryTree<Blake3>>> = Arc::new((0..=400).map(|n| tree(n * 10)).collect());
    let mut tasks = Vec::new();
    for (k, log) in keys.into_iter().zip(logs) {
        let (url, prefix, lk, trees) = (url.to_owned(), prefix.to_owned(), ledger_key.clone(), trees.clone());
        tasks.push(tokio::spawn(async move {
            let mut front = FleetLedger::connect(&[url.as_str()], &prefix, lk).await.expect("connect");
            let (mut ops, mut lat, mut gave_up) = (0u64, Vec::new(), 0u64);
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            let mut version = 0u64;
            while Instant::now() < end && (version as usize) < trees.len() - 1 {
                let tx = commit_tx(&k, log, version, &trees);
                let started = Instant::now();
                match front.submit(tx).await {
                    Ok(_) => {
                        lat.push(started.elapsed());
                        ops += 1;
                        version += 1;
                    }
                    Err(sion_fleet::FleetError::Contention(_)) => gave_up += 1,
                    Err(e) => panic!("commit: {e}"),
                }
            }
            (ops, front.lost_races(), lat, gave_up)
        }));
    }
    let started = Instant::now();
    let mut gave_up = 0;
    let mut row = Row { what: String::new(), ops: 0, secs: 0.0, lat: Vec::new(), lost: 0 };
    for t in tasks {
        let (ops, lost, lat, g) = t.await.expect("task");
        row.ops += ops;
        row.lost += lost;
        row.lat.extend(lat);
        gave_up += g;
    }
    row.what = format!(
        "fleet ledger: {writers} writer(s), a front-end each ({gave_up} submissions gave up after 256 lost races)"
    );
    row.secs = started.elapsed().as_secs_f64();
    row
}

/// The `version`-th commit of a log growing by 10 atoms a commit.
fn commit_tx(k: &SigningKey, log: LogId, version: u64, trees: &[MemoryTree<Blake3>]) -> SignedTx {
    let (from, to) = (version * 10, (version + 1) * 10);
    let t = &trees[version as usize + 1];
    let proof = if from == 0 { vec![] } else { consistency_path::<Blake3, _>(t, from, to).expect("proof") };
    let head = Head { size: to, root: t.root(), index: [0; 32], manifest: [0; 32] };
    SignedTx::sign(k, version + 1, Tx::CommitMemory { log, version, head, proof, seal: false })
}

/// W writers through `fronts` service front-ends on one etcd, as robots reach it.
async fn service(
    url: &str,
    prefix: &str,
    ledger_key: &SigningKey,
    writers: usize,
    fronts: usize,
    seconds: f64,
) -> Row {
    FleetLedger::init(&[url], prefix, ledger_key.clone()).await.expect("init");
    let mut urls = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..fronts {
        let addr = sion_fleet::local::free_addr().expect("a free loopback port");
        let ledger = FleetLedger::connect(&[url], prefix, ledger_key.clone()).await.expect("connect");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(sion_fleet::service::serve(ledger, addr, async move {
            let _ = stopped.await;
        }));
        urls.push(format!("http://{addr}"));
        stops.push(stop);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let trees: Arc<Vec<MemoryTree<Blake3>>> = Arc::new((0..=400).map(|n| tree(n * 10)).collect());
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (front, trees) = (urls[w % fronts].clone(), trees.clone());
        tasks.push(tokio::task::spawn_blocking(move || {
            let mut link = RemoteLedger::connect(&front).expect("link");
            let k = SigningKey::from_bytes(&[(w + 101) as u8; 32]);
            let opened = link.submit(SignedTx::sign(&k, 0, Tx::OpenMemory { agent: None, policy: [0; 32] }));
            let log = LogId(opened.expect("open").header.logs - 1);
            let (mut ops, mut lat, mut failed) = (0u64, Vec::new(), 0u64);
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            let mut version = 0u64;
            while Instant::now() < end && (version as usize) < trees.len() - 1 {
                let tx = commit_tx(&k, log, version, &trees);
                let started = Instant::now();
                match link.submit(tx) {
                    Ok(_) => {
                        lat.push(started.elapsed());
                        ops += 1;
                        version += 1;
                    }
                    Err(_) => failed += 1,
                }
            }
            (ops, lat, failed)
        }));
    }
    let started = Instant::now();
    let mut failed = 0;
    let mut row = Row { what: String::new(), ops: 0, secs: 0.0, lat: Vec::new(), lost: 0 };
    for t in tasks {
        let (ops, lat, f) = t.await.expect("writer");
        row.ops += ops;
        row.lat.extend(lat);
        failed += f;
    }
    row.secs = started.elapsed().as_secs_f64();
    for stop in stops {
        let _ = stop.send(());
    }
    row.what = format!(
        "service: {writers} writer(s) over gRPC, {fronts} front-end(s){}",
        if failed > 0 { format!(" ({failed} submissions failed)") } else { String::new() }
    );
    // Lost races are the front-ends' own; the service does not expose them: not counted here.
    row.lost = u64::MAX;
    row
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let mut seconds = 5.0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|s| s.parse().ok()).ok_or("--seconds: a number")?,
            "--help" | "-h" => {
                println!(
                    "fleet_ledger [--seconds S]: commits a second on a local etcd, ours beside etcd's own txn rate"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument {other} (--seconds S)")),
        }
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let etcd = Etcd::start(dir.path()).await?;
    let url = etcd.url().to_owned();
    let key = SigningKey::from_bytes(&[99; 32]);
    let mut rows = Vec::new();
    for w in [1, 4, 16] {
        eprintln!("etcd alone, {w} client(s) ...");
        rows.push(raw(&url, w, false, seconds).await);
        rows.push(raw(&url, w, true, seconds).await);
    }
    for w in [1, 4, 16] {
        eprintln!("fleet ledger, {w} writer(s) ...");
        rows.push(ours(&url, &format!("/bench/{w}/"), &key, w, seconds).await);
    }
    for fronts in [1, 2] {
        for w in [1, 4, 16] {
            eprintln!("service, {w} writer(s), {fronts} front-end(s) ...");
            rows.push(
                service(&url, &format!("/bench/service/{fronts}/{w}/"), &key, w, fronts, seconds).await,
            );
        }
    }
    // What the chains written cost etcd, history included: its database over the Pulses.
    let mut c = Client::connect([url.as_str()], None).await.map_err(|e| e.to_string())?;
    let db = c.status().await.map_err(|e| e.to_string())?.db_size();
    let pulses: u64 = {
        let resp = c
            .get("/bench/", Some(etcd_client::GetOptions::new().with_prefix().with_keys_only()))
            .await
            .map_err(|e| e.to_string())?;
        resp.kvs().iter().filter(|kv| kv.key_str().is_ok_and(|k| k.contains("/pulse/"))).count() as u64
    };
    println!("\n{seconds} s a row; etcd 3.4, one member, on this machine's disk (2 cores)\n");
    println!("| row | transactions / s | latency p50 / p99 | compare-and-swaps lost |");
    println!("| --- | --- | --- | --- |");
    for mut r in rows {
        let (p50, p99) = (quantile(&mut r.lat, 0.5), quantile(&mut r.lat, 0.99));
        let lost = if r.lost == u64::MAX { "—".to_owned() } else { r.lost.to_string() };
        println!("| {} | {:.0} | {p50:.2} / {p99:.2} ms | {lost} |", r.what, r.ops as f64 / r.secs);
    }
    println!(
        "\netcd's database after the run: {:.1} MiB for {pulses} Pulses (raw rows' keys included), {:.0} bytes a Pulse at most",
        db as f64 / (1 << 20) as f64,
        db as f64 / pulses.max(1) as f64
    );
    // History compacted (what --auto-compaction does) and the file defragmented: what the chain
    // itself keeps, which compaction cannot drop.
    let now = c.get("/bench/", None).await.map_err(|e| e.to_string())?.header().map_or(0, |h| h.revision());
    c.compact(now, Some(etcd_client::CompactionOptions::new().with_physical()))
        .await
        .map_err(|e| e.to_string())?;
    c.defragment().await.map_err(|e| e.to_string())?;
    let kept = c.status().await.map_err(|e| e.to_string())?.db_size();
    println!(
        "after compacting etcd's history and defragmenting: {:.1} MiB, {:.0} bytes a Pulse",
        kept as f64 / (1 << 20) as f64,
        kept as f64 / pulses.max(1) as f64
    );
    Ok(())
}
