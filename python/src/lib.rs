//! The native half of the `sion_verify` Python package: the Rust verifier (`sion_verify`)
//! behind functions that take and give JSON, so the Python side stays a thin, typed
//! wrapper (`sion_verify/__init__.py`) and no proof logic is written twice.

use ed25519_dalek::VerifyingKey;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sion_verify::proof::Expect;

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

fn key_of(ledger_key: &[u8]) -> PyResult<VerifyingKey> {
    let key: [u8; 32] = ledger_key
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("ledger_key: {} bytes, not 32", ledger_key.len())))?;
    VerifyingKey::from_bytes(&key).map_err(|_| PyValueError::new_err("ledger_key: not an ed25519 key"))
}

#[pymodule]
fn _sion_verify(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verify_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_bundle_json, m)?)?;
    Ok(())
}
