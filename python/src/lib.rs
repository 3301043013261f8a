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
#[pyo3(signature = (bundle, ledger_key, targets, policy, as_of=None))]
fn check_bundle_json(
    py: Python<'_>,
    bundle: Vec<u8>,
    ledger_key: Vec<u8>,
    targets: Vec<String>,
    policy: &str,
    as_of: Option<u64>,
) -> PyResult<String> {
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
    let checked = py.detach(|| sion_verify::belief::bundle::check(&bundle, &key, &targets, &policy, as_of));
    let out = match checked {
        Ok(c) => serde_json::json!({ "ok": { "pulse": c.pulse, "beliefs": c.beliefs } }),
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
