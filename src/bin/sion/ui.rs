//! Progress bars and number formatting for people at a terminal.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar on stderr (hidden when stderr is not a terminal) counting `unit`s up to `len`.
pub fn bar(len: u64, unit: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!(
        "{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, {{eta}} left)"
    );
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A bar over bytes of input.
pub fn byte_bar(len: u64) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}) {msg}",
    ) {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// 1234567 → "1,234,567".
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn short(hash: &[u8]) -> String {
    hex::encode(&hash[..hash.len().min(8)])
}
