//! The session's side of its report: what the [`Trail`] gathered, read and added to as the
//! request goes, and the report handed to the counters, the slot and the response's extension
//! when it ends.

use super::trail::Trail;
use super::Session;
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
        self.waits
            .as_ref()
            .map_or(&[], |waits| waits.trail.delays())
    }

    /// The trail, made at the first thing it records.
    pub(super) fn trail(&mut self) -> &mut Trail {
        &mut self.waits().trail
    }

    /// Total time slept (an aborted sleep counts the time it lasted).
    pub(super) fn slept(&self) -> Duration {
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

    /// The request ends for `stop`: counted, and said (in the span of the attempt decided on, if
    /// any). [`decide`](Self::decide) records every end it decides.
    pub(super) fn end(&self, stop: StopReason) {
        self.config.counters.stop(stop);
        decision!(attempts = self.tries.sent(), %stop, "finished");
    }

    /// The report so far, with the reason the request stopped.
    pub(super) fn report(&mut self, stop: StopReason) -> RetryReport {
        let wall = &self.config.settings.wall_clock;
        let wall = || wall();
        let attempts = self.tries.sent();
        let report = match self.waits.as_mut() {
            Some(waits) => waits.trail.report(attempts, stop, wall),
            None => Trail::default().report(attempts, stop, wall),
        };
        // A `RetryReport::capture` being polled gets it too, whatever the outcome.
        crate::report::offer(&report);
        report
    }

    /// The caller dropped the future before it finished: the counters and the slot say so.
    pub(super) fn cancel(&mut self) {
        self.end(StopReason::Cancelled);
        let report = self.report(StopReason::Cancelled);
        if let Some(slot) = self.slot.take() {
            slot.fill(report);
        }
    }

    /// The last sleep is over, run out or cut short: the histogram counts the time it lasted
    /// (not the time planned, and nothing for a sleep abandoned by dropping the future).
    pub(super) fn sleep_ended(&self) {
        let last = self.waits.as_ref().and_then(|w| w.trail.last_retry_wait());
        if let Some(last) = last {
            self.config
                .counters
                .delay(last.after_attempt, last.duration, last.source);
        }
    }

    /// The request leaves an endpoint's queue at `now` (let through, aborted, deferred or
    /// dropped): its wait is recorded with the time it lasted.
    pub(super) fn left_queue(&mut self, now: Instant) {
        if let Some(waits) = self.waits.as_mut() {
            waits.trail.left_queue(now);
        }
    }

    /// The last sleep was aborted with `remaining` left: the report shows the time slept.
    pub(super) fn cut_last_sleep(&mut self, remaining: Duration) {
        if let Some(waits) = self.waits.as_mut() {
            waits.trail.cut_last(remaining);
        }
    }

    /// Sending the request again makes sense in `resend_after`: the report says so.
    pub(super) fn retry_in(&mut self, resend_after: Duration) {
        self.trail().resend_in(resend_after);
    }

    pub(super) fn record_delay(&mut self, duration: Duration, source: DelaySource) {
        let after_attempt = self.tries.sent();
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
    /// (and a waiting slot): recorded here, and `true`.
    #[inline]
    pub(super) fn finished_first_try(&mut self, stop: StopReason) -> bool {
        if self.tries.sent() == 1 && self.waits.is_none() && stop == StopReason::Success {
            self.config.counters.stop(stop);
            if let Some(slot) = self.slot.take() {
                slot.fill(RetryReport::FIRST_TRY);
            }
            return true;
        }
        false
    }

    /// Hands back the last outcome of a request whose end for `stop` is recorded, with its
    /// report.
    pub(crate) fn finish<Res: RetryResponse, E>(
        &mut self,
        result: Result<Res, E>,
        stop: StopReason,
    ) -> Result<Res, E> {
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
                    response.extensions_mut().insert(report);
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
