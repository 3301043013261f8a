//! The native half of the `sion_verify` Python package: the Rust verifier (`sion_verify`)
//! behind functions that take and give JSON, so the Python side stays a thin, typed
//! wrapper (`sion_verify/__init__.py`) and no proof logic is written twice.

use ed25519_dalek::VerifyingKey;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sion_verify::proof::Expect;
use sion_verify::units;

/// Verify `proof` (the bytes of a proof file) against `ledger_key` (32 bytes) and the
/// expectation (JSON, `Expect::from_json`): `{"ok": <the verified answer>}` or
/// `{"error": {"code", "message"}}` when the proof is refused. A malformed argument raises
/// ValueError.
#[pyfunction]
fn verify_json(py: Python<'_>, proof: Vec<u8>, ledger_key: Vec<u8>, expect: &str) -> PyResult<String> {
    let expect: serde_json::Value =
        serde_json::from_str(expect).map_err(|e| PyValueError::new_err(format!("expectation: {e}")))?;
    let expect = Expect::from_json(&expect).map_err(PyValueError::new_err)?;
    let key = key_of(&ledger_key)?;
    // The check runs without the GIL: an rclpy executor's other callbacks go on meanwhile.
    let verified = py.detach(|| sion_verify::proof::verify(&proof, &key, &expect));
    let out = match verified {
        Ok(v) => serde_json::json!({ "ok": v.to_json() }),
        Err(e) => serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } }),
    };
    Ok(out.to_string())
}

/// An evidence directory (docs/EVIDENCE.md): verify `proof` as [`verify_json`] does, then each
/// `(name, bytes)` of its `blobs/` against the atom it is named for: `{"ok": <the verified
/// answer>, "blobs": <how many were checked>}` or `{"error": {"code", "message"}}`.
#[pyfunction]
fn check_evidence_json(
    py: Python<'_>,
    proof: Vec<u8>,
    ledger_key: Vec<u8>,
    expect: &str,
    blobs: Vec<(String, Vec<u8>)>,
) -> PyResult<String> {
    let expect: serde_json::Value =
        serde_json::from_str(expect).map_err(|e| PyValueError::new_err(format!("expectation: {e}")))?;
    let expect = Expect::from_json(&expect).map_err(PyValueError::new_err)?;
    let key = key_of(&ledger_key)?;
    let out = py.detach(|| match sion_verify::proof::verify(&proof, &key, &expect) {
        Err(e) => serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } }),
        Ok(v) => {
            match sion_verify::evidence::check_blobs(
                &v,
                blobs.iter().map(|(n, b)| (n.as_str(), b.as_slice())),
            ) {
                Ok(n) => serde_json::json!({ "ok": v.to_json(), "blobs": n }),
                Err(e) => serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } }),
            }
        }
    });
    Ok(out.to_string())
}

/// Check a belief bundle (docs/BELIEF.md, "Bundles") against `ledger_key`, the atoms asked
/// about (ids, 64 hex digits) and the reader's policy (JSON), and recompute the fold:
/// `{"ok": {"pulse", "beliefs"}}` or `{"error": {"code", "message"}}` when the bundle is refused. A
/// malformed argument raises ValueError.
#[pyfunction]
#[pyo3(signature = (bundle, ledger_key, targets, policy, as_of=None, trust_log_set=false))]
fn check_bundle_json(
    py: Python<'_>,
    bundle: Vec<u8>,
    ledger_key: Vec<u8>,
    targets: Vec<String>,
    policy: &str,
    as_of: Option<u64>,
    trust_log_set: bool,
) -> PyResult<String> {
    use sion_verify::belief::bundle::{Ask, LogSet, check_with};
    let key = key_of(&ledger_key)?;
    let policy: sion_verify::belief::Policy =
        serde_json::from_str(policy).map_err(|e| PyValueError::new_err(format!("policy: {e}")))?;
    let targets = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.parse().map_err(|_| PyValueError::new_err(format!("targets[{i}]: an atom id is 64 hex digits")))
        })
        .collect::<PyResult<Vec<sion_verify::atom::AtomId>>>()?;
    let log_set = if trust_log_set { LogSet::Trusted } else { LogSet::Proved };
    let checked = py.detach(|| check_with(&bundle, &key, &targets, &policy, Ask { as_of, log_set }));
    let out = match checked {
        Ok(c) => {
            let logs: Vec<serde_json::Value> = c
                .logs
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "reviser": hex::encode(s.reviser),
                        "logs": s.logs.iter().map(|l| l.0).collect::<Vec<u64>>(),
                        "proved": s.proved,
                    })
                })
                .collect();
            // `staleness`: the Pulse the heads were checked to reach, or null: not checked.
            serde_json::json!({ "ok": {
                "pulse": c.pulse, "beliefs": c.beliefs, "staleness": c.staleness, "logs": logs
            } })
        }
        Err(e) => serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } }),
    };
    Ok(out.to_string())
}

/// Check a fleet recall bundle (docs/PROOFS.md, "Fleet recall") against `ledger_key`, the
/// range question asked (the JSON of an expectation with `frame`, `box`, `from_ns`, `to_ns` and
/// optionally `kinds`, `subject`) and the group of agents asked about, if any: `{"ok": {"pulse",
/// "time_ns", "in_scope", "logs": [{"log", "agent", "atoms"}]}}` or `{"error": {"code",
/// "message"}}` when the bundle is refused. A malformed argument raises ValueError.
#[pyfunction]
#[pyo3(signature = (bundle, ledger_key, expect, group=None))]
fn check_fleet_json(
    py: Python<'_>,
    bundle: Vec<u8>,
    ledger_key: Vec<u8>,
    expect: &str,
    group: Option<String>,
) -> PyResult<String> {
    let expect: serde_json::Value =
        serde_json::from_str(expect).map_err(|e| PyValueError::new_err(format!("expectation: {e}")))?;
    let expect = Expect::from_json(&expect).map_err(PyValueError::new_err)?;
    let Some(sion_verify::proof::Question::Range(query)) = expect.question else {
        return Err(PyValueError::new_err(
            "a fleet recall answers a range question: give frame, box, from_ns, to_ns",
        ));
    };
    let key = key_of(&ledger_key)?;
    let checked =
        py.detach(|| sion_verify::proof::fleet::verify_fleet(&bundle, &key, &query, group.as_deref()));
    let out = match checked {
        Ok(a) => {
            let logs: Vec<serde_json::Value> = a
                .logs
                .iter()
                .map(|l| {
                    serde_json::json!({
                        "log": l.log.0,
                        "agent": l.agent,
                        "atoms": l.atoms.iter().map(|(p, atom)| atom.to_json(Some(*p))).collect::<Vec<_>>(),
                    })
                })
                .collect();
            serde_json::json!({ "ok": { "pulse": a.pulse, "time_ns": a.time_ns, "in_scope": a.in_scope, "logs": logs } })
        }
        Err(e) => serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } }),
    };
    Ok(out.to_string())
}

/// A box as the command line writes it (`"0m,0m,-1m,5m,5m,3m"`; bare integers millimetres), in
/// millimetres: `(x0, y0, z0, x1, y1, z1)`, rounded outward (docs/UNITS.md).
#[pyfunction]
fn parse_box(text: &str) -> PyResult<(i64, i64, i64, i64, i64, i64)> {
    let b = units::parse_box(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((b.min_mm[0], b.min_mm[1], b.min_mm[2], b.max_mm[0], b.max_mm[1], b.max_mm[2]))
}

/// A box's corners in metres (six floats) in millimetres, rounded outward.
#[pyfunction]
fn box_from_metres(m: [f64; 6]) -> PyResult<(i64, i64, i64, i64, i64, i64)> {
    let b = units::box_from_metres(m).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((b.min_mm[0], b.min_mm[1], b.min_mm[2], b.max_mm[0], b.max_mm[1], b.max_mm[2]))
}

/// A time as text (RFC 3339, seconds with their unit, bare nanoseconds) in nanoseconds; `end`:
/// an interval's end, rounded up below a nanosecond (a start rounds down).
#[pyfunction]
#[pyo3(signature = (text, end=false))]
fn parse_time(text: &str, end: bool) -> PyResult<i64> {
    let edge = if end { units::Edge::High } else { units::Edge::Low };
    units::time_ns(text, edge).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Seconds (a float) in nanoseconds, rounded as [`parse_time`].
#[pyfunction]
#[pyo3(signature = (seconds, end=false))]
fn seconds_to_ns(seconds: f64, end: bool) -> PyResult<i64> {
    let edge = if end { units::Edge::High } else { units::Edge::Low };
    units::seconds_ns(seconds, edge).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A duration with its unit (`"10min"`, `"1.5s"`) in nanoseconds.
#[pyfunction]
fn parse_duration(text: &str) -> PyResult<i64> {
    units::duration_ns(text).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A frame name as tf2 compares them (`"/map"` is `"map"`).
#[pyfunction]
fn frame_name(text: &str) -> String {
    units::frame_name(text).to_owned()
}

fn key_of(ledger_key: &[u8]) -> PyResult<VerifyingKey> {
    let key: [u8; 32] = ledger_key
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("ledger_key: {} bytes, not 32", ledger_key.len())))?;
    VerifyingKey::from_bytes(&key).map_err(|_| PyValueError::new_err("ledger_key: not an ed25519 key"))
}

#[pymodule]
fn _sion_verify(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verify_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_evidence_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_bundle_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_fleet_json, m)?)?;
    m.add_function(wrap_pyfunction!(parse_box, m)?)?;
    m.add_function(wrap_pyfunction!(box_from_metres, m)?)?;
    m.add_function(wrap_pyfunction!(parse_time, m)?)?;
    m.add_function(wrap_pyfunction!(seconds_to_ns, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(frame_name, m)?)?;
    Ok(())
}
