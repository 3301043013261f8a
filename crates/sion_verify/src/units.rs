//! The one vocabulary people use to ask: lengths in metres (or millimetres), times as RFC 3339,
//! seconds, ROS Time or nanoseconds, durations, frame names as tf2 writes them. Every surface
//! (the command line, ROS services, MCP, Python) parses with these functions, so a question means
//! the same everywhere. docs/UNITS.md is the specification.
//!
//! Atoms hold integers (millimetres, nanoseconds); a value finer than that is rounded *outward*
//! ([`Edge`]): a box's minimum corner and an interval's start down, its maximum corner and end
//! up, so the question stored always holds the question asked. Decimals are exact: `0.1m` is
//! 100 mm, never 100.000000000000005. A float (from Python, JSON or a ROS message) is first
//! written as its shortest round-trip decimal (`0.1`, as Python's `repr` and JSON print it).

use crate::atom::BoxMm;

/// Which side of a box or an interval a value stands for: where it is rounded when it is finer
/// than a millimetre or a nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// A minimum corner or an interval's start: rounded down (toward −∞).
    Low,
    /// A maximum corner or an interval's end: rounded up (toward +∞).
    High,
}

/// What kind of value a [`UnitError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Value {
    /// A length (a box's coordinate).
    Length,
    /// A box: six lengths.
    Box,
    /// A point: three lengths.
    Point,
    /// A point in time.
    Time,
    /// A duration.
    Duration,
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Value::Length => "length",
            Value::Box => "box",
            Value::Point => "point",
            Value::Time => "time",
            Value::Duration => "duration",
        })
    }
}

/// A value that is not in the vocabulary: which kind of value, the text as given, and what is
/// wrong with it, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value} {text:?}: {problem}")]
#[non_exhaustive]
pub struct UnitError {
    /// What the text was read as.
    pub value: Value,
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub problem: String,
}

fn error(value: Value, text: &str, problem: impl Into<String>) -> UnitError {
    UnitError { value, text: text.to_owned(), problem: problem.into() }
}

fn length_error(text: &str, problem: impl Into<String>) -> UnitError {
    error(Value::Length, text, problem)
}

fn time_error(text: &str, problem: impl Into<String>) -> UnitError {
    error(Value::Time, text, problem)
}

fn duration_error(text: &str, problem: impl Into<String>) -> UnitError {
    error(Value::Duration, text, problem)
}

/// Longest number read: 40 characters hold any i64 of nanoseconds with 9 decimals to spare.
const MAX_NUMBER: usize = 40;

/// `[+-]DIGITS[.DIGITS]` times `10^scale`, rounded toward `edge`; `None` on a syntax error,
/// `Some(Err(()))` when it does not fit an i64.
fn decimal(text: &str, scale: u32, edge: Edge) -> Option<Result<i64, ()>> {
    if text.is_empty() || text.len() > MAX_NUMBER {
        return None;
    }
    let (negative, digits) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (whole, fraction) = match digits.split_once('.') {
        Some((w, f)) => (w, f),
        None => (digits, ""),
    };
    if (whole.is_empty() && fraction.is_empty())
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || (digits.contains('.') && fraction.is_empty() && whole.is_empty())
    {
        return None;
    }
    // The value is whole.fraction × 10^scale: the first `scale` digits of the fraction join the
    // integer; any digit after them is what rounding decides on.
    let scale = scale as usize;
    let (kept, rest) = if fraction.len() > scale { fraction.split_at(scale) } else { (fraction, "") };
    let mut magnitude: i128 = 0;
    for b in whole.bytes().chain(kept.bytes()).chain(std::iter::repeat_n(b'0', scale - kept.len())) {
        magnitude = magnitude * 10 + i128::from(b - b'0');
        if magnitude > i128::from(i64::MAX) + 1 {
            return Some(Err(()));
        }
    }
    let inexact = rest.bytes().any(|b| b != b'0');
    let mut value = if negative { -magnitude } else { magnitude };
    if inexact {
        // Truncation went toward zero: move to the floor or the ceiling as the edge asks.
        match (edge, negative) {
            (Edge::Low, true) => value -= 1,
            (Edge::High, false) => value += 1,
            _ => {}
        }
    }
    Some(i64::try_from(value).map_err(|_| ()))
}

/// A float as the shortest decimal that reads back as it (Rust's `Display`, never an exponent).
fn float_text(value: f64) -> Option<String> {
    value.is_finite().then(|| format!("{value}"))
}

/// Length units and the power of ten each scales millimetres by (`mm` before `m`: the first
/// suffix the text ends in is its unit).
const LENGTH_UNITS: [(&str, u32); 3] = [("mm", 0), ("cm", 1), ("m", 3)];
/// Time units and the power of ten each scales nanoseconds by (`ns`, `us`, `ms` before `s`).
const TIME_UNITS: [(&str, u32); 5] = [("ns", 0), ("us", 3), ("µs", 3), ("ms", 6), ("s", 9)];

/// The number before the first of `units` the text ends in, and that unit's power of ten.
fn split_unit<'t>(t: &'t str, units: &[(&str, u32)]) -> Option<(&'t str, u32)> {
    units.iter().find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n, *scale)))
}

/// A length as text, in millimetres: `1.5m`, `12cm`, `250mm`, or a bare integer (millimetres).
/// A decimal needs its unit (`1.5` alone is refused: metres or millimetres?).
pub fn length_mm(text: &str, edge: Edge) -> Result<i64, UnitError> {
    let t = text.trim();
    let (number, scale) = match split_unit(t, &LENGTH_UNITS) {
        Some(found) => found,
        None if t.contains('.') => {
            return Err(length_error(
                text,
                "a decimal needs its unit: metres (1.5m) or millimetres (1.5mm); a bare integer is millimetres",
            ));
        }
        None => (t, 0),
    };
    match decimal(number.trim_end(), scale, edge) {
        Some(Ok(mm)) => Ok(mm),
        Some(Err(())) => Err(length_error(text, "too large for a length in millimetres")),
        None => Err(length_error(
            text,
            "expected a number with a unit: metres (1.5m), centimetres (12cm) or millimetres (250mm, or a bare integer)",
        )),
    }
}

/// A length in metres (a float from Python, JSON or a ROS message), in millimetres.
pub fn metres_mm(metres: f64, edge: Edge) -> Result<i64, UnitError> {
    let text = float_text(metres).ok_or_else(|| length_error(&metres.to_string(), "not a number"))?;
    match decimal(&text, 3, edge) {
        Some(Ok(mm)) => Ok(mm),
        _ => Err(length_error(&format!("{text} m"), "too large for a length in millimetres")),
    }
}

/// A box as the command line writes it: six lengths `X0,Y0,Z0,X1,Y1,Z1` (minimum corner, then
/// maximum), each with its unit (`0m,0m,-1m,10m,8m,3m`) or a bare integer in millimetres.
pub fn parse_box(text: &str) -> Result<BoxMm, UnitError> {
    let box_error = |problem: String| error(Value::Box, text, problem);
    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() != 6 {
        return Err(box_error(format!(
            "six lengths X0,Y0,Z0,X1,Y1,Z1 (minimum corner, then maximum), e.g. 0m,0m,-1m,10m,8m,3m; got {}",
            parts.len()
        )));
    }
    let mut v = [0i64; 6];
    for (i, part) in parts.iter().enumerate() {
        let edge = if i < 3 { Edge::Low } else { Edge::High };
        v[i] =
            length_mm(part, edge).map_err(|e| box_error(format!("{} ({part:?}): {}", AXES[i], e.problem)))?;
    }
    box_from(v).map_err(box_error)
}

const AXES: [&str; 6] = ["X0", "Y0", "Z0", "X1", "Y1", "Z1"];

/// A point as people write it: `X,Y,Z`, each a length with its unit (`2.5m,-1m,0m`; bare
/// integers are millimetres); below a millimetre, rounded down (toward −∞), as a box's
/// minimum corner is.
pub fn parse_point(text: &str) -> Result<[i64; 3], UnitError> {
    let point_error = |problem: String| error(Value::Point, text, problem);
    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() != 3 {
        return Err(point_error(format!("three lengths X,Y,Z, e.g. 2.5m,-1m,0m; got {}", parts.len())));
    }
    let mut v = [0i64; 3];
    for (i, part) in parts.iter().enumerate() {
        v[i] = length_mm(part, Edge::Low)
            .map_err(|e| point_error(format!("{} ({part:?}): {}", ["X", "Y", "Z"][i], e.problem)))?;
    }
    Ok(v)
}

fn box_from(v: [i64; 6]) -> Result<BoxMm, String> {
    for axis in 0..3 {
        if v[axis] > v[axis + 3] {
            return Err(format!(
                "{} ({} mm) is above {} ({} mm): the minimum corner comes first",
                AXES[axis],
                v[axis],
                AXES[axis + 3],
                v[axis + 3]
            ));
        }
    }
    Ok(BoxMm { min_mm: [v[0], v[1], v[2]], max_mm: [v[3], v[4], v[5]] })
}

/// A box from its corners in metres (floats: x0, y0, z0, x1, y1, z1), rounded outward.
pub fn box_from_metres(m: [f64; 6]) -> Result<BoxMm, UnitError> {
    let text = || m.iter().map(|v| format!("{v}")).collect::<Vec<_>>().join(",") + " m";
    let mut v = [0i64; 6];
    for i in 0..6 {
        let edge = if i < 3 { Edge::Low } else { Edge::High };
        v[i] = metres_mm(m[i], edge)
            .map_err(|e| error(Value::Box, &text(), format!("{}: {}", AXES[i], e.problem)))?;
    }
    box_from(v).map_err(|problem| error(Value::Box, &text(), problem))
}

/// A point in time, in nanoseconds since the Unix epoch (ROS Time's epoch): RFC 3339
/// (`2026-01-01T00:00:00Z`, `2026-01-01T14:02:00.5+01:00`), seconds with their unit
/// (`1767225600.5s`; also `ms`, `us`, `ns`), or bare integer nanoseconds
/// (`1767225600000000000`). A decimal needs its unit.
pub fn time_ns(text: &str, edge: Edge) -> Result<i64, UnitError> {
    let t = text.trim();
    if t.len() > 10 && t.as_bytes()[4] == b'-' {
        return rfc3339_ns(t, edge).map_err(|problem| time_error(text, problem));
    }
    let (number, scale) = match split_unit(t, &TIME_UNITS) {
        Some(found) => found,
        None if t.contains('.') => {
            return Err(time_error(
                text,
                "a decimal needs its unit: seconds (1767225600.5s); a bare integer is nanoseconds; or RFC 3339 (2026-01-01T00:00:00Z)",
            ));
        }
        None => (t, 0),
    };
    match decimal(number.trim_end(), scale, edge) {
        Some(Ok(ns)) => Ok(ns),
        Some(Err(())) => Err(time_error(text, "outside the nanoseconds an i64 holds (years 1677 to 2262)")),
        None => Err(time_error(
            text,
            "expected RFC 3339 (2026-01-01T00:00:00Z), seconds with their unit (1767225600.5s) or integer nanoseconds",
        )),
    }
}

/// Seconds since the epoch (a float, as `rclpy`'s `Time.nanoseconds / 1e9` or a JSON number), in
/// nanoseconds, rounded toward `edge`.
pub fn seconds_ns(seconds: f64, edge: Edge) -> Result<i64, UnitError> {
    let text = float_text(seconds).ok_or_else(|| time_error(&seconds.to_string(), "not a number"))?;
    match decimal(&text, 9, edge) {
        Some(Ok(ns)) => Ok(ns),
        _ => {
            Err(time_error(&format!("{text} s"), "outside the nanoseconds an i64 holds (years 1677 to 2262)"))
        }
    }
}

/// ROS Time (`builtin_interfaces/Time`: `sec`, `nanosec`) in nanoseconds.
pub fn ros_time_ns(sec: i64, nanosec: u32) -> Result<i64, UnitError> {
    let text = || format!("sec {sec}, nanosec {nanosec}");
    if nanosec >= 1_000_000_000 {
        return Err(time_error(&text(), "nanosec is below 1,000,000,000 in a ROS Time"));
    }
    sec.checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(i64::from(nanosec)))
        .ok_or_else(|| time_error(&text(), "outside the nanoseconds an i64 holds (years 1677 to 2262)"))
}

/// A duration in nanoseconds: a number and its unit (`10min`, `1.5s`, `2h`, `500ms`, `1d`; also
/// `ns`, `us`). Outward rounding does not apply: below a nanosecond rounds up.
pub fn duration_ns(text: &str) -> Result<i64, UnitError> {
    let t = text.trim();
    const UNITS: [(&str, u32, i64); 8] = [
        ("ns", 0, 1),
        ("us", 3, 1),
        ("µs", 3, 1),
        ("ms", 6, 1),
        ("min", 9, 60),
        ("s", 9, 1),
        ("h", 9, 3_600),
        ("d", 9, 86_400),
    ];
    for (unit, scale, factor) in UNITS {
        if let Some(number) = t.strip_suffix(unit) {
            let Some(value) = decimal(number.trim_end(), scale, Edge::High) else {
                break;
            };
            let ns = value.ok().and_then(|v| v.checked_mul(factor));
            return match ns {
                Some(ns) if ns >= 0 => Ok(ns),
                Some(_) => Err(duration_error(text, "a duration is not negative")),
                None => Err(duration_error(text, "too long for nanoseconds in an i64 (about 292 years)")),
            };
        }
    }
    Err(duration_error(text, "expected a number and its unit: 10min, 1.5s, 2h, 500ms, 1d (or ns, us)"))
}

/// A frame name as tf2 compares them: without its leading `/` (`/map` is `map`).
pub fn frame_name(text: &str) -> &str {
    let t = text.trim();
    t.strip_prefix('/').unwrap_or(t)
}

/// Millimetres as metres, for people: `1.5`, `-0.002`, `12` (no trailing zeros).
pub fn show_metres(mm: i64) -> String {
    let sign = if mm < 0 { "-" } else { "" };
    let (whole, milli) = (mm.unsigned_abs() / 1000, mm.unsigned_abs() % 1000);
    if milli == 0 {
        format!("{sign}{whole}")
    } else {
        let frac = format!("{milli:03}");
        format!("{sign}{whole}.{}", frac.trim_end_matches('0'))
    }
}

/// A box for people: `[0, 0, -1]..[5, 5, 3] m`.
pub fn show_box(b: &BoxMm) -> String {
    let corner = |c: &[i64; 3]| c.iter().map(|v| show_metres(*v)).collect::<Vec<_>>().join(", ");
    format!("[{}]..[{}] m", corner(&b.min_mm), corner(&b.max_mm))
}

/// An interval for people: `2026-01-01T00:00:00.000Z .. 2026-01-01T00:00:30.000Z` (UTC), the
/// ends of i64 said in words.
pub fn show_interval(from_ns: i64, to_ns: i64) -> String {
    let end = |ns: i64, word: &str| match ns {
        i64::MIN | i64::MAX => word.to_owned(),
        ns => crate::time::rfc3339(ns),
    };
    format!("{} .. {}", end(from_ns, "the beginning of time"), end(to_ns, "the end of time"))
}

/// A range question for people, in metres and UTC: `frame "map", [0, 0, -1]..[5, 5, 3] m,
/// 2026-01-01T00:00:00.000Z .. 2026-01-01T00:00:30.000Z`.
pub fn show_query(q: &crate::index::geom::Query) -> String {
    let kinds = if q.filters_kinds() { format!(", {}", show_kinds(q.kinds)) } else { String::new() };
    format!("frame {:?}, {}, {}{kinds}", q.frame, show_box(&q.bounds), show_interval(q.from_ns, q.to_ns))
}

/// A sum of nanoseconds as seconds, to the millisecond (`12.345`).
pub fn show_seconds_u128(ns: u128) -> String {
    let ms = ns / 1_000_000;
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// The kinds a question names: `kinds observation, pose` (bit `k` is kind code `k`).
pub fn show_kinds(kinds: u32) -> String {
    let names: Vec<&str> =
        crate::atom::Kind::ALL.iter().filter(|k| kinds & (1 << k.code()) != 0).map(|k| k.as_str()).collect();
    format!("{} {}", if names.len() == 1 { "kind" } else { "kinds" }, names.join(", "))
}

/// The set of kinds named (`observation`, `map_tile`, …; docs/ATOM.md) as a question holds it:
/// bit `k` for kind code `k`. An unknown name is an error that lists the kinds.
pub fn parse_kinds<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<u32, String> {
    let mut mask = 0u32;
    for name in names {
        let kind = crate::atom::Kind::from_name(name.trim()).ok_or_else(|| {
            let all: Vec<&str> = crate::atom::Kind::ALL.iter().map(|k| k.as_str()).collect();
            format!("{name:?} is not a kind of atom (one of {})", all.join(", "))
        })?;
        mask |= 1 << kind.code();
    }
    Ok(mask)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (RFC 3339; `t`, `z` and a space for `T` too).
fn rfc3339_ns(t: &str, edge: Edge) -> Result<i64, String> {
    const FORM: &str = "RFC 3339 is YYYY-MM-DDTHH:MM:SS[.fraction] then Z or an offset ±HH:MM";
    let b = t.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let s = t.get(range).ok_or(FORM)?;
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(FORM.to_owned());
        }
        s.parse::<i64>().map_err(|_| FORM.to_owned())
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(FORM.to_owned());
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(format!("{year:04}-{month:02}-{day:02} is not a date"));
    }
    if hour > 23 || minute > 59 {
        return Err(format!("{hour:02}:{minute:02} is not a time of day"));
    }
    if second > 59 {
        return Err(
            "second 60 (a leap second) has no nanosecond of its own in ROS Time or Unix time".to_owned()
        );
    }
    let mut rest = &t[19..];
    let mut fraction = "";
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.bytes().position(|c| !c.is_ascii_digit()).unwrap_or(r.len());
        if end == 0 {
            return Err(FORM.to_owned());
        }
        fraction = &r[..end];
        rest = &r[end..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ => {
            let ob = rest.as_bytes();
            if ob.len() != 6 || !matches!(ob[0], b'+' | b'-') || ob[3] != b':' {
                return Err(format!("{FORM} (the offset is missing or malformed: {rest:?})"));
            }
            let hh = num(t.len() - 5..t.len() - 3)?;
            let mm = num(t.len() - 2..t.len())?;
            if hh > 23 || mm > 59 {
                return Err(format!("offset {rest} is not an offset"));
            }
            let sign = if ob[0] == b'-' { -1 } else { 1 };
            sign * (hh * 3_600 + mm * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_s;
    let sub = match decimal(&format!("0.{fraction}"), 9, edge) {
        Some(Ok(ns)) => ns,
        _ => return Err(FORM.to_owned()),
    };
    seconds
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(sub))
        .ok_or_else(|| "outside the nanoseconds an i64 holds (years 1677 to 2262)".to_owned())
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm, the inverse of
/// [`crate::time::rfc3339`]'s).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_in_metres_are_exact_and_round_outward() {
        assert_eq!(length_mm("1.5m", Edge::Low), Ok(1500));
        assert_eq!(length_mm("0.1m", Edge::High), Ok(100));
        assert_eq!(length_mm("-1m", Edge::Low), Ok(-1000));
        assert_eq!(length_mm("12cm", Edge::Low), Ok(120));
        assert_eq!(length_mm("250mm", Edge::Low), Ok(250));
        assert_eq!(length_mm("250", Edge::Low), Ok(250));
        assert_eq!(length_mm(" 3 m ", Edge::Low), Ok(3000));
        // Below a millimetre: the low edge down, the high edge up, both signs.
        assert_eq!(length_mm("0.0004m", Edge::Low), Ok(0));
        assert_eq!(length_mm("0.0004m", Edge::High), Ok(1));
        assert_eq!(length_mm("-0.0004m", Edge::Low), Ok(-1));
        assert_eq!(length_mm("-0.0004m", Edge::High), Ok(0));
        assert_eq!(length_mm("1.5mm", Edge::High), Ok(2));
        assert_eq!(length_mm("1.000m", Edge::High), Ok(1000));
    }

    #[test]
    fn a_length_that_cannot_be_read_says_why() {
        let e = length_mm("1.5", Edge::Low).unwrap_err().to_string();
        assert!(e.contains("metres (1.5m)"), "{e}");
        assert!(length_mm("1e3m", Edge::Low).is_err());
        assert!(length_mm("m", Edge::Low).is_err());
        assert!(length_mm("--1m", Edge::Low).is_err());
        assert!(length_mm("1.m", Edge::Low).is_ok());
        assert!(length_mm(".m", Edge::Low).is_err());
        assert!(length_mm("99999999999999999m", Edge::Low).unwrap_err().to_string().contains("too large"));
        assert!(length_mm(&"9".repeat(100), Edge::Low).is_err());
    }

    #[test]
    fn floats_in_metres_are_read_as_they_print() {
        assert_eq!(metres_mm(0.1, Edge::High), Ok(100));
        assert_eq!(metres_mm(0.1, Edge::Low), Ok(100));
        assert_eq!(metres_mm(-2.5, Edge::Low), Ok(-2500));
        assert_eq!(metres_mm(1e-5, Edge::High), Ok(1));
        assert!(metres_mm(f64::NAN, Edge::Low).is_err());
        assert!(metres_mm(1e300, Edge::Low).is_err());
    }

    #[test]
    fn boxes_in_any_unit() {
        let b = parse_box("0m,0m,-1m,10m,8m,3m").unwrap();
        assert_eq!(b, BoxMm { min_mm: [0, 0, -1000], max_mm: [10000, 8000, 3000] });
        assert_eq!(parse_box("0,0,-1000,5000,5000,3000").unwrap().max_mm, [5000, 5000, 3000]);
        assert_eq!(
            parse_box("0.0005m,0,0,0.0005m,1,1").unwrap(),
            BoxMm { min_mm: [0, 0, 0], max_mm: [1, 1, 1] }
        );
        let e = parse_box("0,0,0,1,1").unwrap_err().to_string();
        assert!(e.contains("six lengths"), "{e}");
        let e = parse_box("5m,0,0,1m,1,1").unwrap_err().to_string();
        assert!(e.contains("X0 (5000 mm) is above X1 (1000 mm)"), "{e}");
        let e = parse_box("0,0,0,1.5,1,1").unwrap_err().to_string();
        assert!(e.contains("X1"), "{e}");
        assert_eq!(box_from_metres([0.0, 0.0, -1.0, 5.0, 5.0, 3.0]).unwrap().min_mm, [0, 0, -1000]);
    }

    #[test]
    fn times_in_every_form_agree() {
        let t = 1_767_225_600_000_000_000;
        assert_eq!(time_ns("2026-01-01T00:00:00Z", Edge::Low), Ok(t));
        assert_eq!(time_ns("2026-01-01t00:00:00z", Edge::Low), Ok(t));
        assert_eq!(time_ns("2026-01-01 01:00:00+01:00", Edge::Low), Ok(t));
        assert_eq!(time_ns("2025-12-31T19:00:00-05:00", Edge::Low), Ok(t));
        assert_eq!(time_ns("1767225600s", Edge::Low), Ok(t));
        assert_eq!(time_ns("1767225600.5s", Edge::Low), Ok(t + 500_000_000));
        assert_eq!(time_ns("1767225600000ms", Edge::Low), Ok(t));
        assert_eq!(time_ns("1767225600000000000", Edge::Low), Ok(t));
        assert_eq!(time_ns("1767225600000000000ns", Edge::Low), Ok(t));
        assert_eq!(time_ns("2026-01-01T00:00:00.123456789Z", Edge::Low), Ok(t + 123_456_789));
        // Below a nanosecond: the start down, the end up.
        assert_eq!(time_ns("2026-01-01T00:00:00.0000000001Z", Edge::Low), Ok(t));
        assert_eq!(time_ns("2026-01-01T00:00:00.0000000001Z", Edge::High), Ok(t + 1));
        assert_eq!(time_ns("-0.5s", Edge::Low), Ok(-500_000_000));
        assert_eq!(ros_time_ns(1_767_225_600, 5), Ok(t + 5));
        assert_eq!(seconds_ns(1767225600.5, Edge::Low), Ok(t + 500_000_000));
        assert_eq!(time_ns("1970-01-01T00:00:00Z", Edge::Low), Ok(0));
        assert_eq!(time_ns("2000-02-29T00:00:00.123Z", Edge::Low), Ok(951_782_400_123_000_000));
        // What the formatter prints reads back.
        for ns in [0, t, 951_782_400_123_000_000, -1_000_000_000] {
            assert_eq!(time_ns(&crate::time::rfc3339(ns), Edge::Low), Ok(ns));
        }
    }

    #[test]
    fn a_time_that_cannot_be_read_says_why() {
        for bad in [
            "1767225600.5",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:60Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+1:00",
            "yesterday",
            "",
            "1e9s",
            "2026-01-01T00:00:00Zjunk",
            "9999999999999s",
        ] {
            let e = time_ns(bad, Edge::Low);
            assert!(e.is_err(), "{bad:?} read as {e:?}");
        }
        let e = time_ns("1767225600.5", Edge::Low).unwrap_err().to_string();
        assert!(e.contains("1767225600.5s"), "{e}");
        assert!(ros_time_ns(1, 1_000_000_000).is_err());
        assert!(ros_time_ns(i64::MAX, 0).is_err());
    }

    #[test]
    fn durations_and_frames() {
        assert_eq!(duration_ns("10min"), Ok(600_000_000_000));
        assert_eq!(duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(duration_ns("2h"), Ok(7_200_000_000_000));
        assert_eq!(duration_ns("1d"), Ok(86_400_000_000_000));
        assert_eq!(duration_ns("500ms"), Ok(500_000_000));
        assert_eq!(duration_ns("7ns"), Ok(7));
        assert!(duration_ns("10").is_err());
        assert!(duration_ns("-1s").is_err());
        assert!(duration_ns("1000000000d").is_err());
        assert_eq!(frame_name("/map"), "map");
        assert_eq!(frame_name("map"), "map");
        assert_eq!(frame_name("base_link"), "base_link");
        assert_eq!(show_metres(1500), "1.5");
        assert_eq!(show_metres(-2), "-0.002");
        assert_eq!(show_metres(12000), "12");
        assert_eq!(show_box(&parse_box("0m,0m,-1m,5m,5m,3m").unwrap()), "[0, 0, -1]..[5, 5, 3] m");
    }
}
