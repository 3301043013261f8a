//! Every case of tests/conformance through the page's request and answer (natively: the same
//! code the WebAssembly module runs; tests/viewers/test_web.py runs the module itself in
//! Chromium): the verdict, the statement and the answer's positions the manifest states.

use serde_json::Value;

#[test]
fn every_conformance_case_gets_its_verdict_through_the_pages_abi() {
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/conformance");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(format!("{suite}/manifest.json")).expect("manifest"))
            .expect("JSON");
    let cases = manifest["cases"].as_array().expect("cases");
    assert!(cases.len() >= 30);
    for case in cases {
        let file = case["file"].as_str().expect("file");
        let proof = std::fs::read(format!("{suite}/{file}")).expect("a proof");
        let key = hex::decode(case["ledger_key"].as_str().expect("key")).expect("hex");
        let request = sion_web::request(&proof, &key, &case["expect"].to_string(), &[]);
        let answer: Value = serde_json::from_str(&sion_web::check(&request)).expect("JSON");
        if case["verdict"] == "valid" {
            let ok = &answer["ok"];
            assert_eq!(ok["statement"], case["statement"], "{file}: {answer}");
            assert_eq!(ok["head"]["size"], case["head_size"], "{file}");
            assert!(answer["scene"].is_object(), "{file}: a valid proof is drawn");
        } else {
            assert_eq!(answer["error"]["code"], case["error"], "{file}: {answer}");
        }
    }
}

#[test]
fn a_question_in_peoples_units_is_the_question_in_millimetres_and_nanoseconds() {
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/conformance");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(format!("{suite}/manifest.json")).expect("manifest"))
            .expect("JSON");
    let case = manifest["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["file"] == "range.sionproof")
        .expect("range");
    let proof = std::fs::read(format!("{suite}/range.sionproof")).expect("a proof");
    let key = hex::decode(case["ledger_key"].as_str().expect("key")).expect("hex");
    let e = &case["expect"];
    let b: Vec<i64> = e["box"].as_array().expect("box").iter().map(|v| v.as_i64().expect("mm")).collect();
    let text = b.iter().map(|v| format!("{v}mm")).collect::<Vec<_>>().join(",");
    let asked = serde_json::json!({
        "frame": "/map",
        "box": text,
        "from": format!("{}ns", e["from_ns"]).replace("ns", ""),
        "to": e["to_ns"].to_string(),
    });
    let answer: Value =
        serde_json::from_str(&sion_web::check(&sion_web::request(&proof, &key, &asked.to_string(), &[])))
            .expect("JSON");
    assert!(answer["ok"].is_object(), "{answer}");
    assert!(answer["scene"]["asked"].as_str().expect("asked").contains("(UTC)"));
    // One millimetre more is another question.
    let bigger = serde_json::json!({ "frame": "map", "box": text.replacen(&format!("{}mm", b[0]), &format!("{}mm", b[0] - 1), 1),
        "from_ns": e["from_ns"], "to_ns": e["to_ns"] });
    let answer: Value =
        serde_json::from_str(&sion_web::check(&sion_web::request(&proof, &key, &bigger.to_string(), &[])))
            .expect("JSON");
    assert_eq!(answer["error"]["code"], "other_question", "{answer}");
}
