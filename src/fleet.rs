//! The fleet ledger, as the programs of this package use it: a memory whose memory.json names
//! a fleet ledger service is opened through [`connect`]; a `--ledger` argument or the node's
//! `ledger` parameter that is a URL opens a new log on one (docs/FLEET-LEDGER.md).

use std::path::Path;

use ed25519_dalek::VerifyingKey;
use sion_store::ledger::LedgerError;
use sion_store::ledger::link::LedgerLink;
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
    use crate::mcp::listen::{Bounded, ConnInfo, tcp_door, watch};
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
    let router = axum::Router::new()
        .route("/checkpoint", axum::routing::get(get))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn(watch))
        .into_make_service_with_connect_info::<ConnInfo>();
    let listener = Bounded::new(listener, 256, std::time::Duration::from_secs(10), 8 << 10, tcp_door);
    axum::serve(listener, router).with_graceful_shutdown(stop).await
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
    use crate::mcp::listen::{Bounded, ConnInfo, tcp_door, watch};
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
    let router = axum::Router::new()
        .route("/add-checkpoint", axum::routing::post(post))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn(watch))
        .into_make_service_with_connect_info::<ConnInfo>();
    let listener = Bounded::new(listener, 256, std::time::Duration::from_secs(10), 8 << 10, tcp_door);
    axum::serve(listener, router).with_graceful_shutdown(stop).await
}
