//! [`Wait`]: one request between two attempts. It owns everything the wait needs: the sleep or
//! the place in the endpoint's queue, the abort watch, the deadline timer, the budget token the
//! retry will spend, and the last outcome, returned if the wait ends in a stop. It only waits:
//! [`Wait::poll_wait`] resolves to how the wait ended ([`Woke`]), the session decides the next
//! step ([`Step`](super::session::Step)), and the response future sets it here
//! ([`queue`](Wait::queue), [`ready`](Wait::ready), [`spend`](Wait::spend),
//! [`take_last`](Wait::take_last)).

use super::budget::Withdrawal;
use super::session::{Interrupted, Woke};
use super::watch::AbortWatch;
use crate::abort::{AbortSignal, Listener};
use crate::pacing::QueueWait;
use http::uri::Authority;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

pin_project! {
    #[project = WaitProj]
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
        // The wait has just ended (slept, released, or expired in the queue) and the session
        // sent it on to the service: the next poll goes to readiness without looking at the
        // abort signal first, as a wait that ends goes on in the same poll.
        woke: bool,
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

impl Phase {
    /// What a wait in this phase was doing, if it is cut short now.
    fn interrupted(&self) -> Interrupted {
        match self {
            Phase::Sleeping { sleep } => {
                Interrupted::Sleep(sleep.deadline().saturating_duration_since(Instant::now()))
            }
            Phase::Queued { .. } => Interrupted::Queue,
            Phase::Joining | Phase::Readying => Interrupted::Nothing,
        }
    }
}

/// The timer of a wait in the queue that ends at the request's deadline, if it has one.
fn deadline_timer(deadline: Option<Instant>) -> Option<Pin<Box<Sleep>>> {
    deadline.map(|at| Box::pin(tokio::time::sleep_until(at)))
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
            woke: false,
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
            woke: false,
        }
    }

    /// A first attempt that joins its endpoint's queue when first polled.
    pub(crate) fn joining() -> Self {
        Self {
            phase: Phase::Joining,
            watch: None,
            last: None,
            token: None,
            woke: false,
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

    /// What the wait is doing, for the session's accounting when it is cut short.
    pub(crate) fn interrupted(&self) -> Interrupted {
        self.phase.interrupted()
    }

    /// The place it holds in its endpoint's queue, if it waits there.
    pub(crate) fn queued_in(&self) -> Option<&QueueWait> {
        match &self.phase {
            Phase::Queued { queue, .. } => Some(queue),
            _ => None,
        }
    }

    /// Whether it holds a last outcome: a retry's wait, not a first attempt's.
    pub(crate) fn retrying(&self) -> bool {
        self.last.is_some()
    }

    /// Waits in `queue` until the pacer lets it go, or until `deadline`; the pacer, not the
    /// budget, lets it go, so a token held is refunded. `listener`, if any, watches for shutdown.
    pub(crate) fn queue(
        self: Pin<&mut Self>,
        queue: QueueWait,
        deadline: Option<Instant>,
        listener: Option<Listener>,
    ) {
        let mut wait = self.project();
        drop(wait.token.take());
        *wait.woke = false;
        wait.phase.set(Phase::Queued {
            queue,
            deadline: deadline_timer(deadline),
        });
        if let Some(listener) = listener {
            *wait.watch = Some(Box::pin(AbortWatch::shutdown_only(listener)));
        }
    }

    /// The wait is over: the service is polled to readiness next.
    pub(crate) fn ready(self: Pin<&mut Self>) {
        self.project().phase.set(Phase::Readying);
    }

    /// The next attempt is sent: the token held, if any, is spent.
    pub(crate) fn spend(self: Pin<&mut Self>) {
        if let Some(token) = self.project().token.take() {
            token.spend();
        }
    }

    /// The last outcome, to finish with (the token held, if any, is refunded).
    pub(crate) fn take_last(self: Pin<&mut Self>) -> Result<Res, E> {
        let wait = self.project();
        drop(wait.token.take());
        *wait
            .last
            .take()
            .expect("a retry's wait holds its last outcome")
    }

    /// Polls the wait to its end: how it ended. `abort` and `authority` are the request's
    /// abort signal and endpoint, for the watch.
    pub(crate) fn poll_wait<S, Req>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        abort: Option<&AbortSignal>,
        authority: Option<&Authority>,
        service: &mut S,
    ) -> Poll<Woke<E>>
    where
        S: Service<Req, Response = Res, Error = E>,
    {
        let mut wait = self.project();
        if !std::mem::take(wait.woke) {
            if let Some(aborted) = poll_aborted(&mut wait, cx, abort, authority) {
                return Poll::Ready(aborted);
            }
        }
        let woke = match wait.phase.as_mut().project() {
            PhaseProj::Joining => return Poll::Ready(Woke::Joining),
            PhaseProj::Sleeping { sleep } => {
                ready!(sleep.as_mut().poll(cx));
                Woke::Slept
            }
            PhaseProj::Queued { queue, deadline } => {
                if deadline
                    .as_mut()
                    .is_some_and(|at| at.as_mut().poll(cx).is_ready())
                {
                    // It keeps its place until the session has read when to send it again.
                    *wait.woke = true;
                    return Poll::Ready(Woke::QueueExpired);
                }
                Woke::Released(ready!(queue.poll_release(cx)))
            }
            PhaseProj::Readying => {
                return Poll::Ready(match ready!(service.poll_ready(cx)) {
                    Ok(()) => Woke::Ready,
                    Err(error) => {
                        drop(wait.token.take());
                        Woke::NotReady(error)
                    }
                });
            }
        };
        wait.phase.set(Phase::Readying);
        *wait.woke = true;
        Poll::Ready(woke)
    }
}

/// The abort signal, if the wait watches one and it fired: the wait ends, its token refunded
/// (this retry will not be sent).
fn poll_aborted<Res, E>(
    wait: &mut WaitProj<'_, Res, E>,
    cx: &mut Context<'_>,
    abort: Option<&AbortSignal>,
    authority: Option<&Authority>,
) -> Option<Woke<E>> {
    let watch = wait.watch.as_mut()?.as_mut();
    let abort = abort.expect("a watch comes from the abort signal");
    let Poll::Ready(forbidden) = watch.poll_abort(cx, abort, authority) else {
        return None;
    };
    *wait.watch = None;
    let interrupted = wait.phase.interrupted();
    wait.phase.set(Phase::Readying);
    drop(wait.token.take());
    Some(Woke::Aborted(forbidden, interrupted))
}
