//! How long a front-end waits for etcd's answer to a Pulse's compare-and-swap before it takes
//! the swap as not known to have landed and tries again (docs/FLEET-LEDGER.md, "Faults").
//!
//! A proposal that a killed leader held is never answered (etcd answers it only at its own
//! request timeout, seconds later), so the wait bounds how long a leader's death stalls the
//! fleet beyond etcd's election. A fixed second was most of that stall once etcd elects in a
//! few hundred milliseconds; a wait shorter than a loaded cluster's answers would only send
//! each swap twice. So the wait follows the answers, as TCP's retransmission timer follows a
//! connection's round trips (RFC 6298): the smoothed answer time plus four times its mean
//! deviation, within [`FLOOR`] and [`CEILING`], doubled after each swap that went unanswered.
//! A swap tried again is safe whatever the wait: its compare fails if the first landed, and
//! the first's entry is read to find out (`FleetLedger::landed`).

use std::time::Duration;

/// The shortest wait: a cluster answering in milliseconds still gets this long.
pub const FLOOR: Duration = Duration::from_millis(250);
/// The longest wait (and the first, before any answer was timed).
pub const CEILING: Duration = Duration::from_secs(1);

/// The answer times seen, smoothed (RFC 6298, section 2).
#[derive(Debug, Clone, Default)]
pub struct SwapWait {
    /// Smoothed answer time and its mean deviation, in microseconds (none before the first).
    smoothed: Option<(u64, u64)>,
    /// Swaps in a row that went unanswered: each doubles the wait.
    unanswered: u32,
}

impl SwapWait {
    /// How long to wait for the next swap's answer.
    pub fn wait(&self) -> Duration {
        let base = match self.smoothed {
            None => return CEILING,
            Some((srtt, var)) => Duration::from_micros(srtt.saturating_add(var.saturating_mul(4))),
        };
        base.clamp(FLOOR, CEILING).saturating_mul(1 << self.unanswered.min(8)).min(CEILING)
    }

    /// A swap was answered (landed or lost) after `took`.
    pub fn answered(&mut self, took: Duration) {
        let r = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.smoothed = Some(match self.smoothed {
            None => (r, r / 2),
            // RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, then SRTT = 7/8 SRTT + 1/8 R.
            Some((srtt, var)) => (srtt - srtt / 8 + r / 8, var - var / 4 + srtt.abs_diff(r) / 4),
        });
        self.unanswered = 0;
    }

    /// A swap went unanswered within [`SwapWait::wait`].
    pub fn unanswered(&mut self) {
        self.unanswered = self.unanswered.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn before_any_answer_the_wait_is_the_ceiling() {
        assert_eq!(SwapWait::default().wait(), CEILING);
    }

    #[test]
    fn the_wait_is_the_smoothed_answer_and_four_deviations() {
        let mut w = SwapWait::default();
        // The first answer: SRTT = R, RTTVAR = R / 2.
        w.answered(ms(100));
        assert_eq!(w.wait(), ms(300));
        // RTTVAR = 3/4 · 50 + 1/4 · |100 − 200| = 62.5, then SRTT = 7/8 · 100 + 1/8 · 200 = 112.5.
        w.answered(ms(200));
        assert_eq!(w.wait(), Duration::from_micros(112_500 + 4 * 62_500));
    }

    #[test]
    fn an_answer_of_any_length_is_taken() {
        let mut w = SwapWait::default();
        w.answered(Duration::MAX);
        w.answered(Duration::MAX);
        assert_eq!(w.wait(), CEILING);
        w.unanswered();
        assert_eq!(w.wait(), CEILING);
    }

    #[test]
    fn a_quick_cluster_gets_the_floor() {
        let mut w = SwapWait::default();
        for _ in 0..50 {
            w.answered(ms(12));
        }
        assert_eq!(w.wait(), FLOOR);
    }

    #[test]
    fn a_loaded_cluster_gets_its_answers_and_their_spread() {
        let mut w = SwapWait::default();
        for i in 0..200 {
            w.answered(ms(if i % 2 == 0 { 150 } else { 250 }));
        }
        // About 200 ms smoothed, about 50 ms of deviation: about 400 ms.
        let wait = w.wait();
        assert!(wait > ms(330) && wait < ms(470), "{wait:?}");
    }

    #[test]
    fn a_slow_cluster_never_waits_past_the_ceiling() {
        let mut w = SwapWait::default();
        for _ in 0..20 {
            w.answered(Duration::from_secs(3));
        }
        assert_eq!(w.wait(), CEILING);
    }

    #[test]
    fn each_swap_unanswered_doubles_the_wait_until_one_is_answered() {
        let mut w = SwapWait::default();
        w.unanswered();
        assert_eq!(w.wait(), CEILING, "before any answer");
        w.answered(ms(130));
        assert_eq!(w.wait(), ms(390));
        w.unanswered();
        assert_eq!(w.wait(), ms(780));
        let mut w = SwapWait::default();
        for _ in 0..50 {
            w.answered(ms(10));
        }
        w.unanswered();
        assert_eq!(w.wait(), FLOOR * 2);
        w.unanswered();
        assert_eq!(w.wait(), CEILING);
        for _ in 0..40 {
            w.unanswered();
        }
        assert_eq!(w.wait(), CEILING);
        w.answered(ms(10));
        assert_eq!(w.wait(), FLOOR);
    }
}
