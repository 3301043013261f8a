//! The node's services. Every answer carries `ok` and, when not ok, an `error` that says why;
//! no request can stop the node.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::{Stream as FutStream, StreamExt as _};
use r2r::QosProfile;
use r2r::sion_memory_msgs::{msg, srv};
use tokio::sync::mpsc;

use super::convert;
use crate::atom::{Atom, BoxMm};
use crate::brain::{CommitNow, Readers, Sensors};
use crate::index::geom::Query;
use crate::proof::{ListKey, Proof, ProofFile};

/// How long `commit` waits for the brain to commit what was in the log when it was called.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Services {
    pub readers: Readers,
    pub sensors: Sensors,
    /// Tells the brain the log grew (its stimulus).
    pub told: mpsc::UnboundedSender<u64>,
    pub commit_now: CommitNow,
}

/// Serve each request of a stream on its own task, answering with `answer`.
fn serve<S, Req, F, Fut>(requests: S, answer: F)
where
    S: FutStream<Item = r2r::ServiceRequest<Req>> + Unpin + Send + 'static,
    Req: r2r::WrappedServiceTypeSupport + 'static,
    F: Fn(Req::Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Req::Response> + Send + 'static,
    Req::Request: Send,
    Req::Response: Send,
    r2r::ServiceRequest<Req>: Send,
{
    let answer = std::sync::Arc::new(answer);
    let mut requests = requests;
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let response = answer(request.message.clone()).await;
                if let Err(e) = request.respond(response) {
                    tracing::warn!("could not send a service response: {e}");
                }
            });
        }
    });
}

/// Run blocking work on the blocking pool; a panic in it becomes an error, not a dead node.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(format!("internal error: {e}")))
}

fn head_of(readers: &Readers, size: u64) -> Result<msg::Head, String> {
    let (log, time) = readers.head_at(Some(size)).map_err(|e| e.to_string())?;
    Ok(convert::head(&log, time, readers.ledger_key().to_bytes()))
}

/// The head and atoms of a range or list proof, as messages, and the proof's bytes.
fn answer_of(readers: &Readers, file: &ProofFile) -> Result<(msg::Head, Vec<msg::Atom>, Vec<u8>), String> {
    let (head, atoms) = match &file.proof {
        Proof::Range { head, range, .. } => (head, &range.atoms),
        Proof::List { head, list, .. } => (head, &list.atoms),
        _ => return Err("not an answer".into()),
    };
    let atoms = atoms
        .iter()
        .map(|(position, bytes)| {
            Atom::decode(bytes).map(|a| convert::atom(*position, &a)).map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    Ok((head_of(readers, head.size)?, atoms, file.encode()))
}

impl Services {
    pub fn serve(&self, node: &mut r2r::Node) -> Result<()> {
        let qos = QosProfile::services_default;

        let readers = self.readers.clone();
        let requests = node
            .create_service::<srv::QueryRange::Service>("~/query_range", qos())
            .context("creating ~/query_range")?;
        serve(requests, move |req: srv::QueryRange::Request| {
            let readers = readers.clone();
            async move {
                let result = blocking(move || {
                    let bounds = BoxMm {
                        min_mm: convert::corner(&req.min_mm, "min_mm")?,
                        max_mm: convert::corner(&req.max_mm, "max_mm")?,
                    };
                    let from = convert::time_ns(&req.from_time)?;
                    let to = convert::time_ns(&req.to_time)?;
                    let query = Query::new(&req.frame_id, bounds, from, to).map_err(|e| e.to_string())?;
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file = readers.prove_range(&query, as_of).map_err(|e| e.to_string())?;
                    answer_of(&readers, &file)
                })
                .await;
                match result {
                    Ok((head, atoms, proof)) => {
                        srv::QueryRange::Response { ok: true, error: String::new(), head, atoms, proof }
                    }
                    Err(error) => srv::QueryRange::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let readers = self.readers.clone();
        let requests = node
            .create_service::<srv::QuerySubject::Service>("~/query_subject", qos())
            .context("creating ~/query_subject")?;
        serve(requests, move |req: srv::QuerySubject::Request| {
            let readers = readers.clone();
            async move {
                let result = blocking(move || {
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file = readers
                        .prove_list(ListKey::Subject(req.subject), as_of)
                        .map_err(|e| e.to_string())?;
                    answer_of(&readers, &file)
                })
                .await;
                match result {
                    Ok((head, atoms, proof)) => {
                        srv::QuerySubject::Response { ok: true, error: String::new(), head, atoms, proof }
                    }
                    Err(error) => srv::QuerySubject::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let readers = self.readers.clone();
        let requests =
            node.create_service::<srv::Verify::Service>("~/verify", qos()).context("creating ~/verify")?;
        serve(requests, move |req: srv::Verify::Request| {
            let readers = readers.clone();
            async move {
                let result = blocking(move || {
                    let key = readers.ledger_key();
                    let file = ProofFile::decode(&req.proof).map_err(|e| e.to_string())?;
                    file.verify(Some(&key)).map_err(|e| e.to_string())
                })
                .await;
                match result {
                    Ok(v) => {
                        let (pulse, pulse_time_ns, ledger_key) = v.pulse.unwrap_or_default();
                        srv::Verify::Response {
                            ok: true,
                            error: String::new(),
                            kind: v.claim.kind().to_owned(),
                            statement: v.statement(),
                            head: msg::Head {
                                log_id: v.log.0,
                                size: v.head.size,
                                root: v.head.root.to_vec(),
                                index: v.head.index.to_vec(),
                                manifest: v.head.manifest.to_vec(),
                                commits: 0,
                                pulse,
                                pulse_time_ns,
                                ledger_key: ledger_key.to_vec(),
                            },
                        }
                    }
                    Err(error) => srv::Verify::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let (sensors, told) = (self.sensors.clone(), self.told.clone());
        let requests = node
            .create_service::<srv::Remember::Service>("~/remember", qos())
            .context("creating ~/remember")?;
        serve(requests, move |req: srv::Remember::Request| {
            let (sensors, told) = (sensors.clone(), told.clone());
            async move {
                let result = blocking(move || {
                    let atoms = req
                        .atoms_json
                        .iter()
                        .enumerate()
                        .map(|(i, line)| Atom::from_json(line).map_err(|e| format!("atom {i}: {e}")))
                        .collect::<Result<Vec<_>, _>>()?;
                    let ids = atoms.iter().map(|a| a.id().to_string()).collect();
                    let appended = sensors.take_in(atoms).map_err(|e| e.to_string())?;
                    Ok((appended.iter().map(|a| a.position).collect::<Vec<_>>(), ids))
                })
                .await;
                match result {
                    Ok((positions, ids)) => {
                        if let Some(&last) = positions.iter().max() {
                            let _ = told.send(last);
                        }
                        srv::Remember::Response { ok: true, error: String::new(), positions, ids }
                    }
                    Err(error) => srv::Remember::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let (sensors, told) = (self.sensors.clone(), self.told.clone());
        let requests =
            node.create_service::<srv::Forget::Service>("~/forget", qos()).context("creating ~/forget")?;
        serve(requests, move |req: srv::Forget::Request| {
            let (sensors, told) = (sensors.clone(), told.clone());
            async move {
                let result = blocking(move || {
                    if req.positions.is_empty() {
                        return Err("positions: name at least one atom".into());
                    }
                    let who = if req.who.is_empty() { "a ROS client".to_owned() } else { req.who };
                    sensors.forget(&req.positions, &who, &req.why).map_err(|e| e.to_string())
                })
                .await;
                match result {
                    Ok(forget_positions) => {
                        if let Some(&last) = forget_positions.iter().max() {
                            let _ = told.send(last);
                        }
                        srv::Forget::Response { ok: true, error: String::new(), forget_positions }
                    }
                    Err(error) => srv::Forget::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let sensors = self.sensors.clone();
        let requests =
            node.create_service::<srv::Payload::Service>("~/payload", qos()).context("creating ~/payload")?;
        serve(requests, move |req: srv::Payload::Request| {
            let sensors = sensors.clone();
            async move {
                let result = blocking(move || {
                    let member: [u8; 32] = req.member.as_slice().try_into().map_err(|_| {
                        format!("member: {} bytes, not the 32 of a member's key hash", req.member.len())
                    })?;
                    sensors.payload_for(req.position, &member).map_err(|e| e.to_string())
                })
                .await;
                match result {
                    Ok((atom, sealed, wrapped)) => srv::Payload::Response {
                        ok: true,
                        error: String::new(),
                        atom: atom.bytes().to_vec(),
                        sealed,
                        wrapped_key: wrapped.encode().to_vec(),
                    },
                    Err(error) => srv::Payload::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let (readers, commit_now, told) = (self.readers.clone(), self.commit_now.clone(), self.told.clone());
        let requests =
            node.create_service::<srv::Commit::Service>("~/commit", qos()).context("creating ~/commit")?;
        serve(requests, move |_req: srv::Commit::Request| {
            let (readers, commit_now, told) = (readers.clone(), commit_now.clone(), told.clone());
            async move {
                match commit(&readers, &commit_now, &told).await {
                    Ok(head) => srv::Commit::Response { ok: true, error: String::new(), head },
                    Err(error) => srv::Commit::Response { ok: false, error, ..Default::default() },
                }
            }
        });
        Ok(())
    }
}

/// Ask the brain to commit everything the log held at the call, and wait until it has.
async fn commit(
    readers: &Readers,
    commit_now: &CommitNow,
    told: &mpsc::UnboundedSender<u64>,
) -> Result<msg::Head, String> {
    let target = readers.log_size();
    let started = Instant::now();
    loop {
        let committed = readers.committed().head.size;
        if committed >= target {
            return head_of(readers, committed);
        }
        if !commit_now.pending() {
            commit_now.request();
            let _ = told.send(target.saturating_sub(1));
        }
        if started.elapsed() > COMMIT_TIMEOUT {
            return Err(format!(
                "the brain has not committed within {} s (committed {committed} of {target} atoms; \
                 the atoms are recorded, and the node's log says why its commits fail — a ledger \
                 that cannot be reached?)",
                COMMIT_TIMEOUT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
