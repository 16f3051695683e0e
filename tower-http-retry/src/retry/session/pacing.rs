//! Pacing as the retry session sees it, through the pacer's one handle for an endpoint
//! ([`Lane`]): the outcome booked to the endpoint before the ladder runs, then one step that
//! rewrites the ladder's verdict ([`pace`](Session::pace)); and the queue joined instead of a
//! sleep, after a sleep, or by a first attempt while its endpoint is down.

use super::verdict::{Facts, Lift, Retry, Stop, Verdict};
use super::{Next, Now, Session};
use crate::abort::Listener;
use crate::classify::{Classify, NotSent, Outcome};
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{Deferred, Lane, QueueWait, Resend, Signal};
use crate::random::uniform;
use crate::report::{DelaySource, StopReason, Unsent};
use crate::retry::hand_back::HandBack;
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
    /// [`StopReason::Deferred`] (a first attempt, with no outcome to return, is handed back
    /// unsent if its classifier can, else sent: [`Session::hand_back`]).
    Deferred(Lane, Deferred),
}

/// Where a first attempt to an endpoint that was down goes, once its future is first polled.
/// (Moved once, into the wait that holds it: the size of the queue's place is no cost.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum FirstQueue {
    /// It waits in the queue, its wait ended early by the listener (with an abort signal).
    Joined(QueueWait, Option<Listener>),
    /// It goes now: the endpoint is open again (or the request is not paced).
    Go,
    /// The queue cannot take it: it is handed back unsent if its classifier can, else sent.
    TurnedAway(Lane, Resend),
}

/// The endpoint an outcome was booked to, and whether the server's hint on it paused the whole
/// endpoint.
pub(crate) struct Booked {
    lane: Lane,
    paused: bool,
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Tells the pacer what the outcome says of the endpoint: its load, and what the server's
    /// hint (clamped) says, whatever becomes of this request. A used-up quota (on a success, or
    /// a hint that is the quota's reset) pauses the endpoint until its reset; any other hint
    /// pauses it only when nothing gets through, else it is a rate signal. Returns the endpoint
    /// (`None` without pacing, or when its map is full and the request is not paced).
    pub(super) fn book<Res, E, F>(
        &mut self,
        facts: &Facts,
        result: &Result<Res, E>,
        now: &mut Now<F>,
    ) -> Option<Booked>
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
        F: FnOnce() -> Instant,
    {
        // Checked before anything else: the path of every outcome when pacing is off.
        self.config.pacer.as_ref()?;
        let config = Arc::clone(&self.config);
        let pacer = config.pacer.as_ref()?;
        // A rotation says the endpoint is up, whatever became of the request.
        let signal = if facts.rotation {
            Signal::Neutral
        } else {
            signal_of(facts.classified, facts.congestion, result)
        };
        let hint = self.hint_delay(&facts.hint);
        let pass = self.waits.as_mut().and_then(|waits| waits.pass.take());
        let lane = match &pass {
            Some(pass) => pass.lane(),
            // A success that was not let through by the pacer, with no hint, concerns no
            // settled endpoint (open, no congestion counted, nobody queued): while every
            // endpoint is, it takes no lock and reads no clock, and it never makes an endpoint
            // (a new one would be settled).
            None if signal == Signal::Success && hint.is_none() => {
                if pacer.all_settled() {
                    return None;
                }
                pacer.existing(self.authority().as_deref())?
            }
            None => pacer.lane(self.authority().as_deref())?,
        };
        let now = now.get();
        // The hint first, against what the pacer knew before this answer: an endpoint this
        // very answer marks down is paused by the next hint, not by this one.
        let paused = match hint.map(|after| now + after.min(config.retry_after_clamp)) {
            Some(until) if facts.outcome == Outcome::Success => {
                // A success that used up the quota: the next requests wait for its reset.
                config.counters.quota_paused();
                lane.pause_until(until, now);
                true
            }
            Some(until) if facts.hint.is_quota_reset() => {
                lane.pause_until(until, now);
                true
            }
            Some(until) => lane.hinted(until, now),
            None => false,
        };
        match pass {
            Some(pass) => pass.record(signal, now),
            None => lane.record(signal, now),
        }
        Some(Booked { lane, paused })
    }

    /// The ladder's verdict with pacing, rewritten in this one place:
    /// * a breaker's refusal pauses the endpoint until the breaker lets a probe through; a
    ///   request that may be sent again then waits in the queue (if it may wait at all), not
    ///   stopping as `CircuitOpen`;
    /// * a breaker's hold pauses the endpoint, and the ladder goes on: the request waits;
    /// * a retry whose wait came from the server's hint, to an endpoint that still takes other
    ///   requests, sleeps the hint (a floor for it), then waits its turn;
    /// * a retry to an endpoint that is paced waits in its queue instead of sleeping (neither
    ///   the deadline's check of the sleep nor the budget applies: the queue has its own);
    /// * an empty budget paces the endpoint instead of dropping the request.
    ///
    /// A free resend of a request the server turned away unprocessed is not paced.
    pub(super) fn pace(
        &mut self,
        verdict: Verdict,
        facts: &Facts,
        booked: &Booked,
        now: Instant,
    ) -> Next {
        let lane = &booked.lane;
        let stop = match verdict {
            Verdict::Retry(retry) => return self.pace_retry(retry, booked, now),
            Verdict::Stop(stop) => stop,
        };
        match stop.lift {
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
                    Verdict::Retry(retry) => self.pace_retry(retry, booked, now),
                    Verdict::Stop(stop) => self.stop(stop),
                },
                Err(stop) => self.stop(stop),
            },
            _ => self.stop(stop),
        }
    }

    /// A retry, with pacing (see [`pace`](Self::pace)).
    fn pace_retry(&mut self, retry: Retry, booked: &Booked, now: Instant) -> Next {
        let lane = &booked.lane;
        if retry.source != DelaySource::Refused {
            let hinted = matches!(
                retry.source,
                DelaySource::RetryAfter | DelaySource::RetryAfterClamped
            );
            if hinted && !booked.paused && lane.is_paced() {
                // A floor for this request: it sleeps its hint, then waits its turn.
                return self.floor(retry, now);
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

    /// A hint's wait as a floor for this request while its endpoint is paced and still takes
    /// others: it sleeps the hint (within its deadline), then joins the queue (the pacer, not the
    /// budget, lets it go: no token).
    fn floor(&mut self, retry: Retry, now: Instant) -> Next {
        if !self.deadline.fits(retry.delay, now) {
            return self.stop(Stop::resend(StopReason::Deadline, retry.delay));
        }
        self.record_delay(retry.delay, retry.source);
        decision!(
            attempt = self.tries.sent(),
            delay = ?retry.delay,
            "waiting out the server's hint before the endpoint's queue"
        );
        Next::Sleep {
            delay: retry.delay,
            watch: retry.listener.map(|listener| self.sleep_watch(listener)),
            token: None,
        }
    }

    /// Joins `lane`'s queue at `now`, or says why it cannot.
    fn queue(&mut self, lane: &Lane, now: Instant) -> Result<QueueWait, Deferred> {
        let first = self.tries.sent() == 0;
        let wait = QueueWait::join(lane, self.deadline.room(now), now, first)?;
        let attempts = self.tries.sent();
        self.trail().joined_queue(attempts, now);
        Ok(wait)
    }

    fn enter_queue(&mut self, lane: &Lane, listener: Option<Listener>, now: Instant) -> Next {
        match self.queue(lane, now) {
            Ok(wait) => {
                decision!(
                    attempt = self.tries.sent(),
                    "waiting in the endpoint's queue"
                );
                Next::Queue {
                    wait,
                    listener,
                    deadline: self.deadline(),
                }
            }
            Err(Deferred { resend }) => {
                self.resend_in(resend);
                Next::Stop(StopReason::Deferred)
            }
        }
    }

    /// With pacing, a request whose sleep began while its endpoint was open and ended while it
    /// is paced waits in its queue instead of firing on its own timer; and if the queue cannot
    /// take it (full, or a predicted wait beyond the deadline), it is not sent either.
    pub(super) fn queue_after_sleep(&mut self, now: Instant) -> AfterSleep {
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
        if !lane.queues() {
            return AfterSleep::Send;
        }
        if let Some(pass) = QueueWait::admit(&lane, now) {
            self.waits().pass = Some(pass);
            return AfterSleep::Send;
        }
        match self.queue(&lane, now) {
            Ok(wait) => AfterSleep::Queue(wait),
            Err(deferred) => AfterSleep::Deferred(lane, deferred),
        }
    }

    /// With pacing and its first-attempt gate on, whether a new request to `request`'s endpoint
    /// waits for the pacer (the endpoint is down). It joins the queue only when its future is
    /// first polled ([`join_first_queue`](Self::join_first_queue)): a future not polled yet must
    /// not hold the head of the queue.
    #[inline]
    pub(super) fn first_attempt_waits(&self, request: &Req) -> bool {
        // Checked before anything else: the path of every call when pacing is off.
        let Some(pacer) = self.config.pacer.as_ref() else {
            return false;
        };
        if pacer.limits() && self.config.settings.first_attempt_jitter.is_zero() {
            // Every attempt counts in flight: the first goes through the queue too (after its
            // jitter, when it has one: the queue is joined when the jitter's sleep ends).
            return true;
        }
        pacer.rules().first_attempts && pacer.is_paced(request.authority().as_deref())
    }

    /// Where the first attempt goes at `now`, when its endpoint was down as it was made: into
    /// the queue, at once, or (the queue cannot take it) turned away.
    pub(super) fn join_first_queue(&mut self, now: Instant) -> FirstQueue {
        let config = Arc::clone(&self.config);
        let Some(pacer) = config.pacer.as_ref() else {
            return FirstQueue::Go;
        };
        let authority = self.authority().map(std::borrow::Cow::into_owned);
        let Some(lane) = pacer.lane(authority.as_ref()) else {
            return FirstQueue::Go;
        };
        if !lane.queues() {
            return FirstQueue::Go;
        }
        if let Some(pass) = QueueWait::admit(&lane, now) {
            self.waits().pass = Some(pass);
            return FirstQueue::Go;
        }
        let abort = config.settings.abort.as_ref();
        if abort.is_some_and(|abort| abort.is_shut_down()) {
            // Made after a shutdown: it waits for nothing, as a first-attempt delay does not.
            return FirstQueue::Go;
        }
        match self.queue(&lane, now) {
            Ok(wait) => {
                let listener = abort.map(|abort| abort.listen(authority.as_ref()));
                FirstQueue::Joined(wait, listener)
            }
            Err(Deferred { resend }) => FirstQueue::TurnedAway(lane, resend),
        }
    }

    /// A first attempt the pacer turned away (queue full, a wait past its deadline), handed back
    /// unsent when the layer can ([`HandBack`]): nothing is sent to an endpoint
    /// known to be down. The report says [`StopReason::Deferred`], no attempt, and when to send
    /// it again (`resend`, spread by the request's own jitter, or later when the layer knows
    /// more); `count` books it to the pacer. `None`: the layer sends it.
    pub(super) fn hand_back<Res, E>(
        &mut self,
        resend: Resend,
        now: Instant,
        count: impl FnOnce(),
    ) -> Option<Result<Res, E>>
    where
        Res: RetryResponse,
        C: HandBack<Res, E>,
    {
        let make = self.config.classifier.hand_back()?;
        count();
        decision!("handing back a request to an endpoint known to be down, unsent");
        self.resend_in(resend);
        self.settle_resend(now);
        self.end(StopReason::Deferred);
        let report = self.report(StopReason::Deferred);
        let output = make(Unsent::new(report.clone()));
        Some(self.deliver(output, report))
    }
}

impl<Req, C> Session<Req, C> {
    /// A first attempt turned away is sent all the same (its classifier cannot hand it back):
    /// with adaptive concurrency it counts in flight, over the limit if need be.
    pub(super) fn send_turned_away(&mut self, lane: &Lane, now: Instant) {
        if let Some(pass) = QueueWait::counted(lane, now) {
            self.waits().pass = Some(pass);
        }
    }

    /// The request is to be sent again after `resend`: its own jitter spreads it within the
    /// place the pacer gave it.
    pub(super) fn resend_in(&mut self, resend: Resend) {
        let jitter = uniform(Duration::ZERO, resend.spread, self.rng());
        self.retry_in(resend.after.saturating_add(jitter));
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
