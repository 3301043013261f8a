//! The node's services. Every answer carries `ok` and, when not ok, an `error` that says why;
//! no request can stop the node.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use futures::{Stream as FutStream, StreamExt as _};
use r2r::QosProfile;
use r2r::sion_memory_msgs::{msg, srv};

use super::convert;
use crate::atom::{Atom, BoxMm};
use crate::brain::{Intake, Readers};
use crate::index::geom::Query;
use crate::proof::{ListKey, Proof, ProofFile};
use crate::protocol::Protocol;

#[derive(Clone)]
pub struct Services {
    pub readers: Readers,
    pub intake: Intake,
    /// The verbs (src/protocol.rs) through the node's kernel: the same API the MCP tools and the
    /// command line use.
    pub protocol: Arc<Protocol>,
    /// Where each answered range or subject question is drawn (`~/answer`, src/ros/markers.rs).
    pub markers: super::markers::Drawer,
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
    let answer = Arc::new(answer);
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

/// A question as ~/recall, ~/last_seen and ~/count take it: a box in metres, ROS Times, the
/// frame as tf2 writes it, kinds by name (none: every kind) and a subject (empty: every one).
fn box_question(
    frame_id: &str,
    (lo, hi): (&r2r::geometry_msgs::msg::Point, &r2r::geometry_msgs::msg::Point),
    (from, to): (&r2r::builtin_interfaces::msg::Time, &r2r::builtin_interfaces::msg::Time),
    (kinds, subject): (&[String], &str),
) -> Result<Query, String> {
    let bounds = crate::units::box_from_metres([lo.x, lo.y, lo.z, hi.x, hi.y, hi.z])
        .map_err(|e| format!("min, max: {e}"))?;
    let from = convert::time_ns(from).map_err(|e| format!("from_time: {e}"))?;
    let to = convert::time_ns(to).map_err(|e| format!("to_time: {e}"))?;
    let frame = crate::units::frame_name(frame_id);
    let mut query = Query::new(frame, bounds, from, to).map_err(|e| e.to_string())?;
    if !kinds.is_empty() {
        let mask =
            crate::units::parse_kinds(kinds.iter().map(String::as_str)).map_err(|e| format!("kinds: {e}"))?;
        query = query.with_kinds(mask).map_err(|e| format!("kinds: {e}"))?;
    }
    if subject.is_empty() {
        return Ok(query);
    }
    query.with_subject(subject).map_err(|e| e.to_string())
}

impl Services {
    pub fn serve(&self, node: &mut r2r::Node) -> Result<()> {
        let qos = QosProfile::services_default;

        let (readers, markers) = (self.readers.clone(), self.markers.clone());
        let requests = node
            .create_service::<srv::QueryRange::Service>("~/query_range", qos())
            .context("creating ~/query_range")?;
        serve(requests, move |req: srv::QueryRange::Request| {
            let (readers, markers) = (readers.clone(), markers.clone());
            async move {
                let result = blocking(move || {
                    let bounds = BoxMm {
                        min_mm: convert::corner(&req.min_mm, "min_mm")?,
                        max_mm: convert::corner(&req.max_mm, "max_mm")?,
                    };
                    let from = convert::time_ns(&req.from_time)?;
                    let to = convert::time_ns(&req.to_time)?;
                    let frame = crate::units::frame_name(&req.frame_id);
                    let query = Query::new(frame, bounds, from, to).map_err(|e| e.to_string())?;
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file =
                        readers.snapshot(as_of).and_then(|s| s.range(&query)).map_err(|e| e.to_string())?;
                    markers.draw(&file, "~/query_range");
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

        // The same question in ROS units (metres, ROS Time), with warnings beside the answer.
        let (readers, markers) = (self.readers.clone(), self.markers.clone());
        let requests =
            node.create_service::<srv::Recall::Service>("~/recall", qos()).context("creating ~/recall")?;
        serve(requests, move |req: srv::Recall::Request| {
            let (readers, markers) = (readers.clone(), markers.clone());
            async move {
                let result = blocking(move || {
                    let query = box_question(
                        &req.frame_id,
                        (&req.min, &req.max),
                        (&req.from_time, &req.to_time),
                        (&req.kinds, &req.subject),
                    )?;
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let snapshot = readers.snapshot(as_of).map_err(|e| e.to_string())?;
                    let file = snapshot.range(&query).map_err(|e| e.to_string())?;
                    markers.draw(&file, "~/recall");
                    let warnings: Vec<String> = snapshot
                        .mismatches(&query)
                        .unwrap_or_default()
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                    answer_of(&readers, &file).map(|answer| (answer, warnings))
                })
                .await;
                match result {
                    Ok(((head, atoms, proof), warnings)) => {
                        srv::Recall::Response { ok: true, error: String::new(), head, atoms, proof, warnings }
                    }
                    Err(error) => srv::Recall::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        // The atom seen last in a box and interval (kind 7).
        let readers = self.readers.clone();
        let requests = node
            .create_service::<srv::LastSeen::Service>("~/last_seen", qos())
            .context("creating ~/last_seen")?;
        serve(requests, move |req: srv::LastSeen::Request| {
            let readers = readers.clone();
            async move {
                let result = blocking(move || {
                    let query = box_question(
                        &req.frame_id,
                        (&req.min, &req.max),
                        (&req.from_time, &req.to_time),
                        (&req.kinds, &req.subject),
                    )?;
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file =
                        readers.snapshot(as_of).and_then(|s| s.latest(&query)).map_err(|e| e.to_string())?;
                    let Proof::Latest { head, latest, .. } = &file.proof else {
                        return Err("not a latest proof".into());
                    };
                    let atom = match &latest.atom {
                        Some((p, bytes)) => {
                            Some(convert::atom(*p, &Atom::decode(bytes).map_err(|e| e.to_string())?))
                        }
                        None => None,
                    };
                    Ok((head_of(&readers, head.size)?, atom, file.encode()))
                })
                .await;
                match result {
                    Ok((head, atom, proof)) => srv::LastSeen::Response {
                        ok: true,
                        error: String::new(),
                        head,
                        found: atom.is_some(),
                        atom: atom.unwrap_or_default(),
                        proof,
                    },
                    Err(error) => srv::LastSeen::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        // How many, for how long, first and last (kind 9).
        let readers = self.readers.clone();
        let requests =
            node.create_service::<srv::Count::Service>("~/count", qos()).context("creating ~/count")?;
        serve(requests, move |req: srv::Count::Request| {
            let readers = readers.clone();
            async move {
                let result = blocking(move || {
                    let query = box_question(
                        &req.frame_id,
                        (&req.min, &req.max),
                        (&req.from_time, &req.to_time),
                        (&req.kinds, &req.subject),
                    )?;
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file =
                        readers.snapshot(as_of).and_then(|s| s.count(&query)).map_err(|e| e.to_string())?;
                    let Proof::Count { head, count, .. } = &file.proof else {
                        return Err("not a count proof".into());
                    };
                    Ok((head_of(&readers, head.size)?, count.counted, file.encode()))
                })
                .await;
                match result {
                    Ok((head, counted, proof)) => {
                        let (first, last) = counted.span.unwrap_or((0, 0));
                        srv::Count::Response {
                            ok: true,
                            error: String::new(),
                            head,
                            count: counted.count,
                            seconds: counted.duration_ns as f64 / 1e9,
                            first_time: convert::time(first),
                            last_time: convert::time(last),
                            proof,
                        }
                    }
                    Err(error) => srv::Count::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        // The k nearest to a point then (kind 8).
        let readers = self.readers.clone();
        let requests =
            node.create_service::<srv::Nearest::Service>("~/nearest", qos()).context("creating ~/nearest")?;
        serve(requests, move |req: srv::Nearest::Request| {
            let readers = readers.clone();
            async move {
                let result = blocking(move || {
                    let p = &req.point;
                    let point = crate::units::box_from_metres([p.x, p.y, p.z, p.x, p.y, p.z])
                        .map_err(|e| format!("point: {e}"))?
                        .min_mm;
                    let from = convert::time_ns(&req.from_time).map_err(|e| format!("from_time: {e}"))?;
                    let to = convert::time_ns(&req.to_time).map_err(|e| format!("to_time: {e}"))?;
                    let frame = crate::units::frame_name(&req.frame_id);
                    let query = crate::proof::NearQuery::new(frame, point, from, to, req.k.max(1))
                        .map_err(|e| format!("the question: {e}"))?;
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file =
                        readers.snapshot(as_of).and_then(|s| s.nearest(&query)).map_err(|e| e.to_string())?;
                    let Proof::Nearest { head, nearest, .. } = &file.proof else {
                        return Err("not a nearest proof".into());
                    };
                    let mut atoms = Vec::with_capacity(nearest.atoms.len());
                    let mut distances = Vec::with_capacity(nearest.atoms.len());
                    for (position, bytes) in &nearest.atoms {
                        let atom = Atom::decode(bytes).map_err(|e| e.to_string())?;
                        let d2 = query.distance2(&crate::index::geom::SpaceTime::of_atom(atom.parts()));
                        distances.push((d2 as f64).sqrt() / 1e3);
                        atoms.push(convert::atom(*position, &atom));
                    }
                    Ok((head_of(&readers, head.size)?, atoms, distances, file.encode()))
                })
                .await;
                match result {
                    Ok((head, atoms, distances_m, proof)) => srv::Nearest::Response {
                        ok: true,
                        error: String::new(),
                        head,
                        atoms,
                        distances_m,
                        proof,
                    },
                    Err(error) => srv::Nearest::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let (readers, markers) = (self.readers.clone(), self.markers.clone());
        let requests = node
            .create_service::<srv::QuerySubject::Service>("~/query_subject", qos())
            .context("creating ~/query_subject")?;
        serve(requests, move |req: srv::QuerySubject::Request| {
            let (readers, markers) = (readers.clone(), markers.clone());
            async move {
                let result = blocking(move || {
                    let as_of = (req.as_of_size != 0).then_some(req.as_of_size);
                    let file = readers
                        .snapshot(as_of)
                        .and_then(|s| s.list(ListKey::Subject(req.subject)))
                        .map_err(|e| e.to_string())?;
                    markers.draw(&file, "~/query_subject");
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

        let protocol = self.protocol.clone();
        let requests = node
            .create_service::<srv::Remember::Service>("~/remember", qos())
            .context("creating ~/remember")?;
        serve(requests, move |req: srv::Remember::Request| {
            let protocol = protocol.clone();
            async move {
                let result = blocking(move || {
                    let atoms = req
                        .atoms_json
                        .iter()
                        .enumerate()
                        .map(|(i, line)| Atom::from_json(line).map_err(|e| format!("atom {i}: {e}")))
                        .collect::<Result<Vec<_>, _>>()?;
                    let ids = atoms.iter().map(|a| a.id().to_string()).collect();
                    let remembered = protocol.remember_atoms(atoms).map_err(|e| e.to_string())?;
                    Ok((remembered.positions, ids))
                })
                .await;
                match result {
                    Ok((positions, ids)) => {
                        srv::Remember::Response { ok: true, error: String::new(), positions, ids }
                    }
                    Err(error) => srv::Remember::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let protocol = self.protocol.clone();
        let requests =
            node.create_service::<srv::Forget::Service>("~/forget", qos()).context("creating ~/forget")?;
        serve(requests, move |req: srv::Forget::Request| {
            let protocol = protocol.clone();
            async move {
                let result = blocking(move || {
                    let who = if req.who.is_empty() { "a ROS client".to_owned() } else { req.who };
                    protocol.forget(&req.positions, &who, &req.why).map_err(|e| e.to_string())
                })
                .await;
                match result {
                    // Recorded either way; `error` says when the commit that followed failed.
                    Ok(changed) => srv::Forget::Response {
                        ok: true,
                        error: changed
                            .commit_error
                            .map(|e| format!("recorded, not yet committed: {e}"))
                            .unwrap_or_default(),
                        forget_positions: changed.result,
                    },
                    Err(error) => srv::Forget::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let intake = self.intake.clone();
        let requests =
            node.create_service::<srv::Payload::Service>("~/payload", qos()).context("creating ~/payload")?;
        serve(requests, move |req: srv::Payload::Request| {
            let intake = intake.clone();
            async move {
                let result = blocking(move || {
                    let member: [u8; 32] = req.member.as_slice().try_into().map_err(|_| {
                        format!("member: {} bytes, not the 32 of a member's key hash", req.member.len())
                    })?;
                    intake.payload_for(req.position, &member).map_err(|e| e.to_string())
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

        let (readers, protocol) = (self.readers.clone(), self.protocol.clone());
        let requests =
            node.create_service::<srv::Commit::Service>("~/commit", qos()).context("creating ~/commit")?;
        serve(requests, move |_req: srv::Commit::Request| {
            let (readers, protocol) = (readers.clone(), protocol.clone());
            async move {
                let result = blocking(move || {
                    let committed = protocol.commit().map_err(|e| e.to_string())?;
                    head_of(&readers, committed.size)
                })
                .await;
                match result {
                    Ok(head) => srv::Commit::Response { ok: true, error: String::new(), head },
                    Err(error) => srv::Commit::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let (readers, protocol) = (self.readers.clone(), self.protocol.clone());
        let requests =
            node.create_service::<srv::Revise::Service>("~/revise", qos()).context("creating ~/revise")?;
        serve(requests, move |req: srv::Revise::Request| {
            let (readers, protocol) = (readers.clone(), protocol.clone());
            async move {
                let result = blocking(move || {
                    let revised =
                        protocol.revise(req.position, &req.state, &req.why).map_err(|e| e.to_string())?;
                    // The head that holds it: the one the commit reached (it may hold more).
                    let head = head_of(&readers, readers.committed().head.size)?;
                    Ok((revised, head))
                })
                .await;
                match result {
                    Ok((r, head)) => srv::Revise::Response {
                        ok: true,
                        error: String::new(),
                        revision_id: r.revision,
                        revision_position: r.position,
                        target_id: r.target,
                        head,
                    },
                    Err(error) => srv::Revise::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        // One question of the whole fleet's memories (this one and believe_from's), proved
        // complete across robots.
        let protocol = self.protocol.clone();
        let requests = node
            .create_service::<srv::FleetRecall::Service>("~/fleet_recall", qos())
            .context("creating ~/fleet_recall")?;
        serve(requests, move |req: srv::FleetRecall::Request| {
            let protocol = protocol.clone();
            async move {
                let result = blocking(move || {
                    let query = box_question(
                        &req.frame_id,
                        (&req.min, &req.max),
                        (&req.from_time, &req.to_time),
                        (&req.kinds, &req.subject),
                    )?;
                    let group = (!req.group.is_empty()).then_some(req.group.as_str());
                    let pulse = (req.pulse != 0).then_some(req.pulse);
                    protocol.fleet_recall(&query, group, pulse, req.by_cells).map_err(|e| e.to_string())
                })
                .await;
                match result {
                    Ok(f) => srv::FleetRecall::Response {
                        ok: true,
                        error: String::new(),
                        pulse: f.pulse,
                        pulse_time: convert::time(f.time_ns),
                        logs_in_scope: f.logs_in_scope as u64,
                        atoms: f.atoms as u64,
                        logs: f.answered.iter().map(|a| a.log).collect(),
                        agents: f.answered.iter().map(|a| a.agent.clone().unwrap_or_default()).collect(),
                        counts: f.answered.iter().map(|a| a.atoms as u64).collect(),
                        statement: f.statement,
                        bundle: f.bundle,
                    },
                    Err(error) => srv::FleetRecall::Response { ok: false, error, ..Default::default() },
                }
            }
        });

        let protocol = self.protocol.clone();
        let requests =
            node.create_service::<srv::Believe::Service>("~/believe", qos()).context("creating ~/believe")?;
        serve(requests, move |req: srv::Believe::Request| {
            let protocol = protocol.clone();
            async move {
                let result = blocking(move || {
                    let policy: serde_json::Value = serde_json::from_str(&req.policy_json)
                        .map_err(|e| format!("policy_json: not JSON: {e}"))?;
                    protocol.believe(&policy, &req.target_ids, &req.positions).map_err(|e| e.to_string())
                })
                .await;
                match result {
                    Ok(b) => srv::Believe::Response {
                        ok: true,
                        error: String::new(),
                        pulse: b.pulse,
                        targets: b.beliefs.iter().map(|x| x.target.to_string()).collect(),
                        states: b.beliefs.iter().map(|x| x.state.to_string()).collect(),
                        beliefs_json: b
                            .beliefs
                            .iter()
                            .map(|x| serde_json::to_string(x).unwrap_or_default())
                            .collect(),
                        bundle: b.bundle,
                    },
                    Err(error) => srv::Believe::Response { ok: false, error, ..Default::default() },
                }
            }
        });
        Ok(())
    }
}
