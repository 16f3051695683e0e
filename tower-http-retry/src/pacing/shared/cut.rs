//! When a ramp is cut: what makes a loss event, how far the rate is cut, and when the losses
//! after a cut stop answering the releases made before it.

use super::{Mode, Rules, SharedState};
use crate::pacing::clock::Nanos;
use crate::pacing::rate::Ramp;

/// Losses in one interval below this do not cut the rate, whatever their share.
const MIN_LOSSES_TO_CUT: u32 = 3;

impl SharedState {
    /// For a process alone: whether a request released at `released` went before the ramp's
    /// last cut. Its loss answers the rate before the cut.
    pub(crate) fn released_before_cut(&self, rules: &Rules<'_>, released: Nanos) -> bool {
        matches!(self.mode, Mode::Ramping { cut_settles_at, .. }
            if released < last_cut(rules, cut_settles_at))
    }

    /// A loss event cuts the rate at once, without waiting for the interval to close: slow
    /// start doubles the rate every interval, so by the close it would have sent up to twice
    /// what the endpoint took; and after a cut, the releases that go on at a rate still too
    /// high are lost for the rest of the interval. The cut counts the successes of the part of
    /// the interval measured so far (in slow start, whose rate grew; after a cut, whose rate
    /// changed), else of the last interval's length, and a new interval begins. A fleet's
    /// store waits for the interval to close after slow start: its outcomes come in reports;
    /// so does a process alone for a loss of a request the rate did not release (`timed`:
    /// see [`timed_outcome`](Self::timed_outcome)). Returns whether the rate was cut.
    pub(super) fn cut_at_loss_event(&mut self, rules: &Rules<'_>, now: Nanos, timed: bool) -> bool {
        let Mode::Ramping {
            ramp,
            interval_start,
            successes,
            losses,
            cut_settles_at,
            ..
        } = self.mode
        else {
            return false;
        };
        // A process alone does not count the losses of what it released before the cut, or
        // within a round trip after it: a loss of what the rate released since is news at once.
        let settled = if timed && rules.report_lag == 0 {
            last_cut(rules, cut_settles_at)
        } else {
            cut_settles_at
        };
        if (matches!(ramp, Ramp::Cubic { .. }) && (rules.report_lag > 0 || !timed))
            || interval_start < settled
            || now <= interval_start
            || !rules.is_loss_event(successes, losses)
        {
            return false;
        }
        let reported = self.reported_accepted(now);
        if rules.lease_ttl.is_some() && now > self.slots_at {
            // The slot clock ran at the rate before the cut until now.
            self.slots += (now - self.slots_at) as f64 / 1e9 * self.rate(rules);
            self.slots_at = now;
        }
        let Mode::Ramping {
            ramp,
            interval_start,
            successes,
            losses,
            cut_settles_at,
            last_accepted,
            hinted,
            ..
        } = &mut self.mode
        else {
            return false;
        };
        let mut measured = (now - *interval_start) as f64 / 1e9;
        let mut counted = *successes;
        let secs = rules.pacing.ramp_interval.as_secs_f64();
        let rate = ramp.rate(&rules.pacing.rate);
        // After slow start, at a rate that was steady and busy (this interval did not begin at
        // a cut, and the last one took at least β of the rate): a whole interval back, the last
        // one's successes make up the rest, since a few milliseconds' count alone is too coarse
        // for a rate. Right after a cut, or after a spell of little demand, the last interval
        // says nothing of what the endpoint takes now.
        let steady = matches!(ramp, Ramp::Cubic { .. })
            && *interval_start != last_cut(rules, *cut_settles_at)
            && *last_accepted >= rules.pacing.rate.decrease * rate;
        if steady && measured < secs {
            let rest = (*last_accepted * (secs - measured)).round() as u32;
            counted = counted.saturating_add(rest);
            measured = secs;
        }
        *last_accepted = f64::from(counted) / measured;
        rules.cut(ramp, counted, *losses, measured, reported);
        *cut_settles_at = rules.settles(now, self.demand_until);
        if let Some(max) = ramp.last_max() {
            self.capacity = Some(max);
        }
        (*successes, *losses, *hinted) = (0, 0, false);
        *interval_start = now;
        true
    }
}

impl Rules<'_> {
    /// Whether an interval's outcomes so far are a loss event: more losses than the threshold's
    /// share, and enough of them (a loss or two at a low rate is a stray 503, not a limit).
    pub(super) fn is_loss_event(&self, successes: u32, losses: u32) -> bool {
        let total = f64::from(successes) + f64::from(losses);
        losses >= MIN_LOSSES_TO_CUT && f64::from(losses) > self.pacing.loss_threshold * total
    }

    /// Cuts `ramp` for a loss event seen in `measured_secs` of outcomes (an interval, or the part
    /// of one before its losses made the event, made up to a whole interval at a steady rate: see
    /// [`SharedState::cut_at_loss_event`]).
    pub(super) fn cut(
        &self,
        ramp: &mut Ramp,
        successes: u32,
        losses: u32,
        measured_secs: f64,
        reported: Option<f64>,
    ) {
        // A fleet's outcomes come in reports, whose times are not the outcomes': the interval may
        // hold a burst of losses and few of the successes beside them. What the peers' last
        // reports took is what the fleet takes, if more.
        let counted = f64::from(successes) / measured_secs;
        let mut accepted = reported.map_or(counted, |reported| counted.max(reported));
        let total = successes + losses;
        if self.report_lag > 0 && total > 0 {
            // Both counts lag, the successes more (a burst of losses is reported at once), but
            // their ratio does not: the endpoint took that share of what was released at the
            // interval's rate. In slow start that is the rate the interval began with (each
            // success added 1 / interval).
            let loss = f64::from(losses) / f64::from(total);
            let rate = ramp.rate(&self.pacing.rate);
            let began = match ramp {
                Ramp::SlowStart { .. } => {
                    rate - f64::from(successes) / self.pacing.ramp_interval.as_secs_f64()
                }
                Ramp::Cubic { .. } => rate,
            };
            accepted = accepted.max(began * (1.0 - loss));
        }
        ramp.lose(&self.pacing.rate, accepted);
    }

    /// When the losses that follow a cut made at `closes` stop answering releases made before it:
    /// once the slots a fleet was granted ahead at the old rate are used, an interval after, and
    /// for a fleet's store, heard of with the process's next ask, made as its slots run out: an
    /// interval later again. Not the whole report lag: a fleet that waited that long after each cut
    /// overshot the endpoint's limit at a loss share above the threshold for a second at a time.
    /// (A process alone also knows when each of its requests went, and a loss of what it released
    /// after the cut cuts again before that: see [`SharedState::cut_at_loss_event`].)
    pub(super) fn settles(&self, closes: Nanos, demand_until: Nanos) -> Nanos {
        let interval = self.interval();
        let heard = if self.report_lag > 0 { interval } else { 0 };
        closes
            .saturating_add(interval)
            .max(demand_until.saturating_add(interval))
            .saturating_add(heard)
    }
}

/// For a process alone, the instant of the cut whose losses settle at `cut_settles_at`: it
/// settles an interval after the cut (`settles`; a process alone is granted nothing ahead).
pub(super) fn last_cut(rules: &Rules<'_>, cut_settles_at: Nanos) -> Nanos {
    cut_settles_at.saturating_sub(rules.interval())
}
