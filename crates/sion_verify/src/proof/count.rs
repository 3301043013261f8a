//! Count proofs: "how many atoms of these kinds were in this box during this interval, for how
//! long in all, first and last when" (docs/PROOFS.md, kind 9). The walk is a range walk that
//! also takes subtrees wholly inside the question by their tallies, and shows every entry of
//! the groups it opens: the answer is read off the walk, so its size grows with what lies
//! across the question's edges, not with the count.

use super::VerifyError;
use super::range::{Answer, Rule, check_walks, put_index_part, put_query, read_index_part, read_query};
use crate::index::geom::{Query, SpaceTime};
use crate::index::tree::{Entry, GroupEntry, Step, Summary};
use crate::index::{RangeAnswer, Version};
use crate::merkle::Digest;
use crate::wire::{Put as _, Reader, WireError};

/// What a count question is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counted {
    /// How many atoms answer the question.
    pub count: u64,
    /// The sum, over them, of the part of their valid interval within the question's, ns.
    pub duration_ns: u128,
    /// The earliest instant within the question's interval that one of them was valid, and the
    /// end of the latest (excluded); `None` when nothing answers.
    pub span: Option<(i64, i64)>,
}

impl Counted {
    fn add(&mut self, count: u64, duration_ns: u128, from: i64, to: i64) {
        self.count = self.count.saturating_add(count);
        self.duration_ns = self.duration_ns.saturating_add(duration_ns);
        self.span = Some(match self.span {
            None => (from, to),
            Some((f, t)) => (f.min(from), t.max(to)),
        });
    }
}

/// Whether a subtree with this box and these kinds lies wholly inside the question: its box
/// inside the query's box, its time span inside the interval, its kinds among the question's.
pub fn inside(q: &Query, b: &SpaceTime, kinds: u32) -> bool {
    (0..3).all(|a| q.bounds.min_mm[a] <= b.min_mm[a] && b.max_mm[a] <= q.bounds.max_mm[a])
        && q.from_ns <= b.from_ns
        && b.to_ns <= q.to_ns
        && kinds & !q.kinds == 0
}

/// The answer a walk shows: the tallies of the subtrees it takes whole, and each entry of the
/// groups it opens that answers (its interval cut to the question's). Nothing is checked here.
pub fn count_of(q: &Query, walks: &[&[Step]]) -> Counted {
    let mut c = Counted::default();
    for step in walks.iter().flat_map(|w| w.iter()) {
        match step {
            Step::Whole(s) => c.add(s.tally.count, s.tally.duration_ns, s.bbox.from_ns, s.bbox.to_ns),
            Step::Group(g) => {
                for e in g {
                    if let GroupEntry::Miss(e) = e
                        && answers(q, e)
                    {
                        let (from, to) = (e.bbox.from_ns.max(q.from_ns), e.bbox.to_ns.min(q.to_ns));
                        c.add(1, (i128::from(to) - i128::from(from)).max(0) as u128, from, to);
                    }
                }
            }
            _ => {}
        }
    }
    c
}

fn answers(q: &Query, e: &Entry) -> bool {
    e.bbox.meets(q) && q.asks_kind(e.kind)
}

/// A count proof's rule: pass over what cannot answer, take whole only what lies inside; every
/// entry of an opened group is shown, and counted if it answers.
struct CountRule<'a> {
    q: &'a Query,
}

impl Rule for CountRule<'_> {
    fn pass(&self, s: &Summary) -> Result<(), String> {
        self.q.pass(s)
    }
    fn leave(&self, _: &Entry) -> Result<(), String> {
        Ok(())
    }
    fn whole(&self, s: &Summary) -> Result<(), String> {
        if inside(self.q, &s.bbox, s.tally.kinds) {
            Ok(())
        } else {
            Err("a subtree taken whole does not lie inside the question".into())
        }
    }
}

/// "How many, for how long": the question, the answer, and the walks it is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountProof {
    /// The question.
    pub query: Query,
    /// The answer the file states.
    pub counted: Counted,
    /// The walks the answer is read from.
    pub answer: RangeAnswer,
}

impl CountProof {
    /// Append the body (docs/PROOFS.md, kind 9).
    pub fn put(&self, out: &mut Vec<u8>) {
        put_query(out, &self.query, self.answer.version);
        out.put_varint(self.counted.count);
        out.put_varint128(self.counted.duration_ns);
        if let Some((first, last)) = self.counted.span {
            out.put_zigzag(first);
            out.put_zigzag(last);
        }
        put_index_part(out, &self.answer);
    }

    /// Read a body as [`CountProof::put`] writes it.
    pub fn read(r: &mut Reader<'_>, version: Version) -> Result<Self, WireError> {
        let query = read_query(r, version)?;
        let count = r.varint("count")?;
        let duration_ns = r.varint128("duration")?;
        let span = if count > 0 { Some((r.zigzag("first")?, r.zigzag("last")?)) } else { None };
        let answer = read_index_part(r, Vec::new(), version, query.subject.is_some())?;
        Ok(Self { query, counted: Counted { count, duration_ns, span }, answer })
    }

    /// Check the proof against an index root and log size; returns the answer.
    pub fn verify(&self, index_root: &Digest, log_size: u64) -> Result<Counted, VerifyError> {
        let q = &self.query;
        check_walks(
            q.into(),
            &CountRule { q },
            Answer::new(Vec::new()),
            &self.answer,
            index_root,
            log_size,
            None,
        )?;
        let walks: Vec<&[Step]> =
            [&self.answer.short, &self.answer.long].into_iter().flatten().map(Vec::as_slice).collect();
        let counted = count_of(q, &walks);
        if counted != self.counted {
            return Err(VerifyError::Range(format!(
                "the file says {} atoms for {} ns in all; its walk shows {} for {} ns",
                self.counted.count, self.counted.duration_ns, counted.count, counted.duration_ns
            )));
        }
        Ok(counted)
    }
}
