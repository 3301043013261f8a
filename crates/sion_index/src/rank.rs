//! Latest and nearest answers (docs/PROOFS.md, kinds 7 and 8): found by walks that widen a
//! threshold until something qualifies — a later end of valid time, a larger distance — then
//! proved by one walk that passes over whatever ranks below the answer.

use std::cell::RefCell;

use sion_verify::index::RangeAnswer;
use sion_verify::index::geom::{Query, SpaceTime};
use sion_verify::proof::{Counted, NearQuery};

use super::IndexError;
use super::tree::{Entry, Select, Step};
use super::walk::{MAX_WALK_STEPS, Snapshot};

/// A search walk's rule: enter and take what passes `keep`, noting each entry taken.
struct Search<F: Fn(&SpaceTime, u32) -> bool> {
    keep: F,
    found: RefCell<Vec<Entry>>,
}

impl<F: Fn(&SpaceTime, u32) -> bool> Select for Search<F> {
    fn opens(&self, bbox: &SpaceTime, kinds: u32) -> bool {
        (self.keep)(bbox, kinds)
    }
    fn takes(&self, e: &Entry) -> bool {
        let keep = (self.keep)(&e.bbox, e.tally().kinds);
        if keep {
            self.found.borrow_mut().push(*e);
        }
        keep
    }
}

/// A proving walk's rule: enter what passes `keep`, answer with the chosen positions.
struct Prove<'a, F: Fn(&SpaceTime, u32) -> bool> {
    keep: F,
    chosen: &'a [u64],
}

impl<F: Fn(&SpaceTime, u32) -> bool> Select for Prove<'_, F> {
    fn opens(&self, bbox: &SpaceTime, kinds: u32) -> bool {
        (self.keep)(bbox, kinds)
    }
    fn takes(&self, e: &Entry) -> bool {
        self.chosen.contains(&e.position)
    }
}

impl Snapshot {
    /// The frame's extent (the union of its trees' boxes), if the frame holds atoms.
    fn extent(&self, frame: &str) -> Option<SpaceTime> {
        self.held().into_iter().find(|f| f.frame == frame).map(|f| f.extent)
    }

    /// The atom of the query's frame, box and interval whose valid time ends last (the later
    /// position on a tie), if any, with the walk that shows nothing later answers.
    pub fn latest(&self, q: &Query) -> Result<(Option<u64>, RangeAnswer), IndexError> {
        self.latest_within(q, MAX_WALK_STEPS)
    }

    /// [`Snapshot::latest`], each walk refused ([`IndexError::TooLarge`]) past `max_steps`.
    pub fn latest_within(
        &self,
        q: &Query,
        max_steps: usize,
    ) -> Result<(Option<u64>, RangeAnswer), IndexError> {
        let Some(extent) = self.extent(&q.frame) else {
            return Ok((None, self.walk_frame(&q.frame, q.subject.as_deref(), q, max_steps)?));
        };
        // Widen "ends at or after T" from the latest end in the frame down to the interval's
        // start, four times as far each round, until an atom answers. A round whose walk
        // passes the bound (a crowd of atoms ending within one step) is retried halfway back
        // to the last threshold that found nothing.
        let (mut threshold, mut step) = (extent.to_ns, 1i64);
        let mut empty_above: Option<i64> = None;
        let best = loop {
            let search = Search {
                keep: |b: &SpaceTime, kinds: u32| q.opens(b, kinds) && b.to_ns >= threshold,
                found: RefCell::new(Vec::new()),
            };
            match self.walk_frame(&q.frame, q.subject.as_deref(), &search, max_steps) {
                Ok(_) => {}
                Err(IndexError::TooLarge(max)) => {
                    let gap = empty_above.map_or(0, |above| i128::from(above) - i128::from(threshold));
                    if gap <= 1 {
                        return Err(IndexError::TooLarge(max));
                    }
                    threshold = (i128::from(threshold) + gap / 2) as i64;
                    step = 1;
                    continue;
                }
                Err(e) => return Err(e),
            }
            let found = search.found.into_inner();
            if let Some(best) = found.iter().max_by_key(|e| (e.bbox.to_ns, e.position)) {
                break Some(*best);
            }
            if threshold <= q.from_ns {
                break None;
            }
            empty_above = Some(threshold);
            threshold = threshold.saturating_sub(step).max(q.from_ns);
            step = step.saturating_mul(4);
        };
        let Some(best) = best else {
            return Ok((None, self.walk_frame(&q.frame, q.subject.as_deref(), q, max_steps)?));
        };
        let chosen = [best.position];
        let prove = Prove {
            keep: |b: &SpaceTime, kinds: u32| q.opens(b, kinds) && b.to_ns >= best.bbox.to_ns,
            chosen: &chosen,
        };
        Ok((Some(best.position), self.walk_frame(&q.frame, q.subject.as_deref(), &prove, max_steps)?))
    }

    /// The `k` atoms of the frame valid during the interval nearest to the point (by the
    /// distance from the point to their boxes; ties by position), nearest first, with the walk
    /// that shows nothing nearer exists.
    pub fn nearest(&self, q: &NearQuery) -> Result<(Vec<u64>, RangeAnswer), IndexError> {
        let k = q.k as usize;
        let everything = |b: &SpaceTime, _: u32| q.during(b);
        let Some(extent) = self.extent(&q.frame) else {
            let prove = Prove { keep: everything, chosen: &[] };
            return Ok((Vec::new(), self.walk_frame(&q.frame, None, &prove, MAX_WALK_STEPS)?));
        };
        // The farthest any atom of the frame can be: past it, every atom is within reach.
        let far = (0..3)
            .map(|a| {
                let d = (i128::from(extent.max_mm[a]) - i128::from(q.point_mm[a]))
                    .abs()
                    .max((i128::from(extent.min_mm[a]) - i128::from(q.point_mm[a])).abs());
                (d as u128).saturating_mul(d as u128)
            })
            .fold(0u128, u128::saturating_add);
        // Widen the reach from a metre, four times as far each round, until k atoms are in it.
        let mut reach: u128 = 1_000_000;
        let ranked = loop {
            let search = Search {
                keep: |b: &SpaceTime, _: u32| q.during(b) && q.distance2(b) <= reach,
                found: RefCell::new(Vec::new()),
            };
            self.walk_frame(&q.frame, None, &search, MAX_WALK_STEPS)?;
            let found = search.found.into_inner();
            if found.len() >= k || reach >= far {
                let mut ranked: Vec<(u128, u64)> =
                    found.iter().map(|e| (q.distance2(&e.bbox), e.position)).collect();
                ranked.sort_unstable();
                ranked.truncate(k);
                break ranked;
            }
            reach = reach.saturating_mul(16);
        };
        let chosen: Vec<u64> = ranked.iter().map(|(_, p)| *p).collect();
        let worst = (ranked.len() == k).then(|| ranked.last().map(|(d, _)| *d)).flatten();
        let prove = Prove {
            keep: |b: &SpaceTime, _: u32| q.during(b) && worst.is_none_or(|w| q.distance2(b) <= w),
            chosen: &chosen,
        };
        let walked = self.walk_frame(&q.frame, None, &prove, MAX_WALK_STEPS)?;
        Ok((chosen, walked))
    }

    /// How many atoms answer the query, for how long in all, first and last when, with the walk
    /// the answer is read from: subtrees wholly inside the question taken by their tallies, the
    /// groups across its edges shown whole (docs/PROOFS.md, kind 9).
    pub fn count(&self, q: &Query) -> Result<(Counted, RangeAnswer), IndexError> {
        let walked = self.walk_frame(&q.frame, q.subject.as_deref(), &Count { q }, MAX_WALK_STEPS)?;
        let walks: Vec<&[Step]> =
            [&walked.short, &walked.long].into_iter().flatten().map(Vec::as_slice).collect();
        Ok((sion_verify::proof::count_of(q, &walks), walked))
    }
}

/// A count's walk: pass over what cannot answer, take whole what lies inside, show the rest.
struct Count<'a> {
    q: &'a Query,
}

impl Select for Count<'_> {
    fn opens(&self, bbox: &SpaceTime, kinds: u32) -> bool {
        self.q.opens(bbox, kinds)
    }
    fn takes(&self, _: &Entry) -> bool {
        false
    }
    fn whole(&self, bbox: &SpaceTime, kinds: u32) -> bool {
        sion_verify::proof::inside(self.q, bbox, kinds)
    }
}
