//! [`RetryFuture`]: one logical request, from its first attempt to its last outcome. The
//! decisions are the [session's](super::session), the waits between attempts are
//! [`Wait`](super::wait::Wait)'s; this file is the poll plumbing.
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

use super::nested::retrying;
use super::session::{AfterWait, Next, Session};
use super::wait::Wait;
use super::watch::AbortWatch;
use crate::classify::Classify;
use crate::message::{RetryRequest, RetryResponse};
use crate::telemetry::{in_attempt, Attempt};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::time::Instant;
use tower_service::Service;

pin_project! {
    /// The future of [`Retry`](crate::retry::Retry): resolves to the last response or error of the
    /// inner service.
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
                State::Waiting { wait } => this
                    .session
                    .dropped(Some(wait.interrupted()), Instant::now()),
                State::Calling { .. } => this.session.dropped(None, Instant::now()),
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Res, E> {
        // An attempt is in flight, polled with the inner layers told `mark`.
        Calling {
            #[pin]
            future: F,
            mark: Option<bool>,
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

impl<F, Res, E> State<F, Res, E> {
    fn waiting(wait: Wait<Res, E>) -> Self {
        State::Waiting {
            wait: Box::pin(wait),
        }
    }
}

impl<S, Req, C> RetryFuture<S, Req, C>
where
    S: Service<Req>,
    Req: RetryRequest,
{
    /// The first attempt is in flight (`future`, polled with the inner layers told `mark`);
    /// `service`, if kept, is the one retries go to.
    #[inline]
    pub(crate) fn calling(
        session: Session<Req, C>,
        future: Attempt<S::Future>,
        mark: Option<bool>,
        service: Option<S>,
    ) -> Self {
        Self {
            state: State::Calling { future, mark },
            service,
            session,
        }
    }

    /// The first attempt waits in the endpoint's queue (pacing holds it), joined at the first
    /// poll, then goes to `service` once ready.
    pub(crate) fn gated(session: Session<Req, C>, service: S) -> Self {
        Self {
            state: State::waiting(Wait::joining()),
            service: Some(service),
            session,
        }
    }

    /// The first attempt waits `U(0, first_attempt_jitter)`, then goes to `service` once ready.
    pub(crate) fn delayed(mut session: Session<Req, C>, service: S) -> Self {
        let (delay, listener) = session.first_attempt_delay();
        Self {
            state: State::waiting(Wait::sleeping(
                delay,
                listener.map(AbortWatch::new),
                None,
                None,
            )),
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
    S::Error: 'static,
    C: Classify<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { mut future, mark } => {
                    let result = ready!(retrying(*mark, || future.as_mut().poll(cx)));
                    let Some(classified) = this.session.classify_or_finish(&result) else {
                        this.state.set(State::Done);
                        return Poll::Ready(result);
                    };
                    // The decision on this outcome is the attempt's: its events in its span.
                    let _in_attempt = in_attempt(&*future);
                    match this
                        .session
                        .decide_classified(&result, classified, Instant::now)
                    {
                        Next::Stop(reason) => {
                            this.state.set(State::Done);
                            if this.session.finished_first_try(reason) {
                                return Poll::Ready(result);
                            }
                            return Poll::Ready(this.session.finish(result, reason));
                        }
                        Next::Sleep {
                            delay,
                            watch,
                            token,
                        } => this.state.set(State::waiting(Wait::sleeping(
                            delay,
                            watch,
                            Some(result),
                            token,
                        ))),
                        Next::Queue {
                            wait,
                            listener,
                            deadline,
                        } => this.state.set(State::waiting(Wait::queued(
                            wait,
                            deadline,
                            listener,
                            Some(result),
                        ))),
                    }
                }
                StateProj::Waiting { wait } => {
                    let service = this
                        .service
                        .as_mut()
                        .expect("a request that waits keeps a service");
                    let session = &mut *this.session;
                    // Only a wait that watches an abort signal reads the endpoint.
                    let scope = session.abort_scope();
                    let (abort, authority) = match &scope {
                        Some((abort, authority)) => (Some(*abort), authority.as_deref()),
                        None => (None, None),
                    };
                    let woke = ready!(wait.as_mut().poll_wait(cx, abort, authority, service));
                    drop(scope);
                    let (queue, retrying) = (wait.queued_in(), wait.retrying());
                    match session.after_wait(woke, queue, retrying, Instant::now()) {
                        AfterWait::Queue {
                            queue,
                            deadline,
                            listener,
                        } => wait.as_mut().queue(queue, deadline, listener),
                        AfterWait::Ready => wait.as_mut().ready(),
                        AfterWait::Send => {
                            wait.as_mut().spend();
                            // The previous outcome is released here, as the next attempt is sent.
                            let (future, mark) = session.send(service);
                            this.state.set(State::Calling { future, mark });
                        }
                        AfterWait::Stop(reason) => {
                            let result = wait.as_mut().take_last();
                            this.state.set(State::Done);
                            return Poll::Ready(session.finish(result, reason));
                        }
                        AfterWait::StopWith(result, reason) => {
                            this.state.set(State::Done);
                            return Poll::Ready(session.finish(result, reason));
                        }
                        AfterWait::Done(output) => {
                            this.state.set(State::Done);
                            return Poll::Ready(output);
                        }
                    }
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
            State::Waiting { wait } => wait.name(),
            State::Done => "done",
        };
        f.debug_struct("RetryFuture")
            .field("state", &state)
            .field("attempts", &self.session.progress().0)
            .field("slept", &self.session.progress().1)
            .finish_non_exhaustive()
    }
}
