//! The fleet ledger, as the programs of this package use it: a memory whose memory.json names
//! a fleet ledger service is opened through [`connect`]; a `--ledger` argument or the node's
//! `ledger` parameter that is a URL opens a new log on one (docs/FLEET-LEDGER.md).

use std::path::Path;

use ed25519_dalek::VerifyingKey;
use sion_store::ledger::link::LedgerLink;
use sion_store::ledger::{LedgerError, LogId};
use sion_store::memory::{Memory, OpenError, Options};

pub use sion_fleet::client::RemoteLedger;
pub use sion_fleet::service::DEFAULT_LISTEN;

/// Whether a `--ledger` value or the `ledger` parameter names a service (`http://…`,
/// `https://…`) rather than a directory.
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// The [`sion_store::ledger::link::Connect`] of this package's programs: a link that connects
/// when first used, with the key the memory pinned, so that a memory opens (and records)
/// while its ledger is unreachable.
pub fn connect(url: &str, key: &VerifyingKey) -> Result<Box<dyn LedgerLink>, LedgerError> {
    Ok(Box::new(RemoteLedger::lazy(url, *key)?))
}

/// The door to the memory in `dir` as this package's programs open it: a fleet ledger its
/// memory.json names is reached through [`connect`].
pub fn options(dir: &Path) -> Options<'static> {
    Memory::options(dir).connect(&connect)
}

/// The same, for a new memory whose log is opened on `ledger`: a fleet ledger service's URL,
/// an embedded ledger's directory, or (None) a new embedded ledger inside it. A service is
/// asked for its key now, to pin it.
pub fn options_on(dir: &Path, ledger: Option<&str>) -> Result<Options<'static>, OpenError> {
    let options = options(dir);
    Ok(match ledger {
        Some(url) if is_url(url) => options.ledger_link(Box::new(RemoteLedger::connect(url)?), url),
        Some(other) => options.ledger_dir(other),
        None => options,
    })
}

/// Serve a front-end's checkpoints over HTTP on `addr` until `stop` (`sion ledger serve
/// --http ADDR`): `GET /checkpoint` answers the latest C2SP checkpoint note of the ledger's
/// history (docs/FLEET-LEDGER.md, "Checkpoints"), as C2SP tlog clients and witnesses fetch it;
/// any other request 404. Anyone may read it (it is signed; nothing is written). Connections
/// are bounded as the MCP server's are: 256 at once, each bringing its request head (at most
/// 8 KiB) within 10 s. `listener` is bound by the caller, so a port in use is its error to
/// report before anything is served.
pub async fn serve_checkpoints(
    listener: tokio::net::TcpListener,
    checkpoints: sion_fleet::service::Checkpoints,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::{StatusCode, header};

    let get = move || {
        let checkpoints = checkpoints.clone();
        async move {
            match checkpoints.latest().await {
                Ok(note) => {
                    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], note.encode())
                }
                Err(e) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    format!("no checkpoint now: {e}\n"),
                ),
            }
        }
    };
    serve_bounded(listener, axum::Router::new().route("/checkpoint", axum::routing::get(get)), stop).await
}

/// Serve a C2SP tlog-witness on `addr` until `stop` (`sion ledger witness --serve ADDR`):
/// `POST /add-checkpoint` takes a ledger's checkpoint with a consistency proof from the size
/// this witness last cosigned and answers its `cosignature/v1` line once the new size is
/// durable (docs/FLEET-LEDGER.md, "Checkpoints"), or the status C2SP gives the refusal: 400,
/// 403 (not signed by the witnessed ledger's key), 404 (another log), 409 (another old size:
/// the body is the size last cosigned, `text/x.tlog.size`), 422 (the proof fails), 413 (a body
/// over the bound). Requests are taken one at a time; anything else 404. Connections are
/// bounded as [`serve_checkpoints`]'s; `heard` is told what each request came to.
pub async fn serve_witness(
    listener: tokio::net::TcpListener,
    witness: sion_fleet::c2sp::C2spWitness,
    stop: impl Future<Output = ()> + Send + 'static,
    heard: impl FnMut(&str) + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::{StatusCode, header};

    let bound = sion_verify::ledger::MAX_NOTE_BYTES + 64 * (sion_verify::ledger::MAX_PROOF_LINES + 1);
    let ledger = witness.ledger();
    // Requests take their turn one at a time, on a blocking thread (the state's fsync); what
    // needs no state (parsing, the signature) is done before, so a costly body holds up none.
    let witness = std::sync::Arc::new(std::sync::Mutex::new((witness, heard)));
    let post = move |body: axum::body::Body| {
        let witness = witness.clone();
        async move {
            let text = "text/plain; charset=utf-8";
            let refused = |code: StatusCode, why: String| (code, [(header::CONTENT_TYPE, text)], why);
            // The body within the bound and within 10 s of its head: a client that sends it
            // slowly does not keep one of the connections for ever.
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(10), axum::body::to_bytes(body, bound));
            let body = match read.await {
                Ok(Ok(b)) => b,
                Ok(Err(_)) => {
                    return refused(StatusCode::PAYLOAD_TOO_LARGE, format!("a body over {bound} bytes\n"));
                }
                Err(_) => {
                    return refused(
                        StatusCode::REQUEST_TIMEOUT,
                        "the body did not arrive within 10 s\n".into(),
                    );
                }
            };
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let answer = match sion_fleet::c2sp::C2spWitness::check(&ledger, &body) {
                Ok(checked) => tokio::task::spawn_blocking(move || {
                    let mut held = witness.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (w, heard) = &mut *held;
                    let answer = w.commit(&checked, now);
                    match &answer {
                        Ok(_) => heard(&format!("cosigned size {}", w.last().0)),
                        Err(e) => heard(&format!("refused ({}): {e}", e.status())),
                    }
                    answer
                })
                .await
                .unwrap_or_else(|e| {
                    Err(sion_fleet::c2sp::AddError::BadRequest(format!("the witness's turn failed: {e}")))
                }),
                Err(e) => Err(e),
            };
            match answer {
                Ok(line) => (StatusCode::OK, [(header::CONTENT_TYPE, text)], line),
                Err(sion_fleet::c2sp::AddError::Conflict { size, .. }) => {
                    (StatusCode::CONFLICT, [(header::CONTENT_TYPE, "text/x.tlog.size")], format!("{size}\n"))
                }
                Err(e) => refused(
                    StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    format!("{e}\n"),
                ),
            }
        }
    };
    serve_bounded(listener, axum::Router::new().route("/add-checkpoint", axum::routing::post(post)), stop)
        .await
}

/// Serve `routes` (anything else 404) on `listener` until `stop`, with the MCP server's bounds
/// on connections: 256 at once, each bringing its request head (at most 8 KiB) within 10 s.
async fn serve_bounded(
    listener: tokio::net::TcpListener,
    routes: axum::Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use crate::mcp::listen::{Bounded, ConnInfo, tcp_door, watch};
    let router = routes
        .fallback(|| async { axum::http::StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn(watch))
        .into_make_service_with_connect_info::<ConnInfo>();
    let listener = Bounded::new(listener, 256, std::time::Duration::from_secs(10), 8 << 10, tcp_door);
    axum::serve(listener, router).with_graceful_shutdown(stop).await
}

/// Why a fleet recall bundle could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetRecallError {
    /// The ledger could not be asked, or refused.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Two memories of one log were given.
    #[error("two memories of log {0} were given")]
    Twice(LogId),
    /// The answers would pass the bytes the caller allows.
    #[error("the answers pass {0} bytes: ask a smaller box or a shorter interval")]
    TooLarge(usize),
    /// A recall by cells of a ledger that keeps none (made before cells, or a fleet ledger).
    #[error("the ledger keeps no map cells (made before them): recall every log instead")]
    NoCells,
}

/// What [`recall_bundle`] found wrong while making a bundle: each makes the bundle refused by
/// its reader, so a caller shows them (or keeps the bundle as evidence of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gap {
    /// A log in scope holding atoms at the Pulse whose memory was not given.
    NotGiven { log: u64, agent: Option<String>, size: u64 },
    /// A memory that could not answer as of the head the Pulse gives its log: its answer is
    /// as of its own latest head instead (stale), or absent.
    CannotAnswer { log: u64, size: u64, why: String },
    /// A memory of a log out of scope (another group, or opened after the Pulse): not asked.
    OutOfScope { log: u64 },
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gap::NotGiven { log, agent, size } => write!(
                f,
                "log {log}{} holds {size} atoms and no memory of it was given",
                agent.as_ref().map_or(String::new(), |a| format!(" ({a})"))
            ),
            Gap::CannotAnswer { log, size, why } => {
                write!(f, "log {log} cannot answer as of {size} atoms: {why}")
            }
            Gap::OutOfScope { log } => {
                write!(f, "the memory of log {log} is out of the question's scope: not asked")
            }
        }
    }
}

/// A fleet recall's bundle encoded, by whichever form was asked, with what a caller shows of it.
#[derive(Debug, Clone)]
pub struct Recalled {
    /// The bundle: SIONFLT2 (by cells) or SIONFLT1 (every log).
    pub bytes: Vec<u8>,
    pub pulse: u64,
    pub time_ns: i64,
    /// Logs whose state the bundle carries.
    pub logs: usize,
    /// Range answers it carries.
    pub answers: usize,
}

/// [`recall_by_cells`] when `by_cells`, else [`recall_bundle_within`]: the one choice the
/// CLI, MCP and the node make alike.
#[allow(clippy::too_many_arguments)]
pub fn recall(
    link: &dyn LedgerLink,
    pulse: Option<u64>,
    query: &sion_verify::index::geom::Query,
    group: Option<&str>,
    memories: &[Memory],
    most: usize,
    by_cells: bool,
    progress: impl FnMut(usize, usize),
) -> Result<(Recalled, Vec<Gap>), FleetRecallError> {
    // The two bundles differ in form only: what a caller shows of them is read alike.
    let (bytes, header, logs, answers, gaps) = if by_cells {
        let (b, gaps) = recall_by_cells(link, pulse, query, group, memories, most, progress)?;
        (b.encode(), b.header.header, b.logs.len(), b.answers.len(), gaps)
    } else {
        let (b, gaps) = recall_bundle_within(link, pulse, query, group, memories, most, progress)?;
        (b.encode(), b.header.header, b.logs.len(), b.answers.len(), gaps)
    };
    Ok((Recalled { bytes, pulse: header.number, time_ns: header.time_ns, logs, answers }, gaps))
}

/// Ask one range question of every robot's memory given, as of Pulse `pulse` (the latest if
/// `None`), for a fleet recall bundle (docs/PROOFS.md, "Fleet recall"): the Pulse's signed
/// header, every log's leaf at it (each from a state proof checked against the ledger's key),
/// and each given memory's range proof as of the head the Pulse gives its log. What could not
/// be answered is returned beside the bundle (the reader would refuse it: [`Gap`]).
pub fn recall_bundle(
    link: &dyn LedgerLink,
    pulse: Option<u64>,
    query: &sion_verify::index::geom::Query,
    group: Option<&str>,
    memories: &[Memory],
    progress: impl FnMut(usize, usize),
) -> Result<(sion_verify::proof::fleet::FleetBundle, Vec<Gap>), FleetRecallError> {
    let most = sion_verify::proof::fleet::MAX_BUNDLE_BYTES;
    recall_bundle_within(link, pulse, query, group, memories, most, progress)
}

/// [`recall_bundle`], its answers held to `most` bytes in all (refused past it, before more
/// are made).
pub fn recall_bundle_within(
    link: &dyn LedgerLink,
    pulse: Option<u64>,
    query: &sion_verify::index::geom::Query,
    group: Option<&str>,
    memories: &[Memory],
    most: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<(sion_verify::proof::fleet::FleetBundle, Vec<Gap>), FleetRecallError> {
    use sion_verify::proof::fleet::{FleetBundle, in_group};
    let header = match pulse {
        Some(p) => link.header(p)?,
        None => link.latest()?,
    };
    let n = header.header.logs;
    let mut logs = Vec::with_capacity(n.min(1 << 16) as usize);
    for i in 0..n {
        logs.push(stated(link, &header, i)?.log);
        progress(i as usize + 1, n as usize + memories.len());
    }
    let leaf_of = |id: LogId| logs.get(id.0 as usize).filter(|l| in_group(l, group));
    let (answers, mut gaps) = answer_memories(link, &leaf_of, query, memories, most, |k| {
        progress(n as usize + k, n as usize + memories.len())
    })?;
    not_given(logs.iter().filter(|l| in_group(l, group)), &answers, &mut gaps);
    let bundle = FleetBundle {
        ledger_key: link.public_key().to_bytes(),
        header,
        logs,
        answers: answers.into_iter().collect(),
    };
    Ok((bundle, gaps))
}

/// A fleet recall answered by the ledger's cells (SIONFLT2, docs/PROOFS.md, "Fleet recall by
/// cells"): the cells the question's box meets at Pulse `pulse` (the latest if `None`), proved
/// against its cells root, name the only logs that can hold an answer; only those are stated
/// and asked. Refused on a ledger without cells.
pub fn recall_by_cells(
    link: &dyn LedgerLink,
    pulse: Option<u64>,
    query: &sion_verify::index::geom::Query,
    group: Option<&str>,
    memories: &[Memory],
    most: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<(sion_verify::proof::fleet::CellBundle, Vec<Gap>), FleetRecallError> {
    use sion_verify::cells::CellQuery;
    use sion_verify::proof::fleet::{CellBundle, MAX_CELL_NODES, cell_nodes, in_group};
    let asked = CellQuery::new(&query.frame, &query.bounds);
    let (header, proof, lists) = link.cells_asked(&asked, pulse)?.ok_or(FleetRecallError::NoCells)?;
    if pulse.is_some_and(|p| p != header.header.number) {
        return Err(LedgerError::Remote {
            ledger: link.describe(),
            message: format!(
                "asked for the cells at Pulse {pulse:?}, it sent Pulse {}",
                header.header.number
            ),
        }
        .into());
    }
    if proof.nodes.len() > MAX_CELL_NODES as usize {
        return Err(FleetRecallError::TooLarge(MAX_CELL_NODES as usize));
    }
    let cells = cell_nodes(&proof, &lists);
    let listed: std::collections::BTreeSet<u64> =
        lists.values().flatten().copied().filter(|id| *id < header.header.logs).collect();
    let mut logs = Vec::with_capacity(listed.len());
    for (k, id) in listed.iter().enumerate() {
        let s = stated(link, &header, *id)?;
        logs.push((s.log, s.path));
        progress(k + 1, listed.len() + memories.len());
    }
    let leaf_of = |id: LogId| {
        logs.binary_search_by_key(&id.0, |(l, _)| l.id.0)
            .ok()
            .and_then(|i| logs.get(i))
            .map(|(l, _)| l)
            .filter(|l| in_group(l, group))
    };
    let (answers, mut gaps) = answer_memories(link, &leaf_of, query, memories, most, |k| {
        progress(listed.len() + k, listed.len() + memories.len())
    })?;
    not_given(logs.iter().map(|(l, _)| l).filter(|l| in_group(l, group)), &answers, &mut gaps);
    let bundle = CellBundle {
        ledger_key: link.public_key().to_bytes(),
        header,
        cells,
        logs,
        answers: answers.into_iter().collect(),
    };
    Ok((bundle, gaps))
}

/// Log `i`'s state proof at `header`'s Pulse, which must be of that very header.
fn stated(
    link: &dyn LedgerLink,
    header: &sion_store::ledger::SignedHeader,
    i: u64,
) -> Result<sion_store::ledger::StateProof, FleetRecallError> {
    let p = header.header.number;
    let s = link.state_proof(LogId(i), p)?;
    if s.header != *header || s.log.id.0 != i {
        return Err(LedgerError::Remote {
            ledger: link.describe(),
            message: format!(
                "asked for log {i} at Pulse {p}, it sent log {} at Pulse {}",
                s.log.id, s.header.header.number
            ),
        }
        .into());
    }
    Ok(s)
}

/// Each memory's range proof as of the head `leaf_of` gives its log (none: out of scope), held
/// to `most` bytes in all; what could not be answered, as gaps.
fn answer_memories<'a>(
    link: &dyn LedgerLink,
    leaf_of: &dyn Fn(LogId) -> Option<&'a sion_store::ledger::MemoryLog>,
    query: &sion_verify::index::geom::Query,
    memories: &[Memory],
    most: usize,
    mut progress: impl FnMut(usize),
) -> Result<(Answers, Vec<Gap>), FleetRecallError> {
    let mut held = 0usize;
    let mut answers = std::collections::BTreeMap::new();
    let mut gaps = Vec::new();
    for (k, m) in memories.iter().enumerate() {
        let id = m.log_id();
        let Some(leaf) = leaf_of(id) else {
            gaps.push(Gap::OutOfScope { log: id.0 });
            continue;
        };
        if answers.contains_key(&id) {
            return Err(FleetRecallError::Twice(id));
        }
        let size = leaf.head.size;
        if size > 0 {
            match m.prove_range(query, Some(size)) {
                // Its head must be the one the Pulse gives its log, under this ledger's key: a
                // memory of another ledger, or re-indexed, would make a bundle its reader refuses.
                Ok(file)
                    if file
                        .attestation
                        .as_ref()
                        .is_some_and(|a| a.ledger_key == link.public_key().to_bytes())
                        && file.verify(None).is_ok_and(|v| v.head == leaf.head) =>
                {
                    let bytes = file.encode();
                    held = held.saturating_add(bytes.len());
                    if held > most {
                        return Err(FleetRecallError::TooLarge(most));
                    }
                    answers.insert(id, bytes);
                }
                Ok(_) => gaps.push(Gap::CannotAnswer {
                    log: id.0,
                    size,
                    why: "its answer is not of the head (or the ledger) the Pulse gives its log".into(),
                }),
                Err(e) => {
                    gaps.push(Gap::CannotAnswer { log: id.0, size, why: e.to_string() });
                    if let Ok(file) = m.prove_range(query, None) {
                        answers.insert(id, file.encode());
                    }
                }
            }
        }
        progress(k + 1);
    }
    Ok((answers, gaps))
}

/// Range proofs by log.
type Answers = std::collections::BTreeMap<LogId, Vec<u8>>;

/// Gaps for the logs in scope holding atoms that no memory answered.
fn not_given<'a>(
    in_scope: impl Iterator<Item = &'a sion_store::ledger::MemoryLog>,
    answers: &Answers,
    gaps: &mut Vec<Gap>,
) {
    for l in in_scope.filter(|l| l.head.size > 0 && !answers.contains_key(&l.id)) {
        if !gaps.iter().any(|g| matches!(g, Gap::CannotAnswer { log, .. } if *log == l.id.0)) {
            gaps.push(Gap::NotGiven { log: l.id.0, agent: l.agent.clone(), size: l.head.size });
        }
    }
}
