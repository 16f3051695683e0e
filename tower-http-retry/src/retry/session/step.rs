//! The one entry point of the retry core's decisions: the response future turns each poll that
//! ends something into an [`Event`], and does the [`Step`] that [`Session::decide`] returns for
//! it and `now`.

use super::{Next, Session};
use crate::abort::Forbidden;
use crate::abort::Listener;
use crate::classify::{Classify, Outcome};
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::PassGuard;
use crate::pacing::QueueWait;
use crate::report::StopReason;
use crate::retry::budget::Withdrawal;
use crate::retry::hand_back::HandBack;
use crate::retry::watch::AbortWatch;
use crate::telemetry::EndedSpan;
use std::time::Duration;
use tokio::time::Instant;

/// What ended, for the session to decide on.
pub(crate) enum Event<'a, Res, E> {
    /// An attempt ended with this outcome (its span entered for the decision, if it takes one).
    Answered(&'a Result<Res, E>, EndedSpan<'a>),
    /// A wait between attempts ended.
    Woke(WaitEnded<'a, E>),
}

/// A wait between attempts that ended: how, the place it still holds in its endpoint's queue,
/// if any, and whether it holds a last outcome (a retry) or none (a first attempt).
pub(crate) struct WaitEnded<'a, E> {
    pub(crate) woke: Woke<E>,
    pub(crate) queue: Option<&'a QueueWait>,
    pub(crate) retrying: bool,
}

/// How a wait between attempts ended.
pub(crate) enum Woke<E> {
    /// The abort signal fired, interrupting what the wait was doing.
    Aborted(Forbidden, Interrupted),
    /// A first attempt to an endpoint that was down when it was made is first polled: its turn
    /// to join the endpoint's queue.
    Joining,
    /// The delay is over.
    Slept,
    /// The pacer let it go.
    Released(PassGuard),
    /// The request's deadline came while it waited in the queue (the wait still holds its place,
    /// passed beside the event).
    QueueExpired,
    /// The service is ready for the next attempt.
    Ready,
    /// The service failed to become ready.
    NotReady(E),
}

/// What a wait was doing when it was cut short.
pub(crate) enum Interrupted {
    /// Sleeping, with this much left.
    Sleep(Duration),
    /// Waiting in the endpoint's queue.
    Queue,
    /// Nothing to account for (joining, or readying the service).
    Nothing,
}

/// The next step, for the response future to take.
pub(crate) enum Step<Res, E> {
    /// Return the outcome just answered as it is: a success at the first try, already recorded
    /// (the counters, a waiting slot).
    Respond,
    /// Sleep `delay`, cut short by `watch` (an abort signal's), holding `token` (the budget's),
    /// keeping the outcome just answered.
    Sleep {
        delay: Duration,
        watch: Option<AbortWatch>,
        token: Option<Withdrawal>,
    },
    /// Wait in the endpoint's queue until the pacer lets the request go or until `deadline`: the
    /// pacer, not the budget, lets it go (a budget token held is refunded). `listener`, if any,
    /// ends the wait early on shutdown.
    Queue {
        queue: QueueWait,
        deadline: Option<Instant>,
        listener: Option<Listener>,
    },
    /// Poll the service to readiness.
    Ready,
    /// Send the next attempt: the budget token held is spent.
    Send,
    /// No attempt follows: finish with the last outcome (the one just answered, or the one the
    /// wait holds, whose token is refunded) and this reason, already recorded.
    Stop(StopReason),
    /// No attempt follows: finish with this outcome and reason, already recorded.
    StopWith(Result<Res, E>, StopReason),
    /// A first attempt handed back unsent: the request is finished, with this output.
    Done(Result<Res, E>),
}

impl<Req, C> Session<Req, C>
where
    Req: RetryRequest,
{
    /// The step after `event`; `now` is read only when the decision needs the clock (not for a
    /// success at the first try without pacing, the common end).
    #[inline(always)]
    pub(crate) fn decide<Res, E>(
        &mut self,
        event: Event<'_, Res, E>,
        now: impl FnOnce() -> Instant,
    ) -> Step<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E> + HandBack<Res, E>,
    {
        match event {
            Event::Answered(result, span) => {
                let classified = self.classify(result);
                if self.first_try_success(result, classified) {
                    return Step::Respond;
                }
                self.after_answer(result, classified, &span, now)
            }
            Event::Woke(ended) => self.after_wait(ended, now()),
        }
    }

    /// The step after an attempt answered `result`, classified as `classified`, that did not
    /// end as a first-try success without pacing.
    fn after_answer<Res, E>(
        &mut self,
        result: &Result<Res, E>,
        classified: Outcome,
        span: &EndedSpan<'_>,
        now: impl FnOnce() -> Instant,
    ) -> Step<Res, E>
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        // The decision on this outcome is the attempt's: its events in its span.
        let _in_attempt = span.enter();
        match self.decide_classified(result, classified, now) {
            // With pacing, a success at the first try ends here.
            Next::Stop(reason) if self.finished_first_try(reason) => Step::Respond,
            Next::Stop(reason) => {
                self.end(reason);
                Step::Stop(reason)
            }
            Next::Sleep {
                delay,
                watch,
                token,
            } => Step::Sleep {
                delay,
                watch,
                token,
            },
            Next::Queue {
                wait,
                listener,
                deadline,
            } => Step::Queue {
                queue: wait,
                deadline,
                listener,
            },
        }
    }
}
