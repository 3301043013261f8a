//! `sion ledger`: the operator's side of a fleet ledger (docs/FLEET-LEDGER.md) — make one in
//! etcd, and serve it to robots and readers over gRPC.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use clap::{Args, Subcommand};
use sion_memory::fleet::DEFAULT_LISTEN;

#[derive(Subcommand)]
pub enum LedgerCommand {
    /// Make a fleet ledger in etcd: its signing key (written to --key unless that file holds
    /// one) and its genesis Pulse. Run once per ledger; a second run finds it and says so.
    Init(LedgerArgs),
    /// Serve a fleet ledger: a front-end that keeps no state of its own (everything is in
    /// etcd), so several can serve one ledger at once. Robots open logs on it with
    /// `sion memory open --ledger http://HOST:PORT` or the node's `ledger` parameter; readers
    /// check proofs with `sion memory verify --ledger http://HOST:PORT`.
    Serve(ServeArgs),
    /// Witness a fleet ledger: follow its chain and cosign each Pulse header after checking it
    /// extends the last one this witness cosigned, so no fork of the chain (a Pulse re-signed
    /// with another time or state) ever gets its cosignature. Run by someone other than the
    /// ledger's operator; readers name witnesses with `sion memory verify --witnesses FILE
    /// --quorum K`. Exits 4 if the ledger shows it a fork (printing both headers) or a chain
    /// rolled back below what it cosigned. A Pulse whose stored entry does not explain its
    /// signed header is not cosigned: it prints DAMAGED and tries again (exit 5 with --once).
    /// A Pulse whose entry is archived is followed, never cosigned (PASSED).
    Witness(WitnessArgs),
    /// Move old Pulses out of etcd into segment files (docs/FLEET-LEDGER.md, "The archive of
    /// old Pulses"): what etcd's compaction cannot drop is the chain itself, about 1.3 KiB a
    /// Pulse. Every front-end then needs the same directory (`serve --archive DIR`) to serve
    /// archived headers; state and transaction-time proofs need only etcd. Run it from cron.
    Archive(ArchiveArgs),
    /// Admit writer keys or agent-name prefixes to open logs (docs/FLEET-LEDGER.md,
    /// "Admission"): adds them to an admission policy file, made with `"open": "registered"`
    /// if it does not exist. Front-ends read it at start: `sion ledger serve --admission FILE`
    /// (restart them after a change).
    Admit(AdmitArgs),
    /// Agents, for their operators (docs/LEDGER.md, "Transactions"): register a robot's agent
    /// under a fleet's name, suspend it (its logs take no more atoms until reinstated), revoke
    /// it (for good), give a name back to its rightful controller, or show one. Each is one
    /// transaction signed with `--key`: the ledger's own, or the controller of an agent above.
    Agent(AgentArgs),
    /// Print the ledger's latest checkpoint: a C2SP signed note (origin, history size, root
    /// hash) over every Pulse header so far, signed by the ledger key and checked here against
    /// it (docs/FLEET-LEDGER.md, "Checkpoints"). With --pulse, also check that Pulse is in it.
    Checkpoint(CheckpointArgs),
}

#[derive(Args)]
pub struct CheckpointArgs {
    /// The fleet ledger service.
    #[arg(long, value_name = "URL")]
    ledger: String,
    /// The ledger's key (64 hex digits), obtained apart from the service: the checkpoint must
    /// be signed by it. Without it, the service's own key is used and printed.
    #[arg(long, value_name = "HEX")]
    ledger_key: Option<String>,
    /// Also check, by an inclusion proof, that this Pulse's signed header is in the history the
    /// checkpoint signs.
    #[arg(long, value_name = "N")]
    pulse: Option<u64>,
    /// With --pulse: the C2SP witnesses whose cosignatures count (lines `VKEY [URL]`): the
    /// checkpoint printed is then the first one they cosigned that covers the Pulse.
    #[arg(long, value_name = "FILE", requires = "pulse")]
    cosigners: Option<PathBuf>,
    /// How many of the --cosigners must have cosigned it (default: all of them).
    #[arg(long, value_name = "K", requires = "cosigners")]
    quorum: Option<usize>,
}

#[derive(Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    action: AgentAction,
}

/// What is done to an agent. Each is one transaction signed with `--key` (docs/LEDGER.md,
/// "Transactions"): the ledger refuses it, with its code, unless that key may do it.
#[derive(Subcommand)]
enum AgentAction {
    /// Register an agent, controlled by `--controller` (default: `--key`'s own account).
    /// Under a parent (`fleet/robot-7` under `fleet`) `--key` must control the parent, which
    /// must be live: that is how an operator admits a robot under a shared name. A top-level
    /// name is anyone's who takes it first. The key file is made (0600) if it does not exist,
    /// so `sion ledger agent register fleet --key fleet.key` starts a fleet's tree.
    Register {
        #[command(flatten)]
        on: AgentOn,
        /// The agent's controller: an account, 64 hex digits (a robot's writer key, printed by
        /// `sion memory key --data DIR`).
        #[arg(long, value_name = "HEX")]
        controller: Option<String>,
    },
    /// Suspend an agent: while it, or any agent above it, is suspended, the logs under it take
    /// no more atoms (their commits are refused with the code `contained`); they resume after
    /// `reinstate`. By the ledger's operator, a controller of an agent above, or its own.
    Suspend(AgentOn),
    /// Reinstate a suspended agent: its logs take atoms again, the backlog in one commit. By
    /// the ledger's operator or a controller of an agent above (not the agent's own).
    Reinstate(AgentOn),
    /// Revoke an agent, for good: its logs never take atoms again, and no agent is registered
    /// under it. By the ledger's operator, a controller of an agent above, or its own.
    Revoke(AgentOn),
    /// Give an agent's name to another controller (a name taken first by the wrong account: the
    /// old controller's logs under it then take no more atoms). By the ledger's operator (its
    /// key) or a controller of an agent above.
    Give {
        #[command(flatten)]
        on: AgentOn,
        /// The rightful controller's account (64 hex digits).
        #[arg(long, value_name = "HEX")]
        to: String,
    },
    /// Show an agent's controller and status, and those of the agents above it.
    Show {
        /// The fleet ledger service (`sion ledger serve`'s address).
        #[arg(long, value_name = "URL")]
        ledger: String,
        /// The agent's name.
        name: String,
    },
}

#[derive(Args)]
struct AgentOn {
    /// The fleet ledger service (`sion ledger serve`'s address).
    #[arg(long, value_name = "URL")]
    ledger: String,
    /// The key that signs: the ledger's own (the operator's), or one that controls an agent
    /// above this one (32 bytes, as `sion ledger init` or `register` made it).
    #[arg(long)]
    key: PathBuf,
    /// The agent's name (e.g. `fleet/robot-7`).
    name: String,
}

#[derive(Args)]
pub struct AdmitArgs {
    /// The admission policy file (JSON).
    #[arg(long, value_name = "FILE")]
    admission: PathBuf,
    /// A writer's public key (64 hex digits: `sion memory open` prints it); repeatable.
    #[arg(long, value_name = "HEX")]
    key: Vec<String>,
    /// An agent-name prefix (e.g. `fleet/`): the controllers of agents under it may open logs
    /// for them; repeatable.
    #[arg(long, value_name = "PREFIX")]
    agents: Vec<String>,
}

#[derive(Args)]
pub struct ArchiveArgs {
    #[command(flatten)]
    ledger: LedgerArgs,
    /// The archive directory (shared by every front-end: a network mount, or synced).
    #[arg(long, value_name = "DIR")]
    archive: PathBuf,
    /// Keep this many of the latest Pulses in etcd.
    #[arg(long, default_value_t = 1_000_000)]
    keep: u64,
    /// Pulses a segment file holds at most.
    #[arg(long, default_value_t = sion_fleet::archive::SEGMENT_PULSES)]
    per_segment: u64,
}

#[derive(Args)]
pub struct WitnessArgs {
    /// The fleet ledger service to follow.
    #[arg(long, value_name = "URL", required_unless_present_any = ["show_key", "serve"])]
    ledger: Option<String>,
    /// The key of the ledger witnessed (64 hex digits), obtained apart from the service: the
    /// service must sign with it.
    #[arg(long, required_unless_present = "show_key")]
    ledger_key: Option<String>,
    /// This witness's signing key (32 bytes; made if the file does not exist). Its public key
    /// is printed: readers put `NAME HEX` in their witnesses file, the operator in the
    /// service's `--witnesses` file.
    #[arg(long)]
    key: PathBuf,
    /// What this witness cosigned last (number and hash), kept durable before each
    /// cosignature leaves. Keep it with the key: a witness that loses it must not be restarted
    /// afresh under the same key.
    #[arg(long, required_unless_present = "show_key")]
    state: Option<PathBuf>,
    /// Print this witness's public key (making the key file if it does not exist) and exit.
    #[arg(long)]
    show_key: bool,
    /// Seconds between looks at the chain's head.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Follow up to the current head once, then exit.
    #[arg(long)]
    once: bool,
    /// Be a C2SP tlog-witness instead of following: serve `POST /add-checkpoint` on this
    /// address, cosigning (`cosignature/v1`) each checkpoint of the ledger that is signed by
    /// --ledger-key and extends the last one cosigned (docs/FLEET-LEDGER.md, "Checkpoints").
    /// The ledger's operator lists this witness in `sion ledger serve --cosigners FILE` with
    /// the vkey it prints. --state then keeps the size and root last cosigned.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["ledger", "once"])]
    serve: Option<SocketAddr>,
    /// This witness's name in its cosignatures, with --serve (a schema-less URL that names it,
    /// e.g. `witness.example.org/w1`).
    #[arg(long, value_name = "NAME", requires = "serve")]
    name: Option<String>,
}

#[derive(Args)]
pub struct LedgerArgs {
    /// etcd's client URLs, comma-separated (give every member: a front-end fails over).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    etcd: Vec<String>,
    /// The ledger's signing key (32 bytes). It belongs on the operator's machines only: a
    /// robot that held it could sign its own Pulses.
    #[arg(long)]
    key: PathBuf,
    /// Where in etcd's keyspace the ledger lives (one prefix per ledger).
    #[arg(long, default_value = "/sion-ledger/")]
    prefix: String,
    /// The CA that signed etcd's server certificate: etcd is reached over TLS (its URLs are
    /// then https://). scripts/etcd-pki.sh makes one (docs/FLEET-LEDGER.md, "etcd: TLS and
    /// authentication").
    #[arg(long, value_name = "FILE", env = "SION_ETCD_CA")]
    etcd_ca: Option<PathBuf>,
    /// This front-end's client certificate, for an etcd that asks for one (--client-cert-auth).
    #[arg(long, value_name = "FILE", env = "SION_ETCD_CERT", requires_all = ["etcd_ca", "etcd_key"])]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's key (0600: refused if others can read it).
    #[arg(long, value_name = "FILE", env = "SION_ETCD_KEY", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The etcd user to sign in as, for an etcd with authentication enabled.
    #[arg(long, value_name = "NAME", env = "SION_ETCD_USER", requires = "etcd_password_file")]
    etcd_user: Option<String>,
    /// The file holding that user's password, alone on one line (0600).
    #[arg(long, value_name = "FILE", env = "SION_ETCD_PASSWORD_FILE", requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
    /// Serve a ledger made before format 6 (its `P/format`, 2 … 5): refused unless given,
    /// because `P/format` is not signed and a writer to etcd who set it older would have the
    /// front-ends forgo the checks format 6 added (docs/FLEET-LEDGER.md, "The claim").
    #[arg(long, value_name = "N", default_value_t = sion_fleet::NEWEST_FORMAT,
          value_parser = clap::value_parser!(u8).range(1..=sion_fleet::NEWEST_FORMAT as i64))]
    oldest_format: u8,
}

impl LedgerArgs {
    fn access(&self) -> Result<sion_fleet::EtcdAccess> {
        let access = sion_fleet::EtcdAccess::from_files(
            self.etcd_ca.as_deref(),
            self.etcd_cert.as_deref(),
            self.etcd_key.as_deref(),
            self.etcd_user.as_deref(),
            self.etcd_password_file.as_deref(),
        )?;
        let plain = self.etcd.iter().any(|u| u.starts_with("http://"));
        if access.is_tls() && plain {
            anyhow::bail!(
                "--etcd-ca is given, so etcd is reached over TLS: its URLs are https://, not http://"
            );
        }
        if !access.is_tls() && !self.etcd.iter().all(|u| is_loopback_url(u)) {
            eprintln!(
                "warning: etcd is reached without TLS at {}: whoever reaches that port can rewrite the ledger's \
                 state (docs/FLEET-LEDGER.md, \"etcd: TLS and authentication\")",
                self.etcd.join(",")
            );
        }
        Ok(access)
    }
}

/// Whether a URL names this machine's loopback (where plain HTTP reaches no one else).
fn is_loopback_url(url: &str) -> bool {
    let host = url.split("://").nth(1).unwrap_or(url).split(['/', ':']).next().unwrap_or("");
    host == "localhost"
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        || url.contains("[::1]")
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    ledger: LedgerArgs,
    /// Address to listen on (loopback unless you say otherwise).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Keep cosignatures from the witnesses in this file (lines `name hex-key`); without it the
    /// front-end keeps none.
    #[arg(long, value_name = "FILE")]
    witnesses: Option<PathBuf>,
    /// Where `sion ledger archive` put old Pulses: headers of archived Pulses are read from it.
    #[arg(long, value_name = "DIR")]
    archive: Option<PathBuf>,
    /// Who may open logs and how fast anyone may submit (docs/FLEET-LEDGER.md, "Admission"):
    /// a JSON policy file (`sion ledger admit` makes one). Without it anyone may open logs,
    /// at most 64 per account, 20 transactions a second per account (burst 40), and 10
    /// openings a second by all unregistered accounts together (burst 50).
    #[arg(long, value_name = "FILE")]
    admission: Option<PathBuf>,
    /// The most operations one etcd transaction may hold: etcd's own `--max-txn-ops` (128
    /// unless its operator raised it). A Pulse takes as many queued transactions as fit
    /// (docs/FLEET-LEDGER.md, "Many transactions, one Pulse"); raise both together for a busy
    /// fleet (e.g. 1024). At least 128: one transaction alone may need most of that.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u64).range(128..=1_000_000))]
    etcd_max_txn_ops: u64,
    /// The most bytes one Pulse's etcd transaction may hold: keep it under etcd's own
    /// `--max-request-bytes` (1.5 MiB unless raised), which also counts the request's framing.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(65_536..=1 << 30))]
    etcd_max_request_bytes: u64,
    /// Also serve the ledger's C2SP checkpoint over HTTP on this address: `GET /checkpoint`
    /// (docs/FLEET-LEDGER.md, "Checkpoints"), for C2SP clients and witnesses. Off unless given.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Seconds between new checkpoints at most, however often one is asked for (the
    /// checkpoint served in between is the last one made).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    checkpoint_every: f64,
    /// C2SP witnesses to ask for cosignatures of the latest checkpoint (tlog-witness
    /// `add-checkpoint`): lines `VKEY URL` (the witness's cosignature/v1 verifier key and its
    /// submission prefix). Cosignatures are kept in etcd with their checkpoint.
    #[arg(long, value_name = "FILE")]
    cosigners: Option<PathBuf>,
    /// Seconds between rounds of asking the --cosigners (witness networks ask logs to batch:
    /// once a minute is typical).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0, requires = "cosigners")]
    cosign_every: f64,
    /// Another front-end of this ledger, at the address it --advertise-s (repeat, or
    /// comma-separate). The front-ends named elect one of them to make the Pulses (an etcd
    /// lease on `PREFIX/seq`) and the others hand it what passes their door, in batches signed
    /// with the ledger's key: no racing for each Pulse (docs/FLEET-LEDGER.md, "One sequencer at
    /// a time"). Give every front-end the same --key and name each of the others.
    #[arg(long = "peer", value_name = "ADDR", value_delimiter = ',', value_parser = host_port)]
    peers: Vec<String>,
    /// The address the other front-ends reach this one at (with --peer): --listen unless given;
    /// needed when --listen is a wildcard such as 0.0.0.0.
    #[arg(long, value_name = "ADDR", requires = "peers", value_parser = host_port)]
    advertise: Option<String>,
}

/// A front-end's address as peers name it: `HOST:PORT` — a host name, an IPv4 address or a
/// bracketed IPv6 one, and a port from 1. Written one way (a name in lower case, without a
/// trailing dot), since front-ends compare addresses as written: `P/seq` holds one, and a
/// forwarded batch is signed for one.
fn host_port(s: &str) -> Result<String, String> {
    if s.contains(['/', '@', '?', '#']) {
        return Err(format!("{s:?}: HOST:PORT, with no scheme, no path and no user"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, port) =
            rest.split_once(']').ok_or_else(|| format!("{s:?}: no ']' after an IPv6 address"))?;
        let v6 =
            v6.parse::<std::net::Ipv6Addr>().map_err(|_| format!("{s:?}: {v6:?} is not an IPv6 address"))?;
        let port = port.strip_prefix(':').ok_or_else(|| format!("{s:?}: not [IPV6]:PORT (no port)"))?;
        (format!("[{v6}]"), port)
    } else {
        let (host, port) = s.rsplit_once(':').ok_or_else(|| format!("{s:?}: not HOST:PORT (no port)"))?;
        if host.contains(':') {
            return Err(format!("{s:?}: an IPv6 address is written in brackets, [ADDRESS]:PORT"));
        }
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let label_ok = |l: &str| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if host.len() > 253 || !host.split('.').all(label_ok) {
            return Err(format!(
                "{s:?}: the host {host:?} is not a name, an IPv4 address or a bracketed IPv6 one (no scheme, no path)"
            ));
        }
        (host, port)
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 && !port.starts_with(['+', '0']) => Ok(format!("{host}:{port}")),
        _ => Err(format!("{s:?}: the port {port:?} is not a number from 1 to 65535")),
    }
}

pub fn run(cmd: LedgerCommand) -> Result<ExitCode> {
    let cmd = match cmd {
        // The witness's link runs its own runtime; it blocks, like a memory's.
        LedgerCommand::Witness(a) => return witness(a),
        LedgerCommand::Admit(a) => return admit(a),
        LedgerCommand::Agent(a) => return agent(a),
        LedgerCommand::Checkpoint(a) => return checkpoint(a),
        cmd => cmd,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async {
        match cmd {
            LedgerCommand::Init(a) => init(a).await,
            LedgerCommand::Serve(a) => serve(a).await,
            LedgerCommand::Archive(a) => archive(a).await,
            LedgerCommand::Witness(_)
            | LedgerCommand::Admit(_)
            | LedgerCommand::Agent(_)
            | LedgerCommand::Checkpoint(_) => {
                unreachable!("run on their own above")
            }
        }
    })
}

fn endpoints(a: &LedgerArgs) -> Vec<&str> {
    a.etcd.iter().map(String::as_str).collect()
}

async fn init(a: LedgerArgs) -> Result<ExitCode> {
    let key = sion_memory::ledger::read_or_make_key(&sion_memory::disk::Disk::os(), &a.key)
        .with_context(|| format!("the ledger key at {}", a.key.display()))?;
    let ledger = sion_fleet::FleetLedger::init_accepting(
        &endpoints(&a),
        &a.prefix,
        key,
        &a.access()?,
        a.oldest_format,
    )
    .await
    .with_context(|| format!("making the fleet ledger under {} in etcd", a.prefix))?;
    outln!(
        "fleet ledger under {} in etcd {}: key {}",
        a.prefix,
        a.etcd.join(","),
        hex::encode(ledger.public_key().to_bytes())
    );
    let access =
        if a.etcd_ca.is_some() || a.etcd_user.is_some() { " (and the same --etcd-* options)" } else { "" };
    outln!("serve it with: sion ledger serve --etcd {} --key {}{access}", a.etcd.join(","), a.key.display());
    Ok(ExitCode::SUCCESS)
}

async fn serve(a: ServeArgs) -> Result<ExitCode> {
    let key = sion_memory::ledger::read_key(&a.ledger.key).with_context(|| {
        format!("reading the ledger key {} (sion ledger init makes it)", a.ledger.key.display())
    })?;
    let public = hex::encode(key.verifying_key().to_bytes());
    let witnesses = match &a.witnesses {
        None => Vec::new(),
        Some(path) => {
            let named = crate::common::read_witnesses(path)?;
            eprintln!(
                "keeping cosignatures from {} witness(es): {}",
                named.len(),
                named.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            );
            named.into_iter().map(|(_, k)| k).collect()
        }
    };
    let ledger = sion_fleet::FleetLedger::connect_accepting(
        &endpoints(&a.ledger),
        &a.ledger.prefix,
        key,
        &a.ledger.access()?,
        a.ledger.oldest_format,
    )
    .await
    .with_context(|| format!("connecting to the fleet ledger under {}", a.ledger.prefix))?
    .with_limits(sion_fleet::TxnLimits {
        max_ops: a.etcd_max_txn_ops as usize,
        max_bytes: a.etcd_max_request_bytes as usize,
    });
    eprintln!(
        "serving the fleet ledger (key {public}) on http://{}, state in etcd {} under {}; a Pulse at most {} etcd operations and {} bytes; Ctrl-C stops",
        a.listen,
        a.ledger.etcd.join(","),
        a.ledger.prefix,
        a.etcd_max_txn_ops,
        a.etcd_max_request_bytes
    );
    // Ctrl-C, or SIGTERM from a service manager.
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
    };
    let ledger = match &a.archive {
        Some(dir) => ledger.with_archive(dir),
        None => ledger,
    };
    let policy = match &a.admission {
        Some(path) => sion_fleet::admission::Policy::read(path)?,
        None => {
            eprintln!(
                "admission: anyone may open logs (at most {} per account, {} transactions a second per account, {} \
                 openings a second by unregistered accounts together); close the door with --admission FILE \
                 (sion ledger admit)",
                sion_fleet::admission::DEFAULT_MAX_LOGS,
                sion_fleet::admission::DEFAULT_RATE.per_second,
                sion_fleet::admission::DEFAULT_STRANGERS.per_second
            );
            sion_fleet::admission::Policy::default_open()
        }
    };
    if a.admission.is_some() {
        eprintln!(
            "admission from {}: {}, {} writer key(s), agent prefixes [{}]",
            a.admission.as_ref().map_or(String::new(), |p| p.display().to_string()),
            match policy.open {
                sion_fleet::admission::Open::Anyone => "anyone may open logs",
                sion_fleet::admission::Open::Registered => "registered writers and agents only",
            },
            policy.writers.len(),
            policy.agents.join(", ")
        );
    }
    let every = std::time::Duration::try_from_secs_f64(a.checkpoint_every)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("--checkpoint-every {}: a number of seconds above 0", a.checkpoint_every))?;
    let mut service = sion_fleet::service::Service::new(ledger)
        .accepting(witnesses)
        .admitting(policy)
        .checkpointing_every(every);
    if !a.peers.is_empty() {
        let advertise = match &a.advertise {
            Some(addr) => addr.clone(),
            None if a.listen.ip().is_unspecified() => anyhow::bail!(
                "--listen {} is a wildcard: say with --advertise ADDR where the other front-ends reach this one",
                a.listen
            ),
            None => a.listen.to_string(),
        };
        if a.peers.contains(&advertise) {
            anyhow::bail!("--peer {advertise} is this front-end's own address: name the others");
        }
        eprintln!(
            "one sequencer at a time among this front-end ({advertise}) and {}: the elected one makes the Pulses, the others forward to it",
            a.peers.join(", ")
        );
        service = service.relaying(advertise, a.peers.clone());
    }
    if let Some(path) = &a.cosigners {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cosigners =
            sion_fleet::c2sp::Cosigner::parse_file(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        if let Some(c) = cosigners.iter().find(|c| c.url.is_empty()) {
            anyhow::bail!("{}: witness {} has no URL to ask it at (`VKEY URL`)", path.display(), c.name);
        }
        let every = std::time::Duration::try_from_secs_f64(a.cosign_every)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow!("--cosign-every {}: a number of seconds above 0", a.cosign_every))?;
        eprintln!(
            "asking {} C2SP witness(es) to cosign the latest checkpoint every {} s: {}",
            cosigners.len(),
            a.cosign_every,
            cosigners.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        );
        let checkpoints = service.checkpoints();
        let http =
            sion_fleet::c2sp::http_client().map_err(|e| anyhow!("the HTTP client for witnesses: {e}"))?;
        tokio::spawn(async move {
            let mut known = std::collections::HashMap::new();
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                match sion_fleet::c2sp::cosign_round(&checkpoints, &cosigners, &mut known, &http).await {
                    Ok(round) => {
                        if !round.cosigned.is_empty() {
                            eprintln!("checkpoint {} cosigned by {}", round.size, round.cosigned.join(", "));
                        }
                        for (w, why) in round.failed {
                            eprintln!("witness {w} did not cosign checkpoint {}: {why}", round.size);
                        }
                    }
                    Err(e) => eprintln!("no cosigning round: {e}"),
                }
            }
        });
    }
    // One stop for both listeners.
    let (stopped, mut on_stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        let _ = stopped.send(true);
    });
    if let Some(addr) = a.http {
        let mut on_stop = on_stop.clone();
        let stop = async move {
            let _ = on_stop.changed().await;
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (--http)"))?;
        eprintln!("serving the ledger's checkpoint at http://{}/checkpoint", listener.local_addr()?);
        let served = sion_memory::fleet::serve_checkpoints(listener, service.checkpoints(), stop);
        tokio::spawn(async move {
            if let Err(e) = served.await {
                eprintln!("the HTTP server (--http) stopped: {e}");
            }
        });
    }
    let stop = async move {
        let _ = on_stop.changed().await;
    };
    sion_fleet::service::serve_service(service, a.listen, stop).await.map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

async fn archive(a: ArchiveArgs) -> Result<ExitCode> {
    let key = sion_memory::ledger::read_key(&a.ledger.key)
        .with_context(|| format!("reading the ledger key {}", a.ledger.key.display()))?;
    std::fs::create_dir_all(&a.archive).with_context(|| format!("making {}", a.archive.display()))?;
    let mut ledger = sion_fleet::FleetLedger::connect_accepting(
        &endpoints(&a.ledger),
        &a.ledger.prefix,
        key,
        &a.ledger.access()?,
        a.ledger.oldest_format,
    )
    .await
    .with_context(|| format!("connecting to the fleet ledger under {}", a.ledger.prefix))?
    .with_archive(&a.archive);
    let latest = ledger.latest().await?.header.number;
    let before = latest.saturating_sub(a.keep.saturating_sub(1));
    let r = ledger.archive_before(before, a.per_segment).await?;
    outln!(
        "archived {} Pulse(s) in {} segment(s) to {}: Pulses 0..{} are in the archive, {}..={latest} in etcd",
        r.pulses,
        r.segments,
        a.archive.display(),
        r.archived_to,
        r.archived_to
    );
    Ok(ExitCode::SUCCESS)
}

fn admit(a: AdmitArgs) -> Result<ExitCode> {
    use sion_fleet::admission::{Open, Policy};
    if a.key.is_empty() && a.agents.is_empty() {
        anyhow::bail!("--key HEX or --agents PREFIX names whom to admit");
    }
    let mut policy = if a.admission.exists() {
        Policy::read(&a.admission)?
    } else {
        Policy { open: Open::Registered, ..Policy::default_open() }
    };
    for k in &a.key {
        let mut key = [0u8; 32];
        hex::decode_to_slice(k.trim(), &mut key).with_context(|| format!("--key {k}: not 64 hex digits"))?;
        ed25519_dalek::VerifyingKey::from_bytes(&key)
            .with_context(|| format!("--key {k}: not an ed25519 public key"))?;
        policy.writers.insert(sion_memory::ledger::Account(key));
    }
    for p in &a.agents {
        if p.is_empty() {
            anyhow::bail!("--agents: an empty prefix would admit every agent");
        }
        if !policy.agents.contains(p) {
            policy.agents.push(p.clone());
        }
    }
    // Written beside and renamed: a front-end starting meanwhile reads the old file or the new.
    let tmp = a.admission.with_extension("tmp");
    std::fs::write(&tmp, policy.to_json()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &a.admission).with_context(|| format!("replacing {}", a.admission.display()))?;
    outln!(
        "{}: {} writer key(s), agent prefixes [{}]; restart the front-ends (sion ledger serve --admission {})",
        a.admission.display(),
        policy.writers.len(),
        policy.agents.join(", "),
        a.admission.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// What `sion ledger agent` does, once its arguments are read.
enum AgentAct {
    Register(Option<String>),
    Give(String),
    Status(sion_memory::ledger::AgentStatus),
}

fn agent(a: AgentArgs) -> Result<ExitCode> {
    use sion_memory::ledger::link::LedgerLink as _;
    use sion_memory::ledger::{Account, AgentStatus, SignedTx, Tx};
    let (on, act) = match a.action {
        AgentAction::Show { ledger, name } => return show_agent(&ledger, &name),
        AgentAction::Register { on, controller } => (on, AgentAct::Register(controller)),
        AgentAction::Give { on, to } => (on, AgentAct::Give(to)),
        AgentAction::Suspend(on) => (on, AgentAct::Status(AgentStatus::Suspended)),
        AgentAction::Reinstate(on) => (on, AgentAct::Status(AgentStatus::Live)),
        AgentAction::Revoke(on) => (on, AgentAct::Status(AgentStatus::Revoked)),
    };
    // Registering may start a fleet's tree with a key of its own; every other act is by a key
    // that already controls something, so a mistyped path must not make a new one.
    let key = match act {
        AgentAct::Register(_) if !on.key.exists() => {
            sion_memory::ledger::read_or_make_key(&sion_memory::disk::Disk::os(), &on.key)
        }
        _ => sion_memory::ledger::read_key(&on.key),
    }
    .with_context(|| format!("the key at {}", on.key.display()))?;
    let me = Account(key.verifying_key().to_bytes());
    let account = |flag: &str, hex_key: &str| -> Result<Account> {
        hex_key.parse().map_err(|_| anyhow!("{flag} {hex_key}: an account is 64 hex digits"))
    };
    let mut link = sion_fleet::client::RemoteLedger::connect(&on.ledger)
        .with_context(|| format!("connecting to the fleet ledger at {}", on.ledger))?;
    let before = link.agent(&on.name)?;
    let tx = match act {
        AgentAct::Register(controller) => {
            if let Some(ag) = &before {
                anyhow::bail!(
                    "agent {} exists already (controller {}, {})",
                    on.name,
                    ag.controller,
                    ag.status
                );
            }
            let controller = controller.as_deref().map_or(Ok(me), |h| account("--controller", h))?;
            Tx::RegisterAgent { name: on.name.clone(), controller }
        }
        AgentAct::Give(to) => Tx::ReassignAgent { name: on.name.clone(), controller: account("--to", &to)? },
        AgentAct::Status(status) => Tx::SetAgentStatus { name: on.name.clone(), status },
    };
    if before.is_none() && !matches!(tx, Tx::RegisterAgent { .. }) {
        anyhow::bail!("no agent {} on the ledger at {}", on.name, on.ledger);
    }
    let nonce = link.nonce(&me)?;
    let header = match link.submit(SignedTx::sign(&key, nonce, tx)) {
        Ok(header) => header,
        Err(e) if e.code() == "not_controller" => {
            let operator = hex::encode(link.public_key().to_bytes());
            return Err(anyhow!(e)).context(format!(
                "{} (the key at {}) may not do this to {}: sign with the ledger's key ({operator}) or the key of a controller of an agent above it",
                me,
                on.key.display(),
                on.name
            ));
        }
        Err(e) => return Err(anyhow!(e)).context(format!("the ledger refused this for agent {}", on.name)),
    };
    let after = link.agent(&on.name)?.with_context(|| format!("agent {} after the change", on.name))?;
    match before {
        Some(b) => outln!(
            "agent {}: {} (controller {}), was {} (controller {}); Pulse {}",
            on.name,
            after.status,
            after.controller,
            b.status,
            b.controller,
            header.header.number
        ),
        None => outln!(
            "agent {}: registered, {} (controller {}); Pulse {}",
            on.name,
            after.status,
            after.controller,
            header.header.number
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// An agent and every agent above it: whichever is not live contains the logs under it.
fn show_agent(ledger: &str, name: &str) -> Result<ExitCode> {
    use sion_memory::ledger::link::LedgerLink as _;
    let link = sion_fleet::client::RemoteLedger::connect(ledger)
        .with_context(|| format!("connecting to the fleet ledger at {ledger}"))?;
    // The top first: the ledger's own walk up a name (`parent_of`), reversed.
    let mut path = vec![name];
    while let Some(parent) = path.last().copied().and_then(sion_memory::ledger::parent_of) {
        path.push(parent);
    }
    for agent in path.into_iter().rev() {
        match link.agent(agent)? {
            Some(ag) => outln!("{agent}: {} (controller {})", ag.status, ag.controller),
            None => anyhow::bail!("no agent {agent} on the ledger at {ledger}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `sion ledger witness --serve ADDR`: a C2SP tlog-witness of one ledger's checkpoints.
fn c2sp_witness(a: WitnessArgs, key: ed25519_dalek::SigningKey, addr: SocketAddr) -> Result<ExitCode> {
    let (Some(ledger_key), Some(state)) = (&a.ledger_key, &a.state) else {
        anyhow::bail!("--ledger-key and --state name what to witness");
    };
    let ledger_key = crate::common::ledger_key_arg(ledger_key)?;
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("sion-witness/{}", hex::encode(&key.verifying_key().to_bytes()[..8])));
    let witness = sion_fleet::c2sp::C2spWitness::open(key, &name, ledger_key, state)?;
    eprintln!(
        "C2SP witness {name} of the ledger {} (origin {}); last cosigned size {}",
        hex::encode(ledger_key.to_bytes()),
        sion_verify::ledger::origin_of(&ledger_key.to_bytes()),
        witness.last().0
    );
    // The vkey on standard output: what the operator puts in --cosigners, and readers too.
    outln!("{}", witness.vkey());
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async move {
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (--serve)"))?;
        eprintln!("serving POST http://{}/add-checkpoint; Ctrl-C stops", listener.local_addr()?);
        sion_memory::fleet::serve_witness(listener, witness, stop, |s| eprintln!("{s}"))
            .await
            .with_context(|| format!("serving the C2SP witness on {addr}"))
    })?;
    Ok(ExitCode::SUCCESS)
}

fn witness(a: WitnessArgs) -> Result<ExitCode> {
    use sion_fleet::witness::{Witness, WitnessError};
    let key = sion_memory::ledger::read_or_make_key(&sion_memory::disk::Disk::os(), &a.key)
        .with_context(|| format!("the witness key at {}", a.key.display()))?;
    if a.show_key {
        outln!("{}", hex::encode(key.verifying_key().to_bytes()));
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(addr) = a.serve {
        return c2sp_witness(a, key, addr);
    }
    let (Some(url), Some(ledger_key), Some(state)) = (&a.ledger, &a.ledger_key, &a.state) else {
        anyhow::bail!("--ledger, --ledger-key and --state name what to witness");
    };
    let ledger_key = crate::common::ledger_key_arg(ledger_key)?;
    if !(a.interval.is_finite() && a.interval > 0.0) {
        anyhow::bail!("--interval {}: a positive number of seconds", a.interval);
    }
    let mut witness = Witness::open(key, ledger_key, state)?;
    eprintln!(
        "witness key {} (readers: a line `NAME {}` in their --witnesses file); last cosigned: {}",
        hex::encode(witness.public_key().to_bytes()),
        hex::encode(witness.public_key().to_bytes()),
        witness.last().map_or("nothing yet".to_owned(), |(n, _)| format!("Pulse {n}"))
    );
    let link = sion_fleet::client::RemoteLedger::connect(url)
        .with_context(|| format!("connecting to the fleet ledger at {url}"))?;
    loop {
        match witness.follow(&link, |_| {}) {
            Ok(n) => {
                if n > 0 {
                    eprintln!("cosigned {n} Pulse(s), up to Pulse {}", witness.last().map_or(0, |l| l.0));
                }
                // Archived entries cannot be checked: followed, never cosigned.
                if witness.passed() > 0 {
                    outln!(
                        "PASSED {url}: {} archived Pulse(s) followed without a cosignature (their entries \
                         are archived: nothing to check them against), up to Pulse {}",
                        witness.passed(),
                        witness.last().map_or(0, |l| l.0)
                    );
                }
            }
            Err(
                e @ (WitnessError::Equivocation { .. }
                | WitnessError::DoesNotExtend { .. }
                | WitnessError::RolledBack { .. }
                | WitnessError::Signature(_)),
            ) => {
                outln!("FORK {url}: {e}");
                return Ok(ExitCode::from(4));
            }
            // Not signed evidence: the stored entry does not explain the header. Not cosigned;
            // looked at again (the entry put right, the witness goes on).
            Err(e @ WitnessError::Damaged { .. }) => {
                outln!("DAMAGED {url}: {e}");
                if a.once {
                    return Ok(ExitCode::from(5));
                }
            }
            // The service unreachable: say so and look again (nothing was cosigned).
            Err(WitnessError::Ledger(e)) if !a.once => eprintln!("{e}; trying again"),
            Err(e) => return Err(e.into()),
        }
        if a.once {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(a.interval));
    }
}

fn checkpoint(a: CheckpointArgs) -> Result<ExitCode> {
    use sion_memory::ledger::link::LedgerLink as _;
    let link = sion_fleet::client::RemoteLedger::connect(&a.ledger)?;
    let served = link.public_key();
    if let Some(want) = &a.ledger_key {
        let want = crate::common::ledger_key_arg(want)?;
        if want != served {
            anyhow::bail!(
                "the service at {} signs with key {}, not the --ledger-key given ({})",
                a.ledger,
                hex::encode(served.to_bytes()),
                hex::encode(want.to_bytes())
            );
        }
    } else {
        eprintln!(
            "checked against the service's own key {} (give --ledger-key to pin it)",
            hex::encode(served.to_bytes())
        );
    }
    eprintln!("C2SP verifier key: {}", sion_verify::ledger::ledger_vkey(&served.to_bytes()));
    let (note, checkpoint) = match (&a.cosigners, a.pulse) {
        (Some(path), Some(pulse)) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let cosigners = sion_fleet::c2sp::Cosigner::parse_file(&text)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let quorum = a.quorum.unwrap_or(cosigners.len());
            if quorum == 0 || quorum > cosigners.len() {
                anyhow::bail!("--quorum {quorum}: between 1 and the {} witness(es) named", cosigners.len());
            }
            // The first kept checkpoint past the Pulse that the quorum cosigned: a round in which a
            // witness was down kept fewer lines, and a later checkpoint covers the Pulse too.
            let mut after = pulse;
            let mut best: Option<(usize, u64)> = None;
            let mut looked = 0;
            let (note, cp, by) = loop {
                looked += 1;
                let found = if looked > 1024 { None } else { link.cosigned_checkpoint(after)? };
                let Some((note, cp)) = found else {
                    match best {
                        None => anyhow::bail!(
                            "no cosigned checkpoint covers Pulse {pulse} yet: the witnesses are asked at the ledger's cadence (sion ledger serve --cosign-every)"
                        ),
                        Some((n, size)) => anyhow::bail!(
                            "no checkpoint covering Pulse {pulse} is cosigned by a quorum of {quorum} of the witnesses named: at most {n} (checkpoint {size})"
                        ),
                    }
                };
                let by: Vec<String> = cosigners
                    .iter()
                    .filter_map(|c| {
                        let t = note.cosigned_by(&c.name, &c.key)?;
                        let ns = i64::try_from(t).ok()?.checked_mul(1_000_000_000)?;
                        Some(format!("{} at {}", c.name, sion_verify::time::rfc3339(ns)))
                    })
                    .collect();
                if by.len() >= quorum {
                    break (note, cp, by);
                }
                if best.is_none_or(|(n, _)| by.len() > n) {
                    best = Some((by.len(), cp.size));
                }
                after = cp.size;
            };
            eprintln!("cosigned by {} (quorum {quorum})", by.join(", "));
            (note, cp)
        }
        _ => link.checkpoint()?,
    };
    outln!("{}", note.encode().trim_end_matches('\n'));
    if let Some(pulse) = a.pulse {
        let header = link.header(pulse)?;
        let proof = link.history_inclusion(pulse, checkpoint.size)?;
        checkpoint.includes(&header.header, &proof)?;
        eprintln!(
            "Pulse {pulse} ({}) is leaf {pulse} of the history of {} Pulses this checkpoint signs",
            sion_verify::time::rfc3339(header.header.time_ns),
            checkpoint.size
        );
    }
    Ok(ExitCode::SUCCESS)
}
