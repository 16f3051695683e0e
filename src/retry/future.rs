//! [`RetryFuture`]: one logical request, from its first attempt to its last outcome. The
//! decisions are the [session's](super::session); this file is the poll plumbing.
//!
//! ```text
//!  call ──> Calling ──── success / permanent / a reason to stop ────> Done
//!             ^    └──── transient, retry granted ───┐
//!             │                                      v
//!             └── next attempt ──── Waiting: Sleeping ──> Readying (poll_ready the stored clone)
//!                                      │  Queued (the pacer holds it) ──┘
//!                                      └── aborted (at any point) ──> Done, last outcome
//!
//!  call, endpoint down ──> Waiting: Joining ── first poll ──> Queued (or Readying if open again)
//! ```

use super::budget::Withdrawal;
use super::nested::retrying;
use super::session::{AfterSleep, Next, Session};
use super::watch::AbortWatch;
use crate::abort::Listener;
use crate::classify::Classify;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacer::QueueWait;
use crate::report::StopReason;
use crate::telemetry::Attempt;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

pin_project! {
    /// The future of [`Retry`](crate::Retry): resolves to the last response or error of the inner
    /// service.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct RetryFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<Attempt<S::Future>, S::Response, S::Error>,
        // The service retries are sent to; `None` when the request is sent only once.
        service: Option<S>,
        session: Session<Req, C>,
    }

    impl<S, Req, C> PinnedDrop for RetryFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            match &*this.state {
                State::Done => return,
                // Dropped mid-sleep (an outer timeout fired): the report shows the time slept.
                State::Waiting { wait } => match &wait.phase {
                    Phase::Sleeping { sleep } => {
                        let remaining = sleep.deadline().saturating_duration_since(Instant::now());
                        this.session.cut_last_sleep(remaining);
                    }
                    Phase::Queued { .. } => this.session.left_queue(Instant::now()),
                    Phase::Joining | Phase::Readying => {}
                },
                State::Calling { .. } => {}
            }
            this.session.cancel();
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Res, E> {
        // An attempt is in flight.
        Calling {
            #[pin]
            future: F,
        },
        // Between attempts. Boxed: only a request that waits pays for it, and the future of one
        // that succeeds at once stays small (it is moved several times between `call` and the
        // executor).
        Waiting {
            wait: Pin<Box<Wait<Res, E>>>,
        },
        Done,
    }
}

pin_project! {
    // A request between two attempts. It holds the last outcome (`None` before the first
    // attempt) until the next attempt is sent, so that an abort at any point returns it, and the
    // budget token the retry will spend.
    struct Wait<Res, E> {
        #[pin]
        phase: Phase,
        // `None` without an abort signal, or once it has fired before the first attempt.
        #[pin]
        watch: Option<AbortWatch>,
        last: Option<Result<Res, E>>,
        token: Option<Withdrawal>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase {
        // The delay is running.
        Sleeping {
            #[pin]
            sleep: Sleep,
        },
        // Waiting in the endpoint's queue until the pacer lets the request go, or until the
        // request's deadline.
        Queued {
            #[pin]
            queue: QueueWait,
            #[pin]
            deadline: Option<Sleep>,
        },
        // A first attempt to an endpoint that was down when it was made: it joins the queue when
        // first polled, so that a future nobody polls yet holds no place at the head.
        Joining,
        // The delay is over: the stored service is polled to readiness.
        Readying,
    }
}

impl<F, Res, E> State<F, Res, E> {
    fn queued(
        queue: QueueWait,
        deadline: Option<Instant>,
        listener: Option<Listener>,
        last: Option<Result<Res, E>>,
    ) -> Self {
        State::Waiting {
            wait: Box::pin(Wait {
                phase: Phase::Queued {
                    queue,
                    deadline: deadline.map(tokio::time::sleep_until),
                },
                watch: listener.map(AbortWatch::shutdown_only),
                last,
                token: None,
            }),
        }
    }

    fn waiting(
        delay: Duration,
        watch: Option<AbortWatch>,
        last: Option<Result<Res, E>>,
        token: Option<Withdrawal>,
    ) -> Self {
        State::Waiting {
            wait: Box::pin(Wait {
                phase: Phase::Sleeping {
                    sleep: tokio::time::sleep(delay),
                },
                watch,
                last,
                token,
            }),
        }
    }
}

impl<S, Req, C> RetryFuture<S, Req, C>
where
    S: Service<Req>,
    Req: RetryRequest,
{
    /// The first attempt is sent now to `service` (already ready), which is kept for retries.
    #[inline]
    pub(crate) fn sent(session: Session<Req, C>, request: Req, service: S) -> Self {
        // Built in place and then filled in: the session is large (it holds the request copy),
        // and every move of it is a copy on the path of every request.
        let mut this = Self {
            state: State::Done,
            service: Some(service),
            session,
        };
        let service = this.service.as_mut().expect("just stored");
        let future = this.session.send_request(request, service);
        this.state = State::Calling { future };
        this
    }

    /// The only attempt is sent now to `service` (already ready); nothing is kept.
    #[inline]
    pub(crate) fn sent_once(session: Session<Req, C>, request: Req, service: &mut S) -> Self {
        let mut this = Self {
            state: State::Done,
            service: None,
            session,
        };
        let future = this.session.send_request(request, service);
        this.state = State::Calling { future };
        this
    }

    /// The first attempt waits in the endpoint's queue (pacing holds it), joined at the first
    /// poll, then goes to `service` once ready.
    pub(crate) fn gated(session: Session<Req, C>, service: S) -> Self {
        Self {
            state: State::Waiting {
                wait: Box::pin(Wait {
                    phase: Phase::Joining,
                    watch: None,
                    last: None,
                    token: None,
                }),
            },
            service: Some(service),
            session,
        }
    }

    /// The first attempt waits `U(0, first_attempt_jitter)`, then goes to `service` once ready.
    pub(crate) fn delayed(mut session: Session<Req, C>, service: S) -> Self {
        let (delay, listener) = session.first_attempt_delay();
        Self {
            state: State::waiting(delay, listener.map(AbortWatch::new), None, None),
            service: Some(service),
            session,
        }
    }
}

impl<S, Req, C> Future for RetryFuture<S, Req, C>
where
    S: Service<Req>,
    S::Response: RetryResponse,
    Req: RetryRequest,
    C: Classify<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => {
                    let mark = this.session.inner_layers_mark();
                    let result = ready!(retrying(mark, || future.poll(cx)));
                    match this.session.decide(&result, Instant::now) {
                        Next::Stop(reason) => {
                            this.state.set(State::Done);
                            return Poll::Ready(this.session.finish(result, reason));
                        }
                        Next::Sleep {
                            delay,
                            listener,
                            token,
                        } => this.state.set(State::waiting(
                            delay,
                            listener.map(|l| this.session.sleep_watch(l)),
                            Some(result),
                            token,
                        )),
                        Next::Queue {
                            wait,
                            listener,
                            deadline,
                        } => this
                            .state
                            .set(State::queued(wait, deadline, listener, Some(result))),
                    }
                }
                StateProj::Waiting { wait } => {
                    let mut wait = wait.as_mut().project();
                    let session = &mut *this.session;
                    let aborted = match wait.watch.as_mut().as_pin_mut() {
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
                        wait.watch.set(None);
                        match wait.phase.as_mut().project() {
                            PhaseProj::Sleeping { sleep } => {
                                let remaining =
                                    sleep.deadline().saturating_duration_since(Instant::now());
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
                        if let Some(result) = wait.last.take() {
                            let stop = session.stop_for(forbidden, Instant::now());
                            this.state.set(State::Done);
                            return Poll::Ready(session.finish(result, stop));
                        }
                        // Aborted before the first attempt: there is no outcome yet, send now.
                    }
                    match wait.phase.as_mut().project() {
                        PhaseProj::Joining => {
                            match session.join_first_queue(Instant::now()) {
                                Some((queue, listener)) => {
                                    let deadline = session.deadline().map(tokio::time::sleep_until);
                                    wait.phase.set(Phase::Queued { queue, deadline });
                                    wait.watch.set(listener.map(AbortWatch::shutdown_only));
                                }
                                None => wait.phase.set(Phase::Readying),
                            }
                            continue;
                        }
                        PhaseProj::Sleeping { sleep } => {
                            ready!(sleep.poll(cx));
                            session.sleep_ended();
                            let now = Instant::now();
                            match session.queue_after_sleep(now) {
                                AfterSleep::Queue(queue) => {
                                    // Paced meanwhile: the pacer, not the budget, lets it go.
                                    drop(wait.token.take());
                                    let deadline = session.deadline().map(tokio::time::sleep_until);
                                    wait.phase.set(Phase::Queued { queue, deadline });
                                    continue;
                                }
                                AfterSleep::Deferred(deferred) => {
                                    wait.phase.set(Phase::Readying);
                                    if let Some(result) = wait.last.take() {
                                        // Paced meanwhile and no room in the queue: not sent
                                        // ahead of the probes, handed back with when to retry.
                                        drop(wait.token.take());
                                        session.retry_in(deferred.retry_after);
                                        this.state.set(State::Done);
                                        return Poll::Ready(
                                            session.finish(result, StopReason::Deferred),
                                        );
                                    }
                                    // A first attempt has no outcome to return: it is sent.
                                }
                                AfterSleep::Send => wait.phase.set(Phase::Readying),
                            }
                        }
                        PhaseProj::Queued { queue, deadline } => {
                            let expired = deadline
                                .as_pin_mut()
                                .is_some_and(|deadline| deadline.poll(cx).is_ready());
                            if expired {
                                let now = Instant::now();
                                session.left_queue(now);
                                session.sleep_ended();
                                if let Some(result) = wait.last.take() {
                                    // The deadline came before the pacer let it go: handed
                                    // back, with when to try again.
                                    session.retry_in(queue.defer(now));
                                    wait.phase.set(Phase::Readying);
                                    this.state.set(State::Done);
                                    return Poll::Ready(
                                        session.finish(result, StopReason::Deferred),
                                    );
                                }
                                // A first attempt has no outcome to return: it is sent.
                                wait.phase.set(Phase::Readying);
                            } else {
                                let pass = ready!(queue.poll_release(cx));
                                session.released(pass, Instant::now());
                                wait.phase.set(Phase::Readying);
                            }
                        }
                        PhaseProj::Readying => {}
                    }
                    let service = this
                        .service
                        .as_mut()
                        .expect("a request that waits keeps a service");
                    if let Err(error) = ready!(service.poll_ready(cx)) {
                        drop(wait.token.take());
                        this.state.set(State::Done);
                        return Poll::Ready(session.finish(Err(error), StopReason::NotReady));
                    }
                    // Ready only after the deadline (another request held the permit): the
                    // retry is not sent and its token goes back. A first attempt, which has no
                    // outcome to return instead, is sent all the same.
                    if session.past_deadline(Instant::now()) {
                        if let Some(result) = wait.last.take() {
                            drop(wait.token.take());
                            this.state.set(State::Done);
                            return Poll::Ready(session.finish(result, StopReason::Deadline));
                        }
                    }
                    if let Some(token) = wait.token.take() {
                        token.spend();
                    }
                    // The previous outcome is released here, as the next attempt is sent.
                    let future = session.send(service);
                    this.state.set(State::Calling { future });
                }
                StateProj::Done => panic!("RetryFuture polled after completion"),
            }
        }
    }
}

impl<S, Req, C> fmt::Debug for RetryFuture<S, Req, C>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Calling { .. } => "calling",
            State::Waiting { wait } => match wait.phase {
                Phase::Sleeping { .. } => "sleeping",
                Phase::Queued { .. } => "queued",
                Phase::Joining => "joining",
                Phase::Readying => "readying",
            },
            State::Done => "done",
        };
        f.debug_struct("RetryFuture")
            .field("state", &state)
            .field("attempts", &self.session.attempts())
            .field("slept", &self.session.slept())
            .finish_non_exhaustive()
    }
}
