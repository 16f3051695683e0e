//! A fleet's slot clock: how many release slots at the ramp's rate have passed since the ramp
//! began, moved on with time at the rate of each interval (by `advance`, as intervals close). The processes of a fleet take their
//! slots at their ranks on this clock (`release.rs`), so that slots granted to different
//! processes at different times interleave as one process's releases would, whatever the rate
//! did in between; and a slot granted ahead is placed where the clock is predicted to reach
//! it: at the rate now for the rest of the interval, then interval by interval as the ramp will
//! grow without a loss (the cubic curve; a slow start's rate, which grows with successes, is
//! held).

use super::{Mode, Rules, SharedState};
use crate::pacing::clock::Nanos;

impl SharedState {
    /// When the slot clock is predicted to reach `target` (it may have, before now: then
    /// when it did, at the rate now); `None` while not ramping, or beyond `horizon`.
    pub(crate) fn slot_time(
        &self,
        rules: &Rules<'_>,
        target: f64,
        horizon: Nanos,
    ) -> Option<Nanos> {
        self.slot_offset(rules, target, horizon)
            .map(|offset| self.at_offset(offset))
    }

    /// The instant `offset` nanoseconds after the slot clock was last moved on (`slots_at`).
    pub(crate) fn at_offset(&self, offset: f64) -> Nanos {
        if offset >= 0.0 {
            self.slots_at.saturating_add(offset as Nanos)
        } else {
            self.slots_at.saturating_sub((-offset) as Nanos)
        }
    }

    /// [`slot_time`](Self::slot_time) as nanoseconds after `slots_at`, unrounded: the spacing
    /// of slots is the same whatever instant the clock was read at (two stores whose clocks
    /// differ by a fraction of a millisecond grant the same gaps).
    pub(crate) fn slot_offset(
        &self,
        rules: &Rules<'_>,
        target: f64,
        horizon: Nanos,
    ) -> Option<f64> {
        let Mode::Ramping {
            ramp,
            interval_start,
            ..
        } = &self.mode
        else {
            return None;
        };
        let interval = rules.interval();
        let secs = rules.pacing.ramp_interval.as_secs_f64();
        let mut ramp = *ramp;
        let (mut at, mut reached) = (self.slots_at, self.slots);
        let mut boundary = interval_start.saturating_add(interval).max(at);
        loop {
            let rate = ramp.rate(&rules.pacing.rate).max(f64::MIN_POSITIVE);
            let need = target - reached;
            let within = (boundary - at) as f64 / 1e9 * rate;
            if need <= within {
                return Some((at - self.slots_at) as f64 + need / rate * 1e9);
            }
            if boundary > horizon {
                return None;
            }
            reached += within;
            at = boundary;
            boundary = boundary.saturating_add(interval);
            ramp.interval_passed(secs);
        }
    }
}
