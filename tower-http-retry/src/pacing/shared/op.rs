//! What a process of a fleet asks of the shared state through a store, and the one function
//! every store runs for it: [`SharedState::apply`], which moves the state on to `now` and then
//! applies the operation with the same methods a process pacing alone calls.

use super::release::{Batch, Grant};
use super::{Rules, SharedState, Signal};
use crate::pacing::clock::Nanos;

/// The most outcomes one report counts (a report is a process's outcomes since its last call).
const MAX_REPORTED: u32 = 1 << 16;

/// What a process tells, or asks, the fleet about one endpoint, in shared time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Op {
    /// The process saw the endpoint fail (its own congestion outcomes in a row, or an empty
    /// budget); `jitter` in `[0, 1)` places the first probe.
    Down { jitter: f64 },
    /// The endpoint asked for a pause until then (a quota's reset, a breaker's hold).
    Pause { until: Nanos },
    /// A hint asked one request to wait until then: a rate signal while the endpoint takes
    /// requests, a pause when nothing gets through.
    Hint { until: Nanos },
    /// The process has `want` requests waiting: may some go? `jitter` places the next probe.
    Release { want: u32, jitter: f64 },
    /// A probe ended; `success`: the endpoint took it.
    ProbeDone { lease: u64, success: bool },
    /// Outcomes of released requests since the process last reported, `over` that long (0:
    /// unknown).
    Report {
        successes: u32,
        losses: u32,
        over: Nanos,
    },
    /// Nothing: read the state as it is now.
    Refresh,
}

impl SharedState {
    /// Applies one operation by `holder` at `now`, the state first moved on to `now`. The
    /// answer is `Some` for a release.
    pub(crate) fn apply(
        &mut self,
        rules: &Rules<'_>,
        holder: u64,
        op: Op,
        now: Nanos,
    ) -> Option<Grant> {
        // Demand is what waits beyond the one release asked for (as for a process alone, whose
        // head asking is no demand), and the slots granted ahead.
        let demand = matches!(op, Op::Release { want, .. } if want > 1);
        self.advance(rules, demand, now);
        if !matches!(op, Op::Refresh) && !self.is_open() {
            self.seen(holder, now);
        }
        match op {
            Op::Down { jitter } => {
                if self.down(rules, now, || jitter) {
                    self.seen(holder, now);
                }
                None
            }
            Op::Pause { until } => {
                self.pause_until(rules, until, now);
                None
            }
            Op::Hint { until } => {
                self.hinted(rules, until, now);
                None
            }
            Op::Release { want, jitter } => {
                let batch = Batch::Fleet { want };
                Some(self.release(rules, holder, batch, now, || jitter))
            }
            Op::ProbeDone { lease, success } => {
                let signal = if success {
                    Signal::Success
                } else {
                    Signal::Neutral
                };
                self.outcome(rules, signal, Some(lease), now);
                None
            }
            Op::Report {
                successes,
                losses,
                over,
            } => {
                if over > 0 {
                    if let Some(peer) = self.peers.iter_mut().find(|p| p.holder == holder) {
                        peer.accepted = (f64::from(successes) * 1e9 / over as f64) as f32;
                        peer.reported = now;
                    }
                }
                for _ in 0..successes.min(MAX_REPORTED) {
                    self.outcome(rules, Signal::Success, None, now);
                }
                for _ in 0..losses.min(MAX_REPORTED) {
                    self.outcome(rules, Signal::Congestion, None, now);
                }
                None
            }
            Op::Refresh => None,
        }
    }
}
