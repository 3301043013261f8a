//! The package's types as ROS 2 messages (`sion_memory_msgs`) and back.

use r2r::builtin_interfaces::msg::Time;
use r2r::sion_memory_msgs::msg;

use crate::atom::Atom;
use crate::ingest::units;
use crate::ledger::MemoryLog;

/// A head as `sion_memory_msgs/Head`, with the Pulse that committed it.
pub fn head(log: &MemoryLog, pulse_time_ns: i64, ledger_key: [u8; 32]) -> msg::Head {
    msg::Head {
        log_id: log.id.0,
        size: log.head.size,
        root: log.head.root.to_vec(),
        index: log.head.index.to_vec(),
        manifest: log.head.manifest.to_vec(),
        commits: log.commits,
        pulse: log.committed_at,
        pulse_time_ns,
        ledger_key: ledger_key.to_vec(),
    }
}

/// An atom at a position as `sion_memory_msgs/Atom`.
pub fn atom(position: u64, atom: &Atom) -> msg::Atom {
    let p = atom.parts();
    msg::Atom {
        id: atom.id().to_string(),
        position,
        kind: p.kind.as_str().to_owned(),
        frame_id: p.frame.clone(),
        min_mm: p.bounds.min_mm.to_vec(),
        max_mm: p.bounds.max_mm.to_vec(),
        from_ns: p.valid.from_ns,
        to_ns: p.valid.to_ns,
        confidence_permille: p.confidence.0,
        subject: p.subject.clone(),
        encoding: atom.bytes().to_vec(),
    }
}

/// A `builtin_interfaces/Time` as nanoseconds since the epoch.
pub fn time_ns(t: &Time) -> Result<i64, String> {
    units::stamp_to_ns(t.sec, t.nanosec).map_err(|e| format!("time {}.{:09}: {e}", t.sec, t.nanosec))
}

/// Three millimetre coordinates from an `int64[3]`.
pub fn corner(v: &[i64], name: &str) -> Result<[i64; 3], String> {
    <[i64; 3]>::try_from(v).map_err(|_| format!("{name} needs 3 coordinates, not {}", v.len()))
}

/// Nanoseconds as a `builtin_interfaces/Time` (saturating at the ends of its range).
pub fn time(ns: i64) -> Time {
    let sec = ns.div_euclid(1_000_000_000).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    Time { sec, nanosec: ns.rem_euclid(1_000_000_000) as u32 }
}
