//! Metres, seconds and probabilities become millimetres, nanoseconds and permille here, once,
//! with explicit rounding and range checks. Every function refuses NaN, infinities and values
//! an atom cannot hold, with a reason a robotics engineer can act on.

use sion_verify::atom::limits::{MAX_CONFIDENCE_PERMILLE, MAX_COORD_MM};

/// Why a number could not be converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    #[error("not a number")]
    NaN,
    #[error("infinite")]
    Infinite,
    #[error("out of range")]
    OutOfRange,
}

/// Which way a conversion rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// To the nearest, halves away from zero: a measured point.
    Nearest,
    /// Towards negative infinity: the lower corner of a box, so the box still holds what it
    /// bounds. A value within a micrometre of a whole millimetre counts as it, so that float
    /// noise (a resolution sent as f32, a rotation) does not grow boxes by a millimetre.
    Down,
    /// Towards positive infinity: the upper corner of a box (same micrometre allowance).
    Up,
}

/// Metres to millimetres, rounded to the nearest (halves away from zero), within
/// ±10^15 mm.
pub fn metres_to_mm(m: f64) -> Result<i64, UnitError> {
    metres_to_mm_rounding(m, Round::Nearest)
}

/// Metres to millimetres, rounded as asked, within ±10^15 mm.
pub fn metres_to_mm_rounding(m: f64, round: Round) -> Result<i64, UnitError> {
    if m.is_nan() {
        return Err(UnitError::NaN);
    }
    if m.is_infinite() {
        return Err(UnitError::Infinite);
    }
    let scaled = m * 1000.0;
    let nearest = scaled.round();
    let mm = match round {
        Round::Nearest => nearest,
        _ if (scaled - nearest).abs() <= 1e-3 => nearest,
        Round::Down => scaled.floor(),
        Round::Up => scaled.ceil(),
    };
    // Compare as floats first: casting an out-of-range float saturates silently.
    if mm.abs() > MAX_COORD_MM as f64 {
        return Err(UnitError::OutOfRange);
    }
    Ok(mm as i64)
}

/// A ROS time stamp (`builtin_interfaces/Time`: seconds and nanoseconds) to nanoseconds since
/// the epoch. Negative seconds and nanoseconds of a second or more are refused.
pub fn stamp_to_ns(sec: i32, nanosec: u32) -> Result<i64, UnitError> {
    if sec < 0 || nanosec >= 1_000_000_000 {
        return Err(UnitError::OutOfRange);
    }
    // i32::MAX seconds is 2.1e18 ns, below i64::MAX.
    Ok(i64::from(sec) * 1_000_000_000 + i64::from(nanosec))
}

/// Seconds (a duration) to nanoseconds, rounded to the nearest.
pub fn seconds_to_ns(s: f64) -> Result<i64, UnitError> {
    if s.is_nan() {
        return Err(UnitError::NaN);
    }
    if s.is_infinite() {
        return Err(UnitError::Infinite);
    }
    let ns = (s * 1e9).round();
    if ns.abs() > 9.0e18 {
        return Err(UnitError::OutOfRange);
    }
    Ok(ns as i64)
}

/// A probability in [0, 1] to permille, rounded to the nearest.
pub fn probability_to_permille(p: f64) -> Result<u16, UnitError> {
    if p.is_nan() {
        return Err(UnitError::NaN);
    }
    if p.is_infinite() {
        return Err(UnitError::Infinite);
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(UnitError::OutOfRange);
    }
    Ok(((p * 1000.0).round() as u16).min(MAX_CONFIDENCE_PERMILLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metres_round_to_the_nearest_millimetre() {
        assert_eq!(metres_to_mm(1.2345), Ok(1235));
        assert_eq!(metres_to_mm(-1.2345), Ok(-1235));
        assert_eq!(metres_to_mm(0.0004), Ok(0));
        assert_eq!(metres_to_mm(-0.0005), Ok(-1));
        assert_eq!(metres_to_mm(1e12), Ok(1_000_000_000_000_000));
        assert_eq!(metres_to_mm(f64::NAN), Err(UnitError::NaN));
        assert_eq!(metres_to_mm(f64::INFINITY), Err(UnitError::Infinite));
        assert_eq!(metres_to_mm(f64::NEG_INFINITY), Err(UnitError::Infinite));
        assert_eq!(metres_to_mm(1.0000001e12), Err(UnitError::OutOfRange));
        assert_eq!(metres_to_mm(f64::MAX), Err(UnitError::OutOfRange));
    }

    #[test]
    fn box_corners_round_outwards() {
        assert_eq!(metres_to_mm_rounding(1.2341, Round::Down), Ok(1234));
        assert_eq!(metres_to_mm_rounding(1.2341, Round::Up), Ok(1235));
        assert_eq!(metres_to_mm_rounding(-1.2341, Round::Down), Ok(-1235));
        assert_eq!(metres_to_mm_rounding(-1.2341, Round::Up), Ok(-1234));
        assert_eq!(metres_to_mm_rounding(2.0, Round::Up), Ok(2000));
        // 40 cells of 0.05 m sent as f32 are 2.0000000298 m: still 2000 mm.
        assert_eq!(metres_to_mm_rounding(40.0 * f64::from(0.05f32), Round::Up), Ok(2000));
        assert_eq!(metres_to_mm_rounding(1.0000011, Round::Up), Ok(1001));
        assert_eq!(metres_to_mm_rounding(f64::NAN, Round::Down), Err(UnitError::NaN));
    }

    #[test]
    fn stamps_and_durations() {
        assert_eq!(stamp_to_ns(1, 5), Ok(1_000_000_005));
        assert_eq!(stamp_to_ns(i32::MAX, 999_999_999), Ok(2_147_483_647_999_999_999));
        assert_eq!(stamp_to_ns(-1, 0), Err(UnitError::OutOfRange));
        assert_eq!(stamp_to_ns(0, 1_000_000_000), Err(UnitError::OutOfRange));
        assert_eq!(seconds_to_ns(0.0333), Ok(33_300_000));
        assert_eq!(seconds_to_ns(f64::NAN), Err(UnitError::NaN));
        assert_eq!(seconds_to_ns(1e10), Err(UnitError::OutOfRange));
    }

    #[test]
    fn probabilities() {
        assert_eq!(probability_to_permille(0.9), Ok(900));
        assert_eq!(probability_to_permille(0.9996), Ok(1000));
        assert_eq!(probability_to_permille(1.0), Ok(1000));
        assert_eq!(probability_to_permille(-0.1), Err(UnitError::OutOfRange));
        assert_eq!(probability_to_permille(f64::NAN), Err(UnitError::NaN));
    }
}
