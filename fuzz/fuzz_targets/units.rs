//! The one vocabulary (docs/UNITS.md) on any text: every value parses or is refused with a
//! reason, never a panic; a box parsed holds its minimum below its maximum; a time parsed as an
//! interval's start is never after the same text parsed as its end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_verify::units::{self, Edge};

fuzz_target!(|text: &str| {
    if let Ok(b) = units::parse_box(text) {
        assert!((0..3).all(|a| b.min_mm[a] <= b.max_mm[a]));
        let _ = units::show_box(&b);
    }
    if let (Ok(low), Ok(high)) = (units::time_ns(text, Edge::Low), units::time_ns(text, Edge::High)) {
        assert!(low <= high && high - low <= 1);
    }
    if let (Ok(low), Ok(high)) = (units::length_mm(text, Edge::Low), units::length_mm(text, Edge::High)) {
        assert!(low <= high && high - low <= 1);
    }
    if let Ok(d) = units::duration_ns(text) {
        assert!(d >= 0);
    }
    let _ = units::frame_name(text);
});
