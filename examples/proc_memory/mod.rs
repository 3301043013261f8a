//! A process's resident memory, as examples/lifetime.rs and examples/blob_store.rs report it.

/// Resident memory now and at its peak, from /proc/self/status: (peak, anonymous, file), KiB.
pub fn rss() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("RssAnon:"), field("RssFile:"))
}
