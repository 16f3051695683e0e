//! Pacing as the retry session sees it, through the pacer's one handle for an endpoint
//! ([`Lane`]): the outcome booked to the endpoint before the ladder runs, then one step that
//! rewrites the ladder's verdict ([`pace`](Session::pace)); and the queue joined instead of a
//! sleep, after a sleep, or by a first attempt while its endpoint is down.

use super::ladder::{Facts, Lift, Retry, Stop, Verdict};
use super::{Next, Now, Session};
use crate::abort::Listener;
use crate::classify::{NotSent, Outcome};
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{Deferred, Lane, QueueWait, Signal};
use crate::report::{DelaySource, StopReason};
use crate::telemetry::decision;
use http::uri::Authority;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What a request whose sleep is over does next, with pacing.
pub(crate) enum AfterSleep {
    /// Its endpoint is not paced: it is sent.
    Send,
    /// Its endpoint is paced: it waits in the queue.
    Queue(QueueWait),
    /// Its endpoint is paced and the queue cannot take it: it stops with
    /// [`StopReason::Deferred`] (a first attempt, with no outcome to return, is sent).
    Deferred(Deferred),
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Tells the pacer what the outcome says of the endpoint; returns the endpoint (`None`
    /// without pacing, or when its map is full and the request is not paced).
    pub(super) fn book<Res, E, F>(
        &mut self,
        facts: &Facts,
        result: &Result<Res, E>,
        now: &mut Now<F>,
    ) -> Option<Lane>
    where
        Res: RetryResponse,
        C: crate::classify::Classify<Res, E>,
        F: FnOnce() -> Instant,
    {
        // Checked before anything else: the path of every outcome when pacing is off.
        self.config.pacer.as_ref()?;
        let config = Arc::clone(&self.config);
        let pacer = config.pacer.as_ref()?;
        let congestion = match result {
            Ok(response) if facts.classified == Outcome::Transient => config
                .classifier
                .is_congestion(response, &pacer.config().congestion),
            _ => false,
        };
        // A rotation says the endpoint is up, whatever became of the request.
        let signal = if facts.rotation {
            Signal::Neutral
        } else {
            signal_of(facts.classified, congestion, result)
        };
        let now = now.get();
        match self.waits.as_mut().and_then(|waits| waits.pass.take()) {
            Some(pass) => {
                let lane = pass.lane();
                pass.record(signal, now);
                Some(lane)
            }
            None => {
                let lane = pacer.lane(self.authority().as_deref())?;
                lane.record(signal, now);
                Some(lane)
            }
        }
    }

    /// The ladder's verdict with pacing, rewritten in this one place:
    /// * a success that used up the quota pauses the endpoint until its reset;
    /// * a breaker's refusal pauses the endpoint until the breaker lets a probe through; a
    ///   request that may be sent again then waits in the queue (if it may wait at all), not
    ///   stopping as `CircuitOpen`;
    /// * a breaker's hold pauses the endpoint, and the ladder goes on: the request waits;
    /// * a retry whose wait came from the server's hint pauses the endpoint until then;
    /// * a retry to an endpoint that is paced waits in its queue instead of sleeping (neither
    ///   the deadline's check of the sleep nor the budget applies: the queue has its own);
    /// * an empty budget paces the endpoint instead of dropping the request.
    ///
    /// A free resend of a request the server turned away unprocessed is not paced.
    pub(super) fn pace(
        &mut self,
        verdict: Verdict,
        facts: &Facts,
        lane: &Lane,
        now: Instant,
    ) -> Next {
        let stop = match verdict {
            Verdict::Retry(retry) => return self.pace_retry(retry, lane, now),
            Verdict::Stop(stop) => stop,
        };
        match stop.lift {
            _ if stop.reason == StopReason::Success => {
                if let Some(after) = self.hint_delay(&facts.hint) {
                    self.config.counters.quota_paused();
                    lane.pause_until(now + after.min(self.config.retry_after_clamp), now);
                }
                self.stop(stop)
            }
            Some(Lift::Refused { wait }) => {
                lane.breaker_refused(wait, now);
                if self.not_retryable.is_some() {
                    // It would not wait in the queue: it stops as the ladder says.
                    return self.stop(stop);
                }
                match self.may_wait(facts, now) {
                    Ok(listener) => self.enter_queue(lane, listener, now),
                    Err(stop) => match lift_hold(stop, lane, now) {
                        Ok(listener) => self.enter_queue(lane, listener, now),
                        Err(stop) => self.stop(stop),
                    },
                }
            }
            Some(Lift::Held { .. }) => match lift_hold(stop, lane, now) {
                Ok(listener) => match self.wait_for(facts, listener, now) {
                    Verdict::Retry(retry) => self.pace_retry(retry, lane, now),
                    Verdict::Stop(stop) => self.stop(stop),
                },
                Err(stop) => self.stop(stop),
            },
            _ => self.stop(stop),
        }
    }

    /// A retry, with pacing (see [`pace`](Self::pace)).
    fn pace_retry(&mut self, retry: Retry, lane: &Lane, now: Instant) -> Next {
        if retry.source != DelaySource::Refused {
            if matches!(
                retry.source,
                DelaySource::RetryAfter | DelaySource::RetryAfterClamped
            ) {
                // The hint pauses the endpoint, not only this request.
                lane.pause_until(now + retry.delay, now);
            }
            if lane.is_paced() {
                return self.enter_queue(lane, retry.listener, now);
            }
        }
        match self.commit(retry, now) {
            Ok(next) => next,
            Err(Stop {
                lift: Some(Lift::BudgetEmpty { listener }),
                ..
            }) => {
                // An empty budget slows the endpoint instead of dropping the request.
                lane.budget_empty(now);
                self.enter_queue(lane, listener.map(|l| *l), now)
            }
            Err(stop) => self.stop(stop),
        }
    }

    /// Joins `lane`'s queue at `now`, or says why it cannot.
    fn queue(&mut self, lane: &Lane, now: Instant) -> Result<QueueWait, Deferred> {
        let wait = lane.join(self.deadline.room(now), now, self.attempts == 0)?;
        let attempts = self.attempts;
        self.trail().joined_queue(attempts, now);
        Ok(wait)
    }

    fn enter_queue(&mut self, lane: &Lane, listener: Option<Listener>, now: Instant) -> Next {
        match self.queue(lane, now) {
            Ok(wait) => {
                decision!(attempt = self.attempts, "waiting in the endpoint's queue");
                Next::Queue {
                    wait,
                    listener,
                    deadline: self.deadline(),
                }
            }
            Err(Deferred { resend_after }) => {
                self.retry_in(resend_after);
                Next::Stop(StopReason::Deferred)
            }
        }
    }

    /// With pacing, a request whose sleep began while its endpoint was open and ended while it
    /// is paced waits in its queue instead of firing on its own timer; and if the queue cannot
    /// take it (full, or a predicted wait beyond the deadline), it is not sent either.
    pub(crate) fn queue_after_sleep(&mut self, now: Instant) -> AfterSleep {
        if self.config.pacer.is_none() {
            return AfterSleep::Send;
        }
        let config = Arc::clone(&self.config);
        let Some(pacer) = config.pacer.as_ref() else {
            return AfterSleep::Send;
        };
        let Some(lane) = pacer.lane(self.authority().as_deref()) else {
            return AfterSleep::Send;
        };
        if !lane.is_paced() {
            return AfterSleep::Send;
        }
        match self.queue(&lane, now) {
            Ok(wait) => AfterSleep::Queue(wait),
            Err(deferred) => AfterSleep::Deferred(deferred),
        }
    }

    /// With pacing and its first-attempt gate on, whether a new request to `request`'s endpoint
    /// waits for the pacer (the endpoint is down). It joins the queue only when its future is
    /// first polled ([`join_first_queue`](Self::join_first_queue)): a future not polled yet must
    /// not hold the head of the queue.
    #[inline]
    pub(crate) fn first_attempt_waits(&self, request: &Req) -> bool {
        // Checked before anything else: the path of every call when pacing is off.
        let Some(pacer) = self
            .config
            .pacer
            .as_ref()
            .filter(|pacer| pacer.config().first_attempts)
        else {
            return false;
        };
        pacer.is_paced(request.authority().as_deref())
    }

    /// The first attempt's place in its endpoint's queue, joined at `now`, and the listener its
    /// wait is aborted with. `None` when it goes at once (the endpoint is open again, or its
    /// queue cannot take it: a first attempt has no outcome to return instead, so it is sent).
    pub(crate) fn join_first_queue(
        &mut self,
        now: Instant,
    ) -> Option<(QueueWait, Option<Listener>)> {
        let config = Arc::clone(&self.config);
        let pacer = config.pacer.as_ref()?;
        let authority = self.authority().map(std::borrow::Cow::into_owned);
        let lane = pacer.lane(authority.as_ref())?;
        if !lane.is_paced() {
            return None;
        }
        let abort = config.settings.abort.as_ref();
        if abort.is_some_and(|abort| abort.is_shut_down()) {
            // Made after a shutdown: it waits for nothing, as a first-attempt delay does not.
            return None;
        }
        let listener = abort.map(|abort| abort.listen(authority.as_ref()));
        let wait = self.queue(&lane, now).ok()?;
        Some((wait, listener))
    }
}

impl<Req, C> Session<Req, C> {
    /// How long a request to `authority` that joined its queue at `now` would wait, if its
    /// endpoint is known and paced (for the report's resend time).
    pub(super) fn predicted_release(
        &self,
        authority: Option<&Authority>,
        now: Instant,
    ) -> Option<Duration> {
        let pacer = self.config.pacer.as_ref()?;
        pacer.predicted_release(authority, now)
    }
}

/// A breaker's hold, lifted: the endpoint pauses until it ends, and the request may wait (with
/// the listener its wait is ended by). Any other stop stands.
fn lift_hold(stop: Stop, lane: &Lane, now: Instant) -> Result<Option<Listener>, Stop> {
    match stop.lift {
        Some(Lift::Held { until, listener }) => {
            lane.pause_until(until, now);
            Ok(Some(*listener))
        }
        _ => Err(stop),
    }
}

/// What an outcome says of the endpoint's load; `congestion` is the classifier's word on a
/// transient response.
pub(super) fn signal_of<Res, E>(
    outcome: Outcome,
    congestion: bool,
    result: &Result<Res, E>,
) -> Signal {
    match (outcome, result) {
        (Outcome::Success, _) => Signal::Success,
        // Transient errors are timeouts and connection failures: what an overloaded or
        // unreachable endpoint looks like.
        (Outcome::Transient, Err(_)) | (Outcome::NotSent(NotSent::Unconnected), _) => {
            Signal::Congestion
        }
        (Outcome::Transient, Ok(_)) if congestion => Signal::Congestion,
        _ => Signal::Neutral,
    }
}
