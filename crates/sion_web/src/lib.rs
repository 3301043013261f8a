//! The verifier in the browser (web/): `sion_verify` compiled to WebAssembly behind a byte ABI
//! a page calls with nothing but `WebAssembly.instantiate` (no generated glue):
//!
//! 1. `sion_input(len) -> ptr`: room for `len` bytes of input in the module's memory; the page
//!    writes the request there;
//! 2. `sion_check(len) -> out_len`: checks the request, leaves the answer (JSON, UTF-8) in the
//!    module's memory;
//! 3. `sion_output() -> ptr`: where the answer is.
//!
//! The request is little-endian and length-prefixed (u32 before each part): the proof file's
//! bytes, the ledger key the reader trusts (32 bytes), what the reader asked (JSON, docs/PROOFS.md
//! "What the reader asked"; `{}` for nothing), then a u32 count of payloads and each payload's
//! name and bytes (an evidence directory's `blobs/`, docs/EVIDENCE.md). The answer is
//! [`check`]'s.

use std::cell::RefCell;

use ed25519_dalek::VerifyingKey;
use serde_json::{Value, json};
use sion_verify::proof::{Expect, ProofFile};
use sion_viz::scene::{self, Scene, Verdict};

/// At most this much input (a proof file is at most 64 MiB; an evidence directory's payloads
/// beside it): a page cannot make the module grow without bound.
pub const MAX_INPUT: usize = 512 << 20;

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Room for the request; its address in the module's memory (0 when too large).
// The exports' names are the page's ABI: unmangled by necessity (no unsafe code beyond that).
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn sion_input(len: u32) -> u32 {
    let len = len as usize;
    if len > MAX_INPUT {
        return 0;
    }
    INPUT.with(|i| {
        let mut i = i.borrow_mut();
        i.clear();
        i.resize(len, 0);
        i.as_mut_ptr() as usize as u32
    })
}

/// Check the request the page wrote (its first `len` bytes); returns the answer's length.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn sion_check(len: u32) -> u32 {
    let answer = INPUT.with(|i| {
        let i = i.borrow();
        check(i.get(..len as usize).unwrap_or_default())
    });
    OUTPUT.with(|o| {
        let mut o = o.borrow_mut();
        *o = answer.into_bytes();
        o.len() as u32
    })
}

/// Where the last answer is.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn sion_output() -> u32 {
    OUTPUT.with(|o| o.borrow().as_ptr() as usize as u32)
}

/// One request's parts.
struct Request<'a> {
    proof: &'a [u8],
    key: &'a [u8],
    expect: &'a [u8],
    blobs: Vec<(&'a str, &'a [u8])>,
}

fn parse(mut input: &[u8]) -> Result<Request<'_>, String> {
    fn part<'a>(input: &mut &'a [u8], what: &str) -> Result<&'a [u8], String> {
        let (len, rest) =
            input.split_first_chunk::<4>().ok_or_else(|| format!("the request ends before {what}"))?;
        let len = u32::from_le_bytes(*len) as usize;
        let (part, rest) =
            rest.split_at_checked(len).ok_or_else(|| format!("the request ends inside {what}"))?;
        *input = rest;
        Ok(part)
    }
    let proof = part(&mut input, "the proof")?;
    let key = part(&mut input, "the ledger key")?;
    let expect = part(&mut input, "the question")?;
    let mut blobs = Vec::new();
    if !input.is_empty() {
        let count = part(&mut input, "the payloads' count")?;
        let count: [u8; 4] = count.try_into().map_err(|_| "the payloads' count is not 4 bytes".to_owned())?;
        // Each payload takes at least 8 bytes of the request: a count larger than it holds
        // fails on the first missing part, whatever it says.
        for _ in 0..u32::from_le_bytes(count) {
            let name = part(&mut input, "a payload's name")?;
            let name = std::str::from_utf8(name).map_err(|_| "a payload's name is not UTF-8".to_owned())?;
            let bytes = part(&mut input, "a payload")?;
            blobs.push((name, bytes));
        }
        if !input.is_empty() {
            return Err("the request goes on after its last payload".into());
        }
    }
    Ok(Request { proof, key, expect, blobs })
}

/// A request as bytes (the page builds the same): the proof, the key, the question (JSON), and
/// the payloads.
pub fn request(proof: &[u8], key: &[u8], expect: &str, blobs: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |b: &[u8]| {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    put(proof);
    put(key);
    put(expect.as_bytes());
    if !blobs.is_empty() {
        put(&(blobs.len() as u32).to_le_bytes());
        for (name, bytes) in blobs {
            put(name.as_bytes());
            put(bytes);
        }
    }
    out
}

/// Check a request: `{"ok": <what the proof proves>, "blobs": N, "scene": ..., "legend": ...}`
/// or `{"error": {"code", "message"}, "scene": ...}`, the same verdicts and codes as
/// `sion memory verify` and the Python `sion_verify` (the same verifier). The scene is what the
/// page draws (the question, the answer, the proof's walk), rebuilt from the proof alone.
pub fn check(input: &[u8]) -> String {
    let answer = match parse(input) {
        Ok(r) => checked(&r),
        Err(e) => json!({ "error": { "code": "input", "message": e } }),
    };
    answer.to_string()
}

fn checked(r: &Request<'_>) -> Value {
    let input = |message: String| json!({ "error": { "code": "input", "message": message } });
    let key: [u8; 32] = match r.key.try_into() {
        Ok(k) => k,
        Err(_) => return input(format!("the ledger key is {} bytes, not 32 (64 hex digits)", r.key.len())),
    };
    let Ok(key) = VerifyingKey::from_bytes(&key) else {
        return input("the ledger key is not an ed25519 key".into());
    };
    let expect = match std::str::from_utf8(r.expect).map_err(|e| e.to_string()).and_then(|t| {
        let mut v: Value =
            serde_json::from_str(if t.trim().is_empty() { "{}" } else { t }).map_err(|e| e.to_string())?;
        people_units(&mut v)?;
        Expect::from_json(&v)
    }) {
        Ok(e) => e,
        Err(e) => return input(format!("the question: {e}")),
    };
    let mut out = match sion_verify::proof::verify(r.proof, &key, &expect) {
        Err(e) => json!({ "error": { "code": e.code(), "message": e.to_string() } }),
        Ok(v) if r.blobs.is_empty() => json!({ "ok": v.to_json(), "blobs": 0 }),
        Ok(v) => match sion_verify::evidence::check_blobs(&v, r.blobs.iter().copied()) {
            Ok(n) => json!({ "ok": v.to_json(), "blobs": n }),
            Err(e) => json!({ "error": { "code": e.code(), "message": e.to_string() } }),
        },
    };
    if let Ok(file) = ProofFile::decode(r.proof) {
        let mut scene = scene_json(&Scene::of(&file, Some(&key)));
        // The drawing says what the whole check found: a proof of another question, or a
        // payload that is not the committed one, is drawn as refused too.
        if let Some(e) = out.get("error") {
            scene["verified"] = json!(false);
            scene["headline"] = json!(format!("✗ does NOT verify: {}", e["message"].as_str().unwrap_or("")));
        }
        out["scene"] = scene;
    }
    out["legend"] = scene::legend()
        .iter()
        .map(|e| json!({ "name": e.name, "rgba": e.rgba, "meaning": e.meaning }))
        .collect();
    out
}

/// The question as people write it, turned into the verifier's: a box as text with units
/// (`"0m,0m,-1m,10m,8m,3m"`), times as RFC 3339 or seconds with their unit (`"from"`, `"to"`),
/// read by the same functions as the command line's (docs/UNITS.md).
fn people_units(v: &mut Value) -> Result<(), String> {
    use sion_verify::units;
    if let Some(text) = v.get("box").and_then(Value::as_str) {
        let b = units::parse_box(text).map_err(|e| format!("box: {e}"))?;
        v["box"] = json!([b.min_mm[0], b.min_mm[1], b.min_mm[2], b.max_mm[0], b.max_mm[1], b.max_mm[2]]);
    }
    for (name, field, edge) in [("from", "from_ns", units::Edge::Low), ("to", "to_ns", units::Edge::High)] {
        if let Some(text) = v.get(name).and_then(Value::as_str).map(str::to_owned) {
            let ns = units::time_ns(&text, edge).map_err(|e| format!("{name}: {e}"))?;
            v[field] = json!(ns);
            if let Some(o) = v.as_object_mut() {
                o.remove(name);
            }
        }
    }
    if let Some(frame) = v.get("frame").and_then(Value::as_str).map(|f| units::frame_name(f).to_owned()) {
        v["frame"] = json!(frame);
    }
    Ok(())
}

fn scene_json(s: &Scene) -> Value {
    let corners = |b: &sion_verify::atom::BoxMm| json!({ "min_mm": b.min_mm, "max_mm": b.max_mm });
    json!({
        "frame": s.frame,
        "kind": s.kind,
        "question": s.question.map(|q| json!({ "box": corners(&q.bounds), "from_ns": q.from_ns, "to_ns": q.to_ns })),
        "drawn_question": s.drawn_question().map(|b| corners(&b)),
        "asked": s.asked(),
        "verified": matches!(s.verdict, Verdict::Verified { .. }),
        "headline": s.headline(),
        "head_size": s.head_size,
        "bytes": s.bytes,
        "answer": s.answer.iter().map(|a| json!({
            "position": a.position,
            "kind": a.kind.as_str(),
            "subject": a.subject,
            "frame": a.frame,
            "box": corners(&scene::drawable(&a.bounds)),
            "rgb": scene::kind_rgb(a.kind),
        })).collect::<Vec<_>>(),
        "walk": s.walk.iter().map(|w| json!({
            "layer": w.layer.name(),
            "depth": w.depth,
            "box": corners(&scene::drawable(&w.bounds)),
            "rgba": w.layer.rgba(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_request_is_an_input_error_not_a_panic() {
        for bad in [&b""[..], &[9, 0, 0, 0, 1][..], &request(b"x", &[1; 3], "{}", &[])] {
            let v: Value = serde_json::from_str(&check(bad)).expect("JSON");
            assert_eq!(v["error"]["code"], "input", "{v}");
        }
    }
}
