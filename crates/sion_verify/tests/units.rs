//! tests/conformance/units.json through the Rust parser: the same vectors Python reads.

use sion_verify::units::{self, Edge};

#[test]
fn every_unit_vector_reads_as_the_file_says() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/conformance/units.json"))
            .expect("units.json");
    let suite: serde_json::Value = serde_json::from_str(&text).expect("json");
    let cases = suite["cases"].as_array().expect("cases");
    assert!(cases.len() > 40);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let edge = if case["edge"] == "high" { Edge::High } else { Edge::Low };
        let refused = case.get("error").is_some();
        let got: Result<serde_json::Value, String> = match case["value"].as_str().expect("value") {
            "length" => units::length_mm(text, edge).map(Into::into).map_err(|e| e.to_string()),
            "box" => units::parse_box(text)
                .map(|b| {
                    serde_json::json!([
                        b.min_mm[0],
                        b.min_mm[1],
                        b.min_mm[2],
                        b.max_mm[0],
                        b.max_mm[1],
                        b.max_mm[2]
                    ])
                })
                .map_err(|e| e.to_string()),
            "time" => units::time_ns(text, edge).map(Into::into).map_err(|e| e.to_string()),
            "duration" => units::duration_ns(text).map(Into::into).map_err(|e| e.to_string()),
            "frame" => Ok(units::frame_name(text).into()),
            other => panic!("unknown value {other}"),
        };
        let want = case.get("mm").or_else(|| case.get("ns")).or_else(|| case.get("frame"));
        match (got, refused) {
            (Ok(v), false) => assert_eq!(Some(&v), want, "{case}"),
            (Err(_), true) => {}
            (got, _) => panic!("{case}: got {got:?}"),
        }
    }
}
