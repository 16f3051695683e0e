//! The report trail: every wait so far, when sending again makes sense, and what the report of
//! a request is made of. [`Trail`] is a plain value (unit-tested below, `now` passed in); the
//! session's methods at the end of the file hand its report to the counters, the slot and the
//! response's extension.

use super::Session;
use crate::message::{RetryRequest, RetryResponse};
use crate::random::uniform;
use crate::report::{Delay, DelaySource, RetryReport, StopReason};
use crate::telemetry::decision;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// What the report of one request will say, gathered as it goes.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    /// Every wait so far, in order.
    delays: Vec<Delay>,
    /// When the request joined an endpoint's queue, while it waits there.
    queued_at: Option<Instant>,
    /// When sending again makes sense, from when the request stopped (the stop's own time).
    resend: Option<Duration>,
    /// The last error no classification rule recognised, named for the report.
    unknown_error: Option<String>,
    /// The last hint the server gave (when, and how long it asked for), which the report's
    /// resend time does not undercut.
    last_hint: Option<(Instant, Duration)>,
}

impl Trail {
    /// Every wait so far.
    pub(crate) fn delays(&self) -> &[Delay] {
        &self.delays
    }

    /// Records a wait of `duration` from `source` after attempt `after_attempt`.
    pub(crate) fn record(&mut self, after_attempt: u32, duration: Duration, source: DelaySource) {
        self.delays.push(Delay {
            after_attempt,
            duration,
            source,
        });
    }

    /// Total time waited (a wait cut short counts the time it lasted).
    pub(crate) fn slept(&self) -> Duration {
        self.delays.iter().map(|delay| delay.duration).sum()
    }

    /// The delay before the last retry, or `base` before the first one (what decorrelated
    /// jitter grows from). The first-attempt delay and free resends do not count.
    pub(crate) fn previous_delay(&self, base: Duration) -> Duration {
        self.delays
            .iter()
            .rev()
            .find(|delay| delay.after_attempt > 0 && delay.source != DelaySource::Refused)
            .map_or(base, |delay| delay.duration)
    }

    /// The last wait, if it was one before a retry (what the delay histogram counts).
    pub(crate) fn last_retry_wait(&self) -> Option<&Delay> {
        self.delays
            .last()
            .filter(|d| d.after_attempt > 0 && d.source != DelaySource::Refused)
    }

    /// The request joined an endpoint's queue at `now`: a wait of the time it will last.
    pub(crate) fn joined_queue(&mut self, after_attempt: u32, now: Instant) {
        self.record(after_attempt, Duration::ZERO, DelaySource::Paced);
        self.queued_at = Some(now);
    }

    /// The request left the queue at `now` (let through, aborted, deferred or dropped): its
    /// wait lasted until then.
    pub(crate) fn left_queue(&mut self, now: Instant) {
        if let (Some(queued_at), Some(last)) = (self.queued_at.take(), self.delays.last_mut()) {
            last.duration = now.saturating_duration_since(queued_at);
        }
    }

    /// The last wait was cut short with `remaining` left.
    pub(crate) fn cut_last(&mut self, remaining: Duration) {
        if let Some(last) = self.delays.last_mut() {
            last.duration = last.duration.saturating_sub(remaining);
        }
    }

    /// Sending again makes sense in `resend`, from now.
    pub(crate) fn resend_in(&mut self, resend: Duration) {
        self.resend = Some(resend);
    }

    /// The stop's own resend time, if it has one.
    pub(crate) fn resend(&self) -> Option<Duration> {
        self.resend
    }

    /// The server asked, at `now`, for `after`.
    pub(crate) fn hinted(&mut self, after: Duration, now: Instant) {
        self.last_hint = Some((now, after));
    }

    /// What is left at `now` of the server's last hint.
    pub(crate) fn hint_left(&self, now: Instant) -> Option<Duration> {
        self.last_hint
            .map(|(at, after)| after.saturating_sub(now.saturating_duration_since(at)))
    }

    /// An error no rule recognised, named.
    pub(crate) fn unknown_error(&mut self, name: String) {
        self.unknown_error = Some(name);
    }

    /// The report of a request that made `attempts` and stopped for `stop`; `wall` reads the
    /// wall clock, for the resend time as a date (only when there is one). Takes what the trail
    /// gathered.
    pub(crate) fn report(
        &mut self,
        attempts: u32,
        stop: StopReason,
        wall: impl FnOnce() -> SystemTime,
    ) -> RetryReport {
        let resend = self.resend.take();
        RetryReport {
            // Checked: a delay near `InvalidConfig::MAX_DURATION` must not panic at request time.
            resend_at: resend.and_then(|after| wall().checked_add(after)),
            resend_after: resend,
            attempts,
            slept: self.slept(),
            delays: std::mem::take(&mut self.delays),
            stop,
            unknown_error: self.unknown_error.take(),
        }
    }
}

impl<Req, C> Session<Req, C> {
    /// Every wait so far.
    pub(super) fn delays(&self) -> &[Delay] {
        self.waits
            .as_ref()
            .map_or(&[], |waits| waits.trail.delays())
    }

    /// The trail, made at the first thing it records.
    pub(super) fn trail(&mut self) -> &mut Trail {
        &mut self.waits().trail
    }

    /// Total time slept (an aborted sleep counts the time it lasted).
    pub(crate) fn slept(&self) -> Duration {
        self.waits
            .as_ref()
            .map_or(Duration::ZERO, |w| w.trail.slept())
    }

    /// The delay before the last retry, or the backoff's base before the first one.
    pub(super) fn previous_delay(&self) -> Duration {
        let base = self.config.settings.backoff.base();
        self.waits
            .as_ref()
            .map_or(base, |waits| waits.trail.previous_delay(base))
    }

    /// The report so far, with the reason the request stopped.
    pub(super) fn report(&mut self, stop: StopReason) -> RetryReport {
        self.config.counters.stop(stop);
        decision!(attempts = self.attempts, %stop, "finished");
        let wall = &self.config.settings.wall_clock;
        let wall = || wall();
        let attempts = self.attempts;
        let report = match self.waits.as_mut() {
            Some(waits) => waits.trail.report(attempts, stop, wall),
            None => Trail::default().report(attempts, stop, wall),
        };
        // A `RetryReport::capture` being polled gets it too, whatever the outcome.
        crate::report::offer(&report);
        report
    }

    /// The caller dropped the future before it finished: the counters and the slot say so.
    pub(crate) fn cancel(&mut self) {
        let report = self.report(StopReason::Cancelled);
        if let Some(slot) = self.slot.take() {
            slot.fill(report);
        }
    }

    /// The last sleep is over, run out or cut short: the histogram counts the time it lasted
    /// (not the time planned, and nothing for a sleep abandoned by dropping the future).
    pub(crate) fn sleep_ended(&self) {
        let last = self.waits.as_ref().and_then(|w| w.trail.last_retry_wait());
        if let Some(last) = last {
            self.config
                .counters
                .delay(last.after_attempt, last.duration, last.source);
        }
    }

    /// The request leaves an endpoint's queue at `now` (let through, aborted, deferred or
    /// dropped): its wait is recorded with the time it lasted.
    pub(crate) fn left_queue(&mut self, now: Instant) {
        if let Some(waits) = self.waits.as_mut() {
            waits.trail.left_queue(now);
        }
    }

    /// The last sleep was aborted with `remaining` left: the report shows the time slept.
    pub(crate) fn cut_last_sleep(&mut self, remaining: Duration) {
        if let Some(waits) = self.waits.as_mut() {
            waits.trail.cut_last(remaining);
        }
    }

    /// Sending the request again makes sense in `resend_after`: the report says so.
    pub(crate) fn retry_in(&mut self, resend_after: Duration) {
        self.trail().resend_in(resend_after);
    }

    pub(super) fn record_delay(&mut self, duration: Duration, source: DelaySource) {
        let after_attempt = self.attempts;
        self.trail().record(after_attempt, duration, source);
    }
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// When sending the request again makes sense, from `now`: the stop's `own` reason (the
    /// next backoff draw, the predicted wait, the breaker's wait) or, when later, what the layer
    /// knows of the endpoint: what is left of the server's last hint, a breaker's hold of the
    /// abort signal, the pacer's predicted release. Those are shared by every request to the
    /// endpoint, so a time taken from them is spread upward as a `Retry-After` is (by its
    /// jitter), lest a durable queue that honours it send them all back in one instant.
    pub(super) fn resend_after(&mut self, own: Duration, now: Instant) -> Duration {
        let config = Arc::clone(&self.config);
        let authority = self.authority().map(std::borrow::Cow::into_owned);
        let hint = self
            .waits
            .as_ref()
            .and_then(|waits| waits.trail.hint_left(now))
            .filter(|_| config.settings.hint_policy.is_some());
        let hold = config
            .settings
            .abort
            .as_ref()
            .and_then(|abort| abort.held_until(authority.as_ref()))
            .map(|until| until.saturating_duration_since(now));
        let release = self.predicted_release(authority.as_ref(), now);
        let shared = [hint, hold, release].into_iter().flatten().max();
        match shared {
            Some(shared) if shared > own => {
                let fraction = config
                    .settings
                    .hint_policy
                    .map_or(0.1, |policy| policy.jitter_fraction());
                let spread = Duration::try_from_secs_f64(shared.as_secs_f64() * fraction)
                    .unwrap_or(Duration::ZERO);
                shared.saturating_add(uniform(Duration::ZERO, spread, self.rng()))
            }
            _ => own,
        }
    }

    /// The common end, a success at the first try with nothing to report beyond the counter
    /// (and a waiting slot): recorded here, and `true`. Checked before the outcome is handed to
    /// [`finish`](Self::finish), so that it is not moved on the way (a move is a copy).
    #[inline]
    pub(crate) fn finished_first_try(&mut self, stop: StopReason) -> bool {
        if self.attempts == 1 && self.waits.is_none() && stop == StopReason::Success {
            self.config.counters.stop(stop);
            if let Some(slot) = self.slot.take() {
                slot.fill(RetryReport::FIRST_TRY);
            }
            return true;
        }
        false
    }

    /// Records the end of the request and hands back its last outcome.
    pub(crate) fn finish<Res: RetryResponse, E>(
        &mut self,
        result: Result<Res, E>,
        stop: StopReason,
    ) -> Result<Res, E> {
        if self.finished_first_try(stop) {
            return result;
        }
        if !stop.is_final() {
            self.settle_resend(Instant::now());
        }
        let report = self.report(stop);
        self.deliver(result, report)
    }

    /// The stop's own resend time, moved to what the layer knows of the endpoint when that is
    /// later (see [`resend_after`](Self::resend_after)).
    pub(super) fn settle_resend(&mut self, now: Instant) {
        if let Some(own) = self.waits.as_ref().and_then(|waits| waits.trail.resend()) {
            let resend = self.resend_after(own, now);
            self.retry_in(resend);
        }
    }

    /// Hands `result` back with `report`: in the slot, and on a response whose report says
    /// more than "first try, success".
    pub(super) fn deliver<Res: RetryResponse, E>(
        &mut self,
        result: Result<Res, E>,
        report: RetryReport,
    ) -> Result<Res, E> {
        match result {
            Ok(mut response) => {
                if !report.is_first_try() {
                    if let Some(slot) = self.slot.take() {
                        slot.fill(report.clone());
                    }
                    response.attach_report(report);
                } else if let Some(slot) = self.slot.take() {
                    slot.fill(report);
                }
                Ok(response)
            }
            Err(error) => {
                if let Some(slot) = self.slot.take() {
                    slot.fill(report);
                }
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_time_slept_is_the_sum_of_the_waits_as_they_lasted() {
        let mut trail = Trail::default();
        trail.record(1, 100 * MS, DelaySource::Backoff);
        trail.record(2, 300 * MS, DelaySource::RetryAfter);
        trail.cut_last(50 * MS);
        assert_eq!(trail.slept(), 350 * MS);
        assert_eq!(trail.delays()[1].duration, 250 * MS);
    }

    #[test]
    fn the_previous_delay_skips_free_resends_and_the_first_attempt_jitter() {
        let base = 7 * MS;
        let mut trail = Trail::default();
        trail.record(0, 40 * MS, DelaySource::FirstAttempt);
        assert_eq!(trail.previous_delay(base), base);
        trail.record(1, 100 * MS, DelaySource::Backoff);
        trail.record(2, 3 * MS, DelaySource::Refused);
        assert_eq!(trail.previous_delay(base), 100 * MS);
        assert!(trail.last_retry_wait().is_none(), "a free resend");
    }

    #[test]
    fn a_wait_in_the_queue_lasts_from_joining_to_leaving() {
        let now = Instant::now();
        let mut trail = Trail::default();
        trail.joined_queue(1, now);
        trail.left_queue(now + 700 * MS);
        trail.left_queue(now + 900 * MS); // left once: a second call changes nothing
        assert_eq!(trail.delays()[0].source, DelaySource::Paced);
        assert_eq!(trail.slept(), 700 * MS);
    }

    #[test]
    fn what_is_left_of_a_hint_shrinks_with_time() {
        let now = Instant::now();
        let mut trail = Trail::default();
        assert_eq!(trail.hint_left(now), None);
        trail.hinted(1000 * MS, now);
        assert_eq!(trail.hint_left(now + 400 * MS), Some(600 * MS));
        assert_eq!(trail.hint_left(now + 2000 * MS), Some(Duration::ZERO));
    }

    #[test]
    fn the_report_takes_what_the_trail_gathered() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut trail = Trail::default();
        trail.record(1, 100 * MS, DelaySource::Backoff);
        trail.resend_in(2000 * MS);
        trail.unknown_error("odd".to_string());
        let report = trail.report(2, StopReason::AttemptsExhausted, || wall);
        assert_eq!(report.attempts, 2);
        assert_eq!(report.slept, 100 * MS);
        assert_eq!(report.resend_after, Some(2000 * MS));
        assert_eq!(report.resend_at, Some(wall + 2000 * MS));
        assert_eq!(report.unknown_error.as_deref(), Some("odd"));
        assert!(trail.delays().is_empty() && trail.resend().is_none());
    }

    #[test]
    fn a_resend_time_past_the_end_of_time_is_no_date() {
        let mut trail = Trail::default();
        trail.resend_in(Duration::MAX);
        let report = trail.report(1, StopReason::Deferred, SystemTime::now);
        assert_eq!(report.resend_after, Some(Duration::MAX));
        assert_eq!(report.resend_at, None);
    }
}
