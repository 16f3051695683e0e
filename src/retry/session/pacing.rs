//! Pacing as the retry session sees it: the outcome booked to the endpoint, the queue joined
//! instead of a sleep, a first attempt held while its endpoint is down.

use super::{Next, Session};
use crate::abort::Listener;
use crate::classify::{NotSent, Outcome};
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{Deferred, Endpoint, QueueWait, Signal};
use crate::report::{DelaySource, StopReason};
use crate::telemetry::decision;
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

impl<Req, C> Session<Req, C> {
    /// Joins `endpoint`'s queue at `now`, or says why it cannot.
    pub(super) fn queue(
        &mut self,
        endpoint: &Arc<Endpoint>,
        now: Instant,
    ) -> Result<QueueWait, Deferred> {
        let wait = endpoint.enqueue(self.deadline.room(now), now, self.attempts == 0)?;
        self.record_delay(Duration::ZERO, DelaySource::Paced);
        self.waits().queued_at = Some(now);
        Ok(wait)
    }
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Tells the pacer what the outcome says of the endpoint; returns the endpoint (`None`
    /// when its map is full and the request is not paced).
    pub(super) fn learn<Res: RetryResponse, E>(
        &mut self,
        outcome: Outcome,
        congestion: bool,
        result: &Result<Res, E>,
        now: Instant,
    ) -> Option<Arc<Endpoint>> {
        let config = Arc::clone(&self.config);
        let pacer = config.pacer.as_ref()?;
        let signal = signal_of(outcome, congestion, result);
        match self.waits.as_mut().and_then(|waits| waits.pass.take()) {
            Some(pass) => {
                let endpoint = pass.endpoint();
                pass.record(signal, now);
                Some(endpoint)
            }
            None => {
                let endpoint = pacer.endpoint(self.authority().as_deref())?;
                endpoint.record(None, signal, now);
                Some(endpoint)
            }
        }
    }

    pub(super) fn enter_queue(
        &mut self,
        endpoint: &Arc<Endpoint>,
        listener: Option<Listener>,
        now: Instant,
    ) -> Next {
        match self.queue(endpoint, now) {
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
        let Some(endpoint) = pacer.endpoint(self.authority().as_deref()) else {
            return AfterSleep::Send;
        };
        if !endpoint.is_paced() {
            return AfterSleep::Send;
        }
        match self.queue(&endpoint, now) {
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
        let endpoint = pacer.endpoint(authority.as_ref())?;
        if !endpoint.is_paced() {
            return None;
        }
        let abort = config.settings.abort.as_ref();
        if abort.is_some_and(|abort| abort.is_shut_down()) {
            // Made after a shutdown: it waits for nothing, as a first-attempt delay does not.
            return None;
        }
        let listener = abort.map(|abort| abort.listen(authority.as_ref()));
        let wait = self.queue(&endpoint, now).ok()?;
        Some((wait, listener))
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
