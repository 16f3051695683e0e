//! The report trail: every wait so far, when sending again makes sense, and what the report of
//! a request is made of. [`Trail`] is a plain value (unit-tested below, `now` passed in); the
//! session hands its report to the counters, the slot and the response's extension
//! (`report.rs`).

use crate::report::{Delay, DelaySource, RetryReport, StopReason};
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
    pub(super) fn left_queue(&mut self, now: Instant) {
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
    pub(super) fn resend_in(&mut self, resend: Duration) {
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
