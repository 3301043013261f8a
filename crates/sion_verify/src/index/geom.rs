//! Boxes in space and time, and the one rule for when a box answers a query
//! (docs/INDEX.md, "Queries").

use crate::atom::{AtomParts, BoxMm};

/// A box in space (millimetres, corners included) and time (`[from_ns, to_ns)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpaceTime {
    /// Minimum corner, x, y, z in mm.
    pub min_mm: [i64; 3],
    /// Maximum corner, x, y, z in mm.
    pub max_mm: [i64; 3],
    /// Start, ns, included.
    pub from_ns: i64,
    /// End, ns, excluded.
    pub to_ns: i64,
}

impl SpaceTime {
    /// All zeros: a placeholder, and the reference a proof codes a walk's root box against.
    pub const ZERO: Self = Self { min_mm: [0; 3], max_mm: [0; 3], from_ns: 0, to_ns: 0 };

    /// An atom's box and valid interval.
    pub fn of_atom(p: &AtomParts) -> Self {
        Self {
            min_mm: p.bounds.min_mm,
            max_mm: p.bounds.max_mm,
            from_ns: p.valid.from_ns,
            to_ns: p.valid.to_ns,
        }
    }

    /// The smallest box holding both.
    pub fn union(&self, other: &Self) -> Self {
        let mut u = *self;
        for a in 0..3 {
            u.min_mm[a] = u.min_mm[a].min(other.min_mm[a]);
            u.max_mm[a] = u.max_mm[a].max(other.max_mm[a]);
        }
        u.from_ns = u.from_ns.min(other.from_ns);
        u.to_ns = u.to_ns.max(other.to_ns);
        u
    }

    /// The 64 bytes hashed for this box: min x, y, z, max x, y, z, from, to, each i64 LE.
    pub fn encode(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        let fields = [
            self.min_mm[0],
            self.min_mm[1],
            self.min_mm[2],
            self.max_mm[0],
            self.max_mm[1],
            self.max_mm[2],
            self.from_ns,
            self.to_ns,
        ];
        for (chunk, v) in out.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Centre of the box on a spatial axis, rounded towards the minimum.
    pub fn center(&self, axis: usize) -> i64 {
        self.min_mm[axis] + (self.max_mm[axis] - self.min_mm[axis]) / 2
    }

    /// Whether the box, or anything inside it, can answer the query.
    pub fn meets(&self, q: &Query) -> bool {
        (0..3).all(|a| self.min_mm[a] <= q.bounds.max_mm[a] && self.max_mm[a] >= q.bounds.min_mm[a])
            && self.from_ns < q.to_ns
            && self.to_ns > q.from_ns
    }
}

/// Why a query is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The box's minimum is above its maximum on an axis.
    #[error("box: min[{axis}] = {min} mm is above max[{axis}] = {max} mm")]
    Corners {
        /// 0, 1 or 2 for x, y or z.
        axis: usize,
        /// The minimum given, mm.
        min: i64,
        /// The maximum given, mm.
        max: i64,
    },
    /// The interval ends before it starts.
    #[error("interval: to = {to} ns is before from = {from} ns")]
    Interval {
        /// The start given, ns.
        from: i64,
        /// The end given, ns.
        to: i64,
    },
    /// The instant asked (ns) is `i64::MAX`, which has no `[t, t + 1)`.
    #[error("interval: the instant {0} ns is the last one and has no [t, t + 1)")]
    LastInstant(i64),
    /// The frame is not named as an atom's frame is (why).
    #[error("frame: {0}")]
    Frame(String),
    /// The kinds asked about are none, or not kinds (a bit past code 16).
    #[error("kinds: {0:#x} names no kind of atom (bit k stands for kind code k, 0 to 16)")]
    Kinds(u32),
    /// The subject asked about is not one an atom can have (why), or is empty.
    #[error("subject: {0}")]
    Subject(String),
}

/// "What was seen in this box, during this interval": a frame (named as an atom's frame is), a
/// box (corners included, `min <= max` on each axis, any i64) and a half-open interval
/// `[from, to)`. An atom answers when its box meets the query box (touching
/// counts) and its valid time overlaps the interval; `from == to` asks about the instant
/// `from`, that is `[from, from + 1)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Query {
    /// The frame asked about.
    pub frame: String,
    /// The box, mm, corners included.
    pub bounds: BoxMm,
    /// Start of the interval, ns, included.
    pub from_ns: i64,
    /// Always above `from_ns` once built: an instant is stored as `from + 1`.
    pub to_ns: i64,
    /// The kinds asked about: bit `k` for kind code `k` (docs/ATOM.md); [`ALL_KINDS`] when the
    /// question names none. Never empty.
    pub kinds: u32,
    /// The one subject asked about (1 to 256 bytes of UTF-8, no control character, as an
    /// atom's); `None` when the question is about every subject (and atoms with none).
    pub subject: Option<String>,
}

/// Every kind of atom (codes 0 to 16, docs/ATOM.md): a question that names no kind.
pub const ALL_KINDS: u32 = (1 << 17) - 1;

impl Query {
    /// A well-formed query (docs/INDEX.md, "Queries"); `from_ns == to_ns` asks about that
    /// instant and is stored as `[from_ns, from_ns + 1)`.
    pub fn new(frame: &str, bounds: BoxMm, from_ns: i64, to_ns: i64) -> Result<Self, QueryError> {
        crate::atom::check_frame(frame).map_err(|e| {
            QueryError::Frame(match e {
                crate::atom::AtomError::Invalid { problem, .. } => problem,
                other => other.to_string(),
            })
        })?;
        for axis in 0..3 {
            if bounds.min_mm[axis] > bounds.max_mm[axis] {
                return Err(QueryError::Corners { axis, min: bounds.min_mm[axis], max: bounds.max_mm[axis] });
            }
        }
        if to_ns < from_ns {
            return Err(QueryError::Interval { from: from_ns, to: to_ns });
        }
        let to_ns = if to_ns == from_ns {
            from_ns.checked_add(1).ok_or(QueryError::LastInstant(from_ns))?
        } else {
            to_ns
        };
        Ok(Self { frame: frame.to_owned(), bounds, from_ns, to_ns, kinds: ALL_KINDS, subject: None })
    }

    /// The same question about atoms of these kinds only (bit `k` for kind code `k`); an empty
    /// set, or a bit past the last kind, is an error.
    pub fn with_kinds(self, kinds: u32) -> Result<Self, QueryError> {
        if kinds == 0 || kinds & !ALL_KINDS != 0 {
            return Err(QueryError::Kinds(kinds));
        }
        Ok(Self { kinds, ..self })
    }

    /// The same question about the atoms of one subject only; an empty subject, or one no atom
    /// could have, is an error.
    pub fn with_subject(self, subject: &str) -> Result<Self, QueryError> {
        if subject.is_empty() {
            return Err(QueryError::Subject(
                "empty: atoms without a subject are asked about by asking about every subject".into(),
            ));
        }
        crate::atom::check_subject(subject).map_err(|e| {
            QueryError::Subject(match e {
                crate::atom::AtomError::Invalid { problem, .. } => problem,
                other => other.to_string(),
            })
        })?;
        Ok(Self { subject: Some(subject.to_owned()), ..self })
    }

    /// Whether the question names kinds (not every kind).
    pub fn filters_kinds(&self) -> bool {
        self.kinds != ALL_KINDS
    }

    /// Whether atoms of kind code `kind` are asked about.
    pub fn asks_kind(&self, kind: u8) -> bool {
        1u32.checked_shl(u32::from(kind)).is_some_and(|bit| self.kinds & bit != 0)
    }

    /// Whether an atom answers the query.
    pub fn matches(&self, atom: &AtomParts) -> bool {
        atom.frame == self.frame
            && self.asks_kind(atom.kind.code())
            && self.subject.as_ref().is_none_or(|s| *s == atom.subject)
            && SpaceTime::of_atom(atom).meets(self)
    }
}

/// What a memory holds in one frame: the union of its atoms' boxes and valid times (the
/// summaries an index root commits to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameExtent {
    /// The frame's name.
    pub frame: String,
    /// The union of its atoms' boxes (mm) and valid times (ns).
    pub extent: SpaceTime,
}

/// Why a well-formed question cannot match anything a memory holds. The answer and its proof
/// are given all the same (an empty answer is proved too); this is the warning shown beside
/// them, naming what the memory does hold, so a mistaken frame, unit or epoch is seen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mismatch {
    /// The memory holds no atom in the frame asked about.
    UnknownFrame {
        /// The frame asked about.
        frame: String,
        /// The frames the memory holds.
        held: Vec<String>,
    },
    /// The interval asked about misses every valid time of the frame's atoms.
    OutsideTime {
        /// The frame.
        frame: String,
        /// The frame's atoms' valid times, `[from, to)` ns.
        held: (i64, i64),
        /// The interval asked about, `[from, to)` ns.
        asked: (i64, i64),
    },
    /// The box asked about misses every atom's box in the frame.
    OutsideSpace {
        /// The frame.
        frame: String,
        /// The union of the frame's atoms' boxes.
        held: BoxMm,
        /// The box asked about.
        asked: BoxMm,
    },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::time::rfc3339;
        use crate::units::show_box;
        let span = |(from, to): (i64, i64)| format!("{} .. {}", rfc3339(from), rfc3339(to));
        match self {
            Mismatch::UnknownFrame { frame, held } if held.is_empty() => {
                write!(f, "the memory holds no frame {frame:?}: it holds no atoms yet")
            }
            Mismatch::UnknownFrame { frame, held } => {
                let names: Vec<String> = held.iter().take(20).map(|h| format!("{h:?}")).collect();
                let more =
                    if held.len() > 20 { format!(" and {} more", held.len() - 20) } else { String::new() };
                write!(f, "the memory holds no frame {frame:?}; it holds {}{more}", names.join(", "))
            }
            Mismatch::OutsideTime { frame, held, asked } => write!(
                f,
                "the interval {} misses every atom in frame {frame:?}, whose valid times span {} \
                 (a time in seconds given as bare nanoseconds lands in 1970: write 1767225600s or RFC 3339)",
                span(*asked),
                span(*held)
            ),
            Mismatch::OutsideSpace { frame, held, asked } => write!(
                f,
                "the box {} misses every atom in frame {frame:?}, which all lie in {} \
                 (bare integers are millimetres: write metres as 10m)",
                show_box(asked),
                show_box(held)
            ),
        }
    }
}

/// What makes `query` unable to match anything in a memory holding `held` (sorted by frame or
/// not): an unknown frame, or an interval or a box that misses the frame's extent.
pub fn mismatches(query: &Query, held: &[FrameExtent]) -> Vec<Mismatch> {
    let Some(frame) = held.iter().find(|h| h.frame == query.frame) else {
        return vec![Mismatch::UnknownFrame {
            frame: query.frame.clone(),
            held: held.iter().map(|h| h.frame.clone()).collect(),
        }];
    };
    let e = &frame.extent;
    let mut out = Vec::new();
    if !(e.from_ns < query.to_ns && e.to_ns > query.from_ns) {
        out.push(Mismatch::OutsideTime {
            frame: query.frame.clone(),
            held: (e.from_ns, e.to_ns),
            asked: (query.from_ns, query.to_ns),
        });
    }
    if !(0..3).all(|a| e.min_mm[a] <= query.bounds.max_mm[a] && e.max_mm[a] >= query.bounds.min_mm[a]) {
        out.push(Mismatch::OutsideSpace {
            frame: query.frame.clone(),
            held: BoxMm { min_mm: e.min_mm, max_mm: e.max_mm },
            asked: query.bounds,
        });
    }
    out
}
