//! A fleet's commits a second (issue 35, requirement 2; docs/FLEET-LEDGER.md, "Many
//! transactions, one Pulse"): simulated robots — each its own writer key and log — committing
//! through two front-ends (`sion_fleet::service`, in this process, each taking what is queued
//! into one Pulse) on a 3-member etcd cluster on this machine, beside etcd's own transaction
//! rate measured in the same run; then the same while a follower is killed, and while the
//! leader is.
//!
//!     cargo run --release -p sion_fleet --example fleet_scale -- [--robots 1000] [--seconds 10]
//!         [--max-txn-ops 1024] [--format 6] [--relay 1] [--faults 1]
//!         [--etcd-heartbeat-ms 100] [--etcd-election-ms 1000]
//!
//! The two front-ends are told of each other, so one makes the Pulses and the other forwards
//! to it (docs/FLEET-LEDGER.md, "One sequencer at a time"); `--relay 0` has both make Pulses,
//! racing, as front-ends without peers do. `--faults 0` runs the fault-free row alone (for a
//! profile), `--faults 2` the leader's kill alone (to repeat it); the etcd flags set the
//! members' heartbeat and election timeout.
//!
//! `--format 5` makes the ledger as ledgers were made before a swap moved `P/claim` on (one
//! compare and put fewer a swap); `--format 4` as before a header was signed after its
//! swap (one etcd transaction a Pulse instead of two); `--format 3` as before the entries were
//! the ledger (each Pulse also writes its logs', nonces' and paths' keys): to measure one
//! against the other.
//!
//! A robot commits in a loop: sign a `CommitMemory` (its log grows by 2 atoms, with the RFC 9162
//! consistency proof from its last head), send it, check the receipt's header against the
//! ledger's key (as `RemoteLedger` does), next. After an error it asks the service for its
//! log and nonce and goes on. The members are started with `--max-txn-ops` (default 1024) and
//! the front-ends told the same. Rows: commits acknowledged a second, latency p50 / p99 / the
//! longest, the errors robots saw, the Pulses made and the commits a Pulse, and the CPU this
//! process (robots and front-ends) used a second of wall time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use sion_fleet::local::Cluster;
use sion_fleet::service::Service;
use sion_fleet::service::pb::ledger_client::LedgerClient;
use sion_fleet::service::pb::{Blob, Number};
use sion_fleet::{FleetLedger, Format, TxnLimits};
use sion_ledger::{Head, LogId, MemoryLog, SignedHeader, SignedTx, Tx, account_of};
use sion_verify::merkle::{Blake3, Digest, MemoryTree, consistency_path, root_at};
use sion_verify::wire::Reader;
use tonic::transport::Channel;

/// Atoms a commit adds.
const STEP: u64 = 2;

/// Every robot's log holds the same atoms (the ledger cares only that each head extends the
/// last): heads and consistency proofs computed once.
struct Heads {
    roots: Vec<Digest>,
    proofs: Vec<Vec<Digest>>,
}

impl Heads {
    fn new(commits: u64) -> Self {
        let tree = MemoryTree::<Blake3>::from_leaves((0..commits * STEP).map(|i| format!("atom {i}")));
        let roots = (0..=commits).map(|k| root_at::<Blake3, _>(&tree, k * STEP).expect("root")).collect();
        let proofs = (0..commits)
            .map(|k| {
                if k == 0 {
                    vec![]
                } else {
                    consistency_path::<Blake3, _>(&tree, k * STEP, (k + 1) * STEP).expect("proof")
                }
            })
            .collect();
        Self { roots, proofs }
    }

    fn commit(&self, key: &SigningKey, nonce: u64, log: LogId, version: u64) -> Option<SignedTx> {
        let k = version as usize;
        let head = Head {
            size: (version + 1) * STEP,
            root: *self.roots.get(k + 1)?,
            index: [1; 32],
            manifest: [0; 32],
        };
        let proof = self.proofs.get(k)?.clone();
        Some(SignedTx::sign(
            key,
            nonce,
            Tx::CommitMemory { log, version, head, proof, seal: false, cells: Vec::new() },
        ))
    }
}

#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    errors: AtomicU64,
    /// The first few errors robots saw, with how long each took.
    seen: std::sync::Mutex<Vec<String>>,
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cpu_seconds() -> f64 {
    // utime + stime of this process, in clock ticks (100 a second on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn quantile(lat: &mut [Duration], q: f64) -> f64 {
    lat.sort_unstable();
    lat.get(((lat.len() as f64 - 1.0) * q).round() as usize).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

struct Robot {
    key: SigningKey,
    log: LogId,
    version: u64,
    nonce: u64,
    client: LedgerClient<Channel>,
    /// Commits signed before the window (a robot signs on its own CPU, not the ledger's).
    presigned: std::collections::VecDeque<SignedTx>,
    /// Replies to check after the window (likewise the robot's own work).
    replies: Vec<Vec<u8>>,
}

impl Robot {
    /// Read its log's version and its nonce back from the service (after an error: the commit
    /// may have landed).
    async fn resync(&mut self) -> bool {
        let Ok(log) = self.client.log(Number { value: self.log.0 }).await else { return false };
        let Some(bytes) = log.into_inner().value else { return false };
        let Ok(log) = MemoryLog::decode(&bytes) else { return false };
        let account = account_of(&self.key);
        let Ok(n) = self.client.nonce(Blob { value: account.0.to_vec() }).await else { return false };
        self.version = log.commits;
        self.nonce = n.into_inner().value;
        true
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    mut robot: Robot,
    heads: Arc<Heads>,
    ledger: VerifyingKey,
    until: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
    tally: Arc<Tally>,
    lat: Arc<std::sync::Mutex<Vec<Duration>>>,
    off_clock: bool,
) -> Robot {
    let mut mine = Vec::new();
    while !until.load(Ordering::Relaxed) {
        let presigned = match robot.presigned.pop_front() {
            Some(tx) if tx.nonce == robot.nonce => Some(tx),
            _ => {
                robot.presigned.clear();
                None
            }
        };
        let Some(tx) = presigned.or_else(|| heads.commit(&robot.key, robot.nonce, robot.log, robot.version))
        else {
            break;
        };
        let t = Instant::now();
        let ok = match robot.client.submit(Blob { value: tx.encode() }).await {
            Ok(reply) => {
                let bytes = reply.into_inner().value;
                if off_clock {
                    robot.replies.push(bytes);
                    true
                } else {
                    let mut r = Reader::new(&bytes);
                    SignedHeader::read(&mut r).is_ok_and(|h| h.verify(&ledger).is_ok())
                }
            }
            Err(status) => {
                if measuring.load(Ordering::Relaxed) {
                    let mut seen = tally.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if seen.len() < 4 {
                        let m: String = status.message().chars().take(160).collect();
                        seen.push(format!(
                            "{:?} after {:.2} s: {m}",
                            status.code(),
                            t.elapsed().as_secs_f64()
                        ));
                    }
                }
                false
            }
        };
        let counted = measuring.load(Ordering::Relaxed);
        if ok {
            robot.version += 1;
            robot.nonce += 1;
            if counted {
                tally.acked.fetch_add(1, Ordering::Relaxed);
                mine.push(t.elapsed());
            }
        } else {
            if counted {
                tally.errors.fetch_add(1, Ordering::Relaxed);
            }
            while !robot.resync().await && !until.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    lat.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(mine);
    robot
}

/// etcd alone, in the same cluster: `clients` compare-and-swap loops each on a key of its own
/// (no conflicts: etcd's upper bound for one small transaction at a time per client).
async fn etcd_rate(urls: &[String], clients: usize, seconds: f64) -> (f64, f64, f64) {
    let mut tasks = Vec::new();
    for w in 0..clients {
        let urls = urls.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&urls, None).await.expect("connect");
            let key = format!("raw/{w}");
            let mut rev = 0;
            let mut lat = Vec::new();
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            while Instant::now() < end {
                let t = Instant::now();
                let txn = Txn::new()
                    .when(vec![Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)])
                    .and_then(vec![TxnOp::put(key.as_str(), vec![0u8; 40], None)]);
                match c.txn(txn).await {
                    Ok(resp) if resp.succeeded() => {
                        rev = resp.header().map_or(0, |h| h.revision());
                        lat.push(t.elapsed());
                    }
                    _ => {
                        rev = c
                            .get(key.as_str(), None)
                            .await
                            .ok()
                            .and_then(|r| r.kvs().first().map(|kv| kv.mod_revision()))
                            .unwrap_or(0)
                    }
                }
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("task"));
    }
    let n = lat.len() as f64;
    (n / seconds, quantile(&mut lat, 0.5), quantile(&mut lat, 0.99))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let robots_n = arg("--robots", 1000) as usize;
    let seconds = arg("--seconds", 10) as f64;
    let max_ops = arg("--max-txn-ops", 1024);
    // A robot signs its commits and checks the ledger's replies on its own CPU: by default that
    // work is done outside the measured window (signed ahead, checked after), so the window
    // measures the ledger (front-ends and etcd) on this machine's 2 cores; `--robot-work 1`
    // does it inside, the robots sharing the cores.
    let off_clock = arg("--robot-work", 0) == 0;
    let dir = tempfile::tempdir().expect("tmp");
    let ops_flag = max_ops.to_string();
    // etcd's own timing (its defaults: a heartbeat every 100 ms, an election after 1,000 ms
    // without one), which bounds how long a leader's death stalls every write.
    let heartbeat = arg("--etcd-heartbeat-ms", 100).to_string();
    let election = arg("--etcd-election-ms", 1000).to_string();
    let mut cluster = Cluster::start_with(
        dir.path(),
        3,
        &["--max-txn-ops", &ops_flag, "--heartbeat-interval", &heartbeat, "--election-timeout", &election],
    )
    .await
    .expect("a 3-member etcd cluster");
    let urls = cluster.urls();
    let endpoints: Vec<&str> = urls.iter().map(String::as_str).collect();
    let key = SigningKey::from_bytes(&[77; 32]);
    let public = key.verifying_key();
    let prefix = "/sion-ledger/scale/";
    let limits = TxnLimits { max_ops: max_ops as usize, max_bytes: 1 << 20 };
    let format =
        u8::try_from(arg("--format", 6)).ok().and_then(Format::from_number).expect("--format: 2 to 6");
    let made = FleetLedger::init_format(&endpoints, prefix, key.clone(), format).await;
    let mut setup = made.expect("init").with_limits(limits);

    // The robots' logs, opened in batches (not measured).
    let keys: Vec<SigningKey> = (0..robots_n)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            SigningKey::from_bytes(&seed)
        })
        .collect();
    let t = Instant::now();
    let opened = setup
        .submit_batch(
            keys.iter()
                .map(|k| SignedTx::sign(k, 0, Tx::OpenMemory { agent: None, policy: [0; 32] }))
                .collect(),
        )
        .await;
    let logs: Vec<LogId> = opened.iter().map(|r| r.as_ref().expect("opened").log.expect("a log")).collect();
    let after_open = setup.latest().await.expect("latest").header.number;
    eprintln!("{robots_n} logs opened in {after_open} Pulses, {:.1} s", t.elapsed().as_secs_f64());

    // Two front-ends, each told of the other (one sequences, the other forwards) unless
    // `--relay 0`.
    let relay = arg("--relay", 1) == 1;
    let addrs: Vec<SocketAddr> = (0..2).map(|_| sion_fleet::local::free_addr().expect("port")).collect();
    let mut relays = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let ledger = FleetLedger::connect_accepting(&endpoints, prefix, key.clone(), &Default::default(), 1)
            .await
            .expect("connect")
            .with_limits(limits);
        let mut service = Service::new(ledger);
        if relay {
            service = service.relaying(addr.to_string(), vec![addrs[1 - i].to_string()]);
            relays.extend(service.relay());
        }
        tokio::spawn(sion_fleet::service::serve_service(service, *addr, std::future::pending()));
    }
    tokio::time::sleep(Duration::from_millis(if relay { 1000 } else { 300 })).await;
    for (i, r) in relays.iter().enumerate() {
        eprintln!("front-end {i}: the sequencer is {:?}", r.role());
    }
    // A few HTTP/2 connections a front-end, shared by its robots.
    let mut channels = Vec::new();
    for addr in &addrs {
        for _ in 0..4 {
            let ch = Channel::from_shared(format!("http://{addr}"))
                .expect("uri")
                .connect()
                .await
                .expect("connect");
            channels.push(ch);
        }
    }
    let heads = Arc::new(Heads::new((((seconds as u64) + 4) * 40_000 / robots_n as u64).max(200) * 4));
    let mut robots: Vec<Robot> = keys
        .into_iter()
        .zip(logs)
        .enumerate()
        .map(|(i, (key, log))| Robot {
            key,
            log,
            version: 0,
            nonce: 1,
            client: LedgerClient::new(channels[i % channels.len()].clone()),
            presigned: Default::default(),
            replies: Vec::new(),
        })
        .collect();

    println!(
        "| row | commits/s | p50 ms | p99 ms | longest ms | errors | Pulses | commits a Pulse | CPU s/s (this process) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let (rate, p50, p99) = etcd_rate(&urls, 64, seconds.min(5.0)).await;
    println!(
        "| etcd alone: 64 clients, a compare-and-swap each on its own key (3 members) | {rate:.0} txn/s | {p50:.2} | {p99:.2} | | | | | |"
    );

    // `--faults 0`: the fault-free row alone (for a profile of it).
    let phases: &[&str] = match arg("--faults", 1) {
        0 => &["no fault"],
        // `--faults 2`: the leader's kill alone, to repeat it.
        2 => &["the leader killed"],
        _ => &["no fault", "a follower killed", "the leader killed"],
    };
    for &phase in phases {
        let until = Arc::new(AtomicBool::new(false));
        let measuring = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for mut r in robots.drain(..) {
            if off_clock {
                // Enough for the phase at 4x the rate asked for.
                let ahead = ((seconds + 2.0) * 40_000.0 / robots_n as f64).ceil() as u64;
                for k in 0..ahead {
                    if let Some(tx) = heads.commit(&r.key, r.nonce + k, r.log, r.version + k) {
                        r.presigned.push_back(tx);
                    }
                }
            }
            let (h, u, m, t, l) =
                (heads.clone(), until.clone(), measuring.clone(), tally.clone(), lat.clone());
            tasks.push(tokio::spawn(drive(r, h, public, u, m, t, l, off_clock)));
        }
        // A second to warm up, then the window.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let from = setup.latest().await.map(|h| h.header.number).unwrap_or(0);
        let cpu0 = cpu_seconds();
        measuring.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        let mut killed = None;
        if phase != "no fault" {
            tokio::time::sleep(Duration::from_secs_f64(seconds / 4.0)).await;
            let leader = cluster.leader().await;
            let victim = match (phase, leader) {
                ("the leader killed", Some(l)) => l,
                (_, Some(l)) => (l + 1) % 3,
                (_, None) => 0,
            };
            cluster.kill(victim);
            killed = Some(victim);
            eprintln!("{phase}: member {victim} killed at {:.1} s", t0.elapsed().as_secs_f64());
        }
        let rest = Duration::from_secs_f64(seconds).saturating_sub(t0.elapsed());
        tokio::time::sleep(rest).await;
        measuring.store(false, Ordering::Relaxed);
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        until.store(true, Ordering::Relaxed);
        for t in tasks {
            robots.push(t.await.expect("robot"));
        }
        // The robots' own check of every reply, off the clock.
        let mut bad = 0;
        for r in &mut robots {
            for bytes in r.replies.drain(..) {
                let mut rd = Reader::new(&bytes);
                bad += usize::from(!SignedHeader::read(&mut rd).is_ok_and(|h| h.verify(&public).is_ok()));
            }
            r.presigned.clear();
        }
        assert_eq!(bad, 0, "replies whose header the ledger's key did not sign");
        let to = setup.latest().await.map(|h| h.header.number).unwrap_or(from);
        let acked = tally.acked.load(Ordering::Relaxed);
        let mut lat = std::mem::take(&mut *lat.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let pulses = to.saturating_sub(from).max(1);
        println!(
            "| {robots_n} robots{}, 2 front-ends{}, 3 members, {phase} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} | {:.2} |",
            if off_clock {
                " (signed ahead, replies checked after)"
            } else {
                " (signing and checking in the window)"
            },
            if relay { " (one sequencing)" } else { " (both sequencing)" },
            acked as f64 / secs,
            quantile(&mut lat, 0.5),
            quantile(&mut lat, 0.99),
            quantile(&mut lat, 1.0),
            tally.errors.load(Ordering::Relaxed),
            pulses,
            acked as f64 / pulses as f64,
            cpu / secs
        );
        for e in tally.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
            eprintln!("  a robot saw: {e}");
        }
        for (i, r) in relays.iter().enumerate() {
            let (sent, took) = r.counts();
            eprintln!("  front-end {i}: {sent} transactions forwarded, {took} taken from the other, so far");
        }
        let slow = lat.iter().filter(|d| d.as_secs_f64() > 1.0).count();
        eprintln!("  commits acknowledged after more than 1 s: {slow}");
        if let Some(v) = killed {
            cluster.restart(v).expect("restart");
            cluster.wait_for_quorum(Duration::from_secs(30)).await.expect("quorum");
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}
