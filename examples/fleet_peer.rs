//! Robot B checks robot A, in Rust: two robots on one DDS graph commit to one fleet ledger
//! (docs/FLEET-LEDGER.md), and one asks the other what it saw, over ROS, trusting nothing the
//! other says. Run by tests/ros/test_fleet.py; by hand:
//!
//!   cargo run --features ros --example fleet_peer -- ask --peer /robot_a/sion_memory \
//!     --ledger http://127.0.0.1:7878 --ledger-key HEX [--witnesses FILE --quorum K] \
//!     --frame map --box X0,Y0,Z0,X1,Y1,Z1 --from NS --to NS
//!   cargo run --features ros --example fleet_peer -- backdate --data ROBOT_A_DIR --ledger URL
//!
//! `ask` sends the peer's `query_range`, checks the proof here against the fleet ledger's key
//! (brought by the reader, never the peer's word) and the question asked, requires the
//! witnesses' quorum, fetches the Pulse's header from the fleet ledger and compares it with the
//! one the proof carries; then it checks that the same answer, its header backdated and
//! re-signed by a key the peer could hold, is refused. `backdate` is a writer trying to
//! rewrite its past on the fleet ledger with its own key: each attempt must be refused, with
//! the reason. Prints one line per check and exits 1 if any went the wrong way.

#[path = "ros_common/mod.rs"]
mod ros_common;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use ed25519_dalek::{SigningKey, VerifyingKey};
use r2r::QosProfile;
use r2r::builtin_interfaces::msg::Time as RosTime;
use r2r::sion_memory_msgs::srv::QueryRange;
use sion_memory::atom::BoxMm;
use sion_memory::fleet::RemoteLedger;
use sion_memory::index::geom::Query;
use sion_memory::ledger::link::LedgerLink as _;
use sion_memory::ledger::{LedgerError, LogId, SignedHeader, SignedTx, Tx, Witnesses, account_of, read_key};
use sion_memory::proof::{self, Expect, ProofFile, Question};

#[derive(Parser)]
#[command(about = "Robot B's check of robot A against a fleet ledger (tests/ros/test_fleet.py)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Ask a peer a range question over ROS and check its answer against the fleet ledger.
    Ask(AskArgs),
    /// As a writer, try to rewrite a log's past on the fleet ledger; every attempt must fail.
    Backdate {
        /// The writer's memory directory (its writer.key and memory.json).
        #[arg(long)]
        data: PathBuf,
        /// The fleet ledger service.
        #[arg(long)]
        ledger: String,
    },
}

#[derive(clap::Args)]
struct AskArgs {
    /// The peer node's full name: its services are PEER/query_range, ….
    #[arg(long)]
    peer: String,
    /// The fleet ledger service.
    #[arg(long)]
    ledger: String,
    /// The fleet ledger's key (64 hex digits), from the operator.
    #[arg(long)]
    ledger_key: String,
    /// Witnesses trusted (lines `name hex-key`), and how many must have cosigned.
    #[arg(long)]
    witnesses: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    quorum: usize,
    #[arg(long, default_value = "map")]
    frame: String,
    /// X0,Y0,Z0,X1,Y1,Z1 in mm.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    r#box: Vec<i64>,
    #[arg(long)]
    from: i64,
    #[arg(long)]
    to: i64,
}

fn main() -> Result<()> {
    let ok = match Cli::parse().command {
        Command::Ask(a) => ask(&a)?,
        Command::Backdate { data, ledger } => backdate(&data, &ledger)?,
    };
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

fn ask(a: &AskArgs) -> Result<bool> {
    let mut k = [0u8; 32];
    hex::decode_to_slice(&a.ledger_key, &mut k).context("--ledger-key: 64 hex digits")?;
    let key = VerifyingKey::from_bytes(&k).context("--ledger-key: not an ed25519 key")?;
    let [x0, y0, z0, x1, y1, z1] = a.r#box[..] else { bail!("--box: six numbers") };
    let bounds = BoxMm { min_mm: [x0, y0, z0], max_mm: [x1, y1, z1] };
    let query = Query::new(&a.frame, bounds, a.from, a.to).context("the question")?;
    let mut expect = Expect::answer(Question::Range(query));
    if let Some(path) = &a.witnesses {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let named = Witnesses::parse_file(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        expect = expect.cosigned_by(named.into_iter().map(|(_, k)| k).collect(), a.quorum);
    }

    // Over ROS: the peer's answer, nothing else from it.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let ctx = r2r::Context::create()?;
    let mut node = r2r::Node::create(ctx, "robot_b_check", "")?;
    let service = format!("{}/query_range", a.peer.trim_end_matches('/'));
    let client = node.create_client::<QueryRange::Service>(&service, QosProfile::services_default())?;
    let spinner = ros_common::Spinner::start(node);
    let time = |ns: i64| RosTime { sec: (ns / 1_000_000_000) as i32, nanosec: (ns % 1_000_000_000) as u32 };
    let request = QueryRange::Request {
        frame_id: a.frame.clone(),
        min_mm: bounds.min_mm.to_vec(),
        max_mm: bounds.max_mm.to_vec(),
        from_time: time(a.from),
        to_time: time(a.to),
        as_of_size: 0,
    };
    let mut response = None;
    for _ in 0..60 {
        if let Ok(future) = client.request(&request)
            && let Ok(Ok(r)) =
                runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), future).await })
        {
            response = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(spinner);
    let response = response.with_context(|| format!("{service} did not answer"))?;
    if !response.ok {
        bail!("{service} refused: {}", response.error);
    }

    // Here, against the reader's key and question.
    let mut ok = true;
    let v = match proof::verify(&response.proof, &key, &expect) {
        Ok(v) => v,
        Err(e) => {
            println!("INVALID answer from {}: {} ({e})", a.peer, e.code());
            return Ok(false);
        }
    };
    let (pulse, time_ns, _) = v.pulse.context("attested")?;
    println!(
        "VALID answer from {}: {} (Pulse {pulse}, cosigned by {} witness(es))",
        a.peer,
        v.statement(),
        v.cosigned.len()
    );
    // The fleet ledger gave out this very header for that Pulse.
    let ledger = RemoteLedger::connect(&a.ledger).with_context(|| format!("reaching {}", a.ledger))?;
    if ledger.public_key() != key {
        bail!("the service at {} signs with another key than the fleet ledger's", a.ledger);
    }
    let file = ProofFile::decode(&response.proof)?;
    let carried = file.attestation.as_ref().map(|a| a.state.header);
    let served = ledger.header(pulse)?;
    if carried == Some(served) {
        println!("HEADER of Pulse {pulse} is the fleet ledger's");
    } else {
        println!("FORGED header: the fleet ledger holds another for Pulse {pulse}");
        ok = false;
    }

    // The same answer with its header an hour earlier, re-signed by a key of the peer's own:
    // refused, whether the file names that key or the fleet's.
    let own = SigningKey::from_bytes(&[0x42; 32]);
    let mut forged = file.clone();
    if let Some(att) = forged.attestation.as_mut() {
        let mut h = att.state.header.header;
        h.time_ns = time_ns - 3_600_000_000_000;
        att.state.header = SignedHeader::sign(&own, h);
        att.cosignatures.clear();
    }
    for (label, ledger_key) in
        [("names its own key", own.verifying_key().to_bytes()), ("names the fleet's key", k)]
    {
        let mut f = forged.clone();
        if let Some(att) = f.attestation.as_mut() {
            att.ledger_key = ledger_key;
        }
        match proof::verify(&f.encode(), &key, &Expect::default()) {
            Err(e) => println!("REFUSED backdated header that {label}: {} ({e})", e.code()),
            Ok(_) => {
                println!("ACCEPTED a backdated header that {label}");
                ok = false;
            }
        }
    }
    Ok(ok)
}

fn backdate(data: &std::path::Path, url: &str) -> Result<bool> {
    let writer = read_key(&data.join("writer.key")).context("the writer's key")?;
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("memory.json")).context("reading memory.json")?)?;
    let log = LogId(config["log"].as_u64().context("memory.json: log")?);
    let mut ledger = RemoteLedger::connect(url).with_context(|| format!("reaching {url}"))?;
    let current = ledger.log(log)?.context("the log is not on this ledger")?;
    if current.commits < 2 {
        bail!("log {log} has {} commits; backdating needs 2", current.commits);
    }
    let earlier =
        ledger.versions(log, current.commits - 1, 1)?.into_iter().next().context("a past version")?;
    let nonce = ledger.nonce(&account_of(&writer))?;
    let mut rewritten = current.head;
    rewritten.root[0] ^= 1;
    let attempts = [
        ("a commit built on the version before the latest", current.commits - 1, current.head),
        ("the latest version moved back to an older head", current.commits, earlier.head),
        ("the latest head rewritten (same size, another root)", current.commits, rewritten),
    ];
    let mut ok = true;
    for (what, version, head) in attempts {
        let tx = SignedTx::sign(
            &writer,
            nonce,
            Tx::CommitMemory { log, version, head, proof: vec![], seal: false, cells: Vec::new() },
        );
        match ledger.submit(tx) {
            Err(LedgerError::Refused { code, message, .. }) => println!("REFUSED {what}: {code} ({message})"),
            Err(e) => {
                println!("ERROR {what}: {e}");
                ok = false;
            }
            Ok(h) => {
                println!("ACCEPTED {what} at Pulse {}", h.header.number);
                ok = false;
            }
        }
    }
    Ok(ok)
}
