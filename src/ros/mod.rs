//! The ROS 2 node `sion_memory` (feature `ros`; docs/ROS.md): live topics become atoms
//! through [`crate::ingest`], durable before anything hears of them; the memory brain runs in
//! continuous mode and commits heads to the ledger; services answer with proofs; the head is
//! published after every commit and the intake's counters periodically.
//!
//! Threads: the ROS executor spins on one thread and only forwards raw messages; the intake
//! converts and writes them on another; services and publishers are tokio tasks, with proof
//! building on the blocking pool.

mod convert;
mod intake;
pub mod log;
mod markers;
mod params;
mod services;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use futures::{FutureExt as _, StreamExt as _};
use r2r::QosProfile;
use r2r::diagnostic_msgs::msg::{DiagnosticArray, DiagnosticStatus, KeyValue};
use r2r::sion_memory_msgs::msg;
use r2r::visualization_msgs::msg::MarkerArray;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::brain::{BrainConfig, MemoryBrain, MemoryKernel, Readers};
use crate::cognet::{Definition, Mode, Telemetry};
use crate::ingest::{Ingest, Source, Stream};
pub use intake::Latencies;
pub use params::Params;

const NODE: &str = "sion_memory";

/// The quality of service a robotics engineer expects on each stream: camera frames and
/// scans are sensor data (best effort, shallow), static transforms and maps are latched
/// (transient local), poses and transforms are reliable with room for a burst; fast sensors,
/// detections and other topics best effort (which matches reliable publishers too) with room
/// for a burst.
fn qos(stream: Stream) -> QosProfile {
    match stream {
        Stream::Image | Stream::CompressedImage | Stream::CameraInfo => QosProfile::sensor_data(),
        Stream::LaserScan | Stream::PointCloud2 => QosProfile::sensor_data(),
        Stream::Imu | Stream::NavSatFix | Stream::Detections3D | Stream::Detections2D | Stream::Other => {
            QosProfile::sensor_data().keep_last(100)
        }
        Stream::TfStatic => QosProfile::default().keep_last(100).transient_local(),
        Stream::Map => QosProfile::default().keep_last(1).transient_local(),
        Stream::Pose | Stream::Odometry | Stream::Tf => QosProfile::default().keep_last(1000),
    }
}

/// Say which parameters given (a parameters file, `-p`) this node does not read: a name
/// mistyped, or one of an older version, would otherwise be ignored in silence.
fn warn_unread_parameters(node: &r2r::Node) {
    let declared: std::collections::BTreeSet<String> =
        Params::declared().into_iter().map(|(n, ..)| n).collect();
    let given: Vec<String> =
        node.params.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
    for name in given.iter().filter(|n| !declared.contains(*n) && *n != "use_sim_time") {
        let hint = match name.as_str() {
            "topics.image" | "topics.compressed_image" | "topics.camera_info" => {
                ": cameras are listed in topics.cameras (each by its image topic, its camera_info beside it)"
            }
            _ => "",
        };
        tracing::warn!(
            "parameter {name} is not one this node reads, and is ignored{hint} (`sion_memory_node --help` lists them)"
        );
    }
}

/// Run the node until SIGINT or SIGTERM: set up from its ROS parameters, open (or create) the
/// memory, subscribe, serve, commit and publish (docs/ROS.md).
pub async fn run() -> Result<()> {
    let ctx = r2r::Context::create().context("initialising ROS 2 (rcl)")?;
    let mut node = r2r::Node::create(ctx, NODE, "").context("creating the node")?;
    // From here the log goes through rcl: the console as ROS prints it, and /rosout.
    log::through_rcl(node.logger());
    let clock: RosClock = node.get_ros_clock();
    let node_clock = clock.clone();
    log::publish_rosout(
        node.create_publisher::<r2r::rcl_interfaces::msg::Log>("/rosout", log::rosout_qos())
            .context("creating the /rosout publisher")?,
        clock.clone(),
    );
    let params = Arc::new(Mutex::new(Params::default()));
    let (parameter_handler, parameter_events) =
        node.make_derived_parameter_handler(params.clone()).context("declaring the parameters")?;
    tokio::spawn(parameter_handler);
    warn_unread_parameters(&node);
    let p = params.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut ingest_config = p.ingest().map_err(|e| anyhow!(e))?;
    let mcp_listen = p.mcp_listen().map_err(|e| anyhow!(e))?;
    let dir = PathBuf::from(&p.data_dir);
    let free = free_bytes(&dir);
    let (retention, keep_frame_every_ns) = p.retention(free).map_err(|e| anyhow!(e))?;

    // The index's budgets are the node's parameters (SION_INDEX_*_MIB are for other processes).
    let index = p.index().map_err(|e| anyhow!(e))?;
    // An existing memory keeps the ledger its memory.json names; `ledger` is for a new one.
    let memory = if dir.join("memory.json").exists() {
        crate::fleet::options(&dir).index(index).open()
    } else {
        let ledger = Some(p.ledger.as_str()).filter(|l| *l != "embedded" && !l.is_empty());
        crate::fleet::options_on(&dir, ledger)
            .and_then(|o| o.index(index).agent(p.agent.as_str()).sealed(p.sealed).create())
    }
    .with_context(|| format!("opening the memory at {}", dir.display()))?;
    let recovered = memory.recovery().clone();
    match memory.index_boot() {
        crate::memory::IndexBoot::Rebuilt { why, folded, rebuilds } => tracing::warn!(
            "the index was rebuilt from the log ({why}): {folded} atoms folded; {rebuilds} rebuild(s) so far"
        ),
        crate::memory::IndexBoot::Checkpoint { version, folded } => tracing::info!(
            "the index resumed from its checkpoint at {version} atoms and folded {folded} more"
        ),
    }
    tracing::info!(
        "memory at {}: {} atoms, {} committed{}",
        dir.display(),
        memory.log().size(),
        memory.committed().head.size,
        if recovered.torn_bytes > 0 {
            format!(
                " (a torn tail of {} bytes was cut on recovery and kept in {})",
                recovered.torn_bytes,
                recovered.set_aside.as_ref().map_or_else(|| "log/torn".into(), |p| p.display().to_string())
            )
        } else {
            String::new()
        }
    );
    // Retention is a sealed memory's: a memory in the clear keeps everything it remembers.
    let sealed = memory.space().is_some();
    if !sealed {
        tracing::warn!(
            "this memory keeps camera frames and map tiles in the clear, and keeps them all for as long as it \
             exists: the images of whoever walked by included. A new memory made with sealed: true seals them \
             and keeps one frame a second for a week (docs/SEAL.md, \"Defaults\")"
        );
    }
    if sealed {
        ingest_config.keep_frame_every_ns = keep_frame_every_ns;
        tracing::info!(
            "sealed memory: frames and tiles are sealed; camera payloads kept one per {:.1} s, for {:.0} s, within {} MB",
            keep_frame_every_ns as f64 / 1e9,
            retention.camera.keep_ns as f64 / 1e9,
            retention.camera.keep_bytes / 1_000_000
        );
    }
    // Frames kept per camera per second, changed live by `ros2 param set`.
    let keep_every = Arc::new(std::sync::atomic::AtomicI64::new(ingest_config.keep_frame_every_ns));
    let (kernel, intake) = MemoryKernel::new(memory).map_err(|e| anyhow!("{e}"))?;
    let readers = kernel.readers();

    // Subscriptions are drained by the executor's own thread right after each spin (below):
    // r2r hands each message through a channel of 10, and a consumer that waits for a busy
    // async worker would lose messages when it fills.
    let (arrivals_tx, arrivals) = mpsc::channel(p.intake_queue_messages.clamp(16, 1 << 20) as usize);
    let queue = intake::Queue {
        max_bytes: (p.intake_queue_mb.clamp(1, 1 << 16) as usize) << 20,
        queued: Arc::default(),
    };
    let queued = Arc::clone(&queue.queued);
    // One subscription per source, numbered as the ingest numbers them.
    let sources: Vec<Source> = ingest_config.sources.clone();
    let mut subscriptions = Vec::new();
    for (id, source) in sources.iter().enumerate() {
        let (topic, ty) = (&source.topic, &source.message_type);
        let sub = node.subscribe_raw(topic, ty, qos(source.stream)).with_context(|| {
            format!(
                "subscribing to {topic} ({ty}){}",
                if source.stream == Stream::Other {
                    " (topics.other: a type of a package this node was built with, docs/ROS.md)"
                } else {
                    ""
                }
            )
        })?;
        subscriptions.push((id, source.stream, sub));
    }

    let head_pub =
        node.create_publisher::<msg::Head>("~/head", QosProfile::default().keep_last(1).transient_local())?;
    let stats_pub = node.create_publisher::<msg::Stats>("~/stats", QosProfile::default())?;
    let diagnostics_pub = node.create_publisher::<DiagnosticArray>("/diagnostics", QosProfile::default())?;
    // The last answer stays for a viewer that starts later (transient local, as RViz2's and
    // Foxglove's marker subscriptions accept).
    let answer_pub = node
        .create_publisher::<MarkerArray>("~/answer", QosProfile::default().keep_last(1).transient_local())?;
    let around_pub = node.create_publisher::<MarkerArray>("~/around", QosProfile::default().keep_last(1))?;
    let robot_at = markers::RobotAt::new(&p.fixed_frame);
    // Markers stop with the other publishers (below), after the last commit.
    let drawing_stop = CancellationToken::new();

    // The brain, in continuous mode; its stimuli are the log sizes the intake reaches.
    let mut brain_config = BrainConfig::default();
    brain_config.cognet.mode =
        Mode::Continuous { period_ms: u64::try_from(p.brain_period_ms).unwrap_or(100).max(1) };
    brain_config.commit_period_ms = (p.commit_period_s.max(0.001) * 1000.0).round() as u64;
    brain_config.commit_every = u64::try_from(p.commit_every_atoms).unwrap_or(1).max(1);
    if sealed {
        brain_config.retention = retention;
        brain_config.retention_check_ms = p.retention_check_ms().map_err(|e| anyhow!(e))?;
    }
    let brain = MemoryBrain::new(kernel, brain_config.clone());
    let commit_now = brain.commit_now();
    let live = LiveParameters { brain: brain.live(), keep_frame_every_ns: keep_every.clone(), free, sealed };
    tokio::spawn(apply_parameters(parameter_events, params.clone(), live));
    let mut definition = Definition::new(brain_config.cognet.clone(), Telemetry::new());
    definition.declare_loop(brain);
    let mut cognet = definition.load().await.map_err(|e| anyhow!("{e}"))?;
    let (told_tx, mut told) = mpsc::unbounded_channel::<u64>();
    let shutdown = CancellationToken::new();
    // Cancelled at the signal: no new MCP work while the node drains and commits.
    let serving = CancellationToken::new();

    // The verbs (src/protocol.rs) through this kernel: ROS services and MCP tools share them, so
    // the node stays the memory's one writer whichever clients use it.
    let protocol = Arc::new(
        crate::protocol::Protocol::through(crate::protocol::KernelDoors {
            readers: readers.clone(),
            intake: intake.clone(),
            told: told_tx.clone(),
            commit_now,
        })
        .with_others(p.believe_from()),
    );
    let services = services::Services {
        readers: readers.clone(),
        intake: intake.clone(),
        protocol: protocol.clone(),
        markers: markers::Drawer::start(answer_pub, readers.clone(), drawing_stop.clone()),
    };
    services.serve(&mut node)?;
    if let Some(addr) = mcp_listen {
        let options = if let crate::mcp::Listen::Unix(_) = addr {
            let peers = p.mcp_unix_peers().map_err(|e| anyhow!(e))?;
            tracing::info!("MCP clients are admitted by their user id: {}", peers.summary());
            crate::mcp::HttpOptions::new(peers)
        } else {
            let (path, default) = p.mcp_tokens(&dir);
            let (tokens, created) = if default {
                crate::mcp::access::Tokens::load_or_create(&path)
            } else {
                crate::mcp::access::Tokens::load(&path).map(|t| (t, false))
            }
            .context("parameter mcp_tokens")?;
            if created {
                tracing::info!(
                    "wrote new MCP tokens to {} (one each for read, remember, admin)",
                    path.display()
                );
            }
            tracing::info!("MCP clients present a token of {} ({})", path.display(), tokens.summary());
            crate::mcp::HttpOptions::new(tokens)
        };
        let server = crate::mcp::MemoryServer::over(protocol);
        let stop = serving.clone();
        let (bound_tx, bound) = tokio::sync::oneshot::channel();
        let listen = addr.clone();
        tokio::spawn(async move {
            let served = crate::mcp::serve_http(
                server,
                listen,
                options,
                |a| {
                    let _ = bound_tx.send(a);
                },
                async move { stop.cancelled().await },
            )
            .await;
            if let Err(e) = served {
                tracing::error!("MCP is not served: {e}");
            }
        });
        match bound.await {
            Ok(a) => tracing::info!("serving MCP (streamable HTTP) at {}", a.endpoint()),
            Err(_) => anyhow::bail!("parameter mcp_listen: could not serve MCP at {addr} (see above)"),
        }
    }

    let counters: intake::Counters = Arc::default();
    let intake_thread = {
        let keep_every = keep_every.clone();
        let ingest = Ingest::new(ingest_config);
        let counters = counters.clone();
        let robot_at = robot_at.clone();
        let interval = Duration::from_secs_f64(p.stats_period_s.max(0.1));
        // Frames waiting for the frame writer are bounded as the intake's queue is.
        let frame_bytes = (p.intake_queue_mb.clamp(1, 1 << 16) as usize) << 20;
        std::thread::Builder::new().name("intake".into()).spawn(move || {
            intake::run(
                ingest,
                intake,
                arrivals,
                queued,
                counters,
                told_tx,
                interval,
                frame_bytes,
                keep_every,
                robot_at,
            )
        })?
    };

    // The publishers stop after the last commit, before the node is dropped: a publish on a
    // dropped node's publisher fails (RCL_RET_PUBLISHER_INVALID).
    let publishers_stop = CancellationToken::new();
    let head_publisher = {
        let (readers, shutdown) = (readers.clone(), publishers_stop.clone());
        std::thread::Builder::new()
            .name("head-publisher".into())
            .spawn(move || publish_heads(readers, head_pub, shutdown))?
    };
    tokio::spawn(markers::publish_around(
        around_pub,
        readers.clone(),
        params.clone(),
        robot_at,
        drawing_stop.clone(),
    ));
    tokio::spawn(publish_stats(
        Health {
            readers: readers.clone(),
            counters: counters.clone(),
            sources: sources.clone(),
            params: p.clone(),
            dir: dir.clone(),
            clock,
        },
        stats_pub,
        diagnostics_pub,
        Duration::from_secs_f64(p.stats_period_s.max(0.01)),
        publishers_stop.clone(),
    ));

    // The executor: spin until asked to stop, and after each spin hand every message taken to
    // the intake, stamped with its receipt.
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        let counters = counters.clone();
        let clock = node_clock.clone();
        std::thread::Builder::new().name("ros-spin".into()).spawn(move || {
            let mut dropped: Vec<(usize, u64)> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                node.spin_once(Duration::from_millis(5));
                let at = std::time::Instant::now();
                // ROS time (/clock's with use_sim_time): it places messages without stamps.
                let received_ns = now(&clock);
                for (source, stream, sub) in &mut subscriptions {
                    while let Some(Some(bytes)) = sub.next().now_or_never() {
                        let arrival =
                            intake::Arrival { source: *source, stream: *stream, bytes, at, received_ns };
                        if !queue.offer(&arrivals_tx, arrival) {
                            match dropped.iter_mut().find(|(s, _)| s == source) {
                                Some((_, n)) => *n += 1,
                                None => dropped.push((*source, 1)),
                            }
                        }
                    }
                }
                if !dropped.is_empty() {
                    let mut counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
                    for (source, n) in dropped.drain(..) {
                        let c = counters.entry(source).or_default();
                        c.received += n;
                        c.dropped += n;
                    }
                }
            }
            // The subscriptions and the intake's sender end here, so the intake drains; the
            // node itself is handed back and kept until its publishers have stopped.
            drop(subscriptions);
            drop(arrivals_tx);
            node
        })?
    };
    tracing::info!(
        "sion_memory is up: remembering {}",
        sources.iter().map(|s| s.topic.as_str()).collect::<Vec<_>>().join(", ")
    );

    // The brain runs here (its futures stay on this thread) while the stopper waits for a
    // signal, stops the executor, lets the intake drain, and then ends the brain's run.
    let brain = async {
        let result = cognet.run(&mut told, &shutdown, |_, _| {}).await;
        if let Err(e) = &result {
            tracing::error!("the memory brain stopped: {e} (the node keeps remembering and answering)");
        }
        cognet.shutdown().await
    };
    let stopper = async {
        wait_for_signal().await;
        tracing::info!("stopping: taking in what arrived, then committing");
        serving.cancel();
        stop.store(true, Ordering::SeqCst);
        let drained = tokio::task::spawn_blocking(move || {
            let node = spinner.join().map_err(|_| anyhow!("the ROS executor thread panicked"))?;
            // With its subscriptions gone the intake drains what it holds.
            intake_thread.join().map_err(|_| anyhow!("the intake panicked"))?;
            Ok::<_, anyhow::Error>(node)
        })
        .await;
        shutdown.cancel();
        drained
    };
    let (brain, drained) = tokio::join!(brain, stopper);
    let node = drained??;
    let mut brain = brain.map_err(|e| anyhow!("{e}"))?;
    // One last wake so nothing durable is left uncommitted.
    brain.commit_now().request();
    let signal = CancellationToken::new();
    brain.sync(&signal).map_err(|e| anyhow!("{e}"))?;
    brain.think();
    brain.act().await.map_err(|e| anyhow!("{e}"))?;
    // The last head published, then the publishers stopped, then the node dropped.
    publishers_stop.cancel();
    drawing_stop.cancel();
    if tokio::task::spawn_blocking(move || head_publisher.join().is_err()).await.unwrap_or(true) {
        tracing::error!("the head publisher panicked");
    }
    log::stop_rosout();
    drop(node);
    let head = readers.committed().head;
    tracing::info!("stopped with {} atoms committed, root {}", head.size, hex::encode(head.root));
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Parameters set while the node runs (`ros2 param set`): the brain's commit period and a
/// sealed memory's retention take effect at its next wake (the frames kept per second at the
/// intake's next batch); a value out of range is refused
/// with a warning and the one in force kept; every other parameter is read only at start, and
/// setting it says so. (r2r's parameter services accept every set of a declared parameter: the
/// node cannot refuse one, so it says what it did with it.)
/// What a parameter set while the node runs can change: the brain's live settings and the
/// intake's frame thinning.
struct LiveParameters {
    brain: crate::brain::LiveSettings,
    keep_frame_every_ns: Arc<std::sync::atomic::AtomicI64>,
    free: u64,
    sealed: bool,
}

async fn apply_parameters(
    mut events: impl futures::Stream<Item = (String, r2r::ParameterValue)> + Unpin,
    params: Arc<Mutex<Params>>,
    live: LiveParameters,
) {
    let LiveParameters { brain: settings, keep_frame_every_ns, free, sealed } = live;
    while let Some((name, value)) = events.next().await {
        let p = params.lock().unwrap_or_else(PoisonError::into_inner).clone();
        // The markers' task reads its parameters at each period.
        if name.starts_with("markers.") {
            tracing::info!("parameter {name} set to {value:?}: in force from the next drawing");
            continue;
        }
        let live_now =
            name == "commit_period_s" || name == "commit_every_atoms" || name.starts_with("retention.");
        if !live_now {
            tracing::warn!(
                "parameter {name} set to {value:?}: it is read when the node starts, so the value in force is \
                 unchanged until the next start"
            );
            continue;
        }
        if name.starts_with("retention.") && !sealed {
            tracing::warn!(
                "parameter {name} set to {value:?}: this memory is in the clear, and retention is a sealed memory's"
            );
            continue;
        }
        let period = p.commit_period_s;
        let applied = p.retention(free).and_then(|(retention, every_ns)| {
            let check = p.retention_check_ms()?;
            if !(period.is_finite() && period > 0.0 && period <= 86_400.0) {
                return Err(format!("parameter commit_period_s must be from 0 to 86400 s, not {period}"));
            }
            let every = u64::try_from(p.commit_every_atoms).ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("parameter commit_every_atoms must be positive, not {}", p.commit_every_atoms)
            })?;
            settings.update(|l| {
                l.commit_period_ms = (period * 1000.0).round() as u64;
                l.commit_every = every;
                if sealed {
                    l.retention = retention;
                    l.retention_check_ms = check;
                }
            });
            if sealed {
                keep_frame_every_ns.store(every_ns, Ordering::Relaxed);
            }
            Ok(())
        });
        match applied {
            Ok(()) => tracing::info!(
                "parameter {name} set to {value:?}: in force from the memory brain's next wake"
            ),
            Err(e) => tracing::warn!(
                "{e}: refused, the value in force is kept (`ros2 param get` shows the one asked)"
            ),
        }
    }
}

/// The space free (to an unprivileged writer) on the filesystem that holds `dir`, or its
/// nearest existing ancestor; 0 when none can be asked.
fn free_bytes(dir: &std::path::Path) -> u64 {
    dir.ancestors()
        .find_map(|d| {
            rustix::fs::statvfs(if d.as_os_str().is_empty() { std::path::Path::new(".") } else { d }).ok()
        })
        .map_or(0, |s| s.f_bavail.saturating_mul(s.f_frsize))
}

/// The committed head as a message.
fn head_message(readers: &Readers) -> msg::Head {
    let (log, pulse_time) = readers.head_at(None).unwrap_or_else(|_| (readers.committed(), 0));
    convert::head(&log, pulse_time, readers.ledger_key().to_bytes())
}

/// Publish the head once at start (latched) and after every commit: woken by the memory's
/// commits ([`crate::memory::HeadWatch`]), never polling. Runs on a thread of its own until
/// `shutdown`, which it notices within a quarter second.
fn publish_heads(readers: Readers, publisher: r2r::Publisher<msg::Head>, shutdown: CancellationToken) {
    let heads = readers.watch_head();
    let mut last = None;
    while !shutdown.is_cancelled() {
        let committed = match last {
            None => heads.latest(),
            Some(seen) => match heads.wait_past(seen, Duration::from_millis(250)) {
                Some(committed) => committed,
                None => continue,
            },
        };
        last = Some(committed.commits);
        if let Err(e) = publisher.publish(&head_message(&readers)) {
            tracing::warn!("could not publish the head: {e}");
        }
    }
    // The last commit (the one a stop makes) is published too, while the node still exists.
    if last != Some(heads.latest().commits)
        && let Err(e) = publisher.publish(&head_message(&readers))
    {
        tracing::warn!("could not publish the head: {e}");
    }
}

/// The node's ROS clock: the wall clock, or /clock's time with use_sim_time.
pub type RosClock = Arc<Mutex<r2r::Clock>>;

/// Now on the node's ROS clock, in ns (0 until a simulation's /clock has said anything).
fn now(clock: &RosClock) -> i64 {
    clock
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_now()
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// What the stats and the diagnostics are made of.
struct Health {
    readers: Readers,
    counters: intake::Counters,
    /// The ingest's sources, by number.
    sources: Vec<Source>,
    params: Params,
    dir: PathBuf,
    clock: RosClock,
}

/// `/sion_memory/stats` and `/diagnostics` (diagnostic_msgs/DiagnosticArray: the intake, the
/// disk, the log and the ledger's commits, each OK, WARN or ERROR with its figures), every
/// `stats_period_s`, stamped by the node's clock.
async fn publish_stats(
    health: Health,
    publisher: r2r::Publisher<msg::Stats>,
    diagnostics: r2r::Publisher<DiagnosticArray>,
    period: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(period);
    let mut before = (0u64, 0u64);
    while !shutdown.is_cancelled() {
        tick.tick().await;
        let Health { readers, counters, sources, .. } = &health;
        let streams: Vec<msg::StreamStats> = {
            let counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
            sources
                .iter()
                .enumerate()
                .map(|(id, s)| {
                    let c = counters.get(&id).cloned().unwrap_or_default();
                    msg::StreamStats {
                        stream: s.stream.name().to_owned(),
                        topic: s.topic.clone(),
                        messages: c.received,
                        dropped: c.dropped,
                        remembered: c.remembered,
                        atoms: c.atoms,
                        reject_reasons: c.rejected.keys().map(|r| (*r).to_owned()).collect(),
                        reject_counts: c.rejected.values().copied().collect(),
                        durable_p50_ms: c.latency.quantile_ms(0.5),
                        durable_p99_ms: c.latency.quantile_ms(0.99),
                    }
                })
                .collect()
        };
        let stamp = convert::time(now(&health.clock));
        let stats = msg::Stats {
            stamp: stamp.clone(),
            log_size: readers.log_size(),
            committed_size: readers.committed().head.size,
            streams,
        };
        let status = diagnose(&health, &stats, &mut before);
        if let Err(e) = publisher.publish(&stats) {
            tracing::warn!("could not publish stats: {e}");
        }
        let array =
            DiagnosticArray { header: r2r::std_msgs::msg::Header { stamp, frame_id: String::new() }, status };
        if let Err(e) = diagnostics.publish(&array) {
            tracing::warn!("could not publish diagnostics: {e}");
        }
    }
}

/// The node's health as diagnostic statuses. `before`: the dropped and refused counts at the
/// last report (what grew since is a warning).
fn diagnose(health: &Health, stats: &msg::Stats, before: &mut (u64, u64)) -> Vec<DiagnosticStatus> {
    const OK: u8 = 0;
    const WARN: u8 = 1;
    const ERROR: u8 = 2;
    let kv = |key: &str, value: String| KeyValue { key: key.to_owned(), value };
    let status = |name: &str, level: u8, message: String, values: Vec<KeyValue>| DiagnosticStatus {
        level,
        name: format!("sion_memory: {name}"),
        message,
        hardware_id: health.params.agent.clone(),
        values,
    };
    let received: u64 = stats.streams.iter().map(|s| s.messages).sum();
    let remembered: u64 = stats.streams.iter().map(|s| s.remembered).sum();
    let dropped: u64 = stats.streams.iter().map(|s| s.dropped).sum();
    let refused: u64 = stats.streams.iter().flat_map(|s| s.reject_counts.iter()).sum();
    let (new_dropped, new_refused) = (dropped - before.0.min(dropped), refused - before.1.min(refused));
    *before = (dropped, refused);
    let intake = if new_dropped > 0 {
        status(
            "intake",
            WARN,
            format!("{new_dropped} message(s) dropped since the last report: the intake's queue was full"),
            vec![],
        )
    } else if new_refused > 0 {
        status(
            "intake",
            WARN,
            format!("{new_refused} message(s) refused since the last report (the log says why)"),
            vec![],
        )
    } else {
        status("intake", OK, format!("{received} messages received, {remembered} remembered"), vec![])
    };
    let intake = DiagnosticStatus {
        values: vec![
            kv("received", received.to_string()),
            kv("remembered", remembered.to_string()),
            kv("dropped", dropped.to_string()),
            kv("refused", refused.to_string()),
        ],
        ..intake
    };
    let free = free_bytes(&health.dir);
    let gb = free as f64 / 1e9;
    let (level, message) = if free < 100_000_000 {
        (ERROR, format!("{gb:.2} GB free where the memory is: appends will fail"))
    } else if free < 1_000_000_000 {
        (WARN, format!("{gb:.2} GB free where the memory is"))
    } else {
        (OK, format!("{gb:.1} GB free where the memory is"))
    };
    let disk = status(
        "disk",
        level,
        message,
        vec![kv("free_bytes", free.to_string()), kv("path", health.dir.display().to_string())],
    );
    let waiting = stats.log_size.saturating_sub(stats.committed_size);
    let log = status(
        "log",
        OK,
        format!("{} atoms, {} committed", stats.log_size, stats.committed_size),
        vec![kv("atoms", stats.log_size.to_string()), kv("committed", stats.committed_size.to_string())],
    );
    // The ledger's time (wall clock) of the last commit, against the wall clock: commits are
    // due every commit_period_s while atoms wait.
    let (committed, pulse_ns) =
        health.readers.head_at(None).unwrap_or_else(|_| (health.readers.committed(), 0));
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    let age_s = if pulse_ns > 0 { (wall - pulse_ns) as f64 / 1e9 } else { f64::INFINITY };
    let due_s = (health.params.commit_period_s * 3.0).max(30.0);
    let ledger = if waiting > 0 && age_s > due_s {
        status(
            "ledger",
            WARN,
            format!(
                "{waiting} atoms wait for a commit, the last one {age_s:.0} s ago: is the ledger reachable?"
            ),
            vec![],
        )
    } else {
        status(
            "ledger",
            OK,
            format!("head of {} atoms committed at Pulse {}", committed.head.size, committed.committed_at),
            vec![],
        )
    };
    let ledger = DiagnosticStatus {
        values: vec![
            kv("pulse", committed.committed_at.to_string()),
            kv("last_commit_age_s", if age_s.is_finite() { format!("{age_s:.1}") } else { "never".into() }),
            kv("waiting", waiting.to_string()),
        ],
        ..ledger
    };
    vec![intake, disk, log, ledger]
}
