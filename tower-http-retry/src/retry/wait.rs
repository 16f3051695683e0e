//! [`Wait`]: one request between two attempts. It owns everything the wait needs: the sleep or
//! the place in the endpoint's queue, the abort watch, the deadline timer, the budget token the
//! retry will spend, and the last outcome, returned if the wait ends in a stop. The response
//! future only polls it ([`Wait::poll_wait`]) and sends or finishes on what it says.

use super::budget::Withdrawal;
use super::session::{AfterSleep, FirstQueue, Session};
use super::watch::AbortWatch;
use crate::abort::Listener;
use crate::classify::Classify;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::QueueWait;
use crate::report::StopReason;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

pin_project! {
    /// A request between two attempts. It holds the last outcome (`None` before the first
    /// attempt) until the next attempt is sent, so that an abort at any point returns it, and
    /// the budget token the retry will spend.
    pub(crate) struct Wait<Res, E> {
        #[pin]
        phase: Phase,
        // `None` without an abort signal, or once it has fired before the first attempt. Boxed,
        // as the deadline's timer: most requests have neither, and a waiting request's size is
        // what a queue of thousands costs.
        watch: Option<Pin<Box<AbortWatch>>>,
        // Boxed, as the sleep: a request waiting for its first attempt has neither.
        last: Option<Box<Result<Res, E>>>,
        token: Option<Withdrawal>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase {
        // The delay is running.
        Sleeping {
            sleep: Pin<Box<Sleep>>,
        },
        // Waiting in the endpoint's queue until the pacer lets the request go, or until the
        // request's deadline.
        Queued {
            #[pin]
            queue: QueueWait,
            deadline: Option<Pin<Box<Sleep>>>,
        },
        // A first attempt to an endpoint that was down when it was made: it joins the queue when
        // first polled, so that a future nobody polls yet holds no place at the head.
        Joining,
        // The delay is over: the stored service is polled to readiness.
        Readying,
    }
}

/// The timer of a wait in the queue that ends at the request's deadline, if it has one.
fn deadline_timer(deadline: Option<Instant>) -> Option<Pin<Box<Sleep>>> {
    deadline.map(|at| Box::pin(tokio::time::sleep_until(at)))
}

/// How a wait ended.
pub(crate) enum Waited<Res, E> {
    /// The service is ready and the token spent: send the next attempt.
    Send,
    /// No attempt follows: finish with this outcome and reason.
    Stop(Result<Res, E>, StopReason),
    /// A first attempt handed back unsent: the request is finished, with this output.
    Done(Result<Res, E>),
}

impl<Res, E> Wait<Res, E> {
    /// Waits in the endpoint's queue until the pacer lets the request go, or until `deadline`.
    pub(crate) fn queued(
        queue: QueueWait,
        deadline: Option<Instant>,
        listener: Option<Listener>,
        last: Option<Result<Res, E>>,
    ) -> Self {
        Self {
            phase: Phase::Queued {
                queue,
                deadline: deadline_timer(deadline),
            },
            watch: listener.map(|listener| Box::pin(AbortWatch::shutdown_only(listener))),
            last: last.map(Box::new),
            token: None,
        }
    }

    /// Sleeps `delay`, ended early by `watch`.
    pub(crate) fn sleeping(
        delay: Duration,
        watch: Option<AbortWatch>,
        last: Option<Result<Res, E>>,
        token: Option<Withdrawal>,
    ) -> Self {
        Self {
            phase: Phase::Sleeping {
                sleep: Box::pin(tokio::time::sleep(delay)),
            },
            watch: watch.map(Box::pin),
            last: last.map(Box::new),
            token,
        }
    }

    /// A first attempt that joins its endpoint's queue when first polled.
    pub(crate) fn joining() -> Self {
        Self {
            phase: Phase::Joining,
            watch: None,
            last: None,
            token: None,
        }
    }

    /// What it is doing, for `Debug`.
    pub(crate) fn name(&self) -> &'static str {
        match self.phase {
            Phase::Sleeping { .. } => "sleeping",
            Phase::Queued { .. } => "queued",
            Phase::Joining => "joining",
            Phase::Readying => "readying",
        }
    }

    /// The future was dropped mid-wait (an outer timeout fired): the report shows the time
    /// waited.
    pub(crate) fn dropped<Req, C>(&self, session: &mut Session<Req, C>) {
        match &self.phase {
            Phase::Sleeping { sleep } => {
                let remaining = sleep.deadline().saturating_duration_since(Instant::now());
                session.cut_last_sleep(remaining);
            }
            Phase::Queued { .. } => session.left_queue(Instant::now()),
            Phase::Joining | Phase::Readying => {}
        }
    }

    /// Polls the wait to its end: `service` ready for the next attempt, or a stop.
    pub(crate) fn poll_wait<Req, C, S>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        session: &mut Session<Req, C>,
        service: &mut S,
    ) -> Poll<Waited<Res, E>>
    where
        Req: RetryRequest,
        Res: RetryResponse,
        C: Classify<Res, E>,
        S: Service<Req, Response = Res, Error = E>,
    {
        let mut wait = self.project();
        loop {
            let aborted = match wait.watch.as_mut().map(Pin::as_mut) {
                Some(watch) => {
                    let abort = session.config().settings.abort.as_ref();
                    let abort = abort.expect("a watch comes from the abort signal");
                    match watch.poll_abort(cx, abort, session.authority().as_deref()) {
                        Poll::Ready(forbidden) => Some(forbidden),
                        Poll::Pending => None,
                    }
                }
                None => None,
            };
            if let Some(forbidden) = aborted {
                *wait.watch = None;
                match wait.phase.as_mut().project() {
                    PhaseProj::Sleeping { sleep } => {
                        let remaining = sleep.deadline().saturating_duration_since(Instant::now());
                        session.cut_last_sleep(remaining);
                        session.sleep_ended();
                    }
                    PhaseProj::Queued { .. } => {
                        session.left_queue(Instant::now());
                        session.sleep_ended();
                    }
                    PhaseProj::Joining | PhaseProj::Readying => {}
                }
                wait.phase.set(Phase::Readying);
                drop(wait.token.take()); // refunded: this retry will not be sent
                if let Some(result) = wait.last.take().map(|last| *last) {
                    let stop = session.stop_for(forbidden, Instant::now());
                    return Poll::Ready(Waited::Stop(result, stop));
                }
                // Aborted before the first attempt: there is no outcome yet, send now.
            }
            match wait.phase.as_mut().project() {
                PhaseProj::Joining => {
                    let now = Instant::now();
                    match session.join_first_queue(now) {
                        FirstQueue::Joined(queue, listener) => {
                            let deadline = deadline_timer(session.deadline());
                            wait.phase.set(Phase::Queued { queue, deadline });
                            *wait.watch = listener
                                .map(|listener| Box::pin(AbortWatch::shutdown_only(listener)));
                        }
                        FirstQueue::TurnedAway(lane, resend) => {
                            wait.phase.set(Phase::Readying);
                            if let Some(output) =
                                session.hand_back(resend, now, || lane.turned_away(now))
                            {
                                return Poll::Ready(Waited::Done(output));
                            }
                        }
                        FirstQueue::Go => wait.phase.set(Phase::Readying),
                    }
                    continue;
                }
                PhaseProj::Sleeping { sleep } => {
                    ready!(sleep.as_mut().poll(cx));
                    session.sleep_ended();
                    let now = Instant::now();
                    match session.queue_after_sleep(now) {
                        AfterSleep::Queue(queue) => {
                            // Paced meanwhile: the pacer, not the budget, lets it go.
                            drop(wait.token.take());
                            let deadline = deadline_timer(session.deadline());
                            wait.phase.set(Phase::Queued { queue, deadline });
                            continue;
                        }
                        AfterSleep::Deferred(lane, deferred) => {
                            wait.phase.set(Phase::Readying);
                            if let Some(result) = wait.last.take().map(|last| *last) {
                                // Paced meanwhile and no room in the queue: not sent ahead of
                                // the probes, handed back with when to retry.
                                drop(wait.token.take());
                                session.resend_in(deferred.resend);
                                return Poll::Ready(Waited::Stop(result, StopReason::Deferred));
                            }
                            // A first attempt has no outcome to return: handed back unsent if
                            // the classifier can, else sent.
                            let turned_away = || lane.turned_away(now);
                            if let Some(output) =
                                session.hand_back(deferred.resend, now, turned_away)
                            {
                                return Poll::Ready(Waited::Done(output));
                            }
                        }
                        AfterSleep::Send => wait.phase.set(Phase::Readying),
                    }
                }
                PhaseProj::Queued { queue, deadline } => {
                    let expired = deadline
                        .as_mut()
                        .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                    if expired {
                        let now = Instant::now();
                        session.left_queue(now);
                        session.sleep_ended();
                        if let Some(result) = wait.last.take().map(|last| *last) {
                            // The deadline came before the pacer let it go: handed back, with
                            // when to try again.
                            session.resend_in(queue.defer(now));
                            wait.phase.set(Phase::Readying);
                            return Poll::Ready(Waited::Stop(result, StopReason::Deferred));
                        }
                        // A first attempt has no outcome to return: handed back unsent if the
                        // classifier can, else sent.
                        let resend = queue.resend_after(now);
                        let handed = session.hand_back(resend, now, || queue.deferred());
                        wait.phase.set(Phase::Readying);
                        if let Some(output) = handed {
                            return Poll::Ready(Waited::Done(output));
                        }
                    } else {
                        let pass = ready!(queue.poll_release(cx));
                        session.released(pass, Instant::now());
                        wait.phase.set(Phase::Readying);
                    }
                }
                PhaseProj::Readying => {}
            }
            if let Err(error) = ready!(service.poll_ready(cx)) {
                drop(wait.token.take());
                return Poll::Ready(Waited::Stop(Err(error), StopReason::NotReady));
            }
            // Ready only after the deadline (another request held the permit): the retry is not
            // sent and its token goes back. A first attempt, which has no outcome to return
            // instead, is sent all the same.
            if session.past_deadline(Instant::now()) {
                if let Some(result) = wait.last.take().map(|last| *last) {
                    drop(wait.token.take());
                    return Poll::Ready(Waited::Stop(result, StopReason::Deadline));
                }
            }
            if let Some(token) = wait.token.take() {
                token.spend();
            }
            return Poll::Ready(Waited::Send);
        }
    }
}
