//! Latest and nearest proofs (docs/PROOFS.md, kinds 7 and 8): "the atom last seen in this box
//! during this interval" and "the k atoms nearest to this point during this interval", each
//! with the walk of the frame's trees that shows nothing later, or nothing nearer, exists.
//!
//! Both are range walks (kind 3's encoding) under another rule for what may be passed over:
//! a subtree that cannot hold an answer to the base question, or whose best possible atom ranks
//! below the answer's — for the latest, a subtree whose valid time ends before the answer's; for
//! the nearest, one whose box is farther from the point than the k-th answer.

use super::VerifyError;
use super::range::{
    Answer, Rule, Trees, below_head, check_walks, put_index_part, put_query, read_index_part, read_query,
};
use crate::atom::{Atom, BoxMm};
use crate::index::RangeAnswer;
use crate::index::Version;
use crate::index::geom::{Query, SpaceTime};
use crate::index::tree::{Entry, Summary};
use crate::merkle::Digest;
use crate::wire::{Put as _, Reader, WireError};

/// The most atoms a nearest question asks for.
pub const MAX_NEAREST: u32 = 10_000;
/// A nearest question's point lies within this many millimetres of the origin on each axis,
/// as atoms do (docs/ATOM.md), so squared distances fit 128 bits.
pub const MAX_POINT_MM: i64 = 1_000_000_000_000_000;

/// "Which atom of this frame, box and interval was seen last?": the atom whose valid time
/// ends latest (`to`), the later log position on a tie; none if nothing answers the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestProof {
    /// The question: frame, box and interval, as a range query.
    pub query: Query,
    /// The answer: its position and bytes, or none.
    pub atom: Option<(u64, Vec<u8>)>,
    /// The walks that show nothing later answers.
    pub answer: RangeAnswer,
}

/// "Which k atoms of this frame, valid during this interval, are nearest to this point?"
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NearQuery {
    /// The frame (named as an atom's frame is).
    pub frame: String,
    /// The point, mm, each coordinate within ±10^15.
    pub point_mm: [i64; 3],
    /// Start of the interval, ns, included.
    pub from_ns: i64,
    /// End, excluded; above `from_ns` (an instant `t` is asked as `[t, t + 1)`).
    pub to_ns: i64,
    /// How many atoms, 1 to [`MAX_NEAREST`].
    pub k: u32,
}

impl NearQuery {
    /// A nearest question, its interval normalised as a range query's (`from = to` asks the
    /// instant `from`).
    pub fn new(frame: &str, point_mm: [i64; 3], from_ns: i64, to_ns: i64, k: u32) -> Result<Self, String> {
        let q = Query::new(frame, BoxMm { min_mm: point_mm, max_mm: point_mm }, from_ns, to_ns)
            .map_err(|e| e.to_string())?;
        if let Some(a) = (0..3).find(|&a| point_mm[a].unsigned_abs() > MAX_POINT_MM as u64) {
            return Err(format!("point[{a}] = {} mm is beyond ±10^15 mm, where no atom can be", point_mm[a]));
        }
        if k == 0 || k > MAX_NEAREST {
            return Err(format!("k = {k}: ask for 1 to {MAX_NEAREST} atoms"));
        }
        Ok(Self { frame: q.frame, point_mm, from_ns: q.from_ns, to_ns: q.to_ns, k })
    }

    /// Whether a box's valid time overlaps the interval.
    pub fn during(&self, b: &SpaceTime) -> bool {
        b.from_ns < self.to_ns && b.to_ns > self.from_ns
    }

    /// The square of the distance from the point to a box, mm² (0 when the box holds it).
    pub fn distance2(&self, b: &SpaceTime) -> u128 {
        distance2(b, &self.point_mm)
    }
}

/// The square of the distance from a point to a box, mm²: on each axis the gap between the
/// point and the box (0 within it), squared, summed.
pub fn distance2(b: &SpaceTime, p: &[i64; 3]) -> u128 {
    (0..3)
        .map(|a| {
            let (lo, hi, v) = (i128::from(b.min_mm[a]), i128::from(b.max_mm[a]), i128::from(p[a]));
            let gap = if v < lo {
                lo - v
            } else if v > hi {
                v - hi
            } else {
                0
            };
            (gap as u128).saturating_mul(gap as u128)
        })
        .fold(0u128, u128::saturating_add)
}

/// How a latest answer ranks: the end of its valid time, then its position.
fn latest_rank(b: &SpaceTime, position: u64) -> (i64, u64) {
    (b.to_ns, position)
}

/// A latest proof's rule: pass over what misses the query or ends before the answer.
struct LatestRule<'a> {
    q: &'a Query,
    best: (i64, u64),
}

impl Rule for LatestRule<'_> {
    fn pass(&self, s: &Summary) -> Result<(), String> {
        if s.bbox.meets(self.q) && s.tally.kinds & self.q.kinds != 0 && s.bbox.to_ns >= self.best.0 {
            Err("a subtree passed over meets the query and may end as late as the answer".into())
        } else {
            Ok(())
        }
    }
    fn leave(&self, e: &Entry) -> Result<(), String> {
        if e.bbox.meets(self.q) && self.q.asks_kind(e.kind) && latest_rank(&e.bbox, e.position) > self.best {
            Err(format!("position {} answers the query and was seen later than the answer", e.position))
        } else {
            Ok(())
        }
    }
}

/// A nearest proof's rule: pass over what is not valid during the interval or, when the
/// answer holds k atoms, lies farther than the k-th.
struct NearestRule<'a> {
    q: &'a NearQuery,
    /// The k-th answer's (distance², position), when there are k.
    worst: Option<(u128, u64)>,
}

impl Rule for NearestRule<'_> {
    fn pass(&self, s: &Summary) -> Result<(), String> {
        let b = &s.bbox;
        let could = self.q.during(b) && self.worst.is_none_or(|(d, _)| self.q.distance2(b) <= d);
        if could {
            Err("a subtree passed over is valid during the interval and no farther than the answer".into())
        } else {
            Ok(())
        }
    }
    fn leave(&self, e: &Entry) -> Result<(), String> {
        let nearer =
            self.q.during(&e.bbox) && self.worst.is_none_or(|w| (self.q.distance2(&e.bbox), e.position) < w);
        if nearer {
            Err(format!("position {} is valid during the interval and nearer than an answer", e.position))
        } else {
            Ok(())
        }
    }
}

fn decode(bytes: &[u8]) -> Result<Atom, VerifyError> {
    Atom::decode(bytes).map_err(|e| VerifyError::Atom(e.to_string()))
}

impl LatestProof {
    /// Append the body (docs/PROOFS.md, kind 7).
    pub fn put(&self, out: &mut Vec<u8>) {
        put_query(out, &self.query, self.answer.version);
        match &self.atom {
            None => out.put_u8(0),
            Some((position, bytes)) => {
                out.put_u8(1);
                out.put_varint(*position);
                out.put_bytes32(bytes);
            }
        }
        put_index_part(out, &self.answer);
    }

    /// Read a body as [`LatestProof::put`] writes it.
    pub fn read(r: &mut Reader<'_>, version: Version) -> Result<Self, WireError> {
        let query = read_query(r, version)?;
        let atom = if r.flag("answer")? {
            Some((r.varint("position")?, r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec()))
        } else {
            None
        };
        let positions = atom.iter().map(|(p, _)| *p).collect();
        let answer = read_index_part(r, positions, version, query.subject.is_some())?;
        Ok(Self { query, atom, answer })
    }

    /// Check the proof against an index root and log size; returns the answer, if any.
    pub fn verify(&self, index_root: &Digest, log_size: u64) -> Result<Option<(u64, Atom)>, VerifyError> {
        let q = &self.query;
        let Some((position, bytes)) = &self.atom else {
            // Nothing answers: the walk is a range proof's with an empty answer.
            check_walks(q.into(), q, Answer::new(Vec::new()), &self.answer, index_root, log_size, None)?;
            return Ok(None);
        };
        let atom = decode(bytes)?;
        below_head(*position, log_size)?;
        if !q.matches(atom.parts()) {
            return Err(VerifyError::Range(format!(
                "the atom at position {position} does not answer the query"
            )));
        }
        let rule = LatestRule { q, best: latest_rank(&SpaceTime::of_atom(atom.parts()), *position) };
        let mut got = check_walks(
            q.into(),
            &rule,
            Answer::new(vec![(*position, atom)]),
            &self.answer,
            index_root,
            log_size,
            None,
        )?;
        Ok(got.pop())
    }
}

/// A nearest answer in rank order, each with its squared distance (mm²).
pub type Nearest = Vec<(u64, Atom, u128)>;

/// "The k atoms nearest to a point": the question, the answer in rank order, the walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NearestProof {
    /// The question.
    pub query: NearQuery,
    /// The answer: (position, atom bytes), nearest first, ties by position.
    pub atoms: Vec<(u64, Vec<u8>)>,
    /// The walks that show nothing nearer exists.
    pub answer: RangeAnswer,
}

impl NearestProof {
    /// Append the body (docs/PROOFS.md, kind 8).
    pub fn put(&self, out: &mut Vec<u8>) {
        let q = &self.query;
        out.put_str8(&q.frame);
        for v in q.point_mm {
            out.put_zigzag(v);
        }
        out.put_zigzag(q.from_ns);
        out.put_zigzag(q.to_ns.wrapping_sub(q.from_ns));
        out.put_varint(u64::from(q.k));
        out.put_varint(self.atoms.len() as u64);
        for (position, bytes) in &self.atoms {
            out.put_varint(*position);
            out.put_bytes32(bytes);
        }
        put_index_part(out, &self.answer);
    }

    /// Read a body as [`NearestProof::put`] writes it; refuses an ill-formed question and an
    /// answer of more than `k` atoms.
    pub fn read(r: &mut Reader<'_>, version: Version) -> Result<Self, WireError> {
        let frame = r.str8("frame")?;
        let mut point = [0i64; 3];
        for v in point.iter_mut() {
            *v = r.zigzag("point")?;
        }
        let from = r.zigzag("from")?;
        let to = from.wrapping_add(r.zigzag("to")?);
        if to <= from {
            return Err(WireError::Invalid {
                field: "to",
                problem: "a stored interval is never empty".into(),
            });
        }
        let k = r.varint("k")?;
        let k = u32::try_from(k).map_err(|_| WireError::Invalid { field: "k", problem: format!("{k}") })?;
        let query = NearQuery::new(&frame, point, from, to, k)
            .map_err(|problem| WireError::Invalid { field: "query", problem })?;
        let n = r.varint("atoms")?;
        if n > u64::from(k) || n > r.remaining() as u64 {
            return Err(WireError::Invalid { field: "atoms", problem: format!("{n} atoms for k = {k}") });
        }
        let mut atoms = Vec::with_capacity(n as usize);
        for _ in 0..n {
            atoms.push((
                r.varint("position")?,
                r.bytes32(crate::atom::limits::MAX_ATOM_BYTES, "atom")?.to_vec(),
            ));
        }
        let mut positions: Vec<u64> = atoms.iter().map(|(p, _)| *p).collect();
        positions.sort_unstable();
        let answer = read_index_part(r, positions, version, false)?;
        Ok(Self { query, atoms, answer })
    }

    /// Check the proof against an index root and log size; returns the answer in rank order.
    pub fn verify(&self, index_root: &Digest, log_size: u64) -> Result<Nearest, VerifyError> {
        let q = &self.query;
        // (position, atom, d²) in the file's order, which must be rank order.
        let mut ranked: Vec<(u64, Atom, u128)> = Vec::with_capacity(self.atoms.len());
        for (position, bytes) in &self.atoms {
            let atom = decode(bytes)?;
            below_head(*position, log_size)?;
            let p = atom.parts();
            let b = SpaceTime::of_atom(p);
            if p.frame != q.frame || !q.during(&b) {
                return Err(VerifyError::Range(format!(
                    "the atom at position {position} is not in frame {:?} during the interval",
                    q.frame
                )));
            }
            let d = q.distance2(&b);
            if let Some((last, _, ld)) = ranked.last()
                && (*ld, *last) >= (d, *position)
            {
                return Err(VerifyError::Range(format!(
                    "the answer is not nearest first (ties by position) at position {position}"
                )));
            }
            ranked.push((*position, atom, d));
        }
        let worst = (ranked.len() == q.k as usize).then(|| ranked.last().map(|(p, _, d)| (*d, *p))).flatten();
        let rule = NearestRule { q, worst };
        let order: Vec<(u64, u128)> = ranked.iter().map(|(p, _, d)| (*p, *d)).collect();
        let answer = Answer::new(ranked.into_iter().map(|(p, a, _)| (p, a)).collect());
        // The walks give the atoms back by position; the answer is told in rank order.
        let mut by_position: Vec<Option<Atom>> = check_walks(
            Trees { frame: &q.frame, subject: None },
            &rule,
            answer,
            &self.answer,
            index_root,
            log_size,
            None,
        )?
        .into_iter()
        .map(|(_, a)| Some(a))
        .collect();
        let mut positions: Vec<u64> = order.iter().map(|(p, _)| *p).collect();
        positions.sort_unstable();
        Ok(order
            .into_iter()
            .filter_map(|(p, d)| {
                let i = positions.binary_search(&p).ok()?;
                by_position[i].take().map(|a| (p, a, d))
            })
            .collect())
    }
}
