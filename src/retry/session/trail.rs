//! The report trail: every wait so far, when sending again makes sense, and the report a
//! request ends with (the counters, the slot, the response's extension).

use super::{Session, Waits};
use crate::message::{RetryRequest, RetryResponse};
use crate::random::uniform;
use crate::report::{Delay, DelaySource, RetryReport, StopReason};
use crate::telemetry::decision;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl<Req, C> Session<Req, C> {
    /// Every wait so far.
    pub(super) fn delays(&self) -> &[Delay] {
        self.waits.as_ref().map_or(&[], |waits| &waits.delays)
    }

    pub(super) fn waits(&mut self) -> &mut Waits {
        self.waits.get_or_insert_with(Box::default)
    }

    /// Total time slept (an aborted sleep counts the time it lasted).
    pub(crate) fn slept(&self) -> Duration {
        self.delays().iter().map(|delay| delay.duration).sum()
    }

    /// The delay before the last retry, or `base` before the first one (what decorrelated
    /// jitter grows from). The first-attempt delay and free resends do not count.
    pub(super) fn previous_delay(&self) -> Duration {
        self.delays()
            .iter()
            .rev()
            .find(|delay| delay.after_attempt > 0 && delay.source != DelaySource::Refused)
            .map_or(self.config.settings.backoff.base(), |delay| delay.duration)
    }

    /// The report so far, with the reason the request stopped.
    pub(super) fn report(&mut self, stop: StopReason) -> RetryReport {
        self.config.counters.stop(stop);
        decision!(attempts = self.attempts, %stop, "finished");
        let resend_after = self
            .waits
            .as_mut()
            .and_then(|waits| waits.resend_after.take());
        let report = RetryReport {
            // Checked: a delay near `InvalidConfig::MAX_DURATION` must not panic at request time.
            resend_at: resend_after
                .and_then(|after| (self.config.settings.wall_clock)().checked_add(after)),
            resend_after,
            attempts: self.attempts,
            slept: self.slept(),
            delays: self
                .waits
                .as_mut()
                .map_or_else(Vec::new, |waits| std::mem::take(&mut waits.delays)),
            stop,
            unknown_error: self
                .waits
                .as_mut()
                .and_then(|waits| waits.unknown_error.take()),
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
        let waited = |d: &&Delay| d.after_attempt > 0 && d.source != DelaySource::Refused;
        if let Some(last) = self.delays().last().filter(waited) {
            self.config
                .counters
                .delay(last.after_attempt, last.duration, last.source);
        }
    }

    /// The request leaves an endpoint's queue at `now` (let through, aborted, deferred or
    /// dropped): its wait is recorded with the time it lasted.
    pub(crate) fn left_queue(&mut self, now: Instant) {
        let Some(waits) = self.waits.as_mut() else {
            return;
        };
        if let (Some(queued_at), Some(last)) = (waits.queued_at.take(), waits.delays.last_mut()) {
            last.duration = now.saturating_duration_since(queued_at);
        }
    }

    /// The last sleep was aborted with `remaining` left: the report shows the time slept.
    pub(crate) fn cut_last_sleep(&mut self, remaining: Duration) {
        if let Some(last) = self
            .waits
            .as_mut()
            .and_then(|waits| waits.delays.last_mut())
        {
            last.duration = last.duration.saturating_sub(remaining);
        }
    }

    /// Sending the request again makes sense in `resend_after`: the report says so.
    pub(crate) fn retry_in(&mut self, resend_after: Duration) {
        self.waits().resend_after = Some(resend_after);
    }

    pub(super) fn record_delay(&mut self, duration: Duration, source: DelaySource) {
        let after_attempt = self.attempts;
        self.waits().delays.push(Delay {
            after_attempt,
            duration,
            source,
        });
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
            .and_then(|waits| waits.last_hint)
            .filter(|_| config.settings.hint_policy.is_some())
            .map(|(at, after)| after.saturating_sub(now.saturating_duration_since(at)));
        let hold = config
            .settings
            .abort
            .as_ref()
            .and_then(|abort| abort.held_until(authority.as_ref()))
            .map(|until| until.saturating_duration_since(now));
        let release = config
            .pacer
            .as_ref()
            .and_then(|pacer| pacer.predicted_release(authority.as_ref(), now));
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

    /// Records the end of the request and hands back its last outcome.
    pub(crate) fn finish<Res: RetryResponse, E>(
        &mut self,
        result: Result<Res, E>,
        stop: StopReason,
    ) -> Result<Res, E> {
        if self.attempts == 1 && self.waits.is_none() && stop == StopReason::Success {
            // The common case: nothing to report beyond the counter.
            self.config.counters.stop(stop);
            if let Some(slot) = self.slot.take() {
                slot.fill(RetryReport::FIRST_TRY);
            }
            return result;
        }
        if !stop.is_final() {
            if let Some(own) = self.waits.as_ref().and_then(|waits| waits.resend_after) {
                let resend = self.resend_after(own, Instant::now());
                self.waits().resend_after = Some(resend);
            }
        }
        let report = self.report(stop);
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
